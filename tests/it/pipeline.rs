//! Cross-protocol pipelines (`--consume-from`): producers on one protocol, consumers on another,
//! through RabbitMQ, which bridges AMQP 0-9-1 and MQTT (its MQTT plugin publishes and
//! subscribes on the `amq.topic` exchange; MQTT topic `a/b` is routing key `a.b`).

use crate::util;

use util::*;

/// RabbitMQ's MQTT listener.
const RMQ_MQTT: &str = "MSGBENCH_IT_RMQ_MQTT_URL";

/// Publish on AMQP with confirms, receive over MQTT: every message arrives once, end-to-end
/// latency is measured across the hop, and the results file names both ends.
#[test]
fn amqp_to_mqtt() {
    let d = TempDir::new("pipe-amqp-mqtt");
    let to = need!(RMQ_MQTT);
    let r = run_json(
        &d.0,
        &[
            "run",
            &need!(AMQP),
            "--consume-from",
            &to,
            "--exchange",
            "amq.topic",
            "--exchange-type",
            "topic",
            "--topic",
            "it.pipe.a2m",
            "--subscribe",
            "it/pipe/a2m",
            "--qos",
            "1",
            "--confirm",
            "-c",
            "2",
            "-n",
            "5000",
            "--warmup",
            "0s",
            "-o",
            "r.jsonl",
        ],
    );
    let m = measure(&r);
    assert_eq!(u(&m["counters"]["acked"]), 5000);
    assert_eq!(u(&m["e2e"]["count"]), 10_000, "{m}");
    assert!(u(&m["e2e"]["p50"]) > 0);
    let i = &r["integrity"];
    assert_eq!(
        (u(&i["expected"]), u(&i["delivered"]), u(&i["lost"])),
        (10_000, 10_000, 0),
        "{i}"
    );
    assert_eq!(r["consume_from"], to.as_str(), "{r}");
    assert!(
        !r.to_string().contains("guest:guest"),
        "credentials redacted"
    );
    assert_valid_and_pure(&d.0, "r.jsonl", &r);
}

/// The other way round: MQTT QoS 1 publishers (acked by PUBACK), AMQP consumers sharing a queue
/// bound to `amq.topic`.
#[test]
fn mqtt_to_amqp_queue_group() {
    let d = TempDir::new("pipe-mqtt-amqp");
    let r = run_json(
        &d.0,
        &[
            "run",
            &need!(RMQ_MQTT),
            "--consume-from",
            &need!(AMQP),
            "--exchange",
            "amq.topic",
            "--exchange-type",
            "topic",
            "--topic",
            "it/pipe/m2a",
            "--subscribe",
            "it.pipe.m2a",
            "--qos",
            "1",
            "-p",
            "2",
            "-c",
            "3",
            "--queue-group",
            "m2a",
            "-n",
            "4000",
            "--warmup",
            "0s",
        ],
    );
    let m = measure(&r);
    assert_eq!(u(&m["counters"]["acked"]), 4000);
    let i = &r["integrity"];
    assert_eq!(
        (u(&i["expected"]), u(&i["delivered"]), u(&i["lost"])),
        (4000, 4000, 0),
        "{i}"
    );
}

/// A pipeline end that cannot be one is refused before anything connects, as a usage error
/// (exit code 2).
#[test]
fn bad_pipelines_are_refused() {
    let d = TempDir::new("pipe-bad");
    let o = msgbench(
        &d.0,
        &["run", "nats://127.0.0.1:1", "--consume-from", "mem://"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("pipeline"), "{}", stderr(&o));
    let o = msgbench(
        &d.0,
        &["run", "nats://127.0.0.1:1", "--consume-from", "localhost"],
    );
    assert!(stderr(&o).contains("not a URL"), "{}", stderr(&o));
    let o = msgbench(
        &d.0,
        &["run", "nats://127.0.0.1:1", "--consume-from", "gopher://h"],
    );
    assert!(
        stderr(&o).contains("no driver for `gopher://`"),
        "{}",
        stderr(&o)
    );
}
