//! The web dashboard and the run history through the real binary: the live event stream of a
//! `mem://` run, the run recorded in the history, `msgbench dashboard` serving and importing,
//! its token, and the history never failing a run.

use crate::util;

use msgbench_dashboard::Store;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use util::*;

/// Starts msgbench and reads its stderr until it prints the dashboard URL.
fn start(dir: &std::path::Path, args: &[&str]) -> (Killed, String) {
    let mut child = Command::new(bin())
        .args(args)
        .current_dir(dir)
        .env("MSGBENCH_RESULTS_DB", dir.join("runs.db"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting msgbench");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    let url = loop {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap() == 0 {
            panic!("msgbench ended without a dashboard URL:\n{seen}");
        }
        seen.push_str(&line);
        if let Some(u) = line.trim().strip_prefix("msgbench: dashboard on ") {
            break u.to_string();
        }
    };
    // Keep draining stderr so the child never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    (Killed(child), url)
}

fn host_port(url: &str) -> String {
    url.trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string()
}

fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap();
    let body = raw.split_once("\r\n\r\n").map_or("", |b| b.1).to_string();
    (status, body)
}

/// Reads server-sent events from `path` until `stop` returns true for one; returns them all.
fn read_events(
    addr: &str,
    path: &str,
    mut stop: impl FnMut(&str, &Value) -> bool,
) -> Vec<(String, Value)> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut r = BufReader::new(s);
    let mut out = Vec::new();
    let mut event = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "events so far: {out:?}");
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return out;
        }
        let line = line.trim_end();
        if let Some(e) = line.strip_prefix("event:") {
            event = e.trim().to_string();
        } else if let Some(d) = line.strip_prefix("data:") {
            let v: Value = serde_json::from_str(d.trim()).expect("event data is JSON");
            let done = stop(&event, &v);
            out.push((event.clone(), v));
            if done {
                return out;
            }
        }
    }
}

#[test]
fn a_running_benchmark_streams_its_intervals_and_lands_in_the_history() {
    let dir = TempDir::new("dash-live");
    let out = dir.path("live.jsonl");
    let (mut run, url) = start(
        &dir.0,
        &[
            "run",
            "mem://",
            "--rate",
            "2000",
            "--duration",
            "4s",
            "--warmup",
            "0s",
            "--quiet",
            "--name",
            "dash-live",
            "--tag",
            "nightly",
            "--tag",
            "ci",
            "-o",
            out.to_str().unwrap(),
            "--dashboard",
            "127.0.0.1:0",
        ],
    );
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with('/'),
        "{url}"
    );
    let addr = host_port(&url);
    let events = read_events(&addr, "/api/live/events", |e, _| e == "end");
    assert_eq!(events[0].0, "hello");
    // A page that connects before the run's `begin` reached the server gets a second `hello`
    // (with the charts) when it does: everything before the last one is superseded.
    let last_hello = events.iter().rposition(|(e, _)| e == "hello").unwrap();
    let (hello, events) = (&events[last_hello], &events[last_hello..]);
    let columns: Vec<String> = hello.1["series"]["schema"]["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["key"].as_str().unwrap().to_string())
        .collect();
    let sent = columns.iter().position(|c| c == "sent_per_s").unwrap();
    let p50 = columns.iter().position(|c| c == "e2e.p50").unwrap();
    // Points from the history in `hello` and from live `point` events together cover the run.
    let mut rows: Vec<Value> = hello.1["series"]["points"].as_array().unwrap().clone();
    rows.extend(
        events
            .iter()
            .filter(|(e, _)| e == "point")
            .map(|(_, p)| p["row"].clone()),
    );
    assert!(rows.len() >= 4, "{} points: {events:?}", rows.len());
    let busy: Vec<f64> = rows.iter().filter_map(|r| r[sent].as_f64()).collect();
    assert!(
        busy.iter().any(|r| (1500.0..2500.0).contains(r)),
        "sent rates {busy:?}"
    );
    assert!(
        rows.iter()
            .any(|r| r[p50].as_f64().is_some_and(|v| v > 0.0))
    );
    let end = &events.last().unwrap().1;
    assert_eq!(end["interrupted"], false);
    assert!(end["integrity"]["delivered"].as_u64().unwrap() >= 7000);
    let status = run.0.wait().unwrap();
    assert!(status.success());

    // The run is in the history (here MSGBENCH_RESULTS_DB) with the results file's path.
    let store = Store::open(&dir.path("runs.db")).unwrap();
    let runs = store.search("name:dash-live", 10).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(
        runs[0].results_path,
        out.canonicalize().unwrap().to_str().unwrap()
    );
    assert!((1900.0..2100.0).contains(&runs[0].sent_per_s), "{runs:?}");
    assert!(runs[0].complete && !runs[0].interrupted);
    assert_eq!(runs[0].target, "mem://");
    // Tags from --tag are searchable.
    assert_eq!(runs[0].tags, ["nightly", "ci"]);
    assert_eq!(store.search("tag:nightly", 10).unwrap().len(), 1);
    assert!(store.search("tag:weekly", 10).unwrap().is_empty());
}

#[test]
fn the_history_is_served_imported_and_guarded_by_its_token() {
    let dir = TempDir::new("dash-history");
    let o = msgbench(
        &dir.0,
        &[
            "run",
            "mem://",
            "-n",
            "2000",
            "--quiet",
            "--name",
            "imported",
            "-o",
            "a.jsonl",
            "--no-history",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        !dir.path("runs.db").exists(),
        "--no-history wrote a history"
    );
    let o = msgbench(
        &dir.0,
        &["dashboard", "--import", "a.jsonl", "missing.jsonl"],
    );
    assert_eq!(o.status.code(), Some(1), "a missing file fails the import");
    let err = stderr(&o);
    assert!(err.contains("imported a.jsonl as run 1"), "{err}");
    assert!(err.contains("cannot import missing.jsonl"), "{err}");

    let (_server, url) = start(
        &dir.0,
        &[
            "dashboard",
            "--listen",
            "127.0.0.1:0",
            "--token",
            "tok-12345678",
        ],
    );
    // The printed URL never holds the token (it ends up in terminals and CI logs).
    assert!(url.ends_with('/') && !url.contains("tok-12345678"), "{url}");
    let addr = host_port(&url);
    assert_eq!(get(&addr, "/api/runs").0, 401);
    assert_eq!(get(&addr, "/").0, 401);
    assert_eq!(get(&addr, "/api/runs?token=tok-12345679").0, 401);
    assert_eq!(get(&addr, "/api/runs?token=tok-1234567").0, 401);
    let (status, body) = get(&addr, "/api/runs?token=tok-12345678");
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["runs"][0]["name"], "imported");
    let (status, page) = get(&addr, "/?token=tok-12345678");
    assert_eq!(status, 200);
    assert!(page.contains("msgbench runs"));
}

#[test]
fn a_history_that_cannot_be_written_does_not_fail_the_run() {
    let dir = TempDir::new("dash-nohist");
    std::fs::write(dir.path("file"), "a file, not a directory").unwrap();
    let bad = dir.path("file/runs.db");
    let o = msgbench(
        &dir.0,
        &[
            "run",
            "mem://",
            "-n",
            "1000",
            "--quiet",
            "-o",
            "r.jsonl",
            "--results-db",
            bad.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("warning: the run is not in the history"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_target_after_dashboard_is_a_clear_error() {
    let dir = TempDir::new("dash-args");
    let o = msgbench(&dir.0, &["run", "--dashboard", "mem://", "-n", "10"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("put the target before --dashboard"),
        "{}",
        stderr(&o)
    );
    assert!(
        std::fs::read_dir(&dir.0).unwrap().next().is_none(),
        "left files behind"
    );
}

/// Beyond loopback without a token the dashboard is refused, before anything listens or any
/// file is written; the error says what to give.
#[test]
fn a_dashboard_beyond_loopback_needs_a_token() {
    let dir = TempDir::new("dash-needs-token");
    let o = msgbench(
        &dir.0,
        &["dashboard", "--listen", "0.0.0.0:0", "--results-db", "h.db"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("--token TOKEN"), "{}", stderr(&o));
    let o = msgbench(
        &dir.0,
        &[
            "run",
            "mem://",
            "-n",
            "10",
            "-o",
            "r.jsonl",
            "--dashboard=0.0.0.0:0",
        ],
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--dashboard-token"), "{}", stderr(&o));
    assert!(
        !dir.path("r.jsonl").exists(),
        "a refused dashboard left a results file"
    );
}

/// A token given in the environment guards the dashboard and appears nowhere in its output.
#[test]
fn the_token_is_never_printed() {
    let dir = TempDir::new("dash-token-quiet");
    let mut child = Command::new(bin())
        .args(["dashboard", "--listen", "127.0.0.1:0", "--results-db"])
        .arg(dir.path("h.db"))
        .env("MSGBENCH_DASHBOARD_TOKEN", "env-token-S3cr3t")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("every request needs the token") {
        let mut line = String::new();
        assert!(err.read_line(&mut line).unwrap() > 0, "{seen}");
        seen.push_str(&line);
    }
    let url = seen
        .lines()
        .find_map(|l| l.strip_prefix("msgbench: dashboard on "))
        .unwrap()
        .to_string();
    let addr = host_port(&url);
    assert_eq!(get(&addr, "/api/runs").0, 401);
    assert_eq!(get(&addr, "/api/runs?token=env-token-S3cr3t").0, 200);
    child.kill().unwrap();
    let _ = child.wait();
    let mut rest = String::new();
    let _ = err.read_to_string(&mut rest);
    let mut out = String::new();
    let _ = child.stdout.take().unwrap().read_to_string(&mut out);
    let all = format!("{seen}{rest}{out}");
    assert!(!all.contains("env-token-S3cr3t"), "{all}");
    // --help shows where the token comes from, never its value.
    let help = Command::new(bin())
        .args(["dashboard", "--help"])
        .env("MSGBENCH_DASHBOARD_TOKEN", "env-token-S3cr3t")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("MSGBENCH_DASHBOARD_TOKEN") && !help.contains("env-token-S3cr3t"));
}
