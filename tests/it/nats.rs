//! NATS-specific behaviour against a real nats-server: a broker that dies mid-run.

use crate::util;

use std::process::{Child, Command, Stdio};
use std::time::Duration;
use util::*;

fn start_server(port: u16, dir: &std::path::Path) -> Child {
    start_server_with(port, dir, &[])
}

fn start_server_with(port: u16, dir: &std::path::Path, extra: &[&str]) -> Child {
    start_binary_with("nats-server", port, dir, extra)
}

/// As [`start_server_with`], with the nats-server binary `bin`.
fn start_binary_with(bin: &str, port: u16, dir: &std::path::Path, extra: &[&str]) -> Child {
    let mut child = Command::new(bin)
        .args([
            "-a",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-l",
            &dir.join(format!("nats-{port}.log")).display().to_string(),
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{bin}: {e} (scripts/brokers.sh up installs nats-server)"));
    if listens_within(port, Duration::from_secs(5)) {
        return child;
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("nats-server did not start on port {port}");
}

/// The broker is killed and restarted mid-run: the run keeps going, reconnects, counts the
/// loss and the reconnection, and still writes the report and a complete results file.
#[test]
fn broker_restart_mid_run() {
    let _ = need!(NATS); // same prerequisite as the other broker tests
    let d = TempDir::new("nats-restart");
    let port = free_port();
    let mut server = start_server(port, &d.0);
    let url = format!("nats://127.0.0.1:{port}");
    let run = Command::new(bin())
        .args([
            "run",
            &url,
            "--rate",
            "5000",
            "--duration",
            "6s",
            "--warmup",
            "0s",
            "--drain",
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
    let mut server = start_server(port, &d.0);
    let o = run.wait_with_output().unwrap();
    server.kill().unwrap();
    let _ = server.wait();
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let sent = u(&measure(&r)["counters"]["sent"]);
    assert!(sent > 15_000, "kept sending after the restart: {sent}");
    let i = &r["integrity"];
    // Messages published while the broker was down are lost and counted as such.
    assert!(u(&i["lost"]) > 0, "{i}");
    assert_eq!(u(&i["expected"]), u(&i["delivered"]) + u(&i["lost"]));
    let kinds: Vec<&str> = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"disconnected"), "{kinds:?}");
    assert!(kinds.contains(&"reconnected"), "{kinds:?}");
    let file = std::fs::read_to_string(d.path("r.jsonl")).unwrap();
    assert!(file.lines().last().unwrap().contains("\"type\":\"end\""));
}

/// A message the server will never accept stops the producers with a clear error instead of
/// retrying forever, and the run still ends with a report (exit code 1: nothing could be sent).
#[test]
fn oversized_messages_fail_fast() {
    let d = TempDir::new("nats-oversize");
    let started = std::time::Instant::now();
    let o = msgbench(
        &d.0,
        &[
            "run",
            &need!(NATS),
            "-p",
            "2",
            "--size",
            "9MiB",
            "--messages",
            "10",
            "--warmup",
            "0s",
            "--drain",
            "1s",
            "--no-output",
            "--quiet",
        ],
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("exceeds the server's max_payload"),
        "{}",
        stdout(&o)
    );
    // With --quiet no warning was printed: the error itself says why.
    assert!(
        stderr(&o).contains("every producer stopped")
            && stderr(&o).contains("exceeds the server's max_payload"),
        "{}",
        stderr(&o)
    );
}

/// More held connections than the process may open files: with its hard limit lowered to 400,
/// msgbench holds 1,000 NATS connections in io_uring tables (the handshake and the publishes
/// every 500 ms go through them). The URL names two servers (as the `nats` CLI writes server
/// lists), which share the clients round robin: killing the second drops exactly its half, and
/// the other half closes cleanly.
#[test]
fn holds_more_connections_than_the_open_file_limit() {
    let d = TempDir::new("nats-fd-free");
    let port = free_port();
    let mut second = Killed(start_server(port, &d.0));
    let url = format!("{},nats://127.0.0.1:{port}", need!(NATS));
    let args = [
        "run",
        &url,
        "--topic",
        "it.held",
        "--connections",
        "1000",
        "--connect-rate",
        "2000",
        "--hold",
        "4s",
        "--publish-interval",
        "500ms",
        "-o",
        "held.jsonl",
    ];
    let run = spawn_run_with_nofile(&d.0, &args, 400);
    wait_for_record(&d.path("held.jsonl"), "\"connected\"");
    std::thread::sleep(Duration::from_millis(1500));
    second.kill();
    let r = finish_json(run);
    assert_valid_and_pure(&d.0, "held.jsonl", &r);
    let c = &r["connections"];
    assert_eq!(u(&c["peak_held"]), 1000, "{c}");
    assert_eq!(c["fd_free"].as_bool(), Some(true), "{c}");
    // Connections held in io_uring tables have no descriptor to ask for TCP counters.
    assert!(r["tcp"].is_null(), "{}", r["tcp"]);
    assert!(
        r["events"].to_string().contains("io_uring"),
        "{}",
        r["events"]
    );
    assert_eq!(phase_sum(&r, "connects"), 1000, "{}", r["phases"]);
    assert_eq!(phase_sum(&r, "dropped"), 500, "{}", r["phases"]);
    assert_eq!(phase_sum(&r, "closes"), 500, "{}", r["phases"]);
    // Each connection published every 500 ms for over a second before the server died.
    let sent = phase_sum(&r, "sent");
    assert!(sent >= 1000 * 2, "sent {sent}");
}

/// Clients of a server list take the servers in turn: with the second one unreachable, the
/// client whose turn it is passes over it to the first (as NATS clients do) and the run takes
/// every message; with none reachable the run refuses to start and names the server; with
/// both reachable every message arrives.
#[test]
fn server_lists_share_the_clients() {
    let d = TempDir::new("nats-list");
    let dead = free_port();
    let half_dead = format!("{},127.0.0.1:{dead}", need!(NATS));
    let r = run_json(
        &d.0,
        &[
            "run",
            &half_dead,
            "-p",
            "2",
            "--connect-timeout",
            "2s",
            "-n",
            "10",
            "--warmup",
            "0s",
        ],
    );
    assert_eq!(u(&r["integrity"]["delivered"]), 10, "{}", r["integrity"]);
    let o = msgbench(
        &d.0,
        &[
            "run",
            &format!("nats://127.0.0.1:{dead},127.0.0.1:{dead}"),
            "--connect-timeout",
            "2s",
            "-n",
            "10",
            "--no-output",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("(127.0.0.1:{dead})")),
        "{}",
        stderr(&o)
    );
    let r = run_json(
        &d.0,
        &[
            "run",
            &format!("{0},{0}", need!(NATS)),
            "--topic",
            "it.list",
            "-p",
            "2",
            "-c",
            "2",
            "--messages",
            "2000",
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    // Fan-out: each of the 2 consumers gets every message.
    assert_eq!(u(&r["integrity"]["delivered"]), 4000, "{}", r["integrity"]);
    assert_eq!(u(&r["integrity"]["lost"]), 0, "{}", r["integrity"]);
}

/// A client whose server of a list dies fails over to the next server and goes on.
#[test]
fn clients_fail_over_to_the_next_server() {
    let d = TempDir::new("nats-failover");
    let port = free_port();
    let mut second = Killed(start_server(port, &d.0));
    let first = need!(NATS);
    let url = format!("{first},nats://127.0.0.1:{port}");
    let first = first.trim_start_matches("nats://").to_string();
    assert_fails_over(&d.0, &url, "it.failover", &first, &mut second);
}

/// A two-node cluster given by one node's URL: the clients learn the other node from the
/// server's INFO (`connect_urls`), and when their node is killed a second in they reconnect
/// there, resubscribe and go on.
#[test]
fn clients_fail_over_to_a_server_the_cluster_announced() {
    let d = TempDir::new("nats-discovered");
    let (a, ca, b, cb) = (free_port(), free_port(), free_port(), free_port());
    let node = |port: u16, own: u16, other: u16| {
        start_server_with(
            port,
            &d.0,
            &[
                "--cluster_name",
                "it",
                "--cluster",
                &format!("nats://127.0.0.1:{own}"),
                "--routes",
                &format!("nats://127.0.0.1:{other}"),
            ],
        )
    };
    let _survivor = Killed(node(a, ca, cb));
    let mut doomed = Killed(node(b, cb, ca));
    // The route between the nodes, so that the doomed node announces the survivor.
    let routed = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        std::fs::read_to_string(d.0.join(format!("nats-{b}.log")))
            .is_ok_and(|l| l.contains("Route connection created"))
    });
    assert!(routed, "the two nats-servers did not form a cluster");
    let url = format!("nats://127.0.0.1:{b}");
    assert_fails_over(
        &d.0,
        &url,
        "it.discovered",
        &format!("127.0.0.1:{a}"),
        &mut doomed,
    );
}

/// `tls://` starts TLS after the server's INFO: verified against a CA, refused without it,
/// taken with `--insecure`; a plain URL against a TLS-only server says what to use instead.
#[test]
fn tls_after_the_servers_info() {
    let d = TempDir::new("nats-tls");
    let (ca, cert, key) = test_certs();
    let port = free_port();
    let _server = Killed(start_server_with(
        port,
        &d.0,
        &[
            "--tls",
            "--tlscert",
            cert.to_str().unwrap(),
            "--tlskey",
            key.to_str().unwrap(),
        ],
    ));
    let url = format!("tls://localhost:{port}");
    let args = |extra: &[&'static str]| {
        let mut a = vec![
            "run",
            url.as_str(),
            "--topic",
            "it.tls",
            "--warmup",
            "0s",
            "--no-output",
        ];
        a.extend_from_slice(extra);
        a
    };
    let mut verified = args(&["-n", "5000", "-c", "2"]);
    verified.extend(["--ca-file", ca.as_str()]);
    let r = run_json(&d.0, &verified);
    assert_eq!(
        u(&r["integrity"]["delivered"]),
        10_000,
        "{}",
        r["integrity"]
    );
    assert_eq!(u(&r["integrity"]["lost"]), 0);
    // TLS connections count their TCP segments too.
    assert_eq!(u(&r["tcp"]["connections"]), 3, "{}", r["tcp"]);
    let o = msgbench(&d.0, &args(&["-n", "10"]));
    assert_eq!(o.status.code(), Some(1), "an unknown CA must fail");
    assert!(stderr(&o).contains("TLS"), "{}", stderr(&o));
    let r = run_json(&d.0, &args(&["-n", "1000", "--insecure"]));
    assert_eq!(u(&r["integrity"]["delivered"]), 1000);
    let plain = format!("nats://127.0.0.1:{port}");
    let o = msgbench(&d.0, &["run", &plain, "-n", "10", "--no-output"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("tls://"), "{}", stderr(&o));
}

/// `?tls_first` against nats-server 2.10+ with `handshake_first` (the TLS handshake before the
/// server's INFO): every message delivered; without it, the run stops with a hint instead of
/// waiting out the connect timeout in silence. Debian's nats-server (2.9) predates the option:
/// `scripts/brokers.sh up` builds a current one with Go when it can
/// (`MSGBENCH_IT_NATS_SERVER_CURRENT`).
#[test]
fn tls_first_with_a_handshake_first_server() {
    let Ok(bin) = std::env::var("MSGBENCH_IT_NATS_SERVER_CURRENT") else {
        eprintln!("skipped: no nats-server 2.10+ (scripts/brokers.sh up builds one with Go)");
        return;
    };
    let d = TempDir::new("nats-tls-first");
    let (ca, cert, key) = test_certs();
    let port = free_port();
    let conf = d.path("tls-first.conf");
    std::fs::write(
        &conf,
        format!(
            "tls {{\n  cert_file: {:?}\n  key_file: {:?}\n  handshake_first: true\n}}\n",
            cert.display().to_string(),
            key.display().to_string()
        ),
    )
    .unwrap();
    let _server = Killed(start_binary_with(
        &bin,
        port,
        &d.0,
        &["-c", conf.to_str().unwrap()],
    ));
    let url = format!("tls://localhost:{port}?tls_first");
    let r = run_json(
        &d.0,
        &[
            "run",
            &url,
            "--topic",
            "it.tlsfirst",
            "-n",
            "5000",
            "-c",
            "2",
            "--warmup",
            "0s",
            "--no-output",
            "--ca-file",
            &ca,
        ],
    );
    let i = &r["integrity"];
    assert_eq!((u(&i["delivered"]), u(&i["lost"])), (10_000, 0), "{i}");
    let url = format!("tls://localhost:{port}");
    let o = msgbench(
        &d.0,
        &[
            "run",
            &url,
            "-n",
            "10",
            "--no-output",
            "--ca-file",
            &ca,
            "--connect-timeout",
            "2s",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("add ?tls_first"), "{}", stderr(&o));
}

/// Consumers at connection scale: they connect at `--connect-rate` from the `--source-addrs`
/// given, and a refused connection (the proxy resets two of them, as a server at its limit
/// does) is counted and retried, not the end of the run: every consumer gets every message.
#[test]
fn consumers_ramp_from_source_addresses_and_retry_refused_connections() {
    util::ramp::consumers_ramp_through_a_refusing_proxy(&need!(NATS), "it.ramp", &[]);
}

/// Consumers the server keeps refusing (it takes four of six) never connect: the run goes on
/// with those that did, says how many never connected, and expects each message only from the
/// consumers that subscribed, so nothing is counted lost that no one was there to receive.
#[test]
fn consumers_that_never_connect_are_reported_and_not_counted_lost() {
    let nats = need!(NATS);
    let upstream = nats.trim_start_matches("nats://").to_string();
    let proxy = util::faultproxy::FaultProxy::start(&upstream);
    proxy.refuse(4..u64::MAX);
    let d = TempDir::new("nats-never");
    let via = format!("nats://{}", proxy.addr());
    let started = std::time::Instant::now();
    let r = run_json(
        &d.0,
        &[
            "run",
            &nats,
            "--consume-from",
            &via,
            "--topic",
            "it.never",
            "-c",
            "6",
            "--connect-rate",
            "50",
            "--connect-timeout",
            "500ms",
            "-n",
            "200",
            "--rate",
            "1000",
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    let i = &r["integrity"];
    assert_eq!(u(&i["expected"]), 200 * 4, "{i}");
    assert_eq!(u(&i["delivered"]), 200 * 4, "{i}");
    assert_eq!(u(&i["lost"]), 0, "{i}");
    let warned = r["events"].as_array().unwrap().iter().any(|e| {
        e["detail"]
            .as_str()
            .is_some_and(|t| t.contains("2 of 6 consumers never connected"))
    });
    assert!(warned, "{}", r["events"]);
    // They were retried (several attempts each) for three connect time-outs, not forever.
    assert!(proxy.accepted() > 6, "{}", proxy.accepted());
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

/// Fan-out receivers beyond the open-file limit: 300 consumers of one topic with a limit of
/// 200 descriptors are held in io_uring tables, and each counts every message (nats-server).
#[test]
fn receivers_beyond_the_open_file_limit_count_every_message() {
    let url = need!(NATS);
    let d = TempDir::new("nats-fanout-nofile");
    assert_fanout_beyond_nofile(
        &d.0,
        &url,
        &format!("it.fanout.nofile{}", std::process::id()),
    );
}

/// With sizes that mostly fit (a range over a server whose `max_payload` is 1 KiB), a message
/// too large is refused alone, unsent, said once and counted, as a NATS client fails only that
/// publish: the run goes on, and every message that fits is delivered.
#[test]
fn an_oversized_message_among_ones_that_fit_is_refused_alone() {
    let d = TempDir::new("nats-some-oversized");
    let conf = d.path("max.conf");
    std::fs::write(&conf, "max_payload: 1024\n").unwrap();
    let port = free_port();
    let mut server = start_server_with(port, &d.0, &["-c", &conf.display().to_string()]);
    let r = run_json(
        &d.0,
        &[
            "run",
            &format!("nats://127.0.0.1:{port}"),
            "--size",
            "100..2KiB",
            "-n",
            "400",
            "--warmup",
            "0s",
            "--drain",
            "1s",
        ],
    );
    let _ = server.kill();
    let _ = server.wait();
    let i = &r["integrity"];
    let sent = u(&i["expected"]);
    let refused = u(&measure(&r)["counters"]["errors"]["nack"]);
    assert!(refused > 50 && refused < 350, "{}", measure(&r));
    assert_eq!(u(&i["delivered"]) + refused, sent, "{i}");
    let warned = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["detail"].as_str().unwrap_or("").contains("max_payload"))
        .count();
    assert_eq!(warned, 1, "{}", r["events"]);
}

/// NATS over WebSocket (`nats+ws://`, `nats+js+ws://`) against nats-server's `websocket`
/// listener: core fan-out and queue groups, request/reply with messages over 64 KiB, and
/// JetStream's PubAcks, each message accounted for through the tunnel; `nats+ws://` at the
/// plain client port is refused with what answered.
#[test]
fn over_websocket() {
    let d = TempDir::new("nats-ws");
    let url = need!("MSGBENCH_IT_NATS_WS_URL");
    let run = |url: &str, extra: &[&str]| {
        let mut v = vec!["run", url, "--warmup", "0s", "--no-output", "-p", "2"];
        v.extend_from_slice(extra);
        run_json(&d.0, &v)
    };
    let r = run(&url, &["--topic", "it.ws", "-n", "20000", "-c", "2"]);
    let i = &r["integrity"];
    assert_eq!((u(&i["delivered"]), u(&i["lost"])), (40_000, 0), "{i}");
    let r = run(
        &url,
        &[
            "--topic",
            "it.wsq",
            "-n",
            "20000",
            "-c",
            "2",
            "--queue-group",
            "g",
        ],
    );
    let i = &r["integrity"];
    assert_eq!(
        (u(&i["delivered"]), u(&i["duplicated"])),
        (20_000, 0),
        "{i}"
    );
    let r = run(
        &url,
        &[
            "--topic",
            "it.wsr",
            "-n",
            "500",
            "--request-reply",
            "--size",
            "100KiB",
        ],
    );
    assert_eq!(u(&measure(&r)["counters"]["acked"]), 500, "{}", r["result"]);
    let js = url.replace("nats+ws://", "nats+js+ws://") + "?stream=IT_WS";
    let r = run(&js, &["--topic", "it.jsws", "-n", "5000"]);
    assert_eq!(
        u(&measure(&r)["counters"]["acked"]),
        5000,
        "{}",
        r["result"]
    );
    assert_eq!(u(&r["integrity"]["delivered"]), 5000, "{}", r["integrity"]);
    let plain = need!(NATS).replace("nats://", "nats+ws://");
    let o = msgbench(&d.0, &["run", &plain, "-n", "10", "--no-output"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("speaks NATS"), "{}", stderr(&o));
}
