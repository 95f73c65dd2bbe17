//! Pacing: when each message is *intended* to be sent.
//!
//! A [`Pacer`] is pure: it turns a message index into an offset from the start of the run, and
//! never reads a clock. The producer loop waits until that intended time, stamps it into the
//! message and measures every latency from it, so a send that falls behind schedule still counts
//! from when it should have gone (coordinated omission is corrected; nothing sleeps and then
//! bursts to catch up unnoticed: late sends are counted).

use crate::rng::Rng;
use crate::units::serde_duration;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One step of a [`RateShape::Steps`] profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Messages per second (all producers together) during this step.
    pub rate: f64,
    /// How long the step lasts.
    #[serde(with = "serde_duration")]
    pub duration: Duration,
}

/// The shape of the offered load, in messages per second for all producers together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "shape", rename_all = "snake_case", deny_unknown_fields)]
pub enum RateShape {
    /// As fast as the system takes them (closed loop; bounded by `max_in_flight` where the
    /// protocol acknowledges).
    Unlimited,
    /// Evenly spaced sends.
    Constant {
        /// Messages per second.
        rate: f64,
    },
    /// Poisson arrivals (exponential gaps) with the given mean rate.
    Poisson {
        /// Mean messages per second.
        rate: f64,
    },
    /// A linear ramp from `from` to `to` over `over`, then `to` for the rest of the run.
    Ramp {
        /// Starting rate.
        from: f64,
        /// Final rate.
        to: f64,
        /// Ramp length.
        #[serde(with = "serde_duration")]
        over: Duration,
    },
    /// Consecutive constant-rate steps; the last rate holds after the last step.
    Steps {
        /// The steps, in order.
        steps: Vec<Step>,
    },
    /// `size` messages at the same intended instant, every `every`.
    Burst {
        /// Messages per burst (all producers together).
        size: u64,
        /// Time between bursts.
        #[serde(with = "serde_duration")]
        every: Duration,
    },
}

impl RateShape {
    /// Checks the numbers make sense; the error says what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        let pos = |r: f64, what: &str| {
            if r.is_finite() && r > 0.0 {
                Ok(())
            } else {
                Err(format!("{what} must be a positive number, got {r}"))
            }
        };
        let nonneg = |r: f64, what: &str| {
            if r.is_finite() && r >= 0.0 {
                Ok(())
            } else {
                Err(format!("{what} must be zero or more, got {r}"))
            }
        };
        match self {
            RateShape::Unlimited => Ok(()),
            RateShape::Constant { rate } | RateShape::Poisson { rate } => pos(*rate, "rate"),
            RateShape::Ramp { from, to, over } => {
                nonneg(*from, "ramp `from`")?;
                pos(*to, "ramp `to`")?;
                if over.is_zero() {
                    Err("ramp `over` must be longer than zero".into())
                } else {
                    Ok(())
                }
            }
            RateShape::Steps { steps } => {
                if steps.is_empty() {
                    return Err("steps needs at least one step".into());
                }
                for (i, s) in steps.iter().enumerate() {
                    nonneg(s.rate, &format!("steps[{i}].rate"))?;
                }
                if steps.last().is_some_and(|s| s.rate == 0.0) {
                    return Err("the last step's rate must be above zero (it holds for the rest of the run)".into());
                }
                Ok(())
            }
            RateShape::Burst { size, every } => {
                if *size == 0 || every.is_zero() {
                    Err("burst needs size > 0 and every > 0".into())
                } else {
                    Ok(())
                }
            }
        }
    }

    /// The offered rate (all producers) at `t` into the run, for display; `None` when unlimited.
    pub fn rate_at(&self, t: Duration) -> Option<f64> {
        let t = t.as_secs_f64();
        Some(match self {
            RateShape::Unlimited => return None,
            RateShape::Constant { rate } | RateShape::Poisson { rate } => *rate,
            RateShape::Ramp { from, to, over } => {
                let f = (t / over.as_secs_f64()).min(1.0);
                from + (to - from) * f
            }
            RateShape::Steps { steps } => {
                let mut start = 0.0;
                for s in steps {
                    if t < start + s.duration.as_secs_f64() {
                        return Some(s.rate);
                    }
                    start += s.duration.as_secs_f64();
                }
                steps.last().map(|s| s.rate).unwrap_or(0.0)
            }
            RateShape::Burst { size, every } => *size as f64 / every.as_secs_f64(),
        })
    }
}

/// The schedule of one producer: its share of the total rate, offset so that producers
/// interleave instead of sending in lock-step.
#[derive(Debug, Clone)]
pub struct Pacer {
    shape: RateShape,
    /// Number of producers sharing the rate.
    producers: f64,
    /// This producer's index among them.
    index: u64,
    n: u64,
    last_ns: f64,
    rng: Rng,
    steps: StepCursor,
}

/// Where a [`RateShape::Steps`] schedule is: current step, its start (s) and the messages due
/// before it.
#[derive(Debug, Clone, Default)]
struct StepCursor {
    step: usize,
    start_s: f64,
    first_n: f64,
}

impl StepCursor {
    fn time_of(&mut self, global: f64, steps: &[Step]) -> f64 {
        loop {
            let s = &steps[self.step.min(steps.len() - 1)];
            let last = self.step >= steps.len() - 1;
            let capacity = s.rate * s.duration.as_secs_f64();
            if last || global < self.first_n + capacity {
                return self.start_s + (global - self.first_n) / s.rate;
            }
            self.first_n += capacity;
            self.start_s += s.duration.as_secs_f64();
            self.step += 1;
        }
    }
}

impl Pacer {
    /// The pacer of producer `index` out of `producers`, all sharing `shape`.
    pub fn new(shape: RateShape, producers: u32, index: u32, seed: u64) -> Self {
        Self {
            shape,
            producers: producers.max(1) as f64,
            index: index as u64,
            n: 0,
            last_ns: 0.0,
            rng: Rng::new(seed ^ ((index as u64) << 32)),
            steps: StepCursor::default(),
        }
    }

    /// Whether this pacer imposes a schedule at all.
    pub fn is_unlimited(&self) -> bool {
        matches!(self.shape, RateShape::Unlimited)
    }

    /// Intended offset (ns from the start of the run) of this producer's next message, or `None`
    /// when unlimited (send now).
    pub fn next_offset_ns(&mut self) -> Option<u64> {
        let n = self.n as f64;
        let p = self.producers;
        // Producer i's k-th message is the (k * P + i)-th of the interleaved total schedule.
        let global = n * p + self.index as f64;
        let secs = match &self.shape {
            RateShape::Unlimited => return None,
            RateShape::Constant { rate } => global / rate,
            RateShape::Poisson { rate } => {
                let gap = -self.rng.next_f64_open0().ln() / (rate / p);
                self.last_ns += gap * 1e9;
                self.n += 1;
                return Some(self.last_ns as u64);
            }
            RateShape::Ramp { from, to, over } => ramp_time(global, *from, *to, over.as_secs_f64()),
            RateShape::Steps { steps } => self.steps.time_of(global, steps),
            RateShape::Burst { size, every } => {
                let burst = (global / *size as f64).floor();
                burst * every.as_secs_f64()
            }
        };
        self.n += 1;
        Some((secs * 1e9).round() as u64)
    }
}

/// Time at which the `n`-th message (0-based, all producers) is due under a linear ramp.
/// Messages sent by time t: N(t) = a t + (b - a) t² / (2T) for t <= T, solved for t.
fn ramp_time(n: f64, a: f64, b: f64, t_ramp: f64) -> f64 {
    let total_ramp = (a + b) / 2.0 * t_ramp;
    if n >= total_ramp {
        return t_ramp + (n - total_ramp) / b;
    }
    let k = (b - a) / t_ramp; // acceleration, msgs/s²
    if k.abs() < 1e-12 {
        return n / a;
    }
    let disc = (a * a + 2.0 * k * n).max(0.0);
    (-a + disc.sqrt()) / k
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets(shape: RateShape, producers: u32, index: u32, n: usize) -> Vec<u64> {
        let mut p = Pacer::new(shape, producers, index, 42);
        (0..n).map(|_| p.next_offset_ns().unwrap()).collect()
    }

    #[test]
    fn constant_rate_interleaves_producers() {
        // 1000 msg/s over 2 producers: producer 0 at 0, 2, 4 ms; producer 1 at 1, 3, 5 ms.
        let a = offsets(RateShape::Constant { rate: 1000.0 }, 2, 0, 3);
        let b = offsets(RateShape::Constant { rate: 1000.0 }, 2, 1, 3);
        assert_eq!(a, vec![0, 2_000_000, 4_000_000]);
        assert_eq!(b, vec![1_000_000, 3_000_000, 5_000_000]);
    }

    #[test]
    fn unlimited_has_no_schedule() {
        let mut p = Pacer::new(RateShape::Unlimited, 1, 0, 1);
        assert!(p.is_unlimited());
        assert_eq!(p.next_offset_ns(), None);
    }

    #[test]
    fn poisson_mean_rate_is_close() {
        let o = offsets(RateShape::Poisson { rate: 10_000.0 }, 1, 0, 100_000);
        let secs = *o.last().unwrap() as f64 / 1e9;
        let rate = 100_000.0 / secs;
        assert!((rate - 10_000.0).abs() < 200.0, "rate {rate}");
        assert!(o.windows(2).all(|w| w[1] >= w[0]));
    }

    #[test]
    fn ramp_reaches_the_expected_count() {
        // 0 -> 1000 msg/s over 10 s sends 5000 messages in the ramp, then 1000/s.
        let shape = RateShape::Ramp {
            from: 0.0,
            to: 1000.0,
            over: Duration::from_secs(10),
        };
        let o = offsets(shape, 1, 0, 6001);
        let at_5000 = o[5000] as f64 / 1e9;
        assert!((at_5000 - 10.0).abs() < 0.01, "{at_5000}");
        let at_6000 = o[6000] as f64 / 1e9;
        assert!((at_6000 - 11.0).abs() < 0.01, "{at_6000}");
        // Half-way through the ramp in time, a quarter of the ramp's messages are due.
        let at_1250 = o[1250] as f64 / 1e9;
        assert!((at_1250 - 5.0).abs() < 0.01, "{at_1250}");
    }

    #[test]
    fn steps_switch_rates() {
        let shape = RateShape::Steps {
            steps: vec![
                Step {
                    rate: 100.0,
                    duration: Duration::from_secs(1),
                },
                Step {
                    rate: 1000.0,
                    duration: Duration::from_secs(1),
                },
            ],
        };
        let o = offsets(shape, 1, 0, 1200);
        assert_eq!(o[99], 990_000_000);
        assert_eq!(o[100], 1_000_000_000);
        assert_eq!(o[101], 1_001_000_000);
        // After the last step its rate holds.
        assert_eq!(o[1100], 2_000_000_000);
    }

    #[test]
    fn bursts_share_an_instant() {
        let shape = RateShape::Burst {
            size: 3,
            every: Duration::from_millis(100),
        };
        let o = offsets(shape, 1, 0, 7);
        assert_eq!(
            o,
            vec![0, 0, 0, 100_000_000, 100_000_000, 100_000_000, 200_000_000]
        );
    }

    #[test]
    fn validation_explains() {
        assert!(RateShape::Constant { rate: 0.0 }.validate().is_err());
        assert!(RateShape::Steps { steps: vec![] }.validate().is_err());
        assert!(
            RateShape::Burst {
                size: 0,
                every: Duration::from_secs(1)
            }
            .validate()
            .is_err()
        );
        assert!(RateShape::Poisson { rate: 5.0 }.validate().is_ok());
    }
}
