//! Through HAProxy (Debian's, installed by `scripts/brokers.sh`), the load balancer most often
//! put in front of brokers and web servers: HTTP/1.1 and HTTP/2 (its h2 frontend, 100 streams
//! per connection) to nginx, its idle keep-alive close between paced requests, and TCP mode to
//! RabbitMQ (AMQP 0-9-1), Mosquitto (MQTT) and nats-server, and NATS over WebSocket through
//! its HTTP mode (the upgrade relayed). Every message must arrive, every request be answered:
//! a proxy in between changes timings and who closes connections, never the counts.

use crate::util;

use std::process::{Command, Stdio};
use std::time::Duration;
use util::*;

/// The port of a broker URL from `scripts/brokers.sh env` (`scheme://[user@]host:port[/...]`).
fn port_of(url: &str) -> u16 {
    let rest = url.split("://").nth(1).unwrap();
    let host_port = rest.rsplit('@').next().unwrap().split('/').next().unwrap();
    host_port.rsplit(':').next().unwrap().parse().unwrap()
}

/// A frontend: its mode (`http`, `tcp`), what follows its `bind` address, lines of its own,
/// and the port of its one server.
type Frontend<'a> = (&'a str, &'a str, &'a str, u16);

/// Where HAProxy is (Debian puts it in /usr/sbin, which a non-root PATH lacks), if it runs;
/// the test is skipped if not (a failure under the test command).
fn haproxy_bin() -> Option<&'static str> {
    let bin = ["/usr/sbin/haproxy", "/usr/local/sbin/haproxy"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or("haproxy");
    crate::thirdparty::have_tool_asked(bin, "-v", "haproxy").then_some(bin)
}

/// HAProxy with `frontends`, each on a free port (returned in order), run in the foreground
/// and killed with the test.
fn haproxy(d: &TempDir, frontends: &[Frontend]) -> (Killed, Vec<u16>) {
    let mut conf = String::from(
        "global\n  maxconn 2000\ndefaults\n  timeout connect 5s\n  timeout client 30s\n  \
         timeout server 30s\n  timeout tunnel 1h\n",
    );
    let mut ports = Vec::new();
    for (i, (mode, bind, lines, backend)) in frontends.iter().enumerate() {
        let port = free_port();
        ports.push(port);
        conf.push_str(&format!(
            "frontend f{i}\n  mode {mode}\n  bind 127.0.0.1:{port}{bind}\n{lines}  \
             default_backend b{i}\nbackend b{i}\n  mode {mode}\n  server s{i} 127.0.0.1:{backend}\n"
        ));
    }
    let file = d.path("haproxy.cfg");
    std::fs::write(&file, &conf).unwrap();
    let p = Killed(
        Command::new(haproxy_bin().unwrap())
            .arg("-db")
            .arg("-f")
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    for port in &ports {
        assert!(
            listens_within(*port, Duration::from_secs(5)),
            "haproxy did not listen on {port} with:\n{conf}"
        );
    }
    (p, ports)
}

#[test]
fn every_protocol_through_haproxy() {
    let http = need!("MSGBENCH_IT_HTTP_URL");
    let amqp = need!("MSGBENCH_IT_AMQP_URL");
    let mqtt = need!("MSGBENCH_IT_MQTT_URL");
    let nats = need!("MSGBENCH_IT_NATS_URL");
    let nats_ws = need!("MSGBENCH_IT_NATS_WS_URL");
    if haproxy_bin().is_none() {
        return;
    }
    let d = TempDir::new("haproxy");
    let (_haproxy, p) = haproxy(
        &d,
        &[
            ("http", "", "", port_of(&http)),
            ("http", " proto h2", "", port_of(&http)),
            ("tcp", "", "", port_of(&amqp)),
            ("tcp", "", "", port_of(&mqtt)),
            ("tcp", "", "", port_of(&nats)),
            ("http", "", "", port_of(&nats_ws)),
        ],
    );
    let amqp_via = format!("amqp://guest:guest@127.0.0.1:{}/%2f", p[2]);
    let cases: [(String, &[&str]); 6] = [
        (
            format!("http://127.0.0.1:{}/", p[0]),
            &["--method", "GET", "-p", "4"],
        ),
        (
            format!("http://127.0.0.1:{}/", p[1]),
            &["--http2", "--method", "GET", "-p", "2"],
        ),
        (amqp_via, &["-p", "2", "-c", "2", "--confirm"]),
        (
            format!("mqtt://127.0.0.1:{}", p[3]),
            &["-p", "2", "-c", "2", "--qos", "1"],
        ),
        (
            format!("nats://127.0.0.1:{}", p[4]),
            &["-p", "2", "-c", "2"],
        ),
        (
            format!("nats+ws://127.0.0.1:{}", p[5]),
            &["-p", "2", "-c", "2"],
        ),
    ];
    for (url, extra) in &cases {
        let mut args = vec!["run", url, "-n", "20000", "--warmup", "0s"];
        args.extend_from_slice(extra);
        let r = run_json(&d.0, &args);
        let m = measure(&r);
        let c = &m["counters"];
        assert_eq!(u(&c["sent"]), 20000, "{url}: {m}");
        assert_eq!(u(&c["errors"]["disconnect"]), 0, "{url}: {m}");
        if url.starts_with("http") {
            assert_eq!(u(&c["acked"]), 20000, "{url}: {m}");
            assert_eq!(u(&r["responses"]["statuses"][0]["count"]), 20000, "{url}");
        } else {
            // Two consumers, each with every message (fan-out).
            assert_eq!(u(&c["received"]), 40000, "{url}: {m}");
            assert_eq!(u(&c["duplicated"]) + u(&c["reordered"]), 0, "{url}: {m}");
        }
    }
}

/// HAProxy closes a client's kept-alive connection idle for its `timeout http-keep-alive`
/// (here 200 ms) and the requests come every 500 ms per connection: each finds its
/// connection closed, or is caught as it closes and is sent again (a GET), and none is lost
/// or counted as an error.
#[test]
fn haproxys_keep_alive_close_between_paced_requests_loses_nothing() {
    let http = need!("MSGBENCH_IT_HTTP_URL");
    if haproxy_bin().is_none() {
        return;
    }
    let d = TempDir::new("haproxy-keepalive");
    let (_haproxy, p) = haproxy(
        &d,
        &[(
            "http",
            "",
            "  timeout http-keep-alive 200ms\n",
            port_of(&http),
        )],
    );
    let url = format!("http://127.0.0.1:{}/", p[0]);
    let r = run_json(
        &d.0,
        &[
            "run", &url, "--method", "GET", "-p", "2", "--rate", "4", "-n", "16", "--warmup", "0s",
        ],
    );
    let m = measure(&r);
    let c = &m["counters"];
    assert_eq!((u(&c["sent"]), u(&c["acked"])), (16, 16), "{m}");
    assert_eq!(
        u(&c["errors"]["disconnect"]) + u(&c["errors"]["timeout"]),
        0,
        "{m}"
    );
    // Most requests came after their connection closed: each on a new one.
    let conns = u(&r["responses"]["connections"]);
    assert!(conns >= 10, "{conns} connections: {}", r["responses"]);
}

/// HAProxy in TCP mode whose server is down takes each connection and closes it at once:
/// each driver says a proxy with its server down may be why, not only "unexpected end of
/// file", and the run stops with exit code 1.
#[test]
fn a_proxy_whose_server_is_down_is_named() {
    if haproxy_bin().is_none() {
        return;
    }
    let d = TempDir::new("haproxy-down");
    let dead = free_port();
    let (_haproxy, p) = haproxy(&d, &[("tcp", "", "", dead)]);
    for (scheme, said) in [
        ("amqp", "before connection.start"),
        ("mqtt", "before its CONNACK"),
        ("ws", "before answering the upgrade"),
        ("nats", "before its INFO"),
        ("redis", "before answering its handshake"),
    ] {
        let url = format!("{scheme}://127.0.0.1:{}", p[0]);
        let o = msgbench(
            &d.0,
            &["run", &url, "-d", "2s", "--warmup", "0s", "--no-output"],
        );
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{url}: {err}");
        assert!(err.contains(said), "{url}: {err}");
        assert!(err.contains("proxy whose"), "{url}: {err}");
    }
}
