//! The human-readable report: one block per phase with rates and latency percentiles per stage,
//! then the delivery account and warnings.

use crate::live::fmt_ns;
use crate::model::{PhaseReport, RunReport};
use msgbench_metrics::{EventKind, LatencySummary, Phase};
use std::io::Write;

fn stage_row(out: &mut dyn Write, name: &str, s: &LatencySummary) -> std::io::Result<()> {
    if s.count == 0 {
        return Ok(());
    }
    writeln!(
        out,
        "  {:<12} {:>12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        name,
        s.count,
        fmt_ns(s.min, s.count),
        fmt_ns(s.mean.round() as u64, s.count),
        fmt_ns(s.p50, s.count),
        fmt_ns(s.p90, s.count),
        fmt_ns(s.p99, s.count),
        fmt_ns(s.p999, s.count),
        fmt_ns(s.max, s.count)
    )
}

fn phase_block(out: &mut dyn Write, p: &PhaseReport) -> std::io::Result<()> {
    let c = &p.counters;
    if p.receive_duration_s > p.duration_s {
        writeln!(
            out,
            "result: measure phase ({:.2}s) and its drain (received over {:.2}s)",
            p.duration_s, p.receive_duration_s
        )?;
    } else {
        writeln!(out, "result: measure phase ({:.2}s)", p.duration_s)?;
    }
    writeln!(
        out,
        "  sent      {:>14} msgs {:>14.1} msgs/s {:>10.2} MB/s",
        c.sent, p.sent_per_s, p.sent_mb_per_s
    )?;
    writeln!(
        out,
        "  received  {:>14} msgs {:>14.1} msgs/s {:>10.2} MB/s",
        c.received, p.received_per_s, p.received_mb_per_s
    )?;
    if c.foreign > 0 {
        // Messages without this run's stamp are neither timed nor checked; a source other
        // than this run's producers (a feed, a server's own pushes) shows only here.
        writeln!(
            out,
            "  foreign   {:>14} msgs {:>14.1} msgs/s   (not this run's messages: counted, not timed)",
            c.foreign,
            c.foreign as f64 / p.receive_duration_s.max(1e-9)
        )?;
    }
    if c.acked + c.nacked > 0 || c.errors.timeout > 0 {
        // In doubt: sent, and neither confirmed nor refused (its confirmation timed out, or
        // its connection died with it in flight): the account's third term.
        let doubt = match c.errors.timeout {
            0 => String::new(),
            n => format!("   in doubt {n}"),
        };
        writeln!(
            out,
            "  acked     {:>14} msgs   nacked {}{doubt}",
            c.acked, c.nacked
        )?;
    }
    if c.returned > 0 {
        writeln!(
            out,
            "  returned  {:>14} msgs (mandatory publishes the broker sent back: unroutable, or refused by a full queue; its reason is in the events)",
            c.returned
        )?;
    }
    if c.late_sends > 0 {
        writeln!(
            out,
            "  late sends {:>13} (left later than the threshold after their intended time)",
            c.late_sends
        )?;
    }
    if c.errors.total() > 0 {
        let e = &c.errors;
        writeln!(
            out,
            "  errors    {:>14}   connect {} send {} nack {} receive {} timeout {} disconnect {} protocol {}",
            e.total(),
            e.connect,
            e.send,
            e.nack,
            e.receive,
            e.timeout,
            e.disconnect,
            e.protocol
        )?;
    }
    if p.cpu_s > 0.0 {
        writeln!(
            out,
            "  generator {:>14.2} CPU-s ({} of one core, {:.3} CPU-s per million sent)",
            p.cpu_s,
            core_share(p.cpu_s, p.duration_s),
            p.cpu_s_per_million_sent
        )?;
    }
    if p.publish.count + p.send_delay.count + p.e2e.count > 0 {
        writeln!(
            out,
            "  {:<12} {:>12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "latency", "count", "min", "mean", "p50", "p90", "p99", "p99.9", "max"
        )?;
        stage_row(out, "publish", &p.publish)?;
        stage_row(out, "send delay", &p.send_delay)?;
        stage_row(out, "end-to-end", &p.e2e)?;
    }
    Ok(())
}

/// Writes the text report.
pub fn write(r: &RunReport, out: &mut dyn Write) -> std::io::Result<()> {
    match &r.consume_from {
        Some(c) => writeln!(
            out,
            "msgbench report: {} -> {} (producers) -> {c} (consumers)",
            r.name, r.target
        )?,
        None => writeln!(out, "msgbench report: {} -> {}", r.name, r.target)?,
    }
    writeln!(
        out,
        "{}{}duration {:.2}s, {}",
        if r.complete {
            ""
        } else {
            "INCOMPLETE (no end record) · "
        },
        if r.interrupted { "INTERRUPTED · " } else { "" },
        r.duration_s,
        r.begin.tool
    )?;
    if !r.begin.segments.is_empty() {
        let hosts: std::collections::BTreeSet<&str> = r
            .begin
            .segments
            .iter()
            .map(|s| s.hostname.as_str())
            .collect();
        writeln!(
            out,
            "merged from {} segments on {} host(s); clock: {}",
            r.begin.segments.len(),
            hosts.len(),
            match r.begin.clock.uncertainty_us {
                Some(0) => "one host, one clock".to_string(),
                Some(u) => format!("cross-host latency ± {:.3} ms", u as f64 / 1e3),
                None => "cross-host error unknown".to_string(),
            }
        )?;
    } else if let Some(seg) = r.begin.plan.get("segment") {
        let index = seg.get("index").and_then(|v| v.as_u64()).unwrap_or(0);
        let label = match seg.get("split").and_then(|v| v.as_str()) {
            Some("roles") if index == 0 => "producers".to_string(),
            Some("roles") => "consumers".to_string(),
            _ => format!(
                "{index}/{}",
                seg.get("count").and_then(|v| v.as_u64()).unwrap_or(0)
            ),
        };
        writeln!(
            out,
            "segment {label} of a segmented run (merge the segments for the whole run)"
        )?;
    }
    if let Some(s) = &r.search {
        crate::search::write_text(s, out)?;
    }
    writeln!(out)?;
    groups_block(out, r)?;
    if let Some(cs) = &r.connections {
        connections_block(out, r, cs)?;
        tcp_block(out, r)?;
        return warnings(out, r);
    }
    // The result: measured sends, and every delivery of them (drain included).
    if let Some(p) = &r.result {
        phase_block(out, p)?;
        writeln!(out)?;
    }
    if !r.stages.is_empty() {
        crate::stages::write(out, &r.stages)?;
        writeln!(out)?;
    }
    for p in &r.phases {
        writeln!(
            out,
            "{:<8} {:>6.2}s  sent {} received {}{}",
            p.phase.name(),
            p.duration_s,
            p.counters.sent,
            p.counters.received,
            match p.phase {
                Phase::Warmup => " (excluded from the result)",
                Phase::Measure => "",
                Phase::Drain => " (deliveries of measured messages: part of the result)",
            }
        )?;
    }
    let i = &r.integrity;
    writeln!(out)?;
    writeln!(out, "integrity (whole run)")?;
    writeln!(
        out,
        "  expected {}  delivered {}  lost {}  duplicated {}  reordered {}  foreign {}  completeness {:.4}%",
        i.expected,
        i.delivered,
        i.lost,
        i.duplicated,
        i.reordered,
        i.foreign,
        i.completeness * 100.0
    )?;
    if i.lost > 0 {
        writeln!(
            out,
            "  LOST {} of {} expected deliveries ({:.4}%): the system under test did not deliver them",
            i.lost,
            i.expected,
            i.lost as f64 * 100.0 / i.expected.max(1) as f64
        )?;
        // Messages the system refused (nacked) or left unanswered (in doubt) are in the
        // expected count too: their missing deliveries are not silent loss.
        let nacked: u64 = r.phases.iter().map(|p| p.counters.nacked).sum();
        let doubt: u64 = r.phases.iter().map(|p| p.counters.errors.timeout).sum();
        if nacked + doubt > 0 {
            writeln!(
                out,
                "  of the messages sent, the system refused {nacked} (nacked) and left {doubt} unanswered (in doubt): deliveries missing for those were refused or may never have arrived, not lost in silence"
            )?;
        }
        if let Some(c) = competing_not_fanning_out(r) {
            writeln!(
                out,
                "  each message reached about one of the {c} consumers of its topic, not all of them: the system may deliver the address as a queue (consumers compete), not as a topic; a fan-out address differs per broker (ActiveMQ Classic over AMQP 1.0: --address 'topic://{{topic}}'; see the guide's drivers section); --queue-group is how to make consumers share on purpose"
            )?;
        }
        let reconnects: u64 = r.phases.iter().map(|p| p.counters.reconnects).sum();
        if reconnects > 0 {
            writeln!(
                out,
                "  but clients reconnected {reconnects} times: a subscriber away from a system that keeps nothing for it (a clean MQTT session, an auto-delete queue, core NATS) misses what is published meanwhile; persistent sessions or durable queues tell that apart from the system's own loss"
            )?;
        }
    }
    if let Some(line) = backlog_line(r) {
        writeln!(out)?;
        writeln!(out, "{line}")?;
    }
    if let Some(s) = &r.responses {
        writeln!(out)?;
        writeln!(out, "responses    {}", s.line())?;
    }
    tcp_block(out, r)?;
    warnings(out, r)
}

/// With fan-out to `c` ≥ 2 consumers per topic, deliveries about one per message (within 3%)
/// and none duplicated: the consumers shared the messages instead of each getting all, which a
/// broker does when it takes the address for a queue. The loss report would otherwise blame
/// the broker for (c - 1) / c of every message. `Some(c)` when it looks so.
fn competing_not_fanning_out(r: &RunReport) -> Option<u64> {
    let plan = &r.begin.plan;
    let c = plan["consumers_per_topic"].as_u64()?;
    let fanout = plan["subscription"]["mode"].as_str() == Some("fanout");
    // A wildcard subscription (--subscribe) expects what its filter covers, not per topic.
    if !fanout || c < 2 || !plan["subscribe"].is_null() || r.groups.len() > 1 {
        return None;
    }
    let i = &r.integrity;
    let per_message = i.expected / c;
    let off = i.delivered.abs_diff(per_message);
    (i.duplicated == 0 && per_message > 0 && off * 100 <= per_message * 3).then_some(c)
}

/// A run with groups: one line per group (what it sent and received, its end-to-end latency,
/// its loss), before the run's totals.
fn groups_block(out: &mut dyn Write, r: &RunReport) -> std::io::Result<()> {
    if r.groups.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "groups ({}; the result below is the run's total)",
        r.groups.len()
    )?;
    writeln!(
        out,
        "  {:<14} {:>6} {:>6} {:>12} {:>12} {:>12} {:>9} {:>9} {:>10}  target",
        "group", "prod", "cons", "sent", "sent/s", "received", "e2e p50", "e2e p99", "lost"
    )?;
    for g in &r.groups {
        let (sent, rate, received, e2e) = g
            .result
            .as_ref()
            .map_or((0, 0.0, 0, LatencySummary::default()), |p| {
                (p.counters.sent, p.sent_per_s, p.counters.received, p.e2e)
            });
        let lost = if g.crosses {
            "(run's)".to_string()
        } else {
            g.integrity.lost.to_string()
        };
        let conns = g
            .connections
            .as_ref()
            .map(|c| format!(" ({} connections held at peak)", c.peak_held))
            .unwrap_or_default();
        writeln!(
            out,
            "  {:<14} {:>6} {:>6} {:>12} {:>12.1} {:>12} {:>9} {:>9} {:>10}  {}{conns}",
            g.name,
            g.producers,
            g.consumers,
            sent,
            rate,
            received,
            fmt_ns(e2e.p50, e2e.count),
            fmt_ns(e2e.p99, e2e.count),
            lost,
            g.target
        )?;
    }
    if r.groups.iter().any(|g| g.crosses) {
        writeln!(
            out,
            "  (run's): deliveries cross between groups (a subscriber of one group receives another's messages), so loss is counted for the run as a whole"
        )?;
    }
    writeln!(out)
}

/// A backlog run's account in one line: its size, the build, the drain and its rate.
pub(crate) fn backlog_line(r: &RunReport) -> Option<String> {
    let b = r.backlog.as_ref()?;
    let drain = match (b.drain_s, b.drain_rate) {
        (Some(s), Some(rate)) => format!("drained in {s:.2} s at {rate:.0} deliveries/s"),
        _ => "NOT drained before the run ended".to_string(),
    };
    Some(format!(
        "backlog  {} msgs ({:.1} MB) built in {:.2} s, consumers released, {drain}",
        b.messages,
        b.bytes as f64 / 1e6,
        b.build_s
    ))
}

/// The TCP counters as lines of a report: a heading, the totals, and the cost per message
/// (which says whether the other side batches and why the generator's CPU is what it is) or,
/// for a connection workload, per connection.
pub(crate) fn tcp_lines(r: &RunReport) -> Option<(String, Vec<String>)> {
    let t = r.tcp.as_ref()?;
    let heading = format!(
        "tcp ({} connection{}{}, as the kernel counted them)",
        t.connections,
        if t.connections == 1 { "" } else { "s" },
        match t.batched {
            0 => String::new(),
            n if n == t.connections => ", I/O batched on io_uring".to_string(),
            n => format!(", {n} with I/O batched on io_uring"),
        }
    );
    let mut lines = vec![format!(
        "segments in {}  out {} ({} of them without data: ACKs, SYN, FIN)  retransmitted {}",
        t.segs_in,
        t.segs_out,
        t.bare_out(),
        t.retransmitted
    )];
    let fmt = |v: f64| crate::compare::Unit::SegmentsPerMessage.fmt(v);
    if r.connections.is_some() {
        let per = |k: u64| fmt(k as f64 / t.connections.max(1) as f64);
        lines.push(format!(
            "per connection: {} segments in, {} out, {} out without data",
            per(t.segs_in),
            per(t.segs_out),
            per(t.bare_out())
        ));
    } else if let (Some(i), Some(o), Some(b)) = (
        r.tcp_per_message(|t| t.segs_in),
        r.tcp_per_message(|t| t.segs_out),
        r.tcp_per_message(|t| t.bare_out()),
    ) {
        lines.push(format!(
            "per message sent or received: {} segments in, {} out, {} out without data",
            fmt(i),
            fmt(o),
            fmt(b)
        ));
    }
    if t.retransmitted > 0 {
        lines.push(
            "segments were retransmitted (lost, or not acknowledged in time: a loss probe or a timeout): each is a wait that shows in the latency tail"
                .to_string(),
        );
    }
    Some((heading, lines))
}

fn tcp_block(out: &mut dyn Write, r: &RunReport) -> std::io::Result<()> {
    if let Some((heading, lines)) = tcp_lines(r) {
        writeln!(out)?;
        writeln!(out, "{heading}")?;
        for l in lines {
            writeln!(out, "  {l}")?;
        }
    }
    Ok(())
}

/// Each threshold's verdict, then the overall one.
fn thresholds_block(out: &mut dyn Write, r: &RunReport) -> std::io::Result<()> {
    if r.thresholds.is_empty() {
        return Ok(());
    }
    writeln!(out)?;
    writeln!(out, "thresholds")?;
    let width = r.thresholds.iter().map(|v| v.threshold.len()).max();
    for v in &r.thresholds {
        writeln!(
            out,
            "  {}  {:<w$}  actual {}",
            if v.pass { "pass" } else { "FAIL" },
            v.threshold,
            v.shown,
            w = width.unwrap_or(0)
        )?;
    }
    let failed = r.thresholds.iter().filter(|v| !v.pass).count();
    if failed == 0 {
        writeln!(out, "  all {} thresholds passed", r.thresholds.len())
    } else {
        writeln!(
            out,
            "  FAILED: {failed} of {} thresholds",
            r.thresholds.len()
        )
    }
}

fn warnings(out: &mut dyn Write, r: &RunReport) -> std::io::Result<()> {
    thresholds_block(out, r)?;
    if !r.warnings.is_empty() {
        writeln!(out)?;
        for w in &r.warnings {
            writeln!(out, "warning: {w}")?;
        }
    }
    notable_events(out, r)
}

/// How many kinds of event [`notable_events`] shows.
const EVENTS_SHOWN: usize = 6;

/// The events that explain the counts above (a broker's refusal, a close code, a stall): errors,
/// warnings and lost connections, alike ones (differing only in numbers: client, address,
/// count) shown once with how many there were, the first [`EVENTS_SHOWN`] kinds. The counts say
/// how many things failed; these say why, which a quiet run would otherwise show only in
/// the results file.
fn notable_events(out: &mut dyn Write, r: &RunReport) -> std::io::Result<()> {
    let mut shown: Vec<(String, &crate::records::EventRecord, u64)> = Vec::new();
    let mut kinds = 0usize;
    for e in &r.events {
        if !matches!(
            e.kind,
            EventKind::Error | EventKind::Warning | EventKind::Disconnected
        ) || r.warnings.contains(&e.detail)
        {
            continue;
        }
        let key: String = e
            .detail
            .split(|c: char| c.is_ascii_digit())
            .collect::<Vec<_>>()
            .join("#");
        match shown.iter_mut().find(|(k, _, _)| *k == key) {
            Some((_, _, n)) => *n += 1,
            None => {
                kinds += 1;
                if shown.len() < EVENTS_SHOWN {
                    shown.push((key, e, 1));
                }
            }
        }
    }
    if shown.is_empty() {
        return Ok(());
    }
    writeln!(out)?;
    writeln!(out, "events (alike ones once; all are in the results file)")?;
    for (_, e, n) in &shown {
        let times = if *n > 1 {
            format!(" ×{n}")
        } else {
            String::new()
        };
        writeln!(
            out,
            "  [{:>7.1}s] {}{times}: {}",
            e.at_s,
            e.kind.name(),
            e.detail
        )?;
    }
    if kinds > shown.len() {
        writeln!(out, "  … and {} other kinds", kinds - shown.len())?;
    }
    Ok(())
}

/// What to add after the open-file limit when connections were held beyond it.
pub(crate) fn beyond_fd_limit(cs: &msgbench_metrics::ConnectionSummary) -> &'static str {
    if cs.fd_free {
        " (connections held beyond it in io_uring tables)"
    } else {
        ""
    }
}

/// A connection workload: opened, failed by cause, rate, held, memory, connect latency.
/// The reconnections' latency line of a storm or churn (nothing when none came back).
fn reconnect_latency(out: &mut dyn Write, l: &LatencySummary) -> std::io::Result<()> {
    if l.count == 0 {
        return Ok(());
    }
    let ms = |ns: u64| ns as f64 / 1e6;
    writeln!(
        out,
        "            reconnect latency p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
        ms(l.p50),
        ms(l.p99),
        ms(l.max)
    )
}

fn connections_block(
    out: &mut dyn Write,
    r: &RunReport,
    cs: &msgbench_metrics::ConnectionSummary,
) -> std::io::Result<()> {
    let mut all = msgbench_metrics::Counters::default();
    let mut connect = LatencySummary::default();
    // Journeys' requests: the round trip from the send, and from the intended send time.
    let (mut request, mut request_co) = (LatencySummary::default(), LatencySummary::default());
    let mut cpu = 0.0;
    for p in &r.phases {
        all.merge(&p.counters);
        cpu += p.cpu_s;
        if p.phase == Phase::Measure {
            connect = p.connect;
            request = p.publish;
            request_co = p.e2e;
        }
    }
    writeln!(out, "connections ({})", cs.mode)?;
    writeln!(
        out,
        "  opened    {:>10}{}   {:.1} connections/s over {:.2}s",
        all.connects,
        match (cs.mode.as_str(), cs.requested) {
            ("journey", Some(n)) => format!(" by {n} virtual users"),
            (_, Some(n)) => format!(" of {n}"),
            (_, None) => String::new(),
        },
        cs.connections_per_s,
        cs.ramp_s
    )?;
    let f = &all.connect_failures;
    writeln!(
        out,
        "  failed    {:>10}   refused {} timeout {} reset {} no_fds {} no_ports {} tls {} rejected {} other {}",
        f.total(),
        f.refused,
        f.timeout,
        f.reset,
        f.no_fds,
        f.no_ports,
        f.tls,
        f.rejected,
        f.other
    )?;
    if cs.mode == "hold" {
        writeln!(
            out,
            "  held      {:>10} at peak   dropped {}   closed {}",
            cs.peak_held, all.dropped, all.closes
        )?;
        writeln!(
            out,
            "  memory    {:>10.1} KiB generator RSS per held connection ({:.1} MiB -> {:.1} MiB)",
            cs.rss_per_connection_bytes / 1024.0,
            cs.rss_baseline_bytes as f64 / 1048576.0,
            cs.rss_peak_bytes as f64 / 1048576.0
        )?;
        if let Some(rc) = &cs.reconnect {
            let settled = rc.settled_s.map_or_else(
                || "not all settled by the end".into(),
                |s| format!("all back or failed in {s:.3}s"),
            );
            writeln!(
                out,
                "  reconnect {:>10} dropped at {:.1}s: {} back, {} failed, {}",
                rc.dropped, rc.at_s, rc.back, rc.failed, settled
            )?;
            reconnect_latency(out, &rc.latency)?;
        }
        if let Some(c) = &cs.churn {
            writeln!(
                out,
                "  churn     {:>10} dropped at {}/s from {:.1}s: {} back, {} failed, {} skipped (none held)",
                c.dropped, c.rate, c.from_s, c.back, c.failed, c.skipped
            )?;
            reconnect_latency(out, &c.latency)?;
        }
        if cs.publishes_missed > 0 {
            writeln!(
                out,
                "  missed    {:>10} periodic publishes due while their connection was down",
                cs.publishes_missed
            )?;
        }
    } else {
        writeln!(out, "  closed    {:>10}", all.closes)?;
    }
    if all.sent > 0 {
        writeln!(
            out,
            "  messages  {:>10} sent on these connections",
            all.sent
        )?;
    }
    if all.received > 0 {
        writeln!(
            out,
            "  received  {:>10} by their subscriptions ({} bytes)",
            all.received, all.received_bytes
        )?;
    }
    if all.acked > 0 || all.errors.timeout > 0 {
        writeln!(
            out,
            "  replies   {:>10} to requests, {} not answered in time",
            all.acked, all.errors.timeout
        )?;
    }
    writeln!(
        out,
        "  generator {:>10.2} CPU-s   open-file limit {}{}",
        cpu,
        cs.fd_limit,
        beyond_fd_limit(cs)
    )?;
    if connect.count > 0 {
        writeln!(
            out,
            "  {:<12} {:>12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "latency", "count", "min", "mean", "p50", "p90", "p99", "p99.9", "max"
        )?;
        stage_row(out, "connect", &connect)?;
        stage_row(out, "request", &request)?;
        stage_row(out, "req intended", &request_co)?;
    }
    Ok(())
}

/// CPU time over a phase as a share of one core; `-` for a phase shorter than 0.2 s (one cut
/// short by a failure), where CPU time counted in clock ticks gives figures no machine reaches.
pub(crate) fn core_share(cpu_s: f64, duration_s: f64) -> String {
    if duration_s < 0.2 {
        return "-".into();
    }
    format!("{:.0}%", cpu_s / duration_s * 100.0)
}
