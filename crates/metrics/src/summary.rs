//! Percentile summaries computed from histograms.

use crate::Histogram;
use serde::{Deserialize, Serialize};

/// The latency figures every report shows, in nanoseconds. Computed from an HDR histogram, so
/// they are exact counts with values to 3 significant digits at any message count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencySummary {
    /// Number of values recorded.
    pub count: u64,
    /// Smallest value.
    pub min: u64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// 99.99th percentile.
    pub p9999: u64,
    /// Largest value.
    pub max: u64,
}

impl LatencySummary {
    /// Summarises a histogram; an empty one gives all zeros.
    pub fn of(h: &Histogram) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        Self {
            count: h.len(),
            min: h.min(),
            mean: h.mean(),
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            p9999: h.value_at_quantile(0.9999),
            max: h.max(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::new_histogram;

    #[test]
    fn percentiles_of_a_uniform_range() {
        let mut h = new_histogram();
        for v in 1..=10_000u64 {
            h.record(v * 1000).unwrap();
        }
        let s = LatencySummary::of(&h);
        assert_eq!(s.count, 10_000);
        assert_eq!(s.min, 1000);
        // within HDR's 0.1% precision
        assert!(
            (s.p50 as f64 - 5_000_000.0).abs() / 5_000_000.0 < 0.002,
            "{}",
            s.p50
        );
        assert!(
            (s.p99 as f64 - 9_900_000.0).abs() / 9_900_000.0 < 0.002,
            "{}",
            s.p99
        );
        assert!(s.max >= 10_000_000 && s.max <= 10_010_000);
    }
}
