//! The live per-second table msgbench prints on stderr while it runs (one line per interval,
//! like OpenMAMA's consumer, with exact percentiles and integrity counts).

use msgbench_metrics::{GroupTick, IntervalStats, LatencySummary};

/// The column header, printed once.
pub fn header() -> String {
    format!(
        "{:>7} {:>7} {:>11} {:>11} {:>8} {:>9} {:>9} {:>9} {:>8} {:>6} {:>6} {:>6} {:>5}",
        "time_s",
        "phase",
        "sent/s",
        "recv/s",
        "MB/s",
        "e2e_p50",
        "e2e_p99",
        "e2e_max",
        "lost",
        "dup",
        "reord",
        "errors",
        "cpu%"
    )
}

/// One line for one interval. `lost` is the number of sequence gaps still open so far (fan-out
/// subscriptions); the final loss is in the end report.
pub fn line(iv: &IntervalStats, open_gaps_total: u64) -> String {
    let d = iv.duration_s();
    let c = &iv.counters;
    let e2e = LatencySummary::of(&iv.histograms.e2e);
    let mb = (c.sent_bytes.max(c.received_bytes)) as f64 / 1e6;
    format!(
        "{:>7.1} {:>7} {:>11} {:>11} {:>8} {:>9} {:>9} {:>9} {:>8} {:>6} {:>6} {:>6} {:>5}",
        iv.end_s,
        iv.phase.name(),
        per_s(c.sent as f64, d, 0),
        per_s(c.received as f64, d, 0),
        per_s(mb, d, 2),
        fmt_ns(e2e.p50, e2e.count),
        fmt_ns(e2e.p99, e2e.count),
        fmt_ns(e2e.max, e2e.count),
        open_gaps_total,
        c.duplicated,
        c.reordered,
        c.errors.total(),
        cpu_pct(iv),
    ) + &stages_suffix(iv)
}

/// Windows shorter than this (the run's last, cut short at the end of a phase) give no rate:
/// a few messages in 2 ms are not thousands a second, and the process's CPU time, counted in
/// clock ticks, gives figures no machine could reach. Their counts are in the report.
const SHORTEST_RATE_S: f64 = 0.2;

/// `n` per second over `d` seconds with `decimals`, or `-` for a window too short to say.
fn per_s(n: f64, d: f64, decimals: usize) -> String {
    if d < SHORTEST_RATE_S {
        return "-".into();
    }
    format!("{:.*}", decimals, n / d)
}

/// The generator's CPU over the interval, in percent of one core (`-` for a short window).
fn cpu_pct(iv: &IntervalStats) -> String {
    per_s(iv.cpu_s * 100.0, iv.duration_s(), 0)
}

/// Multi-stage runs: each stage's arrivals per second this interval, in stage order (`s1=..`),
/// so a long tracked run shows its progress through every stage.
fn stages_suffix(iv: &IntervalStats) -> String {
    if iv.stages.is_empty() {
        return String::new();
    }
    let d = iv.duration_s();
    let mut out = String::from("  stages/s");
    for (i, s) in iv.stages.iter().enumerate() {
        out.push_str(&format!(" s{}={:.0}", i + 1, s.counts.reached as f64 / d));
        if s.counts.failed > 0 {
            out.push_str(&format!("(!{})", s.counts.failed));
        }
    }
    out
}

/// A latency in the most readable unit (`-` when nothing was recorded).
pub fn fmt_ns(ns: u64, count: u64) -> String {
    if count == 0 {
        return "-".into();
    }
    latency(ns)
}

/// A latency in nanoseconds in the most readable unit (`870ns`, `12.3us`, `4.56ms`, `1.20s`).
pub fn latency(ns: u64) -> String {
    let v = ns as f64;
    if v < 1e3 {
        format!("{ns}ns")
    } else if v < 1e6 {
        format!("{:.1}us", v / 1e3)
    } else if v < 1e9 {
        format!("{:.2}ms", v / 1e6)
    } else {
        format!("{:.2}s", v / 1e9)
    }
}

/// The column header of connection workloads.
pub fn conn_header() -> String {
    format!(
        "{:>7} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>9} {:>9} {:>8} {:>5}",
        "time_s",
        "phase",
        "conn/s",
        "held",
        "conn_p50",
        "conn_p99",
        "conn_max",
        "failed",
        "dropped",
        "sent/s",
        "recv/s",
        "rss_MiB",
        "cpu%"
    )
}

/// One line of a connection workload.
pub fn conn_line(iv: &IntervalStats) -> String {
    let d = iv.duration_s();
    let c = &iv.counters;
    let l = LatencySummary::of(&iv.histograms.connect);
    let g = iv.gauges.unwrap_or_default();
    format!(
        "{:>7.1} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>9} {:>9} {:>8.1} {:>5}",
        iv.end_s,
        iv.phase.name(),
        per_s(c.connects as f64, d, 0),
        g.held,
        fmt_ns(l.p50, l.count),
        fmt_ns(l.p99, l.count),
        fmt_ns(l.max, l.count),
        c.connect_failures.total(),
        c.dropped,
        per_s(c.sent as f64, d, 0),
        // What journeys' subscriptions heard (held connections hear nothing).
        per_s(c.received as f64, d, 0),
        g.rss_bytes as f64 / 1048576.0,
        cpu_pct(iv),
    )
}

/// Runs with groups: one row per group under the run's line, with what that group did in the
/// window (`d` seconds long): messages, end-to-end latency, connections, errors.
pub fn group_line(g: &GroupTick, d: f64) -> String {
    let d = d.max(1e-9);
    let mut out = format!(
        "{:>7} {:<14} sent/s {:>9.0}  recv/s {:>9.0}",
        "",
        format!("[{}]", g.name),
        g.sent as f64 / d,
        g.received as f64 / d
    );
    if let (Some(p50), Some(p99)) = (g.e2e_p50_ns, g.e2e_p99_ns) {
        out.push_str(&format!("  e2e p50 {} p99 {}", latency(p50), latency(p99)));
    }
    if let Some(held) = g.held {
        out.push_str(&format!(
            "  held {held}  conn/s {:.0}",
            g.connects as f64 / d
        ));
    }
    if g.errors > 0 {
        out.push_str(&format!("  errors {}", g.errors));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_row_shows_what_the_group_has() {
        let msgs = GroupTick {
            name: "gateways".into(),
            sent: 2000,
            received: 1000,
            e2e_p50_ns: Some(1_500_000),
            e2e_p99_ns: Some(3_000_000),
            ..GroupTick::default()
        };
        let row = group_line(&msgs, 1.0);
        assert!(row.contains("[gateways]"), "{row}");
        assert!(row.contains("sent/s      2000  recv/s      1000"), "{row}");
        assert!(row.contains("e2e p50 1.50ms p99 3.00ms"), "{row}");
        assert!(!row.contains("held") && !row.contains("errors"), "{row}");
        let conns = GroupTick {
            name: "devices".into(),
            connects: 500,
            held: Some(10_000),
            errors: 3,
            ..GroupTick::default()
        };
        let row = group_line(&conns, 0.5);
        assert!(row.contains("held 10000  conn/s 1000  errors 3"), "{row}");
    }

    /// A connection workload's line counts what journeys' subscriptions heard, per second.
    #[test]
    fn a_connection_line_shows_what_journeys_hear() {
        let mut iv = IntervalStats {
            index: 1,
            phase: msgbench_metrics::Phase::Measure,
            start_s: 1.0,
            end_s: 3.0,
            counters: Default::default(),
            histograms: Default::default(),
            cpu_s: 0.0,
            gauges: None,
            stages: Vec::new(),
            host: None,
            loop_lag_ns: 0,
            groups: Vec::new(),
        };
        iv.counters.sent = 400;
        iv.counters.received = 1000;
        let head = conn_header();
        let line = conn_line(&iv);
        let col = |s: &str, name: &str| {
            let words: Vec<&str> = s.split_whitespace().collect();
            let at = head.split_whitespace().position(|w| w == name).unwrap();
            words[at].to_string()
        };
        assert_eq!(col(&line, "sent/s"), "200", "{head}\n{line}");
        assert_eq!(col(&line, "recv/s"), "500", "{head}\n{line}");
        assert_eq!(head.len(), line.len(), "columns line up");
        // The run's last window, cut short: no CPU percentage no machine could reach, and
        // no rate (4 messages in 10 ms are not 400 a second).
        iv.cpu_s = 0.06;
        assert_eq!(col(&conn_line(&iv), "cpu%"), "3");
        iv.end_s = 1.01;
        iv.counters.sent = 4;
        for name in ["conn/s", "sent/s", "recv/s", "cpu%"] {
            assert_eq!(col(&conn_line(&iv), name), "-", "{name}");
        }
        // The message runs' table too.
        let l = super::line(&iv, 0);
        assert_eq!(l.len(), header().len(), "columns line up");
        let mhead = header();
        let words: Vec<&str> = l.split_whitespace().collect();
        for name in ["sent/s", "recv/s", "MB/s", "cpu%"] {
            let at = mhead.split_whitespace().position(|w| w == name).unwrap();
            assert_eq!(words[at], "-", "{name}: {l}");
        }
    }
}
