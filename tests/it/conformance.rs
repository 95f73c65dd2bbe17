//! The driver conformance suite: the same observable behaviour, checked for every driver against
//! a real target (the in-process broker for `mem://`, nats-server (JetStream on the same
//! server), Mosquitto, RabbitMQ, Redis Streams and Kafka started by `scripts/brokers.sh`, and
//! msgbench's own MQTT broker run as `msgbench serve mqtt`). A new
//! driver adds one line to `targets()`; a target that needs settings beyond its URL is a scenario
//! file naming the target (ActiveMQ Artemis over AMQP 1.0 with the `topic` capability, so that
//! consumers without a group each get every message).

use crate::util;

use util::*;

/// A target: its name, its URL (or a scenario file naming it), whether its driver supports
/// request/reply.
type Target = (&'static str, String, bool);

/// What lives as long as the targets: msgbench's MQTT broker and the scenario files.
type Keep = (Server, TempDir);

/// Every target.
fn targets() -> Option<(Vec<Target>, Keep)> {
    let serve = Server::mqtt();
    let files = TempDir::new("conf-targets");
    let with = |name: &str, url: String, toml: &str| {
        let p = files.path(&format!("{name}.toml"));
        std::fs::write(&p, format!("target = {url:?}\n{toml}\n")).unwrap();
        p.to_string_lossy().into_owned()
    };
    let artemis = with(
        "artemis",
        need!(ARTEMIS, else None),
        "[amqp10]\ncapabilities = [\"topic\"]",
    );
    #[allow(unused_mut)]
    let mut list = vec![
        ("mem", "mem://conformance".to_string(), true),
        ("nats", need!(NATS, else None), true),
        // JetStream: PubAcks, ephemeral pull consumers (per consumer; a durable one per queue
        // group), streams created per topic.
        (
            "jetstream",
            need!("MSGBENCH_IT_NATS_JS_URL", else None),
            false,
        ),
        ("mosquitto", need!(MQTT, else None), false),
        ("rabbitmq", need!(AMQP, else None), false),
        ("mqtt-serve", serve.url.clone(), false),
        ("artemis-amqp10", artemis, false),
        (
            "redis-streams",
            format!("{}?mode=streams&maxlen=500000", need!(REDIS, else None)),
            false,
        ),
    ];
    #[cfg(feature = "kafka")]
    list.push(("kafka", need!(KAFKA, else None), false));
    Some((list, (serve, files)))
}

/// Every message published reaches the subscriber exactly once, with latencies recorded.
#[test]
fn pub_sub_delivers_everything_once() {
    let d = TempDir::new("conf-pubsub");
    let Some((targets, _server)) = targets() else {
        return;
    };
    for (name, url, _) in targets {
        let r = run_json(
            &d.0,
            &[
                "run",
                &url,
                "--topic",
                &format!("conf.pubsub.{name}"),
                "--messages",
                "200000",
                "--size",
                "40",
                "--warmup",
                "0s",
                "--no-output",
            ],
        );
        let i = &r["integrity"];
        assert_eq!(u(&i["expected"]), 200_000, "{name}");
        assert_eq!(u(&i["delivered"]), 200_000, "{name}");
        assert_eq!(
            (u(&i["lost"]), u(&i["duplicated"]), u(&i["reordered"])),
            (0, 0, 0),
            "{name}"
        );
        let m = measure(&r);
        assert_eq!(
            u(&m["e2e"]["count"]),
            u(&m["counters"]["received"]),
            "{name}"
        );
        // Latencies are recorded. (Not `min > 0`: on a VM two vCPUs' clocks can differ by a
        // few hundred ns, and a delivery read "before" its stamp is clamped to 0.)
        assert!(
            u(&m["e2e"]["count"]) > 0 && u(&m["e2e"]["p50"]) > 0,
            "{name}: e2e latencies recorded"
        );
        assert_eq!(u(&m["counters"]["errors"]["send"]), 0, "{name}");
        // Every network driver's sockets report what the kernel's TCP stack did for them.
        let t = &r["tcp"];
        if name == "mem" {
            assert!(t.is_null(), "{name}: no sockets, no TCP figures");
        } else if name == "kafka" {
            // librdkafka opens and closes its sockets itself: msgbench never sees them.
        } else {
            assert!(u(&t["connections"]) >= 1, "{name}: {t}");
            assert!(
                u(&t["data_segs_out"]) >= 1 && u(&t["data_segs_in"]) >= 1,
                "{name}: {t}"
            );
            assert!(u(&t["segs_out"]) >= u(&t["data_segs_out"]), "{name}: {t}");
            assert!(u(&t["segs_in"]) >= u(&t["data_segs_in"]), "{name}: {t}");
        }
    }
}

/// Fan-out: every consumer receives every message.
#[test]
fn fan_out_reaches_every_consumer() {
    let d = TempDir::new("conf-fanout");
    let Some((targets, _server)) = targets() else {
        return;
    };
    for (name, url, _) in targets {
        let r = run_json(
            &d.0,
            &[
                "run",
                &url,
                "--topic",
                &format!("conf.fanout.{name}"),
                "-p",
                "2",
                "-c",
                "3",
                "--messages",
                "30000",
                "--rate",
                "30000",
                "--warmup",
                "0s",
                "--no-output",
            ],
        );
        assert_eq!(u(&r["integrity"]["expected"]), 90_000, "{name}");
        assert_eq!(u(&r["integrity"]["delivered"]), 90_000, "{name}");
        assert_eq!(u(&r["integrity"]["duplicated"]), 0, "{name}");
        // One connection per client, and each adds its TCP counters as it closes.
        if matches!(name, "nats" | "mosquitto" | "mqtt-serve") {
            assert_eq!(u(&r["tcp"]["connections"]), 5, "{name}: {}", r["tcp"]);
        }
    }
}

/// Competing consumers: each message goes to exactly one member of the queue group.
#[test]
fn queue_group_delivers_each_message_once() {
    let d = TempDir::new("conf-queue");
    let Some((targets, _server)) = targets() else {
        return;
    };
    for (name, url, _) in targets {
        let r = run_json(
            &d.0,
            &[
                "run",
                &url,
                "--topic",
                &format!("conf.queue.{name}"),
                "-c",
                "4",
                "--queue-group",
                "workers",
                "--messages",
                "40000",
                "--warmup",
                "0s",
                "--no-output",
            ],
        );
        assert_eq!(u(&r["integrity"]["expected"]), 40_000, "{name}");
        assert_eq!(u(&r["integrity"]["delivered"]), 40_000, "{name}");
        assert_eq!(u(&r["integrity"]["duplicated"]), 0, "{name}");
    }
}

/// Request/reply: every request is answered; publish latency is the round trip.
#[test]
fn request_reply_round_trips() {
    let d = TempDir::new("conf-rr");
    let Some((targets, _server)) = targets() else {
        return;
    };
    for (name, url, rr) in targets {
        if !rr {
            let o = msgbench(
                &d.0,
                &["run", &url, "--request-reply", "-n", "10", "--no-output"],
            );
            assert!(!o.status.success(), "{name}");
            assert!(
                stderr(&o).contains("does not support request/reply"),
                "{name}: {}",
                stderr(&o)
            );
            continue;
        }
        let r = run_json(
            &d.0,
            &[
                "run",
                &url,
                "--topic",
                &format!("conf.rr.{name}"),
                "-p",
                "2",
                "-c",
                "2",
                "--request-reply",
                "--max-in-flight",
                "32",
                "--messages",
                "20000",
                "--warmup",
                "0s",
                "--no-output",
            ],
        );
        let m = measure(&r);
        assert_eq!(u(&m["counters"]["acked"]), 20_000, "{name}");
        assert_eq!(u(&m["publish"]["count"]), 20_000, "{name}");
        assert!(u(&m["publish"]["p50"]) > 0, "{name}");
        assert_eq!(u(&m["counters"]["errors"]["timeout"]), 0, "{name}");
    }
}

/// Several topics from a pattern, a paced Poisson load, a warm-up that is excluded.
#[test]
fn topics_warmup_and_poisson_pacing() {
    let d = TempDir::new("conf-topics");
    let Some((targets, _server)) = targets() else {
        return;
    };
    for (name, url, _) in targets {
        let r = run_json(
            &d.0,
            &[
                "run",
                &url,
                "--topics",
                "3",
                "--topic",
                &format!("conf.t.{name}.{{i}}"),
                "--rate",
                "6000",
                "--rate-shape",
                "poisson",
                "--warmup",
                "500ms",
                "--duration",
                "1s",
                "--no-output",
            ],
        );
        let phases: Vec<&str> = r["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["phase"].as_str().unwrap())
            .collect();
        assert_eq!(phases.first(), Some(&"warmup"), "{name}");
        let sent = u(&measure(&r)["counters"]["sent"]);
        assert!(
            (5000..=7000).contains(&sent),
            "{name}: sent {sent} in 1 s at 6000/s"
        );
        assert_eq!(u(&r["integrity"]["lost"]), 0, "{name}");
    }
}
