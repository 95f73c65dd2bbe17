//! Side-by-side comparison of two runs: each headline figure of both, the change from the
//! first (baseline) to the second, and whether that change is for the better.

use msgbench_report::RunReport;
use serde::Serialize;

/// Which direction of a figure is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    /// More is better (throughput).
    Higher,
    /// Less is better (latency, losses).
    Lower,
}

/// What a change amounts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Changed in the better direction by at least [`SAME_WITHIN`].
    Better,
    /// Changed in the worse direction by at least [`SAME_WITHIN`].
    Worse,
    /// Within [`SAME_WITHIN`] of the baseline (or both zero).
    Same,
}

/// Relative changes smaller than this (1%) are reported as the same: run-to-run noise.
pub const SAME_WITHIN: f64 = 0.01;

/// One figure of both runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Delta {
    /// What is compared (`e2e p99`).
    pub metric: String,
    /// Unit of `a` and `b` (`msgs/s`, `ns`, `count`, `s`).
    pub unit: String,
    /// The baseline's value.
    pub a: f64,
    /// The other run's value.
    pub b: f64,
    /// `(b - a) / a`, `None` when `a` is zero.
    pub change: Option<f64>,
    /// The better direction.
    pub better: Better,
    /// The verdict.
    pub verdict: Verdict,
}

fn delta(metric: &str, unit: &str, a: f64, b: f64, better: Better) -> Delta {
    let change = (a != 0.0).then(|| (b - a) / a.abs());
    let verdict = match change {
        _ if a == b => Verdict::Same,
        Some(c) if c.abs() < SAME_WITHIN => Verdict::Same,
        _ => {
            let up = b > a;
            if up == (better == Better::Higher) {
                Verdict::Better
            } else {
                Verdict::Worse
            }
        }
    };
    Delta {
        metric: metric.into(),
        unit: unit.into(),
        a,
        b,
        change,
        better,
        verdict,
    }
}

/// The headline figures of `a` (baseline) and `b`: rates, latency percentiles, losses,
/// generator cost. Runs without a measure phase compare as zeros.
pub fn deltas(a: &RunReport, b: &RunReport) -> Vec<Delta> {
    use Better::{Higher, Lower};
    let mut out = Vec::new();
    let (ra, rb) = (a.result.as_ref(), b.result.as_ref());
    let f = |r: Option<&msgbench_report::PhaseReport>,
             g: &dyn Fn(&msgbench_report::PhaseReport) -> f64| { r.map_or(0.0, g) };
    out.push(delta(
        "sent",
        "msgs/s",
        f(ra, &|r| r.sent_per_s),
        f(rb, &|r| r.sent_per_s),
        Higher,
    ));
    out.push(delta(
        "received",
        "msgs/s",
        f(ra, &|r| r.received_per_s),
        f(rb, &|r| r.received_per_s),
        Higher,
    ));
    for (name, pick) in [
        (
            "e2e",
            (|r: &msgbench_report::PhaseReport| r.e2e) as fn(&_) -> _,
        ),
        ("publish", |r: &msgbench_report::PhaseReport| r.publish),
    ] {
        let (la, lb) = (
            ra.map(pick).unwrap_or_default(),
            rb.map(pick).unwrap_or_default(),
        );
        if la.count == 0 && lb.count == 0 {
            continue;
        }
        for (p, va, vb) in [
            ("p50", la.p50, lb.p50),
            ("p90", la.p90, lb.p90),
            ("p99", la.p99, lb.p99),
            ("p99.9", la.p999, lb.p999),
            ("max", la.max, lb.max),
        ] {
            out.push(delta(
                &format!("{name} {p}"),
                "ns",
                va as f64,
                vb as f64,
                Lower,
            ));
        }
    }
    out.push(delta(
        "lost",
        "count",
        a.integrity.lost as f64,
        b.integrity.lost as f64,
        Lower,
    ));
    out.push(delta(
        "duplicated",
        "count",
        a.integrity.duplicated as f64,
        b.integrity.duplicated as f64,
        Lower,
    ));
    out.push(delta(
        "generator CPU per million sent",
        "s",
        f(ra, &|r| r.cpu_s_per_million_sent),
        f(rb, &|r| r.cpu_s_per_million_sent),
        Lower,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_follow_the_better_direction() {
        assert_eq!(
            delta("x", "", 100.0, 120.0, Better::Higher).verdict,
            Verdict::Better
        );
        assert_eq!(
            delta("x", "", 100.0, 120.0, Better::Lower).verdict,
            Verdict::Worse
        );
        assert_eq!(
            delta("x", "", 100.0, 80.0, Better::Lower).verdict,
            Verdict::Better
        );
        assert_eq!(
            delta("x", "", 100.0, 100.5, Better::Lower).verdict,
            Verdict::Same
        );
        assert_eq!(
            delta("x", "", 0.0, 0.0, Better::Lower).verdict,
            Verdict::Same
        );
        let from_zero = delta("lost", "", 0.0, 3.0, Better::Lower);
        assert_eq!(
            (from_zero.change, from_zero.verdict),
            (None, Verdict::Worse)
        );
        assert_eq!(
            delta("x", "", 200.0, 150.0, Better::Higher).change,
            Some(-0.25)
        );
    }
}
