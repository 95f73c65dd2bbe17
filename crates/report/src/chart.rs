//! Chart series of a run: the per-interval rows of a [`RunReport`] as columns ready to plot
//! (time, rates, latency percentiles, errors, integrity, CPU, connections), downsampled to a
//! bounded number of points so a 24-hour run draws as fast as a 10-second one.
//!
//! Downsampling groups consecutive intervals into equal time buckets. Counts are summed and
//! rates recomputed over the bucket's covered time (exact); a latency percentile of a bucket is
//! the highest that percentile reached in any interval of the bucket (per-interval percentiles
//! cannot be merged exactly, and a chart must not hide a bad second, so the bucket shows its
//! worst); gauges and cumulative counts take their value at the end of the bucket.

use crate::model::{IntervalRow, RunReport};
use msgbench_metrics::{ErrorKind, LatencySummary, Phase};
use serde::Serialize;

/// Default bound on points per series.
pub const MAX_POINTS: usize = 2000;

/// Latency percentile columns in milliseconds (`None` where nothing was recorded).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LatencySeries {
    /// Median.
    pub p50: Vec<Option<f64>>,
    /// 90th percentile.
    pub p90: Vec<Option<f64>>,
    /// 99th percentile.
    pub p99: Vec<Option<f64>>,
    /// 99.9th percentile.
    pub p999: Vec<Option<f64>>,
    /// Maximum.
    pub max: Vec<Option<f64>>,
}

impl LatencySeries {
    fn push(&mut self, worst: Option<LatencySummary>) {
        let ms = |f: fn(&LatencySummary) -> u64| worst.map(|w| f(&w) as f64 / 1e6);
        self.p50.push(ms(|s| s.p50));
        self.p90.push(ms(|s| s.p90));
        self.p99.push(ms(|s| s.p99));
        self.p999.push(ms(|s| s.p999));
        self.max.push(ms(|s| s.max));
    }

    /// Whether any point has a value.
    pub fn has_values(&self) -> bool {
        self.max.iter().any(Option::is_some)
    }
}

/// One stage of a multi-stage run over time.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StageSeries {
    /// Stage name.
    pub name: String,
    /// Messages that reached the stage per second.
    pub reached_per_s: Vec<f64>,
    /// Messages that failed at the stage per second.
    pub failed_per_s: Vec<f64>,
    /// Latency from the intended send time.
    pub latency: LatencySeries,
}

/// The host's figures per chart point.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HostSeries {
    /// CPU busy, percent of all CPUs.
    pub cpu_pct: Vec<f64>,
    /// Memory in use, percent of the total.
    pub mem_pct: Vec<f64>,
    /// Network MB/s received, every interface.
    pub rx_mb_per_s: Vec<f64>,
    /// Network MB/s sent, every interface.
    pub tx_mb_per_s: Vec<f64>,
    /// One-minute load average.
    pub load1: Vec<f64>,
}

/// Every chart column of a run; all vectors have the length of `t`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ChartData {
    /// Seconds since the start of the run at the end of each point's window.
    pub t: Vec<f64>,
    /// The phase at the end of each point's window.
    pub phase: Vec<Phase>,
    /// Seconds of run time each point covers (the tick, or the bucket when downsampled).
    pub bucket_s: f64,
    /// Intervals in the results file (before downsampling).
    pub intervals: usize,
    /// Messages sent per second.
    pub sent_per_s: Vec<f64>,
    /// Messages received per second.
    pub received_per_s: Vec<f64>,
    /// Publish latency, ms.
    pub publish: LatencySeries,
    /// End-to-end latency, ms.
    pub e2e: LatencySeries,
    /// Connect latency, ms (connection workloads).
    pub connect: LatencySeries,
    /// Multi-stage runs: each stage.
    pub stages: Vec<StageSeries>,
    /// Errors per point, by kind (only the kinds that occurred), `(kind, counts)`.
    pub errors: Vec<(String, Vec<u64>)>,
    /// Sequence gaps still open at the end of each point (fan-out runs: messages lost so far).
    pub lost: Vec<u64>,
    /// Duplicated deliveries so far.
    pub duplicated: Vec<u64>,
    /// Reordered deliveries so far.
    pub reordered: Vec<u64>,
    /// Generator CPU, percent of one core.
    pub cpu_pct: Vec<f64>,
    /// Connections held at the end of each point (connection workloads), if sampled.
    pub held: Option<Vec<u64>>,
    /// The host per point, when the run sampled it: CPU busy and memory in use (percent),
    /// network MB/s received and sent (every interface), one-minute load average.
    pub host: Option<HostSeries>,
    /// Phase spans `(phase, start_s, end_s)`, for shading.
    pub phases: Vec<(Phase, f64, f64)>,
    /// Spans `(start_s, end_s)` of consecutive intervals in which the generator was saturated
    /// (their figures may show msgbench's limit), for shading.
    pub saturated: Vec<(f64, f64)>,
}

/// Groups `rows` (in time order) into at most `max_points` runs of consecutive rows of equal
/// time span. Rows ending at the same instant always share a group.
fn buckets(rows: &[IntervalRow], max_points: usize) -> (Vec<std::ops::Range<usize>>, f64) {
    let max_points = max_points.max(1);
    let Some(last) = rows.last() else {
        return (Vec::new(), 0.0);
    };
    let t0 = rows[0].start_s;
    let span = (last.end_s - t0).max(1e-9);
    let tick = rows
        .iter()
        .map(|r| r.end_s - r.start_s)
        .fold(0.0f64, f64::max);
    let width = if rows.len() <= max_points {
        0.0
    } else {
        span / max_points as f64
    };
    let key = |r: &IntervalRow| {
        if width == 0.0 {
            // One point per distinct end time.
            (r.end_s * 1e6).round() as i64
        } else {
            // `end_s` is the bucket's right edge; the last row lands in the last bucket.
            (((r.end_s - t0) / width).ceil() as i64 - 1).clamp(0, max_points as i64 - 1)
        }
    };
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    let mut start = 0;
    let covered = |g: &std::ops::Range<usize>| -> f64 {
        rows[g.clone()].iter().map(|r| r.end_s - r.start_s).sum()
    };
    for i in 1..=rows.len() {
        if i == rows.len() || key(&rows[i]) != key(&rows[start]) {
            let g = start..i;
            // A sliver (the few ms of a drain, a phase switch just before a tick) gives rates
            // and CPU over a tiny window, all noise: it joins the point before it.
            match out.last_mut() {
                Some(prev) if covered(&g) < 0.25 * tick => prev.end = i,
                _ => out.push(g),
            }
            start = i;
        }
    }
    (out, if width == 0.0 { tick } else { width })
}

/// The highest of each percentile over `rows` that recorded anything.
fn worst<'a>(it: impl Iterator<Item = &'a LatencySummary>) -> Option<LatencySummary> {
    it.filter(|s| s.count > 0).fold(None, |acc, s| {
        let mut w = acc.unwrap_or(*s);
        w.count += if acc.is_some() { s.count } else { 0 };
        w.min = w.min.min(s.min);
        w.p50 = w.p50.max(s.p50);
        w.p90 = w.p90.max(s.p90);
        w.p99 = w.p99.max(s.p99);
        w.p999 = w.p999.max(s.p999);
        w.p9999 = w.p9999.max(s.p9999);
        w.max = w.max.max(s.max);
        Some(w)
    })
}

impl ChartData {
    /// The chart columns of `r`, at most `max_points` points per series.
    pub fn of(r: &RunReport, max_points: usize) -> ChartData {
        let mut rows: Vec<&IntervalRow> = r.intervals.iter().collect();
        rows.sort_by(|a, b| a.end_s.total_cmp(&b.end_s));
        let rows: Vec<IntervalRow> = rows.into_iter().cloned().collect();
        let (groups, bucket_s) = buckets(&rows, max_points);
        let fanout = r
            .begin
            .plan
            .pointer("/subscription/mode")
            .and_then(|m| m.as_str())
            .is_none_or(|m| m == "fanout");
        let stage_names: Vec<String> = r.stages.iter().map(|s| s.name.clone()).collect();
        let n_stages = rows
            .iter()
            .map(|r| r.stages.len())
            .max()
            .unwrap_or(0)
            .max(stage_names.len());
        let mut d = ChartData {
            bucket_s,
            intervals: rows.len(),
            stages: (0..n_stages)
                .map(|k| StageSeries {
                    name: stage_names
                        .get(k)
                        .cloned()
                        .unwrap_or_else(|| format!("s{}", k + 1)),
                    ..StageSeries::default()
                })
                .collect(),
            ..ChartData::default()
        };
        let kinds: Vec<ErrorKind> = ErrorKind::ALL
            .into_iter()
            .filter(|k| rows.iter().any(|r| r.counters.errors.get(*k) > 0))
            .collect();
        let mut errors: Vec<Vec<u64>> = vec![Vec::new(); kinds.len()];
        let (mut open, mut dup, mut reord) = (0i64, 0u64, 0u64);
        let any_gauges = rows.iter().any(|r| r.gauges.is_some());
        let mut held = Vec::new();
        let mut last_held = 0;
        for g in groups {
            let rs = &rows[g];
            let last = &rs[rs.len() - 1];
            let dur: f64 = rs.iter().map(|r| (r.end_s - r.start_s).max(0.0)).sum();
            let dur = dur.max(1e-9);
            let sum = |f: fn(&IntervalRow) -> u64| rs.iter().map(f).sum::<u64>();
            d.t.push(last.end_s);
            d.phase.push(last.phase);
            d.sent_per_s.push(sum(|r| r.counters.sent) as f64 / dur);
            d.received_per_s
                .push(sum(|r| r.counters.received) as f64 / dur);
            d.publish.push(worst(rs.iter().map(|r| &r.publish)));
            d.e2e.push(worst(rs.iter().map(|r| &r.e2e)));
            d.connect.push(worst(rs.iter().map(|r| &r.connect)));
            for (k, s) in d.stages.iter_mut().enumerate() {
                let at = |r: &IntervalRow| r.stages.get(k).copied().unwrap_or_default();
                s.reached_per_s
                    .push(rs.iter().map(|r| at(r).reached).sum::<u64>() as f64 / dur);
                s.failed_per_s
                    .push(rs.iter().map(|r| at(r).failed).sum::<u64>() as f64 / dur);
                let lat: Vec<LatencySummary> = rs.iter().map(|r| at(r).latency).collect();
                s.latency.push(worst(lat.iter()));
            }
            for (i, k) in kinds.iter().enumerate() {
                errors[i].push(rs.iter().map(|r| r.counters.errors.get(*k)).sum());
            }
            for r in rs {
                open += r.counters.gaps_opened as i64 - r.counters.gaps_filled as i64;
                dup += r.counters.duplicated;
                reord += r.counters.reordered;
                if let Some(g) = r.gauges {
                    last_held = g.held;
                }
            }
            d.lost.push(if fanout { open.max(0) as u64 } else { 0 });
            d.duplicated.push(dup);
            d.reordered.push(reord);
            d.cpu_pct
                .push(rs.iter().map(|r| r.cpu_s).sum::<f64>() / dur * 100.0);
            let hs: Vec<&msgbench_metrics::HostStats> =
                rs.iter().filter_map(|r| r.host.as_ref()).collect();
            if hs.is_empty()
                && let Some(h) = d.host.as_mut()
            {
                // A point without host figures in a run that has them: a gap, not a zero.
                for v in [
                    &mut h.cpu_pct,
                    &mut h.mem_pct,
                    &mut h.rx_mb_per_s,
                    &mut h.tx_mb_per_s,
                    &mut h.load1,
                ] {
                    v.push(f64::NAN);
                }
            }
            if let Some(last) = hs.last() {
                let h = d.host.get_or_insert_with(HostSeries::default);
                let n = hs.len() as f64;
                h.cpu_pct
                    .push(hs.iter().map(|h| h.cpu_busy).sum::<f64>() / n * 100.0);
                h.mem_pct
                    .push(last.mem_used_bytes as f64 * 100.0 / last.mem_total_bytes.max(1) as f64);
                let mb = |f: fn(&msgbench_metrics::HostStats) -> u64| {
                    hs.iter().map(|h| f(h)).sum::<u64>() as f64 / dur / 1e6
                };
                h.rx_mb_per_s.push(mb(|h| h.net_rx_bytes));
                h.tx_mb_per_s.push(mb(|h| h.net_tx_bytes));
                h.load1.push(last.load1);
            }
            held.push(last_held);
        }
        d.errors = kinds
            .iter()
            .zip(errors)
            .map(|(k, v)| (format!("{k:?}").to_lowercase(), v))
            .collect();
        d.held = any_gauges.then_some(held);
        for r in rows.iter().filter(|r| r.saturated) {
            match d.saturated.last_mut() {
                Some(last) if r.start_s <= last.1 + 1e-6 => last.1 = last.1.max(r.end_s),
                _ => d.saturated.push((r.start_s, r.end_s)),
            }
        }
        // Consecutive intervals of one phase make a span: one per phase in a run, one per
        // step and phase in a capacity search.
        for r in &rows {
            match d.phases.last_mut() {
                Some((p, _, b)) if *p == r.phase => *b = b.max(r.end_s),
                _ => d.phases.push((r.phase, r.start_s, r.end_s)),
            }
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::IntervalRow;
    use msgbench_metrics::Counters;

    fn row(i: u64, sent: u64, p99_ns: u64) -> IntervalRow {
        IntervalRow {
            index: i,
            phase: Phase::Measure,
            start_s: i as f64,
            end_s: i as f64 + 1.0,
            counters: Counters {
                sent,
                received: sent,
                gaps_opened: 1,
                ..Counters::default()
            },
            e2e: LatencySummary {
                count: sent,
                p50: p99_ns / 2,
                p99: p99_ns,
                max: p99_ns * 2,
                ..LatencySummary::default()
            },
            publish: LatencySummary::default(),
            cpu_s: 0.5,
            connect: LatencySummary::default(),
            gauges: None,
            stages: Vec::new(),
            saturated: false,
            host: None,
            loop_lag_ns: 0,
        }
    }

    #[test]
    fn downsampling_bounds_points_and_keeps_sums_and_worst_latency() {
        let rows: Vec<IntervalRow> = (0..10_000)
            .map(|i| row(i, 100, if i == 4321 { 9_000_000 } else { 1_000_000 }))
            .collect();
        let (groups, width) = buckets(&rows, MAX_POINTS);
        assert!(groups.len() <= MAX_POINTS, "{}", groups.len());
        assert_eq!(groups.iter().map(|g| g.len()).sum::<usize>(), 10_000);
        assert!((width - 5.0).abs() < 1e-9, "{width}");
        let mut r = crate::RunReport::from_records(&[crate::Record::Begin(crate::Begin {
            version: 1,
            tool: "t".into(),
            started_unix_ms: 0,
            host: crate::records::Host {
                hostname: "h".into(),
                cpus: 1,
                os: "linux".into(),
            },
            clock: crate::records::ClockInfo {
                source: "x".into(),
                scope: "host".into(),
                ..Default::default()
            },
            plan: serde_json::json!({}),
            segments: Vec::new(),
        })])
        .unwrap();
        r.intervals = rows;
        let d = ChartData::of(&r, MAX_POINTS);
        assert!(d.t.len() <= MAX_POINTS && d.t.len() >= MAX_POINTS - 1);
        // Rates stay exact: 100 msgs per 1 s interval.
        assert!(d.sent_per_s.iter().all(|v| (v - 100.0).abs() < 1e-6));
        // The one slow second shows, at its bucket.
        let worst_p99 = d.e2e.p99.iter().flatten().fold(0.0f64, |a, b| a.max(*b));
        assert!((worst_p99 - 9.0).abs() < 1e-9);
        assert_eq!(d.e2e.p99.iter().flatten().filter(|v| **v > 1.5).count(), 1);
        // Cumulative counts end at the total; CPU is 50% of a core.
        assert_eq!(*d.lost.last().unwrap(), 10_000);
        assert!(d.cpu_pct.iter().all(|v| (v - 50.0).abs() < 1e-6));
        assert_eq!(d.phases, vec![(Phase::Measure, 0.0, 10_000.0)]);
    }

    #[test]
    fn slivers_join_the_point_before() {
        let mut rows: Vec<IntervalRow> = (0..3).map(|i| row(i, 10, 1000)).collect();
        let mut drain = row(3, 0, 1000);
        drain.phase = Phase::Drain;
        drain.start_s = 3.0;
        drain.end_s = 3.006;
        rows.push(drain);
        let (groups, _) = buckets(&rows, MAX_POINTS);
        assert_eq!(groups, vec![0..1, 1..2, 2..4]);
    }

    #[test]
    fn short_runs_keep_every_interval() {
        let rows: Vec<IntervalRow> = (0..30).map(|i| row(i, 10, 1000)).collect();
        let (groups, width) = buckets(&rows, MAX_POINTS);
        assert_eq!(groups.len(), 30);
        assert_eq!(width, 1.0);
    }
}
