//! `--io batched`: each worker thread's connections share one io_uring. The drivers are the
//! same as with readiness polling, so what must hold is what holds there: against third-party
//! servers (nginx, Mosquitto, nats-server, RabbitMQ) every request is answered and every
//! message delivered once, and the results file says how the run did its I/O.

use crate::util;

use util::*;

/// The plan in a results file's first record.
fn begin_plan(d: &TempDir, file: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(d.path(file)).unwrap();
    let begin: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    begin["plan"].clone()
}

/// HTTP/1.1 closed loop against nginx over 20 connections on two workers: all answered.
#[test]
fn http_against_nginx() {
    let url = need!("MSGBENCH_IT_HTTP_URL");
    let d = TempDir::new("batched-http");
    let r = run_json(
        &d.0,
        &[
            "run",
            &url,
            "--method",
            "GET",
            "-p",
            "20",
            "-n",
            "20000",
            "--workers",
            "2",
            "--io",
            "batched",
            "--warmup",
            "0s",
            "-o",
            "r.jsonl",
        ],
    );
    let m = measure(&r);
    assert_eq!(u(&m["counters"]["acked"]), 20_000, "{m}");
    assert_eq!(u(&m["counters"]["nacked"]), 0, "{m}");
    assert_eq!(u(&m["publish"]["count"]), 20_000);
    assert_eq!(begin_plan(&d, "r.jsonl")["io"], "batched");
    // Every connection's I/O went through a ring (the kernel's counters say so at close).
    assert_eq!(u(&r["tcp"]["connections"]), 20, "{}", r["tcp"]);
    assert_eq!(u(&r["tcp"]["batched"]), 20, "{}", r["tcp"]);
    assert_valid_and_pure(&d.0, "r.jsonl", &r);
}

/// MQTT QoS 1 through Mosquitto, one message in flight per publisher, with subscribers: every
/// message acknowledged and delivered once.
#[test]
fn mqtt_qos1_through_mosquitto() {
    let url = need!(MQTT);
    let d = TempDir::new("batched-mqtt");
    let r = run_json(
        &d.0,
        &[
            "run",
            &url,
            "--qos",
            "1",
            "--topic",
            "it/batched/{i}",
            "--topics",
            "4",
            "-c",
            "1",
            "-n",
            "8000",
            "--max-in-flight",
            "1",
            "--io",
            "batched",
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    let m = measure(&r);
    assert_eq!(u(&m["counters"]["acked"]), 8000, "{m}");
    let i = &r["integrity"];
    assert_eq!((u(&i["delivered"]), u(&i["lost"])), (8000, 0), "{i}");
    assert_eq!(u(&i["duplicated"]), 0, "{i}");
    let t = &r["tcp"];
    assert!(u(&t["batched"]) >= 8, "{t}");
    assert_eq!(u(&t["batched"]), u(&t["connections"]), "{t}");
}

/// NATS through nats-server, 2 producers and a consumer per topic: all delivered, in order.
#[test]
fn nats_through_nats_server() {
    let url = need!(NATS);
    let d = TempDir::new("batched-nats");
    let r = run_json(
        &d.0,
        &[
            "run",
            &url,
            "--topic",
            "it.batched.{i}",
            "--topics",
            "2",
            "-n",
            "40000",
            "--io",
            "batched",
            "--workers",
            "2",
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    let i = &r["integrity"];
    assert_eq!((u(&i["delivered"]), u(&i["lost"])), (40_000, 0), "{i}");
    assert_eq!(u(&i["reordered"]), 0, "{i}");
}

/// AMQP 0-9-1 through RabbitMQ with publisher confirms: all confirmed and delivered.
#[test]
fn amqp_confirms_through_rabbitmq() {
    let url = need!(AMQP);
    let d = TempDir::new("batched-amqp");
    let r = run_json(
        &d.0,
        &[
            "run",
            &url,
            "--topic",
            "it.batched",
            "--confirm",
            "--max-in-flight",
            "50",
            "-n",
            "5000",
            "--io",
            "batched",
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    let m = measure(&r);
    assert_eq!(u(&m["counters"]["acked"]), 5000, "{m}");
    let i = &r["integrity"];
    assert_eq!((u(&i["delivered"]), u(&i["lost"])), (5000, 0), "{i}");
}

/// Batched I/O needs worker threads: `--workers 0` with it is refused, saying what to give.
#[test]
fn needs_worker_threads() {
    let d = TempDir::new("batched-bad");
    refused(
        &d.0,
        &[
            "run",
            "mem://",
            "--io",
            "batched",
            "--workers",
            "0",
            "-n",
            "10",
        ],
        "--workers 1 or more",
    );
}
