//! The per-task recorder: the only thing on the hot path that touches metrics.

use crate::Phase;
use crate::counters::{Counters, ErrorKind};
use crate::snapshot::{Role, Snapshot};
use crate::tick::TickLatencies;

/// Counters and histograms owned by exactly one task. It is never shared, so recording takes no
/// lock and no atomic; every tick the task calls [`Recorder::take`] and hands the result to the
/// aggregator (the HdrHistogram "interval recorder" pattern).
#[derive(Debug)]
pub struct Recorder {
    counters: Counters,
    hist: TickLatencies,
    late_threshold_ns: u64,
    stages: Vec<crate::stages::StageRecorder>,
    /// Messages sent before this instant were sent in the warm-up (0 while the task is still
    /// in it): see [`Recorder::sent_in_warmup`].
    warmup_until_ns: u64,
    /// Outcomes of warm-up messages learnt after the warm-up ended.
    warmup_outcomes: Counters,
}

impl Recorder {
    /// A recorder that counts a send as late when it leaves more than `late_threshold_ns` after its
    /// intended time.
    pub fn new(late_threshold_ns: u64) -> Self {
        Self {
            counters: Counters::default(),
            hist: TickLatencies::default(),
            late_threshold_ns,
            stages: Vec::new(),
            warmup_until_ns: 0,
            warmup_outcomes: Counters::default(),
        }
    }

    /// The task left the warm-up: its first message of the next phase went at `first_sent_ns`.
    /// From now on the acks of messages sent before that belong to the warm-up, whose sends
    /// they answer, not to the phase they arrive in: counted there, they made a phase's acks
    /// outnumber its sends by what was in flight at the boundary, and put warm-up latencies
    /// into the measured ones.
    pub fn leave_warmup(&mut self, first_sent_ns: u64) {
        self.warmup_until_ns = first_sent_ns;
    }

    /// Whether a message sent at `sent_ns` was sent in the warm-up the task has left (see
    /// [`Recorder::leave_warmup`]).
    #[inline]
    pub fn sent_in_warmup(&self, sent_ns: u64) -> bool {
        sent_ns < self.warmup_until_ns
    }

    /// The outcome of a warm-up message, learnt after the warm-up: confirmed (`ok`), refused,
    /// or given up on (`timed_out`). It goes to the warm-up's totals ([`Snapshot::warmup_outcomes`])
    /// with no latency.
    #[cold]
    pub fn record_warmup_outcome(&mut self, ok: bool, timed_out: bool) {
        let c = &mut self.warmup_outcomes;
        if timed_out {
            c.errors.add(ErrorKind::Timeout, 1);
        } else if ok {
            c.acked += 1;
        } else {
            c.nacked += 1;
            c.errors.add(ErrorKind::Nack, 1);
        }
    }

    /// One message handed to the client: `intended_ns` is when the pacer wanted it sent,
    /// `sent_ns` when it actually went. Both are monotonic nanoseconds.
    #[inline]
    pub fn record_send(&mut self, intended_ns: u64, sent_ns: u64, bytes: usize) {
        let delay = sent_ns.saturating_sub(intended_ns);
        self.counters.sent += 1;
        self.counters.sent_bytes += bytes as u64;
        if delay > self.late_threshold_ns {
            self.counters.late_sends += 1;
        }
        self.hist.send_delay.record(delay);
    }

    /// The system confirmed (`ok`) or refused one message, `latency_ns` after it was sent.
    #[inline]
    pub fn record_ack(&mut self, latency_ns: u64, ok: bool) {
        if ok {
            self.counters.acked += 1;
            self.hist.publish.record(latency_ns);
        } else {
            self.counters.nacked += 1;
            self.counters.errors.add(ErrorKind::Nack, 1);
        }
    }

    /// One connection opened, its handshake having taken `latency_ns`.
    pub fn record_connect(&mut self, latency_ns: u64) {
        self.counters.connects += 1;
        self.hist.connect.record(latency_ns);
    }

    /// One connection attempt failed.
    pub fn record_connect_failure(&mut self, cause: crate::ConnectFailure) {
        self.counters.connect_failures.add(cause, 1);
        self.counters.errors.add(ErrorKind::Connect, 1);
    }

    /// One of our messages delivered, `e2e_ns` after its intended send time.
    #[inline]
    pub fn record_delivery(&mut self, e2e_ns: u64, bytes: usize) {
        self.counters.received += 1;
        self.counters.received_bytes += bytes as u64;
        self.hist.e2e.record(e2e_ns);
    }

    /// A response to one of this task's requests, `e2e_ns` after its intended send time: end-to-end
    /// latency without a delivery (request/response protocols such as HTTP have no consumers).
    #[inline]
    pub fn record_response(&mut self, e2e_ns: u64) {
        self.hist.e2e.record(e2e_ns);
    }

    /// A delivery that carried no stamp of this run.
    #[inline]
    pub fn record_foreign(&mut self) {
        self.counters.foreign += 1;
    }

    /// One error of `kind`.
    #[inline]
    pub fn record_error(&mut self, kind: ErrorKind) {
        self.counters.errors.add(kind, 1);
    }

    /// Direct access for the integrity tracker, which updates gap, duplicate and reorder counts.
    #[inline]
    pub fn counters_mut(&mut self) -> &mut Counters {
        &mut self.counters
    }

    /// The recorder of stage `i` (multi-stage tracking), created on first use.
    #[inline]
    pub fn stage(&mut self, i: u16) -> &mut crate::stages::StageRecorder {
        let i = i as usize;
        if self.stages.len() <= i {
            self.stages.resize_with(i + 1, Default::default);
        }
        &mut self.stages[i]
    }

    /// Counts recorded since the last [`Recorder::take`].
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Moves everything recorded since the last call into a [`Snapshot`] and starts afresh.
    /// The recorder keeps its memory and the snapshot gets the values recorded as value/count
    /// pairs (see [`crate::snapshot::Recorded`] and, for why few values cost little,
    /// [`crate::tick`]). Once per tick, never per message.
    pub fn take(&mut self, role: Role, task: u32, phase: Phase, interval: u64) -> Snapshot {
        Snapshot {
            role,
            task,
            phase,
            interval,
            counters: std::mem::take(&mut self.counters),
            warmup_outcomes: std::mem::take(&mut self.warmup_outcomes),
            hist: self.hist.take(),
            stages: self
                .stages
                .iter_mut()
                .enumerate()
                .filter_map(|(i, s)| s.take(i as u16))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_delay_and_late_sends() {
        let mut r = Recorder::new(1_000_000);
        r.record_send(100, 200, 64); // 100 ns late: on time
        r.record_send(0, 2_000_000, 64); // 2 ms late: counted late
        let s = r.take(Role::Producer, 0, Phase::Measure, 0);
        assert_eq!(s.counters.sent, 2);
        assert_eq!(s.counters.sent_bytes, 128);
        assert_eq!(s.counters.late_sends, 1);
        assert_eq!(s.hist.send_delay.len(), 2);
        assert!(s.hist.send_delay.to_histogram().max() >= 1_998_000);
        // take() resets
        let s2 = r.take(Role::Producer, 0, Phase::Measure, 1);
        assert_eq!(s2.counters.sent, 0);
        assert_eq!(s2.hist.send_delay.len(), 0);
    }

    #[test]
    fn acks_and_nacks() {
        let mut r = Recorder::new(1_000_000);
        r.record_ack(5_000, true);
        r.record_ack(0, false);
        let s = r.take(Role::Producer, 0, Phase::Measure, 0);
        assert_eq!(
            (s.counters.acked, s.counters.nacked, s.counters.errors.nack),
            (1, 1, 1)
        );
        assert_eq!(s.hist.publish.len(), 1);
    }

    /// After the warm-up, outcomes of warm-up sends go to the warm-up's account, with no
    /// latency, and the aggregator adds them to the warm-up's totals in no interval.
    #[test]
    fn outcomes_of_warmup_sends_stay_with_the_warmup() {
        let mut r = Recorder::new(1_000_000);
        assert!(
            !r.sent_in_warmup(5),
            "still in the warm-up: nothing is earlier"
        );
        r.leave_warmup(1_000);
        assert!(r.sent_in_warmup(999) && !r.sent_in_warmup(1_000));
        r.record_warmup_outcome(true, false);
        r.record_warmup_outcome(false, false);
        r.record_warmup_outcome(true, true);
        r.record_ack(5_000, true);
        let s = r.take(Role::Producer, 0, Phase::Measure, 3);
        assert_eq!((s.counters.acked, s.counters.nacked), (1, 0));
        assert_eq!(s.hist.publish.len(), 1);
        let w = &s.warmup_outcomes;
        assert_eq!(
            (w.acked, w.nacked, w.errors.nack, w.errors.timeout),
            (1, 1, 1, 1)
        );
        let mut a = crate::Aggregator::new(1.0);
        a.add(&s);
        assert_eq!(a.totals(Phase::Warmup).counters.acked, 1);
        assert_eq!(a.totals(Phase::Measure).counters.acked, 1);
        let iv = a.take_all_intervals();
        assert_eq!(iv.len(), 1);
        assert_eq!((iv[0].phase, iv[0].counters.acked), (Phase::Measure, 1));
        assert!(r.take(Role::Producer, 0, Phase::Measure, 4).is_empty());
    }

    #[test]
    fn huge_latencies_are_clamped_not_dropped() {
        let mut r = Recorder::new(1);
        r.record_delivery(u64::MAX, 1);
        let s = r.take(Role::Consumer, 0, Phase::Measure, 0);
        assert_eq!(s.hist.e2e.len(), 1);
    }

    #[test]
    fn histograms_grow_to_the_values_recorded() {
        let mut r = Recorder::new(1);
        r.record_delivery(50_000, 1);
        r.record_delivery(7_000_000_000, 1);
        let s = r.take(Role::Consumer, 0, Phase::Measure, 0);
        assert!(
            s.hist.e2e.to_histogram().min() >= 49_950 && s.hist.e2e.to_histogram().min() <= 50_050,
            "{}",
            s.hist.e2e.to_histogram().min()
        );
        assert!(
            s.hist.e2e.to_histogram().max() >= 6_990_000_000,
            "{}",
            s.hist.e2e.to_histogram().max()
        );
    }
}
