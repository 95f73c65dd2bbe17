//! The producer loop: pace → stamp → send → record, with the ack window where the protocol
//! confirms. One task per producer; it owns its recorder, so nothing here takes a lock.

use super::inflight::{InFlight, Taken};
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
use std::task::{Context, Poll, Waker};
use tokio::sync::mpsc::UnboundedSender;

/// Everything a producer task needs besides its driver handle.
pub(crate) struct ProducerTask {
    pub id: u32,
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
    /// Where a producer that has to give up says why.
    pub fatal: UnboundedSender<String>,
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

    /// The publish-confirmation stage of a multi-stage run: latency from the intended time.
    #[inline]
    fn record_ack_stage(&self, rec: &mut Recorder, now: u64, intended: u64, ok: bool) {
        if let Some(s) = self.tagger.as_ref().and_then(Tagger::ack_stage) {
            if ok {
                rec.stage(s).reached(now.saturating_sub(intended), 0);
            } else {
                rec.stage(s).failed();
            }
        }
    }

    fn handle_ack(&self, rec: &mut Recorder, window: &mut InFlight, ack: Ack) {
        let responses = self.responses;
        let now = now_ns();
        match ack {
            Ack::One { token, ok } => {
                match window.take(token) {
                    Taken::Outstanding(sent, intended) => {
                        Self::record_ack(rec, now, (sent, intended), ok, responses);
                        self.record_ack_stage(rec, now, intended, ok);
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
            Ack::UpTo { token, ok } => window.ack_up_to(token, |times| {
                Self::record_ack(rec, now, times, ok, responses);
                self.record_ack_stage(rec, now, times.1, ok);
            }),
            Ack::InDoubt { up_to } => {
                let mut n = 0;
                window.ack_up_to(up_to, |_| n += 1);
                rec.counters_mut().errors.add(ErrorKind::Timeout, n);
            }
            Ack::Returned { n } => rec.counters_mut().returned += n,
        }
    }

    /// Takes every ack that is ready without waiting.
    fn drain_ready_acks<P: Producer>(&self, p: &mut P, rec: &mut Recorder, window: &mut InFlight) {
        let mut cx = Context::from_waker(Waker::noop());
        while let Poll::Ready(Some(ack)) = p.poll_ack(&mut cx) {
            self.handle_ack(rec, window, ack);
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
                Some(a) => { self.handle_ack(rec, window, a); Flow::Go }
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

    pub async fn run<P: Producer>(self, mut p: P, mut payload: PayloadBuilder) {
        let mut rec = Recorder::new(self.late_ns);
        let mut ticker = Ticker::new(self.t0_ns, self.tick_ns);
        let mut window = InFlight::new(self.window);
        let mut this = self;
        this.tagger = this
            .tagging
            .take()
            .map(|t| Tagger::new(t, this.id, window.capacity()));
        let mut timer = PreciseTimer::new().ok();
        let mut seqs = vec![0u64; this.streams as usize];
        let mut pacer = this.pacer.clone();
        let mut token: u64 = 0;
        let mut stream: u32 = 0;
        let mut measured: u64 = 0;
        let mut phase = this.state.phase_at(this.t0_ns);
        let mut consecutive_errors: u32 = 0;
        let mut last_ns = this.t0_ns;
        let unpaced = pacer.is_unlimited();

        sleep_until_ns(&mut timer, this.t0_ns, this.pacing).await;
        'send: loop {
            if this.state.producers_stopped() {
                break;
            }
            // Phase as of the last send (re-checked at the actual send time below).
            let cur = this.state.phase_at(last_ns);
            if cur != phase {
                this.flush_snapshot(&mut rec, phase, ticker.recording());
                phase = cur;
            }
            if phase == Phase::Drain {
                break;
            }
            if let Some(q) = this.quota
                && phase == Phase::Measure
                && measured >= q
            {
                break;
            }

            // Pace: wait for the intended time, ticking while we wait.
            let intended = if unpaced {
                None
            } else {
                pacer.next_offset_ns().map(|off| this.t0_ns + off)
            };
            if let Some(at) = intended {
                loop {
                    let now = now_ns();
                    if let Some(k) = ticker.due(now) {
                        this.flush_snapshot(&mut rec, phase, k);
                    }
                    if now >= at {
                        break;
                    }
                    if this.state.producers_stopped() {
                        break 'send;
                    }
                    if let Err(e) = p.idle().await {
                        rec.record_error(e.kind());
                    }
                    let wake = at.min(ticker.next_ns);
                    if this.acks {
                        // Take acks as they arrive while waiting for the pacer: an ack read only
                        // after the wait would carry the wait in its latency (at 100 msgs/s,
                        // up to 10 ms on top of a sub-millisecond confirm).
                        tokio::select! {
                            biased;
                            ack = std::future::poll_fn(|cx| p.poll_ack(cx)) => match ack {
                                Some(a) => {
                                    this.handle_ack(&mut rec, &mut window, a);
                                    this.drain_ready_acks(&mut p, &mut rec, &mut window);
                                }
                                // No more acks will come: just wait.
                                None => sleep_until_ns(&mut timer, wake, this.pacing).await,
                            },
                            _ = sleep_until_ns(&mut timer, wake, this.pacing) => {}
                        }
                    } else {
                        sleep_until_ns(&mut timer, wake, this.pacing).await;
                    }
                }
            }

            // Window: never more than `window` unacknowledged messages. Once it is full, sending
            // resumes only when a sixteenth of it is free again: a broker that acks one message
            // at a time would otherwise get one write (and one syscall) per message, which
            // costs the generator more than the messages themselves.
            if this.acks {
                this.drain_ready_acks(&mut p, &mut rec, &mut window);
                if window.len() >= this.window {
                    let resume_at = this.window - (this.window / 16).max(1);
                    while window.len() > resume_at {
                        if this.state.producers_stopped() {
                            break 'send;
                        }
                        if let Err(e) = p.idle().await {
                            rec.record_error(e.kind());
                        }
                        if let Flow::Stop = this
                            .wait_ack(&mut p, &mut rec, &mut window, &mut ticker, phase)
                            .await
                        {
                            break 'send;
                        }
                        this.drain_ready_acks(&mut p, &mut rec, &mut window);
                    }
                }
                while window.len() >= this.window || !window.slot_free(token) {
                    if this.state.producers_stopped() {
                        break 'send;
                    }
                    if let Err(e) = p.idle().await {
                        rec.record_error(e.kind());
                    }
                    if let Flow::Stop = this
                        .wait_ack(&mut p, &mut rec, &mut window, &mut ticker, phase)
                        .await
                    {
                        break 'send;
                    }
                }
            }

            // The stage window: messages not yet at the window stage, run-wide.
            if let Some(g) = this.tagger.as_ref().and_then(Tagger::gate) {
                let mut acks_open = this.acks;
                loop {
                    tokio::select! {
                        biased;
                        _ = g.acquire() => break,
                        ack = std::future::poll_fn(|cx| p.poll_ack(cx)), if acks_open => match ack {
                            Some(a) => this.handle_ack(&mut rec, &mut window, a),
                            None => acks_open = false,
                        },
                        _ = tokio::time::sleep_until(to_instant(ticker.next_ns)) => {
                            if let Some(k) = ticker.due(now_ns()) {
                                this.flush_snapshot(&mut rec, phase, k);
                            }
                            if this.state.producers_stopped() {
                                break 'send;
                            }
                        }
                    }
                }
            }

            let sent_ns = now_ns();
            last_ns = sent_ns;
            // The wait may have crossed a phase boundary: record this send in the phase it
            // actually happens in.
            let cur = this.state.phase_at(sent_ns);
            if cur != phase {
                this.flush_snapshot(&mut rec, phase, ticker.recording());
                phase = cur;
                if phase == Phase::Drain {
                    break;
                }
            }
            // Likewise close a finished interval before recording a send that belongs to the
            // next one.
            if let Some(k) = ticker.due(sent_ns) {
                if this.acks {
                    let expired = window.expire(sent_ns.saturating_sub(this.ack_timeout_ns));
                    rec.counters_mut().errors.add(ErrorKind::Timeout, expired);
                } else {
                    // Without confirms only notices such as returns come this way.
                    this.drain_ready_acks(&mut p, &mut rec, &mut window);
                }
                this.flush_snapshot(&mut rec, phase, k);
            }
            let intended_ns = intended.unwrap_or(sent_ns);
            let stamp = Stamp {
                run_id: this.run_id,
                producer: this.id,
                stream,
                seq: seqs[stream as usize],
                intended_ns,
                sent_ns,
            };
            let body = payload.build(&stamp);
            let len = body.len();
            let meta = match this.tagger.as_mut() {
                None => None,
                Some(t) => match t.prepare(token, stamp.seq, intended_ns) {
                    Ok(m) => m,
                    Err(dup) => {
                        if let Some(g) = t.gate() {
                            g.release();
                        }
                        let _ = this.fatal.send(format!(
                            "producer {} stopped: tracking key `{}` was used twice (make tracking.key unique, e.g. with {{n}} or {{producer}}.{{seq}})",
                            this.id, dup.0
                        ));
                        break;
                    }
                },
            };
            this.busy.set(sent_ns.max(1));
            let r = p
                .send(Outbound {
                    stream,
                    token,
                    payload: body,
                    meta,
                })
                .await;
            this.busy.set(0);
            match r {
                Ok(()) => {
                    consecutive_errors = 0;
                    rec.record_send(intended_ns, sent_ns, len);
                    if let Some(s) = this.tagger.as_ref().and_then(Tagger::ack_stage) {
                        let st = rec.stage(s);
                        st.add_bytes(len);
                        if !this.acks {
                            // Without confirms, handing the message over is all there is.
                            st.reached(sent_ns.saturating_sub(intended_ns), 0);
                        }
                    }
                    if this.acks {
                        window.push(token, sent_ns, intended_ns);
                    }
                    seqs[stream as usize] += 1;
                    token += 1;
                    if phase == Phase::Measure {
                        measured += 1;
                    }
                    this.sent.set(token);
                    stream += 1;
                    if stream == this.streams {
                        stream = 0;
                    }
                }
                Err(e) => {
                    rec.record_error(e.kind());
                    if let Some(t) = &this.tagger {
                        t.unsent(token);
                    }
                    if phase == Phase::Measure {
                        // Attempts count toward a message quota, so a count-bounded run ends
                        // even when sends keep failing.
                        measured += 1;
                    }
                    if e.is_fatal() {
                        let _ = this
                            .fatal
                            .send(format!("producer {} stopped: {e}", this.id));
                        break;
                    }
                    // Back off so a dead connection does not become a busy loop; the driver
                    // reconnects underneath.
                    consecutive_errors = consecutive_errors.saturating_add(1);
                    let pause = 1_000_000u64 << consecutive_errors.min(7);
                    sleep_until_ns(&mut timer, now_ns() + pause, this.pacing).await;
                }
            }
        }

        // What was recorded so far belongs to the phase the loop was in.
        this.flush_snapshot(&mut rec, phase, ticker.recording());
        // Push out what the client buffered, then wait (bounded) for outstanding acks.
        if let Err(e) = p.flush().await {
            rec.record_error(e.kind());
        }
        if this.acks {
            loop {
                this.drain_ready_acks(&mut p, &mut rec, &mut window);
                if window.is_empty() || now_ns() >= this.state.drain_deadline_ns() {
                    break;
                }
                let phase = this.state.phase_at(now_ns());
                if let Flow::Stop = this
                    .wait_ack(&mut p, &mut rec, &mut window, &mut ticker, phase)
                    .await
                {
                    break;
                }
            }
            // Never confirmed: in doubt. Counted, never silently dropped.
            rec.counters_mut()
                .errors
                .add(ErrorKind::Timeout, window.len() as u64);
        } else {
            this.drain_ready_acks(&mut p, &mut rec, &mut window);
        }
        let _ = p.close().await;
        this.flush_snapshot(&mut rec, this.state.phase_at(now_ns()), ticker.recording());
    }
}

async fn sleep_until_ns(timer: &mut Option<PreciseTimer>, at: u64, pacing: super::timer::Pacing) {
    match timer {
        Some(t) => t.wait_until(at, pacing).await,
        None => tokio::time::sleep_until(to_instant(at)).await,
    }
}
