//! What a run reports as it goes ([`Observer`], [`RunEvent`]) and how it ends ([`RunOutcome`],
//! [`RunError`]): the runner's public results, kept apart from the machinery that makes them.

use crate::driver::DriverError;
pub use msgbench_metrics::EventKind;
use msgbench_metrics::aggregate::Integrity;
use msgbench_metrics::{IntervalStats, PhaseTotals};
use serde::{Deserialize, Serialize};

/// Receives what happens during a run, as it happens. Implemented by the CLI (live table,
/// results file); kept free of I/O types so tests can collect into memory.
pub trait Observer: Send {
    /// A merged interval is complete.
    fn interval(&mut self, iv: &IntervalStats);
    /// Something happened (phase change, reconnect, error, warning).
    fn event(&mut self, ev: &RunEvent);
}

/// One notable happening, as written to the results file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunEvent {
    /// Seconds since the start of the run (negative while connecting).
    pub at_s: f64,
    /// What happened.
    pub kind: EventKind,
    /// Detail for humans.
    pub detail: String,
}

/// How a run ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunOutcome {
    /// Wall-clock start (Unix ms).
    pub started_unix_ms: u64,
    /// Seconds from the start barrier to the end of the drain.
    pub duration_s: f64,
    /// Figures of every phase that ran, in order.
    pub phases: Vec<PhaseTotals>,
    /// The final delivery account.
    pub integrity: Integrity,
    /// Stopped by Ctrl-C (or SIGTERM) before the plan completed.
    pub interrupted: bool,
    /// Every expected delivery arrived before the drain timeout.
    pub drain_complete: bool,
    /// Things that make the figures less trustworthy, for the report.
    pub warnings: Vec<String>,
    /// Producers that stopped on an error retrying could not fix.
    pub producers_failed: u32,
    /// Connection workloads: peak, rate and memory per connection.
    pub connections: Option<msgbench_metrics::ConnectionSummary>,
    /// Multi-stage runs: each stage and the messages that never reached it.
    pub stages: Vec<msgbench_metrics::StageEnd>,
    /// The kernel's TCP counters of the connections the run's clients closed; absent when
    /// none were asked (in-memory runs, connections held in io_uring tables).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<msgbench_metrics::TcpSummary>,
    /// Backlog runs: the backlog built and how fast it drained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog: Option<msgbench_metrics::BacklogSummary>,
    /// Request/response drivers (HTTP): the responses by status code, and the requests that
    /// got none ([`Driver::responses`](crate::driver::Driver::responses)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responses: Option<msgbench_metrics::ResponseSummary>,
}

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The plan asks for something this driver cannot do.
    #[error("{0}")]
    Unsupported(String),
    /// A client could not connect or subscribe.
    #[error("{role} {id}: {error}")]
    Connect {
        /// `producer` or `consumer`.
        role: &'static str,
        /// Its index.
        id: u32,
        /// The driver's error.
        error: DriverError,
    },
    /// Stopped by Ctrl-C while connecting.
    #[error("interrupted while connecting")]
    Interrupted,
}
