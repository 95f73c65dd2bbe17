//! Latency percentile distributions: the curve of an HdrHistogram "percentile plot", with the
//! percentile on a logarithmic "nines" axis (0, 90, 99, 99.9 ... 99.9999) and the latency at
//! each point. Reports carry these curves so that the HTML report and comparisons can draw the
//! whole distribution, not only the handful of percentiles in the summary tables.

use msgbench_metrics::Histogram;
use serde::{Deserialize, Serialize};

/// One point of a percentile curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PercentilePoint {
    /// Percentile, 0..100 (99.9 is the 99.9th percentile).
    pub percentile: f64,
    /// The latency at that percentile, ns (HdrHistogram's `value_at_quantile`, so the points
    /// agree exactly with the p50/p90/p99... figures of the summaries).
    pub ns: u64,
}

/// Points per decade of the nines axis (between 90 and 99, 99 and 99.9, ...).
pub const POINTS_PER_NINE: u32 = 20;

/// The deepest percentile on the grid: 99.9999 (six nines).
pub const MAX_NINES: u32 = 6;

/// The percentile curve of `h`: points evenly spaced on the nines axis from the 0th percentile
/// to the deepest percentile the count resolves (beyond 1 − 1/count every percentile is the
/// maximum) or six nines, then the maximum itself at 100·(1 − 1/count). Empty when `h` is.
///
/// At most `POINTS_PER_NINE * MAX_NINES + 2` points, whatever the number of values.
pub fn percentile_curve(h: &Histogram) -> Vec<PercentilePoint> {
    let count = h.len();
    if count == 0 {
        return Vec::new();
    }
    let mut out = Vec::with_capacity((POINTS_PER_NINE * MAX_NINES + 2) as usize);
    // The last rank that still differs from the maximum.
    let last_q = 1.0 - 1.0 / count as f64;
    for k in 0..=POINTS_PER_NINE * MAX_NINES {
        let nines = f64::from(k) / f64::from(POINTS_PER_NINE);
        let q = 1.0 - 10f64.powf(-nines);
        // (The grid and the ranks are computed differently: compare with a little slack.)
        if q > last_q + 1e-12 {
            break;
        }
        out.push(PercentilePoint {
            percentile: q * 100.0,
            ns: h.value_at_quantile(q),
        });
    }
    let top = PercentilePoint {
        percentile: (last_q * 100.0).max(out.last().map_or(0.0, |p| p.percentile)),
        ns: h.max(),
    };
    match out.last_mut() {
        // Same rank as the last grid point: the maximum replaces it.
        Some(p) if p.percentile >= top.percentile - 1e-9 => *p = top,
        _ => out.push(top),
    }
    out
}

/// The percentile curves of one run's result (measure phase and its drain).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Distributions {
    /// Publish latency.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub publish: Vec<PercentilePoint>,
    /// Send delay.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub send_delay: Vec<PercentilePoint>,
    /// End-to-end latency.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub e2e: Vec<PercentilePoint>,
    /// Connect latency.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connect: Vec<PercentilePoint>,
}

impl Distributions {
    /// The curves of a set of histograms.
    pub fn of(h: &msgbench_metrics::Histograms) -> Self {
        Distributions {
            publish: percentile_curve(&h.publish),
            send_delay: percentile_curve(&h.send_delay),
            e2e: percentile_curve(&h.e2e),
            connect: percentile_curve(&h.connect),
        }
    }

    /// No curve at all.
    pub fn is_empty(&self) -> bool {
        self.publish.is_empty()
            && self.send_delay.is_empty()
            && self.e2e.is_empty()
            && self.connect.is_empty()
    }

    /// Each non-empty curve with its stage name (`publish`, `send delay`, `end-to-end`,
    /// `connect`), in report order.
    pub fn named(&self) -> Vec<(&'static str, &[PercentilePoint])> {
        [
            ("publish", self.publish.as_slice()),
            ("send delay", self.send_delay.as_slice()),
            ("end-to-end", self.e2e.as_slice()),
            ("connect", self.connect.as_slice()),
        ]
        .into_iter()
        .filter(|(_, c)| !c.is_empty())
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use msgbench_metrics::new_histogram;

    #[test]
    fn curve_agrees_with_value_at_quantile_and_ends_at_max() {
        let mut h = new_histogram();
        for v in 1..=100_000u64 {
            h.record(v * 10).unwrap();
        }
        let c = percentile_curve(&h);
        // 100,000 values resolve five nines: the 0th and 5 * 20 grid points, the last of them
        // (99.999, the rank of the second largest value) shown as the maximum.
        assert_eq!(c.len(), 5 * 20 + 1, "{c:?}");
        assert_eq!(c[0].percentile, 0.0);
        assert_eq!(c[0].ns, h.value_at_quantile(0.0));
        let p99 = c
            .iter()
            .find(|p| (p.percentile - 99.0).abs() < 1e-9)
            .unwrap();
        assert_eq!(p99.ns, h.value_at_quantile(0.99));
        let last = c.last().unwrap();
        assert_eq!(last.ns, h.max());
        assert!((last.percentile - 99.999).abs() < 1e-9, "{last:?}");
        assert!(c.windows(2).all(|w| w[0].percentile < w[1].percentile));
        assert!(c.windows(2).all(|w| w[0].ns <= w[1].ns));
    }

    #[test]
    fn tiny_and_empty_histograms() {
        assert!(percentile_curve(&new_histogram()).is_empty());
        let mut h = new_histogram();
        h.record(5000).unwrap();
        let c = percentile_curve(&h);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].ns, h.max());
        let mut h = new_histogram();
        for v in [1000, 2000, 3000, 4000] {
            h.record(v).unwrap();
        }
        let c = percentile_curve(&h);
        assert_eq!(c.last().unwrap().ns, h.max());
        assert!((c.last().unwrap().percentile - 75.0).abs() < 1e-9);
    }

    #[test]
    fn deep_runs_stop_at_six_nines_then_the_max() {
        let mut h = new_histogram();
        h.record_n(1000, 10_000_000).unwrap();
        h.record(9_000_000).unwrap();
        let c = percentile_curve(&h);
        assert_eq!(c.len(), 6 * 20 + 2);
        assert_eq!(c[c.len() - 2].ns, h.value_at_quantile(0.999999));
        assert_eq!(c.last().unwrap().ns, h.max());
    }
}
