//! `msgbench merge` on constructed segment files: exact sums, refusals, partial merges.
use msgbench_metrics::aggregate::Integrity;
use msgbench_metrics::{Counters, EventKind, Histograms};
use msgbench_metrics::{IntervalStats, Phase, PhaseTotals};
use msgbench_report::merge::*;
use msgbench_report::records::ResultsWriter;
use msgbench_report::records::{Begin, ClockInfo, End, EventRecord, Host, Record};
use std::path::{Path, PathBuf};

fn begin(index: u32, count: u32, run_id: u32, host: &str, size: u32) -> Begin {
    Begin {
        version: 1,
        tool: "msgbench test".into(),
        started_unix_ms: 1000 + index as u64,
        host: Host {
            hostname: host.into(),
            cpus: 2,
            os: "linux".into(),
        },
        clock: ClockInfo {
            source: "CLOCK_MONOTONIC anchored to CLOCK_REALTIME".into(),
            scope: "wall".into(),
            uncertainty_us: Some(100 * (index as u64 + 1)),
            ..ClockInfo::default()
        },
        plan: serde_json::json!({
            "name": "t", "target": format!("nats://node{index}:4222"), "run_id": run_id,
            "size": size, "segment": {"index": index, "count": count}
        }),
        segments: Vec::new(),
    }
}

fn interval(index: u64, sent: u64, received: u64, e2e_us: u64) -> IntervalStats {
    let mut h = Histograms::new();
    for _ in 0..received {
        h.e2e.record(e2e_us * 1000).unwrap();
    }
    IntervalStats {
        index,
        phase: Phase::Measure,
        start_s: index as f64,
        end_s: index as f64 + 1.0,
        counters: Counters {
            sent,
            received,
            ..Counters::default()
        },
        histograms: h,
        cpu_s: 0.1,
        gauges: None,
        stages: Vec::new(),
        host: None,
        loop_lag_ns: 0,
        groups: Vec::new(),
    }
}

fn end(sent: u64, expected: u64, delivered: u64, hist_us: u64) -> End {
    let mut h = Histograms::new();
    for _ in 0..delivered {
        h.e2e.record(hist_us * 1000).unwrap();
    }
    End {
        duration_s: 2.0,
        interrupted: false,
        drain_complete: true,
        phases: vec![PhaseTotals {
            phase: Phase::Measure,
            start_s: 0.0,
            end_s: 2.0,
            counters: Counters {
                sent,
                received: delivered,
                ..Counters::default()
            },
            histograms: h,
            cpu_s: 0.2,
            stages: Vec::new(),
        }],
        integrity: Integrity {
            expected,
            delivered,
            ..Integrity::default()
        },
        warnings: vec![PARTIAL_INTEGRITY_WARNING.to_string()],
        connections: None,
        stages: Vec::new(),
        tcp: None,
        backlog: None,
        responses: None,
        thresholds: Vec::new(),
        groups: Vec::new(),
    }
}

/// TCP counters of `connections` connections that moved `segments` data segments each way.
fn tcp(connections: u64, segments: u64) -> msgbench_metrics::TcpSummary {
    msgbench_metrics::TcpSummary {
        connections,
        segs_out: segments + 3 * connections,
        segs_in: segments + 2 * connections,
        data_segs_out: segments,
        data_segs_in: segments,
        retransmitted: 0,
        batched: 0,
    }
}

fn write(dir: &Path, name: &str, records: &[Record]) -> PathBuf {
    let p = dir.join(name);
    let mut w = ResultsWriter::new(std::fs::File::create(&p).unwrap());
    for r in records {
        w.write(r).unwrap();
    }
    w.flush().unwrap();
    p
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("msgbench-merge-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn merges_counts_histograms_and_integrity_across_segments() {
    let d = tmpdir("ok");
    // Segment 0 produces 100 messages for 2 receivers (one here, one in segment 1); its
    // consumer got 100 at 10 µs. Segment 1 only consumes: it got 98 of them at 1000 µs.
    let a = write(
        &d,
        "a.jsonl",
        &[
            Record::Begin(begin(0, 2, 7, "h1", 10)),
            Record::Interval(interval(0, 60, 60, 10)),
            Record::Event(EventRecord {
                at_s: 0.5,
                kind: EventKind::Warning,
                detail: "x".into(),
            }),
            Record::Interval(interval(1, 40, 40, 10)),
            Record::End(End {
                tcp: Some(tcp(2, 100)),
                backlog: None,
                thresholds: Vec::new(),
                groups: Vec::new(),
                ..end(100, 200, 100, 10)
            }),
        ],
    );
    let b = write(
        &d,
        "b.jsonl",
        &[
            Record::Begin(begin(1, 2, 7, "h2", 10)),
            Record::Interval(interval(0, 0, 58, 1000)),
            Record::Interval(interval(1, 0, 40, 1000)),
            Record::Interval(interval(2, 0, 0, 1000)),
            Record::End(End {
                tcp: Some(tcp(1, 98)),
                backlog: None,
                thresholds: Vec::new(),
                groups: Vec::new(),
                ..end(0, 0, 98, 1000)
            }),
        ],
    );
    let mut out = Vec::new();
    let s = merge(&[b.clone(), a.clone()], &mut out, false).unwrap();
    assert_eq!((s.segments, s.of, s.intervals, s.complete), (2, 2, 3, true));
    let i = s.integrity.unwrap();
    assert_eq!((i.expected, i.delivered, i.lost), (200, 198, 2));
    let recs = msgbench_report::read_records(std::io::Cursor::new(&out)).unwrap();
    let Record::Begin(bg) = &recs[0] else {
        panic!()
    };
    assert!(bg.plan.get("segment").is_none());
    assert_eq!(bg.segments.len(), 2);
    // Two hosts: the bound is the sum of both clocks' errors.
    assert_eq!(bg.clock.uncertainty_us, Some(300));
    let ivs: Vec<&IntervalStats> = recs
        .iter()
        .filter_map(|r| {
            if let Record::Interval(iv) = r {
                Some(iv)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(ivs[0].counters.sent, 60);
    assert_eq!(ivs[0].counters.received, 118);
    // Exact percentiles of the union: half the deliveries at 10 µs, half at 1 ms.
    assert_eq!(ivs[0].histograms.e2e.len(), 118);
    assert!(ivs[0].histograms.e2e.max() >= 999_000);
    assert!(
        recs.iter()
            .any(|r| matches!(r, Record::Event(e) if e.detail == "[segment 0] x"))
    );
    let Record::End(e) = recs.last().unwrap() else {
        panic!()
    };
    assert_eq!(e.phases[0].counters.received, 198);
    assert_eq!(e.phases[0].histograms.e2e.len(), 198);
    assert!(e.warnings.iter().all(|w| w != PARTIAL_INTEGRITY_WARNING));
    // Each segment's TCP counters are its own connections': the merge adds them.
    assert_eq!(e.tcp, Some(tcp(3, 198)));
    // The merged file is a results file like any other.
    let r = msgbench_report::RunReport::from_records(&recs).unwrap();
    assert_eq!(r.integrity.lost, 2);
    assert!(
        clock_warnings(
            bg,
            Some(&msgbench_metrics::LatencySummary::of(
                &e.phases[0].histograms.e2e
            ))
        )
        .iter()
        .any(|w| w.contains("below the clocks' uncertainty"))
    );
    std::fs::remove_dir_all(d).ok();
}

#[test]
fn refuses_mixed_runs_plans_duplicates_and_gaps() {
    let d = tmpdir("refuse");
    let seg =
        |name: &str, b: Begin| write(&d, name, &[Record::Begin(b), Record::End(end(1, 1, 1, 1))]);
    let a = seg("a.jsonl", begin(0, 2, 7, "h", 10));
    let other_run = seg("b.jsonl", begin(1, 2, 8, "h", 10));
    let other_plan = seg("c.jsonl", begin(1, 2, 7, "h", 20));
    let dup = seg("d.jsonl", begin(0, 2, 7, "h", 10));
    let other_count = seg("e.jsonl", begin(1, 3, 7, "h", 10));
    let mut plain = begin(1, 2, 7, "h", 10);
    plain.plan.as_object_mut().unwrap().remove("segment");
    let not_seg = seg("f.jsonl", plain);
    let mut consumers = begin(1, 2, 7, "h", 10);
    consumers.plan["segment"]["split"] = serde_json::json!("roles");
    let by_role = seg("g.jsonl", consumers);
    let err = |files: &[&PathBuf]| {
        let v: Vec<PathBuf> = files.iter().map(|p| (*p).clone()).collect();
        merge(&v, &mut Vec::new(), false).unwrap_err().to_string()
    };
    assert!(err(&[&a, &other_run]).contains("different runs"));
    assert!(err(&[&a, &other_plan]).contains("`size` is 10 in one and 20"));
    assert!(err(&[&a, &dup]).contains("both segment 0/2"));
    assert!(err(&[&a, &other_count]).contains("run of 3 segments"));
    assert!(err(&[&a, &not_seg]).contains("not a segment"));
    let mixed = err(&[&a, &by_role]);
    assert!(mixed.contains("split by role here and by task"), "{mixed}");
    let missing = err(&[&a]);
    assert!(missing.contains("segments 1 of 2 are missing"), "{missing}");
    let no_producers = err(&[&by_role]);
    assert!(
        no_producers.contains("the producers segment is missing"),
        "{no_producers}"
    );
    // --partial merges what there is, and says so.
    let mut out = Vec::new();
    let s = merge(std::slice::from_ref(&a), &mut out, true).unwrap();
    assert_eq!((s.segments, s.of), (1, 2));
    let recs = msgbench_report::read_records(std::io::Cursor::new(&out)).unwrap();
    let Record::End(e) = recs.last().unwrap() else {
        panic!()
    };
    assert!(e.warnings.iter().any(|w| w.contains("missing")));
    std::fs::remove_dir_all(d).ok();
}

#[test]
fn a_killed_segment_is_refused_unless_partial() {
    let d = tmpdir("killed");
    let a = write(
        &d,
        "a.jsonl",
        &[
            Record::Begin(begin(0, 2, 7, "h", 10)),
            Record::End(end(1, 1, 1, 1)),
        ],
    );
    let b = write(
        &d,
        "b.jsonl",
        &[
            Record::Begin(begin(1, 2, 7, "h", 10)),
            Record::Interval(interval(0, 1, 1, 1)),
        ],
    );
    let e = merge(&[a.clone(), b.clone()], &mut Vec::new(), false).unwrap_err();
    assert!(e.to_string().contains("no `end` record"), "{e}");
    let s = merge(&[a, b], &mut Vec::new(), true).unwrap();
    assert!(!s.complete);
    std::fs::remove_dir_all(d).ok();
}
