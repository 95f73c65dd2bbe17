//! WebSocket: the ws:// driver against msgbench's broadcast server, and the rango pipeline
//! (publish on NATS, `serve ws-broadcast --from nats://` relays, many WebSocket clients count
//! their deliveries).

use crate::util;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;
use util::*;

/// The rango scenario at a small scale, from the shipped scenario file: one NATS publisher,
/// 300 WebSocket clients, every client gets every message (exact per client), end-to-end
/// latency measured across the relay, the subscribe message (text) not taken for data.
#[test]
fn rango_fanout_through_the_broadcast_server() {
    let nats = need!(NATS);
    let relay = Server::ws_broadcast(&["--from", &nats, "--topic", "it.rango"]);
    let d = TempDir::new("ws-rango");
    let scenario = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/rango-fanout.toml");
    let r = run_json(
        &d.0,
        &[
            "run",
            scenario,
            "--target",
            &nats,
            "--topic",
            "it.rango",
            "--consume-from",
            &format!("{}/?stream=public.{{i}}", relay.url),
            "--hello",
            "{\"subscribe\":\"public.{i}\"}",
            "-c",
            "300",
            "--rate",
            "200",
            "--warmup",
            "0s",
            "--duration",
            "2s",
            "-o",
            "r.jsonl",
        ],
    );
    let m = measure(&r);
    let sent = u(&m["counters"]["sent"]);
    assert!(sent >= 380, "{sent}");
    let i = &r["integrity"];
    assert_eq!(
        (
            u(&i["expected"]),
            u(&i["delivered"]),
            u(&i["lost"]),
            u(&i["foreign"])
        ),
        (sent * 300, sent * 300, 0, 0),
        "{i}"
    );
    assert!(u(&m["e2e"]["p50"]) > 0);
    assert_valid_and_pure(&d.0, "r.jsonl", &r);
}

/// The rango shape beyond the open-file limit: more receivers than the process may have
/// descriptors (limit 200, 300 clients) are held in io_uring tables, spread over two broadcast
/// servers named in one URL (each sees half), and each still gets every message.
#[test]
fn receivers_beyond_the_open_file_limit_over_two_servers() {
    let nats = need!(NATS);
    let relays = [
        Server::ws_broadcast(&["--from", &nats, "--topic", "it.rango.many"]),
        Server::ws_broadcast(&["--from", &nats, "--topic", "it.rango.many"]),
    ];
    // Each server behind a proxy of the test's own, which counts the connections it gets.
    let proxies = relays
        .each_ref()
        .map(|r| util::faultproxy::FaultProxy::start(r.url.trim_start_matches("ws://")));
    let url = format!(
        "ws://{},{}/?stream=public.{{i}}",
        proxies[0].addr(),
        proxies[1].addr()
    );
    let d = TempDir::new("ws-many");
    let args = [
        "run",
        &nats,
        "--topic",
        "it.rango.many",
        "--consume-from",
        &url,
        "-c",
        "300",
        "--connect-rate",
        "3000",
        "--rate",
        "100",
        "--warmup",
        "0s",
        "--duration",
        "2s",
    ];
    let r = finish_json(spawn_run_with_nofile(&d.0, &args, 200));
    let sent = u(&measure(&r)["counters"]["sent"]);
    assert!(sent >= 150, "{sent}");
    let i = &r["integrity"];
    assert_eq!(
        (u(&i["expected"]), u(&i["delivered"]), u(&i["lost"])),
        (sent * 300, sent * 300, 0),
        "{i}"
    );
    assert!(
        r["events"].to_string().contains("io_uring tables"),
        "{}",
        r["events"]
    );
    assert_eq!(
        proxies.each_ref().map(|p| p.accepted()),
        [150, 150],
        "client i connects to server i % 2"
    );
}

/// Without a broker: WebSocket producers send to the server, which relays to every other
/// client.
#[test]
fn clients_relay_through_the_server() {
    let relay = Server::ws_broadcast(&[]);
    let d = TempDir::new("ws-relay");
    let r = run_json(
        &d.0,
        &[
            "run", &relay.url, "-p", "2", "-c", "5", "-n", "4000", "-s", "2KiB", "--warmup", "0s",
        ],
    );
    let i = &r["integrity"];
    assert_eq!(
        (u(&i["expected"]), u(&i["delivered"]), u(&i["lost"])),
        (20_000, 20_000, 0),
        "{i}"
    );
}

/// `wss://`: the broadcast server over TLS, verified with the CA that signed its certificate;
/// without that CA the client refuses the server's certificate.
#[test]
fn wss_through_the_broadcast_server() {
    let relay = Server::wss_broadcast();
    let ca = need!("MSGBENCH_IT_MQTT_CA");
    let d = TempDir::new("wss-relay");
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
            "--warmup",
            "0s",
            "--ca-file",
            &ca,
        ],
    );
    let i = &r["integrity"];
    assert_eq!(
        (u(&i["expected"]), u(&i["delivered"]), u(&i["lost"])),
        (6_000, 6_000, 0),
        "{i}"
    );
    let o = msgbench(&d.0, &["run", &relay.url, "-n", "10", "--no-output"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("certificate"), "{}", stderr(&o));
}

/// A server that answers the upgrade with 403, and one that is not there: clear errors.
#[test]
fn refused_upgrades_and_closed_ports() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = [0u8; 2048];
        let _ = s.read(&mut buf);
        s.write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            .unwrap();
    });
    let d = TempDir::new("ws-bad");
    let o = msgbench(
        &d.0,
        &[
            "run",
            "nats://127.0.0.1:1",
            "--consume-from",
            &format!("ws://127.0.0.1:{port}/feed"),
            "-n",
            "10",
        ],
    );
    server.join().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("refused the WebSocket upgrade: HTTP/1.1 403 Forbidden"),
        "{e}"
    );
    let o = msgbench(
        &d.0,
        &[
            "run",
            &format!("ws://127.0.0.1:{}/", free_port()),
            "-n",
            "10",
        ],
    );
    assert!(stderr(&o).contains("cannot connect"), "{}", stderr(&o));
}

/// The server dies mid-run: every client's loss of connection is counted, the run completes
/// and writes its report; the server comes back on the same port and the clients reconnect.
#[test]
fn server_dying_mid_run() {
    let port = free_port();
    let start = || {
        let c = Command::new(bin())
            .args(["serve", "ws-broadcast", "--quiet", "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        listens_within(port, Duration::from_secs(5));
        c
    };
    let mut server = start();
    let d = TempDir::new("ws-dies");
    let run = spawn_run(
        &d.0,
        &[
            "run",
            &format!("ws://127.0.0.1:{port}/"),
            "-c",
            "20",
            "--rate",
            "500",
            "--duration",
            "4s",
            "--warmup",
            "0s",
            "--drain",
            "1s",
        ],
    );
    std::thread::sleep(Duration::from_millis(1500));
    server.kill().unwrap();
    server.wait().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let mut server = start();
    let o = run.wait_with_output().unwrap();
    server.kill().unwrap();
    let _ = server.wait();
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let count = |kind: &str| {
        r["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == kind)
            .count()
    };
    assert!(
        count("disconnected") >= 21,
        "every client was cut: {}",
        r["events"]
    );
    assert!(count("reconnected") >= 21, "and came back: {}", r["events"]);
    // Receivers that tried while the server was away say so, with the cause, and each failed
    // attempt counts as a connect error.
    assert!(
        r["events"].as_array().unwrap().iter().any(|e| {
            let d = e["detail"].as_str().unwrap_or("");
            e["kind"] == "warning" && d.contains("-sub-") && d.contains("reconnecting failed")
        }),
        "a receiver's failed reconnection is reported: {}",
        r["events"]
    );
    let connect_errors: u64 = r["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["counters"]["errors"]["connect"].as_u64().unwrap_or(0))
        .sum();
    assert!(connect_errors >= 1, "{}", r["phases"]);
    let i = &r["integrity"];
    assert_eq!(
        u(&i["delivered"]) + u(&i["lost"]),
        u(&i["expected"]),
        "every message is delivered or lost: {i}"
    );
    assert!(u(&i["delivered"]) > 0, "{i}");
    // What the 500 ms outage cost shows somewhere: messages written into the dying sockets are
    // lost, and those whose send waited for the producer's reconnection (every receiver was
    // back first) arrive late by the outage, counted from their intended send time.
    let e2e_max = u(&measure(&r)["e2e"]["max"]);
    assert!(
        u(&i["lost"]) > 0 || e2e_max >= 400_000_000,
        "the outage shows as losses or as their wait: {i}, e2e max {e2e_max} ns"
    );
}

/// nginx (its own, in `d`) proxying WebSocket connections to `upstream` and cutting any that
/// the upstream has sent nothing on for 1 s (`proxy_read_timeout`); the proxy and its port.
fn idle_closing_proxy(d: &TempDir, upstream: &Server) -> (Killed, u16) {
    let block = format!(
        "    location / {{\n      proxy_pass http://{}/;\n      proxy_http_version 1.1;\n      \
         proxy_set_header Upgrade $http_upgrade;\n      proxy_set_header Connection \"upgrade\";\n      \
         proxy_read_timeout 1s;\n    }}",
        upstream.url.trim_start_matches("ws://")
    );
    own_nginx(&d.0, "", &block).expect("nginx (scripts/brokers.sh installs it)")
}

/// nginx as a WebSocket proxy with a 1 s `proxy_read_timeout` (its default is 60 s, an AWS
/// ALB's idle time-out the same): a receiver whose feed is quieter than that is cut by the
/// proxy unless it pings. With `--keep-alive 300ms` the receivers' pings (answered by the
/// upstream server through nginx) keep them connected through a run whose messages come
/// every 2 s; with `--keep-alive 0` nginx cuts them.
#[test]
fn quiet_receivers_behind_a_proxy_stay_connected_by_their_pings() {
    need!("MSGBENCH_IT_HTTP_URL");
    let upstream = Server::ws_broadcast(&[]);
    let d = TempDir::new("ws-behind-nginx");
    let (mut proxy, port) = idle_closing_proxy(&d, &upstream);
    let direct = format!("{}/", upstream.url);
    let proxied = format!("ws://127.0.0.1:{port}/");
    let run = |keep_alive: &str| {
        run_json(
            &d.0,
            &[
                "run",
                &direct,
                "--consume-from",
                &proxied,
                "-c",
                "3",
                "--rate",
                "0.5",
                "--duration",
                "5s",
                "--warmup",
                "1s",
                "--drain",
                "1s",
                "--keep-alive",
                keep_alive,
            ],
        )
    };
    let pinged = run("300ms");
    assert_eq!(
        count_events(&pinged, "disconnected"),
        0,
        "{}",
        pinged["events"]
    );
    let i = &pinged["integrity"];
    assert!(u(&i["expected"]) >= 6, "{i}");
    assert_eq!(u(&i["delivered"]), u(&i["expected"]), "{i}");
    let quiet = run("0s");
    assert!(
        count_events(&quiet, "disconnected") >= 3,
        "nginx cut the receivers that did not ping: {}",
        quiet["events"]
    );
    proxy.kill();
}

/// A producer whose proxy closes it while it waits for its next send (nginx's 1 s
/// `proxy_read_timeout`; the upstream broadcast server sends a producer nothing): the close is
/// read while it waits, so the next message goes out on a new connection. A producer that
/// read its socket only when sending wrote each message into the closed connection, counted
/// it sent, and the system under test was blamed for losing it.
#[test]
fn a_producer_closed_while_idle_reconnects_before_its_next_send() {
    need!("MSGBENCH_IT_HTTP_URL");
    let upstream = Server::ws_broadcast(&[]);
    let d = TempDir::new("ws-producer-behind-nginx");
    let (mut proxy, port) = idle_closing_proxy(&d, &upstream);
    let r = run_json(
        &d.0,
        &[
            "run",
            &format!("ws://127.0.0.1:{port}/"),
            "--consume-from",
            &format!("{}/", upstream.url),
            "-c",
            "2",
            "--rate",
            "0.5",
            "--duration",
            "6s",
            "--warmup",
            "0s",
            "--drain",
            "1s",
            "--keep-alive",
            "0s",
        ],
    );
    proxy.kill();
    assert!(
        count_events(&r, "disconnected") >= 2,
        "nginx cut the idle producer: {}",
        r["events"]
    );
    let i = &r["integrity"];
    assert!(u(&i["expected"]) >= 6, "{i}");
    assert_eq!(
        u(&i["lost"]),
        0,
        "nothing written into a closed connection: {i}"
    );
    assert_eq!(u(&i["delivered"]), u(&i["expected"]), "{i}");
}

/// How msgbench answers a server's close [RFC 6455 7.4]: a close without a status code is
/// answered by one without a code (1005 only stands for "none" and must never be sent, and
/// strict servers such as Node's `ws` fail a connection that gets it), and a close with a code
/// no endpoint may send (999) fails the connection with 1002 instead of being echoed.
#[test]
fn a_servers_close_is_answered_as_rfc_6455_says() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    // One connection per close frame; what msgbench sent back after it.
    let server = std::thread::spawn(move || {
        let mut answers = Vec::new();
        for close in [&[0x88u8, 0x00][..], &[0x88, 0x02, 0x03, 0xe7][..]] {
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            accept_upgrade(&mut s);
            let mut buf = [0u8; 4096];
            s.write_all(close).unwrap();
            // The answer: a masked close frame (0x88, 0x80 | length, the key, the payload).
            let mut got = Vec::new();
            while got.len() < 6 || got.len() < 6 + (got[1] & 0x7f) as usize {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            answers.push(got);
        }
        answers
    });
    let d = TempDir::new("ws-close-codes");
    // The consumer is closed by the server, answers, reconnects and is closed again; the run
    // goes on (its producer publishes to NATS) until both closes were answered.
    let _ = msgbench(
        &d.0,
        &[
            "run",
            &need!(NATS),
            "--consume-from",
            &format!("ws://127.0.0.1:{port}/feed"),
            "--rate",
            "10",
            "--duration",
            "2s",
            "--drain",
            "0s",
            "--connect-timeout",
            "2s",
        ],
    );
    let answers = server.join().unwrap();
    let payload = |a: &[u8]| -> Vec<u8> {
        assert!(a.len() >= 6 && a[0] == 0x88, "not a close frame: {a:?}");
        let key = &a[2..6];
        a[6..]
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ key[i % 4])
            .collect()
    };
    assert_eq!(payload(&answers[0]), Vec::<u8>::new(), "{:?}", answers[0]);
    assert_eq!(payload(&answers[1])[..2], [0x03, 0xea], "{:?}", answers[1]);
}

/// A count-bounded run against a server that takes the connection and never reads has no end
/// of its own: once the socket's buffers are full the producer waits in one send, and after
/// 60 s of that the run ends with its report and says why (exit 1), instead of hanging.
#[test]
fn a_count_bounded_run_gives_up_on_a_server_that_never_reads() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let server = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        accept_upgrade(&mut s);
        // Holds the connection, reading nothing, until the test is over.
        let _ = stop_rx.recv_timeout(Duration::from_secs(150));
        drop(s);
    });
    let d = TempDir::new("ws-never-reads");
    let started = std::time::Instant::now();
    let o = msgbench(
        &d.0,
        &[
            "run",
            &format!("ws://127.0.0.1:{port}/"),
            "-c",
            "0",
            "--size",
            "1MiB",
            "-n",
            "1000",
            "--warmup",
            "0s",
            "--drain",
            "1s",
            "--format",
            "json",
        ],
    );
    let _ = stop_tx.send(());
    server.join().unwrap();
    let took = started.elapsed();
    let e = stderr(&o);
    assert!(took < Duration::from_secs(100), "took {took:?}: {e}");
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains("took no message from it for 60 s"), "{e}");
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let sent = u(&measure(&r)["counters"]["sent"]);
    assert!(sent > 0 && sent < 1000, "sent {sent}");
}

/// The server side of a WebSocket upgrade on a raw socket, for tests whose server must do what
/// `serve ws-broadcast` never would: reads the request, answers 101 with its accept key.
fn accept_upgrade(s: &mut std::net::TcpStream) {
    use std::io::{Read, Write};
    let mut req = Vec::new();
    let mut buf = [0u8; 4096];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "no upgrade request");
        req.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&req).to_string();
    let key = text
        .lines()
        .find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.eq_ignore_ascii_case("sec-websocket-key"))
                .map(|(_, v)| v.trim().to_string())
        })
        .expect("a Sec-WebSocket-Key");
    let accept = msgbench_driver_ws::codec::accept_key(&key);
    write!(
        s,
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {accept}\r\n\r\n"
    )
    .unwrap();
}
