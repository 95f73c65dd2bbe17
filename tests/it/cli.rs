//! Binary-level tests of `msgbench` against the in-process `mem://` broker: results file,
//! reports, integrity accounting, errors, Ctrl-C.

use crate::util;

use std::io::Write;
use util::*;

/// A paced mem:// run writes a results file whose every line satisfies the schema, and
/// `msgbench report` re-renders exactly the report the run printed (reports are a pure function
/// of the results file).
#[test]
fn results_file_is_valid_and_reports_are_pure() {
    let d = TempDir::new("results");
    let report = run_json(
        &d.0,
        &[
            "run",
            "mem://results",
            "--messages",
            "20000",
            "--warmup",
            "200ms",
            "--rate",
            "40000",
            "-o",
            "r.jsonl",
        ],
    );
    let m = measure(&report);
    assert_eq!(u(&m["counters"]["sent"]), 20000);
    assert_eq!(u(&report["integrity"]["lost"]), 0);
    assert!(u(&report["integrity"]["delivered"]) >= 20000);
    assert_eq!(u(&m["e2e"]["count"]), u(&m["counters"]["received"]));
    assert!(u(&m["e2e"]["p50"]) > 0, "latencies are recorded");

    let text = std::fs::read_to_string(d.path("r.jsonl")).unwrap();
    let schema: serde_json::Value = serde_json::from_str(msgbench_schema()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let mut kinds = vec![];
    for (i, line) in text.lines().enumerate() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
        assert!(
            errors.is_empty(),
            "line {} violates the schema: {errors:?}\n{line}",
            i + 1
        );
        kinds.push(v["type"].as_str().unwrap().to_string());
    }
    assert_eq!(kinds.first().map(String::as_str), Some("begin"));
    assert_eq!(kinds.last().map(String::as_str), Some("end"));
    assert!(kinds.iter().any(|k| k == "interval"));

    let again = msgbench(&d.0, &["report", "r.jsonl", "--format", "json"]);
    assert!(again.status.success(), "{}", stderr(&again));
    let again: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(
        again, report,
        "report re-rendered from the file differs from the run's report"
    );

    let csv = stdout(&msgbench(&d.0, &["report", "r.jsonl", "--format", "csv"]));
    assert!(csv.starts_with("index,phase,start_s"));
    assert!(csv.lines().count() >= 2);
    let txt = stdout(&msgbench(&d.0, &["report", "r.jsonl"]));
    assert!(
        txt.contains("end-to-end") && txt.contains("p99.9") && txt.contains("lost 0"),
        "{txt}"
    );
}

fn msgbench_schema() -> &'static str {
    include_str!("../../crates/report/schema/results.schema.json")
}

/// Injected loss, duplication, reordering and foreign payloads are counted exactly.
///
/// Over 10,000 messages of one producer the mem driver (counting messages from 1):
/// - drops every 100th: 100 lost (the 10,000th is a tail loss, invisible as a gap but counted
///   by expected-versus-delivered);
/// - holds back every 50th that is not dropped and delivers it after the next: 100 reordered;
/// - duplicates every 77th that was neither dropped nor held (3,850 is held, 7,700 dropped):
///   129 - 2 = 127 duplicates;
/// - adds a foreign payload after every 333rd (none of which is dropped or held): 30 foreign.
#[test]
fn integrity_faults_are_counted_exactly() {
    let d = TempDir::new("faults");
    let url = "mem://faults?drop_every=100&reorder_every=50&dup_every=77&foreign_every=333";
    let report = run_json(
        &d.0,
        &[
            "run",
            url,
            "--messages",
            "10000",
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    let i = &report["integrity"];
    assert_eq!(u(&i["expected"]), 10_000);
    assert_eq!(u(&i["delivered"]), 9_900);
    assert_eq!(u(&i["lost"]), 100);
    assert_eq!(u(&i["duplicated"]), 127);
    assert_eq!(u(&i["reordered"]), 100);
    assert_eq!(u(&i["foreign"]), 30);
    let total_received: u64 = report["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| u(&p["counters"]["received"]))
        .sum();
    assert_eq!(total_received, 9_900 + 127);
}

/// In a queue group a duplicate usually reaches another member than the original did (the
/// in-process broker deals them round-robin; a broker redelivers after a restart): the members
/// share what they have seen, so it counts as a duplicate, not as one more distinct delivery.
#[test]
fn duplicates_across_queue_group_members_are_counted() {
    let d = TempDir::new("group-dups");
    let r = run_json(
        &d.0,
        &[
            "run",
            "mem://g?dup_every=10",
            "--queue-group",
            "w",
            "-c",
            "3",
            "-n",
            "10000",
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    let i = &r["integrity"];
    assert_eq!(
        (
            u(&i["expected"]),
            u(&i["delivered"]),
            u(&i["lost"]),
            u(&i["duplicated"])
        ),
        (10_000, 10_000, 0, 1_000),
        "{i}"
    );
}

/// Hundreds of consumers share a recorder per worker thread (started automatically past 256
/// consumers): every delivery is still counted and its latency recorded exactly once.
#[test]
fn many_consumers_share_recorders_without_losing_a_count() {
    let d = TempDir::new("many-consumers");
    let r = run_json(
        &d.0,
        &[
            "run",
            "mem://",
            "-c",
            "300",
            "--rate",
            "2000",
            "-n",
            "2000",
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    let m = measure(&r);
    let i = &r["integrity"];
    assert_eq!(
        (u(&i["expected"]), u(&i["delivered"]), u(&i["lost"])),
        (600_000, 600_000, 0),
        "{i}"
    );
    assert_eq!(u(&m["e2e"]["count"]), 600_000);
    assert_eq!(u(&m["counters"]["received"]), 600_000);
}

/// Fan-out: every consumer gets every message; queue groups: each message once.
#[test]
fn fanout_and_queue_groups_on_mem() {
    let d = TempDir::new("fanout");
    let r = run_json(
        &d.0,
        &[
            "run",
            "mem://fan",
            "-c",
            "3",
            "--messages",
            "6000",
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    assert_eq!(u(&r["integrity"]["expected"]), 18_000);
    assert_eq!(u(&r["integrity"]["delivered"]), 18_000);
    let r = run_json(
        &d.0,
        &[
            "run",
            "mem://queue",
            "-c",
            "3",
            "--queue-group",
            "--messages",
            "6000",
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    assert_eq!(u(&r["integrity"]["expected"]), 6_000);
    assert_eq!(u(&r["integrity"]["delivered"]), 6_000);
    assert_eq!(u(&r["integrity"]["duplicated"]), 0);
}

/// Topic patterns expand, each topic has its own producers and consumers.
#[test]
fn topic_patterns() {
    let d = TempDir::new("topics");
    let r = run_json(
        &d.0,
        &[
            "run",
            "mem://topics",
            "--topics",
            "4",
            "--topic",
            "t.{i}",
            "-p",
            "2",
            "-c",
            "2",
            "--messages",
            "8000",
            "--warmup",
            "0s",
            "-o",
            "t.jsonl",
        ],
    );
    assert_eq!(u(&r["integrity"]["expected"]), 16_000);
    assert_eq!(u(&r["integrity"]["delivered"]), 16_000);
    let begin = std::fs::read_to_string(d.path("t.jsonl")).unwrap();
    assert!(begin.lines().next().unwrap().contains("\"t.3\""));
}

/// Request/reply: each request is acknowledged by its reply; publish latency is the round trip.
#[test]
fn request_reply_on_mem() {
    let d = TempDir::new("rr");
    let r = run_json(
        &d.0,
        &[
            "run",
            "mem://rr",
            "--request-reply",
            "--max-in-flight",
            "16",
            "--messages",
            "5000",
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    let m = measure(&r);
    assert_eq!(u(&m["counters"]["acked"]), 5000);
    assert_eq!(u(&m["publish"]["count"]), 5000);
    assert_eq!(u(&r["integrity"]["lost"]), 0);
}

/// A constant rate is kept: the count sent matches rate × duration.
#[test]
fn constant_rate_is_kept() {
    let d = TempDir::new("rate");
    let r = run_json(
        &d.0,
        &[
            "run",
            "mem://rate",
            "--rate",
            "2000",
            "--duration",
            "2s",
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    let sent = u(&measure(&r)["counters"]["sent"]);
    assert!(
        (3800..=4100).contains(&sent),
        "sent {sent}, expected about 4000"
    );
}

/// A bad scenario file is reported with file, line, column and what was expected.
#[test]
fn malformed_scenarios_point_at_the_problem() {
    let d = TempDir::new("scenario");
    std::fs::File::create(d.path("bad.toml"))
        .unwrap()
        .write_all(b"name = \"x\"\n[producers]\nper_topik = 2\n")
        .unwrap();
    let o = msgbench(&d.0, &["validate", "bad.toml"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("bad.toml:3:1:")
            && e.contains("unknown field `per_topik`")
            && e.contains("per_topic"),
        "{e}"
    );
    let o = msgbench(&d.0, &["run", "bad.toml"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("bad.toml:3:1:"));

    std::fs::write(
        d.path("bad2.toml"),
        "[phases]\nduration = \"ten seconds\"\n",
    )
    .unwrap();
    let e = stderr(&msgbench(&d.0, &["validate", "bad2.toml"]));
    assert!(
        e.contains("phases.duration") && e.contains("ten seconds"),
        "{e}"
    );
}

/// Every example scenario shipped in scenarios/ validates.
#[test]
fn shipped_scenarios_validate() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .map(|p| p.display().to_string())
        .collect();
    assert!(!files.is_empty());
    let mut args = vec!["validate"];
    args.extend(files.iter().map(String::as_str));
    let o = msgbench(&dir, &args);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
}

/// Unreachable brokers and bad URLs fail fast with a clear message; credentials never leak.
#[test]
fn bad_targets_fail_clearly() {
    let d = TempDir::new("bad");
    let o = msgbench(
        &d.0,
        &[
            "run",
            "nats://bob:hunter2@127.0.0.1:1",
            "--duration",
            "1s",
            "-o",
            "x.jsonl",
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("cannot connect to nats://bob:***@127.0.0.1:1"),
        "{e}"
    );
    assert!(!e.contains("hunter2"));
    let file = std::fs::read_to_string(d.path("x.jsonl")).unwrap();
    assert!(
        !file.contains("hunter2"),
        "credentials written to the results file"
    );
    assert!(file.contains("\"error\""));

    let e = stderr(&msgbench(&d.0, &["run", "localhost:4222"]));
    assert!(e.contains("neither a target URL"), "{e}");
    let e = stderr(&msgbench(&d.0, &["run", "pulsar://x:1"]));
    assert!(e.contains("no driver for `pulsar://`"), "{e}");
    let e = stderr(&msgbench(&d.0, &["run", "mem://", "--size", "10"]));
    assert!(e.contains("40-byte stamp"), "{e}");
}

/// Ctrl-C ends the run early but still prints the report and completes the results file.
#[test]
fn ctrl_c_still_reports() {
    let d = TempDir::new("sigint");
    let child = std::process::Command::new(bin())
        .args([
            "run",
            "mem://sigint",
            "--rate",
            "10000",
            "--duration",
            "60s",
            "-o",
            "s.jsonl",
            "--quiet",
        ])
        .current_dir(&d.0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2500));
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert!(stdout(&o).contains("INTERRUPTED"), "{}", stdout(&o));
    let file = std::fs::read_to_string(d.path("s.jsonl")).unwrap();
    let last: serde_json::Value = serde_json::from_str(file.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "end");
    assert_eq!(last["interrupted"], true);
    assert_eq!(last["integrity"]["lost"], 0);
}

/// A killed run (no `end` record, a torn last line) can still be reported.
#[test]
fn killed_run_is_still_reportable() {
    let d = TempDir::new("killed");
    run_json(
        &d.0,
        &[
            "run",
            "mem://killed",
            "--messages",
            "5000",
            "--warmup",
            "0s",
            "-o",
            "k.jsonl",
        ],
    );
    let text = std::fs::read_to_string(d.path("k.jsonl")).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.pop(); // the end record
    let torn = format!("{}\n{{\"type\":\"interval\",\"ind", lines.join("\n"));
    std::fs::write(d.path("torn.jsonl"), torn).unwrap();
    let o = msgbench(&d.0, &["report", "torn.jsonl"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("INCOMPLETE"));
    std::fs::write(d.path("junk.jsonl"), "{\"type\":\"begin\"}\nnot json\n{}\n").unwrap();
    let o = msgbench(&d.0, &["report", "junk.jsonl"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("line 1"), "{}", stderr(&o));
}

/// Every subcommand's help shows examples; `drivers` lists what this build speaks.
#[test]
fn help_and_drivers() {
    let d = TempDir::new("help");
    for sub in ["run", "validate", "report", "drivers"] {
        let o = msgbench(&d.0, &[sub, "--help"]);
        assert!(o.status.success());
        assert!(
            stdout(&o).contains("Examples:"),
            "{sub} --help has no examples"
        );
    }
    let o = stdout(&msgbench(&d.0, &["drivers"]));
    assert!(o.contains("nats://") && o.contains("mem://") && o.contains("nats+js://"));
}

/// The no-argument demo runs the embedded broker and says so.
#[test]
fn demo_without_target() {
    let d = TempDir::new("demo");
    let o = msgbench(
        &d.0,
        &["run", "--duration", "1s", "--warmup", "0s", "--no-output"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("no target given"));
    assert!(stdout(&o).contains("end-to-end"));
}

/// The `interval` records of a results file, in order.
fn interval_records(file: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["type"] == "interval")
        .collect()
}

/// An ack that comes back after a phase boundary, for a message sent before it, is counted in
/// the phase the message was sent in and in that phase's last interval: no interval record of
/// its own (before, each boundary left a 1 ms sliver of the old phase in the next second, a
/// second live row for the same time).
#[test]
fn acks_across_a_phase_boundary_close_in_the_phase_they_belong_to() {
    let d = TempDir::new("boundary");
    let file = d.path("r.jsonl");
    // Every round trip takes 30 ms, so each boundary falls while one is outstanding.
    let report = run_json(
        &d.0,
        &[
            "run",
            "mem://?delay=30ms",
            "--request-reply",
            "-p",
            "1",
            "-c",
            "1",
            "--max-in-flight",
            "1",
            "--warmup",
            "1s",
            "--duration",
            "2s",
            "--tick",
            "1s",
            "-o",
            file.to_str().unwrap(),
        ],
    );
    let intervals = interval_records(&file);
    let seen: Vec<(u64, String)> = intervals
        .iter()
        .map(|v| (u(&v["index"]), v["phase"].as_str().unwrap().to_string()))
        .collect();
    for (i, v) in intervals.iter().enumerate() {
        let span = v["end_s"].as_f64().unwrap() - v["start_s"].as_f64().unwrap();
        let last = i + 1 == intervals.len();
        assert!(
            span > 0.5 || (last && v["phase"] == "drain"),
            "interval {} of the {} phase spans only {span} s: {seen:?}",
            v["index"],
            v["phase"]
        );
    }
    // Every round trip answered before the drain ended, and counted once.
    let m = measure(&report);
    assert_eq!(u(&m["counters"]["acked"]), u(&m["counters"]["sent"]));
}

/// Every second of the run has its interval record, the drain's last included: a drain that
/// runs to its deadline (nothing more arrives) ends just after a tick, before that tick's
/// grace, and its last full second used to have no record at all.
#[test]
fn a_drain_that_times_out_keeps_its_last_interval() {
    let d = TempDir::new("drain-last");
    let file = d.path("r.jsonl");
    let o = msgbench(
        &d.0,
        &[
            "run",
            "mem://?drop_every=1",
            "--rate",
            "100",
            "--duration",
            "2s",
            "--warmup",
            "0s",
            "--drain",
            "1s",
            "--tick",
            "1s",
            "-q",
            "-o",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(3), "all lost: {}", stderr(&o));
    let seen: Vec<(u64, String)> = interval_records(&file)
        .iter()
        .map(|v| (u(&v["index"]), v["phase"].as_str().unwrap().to_string()))
        .collect();
    let indexes: Vec<u64> = seen.iter().map(|(i, _)| *i).collect();
    assert_eq!(&indexes[..3], [0, 1, 2], "{seen:?}");
    assert_eq!(seen[2].1, "drain", "{seen:?}");
}
