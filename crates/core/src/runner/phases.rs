//! The phase machine of a message run: warm-up → measure → drain, and the instants that move it
//! on.
//!
//! It reads no clock: every method takes `now` (monotonic ns), so the coordinator feeds it the
//! real clock and its tests feed it whatever instants they need, deterministically. What it
//! cannot know (the measure phase's work is done, a stop was asked for) is passed in; what the
//! coordinator must do at a change (sample CPU, close the phase's totals, tell the tasks) is
//! left to the coordinator, which gets a [`Change`] saying what changed and when.

use crate::scenario::Measure;
use msgbench_metrics::Phase;
use std::time::Duration;

/// The longest drain after an interrupt: the user asked to stop, so the run does not wait the
/// whole drain time-out for stragglers.
pub(super) const INTERRUPTED_DRAIN: Duration = Duration::from_secs(2);

/// How often a draining coordinator looks at its counts (deliveries arrive between its wakes).
const DRAIN_POLL_NS: u64 = 5_000_000;

/// One phase change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Change {
    /// The phase that ended.
    pub from: Phase,
    /// The phase that began.
    pub to: Phase,
    /// The boundary between them, as the results give it: the scheduled end of a timed phase
    /// (even if the coordinator saw it a little later), else the instant it was seen.
    pub at: u64,
}

/// Where a message run is in its phases.
#[derive(Debug)]
pub(super) struct Phases {
    t0: u64,
    warmup_end: u64,
    /// `None`: a count-bounded run, whose measure phase ends when its work is done.
    measure_end: Option<u64>,
    drain: Duration,
    phase: Phase,
    /// When the drain gives up (set when it begins).
    drain_deadline: Option<u64>,
    /// When each phase began, oldest first.
    began: Vec<(u64, Phase)>,
}

impl Phases {
    /// The phases of a run whose load starts at `t0`: `warmup`, then `measure` (a duration or a
    /// message count), then a drain of at most `drain`.
    pub fn new(t0: u64, warmup: Duration, measure: &Measure, drain: Duration) -> Phases {
        let warmup_end = t0 + warmup.as_nanos() as u64;
        let measure_end = match measure {
            Measure::Duration(d) => Some(warmup_end + d.as_nanos() as u64),
            Measure::Messages(_) => None,
        };
        let first = if warmup.is_zero() {
            Phase::Measure
        } else {
            Phase::Warmup
        };
        Phases {
            t0,
            warmup_end,
            measure_end,
            drain,
            phase: first,
            drain_deadline: None,
            began: vec![(t0, first)],
        }
    }

    /// The phase the run is in.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The phase the run started in (measure when there is no warm-up).
    pub fn first(&self) -> Phase {
        self.began[0].1
    }

    /// When the warm-up ends (`t0` without one).
    pub fn warmup_end(&self) -> u64 {
        self.warmup_end
    }

    /// When a timed measure phase ends (`None` for a count-bounded run).
    pub fn measure_end(&self) -> Option<u64> {
        self.measure_end
    }

    /// When the drain gives up, once it has begun.
    pub fn drain_deadline(&self) -> Option<u64> {
        self.drain_deadline
    }

    /// The phase in force just before `end`: an interval ending at `end` is credited to it.
    pub fn phase_before(&self, end: u64) -> Phase {
        self.began
            .iter()
            .rev()
            .find(|(start, _)| *start < end)
            .map_or(self.phase, |(_, p)| *p)
    }

    /// Takes the change due at `now`, if any: the warm-up ends at its time (or at once, into the
    /// drain, when `interrupted`); the measure phase ends at its time, when `done` (its message
    /// quota sent, every producer stopped), or when `interrupted`. Call until it returns `None`:
    /// a late look may find two changes due.
    pub fn advance(&mut self, now: u64, done: bool, interrupted: bool) -> Option<Change> {
        let (to, at) = match self.phase {
            Phase::Warmup if now >= self.warmup_end => (Phase::Measure, self.warmup_end),
            Phase::Warmup if interrupted => (Phase::Drain, now),
            Phase::Measure if done || interrupted || self.measure_end.is_some_and(|e| now >= e) => {
                (Phase::Drain, self.measure_end.map_or(now, |e| e.min(now)))
            }
            _ => return None,
        };
        if to == Phase::Drain {
            let drain = if interrupted {
                self.drain.min(INTERRUPTED_DRAIN)
            } else {
                self.drain
            };
            self.drain_deadline = Some(now + drain.as_nanos() as u64);
        }
        let change = Change {
            from: self.phase,
            to,
            at,
        };
        self.phase = to;
        self.began.push((at, to));
        Some(change)
    }

    /// The next instant at which [`Phases::advance`] may have something to do, or the drain's
    /// next look at the counts.
    pub fn next_due(&self, now: u64) -> u64 {
        match self.phase {
            Phase::Warmup => self.warmup_end,
            Phase::Measure => self.measure_end.unwrap_or(u64::MAX),
            Phase::Drain => now + DRAIN_POLL_NS,
        }
    }

    /// Seconds from the load's start to `at`.
    pub fn secs(&self, at: u64) -> f64 {
        super::secs(self.t0, at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    const T0: u64 = 100 * S;

    fn timed(warmup: u64, measure: u64, drain: u64) -> Phases {
        Phases::new(
            T0,
            Duration::from_secs(warmup),
            &Measure::Duration(Duration::from_secs(measure)),
            Duration::from_secs(drain),
        )
    }

    #[test]
    fn a_timed_run_moves_on_at_its_boundaries() {
        let mut p = timed(1, 10, 5);
        assert_eq!(p.phase(), Phase::Warmup);
        assert_eq!(p.next_due(T0), T0 + S);
        assert_eq!(p.advance(T0 + S / 2, false, false), None);
        // Seen 3 ms late, the warm-up still ends at its scheduled instant.
        let late = T0 + S + 3_000_000;
        assert_eq!(
            p.advance(late, false, false),
            Some(Change {
                from: Phase::Warmup,
                to: Phase::Measure,
                at: T0 + S
            })
        );
        assert_eq!(p.advance(late, false, false), None);
        assert_eq!(p.next_due(late), T0 + 11 * S);
        let end = T0 + 11 * S + 1_000;
        assert_eq!(
            p.advance(end, false, false),
            Some(Change {
                from: Phase::Measure,
                to: Phase::Drain,
                at: T0 + 11 * S
            })
        );
        assert_eq!(p.drain_deadline(), Some(end + 5 * S));
        assert_eq!(p.next_due(end), end + DRAIN_POLL_NS);
        assert_eq!(
            p.advance(end + 10 * S, true, true),
            None,
            "the drain is last"
        );
    }

    #[test]
    fn a_late_look_takes_both_changes_due() {
        let mut p = timed(1, 1, 5);
        let now = T0 + 3 * S;
        assert_eq!(
            p.advance(now, false, false).map(|c| c.to),
            Some(Phase::Measure)
        );
        let c = p.advance(now, false, false).unwrap();
        assert_eq!((c.to, c.at), (Phase::Drain, T0 + 2 * S));
        assert_eq!(p.phase_before(T0 + S), Phase::Warmup);
        assert_eq!(p.phase_before(T0 + S + 1), Phase::Measure);
        assert_eq!(p.phase_before(T0 + 2 * S + 1), Phase::Drain);
    }

    #[test]
    fn a_count_bounded_run_measures_until_its_work_is_done() {
        let mut p = Phases::new(
            T0,
            Duration::ZERO,
            &Measure::Messages(1_000),
            Duration::from_secs(5),
        );
        assert_eq!((p.first(), p.phase()), (Phase::Measure, Phase::Measure));
        assert_eq!(p.next_due(T0), u64::MAX, "no time ends it");
        assert_eq!(p.advance(T0 + 3_600 * S, false, false), None);
        let c = p.advance(T0 + 3_600 * S, true, false).unwrap();
        assert_eq!(
            (c.from, c.to, c.at),
            (Phase::Measure, Phase::Drain, T0 + 3_600 * S)
        );
        assert_eq!(p.drain_deadline(), Some(T0 + 3_605 * S));
    }

    #[test]
    fn an_interrupt_drains_at_once_and_briefly() {
        // In the warm-up: straight to the drain, no measure phase.
        let mut p = timed(10, 10, 30);
        let now = T0 + 4 * S;
        let c = p.advance(now, false, true).unwrap();
        assert_eq!((c.from, c.to, c.at), (Phase::Warmup, Phase::Drain, now));
        assert_eq!(p.drain_deadline(), Some(now + 2 * S), "capped at 2 s");
        // In the measure phase; a drain shorter than the cap keeps its length.
        let mut p = timed(0, 10, 1);
        let now = T0 + 4 * S;
        let c = p.advance(now, false, true).unwrap();
        assert_eq!((c.from, c.to, c.at), (Phase::Measure, Phase::Drain, now));
        assert_eq!(p.drain_deadline(), Some(now + S));
    }

    #[test]
    fn a_run_whose_producers_stopped_early_drains_early() {
        let mut p = timed(0, 10, 5);
        let now = T0 + 2 * S;
        let c = p.advance(now, true, false).unwrap();
        assert_eq!(
            (c.to, c.at),
            (Phase::Drain, now),
            "ends when seen, not at 10 s"
        );
    }
}
