//! # msgbench-driver-zmq
//!
//! ZeroMQ, brokerless: producers and consumers talk to each other directly over TCP with
//! msgbench's own implementation of ZMTP 3 (the NULL mechanism; `zmtp`), which interoperates
//! with libzmq and any other ZeroMQ. Two patterns:
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
//! `zmq://HOST:PORT[?pattern=pushpull|pubsub][&bind=consumer|producer][&peers=N][&sndhwm=N][&onhwm=wait|drop]`
//!
//! - `bind=consumer` (default): consumer `i` binds `HOST:PORT+i`; each producer connects to the
//!   consumers of its topic. `bind=producer`: producer `i` binds `HOST:PORT+i`; each consumer
//!   connects to the producers of its topic. `PORT` 0 gives every binding client a free port of
//!   its own (both sides must then run in this process, which is how msgbench runs).
//! - `peers=N` (default 1): for a topic with no client of the other side in this process (a run
//!   with `--consumers 0` against a ZeroMQ program elsewhere): with `bind=consumer` the producer
//!   connects to `PORT .. PORT+N`; with `bind=producer` it waits for N consumers (PUSH) or N
//!   subscriptions (PUB) before it returns.
//! - `sndhwm=N` (default 1000, ZeroMQ's `ZMQ_SNDHWM`): messages that may wait in the generator
//!   for one peer. At the mark a PUSH producer sends to the next consumer with room, or waits
//!   when none has any; a PUB producer waits for that subscriber (`onhwm=wait`, the default:
//!   the generator loses nothing) or drops the message for it (`onhwm=drop`: libzmq's PUB
//!   behaviour; counted, reported as a warning, and lost at the consumer).
//! - `rcvhwm` is refused with an explanation (consumers keep no receive queue), as is any
//!   unknown option.
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
//! topic has *arrived* (the PUB side reads subscriptions, as an XPUB does) — deterministic, no
//! sleeps. With `bind=producer` the consumers cannot connect before the producers exist, so a
//! consumer dials each producer of its topic as it binds, and the producer's wait above is what
//! guarantees no message is sent before anyone listens.
//!
//! # What is measured
//!
//! ZeroMQ has no acknowledgements (`Capabilities::acks` is false); latency is end to end (stamp
//! to delivery). `send` is done when the message is encoded into the chosen peer's write buffer
//! (`out`), which is written once it holds 64 KiB, at the high-water mark, and whenever the
//! runner is about to wait: a paced message leaves at once, an unpaced run writes many messages
//! per `write`. `close` writes what is left (at most the connect timeout) before it ends each
//! connection in order, so the peer reads everything.
//!
//! # Faults
//!
//! A peer that leaves mid-run is reported as a `disconnected` event (a producer of another
//! process leaving a consumers-only segment as a warning: its run ended); what was buffered for
//! it counts as lost. Whichever side dialled the connection dials it again in the background
//! (every 100 ms, backing off to 1 s), as ZeroMQ does, and reports `reconnected`; a PUB producer
//! sends to a returning subscriber once its subscription is in again. Peers leaving once
//! producers close are the end of the run and are not reported.
//!
//! # Limits
//!
//! - With `bind=producer`, consumers connect only to producers of this process.
//! - No request/reply, no connection workloads ([`Driver::session`] refuses), no CURVE/TLS, no
//!   multipart payloads, TCP only (no `ipc://`, `inproc://`).
//!
//! # Layout
//! - [`options`]: the URL.
//! - [`zmtp`]: the wire protocol (pure).
//! - `conn`: one connection: handshake, buffered non-blocking I/O, dial.
//! - `links`: where a socket's connections come from: its listener, its dials and redials.
//! - `out`: PUSH and PUB sockets (high-water marks); `inbound`: PULL and SUB sockets.
//! - `registry`: who listens where within this process.
//! - this file: the `Driver`, `Producer` and `Consumer` implementations.
#![deny(missing_docs)]

mod conn;
mod inbound;
mod links;
pub mod options;
mod out;
mod registry;
pub mod zmtp;

use bytes::Bytes;
use inbound::InSock;
use links::Ctx;
use msgbench_core::driver::{
    Capabilities, Consumer, ConsumerSpec, Delivery, Driver, DriverError, DriverEventKind,
    EventSink, NoSession, Outbound, Producer, ProducerSpec, SessionSpec,
};
use options::{BindSide, Endpoint, Options, Pattern};
use out::OutSock;
use registry::{BoundProducer, Filter, LocalConsumer, Registry};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use zmtp::SocketType;

/// A producer takes in new connections and what its peers sent (subscription changes, their
/// end) once every this many sends, and whenever the runner waits.
pub const SERVICE_EVERY: u32 = 1024;

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

    fn ctx(&self, who: &str) -> Ctx {
        Ctx {
            events: self.events.clone(),
            registry: self.registry.clone(),
            who: who.to_string(),
            attempt: self.budget(),
            last_refusal: Arc::default(),
        }
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
    ) -> Result<Vec<Endpoint>, DriverError> {
        let local: Vec<Endpoint> = consumers
            .iter()
            .filter_map(|c| c.endpoint.clone())
            .collect();
        if !local.is_empty() {
            return Ok(local);
        }
        let remote = self.opts.remote_endpoints()?;
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
        let (hwm, onhwm) = (self.opts.sndhwm, self.opts.onhwm);
        let out = match (self.opts.pattern, self.opts.bind) {
            (Pattern::PushPull, bind) => {
                for (t, cs) in spec.topics.iter().zip(&consumers) {
                    if cs.len() > 1 && cs.iter().any(|c| !c.competing) {
                        return Err(DriverError::Config(format!(
                            "topic `{t}` has {} fan-out consumers, but PUSH/PULL gives each \
                             message to one of them: use competing consumers (--queue-group, or \
                             [consumers] mode = \"queue\") or pattern=pubsub",
                            cs.len()
                        )));
                    }
                }
                if bind == BindSide::Producer && spec.topics.len() > 1 {
                    return Err(DriverError::Config(format!(
                        "{who} has {} topics: with PUSH/PULL and bind=producer a producer binds \
                         one endpoint, so it takes one topic (or use bind=consumer)",
                        spec.topics.len()
                    )));
                }
                let mut socks = Vec::with_capacity(spec.topics.len());
                for cs in &consumers {
                    let mut s =
                        OutSock::new(SocketType::Push, Vec::new(), hwm, onhwm, self.ctx(&who));
                    if bind == BindSide::Consumer {
                        for ep in self.endpoints_for(cs, &who)? {
                            s.connect(&ep, deadline).await?;
                        }
                    } else {
                        let n = self.expected_peers(&consumers, &who)?;
                        self.bind_producer(&mut s, spec).await?;
                        s.wait_ready(n, deadline).await?;
                    }
                    socks.push(s);
                }
                Out::Push(socks)
            }
            (Pattern::PubSub, bind) => {
                let topics = spec
                    .topics
                    .iter()
                    .map(|t| Bytes::copy_from_slice(t.as_bytes()))
                    .collect();
                let mut s = OutSock::new(SocketType::Pub, topics, hwm, onhwm, self.ctx(&who));
                let n = if bind == BindSide::Consumer {
                    let mut eps: Vec<Endpoint> = Vec::new();
                    for cs in &consumers {
                        for ep in self.endpoints_for(cs, &who)? {
                            if !eps.contains(&ep) {
                                eps.push(ep);
                            }
                        }
                    }
                    for ep in &eps {
                        s.connect(ep, deadline).await?;
                    }
                    eps.len()
                } else {
                    let n = self.expected_peers(&consumers, &who)?;
                    self.bind_producer(&mut s, spec).await?;
                    n
                };
                s.wait_ready(n, deadline).await?;
                Out::Pub(s)
            }
        };
        Ok(ZmqProducer {
            out,
            until_service: SERVICE_EVERY,
            close_wait: self.connect_timeout,
            registry: self.registry.clone(),
            events: self.events.clone(),
            who,
            hwm,
        })
    }

    async fn consumer(&self, spec: &ConsumerSpec) -> Result<ZmqConsumer, DriverError> {
        let who = who("consumer", spec.id);
        if spec.respond {
            return Err(DriverError::Config(
                "request/reply is not supported by the zmq driver".into(),
            ));
        }
        let ours = match self.opts.pattern {
            Pattern::PubSub => SocketType::Sub,
            Pattern::PushPull => SocketType::Pull,
        };
        let filter = Filter::new(&spec.topic);
        let mut sock = InSock::new(ours, filter.clone(), self.ctx(&who));
        let mut entry = LocalConsumer {
            id: spec.id,
            filter,
            competing: spec.group.is_some(),
            endpoint: None,
        };
        match self.opts.bind {
            BindSide::Consumer => {
                entry.endpoint = Some(sock.bind(&self.opts.endpoint(spec.id)?).await?);
            }
            BindSide::Producer => sock.connect_to_producers(self.registry.watch_producers()),
        }
        // Entered only now: a producer never sees a consumer that is not listening yet.
        self.registry.add_consumer(entry);
        Ok(ZmqConsumer { sock })
    }

    async fn session(&self, _spec: &SessionSpec) -> Result<NoSession, DriverError> {
        Err(DriverError::Config(
            "connection workloads are not supported for zmq: ZeroMQ sockets are not sessions \
             with a server to hold"
                .into(),
        ))
    }
}

impl ZmqDriver {
    /// Binds producer `spec.id`'s endpoint and enters it, so consumers dial it.
    async fn bind_producer(&self, s: &mut OutSock, spec: &ProducerSpec) -> Result<(), DriverError> {
        let endpoint = s.bind(&self.opts.endpoint(spec.id)?).await?;
        self.registry.add_producer(BoundProducer {
            topics: spec.topics.clone(),
            endpoint,
        });
        Ok(())
    }
}

/// How a client is named in errors and events: `zmq producer 3`.
fn who(role: &str, id: u32) -> String {
    format!("zmq {role} {id}")
}

enum Out {
    /// One PUSH socket per topic (`Outbound::stream` indexes them).
    Push(Vec<OutSock>),
    /// One PUB socket for all topics.
    Pub(OutSock),
}

impl Out {
    fn socks(&mut self) -> &mut [OutSock] {
        match self {
            Out::Push(v) => v,
            Out::Pub(s) => std::slice::from_mut(s),
        }
    }
}

/// The sending side: PUSH sockets (one per topic) or one PUB socket.
pub struct ZmqProducer {
    out: Out,
    /// Sends left before the next [`OutSock::service`].
    until_service: u32,
    /// Longest wait in `flush` and `close` for buffered messages to be written.
    close_wait: Duration,
    registry: Arc<Registry>,
    events: EventSink,
    who: String,
    hwm: u32,
}

impl ZmqProducer {
    fn unwritten(&self) -> DriverError {
        let why = format!(
            "{}: messages were still unwritten {:?} after the end (a consumer stopped reading?)",
            self.who, self.close_wait
        );
        self.events.emit(DriverEventKind::Warning, why.clone());
        DriverError::Timeout(why)
    }
}

impl Producer for ZmqProducer {
    async fn send(&mut self, msg: Outbound<'_>) -> Result<(), DriverError> {
        let i = msg.stream as usize;
        self.until_service -= 1;
        let service = self.until_service == 0;
        if service {
            self.until_service = SERVICE_EVERY;
        }
        match &mut self.out {
            Out::Push(socks) => {
                let s = socks.get_mut(i).ok_or_else(|| {
                    DriverError::Config(format!("stream {i} is not one of this producer's topics"))
                })?;
                if service {
                    s.service();
                }
                s.push(msg.payload).await
            }
            Out::Pub(s) => {
                if service {
                    s.service();
                }
                s.publish(i, msg.payload).await
            }
        }
    }

    /// Writes what is buffered as far as the sockets take it, and takes in new connections
    /// and subscription changes, without waiting.
    async fn idle(&mut self) -> Result<(), DriverError> {
        for s in self.out.socks() {
            s.service();
        }
        Ok(())
    }

    /// Writes everything buffered, waiting (at most the connect timeout) for slow consumers.
    async fn flush(&mut self) -> Result<(), DriverError> {
        let until = Instant::now() + self.close_wait;
        let mut all = true;
        for s in self.out.socks() {
            all &= s.flush(until).await;
        }
        if all { Ok(()) } else { Err(self.unwritten()) }
    }

    /// Writes what is left, then ends every connection in order (each consumer reads all that
    /// was sent, then the end), at most the connect timeout. Without the wait, a run whose
    /// consumers are elsewhere would end, and its runtime with its sockets, before the last
    /// messages left.
    async fn close(mut self) -> Result<(), DriverError> {
        self.registry.set_closing();
        let until = Instant::now() + self.close_wait;
        let socks = match std::mem::replace(&mut self.out, Out::Push(Vec::new())) {
            Out::Push(v) => v,
            Out::Pub(s) => vec![s],
        };
        let (mut all, mut dropped) = (true, 0u64);
        for s in socks {
            dropped += s.dropped;
            all &= s.close(until).await;
        }
        if dropped > 0 {
            self.events.emit(
                DriverEventKind::Warning,
                format!(
                    "{}: {dropped} messages were dropped at the high-water mark (sndhwm={}, \
                     onhwm=drop): subscribers did not keep up; their consumers count them as lost",
                    self.who, self.hwm
                ),
            );
        }
        if all { Ok(()) } else { Err(self.unwritten()) }
    }
}

/// The receiving side: one PULL or SUB socket.
pub struct ZmqConsumer {
    sock: InSock,
}

impl Consumer for ZmqConsumer {
    async fn recv(&mut self) -> Result<Option<Delivery>, DriverError> {
        let payload = std::future::poll_fn(|cx| self.sock.poll_recv(cx)).await;
        Ok(Some(Delivery {
            payload,
            redelivered: false,
            meta: None,
        }))
    }

    async fn close(self) -> Result<(), DriverError> {
        self.sock.close();
        Ok(())
    }
}

impl msgbench_core::registration::Registered for ZmqDriver {
    const INFO: msgbench_core::registration::DriverInfo = msgbench_core::registration::DriverInfo {
        name: "zmq",
        schemes: &["zmq"],
        about: "ZeroMQ, brokerless: PUSH/PULL (competing consumers) and PUB/SUB (fan-out), either side binds; zmq://HOST:PORT?pattern=pushpull|pubsub&bind=consumer|producer&peers=N&sndhwm=N&onhwm=wait|drop (own ZMTP 3, libzmq-compatible)",
        caps: Capabilities {
            acks: false,
            queue_groups: true,
            request_reply: false,
            responses: false,
            metadata: false,
        },
        section: None,
    };

    fn build(
        url: &str,
        plan: &msgbench_core::scenario::RunPlan,
        events: EventSink,
    ) -> Result<Self, DriverError> {
        ZmqDriver::new(url, events, plan.connect_timeout)
    }
}
