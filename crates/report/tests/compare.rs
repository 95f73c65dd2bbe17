//! `compare` on constructed reports: deltas, percentages and the direction of better for every
//! kind of figure, plan-difference warnings, and the three renderings.

use msgbench_report::compare::{
    Better, Comparison, Unit, Verdict, write_html, write_json, write_text,
};
use msgbench_report::{RunReport, read_records};

fn fixture() -> RunReport {
    let f = std::fs::File::open("tests/fixtures/run.jsonl").unwrap();
    RunReport::from_records(&read_records(std::io::BufReader::new(f)).unwrap()).unwrap()
}

/// A = the fixture; B = the fixture with faster throughput, worse latency, one loss, less CPU.
fn pair() -> (RunReport, RunReport) {
    let a = fixture();
    let mut b = a.clone();
    let m = b.result.as_mut().unwrap();
    m.sent_per_s *= 2.0;
    m.received_per_s *= 2.0;
    m.e2e.p99 *= 3;
    m.e2e.p50 /= 2;
    m.publish = m.e2e; // A has no publish latency at all
    m.cpu_s_per_million_sent /= 2.0;
    b.integrity.lost = 1;
    b.integrity.completeness = 0.5;
    (a, b)
}

#[test]
fn deltas_and_directions() {
    let (a, b) = pair();
    let c = Comparison::new(&a, &b);
    let ma = a.measure().unwrap();

    let sent = c.row("throughput", "sent msgs/s").unwrap();
    assert_eq!(sent.better, Better::Higher);
    assert_eq!(sent.a, Some(ma.sent_per_s));
    assert!((sent.delta.unwrap() - ma.sent_per_s).abs() < 1e-9);
    assert!((sent.percent.unwrap() - 100.0).abs() < 1e-9);
    assert_eq!(sent.verdict, Verdict::Better);

    let p99 = c.row("end-to-end latency", "p99").unwrap();
    assert_eq!(p99.better, Better::Lower);
    assert_eq!(p99.unit, Unit::Nanoseconds);
    assert_eq!(p99.delta, Some(2.0 * ma.e2e.p99 as f64));
    assert!((p99.percent.unwrap() - 200.0).abs() < 1e-9);
    assert_eq!(p99.verdict, Verdict::Worse, "higher latency is worse");

    let p50 = c.row("end-to-end latency", "p50").unwrap();
    assert_eq!(p50.verdict, Verdict::Better, "lower latency is better");
    assert!(p50.percent.unwrap() < 0.0);

    let max = c.row("end-to-end latency", "max").unwrap();
    assert_eq!((max.verdict, max.delta), (Verdict::Same, Some(0.0)));

    // Publish latency exists in B only: shown, not judged.
    let pub99 = c.row("publish latency", "p99").unwrap();
    assert_eq!((pub99.a, pub99.verdict), (None, Verdict::NotComparable));
    assert!(pub99.b.is_some());

    let lost = c.row("integrity", "lost").unwrap();
    assert_eq!(
        (lost.a, lost.b, lost.delta),
        (Some(0.0), Some(1.0), Some(1.0))
    );
    assert_eq!(lost.percent, None, "no percentage of zero");
    assert_eq!(lost.verdict, Verdict::Worse);
    let comp = c.row("integrity", "completeness").unwrap();
    assert_eq!(
        (comp.better, comp.verdict),
        (Better::Higher, Verdict::Worse)
    );

    let cpu = c.row("generator", "CPU-s per million sent").unwrap();
    assert_eq!(cpu.verdict, Verdict::Better, "less CPU is better");
    assert!((cpu.percent.unwrap() + 50.0).abs() < 1e-9);

    // Same plans: no warning about them.
    assert!(c.plan_differences.is_empty());
    assert!(!c.warnings.iter().any(|w| w.contains("different plans")));
    // No stage groups in a single-stage run, and no connect latency group.
    assert!(c.group("connect latency").is_none());
    assert!(!c.groups.iter().any(|g| g.name.starts_with("stage ")));
}

#[test]
fn identical_runs_are_the_same_everywhere() {
    let a = fixture();
    let c = Comparison::new(&a, &a);
    for g in &c.groups {
        for r in &g.rows {
            assert!(
                matches!(r.verdict, Verdict::Same),
                "{} {}: {:?}",
                g.name,
                r.metric,
                r.verdict
            );
        }
    }
}

#[test]
fn latency_differences_within_hdr_precision_are_the_same() {
    let a = fixture();
    let mut b = a.clone();
    let m = b.result.as_mut().unwrap();
    m.e2e.p90 += m.e2e.p90 / 2000; // 0.05%: below 3 significant digits
    m.e2e.p99 += m.e2e.p99 / 100; // 1%
    let c = Comparison::new(&a, &b);
    assert_eq!(
        c.row("end-to-end latency", "p90").unwrap().verdict,
        Verdict::Same
    );
    assert_eq!(
        c.row("end-to-end latency", "p99").unwrap().verdict,
        Verdict::Worse
    );
}

#[test]
fn different_plans_are_compared_with_a_warning() {
    let (a, mut b) = pair();
    b.begin.plan["size"] = serde_json::json!({"kind": "fixed", "bytes": 1024});
    b.begin.plan["target"] = serde_json::json!("nats://127.0.0.1:4222");
    b.complete = false;
    let c = Comparison::new(&a, &b);
    let settings: Vec<&str> = c
        .plan_differences
        .iter()
        .map(|d| d.setting.as_str())
        .collect();
    assert_eq!(settings, ["target", "size"]);
    assert!(c.plan_differences[1].b.contains("bytes=1024"));
    let size_a = &c.plan_differences[1].a;
    assert!(
        size_a.contains("kind=") && !size_a.contains("1024"),
        "{size_a}"
    );
    assert!(c.warnings[0].contains("different plans (target, size)"));
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("run B has no end record"))
    );
    assert!(
        c.row("throughput", "sent msgs/s").is_some(),
        "still compared"
    );
}

#[test]
fn renderings() {
    let (a, b) = pair();
    let c = Comparison::new(&a, &b).with_sources("a.jsonl", "b.jsonl");

    let mut out = Vec::new();
    write_text(&c, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("A: msgbench (a.jsonl) -> mem://fixture"),
        "{text}"
    );
    assert!(
        text.contains("end-to-end latency (lower is better)"),
        "{text}"
    );
    assert!(text.contains("throughput (higher is better)"), "{text}");
    let p99 = text
        .lines()
        .find(|l| l.trim_start().starts_with("p99 ") && l.contains("+200.0%"))
        .unwrap_or_else(|| panic!("no p99 row with +200%:\n{text}"));
    assert!(p99.trim_end().ends_with("worse"), "{p99}");
    let lost = text
        .lines()
        .find(|l| l.trim_start().starts_with("lost "))
        .unwrap();
    assert!(
        lost.contains(" +1 ") && lost.trim_end().ends_with("worse"),
        "{lost}"
    );

    let mut out = Vec::new();
    write_json(&c, &mut out).unwrap();
    let back: Comparison = serde_json::from_slice(&out).unwrap();
    assert_eq!(back, c, "the JSON is the model");

    let mut out = Vec::new();
    write_html(&c, &a, &b, &mut out).unwrap();
    let page = String::from_utf8(out).unwrap();
    assert!(page.contains("<h1>msgbench compare: msgbench vs msgbench</h1>"));
    assert!(page.contains("<td class=\"worse\">worse</td>"));
    assert!(page.contains("<td class=\"better\">better</td>"));
    assert!(page.contains("\"kind\":\"compare\""));
    assert!(!page.to_lowercase().contains("<script src"));
    assert!(page.contains("drawCompare"));
}

fn stage(
    name: &str,
    msgs_per_s: f64,
    p99: u64,
    missing: u64,
) -> msgbench_report::stages::StageReport {
    serde_json::from_value(serde_json::json!({
        "name": name, "reached": 100, "sent": 100, "msgs_per_s": msgs_per_s, "mb_per_s": 0.1,
        "duplicates": 0, "failed": 0, "unknown": 0, "missing": missing, "optional": false,
        "failure": false, "window": false,
        "latency": {"count": 100, "min": 1, "mean": 2.0, "p50": 2, "p90": 3, "p99": p99,
                    "p999": p99, "p9999": p99, "max": p99}
    }))
    .unwrap()
}

#[test]
fn stages_are_matched_by_name() {
    let mut a = fixture();
    let mut b = a.clone();
    a.stages = vec![
        stage("Sent", 1000.0, 5_000, 0),
        stage("Received", 900.0, 9_000, 3),
    ];
    b.stages = vec![
        stage("Received", 950.0, 8_000, 0),
        stage("Inbox", 10.0, 1, 0),
    ];
    let c = Comparison::new(&a, &b);
    let rec = |m: &str| c.row("stage Received", m).unwrap().clone();
    assert_eq!(rec("msgs/s").verdict, Verdict::Better);
    assert_eq!((rec("p99").a, rec("p99").b), (Some(9000.0), Some(8000.0)));
    assert_eq!(rec("p99").verdict, Verdict::Better);
    assert_eq!(
        rec("missing").verdict,
        Verdict::Better,
        "fewer missing is better"
    );
    // A stage of one run only is listed, not judged.
    let sent = c.row("stage Sent", "p99").unwrap();
    assert_eq!((sent.b, sent.verdict), (None, Verdict::NotComparable));
    assert!(c.group("stage Inbox").is_some());
    let order: Vec<&str> = c
        .groups
        .iter()
        .filter(|g| g.name.starts_with("stage "))
        .map(|g| g.name.as_str())
        .collect();
    assert_eq!(order, ["stage Sent", "stage Received", "stage Inbox"]);
}

/// TCP figures compare per message moved: fewer segments (a broker that batches) is better,
/// and a run without sockets has none to compare.
#[test]
fn tcp_segments_per_message() {
    let mut a = fixture();
    assert!(Comparison::new(&a, &a).group("tcp").is_none(), "no sockets");
    // The fixture moved 45,000 messages.
    let tcp = |segs_in, segs_out, retransmitted| msgbench_metrics::TcpSummary {
        connections: 2,
        segs_in,
        segs_out,
        data_segs_in: segs_in / 2,
        data_segs_out: segs_out / 2,
        retransmitted,
        batched: 0,
    };
    a.tcp = Some(tcp(90_000, 67_500, 0));
    let mut b = a.clone();
    b.tcp = Some(tcp(45_000, 67_500, 3));
    let c = Comparison::new(&a, &b);
    let r = c.row("tcp", "segments in per message").unwrap();
    assert_eq!(
        (r.a, r.b, r.verdict),
        (Some(2.0), Some(1.0), Verdict::Better)
    );
    let r = c.row("tcp", "segments out per message").unwrap();
    assert_eq!((r.a, r.b, r.verdict), (Some(1.5), Some(1.5), Verdict::Same));
    let r = c.row("tcp", "retransmitted segments").unwrap();
    assert_eq!((r.unit, r.verdict), (Unit::Count, Verdict::Worse));
    let mut out = Vec::new();
    write_text(&c, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("segments in per message"), "{text}");
    // Only one side with sockets: shown, not judged.
    let c = Comparison::new(&fixture(), &b);
    let r = c.row("tcp", "segments in per message").unwrap();
    assert_eq!(r.verdict, Verdict::NotComparable);
}
