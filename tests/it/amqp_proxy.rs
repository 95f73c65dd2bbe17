//! AMQP 0-9-1 through a strict intermediary that terminates the handshake itself, as amqpprox
//! does (`msgbench serve amqp-proxy`: reads the client's handshake one frame at a time, answers
//! it, replays it upstream, then relays; bytes sent before `connection.open-ok` are held).
//! msgbench's confirms, throughput and connection workloads must pass through it unchanged, to
//! RabbitMQ (started by `scripts/brokers.sh`) and to the built-in sink over TLS; a client that
//! pipelines `channel.open` (the opt-in `--pipeline-handshake`) stalls there, which shows the
//! proxy is as strict as the real one.

use crate::util;

use std::process::{Command, Stdio};
use std::time::Duration;
use util::*;

/// `msgbench serve amqp-proxy` to `upstream`, stopped with SIGINT so it prints its counts.
struct Proxy {
    child: Option<std::process::Child>,
    url: String,
    log: std::path::PathBuf,
}

impl Proxy {
    fn start(dir: &std::path::Path, upstream: &str, extra: &[&str]) -> Proxy {
        let port = free_port();
        let log = dir.join(format!("proxy-{port}.log"));
        let child = Command::new(bin())
            .args(["serve", "amqp-proxy", "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .args(["--upstream", upstream])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting msgbench serve amqp-proxy");
        let p = Proxy {
            child: Some(child),
            url: format!("amqp://127.0.0.1:{port}"),
            log,
        };
        if listens_within(port, Duration::from_secs(5)) {
            return p;
        }
        panic!("the proxy did not listen on {port}");
    }

    /// Stops it (SIGINT) and returns its closing line's counts: (relayed, failed, held bytes).
    fn stop(mut self) -> (u64, u64, u64) {
        let mut child = self.child.take().unwrap();
        // SAFETY: a plain kill(2) on the child we started.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let _ = child.wait();
        let text = std::fs::read_to_string(&self.log).unwrap();
        let line = text
            .lines()
            .find(|l| l.contains("connections relayed"))
            .unwrap_or_else(|| panic!("no closing line from the proxy:\n{text}"));
        let n: Vec<u64> = line
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|w| w.parse().ok())
            .collect();
        (n[0], n[1], n[2])
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn failures(m: &serde_json::Value) -> u64 {
    m["counters"]["connect_failures"]
        .as_object()
        .map_or(0, |f| f.values().map(u).sum())
}

/// Confirms and large messages through the proxy to RabbitMQ: every message confirmed and
/// delivered, nothing held back by the proxy.
#[test]
fn confirms_and_throughput_through_the_proxy_to_rabbitmq() {
    let d = TempDir::new("amqp-proxy-rmq");
    let proxy = Proxy::start(&d.0, &need!(AMQP), &[]);
    let common = ["--warmup", "0s", "--no-output"];
    let mut args = vec![
        "run",
        &proxy.url,
        "--confirm",
        "-p",
        "2",
        "-c",
        "2",
        "-n",
        "5000",
        "-s",
        "1KiB",
        "--topic",
        "it.proxy.confirm",
    ];
    args.extend(common);
    let r = run_json(&d.0, &args);
    let m = measure(&r);
    assert_eq!(u(&m["counters"]["acked"]), 5000, "{m}");
    let i = &r["integrity"];
    assert_eq!((u(&i["delivered"]), u(&i["lost"])), (10_000, 0), "{i}");

    let mut args = vec![
        "run",
        &proxy.url,
        "-s",
        "64KiB",
        "-n",
        "400",
        "--topic",
        "it.proxy.bytes",
    ];
    args.extend(common);
    let r = run_json(&d.0, &args);
    let i = &r["integrity"];
    assert_eq!((u(&i["delivered"]), u(&i["lost"])), (400, 0), "{i}");
    assert_eq!(u(&measure(&r)["counters"]["received_bytes"]), 400 * 65_536);
    let (relayed, failed, held) = proxy.stop();
    assert!(relayed >= 6, "{relayed} connections relayed");
    assert_eq!((failed, held), (0, 0));
}

/// A TLS upstream (the built-in sink with the test certificate): a connection storm, held
/// connections and confirmed publishes, all through the proxy.
#[test]
fn storms_and_confirms_through_the_proxy_to_a_tls_sink() {
    let d = TempDir::new("amqp-proxy-sink");
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
    let proxy = Proxy::start(&d.0, &sink.url, &["--ca-file", &ca]);
    let r = run_json(
        &d.0,
        &[
            "run",
            &proxy.url,
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
    assert!(u(&m["counters"]["connects"]) > 20, "{m}");
    assert_eq!(failures(m), 0, "{m}");
    let r = run_json(
        &d.0,
        &[
            "run",
            &proxy.url,
            "--connections",
            "100",
            "--hold",
            "1s",
            "--no-output",
        ],
    );
    assert_eq!(
        u(&r["connections"]["peak_held"]),
        100,
        "{}",
        r["connections"]
    );
    let r = run_json(
        &d.0,
        &[
            "run",
            &proxy.url,
            "-p",
            "2",
            "-c",
            "0",
            "--confirm",
            "-n",
            "2000",
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    assert_eq!(u(&measure(&r)["counters"]["acked"]), 2000);
    let (_, failed, held) = proxy.stop();
    assert_eq!((failed, held), (0, 0));
}

/// A login RabbitMQ refuses reaches the client as connection.close 403 through the proxy, not
/// as an outage (320 "upstream unavailable", which a reconnecting client would retry for
/// good): msgbench's client, like amqp091-go, does not ask for authentication_failure_close,
/// so RabbitMQ just closes the socket after start-ok, which AMQP 0-9-1 says means exactly that.
#[test]
fn a_refused_login_is_said_through_the_proxy() {
    let d = TempDir::new("amqp-proxy-login");
    let proxy = Proxy::start(&d.0, &need!(AMQP), &[]);
    let url = proxy
        .url
        .replace("amqp://", "amqp://guest:not-the-password@");
    let o = msgbench(&d.0, &["run", &url, "-n", "10", "--no-output"]);
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("403 ACCESS_REFUSED"), "{err}");
    assert!(!err.contains("upstream unavailable"), "{err}");
}

/// The opt-in pipelined handshake sends channel.open before open-ok: the strict proxy holds it,
/// the channel never opens, and the run says why instead of hanging.
#[test]
fn a_pipelined_handshake_stalls_at_a_strict_proxy() {
    let d = TempDir::new("amqp-proxy-pipelined");
    let sink = Server::amqp_sink("amqp", &[]);
    let proxy = Proxy::start(&d.0, &sink.url, &[]);
    let o = msgbench(
        &d.0,
        &[
            "run",
            &proxy.url,
            "--pipeline-handshake",
            "--connect-timeout",
            "1s",
            "-c",
            "0",
            "-n",
            "10",
            "--no-output",
        ],
    );
    assert!(!o.status.success(), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("no answer to the AMQP handshake"),
        "{}",
        stderr(&o)
    );
    let (_, _, held) = proxy.stop();
    assert!(held > 0, "the proxy held nothing");
}

/// pika's asynchronous publisher through the proxy to the sink: every publish confirmed. pika
/// turns publisher confirms on only when the server's `connection.start` lists the
/// `publisher_confirms` capability, and the proxy answers that frame itself before it has
/// reached the upstream: with the empty server properties it sent before, pika refused
/// `confirm_delivery` through it (found with RabbitMQ's Java client, which showed the table).
#[test]
fn pika_confirms_through_the_proxy() {
    let Some(py) = crate::thirdparty::peer_python("pika", "python3-pika") else {
        return;
    };
    let d = TempDir::new("proxy-pika");
    let sink = Server::amqp_sink("amqp", &[]);
    let proxy = Proxy::start(&d.0, &sink.url, &[]);
    let ran = crate::thirdparty::run(
        Command::new(&py)
            .arg(crate::thirdparty::fixture("peer_pika.py"))
            .args([&crate::thirdparty::port_of(&proxy.url), "confirms"]),
    );
    crate::thirdparty::assert_pika_confirms(ran.json(), "msgbench amqp-proxy", &ran.context());
    let (relayed, failed, _) = proxy.stop();
    assert_eq!((relayed, failed), (1, 0));
}
