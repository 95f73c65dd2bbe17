//! NATS JetStream on msgbench's own NATS client: `nats+js://host:4222?options` (and
//! `nats+js+tls://`). Streams (file or memory storage), publishes confirmed by PubAcks, pull
//! consumers (batched fetch) and push consumers (flow control), durable or ephemeral, explicit
//! acks.
//!
//! Options (the URL's query; every one has a default, see [`options::JsOptions`]):
//! `stream=NAME` (default: one stream per topic, `MSGBENCH_<topic>`), `storage=file|memory`,
//! `consumer=pull|push`, `durable=NAME`, `batch=N` (pull), `create=1|0` (create missing
//! streams), `max_bytes=SIZE`, `replicas=N`, `ack_pending=N`, `ack_wait=DURATION`,
//! `deliver=new|all`, `expires=DURATION` (pull requests).
//!
//! How the run's shape maps onto JetStream:
//! - Producers publish with a reply inbox; the PubAck is the ack (publish latency send →
//!   PubAck); `--max-in-flight` is the async publish window. A lost connection declares what
//!   it carried in doubt (`Ack::InDoubt`).
//! - Consumers without a queue group each have their own JetStream consumer (fan-out):
//!   ephemeral by default, durable `NAME-<i>` with `durable=NAME`. Consumers in a queue group
//!   share one durable consumer named after the group (or `durable=NAME`): competing consumers.
//! - Set-up is idempotent and done again after every reconnection, so a restarted server (a
//!   memory stream gone with it) gets its stream and consumers back.
//!
//! # Layout
//! - [`options`]: the URL options.
//! - [`api`]: `$JS.API` requests (streams, consumers) and their errors.
//! - [`producer`], [`consumer`]: the `Producer` and `Consumer` implementations.

pub mod api;
pub mod consumer;
pub mod options;
pub mod producer;

use crate::conn::{Conn, Route};
use crate::{DATA_CHUNK, NatsDriver, NatsSession, inbox_prefix};
use api::{ApiInbox, ConsumerDef, ensure_stream};
use bytes::Bytes;
use consumer::JsConsumer;
use msgbench_core::driver::{
    Capabilities, ConsumerSpec, Driver, DriverError, EventSink, ProducerSpec, SessionSpec,
};
use options::{JsOptions, Mode, stream_for_topic};
use producer::JsProducer;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// The JetStream driver: the core NATS driver's connections, JetStream's semantics.
pub struct JetStreamDriver {
    core: NatsDriver,
    opts: Arc<JsOptions>,
    /// Whether a consumer has said when deliveries lost with a connection come back.
    told_redelivery_wait: Arc<AtomicBool>,
    /// Whether an existing stream's other settings were reported (once per run).
    told_settings: AtomicBool,
}

impl JetStreamDriver {
    /// A driver for `nats+js://[user:pass@|token@]host[:port][,...][?options]`.
    pub fn new(
        url: &str,
        tls: &msgbench_core::scenario::TlsPlan,
        events: EventSink,
        connect_timeout: Duration,
    ) -> Result<Self, DriverError> {
        let opts = Arc::new(JsOptions::parse(url)?);
        Ok(JetStreamDriver {
            core: NatsDriver::new(url, tls, events, connect_timeout)?,
            opts,
            told_redelivery_wait: Arc::default(),
            told_settings: AtomicBool::new(false),
        })
    }

    /// Connections watch the server with this keep-alive period (see [`Conn::watch`]).
    pub fn with_keep_alive(mut self, every: Duration) -> Self {
        self.core.keep_alive = every;
        self
    }

    /// The run's smallest message size (see [`NatsDriver::with_smallest_message`]).
    pub fn with_smallest_message(mut self, bytes: u64) -> Self {
        self.core.smallest_message = bytes;
        self
    }

    /// Reports, once per run, an existing stream whose settings differ from those asked for.
    fn tell_settings(&self, differ: Option<String>) {
        if let Some(m) = differ
            && !self
                .told_settings
                .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            self.core
                .events
                .emit(msgbench_core::driver::DriverEventKind::Warning, m);
        }
    }

    /// The parsed options.
    pub fn options(&self) -> &JsOptions {
        &self.opts
    }

    async fn connect(&self, name: String, index: u64) -> Result<Conn, DriverError> {
        Conn::connect(
            self.core.ep.clone(),
            name,
            self.core.events.clone(),
            self.core.connect_timeout,
            Route {
                index,
                ..Route::default()
            },
            DATA_CHUNK,
        )
        .await
        .map(|mut c| {
            c.watch(self.core.keep_alive);
            c
        })
    }
}

impl Driver for JetStreamDriver {
    type Producer = JsProducer;
    type Consumer = JsConsumer;
    type Session = NatsSession;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            acks: true,
            queue_groups: true,
            request_reply: false,
            responses: false,
            metadata: false,
        }
    }

    fn fd_free_sessions(&self) -> bool {
        self.core.fd_free_sessions()
    }

    fn sessions_subscribe(&self) -> bool {
        self.core.sessions_subscribe()
    }

    fn sessions_request(&self) -> bool {
        self.core.sessions_request()
    }

    fn session_hosts(&self) -> usize {
        self.core.session_hosts()
    }

    async fn producer(&self, spec: &ProducerSpec) -> Result<JsProducer, DriverError> {
        if spec.request_reply {
            return Err(DriverError::Config(
                "nats+js:// has no request/reply (use nats:// for it)".into(),
            ));
        }
        let name = format!("msgbench-js-producer-{}", spec.id);
        let mut conn = self.connect(name.clone(), spec.id as u64).await?;
        let prefix = inbox_prefix(spec.id);
        let mut api = ApiInbox::new(&mut conn, &prefix);
        let inbox = format!("{prefix}ack.");
        conn.subscribe(&format!("{inbox}*"), None);
        let mut stash = VecDeque::new();
        let mut topics: Vec<String> = spec.topics.clone();
        topics.dedup();
        for topic in &topics {
            let stream = self.opts.stream_of(topic);
            let differ =
                ensure_stream(&mut api, &mut conn, &self.opts, &stream, topic, &mut stash).await?;
            self.tell_settings(differ);
        }
        conn.errors.claim();
        let queue_of: Vec<usize> = spec
            .topics
            .iter()
            .enumerate()
            .map(|(i, t)| spec.topics.iter().position(|u| u == t).unwrap_or(i))
            .collect();
        Ok(JsProducer {
            conn,
            api,
            opts: self.opts.clone(),
            events: self.core.events.clone(),
            name,
            topics,
            subjects: spec.topics.iter().map(|t| Bytes::from(t.clone())).collect(),
            inbox: Bytes::from(inbox),
            acks: VecDeque::new(),
            last_token: None,
            refusal_reported: false,
            outstanding: vec![VecDeque::new(); spec.topics.len()],
            queue_of,
            streams_checked: true,
            oversized: crate::Oversized::new(self.core.smallest_message, &self.core.events),
        })
    }

    async fn consumer(&self, spec: &ConsumerSpec) -> Result<JsConsumer, DriverError> {
        if spec.target.is_some() {
            return Err(DriverError::Config(
                "nats+js:// consumers read from the run's own server".into(),
            ));
        }
        let o = &self.opts;
        let name = format!("msgbench-js-consumer-{}", spec.id);
        let mut conn = self.connect(name.clone(), spec.id as u64).await?;
        let prefix = inbox_prefix(spec.id);
        let api = ApiInbox::new(&mut conn, &prefix);
        let stream = o.stream_of(&spec.topic);
        // Who the JetStream consumer is: shared by a queue group, one per consumer otherwise.
        let (cname, durable) = match (&spec.group, &o.durable) {
            (Some(_), Some(d)) => (d.clone(), true),
            (Some(g), None) => (stream_for_topic(g)["MSGBENCH_".len()..].to_string(), true),
            (None, Some(d)) => (format!("{d}-{}", spec.id), true),
            (None, None) => {
                let r = prefix.split('.').nth(2).unwrap_or("0").to_string();
                (format!("msgbench_{r}_{}", spec.id), false)
            }
        };
        let deliver = (o.mode == Mode::Push).then(|| match &spec.group {
            Some(g) => (
                format!("_MSGBENCH.deliver.{stream}.{cname}"),
                Some(g.clone()),
            ),
            None => (format!("{prefix}push"), None),
        });
        let pull_inbox = format!("{prefix}pull");
        match &deliver {
            Some((subject, group)) => {
                conn.subscribe(subject, group.as_deref());
            }
            None => {
                conn.subscribe(&pull_inbox, None);
            }
        }
        let def = ConsumerDef {
            stream: stream.clone(),
            name: cname.clone(),
            durable,
            deliver,
            filter: spec.topic.clone(),
        };
        let body = serde_json::json!({
            "batch": o.batch,
            "expires": o.expires.as_nanos() as u64,
        })
        .to_string();
        let mut c = JsConsumer {
            conn,
            api,
            opts: o.clone(),
            events: self.core.events.clone(),
            name,
            def,
            meta: spec.meta,
            next_subject: format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.{cname}"),
            pull_inbox,
            pull_body: Bytes::from(body),
            requested: 0,
            pull_deadline: tokio::time::Instant::now(),
            stash: VecDeque::new(),
            needs_setup: false,
            told_redelivery_wait: self.told_redelivery_wait.clone(),
        };
        // The consumer exists when this returns: messages published from now on reach it.
        let differ = c.setup().await?;
        self.tell_settings(differ);
        Ok(c)
    }

    async fn session(&self, spec: &SessionSpec) -> Result<NatsSession, DriverError> {
        self.core.session(spec).await
    }
}

impl msgbench_core::registration::Registered for JetStreamDriver {
    const INFO: msgbench_core::registration::DriverInfo = msgbench_core::registration::DriverInfo {
        name: "nats-jetstream",
        schemes: &["nats+js", "nats+js+tls", "nats+js+ws", "nats+js+wss"],
        about: "NATS JetStream: streams (file/memory), publishes confirmed by PubAcks (acks; --max-in-flight = async publish window), pull (batched fetch) and push consumers, durable or ephemeral, explicit acks, redeliveries marked, TLS; nats+js://HOST:PORT?stream=NAME&storage=file|memory&consumer=pull|push&durable=NAME&batch=N&create=1|0&max_bytes=SIZE&replicas=N&ack_pending=N&ack_wait=D&deliver=new|all&expires=D (own client)",
        caps: msgbench_core::driver::Capabilities {
            acks: true,
            queue_groups: true,
            request_reply: false,
            responses: false,
            metadata: false,
        },
        section: None,
    };

    fn check_url(url: &str) -> Result<(), DriverError> {
        JsOptions::parse(url).map(drop)
    }

    fn build(
        url: &str,
        plan: &msgbench_core::scenario::RunPlan,
        events: EventSink,
    ) -> Result<Self, DriverError> {
        Ok(
            JetStreamDriver::new(url, &plan.tls, events, plan.connect_timeout)?
                .with_keep_alive(plan.client.keep_alive)
                .with_smallest_message(plan.size.min()),
        )
    }
}
