//! Delivery integrity at one consumer: for every (producer, stream) it tracks the sequence numbers
//! seen and counts gaps, duplicates and reordering exactly, in constant memory per stream.
//!
//! Each stream keeps the next expected sequence number and a ring bitmap of the last
//! [`WINDOW`] sequence numbers. An arrival:
//! - at the expected number: in order;
//! - above it: the numbers skipped open gaps;
//! - below it, inside the window: a duplicate if its bit is set, otherwise a reordered arrival
//!   that fills a gap;
//! - below the window: reordered by more than the window (counted as reordered; whether it was
//!   a duplicate can no longer be told).
//!
//! Gaps are tentative while the run goes on (a reordered arrival may fill them); the final loss is
//! computed from expected versus distinct deliveries by [`crate::aggregate`].

use crate::counters::Counters;
use std::collections::HashMap;

/// Sequence numbers remembered per stream for duplicate and reorder detection.
pub const WINDOW: u64 = 1 << 16;
const WORDS: usize = (WINDOW / 64) as usize;

#[derive(Debug)]
struct StreamState {
    next: u64,
    /// The ring bitmap, only while a gap is within the window. `None`: every number in the
    /// window was seen, which is what an in-order stream has all along; so a consumer of
    /// in-order streams costs a few words per stream, not 8 KiB (100,000 WebSocket receivers
    /// would otherwise hold 800 MB of bitmaps that say nothing).
    seen: Option<Box<[u64; WORDS]>>,
    /// One past the highest number ever skipped: once the window has moved past it, no gap is
    /// left inside and the bitmap goes.
    hole_top: u64,
    /// Per lane (partition) of a stream spread over several: the highest sequence number + 1
    /// seen on it (0: none yet). Grows to the highest lane seen, once.
    lanes: Vec<u64>,
}

impl StreamState {
    fn new() -> Self {
        Self {
            next: 0,
            seen: None,
            hole_top: 0,
            lanes: Vec::new(),
        }
    }

    /// Notes `seq` on `lane`; true if a later message of the stream came before it there.
    #[inline]
    fn behind_on_lane(&mut self, lane: Option<u32>, seq: u64) -> bool {
        let Some(lane) = lane else { return true };
        let i = lane as usize;
        if i >= self.lanes.len() {
            self.lanes.resize(i + 1, 0);
        }
        let top = &mut self.lanes[i];
        let behind = seq < *top;
        *top = (*top).max(seq.saturating_add(1));
        behind
    }

    #[inline]
    fn bit(seq: u64) -> (usize, u64) {
        let i = seq % WINDOW;
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    /// Records `seq`; `lane`: see [`IntegrityTracker::observe_on_lane`].
    #[inline]
    fn observe(&mut self, seq: u64, lane: Option<u32>, c: &mut Counters) {
        // Order within the lane decides "reordered"; gaps and duplicates stay per stream.
        let behind = match lane {
            Some(_) => self.behind_on_lane(lane, seq),
            None => true,
        };
        if seq == self.next {
            if let Some(seen) = self.seen.as_mut() {
                let (w, m) = Self::bit(seq);
                seen[w] |= m;
                if seq.saturating_add(1) >= self.hole_top.saturating_add(WINDOW) {
                    self.seen = None;
                }
            }
            self.next = seq.saturating_add(1);
        } else if seq > self.next {
            let skipped = seq - self.next;
            c.gaps_opened += skipped;
            // Every number in the window was seen until now: all bits set, then the skipped
            // ones cleared.
            let seen = self.seen.get_or_insert_with(|| Box::new([u64::MAX; WORDS]));
            if skipped >= WINDOW {
                seen.fill(0);
            } else {
                for s in self.next..seq {
                    let (w, m) = Self::bit(s);
                    seen[w] &= !m;
                }
            }
            let (w, m) = Self::bit(seq);
            seen[w] |= m;
            self.hole_top = seq;
            self.next = seq.saturating_add(1);
        } else if self.next - seq > WINDOW {
            if behind {
                c.reordered += 1;
            } else {
                // In order on its lane: it fills the gap its lane's lag opened.
                c.gaps_filled += 1;
            }
        } else {
            let (w, m) = Self::bit(seq);
            match self.seen.as_mut() {
                // No gap in the window: it was seen.
                None => c.duplicated += 1,
                Some(seen) if seen[w] & m != 0 => c.duplicated += 1,
                Some(seen) => {
                    seen[w] |= m;
                    if behind {
                        c.reordered += 1;
                    }
                    c.gaps_filled += 1;
                }
            }
        }
    }
}

/// Sequence tracking for all streams one consumer sees.
#[derive(Debug, Default)]
pub struct IntegrityTracker {
    states: Vec<StreamState>,
    index: HashMap<u64, usize>,
    /// The last stream seen and its slot: consecutive messages of one stream skip the hash.
    last: Option<(u64, usize)>,
}

impl IntegrityTracker {
    /// An empty tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the arrival of `seq` from (`producer`, `stream`), updating gap, duplicate and
    /// reorder counts in `c`.
    #[inline]
    pub fn observe(&mut self, producer: u32, stream: u32, seq: u64, c: &mut Counters) {
        self.observe_on_lane(producer, stream, seq, None, c)
    }

    /// [`IntegrityTracker::observe`] for a stream spread over ordered lanes (Kafka partitions):
    /// an arrival below the expected number counts as reordered only if a later message of the
    /// stream already arrived on the same `lane`; across lanes any order is in order. Gaps and
    /// duplicates are still counted over the whole stream. `None`: one lane.
    #[inline]
    pub fn observe_on_lane(
        &mut self,
        producer: u32,
        stream: u32,
        seq: u64,
        lane: Option<u32>,
        c: &mut Counters,
    ) {
        let key = ((producer as u64) << 32) | stream as u64;
        let slot = match self.last {
            Some((k, i)) if k == key => i,
            _ => {
                let states = &mut self.states;
                let i = *self.index.entry(key).or_insert_with(|| {
                    states.push(StreamState::new());
                    states.len() - 1
                });
                self.last = Some((key, i));
                i
            }
        };
        self.states[slot].observe(seq, lane, c);
    }

    /// Number of distinct streams seen.
    pub fn streams(&self) -> usize {
        self.states.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(seqs: &[u64]) -> Counters {
        let mut t = IntegrityTracker::new();
        let mut c = Counters::default();
        for &s in seqs {
            t.observe(1, 0, s, &mut c);
        }
        c
    }

    #[test]
    fn in_order_is_clean() {
        let c = run(&[0, 1, 2, 3, 4]);
        assert_eq!((c.gaps_opened, c.duplicated, c.reordered), (0, 0, 0));
    }

    #[test]
    fn gap_then_fill_is_reorder_not_loss() {
        let c = run(&[0, 1, 3, 4, 2]);
        assert_eq!(
            (c.gaps_opened, c.gaps_filled, c.reordered, c.duplicated),
            (1, 1, 1, 0)
        );
        assert_eq!(c.open_gaps(), 0);
    }

    /// The bitmap exists only while a gap is inside the window; counts are the same either way.
    #[test]
    fn in_order_streams_hold_no_bitmap() {
        let mut t = IntegrityTracker::new();
        let mut c = Counters::default();
        for s in 0..1000 {
            t.observe(1, 0, s, &mut c);
        }
        t.observe(1, 0, 500, &mut c);
        assert!(t.states[0].seen.is_none());
        assert_eq!((c.duplicated, c.gaps_opened), (1, 0));
        // A gap: 1000..=1004 skipped. The bitmap tells a late 1002 (filled) from a second 1002
        // (duplicate), and stays until the window has moved past 1004.
        t.observe(1, 0, 1005, &mut c);
        assert!(t.states[0].seen.is_some());
        t.observe(1, 0, 1002, &mut c);
        t.observe(1, 0, 1002, &mut c);
        assert_eq!((c.gaps_opened, c.gaps_filled, c.reordered), (5, 1, 1));
        assert_eq!(c.duplicated, 2);
        let last = 1004 + WINDOW; // the first arrival whose window leaves 1004 out
        for s in 1006..last {
            t.observe(1, 0, s, &mut c);
        }
        assert!(t.states[0].seen.is_some(), "1004 is still in the window");
        t.observe(1, 0, last, &mut c);
        assert!(t.states[0].seen.is_none());
        // Everything in the window was seen: a repeat is a duplicate.
        t.observe(1, 0, last - 3, &mut c);
        assert_eq!((c.duplicated, c.open_gaps()), (3, 4));
    }

    #[test]
    fn loss_stays_open() {
        let c = run(&[0, 1, 5, 6]);
        assert_eq!(c.open_gaps(), 3);
    }

    /// A corrupt or hostile stamp may carry any sequence number: the largest opens a gap and
    /// nothing overflows (a debug build would panic).
    #[test]
    fn the_largest_sequence_number_does_not_overflow() {
        let c = run(&[0, u64::MAX, u64::MAX - 1, 1]);
        assert_eq!(c.gaps_opened, u64::MAX - 1);
        assert_eq!(c.gaps_filled, 1);
    }

    #[test]
    fn duplicates_are_counted_once_each() {
        let c = run(&[0, 1, 1, 2, 0, 2]);
        assert_eq!((c.duplicated, c.reordered, c.gaps_opened), (3, 0, 0));
    }

    #[test]
    fn streams_are_independent() {
        let mut t = IntegrityTracker::new();
        let mut c = Counters::default();
        for s in 0..10 {
            t.observe(1, 0, s, &mut c);
            t.observe(2, 0, s, &mut c);
            t.observe(1, 1, s, &mut c);
        }
        assert_eq!(t.streams(), 3);
        assert_eq!((c.duplicated, c.reordered, c.gaps_opened), (0, 0, 0));
    }

    #[test]
    fn ring_reuse_after_wraparound() {
        // Walk far past the window: old bits must not turn new arrivals into duplicates.
        let seqs: Vec<u64> = (0..3 * WINDOW).collect();
        let c = run(&seqs);
        assert_eq!((c.duplicated, c.reordered, c.gaps_opened), (0, 0, 0));
    }

    #[test]
    fn order_across_lanes_is_not_reordering() {
        // One stream over two partitions, read a batch of each in turn: in order per lane.
        let mut t = IntegrityTracker::new();
        let mut c = Counters::default();
        for (seq, lane) in [(0, 0), (2, 0), (4, 0), (1, 1), (3, 1), (5, 1), (6, 0)] {
            t.observe_on_lane(1, 0, seq, Some(lane), &mut c);
        }
        assert_eq!((c.reordered, c.duplicated, c.open_gaps()), (0, 0, 0));
        // Out of order within a lane still counts; a duplicate from another lane too.
        t.observe_on_lane(1, 0, 8, Some(1), &mut c);
        t.observe_on_lane(1, 0, 7, Some(1), &mut c);
        t.observe_on_lane(1, 0, 7, Some(0), &mut c);
        assert_eq!((c.reordered, c.duplicated, c.open_gaps()), (1, 1, 0));
        // The same arrivals without lanes: reordered.
        let mut c = Counters::default();
        let mut t = IntegrityTracker::new();
        for seq in [0, 2, 4, 1, 3, 5] {
            t.observe(1, 0, seq, &mut c);
        }
        assert_eq!(c.reordered, 2);
    }

    #[test]
    fn huge_jump_clears_window() {
        let c = run(&[0, 10 * WINDOW, 10 * WINDOW + 1, 5]);
        assert_eq!(c.gaps_opened, 10 * WINDOW - 1);
        assert_eq!(c.reordered, 1); // below the window: reordered, undecidable duplicate
        assert_eq!(c.duplicated, 0);
    }
}
