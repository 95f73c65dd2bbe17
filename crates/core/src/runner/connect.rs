//! Connecting a run's clients, and the clock arithmetic of its intervals.

use super::outcome::RunError;
use super::workers::Workers;
use crate::driver::{Driver, DriverError};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::task::JoinSet;

/// CPU seconds this process has used so far (user + system, all threads).
pub(super) fn process_cpu_s() -> f64 {
    // SAFETY: getrusage fills the struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The interval that contains the instant just before `at` (so a phase ending exactly on a tick
/// is credited to the interval it ends), never one already emitted.
pub(super) fn interval_before(at: u64, t0: u64, tick_ns: u64, emitted: Option<u64>) -> u64 {
    let k = at.saturating_sub(1).saturating_sub(t0) / tick_ns;
    match emitted {
        Some(e) if k <= e => e + 1,
        _ => k,
    }
}

pub(super) fn secs(t0: u64, now: u64) -> f64 {
    (now as f64 - t0 as f64) / 1e9
}

/// Connects one client per spec, concurrently, each on the worker it will run on; returns the
/// clients in spec order with their workers. The first failure (or timeout) fails the run.
pub(super) async fn connect_all<D, S, T, F, Fut>(
    workers: &mut Workers,
    specs: impl Iterator<Item = S>,
    role: &'static str,
    timeout: Duration,
    connect: F,
    driver: &Arc<D>,
) -> Result<(Vec<T>, Vec<Handle>), RunError>
where
    D: Driver,
    S: Send + 'static,
    T: Send + 'static,
    F: Fn(Arc<D>, S) -> Fut,
    Fut: Future<Output = Result<T, DriverError>> + Send + 'static,
{
    let mut set = JoinSet::new();
    let mut homes = Vec::new();
    // A quarter more than the driver's own connect and handshake timeouts, so the driver's
    // reason ("no answer to the AMQP handshake") is the one reported when both would fire.
    let outer = timeout + timeout / 4;
    for (id, spec) in specs.enumerate() {
        let home = workers.next_handle();
        let attempt = connect(driver.clone(), spec);
        // The timer is created on the worker, with the connection.
        set.spawn_on(
            async move { (id, tokio::time::timeout(outer, attempt).await) },
            &home,
        );
        homes.push(home);
    }
    let mut out: Vec<(usize, T)> = Vec::with_capacity(set.len());
    while let Some(joined) = set.join_next().await {
        let (id, r) =
            joined.map_err(|e| RunError::Unsupported(format!("connect task failed: {e}")))?;
        let id32 = id as u32;
        match r {
            Ok(Ok(v)) => out.push((id, v)),
            Ok(Err(error)) => {
                return Err(RunError::Connect {
                    role,
                    id: id32,
                    error,
                });
            }
            Err(_) => {
                return Err(RunError::Connect {
                    role,
                    id: id32,
                    // The driver's own connect timeout (same length) usually fires first; this
                    // one ends a handshake that hangs after the socket opened. Either way the
                    // user reads "cannot connect".
                    error: DriverError::Timeout(format!(
                        "cannot connect: no connection and handshake within {timeout:?}"
                    )),
                });
            }
        }
    }
    out.sort_by_key(|(id, _)| *id);
    Ok((out.into_iter().map(|(_, v)| v).collect(), homes))
}
