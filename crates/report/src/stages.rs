//! The stage table of multi-stage runs: for each stage, how many of the messages reached it, at
//! what rate and latency (from the intended send time), with duplicates, failures, unknown
//! events and the messages that never arrived. go-mades-bench users know this table (stage,
//! msgs/s, MB/s, count/sent, flight time); percentiles and the integrity columns are added.

use crate::live::fmt_ns;
use msgbench_metrics::{IntervalStats, LatencySummary, Phase, StageEnd, StageStats};
use serde::{Deserialize, Serialize};
use std::io::Write;

/// One stage, summarised over the run's result (measure phase and its drain).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StageReport {
    /// Name from the plan.
    pub name: String,
    /// Messages that reached it.
    pub reached: u64,
    /// Messages sent (the stage's target).
    pub sent: u64,
    /// Reached per second, from the start of the measure phase to the stage's last event.
    pub msgs_per_s: f64,
    /// Megabytes (10^6 bytes) per second on the same basis.
    pub mb_per_s: f64,
    /// Repeated events of a message already at the stage.
    pub duplicates: u64,
    /// Messages that failed here (error replies, FAILED events).
    pub failed: u64,
    /// Events of no message of this run.
    pub unknown: u64,
    /// Messages that never reached it (`None` when the run has no `end` record).
    pub missing: Option<u64>,
    /// Recorded when present, never missing.
    pub optional: bool,
    /// Reaching it is a failure.
    pub failure: bool,
    /// The flow-control trigger.
    pub window: bool,
    /// Latency from the intended send time, ns.
    pub latency: LatencySummary,
    /// The latency's percentile curve.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub percentiles: Vec<crate::distribution::PercentilePoint>,
}

/// Accumulates stage figures from intervals (warm-up excluded).
#[derive(Debug, Default, Clone)]
pub(crate) struct StageAcc {
    stats: Vec<StageStats>,
    last_s: Vec<f64>,
    start_s: Option<f64>,
}

impl StageAcc {
    pub fn add(&mut self, i: &IntervalStats) {
        if i.phase == Phase::Warmup {
            return;
        }
        if i.phase == Phase::Measure {
            self.start_s = Some(self.start_s.map_or(i.start_s, |s: f64| s.min(i.start_s)));
        }
        for (k, s) in i.stages.iter().enumerate() {
            if self.stats.len() <= k {
                self.stats.resize_with(k + 1, StageStats::new_full);
                self.last_s.resize(k + 1, 0.0);
            }
            self.stats[k].merge(s);
            if s.counts.reached > 0 {
                self.last_s[k] = self.last_s[k].max(i.end_s);
            }
        }
    }

    /// The table. `names` from the plan; `ends` from the `end` record, if any.
    pub fn finish(
        &self,
        names: &[String],
        ends: Option<&[StageEnd]>,
        sent: u64,
    ) -> Vec<StageReport> {
        let start = self.start_s.unwrap_or(0.0);
        names
            .iter()
            .enumerate()
            .map(|(k, name)| {
                let empty = StageStats::default();
                let s = self.stats.get(k).unwrap_or(&empty);
                let span = (self.last_s.get(k).copied().unwrap_or(0.0) - start).max(1e-9);
                let end = ends.and_then(|e| e.get(k));
                let c = s.counts;
                StageReport {
                    name: name.clone(),
                    reached: c.reached,
                    sent,
                    msgs_per_s: if c.reached == 0 {
                        0.0
                    } else {
                        c.reached as f64 / span
                    },
                    mb_per_s: if c.reached == 0 {
                        0.0
                    } else {
                        c.bytes as f64 / span / 1e6
                    },
                    duplicates: c.duplicates,
                    failed: c.failed,
                    unknown: c.unknown,
                    missing: end.map(|e| e.missing),
                    optional: end.is_some_and(|e| e.optional),
                    failure: end.is_some_and(|e| e.failure),
                    window: end.is_some_and(|e| e.window),
                    latency: LatencySummary::of(&s.latency),
                    percentiles: crate::distribution::percentile_curve(&s.latency),
                }
            })
            .collect()
    }
}

/// Writes the stage table.
pub fn write(out: &mut dyn Write, stages: &[StageReport]) -> std::io::Result<()> {
    if stages.is_empty() {
        return Ok(());
    }
    let w = stages
        .iter()
        .map(|s| s.name.len())
        .max()
        .unwrap_or(5)
        .max(5);
    writeln!(out, "stages (latency from the intended send time)")?;
    writeln!(
        out,
        "  {:<w$} {:>10} {:>8} {:>21} {:>5} {:>7} {:>6} {:>7} {:>9} {:>9} {:>9} {:>9}",
        "stage",
        "msgs/s",
        "MB/s",
        "reached/sent",
        "dup",
        "missing",
        "failed",
        "unknown",
        "p50",
        "p99",
        "p99.9",
        "max"
    )?;
    for s in stages {
        let l = &s.latency;
        let mark = if s.window {
            " (window)"
        } else if s.optional {
            " (optional)"
        } else if s.failure {
            " (failures)"
        } else {
            ""
        };
        writeln!(
            out,
            "  {:<w$} {:>10.1} {:>8.3} {:>21} {:>5} {:>7} {:>6} {:>7} {:>9} {:>9} {:>9} {:>9}{mark}",
            s.name,
            s.msgs_per_s,
            s.mb_per_s,
            format!("{}/{}", s.reached, s.sent),
            s.duplicates,
            s.missing.map_or("?".into(), |m| m.to_string()),
            s.failed,
            s.unknown,
            fmt_ns(l.p50, l.count),
            fmt_ns(l.p99, l.count),
            fmt_ns(l.p999, l.count),
            fmt_ns(l.max, l.count),
        )?;
    }
    Ok(())
}
