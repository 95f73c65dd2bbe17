//! ZeroMQ interoperability with libzmq, the reference C implementation (4.3.4 through Debian's
//! `python3-zmq`, which `scripts/brokers.sh up` installs): msgbench's producer sends to a libzmq
//! relay (`tests/fixtures/zmq_relay.py`), which passes every message on to msgbench's consumer.
//! Every message crosses the wire both ways — msgbench → libzmq, then libzmq → msgbench — and
//! each msgbench side meets libzmq once as the connecting peer (the producer) and once as the
//! binding one (the consumer): PUSH/PULL, then PUB/SUB (two frames, topic and payload, and the
//! subscription going upstream), with short frames and long ones (> 255 bytes: ZMTP's 8-byte
//! frame length).

use crate::util;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use util::*;

/// The relay as a child process, killed (by its PID) when dropped, panics included.
struct Relay {
    child: Child,
    /// Kept open past the "relay ready" line, so the relay never writes to a closed pipe.
    _stdout: BufReader<ChildStdout>,
    /// Its stderr: libzmq's version, progress, errors.
    log: PathBuf,
}

impl Relay {
    /// Starts `zmq_relay.py PATTERN IN_PORT OUT_PORT` under `python` (one that imports pyzmq
    /// on libzmq) and waits for its "relay ready" line.
    fn start(python: &str, dir: &Path, pattern: &str, in_port: u16, out_port: u16) -> Relay {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/zmq_relay.py");
        let log = dir.join(format!("relay-{pattern}.log"));
        let mut child = Command::new(python)
            .arg(&script)
            .args([pattern, &in_port.to_string(), &out_port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting the libzmq relay (MSGBENCH_IT_LIBZMQ_PYTHON)");
        let stdout = BufReader::new(child.stdout.take().unwrap());
        // Owned by the guard from here on: a failed start below still kills the relay.
        let mut relay = Relay {
            child,
            _stdout: stdout,
            log,
        };
        let mut line = String::new();
        // Returns at the line, or at EOF if the relay died (its stderr says why).
        relay._stdout.read_line(&mut line).unwrap();
        assert_eq!(
            line.trim_end(),
            "relay ready",
            "the libzmq relay did not start:\n{}",
            relay.log()
        );
        relay
    }

    /// What the relay wrote to stderr so far.
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One run through the relay: a producer sends `n` messages of `size` bytes to the relay's
/// `IN` port (`peers=1`: no consumer of this run binds there), the consumer binds `OUT` and
/// receives them from libzmq; every message must arrive exactly once, end-to-end latency
/// measured across both hops.
fn through_libzmq(pattern: &str, size: &str, n: u64) {
    // Set by `scripts/brokers.sh env`.
    let python = need!("MSGBENCH_IT_LIBZMQ_PYTHON");
    let d = TempDir::new(&format!("libzmq-{pattern}-{size}"));
    let in_port = free_port();
    let out_port = std::iter::repeat_with(free_port)
        .find(|&p| p != in_port)
        .unwrap();
    let mut relay = Relay::start(&python, &d.0, pattern, in_port, out_port);
    let query = if pattern == "pubsub" {
        "pattern=pubsub&"
    } else {
        ""
    };
    let target = format!("zmq://127.0.0.1:{in_port}?{query}peers=1");
    let consume_from = format!(
        "zmq://127.0.0.1:{out_port}{}",
        query
            .strip_suffix('&')
            .map_or(String::new(), |q| format!("?{q}"))
    );
    let count = n.to_string();
    let args = [
        "run",
        target.as_str(),
        "--consume-from",
        &consume_from,
        "-p",
        "1",
        "-c",
        "1",
        "-n",
        &count,
        "-s",
        size,
        "--warmup",
        "0s",
        "--drain",
        "10s",
        "-o",
        "r.jsonl",
        "--format",
        "json",
        "--quiet",
    ];
    let o = msgbench(&d.0, &args);
    let relay_exit = relay.child.try_wait().unwrap();
    let ctx = || {
        format!(
            "{pattern}, {size} bytes: msgbench {args:?}\nstdout:\n{}\nstderr:\n{}\nrelay:\n{}",
            stdout(&o),
            stderr(&o),
            relay.log()
        )
    };
    assert!(o.status.success(), "msgbench failed: {}", ctx());
    let r: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("report is not JSON ({e}): {}", ctx()));
    let m = measure(&r);
    assert_eq!(u(&m["counters"]["sent"]), n, "{}", ctx());
    let i = &r["integrity"];
    assert_eq!(
        (u(&i["expected"]), u(&i["delivered"]), u(&i["lost"])),
        (n, n, 0),
        "{i}\n{}",
        ctx()
    );
    assert_eq!(
        (u(&i["duplicated"]), u(&i["reordered"]), u(&i["foreign"])),
        (0, 0, 0),
        "{i}\n{}",
        ctx()
    );
    assert_eq!(u(&m["e2e"]["count"]), n, "{}", ctx());
    assert!(u(&m["e2e"]["p50"]) > 0, "{}", ctx());
    assert_eq!(r["consume_from"], consume_from.as_str(), "{r}");
    // The relay was still there at the end: it neither crashed nor timed out mid-run.
    assert!(
        relay_exit.is_none(),
        "the relay exited during the run ({relay_exit:?}): {}",
        ctx()
    );
    assert_valid_and_pure(&d.0, "r.jsonl", &r);
}

/// PUSH (msgbench, connecting) → PULL (libzmq, binding); PUSH (libzmq, connecting) → PULL
/// (msgbench, binding). One frame per message.
#[test]
fn push_pull_through_libzmq() {
    through_libzmq("pushpull", "64", 20_000);
    through_libzmq("pushpull", "1000", 20_000);
}

/// XPUB (msgbench, connecting) → SUB (libzmq, binding, subscribed to everything); XPUB
/// (libzmq, connecting) → SUB (msgbench, binding), whose subscription libzmq must receive
/// before the relay subscribes upstream. Two frames per message: topic, payload.
#[test]
fn pub_sub_through_libzmq() {
    through_libzmq("pubsub", "64", 20_000);
    through_libzmq("pubsub", "1000", 20_000);
}
