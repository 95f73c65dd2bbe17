//! When connection attempts start (`[connections] arrival`, `--connect-arrival`): evenly at the
//! connect rate, or as a Poisson process of that rate, the way independent devices switch on
//! (exponential gaps, so arrivals bunch and thin out as in the field).
//!
//! Both schedules count from the start, so a slow attempt never pushes the ones after it back.

use crate::rng::Rng;
use crate::scenario::Arrival;

/// The start times of a workload's attempts, one after the other.
pub(super) struct ArrivalSchedule {
    /// Mean nanoseconds between starts (`None`: all at once, as the concurrency allows).
    gap_ns: Option<f64>,
    /// Poisson: the random gaps' source and the next start, ns from `t0`.
    poisson: Option<(Rng, f64)>,
}

impl ArrivalSchedule {
    /// Starts at `rate` per second (`None`: at once) by `arrival`; `seed` fixes Poisson's draws.
    pub fn new(rate: Option<f64>, arrival: Arrival, seed: u64) -> ArrivalSchedule {
        let gap_ns = rate.map(|r| 1e9 / r);
        let poisson = match (arrival, gap_ns) {
            (Arrival::Poisson, Some(_)) => Some((Rng::new(seed), 0.0)),
            _ => None,
        };
        ArrivalSchedule { gap_ns, poisson }
    }

    /// When attempt `n` (the next one) is due, ns from `t0` (0: now).
    pub fn due(&self, n: u64) -> u64 {
        match (&self.poisson, self.gap_ns) {
            (Some((_, next)), _) => *next as u64,
            (None, Some(g)) => (n as f64 * g) as u64,
            (None, None) => 0,
        }
    }

    /// The attempt that was due has started: Poisson draws the gap to the next one.
    pub fn started(&mut self) {
        if let (Some((rng, next)), Some(g)) = (self.poisson.as_mut(), self.gap_ns) {
            *next += -rng.next_f64_open0().ln() * g;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The gaps between starts: their mean and their coefficient of variation.
    fn gaps(arrival: Arrival) -> (f64, f64) {
        let mut s = ArrivalSchedule::new(Some(1000.0), arrival, 7);
        let mut last = 0u64;
        let mut g = Vec::new();
        for n in 0..20_000 {
            let due = s.due(n);
            if n > 0 {
                g.push((due - last) as f64);
            }
            last = due;
            s.started();
        }
        let mean = g.iter().sum::<f64>() / g.len() as f64;
        let var = g.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / g.len() as f64;
        (mean, var.sqrt() / mean)
    }

    #[test]
    fn constant_arrivals_are_even_and_poisson_ones_exponential() {
        let (mean, cv) = gaps(Arrival::Constant);
        assert!((mean - 1e6).abs() < 1.0, "{mean}");
        assert!(cv < 1e-6, "{cv}");
        // Exponential gaps: the mean is 1/rate and the standard deviation equals it.
        let (mean, cv) = gaps(Arrival::Poisson);
        assert!((mean / 1e6 - 1.0).abs() < 0.03, "{mean}");
        assert!((cv - 1.0).abs() < 0.05, "{cv}");
    }

    #[test]
    fn without_a_rate_everything_is_due_at_once() {
        let mut s = ArrivalSchedule::new(None, Arrival::Poisson, 1);
        s.started();
        assert_eq!(s.due(5), 0);
    }
}
