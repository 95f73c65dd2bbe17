//! msgbench's own servers against clients msgbench did not write: `serve amqp-sink` with pika,
//! `serve mqtt` with paho-mqtt (MQTT 3.1.1 and 5), `serve ws-broadcast` with websockets (all
//! three Debian's python3-* packages for the system Python), `serve http` with curl and nghttp
//! (HTTP/1.1, h2c, HTTPS with HTTP/2 by ALPN). A server that only understood msgbench's own
//! client — or agreed with it on a misreading of the protocol — fails here.
//!
//! Each test starts the server from the built binary on a free loopback port, drives it with the
//! third-party client (the Python peers are scripts under `tests/fixtures/peer_*.py` that print
//! what they saw as JSON) and compares what the client saw with what the protocol prescribes,
//! exactly. `scripts/brokers.sh up` installs the clients and `scripts/brokers.sh env` exports
//! `MSGBENCH_IT_PEER_PYTHON`; without it the system Python `/usr/bin/python3` is tried. A test
//! whose client is not installed says `skipped: install ...` and passes; one whose client is
//! there asserts everything. The TLS variants use the test CA of `scripts/brokers.sh` (see
//! [`test_certs`]).

use crate::util;

use serde_json::{Value, json};
use std::io::{BufRead, Read};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use util::*;

/// The longest any peer may take before it counts as hung (each needs a few seconds at most).
const PEER_LIMIT: Duration = Duration::from_secs(60);

pub(crate) fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Whether `python` imports `module`.
fn imports(python: &str, module: &str) -> bool {
    Command::new(python)
        .args(["-c", &format!("import {module}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The Python that imports `module` (from Debian package `package`): `MSGBENCH_IT_PEER_PYTHON`
/// when set (then it must import it), else the system Python if it does; `None` (the test is
/// skipped, and says so) when neither.
pub(crate) fn peer_python(module: &str, package: &str) -> Option<String> {
    if let Ok(py) = std::env::var("MSGBENCH_IT_PEER_PYTHON") {
        assert!(
            imports(&py, module),
            "MSGBENCH_IT_PEER_PYTHON={py} cannot import {module}: install the Debian package {package}"
        );
        return Some(py);
    }
    let py = "/usr/bin/python3";
    if imports(py, module) {
        return Some(py.to_string());
    }
    eprintln!(
        "skipped: install the Debian package {package} ({py} cannot import {module}; \
         `scripts/brokers.sh up` installs it)"
    );
    None
}

/// Starts a Python peer running `script` with `args` and waits for its first line, `ready`
/// (it has subscribed); returns it with its stdout for the lines that follow.
pub(crate) fn ready_peer(
    py: &str,
    script: &str,
    args: &[&str],
) -> (
    std::process::Child,
    std::io::BufReader<std::process::ChildStdout>,
) {
    use std::io::BufRead;
    let mut sub = Command::new(py)
        .arg("-c")
        .arg(script)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(sub.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "the peer did not get ready");
    (sub, out)
}

/// A paho-mqtt subscriber on `filter` at `mqtt_url` that says `ready` once subscribed, then
/// counts messages until `total` came (or 60 s passed) and prints the count: the third-party
/// witness of what msgbench published.
pub(crate) fn paho_counter(
    py: &str,
    mqtt_url: &str,
    filter: &str,
    total: u64,
) -> (
    std::process::Child,
    std::io::BufReader<std::process::ChildStdout>,
) {
    let script = r#"
import sys, time
import paho.mqtt.client as mqtt
host, port, topic, total = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
n = [0]
def on_message(c, u, m):
    n[0] += 1
c = mqtt.Client()
c.on_message = on_message
c.on_connect = lambda c, u, f, rc: c.subscribe(topic, qos=1)
c.connect(host, port)
c.loop_start()
time.sleep(1)
print("ready", flush=True)
end = time.time() + 60
while n[0] < total and time.time() < end:
    time.sleep(0.05)
time.sleep(0.5)
c.loop_stop()
print(n[0], flush=True)
"#;
    let addr = mqtt_url.trim_start_matches("mqtt://");
    let (host, port) = addr.rsplit_once(':').unwrap();
    ready_peer(py, script, &[host, port, filter, &total.to_string()])
}

/// Whether program `bin` (from Debian package `package`) runs; says the test is skipped if not.
fn have_tool(bin: &str, package: &str) -> bool {
    have_tool_asked(bin, "--version", package)
}

/// [`have_tool`] for a tool that tells its version to `version_flag`.
pub(crate) fn have_tool_asked(bin: &str, version_flag: &str, package: &str) -> bool {
    let ok = Command::new(bin)
        .arg(version_flag)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        // Under the test command (`scripts/brokers.sh env` exported the peers), missing is a
        // failure, never a silent skip.
        assert!(
            std::env::var_os("MSGBENCH_IT_PEER_PYTHON").is_none(),
            "{bin} is missing: install the Debian package {package}"
        );
        eprintln!(
            "skipped: install the Debian package {package} ({bin} is missing; \
             `scripts/brokers.sh up` installs it)"
        );
    }
    ok
}

/// What a finished peer printed.
pub(crate) struct Ran {
    ok: bool,
    stdout: String,
    stderr: String,
    what: String,
}

impl Ran {
    pub(crate) fn context(&self) -> String {
        format!(
            "{}\nstdout:\n{}\nstderr:\n{}",
            self.what, self.stdout, self.stderr
        )
    }

    /// Requires success and returns the JSON object on the last line of stdout.
    pub(crate) fn json(&self) -> Value {
        assert!(self.ok, "the peer failed: {}", self.context());
        let line = self.stdout.lines().last().unwrap_or_default();
        serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("the peer printed no JSON ({e}): {}", self.context()))
    }
}

/// Runs `cmd` to its end; a peer still running after [`PEER_LIMIT`] is killed and fails the
/// test as hung (a server that stops answering must not hang the suite).
pub(crate) fn run(cmd: &mut Command) -> Ran {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {what}: {e}"));
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    // Killed (by its PID) on every way out, panics included.
    let mut guard = Killed(child);
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = guard.0.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > PEER_LIMIT {
            guard.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let ran = Ran {
        ok: status.is_some_and(|s| s.success()),
        stdout: reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
        what,
    };
    assert!(
        status.is_some(),
        "hung: killed after {PEER_LIMIT:?}: {}",
        ran.context()
    );
    ran
}

pub(crate) fn port_of(url: &str) -> String {
    url.rsplit(':').next().unwrap().to_string()
}

/// The server's TLS options, from the brokers' test CA: (CA file, `--tls-cert C --tls-key K`).
fn tls_args() -> (String, Vec<String>) {
    let (ca, cert, key) = test_certs();
    let args = vec![
        "--tls-cert".to_string(),
        cert.to_str().unwrap().to_string(),
        "--tls-key".to_string(),
        key.to_str().unwrap().to_string(),
    ];
    (ca, args)
}

/// Removes `key` from the object `v` and returns it.
fn take(v: &mut Value, key: &str) -> Value {
    v.as_object_mut()
        .and_then(|o| o.remove(key))
        .unwrap_or_else(|| panic!("{key} missing from {v}"))
}

// ---------------------------------------------------------------------------------------------
// AMQP 0-9-1: serve amqp-sink + pika

/// What pika's asynchronous publisher sees: every one of 2000 pipelined publishes (one larger
/// than frame-max, in several body frames) confirmed exactly once, delivery tags 1..=2000 in
/// order, no nack; topology declared (a server-named `amq.gen-` queue); clean closes; the
/// server (`product`) saying it takes publisher confirms.
pub(crate) fn assert_pika_confirms(mut seen: Value, product: &str, ctx: &str) {
    let frames = take(&mut seen, "ack_frames").as_u64().unwrap();
    let multiple = take(&mut seen, "multiple_acks").as_u64().unwrap();
    // Batched acks (`multiple`) are the sink's documented way; each must move forward.
    assert!(
        (1..=2000).contains(&frames) && multiple <= frames,
        "{frames} ack frames, {multiple} multiple: {ctx}"
    );
    assert_eq!(
        seen,
        json!({
            "count": 2000,
            "published": 2000,
            "acked": 2000,
            "nacked": 0,
            "last_tag": 2000,
            "out_of_order": 0,
            "queue_generated": true,
            "queue_counts": [0, 0],
            "server_product": product,
            "publisher_confirms": true,
            "channel_closed": [0, "Normal shutdown"],
            "connection_closed": ["ConnectionClosedByClient", 200],
        }),
        "{ctx}"
    );
}

#[test]
fn amqp_sink_with_pika_publisher_confirms() {
    let Some(py) = peer_python("pika", "python3-pika") else {
        return;
    };
    let sink = Server::amqp_sink("amqp", &[]);
    let ran = run(Command::new(&py)
        .arg(fixture("peer_pika.py"))
        .args([&port_of(&sink.url), "confirms"]));
    assert_pika_confirms(ran.json(), "msgbench amqp-sink", &ran.context());
}

#[test]
fn amqp_sink_over_tls_with_pika() {
    let Some(py) = peer_python("pika", "python3-pika") else {
        return;
    };
    let (ca, tls) = tls_args();
    let tls: Vec<&str> = tls.iter().map(String::as_str).collect();
    let sink = Server::amqp_sink("amqps", &tls);
    let ran = run(Command::new(&py).arg(fixture("peer_pika.py")).args([
        &port_of(&sink.url),
        "confirms",
        &ca,
    ]));
    assert_pika_confirms(ran.json(), "msgbench amqp-sink", &ran.context());
}

/// The rest of what the sink documents, as pika's blocking client sees it: consume-ok and
/// cancel-ok (nothing is ever delivered), get-empty, passive declares, transactions,
/// heartbeats both ways while idle; and errors answered as the spec says rather than with a
/// hang: an unknown delivery tag and confirm + tx close the channel with 406, a method the sink
/// does not implement closes the connection with 540.
#[test]
fn amqp_sink_with_pika_consumer_transactions_and_errors() {
    let Some(py) = peer_python("pika", "python3-pika") else {
        return;
    };
    let sink = Server::amqp_sink("amqp", &[]);
    let ran = run(Command::new(&py)
        .arg(fixture("peer_pika.py"))
        .args([&port_of(&sink.url), "methods"]));
    let mut seen = ran.json();
    let idle = take(&mut seen, "idle_frames_received").as_u64().unwrap();
    // A 1 s heartbeat over 3.5 idle seconds: the sink sent some (it writes one when it has
    // written nothing for an interval).
    assert!(
        idle >= 2,
        "{idle} frames from the sink while idle: {}",
        ran.context()
    );
    assert_eq!(
        seen,
        json!({
            "heartbeat": 1,
            "declare_ok": ["msgbench.thirdparty.q", 0, 0],
            "passive_ok": "some.queue.nobody.declared",
            "consumer_tag": "peer-ctag",
            "delivered": 0,
            "cancelled": true,
            "get": [null, null, null],
            "tx": "ok",
            "open_after_idle": true,
            "bad_ack": [406, "PRECONDITION_FAILED - unknown delivery tag"],
            "confirm_then_tx": [406, "PRECONDITION_FAILED - channel is in confirm mode"],
            "open_before_540": true,
            "not_implemented": [540, "method not implemented by the amqp sink"],
            "not_implemented_fast": true,
            "open_after_540": false,
        }),
        "{}",
        ran.context()
    );
}

// ---------------------------------------------------------------------------------------------
// MQTT 3.1.1 and 5: serve mqtt + paho-mqtt

/// Runs `peer_paho.py` scenario `scenario` at protocol level `level` (4 or 5) against a fresh
/// broker (plain, or TLS with the test CA).
fn paho(py: &str, level: u8, scenario: &str, tls: bool) -> (Value, String) {
    let (broker, ca) = if tls {
        let (ca, _, _) = test_certs();
        (Server::mqtts(), Some(ca))
    } else {
        (Server::mqtt(), None)
    };
    let mut cmd = Command::new(py);
    cmd.arg(fixture("peer_paho.py")).args([
        port_of(&broker.url),
        level.to_string(),
        scenario.to_string(),
    ]);
    cmd.args(ca);
    let ran = run(&mut cmd);
    (ran.json(), ran.context())
}

fn pubsub_expected() -> Value {
    json!({
        "connack_sub": [0, 0],
        "connack_pub": [0, 0],
        "granted": [[2], [1]],
        "order_q0": true,
        "order_q1": true,
        "order_q2": true,
        "extra_after_batches": [],
        "matching": [["t", "parent", 1, 0], ["x/any/y", "downgraded", 1, 0]],
        "big": [1, true, 1],
        "after_unsubscribe": [],
        "retained_live": [["t/r/1", "kept", 1, 0]],
        "late_granted": [2],
        "retained_new": [["t/r/1", "kept", 1, 1]],
        "retained_delete_live": [["t/r/1", "", 1, 0], ["t/r/1", "", 1, 0]],
        "retained_after_delete": [],
        "alive_after_pings": true,
        "disconnect_rc": [0, 0, 0, 0],
    })
}

/// Wildcards (`#` matching its parent level too), QoS 0, 1 and 2 received exactly and in order,
/// delivery QoS lowered to the subscription's, 256 KiB payloads, unsubscribe, retained messages
/// set, delivered flagged only to new subscriptions, deleted by an empty one; keep-alive pings;
/// clean disconnects.
#[test]
fn mqtt_311_with_paho() {
    let Some(py) = peer_python("paho.mqtt.client", "python3-paho-mqtt") else {
        return;
    };
    let (seen, ctx) = paho(&py, 4, "pubsub", false);
    assert_eq!(seen, pubsub_expected(), "{ctx}");
}

#[test]
fn mqtt_5_with_paho() {
    let Some(py) = peer_python("paho.mqtt.client", "python3-paho-mqtt") else {
        return;
    };
    let (seen, ctx) = paho(&py, 5, "pubsub", false);
    assert_eq!(seen, pubsub_expected(), "{ctx}");
}

/// A persistent session (3.1.1 clean session 0, MQTT 5 clean start 0 with a session expiry)
/// keeps the subscription and the QoS 1 messages published while its client was away, and
/// hands them over in order with session present = 1; a clean session discards it, and so
/// does (MQTT 5) a DISCONNECT setting the session expiry to 0. Over TLS too (paho verifying
/// the test CA's server certificate).
#[test]
fn mqtt_persistent_sessions_with_paho() {
    let Some(py) = peer_python("paho.mqtt.client", "python3-paho-mqtt") else {
        return;
    };
    let queued: Vec<Value> = (0..10)
        .map(|i| json!([format!("s/{i}"), format!("offline-{i}"), 1, 0]))
        .collect();
    let expected = json!({
        "first_connack": [0, 0],
        "granted": [1],
        "second_connack": [1, 0],
        "queued": queued,
        "clean_connack": [0, 0],
        "clean_got": [],
    });
    for (level, tls) in [(4, false), (5, false), (4, true), (5, true)] {
        let (seen, ctx) = paho(&py, level, "session", tls);
        let mut expected = expected.clone();
        if level == 5 {
            // A DISCONNECT's session expiry of 0 ended the session: not present.
            expected["ended_by_disconnect_connack"] = json!([0, 0]);
        }
        assert_eq!(seen, expected, "level {level}, tls {tls}: {ctx}");
    }
}

/// Will messages: published when a connection breaks (at their QoS; a retained will is kept
/// for later subscribers), not after a clean DISCONNECT. MQTT 5 also: DISCONNECT with reason
/// 0x04 publishes it, its properties go with it, the will delay interval holds it back until the delay has passed, not at
/// all when the session is resumed within it, and not past the end of a session that ends with
/// its connection, nor when a new connection takes the session over within it (the broker read
/// the resumption count after letting the new connection in: CI once saw the will).
#[test]
fn mqtt_will_messages_with_paho() {
    let Some(py) = peer_python("paho.mqtt.client", "python3-paho-mqtt") else {
        return;
    };
    let mut expected = json!({
        "will_on_crash": [["w/crasher", "gone-away", 1, 0]],
        "retained_will_live": [["w/keeper/status", "offline", 2, 0]],
        "retained_will_later": [["w/keeper/status", "offline", 2, 1]],
        "will_after_disconnect": [],
    });
    let (seen, ctx) = paho(&py, 4, "will", false);
    assert_eq!(seen, expected, "{ctx}");
    let v5 = json!({
        "will_on_disconnect_0x04": [["w/asking", "asked-for", 1, 0]],
        "will_properties": [["wp/status", "gone", 1, 0, {
            "ContentType": "text/plain",
            "ResponseTopic": "wp/ask",
            "UserProperty": [["why", "crash"], ["n", "1"]],
        }]],
        "will_session_ends": [["w/ending", "session-over", 1, 0]],
        "will_session_ends_fast": true,
        "resumed_connack": [1, 0],
        "taken_over_connack": [1, 0],
        "delayed_will": [["w/delayed", "after-delay", 1, 0]],
        "delayed_will_waited": true,
        "resumed_within_delay": [],
    });
    for (k, v) in v5.as_object().unwrap() {
        expected[k] = v.clone();
    }
    let (seen, ctx) = paho(&py, 5, "will", false);
    assert_eq!(seen, expected, "{ctx}");
}

/// MQTT 5 beyond the message itself: PUBLISH properties reach MQTT 5 subscribers unaltered
/// (payload format, content type, response topic, correlation data, user properties in order,
/// message expiry counted down) and not 3.1.1 ones, stay with a retained message, and a message
/// that expired while its subscriber was away is not delivered; subscription options no local,
/// retain as published and retain handling 0/1/2 are obeyed; CONNACK says subscription
/// identifiers are not available (the broker does not send them back); nothing larger than a
/// client's maximum packet size is sent to it.
#[test]
fn mqtt_5_properties_and_subscription_options_with_paho() {
    let Some(py) = peer_python("paho.mqtt.client", "python3-paho-mqtt") else {
        return;
    };
    let full = json!({
        "ContentType": "text/plain; charset=utf-8",
        "CorrelationData": "0001636f7272ff",
        "MessageExpiryInterval": true,
        "PayloadFormatIndicator": 1,
        "ResponseTopic": "p/reply/42",
        "UserProperty": [["k", "v1"], ["k", "v2"], ["another", "one"]],
    });
    let (seen, ctx) = paho(&py, 5, "props", false);
    assert_eq!(
        seen,
        json!({
            "connack_props": [[0, 0], [{"SubscriptionIdentifierAvailable": 0}]],
            "forwarded": [
                ["p/req", "with properties", 1, 0, full],
                ["p/req", "user property only", 1, 0, {"UserProperty": [["only", "this"]]}],
                ["p/req", "no properties", 0, 0, {}],
            ],
            "to_311": [
                ["p/req", "with properties", 1, 0],
                ["p/req", "user property only", 1, 0],
                ["p/req", "no properties", 0, 0],
            ],
            "retained": [["p/kept", "retained", 1, 1, full]],
            "away_connack": [1, 0],
            "after_expiry": [["e/long", "lasts", 1, 0, full]],
            "max_packet": [["mp/small", "s", 1, 0]],
            "no_local": [["nl/other", "theirs", 1, 0]],
            "retain_as_published": [["rap/x", "flag kept", 1, 1], ["norap/x", "flag cleared", 1, 0]],
            "retain_handling_2": [],
            "retain_handling_1_new": [["rh/1", "retained-rh", 1, 1]],
            "retain_handling_1_again": [],
            "retain_handling_0_again": [["rh/1", "retained-rh", 1, 1]],
        }),
        "{ctx}"
    );
}

// ---------------------------------------------------------------------------------------------
// WebSocket: serve ws-broadcast + websockets

fn broadcast_expected() -> Value {
    let sizes = json!([0, 1, 125, 126, 127, 65535, 65536, 1048576, 28]);
    json!({
        "negotiated": [null, null],
        "exact_a": true,
        "exact_b": true,
        "sizes_a": sizes,
        "sizes_b": sizes,
        "types_a": ["bytes"],
        "types_b": ["bytes"],
        "extra_a": 0,
        "extra_b": 0,
        "echoed_to_sender": 0,
        "pong": true,
        "close_a": [1000, "done here"],
        "close_b": [4001, "app-specific"],
        "close_sender": 1000,
    })
}

/// Three websockets clients: every binary message one sends (every length encoding, 1 MiB, a
/// fragmented one) reaches the two others exactly once, unchanged, in order, and not the
/// sender; text requests are not relayed; pings get their pongs; closes started by clients are
/// answered with their code. No extension or subprotocol is agreed (none is offered back).
#[test]
fn ws_broadcast_with_websockets() {
    let Some(py) = peer_python("websockets", "python3-websockets") else {
        return;
    };
    let server = Server::ws_broadcast(&[]);
    let url = format!("ws://127.0.0.1:{}/feed", port_of(&server.url));
    let ran = run(Command::new(&py)
        .arg(fixture("peer_websockets.py"))
        .args([&url, "broadcast"]));
    assert_eq!(ran.json(), broadcast_expected(), "{}", ran.context());
}

/// The `websockets` relay (tests/fixtures/peer_websockets_relay.py) on `ports`, with `env`
/// (`RELAY_TOKEN`, `RELAY_SUBPROTOCOL`), once it listens.
fn websockets_relay(py: &str, ports: &[u16], env: &[(&str, &str)]) -> Killed {
    let mut relay = Killed(
        Command::new(py)
            .arg(fixture("peer_websockets_relay.py"))
            .args(ports.iter().map(|p| p.to_string()))
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting the websockets relay"),
    );
    let mut line = String::new();
    std::io::BufReader::new(relay.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim_end(), "relay ready");
    relay
}

/// A gateway that wants a token and a subprotocol in the upgrade request (a `websockets`
/// relay refusing upgrades without them, then naming the subprotocol in its 101): without
/// `--header` msgbench says the server refused and why; with them every message arrives, and
/// the token is in no file the run writes.
#[test]
fn ws_upgrade_carries_the_headers_a_gateway_needs() {
    let Some(py) = peer_python("websockets", "python3-websockets") else {
        return;
    };
    let port = free_port();
    let _relay = websockets_relay(
        &py,
        &[port],
        &[("RELAY_TOKEN", "s3cret-XYZ"), ("RELAY_SUBPROTOCOL", "mqtt")],
    );
    let url = format!("ws://127.0.0.1:{port}/");
    let d = TempDir::new("ws-headers");
    let base = [
        "run", &url, "-p", "1", "-c", "2", "-n", "50", "--rate", "100",
    ];
    let o = msgbench(&d.0, &[&base[..], &["--warmup", "0s"]].concat());
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("refused the WebSocket upgrade") && err.contains("401"),
        "{err}"
    );
    let auth = ["--header", "Authorization: Bearer s3cret-XYZ"];
    let o = msgbench(&d.0, &[&base[..], &auth, &["--warmup", "0s"]].concat());
    assert!(stderr(&o).contains("400"), "{}", stderr(&o));
    let r = run_json(
        &d.0,
        &[
            &base[..],
            &auth,
            &["--header", "Sec-WebSocket-Protocol: mqtt", "--warmup", "0s"],
        ]
        .concat(),
    );
    let i = &r["integrity"];
    assert_eq!((u(&i["expected"]), u(&i["delivered"])), (100, 100), "{i}");
    for f in std::fs::read_dir(&d.0).unwrap() {
        let text = std::fs::read(f.unwrap().path()).unwrap_or_default();
        assert!(!String::from_utf8_lossy(&text).contains("s3cret-XYZ"));
    }
}

/// msgbench's WebSocket client against a server it did not write: a `websockets` relay on two
/// ports, msgbench's clients spread over both in one URL and, with an open-file limit of 200 for
/// 300 receivers, held in io_uring tables. Every receiver gets every message exactly once.
#[test]
fn ws_clients_through_a_websockets_relay() {
    let Some(py) = peer_python("websockets", "python3-websockets") else {
        return;
    };
    let ports = [free_port(), free_port()];
    let _relay = websockets_relay(&py, &ports, &[]);
    let url = format!("ws://127.0.0.1:{},127.0.0.1:{}/", ports[0], ports[1]);
    let d = TempDir::new("ws-peer-relay");
    let args = [
        "run",
        &url,
        "-p",
        "1",
        "-c",
        "300",
        "--connect-rate",
        "3000",
        "-n",
        "400",
        "--rate",
        "200",
        "--warmup",
        "0s",
    ];
    let r = finish_json(spawn_run_with_nofile(&d.0, &args, 200));
    let i = &r["integrity"];
    assert_eq!(
        (
            u(&i["expected"]),
            u(&i["delivered"]),
            u(&i["lost"]),
            u(&i["duplicated"])
        ),
        (400 * 300, 400 * 300, 0, 0),
        "{i}"
    );
    assert!(
        r["events"].to_string().contains("io_uring tables"),
        "{}",
        r["events"]
    );
}

/// An echo server msgbench did not write (the `websockets` relay in echo mode, which greets
/// every client with a message of its own first): with `--echo` the echo of each message is its
/// response, timed from the intended send time, and the run needs no consumers; with several
/// messages in flight, one the server leaves unanswered (every 50th) is counted in doubt at the
/// ack time-out and the rest are answered, none twice.
#[test]
fn ws_echo_server_answers_are_responses() {
    let Some(py) = peer_python("websockets", "python3-websockets") else {
        return;
    };
    let port = free_port();
    let _echo = websockets_relay(&py, &[port], &[("RELAY_ECHO", "1")]);
    let url = format!("ws://127.0.0.1:{port}/");
    let d = TempDir::new("ws-echo");
    let base = [
        "run", &url, "--echo", "-p", "4", "-n", "2000", "--warmup", "0s",
    ];
    let r = run_json(&d.0, &[&base[..], &["-o", "r.jsonl"]].concat());
    let m = measure(&r);
    let c = &m["counters"];
    assert_eq!((u(&c["acked"]), u(&c["received"])), (2000, 0), "{m}");
    assert_eq!(u(&c["errors"]["timeout"]), 0, "{c}");
    assert_eq!(u(&m["publish"]["count"]), 2000, "{m}");
    assert_eq!(
        u(&m["e2e"]["count"]),
        2000,
        "responses from the intended time: {m}"
    );
    assert!(u(&m["e2e"]["p50"]) > 0, "{m}");
    assert_valid_and_pure(&d.0, "r.jsonl", &r);
    // Text payloads are echoed as text and matched by their text stamp.
    let r = run_json(&d.0, &[&base[..], &["--stamp", "text"]].concat());
    assert_eq!(u(&measure(&r)["counters"]["acked"]), 2000, "{r}");

    let port = free_port();
    let _skipping = websockets_relay(
        &py,
        &[port],
        &[("RELAY_ECHO", "1"), ("RELAY_ECHO_SKIP", "50")],
    );
    let url = format!("ws://127.0.0.1:{port}/");
    let r = run_json(
        &d.0,
        &[
            "run",
            &url,
            "--echo",
            "-p",
            "2",
            "-n",
            "1000",
            "--max-in-flight",
            "8",
            "--ack-timeout",
            "300ms",
            "--warmup",
            "0s",
        ],
    );
    let c = &measure(&r)["counters"];
    assert_eq!(
        (u(&c["acked"]), u(&c["errors"]["timeout"])),
        (980, 20),
        "every 50th of each connection's 500 unanswered: {c}"
    );
    // Echo mode is WebSocket's: elsewhere it is refused, not ignored.
    let o = msgbench(
        &d.0,
        &["run", "nats://u:secret@127.0.0.1:1", "--echo", "-n", "1"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("ws:// or wss://, not nats://") && !stderr(&o).contains("secret"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn wss_broadcast_with_websockets() {
    let Some(py) = peer_python("websockets", "python3-websockets") else {
        return;
    };
    let (ca, _, _) = test_certs();
    let server = Server::wss_broadcast();
    let url = format!("wss://127.0.0.1:{}/", port_of(&server.url));
    let ran =
        run(Command::new(&py)
            .arg(fixture("peer_websockets.py"))
            .args([&url, "broadcast", &ca]));
    assert_eq!(ran.json(), broadcast_expected(), "{}", ran.context());
}

/// Clients breaking RFC 6455 (frames written with websockets' own frame writer) are failed
/// with the prescribed close code — 1002 for a continuation with no message begun, a new
/// message inside a fragmented one, a one-byte close body or a close code no endpoint may send;
/// 1007 for text or a close reason that is not UTF-8 — instead of having their invalid close
/// echoed (which websockets rejects as a protocol error) or their stray frames broadcast; the
/// watching client gets none of it, and a well-formed message afterwards.
#[test]
fn ws_broadcast_fails_rfc6455_violations_with_their_close_codes() {
    let Some(py) = peer_python("websockets", "python3-websockets") else {
        return;
    };
    let server = Server::ws_broadcast(&[]);
    let url = format!("ws://127.0.0.1:{}/", port_of(&server.url));
    let ran = run(Command::new(&py)
        .arg(fixture("peer_websockets.py"))
        .args([&url, "violations"]));
    assert_eq!(
        ran.json(),
        json!({
            "continuation_first": 1002,
            "data_mid_message": 1002,
            "text_not_utf8": 1007,
            "close_one_byte": 1002,
            "close_code_1005": 1002,
            "close_code_999": 1002,
            "close_reason_not_utf8": 1007,
            "watcher_got": [],
            "after": "well-formed",
        }),
        "{}",
        ran.context()
    );
}

/// The server stopping (Ctrl-C or SIGTERM) closes every client with a close frame, 1001 going away, and
/// the client completes the handshake.
#[test]
fn ws_broadcast_shutdown_closes_websockets_clients_with_1001() {
    let Some(py) = peer_python("websockets", "python3-websockets") else {
        return;
    };
    // SIGTERM too: how a container or a service manager stops a server.
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let port = free_port();
        let mut server = Killed(
            Command::new(bin())
                .args(["serve", "ws-broadcast", "--quiet", "--listen"])
                .arg(format!("127.0.0.1:{port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("starting msgbench serve ws-broadcast"),
        );
        assert!(
            listens_within(port, Duration::from_secs(5)),
            "the server did not listen"
        );
        let mut peer = Killed(
            Command::new(&py)
                .arg(fixture("peer_websockets.py"))
                .args([&format!("ws://127.0.0.1:{port}/"), "shutdown"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let mut out = std::io::BufReader::new(peer.0.stdout.take().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        assert_eq!(
            line.trim(),
            "ready",
            "the websockets client did not connect"
        );
        // SAFETY: signalling our own child by its PID.
        unsafe { libc::kill(server.0.id() as i32, sig) };
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(s) = server.0.try_wait().unwrap() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "the server did not stop on signal {sig}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(
            status.success(),
            "serve ws-broadcast exited with {status} on signal {sig}"
        );
        let mut rest = String::new();
        out.read_to_string(&mut rest).unwrap();
        let o = finish_stderr(&mut peer.0);
        let seen: Value = serde_json::from_str(rest.trim())
            .unwrap_or_else(|e| panic!("no JSON from the client ({e}): {rest}\n{o}"));
        assert_eq!(
            seen,
            json!({"code": 1001, "server_closed_first": true, "close_code": 1001}),
            "signal {sig}: {o}"
        );
    }
}

/// Waits (up to [`PEER_LIMIT`]) for a child whose stdout was read to its end; its stderr.
fn finish_stderr(child: &mut std::process::Child) -> String {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < PEER_LIMIT, "the client hung");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    err
}

// ---------------------------------------------------------------------------------------------
// HTTP: serve http + curl, nghttp

/// curl, quiet but showing errors, failing on HTTP errors, bounded in time.
fn curl() -> Command {
    let mut c = Command::new("curl");
    c.args(["-sS", "--max-time", "20"]);
    c
}

/// Whether the installed curl speaks HTTP/2 (`HTTP2` among the features of `curl -V`).
fn curl_has_http2() -> bool {
    let o = Command::new("curl").arg("-V").output().unwrap();
    let has = String::from_utf8_lossy(&o.stdout)
        .lines()
        .any(|l| l.starts_with("Features:") && l.split_whitespace().any(|f| f == "HTTP2"));
    if !has {
        eprintln!("skipped (HTTP/2 part): this curl has no HTTP2 feature (curl -V)");
    }
    has
}

const WRITE_OUT: &str = "%{http_code} %{http_version} %{num_connects} %{size_download} %{method}\n";

/// HTTP/1.1 with curl: GET, HEAD, POST with a body, a chunked POST, a 2 MB POST with
/// `Expect: 100-continue` (100 Continue, then 200), all on one kept-alive connection (curl's
/// `num_connects` is 1 for the first transfer and 0 for those reusing it), the body `ok\n`
/// every time; then `Connection: close` honoured (the server says so and curl reconnects).
#[test]
fn http_1_1_with_curl() {
    if !have_tool("curl", "curl") {
        return;
    }
    let d = TempDir::new("thirdparty-curl");
    let big = d.path("big.bin");
    std::fs::write(&big, vec![b'z'; 2_000_000]).unwrap();
    let chunked = d.path("chunked.txt");
    std::fs::write(&chunked, "a chunked request body\n".repeat(500)).unwrap();
    let server = Server::http();
    let url = |path: &str| format!("http://127.0.0.1:{}{path}", port_of(&server.url));
    let big_arg = format!("@{}", big.display());
    let chunked_arg = format!("@{}", chunked.display());
    // One curl, several transfers (`--next` separates their options).
    let transfers: Vec<Vec<String>> = vec![
        vec![url("/get")],
        // -I writes the head as the output: discarded (the write-out line shows the rest).
        vec!["-I".into(), "-o".into(), "/dev/null".into(), url("/head")],
        vec!["-d".into(), "name=value&x=1".into(), url("/form")],
        vec![
            "-H".into(),
            "Transfer-Encoding: chunked".into(),
            "--data-binary".into(),
            chunked_arg,
            url("/chunked"),
        ],
        vec![
            "-H".into(),
            "Expect: 100-continue".into(),
            "--expect100-timeout".into(),
            "10".into(),
            "--data-binary".into(),
            big_arg,
            url("/big"),
        ],
        vec![
            "-X".into(),
            "PUT".into(),
            "-d".into(),
            "put".into(),
            url("/put"),
        ],
        vec![url("/last")],
    ];
    let mut cmd = curl();
    cmd.arg("-v");
    for (i, t) in transfers.iter().enumerate() {
        if i > 0 {
            cmd.arg("--next");
        }
        cmd.args(["-sS", "--fail", "-w", WRITE_OUT]);
        if !t.contains(&"-o".to_string()) {
            cmd.args(["-o", "-"]);
        }
        cmd.args(t);
    }
    let ran = run(&mut cmd);
    assert!(ran.ok, "curl failed: {}", ran.context());
    // HEAD has no body; every other transfer's body is `ok\n` followed by its write-out line.
    let expected = "ok\n200 1.1 1 3 GET\n\
                    200 1.1 0 0 HEAD\n\
                    ok\n200 1.1 0 3 POST\n\
                    ok\n200 1.1 0 3 POST\n\
                    ok\n200 1.1 0 3 POST\n\
                    ok\n200 1.1 0 3 PUT\n\
                    ok\n200 1.1 0 3 GET\n";
    assert_eq!(ran.stdout, expected, "{}", ran.context());
    let log = &ran.stderr;
    assert!(
        log.contains("< HTTP/1.1 100 Continue"),
        "no 100 Continue for the Expect request: {log}"
    );
    assert_eq!(
        log.matches("< content-length: 3").count(),
        7,
        "every answer has its length: {log}"
    );
    assert_eq!(log.matches("Connected to").count(), 1, "{log}");

    // Connection: close is honoured: the answer says so, and each transfer connects anew.
    let ran = run(curl()
        .args(["-v", "-H", "Connection: close", "-w", WRITE_OUT])
        .args([url("/c1"), url("/c2")]));
    assert!(ran.ok, "curl failed: {}", ran.context());
    assert_eq!(
        ran.stdout,
        "ok\n200 1.1 1 3 GET\nok\n200 1.1 1 3 GET\n",
        "{}",
        ran.context()
    );
    assert_eq!(
        ran.stderr.matches("< connection: close").count(),
        2,
        "{}",
        ran.context()
    );
}

/// An HTTP/1.1 request without a Host header, or with two, is answered 400 and the connection
/// closed (RFC 9112 §3.2, a MUST; found with a raw client: it had been answered 200); curl with
/// its Host header removed (`-H "Host:"`) gets the 400 too.
#[test]
fn http_1_1_requests_need_one_host() {
    use std::io::{Read, Write};
    let server = Server::http();
    let port = port_of(&server.url);
    for req in [
        "GET / HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    ] {
        let mut s = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 400"), "{req:?}: {answer}");
        assert!(answer.contains("connection: close"), "{req:?}: {answer}");
    }
    if have_tool("curl", "curl") {
        let ran = run(curl()
            .args(["-H", "Host:", "-o", "/dev/null", "-w", "%{http_code}"])
            .arg(format!("http://127.0.0.1:{port}/")));
        assert_eq!(ran.stdout, "400", "{}", ran.context());
    }
}

/// HTTP/2 with prior knowledge (h2c) on the same port: curl (GET, and a POST whose 300 KB body
/// is larger than HTTP/2's initial 64 KiB window, so it needs the server's WINDOW_UPDATEs), one
/// request per curl run — curl 7.88 cannot reuse an h2c connection (curl/curl#10634, fixed in
/// 8.0) — and nghttp, several streams on one connection, uploads included.
#[test]
fn h2c_with_curl_and_nghttp() {
    let server = Server::http();
    let port = port_of(&server.url);
    let url = |path: &str| format!("http://127.0.0.1:{port}{path}");
    let d = TempDir::new("thirdparty-h2c");
    let body = d.path("body.bin");
    std::fs::write(&body, vec![b'h'; 300_000]).unwrap();
    if have_tool("curl", "curl") && curl_has_http2() {
        let ran = run(curl()
            .args(["--http2-prior-knowledge", "-w", WRITE_OUT])
            .arg(url("/h2c")));
        assert_eq!(ran.stdout, "ok\n200 2 1 3 GET\n", "{}", ran.context());
        let ran = run(curl()
            .args(["--http2-prior-knowledge", "-w", WRITE_OUT, "--data-binary"])
            .arg(format!("@{}", body.display()))
            .arg(url("/h2c-post")));
        assert_eq!(ran.stdout, "ok\n200 2 1 3 POST\n", "{}", ran.context());
    }
    if have_tool("nghttp", "nghttp2-client") {
        // -n: discard bodies; -v: the frames; -d: POST the file on every stream.
        let ran = run(Command::new("nghttp")
            .args(["-nv", "-t", "20", "-d"])
            .arg(&body)
            .args([url("/one"), url("/two"), url("/three")]));
        assert!(ran.ok, "nghttp failed: {}", ran.context());
        let log = &ran.stdout;
        assert_eq!(
            log.matches("] Connected").count(),
            1,
            "one connection: {log}"
        );
        assert_eq!(log.matches(":status: 200").count(), 3, "{log}");
        for stream in [13, 15, 17] {
            assert!(
                log.contains(&format!("recv (stream_id={stream}) :status: 200")),
                "stream {stream}: {log}"
            );
        }
        assert!(
            log.contains("SETTINGS_MAX_CONCURRENT_STREAMS(0x03):1024"),
            "the server's SETTINGS: {log}"
        );
        assert!(
            log.contains("recv WINDOW_UPDATE frame"),
            "the uploads needed the server's window updates: {log}"
        );
        assert!(!log.contains("RST_STREAM"), "{log}");
        assert!(
            !log.contains("recv GOAWAY"),
            "the server went away mid-way: {log}"
        );
    }
}

/// h2spec's HTTP/2 conformance cases against `serve http`: every case passes over TLS with
/// `h2` agreed by ALPN. On the plain port, which serves HTTP/1.1 and h2c side by side, the one
/// allowed failure is "Sends invalid connection preface": such bytes are an HTTP/1.1 request
/// there, answered with 400 and a close (nginx's h2c port does the same). h2spec is built by
/// `scripts/brokers.sh up` when Go is installed (`MSGBENCH_IT_H2SPEC`).
#[test]
fn http2_conformance_with_h2spec() {
    let Ok(h2spec) = std::env::var("MSGBENCH_IT_H2SPEC") else {
        eprintln!("skipped: no h2spec (scripts/brokers.sh up builds one with Go)");
        return;
    };
    let h2spec_run = |port: &str, tls: bool| {
        let mut cmd = Command::new(&h2spec);
        cmd.args(["-h", "127.0.0.1", "-p", port, "-o", "5"]);
        if tls {
            cmd.args(["-t", "-k"]);
        }
        let ran = run(&mut cmd);
        let summary = ran
            .stdout
            .lines()
            .find(|l| l.contains(" tests, "))
            .unwrap_or_else(|| panic!("no h2spec summary: {}", ran.context()))
            .to_string();
        let failed: Vec<String> = ran
            .stdout
            .split("Failures:")
            .nth(1)
            .unwrap_or("")
            .lines()
            .filter_map(|l| l.trim().strip_prefix("× "))
            .map(str::to_string)
            .collect();
        (summary, failed, ran.context())
    };
    let tls = Server::https();
    let (summary, failed, ctx) = h2spec_run(&port_of(&tls.url), true);
    assert!(failed.is_empty(), "{summary}: {failed:?}\n{ctx}");
    assert!(summary.contains(" 0 failed"), "{summary}\n{ctx}");
    let plain = Server::http();
    let (summary, failed, ctx) = h2spec_run(&port_of(&plain.url), false);
    assert!(
        failed
            .iter()
            .all(|f| f.ends_with("Sends invalid connection preface")),
        "{summary}: {failed:?}\n{ctx}"
    );
    assert!(failed.len() <= 1, "{summary}: {failed:?}\n{ctx}");
    assert!(
        summary.contains(&format!(" {} failed", failed.len())),
        "{summary}\n{ctx}"
    );
}

/// HTTPS with the test CA: curl agrees on HTTP/2 by ALPN and reuses the connection; asked for
/// HTTP/1.1 it gets HTTP/1.1; certificate verification passes (curl verifies by default).
#[test]
fn https_with_curl() {
    if !have_tool("curl", "curl") {
        return;
    }
    let (ca, _, _) = test_certs();
    let server = Server::https();
    let url = |path: &str| format!("https://127.0.0.1:{}{path}", port_of(&server.url));
    let h1 = "ok\n200 1.1 1 3 GET\n";
    let ran = run(curl()
        .args(["--cacert", &ca, "--http1.1", "-w", WRITE_OUT])
        .arg(url("/tls-h1")));
    assert_eq!(ran.stdout, h1, "{}", ran.context());
    if curl_has_http2() {
        let ran = run(curl()
            .args(["--cacert", &ca, "-w", WRITE_OUT])
            .arg(url("/a"))
            .args(["-d", "x=1"])
            .arg(url("/b")));
        // Options apply to every URL of a run: both are POSTs.
        assert_eq!(
            ran.stdout,
            "ok\n200 2 1 3 POST\nok\n200 2 0 3 POST\n",
            "{}",
            ran.context()
        );
    }
}

/// Topic popularity places the producers: with Zipf(1) over 4 topics, 100 producers split
/// 48/24/16/12, which a paho-mqtt subscriber on Mosquitto sees as each topic's share of the
/// messages; msgbench's own consumers still account for every message.
#[test]
fn topic_popularity_as_a_third_party_subscriber_sees_it() {
    let url = need!(MQTT);
    let Some(py) = peer_python("paho.mqtt.client", "python3-paho-mqtt") else {
        return;
    };
    let d = TempDir::new("popularity");
    let addr = url.trim_start_matches("mqtt://").to_string();
    let (host, port) = addr.rsplit_once(':').unwrap();
    let root = format!("pop/{}", std::process::id());
    let script = r#"
import json, sys, time
import paho.mqtt.client as mqtt
host, port, root, total = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
counts = {}
def on_message(c, u, m):
    counts[m.topic] = counts.get(m.topic, 0) + 1
def on_connect(c, u, f, rc):
    c.subscribe(root + "/#", qos=1)
c = mqtt.Client()
c.on_message = on_message
c.on_connect = on_connect
c.connect(host, port)
c.loop_start()
time.sleep(1)
print("ready", flush=True)
end = time.time() + 60
while sum(counts.values()) < total and time.time() < end:
    time.sleep(0.05)
time.sleep(0.5)
c.loop_stop()
print(json.dumps(counts), flush=True)
"#;
    let (mut sub, mut out) = ready_peer(&py, script, &[host, port, &root, "4000"]);
    let pattern = format!("{root}/{{i}}");
    let r = run_json(
        &d.0,
        &[
            "run",
            &url,
            "--topics",
            "4",
            "--topic",
            &pattern,
            "--producers",
            "25",
            "--topic-popularity",
            "zipf:1",
            "--qos",
            "1",
            "--messages",
            "4000",
            "--rate",
            "2000",
            "--warmup",
            "0s",
            "-o",
            "pop.jsonl",
        ],
    );
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    let _ = sub.wait();
    let counts: Value = serde_json::from_str(line.trim()).unwrap();
    let got: Vec<u64> = (0..4)
        .map(|i| counts[format!("{root}/{i}")].as_u64().unwrap_or(0))
        .collect();
    // 40 messages per producer; 48, 24, 16 and 12 producers.
    assert_eq!(got, [1920, 960, 640, 480], "{counts}");
    // The results file says how the producers were placed.
    let file = std::fs::read_to_string(d.0.join("pop.jsonl")).unwrap();
    let begin: Value = serde_json::from_str(file.lines().next().unwrap()).unwrap();
    let pop = &begin["plan"]["topic_popularity"];
    assert_eq!(
        (&pop["kind"], &pop["s"]),
        (&json!("zipf"), &json!(1.0)),
        "{pop}"
    );
    let i = &r["integrity"];
    assert_eq!(u(&i["expected"]), 4000, "{i}");
    assert_eq!(u(&i["delivered"]), 4000, "{i}");
    assert_eq!(u(&i["lost"]), 0, "{i}");
    assert_valid_and_pure(&d.0, "pop.jsonl", &r);
}
