//! One client connection: the CONNECT handshake, then a reader (this task: parses, routes,
//! answers) and a writer (its own task: drains the connection's queue into batched writes).
//!
//! Everything the client receives goes through the one queue, so control packets keep their
//! order relative to messages, and a client publishing to its own subscription cannot deadlock:
//! the reader only ever waits for writers, and writers only wait for their sockets.

use super::Shared;
use super::inflight::Inflight;
use super::router::{Publication, Route, SubOpts, valid_topic};
use super::session::{ConnCtl, Msg, Out, PidBits, Session, Unacked};
use super::wire::{self, Props, Will, complete_packet, parse_will};
use super::{BrokerStats, router::parse_filter};
use bytes::{BufMut, Bytes, BytesMut};
use msgbench_driver_mqtt::codec::{self, Packet, Publish, Version};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// Time a new connection has to send CONNECT.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Read buffer growth step.
const READ_CHUNK: usize = 64 * 1024;
/// The writer stops adding packets to a batch past this many bytes.
const BATCH_BYTES: usize = 256 * 1024;
/// A write buffer grown past this (by a large message) is not kept.
const KEEP_BUF: usize = 4 * 1024 * 1024;

/// Decrements the open-connection count when the connection's task ends, however it ends.
pub(crate) struct OpenConn(pub Arc<BrokerStats>);

impl Drop for OpenConn {
    fn drop(&mut self) {
        self.0.connections_current.fetch_sub(1, Relaxed);
    }
}

/// Aborts the task if the connection's task is itself aborted (broker dropped or stop timed
/// out), so no writer outlives its connection.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The protocol level of a CONNECT at the front of `buf`, once enough of it has arrived.
pub(crate) fn connect_level(buf: &[u8]) -> Option<u8> {
    if buf.first()? >> 4 != 1 {
        return None;
    }
    let mut i = 1;
    while buf.get(i)? & 0x80 != 0 {
        i += 1;
        if i > 4 {
            return None;
        }
    }
    let name_len = usize::from(u16::from_be_bytes([*buf.get(i + 1)?, *buf.get(i + 2)?]));
    buf.get(i + 3 + name_len).copied()
}

/// Publishes a will as a client's PUBLISH would be (retained first when asked), on behalf of
/// session `from`.
async fn publish_will(shared: &Shared, will: &Will, from: u64) {
    let p = Publication {
        topic: will.topic.clone(),
        payload: will.payload.clone(),
        qos: will.qos,
        retain: will.retain,
        props: will.props().map(Arc::new),
        from,
    };
    if will.retain {
        shared.router.retain(&p);
    }
    shared.router.route(&will.topic).deliver(&p).await;
}

enum Handshake {
    /// CONNECT, its will, and its MQTT 5 properties the codec does not read.
    Connect(codec::Connect, Option<Box<Will>>, wire::ClientProps),
    /// CONNECT with a protocol level other than 4 or 5.
    BadLevel,
    Fail,
}

async fn read_connect<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    max: usize,
) -> Handshake {
    loop {
        if connect_level(buf).is_some_and(|l| l != 4 && l != 5) {
            return Handshake::BadLevel;
        }
        // Read before the codec consumes the packet: it skips the will and the properties.
        let extras =
            complete_packet(buf).map(|n| (parse_will(&buf[..n]), wire::client_props(&buf[..n])));
        match codec::parse(buf, Version::V311, max) {
            Ok(Some(Packet::Connect(c))) => {
                return match extras {
                    Some((Ok(will), props)) => Handshake::Connect(c, will.map(Box::new), props),
                    _ => Handshake::Fail,
                };
            }
            Ok(None) => {}
            Ok(Some(_)) | Err(_) => return Handshake::Fail,
        }
        buf.reserve(1024);
        match rd.read_buf(buf).await {
            Ok(n) if n > 0 => {}
            _ => return Handshake::Fail,
        }
    }
}

fn put_varint(buf: &mut BytesMut, mut n: usize) {
    loop {
        let b = (n % 128) as u8;
        n /= 128;
        buf.put_u8(if n > 0 { b | 0x80 } else { b });
        if n == 0 {
            return;
        }
    }
}

/// MQTT 5 CONNACK (success) with the properties the codec's `put_connack` does not write:
/// the assigned client identifier, the broker's maximum packet size, and that subscription
/// identifiers are not available (the broker would have to send them back with every message
/// [MQTT-3.3.4-3]; a client told so must not use them).
fn put_connack_v5(
    buf: &mut BytesMut,
    present: bool,
    assigned: Option<&str>,
    max_packet: Option<u32>,
) {
    let mut props = 2;
    if let Some(id) = assigned {
        props += 3 + id.len();
    }
    if max_packet.is_some() {
        props += 5;
    }
    let props_len = if props < 128 { 1 } else { 2 };
    buf.put_u8(0x20);
    put_varint(buf, 2 + props_len + props);
    buf.put_u8(u8::from(present));
    buf.put_u8(0);
    put_varint(buf, props);
    if let Some(id) = assigned {
        buf.put_u8(0x12);
        buf.put_u16(id.len() as u16);
        buf.put_slice(id.as_bytes());
    }
    if let Some(m) = max_packet {
        buf.put_u8(0x27);
        buf.put_u32(m);
    }
    buf.put_u8(0x29);
    buf.put_u8(0);
}

/// Serves one accepted connection (plain TCP's owned halves, or a TLS stream's split halves) to
/// the end.
pub(crate) async fn serve<R, W>(
    (mut rd, mut wr): (R, W),
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
    _open: OpenConn,
) where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut buf = BytesMut::with_capacity(4096);
    let max = shared.config.max_packet;
    let hs = tokio::select! {
        r = tokio::time::timeout(CONNECT_TIMEOUT, read_connect(&mut rd, &mut buf, max)) => r,
        _ = shutdown.wait_for(|s| *s) => return,
    };
    let (connect, will, props) = match hs {
        Ok(Handshake::Connect(c, will, props)) => (c, will, props),
        Ok(Handshake::BadLevel) => {
            // 3.1.1-style CONNACK, return code 1: unacceptable protocol version.
            let _ = wr.write_all(&[0x20, 2, 0, 1]).await;
            return;
        }
        _ => return,
    };
    let version = connect.version;
    let conn_id = shared.next_conn.fetch_add(1, Relaxed);
    let assigned = connect.client_id.is_empty();
    if assigned && !connect.clean && version == Version::V311 {
        // 3.1.1 requires a client id for a persistent session: return code 2.
        let _ = wr.write_all(&[0x20, 2, 0, 2]).await;
        return;
    }
    let client_id = if assigned {
        format!("msgbench-auto-{conn_id}")
    } else {
        connect.client_id.clone()
    };
    let max_out = props.max_packet;
    // How long the session outlives the connection: 3.1.1 keeps a persistent one for good;
    // MQTT 5 says with the session expiry interval, whatever Clean Start says (which only
    // discards an existing session) [MQTT-3.1.2-23].
    let expiry_s = match version {
        Version::V5 => props.session_expiry,
        _ if connect.clean => 0,
        _ => u32::MAX,
    };
    let (tx, rx) = mpsc::channel(shared.config.queue_depth);
    let ctl = Arc::new(ConnCtl::new());
    let att = shared
        .sessions
        .attach(
            &shared.router,
            &client_id,
            connect.clean,
            expiry_s,
            conn_id,
            ctl.clone(),
            tx.clone(),
        )
        .await;
    // How many connections had resumed the session when this one took it: a larger count
    // when this one's will is due means a later one resumed it. Read now, not at the close:
    // a connection taking the session over resumes it as soon as this one has detached.
    let resumed = att.session.resumed.load(Relaxed);

    let mut connack = BytesMut::with_capacity(64);
    let limit = (max < codec::MAX_REMAINING).then(|| u32::try_from(max).unwrap_or(u32::MAX));
    if version == Version::V5 {
        put_connack_v5(
            &mut connack,
            att.present,
            assigned.then_some(&*client_id),
            limit,
        );
    } else {
        codec::put_connack(&mut connack, version, att.present, 0);
    }
    let inflight = Arc::new(Inflight::new(props.receive_max, expiry_s > 0));
    let mut writer = AbortOnDrop(tokio::spawn(writer(
        wr,
        rx,
        Batch {
            buf: connack,
            unacked: att.unacked,
            backlog: att.backlog,
            held: VecDeque::new(),
            depth: shared.config.queue_depth,
            version,
            next_pid: 1,
            inflight: inflight.clone(),
            sent: 0,
            max_out: max_out.map(|m| m as usize),
        },
        ctl.clone(),
        shared.stats.clone(),
    )));

    let mut reader = Reader {
        shared: shared.clone(),
        session: att.session.clone(),
        tx,
        version,
        qos2: att.qos2,
        inflight,
        keep_alive: Duration::from_millis(u64::from(connect.keep_alive) * 1500),
        last_topic: Vec::new(),
        last_route: None,
        next_props: None,
        next_opts: None,
    };
    let mut close = ctl.close.subscribe();
    let stop = tokio::select! {
        stop = reader.run(&mut rd, &mut buf) => stop,
        // Taken over by a new connection with the same client id, or the broker stops.
        _ = close.wait_for(|c| *c) => Stop::Abort,
        _ = shutdown.wait_for(|s| *s) => Stop::Abort,
    };
    ctl.close.send_replace(true);
    let (rx, wr) = match (&mut writer.0).await {
        Ok((rx, wr)) => (Some(rx), Some(wr)),
        Err(_) => (None, None),
    };
    // MQTT 5: a client the broker lets go is told why [MQTT-3.14.4]: another connection took
    // its session (0x8E), the broker is stopping (0x8B), or what the client sent broke the
    // protocol (the reason of [`Stop::Refuse`]).
    let why = if ctl.taken_over.load(Relaxed) {
        Some(0x8E)
    } else if *shutdown.borrow() {
        Some(0x8B)
    } else if let Stop::Refuse(code) = stop {
        Some(code)
    } else {
        None
    };
    if let (Some(mut wr), Some(code), Version::V5) = (wr, why, version) {
        let bye = [0xE0, 2, code, 0];
        let _ = tokio::time::timeout(Duration::from_secs(1), wr.write_all(&bye)).await;
    }
    let Reader { qos2, inflight, .. } = reader;
    let unacked = inflight.take_kept();
    shared.sessions.detach(
        &shared.router,
        &client_id,
        conn_id,
        &att.session,
        rx,
        qos2,
        unacked,
    );
    ctl.done.send_replace(true);
    // The will goes out unless the client said DISCONNECT (MQTT 5: with any reason but 0x04,
    // "disconnect with will message").
    let Some(will) = will.filter(|_| !matches!(stop, Stop::Disconnect(code) if code != 0x04))
    else {
        return;
    };
    // MQTT 5: the will waits for its delay or the end of the session, whichever comes first; a
    // session that expires with its connection lets it go at once.
    let delay = will.delay.min(att.session.expiry_s());
    if delay == 0 {
        publish_will(&shared, &will, att.session.id).await;
        return;
    }
    // After the delay, unless a new connection resumed the session meanwhile [MQTT-3.1.3-9].
    // Or at once when the session ends before that: discarded by a new connection's clean
    // start, or expired [MQTT-3.1.3-9].
    let session = att.session.clone();
    let mut ended = session.ended.subscribe();
    tokio::spawn(async move {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(u64::from(delay))) => {
                if session.resumed.load(Relaxed) == resumed {
                    publish_will(&shared, &will, session.id).await;
                }
            }
            () = async { drop(ended.wait_for(|e| *e).await) } => {
                publish_will(&shared, &will, session.id).await;
            }
            // (The guard `wait_for` returns is not Send: dropped inside.)
            () = async { drop(shutdown.wait_for(|s| *s).await) } => {}
        }
    });
}

/// The writer's encoding state.
struct Batch {
    buf: BytesMut,
    /// What the session's last connection left unacknowledged: sent again before anything
    /// else, with the same packet ids [MQTT-4.4.0-1].
    unacked: VecDeque<Unacked>,
    /// Messages queued while the session was offline; they go next.
    backlog: VecDeque<Msg>,
    /// QoS ≥ 1 messages waiting for the client's receive maximum, in order; at most `depth`
    /// (beyond that they are dropped, as a persistent session's offline queue drops them:
    /// the writer must go on reading its queue, or the reader would wait on it for the very
    /// acknowledgements that open the window).
    held: VecDeque<Msg>,
    depth: usize,
    version: Version,
    next_pid: u16,
    inflight: Arc<Inflight>,
    /// PUBLISH packets in `buf`.
    sent: u64,
    /// MQTT 5: the largest packet the client accepts (its CONNECT's maximum packet size).
    max_out: Option<usize>,
}

impl Batch {
    fn put(&mut self, out: Out) {
        match out {
            // Behind what already waits, in order.
            Out::Pub(m) if m.qos > 0 && (self.waiting() || !self.inflight.open()) => {
                if self.held.len() < self.depth {
                    self.held.push_back(m);
                }
            }
            Out::Pub(m) => self.publish(&m),
            Out::Ack(header, pid) => codec::put_ack(&mut self.buf, header, pid),
            Out::Raw(b) => self.buf.extend_from_slice(&b),
        }
    }

    fn publish(&mut self, m: &Msg) {
        // MQTT 5 message expiry: an expired message is dropped, a live one carries the time
        // left (3.1.1 cannot say it, but expiry holds all the same).
        let expiry = match m.props.as_deref().map(Props::expiry_left) {
            Some(Err(())) => return,
            Some(Ok(left)) => left,
            None => None,
        };
        let v5 = self.version == Version::V5;
        let props = match &m.props {
            Some(p) if v5 => p.raw.len() + if expiry.is_some() { 5 } else { 0 },
            _ => 0,
        };
        if self.max_out.is_some_and(|max| {
            wire::publish_size(v5, m.topic.len(), m.payload.len(), m.qos, props) > max
        }) {
            // Larger than the client accepts: discarded, as if delivered [MQTT-3.1.2-25].
            return;
        }
        let pid = if m.qos > 0 {
            let pid = self.inflight.claim(self.next_pid, m);
            self.next_pid = pid.checked_add(1).unwrap_or(1);
            pid
        } else {
            0
        };
        self.encode(m, pid, expiry);
    }

    /// Sends again what the session's last connection left unacknowledged: each PUBLISH with
    /// DUP set and its packet id, each PUBREL of a QoS 2 message the client had received.
    fn resend(&mut self) {
        while let Some(u) = self.unacked.pop_front() {
            self.inflight.resume(&u);
            match &u {
                Unacked::Publish(pid, m) => {
                    let expiry = match m.props.as_deref().map(Props::expiry_left) {
                        Some(Ok(left)) => left,
                        _ => None,
                    };
                    let at = self.buf.len();
                    self.encode(m, *pid, expiry);
                    if let Some(first) = self.buf.get_mut(at) {
                        *first |= 0x08;
                    }
                }
                Unacked::Released(pid) => codec::put_ack(&mut self.buf, codec::PUBREL, *pid),
            }
            self.next_pid = u.pid().checked_add(1).unwrap_or(1);
        }
    }

    /// Whether QoS ≥ 1 messages wait for the client's receive maximum.
    fn waiting(&self) -> bool {
        !(self.backlog.is_empty() && self.held.is_empty())
    }

    /// Sends what waits (the offline backlog, then the held messages) as far as the receive
    /// maximum and the batch allow.
    fn send_waiting(&mut self) {
        while self.buf.len() < BATCH_BYTES && self.inflight.open() {
            let Some(m) = self.backlog.pop_front().or_else(|| self.held.pop_front()) else {
                return;
            };
            self.publish(&m);
        }
    }

    fn encode(&mut self, m: &Msg, pid: u16, expiry: Option<u32>) {
        match &m.props {
            Some(p) if self.version == Version::V5 => wire::put_publish_v5(
                &mut self.buf,
                (&m.topic, &m.payload),
                m.qos,
                m.retain,
                pid,
                (&p.raw, expiry),
            ),
            _ => codec::put_publish(
                &mut self.buf,
                self.version,
                &m.topic,
                &m.payload,
                m.qos,
                m.retain,
                false,
                pid,
            ),
        }
        self.sent += 1;
    }
}

/// Runs the writer until the socket fails or the connection is closed; hands back the queue so
/// a persistent session can keep what is still in it.
async fn writer<W: AsyncWrite + Unpin>(
    mut wr: W,
    mut rx: mpsc::Receiver<Out>,
    mut batch: Batch,
    ctl: Arc<ConnCtl>,
    stats: Arc<BrokerStats>,
) -> (mpsc::Receiver<Out>, W) {
    let mut close = ctl.close.subscribe();
    tokio::select! {
        () = write_loop(&mut wr, &mut rx, &mut batch, &stats) => {
            ctl.close.send_replace(true);
        }
        _ = close.wait_for(|c| *c) => {}
    }
    (rx, wr)
}

async fn write_loop<W: AsyncWrite + Unpin>(
    wr: &mut W,
    rx: &mut mpsc::Receiver<Out>,
    b: &mut Batch,
    stats: &BrokerStats,
) {
    b.resend();
    loop {
        b.send_waiting();
        if b.buf.is_empty() {
            let out = if b.waiting() {
                // At the receive maximum: acknowledgements (read by the reader) open it.
                tokio::select! {
                    out = rx.recv() => out,
                    () = b.inflight.freed() => continue,
                }
            } else {
                rx.recv().await
            };
            match out {
                Some(out) => b.put(out),
                None => return,
            }
        }
        // The offline backlog goes out before anything new is taken.
        while b.backlog.is_empty()
            && b.buf.len() < BATCH_BYTES
            && let Ok(out) = rx.try_recv()
        {
            b.put(out);
        }
        if wr.write_all(&b.buf).await.is_err() {
            return;
        }
        stats
            .messages_out
            .fetch_add(std::mem::take(&mut b.sent), Relaxed);
        if b.buf.capacity() > KEEP_BUF {
            b.buf = BytesMut::with_capacity(BATCH_BYTES);
        } else {
            b.buf.clear();
        }
    }
}

/// Why the reader stopped.
enum Stop {
    /// DISCONNECT, with its reason code (always 0 in MQTT 3.1.1).
    Disconnect(u8),
    /// End of stream, I/O error, keep-alive expiry or a closed queue.
    Abort,
    /// A malformed packet or a protocol error: the connection ends as with [`Stop::Abort`]
    /// (the will goes out), and an MQTT 5 client is told why with DISCONNECT and this reason
    /// code first (MQTT 5 §4.13.1: 0x81 malformed, 0x82 protocol error, 0x94 topic alias,
    /// 0xA1 subscription identifier).
    Refuse(u8),
}

struct Reader {
    shared: Arc<Shared>,
    session: Arc<Session>,
    /// This connection's own queue (for answers).
    tx: mpsc::Sender<Out>,
    version: Version,
    /// Received QoS 2 ids waiting for PUBREL.
    qos2: Option<PidBits>,
    inflight: Arc<Inflight>,
    /// 1.5 × the client's keep-alive; zero = none.
    keep_alive: Duration,
    /// A one-entry route cache: publishers mostly repeat one topic.
    last_topic: Vec<u8>,
    last_route: Option<Arc<Route>>,
    /// MQTT 5: the properties of the PUBLISH being handled, and the subscription options of
    /// the SUBSCRIBE being handled, read before the codec (which skips them) parses it.
    next_props: Option<Props>,
    next_opts: Option<Vec<u8>>,
}

impl Reader {
    async fn run<R: AsyncRead + Unpin>(&mut self, rd: &mut R, buf: &mut BytesMut) -> Stop {
        let max = self.shared.config.max_packet;
        let ka = self.keep_alive;
        let mut expiry = std::pin::pin!(tokio::time::sleep(ka));
        loop {
            let mut published = 0;
            loop {
                if self.version == Version::V5
                    && let Err(code) = self.peek(buf)
                {
                    self.shared.stats.messages_in.fetch_add(published, Relaxed);
                    return Stop::Refuse(code);
                }
                let p = match codec::parse(buf, self.version, max) {
                    Ok(Some(p)) => p,
                    Ok(None) => break,
                    Err(_) => {
                        self.shared.stats.messages_in.fetch_add(published, Relaxed);
                        return Stop::Refuse(wire::MALFORMED);
                    }
                };
                if matches!(p, Packet::Publish(_)) {
                    published += 1;
                }
                if let Err(stop) = self.handle(p).await {
                    self.shared.stats.messages_in.fetch_add(published, Relaxed);
                    return stop;
                }
            }
            if published > 0 {
                self.shared.stats.messages_in.fetch_add(published, Relaxed);
            }
            if buf.capacity() - buf.len() < 4096 {
                buf.reserve(READ_CHUNK);
            }
            // Silence is counted from when the broker is ready to read again: time spent waiting
            // for subscribers' queues is not the client's.
            let waiting_since = Instant::now();
            loop {
                tokio::select! {
                    biased;
                    r = rd.read_buf(buf) => match r {
                        Ok(n) if n > 0 => break,
                        _ => return Stop::Abort,
                    },
                    () = &mut expiry, if !ka.is_zero() => {
                        let due = waiting_since + ka;
                        if Instant::now() >= due {
                            return Stop::Abort;
                        }
                        expiry.as_mut().reset(due);
                    }
                }
            }
        }
    }

    /// MQTT 5: reads what the codec skips from a complete PUBLISH (its properties) or SUBSCRIBE
    /// (its subscription options) at the front of `buf`, for [`Reader::handle`] to use once the
    /// codec has parsed it; `Err` with the reason code for a protocol error there.
    fn peek(&mut self, buf: &[u8]) -> Result<(), u8> {
        let kind = buf.first().map(|h| h >> 4);
        if !matches!(kind, Some(3 | 8)) {
            return Ok(());
        }
        let Some(n) = complete_packet(buf) else {
            return Ok(());
        };
        if kind == Some(3) {
            self.next_props = wire::publish_props(&buf[..n])?;
        } else {
            self.next_opts = Some(wire::subscribe_options(&buf[..n])?);
        }
        Ok(())
    }

    async fn send(&self, out: Out) -> Result<(), Stop> {
        self.tx.send(out).await.map_err(|_| Stop::Abort)
    }

    async fn handle(&mut self, p: Packet) -> Result<(), Stop> {
        match p {
            Packet::Publish(p) => self.publish(p).await?,
            Packet::PubAck { pid, .. } | Packet::PubComp { pid } => self.inflight.release(pid),
            Packet::PubRec { pid, code } => {
                if code >= 0x80 {
                    self.inflight.release(pid);
                } else {
                    self.inflight.received(pid);
                    self.send(Out::Ack(codec::PUBREL, pid)).await?;
                }
            }
            Packet::PubRel { pid } => {
                if let Some(q) = &mut self.qos2 {
                    q.remove(pid);
                }
                self.send(Out::Ack(codec::PUBCOMP, pid)).await?;
            }
            Packet::Subscribe { pid, filters } => self.subscribe(pid, filters).await?,
            Packet::Unsubscribe { pid, filters } => {
                let mut b = BytesMut::with_capacity(8 + filters.len());
                if self.version == Version::V5 {
                    // A reason code per filter: 0x11 "no subscription existed" where none did.
                    b.put_u8(0xb0);
                    put_varint(&mut b, 3 + filters.len());
                    b.put_u16(pid);
                    b.put_u8(0);
                    for f in &filters {
                        let existed = self.shared.router.unsubscribe(&self.session, f);
                        b.put_u8(if existed { 0x00 } else { 0x11 });
                    }
                } else {
                    for f in &filters {
                        self.shared.router.unsubscribe(&self.session, f);
                    }
                    codec::put_unsuback(&mut b, self.version, pid, filters.len());
                }
                self.send(Out::Raw(b.freeze())).await?;
            }
            Packet::PingReq => self.send(Out::Raw(Bytes::from_static(&[0xd0, 0]))).await?,
            Packet::Disconnect {
                code,
                session_expiry,
            } => {
                if let Some(expiry_s) = session_expiry {
                    // A session that was to end with its connection cannot be kept by the
                    // DISCONNECT: a protocol error [MQTT-3.14.2-2], which ends the connection
                    // as one (the will goes out).
                    if self.session.expiry_s() == 0 && expiry_s > 0 {
                        return Err(Stop::Refuse(wire::PROTOCOL_ERROR));
                    }
                    self.session.set_expiry_s(expiry_s);
                }
                return Err(Stop::Disconnect(code));
            }
            // A second CONNECT, or packets only a server sends.
            _ => return Err(Stop::Refuse(wire::PROTOCOL_ERROR)),
        }
        Ok(())
    }

    async fn publish(&mut self, p: Publish) -> Result<(), Stop> {
        if !valid_topic(&p.topic) || (p.qos > 0 && p.pid == 0) {
            return Err(Stop::Refuse(wire::PROTOCOL_ERROR));
        }
        if p.qos == 2 {
            let pending = self.qos2.get_or_insert_with(PidBits::new);
            if pending.contains(p.pid) {
                // Re-sent before PUBREL: already routed once.
                return self.send(Out::Ack(codec::PUBREC, p.pid)).await;
            }
            pending.insert(p.pid);
        }
        let (qos, pid) = (p.qos, p.pid);
        let p = Publication {
            topic: p.topic,
            payload: p.payload,
            qos,
            retain: p.retain,
            props: self.next_props.take().map(Arc::new),
            from: self.session.id,
        };
        let router = &self.shared.router;
        if p.retain {
            router.retain(&p);
        }
        let route = match &self.last_route {
            Some(r) if self.last_topic == p.topic && r.is_current(router) => r.clone(),
            _ => {
                let r = router.route(&p.topic);
                self.last_topic.clear();
                self.last_topic.extend_from_slice(&p.topic);
                self.last_route = Some(r.clone());
                r
            }
        };
        route.deliver(&p).await;
        match qos {
            1 => self.send(Out::Ack(codec::PUBACK, pid)).await,
            2 => self.send(Out::Ack(codec::PUBREC, pid)).await,
            _ => Ok(()),
        }
    }

    async fn subscribe(&mut self, pid: u16, filters: Vec<(String, u8)>) -> Result<(), Stop> {
        let fail = if self.version == Version::V5 {
            0x8f
        } else {
            0x80
        };
        // MQTT 5 subscription options (3.1.1: none): no local, retain as published, and
        // retain handling — 0: send retained messages, 1: only for a new subscription, 2: not.
        let opts = self.next_opts.take();
        let mut codes = Vec::with_capacity(filters.len());
        let mut retained = Vec::with_capacity(filters.len());
        for (i, (f, qos)) in filters.iter().enumerate() {
            let o = opts.as_ref().and_then(|o| o.get(i)).copied().unwrap_or(0);
            let so = SubOpts {
                no_local: o & 0x04 != 0,
                retain_as_published: o & 0x08 != 0,
            };
            let group = parse_filter(f).map(|(g, _)| g.is_some());
            if so.no_local && group == Some(true) {
                // A protocol error on a shared subscription [MQTT-3.8.3-4].
                return Err(Stop::Refuse(wire::PROTOCOL_ERROR));
            }
            let existed = if *qos <= 2 {
                self.shared.router.subscribe(&self.session, f, *qos, so)
            } else {
                None
            };
            codes.push(if existed.is_some() { *qos } else { fail });
            retained.push(
                group == Some(false)
                    && match (o >> 4) & 3 {
                        0 => true,
                        1 => existed == Some(false),
                        _ => false,
                    },
            );
        }
        let mut b = BytesMut::with_capacity(8 + codes.len());
        codec::put_suback(&mut b, self.version, pid, &codes);
        self.send(Out::Raw(b.freeze())).await?;
        for (((f, qos), code), send) in filters.iter().zip(&codes).zip(retained) {
            if *code == *qos && send {
                for m in self.shared.router.retained_for(f, *qos) {
                    self.send(Out::Pub(m)).await?;
                }
            }
        }
        Ok(())
    }
}
