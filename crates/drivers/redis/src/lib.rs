//! # msgbench-driver-redis
//!
//! Redis as a message system, over a lean RESP2 client written for load generation (each
//! producer and consumer owns one connection; commands are written straight into the
//! connection's buffer and pipelined; payloads reach the runner as slices of the read buffer):
//!
//! - **Pub/sub** (`redis://host:6379`, the default): producers `PUBLISH`, consumers
//!   `SUBSCRIBE` (`PSUBSCRIBE` when the topic holds `*`, `?` or `[`); every subscriber gets
//!   every message. No queue groups: pub/sub has no competing consumers.
//! - **Streams** (`redis://host:6379?mode=streams`): producers `XADD` each message as an entry
//!   with one field (`d`), trimmed with `MAXLEN ~ N` when `?maxlen=N` is given; consumers read
//!   with `XREAD` from the newest entry at subscription time (fan-out), or share the stream in a
//!   consumer group (`--queue-group G`: `XGROUP CREATE ... MKSTREAM`, `XREADGROUP ... >`, and
//!   an `XACK` of each batch sent with the next read).
//!
//! What "accepted" means: every command has a reply, so every message has an ack: the reply
//! to its `PUBLISH` (how many subscribers took it) or `XADD` (the entry id). Publish latency is
//! that round trip; an error reply (`-OOM`, `-WRONGTYPE`) is a refused message, reported as an
//! event.
//!
//! Failures: a lost connection is a `disconnected` event, then reconnection with backoff
//! (`reconnected`); a producer's unanswered messages are in doubt; consumers subscribe again
//! (pub/sub messages published meanwhile are lost, as Redis does not keep them; a stream
//! reader resumes after the last entry it saw). `rediss://` is TLS (`--ca-file`, `--cert`,
//! `--key`, `--insecure`). Options: `?mode=pubsub|streams&maxlen=N&count=N&block=MS`, a
//! database as the path (`/2`), credentials as user info (`redis://user:pass@` or
//! `redis://:pass@`).
//!
//! # Layout
//! - [`resp`]: the wire format (commands out, replies measured and taken apart in place).
//! - [`conn`]: the URL, one connection, its handshake and reconnection.
//! - this file: the `Driver`, `Producer`, `Consumer` and `Session` implementations.
#![deny(missing_docs)]

pub mod conn;
pub mod resp;

use bytes::{Bytes, BytesMut};
use conn::{Conn, DATA_CHUNK, Endpoint, Mode, error_text};
use msgbench_core::driver::{
    Ack, Capabilities, Consumer, ConsumerSpec, Delivery, Driver, DriverError, EventSink, Outbound,
    Producer, ProducerSpec, Session, SessionSpec,
};
use resp::{Entry, Push, Reply};
use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// Bytes buffered before an unpaced producer writes them out.
pub const WRITE_BATCH: usize = 64 * 1024;

/// The Redis driver.
pub struct RedisDriver {
    ep: Arc<Endpoint>,
    events: EventSink,
    connect_timeout: Duration,
    /// Data connections' keep-alive (see [`RedisDriver::with_keep_alive`]); 0 = not watched.
    keep_alive: Duration,
}

/// `PING`: answered in pub/sub mode too (as a `pong` push a subscriber passes over).
const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";

impl RedisDriver {
    /// A driver for `redis://` / `rediss://` (see the crate docs for the options).
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
        })
    }

    /// Data connections notice a silent server (a blackholed route, a frozen host) and
    /// reconnect (`msgbench_net::Liveness`): nothing heard for two periods of `every` while
    /// waiting for it drops the connection. Subscribers send a PING after one silent period;
    /// stream readers hear their blocking reads' answers (the period is at least twice the
    /// block time); producers hear the replies to what they sent (a PING among them would be
    /// taken for a reply, so they send none).
    pub fn with_keep_alive(mut self, every: Duration) -> Self {
        self.keep_alive = every;
        self
    }

    async fn conn(
        &self,
        name: String,
        source: Option<std::net::IpAddr>,
        chunk: usize,
    ) -> Result<Conn, DriverError> {
        Conn::connect(
            self.ep.clone(),
            name,
            self.events.clone(),
            self.connect_timeout,
            source,
            chunk,
        )
        .await
    }
}

fn is_pattern(topic: &str) -> bool {
    topic.contains(['*', '?', '['])
}

impl Driver for RedisDriver {
    type Producer = RedisProducer;
    type Consumer = RedisConsumer;
    type Session = RedisSession;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            acks: true,
            queue_groups: self.ep.mode == Mode::Streams,
            request_reply: false,
            responses: false,
            metadata: false,
        }
    }

    async fn producer(&self, spec: &ProducerSpec) -> Result<RedisProducer, DriverError> {
        let mut conn = self
            .conn(format!("msgbench-producer-{}", spec.id), None, DATA_CHUNK)
            .await?;
        conn.wire.watch(self.keep_alive, b"");
        Ok(RedisProducer {
            conn,
            prefixes: spec
                .topics
                .iter()
                .map(|t| {
                    resp::CommandPrefix::new(command_head(
                        self.ep.mode,
                        t.as_bytes(),
                        self.ep.maxlen,
                    ))
                })
                .collect(),
            waiting: VecDeque::new(),
            buffered: 0,
            lost_up_to: None,
            refused_reported: false,
            redirected: None,
        })
    }

    async fn consumer(&self, spec: &ConsumerSpec) -> Result<RedisConsumer, DriverError> {
        if self.ep.mode == Mode::PubSub && spec.group.is_some() {
            return Err(DriverError::Config(
                "Redis pub/sub has no competing consumers: use ?mode=streams for a consumer group"
                    .into(),
            ));
        }
        let mut conn = self
            .conn(
                format!("msgbench-consumer-{}", spec.id),
                spec.source,
                DATA_CHUNK,
            )
            .await?;
        match self.ep.mode {
            Mode::PubSub => conn.wire.watch(self.keep_alive, PING),
            Mode::Streams if self.keep_alive.is_zero() => {}
            Mode::Streams => {
                let block = Duration::from_millis(self.ep.block_ms) * 2;
                conn.wire.watch(self.keep_alive.max(block), b"");
            }
        }
        let mut c = RedisConsumer {
            conn,
            key: Bytes::from(spec.topic.clone()),
            group: spec.group.as_ref().map(|g| Bytes::from(g.clone())),
            me: Bytes::from(format!("msgbench-{}", spec.id)),
            last_id: Bytes::from_static(b"0-0"),
            batch: VecDeque::new(),
            to_ack: Vec::new(),
            reading: false,
            acks_pending: 0,
            xack_refused_told: false,
            catch_up: false,
            redelivered_left: 0,
            subscribed: false,
            positioned: false,
            lost: None,
        };
        c.subscribe().await?;
        c.subscribed = true;
        Ok(c)
    }

    async fn session(&self, spec: &SessionSpec) -> Result<RedisSession, DriverError> {
        let conn = Conn::connect(
            self.ep.clone(),
            format!("msgbench-session-{}", spec.id),
            self.events.clone(),
            self.connect_timeout,
            spec.source,
            512,
        )
        .await?;
        Ok(RedisSession {
            conn,
            command: resp::CommandPrefix::new(command_head(
                self.ep.mode,
                spec.topic.as_bytes(),
                self.ep.maxlen,
            )),
        })
    }
}

/// Everything of a producer's command for `key` but the payload: `PUBLISH key`, `XADD key *
/// d` or `XADD key MAXLEN ~ N * d`.
fn command_head(mode: Mode, key: &[u8], maxlen: Option<u64>) -> Bytes {
    match (mode, maxlen) {
        (Mode::PubSub, _) => resp::command_head(&[b"PUBLISH", key]),
        (Mode::Streams, None) => resp::command_head(&[b"XADD", key, b"*", b"d"]),
        (Mode::Streams, Some(n)) => resp::command_head(&[
            b"XADD",
            key,
            b"MAXLEN",
            b"~",
            n.to_string().as_bytes(),
            b"*",
            b"d",
        ]),
    }
}

/// The sending side: `PUBLISH` or `XADD`, pipelined; each reply is the ack of the oldest
/// message still waiting.
pub struct RedisProducer {
    conn: Conn,
    /// Per topic, the command up to its payload ([`command_head`]).
    prefixes: Vec<resp::CommandPrefix>,
    /// Tokens of the messages sent and not yet answered, oldest first (replies come in order).
    waiting: VecDeque<u64>,
    /// How many of the newest `waiting` are still in the write buffer: no reply can come for
    /// them, so while all are, a look for acks need not touch the socket.
    buffered: usize,
    /// The last token sent on a connection lost while writing: everything up to it is in
    /// doubt, said by the next `poll_ack` (the replies on the new connection are not theirs).
    lost_up_to: Option<u64>,
    refused_reported: bool,
    /// A Redis Cluster sent a key elsewhere (`MOVED`, `ASK`): the next send stops the
    /// producer with this error (every later command would be refused the same way).
    redirected: Option<DriverError>,
}

impl RedisProducer {
    /// Writes what is buffered; on failure, reconnects (the unanswered are in doubt, said by
    /// the next `poll_ack`).
    async fn write_out(&mut self) -> Result<(), DriverError> {
        if self.conn.wire.wbuf.is_empty() || !self.conn.is_connected() {
            return Ok(());
        }
        match self.conn.wire.flush().await {
            Ok(()) => self.buffered = 0,
            Err(e) => {
                self.conn.wire.detach();
                self.lose_waiting();
                self.conn.reconnect(&e.to_string()).await;
            }
        }
        Ok(())
    }

    /// The connection is gone: every message waiting for a reply is in doubt.
    fn lose_waiting(&mut self) {
        if let Some(&last) = self.waiting.back() {
            self.lost_up_to = Some(last);
        }
        self.waiting.clear();
        self.buffered = 0;
    }
}

impl Producer for RedisProducer {
    async fn send(&mut self, msg: Outbound<'_>) -> Result<(), DriverError> {
        if self.redirected.is_some()
            && let Some(e) = self.redirected.take()
        {
            return Err(e);
        }
        if !self.conn.is_connected() {
            self.lose_waiting();
            self.conn.reconnect("the connection was lost").await;
        }
        self.prefixes[msg.stream as usize].put(&mut self.conn.wire.wbuf, msg.payload);
        self.waiting.push_back(msg.token);
        self.buffered += 1;
        if self.conn.wire.wbuf.len() >= WRITE_BATCH {
            self.write_out().await?;
        }
        Ok(())
    }

    async fn idle(&mut self) -> Result<(), DriverError> {
        self.write_out().await
    }

    async fn flush(&mut self) -> Result<(), DriverError> {
        self.write_out().await
    }

    /// The runner looks for acks before every send; while every unanswered command is still
    /// in the write buffer (a pipelined burst being built) no reply can have come, and that
    /// answer is given here, inlined into the send loop (`RedisProducer::poll_ack_read` has
    /// the rest).
    #[inline]
    fn poll_ack(&mut self, cx: &mut Context<'_>) -> Poll<Option<Ack>> {
        if self.buffered == self.waiting.len()
            && self.buffered > 0
            && self.lost_up_to.is_none()
            && msgbench_core::driver::is_look(cx)
            && self.conn.is_connected()
        {
            return Poll::Pending;
        }
        self.poll_ack_read(cx)
    }

    async fn close(mut self) -> Result<(), DriverError> {
        self.write_out().await
    }
}

impl RedisProducer {
    /// [`Producer::poll_ack`] beyond its shortcut: replies read, or the connection's loss.
    fn poll_ack_read(&mut self, cx: &mut Context<'_>) -> Poll<Option<Ack>> {
        if let Some(up_to) = self.lost_up_to.take() {
            return Poll::Ready(Some(Ack::InDoubt { up_to }));
        }
        let Some(&up_to) = self.waiting.back() else {
            // Nothing waits for a reply, but a real wait (the pacer's, between sends) watches
            // the socket: a server that closes an idle client (`timeout N`) is seen now, and
            // the next send reconnects first instead of writing into the closed connection
            // (its message then in doubt, and lost).
            if !msgbench_core::driver::is_look(cx)
                && self.conn.is_connected()
                && let Poll::Ready(Err(_)) = self.conn.wire.poll_fill(cx)
            {
                self.conn.wire.detach();
            }
            return Poll::Pending;
        };
        if !self.conn.is_connected() {
            self.lose_waiting();
            self.lost_up_to = None;
            return Poll::Ready(Some(Ack::InDoubt { up_to }));
        }
        if self.buffered == self.waiting.len() && msgbench_core::driver::is_look(cx) {
            // Nothing has left: nothing can be answered (a real wait still reads, for the
            // liveness watch and a closed socket).
            return Poll::Pending;
        }
        // Replies come in order: the run of successes already read (up to the next refusal,
        // taken on its own) acknowledges every message up to its last, in one ack.
        let answered = self.waiting.len() - self.buffered;
        let (n, len) = resp::ok_run(&self.conn.wire.rbuf, answered);
        if n > 0 {
            bytes::Buf::advance(&mut self.conn.wire.rbuf, len);
            let token = self.waiting[n - 1];
            self.waiting.drain(..n);
            return Poll::Ready(Some(Ack::UpTo { token, ok: true }));
        }
        match self.conn.wire.poll_next(cx, false, resp::take_reply) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(Reply::Ok)) => {
                let token = self.waiting.pop_front().expect("a message waits");
                // A reply read in a real wait comes after a write: none can be for a message
                // still counted as buffered, but the count must never exceed what waits.
                self.buffered = self.buffered.min(self.waiting.len());
                let answered = self.waiting.len() - self.buffered;
                let (n, len) = resp::ok_run(&self.conn.wire.rbuf, answered);
                bytes::Buf::advance(&mut self.conn.wire.rbuf, len);
                let token = match n {
                    0 => token,
                    n => {
                        let last = self.waiting[n - 1];
                        self.waiting.drain(..n);
                        last
                    }
                };
                Poll::Ready(Some(Ack::UpTo { token, ok: true }))
            }
            Poll::Ready(Ok(reply)) => {
                let token = self.waiting.pop_front().expect("a message waits");
                self.buffered = self.buffered.min(self.waiting.len());
                if let Reply::Error(e) = &reply
                    && self.redirected.is_none()
                    && let Some(why) = conn::cluster_redirect(e)
                {
                    self.redirected = Some(why);
                } else if !self.refused_reported {
                    // Once per producer: the refusals themselves are counted as nacks.
                    self.refused_reported = true;
                    self.conn.refused(&reply);
                }
                Poll::Ready(Some(Ack::One { token, ok: false }))
            }
            Poll::Ready(Err(_)) => {
                // The connection broke: the next send reconnects (and says so).
                self.conn.wire.detach();
                self.lose_waiting();
                self.lost_up_to = None;
                Poll::Ready(Some(Ack::InDoubt { up_to }))
            }
        }
    }
}

/// The receiving side: pushes of a subscription, or batches of stream entries.
pub struct RedisConsumer {
    conn: Conn,
    key: Bytes,
    group: Option<Bytes>,
    /// This consumer's name in its group.
    me: Bytes,
    /// Streams, fan-out: the id the next `XREAD` reads after.
    last_id: Bytes,
    /// Entries read and not yet handed out.
    batch: VecDeque<Entry>,
    /// Group entries handed out, acknowledged with the next read.
    to_ack: Vec<Bytes>,
    /// A read command is out and its reply not yet taken.
    reading: bool,
    /// `XACK` replies still to be taken before the read's.
    acks_pending: u32,
    /// A refused `XACK` was told already.
    xack_refused_told: bool,
    /// Group, after a reconnection: reading this consumer's own pending entries (id 0) until
    /// none are left, before new ones (`>`).
    catch_up: bool,
    /// How many entries at the front of `batch` the server had delivered before (history).
    redelivered_left: usize,
    /// The subscription (or the reader's position) is set up on the current connection.
    subscribed: bool,
    /// Streams, fan-out: the reader has taken its starting point (the newest entry when it
    /// first subscribed); after a reconnection it resumes from `last_id`. Group: it joined the
    /// group once (a later subscription is a reconnection, which reads its history first).
    positioned: bool,
    /// Why the connection was dropped, for the `disconnected` event.
    lost: Option<String>,
}

impl RedisConsumer {
    /// Subscribes (pub/sub) or positions the reader (streams); done when the subscription is
    /// live, so nothing sent afterwards is missed.
    async fn subscribe(&mut self) -> Result<(), DriverError> {
        let ep = self.conn.ep.clone();
        match ep.mode {
            Mode::PubSub => {
                let topic = String::from_utf8_lossy(&self.key).into_owned();
                let verb: &[u8] = if is_pattern(&topic) {
                    b"PSUBSCRIBE"
                } else {
                    b"SUBSCRIBE"
                };
                resp::command(&mut self.conn.wire.wbuf, &[verb, &self.key]);
                loop {
                    let push = std::future::poll_fn(|cx| {
                        self.conn.wire.poll_next(cx, true, resp::take_push)
                    })
                    .await
                    .map_err(|e| self.conn.lost_error(e))?;
                    match push {
                        Push::Subscribed => return Ok(()),
                        Push::Error(e) => {
                            return Err(conn::cluster_redirect(&e).unwrap_or_else(|| {
                                DriverError::Subscribe(format!("{topic}: {e}"))
                            }));
                        }
                        _ => {}
                    }
                }
            }
            Mode::Streams => {
                self.reading = false;
                self.acks_pending = 0;
                // Entries handed out and not yet acknowledged stay in `to_ack`: an XACK is the
                // group's, not the connection's, so the next read on the new connection takes
                // them out of the pending list (cleared, each reconnection left a batch pending
                // for good).
                match self.group.clone() {
                    Some(g) => {
                        let r = self
                            .conn
                            .call(&[b"XGROUP", b"CREATE", &self.key, &g, b"$", b"MKSTREAM"])
                            .await?;
                        if r.first() == Some(&b'-') && !r.starts_with(b"-BUSYGROUP") {
                            if let Some(e) = conn::cluster_redirect(&error_text(&r)) {
                                return Err(e);
                            }
                            return Err(DriverError::Subscribe(format!(
                                "XGROUP CREATE {}: {}",
                                String::from_utf8_lossy(&self.key),
                                error_text(&r)
                            )));
                        }
                        // Back after a lost connection: entries the server gave this consumer
                        // whose reply was lost with the connection are pending for it, and
                        // only a read of its own history (id 0) gets them; entries read and
                        // not yet handed out come again that way too.
                        if self.positioned {
                            self.catch_up = true;
                            self.batch.clear();
                            self.redelivered_left = 0;
                        }
                        self.positioned = true;
                    }
                    None if !self.positioned => {
                        // Read after the newest entry now: what is sent from here on.
                        let r = self
                            .conn
                            .call(&[b"XREVRANGE", &self.key, b"+", b"-", b"COUNT", b"1"])
                            .await?;
                        if r.first() == Some(&b'-') {
                            if let Some(e) = conn::cluster_redirect(&error_text(&r)) {
                                return Err(e);
                            }
                            return Err(DriverError::Subscribe(format!(
                                "XREVRANGE {}: {}",
                                String::from_utf8_lossy(&self.key),
                                error_text(&r)
                            )));
                        }
                        if let Some(id) =
                            resp::last_id(&r).map_err(|e| DriverError::Receive(e.to_string()))?
                        {
                            self.last_id = id;
                        }
                        self.positioned = true;
                    }
                    None => {}
                }
                Ok(())
            }
        }
    }

    /// Writes the next read (after the acks of the last batch, in one write).
    fn request_batch(&mut self) {
        let ep = self.conn.ep.clone();
        let count = ep.count.to_string();
        let block = ep.block_ms.to_string();
        let out = &mut self.conn.wire.wbuf;
        if let Some(g) = &self.group {
            if !self.to_ack.is_empty() {
                let mut args: Vec<&[u8]> = Vec::with_capacity(self.to_ack.len() + 3);
                args.extend([&b"XACK"[..], &self.key, g]);
                args.extend(self.to_ack.iter().map(|b| &b[..]));
                resp::command(out, &args);
                self.acks_pending += 1;
            }
            resp::command(
                out,
                &[
                    b"XREADGROUP",
                    b"GROUP",
                    g,
                    &self.me,
                    b"COUNT",
                    count.as_bytes(),
                    b"BLOCK",
                    block.as_bytes(),
                    b"STREAMS",
                    &self.key,
                    if self.catch_up { b"0" } else { b">" },
                ],
            );
            self.to_ack.clear();
        } else {
            resp::command(
                out,
                &[
                    b"XREAD",
                    b"COUNT",
                    count.as_bytes(),
                    b"BLOCK",
                    block.as_bytes(),
                    b"STREAMS",
                    &self.key,
                    &self.last_id,
                ],
            );
        }
        self.reading = true;
    }

    /// The next delivery, or an I/O error (the caller reconnects).
    async fn next(&mut self) -> Result<Delivery, std::io::Error> {
        loop {
            if let Some(e) = self.batch.pop_front() {
                if self.group.is_some() {
                    self.to_ack.push(e.id);
                } else {
                    self.last_id = e.id;
                }
                let mut d = delivery(e.payload);
                if self.redelivered_left > 0 {
                    self.redelivered_left -= 1;
                    d.redelivered = true;
                }
                return Ok(d);
            }
            match self.conn.ep.mode {
                Mode::PubSub => {
                    let push = std::future::poll_fn(|cx| {
                        self.conn.wire.poll_next(cx, true, resp::take_push)
                    })
                    .await?;
                    if let Push::Message(p) = push {
                        return Ok(delivery(p));
                    }
                }
                Mode::Streams => {
                    if !self.reading {
                        self.request_batch();
                    }
                    let reply = std::future::poll_fn(|cx| {
                        self.conn.wire.poll_next(cx, true, |buf: &mut BytesMut| {
                            Ok::<_, resp::RespError>(
                                resp::reply_len(buf)?.map(|n| buf.split_to(n).freeze()),
                            )
                        })
                    })
                    .await?;
                    if self.acks_pending > 0 {
                        self.acks_pending -= 1;
                        // A refused XACK (a user without +xack) leaves the entries pending
                        // in the group: said once, as the messages themselves did arrive.
                        if reply.first() == Some(&b'-') && !self.xack_refused_told {
                            self.xack_refused_told = true;
                            self.conn.refused(&Reply::Error(format!(
                                "the server refused XACK ({}): the entries delivered stay pending in the consumer group",
                                error_text(&reply)
                            )));
                        }
                        continue;
                    }
                    self.reading = false;
                    if reply.first() == Some(&b'-') {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            error_text(&reply),
                        ));
                    }
                    resp::stream_entries(reply, &mut self.batch).map_err(|e| {
                        std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
                    })?;
                    // The history read is done when it comes back empty.
                    if self.catch_up {
                        self.catch_up = !self.batch.is_empty();
                        self.redelivered_left = self.batch.len();
                    }
                }
            }
        }
    }
}

fn delivery(payload: Bytes) -> Delivery {
    Delivery {
        payload,
        redelivered: false,
        meta: None,
    }
}

impl Consumer for RedisConsumer {
    // Cancel-safe: every step leaves its state in the struct (connected, subscribed, a read
    // out), so a cancelled call resumes where it was.
    async fn recv(&mut self) -> Result<Option<Delivery>, DriverError> {
        loop {
            if !self.conn.is_connected() {
                let why = self
                    .lost
                    .take()
                    .unwrap_or_else(|| "the connection was lost".into());
                self.subscribed = false;
                self.conn.reconnect(&why).await;
            }
            if !self.subscribed {
                match self.subscribe().await {
                    Ok(()) => self.subscribed = true,
                    Err(e) if e.is_fatal() => return Err(e),
                    Err(e) => {
                        self.lost = Some(e.to_string());
                        self.conn.wire.detach();
                        continue;
                    }
                }
            }
            match self.next().await {
                Ok(d) => return Ok(Some(d)),
                // The user may not read the stream (an ACL without +xreadgroup or the key):
                // a new connection would be refused the same way, so the consumer stops.
                Err(e) if e.to_string().starts_with("NOPERM") => {
                    let why = format!("the server refuses this user's reads: {e}");
                    self.conn
                        .refused(&Reply::Error(format!("{why}; the consumer stops")));
                    return Err(DriverError::Config(why));
                }
                Err(e) => {
                    // Redis closes a subscriber that falls behind (`client-output-buffer-limit
                    // pubsub`) without a word, and a consumer paced slower than its feed sees
                    // the end only after the backlog the kernel buffered, seconds later.
                    let hint = if self.conn.ep.mode == Mode::PubSub
                        && e.kind() == std::io::ErrorKind::UnexpectedEof
                    {
                        " (the server closed it without a word: it went down, or it dropped a \
                         subscriber whose output buffer passed its client-output-buffer-limit \
                         pubsub, which Redis logs as \"overcoming of output buffer limits\")"
                    } else {
                        ""
                    };
                    self.lost = Some(format!("{e}{hint}"));
                    self.conn.wire.detach();
                }
            }
        }
    }

    async fn close(mut self) -> Result<(), DriverError> {
        // What was handed out is acknowledged on the way out (it went with the next read),
        // so a finished run leaves in the group's pending list only entries it never took.
        if let Some(g) = self.group.clone()
            && !self.to_ack.is_empty()
            && self.conn.is_connected()
        {
            let mut args: Vec<&[u8]> = vec![b"XACK", &self.key, &g];
            args.extend(self.to_ack.iter().map(|b| &b[..]));
            resp::command(&mut self.conn.wire.wbuf, &args);
        }
        let _ = self.conn.wire.flush().await;
        Ok(())
    }
}

/// A held connection of a connection workload: the producers' command now and then
/// (`PUBLISH`, or `XADD` in streams mode), replies read and dropped while it is held.
pub struct RedisSession {
    conn: Conn,
    command: resp::CommandPrefix,
}

impl Session for RedisSession {
    async fn publish(&mut self, payload: &[u8]) -> Result<(), DriverError> {
        self.command.put(&mut self.conn.wire.wbuf, payload);
        self.conn
            .wire
            .flush()
            .await
            .map_err(|e| DriverError::Send(e.to_string()))
    }

    async fn keep_alive(&mut self) -> DriverError {
        loop {
            let r = std::future::poll_fn(|cx| self.conn.wire.poll_next(cx, true, resp::take_reply))
                .await;
            if let Err(e) = r {
                return self.conn.lost_error(e);
            }
        }
    }

    async fn close(mut self) -> Result<(), DriverError> {
        resp::command(&mut self.conn.wire.wbuf, &[b"QUIT"]);
        let _ = self.conn.wire.flush().await;
        Ok(())
    }
}

impl msgbench_core::registration::Registered for RedisDriver {
    const INFO: msgbench_core::registration::DriverInfo = msgbench_core::registration::DriverInfo {
        name: "redis",
        schemes: &["redis", "rediss"],
        // queue groups: in streams mode only (the URL decides).
        about: "Redis pub/sub (PUBLISH, SUBSCRIBE/PSUBSCRIBE) and Streams (?mode=streams: XADD with ?maxlen=N trimming, XREAD fan-out, consumer groups with XREADGROUP and XACK); every reply is the message's ack; /DB, user:pass@, TLS (rediss://), connection workloads (own lean RESP2 client)",
        caps: Capabilities {
            acks: true,
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
        Ok(
            RedisDriver::new(url, &plan.tls, events, plan.connect_timeout)?
                .with_keep_alive(plan.client.keep_alive),
        )
    }
}
