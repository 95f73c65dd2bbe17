//! ZeroMQ through the CLI: brokerless runs within one msgbench process (both ends on
//! loopback TCP), PUSH/PULL and PUB/SUB, and the errors a user meets first.

mod util;

use util::*;

/// PUSH/PULL: the consumer binds a free port, the producer connects; every message once.
#[test]
fn push_pull_in_one_process() {
    let d = TempDir::new("zmq-pushpull");
    let r = run_json(
        &d.0,
        &[
            "run",
            "zmq://127.0.0.1:0",
            "-n",
            "20000",
            "-s",
            "64",
            "--warmup",
            "0s",
            "-o",
            "r.jsonl",
        ],
    );
    let i = &r["integrity"];
    assert_eq!(
        (u(&i["expected"]), u(&i["delivered"]), u(&i["lost"])),
        (20_000, 20_000, 0),
        "{i}"
    );
    assert!(u(&measure(&r)["e2e"]["p50"]) > 0);
    assert_valid_and_pure(&d.0, "r.jsonl", &r);
}

/// PUB/SUB fan-out to 3 subscribers (the producer waits until their subscriptions arrived).
#[test]
fn pub_sub_fan_out() {
    let d = TempDir::new("zmq-pubsub");
    let r = run_json(
        &d.0,
        &[
            "run",
            "zmq://127.0.0.1:0?pattern=pubsub",
            "-c",
            "3",
            "-n",
            "5000",
            "--warmup",
            "0s",
        ],
    );
    let i = &r["integrity"];
    assert_eq!(
        (u(&i["expected"]), u(&i["delivered"]), u(&i["lost"])),
        (15_000, 15_000, 0),
        "{i}"
    );
}

/// Options the driver does not know, and a port that is taken, are clear errors.
#[test]
fn bad_zmq_runs_are_refused() {
    let d = TempDir::new("zmq-bad");
    let o = msgbench(
        &d.0,
        &["run", "zmq://127.0.0.1:0?pattern=reqrep", "-n", "10"],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("pattern"), "{}", stderr(&o));
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let o = msgbench(
        &d.0,
        &["run", &format!("zmq://127.0.0.1:{port}"), "-n", "10"],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains(&port.to_string()), "{}", stderr(&o));
}
