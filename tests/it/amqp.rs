//! AMQP 0-9-1 behaviour against a real RabbitMQ (started by `scripts/brokers.sh`): confirms,
//! exchange types, queue types, manual and automatic acks, large messages split into frames,
//! authentication, and the connection workloads.

use crate::util;

use util::*;

fn run_args<'a>(url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["run", url, "--warmup", "0s", "--no-output"];
    v.extend_from_slice(extra);
    v
}

/// With confirms every message is acknowledged by the broker and its publish latency recorded.
#[test]
fn confirms_ack_every_message() {
    let d = TempDir::new("amqp-confirm");
    let url = need!(AMQP);
    let r = run_json(
        &d.0,
        &run_args(
            &url,
            &[
                "--confirm",
                "-p",
                "2",
                "-n",
                "20000",
                "-s",
                "1KiB",
                "--topic",
                "it.confirm",
            ],
        ),
    );
    let m = measure(&r);
    assert_eq!(u(&m["counters"]["acked"]), 20_000);
    assert_eq!(u(&m["publish"]["count"]), 20_000);
    assert!(u(&m["publish"]["p50"]) > 0);
    let i = &r["integrity"];
    assert_eq!((u(&i["delivered"]), u(&i["lost"])), (20_000, 0), "{i}");
}

/// At a fixed rate, confirms are taken as they arrive, not after the wait for the next send:
/// at 50 msgs/s a 20 ms pause must not end up in the publish latency.
#[test]
fn paced_confirms_are_timed_when_they_arrive() {
    let d = TempDir::new("amqp-paced");
    let url = need!(AMQP);
    let r = run_json(
        &d.0,
        &run_args(
            &url,
            &[
                "--confirm",
                "--rate",
                "50",
                "-n",
                "100",
                "-c",
                "0",
                "--topic",
                "it.paced",
            ],
        ),
    );
    let m = measure(&r);
    assert_eq!(u(&m["publish"]["count"]), 100);
    let p50 = u(&m["publish"]["p50"]);
    assert!(
        p50 < 8_000_000,
        "publish p50 {p50} ns: the pacing wait leaked in"
    );
}

/// Fanout and topic exchanges route as their type says; a quorum queue shared by a group
/// delivers each persistent message once.
#[test]
fn exchange_and_queue_types() {
    let d = TempDir::new("amqp-types");
    let url = need!(AMQP);
    let r = run_json(
        &d.0,
        &run_args(
            &url,
            &[
                "--exchange",
                "it.fan",
                "--exchange-type",
                "fanout",
                "-c",
                "3",
                "-n",
                "5000",
            ],
        ),
    );
    assert_eq!(
        u(&r["integrity"]["delivered"]),
        15_000,
        "{}",
        r["integrity"]
    );
    let r = run_json(
        &d.0,
        &run_args(
            &url,
            &[
                "--exchange",
                "it.topic",
                "--exchange-type",
                "topic",
                "--topics",
                "3",
                "--topic",
                "it.t.{i}",
                "-n",
                "6000",
            ],
        ),
    );
    assert_eq!(u(&r["integrity"]["delivered"]), 6000, "{}", r["integrity"]);
    // A quorum queue the run creates: several consumers declaring and purging it at once once
    // cost a consumer its connection (RabbitMQ's 541 INTERNAL_ERROR, a purge before the
    // queue's Raft process ran).
    let deleted =
        std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/brokers.sh"))
            .args(["rabbitmqctl", "delete_queue", "msgbench.itq.it.quorum"])
            .output()
            .unwrap();
    let said = format!("{}{}", stdout(&deleted), stderr(&deleted));
    assert!(
        deleted.status.success() || said.contains("not found"),
        "{said}"
    );
    let r = run_json(
        &d.0,
        &run_args(
            &url,
            &[
                "--queue-type",
                "quorum",
                "--persistent",
                "--confirm",
                "--queue-group",
                "itq",
                "-c",
                "4",
                "-n",
                "3000",
                "--topic",
                "it.quorum",
                "--purge",
            ],
        ),
    );
    let i = &r["integrity"];
    assert_eq!((u(&i["delivered"]), u(&i["duplicated"])), (3000, 0), "{i}");
    assert_eq!(u(&measure(&r)["counters"]["acked"]), 3000);
}

/// RabbitMQ streams over AMQP 0-9-1: a stream is a log, so each of 3 consumers reads every
/// confirmed message (expected = messages × consumers, none lost or doubled) from the stream's
/// end. What a stream refuses (automatic acks, purging, x-max-length, no prefetch) is refused
/// before connecting, and a queue group with why; RabbitMQ would close the connection.
#[test]
fn stream_queues_are_read_whole_by_every_consumer() {
    let d = TempDir::new("amqp-stream");
    let url = need!(AMQP);
    let stream = ["--queue-type", "stream", "--topic", "it.stream"];
    let mut args = stream.to_vec();
    args.extend(["--confirm", "-c", "3", "-n", "3000"]);
    let r = run_json(&d.0, &run_args(&url, &args));
    let i = &r["integrity"];
    let counts = ["expected", "delivered", "lost", "duplicated"].map(|k| u(&i[k]));
    assert_eq!(counts, [9000, 9000, 0, 0], "{i}");
    assert_eq!(u(&measure(&r)["counters"]["acked"]), 3000);
    for (extra, says) in [
        (
            &["--auto-ack"][..],
            "amqp.auto_ack: a stream takes no automatic acknowledgement",
        ),
        (&["--purge"], "amqp.purge: a stream cannot be purged"),
        (
            &["--max-length", "10"],
            "amqp.max_length: a stream takes no x-max-length",
        ),
        (
            &["--prefetch", "0"],
            "amqp.prefetch: a stream's consumers need a prefetch",
        ),
        (&["--queue-group", "g"], "queue group `g` on a stream"),
    ] {
        let mut args = run_args(&url, &stream);
        args.extend(["-n", "10"]);
        args.extend(extra);
        let out = msgbench(&d.0, &args);
        let err = stderr(&out);
        assert!(!out.status.success(), "{extra:?}: {err}");
        assert!(err.contains(says), "{extra:?}: {err}");
    }
}

/// A stream consumer whose connection is cut goes on after the last entry it received (its
/// `x-stream-offset`): the consumers reach RabbitMQ through a proxy that resets them mid-run,
/// and each still counts every message once. Starting again at the stream's end (`next`), as
/// a new consumer does, would lose what was appended while they reconnected.
#[test]
fn stream_consumers_resume_after_a_lost_connection() {
    let d = TempDir::new("amqp-stream-resume");
    let url = need!(AMQP);
    let upstream = url.split('@').nth(1).unwrap().split('/').next().unwrap();
    let proxy = util::faultproxy::FaultProxy::start(upstream);
    let via = url.replace(upstream, &proxy.addr());
    let run = spawn_run(
        &d.0,
        &[
            "run",
            &url,
            "--consume-from",
            &via,
            "--queue-type",
            "stream",
            "--topic",
            "it.stream.resume",
            "-c",
            "2",
            "--rate",
            "2000",
            "--warmup",
            "0s",
            "--duration",
            "3s",
        ],
    );
    std::thread::sleep(std::time::Duration::from_millis(1500));
    proxy.reset_all();
    let r = finish_json(run);
    assert!(count_events(&r, "disconnected") >= 2, "{}", r["events"]);
    let sent = u(&measure(&r)["counters"]["sent"]);
    assert!(sent >= 4000, "{sent}");
    let i = &r["integrity"];
    let counts = ["expected", "delivered", "lost", "duplicated"].map(|k| u(&i[k]));
    assert_eq!(counts, [sent * 2, sent * 2, 0, 0], "{i}");
}

/// The default exchange routes by queue name; acks can be automatic or batched.
#[test]
fn default_exchange_and_ack_modes() {
    let d = TempDir::new("amqp-acks");
    let url = need!(AMQP);
    for extra in [
        vec!["--exchange", "", "--topic", "it.plain-queue"],
        vec!["--auto-ack", "--topic", "it.autoack"],
        vec![
            "--ack-every",
            "50",
            "--prefetch",
            "200",
            "--topic",
            "it.ackevery",
        ],
    ] {
        let mut a = extra.clone();
        a.extend(["-n", "10000"]);
        let r = run_json(&d.0, &run_args(&url, &a));
        assert_eq!(
            u(&r["integrity"]["delivered"]),
            10_000,
            "{extra:?}: {}",
            r["integrity"]
        );
    }
}

/// Messages larger than the negotiated frame-max are split into body frames and arrive whole.
#[test]
fn large_messages_are_split_into_frames() {
    let d = TempDir::new("amqp-large");
    let r = run_json(
        &d.0,
        &run_args(
            &need!(AMQP),
            &[
                "-s",
                "3MiB",
                "-n",
                "30",
                "--confirm",
                "--max-in-flight",
                "4",
                "--topic",
                "it.large",
            ],
        ),
    );
    let m = measure(&r);
    assert_eq!(u(&r["integrity"]["delivered"]), 30);
    assert_eq!(u(&m["counters"]["received_bytes"]), 30 * 3 * 1024 * 1024);
}

/// Mandatory publishes no queue is bound for come back as basic.return: counted as `returned`
/// (and still confirmed), with a warning saying why consumers will not see them.
#[test]
fn unroutable_mandatory_messages_are_counted() {
    let d = TempDir::new("amqp-returned");
    let url = need!(AMQP);
    let r = run_json(
        &d.0,
        &run_args(
            &url,
            &[
                "--exchange",
                "it.unrouted",
                "--mandatory",
                "--confirm",
                "-c",
                "0",
                "-n",
                "3000",
                "--topic",
                "it.nowhere",
            ],
        ),
    );
    let m = measure(&r);
    assert_eq!(u(&m["counters"]["returned"]), 3000, "{m}");
    assert_eq!(u(&m["counters"]["acked"]), 3000);
    assert!(r["warnings"].to_string().contains("unroutable"), "{r}");
    // Without confirms the count is exact too (the producer syncs with the broker at the end).
    let r = run_json(
        &d.0,
        &run_args(
            &url,
            &[
                "--exchange",
                "it.unrouted",
                "--mandatory",
                "-c",
                "0",
                "-n",
                "3000",
                "--topic",
                "it.nowhere",
            ],
        ),
    );
    assert_eq!(u(&measure(&r)["counters"]["returned"]), 3000, "{r}");
}

/// `--channels 3`: six producers share two connections and six consumers two more, a channel
/// each (as RabbitMQ itself lists them mid-run), and every message still arrives once.
#[test]
fn channels_share_connections() {
    let d = TempDir::new("amqp-channels");
    let url = need!(AMQP);
    let run = std::process::Command::new(bin())
        .args(run_args(
            &url,
            &[
                "--channels",
                "3",
                "-p",
                "6",
                "-c",
                "6",
                "--queue-group",
                "g",
                "--confirm",
                "--client-id",
                "itmux-{role}-{i}",
                "--topic",
                "it.channels",
                "--rate",
                "3000",
                "--duration",
                "15s",
                "--format",
                "json",
                "--quiet",
            ],
        ))
        .current_dir(&d.0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // RabbitMQ's own view, polled until every channel is open (a loaded machine is slow to
    // connect, and each rabbitmqctl call starts an Erlang VM), for at most 12 s of the 15 s run.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(12);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/brokers.sh");
    let want = [
        "itmux-pub-0 3",
        "itmux-pub-1 3",
        "itmux-sub-0 3",
        "itmux-sub-1 3",
    ];
    let (mut ours, mut listing) = (Vec::new(), String::new());
    while std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(250));
        let l = std::process::Command::new(script)
            .args([
                "rabbitmqctl",
                "list_connections",
                "client_properties",
                "channels",
                "--no-table-headers",
            ])
            .output()
            .unwrap();
        listing = stdout(&l);
        // Lines like `[..{"connection_name","itmux-pub-0"}..]\t3`.
        ours = listing
            .lines()
            .filter_map(|l| {
                let name = l.split("\"itmux-").nth(1)?.split('"').next()?;
                Some(format!("itmux-{name} {}", l.split('\t').next_back()?))
            })
            .collect();
        ours.sort();
        if ours == want {
            break;
        }
    }
    assert_eq!(ours, want, "{listing}");
    let o = run.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let m = measure(&r);
    let sent = u(&m["counters"]["sent"]);
    assert!(sent > 6_000, "{sent}");
    assert_eq!(u(&m["counters"]["acked"]), sent);
    let i = &r["integrity"];
    assert_eq!((u(&i["delivered"]), u(&i["lost"])), (sent, 0), "{i}");
    assert_eq!(u(&i["duplicated"]), 0, "{i}");
}

/// Wrong credentials and closed ports are clear errors.
#[test]
fn bad_credentials_and_unreachable() {
    let d = TempDir::new("amqp-bad");
    let bad = need!(AMQP).replace("guest:guest", "guest:wrong");
    let o = msgbench(&d.0, &run_args(&bad, &["-n", "10"]));
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("refused the login (PLAIN) of user `guest`"),
        "{e}"
    );
    // RabbitMQ says why (authentication_failure_close), rather than dropping the socket.
    assert!(e.contains("403 ACCESS_REFUSED"), "{e}");
    assert!(!e.contains("wrong"), "the password is not printed: {e}");
    let url = format!("amqp://127.0.0.1:{}", free_port());
    let o = msgbench(&d.0, &run_args(&url, &["-n", "10"]));
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("cannot connect"), "{}", stderr(&o));
    let o = msgbench(
        &d.0,
        &run_args(&need!(AMQP), &["--exchange-type", "weird", "-n", "10"]),
    );
    assert!(stderr(&o).contains("amqp.exchange_type"), "{}", stderr(&o));
}

/// Artemis's AMQP port answers an AMQP 0-9-1 client with its own protocol header (1.0) and
/// closes: the error says which protocol the port speaks and which scheme to use.
#[test]
fn a_port_of_amqp_1_0_is_named_as_such() {
    let d = TempDir::new("amqp-other");
    let artemis = need!("MSGBENCH_IT_ARTEMIS_URL");
    let port = artemis.rsplit(':').next().unwrap();
    let o = msgbench(
        &d.0,
        &run_args(&format!("amqp://127.0.0.1:{port}"), &["-n", "10"]),
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("speaks AMQP 1.0 on this port, not 0-9-1: use amqp10://"),
        "{}",
        stderr(&o)
    );
}

/// The connection workloads work over AMQP too (handshake = start/tune/open + channel open).
#[test]
fn connection_workloads() {
    let d = TempDir::new("amqp-conns");
    let url = need!(AMQP);
    let r = run_json(
        &d.0,
        &[
            "run",
            &url,
            "--connections",
            "200",
            "--hold",
            "1s",
            "--no-output",
        ],
    );
    assert_eq!(
        u(&r["connections"]["peak_held"]),
        200,
        "{}",
        r["connections"]
    );
    let r = run_json(
        &d.0,
        &[
            "run",
            &url,
            "--storm",
            "--concurrency",
            "8",
            "--duration",
            "1s",
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
        0
    );
}

/// The built-in sink: the AMQP storm and data throughput modes run against it, publishes are
/// confirmed, and large messages are split into frames.
#[test]
fn sink_serves_storms_and_large_messages() {
    let d = TempDir::new("amqp-sink");
    let sink = Server::amqp_sink("amqp", &[]);
    let r = run_json(
        &d.0,
        &[
            "run",
            &sink.url,
            "--storm",
            "--concurrency",
            "16",
            "--duration",
            "1s",
            "--messages-per-connection",
            "1",
            "--no-output",
        ],
    );
    assert!(
        u(&measure(&r)["counters"]["connects"]) > 50,
        "{}",
        r["result"]
    );
    // No consumers: the sink swallows messages. Confirms still come back for every one.
    let r = run_json(
        &d.0,
        &[
            "run",
            &sink.url,
            "-p",
            "4",
            "-c",
            "0",
            "-s",
            "10MB",
            "--confirm",
            "--max-in-flight",
            "2",
            "-n",
            "40",
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    let m = measure(&r);
    assert_eq!(u(&m["counters"]["acked"]), 40, "{m}");
    assert_eq!(u(&m["counters"]["sent_bytes"]), 40 * 10_000_000);
}

/// TLS end to end against the sink: verified with the CA that signed its certificate, refused
/// without it.
#[test]
fn tls_against_the_sink() {
    let d = TempDir::new("amqp-sink-tls");
    let (ca, cert, key) = test_certs();
    let sink = Server::amqp_sink(
        "amqps",
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    let r = run_json(
        &d.0,
        &[
            "run",
            &sink.url,
            "-c",
            "0",
            "--confirm",
            "-n",
            "1000",
            "--ca-file",
            &ca,
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    assert_eq!(u(&measure(&r)["counters"]["acked"]), 1000);
    let o = msgbench(
        &d.0,
        &["run", &sink.url, "-c", "0", "-n", "10", "--no-output"],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("TLS"), "{}", stderr(&o));
    let r = run_json(
        &d.0,
        &[
            "run",
            &sink.url,
            "-c",
            "0",
            "-n",
            "100",
            "--insecure",
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    assert_eq!(u(&measure(&r)["counters"]["sent"]), 100);
}

/// Consumers at connection scale: they ramp at `--connect-rate` from the `--source-addrs`
/// given, and two refused connections are counted and retried, not the end of the run.
#[test]
fn consumers_ramp_from_source_addresses_and_retry_refused_connections() {
    util::ramp::consumers_ramp_through_a_refusing_proxy(&need!(AMQP), "it.ramp.amqp", &[]);
}

/// Runs msgbench (any exit status) and returns its JSON report and what it printed on stderr.
fn run_report(d: &TempDir, args: &[&str]) -> (serde_json::Value, String) {
    let mut all = args.to_vec();
    all.extend(["--format", "json", "--quiet"]);
    let o = msgbench(&d.0, &all);
    let report = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("report is not JSON ({e}): {}\n{}", stdout(&o), stderr(&o)));
    (report, stderr(&o))
}

/// Whether an event of the report says `needle`.
fn said(r: &serde_json::Value, needle: &str) -> bool {
    r["events"]
        .as_array()
        .is_some_and(|es| es.iter().any(|e| e["detail"].to_string().contains(needle)))
}

/// A paced producer without confirms still reads what the broker says: publishing to an
/// exchange that does not exist has the channel closed (404) at once, and the run says so
/// instead of counting every message as sent into a closed channel without a word.
#[test]
fn a_paced_producer_without_confirms_hears_its_channel_closed() {
    let d = TempDir::new("amqp-paced-close");
    let url = need!(AMQP);
    // msgbench declares no `amq.*` exchange (the broker reserves the prefix).
    let exchange = format!("amq.nosuch.{}", std::process::id());
    let (r, err) = run_report(
        &d,
        &run_args(
            &url,
            &["--exchange", &exchange, "-c", "0", "-r", "100", "-d", "2s"],
        ),
    );
    assert!(said(&r, "404"), "{}\n{err}", r["events"]);
}

/// The broker cancels a consumer whose queue is deleted mid-run (RabbitMQ's consumer cancel
/// notify): the consumer says so and subscribes again (declaring the queue anew), so the
/// deliveries go on; on a shared connection too, where its channel is closed and reopened
/// (opening it again while the broker still holds it would be 504, closing the connection).
#[test]
fn a_consumer_the_broker_cancels_subscribes_again() {
    let url = need!(AMQP);
    for channels in ["1", "2"] {
        let d = TempDir::new("amqp-cancelled");
        let tag = format!("{}x{channels}", std::process::id());
        let (group, topic) = (format!("g{tag}"), format!("t{tag}"));
        let queue = format!("msgbench.{group}.{topic}");
        let args = run_args(
            &url,
            &[
                "--queue-group",
                &group,
                "--topic",
                &topic,
                "-c",
                "2",
                "--channels",
                channels,
                "-r",
                "500",
                "-d",
                "5s",
            ],
        );
        let run = spawn_run(&d.0, &args);
        std::thread::sleep(std::time::Duration::from_millis(2000));
        let script = r#"
import sys, pika
c = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
c.channel().queue_delete(sys.argv[2])
c.close()
"#;
        let o = std::process::Command::new("/usr/bin/python3")
            .args(["-c", script, &url, &queue])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let out = run.wait_with_output().unwrap();
        let r: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert!(
            said(&r, "cancelled consumer"),
            "channels {channels}: {}",
            r["events"]
        );
        let c = &measure(&r)["counters"];
        // Lost: what was published between the deletion and the new queue (milliseconds).
        assert!(
            u(&c["received"]) * 10 >= u(&c["sent"]) * 9,
            "channels {channels}: {c} {}",
            r["events"]
        );
        assert!(!said(&r, "504"), "channels {channels}: {}", r["events"]);
    }
}

/// A user who may not publish (RabbitMQ closes the channel with 403 ACCESS_REFUSED at the
/// first publish) stops its producer at once with the broker's words and exit 1, instead of
/// reconnecting to be refused again for the whole run with every message in doubt.
#[test]
fn a_producer_refused_access_stops_with_the_brokers_words() {
    let d = TempDir::new("amqp-403");
    let url = need!(AMQP);
    let ctl = |args: &[&str]| {
        let o =
            std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/brokers.sh"))
                .arg("rabbitmqctl")
                .args(args)
                .output()
                .unwrap();
        format!("{}{}", stdout(&o), stderr(&o))
    };
    let _ = ctl(&["add_user", "it-nowrite", "it-pw"]);
    let said = ctl(&["set_permissions", "-p", "/", "it-nowrite", ".*", "^$", ".*"]);
    assert!(said.contains("Setting permissions"), "{said}");
    let nowrite = url.replace("guest:guest", "it-nowrite:it-pw");
    let started = std::time::Instant::now();
    let o = msgbench(
        &d.0,
        &run_args(
            &nowrite,
            &[
                "--consume-from",
                &url,
                "-n",
                "1000",
                "-r",
                "500",
                "--confirm",
                "--drain",
                "2s",
            ],
        ),
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains("403 ACCESS_REFUSED"), "{e}");
    assert!(e.contains("the producer stops"), "{e}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{e}"
    );
}

/// A producer whose confirm window is full when its connection goes (the broker stopped
/// answering, then the connection was cut) declares the window in doubt at once and
/// reconnects, instead of sending nothing until the ack timeout frees the window: RabbitMQ's
/// confirms belong to the channel, and the channel went with the connection.
#[test]
fn a_full_confirm_window_is_in_doubt_when_the_connection_goes() {
    let d = TempDir::new("amqp-full-window");
    let url = need!(AMQP);
    let upstream = url.split('@').nth(1).unwrap().split('/').next().unwrap();
    let proxy = util::faultproxy::FaultProxy::start(upstream);
    let via = url.replace(upstream, &proxy.addr());
    let run = spawn_run(
        &d.0,
        &[
            "run",
            &via,
            "--consume-from",
            &url,
            "--confirm",
            "--max-in-flight",
            "5",
            "--ack-timeout",
            "60s",
            "--topic",
            "it.full-window",
            "--rate",
            "200",
            "--warmup",
            "0s",
            "--duration",
            "6s",
            "--drain",
            "2s",
        ],
    );
    std::thread::sleep(std::time::Duration::from_millis(1500));
    proxy.blackhole();
    std::thread::sleep(std::time::Duration::from_millis(500));
    proxy.reset_all();
    proxy.restore();
    let r = finish_json(run);
    assert!(count_events(&r, "reconnected") >= 1, "{}", r["events"]);
    // Sending went on after the cut: well over the 1.5 s before it (about 300) plus the 5 in
    // doubt; a producer waiting out the 60 s ack timeout would stop near there.
    let sent = u(&measure(&r)["counters"]["sent"]);
    assert!(sent >= 800, "sent {sent}: {}", r["events"]);
}
