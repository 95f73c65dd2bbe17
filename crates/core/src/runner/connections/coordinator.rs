//! The coordinator of a connection workload, step by step:
//!
//! 1. [`ConnectionRun::prepare`]: a segment's share, the open-file and local-port limits
//!    checked (and the soft limit raised, or io_uring tables chosen past the hard one), the
//!    start barrier set.
//! 2. [`ConnectionRun::drive`]: each turn launches the attempts the rate and the concurrency
//!    allow, moves the phases on (the ramp's end, the reconnect storm, the hold's or the
//!    storm's end, the closing drain), and waits for attempts' answers, driver events, the next due instant or an
//!    interrupt; every tick emits an interval with the held count and the process's memory.
//! 3. [`ConnectionRun::finish`]: the last interval, the summary (connections/s, memory per
//!    held connection, failures by cause) and the outcome.
//!
//! It owns the only recorder: attempts answer over a channel, held connections through
//! [`Levels`]' atomics, so nothing per connection is shared or locked.

use super::arrival::ArrivalSchedule;
use super::journey::{JourneyTask, run_journey};
use super::reconnect::{Churn, DropCause, ReconnectStorm};
use super::{
    Attempt, HoldTask, LevelCounts, Levels, flush_tick, hard_fd_limit, hold, preflight_fds,
    preflight_ports, rss_bytes, storm_cycle,
};
use crate::clock::{now_ns, to_instant, unix_ms};
use crate::driver::{ConnectFailure, Driver, DriverEvent, SessionSpec};
use crate::runner::{
    EventKind, Observer, RunError, RunOutcome, messages::run_event, process_cpu_s, secs,
};
use crate::scenario::{ConnectionMode, ConnectionPlan, Measure, RunPlan};
use crate::shutdown::Shutdown;
use msgbench_metrics::aggregate::Integrity;
use msgbench_metrics::{Aggregator, ConnectionSummary, Gauges, Phase, PhaseTotals, Recorder};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Time between the start barrier being set and the load's release.
pub(super) const LEAD_NS: u64 = 10_000_000;
/// Connection failures reported one by one before they are only counted.
const FAILURES_REPORTED: u32 = 10;

/// The longest a timed storm's measure phase waits for the attempts in flight at its end
/// (never longer than the connect time-out, which answers them anyway).
const LATE_ANSWERS_MAX: Duration = Duration::from_secs(5);

/// A connection workload from its preparation on.
pub(super) struct ConnectionRun<'p, D: Driver> {
    driver: Arc<D>,
    plan: &'p RunPlan,
    /// The plan's connections (a segment's share of them).
    cp: ConnectionPlan,
    /// Connection `k`'s id: `k`, or interleaved with the other segments' (`k * N + I`) so
    /// client ids never collide.
    id_of: Box<dyn Fn(u64) -> u64 + Send>,
    hold_mode: bool,
    /// Journey mode: attempts are virtual users, answered when their journey is done.
    journey_mode: bool,
    /// The journey's steps, shared by every user.
    steps: Arc<[crate::scenario::journey::Step]>,
    /// Connections held in io_uring tables, past the open-file limit.
    fd_free: bool,
    fd_limit: u64,
    pub t0: u64,
    tick_ns: u64,
    started_unix_ms: u64,
    warnings: Vec<String>,
    rss_baseline: u64,
    agg: Aggregator,
    rec: Recorder,
    levels: Arc<Levels>,
    attempts_tx: mpsc::UnboundedSender<Attempt>,
    attempts: mpsc::UnboundedReceiver<Attempt>,
    /// Tells held connections to close.
    close: watch::Sender<bool>,
    /// The reconnect storm the plan asks for.
    reconnect: Option<ReconnectStorm>,
    /// Its settling was told.
    reconnect_told: bool,
    /// Churn the plan asks for.
    churn: Option<Churn>,
    payload: Arc<[u8]>,
    topic: String,
    phase: Phase,
    /// When attempts start (`--connect-rate`, `--connect-arrival`).
    arrivals: ArrivalSchedule,
    /// A timed storm's end.
    measure_end: Option<u64>,
    /// How long after a timed storm's end its measure phase still waits for the attempts in
    /// flight then (see [`Self::measure_step`]).
    late_grace_ns: u64,
    /// Attempts (hold) or cycles (storm) to make; `u64::MAX`: until the time is up.
    limit: u64,
    launched: u64,
    answered: u64,
    opened: u64,
    ramp_end: Option<u64>,
    hold_end: Option<u64>,
    drain_deadline: Option<u64>,
    peak_held: u64,
    rss_peak: u64,
    interrupted: bool,
    /// The drain ended with connections still open or attempts unanswered.
    drain_short: bool,
    cpu_mark: f64,
    /// Held connections' counts at the last tick (see [`flush_tick`]).
    last: LevelCounts,
    next_tick: u64,
    interval: u64,
    failures_reported: u32,
}

impl<'p, D: Driver> ConnectionRun<'p, D> {
    /// Checks the limits the workload needs and sets the start barrier.
    pub fn prepare(
        driver: Arc<D>,
        plan: &'p RunPlan,
        cp: &ConnectionPlan,
        observer: &mut dyn Observer,
        start: Option<u64>,
    ) -> Result<Self, RunError> {
        let (cp, id_of): (ConnectionPlan, Box<dyn Fn(u64) -> u64 + Send>) = match plan.segment {
            // A segment opens its share of the connections at its share of the rate.
            Some(s) => {
                let share = ConnectionPlan {
                    count: cp.count.map(|c| s.share(c)),
                    rate: cp.rate.map(|r| r / s.count as f64),
                    concurrency: (s.share(cp.concurrency as u64) as u32).max(1),
                    ..cp.clone()
                };
                let (n, i) = (s.count as u64, s.index as u64);
                (share, Box::new(move |k| k * n + i))
            }
            None => (cp.clone(), Box::new(|k| k)),
        };
        let hold_mode = cp.mode == ConnectionMode::Hold;
        let journey_mode = cp.mode == ConnectionMode::Journey;
        if journey_mode {
            use crate::scenario::journey::Step;
            let has = |f: fn(&Step) -> bool| cp.journey.iter().any(f);
            let needs = [
                (
                    has(|s| matches!(s, Step::Subscribe(_))),
                    driver.sessions_subscribe(),
                    "`subscribe` step needs a protocol whose sessions subscribe (mqtt://, nats://, amqp://)",
                ),
                (
                    has(|s| matches!(s, Step::Request(_))),
                    driver.sessions_request(),
                    "`request` step needs a protocol whose sessions send requests (nats://, amqp://, or mqtt:// with --mqtt-version 5)",
                ),
            ];
            if let Some((_, _, what)) = needs.iter().find(|(used, can, _)| *used && !*can) {
                return Err(RunError::Unsupported(format!("a journey's {what}")));
            }
        }
        if journey_mode && cp.repeat == 0 && !matches!(plan.measure, Measure::Duration(_)) {
            return Err(RunError::Unsupported(
                "journeys repeated until the end need a measure duration (--duration), not a \
                 message count"
                    .into(),
            ));
        }
        // Journeys hold sessions as a hold does: every user may be connected at once.
        let (fd_limit, fd_free, notes) = descriptors(&*driver, &cp, hold_mode || journey_mode)?;
        let tick_ns = plan.tick.as_nanos() as u64;
        let (t0, late) = match start {
            Some(t0) => (t0, None),
            None => crate::runner::release::release_instant(plan, LEAD_NS),
        };
        let mut warnings = Vec::new();
        if let Some(w) = late {
            observer.event(&run_event(t0, EventKind::Warning, w.clone(), t0));
            warnings.push(w);
        }
        for n in notes {
            observer.event(&run_event(t0, EventKind::Warning, n, now_ns()));
        }
        let (attempts_tx, attempts) = mpsc::unbounded_channel::<Attempt>();
        let rss_baseline = rss_bytes();
        let measure_end = match (cp.mode, plan.measure) {
            (ConnectionMode::Storm, Measure::Duration(d)) if cp.count.is_none() => {
                Some(t0 + d.as_nanos() as u64)
            }
            // Journeys end when every user is done, at the latest when the time is up.
            (ConnectionMode::Journey, Measure::Duration(d)) => Some(t0 + d.as_nanos() as u64),
            _ => None,
        };
        // Storm: `count` cycles, or `--messages N` cycles, or the measure duration.
        let limit = match (cp.count, plan.measure) {
            (Some(n), _) => n,
            (None, Measure::Messages(n)) => plan.segment.map_or(n, |s| s.share(n)),
            (None, _) => u64::MAX,
        };
        let reconnect_at = cp.reconnect_at;
        let steps = cp.journey.clone().into();
        let churn = cp
            .churn
            .filter(|_| hold_mode)
            .map(|r| Churn::new(r, cp.arrival, cp.count.unwrap_or(0), u64::from(plan.run_id)));
        Ok(ConnectionRun {
            driver,
            plan,
            arrivals: ArrivalSchedule::new(cp.rate, cp.arrival, u64::from(plan.run_id)),
            cp,
            id_of,
            hold_mode,
            journey_mode,
            steps,
            fd_free,
            fd_limit,
            t0,
            tick_ns,
            started_unix_ms: unix_ms() + 10,
            warnings,
            rss_baseline,
            agg: Aggregator::new(plan.tick.as_secs_f64()),
            rec: Recorder::new(u64::MAX),
            levels: Arc::new(Levels::default()),
            attempts_tx,
            attempts,
            close: watch::channel(false).0,
            reconnect: reconnect_at.map(ReconnectStorm::new),
            reconnect_told: false,
            churn,
            payload: vec![0x6d; plan.size.max() as usize].into(),
            topic: plan.topics[0].clone(),
            phase: Phase::Measure,
            measure_end,
            late_grace_ns: plan.connect_timeout.min(LATE_ANSWERS_MAX).as_nanos() as u64,
            limit,
            launched: 0,
            answered: 0,
            opened: 0,
            ramp_end: None,
            hold_end: None,
            drain_deadline: None,
            peak_held: 0,
            rss_peak: rss_baseline,
            interrupted: false,
            drain_short: false,
            cpu_mark: process_cpu_s(),
            last: LevelCounts::default(),
            next_tick: t0 + tick_ns,
            interval: 0,
            failures_reported: 0,
        })
    }

    /// The workload starts (call at `t0`): its measure phase begins.
    pub fn begin(&mut self, observer: &mut dyn Observer) {
        self.cpu_mark = process_cpu_s();
        self.agg.begin_phase(Phase::Measure, 0.0);
        observer.event(&run_event(
            self.t0,
            EventKind::Phase,
            "measure".into(),
            self.t0,
        ));
    }

    /// Runs the workload to the end of its drain.
    pub async fn drive(
        &mut self,
        events: &mut mpsc::UnboundedReceiver<DriverEvent>,
        observer: &mut dyn Observer,
        shutdown: &Shutdown,
    ) {
        loop {
            let now = now_ns();
            let launching =
                self.phase == Phase::Measure && !self.interrupted && self.launched < self.limit;
            if launching {
                self.launch(now);
            }
            if self.phase == Phase::Measure {
                self.measure_step(now, observer);
            }
            if self.drain_over(now, shutdown) {
                return;
            }
            let wake = self.next_wake(now, launching);
            tokio::select! {
                Some(a) = self.attempts.recv() => self.answers(a, observer),
                Some(e) = events.recv() => {
                    observer.event(&run_event(self.t0, e.kind.into(), e.detail, now_ns()));
                }
                _ = tokio::time::sleep_until(to_instant(wake)) => {}
                _ = shutdown.reached(1), if !self.interrupted => {
                    self.interrupted = true;
                    let why = "interrupted: closing connections (interrupt again to stop at once)";
                    observer.event(&run_event(self.t0, EventKind::Warning, why.into(), now_ns()));
                }
            }
            self.tick(observer);
        }
    }

    /// When attempt `n` is due (counted from the start, so a slow attempt does not push the
    /// schedule back), or at once without a rate.
    fn due(&self, n: u64) -> u64 {
        self.t0 + self.arrivals.due(n)
    }

    /// Launches what the rate and the concurrency allow (at most 1,024 per turn, so answers are
    /// taken between launches).
    fn launch(&mut self, now: u64) {
        let mut n = 0;
        while self.launched < self.limit
            && self.launched - self.answered < self.in_flight_cap()
            && self.measure_end.is_none_or(|e| now < e)
            && n < 1024
            && self.due(self.launched) <= now
        {
            self.spawn_attempt();
            self.arrivals.started();
            self.launched += 1;
            n += 1;
        }
    }

    /// Attempts in flight at once: `concurrency`; journeys' users are not attempts in flight
    /// (they live for the run), only their rate paces them.
    fn in_flight_cap(&self) -> u64 {
        if self.journey_mode {
            u64::MAX
        } else {
            self.cp.concurrency as u64
        }
    }

    /// Spawns the next attempt: a connection to hold, one storm cycle or a virtual user.
    fn spawn_attempt(&self) {
        let k = self.launched;
        let spec = SessionSpec {
            id: (self.id_of)(k),
            topic: self.topic.clone(),
            source: (!self.cp.source_addrs.is_empty())
                .then(|| self.cp.source_addrs[(k % self.cp.source_addrs.len() as u64) as usize]),
            fd_free: self.fd_free,
        };
        let d = self.driver.clone();
        let tx = self.attempts_tx.clone();
        let timeout = self.plan.connect_timeout;
        if self.journey_mode {
            let task = JourneyTask {
                levels: self.levels.clone(),
                close: self.close.subscribe(),
                steps: self.steps.clone(),
                repeat: self.cp.repeat,
                payload: self.payload.clone(),
                rng: crate::rng::Rng::new(
                    (self.id_of)(k) ^ (u64::from(self.plan.run_id) << 32) ^ 0x5EED,
                ),
                request_timeout: self.plan.ack_timeout,
            };
            tokio::spawn(run_journey(d, spec, timeout, tx, task));
        } else if self.hold_mode {
            let task = HoldTask {
                levels: self.levels.clone(),
                close: self.close.subscribe(),
                storm: match &self.reconnect {
                    Some(r) => r.tx.subscribe(),
                    None => watch::channel(None).1,
                },
                churn: self.churn.as_ref().map(|c| (c.slots.clone(), k as usize)),
                payload: self.payload.clone(),
                messages: self.cp.messages,
                publish_interval: self.cp.publish_interval,
                next: None,
                id: (self.id_of)(k),
            };
            tokio::spawn(hold(d, spec, timeout, tx, task));
        } else {
            let (payload, messages, levels) =
                (self.payload.clone(), self.cp.messages, self.levels.clone());
            tokio::spawn(async move {
                storm_cycle(&*d, &spec, timeout, &tx, &payload, messages, &levels).await;
            });
        }
    }

    /// The measure phase's changes: a hold's ramp ends once every attempt was made and
    /// answered (its memory figure taken then, everything being open); the measure phase ends
    /// when the hold's time is up, when a storm made its cycles or ran its time, or at an
    /// interrupt.
    fn measure_step(&mut self, now: u64, observer: &mut dyn Observer) {
        let all_answered = self.answered == self.launched;
        let done_launching =
            self.launched >= self.limit || self.measure_end.is_some_and(|e| now >= e);
        if self.hold_mode
            && self.ramp_end.is_none()
            && ((done_launching && all_answered) || self.interrupted)
        {
            self.ramp_end = Some(now);
            let held = self.levels.held.load(Relaxed);
            self.note_peak(held, rss_bytes());
            let (opened, launched) = (self.opened, self.launched);
            observer.event(&run_event(
                self.t0,
                EventKind::Connected,
                format!(
                    "{opened} of {launched} connections open in {:.3}s; holding {held} for {:?}",
                    secs(self.t0, now),
                    self.cp.hold
                ),
                now,
            ));
            self.hold_end = Some(now + self.cp.hold.as_nanos() as u64);
        }
        self.reconnect_step(now, observer);
        if self.ramp_end.is_some()
            && !self.interrupted
            && let Some(c) = self.churn.as_mut()
        {
            let first = c.next_due() == u64::MAX;
            c.step(now);
            if first {
                let what = format!(
                    "churn: dropping {} held connections per second, one at a time, each \
                     reopened at once",
                    self.cp.churn.unwrap_or(0.0)
                );
                observer.event(&run_event(self.t0, EventKind::Warning, what, now));
            }
        }
        let over = if self.hold_mode {
            self.hold_end.is_some_and(|e| now >= e) || self.interrupted
        } else {
            // A timed storm's attempts still in flight at its end were made in it: their
            // answers (among them its slowest) are its own, so the phase waits for them, up
            // to a grace; what is still unanswered then is the drain's. A journey's users,
            // which may be mid-journey, are not waited for.
            let late_over = self.journey_mode
                || self
                    .measure_end
                    .is_some_and(|e| now >= e.saturating_add(self.late_grace_ns));
            (done_launching && all_answered)
                || self.interrupted
                || (self.measure_end.is_some_and(|e| now >= e) && (all_answered || late_over))
        };
        if over {
            self.begin_drain(now, observer);
        }
    }

    /// Fires the reconnect storm when it is due (after the ramp, so that every connection is
    /// held or failed), and tells once everyone is back.
    fn reconnect_step(&mut self, now: u64, observer: &mut dyn Observer) {
        let ramp_over = self.ramp_end.is_some();
        let Some(r) = self.reconnect.as_mut() else {
            return;
        };
        if r.due(self.t0, now, ramp_over) && !self.interrupted {
            let held = self.levels.held.load(Relaxed);
            r.fire(now, held);
            let what = format!("reconnect storm: dropping all {held} held connections at once");
            observer.event(&run_event(self.t0, EventKind::Warning, what, now));
        }
        if !self.reconnect_told
            && let Some(note) = r.settled_note(self.t0)
        {
            self.reconnect_told = true;
            observer.event(&run_event(self.t0, EventKind::Connected, note, now_ns()));
        }
    }

    /// The peak of held connections, with the memory at that peak.
    fn note_peak(&mut self, held: u64, rss: u64) {
        if held > self.peak_held || (held == self.peak_held && rss > self.rss_peak) {
            self.peak_held = held;
            self.rss_peak = rss;
        }
    }

    /// Closes the measure phase (its last interval taken now) and begins the drain: held
    /// connections are told to close. Closing many takes its time (a goodbye and a close
    /// each): the drain allows at least 1 s per 10,000 held, interrupted or not (an
    /// interrupted run otherwise gets at most 2 s; a second Ctrl-C cuts either short).
    fn begin_drain(&mut self, now: u64, observer: &mut dyn Observer) {
        let k = ((now.saturating_sub(self.t0)) / self.tick_ns).max(self.interval);
        self.flush_interval(k);
        self.agg.end_phase(self.phase, secs(self.t0, now));
        self.phase = Phase::Drain;
        self.agg.begin_phase(self.phase, secs(self.t0, now));
        observer.event(&run_event(self.t0, EventKind::Phase, "drain".into(), now));
        if self.ramp_end.is_none() {
            self.ramp_end = Some(now);
        }
        self.close.send_replace(true);
        if let Some(c) = &self.churn {
            observer.event(&run_event(self.t0, EventKind::Connected, c.note(), now));
        }
        let held = self.levels.held.load(Relaxed);
        let closing = Duration::from_secs_f64(held as f64 / 10_000.0);
        let grace = if self.interrupted {
            Duration::from_secs(2).min(self.plan.drain).max(closing)
        } else {
            self.plan.drain.max(closing)
        };
        self.drain_deadline = Some(now + grace.as_nanos() as u64);
    }

    /// Credits CPU, the recorder's figures and the held connections' counts and gauges to
    /// interval `k` of the current phase.
    fn flush_interval(&mut self, k: u64) {
        let cpu = process_cpu_s();
        self.agg.record_cpu(k, self.phase, cpu - self.cpu_mark);
        self.cpu_mark = cpu;
        flush_tick(
            &mut self.agg,
            &mut self.rec,
            &self.levels,
            &mut self.last,
            k,
            self.phase,
        );
        let g = Gauges {
            held: self.levels.held.load(Relaxed),
            rss_bytes: rss_bytes(),
        };
        self.agg.record_gauges(k, self.phase, g);
    }

    /// Whether the drain is over: every connection closed and every attempt answered, its
    /// deadline passed, or a second interrupt (short, with a warning).
    fn drain_over(&mut self, now: u64, shutdown: &Shutdown) -> bool {
        let Some(deadline) = self.drain_deadline else {
            return false;
        };
        let open = self.levels.held.load(Relaxed);
        // Reopenings after a churn drop are answered too, so churn's account is whole.
        let unanswered =
            self.launched - self.answered + self.churn.as_ref().map_or(0, |c| c.pending());
        if (open == 0 && unanswered == 0) || now >= deadline || shutdown.requests() >= 2 {
            if open > 0 || unanswered > 0 {
                self.drain_short = true;
                self.warnings.push(format!(
                    "drain ended with {open} connections still open and {unanswered} attempts unanswered"
                ));
            }
            return true;
        }
        false
    }

    /// The next instant to look again without being woken: a tick, the next attempt due, the
    /// hold's or the storm's end, the drain's next look.
    fn next_wake(&self, now: u64, launching: bool) -> u64 {
        let next_attempt = if launching && self.launched - self.answered < self.in_flight_cap() {
            self.due(self.launched)
        } else {
            u64::MAX
        };
        let draining = self.drain_deadline.map_or(u64::MAX, |_| now + 5_000_000);
        let storm = match &self.reconnect {
            Some(r) if self.ramp_end.is_some() => r.next_look(self.t0),
            _ => u64::MAX,
        };
        let churn = match &self.churn {
            Some(c) if self.phase == Phase::Measure => c.next_due(),
            _ => u64::MAX,
        };
        // The ends of the measure phase, while in it (once past, they would wake the loop
        // at once, over and over, all through the drain). Past a timed storm's end, answers
        // wake the loop and its grace bounds the wait.
        let measure_ends = match (self.phase, self.measure_end) {
            (Phase::Measure, Some(e)) if now >= e => e.saturating_add(self.late_grace_ns),
            (Phase::Measure, Some(e)) => e,
            _ => u64::MAX,
        }
        .min(match (self.phase, self.hold_end) {
            (Phase::Measure, Some(e)) => e,
            _ => u64::MAX,
        });
        self.next_tick
            .min(next_attempt)
            .min(storm)
            .min(churn)
            .min(measure_ends)
            .min(draining)
            .max(now)
    }

    /// Takes every answer that is ready in one go (thousands per second at a ramp): connect
    /// latencies recorded, failures counted by cause (the first few also reported).
    fn answers(&mut self, first: Attempt, observer: &mut dyn Observer) {
        let mut a = Some(first);
        while let Some(x) = a.take().or_else(|| self.attempts.try_recv().ok()) {
            match x {
                // A journey's users connect many times: they are answered once, when done.
                Attempt::Opened { latency_ns } => {
                    self.answered += u64::from(!self.journey_mode);
                    self.opened += 1;
                    self.rec.record_connect(latency_ns);
                }
                Attempt::JourneyDone => self.answered += 1,
                Attempt::Replied {
                    sent_ns,
                    intended_ns,
                    at_ns,
                } => {
                    self.rec.record_ack(at_ns.saturating_sub(sent_ns), true);
                    self.rec.record_response(at_ns.saturating_sub(intended_ns));
                }
                Attempt::Failed { cause, detail } => {
                    self.answered += u64::from(!self.journey_mode);
                    self.rec.record_connect_failure(cause);
                    self.report_failure(cause, &detail, "connection failed", observer);
                }
                // Reconnections are not attempts of the ramp (`answered` counts those).
                Attempt::Reopened { latency_ns, by } => self.reopened(by, Some(latency_ns)),
                Attempt::ReopenFailed { cause, detail, by } => {
                    self.rec.record_connect_failure(cause);
                    self.reopened(by, None);
                    self.report_failure(cause, &detail, "reconnection failed", observer);
                }
            }
        }
    }

    /// A connection the storm or churn dropped answered: back after `latency_ns`, or failed.
    fn reopened(&mut self, by: DropCause, latency_ns: Option<u64>) {
        match by {
            DropCause::Storm => {
                if let Some(r) = self.reconnect.as_mut() {
                    r.answer(latency_ns);
                }
            }
            DropCause::Churn => {
                if let Some(c) = self.churn.as_mut() {
                    c.answer(latency_ns);
                }
            }
        }
    }

    /// Reports one of the first few failures (the rest are only counted).
    fn report_failure(
        &mut self,
        cause: ConnectFailure,
        detail: &str,
        what: &str,
        observer: &mut dyn Observer,
    ) {
        if self.failures_reported < FAILURES_REPORTED {
            self.failures_reported += 1;
            let what = format!("{what} ({}): {detail}", cause.name());
            observer.event(&run_event(self.t0, EventKind::Error, what, now_ns()));
        }
    }

    /// At a tick: the peak noted, the interval flushed and emitted.
    fn tick(&mut self, observer: &mut dyn Observer) {
        let now = now_ns();
        if now < self.next_tick {
            return;
        }
        self.note_peak(self.levels.held.load(Relaxed), rss_bytes());
        self.flush_interval(self.interval);
        for iv in self.agg.take_intervals(self.interval) {
            observer.interval(&iv);
        }
        self.interval = (now - self.t0) / self.tick_ns;
        self.next_tick = self.t0 + (self.interval + 1) * self.tick_ns;
    }

    /// The last interval, the summary and the outcome.
    pub fn finish(mut self, observer: &mut dyn Observer) -> RunOutcome {
        let end = now_ns();
        self.flush_interval(self.interval);
        self.agg.end_phase(self.phase, secs(self.t0, end));
        for iv in self.agg.take_all_intervals() {
            observer.interval(&iv);
        }
        observer.event(&run_event(
            self.t0,
            EventKind::Phase,
            "end".into(),
            now_ns(),
        ));
        let phases: Vec<PhaseTotals> = Phase::ALL
            .iter()
            .filter(|p| self.agg.phase_started(**p))
            .map(|p| self.agg.totals(*p).clone())
            .collect();
        let summary = self.summary(end);
        self.warn_of_failures();
        RunOutcome {
            started_unix_ms: self.started_unix_ms,
            duration_s: secs(self.t0, end),
            phases,
            integrity: Integrity::default(),
            interrupted: self.interrupted,
            drain_complete: !self.drain_short,
            warnings: self.warnings,
            producers_failed: 0,
            connections: Some(summary),
            stages: Vec::new(),
            tcp: None,
            backlog: None,
            responses: None,
        }
    }

    /// Connections/s over the ramp, the peak held and the memory per held connection.
    fn summary(&self, end: u64) -> ConnectionSummary {
        let all = self.agg.all_counters();
        let ramp_s = secs(self.t0, self.ramp_end.unwrap_or(end)).max(1e-9);
        ConnectionSummary {
            mode: match self.cp.mode {
                ConnectionMode::Hold => "hold",
                ConnectionMode::Storm => "storm",
                ConnectionMode::Journey => "journey",
            }
            .into(),
            requested: (self.limit != u64::MAX).then_some(self.limit),
            // Sampled at ticks (paired with the memory then) or, exactly, at each open.
            peak_held: self.peak_held.max(self.levels.peak_held.load(Relaxed)),
            ramp_s,
            connections_per_s: all.connects as f64 / ramp_s,
            rss_baseline_bytes: self.rss_baseline,
            rss_peak_bytes: self.rss_peak,
            // The memory sampled with the most held at a tick, over that many.
            rss_per_connection_bytes: if self.peak_held > 0 {
                self.rss_peak.saturating_sub(self.rss_baseline) as f64 / self.peak_held as f64
            } else {
                0.0
            },
            fd_limit: self.fd_limit,
            fd_free: self.fd_free,
            reconnect: self.reconnect.as_ref().and_then(|r| r.summary(self.t0)),
            churn: self.churn.as_ref().and_then(|c| c.summary(self.t0)),
            publishes_missed: self.levels.missed.load(Relaxed),
        }
    }

    /// Failed attempts by cause, and held connections the other side dropped.
    fn warn_of_failures(&mut self) {
        if let Some(r) = &self.reconnect {
            if r.summary(self.t0).is_none() {
                self.warnings.push(format!(
                    "the reconnect storm due at {:?} never came: the hold ended first (hold \
                     longer, or storm earlier)",
                    r.at
                ));
            } else if !r.is_settled() {
                self.warnings.push(
                    "the reconnect storm had not settled when the run ended: some connections \
                     were neither back nor failed"
                        .into(),
                );
            }
        }
        if let Some(c) = &self.churn {
            if c.summary(self.t0).is_none() {
                self.warnings
                    .push("churn never started: the ramp did not end before the run did".into());
            } else if c.pending() > 0 {
                self.warnings.push(format!(
                    "churn: {} dropped connections were neither back nor failed when the run \
                     ended",
                    c.pending()
                ));
            }
        }
        let all = self.agg.all_counters();
        if all.connect_failures.total() > 0 {
            let by: Vec<String> = ConnectFailure::ALL
                .iter()
                .filter(|c| all.connect_failures.get(**c) > 0)
                .map(|c| format!("{} {}", all.connect_failures.get(*c), c.name()))
                .collect();
            self.warnings.push(format!(
                "{} connection attempts failed: {}",
                all.connect_failures.total(),
                by.join(", ")
            ));
        }
        if all.dropped > 0 {
            self.warnings.push(format!(
                "{} held connections were dropped by the server or the network",
                all.dropped
            ));
        }
    }
}

/// The descriptors a workload needs: the open-file limit (raised if the hard limit allows),
/// whether connections are held in io_uring tables instead (past the hard limit, for drivers
/// that can: only the attempts in flight then take descriptors, and each table may be as large
/// as the limit), and notes for the log.
fn descriptors<D: Driver>(
    driver: &D,
    cp: &ConnectionPlan,
    hold_mode: bool,
) -> Result<(u64, bool, Vec<String>), RunError> {
    // Descriptors this process's own servers hold (the embedded broker's side of each
    // connection) come out of the same limit.
    let reserved = super::reserved_fds();
    let needed = if hold_mode {
        cp.count.unwrap_or(0) + 256 + reserved
    } else {
        cp.concurrency as u64 + 256 + reserved
    };
    let hard = hard_fd_limit();
    let fd_free = hold_mode && needed > hard && driver.fd_free_sessions();
    let needed = if fd_free {
        (cp.concurrency as u64 + 256).max(hard)
    } else {
        needed
    };
    let (fd_limit, raised) = preflight_fds(needed).map_err(RunError::Unsupported)?;
    if hold_mode {
        // Connections to one destination share its local ports; several destinations each
        // take their share.
        let per_host = cp
            .count
            .unwrap_or(0)
            .div_ceil(driver.session_hosts().max(1) as u64);
        preflight_ports(per_host, cp.source_addrs.len()).map_err(RunError::Unsupported)?;
    }
    let mut notes: Vec<String> = raised.into_iter().collect();
    if fd_free {
        notes.push(format!(
            "{} connections need more descriptors than the open-file limit ({hard}) allows: \
             holding them in io_uring tables instead (only attempts in flight take descriptors)",
            cp.count.unwrap_or(0)
        ));
    }
    Ok((fd_limit, fd_free, notes))
}
