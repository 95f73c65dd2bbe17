//! An AMQP 0-9-1 sink for benchmarking: `msgbench serve amqp-sink --listen ADDR`. It speaks
//! enough of the protocol for any AMQP 0-9-1 client to connect, declare its topology, publish
//! (with or without publisher confirms) and consume, and then swallows every message, counting
//! messages and bytes.
//!
//! It exists to measure what is *not* a broker: a proxy or load balancer in front of it, or the
//! client side (msgbench's own AMQP driver, a client library) at rates no real broker reaches.
//! Nothing is stored or routed, so the numbers are the client's and the network's.
//!
//! Frames are parsed and generated with `amq-protocol` (lapin's codec): every method a client
//! sends is decoded and checked, content bodies are counted in place, never copied.
//!
//! # Supported
//!
//! - The handshake: protocol header, connection.start (mechanisms `PLAIN` and `AMQPLAIN`; any
//!   user name and password is accepted), tune (channel-max, frame-max and heartbeat from
//!   [`SinkConfig`]; the client's tune-ok values are honoured when they are lower, and a
//!   heartbeat of 0 from the client disables heartbeats), open.
//! - Channels: open, close (either side), flow.
//! - exchange.declare / delete / bind / unbind, queue.declare (a server-named queue gets an
//!   `amq.gen-…` name; message and consumer counts are always 0) / bind / unbind / purge /
//!   delete, basic.qos, access.request: all answered as successful (and not answered with
//!   `nowait`). Passive declares succeed too: to the sink every queue and exchange exists.
//! - basic.publish with its content header and any number of body frames: counted in
//!   [`SinkStats::messages`] and [`SinkStats::bytes`] once the whole body has arrived.
//!   `mandatory` and `immediate` are ignored: every message counts as routed, so nothing is
//!   ever returned with basic.return.
//! - Publisher confirms (confirm.select): every publish is acknowledged, delivery tags counting
//!   from 1 per channel. Acks are sent once per read from the socket, so a client pipelining
//!   publishes gets one ack with `multiple = true` per batch rather than one per message.
//! - Transactions: tx.select / commit / rollback are acknowledged (a commit commits nothing
//!   more than the sink already did). Mixing confirms and transactions on one channel is
//!   refused with 406, as RabbitMQ does.
//! - basic.consume / cancel (acknowledged; nothing is ever delivered), basic.get (always
//!   get-empty), basic.recover. basic.ack / nack / reject can only name unknown delivery tags
//!   and close the channel with 406.
//! - Heartbeats: sent when the sink has written nothing for the negotiated interval; a
//!   connection silent for two intervals is closed.
//! - TLS, when [`SinkConfig::tls`] is set (see [`crate::tls::tls_acceptor`]).
//!
//! # Errors and robustness
//!
//! Protocol violations close the connection with connection.close and the spec's reply code:
//! 501 frame-error for malformed frames (unknown type, missing frame-end, larger than the
//! negotiated frame-max — enforced from the frame header, before the frame is buffered),
//! 502 syntax-error for method arguments that do not decode, 503 command-invalid for methods
//! out of order, 504 channel-error for channel misuse, 505 unexpected-frame for content
//! frames out of place, 540 not-implemented for methods the sink does not handle. A read
//! buffer never holds more than one frame-max plus one read, so a client cannot make a
//! connection grow without bound. Field tables nested more than 32 deep are refused (502)
//! before decoding: the codec's parser is recursive, and a 128 KiB frame of nested tables
//! would otherwise overflow the stack.
//!
//! # Not supported, and why
//!
//! - No delivery, no queues, no routing: the sink is a message sink, not a broker.
//! - No authentication (any credentials are accepted) and no virtual host checks. Do not
//!   expose the listener to an untrusted network.
//! - No connection.blocked / unblocked (the sink never runs out of resources), no
//!   connection.secure challenges.

mod conn;
mod frame;
#[doc(hidden)]
pub mod fuzzing;
mod proto;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;
use tokio::net::TcpListener;

/// Sink limits, offered to clients in connection.tune.
#[derive(Clone)]
pub struct SinkConfig {
    /// Largest frame (header and frame-end included) a client may send, and the frame-max
    /// offered in tune. Clamped to 4096 ..= 128 MiB. Default 131072.
    pub frame_max: u32,
    /// Heartbeat interval offered in tune, in seconds; 0 offers none. Default 60.
    pub heartbeat_s: u16,
    /// Highest channel number offered in tune; 0 means 65535. Default 2047.
    pub channel_max: u16,
    /// Serve TLS with this acceptor (from [`crate::tls::tls_acceptor`]) instead of plain TCP.
    /// Default none.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}

impl Default for SinkConfig {
    fn default() -> Self {
        SinkConfig {
            frame_max: 131_072,
            heartbeat_s: 60,
            channel_max: 2047,
            tls: None,
        }
    }
}

impl std::fmt::Debug for SinkConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SinkConfig")
            .field("frame_max", &self.frame_max)
            .field("heartbeat_s", &self.heartbeat_s)
            .field("channel_max", &self.channel_max)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// Live sink counters, updated with relaxed atomics once per read from a socket; read them
/// with [`SinkStats::snapshot`].
#[derive(Debug, Default)]
pub struct SinkStats {
    /// Connections open now (accepted and not yet closed).
    pub connections_current: AtomicU64,
    /// Connections accepted since the sink started.
    pub connections_total: AtomicU64,
    /// Messages received in full (basic.publish, content header and every body frame).
    pub messages: AtomicU64,
    /// Body bytes of those messages.
    pub bytes: AtomicU64,
    /// Messages acknowledged to publishers in confirm mode.
    pub confirms: AtomicU64,
}

/// The counters of [`SinkStats`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Connections open now.
    pub connections_current: u64,
    /// Connections accepted since start.
    pub connections_total: u64,
    /// Messages received.
    pub messages: u64,
    /// Body bytes received.
    pub bytes: u64,
    /// Messages confirmed.
    pub confirms: u64,
}

impl SinkStats {
    /// Reads every counter (each individually; the set is not one atomic snapshot).
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            connections_current: self.connections_current.load(Relaxed),
            connections_total: self.connections_total.load(Relaxed),
            messages: self.messages.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            confirms: self.confirms.load(Relaxed),
        }
    }
}

/// State every connection of one sink shares: the limits and the frames every connection
/// sends identically, generated once.
pub(crate) struct Shared {
    pub frame_max: u32,
    pub channel_max: u16,
    pub stats: Arc<SinkStats>,
    /// connection.start, on channel 0.
    pub start: Vec<u8>,
    /// connection.tune.
    pub tune: Vec<u8>,
    /// A heartbeat frame.
    pub heartbeat_frame: Vec<u8>,
    /// Seed and counter for server-generated names (`amq.gen-…`, `amq.ctag-…`).
    pub name_seed: u64,
    pub names: AtomicU64,
}

/// An AMQP 0-9-1 sink bound to a listening socket; [`Sink::run`] serves it.
pub struct Sink {
    listener: TcpListener,
    addr: SocketAddr,
    shared: Arc<Shared>,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sink")
            .field("addr", &self.addr)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

/// Time a TLS client has to complete its handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

impl Sink {
    /// Binds the listener on `addr` (e.g. `"127.0.0.1:0"` for a free port, `"0.0.0.0:5672"`).
    /// Errors keep their kind and name the address.
    pub async fn bind(addr: &str, config: SinkConfig) -> io::Result<Sink> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
        let local = listener
            .local_addr()
            .map_err(|e| io::Error::new(e.kind(), format!("listener on {addr}: {e}")))?;
        let frame_max = config.frame_max.clamp(4096, 128 << 20);
        let channel_max = if config.channel_max == 0 {
            u16::MAX
        } else {
            config.channel_max
        };
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let shared = Arc::new(Shared {
            start: frame::start_frame(),
            tune: frame::tune_frame(channel_max, frame_max, config.heartbeat_s),
            heartbeat_frame: frame::heartbeat(),
            frame_max,
            channel_max,
            stats: Arc::new(SinkStats::default()),
            name_seed: seed,
            names: AtomicU64::new(0),
        });
        Ok(Sink {
            listener,
            addr: local,
            shared,
            tls: config.tls,
        })
    }

    /// The address the listener is bound to (with the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The sink's live counters; the `Arc` stays valid after the sink stops.
    pub fn stats(&self) -> Arc<SinkStats> {
        self.shared.stats.clone()
    }

    /// Accepts and serves connections on the caller's runtime, one task each, until `stop`
    /// resolves; then closes the listener, sends connection.close (320 connection-forced) on
    /// every open connection and returns once they are closed (connections that do not finish
    /// within 5 s are aborted). Accept errors (e.g. out of file descriptors) do not end the
    /// loop: they are reported on stderr at most once a second and retried after 10 ms.
    pub async fn run(self, stop: impl Future<Output = ()> + Send) -> io::Result<()> {
        let Sink {
            listener,
            shared,
            tls,
            ..
        } = self;
        crate::listen::accept_loop(listener, "msgbench amqp sink", stop, |sock, shutdown| {
            shared.stats.connections_total.fetch_add(1, Relaxed);
            shared.stats.connections_current.fetch_add(1, Relaxed);
            let open = conn::OpenConn(shared.stats.clone());
            let shared = shared.clone();
            let tls = tls.clone();
            async move {
                match tls {
                    None => conn::serve(sock, shared, shutdown, open, false).await,
                    Some(acceptor) => {
                        let hs = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(sock));
                        if let Ok(Ok(stream)) = hs.await {
                            conn::serve(stream, shared, shutdown, open, true).await;
                        }
                    }
                }
            }
        })
        .await;
        Ok(())
    }
}
