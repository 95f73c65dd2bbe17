//! The coordinator's loop over a running message run: warm-up, measure and drain.
//!
//! Each turn it lets the phase machine move on, watches a backlog run, asks whether the drain is
//! over, and then waits for the first of: a task's snapshot (merged), a driver event (logged and
//! counted), a producer whose sends began failing or that had to stop, the last producer
//! ending, the next tick or phase boundary, or an interrupt. A tick samples the process's CPU and event-loop lag, frees window
//! places past the ack timeout, looks for stalled producers and emits the intervals that are
//! complete.

use super::EventKind;
use super::backlog::BacklogEvent;
use super::connect::{interval_before, process_cpu_s};
use super::messages::{MessageRun, no_task_snapshot, run_event};
use super::phases::Change;
use super::produce::ProducerNews;
use super::release::SEGMENT_QUIET_NS;
use super::{Observer, lag};
use crate::clock::{now_ns, to_instant};
use crate::driver::{DriverEvent, DriverEventKind};
use crate::scenario::Measure;
use crate::shutdown::Shutdown;
use msgbench_metrics::{Counters, ErrorKind, Phase, Snapshot};
use std::time::Duration;
use tokio::sync::mpsc;

/// Deliveries this recent at the drain's deadline mean they were still arriving (see the
/// drain's time-out warning).
const STILL_ARRIVING_NS: u64 = 1_000_000_000;

/// How many times a run reports producers' sends beginning to fail; after that they are
/// counted only.
const FAILING_TOLD: u32 = 3;

impl MessageRun<'_> {
    /// The load starts: the first phase begins (call at `t0`).
    pub fn begin(&mut self, observer: &mut dyn Observer) {
        let first = self.phases.first();
        self.agg.begin_phase(first, 0.0);
        observer.event(&run_event(
            self.t0,
            EventKind::Phase,
            first.name().into(),
            self.t0,
        ));
    }

    /// Runs the phases to the end of the drain.
    pub async fn drive(
        &mut self,
        events: &mut mpsc::UnboundedReceiver<DriverEvent>,
        observer: &mut dyn Observer,
        shutdown: &Shutdown,
    ) {
        loop {
            let now = now_ns();
            let done = self.measure_done(now);
            let cut = self.interrupted || self.gave_up;
            while let Some(c) = self.phases.advance(now, done, cut) {
                self.change_phase(c, now, observer);
            }
            self.watch_backlog(now, observer);
            if self.drain_over(now, shutdown) {
                return;
            }
            let wake = self.next_wake(now);
            tokio::select! {
                Some(s) = self.snapshots.recv() => self.merge(s),
                Some(e) = events.recv() => self.driver_event(e, observer),
                Some(news) = self.news.recv() => self.producer_news(news, observer),
                Some(_) = self.tasks.producers.join_next(), if !self.producers_done => {
                    if self.tasks.producers.is_empty() {
                        self.producers_done = true;
                    }
                }
                _ = tokio::time::sleep_until(to_instant(wake)) => self.tick(observer),
                _ = shutdown.reached(1), if !self.interrupted => {
                    self.interrupted = true;
                    let why = "interrupted: stopping producers and draining";
                    observer.event(&run_event(self.t0, EventKind::Warning, why.into(), now_ns()));
                }
            }
        }
    }

    /// Whether the measure phase's work is done, whatever the time: every local producer
    /// finished (its quota sent, or it had to stop). A segment with consumers only cannot know
    /// what the others send: its count-bounded measure phase is over once deliveries came and
    /// stopped (or none came for a long while).
    fn measure_done(&mut self, now: u64) -> bool {
        if self.local_producers {
            return self.producers_done;
        }
        if let Some(m) = &self.member {
            // A group without producers: the other groups say when sending is over.
            return self.phases.measure_end().is_none() && m.producers_done();
        }
        if self.phases.measure_end().is_some() {
            return false;
        }
        let got = self.delivered();
        if got != self.last_got.0 {
            self.last_got = (got, now);
        }
        if got > 0 {
            now.saturating_sub(self.last_got.1) >= SEGMENT_QUIET_NS
        } else {
            now.saturating_sub(self.t0)
                >= self.plan.drain.max(Duration::from_secs(10)).as_nanos() as u64
        }
    }

    /// Carries out a phase change: the ended phase's CPU sample and totals, the tasks told (at a
    /// drain: producers stop, and stop waiting for acks at its deadline), the event logged.
    fn change_phase(&mut self, c: Change, now: u64, observer: &mut dyn Observer) {
        let k = interval_before(c.at, self.t0, self.tick_ns, self.emitted);
        // A phase that ends just after a tick, within its grace (a count-bounded measure
        // phase, whenever its last message goes): the interval that tick closed is sampled
        // first, else its whole second of CPU lands in the sliver of the phase past it, which
        // then looks saturated and the interval before it idle.
        let start_k = self.t0 + k * self.tick_ns;
        if k > 0
            && self.cpu_upto.is_none_or(|u| u + 1 < k)
            && self.emitted.is_none_or(|e| e + 1 < k)
        {
            self.sample_cpu(k - 1, self.phases.phase_before(start_k));
            self.cpu_upto = Some(k - 1);
        }
        self.sample_cpu(k, c.from);
        if c.at >= start_k + self.tick_ns {
            self.cpu_upto = Some(k);
        }
        self.agg.end_phase(c.from, self.phases.secs(c.at));
        self.agg.begin_phase(c.to, self.phases.secs(c.at));
        self.state.set_phase(c.to);
        if c.to == Phase::Drain {
            self.state
                .set_boundaries(self.phases.warmup_end().min(c.at), c.at);
            self.state.stop_producers();
            if let Some(deadline) = self.phases.drain_deadline() {
                self.state.set_drain_deadline_ns(deadline);
            }
        }
        observer.event(&run_event(
            self.t0,
            EventKind::Phase,
            c.to.name().into(),
            now,
        ));
    }

    /// Credits the process's CPU time and event-loop lag since the last sample to interval `k`
    /// of `phase`.
    pub(super) fn sample_cpu(&mut self, k: u64, phase: Phase) {
        let cpu = process_cpu_s();
        self.agg.record_cpu(k, phase, cpu - self.cpu_mark);
        self.agg.record_lag(k, phase, lag::take_max_ns());
        self.cpu_mark = cpu;
    }

    /// A backlog run: the consumers are released once the backlog is sent (or no more will
    /// be), and the drain of the backlog is timed.
    fn watch_backlog(&mut self, now: u64, observer: &mut dyn Observer) {
        let no_more = self.producers_done
            || self.phases.phase() == Phase::Drain
            || self.interrupted
            || self.gave_up;
        let sent: u64 = self.sent.iter().map(|s| s.get()).sum();
        let got = self.delivered();
        let receivers = self.expects.first().copied().unwrap_or(self.receivers);
        let Some(b) = self.backlog.as_mut().filter(|b| b.pending()) else {
            return;
        };
        if let Some(BacklogEvent::Released(m) | BacklogEvent::Drained(m)) =
            b.check(now, self.t0, sent, got, receivers, no_more)
        {
            observer.event(&run_event(self.t0, EventKind::Backlog, m, now));
        }
    }

    /// Distinct deliveries so far, all consumers together.
    pub(super) fn delivered(&self) -> u64 {
        self.distinct.iter().map(|d| d.get()).sum()
    }

    /// Whether the drain is over: producers finished and every expected delivery arrived (a
    /// segment: deliveries stopped for a while; a group: the run's), its deadline passed, or
    /// a second interrupt.
    /// Over short, it says why in a warning.
    fn drain_over(&mut self, now: u64, shutdown: &Shutdown) -> bool {
        let Some(deadline) = self.phases.drain_deadline() else {
            return false;
        };
        let expected: u64 = self
            .sent
            .iter()
            .zip(&self.expects)
            .map(|(s, r)| s.get() * r)
            .sum();
        let got = self.delivered();
        if got != self.last_got.0 || self.last_got.1 == 0 {
            self.last_got = (got, now);
        }
        let complete = if let Some(m) = &self.member {
            // The run's account, not this group's: others may receive what it sends.
            m.post(expected, got, self.producers_done);
            m.complete()
        } else if self.plan.segment.is_some() {
            self.producers_done && now.saturating_sub(self.last_got.1) >= SEGMENT_QUIET_NS
        } else {
            self.producers_done
                && got >= expected
                && self.tracker.as_ref().is_none_or(|t| t.live() == 0)
        };
        if !(complete || now >= deadline || shutdown.requests() >= 2) {
            return false;
        }
        if !complete {
            self.drain_short = true;
            // After an interrupt the drain is cut short: the warning names the wait there was.
            let interrupted = shutdown.requests() >= 1;
            let drain = if interrupted {
                self.plan.drain.min(super::phases::INTERRUPTED_DRAIN)
            } else {
                self.plan.drain
            };
            let longer = if interrupted {
                "the interrupt cut the drain short"
            } else {
                "a longer --drain would wait for them"
            };
            self.warnings.push(match &self.tracker {
                Some(t) if now >= deadline => format!(
                    "drain timed out after {drain:?} with {} messages still short of a stage",
                    t.live()
                ),
                _ if now >= deadline && got >= expected && !self.producers_done => format!(
                    "drain timed out after {drain:?} waiting for producers that had not \
                     finished (blocked in a send?); every expected delivery arrived ({got} of \
                     {expected})"
                ),
                // Deliveries still coming at the deadline: what is counted lost may only be
                // late (a slow consumer's or broker's backlog), which the warning must say.
                _ if now >= deadline && got > 0 && now.saturating_sub(self.last_got.1) < STILL_ARRIVING_NS => format!(
                    "drain timed out after {drain:?} with {got} of {expected} expected deliveries, \
                     and deliveries were still arriving (the last {} ms before it ended): those \
                     counted lost may only be late; {longer}",
                    now.saturating_sub(self.last_got.1) / 1_000_000
                ),
                _ if now >= deadline => format!(
                    "drain timed out after {drain:?} with {got} of {expected} expected deliveries"
                ),
                _ => "drain cut short by a second interrupt".to_string(),
            });
        }
        true
    }

    /// The next instant the loop must look again without being woken: a tick's emission, a
    /// phase boundary, the drain's next look, a pending backlog's next look.
    fn next_wake(&self, now: u64) -> u64 {
        let backlog = if self.backlog.as_ref().is_some_and(|b| b.pending()) {
            now + 10_000_000
        } else {
            u64::MAX
        };
        self.next_emit.min(self.phases.next_due(now)).min(backlog)
    }

    /// Merges a snapshot; one for an interval already emitted joins the next.
    pub(super) fn merge(&mut self, mut s: Snapshot) {
        if let Some(e) = self.emitted
            && s.interval <= e
        {
            s.interval = e + 1;
        }
        self.agg.add(&s);
    }

    /// A driver's event: logged; a disconnection and a reconnection also counted.
    fn driver_event(&mut self, e: DriverEvent, observer: &mut dyn Observer) {
        match e.kind {
            DriverEventKind::Reconnected => self.extra.reconnects += 1,
            DriverEventKind::Disconnected => self.extra.errors.add(ErrorKind::Disconnect, 1),
            DriverEventKind::Violation => self.extra.errors.add(ErrorKind::Protocol, 1),
            DriverEventKind::Refused(n) => self.extra.errors.add(ErrorKind::Nack, n),
            DriverEventKind::Error | DriverEventKind::Warning => {}
        }
        observer.event(&run_event(self.t0, e.kind.into(), e.detail, now_ns()));
    }

    /// What a producer said: a stop is an error of the run; sends that began failing are a
    /// warning event, the first [`FAILING_TOLD`] times in a run (with many producers on one
    /// dead target, the rest would only repeat it).
    pub(super) fn producer_news(&mut self, news: ProducerNews, observer: &mut dyn Observer) {
        match news {
            ProducerNews::Stopped(why) => self.producer_failed(why, observer),
            ProducerNews::Failing(why) => {
                self.failing_told += 1;
                let why = match self.failing_told {
                    n if n < FAILING_TOLD => why,
                    FAILING_TOLD => {
                        format!("{why} (further failing sends are counted, not reported)")
                    }
                    _ => return,
                };
                observer.event(&run_event(self.t0, EventKind::Warning, why, now_ns()));
            }
        }
    }

    /// A producer that had to stop: counted, logged, and (once per distinct reason) a warning.
    pub(super) fn producer_failed(&mut self, why: String, observer: &mut dyn Observer) {
        self.producers_failed += 1;
        observer.event(&run_event(self.t0, EventKind::Error, why.clone(), now_ns()));
        if !self.warnings.contains(&why) {
            self.warnings.push(why);
        }
    }

    /// A tick, once its grace has passed: CPU and lag sampled into the interval being emitted
    /// (in the phase it ended in), counts of no task's own merged, window places past the ack
    /// timeout freed, stalled producers reported, complete intervals emitted.
    fn tick(&mut self, observer: &mut dyn Observer) {
        let now = now_ns();
        if now < self.next_emit {
            return;
        }
        let k = (now - self.grace_ns - self.t0) / self.tick_ns;
        let upto = k.saturating_sub(1);
        let idx = self.emitted.map_or(upto, |e| upto.max(e + 1));
        if self.cpu_upto.is_some_and(|u| u >= idx) {
            // Sampled already at a phase change: what came since is the running interval's.
            let running = (now - self.t0) / self.tick_ns;
            self.sample_cpu(running, self.phases.phase());
        } else {
            let ended_in = self.phases.phase_before(self.t0 + (idx + 1) * self.tick_ns);
            self.sample_cpu(idx, ended_in);
            self.cpu_upto = Some(idx);
        }
        if self.extra != Counters::default() {
            let counters = std::mem::take(&mut self.extra);
            self.merge(no_task_snapshot(self.phases.phase(), upto, counters));
        }
        self.free_expired_places(now, observer);
        if let Some(m) = self.stalls.check(now) {
            observer.event(&run_event(self.t0, EventKind::Warning, m, now));
        }
        self.give_up_on_blocked_producers(now, observer);
        if self.emitted.is_none_or(|e| upto > e) {
            self.emit(upto, observer);
        }
        self.next_emit = self.t0 + (k + 1) * self.tick_ns + self.grace_ns;
    }

    /// A count-bounded run has no end of its own but its quota: when the system under test has
    /// held every producer in one send for as long as a failing producer is given
    /// ([`super::produce::GIVE_UP_NS`]), the run ends (its drain, its report) with each of them
    /// counted as stopped, instead of waiting for a peer that may never take a message (no
    /// AMQP 1.0 credit, a flow-control window kept shut).
    fn give_up_on_blocked_producers(&mut self, now: u64, observer: &mut dyn Observer) {
        if self.gave_up || self.interrupted || !matches!(self.plan.measure, Measure::Messages(_)) {
            return;
        }
        let wait = Duration::from_nanos(super::produce::GIVE_UP_NS);
        let blocked = self.stalls.all_blocked(now, wait);
        if blocked.is_empty() {
            return;
        }
        self.gave_up = true;
        for id in blocked {
            self.producer_failed(
                format!(
                    "producer {id} stopped: the system under test took no message from it for \
                     {} s (it held the producer in one send: flow control, no AMQP 1.0 credit \
                     or session window, a full broker), and a count-bounded run has no other end",
                    wait.as_secs()
                ),
                observer,
            );
        }
    }

    /// Multi-stage runs: messages that did not reach the window stage within the ack timeout
    /// give their window places back (they count as missing unless they arrive).
    fn free_expired_places(&mut self, now: u64, observer: &mut dyn Observer) {
        let Some(t) = &self.tracker else {
            return;
        };
        let timeout = self.plan.ack_timeout;
        let n = t.expire_window(now.saturating_sub(timeout.as_nanos() as u64));
        if n > 0 {
            self.expired_places += n;
            observer.event(&run_event(self.t0, EventKind::Warning, format!(
                "{n} messages did not reach the window stage within {timeout:?} (ack timeout): their window places were freed; they count as missing unless they arrive"
            ), now));
        }
    }

    /// Hands the intervals up to `upto` to the observer.
    fn emit(&mut self, upto: u64, observer: &mut dyn Observer) {
        for iv in self.agg.take_intervals(upto) {
            observer.interval(&iv);
        }
        self.emitted = Some(self.emitted.map_or(upto, |e| e.max(upto)));
    }
}
