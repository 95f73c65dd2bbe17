//! The Prometheus view of a run: [`Exporter`] folds the records of a results file as they are
//! written (begin, intervals, events, end) and renders the live counters, gauges and latency
//! summaries in the Prometheus text exposition format, version 0.0.4. `msgbench run --metrics
//! ADDR` serves [`Exporter::render`] at `/metrics`; the rendering is a pure function of the
//! records seen, like every other view.
//!
//! Every series carries the labels `run` (the plan's name) and `target` (credentials already
//! removed); counters and summaries also carry `phase` (`warmup`, `measure`, `drain`), so a
//! dashboard can keep the warm-up out (`phase!="warmup"`) or sum it away. Latency summaries
//! come twice: cumulative over each phase (`msgbench_e2e_latency_seconds`) and over the last
//! interval only (`msgbench_e2e_latency_last_interval_seconds`), with the quantiles 0.5, 0.9,
//! 0.99 and 0.999 (exact HDR percentiles, not a streaming estimate).

use crate::records::Record;
use msgbench_metrics::{
    ConnectFailure, Counters, ErrorKind, Gauges, Histogram, Histograms, LatencySummary, Phase,
    StageStats,
};
use std::fmt::Write as _;

/// Content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Quantiles of every latency summary.
pub const QUANTILES: [(f64, &str); 4] =
    [(0.5, "0.5"), (0.9, "0.9"), (0.99, "0.99"), (0.999, "0.999")];

/// Every metric family msgbench exports: name, type, help.
pub const FAMILIES: &[(&str, &str, &str)] = &[
    (
        "msgbench_info",
        "gauge",
        "Always 1: the run, target, tool and host.",
    ),
    (
        "msgbench_phase_info",
        "gauge",
        "1 for the phase the run is in.",
    ),
    (
        "msgbench_elapsed_seconds",
        "gauge",
        "Seconds since the start of the run (end of the last interval).",
    ),
    (
        "msgbench_run_finished",
        "gauge",
        "1 once the run has written its end record.",
    ),
    (
        "msgbench_messages_sent_total",
        "counter",
        "Messages handed to the client.",
    ),
    (
        "msgbench_messages_received_total",
        "counter",
        "Deliveries of the run's own messages (duplicates included).",
    ),
    (
        "msgbench_sent_bytes_total",
        "counter",
        "Payload bytes sent.",
    ),
    (
        "msgbench_received_bytes_total",
        "counter",
        "Payload bytes received.",
    ),
    (
        "msgbench_messages_acked_total",
        "counter",
        "Messages the system confirmed (broker ack, reply).",
    ),
    (
        "msgbench_messages_nacked_total",
        "counter",
        "Messages the system refused, or whose ack failed.",
    ),
    (
        "msgbench_late_sends_total",
        "counter",
        "Sends that left later than the late threshold after their intended time.",
    ),
    (
        "msgbench_messages_duplicated_total",
        "counter",
        "Deliveries of a message a consumer had already received.",
    ),
    (
        "msgbench_messages_reordered_total",
        "counter",
        "Deliveries that arrived after a later message of the same stream.",
    ),
    (
        "msgbench_messages_foreign_total",
        "counter",
        "Deliveries that were not this run's messages.",
    ),
    (
        "msgbench_messages_redelivered_total",
        "counter",
        "Deliveries the broker flagged as redelivered.",
    ),
    (
        "msgbench_reconnects_total",
        "counter",
        "Reconnections to the system under test.",
    ),
    ("msgbench_errors_total", "counter", "Errors, by kind."),
    (
        "msgbench_connections_opened_total",
        "counter",
        "Connections opened (connection workloads).",
    ),
    (
        "msgbench_connect_failures_total",
        "counter",
        "Failed connection attempts, by cause.",
    ),
    (
        "msgbench_generator_cpu_seconds_total",
        "counter",
        "CPU seconds the generator process used.",
    ),
    (
        "msgbench_stage_reached_total",
        "counter",
        "Multi-stage runs: messages that reached the stage.",
    ),
    (
        "msgbench_stage_failed_total",
        "counter",
        "Multi-stage runs: messages that failed at the stage.",
    ),
    (
        "msgbench_stage_duplicates_total",
        "counter",
        "Multi-stage runs: repeated observations of a message at the stage.",
    ),
    (
        "msgbench_messages_lost",
        "gauge",
        "Messages lost so far: open sequence gaps of fan-out subscriptions during the run, the final loss after it.",
    ),
    (
        "msgbench_delivery_completeness_ratio",
        "gauge",
        "Delivered / expected deliveries (after the run).",
    ),
    (
        "msgbench_in_flight_messages",
        "gauge",
        "Messages sent and not yet confirmed (runs whose sends are acknowledged).",
    ),
    (
        "msgbench_sent_per_second",
        "gauge",
        "Messages sent per second in the last interval.",
    ),
    (
        "msgbench_received_per_second",
        "gauge",
        "Messages received per second in the last interval.",
    ),
    (
        "msgbench_generator_cpu_ratio",
        "gauge",
        "Generator CPU in the last interval, in cores (1 = one core busy).",
    ),
    (
        "msgbench_connections_held",
        "gauge",
        "Connections open at the end of the last interval (connection workloads).",
    ),
    (
        "msgbench_generator_rss_bytes",
        "gauge",
        "Resident memory of the generator process (connection workloads).",
    ),
    (
        "msgbench_publish_latency_seconds",
        "summary",
        "Publish latency (send to ack or reply) over the phase.",
    ),
    (
        "msgbench_e2e_latency_seconds",
        "summary",
        "End-to-end latency (intended send time to receipt) over the phase.",
    ),
    (
        "msgbench_send_delay_seconds",
        "summary",
        "Send delay (intended to actual send time) over the phase.",
    ),
    (
        "msgbench_connect_latency_seconds",
        "summary",
        "Connect latency (TCP, TLS and protocol handshake) over the phase.",
    ),
    (
        "msgbench_stage_latency_seconds",
        "summary",
        "Multi-stage runs: latency from the intended send time to the stage, over the phase.",
    ),
    (
        "msgbench_publish_latency_last_interval_seconds",
        "summary",
        "Publish latency over the last interval.",
    ),
    (
        "msgbench_e2e_latency_last_interval_seconds",
        "summary",
        "End-to-end latency over the last interval.",
    ),
];

/// Escapes a label value (backslash, double quote, newline).
pub fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A sample value in the exposition format.
fn value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v == v.trunc() && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// A counter family and how to read it from the counts.
type CounterFigure = (&'static str, fn(&Counters) -> u64);

#[derive(Debug)]
struct PhaseState {
    phase: Phase,
    counters: Counters,
    hist: Histograms,
    cpu_s: f64,
    stages: Vec<StageStats>,
}

#[derive(Debug)]
struct LastInterval {
    phase: Phase,
    duration_s: f64,
    counters: Counters,
    publish: Histogram,
    e2e: Histogram,
    cpu_s: f64,
}

/// Folds records into the current figures and renders them (see the module docs).
#[derive(Debug, Default)]
pub struct Exporter {
    run: String,
    target: String,
    tool: String,
    host: String,
    fanout: bool,
    stage_names: Vec<String>,
    phases: Vec<PhaseState>,
    last: Option<LastInterval>,
    gauges: Option<Gauges>,
    open_gaps: i64,
    elapsed_s: f64,
    end: Option<msgbench_metrics::aggregate::Integrity>,
}

impl Exporter {
    /// Nothing seen yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Folds one record.
    pub fn add(&mut self, r: &Record) {
        match r {
            Record::Begin(b) => {
                let s = |p: &str| b.plan.pointer(p).and_then(|v| v.as_str()).unwrap_or("");
                self.run = s("/name").to_string();
                self.target = s("/target").to_string();
                self.tool = b.tool.clone();
                self.host = b.host.hostname.clone();
                self.fanout = matches!(s("/subscription/mode"), "fanout" | "");
                self.stage_names = b.stage_names();
            }
            Record::Interval(i) => {
                let k = match self.phases.iter().position(|p| p.phase == i.phase) {
                    Some(k) => k,
                    None => {
                        self.phases.push(PhaseState {
                            phase: i.phase,
                            counters: Counters::default(),
                            hist: Histograms::new(),
                            cpu_s: 0.0,
                            stages: Vec::new(),
                        });
                        self.phases.len() - 1
                    }
                };
                let p = &mut self.phases[k];
                p.counters.merge(&i.counters);
                p.hist.merge(&i.histograms);
                p.cpu_s += i.cpu_s;
                for (k, s) in i.stages.iter().enumerate() {
                    if p.stages.len() <= k {
                        p.stages.resize_with(k + 1, StageStats::default);
                    }
                    p.stages[k].merge(s);
                }
                self.open_gaps += i.counters.gaps_opened as i64 - i.counters.gaps_filled as i64;
                if i.gauges.is_some() {
                    self.gauges = i.gauges;
                }
                self.elapsed_s = self.elapsed_s.max(i.end_s);
                self.last = Some(LastInterval {
                    phase: i.phase,
                    duration_s: i.duration_s(),
                    counters: i.counters,
                    publish: i.histograms.publish.clone(),
                    e2e: i.histograms.e2e.clone(),
                    cpu_s: i.cpu_s,
                });
            }
            Record::Event(_) | Record::SearchStep(_) | Record::Search(_) => {}
            Record::End(e) => {
                self.end = Some(e.integrity);
                self.elapsed_s = self.elapsed_s.max(e.duration_s);
            }
        }
    }

    fn labels(&self, extra: &[(&str, &str)]) -> String {
        let mut s = format!(
            "run=\"{}\",target=\"{}\"",
            escape_label(&self.run),
            escape_label(&self.target)
        );
        for (k, v) in extra {
            let _ = write!(s, ",{k}=\"{}\"", escape_label(v));
        }
        s
    }

    /// The current figures in the text exposition format (families in [`FAMILIES`] order; a
    /// family without samples is left out).
    pub fn render(&self) -> String {
        let mut samples: Vec<(&str, String, f64)> = Vec::new();
        let mut put = |name: &'static str, labels: String, v: f64| samples.push((name, labels, v));
        put(
            "msgbench_info",
            self.labels(&[("tool", &self.tool), ("host", &self.host)]),
            1.0,
        );
        if let Some(l) = &self.last {
            put(
                "msgbench_phase_info",
                self.labels(&[("phase", l.phase.name())]),
                1.0,
            );
        }
        put("msgbench_elapsed_seconds", self.labels(&[]), self.elapsed_s);
        put(
            "msgbench_run_finished",
            self.labels(&[]),
            f64::from(u8::from(self.end.is_some())),
        );
        let counters: [CounterFigure; 13] = [
            ("msgbench_messages_sent_total", |c| c.sent),
            ("msgbench_messages_received_total", |c| c.received),
            ("msgbench_sent_bytes_total", |c| c.sent_bytes),
            ("msgbench_received_bytes_total", |c| c.received_bytes),
            ("msgbench_messages_acked_total", |c| c.acked),
            ("msgbench_messages_nacked_total", |c| c.nacked),
            ("msgbench_late_sends_total", |c| c.late_sends),
            ("msgbench_messages_duplicated_total", |c| c.duplicated),
            ("msgbench_messages_reordered_total", |c| c.reordered),
            ("msgbench_messages_foreign_total", |c| c.foreign),
            ("msgbench_messages_redelivered_total", |c| c.redelivered),
            ("msgbench_reconnects_total", |c| c.reconnects),
            ("msgbench_connections_opened_total", |c| c.connects),
        ];
        let mut all = Counters::default();
        for p in &self.phases {
            all.merge(&p.counters);
        }
        // Connection counts only mean something in runs that open connections as a workload.
        let conn_workload = all.connects > 0 || all.connect_failures.total() > 0;
        for p in &self.phases {
            let phase = [("phase", p.phase.name())];
            for (name, f) in &counters {
                if *name == "msgbench_connections_opened_total" && !conn_workload {
                    continue;
                }
                put(name, self.labels(&phase), f(&p.counters) as f64);
            }
            put(
                "msgbench_generator_cpu_seconds_total",
                self.labels(&phase),
                p.cpu_s,
            );
            for k in ErrorKind::ALL {
                let kind = format!("{k:?}").to_lowercase();
                put(
                    "msgbench_errors_total",
                    self.labels(&[("phase", p.phase.name()), ("kind", &kind)]),
                    p.counters.errors.get(k) as f64,
                );
            }
            if conn_workload {
                for c in ConnectFailure::ALL {
                    put(
                        "msgbench_connect_failures_total",
                        self.labels(&[("phase", p.phase.name()), ("cause", c.name())]),
                        p.counters.connect_failures.get(c) as f64,
                    );
                }
            }
            for (k, s) in p.stages.iter().enumerate() {
                let name = self.stage_name(k);
                let l = self.labels(&[("phase", p.phase.name()), ("stage", &name)]);
                put(
                    "msgbench_stage_reached_total",
                    l.clone(),
                    s.counts.reached as f64,
                );
                put(
                    "msgbench_stage_failed_total",
                    l.clone(),
                    s.counts.failed as f64,
                );
                put(
                    "msgbench_stage_duplicates_total",
                    l,
                    s.counts.duplicates as f64,
                );
            }
        }
        let lost = match &self.end {
            Some(i) => i.lost as f64,
            None if self.fanout => self.open_gaps.max(0) as f64,
            None => 0.0,
        };
        put("msgbench_messages_lost", self.labels(&[]), lost);
        if let Some(i) = &self.end {
            put(
                "msgbench_delivery_completeness_ratio",
                self.labels(&[]),
                i.completeness,
            );
        }
        if all.acked + all.nacked > 0 {
            let confirmed = all.acked + all.nacked + all.errors.timeout;
            put(
                "msgbench_in_flight_messages",
                self.labels(&[]),
                all.sent.saturating_sub(confirmed) as f64,
            );
        }
        if let Some(l) = &self.last {
            put(
                "msgbench_sent_per_second",
                self.labels(&[]),
                l.counters.sent as f64 / l.duration_s,
            );
            put(
                "msgbench_received_per_second",
                self.labels(&[]),
                l.counters.received as f64 / l.duration_s,
            );
            put(
                "msgbench_generator_cpu_ratio",
                self.labels(&[]),
                l.cpu_s / l.duration_s,
            );
        }
        if let Some(g) = &self.gauges {
            put("msgbench_connections_held", self.labels(&[]), g.held as f64);
            put(
                "msgbench_generator_rss_bytes",
                self.labels(&[]),
                g.rss_bytes as f64,
            );
        }
        let mut summary = |name: &'static str, labels: String, h: &Histogram| {
            if h.is_empty() {
                return;
            }
            let l = LatencySummary::of(h);
            for (q, qs) in QUANTILES {
                samples.push((
                    name,
                    format!("{labels},quantile=\"{qs}\""),
                    h.value_at_quantile(q) as f64 / 1e9,
                ));
            }
            samples.push((
                name,
                format!("{labels}|_sum"),
                l.mean * l.count as f64 / 1e9,
            ));
            samples.push((name, format!("{labels}|_count"), l.count as f64));
        };
        for p in &self.phases {
            let phase = [("phase", p.phase.name())];
            summary(
                "msgbench_publish_latency_seconds",
                self.labels(&phase),
                &p.hist.publish,
            );
            summary(
                "msgbench_e2e_latency_seconds",
                self.labels(&phase),
                &p.hist.e2e,
            );
            summary(
                "msgbench_send_delay_seconds",
                self.labels(&phase),
                &p.hist.send_delay,
            );
            summary(
                "msgbench_connect_latency_seconds",
                self.labels(&phase),
                &p.hist.connect,
            );
            for (k, s) in p.stages.iter().enumerate() {
                let name = self.stage_name(k);
                summary(
                    "msgbench_stage_latency_seconds",
                    self.labels(&[("phase", p.phase.name()), ("stage", &name)]),
                    &s.latency,
                );
            }
        }
        if let Some(l) = &self.last {
            let phase = [("phase", l.phase.name())];
            summary(
                "msgbench_publish_latency_last_interval_seconds",
                self.labels(&phase),
                &l.publish,
            );
            summary(
                "msgbench_e2e_latency_last_interval_seconds",
                self.labels(&phase),
                &l.e2e,
            );
        }
        let mut out = String::new();
        for (family, kind, help) in FAMILIES {
            let mut first = true;
            for (name, labels, v) in samples.iter().filter(|s| s.0 == *family) {
                if first {
                    let _ = writeln!(out, "# HELP {name} {help}");
                    let _ = writeln!(out, "# TYPE {name} {kind}");
                    first = false;
                }
                // Summary `_sum`/`_count` samples carry their suffix after a `|`.
                let (labels, suffix) = labels.split_once('|').unwrap_or((labels, ""));
                let _ = writeln!(out, "{name}{suffix}{{{labels}}} {}", value(*v));
            }
        }
        out
    }

    fn stage_name(&self, k: usize) -> String {
        self.stage_names
            .get(k)
            .cloned()
            .unwrap_or_else(|| format!("s{}", k + 1))
    }
}
