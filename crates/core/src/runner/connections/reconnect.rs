//! A reconnect storm (`[connections] reconnect_at`, `--reconnect-at`): at one instant every held
//! connection is dropped without a goodbye and opened again at once, as thousands of devices do
//! when their network comes back after an outage. It measures what an outage's end costs the
//! server: how long until everyone is back, each reconnection's latency, and who did not make it.
//!
//! The coordinator fires the storm once the ramp is over (so every connection is either held
//! or has failed, and "dropped" is exact) and the time has come; each held connection's task
//! sees it through a `watch` channel, drops its session and reports the new attempt's answer
//! ([`Attempt::Reopened`](super::Attempt) or `ReopenFailed`), timed from the drop.

use crate::clock::now_ns;
use msgbench_metrics::{LatencySummary, ReconnectSummary};
use std::time::Duration;
use tokio::sync::watch;

/// The coordinator's side of the storm.
pub(super) struct ReconnectStorm {
    /// When to fire, from the start of the measure phase.
    pub at: Duration,
    /// Tells held connections to drop and reopen: the instant of the drop (ns), once fired.
    pub tx: watch::Sender<Option<u64>>,
    fired: Option<Fired>,
}

/// A storm that happened.
struct Fired {
    at_ns: u64,
    dropped: u64,
    back: u64,
    failed: u64,
    settled_ns: Option<u64>,
    latency: msgbench_metrics::Histogram,
}

impl ReconnectStorm {
    /// A storm due `at` after the start.
    pub fn new(at: Duration) -> ReconnectStorm {
        ReconnectStorm {
            at,
            tx: watch::channel(None).0,
            fired: None,
        }
    }

    /// Whether it is time to fire: not yet fired, `at` passed, the ramp over.
    pub fn due(&self, t0: u64, now: u64, ramp_over: bool) -> bool {
        self.fired.is_none() && ramp_over && now >= t0 + self.at.as_nanos() as u64
    }

    /// When to look again for [`ReconnectStorm::due`] (`u64::MAX`: fired already).
    pub fn next_look(&self, t0: u64) -> u64 {
        match self.fired {
            None => t0 + self.at.as_nanos() as u64,
            Some(_) => u64::MAX,
        }
    }

    /// Drops the `held` connections: every held connection's task is told.
    pub fn fire(&mut self, now: u64, held: u64) {
        self.fired = Some(Fired {
            at_ns: now,
            dropped: held,
            back: 0,
            failed: 0,
            settled_ns: (held == 0).then_some(now),
            latency: msgbench_metrics::new_histogram(),
        });
        self.tx.send_replace(Some(now));
    }

    /// A dropped connection is open again after `latency_ns` (`None`: it failed to reopen).
    pub fn answer(&mut self, latency_ns: Option<u64>) {
        let Some(f) = self.fired.as_mut() else {
            return;
        };
        match latency_ns {
            Some(ns) => {
                f.back += 1;
                let _ = f.latency.record(ns.max(1));
            }
            None => f.failed += 1,
        }
        if f.settled_ns.is_none() && f.back + f.failed >= f.dropped {
            f.settled_ns = Some(now_ns());
        }
    }

    /// The line the run's events carry once everyone is back (or failed), said once.
    pub fn settled_note(&self, t0: u64) -> Option<String> {
        let f = self.fired.as_ref()?;
        let s = f.settled_ns?;
        let p = |q: f64| f.latency.value_at_quantile(q) as f64 / 1e6;
        Some(format!(
            "reconnect storm at {:.1}s: {} of {} connections back in {:.3}s ({} failed); \
             reconnect latency p50 {:.1} ms, p99 {:.1} ms",
            (f.at_ns.saturating_sub(t0)) as f64 / 1e9,
            f.back,
            f.dropped,
            (s - f.at_ns) as f64 / 1e9,
            f.failed,
            p(0.5),
            p(0.99)
        ))
    }

    /// Whether everyone is back or failed.
    pub fn is_settled(&self) -> bool {
        self.fired.as_ref().is_some_and(|f| f.settled_ns.is_some())
    }

    /// The results file's account (`None`: it never fired).
    pub fn summary(&self, t0: u64) -> Option<ReconnectSummary> {
        let f = self.fired.as_ref()?;
        Some(ReconnectSummary {
            at_s: f.at_ns.saturating_sub(t0) as f64 / 1e9,
            dropped: f.dropped,
            back: f.back,
            failed: f.failed,
            settled_s: f.settled_ns.map(|s| (s - f.at_ns) as f64 / 1e9),
            latency: LatencySummary::of(&f.latency),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_storm_settles_when_every_dropped_connection_answered() {
        let mut s = ReconnectStorm::new(Duration::from_secs(2));
        assert!(!s.due(0, 1_000_000_000, true), "not yet");
        assert!(!s.due(0, 3_000_000_000, false), "not during the ramp");
        assert!(s.due(0, 3_000_000_000, true));
        let mut rx = s.tx.subscribe();
        s.fire(3_000_000_000, 3);
        assert_eq!(*rx.borrow_and_update(), Some(3_000_000_000));
        assert!(!s.due(0, 4_000_000_000, true), "once");
        s.answer(Some(2_000_000));
        s.answer(None);
        assert!(!s.is_settled());
        s.answer(Some(4_000_000));
        assert!(s.is_settled());
        let r = s.summary(0).unwrap();
        assert_eq!((r.dropped, r.back, r.failed), (3, 2, 1));
        assert_eq!(r.latency.count, 2);
        assert!(r.latency.max >= 4_000_000 && r.latency.min <= 2_000_000);
        assert!((r.at_s - 3.0).abs() < 1e-9);
        assert!(
            s.settled_note(0)
                .unwrap()
                .contains("2 of 3 connections back")
        );
    }

    #[test]
    fn a_storm_that_never_fired_has_no_account() {
        let s = ReconnectStorm::new(Duration::from_secs(60));
        assert!(s.summary(0).is_none());
        assert_eq!(s.next_look(5), 60_000_000_005);
    }
}
