//! Binary-level tests of the views of a results file and of a running benchmark, as a user
//! runs them: `report --format html -o`, `compare` in its three formats, and `run --metrics`
//! scraped over HTTP while two short `mem://` runs go.

use crate::util;

use std::io::{BufRead, Read, Write};
use std::time::{Duration, Instant};
use util::*;

/// `GET /metrics` over plain HTTP/1.1: (status line, body).
fn scrape(addr: &str) -> Option<(String, String)> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

/// The value of the sample line starting with `prefix` (name and labels).
fn sample(body: &str, prefix: &str) -> Option<f64> {
    body.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok())
}

/// The chart data embedded in an HTML page.
fn page_data(page: &str) -> serde_json::Value {
    let open = "<script type=\"application/json\" id=\"msgbench-data\">";
    let start = page.find(open).expect("the data element") + open.len();
    let end = start + page[start..].find("</script>").unwrap();
    serde_json::from_str(&page[start..end]).unwrap()
}

/// Run A serves Prometheus metrics while it runs (scraped mid-run, then gone); runs A and B
/// render as HTML and compare in text, JSON and HTML with the figures of their reports.
#[test]
fn metrics_during_a_run_then_html_and_compare() {
    let d = TempDir::new("views");
    let mut run = spawn_run(
        &d.0,
        &[
            "run",
            "mem://views-a",
            "--duration",
            "3s",
            "--warmup",
            "200ms",
            "--rate",
            "2000",
            "--name",
            "run-a",
            "-o",
            "a.jsonl",
            "--no-history",
            "--metrics",
            "127.0.0.1:0",
        ],
    );
    // The bound address is printed on stderr before the run starts.
    let mut err = std::io::BufReader::new(run.stderr.take().unwrap());
    let mut addr = None;
    let mut line = String::new();
    while err.read_line(&mut line).unwrap() > 0 {
        if let Some(rest) = line
            .trim()
            .strip_prefix("msgbench: Prometheus metrics at http://")
        {
            addr = Some(rest.trim_end_matches("/metrics").to_string());
            break;
        }
        line.clear();
    }
    let addr = addr.unwrap_or_else(|| panic!("no metrics address printed: {line}"));
    assert!(
        addr.starts_with("127.0.0.1:") && !addr.ends_with(":0"),
        "{addr}"
    );
    let labels = "{run=\"run-a\",target=\"mem://views-a\",phase=\"measure\"}";
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        assert!(
            Instant::now() < deadline,
            "no measure-phase figures served in time"
        );
        if let Some((status, body)) = scrape(&addr)
            && sample(&body, &format!("msgbench_messages_sent_total{labels}")).unwrap_or(0.0) > 0.0
            && body.contains("msgbench_e2e_latency_seconds{")
        {
            assert_eq!(status, "HTTP/1.1 200 OK");
            break body;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // Mid-run: not finished, and every sample line is `name{labels} value`.
    assert_eq!(
        sample(
            &body,
            "msgbench_run_finished{run=\"run-a\",target=\"mem://views-a\"}"
        ),
        Some(0.0)
    );
    for l in body.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = l.rsplit_once(' ').unwrap();
        assert!(value.parse::<f64>().is_ok(), "{l}");
        assert!(
            series.starts_with("msgbench_") && series.ends_with('}'),
            "{l}"
        );
        assert!(
            series.contains("run=\"run-a\",target=\"mem://views-a\""),
            "{l}"
        );
    }
    for q in ["0.5", "0.9", "0.99", "0.999"] {
        let p = format!(
            "msgbench_e2e_latency_seconds{{run=\"run-a\",target=\"mem://views-a\",phase=\"measure\",quantile=\"{q}\"}}"
        );
        assert!(sample(&body, &p).is_some_and(|v| v > 0.0), "{p}\n{body}");
    }
    let rest = {
        let mut s = String::new();
        err.read_to_string(&mut s).unwrap();
        s
    };
    let report_a = finish_json(run);
    assert!(
        scrape(&addr).is_none(),
        "the endpoint is gone after the run: {rest}"
    );
    let sent_a = u(&measure(&report_a)["counters"]["sent"]);
    assert!(sent_a > 0);

    let report_b = run_json(
        &d.0,
        &[
            "run",
            "mem://views-b",
            "--duration",
            "3s",
            "--warmup",
            "200ms",
            "--rate",
            "4000",
            "--name",
            "run-b",
            "-o",
            "b.jsonl",
            "--no-history",
        ],
    );

    // HTML report: one file with the figures of the report and its chart data.
    let o = msgbench(
        &d.0,
        &["report", "a.jsonl", "--format", "html", "-o", "a.html"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(o.stdout.is_empty(), "-o writes the file, not stdout");
    let page = std::fs::read_to_string(d.path("a.html")).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(!page.contains("<script src") && !page.contains("<link"));
    assert!(
        page.contains(&format!("<td>{sent_a}</td>")),
        "sent count in the table"
    );
    let data = page_data(&page);
    let t = data["run"]["chart"]["t"].as_array().unwrap();
    let intervals = report_a["intervals"].as_array().unwrap().len();
    assert_eq!(data["run"]["chart"]["intervals"], intervals);
    // One point per interval, except that slivers (the last 0.2 s of the measure phase, the
    // drain's few ms) join the point before them; the last point ends with the run.
    assert!(
        t.len() + 2 >= intervals && t.len() <= intervals,
        "{} of {intervals}",
        t.len()
    );
    let last_end = report_a["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["end_s"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert_eq!(t.last().unwrap().as_f64().unwrap(), last_end);
    let e2e = data["run"]["distributions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "end-to-end")
        .expect("the end-to-end percentile curve");
    assert_eq!(
        e2e["points"].as_array().unwrap().last().unwrap()["ns"],
        measure(&report_a)["e2e"]["max"]
    );
    // Without -o the page goes to stdout; the default format is still text.
    let to_stdout = stdout(&msgbench(&d.0, &["report", "a.jsonl", "-f", "html"]));
    assert_eq!(to_stdout, page);
    let o = msgbench(&d.0, &["report", "a.jsonl", "-o", "a.txt"]);
    assert!(o.status.success());
    assert!(
        std::fs::read_to_string(d.path("a.txt"))
            .unwrap()
            .starts_with("msgbench report: run-a")
    );

    // compare: B sent twice the rate of A; the plans differ in target and rate.
    let o = msgbench(&d.0, &["compare", "a.jsonl", "b.jsonl", "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let c: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(c["a"]["name"], "run-a");
    assert_eq!(c["b"]["source"], "b.jsonl");
    let tp = c["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "throughput")
        .unwrap();
    let sent = tp["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metric"] == "sent msgs/s")
        .unwrap();
    assert_eq!(sent["a"], measure(&report_a)["sent_per_s"]);
    assert_eq!(sent["b"], measure(&report_b)["sent_per_s"]);
    assert_eq!(sent["better"], "higher");
    assert_eq!(sent["verdict"], "better");
    let settings: Vec<&str> = c["plan_differences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["setting"].as_str().unwrap())
        .collect();
    assert_eq!(settings, ["target", "rate"]);
    let groups: Vec<&str> = c["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert!(groups.contains(&"end-to-end latency") && groups.contains(&"integrity"));

    let text = stdout(&msgbench(&d.0, &["compare", "a.jsonl", "b.jsonl"]));
    assert!(
        text.contains("A: run-a (a.jsonl) -> mem://views-a"),
        "{text}"
    );
    assert!(
        text.contains("warning: the runs have different plans (target, rate)"),
        "{text}"
    );
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("sent msgs/s"))
        .unwrap();
    assert!(row.trim_end().ends_with("better"), "{row}");

    let o = msgbench(
        &d.0,
        &[
            "compare", "a.jsonl", "b.jsonl", "-f", "html", "-o", "c.html",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let page = std::fs::read_to_string(d.path("c.html")).unwrap();
    let data = page_data(&page);
    assert_eq!(data["kind"], "compare");
    assert_eq!(data["a"]["label"], "run-a");
    assert_eq!(data["b"]["label"], "run-b");
    assert!(page.contains("<h1>msgbench compare: run-a vs run-b</h1>"));

    let o = msgbench(&d.0, &["compare", "a.jsonl", "missing.jsonl"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("cannot open missing.jsonl"),
        "{}",
        stderr(&o)
    );
}

/// A bad --metrics address fails the run before it starts, naming the flag.
#[test]
fn bad_metrics_address_is_a_clear_error() {
    let d = TempDir::new("views-bad");
    let o = msgbench(
        &d.0,
        &[
            "run",
            "mem://x",
            "--duration",
            "1s",
            "--no-history",
            "--metrics",
            "nonsense",
            "-o",
            "r.jsonl",
        ],
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--metrics nonsense"), "{}", stderr(&o));
    assert!(!d.path("r.jsonl").exists(), "nothing left behind");
}
