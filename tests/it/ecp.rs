//! The `ecp` preset against `msgbench serve ecp-endpoint` on ActiveMQ Artemis (started by
//! `scripts/brokers.sh`): every stage of go-mades-bench's endpoint flow counted exactly,
//! including error replies, FAILED events and duplicated deliveries the simulator injects
//! (deterministically, so the expected counts are computed here), and the plain AMQP 1.0
//! loop-back mode. Each test uses its own queues, so tests can run in parallel.

use crate::util;

use std::process::{Command, Stdio};
use util::*;

/// The simulator's fault rule: message n (1-based) is picked iff ⌊n·r⌋ > ⌊(n−1)·r⌋.
fn picked(n: u64, r: f64) -> bool {
    r > 0.0 && (n as f64 * r).floor() > ((n - 1) as f64 * r).floor()
}

fn queues(tag: &str) -> Vec<String> {
    let q = |s: &str| format!("it.ecp.{tag}.{s}");
    vec![
        "--outbox-queue".into(),
        q("outbox"),
        "--reply-queue".into(),
        q("reply"),
        "--send-event-queue".into(),
        q("event"),
        "--inbox-queue".into(),
        q("inbox"),
    ]
}

/// Starts `msgbench serve ecp-endpoint` on Artemis (the caller's `need!(ARTEMIS)` found it),
/// stopped when dropped.
fn start_sim(extra: &[String]) -> Killed {
    let child = Command::new(bin())
        .args([
            "serve",
            "ecp-endpoint",
            "--quiet",
            "--broker",
            &env_or_hint(ARTEMIS),
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting msgbench serve ecp-endpoint");
    Killed(child)
}

fn stage<'a>(r: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    r["stages"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == name))
        .unwrap_or_else(|| panic!("no stage {name} in {}", r["stages"]))
}

/// Endpoint mode through the simulator with every fault it can inject: each stage's
/// reached, failed, duplicate and missing counts are exactly what the simulator did.
#[test]
fn endpoint_mode_counts_every_stage_exactly() {
    let url = need!(ARTEMIS);
    let d = TempDir::new("ecp-endpoint");
    let q = queues("endpoint");
    let (err_r, fail_r, dup_every, n) = (0.02, 0.03, 7u64, 1000u64);
    let mut sim_args = q.clone();
    sim_args.extend(
        [
            "--extra-events",
            "--error-ratio",
            "0.02",
            "--failed-ratio",
            "0.03",
            "--duplicate-every",
            "7",
            "--reply-delay",
            "1ms",
        ]
        .map(String::from),
    );
    let _sim = start_sim(&sim_args);
    let mut args: Vec<String> = ["run", "--preset", "ecp", "--outbox-url", &url]
        .map(String::from)
        .to_vec();
    args.extend(q);
    args.extend(
        [
            "-n",
            "1000",
            "--size",
            "3000",
            "--max-in-flight",
            "100",
            "--drain",
            "20s",
            "-o",
            "r.jsonl",
        ]
        .map(String::from),
    );
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = run_json(&d.0, &argv);

    let errors = (1..=n).filter(|&i| picked(i, err_r)).count() as u64;
    let failed = (1..=n)
        .filter(|&i| !picked(i, err_r) && picked(i, fail_r))
        .count() as u64;
    let dups = (1..=n)
        .filter(|&i| i % dup_every == 0 && !picked(i, err_r) && !picked(i, fail_r))
        .count() as u64;
    let ok = n - errors - failed;
    assert!(errors > 0 && failed > 0 && dups > 0);

    let s = stage(&r, "Sent to outbox");
    assert_eq!((u(&s["reached"]), u(&s["missing"])), (n, 0), "{s}");
    let s = stage(&r, "Sent to broker");
    assert_eq!(u(&s["reached"]), n - errors, "{s}");
    assert_eq!(u(&s["failed"]), errors, "error replies: {s}");
    for (name, dup) in [
        ("Received in inbox", dups),
        ("Delivery event", 0),
        ("Received event", dups),
    ] {
        let s = stage(&r, name);
        assert_eq!(u(&s["reached"]), ok, "{name}: {s}");
        assert_eq!(u(&s["duplicates"]), dup, "{name}: {s}");
        assert_eq!(u(&s["missing"]), 0, "{name}: {s}");
        assert_eq!(u(&s["unknown"]), 0, "{name}: {s}");
        assert_eq!(u(&s["latency"]["count"]), ok, "{name}");
    }
    let s = stage(&r, "Failed event");
    assert_eq!(u(&s["failed"]), failed, "{s}");
    assert!(u(&stage(&r, "Accepted event")["reached"]) > 0);
    assert_eq!(stage(&r, "Received event")["window"], true);
    let w = r["warnings"].to_string();
    assert!(
        w.contains(&format!("stage `Sent to broker`: {errors} messages failed")),
        "{w}"
    );
    assert_valid_and_pure(&d.0, "r.jsonl", &r);
}

/// The plain AMQP 1.0 loop-back (`--ecp-mode amqp`): send to the inbox and receive it back,
/// tracked by baMessageID; no simulator needed.
#[test]
fn amqp_mode_loops_back_through_the_broker() {
    let d = TempDir::new("ecp-amqp");
    let url = need!(ARTEMIS);
    let r = run_json(
        &d.0,
        &[
            "run",
            "--preset",
            "ecp",
            "--ecp-mode",
            "amqp",
            "--inbox-url",
            &url,
            "--inbox-queue",
            "it.ecp.amqp.inbox",
            "-n",
            "3000",
            "--size",
            "3000",
            "-p",
            "2",
        ],
    );
    for name in ["Sent to outbox", "Received in inbox"] {
        let s = stage(&r, name);
        assert_eq!(u(&s["reached"]), 3000, "{name}: {s}");
        assert_eq!(u(&s["missing"]), 0, "{name}: {s}");
        assert_eq!(u(&s["duplicates"]), 0, "{name}: {s}");
    }
    assert_eq!(u(&measure(&r)["counters"]["acked"]), 3000);
}

/// Toolbox mode: the reply is matched by the baMessageID property; no send-event stages.
#[test]
fn toolbox_mode_matches_replies_by_ba_message_id() {
    let url = need!(ARTEMIS);
    let d = TempDir::new("ecp-toolbox");
    let q = queues("toolbox");
    let _sim = start_sim(&q);
    let mut args: Vec<String> = [
        "run",
        "--preset",
        "ecp",
        "--ecp-mode",
        "toolbox",
        "--outbox-url",
        &url,
        "-n",
        "500",
        "--size",
        "1KiB",
        "--drain",
        "20s",
    ]
    .map(String::from)
    .to_vec();
    args.extend(q);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = run_json(&d.0, &argv);
    assert_eq!(r["stages"].as_array().unwrap().len(), 3);
    for name in ["Sent to outbox", "Received in inbox", "Received reply"] {
        let s = stage(&r, name);
        assert_eq!(u(&s["reached"]), 500, "{name}: {s}");
        assert_eq!(u(&s["missing"]), 0, "{name}: {s}");
    }
}

/// A simulator that never answers: the run still ends (window places expire after the ack
/// timeout), and every message is counted missing at the stages it never reached.
#[test]
fn an_endpoint_that_never_answers_is_counted_missing() {
    let d = TempDir::new("ecp-silent");
    let url = need!(ARTEMIS);
    let mut args: Vec<String> = [
        "run",
        "--preset",
        "ecp",
        "--outbox-url",
        &url,
        "-n",
        "50",
        "--max-in-flight",
        "20",
        "--ack-timeout",
        "1s",
        "--drain",
        "2s",
    ]
    .map(String::from)
    .to_vec();
    args.extend(queues("silent"));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = run_json(&d.0, &argv);
    assert_eq!(u(&stage(&r, "Sent to outbox")["reached"]), 50);
    for name in ["Sent to broker", "Received in inbox", "Received event"] {
        let s = stage(&r, name);
        assert_eq!((u(&s["reached"]), u(&s["missing"])), (0, 50), "{name}: {s}");
    }
    assert!(r["warnings"].to_string().contains("never reached it"));
}
