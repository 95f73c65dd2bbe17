//! State shared between the coordinator and the tasks: read with relaxed atomics on the hot
//! path (one load per message), written only by the coordinator.

use msgbench_metrics::Phase;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

/// The run's phase and stop flags.
#[derive(Debug)]
pub struct RunState {
    phase: AtomicU8,
    stop_producers: AtomicBool,
    stop_consumers: AtomicBool,
    /// Monotonic ns after which producers stop waiting for outstanding acks.
    drain_deadline_ns: AtomicU64,
    /// Known phase boundaries (monotonic ns), so every task switches phase at exactly the same
    /// instant instead of when it notices the coordinator's flag.
    warmup_end_ns: AtomicU64,
    measure_end_ns: AtomicU64,
}

impl Default for RunState {
    fn default() -> Self {
        Self {
            phase: AtomicU8::new(0),
            stop_producers: AtomicBool::new(false),
            stop_consumers: AtomicBool::new(false),
            drain_deadline_ns: AtomicU64::new(u64::MAX),
            warmup_end_ns: AtomicU64::new(0),
            measure_end_ns: AtomicU64::new(u64::MAX),
        }
    }
}

impl RunState {
    /// Current phase.
    #[inline]
    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Relaxed) {
            0 => Phase::Warmup,
            1 => Phase::Measure,
            _ => Phase::Drain,
        }
    }

    /// The phase at monotonic instant `now`: the scheduled boundaries decide, unless the
    /// coordinator already moved on (a count-bounded measure phase, an interrupt).
    #[inline]
    pub fn phase_at(&self, now: u64) -> Phase {
        let flagged = self.phase();
        if flagged == Phase::Drain || now >= self.measure_end_ns.load(Ordering::Relaxed) {
            Phase::Drain
        } else if now < self.warmup_end_ns.load(Ordering::Relaxed) {
            Phase::Warmup
        } else {
            Phase::Measure
        }
    }

    /// Sets the scheduled boundaries (`u64::MAX` for a measure phase that ends on a count).
    pub fn set_boundaries(&self, warmup_end_ns: u64, measure_end_ns: u64) {
        self.warmup_end_ns.store(warmup_end_ns, Ordering::Relaxed);
        self.measure_end_ns.store(measure_end_ns, Ordering::Relaxed);
    }

    /// When `p` is scheduled to end (monotonic ns); `u64::MAX` when that is not known in
    /// advance (the drain, a measure phase that ends on a count).
    pub fn scheduled_end_ns(&self, p: Phase) -> u64 {
        match p {
            Phase::Warmup => self.warmup_end_ns.load(Ordering::Relaxed),
            Phase::Measure => self.measure_end_ns.load(Ordering::Relaxed),
            Phase::Drain => u64::MAX,
        }
    }

    /// Moves to `p`.
    pub fn set_phase(&self, p: Phase) {
        let v = match p {
            Phase::Warmup => 0,
            Phase::Measure => 1,
            Phase::Drain => 2,
        };
        self.phase.store(v, Ordering::Relaxed);
    }

    /// Producers must stop sending.
    #[inline]
    pub fn producers_stopped(&self) -> bool {
        self.stop_producers.load(Ordering::Relaxed)
    }

    /// Tells producers to stop sending.
    pub fn stop_producers(&self) {
        self.stop_producers.store(true, Ordering::Relaxed);
    }

    /// Consumers must finish.
    #[inline]
    pub fn consumers_stopped(&self) -> bool {
        self.stop_consumers.load(Ordering::Relaxed)
    }

    /// Tells consumers to finish.
    pub fn stop_consumers(&self) {
        self.stop_consumers.store(true, Ordering::Relaxed);
    }

    /// When producers give up on outstanding acks.
    pub fn drain_deadline_ns(&self) -> u64 {
        self.drain_deadline_ns.load(Ordering::Relaxed)
    }

    /// Sets when producers give up on outstanding acks.
    pub fn set_drain_deadline_ns(&self, ns: u64) {
        self.drain_deadline_ns.store(ns, Ordering::Relaxed);
    }
}

/// A counter written by one task and read by the coordinator, alone on its cache line so the
/// writer never contends with anyone.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct OwnedCounter(AtomicU64);

impl OwnedCounter {
    /// Publishes the owner's current value.
    #[inline]
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }

    /// Reads the last published value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}
