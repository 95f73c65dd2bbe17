//! Waiting until an intended send time with microsecond precision and no busy loop.
//!
//! tokio's timer has millisecond granularity, which at 50k msgs/s per producer would turn a
//! smooth schedule into one burst per millisecond. Each paced producer owns a timerfd armed at
//! the absolute CLOCK_MONOTONIC instant (the clock stamps are taken from), and awaits it through
//! the reactor; waits shorter than [`SPIN_BELOW_NS`] just yield, since a syscall round trip
//! costs about as much.

use crate::clock::now_ns;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use tokio::io::unix::AsyncFd;

/// Waits shorter than this yield to the scheduler instead of arming the timer.
pub const SPIN_BELOW_NS: u64 = 20_000;

/// A precise one-shot timer for one task.
#[derive(Debug)]
pub struct PreciseTimer {
    fd: AsyncFd<OwnedFd>,
}

impl PreciseTimer {
    /// Creates the timer; fails only if the kernel refuses a timerfd.
    pub fn new() -> std::io::Result<Self> {
        // SAFETY: plain syscall; the returned descriptor is owned below.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: we own `fd` and keep it open for as long as the AsyncFd lives.
        let fd = unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
            .map_err(std::io::Error::from)?;
        Ok(Self { fd })
    }

    /// Returns at or shortly after monotonic instant `at_ns` (immediately if it has passed).
    pub async fn wait_until(&mut self, at_ns: u64) {
        loop {
            let now = now_ns();
            if now >= at_ns {
                return;
            }
            if at_ns - now < SPIN_BELOW_NS {
                tokio::task::yield_now().await;
                continue;
            }
            let spec = libc::itimerspec {
                it_interval: libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                it_value: libc::timespec {
                    tv_sec: (at_ns / 1_000_000_000) as libc::time_t,
                    tv_nsec: (at_ns % 1_000_000_000) as libc::c_long,
                },
            };
            // SAFETY: valid fd and itimerspec; TFD_TIMER_ABSTIME uses the same clock as now_ns.
            let rc = unsafe {
                libc::timerfd_settime(
                    self.fd.as_raw_fd(),
                    libc::TFD_TIMER_ABSTIME,
                    &spec,
                    std::ptr::null_mut(),
                )
            };
            if rc < 0 {
                // Should not happen; fall back to the coarse timer rather than spin.
                tokio::time::sleep_until(crate::clock::to_instant(at_ns)).await;
                return;
            }
            match self.fd.readable().await {
                Ok(mut guard) => {
                    let mut buf = [0u8; 8];
                    // SAFETY: reading 8 bytes into our buffer from our fd.
                    let _ = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
                    guard.clear_ready();
                }
                Err(_) => {
                    tokio::time::sleep_until(crate::clock::to_instant(at_ns)).await;
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wakes_close_to_the_target() {
        let mut t = PreciseTimer::new().unwrap();
        let mut worst = 0;
        for _ in 0..20 {
            let at = now_ns() + 300_000; // 300 µs
            t.wait_until(at).await;
            let late = now_ns() - at;
            worst = worst.max(late);
        }
        // Never early (checked by construction) and not millisecond-coarse on an idle machine;
        // a generous bound keeps the test robust on a loaded one.
        assert!(worst < 50_000_000, "worst lateness {worst} ns");
    }
}
