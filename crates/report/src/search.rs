//! A capacity search in the results file: one `search_step` line after each step (its offered
//! and achieved rates, latencies, delivery account and the verdict of every objective) and one
//! `search` line with the answer, then the usual `end`. Every interval of every step is in the
//! file too, on one time axis, so the whole search charts as a staircase.
//!
//! [`SearchReport`] is what reports show: the step table, the capacity and how sure it is, the
//! knee (offered against achieved rate and latency percentiles, [`knee_points`]) and, in
//! `compare`, the capacity of one search against another's.

use crate::verdict::Verdict;
use crate::{End, RunReport};
use msgbench_metrics::PhaseTotals;
use msgbench_metrics::aggregate::Integrity;
use serde::{Deserialize, Serialize};

/// One step of a search: the workload run once at an offered rate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchStep {
    /// 1, 2, ... in the order run.
    pub index: u32,
    /// `probe` (exponential), `bisect` or `repeat`.
    pub kind: String,
    /// The rate offered, messages per second (all producers).
    pub offered_per_s: f64,
    /// Messages sent per second in the measure phase.
    pub sent_per_s: f64,
    /// Messages received per second (measure phase and its drain).
    pub received_per_s: f64,
    /// End-to-end latency (intended send time → received), ns: p50, p99, p99.9.
    pub e2e_ns: [u64; 3],
    /// Publish latency (send → ack or reply), ns: p50, p99, p99.9 (zeros without acks).
    pub publish_ns: [u64; 3],
    /// Expected deliveries that never arrived.
    pub lost: u64,
    /// Delivered / expected.
    pub completeness: f64,
    /// The share of the rate offered that was sent (the step fails below the search's floor).
    pub achieved: f64,
    /// Share of the step's measure intervals in which the generator was not saturated.
    pub valid_share: f64,
    /// The verdict of each objective.
    pub verdicts: Vec<Verdict>,
    /// Every objective held and the offered rate was achieved.
    pub pass: bool,
    /// Why the step failed, in words (empty when it passed).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub why: String,
    /// Where the step's intervals are on the file's time axis, seconds.
    pub start_s: f64,
    /// See `start_s`.
    pub end_s: f64,
}

/// The answer of a search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchEnd {
    /// The objectives, as written.
    pub objectives: Vec<String>,
    /// The least share of the offered rate a step had to send to pass.
    pub min_achieved: f64,
    /// The highest rate at which every objective held in every run, messages per second.
    pub capacity_per_s: Option<f64>,
    /// The lowest rate that failed (the bracket's upper end).
    pub failed_at_per_s: Option<f64>,
    /// Runs at the capacity and how many held (the first run included).
    pub runs_at_capacity: u32,
    /// See `runs_at_capacity`.
    pub held_at_capacity: u32,
    /// What ended the search: `objectives`, `ceiling`, `generator`, `nothing_held`, `steps` or
    /// `interrupted`.
    pub limit: String,
    /// The answer in one sentence.
    pub summary: String,
}

/// A search as reports show it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SearchReport {
    /// Every step, in order.
    pub steps: Vec<SearchStep>,
    /// The answer (absent when the search was killed before it).
    pub end: Option<SearchEnd>,
}

/// Judges one step from its own report (the step's records alone): every objective's
/// verdict, and whether it sent at least `min_achieved` of `offered`. `generator_limited` says
/// whether msgbench's own threads were saturated (CPU or event-loop lag) in at least half the
/// step's measure intervals: a failing step so marked describes msgbench, not the system.
pub fn judge_step(
    index: u32,
    kind: &str,
    offered: f64,
    report: &RunReport,
    objectives: &[crate::verdict::Threshold],
    min_achieved: f64,
) -> (SearchStep, bool) {
    let verdicts = crate::verdict::evaluate(report, objectives);
    let (sent, received, e2e, publish) =
        report
            .result
            .as_ref()
            .map_or((0.0, 0.0, [0; 3], [0; 3]), |r| {
                (
                    r.sent_per_s,
                    r.received_per_s,
                    [r.e2e.p50, r.e2e.p99, r.e2e.p999],
                    [r.publish.p50, r.publish.p99, r.publish.p999],
                )
            });
    let achieved = if offered > 0.0 { sent / offered } else { 0.0 };
    let (valid_share, generator_limited) = report.generator.as_ref().map_or((1.0, false), |g| {
        (
            g.valid_share,
            g.measure_intervals > 0 && g.saturated_intervals * 2 >= g.measure_intervals,
        )
    });
    let mut why: Vec<String> = verdicts
        .iter()
        .filter(|v| !v.pass)
        .map(|v| format!("{} (actual {})", v.threshold, v.shown))
        .collect();
    if achieved < min_achieved {
        why.push(format!("sent {:.0}% of the rate offered", achieved * 100.0));
    }
    // A step that met every objective passed, whatever msgbench's load: the figures show the
    // system kept up. Saturation only qualifies a failure (it may be msgbench's, not the
    // system's), and ends the search there.
    let pass = verdicts.iter().all(|v| v.pass) && achieved >= min_achieved;
    if !pass && generator_limited {
        why.push("msgbench's threads were saturated".into());
    }
    let step = SearchStep {
        index,
        kind: kind.to_string(),
        offered_per_s: offered,
        sent_per_s: sent,
        received_per_s: received,
        e2e_ns: e2e,
        publish_ns: publish,
        lost: report.integrity.lost,
        completeness: report.integrity.completeness,
        achieved,
        valid_share,
        verdicts,
        pass,
        why: why.join("; "),
        start_s: 0.0,
        end_s: 0.0,
    };
    (step, generator_limited)
}

/// The `end` record of a whole search: the steps' phases added together (counts, latencies,
/// CPU and durations) and their delivery accounts summed. `ends` pairs each step's `end` with
/// whether the step passed: the warnings of passing steps qualify the answer and are kept
/// (named by step); those of failing steps are expected (late sends and backlogs are how an
/// overloaded step fails) and only counted.
pub fn combined_end(ends: &[(End, bool)], interrupted: bool) -> End {
    let mut phases: Vec<PhaseTotals> = Vec::new();
    let mut integrity = Integrity::default();
    let mut warnings: Vec<String> = Vec::new();
    let mut failing_with_warnings = 0;
    for (k, (e, pass)) in ends.iter().enumerate() {
        for p in &e.phases {
            match phases.iter_mut().find(|q| q.phase == p.phase) {
                Some(q) => {
                    q.counters.merge(&p.counters);
                    q.histograms.merge(&p.histograms);
                    q.cpu_s += p.cpu_s;
                    q.end_s += p.end_s - p.start_s;
                }
                None => {
                    let mut q = p.clone();
                    q.stages.clear();
                    phases.push(q);
                }
            }
        }
        let i = &e.integrity;
        integrity.expected += i.expected;
        integrity.delivered += i.delivered;
        integrity.lost += i.lost;
        integrity.duplicated += i.duplicated;
        integrity.reordered += i.reordered;
        integrity.foreign += i.foreign;
        if *pass {
            warnings.extend(e.warnings.iter().map(|w| format!("step {}: {w}", k + 1)));
        } else if !e.warnings.is_empty() {
            failing_with_warnings += 1;
        }
    }
    if failing_with_warnings > 0 {
        warnings.push(format!(
            "{failing_with_warnings} failing step(s) had warnings of their own (late sends, backlogs: how an overloaded step fails); each step's figures are in its search_step record"
        ));
    }
    let ends: Vec<&End> = ends.iter().map(|(e, _)| e).collect();
    integrity.completeness = if integrity.expected == 0 {
        1.0
    } else {
        integrity.delivered as f64 / integrity.expected as f64
    };
    End {
        duration_s: ends.iter().map(|e| e.duration_s).sum(),
        interrupted,
        drain_complete: ends.iter().all(|e| e.drain_complete),
        phases,
        integrity,
        warnings,
        connections: None,
        stages: Vec::new(),
        tcp: None,
        backlog: None,
        responses: None,
        thresholds: Vec::new(),
        groups: Vec::new(),
    }
}

/// One point of the knee chart.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct KneePoint {
    /// Offered rate, messages per second.
    pub offered: f64,
    /// Achieved rate: received per second, or sent per second when nothing receives (HTTP).
    pub received: f64,
    /// End-to-end p50, p99, p99.9 in ms.
    pub p50_ms: f64,
    /// See `p50_ms`.
    pub p99_ms: f64,
    /// See `p50_ms`.
    pub p999_ms: f64,
    /// The step passed.
    pub pass: bool,
}

/// The knee: each distinct offered rate once (the last run at it), in rising order.
pub fn knee_points(s: &SearchReport) -> Vec<KneePoint> {
    let mut pts: Vec<KneePoint> = Vec::new();
    for st in &s.steps {
        let p = KneePoint {
            offered: st.offered_per_s,
            received: if st.received_per_s > 0.0 {
                st.received_per_s
            } else {
                st.sent_per_s
            },
            p50_ms: st.e2e_ns[0] as f64 / 1e6,
            p99_ms: st.e2e_ns[1] as f64 / 1e6,
            p999_ms: st.e2e_ns[2] as f64 / 1e6,
            pass: st.pass,
        };
        match pts.iter_mut().find(|q| q.offered == p.offered) {
            Some(q) => *q = p,
            None => pts.push(p),
        }
    }
    pts.sort_by(|a, b| a.offered.total_cmp(&b.offered));
    pts
}

fn rate(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.3}M", r / 1e6)
    } else if r >= 1e4 {
        format!("{:.1}k", r / 1e3)
    } else {
        format!("{r:.0}")
    }
}

fn ms(ns: u64) -> String {
    crate::live::latency(ns)
}

/// The search section of the text report.
pub fn write_text(s: &SearchReport, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    writeln!(out)?;
    writeln!(out, "capacity search")?;
    match &s.end {
        Some(e) => {
            writeln!(out, "  {}", e.summary)?;
            writeln!(
                out,
                "  objectives: {}; a step must also send {:.0}% of the rate offered",
                if e.objectives.is_empty() {
                    "none".to_string()
                } else {
                    e.objectives.join(", ")
                },
                e.min_achieved * 100.0
            )?;
        }
        None => writeln!(
            out,
            "  INCOMPLETE: the search ended before its answer ({} steps recorded)",
            s.steps.len()
        )?,
    }
    writeln!(
        out,
        "  {:>4} {:<7} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9} {:>8} {:>6}  verdict",
        "step",
        "kind",
        "offered/s",
        "sent/s",
        "recv/s",
        "e2e p50",
        "e2e p99",
        "p99.9",
        "lost",
        "valid"
    )?;
    for st in &s.steps {
        writeln!(
            out,
            "  {:>4} {:<7} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9} {:>8} {:>5.0}%  {}",
            st.index,
            st.kind,
            rate(st.offered_per_s),
            rate(st.sent_per_s),
            rate(st.received_per_s),
            ms(st.e2e_ns[0]),
            ms(st.e2e_ns[1]),
            ms(st.e2e_ns[2]),
            st.lost,
            st.valid_share * 100.0,
            if st.pass {
                "pass".to_string()
            } else {
                format!("FAIL: {}", st.why)
            }
        )?;
    }
    writeln!(
        out,
        "  (the summary below adds every step together; the table above is each step alone)"
    )
}

/// The capacity of two searches side by side (`compare`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapacityDelta {
    /// A's capacity, messages per second.
    pub a: Option<f64>,
    /// B's.
    pub b: Option<f64>,
    /// B / A - 1, when both found one.
    pub change: Option<f64>,
    /// What ended each search.
    pub limits: [String; 2],
}

/// A's and B's capacity, when both files hold a search.
pub fn compare(a: &SearchReport, b: &SearchReport) -> CapacityDelta {
    let cap = |s: &SearchReport| s.end.as_ref().and_then(|e| e.capacity_per_s);
    let limit = |s: &SearchReport| {
        s.end
            .as_ref()
            .map_or("incomplete".to_string(), |e| e.limit.clone())
    };
    let (ca, cb) = (cap(a), cap(b));
    CapacityDelta {
        a: ca,
        b: cb,
        change: match (ca, cb) {
            (Some(x), Some(y)) if x > 0.0 => Some(y / x - 1.0),
            _ => None,
        },
        limits: [limit(a), limit(b)],
    }
}

/// The comparison's capacity line.
pub fn write_compare(d: &CapacityDelta, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let show = |c: Option<f64>, l: &str| match c {
        Some(c) => format!("{} msgs/s ({l})", rate(c)),
        None => format!("none ({l})"),
    };
    writeln!(
        out,
        "capacity: A {}  B {}{}",
        show(d.a, &d.limits[0]),
        show(d.b, &d.limits[1]),
        d.change
            .map(|c| format!("  B is {:+.1}% against A", c * 100.0))
            .unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(i: u32, offered: f64, p99_ms: u64, pass: bool) -> SearchStep {
        SearchStep {
            index: i,
            kind: "probe".into(),
            offered_per_s: offered,
            sent_per_s: offered,
            received_per_s: offered.min(50_000.0),
            e2e_ns: [1_000_000, p99_ms * 1_000_000, p99_ms * 2_000_000],
            publish_ns: [0; 3],
            lost: 0,
            completeness: 1.0,
            achieved: 1.0,
            valid_share: 1.0,
            verdicts: vec![],
            pass,
            why: String::new(),
            start_s: 0.0,
            end_s: 1.0,
        }
    }

    #[test]
    fn the_knee_keeps_the_last_run_of_each_rate_in_rising_order() {
        let s = SearchReport {
            steps: vec![
                step(1, 40_000.0, 2, true),
                step(2, 80_000.0, 90, false),
                step(3, 60_000.0, 40, false),
                step(4, 40_000.0, 3, true),
            ],
            end: None,
        };
        let k = knee_points(&s);
        assert_eq!(
            k.iter().map(|p| p.offered).collect::<Vec<_>>(),
            [40_000.0, 60_000.0, 80_000.0]
        );
        assert_eq!(k[0].p99_ms, 3.0);
        assert!(!k[2].pass);
    }

    #[test]
    fn comparing_two_capacities() {
        let end = |c: Option<f64>| SearchReport {
            steps: vec![],
            end: Some(SearchEnd {
                objectives: vec![],
                min_achieved: 0.95,
                capacity_per_s: c,
                failed_at_per_s: None,
                runs_at_capacity: 3,
                held_at_capacity: 3,
                limit: "objectives".into(),
                summary: String::new(),
            }),
        };
        let d = compare(&end(Some(40_000.0)), &end(Some(50_000.0)));
        assert!((d.change.unwrap() - 0.25).abs() < 1e-9);
        let mut out = Vec::new();
        write_compare(&d, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("+25.0%"), "{text}");
        assert_eq!(compare(&end(None), &end(Some(1.0))).change, None);
    }
}
