//! Merging task snapshots into interval figures, per-phase totals and the final integrity account.

use crate::Phase;
use crate::counters::Counters;
use crate::snapshot::{Histograms, Role, Snapshot};
use crate::stages::{StageStats, add_to_stages};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// Everything all tasks recorded during one tick of one phase.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntervalStats {
    /// Tick index since the start of the run.
    pub index: u64,
    /// The phase these figures belong to.
    pub phase: Phase,
    /// Window start, seconds since the start of the run.
    pub start_s: f64,
    /// Window end, seconds since the start of the run.
    pub end_s: f64,
    /// Summed counts.
    pub counters: Counters,
    /// Merged latencies.
    pub histograms: Histograms,
    /// CPU seconds the generator process used in this window (all threads). Compared with the
    /// window length it shows whether the generator, not the system under test, was the limit.
    pub cpu_s: f64,
    /// Levels sampled at the end of the window (connection workloads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gauges: Option<Gauges>,
    /// Multi-stage tracking, by stage index (runs with stages only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageStats>,
    /// The host over the window (CPU, memory, network, load), sampled as the interval is
    /// written; absent where `/proc` is not readable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<crate::host::HostStats>,
    /// The worst lateness of a timer on the generator's event loops in the window, ns
    /// (`msgbench_core`'s lag probe): a loop blocked or starved of CPU delays every task on it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub loop_lag_ns: u64,
    /// Runs with `[[groups]]`: each group's share of this interval (the figures above are
    /// their sum), so live views can show groups side by side.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupTick>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// One group's share of an interval, in brief: what the live table, the TUI and the dashboard
/// show per group (the run's full figures stay in the interval itself).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupTick {
    /// The group's name.
    pub name: String,
    /// Messages sent.
    pub sent: u64,
    /// Messages received.
    pub received: u64,
    /// Errors of any kind.
    pub errors: u64,
    /// Connections opened (connection workloads).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub connects: u64,
    /// Connections open at the end of the window (connection workloads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<u64>,
    /// End-to-end latency p50 and p99 of the window, ns (absent without deliveries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e_p50_ns: Option<u64>,
    /// See `e2e_p50_ns`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e_p99_ns: Option<u64>,
}

impl GroupTick {
    /// Group `name`'s share, from its own interval.
    pub fn of(name: &str, iv: &IntervalStats) -> GroupTick {
        let e2e = &iv.histograms.e2e;
        let q = |p: f64| (!e2e.is_empty()).then(|| e2e.value_at_quantile(p));
        GroupTick {
            name: name.to_string(),
            sent: iv.counters.sent,
            received: iv.counters.received,
            errors: iv.counters.errors.total(),
            connects: iv.counters.connects,
            held: iv.gauges.map(|g| g.held),
            e2e_p50_ns: q(0.5),
            e2e_p99_ns: q(0.99),
        }
    }

    /// Adds another share of the same group (counts summed, percentiles the larger: an upper
    /// bound, as summaries cannot be merged exactly).
    pub fn merge(&mut self, o: &GroupTick) {
        self.sent += o.sent;
        self.received += o.received;
        self.errors += o.errors;
        self.connects += o.connects;
        self.held = match (self.held, o.held) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.e2e_p50_ns = self.e2e_p50_ns.max(o.e2e_p50_ns);
        self.e2e_p99_ns = self.e2e_p99_ns.max(o.e2e_p99_ns);
    }
}

/// Levels (not sums) sampled once per interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gauges {
    /// Connections open at the end of the window.
    pub held: u64,
    /// Resident memory of the generator process, bytes.
    pub rss_bytes: u64,
}

/// What a connection workload adds to the end of the results file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionSummary {
    /// `hold` or `storm`.
    pub mode: String,
    /// Connections (hold) or cycles (storm) asked for, if a number was given.
    pub requested: Option<u64>,
    /// Most connections open at once.
    pub peak_held: u64,
    /// Seconds from the first attempt until every hold-mode attempt had an answer (storm: the
    /// measure phase).
    pub ramp_s: f64,
    /// Connections opened per second over `ramp_s`.
    pub connections_per_s: f64,
    /// Generator resident memory before the first connection, bytes.
    pub rss_baseline_bytes: u64,
    /// Generator resident memory with `peak_held` connections open, bytes.
    pub rss_peak_bytes: u64,
    /// (peak − baseline) / peak_held: the generator's memory cost of one held connection.
    pub rss_per_connection_bytes: f64,
    /// The process's open-file limit during the run.
    pub fd_limit: u64,
    /// Connections were held in io_uring tables, beyond the open-file limit (only attempts in
    /// flight took descriptors).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fd_free: bool,
    /// The reconnect storm, if the plan asked for one (`[connections] reconnect_at`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconnect: Option<ReconnectSummary>,
    /// Churn, if the plan asked for it (`[connections] churn`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub churn: Option<ChurnSummary>,
    /// Periodic publishes (`publish_interval`) whose time came while their connection was
    /// down after a storm's or churn's drop: the messages an outage cost. They are not made
    /// up later.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub publishes_missed: u64,
}

/// Churn: held connections dropped one at a time at a steady rate and opened again at once,
/// as a fleet of devices on flaky networks does all day.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChurnSummary {
    /// Drops asked for per second.
    pub rate: f64,
    /// When the first drop was made, seconds since the start of the run (the ramp's end).
    pub from_s: f64,
    /// Connections dropped (each then opened again).
    pub dropped: u64,
    /// Of those, how many were open again.
    pub back: u64,
    /// Of those, how many failed to open again (and stayed closed).
    pub failed: u64,
    /// Drops that were due when no connection was held to take them.
    pub skipped: u64,
    /// Each reconnection's latency, from the drop to the new connection ready, nanoseconds.
    pub latency: crate::LatencySummary,
}

/// A reconnect storm: every held connection dropped at one instant and opened again at once,
/// as devices do when their network comes back after an outage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconnectSummary {
    /// When the connections were dropped, seconds since the start of the run.
    pub at_s: f64,
    /// Connections held at that instant, each dropped and opened again.
    pub dropped: u64,
    /// Of those, how many were open again.
    pub back: u64,
    /// Of those, how many failed to open again (and stayed closed).
    pub failed: u64,
    /// Seconds from the drop until the last one was back or had failed (`None`: the run
    /// ended first).
    pub settled_s: Option<f64>,
    /// Each reconnection's latency, from the drop to the new connection ready, nanoseconds.
    pub latency: crate::LatencySummary,
}

impl IntervalStats {
    /// Window length in seconds (never zero, so rates stay finite).
    pub fn duration_s(&self) -> f64 {
        (self.end_s - self.start_s).max(1e-9)
    }
}

/// Cumulative figures of one phase.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhaseTotals {
    /// Which phase.
    pub phase: Phase,
    /// Phase start, seconds since the start of the run.
    pub start_s: f64,
    /// Phase end, seconds since the start of the run.
    pub end_s: f64,
    /// Summed counts.
    pub counters: Counters,
    /// Merged latencies.
    pub histograms: Histograms,
    /// CPU seconds the generator process used during the phase.
    pub cpu_s: f64,
    /// Multi-stage tracking, by stage index (runs with stages only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageStats>,
}

impl PhaseTotals {
    fn new(phase: Phase) -> Self {
        Self {
            phase,
            start_s: 0.0,
            end_s: 0.0,
            counters: Counters::default(),
            histograms: Histograms::new_full(),
            cpu_s: 0.0,
            stages: Vec::new(),
        }
    }

    /// Phase length in seconds (never zero).
    pub fn duration_s(&self) -> f64 {
        (self.end_s - self.start_s).max(1e-9)
    }
}

/// The final delivery account of a run, over all phases.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Integrity {
    /// Deliveries expected: each message sent times the receivers it should reach (every consumer
    /// of a fan-out subscription, one member of a queue group).
    pub expected: u64,
    /// Distinct deliveries (duplicates removed).
    pub delivered: u64,
    /// Expected deliveries that never arrived (after the drain).
    pub lost: u64,
    /// Deliveries of a message a consumer had already received.
    pub duplicated: u64,
    /// Deliveries that arrived after a later message of the same stream.
    pub reordered: u64,
    /// Deliveries that were not this run's messages.
    pub foreign: u64,
    /// `delivered / expected` (1.0 when nothing was expected).
    pub completeness: f64,
}

#[derive(Debug, Default, Clone, Copy)]
struct ProducerAccount {
    sent: u64,
    receivers: u64,
}

/// An interval still collecting snapshots.
#[derive(Debug, Default)]
struct Pending {
    counters: Counters,
    histograms: Histograms,
    cpu_s: f64,
    loop_lag_ns: u64,
    gauges: Option<Gauges>,
    stages: Vec<StageStats>,
}

/// Merges snapshots as they arrive. Owned by the runner's aggregation task; not shared.
#[derive(Debug)]
pub struct Aggregator {
    tick_s: f64,
    pending: BTreeMap<(u64, Phase), Pending>,
    phases: [PhaseTotals; 3],
    phase_bounds: [(Option<f64>, Option<f64>); 3],
    producers: HashMap<u32, ProducerAccount>,
}

fn slot(p: Phase) -> usize {
    match p {
        Phase::Warmup => 0,
        Phase::Measure => 1,
        Phase::Drain => 2,
    }
}

impl Aggregator {
    /// An aggregator whose interval `k` covers `[k * tick_s, (k + 1) * tick_s)` seconds.
    pub fn new(tick_s: f64) -> Self {
        Self {
            tick_s,
            pending: BTreeMap::new(),
            phases: Phase::ALL.map(PhaseTotals::new),
            phase_bounds: [(None, None); 3],
            producers: HashMap::new(),
        }
    }

    /// Declares a producer and how many receivers each of its messages should reach.
    pub fn register_producer(&mut self, task: u32, receivers_per_message: u64) {
        self.producers.entry(task).or_default().receivers = receivers_per_message;
    }

    /// Messages producer `task` sent by its snapshots so far (every phase).
    pub fn producer_sent(&self, task: u32) -> u64 {
        self.producers.get(&task).map_or(0, |p| p.sent)
    }

    /// Marks the start of `phase` at `at_s` seconds into the run.
    pub fn begin_phase(&mut self, phase: Phase, at_s: f64) {
        self.phase_bounds[slot(phase)].0 = Some(at_s);
        self.phases[slot(phase)].start_s = at_s;
    }

    /// Marks the end of `phase` at `at_s` seconds into the run.
    pub fn end_phase(&mut self, phase: Phase, at_s: f64) {
        self.phase_bounds[slot(phase)].1 = Some(at_s);
        self.phases[slot(phase)].end_s = at_s;
    }

    /// Whether `phase` was entered at all.
    pub fn phase_started(&self, phase: Phase) -> bool {
        self.phase_bounds[slot(phase)].0.is_some()
    }

    /// Merges one task's snapshot.
    pub fn add(&mut self, s: &Snapshot) {
        if s.role == Role::Producer {
            self.producers.entry(s.task).or_default().sent += s.counters.sent;
        }
        if s.warmup_outcomes != Counters::default() {
            self.phases[slot(Phase::Warmup)]
                .counters
                .merge(&s.warmup_outcomes);
        }
        let entry = self.pending.entry((s.interval, s.phase)).or_default();
        entry.counters.merge(&s.counters);
        entry.histograms.add_recorded(&s.hist);
        let totals = &mut self.phases[slot(s.phase)];
        totals.counters.merge(&s.counters);
        totals.histograms.add_recorded(&s.hist);
        if !s.stages.is_empty() {
            add_to_stages(&mut entry.stages, &s.stages, false);
            add_to_stages(&mut totals.stages, &s.stages, true);
        }
    }

    /// Sets the levels sampled at the end of interval `interval` of `phase`.
    pub fn record_gauges(&mut self, interval: u64, phase: Phase, g: Gauges) {
        self.pending.entry((interval, phase)).or_default().gauges = Some(g);
    }

    /// Adds `cpu_s` seconds of generator CPU to interval `interval` of `phase`.
    pub fn record_cpu(&mut self, interval: u64, phase: Phase, cpu_s: f64) {
        self.pending.entry((interval, phase)).or_default().cpu_s += cpu_s;
        self.phases[slot(phase)].cpu_s += cpu_s;
    }

    /// The worst event-loop lag seen during interval `interval` (ns; the worst of several
    /// samples is kept).
    pub fn record_lag(&mut self, interval: u64, phase: Phase, lag_ns: u64) {
        let p = self.pending.entry((interval, phase)).or_default();
        p.loop_lag_ns = p.loop_lag_ns.max(lag_ns);
    }

    /// Removes and returns the intervals with index `<= upto`, oldest first.
    pub fn take_intervals(&mut self, upto: u64) -> Vec<IntervalStats> {
        let keep = self.pending.split_off(&(upto + 1, Phase::Warmup));
        let done = std::mem::replace(&mut self.pending, keep);
        done.into_iter()
            .map(|((index, phase), p)| self.interval(index, phase, p))
            .collect()
    }

    /// Removes and returns every pending interval.
    pub fn take_all_intervals(&mut self) -> Vec<IntervalStats> {
        self.take_intervals(u64::MAX - 1)
    }

    fn interval(&self, index: u64, phase: Phase, p: Pending) -> IntervalStats {
        let (p_start, p_end) = self.phase_bounds[slot(phase)];
        let mut start_s = index as f64 * self.tick_s;
        let mut end_s = start_s + self.tick_s;
        if let Some(ps) = p_start {
            start_s = start_s.max(ps);
        }
        if let Some(pe) = p_end {
            end_s = end_s.min(pe);
        }
        if end_s <= start_s {
            end_s = start_s + 1e-3;
        }
        IntervalStats {
            index,
            phase,
            start_s,
            end_s,
            counters: p.counters,
            histograms: p.histograms,
            cpu_s: p.cpu_s,
            gauges: p.gauges,
            stages: p.stages,
            host: None,
            loop_lag_ns: p.loop_lag_ns,
            groups: Vec::new(),
        }
    }

    /// Cumulative figures of one phase so far.
    pub fn totals(&self, phase: Phase) -> &PhaseTotals {
        &self.phases[slot(phase)]
    }

    /// Counts summed over all phases.
    pub fn all_counters(&self) -> Counters {
        let mut c = Counters::default();
        for p in &self.phases {
            c.merge(&p.counters);
        }
        c
    }

    /// Deliveries expected so far (messages sent times their receivers).
    pub fn expected_deliveries(&self) -> u64 {
        self.producers.values().map(|p| p.sent * p.receivers).sum()
    }

    /// The delivery account over all phases. Call after the drain for a final figure.
    pub fn integrity(&self) -> Integrity {
        let c = self.all_counters();
        let expected = self.expected_deliveries();
        let delivered = c.distinct_received();
        Integrity {
            expected,
            delivered,
            lost: expected.saturating_sub(delivered),
            duplicated: c.duplicated,
            reordered: c.reordered,
            foreign: c.foreign,
            completeness: if expected == 0 {
                1.0
            } else {
                delivered as f64 / expected as f64
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Recorder;

    fn producer_snap(task: u32, phase: Phase, interval: u64, n: u64) -> Snapshot {
        let mut r = Recorder::new(u64::MAX);
        for i in 0..n {
            r.record_send(i, i + 10, 100);
        }
        r.take(Role::Producer, task, phase, interval)
    }

    fn consumer_snap(task: u32, phase: Phase, interval: u64, n: u64) -> Snapshot {
        let mut r = Recorder::new(u64::MAX);
        for _ in 0..n {
            r.record_delivery(1000, 100);
        }
        r.take(Role::Consumer, task, phase, interval)
    }

    #[test]
    fn intervals_and_phases_split_cleanly() {
        let mut a = Aggregator::new(1.0);
        a.register_producer(0, 2);
        a.begin_phase(Phase::Warmup, 0.0);
        a.add(&producer_snap(0, Phase::Warmup, 0, 10));
        a.end_phase(Phase::Warmup, 1.0);
        a.begin_phase(Phase::Measure, 1.0);
        a.add(&producer_snap(0, Phase::Measure, 1, 20));
        a.add(&consumer_snap(0, Phase::Measure, 1, 20));
        a.add(&consumer_snap(1, Phase::Measure, 1, 20));
        let first = a.take_intervals(0);
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].counters.sent, 10);
        let second = a.take_intervals(1);
        assert_eq!(second.len(), 1);
        assert_eq!(second[0].counters.received, 40);
        assert_eq!(a.totals(Phase::Measure).counters.sent, 20);
        assert_eq!(a.totals(Phase::Warmup).counters.sent, 10);
        // 30 messages sent, 2 receivers each, 40 delivered (the warm-up deliveries never came).
        let i = a.integrity();
        assert_eq!((i.expected, i.delivered, i.lost), (60, 40, 20));
    }
}
