//! The self-contained HTML report: one file that opens without a network, with the run's
//! configuration, the summary tables (the same figures as the text report), time-series charts,
//! the latency percentile distribution, integrity counts, validity warnings and events.
//!
//! Tables are plain HTML (readable without scripts); the charts are drawn by the vendored uPlot
//! library (`assets/uplot/`, MIT) and `assets/msgbench.js`, both inlined, from the chart data
//! inlined as JSON (`<script type="application/json" id="msgbench-data">`). Like every view, the
//! page is a pure function of the [`RunReport`], hence of the results file.

use crate::chart::{ChartData, MAX_POINTS};
use crate::distribution::PercentilePoint;
use crate::live::fmt_ns;
use crate::model::{PhaseReport, RunReport};
use msgbench_metrics::{ErrorKind, LatencySummary, Phase};
use serde::Serialize;
use std::fmt::Write as _;

/// uPlot 1.6.32 (MIT, `assets/uplot/LICENSE`), vendored once for every HTML view of msgbench.
pub const UPLOT_JS: &str = include_str!("../assets/uplot/uPlot.iife.min.js");
/// uPlot's style sheet.
pub const UPLOT_CSS: &str = include_str!("../assets/uplot/uPlot.min.css");
/// uPlot's license, served beside it.
pub const UPLOT_LICENSE: &str = include_str!("../assets/uplot/LICENSE");
const PAGE_JS: &str = include_str!("../assets/msgbench.js");
const PAGE_CSS: &str = include_str!("../assets/msgbench.css");

/// Events listed in the page (the rest are counted).
const MAX_EVENTS_SHOWN: usize = 200;

/// Escapes text for HTML element content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// JSON safe inside a `<script>` element: `<` only occurs inside JSON strings, where `\u003c`
/// means the same, so no `</script>` or `<!--` can end the element early.
pub fn script_json<T: Serialize>(data: &T) -> Result<String, serde_json::Error> {
    Ok(serde_json::to_string(data)?.replace('<', "\\u003c"))
}

/// A whole page: `body` (trusted HTML), the data as JSON for the charts, and the inlined
/// styles and scripts. Used by the run report and by `compare`.
pub fn page<T: Serialize>(title: &str, body: &str, data: &T) -> Result<String, serde_json::Error> {
    let json = script_json(data)?;
    let mut s = String::with_capacity(UPLOT_JS.len() + json.len() + body.len() + 8192);
    s.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    s.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    let _ = writeln!(s, "<title>{}</title>", esc(title));
    let _ = writeln!(
        s,
        "<style>\n{UPLOT_CSS}\n</style>\n<style>\n{PAGE_CSS}\n</style>"
    );
    s.push_str("</head>\n<body>\n");
    s.push_str(body);
    let _ = writeln!(
        s,
        "<script type=\"application/json\" id=\"msgbench-data\">{json}</script>"
    );
    let _ = writeln!(
        s,
        "<script>\n{UPLOT_JS}\n</script>\n<script>\n{PAGE_JS}\n</script>"
    );
    s.push_str("</body>\n</html>\n");
    Ok(s)
}

/// A named percentile curve, for the distribution charts.
#[derive(Debug, Clone, Serialize)]
pub struct Curve {
    /// Legend label.
    pub name: String,
    /// The points.
    pub points: Vec<PercentilePoint>,
}

/// What the page's script draws for one run.
#[derive(Debug, Clone, Serialize)]
pub struct RunCharts {
    /// Legend label of the run.
    pub label: String,
    /// Time series.
    pub chart: ChartData,
    /// Percentile curves of the result's latencies.
    pub distributions: Vec<Curve>,
    /// Percentile curves of each stage (multi-stage runs).
    pub stage_distributions: Vec<Curve>,
    /// A capacity search's knee: one point per offered rate (none for other runs).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub knee: Vec<crate::search::KneePoint>,
}

impl RunCharts {
    /// The chart data of `r`, downsampled to at most [`MAX_POINTS`] points per series.
    pub fn of(r: &RunReport, label: &str) -> Self {
        RunCharts {
            label: label.to_string(),
            chart: ChartData::of(r, MAX_POINTS),
            distributions: r
                .distributions
                .named()
                .into_iter()
                .map(|(n, c)| Curve {
                    name: n.to_string(),
                    points: c.to_vec(),
                })
                .collect(),
            stage_distributions: r
                .stages
                .iter()
                .filter(|s| !s.percentiles.is_empty())
                .map(|s| Curve {
                    name: s.name.clone(),
                    points: s.percentiles.clone(),
                })
                .collect(),
            knee: r
                .search
                .as_ref()
                .map(crate::search::knee_points)
                .unwrap_or_default(),
        }
    }
}

#[derive(Serialize)]
struct ReportData<'a> {
    kind: &'static str,
    run: &'a RunCharts,
}

/// Writes the HTML report of `r`.
pub fn write(r: &RunReport, out: &mut dyn std::io::Write) -> Result<(), crate::ReportError> {
    let charts = RunCharts::of(r, &r.name);
    let title = format!("msgbench report: {}", r.name);
    let body = body(r);
    let html = page(
        &title,
        &body,
        &ReportData {
            kind: "report",
            run: &charts,
        },
    )?;
    out.write_all(html.as_bytes())?;
    Ok(())
}

/// UTC `YYYY-MM-DD HH:MM:SS` of Unix milliseconds.
pub fn utc(ms: u64) -> String {
    let (y, m, d, hh, mm, ss) = civil(ms / 1000);
    format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02}:{ss:02} UTC")
}

/// (year, month, day, hour, minute, second) in UTC of Unix seconds.
pub fn civil(unix_s: u64) -> (i64, i64, i64, u64, u64, u64) {
    let days = (unix_s / 86_400) as i64;
    let rem = unix_s % 86_400;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, rem / 3600, rem / 60 % 60, rem % 60)
}

/// A plan value for humans: strings as they are, flat objects as `k=v, ...`, the rest as
/// compact JSON.
pub fn plan_value(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Object(m) if m.values().all(|x| !x.is_object() && !x.is_array()) => m
            .iter()
            .filter(|(_, x)| !x.is_null())
            .map(|(k, x)| format!("{k}={}", plan_value(x)))
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

/// The plan settings shown in the configuration table, by JSON pointer.
pub const KEY_SETTINGS: &[(&str, &str)] = &[
    ("target", "/target"),
    ("consumers connect to", "/consume_from"),
    ("topics", "/topics"),
    ("producers per topic", "/producers_per_topic"),
    ("consumers per topic", "/consumers_per_topic"),
    ("subscription", "/subscription"),
    ("rate", "/rate"),
    ("size", "/size"),
    ("measure", "/measure"),
    ("warm-up", "/warmup"),
    ("drain", "/drain"),
    ("max in flight", "/max_in_flight"),
    ("request/reply", "/request_reply"),
    ("pacing", "/pacing"),
    ("tick", "/tick"),
    ("QoS", "/client/qos"),
    ("connections", "/connections"),
];

fn config(s: &mut String, r: &RunReport) {
    let b = &r.begin;
    s.push_str("<section id=\"configuration\"><h2>Configuration</h2>\n<table class=\"kv\">\n");
    let mut row = |k: &str, v: &str| {
        let _ = writeln!(s, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(v));
    };
    row("run", &r.name);
    row("tool", &b.tool);
    row("started", &utc(b.started_unix_ms));
    row(
        "host",
        &format!("{} ({} CPUs, {})", b.host.hostname, b.host.cpus, b.host.os),
    );
    row("clock", &format!("{} ({})", b.clock.source, b.clock.scope));
    for (label, ptr) in KEY_SETTINGS {
        if let Some(v) = b.plan.pointer(ptr).filter(|v| !v.is_null()) {
            row(label, &plan_value(v));
        }
    }
    s.push_str("</table>\n<details><summary>full plan (credentials removed)</summary><pre>");
    s.push_str(&esc(
        &serde_json::to_string_pretty(&b.plan).unwrap_or_default()
    ));
    s.push_str("</pre></details></section>\n");
}

/// The latency table header cells.
pub const LATENCY_COLUMNS: [&str; 10] = [
    "count", "min", "mean", "p50", "p90", "p99", "p99.9", "p99.99", "max", "",
];

/// One latency table row (`name`, then the figures of `l`).
pub fn latency_row(s: &mut String, name: &str, l: &LatencySummary) {
    let _ = write!(s, "<tr><th>{}</th><td>{}</td>", esc(name), l.count);
    for v in [
        l.min,
        l.mean.round() as u64,
        l.p50,
        l.p90,
        l.p99,
        l.p999,
        l.p9999,
        l.max,
    ] {
        let _ = write!(s, "<td>{}</td>", esc(&fmt_ns(v, l.count)));
    }
    s.push_str("</tr>\n");
}

fn latency_table(s: &mut String, rows: &[(&str, &LatencySummary)]) {
    if rows.iter().all(|(_, l)| l.count == 0) {
        return;
    }
    s.push_str("<table class=\"num\"><tr><th>latency</th>");
    for c in &LATENCY_COLUMNS[..9] {
        let _ = write!(s, "<th>{c}</th>");
    }
    s.push_str("</tr>\n");
    for (name, l) in rows.iter().filter(|(_, l)| l.count > 0) {
        latency_row(s, name, l);
    }
    s.push_str("</table>\n");
}

fn result_block(s: &mut String, p: &PhaseReport) {
    let c = &p.counters;
    let head = if p.receive_duration_s > p.duration_s {
        format!(
            "measure phase ({:.2}s) and its drain (received over {:.2}s)",
            p.duration_s, p.receive_duration_s
        )
    } else {
        format!("measure phase ({:.2}s)", p.duration_s)
    };
    let _ = writeln!(s, "<p>Result: {}</p>", esc(&head));
    s.push_str(
        "<table class=\"num\"><tr><th></th><th>messages</th><th>msgs/s</th><th>MB/s</th></tr>\n",
    );
    let _ = writeln!(
        s,
        "<tr><th>sent</th><td>{}</td><td>{:.1}</td><td>{:.2}</td></tr>",
        c.sent, p.sent_per_s, p.sent_mb_per_s
    );
    let _ = writeln!(
        s,
        "<tr><th>received</th><td>{}</td><td>{:.1}</td><td>{:.2}</td></tr>",
        c.received, p.received_per_s, p.received_mb_per_s
    );
    s.push_str("</table>\n<table class=\"kv\">\n");
    if c.acked + c.nacked > 0 {
        let _ = writeln!(
            s,
            "<tr><th>acked</th><td>{} (nacked {})</td></tr>",
            c.acked, c.nacked
        );
    }
    if c.returned > 0 {
        let _ = writeln!(
            s,
            "<tr><th>returned</th><td>{} (mandatory publishes sent back: unroutable, or refused by a full queue)</td></tr>",
            c.returned
        );
    }
    if c.late_sends > 0 {
        let _ = writeln!(
            s,
            "<tr><th>late sends</th><td>{} (left later than the threshold after their intended time)</td></tr>",
            c.late_sends
        );
    }
    let e = &c.errors;
    let kinds: Vec<String> = ErrorKind::ALL
        .iter()
        .filter(|k| e.get(**k) > 0)
        .map(|k| format!("{} {}", format!("{k:?}").to_lowercase(), e.get(*k)))
        .collect();
    let _ = writeln!(
        s,
        "<tr><th>errors</th><td>{}{}</td></tr>",
        e.total(),
        if kinds.is_empty() {
            String::new()
        } else {
            format!(" ({})", kinds.join(", "))
        }
    );
    if p.cpu_s > 0.0 {
        let _ = writeln!(
            s,
            "<tr><th>generator</th><td>{:.2} CPU-s ({} of one core, {:.3} CPU-s per million sent)</td></tr>",
            p.cpu_s,
            crate::text::core_share(p.cpu_s, p.duration_s),
            p.cpu_s_per_million_sent
        );
    }
    s.push_str("</table>\n");
    latency_table(
        s,
        &[
            ("publish", &p.publish),
            ("send delay", &p.send_delay),
            ("end-to-end", &p.e2e),
            ("connect", &p.connect),
        ],
    );
}

fn stages_block(s: &mut String, r: &RunReport) {
    if r.stages.is_empty() {
        return;
    }
    s.push_str("<h3>Stages (latency from the intended send time)</h3>\n<table class=\"num\"><tr><th>stage</th><th>msgs/s</th><th>MB/s</th><th>reached/sent</th><th>dup</th><th>missing</th><th>failed</th><th>unknown</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th><th></th></tr>\n");
    for st in &r.stages {
        let l = &st.latency;
        let mark = if st.window {
            "window"
        } else if st.optional {
            "optional"
        } else if st.failure {
            "failures"
        } else {
            ""
        };
        let _ = write!(
            s,
            "<tr><th>{}</th><td>{:.1}</td><td>{:.3}</td><td>{}/{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>",
            esc(&st.name),
            st.msgs_per_s,
            st.mb_per_s,
            st.reached,
            st.sent,
            st.duplicates,
            st.missing.map_or("?".into(), |m| m.to_string()),
            st.failed,
            st.unknown
        );
        for v in [l.p50, l.p90, l.p99, l.p999, l.max] {
            let _ = write!(s, "<td>{}</td>", esc(&fmt_ns(v, l.count)));
        }
        let _ = writeln!(s, "<td>{mark}</td></tr>");
    }
    s.push_str("</table>\n");
}

fn connections_block(s: &mut String, r: &RunReport, cs: &msgbench_metrics::ConnectionSummary) {
    let mut all = msgbench_metrics::Counters::default();
    let mut connect = LatencySummary::default();
    for p in &r.phases {
        all.merge(&p.counters);
        if p.phase == Phase::Measure {
            connect = p.connect;
        }
    }
    let f = &all.connect_failures;
    let causes: Vec<String> = msgbench_metrics::ConnectFailure::ALL
        .iter()
        .filter(|c| f.get(**c) > 0)
        .map(|c| format!("{} {}", c.name(), f.get(*c)))
        .collect();
    let _ = writeln!(
        s,
        "<h3>Connections ({})</h3>\n<table class=\"kv\">",
        esc(&cs.mode)
    );
    let _ = writeln!(
        s,
        "<tr><th>opened</th><td>{}{} ({:.1} connections/s over {:.2}s)</td></tr>",
        all.connects,
        cs.requested.map(|n| format!(" of {n}")).unwrap_or_default(),
        cs.connections_per_s,
        cs.ramp_s
    );
    let _ = writeln!(
        s,
        "<tr><th>failed</th><td>{} {}</td></tr>",
        f.total(),
        esc(&causes.join(", "))
    );
    if cs.mode == "hold" {
        let _ = writeln!(
            s,
            "<tr><th>held at peak</th><td>{} (dropped {}, closed {})</td></tr>",
            cs.peak_held, all.dropped, all.closes
        );
        let _ = writeln!(
            s,
            "<tr><th>memory</th><td>{:.1} KiB generator RSS per held connection ({:.1} MiB → {:.1} MiB)</td></tr>",
            cs.rss_per_connection_bytes / 1024.0,
            cs.rss_baseline_bytes as f64 / 1048576.0,
            cs.rss_peak_bytes as f64 / 1048576.0
        );
        if let Some(rc) = &cs.reconnect {
            let settled = rc.settled_s.map_or_else(
                || "not all settled by the end".into(),
                |t| format!("all back or failed in {t:.3}s"),
            );
            let _ = writeln!(
                s,
                "<tr><th>reconnect storm</th><td>{} dropped at {:.1}s: {} back, {} failed, {}</td></tr>",
                rc.dropped, rc.at_s, rc.back, rc.failed, settled
            );
        }
        if let Some(c) = &cs.churn {
            let _ = writeln!(
                s,
                "<tr><th>churn</th><td>{} dropped at {}/s from {:.1}s: {} back, {} failed, {} skipped (none held)</td></tr>",
                c.dropped, c.rate, c.from_s, c.back, c.failed, c.skipped
            );
        }
        if cs.publishes_missed > 0 {
            let _ = writeln!(
                s,
                "<tr><th>missed publishes</th><td>{} (due while their connection was down after a drop)</td></tr>",
                cs.publishes_missed
            );
        }
    }
    let _ = writeln!(
        s,
        "<tr><th>open-file limit</th><td>{}{}</td></tr></table>",
        cs.fd_limit,
        crate::text::beyond_fd_limit(cs)
    );
    let mut rows = vec![("connect", &connect)];
    if let Some(rc) = &cs.reconnect {
        rows.push(("reconnect", &rc.latency));
    }
    if let Some(c) = &cs.churn {
        rows.push(("churn reconnect", &c.latency));
    }
    latency_table(s, &rows);
}

fn summary(s: &mut String, r: &RunReport) {
    s.push_str("<section id=\"summary\"><h2>Summary</h2>\n");
    if let Some(cs) = &r.connections {
        connections_block(s, r, cs);
    }
    match &r.result {
        Some(p) if r.connections.is_none() => result_block(s, p),
        Some(_) => {}
        None => s.push_str("<p>The measure phase never started: there is no result.</p>\n"),
    }
    stages_block(s, r);
    s.push_str("<h3>Phases</h3>\n<table class=\"num\"><tr><th>phase</th><th>duration</th><th>sent</th><th>received</th><th>msgs/s sent</th><th>msgs/s received</th><th></th></tr>\n");
    for p in &r.phases {
        let _ = writeln!(
            s,
            "<tr><th>{}</th><td>{:.2}s</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td></tr>",
            p.phase.name(),
            p.duration_s,
            p.counters.sent,
            p.counters.received,
            p.sent_per_s,
            p.received_per_s,
            match p.phase {
                Phase::Warmup => "excluded from the result",
                Phase::Measure => "",
                Phase::Drain => "deliveries of measured messages: part of the result",
            }
        );
    }
    s.push_str("</table>\n");
    if let Some((heading, lines)) = crate::text::tcp_lines(r) {
        let _ = writeln!(s, "<h3>{}</h3>", esc(&heading));
        for l in lines {
            let _ = writeln!(s, "<p>{}</p>", esc(&l));
        }
    }
    s.push_str("</section>\n");
}

fn integrity(s: &mut String, r: &RunReport) {
    let i = &r.integrity;
    s.push_str("<section id=\"integrity\"><h2>Integrity (whole run)</h2>\n<table class=\"num\"><tr><th>expected</th><th>delivered</th><th>lost</th><th>duplicated</th><th>reordered</th><th>foreign</th><th>completeness</th></tr>\n");
    let bad = |n: u64| if n > 0 { " class=\"bad\"" } else { "" };
    let _ = writeln!(
        s,
        "<tr><td>{}</td><td>{}</td><td{}>{}</td><td{}>{}</td><td{}>{}</td><td{}>{}</td><td>{:.4}%</td></tr></table></section>",
        i.expected,
        i.delivered,
        bad(i.lost),
        i.lost,
        bad(i.duplicated),
        i.duplicated,
        bad(i.reordered),
        i.reordered,
        bad(i.foreign),
        i.foreign,
        i.completeness * 100.0
    );
    if let Some(line) = crate::text::backlog_line(r) {
        let _ = writeln!(
            s,
            "<section id=\"backlog\"><h2>Backlog</h2><p>{}</p></section>",
            esc(&line)
        );
    }
}

fn warnings(s: &mut String, r: &RunReport) {
    s.push_str("<section id=\"warnings\"><h2>Validity warnings</h2>\n");
    if r.warnings.is_empty() {
        s.push_str(
            "<p class=\"ok\">None: nothing found that makes these figures less trustworthy.</p>\n",
        );
    } else {
        s.push_str("<ul class=\"warnings\">\n");
        for w in &r.warnings {
            let _ = writeln!(s, "<li>{}</li>", esc(w));
        }
        s.push_str("</ul>\n");
    }
    s.push_str("</section>\n");
}

/// A capacity search: the answer, the knee and every step.
fn search(s: &mut String, r: &RunReport) {
    let Some(se) = &r.search else { return };
    s.push_str("<section id=\"search\"><h2>Capacity search</h2>\n");
    match &se.end {
        Some(e) => {
            let _ = writeln!(
                s,
                "<p class=\"badge {}\">{}</p><p class=\"note\">Objectives: {}; a step must also send {:.0}% of the rate offered. The summary below adds every step together.</p>",
                if e.capacity_per_s.is_some() {
                    "ok"
                } else {
                    "bad"
                },
                esc(&e.summary),
                esc(&e.objectives.join(", ")),
                e.min_achieved * 100.0
            );
        }
        None => s.push_str(
            "<p class=\"badge warn\">INCOMPLETE: the search ended before its answer</p>\n",
        ),
    }
    s.push_str("<div id=\"knee\"></div>\n<table class=\"num\"><tr><th>step</th><th>kind</th><th>offered/s</th><th>sent/s</th><th>received/s</th><th>e2e p50</th><th>e2e p99</th><th>e2e p99.9</th><th>lost</th><th>valid</th><th>verdict</th></tr>\n");
    for st in &se.steps {
        let lat = |ns: u64| crate::live::latency(ns);
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{:.0}</td><td>{:.0}</td><td>{:.0}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.0}%</td><td class=\"{}\">{}</td></tr>",
            st.index,
            esc(&st.kind),
            st.offered_per_s,
            st.sent_per_s,
            st.received_per_s,
            lat(st.e2e_ns[0]),
            lat(st.e2e_ns[1]),
            lat(st.e2e_ns[2]),
            st.lost,
            st.valid_share * 100.0,
            if st.pass { "ok" } else { "bad" },
            if st.pass {
                "pass".to_string()
            } else {
                esc(&format!("FAIL: {}", st.why))
            }
        );
    }
    s.push_str("</table>\n</section>\n");
}

fn thresholds(s: &mut String, r: &RunReport) {
    if r.thresholds.is_empty() {
        return;
    }
    s.push_str("<section id=\"thresholds\"><h2>Thresholds</h2>\n<table class=\"thresholds\"><tr><th>verdict</th><th>threshold</th><th>actual</th></tr>\n");
    for v in &r.thresholds {
        let _ = writeln!(
            s,
            "<tr><td class=\"{}\">{}</td><td>{}</td><td>{}</td></tr>",
            if v.pass { "ok" } else { "bad" },
            if v.pass { "pass" } else { "FAIL" },
            esc(&v.threshold),
            esc(&v.shown)
        );
    }
    s.push_str("</table>\n</section>\n");
}

fn events(s: &mut String, r: &RunReport) {
    if r.events.is_empty() {
        return;
    }
    s.push_str("<section id=\"events\"><h2>Events</h2>\n<table class=\"events\"><tr><th>at</th><th>kind</th><th>detail</th></tr>\n");
    for e in r.events.iter().take(MAX_EVENTS_SHOWN) {
        let _ = writeln!(
            s,
            "<tr><td>{:.3}s</td><td>{}</td><td>{}</td></tr>",
            e.at_s,
            e.kind.name(),
            esc(&e.detail)
        );
    }
    s.push_str("</table>\n");
    if r.events.len() > MAX_EVENTS_SHOWN {
        let _ = writeln!(
            s,
            "<p>{} more events are in the report (see <code>msgbench report --format json</code>).</p>",
            r.events.len() - MAX_EVENTS_SHOWN
        );
    }
    s.push_str("</section>\n");
}

fn body(r: &RunReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "<header><h1>msgbench report: {}</h1>", esc(&r.name));
    let to = match &r.consume_from {
        Some(c) => format!("{} (producers) → {c} (consumers)", r.target),
        None => r.target.clone(),
    };
    let _ = writeln!(
        s,
        "<p class=\"sub\">{} · {} · duration {:.2}s · {}</p>",
        esc(&to),
        esc(&utc(r.begin.started_unix_ms)),
        r.duration_s,
        esc(&r.begin.tool)
    );
    if !r.complete {
        s.push_str("<p class=\"badge bad\">INCOMPLETE: the results file has no end record (the run was killed); figures are partial</p>\n");
    }
    if r.interrupted {
        s.push_str("<p class=\"badge bad\">INTERRUPTED: stopped early by a signal</p>\n");
    }
    if !r.thresholds.is_empty() {
        let failed = r.thresholds.iter().filter(|v| !v.pass).count();
        let _ = writeln!(
            s,
            "<p class=\"badge {}\"><a href=\"#thresholds\">{}</a></p>",
            if failed == 0 { "ok" } else { "bad" },
            if failed == 0 {
                format!("all {} thresholds passed", r.thresholds.len())
            } else {
                format!("FAILED: {failed} of {} thresholds", r.thresholds.len())
            }
        );
    }
    if !r.warnings.is_empty() {
        let _ = writeln!(
            s,
            "<p class=\"badge warn\"><a href=\"#warnings\">{} validity warning{}</a></p>",
            r.warnings.len(),
            if r.warnings.len() == 1 { "" } else { "s" }
        );
    }
    s.push_str("</header>\n<main>\n");
    search(&mut s, r);
    summary(&mut s, r);
    thresholds(&mut s, r);
    s.push_str("<section id=\"charts\"><h2>Over time</h2><p class=\"note\">Shaded: warm-up and drain; red: intervals in which the generator was saturated. Each point is one interval; on long runs, a bucket of intervals showing their summed rates and their worst latency percentiles.</p><div id=\"timeseries\"></div></section>\n");
    s.push_str("<section id=\"distribution\"><h2>Latency percentile distribution</h2><p class=\"note\">The result (measure phase and its drain): latency at each percentile, on a logarithmic “nines” axis.</p><div id=\"percentiles\"></div></section>\n");
    integrity(&mut s, r);
    warnings(&mut s, r);
    config(&mut s, r);
    events(&mut s, r);
    s.push_str("</main>\n<footer>Generated by msgbench from the results file. Charts: uPlot (MIT).</footer>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        let j = script_json(&serde_json::json!({"s": "</script><!--"})).unwrap();
        assert!(!j.contains('<'), "{j}");
        let back: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(back["s"], "</script><!--");
    }

    #[test]
    fn plan_values_read_well() {
        assert_eq!(
            plan_value(&serde_json::json!({"rate": 5000.0, "shape": "constant"})),
            "rate=5000.0, shape=constant"
        );
        assert_eq!(plan_value(&serde_json::json!("mem://x")), "mem://x");
        assert_eq!(plan_value(&serde_json::json!(["a", "b"])), "[\"a\",\"b\"]");
        assert_eq!(utc(1_795_000_000_000), "2026-11-18 11:06:40 UTC");
    }
}
