//! No credential leaves msgbench (issue 22, part 1): runs with one distinctive secret in every
//! place a run can carry one (URL user info of the target, of `--consume-from`, of a broker list
//! and of a stage's own broker; a credential query parameter; Authorization, Cookie, X-Api-Key
//! and a header matched by `MSGBENCH_REDACT_HEADER`; the MQTT password; an error that quotes a
//! URL), then every artifact is searched for it: results files, `--summary` and `--junit`,
//! every report format and the comparison, the live dashboard and the Prometheus endpoint while
//! the run lasts, the history dashboard's pages and API, the history database's files, and
//! everything printed. Zero occurrences anywhere. Spy proxies in front of the servers prove the
//! secrets were really sent, so the test cannot pass by not using them.

use crate::util;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use util::*;

const SECRET: &str = "S3cr3t-XYZZY-42";

/// A TCP proxy to `upstream` that keeps (the first 8 MiB of) what clients sent.
struct Spy {
    port: u16,
    seen: Arc<Mutex<Vec<u8>>>,
}

impl Spy {
    fn start(upstream: &str) -> Spy {
        let upstream = upstream.split("://").nth(1).unwrap().to_string();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = seen.clone();
        std::thread::spawn(move || {
            for client in l.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let (mut from_client, mut to_server) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (mut from_server, mut to_client) = (server, client);
                let kept = kept.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16384];
                    while let Ok(n @ 1..) = from_client.read(&mut buf) {
                        {
                            let mut k = kept.lock().unwrap();
                            if k.len() < 8 << 20 {
                                k.extend_from_slice(&buf[..n]);
                            }
                        }
                        if to_server.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = to_server.shutdown(Shutdown::Both);
                });
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from_server, &mut to_client);
                    let _ = to_client.shutdown(Shutdown::Both);
                });
            }
        });
        Spy { port, seen }
    }

    fn saw(&self, needle: &str) -> bool {
        count(&self.seen.lock().unwrap(), needle) > 0
    }
}

fn count(hay: &[u8], needle: &str) -> usize {
    hay.windows(needle.len())
        .filter(|w| *w == needle.as_bytes())
        .count()
}

/// One HTTP/1.1 GET; the whole response (status line, headers, body).
fn get(addr: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let raw = String::from_utf8_lossy(&raw).into_owned();
    assert!(raw.starts_with("HTTP/1.1 200"), "GET {path}: {raw:.300}");
    raw
}

/// The live dashboard's event stream until its `end` event (or until the run closes it).
fn live_events(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET /api/live/events HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut r = BufReader::new(s);
    let mut all = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        all.push_str(&line);
        if line.trim() == "event: end" || line.trim() == "event:end" {
            let mut data = String::new();
            let _ = r.read_line(&mut data);
            all.push_str(&data);
            break;
        }
    }
    all
}

/// Runs msgbench to its end (whatever its exit code): stdout and stderr together.
fn output(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let o = Command::new(bin())
        .args(args)
        .current_dir(dir)
        .env("MSGBENCH_RESULTS_DB", dir.join("runs.db"))
        .envs(env.iter().copied())
        .output()
        .unwrap();
    format!("{}{}", stdout(&o), stderr(&o))
}

/// Starts the run of the HTTP producers and MQTT consumers with its live dashboard and
/// Prometheus endpoint; returns everything those served while it ran, and what it printed.
fn http_run(dir: &std::path::Path, http: &Spy, mqtt: &Spy) -> (String, String) {
    let target = format!(
        "http://127.0.0.1:{}/ingest?access_token={SECRET}",
        http.port
    );
    let consume_from = format!("mqtt://carol:{SECRET}@127.0.0.1:{}", mqtt.port);
    let headers = [
        format!("Authorization: Bearer {SECRET}"),
        format!("Cookie: session={SECRET}; theme=dark"),
        format!("X-Api-Key: {SECRET}"),
        format!("X-Tenant-Sig: {SECRET}"),
    ];
    let mut args: Vec<String> = [
        "run",
        &target,
        "--method",
        "GET",
        "--consume-from",
        &consume_from,
        "--rate",
        "200",
        "--duration",
        "3s",
        "--warmup",
        "0s",
        "--drain",
        "1s",
        "--name",
        "secrets-http",
        "-o",
        "a.jsonl",
        "--summary",
        "a-summary.json",
        "--junit",
        "a-junit.xml",
        "--threshold",
        "e2e.p99 < 1s",
        "--dashboard",
        "127.0.0.1:0",
        "--metrics",
        "127.0.0.1:0",
    ]
    .map(String::from)
    .to_vec();
    for h in &headers {
        args.extend(["--header".to_string(), h.clone()]);
    }
    let mut child = Command::new(bin())
        .args(&args)
        .current_dir(dir)
        .env("MSGBENCH_RESULTS_DB", dir.join("runs.db"))
        .env("MSGBENCH_REDACT_HEADER", "x-tenant-*")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut printed = String::new();
    let (mut dash, mut metrics) = (None, None);
    while dash.is_none() || metrics.is_none() {
        let mut line = String::new();
        assert!(err.read_line(&mut line).unwrap() > 0, "{printed}");
        printed.push_str(&line);
        let addr = |u: &str| u.trim().split('/').nth(2).unwrap().to_string();
        if let Some(u) = line.strip_prefix("msgbench: dashboard on ") {
            dash = Some(addr(u));
        }
        if let Some(u) = line.strip_prefix("msgbench: Prometheus metrics at ") {
            metrics = Some(addr(u));
        }
    }
    let (dash, metrics) = (dash.unwrap(), metrics.unwrap());
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut served = get(&dash, "/");
    std::thread::sleep(Duration::from_millis(1500));
    served.push_str(&get(&dash, "/api/live/state"));
    served.push_str(&get(&metrics, "/metrics"));
    let events = live_events(&dash);
    assert!(events.contains("secrets-http"), "{events:.2000}");
    served.push_str(&events);
    let _ = child.wait();
    let mut out = String::new();
    let _ = child.stdout.take().unwrap().read_to_string(&mut out);
    printed.push_str(&rest.join().unwrap());
    printed.push_str(&out);
    (served, printed)
}

#[test]
fn no_secret_reaches_any_artifact() {
    let dir = TempDir::new("secrets");
    let d = &dir.0;
    let broker = Server::mqtt();
    let http_server = Server::http();
    let http = Spy::start(&http_server.url);
    let mqtt = Spy::start(&broker.url);
    let mut printed = String::new();
    let mut served = String::new();

    // 1. HTTP producers with every kind of credential header, MQTT consumers (--consume-from).
    let (live, out) = http_run(d, &http, &mqtt);
    served.push_str(&live);
    printed.push_str(&out);

    // 2. MQTT through a broker list, with a stage observed on a second URL of its own.
    let port = mqtt.port;
    std::fs::write(
        dir.path("b.toml"),
        format!(
            r#"name = "secrets-stages"
target = "mqtt://alice:{SECRET}@127.0.0.1:{port},127.0.0.1:{port}"
[topics]
pattern = "secrets.b"
[producers]
rate = 500
[phases]
warmup = "0s"
messages = 500
drain = "3s"
[tracking]
key = "{{producer}}.{{seq}}"
[[stages]]
name = "Sent"
on = "ack"
[[stages]]
name = "Far"
queue = "secrets.b"
target = "mqtt://bob:{SECRET}@127.0.0.1:{port}"
window = true
"#
        ),
    )
    .unwrap();
    printed.push_str(&output(d, &["run", "b.toml", "-o", "b.jsonl"], &[]));

    // 3. A run that fails: the error quotes the URL.
    let dead = format!("mqtt://dave:{SECRET}@127.0.0.1:{}", free_port());
    let failed = output(d, &["run", &dead, "-n", "10", "-o", "c.jsonl"], &[]);
    assert!(failed.contains("dave:***@"), "{failed}");
    printed.push_str(&failed);

    // The secrets were used: the servers saw them, and the runs did their work.
    for needle in [
        SECRET,
        "Bearer",
        "x-tenant-sig",
        "x-api-key",
        "access_token",
    ] {
        assert!(http.saw(needle), "the HTTP server never saw {needle}");
    }
    // (`bob`, the stage's own URL, is only in the plan: the MQTT driver observes stages on the
    // run's target; only AMQP 1.0 connects to a stage's own broker.)
    for user in ["alice", "carol"] {
        assert!(mqtt.saw(user), "no MQTT connection as {user}: {printed}");
    }
    assert!(mqtt.saw(SECRET), "the MQTT password was never sent");
    let a = std::fs::read_to_string(dir.path("a.jsonl")).unwrap();
    assert!(a.contains(r#"["X-Tenant-Sig","***"]"#), "{a:.3000}");
    assert!(a.contains("carol:***@") && a.contains("access_token=***"));
    let b: serde_json::Value = serde_json::from_str(&stdout(&msgbench(
        d,
        &["report", "b.jsonl", "--format", "json"],
    )))
    .unwrap();
    let far = b["stages"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == "Far"))
        .unwrap_or_else(|| panic!("no stage Far: {b}"));
    assert!(u(&far["reached"]) > 0, "{far}");
    assert!(b.to_string().contains("bob:***@"), "{b}");
    let c = std::fs::read_to_string(dir.path("c.jsonl")).unwrap();
    assert!(c.contains(r#""kind":"error""#), "{c}");

    // Every report format of every file, and the comparison.
    let mut reports = String::new();
    for file in ["a.jsonl", "b.jsonl", "c.jsonl"] {
        for format in ["text", "json", "csv", "html"] {
            reports.push_str(&output(d, &["report", file, "--format", format], &[]));
        }
    }
    for format in ["text", "html"] {
        reports.push_str(&output(
            d,
            &["compare", "a.jsonl", "b.jsonl", "--format", format],
            &[],
        ));
    }
    assert!(reports.contains("<html") && reports.contains("secrets-stages"));

    // The history dashboard: runs list, run pages, comparison, their API.
    let mut dash = Command::new(bin())
        .args(["dashboard", "--listen", "127.0.0.1:0"])
        .current_dir(d)
        .env("MSGBENCH_RESULTS_DB", dir.path("runs.db"))
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(dash.stderr.take().unwrap());
    let addr = loop {
        let mut line = String::new();
        assert!(err.read_line(&mut line).unwrap() > 0);
        printed.push_str(&line);
        if let Some(u) = line.strip_prefix("msgbench: dashboard on ") {
            break u.trim().split('/').nth(2).unwrap().to_string();
        }
    };
    let list = get(&addr, "/api/runs");
    assert!(
        list.contains("secrets-http") && list.contains("secrets-stages"),
        "{list}"
    );
    let mut history = list;
    for path in [
        "/",
        "/run/1",
        "/run/2",
        "/api/runs/1",
        "/api/runs/2",
        "/compare?a=1&b=2",
        "/api/compare?a=1&b=2",
    ] {
        history.push_str(&get(&addr, path));
    }
    assert!(history.contains("x-tenant-*") || history.contains("X-Tenant-Sig"));
    let _ = dash.kill();
    let _ = dash.wait();

    // Count everywhere.
    let mut counts = Vec::new();
    for f in std::fs::read_dir(d).unwrap() {
        let f = f.unwrap().path();
        if f.is_file() {
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            counts.push((name, count(&std::fs::read(&f).unwrap(), SECRET)));
        }
    }
    let names: Vec<&str> = counts.iter().map(|(n, _)| n.as_str()).collect();
    for must in [
        "a.jsonl",
        "b.jsonl",
        "c.jsonl",
        "a-summary.json",
        "a-junit.xml",
        "runs.db",
    ] {
        assert!(names.contains(&must), "{must} was not written: {names:?}");
    }
    counts.retain(|(n, _)| n != "b.toml"); // the input, where the secret belongs
    counts.push(("reports".into(), count(reports.as_bytes(), SECRET)));
    counts.push((
        "live dashboard and /metrics".into(),
        count(served.as_bytes(), SECRET),
    ));
    counts.push((
        "history dashboard".into(),
        count(history.as_bytes(), SECRET),
    ));
    counts.push(("printed".into(), count(printed.as_bytes(), SECRET)));
    eprintln!("occurrences of the secret: {counts:?}");
    assert!(counts.iter().all(|(_, n)| *n == 0), "{counts:?}");
}
