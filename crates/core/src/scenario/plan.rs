//! The resolved, validated description of a run: what the runner executes and what the results
//! file records (with credentials removed).

use super::{ConnectionMode, ConsumerMode, RateSpec, Scenario};
use crate::pacer::RateShape;
use crate::payload::{Content, PayloadPlan, SizeSpec, StampFormat};
use crate::units::{parse_duration, serde_duration};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How the measure phase ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// After this long.
    Duration(#[serde(with = "serde_duration")] Duration),
    /// After this many messages (all producers together) have been sent.
    Messages(u64),
}

/// How a paced producer waits for each message's intended send time. Either way no message is
/// sent early and every latency counts from the intended time; the modes trade generator CPU
/// for how late sends may be (recorded as send delay).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pacing {
    /// Wake on a 50 µs grid with a kernel timer: little CPU (safe next to a broker on the same
    /// machine); sends are typically tens of µs late.
    #[default]
    Efficient,
    /// Timer until 300 µs before (kernel timers on VMs wake ~100 µs late), then yield in a
    /// loop: sends within a few µs of their
    /// intended time, at the cost of a busy core for producers with sub-100 µs gaps.
    Precise,
}

/// How connections do their socket I/O.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IoMode {
    /// Readiness polling (epoll): each send and each receive is a system call of its own.
    #[default]
    Readiness,
    /// Plain TCP connections of each worker thread share one io_uring, and their sends and
    /// receives go to the kernel together, one system call per pass of the worker
    /// (msgbench-net's `batch`). Needs worker threads; where io_uring cannot be set up the run
    /// says so once and falls back to readiness polling.
    Batched,
}

impl IoMode {
    /// The default (left out of the results file).
    pub fn is_default(&self) -> bool {
        *self == IoMode::Readiness
    }
}

/// How the consumers of one topic share it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum SubscriptionMode {
    /// Every consumer receives every message.
    Fanout,
    /// Each message goes to one consumer of the group.
    Queue {
        /// Queue group name.
        group: String,
    },
}

/// Settings of each protocol client; each driver uses the ones its protocol has.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientPlan {
    /// Client identifier pattern: `{run}`, `{role}` (`pub`, `sub`, `conn`) and `{i}` are
    /// replaced.
    pub client_id: String,
    /// Keep-alive / heartbeat interval.
    #[serde(with = "serde_duration")]
    pub keep_alive: Duration,
    /// Protocol version, where the protocol offers a choice (`None` = the driver's default).
    pub version: Option<String>,
    /// Delivery guarantee level (MQTT QoS).
    pub qos: u8,
    /// Publish retained messages.
    pub retain: bool,
    /// Keep sessions across connections.
    pub persistent_session: bool,
    /// Message receiving clients send after connecting (`{i}`, `{topic}` replaced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hello: Option<String>,
    /// MQTT QoS 1/2 consumers write their acknowledgements this many at a time (at most 1 ms
    /// late); 1 = each as soon as the consumer has read what arrived.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub ack_every: u32,
    /// Send each handshake step before the previous answer arrives where the protocol allows
    /// it (AMQP 0-9-1 channel.open with connection.open, AMQP 1.0 begin with open): one round
    /// trip less per connection, but intermediaries that terminate the handshake (amqpprox)
    /// stall. Default false: every step waits for the answer it depends on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pipeline_handshake: bool,
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

impl ClientPlan {
    /// The client id for one client of a run.
    pub fn client_id_for(&self, run_id: u32, role: &str, i: u64) -> String {
        self.client_id
            .replace("{run}", &format!("{run_id:08x}"))
            .replace("{role}", role)
            .replace("{i}", &i.to_string())
    }
}

/// TLS settings for TLS targets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsPlan {
    /// CA file to trust instead of the system roots.
    pub ca_file: Option<std::path::PathBuf>,
    /// Client certificate chain (PEM).
    pub cert_file: Option<std::path::PathBuf>,
    /// Client private key (PEM).
    pub key_file: Option<std::path::PathBuf>,
    /// Skip server certificate verification.
    pub insecure: bool,
}

/// A connection-scale workload (instead of pub/sub).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionPlan {
    /// Hold or storm.
    pub mode: ConnectionMode,
    /// Hold: connections to open. Storm: cycles to run (`None` = until the measure duration).
    pub count: Option<u64>,
    /// Connection attempts per second (`None` = as fast as `concurrency` allows).
    pub rate: Option<f64>,
    /// Hold: how long to keep the connections after the ramp.
    #[serde(with = "serde_duration")]
    pub hold: Duration,
    /// Attempts in flight at once.
    pub concurrency: u32,
    /// Messages per connection (storm: per cycle).
    pub messages: u32,
    /// Hold: each connection publishes once per this interval.
    #[serde(default, with = "crate::units::serde_opt_duration")]
    pub publish_interval: Option<Duration>,
    /// Local addresses connections are spread over (round robin); empty = system choice.
    pub source_addrs: Vec<std::net::IpAddr>,
    /// Hold: when (from the start of the measure phase) every held connection is dropped and
    /// opened again at once, a reconnect storm.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::units::serde_opt_duration"
    )]
    pub reconnect_at: Option<Duration>,
    /// Hold: held connections dropped per second from the ramp's end, one at a time (the next
    /// held one round the fleet), each opened again at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub churn: Option<f64>,
    /// Journey: the steps each virtual user runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub journey: Vec<super::journey::Step>,
    /// Journey: passes per user (0: until the measure phase ends).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub repeat: u32,
    /// How attempts are spread at `rate`.
    #[serde(default, skip_serializing_if = "is_constant")]
    pub arrival: super::Arrival,
}

/// Serde: constant arrivals (the default) are left out of the results file.
fn is_constant(a: &super::Arrival) -> bool {
    *a == super::Arrival::Constant
}

/// How a message run's consumers connect (`[connections] rate` and `source_addrs` without a
/// connection workload): at scale, all at once would only measure the server's listen backlog,
/// and one source address runs out of ports near 28,000 connections.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientRamp {
    /// Consumers started per second (`None` = all at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Local addresses consumers are spread over (round robin); empty = system choice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source_addrs: Vec<std::net::IpAddr>,
}

impl ClientRamp {
    /// All at once, from the system's choice of address (what a plan without one means).
    pub fn is_default(&self) -> bool {
        self == &ClientRamp::default()
    }
}

/// A fully resolved run: defaults applied, every cross-field rule checked. (Unknown keys of a
/// results file's plan land in [`RunPlan::drivers`]: serde cannot refuse them beside a
/// flattened map.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunPlan {
    /// Name shown in reports.
    pub name: String,
    /// Labels for finding the run again (scenario `tags`, `--tag`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Target URL. May contain credentials: use [`RunPlan::redacted`] before printing or writing
    /// (and [`RunPlan::secrets`] to scrub free text).
    pub target: String,
    /// Where consumers connect when it is not `target` (a cross-protocol pipeline); may
    /// contain credentials too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consume_from: Option<String>,
    /// Identifies this run's messages (written in every stamp).
    pub run_id: u32,
    /// Topic names.
    pub topics: Vec<String>,
    /// Producers per topic (on average: see `topic_popularity`).
    pub producers_per_topic: u32,
    /// How the producers (`producers_per_topic` × topics) spread over the topics.
    #[serde(default, skip_serializing_if = "is_uniform")]
    pub topic_popularity: crate::popularity::Popularity,
    /// Consumers per topic.
    pub consumers_per_topic: u32,
    /// Fan-out or queue group.
    pub subscription: SubscriptionMode,
    /// Request/reply: consumers respond, producers measure the round trip.
    pub request_reply: bool,
    /// Message size, stamp included.
    pub size: SizeSpec,
    /// The stamp's form and the message template (default: binary stamp, random bytes).
    #[serde(default, skip_serializing_if = "PayloadPlan::is_default")]
    pub payload: PayloadPlan,
    /// Offered load, all producers together.
    pub rate: RateShape,
    /// How paced sends wait for their intended time.
    pub pacing: Pacing,
    /// Unacknowledged messages allowed per producer.
    pub max_in_flight: usize,
    /// How long a producer waits for an ack before counting a timeout.
    #[serde(with = "serde_duration")]
    pub ack_timeout: Duration,
    /// Warm-up length.
    #[serde(with = "serde_duration")]
    pub warmup: Duration,
    /// How the measure phase ends.
    pub measure: Measure,
    /// Longest wait for in-flight messages after the last send.
    #[serde(with = "serde_duration")]
    pub drain: Duration,
    /// Consumers held back until this backlog is built (`--backlog`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog: Option<BacklogPlan>,
    /// Interval between live lines and `interval` records.
    #[serde(with = "serde_duration")]
    pub tick: Duration,
    /// A send later than this after its intended time counts as late.
    #[serde(with = "serde_duration")]
    pub late_threshold: Duration,
    /// Connect timeout per client.
    #[serde(with = "serde_duration")]
    pub connect_timeout: Duration,
    /// Worker threads producers and consumers run on, one single-threaded runtime each; 0 runs
    /// them on the shared work-stealing runtime (one thread per CPU). Left out, it follows
    /// [`super::colocated::default_workers`].
    pub workers: usize,
    /// How connections do their socket I/O (process-wide: the first plan's).
    #[serde(default, skip_serializing_if = "IoMode::is_default")]
    pub io: IoMode,
    /// Consumers subscribe to this filter instead of their topic (wildcards).
    pub subscribe: Option<String>,
    /// Protocol client settings.
    pub client: ClientPlan,
    /// TLS settings.
    pub tls: TlsPlan,
    /// A connection workload replaces pub/sub when set.
    pub connections: Option<ConnectionPlan>,
    /// How a message run's consumers connect.
    #[serde(default, skip_serializing_if = "ClientRamp::is_default")]
    pub consumer_ramp: ClientRamp,
    /// What each consumer does with a delivery before taking the next (nothing by default).
    #[serde(default, skip_serializing_if = "ConsumerWork::is_default")]
    pub consumer_work: ConsumerWork,
    /// Each driver's own options, resolved, by section name (`amqp`, `kafka`, ...): filled by
    /// [`SectionSpec::resolve`](super::SectionSpec) for every driver the binary knows, read
    /// back by the driver when it is built. Flattened, so the results file keeps one key per
    /// driver as it always had.
    #[serde(flatten)]
    pub drivers: super::DriverPlans,
    /// Ids and properties sent with every message.
    #[serde(default, skip_serializing_if = "super::stages::MessagePlan::is_empty")]
    pub message: super::stages::MessagePlan,
    /// Multi-stage tracking (runs with `[[stages]]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracking: Option<super::stages::TrackingPlan>,
    /// Segmented runs: which slice of the whole plan this process runs (the rest of the plan
    /// always describes the whole run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment: Option<super::segment::Segment>,
    /// Release the load at this wall-clock instant (Unix ms) instead of as soon as connected,
    /// so the segments of a run start together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at_unix_ms: Option<u64>,
    /// A run with groups: this plan's group and its place among them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<super::groups::GroupPlace>,
    /// Pass/fail conditions on the result (`e2e.p99 < 10ms`), judged at the end into the
    /// `end` record's verdicts; parsed and checked by `msgbench_report::verdict`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thresholds: Vec<String>,
    /// Judge the thresholds during the measure phase too and stop at the first failure.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub threshold_abort: bool,
    /// Header-name globs whose values are hidden like the built-in credential headers (see
    /// [`crate::redact`]); already checked by [`crate::redact::HeaderRule::new`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redact_headers: Vec<String>,
}

/// Slow consumers: time spent on each delivery and a cap on the rate they take them at, so a
/// run can show a system building (and draining) a backlog as real consumers make it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsumerWork {
    /// Time spent on each delivery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processing: Option<Processing>,
    /// Most deliveries per second, per consumer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
}

impl ConsumerWork {
    /// Consumers take each delivery as soon as it comes.
    pub fn is_default(&self) -> bool {
        *self == ConsumerWork::default()
    }
}

/// How long a consumer works on one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Processing {
    /// Always this long.
    Fixed(#[serde(with = "serde_duration")] Duration),
    /// Exponentially distributed with this mean (a service time with no memory).
    Exponential(#[serde(with = "serde_duration")] Duration),
}

/// A backlog to build before the consumers start reading (OpenMessaging Benchmark's
/// `consumerBacklogSizeGB`): consumers subscribe as usual (so the system keeps what is sent for
/// them) but take nothing until producers have sent `messages`, then are released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BacklogPlan {
    /// The size asked for, in bytes.
    pub bytes: u64,
    /// The same in messages (bytes over the mean message size, at least 1).
    pub messages: u64,
}

/// Why a scenario cannot run, naming the setting at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting}: {message}")]
pub struct PlanError {
    /// Dotted scenario key (the matching flag is named in the message where there is one).
    pub setting: &'static str,
    /// What is wrong and what would be accepted.
    pub message: String,
}

fn err(setting: &'static str, message: impl Into<String>) -> PlanError {
    PlanError {
        setting,
        message: message.into(),
    }
}

fn duration(
    setting: &'static str,
    v: &Option<String>,
    default: Duration,
) -> Result<Duration, PlanError> {
    match v {
        None => Ok(default),
        Some(s) => parse_duration(s).map_err(|m| err(setting, m)),
    }
}

/// Default target when none is given: the in-process broker.
pub const DEFAULT_TARGET: &str = "mem://";

/// Turns a scenario (file and flags already overlaid) into a validated plan. `run_id` is chosen
/// by the caller (random in the CLI, fixed in tests).
pub fn resolve(s: &Scenario, run_id: u32) -> Result<RunPlan, PlanError> {
    let (target, consume_from) = resolve_targets(s)?;
    let topics = resolve_topics(s)?;
    let topic_popularity = match &s.topics.popularity {
        None => crate::popularity::Popularity::Uniform,
        Some(v) => {
            crate::popularity::Popularity::parse(v).map_err(|m| err("topics.popularity", m))?
        }
    };

    let producers_per_topic = s.producers.per_topic.unwrap_or(1);
    if producers_per_topic == 0 && !s.member {
        return Err(err(
            "producers.per_topic",
            "need at least one producer (--producers; only a group of several may have none)",
        ));
    }
    let consumers_per_topic = s.consumers.per_topic.unwrap_or(1);
    let request_reply = s.producers.request_reply.unwrap_or(false);
    if request_reply && consumers_per_topic == 0 {
        return Err(err(
            "producers.request_reply",
            "request/reply needs at least one responding consumer",
        ));
    }
    let subscription = resolve_subscription(s, request_reply)?;

    let mut size = resolve_size(s)?;
    let payload = resolve_payload(s, &mut size)?;

    let rate = resolve_rate(s)?;

    let (max_in_flight, ack_timeout) = resolve_ack_window(s)?;
    let backlog = resolve_backlog(
        s,
        &size,
        producers_per_topic,
        consumers_per_topic,
        request_reply,
    )?;
    // The backlog counts every message sent, warm-up included: without one asked for, a
    // backlog run has no warm-up (its first messages are the backlog's).
    let warmup_default = if backlog.is_some() {
        Duration::ZERO
    } else {
        Duration::from_secs(1)
    };
    let warmup = duration("phases.warmup", &s.phases.warmup, warmup_default)?;
    let measure = resolve_measure(s)?;
    let drain = duration("phases.drain", &s.phases.drain, Duration::from_secs(5))?;
    let (tick, late_threshold, connect_timeout) = resolve_output_times(s)?;

    let client = resolve_client(s)?;
    let tls = resolve_tls(s)?;
    let (connections, consumer_ramp) = resolve_connections(s)?;
    let consumer_work = resolve_consumer_work(s)?;
    if backlog.is_some() && connections.is_some() {
        return Err(err(
            "phases.backlog",
            "a connection workload has no backlog to build",
        ));
    }
    let message = super::stages::resolve_message(&s.message)?;
    let tracking = super::stages::resolve_tracking(&s.tracking, &s.stages)?;
    let consumers_per_topic = consumers_beside_stages(s, &tracking, consumers_per_topic)?;
    if tracking.is_some() && request_reply {
        return Err(err(
            "producers.request_reply",
            "request/reply and [[stages]] exclude each other",
        ));
    }
    let subscribe = s.consumers.subscribe.clone();
    if subscribe.as_deref() == Some("") {
        return Err(err(
            "consumers.subscribe",
            "the subscription filter is empty",
        ));
    }

    let redact_headers = s.output.redact_headers.clone().unwrap_or_default();
    crate::redact::HeaderRule::new(&redact_headers)
        .map_err(|e| err("output.redact_headers", e.to_string()))?;

    let io = s.output.io.unwrap_or_default();
    let workers = s.output.workers.unwrap_or_else(|| {
        let mut targets = vec![target.as_str()];
        targets.extend(consume_from.as_deref());
        match super::colocated::default_workers(&targets, crate::available_cpus()) {
            // Batched I/O needs workers of its own: one per CPU.
            0 if io == IoMode::Batched => crate::available_cpus().max(1),
            n => n,
        }
    });
    if io == IoMode::Batched && workers == 0 {
        return Err(err(
            "output.io",
            "batched I/O runs on worker threads: with `io = \"batched\"` (--io batched) give \
             --workers 1 or more",
        ));
    }

    Ok(RunPlan {
        name: s.name.clone().unwrap_or_else(|| "msgbench".to_string()),
        tags: s.tags.clone().unwrap_or_default(),
        target,
        consume_from,
        run_id,
        topics,
        producers_per_topic,
        topic_popularity,
        consumers_per_topic,
        subscription,
        request_reply,
        size,
        payload,
        rate,
        pacing: s.producers.pacing.unwrap_or_default(),
        max_in_flight,
        ack_timeout,
        warmup,
        measure,
        drain,
        backlog,
        tick,
        late_threshold,
        connect_timeout,
        workers,
        io,
        subscribe,
        client,
        tls,
        connections,
        consumer_ramp,
        consumer_work,
        drivers: super::DriverPlans::default(),
        message,
        tracking,
        segment: None,
        start_at_unix_ms: None,
        group: None,
        thresholds: s.thresholds.clone().map(|t| t.0).unwrap_or_default(),
        threshold_abort: s.output.threshold_abort.unwrap_or(false),
        redact_headers,
    })
}

/// The target URL and the consumers' own, when they have one.
fn resolve_targets(s: &Scenario) -> Result<(String, Option<String>), PlanError> {
    let target = s
        .target
        .clone()
        .unwrap_or_else(|| DEFAULT_TARGET.to_string());
    if !target.contains("://") {
        return Err(err(
            "target",
            format!(
                "`{}` is not a URL; expected e.g. nats://127.0.0.1:4222 or mem://",
                crate::redact::url(&target)
            ),
        ));
    }
    let consume_from = s.consumers.target.clone();
    if let Some(c) = &consume_from
        && !c.contains("://")
    {
        return Err(err(
            "consumers.target",
            format!(
                "`{}` is not a URL; expected e.g. mqtt://127.0.0.1:1883",
                crate::redact::url(c)
            ),
        ));
    }
    Ok((target, consume_from))
}

/// `producers.size`: a size, a range, a distribution, or `@FILE`, an empirical table of
/// sizes and weights ([`SizeSpec::from_table`]).
fn resolve_size(s: &Scenario) -> Result<SizeSpec, PlanError> {
    let spec = s.producers.size.as_deref().unwrap_or("128");
    let size = match spec.strip_prefix('@') {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| err("producers.size", format!("{path}: {e}")))?;
            SizeSpec::from_table(&text)
                .map_err(|m| err("producers.size", format!("{path}: {m}")))?
        }
        None => SizeSpec::parse(spec).map_err(|m| err("producers.size", m))?,
    };
    size.validate().map_err(|m| err("producers.size", m))?;
    Ok(size)
}

/// `consumers.processing` and `consumers.rate`: slow consumers.
fn resolve_consumer_work(s: &Scenario) -> Result<ConsumerWork, PlanError> {
    let processing = match s.consumers.processing.as_deref() {
        None => None,
        Some(p) => {
            let (exp, d) = match p.strip_prefix("exp:") {
                Some(mean) => (true, mean),
                None => (false, p),
            };
            let d = parse_duration(d).map_err(|m| {
                err(
                    "consumers.processing",
                    format!(
                        "`{p}`: {m} (a duration such as 5ms, or exp:5ms for an exponential one)"
                    ),
                )
            })?;
            (!d.is_zero()).then_some(if exp {
                Processing::Exponential(d)
            } else {
                Processing::Fixed(d)
            })
        }
    };
    let rate = s.consumers.rate.filter(|r| *r != 0.0);
    if let Some(r) = rate
        && !(r.is_finite() && r > 0.0)
    {
        return Err(err(
            "consumers.rate",
            format!("{r}: deliveries per second per consumer, above 0"),
        ));
    }
    Ok(ConsumerWork { processing, rate })
}

/// The offered load: unlimited without a rate (or with 0), constant, or a shape.
fn resolve_rate(s: &Scenario) -> Result<RateShape, PlanError> {
    let rate = match &s.producers.rate {
        None => RateShape::Unlimited,
        Some(RateSpec::PerSecond(r)) if *r == 0.0 => RateShape::Unlimited,
        Some(RateSpec::PerSecond(r)) => RateShape::Constant { rate: *r },
        Some(RateSpec::Shape(shape)) => shape.clone(),
    };
    rate.validate().map_err(|m| err("producers.rate", m))?;
    Ok(rate)
}

/// Each producer's ack window: how many messages may await their ack (1000 by default), and
/// how long each may wait (30 s).
fn resolve_ack_window(s: &Scenario) -> Result<(usize, Duration), PlanError> {
    let max_in_flight = s.producers.max_in_flight.unwrap_or(1000);
    if max_in_flight == 0 {
        return Err(err("producers.max_in_flight", "must be at least 1"));
    }

    let ack_timeout = duration(
        "producers.ack_timeout",
        &s.producers.ack_timeout,
        Duration::from_secs(30),
    )?;
    if ack_timeout.is_zero() {
        return Err(err("producers.ack_timeout", "must be longer than zero"));
    }
    Ok((max_in_flight, ack_timeout))
}

/// `[output]`'s times: the tick (at least 10 ms), the late threshold and the connect timeout.
fn resolve_output_times(s: &Scenario) -> Result<(Duration, Duration, Duration), PlanError> {
    let tick = duration("output.tick", &s.output.tick, Duration::from_secs(1))?;
    if tick < Duration::from_millis(10) {
        return Err(err("output.tick", "must be at least 10ms"));
    }
    let late_threshold = duration(
        "output.late_threshold",
        &s.output.late_threshold,
        Duration::from_millis(1),
    )?;
    let connect_timeout = duration(
        "output.connect_timeout",
        &s.output.connect_timeout,
        Duration::from_secs(10),
    )?;
    Ok((tick, late_threshold, connect_timeout))
}

/// Consumers of a run with stages: none, because the stages' listeners are its receiving side.
fn consumers_beside_stages(
    s: &Scenario,
    tracking: &Option<super::stages::TrackingPlan>,
    consumers_per_topic: u32,
) -> Result<u32, PlanError> {
    match (tracking, s.consumers.per_topic) {
        (Some(_), Some(n)) if n > 0 => Err(err(
            "consumers.per_topic",
            "a run with [[stages]] receives through its stages; observe the topic with a stage (queue = the topic, key = [\"stamp\"]) instead of consumers",
        )),
        (Some(_), _) => Ok(0),
        (None, _) => Ok(consumers_per_topic),
    }
}

/// The topic names: `count` of them from `pattern`.
fn resolve_topics(s: &Scenario) -> Result<Vec<String>, PlanError> {
    let count = s.topics.count.unwrap_or(1);
    if count == 0 {
        return Err(err("topics.count", "need at least one topic"));
    }
    let pattern = s.topics.pattern.clone().unwrap_or_else(|| {
        if count > 1 {
            "msgbench.{i}".to_string()
        } else {
            "msgbench".to_string()
        }
    });
    if pattern.is_empty() {
        return Err(err("topics.pattern", "topic name is empty"));
    }
    if count > 1 && !pattern.contains("{i}") {
        return Err(err(
            "topics.pattern",
            format!("`{pattern}` has no `{{i}}`, so {count} topics would share one name"),
        ));
    }
    Ok((0..count)
        .map(|i| pattern.replace("{i}", &i.to_string()))
        .collect())
}

/// How the consumers of a topic share it (a queue group by default for request/reply).
fn resolve_subscription(s: &Scenario, request_reply: bool) -> Result<SubscriptionMode, PlanError> {
    Ok(
        match s.consumers.mode.unwrap_or(if request_reply {
            ConsumerMode::Queue
        } else {
            ConsumerMode::Fanout
        }) {
            ConsumerMode::Fanout => {
                if s.consumers.group.is_some() {
                    return Err(err(
                        "consumers.group",
                        "a group name needs mode = \"queue\" (--queue-group)",
                    ));
                }
                SubscriptionMode::Fanout
            }
            ConsumerMode::Queue => SubscriptionMode::Queue {
                group: s
                    .consumers
                    .group
                    .clone()
                    .unwrap_or_else(|| "msgbench".to_string()),
            },
        },
    )
}

/// `phases.backlog`: the backlog to build before consumers read, in bytes and messages.
fn resolve_backlog(
    s: &Scenario,
    size: &SizeSpec,
    producers_per_topic: u32,
    consumers_per_topic: u32,
    request_reply: bool,
) -> Result<Option<BacklogPlan>, PlanError> {
    Ok(match &s.phases.backlog {
        None => None,
        Some(b) => {
            let bytes = crate::units::parse_size(b).map_err(|m| err("phases.backlog", m))?;
            if bytes == 0 {
                return Err(err(
                    "phases.backlog",
                    "must be larger than zero (e.g. 256MiB)",
                ));
            }
            if consumers_per_topic == 0 || producers_per_topic == 0 || request_reply {
                return Err(err(
                    "phases.backlog",
                    "a backlog needs producers to build it and consumers to drain it (not request/reply)",
                ));
            }
            let mean = size.mean();
            Some(BacklogPlan {
                bytes,
                messages: bytes.div_ceil(mean.max(1)),
            })
        }
    })
}

/// How the measure phase ends: after a duration (10 s by default) or a message count.
fn resolve_measure(s: &Scenario) -> Result<Measure, PlanError> {
    Ok(match (s.phases.messages, &s.phases.duration) {
        (Some(_), Some(_)) => {
            return Err(err(
                "phases",
                "give either `duration` or `messages` for the measure phase, not both",
            ));
        }
        (Some(0), None) => return Err(err("phases.messages", "must be at least 1")),
        (Some(n), None) => Measure::Messages(n),
        (None, d) => {
            let d = duration("phases.duration", d, Duration::from_secs(10))?;
            if d.is_zero() {
                return Err(err("phases.duration", "must be longer than zero"));
            }
            Measure::Duration(d)
        }
    })
}

/// `[tls]`: a client certificate needs its key.
fn resolve_tls(s: &Scenario) -> Result<TlsPlan, PlanError> {
    let tls = TlsPlan {
        ca_file: s.tls.ca_file.as_ref().map(Into::into),
        cert_file: s.tls.cert_file.as_ref().map(Into::into),
        key_file: s.tls.key_file.as_ref().map(Into::into),
        insecure: s.tls.insecure.unwrap_or(false),
    };
    if tls.cert_file.is_some() != tls.key_file.is_some() {
        return Err(err(
            "tls.cert_file",
            "a client certificate needs both cert_file and key_file (--cert and --key)",
        ));
    }
    Ok(tls)
}

fn resolve_client(s: &Scenario) -> Result<ClientPlan, PlanError> {
    let c = &s.client;
    let qos = c.qos.unwrap_or(0);
    if qos > 2 {
        return Err(err(
            "client.qos",
            format!("QoS {qos} does not exist; use 0, 1 or 2"),
        ));
    }
    let keep_alive = duration("client.keep_alive", &c.keep_alive, Duration::from_secs(30))?;
    if keep_alive > Duration::from_secs(65_535) {
        return Err(err("client.keep_alive", "at most 65535s (18h12m15s)"));
    }
    let persistent_session = c.persistent_session.unwrap_or(false);
    let client_id = c
        .client_id
        .clone()
        .unwrap_or_else(|| "msgbench-{run}-{role}-{i}".to_string());
    if client_id.is_empty() {
        return Err(err("client.client_id", "the client id pattern is empty"));
    }
    let ack_every = c.ack_every.unwrap_or(1);
    if ack_every == 0 {
        return Err(err("client.ack_every", "must be at least 1 (--ack-every)"));
    }
    Ok(ClientPlan {
        client_id,
        keep_alive,
        version: c.version.clone(),
        qos,
        retain: c.retain.unwrap_or(false),
        persistent_session,
        hello: c.hello.clone(),
        ack_every,
        pipeline_handshake: c.pipeline_handshake.unwrap_or(false),
    })
}

/// The stamp's form and the template (read from `payload_file` when given), checked against
/// the message size.
fn resolve_payload(s: &Scenario, size: &mut SizeSpec) -> Result<PayloadPlan, PlanError> {
    let p = &s.producers;
    let template = match (&p.payload, &p.payload_file) {
        (Some(_), Some(_)) => {
            return Err(err(
                "producers.payload",
                "give the template inline (payload) or from a file (payload_file), not both",
            ));
        }
        (Some(t), None) => Some(t.clone()),
        (None, Some(f)) => Some(std::fs::read_to_string(f).map_err(|e| {
            err(
                "producers.payload_file",
                format!("cannot read the payload template `{f}`: {e}"),
            )
        })?),
        (None, None) => None,
    };
    let content = p.content.unwrap_or_default();
    let stamp = match (p.stamp, &template, content) {
        (Some(StampFormat::Binary), Some(_), _) => {
            return Err(err(
                "producers.stamp",
                "a payload template carries a text stamp: drop stamp = \"binary\" (--stamp binary)",
            ));
        }
        (Some(StampFormat::Binary), None, Content::Text) => {
            return Err(err(
                "producers.content",
                "text content carries a text stamp: drop stamp = \"binary\" (--stamp binary)",
            ));
        }
        (_, Some(_), _) | (_, None, Content::Text) => StampFormat::Text,
        (f, None, _) => f.unwrap_or_default(),
    };
    let files = match &p.payload_files {
        None => None,
        Some(_) if template.is_some() || p.content.is_some() || p.size.is_some() => {
            return Err(err(
                "producers.payload_files",
                "payload files are the messages' content and set their sizes: drop payload, \
                 content and size (--payload, --content, --size)",
            ));
        }
        Some(dir) => {
            let f = crate::payload::PayloadFiles::read(dir)
                .map_err(|m| err("producers.payload_files", m))?;
            *size = f.sizes(stamp.stamp_len());
            Some(f)
        }
    };
    let plan = PayloadPlan {
        stamp,
        template,
        content,
        files,
    };
    size.raise_floor(stamp.stamp_len() as u64);
    let setting = if plan.template.is_some() {
        "producers.payload"
    } else {
        "producers.size"
    };
    plan.validate(size).map_err(|m| err(setting, m))?;
    Ok(plan)
}

/// The connection workload, or (without one) how the message run's consumers ramp.
fn resolve_connections(s: &Scenario) -> Result<(Option<ConnectionPlan>, ClientRamp), PlanError> {
    let c = &s.connections;
    let rate = match c.rate {
        None => None,
        Some(0.0) => None,
        Some(r) if r.is_finite() && r > 0.0 => Some(r),
        Some(r) => {
            return Err(err(
                "connections.rate",
                format!("{r} is not a rate; give connections per second (0 = unlimited)"),
            ));
        }
    };
    let source_addrs = match &c.source_addrs {
        None => Vec::new(),
        Some(v) => {
            crate::units::parse_source_addrs(v).map_err(|m| err("connections.source_addrs", m))?
        }
    };
    let Some(mode) = c.mode.or(c.count.map(|_| ConnectionMode::Hold)) else {
        let ramp_only = super::ConnectionsSection {
            rate: c.rate,
            source_addrs: c.source_addrs.clone(),
            ..Default::default()
        };
        if c != &ramp_only {
            return Err(err(
                "connections",
                "give `mode` (\"hold\" or \"storm\") or `count` (--connections / --storm); \
                 without them only `rate` and `source_addrs` apply (to the consumers)",
            ));
        }
        return Ok((None, ClientRamp { rate, source_addrs }));
    };
    let count = c.count;
    if count == Some(0) {
        return Err(err("connections.count", "must be at least 1"));
    }
    if mode == ConnectionMode::Hold && count.is_none() {
        return Err(err(
            "connections.count",
            "hold mode needs the number of connections (--connections N)",
        ));
    }
    let repeat = c.repeat.unwrap_or(1);
    let journey = match (&c.journey, mode) {
        (Some(steps), ConnectionMode::Journey) => {
            if count.is_none() {
                return Err(err(
                    "connections.count",
                    "journey mode needs the number of virtual users (count = N)",
                ));
            }
            super::journey::check(steps, repeat).map_err(|m| err("connections.journey", m))?;
            steps.clone()
        }
        (None, ConnectionMode::Journey) => {
            return Err(err(
                "connections.journey",
                "journey mode needs the steps (journey = [\"connect\", \"publish 10\", \"disconnect\"])",
            ));
        }
        (Some(_), _) => {
            return Err(err(
                "connections.journey",
                "steps are for journey mode (mode = \"journey\")",
            ));
        }
        (None, _) => Vec::new(),
    };
    if c.repeat.is_some() && mode != ConnectionMode::Journey {
        return Err(err(
            "connections.repeat",
            "repeat is for journey mode (mode = \"journey\")",
        ));
    }
    // More attempts at once than a server's listen backlog (often ~100) only measures SYN
    // retransmission (1 s): 64 keeps the default honest; raise it to test exactly that.
    let concurrency = c.concurrency.unwrap_or(64);
    if concurrency == 0 {
        return Err(err("connections.concurrency", "must be at least 1"));
    }
    let publish_interval = match &c.publish_interval {
        None => None,
        Some(v) => {
            let d = parse_duration(v).map_err(|m| err("connections.publish_interval", m))?;
            if d < Duration::from_millis(1) {
                return Err(err("connections.publish_interval", "must be at least 1ms"));
            }
            Some(d)
        }
    };
    let reconnect_at = match &c.reconnect_at {
        None => None,
        Some(_) if mode != ConnectionMode::Hold => {
            return Err(err(
                "connections.reconnect_at",
                "a reconnect storm drops held connections: it needs hold mode (--connections N)",
            ));
        }
        Some(v) => Some(parse_duration(v).map_err(|m| err("connections.reconnect_at", m))?),
    };
    let churn = match c.churn {
        None => None,
        Some(_) if mode != ConnectionMode::Hold => {
            return Err(err(
                "connections.churn",
                "churn drops held connections: it needs hold mode (--connections N)",
            ));
        }
        Some(r) if !(r.is_finite() && r > 0.0) => {
            return Err(err(
                "connections.churn",
                "must be a positive number of drops per second",
            ));
        }
        Some(r) => Some(r),
    };
    let arrival = c.arrival.unwrap_or_default();
    if arrival == super::Arrival::Poisson && rate.is_none() {
        return Err(err(
            "connections.arrival",
            "Poisson arrivals need a rate of starts (--connect-rate N)",
        ));
    }
    Ok((
        Some(ConnectionPlan {
            mode,
            count,
            rate,
            // Held connections are held for `hold`, or, without one, for the run's duration
            // (`--duration`, the one length a user gives any run), or 10 s.
            hold: match (&c.hold, &s.phases.duration) {
                (None, Some(d)) if mode == ConnectionMode::Hold => {
                    duration("phases.duration", &Some(d.clone()), Duration::from_secs(10))?
                }
                _ => duration("connections.hold", &c.hold, Duration::from_secs(10))?,
            },
            concurrency,
            messages: c.messages.unwrap_or(0),
            publish_interval,
            source_addrs,
            reconnect_at,
            churn,
            journey,
            repeat,
            arrival,
        }),
        ClientRamp::default(),
    ))
}

/// Serde: a uniform popularity (the default) is left out of the results file.
fn is_uniform(p: &crate::popularity::Popularity) -> bool {
    *p == crate::popularity::Popularity::Uniform
}

impl RunPlan {
    /// Total producers.
    pub fn producers(&self) -> u32 {
        self.producers_per_topic * self.topics.len() as u32
    }

    /// How many producers each topic has (by `topic_popularity`); producers are numbered topic
    /// by topic.
    pub fn producer_placement(&self) -> Vec<u32> {
        self.topic_popularity
            .place(self.producers(), self.topics.len())
    }

    /// Total consumers.
    pub fn consumers(&self) -> u32 {
        self.consumers_per_topic * self.topics.len() as u32
    }

    /// How many consumers each message should reach.
    pub fn receivers_per_message(&self) -> u64 {
        match self.subscription {
            _ if self.consumers_per_topic == 0 => 0,
            // A wildcard filter is assumed to cover every topic.
            SubscriptionMode::Fanout if self.subscribe.is_some() => self.consumers() as u64,
            SubscriptionMode::Fanout => self.consumers_per_topic as u64,
            SubscriptionMode::Queue { .. } => 1,
        }
    }

    /// The URL scheme (`nats`, `mem`...).
    pub fn scheme(&self) -> &str {
        crate::registration::scheme(&self.target)
    }

    /// Where consumers connect: `consume_from`, or else the target.
    pub fn consumer_target(&self) -> &str {
        self.consume_from.as_deref().unwrap_or(&self.target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(toml: &str) -> Result<RunPlan, PlanError> {
        resolve(&Scenario::from_str_named(toml, "t").unwrap(), 1)
    }

    #[test]
    fn defaults_are_sane() {
        let p = plan("").unwrap();
        assert_eq!(p.target, "mem://");
        assert_eq!(p.topics, vec!["msgbench"]);
        assert_eq!((p.producers(), p.consumers()), (1, 1));
        assert_eq!(p.rate, RateShape::Unlimited);
        assert_eq!(p.measure, Measure::Duration(Duration::from_secs(10)));
        assert_eq!(p.receivers_per_message(), 1);
    }

    #[test]
    fn held_connections_are_held_for_the_runs_duration_without_a_hold() {
        let hold = |toml: &str| plan(toml).unwrap().connections.unwrap().hold;
        let held = "[connections]\ncount = 5\n";
        assert_eq!(hold(held), Duration::from_secs(10));
        let timed = format!("[phases]\nduration = \"3s\"\n{held}");
        assert_eq!(hold(&timed), Duration::from_secs(3));
        assert_eq!(
            hold(&format!("{timed}hold = \"7s\"\n")),
            Duration::from_secs(7)
        );
    }

    #[test]
    fn topic_patterns_expand() {
        let p = plan("[topics]\ncount = 3\npattern = \"bench.{i}\"\n[producers]\nper_topic = 2\n[consumers]\nper_topic = 4\n").unwrap();
        assert_eq!(p.topics, vec!["bench.0", "bench.1", "bench.2"]);
        assert_eq!(
            (p.producers(), p.consumers(), p.receivers_per_message()),
            (6, 12, 4)
        );
        assert!(
            plan("[topics]\ncount = 3\npattern = \"same\"\n")
                .unwrap_err()
                .to_string()
                .contains("{i}")
        );
    }

    #[test]
    fn a_message_run_takes_a_consumer_ramp() {
        let p =
            plan("[connections]\nrate = 500\nsource_addrs = \"127.0.0.2-127.0.0.3\"\n").unwrap();
        assert_eq!(p.connections, None);
        assert_eq!(p.consumer_ramp.rate, Some(500.0));
        assert_eq!(p.consumer_ramp.source_addrs.len(), 2);
        // Left out of the results file when unused.
        let v = serde_json::to_value(plan("").unwrap()).unwrap();
        assert!(v.get("consumer_ramp").is_none());
        // A connection workload keeps its rate; settings only a workload has still need one.
        let w = plan("[connections]\ncount = 10\nrate = 500\n").unwrap();
        assert_eq!(w.connections.unwrap().rate, Some(500.0));
        assert!(w.consumer_ramp.is_default());
        let e = plan("[connections]\nhold = \"5s\"\n").unwrap_err();
        assert_eq!(e.setting, "connections");
        assert_eq!(
            plan("[connections]\nrate = -1\n").unwrap_err().setting,
            "connections.rate"
        );
    }

    #[test]
    fn client_ack_batches() {
        assert_eq!(plan("").unwrap().client.ack_every, 1);
        let p = plan("[client]\nqos = 1\nack_every = 16\n").unwrap();
        assert_eq!(p.client.ack_every, 16);
        let e = plan("[client]\nack_every = 0\n").unwrap_err();
        assert_eq!(e.setting, "client.ack_every");
        // Results files written before the setting existed still read, as one at a time.
        let mut v = serde_json::to_value(&p.client).unwrap();
        v.as_object_mut().unwrap().remove("ack_every");
        let old: ClientPlan = serde_json::from_value(v).unwrap();
        assert_eq!(old.ack_every, 1);
        // One at a time is left out of the results file (unchanged for runs that do not batch).
        let one = serde_json::to_value(plan("").unwrap().client).unwrap();
        assert!(one.get("ack_every").is_none(), "{one}");
    }

    #[test]
    fn queue_groups_deliver_once() {
        let p = plan("[consumers]\nper_topic = 4\nmode = \"queue\"\n").unwrap();
        assert_eq!(p.receivers_per_message(), 1);
        assert_eq!(
            p.subscription,
            SubscriptionMode::Queue {
                group: "msgbench".into()
            }
        );
    }

    #[test]
    fn cross_field_rules() {
        assert!(
            plan("[phases]\nduration = \"5s\"\nmessages = 10\n")
                .unwrap_err()
                .to_string()
                .contains("not both")
        );
        assert!(
            plan("[producers]\nsize = \"8\"\n")
                .unwrap_err()
                .to_string()
                .starts_with("producers.size")
        );
        assert!(plan("[producers]\nrate = -5\n").is_err());
        assert!(plan("[producers]\nper_topic = 0\n").is_err());
        assert!(
            plan("target = \"localhost\"\n")
                .unwrap_err()
                .to_string()
                .contains("not a URL")
        );
        assert!(plan("[consumers]\ngroup = \"g\"\n").is_err());
    }
}
