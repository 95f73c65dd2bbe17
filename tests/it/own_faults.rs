//! msgbench's own faults: killed with SIGKILL, a results file that cannot be written, and the
//! stop signals (SIGTERM, SIGHUP, a second Ctrl-C). Each leaves a report and a results file
//! that `msgbench report` renders, and exits with the documented code.

use crate::util;

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use util::*;

/// Starts `msgbench ARGS` in `dir` with piped output; `limit_file`: an RLIMIT_FSIZE in bytes.
fn start(dir: &std::path::Path, args: &[&str], limit_file: Option<u64>) -> Child {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(bytes) = limit_file {
        // SAFETY: only async-signal-safe calls (setrlimit) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: bytes,
                    rlim_max: bytes,
                };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    cmd.spawn().unwrap()
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as i32, sig) };
}

/// Waits for `child` at most `limit`, killing it (and failing) if it is still running then.
fn wait(mut child: Child, limit: Duration) -> std::process::Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("msgbench still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// The last record of a results file.
fn last_record(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(text.lines().last().unwrap()).unwrap()
}

/// `kill -9` mid-run: no `end` record, perhaps a torn line, yet `report` renders every interval
/// written (flushed as each closes), says the file is incomplete, and estimates the integrity
/// from what arrived.
#[test]
fn killed_with_sigkill_the_file_is_reported_up_to_the_last_interval() {
    let d = TempDir::new("own-kill9");
    let child = start(
        &d.0,
        &[
            "run",
            "mem://kill9",
            "--rate",
            "5000",
            "--duration",
            "60s",
            "--warmup",
            "0s",
            "-o",
            "k.jsonl",
            "--quiet",
        ],
        None,
    );
    let file = d.path("k.jsonl");
    // Three interval records: three seconds of measurement on file.
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(&file)
        .map(|s| s.matches("\"type\":\"interval\"").count())
        .unwrap_or(0)
        < 3
    {
        assert!(Instant::now() < deadline, "no intervals written");
        std::thread::sleep(Duration::from_millis(50));
    }
    signal(&child, libc::SIGKILL);
    let o = wait(child, Duration::from_secs(10));
    assert_eq!(o.status.code(), None, "killed by a signal");
    let rendered = msgbench(&d.0, &["report", "k.jsonl"]);
    assert!(rendered.status.success(), "{}", stderr(&rendered));
    let text = stdout(&rendered);
    assert!(text.contains("INCOMPLETE"), "{text}");
    let json = msgbench(&d.0, &["report", "k.jsonl", "--format", "json"]);
    assert!(json.status.success(), "{}", stderr(&json));
    let r: serde_json::Value = serde_json::from_str(&stdout(&json)).unwrap();
    let intervals = r["intervals"].as_array().expect("intervals");
    assert!(intervals.len() >= 3, "{}", intervals.len());
    let sent = phase_sum(&r, "sent");
    assert!(sent >= 3 * 4000, "three seconds at 5000/s: {sent}");
    let i = &r["integrity"];
    assert_eq!(u(&i["expected"]), u(&i["delivered"]) + u(&i["lost"]), "{i}");
    assert!(u(&i["delivered"]) >= 3 * 4000, "{i}");
}

/// A results file that cannot be written (a file-size limit, as a full disk): a clear error,
/// the run stopped at once, the whole report on stdout, exit code 1, never a panic; the file
/// holds whole records up to the failure and `report` renders them.
#[test]
fn a_results_file_that_cannot_be_written_stops_the_run_cleanly() {
    let d = TempDir::new("own-fsize");
    let child = start(
        &d.0,
        &[
            "run",
            "mem://fsize",
            "--rate",
            "5000",
            "--duration",
            "60s",
            "--warmup",
            "0s",
            "-o",
            "f.jsonl",
            "--quiet",
        ],
        Some(24 * 1024),
    );
    let started = Instant::now();
    let o = wait(child, Duration::from_secs(45));
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    assert!(
        e.contains("cannot write the results file f.jsonl") && e.contains("File too large"),
        "{e}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "the run stopped when the file failed, not at its planned end"
    );
    let out = stdout(&o);
    assert!(out.contains("INTERRUPTED"), "the report is printed: {out}");
    assert!(out.contains("received"), "{out}");
    let len = std::fs::metadata(d.path("f.jsonl")).unwrap().len();
    assert!(len <= 24 * 1024, "{len}");
    let rendered = msgbench(&d.0, &["report", "f.jsonl"]);
    assert!(rendered.status.success(), "{}", stderr(&rendered));
    assert!(
        stdout(&rendered).contains("INCOMPLETE"),
        "{}",
        stdout(&rendered)
    );
}

/// A search whose results file fills up stops at the step that failed, as a run does, instead
/// of loading the system step after step with nothing kept.
#[test]
fn a_search_whose_results_file_cannot_be_written_stops() {
    let d = TempDir::new("own-fsize-search");
    let child = start(
        &d.0,
        &[
            "search",
            "mem://fsize",
            "--slo",
            "e2e.p99 < 1s",
            "--start-rate",
            "2000",
            "--duration",
            "20s",
            "--warmup",
            "0s",
            "-o",
            "s.jsonl",
            "--quiet",
        ],
        Some(24 * 1024),
    );
    let started = Instant::now();
    let o = wait(child, Duration::from_secs(60));
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    assert!(
        e.contains("cannot write the results file s.jsonl") && e.contains("search was stopped"),
        "{e}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(18),
        "the search stopped in its first step, not after it: {:?}",
        started.elapsed()
    );
    assert!(std::fs::metadata(d.path("s.jsonl")).unwrap().len() <= 24 * 1024);
}

/// The results file cannot even be created: an error naming it, exit code 1, no run.
#[test]
fn a_results_file_that_cannot_be_created_is_a_clear_error() {
    let d = TempDir::new("own-create");
    let o = msgbench(
        &d.0,
        &["run", "mem://c", "-n", "10", "-o", "no/such/dir/r.jsonl"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("cannot create results file no/such/dir/r.jsonl"),
        "{}",
        stderr(&o)
    );
}

/// SIGTERM and SIGHUP end a run as Ctrl-C does: the drain, the report, a complete results file
/// marked interrupted, exit code 130.
#[test]
fn sigterm_and_sighup_stop_like_ctrl_c() {
    for (sig, name) in [(libc::SIGTERM, "term"), (libc::SIGHUP, "hup")] {
        let d = TempDir::new(&format!("own-{name}"));
        let child = start(
            &d.0,
            &[
                "run",
                &format!("mem://{name}"),
                "--rate",
                "5000",
                "--duration",
                "60s",
                "-o",
                "s.jsonl",
                "--quiet",
            ],
            None,
        );
        wait_for_record(&d.path("s.jsonl"), "\"type\":\"interval\"");
        signal(&child, sig);
        let o = wait(child, Duration::from_secs(20));
        assert_eq!(o.status.code(), Some(130), "{name}: {}", stderr(&o));
        assert!(stdout(&o).contains("INTERRUPTED"), "{name}: {}", stdout(&o));
        let last = last_record(&d.path("s.jsonl"));
        assert_eq!(last["type"], "end", "{name}");
        assert_eq!(last["interrupted"], true, "{name}");
        assert_eq!(last["integrity"]["lost"], 0, "{name}: {last}");
    }
}

/// A second Ctrl-C cuts the drain short: messages still in the broker (here held 3 s by
/// `mem://?delay=`, longer than an interrupted run's drain of at most 2 s) are not waited for,
/// the run ends at once, and the results file is complete with every message sent accounted as
/// delivered or lost, including the sends of a producer stopped by force inside a send.
#[test]
fn a_second_ctrl_c_cuts_the_drain_short_and_still_reports() {
    let d = TempDir::new("own-twice");
    let child = start(
        &d.0,
        &[
            "run",
            "mem://twice?delay=3s",
            "--rate",
            "1000",
            "--duration",
            "60s",
            "--warmup",
            "0s",
            "--drain",
            "60s",
            "-o",
            "t.jsonl",
            "--quiet",
        ],
        None,
    );
    wait_for_record(&d.path("t.jsonl"), "\"type\":\"interval\"");
    signal(&child, libc::SIGINT);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        std::fs::read_to_string(d.path("t.jsonl")).is_ok_and(|s| !s.contains("\"type\":\"end\"")),
        "the first Ctrl-C drains: messages are 3 s away"
    );
    let second = Instant::now();
    signal(&child, libc::SIGINT);
    let o = wait(child, Duration::from_secs(30));
    assert!(
        second.elapsed() < Duration::from_millis(1500),
        "the second Ctrl-C ended the drain: {:?}",
        second.elapsed()
    );
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    let last = last_record(&d.path("t.jsonl"));
    assert_eq!(last["type"], "end");
    assert_eq!(last["interrupted"], true);
    assert_eq!(last["drain_complete"], false, "{last}");
    let sent: u64 = last["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| u(&p["counters"]["sent"]))
        .sum();
    let i = &last["integrity"];
    assert!(sent > 0, "{last}");
    assert_eq!(u(&i["expected"]), sent, "one receiver: {i}");
    assert_eq!(u(&i["expected"]), u(&i["delivered"]) + u(&i["lost"]), "{i}");
    assert!(u(&i["lost"]) > 0, "messages 3 s away were cut off: {i}");
}

/// A target that goes away for good mid-run (an MQTT broker, msgbench's own, stopped 1.5 s into
/// a 4 s run at 200 msgs/s): the run still ends on time with its report, and says that the
/// measure phase sent far fewer messages than its rate scheduled (found against amqtt: the
/// report had only the sent count and an error count to show for it).
#[test]
fn a_target_gone_for_good_is_said_in_the_report() {
    let d = TempDir::new("own-target-gone");
    let port = free_port();
    let mut broker = Killed(
        Command::new(bin())
            .args(["serve", "mqtt", "--quiet", "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(
        listens_within(port, Duration::from_secs(5)),
        "the broker did not listen"
    );
    let url = format!("mqtt://127.0.0.1:{port}");
    let child = start(
        &d.0,
        &[
            "run",
            &url,
            "--qos",
            "1",
            "--rate",
            "200",
            "--duration",
            "4s",
            "--warmup",
            "0s",
            "-o",
            "r.jsonl",
        ],
        None,
    );
    std::thread::sleep(Duration::from_millis(1500));
    let _ = broker.0.kill();
    let o = wait(child, Duration::from_secs(30));
    let report = String::from_utf8_lossy(&o.stdout);
    assert!(
        report.contains("messages its rate scheduled (200/s for"),
        "{report}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let end = last_record(&d.path("r.jsonl"));
    let warnings = end["warnings"].to_string();
    assert!(warnings.contains("messages its rate scheduled"), "{end}");
    // Why the sends failed is said as they begin failing, not only in the error count.
    let results = std::fs::read_to_string(d.path("r.jsonl")).unwrap();
    let failing: Vec<&str> = results
        .lines()
        .filter(|l| l.contains("retrying with backoff (failed sends"))
        .collect();
    assert_eq!(failing.len(), 1, "{results}");
    assert!(failing[0].contains("producer 0: "), "{}", failing[0]);
}
