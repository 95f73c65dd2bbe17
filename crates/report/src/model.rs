//! [`RunReport`]: everything a report shows, computed only from the records of a results file.

use crate::ReportError;
use crate::distribution::Distributions;
use crate::records::{Begin, End, EventRecord, Record};
use msgbench_metrics::EventKind;
use msgbench_metrics::aggregate::Integrity;
use msgbench_metrics::{ConnectionSummary, Counters, Gauges, Histograms, LatencySummary, Phase};
use serde::{Deserialize, Serialize};

/// Figures of one phase.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PhaseReport {
    /// Which phase.
    pub phase: Phase,
    /// Phase length, seconds (the basis of the send rates).
    pub duration_s: f64,
    /// The basis of the receive rates, seconds: the phase length, or for the run's result the
    /// measure phase plus the drain that collected its in-flight messages.
    pub receive_duration_s: f64,
    /// Summed counts.
    pub counters: Counters,
    /// Messages sent per second.
    pub sent_per_s: f64,
    /// Messages received per second.
    pub received_per_s: f64,
    /// Megabytes (10^6 bytes) sent per second.
    pub sent_mb_per_s: f64,
    /// Megabytes received per second.
    pub received_mb_per_s: f64,
    /// Publish latency (send → ack or reply), ns.
    pub publish: LatencySummary,
    /// Send delay (intended → sent), ns.
    pub send_delay: LatencySummary,
    /// End-to-end latency (intended → received), ns.
    pub e2e: LatencySummary,
    /// Connect latency (TCP + TLS + protocol handshake), ns; connection workloads only.
    #[serde(default, skip_serializing_if = "no_values")]
    pub connect: LatencySummary,
    /// CPU seconds the generator used in this phase.
    pub cpu_s: f64,
    /// Generator CPU seconds per million messages sent (0 when nothing was sent).
    pub cpu_s_per_million_sent: f64,
}

/// The whole report of one run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunReport {
    /// The `begin` record (tool, host, plan).
    pub begin: Begin,
    /// Run name from the plan.
    pub name: String,
    /// Target from the plan (credentials already removed).
    pub target: String,
    /// Where consumers connected in a cross-protocol pipeline (credentials removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consume_from: Option<String>,
    /// Whether the file has its `end` record (false: the run was killed; figures are partial).
    pub complete: bool,
    /// Stopped early by Ctrl-C or SIGTERM.
    pub interrupted: bool,
    /// Seconds from start to end (or to the last interval when incomplete).
    pub duration_s: f64,
    /// The result of the run: what was sent in the measure phase, and every delivery, ack and
    /// latency of those messages, including the ones collected during the drain (producers
    /// never send in the drain, so all it records belongs to measured messages; leaving it out
    /// would drop the slowest deliveries). `None` if the measure phase never started.
    pub result: Option<PhaseReport>,
    /// Each phase as recorded (by the time things happened), in order.
    pub phases: Vec<PhaseReport>,
    /// Final delivery account (from `end`; estimated from open gaps when incomplete).
    pub integrity: Integrity,
    /// Warnings from `end`, plus those the report itself adds.
    pub warnings: Vec<String>,
    /// Events other than phase changes.
    pub events: Vec<EventRecord>,
    /// Per-interval rows (counts and latency summaries), for CSV and charts.
    pub intervals: Vec<IntervalRow>,
    /// Connection workloads: peak, rate and memory per connection (from `end`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections: Option<ConnectionSummary>,
    /// The kernel's TCP counters of the generator's connections (from `end`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<msgbench_metrics::TcpSummary>,
    /// Request/response drivers (HTTP): responses by status code (from `end`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responses: Option<msgbench_metrics::ResponseSummary>,
    /// Backlog runs: the backlog built and how fast it drained (from `end`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog: Option<msgbench_metrics::BacklogSummary>,
    /// Multi-stage runs: the stage table.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<crate::stages::StageReport>,
    /// Percentile curves of the result's latencies (the HdrHistogram percentile plot).
    #[serde(default, skip_serializing_if = "Distributions::is_empty")]
    pub distributions: Distributions,
    /// Whether the generator kept up, per interval; `None` without measure intervals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator: Option<GeneratorHealth>,
    /// The verdict of each threshold: from `end` when the run wrote them, else judged here on
    /// the plan's thresholds (a merged or killed run), or on new ones ([`RunReport::judge`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thresholds: Vec<crate::verdict::Verdict>,
    /// A capacity search's steps and answer (files written by `msgbench search`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<crate::search::SearchReport>,
    /// A run with groups: each group's result (the fields above are the run's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupReport>,
}

/// One group of a run with groups, from its `end` figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GroupReport {
    /// The group's name.
    pub name: String,
    /// Its target (credentials removed).
    pub target: String,
    /// Its producers (connections, for a connection workload).
    pub producers: u32,
    /// Its consumers.
    pub consumers: u32,
    /// Deliveries cross between it and other groups (its `lost` is then the run's to judge).
    pub crosses: bool,
    /// What it sent in the measure phase and everything its clients recorded of those
    /// messages (drain included), as the run's `result`. CPU is the process's.
    pub result: Option<PhaseReport>,
    /// Its delivery account.
    pub integrity: Integrity,
    /// Connection workloads: peak, rate, reconnections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections: Option<ConnectionSummary>,
}

impl GroupReport {
    fn of(g: &crate::records::GroupEnd) -> Self {
        let find = |ph: Phase| g.phases.iter().find(|p| p.phase == ph);
        let result = find(Phase::Measure).map(|m| {
            let (mut c, mut h, mut cpu, mut rd) =
                (m.counters, m.histograms.clone(), m.cpu_s, m.duration_s());
            if let Some(d) = find(Phase::Drain) {
                c.merge(&d.counters);
                h.merge(&d.histograms);
                cpu += d.cpu_s;
                rd += d.duration_s();
            }
            PhaseReport::build(Phase::Measure, m.duration_s(), rd, c, &h, cpu)
        });
        GroupReport {
            name: g.name.clone(),
            target: g.target.clone(),
            producers: g.producers,
            consumers: g.consumers,
            crosses: g.crosses,
            result,
            integrity: g.integrity,
            connections: g.connections.clone(),
        }
    }
}

fn no_values(l: &LatencySummary) -> bool {
    l.count == 0
}

/// One interval, summarised.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IntervalRow {
    /// Tick index.
    pub index: u64,
    /// Phase.
    pub phase: Phase,
    /// Window start, s.
    pub start_s: f64,
    /// Window end, s.
    pub end_s: f64,
    /// Counts.
    pub counters: Counters,
    /// End-to-end latency, ns.
    pub e2e: LatencySummary,
    /// Publish latency, ns.
    pub publish: LatencySummary,
    /// Generator CPU seconds in the window.
    pub cpu_s: f64,
    /// Connect latency, ns (connection workloads).
    #[serde(default, skip_serializing_if = "no_values")]
    pub connect: LatencySummary,
    /// Levels at the end of the window (connection workloads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gauges: Option<Gauges>,
    /// Multi-stage runs: each stage's figures in the window, by stage index.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<IntervalStage>,
    /// The generator was saturated in this window (see [`GeneratorHealth`]): its figures may
    /// show msgbench's limit, not the system's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub saturated: bool,
    /// The host over the window, when the run sampled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<msgbench_metrics::HostStats>,
    /// The worst lateness of a timer on the generator's event loops in the window, ns.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub loop_lag_ns: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// Windows shorter than this are not judged, nor counted among the measure phase's intervals.
const SHORTEST_JUDGED_S: f64 = 0.2;

/// Share of the generator's threads' time above which an interval counts as saturated.
pub const SATURATED_BUSY: f64 = 0.9;

/// Event-loop lag at or above which an interval counts as saturated whatever the CPU: a loop
/// that late delays every send and receive on it (a hogged or starved thread).
pub const SATURATED_LAG_NS: u64 = 20_000_000;

/// Whether the generator kept up: judged per interval against the threads it actually ran
/// (its worker threads, or every CPU when it ran on the main runtime), not the whole machine,
/// which a broker on the same host shares.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GeneratorHealth {
    /// The threads the generator's producers and consumers ran on.
    pub threads: u64,
    /// Measure-phase intervals in which the generator's CPU reached [`SATURATED_BUSY`] of them,
    /// or its event loops were [`SATURATED_LAG_NS`] late.
    pub saturated_intervals: u64,
    /// Measure-phase intervals.
    pub measure_intervals: u64,
    /// Share of the measure phase's intervals that were not saturated (1.0: all valid).
    pub valid_share: f64,
    /// The worst event-loop lag of the measure phase, ns (0 when not measured).
    #[serde(default)]
    pub max_loop_lag_ns: u64,
}

/// One stage of a multi-stage run in one interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct IntervalStage {
    /// Messages that reached the stage in the window.
    pub reached: u64,
    /// Messages that failed at the stage in the window.
    pub failed: u64,
    /// Latency from the intended send time, ns.
    pub latency: LatencySummary,
}

impl PhaseReport {
    fn build(
        phase: Phase,
        duration_s: f64,
        receive_duration_s: f64,
        counters: Counters,
        h: &Histograms,
        cpu_s: f64,
    ) -> Self {
        let d = duration_s.max(1e-9);
        let rd = receive_duration_s.max(1e-9);
        PhaseReport {
            phase,
            duration_s,
            receive_duration_s,
            cpu_s,
            cpu_s_per_million_sent: if counters.sent == 0 {
                0.0
            } else {
                cpu_s / counters.sent as f64 * 1e6
            },
            sent_per_s: counters.sent as f64 / d,
            received_per_s: counters.received as f64 / rd,
            sent_mb_per_s: counters.sent_bytes as f64 / d / 1e6,
            received_mb_per_s: counters.received_bytes as f64 / rd / 1e6,
            publish: LatencySummary::of(&h.publish),
            send_delay: LatencySummary::of(&h.send_delay),
            e2e: LatencySummary::of(&h.e2e),
            connect: LatencySummary::of(&h.connect),
            counters,
        }
    }
}

/// Builds a [`RunReport`] one record at a time, keeping only per-phase merged histograms and
/// small per-interval summaries, so memory does not grow with the length of the run. Cloned
/// to judge thresholds on the figures so far without disturbing the run's own builder.
#[derive(Debug, Default, Clone)]
pub struct ReportBuilder {
    begin: Option<Begin>,
    end: Option<End>,
    phases: Vec<PhaseAcc>,
    rows: Vec<IntervalRow>,
    events: Vec<EventRecord>,
    events_dropped: u64,
    stages: crate::stages::StageAcc,
    search: Option<crate::search::SearchReport>,
}

/// What a phase's intervals add up to.
#[derive(Debug, Clone)]
struct PhaseAcc {
    phase: Phase,
    counters: Counters,
    histograms: Histograms,
    start_s: f64,
    end_s: f64,
    cpu_s: f64,
}

/// Events kept in a report; more are counted, not stored.
pub const MAX_EVENTS: usize = 1000;

impl ReportBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one record.
    pub fn add(&mut self, r: &Record) {
        match r {
            Record::Begin(b) => self.begin = Some(b.clone()),
            Record::End(e) => self.end = Some(e.clone()),
            Record::Event(e) if e.kind != EventKind::Phase => {
                if self.events.len() < MAX_EVENTS {
                    self.events.push(e.clone());
                } else {
                    self.events_dropped += 1;
                }
            }
            Record::Event(_) => {}
            Record::SearchStep(s) => self
                .search
                .get_or_insert_with(Default::default)
                .steps
                .push(s.clone()),
            Record::Search(e) => {
                self.search.get_or_insert_with(Default::default).end = Some(e.clone())
            }
            Record::Interval(i) => {
                self.stages.add(i);
                let slot = match self.phases.iter().position(|p| p.phase == i.phase) {
                    Some(k) => k,
                    None => {
                        self.phases.push(PhaseAcc {
                            phase: i.phase,
                            counters: Counters::default(),
                            histograms: Histograms::new_full(),
                            start_s: f64::INFINITY,
                            end_s: 0.0,
                            cpu_s: 0.0,
                        });
                        self.phases.len() - 1
                    }
                };
                let p = &mut self.phases[slot];
                p.counters.merge(&i.counters);
                p.histograms.merge(&i.histograms);
                p.start_s = p.start_s.min(i.start_s);
                p.end_s = p.end_s.max(i.end_s);
                p.cpu_s += i.cpu_s;
                self.rows.push(IntervalRow {
                    index: i.index,
                    phase: i.phase,
                    start_s: i.start_s,
                    end_s: i.end_s,
                    counters: i.counters,
                    e2e: LatencySummary::of(&i.histograms.e2e),
                    publish: LatencySummary::of(&i.histograms.publish),
                    cpu_s: i.cpu_s,
                    connect: LatencySummary::of(&i.histograms.connect),
                    gauges: i.gauges,
                    saturated: false,
                    host: i.host,
                    loop_lag_ns: i.loop_lag_ns,
                    stages: i
                        .stages
                        .iter()
                        .map(|s| IntervalStage {
                            reached: s.counts.reached,
                            failed: s.counts.failed,
                            latency: LatencySummary::of(&s.latency),
                        })
                        .collect(),
                });
            }
        }
    }

    /// The report.
    ///
    /// # Errors
    /// [`ReportError::NoBegin`] when no `begin` record was added.
    pub fn finish(self) -> Result<RunReport, ReportError> {
        let begin = self.begin.ok_or(ReportError::NoBegin)?;
        let end = self.end.as_ref();
        // Counts, latencies and CPU come from the intervals; the phase length from `end` when the
        // run finished (intervals are clipped to whole ticks otherwise).
        let mut recorded: Vec<(Phase, f64, Counters, Histograms, f64)> = Vec::new();
        for phase in Phase::ALL {
            let seen = self.phases.iter().find(|p| p.phase == phase);
            let from_end = end.and_then(|e| e.phases.iter().find(|p| p.phase == phase));
            recorded.push(match (seen, from_end) {
                (None, None) => continue,
                (Some(a), _) => {
                    let d = from_end.map_or((a.end_s - a.start_s).max(0.0), |p| p.duration_s());
                    (phase, d, a.counters, a.histograms.clone(), a.cpu_s)
                }
                (None, Some(p)) => (
                    phase,
                    p.duration_s(),
                    Counters::default(),
                    Histograms::new(),
                    0.0,
                ),
            });
        }
        let phases: Vec<PhaseReport> = recorded
            .iter()
            .map(|(p, d, c, h, cpu)| PhaseReport::build(*p, *d, *d, *c, h, *cpu))
            .collect();
        let mut distributions = Distributions::default();
        let result = recorded.iter().find(|r| r.0 == Phase::Measure).map(|m| {
            let (mut c, mut h, mut cpu, mut rd) = (m.2, m.3.clone(), m.4, m.1);
            if let Some(drain) = recorded.iter().find(|r| r.0 == Phase::Drain) {
                c.merge(&drain.2);
                h.merge(&drain.3);
                cpu += drain.4;
                rd += drain.1;
            }
            distributions = Distributions::of(&h);
            PhaseReport::build(Phase::Measure, m.1, rd, c, &h, cpu)
        });

        let mut warnings = end.map(|e| e.warnings.clone()).unwrap_or_default();
        let mut rows = self.rows;
        let generator = judge_generator(&begin, &mut rows);
        if let Some(g) = &generator
            && g.saturated_intervals > 0
        {
            warnings.push(format!(
                "the generator was saturated (its CPU at {:.0}% or more of its {} thread{}, or its event loops {} ms late or more; worst lag {:.1} ms) in {} of {} measure intervals, so {:.0}% of the measure phase is valid: in those intervals the figures may show msgbench's limit, not the system's (give it more threads with --workers, or spread the load over segments)",
                SATURATED_BUSY * 100.0,
                g.threads,
                if g.threads == 1 { "" } else { "s" },
                SATURATED_LAG_NS / 1_000_000,
                g.max_loop_lag_ns as f64 / 1e6,
                g.saturated_intervals,
                g.measure_intervals,
                g.valid_share * 100.0
            ));
        }
        let integrity = match end {
            Some(e) => e.integrity,
            None => {
                warnings.insert(0, "the results file has no `end` record (the run was killed): figures are partial and loss is estimated from open sequence gaps".into());
                let mut all = Counters::default();
                for p in &phases {
                    all.merge(&p.counters);
                }
                // Estimated: what arrived plus the holes between what arrived (messages in
                // flight when the run was killed, after the last one seen, are not counted).
                let delivered = all.distinct_received();
                let lost = all.open_gaps();
                let expected = delivered + lost;
                Integrity {
                    expected,
                    delivered,
                    lost,
                    duplicated: all.duplicated,
                    reordered: all.reordered,
                    foreign: all.foreign,
                    completeness: if expected == 0 {
                        0.0
                    } else {
                        delivered as f64 / expected as f64
                    },
                }
            }
        };
        warnings.extend(crate::merge::clock_warnings(
            &begin,
            result.as_ref().map(|r| &r.e2e),
        ));
        if self.events_dropped > 0 {
            warnings.push(format!(
                "{} more events are in the results file than the report lists",
                self.events_dropped
            ));
        }
        let duration_s = end
            .map(|e| e.duration_s)
            .unwrap_or_else(|| rows.iter().map(|i| i.end_s).fold(0.0, f64::max));
        let str_field = |k: &str| {
            begin
                .plan
                .get(k)
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_string()
        };
        let stage_names = begin.stage_names();
        let stages = self.stages.finish(
            &stage_names,
            end.map(|e| e.stages.as_slice()),
            result.as_ref().map_or(0, |r| r.counters.sent),
        );
        let mut report = RunReport {
            thresholds: end.map(|e| e.thresholds.clone()).unwrap_or_default(),
            stages,
            name: str_field("name"),
            target: str_field("target"),
            consume_from: Some(str_field("consume_from")).filter(|s| !s.is_empty()),
            complete: end.is_some(),
            interrupted: end.is_some_and(|e| e.interrupted),
            duration_s,
            phases,
            integrity,
            warnings,
            result,
            events: self.events,
            intervals: rows,
            generator,
            connections: end.and_then(|e| e.connections.clone()),
            tcp: end.and_then(|e| e.tcp),
            responses: end.and_then(|e| e.responses.clone()),
            backlog: end.and_then(|e| e.backlog),
            distributions,
            begin,
            search: self.search,
            groups: end
                .map(|e| e.groups.iter().map(GroupReport::of).collect())
                .unwrap_or_default(),
        };
        if report.thresholds.is_empty() {
            let planned = report.planned_thresholds();
            if !planned.is_empty() {
                report.judge(&planned);
            }
        }
        Ok(report)
    }
}

/// Marks the saturated intervals of `rows` and sums up the measure phase's. The generator's
/// threads: the plan's `workers`, or the host's CPUs when it ran on the main runtime.
fn judge_generator(begin: &Begin, rows: &mut [IntervalRow]) -> Option<GeneratorHealth> {
    let threads = match begin.plan.get("workers").and_then(|w| w.as_u64()) {
        Some(n) if n > 0 => n,
        _ => u64::from(begin.host.cpus.max(1)),
    } * (begin.segments.len().max(1) as u64); // a merged run: every segment's threads

    let (mut saturated, mut measured, mut lag) = (0, 0, 0);
    for r in rows.iter_mut() {
        let dt = r.end_s - r.start_s;
        if dt < SHORTEST_JUDGED_S {
            // A phase's sliver past a tick (a count-bounded phase ends whenever its last
            // message goes): CPU time, counted in clock ticks, says nothing over a few ms.
            continue;
        }
        r.saturated =
            r.cpu_s / (threads as f64 * dt) >= SATURATED_BUSY || r.loop_lag_ns >= SATURATED_LAG_NS;
        if r.phase == Phase::Measure {
            measured += 1;
            saturated += u64::from(r.saturated);
            lag = lag.max(r.loop_lag_ns);
        }
    }
    (measured > 0).then(|| GeneratorHealth {
        threads,
        saturated_intervals: saturated,
        measure_intervals: measured,
        valid_share: 1.0 - saturated as f64 / measured as f64,
        max_loop_lag_ns: lag,
    })
}

impl RunReport {
    /// Computes the report from the records of one results file.
    pub fn from_records(records: &[Record]) -> Result<RunReport, ReportError> {
        let mut b = ReportBuilder::new();
        for r in records {
            b.add(r);
        }
        b.finish()
    }

    /// The thresholds the run's plan holds (`thresholds` in `begin`), those that parse.
    pub fn planned_thresholds(&self) -> Vec<crate::verdict::Threshold> {
        self.begin
            .plan
            .get("thresholds")
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|t| t.as_str())
                    .filter_map(|t| crate::verdict::Threshold::parse(t).ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Judges the report against `thresholds`, replacing any verdicts it had.
    pub fn judge(&mut self, thresholds: &[crate::verdict::Threshold]) {
        self.thresholds = crate::verdict::evaluate(self, thresholds);
    }

    /// The result of the run (measure phase plus its drain), if the measure phase ran.
    pub fn measure(&self) -> Option<&PhaseReport> {
        self.result.as_ref()
    }

    /// TCP segments (`segs_in` or `segs_out` of [`tcp`](Self::tcp)) per message sent or
    /// received over the whole run, the span the kernel counted; `None` without TCP figures or
    /// messages.
    pub fn tcp_per_message(&self, pick: fn(&msgbench_metrics::TcpSummary) -> u64) -> Option<f64> {
        let t = self.tcp.as_ref()?;
        let moved: u64 = self
            .phases
            .iter()
            .map(|p| p.counters.sent + p.counters.received)
            .sum();
        (moved > 0).then(|| pick(t) as f64 / moved as f64)
    }
}
