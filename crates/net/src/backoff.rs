//! Reconnection pacing, one rule for every own client: after a failed attempt the next waits
//! `delay`, which doubles from the first pause up to a cap while attempts keep failing, and
//! starts over after a success.
//!
//! Why one rule: a broker that is down must not turn thousands of clients into a busy loop
//! against it, and a broker that is back must be found again within about the cap (2 s by
//! default), whichever protocol the client speaks. The state is plain data, so a client whose
//! `recv` the runner cancels at every tick keeps it across cancellations.

use std::time::Duration;
use tokio::time::Instant;

/// Pauses between reconnection attempts.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    delay: Duration,
    not_before: Instant,
}

impl Default for Backoff {
    /// 100 ms doubling to 2 s.
    fn default() -> Backoff {
        Backoff::new(Duration::from_millis(100), Duration::from_secs(2))
    }
}

impl Backoff {
    /// Pauses from `first`, doubling up to `max` (`first == max`: a fixed pause, as ZeroMQ's
    /// reconnect interval).
    pub fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max: max.max(first),
            delay: first,
            not_before: Instant::now(),
        }
    }

    /// When the next attempt is due.
    pub fn until(&self) -> Instant {
        self.not_before
    }

    /// Waits until the next attempt is due.
    pub async fn wait(&self) {
        tokio::time::sleep_until(self.not_before).await;
    }

    /// An attempt failed: the next one is due after the current pause, and the pause after it
    /// is twice as long (up to the cap).
    pub fn failed(&mut self) {
        self.not_before = Instant::now() + self.delay;
        self.delay = (self.delay * 2).min(self.max);
    }

    /// An attempt failed: waits until the next one is due.
    pub async fn pause(&mut self) {
        self.failed();
        self.wait().await;
    }

    /// An attempt succeeded: the next failure pauses the first pause again.
    pub fn reset(&mut self) {
        self.delay = self.first;
        self.not_before = Instant::now();
    }

    /// A connection this backoff paced was lost after living `lived`. One that lasted less
    /// than a second counts as a failed attempt, so a server that accepts connections and
    /// drops each at its first message is retried ever less often instead of hundreds of
    /// times a second; a longer one starts the pauses over (the first attempt at once).
    /// Clients that use this do not [`reset`](Backoff::reset) when a connection opens.
    pub fn lost_after(&mut self, lived: Duration) {
        if lived < STABLE {
            self.failed();
        } else {
            self.reset();
        }
    }
}

/// How long a connection must have lived for its loss to start the pauses over
/// ([`Backoff::lost_after`]).
pub(crate) const STABLE: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn connections_lost_at_once_back_off_and_a_stable_one_starts_over() {
        let mut b = Backoff::default();
        let mut pauses = Vec::new();
        for _ in 0..5 {
            let before = Instant::now();
            b.wait().await;
            pauses.push((Instant::now() - before).as_millis());
            b.lost_after(Duration::from_millis(10));
        }
        assert_eq!(pauses, [0, 100, 200, 400, 800]);
        b.wait().await;
        b.lost_after(STABLE);
        let before = Instant::now();
        b.wait().await;
        assert_eq!(Instant::now() - before, Duration::ZERO);
        b.lost_after(Duration::ZERO);
        let before = Instant::now();
        b.wait().await;
        assert_eq!((Instant::now() - before).as_millis(), 100);
    }

    #[tokio::test(start_paused = true)]
    async fn pauses_double_to_the_cap_and_start_over_after_a_success() {
        let mut b = Backoff::default();
        let t = Instant::now();
        let mut waited = Vec::new();
        for _ in 0..7 {
            let before = Instant::now();
            b.pause().await;
            waited.push((Instant::now() - before).as_millis());
        }
        assert_eq!(waited, [100, 200, 400, 800, 1600, 2000, 2000]);
        assert_eq!((Instant::now() - t).as_millis(), 7100);
        b.reset();
        assert!(b.until() <= Instant::now(), "after a success, at once");
        b.failed();
        assert_eq!((b.until() - Instant::now()).as_millis(), 100);
    }

    #[tokio::test(start_paused = true)]
    async fn a_fixed_pause_stays_fixed() {
        let mut b = Backoff::new(Duration::from_millis(200), Duration::from_millis(200));
        for _ in 0..3 {
            let before = Instant::now();
            b.pause().await;
            assert_eq!((Instant::now() - before).as_millis(), 200);
        }
    }
}
