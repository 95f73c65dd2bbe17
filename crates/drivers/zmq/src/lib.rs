//! # msgbench-driver-zmq
//!
//! ZeroMQ, brokerless: producers and consumers talk to each other directly over TCP (ZMTP 3,
//! NULL mechanism) through the pure-Rust [`zeromq`] crate (0.7, tokio runtime). Two patterns:
//!
//! - **PUSH/PULL** (`pattern=pushpull`, the default): each message goes to exactly one consumer,
//!   round robin over the connected consumers of its topic. Several consumers of one topic are
//!   therefore *competing consumers*: run them as a queue group (`[consumers] mode = "queue"`);
//!   in fan-out mode the driver refuses more than one consumer per topic rather than report
//!   every other message as lost. `Capabilities::queue_groups` is true.
//! - **PUB/SUB** (`pattern=pubsub`): each message goes to every consumer subscribed to its topic
//!   (fan-out). `Capabilities::queue_groups` is false.
//!
//! # Target URL
//!
//! `zmq://HOST:PORT[?pattern=pushpull|pubsub][&bind=consumer|producer][&peers=N]`
//!
//! - `bind=consumer` (default): consumer `i` binds `HOST:PORT+i`; each producer connects to the
//!   consumers of its topic. `bind=producer`: producer `i` binds `HOST:PORT+i`; each consumer
//!   connects to the producers of its topic. `PORT` 0 gives every binding client a free port of
//!   its own (both sides must then run in this process, which is how msgbench runs).
//! - `peers=N` (default 1): for a topic with no client of the other side in this process (a run
//!   with `--consumers 0` against a ZeroMQ program elsewhere): with `bind=consumer` the producer
//!   connects to `PORT .. PORT+N`; with `bind=producer` it waits for N consumers (PUSH) or N
//!   subscriptions (PUB) before it returns.
//! - `sndhwm`, `rcvhwm`: refused with an explanation — zeromq 0.7 has no high-water marks (its
//!   per-peer queues hold a fixed 100,000 messages). Unknown options are refused too.
//!
//! Consumer topics ending in `*` are prefix filters (`--subscribe 'bench.*'` receives every
//! `bench.…` topic); any other topic is received exactly, so `msgbench.1` never receives
//! `msgbench.10`.
//!
//! # Wire layout
//!
//! - PUSH/PULL: one frame, the payload exactly as the runner handed it to `send` (stamp first).
//!   Topics are not on the wire: each topic's consumers are their own endpoints, and a producer
//!   has one PUSH socket per topic connected to them.
//! - PUB/SUB: two frames, `[topic][payload]` (the ZeroMQ pub/sub envelope). SUB subscribes to the
//!   topic (a prefix of the first frame, as ZeroMQ filters); the consumer drops messages whose
//!   topic its filter does not match exactly and hands the second frame, untouched, to the runner.
//!
//! # No slow joiners
//!
//! msgbench connects every consumer before the first producer, and a producer returns only once
//! its consumers can receive: a PUSH producer once it is connected to (or, binding, has accepted)
//! every consumer of its topic; a PUB producer once the subscription of every consumer of its
//! topic has *arrived*. For the latter the producer is an XPUB socket (a PUB that shows its
//! subscriptions), which it reads until it has counted them — deterministic, no sleeps. With
//! `bind=producer` the consumers cannot connect before the producers exist, so [`Driver::consumer`]
//! returns with a task that connects to each producer of its topic as it binds, and the
//! producer's wait above is what guarantees no message is sent before anyone listens.
//!
//! # What is measured
//!
//! ZeroMQ has no acknowledgements (`Capabilities::acks` is false); latency is end to end (stamp
//! to delivery). What "sent" means differs by socket, and neither drops a message in the
//! generator:
//!
//! - PUSH: `send` is done when the message is in the crate's queue for the chosen peer; that
//!   peer's own task writes what is queued, up to 128 messages per write; the producer
//!   yields to it every [`PUSH_YIELD`] sends, so the queue stays short. A full queue (100,000
//!   messages) makes `send` wait: backpressure, not loss. `close` waits (at most the connect
//!   timeout) until the queues are written out.
//! - XPUB: `send` writes the message to every matching subscriber's connection before it
//!   returns — one write per message and subscriber, so PUB/SUB runs at a fraction of PUSH/PULL's
//!   rate. The crate's plain PUB socket would batch, but it drops messages silently once its
//!   queues fill (indistinguishable from loss in the network) and learns subscriptions where the
//!   producer cannot see them (no way to rule out slow joiners); libzmq's PUB drops at its HWM.
//!   The producer also takes in subscription changes (a SUB that reconnected) every
//!   [`SUBSCRIPTION_CHECK`] sends and whenever the runner waits.
//!
//! # Limits
//!
//! - The crate allocates per message (its frame list, its queue node, its boxed futures); the
//!   driver adds nothing but an amortised share of a 64 KiB arena for the bytes it copies.
//! - Connections are not re-established by PUSH and XPUB sockets (SUB sockets reconnect); a peer
//!   that leaves mid-run is reported as a `disconnected` event, and what was on its way counts as
//!   lost. Peers leaving once producers close are the end of the run and are not reported.
//! - With `bind=producer`, consumers connect only to producers of this process.
//! - No request/reply, no connection workloads ([`Driver::session`] refuses), no CURVE/TLS, no
//!   multipart payloads.
//!
//! # Layout
//! - [`options`]: the URL.
//! - `registry`: who listens where within this process.
//! - `sockets`: binding, connecting, waiting, events and errors.
//! - this file: the `Driver`, `Producer` and `Consumer` implementations.

pub mod options;
mod registry;
mod sockets;

use bytes::{Bytes, BytesMut};
use msgbench_core::driver::{
    Capabilities, Consumer, ConsumerSpec, Delivery, Driver, DriverError, DriverEventKind,
    EventSink, NoSession, Outbound, Producer, ProducerSpec, SessionSpec,
};
use options::{BindSide, Options, Pattern};
use registry::{BoundProducer, Filter, LocalConsumer, Registry};
use sockets::{InSock, who};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use zeromq::{PushSocket, Socket, SocketRecv, SocketSend, XPubSocket, ZmqError, ZmqMessage};

/// A PUB producer takes in subscription changes (a subscriber that reconnected, or joined late)
/// once every this many sends, and whenever the runner waits.
pub const SUBSCRIPTION_CHECK: u32 = 1024;

/// An unpaced PUSH producer yields once every this many sends, so the crate's writer task (on
/// the same thread) writes while the queue is short instead of once it holds 100,000 messages.
pub const PUSH_YIELD: u32 = 256;

/// How often a closing PUSH producer checks whether its queue is written out.
const CLOSE_POLL: Duration = Duration::from_millis(1);

/// Bytes a producer's copy arena allocates at a time: payloads are copied into it and handed to
/// the crate as slices, so small messages cost no allocation of their own.
pub const ARENA_CHUNK: usize = 64 * 1024;

/// The ZeroMQ driver. One per run; every client it creates shares its registry.
pub struct ZmqDriver {
    opts: Options,
    events: EventSink,
    connect_timeout: Duration,
    registry: Arc<Registry>,
}

impl ZmqDriver {
    /// A driver for `zmq://HOST:PORT[?options]` (see the crate docs).
    ///
    /// `connect_timeout` bounds each client's setup: connecting, and waiting for its peers.
    ///
    /// # Errors
    /// [`DriverError::Config`] naming the part of the URL or the option that is wrong.
    pub fn new(
        url: &str,
        events: EventSink,
        connect_timeout: Duration,
    ) -> Result<ZmqDriver, DriverError> {
        Ok(ZmqDriver {
            opts: Options::parse(url)?,
            events,
            connect_timeout,
            registry: Arc::new(Registry::default()),
        })
    }

    /// The parsed URL.
    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// Time allowed for one client's setup: a little less than the runner's connect timeout, so
    /// the driver's error (which says what was missing) arrives before the runner's generic one.
    fn budget(&self) -> Duration {
        self.connect_timeout.mul_f64(0.9)
    }

    fn socket_options(&self) -> zeromq::SocketOptions {
        sockets::socket_options(self.budget())
    }

    /// How many consumers a binding producer of `topics` waits for: those of this process that
    /// receive any of them, or else `peers`.
    fn expected_peers(
        &self,
        consumers: &[Vec<LocalConsumer>],
        who: &str,
    ) -> Result<usize, DriverError> {
        let mut ids: Vec<u32> = consumers.iter().flatten().map(|c| c.id).collect();
        ids.sort_unstable();
        ids.dedup();
        let n = if ids.is_empty() {
            usize::from(self.opts.peers)
        } else {
            ids.len()
        };
        if n == 0 {
            return Err(nobody(who));
        }
        Ok(n)
    }

    /// The endpoints a connecting producer of one topic connects to: the consumers of this
    /// process that receive it, or else `peers` endpoints from `PORT`.
    fn endpoints_for(
        &self,
        consumers: &[LocalConsumer],
        who: &str,
    ) -> Result<Vec<String>, DriverError> {
        let local: Vec<String> = consumers
            .iter()
            .filter_map(|c| c.endpoint.clone())
            .collect();
        if !local.is_empty() {
            return Ok(local);
        }
        let remote: Vec<String> = self
            .opts
            .remote_endpoints()?
            .iter()
            .map(ToString::to_string)
            .collect();
        if remote.is_empty() {
            return Err(nobody(who));
        }
        Ok(remote)
    }
}

fn nobody(who: &str) -> DriverError {
    DriverError::Config(format!(
        "{who}: its topic has no consumer in this run and peers=0: nobody to send to"
    ))
}

impl Driver for ZmqDriver {
    type Producer = ZmqProducer;
    type Consumer = ZmqConsumer;
    type Session = NoSession;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            acks: false,
            queue_groups: self.opts.pattern == Pattern::PushPull,
            request_reply: false,
            responses: false,
            metadata: false,
        }
    }

    async fn producer(&self, spec: &ProducerSpec) -> Result<ZmqProducer, DriverError> {
        let who = who("producer", spec.id);
        self.registry.set_producing();
        if spec.request_reply {
            return Err(DriverError::Config(
                "request/reply is not supported by the zmq driver".into(),
            ));
        }
        if spec.topics.is_empty() {
            return Err(DriverError::Config(format!("{who} has no topic")));
        }
        let deadline = Instant::now() + self.budget();
        let consumers: Vec<Vec<LocalConsumer>> = spec
            .topics
            .iter()
            .map(|t| self.registry.consumers_of(t))
            .collect();
        if self.opts.pattern == Pattern::PushPull {
            for (t, cs) in spec.topics.iter().zip(&consumers) {
                if cs.len() > 1 && cs.iter().any(|c| !c.competing) {
                    return Err(DriverError::Config(format!(
                        "topic `{t}` has {} fan-out consumers, but PUSH/PULL gives each message \
                         to one of them: use competing consumers (--queue-group, or \
                         [consumers] mode = \"queue\") or pattern=pubsub",
                        cs.len()
                    )));
                }
            }
        }
        let out = match (self.opts.pattern, self.opts.bind) {
            (Pattern::PushPull, BindSide::Consumer) => {
                let mut socks = Vec::with_capacity(spec.topics.len());
                for cs in &consumers {
                    let mut s = PushSocket::with_options(self.socket_options());
                    let mon = s.monitor();
                    for ep in self.endpoints_for(cs, &who)? {
                        s.connect(&ep)
                            .await
                            .map_err(|e| sockets::connect_error(&ep, e))?;
                    }
                    let (ev, reg) = (self.events.clone(), self.registry.clone());
                    sockets::forward_events(mon, ev, reg, who.clone());
                    socks.push(s);
                }
                Out::Push(socks)
            }
            (Pattern::PushPull, BindSide::Producer) => {
                if spec.topics.len() > 1 {
                    return Err(DriverError::Config(format!(
                        "{who} has {} topics: with PUSH/PULL and bind=producer a producer binds \
                         one endpoint, so it takes one topic (or use bind=consumer)",
                        spec.topics.len()
                    )));
                }
                let n = self.expected_peers(&consumers, &who)?;
                let mut s = PushSocket::with_options(self.socket_options());
                let mut mon = s.monitor();
                let ep = self.opts.endpoint(spec.id)?.to_string();
                let bound = s
                    .bind(&ep)
                    .await
                    .map_err(|e| sockets::bind_error(&ep, &who, e))?;
                self.registry.add_producer(BoundProducer {
                    topics: spec.topics.clone(),
                    endpoint: bound.to_string(),
                });
                sockets::wait_accepted(&mut mon, n, deadline, &who).await?;
                let (ev, reg) = (self.events.clone(), self.registry.clone());
                sockets::forward_events(mon, ev, reg, who.clone());
                Out::Push(vec![s])
            }
            (Pattern::PubSub, bind) => {
                let mut s = XPubSocket::with_options(self.socket_options());
                let n = if bind == BindSide::Consumer {
                    let mut eps: Vec<String> = Vec::new();
                    for cs in &consumers {
                        for ep in self.endpoints_for(cs, &who)? {
                            if !eps.contains(&ep) {
                                eps.push(ep);
                            }
                        }
                    }
                    for ep in &eps {
                        s.connect(ep)
                            .await
                            .map_err(|e| sockets::connect_error(ep, e))?;
                    }
                    eps.len()
                } else {
                    let n = self.expected_peers(&consumers, &who)?;
                    let ep = self.opts.endpoint(spec.id)?.to_string();
                    let bound = s
                        .bind(&ep)
                        .await
                        .map_err(|e| sockets::bind_error(&ep, &who, e))?;
                    self.registry.add_producer(BoundProducer {
                        topics: spec.topics.clone(),
                        endpoint: bound.to_string(),
                    });
                    n
                };
                sockets::wait_subscribed(&mut s, n, deadline, &who).await?;
                Out::Pub {
                    sock: s,
                    topics: spec
                        .topics
                        .iter()
                        .map(|t| Bytes::copy_from_slice(t.as_bytes()))
                        .collect(),
                }
            }
        };
        Ok(ZmqProducer {
            out,
            arena: BytesMut::with_capacity(ARENA_CHUNK),
            registry: self.registry.clone(),
            until_check: SUBSCRIPTION_CHECK,
            until_yield: PUSH_YIELD,
            close_wait: self.connect_timeout,
            events: self.events.clone(),
        })
    }

    async fn consumer(&self, spec: &ConsumerSpec) -> Result<ZmqConsumer, DriverError> {
        let who = who("consumer", spec.id);
        if spec.respond {
            return Err(DriverError::Config(
                "request/reply is not supported by the zmq driver".into(),
            ));
        }
        let pubsub = self.opts.pattern == Pattern::PubSub;
        let filter = Filter::new(&spec.topic);
        let mut sock = InSock::new(pubsub, &filter, self.socket_options()).await?;
        let mon = sock.monitor();
        let mut entry = LocalConsumer {
            id: spec.id,
            filter: filter.clone(),
            competing: spec.group.is_some(),
            endpoint: None,
        };
        let (sock, connecting) = match self.opts.bind {
            BindSide::Consumer => {
                let ep = self.opts.endpoint(spec.id)?;
                entry.endpoint = Some(sock.bind(&ep, &who).await?);
                (Some(sock), None)
            }
            BindSide::Producer => {
                let (stop_tx, stop_rx) = oneshot::channel();
                let task = connect_to_producers(
                    sock,
                    filter.clone(),
                    self.registry.watch_producers(),
                    stop_rx,
                    self.events.clone(),
                    who.clone(),
                );
                let connecting = Connecting {
                    stop: Some(stop_tx),
                    join: tokio::spawn(task),
                };
                (None, Some(connecting))
            }
        };
        // Entered only now: a producer never sees a consumer that is not listening yet.
        self.registry.add_consumer(entry);
        sockets::forward_events(mon, self.events.clone(), self.registry.clone(), who);
        Ok(ZmqConsumer {
            sock,
            connecting,
            filter,
            pubsub,
        })
    }

    async fn session(&self, _spec: &SessionSpec) -> Result<NoSession, DriverError> {
        Err(DriverError::Config(
            "connection workloads are not supported for zmq: ZeroMQ sockets are not sessions \
             with a server to hold"
                .into(),
        ))
    }
}

/// With `bind=producer`: connects a consumer's socket to every producer of its topic as each
/// binds, until the consumer's first `recv` takes the socket back.
async fn connect_to_producers(
    mut sock: InSock,
    filter: Filter,
    mut producers: watch::Receiver<Vec<BoundProducer>>,
    mut stop: oneshot::Receiver<()>,
    events: EventSink,
    who: String,
) -> Result<InSock, DriverError> {
    let mut seen = 0usize;
    loop {
        let todo: Vec<String> = {
            let list = producers.borrow_and_update();
            let new = list.get(seen..).unwrap_or_default();
            seen = list.len();
            new.iter()
                .filter(|p| p.topics.iter().any(|t| filter.matches(t.as_bytes())))
                .map(|p| p.endpoint.clone())
                .collect()
        };
        for ep in todo {
            if let Err(e) = sock.connect(&ep).await {
                events.emit(
                    DriverEventKind::Error,
                    format!("{who} cannot connect to the producer at {ep}: {e}"),
                );
                return Err(e);
            }
        }
        tokio::select! {
            biased;
            changed = producers.changed() => if changed.is_err() { return Ok(sock) },
            _ = &mut stop => return Ok(sock),
        }
    }
}

enum Out {
    /// One PUSH socket per topic (`Outbound::stream` indexes them).
    Push(Vec<PushSocket>),
    /// One XPUB socket; the topic frames, by stream.
    Pub {
        sock: XPubSocket,
        topics: Vec<Bytes>,
    },
}

/// The sending side: PUSH sockets (one per topic) or one XPUB socket.
pub struct ZmqProducer {
    out: Out,
    arena: BytesMut,
    registry: Arc<Registry>,
    /// Sends left before the next [`take_subscriptions`].
    until_check: u32,
    /// Sends left before a PUSH producer yields to the crate's writer tasks.
    until_yield: u32,
    /// Longest wait in `close` for queued messages to be written.
    close_wait: Duration,
    events: EventSink,
}

/// Processes the subscription messages that reached an XPUB socket, without waiting: the socket
/// learns a subscription only when it is read, so a subscriber that (re)connects after the
/// producer's setup would otherwise receive nothing.
fn take_subscriptions(sock: &mut XPubSocket) {
    let mut cx = Context::from_waker(Waker::noop());
    // Bounded: a subscriber sends one message per subscription, not a stream.
    for _ in 0..64 {
        let next = pin!(sock.recv());
        match next.poll(&mut cx) {
            Poll::Ready(Ok(_)) => {}
            Poll::Ready(Err(_)) | Poll::Pending => break,
        }
    }
}

impl ZmqProducer {
    /// The payload as a frame the crate can own, copied into the arena (one allocation per
    /// [`ARENA_CHUNK`] bytes, not per message).
    #[inline]
    fn frame(&mut self, payload: &[u8]) -> Bytes {
        if self.arena.capacity() < payload.len() {
            self.arena.reserve(ARENA_CHUNK.max(payload.len()));
        }
        self.arena.extend_from_slice(payload);
        self.arena.split().freeze()
    }
}

fn no_stream(stream: u32) -> DriverError {
    DriverError::Config(format!(
        "stream {stream} is not one of this producer's topics"
    ))
}

impl Producer for ZmqProducer {
    async fn send(&mut self, msg: Outbound<'_>) -> Result<(), DriverError> {
        let frame = self.frame(msg.payload);
        let i = msg.stream as usize;
        let sent = match &mut self.out {
            Out::Push(socks) => {
                let s = socks.get_mut(i).ok_or_else(|| no_stream(msg.stream))?;
                let r = s.send(ZmqMessage::from(frame)).await;
                self.until_yield -= 1;
                if self.until_yield == 0 {
                    self.until_yield = PUSH_YIELD;
                    tokio::task::yield_now().await;
                }
                r
            }
            Out::Pub { sock, topics } => {
                let topic = topics.get(i).ok_or_else(|| no_stream(msg.stream))?.clone();
                self.until_check -= 1;
                if self.until_check == 0 {
                    self.until_check = SUBSCRIPTION_CHECK;
                    take_subscriptions(sock);
                }
                let mut frames = VecDeque::with_capacity(2);
                frames.push_back(topic);
                frames.push_back(frame);
                match ZmqMessage::try_from(frames) {
                    Ok(m) => sock.send(m).await,
                    Err(_) => Err(ZmqError::Other("empty message")),
                }
            }
        };
        sent.map_err(sockets::send_error)
    }

    /// Nothing to hand over: the crate's per-peer task writes whatever is queued as soon as it
    /// runs, which it does while the runner waits. A PUB producer takes in subscription changes.
    async fn idle(&mut self) -> Result<(), DriverError> {
        if let Out::Pub { sock, .. } = &mut self.out {
            take_subscriptions(sock);
        }
        Ok(())
    }

    /// Lets the crate's writer tasks run; they write what is queued on their own (PUSH) or it is
    /// already written (XPUB writes before `send` returns).
    async fn flush(&mut self) -> Result<(), DriverError> {
        tokio::task::yield_now().await;
        Ok(())
    }

    /// Closes the sockets once what they queued is written. A closed PUSH socket hands its queue
    /// to the crate's per-peer writer tasks, which end when they have written it; the close
    /// waits for that (the tasks hold the socket's backend, so it is theirs to the last when
    /// only this handle remains), at most the connect timeout. Without the wait, a run whose
    /// consumers are elsewhere would end, and its runtime with the writers, before the last
    /// messages left.
    async fn close(self) -> Result<(), DriverError> {
        self.registry.set_closing();
        match self.out {
            Out::Push(socks) => {
                let backends: Vec<_> = socks.iter().map(|s| s.backend()).collect();
                for s in socks {
                    let _ = s.close().await;
                }
                let deadline = Instant::now() + self.close_wait;
                while backends.iter().any(|b| Arc::strong_count(b) > 1) {
                    if Instant::now() >= deadline {
                        let why = format!(
                            "the PUSH socket's queue was not written out within {:?} of closing \
                             (a consumer stopped reading?)",
                            self.close_wait
                        );
                        self.events.emit(DriverEventKind::Warning, why.clone());
                        return Err(DriverError::Timeout(why));
                    }
                    tokio::time::sleep(CLOSE_POLL).await;
                }
            }
            Out::Pub { sock, .. } => {
                let _ = sock.close().await;
            }
        }
        Ok(())
    }
}

/// A consumer's socket while it is still being connected to producers (`bind=producer`).
struct Connecting {
    stop: Option<oneshot::Sender<()>>,
    join: JoinHandle<Result<InSock, DriverError>>,
}

/// The receiving side: one PULL or SUB socket.
pub struct ZmqConsumer {
    sock: Option<InSock>,
    connecting: Option<Connecting>,
    filter: Filter,
    pubsub: bool,
}

impl ZmqConsumer {
    /// Takes the socket back from the connecting task (cancel-safe: awaits the task by
    /// reference, so a cancelled call leaves it to the next one).
    async fn finish_connecting(&mut self) -> Result<(), DriverError> {
        if let Some(c) = &mut self.connecting {
            if let Some(stop) = c.stop.take() {
                let _ = stop.send(());
            }
            let r = (&mut c.join).await;
            self.connecting = None;
            match r {
                Ok(Ok(s)) => self.sock = Some(s),
                Ok(Err(e)) => return Err(e),
                Err(e) => {
                    return Err(DriverError::Receive(format!(
                        "the zmq connect task failed: {e}"
                    )));
                }
            }
        }
        Ok(())
    }

    /// The payload of a message, or `None` if it is for another topic.
    #[inline]
    fn payload(&self, m: ZmqMessage) -> Option<Bytes> {
        let mut frames = m.into_vecdeque();
        if self.pubsub && frames.len() == 2 {
            let topic = frames.pop_front()?;
            if !self.filter.matches(&topic) {
                return None;
            }
        }
        // PUSH/PULL: the one frame. Anything else (a sender that is not msgbench) hands over
        // its last frame, which the runner will count as foreign.
        frames.pop_back()
    }
}

impl Consumer for ZmqConsumer {
    async fn recv(&mut self) -> Result<Option<Delivery>, DriverError> {
        if self.connecting.is_some() {
            self.finish_connecting().await?;
        }
        loop {
            // After a failed connect there is no socket: the subscription has ended.
            let Some(sock) = self.sock.as_mut() else {
                return Ok(None);
            };
            match sock.recv().await {
                Ok(m) => {
                    if let Some(payload) = self.payload(m) {
                        return Ok(Some(Delivery {
                            payload,
                            redelivered: false,
                            meta: None,
                        }));
                    }
                }
                Err(ZmqError::NoMessage) => return Ok(None),
                Err(e) => return Err(DriverError::Receive(e.to_string())),
            }
        }
    }

    async fn close(mut self) -> Result<(), DriverError> {
        if let Some(c) = self.connecting.take() {
            c.join.abort();
        }
        if let Some(s) = self.sock.take() {
            s.close().await;
        }
        Ok(())
    }
}
