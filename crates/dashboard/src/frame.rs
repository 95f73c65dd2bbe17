//! From results records to chart points: the columns a run's charts show (decided by its
//! `begin` record) and one row per `interval` record.
//!
//! The live page and the run page of the history both use this, so a run looks the same while
//! it runs and afterwards; the live page adds the host columns, which the results file does not
//! hold ([`crate::sysstat`]).
//!
//! A phase change splits a tick into two records, one of which may last a millisecond; its
//! rate (a few messages over a millisecond) would be a spike of millions per second that
//! flattens every other point. A window shorter than half a tick is therefore carried into the
//! next point (merged by the columns' rules, so counts and time are kept exactly), and the
//! last one is released by [`FrameBuilder::flush`] at the end.

use crate::series::{Column, Merge, Row, Schema, merge_into};
use crate::sysstat::Sample;
use msgbench_metrics::{IntervalStats, LatencySummary};
use msgbench_report::Begin;

/// The percentiles drawn for each latency, with their column suffix and legend label.
const PERCENTILES: [(&str, &str); 5] = [
    ("p50", "p50"),
    ("p90", "p90"),
    ("p99", "p99"),
    ("p999", "p99.9"),
    ("max", "max"),
];

/// What kind of workload a plan describes, as far as the charts care.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunShape {
    /// Every consumer receives every message, so open sequence gaps are losses.
    pub fanout: bool,
    /// A connection workload (hold or storm): connections held and connect latency.
    pub connections: bool,
    /// Names of the stages of a multi-stage run, in plan order.
    pub stages: Vec<String>,
    /// Names of the groups of a run with `[[groups]]`, in plan order.
    pub groups: Vec<String>,
}

impl RunShape {
    /// Reads the shape from the plan of a `begin` record.
    pub fn of(begin: &Begin) -> Self {
        let plan = &begin.plan;
        RunShape {
            fanout: plan.pointer("/subscription/mode").and_then(|v| v.as_str()) == Some("fanout"),
            connections: plan.get("connections").is_some_and(|c| !c.is_null()),
            stages: plan
                .pointer("/tracking/stages")
                .and_then(|v| v.as_array())
                .map(|a| {
                    a.iter()
                        .enumerate()
                        .map(|(i, s)| {
                            s.get("name")
                                .and_then(|n| n.as_str())
                                .map_or_else(|| format!("stage {}", i + 1), str::to_string)
                        })
                        .collect()
                })
                .unwrap_or_default(),
            groups: plan
                .get("groups")
                .and_then(|v| v.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|g| g.get("name").and_then(|n| n.as_str()))
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

/// Turns the interval records of one run into rows of its [`Schema`].
#[derive(Debug)]
pub struct FrameBuilder {
    schema: Schema,
    shape: RunShape,
    host: bool,
    gaps_opened: u64,
    gaps_filled: u64,
    duplicated: u64,
    reordered: u64,
    min_window_s: f64,
    carry: Option<Row>,
}

/// Seconds of a duration as the plan writes it (`1s`, `250ms`, `2m`); `None` if unreadable.
fn parse_seconds(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (n, unit) = s.split_at(split);
    let n: f64 = n.parse().ok()?;
    let scale = match unit.trim() {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => return None,
    };
    Some(n * scale)
}

fn latency_columns(
    cols: &mut Vec<Column>,
    schema_charts: &mut Vec<(String, String)>,
    key: &str,
    title: &str,
) {
    let chart = format!("lat.{key}");
    for (suffix, label) in PERCENTILES {
        cols.push(Column::new(
            &format!("{key}.{suffix}"),
            label,
            &chart,
            "ms",
            Merge::Max,
        ));
    }
    schema_charts.push((chart, format!("{title} latency")));
}

impl FrameBuilder {
    /// The columns of the run that `begin` starts; `host` adds host CPU and memory (live only).
    pub fn new(begin: &Begin, host: bool) -> Self {
        let shape = RunShape::of(begin);
        let mut cols = vec![
            Column::new("sent_per_s", "sent", "throughput", "msgs/s", Merge::Mean),
            Column::new(
                "received_per_s",
                "received",
                "throughput",
                "msgs/s",
                Merge::Mean,
            ),
            Column::new("errors_per_s", "errors", "errors", "1/s", Merge::Mean),
            Column::new("late_per_s", "late sends", "errors", "1/s", Merge::Mean),
        ];
        if shape.fanout {
            cols.push(Column::new(
                "lost",
                "lost (open gaps)",
                "integrity",
                "count",
                Merge::Last,
            ));
        }
        cols.push(Column::new(
            "duplicated",
            "duplicated",
            "integrity",
            "count",
            Merge::Last,
        ));
        cols.push(Column::new(
            "reordered",
            "reordered",
            "integrity",
            "count",
            Merge::Last,
        ));
        if shape.connections {
            cols.push(Column::new(
                "held",
                "held",
                "connections",
                "count",
                Merge::Max,
            ));
        }
        // Runs with groups: each group's rates and end-to-end p99 (from `IntervalStats::groups`).
        for (i, name) in shape.groups.iter().enumerate() {
            for (key, what) in [("sent_per_s", "sent"), ("received_per_s", "received")] {
                cols.push(Column::new(
                    &format!("g{}.{key}", i + 1),
                    &format!("{name} {what}"),
                    "groups",
                    "msgs/s",
                    Merge::Mean,
                ));
            }
            cols.push(Column::new(
                &format!("g{}.e2e.p99", i + 1),
                &format!("{name} p99"),
                "groups_e2e",
                "ms",
                Merge::Max,
            ));
        }
        let mut lat_charts = Vec::new();
        if shape.connections {
            latency_columns(&mut cols, &mut lat_charts, "connect", "Connect");
        }
        latency_columns(&mut cols, &mut lat_charts, "e2e", "End-to-end");
        latency_columns(&mut cols, &mut lat_charts, "publish", "Publish");
        for (i, name) in shape.stages.iter().enumerate() {
            latency_columns(
                &mut cols,
                &mut lat_charts,
                &format!("s{}", i + 1),
                &format!("Stage {} ({name})", i + 1),
            );
        }
        cols.push(Column::new(
            "gen_cpu",
            "generator",
            "cpu",
            "cores",
            Merge::Mean,
        ));
        if host {
            cols.push(Column::new("host_cpu", "host", "cpu", "cores", Merge::Mean));
        }
        cols.push(Column::new(
            "gen_rss",
            "generator RSS",
            "memory",
            "bytes",
            Merge::Max,
        ));
        if host {
            cols.push(Column::new(
                "host_mem",
                "host in use",
                "memory",
                "bytes",
                Merge::Max,
            ));
        }
        let mut schema = Schema::new(cols);
        schema.chart("throughput", "Throughput", "msgs/s");
        if !shape.groups.is_empty() {
            schema.chart("groups", "Throughput by group", "msgs/s");
            schema.chart("groups_e2e", "End-to-end p99 by group", "ms");
        }
        for (id, title) in &lat_charts {
            schema.chart(id, title, "ms");
        }
        schema.chart("errors", "Errors and late sends", "1/s");
        schema.chart("integrity", "Integrity (cumulative)", "count");
        if shape.connections {
            schema.chart("connections", "Connections held", "count");
        }
        schema.chart("cpu", "CPU", "cores");
        schema.chart("memory", "Memory", "bytes");
        let tick_s = begin
            .plan
            .get("tick")
            .and_then(|t| t.as_str())
            .and_then(parse_seconds)
            .filter(|t| *t > 0.0)
            .unwrap_or(1.0);
        FrameBuilder {
            schema,
            shape,
            host,
            gaps_opened: 0,
            gaps_filled: 0,
            duplicated: 0,
            reordered: 0,
            min_window_s: tick_s / 2.0,
            carry: None,
        }
    }

    /// The columns.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// The run's shape.
    pub fn shape(&self) -> &RunShape {
        &self.shape
    }

    /// The point of one interval, or `None` while its window is too short to stand alone (it
    /// is merged into the next point). `sample` fills the host and memory columns (live view).
    pub fn row(&mut self, iv: &IntervalStats, sample: Option<&Sample>) -> Option<Row> {
        let mut row = self.raw_row(iv, sample);
        if let Some(mut carried) = self.carry.take() {
            merge_into(&self.schema, &mut carried, &row);
            row = carried;
        }
        if row[1] < self.min_window_s {
            self.carry = Some(row);
            return None;
        }
        Some(row)
    }

    /// The point still carried, if any (call once the run has no more intervals).
    pub fn flush(&mut self) -> Option<Row> {
        self.carry.take()
    }

    fn raw_row(&mut self, iv: &IntervalStats, sample: Option<&Sample>) -> Row {
        let c = &iv.counters;
        self.gaps_opened += c.gaps_opened;
        self.gaps_filled += c.gaps_filled;
        self.duplicated += c.duplicated;
        self.reordered += c.reordered;
        let dt = (iv.end_s - iv.start_s).max(0.0);
        let per_s = |n: u64| if dt > 0.0 { n as f64 / dt } else { f64::NAN };
        let mut row = vec![f64::NAN; self.schema.len()];
        let mut set = |key: &str, v: f64| {
            if let Some(k) = self.schema.index(key) {
                row[k] = v;
            }
        };
        set("t", iv.end_s);
        set("dt", dt);
        set("sent_per_s", per_s(c.sent));
        set("received_per_s", per_s(c.received));
        set("errors_per_s", per_s(c.errors.total()));
        set("late_per_s", per_s(c.late_sends));
        set(
            "lost",
            self.gaps_opened.saturating_sub(self.gaps_filled) as f64,
        );
        set("duplicated", self.duplicated as f64);
        set("reordered", self.reordered as f64);
        if let Some(g) = iv.gauges {
            set("held", g.held as f64);
            set("gen_rss", g.rss_bytes as f64);
        }
        let mut lat = |key: &str, s: LatencySummary| {
            if s.count == 0 {
                return;
            }
            for (suffix, _) in PERCENTILES {
                let ns = match suffix {
                    "p50" => s.p50,
                    "p90" => s.p90,
                    "p99" => s.p99,
                    "p999" => s.p999,
                    _ => s.max,
                };
                set(&format!("{key}.{suffix}"), ns as f64 / 1e6);
            }
        };
        lat("e2e", LatencySummary::of(&iv.histograms.e2e));
        lat("publish", LatencySummary::of(&iv.histograms.publish));
        if self.shape.connections {
            lat("connect", LatencySummary::of(&iv.histograms.connect));
        }
        for (i, st) in iv.stages.iter().enumerate() {
            lat(&format!("s{}", i + 1), LatencySummary::of(&st.latency));
        }
        for g in &iv.groups {
            let Some(i) = self.shape.groups.iter().position(|n| *n == g.name) else {
                continue;
            };
            set(&format!("g{}.sent_per_s", i + 1), per_s(g.sent));
            set(&format!("g{}.received_per_s", i + 1), per_s(g.received));
            if let Some(p99) = g.e2e_p99_ns {
                set(&format!("g{}.e2e.p99", i + 1), p99 as f64 / 1e6);
            }
        }
        set("gen_cpu", if dt > 0.0 { iv.cpu_s / dt } else { f64::NAN });
        if let Some(s) = sample {
            if let Some(rss) = s.self_rss {
                set("gen_rss", rss as f64);
            }
            if self.host {
                set("host_cpu", s.host_cpu_cores.unwrap_or(f64::NAN));
                set("host_mem", s.host_mem_used.map_or(f64::NAN, |b| b as f64));
            }
        }
        row
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use msgbench_metrics::{Counters, Histograms, Phase};

    fn begin(plan: serde_json::Value) -> Begin {
        serde_json::from_value(serde_json::json!({
            "version": 1, "tool": "t", "started_unix_ms": 0,
            "host": {"hostname": "h", "cpus": 1, "os": "linux"},
            "clock": {"source": "CLOCK_MONOTONIC", "scope": "host"},
            "plan": plan
        }))
        .unwrap()
    }

    fn iv(start_s: f64, end_s: f64, sent: u64, phase: Phase) -> IntervalStats {
        IntervalStats {
            index: start_s as u64,
            phase,
            start_s,
            end_s,
            counters: Counters {
                sent,
                received: sent,
                duplicated: 1,
                ..Counters::default()
            },
            histograms: Histograms::new(),
            cpu_s: 0.0,
            gauges: None,
            stages: Vec::new(),
            host: None,
            loop_lag_ns: 0,
            groups: Vec::new(),
        }
    }

    #[test]
    fn columns_follow_the_plan() {
        let f = FrameBuilder::new(
            &begin(serde_json::json!({"subscription": {"mode": "queue", "group": "g"}})),
            false,
        );
        assert!(
            f.schema().index("lost").is_none(),
            "open gaps are not losses in a queue group"
        );
        assert!(f.schema().index("host_cpu").is_none());
        assert!(f.schema().index("held").is_none());
        let plan = serde_json::json!({
            "subscription": {"mode": "fanout"},
            "connections": {"mode": "hold"},
            "tracking": {"stages": [{"name": "reply"}, {"name": "inbox"}]}
        });
        let f = FrameBuilder::new(&begin(plan), true);
        for k in [
            "lost",
            "held",
            "connect.p99",
            "s1.p50",
            "s2.max",
            "host_cpu",
            "host_mem",
        ] {
            assert!(f.schema().index(k).is_some(), "{k}");
        }
        assert!(
            f.schema()
                .charts
                .iter()
                .any(|c| c.title == "Stage 2 (inbox) latency")
        );
        assert_eq!(f.shape().stages, ["reply", "inbox"]);
    }

    #[test]
    fn a_split_tick_is_one_point_and_nothing_is_lost() {
        let mut f = FrameBuilder::new(&begin(serde_json::json!({"tick": "1s"})), false);
        let sent = f.schema().index("sent_per_s").unwrap();
        let dup = f.schema().index("duplicated").unwrap();
        // Warm-up ends 1 ms into the second tick: that sliver is carried into the next point.
        let a = f.row(&iv(0.0, 1.0, 100, Phase::Warmup), None).unwrap();
        assert_eq!(a[sent], 100.0);
        assert!(f.row(&iv(1.0, 1.001, 4, Phase::Warmup), None).is_none());
        let b = f.row(&iv(1.001, 2.0, 96, Phase::Measure), None).unwrap();
        assert_eq!((b[0], b[1]), (2.0, 1.0));
        assert!((b[sent] - 100.0).abs() < 1e-9, "{}", b[sent]);
        assert_eq!(b[dup], 3.0);
        // The last sliver comes out at the end.
        assert!(f.row(&iv(2.0, 2.2, 10, Phase::Drain), None).is_none());
        let last = f.flush().unwrap();
        assert_eq!(last[0], 2.2);
        assert!((last[sent] - 50.0).abs() < 1e-9);
        assert!(f.flush().is_none());
    }

    #[test]
    fn groups_get_a_column_each() {
        let plan = serde_json::json!({"groups": [{"name": "devices"}, {"name": "dashboard"}]});
        let mut f = FrameBuilder::new(&begin(plan), false);
        assert_eq!(f.shape().groups, ["devices", "dashboard"]);
        assert!(
            f.schema()
                .charts
                .iter()
                .any(|c| c.title == "Throughput by group")
        );
        let mut x = iv(0.0, 2.0, 300, Phase::Measure);
        x.groups = vec![
            msgbench_metrics::GroupTick {
                name: "dashboard".into(),
                received: 100,
                e2e_p99_ns: Some(2_500_000),
                ..Default::default()
            },
            msgbench_metrics::GroupTick {
                name: "devices".into(),
                sent: 300,
                ..Default::default()
            },
        ];
        let row = f.row(&x, None).unwrap();
        let at = |k: &str| row[f.schema().index(k).unwrap()];
        assert_eq!(at("g1.sent_per_s"), 150.0);
        assert_eq!(at("g2.received_per_s"), 50.0);
        assert_eq!(at("g2.e2e.p99"), 2.5);
        assert!(at("g1.e2e.p99").is_nan(), "no deliveries, no latency");
    }

    #[test]
    fn plan_durations() {
        assert_eq!(parse_seconds("1s"), Some(1.0));
        assert_eq!(parse_seconds("250ms"), Some(0.25));
        assert_eq!(parse_seconds("2m"), Some(120.0));
        assert_eq!(parse_seconds("soon"), None);
    }
}
