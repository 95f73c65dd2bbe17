//! Thresholds and their verdicts: what turns a report into pass or fail for CI.
//!
//! A threshold is `METRIC OP VALUE`, written as a user would say it: `e2e.p99 < 10ms`,
//! `lost == 0`, `received_per_s >= 50k`, `completeness >= 99.99%`, `stage.ack.p99 < 20ms`.
//! [`Threshold::parse`] reads one (errors name what was expected); [`evaluate`] judges a
//! [`RunReport`] against a list. Verdicts are a pure function of the report, so `msgbench report
//! FILE --threshold ...` can judge an old results file by new rules, and the run writes the same
//! verdicts into its `end` record.
//!
//! Metrics (see [`METRICS_HELP`]) come from the run's result (the measure phase and its drain)
//! except the delivery account (`lost`, `completeness`, ...), which covers the whole run, as the
//! report's integrity section does. A metric without data (a latency nobody recorded, a stage
//! that does not exist) fails its threshold: a check that cannot be made is not a pass.

use crate::model::{PhaseReport, RunReport};
use msgbench_metrics::LatencySummary;
use serde::{Deserialize, Serialize};

/// What `--threshold` accepts, for help texts and error messages.
pub const METRICS_HELP: &str = "latencies e2e|publish|send_delay|connect .min|.mean|.p50|.p90|.p99|.p999|.p9999|.max \
(values like 10ms, 250us, 1s); counts sent, received, acked, nacked, errors, late_sends, reconnects \
(result), lost, delivered, expected, duplicated, reordered, foreign (whole run); rates sent_per_s, \
received_per_s, sent_mb_per_s, received_mb_per_s (50k, 1.5M); completeness (99.99% or 0.9999); \
cpu_s_per_million; stages stage.NAME.p50|.p99|.max|.reached|.missing|.failed|.msgs_per_s";

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// `<`
    #[serde(rename = "<")]
    Lt,
    /// `<=`
    #[serde(rename = "<=")]
    Le,
    /// `>`
    #[serde(rename = ">")]
    Gt,
    /// `>=`
    #[serde(rename = ">=")]
    Ge,
    /// `==`
    #[serde(rename = "==")]
    Eq,
    /// `!=`
    #[serde(rename = "!=")]
    Ne,
}

impl Op {
    fn symbol(self) -> &'static str {
        match self {
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::Eq => "==",
            Op::Ne => "!=",
        }
    }

    fn holds(self, actual: f64, limit: f64) -> bool {
        match self {
            Op::Lt => actual < limit,
            Op::Le => actual <= limit,
            Op::Gt => actual > limit,
            Op::Ge => actual >= limit,
            Op::Eq => actual == limit,
            Op::Ne => actual != limit,
        }
    }
}

/// What kind of number a metric is: it decides how values are read and shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    /// Nanoseconds; values are durations.
    Nanos,
    /// A count or a rate; values take k/M/G suffixes.
    Number,
    /// A fraction; values may be percentages.
    Fraction,
}

/// One parsed threshold.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    /// The metric's name as written (`e2e.p99`, `stage.ack.reached`).
    pub metric: String,
    /// The comparison.
    pub op: Op,
    /// The limit, in the metric's unit (nanoseconds for latencies, a fraction for
    /// completeness).
    pub value: f64,
    unit: Unit,
}

/// Latency statistics a metric may name.
const STATS: [&str; 8] = ["min", "mean", "p50", "p90", "p99", "p999", "p9999", "max"];
/// Latency families of a run's result.
const LATENCIES: [&str; 4] = ["e2e", "publish", "send_delay", "connect"];
/// Counts and rates of the result, then of the whole run's delivery account.
const NUMBERS: [&str; 18] = [
    "sent",
    "received",
    "acked",
    "nacked",
    "errors",
    "late_sends",
    "reconnects",
    "lost",
    "delivered",
    "expected",
    "duplicated",
    "reordered",
    "foreign",
    "sent_per_s",
    "received_per_s",
    "sent_mb_per_s",
    "received_mb_per_s",
    "cpu_s_per_million",
];

/// The unit of `metric`, or why it is no metric.
fn unit_of(metric: &str) -> Result<Unit, String> {
    if metric == "completeness" {
        return Ok(Unit::Fraction);
    }
    if NUMBERS.contains(&metric) {
        return Ok(Unit::Number);
    }
    if let Some(rest) = metric.strip_prefix("stage.") {
        let Some((name, what)) = rest.rsplit_once('.') else {
            return Err(format!(
                "`{metric}`: a stage metric is stage.NAME.STAT (e.g. stage.ack.p99)"
            ));
        };
        if name.is_empty() {
            return Err(format!("`{metric}`: the stage name is empty"));
        }
        return match what {
            s if STATS.contains(&s) => Ok(Unit::Nanos),
            "reached" | "missing" | "failed" | "msgs_per_s" => Ok(Unit::Number),
            _ => Err(format!(
                "`{metric}`: a stage has {}, reached, missing, failed, msgs_per_s",
                STATS.join(", ")
            )),
        };
    }
    if let Some((family, stat)) = metric.split_once('.')
        && LATENCIES.contains(&family)
    {
        return if STATS.contains(&stat) {
            Ok(Unit::Nanos)
        } else {
            Err(format!(
                "`{metric}`: a latency statistic is one of {}",
                STATS.join(", ")
            ))
        };
    }
    Err(format!("unknown metric `{metric}`; known: {METRICS_HELP}"))
}

impl Threshold {
    /// Reads `METRIC OP VALUE` (spaces optional around the operator).
    ///
    /// # Errors
    /// What is wrong and what was expected, quoting the input.
    pub fn parse(s: &str) -> Result<Threshold, String> {
        let ops = [
            ("<=", Op::Le),
            (">=", Op::Ge),
            ("==", Op::Eq),
            ("!=", Op::Ne),
            ("<", Op::Lt),
            (">", Op::Gt),
        ];
        let Some((at, len, op)) = ops
            .iter()
            .filter_map(|(sym, op)| s.find(sym).map(|i| (i, sym.len(), *op)))
            .min_by_key(|(i, len, _)| (*i, std::cmp::Reverse(*len)))
        else {
            return Err(format!(
                "threshold `{s}`: expected METRIC OP VALUE with OP one of < <= > >= == != (e.g. 'e2e.p99 < 10ms')"
            ));
        };
        let metric = s[..at].trim();
        let value = s[at + len..].trim();
        if metric.is_empty() || value.is_empty() {
            return Err(format!(
                "threshold `{s}`: expected METRIC OP VALUE (e.g. 'lost == 0')"
            ));
        }
        let unit = unit_of(metric).map_err(|e| format!("threshold `{s}`: {e}"))?;
        let value = parse_value(value, unit).map_err(|e| format!("threshold `{s}`: {e}"))?;
        Ok(Threshold {
            metric: metric.to_string(),
            op,
            value,
            unit,
        })
    }

    /// Whether it can be judged while the run goes on: not the delivery account (`lost`,
    /// `completeness`, ...), which is only known once the drain is over.
    pub fn judged_live(&self) -> bool {
        !matches!(
            self.metric.as_str(),
            "lost"
                | "delivered"
                | "expected"
                | "duplicated"
                | "reordered"
                | "foreign"
                | "completeness"
        ) && !self.metric.ends_with(".missing")
    }

    /// The threshold as it reads best (`e2e.p99 < 10ms`).
    pub fn describe(&self) -> String {
        format!(
            "{} {} {}",
            self.metric,
            self.op.symbol(),
            show(self.value, self.unit)
        )
    }
}

/// A number with an optional unit: durations for latencies, k/M/G (and `%` for fractions).
fn parse_value(v: &str, unit: Unit) -> Result<f64, String> {
    let num_end = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+' || c == 'e'))
        .unwrap_or(v.len());
    let (num, suffix) = v.split_at(num_end);
    let n: f64 = num.parse().map_err(|_| format!("`{v}` is not a number"))?;
    if !n.is_finite() {
        return Err(format!("`{v}` is not a finite number"));
    }
    let suffix = suffix.trim();
    let scale = match (unit, suffix) {
        (Unit::Nanos, "ns") => 1.0,
        (Unit::Nanos, "us" | "µs") => 1e3,
        (Unit::Nanos, "ms") => 1e6,
        (Unit::Nanos, "s") => 1e9,
        (Unit::Nanos, "m") => 60e9,
        (Unit::Nanos, "") if n == 0.0 => 1.0,
        (Unit::Nanos, _) => {
            return Err(format!(
                "`{v}`: a latency needs a unit: ns, us, ms, s or m (e.g. 10ms)"
            ));
        }
        (Unit::Number, "") => 1.0,
        (Unit::Number, "k" | "K") => 1e3,
        (Unit::Number, "M") => 1e6,
        (Unit::Number, "G") => 1e9,
        (Unit::Fraction, "%") => 0.01,
        (Unit::Fraction, "") if n <= 1.0 => 1.0,
        (Unit::Fraction, "") => {
            return Err(format!(
                "`{v}`: completeness is a fraction (0.9999) or a percentage (99.99%)"
            ));
        }
        (_, s) => return Err(format!("`{v}`: unexpected unit `{s}`")),
    };
    Ok(n * scale)
}

/// A value in its unit, for people.
fn show(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Nanos => {
            let (n, u) = if v >= 1e9 {
                (v / 1e9, "s")
            } else if v >= 1e6 {
                (v / 1e6, "ms")
            } else if v >= 1e3 {
                (v / 1e3, "us")
            } else {
                (v, "ns")
            };
            format!("{}{u}", trim_float(n))
        }
        Unit::Number => trim_float(v),
        Unit::Fraction => format!("{}%", trim_float(v * 100.0)),
    }
}

/// Up to 4 decimals, trailing zeros dropped.
fn trim_float(v: f64) -> String {
    let s = format!("{v:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() || s == "-" {
        "0".into()
    } else {
        s.to_string()
    }
}

/// One threshold's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The threshold, as [`Threshold::describe`] writes it.
    pub threshold: String,
    /// The metric.
    pub metric: String,
    /// Its value in the run (nanoseconds for latencies, a fraction for completeness); `None`
    /// when the run has no such figure.
    pub actual: Option<f64>,
    /// The value as people read it (`1.23ms`, `99.5%`), or why there is none.
    pub shown: String,
    /// Whether the threshold held.
    pub pass: bool,
}

/// Whether every verdict passed (true for none).
pub fn all_pass(verdicts: &[Verdict]) -> bool {
    verdicts.iter().all(|v| v.pass)
}

/// The value of `metric` in `report`, or why there is none.
fn actual(report: &RunReport, metric: &str) -> Result<f64, String> {
    let result = || -> Result<&PhaseReport, String> {
        report
            .result
            .as_ref()
            .ok_or_else(|| "no measure phase ran".to_string())
    };
    let latency = |l: &LatencySummary, stat: &str| -> Result<f64, String> {
        if l.count == 0 {
            return Err("nothing recorded".into());
        }
        Ok(match stat {
            "min" => l.min as f64,
            "mean" => l.mean,
            "p50" => l.p50 as f64,
            "p90" => l.p90 as f64,
            "p99" => l.p99 as f64,
            "p999" => l.p999 as f64,
            "p9999" => l.p9999 as f64,
            _ => l.max as f64,
        })
    };
    let i = &report.integrity;
    Ok(match metric {
        "completeness" => i.completeness,
        "lost" => i.lost as f64,
        "delivered" => i.delivered as f64,
        "expected" => i.expected as f64,
        "duplicated" => i.duplicated as f64,
        "reordered" => i.reordered as f64,
        "foreign" => i.foreign as f64,
        "sent" => result()?.counters.sent as f64,
        "received" => result()?.counters.received as f64,
        "acked" => result()?.counters.acked as f64,
        "nacked" => result()?.counters.nacked as f64,
        "errors" => result()?.counters.errors.total() as f64,
        "late_sends" => result()?.counters.late_sends as f64,
        "reconnects" => result()?.counters.reconnects as f64,
        "sent_per_s" => result()?.sent_per_s,
        "received_per_s" => result()?.received_per_s,
        "sent_mb_per_s" => result()?.sent_mb_per_s,
        "received_mb_per_s" => result()?.received_mb_per_s,
        "cpu_s_per_million" => result()?.cpu_s_per_million_sent,
        m => {
            if let Some(rest) = m.strip_prefix("stage.") {
                let (name, what) = rest.rsplit_once('.').unwrap_or((rest, ""));
                let s = report
                    .stages
                    .iter()
                    .find(|s| s.name == name)
                    .ok_or_else(|| format!("the run has no stage `{name}`"))?;
                return match what {
                    "reached" => Ok(s.reached as f64),
                    "failed" => Ok(s.failed as f64),
                    "msgs_per_s" => Ok(s.msgs_per_s),
                    "missing" => s
                        .missing
                        .map(|m| m as f64)
                        .ok_or_else(|| "unknown (the run has no end record)".to_string()),
                    stat => latency(&s.latency, stat),
                };
            }
            let (family, stat) = m.split_once('.').unwrap_or((m, ""));
            let r = result()?;
            let l = match family {
                "e2e" => &r.e2e,
                "publish" => &r.publish,
                "send_delay" => &r.send_delay,
                _ => &r.connect,
            };
            latency(l, stat)?
        }
    })
}

/// Judges `report` against each threshold, in order.
pub fn evaluate(report: &RunReport, thresholds: &[Threshold]) -> Vec<Verdict> {
    thresholds
        .iter()
        .map(|t| {
            let (actual, shown, pass) = match actual(report, &t.metric) {
                Ok(v) => (Some(v), show(v, t.unit), t.op.holds(v, t.value)),
                Err(why) => (None, why, false),
            };
            Verdict {
                threshold: t.describe(),
                metric: t.metric.clone(),
                actual,
                shown,
                pass,
            }
        })
        .collect()
}

/// Parses every threshold; the first bad one is the error.
pub fn parse_all<S: AsRef<str>>(list: &[S]) -> Result<Vec<Threshold>, String> {
    list.iter().map(|s| Threshold::parse(s.as_ref())).collect()
}

/// JUnit XML of the verdicts (one test case each), for CI systems that show test results.
pub fn junit(name: &str, verdicts: &[Verdict]) -> String {
    let failures = verdicts.iter().filter(|v| !v.pass).count();
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    x.push_str(&format!(
        "<testsuites name=\"msgbench\" tests=\"{}\" failures=\"{failures}\">\n  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\">\n",
        verdicts.len(),
        xml_escape(name),
        verdicts.len()
    ));
    for v in verdicts {
        x.push_str(&format!(
            "    <testcase classname=\"msgbench.thresholds\" name=\"{}\"",
            xml_escape(&v.threshold)
        ));
        if v.pass {
            x.push_str(&format!(
                "><system-out>actual {}</system-out></testcase>\n",
                xml_escape(&v.shown)
            ));
        } else {
            let msg = format!("{} failed: actual {}", v.threshold, v.shown);
            x.push_str(&format!(
                "><failure message=\"{}\">{}</failure></testcase>\n",
                xml_escape(&msg),
                xml_escape(&msg)
            ));
        }
    }
    x.push_str("  </testsuite>\n</testsuites>\n");
    x
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_parse_with_units() {
        let t = Threshold::parse("e2e.p99 < 10ms").unwrap();
        assert_eq!((t.metric.as_str(), t.op, t.value), ("e2e.p99", Op::Lt, 1e7));
        assert_eq!(t.describe(), "e2e.p99 < 10ms");
        let t = Threshold::parse("received_per_s>=50k").unwrap();
        assert_eq!((t.op, t.value), (Op::Ge, 50_000.0));
        let t = Threshold::parse("completeness >= 99.99%").unwrap();
        assert!((t.value - 0.9999).abs() < 1e-12);
        assert_eq!(t.describe(), "completeness >= 99.99%");
        assert_eq!(Threshold::parse("lost == 0").unwrap().value, 0.0);
        assert_eq!(
            Threshold::parse("publish.p999 <= 250us").unwrap().value,
            250e3
        );
        assert_eq!(
            Threshold::parse("stage.ack.p99 < 1s").unwrap().metric,
            "stage.ack.p99"
        );
        for (bad, says) in [
            ("e2e.p99 10ms", "expected METRIC OP VALUE"),
            ("e2e.p99 < 10", "needs a unit"),
            ("e2e.p98 < 10ms", "latency statistic"),
            ("speed > 3", "unknown metric `speed`"),
            ("lost == x", "not a number"),
            ("completeness > 5", "fraction"),
            ("< 3", "expected METRIC OP VALUE"),
            ("stage.ack.color < 1", "a stage has"),
        ] {
            let e = Threshold::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn values_show_in_their_unit() {
        assert_eq!(show(1_234_567.0, Unit::Nanos), "1.2346ms");
        assert_eq!(show(0.5, Unit::Fraction), "50%");
        assert_eq!(show(50_000.0, Unit::Number), "50000");
    }

    #[test]
    fn junit_names_failures() {
        let v = vec![
            Verdict {
                threshold: "lost == 0".into(),
                metric: "lost".into(),
                actual: Some(3.0),
                shown: "3".into(),
                pass: false,
            },
            Verdict {
                threshold: "e2e.p99 < 10ms".into(),
                metric: "e2e.p99".into(),
                actual: Some(1e6),
                shown: "1ms".into(),
                pass: true,
            },
        ];
        let x = junit("a<b", &v);
        assert!(x.contains("tests=\"2\" failures=\"1\""), "{x}");
        assert!(x.contains("<failure message=\"lost == 0 failed: actual 3\">"));
        assert!(x.contains("name=\"e2e.p99 &lt; 10ms\""));
        assert!(x.contains("testsuite name=\"a&lt;b\""));
    }
}
