//! Multi-stage tracking figures: for each stage a message passes (sent, replied, delivered,
//! acknowledged...), how many messages reached it, their latency from the intended send time,
//! duplicates, failures and events that matched no message of the run.
//!
//! Stages are numbered by their position in the plan. Recorders keep one [`StageRecorder`] per
//! stage they feed (a producer the `sent` stage, a stage listener the stages of its queue), hand
//! them over each tick as [`StageRecorded`], and the aggregator merges those into
//! [`StageStats`] per interval and per phase, exactly as it does the other latencies.

use crate::snapshot::Recorded;
use crate::{Histogram, MAX_LATENCY_NS, new_full_histogram, new_histogram};
use serde::{Deserialize, Serialize};

/// Counts of one stage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageCounts {
    /// Messages that reached the stage (first observation of each).
    pub reached: u64,
    /// Bytes of those observations (payload size as received).
    pub bytes: u64,
    /// Observations of a message that had already reached the stage.
    pub duplicates: u64,
    /// Events that matched no message of this run (stale events of an earlier run, or events
    /// whose key was already forgotten).
    pub unknown: u64,
    /// Messages the system reported as failed at this stage (a FAILED event, an error reply).
    pub failed: u64,
}

impl StageCounts {
    /// Adds `o` to these counts.
    pub fn merge(&mut self, o: &StageCounts) {
        self.reached += o.reached;
        self.bytes += o.bytes;
        self.duplicates += o.duplicates;
        self.unknown += o.unknown;
        self.failed += o.failed;
    }

    /// Nothing counted.
    pub fn is_empty(&self) -> bool {
        *self == StageCounts::default()
    }
}

/// What one task records for one stage; owned by the task, so recording takes no lock.
#[derive(Debug)]
pub struct StageRecorder {
    counts: StageCounts,
    latency: Histogram,
}

impl Default for StageRecorder {
    fn default() -> Self {
        StageRecorder {
            counts: StageCounts::default(),
            latency: new_histogram(),
        }
    }
}

impl StageRecorder {
    /// A message reached the stage `latency_ns` after its intended send time.
    #[inline]
    pub fn reached(&mut self, latency_ns: u64, bytes: usize) {
        self.counts.reached += 1;
        self.counts.bytes += bytes as u64;
        let _ = self.latency.record(latency_ns.min(MAX_LATENCY_NS));
    }

    /// Bytes that belong to the stage without a message reaching it yet (sent messages whose
    /// confirmation is still to come).
    #[inline]
    pub fn add_bytes(&mut self, bytes: usize) {
        self.counts.bytes += bytes as u64;
    }

    /// A message was observed at the stage again.
    pub fn duplicate(&mut self) {
        self.counts.duplicates += 1;
    }

    /// An event matched no message.
    pub fn unknown(&mut self) {
        self.counts.unknown += 1;
    }

    /// A message failed at this stage.
    pub fn failed(&mut self) {
        self.counts.failed += 1;
    }

    /// Moves what was recorded into a [`StageRecorded`] (`None` if nothing was).
    pub fn take(&mut self, stage: u16) -> Option<StageRecorded> {
        if self.counts.is_empty() {
            return None;
        }
        Some(StageRecorded {
            stage,
            counts: std::mem::take(&mut self.counts),
            latency: Recorded::take_from(&mut self.latency),
        })
    }
}

/// One stage's figures of one tick, from one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageRecorded {
    /// The stage's index in the plan.
    pub stage: u16,
    /// Counts.
    pub counts: StageCounts,
    /// Latencies from the intended send time, ns.
    pub latency: Recorded,
}

/// One stage's merged figures over an interval or a phase.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageStats {
    /// Counts.
    pub counts: StageCounts,
    /// Latency from the intended send time until the message reached the stage, ns.
    #[serde(with = "crate::codec::serde_hist")]
    pub latency: Histogram,
}

impl Default for StageStats {
    fn default() -> Self {
        StageStats {
            counts: StageCounts::default(),
            latency: new_histogram(),
        }
    }
}

impl StageStats {
    /// Empty, with a full-range histogram (for accumulating a whole phase in constant memory).
    pub fn new_full() -> Self {
        StageStats {
            counts: StageCounts::default(),
            latency: new_full_histogram(),
        }
    }

    /// Adds a tick's recorded figures.
    pub fn add_recorded(&mut self, r: &StageRecorded) {
        self.counts.merge(&r.counts);
        r.latency.add_to(&mut self.latency);
    }

    /// Adds `o` (exact).
    pub fn merge(&mut self, o: &StageStats) {
        self.counts.merge(&o.counts);
        let _ = self.latency.add(&o.latency);
    }
}

/// A stage as the end of the results file describes it: what it was and what never reached it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageEnd {
    /// Name from the plan.
    pub name: String,
    /// Messages sent that never reached it (and did not fail before).
    pub missing: u64,
    /// Never counted missing: recorded when present.
    #[serde(default)]
    pub optional: bool,
    /// Reaching it means the message failed.
    #[serde(default)]
    pub failure: bool,
    /// The flow-control trigger of the run.
    #[serde(default)]
    pub window: bool,
}

/// Adds `recorded` into `stats`, growing it to hold the stage's index (`full`: new entries get
/// full-range histograms).
pub fn add_to_stages(stats: &mut Vec<StageStats>, recorded: &[StageRecorded], full: bool) {
    for r in recorded {
        let i = r.stage as usize;
        while stats.len() <= i {
            stats.push(if full {
                StageStats::new_full()
            } else {
                StageStats::default()
            });
        }
        stats[i].add_recorded(r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_take_and_merge_exactly() {
        let mut a = StageRecorder::default();
        for i in 0..100u64 {
            a.reached(1_000_000 + i, 10);
        }
        a.duplicate();
        a.unknown();
        a.failed();
        let ra = a.take(2).unwrap();
        assert!(a.take(2).is_none(), "take resets");
        assert_eq!(
            ra.counts,
            StageCounts {
                reached: 100,
                bytes: 1000,
                duplicates: 1,
                unknown: 1,
                failed: 1
            }
        );
        let mut stats = Vec::new();
        add_to_stages(&mut stats, &[ra.clone(), ra], true);
        assert_eq!(stats.len(), 3);
        assert!(stats[0].counts.is_empty());
        assert_eq!(stats[2].counts.reached, 200);
        assert_eq!(stats[2].latency.len(), 200);
        assert!(stats[2].latency.value_at_quantile(0.5) >= 999_000);
    }
}
