//! Live views of a running benchmark: everything beyond the plain per-second table (the
//! terminal UI, the web dashboard, the Prometheus endpoint).
//!
//! Every view sees exactly the records written to the results file, in order, through
//! [`LiveView::record`] — so a view shows nothing the results file does not hold (the results
//! file is the contract). Views are called on the aggregation thread once per interval, never on
//! the hot path; a view must not block (hand the record to its own task or thread and return).

pub mod dashboard;
pub mod metrics;
pub mod tui;

use msgbench_report::Record;

/// One live view of a run.
pub trait LiveView: Send {
    /// A record was written to the results file (`begin`, each `interval` and `event`, `end`).
    fn record(&mut self, record: &Record);
    /// The run is over and its `end` record has been passed to [`LiveView::record`]: release the
    /// terminal, keep or stop serving, as the view's contract says.
    fn finish(&mut self) {}
}
