//! The stamp: a compact binary header at the start of every payload msgbench sends.
//!
//! Layout (little-endian, [`STAMP_LEN`] = 40 bytes):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 2 | magic `0x4D 0x42` ("MB") |
//! | 2 | 1 | version ([`VERSION`]) |
//! | 3 | 1 | flags (reserved, 0) |
//! | 4 | 4 | run id |
//! | 8 | 4 | producer id |
//! | 12 | 4 | stream id (the producer's topic index) |
//! | 16 | 8 | sequence number within (producer, stream), from 0 |
//! | 24 | 8 | intended send time, monotonic ns |
//! | 32 | 8 | actual send time, monotonic ns |
//!
//! Consumers decode it to compute end-to-end latency (from the *intended* time, so coordinated
//! omission is corrected) and to track sequence integrity. Anything that does not decode as a
//! stamp of the current run is counted as foreign, never a crash.
//!
//! # Text stamps
//!
//! Systems that require text (a JSON gateway, a proxy that re-encodes bodies) reject or mangle
//! the binary stamp. The text form carries the same 40 bytes, printable and JSON-safe:
//! [`TEXT_MARKER`] followed by their unpadded base64url encoding, [`TEXT_STAMP_LEN`] = 58 bytes
//! in all (no character needs escaping in JSON, XML or a URL). A consumer finds it anywhere in
//! what it receives ([`Stamp::find`]: the binary stamp at offset 0 first, then a substring
//! search for the marker), so an intermediary may wrap, re-key or re-serialize the message
//! around it.

/// Stamp size in bytes: the smallest payload msgbench can send.
pub const STAMP_LEN: usize = 40;
/// First two bytes of every stamp.
pub const MAGIC: [u8; 2] = *b"MB";
/// Stamp format version.
pub const VERSION: u8 = 1;

/// Opens every text stamp: chosen to be rare in real payloads and free of JSON escapes.
pub const TEXT_MARKER: &[u8; 4] = b"MB1~";
/// Length of a text stamp: the marker and 54 base64url characters for the 40 stamp bytes.
pub const TEXT_STAMP_LEN: usize = TEXT_MARKER.len() + 54;

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// base64url digit values; 0xFF marks a byte that is not one.
const B64_VALUE: [u8; 256] = {
    let mut t = [0xFFu8; 256];
    let mut i = 0;
    while i < 64 {
        t[B64[i] as usize] = i as u8;
        i += 1;
    }
    t
};

static TEXT_FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
    std::sync::LazyLock::new(|| memchr::memmem::Finder::new(TEXT_MARKER));

/// The decoded fields of a stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// Identifies the run, so leftovers of earlier runs are not mistaken for ours.
    pub run_id: u32,
    /// Which producer sent it.
    pub producer: u32,
    /// Which of the producer's streams (topics) it belongs to.
    pub stream: u32,
    /// Position in the (producer, stream) sequence, from 0.
    pub seq: u64,
    /// When the pacer intended it to be sent (monotonic ns).
    pub intended_ns: u64,
    /// When it was actually sent (monotonic ns).
    pub sent_ns: u64,
}

/// Why bytes could not be read as a stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StampError {
    /// Fewer than [`STAMP_LEN`] bytes.
    #[error("payload too short for a stamp ({0} bytes)")]
    Truncated(usize),
    /// Wrong magic: not a msgbench payload.
    #[error("payload has no msgbench stamp")]
    NotOurs,
    /// A msgbench stamp of a version this build does not read.
    #[error("unsupported stamp version {0}")]
    Version(u8),
}

impl Stamp {
    /// Writes the stamp into the first [`STAMP_LEN`] bytes of `buf`.
    ///
    /// # Panics
    /// If `buf` is shorter than [`STAMP_LEN`]; the runner sizes every payload to at least that.
    #[inline]
    pub fn write(&self, buf: &mut [u8]) {
        let b = &mut buf[..STAMP_LEN];
        b[0..2].copy_from_slice(&MAGIC);
        b[2] = VERSION;
        b[3] = 0;
        b[4..8].copy_from_slice(&self.run_id.to_le_bytes());
        b[8..12].copy_from_slice(&self.producer.to_le_bytes());
        b[12..16].copy_from_slice(&self.stream.to_le_bytes());
        b[16..24].copy_from_slice(&self.seq.to_le_bytes());
        b[24..32].copy_from_slice(&self.intended_ns.to_le_bytes());
        b[32..40].copy_from_slice(&self.sent_ns.to_le_bytes());
    }

    /// Reads a stamp from the start of `buf`.
    #[inline]
    pub fn read(buf: &[u8]) -> Result<Stamp, StampError> {
        if buf.len() < STAMP_LEN {
            return Err(if buf.len() >= 2 && buf[0..2] != MAGIC {
                StampError::NotOurs
            } else {
                StampError::Truncated(buf.len())
            });
        }
        if buf[0..2] != MAGIC {
            return Err(StampError::NotOurs);
        }
        if buf[2] != VERSION {
            return Err(StampError::Version(buf[2]));
        }
        let u32_at = |i: usize| u32::from_le_bytes(buf[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(buf[i..i + 8].try_into().expect("8 bytes"));
        Ok(Stamp {
            run_id: u32_at(4),
            producer: u32_at(8),
            stream: u32_at(12),
            seq: u64_at(16),
            intended_ns: u64_at(24),
            sent_ns: u64_at(32),
        })
    }

    /// Writes the text form ([`TEXT_STAMP_LEN`] printable bytes) into the start of `out`.
    ///
    /// # Panics
    /// If `out` is shorter than [`TEXT_STAMP_LEN`].
    #[inline]
    pub fn write_text(&self, out: &mut [u8]) {
        let mut raw = [0u8; STAMP_LEN];
        self.write(&mut raw);
        let out = &mut out[..TEXT_STAMP_LEN];
        out[..TEXT_MARKER.len()].copy_from_slice(TEXT_MARKER);
        let digits = &mut out[TEXT_MARKER.len()..];
        // 40 bytes = 13 groups of 3 (52 digits) and one byte left (2 digits).
        for (g, quad) in digits[..52].chunks_exact_mut(4).enumerate() {
            let n = u32::from(raw[g * 3]) << 16
                | u32::from(raw[g * 3 + 1]) << 8
                | u32::from(raw[g * 3 + 2]);
            quad[0] = B64[(n >> 18) as usize & 63];
            quad[1] = B64[(n >> 12) as usize & 63];
            quad[2] = B64[(n >> 6) as usize & 63];
            quad[3] = B64[n as usize & 63];
        }
        let last = raw[39];
        digits[52] = B64[(last >> 2) as usize];
        digits[53] = B64[((last & 3) << 4) as usize];
    }

    /// Reads a text stamp that starts exactly at `buf[0]` (marker included).
    #[inline]
    pub fn read_text(buf: &[u8]) -> Result<Stamp, StampError> {
        if buf.len() < TEXT_STAMP_LEN {
            return Err(StampError::Truncated(buf.len()));
        }
        if &buf[..TEXT_MARKER.len()] != TEXT_MARKER {
            return Err(StampError::NotOurs);
        }
        let digits = &buf[TEXT_MARKER.len()..TEXT_STAMP_LEN];
        let mut raw = [0u8; STAMP_LEN];
        // Invalid digits map to 0xFF: OR-ed together, one test at the end finds any of them.
        let mut bad = 0u8;
        for (g, quad) in digits[..52].chunks_exact(4).enumerate() {
            let v: [u8; 4] = std::array::from_fn(|k| B64_VALUE[quad[k] as usize]);
            bad |= v[0] | v[1] | v[2] | v[3];
            let n = u32::from(v[0]) << 18
                | u32::from(v[1]) << 12
                | u32::from(v[2]) << 6
                | u32::from(v[3]);
            raw[g * 3] = (n >> 16) as u8;
            raw[g * 3 + 1] = (n >> 8) as u8;
            raw[g * 3 + 2] = n as u8;
        }
        let (a, b) = (
            B64_VALUE[digits[52] as usize],
            B64_VALUE[digits[53] as usize],
        );
        bad |= a | b;
        if bad & 0x80 != 0 {
            return Err(StampError::NotOurs);
        }
        raw[39] = a << 2 | b >> 4;
        Stamp::read(&raw)
    }

    /// Finds the stamp in a received message: the binary stamp at offset 0 (the default, and
    /// the only cost for opaque payloads), else the first valid text stamp anywhere in `buf`
    /// (a fast substring search for [`TEXT_MARKER`]). The error is the binary reading's when
    /// no text stamp is found either.
    #[inline]
    pub fn find(buf: &[u8]) -> Result<Stamp, StampError> {
        match Stamp::read(buf) {
            Ok(s) => Ok(s),
            Err(e) => Self::find_text(buf).ok_or(e),
        }
    }

    /// A valid text stamp in `buf`, if any: where the last message's stamp was (on this
    /// thread) is tried first — a template puts it at the same offset in every message, and a
    /// gateway's wrapping moves it by the same amount — then the first one a substring search
    /// finds. (A message carrying two stamps is read by one of them.)
    pub fn find_text(buf: &[u8]) -> Option<Stamp> {
        thread_local! {
            static LAST_AT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
        }
        let hint = LAST_AT.get();
        if let Some(at) = buf.get(hint..)
            && at.starts_with(TEXT_MARKER)
            && let Ok(s) = Stamp::read_text(at)
        {
            return Some(s);
        }
        let mut from = 0;
        while let Some(i) = TEXT_FINDER.find(&buf[from..]) {
            let at = from + i;
            if let Ok(s) = Stamp::read_text(&buf[at..]) {
                LAST_AT.set(at);
                return Some(s);
            }
            from = at + 1;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let s = Stamp {
            run_id: 7,
            producer: 3,
            stream: 2,
            seq: u64::MAX - 1,
            intended_ns: 11,
            sent_ns: 12,
        };
        let mut buf = [0u8; 64];
        s.write(&mut buf);
        assert_eq!(Stamp::read(&buf).unwrap(), s);
        assert_eq!(&buf[..2], b"MB");
    }

    #[test]
    fn text_round_trip_anywhere_in_a_message() {
        let s = Stamp {
            run_id: 0xDEAD_BEEF,
            producer: 12,
            stream: 3,
            seq: 1 << 40,
            intended_ns: u64::MAX,
            sent_ns: 5,
        };
        let mut t = [0u8; TEXT_STAMP_LEN];
        s.write_text(&mut t);
        assert!(
            t.iter()
                .all(|b| b.is_ascii_alphanumeric() || b"~-_".contains(b))
        );
        assert_eq!(Stamp::read_text(&t).unwrap(), s);
        // Wrapped in JSON, after a decoy marker, re-keyed: still found.
        let text = std::str::from_utf8(&t).unwrap();
        let wrapped = format!(r#"{{"btcusd.trades":{{"note":"MB1~nope","id":"{text}","p":1}}}}"#);
        assert_eq!(Stamp::find(wrapped.as_bytes()).unwrap(), s);
        // The binary stamp still reads first and alone.
        let mut b = [0u8; STAMP_LEN];
        s.write(&mut b);
        assert_eq!(Stamp::find(&b).unwrap(), s);
        // A damaged digit or a cut stamp is not a stamp.
        let mut bad = t;
        bad[10] = b'*';
        assert!(Stamp::read_text(&bad).is_err());
        assert!(Stamp::find(&t[..TEXT_STAMP_LEN - 1]).is_err());
        assert_eq!(Stamp::find(b"{\"a\":1}"), Err(StampError::NotOurs));
        // Every byte position carries (the last digit pair included), and a damaged last digit
        // is seen.
        let all = Stamp {
            sent_ns: u64::MAX - 0x0102,
            ..s
        };
        let mut t2 = [0u8; TEXT_STAMP_LEN];
        all.write_text(&mut t2);
        assert_eq!(Stamp::read_text(&t2).unwrap(), all);
        let mut bad = t2;
        bad[TEXT_STAMP_LEN - 1] = b'.';
        assert!(Stamp::read_text(&bad).is_err());
        // Messages whose stamps sit at another offset than the last one's (the hint) are found.
        for pad in [0usize, 7, 3, 100, 7] {
            let m = format!("{}{}", " ".repeat(pad), text);
            assert_eq!(Stamp::find(m.as_bytes()).unwrap(), s, "offset {pad}");
        }
    }

    #[test]
    fn foreign_and_truncated_payloads_are_errors() {
        assert_eq!(Stamp::read(b""), Err(StampError::Truncated(0)));
        assert_eq!(Stamp::read(b"MB\x01"), Err(StampError::Truncated(3)));
        assert_eq!(Stamp::read(b"hello"), Err(StampError::NotOurs));
        assert_eq!(Stamp::read(&[b'x'; 100]), Err(StampError::NotOurs));
        let mut buf = [0u8; 40];
        Stamp {
            run_id: 1,
            producer: 0,
            stream: 0,
            seq: 0,
            intended_ns: 0,
            sent_ns: 0,
        }
        .write(&mut buf);
        buf[2] = 99;
        assert_eq!(Stamp::read(&buf), Err(StampError::Version(99)));
    }
}
