//! One latency as one task records it during one tick: a few values kept as they are, a
//! histogram only for the rest.
//!
//! Handing a histogram's values over costs a walk of every bucket up to its largest value (tens
//! of thousands at three significant digits), whatever the number of values. A task that sends
//! or receives a few messages a tick (a slow device, one HTTP connection of thousands, a
//! WebSocket receiver at 10 messages a second) would spend most of its tick walking empty
//! buckets, and every task walks at the same instant, stalling its event loop: a thousand
//! connections on one worker took half a second each tick. So the first [`FEW`] values of a tick
//! go to a small array, and only a task that records more touches (and allocates) a histogram;
//! there the walk is paid for by the many values it carries.

use crate::snapshot::Recorded;
use crate::{Histogram, MAX_LATENCY_NS, new_histogram};

/// Values per tick kept as they are before a histogram takes over.
pub const FEW: usize = 32;

/// What one task recorded of one latency since the last [`TickLatency::take`].
#[derive(Debug, Default)]
pub struct TickLatency {
    /// The tick's first values (room for [`FEW`] reserved on first use, then kept).
    few: Vec<u64>,
    /// Values beyond the first [`FEW`]; created by the first task that needs it, then kept.
    many: Option<Histogram>,
    /// Zeros, counted apart: an unpaced producer's send delay is zero for every message, and
    /// a count is cheaper than a bucket lookup.
    zeros: u64,
}

impl TickLatency {
    /// Records `ns`, clamped to [`MAX_LATENCY_NS`] (a stuck message is counted, not dropped).
    #[inline]
    pub fn record(&mut self, ns: u64) {
        if ns == 0 {
            self.zeros += 1;
            return;
        }
        let ns = ns.min(MAX_LATENCY_NS);
        if self.few.len() < FEW {
            if self.few.capacity() == 0 {
                self.few.reserve_exact(FEW);
            }
            self.few.push(ns);
        } else {
            // Auto-resizing, so only values the clamp already excludes could fail.
            let _ = self.many.get_or_insert_with(new_histogram).record(ns);
        }
    }

    /// Nothing recorded this tick.
    pub fn is_empty(&self) -> bool {
        self.few.is_empty() && self.zeros == 0
    }

    /// Everything recorded since the last call, and starts afresh (memory is kept).
    pub fn take(&mut self) -> Recorded {
        let zeros = std::mem::take(&mut self.zeros);
        match &mut self.many {
            Some(h) if !h.is_empty() => {
                for &v in &self.few {
                    let _ = h.record(v);
                }
                if zeros > 0 {
                    let _ = h.record_n(0, zeros);
                }
                self.few.clear();
                Recorded::take_from(h)
            }
            _ => {
                self.few.sort_unstable();
                let mut v: Vec<(u64, u64)> = Vec::with_capacity(self.few.len() + 1);
                if zeros > 0 {
                    v.push((0, zeros));
                }
                for &ns in &self.few {
                    match v.last_mut() {
                        Some((last, n)) if *last == ns => *n += 1,
                        _ => v.push((ns, 1)),
                    }
                }
                self.few.clear();
                Recorded(v)
            }
        }
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
