//! The producer loop: pace → stamp → send → record, with the ack window where the protocol
//! confirms. One task per producer; it owns its recorder, so nothing here takes a lock.

use super::inflight::{InFlight, Taken};
use super::send_clock::{BURST, SendClock};
use super::state::{OwnedCounter, RunState};
use super::tagging::{Tagger, Tagging};
use super::timer::PreciseTimer;
use crate::clock::{now_ns, to_instant};
use crate::driver::{Ack, Outbound, Producer};
use crate::pacer::Pacer;
use crate::payload::PayloadBuilder;
use crate::stamp::Stamp;
use msgbench_metrics::{ErrorKind, Phase, Recorder, Role, Snapshot};
use std::sync::Arc;
use std::task::Poll;
use tokio::sync::mpsc::UnboundedSender;

/// What a producer tells the coordinator besides its snapshots.
#[derive(Debug)]
pub(crate) enum ProducerNews {
    /// The first failed send after one that went through (or the first of all): the
    /// producer retries with backoff, and counts the failures that follow. Without it a
    /// target gone mid-run shows only as a growing error count, with no reason given until
    /// the run ends.
    Failing(String),
    /// The producer stopped for good, and why.
    Stopped(String),
}

/// Everything a producer task needs besides its driver handle.
pub(crate) struct ProducerTask {
    pub id: u32,
    /// The id its stamps carry: `id` plus its group's base (unique across a run's groups).
    pub stamp_id: u32,
    pub run_id: u32,
    pub streams: u32,
    pub pacer: Pacer,
    /// Messages to send in the measure phase (count-bounded runs).
    pub quota: Option<u64>,
    pub acks: bool,
    /// Acks are responses to requests (HTTP): their latency from the intended send time is also
    /// recorded as end-to-end latency, coordinated omission corrected (wrk2's measure).
    pub responses: bool,
    pub window: usize,
    /// The driver's messages carry their payload ([`crate::driver::Driver::sends_payload`]):
    /// else a send counts no bytes.
    pub payload_sent: bool,
    /// Outstanding acks older than this are given up on and counted as timeouts.
    pub ack_timeout_ns: u64,
    pub t0_ns: u64,
    pub tick_ns: u64,
    pub late_ns: u64,
    /// How paced sends wait for their intended time.
    pub pacing: super::timer::Pacing,
    pub state: Arc<RunState>,
    pub snapshots: UnboundedSender<Snapshot>,
    pub sent: Arc<OwnedCounter>,
    /// When the `send` in progress began (ns; 0 when none is): read by the stall watch.
    pub busy: Arc<OwnedCounter>,
    /// Where a producer says that its sends began failing, or that it has to give up.
    pub news: UnboundedSender<ProducerNews>,
    /// Keys, metadata and the stage window (runs with `[message]` or stages).
    pub tagging: Option<Tagging>,
    /// Made from `tagging` when the task starts.
    pub tagger: Option<Tagger>,
}

/// Per-task tick bookkeeping shared by the producer and consumer loops.
pub(crate) struct Ticker {
    pub t0_ns: u64,
    pub tick_ns: u64,
    pub next_ns: u64,
}

impl Ticker {
    pub fn new(t0_ns: u64, tick_ns: u64) -> Self {
        Self {
            t0_ns,
            tick_ns,
            next_ns: t0_ns + tick_ns,
        }
    }

    /// Index of the interval that ended most recently at `now`, and advances past `now`.
    #[inline]
    pub fn due(&mut self, now: u64) -> Option<u64> {
        if now < self.next_ns {
            return None;
        }
        let k = (now - self.t0_ns) / self.tick_ns;
        self.next_ns = self.t0_ns + (k + 1) * self.tick_ns;
        Some(k.saturating_sub(1))
    }

    /// Index of the interval being recorded: the one that ends at the next tick. Used for
    /// flushes between ticks (phase changes, the final flush), so a flush at a boundary that
    /// coincides with a tick lands in the interval it belongs to.
    pub fn recording(&self) -> u64 {
        (self.next_ns - self.t0_ns) / self.tick_ns - 1
    }

    /// Index of the interval to close a phase that ended at `end_ns` in: the one being
    /// recorded, or the phase's last interval when the task noticed the change only in a later
    /// one (its ack or delivery of the old phase came after the boundary). Otherwise that
    /// remainder became an interval record of its own, a sliver of the old phase inside the
    /// next interval: a second row for the same second in the live view.
    pub fn closing(&self, end_ns: u64) -> u64 {
        let r = self.recording();
        if end_ns == u64::MAX || end_ns <= self.t0_ns {
            return r;
        }
        r.min((end_ns - 1 - self.t0_ns) / self.tick_ns)
    }
}

enum Flow {
    Go,
    Stop,
}

impl ProducerTask {
    fn flush_snapshot(&self, rec: &mut Recorder, phase: Phase, interval: u64) {
        let s = rec.take(Role::Producer, self.id, phase, interval);
        if !s.is_empty() {
            let _ = self.snapshots.send(s);
        }
    }

    /// Publish latency from the actual send; for responses, also the response time from the
    /// intended send time (a slow response delays the next request of its connection, and that
    /// wait belongs in the figures).
    #[inline]
    fn record_ack(
        rec: &mut Recorder,
        now: u64,
        (sent, intended): (u64, u64),
        ok: bool,
        responses: bool,
    ) {
        rec.record_ack(now.saturating_sub(sent), ok);
        if responses && ok {
            rec.record_response(now.saturating_sub(intended));
        }
    }

    /// The publish-confirmation stage of a multi-stage run, if it has one.
    #[inline]
    fn ack_stage(&self) -> Option<u16> {
        self.tagger.as_ref().and_then(Tagger::ack_stage)
    }

    /// The publish-confirmation stage of a multi-stage run (`stage`, from [`Self::ack_stage`]):
    /// latency from the intended time.
    #[inline]
    fn record_ack_stage(rec: &mut Recorder, stage: Option<u16>, now: u64, intended: u64, ok: bool) {
        if let Some(s) = stage {
            if ok {
                rec.stage(s).reached(now.saturating_sub(intended), 0);
            } else {
                rec.stage(s).failed();
            }
        }
    }

    /// Records `ack`, read at `now`. An ack that comes after the ack timeout counts as the
    /// timeout it is (in doubt), as if the window had been swept at that instant: the sweep
    /// itself runs at ticks, and an ack read between the two had been taken as a success,
    /// with a latency past the timeout the user set.
    fn handle_ack(&self, rec: &mut Recorder, window: &mut InFlight, ack: Ack, now: u64) {
        let responses = self.responses;
        let timeout = self.ack_timeout_ns;
        match ack {
            Ack::One { token, ok } => {
                match window.take(token) {
                    Taken::Outstanding(sent, intended) if rec.sent_in_warmup(sent) => {
                        let late = now.saturating_sub(sent) > timeout;
                        rec.record_warmup_outcome(ok, late);
                        if !late {
                            // A multi-stage account follows the message, whatever its phase.
                            Self::record_ack_stage(rec, self.ack_stage(), now, intended, ok);
                        }
                    }
                    Taken::Outstanding(sent, _) if now.saturating_sub(sent) > timeout => {
                        rec.counters_mut().errors.add(ErrorKind::Timeout, 1);
                    }
                    Taken::Outstanding(sent, intended) => {
                        Self::record_ack(rec, now, (sent, intended), ok, responses);
                        Self::record_ack_stage(rec, self.ack_stage(), now, intended, ok);
                    }
                    // Counted in doubt at its ack timeout (or acked before): a message has one
                    // outcome. (The producer never overwrites an outstanding token, so a token
                    // sent and not in the window has had its outcome.)
                    Taken::Expired | Taken::Unknown => {}
                }
                if !ok && let Some(t) = &self.tagger {
                    t.refused(token);
                }
            }
            Ack::UpTo { token, ok } => {
                // Looked up once for the whole run of acks, not once per message in it.
                let stage = self.ack_stage();
                window.ack_up_to(token, |times| {
                    if rec.sent_in_warmup(times.0) {
                        let late = now.saturating_sub(times.0) > timeout;
                        rec.record_warmup_outcome(ok, late);
                        if !late {
                            Self::record_ack_stage(rec, stage, now, times.1, ok);
                        }
                        return;
                    }
                    if now.saturating_sub(times.0) > timeout {
                        rec.counters_mut().errors.add(ErrorKind::Timeout, 1);
                        return;
                    }
                    Self::record_ack(rec, now, times, ok, responses);
                    Self::record_ack_stage(rec, stage, now, times.1, ok);
                })
            }
            Ack::InDoubt { up_to } => {
                let mut n = 0;
                window.ack_up_to(up_to, |(sent, _)| {
                    if rec.sent_in_warmup(sent) {
                        rec.record_warmup_outcome(false, true);
                    } else {
                        n += 1;
                    }
                });
                rec.counters_mut().errors.add(ErrorKind::Timeout, n);
            }
            Ack::Unanswered { token } => match window.take(token) {
                Taken::Outstanding(sent, _) if rec.sent_in_warmup(sent) => {
                    rec.record_warmup_outcome(false, true);
                }
                Taken::Outstanding(..) => rec.counters_mut().errors.add(ErrorKind::Timeout, 1),
                Taken::Expired | Taken::Unknown => {}
            },
            Ack::Returned { n } => rec.counters_mut().returned += n,
        }
    }

    /// Takes every ack that is ready without waiting.
    #[inline]
    fn drain_ready_acks<P: Producer>(&self, p: &mut P, rec: &mut Recorder, window: &mut InFlight) {
        self.drain_ready_acks_at(p, rec, window, None);
    }

    /// Takes every ack that is ready without waiting, all timed at one clock reading (`now`,
    /// or one taken at the first ack): they were read together, and taking them takes
    /// microseconds, while a reading per ack costs on pipelined protocols about as much as
    /// handling the ack itself.
    #[inline]
    fn drain_ready_acks_at<P: Producer>(
        &self,
        p: &mut P,
        rec: &mut Recorder,
        window: &mut InFlight,
        mut now: Option<u64>,
    ) {
        let mut cx = crate::driver::look_context();
        while let Poll::Ready(Some(ack)) = p.poll_ack(&mut cx) {
            let at = *now.get_or_insert_with(now_ns);
            self.handle_ack(rec, window, ack, at);
        }
    }

    /// Waits for one ack, a tick or the deadline; keeps ticking while it waits.
    async fn wait_ack<P: Producer>(
        &self,
        p: &mut P,
        rec: &mut Recorder,
        window: &mut InFlight,
        ticker: &mut Ticker,
        phase: Phase,
    ) -> Flow {
        let deadline = to_instant(ticker.next_ns);
        tokio::select! {
            ack = std::future::poll_fn(|cx| p.poll_ack(cx)) => match ack {
                Some(a) => {
                    let now = now_ns();
                    self.handle_ack(rec, window, a, now);
                    self.drain_ready_acks_at(p, rec, window, Some(now));
                    Flow::Go
                }
                None => Flow::Stop,
            },
            _ = tokio::time::sleep_until(deadline) => {
                let now = now_ns();
                let expired = window.expire(now.saturating_sub(self.ack_timeout_ns));
                rec.counters_mut().errors.add(ErrorKind::Timeout, expired);
                if let Some(k) = ticker.due(now) {
                    self.flush_snapshot(rec, phase, k);
                }
                Flow::Go
            }
        }
    }

    /// Runs the producer from the start barrier to the end: [`Sending::send_all`], then
    /// [`Sending::wind_down`].
    pub async fn run<P: Producer>(mut self, p: P, payload: PayloadBuilder) {
        let window = InFlight::new(self.window);
        self.tagger = self
            .tagging
            .take()
            .map(|t| Tagger::new(t, self.id, window.capacity()));
        let mut s = Sending {
            rec: Recorder::new(self.late_ns),
            ticker: Ticker::new(self.t0_ns, self.tick_ns),
            window,
            timer: PreciseTimer::new().ok(),
            seqs: vec![0u64; self.streams as usize],
            pacer: self.pacer.clone(),
            unpaced: self.pacer.is_unlimited(),
            gated: self.tagger.as_ref().and_then(Tagger::gate).is_some(),
            token: 0,
            stream: 0,
            measured: 0,
            phase: self.state.phase_at(self.t0_ns),
            consecutive_errors: 0,
            failing_since_ns: 0,
            retry: None,
            last_ns: self.t0_ns,
            clock: SendClock::default(),
            task: self,
            p,
            payload,
        };
        s.sleep_until(s.task.t0_ns).await;
        s.send_all().await;
        s.wind_down().await;
    }
}

/// A producer's loop: its task, its client, and where it stands (recorder, tick, ack window,
/// schedule, sequence numbers). Each step of [`Sending::send_all`] returns `None` when the loop
/// must end (stopped, the drain begun, the quota sent, a fatal error).
struct Sending<P: Producer> {
    task: ProducerTask,
    p: P,
    payload: PayloadBuilder,
    rec: Recorder,
    ticker: Ticker,
    window: InFlight,
    timer: Option<PreciseTimer>,
    seqs: Vec<u64>,
    pacer: Pacer,
    unpaced: bool,
    /// Runs with a stage window: sends wait for a place in it.
    gated: bool,
    /// The next message's token (also the number sent so far).
    token: u64,
    stream: u32,
    /// Messages sent in the measure phase, against the quota.
    measured: u64,
    /// The phase being recorded.
    phase: Phase,
    consecutive_errors: u32,
    /// When the sends began failing (0 while they go through): a count-bounded run gives up
    /// on a producer that cannot send for [`GIVE_UP_NS`].
    failing_since_ns: u64,
    /// The intended time of a paced message whose send failed: it is sent again, still
    /// measured from that time, instead of taking the next one's place.
    retry: Option<u64>,
    /// When the last send happened.
    last_ns: u64,
    /// The reading the next send may take (one per burst: see [`SendClock`]).
    clock: SendClock,
}

impl<P: Producer> Sending<P> {
    async fn sleep_until(&mut self, at: u64) {
        sleep_until_ns(&mut self.timer, at, self.task.pacing).await;
    }

    fn flush(&mut self, phase: Phase, interval: u64) {
        self.task.flush_snapshot(&mut self.rec, phase, interval);
    }

    /// Sends what was recorded in the phase the loop was in, as it leaves that phase.
    fn close_phase(&mut self) {
        let end = self.task.state.scheduled_end_ns(self.phase);
        self.flush(self.phase, self.ticker.closing(end));
    }

    /// An idle moment: the client may do its housekeeping (keep-alives, reading).
    async fn idle(&mut self) {
        if let Err(e) = self.p.idle().await {
            self.rec.record_error(e.kind());
        }
    }

    /// The loop, one message per turn: pace, ack window, stage gate (each entered only when
    /// the run has it: an unpaced run without acks or stages goes straight to the send), then
    /// the message stamped, sent and recorded; until a step says the loop ends. One function,
    /// so the send is the only future awaited per message on the hot path.
    async fn send_all(&mut self) {
        loop {
            if self.may_go_on().is_none() {
                return;
            }
            let intended = if self.unpaced {
                None
            } else if let Some(at) = self.retry.take() {
                Some(at)
            } else {
                match self.pace().await {
                    Some(at) => at,
                    None => return,
                }
            };
            if self.task.acks && !self.window_has_room() {
                self.clock.forget();
                if self.open_window().await.is_none() {
                    return;
                }
            }
            if self.gated {
                self.clock.forget();
                if self.pass_stage_gate().await.is_none() {
                    return;
                }
            }
            let sent_ns = self.clock.read(if self.unpaced { BURST - 1 } else { 0 });
            self.last_ns = sent_ns;
            if self.at_send_time(sent_ns).is_none() {
                return;
            }
            let intended_ns = intended.unwrap_or(sent_ns);
            let (stream, token) = (self.stream, self.token);
            let stamp = Stamp {
                run_id: self.task.run_id,
                producer: self.task.stamp_id,
                stream,
                seq: self.seqs[stream as usize],
                intended_ns,
                sent_ns,
            };
            let meta = match self.task.tagger.as_mut() {
                None => None,
                Some(t) => match t.prepare(token, stamp.seq, intended_ns) {
                    Ok(m) => m,
                    Err(dup) => {
                        if let Some(g) = t.gate() {
                            g.release();
                        }
                        let _ = self.task.news.send(ProducerNews::Stopped(format!(
                            "producer {} stopped: tracking key `{}` was used twice (make tracking.key unique, e.g. with {{n}} or {{producer}}.{{seq}})",
                            self.task.id, dup.0
                        )));
                        return;
                    }
                },
            };
            let body = self.payload.build(&stamp);
            let len = if self.task.payload_sent {
                body.len()
            } else {
                0
            };
            self.task.busy.set(sent_ns.max(1));
            // Awaited in place (a wrapper taking the future would copy it per message), noting
            // whether it had to wait: then the next send reads the clock.
            let mut waited = false;
            let r = {
                let mut send = std::pin::pin!(self.p.send(Outbound {
                    stream,
                    token,
                    payload: body,
                    meta,
                }));
                std::future::poll_fn(|cx| {
                    let r = send.as_mut().poll(cx);
                    waited |= r.is_pending();
                    r
                })
                .await
            };
            if waited {
                self.clock.forget();
            }
            self.task.busy.set(0);
            match r {
                Ok(()) => self.sent(intended_ns, sent_ns, len),
                Err(e) => {
                    self.clock.forget();
                    if intended.is_some() {
                        self.retry = intended;
                    }
                    if self.send_failed(e, sent_ns).await.is_none() {
                        return;
                    }
                }
            }
        }
    }

    /// Whether another message may be sent: not stopped, not draining, quota not reached. A
    /// phase changed since the last send closes the old phase's snapshot.
    #[inline]
    fn may_go_on(&mut self) -> Option<()> {
        if self.task.state.producers_stopped() {
            return None;
        }
        let cur = self.task.state.phase_at(self.last_ns);
        if cur != self.phase {
            self.close_phase();
            self.phase = cur;
        }
        if self.phase == Phase::Drain {
            return None;
        }
        match self.task.quota {
            Some(q) if self.phase == Phase::Measure && self.measured >= q => None,
            _ => Some(()),
        }
    }

    /// Waits for the next message's intended time (paced runs), ticking and taking acks while it waits (an
    /// ack read only after the wait would carry the wait in its latency: at 100 msgs/s, up to
    /// 10 ms on top of a sub-millisecond confirm). The intended time; `None` inside for an
    /// unpaced run.
    async fn pace(&mut self) -> Option<Option<u64>> {
        let intended = self.pacer.next_offset_ns().map(|off| self.task.t0_ns + off);
        let Some(at) = intended else {
            return Some(None);
        };
        loop {
            let now = now_ns();
            if let Some(k) = self.ticker.due(now) {
                self.flush(self.phase, k);
            }
            if now >= at {
                self.clock.hold_once(now);
                return Some(intended);
            }
            if self.task.state.producers_stopped() {
                return None;
            }
            self.idle().await;
            let wake = at.min(self.ticker.next_ns);
            let pacing = self.task.pacing;
            // Without acks too: the driver may read its socket meanwhile, and a server's
            // close seen while idle is a reconnection before the next send, not a message
            // written into a closed connection (and counted as lost by the system).
            tokio::select! {
                biased;
                ack = std::future::poll_fn(|cx| self.p.poll_ack(cx)) => match ack {
                    Some(a) => {
                        let now = now_ns();
                        self.task.handle_ack(&mut self.rec, &mut self.window, a, now);
                        self.task.drain_ready_acks_at(&mut self.p, &mut self.rec, &mut self.window, Some(now));
                    }
                    // No more acks will come: just wait.
                    None => sleep_until_ns(&mut self.timer, wake, pacing).await,
                },
                _ = sleep_until_ns(&mut self.timer, wake, pacing) => {}
            }
        }
    }

    /// Waits for one ack, a tick or the deadline (ticking into `phase` meanwhile).
    async fn wait_ack(&mut self, phase: Phase) -> Flow {
        let (p, rec, window, ticker) = (
            &mut self.p,
            &mut self.rec,
            &mut self.window,
            &mut self.ticker,
        );
        self.task.wait_ack(p, rec, window, ticker, phase).await
    }

    /// Waits for one ack (ticking meanwhile), after an idle moment; `None`: the run ends.
    async fn await_ack(&mut self) -> Option<()> {
        if self.task.state.producers_stopped() {
            return None;
        }
        self.idle().await;
        match self.wait_ack(self.phase).await {
            Flow::Go => Some(()),
            Flow::Stop => None,
        }
    }

    /// The ack window's quick answer, after taking the acks that are ready: room for the next
    /// message now. Most sends find it so, and skip [`Self::open_window`]'s future.
    #[inline]
    fn window_has_room(&mut self) -> bool {
        self.task
            .drain_ready_acks(&mut self.p, &mut self.rec, &mut self.window);
        self.window.len() < self.task.window && self.window.slot_free(self.token)
    }

    /// The ack window (runs with acks): never more than `window` unacknowledged messages. Once it is full,
    /// sending resumes only when a sixteenth of it is free again: a broker that acks one
    /// message at a time would otherwise get one write (and one syscall) per message, which
    /// costs the generator more than the messages themselves.
    async fn open_window(&mut self) -> Option<()> {
        if !self.task.acks {
            return Some(());
        }
        let size = self.task.window;
        self.task
            .drain_ready_acks(&mut self.p, &mut self.rec, &mut self.window);
        if self.window.len() >= size {
            let resume_at = size - (size / 16).max(1);
            while self.window.len() > resume_at {
                self.await_ack().await?;
                self.task
                    .drain_ready_acks(&mut self.p, &mut self.rec, &mut self.window);
            }
        }
        while self.window.len() >= size || !self.window.slot_free(self.token) {
            self.await_ack().await?;
        }
        Some(())
    }

    /// The stage window of a multi-stage run: messages not yet at the window stage, run-wide.
    async fn pass_stage_gate(&mut self) -> Option<()> {
        // About to wait: what the client buffered goes out first (as before waiting for an
        // ack), or the last message sent would wait with the window, its ack late by as long.
        if self
            .task
            .tagger
            .as_ref()
            .and_then(Tagger::gate)
            .is_some_and(|g| g.is_full())
        {
            self.idle().await;
        }
        let Some(g) = self.task.tagger.as_ref().and_then(Tagger::gate) else {
            return Some(());
        };
        let mut acks_open = self.task.acks;
        loop {
            tokio::select! {
                biased;
                _ = g.acquire() => return Some(()),
                ack = std::future::poll_fn(|cx| self.p.poll_ack(cx)), if acks_open => match ack {
                    Some(a) => self.task.handle_ack(&mut self.rec, &mut self.window, a, now_ns()),
                    None => acks_open = false,
                },
                _ = tokio::time::sleep_until(to_instant(self.ticker.next_ns)) => {
                    if let Some(k) = self.ticker.due(now_ns()) {
                        self.task.flush_snapshot(&mut self.rec, self.phase, k);
                    }
                    if self.task.state.producers_stopped() {
                        return None;
                    }
                }
            }
        }
    }

    /// At the send: the waits may have crossed a phase boundary (the send is recorded in the
    /// phase it happens in; none in the drain) or a tick (the finished interval is closed
    /// first, after acks past their time-out are given up on).
    #[inline]
    fn at_send_time(&mut self, sent_ns: u64) -> Option<()> {
        let cur = self.task.state.phase_at(sent_ns);
        if cur != self.phase {
            self.close_phase();
            if self.phase == Phase::Warmup {
                self.rec.leave_warmup(sent_ns);
            }
            self.phase = cur;
            if cur == Phase::Drain {
                return None;
            }
        }
        if let Some(k) = self.ticker.due(sent_ns) {
            if self.task.acks {
                let deadline = sent_ns.saturating_sub(self.task.ack_timeout_ns);
                let expired = self.window.expire(deadline);
                self.rec
                    .counters_mut()
                    .errors
                    .add(ErrorKind::Timeout, expired);
            } else {
                // Without confirms only notices such as returns come this way.
                self.task
                    .drain_ready_acks(&mut self.p, &mut self.rec, &mut self.window);
            }
            self.flush(self.phase, k);
        }
        Some(())
    }

    /// A message handed over: recorded, its ack awaited, the sequence moved on.
    #[inline]
    fn sent(&mut self, intended_ns: u64, sent_ns: u64, len: usize) {
        self.consecutive_errors = 0;
        self.failing_since_ns = 0;
        self.rec.record_send(intended_ns, sent_ns, len);
        if let Some(s) = self.task.tagger.as_ref().and_then(Tagger::ack_stage) {
            let st = self.rec.stage(s);
            st.add_bytes(len);
            if !self.task.acks {
                // Without confirms, handing the message over is all there is.
                st.reached(sent_ns.saturating_sub(intended_ns), 0);
            }
        }
        if self.task.acks {
            self.window.push(self.token, sent_ns, intended_ns);
        }
        self.seqs[self.stream as usize] += 1;
        self.token += 1;
        if self.phase == Phase::Measure {
            self.measured += 1;
        }
        self.task.sent.set(self.token);
        self.stream += 1;
        if self.stream == self.task.streams {
            self.stream = 0;
        }
    }

    /// A send that failed: counted; a fatal error ends the producer, any other pauses it
    /// (doubling up to 128 ms) so a dead connection does not become a busy loop while the
    /// driver reconnects underneath, and the same message is tried again (a paced one keeps
    /// its intended time, so the outage shows in its latency and in those queued behind it,
    /// as it would for any client that holds on to its messages). A failed attempt is not a
    /// message: it counts toward no quota; a count-bounded run instead gives up on a producer
    /// none of whose sends has gone through for [`GIVE_UP_NS`], so a broker that never comes
    /// back still ends the run, with its report.
    async fn send_failed(&mut self, e: crate::driver::DriverError, at: u64) -> Option<()> {
        self.rec.record_error(e.kind());
        if let Some(t) = &self.task.tagger {
            t.unsent(self.token);
        }
        if self.failing_since_ns == 0 {
            self.failing_since_ns = at;
            if !e.is_fatal() {
                let _ = self.task.news.send(ProducerNews::Failing(format!(
                    "producer {}: {e}; retrying with backoff (failed sends are counted as errors)",
                    self.task.id
                )));
            }
        }
        let given_up = self.task.quota.is_some() && at - self.failing_since_ns >= GIVE_UP_NS;
        if e.is_fatal() || given_up {
            let why = if given_up {
                format!(
                    "producer {} stopped: no send went through for {} s (last error: {e})",
                    self.task.id,
                    GIVE_UP_NS / 1_000_000_000
                )
            } else {
                format!("producer {} stopped: {e}", self.task.id)
            };
            let _ = self.task.news.send(ProducerNews::Stopped(why));
            return None;
        }
        self.consecutive_errors = self.consecutive_errors.saturating_add(1);
        let pause = 1_000_000u64 << self.consecutive_errors.min(7);
        self.sleep_until(now_ns() + pause).await;
        Some(())
    }

    /// After the loop: what was recorded goes out in the phase the loop was in, the client
    /// pushes out what it buffered, outstanding acks are awaited until the drain's deadline
    /// (those never confirmed are in doubt: counted, never silently dropped), the client
    /// closes, and the last snapshot goes out.
    async fn wind_down(mut self) {
        self.close_phase();
        if let Err(e) = self.p.flush().await {
            self.rec.record_error(e.kind());
        }
        if self.task.acks {
            loop {
                self.task
                    .drain_ready_acks(&mut self.p, &mut self.rec, &mut self.window);
                if self.window.is_empty() || now_ns() >= self.task.state.drain_deadline_ns() {
                    break;
                }
                let phase = self.task.state.phase_at(now_ns());
                if let Flow::Stop = self.wait_ack(phase).await {
                    break;
                }
            }
            self.rec
                .counters_mut()
                .errors
                .add(ErrorKind::Timeout, self.window.len() as u64);
        } else {
            self.task
                .drain_ready_acks(&mut self.p, &mut self.rec, &mut self.window);
        }
        if let Err(e) = self.p.close().await
            && e.is_fatal()
        {
            // Found only once every message was out (a count-bounded run's last answers said
            // the target cannot be spoken to this way): the run stops on it all the same.
            let _ = self.task.news.send(ProducerNews::Stopped(format!(
                "producer {} stopped: {e}",
                self.task.id
            )));
        }
        let phase = self.task.state.phase_at(now_ns());
        self.task
            .flush_snapshot(&mut self.rec, phase, self.ticker.recording());
    }
}

/// How long a producer of a count-bounded run goes on trying when no send goes through (a
/// broker that does not come back) before it stops: long enough for a broker to restart.
pub(super) const GIVE_UP_NS: u64 = 60_000_000_000;

async fn sleep_until_ns(timer: &mut Option<PreciseTimer>, at: u64, pacing: super::timer::Pacing) {
    match timer {
        Some(t) => t.wait_until(at, pacing).await,
        None => tokio::time::sleep_until(to_instant(at)).await,
    }
}

#[cfg(test)]
mod tests {
    use super::Ticker;

    #[test]
    fn a_phase_is_closed_in_its_last_interval() {
        // 1 s ticks from t0 = 10 s; the task is recording interval 2 (12..13 s).
        let mut t = Ticker::new(10_000_000_000, 1_000_000_000);
        assert_eq!(t.due(12_500_000_000), Some(1));
        assert_eq!(t.recording(), 2);
        // A phase that ended on the tick at 11 s closes in interval 0, the one it filled.
        assert_eq!(t.closing(11_000_000_000), 0);
        // One that ended inside interval 1 closes there.
        assert_eq!(t.closing(11_500_000_000), 1);
        // One that ends later than what is being recorded, or whose end is not known,
        // closes in the interval being recorded.
        assert_eq!(t.closing(14_000_000_000), 2);
        assert_eq!(t.closing(u64::MAX), 2);
    }
}
