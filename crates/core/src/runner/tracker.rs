//! The multi-stage tracker: which stages each message in flight has yet to reach.
//!
//! Producers register every message under its key before sending it (an event may come back
//! before the send returns); stage listeners look events up by the keys they carry. An entry
//! remembers the intended send time (every stage's latency starts there) and one bit per stage
//! still pending. When every required stage is reached (or the message failed), the entry is
//! retired: kept a little longer so late duplicates are still recognised as duplicates, then
//! forgotten, so memory follows the messages in flight, not the messages sent (10^8-message runs
//! stay flat).
//!
//! Keys are strings (they come from properties and ids the system under test assigns), so
//! lookups go through a map behind a lock. The map is sharded by key so producers and listeners
//! rarely meet on the same lock, and no lock is ever held while taking another (aliases point
//! to a primary key, resolved in two steps), so there is no lock order to get wrong.
//!
//! The window (`max_in_flight` on a stage) is an atomic count of messages that have not reached
//! the window stage, with a [`Notify`] for producers waiting on it.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::Notify;

const SHARDS: usize = 16;

/// Retired entries kept per shard for duplicate detection (beyond that, a duplicate of a long
/// completed message counts as unknown).
const RETIRED_PER_SHARD: usize = 8192;

#[derive(Debug)]
struct Entry {
    intended_ns: u64,
    /// Stages not yet reached.
    pending: u32,
    alias: Option<Box<str>>,
    retired: bool,
    /// The window stage's bit once its place was given back by [`Tracker::expire_window`].
    expired: u32,
}

#[derive(Debug)]
enum Slot {
    Entry(Entry),
    /// Another key of the entry stored under this primary key.
    Alias(Box<str>),
}

#[derive(Debug, Default)]
struct Shard {
    map: HashMap<Box<str>, Slot>,
    retired: VecDeque<Box<str>>,
}

/// What looking an event up found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// First time at this stage; the latency from the intended send time.
    Reached(u64),
    /// The message had already reached this stage (or, for a failure, had already failed or
    /// completed).
    Duplicate,
}

/// The window of messages not yet at the window stage.
#[derive(Debug)]
pub(crate) struct Gate {
    limit: u64,
    open: AtomicU64,
    notify: Notify,
}

impl Gate {
    /// Takes a place in the window, waiting while it is full.
    pub async fn acquire(&self) {
        loop {
            let notified = self.notify.notified();
            let cur = self.open.load(Ordering::Acquire);
            if cur < self.limit {
                if self
                    .open
                    .compare_exchange(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return;
                }
                continue;
            }
            notified.await;
        }
    }

    /// Whether the window is full now (a taker would wait).
    pub fn is_full(&self) -> bool {
        self.open.load(Ordering::Acquire) >= self.limit
    }

    /// Gives a place back (a message that was never tracked after all).
    pub fn release(&self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
        self.notify.notify_one();
    }
}

/// Shared by the producers and stage listeners of one run.
#[derive(Debug)]
pub(crate) struct Tracker {
    shards: Vec<Mutex<Shard>>,
    hasher: RandomState,
    /// Bits of the stages whose reaching completes a message.
    required: u32,
    /// Bits of every queue stage (optional ones included).
    tracked: u32,
    window_stage: Option<u16>,
    gate: Option<Gate>,
    live: AtomicU64,
}

impl Tracker {
    /// `stages`: for each stage, (tracked on a queue, required); `window`: the window stage and
    /// its limit.
    pub fn new(stages: &[(bool, bool)], window: Option<(u16, u64)>) -> Tracker {
        let mut required = 0;
        let mut tracked = 0;
        for (i, &(queue, req)) in stages.iter().enumerate() {
            if queue {
                tracked |= 1 << i;
                if req {
                    required |= 1 << i;
                }
            }
        }
        Tracker {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            required,
            tracked,
            window_stage: window.map(|(s, _)| s),
            gate: window.map(|(_, limit)| Gate {
                limit: limit.max(1),
                open: AtomicU64::new(0),
                notify: Notify::new(),
            }),
            live: AtomicU64::new(0),
        }
    }

    fn shard(&self, key: &str) -> &Mutex<Shard> {
        &self.shards[self.hasher.hash_one(key) as usize % SHARDS]
    }

    fn lock<'a>(m: &'a Mutex<Shard>) -> std::sync::MutexGuard<'a, Shard> {
        // A panic elsewhere must not take the run's accounting down with it.
        m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The window, if a stage is the flow-control trigger.
    pub fn gate(&self) -> Option<&Gate> {
        self.gate.as_ref()
    }

    /// Messages registered and neither complete nor failed.
    pub fn live(&self) -> u64 {
        self.live.load(Ordering::Acquire)
    }

    /// Starts tracking a message (before it is sent). Returns false if the key is already
    /// tracked (a key template that is not unique), which the caller counts as an error.
    pub fn register(&self, key: &str, intended_ns: u64) -> bool {
        if self.tracked == 0 {
            return true;
        }
        let mut s = Self::lock(self.shard(key));
        if s.map.contains_key(key) {
            return false;
        }
        s.map.insert(
            key.into(),
            Slot::Entry(Entry {
                intended_ns,
                pending: self.tracked,
                alias: None,
                retired: false,
                expired: 0,
            }),
        );
        self.live.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// Stops tracking a message that was never sent (its send failed), freeing its window
    /// place.
    pub fn unregister(&self, key: &str) {
        let removed = {
            let mut s = Self::lock(self.shard(key));
            s.map.remove(key)
        };
        if let Some(Slot::Entry(e)) = removed
            && !e.retired
        {
            self.live.fetch_sub(1, Ordering::AcqRel);
            self.release_window(e.pending);
        }
    }

    fn release_window(&self, pending_before: u32) {
        if let (Some(w), Some(g)) = (self.window_stage, &self.gate)
            && pending_before & (1 << w) != 0
        {
            g.release();
        }
    }

    /// Resolves `key` to the primary key of its entry.
    fn primary(&self, key: &str) -> Option<Box<str>> {
        let s = Self::lock(self.shard(key));
        match s.map.get(key)? {
            Slot::Entry(_) => Some(key.into()),
            Slot::Alias(p) => Some(p.clone()),
        }
    }

    /// An event of `stage` for the message known by one of `keys` (tried in order), at `now`.
    /// `rekey`: another key the message will be known by from now on. `None` when no key is
    /// known (an event of another run, or of a message forgotten long ago).
    pub fn observe<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k str>,
        stage: u16,
        now_ns: u64,
        rekey: Option<&str>,
    ) -> Option<Seen> {
        let bit = 1u32 << stage;
        self.apply(keys, rekey, |e| {
            if (e.pending | e.expired) & bit != 0 {
                Some((
                    bit,
                    Seen::Reached(now_ns.saturating_sub(e.intended_ns)),
                    false,
                ))
            } else {
                Some((0, Seen::Duplicate, false))
            }
        })
    }

    /// A failure event for the message known by one of `keys`: it is retired as failed (never
    /// missing; its window place is freed). Events of other stages that still come for it (a
    /// reply racing the FAILED event on another queue) are recorded as usual. `Some(Reached)`
    /// the first time (the latency is when it failed), `Some(Duplicate)` for a repeated
    /// failure or a message already complete.
    pub fn fail<'k>(&self, keys: impl IntoIterator<Item = &'k str>, now_ns: u64) -> Option<Seen> {
        self.apply(keys, None, |e| {
            if e.retired {
                Some((0, Seen::Duplicate, false))
            } else {
                Some((0, Seen::Reached(now_ns.saturating_sub(e.intended_ns)), true))
            }
        })
    }

    /// Finds the entry of the first known key, lets `f` say which stage bits the event clears
    /// and what it was, then retires the entry when complete, adds the alias, and frees its
    /// window place.
    fn apply<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k str>,
        rekey: Option<&str>,
        f: impl FnOnce(&Entry) -> Option<(u32, Seen, bool)>,
    ) -> Option<Seen> {
        let primary = keys.into_iter().find_map(|k| self.primary(k))?;
        let mut forget = Vec::new();
        let mut s = Self::lock(self.shard(&primary));
        let Some(Slot::Entry(e)) = s.map.get_mut(&*primary) else {
            // Forgotten between the two lookups.
            return None;
        };
        let (clear, seen, failed) = f(e)?;
        let before = e.pending;
        e.pending &= !clear;
        e.expired &= !clear;
        let done = !e.retired && (failed || (e.pending | e.expired) & self.required == 0);
        // The window place is freed when the window stage is reached, or when the message is
        // done without reaching it (it failed); not when it was already freed by expiry.
        let mut release = false;
        if let Some(w) = self.window_stage {
            let bit = 1u32 << w;
            if before & bit != 0 && (e.pending & bit == 0 || done) {
                release = true;
                e.pending &= !bit;
            }
        }
        e.retired |= done;
        let add_alias = match rekey {
            Some(a) if e.alias.is_none() && *a != *primary => {
                e.alias = Some(a.into());
                true
            }
            _ => false,
        };
        if done {
            self.live.fetch_sub(1, Ordering::AcqRel);
            s.retired.push_back(primary.clone());
            while s.retired.len() > RETIRED_PER_SHARD {
                if let Some(old) = s.retired.pop_front()
                    && let Some(Slot::Entry(e)) = s.map.remove(&old)
                    && let Some(a) = e.alias
                {
                    forget.push(a);
                }
            }
        }
        drop(s);
        if release && let Some(g) = &self.gate {
            g.release();
        }
        if add_alias && let Some(a) = rekey {
            Self::lock(self.shard(a))
                .map
                .entry(a.into())
                .or_insert_with(|| Slot::Alias(primary.clone()));
        }
        for a in forget {
            let mut s = Self::lock(self.shard(&a));
            if matches!(s.map.get(&a), Some(Slot::Alias(_))) {
                s.map.remove(&a);
            }
        }
        Some(seen)
    }

    /// Frees the window places of messages intended before `before_ns` that have still not
    /// reached the window stage (lost, or stuck beyond the ack timeout): without this, every lost
    /// message would shrink the window for good and enough of them would stall the run. They stay
    /// tracked, so they are still counted missing (or recorded, should they arrive). Returns how
    /// many places were freed. Costs a walk over the messages in flight: call it once per tick.
    pub fn expire_window(&self, before_ns: u64) -> u64 {
        let (Some(w), Some(g)) = (self.window_stage, &self.gate) else {
            return 0;
        };
        let bit = 1u32 << w;
        let mut n = 0;
        for sh in &self.shards {
            let mut s = Self::lock(sh);
            for slot in s.map.values_mut() {
                if let Slot::Entry(e) = slot
                    && e.pending & bit != 0
                    && e.intended_ns < before_ns
                {
                    // Cleared as far as the window goes; the stage itself stays pending in
                    // `expired` so the message is still counted missing there.
                    e.pending &= !bit;
                    e.expired |= bit;
                    n += 1;
                }
            }
        }
        for _ in 0..n {
            g.release();
        }
        n
    }

    /// For each stage, the messages still tracked that have not reached it (call at the end:
    /// these are the missing ones).
    pub fn missing(&self, stages: usize) -> Vec<u64> {
        let mut out = vec![0u64; stages];
        for sh in &self.shards {
            let s = Self::lock(sh);
            for slot in s.map.values() {
                if let Slot::Entry(e) = slot
                    && !e.retired
                {
                    for (i, n) in out.iter_mut().enumerate() {
                        if (e.pending | e.expired) & self.required & (1 << i) != 0 {
                            *n += 1;
                        }
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stages: 0 ack (untracked), 1 reply (rekeys), 2 delivered (window), 3 optional.
    fn tracker(window: u64) -> Tracker {
        Tracker::new(
            &[(false, true), (true, true), (true, true), (true, false)],
            Some((2, window)),
        )
    }

    #[test]
    fn stages_complete_messages_and_aliases_find_them() {
        let t = tracker(10);
        assert!(t.register("1-r", 100));
        assert!(!t.register("1-r", 100), "keys are unique");
        assert_eq!(t.live(), 1);
        assert_eq!(
            t.observe(["1-r"], 1, 150, Some("ecp-1")),
            Some(Seen::Reached(50))
        );
        assert_eq!(t.observe(["1-r"], 1, 160, None), Some(Seen::Duplicate));
        // Later events know only the alias.
        assert_eq!(
            t.observe(["nope", "ecp-1"], 3, 170, None),
            Some(Seen::Reached(70))
        );
        assert_eq!(t.missing(4), vec![0, 0, 1, 0]);
        assert_eq!(t.observe(["ecp-1"], 2, 200, None), Some(Seen::Reached(100)));
        assert_eq!(t.live(), 0, "complete");
        // Retired entries still recognise duplicates.
        assert_eq!(t.observe(["ecp-1"], 2, 210, None), Some(Seen::Duplicate));
        assert_eq!(t.observe(["other-run"], 2, 210, None), None);
        assert_eq!(t.missing(4), vec![0, 0, 0, 0]);
    }

    #[test]
    fn failures_retire_and_free_the_window() {
        let t = tracker(1);
        let g = t.gate().unwrap();
        futures_lite_block_on(g.acquire());
        assert!(t.register("a", 0));
        assert_eq!(t.fail(["a"], 5), Some(Seen::Reached(5)));
        assert_eq!(t.fail(["a"], 6), Some(Seen::Duplicate));
        assert_eq!(t.live(), 0);
        // A reply that raced the failure on another queue still counts for its stage.
        assert_eq!(t.observe(["a"], 1, 7, None), Some(Seen::Reached(7)));
        assert_eq!(t.missing(4), vec![0, 0, 0, 0], "failed, not missing");
        // The window place came back.
        futures_lite_block_on(g.acquire());
        assert!(t.register("b", 0));
        t.unregister("b");
        futures_lite_block_on(g.acquire());
        assert_eq!(t.live(), 0);
    }

    #[test]
    fn lost_messages_give_their_window_place_back_and_stay_missing() {
        let t = tracker(2);
        let g = t.gate().unwrap();
        for (k, at) in [("old", 10), ("new", 1_000)] {
            futures_lite_block_on(g.acquire());
            assert!(t.register(k, at));
        }
        assert_eq!(t.expire_window(500), 1, "only the old one");
        assert_eq!(t.expire_window(500), 0, "once");
        futures_lite_block_on(g.acquire()); // the freed place
        assert_eq!(t.missing(4), vec![0, 2, 2, 0]);
        // A late arrival is still recorded, and frees nothing twice.
        assert_eq!(
            t.observe(["old"], 2, 2_000, None),
            Some(Seen::Reached(1_990))
        );
        assert_eq!(t.missing(4), vec![0, 2, 1, 0]);
        assert_eq!(
            t.observe(["old"], 1, 2_000, None),
            Some(Seen::Reached(1_990))
        );
        assert_eq!(t.live(), 1);
        assert_eq!(t.gate().unwrap().open.load(Ordering::Acquire), 2);
    }

    #[test]
    fn retired_entries_are_forgotten_eventually() {
        let t = Tracker::new(&[(true, true)], None);
        let n = (RETIRED_PER_SHARD * SHARDS * 2) as u64;
        for i in 0..n {
            let k = format!("k{i}");
            assert!(t.register(&k, 0));
            assert_eq!(
                t.observe([k.as_str()], 0, 1, Some(&format!("a{i}"))),
                Some(Seen::Reached(1))
            );
        }
        let held: usize = t.shards.iter().map(|s| s.lock().unwrap().map.len()).sum();
        assert!(held <= RETIRED_PER_SHARD * SHARDS * 2 + 64, "held {held}");
        assert_eq!(t.observe(["k0"], 0, 1, None), None, "forgotten");
    }

    fn futures_lite_block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }
}
