//! Backlog runs (`--backlog`): consumers subscribed but held back while producers build the
//! backlog in the system, then released; the report gives the backlog, its build time and its
//! drain rate. Against mem:// and the brokers with durable queues and logs: Kafka, JetStream,
//! Redis streams, RabbitMQ and Artemis.

use crate::util;

use util::*;

/// Runs a backlog run against `url` with `extra` arguments: 1 KB messages at 4000/s for 6 s
/// with a 4 MB backlog (about a second's worth), and checks what every driver must show:
/// nothing delivered before the release, the backlog built at the rate, drained, and every
/// message accounted.
fn backlog_run(tag: &str, url: &str, extra: &[&str]) -> serde_json::Value {
    let d = TempDir::new(&format!("backlog-{tag}"));
    let topic = format!(
        "it.backlog.{tag}.{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    );
    let mut args = vec![
        "run",
        url,
        "--topic",
        &topic,
        "--backlog",
        "4MB",
        "--size",
        "1KB",
        "--rate",
        "4000",
        "--duration",
        "6s",
        "--drain",
        "10s",
        "--tick",
        "250ms",
        "-o",
        "b.jsonl",
    ];
    args.extend_from_slice(extra);
    let r = run_json(&d.0, &args);
    let b = &r["backlog"];
    let messages = u(&b["messages"]);
    // The release is checked every 10 ms; a loaded machine may send a little past the mark.
    assert!(
        (4000..6000).contains(&messages),
        "{tag}: 4 MB of 1 KB messages: {b}"
    );
    assert_eq!(u(&b["bytes"]), messages * 1000, "{tag}: {b}");
    let build = b["build_s"].as_f64().unwrap();
    assert!(
        (0.9..2.5).contains(&build) && (build - messages as f64 / 4000.0).abs() < 0.5,
        "{tag}: a second's worth at 4000/s: {b}"
    );
    let drain = b["drain_s"]
        .as_f64()
        .unwrap_or_else(|| panic!("{tag}: drained: {b}"));
    assert!(drain > 0.0 && drain < 5.0, "{tag}: {b}");
    assert!(b["drain_rate"].as_f64().unwrap() > 0.0, "{tag}: {b}");
    // Held back: no interval that ended before the release received anything.
    let before: u64 = r["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|iv| iv["end_s"].as_f64().unwrap() <= build - 0.05)
        .map(|iv| u(&iv["counters"]["received"]))
        .sum();
    assert_eq!(
        before, 0,
        "{tag}: consumers read nothing before the release"
    );
    let i = &r["integrity"];
    assert_eq!(u(&i["lost"]), 0, "{tag}: {i}");
    assert_eq!(u(&i["expected"]), u(&i["delivered"]), "{tag}: {i}");
    assert!(u(&i["expected"]) >= 20_000, "{tag}: {i}");
    let text = msgbench(&d.0, &["report", "b.jsonl"]);
    assert!(
        stdout(&text).contains(&format!("backlog  {messages} msgs")),
        "{tag}: {}",
        stdout(&text)
    );
    r
}

#[test]
fn mem_backlog() {
    // Paced sends go over one at a time: the queue must hold the backlog in batches of one.
    backlog_run("mem", "mem://backlog?capacity=1000000", &[]);
}

#[test]
fn jetstream_backlog() {
    backlog_run("js", &need!("MSGBENCH_IT_NATS_JS_URL"), &[]);
}

#[test]
fn redis_streams_backlog() {
    let url = format!("{}?mode=streams", need!(REDIS));
    backlog_run("redis", &url, &[]);
}

#[test]
fn rabbitmq_backlog() {
    backlog_run(
        "rmq",
        &need!(AMQP),
        &["--queue-group", "g", "--durable", "--purge"],
    );
}

#[test]
fn artemis_backlog() {
    backlog_run("artemis", &need!(ARTEMIS), &["--queue-group", "g"]);
}

#[cfg(feature = "kafka")]
#[test]
fn kafka_backlog() {
    backlog_run("kafka", &need!(KAFKA), &["--partitions", "4"]);
}

/// What a backlog cannot mean is refused with the setting named.
#[test]
fn backlog_misuse_is_a_usage_error() {
    let d = TempDir::new("backlog-bad");
    for (args, needle) in [
        (
            vec!["run", "mem://b", "--backlog", "0", "-n", "10"],
            "larger than zero",
        ),
        (
            vec!["run", "mem://b", "--backlog", "lots", "-n", "10"],
            "invalid size",
        ),
        (
            vec!["run", "mem://b", "--backlog", "1MB", "-c", "0", "-n", "10"],
            "consumers to drain it",
        ),
    ] {
        let o = msgbench(&d.0, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
}
