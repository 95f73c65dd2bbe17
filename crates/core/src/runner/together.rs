//! The groups of one run, running at once ([`crate::scenario::groups`]): each group's runner
//! holds a [`Member`] of one [`Together`].
//!
//! Two things are the run's rather than a group's:
//! - **the start**: every group connects, then waits at the gate; the last to arrive sets one
//!   start instant for all, so their phases and ticks line up and their intervals add up tick
//!   by tick;
//! - **the end of the drain**: a message one group sends may be received by another group's
//!   subscriber, so no group can tell alone whether its deliveries are complete. Each group
//!   posts its expected and delivered counts here; the drain is complete when the run's
//!   deliveries cover the run's expected ones and every group's producers are done.
//!
//! Members post from their coordinators (once per loop turn), never from the hot path.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// The shared state of a run's groups; hand one [`Member`] to each group's runner.
#[derive(Debug)]
pub struct Together {
    arrived: Mutex<usize>,
    start: watch::Sender<Option<u64>>,
    books: Vec<Books>,
}

#[derive(Debug, Default)]
struct Books {
    expected: AtomicU64,
    delivered: AtomicU64,
    producers_done: AtomicBool,
}

impl Together {
    /// One member per group, in group order.
    pub fn members(groups: usize) -> Vec<Member> {
        let all = Arc::new(Together {
            arrived: Mutex::new(0),
            start: watch::channel(None).0,
            books: (0..groups).map(|_| Books::default()).collect(),
        });
        (0..groups)
            .map(|index| Member {
                all: all.clone(),
                index,
            })
            .collect()
    }
}

/// One group's handle on the run it shares.
#[derive(Debug, Clone)]
pub struct Member {
    all: Arc<Together>,
    index: usize,
}

impl Member {
    /// Waits until every group is connected, then returns the run's start instant (monotonic
    /// ns): `lead_ns` after the last group arrived.
    pub async fn start_instant(&self, lead_ns: u64) -> u64 {
        let mut rx = self.all.start.subscribe();
        {
            let mut n = self.all.arrived.lock().unwrap_or_else(|e| e.into_inner());
            *n += 1;
            if *n == self.all.books.len() {
                let _ = self.all.start.send(Some(crate::clock::now_ns() + lead_ns));
            }
        }
        match rx.wait_for(Option::is_some).await {
            Ok(t0) => t0.unwrap_or(0),
            // The sender lives as long as `self`: unreachable, but a start is a start.
            Err(_) => crate::clock::now_ns(),
        }
    }

    /// This group's account so far: deliveries its messages should make (anywhere), distinct
    /// deliveries its consumers had (from any group), and whether its producers are done.
    pub fn post(&self, expected: u64, delivered: u64, producers_done: bool) {
        let b = &self.all.books[self.index];
        b.expected.store(expected, Ordering::Relaxed);
        b.delivered.store(delivered, Ordering::Relaxed);
        // Last, and released: whoever sees a group done sees the counts it was done with.
        b.producers_done.store(producers_done, Ordering::Release);
    }

    /// Whether every group's producers are done.
    pub fn producers_done(&self) -> bool {
        self.all
            .books
            .iter()
            .all(|b| b.producers_done.load(Ordering::Acquire))
    }

    /// Whether the run's deliveries cover its expected ones and no group sends any more.
    pub fn complete(&self) -> bool {
        if !self.producers_done() {
            return false;
        }
        let (mut expected, mut delivered) = (0u64, 0u64);
        for b in &self.all.books {
            expected += b.expected.load(Ordering::Relaxed);
            delivered += b.delivered.load(Ordering::Relaxed);
        }
        delivered >= expected
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_last_arrival_starts_everyone_at_once() {
        let m = Together::members(3);
        let (a, b, c) = tokio::join!(
            m[0].start_instant(1_000),
            async {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                m[1].start_instant(1_000).await
            },
            m[2].start_instant(1_000)
        );
        assert!(a == b && b == c && a > 0);
    }

    #[test]
    fn the_drain_is_complete_for_the_run_not_a_group() {
        let m = Together::members(2);
        // Group 0 sends 10 messages that group 1 receives.
        m[0].post(10, 0, true);
        m[1].post(0, 9, true);
        assert!(!m[1].complete());
        m[1].post(0, 10, false);
        assert!(!m[0].complete(), "group 1's producers still send");
        m[1].post(0, 10, true);
        assert!(m[0].complete() && m[1].complete());
    }
}
