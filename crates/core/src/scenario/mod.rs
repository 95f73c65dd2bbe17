//! Scenario files: the TOML a user writes, parsed strictly (unknown keys are errors, every error
//! names the file, line and column), merged with command-line overrides, then resolved into a
//! validated [`RunPlan`] in exactly one place ([`resolve`]).
//!
//! ```toml
//! name = "nats-4x4-1k"
//! tags = ["nightly"]        # for finding the run in the dashboard's history
//! target = "nats://127.0.0.1:4222"
//!
//! [topics]
//! count = 4
//! pattern = "bench.{i}"
//!
//! [producers]
//! per_topic = 1
//! rate = 50000              # msgs/s, all producers together; or a table with `shape`
//! size = "1KiB"             # or "100..2KiB", "lognormal:512,0.8", "@sizes.txt"
//! max_in_flight = 1000
//!
//! [consumers]
//! per_topic = 2
//! mode = "fanout"           # or "queue" (competing consumers)
//!
//! [phases]
//! warmup = "2s"
//! duration = "30s"          # or: messages = 1000000
//! drain = "5s"
//!
//! [client]                  # protocol client settings (where the protocol has them)
//! qos = 1                   # MQTT 0, 1 or 2
//! version = "5"             # MQTT "3.1.1" (default) or "5"
//! keep_alive = "30s"
//! client_id = "msgbench-{run}-{role}-{i}"
//!
//! [tls]
//! ca_file = "ca.pem"        # verification is on unless insecure = true
//!
//! [connections]             # connection-scale workloads instead of pub/sub
//! mode = "hold"             # or "storm", or "journey" (see [`journey`])
//! count = 100000
//! rate = 5000               # connects per second
//! hold = "60s"
//! churn = 50                # drops per second, each reopened at once (or reconnect_at = "30s")
//! source_addrs = "127.0.0.1-127.0.0.8"
//! ```
//!
//! # Layout
//! - this module: the file model ([`Scenario`]) and parsing with positions.
//! - [`plan`]: the resolved [`RunPlan`] and the rules that produce it.
//! - [`groups`]: `[[groups]]`, several kinds of clients in one run.

pub mod colocated;
pub mod driver_options;
pub mod groups;
pub mod journey;
pub mod plan;
mod redaction;
pub mod segment;
pub mod stages;

pub use driver_options::{DriverPlans, DriverSection, DriverSections, SectionSpec};
pub use plan::{
    BacklogPlan, ClientPlan, ConnectionPlan, ConsumerWork, Measure, PlanError, Processing, RunPlan,
    SubscriptionMode, TlsPlan, resolve,
};
pub use segment::{Segment, parse_start_at, segment_run_id};
pub use stages::{
    KeySource, MessagePlan, MessageSection, PropertyTemplate, StagePlan, StageQueue, StageSection,
    StageSource, Template, TemplateVars, TrackingPlan, TrackingSection,
};

use crate::pacer::RateShape;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A scenario as written: every field optional, so a file, the command line, or both can supply
/// it. Missing fields get defaults in [`resolve`]. Unknown top-level keys are refused by
/// [`Scenario::parse`], which knows the drivers' sections (serde cannot: they are not fields).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    /// A name for the run, shown in reports.
    pub name: Option<String>,
    /// Labels for finding the run again (the dashboard's history searches them):
    /// `tags = ["nightly", "rabbitmq-3.13"]`.
    pub tags: Option<Vec<String>>,
    /// The system under test, as a URL (`nats://host:4222`, `mem://`).
    pub target: Option<String>,
    /// Topics (subjects, routing keys, queues).
    #[serde(default)]
    pub topics: TopicsSection,
    /// Sending side.
    #[serde(default)]
    pub producers: ProducersSection,
    /// Receiving side.
    #[serde(default)]
    pub consumers: ConsumersSection,
    /// Warm-up, measurement and drain.
    #[serde(default)]
    pub phases: PhasesSection,
    /// Reporting cadence and thresholds.
    #[serde(default)]
    pub output: OutputSection,
    /// Protocol client settings.
    #[serde(default)]
    pub client: ClientSection,
    /// TLS settings (for `mqtts://` and other TLS targets).
    #[serde(default)]
    pub tls: TlsSection,
    /// A connection-scale workload instead of pub/sub.
    #[serde(default)]
    pub connections: ConnectionsSection,
    /// The drivers' own sections (`[amqp]`, `[kafka]`, ...), as written: every top-level
    /// table that is not one of the keys above ([`driver_options`]).
    #[serde(skip)]
    pub drivers: DriverSections,
    /// Ids and properties sent with every message.
    #[serde(default)]
    pub message: MessageSection,
    /// Multi-stage tracking settings.
    #[serde(default)]
    pub tracking: TrackingSection,
    /// Stages each message is tracked through.
    #[serde(default)]
    pub stages: Vec<StageSection>,
    /// Pass/fail conditions on the result: `[thresholds]` with `"e2e.p99" = "< 10ms"`,
    /// `lost = "== 0"`, or a list of conditions per metric.
    pub thresholds: Option<ThresholdsSection>,
    /// `[[groups]]`: kinds of clients that run at once, each a scenario of its own laid over
    /// this one (see [`groups`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<Scenario>,
    /// Set by [`groups::expand`]: this is one group of a run, which may have no producers (a
    /// dashboard that only subscribes) since other groups send.
    #[serde(skip)]
    pub member: bool,
}

/// `[thresholds]`: each key a metric, each value a condition (`"< 10ms"`) or a list of them;
/// held as whole thresholds (`"e2e.p99 < 10ms"`), in key order. Checked where they are parsed
/// (`msgbench_report::verdict`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ThresholdsSection(pub Vec<String>);

impl Serialize for ThresholdsSection {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for ThresholdsSection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Conditions {
            One(String),
            Many(Vec<String>),
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Table(std::collections::BTreeMap<String, Conditions>),
            List(Vec<String>),
        }
        let form = Form::deserialize(d).map_err(|_| {
            serde::de::Error::custom(
                "expected [thresholds] entries like \"e2e.p99\" = \"< 10ms\" or lost = [\"== 0\"]",
            )
        })?;
        Ok(ThresholdsSection(match form {
            Form::List(l) => l,
            Form::Table(t) => t
                .into_iter()
                .flat_map(|(metric, c)| {
                    let list = match c {
                        Conditions::One(c) => vec![c],
                        Conditions::Many(l) => l,
                    };
                    list.into_iter()
                        .map(move |c| format!("{metric} {}", c.trim()))
                })
                .collect(),
        }))
    }
}

/// `[client]`: settings of each protocol client.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientSection {
    /// Client identifier pattern: `{run}` (run id), `{role}` (`pub`, `sub`, `conn`), `{i}`.
    pub client_id: Option<String>,
    /// Keep-alive / heartbeat interval.
    pub keep_alive: Option<String>,
    /// Protocol version where there is a choice (MQTT: `"3.1.1"` or `"5"`).
    pub version: Option<String>,
    /// Delivery guarantee (MQTT QoS 0, 1 or 2).
    pub qos: Option<u8>,
    /// Publish retained messages (MQTT).
    pub retain: Option<bool>,
    /// Keep the session across connections (MQTT clean session = false).
    pub persistent_session: Option<bool>,
    /// A text message receiving clients send after connecting, `{i}` and `{topic}` replaced
    /// (WebSocket: a subscribe request for servers that want one).
    pub hello: Option<String>,
    /// MQTT QoS 1/2 consumers write their acknowledgements this many at a time, at most 1 ms
    /// late (default 1: each at once). Fewer, fuller TCP segments to the broker; see the MQTT
    /// driver for what it changes on the broker's side.
    pub ack_every: Option<u32>,
    /// Send each handshake step before the answer to the previous one arrives, where the
    /// protocol allows it (default false: wait for each answer, as intermediaries that
    /// terminate the handshake require).
    pub pipeline_handshake: Option<bool>,
}

/// `[tls]`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// PEM file of the CA(s) to trust instead of the system's.
    pub ca_file: Option<String>,
    /// Client certificate (PEM chain).
    pub cert_file: Option<String>,
    /// Client private key (PEM).
    pub key_file: Option<String>,
    /// Skip server certificate verification.
    pub insecure: Option<bool>,
}

/// How a connection workload runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnectionMode {
    /// Open `count` connections at `rate`, hold them, close them.
    Hold,
    /// Connect, handshake, optionally send, close, repeat, `concurrency` at a time.
    Storm,
    /// `count` virtual users started at `rate`, each running the `journey`'s steps.
    Journey,
}

/// How connection attempts are spread at the connect rate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arrival {
    /// Evenly: one every 1/rate.
    #[default]
    Constant,
    /// A Poisson process of that rate (exponential gaps), as independent devices switch on.
    Poisson,
}

/// `[connections]`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionsSection {
    /// Hold, storm or journey.
    pub mode: Option<ConnectionMode>,
    /// Connections to open (hold) or connect cycles to run (storm; else `phases.duration`).
    pub count: Option<u64>,
    /// Connection attempts per second (0 = as fast as `concurrency` allows).
    pub rate: Option<f64>,
    /// How long to hold the connections once all are open (hold mode).
    pub hold: Option<String>,
    /// Connection attempts in progress at once.
    pub concurrency: Option<u32>,
    /// Messages sent on each connection (storm: per cycle).
    pub messages: Option<u32>,
    /// Hold mode: each held connection publishes once per this interval.
    pub publish_interval: Option<String>,
    /// Local addresses to spread connections over: `"127.0.0.1-127.0.0.50"` or a list.
    pub source_addrs: Option<String>,
    /// Hold mode: a reconnect storm at this time from the start of the measure phase (every
    /// held connection dropped and opened again at once).
    pub reconnect_at: Option<String>,
    /// Hold mode: held connections dropped per second, one at a time, each opened again at
    /// once (churn: devices on flaky networks).
    pub churn: Option<f64>,
    /// Journey mode: the steps each virtual user runs ([`journey`]).
    pub journey: Option<Vec<journey::Step>>,
    /// Journey mode: passes through the journey per user (default 1; 0 = until the end).
    pub repeat: Option<u32>,
    /// How attempts are spread at `rate`: `constant` (default) or `poisson`.
    pub arrival: Option<Arrival>,
}

/// `[topics]`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicsSection {
    /// How many topics.
    pub count: Option<u32>,
    /// Topic name; `{i}` is replaced by the topic index (needed when `count > 1`).
    pub pattern: Option<String>,
    /// How producers spread over the topics: `uniform`, `zipf:S`, `hot:T%:P%`
    /// ([`crate::popularity`]).
    pub popularity: Option<String>,
}

/// `rate = 50000` or `rate = { shape = "poisson", rate = 50000 }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RateSpec {
    /// A constant rate in messages per second (0 = unlimited).
    PerSecond(f64),
    /// Any [`RateShape`].
    Shape(RateShape),
}

/// `[producers]`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProducersSection {
    /// Producers per topic.
    pub per_topic: Option<u32>,
    /// Offered load, all producers together.
    pub rate: Option<RateSpec>,
    /// Message size, stamp included: `"1KiB"`, `"100..2KiB"`, `"normal:1KiB,200"`,
    /// `"lognormal:512,0.8"` or `"@sizes.txt"` (see [`crate::sizes::SizeSpec`]).
    pub size: Option<String>,
    /// Unacknowledged messages allowed per producer (where the protocol acknowledges).
    pub max_in_flight: Option<usize>,
    /// Send requests and measure the round trip to a responding consumer.
    pub request_reply: Option<bool>,
    /// How long to wait for an ack (or reply) before counting a timeout, e.g. `"30s"`.
    pub ack_timeout: Option<String>,
    /// `"efficient"` (default) or `"precise"`: see [`plan::Pacing`].
    pub pacing: Option<plan::Pacing>,
    /// How the stamp travels: `"binary"` (default, at offset 0) or `"text"` (printable, found
    /// anywhere in a delivery; for systems that need text or re-encode what they relay).
    pub stamp: Option<crate::payload::StampFormat>,
    /// Message template with `{{stamp}}` and other placeholders (see [`crate::template`]);
    /// implies a text stamp.
    pub payload: Option<String>,
    /// The template read from this file instead (relative to the working directory).
    pub payload_file: Option<String>,
    /// What fills each message after its stamp: `"random"` (default, incompressible),
    /// `"zeros"` or `"text"` (English-like words; implies a text stamp).
    pub content: Option<crate::payload::Content>,
    /// Every message is its stamp followed by one file of this folder, in turn (sizes are the
    /// files').
    pub payload_files: Option<String>,
}

/// How consumers of one topic share it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConsumerMode {
    /// Every consumer receives every message.
    Fanout,
    /// Consumers compete: each message goes to one of them (a queue group).
    Queue,
}

/// `[consumers]`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsumersSection {
    /// Consumers per topic.
    pub per_topic: Option<u32>,
    /// Fan-out or competing consumers.
    pub mode: Option<ConsumerMode>,
    /// Queue group name (competing consumers).
    pub group: Option<String>,
    /// Subscribe to this filter instead of the topic (wildcards such as `bench/+`); every
    /// consumer is then expected to receive the messages of every topic.
    pub subscribe: Option<String>,
    /// Where consumers connect, when not to the producers' target: a cross-protocol pipeline
    /// (publish on one system or protocol, receive on another).
    pub target: Option<String>,
    /// Time each consumer spends on each delivery before taking the next: `"5ms"`, or
    /// `"exp:5ms"` (exponentially distributed with that mean). Slow consumers build backlogs.
    pub processing: Option<String>,
    /// Most deliveries each consumer takes per second.
    pub rate: Option<f64>,
}

/// `[phases]`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhasesSection {
    /// Warm-up length (recorded, excluded from the summary).
    pub warmup: Option<String>,
    /// Measurement length.
    pub duration: Option<String>,
    /// Measure this many messages (all producers) instead of a duration.
    pub messages: Option<u64>,
    /// Longest wait for in-flight messages after the last send.
    pub drain: Option<String>,
    /// Hold the consumers back until producers have sent this many bytes (`1GiB`), then
    /// release them and measure how fast they clear the backlog.
    pub backlog: Option<String>,
}

/// `[output]`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputSection {
    /// Interval between live lines and `interval` records.
    pub tick: Option<String>,
    /// A send later than this after its intended time counts as late.
    pub late_threshold: Option<String>,
    /// Connect timeout per client.
    pub connect_timeout: Option<String>,
    /// Worker threads for producers and consumers (default: see
    /// [`colocated::default_workers`]).
    pub workers: Option<usize>,
    /// Socket I/O: `readiness` (epoll, the default) or `batched` (io_uring, one system call
    /// per pass of each worker thread).
    pub io: Option<plan::IoMode>,
    /// Judge the thresholds every interval of the measure phase too, and stop the run at the
    /// first that fails (those on the delivery account are judged at the end only).
    pub threshold_abort: Option<bool>,
    /// Header-name globs (`x-tenant-*`) whose values are hidden in everything msgbench prints
    /// or writes, on top of the built-in credential headers (see [`crate::redact`]).
    pub redact_headers: Option<Vec<String>>,
}

/// A scenario file that could not be read, with where and why.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("{file}: {source}")]
    Io {
        /// The file.
        file: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The TOML is malformed or does not match the scenario format.
    #[error("{file}:{line}:{column}: {message}")]
    Parse {
        /// The file.
        file: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What was expected.
        message: String,
    },
}

impl Scenario {
    /// Reads and parses a scenario file; `sections` are the drivers' (see [`Scenario::parse`]).
    pub fn from_file(path: &Path, sections: &[SectionSpec]) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io {
            file: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string(), sections)
    }

    /// Parses scenario text; `name` is used in error messages. Every top-level key is either
    /// the engine's or one of `sections` (a driver's table, checked by its driver here so that
    /// its errors have positions too); anything else is an unknown key.
    pub fn parse(
        text: &str,
        name: &str,
        sections: &[SectionSpec],
    ) -> Result<Scenario, ScenarioError> {
        let at = |e: toml::de::Error| {
            let (line, column) = match e.span() {
                Some(span) => line_col(text, span.start),
                None => (1, 1),
            };
            ScenarioError::Parse {
                file: name.to_string(),
                line,
                column,
                message: e.message().trim().to_string(),
            }
        };
        let mut scenario = toml::from_str::<Scenario>(text).map_err(at)?;
        let top = toml::from_str::<Keys>(text).map_err(at)?;
        sort_keys(text, name, sections, top, &mut scenario, true)?;
        /// The keys of each `[[groups]]` table, with their positions.
        #[derive(Deserialize)]
        struct GroupKeys {
            #[serde(default)]
            groups: Vec<Keys>,
        }
        let groups = toml::from_str::<GroupKeys>(text).map_err(at)?.groups;
        for (keys, group) in groups.into_iter().zip(&mut scenario.groups) {
            sort_keys(text, name, sections, keys, group, false)?;
        }
        Ok(scenario)
    }

    /// Parses scenario text that has no driver sections (engine tests and presets).
    pub fn from_str_named(text: &str, name: &str) -> Result<Scenario, ScenarioError> {
        Self::parse(text, name, &[])
    }

    /// Lays `over` on top of `self`: every field `over` sets wins (command-line flags over a file).
    pub fn overlay(mut self, over: Scenario) -> Scenario {
        // Destructured field by field: a field added to the scenario and not merged here is a
        // compile error, not a flag that silently does nothing.
        let Scenario {
            name,
            tags,
            target,
            topics:
                TopicsSection {
                    count,
                    pattern,
                    popularity,
                },
            producers:
                ProducersSection {
                    per_topic: p_per_topic,
                    rate,
                    size,
                    max_in_flight,
                    request_reply,
                    ack_timeout,
                    pacing,
                    stamp,
                    payload,
                    payload_file,
                    content,
                    payload_files,
                },
            consumers:
                ConsumersSection {
                    per_topic: c_per_topic,
                    mode,
                    group,
                    subscribe,
                    target: consume_from,
                    processing,
                    rate: consumer_rate,
                },
            phases:
                PhasesSection {
                    warmup,
                    duration,
                    messages,
                    drain,
                    backlog,
                },
            output,
            client,
            tls,
            connections,
            drivers,
            message,
            tracking,
            stages,
            thresholds,
            groups,
            member,
        } = over;
        self.member |= member;
        if !groups.is_empty() {
            self.groups = groups;
        }
        if message != MessageSection::default() {
            self.message = message;
        }
        if tracking != TrackingSection::default() {
            self.tracking = tracking;
        }
        if !stages.is_empty() {
            self.stages = stages;
        }
        self.drivers.overlay(drivers);
        pick(&mut self.name, name);
        pick(&mut self.tags, tags);
        pick(&mut self.target, target);
        pick(&mut self.topics.count, count);
        pick(&mut self.topics.pattern, pattern);
        pick(&mut self.topics.popularity, popularity);
        pick(&mut self.producers.per_topic, p_per_topic);
        pick(&mut self.producers.rate, rate);
        pick(&mut self.producers.size, size);
        pick(&mut self.producers.max_in_flight, max_in_flight);
        pick(&mut self.producers.request_reply, request_reply);
        pick(&mut self.producers.ack_timeout, ack_timeout);
        pick(&mut self.producers.pacing, pacing);
        pick(&mut self.producers.stamp, stamp);
        pick(&mut self.producers.content, content);
        pick(&mut self.producers.payload_files, payload_files);
        // A template given one way replaces one given the other way.
        if payload.is_some() || payload_file.is_some() {
            self.producers.payload = payload;
            self.producers.payload_file = payload_file;
        }
        pick(&mut self.consumers.per_topic, c_per_topic);
        pick(&mut self.consumers.mode, mode);
        pick(&mut self.consumers.group, group);
        pick(&mut self.consumers.processing, processing);
        pick(&mut self.consumers.rate, consumer_rate);
        // The measure phase ends on a duration or a count: the top layer's choice replaces both.
        if messages.is_some() {
            self.phases.duration = None;
        }
        if duration.is_some() {
            self.phases.messages = None;
        }
        pick(&mut self.phases.warmup, warmup);
        pick(&mut self.phases.duration, duration);
        pick(&mut self.phases.messages, messages);
        pick(&mut self.phases.drain, drain);
        pick(&mut self.phases.backlog, backlog);
        pick(&mut self.thresholds, thresholds);
        overlay_settings(&mut self, output, client, tls, connections);
        pick(&mut self.consumers.subscribe, subscribe);
        pick(&mut self.consumers.target, consume_from);
        self
    }
}

/// The settings sections of `over` (`[output]`, `[client]`, `[tls]`, `[connections]`) on top
/// of `base`, field by field (destructured: a new field not merged here is a compile error).
fn overlay_settings(
    base: &mut Scenario,
    output: OutputSection,
    client: ClientSection,
    tls: TlsSection,
    connections: ConnectionsSection,
) {
    let OutputSection {
        tick,
        late_threshold,
        connect_timeout,
        workers,
        io,
        threshold_abort,
        redact_headers,
    } = output;
    let ClientSection {
        client_id,
        keep_alive,
        version,
        qos,
        retain,
        persistent_session,
        hello,
        ack_every: client_ack_every,
        pipeline_handshake,
    } = client;
    let TlsSection {
        ca_file,
        cert_file,
        key_file,
        insecure,
    } = tls;
    let ConnectionsSection {
        mode: conn_mode,
        count: conn_count,
        rate: conn_rate,
        hold,
        concurrency,
        messages: conn_messages,
        publish_interval,
        source_addrs,
        reconnect_at,
        churn,
        journey,
        repeat,
        arrival,
    } = connections;
    pick(&mut base.output.tick, tick);
    pick(&mut base.output.late_threshold, late_threshold);
    pick(&mut base.output.connect_timeout, connect_timeout);
    pick(&mut base.output.workers, workers);
    pick(&mut base.output.io, io);
    pick(&mut base.output.threshold_abort, threshold_abort);
    pick(&mut base.output.redact_headers, redact_headers);
    pick(&mut base.client.client_id, client_id);
    pick(&mut base.client.keep_alive, keep_alive);
    pick(&mut base.client.version, version);
    pick(&mut base.client.qos, qos);
    pick(&mut base.client.retain, retain);
    pick(&mut base.client.persistent_session, persistent_session);
    pick(&mut base.client.hello, hello);
    pick(&mut base.client.ack_every, client_ack_every);
    pick(&mut base.client.pipeline_handshake, pipeline_handshake);
    pick(&mut base.tls.ca_file, ca_file);
    pick(&mut base.tls.cert_file, cert_file);
    pick(&mut base.tls.key_file, key_file);
    pick(&mut base.tls.insecure, insecure);
    pick(&mut base.connections.mode, conn_mode);
    pick(&mut base.connections.count, conn_count);
    pick(&mut base.connections.rate, conn_rate);
    pick(&mut base.connections.hold, hold);
    pick(&mut base.connections.concurrency, concurrency);
    pick(&mut base.connections.messages, conn_messages);
    pick(&mut base.connections.publish_interval, publish_interval);
    pick(&mut base.connections.source_addrs, source_addrs);
    pick(&mut base.connections.reconnect_at, reconnect_at);
    pick(&mut base.connections.churn, churn);
    pick(&mut base.connections.journey, journey);
    pick(&mut base.connections.repeat, repeat);
    pick(&mut base.connections.arrival, arrival);
}

/// `top` replaces `base` when it is set.
fn pick<T>(base: &mut Option<T>, top: Option<T>) {
    if top.is_some() {
        *base = top;
    }
}

/// A table's keys with their positions.
type Keys = std::collections::BTreeMap<toml::Spanned<String>, toml::Value>;

/// Checks the keys of a scenario table (the file's top level, or one `[[groups]]` entry): each
/// is the engine's or a driver's section, which its driver checks and `scenario` keeps.
fn sort_keys(
    text: &str,
    name: &str,
    sections: &[SectionSpec],
    keys: Keys,
    scenario: &mut Scenario,
    top: bool,
) -> Result<(), ScenarioError> {
    let engine = driver_options::engine_keys();
    for (key, value) in keys {
        let (line, column) = line_col(text, key.span().start);
        let here = |message: String| ScenarioError::Parse {
            file: name.to_string(),
            line,
            column,
            message,
        };
        if engine.contains(&key.get_ref().as_str()) {
            if !top && key.get_ref() == "groups" {
                return Err(here(
                    "groups do not nest: `groups` belongs at the top level".into(),
                ));
            }
            continue;
        }
        let Some(spec) = sections.iter().find(|s| s.name == key.get_ref()) else {
            let expected: Vec<String> = engine
                .iter()
                .copied()
                .chain(sections.iter().map(|s| s.name))
                .map(|k| format!("`{k}`"))
                .collect();
            return Err(here(format!(
                "unknown field `{}`, expected one of {}",
                key.get_ref(),
                expected.join(", ")
            )));
        };
        if top {
            (spec.check)(text).map_err(|e| {
                let (line, column) = match e.span() {
                    Some(span) => line_col(text, span.start),
                    None => (line, column),
                };
                ScenarioError::Parse {
                    file: name.to_string(),
                    line,
                    column,
                    message: e.message().trim().to_string(),
                }
            })?;
        } else {
            // A group's section is checked on its own: its errors point at the section.
            let mut alone = toml::Table::new();
            alone.insert(key.get_ref().clone(), value.clone());
            let own = toml::to_string(&alone).unwrap_or_default();
            (spec.check)(&own).map_err(|e| {
                here(format!(
                    "[groups.{}]: {}",
                    key.get_ref(),
                    e.message().trim()
                ))
            })?;
        }
        if let toml::Value::Table(t) = value {
            scenario.drivers.insert(key.into_inner(), t);
        }
    }
    Ok(())
}

/// 1-based line and column of byte offset `at` in `text`.
fn line_col(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit('\n')
        .next()
        .map(|l| l.chars().count())
        .unwrap_or(0)
        + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_file_parses() {
        let s = Scenario::from_str_named(
            r#"
name = "x"
target = "nats://127.0.0.1:4222"
[topics]
count = 4
pattern = "bench.{i}"
[producers]
per_topic = 2
rate = { shape = "poisson", rate = 1000 }
size = "100..1KiB"
[consumers]
per_topic = 3
mode = "queue"
[phases]
warmup = "1s"
messages = 5000
"#,
            "t.toml",
        )
        .unwrap();
        assert_eq!(s.topics.count, Some(4));
        assert_eq!(
            s.producers.rate,
            Some(RateSpec::Shape(RateShape::Poisson { rate: 1000.0 }))
        );
        assert_eq!(s.consumers.mode, Some(ConsumerMode::Queue));
        let plain = Scenario::from_str_named("[producers]\nrate = 500\n", "t.toml").unwrap();
        assert_eq!(plain.producers.rate, Some(RateSpec::PerSecond(500.0)));
    }

    #[test]
    fn unknown_key_names_file_line_and_column() {
        let err = Scenario::from_str_named("name = \"x\"\n[producers]\n  rte = 5\n", "bad.toml")
            .unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("bad.toml:3:3: "), "{msg}");
        assert!(msg.contains("unknown field `rte`"), "{msg}");
        assert!(
            msg.contains("per_topic"),
            "expected fields are listed: {msg}"
        );
    }

    #[test]
    fn unknown_tables_and_driver_sections_have_positions() {
        #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Wire {
            depth: Option<u32>,
        }
        impl DriverSection for Wire {
            const NAME: &'static str = "wire";
            type Plan = u32;
            fn resolve(&self) -> Result<u32, PlanError> {
                Ok(self.depth.unwrap_or(1))
            }
        }
        let known = [SectionSpec::of::<Wire>()];
        let err = Scenario::parse("name = \"x\"\n[wrie]\ndepth = 2\n", "t.toml", &known)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("t.toml:2:2: unknown field `wrie`"), "{err}");
        assert!(err.contains("`phases`") && err.contains("`wire`"), "{err}");
        let err = Scenario::parse("[wire]\ndepth = \"deep\"\n", "t.toml", &known)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("t.toml:2:9: "), "{err}");
        let s = Scenario::parse("[wire]\ndepth = 3\n", "t.toml", &known).unwrap();
        let mut plan = resolve(&s, 1).unwrap();
        (known[0].resolve)(&s.drivers, &mut plan).unwrap();
        assert_eq!(plan.drivers.get::<Wire>().unwrap(), 3);
        // Without the driver's section known, the table is an unknown key.
        assert!(Scenario::from_str_named("[wire]\ndepth = 3\n", "t.toml").is_err());
    }

    #[test]
    fn wrong_type_and_syntax_errors_have_positions() {
        let err = Scenario::from_str_named("[topics]\ncount = \"four\"\n", "t.toml")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("t.toml:2:9: "), "{err}");
        let err = Scenario::from_str_named("[topics\n", "t.toml")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("t.toml:1:"), "{err}");
    }

    #[test]
    fn overlay_prefers_the_top_layer() {
        let file = Scenario::from_str_named(
            "[phases]\nduration = \"30s\"\n[producers]\nper_topic = 2\n",
            "f",
        )
        .unwrap();
        let mut flags = Scenario::default();
        flags.phases.messages = Some(10);
        flags.producers.per_topic = Some(5);
        flags.producers.pacing = Some(plan::Pacing::Precise);
        flags.producers.ack_timeout = Some("3s".into());
        flags.output.workers = Some(2);
        let s = file.overlay(flags);
        assert_eq!(s.producers.pacing, Some(plan::Pacing::Precise));
        assert_eq!(s.producers.ack_timeout.as_deref(), Some("3s"));
        assert_eq!(s.output.workers, Some(2));
        assert_eq!(s.phases.duration, None);
        assert_eq!(s.phases.messages, Some(10));
        assert_eq!(s.producers.per_topic, Some(5));
    }
}
