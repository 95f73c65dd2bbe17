//! # msgbench-driver-amqp
//!
//! AMQP 0-9-1 (RabbitMQ and anything that speaks it) over a lean client built on the
//! `amq-protocol` codec: each producer, consumer and held session owns one connection with one
//! channel, TCP_NODELAY on, optional TLS. Publishing copies a pre-encoded method and header
//! frame per message; bodies are received as slices of the read buffer.
//!
//! Topology, declared by the clients before anything is sent (declares are idempotent):
//! - producers publish to `amqp.exchange` (default `msgbench.exchange`, type
//!   `amqp.exchange_type`) with the topic as routing key (`""` = the default exchange: the
//!   topic is the queue name);
//! - fan-out consumers each get an exclusive, server-named queue bound with the topic, so every
//!   consumer receives every message;
//! - a queue group shares one queue `msgbench.<group>.<topic>` (competing consumers);
//! - `durable`, `queue_type` (classic / quorum / stream), `max_length` and `max_length_bytes`
//!   apply to the shared queues; `purge` empties them before the run; non-durable ones are
//!   auto-deleted after it.
//! - with `queue_type = "stream"` (RabbitMQ's streams over AMQP 0-9-1) every consumer reads
//!   the one stream `msgbench.<topic>` whole (a stream is a log, not a queue: reading takes
//!   nothing away), from its end (`x-stream-offset` `next`), with a prefetch and manual acks as
//!   RabbitMQ requires; so consumers are fan-out ones and a queue group is refused. A consumer
//!   that reconnects goes on after the last entry it received (its `x-stream-offset` header),
//!   so nothing appended meanwhile is lost to it.
//! - closing sends channel.close before connection.close: RabbitMQ confirms the channel close
//!   only after handling every publish before it, whereas closing the connection at once was
//!   measured to lose the last ~100 unconfirmed publishes of a 200,000-message run.
//!
//! What is measured: with `confirm`, publish latency is basic.publish → basic.ack from the
//! broker (multiple acks confirm every earlier message; nacks count as refusals). Consumers
//! use `prefetch` and either no-ack or one multiple-ack every `ack_every` deliveries (and when
//! they go idle, so nothing waits on the generator). A consumer whose spec asks for metadata
//! ([`ConsumerSpec::meta`]) puts each delivery's routing key in `Meta::topic`.
//!
//! Failures: a lost connection is a `disconnected` event, then re-established with backoff and
//! the channel set up again; confirms outstanding at the cut never come and expire in the
//! runner's window (counted as timeouts: in doubt). Unroutable mandatory messages come back
//! as basic.return and are counted as `returned`.
//!
//! # Layout
//! - [`codec`]: frames (amq-protocol for methods, fast paths for publish and bodies).
//! - [`conn`]: one connection: handshake, synchronous calls, heartbeats, close.
//! - this file: topology and the `Driver`, `Producer`, `Consumer` and `Session` implementations.
#![deny(missing_docs)]

pub mod codec;
pub mod conn;
pub mod link;
pub mod mux;
pub mod options;
mod session;

use amq_protocol::protocol::{AMQPClass, basic, channel, connection, exchange, queue};
use amq_protocol::types::{AMQPValue, FieldTable, ShortString};
use bytes::{Bytes, BytesMut};
use codec::{Frame, PublishTemplate};
use conn::{Conn, Endpoint};
use link::{Caller, Link};
use msgbench_core::driver::{
    Ack, Capabilities, Consumer, ConsumerSpec, Delivery, Driver, DriverError, DriverEventKind,
    EventSink, Outbound, Producer, ProducerSpec, SessionSpec,
};
use msgbench_core::scenario::{ClientPlan, TlsPlan};
use mux::Mux;
pub use options::AmqpPlan;
pub use session::AmqpSession;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::sync::OnceCell;
use tokio::time::{Instant, Sleep};

/// Bytes buffered before an unpaced producer writes them out.
pub const WRITE_BATCH: usize = 64 * 1024;
const DATA_CHUNK: usize = 64 * 1024;
const SESSION_CHUNK: usize = 512;

/// A shared connection, connected by the first client that needs it.
type MuxSlot = Arc<OnceCell<Arc<Mux>>>;

/// The AMQP 0-9-1 driver.
pub struct AmqpDriver(Arc<Inner>);

/// What every client of a run shares: where to connect and the topology.
struct Inner {
    ep: Arc<Endpoint>,
    amqp: AmqpPlan,
    client: ClientPlan,
    run_id: u32,
    events: EventSink,
    timeout: Duration,
    /// Shared connections by (role, index) when `channels_per_connection` > 1.
    muxes: std::sync::Mutex<HashMap<(&'static str, u64), MuxSlot>>,
    /// Shared queues this run has declared. The first consumer of a queue declares (and
    /// purges) it alone: RabbitMQ answers a second, concurrent declare of a quorum queue with
    /// declare-ok before the queue's Raft process runs, and a purge then kills the connection
    /// with 541 INTERNAL_ERROR. Later consumers declare it again, without purging.
    declared: tokio::sync::Mutex<std::collections::HashSet<String>>,
    /// A held session declared the exchange: later ones publish and subscribe without asking
    /// again (a declare per session would be a round trip per connection of a storm).
    sessions_declared: std::sync::atomic::AtomicBool,
    /// Said once: a fan-out consumer reads a queue of its own, which the shared queues'
    /// settings (`--queue-type`, `--max-length`, `--max-length-bytes`) do not shape.
    own_queue_told: std::sync::atomic::AtomicBool,
}

impl AmqpDriver {
    /// A driver for `amqp[s]://[user[:pass]@]host[:port][/vhost]`.
    pub fn new(
        url: &str,
        amqp: &AmqpPlan,
        client: &ClientPlan,
        tls: &TlsPlan,
        run_id: u32,
        events: EventSink,
        timeout: Duration,
    ) -> Result<Self, DriverError> {
        let mut ep = Endpoint::parse(url, || msgbench_net::Tls::new(tls))?;
        ep.pipeline = client.pipeline_handshake;
        Ok(Self(Arc::new(Inner {
            ep: Arc::new(ep),
            amqp: amqp.clone(),
            client: client.clone(),
            run_id,
            events,
            timeout,
            muxes: Default::default(),
            declared: Default::default(),
            sessions_declared: Default::default(),
            own_queue_told: Default::default(),
        })))
    }
}

impl Inner {
    async fn connect(
        &self,
        role: &str,
        i: u64,
        source: Option<std::net::IpAddr>,
        events: bool,
        chunk: usize,
    ) -> Result<Conn, DriverError> {
        Conn::connect(
            self.ep.clone(),
            self.client.client_id_for(self.run_id, role, i),
            events.then(|| self.events.clone()),
            source,
            self.timeout,
            self.client.keep_alive,
            chunk,
        )
        .await
    }

    /// The link client `i` of `role` talks through: a connection of its own, or with
    /// `channels_per_connection` = N > 1, channel `i % N + 1` of shared connection `i / N`.
    async fn link(
        &self,
        role: &'static str,
        i: u64,
        source: Option<std::net::IpAddr>,
    ) -> Result<Link, DriverError> {
        let n = self.amqp.channels_per_connection.max(1) as u64;
        if n == 1 {
            return Ok(Link::Own(
                self.connect(role, i, source, true, DATA_CHUNK).await?,
            ));
        }
        let cell = self
            .muxes
            .lock()
            .expect("mux registry")
            .entry((role, i / n))
            .or_default()
            .clone();
        let mux = cell
            .get_or_try_init(|| async {
                let conn = self.connect(role, i / n, source, true, DATA_CHUNK).await?;
                // The broker said how many channels a connection may have: more would have
                // the connection closed (RabbitMQ) or work only where it is not enforced.
                let max = conn.channel_max;
                if max != 0 && n > u64::from(max) {
                    return Err(DriverError::Config(format!(
                        "{}: the broker allows {max} channels per connection (its channel-max); \
                         --channels {n} asks for more",
                        self.ep.display
                    )));
                }
                Ok::<_, DriverError>(Mux::start(conn, n as u16, self.timeout))
            })
            .await?;
        Ok(Link::Shared(mux.channel((i % n) as u16 + 1).await?))
    }

    /// Declares the exchange (not the default exchange, nor the predeclared `amq.*` ones, which
    /// only the broker may declare: `amq.topic` is where RabbitMQ's MQTT and STOMP plugins
    /// publish and subscribe).
    async fn declare_exchange(&self, c: &mut impl Caller) -> Result<(), DriverError> {
        if self.amqp.exchange.is_empty() || self.amqp.exchange.starts_with("amq.") {
            return Ok(());
        }
        let r = c
            .call(AMQPClass::Exchange(exchange::AMQPMethod::Declare(
                exchange::Declare {
                    exchange: ShortString::from(self.amqp.exchange.as_str()),
                    kind: ShortString::from(self.amqp.exchange_type.as_str()),
                    passive: false,
                    durable: self.amqp.durable,
                    auto_delete: false,
                    internal: false,
                    nowait: false,
                    arguments: FieldTable::default(),
                },
            )))
            .await;
        match r {
            Ok(AMQPClass::Exchange(exchange::AMQPMethod::DeclareOk(_))) => Ok(()),
            Ok(other) => Err(DriverError::Subscribe(format!(
                "expected exchange.declare-ok, got {other:?}"
            ))),
            Err(e) => Err(DriverError::Subscribe(format!(
                "declaring exchange `{}`: {e}",
                self.amqp.exchange
            ))),
        }
    }

    /// Declares a queue (server-named when `name` is empty), binds it and, with `purge`,
    /// empties it; returns its name.
    async fn declare_queue(
        &self,
        c: &mut impl Caller,
        name: &str,
        topic: &str,
        shared: bool,
        purge: bool,
    ) -> Result<String, DriverError> {
        Ok(self.declare_counted(c, name, topic, shared, purge).await?.0)
    }

    /// [`Inner::declare_queue`], also returning how many messages the queue held when declared.
    async fn declare_counted(
        &self,
        c: &mut impl Caller,
        name: &str,
        topic: &str,
        shared: bool,
        purge: bool,
    ) -> Result<(String, u32), DriverError> {
        let mut args = FieldTable::default();
        let stream = shared && self.stream();
        if shared {
            if self.amqp.queue_type != "classic" {
                let kind = self.amqp.queue_type.as_str();
                args.insert("x-queue-type".into(), AMQPValue::LongString(kind.into()));
            }
            if let Some(n) = self.amqp.max_length {
                args.insert("x-max-length".into(), AMQPValue::LongLongInt(n as i64));
            }
            let bytes = match self.amqp.max_length_bytes {
                None if stream => {
                    let segment = options::STREAM_SEGMENT as i64;
                    args.insert(
                        "x-stream-max-segment-size-bytes".into(),
                        AMQPValue::LongLongInt(segment),
                    );
                    Some(options::STREAM_RETENTION)
                }
                b => b,
            };
            if let Some(n) = bytes {
                args.insert(
                    "x-max-length-bytes".into(),
                    AMQPValue::LongLongInt(n as i64),
                );
            }
        }
        let sub =
            |e: std::io::Error| DriverError::Subscribe(format!("declaring queue `{name}`: {e}"));
        let declared = match c
            .call(AMQPClass::Queue(queue::AMQPMethod::Declare(
                queue::Declare {
                    queue: ShortString::from(name),
                    passive: false,
                    durable: shared && self.amqp.durable,
                    exclusive: !shared,
                    // Non-durable shared queues go with their last consumer, so a finished run
                    // leaves no queue behind that later runs' messages would pile up in.
                    auto_delete: !(shared && self.amqp.durable),
                    nowait: false,
                    arguments: args,
                },
            )))
            .await
            .map_err(sub)?
        {
            AMQPClass::Queue(queue::AMQPMethod::DeclareOk(ok)) => {
                (ok.queue.to_string(), ok.message_count)
            }
            other => {
                return Err(DriverError::Subscribe(format!(
                    "expected queue.declare-ok, got {other:?}"
                )));
            }
        };
        let (declared, held) = declared;
        if !self.amqp.exchange.is_empty() {
            match c
                .call(AMQPClass::Queue(queue::AMQPMethod::Bind(queue::Bind {
                    queue: ShortString::from(declared.as_str()),
                    exchange: ShortString::from(self.amqp.exchange.as_str()),
                    routing_key: ShortString::from(topic),
                    nowait: false,
                    arguments: FieldTable::default(),
                })))
                .await
                .map_err(sub)?
            {
                AMQPClass::Queue(queue::AMQPMethod::BindOk(_)) => {}
                other => {
                    return Err(DriverError::Subscribe(format!(
                        "expected queue.bind-ok, got {other:?}"
                    )));
                }
            }
        }
        if shared && purge && !stream {
            match c
                .call(AMQPClass::Queue(queue::AMQPMethod::Purge(queue::Purge {
                    queue: ShortString::from(declared.as_str()),
                    nowait: false,
                })))
                .await
                .map_err(sub)?
            {
                AMQPClass::Queue(queue::AMQPMethod::PurgeOk(_)) => {}
                other => {
                    return Err(DriverError::Subscribe(format!(
                        "expected queue.purge-ok, got {other:?}"
                    )));
                }
            }
        }
        Ok((declared, held))
    }

    /// The queue a consumer of `spec` reads, declared and bound (and purged when `purge`).
    async fn consumer_queue(
        &self,
        c: &mut Link,
        spec: &ConsumerSpec,
        purge: bool,
    ) -> Result<String, DriverError> {
        self.declare_exchange(c).await?;
        let name = match (&spec.group, self.amqp.exchange.is_empty()) {
            // The default exchange routes by queue name: the topic is the queue.
            (_, true) => spec.topic.clone(),
            (Some(g), false) => format!("msgbench.{g}.{}", spec.topic),
            // A stream is read whole by each consumer: one per topic, shared by name.
            (None, false) if self.stream() => format!("msgbench.{}", spec.topic),
            (None, false) => {
                let a = &self.amqp;
                let shaped = a.queue_type != "classic"
                    || a.max_length.is_some()
                    || a.max_length_bytes.is_some();
                if shaped
                    && !self
                        .own_queue_told
                        .swap(true, std::sync::atomic::Ordering::Relaxed)
                {
                    self.events.emit(
                        DriverEventKind::Warning,
                        "--queue-type, --max-length and --max-length-bytes shape shared queues \
                         (--queue-group): these fan-out consumers each read an exclusive classic \
                         queue of their own, without them",
                    );
                }
                return self.declare_queue(c, "", &spec.topic, false, false).await;
            }
        };
        let mut declared = self.declared.lock().await;
        if declared.contains(&name) {
            drop(declared);
            return self.declare_queue(c, &name, &spec.topic, true, false).await;
        }
        let (queue, held) = self
            .declare_counted(c, &name, &spec.topic, true, purge)
            .await?;
        // A durable or still-used queue from an earlier run keeps what that run left: every
        // message of it costs the broker here too and arrives as foreign.
        if held > 0 && !purge && !self.stream() {
            self.events.emit(
                DriverEventKind::Warning,
                format!(
                    "queue `{queue}` held {held} messages from before this run: they are \
                     delivered too (counted as foreign) and the broker works for them; --purge \
                     empties it first"
                ),
            );
        }
        declared.insert(name);
        Ok(queue)
    }

    /// Declares the consumer's queue and starts consuming from it. `first`: the run's initial
    /// subscription, the only one that purges (a resubscription after a reconnect must not
    /// throw away what the queue kept for it meanwhile). `resume`: a stream consumer's next
    /// offset, when it received anything before.
    async fn subscribe(
        &self,
        c: &mut Link,
        spec: &ConsumerSpec,
        first: bool,
        resume: Option<u64>,
    ) -> Result<(), DriverError> {
        let queue = self
            .consumer_queue(c, spec, first && self.amqp.purge)
            .await?;
        let start = resume.map_or(conn::StreamStart::Next, conn::StreamStart::At);
        let stream = self.stream().then_some(start);
        conn::start_consuming(c, &queue, self.amqp.prefetch, self.amqp.auto_ack, stream)
            .await
            .map_err(|e| DriverError::Subscribe(format!("consuming from `{queue}`: {e}")))
    }

    /// Whether the shared queues are RabbitMQ streams.
    fn stream(&self) -> bool {
        self.amqp.queue_type == options::STREAM
    }

    async fn setup_producer(&self, c: &mut Link) -> Result<(), DriverError> {
        self.declare_exchange(c).await?;
        if self.amqp.confirm {
            c.confirm_select()
                .await
                .map_err(|e| DriverError::Subscribe(format!("confirm.select: {e}")))?;
        }
        Ok(())
    }
}

impl Driver for AmqpDriver {
    type Producer = AmqpProducer;
    type Consumer = AmqpConsumer;
    type Session = AmqpSession;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            acks: self.0.amqp.confirm,
            queue_groups: true,
            request_reply: false,
            responses: false,
            metadata: false,
        }
    }

    async fn producer(&self, spec: &ProducerSpec) -> Result<AmqpProducer, DriverError> {
        let d = &self.0;
        short("the exchange name", &d.amqp.exchange)?;
        for t in &spec.topics {
            short("the routing key", t)?;
        }
        let mut conn = d.link("pub", spec.id as u64, None).await?;
        d.setup_producer(&mut conn).await?;
        let ch = conn.channel();
        let templates = spec
            .topics
            .iter()
            .map(|t| {
                PublishTemplate::new(ch, &d.amqp.exchange, t, d.amqp.mandatory, d.amqp.persistent)
            })
            .collect();
        Ok(AmqpProducer {
            conn,
            templates,
            confirm: d.amqp.confirm,
            mandatory: d.amqp.mandatory,
            next_tag: 1,
            tag_offset: None,
            acks: std::collections::VecDeque::new(),
            returns_unconfirmed: 0,
            confirmed_to: 0,
            held_nack: None,
            refused: None,
            return_told: false,
            last_write: Instant::now(),
            driver: self.0.clone(),
            ready: true,
        })
    }

    async fn consumer(&self, spec: &ConsumerSpec) -> Result<AmqpConsumer, DriverError> {
        let d = &self.0;
        short("the exchange name", &d.amqp.exchange)?;
        short("the routing key", &spec.topic)?;
        if let Some(g) = &spec.group {
            short("the queue name", &format!("msgbench.{g}.{}", spec.topic))?;
            if d.stream() {
                return Err(DriverError::Config(format!(
                    "queue group `{g}` on a stream: every consumer of a stream reads all of it, so consumers cannot compete for its messages (drop --queue-group for fan-out consumers of one stream, or use --queue-type quorum)"
                )));
            }
        }
        let mut conn = d.link("sub", spec.id as u64, spec.source).await?;
        d.subscribe(&mut conn, spec, true, None).await?;
        let hb = conn.heartbeat_every();
        Ok(AmqpConsumer {
            conn,
            driver: self.0.clone(),
            spec: spec.clone(),
            auto_ack: d.amqp.auto_ack,
            ack_every: d.amqp.ack_every as u64,
            prefetch: d.amqp.prefetch,
            unacked: 0,
            last_tag: 0,
            pending: None,
            heartbeat: Box::pin(tokio::time::sleep(half(hb))),
            ready: true,
            stream: d.stream(),
            stream_next: None,
        })
    }

    async fn session(&self, spec: &SessionSpec) -> Result<AmqpSession, DriverError> {
        short("the routing key", &spec.topic)?;
        let conn = self
            .0
            .connect("conn", spec.id, spec.source, false, SESSION_CHUNK)
            .await?;
        Ok(AmqpSession::new(conn, &spec.topic, self.0.clone()))
    }

    /// Sessions subscribe the way the run's consumers do: each to a queue of its own bound to
    /// the exchange (every subscriber hears every message), or, on the default exchange, to
    /// the queue the topic names (subscribers share its messages).
    fn sessions_subscribe(&self) -> bool {
        true
    }

    /// Requests use RabbitMQ's direct reply-to (`amq.rabbitmq.reply-to`); a broker without it
    /// refuses the first request's consume, and the step says so.
    fn sessions_request(&self) -> bool {
        true
    }
}

/// AMQP short strings (exchange, routing key, queue names) hold at most 255 bytes.
fn short(what: &str, v: &str) -> Result<(), DriverError> {
    if v.len() > 255 {
        return Err(DriverError::Config(format!(
            "{what} `{}...` is {} bytes; AMQP allows at most 255",
            &v[..v.floor_char_boundary(40)],
            v.len()
        )));
    }
    Ok(())
}

/// How often an otherwise silent client sends a heartbeat: twice per negotiated interval.
pub(crate) fn half(hb: Duration) -> Duration {
    if hb.is_zero() {
        Duration::from_secs(3600 * 24 * 365)
    } else {
        hb / 2
    }
}

/// The sending side: one connection, one channel.
pub struct AmqpProducer {
    conn: Link,
    templates: Vec<PublishTemplate>,
    confirm: bool,
    mandatory: bool,
    /// Delivery tag of the next publish on this channel.
    next_tag: u64,
    /// token = tag + offset, fixed at the first publish on each channel.
    tag_offset: Option<u64>,
    acks: std::collections::VecDeque<Ack>,
    /// Returns (under confirms) whose confirm has not come yet (it comes after the return).
    returns_unconfirmed: u64,
    /// The highest delivery tag (the channel's own) a confirm has covered so far: a multiple
    /// confirm up to tag T covers the T - `confirmed_to` messages after it (brokers confirm a
    /// channel's publishes in order).
    confirmed_to: u64,
    /// A nack of one publish not yet known to be a refusal: Qpid Broker-J nacks an unroutable
    /// mandatory publish just before its return (RabbitMQ returns it, then acks). The frame
    /// after it decides: a return makes it that message's confirm, anything else (or nothing
    /// more to read) a refusal.
    held_nack: Option<u64>,
    /// The broker refused this user's publishes (403 ACCESS_REFUSED): the next send stops the
    /// producer with it.
    refused: Option<String>,
    /// The first return's reason was said.
    return_told: bool,
    last_write: Instant,
    driver: Arc<Inner>,
    /// Connected and the channel set up. A reconnection cancelled half-way (a caller's
    /// `select!` moved on) leaves a connection without its channel: the next call redoes it.
    ready: bool,
}

impl AmqpProducer {
    /// Connected with the channel set up.
    fn up(&self) -> bool {
        self.ready && self.conn.is_connected()
    }

    /// A held nack (see `held_nack`) that no return followed is a refusal after all.
    fn release_held_nack(&mut self) {
        if let Some(token) = self.held_nack.take() {
            self.acks.push_back(Ack::One { token, ok: false });
        }
    }

    /// A confirm of the channel's `tag` (and, `multiple`, of every publish before it not yet
    /// confirmed), as the runner's ack: the returns it covers are no longer waiting for one.
    fn settle(&mut self, tag: u64, multiple: bool, ok: bool) {
        let covered = self.covered(tag, multiple);
        self.returns_unconfirmed = self.returns_unconfirmed.saturating_sub(covered);
        self.confirmed_to = self.confirmed_to.max(tag);
        let token = tag.wrapping_add(self.tag_offset.unwrap_or(0));
        self.acks.push_back(if multiple {
            Ack::UpTo { token, ok }
        } else {
            Ack::One { token, ok }
        });
    }

    /// How many publishes a confirm of `tag` settles: one, or (multiple) every one after the
    /// last confirmed tag up to it.
    fn covered(&self, tag: u64, multiple: bool) -> u64 {
        if multiple {
            tag.saturating_sub(self.confirmed_to)
        } else {
            1
        }
    }

    fn on_frame(&mut self, f: Frame) {
        let Frame::Method(_, m) = f else { return };
        if let AMQPClass::Basic(basic::AMQPMethod::Return(r)) = &*m {
            // Said once: why (312 NO_ROUTE, or a full queue's 506 on Qpid Broker-J).
            if !self.return_told {
                self.return_told = true;
                self.driver.events.emit(
                    DriverEventKind::Warning,
                    format!(
                        "the broker returned a mandatory publish: {} {} (each one is counted \
                         as returned)",
                        r.reply_code, r.reply_text
                    ),
                );
            }
            // Its header and body frames follow and are skipped (only methods matter here).
            match self.acks.back_mut() {
                Some(Ack::Returned { n }) => *n += 1,
                _ => self.acks.push_back(Ack::Returned { n: 1 }),
            }
            match self.held_nack.take() {
                // The nack just before was this return's confirm.
                Some(token) => self.acks.push_back(Ack::One { token, ok: true }),
                None if self.confirm => self.returns_unconfirmed += 1,
                None => {}
            }
            return;
        }
        self.release_held_nack();
        // Acks come only with confirms (which set the offset); closes and flow control always
        // matter.
        let off = self.tag_offset.unwrap_or(0);
        match *m {
            AMQPClass::Basic(basic::AMQPMethod::Ack(_) | basic::AMQPMethod::Nack(_))
                if self.tag_offset.is_none() => {}
            // A returned message's confirm after its return: RabbitMQ acks it; a nack there
            // (one, or several at once) that covers only returned messages is their confirm
            // too, not a refusal: they were handled, and counted as returned. (Qpid Broker-J
            // nacks before it returns: `held_nack`.)
            AMQPClass::Basic(basic::AMQPMethod::Nack(n))
                if self.returns_unconfirmed > 0
                    && self.returns_unconfirmed >= self.covered(n.delivery_tag, n.multiple) =>
            {
                self.settle(n.delivery_tag, n.multiple, true);
            }
            AMQPClass::Basic(basic::AMQPMethod::Ack(a)) => {
                self.settle(a.delivery_tag, a.multiple, true);
            }
            // A nack of one publish with no return before it: a return may come next.
            AMQPClass::Basic(basic::AMQPMethod::Nack(n))
                if self.mandatory && self.covered(n.delivery_tag, n.multiple) == 1 =>
            {
                self.confirmed_to = self.confirmed_to.max(n.delivery_tag);
                self.held_nack = Some(n.delivery_tag.wrapping_add(off));
            }
            AMQPClass::Basic(basic::AMQPMethod::Nack(n)) => {
                self.settle(n.delivery_tag, n.multiple, false);
            }
            ref other => {
                if let Err(e) = self.conn.check_close(self.conn.channel(), other) {
                    // 403: the user may not publish here. Reconnecting would only be refused
                    // again (and count every message in doubt), so the producer stops.
                    if access_refused(other) {
                        self.refused = Some(e.to_string());
                    }
                    self.conn.lost(&e);
                }
            }
        }
    }

    fn service_reads(&mut self) {
        let mut cx = Context::from_waker(Waker::noop());
        while let Poll::Ready(r) = self.conn.poll_frame(&mut cx, false) {
            match r {
                Ok(f) => self.on_frame(f),
                Err(e) => {
                    self.conn.lost(&e);
                    self.release_held_nack();
                    return;
                }
            }
        }
        self.settle_held_nack();
    }

    /// Nothing more to read for now: a held nack is a refusal, unless part of a frame (the
    /// return, perhaps) is already here.
    fn settle_held_nack(&mut self) {
        if self.conn.unread() == 0 {
            self.release_held_nack();
        }
    }

    /// The broker paused the channel's publishing (`channel.flow`): its answer goes out and the
    /// send waits, reading (and keeping the connection alive), until the broker lets the channel
    /// go on or the connection is lost. A publish sent meanwhile would have the channel closed.
    async fn wait_flow(&mut self) -> Result<(), DriverError> {
        let events = self.driver.events.clone();
        events.emit(
            DriverEventKind::Warning,
            "the broker paused publishing on a producer's channel (channel.flow): its sends wait \
             until the broker lets it go on",
        );
        let beat = half(self.conn.heartbeat_every());
        let started = Instant::now();
        while self.up() && self.conn.flow_paused() {
            if !self.conn.wbuf().is_empty() {
                self.write_out().await?;
            }
            match tokio::time::timeout(beat, self.conn.read_frame()).await {
                Ok(Ok(f)) => self.on_frame(f),
                Ok(Err(e)) => self.conn.lost(&e),
                Err(_) => codec::put_heartbeat(self.conn.wbuf()),
            }
        }
        if self.up() {
            events.emit(
                DriverEventKind::Warning,
                format!(
                    "the broker let a producer's channel publish again after {:.1} s (channel.flow)",
                    started.elapsed().as_secs_f64()
                ),
            );
        }
        Ok(())
    }

    async fn write_out(&mut self) -> Result<(), DriverError> {
        if let Err(e) = self.conn.flush().await {
            self.conn.lost(&e);
            return Err(DriverError::Send(e.to_string()));
        }
        self.last_write = Instant::now();
        Ok(())
    }

    /// Without confirms nothing marks when the broker is done with the last publishes, so their
    /// returns could still be on the way: a synchronous basic.qos (harmless on a publishing
    /// channel) is answered only after every earlier method, so once its qos-ok is read every
    /// return has been counted.
    async fn sync_returns(&mut self) {
        let ch = self.conn.channel();
        codec::put_method(
            self.conn.wbuf(),
            ch,
            AMQPClass::Basic(basic::AMQPMethod::Qos(basic::Qos {
                prefetch_count: 0,
                global: false,
            })),
        );
        let done = tokio::time::timeout(self.driver.timeout, async {
            self.conn.flush().await?;
            loop {
                match self.conn.read_frame().await? {
                    Frame::Method(_, m)
                        if matches!(*m, AMQPClass::Basic(basic::AMQPMethod::QosOk(_))) =>
                    {
                        return Ok::<(), std::io::Error>(());
                    }
                    f => self.on_frame(f),
                }
            }
        })
        .await;
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => self.conn.lost(&e),
            Err(_) => {}
        }
    }

    /// Reconnects and sets the channel up again: the exchange may be gone with a restarted
    /// broker, and confirms are per channel.
    async fn reconnect(&mut self) -> Result<(), DriverError> {
        self.conn.try_reconnect().await?;
        let driver = self.driver.clone();
        if let Err(e) = driver.setup_producer(&mut self.conn).await {
            self.conn.lost(&std::io::Error::other(e.to_string()));
            return Err(e);
        }
        self.leave_channel();
        Ok(())
    }

    /// Confirms are per channel: what the old one left unconfirmed is in doubt, and a new
    /// channel's multiple-acks must not sweep it up.
    fn leave_channel(&mut self) {
        self.release_held_nack();
        if let Some(off) = self.tag_offset
            && self.next_tag > 1
        {
            self.acks.push_back(Ack::InDoubt {
                up_to: (self.next_tag - 1).wrapping_add(off),
            });
        }
        self.next_tag = 1;
        self.tag_offset = None;
        self.confirmed_to = 0;
        self.returns_unconfirmed = 0;
    }
}

/// Whether a close is the broker's 403 ACCESS_REFUSED (a permission the user lacks).
fn access_refused(m: &AMQPClass) -> bool {
    let code = match m {
        AMQPClass::Channel(channel::AMQPMethod::Close(c)) => c.reply_code,
        AMQPClass::Connection(connection::AMQPMethod::Close(c)) => c.reply_code,
        _ => return false,
    };
    code == 403
}

impl Producer for AmqpProducer {
    async fn send(&mut self, msg: Outbound<'_>) -> Result<(), DriverError> {
        if let Some(why) = self.refused.take() {
            self.leave_channel();
            return Err(DriverError::Refused(format!(
                "the broker refuses this user's publishes ({why}): the producer stops"
            )));
        }
        if self.conn.flow_paused() && self.up() {
            self.wait_flow().await?;
        }
        if !self.up() {
            self.ready = false;
            self.reconnect().await?;
            self.ready = true;
        }
        if self.confirm {
            let off = *self
                .tag_offset
                .get_or_insert(msg.token.wrapping_sub(self.next_tag));
            debug_assert_eq!(self.next_tag.wrapping_add(off), msg.token);
            self.next_tag += 1;
        }
        let fm = self.conn.frame_max();
        self.templates[msg.stream as usize].put(self.conn.wbuf(), msg.payload, fm);
        self.conn.set_published();
        if self.conn.wbuf().len() >= WRITE_BATCH {
            self.write_out().await?;
            self.service_reads();
        }
        Ok(())
    }

    async fn idle(&mut self) -> Result<(), DriverError> {
        if !self.up() {
            return Ok(());
        }
        if self.conn.wbuf().is_empty()
            && self.last_write.elapsed() >= half(self.conn.heartbeat_every())
        {
            codec::put_heartbeat(self.conn.wbuf());
        }
        if !self.conn.wbuf().is_empty() {
            self.write_out().await?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), DriverError> {
        if !self.up() {
            return Err(DriverError::Closed);
        }
        self.write_out().await?;
        if self.mandatory && !self.confirm {
            self.sync_returns().await;
        }
        Ok(())
    }

    fn poll_ack(&mut self, cx: &mut Context<'_>) -> Poll<Option<Ack>> {
        loop {
            if let Some(a) = self.acks.pop_front() {
                return Poll::Ready(Some(a));
            }
            if !self.up() {
                return Poll::Pending;
            }
            match self.conn.poll_frame(cx, false) {
                Poll::Ready(Ok(f)) => self.on_frame(f),
                Poll::Ready(Err(e)) => {
                    self.conn.lost(&e);
                    // In doubt now, not at the next send: a producer whose window is full
                    // sends nothing until acks free it, and would wait out the ack timeout.
                    self.leave_channel();
                }
                Poll::Pending => {
                    self.settle_held_nack();
                    if self.acks.is_empty() {
                        return Poll::Pending;
                    }
                }
            }
        }
    }

    async fn close(mut self) -> Result<(), DriverError> {
        if self.up() {
            let _ = self.conn.flush().await;
            self.conn.close().await;
        }
        // Read only after the last send (a count-bounded run pipelined every message first):
        // the run still stops on it rather than ending as if nothing had been said.
        match self.refused.take() {
            Some(why) => Err(DriverError::Refused(format!(
                "the broker refuses this user's publishes ({why})"
            ))),
            None => Ok(()),
        }
    }
}

/// A delivery being assembled from its frames.
struct Pending {
    tag: u64,
    redelivered: bool,
    /// Its routing key, kept only when the consumer's spec asks for metadata.
    routing_key: Option<String>,
    size: Option<u64>,
    body: BytesMut,
    single: Option<Bytes>,
    /// Its offset in the RabbitMQ stream it came from.
    offset: Option<u64>,
}

/// The receiving side: one connection, one consumer on one queue.
pub struct AmqpConsumer {
    conn: Link,
    driver: Arc<Inner>,
    spec: ConsumerSpec,
    auto_ack: bool,
    ack_every: u64,
    prefetch: u16,
    unacked: u64,
    last_tag: u64,
    pending: Option<Pending>,
    heartbeat: Pin<Box<Sleep>>,
    /// Connected and consuming. A resubscription cancelled half-way (the runner's `select!`
    /// moved on) leaves a connection with no consumer on it, which the broker's heartbeats
    /// would keep alive for good: the next call redoes it.
    ready: bool,
    /// It reads a RabbitMQ stream: each delivery's offset is kept.
    stream: bool,
    /// The offset after the last complete delivery's, where a resubscription goes on reading.
    stream_next: Option<u64>,
}

impl AmqpConsumer {
    /// Acks everything received so far with one multiple-ack.
    fn ack_now(&mut self) {
        if !self.auto_ack && self.unacked > 0 {
            let ch = self.conn.channel();
            codec::put_ack(self.conn.wbuf(), ch, self.last_tag, true);
            self.unacked = 0;
        }
    }

    fn poll_delivery(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<Delivery>> {
        loop {
            if self.heartbeat.as_mut().poll(cx).is_ready() {
                codec::put_heartbeat(self.conn.wbuf());
                let next = Instant::now() + half(self.conn.heartbeat_every());
                self.heartbeat.as_mut().reset(next);
            }
            // Going idle: ack what was received, so the broker's window never waits on us.
            let idle = self.conn.unread() < 8;
            if idle {
                self.ack_now();
            }
            let f = match self.conn.poll_frame(cx, true) {
                Poll::Ready(Ok(f)) => f,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            match f {
                Frame::Method(_, m) => match *m {
                    AMQPClass::Basic(basic::AMQPMethod::Deliver(d)) => {
                        self.pending = Some(Pending {
                            tag: d.delivery_tag,
                            redelivered: d.redelivered,
                            routing_key: self.spec.meta.then(|| d.routing_key.to_string()),
                            size: None,
                            body: BytesMut::new(),
                            single: None,
                            offset: None,
                        });
                    }
                    // The broker dropped our consumer (RabbitMQ's consumer cancel notify: the
                    // queue was deleted, or a quorum queue's leader moved): without it the
                    // consumer would wait on a live channel for deliveries that never come.
                    // Subscribed again, on a fresh channel.
                    AMQPClass::Basic(basic::AMQPMethod::Cancel(c)) => {
                        let why = format!(
                            "the broker cancelled consumer `{}` (its queue was deleted or moved); \
                             subscribing again",
                            c.consumer_tag
                        );
                        self.driver
                            .events
                            .emit(DriverEventKind::Warning, why.clone());
                        return Poll::Ready(Err(std::io::Error::new(
                            std::io::ErrorKind::ConnectionAborted,
                            why,
                        )));
                    }
                    ref other => self.conn.check_close(self.conn.channel(), other)?,
                },
                Frame::Header(_, size, props) => {
                    if let Some(p) = self.pending.as_mut() {
                        if self.stream {
                            p.offset = props.as_deref().and_then(codec::stream_offset);
                        }
                        p.size = Some(size);
                        if size == 0 {
                            return Poll::Ready(Ok(self.finish()));
                        }
                    }
                }
                Frame::Body(_, piece) => {
                    let Some(p) = self.pending.as_mut() else {
                        continue;
                    };
                    let size = p.size.unwrap_or(0);
                    if p.single.is_none() && p.body.is_empty() && piece.len() as u64 == size {
                        p.single = Some(piece);
                    } else {
                        if let Some(first) = p.single.take() {
                            p.body.extend_from_slice(&first);
                        }
                        p.body.extend_from_slice(&piece);
                    }
                    let have = p.single.as_ref().map_or(p.body.len(), |b| b.len()) as u64;
                    if have >= size {
                        return Poll::Ready(Ok(self.finish()));
                    }
                }
                Frame::Heartbeat => {}
            }
        }
    }

    fn finish(&mut self) -> Delivery {
        let p = self.pending.take().expect("a delivery in progress");
        self.last_tag = p.tag;
        if let Some(n) = p.offset {
            self.stream_next = Some(n + 1);
        }
        if !self.auto_ack {
            self.unacked += 1;
            let limit = if self.prefetch > 0 {
                self.ack_every.min(self.prefetch as u64)
            } else {
                self.ack_every
            };
            if self.unacked >= limit {
                self.ack_now();
            }
        }
        Delivery {
            payload: p.single.unwrap_or_else(|| p.body.freeze()),
            redelivered: p.redelivered,
            meta: p.routing_key.map(|k| {
                Box::new(msgbench_core::meta::Meta {
                    topic: Some(k),
                    ..Default::default()
                })
            }),
        }
    }

    /// Reconnects and consumes again (a fan-out consumer's exclusive queue died with the old
    /// connection, so a new one is declared: messages routed in between are lost, and counted).
    async fn resubscribe(&mut self) -> Result<(), DriverError> {
        self.conn.try_reconnect().await?;
        self.unacked = 0;
        self.pending = None;
        let driver = self.driver.clone();
        let resume = self.stream_next;
        if let Err(e) = driver
            .subscribe(&mut self.conn, &self.spec, false, resume)
            .await
        {
            self.conn.lost(&std::io::Error::other(e.to_string()));
            return Err(e);
        }
        Ok(())
    }
}

use std::future::Future as _;

impl Consumer for AmqpConsumer {
    async fn recv(&mut self) -> Result<Option<Delivery>, DriverError> {
        loop {
            if !self.ready || !self.conn.is_connected() {
                self.ready = false;
                match self.resubscribe().await {
                    Ok(()) => self.ready = true,
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
                continue;
            }
            match std::future::poll_fn(|cx| self.poll_delivery(cx)).await {
                Ok(d) => return Ok(Some(d)),
                Err(e) => self.conn.lost(&e),
            }
        }
    }

    async fn close(mut self) -> Result<(), DriverError> {
        self.ack_now();
        let _ = self.conn.flush().await;
        self.conn.close().await;
        Ok(())
    }
}

impl msgbench_core::registration::Registered for AmqpDriver {
    const INFO: msgbench_core::registration::DriverInfo = msgbench_core::registration::DriverInfo {
        name: "amqp",
        schemes: &["amqp", "amqps"],
        // acks: with --confirm only (the plan decides).
        about: "AMQP 0-9-1 (RabbitMQ, Qpid Broker-J): exchanges, fan-out and shared queues, confirms, prefetch, manual/auto acks, PLAIN or SCRAM login, TLS, connection workloads (own lean client on amq-protocol)",
        caps: Capabilities {
            acks: true,
            queue_groups: true,
            request_reply: false,
            responses: false,
            metadata: false,
        },
        section: Some(msgbench_core::scenario::SectionSpec::of::<
            options::AmqpSection,
        >()),
    };

    fn build(
        url: &str,
        plan: &msgbench_core::scenario::RunPlan,
        events: EventSink,
    ) -> Result<Self, DriverError> {
        let amqp = plan.drivers.get::<options::AmqpSection>()?;
        AmqpDriver::new(
            url,
            &amqp,
            &plan.client,
            &plan.tls,
            plan.run_id,
            events,
            plan.connect_timeout,
        )
    }
}
