//! Reports rendered from a recorded results file: the schema holds for every line, and the text
//! and CSV renderings match golden files (`UPDATE_GOLDEN=1 cargo test -p msgbench-report`
//! rewrites them after an intended change).

use msgbench_report::{Format, RESULTS_SCHEMA, RunReport, read_records, render};
use std::path::Path;

const FIXTURE: &str = "tests/fixtures/run.jsonl";

fn fixture() -> RunReport {
    let f = std::fs::File::open(FIXTURE).unwrap();
    RunReport::from_records(&read_records(std::io::BufReader::new(f)).unwrap()).unwrap()
}

/// The text report of `r`.
fn shown(r: &RunReport) -> String {
    let mut out = Vec::new();
    render(r, Format::Text, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

fn golden(name: &str, actual: &str) {
    let path = Path::new("tests/golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "{} is missing: run with UPDATE_GOLDEN=1 to create it",
            path.display()
        )
    });
    assert_eq!(
        actual,
        expected,
        "{} differs (UPDATE_GOLDEN=1 to accept)",
        path.display()
    );
}

#[test]
fn every_line_satisfies_the_schema() {
    let schema: serde_json::Value = serde_json::from_str(RESULTS_SCHEMA).unwrap();
    let v = jsonschema::validator_for(&schema).unwrap();
    let text = std::fs::read_to_string(FIXTURE).unwrap();
    for (i, line) in text.lines().enumerate() {
        let json: serde_json::Value = serde_json::from_str(line).unwrap();
        let errors: Vec<String> = v.iter_errors(&json).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "line {}: {errors:?}", i + 1);
    }
    // And the schema is not vacuous: a line with a wrong type or a missing field fails.
    for bad in [
        r#"{"type":"interval","index":0}"#,
        r#"{"type":"begin","version":1}"#,
        r#"{"type":"nonsense"}"#,
        r#"{"type":"event","at_s":1,"kind":"x","detail":"y","extra":1}"#,
    ] {
        let json: serde_json::Value = serde_json::from_str(bad).unwrap();
        assert!(!v.is_valid(&json), "schema accepted {bad}");
    }
}

#[test]
fn text_report_matches_golden() {
    let mut out = Vec::new();
    render(&fixture(), Format::Text, &mut out).unwrap();
    golden("run.txt", &String::from_utf8(out).unwrap());
}

#[test]
fn csv_report_matches_golden() {
    let mut out = Vec::new();
    render(&fixture(), Format::Csv, &mut out).unwrap();
    golden("run.csv", &String::from_utf8(out).unwrap());
}

#[test]
fn summary_is_the_merge_of_intervals() {
    let r = fixture();
    let measure = r.measure().unwrap();
    let from_rows: u64 = r
        .intervals
        .iter()
        .filter(|i| i.phase == msgbench_metrics::Phase::Measure)
        .map(|i| i.counters.sent)
        .sum();
    assert_eq!(measure.counters.sent, from_rows);
    assert!(
        measure.e2e.count > 0
            && measure.e2e.p50 <= measure.e2e.p99
            && measure.e2e.p99 <= measure.e2e.max
    );
    assert_eq!(r.integrity.lost, 0);
    assert!(r.complete);
}

/// The kernel's TCP counters appear in the text and HTML reports, per message moved.
#[test]
fn tcp_counters_are_reported_per_message() {
    let mut r = fixture();
    assert!(r.tcp.is_none(), "an in-memory run has no sockets");
    // The fixture moved 4,999 + 10,001 messages out and 9,998 + 20,002 in: 45,000.
    r.tcp = Some(msgbench_metrics::TcpSummary {
        connections: 3,
        segs_out: 30_000,
        segs_in: 45_000,
        data_segs_out: 21_000,
        data_segs_in: 44_990,
        retransmitted: 2,
        batched: 0,
    });
    let mut out = Vec::new();
    render(&r, Format::Text, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    for line in [
        "tcp (3 connections, as the kernel counted them)",
        "  segments in 45000  out 30000 (9000 of them without data: ACKs, SYN, FIN)  retransmitted 2",
        "  per message sent or received: 1.00 segments in, 0.67 out, 0.20 out without data",
        "  segments were retransmitted",
    ] {
        assert!(text.contains(line), "{line:?} missing from\n{text}");
    }
    let mut out = Vec::new();
    render(&r, Format::Html, &mut out).unwrap();
    let page = String::from_utf8(out).unwrap();
    assert!(
        page.contains("<h3>tcp (3 connections, as the kernel counted them)</h3>"),
        "{page}"
    );
    assert!(page.contains("<p>per message sent or received: 1.00"));
}

/// The text report says why things failed, not only how many: error, warning and lost
/// connection events, alike ones (differing in numbers) once with their count, a few kinds.
#[test]
fn text_report_shows_the_events_that_explain_the_counts() {
    use msgbench_metrics::EventKind;
    use msgbench_report::EventRecord;
    let mut r = fixture();
    let ev = |at_s: f64, kind: EventKind, detail: &str| EventRecord {
        at_s,
        kind,
        detail: detail.into(),
    };
    for i in 0..3 {
        r.events.push(ev(
            1.5 + i as f64,
            EventKind::Error,
            &format!("amqp10 producer {i}: rejected: amqp:resource-limit-exceeded"),
        ));
    }
    r.events.push(ev(
        2.0,
        EventKind::Disconnected,
        "consumer 0: closed: code 1009 (message too big)",
    ));
    r.events
        .push(ev(2.1, EventKind::Reconnected, "consumer 0: reconnected"));
    let text = shown(&r);
    let block = text.split_once("events (").expect("an events block").1;
    assert!(
        block.contains("error ×3: amqp10 producer 0: rejected: amqp:resource-limit-exceeded"),
        "{block}"
    );
    assert!(
        block.contains("disconnected: consumer 0: closed: code 1009 (message too big)"),
        "{block}"
    );
    assert!(!block.contains("reconnected"), "{block}");
    for i in 0..10 {
        r.events.push(ev(
            3.0,
            EventKind::Warning,
            &format!("kind {}", "x".repeat(i)),
        ));
    }
    let text = shown(&r);
    assert!(text.contains("… and 6 other kinds"), "{text}");
    // A report without such events has no block (the golden file holds one).
    assert!(!shown(&fixture()).contains("events ("));
}

/// Fan-out whose consumers each got a share instead of every message (a broker taking the
/// address for a queue) is said to look like that, not left as loss alone.
#[test]
fn fan_out_that_reached_one_consumer_per_message_is_named() {
    let mut r = fixture();
    r.begin.plan["consumers_per_topic"] = 2.into();
    r.begin.plan["subscription"] = serde_json::json!({ "mode": "fanout" });
    r.begin.plan["subscribe"] = serde_json::Value::Null;
    (
        r.integrity.expected,
        r.integrity.delivered,
        r.integrity.lost,
    ) = (2000, 1010, 990);
    r.integrity.duplicated = 0;
    let text = shown(&r);
    assert!(text.contains("LOST 990 of 2000"), "{text}");
    assert!(
        text.contains("each message reached about one of the 2 consumers"),
        "{text}"
    );
    // Loss that is not a clean half is not called that.
    (r.integrity.delivered, r.integrity.lost) = (1500, 500);
    assert!(!shown(&r).contains("about one of the"));
    r.begin.plan["subscription"] = serde_json::json!({ "mode": "queue", "group": "g" });
    (r.integrity.delivered, r.integrity.lost) = (1010, 990);
    assert!(!shown(&r).contains("about one of the"));
}

/// Loss in a run where clients reconnected is not put on the system under test alone: a
/// subscriber that was away may have missed what was published meanwhile.
#[test]
fn loss_with_reconnections_names_the_outage_as_a_possible_cause() {
    let mut r = fixture();
    r.integrity.lost = 7;
    let text = shown(&r);
    assert!(text.contains("LOST 7 of"), "{text}");
    assert!(!text.contains("reconnected"), "{text}");
    r.phases[0].counters.reconnects = 2;
    let text = shown(&r);
    assert!(
        text.contains("but clients reconnected 2 times: a subscriber away"),
        "{text}"
    );
}

/// A results file in which a count-bounded measure phase ended 0.3 ms past a tick and the
/// runner of the time credited the interval's whole second of CPU to that sliver (290 times
/// one thread's time): the sliver is not judged, so the generator is not called saturated and
/// the two whole intervals are the measure phase's. It had said "1 of 3 measure intervals"
/// saturated and a third of the phase invalid.
#[test]
fn a_sliver_of_a_phase_is_not_judged() {
    let f = std::fs::File::open("tests/fixtures/sliver.jsonl").unwrap();
    let r = RunReport::from_records(&read_records(std::io::BufReader::new(f)).unwrap()).unwrap();
    let g = r.generator.as_ref().expect("the generator's health");
    assert_eq!(
        (g.saturated_intervals, g.measure_intervals),
        (0, 2),
        "{g:?}"
    );
    let mut out = Vec::new();
    render(&r, Format::Text, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(!text.contains("saturated"), "{text}");
}
