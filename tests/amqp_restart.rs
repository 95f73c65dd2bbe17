//! RabbitMQ restarted mid-run (`scripts/brokers.sh restart-rabbitmq`: the broker closes every
//! connection and refuses new ones for a while). Its own test binary, because the restart would
//! cut the connections of any test running beside it; cargo runs test binaries one at a time.

mod util;

use std::process::{Command, Stdio};
use std::time::Duration;
use util::*;

/// Clients reconnect and go on; with durable queues, persistent messages and confirms, every
/// message lost is one msgbench reported in doubt (never confirmed) or refused: confirmed
/// messages survive the restart, and the loss is exact.
#[test]
fn broker_restart_mid_run() {
    let url = amqp_url();
    let d = TempDir::new("amqp-restart");
    let run = Command::new(bin())
        .args([
            "run",
            &url,
            "--confirm",
            "--durable",
            "--persistent",
            "--queue-group",
            "g",
            "--topic",
            "it.restart",
            "--purge",
            "--rate",
            "2000",
            "--duration",
            "8s",
            "--warmup",
            "0s",
            "--drain",
            "5s",
            "--ack-timeout",
            "3s",
            "-o",
            "r.jsonl",
            "--format",
            "json",
            "--quiet",
        ])
        .current_dir(&d.0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/brokers.sh");
    let restart = Command::new(script)
        .args(["restart-rabbitmq", "1"])
        .output()
        .unwrap();
    assert!(restart.status.success(), "{}", stderr(&restart));
    let o = run.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let c = &measure(&r)["counters"];
    let e = &c["errors"];
    assert!(u(&e["disconnect"]) >= 2, "both clients were cut: {e}");
    assert!(u(&c["reconnects"]) >= 2, "both clients came back: {c}");
    let i = &r["integrity"];
    assert_eq!(u(&i["expected"]), u(&i["delivered"]) + u(&i["lost"]), "{i}");
    // Deliveries went on after the restart (the broker was down for seconds of an 8 s run).
    assert!(u(&i["delivered"]) > u(&c["sent"]) / 2, "{i} {c}");
    let in_doubt = u(&e["timeout"]) + u(&e["send"]) + u(&c["nacked"]);
    assert!(
        u(&i["lost"]) <= in_doubt,
        "every lost message was reported in doubt or refused: {i} {e}"
    );
    let kinds: Vec<&str> = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"disconnected"), "{kinds:?}");
    assert!(kinds.contains(&"reconnected"), "{kinds:?}");
    let file = std::fs::read_to_string(d.path("r.jsonl")).unwrap();
    assert!(file.lines().last().unwrap().contains("\"type\":\"end\""));
}
