//! Histogram encoding for the results file: HdrHistogram V2 with DEFLATE, then base64.
//!
//! This is the standard compressed HdrHistogram form, so other HdrHistogram implementations
//! (Java, Go, JavaScript) can decode what msgbench writes.

use crate::{Histogram, SIGNIFICANT_DIGITS};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};

/// Why a histogram could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The text was not base64.
    #[error("histogram is not valid base64: {0}")]
    Base64(#[from] base64::DecodeError),
    /// The bytes were not a V2 (optionally deflated) HdrHistogram.
    #[error("histogram is not a valid HdrHistogram V2 encoding: {0:?}")]
    Hdr(hdrhistogram::serialization::DeserializeError),
}

/// Encodes a histogram as base64 of its V2+DEFLATE serialisation.
pub fn encode(h: &Histogram) -> String {
    let mut buf = Vec::new();
    // Serialising into a Vec cannot fail for an in-range histogram.
    V2DeflateSerializer::new()
        .serialize(h, &mut buf)
        .expect("serialising a histogram into memory");
    STANDARD.encode(buf)
}

/// Decodes what [`encode`] produced. The result auto-resizes, so it merges with any other.
pub fn decode(s: &str) -> Result<Histogram, CodecError> {
    let bytes = STANDARD.decode(s.trim())?;
    let mut h: Histogram = Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(CodecError::Hdr)?;
    h.auto(true);
    if h.sigfig() != SIGNIFICANT_DIGITS {
        // Still usable; precision is whatever the writer chose.
    }
    Ok(h)
}

/// `#[serde(with = "...")]` support: a histogram as its encoded string.
pub mod serde_hist {
    use super::*;
    use serde::{Deserialize, Deserializer as De, Serializer as Ser};

    /// Serialises a histogram as an encoded string.
    pub fn serialize<S: Ser>(h: &Histogram, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&encode(h))
    }

    /// Deserialises an encoded string into a histogram.
    pub fn deserialize<'de, D: De<'de>>(d: D) -> Result<Histogram, D::Error> {
        let s = String::deserialize(d)?;
        decode(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::new_histogram;

    #[test]
    fn round_trip_keeps_every_count() {
        let mut h = new_histogram();
        for v in [1u64, 50, 1_000, 123_456, 9_999_999, 3_600_000_000_000] {
            h.record_n(v, 7).unwrap();
        }
        let back = decode(&encode(&h)).unwrap();
        assert_eq!(back.len(), h.len());
        assert_eq!(back.max(), h.max());
        assert_eq!(back.value_at_quantile(0.5), h.value_at_quantile(0.5));
        let mut merged = new_histogram();
        merged.add(&back).unwrap();
        assert_eq!(merged.len(), 42);
    }

    #[test]
    fn empty_histogram_round_trips() {
        let back = decode(&encode(&new_histogram())).unwrap();
        assert_eq!(back.len(), 0);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(decode("not base64 !!").is_err());
        assert!(decode("aGVsbG8gd29ybGQ=").is_err());
    }
}
