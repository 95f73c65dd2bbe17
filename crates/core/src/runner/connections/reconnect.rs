//! A reconnect storm (`[connections] reconnect_at`, `--reconnect-at`): at one instant every held
//! connection is dropped without a goodbye and opened again at once, as thousands of devices do
//! when their network comes back after an outage. It measures what an outage's end costs the
//! server: how long until everyone is back, each reconnection's latency, and who did not make it.
//!
//! The coordinator fires the storm once the ramp is over (so every connection is either held
//! or has failed, and "dropped" is exact) and the time has come; each held connection's task
//! sees it through a `watch` channel, drops its session and reports the new attempt's answer
//! ([`Attempt::Reopened`](super::Attempt) or `ReopenFailed`), timed from the drop.
//!
//! Churn (`[connections] churn`, `--churn`) is the steady form: from the ramp's end, held
//! connections are dropped one at a time at a rate (evenly or Poisson, as `arrival`), the next
//! held one round the fleet each time, and each opens again at once. Each connection has a
//! [`ChurnSlot`]; the coordinator claims a held one and wakes only that task, so a drop costs
//! one wake-up however many connections are held.

use super::arrival::ArrivalSchedule;
use crate::clock::now_ns;
use crate::scenario::Arrival;
use msgbench_metrics::{ChurnSummary, LatencySummary, ReconnectSummary};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;
use tokio::sync::{Notify, watch};

/// Why a held connection was dropped by the generator (its reopening is answered to that).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DropCause {
    /// The reconnect storm.
    Storm,
    /// Churn.
    Churn,
}

/// The coordinator's side of the storm.
pub(super) struct ReconnectStorm {
    /// When to fire, from the start of the measure phase.
    pub at: Duration,
    /// Tells held connections to drop and reopen: the instant of the drop (ns), once fired.
    pub tx: watch::Sender<Option<u64>>,
    fired: Option<Fired>,
}

/// The answers of connections a storm or churn dropped: how many came back (with each one's
/// latency from its drop) and how many failed to.
struct Reopenings {
    back: u64,
    failed: u64,
    latency: msgbench_metrics::Histogram,
}

impl Reopenings {
    fn new() -> Reopenings {
        Reopenings {
            back: 0,
            failed: 0,
            latency: msgbench_metrics::new_histogram(),
        }
    }

    /// Back after `latency_ns`, or failed (`None`).
    fn answer(&mut self, latency_ns: Option<u64>) {
        match latency_ns {
            Some(ns) => {
                self.back += 1;
                let _ = self.latency.record(ns.max(1));
            }
            None => self.failed += 1,
        }
    }

    fn answered(&self) -> u64 {
        self.back + self.failed
    }

    /// The latency at quantile `q`, ms.
    fn ms(&self, q: f64) -> f64 {
        self.latency.value_at_quantile(q) as f64 / 1e6
    }
}

/// A storm that happened.
struct Fired {
    at_ns: u64,
    dropped: u64,
    settled_ns: Option<u64>,
    reopened: Reopenings,
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
            settled_ns: (held == 0).then_some(now),
            reopened: Reopenings::new(),
        });
        self.tx.send_replace(Some(now));
    }

    /// A dropped connection is open again after `latency_ns` (`None`: it failed to reopen).
    pub fn answer(&mut self, latency_ns: Option<u64>) {
        let Some(f) = self.fired.as_mut() else {
            return;
        };
        f.reopened.answer(latency_ns);
        if f.settled_ns.is_none() && f.reopened.answered() >= f.dropped {
            f.settled_ns = Some(now_ns());
        }
    }

    /// The line the run's events carry once everyone is back (or failed), said once.
    pub fn settled_note(&self, t0: u64) -> Option<String> {
        let f = self.fired.as_ref()?;
        let s = f.settled_ns?;
        let r = &f.reopened;
        Some(format!(
            "reconnect storm at {:.1}s: {} of {} connections back in {:.3}s ({} failed); \
             reconnect latency p50 {:.1} ms, p99 {:.1} ms",
            (f.at_ns.saturating_sub(t0)) as f64 / 1e9,
            r.back,
            f.dropped,
            (s - f.at_ns) as f64 / 1e9,
            r.failed,
            r.ms(0.5),
            r.ms(0.99)
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
            back: f.reopened.back,
            failed: f.reopened.failed,
            settled_s: f.settled_ns.map(|s| (s - f.at_ns) as f64 / 1e9),
            latency: LatencySummary::of(&f.reopened.latency),
        })
    }
}

/// One held connection's end of churn, in one word: 0 not held, 1 held (so it may be claimed),
/// else claimed for a drop at that instant; and its task's wake-up.
#[derive(Default)]
pub(super) struct ChurnSlot {
    state: AtomicU64,
    wake: Notify,
}

const NOT_HELD: u64 = 0;
const HELD: u64 = 1;

impl ChurnSlot {
    /// Waits until the coordinator drops this connection; returns the instant of the drop.
    /// Cancel-safe (a wake-up left over from an earlier claim finds no claim and waits on).
    async fn dropped(&self) -> u64 {
        loop {
            self.wake.notified().await;
            let v = self.state.load(Relaxed);
            if v > HELD {
                self.state.store(NOT_HELD, Relaxed);
                return v;
            }
        }
    }

    /// Claims the connection for a drop at `now` if it is held; wakes its task.
    fn claim(&self, now: u64) -> bool {
        let at = now.max(HELD + 1);
        if self
            .state
            .compare_exchange(HELD, at, Relaxed, Relaxed)
            .is_err()
        {
            return false;
        }
        self.wake.notify_one();
        true
    }
}

/// Every connection's [`ChurnSlot`], by launch index, and the claims withdrawn: a connection
/// claimed for a drop that left on its own first (closed at the run's end, dropped by the
/// server) was not dropped by churn.
#[derive(Default)]
pub(super) struct ChurnSlots {
    slots: Box<[ChurnSlot]>,
    withdrawn: AtomicU64,
}

impl ChurnSlots {
    /// Connection `i` is open (again): it may be dropped.
    pub fn held(&self, i: usize) {
        self.slots[i].state.store(HELD, Relaxed);
    }

    /// Connection `i` left the held state on its own (closed, dropped by the other side or by
    /// the storm): it can no longer be claimed, and a claim it did not take is withdrawn.
    pub fn released(&self, i: usize) {
        if self.slots[i].state.swap(NOT_HELD, Relaxed) > HELD {
            self.withdrawn.fetch_add(1, Relaxed);
        }
    }

    /// Waits until churn drops connection `i`; the instant of the drop.
    pub async fn dropped(&self, i: usize) -> u64 {
        self.slots[i].dropped().await
    }
}

/// The coordinator's side of churn.
pub(super) struct Churn {
    rate: f64,
    schedule: ArrivalSchedule,
    /// One slot per connection of the workload, by its launch index.
    pub slots: Arc<ChurnSlots>,
    /// Where the next search for a held connection starts.
    cursor: usize,
    /// Drops due so far (made or skipped): the schedule's index.
    due_so_far: u64,
    from_ns: Option<u64>,
    dropped: u64,
    skipped: u64,
    reopened: Reopenings,
}

/// Slots looked at for a held connection per drop before the drop is skipped: a bound on one
/// drop's cost when most connections are down.
const SEARCH: usize = 4096;

impl Churn {
    /// Churn of `rate` drops per second over `connections` connections, spread as `arrival`.
    pub fn new(rate: f64, arrival: Arrival, connections: u64, seed: u64) -> Churn {
        Churn {
            rate,
            schedule: ArrivalSchedule::new(Some(rate), arrival, seed ^ 0xC4u64),
            slots: Arc::new(ChurnSlots {
                slots: (0..connections).map(|_| ChurnSlot::default()).collect(),
                withdrawn: AtomicU64::new(0),
            }),
            cursor: 0,
            due_so_far: 0,
            from_ns: None,
            dropped: 0,
            skipped: 0,
            reopened: Reopenings::new(),
        }
    }

    /// Makes the drops due by `now` (churn starts at the first call: the ramp's end). Returns
    /// how many were made.
    pub fn step(&mut self, now: u64) -> u64 {
        let from = *self.from_ns.get_or_insert(now);
        let mut made = 0;
        // A stalled loop does not make up a backlog of drops in one burst beyond 1,024.
        let mut budget = 1024;
        while budget > 0 && from + self.schedule.due(self.due_so_far) <= now {
            budget -= 1;
            self.schedule.started();
            self.due_so_far += 1;
            if self.claim_next(now) {
                self.dropped += 1;
                made += 1;
            } else {
                self.skipped += 1;
            }
        }
        made
    }

    /// Claims the next held connection round the fleet.
    fn claim_next(&mut self, now: u64) -> bool {
        let slots = &self.slots.slots;
        let n = slots.len();
        for _ in 0..SEARCH.min(n) {
            let i = self.cursor;
            self.cursor = (self.cursor + 1) % n;
            if slots[i].claim(now) {
                return true;
            }
        }
        false
    }

    /// When the next drop is due (`u64::MAX` before the start).
    pub fn next_due(&self) -> u64 {
        self.from_ns
            .map_or(u64::MAX, |f| f + self.schedule.due(self.due_so_far))
    }

    /// A dropped connection is open again after `latency_ns` (`None`: it failed to reopen).
    pub fn answer(&mut self, latency_ns: Option<u64>) {
        self.reopened.answer(latency_ns);
    }

    /// Drops made: claims less those withdrawn.
    fn dropped(&self) -> u64 {
        self.dropped
            .saturating_sub(self.slots.withdrawn.load(Relaxed))
    }

    /// Drops not yet answered (their connections still reopening).
    pub fn pending(&self) -> u64 {
        self.dropped().saturating_sub(self.reopened.answered())
    }

    /// The run's events' line about churn so far.
    pub fn note(&self) -> String {
        let r = &self.reopened;
        format!(
            "churn: {} connections dropped at {}/s, {} back, {} failed, {} reopening, {} drops \
             skipped (none held); reconnect latency p50 {:.1} ms, p99 {:.1} ms",
            self.dropped(),
            self.rate,
            r.back,
            r.failed,
            self.pending(),
            self.skipped,
            r.ms(0.5),
            r.ms(0.99)
        )
    }

    /// The results file's account (`None`: churn never started, the ramp did not end).
    pub fn summary(&self, t0: u64) -> Option<ChurnSummary> {
        Some(ChurnSummary {
            rate: self.rate,
            from_s: self.from_ns?.saturating_sub(t0) as f64 / 1e9,
            dropped: self.dropped(),
            back: self.reopened.back,
            failed: self.reopened.failed,
            skipped: self.skipped,
            latency: LatencySummary::of(&self.reopened.latency),
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

    #[test]
    fn churn_drops_held_connections_round_the_fleet_at_its_rate() {
        let mut c = Churn::new(100.0, Arrival::Constant, 5, 1);
        for i in [0, 1, 3, 4] {
            c.slots.held(i);
        }
        // 100/s from t = 1 s: by 1.025 s three drops (0, 10, 20 ms) were due.
        assert_eq!(c.step(1_000_000_000), 1, "the first drop is due at once");
        assert_eq!(c.step(1_025_000_000), 2);
        assert_eq!(c.next_due(), 1_030_000_000);
        // Slots 0, 1 and 3 were claimed in turn; slot 2 was never held.
        for i in [0, 1, 3] {
            assert!(
                c.slots.slots[i].state.load(Relaxed) > HELD,
                "slot {i} claimed"
            );
        }
        // Slot 4 is claimed, then closes before it takes the drop: withdrawn, not made.
        assert_eq!(c.step(1_030_000_000), 1);
        c.slots.released(4);
        // Nothing held: the next drop is skipped, not made.
        assert_eq!(c.step(1_040_000_000), 0);
        c.answer(Some(3_000_000));
        c.answer(None);
        let s = c.summary(0).unwrap();
        assert_eq!((s.dropped, s.back, s.failed, s.skipped), (3, 1, 1, 1));
        assert!((s.from_s - 1.0).abs() < 1e-9);
        assert_eq!(c.pending(), 1);
        assert!(
            c.note().contains("3 connections dropped at 100/s"),
            "{}",
            c.note()
        );
    }

    #[tokio::test]
    async fn a_claimed_slot_wakes_its_connection_with_the_instant_of_the_drop() {
        let slot = ChurnSlot::default();
        assert!(!slot.claim(5), "not held: cannot be claimed");
        slot.state.store(HELD, Relaxed);
        assert!(slot.claim(7));
        assert!(!slot.claim(8), "claimed once");
        assert_eq!(slot.dropped().await, 7);
        // A stale wake-up with no instant behind it does not end the wait.
        slot.wake.notify_one();
        let r = tokio::time::timeout(Duration::from_millis(20), slot.dropped()).await;
        assert!(r.is_err());
    }
}
