//! The history dashboard over real HTTP: importing results files, the runs list and its
//! search, a run page's data computed from its file, comparison, errors, and the token.

mod common;

use common::*;
use msgbench_dashboard::HistoryDashboard;
use msgbench_dashboard::history::{Verdict, import, load};
use msgbench_report::{Record, ResultsWriter};
use serde_json::Value;
use std::path::{Path, PathBuf};

struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("msgbench-dash-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes a results file of `n` one-second intervals at `rate` msgs/s with `latency_us`.
fn results_file(path: &Path, name: &str, n: u64, rate: u64, latency_us: u64) {
    let mut w = ResultsWriter::new(std::fs::File::create(path).unwrap());
    w.write(&begin(name)).unwrap();
    for i in 0..n {
        w.write(&interval(i, rate, latency_us)).unwrap();
    }
    let end: Record = end(n as f64, n * rate);
    w.write(&end).unwrap();
    w.flush().unwrap();
}

#[test]
fn runs_are_listed_searched_shown_and_compared() {
    let dir = Dir::new("history");
    let (a, b) = (dir.0.join("a.jsonl"), dir.0.join("b.jsonl"));
    results_file(&a, "baseline nats", 10, 1000, 500);
    results_file(&b, "tuned nats", 10, 2000, 250);
    let db = dir.0.join("runs.db");
    let ids: Vec<i64> = import(&db, &[a.clone(), b.clone()])
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    // A file that is not a results file is refused, the others are kept.
    std::fs::write(dir.0.join("junk.jsonl"), "not json\n").unwrap();
    let r = import(&db, &[dir.0.join("junk.jsonl")]).unwrap();
    assert!(
        r[0].as_ref()
            .unwrap_err()
            .to_string()
            .contains("junk.jsonl")
    );

    let token = "history-token-1";
    let d = HistoryDashboard::start("127.0.0.1:0", Some(token), &db).unwrap();
    let addr = host_port(d.url());
    let q = format!("token={token}");

    assert_eq!(get(&addr, "/api/runs", &[]).0, 401);
    assert_eq!(get(&addr, "/", &[]).0, 401);
    assert_eq!(get(&addr, &format!("/run/{}", ids[0]), &[]).0, 401);
    let (status, body) = get(&addr, &format!("/api/runs?{q}"), &[]);
    assert_eq!(status, 200, "{body}");
    let list: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["total"], 2);
    assert_eq!(list["runs"].as_array().unwrap().len(), 2);
    let (_, body) = get(&addr, &format!("/api/runs?q=name:tuned&{q}"), &[]);
    let list: Value = serde_json::from_str(&body).unwrap();
    let runs = list["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["name"], "tuned nats");
    assert_eq!(runs[0]["target"], "mem://");
    assert_eq!(runs[0]["sent_per_s"], 2000.0);
    assert_eq!(
        runs[0]["results_path"],
        b.canonicalize().unwrap().to_str().unwrap()
    );
    let (_, body) = get(&addr, &format!("/api/runs?q=target:nats&{q}"), &[]);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["runs"]
            .as_array()
            .unwrap()
            .len(),
        0
    );

    // A run's page data is computed from its results file.
    let (status, body) = get(
        &addr,
        &format!("/api/runs/{}", ids[0]),
        &[&format!("Authorization: Bearer {token}")],
    );
    assert_eq!(status, 200, "{body}");
    let run: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(run["report"]["name"], "baseline nats");
    assert_eq!(run["series"]["points"].as_array().unwrap().len(), 10);
    assert!(run["report"]["intervals"].as_array().unwrap().is_empty());
    let (report, series) = load(&a, 4000).unwrap();
    assert_eq!(
        run["report"]["result"]["e2e"]["p99"],
        report.result.as_ref().unwrap().e2e.p99
    );
    assert_eq!(series.points.len(), 10);
    let page = get(&addr, &format!("/run/{}?{q}", ids[0]), &[]);
    assert_eq!(page.0, 200);
    assert!(page.1.contains("history.js?token=history-token-1"));

    // Comparison: twice the rate at half the latency is better on both counts.
    let (status, body) = get(
        &addr,
        &format!("/api/compare?a={}&b={}&{q}", ids[0], ids[1]),
        &[],
    );
    assert_eq!(status, 200, "{body}");
    let c: Value = serde_json::from_str(&body).unwrap();
    let delta = |m: &str| {
        c["deltas"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["metric"] == m)
            .unwrap_or_else(|| panic!("no {m} in {}", c["deltas"]))
            .clone()
    };
    assert_eq!(
        delta("sent")["verdict"],
        serde_json::to_value(Verdict::Better).unwrap()
    );
    assert_eq!(delta("sent")["change"], 1.0);
    assert_eq!(delta("e2e p99")["verdict"], "better");
    assert_eq!(delta("lost")["verdict"], "same");
    assert_eq!(c["a"]["summary"]["name"], "baseline nats");

    // Unknown runs and vanished files are clear errors.
    let (status, body) = get(&addr, &format!("/api/runs/999?{q}"), &[]);
    assert_eq!(status, 404);
    assert!(body.contains("no run 999"), "{body}");
    std::fs::remove_file(&a).unwrap();
    let (status, body) = get(&addr, &format!("/api/runs/{}?{q}", ids[0]), &[]);
    assert_eq!(status, 422);
    assert!(body.contains("a.jsonl"), "{body}");
    d.stop();
}

#[test]
fn a_long_run_page_is_downsampled() {
    let dir = Dir::new("long");
    let f = dir.0.join("long.jsonl");
    results_file(&f, "long", 9000, 10, 0);
    let (report, series) = load(&f, 1000).unwrap();
    assert!(series.len() <= 1000, "{} points", series.len());
    let dt: f64 = series.rows().map(|r| r[1]).sum();
    assert_eq!(dt, 9000.0);
    assert_eq!(report.result.unwrap().counters.sent, 90_000);
}
