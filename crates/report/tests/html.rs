//! The HTML report of the recorded fixture run: one self-contained page holding the summary
//! figures, the chart data and the inline scripts, with no reference to anything on a network.

use msgbench_report::html::RunCharts;
use msgbench_report::{Format, RunReport, read_records, render};

fn fixture() -> RunReport {
    let f = std::fs::File::open("tests/fixtures/run.jsonl").unwrap();
    RunReport::from_records(&read_records(std::io::BufReader::new(f)).unwrap()).unwrap()
}

fn html(r: &RunReport) -> String {
    let mut out = Vec::new();
    render(r, Format::Html, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// The JSON inside `<script type="application/json" id="msgbench-data">`.
fn data(page: &str) -> serde_json::Value {
    let open = "<script type=\"application/json\" id=\"msgbench-data\">";
    let start = page.find(open).expect("the data element") + open.len();
    let end = start + page[start..].find("</script>").unwrap();
    serde_json::from_str(&page[start..end]).unwrap()
}

#[test]
fn one_self_contained_file() {
    let page = html(&fixture());
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.trim_end().ends_with("</html>"));
    let lower = page.to_lowercase();
    // Nothing is loaded from elsewhere: no external scripts, styles, images or frames.
    for bad in [
        "<script src",
        "<link",
        "src=\"http",
        "href=\"http",
        "src='http",
        "href='http",
        "@import",
        "<iframe",
        "<img",
    ] {
        assert!(!lower.contains(bad), "the page references `{bad}`");
    }
    // The scripts are inline: uPlot itself and the page's own.
    assert!(page.contains("var uPlot=function()"), "uPlot is inlined");
    assert!(page.contains("drawRun"), "the chart script is inlined");
    assert!(page.contains(".uplot"), "uPlot's CSS is inlined");
    assert_eq!(page.matches("<html").count(), 1);
}

#[test]
fn page_holds_the_summary_figures() {
    let r = fixture();
    let page = html(&r);
    let m = r.measure().unwrap();
    // Same figures as the text report.
    for needle in [
        "<h1>msgbench report: msgbench</h1>",
        "mem://fixture",
        "measure phase (2.00s) and its drain (received over 2.01s)",
        "<td>10001</td><td>5000.5</td><td>1.00</td>",
        "<td>20002</td><td>9969.4</td><td>2.00</td>",
        "75.101 CPU-s per million sent",
        "<th>end-to-end</th><td>20002</td>",
        "<th>send delay</th><td>10001</td>",
        "86.8us",
        "18.79ms",
        "22.82ms",
        "100.0000%",
        "613 sends left later than 1ms",
        "CLOCK_MONOTONIC",
        "id=\"configuration\"",
        "id=\"integrity\"",
        "id=\"warnings\"",
        "id=\"timeseries\"",
        "id=\"percentiles\"",
    ] {
        assert!(page.contains(needle), "the page lacks `{needle}`");
    }
    assert_eq!(m.e2e.count, 20002);
}

#[test]
fn chart_data_matches_the_intervals() {
    let r = fixture();
    let d = data(&html(&r));
    assert_eq!(d["kind"], "report");
    let c = &d["run"]["chart"];
    let t: Vec<f64> = serde_json::from_value(c["t"].clone()).unwrap();
    assert_eq!(c["intervals"], 4);
    // The 6 ms drain interval at the end joins the last measure second.
    assert_eq!(t.len(), 3);
    assert_eq!(t[2], r.intervals[3].end_s);
    let sent: Vec<f64> = serde_json::from_value(c["sent_per_s"].clone()).unwrap();
    // Interval 1 of the fixture: 5001 messages sent over 1 s.
    assert!((sent[1] - 5001.0).abs() < 1e-6, "{sent:?}");
    let p99: Vec<Option<f64>> = serde_json::from_value(c["e2e"]["p99"].clone()).unwrap();
    assert_eq!(p99[1], Some(r.intervals[1].e2e.p99 as f64 / 1e6));
    assert_eq!(p99[2], Some(r.intervals[2].e2e.p99 as f64 / 1e6));
    let sent_last = 5000.0 / (r.intervals[3].end_s - r.intervals[2].start_s);
    assert!((sent[2] - sent_last).abs() < 1e-6, "{sent:?}");
    // The percentile curve of the result's end-to-end latency, ending at its maximum.
    let dist = d["run"]["distributions"].as_array().unwrap();
    let e2e = dist.iter().find(|c| c["name"] == "end-to-end").unwrap();
    let last = e2e["points"].as_array().unwrap().last().unwrap();
    assert_eq!(last["ns"].as_u64().unwrap(), r.measure().unwrap().e2e.max);
    let p99_point = e2e["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| (p["percentile"].as_f64().unwrap() - 99.0).abs() < 1e-9)
        .unwrap();
    assert_eq!(
        p99_point["ns"].as_u64().unwrap(),
        r.measure().unwrap().e2e.p99
    );
    assert!(dist.iter().any(|c| c["name"] == "send delay"));
}

#[test]
fn long_runs_are_downsampled() {
    let mut r = fixture();
    let row = r.intervals[1].clone();
    r.intervals = (0..20_000u64)
        .map(|i| {
            let mut x = row.clone();
            x.index = i;
            x.start_s = i as f64;
            x.end_s = i as f64 + 1.0;
            x
        })
        .collect();
    let c = RunCharts::of(&r, "long");
    assert!(c.chart.t.len() <= 2000, "{}", c.chart.t.len());
    assert_eq!(c.chart.intervals, 20_000);
    assert!((c.chart.bucket_s - 10.0).abs() < 1e-9);
    assert!((c.chart.sent_per_s[0] - 5001.0).abs() < 1e-6);
}

#[test]
fn text_in_the_page_is_escaped() {
    let mut r = fixture();
    r.name = "<script>alert(1)</script>".into();
    r.warnings.push("a </script> in a warning & more".into());
    let page = html(&r);
    assert!(!page.contains("<script>alert(1)"));
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(page.contains("a &lt;/script&gt; in a warning &amp; more"));
    // Every </script> closes one of the page's three script elements.
    assert_eq!(page.matches("</script>").count(), 3);
}

#[test]
fn incomplete_runs_say_so() {
    let f = std::fs::File::open("tests/fixtures/run.jsonl").unwrap();
    let mut records = read_records(std::io::BufReader::new(f)).unwrap();
    records.retain(|r| !matches!(r, msgbench_report::Record::End(_)));
    let page = html(&RunReport::from_records(&records).unwrap());
    assert!(page.contains("INCOMPLETE"));
}
