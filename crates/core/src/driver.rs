//! The driver API: a messaging system seen only through what a benchmark needs.
//!
//! Drivers speak their protocol and nothing else. They never read clocks, pace, stamp or record
//! metrics: the runner does all of that, identically for every protocol. The traits are generic
//! (not `dyn`), so the runner is monomorphised per driver and no future is boxed per message.
//!
//! Contract for implementers:
//! - [`Producer::send`] hands one message to the client. Awaiting it is backpressure; it returns
//!   once the client has taken the bytes (buffered or written), not when the broker confirmed.
//! - Where the protocol confirms messages (broker acks, replies to requests), the producer reports
//!   them through [`Producer::poll_ack`] with the token the runner gave to `send`; publish latency
//!   is measured from send to that ack. Drivers without confirmations declare
//!   `Capabilities::acks = false` and the runner never polls.
//! - [`Consumer::recv`] must be cancel-safe: the runner polls it inside `select!` with its tick
//!   timer and stop signal.
//! - Connection events (disconnect, reconnect, errors outside a call) go to the [`EventSink`] given
//!   at construction; the runner counts them and writes them to the results file.
//! - [`Driver::session`] opens one bare connection (TCP, TLS, protocol handshake) for the
//!   connection-scale workloads: the runner times it, holds it with [`Session::keep_alive`],
//!   publishes on it now and then, and closes it. Sessions never reconnect: a lost session is
//!   a measured failure, not something to hide.

use bytes::Bytes;
pub use msgbench_metrics::ConnectFailure;
use msgbench_metrics::ErrorKind;
use std::future::Future;
use std::net::IpAddr;
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};
use tokio::sync::mpsc;

/// What a driver can do; the plan is validated against it before anything connects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Producers report confirmations through [`Producer::poll_ack`].
    pub acks: bool,
    /// Consumers can share a subscription (competing consumers / queue groups).
    pub queue_groups: bool,
    /// Request/reply: the producer's acks are replies from responding consumers.
    pub request_reply: bool,
    /// The producer's acks are the system's responses to its requests (HTTP): their latency from
    /// the intended send time is recorded as end-to-end latency, coordinated-omission corrected.
    pub responses: bool,
    /// Producers send [`Outbound::meta`] and consumers fill [`Delivery::meta`] when asked.
    pub metadata: bool,
}

/// Everything a producer needs to know to connect.
#[derive(Debug, Clone)]
pub struct ProducerSpec {
    /// Index of this producer (also written into every stamp).
    pub id: u32,
    /// Topics/subjects this producer sends to; `Outbound::stream` indexes this list.
    pub topics: Vec<String>,
    /// Send requests and report replies as acks.
    pub request_reply: bool,
    /// The window of unacknowledged messages the runner will allow.
    pub max_in_flight: usize,
}

/// Everything a consumer needs to know to subscribe.
#[derive(Debug, Clone)]
pub struct ConsumerSpec {
    /// Index of this consumer.
    pub id: u32,
    /// Topic/subject (or pattern) to subscribe to.
    pub topic: String,
    /// Queue group name for competing consumers; `None` means every consumer gets every message.
    pub group: Option<String>,
    /// Reply to requests (request/reply mode): the driver answers each delivery itself.
    pub respond: bool,
    /// Fill [`Delivery::meta`] (multi-stage tracking reads correlation keys from it).
    pub meta: bool,
    /// Connect here instead of the driver's own URL (same protocol; may carry credentials): a
    /// stage observed on another broker, such as the inbox side of an ECP run.
    pub target: Option<String>,
    /// Local address to connect from (`--source-addrs`); `None`: the system's choice. The
    /// WebSocket, MQTT, NATS, AMQP 0-9-1 and Redis consumers honour it; the others connect
    /// from the system's choice.
    pub source: Option<std::net::IpAddr>,
    /// Hold the connection outside the descriptor table (an io_uring table): set by the runner
    /// only for a driver whose [`Driver::fd_free_consumers`] says it can, and only when the
    /// run's consumers need more descriptors than the open-file limit allows.
    pub fd_free: bool,
    /// One of many receivers (fan-out at connection scale: the runner sets it from
    /// [`MANY_CONSUMERS`] up, and with `fd_free`): keep no read buffer while idle, at the cost
    /// of an allocation per wake-up, so that ten thousand mostly idle subscribers do not each
    /// hold a data client's chunk (64 KiB for MQTT and NATS).
    pub lean: bool,
}

/// From this many consumers in one process on, each is [lean](ConsumerSpec::lean).
pub const MANY_CONSUMERS: usize = 1_000;

/// One message to send.
#[derive(Debug, Clone, Copy)]
pub struct Outbound<'a> {
    /// Index into [`ProducerSpec::topics`].
    pub stream: u32,
    /// Opaque token the driver returns in [`Ack`] for this message.
    pub token: u64,
    /// The stamped payload.
    pub payload: &'a [u8],
    /// Ids and properties to send with it (drivers with `Capabilities::metadata` only).
    pub meta: Option<&'a crate::meta::Meta>,
}

/// A confirmation from the system under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    /// The message sent with `token` was confirmed (`ok`) or refused.
    One {
        /// Token given to `send`.
        token: u64,
        /// Confirmed (true) or refused (false).
        ok: bool,
    },
    /// Every outstanding message with a token up to and including `token` (cumulative acks).
    UpTo {
        /// Highest token covered.
        token: u64,
        /// Confirmed (true) or refused (false).
        ok: bool,
    },
    /// The message sent with `token` will never be answered: its connection ended before an
    /// answer came (an HTTP request without response). Neither confirmed nor refused, it is
    /// in doubt (the server may have acted on it), counted as an expired ack would be.
    Unanswered {
        /// Token given to `send`.
        token: u64,
    },
    /// Every message up to and including `up_to` still outstanding will never be confirmed: the
    /// connection it went out on is gone (a client that reconnects says so before the new
    /// connection's acks, whose cumulative acks must not cover the old connection's messages).
    /// Counted as in doubt right away, as an expired ack would be later.
    InDoubt {
        /// Highest token covered.
        up_to: u64,
    },
    /// The system handed `n` messages back as unroutable (AMQP basic.return). Comes on top of
    /// their confirms, which still arrive: a returned message is accepted but reaches no queue.
    Returned {
        /// How many.
        n: u64,
    },
}

/// One received message.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The payload as sent (stamp first, if it is ours).
    pub payload: Bytes,
    /// The broker marked it as a redelivery.
    pub redelivered: bool,
    /// Ids and properties, when the consumer's spec asked for them
    /// ([`ConsumerSpec::meta`]). A body that is not bytes (an AMQP 1.0 `amqp-value` string,
    /// such as an ECP send event's status) is in `payload` as its UTF-8 text.
    pub meta: Option<Box<crate::meta::Meta>>,
}

/// Errors a driver reports. Strings are fine here: errors are off the hot path.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DriverError {
    /// The target URL or driver options are wrong.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Could not connect.
    #[error("cannot connect to {target}: {reason}")]
    Connect {
        /// Where (credentials removed).
        target: String,
        /// Why.
        reason: String,
        /// The cause, classified for counting.
        cause: ConnectFailure,
    },
    /// A send failed.
    #[error("send failed: {0}")]
    Send(String),
    /// Receiving failed.
    #[error("receive failed: {0}")]
    Receive(String),
    /// Subscribing or provisioning failed.
    #[error("subscribe failed: {0}")]
    Subscribe(String),
    /// The connection is closed.
    #[error("connection closed")]
    Closed,
    /// An operation timed out.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The system refuses this client for good (an access denied, a limit it will not
    /// lift for a reconnection): what retrying would only meet again, in its own words.
    #[error("refused: {0}")]
    Refused(String),
}

impl DriverError {
    /// Whether retrying cannot help (a message the system will never accept, a wrong option):
    /// the producer stops instead of retrying forever.
    pub fn is_fatal(&self) -> bool {
        matches!(self, DriverError::Config(_) | DriverError::Refused(_))
    }

    /// Why a connection attempt failed, for counting failures by reason.
    pub fn connect_failure(&self) -> ConnectFailure {
        match self {
            DriverError::Connect { cause, .. } => *cause,
            DriverError::Timeout(_) => ConnectFailure::Timeout,
            DriverError::Closed => ConnectFailure::Reset,
            _ => ConnectFailure::Other,
        }
    }

    /// The counter this error increments.
    pub fn kind(&self) -> ErrorKind {
        match self {
            DriverError::Config(_) | DriverError::Connect { .. } => ErrorKind::Connect,
            DriverError::Send(_) | DriverError::Refused(_) => ErrorKind::Send,
            DriverError::Receive(_) | DriverError::Subscribe(_) => ErrorKind::Receive,
            DriverError::Closed => ErrorKind::Disconnect,
            DriverError::Timeout(_) => ErrorKind::Timeout,
        }
    }
}

/// Something that happened to a connection outside any call: the runner counts it and writes an
/// `event` line to the results file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverEvent {
    /// What happened.
    pub kind: DriverEventKind,
    /// Detail for humans (no credentials).
    pub detail: String,
}

/// A driver's options that do not resolve (read back from a plan: [`crate::scenario::DriverPlans`])
/// are a configuration error.
impl From<crate::scenario::PlanError> for DriverError {
    fn from(e: crate::scenario::PlanError) -> Self {
        DriverError::Config(e.to_string())
    }
}

/// Kinds of [`DriverEvent`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverEventKind {
    /// A connection was established (after the first, i.e. a reconnect).
    Reconnected,
    /// A connection was lost.
    Disconnected,
    /// The client reported an error (slow consumer, server error...).
    Error,
    /// Something worth knowing that is not an error.
    Warning,
    /// The peer broke the protocol and the connection was failed for it: logged as a
    /// disconnection, counted as a protocol error (not as a disconnection).
    Violation,
    /// The server refused this many operations since the driver last said so, on its own
    /// initiative (core NATS's `-ERR` for a publish it does not permit: there is no
    /// acknowledgement to nack). Logged as an error, counted as that many nack errors.
    Refused(u64),
}

impl From<DriverEventKind> for msgbench_metrics::EventKind {
    fn from(k: DriverEventKind) -> Self {
        use msgbench_metrics::EventKind;
        match k {
            DriverEventKind::Reconnected => EventKind::Reconnected,
            DriverEventKind::Disconnected => EventKind::Disconnected,
            DriverEventKind::Error => EventKind::Error,
            DriverEventKind::Warning => EventKind::Warning,
            DriverEventKind::Violation => EventKind::Disconnected,
            DriverEventKind::Refused(_) => EventKind::Error,
        }
    }
}

/// Where drivers report [`DriverEvent`]s. Cloneable; sending never blocks.
#[derive(Debug, Clone)]
pub struct EventSink(mpsc::UnboundedSender<DriverEvent>);

impl EventSink {
    /// A sink and the receiver the runner reads.
    pub fn channel() -> (EventSink, mpsc::UnboundedReceiver<DriverEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (EventSink(tx), rx)
    }

    /// Reports that `client`'s connection was lost, and why (one wording for every driver).
    pub fn connection_lost(&self, client: &str, why: &dyn std::fmt::Display) {
        self.emit(
            DriverEventKind::Disconnected,
            format!("{client}: connection lost: {why}"),
        );
    }

    /// Reports that `client` failed its connection because the peer broke the protocol.
    pub fn protocol_violation(&self, client: &str, why: &dyn std::fmt::Display) {
        self.emit(
            DriverEventKind::Violation,
            format!("{client}: connection failed: {why}"),
        );
    }

    /// Reports that `client` is connected again to `target` (`note`: anything to add).
    pub fn reconnected(&self, client: &str, target: &str, note: &str) {
        self.emit(
            DriverEventKind::Reconnected,
            format!("{client}: reconnected to {target}{note}"),
        );
    }

    /// Reports an event (dropped silently if the run is over).
    pub fn emit(&self, kind: DriverEventKind, detail: impl Into<String>) {
        let _ = self.0.send(DriverEvent {
            kind,
            detail: detail.into(),
        });
    }
}

/// One bare connection of a connection-scale workload.
#[derive(Debug, Clone)]
pub struct SessionSpec {
    /// Index of this connection within the run.
    pub id: u64,
    /// Topic its occasional messages go to.
    pub topic: String,
    /// Local address to connect from (`--source-addrs`); `None` lets the system choose.
    pub source: Option<IpAddr>,
    /// Hold the socket outside the descriptor table (`msgbench_net::ring`): set when the run
    /// holds more connections than the open-file limit allows, only for drivers whose
    /// [`Driver::fd_free_sessions`] says they can.
    pub fd_free: bool,
}

/// The waker of a look without waiting: the runner polls a producer's acks with it between
/// sends ([`look_context`]). It wakes nothing, and I/O layers that recognise it
/// ([`is_look`]) neither arm timers nor replace the waker the task's real wait registered
/// (a registration per send would cost more than the message). Recognised by its data
/// pointer, a static's address: unlike [`Waker::noop`], whose vtable may be duplicated across
/// codegen units, that identity is reliable.
static LOOK_MARK: u8 = 0;
static LOOK_VTABLE: RawWakerVTable =
    RawWakerVTable::new(look_clone, look_nothing, look_nothing, look_nothing);
static LOOK: Waker =
    // SAFETY: the vtable's functions do nothing and never read the data pointer.
    unsafe {
        Waker::from_raw(RawWaker::new(
            &LOOK_MARK as *const u8 as *const (),
            &LOOK_VTABLE,
        ))
    };

fn look_clone(p: *const ()) -> RawWaker {
    RawWaker::new(p, &LOOK_VTABLE)
}

fn look_nothing(_: *const ()) {}

/// A context for a look without waiting (see [`is_look`]).
#[inline]
pub fn look_context() -> Context<'static> {
    Context::from_waker(&LOOK)
}

/// Whether `cx` is a look without waiting ([`look_context`]): no task will be woken from it.
#[inline]
pub fn is_look(cx: &Context<'_>) -> bool {
    std::ptr::eq(cx.waker().data(), &LOOK_MARK as *const u8 as *const ())
}

/// A messaging system. One value per run; it creates producers and consumers.
pub trait Driver: Send + Sync + 'static {
    /// The sending side.
    type Producer: Producer;
    /// The receiving side.
    type Consumer: Consumer;
    /// A bare connection for connection-scale workloads.
    type Session: Session;

    /// What this driver supports.
    fn capabilities(&self) -> Capabilities;

    /// Connects one producer.
    fn producer(
        &self,
        spec: &ProducerSpec,
    ) -> impl Future<Output = Result<Self::Producer, DriverError>> + Send;

    /// Connects one consumer and subscribes; the subscription is active when this returns, so
    /// messages sent afterwards are not missed.
    fn consumer(
        &self,
        spec: &ConsumerSpec,
    ) -> impl Future<Output = Result<Self::Consumer, DriverError>> + Send;

    /// What a request/response protocol answered, by status (HTTP), read once every client
    /// has closed, for the results file. Drivers without response statuses have none.
    fn responses(&self) -> Option<msgbench_metrics::ResponseSummary> {
        None
    }

    /// Whether a producer's messages carry their payload to the system. HTTP GET and HEAD
    /// requests carry none: their sends count no bytes (a run's sent MB/s would otherwise be
    /// `--size` times the requests, none of it on the wire).
    fn sends_payload(&self) -> bool {
        true
    }

    /// Whether [`Driver::session`] honours [`SessionSpec::fd_free`], so a run may hold more
    /// connections than the open-file limit allows.
    fn fd_free_sessions(&self) -> bool {
        false
    }

    /// Whether [`Driver::consumer`] honours [`ConsumerSpec::fd_free`], so a message run may
    /// have more consumers than the open-file limit allows.
    fn fd_free_consumers(&self) -> bool {
        false
    }

    /// How many destinations (host and port) sessions are spread over: each has its own range
    /// of local ports, which the connection preflight counts on.
    fn session_hosts(&self) -> usize {
        1
    }

    /// Whether sessions can [subscribe](Session::subscribe) (a journey's `subscribe` step):
    /// a run whose journey subscribes is refused up front on a driver whose sessions cannot.
    fn sessions_subscribe(&self) -> bool {
        false
    }

    /// Whether sessions can send [requests](Session::request) (a journey's `request` step).
    fn sessions_request(&self) -> bool {
        false
    }

    /// Opens one connection and completes the protocol handshake (the connect latency is the
    /// time this takes). Drivers without connections return [`DriverError::Config`].
    fn session(
        &self,
        spec: &SessionSpec,
    ) -> impl Future<Output = Result<Self::Session, DriverError>> + Send;
}

/// One held connection (see [`Driver::session`]).
pub trait Session: Send + 'static {
    /// Sends one message with the protocol's cheapest delivery (fire and forget). Returns once
    /// the bytes are written.
    fn publish(&mut self, payload: &[u8]) -> impl Future<Output = Result<(), DriverError>> + Send;

    /// Keeps the connection alive (heartbeats, answering the server) until the connection
    /// fails; never returns `Ok` on its own. Cancel-safe: the runner drops it to publish or to
    /// close.
    fn keep_alive(&mut self) -> impl Future<Output = DriverError> + Send;

    /// Closes the connection the protocol's polite way.
    fn close(self) -> impl Future<Output = Result<(), DriverError>> + Send;

    /// Subscribes to `topic` with the protocol's cheapest delivery (a journey's `subscribe`
    /// step); returns once the server confirmed it, so nothing published afterwards is missed.
    /// What arrives is taken while the session waits ([`Session::keep_alive`]) or publishes,
    /// and counted by [`Session::take_received`]. The default refuses: only drivers that say
    /// [`Driver::sessions_subscribe`] are asked.
    fn subscribe(&mut self, topic: &str) -> impl Future<Output = Result<(), DriverError>> + Send {
        let _ = topic;
        async {
            Err(DriverError::Subscribe(
                "this protocol's sessions do not subscribe".into(),
            ))
        }
    }

    /// Sends `payload` as a request on the session's topic and returns when its reply came
    /// (the runner times the round trip and gives up after its time-out, cancelling this; a
    /// reply arriving after that is told apart and dropped). Deliveries meanwhile are counted
    /// as [`Session::keep_alive`] counts them. The default refuses: only drivers that say
    /// [`Driver::sessions_request`] are asked.
    fn request(&mut self, payload: &[u8]) -> impl Future<Output = Result<(), DriverError>> + Send {
        let _ = payload;
        async {
            Err(DriverError::Send(
                "this protocol's sessions do not send requests".into(),
            ))
        }
    }

    /// Messages and payload bytes delivered to the session's subscriptions since the last
    /// call.
    fn take_received(&mut self) -> (u64, u64) {
        (0, 0)
    }
}

/// The session type of drivers that have no connections (the in-process broker).
pub enum NoSession {}

impl Session for NoSession {
    async fn publish(&mut self, _: &[u8]) -> Result<(), DriverError> {
        match *self {}
    }
    async fn keep_alive(&mut self) -> DriverError {
        match *self {}
    }
    async fn close(self) -> Result<(), DriverError> {
        match self {}
    }
}

/// The sending side of a driver. Owned by one producer task.
pub trait Producer: Send + 'static {
    /// Hands one message to the client (see the module docs for what returning means).
    fn send(&mut self, msg: Outbound<'_>) -> impl Future<Output = Result<(), DriverError>> + Send;

    /// Called by the runner before it waits (for the pacer, for acks): a driver that batches
    /// sends should hand over what it holds now, so no message waits on the generator's idleness.
    fn idle(&mut self) -> impl Future<Output = Result<(), DriverError>> + Send {
        async { Ok(()) }
    }

    /// Pushes anything buffered to the wire.
    fn flush(&mut self) -> impl Future<Output = Result<(), DriverError>> + Send;

    /// The next confirmation, if one is ready. Polled for every send when `Capabilities::acks`
    /// is true, otherwise once per interval and at the end (for notices such as
    /// [`Ack::Returned`]); in both cases also while a paced producer waits for its next send,
    /// with a real waker: a driver may read its socket there (pings, a server's close) and
    /// wake the producer when something comes. `Ready(None)` means no more acks will come (the
    /// connection is gone).
    fn poll_ack(&mut self, cx: &mut Context<'_>) -> Poll<Option<Ack>> {
        let _ = cx;
        Poll::Ready(None)
    }

    /// Flushes and closes. A fatal error ([`DriverError::is_fatal`]) stops the run as a
    /// failed send would: what the driver learned only from the last answers (the target
    /// speaks another protocol) is not lost because no send came after it.
    fn close(self) -> impl Future<Output = Result<(), DriverError>> + Send;
}

/// The receiving side of a driver. Owned by one consumer task.
pub trait Consumer: Send + 'static {
    /// The next delivery; `Ok(None)` when the subscription ended. Must be cancel-safe.
    fn recv(&mut self) -> impl Future<Output = Result<Option<Delivery>, DriverError>> + Send;

    /// The ordering lane of the delivery `recv` returned last: the partition, for systems that
    /// order messages only within partitions of a topic (Kafka). A stream's messages on
    /// different lanes may arrive in any order, so the integrity tracker counts a message as
    /// reordered only when it arrives after a later one of its stream *on the same lane*.
    /// `None` (the default): the whole stream is one ordered lane.
    fn lane(&self) -> Option<u32> {
        None
    }

    /// Stops (`false`) or resumes (`true`) taking messages from the system, for backlog runs
    /// whose consumers are held back until the backlog is built: the backlog must stay in the
    /// system under test, not in the client. A consumer that is not read from takes at most its
    /// protocol's window (prefetch, credit, max-ack-pending), which is what the default (do
    /// nothing) relies on; a client that fetches ahead on its own (Kafka's prefetch, up to tens
    /// of megabytes) pauses its fetching here.
    fn set_fetching(&mut self, on: bool) {
        let _ = on;
    }

    /// Unsubscribes and closes.
    fn close(self) -> impl Future<Output = Result<(), DriverError>> + Send;
}

/// A cross-protocol pipeline: producers from one driver, consumers from another (`--consume-from`),
/// e.g. publish on AMQP and receive over MQTT through a broker that bridges the two. The stamp
/// travels in the payload, so end-to-end latency and completeness are measured across the hop
/// exactly as within one protocol.
pub struct Pipeline<P, C> {
    producers: P,
    consumers: C,
}

impl<P: Driver, C: Driver> Pipeline<P, C> {
    /// Producers (and connection workloads) from `producers`, consumers from `consumers`.
    pub fn new(producers: P, consumers: C) -> Self {
        Pipeline {
            producers,
            consumers,
        }
    }
}

impl<P: Driver, C: Driver> Driver for Pipeline<P, C> {
    type Producer = P::Producer;
    type Consumer = C::Consumer;
    type Session = P::Session;

    fn capabilities(&self) -> Capabilities {
        let (p, c) = (self.producers.capabilities(), self.consumers.capabilities());
        Capabilities {
            acks: p.acks,
            queue_groups: c.queue_groups,
            // A reply would come back on the producer's protocol: not across a hop.
            request_reply: false,
            responses: p.responses,
            metadata: p.metadata && c.metadata,
        }
    }

    fn producer(
        &self,
        spec: &ProducerSpec,
    ) -> impl Future<Output = Result<Self::Producer, DriverError>> + Send {
        self.producers.producer(spec)
    }

    fn consumer(
        &self,
        spec: &ConsumerSpec,
    ) -> impl Future<Output = Result<Self::Consumer, DriverError>> + Send {
        self.consumers.consumer(spec)
    }

    fn sends_payload(&self) -> bool {
        self.producers.sends_payload()
    }

    fn fd_free_sessions(&self) -> bool {
        self.producers.fd_free_sessions()
    }

    fn fd_free_consumers(&self) -> bool {
        self.consumers.fd_free_consumers()
    }

    fn session_hosts(&self) -> usize {
        self.producers.session_hosts()
    }

    fn sessions_subscribe(&self) -> bool {
        self.producers.sessions_subscribe()
    }

    fn sessions_request(&self) -> bool {
        self.producers.sessions_request()
    }

    fn session(
        &self,
        spec: &SessionSpec,
    ) -> impl Future<Output = Result<Self::Session, DriverError>> + Send {
        self.producers.session(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The look waker is recognised, also cloned (as a driver storing it would), and no
    /// other waker is taken for it.
    #[test]
    fn a_look_is_told_from_a_wait() {
        let cx = look_context();
        assert!(is_look(&cx));
        let cloned = cx.waker().clone();
        assert!(is_look(&Context::from_waker(&cloned)));
        assert!(!is_look(&Context::from_waker(Waker::noop())));
    }
}
