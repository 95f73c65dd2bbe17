//! Message bodies: a stamp followed by incompressible random bytes, by default.
//!
//! Each producer owns a [`PayloadBuilder`] with a pool of random bytes generated once. Every
//! message copies its tail from a different offset of the pool, so consecutive messages differ
//! (a broker or proxy that compresses or deduplicates gains nothing) while building a message
//! costs one memcpy and no allocation.
//!
//! Systems in the middle that need text get it from a [`PayloadPlan`]: the text stamp followed
//! by printable filler (`stamp = "text"`), or a [`Template`] (JSON for a gateway) with the text
//! stamp inside. Filler then comes from a printable pool built the same way.

use crate::rng::Rng;
use crate::stamp::{STAMP_LEN, Stamp, TEXT_STAMP_LEN};
use crate::template::Template;
use serde::{Deserialize, Serialize};

/// How the stamp travels in a message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StampFormat {
    /// 40 binary bytes at offset 0 (the default: smallest and cheapest, for opaque payloads).
    #[default]
    Binary,
    /// 58 printable bytes ([`crate::stamp::TEXT_STAMP_LEN`]), found anywhere in a delivery:
    /// for systems that require text or re-encode what they relay.
    Text,
}

impl StampFormat {
    /// The stamp's size in bytes: the smallest message of this format.
    pub fn stamp_len(self) -> usize {
        match self {
            StampFormat::Binary => STAMP_LEN,
            StampFormat::Text => TEXT_STAMP_LEN,
        }
    }

    fn is_binary(&self) -> bool {
        *self == StampFormat::Binary
    }
}

/// What fills a message after its stamp (and a template's `{{pad}}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Content {
    /// Incompressible random bytes (printable ones with a text stamp): the default, so that a
    /// compressing or deduplicating system gains nothing it would not gain in production.
    #[default]
    Random,
    /// Zero bytes (`0` characters with a text stamp): the best case for compression.
    Zeros,
    /// English-like words and spaces, with a text stamp: compresses about as well as prose,
    /// for systems whose compression (Kafka's codecs, permessage-deflate) is being measured.
    Text,
}

impl Content {
    fn is_random(&self) -> bool {
        *self == Content::Random
    }
}

/// What producers' messages look like beyond their size: the stamp's form, the filler and an
/// optional template. The default (binary stamp, random bytes) is left out of results files.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayloadPlan {
    /// The stamp's form; always [`StampFormat::Text`] with a template.
    #[serde(default, skip_serializing_if = "StampFormat::is_binary")]
    pub stamp: StampFormat,
    /// The message template (see [`crate::template`]), already read from its file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// What fills the message after the stamp.
    #[serde(default, skip_serializing_if = "Content::is_random")]
    pub content: Content,
    /// Messages are these files' contents after the stamp, one file per message, round robin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<PayloadFiles>,
}

/// A folder of message bodies (`--payload-files DIR`): real documents, so that what a system
/// does with content (compression, parsing, routing by content) sees production data. Each
/// message is the stamp followed by one file, the files taken in turn (by name), so sizes are
/// the files' own.
///
/// The results file records the folder and the count; the bodies are read once, at planning,
/// and shared by the producers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayloadFiles {
    /// The folder, as given.
    pub dir: String,
    /// How many files it held.
    pub count: usize,
    /// The files' contents, in name order (not in results files).
    #[serde(skip)]
    pub bodies: Bodies,
}

/// Payload files' contents, shared by the producers.
pub type Bodies = std::sync::Arc<Vec<Box<[u8]>>>;

impl PartialEq for PayloadFiles {
    /// The same folder and count: the contents are not compared (a results file has none).
    fn eq(&self, other: &Self) -> bool {
        (&self.dir, self.count) == (&other.dir, other.count)
    }
}

impl Eq for PayloadFiles {}

impl PayloadFiles {
    /// Reads every regular file of `dir` (not its sub-folders), in name order.
    pub fn read(dir: &str) -> Result<PayloadFiles, String> {
        let entries =
            std::fs::read_dir(dir).map_err(|e| format!("cannot read the folder `{dir}`: {e}"))?;
        let mut paths = Vec::new();
        for e in entries {
            let e = e.map_err(|e| format!("cannot read the folder `{dir}`: {e}"))?;
            if e.file_type().is_ok_and(|t| t.is_file()) {
                paths.push(e.path());
            }
        }
        paths.sort();
        if paths.is_empty() {
            return Err(format!("the folder `{dir}` holds no files"));
        }
        let mut bodies = Vec::with_capacity(paths.len());
        for p in &paths {
            let b = std::fs::read(p).map_err(|e| format!("cannot read `{}`: {e}", p.display()))?;
            bodies.push(b.into_boxed_slice());
        }
        Ok(PayloadFiles {
            dir: dir.to_string(),
            count: bodies.len(),
            bodies: std::sync::Arc::new(bodies),
        })
    }

    /// The sizes of the messages built from these files under a stamp of `stamp_len` bytes.
    pub fn sizes(&self, stamp_len: usize) -> SizeSpec {
        let lens = self.bodies.iter().map(|b| (b.len() + stamp_len) as u64);
        let (min, max) = lens.fold((u64::MAX, 0), |(lo, hi), n| (lo.min(n), hi.max(n)));
        if min == max {
            SizeSpec::Fixed { bytes: min }
        } else {
            SizeSpec::Range { min, max }
        }
    }
}

impl PayloadPlan {
    /// Binary stamps and random bytes: nothing to record.
    pub fn is_default(&self) -> bool {
        *self == PayloadPlan::default()
    }

    /// Every message is UTF-8 text: a template's documents, or a text stamp followed by the
    /// pool's printable filler or by payload files that are all UTF-8. Protocols that tell
    /// text from binary (WebSocket) send such messages as text, which text-only endpoints
    /// require.
    pub fn is_text(&self) -> bool {
        if self.template.is_some() {
            return true;
        }
        self.stamp == StampFormat::Text
            && self
                .files
                .as_ref()
                .is_none_or(|f| f.bodies.iter().all(|b| std::str::from_utf8(b).is_ok()))
    }

    /// Checks the template parses and fits `size`, and that every message can hold the stamp.
    /// Returns the parsed template.
    pub fn validate(&self, size: &SizeSpec) -> Result<Option<Template>, String> {
        if let Some(f) = &self.files {
            if self.template.is_some() {
                return Err("payload files and a payload template exclude each other".into());
            }
            if f.bodies.len() != f.count {
                return Err(format!("the payload files of `{}` were not read", f.dir));
            }
            return Ok(None);
        }
        let Some(src) = &self.template else {
            if self.stamp == StampFormat::Text && size.min() < TEXT_STAMP_LEN as u64 {
                return Err(format!(
                    "message size {} is below the {TEXT_STAMP_LEN}-byte text stamp; use at least {TEXT_STAMP_LEN}",
                    size.min()
                ));
            }
            return Ok(None);
        };
        if self.stamp != StampFormat::Text {
            return Err(
                "a payload template carries a text stamp: leave the stamp format at text".into(),
            );
        }
        let t = Template::parse(src).map_err(|e| e.to_string())?;
        if t.pads() && t.min_len() as u64 > size.min() {
            return Err(format!(
                "the payload template needs at least {} bytes before padding, more than the message size {} (raise --size or shorten the template)",
                t.min_len(),
                size.min()
            ));
        }
        Ok(Some(t))
    }
}

pub use crate::sizes::{SizeSampler, SizeSpec};

const POOL: usize = 64 * 1024;

/// Fills the pool message bodies are copied from: random bytes (folded onto `[A-Za-z0-9]`
/// under a text stamp), zeros, or words.
fn fill_pool(pool: &mut [u8], content: Content, format: StampFormat, rng: &mut Rng) {
    match (content, format) {
        (Content::Random, StampFormat::Binary) => rng.fill(pool),
        (Content::Random, StampFormat::Text) => {
            rng.fill(pool);
            const ALNUM: &[u8; 62] =
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
            for b in pool {
                *b = ALNUM[*b as usize % ALNUM.len()];
            }
        }
        (Content::Zeros, StampFormat::Binary) => pool.fill(0),
        (Content::Zeros, StampFormat::Text) => pool.fill(b'0'),
        (Content::Text, _) => {
            const WORDS: [&str; 32] = [
                "the", "of", "and", "to", "in", "message", "is", "for", "on", "that", "order",
                "with", "price", "as", "by", "at", "from", "this", "trade", "be", "or", "an",
                "market", "are", "was", "it", "value", "not", "which", "stream", "have", "event",
            ];
            let mut at = 0;
            while at < pool.len() {
                let w = WORDS[(rng.next_u64() % WORDS.len() as u64) as usize].as_bytes();
                let n = w.len().min(pool.len() - at);
                pool[at..at + n].copy_from_slice(&w[..n]);
                at += n;
                if at < pool.len() {
                    pool[at] = b' ';
                    at += 1;
                }
            }
        }
    }
}

/// Builds stamped payloads for one producer into a reusable buffer.
#[derive(Debug)]
pub struct PayloadBuilder {
    /// The size of every message when it is fixed (the common case, taken without a draw),
    /// else 0.
    fixed_len: usize,
    sizes: SizeSampler,
    format: StampFormat,
    template: Option<Template>,
    /// Monotonic → Unix nanoseconds, for a template's `{{time}}`.
    unix_offset_ns: u64,
    pool: Vec<u8>,
    buf: Vec<u8>,
    rng: Rng,
    cursor: usize,
    /// Payload files: the bodies, and the next one's index.
    files: Option<(Bodies, usize)>,
}

impl PayloadBuilder {
    /// A builder for `size` messages of binary stamps and random bytes, seeded by `seed`.
    pub fn new(size: &SizeSpec, seed: u64) -> Self {
        Self::with_plan(size, &PayloadPlan::default(), seed)
            .expect("binary stamps need no validation beyond the size's")
    }

    /// A builder for `size` messages shaped by `plan` (validated again here: a bad template is
    /// an error, not a panic), its random content seeded by `seed`.
    pub fn with_plan(size: &SizeSpec, plan: &PayloadPlan, seed: u64) -> Result<Self, String> {
        let template = plan.validate(size)?;
        let format = if template.is_some() {
            StampFormat::Text
        } else {
            plan.stamp
        };
        let mut rng = Rng::new(seed);
        let longest_file = plan.files.as_ref().map_or(0, |f| {
            f.bodies.iter().map(|b| b.len()).max().unwrap_or(0) + format.stamp_len()
        });
        let max = (size.max() as usize).max(longest_file);
        let mut pool = vec![0u8; POOL + max];
        fill_pool(&mut pool, plan.content, format, &mut rng);
        let unix_offset_ns = crate::clock::realtime_ns().wrapping_sub(crate::clock::now_ns());
        let sizes = SizeSampler::new(size, &mut rng);
        Ok(Self {
            fixed_len: match sizes {
                SizeSampler::Fixed(n) => n,
                _ => 0,
            },
            sizes,
            format,
            template,
            unix_offset_ns,
            pool,
            buf: vec![0u8; max.max(format.stamp_len())],
            files: plan.files.as_ref().map(|f| {
                let first = (seed % f.count.max(1) as u64) as usize;
                (f.bodies.clone(), first)
            }),
            rng,
            cursor: 0,
        })
    }

    /// Builds the next message and returns it (valid until the next call): by default `stamp`
    /// then random bytes; the text stamp then printable bytes; or the template rendered.
    #[inline]
    pub fn build(&mut self, stamp: &Stamp) -> &[u8] {
        if self.files.is_some() {
            return self.build_from_file(stamp);
        }
        let len = match self.fixed_len {
            0 => self.sizes.next(&mut self.rng),
            n => n,
        };
        // Walk the pool in order, one byte further than the body each time: consecutive bodies
        // differ and share nothing, and the copy reads memory the CPU has already prefetched (a
        // stride across the pool missed the L1 cache on every message, a sixth of the
        // producer's CPU at a million messages per second).
        self.cursor = (self.cursor + len + 1) % POOL;
        if let Some(t) = &self.template {
            let filler = &self.pool[self.cursor..self.cursor + len];
            t.render(stamp, self.unix_offset_ns, len, filler, &mut self.buf);
            return &self.buf;
        }
        let head = self.format.stamp_len();
        let tail = len - head;
        if tail > 0 {
            self.buf[head..len].copy_from_slice(&self.pool[self.cursor..self.cursor + tail]);
        }
        match self.format {
            StampFormat::Binary => stamp.write(&mut self.buf),
            StampFormat::Text => stamp.write_text(&mut self.buf),
        }
        &self.buf[..len]
    }

    /// The stamp, then the next payload file.
    fn build_from_file(&mut self, stamp: &Stamp) -> &[u8] {
        let Some((bodies, next)) = self.files.as_mut() else {
            unreachable!("called with payload files only")
        };
        let body = &bodies[*next];
        *next = (*next + 1) % bodies.len();
        let head = self.format.stamp_len();
        let len = head + body.len();
        self.buf[head..len].copy_from_slice(body);
        match self.format {
            StampFormat::Binary => stamp.write(&mut self.buf),
            StampFormat::Text => stamp.write_text(&mut self.buf),
        }
        &self.buf[..len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(seq: u64) -> Stamp {
        Stamp {
            run_id: 1,
            producer: 0,
            stream: 0,
            seq,
            intended_ns: 0,
            sent_ns: 0,
        }
    }

    #[test]
    fn text_plans_are_told_apart_from_binary_ones() {
        let files = |bodies: Vec<&[u8]>| PayloadFiles {
            dir: "d".into(),
            count: bodies.len(),
            bodies: std::sync::Arc::new(bodies.into_iter().map(Box::from).collect()),
        };
        let text = PayloadPlan {
            stamp: StampFormat::Text,
            ..Default::default()
        };
        assert!(!PayloadPlan::default().is_text());
        assert!(text.is_text());
        for content in [Content::Zeros, Content::Text] {
            assert!(
                PayloadPlan {
                    content,
                    ..text.clone()
                }
                .is_text()
            );
        }
        assert!(
            PayloadPlan {
                template: Some("{\"a\":1}".into()),
                ..Default::default()
            }
            .is_text()
        );
        let utf8 = files(vec![b"{}", "caf\u{e9}".as_bytes()]);
        assert!(
            PayloadPlan {
                files: Some(utf8),
                ..text.clone()
            }
            .is_text()
        );
        let binary = files(vec![b"{}", &[0xff, 0xfe]]);
        assert!(
            !PayloadPlan {
                files: Some(binary),
                ..text
            }
            .is_text()
        );
        // Text messages are what the builder makes of a text plan.
        let mut b = PayloadBuilder::with_plan(
            &SizeSpec::Fixed { bytes: 300 },
            &PayloadPlan {
                stamp: StampFormat::Text,
                ..Default::default()
            },
            3,
        )
        .unwrap();
        for seq in 0..50 {
            assert!(std::str::from_utf8(b.build(&stamp(seq))).is_ok());
        }
    }

    #[test]
    fn fixed_size_with_stamp_and_varying_bodies() {
        let mut b = PayloadBuilder::new(&SizeSpec::Fixed { bytes: 1024 }, 7);
        let first = b.build(&stamp(0)).to_vec();
        let second = b.build(&stamp(1)).to_vec();
        assert_eq!(first.len(), 1024);
        assert_eq!(Stamp::read(&second).unwrap().seq, 1);
        assert_ne!(first[STAMP_LEN..], second[STAMP_LEN..]);
    }

    #[test]
    fn payload_files_follow_the_stamp_in_turn() {
        let dir = std::env::temp_dir().join(format!("msgbench-pf-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        for (name, body) in [
            ("b.json", &b"{\"b\":2}"[..]),
            ("a.json", b"{\"a\":1,\"x\":[]}"),
        ] {
            std::fs::write(dir.join(name), body).unwrap();
        }
        let f = PayloadFiles::read(dir.to_str().unwrap()).unwrap();
        assert_eq!(f.count, 2, "sub-folders are not files");
        assert_eq!(
            f.sizes(STAMP_LEN),
            SizeSpec::Range {
                min: STAMP_LEN as u64 + 7,
                max: STAMP_LEN as u64 + 14
            }
        );
        let sizes = f.sizes(STAMP_LEN);
        let plan = PayloadPlan {
            files: Some(f),
            ..PayloadPlan::default()
        };
        // Seed 0 starts at the first file by name; then they take turns.
        let mut b = PayloadBuilder::with_plan(&sizes, &plan, 0).unwrap();
        let bodies: Vec<Vec<u8>> = (0..3)
            .map(|i| {
                let m = b.build(&stamp(i)).to_vec();
                assert_eq!(Stamp::read(&m).unwrap().seq, i);
                m[STAMP_LEN..].to_vec()
            })
            .collect();
        assert_eq!(bodies[0], b"{\"a\":1,\"x\":[]}");
        assert_eq!(bodies[1], b"{\"b\":2}");
        assert_eq!(bodies[2], bodies[0]);
        let empty = dir.join("sub");
        let e = PayloadFiles::read(empty.to_str().unwrap()).unwrap_err();
        assert!(e.contains("holds no files"), "{e}");
        assert!(
            PayloadFiles::read("/nonexistent/x")
                .unwrap_err()
                .contains("cannot read")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn text_stamps_and_templates() {
        let text = PayloadPlan {
            stamp: StampFormat::Text,
            ..PayloadPlan::default()
        };
        let mut b = PayloadBuilder::with_plan(&SizeSpec::Fixed { bytes: 200 }, &text, 7).unwrap();
        let m = b.build(&stamp(4)).to_vec();
        assert_eq!(m.len(), 200);
        assert!(m.iter().all(|c| c.is_ascii_graphic()), "printable");
        assert_eq!(Stamp::find(&m).unwrap().seq, 4);
        let small = PayloadBuilder::with_plan(&SizeSpec::Fixed { bytes: 50 }, &text, 7);
        assert!(small.unwrap_err().contains("text stamp"));

        let json = PayloadPlan {
            stamp: StampFormat::Text,
            template: Some(r#"{"id":"{{stamp}}","n":{{seq}},"fill":"{{pad}}"}"#.into()),
            ..PayloadPlan::default()
        };
        let range = SizeSpec::Range { min: 100, max: 300 };
        let mut b = PayloadBuilder::with_plan(&range, &json, 7).unwrap();
        for i in 0..100 {
            let m = b.build(&stamp(i)).to_vec();
            assert!((100..=300).contains(&m.len()), "{}", m.len());
            let v: serde_json::Value = serde_json::from_slice(&m).unwrap();
            assert_eq!(v["n"], i);
            assert_eq!(Stamp::find(&m).unwrap().seq, i);
        }
        // Too large for the size, or a binary stamp asked for: clear errors.
        let e = PayloadBuilder::with_plan(&SizeSpec::Fixed { bytes: 64 }, &json, 7).unwrap_err();
        assert!(e.contains("needs at least"), "{e}");
        let binary = PayloadPlan {
            stamp: StampFormat::Binary,
            ..json
        };
        assert!(binary.validate(&range).is_err());
    }

    #[test]
    fn zeros_and_words_fill_after_the_stamp() {
        let zeros = PayloadPlan {
            content: Content::Zeros,
            ..PayloadPlan::default()
        };
        let mut b = PayloadBuilder::with_plan(&SizeSpec::Fixed { bytes: 300 }, &zeros, 7).unwrap();
        let m = b.build(&stamp(3)).to_vec();
        assert_eq!(Stamp::read(&m).unwrap().seq, 3);
        assert!(m[STAMP_LEN..].iter().all(|&x| x == 0));
        let words = PayloadPlan {
            stamp: StampFormat::Text,
            content: Content::Text,
            ..PayloadPlan::default()
        };
        let mut b = PayloadBuilder::with_plan(&SizeSpec::Fixed { bytes: 500 }, &words, 7).unwrap();
        let m = String::from_utf8(b.build(&stamp(5)).to_vec()).unwrap();
        assert_eq!(Stamp::find(m.as_bytes()).unwrap().seq, 5);
        assert!(m.contains(" the ") || m.contains(" of "), "{m}");
        assert!(m.split(' ').count() > 40, "{m}");
    }

    #[test]
    fn range_sizes_stay_in_range() {
        let mut b = PayloadBuilder::new(&SizeSpec::Range { min: 40, max: 100 }, 7);
        let mut seen = std::collections::HashSet::new();
        for i in 0..1000 {
            let n = b.build(&stamp(i)).len();
            assert!((40..=100).contains(&n));
            seen.insert(n);
        }
        assert!(seen.len() > 30);
    }

    #[test]
    fn payload_is_incompressible() {
        // A crude entropy check: byte histogram of the random body is close to flat.
        let mut b = PayloadBuilder::new(&SizeSpec::Fixed { bytes: 65_536 }, 3);
        let body = b.build(&stamp(0))[STAMP_LEN..].to_vec();
        let mut counts = [0u32; 256];
        for x in &body {
            counts[*x as usize] += 1;
        }
        let expected = body.len() as f64 / 256.0;
        assert!(
            counts
                .iter()
                .all(|&c| (c as f64 - expected).abs() < expected * 0.3)
        );
    }

    #[test]
    fn sizes_parse_and_validate() {
        assert_eq!(
            SizeSpec::parse("1KiB").unwrap(),
            SizeSpec::Fixed { bytes: 1024 }
        );
        assert_eq!(
            SizeSpec::parse("100..2KB").unwrap(),
            SizeSpec::Range {
                min: 100,
                max: 2000
            }
        );
        assert!(
            SizeSpec::Fixed { bytes: 10 }
                .validate()
                .unwrap_err()
                .contains("stamp")
        );
        assert!(SizeSpec::Range { min: 500, max: 100 }.validate().is_err());
    }
}
