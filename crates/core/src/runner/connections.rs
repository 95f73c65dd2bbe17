//! Connection-scale workloads, for every driver through [`Driver::session`]:
//!
//! - **hold**: open `count` connections at `rate` (at most `concurrency` attempts pending),
//!   keep them alive for `hold` (optionally publishing on each every `publish_interval`), then
//!   close them. Reports connect latency, connections/s, failures by cause, drops while held, and
//!   the generator's resident memory per held connection.
//! - **storm**: connect, handshake, send `messages`, close, repeat, `concurrency` cycles at a
//!   time (as amqpprox's tester does), for the measure duration or `count` cycles. Reports
//!   cycles/s and handshake latency.
//!
//! Each connection attempt is its own task; the coordinator owns the only recorder and gets one
//! small message per attempt, so nothing per connection is shared or locked. Held connections
//! report drops, closes and publishes through atomics the coordinator samples every tick.
//!
//! Timeline: measure = ramp + hold (hold) or the storm; drain = closing (hold) or waiting for
//! the cycles in progress (storm).

use super::{Observer, RunError, RunEvent, RunOutcome, process_cpu_s, secs};
use crate::clock::{now_ns, to_instant, unix_ms};
use crate::driver::{ConnectFailure, Driver, DriverEvent, DriverEventKind, Session, SessionSpec};
use crate::scenario::ConnectionMode;
use crate::scenario::{ConnectionPlan, RunPlan};
use crate::shutdown::Shutdown;
use msgbench_metrics::aggregate::Integrity;
use msgbench_metrics::{
    Aggregator, ConnectionSummary, Counters, Gauges, Phase, PhaseTotals, Recorder, Role,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// What held connections report without messages.
#[derive(Default)]
struct Levels {
    held: AtomicU64,
    closed: AtomicU64,
    dropped: AtomicU64,
    published: AtomicU64,
    published_bytes: AtomicU64,
    publish_errors: AtomicU64,
}

/// One attempt's answer.
enum Attempt {
    Opened {
        latency_ns: u64,
    },
    Failed {
        cause: ConnectFailure,
        detail: String,
    },
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

/// Runs a connection workload.
pub async fn run_connections<D: Driver>(
    driver: Arc<D>,
    plan: &RunPlan,
    cp: &ConnectionPlan,
    mut events: mpsc::UnboundedReceiver<DriverEvent>,
    observer: &mut dyn Observer,
    shutdown: Shutdown,
) -> Result<RunOutcome, RunError> {
    // A segment opens its share of the connections at its share of the rate; connection ids
    // interleave (`n * N + I`) so client ids never collide across segments.
    let segment_cp;
    let (cp, id_of): (&ConnectionPlan, Box<dyn Fn(u64) -> u64 + Send>) = match plan.segment {
        Some(s) => {
            segment_cp = ConnectionPlan {
                count: cp.count.map(|c| s.share(c)),
                rate: cp.rate.map(|r| r / s.count as f64),
                concurrency: (s.share(cp.concurrency as u64) as u32).max(1),
                ..cp.clone()
            };
            let (n, i) = (s.count as u64, s.index as u64);
            (&segment_cp, Box::new(move |k| k * n + i))
        }
        None => (cp, Box::new(|k| k)),
    };
    let hold_mode = cp.mode == ConnectionMode::Hold;
    let mut warnings = Vec::new();
    let needed = if hold_mode {
        cp.count.unwrap_or(0) + 256
    } else {
        cp.concurrency as u64 + 256
    };
    // Beyond the hard limit, drivers that can hold sockets in io_uring tables do so; only the
    // attempts in flight then take descriptors, and each table may be as large as the limit.
    let hard = hard_fd_limit();
    let fd_free = hold_mode && needed > hard && driver.fd_free_sessions();
    let needed = if fd_free {
        (cp.concurrency as u64 + 256).max(hard)
    } else {
        needed
    };
    let (fd_limit, raised) = preflight_fds(needed).map_err(RunError::Unsupported)?;
    if hold_mode {
        // Connections to one destination share its local ports; several destinations each
        // take their share.
        let per_host = cp
            .count
            .unwrap_or(0)
            .div_ceil(driver.session_hosts().max(1) as u64);
        preflight_ports(per_host, cp.source_addrs.len()).map_err(RunError::Unsupported)?;
    }
    let tick_ns = plan.tick.as_nanos() as u64;
    let (t0, late) = super::release::release_instant(plan, 10_000_000);
    if let Some(w) = late {
        observer.event(&RunEvent {
            at_s: 0.0,
            kind: "warning".into(),
            detail: w.clone(),
        });
        warnings.push(w);
    }
    let started_unix_ms = unix_ms() + 10;
    let ev = |kind: &str, detail: String, at: u64| RunEvent {
        at_s: secs(t0, at),
        kind: kind.into(),
        detail,
    };
    if let Some(r) = raised {
        observer.event(&ev("warning", r, now_ns()));
    }
    if fd_free {
        observer.event(&ev(
            "warning",
            format!(
                "{} connections need more descriptors than the open-file limit ({hard}) allows: \
                 holding them in io_uring tables instead (only attempts in flight take descriptors)",
                cp.count.unwrap_or(0)
            ),
            now_ns(),
        ));
    }
    let rss_baseline = rss_bytes();
    let mut agg = Aggregator::new(plan.tick.as_secs_f64());
    let mut rec = Recorder::new(u64::MAX);
    let levels = Arc::new(Levels::default());
    let (att_tx, mut att_rx) = mpsc::unbounded_channel::<Attempt>();
    let (close_tx, close_rx) = watch::channel(false);
    let payload: Arc<[u8]> = vec![0x6d; plan.size.max() as usize].into();
    let topic = plan.topics[0].clone();

    tokio::time::sleep_until(to_instant(t0)).await;
    let mut phase = Phase::Measure;
    agg.begin_phase(phase, 0.0);
    observer.event(&ev("phase", "measure".into(), t0));
    // Attempt n is due at t0 + n / rate (constant rate, counted from the start, so a slow
    // attempt does not push the schedule back).
    let gap_ns = cp.rate.map(|r| 1e9 / r);
    let due = |n: u64| gap_ns.map_or(0, |g| t0 + (n as f64 * g) as u64);
    let measure_end = match (cp.mode, plan.measure) {
        (ConnectionMode::Storm, crate::scenario::Measure::Duration(d)) if cp.count.is_none() => {
            Some(t0 + d.as_nanos() as u64)
        }
        _ => None,
    };
    // Storm: `count` cycles, or `--messages N` cycles, or the measure duration.
    let limit = match (cp.count, plan.measure) {
        (Some(n), _) => n,
        (None, crate::scenario::Measure::Messages(n)) => plan.segment.map_or(n, |s| s.share(n)),
        (None, _) => u64::MAX,
    };
    let (mut launched, mut answered, mut opened) = (0u64, 0u64, 0u64);
    let mut ramp_end: Option<u64> = None;
    let mut hold_end: Option<u64> = None;
    let mut drain_deadline: Option<u64> = None;
    let (mut peak_held, mut rss_peak) = (0u64, rss_baseline);
    let mut interrupted = false;
    let mut cpu_mark = process_cpu_s();
    let mut last = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut next_tick = t0 + tick_ns;
    let mut interval = 0u64;
    let mut failures_reported = 0u32;

    loop {
        let now = now_ns();
        // Launch what the rate and the concurrency allow.
        let launching = phase == Phase::Measure && !interrupted && launched < limit;
        if launching {
            let mut n = 0;
            while launched < limit
                && launched - answered < cp.concurrency as u64
                && measure_end.is_none_or(|e| now < e)
                && n < 1024
            {
                if due(launched) > now {
                    break;
                }
                let spec = SessionSpec {
                    id: id_of(launched),
                    topic: topic.clone(),
                    source: (!cp.source_addrs.is_empty()).then(|| {
                        cp.source_addrs[(launched % cp.source_addrs.len() as u64) as usize]
                    }),
                    fd_free,
                };
                let d = driver.clone();
                let tx = att_tx.clone();
                let timeout = plan.connect_timeout;
                if hold_mode {
                    let task = HoldTask {
                        levels: levels.clone(),
                        close: close_rx.clone(),
                        payload: payload.clone(),
                        messages: cp.messages,
                        publish_interval: cp.publish_interval,
                        id: id_of(launched),
                    };
                    tokio::spawn(async move {
                        if let Some(s) = attempt(&*d, &spec, timeout, &tx).await {
                            task.run(s).await;
                        }
                    });
                } else {
                    let (payload, messages, levels) =
                        (payload.clone(), cp.messages, levels.clone());
                    tokio::spawn(async move {
                        storm_cycle(&*d, &spec, timeout, &tx, &payload, messages, &levels).await;
                    });
                }
                launched += 1;
                n += 1;
            }
        }
        // Phase changes.
        let all_answered = answered == launched;
        if phase == Phase::Measure {
            let done_launching = launched >= limit || measure_end.is_some_and(|e| now >= e);
            if hold_mode && ramp_end.is_none() && ((done_launching && all_answered) || interrupted)
            {
                ramp_end = Some(now);
                let held = levels.held.load(Relaxed);
                // Everything is open now: the natural moment for the memory-per-connection figure.
                let rss = rss_bytes();
                if held > peak_held || (held == peak_held && rss > rss_peak) {
                    peak_held = held;
                    rss_peak = rss;
                }
                observer.event(&ev(
                    "connected",
                    format!(
                        "{opened} of {launched} connections open in {:.3}s; holding {held} for {:?}",
                        secs(t0, now),
                        cp.hold
                    ),
                    now,
                ));
                hold_end = Some(now + cp.hold.as_nanos() as u64);
            }
            let measure_over = if hold_mode {
                hold_end.is_some_and(|e| now >= e) || interrupted
            } else {
                (done_launching && all_answered)
                    || interrupted
                    || measure_end.is_some_and(|e| now >= e)
            };
            if measure_over {
                let k = (now.saturating_sub(t0)) / tick_ns;
                let cpu = process_cpu_s();
                agg.record_cpu(k.max(interval), phase, cpu - cpu_mark);
                cpu_mark = cpu;
                flush_tick(
                    &mut agg,
                    &mut rec,
                    &levels,
                    &mut last,
                    k.max(interval),
                    phase,
                );
                let g = Gauges {
                    held: levels.held.load(Relaxed),
                    rss_bytes: rss_bytes(),
                };
                agg.record_gauges(k.max(interval), phase, g);
                agg.end_phase(phase, secs(t0, now));
                phase = Phase::Drain;
                agg.begin_phase(phase, secs(t0, now));
                observer.event(&ev("phase", "drain".into(), now));
                if ramp_end.is_none() {
                    ramp_end = Some(now);
                }
                let _ = close_tx.send(true);
                // Closing many connections takes its time (a goodbye and a close each): the
                // drain allows at least 1 s per 10,000 held, interrupted or not (an interrupted
                // run otherwise gets at most 2 s; a second Ctrl-C cuts either short).
                let closing = Duration::from_secs_f64(levels.held.load(Relaxed) as f64 / 10_000.0);
                let grace = if interrupted {
                    Duration::from_secs(2).min(plan.drain).max(closing)
                } else {
                    plan.drain.max(closing)
                };
                drain_deadline = Some(now + grace.as_nanos() as u64);
            }
        }
        if let Some(deadline) = drain_deadline {
            let open = levels.held.load(Relaxed);
            if (open == 0 && answered == launched) || now >= deadline || shutdown.requests() >= 2 {
                if open > 0 || answered < launched {
                    warnings.push(format!(
                        "drain ended with {open} connections still open and {} attempts unanswered",
                        launched - answered
                    ));
                }
                break;
            }
        }

        let wake = [
            next_tick,
            if launching && launched - answered < cp.concurrency as u64 {
                due(launched)
            } else {
                u64::MAX
            },
            hold_end.unwrap_or(u64::MAX),
            measure_end.unwrap_or(u64::MAX),
            drain_deadline.map_or(u64::MAX, |_| now + 5_000_000),
        ]
        .into_iter()
        .min()
        .unwrap_or(u64::MAX)
        .max(now);

        tokio::select! {
            Some(a) = att_rx.recv() => {
                let mut a = Some(a);
                // Take everything that is ready in one go (thousands per second at ramp).
                while let Some(x) = a.take().or_else(|| att_rx.try_recv().ok()) {
                    answered += 1;
                    match x {
                        Attempt::Opened { latency_ns } => { opened += 1; rec.record_connect(latency_ns); }
                        Attempt::Failed { cause, detail } => {
                            rec.record_connect_failure(cause);
                            if failures_reported < 10 {
                                failures_reported += 1;
                                observer.event(&ev("error", format!("connection failed ({}): {detail}", cause.name()), now_ns()));
                            }
                        }
                    }
                }
            }
            Some(e) = events.recv() => {
                let kind = match e.kind {
                    DriverEventKind::Reconnected => "reconnected",
                    DriverEventKind::Disconnected => "disconnected",
                    DriverEventKind::Error => "error",
                    DriverEventKind::Warning => "warning",
                };
                observer.event(&ev(kind, e.detail, now_ns()));
            }
            _ = tokio::time::sleep_until(to_instant(wake)) => {}
            _ = shutdown.reached(1), if !interrupted => {
                interrupted = true;
                observer.event(&ev(
                    "warning",
                    "interrupted: closing connections (interrupt again to stop at once)".into(),
                    now_ns(),
                ));
            }
        }

        let now = now_ns();
        if now >= next_tick {
            let held = levels.held.load(Relaxed);
            let rss = rss_bytes();
            if held > peak_held || (held == peak_held && rss > rss_peak) {
                peak_held = held;
                rss_peak = rss;
            }
            let cpu = process_cpu_s();
            agg.record_cpu(interval, phase, cpu - cpu_mark);
            cpu_mark = cpu;
            flush_tick(&mut agg, &mut rec, &levels, &mut last, interval, phase);
            agg.record_gauges(
                interval,
                phase,
                Gauges {
                    held,
                    rss_bytes: rss,
                },
            );
            for iv in agg.take_intervals(interval) {
                observer.interval(&iv);
            }
            interval = (now - t0) / tick_ns;
            next_tick = t0 + (interval + 1) * tick_ns;
        }
    }

    let end = now_ns();
    let cpu = process_cpu_s();
    agg.record_cpu(interval, phase, cpu - cpu_mark);
    flush_tick(&mut agg, &mut rec, &levels, &mut last, interval, phase);
    agg.record_gauges(
        interval,
        phase,
        Gauges {
            held: levels.held.load(Relaxed),
            rss_bytes: rss_bytes(),
        },
    );
    agg.end_phase(phase, secs(t0, end));
    for iv in agg.take_all_intervals() {
        observer.interval(&iv);
    }
    observer.event(&ev("phase", "end".into(), now_ns()));

    let phases: Vec<PhaseTotals> = Phase::ALL
        .iter()
        .filter(|p| agg.phase_started(**p))
        .map(|p| agg.totals(*p).clone())
        .collect();
    let all = agg.all_counters();
    let ramp_s = secs(t0, ramp_end.unwrap_or(end)).max(1e-9);
    if all.connect_failures.total() > 0 {
        let by: Vec<String> = ConnectFailure::ALL
            .iter()
            .filter(|c| all.connect_failures.get(**c) > 0)
            .map(|c| format!("{} {}", all.connect_failures.get(*c), c.name()))
            .collect();
        warnings.push(format!(
            "{} connection attempts failed: {}",
            all.connect_failures.total(),
            by.join(", ")
        ));
    }
    if all.dropped > 0 {
        warnings.push(format!(
            "{} held connections were dropped by the server or the network",
            all.dropped
        ));
    }
    let summary = ConnectionSummary {
        mode: if hold_mode { "hold" } else { "storm" }.into(),
        requested: (limit != u64::MAX).then_some(limit),
        peak_held,
        ramp_s,
        connections_per_s: all.connects as f64 / ramp_s,
        rss_baseline_bytes: rss_baseline,
        rss_peak_bytes: rss_peak,
        rss_per_connection_bytes: if peak_held > 0 {
            rss_peak.saturating_sub(rss_baseline) as f64 / peak_held as f64
        } else {
            0.0
        },
        fd_limit,
        fd_free,
    };
    Ok(RunOutcome {
        started_unix_ms,
        duration_s: secs(t0, end),
        phases,
        integrity: Integrity::default(),
        interrupted,
        drain_complete: !warnings.iter().any(|w| w.starts_with("drain")),
        warnings,
        producers_failed: 0,
        connections: Some(summary),
        stages: Vec::new(),
        tcp: None,
        backlog: None,
    })
}

/// Moves the recorder's figures and the held connections' counts since the last tick into
/// interval `k`.
fn flush_tick(
    agg: &mut Aggregator,
    rec: &mut Recorder,
    levels: &Levels,
    last: &mut (u64, u64, u64, u64, u64),
    k: u64,
    phase: Phase,
) {
    let mut s = rec.take(Role::Producer, 0, phase, k);
    let now = (
        levels.closed.load(Relaxed),
        levels.dropped.load(Relaxed),
        levels.published.load(Relaxed),
        levels.published_bytes.load(Relaxed),
        levels.publish_errors.load(Relaxed),
    );
    let c: &mut Counters = &mut s.counters;
    c.closes += now.0 - last.0;
    c.dropped += now.1 - last.1;
    c.sent += now.2 - last.2;
    c.sent_bytes += now.3 - last.3;
    c.errors
        .add(msgbench_metrics::ErrorKind::Send, now.4 - last.4);
    c.errors
        .add(msgbench_metrics::ErrorKind::Disconnect, now.1 - last.1);
    *last = now;
    if !s.is_empty() {
        agg.add(&s);
    }
}

/// Opens one session and reports the answer; returns the session if it opened.
async fn attempt<D: Driver>(
    d: &D,
    spec: &SessionSpec,
    timeout: Duration,
    tx: &mpsc::UnboundedSender<Attempt>,
) -> Option<D::Session> {
    let start = now_ns();
    let r = tokio::time::timeout(timeout, d.session(spec)).await;
    let latency_ns = now_ns() - start;
    let (answer, session) = match r {
        Ok(Ok(s)) => (Attempt::Opened { latency_ns }, Some(s)),
        Ok(Err(e)) => (
            Attempt::Failed {
                cause: e.connect_failure(),
                detail: e.to_string(),
            },
            None,
        ),
        Err(_) => (
            Attempt::Failed {
                cause: ConnectFailure::Timeout,
                detail: format!("no connection within {timeout:?}"),
            },
            None,
        ),
    };
    let _ = tx.send(answer);
    session
}

/// One held connection: counted as held until the close signal or a drop.
struct HoldTask {
    levels: Arc<Levels>,
    close: watch::Receiver<bool>,
    payload: Arc<[u8]>,
    messages: u32,
    publish_interval: Option<Duration>,
    id: u64,
}

impl HoldTask {
    async fn run<S: Session>(mut self, mut s: S) {
        let l = &self.levels;
        l.held.fetch_add(1, Relaxed);
        for _ in 0..self.messages {
            self.publish(&mut s).await;
        }
        // Spread the periodic publishes of many connections over the interval.
        let mut next = self.publish_interval.map(|iv| {
            let offset =
                (self.id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11) as f64 / (1u64 << 53) as f64;
            tokio::time::Instant::now() + iv.mul_f64(offset)
        });
        loop {
            if *self.close.borrow() {
                break;
            }
            tokio::select! {
                e = s.keep_alive() => {
                    let _ = e;
                    l.held.fetch_sub(1, Relaxed);
                    l.dropped.fetch_add(1, Relaxed);
                    return;
                }
                _ = self.close.changed() => break,
                _ = sleep_opt(next) => {
                    self.publish(&mut s).await;
                    next = next.zip(self.publish_interval).map(|(n, iv)| n + iv);
                }
            }
        }
        let _ = s.close().await;
        l.held.fetch_sub(1, Relaxed);
        l.closed.fetch_add(1, Relaxed);
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
