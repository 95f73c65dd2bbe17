//! Connecting a run's clients, and the clock arithmetic of its intervals.

use super::outcome::{EventKind, RunError};
use super::workers::Workers;
use crate::driver::{Driver, DriverError};
use msgbench_metrics::ConnectFailure;
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

/// How one role's clients connect: all at once, or paced and patient.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Ramp {
    /// Attempts started per second; `None`: all at once.
    pub rate: Option<f64>,
    /// Once a client of the role has connected (so the target is right and reachable), a client
    /// whose attempt fails is counted and retried with backoff instead of failing the run, until
    /// the ramp's last start plus `patience`; one still failing then is reported as never
    /// connected. Before any success a failure fails the run as soon as no other attempt is in
    /// flight (a wrong URL or a broker that is down is a clear error, not a long wait), except
    /// one that came after the connection opened (a subscription cut short), which is retried
    /// twice first. Attempts in flight are waited for: the first client may still be in its
    /// handshake (slow under load) when the second is refused, and its success settles that
    /// the target is right.
    pub patience: Option<Duration>,
}

/// How a run's consumers connect: at the plan's ramp rate, and patient (three connect time-outs
/// past the last start) unless the run is one segment of several, whose account of receivers
/// the other segments could not see change.
pub(super) fn consumer_ramp(plan: &crate::scenario::RunPlan) -> Ramp {
    Ramp {
        rate: plan.consumer_ramp.rate,
        patience: plan.segment.is_none().then_some(plan.connect_timeout * 3),
    }
}

/// Descriptors for a message run's clients (one each, and some for the process's own files):
/// the open-file limit is raised to what they need when the hard limit allows. Beyond the hard
/// limit, the consumers of a driver that can hold them in io_uring tables do so (true: the
/// consumer specs must say `fd_free`). Both are reported as warnings; a run that cannot have
/// its descriptors is refused with what to raise, before any connection is made.
pub(super) fn consumer_descriptors<D: Driver>(
    plan: &crate::scenario::RunPlan,
    driver: &D,
    observer: &mut dyn super::Observer,
) -> Result<bool, RunError> {
    let consumers = plan.consumers() as u64;
    let needed = consumers + plan.producers() as u64 + 256;
    let hard = super::connections::hard_fd_limit();
    let fd_free = needed > hard && driver.fd_free_consumers();
    // Held in tables, only the producers and the attempts in flight take descriptors.
    let needed = if fd_free { hard } else { needed };
    let (_, raised) = super::connections::preflight_fds(needed).map_err(RunError::Unsupported)?;
    let mut warn = |detail: String| {
        observer.event(&super::RunEvent {
            at_s: 0.0,
            kind: EventKind::Warning,
            detail,
        })
    };
    if let Some(r) = raised {
        warn(r);
    }
    if fd_free {
        warn(format!(
            "{consumers} consumers need more descriptors than the open-file limit ({hard}) \
             allows: holding them in io_uring tables instead (only attempts in flight take \
             descriptors)"
        ));
    }
    Ok(fd_free)
}

/// The clients of one role that connected.
pub(super) struct Connected<T> {
    /// Each client with the spec position (0-based, in the order given) it was made from, and
    /// the worker it runs on, in spec order.
    pub clients: Vec<(usize, T, Handle)>,
    /// Failed attempts by cause (retried or not).
    pub failures: msgbench_metrics::ConnectFailures,
    /// What the failed attempts said, each distinct reason once with how many said it (the
    /// first [`MAX_REASONS`]): the counts by cause alone leave a user with "1 connect failure,
    /// other" and nothing to go on.
    pub reasons: Vec<(String, u64)>,
    /// Clients that never connected: spec position and the last reason.
    pub never: Vec<(usize, DriverError)>,
}

impl<T> Connected<T> {
    /// The clients and their workers, in spec order (for roles that are never patient, where
    /// every spec connected).
    pub fn split(self) -> (Vec<T>, Vec<Handle>) {
        self.clients.into_iter().map(|(_, c, h)| (c, h)).unzip()
    }
}

/// How many distinct reasons of failed connection attempts a run keeps.
pub(super) const MAX_REASONS: usize = 5;

/// Backoff before retry `n` (1-based): 100 ms doubling to 2 s, with up to a quarter of jitter so
/// thousands of clients that failed together do not retry together.
fn backoff(n: u32, salt: usize) -> Duration {
    let base = 100u64 << n.saturating_sub(1).min(5);
    let ms = base.min(2_000);
    let jitter = (salt as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    Duration::from_millis(ms + jitter % (ms / 4 + 1))
}

/// Connects one client per spec, each on the worker it will run on, started as `ramp` says;
/// returns the clients in spec order with their workers. Without patience, the first failure
/// (or timeout) fails the run.
pub(super) async fn connect_all<D, S, T, F, Fut>(
    workers: &mut Workers,
    specs: impl Iterator<Item = S>,
    role: &'static str,
    timeout: Duration,
    ramp: Ramp,
    connect: F,
    driver: &Arc<D>,
) -> Result<Connected<T>, RunError>
where
    D: Driver,
    S: Clone + Send + Sync + 'static,
    T: Send + 'static,
    F: Fn(Arc<D>, S) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<T, DriverError>> + Send + 'static,
{
    use std::sync::atomic::{AtomicBool, Ordering};
    let mut set = JoinSet::new();
    let mut homes = Vec::new();
    // A quarter more than the driver's own connect and handshake timeouts, so the driver's
    // reason ("no answer to the AMQP handshake") is the one reported when both would fire.
    let outer = timeout + timeout / 4;
    let start = tokio::time::Instant::now();
    let some_connected = Arc::new(AtomicBool::new(false));
    // (someone connected, attempts in flight): what a failure before any success waits on.
    let (progress, _) = tokio::sync::watch::channel((false, 0usize));
    let (fail_tx, mut fail_rx) = tokio::sync::mpsc::unbounded_channel::<(ConnectFailure, String)>();
    let specs: Vec<S> = specs.collect();
    let last_start = ramp.rate.map_or(Duration::ZERO, |r| {
        Duration::from_secs_f64(specs.len() as f64 / r)
    });
    let give_up = ramp.patience.map(|p| start + last_start + p);
    for (id, spec) in specs.into_iter().enumerate() {
        let home = workers.next_handle();
        let due = ramp
            .rate
            .map(|r| start + Duration::from_secs_f64(id as f64 / r));
        let (connect, driver) = (connect.clone(), driver.clone());
        let (ok, fails) = (some_connected.clone(), fail_tx.clone());
        let progress = progress.clone();
        // The timer is created on the worker, with the connection.
        set.spawn_on(
            async move {
                if let Some(due) = due {
                    tokio::time::sleep_until(due).await;
                }
                let mut tries = 0u32;
                loop {
                    progress.send_modify(|p| p.1 += 1);
                    let r = tokio::time::timeout(outer, connect(driver.clone(), spec.clone()))
                        .await
                        .unwrap_or_else(|_| {
                            // The driver's own connect timeout (same length) usually fires
                            // first; this one ends a handshake that hangs after the socket
                            // opened. Either way the user reads "cannot connect".
                            Err(DriverError::Timeout(format!(
                                "cannot connect: no connection and handshake within {timeout:?}"
                            )))
                        });
                    let error = match r {
                        Ok(v) => {
                            ok.store(true, Ordering::Relaxed);
                            progress.send_modify(|p| *p = (true, p.1 - 1));
                            return (id, Ok(v));
                        }
                        Err(e) => e,
                    };
                    progress.send_modify(|p| p.1 -= 1);
                    let _ = fails.send((error.connect_failure(), error.to_string()));
                    tries += 1;
                    let wait = backoff(tries, id);
                    // A client that connected and then failed (its subscription cut short: a
                    // broker racing its own session set-up, as Moquette does) showed the
                    // target is right: it is retried twice even before anyone connected.
                    let opened = matches!(
                        error,
                        DriverError::Subscribe(_) | DriverError::Receive(_) | DriverError::Closed
                    );
                    let retriable = !matches!(error, DriverError::Config(_)) && give_up.is_some();
                    if retriable && !ok.load(Ordering::Relaxed) && !(opened && tries <= 2) {
                        // Judged once the attempts in flight have ended (each is bounded by
                        // `outer`): one success among them means the target is right.
                        let mut seen = progress.subscribe();
                        let _ = seen.wait_for(|&(any, flying)| any || flying == 0).await;
                    }
                    let retry = (ok.load(Ordering::Relaxed) || (opened && tries <= 2))
                        && retriable
                        && give_up.is_some_and(|g| tokio::time::Instant::now() + wait < g);
                    if !retry {
                        return (id, Err(error));
                    }
                    tokio::time::sleep(wait).await;
                }
            },
            &home,
        );
        homes.push(home);
    }
    drop(fail_tx);
    let mut out: Vec<(usize, T, Handle)> = Vec::with_capacity(set.len());
    let mut never = Vec::new();
    while let Some(joined) = set.join_next().await {
        let (id, r) =
            joined.map_err(|e| RunError::Unsupported(format!("connect task failed: {e}")))?;
        match r {
            Ok(v) => out.push((id, v, homes[id].clone())),
            // Patient, and the target took others: judged once every client had its chance. A
            // setting the driver cannot work with (a Redis Cluster sending the key elsewhere)
            // is the user's to change, and fails the run however many others connected.
            Err(error)
                if ramp.patience.is_some()
                    && some_connected.load(Ordering::Relaxed)
                    && !error.is_fatal() =>
            {
                never.push((id, error))
            }
            Err(error) => {
                return Err(RunError::Connect {
                    role,
                    id: id as u32,
                    error,
                });
            }
        }
    }
    if out.is_empty()
        && let Some((id, error)) = never.drain(..).min_by_key(|(id, _)| *id)
    {
        return Err(RunError::Connect {
            role,
            id: id as u32,
            error,
        });
    }
    let mut failures = msgbench_metrics::ConnectFailures::default();
    let mut reasons: Vec<(String, u64)> = Vec::new();
    while let Ok((cause, why)) = fail_rx.try_recv() {
        failures.add(cause, 1);
        if let Some((_, n)) = reasons.iter_mut().find(|(r, _)| *r == why) {
            *n += 1;
        } else if reasons.len() < MAX_REASONS {
            reasons.push((why, 1));
        }
    }
    out.sort_by_key(|(id, _, _)| *id);
    never.sort_by_key(|(id, _)| *id);
    Ok(Connected {
        clients: out,
        failures,
        reasons,
        never,
    })
}
