//! Helpers for binary-level tests: run the real `msgbench` binary in a temporary directory.

#![allow(dead_code)]

pub mod faultproxy;
pub mod ramp;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};

/// A scratch directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "msgbench-test-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_msgbench")
}

/// Runs msgbench with `args` in `dir` (runs are recorded in `dir`'s own history, not the
/// user's).
pub fn msgbench(dir: &Path, args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .current_dir(dir)
        .env("MSGBENCH_RESULTS_DB", dir.join("runs.db"))
        .output()
        .expect("running msgbench")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs msgbench with `args`, expecting a usage error (exit 2) whose message contains `needle`;
/// returns the message.
pub fn refused(dir: &Path, args: &[&str], needle: &str) -> String {
    let o = msgbench(dir, args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: {err}");
    err
}

/// Runs msgbench, requires success, and returns the JSON report it printed.
pub fn run_json(dir: &Path, args: &[&str]) -> serde_json::Value {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--format", "json", "--quiet"]);
    let o = msgbench(dir, &all);
    assert!(
        o.status.success(),
        "msgbench {args:?} failed:\n{}\n{}",
        stdout(&o),
        stderr(&o)
    );
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("report is not JSON ({e}):\n{}", stdout(&o)))
}

/// The result of a JSON report: the measure phase's sends and every delivery of them.
pub fn measure(report: &serde_json::Value) -> &serde_json::Value {
    assert!(
        report["result"].is_object(),
        "the report has no result: {report}"
    );
    &report["result"]
}

pub fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

/// The NATS server the tests use, started by `scripts/brokers.sh up` (see [`need!`]).
pub const NATS: &str = "MSGBENCH_IT_NATS_URL";
/// The Mosquitto broker the tests use.
pub const MQTT: &str = "MSGBENCH_IT_MQTT_URL";
/// The RabbitMQ broker the tests use (AMQP 0-9-1).
pub const AMQP: &str = "MSGBENCH_IT_AMQP_URL";
/// The Redis server the tests use.
pub const REDIS: &str = "MSGBENCH_IT_REDIS_URL";
/// ActiveMQ Artemis (AMQP 1.0).
pub const ARTEMIS: &str = "MSGBENCH_IT_ARTEMIS_URL";
/// Apache Kafka (a `--features kafka` build).
pub const KAFKA: &str = "MSGBENCH_IT_KAFKA";
/// Kafka's listener (`127.0.0.1:PORT`) that advertises `PORT + 1`, for a proxy there.
pub const KAFKA_PROXIED: &str = "MSGBENCH_IT_KAFKA_PROXIED";

/// What `scripts/brokers.sh env` sets in `var`; when it is unset, `None` after saying on
/// stderr that the test is skipped, and why. Under `MSGBENCH_IT_REQUIRE=1` (set by
/// `scripts/test.sh`, so CI never skips in silence) an unset variable fails the test instead.
pub fn broker(var: &str) -> Option<String> {
    if let Ok(v) = std::env::var(var) {
        return Some(v);
    }
    let hint = "start the test brokers with `scripts/brokers.sh up` and \
                `eval \"$(scripts/brokers.sh env)\"`, or run everything with `scripts/test.sh`";
    if std::env::var_os("MSGBENCH_IT_REQUIRE").is_some() {
        panic!("{var} is not set (and MSGBENCH_IT_REQUIRE is): {hint}");
    }
    // Straight to the process's stderr: the harness would hide an `eprintln!` of a passing test.
    use std::io::Write;
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    let _ = writeln!(
        std::io::stderr(),
        "\n{test} skipped: {var} is not set: {hint}"
    );
    None
}

/// The value of a `scripts/brokers.sh env` variable, or the calling test returns at once,
/// skipped with a message ([`broker`]): `let url = need!(NATS);`.
/// In a helper that returns a value, `need!(VAR, else R)` returns `R` instead.
#[allow(unused_macros)]
macro_rules! need {
    ($var:expr) => {
        need!($var, else ())
    };
    ($var:expr, else $ret:expr) => {
        match $crate::util::broker($var) {
            Some(v) => v,
            None => return $ret,
        }
    };
}
#[allow(unused_imports)]
pub(crate) use need;

/// A variable `scripts/brokers.sh env` sets beside a broker's URL, for helpers that run after
/// the test's [`need!`] found the broker.
pub fn env_or_hint(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: start the test brokers with `scripts/brokers.sh up` and \
             `eval \"$(scripts/brokers.sh env)\"`, or run everything with `scripts/test.sh`"
        )
    })
}

/// A free TCP port on 127.0.0.1.
///
/// Taken below the kernel's ephemeral range when there is room: a port from that range may be
/// handed to some other test's outgoing connection between this check and the server's bind
/// (a test whose clients retry until the server binds then waits out its timeout).
pub fn free_port() -> u16 {
    let lo = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(0);
    if lo > 12_000 {
        let span = (lo - 11_000) as u64;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos() as u64)
            ^ ((std::process::id() as u64) << 16);
        for k in 0..span {
            let port = 10_000 + ((seed.wrapping_mul(2_654_435_761) + k) % span) as u16;
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether something accepts TCP connections on 127.0.0.1:`port` within `within` (polled every
/// 25 ms): for a server a test started, before it points clients at it.
pub fn listens_within(port: u16, within: std::time::Duration) -> bool {
    let t = std::time::Instant::now();
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        if t.elapsed() >= within {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
}

/// `msgbench serve ...` running as a child process, killed on drop.
pub struct Server {
    child: std::process::Child,
    /// Where it listens.
    pub url: String,
}

impl Server {
    /// msgbench's MQTT broker on a free port.
    pub fn mqtt() -> Server {
        Server::start("mqtt", "mqtt", &[])
    }

    /// msgbench's AMQP 0-9-1 sink on a free port (`extra`: e.g. TLS files).
    pub fn amqp_sink(scheme: &str, extra: &[&str]) -> Server {
        Server::start("amqp-sink", scheme, extra)
    }

    /// msgbench's HTTP server on a free port.
    pub fn http() -> Server {
        Server::start("http", "http", &[])
    }

    /// msgbench's HTTP server answering each request after `delay` (e.g. "20ms").
    pub fn http_slow(delay: &str) -> Server {
        Server::start("http", "http", &["--delay", delay])
    }

    /// msgbench's WebSocket broadcast server on a free port (`extra`: e.g. `--from URL`).
    pub fn ws_broadcast(extra: &[&str]) -> Server {
        Server::start("ws-broadcast", "ws", extra)
    }

    /// msgbench's WebSocket broadcast server serving `wss://` with the test CA's server
    /// certificate (the CA is `MSGBENCH_IT_MQTT_CA`).
    pub fn wss_broadcast() -> Server {
        Server::with_test_cert("ws-broadcast", "wss")
    }

    /// msgbench's MQTT broker over TLS with the test CA's server certificate.
    pub fn mqtts() -> Server {
        Server::with_test_cert("mqtt", "mqtts")
    }

    /// msgbench's HTTP server over TLS (HTTP/2 by ALPN) with the test CA's server certificate.
    pub fn https() -> Server {
        Server::with_test_cert("http", "https")
    }

    fn with_test_cert(server: &str, scheme: &str) -> Server {
        let (_, cert, key) = test_certs();
        Server::start(
            server,
            scheme,
            &[
                "--tls-cert",
                cert.to_str().unwrap(),
                "--tls-key",
                key.to_str().unwrap(),
            ],
        )
    }

    fn start(server: &str, scheme: &str, extra: &[&str]) -> Server {
        let port = free_port();
        let child = Command::new(bin())
            .args([
                "serve",
                server,
                "--quiet",
                "--listen",
                &format!("127.0.0.1:{port}"),
            ])
            .args(extra)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("starting msgbench serve");
        let mut s = Server {
            child,
            url: format!("{scheme}://127.0.0.1:{port}"),
        };
        if listens_within(port, std::time::Duration::from_secs(5)) {
            return s;
        }
        let _ = s.child.kill();
        let _ = s.child.wait();
        panic!("msgbench serve {server} did not listen on {port}");
    }
}

impl Server {
    /// Stops the server now (as a crash would, from the clients' side).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Every line of the results file `file` in `dir` satisfies the schema, and `msgbench report`
/// re-renders exactly `report` from it (reports are a pure function of the file).
pub fn assert_valid_and_pure(dir: &Path, file: &str, report: &serde_json::Value) {
    let text = std::fs::read_to_string(dir.join(file)).unwrap();
    let schema: serde_json::Value = serde_json::from_str(include_str!(
        "../../crates/report/schema/results.schema.json"
    ))
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    for (i, line) in text.lines().enumerate() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
        assert!(
            errors.is_empty(),
            "line {} violates the schema: {errors:?}\n{line}",
            i + 1
        );
    }
    let again = msgbench(dir, &["report", file, "--format", "json"]);
    assert!(again.status.success(), "{}", stderr(&again));
    let again: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(&again, report, "the report re-rendered from {file} differs");
}

/// Starts msgbench with `args` (plus `--format json --quiet`) in `dir` without waiting, for
/// tests that act on the world while it runs; [`finish_json`] collects its report.
pub fn spawn_run(dir: &Path, args: &[&str]) -> std::process::Child {
    Command::new(bin())
        .args(args)
        .args(["--format", "json", "--quiet"])
        .current_dir(dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting msgbench")
}

/// Waits for a [`spawn_run`] run, requires success, and returns its JSON report.
pub fn finish_json(run: std::process::Child) -> serde_json::Value {
    let o = run.wait_with_output().expect("waiting for msgbench");
    assert!(o.status.success(), "msgbench failed:\n{}", stderr(&o));
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("report is not JSON ({e}):\n{}", stdout(&o)))
}

/// How many events of `kind` (`disconnected`, `reconnected`...) the report lists.
pub fn count_events(report: &serde_json::Value, kind: &str) -> u64 {
    report["events"]
        .as_array()
        .map_or(0, |a| a.iter().filter(|e| e["kind"] == kind).count() as u64)
}

/// Starts msgbench like [`spawn_run`], with its open-file limit (soft and hard) lowered to
/// `nofile` first: connection tests go beyond a limit the test machine does not have.
pub fn spawn_run_with_nofile(dir: &Path, args: &[&str], nofile: u64) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .args(["--format", "json", "--quiet"])
        .current_dir(dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe; lowering a limit needs no privilege.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: nofile,
                rlim_max: nofile,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn().expect("starting msgbench")
}

/// Fan-out receivers beyond the open-file limit: 300 consumers of `topic` at `url` with a
/// limit of 200 descriptors are held in io_uring tables, and each counts every message.
pub fn assert_fanout_beyond_nofile(dir: &Path, url: &str, topic: &str) {
    let args = [
        "run",
        url,
        "--topic",
        topic,
        "-p",
        "1",
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
    let r = finish_json(spawn_run_with_nofile(dir, &args, 200));
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
}

/// Waits (up to 30 s) until the results file at `file` holds `needle`, e.g. the `"connected"`
/// event of a connection run once every connection is open.
pub fn wait_for_record(file: &Path, needle: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !std::fs::read_to_string(file).is_ok_and(|s| s.contains(needle)) {
        assert!(
            std::time::Instant::now() < deadline,
            "{} never held {needle}",
            file.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Counter `k` summed over the report's phases.
pub fn phase_sum(report: &serde_json::Value, k: &str) -> u64 {
    report["phases"].as_array().map_or(0, |a| {
        a.iter()
            .map(|p| p["counters"][k].as_u64().unwrap_or(0))
            .sum()
    })
}

/// Runs 2 producers and 1 consumer against `url`, a list of two servers (`first`, where the
/// consumer and producer 0 connect, then `second`, where producer 1 does, and nothing
/// subscribes), kills `second` a second in, and checks that producer 1 failed over to `first`:
/// a reconnection to `first` is reported, and what it published afterwards arrived.
pub fn assert_fails_over(dir: &Path, url: &str, topic: &str, first: &str, second: &mut Killed) {
    let file = format!("{}.jsonl", topic.replace(['/', '.'], "-"));
    let run = spawn_run(
        dir,
        &[
            "run",
            url,
            "--topic",
            topic,
            "-p",
            "2",
            "-c",
            "1",
            "--rate",
            "2000",
            "--duration",
            "4s",
            "--warmup",
            "0s",
            "-o",
            &file,
        ],
    );
    wait_for_record(&dir.join(&file), "\"connected\"");
    std::thread::sleep(std::time::Duration::from_secs(1));
    second.kill();
    let r = finish_json(run);
    let events = r["events"].to_string();
    assert!(
        events.contains("reconnected to") && events.contains(&format!("({first})")),
        "{events}"
    );
    // Producer 0's half always arrives; without the failover, producer 1's would not, since
    // it published to a server nobody subscribed on and then could not reconnect.
    let sent = phase_sum(&r, "sent");
    let received = phase_sum(&r, "received");
    assert!(sent >= 6000, "sent {sent}");
    assert!(
        received * 10 >= sent * 6,
        "received {received} of {sent}: producer 1 did not fail over"
    );
}

/// The brokers' test CA (`MSGBENCH_IT_MQTT_CA`) and the server certificate and key it signed
/// (for `localhost` and 127.0.0.1), for servers a test starts itself.
pub fn test_certs() -> (String, PathBuf, PathBuf) {
    let ca = env_or_hint("MSGBENCH_IT_MQTT_CA");
    let dir = Path::new(&ca).parent().unwrap().to_path_buf();
    (ca, dir.join("server.pem"), dir.join("server.key"))
}

/// A server process a test started, killed when the test ends, passed or failed (a panic must
/// not leave brokers running).
pub struct Killed(pub Child);

impl Killed {
    /// Kills it now (a broker dying mid-run).
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An nginx of the test's own (the binary scripts/brokers.sh installs), in `dir`, with one
/// server block listening on a free port: `server` is the block's body after its `listen`
/// line. Returns it (killed when dropped) and its port. `None` without nginx. One process
/// (no master): killing it leaves no worker behind holding the port.
pub fn own_nginx(dir: &Path, listen_extra: &str, server: &str) -> Option<(Killed, u16)> {
    let bin = [
        "/usr/sbin/nginx",
        "/usr/local/sbin/nginx",
        "/usr/local/nginx/sbin/nginx",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists())?;
    let port = free_port();
    let d = dir.display();
    let conf = format!(
        "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\nevents {{}}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  \
         proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fcgi;\n  \
         uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  server {{\n    \
         listen 127.0.0.1:{port} {listen_extra};\n{server}\n  }}\n}}\n"
    );
    let file = dir.join("nginx.conf");
    std::fs::write(&file, conf).unwrap();
    let child = Command::new(bin)
        .args(["-p", &d.to_string(), "-e", &format!("{d}/error.log"), "-c"])
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    listens_within(port, std::time::Duration::from_secs(5));
    Some((Killed(child), port))
}
