//! Process-wide totals of the kernel's TCP counters, added to by the drivers' sockets as they
//! close (see `msgbench_net`), read by the runner before and after a run.
//!
//! A global, because a socket's counters are only complete when it closes, which happens deep
//! inside a driver; threading a collector through every driver's connection type would put
//! transport accounting into code that should only speak its protocol. A socket adds once, off
//! the hot path. Two runs at once in one process would see each other's sockets; msgbench runs
//! one at a time.

use msgbench_metrics::TcpSummary;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

static CONNECTIONS: AtomicU64 = AtomicU64::new(0);
static SEGS_OUT: AtomicU64 = AtomicU64::new(0);
static SEGS_IN: AtomicU64 = AtomicU64::new(0);
static DATA_SEGS_OUT: AtomicU64 = AtomicU64::new(0);
static DATA_SEGS_IN: AtomicU64 = AtomicU64::new(0);
static RETRANSMITTED: AtomicU64 = AtomicU64::new(0);
static BATCHED: AtomicU64 = AtomicU64::new(0);

/// Adds one closed connection's counters.
pub fn add(c: &TcpSummary) {
    CONNECTIONS.fetch_add(c.connections, Relaxed);
    SEGS_OUT.fetch_add(c.segs_out, Relaxed);
    SEGS_IN.fetch_add(c.segs_in, Relaxed);
    DATA_SEGS_OUT.fetch_add(c.data_segs_out, Relaxed);
    DATA_SEGS_IN.fetch_add(c.data_segs_in, Relaxed);
    RETRANSMITTED.fetch_add(c.retransmitted, Relaxed);
    BATCHED.fetch_add(c.batched, Relaxed);
}

/// Everything added so far in this process.
pub fn totals() -> TcpSummary {
    TcpSummary {
        connections: CONNECTIONS.load(Relaxed),
        segs_out: SEGS_OUT.load(Relaxed),
        segs_in: SEGS_IN.load(Relaxed),
        data_segs_out: DATA_SEGS_OUT.load(Relaxed),
        data_segs_in: DATA_SEGS_IN.load(Relaxed),
        retransmitted: RETRANSMITTED.load(Relaxed),
        batched: BATCHED.load(Relaxed),
    }
}

/// What was added since `start` (a [`totals`] taken earlier), or `None` when no connection
/// closed in between (in-memory runs, or connections held where the kernel cannot be asked).
pub fn since(start: &TcpSummary) -> Option<TcpSummary> {
    let d = totals().since(start);
    (d.connections > 0).then_some(d)
}
