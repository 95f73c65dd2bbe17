//! One latency as one task records it during one tick: a few values kept as they are, bucket
//! counts only for the rest.
//!
//! Handing a histogram's values over costs a walk of every bucket up to its largest value (tens
//! of thousands at three significant digits), whatever the number of values. A task that sends
//! or receives a few messages a tick (a slow device, one HTTP connection of thousands, a
//! WebSocket receiver at 10 messages a second) would spend most of its tick walking empty
//! buckets, and every task walks at the same instant, stalling its event loop: a thousand
//! connections on one worker took half a second each tick. So the first [`FEW`] values of a tick
//! go to a small array, and only a task that records more touches (and allocates) bucket counts;
//! there the walk is paid for by the many values it carries.
//!
//! The counts are HdrHistogram's own buckets (the layout of
//! [`new_histogram`](crate::new_histogram): 3 significant digits from 1 ns), kept in a plain
//! array: recording is a shift and an increment, where the histogram's `record` checks,
//! resizes and tracks its extremes for each value (about 70 instructions, on every
//! acknowledged or received message). What a tick hands over is the same either way (a test
//! holds the two to the same output).

use crate::MAX_LATENCY_NS;
use crate::snapshot::Recorded;

/// Values per tick kept as they are before the bucket counts take over.
pub const FEW: usize = 32;

/// Sub-buckets per bucket at 3 significant digits (2,048), as a power of two, and half of it:
/// every bucket after the first shares its lower half with the one before, so each adds 1,024
/// counts.
const SUB_MAGNITUDE: u32 = 11;
const HALF_MAGNITUDE: u32 = SUB_MAGNITUDE - 1;
const SUB_MASK: u64 = (1 << SUB_MAGNITUDE) - 1;

/// The bucket count index of `v` (≥ 1) in HdrHistogram's layout.
#[inline]
fn index_of(v: u64) -> usize {
    let bucket = (64 - SUB_MAGNITUDE) - (v | SUB_MASK).leading_zeros();
    let sub = (v >> bucket) as usize;
    ((bucket as usize + 1) << HALF_MAGNITUDE) + sub - (1 << HALF_MAGNITUDE)
}

/// The value HdrHistogram's iterator reports for count index `i`: the highest value that
/// shares the bucket.
fn value_at(i: usize) -> u64 {
    let (bucket, sub) = match (i >> HALF_MAGNITUDE) as u32 {
        0 => (0, i as u64),
        b => (
            b - 1,
            ((i & ((1 << HALF_MAGNITUDE) - 1)) + (1 << HALF_MAGNITUDE)) as u64,
        ),
    };
    (sub << bucket) + (1u64 << bucket) - 1
}

/// A tick's values beyond the first [`FEW`]: counts by bucket, and the range of buckets touched
/// (the walk at the tick goes over that range only).
#[derive(Debug)]
struct Counts {
    counts: Vec<u64>,
    lo: usize,
    hi: usize,
}

impl Counts {
    fn new() -> Self {
        Self {
            counts: Vec::new(),
            lo: usize::MAX,
            hi: 0,
        }
    }

    #[inline]
    fn add(&mut self, v: u64) {
        let i = index_of(v);
        if i >= self.counts.len() {
            self.grow(i);
        }
        self.counts[i] += 1;
        self.lo = self.lo.min(i);
        self.hi = self.hi.max(i);
    }

    /// Room up to index `i`, in steps of a bucket's worth of counts.
    #[cold]
    fn grow(&mut self, i: usize) {
        let step = 1 << HALF_MAGNITUDE;
        self.counts.resize((i / step + 1) * step, 0);
    }

    fn is_empty(&self) -> bool {
        self.lo > self.hi
    }

    /// Appends the counted values, lowest first, and clears them.
    fn drain_into(&mut self, out: &mut Vec<(u64, u64)>) {
        if self.is_empty() {
            return;
        }
        for (i, c) in self.counts[self.lo..=self.hi].iter_mut().enumerate() {
            if *c != 0 {
                out.push((value_at(self.lo + i), std::mem::take(c)));
            }
        }
        self.lo = usize::MAX;
        self.hi = 0;
    }
}

/// What one task recorded of one latency since the last [`TickLatency::take`].
#[derive(Debug, Default)]
pub struct TickLatency {
    /// The tick's first values (room for [`FEW`] reserved on first use, then kept).
    few: Vec<u64>,
    /// Values beyond the first [`FEW`]; created by the first tick that needs them, then kept.
    many: Option<Box<Counts>>,
    /// Zeros, counted apart: an unpaced producer's send delay is zero for every message, and
    /// a count is cheaper than a bucket lookup.
    zeros: u64,
}

impl TickLatency {
    /// Records `ns`, clamped to [`MAX_LATENCY_NS`] (a stuck message is counted, not dropped).
    /// A zero is counted where it is recorded (every send of an unpaced producer).
    #[inline(always)]
    pub fn record(&mut self, ns: u64) {
        if ns == 0 {
            self.zeros += 1;
        } else {
            self.record_value(ns);
        }
    }

    fn record_value(&mut self, ns: u64) {
        let ns = ns.min(MAX_LATENCY_NS);
        if self.few.len() < FEW {
            if self.few.capacity() == 0 {
                self.few.reserve_exact(FEW);
            }
            self.few.push(ns);
        } else {
            self.many
                .get_or_insert_with(|| Box::new(Counts::new()))
                .add(ns);
        }
    }

    /// Nothing recorded this tick.
    pub fn is_empty(&self) -> bool {
        self.few.is_empty() && self.zeros == 0
    }

    /// Everything recorded since the last call, and starts afresh (memory is kept).
    pub fn take(&mut self) -> Recorded {
        let zeros = std::mem::take(&mut self.zeros);
        let mut v: Vec<(u64, u64)> = Vec::new();
        if zeros > 0 {
            v.push((0, zeros));
        }
        match &mut self.many {
            Some(m) if !m.is_empty() => {
                for &ns in &self.few {
                    m.add(ns);
                }
                m.drain_into(&mut v);
            }
            _ => {
                // Few values: each stands for its bucket, as a histogram would report it.
                self.few.sort_unstable();
                v.reserve(self.few.len());
                for &ns in &self.few {
                    match v.last_mut() {
                        Some((last, n)) if *last == ns => *n += 1,
                        _ => v.push((ns, 1)),
                    }
                }
            }
        }
        self.few.clear();
        Recorded(v)
    }
}

/// The four latencies a [`crate::Recorder`] keeps (see [`crate::Histograms`] for what each is).
#[derive(Debug, Default)]
pub struct TickLatencies {
    /// Publish latency.
    pub publish: TickLatency,
    /// Send delay.
    pub send_delay: TickLatency,
    /// End-to-end latency.
    pub e2e: TickLatency,
    /// Connect latency.
    pub connect: TickLatency,
}

impl TickLatencies {
    /// Everything recorded since the last call, and starts afresh.
    pub fn take(&mut self) -> crate::RecordedLatencies {
        crate::RecordedLatencies {
            publish: self.publish.take(),
            send_delay: self.send_delay.take(),
            e2e: self.e2e.take(),
            connect: self.connect.take(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Histogram, new_histogram};

    fn exact(values: &[u64]) -> Histogram {
        let mut h = new_histogram();
        for &v in values {
            h.record(v.min(MAX_LATENCY_NS)).unwrap();
        }
        h
    }

    /// Whatever the number of values, what a tick hands over re-records to the histogram the
    /// values themselves would have made (same count, same buckets).
    #[test]
    fn a_tick_hands_over_exactly_what_was_recorded() {
        for n in [0usize, 1, 5, FEW - 1, FEW, FEW + 1, 1_000] {
            let values: Vec<u64> = (0..n as u64)
                .map(|i| 1_000 + (i * 7_919) % 50_000_000)
                .chain((n > 3).then_some(u64::MAX))
                // Zeros (counted apart), a few or more than FEW.
                .chain(std::iter::repeat_n(0, n % 40))
                .collect();
            let mut t = TickLatency::default();
            for &v in &values {
                t.record(v);
            }
            let r = t.take();
            let want = exact(&values);
            let got = r.to_histogram();
            assert_eq!(got.len(), want.len(), "{n} values");
            for q in [0.0, 0.5, 0.9, 0.99, 1.0] {
                assert_eq!(
                    got.value_at_quantile(q),
                    want.value_at_quantile(q),
                    "{n} values, q {q}"
                );
            }
            assert!(t.is_empty());
            assert_eq!(t.take().len(), 0, "take starts afresh");
        }
    }

    /// The bucket counts hand over exactly what HdrHistogram's own iterator gives for the same
    /// values: the same buckets, the same value reported for each, in the same order.
    #[test]
    fn bucket_counts_match_the_histogram_bucket_for_bucket() {
        let mut values: Vec<u64> = (1..5_000).collect();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Every magnitude from 1 ns to past the clamp.
            values.push((x >> (x % 64)).clamp(1, MAX_LATENCY_NS));
        }
        values.extend([MAX_LATENCY_NS, MAX_LATENCY_NS - 1, 2047, 2048, 4095, 4096]);
        for b in 0..42 {
            values.extend([(1u64 << b).min(MAX_LATENCY_NS), ((1u64 << b) - 1).max(1)]);
        }
        let mut c = Counts::new();
        let mut h = new_histogram();
        for &v in &values {
            c.add(v);
            h.record(v).unwrap();
        }
        let mut got = Vec::new();
        c.drain_into(&mut got);
        assert_eq!(Recorded(got), Recorded::take_from(&mut h));
        assert!(c.is_empty());
        let mut again = Vec::new();
        c.drain_into(&mut again);
        assert!(again.is_empty(), "drained counts start afresh");
    }

    #[test]
    fn repeated_values_are_counted_once_each_pair() {
        let mut t = TickLatency::default();
        for v in [5, 3, 5, 5, 3] {
            t.record(v);
        }
        assert_eq!(t.take(), Recorded(vec![(3, 2), (5, 3)]));
    }

    #[test]
    fn a_slow_task_never_creates_a_histogram() {
        let mut t = TickLatency::default();
        for tick in 0..10 {
            for v in 0..FEW as u64 {
                t.record(tick * 1_000 + v);
            }
            assert_eq!(t.take().len(), FEW as u64);
        }
        assert!(t.many.is_none());
        assert_eq!(t.few.capacity(), FEW);
    }
}
