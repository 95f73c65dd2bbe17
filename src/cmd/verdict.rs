//! Verdicts at the edge: what a finished run (or a re-judged results file) concludes, the exit
//! code that carries it, and the files CI reads it from (JUnit XML, the JSON summary).
//!
//! Exit codes, documented in `run --help` and docs/GUIDE.md ("Verdicts"):
//! 0 success; 1 could not run; 2 usage error; 3 verdict failed (a threshold failed, or without
//! thresholds nothing was delivered where deliveries were expected, nothing was confirmed
//! where confirmations were expected, producers sent nothing at all, or a connection workload
//! opened no connection at all);
//! 130 interrupted.

use crate::cli::args::VerdictArgs;
use anyhow::{Context, Result};
use msgbench_metrics::EventKind;
use msgbench_report::RunReport;
use std::path::Path;

/// The run completed and every threshold passed.
pub const EXIT_OK: u8 = 0;
/// The run could not be made (unreachable target, every producer failed, I/O).
pub const EXIT_COULD_NOT_RUN: u8 = 1;
/// What was asked is wrong: a flag, URL, scenario or threshold.
pub const EXIT_USAGE: u8 = 2;
/// The verdict failed.
pub const EXIT_VERDICT: u8 = 3;
/// Stopped by Ctrl-C, SIGTERM or SIGHUP.
pub const EXIT_INTERRUPTED: u8 = 130;

/// Version of the `--summary` JSON; bumped only when a field changes meaning or goes away.
pub const SUMMARY_VERSION: u32 = 1;

/// An error in what the user asked for: `main` exits with [`EXIT_USAGE`].
#[derive(Debug)]
pub struct UsageError(pub anyhow::Error);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for UsageError {}

/// Marks an error as the user's.
pub fn usage(e: anyhow::Error) -> anyhow::Error {
    anyhow::Error::new(UsageError(e))
}

/// What a report concludes: the exit code and, when it is not success, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conclusion {
    /// One of the `EXIT_*` codes.
    pub code: u8,
    /// Why, for people (none on success).
    pub reason: Option<String>,
}

/// Judges a finished report. `interrupted`: stopped by a signal (a threshold abort is not
/// one: it is a failed verdict).
pub fn conclude(report: &RunReport, interrupted: bool) -> Conclusion {
    let failed: Vec<&str> = report
        .thresholds
        .iter()
        .filter(|v| !v.pass)
        .map(|v| v.threshold.as_str())
        .collect();
    if !failed.is_empty() {
        return Conclusion {
            code: EXIT_VERDICT,
            reason: Some(format!(
                "{} of {} thresholds failed: {}",
                failed.len(),
                report.thresholds.len(),
                failed.join("; ")
            )),
        };
    }
    if interrupted {
        return Conclusion {
            code: EXIT_INTERRUPTED,
            reason: Some("interrupted".into()),
        };
    }
    let i = &report.integrity;
    // A segment of a split run sees only its share of the account (a producers-only segment
    // delivers nothing by design): the merged file is where delivery is judged.
    let segment = report
        .begin
        .plan
        .get("segment")
        .is_some_and(|s| !s.is_null());
    if report.thresholds.is_empty() && !segment && i.expected > 0 && i.delivered == 0 {
        return Conclusion {
            code: EXIT_VERDICT,
            reason: Some(format!(
                "nothing was delivered: 0 of {} expected deliveries arrived",
                i.expected
            )),
        };
    }
    // Producers that sent nothing at all (a peer granting no AMQP 1.0 credit, a broker
    // blocking every publish from the start) measured nothing: expected is 0 then, so the
    // delivery rule above cannot see it.
    if report.thresholds.is_empty()
        && report.connections.is_none()
        && runs_producers(report)
        && report.phases.iter().all(|p| p.counters.sent == 0)
    {
        let last = report
            .events
            .iter()
            .rev()
            .find(|e| matches!(e.kind, EventKind::Warning | EventKind::Error))
            .map(|e| format!("; the last warning: {}", e.detail))
            .unwrap_or_default();
        return Conclusion {
            code: EXIT_VERDICT,
            reason: Some(format!(
                "nothing was sent: no producer got one message out (held back by the system \
                 under test's flow control, or every send failed: the report counts the \
                 errors){last}"
            )),
        };
    }
    // Where the protocol confirms (acks, HTTP responses), a run in which every answer was a
    // refusal or never came measured nothing but the failures: it does not pass quietly
    // either (a broker refusing every publish, a server answering 503 to every request).
    if report.thresholds.is_empty() && !segment && report.connections.is_none() {
        let (sent, acked, refused, doubt) = report.phases.iter().fold((0, 0, 0, 0), |a, p| {
            let c = &p.counters;
            (
                a.0 + c.sent,
                a.1 + c.acked,
                a.2 + c.nacked,
                a.3 + c.errors.timeout,
            )
        });
        if sent > 0 && acked == 0 && refused + doubt > 0 {
            return Conclusion {
                code: EXIT_VERDICT,
                reason: Some(format!(
                    "nothing was confirmed: of {sent} sent, {refused} refused and {doubt} in \
                     doubt (unanswered), none acknowledged"
                )),
            };
        }
    }
    // A connection workload in which not one connection opened measured nothing but the
    // refusals: like a message run where nothing arrived, it does not pass quietly.
    if report.thresholds.is_empty() && !segment && report.connections.is_some() {
        let (connects, failures) = report.phases.iter().fold((0, 0), |(c, f), p| {
            (
                c + p.counters.connects,
                f + p.counters.connect_failures.total(),
            )
        });
        if connects == 0 && failures > 0 {
            return Conclusion {
                code: EXIT_VERDICT,
                reason: Some(format!(
                    "no connection opened: all {failures} attempts failed (the report counts \
                     them by cause)"
                )),
            };
        }
    }
    Conclusion {
        code: EXIT_OK,
        reason: None,
    }
}

/// Whether this process ran producers: the plan has some, and a segment of a split run is not
/// the consumers' (a segment split by tasks may hold none, so it is left to the merged file).
fn runs_producers(report: &RunReport) -> bool {
    let plan = &report.begin.plan;
    let planned = plan
        .get("producers_per_topic")
        .and_then(|v| v.as_u64())
        .is_some_and(|n| n > 0);
    match plan.get("segment").filter(|s| !s.is_null()) {
        None => planned,
        Some(seg) => {
            planned
                && seg.get("split").and_then(|v| v.as_str()) == Some("roles")
                && seg.get("index").and_then(|v| v.as_u64()) == Some(0)
        }
    }
}

/// The `--summary` document: stable field names (see docs/GUIDE.md, "Verdicts").
pub fn summary(
    report: &RunReport,
    c: &Conclusion,
    results_file: Option<&Path>,
) -> serde_json::Value {
    let lat = |l: &msgbench_metrics::LatencySummary| {
        serde_json::json!({
            "count": l.count, "p50_ns": l.p50, "p90_ns": l.p90, "p99_ns": l.p99,
            "p999_ns": l.p999, "max_ns": l.max,
        })
    };
    let result = report.result.as_ref().map(|r| {
        serde_json::json!({
            "duration_s": r.duration_s,
            "sent": r.counters.sent,
            "received": r.counters.received,
            "errors": r.counters.errors.total(),
            "sent_per_s": r.sent_per_s,
            "received_per_s": r.received_per_s,
            "sent_mb_per_s": r.sent_mb_per_s,
            "received_mb_per_s": r.received_mb_per_s,
            "cpu_s_per_million_sent": r.cpu_s_per_million_sent,
            "e2e": lat(&r.e2e),
            "publish": lat(&r.publish),
        })
    });
    serde_json::json!({
        "summary_version": SUMMARY_VERSION,
        "verdict": match c.code {
            EXIT_OK => "pass",
            EXIT_INTERRUPTED => "interrupted",
            _ => "fail",
        },
        "exit_code": c.code,
        "reason": c.reason,
        "name": report.name,
        "target": report.target,
        "run_id": report.begin.plan.get("run_id"),
        "complete": report.complete,
        "interrupted": report.interrupted,
        "results_file": results_file.map(|p| p.display().to_string()),
        "thresholds": report.thresholds,
        "result": result,
        "integrity": report.integrity,
        "warnings": report.warnings,
    })
}

/// Writes `--junit` and `--summary` as asked.
pub fn write_outputs(
    args: &VerdictArgs,
    report: &RunReport,
    c: &Conclusion,
    results_file: Option<&Path>,
) -> Result<()> {
    if let Some(p) = &args.junit {
        let name = if report.name.is_empty() {
            "msgbench"
        } else {
            &report.name
        };
        std::fs::write(p, msgbench_report::verdict::junit(name, &report.thresholds))
            .with_context(|| format!("cannot write --junit {}", p.display()))?;
    }
    if let Some(p) = &args.summary {
        let mut text = serde_json::to_string_pretty(&summary(report, c, results_file))?;
        text.push('\n');
        std::fs::write(p, text)
            .with_context(|| format!("cannot write --summary {}", p.display()))?;
    }
    Ok(())
}

/// Says on stderr why the verdict is not success, and any loss the thresholds did not judge
/// (a run without them still passes with loss, but never quietly).
pub fn explain(c: &Conclusion, report: &RunReport) {
    if c.code == EXIT_VERDICT
        && let Some(r) = &c.reason
    {
        eprintln!("msgbench: verdict FAILED (exit code {EXIT_VERDICT}): {r}");
    }
    let i = &report.integrity;
    let judged = report
        .thresholds
        .iter()
        .any(|v| matches!(v.metric.as_str(), "lost" | "completeness" | "delivered"));
    if c.code == EXIT_OK && i.lost > 0 && !judged {
        eprintln!(
            "msgbench: WARNING: {} of {} expected deliveries were lost ({:.4}%); add --threshold 'lost == 0' to fail the run on loss",
            i.lost,
            i.expected,
            i.lost as f64 * 100.0 / i.expected.max(1) as f64
        );
    }
}
