//! Verdicts: thresholds judged at the end (and during the run with --threshold-abort), the exit
//! codes CI reads, the `end` record's verdicts, JUnit XML and the JSON summary, and `report
//! --threshold` re-judging an old results file. Loss is injected with `mem://?drop_every=`;
//! latency comes from a real server that answers late (`serve http --delay`).

use crate::util;

use serde_json::Value;
use std::path::Path;
use util::*;

fn code(o: &std::process::Output) -> i32 {
    o.status.code().expect("exited, not killed")
}

/// The `end` record of a results file.
fn end_record(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    let last = text.lines().last().unwrap();
    let v: Value = serde_json::from_str(last).unwrap();
    assert_eq!(v["type"], "end");
    v
}

#[test]
fn thresholds_pass_and_fail_with_their_exit_codes() {
    let d = TempDir::new("verdicts");
    let base = [
        "run", "mem://", "-n", "2000", "--rate", "20k", "--warmup", "0s", "-q",
    ];
    // All pass: exit 0, verdicts in the end record, JUnit without failures.
    let mut ok = base.to_vec();
    ok.extend([
        "--threshold",
        "lost == 0",
        "--threshold",
        "completeness >= 99.99%",
        "--threshold",
        "e2e.p99 < 10s",
        "--threshold",
        "received >= 2000",
        "-o",
        "ok.jsonl",
        "--junit",
        "ok.xml",
        "--summary",
        "ok.json",
    ]);
    let o = msgbench(&d.0, &ok);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let end = end_record(&d.path("ok.jsonl"));
    let verdicts = end["thresholds"].as_array().unwrap();
    assert_eq!(verdicts.len(), 4);
    assert!(verdicts.iter().all(|v| v["pass"] == true), "{verdicts:?}");
    assert_eq!(verdicts[3]["actual"], 2000.0);
    assert!(
        stdout(&o).contains("all 4 thresholds passed"),
        "{}",
        stdout(&o)
    );
    let xml = std::fs::read_to_string(d.path("ok.xml")).unwrap();
    assert!(xml.contains("tests=\"4\" failures=\"0\""), "{xml}");
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(d.path("ok.json")).unwrap()).unwrap();
    assert_eq!(
        (
            &summary["verdict"],
            &summary["exit_code"],
            &summary["summary_version"]
        ),
        (&Value::from("pass"), &Value::from(0), &Value::from(1))
    );
    assert_eq!(summary["result"]["sent"], 2000);
    assert_eq!(summary["integrity"]["lost"], 0);

    // One fails: exit 3, the report and the JUnit say which and by how much.
    let mut bad = base.to_vec();
    bad.extend([
        "--threshold",
        "lost == 0",
        "--threshold",
        "e2e.p99 < 1ns",
        "-o",
        "bad.jsonl",
        "--junit",
        "bad.xml",
    ]);
    let o = msgbench(&d.0, &bad);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(stdout(&o).contains("FAIL  e2e.p99 < 1ns"), "{}", stdout(&o));
    assert!(stderr(&o).contains("verdict FAILED"), "{}", stderr(&o));
    let xml = std::fs::read_to_string(d.path("bad.xml")).unwrap();
    assert!(xml.contains("failures=\"1\""), "{xml}");
    assert!(xml.contains("<failure message=\"e2e.p99 &lt; 1ns failed: actual "));
    let end = end_record(&d.path("bad.jsonl"));
    assert_eq!(end["thresholds"][1]["pass"], false);

    // The old file judged by new thresholds: now it passes, and the other way round.
    let o = msgbench(
        &d.0,
        &["report", "bad.jsonl", "--threshold", "e2e.p99 < 10s"],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = msgbench(
        &d.0,
        &["report", "ok.jsonl", "--threshold", "received_per_s >= 1G"],
    );
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    // Without --threshold, `report` judges by the run's own.
    let o = msgbench(&d.0, &["report", "bad.jsonl", "--format", "json"]);
    assert_eq!(code(&o), 3);
    let r: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(r["thresholds"][1]["threshold"], "e2e.p99 < 1ns");
    // The verdicts are in the schema, and the report is a pure function of the file.
    let o = msgbench(&d.0, &["report", "ok.jsonl", "--format", "json"]);
    let r: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_valid_and_pure(&d.0, "ok.jsonl", &r);
}

#[test]
fn loss_without_thresholds_is_never_quiet() {
    let d = TempDir::new("verdicts-loss");
    // Everything lost: the verdict fails even without thresholds.
    let o = msgbench(
        &d.0,
        &[
            "run",
            "mem://?drop_every=1",
            "-n",
            "500",
            "--rate",
            "10k",
            "--warmup",
            "0s",
            "--drain",
            "1s",
            "--no-output",
            "-q",
        ],
    );
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("nothing was delivered"),
        "{}",
        stderr(&o)
    );
    // Some lost: exit 0 without thresholds, but a loud warning; with one, exit 3.
    let args = [
        "run",
        "mem://?drop_every=10",
        "-n",
        "500",
        "--rate",
        "10k",
        "--warmup",
        "0s",
        "--drain",
        "1s",
        "--no-output",
        "-q",
    ];
    let o = msgbench(&d.0, &args);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("LOST 50 of 500"), "{}", stdout(&o));
    assert!(stderr(&o).contains("WARNING: 50 of 500"), "{}", stderr(&o));
    let mut strict = args.to_vec();
    strict.extend(["--threshold", "lost == 0"]);
    let o = msgbench(&d.0, &strict);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("FAIL  lost == 0  actual 50"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn usage_errors_exit_2_and_name_what_was_expected() {
    let d = TempDir::new("verdicts-usage");
    for (args, says) in [
        (
            vec!["run", "mem://", "--threshold", "e2e.p99 < 10"],
            "a latency needs a unit",
        ),
        (
            vec!["run", "mem://", "--threshold", "speed > 1"],
            "unknown metric `speed`",
        ),
        (vec!["run", "nope://x"], "nope"),
        // A port out of range, wherever the driver would read it, and a password kept hidden.
        (
            vec!["run", "amqp10://u:pw@127.0.0.1:99999"],
            "`amqp10://u:***@127.0.0.1:99999`: `99999` is not a port number",
        ),
        (
            vec!["run", "nats://127.0.0.1:4222,127.0.0.1:42x"],
            "`42x` is not a port number",
        ),
        // What a driver cannot be built from (an option of its own in the URL).
        (vec!["run", "redis://127.0.0.1:6379/x"], "redis"),
        (
            vec!["report", "x.jsonl", "--threshold", "lost 0"],
            "expected METRIC OP VALUE",
        ),
    ] {
        let o = msgbench(&d.0, &args);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
    // Could not run: exit 1.
    let o = msgbench(
        &d.0,
        &[
            "run",
            "nats://127.0.0.1:1",
            "--no-output",
            "-q",
            "--connect-timeout",
            "1s",
        ],
    );
    assert_eq!(code(&o), 1, "{}", stderr(&o));
}

/// A scenario's `[thresholds]` table, validated with the file's other settings.
#[test]
fn scenario_thresholds_table() {
    let d = TempDir::new("verdicts-scenario");
    std::fs::write(
        d.path("s.toml"),
        r#"target = "mem://"
[producers]
rate = 20000
[phases]
warmup = "0s"
messages = 1000
[thresholds]
"e2e.p99" = "< 10s"
lost = "== 0"
received = [">= 1000", "<= 1000"]
"#,
    )
    .unwrap();
    let o = msgbench(&d.0, &["run", "s.toml", "-o", "s.jsonl", "-q"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let end = end_record(&d.path("s.jsonl"));
    let names: Vec<&str> = end["thresholds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["threshold"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "e2e.p99 < 10s",
            "lost == 0",
            "received >= 1000",
            "received <= 1000"
        ]
    );
    // The command line replaces them.
    let o = msgbench(
        &d.0,
        &[
            "run",
            "s.toml",
            "--no-output",
            "-q",
            "--threshold",
            "sent > 5000",
        ],
    );
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    std::fs::write(
        d.path("bad.toml"),
        "target = \"mem://\"\n[thresholds]\n\"e2e.p99\" = \"< ten\"\n",
    )
    .unwrap();
    let o = msgbench(&d.0, &["validate", "bad.toml"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("bad.toml: [thresholds]: threshold `e2e.p99 < ten`"),
        "{}",
        stderr(&o)
    );
}

/// A server that answers every request after 30 ms: `publish.p99 < 5ms` fails. With
/// --threshold-abort the run stops after its first measure interval instead of running its
/// 30 s, exits 3 (not 130), and still writes the report and the results file.
#[test]
fn latency_thresholds_against_a_slow_server_and_abort() {
    let s = Server::http_slow("30ms");
    let d = TempDir::new("verdicts-abort");
    let started = std::time::Instant::now();
    let o = msgbench(
        &d.0,
        &[
            "run",
            &s.url,
            "-p",
            "4",
            "--rate",
            "100",
            "--warmup",
            "0s",
            "--duration",
            "30s",
            "--threshold",
            "publish.p99 < 5ms",
            "--threshold-abort",
            "-o",
            "a.jsonl",
            "-q",
        ],
    );
    let took = started.elapsed();
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(took < std::time::Duration::from_secs(15), "{took:?}");
    assert!(
        stderr(&o).contains("threshold publish.p99 < 5ms failed"),
        "{}",
        stderr(&o)
    );
    let end = end_record(&d.path("a.jsonl"));
    assert_eq!(end["interrupted"], false);
    assert_eq!(end["thresholds"][0]["pass"], false);
    let actual = end["thresholds"][0]["actual"].as_f64().unwrap();
    assert!(actual >= 30e6, "publish p99 {actual} ns");
    let text = std::fs::read_to_string(d.path("a.jsonl")).unwrap();
    assert!(text.contains("\"kind\":\"threshold\""));
}

/// The generator's health is judged against its own threads: an unlimited run on one worker
/// thread saturates it (flagged per interval, with the share of the run that stays valid); a
/// slow paced run on the same thread does not.
#[test]
fn a_saturated_generator_is_flagged_against_its_own_threads() {
    let d = TempDir::new("verdicts-health");
    let common = ["--workers", "1", "--warmup", "0s", "--duration", "3s"];
    let mut hot = vec!["run", "mem://hot", "--size", "64"];
    hot.extend(common);
    let r = run_json(&d.0, &hot);
    let g = &r["generator"];
    assert_eq!(g["threads"], 1, "{g}");
    // On a quiet machine every interval is saturated; on a busy one the starved thread shows
    // as event-loop lag instead, in at least part of the run.
    assert!(u(&g["saturated_intervals"]) >= 1, "{g}");
    assert!(g["valid_share"].as_f64().unwrap() < 1.0, "{g}");
    let warned = r["warnings"].to_string();
    assert!(warned.contains("the generator was saturated"), "{warned}");
    let marked = r["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["saturated"] == true)
        .count();
    assert!(marked >= 1, "intervals marked: {marked}");
    // The event loops' lag is measured in every interval of a busy run (the probe wakes late
    // behind the producer's work), and reported as the worst of the measure phase.
    let lagged = r["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["loop_lag_ns"].as_u64().unwrap_or(0) > 0)
        .count();
    assert!(lagged >= 2, "intervals with a lag figure: {lagged}");
    assert!(u(&g["max_loop_lag_ns"]) > 0, "{g}");

    let mut cool = vec!["run", "mem://cool", "--rate", "1000"];
    cool.extend(common);
    let r = run_json(&d.0, &cool);
    let g = &r["generator"];
    assert_eq!(
        (u(&g["saturated_intervals"]), g["valid_share"].as_f64()),
        (0, Some(1.0)),
        "{g}"
    );
    assert!(!r["warnings"].to_string().contains("saturated"));
}

/// Every interval record carries the host's figures (CPU, memory, network, load), valid per
/// the schema; the JSON report keeps them per interval and the HTML report charts them.
#[test]
fn host_metrics_are_in_the_results_file() {
    let d = TempDir::new("verdicts-host");
    let nats = need!(NATS);
    let r = run_json(
        &d.0,
        &[
            "run",
            &nats,
            "--topic",
            "host.metrics",
            "--rate",
            "2000",
            "--size",
            "1KiB",
            "--warmup",
            "0s",
            "--duration",
            "3s",
            "-o",
            "h.jsonl",
        ],
    );
    assert_valid_and_pure(&d.0, "h.jsonl", &r);
    let text = std::fs::read_to_string(d.path("h.jsonl")).unwrap();
    let intervals: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["type"] == "interval")
        .collect();
    assert!(intervals.len() >= 3);
    for iv in &intervals {
        let h = &iv["host"];
        assert!(u(&h["mem_total_bytes"]) > 0, "{iv}");
        assert!(u(&h["mem_used_bytes"]) > 0, "{iv}");
        let busy = h["cpu_busy"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&busy), "{h}");
    }
    // 2,000 KiB-messages a second through NATS over loopback: over a full measure second the
    // host moved at least those bytes each way.
    let full = intervals
        .iter()
        .find(|iv| {
            iv["phase"] == "measure"
                && iv["end_s"].as_f64().unwrap() - iv["start_s"].as_f64().unwrap() > 0.9
        })
        .expect("a full measure interval");
    assert!(
        u(&full["host"]["net_rx_bytes"]) >= 2_000_000,
        "{}",
        full["host"]
    );
    assert!(u(&full["host"]["net_tx_packets"]) > 0, "{}", full["host"]);
    let rows = r["intervals"].as_array().unwrap();
    assert!(
        rows.iter()
            .all(|row| row["host"]["mem_total_bytes"].as_u64() > Some(0))
    );
    let o = msgbench(
        &d.0,
        &["report", "h.jsonl", "--format", "html", "-o", "h.html"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let html = std::fs::read_to_string(d.path("h.html")).unwrap();
    assert!(
        html.contains("\"host\":{\"cpu_pct\":["),
        "the chart data carries the host series"
    );
}

/// Latency injected by the in-process broker (`mem://?delay=`) is what the thresholds see:
/// every delivery at least 20 ms after its intended send time.
#[test]
fn injected_latency_is_judged() {
    let d = TempDir::new("verdicts-delay");
    let o = msgbench(
        &d.0,
        &[
            "run",
            "mem://delayed?delay=20ms",
            "-n",
            "500",
            "--rate",
            "1000",
            "--warmup",
            "0s",
            "-q",
            "--no-output",
            "--threshold",
            "e2e.p50 >= 20ms",
            "--threshold",
            "e2e.p99 < 5ms",
        ],
    );
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("pass  e2e.p50 >= 20ms"), "{out}");
    assert!(out.contains("FAIL  e2e.p99 < 5ms"), "{out}");
}

/// A drain that times out while deliveries are still arriving says so: what it counts lost
/// may only be late (here a consumer that takes 2 ms a message, 3,000 messages, a 1 s drain).
#[test]
fn a_drain_timed_out_with_deliveries_still_arriving_says_they_may_only_be_late() {
    let d = TempDir::new("drain-late");
    let o = msgbench(
        &d.0,
        &[
            "run",
            "mem://drain-late",
            "-n",
            "3000",
            "--processing",
            "2ms",
            "--warmup",
            "0s",
            "--drain",
            "1s",
            "--no-output",
            "--quiet",
            "--format",
            "json",
        ],
    );
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("a JSON report");
    assert!(u(&r["integrity"]["lost"]) > 0, "{}", r["integrity"]);
    let w = r["warnings"].to_string();
    assert!(
        w.contains("still arriving") && w.contains("longer --drain"),
        "{w}"
    );
}

/// A count-bounded measure phase ends whenever its last message goes: here just past the tick
/// at 3 s (the 4,001st message is due at 3.000 s), within that tick's grace. The interval the
/// tick closed keeps its second of CPU, and the sliver of the phase past it gets next to none
/// and is not judged. The whole second's CPU had been credited to the sliver: the interval
/// before it looked idle, the sliver 150–290 times saturated, and the report said a third of
/// the measure phase was invalid (found on every `-n` run against Artemis, Kafka and
/// msgbench's own broker).
#[test]
fn a_phase_ending_past_a_tick_keeps_its_cpu_in_its_intervals() {
    let d = TempDir::new("verdicts-sliver");
    let o = msgbench(
        &d.0,
        &[
            "run", "mem://", "-n", "4001", "--rate", "2000", "--warmup", "1s", "-o", "r.jsonl",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = std::fs::read_to_string(d.path("r.jsonl")).unwrap();
    let measure: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["type"] == "interval" && r["phase"] == "measure")
        .collect();
    let span = |r: &Value| r["end_s"].as_f64().unwrap() - r["start_s"].as_f64().unwrap();
    let cpu = |r: &Value| r["cpu_s"].as_f64().unwrap();
    let (whole, slivers): (Vec<&Value>, Vec<&Value>) = measure.iter().partition(|r| span(r) > 0.9);
    assert_eq!((whole.len(), slivers.len()), (2, 1), "{measure:?}");
    // 2,000 messages a second take some milliseconds of CPU, whatever else the machine runs.
    for r in whole {
        assert!(cpu(r) >= 0.01, "an interval that sent 2,000 messages: {r}");
    }
    assert!(span(slivers[0]) < 0.05, "{}", slivers[0]);
    assert!(cpu(slivers[0]) < 0.01, "the sliver: {}", slivers[0]);
    let report = String::from_utf8_lossy(&o.stdout);
    assert!(!report.contains("saturated"), "{report}");
}
