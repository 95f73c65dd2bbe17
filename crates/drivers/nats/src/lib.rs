//! # msgbench-driver-nats
//!
//! NATS core: publish/subscribe, fan-out (plain subscriptions), queue groups (competing
//! consumers) and request/reply, over a lean client for the NATS text protocol written for
//! load generation: each producer and consumer owns one TCP connection (TCP_NODELAY on) and
//! nothing else — no per-message channel hop, no per-message allocation on the publish path,
//! payloads handed to the runner as slices of the read buffer.
//!
//! What "accepted" means: NATS core has no broker acknowledgement, so `send` is done when the
//! message is in the connection's write buffer. The buffer is written when it holds
//! [`WRITE_BATCH`] bytes, when the runner goes idle (waits for its pacer or for replies), and at
//! the end, so an unpaced producer writes in large batches and a paced one never holds a
//! message back. In request/reply mode the reply is the ack: requests carry the reply subject
//! `<inbox>.<token>`, responders answer with an empty message, and publish latency is the full
//! round trip.
//!
//! Failures: a lost connection is reported as a `disconnected` event and re-established with
//! backoff (`reconnected` event); subscriptions are replayed. Messages buffered at the cut are
//! lost and show up in the integrity counts. `tls://host:4222` (or `nats+tls://`) switches to
//! TLS after the server's INFO, as NATS servers expect, verifying the server (`--ca-file`,
//! `--cert`/`--key` for a client certificate, `--insecure`); `?tls_first` does the handshake
//! before the INFO, for servers with `handshake_first` (nats-server 2.10+). A URL may list several
//! servers (`nats://a:4222,b:4222`): clients are shared out round robin, so producers and
//! consumers on different servers need those servers clustered; a client whose server dies
//! fails over, trying the next server of the list at each reconnection attempt.
//!
//! Connection-scale runs: held sessions answer the server's PINGs, and beyond the open-file
//! limit their sockets live in io_uring tables (`msgbench_net::ring`) instead of descriptors.
//!
//! # Layout
//! - [`proto`]: wire format (parse server ops, write PUB/SUB).
//! - [`conn`]: one connection: handshake, buffers, keep-alive, reconnection.
//! - [`js`]: NATS JetStream (`nats+js://`): streams, PubAcks, pull and push consumers.
//! - this file: the `Driver`, `Producer` and `Consumer` implementations.
#![deny(missing_docs)]

pub mod conn;
pub mod js;
pub mod nkey;
pub mod proto;
pub mod server_errors;

pub use js::JetStreamDriver;

use bytes::Bytes;
use conn::{Conn, Endpoint, Route};
use msgbench_core::driver::{
    Ack, Capabilities, Consumer, ConsumerSpec, Delivery, Driver, DriverError, DriverEventKind,
    EventSink, Outbound, Producer, ProducerSpec, Session, SessionSpec,
};
use proto::ServerOp;
use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// Bytes buffered before an unpaced producer writes them out.
pub const WRITE_BATCH: usize = 64 * 1024;
/// Buffer size of producers and consumers.
pub(crate) const DATA_CHUNK: usize = 64 * 1024;
/// Buffer size of held sessions (they read only PING and INFO).
const SESSION_CHUNK: usize = 512;

/// The NATS driver.
pub struct NatsDriver {
    pub(crate) ep: Arc<Endpoint>,
    pub(crate) events: EventSink,
    pub(crate) connect_timeout: Duration,
    /// Data connections' keep-alive ([`Conn::watch`]); 0 = not watched.
    pub(crate) keep_alive: Duration,
    /// The run's smallest message: one over the server's `max_payload` is refused alone when
    /// smaller ones fit, and stops the producer when none can ([`Oversized`]).
    pub(crate) smallest_message: u64,
}

impl NatsDriver {
    /// A driver for `nats://[user:pass@|token@]host[:port][,host[:port]...]`.
    pub fn new(
        url: &str,
        tls: &msgbench_core::scenario::TlsPlan,
        events: EventSink,
        connect_timeout: Duration,
    ) -> Result<Self, DriverError> {
        Ok(Self {
            ep: Arc::new(Endpoint::parse(url, || msgbench_net::Tls::new(tls))?),
            events,
            connect_timeout,
            keep_alive: Duration::ZERO,
            smallest_message: 0,
        })
    }

    /// The run's smallest message size: a message over the server's `max_payload` is refused
    /// alone when smaller ones fit, and stops the producer when none can.
    pub fn with_smallest_message(mut self, bytes: u64) -> Self {
        self.smallest_message = bytes;
        self
    }

    /// Data connections watch the server with this keep-alive period (see [`Conn::watch`]).
    pub fn with_keep_alive(mut self, every: Duration) -> Self {
        self.keep_alive = every;
        self
    }
}

pub(crate) fn inbox_prefix(id: u32) -> String {
    let r = msgbench_core::clock::now_ns() ^ ((std::process::id() as u64) << 32);
    format!("_INBOX.msgbench.{r:x}.{id}.")
}

impl Driver for NatsDriver {
    type Producer = NatsProducer;
    type Consumer = NatsConsumer;
    type Session = NatsSession;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            acks: false,
            queue_groups: true,
            request_reply: true,
            responses: false,
            metadata: false,
        }
    }

    /// Held sessions can live in io_uring tables (the driver speaks plain TCP only).
    fn fd_free_sessions(&self) -> bool {
        // TLS starts after the server's INFO, on the socket itself: rings hold plain TCP only.
        cfg!(target_os = "linux") && self.ep.tls.is_none()
    }

    fn fd_free_consumers(&self) -> bool {
        self.fd_free_sessions()
    }

    fn session_hosts(&self) -> usize {
        self.ep.addrs.len()
    }

    async fn producer(&self, spec: &ProducerSpec) -> Result<NatsProducer, DriverError> {
        let name = format!("msgbench-producer-{}", spec.id);
        let mut conn = Conn::connect(
            self.ep.clone(),
            name,
            self.events.clone(),
            self.connect_timeout,
            Route {
                index: spec.id as u64,
                ..Route::default()
            },
            DATA_CHUNK,
        )
        .await?;
        conn.watch(self.keep_alive);
        let inbox = if spec.request_reply {
            let prefix = inbox_prefix(spec.id);
            conn.subscribe(&format!("{prefix}*"), None);
            Some(Bytes::from(prefix))
        } else {
            None
        };
        // Make sure the inbox subscription is live before the first request.
        conn.flush()
            .await
            .map_err(|e| DriverError::Subscribe(e.to_string()))?;
        Ok(NatsProducer {
            conn,
            subjects: spec.topics.iter().map(|t| Bytes::from(t.clone())).collect(),
            inbox,
            acks: VecDeque::new(),
            last_read_ns: 0,
            oversized: Oversized::new(self.smallest_message, &self.events),
        })
    }

    async fn consumer(&self, spec: &ConsumerSpec) -> Result<NatsConsumer, DriverError> {
        let name = format!("msgbench-consumer-{}", spec.id);
        let mut conn = Conn::connect(
            self.ep.clone(),
            name,
            self.events.clone(),
            self.connect_timeout,
            Route {
                index: spec.id as u64,
                source: spec.source,
                fd_free: spec.fd_free,
            },
            DATA_CHUNK,
        )
        .await?;
        conn.watch(self.keep_alive);
        conn.subscribe(&spec.topic, spec.group.as_deref());
        // PING/PONG after SUB: when the PONG arrives the server has the subscription, so no
        // message sent after this returns can be missed.
        conn.wire.wbuf.extend_from_slice(b"PING\r\n");
        wait_pong(&mut conn, |_| {})
            .await
            .map_err(|e| DriverError::Subscribe(e.to_string()))?;
        if spec.lean {
            // One of thousands of receivers: no idle buffers, starting with the handshake's
            // (held until the run begins, they would make the connect ramp's peak).
            conn.wire.lean();
            conn.wire.shrink();
        }
        Ok(NatsConsumer {
            conn,
            respond: spec.respond,
            meta: spec.meta,
        })
    }

    async fn session(&self, spec: &SessionSpec) -> Result<NatsSession, DriverError> {
        let conn = Conn::connect(
            self.ep.clone(),
            format!("msgbench-conn-{}", spec.id),
            self.events.clone(),
            self.connect_timeout,
            Route {
                index: spec.id,
                source: spec.source,
                fd_free: spec.fd_free,
            },
            SESSION_CHUNK,
        )
        .await?;
        Ok(NatsSession {
            conn,
            subject: Bytes::from(spec.topic.clone()),
            received: (0, 0),
            id: spec.id,
            inbox: None,
            requests: 0,
        })
    }

    fn sessions_subscribe(&self) -> bool {
        true
    }

    fn sessions_request(&self) -> bool {
        true
    }
}

/// A held connection: answers the server's PINGs (that is NATS's keep-alive).
pub struct NatsSession {
    conn: Conn,
    subject: Bytes,
    /// Messages and payload bytes its subscriptions delivered, not yet taken.
    received: (u64, u64),
    id: u64,
    /// Reply subject prefix of its requests (`<inbox>.`), subscribed at the first request.
    inbox: Option<Bytes>,
    /// Requests sent: the last one's number ends its reply subject.
    requests: u64,
}

/// Counts `op` in `received` if it is a delivery.
fn count_delivery(received: &mut (u64, u64), op: &ServerOp) {
    if let ServerOp::Msg { payload, .. } | ServerOp::HMsg { payload, .. } = op {
        received.0 += 1;
        received.1 += payload.len() as u64;
    }
}

impl Session for NatsSession {
    async fn publish(&mut self, payload: &[u8]) -> Result<(), DriverError> {
        proto::put_pub(&mut self.conn.wire.wbuf, &self.subject, None, payload);
        self.conn
            .flush()
            .await
            .map_err(|e| DriverError::Send(e.to_string()))
    }

    async fn keep_alive(&mut self) -> DriverError {
        loop {
            // `next_msg` answers PINGs and flushes the PONGs.
            match self.conn.next_msg().await {
                Ok(op) => count_delivery(&mut self.received, &op),
                Err(e) => return DriverError::Receive(e.to_string()),
            }
        }
    }

    async fn close(mut self) -> Result<(), DriverError> {
        let _ = self.conn.flush().await;
        self.conn.close();
        Ok(())
    }

    /// A core subscription, confirmed by the server's PONG to the PING behind it.
    async fn subscribe(&mut self, topic: &str) -> Result<(), DriverError> {
        self.conn.subscribe(topic, None);
        self.conn.wire.wbuf.extend_from_slice(b"PING\r\n");
        let received = &mut self.received;
        wait_pong(&mut self.conn, |op| count_delivery(received, op))
            .await
            .map_err(|e| DriverError::Subscribe(format!("{topic}: {e}")))
    }

    /// A request with the reply subject `<inbox>.<n>`; done at the reply to this request (a
    /// late reply to an earlier one, whose wait timed out, is dropped).
    async fn request(&mut self, payload: &[u8]) -> Result<(), DriverError> {
        let prefix = match &self.inbox {
            Some(p) => p.clone(),
            None => {
                // On the same connection the server takes the SUB before the request.
                let p = Bytes::from(inbox_prefix(self.id as u32));
                self.conn
                    .subscribe(&format!("{}*", String::from_utf8_lossy(&p)), None);
                self.inbox = Some(p.clone());
                p
            }
        };
        self.requests += 1;
        let n = self.requests;
        proto::put_pub(
            &mut self.conn.wire.wbuf,
            &self.subject,
            Some((&prefix, n)),
            payload,
        );
        self.conn
            .flush()
            .await
            .map_err(|e| DriverError::Send(e.to_string()))?;
        loop {
            let op = self
                .conn
                .next_msg()
                .await
                .map_err(|e| DriverError::Receive(e.to_string()))?;
            match &op {
                ServerOp::Msg { subject, .. } if subject.starts_with(&prefix) => {
                    let token = std::str::from_utf8(&subject[prefix.len()..])
                        .ok()
                        .and_then(|t| t.parse::<u64>().ok());
                    if token == Some(n) {
                        return Ok(());
                    }
                }
                _ => count_delivery(&mut self.received, &op),
            }
        }
    }

    fn take_received(&mut self) -> (u64, u64) {
        std::mem::take(&mut self.received)
    }
}

/// Flushes and reads until the server's PONG (the subscription is then registered); what
/// else arrives meanwhile goes to `heard`.
async fn wait_pong(conn: &mut Conn, mut heard: impl FnMut(&ServerOp)) -> std::io::Result<()> {
    conn.flush().await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let op = tokio::time::timeout_at(deadline, conn.raw_op())
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "no PONG after SUB")
            })??;
        match op {
            ServerOp::Pong => return Ok(()),
            ServerOp::Err(e) => {
                return Err(std::io::Error::other(format!(
                    "server refused the subscription: {e}"
                )));
            }
            ServerOp::Ping => {
                conn.wire.wbuf.extend_from_slice(b"PONG\r\n");
                conn.flush().await?;
            }
            other => heard(&other),
        }
    }
}

/// The sending side: one connection.
pub struct NatsProducer {
    conn: Conn,
    subjects: Vec<Bytes>,
    /// Request/reply: the reply subject prefix (`<inbox>.`); replies are acks.
    inbox: Option<Bytes>,
    acks: VecDeque<u64>,
    /// When the server's side was last read (ns, msgbench clock), see [`Producer::idle`].
    last_read_ns: u64,
    oversized: Oversized,
}

/// What a producer does with a message over the server's `max_payload` (the server would
/// close the connection for it): when the run also has messages that fit (a size range), that
/// one is refused unsent and said once, as a NATS client fails only that publish (the caller
/// counts it: a nack where publishes are acknowledged, a `DriverEventKind::Refused` where
/// not); when none can fit, the producer stops.
pub(crate) struct Oversized {
    smallest: u64,
    events: EventSink,
    told: bool,
}

impl Oversized {
    pub(crate) fn new(smallest: u64, events: &EventSink) -> Oversized {
        Oversized {
            smallest,
            events: events.clone(),
            told: false,
        }
    }

    /// `Ok(true)`: `len` bytes fit under `max` (0: no limit); `Ok(false)`: refused, skip it.
    pub(crate) fn check(&mut self, name: &str, len: usize, max: u64) -> Result<bool, DriverError> {
        if max == 0 || len as u64 <= max {
            return Ok(true);
        }
        let why = format!("a {len}-byte message exceeds the server's max_payload of {max} bytes");
        if self.smallest > max || self.smallest == 0 {
            return Err(DriverError::Refused(why));
        }
        if !self.told {
            self.told = true;
            self.events.emit(
                DriverEventKind::Warning,
                format!(
                    "{name}: {why}: such messages are not sent, and are counted as refused \
                     (further ones are counted, not reported)"
                ),
            );
        }
        Ok(false)
    }
}

/// How often an idle producer reads what the server sent.
const IDLE_READ_EVERY_NS: u64 = 50_000_000;

impl NatsProducer {
    /// Takes what the server sent without waiting (PINGs, replies).
    fn service_reads(&mut self) {
        let mut cx = Context::from_waker(Waker::noop());
        while let Poll::Ready(r) = self.conn.poll_msg(&mut cx) {
            match r {
                Ok(op) => self.on_op(op),
                Err(e) => {
                    self.conn.lost(&e);
                    break;
                }
            }
        }
    }

    fn on_op(&mut self, op: ServerOp) {
        if let (ServerOp::Msg { subject, .. }, Some(prefix)) = (op, &self.inbox)
            && let Some(token) = proto::token_of(&subject, prefix)
        {
            self.acks.push_back(token);
        }
    }

    async fn write_out(&mut self) -> Result<(), DriverError> {
        if let Err(e) = self.conn.flush().await {
            self.conn.lost(&e);
            return Err(DriverError::Send(e.to_string()));
        }
        Ok(())
    }
}

impl Producer for NatsProducer {
    async fn send(&mut self, msg: Outbound<'_>) -> Result<(), DriverError> {
        if !self.conn.is_connected() {
            self.conn.try_reconnect().await?;
        }
        let max = self.conn.info.max_payload;
        if !self
            .oversized
            .check(&self.conn.name, msg.payload.len(), max)?
        {
            self.oversized
                .events
                .emit(DriverEventKind::Refused(1), String::new());
            return Ok(());
        }
        let reply = self.inbox.as_ref().map(|p| (p.as_ref(), msg.token));
        proto::put_pub(
            &mut self.conn.wire.wbuf,
            &self.subjects[msg.stream as usize],
            reply,
            msg.payload,
        );
        if self.conn.wire.wbuf.len() >= WRITE_BATCH {
            self.write_out().await?;
            self.service_reads();
        }
        Ok(())
    }

    /// Writes what is buffered and, every 50 ms, reads what the server sent: a producer paced
    /// below one write batch per interval would otherwise never read, leaving the server's
    /// PINGs unanswered (it drops such a client as stale after a few minutes) and its own
    /// keep-alive watch unpolled (a blackholed route went unnoticed).
    async fn idle(&mut self) -> Result<(), DriverError> {
        if self.conn.is_connected() && !self.conn.wire.wbuf.is_empty() {
            self.write_out().await?;
        }
        let now = msgbench_core::clock::now_ns();
        if self.conn.is_connected() && now.saturating_sub(self.last_read_ns) >= IDLE_READ_EVERY_NS {
            self.last_read_ns = now;
            self.service_reads();
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), DriverError> {
        if !self.conn.is_connected() {
            return Err(DriverError::Closed);
        }
        self.write_out().await
    }

    fn poll_ack(&mut self, cx: &mut Context<'_>) -> Poll<Option<Ack>> {
        loop {
            if let Some(token) = self.acks.pop_front() {
                return Poll::Ready(Some(Ack::One { token, ok: true }));
            }
            if !self.conn.is_connected() {
                // The next send reconnects; replies to requests sent before the cut never come
                // and expire in the runner's window.
                return Poll::Pending;
            }
            match self.conn.poll_msg(cx) {
                Poll::Ready(Ok(op)) => self.on_op(op),
                Poll::Ready(Err(e)) => {
                    self.conn.lost(&e);
                    return Poll::Pending;
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    async fn close(mut self) -> Result<(), DriverError> {
        if self.conn.is_connected() {
            self.write_out().await?;
            // Core NATS confirms nothing: a PING answered is the one sign the server took the
            // last publishes, and it brings the refusals (`-ERR`) of those it did not.
            let _ = self.conn.sync().await;
        }
        Ok(())
    }
}

/// The receiving side: one connection, one subscription.
pub struct NatsConsumer {
    conn: Conn,
    respond: bool,
    /// Put each message's subject in `Meta::topic` ([`ConsumerSpec::meta`]).
    meta: bool,
}

impl Consumer for NatsConsumer {
    async fn recv(&mut self) -> Result<Option<Delivery>, DriverError> {
        loop {
            if !self.conn.is_connected() {
                self.conn.reconnect().await;
            }
            match self.conn.next_msg().await {
                Ok(ServerOp::Msg {
                    subject,
                    reply,
                    payload,
                    ..
                }) => {
                    if self.respond
                        && let Some(r) = reply
                    {
                        // Queued now, written before the next read blocks.
                        proto::put_pub(&mut self.conn.wire.wbuf, &r, None, b"");
                    }
                    return Ok(Some(Delivery {
                        payload,
                        redelivered: false,
                        meta: self.meta.then(|| {
                            Box::new(msgbench_core::meta::Meta {
                                topic: Some(String::from_utf8_lossy(&subject).into_owned()),
                                ..Default::default()
                            })
                        }),
                    }));
                }
                Ok(_) => {}
                Err(e) => self.conn.lost(&e),
            }
        }
    }

    async fn close(mut self) -> Result<(), DriverError> {
        let _ = self.conn.flush().await;
        Ok(())
    }
}

impl msgbench_core::registration::Registered for NatsDriver {
    const INFO: msgbench_core::registration::DriverInfo = msgbench_core::registration::DriverInfo {
        name: "nats",
        schemes: &["nats", "tls", "nats+tls", "nats+ws", "nats+wss"],
        about: "NATS core: pub/sub, fan-out, queue groups, request/reply, connection workloads, TLS, over WebSocket (nats+ws://), user/password, token, nkey (?nkey=SEED_FILE) and .creds (?creds=FILE) authentication (own lean client)",
        caps: Capabilities {
            acks: false,
            queue_groups: true,
            request_reply: true,
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
        Ok(
            NatsDriver::new(url, &plan.tls, events, plan.connect_timeout)?
                .with_keep_alive(plan.client.keep_alive)
                .with_smallest_message(plan.size.min()),
        )
    }
}
