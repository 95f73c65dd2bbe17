//! Comparing two runs: a [`Comparison`] of run A (the baseline) and run B, built from two
//! [`RunReport`]s, and its text, JSON and HTML renderings (`msgbench compare a.jsonl b.jsonl`).
//!
//! Every figure is a [`Row`]: A, B, the delta B − A, the change in percent of A, and whether B
//! is better or worse given the figure's direction of better ([`Better`]: higher throughput and
//! completeness are better; lower latency, loss, errors and CPU are better). Rows are grouped by
//! stage: throughput, each latency (publish, end-to-end, send delay, connect), each stage of a
//! multi-stage run, integrity, generator. The model is a plain serialisable value, so the web
//! dashboard can render side-by-side comparisons from it too.
//!
//! Plans that differ (target, size, rate, ...) are still compared, with a warning.

use crate::html::{RunCharts, esc, page, plan_value};
use crate::live::fmt_ns;
use crate::model::{PhaseReport, RunReport};
use crate::stages::StageReport;
use msgbench_metrics::LatencySummary;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// Which way a figure improves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    /// More is better (throughput, completeness).
    Higher,
    /// Less is better (latency, loss, errors, CPU).
    Lower,
}

/// How B fares against A on one figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// B is better.
    Better,
    /// B is worse.
    Worse,
    /// No difference beyond the figure's precision.
    Same,
    /// One side has no value (nothing recorded there).
    NotComparable,
}

/// How a figure is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Messages (or connections) per second.
    PerSecond,
    /// Megabytes (10^6 bytes) per second.
    MegabytesPerSecond,
    /// Nanoseconds (latencies).
    Nanoseconds,
    /// A count of messages or errors.
    Count,
    /// A ratio 0..1 shown in percent (completeness).
    Ratio,
    /// Generator CPU seconds per million messages sent.
    CpuSecondsPerMillion,
    /// TCP segments per message sent or received.
    SegmentsPerMessage,
}

impl Unit {
    /// Relative difference below which two values count as the same: latencies are exact to 3
    /// significant digits (HDR precision), rates, ratios and CPU are shown to about that, counts
    /// are exact.
    pub fn same_within(self) -> f64 {
        match self {
            Unit::Count => 0.0,
            _ => 0.001,
        }
    }

    /// `v` for humans.
    pub fn fmt(self, v: f64) -> String {
        match self {
            Unit::PerSecond => format!("{v:.1}"),
            Unit::MegabytesPerSecond => format!("{v:.2}"),
            Unit::Nanoseconds => fmt_ns(v.abs().round() as u64, 1),
            Unit::Count => format!("{}", v.round() as i64),
            Unit::Ratio => format!("{:.4}%", v * 100.0),
            Unit::CpuSecondsPerMillion => format!("{v:.3}"),
            // Batched traffic has a few segments per thousand messages: keep them visible.
            Unit::SegmentsPerMessage if v != 0.0 && v.abs() < 0.1 => format!("{v:.4}"),
            Unit::SegmentsPerMessage => format!("{v:.2}"),
        }
    }

    /// A delta for humans, with its sign.
    pub fn fmt_delta(self, d: f64) -> String {
        let sign = if d > 0.0 {
            "+"
        } else if d < 0.0 {
            "-"
        } else {
            ""
        };
        match self {
            Unit::Ratio => format!("{sign}{:.4}pp", d.abs() * 100.0),
            _ => format!("{sign}{}", self.fmt(d.abs())),
        }
    }
}

/// One figure of both runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// What it is (`p99`, `sent msgs/s`, `lost`...).
    pub metric: String,
    /// How it is shown.
    pub unit: Unit,
    /// Which way is better.
    pub better: Better,
    /// Run A's value (`None`: not recorded there).
    pub a: Option<f64>,
    /// Run B's value.
    pub b: Option<f64>,
    /// B − A.
    pub delta: Option<f64>,
    /// (B − A) / A in percent (`None` when A is 0 or a value is missing).
    pub percent: Option<f64>,
    /// B against A.
    pub verdict: Verdict,
}

impl Row {
    /// Compares `a` with `b`.
    pub fn new(metric: &str, unit: Unit, better: Better, a: Option<f64>, b: Option<f64>) -> Row {
        let (delta, percent, verdict) = match (a, b) {
            (Some(a), Some(b)) => {
                let d = b - a;
                let scale = a.abs().max(b.abs());
                let verdict = if d == 0.0 || d.abs() <= unit.same_within() * scale {
                    Verdict::Same
                } else if (d > 0.0) == (better == Better::Higher) {
                    Verdict::Better
                } else {
                    Verdict::Worse
                };
                (Some(d), (a != 0.0).then(|| d / a.abs() * 100.0), verdict)
            }
            _ => (None, None, Verdict::NotComparable),
        };
        Row {
            metric: metric.to_string(),
            unit,
            better,
            a,
            b,
            delta,
            percent,
            verdict,
        }
    }
}

/// Figures of one stage (or one aspect) of both runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Group {
    /// `throughput`, `publish latency`, `stage RECEIVED`, `integrity`...
    pub name: String,
    /// The figures.
    pub rows: Vec<Row>,
}

/// What identifies one of the two runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSide {
    /// Run name.
    pub name: String,
    /// Where it came from (the results file), when the caller says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Target (credentials removed).
    pub target: String,
    /// `msgbench <version>`.
    pub tool: String,
    /// Wall-clock start, Unix milliseconds.
    pub started_unix_ms: u64,
    /// Run length, s.
    pub duration_s: f64,
    /// Has its `end` record.
    pub complete: bool,
    /// Stopped early.
    pub interrupted: bool,
    /// Its validity warnings.
    pub warnings: Vec<String>,
}

impl RunSide {
    fn of(r: &RunReport) -> Self {
        RunSide {
            name: r.name.clone(),
            source: None,
            target: r.target.clone(),
            tool: r.begin.tool.clone(),
            started_unix_ms: r.begin.started_unix_ms,
            duration_s: r.duration_s,
            complete: r.complete,
            interrupted: r.interrupted,
            warnings: r.warnings.clone(),
        }
    }

    /// `name (source)` or the name.
    pub fn label(&self) -> String {
        match &self.source {
            Some(s) => format!("{} ({s})", self.name),
            None => self.name.clone(),
        }
    }
}

/// A plan setting that differs between the runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanDifference {
    /// The setting.
    pub setting: String,
    /// Run A's value, for humans (`-` when absent).
    pub a: String,
    /// Run B's value.
    pub b: String,
}

/// Plan settings compared, by JSON pointer (run ids, names and file names differ by design).
pub const COMPARED_SETTINGS: &[(&str, &str)] = &[
    ("target", "/target"),
    ("consume_from", "/consume_from"),
    ("size", "/size"),
    ("rate", "/rate"),
    ("topics", "/topics"),
    ("producers_per_topic", "/producers_per_topic"),
    ("consumers_per_topic", "/consumers_per_topic"),
    ("subscription", "/subscription"),
    ("measure", "/measure"),
    ("warmup", "/warmup"),
    ("max_in_flight", "/max_in_flight"),
    ("request_reply", "/request_reply"),
    ("qos", "/client/qos"),
    ("connections", "/connections"),
    ("tracking", "/tracking"),
];

/// Run B against run A (the baseline).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The baseline.
    pub a: RunSide,
    /// The run compared with it.
    pub b: RunSide,
    /// Plan settings that differ (the runs are compared all the same).
    pub plan_differences: Vec<PlanDifference>,
    /// What makes the comparison less meaningful.
    pub warnings: Vec<String>,
    /// The figures, by stage.
    pub groups: Vec<Group>,
}

/// A named figure of `T`.
type Figure<T, V> = (&'static str, fn(&T) -> V);
/// A named part of `T`.
type Part<T, V> = (&'static str, for<'a> fn(&'a T) -> &'a V);

fn lat_rows(a: Option<&LatencySummary>, b: Option<&LatencySummary>) -> Vec<Row> {
    let v = |l: Option<&LatencySummary>, f: fn(&LatencySummary) -> u64| {
        l.filter(|l| l.count > 0).map(|l| f(l) as f64)
    };
    let figures: [Figure<LatencySummary, u64>; 5] = [
        ("p50", |l| l.p50),
        ("p90", |l| l.p90),
        ("p99", |l| l.p99),
        ("p99.9", |l| l.p999),
        ("max", |l| l.max),
    ];
    figures
        .iter()
        .map(|(n, f)| Row::new(n, Unit::Nanoseconds, Better::Lower, v(a, *f), v(b, *f)))
        .collect()
}

fn group(name: &str, rows: Vec<Row>) -> Option<Group> {
    // A group whose every figure is missing on both sides says nothing.
    rows.iter()
        .any(|r| r.a.is_some() || r.b.is_some())
        .then(|| Group {
            name: name.to_string(),
            rows: rows
                .into_iter()
                .filter(|r| r.a.is_some() || r.b.is_some())
                .collect(),
        })
}

impl Comparison {
    /// Compares run `b` with the baseline `a`.
    pub fn new(a: &RunReport, b: &RunReport) -> Comparison {
        let (ra, rb) = (a.result.as_ref(), b.result.as_ref());
        let f = |p: Option<&PhaseReport>, g: fn(&PhaseReport) -> f64| p.map(g);
        let mut groups = Vec::new();
        let mut tp = vec![
            Row::new(
                "sent msgs/s",
                Unit::PerSecond,
                Better::Higher,
                f(ra, |p| p.sent_per_s),
                f(rb, |p| p.sent_per_s),
            ),
            Row::new(
                "received msgs/s",
                Unit::PerSecond,
                Better::Higher,
                f(ra, |p| p.received_per_s),
                f(rb, |p| p.received_per_s),
            ),
            Row::new(
                "sent MB/s",
                Unit::MegabytesPerSecond,
                Better::Higher,
                f(ra, |p| p.sent_mb_per_s),
                f(rb, |p| p.sent_mb_per_s),
            ),
            Row::new(
                "received MB/s",
                Unit::MegabytesPerSecond,
                Better::Higher,
                f(ra, |p| p.received_mb_per_s),
                f(rb, |p| p.received_mb_per_s),
            ),
        ];
        if a.connections.is_some() || b.connections.is_some() {
            let c = |r: &RunReport| r.connections.as_ref().map(|c| c.connections_per_s);
            tp.push(Row::new(
                "connections/s",
                Unit::PerSecond,
                Better::Higher,
                c(a),
                c(b),
            ));
        }
        groups.extend(group("throughput", tp));
        let stages: [Part<PhaseReport, LatencySummary>; 4] = [
            ("publish latency", |p| &p.publish),
            ("end-to-end latency", |p| &p.e2e),
            ("send delay", |p| &p.send_delay),
            ("connect latency", |p| &p.connect),
        ];
        for (name, pick) in stages {
            groups.extend(group(name, lat_rows(ra.map(pick), rb.map(pick))));
        }
        let mut names: Vec<&str> = a.stages.iter().map(|s| s.name.as_str()).collect();
        for s in &b.stages {
            if !names.contains(&s.name.as_str()) {
                names.push(&s.name);
            }
        }
        for name in names {
            let (sa, sb) = (
                a.stages.iter().find(|s| s.name == name),
                b.stages.iter().find(|s| s.name == name),
            );
            let mut rows = vec![Row::new(
                "msgs/s",
                Unit::PerSecond,
                Better::Higher,
                sa.map(|s| s.msgs_per_s),
                sb.map(|s| s.msgs_per_s),
            )];
            rows.extend(lat_rows(sa.map(|s| &s.latency), sb.map(|s| &s.latency)));
            let count = |s: Option<&StageReport>, g: fn(&StageReport) -> Option<u64>| {
                s.and_then(g).map(|v| v as f64)
            };
            let counts: [Figure<StageReport, Option<u64>>; 3] = [
                ("missing", |s| s.missing),
                ("failed", |s| Some(s.failed)),
                ("duplicates", |s| Some(s.duplicates)),
            ];
            for (n, g) in counts {
                rows.push(Row::new(
                    n,
                    Unit::Count,
                    Better::Lower,
                    count(sa, g),
                    count(sb, g),
                ));
            }
            groups.extend(group(&format!("stage {name}"), rows));
        }
        let int = |r: &RunReport, g: fn(&RunReport) -> u64| Some(g(r) as f64);
        let counts: [Figure<RunReport, u64>; 7] = [
            ("lost", |r| r.integrity.lost),
            ("duplicated", |r| r.integrity.duplicated),
            ("reordered", |r| r.integrity.reordered),
            ("foreign", |r| r.integrity.foreign),
            ("errors", |r| {
                r.phases.iter().map(|p| p.counters.errors.total()).sum()
            }),
            ("late sends", |r| {
                r.result.as_ref().map_or(0, |p| p.counters.late_sends)
            }),
            ("nacked", |r| {
                r.result.as_ref().map_or(0, |p| p.counters.nacked)
            }),
        ];
        let mut rows: Vec<Row> = counts
            .iter()
            .map(|(n, g)| Row::new(n, Unit::Count, Better::Lower, int(a, *g), int(b, *g)))
            .collect();
        rows.push(Row::new(
            "completeness",
            Unit::Ratio,
            Better::Higher,
            Some(a.integrity.completeness),
            Some(b.integrity.completeness),
        ));
        groups.extend(group("integrity", rows));
        let cpu = |p: Option<&PhaseReport>| {
            p.filter(|p| p.counters.sent > 0 && p.cpu_s > 0.0)
                .map(|p| p.cpu_s_per_million_sent)
        };
        groups.extend(group(
            "generator",
            vec![Row::new(
                "CPU-s per million sent",
                Unit::CpuSecondsPerMillion,
                Better::Lower,
                cpu(ra),
                cpu(rb),
            )],
        ));
        // What the kernel's TCP stack did per message: a broker that batches shows fewer
        // segments, a lossy network retransmits.
        let seg = |r: &RunReport, pick| r.tcp_per_message(pick);
        let retrans = |r: &RunReport| r.tcp.map(|t| t.retransmitted as f64);
        groups.extend(group(
            "tcp",
            vec![
                Row::new(
                    "segments in per message",
                    Unit::SegmentsPerMessage,
                    Better::Lower,
                    seg(a, |t| t.segs_in),
                    seg(b, |t| t.segs_in),
                ),
                Row::new(
                    "segments out per message",
                    Unit::SegmentsPerMessage,
                    Better::Lower,
                    seg(a, |t| t.segs_out),
                    seg(b, |t| t.segs_out),
                ),
                Row::new(
                    "retransmitted segments",
                    Unit::Count,
                    Better::Lower,
                    retrans(a),
                    retrans(b),
                ),
            ],
        ));

        let plan_differences = plan_differences(&a.begin.plan, &b.begin.plan);
        let mut warnings = Vec::new();
        // Two capacity searches: their answers first, then the figures of all steps together.
        match (&a.search, &b.search) {
            (Some(sa), Some(sb)) => {
                let d = crate::search::compare(sa, sb);
                groups.insert(
                    0,
                    Group {
                        name: "capacity search".into(),
                        rows: vec![Row::new(
                            "capacity msgs/s",
                            Unit::PerSecond,
                            Better::Higher,
                            d.a,
                            d.b,
                        )],
                    },
                );
                for (tag, limit) in ["A", "B"].iter().zip(&d.limits) {
                    if limit != "objectives" {
                        warnings.push(format!(
                            "search {tag} ended on `{limit}`, not on its objectives: its capacity is a bound, not the knee"
                        ));
                    }
                }
            }
            (Some(_), None) | (None, Some(_)) => warnings.push(
                "only one of the files is a capacity search: its figures add every step together"
                    .into(),
            ),
            (None, None) => {}
        }
        if !plan_differences.is_empty() {
            warnings.push(format!(
                "the runs have different plans ({}): differences may come from the workload, not the system",
                plan_differences
                    .iter()
                    .map(|d| d.setting.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        for (tag, r) in [("A", a), ("B", b)] {
            if !r.complete {
                warnings.push(format!(
                    "run {tag} has no end record (it was killed): its figures are partial"
                ));
            }
            if r.interrupted {
                warnings.push(format!("run {tag} was interrupted before its planned end"));
            }
            if r.result.is_none() {
                warnings.push(format!(
                    "run {tag} has no measure phase: no result to compare"
                ));
            }
            if !r.warnings.is_empty() {
                warnings.push(format!(
                    "run {tag} has {} validity warning{}: {}",
                    r.warnings.len(),
                    if r.warnings.len() == 1 { "" } else { "s" },
                    r.warnings.join("; ")
                ));
            }
        }
        Comparison {
            a: RunSide::of(a),
            b: RunSide::of(b),
            plan_differences,
            warnings,
            groups,
        }
    }

    /// Names where the runs came from (file names), for the headers.
    pub fn with_sources(mut self, a: &str, b: &str) -> Self {
        self.a.source = Some(a.to_string());
        self.b.source = Some(b.to_string());
        self
    }

    /// The group named `name`.
    pub fn group(&self, name: &str) -> Option<&Group> {
        self.groups.iter().find(|g| g.name == name)
    }

    /// The row `metric` of group `group`.
    pub fn row(&self, group: &str, metric: &str) -> Option<&Row> {
        self.group(group)?.rows.iter().find(|r| r.metric == metric)
    }
}

/// The [`COMPARED_SETTINGS`] whose values differ between two plans.
pub fn plan_differences(a: &serde_json::Value, b: &serde_json::Value) -> Vec<PlanDifference> {
    let show = |v: Option<&serde_json::Value>| match v {
        None | Some(serde_json::Value::Null) => "-".to_string(),
        Some(v) => plan_value(v),
    };
    COMPARED_SETTINGS
        .iter()
        .filter_map(|(name, ptr)| {
            let (va, vb) = (
                a.pointer(ptr).filter(|v| !v.is_null()),
                b.pointer(ptr).filter(|v| !v.is_null()),
            );
            (va != vb).then(|| PlanDifference {
                setting: name.to_string(),
                a: show(va),
                b: show(vb),
            })
        })
        .collect()
}

fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Better => "better",
        Verdict::Worse => "worse",
        Verdict::Same => "same",
        Verdict::NotComparable => "n/a",
    }
}

fn cells(r: &Row) -> [String; 4] {
    let v = |x: Option<f64>| x.map_or("-".to_string(), |x| r.unit.fmt(x));
    [
        v(r.a),
        v(r.b),
        r.delta.map_or("-".into(), |d| r.unit.fmt_delta(d)),
        r.percent.map_or("-".into(), |p| format!("{p:+.1}%")),
    ]
}

fn direction(g: &Group) -> &'static str {
    let hi = g.rows.iter().all(|r| r.better == Better::Higher);
    let lo = g.rows.iter().all(|r| r.better == Better::Lower);
    match (hi, lo) {
        (true, _) => " (higher is better)",
        (_, true) => " (lower is better)",
        _ => "",
    }
}

/// Writes the comparison as text tables.
pub fn write_text(c: &Comparison, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    writeln!(out, "msgbench compare")?;
    for (tag, s) in [("A", &c.a), ("B", &c.b)] {
        writeln!(
            out,
            "  {tag}: {} -> {}, {:.2}s, {}{}",
            s.label(),
            s.target,
            s.duration_s,
            s.tool,
            if s.complete { "" } else { " (INCOMPLETE)" }
        )?;
    }
    if !c.plan_differences.is_empty() {
        writeln!(out)?;
        writeln!(out, "plan differences")?;
        for d in &c.plan_differences {
            writeln!(out, "  {:<20} A {}   B {}", d.setting, d.a, d.b)?;
        }
    }
    for g in &c.groups {
        writeln!(out)?;
        writeln!(
            out,
            "{:<34} {:>12} {:>12} {:>12} {:>9}",
            format!("{}{}", g.name, direction(g)),
            "A",
            "B",
            "delta",
            "%"
        )?;
        for r in &g.rows {
            let [a, b, d, p] = cells(r);
            writeln!(
                out,
                "  {:<32} {a:>12} {b:>12} {d:>12} {p:>9}  {}",
                r.metric,
                verdict_word(r.verdict)
            )?;
        }
    }
    if !c.warnings.is_empty() {
        writeln!(out)?;
        for w in &c.warnings {
            writeln!(out, "warning: {w}")?;
        }
    }
    Ok(())
}

#[derive(Serialize)]
struct CompareData<'a> {
    kind: &'static str,
    a: &'a RunCharts,
    b: &'a RunCharts,
}

/// Writes the comparison as one self-contained HTML page: the tables, then A and B overlaid on
/// the time-series and percentile charts (which need the two reports themselves).
pub fn write_html(
    c: &Comparison,
    a: &RunReport,
    b: &RunReport,
    out: &mut dyn std::io::Write,
) -> Result<(), crate::ReportError> {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<header><h1>msgbench compare: {} vs {}</h1>",
        esc(&c.a.name),
        esc(&c.b.name)
    );
    s.push_str("<table class=\"kv\">");
    for (tag, side) in [("A (baseline)", &c.a), ("B", &c.b)] {
        let _ = writeln!(
            s,
            "<tr><th>{tag}</th><td>{} → {} · {} · {:.2}s · {}{}</td></tr>",
            esc(&side.label()),
            esc(&side.target),
            esc(&crate::html::utc(side.started_unix_ms)),
            side.duration_s,
            esc(&side.tool),
            if side.complete { "" } else { " · INCOMPLETE" }
        );
    }
    s.push_str("</table>\n");
    for w in &c.warnings {
        let _ = writeln!(s, "<p class=\"badge warn\">{}</p>", esc(w));
    }
    s.push_str("</header>\n<main>\n");
    if !c.plan_differences.is_empty() {
        s.push_str("<section id=\"plans\"><h2>Plan differences</h2><table class=\"kv\"><tr><th>setting</th><th>A</th><th>B</th></tr>\n");
        for d in &c.plan_differences {
            let _ = writeln!(
                s,
                "<tr><th>{}</th><td>{}</td><td>{}</td></tr>",
                esc(&d.setting),
                esc(&d.a),
                esc(&d.b)
            );
        }
        s.push_str("</table></section>\n");
    }
    s.push_str("<section id=\"deltas\"><h2>B against A</h2>\n");
    for g in &c.groups {
        let _ = writeln!(
            s,
            "<h3>{}{}</h3>\n<table class=\"num\"><tr><th></th><th>A</th><th>B</th><th>delta</th><th>%</th><th></th></tr>",
            esc(&g.name),
            esc(direction(g))
        );
        for r in &g.rows {
            let [a, b, d, p] = cells(r);
            let w = verdict_word(r.verdict);
            let class = match r.verdict {
                Verdict::NotComparable => "same",
                _ => w,
            };
            let _ = writeln!(
                s,
                "<tr><th>{}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{class}\">{w}</td></tr>",
                esc(&r.metric),
                esc(&a),
                esc(&b),
                esc(&d),
                esc(&p)
            );
        }
        s.push_str("</table>\n");
    }
    s.push_str("</section>\n");
    s.push_str("<section id=\"charts\"><h2>Over time</h2><p class=\"note\">Each run's seconds since its own start.</p><div id=\"timeseries\"></div></section>\n");
    s.push_str("<section id=\"distribution\"><h2>Latency percentile distribution</h2><div id=\"percentiles\"></div></section>\n");
    s.push_str("</main>\n<footer>Generated by msgbench compare from two results files. Charts: uPlot (MIT).</footer>\n");
    let (ca, cb) = (RunCharts::of(a, &c.a.name), RunCharts::of(b, &c.b.name));
    let html = page(
        &format!("msgbench compare: {} vs {}", c.a.name, c.b.name),
        &s,
        &CompareData {
            kind: "compare",
            a: &ca,
            b: &cb,
        },
    )?;
    out.write_all(html.as_bytes())?;
    Ok(())
}

/// Writes the comparison as pretty JSON.
pub fn write_json(c: &Comparison, out: &mut dyn std::io::Write) -> Result<(), crate::ReportError> {
    serde_json::to_writer_pretty(&mut *out, c)?;
    writeln!(out)?;
    Ok(())
}
