//! The runner: connects everything, releases all tasks together, drives the phases, merges
//! snapshots every tick and hands intervals and events to an [`Observer`].
//!
//! # Layout
//! - [`state`]: phase and stop flags shared with the tasks.
//! - `produce`: the producer loop (pace → stamp → send → record, ack window).
//! - `consume`: the consumer loop (recv → unstamp → record + integrity).
//! - `inflight`: the ack window.
//! - `timer`: precise waits for paced sends.
//! - `release`: when the load is released (`--start-at`) and when a segment stops waiting.
//! - `stall`: producers the system under test holds back; tasks that will not end.
//! - `connect`: connecting the clients; interval arithmetic. `outcome`: the public results.
//! - `backlog`: backlog runs (consumers held back until a backlog is built, then released).
//!
//! A segmented run (`plan.segment`) starts only the tasks whose global index is its own; they
//! keep their global ids, and rates and quotas stay split over the whole run's producers.
//!
//! Timeline of a run: connect consumers (subscriptions are live before anything is sent) →
//! connect producers → start barrier at `t0` → warm-up → measure (a duration, or until the
//! message quota is sent) → drain (until every expected delivery arrived or the drain timeout)
//! → final snapshots → [`RunOutcome`].

mod backlog;
mod connect;
pub mod connections;
mod consume;
mod inflight;
pub mod lag;
mod outcome;
mod produce;
mod release;
mod stages;
mod stall;
pub mod state;
mod tagging;
mod timer;
mod tracker;
pub mod workers;

use crate::clock::{now_ns, to_instant, unix_ms};
use crate::driver::{ConsumerSpec, Driver, DriverEvent, DriverEventKind, ProducerSpec};
use crate::pacer::Pacer;
use crate::payload::PayloadBuilder;
use crate::scenario::{KeySource, Measure, RunPlan, StageSource, SubscriptionMode};
use crate::shutdown::Shutdown;
use backlog::{BacklogEvent, BacklogWatch};
use consume::ConsumerTask;
use msgbench_metrics::{Aggregator, Counters, ErrorKind, Phase, PhaseTotals, Role, Snapshot};
use produce::ProducerTask;
use release::{SEGMENT_QUIET_NS, release_instant};
use state::{OwnedCounter, RunState};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use workers::Workers;

use connect::{
    Ramp, connect_all, consumer_descriptors, consumer_ramp, interval_before, process_cpu_s, secs,
};
pub use outcome::{Observer, RunError, RunEvent, RunOutcome};

/// Consumers beyond which a run without `workers` gets dedicated worker threads anyway.
const MANY_CONSUMERS: u32 = 256;

/// Runs `plan` against `driver`, reporting to `observer`. Driver events arrive on `events`.
///
/// # Errors
/// Only when the run cannot start (unsupported plan, a client cannot connect). Once running,
/// failures are counted, never fatal: the run completes and the outcome says what went wrong.
pub async fn run<D: Driver>(
    driver: Arc<D>,
    plan: &RunPlan,
    events: mpsc::UnboundedReceiver<DriverEvent>,
    observer: &mut dyn Observer,
    shutdown: Shutdown,
) -> Result<RunOutcome, RunError> {
    // Every client has closed when either returns, so the TCP tally is complete.
    let tcp0 = crate::tcp_tally::totals();
    let mut outcome = match &plan.connections {
        Some(cp) => {
            connections::run_connections(driver, plan, cp, events, observer, shutdown).await?
        }
        None => run_messages(driver, plan, events, observer, shutdown).await?,
    };
    outcome.tcp = crate::tcp_tally::since(&tcp0);
    Ok(outcome)
}

async fn run_messages<D: Driver>(
    driver: Arc<D>,
    plan: &RunPlan,
    mut events: mpsc::UnboundedReceiver<DriverEvent>,
    observer: &mut dyn Observer,
    shutdown: Shutdown,
) -> Result<RunOutcome, RunError> {
    let caps = driver.capabilities();
    plan.payload
        .validate(&plan.size)
        .map_err(|m| RunError::Unsupported(format!("payload: {m}")))?;
    if plan.request_reply && !caps.request_reply {
        return Err(RunError::Unsupported(format!(
            "the {} driver does not support request/reply",
            plan.scheme()
        )));
    }
    if matches!(plan.subscription, SubscriptionMode::Queue { .. })
        && !caps.queue_groups
        && plan.consumers_per_topic > 1
    {
        return Err(RunError::Unsupported(format!(
            "the {} driver does not support competing consumers",
            plan.scheme()
        )));
    }
    let needs_meta = !plan.message.is_empty()
        || plan.tracking.as_ref().is_some_and(|t| {
            t.stages.iter().any(|s| {
                s.keys.iter().any(|k| *k != KeySource::Stamp)
                    || s.error_property.is_some()
                    || s.rekey.is_some()
            })
        });
    if needs_meta && !caps.metadata {
        return Err(RunError::Unsupported(format!(
            "the {} driver sends no message ids or properties: [message] and stages keyed by ids or properties need a driver that does (amqp10)",
            plan.scheme()
        )));
    }
    let acks = caps.acks || plan.request_reply;
    let connect_t = now_ns();
    let ev = |kind: &str, detail: String, at: u64, t0: u64| RunEvent {
        at_s: secs(t0, at),
        kind: kind.into(),
        detail,
    };

    // Every task runs on the worker its connection was made on.
    // Many consumers get dedicated workers even when none were asked for: they then share a
    // recorder per thread (see `consume`), which is what keeps thousands of them affordable.
    let n_workers = match plan.workers {
        0 if plan.consumers() > MANY_CONSUMERS => crate::available_cpus(),
        n => n,
    };
    let mut workers = Workers::start(n_workers)
        .map_err(|e| RunError::Unsupported(format!("cannot start worker threads: {e}")))?;

    let fd_free = consumer_descriptors(plan, &*driver, observer)?;

    // Consumers first: their subscriptions must be live before the first message.
    let ramp = &plan.consumer_ramp;
    let group = match &plan.subscription {
        SubscriptionMode::Fanout => None,
        SubscriptionMode::Queue { group } => Some(group.clone()),
    };
    let consumer_specs = plan
        .topics
        .iter()
        .flat_map(|t| std::iter::repeat_n(t, plan.consumers_per_topic as usize));
    // A segment runs only its slice; every task keeps its global index (see `scenario::segment`).
    let segment = plan.segment;
    let consumer_ids: Vec<u32> = (0..plan.consumers())
        .filter(|g| segment.is_none_or(|s| s.owns_consumer(*g as u64)))
        .collect();
    let consumer_specs = consumer_specs
        .enumerate()
        .filter(|(g, _)| segment.is_none_or(|s| s.owns_consumer(*g as u64)))
        .map(|(id, topic)| ConsumerSpec {
            id: id as u32,
            topic: plan.subscribe.clone().unwrap_or_else(|| topic.clone()),
            group: group.clone(),
            respond: plan.request_reply,
            meta: false,
            target: None,
            source: (!ramp.source_addrs.is_empty())
                .then(|| ramp.source_addrs[id % ramp.source_addrs.len()]),
            fd_free,
        });
    let consumers = tokio::select! {
        r = connect_all(&mut workers, consumer_specs, "consumer", plan.connect_timeout,
                        consumer_ramp(plan),
                        |d, spec: ConsumerSpec| async move { d.consumer(&spec).await }, &driver) => r?,
        _ = shutdown.reached(1) => return Err(RunError::Interrupted),
    };
    // Consumers that never connected are left out of the account (each message is expected
    // only by the receivers that subscribed) and reported.
    let never_connected = consumers.never.len();
    let consumer_failures = consumers.failures;
    if never_connected > 0 {
        let (_, why) = &consumers.never[0];
        observer.event(&ev(
            "warning",
            format!(
                "{never_connected} of {} consumers never connected (the run goes on without \
                 them; each message is expected by the consumers that did). First reason: {why}",
                never_connected + consumers.clients.len()
            ),
            now_ns(),
            now_ns(),
        ));
    }
    let connected_per_topic = {
        let mut n = vec![0u64; plan.topics.len()];
        for (pos, _, _) in &consumers.clients {
            n[consumer_ids[*pos] as usize / plan.consumers_per_topic.max(1) as usize] += 1;
        }
        n
    };
    let (consumer_ids, consumers, consumer_homes): (Vec<u32>, Vec<_>, Vec<_>) = {
        let mut ids = Vec::with_capacity(consumers.clients.len());
        let mut cs = Vec::with_capacity(consumers.clients.len());
        let mut hs = Vec::with_capacity(consumers.clients.len());
        for (pos, c, h) in consumers.clients {
            ids.push(consumer_ids[pos]);
            cs.push(c);
            hs.push(h);
        }
        (ids, cs, hs)
    };
    // Stage listeners: one consumer per queue stages are observed on, live before anything is
    // sent, like the consumers.
    let tracker = plan.tracking.as_ref().map(|t| {
        let flags: Vec<(bool, bool)> = t
            .stages
            .iter()
            .map(|s| (s.source != StageSource::Ack, s.required()))
            .collect();
        let window = t
            .window_stage()
            .map(|w| (w as u16, plan.max_in_flight as u64));
        Arc::new(tracker::Tracker::new(&flags, window))
    });
    let stage_queues = plan
        .tracking
        .as_ref()
        .map(|t| t.queues())
        .unwrap_or_default();
    let base = plan.consumers();
    let listener_specs = stage_queues.iter().enumerate().map(|(i, q)| ConsumerSpec {
        id: base + i as u32,
        topic: q.queue.clone(),
        group: None,
        respond: false,
        meta: true,
        target: q.target.clone(),
        source: None,
        fd_free: false,
    });
    let (mut listeners, listener_homes) = tokio::select! {
        r = connect_all(&mut workers, listener_specs, "stage listener", plan.connect_timeout,
                        Ramp::default(),
                        |d, spec: ConsumerSpec| async move { d.consumer(&spec).await }, &driver) => r?.split(),
        _ = shutdown.reached(1) => return Err(RunError::Interrupted),
    };
    if plan.tracking.as_ref().is_some_and(|t| t.clean) {
        for (c, q) in listeners.iter_mut().zip(&stage_queues) {
            let queue = &q.queue;
            let n = tokio::select! {
                n = stages::clean(c, Duration::from_secs(1), Duration::from_secs(60)) => n,
                _ = shutdown.reached(1) => return Err(RunError::Interrupted),
            };
            if n > 0 {
                observer.event(&ev(
                    "warning",
                    format!("cleaned {n} stale messages from queue {queue} before the run"),
                    now_ns(),
                    now_ns(),
                ));
            }
        }
    }
    let producer_specs = plan
        .topics
        .iter()
        .flat_map(|t| std::iter::repeat_n(t, plan.producers_per_topic as usize));
    let producer_ids: Vec<u32> = (0..plan.producers())
        .filter(|g| segment.is_none_or(|s| s.owns_producer(*g as u64)))
        .collect();
    let producer_specs = producer_specs
        .enumerate()
        .filter(|(g, _)| segment.is_none_or(|s| s.owns_producer(*g as u64)))
        .map(|(id, topic)| ProducerSpec {
            id: id as u32,
            topics: vec![topic.clone()],
            request_reply: plan.request_reply,
            max_in_flight: plan.max_in_flight,
        });
    let (producers, producer_homes) = tokio::select! {
        r = connect_all(&mut workers, producer_specs, "producer", plan.connect_timeout,
                        Ramp::default(),
                        |d, spec: ProducerSpec| async move { d.producer(&spec).await }, &driver) => r?.split(),
        _ = shutdown.reached(1) => return Err(RunError::Interrupted),
    };

    // Start barrier: every task waits for t0, so none gets a head start.
    let tick_ns = plan.tick.as_nanos() as u64;
    let (t0, late) = release_instant(plan, 20_000_000);
    let started_unix_ms = unix_ms() + (t0.saturating_sub(now_ns())) / 1_000_000;
    observer.event(&ev(
        "connected",
        format!(
            "{} producers, {} consumers connected in {:.3}s",
            producers.len(),
            consumers.len(),
            secs(connect_t, now_ns())
        ),
        now_ns(),
        t0,
    ));
    let state = Arc::new(RunState::default());
    let first_phase = if plan.warmup.is_zero() {
        Phase::Measure
    } else {
        Phase::Warmup
    };
    state.set_phase(first_phase);
    let warmup_end = t0 + plan.warmup.as_nanos() as u64;
    let measure_end = match plan.measure {
        Measure::Duration(d) => Some(warmup_end + d.as_nanos() as u64),
        Measure::Messages(_) => None,
    };
    state.set_boundaries(warmup_end, measure_end.unwrap_or(u64::MAX));
    let (snap_tx, mut snap_rx) = mpsc::unbounded_channel::<Snapshot>();
    let (stop_tx, stop_rx) = watch::channel(false);
    let (fatal_tx, mut fatal_rx) = mpsc::unbounded_channel::<String>();
    let mut agg = Aggregator::new(plan.tick.as_secs_f64());
    // Consumers' failed connection attempts (retried, or never connected) happened before t0:
    // they count in the first phase.
    if consumer_failures.total() > 0 {
        let mut counters = Counters {
            connect_failures: consumer_failures,
            ..Default::default()
        };
        counters
            .errors
            .add(ErrorKind::Connect, consumer_failures.total());
        agg.add(&Snapshot {
            role: Role::Consumer,
            task: u32::MAX,
            phase: first_phase,
            interval: 0,
            counters,
            hist: Default::default(),
            stages: Vec::new(),
        });
    }
    let receivers = plan.receivers_per_message();
    // A producer's messages are expected by the consumers of its topic that connected.
    let receivers_of = |producer: u32| -> u64 {
        if never_connected == 0 {
            return receivers;
        }
        let all: u64 = connected_per_topic.iter().sum();
        let mine =
            connected_per_topic[producer as usize / plan.producers_per_topic.max(1) as usize];
        match (&plan.subscription, plan.subscribe.is_some()) {
            (SubscriptionMode::Fanout, true) => all,
            (SubscriptionMode::Fanout, false) => mine,
            (SubscriptionMode::Queue { .. }, true) => u64::from(all > 0),
            (SubscriptionMode::Queue { .. }, false) => u64::from(mine > 0),
        }
    };

    if plan.backlog.is_some() && plan.segment.is_some() {
        return Err(RunError::Unsupported(
            "--backlog in a segmented run: a segment cannot see what the others sent".into(),
        ));
    }
    let (mut backlog, hold) = match plan.backlog {
        Some(b) => {
            let (w, gate) = BacklogWatch::new(b, (plan.size.min() + plan.size.max()) / 2);
            (Some(w), Some(gate))
        }
        None => (None, None),
    };
    let mut consumer_tasks = JoinSet::new();
    let mut distinct = Vec::new();
    let group_seen = matches!(plan.subscription, SubscriptionMode::Queue { .. })
        .then(msgbench_metrics::GroupSeen::new);
    for (i, c) in consumers.into_iter().enumerate() {
        let counter = Arc::new(OwnedCounter::default());
        distinct.push(counter.clone());
        let task = ConsumerTask {
            id: consumer_ids[i],
            run_id: plan.run_id,
            t0_ns: t0,
            tick_ns,
            state: state.clone(),
            snapshots: snap_tx.clone(),
            distinct: counter,
            stop: stop_rx.clone(),
            group: group_seen.clone(),
            shared_books: n_workers > 0,
            hold: hold.clone(),
        };
        consumer_tasks.spawn_on(task.run(c), &consumer_homes[i]);
    }
    let mut listener_tasks = JoinSet::new();
    if let (Some(t), Some(tr)) = (&plan.tracking, &tracker) {
        let all = Arc::new(t.stages.clone());
        for (i, (c, q)) in listeners.into_iter().zip(&stage_queues).enumerate() {
            let task = stages::StageListener {
                id: base + i as u32,
                queue: q.queue.clone(),
                stages: all.clone(),
                mine: q.stages.clone(),
                key: t.key.clone(),
                tracker: tr.clone(),
                run_id: plan.run_id,
                t0_ns: t0,
                tick_ns,
                state: state.clone(),
                snapshots: snap_tx.clone(),
                stop: stop_rx.clone(),
            };
            listener_tasks.spawn_on(task.run(c), &listener_homes[i]);
        }
    }
    let tagging = (!plan.message.is_empty() || plan.tracking.is_some()).then(|| tagging::Tagging {
        message: plan.message.clone(),
        key: plan.tracking.as_ref().map(|t| t.key.clone()),
        tracker: tracker.clone(),
        ack_stage: plan.tracking.as_ref().and_then(|t| {
            t.stages
                .iter()
                .position(|s| s.source == StageSource::Ack)
                .map(|i| i as u16)
        }),
        n: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        run: plan.run_id,
    });
    // Rates and quotas split over the whole run's producers (all segments together).
    let nprod = plan.producers();
    let mut producer_tasks = JoinSet::new();
    let mut sent = Vec::new();
    let mut expects = Vec::new();
    let mut busy = Vec::new();
    for (local, p) in producers.into_iter().enumerate() {
        let i = producer_ids[local];
        agg.register_producer(i, receivers_of(i));
        let counter = Arc::new(OwnedCounter::default());
        sent.push(counter.clone());
        expects.push(receivers_of(i));
        let in_send = Arc::new(OwnedCounter::default());
        busy.push((i, in_send.clone()));
        let quota = match plan.measure {
            Measure::Messages(n) => {
                Some(n / nprod as u64 + u64::from((i as u64) < n % nprod as u64))
            }
            Measure::Duration(_) => None,
        };
        let seed = ((plan.run_id as u64) << 32) | i as u64;
        let task = ProducerTask {
            id: i,
            run_id: plan.run_id,
            streams: 1,
            pacer: Pacer::new(plan.rate.clone(), nprod, i, seed),
            quota,
            acks,
            responses: caps.responses,
            window: plan.max_in_flight,
            ack_timeout_ns: plan.ack_timeout.as_nanos() as u64,
            pacing: plan.pacing,
            t0_ns: t0,
            tick_ns,
            late_ns: plan.late_threshold.as_nanos() as u64,
            state: state.clone(),
            snapshots: snap_tx.clone(),
            sent: counter,
            busy: in_send,
            fatal: fatal_tx.clone(),
            tagging: tagging.clone(),
            tagger: None,
        };
        let payload = PayloadBuilder::with_plan(plan.size, &plan.payload, seed)
            .map_err(|m| RunError::Unsupported(format!("payload: {m}")))?;
        producer_tasks.spawn_on(task.run(p, payload), &producer_homes[local]);
    }
    drop(snap_tx);

    let sleep_to = |ns: u64| tokio::time::sleep_until(to_instant(ns));
    tokio::time::sleep_until(to_instant(t0)).await;
    agg.begin_phase(first_phase, 0.0);
    observer.event(&ev("phase", first_phase.name().into(), t0, t0));

    let grace_ns = (tick_ns / 10).min(100_000_000);
    let mut emitted: Option<u64> = None;
    let mut next_emit = t0 + tick_ns + grace_ns;
    let mut phase = first_phase;
    let mut drain_deadline: Option<u64> = None;
    let mut interrupted = false;
    // A segment may have no producers of its own (only consumers).
    let local_producers = !producer_ids.is_empty();
    let mut producers_done = !local_producers;
    let mut extra = Counters::default();
    let mut warnings = Vec::new();
    if let Some(w) = late {
        observer.event(&ev("warning", w.clone(), t0, t0));
        warnings.push(w);
    }
    // Segments cannot know what the other segments send: their drain ends once deliveries
    // stopped for a while (or at the drain timeout).
    let mut last_got = (0u64, 0u64);
    let mut producers_failed = 0u32;
    let mut expired_places = 0u64;
    let mut stalls = stall::StallWatch::new(busy);
    let mut cpu_mark = process_cpu_s();
    // When each phase began, for crediting CPU samples to the right phase.
    let mut timeline: Vec<(u64, Phase)> = vec![(t0, first_phase)];

    let emit = |agg: &mut Aggregator,
                upto: u64,
                emitted: &mut Option<u64>,
                observer: &mut dyn Observer| {
        for iv in agg.take_intervals(upto) {
            observer.interval(&iv);
        }
        *emitted = Some(emitted.map_or(upto, |e| e.max(upto)));
    };

    loop {
        let now = now_ns();
        // Phase transitions.
        if phase == Phase::Warmup && now >= warmup_end {
            let k = interval_before(warmup_end, t0, tick_ns, emitted);
            let cpu = process_cpu_s();
            agg.record_cpu(k, Phase::Warmup, cpu - cpu_mark);
            agg.record_lag(k, Phase::Warmup, lag::take_max_ns());
            cpu_mark = cpu;
            agg.end_phase(Phase::Warmup, secs(t0, warmup_end));
            agg.begin_phase(Phase::Measure, secs(t0, warmup_end));
            phase = Phase::Measure;
            timeline.push((warmup_end, phase));
            state.set_phase(phase);
            observer.event(&ev("phase", "measure".into(), now, t0));
        }
        // Count-bounded: when every producer sent its share. Time-bounded: at the end time, or
        // earlier if every producer had to stop.
        let measure_over = match measure_end {
            Some(end) => now >= end || (local_producers && producers_done),
            None if local_producers => producers_done,
            // A consumer-only segment of a count-bounded run: over once deliveries came and
            // stopped (or none came at all for a long while).
            None => {
                let got: u64 = distinct.iter().map(|d| d.get()).sum();
                if got != last_got.0 {
                    last_got = (got, now);
                }
                if got > 0 {
                    now.saturating_sub(last_got.1) >= SEGMENT_QUIET_NS
                } else {
                    now.saturating_sub(t0)
                        >= plan.drain.max(Duration::from_secs(10)).as_nanos() as u64
                }
            }
        };
        if phase == Phase::Measure && (measure_over || interrupted) {
            let at = measure_end.map_or(now, |e| e.min(now));
            let k = interval_before(at, t0, tick_ns, emitted);
            let cpu = process_cpu_s();
            agg.record_cpu(k, Phase::Measure, cpu - cpu_mark);
            agg.record_lag(k, Phase::Measure, lag::take_max_ns());
            cpu_mark = cpu;
            agg.end_phase(Phase::Measure, secs(t0, at));
            agg.begin_phase(Phase::Drain, secs(t0, at));
            phase = Phase::Drain;
            timeline.push((at, phase));
            state.set_phase(phase);
            state.set_boundaries(warmup_end.min(at), at);
            state.stop_producers();
            let drain = if interrupted {
                plan.drain.min(Duration::from_secs(2))
            } else {
                plan.drain
            };
            let deadline = now + drain.as_nanos() as u64;
            state.set_drain_deadline_ns(deadline);
            drain_deadline = Some(deadline);
            observer.event(&ev("phase", "drain".into(), now, t0));
        }
        if phase == Phase::Warmup && interrupted {
            let k = interval_before(now, t0, tick_ns, emitted);
            let cpu = process_cpu_s();
            agg.record_cpu(k, Phase::Warmup, cpu - cpu_mark);
            agg.record_lag(k, Phase::Warmup, lag::take_max_ns());
            cpu_mark = cpu;
            agg.end_phase(Phase::Warmup, secs(t0, now));
            agg.begin_phase(Phase::Drain, secs(t0, now));
            phase = Phase::Drain;
            timeline.push((now, phase));
            state.set_phase(phase);
            state.set_boundaries(now, now);
            state.stop_producers();
            let deadline = now + plan.drain.min(Duration::from_secs(2)).as_nanos() as u64;
            state.set_drain_deadline_ns(deadline);
            drain_deadline = Some(deadline);
            observer.event(&ev("phase", "drain".into(), now, t0));
        }
        // A backlog run: the consumers are released once the backlog is sent (or no more will
        // be), and the drain of the backlog is timed.
        if let Some(b) = backlog.as_mut().filter(|b| b.pending()) {
            let sent_now: u64 = sent.iter().map(|s| s.get()).sum();
            let got: u64 = distinct.iter().map(|d| d.get()).sum();
            let no_more = producers_done || phase == Phase::Drain || interrupted;
            if let Some(BacklogEvent::Released(m) | BacklogEvent::Drained(m)) = b.check(
                now,
                t0,
                sent_now,
                got,
                expects.first().copied().unwrap_or(receivers),
                no_more,
            ) {
                observer.event(&ev("backlog", m, now, t0));
            }
        }
        // Drain: done when producers finished and every expected delivery arrived.
        if let Some(deadline) = drain_deadline {
            let expected: u64 = sent.iter().zip(&expects).map(|(s, r)| s.get() * r).sum();
            let got: u64 = distinct.iter().map(|d| d.get()).sum();
            if got != last_got.0 || last_got.1 == 0 {
                last_got = (got, now);
            }
            let complete = if plan.segment.is_some() {
                producers_done && now.saturating_sub(last_got.1) >= SEGMENT_QUIET_NS
            } else {
                producers_done && got >= expected && tracker.as_ref().is_none_or(|t| t.live() == 0)
            };
            if complete || now >= deadline || shutdown.requests() >= 2 {
                if !complete {
                    warnings.push(if now >= deadline && let Some(t) = &tracker {
                        format!(
                            "drain timed out after {:?} with {} messages still short of a stage",
                            plan.drain,
                            t.live()
                        )
                    } else if now >= deadline {
                        format!(
                            "drain timed out after {:?} with {} of {} expected deliveries",
                            plan.drain, got, expected
                        )
                    } else {
                        "drain cut short by a second interrupt".to_string()
                    });
                }
                break;
            }
        }

        let wake = [
            next_emit,
            if phase == Phase::Warmup {
                warmup_end
            } else {
                u64::MAX
            },
            if phase == Phase::Measure {
                measure_end.unwrap_or(u64::MAX)
            } else {
                u64::MAX
            },
            if drain_deadline.is_some() {
                now + 5_000_000
            } else {
                u64::MAX
            },
            if backlog.as_ref().is_some_and(|b| b.pending()) {
                now + 10_000_000
            } else {
                u64::MAX
            },
        ]
        .into_iter()
        .min()
        .unwrap_or(u64::MAX);

        tokio::select! {
            Some(mut s) = snap_rx.recv() => {
                if let Some(e) = emitted && s.interval <= e {
                    s.interval = e + 1;
                }
                agg.add(&s);
            }
            Some(e) = events.recv() => {
                let kind = match e.kind {
                    DriverEventKind::Reconnected => { extra.reconnects += 1; "reconnected" }
                    DriverEventKind::Disconnected => { extra.errors.add(ErrorKind::Disconnect, 1); "disconnected" }
                    DriverEventKind::Error => "error",
                    DriverEventKind::Warning => "warning",
                };
                observer.event(&ev(kind, e.detail, now_ns(), t0));
            }
            Some(why) = fatal_rx.recv() => {
                producers_failed += 1;
                observer.event(&ev("error", why.clone(), now_ns(), t0));
                if !warnings.contains(&why) {
                    warnings.push(why);
                }
            }
            Some(_) = producer_tasks.join_next(), if !producers_done => {
                if producer_tasks.is_empty() {
                    producers_done = true;
                }
            }
            _ = sleep_to(wake) => {
                let now = now_ns();
                if now >= next_emit {
                    let k = (now - grace_ns - t0) / tick_ns;
                    let upto = k.saturating_sub(1);
                    // CPU since the last sample, credited to the interval being emitted, in the
                    // phase it ended in (a phase change in between took its own sample).
                    let cpu = process_cpu_s();
                    let idx = emitted.map_or(upto, |e| upto.max(e + 1));
                    let ended_in = timeline.iter().rev().find(|(start, _)| *start < t0 + (idx + 1) * tick_ns).map_or(phase, |(_, p)| *p);
                    agg.record_cpu(idx, ended_in, cpu - cpu_mark);
                    agg.record_lag(idx, ended_in, lag::take_max_ns());
                    cpu_mark = cpu;
                    if extra != Counters::default() {
                        let mut s = Snapshot { role: Role::Consumer, task: u32::MAX, phase, interval: upto,
                            counters: std::mem::take(&mut extra), hist: Default::default(), stages: Vec::new() };
                        if let Some(e) = emitted && s.interval <= e { s.interval = e + 1; }
                        agg.add(&s);
                    }
                    if let Some(t) = &tracker {
                        let n = t.expire_window(now.saturating_sub(plan.ack_timeout.as_nanos() as u64));
                        if n > 0 {
                            expired_places += n;
                            observer.event(&ev("warning", format!(
                                "{n} messages did not reach the window stage within {:?} (ack timeout): their window places were freed; they count as missing unless they arrive",
                                plan.ack_timeout), now, t0));
                        }
                    }
                    if let Some(m) = stalls.check(now) {
                        observer.event(&ev("warning", m, now, t0));
                    }
                    if emitted.is_none_or(|e| upto > e) || emitted.is_none() {
                        emit(&mut agg, upto, &mut emitted, observer);
                    }
                    next_emit = t0 + (k + 1) * tick_ns + grace_ns;
                }
            }
            _ = shutdown.reached(1), if !interrupted => {
                interrupted = true;
                observer.event(&ev("warning", "interrupted: stopping producers and draining".into(), now_ns(), t0));
            }
        }
    }

    // Stop everything and collect the final snapshots.
    let end = now_ns();
    state.stop_producers();
    state.set_drain_deadline_ns(end);
    state.stop_consumers();
    let _ = stop_tx.send(true);
    // Producers flush and close, consumers close: each bounded by the driver, normally within a
    // connect timeout or two. A producer blocked in a send the system under test never takes,
    // or a client that never closes, is stopped by force rather than hang the run.
    let grace = plan.connect_timeout * 2 + Duration::from_secs(2);
    for (what, set) in [
        ("producers", &mut producer_tasks),
        ("consumers", &mut consumer_tasks),
    ] {
        let (_, stuck) = stall::join_or_abort(set, grace, shutdown.reached(2)).await;
        if stuck > 0 {
            let why = format!(
                "{what}: {stuck} still running {grace:?} after the end (or at a second \
                 interrupt), blocked in the client: stopped by force; what they recorded since \
                 their last interval is missing"
            );
            observer.event(&ev("warning", why.clone(), now_ns(), t0));
            warnings.push(why);
        }
    }
    let mut unmatched = Vec::new();
    while let Some(r) = listener_tasks.join_next().await {
        if let Ok(u) = r
            && u.count > 0
        {
            unmatched.push(u);
        }
    }
    drop(workers);
    while let Some(s) = snap_rx.recv().await {
        agg.add(&s);
    }
    while let Ok(why) = fatal_rx.try_recv() {
        producers_failed += 1;
        observer.event(&ev("error", why.clone(), now_ns(), t0));
        if !warnings.contains(&why) {
            warnings.push(why);
        }
    }
    while let Ok(e) = events.try_recv() {
        observer.event(&RunEvent {
            at_s: secs(t0, now_ns()),
            kind: "event".into(),
            detail: e.detail,
        });
    }
    // A producer stopped by force (blocked in a send at a second interrupt or past the grace)
    // never gave its last snapshot: what it sent since is taken from its live counter, so the
    // delivery account stays exact (those sends have no bytes or latencies on record).
    let last_iv = interval_before(end, t0, tick_ns, emitted);
    for (local, counter) in sent.iter().enumerate() {
        let task = producer_ids[local];
        let missing = counter.get().saturating_sub(agg.producer_sent(task));
        if missing > 0 {
            agg.add(&Snapshot {
                role: Role::Producer,
                task,
                phase,
                interval: last_iv,
                counters: Counters {
                    sent: missing,
                    ..Default::default()
                },
                hist: Default::default(),
                stages: Vec::new(),
            });
        }
    }
    if extra != Counters::default() {
        agg.add(&Snapshot {
            role: Role::Consumer,
            task: u32::MAX,
            phase,
            interval: interval_before(end, t0, tick_ns, emitted),
            counters: extra,
            hist: Default::default(),
            stages: Vec::new(),
        });
    }
    let last = interval_before(end, t0, tick_ns, emitted);
    agg.record_cpu(last, phase, process_cpu_s() - cpu_mark);
    agg.record_lag(last, phase, lag::take_max_ns());
    agg.end_phase(phase, secs(t0, end));
    for iv in agg.take_all_intervals() {
        observer.interval(&iv);
    }
    observer.event(&ev("phase", "end".into(), now_ns(), t0));

    let phases: Vec<PhaseTotals> = Phase::ALL
        .iter()
        .filter(|p| agg.phase_started(**p))
        .map(|p| agg.totals(*p).clone())
        .collect();
    let integrity = agg.integrity();
    let all = agg.all_counters();
    // Generator health is judged per interval by the report, against the generator's own
    // threads (`msgbench_report::model::GeneratorHealth`).
    if all.late_sends > 0 {
        warnings.push(format!(
            "{} sends left later than {:?} after their intended time: the generator or backpressure could not keep the schedule",
            all.late_sends, plan.late_threshold
        ));
    }
    if all.errors.total() > 0 {
        warnings.push(format!("{} errors during the run", all.errors.total()));
    }
    if all.returned > 0 {
        warnings.push(format!(
            "{} messages came back unroutable (mandatory publishes no queue was bound for)",
            all.returned
        ));
    }
    let stage_ends = match (&plan.tracking, &tracker) {
        (Some(t), Some(tr)) => {
            let missing = tr.missing(t.stages.len());
            let mut totals: Vec<msgbench_metrics::StageStats> = Vec::new();
            for p in &phases {
                for (i, s) in p.stages.iter().enumerate() {
                    if totals.len() <= i {
                        totals.resize_with(i + 1, Default::default);
                    }
                    totals[i].counts.merge(&s.counts);
                }
            }
            let counts = |i: usize| totals.get(i).map(|s| s.counts).unwrap_or_default();
            let ends: Vec<msgbench_metrics::StageEnd> = t
                .stages
                .iter()
                .enumerate()
                .map(|(i, s)| msgbench_metrics::StageEnd {
                    name: s.name.clone(),
                    missing: if s.source == StageSource::Ack {
                        let c = counts(i);
                        all.sent.saturating_sub(c.reached + c.failed)
                    } else {
                        missing[i]
                    },
                    optional: s.optional,
                    failure: s.failure,
                    window: s.window,
                })
                .collect();
            for (i, e) in ends.iter().enumerate() {
                let c = counts(i);
                if e.missing > 0 && !e.optional && !e.failure {
                    warnings.push(format!(
                        "stage `{}`: {} messages never reached it",
                        e.name, e.missing
                    ));
                }
                let failed = if e.failure {
                    c.reached + c.failed
                } else {
                    c.failed
                };
                if failed > 0 {
                    warnings.push(format!("stage `{}`: {failed} messages failed", e.name));
                }
                if c.duplicates > 0 {
                    warnings.push(format!(
                        "stage `{}`: {} duplicate events",
                        e.name, c.duplicates
                    ));
                }
                if c.unknown > 0 {
                    warnings.push(format!(
                        "stage `{}`: {} events matched no message of this run",
                        e.name, c.unknown
                    ));
                }
            }
            if expired_places > 0 {
                warnings.push(format!(
                    "{expired_places} messages gave their window place back after the ack timeout ({:?}) without reaching the window stage",
                    plan.ack_timeout
                ));
            }
            for u in &unmatched {
                warnings.push(format!(
                    "queue {}: {} events matched no stage (bodies such as {})",
                    u.queue,
                    u.count,
                    u.samples
                        .iter()
                        .map(|s| format!("`{s}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            ends
        }
        _ => Vec::new(),
    };
    if all.foreign > 0 {
        // Say what to try: a system in the middle that rewrites or rejects what it relays
        // loses the stamp.
        let hint = if plan.payload.stamp == crate::payload::StampFormat::Binary {
            "if a system in the middle needs text or JSON, or re-encodes messages, try --stamp text or a --payload template with {{stamp}}"
        } else {
            "the system in the middle may drop or rewrite the text stamp (check the template keeps {{stamp}} inside a string), or they are replies from the server (subscription answers) or other publishers' messages"
        };
        warnings.push(format!(
            "{} deliveries were not this run's messages (foreign or truncated): {hint}",
            all.foreign
        ));
    }
    Ok(RunOutcome {
        started_unix_ms,
        duration_s: secs(t0, end),
        phases,
        integrity,
        interrupted,
        drain_complete: !warnings.iter().any(|w| w.starts_with("drain")),
        warnings,
        producers_failed,
        connections: None,
        stages: stage_ends,
        tcp: None,
        backlog: backlog.and_then(|b| b.summary(t0)),
    })
}
