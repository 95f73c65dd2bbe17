//! An MQTT 3.1.1 and 5 broker for benchmarking: the server `msgbench run` starts in-process when
//! no target is given, and that `msgbench serve mqtt --listen ADDR` runs standalone.
//!
//! It is a real broker, built to be measured against: every message is parsed, routed through
//! the subscription table and re-encoded for each subscriber's protocol version, and
//! acknowledged as the protocol says — nothing is short-circuited for msgbench's own client.
//!
//! # Supported
//!
//! - MQTT 3.1.1 (protocol level 4) and 5 (level 5) clients, interoperating on the same topics.
//!   Other levels are refused with CONNACK return code 1.
//! - PUBLISH at QoS 0, 1 and 2 in both directions; delivery QoS is the lower of the publish QoS
//!   and the subscription's. Incoming QoS 2 is routed once: a re-sent PUBLISH with a packet id
//!   still waiting for its PUBREL is acknowledged but not routed again.
//! - Topic filters with `+` and `#`; overlapping subscriptions of one client get one copy at the
//!   highest granted QoS.
//! - Shared subscriptions `$share/{group}/{filter}` (MQTT 5, and — like Mosquitto — 3.1.1): each
//!   message goes to one member of each matching group, round robin, preferring connected
//!   members.
//! - Retained messages (an empty retained payload deletes), sent with the retain flag to new
//!   non-shared subscriptions; live deliveries carry retain = 0 (MQTT 5: unless the
//!   subscription asks for retain as published).
//! - Persistent sessions (3.1.1 clean session = 0; MQTT 5 a session expiry interval above 0,
//!   whatever Clean Start says, which only discards an existing session): subscriptions survive
//!   disconnects and are restored with CONNACK session-present = 1; up to
//!   [`BrokerConfig::queue_depth`] QoS ≥ 1 messages are kept while the client is away and sent on
//!   reconnect (QoS 0 is dropped while offline, as the protocol allows). Sessions live in memory,
//!   a 3.1.1 one until the broker stops, an MQTT 5 one until its expiry interval has passed
//!   offline (looked at when clients connect, at most once a second); an MQTT 5 DISCONNECT
//!   may set a new interval (0: the session ends with the connection), unless the CONNECT's
//!   was 0, which it cannot lengthen (a protocol error: the will goes out).
//! - Will messages, published when a connection ends without DISCONNECT (broken, timed out,
//!   closed for a protocol error, taken over), at their QoS and retained when asked; MQTT 5:
//!   also after DISCONNECT with reason 0x04, with their properties, and the will delay interval
//!   honoured up to the session's expiry (not published if a connection resumes the session
//!   within it; a session that ends with its connection sends its will at once).
//! - MQTT 5 UNSUBACK reason codes per filter: success, or 0x11 where no subscription existed.
//! - MQTT 5 PUBLISH properties forwarded unaltered to MQTT 5 subscribers, retained messages
//!   included: payload format indicator, content type, response topic, correlation data, user
//!   properties (in order); the message expiry interval counted down, and a message that
//!   expired before it was sent (queued, retained) is dropped. 3.1.1 subscribers get the message
//!   without them.
//! - MQTT 5 subscription options: no local, retain as published, retain handling 0/1/2.
//! - MQTT 5 maximum packet size of a client: a message that would exceed it is not sent to that
//!   client (dropped for it, as the protocol says).
//! - Retransmission: QoS ≥ 1 messages a persistent session's client had not acknowledged when
//!   its connection ended are sent again, first, when the session resumes — each PUBLISH with
//!   DUP set and its packet id, and the PUBREL of each QoS 2 message past PUBREC
//!   [MQTT-4.4.0-1]. (A clean session keeps only packet ids, so its hot path takes no lock.)
//! - MQTT 5 receive maximum of a client: at most that many QoS ≥ 1 messages unacknowledged
//!   towards it; further ones wait in order, up to [`BrokerConfig::queue_depth`] of them
//!   (beyond, they are dropped, as an offline session's queue drops them). QoS 0 is not held.
//! - Session takeover: a second connection with a client id in use closes the first.
//! - Keep-alive: a client silent for 1.5 × its keep-alive is disconnected.
//! - TLS (`mqtts://`) with [`Broker::with_tls`]; plain TCP otherwise.
//!
//! # Not supported, and why
//!
//! A benchmark broker needs to move messages correctly and fast; these would add state and
//! latency for features benchmarks do not exercise:
//!
//! - No authentication or authorisation: any user name and password is accepted. Do not expose
//!   the listener to an untrusted network.
//! - No MQTT 5 topic aliases and no subscription identifiers: CONNACK advertises neither (no
//!   topic alias maximum; subscription identifiers available = 0), so a client sending one
//!   commits a protocol error and is disconnected.
//! - No persistence to disk: sessions, queued and retained messages live in memory.
//!
//! # Flow control
//!
//! Each connection has a reader (parses and routes) and a writer (drains a bounded queue of
//! [`BrokerConfig::queue_depth`] packets, encoding them in batches). When a subscriber's queue is
//! full, the publishing connection's reader waits, which slows publishers down over TCP rather
//! than dropping messages or growing memory; a closed connection's queue rejects at once, so a
//! vanished subscriber never holds anyone up.

mod conn;
#[doc(hidden)]
pub mod fuzzing;
mod inflight;
mod router;
mod session;
#[cfg(test)]
mod tests;
mod wire;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use tokio::net::TcpListener;

/// Broker limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerConfig {
    /// Largest packet (remaining length, in bytes) accepted from a client; a larger one closes
    /// the connection. Default 256 MiB, the protocol's own limit.
    pub max_packet: usize,
    /// Packets each connection's outbound queue holds before publishers to it wait; also the
    /// number of QoS ≥ 1 messages kept for a persistent session while it is offline.
    /// Default 4096.
    pub queue_depth: usize,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            max_packet: 256 * 1024 * 1024,
            queue_depth: 4096,
        }
    }
}

/// Live broker counters, updated with relaxed atomics; read them with [`BrokerStats::snapshot`].
#[derive(Debug, Default)]
pub struct BrokerStats {
    /// Connections open now (accepted and not yet closed).
    pub connections_current: AtomicU64,
    /// Connections accepted since the broker started.
    pub connections_total: AtomicU64,
    /// PUBLISH packets received from clients.
    pub messages_in: AtomicU64,
    /// PUBLISH packets written to clients.
    pub messages_out: AtomicU64,
}

/// The counters of [`BrokerStats`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Connections open now.
    pub connections_current: u64,
    /// Connections accepted since start.
    pub connections_total: u64,
    /// PUBLISH packets received.
    pub messages_in: u64,
    /// PUBLISH packets sent.
    pub messages_out: u64,
}

impl BrokerStats {
    /// Reads every counter (each individually; the set is not one atomic snapshot).
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            connections_current: self.connections_current.load(Relaxed),
            connections_total: self.connections_total.load(Relaxed),
            messages_in: self.messages_in.load(Relaxed),
            messages_out: self.messages_out.load(Relaxed),
        }
    }
}

/// State every connection of one broker shares.
pub(crate) struct Shared {
    pub config: BrokerConfig,
    pub stats: Arc<BrokerStats>,
    pub router: router::Router,
    pub sessions: session::Sessions,
    pub next_conn: AtomicU64,
}

/// An MQTT broker bound to a listening socket; [`Broker::run`] serves it.
pub struct Broker {
    listener: TcpListener,
    addr: SocketAddr,
    shared: Arc<Shared>,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Broker {
    /// Binds the listener on `addr` (e.g. `"127.0.0.1:0"` for a free port, `"0.0.0.0:1883"`).
    /// Errors keep their kind and name the address.
    pub async fn bind(addr: &str, config: BrokerConfig) -> io::Result<Broker> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
        let local = listener
            .local_addr()
            .map_err(|e| io::Error::new(e.kind(), format!("listener on {addr}: {e}")))?;
        let config = BrokerConfig {
            max_packet: config
                .max_packet
                .clamp(1, msgbench_driver_mqtt::codec::MAX_REMAINING),
            queue_depth: config.queue_depth.max(1),
        };
        let shared = Arc::new(Shared {
            router: router::Router::default(),
            sessions: session::Sessions::new(config.queue_depth),
            config,
            stats: Arc::new(BrokerStats::default()),
            next_conn: AtomicU64::new(1),
        });
        Ok(Broker {
            listener,
            addr: local,
            shared,
            tls: None,
        })
    }

    /// Serves MQTT over TLS (`mqtts://`) with `acceptor`; a client gets
    /// the connect timeout (`conn::CONNECT_TIMEOUT`) for its TLS handshake, as for its CONNECT.
    pub fn with_tls(mut self, acceptor: tokio_rustls::TlsAcceptor) -> Broker {
        self.tls = Some(acceptor);
        self
    }

    /// The address the listener is bound to (with the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The broker's live counters; the `Arc` stays valid after the broker stops.
    pub fn stats(&self) -> Arc<BrokerStats> {
        self.shared.stats.clone()
    }

    /// Accepts and serves connections on the caller's runtime until `stop` resolves, then closes
    /// the listener and every connection and returns once they are closed (connections that do
    /// not finish within 5 s are aborted). Accept errors (e.g. out of file descriptors) do not
    /// end the loop: they are reported on stderr at most once a second and retried after 10 ms.
    pub async fn run(self, stop: impl Future<Output = ()> + Send) -> io::Result<()> {
        let Broker {
            listener,
            shared,
            tls,
            ..
        } = self;
        crate::listen::accept_loop(listener, "msgbench mqtt broker", stop, |sock, shutdown| {
            shared.stats.connections_total.fetch_add(1, Relaxed);
            shared.stats.connections_current.fetch_add(1, Relaxed);
            let open = conn::OpenConn(shared.stats.clone());
            let (shared, tls) = (shared.clone(), tls.clone());
            async move {
                match tls {
                    // Plain TCP keeps its lock-free owned halves.
                    None => conn::serve(sock.into_split(), shared, shutdown, open).await,
                    Some(acceptor) => {
                        let handshake = acceptor.accept(sock);
                        if let Ok(Ok(s)) =
                            tokio::time::timeout(conn::CONNECT_TIMEOUT, handshake).await
                        {
                            conn::serve(tokio::io::split(s), shared, shutdown, open).await;
                        }
                    }
                }
            }
        })
        .await;
        Ok(())
    }
}
