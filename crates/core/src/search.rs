//! The capacity search's strategy: which offered rate to try next, and when the answer is
//! known.
//!
//! The question is "what is the highest rate at which every objective holds?". Rates grow
//! exponentially from a start until one fails (or the ceiling is reached), the bracket between
//! the last rate that held and the first that failed is then halved until it is narrower than
//! the precision, and the rate found is run again a few times so the answer says how sure it
//! is: a boundary that fails on a repeat moves down and is repeated anew.
//!
//! A failing step the generator itself was too busy to run honestly ends the search: above that
//! rate msgbench measures itself, not the system, and the answer is a lower bound.
//!
//! [`RateSearch`] holds no clock and runs nothing: the caller runs each [`Probe`] and reports
//! its [`StepOutcome`], so the strategy is tested against synthetic systems in microseconds.

use serde::{Deserialize, Serialize};

/// How the search is run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchSettings {
    /// The first rate tried, messages per second.
    pub start: f64,
    /// The highest rate tried: a system that holds its objectives there is reported as
    /// "at least" this.
    pub ceiling: f64,
    /// The factor between two rates of the exponential phase (2 doubles).
    pub growth: f64,
    /// The bisection ends when the bracket's width is at most this share of its lower end
    /// (0.02 = 2%).
    pub precision: f64,
    /// Extra runs at the rate found (0: none).
    pub repeats: u32,
    /// Upper bound on the steps of one search, whatever happens.
    pub max_steps: u32,
}

impl Default for SearchSettings {
    fn default() -> Self {
        Self {
            start: 1_000.0,
            ceiling: 10_000_000.0,
            growth: 2.0,
            precision: 0.02,
            repeats: 2,
            max_steps: 40,
        }
    }
}

/// Why a step is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// Exponential growth (or, after a failing start, shrinking) to find a bracket.
    Probe,
    /// Halving the bracket.
    Bisect,
    /// Running the rate found again.
    Repeat,
}

/// The next step: run the workload at `rate` messages per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Probe {
    /// Offered rate, messages per second.
    pub rate: f64,
    /// Why.
    pub kind: StepKind,
}

/// What a step showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepOutcome {
    /// Every objective held (and the rate offered was achieved).
    pub pass: bool,
    /// The generator was saturated during the step: its figures describe msgbench.
    pub generator_limited: bool,
}

/// How the search ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// The objectives: the capacity lies between the rate found and the next one up.
    Objectives,
    /// Every rate up to the ceiling held: the capacity is at least the ceiling.
    Ceiling,
    /// msgbench itself could not go faster: the capacity is at least the rate found.
    Generator,
    /// Not even the lowest rate tried held the objectives.
    NothingHeld,
    /// The step budget ran out before the bracket was narrow enough.
    Steps,
}

/// The answer so far (final once [`RateSearch::next`] returns `None`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Conclusion {
    /// The highest rate that held every objective in every run at it.
    pub capacity: Option<f64>,
    /// The lowest rate that failed (the bracket's upper end).
    pub failed_at: Option<f64>,
    /// What ended the search.
    pub limit: Limit,
    /// Runs at the capacity, and how many of them held (the first run included).
    pub runs_at_capacity: u32,
    /// See `runs_at_capacity`.
    pub held_at_capacity: u32,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Stage {
    Grow,
    Shrink,
    Bisect,
    /// Repeating `rate`; `left` runs to go.
    Repeat {
        left: u32,
    },
    Done(Limit),
}

/// The search state: feed it each step's outcome, ask it for the next step.
#[derive(Debug, Clone)]
pub struct RateSearch {
    s: SearchSettings,
    stage: Stage,
    /// Highest rate that held (its repeats included, once repeating).
    lo: Option<f64>,
    /// Lowest rate that failed.
    hi: Option<f64>,
    /// The rate of the step asked for last.
    current: f64,
    steps: u32,
    runs_at_lo: u32,
    held_at_lo: u32,
}

impl RateSearch {
    /// A search with `settings` (start ≤ ceiling, both positive; precision in (0, 1)).
    pub fn new(settings: SearchSettings) -> Self {
        let start = settings.start.min(settings.ceiling);
        Self {
            s: settings,
            stage: Stage::Grow,
            lo: None,
            hi: None,
            current: start,
            steps: 0,
            runs_at_lo: 0,
            held_at_lo: 0,
        }
    }

    /// The step to run next, or `None` once the answer is known.
    pub fn next(&self) -> Option<Probe> {
        let kind = match self.stage {
            Stage::Done(_) => return None,
            _ if self.steps >= self.s.max_steps => return None,
            Stage::Grow | Stage::Shrink => StepKind::Probe,
            Stage::Bisect => StepKind::Bisect,
            Stage::Repeat { .. } => StepKind::Repeat,
        };
        Some(Probe {
            rate: self.current,
            kind,
        })
    }

    /// Records the outcome of the step [`next`](Self::next) asked for.
    pub fn record(&mut self, outcome: StepOutcome) {
        self.steps += 1;
        let rate = self.current;
        if !outcome.pass && outcome.generator_limited && !matches!(self.stage, Stage::Repeat { .. })
        {
            self.hi = Some(rate);
            self.stage = Stage::Done(if self.lo.is_some() {
                Limit::Generator
            } else {
                Limit::NothingHeld
            });
            return;
        }
        match self.stage {
            Stage::Grow => {
                if outcome.pass {
                    self.held(rate);
                    if rate >= self.s.ceiling {
                        self.stage = Stage::Done(Limit::Ceiling);
                    } else {
                        self.current = (rate * self.s.growth).min(self.s.ceiling);
                    }
                } else {
                    self.hi = Some(rate);
                    if self.lo.is_some() {
                        self.bisect_or_repeat();
                    } else {
                        self.stage = Stage::Shrink;
                        self.shrink(rate);
                    }
                }
            }
            Stage::Shrink => {
                if outcome.pass {
                    self.held(rate);
                    self.bisect_or_repeat();
                } else {
                    self.hi = Some(rate);
                    self.shrink(rate);
                }
            }
            Stage::Bisect => {
                if outcome.pass {
                    self.held(rate);
                } else {
                    self.hi = Some(rate);
                }
                self.bisect_or_repeat();
            }
            Stage::Repeat { left } => {
                self.runs_at_lo += 1;
                if outcome.pass {
                    self.held_at_lo += 1;
                    if left <= 1 {
                        self.stage = Stage::Done(Limit::Objectives);
                    } else {
                        self.stage = Stage::Repeat { left: left - 1 };
                    }
                } else {
                    // The boundary did not hold every time: it is not the capacity. Step down
                    // by the precision and repeat there.
                    self.hi = Some(rate);
                    let lower = rate * (1.0 - self.s.precision);
                    if lower < self.s.start / self.s.growth.powi(4) {
                        self.lo = None;
                        self.stage = Stage::Done(Limit::NothingHeld);
                        return;
                    }
                    self.lo = Some(lower);
                    self.current = lower;
                    self.runs_at_lo = 0;
                    self.held_at_lo = 0;
                    // This lower rate has not run yet: it needs its first run plus the repeats.
                    self.stage = Stage::Repeat {
                        left: self.s.repeats + 1,
                    };
                }
            }
            Stage::Done(_) => {}
        }
    }

    /// A rate held: it becomes the lower end, counted as one run that held.
    fn held(&mut self, rate: f64) {
        self.lo = Some(rate);
        self.runs_at_lo = 1;
        self.held_at_lo = 1;
    }

    /// After a failing first rate: try lower rates down to start / growth⁴.
    fn shrink(&mut self, rate: f64) {
        let lower = rate / self.s.growth;
        if lower < self.s.start / self.s.growth.powi(4) {
            self.stage = Stage::Done(Limit::NothingHeld);
        } else {
            self.current = lower;
        }
    }

    /// Halves the bracket while it is wider than the precision, then repeats the lower end.
    fn bisect_or_repeat(&mut self) {
        let (Some(lo), Some(hi)) = (self.lo, self.hi) else {
            return;
        };
        if hi - lo > lo * self.s.precision {
            self.stage = Stage::Bisect;
            self.current = (lo + hi) / 2.0;
        } else if self.s.repeats == 0 {
            self.stage = Stage::Done(Limit::Objectives);
        } else {
            self.stage = Stage::Repeat {
                left: self.s.repeats,
            };
            self.current = lo;
        }
    }

    /// The answer so far.
    pub fn conclusion(&self) -> Conclusion {
        let limit = match self.stage {
            Stage::Done(l) => l,
            _ => Limit::Steps,
        };
        Conclusion {
            capacity: self.lo.filter(|_| limit != Limit::NothingHeld),
            failed_at: self.hi,
            limit,
            runs_at_capacity: self.runs_at_lo,
            held_at_capacity: self.held_at_lo,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a search against a system that holds its objectives up to `capacity` (and a
    /// generator that saturates above `generator`), returning the conclusion and the steps.
    fn against(capacity: f64, generator: f64, s: SearchSettings) -> (Conclusion, Vec<Probe>) {
        let mut search = RateSearch::new(s);
        let mut steps = Vec::new();
        while let Some(p) = search.next() {
            steps.push(p);
            search.record(StepOutcome {
                pass: p.rate <= capacity && p.rate <= generator,
                generator_limited: p.rate > generator,
            });
        }
        (search.conclusion(), steps)
    }

    #[test]
    fn finds_a_known_capacity_within_the_precision() {
        for capacity in [1_500.0, 37_000.0, 50_000.0, 123_456.0, 2_000_000.0] {
            let (c, steps) = against(capacity, f64::INFINITY, SearchSettings::default());
            assert_eq!(c.limit, Limit::Objectives, "{capacity}");
            let found = c.capacity.unwrap();
            assert!(
                found <= capacity && found >= capacity * 0.98,
                "{capacity}: {found}"
            );
            assert_eq!((c.runs_at_capacity, c.held_at_capacity), (3, 3));
            assert!(steps.len() <= 30, "{capacity}: {} steps", steps.len());
            assert_eq!(steps.last().unwrap().kind, StepKind::Repeat);
        }
    }

    #[test]
    fn a_start_that_fails_searches_downwards() {
        let (c, _) = against(300.0, f64::INFINITY, SearchSettings::default());
        assert_eq!(c.limit, Limit::Objectives);
        let found = c.capacity.unwrap();
        assert!((294.0..=300.0).contains(&found), "{found}");
        let (c, _) = against(10.0, f64::INFINITY, SearchSettings::default());
        assert_eq!((c.limit, c.capacity), (Limit::NothingHeld, None));
    }

    #[test]
    fn the_ceiling_and_the_generator_bound_the_answer() {
        let s = SearchSettings {
            ceiling: 64_000.0,
            ..Default::default()
        };
        let (c, _) = against(1e9, f64::INFINITY, s);
        assert_eq!((c.limit, c.capacity), (Limit::Ceiling, Some(64_000.0)));
        let (c, _) = against(1e9, 100_000.0, SearchSettings::default());
        assert_eq!(c.limit, Limit::Generator);
        assert_eq!(c.capacity, Some(64_000.0));
        assert_eq!(c.failed_at, Some(128_000.0));
    }

    #[test]
    fn a_boundary_that_fails_a_repeat_moves_down() {
        // Above 46k it holds only the first time a rate is run (a flaky system): the repeats
        // catch it.
        let mut search = RateSearch::new(SearchSettings::default());
        let mut runs: std::collections::HashMap<u64, u32> = Default::default();
        while let Some(p) = search.next() {
            let n = runs.entry(p.rate as u64).or_default();
            *n += 1;
            let pass = p.rate <= 46_000.0 || (p.rate <= 50_000.0 && *n == 1);
            search.record(StepOutcome {
                pass,
                generator_limited: false,
            });
        }
        let c = search.conclusion();
        assert_eq!(c.limit, Limit::Objectives);
        assert!(c.capacity.unwrap() <= 46_000.0, "{c:?}");
        assert_eq!(c.held_at_capacity, c.runs_at_capacity);
    }

    #[test]
    fn the_step_budget_is_a_hard_bound() {
        let s = SearchSettings {
            max_steps: 5,
            ..Default::default()
        };
        let (c, steps) = against(1e6, f64::INFINITY, s);
        assert_eq!(steps.len(), 5);
        assert_eq!(c.limit, Limit::Steps);
    }
}
