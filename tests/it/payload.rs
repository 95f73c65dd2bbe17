//! Message bodies a system in the middle can read: text stamps, payload templates (JSON with
//! the stamp inside), their errors, and settings taken from `MSGBENCH_*` variables. Against the
//! in-process `mem://` broker (what is relayed through real gateways is in tests/it/ws_gateway.rs).

use crate::util;

use std::process::Command;
use util::*;

const JSON: &str = r#"{"market":"btcusd","id":"{{stamp}}","seq":{{seq}},"p":{{producer}},"t":{{time}},"pad":"{{pad}}"}"#;

/// A JSON template and a plain text stamp: every message delivered and matched, none foreign,
/// sizes as asked; the plan in the results file keeps the template.
#[test]
fn templates_and_text_stamps_deliver_exactly() {
    let d = TempDir::new("payload-json");
    let r = run_json(
        &d.0,
        &[
            "run",
            "mem://json",
            "-p",
            "2",
            "-c",
            "2",
            "-n",
            "4000",
            "--size",
            "1KiB",
            "--payload",
            JSON,
            "--warmup",
            "0s",
            "-o",
            "r.jsonl",
        ],
    );
    let i = &r["integrity"];
    assert_eq!(
        (u(&i["delivered"]), u(&i["lost"]), u(&i["foreign"])),
        (8000, 0, 0),
        "{i}"
    );
    let m = measure(&r);
    assert_eq!(u(&m["counters"]["sent_bytes"]), 4000 * 1024);
    assert!(u(&m["e2e"]["p50"]) > 0);
    assert_valid_and_pure(&d.0, "r.jsonl", &r);
    let begin = std::fs::read_to_string(d.path("r.jsonl")).unwrap();
    let begin: serde_json::Value = serde_json::from_str(begin.lines().next().unwrap()).unwrap();
    assert_eq!(begin["plan"]["payload"]["template"], JSON);
    assert_eq!(begin["plan"]["payload"]["stamp"], "text");

    // The template from a file (@FILE), and a text stamp with printable filler.
    std::fs::write(d.path("t.json"), JSON).unwrap();
    let file = format!("@{}", d.path("t.json").display());
    for extra in [&["--payload", file.as_str()][..], &["--stamp", "text"]] {
        let mut args = vec![
            "run",
            "mem://text",
            "-n",
            "1000",
            "--size",
            "200..400",
            "--warmup",
            "0s",
            "--no-output",
        ];
        args.extend_from_slice(extra);
        let r = run_json(&d.0, &args);
        let i = &r["integrity"];
        assert_eq!(
            (u(&i["delivered"]), u(&i["foreign"])),
            (1000, 0),
            "{extra:?} {i}"
        );
    }
}

/// Bad templates are refused before anything runs, saying where and what was expected.
#[test]
fn bad_templates_are_clear_errors() {
    let d = TempDir::new("payload-bad");
    let cases: [(&[&str], &str); 5] = [
        (
            &["--payload", "{\"a\":\n \"{{stmap}}\"}"],
            "line 2, column 3: unknown placeholder `{{stmap}}`",
        ),
        (&["--payload", "{\"a\":1}"], "no `{{stamp}}`"),
        (&["--payload", JSON, "--size", "64"], "needs at least"),
        (&["--payload", JSON, "--stamp", "binary"], "text stamp"),
        (
            &["--payload", "@/nonexistent/t.json"],
            "cannot read the payload template",
        ),
    ];
    for (extra, want) in cases {
        let mut args = vec!["run", "mem://bad", "-n", "10", "--no-output"];
        args.extend_from_slice(extra);
        let o = msgbench(&d.0, &args);
        // A template that cannot be used is the user's to fix: a usage error.
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", stdout(&o));
        assert!(stderr(&o).contains(want), "{extra:?}: {}", stderr(&o));
    }
}

/// Every `run` option can come from a `MSGBENCH_*` variable (switches as 1/true/yes); the
/// command line wins for the same option; `run --help` names the variables.
#[test]
fn run_options_from_the_environment() {
    let d = TempDir::new("payload-env");
    let o = Command::new(bin())
        .args(["run", "mem://env", "--format", "json"])
        .current_dir(&d.0)
        .env("MSGBENCH_RESULTS_DB", d.path("runs.db"))
        .env("MSGBENCH_MESSAGES", "3000")
        .env("MSGBENCH_PRODUCERS", "3")
        .env("MSGBENCH_WARMUP", "0s")
        .env("MSGBENCH_PAYLOAD", JSON)
        .env("MSGBENCH_SIZE", "512")
        .env("MSGBENCH_NO_OUTPUT", "1")
        .env("MSGBENCH_QUIET", "yes")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).is_empty(),
        "--quiet from the environment: {}",
        stderr(&o)
    );
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let m = measure(&r);
    assert_eq!(u(&m["counters"]["sent"]), 3000);
    assert_eq!(u(&m["counters"]["sent_bytes"]), 3000 * 512);
    assert_eq!(u(&r["integrity"]["foreign"]), 0);
    assert!(
        std::fs::read_dir(&d.0)
            .unwrap()
            .all(|e| { !e.unwrap().file_name().to_string_lossy().ends_with(".jsonl") })
    );
    // The command line wins.
    let o = Command::new(bin())
        .args([
            "run",
            "mem://env",
            "-n",
            "100",
            "--warmup",
            "0s",
            "--no-output",
        ])
        .args(["--format", "json", "-q"])
        .current_dir(&d.0)
        .env("MSGBENCH_RESULTS_DB", d.path("runs.db"))
        .env("MSGBENCH_MESSAGES", "3000")
        .output()
        .unwrap();
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(u(&measure(&r)["counters"]["sent"]), 100);
    let help = msgbench(&d.0, &["run", "--help"]);
    let help = stdout(&help);
    for var in [
        "MSGBENCH_TARGET",
        "MSGBENCH_CONNECT_RATE",
        "MSGBENCH_PAYLOAD",
    ] {
        assert!(help.contains(var), "{var} missing from run --help");
    }
}

/// Size distributions: an empirical table from a file draws by weight, a log-normal one has its
/// mean; both deliver exactly, and the plan records the distribution.
#[test]
fn size_distributions_send_the_sizes_asked() {
    let d = TempDir::new("payload-sizes");
    std::fs::write(d.path("sizes.txt"), "# observed\n100 3\n1000\n").unwrap();
    let table = format!("@{}", d.path("sizes.txt").display());
    for (size, mean) in [(table.as_str(), 325.0), ("lognormal:512,0.5", 580.0)] {
        let r = run_json(
            &d.0,
            &[
                "run",
                "mem://sizes",
                "-n",
                "40000",
                "--size",
                size,
                "--warmup",
                "0s",
                "-o",
                "r.jsonl",
            ],
        );
        let i = &r["integrity"];
        assert_eq!(
            (u(&i["delivered"]), u(&i["lost"])),
            (40000, 0),
            "{size}: {i}"
        );
        let m = measure(&r);
        let got = u(&m["counters"]["sent_bytes"]) as f64 / 40000.0;
        assert!(
            (got - mean).abs() < mean * 0.04,
            "{size}: mean {got}, expected {mean}"
        );
        assert_valid_and_pure(&d.0, "r.jsonl", &r);
    }
    let begin = std::fs::read_to_string(d.path("r.jsonl")).unwrap();
    let begin: serde_json::Value = serde_json::from_str(begin.lines().next().unwrap()).unwrap();
    assert_eq!(
        begin["plan"]["size"]["kind"], "log_normal",
        "{}",
        begin["plan"]["size"]
    );
    // A bad table names its line.
    std::fs::write(d.path("bad.txt"), "100 1\n1KiB lots\n").unwrap();
    let bad = format!("@{}", d.path("bad.txt").display());
    let o = msgbench(&d.0, &["run", "mem://", "-n", "10", "--size", &bad]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("line 2"), "{}", stderr(&o));
}

/// `--content zeros` and `--content text`: every message delivered and matched (the text stamp
/// found among the words).
#[test]
fn zero_and_text_content_deliver_exactly() {
    let d = TempDir::new("payload-content");
    for content in ["zeros", "text"] {
        let r = run_json(
            &d.0,
            &[
                "run",
                "mem://content",
                "-n",
                "5000",
                "--size",
                "300",
                "--content",
                content,
                "--warmup",
                "0s",
            ],
        );
        let i = &r["integrity"];
        assert_eq!(
            (u(&i["delivered"]), u(&i["lost"]), u(&i["foreign"])),
            (5000, 0, 0),
            "{content}: {i}"
        );
    }
    let o = msgbench(
        &d.0,
        &[
            "run",
            "mem://",
            "-n",
            "10",
            "--content",
            "text",
            "--stamp",
            "binary",
        ],
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("producers.content"), "{}", stderr(&o));
}

/// Slow consumers: capped at 200 deliveries a second, one consumer takes 400 messages sent in
/// a fifth of a second over about two seconds, so the last ones wait; none are lost.
#[test]
fn slow_consumers_take_their_time_and_lose_nothing() {
    let d = TempDir::new("payload-slow");
    for slow in [
        &["--consumer-rate", "200"][..],
        &["--processing", "exp:5ms"],
    ] {
        let mut args = vec![
            "run",
            "mem://slow",
            "-n",
            "400",
            "--rate",
            "2000",
            "--warmup",
            "0s",
            "--drain",
            "10s",
        ];
        args.extend_from_slice(slow);
        let started = std::time::Instant::now();
        let r = run_json(&d.0, &args);
        let i = &r["integrity"];
        assert_eq!(
            (u(&i["delivered"]), u(&i["lost"])),
            (400, 0),
            "{slow:?}: {i}"
        );
        let took = started.elapsed().as_secs_f64();
        assert!(took > 1.5, "{slow:?}: the consumer took 400 in {took:.2}s");
        let max_ms = measure(&r)["e2e"]["max"].as_f64().unwrap() / 1e6;
        assert!(
            max_ms > 1000.0,
            "{slow:?}: the last message waited {max_ms} ms"
        );
    }
}

/// Payload files: each message is its stamp and one file, in turn, through nats-server; every
/// message arrives and the bytes sent are exactly the files' (plus stamps).
#[test]
fn payload_files_are_sent_in_turn() {
    let url = need!(NATS);
    let d = TempDir::new("payload-files");
    let docs = d.path("docs");
    std::fs::create_dir_all(&docs).unwrap();
    let bodies = [
        r#"{"order":1,"side":"buy","qty":10}"#.repeat(3),
        r#"{"order":2,"side":"sell"}"#.to_string(),
        "x".repeat(900),
    ];
    for (i, b) in bodies.iter().enumerate() {
        std::fs::write(docs.join(format!("{i}.json")), b).unwrap();
    }
    let dir = docs.to_string_lossy().into_owned();
    let r = run_json(
        &d.0,
        &[
            "run",
            &url,
            "--payload-files",
            &dir,
            "--messages",
            "3000",
            "--warmup",
            "0s",
            "-o",
            "files.jsonl",
        ],
    );
    assert_valid_and_pure(&d.0, "files.jsonl", &r);
    let i = &r["integrity"];
    assert_eq!((u(&i["delivered"]), u(&i["lost"])), (3000, 0), "{i}");
    // One producer, so the files take turns exactly: 1,000 messages of each, behind a 40-byte
    // binary stamp.
    let per_round: u64 = bodies.iter().map(|b| b.len() as u64 + 40).sum();
    assert_eq!(
        phase_sum(&r, "sent_bytes"),
        1000 * per_round,
        "{}",
        r["phases"]
    );
    // The files set the sizes: --size beside them is refused.
    refused(
        &d.0,
        &["run", "mem://x", "--payload-files", &dir, "--size", "100"],
        "payload_files",
    );
    refused(
        &d.0,
        &["run", "mem://x", "--payload-files", "/nonexistent/docs"],
        "cannot read the folder",
    );
}
