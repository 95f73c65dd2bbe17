//! MQTT-specific behaviour against a real Mosquitto (started by `scripts/brokers.sh`) and
//! msgbench's own broker: QoS stages, MQTT 5 shared subscriptions, wildcards, authentication,
//! TLS, the embedded demo, connection workloads, bad input and a broker restart.

use crate::util;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use util::*;

fn run_args<'a>(url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["run", url, "--warmup", "0s", "--no-output"];
    v.extend_from_slice(extra);
    v
}

/// QoS 1 and 2: every message is acknowledged (PUBACK / PUBCOMP), publish latency is recorded
/// for each, and every message arrives once.
#[test]
fn qos_1_and_2_ack_every_message() {
    let d = TempDir::new("mqtt-qos");
    let url = need!(MQTT);
    for qos in ["1", "2"] {
        let topic = format!("it/qos{qos}");
        let r = run_json(
            &d.0,
            &run_args(
                &url,
                &["--qos", qos, "--topic", &topic, "-p", "2", "-n", "20000"],
            ),
        );
        let m = measure(&r);
        assert_eq!(u(&m["counters"]["sent"]), 20_000, "qos {qos}");
        assert_eq!(u(&m["counters"]["acked"]), 20_000, "qos {qos}");
        assert_eq!(u(&m["publish"]["count"]), 20_000, "qos {qos}");
        assert!(u(&m["publish"]["p50"]) > 0, "qos {qos}");
        let i = &r["integrity"];
        assert_eq!(
            (u(&i["delivered"]), u(&i["lost"])),
            (20_000, 0),
            "qos {qos}: {i}"
        );
        assert_eq!(u(&i["duplicated"]), 0, "qos {qos}");
    }
}

/// An ack belongs to the phase its message was sent in. Mosquitto's PUBACKs for the last
/// warm-up messages arrive after the measure phase began: they count in the warm-up's totals,
/// so the result never has more acks (or publish latencies) than messages sent, and the
/// warm-up's own acks match its sends.
#[test]
fn warmup_acks_stay_in_the_warmup() {
    let d = TempDir::new("mqtt-warmup-acks");
    let url = need!(MQTT);
    let r = run_json(
        &d.0,
        &[
            "run",
            &url,
            "--qos",
            "1",
            "--topic",
            "it/warmup-acks",
            "-p",
            "4",
            "-c",
            "0",
            "--rate",
            "4000",
            "--max-in-flight",
            "64",
            "--warmup",
            "1s",
            "--duration",
            "2s",
            "--no-output",
        ],
    );
    let m = measure(&r);
    let sent = u(&m["counters"]["sent"]);
    assert!(sent > 4_000, "{m}");
    assert_eq!(u(&m["counters"]["acked"]), sent, "{m}");
    assert_eq!(u(&m["publish"]["count"]), sent, "{m}");
    let warmup = r["phases"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["phase"] == "warmup"))
        .unwrap_or_else(|| panic!("no warm-up phase: {r}"));
    let w = &warmup["counters"];
    assert!(u(&w["sent"]) > 1_000, "{w}");
    assert_eq!(u(&w["acked"]), u(&w["sent"]), "{w}");
}

/// `--ack-every 16`: consumers write their acknowledgements in batches. Every message still
/// arrives once (QoS 1 and 2, whose PUBREC and PUBCOMP are batched too), and the consumers'
/// connections carry far fewer data segments back to the broker than with an ack per message.
#[test]
fn batched_acks_keep_every_message_in_fewer_segments() {
    let d = TempDir::new("mqtt-ack-every");
    let url = need!(MQTT);
    let run = |qos: &str, every: &str| {
        let topic = format!("it/ack-every/{qos}/{every}");
        let r = run_json(
            &d.0,
            &run_args(
                &url,
                &[
                    "--qos",
                    qos,
                    "--topic",
                    &topic,
                    "-n",
                    "20000",
                    "--ack-every",
                    every,
                    "--max-in-flight",
                    "1000",
                ],
            ),
        );
        let i = &r["integrity"];
        assert_eq!(
            (u(&i["delivered"]), u(&i["lost"]), u(&i["duplicated"])),
            (20_000, 0, 0),
            "qos {qos}, ack every {every}: {i}"
        );
        assert_eq!(u(&measure(&r)["counters"]["acked"]), 20_000, "qos {qos}");
        u(&r["tcp"]["data_segs_out"])
    };
    run("2", "16");
    let (one, batched) = (run("1", "1"), run("1", "16"));
    // The producer's writes are batched either way (64 KiB); the consumer's acks are not.
    assert!(
        batched * 3 < one,
        "data segments out: {batched} with --ack-every 16, {one} with 1"
    );
}

/// A batch of acknowledgements never waits for more deliveries than the broker will send:
/// with a broker that sends one message at a time until it is acknowledged, each ack goes out
/// on its own within the time bound, and every message arrives.
#[test]
fn batched_acks_go_out_in_time() {
    let _ = need!(MQTT);
    let d = TempDir::new("mqtt-ack-bound");
    let port = free_port();
    let _server = Killed(start_mosquitto_with(
        port,
        &d.0,
        "max_inflight_messages 1\n",
    ));
    let url = format!("mqtt://127.0.0.1:{port}");
    let r = run_json(
        &d.0,
        &run_args(
            &url,
            &[
                "--qos",
                "1",
                "--rate",
                "2000",
                "-n",
                "400",
                "--ack-every",
                "1000",
            ],
        ),
    );
    let i = &r["integrity"];
    assert_eq!((u(&i["delivered"]), u(&i["lost"])), (400, 0), "{i}");
    // Each delivery waited for the previous one's acknowledgement, which waited the time
    // bound (more than the 0.5 ms between sends): the broker's pace shows in the latency, not
    // in losses.
    assert!(
        u(&measure(&r)["e2e"]["max"]) >= 1_000_000,
        "{}",
        measure(&r)["e2e"]
    );
}

/// A Mosquitto that drops every connection whose PUBLISH is over its maximum packet size
/// (MQTT 3.1.1 has no way to announce the limit): each lost connection is reported and the
/// producer reconnects, but ever more slowly, as the connections die within a second of
/// opening (it once reconnected about 500 times a second), and the run fails its verdict
/// since nothing arrived.
#[test]
fn a_broker_dropping_every_connection_is_not_reconnected_to_in_a_loop() {
    let _ = need!(MQTT);
    let d = TempDir::new("mqtt-drops");
    let port = free_port();
    let _server = Killed(start_mosquitto_with(port, &d.0, "max_packet_size 1000\n"));
    let url = format!("mqtt://127.0.0.1:{port}");
    let o = msgbench(
        &d.0,
        &[
            "run",
            &url,
            "--mqtt-version",
            "3.1.1",
            "--size",
            "2KiB",
            "--rate",
            "1000",
            "--warmup",
            "0s",
            "--duration",
            "3s",
            "--no-output",
        ],
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{e}");
    let lost = e.matches("disconnected:").count();
    assert!((2..=20).contains(&lost), "{lost} connections lost:\n{e}");
    // Said once: what the pattern suggests.
    assert_eq!(e.matches("a smaller --size?").count(), 1, "{e}");
}

/// A Mosquitto that supports QoS 1 at most and sets a 10 s keep-alive itself (MQTT 5 maximum
/// QoS and server keep alive in its CONNACK): QoS 2 is refused with the broker's maximum
/// named, not measured as QoS 1; at QoS 1 the clients, asking for 60 s, ping at the server's
/// period instead, so that idle for 17 s they are not dropped (at 15 s without a packet).
#[test]
fn the_brokers_maximum_qos_and_keep_alive_are_honoured() {
    let _ = need!(MQTT);
    let d = TempDir::new("mqtt-max-qos");
    let port = free_port();
    let _server = Killed(start_mosquitto_with(
        port,
        &d.0,
        "max_qos 1\nmax_keepalive 10\n",
    ));
    let url = format!("mqtt://127.0.0.1:{port}");
    let o = msgbench(
        &d.0,
        &[
            "run",
            &url,
            "--mqtt-version",
            "5",
            "--qos",
            "2",
            "-n",
            "10",
            "--no-output",
        ],
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("supports QoS 1 at most") && e.contains("--qos 1"),
        "{e}"
    );
    let r = run_json(
        &d.0,
        &[
            "run",
            &url,
            "--mqtt-version",
            "5",
            "--qos",
            "1",
            "--keep-alive",
            "60s",
            "--rate",
            "0.05",
            "--warmup",
            "0s",
            "--duration",
            "17s",
            "--no-output",
        ],
    );
    let i = &r["integrity"];
    assert_eq!(u(&i["lost"]), 0, "{i}");
    assert!(u(&i["delivered"]) >= 1, "{i}");
    let events = r["events"].to_string();
    assert!(
        !events.contains("connection lost") && !events.contains("disconnected"),
        "the server's 10 s keep-alive was kept: {events}"
    );
}

/// MQTT 5 with a shared subscription: each message reaches exactly one group member.
#[test]
fn mqtt5_shared_subscription() {
    let d = TempDir::new("mqtt-share");
    let url = need!(MQTT);
    let r = run_json(
        &d.0,
        &run_args(
            &url,
            &[
                "--mqtt-version",
                "5",
                "--qos",
                "1",
                "--topic",
                "it/share",
                "-c",
                "3",
                "--queue-group",
                "g1",
                "-n",
                "9000",
            ],
        ),
    );
    let i = &r["integrity"];
    assert_eq!(u(&i["expected"]), 9000, "{i}");
    assert_eq!(u(&i["delivered"]), 9000, "{i}");
    assert_eq!(u(&i["duplicated"]), 0, "{i}");
}

/// MQTT 3.1.1 has no shared subscriptions; Mosquitto takes `$share` there as an extension, and
/// the group shares the messages. A group through which nothing arrived says that a broker
/// without the extension takes the filter for a topic name (aedes and amqtt do), since the run
/// otherwise ends with everything lost and no clue why.
#[test]
fn shared_subscription_over_3_1_1_and_the_hint_when_nothing_arrives() {
    let d = TempDir::new("mqtt-share-v3");
    let url = need!(MQTT);
    let hint = "MQTT 3.1.1 has no shared subscriptions";
    let group = ["--qos", "1", "-c", "2", "--queue-group", "g3", "-n", "2000"];
    let mut args = run_args(&url, &["--topic", "it/share-v3"]);
    args.extend(group);
    let r = run_json(&d.0, &args);
    let i = &r["integrity"];
    assert_eq!(u(&i["delivered"]), 2000, "{i}");
    assert_eq!(u(&i["duplicated"]), 0, "{i}");
    assert!(!r["events"].to_string().contains(hint), "{}", r["events"]);
    // The group listens where nobody publishes: nothing arrives, and the hint is given.
    let mut args = run_args(
        &url,
        &[
            "--topic",
            "it/share-v3",
            "--subscribe",
            "it/share-v3-elsewhere",
        ],
    );
    args.extend(group);
    args.extend(["--drain", "1s", "--format", "json", "-q"]);
    let o = msgbench(&d.0, &args);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(u(&r["integrity"]["delivered"]), 0);
    let told =
        r["events"].as_array().unwrap().iter().any(|e| {
            e["kind"] == "warning" && e["detail"].as_str().is_some_and(|d| d.contains(hint))
        });
    assert!(told, "{}", r["events"]);
}

/// A wildcard subscription receives the messages of every topic.
#[test]
fn wildcard_subscription_covers_all_topics() {
    let d = TempDir::new("mqtt-wild");
    for url in [need!(MQTT), Server::mqtt().url.clone()] {
        let r = run_json(
            &d.0,
            &run_args(
                &url,
                &[
                    "--topics",
                    "3",
                    "--topic",
                    "it/wild/{i}",
                    "--subscribe",
                    "it/wild/+",
                    "-n",
                    "3000",
                    "--rate",
                    "6000",
                ],
            ),
        );
        let i = &r["integrity"];
        // 3 consumers (one per topic), each subscribed to all 3 topics.
        assert_eq!(u(&i["expected"]), 9000, "{url}: {i}");
        assert_eq!(u(&i["delivered"]), 9000, "{url}: {i}");
    }
}

/// Credentials in the URL are used; wrong ones give a clear, quick error.
#[test]
fn authentication() {
    let d = TempDir::new("mqtt-auth");
    let good = need!("MSGBENCH_IT_MQTT_AUTH_URL");
    let r = run_json(
        &d.0,
        &run_args(&good, &["-n", "1000", "--topic", "it/auth"]),
    );
    assert_eq!(u(&r["integrity"]["delivered"]), 1000);
    let bad = good.replace("msgbench-secret", "wrong");
    let o = msgbench(&d.0, &run_args(&bad, &["-n", "10"]));
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.contains("refused the connection"), "{e}");
    assert!(!e.contains("wrong"), "the password is not printed: {e}");
}

/// MQTT over WebSocket (`mqtt+ws://`) against two WebSocket servers msgbench did not write:
/// RabbitMQ's web_mqtt plugin (Cowboy, endpoint /ws) and Artemis's MQTT acceptor (Netty).
/// QoS 1 messages, small ones and ones over 64 KiB (a frame's longest length form), are each
/// acknowledged and delivered once to each of two subscribers through the tunnel; a path the
/// server does not serve, and a port that speaks plain MQTT, are refused with errors that say so.
#[test]
fn over_websocket() {
    let d = TempDir::new("mqtt-ws");
    let rabbit = need!("MSGBENCH_IT_RMQ_WS_MQTT_URL");
    let artemis = need!("MSGBENCH_IT_ARTEMIS_WS_MQTT_URL");
    for url in [&rabbit, &artemis] {
        for (size, n) in [("200", "10000"), ("100KiB", "300")] {
            let args = [
                "--qos", "1", "--topic", "it/ws", "-p", "2", "-c", "2", "-n", n, "--size", size,
            ];
            let r = run_json(&d.0, &run_args(url, &args));
            let n: u64 = n.parse().unwrap();
            let m = measure(&r);
            let ctx = format!("{url} {size}: {}", r["integrity"]);
            assert_eq!(u(&m["counters"]["sent"]), n, "{ctx}");
            assert_eq!(u(&m["counters"]["acked"]), n, "{ctx}");
            let i = &r["integrity"];
            assert_eq!((u(&i["delivered"]), u(&i["lost"])), (2 * n, 0), "{ctx}");
            assert_eq!(u(&i["duplicated"]), 0, "{ctx}");
        }
    }
    let wrong_path = rabbit.replace("/ws", "/nope");
    let o = msgbench(&d.0, &run_args(&wrong_path, &["-n", "10"]));
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no WebSocket endpoint at `/nope`"),
        "{}",
        stderr(&o)
    );
    let plain = need!(MQTT).replace("mqtt://", "mqtt+ws://");
    let o = msgbench(&d.0, &run_args(&plain, &["-n", "10"]));
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("hung up on the WebSocket upgrade"),
        "{}",
        stderr(&o)
    );
}

/// A consumer reconnecting to a broker slow to answer its CONNECT (one still starting) keeps
/// that one connection until the CONNACK comes, though the runner cancels its `recv` at every
/// tick: it used to open another connection with the same client id at the next tick, which
/// ActiveMQ Classic refused (CONNACK 0x02) or answered by cutting one of the two, and the
/// subscriber came back seconds late. A raw MQTT server: the subscriber's first connection is
/// cut after a second, and every later one gets its CONNACK 2.5 s after its CONNECT.
#[test]
fn a_reconnection_waits_for_a_slow_connack_on_one_connection() {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let d = TempDir::new("mqtt-slow-connack");
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    static SUB_CONNECTIONS: AtomicUsize = AtomicUsize::new(0);
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                // One MQTT packet: its first byte and body (remaining length as a varint).
                let packet = |s: &mut std::net::TcpStream| -> Option<(u8, Vec<u8>)> {
                    let mut b = [0u8; 1];
                    s.read_exact(&mut b).ok()?;
                    let (mut len, mut shift) = (0usize, 0);
                    loop {
                        let mut c = [0u8; 1];
                        s.read_exact(&mut c).ok()?;
                        len |= ((c[0] & 0x7f) as usize) << shift;
                        shift += 7;
                        if c[0] & 0x80 == 0 {
                            break;
                        }
                    }
                    let mut body = vec![0u8; len];
                    s.read_exact(&mut body).ok()?;
                    Some((b[0], body))
                };
                let Some((0x10, connect)) = packet(&mut s) else {
                    return;
                };
                let sub = String::from_utf8_lossy(&connect).contains("-sub-");
                let nth = if sub {
                    SUB_CONNECTIONS.fetch_add(1, Ordering::SeqCst)
                } else {
                    0
                };
                if nth > 0 {
                    std::thread::sleep(Duration::from_millis(2500));
                }
                let _ = s.write_all(&[0x20, 0x02, 0x00, 0x00]);
                if sub && nth == 0 {
                    // The first subscriber connection ends a second in (reads time out).
                    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
                }
                // Subscriptions granted; publishes are taken and dropped (this test counts
                // connections, not deliveries).
                while let Some((kind, body)) = packet(&mut s) {
                    if kind & 0xf0 == 0x80 {
                        let _ = s.write_all(&[0x90, 0x03, body[0], body[1], 0x00]);
                    }
                    if kind & 0xf0 == 0xe0 {
                        return;
                    }
                }
            });
        }
    });
    let url = format!("mqtt://127.0.0.1:{port}");
    let o = msgbench(
        &d.0,
        &run_args(
            &url,
            &[
                "--topic",
                "slow",
                "--rate",
                "100",
                "--duration",
                "7s",
                "--tick",
                "500ms",
            ],
        ),
    );
    let e = stderr(&o);
    assert!(e.contains("reconnected"), "{e}");
    assert_eq!(
        SUB_CONNECTIONS.load(Ordering::SeqCst),
        2,
        "one connection, then one reconnection: {e}"
    );
}

/// TLS: verified against the given CA (and with a client certificate); verification is on by
/// default, so an unknown CA fails unless --insecure.
#[test]
fn tls_verifies_by_default() {
    let d = TempDir::new("mqtt-tls");
    let ca = need!("MSGBENCH_IT_MQTT_CA");
    let cert = need!("MSGBENCH_IT_MQTT_CLIENT_CERT");
    let key = need!("MSGBENCH_IT_MQTT_CLIENT_KEY");
    // Mosquitto's TLS listener, then msgbench's own broker over TLS.
    let ours = Server::mqtts();
    for url in [need!("MSGBENCH_IT_MQTTS_URL"), ours.url.clone()] {
        tls_run(&d, &url, &ca, &cert, &key);
    }
}

/// Verified, with a client certificate, refused without the CA, and `--insecure`.
fn tls_run(d: &TempDir, url: &str, ca: &str, cert: &str, key: &str) {
    let r = run_json(
        &d.0,
        &run_args(url, &["--ca-file", ca, "-n", "2000", "--topic", "it/tls"]),
    );
    assert_eq!(u(&r["integrity"]["delivered"]), 2000);
    let r = run_json(
        &d.0,
        &run_args(
            url,
            &[
                "--ca-file",
                ca,
                "--cert",
                cert,
                "--key",
                key,
                "-n",
                "500",
                "--qos",
                "1",
            ],
        ),
    );
    assert_eq!(u(&measure(&r)["counters"]["acked"]), 500);
    let o = msgbench(&d.0, &run_args(url, &["-n", "10"]));
    assert_eq!(o.status.code(), Some(1), "unknown CA must fail");
    assert!(stderr(&o).contains("TLS"), "{}", stderr(&o));
    let r = run_json(&d.0, &run_args(url, &["--insecure", "-n", "500"]));
    assert_eq!(u(&r["integrity"]["delivered"]), 500);
}

/// `msgbench run` with no target starts the embedded broker, says so, and reports a real
/// benchmark through it. With TCP_NODELAY on both sides the median is far below Nagle's 40 ms.
#[test]
fn demo_runs_against_the_embedded_broker() {
    let d = TempDir::new("mqtt-demo");
    let o = msgbench(
        &d.0,
        &[
            "run",
            "--duration",
            "2s",
            "--rate",
            "1000",
            "--format",
            "json",
            "--quiet",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("embedded MQTT broker on mqtt://127.0.0.1:"),
        "{e}"
    );
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        r["target"]
            .as_str()
            .unwrap()
            .starts_with("mqtt://127.0.0.1:")
    );
    let m = measure(&r);
    assert!(u(&m["counters"]["received"]) >= 1900, "{m}");
    assert_eq!(u(&r["integrity"]["lost"]), 0);
    assert!(
        u(&m["e2e"]["p50"]) < 10_000_000,
        "e2e p50 {} ns",
        m["e2e"]["p50"]
    );
}

/// Hold mode: N connections open, are held and closed; connect latency, peak and memory per
/// connection are reported, for MQTT and NATS alike.
#[test]
fn hold_connections() {
    let d = TempDir::new("mqtt-hold");
    for url in [need!(MQTT), need!(NATS)] {
        let r = run_json(
            &d.0,
            &[
                "run",
                &url,
                "--connections",
                "400",
                "--hold",
                "1s",
                "--publish-interval",
                "200ms",
                "--source-addrs",
                "127.0.0.1-127.0.0.4",
                "-o",
                "hold.jsonl",
            ],
        );
        assert_valid_and_pure(&d.0, "hold.jsonl", &r);
        let c = &r["connections"];
        assert_eq!(c["mode"], "hold", "{r}");
        assert_eq!(u(&c["peak_held"]), 400, "{url}: {c}");
        assert!(c["rss_per_connection_bytes"].as_f64().unwrap() > 0.0, "{c}");
        let m = measure(&r);
        assert_eq!(u(&m["counters"]["connects"]), 400, "{url}");
        assert_eq!(u(&m["connect"]["count"]), 400, "{url}");
        assert!(
            u(&m["counters"]["sent"]) >= 400,
            "{url}: held connections published"
        );
        let closes = phase_sum(&r, "closes");
        assert_eq!(closes, 400, "{url}");
        // Every held connection added its kernel counters as it closed: at least the
        // handshake's segments and the CONNECT each way.
        let t = &r["tcp"];
        assert_eq!(u(&t["connections"]), 400, "{url}: {t}");
        assert!(u(&t["data_segs_out"]) >= 800, "{url}: {t}");
        assert!(u(&t["segs_in"]) >= 800, "{url}: {t}");
    }
}

/// Poisson arrivals: connections start at the connect rate on average, with exponential gaps,
/// against Mosquitto; the results file records the arrival process.
#[test]
fn poisson_connection_arrivals() {
    let url = need!(MQTT);
    let d = TempDir::new("mqtt-poisson");
    let r = run_json(
        &d.0,
        &[
            "run",
            &url,
            "--connections",
            "500",
            "--connect-rate",
            "1000",
            "--connect-arrival",
            "poisson",
            "--hold",
            "1s",
            "-o",
            "p.jsonl",
        ],
    );
    assert_valid_and_pure(&d.0, "p.jsonl", &r);
    let c = &r["connections"];
    assert_eq!(u(&c["peak_held"]), 500, "{c}");
    // 500 exponential gaps of 1 ms on average: about 0.5 s (standard deviation 22 ms).
    let ramp = c["ramp_s"].as_f64().unwrap();
    assert!(ramp > 0.3 && ramp < 5.0, "{c}");
    let file = std::fs::read_to_string(d.0.join("p.jsonl")).unwrap();
    let begin: serde_json::Value = serde_json::from_str(file.lines().next().unwrap()).unwrap();
    assert_eq!(
        begin["plan"]["connections"]["arrival"], "poisson",
        "{}",
        begin["plan"]
    );
    // Poisson arrivals need a rate to be a process of.
    refused(
        &d.0,
        &[
            "run",
            &url,
            "--connections",
            "5",
            "--connect-arrival",
            "poisson",
        ],
        "--connect-rate",
    );
}

/// A reconnect storm: every held connection dropped at once and opened again, against
/// Mosquitto and nats-server; each one is accounted back (or failed) with its latency from the
/// drop, and the report says so.
#[test]
fn reconnect_storm() {
    let d = TempDir::new("mqtt-reconnect");
    for url in [need!(MQTT), need!(NATS)] {
        let r = run_json(
            &d.0,
            &[
                "run",
                &url,
                "--connections",
                "300",
                "--hold",
                "3s",
                "--reconnect-at",
                "1s",
                "--publish-interval",
                "500ms",
                "-o",
                "storm.jsonl",
            ],
        );
        assert_valid_and_pure(&d.0, "storm.jsonl", &r);
        let c = &r["connections"];
        let rc = &c["reconnect"];
        assert_eq!(u(&rc["dropped"]), 300, "{url}: {c}");
        assert_eq!(u(&rc["back"]) + u(&rc["failed"]), 300, "{url}: {rc}");
        assert_eq!(u(&rc["failed"]), 0, "{url}: {rc}");
        assert_eq!(u(&rc["latency"]["count"]), 300, "{url}: {rc}");
        assert!(u(&rc["latency"]["p50"]) > 0, "{url}: {rc}");
        assert!(rc["settled_s"].as_f64().is_some(), "{url}: {rc}");
        assert!(rc["at_s"].as_f64().unwrap() >= 1.0, "{url}: {rc}");
        // Everyone reconnected was held to the end and closed then.
        let closes = phase_sum(&r, "closes");
        assert_eq!(closes, 300, "{url}");
        let text = stdout(&msgbench(&d.0, &["report", "storm.jsonl"]));
        assert!(text.contains("300 dropped at"), "{text}");
        assert!(text.contains("reconnect latency p50"), "{text}");
    }
    // Only held connections can be dropped.
    let err = refused(
        &d.0,
        &["run", "mem://x", "--storm", "--reconnect-at", "1s"],
        "reconnect_at",
    );
    assert!(err.contains("hold mode"), "{err}");
}

/// Storm mode against every kind of server: connections/s and handshake latency.
#[test]
fn connect_storm() {
    let d = TempDir::new("mqtt-storm");
    let serve = Server::mqtt();
    for url in [serve.url.clone(), need!(MQTT), need!(NATS)] {
        let r = run_json(
            &d.0,
            &[
                "run",
                &url,
                "--storm",
                "--concurrency",
                "16",
                "--duration",
                "1s",
                "--messages-per-connection",
                "2",
                "--no-output",
            ],
        );
        let m = measure(&r);
        let opened = u(&m["counters"]["connects"]);
        assert!(opened > 50, "{url}: {opened} cycles in 1 s");
        assert_eq!(u(&m["connect"]["count"]), opened, "{url}");
        // The attempts in flight when the time was up are the storm's too: answered within
        // its measure phase, not left to the drain (where the report's latency would miss
        // them while its count of opened connections took them).
        assert_eq!(phase_sum(&r, "connects"), opened, "{url}");
        assert!(r["connections"]["connections_per_s"].as_f64().unwrap() > 50.0);
        assert_eq!(r["connections"]["mode"], "storm");
    }
}

/// Connection failures are counted by cause, and the run still reports; with not one
/// connection opened the verdict fails (exit 3), saying so.
#[test]
fn storm_against_a_closed_port_counts_refusals() {
    let d = TempDir::new("mqtt-refused");
    let url = format!("mqtt://127.0.0.1:{}", free_port());
    let o = msgbench(
        &d.0,
        &[
            "run",
            &url,
            "--storm",
            "--concurrency",
            "4",
            "--duration",
            "500ms",
            "--no-output",
            "--format",
            "json",
            "--quiet",
        ],
    );
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no connection opened"),
        "{}",
        stderr(&o)
    );
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let c = &measure(&r)["counters"];
    assert!(u(&c["connect_failures"]["refused"]) > 0, "{c}");
    assert_eq!(c["connects"].as_u64().unwrap_or(0), 0);
}

/// Limits the process cannot meet are refused before anything connects, saying what to raise:
/// descriptors for a driver that needs one per connection (AMQP 0-9-1), local ports for MQTT
/// (which holds connections beyond the descriptor limit in io_uring tables).
#[test]
fn connection_preflight_names_the_limit() {
    let d = TempDir::new("mqtt-preflight");
    let refused = |url: &str| {
        let o = msgbench(
            &d.0,
            &["run", url, "--connections", "100000000", "--no-output"],
        );
        assert_eq!(o.status.code(), Some(1));
        stderr(&o)
    };
    let e = refused(&need!(AMQP));
    assert!(e.contains("file descriptors") && e.contains("limit"), "{e}");
    let e = refused(&need!(MQTT));
    assert!(
        e.contains("local ports") && e.contains("--source-addrs"),
        "{e}"
    );
    // Four brokers in the URL: each destination has its own ports, and takes a quarter.
    let e = refused(&format!(
        "{},127.0.0.1:2,127.0.0.1:3,127.0.0.1:4",
        need!(MQTT)
    ));
    assert!(e.contains("25000000 connections to one address"), "{e}");
}

/// RabbitMQ 3.x's MQTT plugin speaks MQTT 3.1.1 only and closes the connection in answer to
/// an MQTT 5 CONNECT: the error says what that likely means (it said "unexpected end of file").
#[test]
fn a_broker_closing_on_an_mqtt_5_connect_is_explained() {
    let d = TempDir::new("mqtt-v5-closed");
    let url = need!("MSGBENCH_IT_RMQ_MQTT_URL");
    let o = msgbench(&d.0, &run_args(&url, &["--mqtt-version", "5", "-n", "10"]));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("it may not speak MQTT 5 (use --mqtt-version 3.1.1)"),
        "{}",
        stderr(&o)
    );
}

/// An unreachable broker is a clear error within the connect timeout.
#[test]
fn unreachable_broker_fails_fast() {
    let d = TempDir::new("mqtt-unreach");
    let started = Instant::now();
    let url = format!("mqtt://127.0.0.1:{}", free_port());
    let o = msgbench(
        &d.0,
        &run_args(&url, &["--connect-timeout", "2s", "-n", "10"]),
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("cannot connect"), "{}", stderr(&o));
    // A URL without a host is a usage error.
    let o = msgbench(&d.0, &["run", "mqtt://", "--no-output"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no host"), "{}", stderr(&o));
}

fn start_mosquitto(port: u16, dir: &std::path::Path) -> Child {
    start_mosquitto_with(port, dir, "")
}

/// A mosquitto of its own on `port`, with `extra` configuration lines.
fn start_mosquitto_with(port: u16, dir: &std::path::Path, extra: &str) -> Child {
    let conf = dir.join("m.conf");
    std::fs::write(
        &conf,
        format!("listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\nset_tcp_nodelay true\n{extra}"),
    )
    .unwrap();
    let bin = ["/usr/sbin/mosquitto", "mosquitto"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("-h")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok()
        })
        .expect("mosquitto installed (scripts/brokers.sh up installs it)");
    let mut child = Command::new(bin)
        .args(["-c", conf.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    if listens_within(port, Duration::from_secs(5)) {
        return child;
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("mosquitto did not start on {port}");
}

/// The broker is killed and restarted mid-run: clients reconnect, the interruption and the loss
/// are counted, and the results file is complete.
#[test]
fn broker_restart_mid_run() {
    let _ = need!(MQTT);
    let d = TempDir::new("mqtt-restart");
    let port = free_port();
    let mut server = start_mosquitto(port, &d.0);
    let url = format!("mqtt://127.0.0.1:{port}");
    let run = Command::new(bin())
        .args([
            "run",
            &url,
            "--qos",
            "1",
            "--rate",
            "3000",
            "--duration",
            "6s",
            "--warmup",
            "0s",
            "--drain",
            "2s",
            "--ack-timeout",
            "2s",
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
    server.kill().unwrap();
    server.wait().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let mut server = start_mosquitto(port, &d.0);
    let o = run.wait_with_output().unwrap();
    server.kill().unwrap();
    let _ = server.wait();
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let sent = u(&measure(&r)["counters"]["sent"]);
    assert!(sent > 9_000, "kept sending after the restart: {sent}");
    let i = &r["integrity"];
    // The outage shows up as messages lost in the broker, sends refused while it was down, or
    // acks that never came (which of these depends on where the cut falls).
    let e = &measure(&r)["counters"]["errors"];
    assert!(
        u(&i["lost"]) + u(&e["send"]) + u(&e["timeout"]) + u(&e["connect"]) > 0,
        "{i} {e}"
    );
    assert!(u(&e["disconnect"]) > 0, "{e}");
    assert_eq!(u(&i["expected"]), u(&i["delivered"]) + u(&i["lost"]));
    let kinds: Vec<&str> = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"disconnected"), "{kinds:?}");
    assert!(kinds.contains(&"reconnected"), "{kinds:?}");
    // While the broker was down, the subscriber's failed attempts were said (once), with why;
    // they had been silent.
    let events = r["events"].to_string();
    assert!(
        events.contains("reconnecting failed: ") && events.contains("retrying with backoff"),
        "{events}"
    );
    let file = std::fs::read_to_string(d.path("r.jsonl")).unwrap();
    assert!(file.lines().last().unwrap().contains("\"type\":\"end\""));
    // The report names the account's third term when there is one.
    if u(&e["timeout"]) > 0 {
        let text = stdout(&msgbench(&d.0, &["report", "r.jsonl"]));
        assert!(text.contains("in doubt"), "{e}\n{text}");
    }
}

/// Retained messages stay on the broker: a later run's subscriber receives the last one first,
/// which it counts as foreign (another run's stamp) rather than as one of its own.
#[test]
fn retained_message_reaches_a_later_subscriber() {
    let d = TempDir::new("mqtt-retain");
    let url = need!(MQTT);
    let topic = format!("it/retain/{}", std::process::id());
    let r = run_json(
        &d.0,
        &run_args(
            &url,
            &[
                "--retain", "--qos", "1", "-c", "0", "-n", "5", "--topic", &topic,
            ],
        ),
    );
    assert_eq!(u(&measure(&r)["counters"]["acked"]), 5);
    let r = run_json(&d.0, &run_args(&url, &["-n", "100", "--topic", &topic]));
    assert_eq!(u(&r["integrity"]["delivered"]), 100);
    assert_eq!(u(&r["integrity"]["foreign"]), 1, "{}", r["integrity"]);
    // Clean up: an empty retained message deletes it (not needed by the assertions).
}

/// A persistent session with a fixed client id works at QoS 1 on both protocol versions.
#[test]
fn persistent_sessions() {
    let d = TempDir::new("mqtt-persist");
    let url = need!(MQTT);
    for v in ["3.1.1", "5"] {
        let id = format!("it-persist-{}-{v}-{{role}}-{{i}}", std::process::id());
        for _ in 0..2 {
            let r = run_json(
                &d.0,
                &run_args(
                    &url,
                    &[
                        "--persistent-session",
                        "--client-id",
                        &id,
                        "--qos",
                        "1",
                        "--mqtt-version",
                        v,
                        "-n",
                        "1000",
                        "--topic",
                        "it/persist",
                    ],
                ),
            );
            assert_eq!(u(&r["integrity"]["delivered"]), 1000, "{v}");
        }
    }
}

/// A persistent session the broker kept across a cut connection gets what was in flight again
/// (PUBLISH with DUP, as MQTT requires of the client): nothing is left in doubt and every
/// message is acknowledged and delivered, on both protocol versions. Unpaced with a window of
/// 1,000, hundreds are in flight when the connections are reset; Mosquitto keeps the sessions.
#[test]
fn a_kept_session_gets_its_unacknowledged_messages_again_after_a_cut() {
    let url = need!(MQTT);
    let upstream = url.trim_start_matches("mqtt://").to_string();
    let d = TempDir::new("mqtt-resend");
    for v in ["3.1.1", "5"] {
        let proxy = util::faultproxy::FaultProxy::start(&upstream);
        let via = format!("mqtt://{}", proxy.addr());
        let id = format!("it-resend-{}-{v}-{{role}}-{{i}}", std::process::id());
        let topic = format!("it/resend/{}/{v}", std::process::id());
        let r = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(1500));
                proxy.reset_all();
            });
            run_json(
                &d.0,
                &[
                    "run",
                    &via,
                    "--persistent-session",
                    "--client-id",
                    &id,
                    "--qos",
                    "1",
                    "--mqtt-version",
                    v,
                    "--topic",
                    &topic,
                    "--max-in-flight",
                    "1000",
                    "--duration",
                    "3s",
                    "--warmup",
                    "0s",
                    "--drain",
                    "5s",
                    "--no-output",
                ],
            )
        });
        let (sent, acked) = (phase_sum(&r, "sent"), phase_sum(&r, "acked"));
        let reconnected = r["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "reconnected")
            .map(|e| e["detail"].as_str().unwrap_or(""))
            .collect::<Vec<_>>();
        let ctx = format!("{v}: {} {}", r["integrity"], r["events"]);
        assert!(
            reconnected.len() >= 2 && reconnected.iter().all(|d| d.contains("session kept")),
            "{ctx}"
        );
        assert!(sent >= 3_000, "{ctx}");
        assert_eq!(
            acked, sent,
            "every message acknowledged, none in doubt: {ctx}"
        );
        assert_eq!(u(&r["integrity"]["delivered"]), sent, "{ctx}");
        assert_eq!(u(&r["integrity"]["lost"]), 0, "{ctx}");
    }
}

/// A paced producer whose broker refuses it for a second (every connection reset, every
/// reconnection refused) sends each scheduled message once it is back, measured from the time
/// it was due: all 2,000 are sent, the failed attempts count as connect errors but take no
/// message's place, and the outage shows in the send delay and the end-to-end latency (a
/// client that dropped them would report a schedule kept and no outage at all). The consumer
/// reads from the broker directly.
#[test]
fn messages_due_while_the_broker_refused_are_sent_late_not_dropped() {
    let url = need!(MQTT);
    let upstream = url.trim_start_matches("mqtt://").to_string();
    let d = TempDir::new("mqtt-refused");
    let proxy = util::faultproxy::FaultProxy::start(&upstream);
    let via = format!("mqtt://{}", proxy.addr());
    let topic = format!("it/refused/{}", std::process::id());
    let r = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(1500));
            proxy.refuse(proxy.accepted()..u64::MAX);
            proxy.reset_all();
            std::thread::sleep(Duration::from_millis(1000));
            proxy.refuse(0..0);
        });
        run_json(
            &d.0,
            &[
                "run",
                &via,
                "--consume-from",
                &url,
                "--qos",
                "1",
                "--topic",
                &topic,
                "--rate",
                "500",
                "-n",
                "2000",
                "--warmup",
                "0s",
                "--drain",
                "5s",
                "--no-output",
            ],
        )
    });
    let m = measure(&r);
    let ctx = format!("{} {} {}", m["counters"], r["integrity"], r["events"]);
    assert_eq!(phase_sum(&r, "sent"), 2000, "{ctx}");
    assert!(u(&m["counters"]["errors"]["connect"]) >= 1, "{ctx}");
    assert!(u(&m["send_delay"]["max"]) >= 500_000_000, "{ctx}");
    assert!(u(&m["e2e"]["max"]) >= 500_000_000, "{ctx}");
    let i = &r["integrity"];
    assert_eq!(u(&i["expected"]), 2000, "{ctx}");
    assert_eq!(
        u(&i["expected"]),
        u(&i["delivered"]) + u(&i["lost"]),
        "{ctx}"
    );
}

/// Messages a persistent session kept while its subscriber was away arrive before the SUBACK
/// of its next SUBSCRIBE (Mosquitto sends them straight after the CONNACK, HiveMQ before the
/// SUBACK): they are delivered, acknowledged and counted (as foreign: another run's), on both
/// protocol versions. A paho-mqtt publisher sends them meanwhile.
#[test]
fn a_persistent_sessions_kept_messages_are_delivered_before_the_suback() {
    let url = need!(MQTT);
    let Some(py) = crate::thirdparty::peer_python("paho.mqtt.client", "python3-paho-mqtt") else {
        return;
    };
    let d = TempDir::new("mqtt-kept");
    let (host, port) = url.trim_start_matches("mqtt://").rsplit_once(':').unwrap();
    for v in ["3.1.1", "5"] {
        let id = format!("it-kept-{}-{v}-{{role}}-{{i}}", std::process::id());
        let topic = format!("it/kept/{}/{v}", std::process::id());
        let consume = |secs: &str| {
            run_json(
                &d.0,
                &run_args(
                    &url,
                    &[
                        "--persistent-session",
                        "--client-id",
                        &id,
                        "--qos",
                        "1",
                        "--mqtt-version",
                        v,
                        "-p",
                        "1",
                        "--rate",
                        "5",
                        "-c",
                        "1",
                        "--topic",
                        &topic,
                        "--duration",
                        secs,
                    ],
                ),
            )
        };
        consume("1s");
        let published = Command::new(&py)
            .args([
                "-c",
                "import sys, paho.mqtt.publish as p\n\
                 p.multiple([(sys.argv[3], b'kept', 1, False)] * 40, hostname=sys.argv[1], port=int(sys.argv[2]))",
                host,
                port,
                &topic,
            ])
            .status()
            .unwrap();
        assert!(published.success());
        let r = consume("2s");
        assert_eq!(u(&r["integrity"]["foreign"]), 40, "{v}: {}", r["integrity"]);
        // Acknowledged: a third session finds nothing left.
        let r = consume("1s");
        assert_eq!(u(&r["integrity"]["foreign"]), 0, "{v}: {}", r["integrity"]);
    }
}

/// The server dies while connections are held: the drops are counted by the run, which still
/// ends with a report.
#[test]
fn held_connections_dropped_by_a_dying_server() {
    let d = TempDir::new("mqtt-hold-drop");
    let mut server = Server::mqtt();
    let url = server.url.clone();
    let run = Command::new(bin())
        .args([
            "run",
            &url,
            "--connections",
            "300",
            "--hold",
            "4s",
            "--format",
            "json",
            "--quiet",
            "--no-output",
        ])
        .current_dir(&d.0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    server.kill();
    let o = run.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        u(&r["connections"]["peak_held"]),
        300,
        "{}",
        r["connections"]
    );
    let dropped: u64 = r["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["counters"]["dropped"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(dropped, 300);
    assert!(
        r["warnings"].to_string().contains("dropped"),
        "{}",
        r["warnings"]
    );
}

/// Clients slower than their keep-alive ping, so the broker never drops them (Mosquitto closes a
/// connection silent for 1.5 × keep-alive).
#[test]
fn keep_alive_holds_slow_clients() {
    let d = TempDir::new("mqtt-keepalive");
    let r = run_json(
        &d.0,
        &run_args(
            &need!(MQTT),
            &[
                "--rate",
                "0.25",
                "--keep-alive",
                "1s",
                "--duration",
                "5s",
                "--topic",
                "it/ka",
            ],
        ),
    );
    let kinds: Vec<&str> = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert!(!kinds.contains(&"disconnected"), "{kinds:?}");
    assert_eq!(u(&r["integrity"]["lost"]), 0);
    assert!(u(&r["integrity"]["delivered"]) >= 1);
}

/// More held connections than the process may open files: with its hard limit lowered to 600,
/// msgbench holds 1,500 connections in io_uring tables (several, as each table may be only as
/// large as the limit), keeps them alive with pings and publishes through them. The URL names
/// two brokers, which share the clients round robin: killing the second drops exactly its half.
#[test]
fn holds_more_connections_than_the_open_file_limit() {
    let d = TempDir::new("mqtt-fd-free");
    let port = free_port();
    let mut second = Killed(start_mosquitto(port, &d.0));
    let url = format!("{},127.0.0.1:{port}", need!(MQTT));
    let args = [
        "run",
        &url,
        "--connections",
        "1500",
        "--connect-rate",
        "3000",
        "--hold",
        "4s",
        "--keep-alive",
        "1s",
        "--publish-interval",
        "500ms",
        "-o",
        "held.jsonl",
    ];
    let run = spawn_run_with_nofile(&d.0, &args, 600);
    // Once every connection is open and has lived through a few keep-alive periods, the second
    // broker dies.
    wait_for_record(&d.path("held.jsonl"), "\"connected\"");
    std::thread::sleep(Duration::from_millis(2500));
    second.kill();
    let r = finish_json(run);
    let c = &r["connections"];
    assert_eq!(u(&c["peak_held"]), 1500, "{c}");
    assert_eq!(u(&c["fd_limit"]), 600, "{c}");
    assert_eq!(c["fd_free"].as_bool(), Some(true), "{c}");
    let text = stdout(&msgbench(&d.0, &["report", "held.jsonl"]));
    assert!(
        text.contains("open-file limit 600 (connections held beyond it in io_uring tables)"),
        "{text}"
    );
    let m = measure(&r);
    assert_eq!(u(&m["counters"]["connects"]), 1500, "{m}");
    assert!(
        r["events"].to_string().contains("io_uring"),
        "{}",
        r["events"]
    );
    // Pings kept the survivors alive: only the dead broker's half dropped; the rest closed.
    assert_eq!(phase_sum(&r, "dropped"), 750, "{}", r["phases"]);
    assert_eq!(phase_sum(&r, "closes"), 750, "{}", r["phases"]);
    // Each connection published at least once every 500 ms for over 2 s.
    let sent = phase_sum(&r, "sent");
    assert!(sent >= 1500 * 4, "sent {sent}");
}

/// A client whose broker of a list dies fails over to the next broker and goes on.
#[test]
fn clients_fail_over_to_the_next_broker() {
    let d = TempDir::new("mqtt-failover");
    let port = free_port();
    let mut second = Killed(start_mosquitto(port, &d.0));
    let first = need!(MQTT);
    let url = format!("{first},127.0.0.1:{port}");
    let first = first.trim_start_matches("mqtt://").to_string();
    assert_fails_over(&d.0, &url, "it/failover", &first, &mut second);
}

/// Consumers at connection scale: they ramp at `--connect-rate` from the `--source-addrs`
/// given, and two refused connections are counted and retried, not the end of the run.
#[test]
fn consumers_ramp_from_source_addresses_and_retry_refused_connections() {
    util::ramp::consumers_ramp_through_a_refusing_proxy(&need!(MQTT), "it.ramp.mqtt", &[]);
}

/// Churn: held connections dropped one at a time at a rate and opened again at once, against
/// Mosquitto and nats-server. Every drop is answered (back or failed) with its latency from the
/// drop, the drops follow the rate over the hold, and the report says so.
#[test]
fn churn_drops_and_reopens_at_a_rate() {
    let d = TempDir::new("mqtt-churn");
    for url in [need!(MQTT), need!(NATS)] {
        let r = run_json(
            &d.0,
            &[
                "run",
                &url,
                "--connections",
                "200",
                "--hold",
                "3s",
                "--churn",
                "100",
                "--publish-interval",
                "200ms",
                "-o",
                "churn.jsonl",
            ],
        );
        assert_valid_and_pure(&d.0, "churn.jsonl", &r);
        let c = &r["connections"];
        let ch = &c["churn"];
        // 100/s over a 3 s hold: one drop every 10 ms from the ramp's end to the hold's.
        let dropped = u(&ch["dropped"]);
        assert!((270..=301).contains(&dropped), "{url}: {ch}");
        assert_eq!(u(&ch["skipped"]), 0, "{url}: {ch}");
        assert_eq!(u(&ch["failed"]), 0, "{url}: {ch}");
        assert_eq!(u(&ch["back"]), dropped, "{url}: {ch}");
        assert_eq!(u(&ch["latency"]["count"]), dropped, "{url}: {ch}");
        assert!(u(&ch["latency"]["p50"]) > 0, "{url}: {ch}");
        // Round the fleet: more drops than connections, yet all 200 held to the end.
        assert_eq!(phase_sum(&r, "closes"), 200, "{url}");
        assert_eq!(u(&c["peak_held"]), 200, "{url}: {c}");
        // Each connection published on its schedule, less what fell into its downtime.
        let missed = c["publishes_missed"].as_u64().unwrap_or(0);
        assert!(missed <= dropped, "{url}: {c}");
        let sent = phase_sum(&r, "sent");
        assert!(sent >= 200 * 14, "{url}: {sent} publishes");
        let text = stdout(&msgbench(&d.0, &["report", "churn.jsonl"]));
        assert!(
            text.contains(&format!("{dropped} dropped at 100/s")),
            "{text}"
        );
    }
    let err = refused(
        &d.0,
        &["run", "mem://x", "--storm", "--churn", "10"],
        "connections.churn",
    );
    assert!(err.contains("hold mode"), "{err}");
    refused(
        &d.0,
        &["run", "mem://x", "--connections", "5", "--churn", "0"],
        "positive number of drops",
    );
}

/// Fan-out receivers beyond the open-file limit: 300 consumers of one topic with a limit of
/// 200 descriptors are held in io_uring tables, and each counts every message (Mosquitto).
#[test]
fn receivers_beyond_the_open_file_limit_count_every_message() {
    let url = need!(MQTT);
    let d = TempDir::new("mqtt-fanout-nofile");
    assert_fanout_beyond_nofile(
        &d.0,
        &url,
        &format!("it/fanout/nofile{}", std::process::id()),
    );
}

/// One MQTT packet read from a raw socket: its type (the high nibble) and body.
fn read_mqtt(s: &mut std::net::TcpStream) -> std::io::Result<(u8, Vec<u8>)> {
    use std::io::Read;
    let mut b = [0u8; 1];
    s.read_exact(&mut b)?;
    let kind = b[0] >> 4;
    let (mut len, mut shift) = (0usize, 0);
    loop {
        s.read_exact(&mut b)?;
        len |= ((b[0] & 0x7f) as usize) << shift;
        shift += 7;
        if b[0] & 0x80 == 0 {
            break;
        }
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body)?;
    Ok((kind, body))
}

/// Answers packets on `s` (SUBACK granting what was asked, PINGRESP) until `until` or the
/// client leaves; whether a SUBSCRIBE came.
fn serve_mqtt_until(s: &mut std::net::TcpStream, until: Instant) -> bool {
    use std::io::Write;
    let mut subscribed = false;
    while Instant::now() < until {
        let left = until.saturating_duration_since(Instant::now());
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match read_mqtt(s) {
            Ok((8, body)) => {
                subscribed = true;
                let qos = *body.last().unwrap();
                let _ = s.write_all(&[0x90, 3, body[0], body[1], qos]);
            }
            Ok((12, _)) => {
                let _ = s.write_all(&[0xd0, 0]);
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    subscribed
}

/// A broker that answers a clean session's CONNECT with Session Present (hmq does; MQTT-3.2.2-1
/// forbids it): the consumer says so, takes the session as new and subscribes again after a
/// lost connection, instead of waiting, unsubscribed, for the rest of the run.
#[test]
fn a_clean_session_the_broker_claims_kept_is_subscribed_again() {
    use std::io::Write;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("mqtt://{}", l.local_addr().unwrap());
    let broker = std::thread::spawn(move || {
        let mut resubscribed = false;
        for round in 0..2 {
            let (mut s, _) = l.accept().unwrap();
            let (kind, _) = read_mqtt(&mut s).unwrap();
            assert_eq!(kind, 1, "CONNECT");
            s.write_all(&[0x20, 2, 1, 0]).unwrap(); // CONNACK, Session Present
            let wait = Duration::from_millis(if round == 0 { 1000 } else { 1500 });
            let subscribed = serve_mqtt_until(&mut s, Instant::now() + wait);
            if round == 1 {
                resubscribed = subscribed;
                serve_mqtt_until(&mut s, Instant::now() + Duration::from_secs(5));
            }
        }
        resubscribed
    });
    let d = TempDir::new("mqtt-claimed-session");
    let run = spawn_run(
        &d.0,
        &run_args(
            &url,
            &[
                "--mqtt-version",
                "3.1.1",
                "--segment",
                "consumers",
                "-c",
                "1",
                "-d",
                "3s",
            ],
        ),
    );
    let o = run.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        broker.join().unwrap(),
        "no SUBSCRIBE after the reconnection: {err}"
    );
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        r["events"].to_string().contains("Session Present"),
        "{}",
        r["events"]
    );
}

/// A broker's DISCONNECT to a producer (MQTT 5, here "receive maximum exceeded") is the reason
/// the run gives for the lost connection, by name, not the end of file that follows it.
#[test]
fn a_producer_says_why_the_broker_disconnected_it() {
    use std::io::Write;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("mqtt://{}", l.local_addr().unwrap());
    let broker = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let (kind, _) = read_mqtt(&mut s).unwrap();
        assert_eq!(kind, 1, "CONNECT");
        s.write_all(&[0x20, 3, 0, 0, 0]).unwrap(); // MQTT 5 CONNACK, no properties
        loop {
            let (kind, _) = read_mqtt(&mut s).unwrap();
            if kind == 3 {
                s.write_all(&[0xe0, 2, 0x93, 0]).unwrap(); // DISCONNECT, receive maximum exceeded
                return;
            }
        }
    });
    let d = TempDir::new("mqtt-disconnected");
    let run = spawn_run(
        &d.0,
        &run_args(
            &url,
            &[
                "--mqtt-version",
                "5",
                "--qos",
                "1",
                "--segment",
                "producers",
                "-r",
                "20",
                "-d",
                "1s",
            ],
        ),
    );
    broker.join().unwrap();
    let o = run.wait_with_output().unwrap();
    let r: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    assert!(
        r["events"]
            .to_string()
            .contains("receive maximum exceeded (reason code 0x93)"),
        "{}",
        r["events"]
    );
}

/// An MQTT 5 broker that refuses publishes in its PUBACK (Mosquitto's ACL: 0x87 not
/// authorized; its message_size_limit: 0x95 packet too large): each refusal is a nack, and the
/// reason is said once, by name.
#[test]
fn a_refused_publish_says_the_brokers_reason() {
    use std::io::Write;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("mqtt://{}", l.local_addr().unwrap());
    let broker = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let (kind, _) = read_mqtt(&mut s).unwrap();
        assert_eq!(kind, 1, "CONNECT");
        s.write_all(&[0x20, 3, 0, 0, 0]).unwrap(); // MQTT 5 CONNACK, no properties
        let mut refused = 0;
        while let Ok((kind, body)) = read_mqtt(&mut s) {
            match kind {
                // PUBLISH at QoS 1: topic (2-byte length), then the packet id.
                3 => {
                    let t = u16::from_be_bytes([body[0], body[1]]) as usize;
                    let (a, b) = (body[2 + t], body[3 + t]);
                    s.write_all(&[0x40, 3, a, b, 0x87]).unwrap(); // PUBACK, not authorized
                    refused += 1;
                }
                12 => s.write_all(&[0xd0, 0]).unwrap(),
                14 => break, // DISCONNECT
                _ => {}
            }
        }
        refused
    });
    let d = TempDir::new("mqtt-puback-refused");
    let r = run_json(
        &d.0,
        &run_args(
            &url,
            &[
                "--mqtt-version",
                "5",
                "--qos",
                "1",
                "--segment",
                "producers",
                "-n",
                "20",
                "-r",
                "100",
            ],
        ),
    );
    let refused = broker.join().unwrap();
    let c = &measure(&r)["counters"];
    assert_eq!(u(&c["nacked"]), 20, "{c}");
    assert!(refused >= 20, "{refused}");
    let events = r["events"].to_string();
    assert_eq!(
        events.matches("not authorized (reason code 0x87)").count(),
        1,
        "{events}"
    );
}

/// A client id pattern that gives two clients one id is refused before connecting (exit 2):
/// the broker would cut each off when the other connects, and the run would only measure
/// that. With `{role}` one publisher and one subscriber are distinct; two of either are not.
#[test]
fn a_client_id_shared_by_several_clients_is_refused() {
    let d = TempDir::new("mqtt-same-id");
    let url = need!(MQTT);
    let o = msgbench(
        &d.0,
        &run_args(&url, &["--client-id", "same-id", "-n", "10"]),
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("session takeover"), "{}", stderr(&o));
    let o = msgbench(
        &d.0,
        &run_args(&url, &["--client-id", "it-{role}", "-c", "2", "-n", "10"]),
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let r = run_json(
        &d.0,
        &run_args(
            &url,
            &[
                "--client-id",
                &format!("it-same-{}-{{role}}", std::process::id()),
                "-n",
                "100",
                "--topic",
                "it.same-id",
            ],
        ),
    );
    assert_eq!(u(&r["integrity"]["delivered"]), 100, "{}", r["integrity"]);
}

/// A client at another protocol's port says which protocol answered, not the parse error its
/// first byte makes: RabbitMQ's AMQP port sends its protocol header back, nginx an HTTP 400,
/// nats-server its INFO (the WebSocket client there).
#[test]
fn a_wrong_port_is_named_by_the_protocol_that_answered() {
    let d = TempDir::new("mqtt-wrong-port");
    let hostport = |url: String| {
        url.split("://")
            .nth(1)
            .unwrap()
            .rsplit('@')
            .next()
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_string()
    };
    for (url, says) in [
        (format!("mqtt://{}", hostport(need!(AMQP))), "speaks AMQP"),
        (
            format!("mqtt://{}", hostport(need!("MSGBENCH_IT_HTTP_URL"))),
            "speaks HTTP",
        ),
        (format!("ws://{}/", hostport(need!(NATS))), "speaks NATS"),
    ] {
        let o = msgbench(
            &d.0,
            &run_args(&url, &["-n", "10", "--connect-timeout", "5s"]),
        );
        assert_eq!(o.status.code(), Some(1), "{url}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{url}: {}", stderr(&o));
    }
}

/// Mochi MQTT, a Go broker msgbench did not write and a third implementation beside Mosquitto
/// and Artemis (`scripts/brokers.sh up` builds it with Go: `MSGBENCH_IT_MOCHI_MQTT`), started
/// here on free ports: QoS 0, 1 and 2, MQTT 5 with a shared subscription, a wildcard over
/// several topics, retained messages and MQTT over WebSocket each deliver every message
/// exactly once, with every QoS 1/2 publish acknowledged.
#[test]
fn mochi_mqtt_broker() {
    let Ok(bin) = std::env::var("MSGBENCH_IT_MOCHI_MQTT") else {
        eprintln!("skipped: no Mochi MQTT (scripts/brokers.sh up builds one with Go)");
        return;
    };
    let (tcp, ws, info) = (free_port(), free_port(), free_port());
    let at = |p: u16| format!("127.0.0.1:{p}");
    let child = Command::new(&bin)
        .args(["-tcp", &at(tcp), "-ws", &at(ws), "-info", &at(info)])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{bin}: {e}"));
    let _broker = Killed(child);
    assert!(
        listens_within(tcp, Duration::from_secs(5)) && listens_within(ws, Duration::from_secs(5)),
        "Mochi MQTT did not open ports {tcp} and {ws}"
    );
    let d = TempDir::new("mqtt-mochi");
    let url = format!("mqtt://127.0.0.1:{tcp}");
    let over_ws = format!("mqtt+ws://127.0.0.1:{ws}/");
    let pubsub = ["-p", "2", "-c", "2", "-n", "2000"];
    let cases: [(&str, Vec<&str>, u64); 7] = [
        (&url, [&pubsub[..], &["--topic", "it/m0"]].concat(), 4000),
        (
            &url,
            [&pubsub[..], &["--qos", "1", "--topic", "it/m1"]].concat(),
            4000,
        ),
        (
            &url,
            [&pubsub[..], &["--qos", "2", "--topic", "it/m2"]].concat(),
            4000,
        ),
        (
            &url,
            vec![
                "--mqtt-version",
                "5",
                "--qos",
                "1",
                "-c",
                "3",
                "--queue-group",
                "g",
                "-n",
                "3000",
                "--topic",
                "it/ms",
            ],
            3000,
        ),
        (
            &url,
            vec![
                "--qos",
                "1",
                "--topics",
                "3",
                "--topic",
                "it/mw/{i}",
                "--subscribe",
                "it/mw/+",
                "-n",
                "3000",
            ],
            9000,
        ),
        (
            &url,
            [&pubsub[..], &["--qos", "1", "--retain", "--topic", "it/mr"]].concat(),
            4000,
        ),
        (
            &over_ws,
            [&pubsub[..], &["--qos", "1", "--topic", "it/mws"]].concat(),
            4000,
        ),
    ];
    for (target, extra, expected) in cases {
        let r = run_json(&d.0, &run_args(target, &extra));
        let ctx = format!("{target} {extra:?}: {}", r["integrity"]);
        let i = &r["integrity"];
        assert_eq!(
            (u(&i["expected"]), u(&i["delivered"]), u(&i["duplicated"])),
            (expected, expected, 0),
            "{ctx}"
        );
        let c = &measure(&r)["counters"];
        if extra.contains(&"--qos") {
            assert_eq!(u(&c["acked"]), u(&c["sent"]), "{ctx}: {c}");
        }
    }
}
