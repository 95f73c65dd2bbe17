//! `msgbench serve amqp-proxy`: a strict AMQP 0-9-1 proxy that terminates the handshake itself,
//! as amqpprox does, then connects upstream, replays the handshake there and relays bytes.
//!
//! It exists to prove that clients work through such intermediaries and to measure what one
//! costs (connections/s, MB/s) next to a direct connection. Strictness is the point:
//!
//! - The client's handshake is read **one frame at a time**, and each answer is sent only after
//!   the frame it answers: `connection.start` after the protocol header, `tune` after
//!   `start-ok`, `open-ok` only once the upstream connection is open.
//! - Its `connection.start` names it and lists a RabbitMQ broker's capabilities
//!   (`CAPABILITIES`), which clients check before using an extension (publisher confirms).
//! - Bytes a client sends before it has `connection.open-ok` (a pipelined `channel.open`) are
//!   **held, never forwarded** — as a proxy that replays the handshake upstream does — and
//!   counted ([`ProxyStats::held_bytes`]). A client that pipelines past `open` stalls here.
//! - Upstream gets the client's own `start-ok` (properties, mechanism, credentials), a
//!   `tune-ok` within both sides' limits with the client's heartbeat, and the client's vhost.
//!   A refusal upstream (`connection.close`) is passed to the client as it came.
//! - After that the proxy copies bytes both ways without parsing them.
//!
//! Frames are parsed here with a few lines of byte handling, not with msgbench's client codec,
//! so a codec mistake on the client side is not mirrored by the proxy.

use msgbench_core::scenario::TlsPlan;
use msgbench_net::{Target, Tls};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const PROTOCOL_HEADER: &[u8; 8] = b"AMQP\x00\x00\x09\x01";
const FRAME_METHOD: u8 = 1;
const FRAME_END: u8 = 0xCE;
const FRAME_MAX: u32 = 131_072;
const CHANNEL_MAX: u16 = 2047;
/// The heartbeat the proxy proposes in its `connection.tune`, seconds: RabbitMQ's default, so
/// a client negotiates through the proxy what it would with the broker (0, proposed before,
/// left heartbeats off unless the client asked for them). The client's choice goes upstream.
const HEARTBEAT_S: u16 = 60;
/// How long upstream may take to connect and complete its handshake.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(10);

/// What the proxy's `connection.start` says of the broker behind it, before it has reached it:
/// a RabbitMQ-compatible one's capabilities. Clients check them before using an extension
/// (pika refuses `confirm_delivery` on a broker without `publisher_confirms`); an empty table,
/// sent before, made such clients give up features the upstream has.
const CAPABILITIES: [&str; 9] = [
    "publisher_confirms",
    "exchange_exchange_bindings",
    "basic.nack",
    "consumer_cancel_notify",
    "connection.blocked",
    "consumer_priorities",
    "authentication_failure_close",
    "per_consumer_qos",
    "direct_reply_to",
];

/// The server-properties field table of the proxy's `connection.start`: product, version,
/// platform and [`CAPABILITIES`].
fn server_properties() -> Vec<u8> {
    fn name(t: &mut Vec<u8>, n: &str) {
        t.push(n.len() as u8);
        t.extend_from_slice(n.as_bytes());
    }
    fn long_string(t: &mut Vec<u8>, n: &str, v: &str) {
        name(t, n);
        t.push(b'S');
        t.extend_from_slice(&(v.len() as u32).to_be_bytes());
        t.extend_from_slice(v.as_bytes());
    }
    let mut caps = Vec::new();
    for c in CAPABILITIES {
        name(&mut caps, c);
        caps.extend_from_slice(&[b't', 1]);
    }
    let mut t = Vec::new();
    long_string(&mut t, "product", "msgbench amqp-proxy");
    long_string(&mut t, "version", env!("CARGO_PKG_VERSION"));
    long_string(&mut t, "platform", "Rust");
    name(&mut t, "capabilities");
    t.push(b'F');
    t.extend_from_slice(&(caps.len() as u32).to_be_bytes());
    t.extend_from_slice(&caps);
    let mut table = (t.len() as u32).to_be_bytes().to_vec();
    table.extend_from_slice(&t);
    table
}

/// Where the proxy forwards to: `amqp://host:port` or `amqps://host:port` (TLS upstream,
/// verified with `tls`).
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Upstream host and port.
    pub upstream: Target,
    /// TLS towards upstream (`amqps://`), if any.
    pub upstream_tls: Option<Tls>,
}

impl ProxyConfig {
    /// Parses an `amqp://` or `amqps://` upstream URL (path and credentials are ignored: the
    /// client's own are replayed); `tls` verifies an `amqps://` upstream.
    pub fn parse(url: &str, tls: &TlsPlan) -> Result<ProxyConfig, String> {
        let (secure, rest) = if let Some(r) = url.strip_prefix("amqps://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("amqp://") {
            (false, r)
        } else {
            return Err(format!(
                "the upstream `{url}` is not an amqp:// or amqps:// URL"
            ));
        };
        let authority = rest.split(['/', '?']).next().unwrap_or("");
        let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let upstream = Target::parse(hostport, if secure { 5671 } else { 5672 })?;
        let upstream_tls = if secure { Some(Tls::new(tls)?) } else { None };
        Ok(ProxyConfig {
            upstream,
            upstream_tls,
        })
    }
}

/// Live counters.
#[derive(Debug, Default)]
pub struct ProxyStats {
    /// Client connections accepted.
    pub accepted: AtomicU64,
    /// Connections whose handshake completed on both sides and now relay.
    pub relayed: AtomicU64,
    /// Connections that ended before relaying (client gone mid-handshake, upstream refused or
    /// unreachable); a connection closed before sending anything is not counted.
    pub failed: AtomicU64,
    /// Bytes clients sent before their `connection.open-ok`: held, never forwarded.
    pub held_bytes: AtomicU64,
    /// Bytes relayed client → upstream after the handshake.
    pub bytes_up: AtomicU64,
    /// Bytes relayed upstream → client after the handshake.
    pub bytes_down: AtomicU64,
}

/// A bound proxy; [`Proxy::run`] serves until stopped.
pub struct Proxy {
    listener: TcpListener,
    config: Arc<ProxyConfig>,
    stats: Arc<ProxyStats>,
}

impl Proxy {
    /// Binds `addr` (port 0 picks a free port).
    pub async fn bind(addr: &str, config: ProxyConfig) -> io::Result<Proxy> {
        Ok(Proxy {
            listener: TcpListener::bind(addr).await?,
            config: Arc::new(config),
            stats: Arc::default(),
        })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener")
    }

    /// Its counters, live.
    pub fn stats(&self) -> Arc<ProxyStats> {
        self.stats.clone()
    }

    /// Serves until `stop` resolves.
    pub async fn run(self, stop: impl Future<Output = ()> + Send) {
        let Proxy {
            listener,
            config,
            stats,
        } = self;
        crate::listen::accept_loop(listener, "msgbench amqp-proxy", stop, |sock, _| {
            let (config, stats) = (config.clone(), stats.clone());
            async move {
                stats.accepted.fetch_add(1, Relaxed);
                if serve(sock, &config, &stats).await.is_err() {
                    stats.failed.fetch_add(1, Relaxed);
                }
            }
        })
        .await;
    }
}

/// Reads whole frames, one at a time, from a socket; what arrives past a frame stays buffered.
struct Frames {
    buf: Vec<u8>,
}

/// One frame: type, channel, payload.
struct Frame {
    kind: u8,
    channel: u16,
    payload: Vec<u8>,
}

impl Frame {
    /// Class and method ids of a method frame.
    fn method(&self) -> Option<(u16, u16)> {
        if self.kind != FRAME_METHOD || self.payload.len() < 4 {
            return None;
        }
        let p = &self.payload;
        Some((
            u16::from_be_bytes([p[0], p[1]]),
            u16::from_be_bytes([p[2], p[3]]),
        ))
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.payload.len() + 8);
        out.push(self.kind);
        out.extend_from_slice(&self.channel.to_be_bytes());
        out.extend_from_slice(&(self.payload.len() as u32).to_be_bytes());
        out.extend_from_slice(&self.payload);
        out.push(FRAME_END);
        out
    }
}

fn bad(m: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, m.into())
}

impl Frames {
    async fn fill(&mut self, s: &mut (impl AsyncRead + Unpin), n: usize) -> io::Result<()> {
        while self.buf.len() < n {
            let mut chunk = [0u8; 4096];
            let got = s.read(&mut chunk).await?;
            if got == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            self.buf.extend_from_slice(&chunk[..got]);
        }
        Ok(())
    }

    async fn header(&mut self, s: &mut (impl AsyncRead + Unpin)) -> io::Result<[u8; 8]> {
        self.fill(s, 8).await?;
        let h: [u8; 8] = self.buf[..8].try_into().expect("8 bytes");
        self.buf.drain(..8);
        Ok(h)
    }

    async fn frame(&mut self, s: &mut (impl AsyncRead + Unpin)) -> io::Result<Frame> {
        self.fill(s, 7).await?;
        let size = u32::from_be_bytes(self.buf[3..7].try_into().expect("4 bytes")) as usize;
        if size > FRAME_MAX as usize {
            return Err(bad(format!("a {size}-byte frame in the handshake")));
        }
        self.fill(s, 7 + size + 1).await?;
        if self.buf[7 + size] != FRAME_END {
            return Err(bad("a frame without its end marker"));
        }
        let f = Frame {
            kind: self.buf[0],
            channel: u16::from_be_bytes([self.buf[1], self.buf[2]]),
            payload: self.buf[7..7 + size].to_vec(),
        };
        self.buf.drain(..7 + size + 1);
        Ok(f)
    }

    /// The next method frame on channel 0 (heartbeats in between are skipped).
    async fn method(&mut self, s: &mut (impl AsyncRead + Unpin)) -> io::Result<Frame> {
        loop {
            let f = self.frame(s).await?;
            if f.kind == 8 {
                continue;
            }
            if f.method().is_none() || f.channel != 0 {
                return Err(bad("expected a connection method on channel 0"));
            }
            return Ok(f);
        }
    }
}

/// connection.close with `code` and `text`, as a frame.
fn connection_close(code: u16, text: &str) -> Vec<u8> {
    let text = &text.as_bytes()[..text.len().min(255)];
    let mut args = code.to_be_bytes().to_vec();
    args.push(text.len() as u8);
    args.extend_from_slice(text);
    args.extend_from_slice(&[0, 0, 0, 0]);
    method(10, 50, &args)
}

/// Builds a method frame on channel 0.
fn method(class: u16, id: u16, args: &[u8]) -> Vec<u8> {
    let mut payload = Vec::with_capacity(4 + args.len());
    payload.extend_from_slice(&class.to_be_bytes());
    payload.extend_from_slice(&id.to_be_bytes());
    payload.extend_from_slice(args);
    Frame {
        kind: FRAME_METHOD,
        channel: 0,
        payload,
    }
    .encode()
}

/// A cursor over method arguments.
struct Args<'a>(&'a [u8]);

impl<'a> Args<'a> {
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(bad("a method's arguments are cut short"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u16(&mut self) -> io::Result<u16> {
        Ok(u16::from_be_bytes(self.take(2)?.try_into().expect("2")))
    }
    fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().expect("4")))
    }
}

fn expect(f: &Frame, want: (u16, u16), name: &str) -> io::Result<()> {
    match f.method() {
        Some(m) if m == want => Ok(()),
        other => Err(bad(format!("expected {name}, got method {other:?}"))),
    }
}

/// One client connection: the handshake with the client, the same upstream, then the relay.
async fn serve(mut client: TcpStream, cfg: &ProxyConfig, stats: &ProxyStats) -> io::Result<()> {
    let mut from_client = Frames { buf: Vec::new() };
    let header = match from_client.header(&mut client).await {
        // A reachability probe (connect, then close): not a failed connection.
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && from_client.buf.is_empty() => {
            return Ok(());
        }
        r => r?,
    };
    if &header != PROTOCOL_HEADER {
        client.write_all(PROTOCOL_HEADER).await?;
        return Err(bad("not AMQP 0-9-1"));
    }
    // connection.start: 0-9, its server properties, PLAIN and AMQPLAIN, en_US.
    let mut start = vec![0, 9];
    start.extend_from_slice(&server_properties());
    for s in [&b"PLAIN AMQPLAIN"[..], b"en_US"] {
        start.extend_from_slice(&(s.len() as u32).to_be_bytes());
        start.extend_from_slice(s);
    }
    client.write_all(&method(10, 10, &start)).await?;
    let start_ok = from_client.method(&mut client).await?;
    expect(&start_ok, (10, 11), "connection.start-ok")?;
    let mut tune = Vec::new();
    tune.extend_from_slice(&CHANNEL_MAX.to_be_bytes());
    tune.extend_from_slice(&FRAME_MAX.to_be_bytes());
    tune.extend_from_slice(&HEARTBEAT_S.to_be_bytes());
    client.write_all(&method(10, 30, &tune)).await?;
    let tune_ok = from_client.method(&mut client).await?;
    expect(&tune_ok, (10, 31), "connection.tune-ok")?;
    let mut a = Args(&tune_ok.payload[4..]);
    let (channel_max, frame_max, heartbeat) = (a.u16()?, a.u32()?, a.u16()?);
    let open = from_client.method(&mut client).await?;
    expect(&open, (10, 40), "connection.open")?;

    // Upstream: the same handshake, with the client's credentials and vhost.
    let upstream = tokio::time::timeout(
        UPSTREAM_TIMEOUT,
        upstream_handshake(cfg, &start_ok, (channel_max, frame_max, heartbeat), &open),
    )
    .await
    .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()));
    let mut up = match upstream {
        Ok(Upstream::Open(up)) => up,
        Ok(Upstream::Refused(close)) => {
            client.write_all(&close).await?;
            return Err(bad("upstream refused the connection"));
        }
        Err(e) => {
            // Tell the client as a broker would: connection.close 320 (connection-forced).
            client
                .write_all(&connection_close(320, "upstream unavailable"))
                .await?;
            return Err(e);
        }
    };
    client.write_all(&method(10, 41, &[0])).await?;
    // Whatever the client sent before open-ok is held, as a handshake-replaying proxy does.
    stats
        .held_bytes
        .fetch_add(from_client.buf.len() as u64, Relaxed);
    drop(from_client);
    stats.relayed.fetch_add(1, Relaxed);
    let (up_n, down_n) = tokio::io::copy_bidirectional(&mut client, &mut up)
        .await
        .unwrap_or((0, 0));
    stats.bytes_up.fetch_add(up_n, Relaxed);
    stats.bytes_down.fetch_add(down_n, Relaxed);
    Ok(())
}

enum Upstream<S> {
    Open(S),
    /// The upstream's connection.close frame, to pass on.
    Refused(Vec<u8>),
}

async fn upstream_handshake(
    cfg: &ProxyConfig,
    start_ok: &Frame,
    (channel_max, frame_max, heartbeat): (u16, u32, u16),
    open: &Frame,
) -> io::Result<Upstream<msgbench_net::Stream>> {
    let mut up = msgbench_net::connect(
        &cfg.upstream,
        None,
        cfg.upstream_tls.as_ref(),
        UPSTREAM_TIMEOUT,
    )
    .await
    .map_err(|e| io::Error::other(e.detail))?;
    let mut frames = Frames { buf: Vec::new() };
    up.write_all(PROTOCOL_HEADER).await?;
    let start = frames.method(&mut up).await?;
    expect(&start, (10, 10), "connection.start from upstream")?;
    up.write_all(&start_ok.encode()).await?;
    let tune = match frames.method(&mut up).await {
        // A broker that cannot authenticate the client closes the socket (AMQP 0-9-1: it
        // sends connection.close 403 only to clients advertising
        // authentication_failure_close): the client is told so, not that the broker is down.
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset
            ) =>
        {
            return Ok(Upstream::Refused(connection_close(
                403,
                "ACCESS_REFUSED - the upstream broker closed the connection after connection.start-ok: it refused the login (user name, password or mechanism)",
            )));
        }
        r => r?,
    };
    if tune.method() == Some((10, 50)) {
        return Ok(Upstream::Refused(tune.encode()));
    }
    expect(&tune, (10, 30), "connection.tune from upstream")?;
    let mut a = Args(&tune.payload[4..]);
    let (up_channels, up_frame, _) = (a.u16()?, a.u32()?, a.u16()?);
    let min_nonzero = |a: u32, b: u32| match (a, b) {
        (0, x) | (x, 0) => x,
        (x, y) => x.min(y),
    };
    let mut tune_ok = Vec::new();
    tune_ok.extend_from_slice(
        &(min_nonzero(up_channels as u32, channel_max as u32) as u16).to_be_bytes(),
    );
    tune_ok.extend_from_slice(&min_nonzero(up_frame, frame_max).to_be_bytes());
    tune_ok.extend_from_slice(&heartbeat.to_be_bytes());
    up.write_all(&method(10, 31, &tune_ok)).await?;
    // The client's open, as it came (vhost and reserved fields).
    up.write_all(&open.encode()).await?;
    let open_ok = frames.method(&mut up).await?;
    if open_ok.method() == Some((10, 50)) {
        return Ok(Upstream::Refused(open_ok.encode()));
    }
    expect(&open_ok, (10, 41), "connection.open-ok from upstream")?;
    if !frames.buf.is_empty() {
        return Err(bad(
            "upstream sent more than open-ok before the client was open",
        ));
    }
    Ok(Upstream::Open(up))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_encode_as_the_spec_says() {
        let f = method(10, 41, &[0]);
        assert_eq!(f, [1, 0, 0, 0, 0, 0, 5, 0, 10, 0, 41, 0, 0xCE]);
        let mut a = Args(&[0, 7, 0, 2, 0, 0, 0]);
        assert_eq!(a.u16().unwrap(), 7);
        assert_eq!(a.u32().unwrap(), 2 << 16);
        assert!(a.u16().is_err());
    }

    #[test]
    fn the_start_advertises_a_rabbitmq_brokers_capabilities() {
        use amq_protocol::types::{AMQPValue, parsing::parse_field_table};
        let raw = server_properties();
        let (rest, table) = parse_field_table(&raw[..]).expect("a field table");
        assert!(rest.is_empty());
        let product = table.inner().get("product").cloned();
        assert_eq!(
            product,
            Some(AMQPValue::LongString("msgbench amqp-proxy".into()))
        );
        let Some(AMQPValue::FieldTable(caps)) = table.inner().get("capabilities") else {
            panic!("no capabilities: {table:?}");
        };
        for c in CAPABILITIES {
            assert_eq!(caps.inner().get(c), Some(&AMQPValue::Boolean(true)), "{c}");
        }
    }

    #[test]
    fn upstream_urls() {
        let c = ProxyConfig::parse("amqp://guest:guest@127.0.0.1:5673/vh", &TlsPlan::default())
            .unwrap();
        assert_eq!(c.upstream.port, 5673);
        assert!(c.upstream_tls.is_none());
        assert!(ProxyConfig::parse("http://x", &TlsPlan::default()).is_err());
    }
}
