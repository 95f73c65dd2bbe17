//! Duplicates across the members of a queue group (competing consumers). Each member's own
//! [`crate::IntegrityTracker`] sees only its share of the messages, so a message the broker
//! redelivers to *another* member (after a consumer or broker restart) looks new to both:
//! without this, it would count as two distinct deliveries and hide a loss elsewhere.
//!
//! Per (producer, stream), the group shares a ring of [`SLOTS`] atomic tags, one per sequence
//! number modulo the ring; a tag holds the lap of the last sequence number that landed there
//! (the number divided by [`SLOTS`], plus one so that 0 means empty: 32 bits of laps last
//! 2^48 sequence numbers). Marking a delivery is one compare-and-swap, no lock: the tag already equal
//! means a duplicate. A sequence number older than what its slot holds is too old to tell
//! (more than [`SLOTS`] behind) and counts as first seen. Memory: 4 bytes × [`SLOTS`] per
//! stream a group receives, allocated when the group first sees the stream.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};

/// Sequence numbers remembered per stream, across a group.
pub const SLOTS: usize = 1 << 16;

struct Slots(Box<[AtomicU32]>);

impl Slots {
    fn new() -> Self {
        Slots((0..SLOTS).map(|_| AtomicU32::new(0)).collect())
    }

    /// True if `seq` had not been marked before (or is too old to tell).
    #[inline]
    fn mark(&self, seq: u64) -> bool {
        let slot = &self.0[(seq as usize) & (SLOTS - 1)];
        // Not the sequence number's own low 32 bits + 1: that is 0, "empty", for every number
        // one below a multiple of 2^32, whose first delivery then read as a duplicate.
        let tag = ((seq / SLOTS as u64) as u32).wrapping_add(1);
        let mut cur = slot.load(Ordering::Acquire);
        loop {
            if cur == tag {
                return false;
            }
            // A newer sequence number already took the slot: this one is older than the ring.
            if cur != 0 && (cur.wrapping_sub(tag) as i32) > 0 {
                return true;
            }
            match slot.compare_exchange_weak(cur, tag, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }
}

/// What the members of all queue groups of a run share (keys include the producer and stream,
/// which belong to one topic, so groups on different topics never meet).
#[derive(Default)]
pub struct GroupSeen {
    streams: RwLock<HashMap<u64, Arc<Slots>>>,
}

impl GroupSeen {
    /// A new, empty set.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }
}

/// One member's handle: caches the streams it has met, so the shared map's lock is taken
/// once per stream and member, never per message.
pub struct GroupView {
    shared: Arc<GroupSeen>,
    local: HashMap<u64, Arc<Slots>>,
    last: Option<(u64, Arc<Slots>)>,
}

impl GroupView {
    /// A member's view of `shared`.
    pub fn new(shared: Arc<GroupSeen>) -> Self {
        GroupView {
            shared,
            local: HashMap::new(),
            last: None,
        }
    }

    /// Marks (`producer`, `stream`, `seq`) delivered to the group; false if some member (this
    /// one included) already had it.
    #[inline]
    pub fn first_delivery(&mut self, producer: u32, stream: u32, seq: u64) -> bool {
        let key = ((producer as u64) << 32) | stream as u64;
        if let Some((k, s)) = &self.last
            && *k == key
        {
            return s.mark(seq);
        }
        let slots = match self.local.get(&key) {
            Some(s) => s.clone(),
            None => {
                let s = {
                    let mut m = self.shared.streams.write().expect("group map");
                    m.entry(key)
                        .or_insert_with(|| Arc::new(Slots::new()))
                        .clone()
                };
                self.local.insert(key, s.clone());
                s
            }
        };
        let first = slots.mark(seq);
        self.last = Some((key, slots));
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redelivery_to_another_member_is_a_duplicate() {
        let g = GroupSeen::new();
        let (mut a, mut b) = (GroupView::new(g.clone()), GroupView::new(g));
        assert!(a.first_delivery(0, 0, 7));
        assert!(b.first_delivery(0, 0, 8));
        assert!(!b.first_delivery(0, 0, 7), "a had it");
        assert!(!a.first_delivery(0, 0, 7), "a had it itself");
        assert!(b.first_delivery(1, 0, 7), "another producer's 7");
        assert!(b.first_delivery(0, 1, 7), "another stream's 7");
    }

    /// Found by the property test `queue_group_counts_each_message_once`: the tag of
    /// 2^32 − 1 was 0, an empty slot's, so its first delivery counted as a duplicate.
    #[test]
    fn a_number_just_below_a_multiple_of_2_pow_32_is_new() {
        let g = GroupSeen::new();
        let mut a = GroupView::new(g);
        for seq in [(1u64 << 32) - 1, (3u64 << 32) - 1, u64::from(u32::MAX) + 1] {
            assert!(a.first_delivery(0, 0, seq), "{seq}");
            assert!(!a.first_delivery(0, 0, seq), "{seq} again");
        }
    }

    #[test]
    fn older_than_the_ring_counts_as_first() {
        let g = GroupSeen::new();
        let mut a = GroupView::new(g);
        let far = SLOTS as u64 + 5;
        assert!(a.first_delivery(0, 0, 5));
        assert!(a.first_delivery(0, 0, far), "same slot, newer: takes it");
        assert!(a.first_delivery(0, 0, 5), "too old to tell");
        assert!(!a.first_delivery(0, 0, far));
    }

    #[test]
    fn concurrent_members_count_each_message_once() {
        let g = GroupSeen::new();
        let firsts: u64 = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    let mut v = GroupView::new(g.clone());
                    s.spawn(move || {
                        (0..50_000u64)
                            .filter(|&q| v.first_delivery(3, 1, q))
                            .count()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap() as u64).sum()
        });
        assert_eq!(
            firsts, 50_000,
            "every sequence number is first exactly once"
        );
    }
}
