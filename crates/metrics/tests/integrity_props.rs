//! Property tests of delivery integrity: whatever drops, duplicates and reordering happen to
//! the messages of several producers and streams on their way to a consumer (or a queue group
//! of them), the counts equal those of an independent model that knows everything that was
//! sent and delivered.
//!
//! The model is declarative, per stream, over the arrivals in order: a *record* is an arrival
//! above every earlier one. Then duplicates = arrivals − distinct sequence numbers; gaps
//! opened = highest + 1 − records (every number a record skipped); gaps filled = reordered =
//! distinct − records (first arrivals below an earlier one); open gaps = highest + 1 −
//! distinct; lost = sent − distinct.
//!
//! The regime is the one where the tracker is exact by design: within a stream, no arrival
//! trails the highest number seen so far by more than its window ([`WINDOW`], 65,536; group
//! duplicates: [`SLOTS`]). Streams here span fewer than 400 numbers, from a start offset that
//! may be anywhere (a consumer that joins late first sees a jump); what happens beyond the
//! window is approximate on purpose (bounded memory) and covered by the unit tests.

use msgbench_metrics::group_seen::SLOTS;
use msgbench_metrics::integrity::WINDOW;
use msgbench_metrics::{Counters, GroupSeen, GroupView, IntegrityTracker};
use proptest::prelude::*;
use std::collections::{BTreeSet, HashMap, HashSet};

/// One stream as sent and as delivered.
#[derive(Debug, Clone)]
struct Stream {
    producer: u32,
    stream: u32,
    /// The sequence numbers sent: `start..start + sent`.
    start: u64,
    sent: u64,
    /// What happens to each message: delivered this many times (0: dropped).
    copies: Vec<u8>,
    /// The lane (partition) of each message, for lane-aware tracking.
    lanes: Vec<u32>,
}

/// Streams of distinct (producer, stream) keys, each with its fate.
fn streams(lanes: u32) -> impl Strategy<Value = Vec<Stream>> {
    let one = (
        0u32..4,
        0u32..3,
        prop_oneof![
            Just(0u64),
            0u64..1_000,
            (1u64 << 20)..(1u64 << 40),
            // Across the 32-bit boundary of the group's tags.
            (1u64 << 32) - 400..(1u64 << 32) + 100,
        ],
        0u64..300,
    )
        .prop_flat_map(move |(producer, stream, start, sent)| {
            let n = sent as usize;
            (
                Just((producer, stream, start, sent)),
                // Mostly delivered once; sometimes dropped or delivered two or three times.
                prop::collection::vec(prop_oneof![6 => Just(1u8), 2 => Just(0u8), 1 => 2u8..4], n),
                prop::collection::vec(0..lanes, n),
            )
        })
        .prop_map(|((producer, stream, start, sent), copies, lanes)| Stream {
            producer,
            stream,
            start,
            sent,
            copies,
            lanes,
        });
    prop::collection::vec(one, 0..6).prop_map(|mut v| {
        let mut keys = HashSet::new();
        v.retain(|s| keys.insert((s.producer, s.stream)));
        v
    })
}

/// An arrival: (producer, stream, seq, lane).
type Arrival = (u32, u32, u64, u32);

/// Every delivered copy, shuffled by `keys` (one sort key per copy, cycled): any interleaving
/// of streams and any order within them.
fn arrivals(streams: &[Stream], keys: &[u32]) -> Vec<Arrival> {
    let mut all = Vec::new();
    for s in streams {
        for (i, &copies) in s.copies.iter().enumerate() {
            for _ in 0..copies {
                all.push((s.producer, s.stream, s.start + i as u64, s.lanes[i]));
            }
        }
    }
    let mut keyed: Vec<(u32, usize, Arrival)> = all
        .into_iter()
        .enumerate()
        .map(|(i, a)| {
            (
                keys.get(i % keys.len().max(1)).copied().unwrap_or(0) ^ i as u32,
                i,
                a,
            )
        })
        .collect();
    keyed.sort_unstable();
    keyed.into_iter().map(|(_, _, a)| a).collect()
}

/// Arrivals where each lane keeps the order of its stream (a partition's order) and only the
/// interleaving of lanes and streams is arbitrary; duplicates come at the end of their lane
/// (redeliveries).
fn lane_ordered(streams: &[Stream], keys: &[u32]) -> Vec<Arrival> {
    let mut queues: Vec<Vec<Arrival>> = Vec::new();
    for s in streams {
        let mut by_lane: HashMap<u32, (Vec<Arrival>, Vec<Arrival>)> = HashMap::new();
        for (i, &copies) in s.copies.iter().enumerate() {
            let a = (s.producer, s.stream, s.start + i as u64, s.lanes[i]);
            let q = by_lane.entry(a.3).or_default();
            if copies > 0 {
                q.0.push(a);
            }
            for _ in 1..copies {
                q.1.push(a);
            }
        }
        let mut lanes: Vec<_> = by_lane.into_iter().collect();
        lanes.sort_by_key(|(l, _)| *l);
        for (_, (mut first, again)) in lanes {
            first.extend(again);
            first.reverse(); // popped from the back
            queues.push(first);
        }
    }
    let mut out = Vec::new();
    let mut k = 0;
    while queues.iter().any(|q| !q.is_empty()) {
        let live: Vec<usize> = (0..queues.len())
            .filter(|&i| !queues[i].is_empty())
            .collect();
        let pick =
            live[keys.get(k % keys.len().max(1)).copied().unwrap_or(0) as usize % live.len()];
        out.push(queues[pick].pop().expect("a live queue"));
        k += 1;
    }
    out
}

/// The model's counts over `arrivals`; with `lanes`, an arrival below the stream's highest
/// counts as reordered only if a higher one came before it on its own lane.
fn model(arrivals: &[Arrival], lanes: bool) -> Counters {
    #[derive(Default)]
    struct S {
        highest: Option<u64>,
        records: u64,
        arrivals: u64,
        seen: BTreeSet<u64>,
        lane_highest: HashMap<u32, u64>,
        reordered: u64,
    }
    let mut per: HashMap<(u32, u32), S> = HashMap::new();
    for &(p, st, seq, lane) in arrivals {
        let s = per.entry((p, st)).or_default();
        s.arrivals += 1;
        let record = s.highest.is_none_or(|h| seq > h);
        let first = s.seen.insert(seq);
        let lane_behind = s.lane_highest.get(&lane).is_some_and(|&h| h > seq);
        if record {
            s.records += 1;
            s.highest = Some(seq);
        } else if first && (!lanes || lane_behind) {
            s.reordered += 1;
        }
        let h = s.lane_highest.entry(lane).or_insert(seq);
        *h = (*h).max(seq);
    }
    let mut c = Counters::default();
    for s in per.values() {
        let distinct = s.seen.len() as u64;
        let top = s.highest.map_or(0, |h| h + 1);
        c.received += s.arrivals;
        c.duplicated += s.arrivals - distinct;
        c.gaps_opened += top - s.records;
        c.gaps_filled += distinct - s.records;
        c.reordered += s.reordered;
    }
    c
}

/// What the tracker counts over `arrivals` (received counted as the consumer does).
fn tracked(arrivals: &[Arrival], lanes: bool) -> Counters {
    let mut t = IntegrityTracker::new();
    let mut c = Counters::default();
    for &(p, s, seq, lane) in arrivals {
        c.received += 1;
        t.observe_on_lane(p, s, seq, lanes.then_some(lane), &mut c);
    }
    c
}

/// Σ over the streams that had arrivals of (highest sequence number + 1).
fn a_highest(arrivals: &[Arrival]) -> u64 {
    let mut top: HashMap<(u32, u32), u64> = HashMap::new();
    for &(p, s, seq, _) in arrivals {
        let t = top.entry((p, s)).or_default();
        *t = (*t).max(seq + 1);
    }
    top.values().sum()
}

fn sent_and_distinct(streams: &[Stream]) -> (u64, u64) {
    let sent = streams.iter().map(|s| s.sent).sum();
    let distinct = streams
        .iter()
        .flat_map(|s| &s.copies)
        .filter(|&&c| c > 0)
        .count() as u64;
    (sent, distinct)
}

fn counts(c: &Counters) -> [u64; 5] {
    [
        c.received,
        c.gaps_opened,
        c.gaps_filled,
        c.duplicated,
        c.reordered,
    ]
}

proptest! {
    // 512 cases each unless PROPTEST_CASES says otherwise. A failure is kept as a unit test
    // next to the code it found wrong, not in a file here.
    #![proptest_config(ProptestConfig {
        cases: if std::env::var_os("PROPTEST_CASES").is_some() { ProptestConfig::default().cases } else { 512 },
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// One consumer, streams over one lane each, any interleaving and any order within them.
    #[test]
    fn any_order_is_counted_exactly(s in streams(1), keys in prop::collection::vec(any::<u32>(), 1..64)) {
        let a = arrivals(&s, &keys);
        let c = tracked(&a, false);
        prop_assert_eq!(counts(&c), counts(&model(&a, false)));
        // The final account: lost = sent − distinct, exactly the dropped messages.
        let (sent, distinct) = sent_and_distinct(&s);
        prop_assert_eq!(c.distinct_received(), distinct);
        prop_assert_eq!(sent - c.distinct_received(), s.iter().flat_map(|s| &s.copies).filter(|&&c| c == 0).count() as u64);
        // Open gaps: the numbers below each stream's highest that never came (those below
        // its start included: the tracker expects every stream to start at 0).
        let below_highest: u64 = a_highest(&a);
        prop_assert_eq!(c.open_gaps(), below_highest - distinct);
    }

    /// Streams spread over lanes (partitions): in order within each lane, so nothing is
    /// reordered except what the model says; any order of lanes counts the same losses and
    /// duplicates as without lanes.
    #[test]
    fn lanes_count_reordering_per_lane(s in streams(4), keys in prop::collection::vec(any::<u32>(), 1..64), shuffled in any::<bool>()) {
        let a = if shuffled { arrivals(&s, &keys) } else { lane_ordered(&s, &keys) };
        let c = tracked(&a, true);
        prop_assert_eq!(counts(&c), counts(&model(&a, true)));
        let plain = tracked(&a, false);
        prop_assert_eq!((c.duplicated, c.gaps_opened, c.gaps_filled), (plain.duplicated, plain.gaps_opened, plain.gaps_filled));
        if !shuffled {
            prop_assert_eq!(c.reordered, 0, "in order on every lane");
        }
    }

    /// A queue group: each delivery goes to any member; a message a member receives again, or
    /// that another member already had, is a duplicate once, group-wide.
    #[test]
    fn queue_group_counts_each_message_once(s in streams(1), keys in prop::collection::vec(any::<u32>(), 1..64), members in 1usize..4) {
        let a = arrivals(&s, &keys);
        let seen = GroupSeen::new();
        let mut books: Vec<(GroupView, IntegrityTracker, Counters, u64)> = (0..members)
            .map(|_| (GroupView::new(seen.clone()), IntegrityTracker::new(), Counters::default(), 0))
            .collect();
        for (i, &(p, st, seq, _)) in a.iter().enumerate() {
            // As the consumer does (msgbench_core::runner::consume): the group first, then the
            // member's own tracker.
            let (view, tracker, c, distinct) = &mut books[keys[i % keys.len()] as usize % members];
            c.received += 1;
            if view.first_delivery(p, st, seq) {
                let dups = c.duplicated;
                tracker.observe(p, st, seq, c);
                if c.duplicated == dups {
                    *distinct += 1;
                }
            } else {
                c.duplicated += 1;
            }
        }
        let received: u64 = books.iter().map(|b| b.2.received).sum();
        let duplicated: u64 = books.iter().map(|b| b.2.duplicated).sum();
        let distinct: u64 = books.iter().map(|b| b.3).sum();
        let (_, expected_distinct) = sent_and_distinct(&s);
        prop_assert_eq!(distinct, expected_distinct);
        prop_assert_eq!(received - duplicated, expected_distinct);
        prop_assert_eq!(received, a.len() as u64);
    }
}

#[test]
fn the_regime_is_inside_both_windows() {
    // Streams span under 300 numbers from their start: well inside both windows.
    const { assert!(WINDOW >= 300 && SLOTS >= 300) };
}
