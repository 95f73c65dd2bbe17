//! [`LiveState`]: everything the TUI shows, folded from the records of the results file one at a
//! time. Memory is bounded whatever the length of the run: the per-tick history keeps the last
//! [`HISTORY`] ticks (more than any terminal is wide), the event list the last [`EVENTS`].

use crate::plan::{PlanInfo, RunProgress};
use msgbench_metrics::EventKind;
use msgbench_metrics::aggregate::Integrity;
use msgbench_metrics::{Counters, GroupTick, Histogram, IntervalStats, Phase, StageCounts};
use msgbench_report::{EventRecord, Record};
use std::collections::VecDeque;

/// Ticks kept for the charts (two braille dots per terminal column: enough for 512 columns).
pub const HISTORY: usize = 1024;
/// Events kept for the event list.
pub const EVENTS: usize = 100;

/// Three latency figures of one tick, ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lat {
    /// Values recorded (0: the figures mean nothing).
    pub count: u64,
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest.
    pub max: u64,
}

impl Lat {
    /// The figures of a histogram (all zero when it is empty).
    pub fn of(h: &Histogram) -> Lat {
        if h.is_empty() {
            return Lat::default();
        }
        Lat {
            count: h.len(),
            p50: h.value_at_quantile(0.5),
            p99: h.value_at_quantile(0.99),
            max: h.max(),
        }
    }
}

/// One interval, reduced to what the charts and panels show.
#[derive(Debug, Clone, PartialEq)]
pub struct Tick {
    /// End of the window, s since the start of the run.
    pub t: f64,
    /// Its phase.
    pub phase: Phase,
    /// Window length, s (shorter than a tick at phase boundaries).
    pub dur_s: f64,
    /// Messages sent per second.
    pub sent_per_s: f64,
    /// Messages received per second.
    pub recv_per_s: f64,
    /// Megabytes per second, the larger of sent and received.
    pub mb_per_s: f64,
    /// Generator CPU, percent of one core.
    pub cpu_pct: f64,
    /// Errors of every kind in the window.
    pub errors: u64,
    /// Sends later than the late threshold in the window.
    pub late: u64,
    /// End-to-end latency (intended send → received).
    pub e2e: Lat,
    /// Publish latency (send → ack or reply).
    pub publish: Lat,
    /// Send delay (intended → actual send): the generator's schedule lag.
    pub send_delay: Lat,
    /// Connect latency (connection workloads).
    pub connect: Lat,
    /// Per stage: arrivals per second and latency from the intended send time.
    pub stages: Vec<(f64, Lat)>,
    /// Connections open at the end of the window (connection workloads).
    pub held: Option<u64>,
    /// Generator resident memory, bytes (connection workloads).
    pub rss_bytes: Option<u64>,
    /// Connections opened per second.
    pub connects_per_s: f64,
}

impl Tick {
    /// Reduces an interval.
    pub fn of(iv: &IntervalStats) -> Tick {
        let d = iv.duration_s();
        let c = &iv.counters;
        Tick {
            t: iv.end_s,
            phase: iv.phase,
            dur_s: d,
            sent_per_s: c.sent as f64 / d,
            recv_per_s: c.received as f64 / d,
            mb_per_s: c.sent_bytes.max(c.received_bytes) as f64 / d / 1e6,
            cpu_pct: iv.cpu_s / d * 100.0,
            errors: c.errors.total() + c.connect_failures.total(),
            late: c.late_sends,
            e2e: Lat::of(&iv.histograms.e2e),
            publish: Lat::of(&iv.histograms.publish),
            send_delay: Lat::of(&iv.histograms.send_delay),
            connect: Lat::of(&iv.histograms.connect),
            stages: iv
                .stages
                .iter()
                .map(|s| (s.counts.reached as f64 / d, Lat::of(&s.latency)))
                .collect(),
            held: iv.gauges.map(|g| g.held),
            rss_bytes: iv.gauges.map(|g| g.rss_bytes),
            connects_per_s: c.connects as f64 / d,
        }
    }
}

/// A latency series the latency chart can show (switched with `s`/Tab).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// End-to-end.
    E2e,
    /// Publish (ack or reply).
    Publish,
    /// Connect (connection workloads).
    Connect,
    /// A stage of a multi-stage run, by index.
    Stage(usize),
}

impl Source {
    /// The series' figures in one tick.
    pub fn lat(self, t: &Tick) -> Lat {
        match self {
            Source::E2e => t.e2e,
            Source::Publish => t.publish,
            Source::Connect => t.connect,
            Source::Stage(i) => t.stages.get(i).map(|s| s.1).unwrap_or_default(),
        }
    }
}

/// What the `end` record said.
#[derive(Debug, Clone, PartialEq)]
pub struct EndInfo {
    /// Stopped early.
    pub interrupted: bool,
    /// The final delivery account.
    pub integrity: Integrity,
    /// Validity warnings.
    pub warnings: Vec<String>,
}

/// Everything the TUI shows, from the records seen so far.
#[derive(Debug, Clone, Default)]
pub struct LiveState {
    /// Phase, time left, the plan.
    pub progress: RunProgress,
    /// Host name and logical CPUs, from `begin`.
    pub host: Option<(String, u32)>,
    /// The last [`HISTORY`] ticks, oldest first.
    pub ticks: VecDeque<Tick>,
    /// Counts summed over every interval seen.
    pub totals: Counters,
    /// Per stage, counts summed over every interval seen.
    pub stage_totals: Vec<StageCounts>,
    /// The last [`EVENTS`] events, oldest first.
    pub events: VecDeque<EventRecord>,
    /// `disconnected` events seen.
    pub disconnects: u64,
    /// `warning` and `error` events seen.
    pub warnings: u64,
    /// The last `connected` event's detail.
    pub connected: Option<String>,
    /// Set by the `end` record.
    pub end: Option<EndInfo>,
    /// Records the view could not take in time (its queue was full); shown, never hidden.
    pub skipped_records: u64,
    /// Runs with groups: each group's last window and its totals, in the run's order.
    pub groups: Vec<GroupRow>,
}

/// One group of a run with `[[groups]]`, as its panel row shows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupRow {
    /// The group's last window.
    pub last: GroupTick,
    /// That window's length, s.
    pub dur_s: f64,
    /// Messages sent, received and errors over every window seen.
    pub sent: u64,
    /// See `sent`.
    pub received: u64,
    /// See `sent`.
    pub errors: u64,
}

impl LiveState {
    /// Folds an interval's per-group shares into the group rows.
    fn apply_groups(&mut self, iv: &IntervalStats) {
        for g in &iv.groups {
            let at = match self.groups.iter().position(|r| r.last.name == g.name) {
                Some(i) => i,
                None => {
                    self.groups.push(GroupRow::default());
                    self.groups.len() - 1
                }
            };
            let row = &mut self.groups[at];
            row.sent += g.sent;
            row.received += g.received;
            row.errors += g.errors;
            row.last = g.clone();
            row.dur_s = iv.duration_s();
        }
    }
}

impl LiveState {
    /// Nothing seen yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Folds one record in.
    pub fn apply(&mut self, r: &Record) {
        self.progress.apply(r);
        match r {
            Record::Begin(b) => self.host = Some((b.host.hostname.clone(), b.host.cpus)),
            Record::Interval(iv) => {
                if self.ticks.len() == HISTORY {
                    self.ticks.pop_front();
                }
                self.ticks.push_back(Tick::of(iv));
                self.totals.merge(&iv.counters);
                self.apply_groups(iv);
                for (i, s) in iv.stages.iter().enumerate() {
                    if self.stage_totals.len() <= i {
                        self.stage_totals.resize(i + 1, StageCounts::default());
                    }
                    self.stage_totals[i].merge(&s.counts);
                }
            }
            Record::Event(e) => {
                match e.kind {
                    EventKind::Disconnected => self.disconnects += 1,
                    EventKind::Warning | EventKind::Error => self.warnings += 1,
                    EventKind::Connected => self.connected = Some(e.detail.clone()),
                    _ => {}
                }
                if self.events.len() == EVENTS {
                    self.events.pop_front();
                }
                self.events.push_back(e.clone());
            }
            Record::SearchStep(_) | Record::Search(_) => {}
            Record::End(e) => {
                self.end = Some(EndInfo {
                    interrupted: e.interrupted,
                    integrity: e.integrity,
                    warnings: e.warnings.clone(),
                })
            }
        }
    }

    /// Whether a tick is long enough for its rates to mean something: the slivers at phase
    /// boundaries (a few milliseconds of drain, say) show 0 msgs/s and are left out of the
    /// charts and the "now" figures.
    pub fn is_full(&self, t: &Tick) -> bool {
        t.dur_s >= 0.4 * self.plan().map_or(1.0, |p| p.tick_s)
    }

    /// The ticks whose rates mean something ([`LiveState::is_full`]), oldest first.
    pub fn full_ticks(&self) -> impl DoubleEndedIterator<Item = &Tick> {
        self.ticks.iter().filter(|t| self.is_full(t))
    }

    /// The latest full tick.
    pub fn last_full(&self) -> Option<&Tick> {
        self.full_ticks().next_back()
    }

    /// The plan, once `begin` was seen.
    pub fn plan(&self) -> Option<&PlanInfo> {
        self.progress.plan.as_ref()
    }

    /// The latency series there are, in switching order.
    pub fn sources(&self) -> Vec<Source> {
        let mut v = Vec::new();
        if self.plan().is_some_and(|p| p.connections) {
            v.push(Source::Connect);
        }
        v.push(Source::E2e);
        v.push(Source::Publish);
        let stages = self
            .plan()
            .map_or(0, |p| p.stages.len())
            .max(self.stage_totals.len());
        v.extend((0..stages).map(Source::Stage));
        v
    }

    /// A series' name for people.
    pub fn source_name(&self, s: Source) -> String {
        match s {
            Source::E2e => "end-to-end".into(),
            Source::Publish => "publish".into(),
            Source::Connect => "connect".into(),
            Source::Stage(i) => match self.plan().and_then(|p| p.stages.get(i)) {
                Some(n) if !n.is_empty() => format!("s{} {n}", i + 1),
                _ => format!("stage s{}", i + 1),
            },
        }
    }

    /// Messages lost: the final count once the run ended, before that the sequence gaps still
    /// open (fan-out only: members of a queue group each see part of a stream).
    pub fn lost(&self) -> (u64, bool) {
        match &self.end {
            Some(e) => (e.integrity.lost, true),
            None if self.plan().is_none_or(|p| p.fanout) => (self.totals.open_gaps(), false),
            None => (0, false),
        }
    }

    /// Messages sent but not yet acknowledged (or answered), when the workload acknowledges at
    /// all; timeouts and refusals count as answered.
    pub fn awaiting_ack(&self) -> Option<u64> {
        let c = &self.totals;
        (c.acked > 0).then(|| c.sent.saturating_sub(c.acked + c.nacked + c.errors.timeout))
    }
}
