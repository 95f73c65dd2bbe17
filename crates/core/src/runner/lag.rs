//! Event-loop lag: how late a timer fires on the event loops producers and consumers run on.
//!
//! A generator can be the bottleneck without its CPU at 100%: a task that hogs its event loop,
//! or threads the kernel does not schedule (a broker on the same machine taking the cores),
//! delays every other task on that loop, and with it sends and receives. A probe on each event
//! loop sleeps [`PROBE_EVERY`] over and over and records how much later than asked it woke; the
//! runner takes the worst since the last interval ([`take_max_ns`]) into each interval record,
//! where reports judge it (`loop_lag_ns`).
//!
//! One process-wide maximum (an atomic) serves every probe: there is one run per process at a
//! time, and the report wants the worst loop, not each one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

/// How often each probe wakes.
pub const PROBE_EVERY: Duration = Duration::from_millis(10);

static MAX_LAG_NS: AtomicU64 = AtomicU64::new(0);

/// The worst lateness seen since the last call, ns (and starts a new window).
pub fn take_max_ns() -> u64 {
    MAX_LAG_NS.swap(0, Ordering::Relaxed)
}

/// Starts a probe on the event loop `handle` drives; abort the handle to stop it.
pub fn spawn_probe(handle: &Handle) -> JoinHandle<()> {
    handle.spawn(async {
        loop {
            let asked = Instant::now() + PROBE_EVERY;
            tokio::time::sleep_until(asked.into()).await;
            let late = Instant::now().saturating_duration_since(asked);
            MAX_LAG_NS.fetch_max(late.as_nanos() as u64, Ordering::Relaxed);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocked_loop_shows_as_lag() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let probe = spawn_probe(&Handle::current());
            tokio::time::sleep(Duration::from_millis(30)).await;
            take_max_ns();
            // Hog the loop for 80 ms: the probe wakes about that late.
            std::thread::sleep(Duration::from_millis(80));
            tokio::time::sleep(Duration::from_millis(20)).await;
            let lag = take_max_ns();
            assert!(lag >= 60_000_000, "lag {lag} ns");
            probe.abort();
        });
    }
}
