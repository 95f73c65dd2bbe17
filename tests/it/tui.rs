//! `msgbench run --tui` end to end: without a terminal it falls back to the plain table with a
//! notice; on a pseudo-terminal (util-linux `script`) it draws the view, `q` stops the run
//! cleanly (drain, `end` record, report, exit code 130) and the terminal is given back before
//! the report prints.

use crate::util;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;
use util::{TempDir, msgbench, stderr, stdout};

#[test]
fn tui_without_a_terminal_falls_back_to_the_plain_table() {
    let dir = TempDir::new("tui-plain");
    let o = msgbench(
        &dir.0,
        &[
            "run",
            "mem://tui",
            "--tui",
            "--rate",
            "2000",
            "--warmup",
            "0s",
            "--duration",
            "1s",
            "--no-output",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("--tui needs a terminal on stderr; showing the plain table"),
        "{err}"
    );
    assert!(err.contains("sent/s"), "the plain table shows: {err}");
    assert!(
        !err.contains("\x1b[?1049h"),
        "no alternate screen on a pipe"
    );
    assert!(stdout(&o).contains("msgbench report"));
}

#[test]
fn tui_and_quiet_conflict() {
    let dir = TempDir::new("tui-quiet");
    let o = msgbench(&dir.0, &["run", "mem://x", "--tui", "--quiet"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--quiet"));
}

fn have_script() -> bool {
    Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn q_in_the_tui_stops_the_run_cleanly() {
    if !have_script() {
        eprintln!("skipped: util-linux `script` is not installed (apt-get install bsdutils)");
        return;
    }
    let dir = TempDir::new("tui-q");
    let results = dir.path("run.jsonl");
    let cmd = format!(
        "stty cols 120 rows 36; TERM=xterm-256color '{}' run mem://tui --rate 5000 --warmup 0s \
         --duration 60s --tui -o '{}'; echo \"exit=$?\"",
        util::bin(),
        results.display()
    );
    let mut child = Command::new("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .current_dir(&dir.0)
        .env("MSGBENCH_RESULTS_DB", dir.path("runs.db"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running script");
    let mut stdin = child.stdin.take().unwrap();
    // Wait for the first interval, then press q (the run would otherwise last a minute).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        let text = std::fs::read_to_string(&results).unwrap_or_default();
        if text.contains("\"type\":\"interval\"") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    stdin.write_all(b"q").unwrap();
    stdin.flush().unwrap();
    let started = std::time::Instant::now();
    let out = child.wait_with_output().unwrap();
    drop(stdin);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "q stopped the run well before its 60 s"
    );
    let screen = String::from_utf8_lossy(&out.stdout);
    let enter = screen
        .find("\x1b[?1049h")
        .expect("the TUI took the terminal");
    let leave = screen
        .rfind("\x1b[?1049l")
        .expect("the terminal was given back");
    let report = screen.find("msgbench report").expect("the report printed");
    assert!(
        enter < leave && leave < report,
        "the report comes after the view closed"
    );
    assert!(
        screen[enter..leave].contains("Throughput msgs/s"),
        "the view drew"
    );
    assert!(
        !screen[enter..leave].contains("sent/s  "),
        "no plain table under the view"
    );
    assert!(
        screen.contains("INTERRUPTED"),
        "the report says the run was stopped"
    );
    assert!(
        screen.contains("exit=130"),
        "exit code of an interrupted run"
    );
    let text = std::fs::read_to_string(&results).unwrap();
    let end = text.lines().last().unwrap();
    assert!(
        end.contains("\"type\":\"end\""),
        "the end record was written"
    );
    assert!(end.contains("\"interrupted\":true"));
}

#[test]
fn plain_mode_on_a_terminal_shows_progress_below_the_table() {
    if !have_script() {
        eprintln!("skipped: util-linux `script` is not installed (apt-get install bsdutils)");
        return;
    }
    let dir = TempDir::new("progress");
    // A message count always gets a progress line (a duration needs 10 s or more).
    let cmd = format!(
        "stty cols 120 rows 36; '{}' run mem://progress --rate 10000 --warmup 0s -n 30000 \
         --no-output",
        util::bin()
    );
    let out = Command::new("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .current_dir(&dir.0)
        .env("MSGBENCH_RESULTS_DB", dir.path("runs.db"))
        .stdin(Stdio::null())
        .output()
        .expect("running script");
    assert!(out.status.success());
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(screen.contains("sent/s"), "the table: {screen}");
    assert!(
        screen.contains(" / 30,000 msgs · ~"),
        "messages done of the goal and the time left: {screen}"
    );
    assert!(screen.contains("measure ["), "the bar: {screen}");
    assert!(screen.contains("msgbench report"));
    let piped = msgbench(
        &dir.0,
        &[
            "run",
            "mem://progress",
            "--rate",
            "10000",
            "--warmup",
            "0s",
            "-n",
            "20000",
            "--no-output",
        ],
    );
    assert!(
        !stderr(&piped).contains("msgs · "),
        "no progress line when stderr is not a terminal"
    );
}
