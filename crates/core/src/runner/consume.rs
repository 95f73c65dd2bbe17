//! The consumer loop: recv → unstamp → record + integrity. One task per consumer; it owns its
//! recorder and integrity tracker, so nothing here takes a lock.

use super::produce::Ticker;
use super::state::{OwnedCounter, RunState};
use crate::clock::{now_ns, to_instant};
use crate::driver::{Consumer, Delivery};
use crate::stamp::Stamp;
use msgbench_metrics::{GroupSeen, GroupView, IntegrityTracker, Phase, Recorder, Role, Snapshot};
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
}

struct Books {
    rec: Recorder,
    tracker: IntegrityTracker,
    group: Option<GroupView>,
    ticker: Ticker,
    phase: Phase,
    /// Distinct deliveries since the start (survives `take()`).
    distinct: u64,
}

impl ConsumerTask {
    #[inline]
    fn on_delivery(&self, b: &mut Books, d: &Delivery) {
        let now = now_ns();
        // Close the interval (or phase) first: this delivery belongs to the one now starts.
        self.tick(b, now);
        match Stamp::read(&d.payload) {
            Ok(s) if s.run_id == self.run_id => {
                b.rec
                    .record_delivery(now.saturating_sub(s.intended_ns), d.payload.len());
                let first_in_group = b
                    .group
                    .as_mut()
                    .is_none_or(|g| g.first_delivery(s.producer, s.stream, s.seq));
                if first_in_group {
                    let dups = b.rec.counters().duplicated;
                    b.tracker
                        .observe(s.producer, s.stream, s.seq, b.rec.counters_mut());
                    if b.rec.counters().duplicated == dups {
                        b.distinct += 1;
                    }
                } else {
                    // Another member (or this one) of the queue group already had it.
                    b.rec.counters_mut().duplicated += 1;
                }
                if d.redelivered {
                    b.rec.counters_mut().redelivered += 1;
                }
            }
            _ => b.rec.record_foreign(),
        }
    }

    #[inline]
    fn tick(&self, b: &mut Books, now: u64) {
        let cur = self.state.phase_at(now);
        if cur != b.phase {
            let k = b.ticker.recording();
            self.flush(b, k);
            b.phase = cur;
        }
        if let Some(k) = b.ticker.due(now) {
            self.flush(b, k);
        }
    }

    fn flush(&self, b: &mut Books, interval: u64) {
        let s = b.rec.take(Role::Consumer, self.id, b.phase, interval);
        if !s.is_empty() {
            let _ = self.snapshots.send(s);
        }
    }

    pub async fn run<C: Consumer>(self, mut c: C) {
        let mut b = Books {
            rec: Recorder::new(u64::MAX),
            tracker: IntegrityTracker::new(),
            group: self.group.clone().map(GroupView::new),
            ticker: Ticker::new(self.t0_ns, self.tick_ns),
            phase: self.state.phase_at(self.t0_ns),
            distinct: 0,
        };
        let mut stop = self.stop.clone();
        loop {
            if self.state.consumers_stopped() {
                break;
            }
            let next_tick = to_instant(b.ticker.next_ns);
            tokio::select! {
                biased;
                r = c.recv() => match r {
                    Ok(Some(d)) => {
                        self.on_delivery(&mut b, &d);
                        // Take what is already waiting without another trip through select!.
                        for _ in 0..BATCH {
                            let mut cx = Context::from_waker(Waker::noop());
                            let fut = pin!(c.recv());
                            match fut.poll(&mut cx) {
                                Poll::Ready(Ok(Some(d))) => self.on_delivery(&mut b, &d),
                                Poll::Ready(Ok(None)) => break,
                                Poll::Ready(Err(e)) => { b.rec.record_error(e.kind()); break }
                                Poll::Pending => break,
                            }
                        }
                        self.distinct.set(b.distinct);
                    }
                    Ok(None) => break,
                    Err(e) => {
                        b.rec.record_error(e.kind());
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    }
                },
                _ = tokio::time::sleep_until(next_tick) => self.tick(&mut b, now_ns()),
                _ = stop.changed() => break,
            }
        }
        let _ = c.close().await;
        let k = b.ticker.recording();
        self.flush(&mut b, k);
    }
}
