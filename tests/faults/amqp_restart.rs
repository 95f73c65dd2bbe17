//! RabbitMQ restarted mid-run (`scripts/brokers.sh restart-rabbitmq`: the broker closes every
//! connection and refuses new ones for a while). Its own test binary, because the restart would
//! cut the connections of any test running beside it; cargo runs test binaries one at a time.

use crate::util;

use std::process::Command;
use std::time::Duration;
use util::*;

/// Clients reconnect and go on; with durable queues, persistent messages and confirms, every
/// message lost is one msgbench reported in doubt (never confirmed) or refused: confirmed
/// messages survive the restart, and the loss is exact.
/// The same with channels on shared connections (`--channels 2`): after the restart each
/// shared connection reconnects once and its channels open again and redo their setup.
#[test]
fn broker_restart_mid_run() {
    let _turn = crate::turn("rabbitmq");
    restart_mid_run(&[], 2);
    restart_mid_run(&["--channels", "2", "-p", "2", "-c", "2"], 2);
}

/// Runs msgbench with `extra` arguments, restarts RabbitMQ 2 s in, and checks the outcome;
/// `connections`: how many connections the run uses.
fn restart_mid_run(extra: &[&str], connections: u64) {
    let url = need!(AMQP);
    let d = TempDir::new("amqp-restart");
    let mut args = vec!["run", url.as_str()];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[
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
        "10s",
        "--warmup",
        "0s",
        "--drain",
        "5s",
        "--ack-timeout",
        "3s",
        "-o",
        "r.jsonl",
    ]);
    let run = spawn_run(&d.0, &args);
    std::thread::sleep(Duration::from_secs(2));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/brokers.sh");
    let restart = Command::new(script)
        .args(["restart-rabbitmq", "1"])
        .output()
        .unwrap();
    assert!(restart.status.success(), "{}", stderr(&restart));
    let r = finish_json(run);
    let c = &measure(&r)["counters"];
    let e = &c["errors"];
    // Counted from the events: a client may come back after the measure phase, in the drain.
    let count = |kind: &str| count_events(&r, kind);
    assert!(
        count("disconnected") >= connections,
        "every connection was cut: {}",
        r["events"]
    );
    assert!(
        count("reconnected") >= connections,
        "every connection came back: {}",
        r["events"]
    );
    let i = &r["integrity"];
    assert_eq!(u(&i["expected"]), u(&i["delivered"]) + u(&i["lost"]), "{i}");
    // Deliveries went on after the restart (the broker was down for seconds of a 10 s run).
    assert!(
        u(&i["delivered"]) > u(&c["sent"]) / 2,
        "{i} {c}\nevents: {}",
        r["events"]
    );
    let in_doubt = u(&e["timeout"]) + u(&e["send"]) + u(&c["nacked"]);
    assert!(
        u(&i["lost"]) <= in_doubt,
        "every lost message was reported in doubt or refused: {i} {e}\nevents: {}",
        r["events"]
    );
    let file = std::fs::read_to_string(d.path("r.jsonl")).unwrap();
    assert!(file.lines().last().unwrap().contains("\"type\":\"end\""));
}
