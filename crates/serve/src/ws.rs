//! `msgbench serve ws-broadcast`: a WebSocket broadcast server, the built-in target of the rango
//! scenario (a publisher's messages fanned out to every connected client).
//!
//! Every binary message a client sends, and every message handed to the [`Relay`] (what
//! `--from` consumes from a broker), goes to every *other* connected client, unchanged, as one
//! binary frame encoded once and shared. Text messages from clients are requests to the server
//! (a subscribe message, rango's or msgbench's `--hello`): counted, not relayed. Each connection is one task: it answers pings, closes
//! politely (1001 on shutdown), and takes its frames from a broadcast queue of
//! [`BroadcastConfig::queue`] messages and at most [`BroadcastConfig::queue_bytes`] bytes; a
//! client that falls that far behind skips what it missed, which is counted (`lagged`) and
//! shows up as loss in msgbench's integrity figures. (The byte bound is what keeps one client
//! that stopped reading from holding the queue's every message in the server's memory: with
//! 64 KiB messages, 65,536 of them are 4 GiB.)
//!
//! With [`BroadcastConfig::tls`] it serves `wss://` (TLS 1.2/1.3; a handshake that fails or
//! takes more than 10 s counts as refused).
//!
//! Upgrades must be RFC 6455 (`GET`, `Upgrade: websocket`, `Connection: Upgrade`, version 13,
//! a key); anything else gets `400 Bad Request` (`426` for another version) and is closed.
//!
//! With [`BroadcastConfig::gateway`] the same server is a JSON gateway instead (rango's shape
//! or an envelope): clients pick streams and get only those, client messages are subscribe
//! requests, and what is relayed is wrapped JSON. The routing and wrapping live in
//! [`crate::ws_gateway`]; the connections are these.

use bytes::{Bytes, BytesMut};
use msgbench_driver_ws::codec::{self, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG, OP_TEXT};
use msgbench_driver_ws::conn::Message;
use msgbench_net::{Stream, Wire};
use std::future::{Future, poll_fn};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{broadcast, watch};

/// Settings.
#[derive(Clone)]
pub struct BroadcastConfig {
    /// Messages a client may fall behind before it skips some.
    pub queue: usize,
    /// Bytes of frames the queue may hold for clients that have not taken them yet. Past it,
    /// a client behind by at least half of what is held (one that stopped reading, or reads
    /// slower than messages come) skips everything it has not taken.
    pub queue_bytes: usize,
    /// Largest message (and so frame) accepted from a client; a larger one closes its
    /// connection with 1009.
    pub max_frame: u64,
    /// Serve `wss://` with this acceptor (from [`crate::tls::tls_acceptor`]) instead of
    /// `ws://`. Default none.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// Be a JSON gateway of this shape ([`crate::ws_gateway`]) instead of broadcasting;
    /// messages are then fed with [`Broadcast::gateway_relay`]. Default none.
    pub gateway: Option<crate::ws_gateway::Shape>,
}

impl std::fmt::Debug for BroadcastConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BroadcastConfig")
            .field("queue", &self.queue)
            .field("queue_bytes", &self.queue_bytes)
            .field("max_frame", &self.max_frame)
            .field("tls", &self.tls.is_some())
            .field("gateway", &self.gateway)
            .finish()
    }
}

impl Default for BroadcastConfig {
    fn default() -> Self {
        BroadcastConfig {
            queue: 65_536,
            queue_bytes: 64 * 1024 * 1024,
            max_frame: 16 * 1024 * 1024,
            tls: None,
            gateway: None,
        }
    }
}

/// Live counters.
#[derive(Debug, Default)]
pub struct BroadcastStats {
    /// Clients connected now.
    pub connections_current: AtomicU64,
    /// Clients ever upgraded.
    pub connections_total: AtomicU64,
    /// Messages broadcast (from clients and from the relay).
    pub messages_in: AtomicU64,
    /// Frames written to clients.
    pub frames_out: AtomicU64,
    /// Messages clients skipped because they fell behind.
    pub lagged: AtomicU64,
    /// Upgrade requests refused, and TLS handshakes that failed or timed out.
    pub refused: AtomicU64,
    /// Text messages from clients (requests; not relayed). Gateway: every client message,
    /// each a subscribe or unsubscribe request.
    pub requests: AtomicU64,
    /// Gateway: requests answered with an error (not JSON, unknown event, no stream list).
    pub bad_requests: AtomicU64,
    /// Gateway: relayed messages dropped because their body is not JSON (counted in
    /// `messages_in`, sent to nobody).
    pub rejected: AtomicU64,
    /// Gateway: relayed messages dropped because their routing key names no public stream
    /// (`private.*`, or empty).
    pub ignored: AtomicU64,
    /// Gateway: messages not sent to a client because it is not subscribed to their stream
    /// (one per client and message).
    pub unsubscribed: AtomicU64,
}

/// One message on its way to the clients, encoded once.
#[derive(Clone)]
pub(crate) struct Item {
    /// The connection it came from (0: the relay), which does not get it back.
    pub(crate) from: u64,
    pub(crate) frame: Bytes,
    /// Gateway: the stream it belongs to; only its subscribers get it.
    pub(crate) stream: Option<Arc<str>>,
    /// Its frame's place in the [`Held`] account, given back when the last client has it.
    pub(crate) _held: Arc<HeldFrame>,
}

/// What the queue holds for clients that have not taken it yet: frames and their bytes.
#[derive(Debug, Default)]
pub(crate) struct Held {
    bytes: AtomicUsize,
    frames: AtomicUsize,
}

impl Held {
    /// Counts `frame` as held until the returned guard (kept in its [`Item`]) drops.
    pub(crate) fn hold(self: &Arc<Self>, frame: &Bytes) -> Arc<HeldFrame> {
        self.bytes.fetch_add(frame.len(), Relaxed);
        self.frames.fetch_add(1, Relaxed);
        Arc::new(HeldFrame {
            bytes: frame.len(),
            held: self.clone(),
        })
    }
}

/// One frame's share of [`Held`]. The queue drops its copy of an item once every client has
/// taken it (or skipped it), and each client drops its own once written.
#[derive(Debug)]
pub(crate) struct HeldFrame {
    bytes: usize,
    held: Arc<Held>,
}

impl Drop for HeldFrame {
    fn drop(&mut self) {
        self.held.bytes.fetch_sub(self.bytes, Relaxed);
        self.held.frames.fetch_sub(1, Relaxed);
    }
}

pub(crate) struct Shared {
    pub(crate) tx: broadcast::Sender<Item>,
    pub(crate) stats: Arc<BroadcastStats>,
    /// Frames the queue holds (for [`Shared::skip_if_behind`]).
    pub(crate) held: Arc<Held>,
    queue_bytes: usize,
    next_id: AtomicU64,
    max_frame: u64,
    tls: Option<tokio_rustls::TlsAcceptor>,
    pub(crate) gateway: Option<crate::ws_gateway::Shape>,
}

/// Feeds messages into the broadcast from outside (e.g. a broker consumer).
#[derive(Clone)]
pub struct Relay(pub(crate) Arc<Shared>);

impl Relay {
    /// Sends `payload` to every connected client as one binary message.
    pub fn send(&self, payload: &[u8]) {
        self.0.broadcast(0, payload);
    }

    /// Bytes of frames queued for clients that have not taken them yet (bounded by
    /// [`BroadcastConfig::queue_bytes`], give or take what comes in between two looks).
    pub fn queued_bytes(&self) -> usize {
        self.0.held.bytes.load(Relaxed)
    }
}

impl Shared {
    fn broadcast(&self, from: u64, payload: &[u8]) {
        let mut b = BytesMut::with_capacity(payload.len() + 10);
        codec::put_frame(&mut b, OP_BINARY, payload, None);
        self.stats.messages_in.fetch_add(1, Relaxed);
        let frame = b.freeze();
        // No receiver is fine: nobody is connected.
        let _ = self.tx.send(Item {
            from,
            _held: self.held.hold(&frame),
            frame,
            stream: None,
        });
    }

    /// Past the queue's byte budget, a client behind by at least half of the frames held
    /// skips all it has not taken (counted as `lagged`): a client that stopped reading would
    /// otherwise keep every queued frame alive, up to the queue's length in messages. Clients
    /// near the head of the queue are not the ones holding it, and lose nothing.
    fn skip_if_behind(&self, rx: &mut broadcast::Receiver<Item>) {
        if self.held.bytes.load(Relaxed) <= self.queue_bytes {
            return;
        }
        let behind = rx.len();
        if behind == 0 || behind < self.held.frames.load(Relaxed) / 2 {
            return;
        }
        // The new receiver starts at the tail; dropping the old gives back what it held.
        *rx = rx.resubscribe();
        self.stats.lagged.fetch_add(behind as u64, Relaxed);
    }
}

/// A bound broadcast server.
pub struct Broadcast {
    listener: TcpListener,
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl Broadcast {
    /// Binds `addr` (port 0 picks a free port).
    pub async fn bind(addr: &str, config: BroadcastConfig) -> io::Result<Broadcast> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
        let addr = listener.local_addr()?;
        let (tx, _) = broadcast::channel(config.queue.max(16));
        Ok(Broadcast {
            listener,
            addr,
            shared: Arc::new(Shared {
                tx,
                stats: Arc::default(),
                held: Arc::default(),
                queue_bytes: config.queue_bytes,
                next_id: AtomicU64::new(1),
                max_frame: config.max_frame,
                tls: config.tls,
                gateway: config.gateway,
            }),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Live counters; valid after the server stops.
    pub fn stats(&self) -> Arc<BroadcastStats> {
        self.shared.stats.clone()
    }

    /// A handle that broadcasts messages from outside the server.
    pub fn relay(&self) -> Relay {
        Relay(self.shared.clone())
    }

    /// Serves until `stop` resolves; then every client gets a close (1001) and up to 5 s.
    pub async fn run(self, stop: impl Future<Output = ()> + Send) -> io::Result<()> {
        let Broadcast {
            listener, shared, ..
        } = self;
        crate::listen::accept_loop(listener, "msgbench ws-broadcast", stop, |sock, shutdown| {
            serve(shared.clone(), sock, shutdown)
        })
        .await;
        Ok(())
    }
}

/// How long a client has for its TLS handshake and its upgrade request.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

async fn serve(shared: Arc<Shared>, sock: TcpStream, shutdown: watch::Receiver<bool>) {
    // Small buffers, held only while reading: a broadcast server holds tens of thousands of
    // these, and its clients send little after their upgrade.
    let mut wire = Wire::new(4 * 1024);
    wire.lean();
    match &shared.tls {
        None => wire.attach(Stream::accepted(sock)),
        Some(acceptor) => {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(sock)).await {
                Ok(Ok(tls)) => wire.attach(Stream::accepted_tls(tls)),
                // A client that cannot complete the handshake is a refused connection.
                _ => {
                    shared.stats.refused.fetch_add(1, Relaxed);
                    return;
                }
            }
        }
    }
    let head = tokio::time::timeout(
        HANDSHAKE_TIMEOUT,
        poll_fn(|cx| wire.poll_next(cx, false, |b| codec::parse_head(b, 16 * 1024))),
    )
    .await;
    let Ok(Ok(head)) = head else { return };
    if let Err((status, why)) = check_upgrade(&head) {
        shared.stats.refused.fetch_add(1, Relaxed);
        let body = format!("{why}\n");
        wire.wbuf.extend_from_slice(
            format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
                 Sec-WebSocket-Version: 13\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
        let _ = wire.flush().await;
        return;
    }
    let key = head.header("sec-websocket-key").unwrap_or_default();
    wire.wbuf.extend_from_slice(
        format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: {}\r\n\r\n",
            codec::accept_key(key)
        )
        .as_bytes(),
    );
    // Subscribed before the 101 goes out: nothing broadcast after the client saw it is missed.
    let mut rx = shared.tx.subscribe();
    if wire.flush().await.is_err() {
        return;
    }
    let id = shared.next_id.fetch_add(1, Relaxed);
    let stats = &shared.stats;
    stats.connections_total.fetch_add(1, Relaxed);
    stats.connections_current.fetch_add(1, Relaxed);
    // A gateway's client starts with the streams its URL names.
    let subs = shared
        .gateway
        .map(|_| crate::ws_gateway::Subscriptions::from_request(&head.first));
    connection(&shared, id, &mut wire, &mut rx, subs, shutdown).await;
    stats.connections_current.fetch_sub(1, Relaxed);
}

/// Why an upgrade request is refused: (status line, reason). What RFC 6455 §4.2.1 requires
/// of the request: a GET of HTTP/1.1 or later, a Host header, the upgrade tokens, version 13
/// and a key of 16 base64-encoded bytes.
fn check_upgrade(h: &codec::Head) -> Result<(), (&'static str, &'static str)> {
    if !h.first.starts_with("GET ") {
        return Err(("400 Bad Request", "WebSocket upgrades are GET requests"));
    }
    let version = h.first.rsplit(' ').next().unwrap_or_default();
    if !version.starts_with("HTTP/") || version < "HTTP/1.1" {
        return Err((
            "400 Bad Request",
            "WebSocket upgrades need HTTP/1.1 or later",
        ));
    }
    if h.header("host").is_none() {
        return Err(("400 Bad Request", "the Host header is missing"));
    }
    if !h.has_token("upgrade", "websocket") || !h.has_token("connection", "upgrade") {
        return Err(("400 Bad Request", "not a WebSocket upgrade request"));
    }
    if h.header("sec-websocket-version") != Some("13") {
        return Err((
            "426 Upgrade Required",
            "only WebSocket version 13 is spoken",
        ));
    }
    match h.header("sec-websocket-key") {
        None | Some("") => return Err(("400 Bad Request", "Sec-WebSocket-Key is missing")),
        Some(k) if !codec::valid_key(k.trim()) => {
            return Err((
                "400 Bad Request",
                "Sec-WebSocket-Key is not 16 bytes in base64",
            ));
        }
        Some(_) => {}
    }
    Ok(())
}

/// Writes at most this much per wake-up before looking at the socket again.
const WRITE_BATCH: usize = 64 * 1024;

async fn connection(
    shared: &Shared,
    id: u64,
    wire: &mut Wire,
    rx: &mut broadcast::Receiver<Item>,
    // Gateway: the client's streams (`None`: a broadcast client, which gets everything).
    mut subs: Option<crate::ws_gateway::Subscriptions>,
    mut shutdown: watch::Receiver<bool>,
) {
    let stats = &shared.stats;
    let mut message = Message::default();
    // The kind of the message being received (its first frame says), and whether one is
    // begun and awaits continuation frames.
    let mut text = false;
    let mut fragmented = false;
    // Set when the frame parse fails on a frame over the size limit (closed with 1009, not
    // 1002: RFC 6455 §7.4.1).
    let too_big = std::sync::atomic::AtomicBool::new(false);
    let parse = |b: &mut bytes::BytesMut| {
        codec::parse(b, true, shared.max_frame)
            .inspect_err(|e| too_big.store(matches!(e, codec::FrameError::TooBig(_)), Relaxed))
    };
    let close_code = loop {
        tokio::select! {
            biased;
            _ = shutdown.changed() => break Some(codec::CLOSE_GOING_AWAY),
            item = rx.recv() => {
                shared.skip_if_behind(rx);
                let (mut frames, mut skipped) = (0, 0);
                let mut next = Some(item);
                while let Some(r) = next.take() {
                    match r {
                        Ok(it) if it.from != id => {
                            if subs.as_ref().is_some_and(|s| !s.wants(it.stream.as_deref())) {
                                skipped += 1;
                            } else {
                                wire.wbuf.extend_from_slice(&it.frame);
                                frames += 1;
                            }
                        }
                        Ok(_) => {}
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            stats.lagged.fetch_add(n, Relaxed);
                        }
                        Err(broadcast::error::RecvError::Closed) => return,
                    }
                    if wire.wbuf.len() < WRITE_BATCH {
                        next = match rx.try_recv() {
                            Ok(it) => Some(Ok(it)),
                            Err(broadcast::error::TryRecvError::Lagged(n)) => {
                                Some(Err(broadcast::error::RecvError::Lagged(n)))
                            }
                            Err(_) => None,
                        };
                    }
                }
                if skipped > 0 {
                    stats.unsubscribed.fetch_add(skipped, Relaxed);
                }
                if frames == 0 {
                    continue;
                }
                if flush_or_skip(shared, wire, rx).await.is_err() {
                    return;
                }
                wire.shrink();
                stats.frames_out.fetch_add(frames, Relaxed);
            }
            f = poll_fn(|cx| wire.poll_next(cx, false, parse)) => {
                let f = match f {
                    Ok(f) => f,
                    Err(e) if e.kind() == io::ErrorKind::InvalidData => break Some(match too_big.load(Relaxed) {
                        true => codec::CLOSE_TOO_BIG,
                        false => codec::CLOSE_PROTOCOL,
                    }),
                    Err(_) => return,
                };
                match f.opcode {
                    OP_PING => {
                        codec::put_frame(&mut wire.wbuf, OP_PONG, &f.payload, None);
                        if wire.flush().await.is_err() {
                            return;
                        }
                    }
                    OP_PONG => {}
                    OP_CLOSE => {
                        if let Some(code) = codec::bad_close(&f.payload) {
                            break Some(code);
                        }
                        codec::put_frame(&mut wire.wbuf, OP_CLOSE, &f.payload, None);
                        let _ = wire.flush().await;
                        return;
                    }
                    OP_TEXT | OP_BINARY | codec::OP_CONT => {
                        // A continuation needs a message begun; a new message, none [RFC 6455 5.4].
                        if (f.opcode == codec::OP_CONT) != fragmented {
                            break Some(codec::CLOSE_PROTOCOL);
                        }
                        // The limit holds for a whole message, not only for each of its frames.
                        if (message.pending_len() + f.payload.len()) as u64 > shared.max_frame {
                            break Some(codec::CLOSE_TOO_BIG);
                        }
                        fragmented = !f.fin;
                        if f.opcode != codec::OP_CONT {
                            text = f.opcode == OP_TEXT;
                        }
                        if let Some(m) = message.feed(f) {
                            if text && std::str::from_utf8(&m).is_err() {
                                break Some(codec::CLOSE_INVALID_TEXT);
                            }
                            if let Some(s) = subs.as_mut() {
                                // A gateway answers every client message (a request).
                                crate::ws_gateway::request(&m, s, &mut wire.wbuf, stats);
                                if wire.flush().await.is_err() {
                                    return;
                                }
                            } else if text {
                                stats.requests.fetch_add(1, Relaxed);
                            } else {
                                shared.broadcast(id, &m);
                            }
                        }
                    }
                    _ => break Some(codec::CLOSE_PROTOCOL),
                }
            }
        }
    };
    if let Some(code) = close_code {
        codec::put_close(&mut wire.wbuf, code, None);
        let _ = tokio::time::timeout(Duration::from_secs(2), wire.flush()).await;
    }
}

/// How often a client whose socket does not take its frames looks at the queue's budget.
const SKIP_CHECK: Duration = Duration::from_millis(100);

/// Writes out the client's frames; while its socket does not take them, looks every
/// [`SKIP_CHECK`] whether the client must skip ahead ([`Shared::skip_if_behind`]): one that
/// stopped reading waits here, not where it takes the next frame.
async fn flush_or_skip(
    shared: &Shared,
    wire: &mut Wire,
    rx: &mut broadcast::Receiver<Item>,
) -> io::Result<()> {
    let flush = wire.flush();
    tokio::pin!(flush);
    loop {
        tokio::select! {
            r = &mut flush => return r,
            _ = tokio::time::sleep(SKIP_CHECK) => shared.skip_if_behind(rx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn start() -> (
        SocketAddr,
        Arc<BroadcastStats>,
        Relay,
        tokio::sync::oneshot::Sender<()>,
    ) {
        let b = Broadcast::bind("127.0.0.1:0", BroadcastConfig::default())
            .await
            .unwrap();
        let (addr, stats, relay) = (b.local_addr(), b.stats(), b.relay());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(b.run(async move {
            let _ = rx.await;
        }));
        (addr, stats, relay, tx)
    }

    const UPGRADE: &str = "GET /x HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

    /// Connects and upgrades; returns the socket with the 101 read.
    async fn client(addr: SocketAddr) -> TcpStream {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(UPGRADE.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut b = [0u8; 1];
            s.read_exact(&mut b).await.unwrap();
            head.push(b[0]);
        }
        let head = String::from_utf8(head).unwrap();
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        assert!(head.contains("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="), "{head}");
        s
    }

    async fn answer(req: &str, addr: SocketAddr) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out)).await;
        out
    }

    #[tokio::test]
    async fn bad_upgrades_are_refused() {
        let (addr, stats, _relay, _stop) = start().await;
        assert!(
            answer("POST / HTTP/1.1\r\n\r\n", addr)
                .await
                .starts_with("HTTP/1.1 400")
        );
        let v12 = UPGRADE.replace("Version: 13", "Version: 12");
        assert!(answer(&v12, addr).await.starts_with("HTTP/1.1 426"));
        let nokey = UPGRADE.replace("Sec-WebSocket-Key", "X-Key");
        assert!(answer(&nokey, addr).await.starts_with("HTTP/1.1 400"));
        // What RFC 6455 §4.2.1 also requires (found with a raw client): HTTP/1.1 or later, a
        // Host header, a key of 16 bytes.
        for bad in [
            UPGRADE.replace("HTTP/1.1", "HTTP/1.0"),
            UPGRADE.replace("Host: h\r\n", ""),
            UPGRADE.replace("dGhlIHNhbXBsZSBub25jZQ==", "abc"),
        ] {
            let a = answer(&bad, addr).await;
            assert!(a.starts_with("HTTP/1.1 400"), "{bad}: {a}");
        }
        assert_eq!(stats.refused.load(Relaxed), 6);
    }

    /// A message over the limit closes the connection with 1009, message too big (RFC 6455
    /// §7.4.1), whether it comes as one frame or as fragments that are each small enough.
    #[tokio::test]
    async fn a_message_over_the_limit_is_closed_with_1009() {
        let config = BroadcastConfig {
            max_frame: 1000,
            ..BroadcastConfig::default()
        };
        let b = Broadcast::bind("127.0.0.1:0", config).await.unwrap();
        let addr = b.local_addr();
        let (_stop, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(b.run(async move {
            let _ = rx.await;
        }));
        let mut whole = BytesMut::new();
        codec::put_frame(&mut whole, OP_BINARY, &[7; 1001], Some([1, 2, 3, 4]));
        let mut parts = BytesMut::new();
        for (i, op) in [OP_BINARY, codec::OP_CONT, codec::OP_CONT]
            .into_iter()
            .enumerate()
        {
            let start = parts.len();
            codec::put_frame(&mut parts, op, &[7; 400], Some([1, 2, 3, 4]));
            if i < 2 {
                parts[start] &= 0x7f; // not the final fragment
            }
        }
        for frames in [whole, parts] {
            let mut s = client(addr).await;
            s.write_all(&frames).await.unwrap();
            let mut b = [0u8; 4];
            s.read_exact(&mut b).await.unwrap();
            assert_eq!(b, [0x88, 0x02, 0x03, 0xF1], "close 1009");
        }
    }

    #[tokio::test]
    async fn relays_to_others_and_survives_garbage() {
        let (addr, stats, relay, _stop) = start().await;
        // Garbage after the upgrade, of several kinds: each connection is closed with 1002 (or
        // dropped), the server goes on.
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        for round in 0..40 {
            let mut s = client(addr).await;
            let mut junk = vec![0u8; 1 + round * 7];
            for b in junk.iter_mut() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *b = seed as u8;
            }
            let _ = s.write_all(&junk).await;
            drop(s);
        }
        let mut unmasked = client(addr).await;
        unmasked.write_all(&[0x82, 0x01, 0x00]).await.unwrap();
        let mut b = [0u8; 4];
        unmasked.read_exact(&mut b).await.unwrap();
        assert_eq!(
            b,
            [0x88, 0x02, 0x03, 0xEA],
            "close 1002 for an unmasked client frame"
        );
        // Two good clients: one sends (masked), the other receives; the relay reaches both.
        let mut a = client(addr).await;
        let mut c = client(addr).await;
        let mut f = BytesMut::new();
        codec::put_frame(&mut f, OP_TEXT, b"subscribe please", Some([1, 2, 3, 4]));
        codec::put_frame(&mut f, OP_BINARY, b"hello", Some([5, 6, 7, 8]));
        a.write_all(&f).await.unwrap();
        let mut got = [0u8; 7];
        c.read_exact(&mut got).await.unwrap();
        assert_eq!(
            &got, b"\x82\x05hello",
            "the binary message, not the request"
        );
        relay.send(b"from the broker");
        for s in [&mut a, &mut c] {
            let mut got = [0u8; 17];
            s.read_exact(&mut got).await.unwrap();
            assert_eq!(&got[2..], b"from the broker");
        }
        assert_eq!(stats.requests.load(Relaxed), 1);
        assert_eq!(stats.messages_in.load(Relaxed), 2);
    }
}
