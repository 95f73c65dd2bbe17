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

/// Stamp size in bytes: the smallest payload msgbench can send.
pub const STAMP_LEN: usize = 40;
/// First two bytes of every stamp.
pub const MAGIC: [u8; 2] = *b"MB";
/// Stamp format version.
pub const VERSION: u8 = 1;

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
