//! Message bodies: a stamp followed by incompressible random bytes.
//!
//! Each producer owns a [`PayloadBuilder`] with a pool of random bytes generated once. Every
//! message copies its tail from a different offset of the pool, so consecutive messages differ
//! (a broker or proxy that compresses or deduplicates gains nothing) while building a message
//! costs one memcpy and no allocation.

use crate::rng::Rng;
use crate::stamp::{STAMP_LEN, Stamp};
use serde::{Deserialize, Serialize};

/// How large messages are, stamp included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SizeSpec {
    /// Every message has this many bytes.
    Fixed {
        /// Bytes per message.
        bytes: u64,
    },
    /// Uniformly distributed sizes in `min..=max` bytes.
    Range {
        /// Smallest message.
        min: u64,
        /// Largest message.
        max: u64,
    },
}

impl SizeSpec {
    /// The largest message this spec produces.
    pub fn max(&self) -> u64 {
        match *self {
            SizeSpec::Fixed { bytes } => bytes,
            SizeSpec::Range { max, .. } => max,
        }
    }

    /// The smallest message this spec produces.
    pub fn min(&self) -> u64 {
        match *self {
            SizeSpec::Fixed { bytes } => bytes,
            SizeSpec::Range { min, .. } => min,
        }
    }

    /// Parses `1KiB` (fixed) or `100..2000` / `100B..2KiB` (range).
    pub fn parse(s: &str) -> Result<Self, String> {
        if let Some((a, b)) = s.split_once("..") {
            let min = crate::units::parse_size(a)?;
            let max = crate::units::parse_size(b.trim_start_matches('='))?;
            Ok(SizeSpec::Range { min, max })
        } else {
            Ok(SizeSpec::Fixed {
                bytes: crate::units::parse_size(s)?,
            })
        }
    }

    /// Checks every message can hold a stamp and the range is ordered.
    pub fn validate(&self) -> Result<(), String> {
        if self.min() < STAMP_LEN as u64 {
            return Err(format!(
                "message size {} is below the {STAMP_LEN}-byte stamp every message carries; use at least {STAMP_LEN}",
                self.min()
            ));
        }
        if self.min() > self.max() {
            return Err(format!(
                "size range {}..{} is empty (min > max)",
                self.min(),
                self.max()
            ));
        }
        if self.max() > 1 << 30 {
            return Err(format!(
                "message size {} is above the 1 GiB limit",
                self.max()
            ));
        }
        Ok(())
    }
}

const POOL: usize = 64 * 1024;

/// Builds stamped payloads for one producer into a reusable buffer.
#[derive(Debug)]
pub struct PayloadBuilder {
    size: SizeSpec,
    pool: Vec<u8>,
    buf: Vec<u8>,
    rng: Rng,
    cursor: usize,
}

impl PayloadBuilder {
    /// A builder for `size` messages, its random content seeded by `seed`.
    pub fn new(size: SizeSpec, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let max = size.max() as usize;
        let mut pool = vec![0u8; POOL + max];
        rng.fill(&mut pool);
        Self {
            size,
            pool,
            buf: vec![0u8; max.max(STAMP_LEN)],
            rng,
            cursor: 0,
        }
    }

    /// Builds the next message: `stamp` then random bytes, and returns it. The slice is valid until
    /// the next call.
    #[inline]
    pub fn build(&mut self, stamp: &Stamp) -> &[u8] {
        let len = match self.size {
            SizeSpec::Fixed { bytes } => bytes as usize,
            SizeSpec::Range { min, max } => self.rng.range(min, max) as usize,
        };
        let tail = len - STAMP_LEN;
        if tail > 0 {
            // Move through the pool by a prime stride so consecutive bodies differ.
            self.cursor = (self.cursor + 4093) % POOL;
            self.buf[STAMP_LEN..len].copy_from_slice(&self.pool[self.cursor..self.cursor + tail]);
        }
        stamp.write(&mut self.buf);
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
    fn fixed_size_with_stamp_and_varying_bodies() {
        let mut b = PayloadBuilder::new(SizeSpec::Fixed { bytes: 1024 }, 7);
        let first = b.build(&stamp(0)).to_vec();
        let second = b.build(&stamp(1)).to_vec();
        assert_eq!(first.len(), 1024);
        assert_eq!(Stamp::read(&second).unwrap().seq, 1);
        assert_ne!(first[STAMP_LEN..], second[STAMP_LEN..]);
    }

    #[test]
    fn range_sizes_stay_in_range() {
        let mut b = PayloadBuilder::new(SizeSpec::Range { min: 40, max: 100 }, 7);
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
        let mut b = PayloadBuilder::new(SizeSpec::Fixed { bytes: 65_536 }, 3);
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
