//! The rango scenario through a real broker: `msgbench serve ws-broadcast --gateway` consumes
//! RabbitMQ's topic exchange `peatio.events.ranger` (routing keys `public.<market>.<event>`)
//! and WebSocket clients subscribed by URL (`?stream=<market>.<event>`) or by subscribe message
//! get wrapped JSON, only for their streams.
//!
//! Publishers are msgbench's own AMQP producers (JSON bodies from a payload template carrying
//! the text stamp, so every delivery is matched and counted exactly per client) and Debian's
//! python3-pika; clients are msgbench's WebSocket consumers and python3-websockets
//! (`crates/serve/tests/fixtures/ws_gateway_client.py`). Tests that need the Python libraries
//! say they were skipped when the system Python lacks them. Each test's streams (or exchange)
//! are its own, so the tests can share the broker and run at once.

use crate::util;

use serde_json::{Value, json};
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use util::*;

const PYTHON: &str = "/usr/bin/python3";

/// A JSON message with msgbench's text stamp inside (keys and spaces a re-encoder changes).
const JSON: &str = r#"{ "market": "btcusd", "id": "{{stamp}}", "seq": {{seq}}, "t": {{time}} }"#;

/// `msgbench serve ws-broadcast --gateway SHAPE --from $MSGBENCH_IT_AMQP_URL` on a free port,
/// ready once it says it consumes; killed on drop.
struct Gateway {
    child: Killed,
    url: String,
    stderr: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Gateway {
    /// Consuming from RabbitMQ (the calling test checked it is there with `need!(AMQP)`).
    fn start(shape: &str, extra: &[&str]) -> Gateway {
        Gateway::start_from(&env_or_hint(AMQP), shape, extra)
    }

    /// The same, consuming from `from` (any broker msgbench speaks).
    fn start_from(from: &str, shape: &str, extra: &[&str]) -> Gateway {
        let port = free_port();
        let mut child = Command::new(bin())
            .args(["serve", "ws-broadcast", "--gateway", shape, "--from", from])
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting msgbench serve");
        let err = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut g = Gateway {
            child: Killed(child),
            url: format!("ws://127.0.0.1:{port}"),
            stderr: rx,
            seen: Vec::new(),
        };
        g.wait_for("consuming `");
        g
    }

    /// Reads its stderr until a line holds `needle` (20 s at most).
    fn wait_for(&mut self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.seen.iter().any(|l| l.contains(needle)) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(_) => panic!(
                    "the gateway never said `{needle}`:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// Stops it as Ctrl-C does and returns everything it printed.
    fn stop(mut self) -> String {
        // SAFETY: signalling our own child by its PID.
        unsafe { libc::kill(self.child.0.id() as i32, libc::SIGINT) };
        self.wait_for("msgbench serve: stopped");
        self.seen.join("\n")
    }
}

/// Whether the system Python imports every module named (says the test is skipped if not).
fn python_has(modules: &[&str], packages: &str) -> bool {
    let ok = Command::new(PYTHON)
        .args(["-c", &format!("import {}", modules.join(", "))])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        // Under the test command (`scripts/brokers.sh env` exported the peers), missing is a
        // failure, never a silent skip.
        assert!(
            std::env::var_os("MSGBENCH_IT_PEER_PYTHON").is_none(),
            "{PYTHON} cannot import {modules:?}: install the Debian packages {packages}"
        );
        eprintln!("skipped: install the Debian packages {packages} ({PYTHON} lacks them)");
    }
    ok
}

/// A python3-websockets client (see the fixture): sends `requests`, prints "ready", then
/// collects `count` messages and any that follow within 0.5 s.
struct PyClient {
    child: Killed,
    lines: mpsc::Receiver<String>,
}

impl PyClient {
    fn start(url: &str, requests: Value, count: usize) -> PyClient {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/crates/serve/tests/fixtures/ws_gateway_client.py"
        );
        let mut child = Command::new(PYTHON)
            .args([script, url, &requests.to_string(), &count.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting python3");
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let c = PyClient {
            child: Killed(child),
            lines: rx,
        };
        let ready = c.lines.recv_timeout(Duration::from_secs(30));
        assert_eq!(ready.as_deref(), Ok("ready"), "{url}: no answers");
        c
    }

    /// What it saw: `{"answers": [...], "messages": [...]}`.
    fn report(mut self) -> Value {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(30))
            .expect("the client's report");
        assert!(self.child.0.wait().unwrap().success());
        serde_json::from_str(&line).unwrap()
    }
}

/// Publishes `(routing key, body)` pairs to `exchange` with python3-pika (publisher confirms
/// on), then deletes the exchange when `delete`.
fn pika_publish(exchange: &str, messages: Value, delete: bool) {
    let script = r#"
import json, sys, pika
url, exchange, messages, delete = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4] == "1"
c = pika.BlockingConnection(pika.URLParameters(url))
ch = c.channel()
ch.confirm_delivery()
for key, body in messages:
    ch.basic_publish(exchange, key, body.encode())
if delete:
    ch.exchange_delete(exchange)
c.close()
"#;
    let o = Command::new(PYTHON)
        .args(["-c", script, &need!(AMQP), exchange, &messages.to_string()])
        .arg(if delete { "1" } else { "0" })
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Streams of this test process (parallel test runs share the broker).
fn market(tag: &str) -> String {
    format!("{tag}{}", std::process::id())
}

/// msgbench's own clients, end to end: AMQP producers publish JSON to `peatio.events.ranger`
/// with `public.<market>.trades`; one run's clients subscribe by URL, another's at the same
/// time by subscribe message (whose answer is consumed, not counted). Every client gets every
/// message of its stream exactly once and nothing else (foreign = 0).
#[test]
fn rango_gateway_between_rabbitmq_and_msgbench_clients() {
    let amqp = need!(AMQP);
    let gw = Gateway::start("rango", &[]);
    let (a, b) = (market("btcusd"), market("ethusd"));
    let d = TempDir::new("ws-gateway");
    let common = [
        "--exchange",
        "peatio.events.ranger",
        "--exchange-type",
        "topic",
        "--payload",
        JSON,
        "-n",
        "1000",
        "--rate",
        "1000",
        "--warmup",
        "0s",
    ];
    let (topic_a, url_a) = (
        format!("public.{a}.trades"),
        format!("{}/?stream={a}.trades", gw.url),
    );
    let mut args_a = vec!["run", &amqp, "--topic", &topic_a];
    args_a.extend(["--consume-from", &url_a, "-c", "4", "-o", "a.jsonl"]);
    args_a.extend(common);
    let run_a = spawn_run(&d.0, &args_a);
    let (topic_b, url_b) = (format!("public.{b}.trades"), format!("{}/", gw.url));
    let hello = json!({"event": "subscribe", "streams": [format!("{b}.trades")]}).to_string();
    let mut args_b = vec!["run", &amqp, "--topic", &topic_b];
    args_b.extend(["--consume-from", &url_b, "--hello", &hello, "-c", "3"]);
    args_b.extend(common);
    let rb = run_json(&d.0, &args_b);
    let ra = finish_json(run_a);
    for (r, clients) in [(&ra, 4), (&rb, 3)] {
        let sent = u(&measure(r)["counters"]["sent"]);
        assert_eq!(sent, 1000);
        let i = &r["integrity"];
        assert_eq!(
            (
                u(&i["delivered"]),
                u(&i["lost"]),
                u(&i["duplicated"]),
                u(&i["foreign"])
            ),
            (sent * clients, 0, 0, 0),
            "{i}"
        );
        assert!(u(&measure(r)["e2e"]["p50"]) > 0);
        let events = r["events"].to_string();
        assert!(!events.contains("subscribe message"), "{events}");
    }
    assert_valid_and_pure(&d.0, "a.jsonl", &ra);
    let said = gw.stop();
    assert!(said.contains("0 not JSON"), "{said}");
}

/// `scenarios/rango-gateway.toml` as shipped, its URLs and its market overridden on the command
/// line as a user pointing it at their own systems would: every client gets every event.
#[test]
fn the_rango_gateway_scenario_counts_every_delivery() {
    let _ = need!(AMQP);
    let gw = Gateway::start("rango", &[]);
    let m = market("xrpusd");
    let d = TempDir::new("ws-scenario");
    let scenario = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/rango-gateway.toml");
    let (topic, url) = (
        format!("public.{m}.trades"),
        format!("{}/?stream={m}.trades", gw.url),
    );
    let r = run_json(
        &d.0,
        &[
            "run",
            scenario,
            "--target",
            &need!(AMQP),
            "--topic",
            &topic,
            "--consume-from",
            &url,
            "-c",
            "20",
            "-n",
            "300",
            "--rate",
            "300",
            "-o",
            "r.jsonl",
        ],
    );
    assert_eq!(u(&measure(&r)["counters"]["sent"]), 300);
    // The scenario's warm-up second sends too: integrity covers the whole run.
    let i = &r["integrity"];
    let expected = u(&i["expected"]);
    assert!(expected >= 300 * 20 && expected.is_multiple_of(20), "{i}");
    assert_eq!(
        (u(&i["delivered"]), u(&i["lost"]), u(&i["foreign"])),
        (expected, 0, 0),
        "{i}"
    );
    assert_valid_and_pure(&d.0, "r.jsonl", &r);
    let said = gw.stop();
    assert!(said.contains("0 not JSON"), "{said}");
}

/// The envelope shape: each body parsed and re-serialized (keys sorted, spaces gone) inside
/// `{"stream":...,"data":...,"ts":...}`; msgbench's consumers still find their stamp in it.
#[test]
fn envelope_gateway_reencodes_and_the_stamp_survives() {
    let _ = need!(AMQP);
    let gw = Gateway::start("envelope", &[]);
    let m = market("ltcusd");
    let d = TempDir::new("ws-envelope");
    let topic = format!("public.{m}.trades");
    let url = format!("{}/?stream={m}.trades", gw.url);
    let r = run_json(
        &d.0,
        &[
            "run",
            &need!(AMQP),
            "--exchange",
            "peatio.events.ranger",
            "--exchange-type",
            "topic",
            "--topic",
            &topic,
            "--payload",
            JSON,
            "--consume-from",
            &url,
            "-c",
            "3",
            "-n",
            "1500",
            "--warmup",
            "0s",
        ],
    );
    let i = &r["integrity"];
    assert_eq!(
        (u(&i["delivered"]), u(&i["lost"]), u(&i["foreign"])),
        (4500, 0, 0),
        "{i}"
    );
    gw.stop();
}

/// Third-party clients on both ends: pika publishes (JSON, a body that is not JSON, a private
/// key, a global one), websockets clients subscribe by URL and by message. Each client gets
/// exactly its streams' messages, wrapped as rango does, in order; the gateway's summary counts
/// what it dropped and why.
#[test]
fn pika_and_websockets_see_rango_frames_exactly() {
    if !python_has(&["pika", "websockets"], "python3-pika python3-websockets") {
        return;
    }
    // An exchange of its own with rango's catch-all binding, so private keys arrive too and
    // every figure is this test's.
    let exchange = format!("peatio.events.ranger.it{}", std::process::id());
    let _ = need!(AMQP);
    let gw = Gateway::start("rango", &["--exchange", &exchange, "--topic", "#"]);
    let by_url = PyClient::start(&format!("{}/?stream=btcusd.trades", gw.url), json!([]), 3);
    let streams = ["btcusd.trades", "ethusd.trades", "global.tickers"];
    let sub = json!({"event": "subscribe", "streams": streams}).to_string();
    let by_msg = PyClient::start(&format!("{}/", gw.url), json!([sub]), 6);
    pika_publish(
        &exchange,
        json!([
            ["public.btcusd.trades", "{\"n\": 1}"],
            ["public.ethusd.trades", "{\"n\": 2}"],
            ["public.btcusd.trades", "not json"],
            ["private.IDABC123.orders", "{\"n\": 9}"],
            ["global.tickers", "{\"n\": 6}"],
            ["public.btcusd.trades", "{\"n\": 3}"],
            ["public.ethusd.trades", "{\"n\": 4}"],
            ["public.btcusd.trades", "{\"n\": 5}"],
        ]),
        false,
    );
    let a = by_url.report();
    assert_eq!(
        a["messages"],
        json!([
            "{\"btcusd.trades\":{\"n\": 1}}",
            "{\"btcusd.trades\":{\"n\": 3}}",
            "{\"btcusd.trades\":{\"n\": 5}}",
        ])
    );
    let b = by_msg.report();
    let answer: Value = serde_json::from_str(b["answers"][0].as_str().unwrap()).unwrap();
    assert_eq!(
        answer,
        json!({"success": {"message": "subscribed", "streams": streams}})
    );
    assert_eq!(
        b["messages"],
        json!([
            "{\"btcusd.trades\":{\"n\": 1}}",
            "{\"ethusd.trades\":{\"n\": 2}}",
            "{\"global.tickers\":{\"n\": 6}}",
            "{\"btcusd.trades\":{\"n\": 3}}",
            "{\"ethusd.trades\":{\"n\": 4}}",
            "{\"btcusd.trades\":{\"n\": 5}}",
        ])
    );
    let said = gw.stop();
    assert!(
        said.contains(
            "8 messages in, 9 frames out; dropped: 1 not JSON, 1 on no public stream \
             (private.*), 3 to unsubscribed clients"
        ),
        "{said}"
    );
    assert!(
        said.contains("dropped a message on `public.btcusd.trades`: its body is not JSON"),
        "{said}"
    );
    pika_publish(&exchange, json!([]), true);
}

/// NATS subjects and MQTT topics name streams as routing keys do (the consumers fill in where
/// each message was published), each bound by default to its protocol's `public` wildcard.
#[test]
fn nats_subjects_and_mqtt_topics_name_streams_too() {
    for (from, topic, stream) in [
        (need!(NATS), "public.{m}.trades", "{m}.trades"),
        (need!(MQTT), "public/{m}/trades", "{m}/trades"),
    ] {
        let gw = Gateway::start_from(&from, "rango", &[]);
        let m = market("xrpusd");
        let d = TempDir::new("ws-gateway-nats-mqtt");
        let url = format!("{}/?stream={}", gw.url, stream.replace("{m}", &m));
        let r = run_json(
            &d.0,
            &[
                "run",
                &from,
                "--topic",
                &topic.replace("{m}", &m),
                "--payload",
                JSON,
                "--consume-from",
                &url,
                "-c",
                "2",
                "-n",
                "1000",
                "--rate",
                "5000",
                "--warmup",
                "0s",
            ],
        );
        let i = &r["integrity"];
        assert_eq!(
            (u(&i["delivered"]), u(&i["lost"]), u(&i["foreign"])),
            (2000, 0, 0),
            "{from}: {i}"
        );
        gw.stop();
    }
}

/// A subscribe message the gateway refuses: the run fails at once, quoting the answer.
#[test]
fn a_refused_subscribe_message_fails_the_run_clearly() {
    let _ = need!(AMQP);
    let gw = Gateway::start("rango", &[]);
    let d = TempDir::new("ws-refused");
    let o = msgbench(
        &d.0,
        &[
            "run",
            &need!(AMQP),
            "--consume-from",
            &format!("{}/", gw.url),
            "--hello",
            "subscribe me please",
            "-n",
            "10",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains(
            "the server refused the subscribe message: {\"error\":{\"message\":\"not a request"
        ),
        "{e}"
    );
}

/// A server that never answers the subscribe message (msgbench's plain broadcast server counts
/// it and says nothing): the run goes on after half the connect timeout, exact, with one
/// warning that says so.
#[test]
fn an_unanswered_subscribe_message_is_one_warning_not_a_hang() {
    let relay = Server::ws_broadcast(&[]);
    let d = TempDir::new("ws-unanswered");
    let started = Instant::now();
    let r = run_json(
        &d.0,
        &[
            "run",
            &relay.url,
            "-p",
            "1",
            "-c",
            "3",
            "-n",
            "2000",
            "--hello",
            r#"{"event":"subscribe","streams":["x"]}"#,
            "--connect-timeout",
            "2s",
            "--warmup",
            "0s",
        ],
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    let i = &r["integrity"];
    assert_eq!(
        (u(&i["delivered"]), u(&i["lost"]), u(&i["foreign"])),
        (6000, 0, 0),
        "{i}"
    );
    let warnings: Vec<&Value> = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "warning")
        .collect();
    assert_eq!(warnings.len(), 1, "{}", r["events"]);
    let w = warnings[0]["detail"].as_str().unwrap();
    assert!(
        w.contains("no answer to the subscribe message within 1s"),
        "{w}"
    );
}
