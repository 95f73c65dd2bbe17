//! Drawing the TUI: a pure function of a [`LiveState`] and a [`UiState`] onto a ratatui
//! [`Frame`], so it renders the same on a terminal and on a `TestBackend` (the snapshot tests and
//! `docs/tui.txt`).
//!
//! Layout, top to bottom: the header (run, target, plan, the phase with its bar and time left),
//! the throughput and latency charts over time, four panels (integrity, errors, generator health,
//! connections), recent events, and the key help.

use crate::format;
use crate::keys::UiState;
use crate::plan::RunPhase;
use crate::progress::format_progress;
use crate::state::{Lat, LiveState, Tick};
use msgbench_metrics::EventKind;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Chart, Dataset, GraphType, Paragraph, Sparkline, Wrap};

/// The smallest terminal the full layout fits in.
pub const MIN_SIZE: (u16, u16) = (80, 24);

const DIM: Style = Style::new().fg(Color::DarkGray);
const BOLD: Style = Style::new().add_modifier(Modifier::BOLD);
const SENT: Color = Color::Cyan;
const RECV: Color = Color::Green;
const P50: Color = Color::Green;
const P99: Color = Color::Yellow;
const MAX: Color = Color::Red;

/// A named rate series of the throughput chart.
type Series = (String, Box<dyn Fn(&Tick) -> f64>);
/// Which figure of a [`Lat`] a latency line shows.
type LatField = fn(Lat) -> u64;

/// Draws the whole screen.
pub fn draw(frame: &mut Frame, live: &LiveState, ui: &UiState) {
    let area = frame.area();
    if area.width < MIN_SIZE.0 || area.height < MIN_SIZE.1 {
        let msg = format!(
            "msgbench: the terminal is {}x{}; the live view needs {}x{} (the run goes on; q stops it)",
            area.width, area.height, MIN_SIZE.0, MIN_SIZE.1
        );
        frame.render_widget(Paragraph::new(msg).wrap(Wrap { trim: true }), area);
        return;
    }
    let st = ui.shown(live);
    let events_h = (st.events.len() as u16).clamp(1, 6) + 2;
    // Runs with groups: a row per group (at most 8 shown), under the panels.
    let groups_h = match st.groups.len() {
        0 => 0,
        n => n.min(8) as u16 + 3,
    };
    let [header, charts, panels, groups, events, help] = Layout::vertical([
        Constraint::Length(4),
        Constraint::Min(8),
        Constraint::Length(8),
        Constraint::Length(groups_h),
        Constraint::Length(events_h),
        Constraint::Length(1),
    ])
    .areas(area);
    draw_header(frame, header, st, ui);
    let [left, right] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(charts);
    draw_throughput(frame, left, st);
    draw_latency(frame, right, st, ui);
    let [a, b, c, d] = Layout::horizontal([Constraint::Ratio(1, 4); 4]).areas(panels);
    draw_integrity(frame, a, st);
    draw_errors(frame, b, st);
    draw_generator(frame, c, st);
    draw_connections(frame, d, st);
    if groups_h > 0 {
        draw_groups(frame, groups, st);
    }
    draw_events(frame, events, st);
    draw_help(frame, help, ui);
}

fn block(title: impl Into<Line<'static>>) -> Block<'static> {
    Block::bordered().title(title.into())
}

fn draw_header(frame: &mut Frame, area: Rect, st: &LiveState, ui: &UiState) {
    let status = st.progress.status();
    let title = match st.plan() {
        Some(p) if !p.name.is_empty() && p.name != "msgbench" => {
            format!(" msgbench · {} ", p.name)
        }
        _ => " msgbench ".to_string(),
    };
    let mut target = Vec::new();
    if let Some(p) = st.plan() {
        target.push(Span::styled(p.target.clone(), BOLD));
        if let Some(c) = &p.consume_from {
            target.push(Span::raw(format!(" → {c}")));
        }
        target.push(Span::raw(format!(" · {}", p.summary)));
    } else {
        target.push(Span::raw("waiting for the run to begin…"));
    }
    let phase_style = match status.phase {
        RunPhase::Measure => Style::new().fg(Color::Green).add_modifier(Modifier::BOLD),
        RunPhase::Done { interrupted: true } => {
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
        }
        _ => Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
    };
    let bar_w = (area.width as usize / 4).clamp(10, 40);
    let mut line2 = vec![Span::styled(
        format!("{:>8}s  ", format!("{:.1}", status.now_s)),
        DIM,
    )];
    match format_progress(&status, bar_w) {
        Some(p) => {
            let (name, rest) = p.split_at(p.find(' ').unwrap_or(p.len()));
            line2.push(Span::styled(name.to_string(), phase_style));
            line2.push(Span::raw(rest.to_string()));
        }
        None => {
            let text = match status.phase {
                RunPhase::Starting => "starting: connecting and provisioning…".to_string(),
                p => p.name().to_string(),
            };
            line2.push(Span::styled(text, phase_style));
        }
    }
    let mut flags = Vec::new();
    if ui.stop_requests > 0 && st.end.is_none() {
        flags.push(Span::styled(
            if ui.stop_requests == 1 {
                " STOPPING: draining, then the report (q again: skip the drain) "
            } else {
                " STOPPING: drain cut short "
            },
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        ));
    }
    if ui.paused() {
        flags.push(Span::styled(
            " PAUSED: the run goes on; p resumes ",
            Style::new().fg(Color::Black).bg(Color::Yellow),
        ));
    }
    let notes = if ui.notes.is_empty() {
        String::new()
    } else {
        format!(" {} ", ui.notes.join(" · "))
    };
    let host = st
        .host
        .as_ref()
        .map(|(h, cpus)| format!(" {h} · {cpus} CPUs "))
        .unwrap_or_default();
    let p = Paragraph::new(vec![Line::from(target), Line::from(line2)]).block(
        block(Line::styled(title, BOLD))
            .title(Line::styled(host, DIM).right_aligned())
            .title_bottom(Line::styled(notes, DIM))
            .title_bottom(Line::from(flags).right_aligned()),
    );
    frame.render_widget(p, area);
}

/// The ticks that fit in a chart `area` wide (two braille dots per column).
fn window(st: &LiveState, area: Rect) -> Vec<&Tick> {
    let n = (area.width as usize).saturating_sub(12).max(10) * 2;
    let mut full: Vec<&Tick> = st.full_ticks().rev().take(n).collect();
    full.reverse();
    full
}

fn x_axis(ticks: &[&Tick]) -> (Axis<'static>, [f64; 2]) {
    let t0 = ticks.first().map_or(0.0, |t| t.t);
    let t1 = ticks.last().map_or(1.0, |t| t.t).max(t0 + 1.0);
    let labels = vec![
        format!("{t0:.0}s"),
        format!("{:.0}s", (t0 + t1) / 2.0),
        format!("{t1:.0}s"),
    ];
    (
        Axis::default().bounds([t0, t1]).labels(labels).style(DIM),
        [t0, t1],
    )
}

fn waiting(frame: &mut Frame, area: Rect, b: Block<'static>, what: &str) {
    frame.render_widget(
        Paragraph::new(Line::styled(what.to_string(), DIM)).block(b),
        area,
    );
}

fn draw_throughput(frame: &mut Frame, area: Rect, st: &LiveState) {
    let ticks = window(st, area);
    let conn = st.plan().is_some_and(|p| p.connections);
    // Multi-stage runs have stage listeners instead of consumers: their last stage is what
    // "received" means there.
    let last_stage = st.stage_totals.len().checked_sub(1);
    let second: Series = match (conn, last_stage) {
        (true, _) => ("opened/s".into(), Box::new(|t: &Tick| t.connects_per_s)),
        (false, Some(i)) => (
            st.source_name(crate::state::Source::Stage(i)),
            Box::new(move |t: &Tick| t.stages.get(i).map_or(0.0, |s| s.0)),
        ),
        (false, None) => ("recv".into(), Box::new(|t: &Tick| t.recv_per_s)),
    };
    let first: Series = if conn {
        (
            "held".into(),
            Box::new(|t: &Tick| t.held.unwrap_or(0) as f64),
        )
    } else {
        ("sent".into(), Box::new(|t: &Tick| t.sent_per_s))
    };
    let mut title = vec![Span::styled(
        if conn {
            " Connections "
        } else {
            " Throughput msgs/s "
        },
        BOLD,
    )];
    if let Some(t) = ticks.last() {
        title.push(Span::styled(
            format!("{} {} ", first.0, format::rate(first.1(t))),
            SENT,
        ));
        title.push(Span::styled(
            format!("{} {} ", second.0, format::rate(second.1(t))),
            RECV,
        ));
        let mb = format!("{:.1} MB/s ", t.mb_per_s);
        let used: usize = title.iter().map(|s| s.content.chars().count()).sum();
        if !conn && used + mb.len() + 4 <= area.width as usize {
            title.push(Span::styled(mb, DIM));
        }
    }
    let title = Line::from(title);
    if ticks.is_empty() {
        return waiting(frame, area, block(title), "waiting for the first interval…");
    }
    let series = [(first, SENT), (second, RECV)];
    let data: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|((_, f), _)| ticks.iter().map(|t| (t.t, f(t))).collect())
        .collect();
    let top = data
        .iter()
        .flatten()
        .map(|p| p.1)
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.1;
    let datasets = series
        .iter()
        .zip(&data)
        .map(|(((name, _), color), d)| {
            Dataset::default()
                .name(name.clone())
                .marker(Marker::Braille)
                .graph_type(GraphType::Line)
                .style(Style::new().fg(*color))
                .data(d)
        })
        .collect();
    let (x, _) = x_axis(&ticks);
    let y = Axis::default()
        .bounds([0.0, top])
        .labels(vec![
            "0".to_string(),
            format::si(top / 2.0),
            format::si(top),
        ])
        .style(DIM);
    frame.render_widget(
        Chart::new(datasets)
            .block(block(title))
            .x_axis(x)
            .y_axis(y)
            .legend_position(None),
        area,
    );
}

/// Log10 of a latency, for a chart whose y axis spans decades.
fn lg(ns: u64) -> f64 {
    (ns.max(1) as f64).log10()
}

fn draw_latency(frame: &mut Frame, area: Rect, st: &LiveState, ui: &UiState) {
    let sources = st.sources();
    let src = ui.source(st);
    let idx = sources.iter().position(|s| *s == src).unwrap_or(0);
    let ticks = window(st, area);
    let now = ticks.iter().rev().map(|t| src.lat(t)).find(|l| l.count > 0);
    let mut title = vec![Span::styled(
        format!(" Latency · {} ", st.source_name(src)),
        BOLD,
    )];
    if let Some(l) = now {
        title.push(Span::styled(
            format!("p50 {} ", format::latency(l.p50)),
            P50,
        ));
        title.push(Span::styled(
            format!("p99 {} ", format::latency(l.p99)),
            P99,
        ));
        title.push(Span::styled(
            format!("max {} ", format::latency(l.max)),
            MAX,
        ));
    }
    let title = Line::from(title);
    let with_data: Vec<&Tick> = ticks
        .iter()
        .copied()
        .filter(|t| src.lat(t).count > 0)
        .collect();
    if with_data.is_empty() {
        let b = block(title).title_bottom(
            Line::styled(
                format!(" series {}/{}: s/Tab ", idx + 1, sources.len()),
                DIM,
            )
            .right_aligned(),
        );
        return waiting(frame, area, b, "no values recorded for this series yet");
    }
    let series: [(&str, Color, LatField); 3] = [
        ("max", MAX, |l| l.max),
        ("p99", P99, |l| l.p99),
        ("p50", P50, |l| l.p50),
    ];
    let data: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|(_, _, f)| with_data.iter().map(|t| (t.t, lg(f(src.lat(t))))).collect())
        .collect();
    let lo = data.iter().flatten().map(|p| p.1).fold(f64::MAX, f64::min);
    let hi = data.iter().flatten().map(|p| p.1).fold(f64::MIN, f64::max);
    let (lo, hi) = (lo.floor(), hi.ceil().max(lo.floor() + 1.0));
    let labels: Vec<String> = if hi - lo <= 4.0 {
        (lo as i32..=hi as i32).map(format::decade).collect()
    } else {
        [lo, ((lo + hi) / 2.0).round(), hi]
            .iter()
            .map(|k| format::decade(*k as i32))
            .collect()
    };
    let datasets = series
        .iter()
        .zip(&data)
        .map(|((name, color, _), d)| {
            Dataset::default()
                .name(*name)
                .marker(Marker::Braille)
                .graph_type(GraphType::Line)
                .style(Style::new().fg(*color))
                .data(d)
        })
        .collect();
    let (x, _) = x_axis(&ticks);
    let y = Axis::default().bounds([lo, hi]).labels(labels).style(DIM);
    let b = block(title).title_bottom(
        Line::styled(
            format!(" series {}/{}: s/Tab ", idx + 1, sources.len()),
            DIM,
        )
        .right_aligned(),
    );
    frame.render_widget(
        Chart::new(datasets)
            .block(b)
            .x_axis(x)
            .y_axis(y)
            .legend_position(None),
        area,
    );
}

/// `name ........ value` rows of a panel, `w` cells wide.
fn row(name: &str, value: String, w: u16, style: Style) -> Line<'static> {
    let w = w.saturating_sub(2) as usize;
    let pad = w.saturating_sub(name.chars().count() + value.chars().count() + 1);
    Line::from(vec![
        Span::raw(format!("{name} {}", " ".repeat(pad))),
        Span::styled(value, style),
    ])
}

fn alarm(n: u64) -> Style {
    if n > 0 {
        Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
    } else {
        Style::new()
    }
}

fn draw_integrity(frame: &mut Frame, area: Rect, st: &LiveState) {
    let (lost, fin) = st.lost();
    let c = &st.totals;
    let w = area.width;
    let mut lines = vec![
        row(
            if fin {
                "lost (final)"
            } else {
                "lost (open gaps)"
            },
            format::count(lost),
            w,
            alarm(lost),
        ),
        row(
            "duplicated",
            format::count(c.duplicated),
            w,
            alarm(c.duplicated),
        ),
        row(
            "reordered",
            format::count(c.reordered),
            w,
            alarm(c.reordered),
        ),
        row("redelivered", format::count(c.redelivered), w, Style::new()),
        row("foreign", format::count(c.foreign), w, alarm(c.foreign)),
    ];
    match &st.end {
        Some(e) => lines.push(row(
            "completeness",
            format!("{:.4}%", e.integrity.completeness * 100.0),
            w,
            BOLD,
        )),
        None => lines.push(row("received", format::count(c.received), w, DIM)),
    }
    frame.render_widget(Paragraph::new(lines).block(block(" Integrity ")), area);
}

fn draw_errors(frame: &mut Frame, area: Rect, st: &LiveState) {
    use msgbench_metrics::{ConnectFailure, ErrorKind};
    let c = &st.totals;
    let w = area.width;
    let total = c.errors.total() + c.connect_failures.total();
    let now = st.last_full().map_or(0, |t| t.errors);
    let mut lines = vec![row(
        "total",
        format!("{} ({now} last tick)", format::count(total)),
        w,
        alarm(total),
    )];
    let kinds = ErrorKind::ALL
        .iter()
        .map(|k| (format!("{k:?}").to_lowercase(), c.errors.get(*k)))
        .chain(
            ConnectFailure::ALL
                .iter()
                .map(|f| (format!("connect {}", f.name()), c.connect_failures.get(*f))),
        )
        .chain([
            ("nacked".to_string(), c.nacked),
            ("returned".to_string(), c.returned),
            ("reconnects".to_string(), c.reconnects),
        ])
        .filter(|(_, n)| *n > 0);
    for (name, n) in kinds.take(5) {
        lines.push(row(&format!("  {name}"), format::count(n), w, alarm(n)));
    }
    if lines.len() == 1 {
        lines.push(Line::styled("  none", DIM));
    }
    frame.render_widget(Paragraph::new(lines).block(block(" Errors ")), area);
}

fn draw_generator(frame: &mut Frame, area: Rect, st: &LiveState) {
    let b = block(" Generator ");
    let inner = b.inner(area);
    frame.render_widget(b, area);
    let w = area.width;
    let last = st.last_full();
    let cpus = st.host.as_ref().map_or(1, |h| h.1.max(1));
    let cpu = last.map_or(0.0, |t| t.cpu_pct);
    let busy = cpu >= 90.0 * cpus as f64;
    let mut lines = vec![row(
        "CPU",
        format!("{cpu:.0}% of {}%", cpus * 100),
        w,
        if busy { alarm(1) } else { Style::new() },
    )];
    match last.map(|t| t.send_delay).filter(|l| l.count > 0) {
        Some(l) => {
            lines.push(row(
                "send delay p99",
                format::latency(l.p99),
                w,
                Style::new(),
            ));
            lines.push(row(
                "send delay max",
                format::latency(l.max),
                w,
                Style::new(),
            ));
        }
        None => lines.push(row("send delay", "-".into(), w, DIM)),
    }
    lines.push(row(
        "late sends",
        format!(
            "{} ({}/tick)",
            format::count(st.totals.late_sends),
            last.map_or(0, |t| t.late)
        ),
        w,
        alarm(last.map_or(0, |t| t.late)),
    ));
    if let Some(n) = st.awaiting_ack() {
        lines.push(row("awaiting ack", format::count(n), w, Style::new()));
    }
    if let Some(rss) = last.and_then(|t| t.rss_bytes) {
        lines.push(row(
            "RSS",
            format!("{:.1} MiB", rss as f64 / 1048576.0),
            w,
            Style::new(),
        ));
    }
    let [text, spark] = Layout::vertical([Constraint::Min(1), Constraint::Length(1)]).areas(inner);
    frame.render_widget(Paragraph::new(lines), text);
    let mut cpu_hist: Vec<u64> = st
        .full_ticks()
        .rev()
        .take(spark.width as usize)
        .map(|t| t.cpu_pct.round() as u64)
        .collect();
    cpu_hist.reverse();
    frame.render_widget(
        Sparkline::default()
            .data(&cpu_hist)
            .max(u64::from(cpus) * 100)
            .style(Style::new().fg(Color::Magenta)),
        spark,
    );
}

/// Splits `text` into at most `max` lines of `w` characters at spaces.
fn wrap(text: &str, w: usize, max: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut cur = String::new();
    for word in text.split_whitespace() {
        if !cur.is_empty() && cur.chars().count() + 1 + word.chars().count() > w {
            out.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(word);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    if out.len() > max {
        let rest = out.split_off(max - 1).join(" ");
        out.push(rest);
    }
    out.into_iter().map(|l| format::fit(&l, w)).collect()
}

/// The fourth panel: connections for connection workloads, the stages of multi-stage runs,
/// otherwise the clients' connection state.
fn draw_connections(frame: &mut Frame, area: Rect, st: &LiveState) {
    let w = area.width;
    let c = &st.totals;
    let last = st.last_full();
    let mut lines = Vec::new();
    let mut title = " Connections ";
    if st.plan().is_some_and(|p| p.connections) {
        lines.push(row(
            "held",
            format::count(last.and_then(|t| t.held).unwrap_or(0)),
            w,
            BOLD,
        ));
        lines.push(row(
            "opened",
            format!(
                "{} ({}/s)",
                format::count(c.connects),
                format::rate(last.map_or(0.0, |t| t.connects_per_s))
            ),
            w,
            Style::new(),
        ));
        match st
            .ticks
            .iter()
            .rev()
            .map(|t| t.connect)
            .find(|l| l.count > 0)
        {
            Some(l) => {
                lines.push(row("connect p50", format::latency(l.p50), w, Style::new()));
                lines.push(row("connect p99", format::latency(l.p99), w, Style::new()));
            }
            None => lines.push(row("connect p50/p99", "-".into(), w, DIM)),
        }
        lines.push(row(
            "dropped",
            format::count(c.dropped),
            w,
            alarm(c.dropped),
        ));
        lines.push(row(
            "failed",
            format::count(c.connect_failures.total()),
            w,
            alarm(c.connect_failures.total()),
        ));
    } else if !st.stage_totals.is_empty() {
        title = " Stages reached ";
        let rows = area.height.saturating_sub(2) as usize;
        for (i, s) in st.stage_totals.iter().enumerate().take(rows) {
            let failed = if s.failed > 0 {
                format!(" !{}", format::count(s.failed))
            } else {
                String::new()
            };
            lines.push(row(
                &format::fit(&st.source_name(crate::state::Source::Stage(i)), 14),
                format!("{}{failed}", format::count(s.reached)),
                w,
                alarm(s.failed),
            ));
        }
    } else {
        let connected = st.connected.as_deref().unwrap_or("connecting…");
        for l in wrap(connected, w.saturating_sub(2) as usize, 2) {
            lines.push(Line::raw(l));
        }
        lines.push(row(
            "reconnects",
            format::count(c.reconnects),
            w,
            alarm(c.reconnects),
        ));
        lines.push(row(
            "disconnects",
            format::count(st.disconnects),
            w,
            alarm(st.disconnects),
        ));
    }
    frame.render_widget(Paragraph::new(lines).block(block(title)), area);
}

/// One row per group: its last window's rates and latency, its connections, its totals.
fn draw_groups(frame: &mut Frame, area: Rect, st: &LiveState) {
    let w = area.width.saturating_sub(2) as usize;
    let head = format!(
        "{:<16} {:>10} {:>10} {:>9} {:>9} {:>8} {:>12} {:>12} {:>7}",
        "group", "sent/s", "recv/s", "e2e p50", "e2e p99", "held", "sent", "received", "errors"
    );
    let mut lines = vec![Line::styled(format::fit(&head, w), BOLD)];
    for r in st.groups.iter().take(8) {
        let g = &r.last;
        let d = r.dur_s.max(1e-9);
        let lat = |v: Option<u64>| v.map_or("-".to_string(), format::latency);
        let text = format!(
            "{:<16} {:>10.0} {:>10.0} {:>9} {:>9} {:>8} {:>12} {:>12} {:>7}",
            format::fit(&g.name, 16),
            g.sent as f64 / d,
            g.received as f64 / d,
            lat(g.e2e_p50_ns),
            lat(g.e2e_p99_ns),
            g.held.map_or("-".to_string(), |h| h.to_string()),
            r.sent,
            r.received,
            r.errors
        );
        lines.push(Line::styled(format::fit(&text, w), alarm(r.errors)));
    }
    let title = format!(" Groups ({}) ", st.groups.len());
    frame.render_widget(
        Paragraph::new(lines).block(block(Line::styled(title, BOLD))),
        area,
    );
}

fn draw_events(frame: &mut Frame, area: Rect, st: &LiveState) {
    let h = area.height.saturating_sub(2) as usize;
    let w = area.width.saturating_sub(2) as usize;
    let mut lines: Vec<Line> = st
        .events
        .iter()
        .rev()
        .take(h)
        .rev()
        .map(|e| {
            let style = match e.kind {
                EventKind::Error | EventKind::Disconnected => Style::new().fg(Color::Red),
                EventKind::Warning | EventKind::Reconnected => Style::new().fg(Color::Yellow),
                EventKind::Phase => Style::new().fg(Color::Cyan),
                _ => Style::new(),
            };
            let text = format!("[{:>7.1}s] {}: {}", e.at_s, e.kind, e.detail);
            Line::styled(format::fit(&text, w), style)
        })
        .collect();
    if lines.is_empty() {
        lines.push(Line::styled("no events yet", DIM));
    }
    let mut title = vec![Span::styled(" Events ", BOLD)];
    if st.warnings > 0 {
        title.push(Span::styled(
            format!("({} warnings/errors) ", st.warnings),
            Style::new().fg(Color::Yellow),
        ));
    }
    if st.skipped_records > 0 {
        title.push(Span::styled(
            format!(
                "({} records not shown: the view fell behind) ",
                st.skipped_records
            ),
            Style::new().fg(Color::Red),
        ));
    }
    frame.render_widget(Paragraph::new(lines).block(block(Line::from(title))), area);
}

fn draw_help(frame: &mut Frame, area: Rect, ui: &UiState) {
    let keys = [
        (
            "p",
            if ui.paused() {
                " resume display  "
            } else {
                " pause display  "
            },
        ),
        ("s/Tab", " latency series  "),
        ("q/Esc", " stop the run and write the report"),
    ];
    let spans: Vec<Span> = keys
        .iter()
        .flat_map(|(k, what)| {
            [
                Span::styled(
                    format!(" {k} "),
                    Style::new().fg(Color::Black).bg(Color::Gray),
                ),
                Span::styled(*what, DIM),
            ]
        })
        .collect();
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}
