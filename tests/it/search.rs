//! The capacity search (`msgbench search`) against systems whose capacity is known: the
//! in-process broker capped with `mem://?max_rate=`, and msgbench's HTTP server answering each
//! request after a delay through a fixed number of connections. Also: a search where nothing
//! holds, the results file with every step, the knee in the HTML report, `compare` of two
//! searches, and the options a search refuses.

use crate::util;

use serde_json::Value;
use std::path::Path;
use util::*;

fn code(o: &std::process::Output) -> i32 {
    o.status.code().expect("exited, not killed")
}

fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The `search` record of a results file.
fn answer(path: &Path) -> Value {
    records(path)
        .into_iter()
        .find(|r| r["type"] == "search")
        .expect("a search record")
}

#[test]
fn a_search_finds_the_capacity_of_a_capped_broker() {
    let d = TempDir::new("search-mem");
    let started = std::time::Instant::now();
    let o = msgbench(
        &d.0,
        &[
            "search",
            "mem://capped?max_rate=20k",
            "--slo",
            "e2e.p99 < 20ms",
            "--slo",
            "lost == 0",
            "--start-rate",
            "5000",
            "--warmup",
            "500ms",
            "--duration",
            "1s",
            "-o",
            "s.jsonl",
            "--format",
            "json",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // Every line satisfies the schema; the report is a pure function of the file.
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_valid_and_pure(&d.0, "s.jsonl", &report);
    assert!(!report["search"]["steps"].as_array().unwrap().is_empty());
    let a = answer(&d.path("s.jsonl"));
    let cap = a["capacity_per_s"].as_f64().unwrap();
    assert!(
        (19_000.0..=21_000.0).contains(&cap),
        "capacity {cap} for a broker capped at 20,000 msgs/s: {a}"
    );
    assert_eq!(a["limit"], "objectives", "{a}");
    assert_eq!(a["runs_at_capacity"], a["held_at_capacity"], "{a}");
    assert!(u(&a["runs_at_capacity"]) >= 3, "{a}");
    // Every step is in the file, with its verdicts; rates above the cap failed on latency.
    let recs = records(&d.path("s.jsonl"));
    let steps: Vec<&Value> = recs.iter().filter(|r| r["type"] == "search_step").collect();
    assert!(steps.len() >= 6, "{} steps", steps.len());
    let failed_above = steps
        .iter()
        .filter(|s| s["offered_per_s"].as_f64().unwrap() > 21_000.0)
        .all(|s| s["pass"] == false);
    assert!(failed_above, "{steps:?}");
    assert!(
        steps
            .iter()
            .all(|s| s["verdicts"].as_array().unwrap().len() == 2)
    );
    // Intervals of all the steps lie on one time axis, in order.
    let ends: Vec<f64> = recs
        .iter()
        .filter(|r| r["type"] == "interval")
        .map(|r| r["end_s"].as_f64().unwrap())
        .collect();
    assert!(ends.windows(2).all(|w| w[0] <= w[1] + 1e-9), "{ends:?}");
    assert_eq!(recs.last().unwrap()["type"], "end");
    assert!(stderr(&o).contains("msgbench: capacity "), "{}", stderr(&o));
    let text = stdout(&msgbench(&d.0, &["report", "s.jsonl"]));
    assert!(text.contains("capacity search"), "{text}");
    assert!(text.contains("held in 3 of 3 runs"), "{text}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );

    // The HTML report draws the knee and lists every step.
    let o = msgbench(
        &d.0,
        &["report", "s.jsonl", "-f", "html", "-o", "knee.html"],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let html = std::fs::read_to_string(d.path("knee.html")).unwrap();
    assert!(html.contains("id=\"knee\""));
    assert!(
        html.contains("\"knee\":[{\"offered\":"),
        "knee data missing"
    );
    assert!(html.contains("Capacity search"));
}

#[test]
fn a_search_finds_the_capacity_of_a_slow_http_server() {
    // 50 connections, one request in flight each, every answer 50 ms late: about 1,000
    // requests a second. The capacity is measured here first (closed loop, as fast as the
    // connections go), then searched for.
    let s = Server::http_slow("50ms");
    let d = TempDir::new("search-http");
    // Two worker threads: 50 connections at ~1,000 requests/s keep one thread of a debug build
    // busy enough to count as saturated, and the search would (rightly) stop there.
    let conns = ["-p", "50", "--max-in-flight", "1", "--workers", "2"];
    let mut closed = vec!["run", s.url.as_str(), "--warmup", "1s", "--duration", "3s"];
    closed.extend(conns);
    let r = run_json(&d.0, &closed);
    let ceiling = measure(&r)["sent_per_s"].as_f64().unwrap();
    assert!(
        (850.0..=1_000.0).contains(&ceiling),
        "50 connections to a server answering after 50 ms: {ceiling} requests/s"
    );
    let mut search = vec![
        "search",
        s.url.as_str(),
        "--slo",
        "e2e.p99 < 500ms",
        "--min-achieved",
        "98%",
        "--start-rate",
        "250",
        "--warmup",
        "500ms",
        "--duration",
        "2s",
        "-o",
        "h.jsonl",
    ];
    search.extend(conns);
    let o = msgbench(&d.0, &search);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let cap = answer(&d.path("h.jsonl"))["capacity_per_s"]
        .as_f64()
        .unwrap();
    // The closed-loop figure is one 3 s sample on a shared machine (CI once measured 933 and
    // then searched 984): the search must not stop well short of it, and cannot honestly find
    // more than 50 connections answered after 50 ms allow.
    assert!(
        cap >= 0.9 * ceiling && cap <= 1_020.0,
        "searched {cap} requests/s, measured {ceiling}"
    );
}

#[test]
fn a_search_where_nothing_holds_exits_3_and_compare_reads_two_searches() {
    let d = TempDir::new("search-none");
    let common = ["--warmup", "200ms", "--duration", "600ms", "--repeat", "0"];
    // Every message takes 30 ms: no rate meets a 5 ms p99.
    let mut slow = vec![
        "search",
        "mem://slow?delay=30ms",
        "--slo",
        "e2e.p99 < 5ms",
        "--start-rate",
        "400",
        "-o",
        "none.jsonl",
    ];
    slow.extend(common);
    let o = msgbench(&d.0, &slow);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    let a = answer(&d.path("none.jsonl"));
    assert_eq!(a["limit"], "nothing_held", "{a}");
    assert!(a["capacity_per_s"].is_null(), "{a}");
    assert!(stderr(&o).contains("no rate tried held every objective"));

    // Two searches of brokers capped at 4k and 6k: B has 50% more capacity. A stall of this
    // shared machine longer than the objective's 50 ms fails a step below the cap and so finds
    // less; that is noise, not what compare is tested for, so the pair is searched again (up to
    // three times) until both land near their caps. A broken search or compare fails every time.
    let mut attempts = Vec::new();
    for _ in 0..3 {
        let row = compare_two_searches(&d, &common);
        let (a, b) = (row["a"].as_f64().unwrap(), row["b"].as_f64().unwrap());
        if (3_700.0..=4_200.0).contains(&a) && (5_600.0..=6_300.0).contains(&b) {
            attempts.clear();
            break;
        }
        attempts.push(row);
    }
    assert!(
        attempts.is_empty(),
        "capacities of 4,000 and 6,000 msgs/s, three times found as {attempts:?}"
    );
    let o = msgbench(&d.0, &["compare", "a.jsonl", "b.jsonl"]);
    assert!(stdout(&o).contains("capacity msgs/s"), "{}", stdout(&o));
}

/// Searches `mem://` brokers capped at 4,000 and 6,000 messages/s and returns compare's
/// capacity row for the two.
fn compare_two_searches(d: &TempDir, common: &[&str]) -> Value {
    for (name, cap) in [("a", "4000"), ("b", "6000")] {
        let url = format!("mem://cmp{name}?max_rate={cap}");
        let file = format!("{name}.jsonl");
        let mut args = vec![
            "search",
            url.as_str(),
            "--slo",
            "e2e.p99 < 50ms",
            "--start-rate",
            "2000",
            "--precision",
            "5%",
            "-o",
            file.as_str(),
        ];
        args.extend(common);
        let o = msgbench(&d.0, &args);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
    }
    let o = msgbench(&d.0, &["compare", "a.jsonl", "b.jsonl", "-f", "json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let c: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let group = c["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "capacity search")
        .expect("a capacity group")
        .clone();
    group["rows"][0].clone()
}

#[test]
fn a_search_refuses_what_it_cannot_honour() {
    let d = TempDir::new("search-usage");
    for (args, says) in [
        (vec!["search", "mem://"], "at least one objective"),
        (
            vec!["search", "mem://", "--slo", "e2e.p99 < 1ms", "--rate", "5k"],
            "does not take --rate",
        ),
        (vec!["search", "mem://", "--slo", "e2e.p99 <"], "e2e.p99"),
        (
            vec![
                "search",
                "mem://",
                "--slo",
                "lost == 0",
                "--precision",
                "0%",
            ],
            "--precision",
        ),
        (
            vec![
                "search",
                "mem://",
                "--slo",
                "lost == 0",
                "--start-rate",
                "10k",
                "--max-rate",
                "1k",
            ],
            "above --max-rate",
        ),
        (vec!["search", "--slo", "lost == 0"], "needs a target"),
    ] {
        let o = msgbench(&d.0, &args);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
}
