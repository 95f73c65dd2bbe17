//! The one clock msgbench measures with: CLOCK_MONOTONIC in nanoseconds.
//!
//! CLOCK_MONOTONIC is system-wide on Linux, so stamps written by one process and read by another
//! on the same host compare directly (producer and consumer may be different msgbench
//! processes). It is read through the vDSO: no syscall per message.
//!
//! Segments of one run may sit on different hosts, whose monotonic clocks share nothing. A
//! segmented process therefore anchors the clock to wall time once ([`anchor_to_wall`]): it
//! still ticks monotonically, but reads as Unix nanoseconds (optionally corrected by an offset
//! measured against a time reference), so stamps compare across hosts within the hosts' clock
//! error, which [`ClockState`] records.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};

/// Added to CLOCK_MONOTONIC by [`now_ns`]: 0, or the wall-clock anchor of a segmented run.
static OFFSET_NS: AtomicU64 = AtomicU64::new(0);

fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; both clocks always exist.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Monotonic nanoseconds since an arbitrary, host-wide origin (boot, on Linux), or since the
/// Unix epoch once [`anchor_to_wall`] was called.
#[inline]
pub fn now_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC).wrapping_add(OFFSET_NS.load(Ordering::Relaxed))
}

/// Wall-clock (CLOCK_REALTIME) Unix nanoseconds.
pub fn realtime_ns() -> u64 {
    read(libc::CLOCK_REALTIME)
}

/// Makes [`now_ns`] read as Unix nanoseconds plus `correction_ns` (the offset to a time
/// reference, 0 without one) from here on. Call once, before any time is taken for the run.
pub fn anchor_to_wall(correction_ns: i64) {
    // The tightest of a few paired reads (the pair straddling a preemption is discarded).
    let mut best = (u64::MAX, 0u64);
    for _ in 0..5 {
        let m1 = read(libc::CLOCK_MONOTONIC);
        let w = read(libc::CLOCK_REALTIME);
        let m2 = read(libc::CLOCK_MONOTONIC);
        if m2 - m1 < best.0 {
            best = (m2 - m1, w.wrapping_sub(m1 + (m2 - m1) / 2));
        }
    }
    OFFSET_NS.store(best.1.wrapping_add_signed(correction_ns), Ordering::Relaxed);
}

/// The raw CLOCK_MONOTONIC reading of instant `ns` of [`now_ns`] (for kernel timers, which
/// know nothing of the anchor).
#[inline]
pub fn to_monotonic(ns: u64) -> u64 {
    ns.wrapping_sub(OFFSET_NS.load(Ordering::Relaxed))
}

/// Whether [`now_ns`] reads wall time ([`anchor_to_wall`] was called).
pub fn anchored() -> bool {
    OFFSET_NS.load(Ordering::Relaxed) != 0
}

/// What the kernel says about the host's wall clock (`adjtimex`), recorded in every results
/// file so cross-host latencies can carry their uncertainty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockState {
    /// The kernel considers the clock synchronized (NTP/PTP daemon running and in sync).
    pub synchronized: bool,
    /// The kernel's estimated error, µs (meaningful when synchronized).
    pub est_error_us: u64,
    /// The kernel's maximum error, µs.
    pub max_error_us: u64,
}

impl ClockState {
    /// Reads the state with `adjtimex` (read-only: no mode bits set).
    pub fn read() -> Option<ClockState> {
        // SAFETY: a zeroed timex with modes 0 asks only for a read; the kernel fills it in.
        let mut tx: libc::timex = unsafe { std::mem::zeroed() };
        let state = unsafe { libc::adjtimex(&mut tx) };
        if state < 0 {
            return None;
        }
        Some(ClockState {
            synchronized: state != libc::TIME_ERROR && tx.status & libc::STA_UNSYNC == 0,
            est_error_us: tx.esterror.max(0) as u64,
            max_error_us: tx.maxerror.max(0) as u64,
        })
    }

    /// The bound this host's clock adds to a cross-host latency, µs: the estimated error when
    /// synchronized, else the maximum error.
    pub fn bound_us(&self) -> u64 {
        if self.synchronized {
            self.est_error_us
        } else {
            self.max_error_us
        }
    }
}

/// Wall-clock time as Unix milliseconds, for the results file's human-readable timestamps only
/// (never for latency).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Converts a monotonic nanosecond instant into a tokio `Instant`, for sleeping until it.
pub fn to_instant(target_ns: u64) -> tokio::time::Instant {
    let now_ns = now_ns();
    let now = tokio::time::Instant::now();
    if target_ns >= now_ns {
        now + std::time::Duration::from_nanos(target_ns - now_ns)
    } else {
        now.checked_sub(std::time::Duration::from_nanos(now_ns - target_ns))
            .unwrap_or(now)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn monotonic() {
        let a = super::now_ns();
        let b = super::now_ns();
        assert!(b >= a);
        assert!(a > 0);
    }

    #[test]
    fn kernel_clock_state_reads() {
        let s = super::ClockState::read().expect("adjtimex");
        assert!(s.max_error_us >= s.est_error_us || !s.synchronized);
    }
}
