//! # msgbench-metrics
//!
//! Everything msgbench measures, and nothing about how messages move. This crate has no async
//! runtime and no I/O: the runner owns one [`Recorder`] per task (so the hot path takes no lock and
//! allocates nothing per message), swaps it into a [`Snapshot`] every tick, and an [`Aggregator`]
//! merges those snapshots into per-interval and per-phase figures.
//!
//! # Layout
//! - [`counters`]: the plain counts every task keeps (sent, received, bytes, errors by kind...).
//! - [`recorder`]: the per-task [`Recorder`] with its latencies (publish, send delay,
//!   end-to-end, connect), all in nanoseconds; [`tick`] keeps a tick's first few values as they
//!   are and the rest in an HDR histogram.
//! - [`integrity`]: per (producer, stream) sequence tracking at a consumer: gaps, duplicates,
//!   reordering.
//! - [`snapshot`]: what a task hands over each tick, and how snapshots merge exactly.
//! - [`stages`]: multi-stage tracking figures (per stage: reached, latency, duplicates, failed).
//! - [`aggregate`]: interval series and per-phase cumulative state, plus the final integrity
//!   accounting (expected versus delivered).
//! - [`backlog`]: the account of a backlog run (built, released, drained).
//! - [`summary`]: percentiles and rates computed from histograms.
//! - [`tcp`]: the kernel's TCP counters of the generator's connections (segments, bare ACKs,
//!   retransmissions).
//! - [`codec`]: HdrHistogram V2 + DEFLATE + base64, the encoding used in `results.jsonl`.
#![deny(missing_docs)]

pub mod aggregate;
pub mod backlog;
pub mod codec;
pub mod counters;
pub mod group_seen;
pub mod host;
pub mod integrity;
pub mod recorder;
pub mod responses;
pub mod snapshot;
pub mod stages;
pub mod summary;
pub mod tcp;
pub mod tick;

pub use aggregate::{
    Aggregator, ChurnSummary, ConnectionSummary, Gauges, GroupTick, IntervalStats, PhaseTotals,
    ReconnectSummary,
};
pub use backlog::BacklogSummary;
pub use counters::{ConnectFailure, ConnectFailures, Counters, ErrorKind};
pub use group_seen::{GroupSeen, GroupView};
pub use host::{HostSampler, HostStats};
pub use integrity::IntegrityTracker;
pub use recorder::Recorder;
pub use responses::{ResponseSummary, StatusCount};
pub use snapshot::{Histograms, Recorded, RecordedLatencies, Role, Snapshot};
pub use stages::{StageCounts, StageEnd, StageRecorded, StageRecorder, StageStats};
pub use summary::LatencySummary;
pub use tcp::TcpSummary;

use serde::{Deserialize, Serialize};

/// The latency histogram type used everywhere: values are nanoseconds.
pub type Histogram = hdrhistogram::Histogram<u64>;

/// Largest latency recorded as itself (one hour); larger values are clamped to it so a stuck
/// message is still counted rather than dropped.
pub const MAX_LATENCY_NS: u64 = 3_600_000_000_000;

/// Significant decimal digits kept by every histogram (0.1% relative error at any magnitude).
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// A fresh, empty latency histogram. It starts small and grows to the largest value recorded, so
/// a task that records only microsecond latencies holds a few kilobytes, not the whole 1 ns..1 h
/// range.
pub fn new_histogram() -> Histogram {
    Histogram::new(SIGNIFICANT_DIGITS).expect("3 significant digits is a valid histogram precision")
}

/// A histogram allocated for the whole 1 ns..1 h range up front (about 260 KiB). Used where a
/// fixed number of histograms accumulate a whole run (aggregator, phase totals, reports), so
/// their memory does not depend on the latencies seen; per-task recorders use the small,
/// growing [`new_histogram`] instead, as there can be very many of them.
pub fn new_full_histogram() -> Histogram {
    let mut h = Histogram::new_with_bounds(1, MAX_LATENCY_NS, SIGNIFICANT_DIGITS)
        .expect("1 ns..1 h at 3 significant digits is a valid histogram range");
    h.auto(true);
    h
}

/// What a run event is (the `kind` of an `event` record): the one list every reader of the
/// results file matches on, instead of strings spelled in each of them. Written in snake_case;
/// a kind this build does not know (a newer writer's) reads as [`EventKind::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A phase began (`warmup`, `measure`, `drain`) or the run ended (`end`): the detail.
    Phase,
    /// Every client connected (the detail says how many, and how long it took).
    Connected,
    /// A client connected again after losing its connection.
    Reconnected,
    /// A client lost its connection.
    Disconnected,
    /// An error the run went on after (a driver's, or a refused threshold).
    Error,
    /// Something that makes the figures less trustworthy.
    Warning,
    /// A note of a driver or a stage that is neither (an ECP endpoint's event).
    Event,
    /// A threshold failed during the run (`--threshold-abort`).
    Threshold,
    /// The backlog was built and the consumers released.
    Backlog,
    /// A step of a capacity search.
    Search,
    /// A kind this build does not know.
    #[serde(other)]
    Other,
}

impl EventKind {
    /// The name the results file writes.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Phase => "phase",
            EventKind::Connected => "connected",
            EventKind::Reconnected => "reconnected",
            EventKind::Disconnected => "disconnected",
            EventKind::Error => "error",
            EventKind::Warning => "warning",
            EventKind::Event => "event",
            EventKind::Threshold => "threshold",
            EventKind::Backlog => "backlog",
            EventKind::Search => "search",
            EventKind::Other => "other",
        }
    }

    /// Whether a person watching the run is told at once (a line on stderr, a count in the
    /// TUI): connection trouble, errors, warnings and the backlog's release.
    pub fn is_notable(self) -> bool {
        matches!(
            self,
            EventKind::Reconnected
                | EventKind::Disconnected
                | EventKind::Error
                | EventKind::Warning
                | EventKind::Backlog
        )
    }
}

impl std::str::FromStr for EventKind {
    type Err = std::convert::Infallible;

    /// The kind a name stands for ([`EventKind::Other`] for a name this build does not know).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        use serde::de::IntoDeserializer;
        let name: serde::de::value::StrDeserializer<'_, serde::de::value::Error> =
            s.into_deserializer();
        Ok(EventKind::deserialize(name).unwrap_or(EventKind::Other))
    }
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The phases of a run. Warm-up is recorded but excluded from the summary; drain is the bounded
/// wait for messages still in flight after the last send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Load is applied and recorded, but not summarised.
    Warmup,
    /// The measured part of the run.
    Measure,
    /// Producers have stopped; consumers collect what is still in flight.
    Drain,
}

impl Phase {
    /// All phases in run order.
    pub const ALL: [Phase; 3] = [Phase::Warmup, Phase::Measure, Phase::Drain];

    /// The name used in reports and the results file.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Warmup => "warmup",
            Phase::Measure => "measure",
            Phase::Drain => "drain",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::EventKind;

    #[test]
    fn event_kinds_read_and_write_their_names() {
        for k in [
            EventKind::Phase,
            EventKind::Disconnected,
            EventKind::Backlog,
            EventKind::Search,
        ] {
            assert_eq!(k.name().parse::<EventKind>().unwrap(), k);
            assert_eq!(
                serde_json::to_string(&k).unwrap(),
                format!("\"{}\"", k.name())
            );
        }
        // A newer writer's kind reads as Other instead of failing the whole file.
        let k: EventKind = serde_json::from_str("\"rebalanced\"").unwrap();
        assert_eq!(k, EventKind::Other);
        assert!(EventKind::Warning.is_notable() && !EventKind::Phase.is_notable());
    }
}
