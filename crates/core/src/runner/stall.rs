//! Producers the system under test stopped taking messages from, and tasks that will not end.
//!
//! A broker that applies flow control — RabbitMQ under a memory or disk alarm, Artemis with a
//! full address or disk, an AMQP 1.0 peer that grants no credit — leaves a producer waiting
//! inside `send` for as long as it likes. Nothing is wrong with msgbench then, but a run that
//! only goes silent looks hung: [`StallWatch`] says which producers are blocked and since when,
//! and says so again when they move. At the end, [`join_or_abort`] bounds how long the run
//! waits for its tasks, so neither a blocked send nor a client that never closes can keep the
//! report (and the results file) from being written, Ctrl-C included.

use super::state::OwnedCounter;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// A producer waiting this long in one `send` is reported as blocked.
pub const STALL: Duration = Duration::from_secs(10);

/// Watches each producer's "in `send` since" marker (ns, 0 when not in `send`), which the
/// producer sets around every send: two relaxed stores, no lock.
pub struct StallWatch {
    busy: Vec<(u32, Arc<OwnedCounter>)>,
    /// Blocked producers as last reported.
    reported: Vec<u32>,
    /// When the first of them blocked.
    since_ns: u64,
}

impl StallWatch {
    /// A watch over `(producer id, marker)` pairs.
    pub fn new(busy: Vec<(u32, Arc<OwnedCounter>)>) -> Self {
        StallWatch {
            busy,
            reported: Vec::new(),
            since_ns: 0,
        }
    }

    /// What changed since the last check: producers that became blocked (at least [`STALL`] in
    /// one `send`), or all of them moving again. `None` when there is nothing new to say.
    pub fn check(&mut self, now_ns: u64) -> Option<String> {
        let stall = STALL.as_nanos() as u64;
        let mut blocked = Vec::new();
        let mut oldest = u64::MAX;
        for (id, b) in &self.busy {
            let since = b.get();
            if since != 0 && now_ns.saturating_sub(since) >= stall {
                blocked.push(*id);
                oldest = oldest.min(since);
            }
        }
        if blocked.is_empty() {
            if self.reported.is_empty() {
                return None;
            }
            let after = Duration::from_nanos(now_ns.saturating_sub(self.since_ns));
            self.reported.clear();
            return Some(format!(
                "producers are sending again (blocked for about {} s)",
                after.as_secs()
            ));
        }
        if blocked.iter().all(|id| self.reported.contains(id)) {
            return None;
        }
        if self.reported.is_empty() {
            self.since_ns = oldest;
        }
        self.reported = blocked;
        let n = self.reported.len();
        let list: Vec<String> = self.reported.iter().take(8).map(u32::to_string).collect();
        let more = if n > 8 { ", …" } else { "" };
        Some(format!(
            "{n} of {} producers (producer {}{more}) have waited at least {} s for the system \
             under test to take one message: it is holding producers back (flow control, e.g. \
             a RabbitMQ memory or disk alarm, a full Artemis address or disk, no AMQP 1.0 link \
             credit, an HTTP/2 server that keeps its flow-control window shut, a consumer that \
             stopped reading)",
            self.busy.len(),
            list.join(", "),
            STALL.as_secs()
        ))
    }
}

impl StallWatch {
    /// When every producer has been inside one `send` for at least `at_least`: their ids
    /// (none when any producer is not blocked that long, or there are none).
    pub fn all_blocked(&self, now_ns: u64, at_least: Duration) -> Vec<u32> {
        let long = at_least.as_nanos() as u64;
        let blocked = |b: &OwnedCounter| {
            let since = b.get();
            since != 0 && now_ns.saturating_sub(since) >= long
        };
        if self.busy.is_empty() || !self.busy.iter().all(|(_, b)| blocked(b)) {
            return Vec::new();
        }
        self.busy.iter().map(|(id, _)| *id).collect()
    }

    /// How many producers are inside `send` at `now_ns`, and the longest any of them has been.
    pub fn in_send(&self, now_ns: u64) -> (usize, Duration) {
        self.busy
            .iter()
            .map(|(_, b)| b.get())
            .filter(|&since| since != 0)
            .fold((0, Duration::ZERO), |(n, longest), since| {
                let d = Duration::from_nanos(now_ns.saturating_sub(since));
                (n + 1, longest.max(d))
            })
    }
}

/// Waits up to `grace` for every task of `set` to end, or until `cut` (a further Ctrl-C), then
/// aborts the rest; returns how many had to be aborted. Whatever an aborted task had not yet
/// handed over is lost, which the caller reports.
pub async fn join_or_abort<T: 'static>(
    set: &mut JoinSet<T>,
    grace: Duration,
    cut: impl Future<Output = ()>,
) -> (Vec<T>, usize) {
    let mut done = Vec::new();
    let deadline = tokio::time::Instant::now() + grace;
    let mut cut = std::pin::pin!(cut);
    loop {
        tokio::select! {
            next = tokio::time::timeout_at(deadline, set.join_next()) => match next {
                Ok(Some(Ok(t))) => done.push(t),
                Ok(Some(Err(_))) => {}
                Ok(None) => return (done, 0),
                Err(_) => break,
            },
            () = &mut cut => break,
        }
    }
    let stuck = set.len();
    set.abort_all();
    while set.join_next().await.is_some() {}
    (done, stuck)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn blocked_producers_are_reported_once_and_their_recovery_too() {
        let (a, b) = (
            Arc::new(OwnedCounter::default()),
            Arc::new(OwnedCounter::default()),
        );
        let mut w = StallWatch::new(vec![(0, a.clone()), (1, b.clone())]);
        assert_eq!(w.check(100 * S), None, "nobody in send");
        a.set(100 * S);
        assert_eq!(w.check(105 * S), None, "5 s is not blocked yet");
        let m = w.check(111 * S).expect("blocked after 10 s");
        assert!(m.starts_with("1 of 2 producers (producer 0)"), "{m}");
        assert_eq!(w.check(112 * S), None, "said once");
        b.set(103 * S);
        let m = w.check(113 * S).expect("a second one joins");
        assert!(m.starts_with("2 of 2 producers (producer 0, 1)"), "{m}");
        a.set(0);
        b.set(0);
        let m = w.check(130 * S).expect("moving again");
        assert!(m.contains("sending again (blocked for about 30 s)"), "{m}");
        assert_eq!(w.check(131 * S), None);
        assert_eq!(w.in_send(131 * S), (0, Duration::ZERO));
        b.set(125 * S);
        assert_eq!(w.in_send(131 * S), (1, Duration::from_secs(6)));
    }

    #[tokio::test]
    async fn tasks_that_do_not_end_are_aborted_after_the_grace() {
        let mut set = JoinSet::new();
        set.spawn(async { 1 });
        set.spawn(async {
            std::future::pending::<()>().await;
            2
        });
        let (done, stuck) =
            join_or_abort(&mut set, Duration::from_millis(50), std::future::pending()).await;
        assert_eq!((done, stuck), (vec![1], 1));
        assert!(set.is_empty());
        set.spawn(std::future::pending::<i32>());
        let cut = async {};
        let (_, stuck) = join_or_abort(&mut set, Duration::from_secs(3600), cut).await;
        assert_eq!(stuck, 1, "a second Ctrl-C does not wait for the grace");
    }
}
