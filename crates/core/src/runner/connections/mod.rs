//! Connection-scale workloads, for every driver through [`Driver::session`]:
//!
//! - **hold**: open `count` connections at `rate` (at most `concurrency` attempts pending),
//!   keep them alive for `hold` (optionally publishing on each every `publish_interval`), then
//!   close them. Reports connect latency, connections/s, failures by cause, drops while held, and
//!   the generator's resident memory per held connection.
//! - **storm**: connect, handshake, send `messages`, close, repeat, `concurrency` cycles at a
//!   time (as amqpprox's tester does), for the measure duration or `count` cycles. Reports
//!   cycles/s and handshake latency.
//! - **journey**: `count` virtual users started at `rate`, each running the plan's steps
//!   (connect, publish, sleep, disconnect) `repeat` times (`journey`), for at most the measure
//!   duration. Reports connects, connect latency, messages and sessions lost.
//!
//! Each connection attempt is its own task; the coordinator owns the only recorder and gets one
//! small message per attempt, so nothing per connection is shared or locked. Held connections
//! report drops, closes and publishes through atomics the coordinator samples every tick.
//!
//! Timeline: measure = ramp + hold (hold) or the storm; drain = closing (hold) or waiting for
//! the cycles in progress (storm). A hold may have a reconnect storm (`reconnect`): every held
//! connection dropped at once and opened again.
//!
//! This file: the connections' own tasks (an attempt, a held connection, a storm cycle) and
//! the limits checked before a run; `journey`: a virtual user; `coordinator`: the run itself.

mod arrival;
mod coordinator;
mod journey;
mod reconnect;

use reconnect::{ChurnSlots, DropCause};

use super::{Observer, RunError, RunOutcome};
use crate::clock::{now_ns, to_instant};
use crate::driver::{ConnectFailure, Driver, DriverEvent, Session, SessionSpec};
use crate::scenario::{ConnectionPlan, RunPlan};
use crate::shutdown::Shutdown;
use msgbench_metrics::{Aggregator, Counters, Phase, Recorder, Role};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// What held connections report without messages.
#[derive(Default)]
struct Levels {
    held: AtomicU64,
    /// The most ever held at once, raised at each open: a journey shorter than a tick is
    /// never held when the coordinator samples `held`.
    peak_held: AtomicU64,
    closed: AtomicU64,
    dropped: AtomicU64,
    published: AtomicU64,
    published_bytes: AtomicU64,
    publish_errors: AtomicU64,
    /// Journeys: messages and bytes the sessions' subscriptions delivered, and subscriptions
    /// refused.
    received: AtomicU64,
    received_bytes: AtomicU64,
    subscribe_errors: AtomicU64,
    /// Journeys: requests not answered within the ack time-out.
    request_timeouts: AtomicU64,
    /// Periodic publishes whose time came while the connection was down after a drop.
    missed: AtomicU64,
}

/// One attempt's answer.
enum Attempt {
    /// A journey's request was answered: sent at `sent_ns` (meant for `intended_ns`), its
    /// reply read at `at_ns`.
    Replied {
        sent_ns: u64,
        intended_ns: u64,
        at_ns: u64,
    },
    Opened {
        latency_ns: u64,
    },
    Failed {
        cause: ConnectFailure,
        detail: String,
    },
    /// A connection the storm or churn dropped is open again, `latency_ns` after the drop.
    Reopened {
        latency_ns: u64,
        by: DropCause,
    },
    /// A connection the storm or churn dropped did not open again.
    ReopenFailed {
        cause: ConnectFailure,
        detail: String,
        by: DropCause,
    },
    /// A virtual user finished its journey (journey mode).
    JourneyDone,
}

/// Resident memory of this process, bytes.
pub fn rss_bytes() -> u64 {
    let page = {
        // SAFETY: sysconf has no preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if p > 0 { p as u64 } else { 4096 }
    };
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * page)
}

static RESERVED_FDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Tells connection workloads that a server in this process (the embedded broker of a run
/// without a target) will hold `n` descriptors of the process's open-file limit: one for each
/// connection it accepts. Workloads that would not fit beside them hold their connections in
/// io_uring tables, as they do past the limit.
pub fn reserve_fds(n: u64) {
    RESERVED_FDS.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
}

fn reserved_fds() -> u64 {
    RESERVED_FDS.load(std::sync::atomic::Ordering::Relaxed)
}

/// The open-file limit, raised to what `needed` asks for when the hard limit allows.
/// Errors say exactly what to raise.
pub fn preflight_fds(needed: u64) -> Result<(u64, Option<String>), String> {
    let Some(lim) = nofile() else {
        return Ok((0, None));
    };
    if lim.rlim_cur >= needed {
        return Ok((lim.rlim_cur, None));
    }
    if lim.rlim_max >= needed {
        let want = libc::rlimit {
            rlim_cur: needed.max(lim.rlim_cur),
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit reads a struct we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
            return Ok((
                want.rlim_cur,
                Some(format!(
                    "raised this process's open-file limit from {} to {} for the connections",
                    lim.rlim_cur, want.rlim_cur
                )),
            ));
        }
    }
    Err(format!(
        "{needed} file descriptors are needed, but this process may open at most {} (hard limit {}). \
         Raise the hard limit (`ulimit -Hn`, LimitNOFILE= for a systemd unit, nofile in \
         /etc/security/limits.conf; needs root or CAP_SYS_RESOURCE) or ask for fewer connections",
        lim.rlim_cur, lim.rlim_max
    ))
}

/// The open-file limits, when the system says.
fn nofile() -> Option<libc::rlimit> {
    // SAFETY: getrlimit fills a struct we own.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0).then_some(lim)
}

/// The open-file hard limit (`u64::MAX` when unknown).
pub fn hard_fd_limit() -> u64 {
    nofile().map_or(u64::MAX, |l| l.rlim_max)
}

/// Checks that `count` connections to one destination fit into the local port range with the
/// given number of source addresses.
pub fn preflight_ports(count: u64, sources: usize) -> Result<(), String> {
    let Ok(range) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range") else {
        return Ok(());
    };
    let mut it = range
        .split_whitespace()
        .filter_map(|v| v.parse::<u64>().ok());
    let (Some(lo), Some(hi)) = (it.next(), it.next()) else {
        return Ok(());
    };
    let ports = hi.saturating_sub(lo) + 1;
    let sources = sources.max(1) as u64;
    let per_source = count.div_ceil(sources);
    if per_source > ports {
        let need = count.div_ceil(ports);
        return Err(format!(
            "{count} connections to one address and port need {per_source} local ports per source \
             address, but net.ipv4.ip_local_port_range ({lo}-{hi}) has {ports}: spread them over \
             at least {need} source addresses (--source-addrs 127.0.0.1-127.0.0.{need}) or widen \
             the range"
        ));
    }
    Ok(())
}

/// Runs a connection workload: prepared (limits checked, the start barrier set), then the
/// ramp, hold or storm and the closing drain (`coordinator::ConnectionRun`).
pub async fn run_connections<D: Driver>(
    driver: Arc<D>,
    plan: &RunPlan,
    cp: &ConnectionPlan,
    mut events: mpsc::UnboundedReceiver<DriverEvent>,
    observer: &mut dyn Observer,
    shutdown: Shutdown,
    member: Option<crate::runner::together::Member>,
) -> Result<RunOutcome, RunError> {
    // In a run with groups, connections start with the others; their messages carry no stamps,
    // so they add nothing to the run's delivery account.
    let start = match &member {
        Some(m) => {
            m.post(0, 0, true);
            Some(m.start_instant(coordinator::LEAD_NS).await)
        }
        None => None,
    };
    let mut run = coordinator::ConnectionRun::prepare(driver, plan, cp, observer, start)?;
    tokio::time::sleep_until(to_instant(run.t0)).await;
    run.begin(observer);
    run.drive(&mut events, observer, &shutdown).await;
    Ok(run.finish(observer))
}

/// [`Levels`]' cumulative counts at one tick, so the next tick takes only what came since.
#[derive(Debug, Default, Clone, Copy)]
struct LevelCounts {
    closed: u64,
    dropped: u64,
    published: u64,
    published_bytes: u64,
    publish_errors: u64,
    received: u64,
    received_bytes: u64,
    subscribe_errors: u64,
    request_timeouts: u64,
}

impl LevelCounts {
    fn read(l: &Levels) -> LevelCounts {
        LevelCounts {
            closed: l.closed.load(Relaxed),
            dropped: l.dropped.load(Relaxed),
            published: l.published.load(Relaxed),
            published_bytes: l.published_bytes.load(Relaxed),
            publish_errors: l.publish_errors.load(Relaxed),
            received: l.received.load(Relaxed),
            received_bytes: l.received_bytes.load(Relaxed),
            subscribe_errors: l.subscribe_errors.load(Relaxed),
            request_timeouts: l.request_timeouts.load(Relaxed),
        }
    }
}

/// Moves the recorder's figures and the held connections' counts since the last tick into
/// interval `k`.
fn flush_tick(
    agg: &mut Aggregator,
    rec: &mut Recorder,
    levels: &Levels,
    last: &mut LevelCounts,
    k: u64,
    phase: Phase,
) {
    use msgbench_metrics::ErrorKind;
    let mut s = rec.take(Role::Producer, 0, phase, k);
    let now = LevelCounts::read(levels);
    let c: &mut Counters = &mut s.counters;
    c.closes += now.closed - last.closed;
    c.dropped += now.dropped - last.dropped;
    c.sent += now.published - last.published;
    c.sent_bytes += now.published_bytes - last.published_bytes;
    c.received += now.received - last.received;
    c.received_bytes += now.received_bytes - last.received_bytes;
    c.errors
        .add(ErrorKind::Send, now.publish_errors - last.publish_errors);
    c.errors.add(
        ErrorKind::Receive,
        now.subscribe_errors - last.subscribe_errors,
    );
    c.errors
        .add(ErrorKind::Disconnect, now.dropped - last.dropped);
    c.errors.add(
        ErrorKind::Timeout,
        now.request_timeouts - last.request_timeouts,
    );
    *last = now;
    if !s.is_empty() {
        agg.add(&s);
    }
}

/// Opens one session and reports the answer; returns the session if it opened. `dropped`:
/// a reopening after the storm or churn dropped it at that instant (the latency counts from
/// the drop). `levels.held`: the count a session that opened joins before the answer goes
/// out, so the coordinator never sees an answered attempt that is neither held nor failed.
async fn attempt<D: Driver>(
    d: &D,
    spec: &SessionSpec,
    timeout: Duration,
    tx: &mpsc::UnboundedSender<Attempt>,
    dropped: Option<(u64, DropCause)>,
    levels: &Levels,
) -> Option<D::Session> {
    let start = dropped.map_or_else(now_ns, |(at, _)| at);
    let r = tokio::time::timeout(timeout, d.session(spec)).await;
    let latency_ns = now_ns().saturating_sub(start);
    let (cause, detail) = match r {
        Ok(Ok(s)) => {
            let held = levels.held.fetch_add(1, Relaxed) + 1;
            levels.peak_held.fetch_max(held, Relaxed);
            let _ = tx.send(match dropped {
                None => Attempt::Opened { latency_ns },
                Some((_, by)) => Attempt::Reopened { latency_ns, by },
            });
            return Some(s);
        }
        Ok(Err(e)) => (e.connect_failure(), e.to_string()),
        Err(_) => (
            ConnectFailure::Timeout,
            format!("no connection within {timeout:?}"),
        ),
    };
    let _ = tx.send(match dropped {
        None => Attempt::Failed { cause, detail },
        Some((_, by)) => Attempt::ReopenFailed { cause, detail, by },
    });
    None
}

/// Opens a connection and holds it, opening it again after each drop by the storm or churn.
async fn hold<D: Driver>(
    d: Arc<D>,
    spec: SessionSpec,
    timeout: Duration,
    tx: mpsc::UnboundedSender<Attempt>,
    mut task: HoldTask,
) {
    let mut dropped = None;
    let levels = task.levels.clone();
    while let Some(s) = attempt(&*d, &spec, timeout, &tx, dropped, &levels).await {
        match task.run(s).await {
            Some(drop) => dropped = Some(drop),
            None => return,
        }
    }
}

/// One held connection: counted as held until the close signal, a drop, the reconnect storm
/// or churn.
struct HoldTask {
    levels: Arc<Levels>,
    close: watch::Receiver<bool>,
    /// The reconnect storm's drop instant, once it fired.
    storm: watch::Receiver<Option<u64>>,
    /// This connection's churn slot (with churn).
    churn: Option<(Arc<ChurnSlots>, usize)>,
    payload: Arc<[u8]>,
    messages: u32,
    publish_interval: Option<Duration>,
    /// The next periodic publish; it keeps its schedule across reopenings, so the ones due
    /// while the connection was down are counted as missed.
    next: Option<tokio::time::Instant>,
    id: u64,
}

impl HoldTask {
    /// Holds `s` (already counted as held) until the close signal or a drop (`None`), or until
    /// the reconnect storm or churn drops it (the instant and the cause of the drop: the
    /// caller opens it again).
    async fn run<S: Session>(&mut self, mut s: S) -> Option<(u64, DropCause)> {
        let l = self.levels.clone();
        let churn = self.churn.clone();
        let slot = churn.as_ref().map(|(slots, i)| (&**slots, *i));
        if let Some((slots, i)) = slot {
            slots.held(i);
        }
        for _ in 0..self.messages {
            self.publish(&mut s).await;
        }
        self.schedule_publishes();
        let left = loop {
            if *self.close.borrow() {
                break None;
            }
            tokio::select! {
                e = s.keep_alive() => {
                    let _ = e;
                    l.dropped.fetch_add(1, Relaxed);
                    if let Some((slots, i)) = slot {
                        slots.released(i);
                    }
                    l.held.fetch_sub(1, Relaxed);
                    return None;
                }
                _ = self.close.changed() => break None,
                Ok(()) = self.storm.changed() => {
                    if let Some(at) = *self.storm.borrow_and_update() {
                        break Some((at, DropCause::Storm));
                    }
                }
                at = churned(slot) => break Some((at, DropCause::Churn)),
                _ = sleep_opt(self.next) => {
                    self.publish(&mut s).await;
                    self.next = self.next.zip(self.publish_interval).map(|(n, iv)| n + iv);
                }
            }
        };
        // Churn's own drop leaves the slot released already.
        if let Some((slots, i)) = slot
            && !matches!(left, Some((_, DropCause::Churn)))
        {
            slots.released(i);
        }
        if left.is_some() {
            // An outage: no goodbye, the session is just gone.
            drop(s);
            l.held.fetch_sub(1, Relaxed);
            return left;
        }
        let _ = s.close().await;
        l.held.fetch_sub(1, Relaxed);
        l.closed.fetch_add(1, Relaxed);
        None
    }

    /// The periodic publishes' next time: spread over the interval by the connection's id on
    /// the first opening; after a reopening, the same schedule, the times that passed counted
    /// as missed.
    fn schedule_publishes(&mut self) {
        let Some(iv) = self.publish_interval else {
            return;
        };
        let now = tokio::time::Instant::now();
        match self.next {
            None => {
                let offset = (self.id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11) as f64
                    / (1u64 << 53) as f64;
                self.next = Some(now + iv.mul_f64(offset));
            }
            Some(n) if n <= now => {
                let behind = (now - n).as_nanos() / iv.as_nanos().max(1) + 1;
                self.levels.missed.fetch_add(behind as u64, Relaxed);
                self.next = Some(n + iv * behind as u32);
            }
            Some(_) => {}
        }
    }

    async fn publish<S: Session>(&self, s: &mut S) {
        match s.publish(&self.payload).await {
            Ok(()) => {
                self.levels.published.fetch_add(1, Relaxed);
                self.levels
                    .published_bytes
                    .fetch_add(self.payload.len() as u64, Relaxed);
            }
            Err(_) => {
                self.levels.publish_errors.fetch_add(1, Relaxed);
            }
        }
    }
}

/// The instant churn dropped this connection (never, without churn).
async fn churned(slot: Option<(&ChurnSlots, usize)>) -> u64 {
    match slot {
        Some((slots, i)) => slots.dropped(i).await,
        None => std::future::pending().await,
    }
}

async fn sleep_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// One storm cycle: connect + handshake (timed), send, close.
async fn storm_cycle<D: Driver>(
    d: &D,
    spec: &SessionSpec,
    timeout: Duration,
    tx: &mpsc::UnboundedSender<Attempt>,
    payload: &[u8],
    messages: u32,
    levels: &Levels,
) {
    // The answer is sent only after the close, so `concurrency` bounds whole cycles.
    let start = now_ns();
    let r = tokio::time::timeout(timeout, d.session(spec)).await;
    let latency_ns = now_ns() - start;
    let answer = match r {
        Ok(Ok(mut s)) => {
            for _ in 0..messages {
                match s.publish(payload).await {
                    Ok(()) => {
                        levels.published.fetch_add(1, Relaxed);
                        levels
                            .published_bytes
                            .fetch_add(payload.len() as u64, Relaxed);
                    }
                    Err(_) => {
                        levels.publish_errors.fetch_add(1, Relaxed);
                        break;
                    }
                }
            }
            let _ = s.close().await;
            levels.closed.fetch_add(1, Relaxed);
            Attempt::Opened { latency_ns }
        }
        Ok(Err(e)) => Attempt::Failed {
            cause: e.connect_failure(),
            detail: e.to_string(),
        },
        Err(_) => Attempt::Failed {
            cause: ConnectFailure::Timeout,
            detail: format!("no connection within {timeout:?}"),
        },
    };
    let _ = tx.send(answer);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_preflight_names_the_fix() {
        assert!(preflight_ports(1000, 1).is_ok());
        let e = preflight_ports(100_000, 1).unwrap_err();
        assert!(e.contains("--source-addrs"), "{e}");
        assert!(preflight_ports(100_000, 10).is_ok());
    }

    #[test]
    fn fd_preflight_names_the_limit() {
        assert!(preflight_fds(16).unwrap().0 >= 16);
        let e = preflight_fds(u64::MAX / 2).unwrap_err();
        assert!(e.contains("hard limit"), "{e}");
    }

    #[test]
    fn rss_is_measured() {
        assert!(rss_bytes() > 1_000_000);
    }
}
