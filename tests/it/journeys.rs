//! Journeys (`[connections] mode = "journey"`): virtual users running steps, against real
//! brokers, with a third-party subscriber counting what they published.

use crate::thirdparty::{paho_counter, peer_python};
use crate::util::*;
use std::io::BufRead;

/// 40 virtual users, each three times: connect, publish 5 at 50/s, an exponential think time,
/// disconnect. Against Mosquitto a paho-mqtt subscriber counts every message (600); against
/// nats-server the same journey from flags. Every pass connects once and closes once.
#[test]
fn journeys_run_their_steps_against_real_brokers() {
    let mqtt = need!(MQTT);
    let nats = need!(NATS);
    let Some(py) = peer_python("paho.mqtt.client", "python3-paho-mqtt") else {
        return;
    };
    let d = TempDir::new("journeys");
    let root = format!("journeys{}", std::process::id());
    let topic = format!("{root}/j");
    let (mut sub, mut out) = paho_counter(&py, &mqtt, &topic, 600);
    let scenario = d.path("journey.toml");
    std::fs::write(
        &scenario,
        format!(
            r#"name = "journeys it"
target = "{mqtt}"
topics = {{ count = 1, pattern = "{topic}" }}
[phases]
duration = "30s"
warmup = "0s"

[connections]
mode = "journey"
count = 40
rate = 200
arrival = "poisson"
repeat = 3
journey = [
  "connect",
  "publish 5 at 50/s",
  "sleep exp:50ms",
  "disconnect",
]
"#
        ),
    )
    .unwrap();
    let r = run_json(&d.0, &["run", scenario.to_str().unwrap(), "-o", "j.jsonl"]);
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let _ = sub.wait();
    assert_eq!(
        line.trim(),
        "600",
        "paho-mqtt counted the journeys' messages"
    );
    let check = |r: &serde_json::Value, what: &str| {
        let c = &r["connections"];
        assert_eq!(c["mode"], "journey", "{what}: {c}");
        assert_eq!(phase_sum(r, "connects"), 120, "{what}");
        assert_eq!(phase_sum(r, "closes"), 120, "{what}");
        assert_eq!(phase_sum(r, "sent"), 600, "{what}");
        assert_eq!(phase_sum(r, "dropped"), 0, "{what}");
        assert_eq!(u(&measure(r)["connect"]["count"]), 120, "{what}");
        // The run ended when the journeys did, well before its 30 s.
        assert!(r["duration_s"].as_f64().unwrap() < 20.0, "{what}");
    };
    check(&r, "mqtt");
    assert_valid_and_pure(&d.0, "j.jsonl", &r);
    let text = stdout(&msgbench(&d.0, &["report", "j.jsonl"]));
    assert!(text.contains("120 by 40 virtual users"), "{text}");
    let r = run_json(
        &d.0,
        &[
            "run",
            &nats,
            "--topic",
            &format!("{root}.j"),
            "--connections",
            "40",
            "--connect-rate",
            "200",
            "--journey",
            "connect; publish 5 at 50/s; sleep exp:50ms; disconnect",
            "--journey-repeat",
            "3",
            "--duration",
            "30s",
            "-o",
            "n.jsonl",
        ],
    );
    check(&r, "nats");
    assert_valid_and_pure(&d.0, "n.jsonl", &r);
}

/// Journeys far shorter than a reporting tick (connect, publish one, disconnect): the peak of
/// connections held is counted at each open, not only where a tick happened to see one.
#[test]
fn the_peak_held_counts_journeys_shorter_than_a_tick() {
    let nats = need!(NATS);
    let d = TempDir::new("journeys-peak");
    let topic = format!("jpeak{}.t", std::process::id());
    let r = run_json(
        &d.0,
        &[
            "run",
            &nats,
            "--topic",
            &topic,
            "--connections",
            "5",
            "--journey",
            "connect; publish 1; disconnect",
            "--journey-repeat",
            "1",
            "--duration",
            "10s",
            "--no-output",
        ],
    );
    assert_eq!(phase_sum(&r, "connects"), 5);
    let peak = u(&r["connections"]["peak_held"]);
    assert!((1..=5).contains(&peak), "{}", r["connections"]);
}

/// Journeys that subscribe: 10 users each subscribe to the shared topic, wait for the others
/// to do the same, publish 5 and stay a second before leaving, so every user hears all 50
/// messages (500 received), from Mosquitto and from nats-server. A paho-mqtt subscriber of
/// its own counts the 50 published on the MQTT run.
#[test]
fn journeys_subscribe_and_count_what_they_hear() {
    let mqtt = need!(MQTT);
    let nats = need!(NATS);
    let Some(py) = peer_python("paho.mqtt.client", "python3-paho-mqtt") else {
        return;
    };
    let d = TempDir::new("journeys-sub");
    let root = format!("jsub{}", std::process::id());
    let journey = "connect; subscribe; sleep 500ms; publish 5; sleep 1s; disconnect";
    let check = |r: &serde_json::Value, what: &str| {
        assert_eq!(phase_sum(r, "connects"), 10, "{what}");
        assert_eq!(phase_sum(r, "sent"), 50, "{what}");
        assert_eq!(
            phase_sum(r, "received"),
            500,
            "{what}: every user hears all 50"
        );
        assert_eq!(phase_sum(r, "received_bytes"), 500 * 100, "{what}");
        assert_eq!(phase_sum(r, "dropped"), 0, "{what}");
    };
    let topic = format!("{root}/t");
    let (mut sub, mut out) = paho_counter(&py, &mqtt, &topic, 50);
    for (url, topic, file) in [
        (&mqtt, topic.clone(), "m.jsonl"),
        (&nats, format!("{root}.t"), "n.jsonl"),
    ] {
        let r = run_json(
            &d.0,
            &[
                "run",
                url,
                "--topic",
                &topic,
                "--size",
                "100",
                "--connections",
                "10",
                "--connect-rate",
                "1000",
                "--journey",
                journey,
                "--journey-repeat",
                "1",
                "--duration",
                "30s",
                "-o",
                file,
            ],
        );
        check(&r, url);
        assert_valid_and_pure(&d.0, file, &r);
        let text = stdout(&msgbench(&d.0, &["report", file]));
        assert!(text.contains("500 by their subscriptions"), "{text}");
    }
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let _ = sub.wait();
    assert_eq!(
        line.trim(),
        "50",
        "paho-mqtt counted the journeys' messages"
    );
}

/// Journeys that subscribe over AMQP 0-9-1, through RabbitMQ: on `amq.topic` each of 10 users
/// binds a queue of its own, so each hears all 50 messages (500), and a paho-mqtt subscriber
/// on RabbitMQ's MQTT plugin (`.` is `/` there) counts the 50 too; on the default exchange
/// the users share the queue the topic names, so the 50 are heard once (50).
#[test]
fn journeys_subscribe_over_amqp_hear_fan_out_or_share_a_queue() {
    let amqp = need!(AMQP);
    let rmq_mqtt = need!("MSGBENCH_IT_RMQ_MQTT_URL");
    let Some(py) = peer_python("paho.mqtt.client", "python3-paho-mqtt") else {
        return;
    };
    let d = TempDir::new("journeys-amqp-sub");
    let root = format!("jasub{}", std::process::id());
    let (mut sub, mut out) = paho_counter(&py, &rmq_mqtt, &format!("{root}/t"), 50);
    let run = |exchange: &str, topic: &str, file: &str| {
        run_json(
            &d.0,
            &[
                "run",
                &amqp,
                "--exchange",
                exchange,
                "--topic",
                topic,
                "--size",
                "100",
                "--connections",
                "10",
                "--connect-rate",
                "1000",
                "--journey",
                "connect; subscribe; sleep 500ms; publish 5; sleep 1s; disconnect",
                "--journey-repeat",
                "1",
                "--duration",
                "30s",
                "-o",
                file,
            ],
        )
    };
    for (exchange, topic, file, heard) in [
        ("amq.topic", format!("{root}.t"), "fan.jsonl", 500),
        ("", format!("{root}.q"), "queue.jsonl", 50),
    ] {
        let r = run(exchange, &topic, file);
        let what = format!("exchange `{exchange}`");
        assert_eq!(phase_sum(&r, "connects"), 10, "{what}");
        assert_eq!(phase_sum(&r, "sent"), 50, "{what}");
        assert_eq!(phase_sum(&r, "received"), heard, "{what}");
        assert_eq!(phase_sum(&r, "received_bytes"), heard * 100, "{what}");
        assert_eq!(phase_sum(&r, "closes"), 10, "{what}");
        assert_valid_and_pure(&d.0, file, &r);
    }
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let _ = sub.wait();
    assert_eq!(line.trim(), "50", "paho-mqtt heard the AMQP journeys");
}

/// Journeys that send requests through nats-server: 5 users each send 10 paced requests and
/// 3 back to back, each waiting for its reply from a responding msgbench consumer in another
/// process; all 65 are answered and timed, from the send and from the intended send time.
#[test]
fn journeys_request_and_time_the_replies() {
    let nats = need!(NATS);
    let d = TempDir::new("journeys-req");
    let topic = format!("jreq{}.t", std::process::id());
    let mut responder = spawn_run(
        &d.0,
        &[
            "run",
            &nats,
            "--topic",
            &topic,
            "--request-reply",
            "--producers",
            "1",
            "--rate",
            "1",
            "--consumers",
            "1",
            "--duration",
            "60s",
            "--no-output",
        ],
    );
    std::thread::sleep(std::time::Duration::from_millis(500));
    let r = run_json(
        &d.0,
        &[
            "run",
            &nats,
            "--topic",
            &topic,
            "--size",
            "100",
            "--connections",
            "5",
            "--connect-rate",
            "1000",
            "--journey",
            "connect; sleep 1s; request 10 at 20/s; request 3; disconnect",
            "--journey-repeat",
            "1",
            "--duration",
            "30s",
            "-o",
            "r.jsonl",
        ],
    );
    let _ = responder.kill();
    let _ = responder.wait();
    assert_eq!(phase_sum(&r, "sent"), 65);
    assert_eq!(phase_sum(&r, "acked"), 65, "every request answered");
    assert_eq!(u(&measure(&r)["publish"]["count"]), 65, "round trips timed");
    assert_eq!(
        u(&measure(&r)["e2e"]["count"]),
        65,
        "and from the intended time"
    );
    assert_eq!(phase_sum(&r, "closes"), 5);
    assert_valid_and_pure(&d.0, "r.jsonl", &r);
    let text = stdout(&msgbench(&d.0, &["report", "r.jsonl"]));
    assert!(
        text.contains("65 to requests, 0 not answered in time"),
        "{text}"
    );
    assert!(text.contains("req intended"), "{text}");
}

/// MQTT 5 requests through Mosquitto, answered by a third-party responder (paho-mqtt, MQTT 5)
/// that replies to each request's Response Topic with its Correlation Data: 4 users send 10
/// paced requests and 2 back to back, all 48 answered and timed. With MQTT 3.1.1, which has no
/// response topic, the step is refused before anything connects.
#[test]
fn journeys_request_over_mqtt_5_and_a_paho_responder_answers() {
    let mqtt = need!(MQTT);
    let Some(py) = peer_python("paho.mqtt.client", "python3-paho-mqtt") else {
        return;
    };
    let d = TempDir::new("journeys-mqtt-req");
    let topic = format!("jreq{}/svc", std::process::id());
    let script = r#"
import sys, time
import paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties
from paho.mqtt.packettypes import PacketTypes
host, port, topic = sys.argv[1], int(sys.argv[2]), sys.argv[3]
n = [0]
def on_message(c, u, m):
    p = getattr(m, "properties", None)
    if p is None or not hasattr(p, "ResponseTopic"):
        return
    out = Properties(PacketTypes.PUBLISH)
    out.CorrelationData = p.CorrelationData
    c.publish(p.ResponseTopic, b"re:" + m.payload[:8], qos=0, properties=out)
    n[0] += 1
c = mqtt.Client(protocol=mqtt.MQTTv5)
c.on_message = on_message
c.on_connect = lambda c, u, f, rc, props=None: c.subscribe(topic, qos=0)
c.connect(host, port)
c.loop_start()
time.sleep(1)
print("ready", flush=True)
end = time.time() + 60
while n[0] < 48 and time.time() < end:
    time.sleep(0.05)
time.sleep(0.3)
c.loop_stop()
print(n[0], flush=True)
"#;
    let addr = mqtt.trim_start_matches("mqtt://");
    let (host, port) = addr.rsplit_once(':').unwrap();
    let (mut responder, mut out) =
        crate::thirdparty::ready_peer(&py, script, &[host, port, &topic]);
    let journey = [
        "run",
        &mqtt,
        "--topic",
        &topic,
        "--size",
        "100",
        "--connections",
        "4",
        "--connect-rate",
        "1000",
        "--journey",
        "connect; request 10 at 20/s; request 2; disconnect",
        "--journey-repeat",
        "1",
        "--duration",
        "30s",
    ];
    let mut args = journey.to_vec();
    args.extend(["--mqtt-version", "5", "-o", "r.jsonl"]);
    let r = run_json(&d.0, &args);
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let _ = responder.wait();
    assert_eq!(
        line.trim(),
        "48",
        "the paho responder answered every request"
    );
    assert_eq!(phase_sum(&r, "sent"), 48);
    assert_eq!(
        phase_sum(&r, "acked"),
        48,
        "every request's reply was matched"
    );
    assert_eq!(u(&measure(&r)["publish"]["count"]), 48, "round trips timed");
    assert_eq!(
        u(&measure(&r)["e2e"]["count"]),
        48,
        "and from the intended time"
    );
    assert_eq!(phase_sum(&r, "closes"), 4);
    assert_valid_and_pure(&d.0, "r.jsonl", &r);
    let mut v3 = journey.to_vec();
    v3.extend(["--no-output"]);
    let o = msgbench(&d.0, &v3);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains("mqtt:// with --mqtt-version 5"), "{e}");
}

/// AMQP 0-9-1 requests through RabbitMQ with direct reply-to, answered by a third-party RPC
/// server (pika) that replies to each request's reply-to with its correlation-id: 3 users
/// send 8 paced requests and 2 back to back, all 30 answered and timed.
#[test]
fn journeys_request_over_amqp_and_a_pika_responder_answers() {
    let amqp = need!(AMQP);
    let Some(py) = peer_python("pika", "python3-pika") else {
        return;
    };
    let d = TempDir::new("journeys-amqp-req");
    let queue = format!("jreq{}.svc", std::process::id());
    let script = r#"
import sys, threading, time
import pika
url, queue = sys.argv[1], sys.argv[2]
conn = pika.BlockingConnection(pika.URLParameters(url))
ch = conn.channel()
ch.queue_declare(queue=queue, auto_delete=True)
n = [0]
def on_request(ch, method, props, body):
    ch.basic_publish(exchange="", routing_key=props.reply_to,
                     properties=pika.BasicProperties(correlation_id=props.correlation_id),
                     body=b"re:" + body[:8])
    n[0] += 1
ch.basic_consume(queue=queue, on_message_callback=on_request, auto_ack=True)
print("ready", flush=True)
end = time.time() + 60
while n[0] < 30 and time.time() < end:
    conn.process_data_events(time_limit=0.1)
conn.process_data_events(time_limit=0.3)
print(n[0], flush=True)
conn.close()
"#;
    let (mut responder, mut out) = crate::thirdparty::ready_peer(&py, script, &[&amqp, &queue]);
    let r = run_json(
        &d.0,
        &[
            "run",
            &amqp,
            "--topic",
            &queue,
            "--size",
            "64",
            "--connections",
            "3",
            "--connect-rate",
            "1000",
            "--journey",
            "connect; request 8 at 20/s; request 2; disconnect",
            "--journey-repeat",
            "1",
            "--duration",
            "30s",
            "-o",
            "r.jsonl",
        ],
    );
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let _ = responder.wait();
    assert_eq!(line.trim(), "30", "pika answered every request");
    assert_eq!(phase_sum(&r, "sent"), 30);
    assert_eq!(
        phase_sum(&r, "acked"),
        30,
        "every reply matched by correlation-id"
    );
    assert_eq!(u(&measure(&r)["publish"]["count"]), 30, "round trips timed");
    assert_eq!(phase_sum(&r, "closes"), 3);
    assert_valid_and_pure(&d.0, "r.jsonl", &r);
}

/// A journey's mistakes: a bad step at its file, line and column; a bad order named by step;
/// the flag's own errors.
#[test]
fn journey_errors_are_clear() {
    let d = TempDir::new("journey-errors");
    let f = d.path("bad.toml");
    std::fs::write(
        &f,
        "target = \"mem://\"\n[connections]\nmode = \"journey\"\ncount = 2\njourney = [\n  \"connect\",\n  \"publish lots\",\n]\n",
    )
    .unwrap();
    let e = refused(&d.0, &["run", f.to_str().unwrap()], "bad.toml:7:3:");
    assert!(e.contains("`lots` is not a whole number"), "{e}");
    std::fs::write(
        &f,
        "target = \"mem://\"\n[connections]\nmode = \"journey\"\ncount = 2\nrepeat = 0\njourney = [\"connect\", \"publish 1\"]\n",
    )
    .unwrap();
    refused(
        &d.0,
        &["run", f.to_str().unwrap()],
        "must end with `disconnect`",
    );
    refused(
        &d.0,
        &[
            "run",
            "mem://",
            "--connections",
            "2",
            "--journey",
            "publish 1; connect",
        ],
        "step 1 (`publish 1`): not connected",
    );
    refused(
        &d.0,
        &[
            "run",
            "mem://",
            "--connections",
            "2",
            "--journey",
            "connect; request a",
        ],
        "`a` is not a whole number",
    );
    // Known only once the driver is made: the run cannot start (exit 1), before connecting.
    let o = msgbench(
        &d.0,
        &[
            "run",
            "ws://127.0.0.1:9/",
            "--connections",
            "2",
            "--journey",
            "connect; subscribe; disconnect",
        ],
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("needs a protocol whose sessions subscribe"),
        "{e}"
    );
    refused(
        &d.0,
        &[
            "run",
            "mem://",
            "--connections",
            "2",
            "--journey-repeat",
            "2",
        ],
        "repeat is for journey mode",
    );
}
