//! Kafka against a real Apache Kafka broker (KRaft, started by `scripts/brokers.sh up kafka`):
//! acks and publish latency, fan-out and group consumers counted exactly, compression, keyed
//! partitioning over several partitions without false reordering, earliest versus latest,
//! topic creation, and the errors a user meets first.

#![cfg(feature = "kafka")]

use crate::util;

use std::time::{Duration, Instant};
use util::*;

/// A topic name no earlier run used (the broker keeps its topics across runs).
fn topic(tag: &str) -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("it.{tag}.{}.{n:x}", std::process::id())
}

fn run<'a>(url: &'a str, topic: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![
        "run",
        url,
        "--topic",
        topic,
        "--warmup",
        "0s",
        "--drain",
        "5s",
        "--no-output",
    ];
    v.extend_from_slice(extra);
    v
}

/// acks=all: every message is acknowledged by the broker with its publish latency; two fan-out
/// consumers (a group each) get every message, in order, once.
#[test]
fn acks_all_fanout_exact() {
    let url = need!(KAFKA);
    let d = TempDir::new("kafka-fanout");
    let t = topic("fanout");
    let r = run_json(
        &d.0,
        &run(
            &url,
            &t,
            &[
                "--acks", "all", "-p", "2", "-c", "2", "-n", "10000", "-s", "1KiB",
            ],
        ),
    );
    let m = measure(&r);
    assert_eq!(u(&m["counters"]["acked"]), 10_000, "{m}");
    assert_eq!(u(&m["publish"]["count"]), 10_000);
    assert!(u(&m["publish"]["p50"]) > 0);
    let i = &r["integrity"];
    assert_eq!(
        (
            u(&i["delivered"]),
            u(&i["lost"]),
            u(&i["duplicated"]),
            u(&i["reordered"])
        ),
        (20_000, 0, 0, 0),
        "{i}"
    );
}

/// acks=0: the broker confirms nothing, and the run says what "acked" means then (records
/// written); the records still arrive.
#[test]
fn acks_zero_says_what_acked_means() {
    let url = need!(KAFKA);
    let d = TempDir::new("kafka-acks0");
    let t = topic("acks0");
    let r = run_json(
        &d.0,
        &run(
            &url,
            &t,
            &["--acks", "0", "-p", "1", "-c", "1", "-n", "2000"],
        ),
    );
    let told = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "warning")
        .filter(|e| {
            e["detail"]
                .as_str()
                .unwrap()
                .contains("--acks 0: the broker confirms nothing")
        })
        .count();
    assert_eq!(told, 1, "{}", r["events"]);
    assert_eq!(u(&r["integrity"]["delivered"]), 2000, "{}", r["integrity"]);
}

/// Competing consumers in one group over a topic created with three partitions: each message
/// reaches exactly one of them.
#[test]
fn group_consumers_share_partitions() {
    let url = need!(KAFKA);
    let d = TempDir::new("kafka-group");
    let t = topic("group");
    let group = format!("g-{t}");
    let r = run_json(
        &d.0,
        &run(
            &url,
            &t,
            &[
                "--partitions",
                "3",
                "--queue-group",
                &group,
                "-p",
                "2",
                "-c",
                "3",
                "-n",
                "9000",
                "--acks",
                "1",
            ],
        ),
    );
    let i = &r["integrity"];
    assert_eq!(
        (
            u(&i["expected"]),
            u(&i["delivered"]),
            u(&i["lost"]),
            u(&i["duplicated"])
        ),
        (9000, 9000, 0, 0),
        "{i}"
    );
    assert_eq!(u(&i["reordered"]), 0, "{i}");
}

/// Every codec delivers every message.
#[test]
fn compression_codecs_deliver() {
    let url = need!(KAFKA);
    let d = TempDir::new("kafka-codecs");
    for codec in ["gzip", "lz4", "zstd", "snappy", "none"] {
        let t = topic(codec);
        let r = run_json(
            &d.0,
            &run(
                &url,
                &t,
                &["--compression", codec, "-n", "3000", "-s", "512"],
            ),
        );
        let i = &r["integrity"];
        assert_eq!(
            (u(&i["delivered"]), u(&i["lost"])),
            (3000, 0),
            "{codec}: {i}"
        );
    }
}

/// Keyed partitioning spreads each producer's messages over four partitions; a consumer reads
/// them partition batch by partition batch, which is out of order across partitions but never
/// within one: zero reordered, zero lost. Sticky and round-robin too.
#[test]
fn keyed_partitions_zero_reordered() {
    let url = need!(KAFKA);
    let d = TempDir::new("kafka-keyed");
    for how in ["keyed", "round-robin", "sticky"] {
        let t = topic(how);
        let r = run_json(
            &d.0,
            &run(
                &url,
                &t,
                &[
                    "--partitions",
                    "4",
                    "--partitioner",
                    how,
                    "--keys",
                    "64",
                    "-p",
                    "2",
                    "-c",
                    "2",
                    "-n",
                    "20000",
                    "--linger",
                    "20ms",
                ],
            ),
        );
        let i = &r["integrity"];
        assert_eq!(
            (
                u(&i["delivered"]),
                u(&i["lost"]),
                u(&i["duplicated"]),
                u(&i["reordered"])
            ),
            (40_000, 0, 0, 0),
            "{how}: {i}"
        );
    }
}

/// A consumer starting at `earliest` also reads what an earlier run left in the topic (another
/// run's messages: foreign), through as small a fetch buffer as it is given; one starting at
/// `latest` does not.
#[test]
fn earliest_reads_old_messages_latest_does_not() {
    let url = need!(KAFKA);
    let d = TempDir::new("kafka-offsets");
    let t = topic("offsets");
    let r = run_json(&d.0, &run(&url, &t, &["-n", "700"]));
    assert_eq!(u(&r["integrity"]["delivered"]), 700);
    let r = run_json(&d.0, &run(&url, &t, &["-n", "300", "--offset", "latest"]));
    let i = &r["integrity"];
    assert_eq!((u(&i["delivered"]), u(&i["foreign"])), (300, 0), "{i}");
    // A small fetch buffer too: librdkafka takes it, and the backlog still comes in whole.
    let r = run_json(
        &d.0,
        &run(
            &url,
            &t,
            &[
                "-n",
                "200",
                "--offset",
                "earliest",
                "--fetch-buffer",
                "16KiB",
            ],
        ),
    );
    let i = &r["integrity"];
    assert_eq!((u(&i["delivered"]), u(&i["foreign"])), (200, 1000), "{i}");
}

/// `--no-create-topics` refuses a missing topic with its name; async and sync commits work.
#[test]
fn existing_topics_and_commit_modes() {
    let url = need!(KAFKA);
    let d = TempDir::new("kafka-existing");
    let t = topic("missing");
    let o = msgbench(&d.0, &run(&url, &t, &["--no-create-topics", "-n", "10"]));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
    for commit in ["async", "sync", "none"] {
        let t = topic(commit);
        let r = run_json(
            &d.0,
            &run(
                &url,
                &t,
                &["--commit", commit, "--queue-group", &t, "-n", "2000"],
            ),
        );
        assert_eq!(u(&r["integrity"]["delivered"]), 2000, "{commit}");
    }
    // An existing topic with fewer partitions than --partitions asks for: the run uses what
    // the topic has, and says so (it had recorded the number asked for, and said nothing).
    let t = topic("repartition");
    let r = run_json(&d.0, &run(&url, &t, &["--partitions", "3", "-n", "300"]));
    assert_eq!(count_events(&r, "warning"), 0, "{}", r["events"]);
    let r = run_json(&d.0, &run(&url, &t, &["--partitions", "6", "-n", "300"]));
    assert_eq!(u(&r["integrity"]["delivered"]), 300, "{}", r["integrity"]);
    assert!(
        r["events"]
            .to_string()
            .contains("exists with 3 partitions, not the 6 asked for"),
        "{}",
        r["events"]
    );
}

/// A broker that does not answer: a clear error and exit 1 within the connect timeout.
#[test]
fn unreachable_broker_fails_fast() {
    need!(KAFKA);
    let d = TempDir::new("kafka-unreachable");
    let url = format!("kafka://127.0.0.1:{}", free_port());
    let t0 = Instant::now();
    let o = msgbench(
        &d.0,
        &[
            "run",
            &url,
            "-n",
            "10",
            "--connect-timeout",
            "2s",
            "--no-output",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    assert!(stderr(&o).contains("cannot connect"), "{}", stderr(&o));
}

/// Wrong options are usage errors (exit 2) naming the setting.
#[test]
fn bad_options_exit_2() {
    let d = TempDir::new("kafka-bad");
    for (flag, value, says) in [
        ("--acks", "2", "kafka.acks"),
        ("--compression", "brotli", "kafka.compression"),
        ("--offset", "middle", "kafka.start"),
        ("--fetch-buffer", "4GiB", "kafka.fetch_buffer"),
    ] {
        let o = msgbench(
            &d.0,
            &[
                "run",
                "kafka://127.0.0.1:1",
                flag,
                value,
                "-n",
                "1",
                "--no-output",
            ],
        );
        assert_eq!(o.status.code(), Some(2), "{flag}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{flag}: {}", stderr(&o));
    }
}

/// TLS (`kafka+ssl://`) against the broker's SSL listener: the test CA verifies it, a client
/// certificate is offered, and every message arrives; without the CA the certificate is
/// refused with a clear error.
#[test]
fn tls_listener_is_exact_and_verified() {
    let (Ok(url), Ok(ca)) = (
        std::env::var("MSGBENCH_IT_KAFKA_TLS"),
        std::env::var("MSGBENCH_IT_CA"),
    ) else {
        eprintln!(
            "skipped: MSGBENCH_IT_KAFKA_TLS / MSGBENCH_IT_CA not set (scripts/brokers.sh env)"
        );
        return;
    };
    let dir = std::path::Path::new(&ca).parent().unwrap();
    let (cert, key) = (
        dir.join("client.pem").display().to_string(),
        dir.join("client.key").display().to_string(),
    );
    let d = TempDir::new("kafka-tls");
    let t = topic("tls");
    let r = run_json(
        &d.0,
        &run(
            &url,
            &t,
            &[
                "--ca-file",
                &ca,
                "--cert",
                &cert,
                "--key",
                &key,
                "-p",
                "2",
                "-c",
                "2",
                "-n",
                "4000",
                "--acks",
                "all",
            ],
        ),
    );
    let i = &r["integrity"];
    assert_eq!((u(&i["delivered"]), u(&i["lost"])), (8000, 0), "{i}");
    let o = msgbench(
        &d.0,
        &[
            "run",
            &url,
            "--topic",
            &topic("tls-noca"),
            "-n",
            "10",
            "--connect-timeout",
            "5s",
            "--no-output",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).to_lowercase().contains("certificate"),
        "{}",
        stderr(&o)
    );
}

/// Connection workloads: each connection is a librdkafka producer that answered a metadata
/// request; held connections publish on their interval; a storm opens and closes them one
/// after the other, publishing on each, without failures.
#[test]
fn connection_workloads_hold_and_storm() {
    let url = need!(KAFKA);
    let d = TempDir::new("kafka-conns");
    let t = topic("conns");
    let r = run_json(
        &d.0,
        &[
            "run",
            &url,
            "--topic",
            &t,
            "--connections",
            "20",
            "--connect-rate",
            "100",
            "--hold",
            "3s",
            "--publish-interval",
            "1s",
            "--no-output",
        ],
    );
    assert_eq!(
        u(&r["connections"]["peak_held"]),
        20,
        "{}",
        r["connections"]
    );
    let sent = phase_sum(&r, "sent");
    assert!(sent >= 20 * 2, "each held connection published: {sent}");
    let r = run_json(
        &d.0,
        &[
            "run",
            &url,
            "--topic",
            &t,
            "--storm",
            "--concurrency",
            "4",
            "--duration",
            "3s",
            "--messages-per-connection",
            "1",
            "--no-output",
        ],
    );
    let m = measure(&r);
    assert!(u(&m["counters"]["connects"]) > 10, "{m}");
    assert_eq!(
        m["counters"]["connect_failures"]
            .as_object()
            .map_or(0, |f| f.values().map(u).sum()),
        0,
        "{m}"
    );
    assert!(u(&m["counters"]["sent"]) > 10, "{m}");
}

/// librdkafka chooses its local address itself: `--source-addrs` is refused with a reason, not
/// silently ignored.
#[test]
fn source_addresses_are_refused_with_a_reason() {
    let url = need!(KAFKA);
    let d = TempDir::new("kafka-source");
    let o = msgbench(
        &d.0,
        &[
            "run",
            &url,
            "-n",
            "10",
            "--warmup",
            "0s",
            "--no-output",
            "--topic",
            "it.kafka.source",
            "--source-addrs",
            "127.0.0.2",
        ],
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("librdkafka chooses its local address"),
        "{}",
        stderr(&o)
    );
}

/// SASL on the broker's SASL listener (`kafka://user:password@…?sasl=`): PLAIN, and SCRAM-SHA-256
/// and -512 (the challenge and response of managed Kafka services), each with every message
/// acknowledged and delivered and the password in no file the run writes; a wrong password
/// stops the run at connect with the broker's "Authentication failed". (librdkafka before 2.6.1,
/// Debian 12's among them, failed SCRAM against Kafka 4.x even with the right password.)
#[test]
fn sasl_plain_and_scram_authenticate() {
    let _ = need!(KAFKA);
    let sasl = env_or_hint("MSGBENCH_IT_KAFKA_SASL");
    let d = TempDir::new("kafka-sasl");
    for mech in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
        let t = topic(&format!("sasl-{}", mech.to_lowercase()));
        let url = format!("kafka://bench:bench-secret@{sasl}?sasl={mech}");
        let mut args = run(&url, &t, &["-n", "2000", "--rate", "4000"]);
        args.retain(|a| *a != "--no-output");
        args.extend(["-o", "r.jsonl"]);
        let o = msgbench(&d.0, &args);
        assert_eq!(o.status.code(), Some(0), "{mech}: {}", stderr(&o));
        let file = std::fs::read_to_string(d.path("r.jsonl")).unwrap();
        let end: serde_json::Value = serde_json::from_str(file.lines().last().unwrap()).unwrap();
        let i = &end["integrity"];
        assert_eq!(
            (u(&i["delivered"]), u(&i["lost"])),
            (2000, 0),
            "{mech}: {i}"
        );
        assert!(!file.contains("bench-secret"), "{mech}");
        let url = format!("kafka://bench:wrong@{sasl}?sasl={mech}");
        let o = msgbench(&d.0, &run(&url, &t, &["-n", "10"]));
        assert_eq!(o.status.code(), Some(1), "{mech}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("Authentication failed"),
            "{mech}: {}",
            stderr(&o)
        );
    }
}

/// Competing consumers reading a large backlog from the earliest offset: the first to join
/// fills the runner's channel before the runner reads anything (it waits for every consumer),
/// and its polling thread, blocked on the full channel, stopped serving the group, so the
/// second consumer's join waited out its connect time-out and the run went on without it. Now
/// the first pauses its partitions and keeps polling: both join, and everything arrives.
#[test]
fn group_consumers_join_over_a_backlog_read_from_the_earliest() {
    let url = need!(KAFKA);
    let d = TempDir::new("kafka-backlog-join");
    let t = topic("backlogjoin");
    let r = run_json(
        &d.0,
        &run(
            &url,
            &t,
            &["-c", "0", "--partitions", "2", "-n", "30000", "-s", "64"],
        ),
    );
    assert_eq!(
        u(&measure(&r)["counters"]["acked"]),
        30000,
        "{}",
        r["integrity"]
    );
    let started = Instant::now();
    let o = msgbench(
        &d.0,
        &run(
            &url,
            &t,
            &[
                "-c",
                "2",
                "--queue-group",
                "it",
                "--offset",
                "earliest",
                "-n",
                "500",
                "-r",
                "500",
                "--connect-timeout",
                "15s",
                "--format",
                "json",
                "-q",
            ],
        ),
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{e}");
    assert!(
        !e.contains("never connected") && !e.contains("retried"),
        "{e}"
    );
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let i = &r["integrity"];
    // The backlog is foreign, read at least once (a partition that moves to the second
    // consumer when it joins is read again from the start: nothing was committed yet).
    assert_eq!(u(&i["delivered"]), 500, "{i}");
    assert!(u(&i["foreign"]) >= 30000, "{i}");
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "{:?}: {e}",
        started.elapsed()
    );
}
