//! The one clock msgbench measures with: CLOCK_MONOTONIC in nanoseconds.
//!
//! CLOCK_MONOTONIC is system-wide on Linux, so stamps written by one process and read by another
//! on the same host compare directly (producer and consumer may be different msgbench
//! processes). It is read through the vDSO: no syscall per message.

/// Monotonic nanoseconds since an arbitrary, host-wide origin (boot, on Linux).
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
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
}
