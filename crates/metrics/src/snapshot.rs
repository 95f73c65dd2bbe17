//! What a task hands to the aggregator each tick, and how those pieces merge.

use crate::counters::Counters;
use crate::{Histogram, Phase, new_full_histogram, new_histogram};
use serde::{Deserialize, Serialize};

/// Whether a snapshot came from a sending or a receiving task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A producer (publisher, requester).
    Producer,
    /// A consumer (subscriber, responder).
    Consumer,
}

/// The three latencies msgbench records, in nanoseconds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Histograms {
    /// Publish latency: send until the system confirmed it (broker ack, reply received).
    #[serde(with = "crate::codec::serde_hist")]
    pub publish: Histogram,
    /// Send delay: intended send time until actual send. Large values mean the generator or
    /// backpressure could not keep the schedule.
    #[serde(with = "crate::codec::serde_hist")]
    pub send_delay: Histogram,
    /// End-to-end latency: intended send time until received (coordinated-omission corrected).
    #[serde(with = "crate::codec::serde_hist")]
    pub e2e: Histogram,
    /// Connect latency: TCP connect + TLS + protocol handshake (connection workloads only).
    #[serde(
        with = "crate::codec::serde_hist",
        default = "new_histogram",
        skip_serializing_if = "Histogram::is_empty"
    )]
    pub connect: Histogram,
}

impl Default for Histograms {
    fn default() -> Self {
        Self::new()
    }
}

impl Histograms {
    /// Three empty histograms.
    pub fn new() -> Self {
        Self {
            publish: new_histogram(),
            send_delay: new_histogram(),
            e2e: new_histogram(),
            connect: new_histogram(),
        }
    }

    /// Three full-range histograms, for accumulating a whole run in constant memory.
    pub fn new_full() -> Self {
        Self {
            publish: new_full_histogram(),
            send_delay: new_full_histogram(),
            e2e: new_full_histogram(),
            connect: new_full_histogram(),
        }
    }

    /// Adds every recorded value of `other` into these histograms (exact, order-independent).
    pub fn merge(&mut self, other: &Histograms) {
        // Histograms are auto-resizing, so `add` cannot run out of range.
        let _ = self.publish.add(&other.publish);
        let _ = self.send_delay.add(&other.send_delay);
        let _ = self.e2e.add(&other.e2e);
        let _ = self.connect.add(&other.connect);
    }
}

/// The values one latency recorded during a tick, as (value, count) pairs: the values
/// themselves when there were few, else a histogram's non-empty buckets (each value the highest
/// equivalent of its bucket, as the iterator gives it, so re-recording it lands in the same
/// bucket at the same precision). A tick's latencies sit in a few buckets, so this is a few
/// hundred bytes where a histogram is tens of kilobytes: with ten thousand consumers, shipping
/// and merging whole histograms every tick was most of the generator's work.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recorded(pub Vec<(u64, u64)>);

impl Recorded {
    /// Takes `h`'s buckets and resets it (its memory is kept for the next tick).
    pub fn take_from(h: &mut Histogram) -> Recorded {
        if h.is_empty() {
            return Recorded::default();
        }
        let v = h
            .iter_recorded()
            .map(|x| (x.value_iterated_to(), x.count_at_value()))
            .collect();
        h.reset();
        Recorded(v)
    }

    /// Values recorded.
    pub fn len(&self) -> u64 {
        self.0.iter().map(|(_, n)| n).sum()
    }

    /// Nothing recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds these values to `h` (auto-resizing, so it cannot run out of range).
    pub fn add_to(&self, h: &mut Histogram) {
        for &(v, n) in &self.0 {
            let _ = h.record_n(v, n);
        }
    }

    /// As a histogram (tests, reports).
    pub fn to_histogram(&self) -> Histogram {
        let mut h = new_histogram();
        self.add_to(&mut h);
        h
    }
}

/// What one tick recorded, per latency (see [`Histograms`] for what each one is).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordedLatencies {
    /// Publish latency.
    pub publish: Recorded,
    /// Send delay.
    pub send_delay: Recorded,
    /// End-to-end latency.
    pub e2e: Recorded,
    /// Connect latency.
    pub connect: Recorded,
}

impl RecordedLatencies {
    /// Appends `other`'s values.
    pub fn merge(&mut self, other: &RecordedLatencies) {
        self.publish.0.extend_from_slice(&other.publish.0);
        self.send_delay.0.extend_from_slice(&other.send_delay.0);
        self.e2e.0.extend_from_slice(&other.e2e.0);
        self.connect.0.extend_from_slice(&other.connect.0);
    }
}

impl Histograms {
    /// Adds a tick's recorded values.
    pub fn add_recorded(&mut self, r: &RecordedLatencies) {
        r.publish.add_to(&mut self.publish);
        r.send_delay.add_to(&mut self.send_delay);
        r.e2e.add_to(&mut self.e2e);
        r.connect.add_to(&mut self.connect);
    }
}

/// Everything one task recorded during one tick (or the part of a tick inside one phase).
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Producer or consumer.
    pub role: Role,
    /// The task's index within its role.
    pub task: u32,
    /// The phase the task was in while recording.
    pub phase: Phase,
    /// Tick index since the start of the run.
    pub interval: u64,
    /// Counts.
    pub counters: Counters,
    /// Acks (and refusals and time-outs) of messages the task sent in the warm-up, learnt in
    /// this later phase: they count in the warm-up's totals, in no interval (the warm-up's
    /// have been reported), and carry no latency.
    pub warmup_outcomes: Counters,
    /// Latencies.
    pub hist: RecordedLatencies,
    /// Multi-stage tracking figures, by stage (empty unless the plan has stages).
    pub stages: Vec<crate::stages::StageRecorded>,
}

impl Snapshot {
    /// Nothing was recorded (no need to send it anywhere).
    pub fn is_empty(&self) -> bool {
        self.counters == Counters::default()
            && self.warmup_outcomes == Counters::default()
            && self.hist.publish.is_empty()
            && self.hist.send_delay.is_empty()
            && self.hist.e2e.is_empty()
            && self.hist.connect.is_empty()
            && self.stages.is_empty()
    }

    /// Merges `other` into this snapshot's counts and histograms (identity fields are kept).
    pub fn merge(&mut self, other: &Snapshot) {
        self.counters.merge(&other.counters);
        self.warmup_outcomes.merge(&other.warmup_outcomes);
        self.hist.merge(&other.hist);
        self.stages.extend(other.stages.iter().cloned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Recorder;

    #[test]
    fn merge_is_exact() {
        let mut a = Recorder::new(u64::MAX);
        let mut b = Recorder::new(u64::MAX);
        for i in 0..1000u64 {
            a.record_delivery(1_000 + i, 10);
            b.record_delivery(1_000_000 + i, 10);
        }
        let mut sa = a.take(Role::Consumer, 0, Phase::Measure, 0);
        let sb = b.take(Role::Consumer, 1, Phase::Measure, 0);
        sa.merge(&sb);
        assert_eq!(sa.counters.received, 2000);
        assert_eq!(sa.counters.received_bytes, 20_000);
        assert_eq!(sa.hist.e2e.len(), 2000);
        assert!(
            sa.hist.e2e.to_histogram().min() <= 1_000
                && sa.hist.e2e.to_histogram().max() >= 1_000_999
        );
        // The first half of the merged values came from `a`, the second from `b`.
        assert!(sa.hist.e2e.to_histogram().value_at_quantile(0.49) < 2_000);
        assert!(sa.hist.e2e.to_histogram().value_at_quantile(0.51) >= 999_000);
    }

    #[test]
    fn recorded_buckets_land_in_the_same_buckets() {
        let mut h = new_histogram();
        for v in [
            1u64,
            7,
            999,
            1_000,
            1_001,
            65_535,
            123_456_789,
            3_000_000_000_000,
        ] {
            h.record_n(v, v % 5 + 1).unwrap();
        }
        let mut direct = new_full_histogram();
        direct.add(&h).unwrap();
        let mut via = new_full_histogram();
        Recorded::take_from(&mut h).add_to(&mut via);
        assert!(h.is_empty(), "taken");
        let buckets = |x: &Histogram| {
            x.iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value()))
                .collect::<Vec<_>>()
        };
        assert_eq!(buckets(&via), buckets(&direct));
    }
}
