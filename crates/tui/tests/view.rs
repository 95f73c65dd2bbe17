//! The TUI as a person sees it: records are folded into a [`LiveState`], the screen is rendered
//! on ratatui's `TestBackend`, and the text is compared with golden snapshots in `tests/golden/`
//! (`UPDATE_GOLDEN=1 cargo test -p msgbench-tui` rewrites them, and `docs/tui.txt` and
//! `docs/tui.html`, after an intended change). Content assertions make sure the figures that
//! matter are on screen.

use msgbench_metrics::{Counters, Gauges, Histograms, IntervalStats, Phase, StageStats};
use msgbench_report::{EventRecord, Record};
use msgbench_tui::plan::{Goal, RunPhase};
use msgbench_tui::snapshot::buffer_html;
use msgbench_tui::state::{EVENTS, HISTORY, Source};
use msgbench_tui::{LiveState, UiState, render, render_text};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use serde_json::json;
use std::path::Path;

const W: u16 = 120;
const H: u16 = 36;

fn golden(path: &Path, actual: &str) {
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(path).unwrap_or_else(|_| {
        panic!(
            "{} is missing: run with UPDATE_GOLDEN=1 to create it",
            path.display()
        )
    });
    assert_eq!(
        actual,
        expected,
        "{} differs (UPDATE_GOLDEN=1 to accept); actual:\n{actual}",
        path.display()
    );
}

fn snapshot(name: &str, actual: &str) {
    golden(&Path::new("tests/golden").join(name), actual);
}

/// A `begin` record (built from JSON so fields the writer adds later keep their defaults).
fn begin(plan: serde_json::Value) -> Record {
    serde_json::from_value(json!({
        "type": "begin", "version": 1, "tool": "msgbench 0.1.0",
        "started_unix_ms": 1_795_000_000_000u64,
        "host": {"hostname": "bench-01", "cpus": 4, "os": "linux"},
        "clock": {"source": "CLOCK_MONOTONIC", "scope": "host"},
        "plan": plan
    }))
    .unwrap()
}

fn pubsub_plan(measure: serde_json::Value) -> serde_json::Value {
    json!({
        "name": "orders-fanout", "target": "nats://127.0.0.1:4222", "topics": ["orders"],
        "producers_per_topic": 4, "consumers_per_topic": 2, "subscription": {"mode": "fanout"},
        "request_reply": false, "size": {"kind": "fixed", "bytes": 256},
        "rate": {"shape": "constant", "rate": 20000.0}, "warmup": "2s", "measure": measure,
        "drain": "5s", "tick": "1s", "connections": null
    })
}

fn event(at_s: f64, kind: &str, detail: &str) -> Record {
    Record::Event(EventRecord {
        at_s,
        kind: kind.parse().unwrap(),
        detail: detail.into(),
    })
}

/// Records `n` values spread like a real latency distribution around `p50_ns`.
fn latencies(h: &mut msgbench_metrics::Histogram, n: u64, p50_ns: u64) {
    if n == 0 {
        return;
    }
    h.record_n(p50_ns * 7 / 10, n * 45 / 100).unwrap();
    h.record_n(p50_ns, n * 10 / 100).unwrap();
    h.record_n(p50_ns * 3 / 2, n * 40 / 100).unwrap();
    h.record_n(p50_ns * 5, n * 45 / 1000).unwrap();
    h.record_n(p50_ns * 20, (n / 200).max(1)).unwrap();
}

struct Tick {
    index: u64,
    phase: Phase,
    start_s: f64,
    end_s: f64,
    sent: u64,
    received: u64,
    e2e_ns: u64,
}

fn interval(t: Tick, tweak: impl FnOnce(&mut IntervalStats)) -> Record {
    let mut h = Histograms::new();
    latencies(&mut h.e2e, t.received, t.e2e_ns);
    latencies(&mut h.publish, t.sent, t.e2e_ns / 2);
    latencies(&mut h.send_delay, t.sent, 2_000);
    let mut iv = IntervalStats {
        index: t.index,
        phase: t.phase,
        start_s: t.start_s,
        end_s: t.end_s,
        counters: Counters {
            sent: t.sent,
            sent_bytes: t.sent * 256,
            acked: t.sent,
            received: t.received,
            received_bytes: t.received * 256,
            ..Counters::default()
        },
        histograms: h,
        cpu_s: 0.35 + 0.05 * (t.index % 3) as f64,
        gauges: None,
        stages: Vec::new(),
        host: None,
        loop_lag_ns: 0,
        groups: Vec::new(),
    };
    tweak(&mut iv);
    Record::Interval(iv)
}

/// A realistic 30 s fan-out run at 20k msgs/s, 14 s in: warm-up done, measure under way, a
/// reconnect with a few messages lost.
fn pubsub_run() -> Vec<Record> {
    let mut r = vec![
        begin(pubsub_plan(json!({"duration": "30s"}))),
        event(
            -0.21,
            "connected",
            "4 producers, 2 consumers connected in 0.012s",
        ),
        event(0.0, "phase", "warmup"),
    ];
    for i in 0..14u64 {
        let (phase, start) = if i < 2 {
            (Phase::Warmup, i as f64)
        } else {
            (Phase::Measure, i as f64)
        };
        if i == 2 {
            r.push(event(2.0, "phase", "measure"));
        }
        let wave = ((i as f64) * 0.8).sin();
        let sent = 20_000 - (i % 2) * 3;
        let received = 2 * sent - if i == 9 { 1_200 } else { 0 };
        let e2e = (250_000.0 + 60_000.0 * wave) as u64 * if i == 9 { 8 } else { 1 };
        r.push(interval(
            Tick {
                index: i,
                phase,
                start_s: start,
                end_s: start + 1.0,
                sent,
                received,
                e2e_ns: e2e,
            },
            |iv| {
                if i == 9 {
                    iv.counters.gaps_opened = 7;
                    iv.counters.reconnects = 1;
                    iv.counters.errors.disconnect = 1;
                    iv.counters.late_sends = 42;
                }
                if i == 10 {
                    iv.counters.gaps_filled = 4;
                    iv.counters.reordered = 4;
                }
            },
        ));
        if i == 9 {
            r.push(event(
                9.4,
                "disconnected",
                "consumer 1: connection reset by peer",
            ));
            r.push(event(9.6, "reconnected", "consumer 1 after 0.21s"));
        }
    }
    r.push(event(
        13.2,
        "warning",
        "generator CPU above 90% of a core in 1 interval: figures may be the generator's limit",
    ));
    r
}

fn state_of(records: &[Record]) -> LiveState {
    let mut s = LiveState::new();
    for r in records {
        s.apply(r);
    }
    s
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

#[test]
fn pubsub_run_snapshot_shows_phase_rates_and_integrity() {
    let live = state_of(&pubsub_run());
    let text = render_text(&live, &UiState::new(), W, H);
    snapshot("pubsub.txt", &text);
    assert!(text.contains("orders-fanout"), "run name");
    assert!(text.contains("nats://127.0.0.1:4222"), "target");
    assert!(text.contains("measure ["), "phase with its bar");
    assert!(
        text.contains("18s left"),
        "time left: 30 s measure from 2 s, now 14 s"
    );
    assert!(text.contains("then drain ≤ 5.0s"));
    assert!(text.contains("sent 19,997"), "last tick's send rate");
    assert!(text.contains("recv 39,994"), "two fan-out consumers");
    let lost_row = text
        .lines()
        .find(|l| l.contains("lost (open gaps)"))
        .unwrap();
    assert!(
        lost_row.contains(" 3│"),
        "7 gaps opened, 4 filled: {lost_row}"
    );
    assert!(text.contains("reconnected: consumer 1"), "recent events");
    assert!(text.contains("Latency · end-to-end"));
    assert!(text.contains("bench-01 · 4 CPUs"));
}

#[test]
fn docs_screenshot_is_current() {
    // The screenshot in the docs is the same realistic state, at a common terminal size, with
    // the dashboard's address noted as `--tui --dashboard` shows it.
    let live = state_of(&pubsub_run());
    let ui = UiState {
        notes: vec!["dashboard http://127.0.0.1:8643/".into()],
        ..UiState::new()
    };
    let text = render_text(&live, &ui, W, H);
    assert!(text.contains("dashboard http://127.0.0.1:8643/"));
    golden(Path::new("../../docs/tui.txt"), &text);
    // The same screen with its colours; `docs/tui.png` is a browser's rendering of it:
    //   chromium --headless --screenshot=docs/tui.png --window-size=1040,580 docs/tui.html
    let html = buffer_html(&render(&live, &ui, W, H), "msgbench run --tui");
    golden(Path::new("../../docs/tui.html"), &html);
}

fn stages_run() -> Vec<Record> {
    let mut plan = pubsub_plan(json!({"messages": 100000}));
    plan["name"] = json!("ecp");
    plan["target"] = json!("amqp10://127.0.0.1:5672");
    plan["tracking"] = json!({"stages": [
        {"name": "sent"}, {"name": "reply"}, {"name": "inbox"}, {"name": "DELIVERED"}
    ]});
    let mut r = vec![
        begin(plan),
        event(0.0, "phase", "warmup"),
        event(2.0, "phase", "measure"),
    ];
    for i in 0..6u64 {
        let phase = if i < 2 { Phase::Warmup } else { Phase::Measure };
        r.push(interval(
            Tick {
                index: i,
                phase,
                start_s: i as f64,
                end_s: i as f64 + 1.0,
                sent: 3_000,
                received: 0,
                e2e_ns: 0,
            },
            |iv| {
                iv.stages = (0..4u64)
                    .map(|s| {
                        let mut st = StageStats::default();
                        st.counts.reached = 3_000 - s * 100;
                        latencies(&mut st.latency, st.counts.reached, 1_000_000 * (s + 1));
                        st
                    })
                    .collect();
            },
        ));
    }
    r
}

#[test]
fn stage_switching_shows_each_stage_latency() {
    let live = state_of(&stages_run());
    let mut ui = UiState::new();
    assert_eq!(
        live.sources(),
        vec![
            Source::E2e,
            Source::Publish,
            Source::Stage(0),
            Source::Stage(1),
            Source::Stage(2),
            Source::Stage(3)
        ]
    );
    for _ in 0..3 {
        ui.handle_key(key(KeyCode::Tab), &live);
    }
    assert_eq!(ui.source(&live), Source::Stage(1));
    let text = render_text(&live, &ui, W, H);
    snapshot("stages.txt", &text);
    assert!(text.contains("Latency · s2 reply "), "{text}");
    assert!(text.contains("series 4/6: s/Tab"), "{text}");
    assert!(text.contains("p50 2.00ms"), "stage 2 median: {text}");
    assert!(
        text.contains("12,000 / 100,000 msgs"),
        "message goal: 4 measured ticks of 3,000"
    );
    assert!(text.contains("Stages reached"));
    let s2 = text.lines().find(|l| l.contains("│s2 reply")).unwrap();
    assert!(s2.contains("17,400"), "6 ticks of 2,900 reached s2: {s2}");
    ui.handle_key(key(KeyCode::BackTab), &live);
    assert_eq!(ui.source(&live), Source::Stage(0));
    ui.handle_key(key(KeyCode::Char('s')), &live);
    ui.handle_key(key(KeyCode::Char('s')), &live);
    ui.handle_key(key(KeyCode::Char('s')), &live);
    ui.handle_key(key(KeyCode::Char('s')), &live);
    assert_eq!(ui.source(&live), Source::E2e, "wraps around");
    let e2e = render_text(&live, &ui, W, H);
    assert!(e2e.contains("no values recorded for this series yet"));
}

#[test]
fn connection_workload_snapshot_shows_held_connections() {
    let plan = json!({
        "name": "hold", "target": "mqtt://127.0.0.1:1883", "warmup": "0s",
        "measure": {"duration": "10s"}, "drain": "5s", "tick": "1s",
        "connections": {"mode": "hold", "count": 20000, "rate": 2000.0, "hold": "30s", "concurrency": 64}
    });
    let mut r = vec![begin(plan), event(0.0, "phase", "measure")];
    for i in 0..12u64 {
        r.push(interval(
            Tick {
                index: i,
                phase: Phase::Measure,
                start_s: i as f64,
                end_s: i as f64 + 1.0,
                sent: 0,
                received: 0,
                e2e_ns: 0,
            },
            |iv| {
                let held = (2_000 * (i + 1)).min(20_000);
                iv.counters.connects = if held < 20_000 || i == 9 { 2_000 } else { 0 };
                iv.counters.connect_failures.timeout = u64::from(i == 4) * 3;
                iv.gauges = Some(Gauges {
                    held,
                    rss_bytes: (60 << 20) + held * 9_000,
                });
                latencies(&mut iv.histograms.connect, iv.counters.connects, 900_000);
            },
        ));
    }
    let live = state_of(&r);
    assert_eq!(live.sources()[0], Source::Connect, "connect latency first");
    let text = render_text(&live, &UiState::new(), W, H);
    snapshot("connections.txt", &text);
    assert!(text.contains("held 20,000"));
    assert!(text.contains("Latency · connect"));
    assert!(text.contains("connect timeout"), "failures by cause");
    assert!(
        text.contains("28s left"),
        "ramp done at 10 s, 30 s hold, now 12 s: {text}"
    );
    match live.plan().unwrap().goal {
        Goal::Hold { count, hold_s } => assert_eq!((count, hold_s), (20_000, 30.0)),
        g => panic!("{g:?}"),
    }
}

#[test]
fn pause_freezes_the_display_while_records_keep_coming() {
    let records = pubsub_run();
    let (first, rest) = records.split_at(10);
    let mut live = state_of(first);
    let at_pause = format!("{:>8.1}s", live.progress.now_s());
    let mut ui = UiState::new();
    ui.handle_key(key(KeyCode::Char('p')), &live);
    assert!(ui.paused());
    for r in rest {
        live.apply(r);
    }
    let paused = render_text(&live, &ui, W, H);
    assert!(paused.contains("PAUSED"));
    assert!(
        paused.contains(&at_pause),
        "frozen at the time of the pause: {paused}"
    );
    assert!(!paused.contains("    14.0s"));
    ui.handle_key(key(KeyCode::Char('p')), &live);
    assert!(!ui.paused());
    let resumed = render_text(&live, &ui, W, H);
    assert!(!resumed.contains("PAUSED"));
    assert!(resumed.contains("    14.0s"), "caught up: {resumed}");
}

#[test]
fn stop_request_and_end_are_shown() {
    let mut records = pubsub_run();
    let mut live = state_of(&records);
    let mut ui = UiState::new();
    ui.handle_key(key(KeyCode::Char('q')), &live);
    let stopping = render_text(&live, &ui, W, H);
    assert!(stopping.contains("STOPPING: draining"), "{stopping}");
    records.push(
        serde_json::from_value(json!({
            "type": "end", "duration_s": 15.0, "interrupted": true, "drain_complete": true,
            "phases": [], "warnings": [],
            "integrity": {"expected": 560_000, "delivered": 559_997, "lost": 3, "duplicated": 0,
                          "reordered": 4, "foreign": 0, "completeness": 559_997.0 / 560_000.0}
        }))
        .unwrap(),
    );
    live.apply(records.last().unwrap());
    assert_eq!(
        live.progress.status().phase,
        RunPhase::Done { interrupted: true }
    );
    let done = render_text(&live, &ui, W, H);
    assert!(done.contains("stopped"));
    assert!(!done.contains("STOPPING"), "the stop is done");
    let lost = done.lines().find(|l| l.contains("lost (final)")).unwrap();
    assert!(lost.contains(" 3│"), "{lost}");
    assert!(done.contains("99.9995%"));
}

#[test]
fn small_terminals_get_a_message_not_a_broken_layout() {
    let live = state_of(&pubsub_run());
    let text = render_text(&live, &UiState::new(), 60, 12);
    assert!(text.contains("needs 80x24"), "{text}");
}

#[test]
fn memory_stays_bounded_on_long_runs() {
    let mut live = state_of(&pubsub_run()[..1]);
    for i in 0..(HISTORY as u64 + 500) {
        live.apply(&interval(
            Tick {
                index: i,
                phase: Phase::Measure,
                start_s: i as f64,
                end_s: i as f64 + 1.0,
                sent: 10,
                received: 10,
                e2e_ns: 1_000,
            },
            |_| {},
        ));
        live.apply(&event(i as f64, "warning", "w"));
    }
    assert_eq!(live.ticks.len(), HISTORY);
    assert_eq!(live.events.len(), EVENTS);
    assert_eq!(live.ticks.back().unwrap().t, (HISTORY + 500) as f64);
    assert_eq!(
        live.totals.sent,
        10 * (HISTORY as u64 + 500),
        "totals still count everything"
    );
    let text = render_text(&live, &UiState::new(), W, H);
    assert!(
        text.contains("1524s"),
        "the chart shows the latest ticks: {text}"
    );
}

/// A run with groups: the groups panel has a row per group with its last window's rates and
/// latency, its held connections and its totals (a snapshot, and the figures that matter).
#[test]
fn groups_run_shows_a_row_per_group() {
    use msgbench_metrics::GroupTick;
    let mut r = vec![begin(pubsub_plan(json!({"duration": "30s"})))];
    for i in 0..3u64 {
        r.push(interval(
            Tick {
                index: i,
                phase: Phase::Measure,
                start_s: i as f64,
                end_s: i as f64 + 1.0,
                sent: 2_100,
                received: 2_000,
                e2e_ns: 400_000,
            },
            |iv| {
                iv.groups = vec![
                    GroupTick {
                        name: "gateways".into(),
                        sent: 2_000,
                        received: 2_000,
                        e2e_p50_ns: Some(400_000),
                        e2e_p99_ns: Some(1_200_000),
                        ..GroupTick::default()
                    },
                    GroupTick {
                        name: "devices".into(),
                        sent: 100,
                        connects: 50,
                        held: Some(1_000 + 50 * i),
                        errors: u64::from(i == 2),
                        ..GroupTick::default()
                    },
                ];
            },
        ));
    }
    let live = state_of(&r);
    let text = render_text(&live, &UiState::new(), W, 44);
    snapshot("groups.txt", &text);
    assert!(text.contains(" Groups (2) "), "{text}");
    let row = |name: &str| {
        text.lines()
            .find(|l| l.contains(name) && l.contains('│'))
            .unwrap_or_else(|| panic!("no row for {name}:\n{text}"))
            .to_string()
    };
    let gw = row("gateways");
    assert!(
        gw.contains("2000") && gw.contains("1.20ms") && gw.contains("6000"),
        "{gw}"
    );
    let dev = row("devices");
    assert!(
        dev.contains(" 1100 ") && dev.contains(" 300 "),
        "held 1100, 300 sent: {dev}"
    );
    assert!(
        dev.trim_end_matches('│').trim_end().ends_with('1'),
        "1 error: {dev}"
    );
}
