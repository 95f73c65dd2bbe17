//! Payload templates: message bodies a system in the middle can read (JSON for a gateway, text
//! for a proxy that re-encodes), with the stamp travelling inside as text.
//!
//! A template is the message as text with placeholders in double braces:
//!
//! | placeholder | becomes |
//! |---|---|
//! | `{{stamp}}` | the text stamp ([`crate::stamp::TEXT_STAMP_LEN`] printable, JSON-safe bytes); required, once |
//! | `{{seq}}` | the message's sequence number in its (producer, topic) stream |
//! | `{{producer}}` | the producer's index |
//! | `{{stream}}` | the producer's topic index |
//! | `{{run}}` | the run id |
//! | `{{time}}` | the intended send time, Unix milliseconds |
//! | `{{pad}}` | printable filler (`[A-Za-z0-9]`) that makes each message exactly `--size` bytes; at most once |
//!
//! Without `{{pad}}` a message is exactly the rendered template and `--size` does not apply.
//! `{{{{` stands for a literal `{{`. Values are digits or base64url, so a template that is
//! valid JSON with each placeholder inside a string (or as a number, for the numeric ones)
//! renders valid JSON.
//!
//! Parsing happens once per producer ([`Template::parse`]); rendering ([`Template::render`])
//! writes into a reused buffer: no allocation per message once the buffer has grown.

use crate::stamp::{Stamp, TEXT_STAMP_LEN};

/// One piece of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Lit(Vec<u8>),
    Stamp,
    Seq,
    Producer,
    Stream,
    Run,
    Time,
    Pad,
}

/// A parsed payload template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

/// What is wrong with a template, and where (1-based line and column of the template text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("payload template, line {line}, column {column}: {message}")]
pub struct TemplateError {
    /// Line of the template text.
    pub line: usize,
    /// Column (in characters) within that line.
    pub column: usize,
    /// What was expected.
    pub message: String,
}

const NAMES: &str = "stamp, seq, producer, stream, run, time, pad";

fn position(src: &str, byte: usize) -> (usize, usize) {
    let before = &src[..byte];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

impl Template {
    /// Parses `src`. Errors name the line and column and what was expected: an unknown or
    /// unclosed placeholder, a missing or repeated `{{stamp}}`, a repeated `{{pad}}`.
    pub fn parse(src: &str) -> Result<Template, TemplateError> {
        let fail = |at: usize, message: String| {
            let (line, column) = position(src, at);
            TemplateError {
                line,
                column,
                message,
            }
        };
        let mut parts = Vec::new();
        let mut lit = Vec::new();
        let (mut stamp_at, mut pad_at) = (None, None);
        let mut rest = src;
        while let Some(i) = rest.find("{{") {
            lit.extend_from_slice(&rest.as_bytes()[..i]);
            let at = src.len() - rest.len() + i;
            let after = &rest[i + 2..];
            if let Some(more) = after.strip_prefix("{{") {
                lit.extend_from_slice(b"{{");
                rest = more;
                continue;
            }
            let Some(end) = after.find("}}") else {
                return Err(fail(at, "`{{` is not closed by `}}`".into()));
            };
            let name = after[..end].trim();
            let part = match name {
                "stamp" => Part::Stamp,
                "seq" => Part::Seq,
                "producer" => Part::Producer,
                "stream" => Part::Stream,
                "run" => Part::Run,
                "time" => Part::Time,
                "pad" => Part::Pad,
                other => {
                    return Err(fail(
                        at,
                        format!("unknown placeholder `{{{{{other}}}}}` (expected one of: {NAMES})"),
                    ));
                }
            };
            let seen = match part {
                Part::Stamp => Some(&mut stamp_at),
                Part::Pad => Some(&mut pad_at),
                _ => None,
            };
            if let Some(seen) = seen {
                if seen.is_some() {
                    return Err(fail(at, format!("`{{{{{name}}}}}` may appear only once")));
                }
                *seen = Some(at);
            }
            if !lit.is_empty() {
                parts.push(Part::Lit(std::mem::take(&mut lit)));
            }
            parts.push(part);
            rest = &after[end + 2..];
        }
        lit.extend_from_slice(rest.as_bytes());
        if !lit.is_empty() {
            parts.push(Part::Lit(lit));
        }
        if stamp_at.is_none() {
            return Err(fail(
                src.len(),
                "the template has no `{{stamp}}`: without it no delivery can be matched to its send (put it inside a JSON string, e.g. \"id\":\"{{stamp}}\")".into(),
            ));
        }
        Ok(Template { parts })
    }

    /// Whether the template pads each message to the run's size.
    pub fn pads(&self) -> bool {
        self.parts.contains(&Part::Pad)
    }

    /// The shortest a rendered message can be without padding (literals, the stamp, one digit
    /// per numeric value): a size below it cannot be honoured.
    pub fn min_len(&self) -> usize {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Lit(l) => l.len(),
                Part::Stamp => TEXT_STAMP_LEN,
                Part::Pad => 0,
                _ => 1,
            })
            .sum()
    }

    /// Renders one message into `out` (cleared first). `target` is the length `{{pad}}` fills
    /// up to (ignored without it; when the rest is already longer, the pad is empty).
    /// `unix_offset_ns` turns the stamp's monotonic intended time into Unix time for `{{time}}`.
    /// `filler` supplies the pad's bytes (at least `target` long).
    #[inline]
    pub fn render(
        &self,
        stamp: &Stamp,
        unix_offset_ns: u64,
        target: usize,
        filler: &[u8],
        out: &mut Vec<u8>,
    ) {
        out.clear();
        let mut pad_at = None;
        for p in &self.parts {
            match p {
                Part::Lit(l) => out.extend_from_slice(l),
                Part::Stamp => {
                    let at = out.len();
                    out.resize(at + TEXT_STAMP_LEN, 0);
                    stamp.write_text(&mut out[at..]);
                }
                Part::Seq => push_u64(out, stamp.seq),
                Part::Producer => push_u64(out, stamp.producer as u64),
                Part::Stream => push_u64(out, stamp.stream as u64),
                Part::Run => push_u64(out, stamp.run_id as u64),
                Part::Time => push_u64(
                    out,
                    stamp.intended_ns.wrapping_add(unix_offset_ns) / 1_000_000,
                ),
                Part::Pad => pad_at = Some(out.len()),
            }
        }
        if let Some(at) = pad_at {
            let pad = target.saturating_sub(out.len()).min(filler.len());
            if pad > 0 {
                let end = out.len();
                out.resize(end + pad, 0);
                out.copy_within(at..end, at + pad);
                out[at..at + pad].copy_from_slice(&filler[..pad]);
            }
        }
    }
}

/// Appends `v` in decimal, without allocating.
#[inline]
fn push_u64(out: &mut Vec<u8>, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(seq: u64) -> Stamp {
        Stamp {
            run_id: 9,
            producer: 2,
            stream: 1,
            seq,
            intended_ns: 5_000_000,
            sent_ns: 6,
        }
    }

    #[test]
    fn renders_values_stamp_and_padding() {
        let t = Template::parse(
            r#"{"id":"{{stamp}}","seq":{{seq}},"p":{{producer}},"s":{{stream}},"r":{{run}},"t":{{time}},"x":"{{pad}}"}"#,
        )
        .unwrap();
        assert!(t.pads());
        let filler = vec![b'a'; 4096];
        let mut out = Vec::new();
        t.render(&stamp(12345), 1_000_000_000, 1024, &filler, &mut out);
        assert_eq!(out.len(), 1024);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["seq"], 12345);
        assert_eq!(v["p"], 2);
        assert_eq!(v["s"], 1);
        assert_eq!(v["r"], 9);
        assert_eq!(v["t"], 1005);
        assert!(v["x"].as_str().unwrap().bytes().all(|b| b == b'a'));
        let s = Stamp::find(&out).unwrap();
        assert_eq!(s, stamp(12345));
        // Re-serialized (key order and spacing changed), the stamp is still found.
        let again = serde_json::to_vec_pretty(&serde_json::json!({"wrapped": v})).unwrap();
        assert_eq!(Stamp::find(&again).unwrap(), stamp(12345));
    }

    #[test]
    fn without_pad_the_message_is_the_template() {
        let t = Template::parse("{{stamp}} {{{{literal}}").unwrap();
        assert!(!t.pads());
        let mut out = Vec::new();
        t.render(&stamp(0), 0, 10_000, &[], &mut out);
        assert_eq!(out.len(), TEXT_STAMP_LEN + " {{literal}}".len());
        assert!(out.ends_with(b" {{literal}}"));
        assert_eq!(t.min_len(), out.len());
    }

    #[test]
    fn errors_say_where_and_what() {
        let e = Template::parse("{\n  \"a\": \"{{stmap}}\"\n}").unwrap_err();
        assert_eq!((e.line, e.column), (2, 9));
        assert!(e.message.contains("unknown placeholder `{{stmap}}`"), "{e}");
        assert!(e.message.contains("stamp, seq"), "{e}");
        let e = Template::parse("{\"a\": 1}").unwrap_err();
        assert!(e.message.contains("no `{{stamp}}`"), "{e}");
        let e = Template::parse("{{stamp}}{{stamp}}").unwrap_err();
        assert_eq!((e.line, e.column), (1, 10));
        assert!(Template::parse("{{stamp}}{{pad}}{{pad}}").is_err());
        let e = Template::parse("x {{stamp").unwrap_err();
        assert_eq!((e.line, e.column), (1, 3));
        assert!(e.message.contains("not closed"), "{e}");
    }
}
