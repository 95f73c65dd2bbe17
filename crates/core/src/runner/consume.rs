//! The consumer loop: recv → unstamp → record + integrity. One task per consumer; it owns its
//! integrity tracker, and its recorder too unless it runs on a dedicated worker thread, whose
//! consumers share one (thread-local: a current-thread runtime runs one task at a time). Nothing
//! here takes a lock.

use super::produce::Ticker;
use super::state::{OwnedCounter, RunState};
use crate::clock::{now_ns, to_instant};
use crate::driver::{Consumer, Delivery};
use crate::rng::Rng;
use crate::scenario::{ConsumerWork, Processing};
use crate::stamp::Stamp;
use msgbench_metrics::{GroupSeen, GroupView, IntegrityTracker, Phase, Recorder, Role, Snapshot};
use std::cell::RefCell;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::watch;

/// Deliveries taken without going back through `select!` when they are already waiting.
const BATCH: usize = 256;

/// Everything a consumer task needs besides its driver handle.
pub(crate) struct ConsumerTask {
    pub id: u32,
    pub run_id: u32,
    pub t0_ns: u64,
    pub tick_ns: u64,
    pub state: Arc<RunState>,
    pub snapshots: UnboundedSender<Snapshot>,
    /// Distinct deliveries so far, read by the coordinator to end the drain early.
    pub distinct: Arc<OwnedCounter>,
    pub stop: watch::Receiver<bool>,
    /// Shared by the members of queue groups: duplicates across members.
    pub group: Option<Arc<GroupSeen>>,
    /// Runs on a dedicated (current-thread) worker: record into the thread's shared recorder.
    pub shared_books: bool,
    /// A backlog run: read nothing until this turns true (see `backlog`).
    pub hold: Option<watch::Receiver<bool>>,
    /// Slow consumers: time spent per delivery and a rate cap (none by default).
    pub work: ConsumerWork,
}

/// A slow consumer's clock: when it may take its next delivery.
struct Pace {
    work: ConsumerWork,
    rng: Rng,
    /// When the work on the deliveries taken so far ends (monotonic ns).
    busy_until: u64,
    /// The earliest time the rate cap lets the next delivery be taken.
    next_ns: u64,
}

/// How far behind its schedule a slow consumer may fall and still catch up: the runtime's timer
/// wakes up to a millisecond late, and without this credit every oversleep would be lost, so a
/// consumer told to spend 2 ms per delivery would spend nearer 3.
const PACE_CREDIT_NS: u64 = 2_000_000;

impl Pace {
    /// When the consumer may take its next delivery, having taken one at `now`: once the work
    /// on it is done, and no sooner than the rate allows. Time overslept is made up by the
    /// next deliveries (up to [`PACE_CREDIT_NS`]), so the consumer keeps its rate on average;
    /// one that fell further behind does not catch up in a burst.
    fn after_delivery(&mut self, now: u64) -> u64 {
        let work = match self.work.processing {
            None => 0,
            Some(Processing::Fixed(d)) => d.as_nanos() as u64,
            Some(Processing::Exponential(mean)) => {
                (-(mean.as_nanos() as f64) * self.rng.next_f64_open0().ln()) as u64
            }
        };
        let floor = now.saturating_sub(PACE_CREDIT_NS);
        self.busy_until = self.busy_until.max(floor) + work;
        if let Some(rate) = self.work.rate {
            self.next_ns = self.next_ns.max(floor) + (1e9 / rate) as u64;
        }
        self.busy_until.max(self.next_ns)
    }
}

/// What one recorder accounts for: its recorder, the interval clock and the phase.
struct Acct {
    rec: Recorder,
    ticker: Ticker,
    phase: Phase,
    /// The run it belongs to (a worker thread's shared one is replaced for another run).
    key: (u32, u64),
}

thread_local! {
    /// The recorder the consumers of one dedicated worker thread share. A current-thread
    /// runtime never runs two of its tasks at once, so sharing needs no lock; and one recorder
    /// per thread instead of one per consumer is what lets a generator hold ten thousand
    /// consumers: each recorder's histograms are tens of kilobytes, and each sends a snapshot
    /// every tick.
    static SHARED: RefCell<Option<Acct>> = const { RefCell::new(None) };
}

struct Books {
    /// `None`: the thread's shared recorder ([`SHARED`]).
    /// Boxed: most consumers share their thread's, and this lives in every consumer's task.
    own: Option<Box<Acct>>,
    tracker: IntegrityTracker,
    group: Option<GroupView>,
    /// Distinct deliveries since the start (survives `take()`).
    distinct: u64,
}

impl ConsumerTask {
    fn new_acct(&self) -> Acct {
        Acct {
            rec: Recorder::new(u64::MAX),
            ticker: Ticker::new(self.t0_ns, self.tick_ns),
            phase: self.state.phase_at(self.t0_ns),
            key: (self.run_id, self.t0_ns),
        }
    }

    /// Runs `f` on this consumer's recorder: its own, or its worker thread's shared one.
    #[inline]
    fn with_acct<R>(&self, own: &mut Option<Box<Acct>>, f: impl FnOnce(&mut Acct) -> R) -> R {
        match own {
            Some(a) => f(a),
            None => SHARED.with_borrow_mut(|slot| {
                let key = (self.run_id, self.t0_ns);
                if slot.as_ref().is_none_or(|a| a.key != key) {
                    *slot = Some(self.new_acct());
                }
                f(slot.as_mut().expect("just set"))
            }),
        }
    }

    #[inline]
    fn on_delivery(&self, b: &mut Books, d: &Delivery, lane: Option<u32>) {
        let now = now_ns();
        let Books {
            own,
            tracker,
            group,
            distinct,
        } = b;
        self.with_acct(own, |a| {
            // Close the interval (or phase) first: this delivery belongs to the one now starts.
            self.tick(a, now);
            match Stamp::find(&d.payload) {
                Ok(s) if s.run_id == self.run_id => {
                    a.rec
                        .record_delivery(now.saturating_sub(s.intended_ns), d.payload.len());
                    let first_in_group = group
                        .as_mut()
                        .is_none_or(|g| g.first_delivery(s.producer, s.stream, s.seq));
                    if first_in_group {
                        let dups = a.rec.counters().duplicated;
                        tracker.observe_on_lane(
                            s.producer,
                            s.stream,
                            s.seq,
                            lane,
                            a.rec.counters_mut(),
                        );
                        if a.rec.counters().duplicated == dups {
                            *distinct += 1;
                        }
                    } else {
                        // Another member (or this one) of the queue group already had it.
                        a.rec.counters_mut().duplicated += 1;
                    }
                    if d.redelivered {
                        a.rec.counters_mut().redelivered += 1;
                    }
                }
                _ => a.rec.record_foreign(),
            }
        });
    }

    #[inline]
    fn tick(&self, a: &mut Acct, now: u64) {
        let cur = self.state.phase_at(now);
        if cur != a.phase {
            let k = a.ticker.closing(self.state.scheduled_end_ns(a.phase));
            self.flush(a, k);
            a.phase = cur;
        }
        if let Some(k) = a.ticker.due(now) {
            self.flush(a, k);
        }
    }

    fn flush(&self, a: &mut Acct, interval: u64) {
        let s = a.rec.take(Role::Consumer, self.id, a.phase, interval);
        if !s.is_empty() {
            let _ = self.snapshots.send(s);
        }
    }

    fn record_error(&self, b: &mut Books, kind: msgbench_metrics::ErrorKind) {
        self.with_acct(&mut b.own, |a| a.rec.record_error(kind));
    }

    /// The next tick of this consumer's recorder.
    fn next_tick(&self, b: &mut Books) -> u64 {
        self.with_acct(&mut b.own, |a| a.ticker.next_ns)
    }

    /// A slow consumer working on a delivery until `until` (monotonic ns), its recorder still
    /// ticking meanwhile. Returns whether the run told it to stop.
    async fn work_until(
        &self,
        until: u64,
        b: &mut Books,
        stop: &mut watch::Receiver<bool>,
    ) -> bool {
        let until = to_instant(until);
        loop {
            let next_tick = to_instant(self.next_tick(b));
            tokio::select! {
                biased;
                _ = tokio::time::sleep_until(until) => return false,
                _ = tokio::time::sleep_until(next_tick) => {
                    let now = now_ns();
                    self.with_acct(&mut b.own, |a| self.tick(a, now));
                }
                _ = stop.changed() => return true,
            }
        }
    }

    pub async fn run<C: Consumer>(self, mut c: C) {
        let mut b = Books {
            own: (!self.shared_books).then(|| Box::new(self.new_acct())),
            tracker: IntegrityTracker::new(),
            group: self.group.clone().map(GroupView::new),
            distinct: 0,
        };
        let mut stop = self.stop.clone();
        let mut pace = (!self.work.is_default()).then(|| Pace {
            work: self.work,
            rng: Rng::new(u64::from(self.id) ^ u64::from(self.run_id) << 32),
            busy_until: 0,
            next_ns: 0,
        });
        if let Some(mut hold) = self.hold.clone() {
            // Subscribed, reading nothing: the system keeps what is sent until the release.
            c.set_fetching(false);
            // Boxed, as every rare wait below: this future lives in each of possibly a
            // hundred thousand receiving tasks, and is as large as its largest wait.
            Box::pin(async {
                tokio::select! {
                    _ = hold.wait_for(|released| *released) => {}
                    _ = stop.wait_for(|stopped| *stopped) => {}
                }
            })
            .await;
            c.set_fetching(true);
        }
        loop {
            if self.state.consumers_stopped() {
                break;
            }
            let next_tick = to_instant(self.next_tick(&mut b));
            tokio::select! {
                biased;
                r = c.recv() => match r {
                    Ok(Some(d)) => {
                        self.on_delivery(&mut b, &d, c.lane());
                        if let Some(p) = &mut pace {
                            self.distinct.set(b.distinct);
                            let now = now_ns();
                            let until = p.after_delivery(now);
                            if until > now
                                && Box::pin(self.work_until(until, &mut b, &mut stop)).await
                            {
                                break;
                            }
                            continue;
                        }
                        // Take what is already waiting without another trip through select!.
                        for _ in 0..BATCH {
                            let polled = {
                                let mut cx = Context::from_waker(Waker::noop());
                                pin!(c.recv()).poll(&mut cx)
                            };
                            match polled {
                                Poll::Ready(Ok(Some(d))) => self.on_delivery(&mut b, &d, c.lane()),
                                Poll::Ready(Ok(None)) => break,
                                Poll::Ready(Err(e)) => { self.record_error(&mut b, e.kind()); break }
                                Poll::Pending => break,
                            }
                        }
                        self.distinct.set(b.distinct);
                    }
                    Ok(None) => break,
                    // Retrying cannot help (the driver said why in an event): the consumer
                    // stops rather than failing a hundred times a second.
                    Err(e) if e.is_fatal() => {
                        self.record_error(&mut b, e.kind());
                        break;
                    }
                    Err(e) => {
                        self.record_error(&mut b, e.kind());
                        Box::pin(tokio::time::sleep(std::time::Duration::from_millis(10))).await;
                    }
                },
                _ = tokio::time::sleep_until(next_tick) => {
                    let now = now_ns();
                    self.with_acct(&mut b.own, |a| self.tick(a, now));
                }
                _ = stop.changed() => break,
            }
        }
        let _ = Box::pin(c.close()).await;
        // With a shared recorder every consumer of the thread flushes on its way out; the last
        // one takes what the others recorded after they left.
        self.with_acct(&mut b.own, |a| {
            let k = a.ticker.recording();
            self.flush(a, k);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn pace(processing: Option<Processing>, rate: Option<f64>) -> Pace {
        Pace {
            work: ConsumerWork { processing, rate },
            rng: Rng::new(1),
            busy_until: 0,
            next_ns: 0,
        }
    }

    /// A consumer that oversleeps catches up: 1,000 deliveries at 2 ms each end 2 s after the
    /// first however late each wake-up was (within the credit), and one that was idle long
    /// starts afresh instead of rushing.
    #[test]
    fn oversleeping_is_made_up_and_long_gaps_are_not() {
        let mut p = pace(Some(Processing::Fixed(Duration::from_millis(2))), None);
        let t0 = 10_000_000_000u64;
        let mut now = t0;
        for _ in 0..1000 {
            let until = p.after_delivery(now);
            now = until.max(now) + 900_000; // every wake-up 0.9 ms late
        }
        let took = p.busy_until - t0;
        // (Less the 2 ms credit the first delivery starts with.)
        assert!((1_996_000_000..2_002_000_000).contains(&took), "{took}");
        // An hour idle: at most the credit is made up (here the one delivery's 2 ms), then
        // deliveries are spaced again, not rushed to make up the hour.
        let later = now + 3_600_000_000_000;
        assert_eq!(p.after_delivery(later), later);
        assert_eq!(p.after_delivery(later), later + 2_000_000);
    }

    /// The rate cap spaces deliveries; exponential work averages its mean.
    #[test]
    fn rate_caps_and_exponential_means() {
        let mut p = pace(None, Some(500.0));
        let t0 = 1_000_000_000u64;
        let a = p.after_delivery(t0);
        let b = p.after_delivery(a);
        assert_eq!(b - a, 2_000_000);
        let mut e = pace(
            Some(Processing::Exponential(Duration::from_millis(5))),
            None,
        );
        let mut now = t0;
        for _ in 0..20_000 {
            now = e.after_delivery(now);
        }
        let mean_ms = (now - t0) as f64 / 20_000.0 / 1e6;
        assert!((mean_ms - 5.0).abs() < 0.15, "{mean_ms}");
    }
}
