//! Brokerless AMQP 1.0 (`amqp10://HOST:PORT?bind=consumer|producer`) through the CLI: either
//! side listening, port 0 with both ends in one msgbench, settled and unsettled transfers,
//! several producers into one listening consumer, fan-out and queue groups, between two
//! msgbench processes; Apache Qpid Proton (Debian's python3-qpid-proton, the script
//! `tests/fixtures/peer_proton.py`) as the listening receiver of msgbench's producers and as a
//! sender into a listening msgbench consumer; and the bad input: a port in use, a peer that
//! speaks another protocol, a peer that grants no credit.
//!
//! The Proton tests follow tests/it/thirdparty.rs: `scripts/brokers.sh up` installs the package
//! and `scripts/brokers.sh env` exports `MSGBENCH_IT_PEER_PYTHON`, under which a missing module
//! fails the test; without it the system Python is tried and the test says `skipped` if it
//! cannot import proton.

use crate::util;

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;
use util::*;

/// Every message delivered once, every one acked (unsettled) or none (settled).
fn assert_exact(r: &Value, n: u64, acked: u64, what: &str) {
    let i = &r["integrity"];
    assert_eq!(
        (
            u(&i["expected"]),
            u(&i["delivered"]),
            u(&i["lost"]),
            u(&i["duplicated"])
        ),
        (n, n, 0, 0),
        "{what}: {i}"
    );
    let m = measure(r);
    assert_eq!(
        u(&m["counters"]["acked"]),
        acked,
        "{what}: {}",
        m["counters"]
    );
    assert_eq!(
        u(&m["e2e"]["count"]),
        u(&m["counters"]["received"]),
        "{what}"
    );
    assert!(u(&m["e2e"]["p50"]) > 0, "{what}: e2e latency");
    let e = &m["counters"]["errors"];
    assert_eq!((u(&e["send"]), u(&e["timeout"])), (0, 0), "{what}: {e}");
}

fn run(d: &TempDir, url: &str, extra: &[&str]) -> Value {
    let mut args = vec!["run", url, "--warmup", "0s", "--no-output"];
    args.extend_from_slice(extra);
    run_json(&d.0, &args)
}

/// Either side listening on free ports, unsettled (acked by the consumer's disposition) and
/// pre-settled; several producers into one listening consumer.
#[test]
fn either_side_listens_settled_or_not() {
    let d = TempDir::new("p2p-basic");
    let settled = d.path("settled.toml");
    std::fs::write(&settled, "[amqp10]\nsettled = true\n").unwrap();
    let settled = settled.to_string_lossy().into_owned();
    for bind in ["consumer", "producer"] {
        let url = format!("amqp10://127.0.0.1:0?bind={bind}");
        let r = run(&d, &url, &["-n", "20000", "-s", "64"]);
        assert_exact(&r, 20_000, 20_000, &format!("{bind}, unsettled"));
        let r = run_json(
            &d.0,
            &[
                "run",
                &settled,
                "--target",
                &url,
                "-n",
                "100000",
                "-s",
                "100",
                "--warmup",
                "0s",
                "--no-output",
            ],
        );
        // Many credit windows: pre-settled, the producer reads the consumer's flow frames only
        // once its credit runs out (where it once stopped for good after about 5,000).
        assert_exact(&r, 100_000, 0, &format!("{bind}, settled"));
        // Three producers into one consumer (bind=consumer), or three producers each
        // listening for the consumer (bind=producer).
        let r = run(&d, &url, &["-p", "3", "-n", "30000", "-s", "200"]);
        assert_exact(&r, 30_000, 30_000, &format!("{bind}, 3 producers"));
    }
    // Messages larger than a frame go out in several transfer frames and arrive whole.
    let r = run(
        &d,
        "amqp10://127.0.0.1:0?bind=consumer",
        &["-n", "200", "-s", "1500KiB"],
    );
    assert_exact(&r, 200, 200, "large messages");
    let bytes: u64 = r["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| u(&p["counters"]["received_bytes"]))
        .sum();
    assert_eq!(bytes, 200 * 1500 * 1024);
}

/// Fan-out: every listening consumer gets every message of every producer; a queue group
/// shares them (round robin among the consumers with credit), each message once.
#[test]
fn fan_out_and_queue_groups() {
    let d = TempDir::new("p2p-fanout");
    for bind in ["consumer", "producer"] {
        let url = format!("amqp10://127.0.0.1:0?bind={bind}");
        let r = run(&d, &url, &["-p", "2", "-c", "3", "-n", "30000"]);
        assert_exact(&r, 90_000, 30_000, &format!("{bind}: fan-out"));
        let r = run(
            &d,
            &url,
            &["-p", "2", "-c", "3", "--queue-group", "w", "-n", "30000"],
        );
        assert_exact(&r, 30_000, 30_000, &format!("{bind}: queue group"));
    }
    // Several topics, a consumer pair on each.
    let r = run(
        &d,
        "amqp10://127.0.0.1:0?bind=consumer",
        &[
            "--topics", "3", "--topic", "p2p.{i}", "-c", "2", "-n", "30000",
        ],
    );
    assert_exact(&r, 60_000, 30_000, "3 topics");
}

/// Two msgbench processes on a fixed port: the producers' side connects (retrying until the
/// consumers listen), and the merged files account for every message. (A producers-only
/// segment with acks judges its own deliveries, none, so it may end with exit code 3.)
#[test]
fn between_two_processes() {
    let d = TempDir::new("p2p-two");
    let url = format!("amqp10://127.0.0.1:{}?bind=consumer", free_port());
    let common = ["-n", "20000", "--warmup", "0s", "--drain", "10s"];
    let side = |segment: &str, out: &str| {
        let mut args = vec!["run", url.as_str()];
        args.extend_from_slice(&common);
        args.extend(["--segment", segment, "-o", out]);
        spawn_run(&d.0, &args)
    };
    let producers = side("producers", "tx.jsonl");
    std::thread::sleep(Duration::from_millis(300));
    let consumers = side("consumers", "rx.jsonl");
    let (p, c) = (
        producers.wait_with_output().unwrap(),
        consumers.wait_with_output().unwrap(),
    );
    assert!(
        p.status.success() && c.status.success(),
        "producers: {}\nconsumers: {}",
        stderr(&p),
        stderr(&c)
    );
    let o = msgbench(
        &d.0,
        &[
            "merge", "tx.jsonl", "rx.jsonl", "-o", "m.jsonl", "--format", "json",
        ],
    );
    assert!(o.status.success(), "merge: {}", stderr(&o));
    let m: Value = serde_json::from_slice(&o.stdout).unwrap();
    let i = &m["integrity"];
    assert_eq!(
        (u(&i["expected"]), u(&i["delivered"]), u(&i["lost"])),
        (20_000, 20_000, 0),
        "{i}"
    );
}

/// A port in use is refused before anything runs, naming the address (exit 1: could not run).
#[test]
fn a_port_in_use_is_a_clear_error() {
    let d = TempDir::new("p2p-inuse");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    for bind in ["consumer", "producer"] {
        let url = format!("amqp10://127.0.0.1:{port}?bind={bind}");
        let o = msgbench(&d.0, &["run", &url, "-n", "10", "--no-output"]);
        assert_eq!(o.status.code(), Some(1), "{bind}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(
            e.contains(&format!("127.0.0.1:{port}")) && e.contains("already in use"),
            "{bind}: {e}"
        );
    }
    let o = msgbench(
        &d.0,
        &["run", "amqp10://127.0.0.1:0?bind=sideways", "-n", "10"],
    );
    // An option the driver does not take: a usage error.
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("bind=`sideways`"), "{}", stderr(&o));
}

/// A peer that speaks HTTP to a listening consumer gets the AMQP header back and is counted
/// as an error event quoting what it sent; a msgbench producer that connects to an HTTP
/// server fails with an error saying it is not AMQP 1.0.
#[test]
fn a_peer_of_another_protocol_is_refused_and_counted() {
    let d = TempDir::new("p2p-http");
    let port = free_port();
    let url = format!("amqp10://127.0.0.1:{port}?bind=consumer");
    let consumers = spawn_run(
        &d.0,
        &[
            "run",
            &url,
            "--segment",
            "consumers",
            "-d",
            "3s",
            "--no-output",
        ],
    );
    let mut s = None;
    for _ in 0..100 {
        if let Ok(c) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            s = Some(c);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut s = s.expect("the consumer listens");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    assert_eq!(&answer[..], b"AMQP\x00\x01\x00\x00", "the spec's answer");
    let o = consumers.wait_with_output().unwrap();
    let r: Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    let events = r["events"].as_array().unwrap();
    assert!(
        events.iter().any(|e| e["kind"] == "error"
            && e["detail"]
                .as_str()
                .unwrap()
                .contains("does not speak AMQP 1.0")
            && e["detail"].as_str().unwrap().contains("GET / HT")),
        "{events:?}"
    );
    assert_eq!(count_events(&r, "error"), 1, "{events:?}");

    // The other way round: msgbench connects to something that answers in HTTP.
    let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hp = http.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        if let Ok((mut c, _)) = http.accept() {
            let mut b = [0u8; 8];
            let _ = c.read_exact(&mut b);
            let _ = c.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
        }
    });
    let o = msgbench(
        &d.0,
        &[
            "run",
            &format!("amqp10://127.0.0.1:{hp}?bind=consumer"),
            "-c",
            "0",
            "-n",
            "10",
            "--no-output",
        ],
    );
    server.join().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("speaks HTTP") && stderr(&o).contains("not AMQP 1.0"),
        "{}",
        stderr(&o)
    );
}

// ---------------------------------------------------------------------------------------------
// Apache Qpid Proton

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/peer_proton.py")
}

/// The Python that imports proton: `MSGBENCH_IT_PEER_PYTHON` when set (then it must), else
/// the system Python if it does; `None` (skipped, and said) otherwise.
fn proton_python() -> Option<String> {
    let imports = |py: &str| {
        Command::new(py)
            .args(["-c", "import proton"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if let Ok(py) = std::env::var("MSGBENCH_IT_PEER_PYTHON") {
        assert!(
            imports(&py),
            "MSGBENCH_IT_PEER_PYTHON={py} cannot import proton: install the Debian package \
             python3-qpid-proton"
        );
        return Some(py);
    }
    let py = "/usr/bin/python3";
    if imports(py) {
        return Some(py.to_string());
    }
    eprintln!(
        "skipped: install the Debian package python3-qpid-proton ({py} cannot import proton; \
         `scripts/brokers.sh up` installs it)"
    );
    None
}

/// A run whose producer listens on a free port (its segment only) to send `n` messages, given
/// a moment to listen; the run and the port, for a peer to connect to.
fn listening_producer(d: &TempDir, n: u64) -> (std::process::Child, String) {
    let port = free_port();
    let url = format!("amqp10://127.0.0.1:{port}?bind=producer");
    let n = n.to_string();
    let producers = spawn_run(
        &d.0,
        &[
            "run",
            &url,
            "--segment",
            "producers",
            "-n",
            &n,
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    std::thread::sleep(Duration::from_millis(700));
    (producers, port.to_string())
}

/// Starts the Proton receiver on `port` and waits until it listens.
fn proton_receiver(py: &str, port: u16, expect: u64, limit_s: u64, credit: u32) -> Killed {
    let mut child = Command::new(py)
        .arg(fixture())
        .args([
            "receive",
            &port.to_string(),
            &expect.to_string(),
            &limit_s.to_string(),
            &credit.to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the proton receiver");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(
        line.trim(),
        "listening",
        "the proton receiver did not start"
    );
    Killed(child)
}

/// What a [`proton_receiver`] printed at its end (it ends on its own within its limit).
fn receiver_report(mut k: Killed) -> Value {
    let mut out = String::new();
    k.0.stdout
        .as_mut()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let mut err = String::new();
    k.0.stderr
        .as_mut()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = k.0.wait().unwrap();
    assert!(status.success(), "the proton receiver failed: {out}\n{err}");
    serde_json::from_str(out.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("no JSON from the proton receiver ({e}): {out}\n{err}"))
}

/// A msgbench run whose consumers listen on `url` for `secs` seconds (the consumers segment:
/// it sends nothing itself), given 700 ms to listen before it returns.
fn listening_consumers(d: &TempDir, url: &str, secs: &str) -> std::process::Child {
    let child = spawn_run(
        &d.0,
        &[
            "run",
            url,
            "--segment",
            "consumers",
            "-d",
            secs,
            "--no-output",
        ],
    );
    std::thread::sleep(Duration::from_millis(700));
    child
}

/// Runs the Proton peer in a connecting mode (`send`, `two-sessions`) to its end: the JSON
/// line it printed last.
fn proton_peer(py: &str, args: &[&str]) -> Value {
    let o = Command::new(py).arg(fixture()).args(args).output().unwrap();
    assert!(
        o.status.success(),
        "proton {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    serde_json::from_str(out.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("no JSON from proton {args:?} ({e}): {out}"))
}

/// The JSON report of a finished msgbench run started with [`listening_consumers`].
fn report_of(run: std::process::Child) -> Value {
    let c = run.wait_with_output().unwrap();
    serde_json::from_slice(&c.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&c)))
}

/// Proton listens; msgbench's producers connect and send, unsettled: Proton receives every
/// message, and every one of its outcomes comes back as an ack.
#[test]
fn proton_listens_for_msgbench_producers() {
    let Some(py) = proton_python() else { return };
    let d = TempDir::new("p2p-proton-rx");
    let port = free_port();
    let rx = proton_receiver(&py, port, 10_000, 30, 200);
    let url = format!("amqp10://127.0.0.1:{port}?bind=consumer");
    let r = run(
        &d,
        &url,
        &["-c", "0", "-p", "2", "-n", "10000", "-s", "100"],
    );
    let seen = receiver_report(rx);
    assert_eq!(
        (u(&seen["received"]), u(&seen["bytes"]), u(&seen["links"])),
        (10_000, 1_000_000, 2),
        "{seen}"
    );
    let c = &measure(&r)["counters"];
    assert_eq!((u(&c["sent"]), u(&c["acked"])), (10_000, 10_000), "{c}");
    assert_eq!(u(&c["errors"]["timeout"]), 0, "{c}");
}

/// A receiver that asks for pre-settled delivery (Qpid's AtMostOnce; go-amqp refuses a link
/// whose sender answers otherwise) gets it from a listening producer, whose run then counts
/// its messages as acknowledged when sent, with a warning saying so, and no time-outs.
#[test]
fn a_listening_producer_settles_as_its_receiver_asks() {
    let Some(py) = proton_python() else { return };
    let d = TempDir::new("p2p-proton-at-most-once");
    let (producers, p) = listening_producer(&d, 1000);
    let got = proton_peer(
        &py,
        &["fetch", &p, "msgbench", "1000", "20", "at-most-once"],
    );
    assert_eq!(
        (
            u(&got["received"]),
            u(&got["presettled"]),
            u(&got["sender_settles"])
        ),
        (1000, 1000, 1),
        "{got}"
    );
    let r = report_of(producers);
    let c = &measure(&r)["counters"];
    assert_eq!((u(&c["sent"]), u(&c["acked"])), (1000, 1000), "{c}");
    assert_eq!(u(&c["errors"]["timeout"]), 0, "{c}");
    let said = r["events"].as_array().unwrap().iter().any(|e| {
        e["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("asked for pre-settled delivery")
    });
    assert!(said, "{}", r["events"]);
}

/// A broker's client answers the broker's close with its own before it leaves (AMQP 1.0
/// §2.4.3), rather than dropping TCP under it: Proton, as the "broker", closes the connection
/// mid-run and counts the clients that answered.
#[test]
fn a_broker_client_answers_the_brokers_close() {
    let Some(py) = proton_python() else { return };
    let d = TempDir::new("p2p-proton-close");
    let port = free_port();
    // It closes half a second after its 200th message; msgbench still sends then.
    let rx = proton_receiver(&py, port, 200, 30, 100);
    let url = format!("amqp10://127.0.0.1:{port}");
    let o = msgbench(
        &d.0,
        &[
            "run",
            &url,
            "-c",
            "0",
            "-p",
            "1",
            "-r",
            "200",
            "-d",
            "3s",
            "--warmup",
            "0s",
            "--no-output",
            "--quiet",
            "--format",
            "json",
        ],
    );
    let seen = receiver_report(rx);
    assert!(u(&seen["received"]) >= 200, "{seen}");
    assert_eq!(u(&seen["closes_answered"]), 1, "{seen}\n{}", stderr(&o));
}

/// Proton sends into a listening msgbench consumer: all of its messages are accepted, and
/// msgbench counts every one (foreign: they carry no stamp).
#[test]
fn proton_sends_into_a_listening_consumer() {
    let Some(py) = proton_python() else { return };
    let d = TempDir::new("p2p-proton-tx");
    let port = free_port();
    let url = format!("amqp10://127.0.0.1:{port}?bind=consumer");
    let consumers = listening_consumers(&d, &url, "4s");
    let sent = proton_peer(&py, &["send", &port.to_string(), "msgbench", "3000", "100"]);
    let r = report_of(consumers);
    assert_eq!(
        (u(&sent["sent"]), u(&sent["accepted"]), u(&sent["other"])),
        (3000, 3000, 0),
        "{sent}"
    );
    assert_eq!(u(&r["integrity"]["foreign"]), 3000, "{}", r["integrity"]);
    assert_eq!(count_events(&r, "error"), 0, "{}", r["events"]);
}

/// A sender that detaches its link with an error mid-run: what it sent before is counted,
/// and the listening consumer's events name the peer, the link and the error. The detach
/// had been answered and nothing said: the deliveries just stopped.
#[test]
fn a_sender_giving_up_is_said() {
    let Some(py) = proton_python() else { return };
    let d = TempDir::new("p2p-proton-gives-up");
    let port = free_port();
    let url = format!("amqp10://127.0.0.1:{port}?bind=consumer");
    let consumers = listening_consumers(&d, &url, "3s");
    let sent = proton_peer(
        &py,
        &["send", &port.to_string(), "msgbench", "3000", "100", "1000"],
    );
    let r = report_of(consumers);
    assert_eq!(u(&sent["sent"]), 1000, "{sent}");
    assert_eq!(u(&r["integrity"]["foreign"]), 1000, "{}", r["integrity"]);
    let events = r["events"].to_string();
    assert!(
        events.contains(
            "detached its link to `msgbench`: amqp:internal-error: proton gives up on purpose"
        ),
        "{events}"
    );
}

/// A listening receiver that closes its connection politely mid-run: msgbench's producer says
/// that the peer left, and then why its sends fail, as they begin to. Both had gone unsaid:
/// a polite close was taken for the end of a run, and the failed sends were only counted.
#[test]
fn a_receiver_leaving_mid_run_is_said() {
    let Some(py) = proton_python() else { return };
    let d = TempDir::new("p2p-proton-leaves");
    let port = free_port();
    let rx = proton_receiver(&py, port, 500, 30, 100);
    let url = format!("amqp10://127.0.0.1:{port}?bind=consumer");
    let r = run(&d, &url, &["-c", "0", "--rate", "1000", "-d", "3s"]);
    let seen = receiver_report(rx);
    assert!(u(&seen["received"]) >= 500, "{seen}");
    let events = r["events"].to_string();
    assert!(
        events.contains("the peer closed its connection; it receives nothing more"),
        "{events}"
    );
    assert!(
        events.contains("no consumer of `msgbench` is connected any more; retrying with backoff"),
        "{events}"
    );
    assert!(
        u(&measure(&r)["counters"]["errors"]["send"]) > 0,
        "{}",
        r["phases"]
    );
}

/// The brokered client against an AMQP 1.0 server that attaches its sender and never grants
/// credit (Qpid Proton here; a rhea server did the same): the producer is held in its first
/// send for the whole run. The run still ends soon after its drain (the held producer gets a
/// short grace, not two connect timeouts) and fails its verdict, naming the flow control.
#[test]
fn a_broker_granting_no_credit_fails_the_run_promptly() {
    let Some(py) = proton_python() else { return };
    let d = TempDir::new("amqp10-nocredit");
    let port = free_port();
    let rx = proton_receiver(&py, port, 1, 30, 0);
    let url = format!("amqp10://127.0.0.1:{port}");
    let started = std::time::Instant::now();
    let o = msgbench(
        &d.0,
        &[
            "run",
            &url,
            "-c",
            "0",
            "--rate",
            "100",
            "-d",
            "2s",
            "--warmup",
            "0s",
            "--drain",
            "1s",
            "--no-output",
            "--format",
            "json",
            "--quiet",
        ],
    );
    let took = started.elapsed();
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("nothing was sent") && stderr(&o).contains("blocked in a send"),
        "{}",
        stderr(&o)
    );
    // 2 s measured, 1 s drain, a 2 s grace, start and connect: was 25 s (a 22 s grace).
    assert!(took < Duration::from_secs(12), "took {took:?}");
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(u(&measure(&r)["counters"]["sent"]), 0);
    drop(rx);
}

/// A listening receiver that grants no credit: the producer reports the stall once, and each
/// send that waited the connect timeout fails (a send error: nothing in doubt, nothing lost);
/// a run that sent nothing fails its verdict (exit 3), quoting the stall.
#[test]
fn a_peer_granting_no_credit_is_a_reported_stall() {
    let Some(py) = proton_python() else { return };
    let d = TempDir::new("p2p-nocredit");
    let port = free_port();
    let rx = proton_receiver(&py, port, 1, 8, 0);
    let url = format!("amqp10://127.0.0.1:{port}?bind=consumer");
    let o = msgbench(
        &d.0,
        &[
            "run",
            &url,
            "--warmup",
            "0s",
            "--no-output",
            "-c",
            "0",
            "-d",
            "3s",
            "--connect-timeout",
            "1s",
            "--format",
            "json",
            "--quiet",
        ],
    );
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("nothing was sent") && stderr(&o).contains("granted no credit"),
        "{}",
        stderr(&o)
    );
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    let c = &measure(&r)["counters"];
    assert_eq!(u(&c["sent"]), 0, "{c}");
    assert_eq!(u(&c["errors"]["timeout"]), 0, "not in doubt: {c}");
    assert!(u(&c["errors"]["send"]) >= 1, "{c}");
    let events = r["events"].as_array().unwrap();
    let said = |what: &str| -> Vec<&Value> {
        events
            .iter()
            .filter(|e| e["detail"].as_str().unwrap().contains(what))
            .collect()
    };
    let stalls = said("stalled: amqp10://");
    assert_eq!(stalls.len(), 1, "{events:?}");
    assert_eq!(stalls[0]["kind"], "warning");
    // The runner's word as the sends begin failing, once (the failures go on).
    assert_eq!(
        said("granted no credit for 1s; retrying").len(),
        1,
        "{events:?}"
    );
    drop(rx);
}

/// A receiver that drains (grants credit with drain set, as Qpid JMS's receive with a
/// time-out does) hears back at once: msgbench's sender, with nothing waiting to go, gives the
/// credit back by advancing its delivery count and says so in a flow (spec 2.6.7). It had
/// never answered, so a draining receiver waited for good (found with rhea).
#[test]
fn a_draining_receiver_gets_its_credit_back() {
    let Some(py) = proton_python() else { return };
    let d = TempDir::new("p2p-proton-drain");
    let port = free_port();
    let mut child = Command::new(&py)
        .arg(fixture())
        .args(["drain", &port.to_string(), "15"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the proton drainer");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "listening", "the proton drainer did not start");
    let rx = Killed(child);
    let url = format!("amqp10://127.0.0.1:{port}?bind=consumer");
    let t0 = std::time::Instant::now();
    let _ = msgbench(
        &d.0,
        &[
            "run",
            &url,
            "-c",
            "0",
            "--rate",
            "2",
            "--duration",
            "2s",
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    let seen = receiver_report(rx);
    assert_eq!(seen["drained"], true, "{seen}");
    assert!(t0.elapsed().as_secs() < 12, "{:?}", t0.elapsed());
}

/// A peer that begins a second session on its connection (Qpid JMS begins one per producer
/// or consumer), past the channel-max of 0 a listening msgbench announces: the connection is
/// closed with `amqp:not-allowed` saying why, and msgbench's events say it too. It had
/// ignored the begin and taken the second session's frames for the first's (rhea failed on an
/// attach answered twice; Qpid JMS on an unknown error; msgbench said nothing).
#[test]
fn a_second_session_is_refused_and_said() {
    let Some(py) = proton_python() else { return };
    let d = TempDir::new("p2p-proton-sessions");
    let port = free_port();
    let url = format!("amqp10://127.0.0.1:{port}?bind=consumer");
    let consumers = listening_consumers(&d, &url, "3s");
    let seen = proton_peer(&py, &["two-sessions", &port.to_string(), "msgbench"]);
    let r = report_of(consumers);
    assert_eq!(seen["condition"], "amqp:not-allowed", "{seen}");
    assert!(
        seen["description"]
            .as_str()
            .unwrap_or_default()
            .contains("second session"),
        "{seen}"
    );
    assert!(
        r["events"].to_string().contains("second session"),
        "{}",
        r["events"]
    );
}

/// A receiver attached to an address the listening producer does not send to is refused at
/// once with `amqp:not-found`, naming what it sends to (it had been answered only when the
/// producer gave up waiting, then dropped without a detach); a receiver of the right address
/// then gets every message.
#[test]
fn a_receiver_of_another_address_is_refused_at_once() {
    let Some(py) = proton_python() else { return };
    let d = TempDir::new("p2p-proton-wrong-address");
    let (producers, p) = listening_producer(&d, 2000);
    let wrong = proton_peer(&py, &["fetch", &p, "nosuch", "1", "10"]);
    assert_eq!(wrong["condition"], "amqp:not-found", "{wrong}");
    let why = wrong["description"].as_str().unwrap_or_default();
    assert!(
        why.contains("sends to `msgbench`, not to `nosuch`"),
        "{wrong}"
    );
    assert!(wrong["seconds"].as_f64().unwrap() < 3.0, "at once: {wrong}");
    let right = proton_peer(&py, &["fetch", &p, "msgbench", "2000", "20"]);
    assert_eq!(u(&right["received"]), 2000, "{right}");
    let r = report_of(producers);
    let c = &measure(&r)["counters"];
    assert_eq!((u(&c["sent"]), u(&c["acked"])), (2000, 2000), "{c}");
    let said = r["events"].as_array().unwrap().iter().any(|e| {
        e["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("not to `nosuch`")
    });
    assert!(said, "{}", r["events"]);
}
