//! The fault matrix (issue 22): every broker driver under four faults, with nothing lost from
//! the accounting.
//!
//! Faults, injected 2 s into a paced run (1,000 msgs/s for 10 s, then up to 6 s of drain):
//! - `kill`: the broker killed with SIGKILL and started again a second later on its data;
//! - `stop`: the broker frozen with SIGSTOP for 2 s, then resumed;
//! - `reset`: every connection reset (RST) by a proxy between msgbench and the broker;
//! - `blackhole`: the proxy stops forwarding without closing anything, and holds new
//!   connections unanswered, for 5 s: msgbench must notice within its own timeouts
//!   (`--keep-alive 2s`, `--ack-timeout 3s`, `--connect-timeout 2s`) and reconnect, never hang.
//!
//! In every cell the run must end by itself (a watchdog kills it and fails the test after
//! 90 s), write its report and a results file ending with the end record, and the account must
//! close exactly:
//! - consumers: `expected = sent` (one consumer) `= delivered + lost`, nothing delivered twice
//!   counted as delivered;
//! - producers, where the protocol confirms: every message sent has one outcome,
//!   `sent = confirmed + refused + in doubt` (in doubt: its confirmation never came, by the ack
//!   timeout or because its connection died);
//! - where the broker keeps what it confirmed (durable queues, JetStream, Kafka, Redis with an
//!   fsync'ed append-only file), `lost <= in doubt + refused`: no confirmed message was lost;
//! - deliveries resumed after the fault, and a fault that cuts connections was seen as such
//!   (`disconnected` and `reconnected` events).
//!
//! Brokers: own instances on free ports where they start in a moment (nats-server, with
//! JetStream; mosquitto; redis-server); the shared RabbitMQ and Artemis of `scripts/brokers.sh`
//! otherwise (its `kill-restart` and `pause`), whose other clients (the main test binaries) are
//! not running: cargo runs test binaries one at a time. Kafka is the shared one too, its proxy
//! cells through a listener that advertises the proxy's address (see [`kafka`]). Each test is
//! one driver's row, its four cells one after another; rows run in parallel (each on its own
//! broker). Every cell prints one line `FAULTS <driver> <fault> sent=… delivered=… lost=…
//! in_doubt=… refused=… reconnects=…`, the figures of the matrix in docs/GUIDE.md.

use crate::util;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use util::faultproxy::FaultProxy;
use util::*;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fault {
    Kill,
    Stop,
    Reset,
    Blackhole,
}

impl Fault {
    const ALL: [Fault; 4] = [Fault::Kill, Fault::Stop, Fault::Reset, Fault::Blackhole];

    fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Stop => "stop",
            Fault::Reset => "reset",
            Fault::Blackhole => "blackhole",
        }
    }
}

/// Where a row's broker runs and how faults reach it.
trait Broker {
    /// `127.0.0.1:PORT` of the broker itself.
    fn addr(&self) -> String;
    /// SIGKILL, then started again (on the same port and data) a second later.
    fn kill_restart(&mut self);
    /// SIGSTOP for `secs`, then SIGCONT.
    fn pause(&mut self, secs: u64);
    /// Where a fault proxy must listen, and what it forwards to, when clients can reach the
    /// broker through a proxy only at an address the broker itself names (Kafka's advertised
    /// listener); `None`: any port, forwarding to [`Broker::addr`].
    fn proxy_route(&self) -> Option<(u16, String)> {
        None
    }
}

/// A broker process of the test's own: `start` (re)starts it on its port; killed on drop.
struct Own {
    child: Option<Child>,
    port: u16,
    start: Box<dyn Fn(u16) -> Child + Send>,
}

impl Own {
    fn new(start: impl Fn(u16) -> Child + Send + 'static) -> Own {
        let port = free_port();
        let child = start(port);
        wait_listening(port, Duration::from_secs(60));
        Own {
            child: Some(child),
            port,
            start: Box::new(start),
        }
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Broker for Own {
    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn kill_restart(&mut self) {
        self.kill(); // Child::kill is SIGKILL
        std::thread::sleep(Duration::from_secs(1));
        self.child = Some((self.start)(self.port));
        wait_listening(self.port, Duration::from_secs(60));
    }

    fn pause(&mut self, secs: u64) {
        let pid = self.child.as_ref().unwrap().id() as i32;
        signal(pid, libc::SIGSTOP);
        std::thread::sleep(Duration::from_secs(secs));
        signal(pid, libc::SIGCONT);
    }
}

impl Drop for Own {
    fn drop(&mut self) {
        self.kill();
    }
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) on a broker process this test started.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "signal {sig} to {pid}");
}

fn wait_listening(port: u16, within: Duration) {
    assert!(
        listens_within(port, within),
        "no broker listening on {port}"
    );
}

/// A broker of `scripts/brokers.sh` (`name`: rabbitmq, artemis), faulted through the script.
struct Shared {
    name: &'static str,
    addr: String,
    /// See [`Broker::proxy_route`].
    proxied: Option<(u16, String)>,
    /// This test's turn with the broker (see [`crate::turn`]).
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl Shared {
    /// `url`: where it listens (the address is taken from it).
    fn new(name: &'static str, url: String) -> Shared {
        let rest = url.split("://").nth(1).unwrap();
        let rest = rest.rsplit('@').next().unwrap();
        let addr = rest.split(['/', '?']).next().unwrap().to_string();
        Shared {
            name,
            addr,
            proxied: None,
            _turn: crate::turn(name),
        }
    }

    /// `listener` (`127.0.0.1:PORT`) advertises `PORT + 1`: the proxy goes there.
    fn behind_proxy(mut self, listener: String) -> Shared {
        let port: u16 = listener.rsplit(':').next().unwrap().parse().unwrap();
        self.proxied = Some((port + 1, listener));
        self
    }

    fn script(&self, args: &[&str]) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/brokers.sh");
        let o = Command::new(script).args(args).output().unwrap();
        assert!(o.status.success(), "brokers.sh {args:?}: {}", stderr(&o));
    }
}

impl Broker for Shared {
    fn addr(&self) -> String {
        self.addr.clone()
    }

    fn kill_restart(&mut self) {
        self.script(&["kill-restart", self.name, "1"]);
    }

    fn pause(&mut self, secs: u64) {
        self.script(&["pause", self.name, &secs.to_string()]);
    }

    fn proxy_route(&self) -> Option<(u16, String)> {
        self.proxied.clone()
    }
}

/// One row of the matrix.
struct Row {
    /// Its name in the matrix.
    driver: &'static str,
    /// The run's URL for a broker at `127.0.0.1:PORT`.
    url: fn(&str) -> String,
    /// Arguments besides the common ones.
    args: Vec<String>,
    /// A scenario file's text, run with the URL as its `--target`.
    scenario: Option<&'static str>,
    /// Producers learn each message's outcome (ack, confirm, reply).
    confirms: bool,
    /// The broker keeps every message it confirmed through this fault.
    keeps_confirmed: fn(Fault) -> bool,
    /// The faults it takes (all four but for Kafka).
    faults: &'static [Fault],
    /// Seconds added to the run, for a broker slow to start again (RabbitMQ takes over 10 s on
    /// a busy machine): producers must send again for a while after it is back. Added twice
    /// to the kill's run, after which the broker starts from nothing.
    longer: u64,
    /// Seconds after which the broker drops a connection it hears nothing from (its own idle
    /// time-out), and only then gives what it had handed to that connection to another
    /// consumer. A consumer cut off by the blackhole reconnects within seconds, but the broker
    /// keeps its old connection, and goes on handing it messages up to the link credit it had,
    /// until then: the blackhole cell drains this much longer, so those messages arrive
    /// (redelivered) rather than count as lost. 0: the client's reconnection settles it.
    drops_silent_after: u64,
}

/// Runs the row's four cells against `broker`.
fn row(row: &Row, broker: &mut dyn Broker) {
    for &fault in row.faults {
        cell(row, broker, fault);
    }
}

/// One cell: a run with `fault` injected 2 s in, its account checked and printed.
fn cell(row: &Row, broker: &mut dyn Broker, fault: Fault) {
    let d = TempDir::new(&format!("faults-{}-{}", row.driver, fault.name()));
    let proxy =
        matches!(fault, Fault::Reset | Fault::Blackhole).then(|| match broker.proxy_route() {
            Some((port, upstream)) => FaultProxy::start_on(port, &upstream),
            None => FaultProxy::start(&broker.addr()),
        });
    let addr = proxy.as_ref().map_or_else(|| broker.addr(), |p| p.addr());
    let url = (row.url)(&addr);
    let topic = format!("faults.{}.{}", row.driver.replace('+', "-"), fault.name());
    // A killed broker starts again from nothing (RabbitMQ's VM took 23 s on a busy CI machine
    // while the other rows' brokers restarted too): its cell gets the allowance twice.
    let restart = if fault == Fault::Kill { row.longer } else { 0 };
    let duration = format!("{}s", 10 + row.longer + restart);
    let waits = if fault == Fault::Blackhole {
        row.drops_silent_after
    } else {
        0
    };
    let drain = format!("{}s", 6 + waits);
    let scenario = d.path("s.toml").to_string_lossy().into_owned();
    let mut args: Vec<&str> = vec!["run"];
    if let Some(text) = row.scenario {
        std::fs::write(&scenario, text).unwrap();
        args.extend([scenario.as_str(), "--target"]);
    }
    args.extend([
        url.as_str(),
        "--topic",
        &topic,
        "--rate",
        "1000",
        "--duration",
        &duration,
        "--warmup",
        "0s",
        "--drain",
        &drain,
        "--ack-timeout",
        "3s",
        "--keep-alive",
        "2s",
        "--connect-timeout",
        "2s",
        "-o",
        "r.jsonl",
    ]);
    args.extend(row.args.iter().map(String::as_str));
    let started = Instant::now();
    let run = Watched::spawn(&d.0, &args);
    std::thread::sleep(Duration::from_secs(2));
    match fault {
        Fault::Kill => broker.kill_restart(),
        Fault::Stop => broker.pause(2),
        Fault::Reset => proxy.as_ref().unwrap().reset_all(),
        Fault::Blackhole => {
            let p = proxy.as_ref().unwrap();
            p.blackhole();
            std::thread::sleep(Duration::from_secs(5));
            p.restore();
        }
    }
    let r = run.finish(Duration::from_secs(90 + waits));
    let took = started.elapsed();
    let known = KNOWN_GAPS.contains(&(row.driver, fault));
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        check(row, fault, &d.0, &r, took)
    }));
    match checked {
        Err(e) if !known => std::panic::resume_unwind(e),
        Err(_) => println!(
            "FAULTS {} {} KNOWN GAP (see KNOWN_GAPS); events: {}",
            row.driver,
            fault.name(),
            r["events"]
        ),
        Ok(()) if known => println!(
            "FAULTS {} {} passes now: take it off KNOWN_GAPS",
            row.driver,
            fault.name()
        ),
        Ok(()) => {}
    }
}

/// Cells that do not hold yet, each still run to the end under the watchdog (so a hang fails
/// the test whatever this list says) and printed, but whose account is not asserted:
/// none at present.
const KNOWN_GAPS: &[(&str, Fault)] = &[];

/// A msgbench run watched by a deadline: a run that does not end is killed and fails the test.
struct Watched {
    pid: i32,
    out: std::sync::mpsc::Receiver<std::process::Output>,
}

impl Watched {
    fn spawn(dir: &Path, args: &[&str]) -> Watched {
        let child = Command::new(bin())
            .args(args)
            .args(["--format", "json", "--quiet"])
            .current_dir(dir)
            .env("MSGBENCH_RESULTS_DB", dir.join("runs.db"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting msgbench");
        let pid = child.id() as i32;
        let (tx, out) = std::sync::mpsc::channel();
        // The output is read while the run goes on (a report larger than a pipe's buffer would
        // otherwise block it).
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output().unwrap());
        });
        Watched { pid, out }
    }

    /// The run's JSON report; panics if it does not end within `limit` or fails.
    fn finish(self, limit: Duration) -> serde_json::Value {
        let o = match self.out.recv_timeout(limit) {
            Ok(o) => o,
            Err(_) => {
                signal(self.pid, libc::SIGKILL);
                let o = self.out.recv().unwrap();
                panic!(
                    "msgbench hung: killed after {limit:?}\nstderr:\n{}",
                    stderr(&o)
                );
            }
        };
        assert!(o.status.success(), "msgbench failed:\n{}", stderr(&o));
        serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("report is not JSON ({e}):\n{}", stdout(&o)))
    }
}

/// The cell's assertions; prints its line of the matrix first (so a failing cell's figures
/// are seen too).
fn check(row: &Row, fault: Fault, dir: &Path, r: &serde_json::Value, took: Duration) {
    let sum = |k: &str| phase_sum(r, k);
    let err = |k: &str| -> u64 {
        r["phases"].as_array().map_or(0, |a| {
            a.iter()
                .map(|p| p["counters"]["errors"][k].as_u64().unwrap_or(0))
                .sum()
        })
    };
    let i = &r["integrity"];
    let (sent, acked, refused) = (sum("sent"), sum("acked"), sum("nacked"));
    // Confirmed but unroutable (AMQP `--mandatory`): accepted, yet no queue took them.
    let returned = sum("returned");
    let in_doubt = err("timeout");
    let (expected, delivered, lost) = (u(&i["expected"]), u(&i["delivered"]), u(&i["lost"]));
    let (disc, reconn) = (
        count_events(r, "disconnected"),
        count_events(r, "reconnected"),
    );
    println!(
        "FAULTS {} {} sent={sent} delivered={delivered} lost={lost} in_doubt={in_doubt} \
         refused={refused} confirmed={acked} returned={returned} disconnects={disc} reconnects={reconn} \
         duplicated={} took={:.1}s",
        row.driver,
        fault.name(),
        u(&i["duplicated"]),
        took.as_secs_f64()
    );
    let ctx = format!(
        "{} {}: integrity {i}\nerrors {}\nevents {}",
        row.driver,
        fault.name(),
        r["result"]["counters"]["errors"],
        r["events"]
    );
    // The report and the results file are complete.
    let file = std::fs::read_to_string(dir.join("r.jsonl")).unwrap();
    assert!(
        file.lines().last().unwrap().contains("\"type\":\"end\""),
        "{ctx}"
    );
    // Consumers' account: one consumer, so every message sent is expected once.
    assert_eq!(expected, sent, "{ctx}");
    assert!(delivered <= expected, "{ctx}");
    assert_eq!(expected, delivered + lost, "{ctx}");
    // Producers' account: every message has exactly one outcome.
    if row.confirms {
        assert_eq!(sent, acked + refused + in_doubt, "{ctx}");
    }
    if (row.keeps_confirmed)(fault) {
        assert!(
            lost <= in_doubt + refused + returned,
            "a confirmed message was lost: {ctx}"
        );
    }
    // Deliveries went on after the fault.
    assert!(sent >= 5_000, "{ctx}");
    assert!(delivered * 2 > sent, "{ctx}");
    if fault != Fault::Stop {
        assert!(disc >= 1 && reconn >= 1, "the cut was not seen: {ctx}");
    }
}

fn always(_: Fault) -> bool {
    true
}

fn never(_: Fault) -> bool {
    false
}

fn strings(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// nats-server, optionally with JetStream storing under `store`.
fn nats_server(dir: &Path, store: Option<&Path>) -> Own {
    let log = dir.join("nats.log");
    let store = store.map(Path::to_path_buf);
    Own::new(move |port| {
        let mut c = Command::new("nats-server");
        c.args(["-a", "127.0.0.1", "-p", &port.to_string()])
            .args(["-l", log.to_str().unwrap()]);
        if let Some(s) = &store {
            c.args(["-js", "-sd", s.to_str().unwrap()]);
        }
        c.stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server (scripts/brokers.sh up installs it)")
    })
}

#[test]
fn nats() {
    let d = TempDir::new("faults-nats");
    let _ = need!(NATS); // nats-server installed by the broker script
    let mut b = nats_server(&d.0, None);
    let r = Row {
        driver: "nats",
        url: |a| format!("nats://{a}"),
        args: vec![],
        scenario: None,
        confirms: false,
        keeps_confirmed: never,
        faults: &Fault::ALL,
        longer: 0,
        drops_silent_after: 0,
    };
    row(&r, &mut b);
}

#[test]
fn jetstream() {
    let d = TempDir::new("faults-js");
    let _ = need!(NATS); // nats-server installed by the broker script
    let mut b = nats_server(&d.0, Some(&d.path("store")));
    let r = Row {
        driver: "nats+js",
        // What the server sent down the blackholed connection comes back after ack_wait: 3 s
        // keeps that inside the run's drain (the default, 30 s, would count it lost).
        url: |a| format!("nats+js://{a}?durable=faults&ack_wait=3s"),
        args: vec![],
        scenario: None,
        confirms: true,
        keeps_confirmed: always,
        faults: &Fault::ALL,
        longer: 0,
        drops_silent_after: 0,
    };
    row(&r, &mut b);
}

#[test]
fn mqtt() {
    mqtt_matrix("faults-mqtt", "mqtt", &[]);
}

/// The same faults with `--io batched`: a connection whose I/O is queued on a worker's
/// io_uring loses, reconnects and accounts exactly as a polled one does.
#[test]
fn mqtt_batched_io() {
    mqtt_matrix("faults-mqtt-batched", "mqtt-batched", &["--io", "batched"]);
}

/// The MQTT row against a mosquitto of this test's own, with `extra` arguments.
fn mqtt_matrix(tag: &str, driver: &'static str, extra: &[&str]) {
    let _ = need!(MQTT);
    let d = TempDir::new(tag);
    let conf = d.path("m.conf");
    let mut b = Own::new(move |port| {
        std::fs::write(
            &conf,
            format!(
                "listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n\
                 set_tcp_nodelay true\nmax_inflight_messages 0\nmax_queued_messages 100000\n"
            ),
        )
        .unwrap();
        Command::new("/usr/sbin/mosquitto")
            .args(["-c", conf.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mosquitto (scripts/brokers.sh up installs it)")
    });
    // QoS 1 and a persistent session: the broker keeps what a subscriber has not acknowledged
    // while it reconnects, but only in memory (a killed mosquitto forgets it).
    let mut args = strings(&[
        "--qos",
        "1",
        "--persistent-session",
        "--client-id",
        "faults-{role}-{i}",
    ]);
    args.extend(strings(extra));
    let r = Row {
        driver,
        url: |a| format!("mqtt://{a}"),
        args,
        scenario: None,
        confirms: true,
        keeps_confirmed: |f| f != Fault::Kill,
        faults: &Fault::ALL,
        longer: 0,
        drops_silent_after: 0,
    };
    row(&r, &mut b);
}

/// redis-server whose every write is fsync'ed to its append-only file before the reply, so a
/// stream survives SIGKILL with every entry it confirmed.
fn redis_server(dir: &Path) -> Own {
    let data = dir.to_path_buf();
    Own::new(move |port| {
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ])
            .args(["--dir", data.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (scripts/brokers.sh up installs it)")
    })
}

#[test]
fn redis_pubsub() {
    let d = TempDir::new("faults-redis");
    let _ = need!(REDIS); // redis-server installed by the broker script
    let mut b = redis_server(&d.0);
    // Pub/sub keeps nothing for a subscriber that is away: what is published while it
    // reconnects is lost, confirmed or not.
    let r = Row {
        driver: "redis",
        url: |a| format!("redis://{a}"),
        args: vec![],
        scenario: None,
        confirms: true,
        keeps_confirmed: never,
        faults: &Fault::ALL,
        longer: 0,
        drops_silent_after: 0,
    };
    row(&r, &mut b);
}

#[test]
fn redis_streams() {
    let d = TempDir::new("faults-redis-streams");
    let _ = need!(REDIS); // redis-server installed by the broker script
    let mut b = redis_server(&d.0);
    let r = Row {
        driver: "redis streams",
        url: |a| format!("redis://{a}?mode=streams"),
        args: vec![],
        scenario: None,
        confirms: true,
        keeps_confirmed: always,
        faults: &Fault::ALL,
        longer: 0,
        drops_silent_after: 0,
    };
    row(&r, &mut b);
}

#[test]
fn amqp() {
    let mut b = Shared::new("rabbitmq", need!(AMQP));
    // Confirms, a durable queue and persistent messages: a confirmed message is on disk.
    // Mandatory: a message the restarted node confirms before its queues' bindings are back
    // (it confirms unroutable messages too) comes back as returned instead of vanishing.
    let r = Row {
        driver: "amqp",
        url: |a| format!("amqp://guest:guest@{a}/%2f"),
        args: strings(&[
            "--confirm",
            "--durable",
            "--persistent",
            "--queue-group",
            "g",
            "--purge",
            "--mandatory",
        ]),
        scenario: None,
        confirms: true,
        keeps_confirmed: always,
        faults: &Fault::ALL,
        longer: 14,
        drops_silent_after: 0,
    };
    row(&r, &mut b);
}

#[test]
fn amqp10() {
    let mut b = Shared::new("artemis", need!(ARTEMIS));
    // Durable messages (Artemis journals them before it accepts them).
    let r = Row {
        driver: "amqp10",
        url: |a| format!("amqp10://msgbench:msgbench-secret@{a}"),
        args: vec![],
        scenario: Some("[amqp10]\ndurable = true\n"),
        confirms: true,
        keeps_confirmed: always,
        faults: &Fault::ALL,
        // A killed Artemis took 10 to 15 s to serve again on CI (it replays its journal), so
        // the producer must go on sending well after that.
        longer: 14,
        // Artemis drops an AMQP connection it has not heard from after its connection TTL
        // (60 s by default).
        drops_silent_after: 60,
    };
    row(&r, &mut b);
}

/// Kafka: SIGKILL and SIGSTOP of the shared broker (`scripts/brokers.sh kill-restart kafka`,
/// `pause kafka`). A killed Kafka takes 10 s or more to come back (it recovers its logs after
/// an unclean stop), so its runs are 30 s long: deliveries must resume within them. The proxy
/// cells go through the broker's `PROXIED` listener, which advertises the proxy's port: a
/// client bootstraps through the proxy and then reaches the broker where its metadata says,
/// through the proxy again (a proxy in front of the plain listener would see the bootstrap
/// connection only).
#[test]
fn kafka() {
    let mut b = Shared::new("kafka", need!(KAFKA)).behind_proxy(need!(KAFKA_PROXIED));
    let r = Row {
        driver: "kafka",
        url: |a| format!("kafka://{a}"),
        args: strings(&["--acks", "all"]),
        scenario: None,
        confirms: true,
        keeps_confirmed: always,
        faults: &Fault::ALL,
        longer: 20,
        drops_silent_after: 0,
    };
    row(&r, &mut b);
}
