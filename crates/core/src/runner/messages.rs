//! The coordinator of a message run, step by step:
//!
//! 1. [`check_plan`]: what the driver cannot do is refused before anything connects.
//! 2. [`connect`]: consumers first (their subscriptions are live before the first message),
//!    then the stage listeners, then the producers, each on the worker it will run on.
//! 3. [`MessageRun::release`]: the start barrier `t0` is set, every task is spawned to wait for
//!    it, so none gets a head start.
//! 4. [`MessageRun::drive`] (`drive`): warm-up, measure and drain, as the phase machine
//!    ([`super::phases`]) moves on, merging snapshots and emitting intervals every tick.
//! 5. [`MessageRun::finish`] (`finish`): every task stopped and joined (by force if it will not
//!    end), the last snapshots merged, the delivery account closed, the outcome written.
//!
//! The coordinator owns everything the tasks report into (snapshots, counters, producers'
//! failures); the tasks share only [`RunState`] with it, read with relaxed atomics on their
//! hot paths.

use super::EventKind;
use super::backlog::BacklogWatch;
use super::connect::{Ramp, connect_all, consumer_descriptors, consumer_ramp, process_cpu_s};
use super::consume::ConsumerTask;
use super::phases::Phases;
use super::produce::{ProducerNews, ProducerTask};
use super::stages::{StageListener, Unmatched};
use super::state::{OwnedCounter, RunState};
use super::together::Member;
use super::tracker::Tracker;
use super::workers::Workers;
use super::{MANY_CONSUMERS, Observer, RunError, RunEvent, RunOutcome, secs};
use crate::clock::{now_ns, to_instant, unix_ms};
use crate::driver::{Capabilities, ConsumerSpec, Driver, DriverEvent, ProducerSpec};
use crate::pacer::Pacer;
use crate::payload::PayloadBuilder;
use crate::scenario::{KeySource, Measure, RunPlan, StageQueue, StageSource, SubscriptionMode};
use crate::shutdown::Shutdown;
use msgbench_metrics::{Aggregator, ConnectFailures, Counters, ErrorKind, Snapshot};
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

/// Time between the start barrier being set and the load's release, for every task to be
/// spawned and waiting.
const LEAD_NS: u64 = 20_000_000;

/// Runs a message workload: [`check_plan`], [`connect`], release, drive, finish.
pub(super) async fn run_messages<D: Driver>(
    driver: Arc<D>,
    plan: &RunPlan,
    mut events: mpsc::UnboundedReceiver<DriverEvent>,
    observer: &mut dyn Observer,
    shutdown: Shutdown,
    member: Option<Member>,
) -> Result<RunOutcome, RunError> {
    let caps = driver.capabilities();
    check_plan(plan, &caps)?;
    let clients = connect(&driver, plan, observer, &shutdown).await?;
    let start = match &member {
        Some(m) => Some(m.start_instant(LEAD_NS).await),
        None => None,
    };
    let mut run = MessageRun::release(plan, &caps, clients, observer, start)?;
    if let Some(m) = &member {
        // A group without producers is done sending from the start: say so before the others
        // wait on it.
        m.post(0, 0, run.producers_done);
    }
    run.member = member;
    tokio::time::sleep_until(to_instant(run.t0)).await;
    run.begin(observer);
    run.drive(&mut events, observer, &shutdown).await;
    Ok(run.finish(&mut events, observer, &shutdown).await)
}

/// Refuses a plan the driver cannot carry out, before anything connects.
pub(super) fn check_plan(plan: &RunPlan, caps: &Capabilities) -> Result<(), RunError> {
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
    if plan.backlog.is_some() && plan.segment.is_some() {
        return Err(RunError::Unsupported(
            "--backlog in a segmented run: a segment cannot see what the others sent".into(),
        ));
    }
    Ok(())
}

/// A role's clients that connected, each with its global id and the worker it runs on.
pub(super) struct RoleClients<T> {
    pub clients: Vec<T>,
    pub ids: Vec<u32>,
    pub homes: Vec<Handle>,
}

/// Everything a message run connected, not yet started.
pub(super) struct Clients<D: Driver> {
    pub workers: Workers,
    /// Dedicated worker threads (0: the caller's runtime).
    pub n_workers: usize,
    pub consumers: RoleClients<D::Consumer>,
    /// Consumers' failed connection attempts, retried or given up.
    pub consumer_failures: ConnectFailures,
    /// Consumers that never connected (left out of the account).
    pub never_connected: usize,
    /// Consumers that connected, per topic (a producer's messages are expected by its topic's).
    pub connected_per_topic: Vec<u64>,
    /// Stage listeners, one per queue stages are observed on.
    pub listeners: RoleClients<D::Consumer>,
    pub stage_queues: Vec<StageQueue>,
    pub producers: RoleClients<D::Producer>,
    /// The producers' messages carry their payload ([`Driver::sends_payload`]).
    pub payload_sent: bool,
    /// When connecting began.
    pub connect_t: u64,
}

/// Connects a run's clients: consumers (ramped, patient, spread over source addresses), stage
/// listeners (cleaned of stale messages if the plan says so), then producers. Consumers that
/// never connect are reported and left out; any other failure to connect ends the run here.
pub(super) async fn connect<D: Driver>(
    driver: &Arc<D>,
    plan: &RunPlan,
    observer: &mut dyn Observer,
    shutdown: &Shutdown,
) -> Result<Clients<D>, RunError> {
    let connect_t = now_ns();
    // Every task runs on the worker its connection was made on. Many consumers get dedicated
    // workers even when none were asked for: they then share a recorder per thread (see
    // `consume`), which is what keeps thousands of them affordable.
    let n_workers = match plan.workers {
        0 if plan.consumers() > MANY_CONSUMERS => crate::available_cpus(),
        n => n,
    };
    let mut workers = Workers::start(n_workers)
        .map_err(|e| RunError::Unsupported(format!("cannot start worker threads: {e}")))?;
    let fd_free = consumer_descriptors(plan, &**driver, observer)?;
    let (consumers, consumer_failures, never_connected, connected_per_topic) =
        connect_consumers(driver, plan, &mut workers, fd_free, observer, shutdown).await?;
    let (listeners, stage_queues) =
        connect_listeners(driver, plan, &mut workers, observer, shutdown).await?;
    let producers = connect_producers(driver, plan, &mut workers, shutdown).await?;
    Ok(Clients {
        workers,
        n_workers,
        consumers,
        consumer_failures,
        never_connected,
        connected_per_topic,
        listeners,
        stage_queues,
        producers,
        payload_sent: driver.sends_payload(),
        connect_t,
    })
}

/// The ids of a role's clients this process runs: all of them, or a segment's share (every
/// task keeps its global index, see `scenario::segment`).
fn own_ids(n: u32, owns: impl Fn(u64) -> bool) -> Vec<u32> {
    (0..n).filter(|g| owns(*g as u64)).collect()
}

type ConnectedConsumers<C> = (RoleClients<C>, ConnectFailures, usize, Vec<u64>);

/// Connects the consumers: `consumers_per_topic` on each topic (or all on `--subscribe`).
async fn connect_consumers<D: Driver>(
    driver: &Arc<D>,
    plan: &RunPlan,
    workers: &mut Workers,
    fd_free: bool,
    observer: &mut dyn Observer,
    shutdown: &Shutdown,
) -> Result<ConnectedConsumers<D::Consumer>, RunError> {
    let ramp = &plan.consumer_ramp;
    let group = match &plan.subscription {
        SubscriptionMode::Fanout => None,
        SubscriptionMode::Queue { group } => Some(group.clone()),
    };
    let segment = plan.segment;
    let ids = own_ids(plan.consumers(), |g| {
        segment.is_none_or(|s| s.owns_consumer(g))
    });
    let lean = fd_free || ids.len() >= crate::driver::MANY_CONSUMERS;
    let specs = plan
        .topics
        .iter()
        .flat_map(|t| std::iter::repeat_n(t, plan.consumers_per_topic as usize))
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
            lean,
        });
    let connected = tokio::select! {
        r = connect_all(workers, specs, "consumer", plan.connect_timeout, consumer_ramp(plan),
                        |d, spec: ConsumerSpec| async move { d.consumer(&spec).await }, driver) => r?,
        _ = shutdown.reached(1) => return Err(RunError::Interrupted),
    };
    // Consumers that never connected are left out of the account (each message is expected
    // only by the receivers that subscribed) and reported.
    let never = connected.never.len();
    if let Some((_, why)) = connected.never.first() {
        observer.event(&RunEvent {
            at_s: 0.0,
            kind: EventKind::Warning,
            detail: format!(
                "{never} of {} consumers never connected (the run goes on without them; each \
                 message is expected by the consumers that did). First reason: {why}",
                never + connected.clients.len()
            ),
        });
    }
    // Failed attempts that were retried (whoever then connected) say why, once per reason.
    for (why, n) in &connected.reasons {
        observer.event(&RunEvent {
            at_s: 0.0,
            kind: EventKind::Warning,
            detail: format!("{n} consumer connection attempt(s) failed and were retried: {why}"),
        });
    }
    let mut per_topic = vec![0u64; plan.topics.len()];
    let mut role = RoleClients {
        clients: Vec::with_capacity(connected.clients.len()),
        ids: Vec::with_capacity(connected.clients.len()),
        homes: Vec::with_capacity(connected.clients.len()),
    };
    for (pos, c, h) in connected.clients {
        per_topic[ids[pos] as usize / plan.consumers_per_topic.max(1) as usize] += 1;
        role.ids.push(ids[pos]);
        role.clients.push(c);
        role.homes.push(h);
    }
    Ok((role, connected.failures, never, per_topic))
}

/// Connects one consumer per queue that stages are observed on (ids after the consumers'),
/// live before anything is sent, and cleans stale messages off them if the plan says so.
async fn connect_listeners<D: Driver>(
    driver: &Arc<D>,
    plan: &RunPlan,
    workers: &mut Workers,
    observer: &mut dyn Observer,
    shutdown: &Shutdown,
) -> Result<(RoleClients<D::Consumer>, Vec<StageQueue>), RunError> {
    let queues = plan
        .tracking
        .as_ref()
        .map(|t| t.queues())
        .unwrap_or_default();
    let base = plan.consumers();
    let specs = queues.iter().enumerate().map(|(i, q)| ConsumerSpec {
        id: base + i as u32,
        topic: q.queue.clone(),
        group: None,
        respond: false,
        meta: true,
        target: q.target.clone(),
        source: None,
        fd_free: false,
        lean: false,
    });
    let (mut clients, homes) = tokio::select! {
        r = connect_all(workers, specs, "stage listener", plan.connect_timeout, Ramp::default(),
                        |d, spec: ConsumerSpec| async move { d.consumer(&spec).await }, driver) => r?.split(),
        _ = shutdown.reached(1) => return Err(RunError::Interrupted),
    };
    if plan.tracking.as_ref().is_some_and(|t| t.clean) {
        for (c, q) in clients.iter_mut().zip(&queues) {
            let n = tokio::select! {
                n = super::stages::clean(c, Duration::from_secs(1), Duration::from_secs(60)) => n,
                _ = shutdown.reached(1) => return Err(RunError::Interrupted),
            };
            if n > 0 {
                observer.event(&RunEvent {
                    at_s: 0.0,
                    kind: EventKind::Warning,
                    detail: format!(
                        "cleaned {n} stale messages from queue {} before the run",
                        q.queue
                    ),
                });
            }
        }
    }
    let ids = (0..clients.len() as u32).map(|i| base + i).collect();
    Ok((
        RoleClients {
            clients,
            ids,
            homes,
        },
        queues,
    ))
}

/// Connects the producers: `producers_per_topic` on each topic, or as many as the topic's
/// popularity gives it.
async fn connect_producers<D: Driver>(
    driver: &Arc<D>,
    plan: &RunPlan,
    workers: &mut Workers,
    shutdown: &Shutdown,
) -> Result<RoleClients<D::Producer>, RunError> {
    let segment = plan.segment;
    let ids = own_ids(plan.producers(), |g| {
        segment.is_none_or(|s| s.owns_producer(g))
    });
    let placement = plan.producer_placement();
    let specs = plan
        .topics
        .iter()
        .zip(&placement)
        .flat_map(|(t, &n)| std::iter::repeat_n(t, n as usize))
        .enumerate()
        .filter(|(g, _)| segment.is_none_or(|s| s.owns_producer(*g as u64)))
        .map(|(id, topic)| ProducerSpec {
            id: id as u32,
            topics: vec![topic.clone()],
            request_reply: plan.request_reply,
            max_in_flight: plan.max_in_flight,
        });
    let (clients, homes) = tokio::select! {
        r = connect_all(workers, specs, "producer", plan.connect_timeout, Ramp::default(),
                        |d, spec: ProducerSpec| async move { d.producer(&spec).await }, driver) => r?.split(),
        _ = shutdown.reached(1) => return Err(RunError::Interrupted),
    };
    Ok(RoleClients {
        clients,
        ids,
        homes,
    })
}

/// The tasks of a running message run.
pub(super) struct Tasks {
    pub producers: JoinSet<()>,
    pub consumers: JoinSet<()>,
    pub listeners: JoinSet<Unmatched>,
}

/// A message run from its release on: what the coordinator watches, merges and decides.
pub(super) struct MessageRun<'p> {
    pub plan: &'p RunPlan,
    /// The start barrier: every task begins at this instant.
    pub t0: u64,
    pub tick_ns: u64,
    pub started_unix_ms: u64,
    pub phases: Phases,
    pub state: Arc<RunState>,
    pub agg: Aggregator,
    pub snapshots: mpsc::UnboundedReceiver<Snapshot>,
    /// Tells consumers and stage listeners to finish.
    pub stop: watch::Sender<bool>,
    /// Producers whose sends began failing, or that had to stop, and why.
    pub news: mpsc::UnboundedReceiver<ProducerNews>,
    /// How many times producers' sends beginning to fail were reported (see
    /// [`MessageRun::producer_news`]).
    pub failing_told: u32,
    /// The worker threads (taken when the run ends: their runtimes stop with them).
    pub workers: Option<Workers>,
    pub tasks: Tasks,
    /// Each local producer's global id, its live count of messages sent and how many
    /// deliveries each of them is expected to make.
    pub producer_ids: Vec<u32>,
    pub sent: Vec<Arc<OwnedCounter>>,
    pub expects: Vec<u64>,
    /// Each consumer's live count of distinct deliveries.
    pub distinct: Vec<Arc<OwnedCounter>>,
    /// Receivers of each message when every consumer connected.
    pub receivers: u64,
    pub tracker: Option<Arc<Tracker>>,
    pub backlog: Option<BacklogWatch>,
    pub stalls: super::stall::StallWatch,
    /// The last interval handed to the observer.
    pub emitted: Option<u64>,
    pub next_emit: u64,
    /// How long after a tick its interval is emitted (late snapshots still make it).
    pub grace_ns: u64,
    pub interrupted: bool,
    /// A count-bounded run whose every producer the system under test held in one send for
    /// [`super::produce::GIVE_UP_NS`]: it ends as an interrupted one would (drain, report),
    /// each producer counted as stopped.
    pub gave_up: bool,
    /// Whether this process runs producers (a segment may run only consumers).
    pub local_producers: bool,
    pub producers_done: bool,
    /// Counts of no task's own (reconnections, disconnections), merged at the next tick.
    pub extra: Counters,
    pub warnings: Vec<String>,
    /// The drain ended before every expected delivery arrived.
    pub drain_short: bool,
    /// A run with groups: this group's handle on the run's start and delivery account.
    pub member: Option<Member>,
    /// Deliveries last seen and when they last changed (a segment's drain ends on quiet).
    pub last_got: (u64, u64),
    pub producers_failed: u32,
    /// Messages whose window place was freed at the ack timeout (multi-stage runs).
    pub expired_places: u64,
    /// Process CPU seconds at the last sample.
    pub cpu_mark: f64,
    /// The last interval whose CPU was sampled at (or just after) its end: its tick, if
    /// still to come, credits what follows to the interval then running instead.
    pub cpu_upto: Option<u64>,
}

impl<'p> MessageRun<'p> {
    /// Sets the start barrier (at `start` when the run's groups chose it) and spawns every task
    /// to wait for it: consumers, stage listeners, then producers, each on its client's worker.
    pub fn release<D: Driver>(
        plan: &'p RunPlan,
        caps: &Capabilities,
        c: Clients<D>,
        observer: &mut dyn Observer,
        start: Option<u64>,
    ) -> Result<MessageRun<'p>, RunError> {
        let tick_ns = plan.tick.as_nanos() as u64;
        let (t0, late) = match start {
            Some(t0) => (t0, None),
            None => super::release::release_instant(plan, LEAD_NS),
        };
        let started_unix_ms = unix_ms() + (t0.saturating_sub(now_ns())) / 1_000_000;
        observer.event(&RunEvent {
            at_s: secs(t0, now_ns()),
            kind: EventKind::Connected,
            detail: format!(
                "{} producers, {} consumers connected in {:.3}s",
                c.producers.clients.len(),
                c.consumers.clients.len(),
                secs(c.connect_t, now_ns())
            ),
        });
        let phases = Phases::new(t0, plan.warmup, &plan.measure, plan.drain);
        let state = Arc::new(RunState::default());
        state.set_phase(phases.first());
        state.set_boundaries(
            phases.warmup_end(),
            phases.measure_end().unwrap_or(u64::MAX),
        );
        let (snap_tx, snapshots) = mpsc::unbounded_channel::<Snapshot>();
        let (stop, stop_rx) = watch::channel(false);
        let (news_tx, news) = mpsc::unbounded_channel::<ProducerNews>();
        let mut agg = Aggregator::new(plan.tick.as_secs_f64());
        // Consumers' failed connection attempts (retried, or never connected) happened before
        // t0: they count in the first phase.
        if c.consumer_failures.total() > 0 {
            agg.add(&no_task_snapshot(
                phases.first(),
                0,
                connect_failures(c.consumer_failures),
            ));
        }
        let (backlog, hold) = match plan.backlog {
            Some(b) => {
                let (w, gate) = BacklogWatch::new(b, plan.size.mean());
                (Some(w), Some(gate))
            }
            None => (None, None),
        };
        let tracker = tracker_of(plan);
        let shared = Shared {
            plan,
            t0,
            tick_ns,
            state: &state,
            snapshots: &snap_tx,
            stop: &stop_rx,
        };
        let (consumers, distinct) = shared.spawn_consumers(c.consumers, c.n_workers > 0, hold);
        let listeners = shared.spawn_listeners(c.listeners, &c.stage_queues, &tracker);
        let receivers = plan.receivers_per_message();
        let receivers_of = |producer: u32| {
            receivers_of(
                plan,
                receivers,
                c.never_connected,
                &c.connected_per_topic,
                producer,
            )
        };
        let local_producers = !c.producers.ids.is_empty();
        let producer_ids = c.producers.ids.clone();
        for &i in &producer_ids {
            agg.register_producer(i, receivers_of(i));
        }
        let expects = producer_ids.iter().map(|&i| receivers_of(i)).collect();
        let (producers, sent, busy) =
            shared.spawn_producers(c.producers, caps, c.payload_sent, &tracker, &news_tx)?;
        drop(snap_tx);
        let mut warnings = Vec::new();
        if let Some(w) = late {
            observer.event(&RunEvent {
                at_s: 0.0,
                kind: EventKind::Warning,
                detail: w.clone(),
            });
            warnings.push(w);
        }
        Ok(MessageRun {
            plan,
            t0,
            tick_ns,
            started_unix_ms,
            phases,
            state,
            agg,
            snapshots,
            stop,
            news,
            failing_told: 0,
            workers: Some(c.workers),
            tasks: Tasks {
                producers,
                consumers,
                listeners,
            },
            producer_ids,
            sent,
            expects,
            distinct,
            receivers,
            tracker,
            backlog,
            stalls: super::stall::StallWatch::new(busy),
            emitted: None,
            grace_ns: (tick_ns / 10).min(100_000_000),
            next_emit: t0 + tick_ns + (tick_ns / 10).min(100_000_000),
            interrupted: false,
            gave_up: false,
            local_producers,
            producers_done: !local_producers,
            extra: Counters::default(),
            warnings,
            drain_short: false,
            member: None,
            last_got: (0, 0),
            producers_failed: 0,
            expired_places: 0,
            cpu_mark: process_cpu_s(),
            cpu_upto: None,
        })
    }
}

/// The multi-stage tracker of a run with stages.
fn tracker_of(plan: &RunPlan) -> Option<Arc<Tracker>> {
    plan.tracking.as_ref().map(|t| {
        let flags: Vec<(bool, bool)> = t
            .stages
            .iter()
            .map(|s| (s.source != StageSource::Ack, s.required()))
            .collect();
        let window = t
            .window_stage()
            .map(|w| (w as u16, plan.max_in_flight as u64));
        Arc::new(Tracker::new(&flags, window))
    })
}

/// Counts of failed connection attempts, as connection errors.
fn connect_failures(failures: ConnectFailures) -> Counters {
    let mut counters = Counters {
        connect_failures: failures,
        ..Default::default()
    };
    counters.errors.add(ErrorKind::Connect, failures.total());
    counters
}

/// An event of the run that started at `t0`, happening at `at` (monotonic ns).
pub(super) fn run_event(t0: u64, kind: EventKind, detail: String, at: u64) -> RunEvent {
    RunEvent {
        at_s: secs(t0, at),
        kind,
        detail,
    }
}

/// A snapshot of counts that belong to no task (connection failures, reconnections).
pub(super) fn no_task_snapshot(
    phase: msgbench_metrics::Phase,
    interval: u64,
    counters: Counters,
) -> Snapshot {
    Snapshot {
        role: msgbench_metrics::Role::Consumer,
        task: u32::MAX,
        phase,
        interval,
        counters,
        warmup_outcomes: Counters::default(),
        hist: Default::default(),
        stages: Vec::new(),
    }
}

/// How many deliveries each message of `producer` is expected to make: its topic's consumers
/// that connected (all of them on a `--subscribe` pattern; one in a queue group), and in a run
/// with groups, the other groups' receivers of its topic.
fn receivers_of(
    plan: &RunPlan,
    receivers: u64,
    never_connected: usize,
    connected_per_topic: &[u64],
    producer: u32,
) -> u64 {
    let topic = crate::popularity::Popularity::topic_of(&plan.producer_placement(), producer);
    let elsewhere = plan.group.as_ref().map_or(0, |g| g.elsewhere(topic));
    if never_connected == 0 {
        return receivers + elsewhere;
    }
    let all: u64 = connected_per_topic.iter().sum();
    let mine = connected_per_topic[topic];
    elsewhere
        + match (&plan.subscription, plan.subscribe.is_some()) {
            (SubscriptionMode::Fanout, true) => all,
            (SubscriptionMode::Fanout, false) => mine,
            (SubscriptionMode::Queue { .. }, true) => u64::from(all > 0),
            (SubscriptionMode::Queue { .. }, false) => u64::from(mine > 0),
        }
}

/// What every task of a run is given.
struct Shared<'a> {
    plan: &'a RunPlan,
    t0: u64,
    tick_ns: u64,
    state: &'a Arc<RunState>,
    snapshots: &'a mpsc::UnboundedSender<Snapshot>,
    stop: &'a watch::Receiver<bool>,
}

impl Shared<'_> {
    /// Spawns the consumers; their live counts of distinct deliveries.
    fn spawn_consumers<C: crate::driver::Consumer>(
        &self,
        role: RoleClients<C>,
        shared_books: bool,
        hold: Option<watch::Receiver<bool>>,
    ) -> (JoinSet<()>, Vec<Arc<OwnedCounter>>) {
        let mut set = JoinSet::new();
        let mut distinct = Vec::with_capacity(role.clients.len());
        let group = matches!(self.plan.subscription, SubscriptionMode::Queue { .. })
            .then(msgbench_metrics::GroupSeen::new);
        for ((c, id), home) in role.clients.into_iter().zip(role.ids).zip(&role.homes) {
            let counter = Arc::new(OwnedCounter::default());
            distinct.push(counter.clone());
            let task = ConsumerTask {
                id,
                run_id: self.plan.run_id,
                t0_ns: self.t0,
                tick_ns: self.tick_ns,
                state: self.state.clone(),
                snapshots: self.snapshots.clone(),
                distinct: counter,
                stop: self.stop.clone(),
                group: group.clone(),
                shared_books,
                hold: hold.clone(),
                work: self.plan.consumer_work,
            };
            set.spawn_on(task.run(c), home);
        }
        (set, distinct)
    }

    /// Spawns the stage listeners.
    fn spawn_listeners<C: crate::driver::Consumer>(
        &self,
        role: RoleClients<C>,
        queues: &[StageQueue],
        tracker: &Option<Arc<Tracker>>,
    ) -> JoinSet<Unmatched> {
        let mut set = JoinSet::new();
        let (Some(t), Some(tr)) = (&self.plan.tracking, tracker) else {
            return set;
        };
        let all = Arc::new(t.stages.clone());
        for (((c, id), home), q) in role
            .clients
            .into_iter()
            .zip(role.ids)
            .zip(&role.homes)
            .zip(queues)
        {
            let task = StageListener {
                id,
                queue: q.queue.clone(),
                stages: all.clone(),
                mine: q.stages.clone(),
                key: t.key.clone(),
                tracker: tr.clone(),
                run_id: self.plan.run_id,
                t0_ns: self.t0,
                tick_ns: self.tick_ns,
                state: self.state.clone(),
                snapshots: self.snapshots.clone(),
                stop: self.stop.clone(),
            };
            set.spawn_on(task.run(c), home);
        }
        set
    }

    /// Spawns the producers, rates and quotas split over the whole run's producers (all
    /// segments together); their live counts of messages sent, and of sends in progress (for
    /// the stall watch).
    #[allow(clippy::type_complexity)]
    fn spawn_producers<P: crate::driver::Producer>(
        &self,
        role: RoleClients<P>,
        caps: &Capabilities,
        payload_sent: bool,
        tracker: &Option<Arc<Tracker>>,
        news: &mpsc::UnboundedSender<ProducerNews>,
    ) -> Result<
        (
            JoinSet<()>,
            Vec<Arc<OwnedCounter>>,
            Vec<(u32, Arc<OwnedCounter>)>,
        ),
        RunError,
    > {
        let plan = self.plan;
        let tagging = (!plan.message.is_empty() || plan.tracking.is_some()).then(|| {
            super::tagging::Tagging {
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
            }
        });
        let nprod = plan.producers();
        let mut set = JoinSet::new();
        let mut sent = Vec::with_capacity(role.clients.len());
        let mut busy = Vec::with_capacity(role.clients.len());
        for ((p, i), home) in role.clients.into_iter().zip(role.ids).zip(&role.homes) {
            let counter = Arc::new(OwnedCounter::default());
            sent.push(counter.clone());
            let in_send = Arc::new(OwnedCounter::default());
            busy.push((i, in_send.clone()));
            let quota = match plan.measure {
                Measure::Messages(n) => {
                    Some(n / nprod as u64 + u64::from((i as u64) < n % nprod as u64))
                }
                Measure::Duration(_) => None,
            };
            let stamp_id = i + plan.group.as_ref().map_or(0, |g| g.stamp_base);
            let seed = ((plan.run_id as u64) << 32) | stamp_id as u64;
            let task = ProducerTask {
                id: i,
                stamp_id,
                run_id: plan.run_id,
                streams: 1,
                pacer: Pacer::new(plan.rate.clone(), nprod, i, seed),
                quota,
                acks: caps.acks || plan.request_reply,
                responses: caps.responses,
                window: plan.max_in_flight,
                payload_sent,
                ack_timeout_ns: plan.ack_timeout.as_nanos() as u64,
                pacing: plan.pacing,
                t0_ns: self.t0,
                tick_ns: self.tick_ns,
                late_ns: plan.late_threshold.as_nanos() as u64,
                state: self.state.clone(),
                snapshots: self.snapshots.clone(),
                sent: counter,
                busy: in_send,
                news: news.clone(),
                tagging: tagging.clone(),
                tagger: None,
            };
            let payload = PayloadBuilder::with_plan(&plan.size, &plan.payload, seed)
                .map_err(|m| RunError::Unsupported(format!("payload: {m}")))?;
            set.spawn_on(task.run(p, payload), home);
        }
        Ok((set, sent, busy))
    }
}
