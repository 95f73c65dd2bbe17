//! ZeroMQ through the CLI: brokerless runs within one msgbench process (both ends on
//! loopback TCP), PUSH/PULL and PUB/SUB, and the errors a user meets first.

use crate::util;

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

/// Between two msgbench processes: one runs the consumers (which bind), the other the
/// producers (which connect, retrying until the consumers have bound), and the merged files
/// account for every message end to end. PUSH/PULL, then PUB/SUB to two subscribers.
#[test]
fn between_two_processes() {
    let d = TempDir::new("zmq-two");
    for (name, query, consumers, n) in [
        ("pushpull", "", "1", 20_000u64),
        ("pubsub", "?pattern=pubsub&peers=2", "2", 10_000),
    ] {
        let url = format!("zmq://127.0.0.1:{}{query}", free_port());
        let count = n.to_string();
        let (rx, tx) = (format!("{name}-rx.jsonl"), format!("{name}-tx.jsonl"));
        let common = [
            "-n", &count, "-s", "64", "-c", consumers, "--warmup", "0s", "--drain", "10s",
        ];
        let side = |segment: &str, out: &str| {
            let mut args = vec!["run", url.as_str()];
            args.extend_from_slice(&common);
            args.extend(["--segment", segment, "-o", out]);
            spawn_run(&d.0, &args)
        };
        // The producers first: their connects wait for the consumers to bind.
        let producers = side("producers", &tx);
        std::thread::sleep(std::time::Duration::from_millis(300));
        let receivers = side("consumers", &rx);
        // Both finish before either is judged, so a failure shows what each side said.
        let (p, c) = (
            producers.wait_with_output().unwrap(),
            receivers.wait_with_output().unwrap(),
        );
        assert!(
            p.status.success() && c.status.success(),
            "{name}: producers: {}\nconsumers: {}",
            stderr(&p),
            stderr(&c)
        );
        let (p, c): (serde_json::Value, serde_json::Value) = (
            serde_json::from_slice(&p.stdout).unwrap(),
            serde_json::from_slice(&c.stdout).unwrap(),
        );
        assert_eq!(u(&measure(&p)["counters"]["sent"]), n, "{name}: {p}");
        assert_eq!(u(&measure(&c)["counters"]["sent"]), 0, "{name}");
        let o = msgbench(
            &d.0,
            &[
                "merge",
                &tx,
                &rx,
                "-o",
                &format!("{name}.jsonl"),
                "--format",
                "json",
            ],
        );
        assert!(o.status.success(), "{name}: merge failed: {}", stderr(&o));
        let m: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let i = &m["integrity"];
        let receivers: u64 = consumers.parse().unwrap();
        assert_eq!(
            (u(&i["expected"]), u(&i["delivered"]), u(&i["lost"])),
            (n * receivers, n * receivers, 0),
            "{name}: {i}"
        );
        assert_eq!(u(&measure(&m)["e2e"]["count"]), n * receivers, "{name}");
        assert_valid_and_pure(&d.0, &format!("{name}.jsonl"), &m);
    }
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

/// Options the driver does not know, a port that is taken, and a peer of the other pattern are
/// clear errors.
#[test]
fn bad_zmq_runs_are_refused() {
    let d = TempDir::new("zmq-bad");
    let o = msgbench(
        &d.0,
        &["run", "zmq://127.0.0.1:0?pattern=reqrep", "-n", "10"],
    );
    // An option the driver does not take: a usage error.
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("pattern"), "{}", stderr(&o));
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let o = msgbench(
        &d.0,
        &["run", &format!("zmq://127.0.0.1:{port}"), "-n", "10"],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains(&port.to_string()), "{}", stderr(&o));
    // Two processes that disagree on the pattern: the ZMTP handshake says so, on both sides.
    let port = free_port();
    let url = format!("zmq://127.0.0.1:{port}");
    let mut subs = spawn_run(
        &d.0,
        &[
            "run",
            &format!("{url}?pattern=pubsub"),
            "--segment",
            "consumers",
            "-d",
            "20s",
            "--no-output",
        ],
    );
    // The producer's connect retries until the consumer has bound.
    let o = msgbench(
        &d.0,
        &[
            "run",
            &url,
            "--segment",
            "producers",
            "-n",
            "10",
            "--no-output",
        ],
    );
    let _ = subs.kill();
    let _ = subs.wait();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("the peer is a SUB socket; a PUSH socket talks to PULL"),
        "{}",
        stderr(&o)
    );
}

/// A binding producer whose only peer is not a ZeroMQ one (an HTTP client here; a PUSH socket
/// where a PULL was wanted gives the same): the peer is refused as soon as its first bytes
/// show it, and the run that waited for a peer in vain says why the one that came could not
/// join, not only "0 of 1 consumers connected".
#[test]
fn a_binding_side_says_why_its_peer_could_not_join() {
    use std::io::Write;
    let d = TempDir::new("zmq-bind-refusal");
    let port = free_port();
    let run = spawn_run(
        &d.0,
        &[
            "run",
            &format!("zmq://127.0.0.1:{port}?pattern=pushpull&bind=producer&peers=1"),
            "-p",
            "1",
            "-c",
            "0",
            "-n",
            "10",
            "--connect-timeout",
            "3s",
            "--no-output",
        ],
    );
    // The HTTP client is the only peer that ever connects (a probe for the listener would be
    // one more, and its failed handshake could be the last one).
    let t0 = std::time::Instant::now();
    let mut s = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(e) if t0.elapsed() > std::time::Duration::from_secs(5) => {
                panic!("msgbench did not listen on {port}: {e}")
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    };
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let o = run.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the last peer that tried")
            && err.contains("the peer does not speak ZeroMQ (no ZMTP greeting)"),
        "{err}"
    );
}
