//! # msgbench-net
//!
//! Client networking shared by the drivers, so every protocol connects the same way:
//! - TCP with `TCP_NODELAY` always on (Nagle plus delayed ACKs adds ~40 ms to small messages,
//!   which would be measured as the broker's latency);
//! - an optional local source address per connection, so one generator can open more
//!   connections to one broker port than one address has ephemeral ports;
//! - TLS through rustls with certificate verification on by default (system roots, or a CA file),
//!   client certificates, and an explicit `insecure` switch;
//! - one [`Stream`] type (plain or TLS) with poll-style reads into a `BytesMut` and writes, which
//!   drivers use for cancel-safe I/O without per-message allocation;
//! - connect failures classified ([`ConnectFailure`]) so connection-scale runs can report
//!   failures by reason and say what limit to raise;
//! - plain TCP connections held outside the descriptor table ([`ring`]), for connection counts
//!   beyond the open-file limit;
//! - one connection's socket, buffers and read and write pumps ([`Wire`]), which every own
//!   client keeps its connection in (ZeroMQ's readiness-driven links and the HTTP/1.1
//!   exchange, which parses in place in a fixed buffer, aside);
//! - one reconnection pacing ([`Backoff`]) and one liveness watch ([`Liveness`]) for every
//!   client that reconnects by itself;
//! - SASL SCRAM ([`scram`]) for the brokers that offer no PLAIN login on a plain port;
//! - RFC 6455 framing ([`ws`]) and a WebSocket tunnel ([`tunnel`]) that carries another
//!   protocol (MQTT over WebSocket) in binary frames under an ordinary [`Stream`].
#![deny(missing_docs)]

mod backoff;
#[cfg(target_os = "linux")]
pub mod batch;
#[cfg(target_os = "linux")]
mod kernel_buf;
mod liveness;
#[cfg(target_os = "linux")]
pub mod ring;
pub mod scram;
pub use backoff::Backoff;
pub use liveness::{Check, Liveness};
mod stream;
mod tcp_info;
pub mod tunnel;
pub mod ws;

use stream::Io;
pub use stream::Stream;

use bytes::BytesMut;
use msgbench_core::driver::ConnectFailure;
use msgbench_core::scenario::TlsPlan;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpSocket;
use tokio_rustls::TlsConnector;

/// Why a connection could not be made, with the classified cause.
#[derive(Debug, thiserror::Error)]
#[error("{detail}")]
pub struct NetError {
    /// Classified cause, for counting.
    pub cause: ConnectFailure,
    /// What happened, for humans.
    pub detail: String,
}

impl NetError {
    /// A failure of `cause`, described by `detail`.
    pub fn new(cause: ConnectFailure, detail: impl Into<String>) -> Self {
        Self {
            cause,
            detail: detail.into(),
        }
    }

    /// Classifies an I/O error from connecting (or from the first exchange on a connection).
    pub fn from_io(e: &io::Error) -> NetError {
        let cause = classify(e);
        let hint = match cause {
            ConnectFailure::NoFds => {
                " (out of file descriptors: raise `ulimit -n` for this process)"
            }
            ConnectFailure::NoPorts => {
                " (out of local ports for this destination: add source addresses with --source-addrs, or widen net.ipv4.ip_local_port_range)"
            }
            _ => "",
        };
        NetError::new(cause, format!("{e}{hint}"))
    }
}

/// Classifies an I/O error.
pub fn classify(e: &io::Error) -> ConnectFailure {
    match e.raw_os_error() {
        Some(libc::EMFILE | libc::ENFILE) => return ConnectFailure::NoFds,
        Some(libc::EADDRNOTAVAIL) => return ConnectFailure::NoPorts,
        _ => {}
    }
    match e.kind() {
        io::ErrorKind::ConnectionRefused => ConnectFailure::Refused,
        io::ErrorKind::TimedOut => ConnectFailure::Timeout,
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::UnexpectedEof => ConnectFailure::Reset,
        io::ErrorKind::AddrNotAvailable => ConnectFailure::NoPorts,
        _ => ConnectFailure::Other,
    }
}

/// TLS settings turned into a connector once per run.
#[derive(Clone)]
pub struct Tls {
    connector: TlsConnector,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls")
    }
}

fn read_err(what: &str, path: &std::path::Path, e: impl std::fmt::Display) -> String {
    format!("cannot read {what} {}: {e}", path.display())
}

impl Tls {
    /// Builds the client configuration: roots from `ca_file` (or the system's), an optional
    /// client certificate, verification unless `insecure`.
    pub fn new(plan: &TlsPlan) -> Result<Tls, String> {
        Tls::with_alpn(plan, &[])
    }

    /// As [`Tls::new`], offering `protocols` by ALPN (most preferred first), e.g. `h2` for
    /// HTTP/2, which is negotiated in the TLS handshake; [`Stream::alpn_protocol`] says what
    /// the server chose.
    pub fn with_alpn(plan: &TlsPlan, protocols: &[&[u8]]) -> Result<Tls, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let mut roots = rustls::RootCertStore::empty();
        let mut pinned = Vec::new();
        if let Some(ca) = &plan.ca_file {
            let certs = CertificateDer::pem_file_iter(ca)
                .map_err(|e| read_err("CA file", ca, e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| read_err("CA file", ca, e))?;
            if certs.is_empty() {
                return Err(format!("CA file {} holds no PEM certificate", ca.display()));
            }
            for c in certs {
                roots
                    .add(c.clone())
                    .map_err(|e| format!("CA file {}: {e}", ca.display()))?;
                pinned.push(c);
            }
        } else if !plan.insecure {
            let found = rustls_native_certs::load_native_certs();
            for c in found.certs {
                let _ = roots.add(c);
            }
            if roots.is_empty() {
                return Err(
                    "no system CA certificates found: give --ca-file (or --insecure to skip verification)".into(),
                );
            }
        }
        let verifier = if pinned.is_empty() {
            None
        } else {
            let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots.clone()),
                provider.clone(),
            )
            .build()
            .map_err(|e| format!("CA file: {e}"))?;
            Some(Arc::new(CaFileVerifier { webpki, pinned }))
        };
        let builder = builder.with_root_certificates(roots);
        let mut config = match (&plan.cert_file, &plan.key_file) {
            (Some(cert), Some(key)) => {
                let chain = CertificateDer::pem_file_iter(cert)
                    .map_err(|e| read_err("client certificate", cert, e))?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| read_err("client certificate", cert, e))?;
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| read_err("client key", key, e))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("client certificate: {e}"))?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => return Err("a client certificate needs both --cert and --key".into()),
        };
        config.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
        if plan.insecure {
            config
                .dangerous()
                .set_certificate_verifier(Arc::new(NoVerify(provider)));
        } else if let Some(v) = verifier {
            config.dangerous().set_certificate_verifier(v);
        }
        Ok(Tls {
            connector: TlsConnector::from(Arc::new(config)),
        })
    }
}

/// `--ca-file`: the usual verification against the file's certificates, and one more case
/// it refuses: a server presenting, as its own, a certificate that is itself in the file and
/// marked as a CA. That is what `openssl req -x509` makes by default (`CA:TRUE`), the usual
/// self-signed test certificate; curl and OpenSSL accept it when given as the CA, rustls calls
/// it `CaUsedAsEndEntity`. The user named that exact certificate, so it is trusted as pinned,
/// still only for the names it was issued for.
#[derive(Debug)]
struct CaFileVerifier {
    webpki: Arc<rustls::client::WebPkiServerVerifier>,
    pinned: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for CaFileVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .webpki
            .verify_server_cert(end_entity, intermediates, name, ocsp, now)
        {
            Err(e)
                if format!("{e:?}").contains("CaUsedAsEndEntity")
                    && self
                        .pinned
                        .iter()
                        .any(|c| c.as_ref() == end_entity.as_ref()) =>
            {
                let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
                rustls::client::verify_server_name(&cert, name)?;
                Ok(ServerCertVerified::assertion())
            }
            r => r,
        }
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(m, c, d)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(m, c, d)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// `--insecure`: accepts any server certificate (signatures are still checked, so the session
/// is encrypted, just not authenticated).
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Where to connect.
#[derive(Debug, Clone)]
pub struct Target {
    /// Host name or address (also the TLS server name).
    pub host: String,
    /// Port.
    pub port: u16,
}

impl Target {
    /// Splits `host[:port]` / `[v6][:port]`, using `default_port` when none is given.
    pub fn parse(hostport: &str, default_port: u16) -> Result<Target, String> {
        let (host, port) = if let Some(rest) = hostport.strip_prefix('[') {
            let (h, after) = rest
                .split_once(']')
                .ok_or_else(|| format!("`{hostport}`: missing `]`"))?;
            (h, after.strip_prefix(':'))
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            }
        };
        if host.is_empty() {
            return Err(format!("`{hostport}` has no host"));
        }
        let port = match port {
            None | Some("") => default_port,
            Some(p) => p
                .parse()
                .map_err(|_| format!("`{p}` is not a port number"))?,
        };
        Ok(Target {
            host: host.to_string(),
            port,
        })
    }
}

/// Whether `cx` is a look without waiting (the runner taking whatever acks are ready between
/// sends: [`msgbench_core::driver::is_look`]), not a wait: such a poll has no task to wake, so
/// it must neither arm timers nor replace the waker a real wait registered.
#[inline]
pub fn just_looking(cx: &Context<'_>) -> bool {
    msgbench_core::driver::is_look(cx)
}

/// Opens a TCP connection (NODELAY on) from `source` if given, then TLS if `tls` is given, all
/// within `timeout`.
pub async fn connect(
    target: &Target,
    source: Option<IpAddr>,
    tls: Option<&Tls>,
    timeout: Duration,
) -> Result<Stream, NetError> {
    connect_with(target, source, tls, timeout, false).await
}

/// [`connect`], and with `fd_free` (plain TCP only) the connected socket moves into an io_uring
/// table ([`ring`]), so it no longer takes a descriptor: connection-scale runs pass it when they
/// hold more connections than the open-file limit allows.
pub async fn connect_with(
    target: &Target,
    source: Option<IpAddr>,
    tls: Option<&Tls>,
    timeout: Duration,
    fd_free: bool,
) -> Result<Stream, NetError> {
    // Whether TCP connected: a time-out after that is the TLS handshake's, not the
    // connection's (a plain port that waits for a request, as a TLS client waits for its
    // answer, hangs a TLS handshake).
    let connected = std::sync::atomic::AtomicBool::new(false);
    let work = async {
        let addr = resolve(target).await?;
        let sock = match addr {
            SocketAddr::V4(_) => TcpSocket::new_v4(),
            SocketAddr::V6(_) => TcpSocket::new_v6(),
        }
        .map_err(|e| NetError::from_io(&e))?;
        if let Some(src) = source {
            // Let the kernel pick the port only at connect time, so one source address can
            // reach many destinations (IP_BIND_ADDRESS_NO_PORT).
            set_bind_no_port(&sock);
            sock.bind(SocketAddr::new(src, 0)).map_err(|e| {
                if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) {
                    // Binding fails this way when the address is not this machine's (ports
                    // run out only at connect time: see set_bind_no_port).
                    NetError::new(
                        ConnectFailure::Other,
                        format!("cannot connect from {src}: not an address of this machine (--source-addrs)"),
                    )
                } else {
                    NetError::from_io(&e)
                }
            })?;
        }
        let tcp = sock
            .connect(addr)
            .await
            .map_err(|e| NetError::from_io(&e))?;
        tcp.set_nodelay(true).map_err(|e| NetError::from_io(&e))?;
        connected.store(true, std::sync::atomic::Ordering::Relaxed);
        match tls {
            #[cfg(target_os = "linux")]
            None if fd_free => ring::RingStream::adopt(tcp)
                .map(|r| Stream::client(Io::Ring(r)))
                .map_err(|e| NetError::new(ConnectFailure::NoFds, e.to_string())),
            #[cfg(target_os = "linux")]
            None if batch::enabled() => match batch::BatchStream::adopt(tcp) {
                Ok(Ok(b)) => Ok(Stream::client(Io::Batch(b))),
                Ok(Err(tcp)) => Ok(Stream::client(Io::Tcp(tcp))),
                Err(e) => Err(NetError::from_io(&e)),
            },
            None => Ok(Stream::client(Io::Tcp(tcp))),
            Some(t) => tls_handshake(t, &target.host, tcp).await,
        }
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(r) => r,
        Err(_) if connected.load(std::sync::atomic::Ordering::Relaxed) => Err(NetError::new(
            ConnectFailure::Timeout,
            format!(
                "connected, but the TLS handshake got no answer within {timeout:?} (is this \
                 port a plain one? Use the scheme without TLS there)"
            ),
        )),
        Err(_) => Err(NetError::new(
            ConnectFailure::Timeout,
            format!("no connection within {timeout:?}"),
        )),
    }
}

/// The client side of a TLS handshake on a connected socket, verifying the server as `host`.
async fn tls_handshake(
    t: &Tls,
    host: &str,
    tcp: tokio::net::TcpStream,
) -> Result<Stream, NetError> {
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| NetError::new(ConnectFailure::Tls, format!("bad TLS server name: {e}")))?;
    let s = t.connector.connect(name, tcp).await.map_err(|e| {
        let cause = if e.kind() == io::ErrorKind::InvalidData {
            ConnectFailure::Tls
        } else {
            classify(&e)
        };
        NetError::new(cause, format!("TLS handshake failed: {e}{}", tls_hint(&e)))
    })?;
    Ok(Stream::client(Io::Tls(Box::new(s.into()))))
}

/// What to do about the TLS failures users meet most, which rustls words for implementers.
fn tls_hint(e: &io::Error) -> &'static str {
    let text = e.to_string();
    if text.contains("UnknownIssuer") {
        " (the server's certificate is not signed by a CA this machine trusts: give its CA \
         with --ca-file, or skip verification with --insecure)"
    } else if text.contains("NotValidForName") || text.contains("not valid for name") {
        " (the server's certificate is not for this host name: connect by the name it was \
         issued for, or skip verification with --insecure)"
    } else if text.contains("CaUsedAsEndEntity") {
        " (the server's certificate is a CA certificate, as `openssl req -x509` makes by \
         default: give that certificate itself with --ca-file, or skip verification with \
         --insecure)"
    } else if text.contains("InvalidContentType") || text.contains("corrupt message") {
        " (the server did not answer in TLS: is this port a plain one? Use the scheme without \
         TLS there)"
    } else {
        ""
    }
}

/// Turns a plain TCP client connection into TLS, for protocols that start in the clear and
/// switch once the server says so (NATS announces TLS in its first message). Nothing may be
/// buffered on either side at that moment. A connection held in an io_uring table cannot be
/// switched.
pub async fn upgrade_tls(
    stream: Stream,
    tls: &Tls,
    host: &str,
    timeout: Duration,
) -> Result<Stream, NetError> {
    let tcp = stream.into_tcp().map_err(|_| {
        NetError::new(
            ConnectFailure::Tls,
            "TLS cannot be started on this connection (held in an io_uring table, or already TLS)",
        )
    })?;
    match tokio::time::timeout(timeout, tls_handshake(tls, host, tcp)).await {
        Ok(r) => r,
        Err(_) => Err(NetError::new(
            ConnectFailure::Timeout,
            format!("no TLS handshake within {timeout:?}"),
        )),
    }
}

async fn resolve(target: &Target) -> Result<SocketAddr, NetError> {
    if let Ok(ip) = target.host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, target.port));
    }
    let mut addrs = tokio::net::lookup_host((target.host.as_str(), target.port))
        .await
        .map_err(|e| {
            NetError::new(
                ConnectFailure::Other,
                format!("cannot resolve {}: {e}", target.host),
            )
        })?;
    addrs.next().ok_or_else(|| {
        NetError::new(
            ConnectFailure::Other,
            format!("{} resolves to no address", target.host),
        )
    })
}

/// Adds a client socket's kernel TCP counters to the run's tally
/// ([`msgbench_core::tcp_tally`]), for a driver that took the socket out of its [`Stream`]
/// ([`Stream::into_tcp`]): call it once, just before the socket closes.
pub fn tally_tcp(sock: &impl std::os::fd::AsRawFd) {
    tcp_info::tally(sock.as_raw_fd(), false);
}

fn set_bind_no_port(sock: &TcpSocket) {
    use std::os::fd::AsRawFd;
    let one: libc::c_int = 1;
    // SAFETY: a valid socket and a pointer to an int we own, per setsockopt(2). Failure only
    // costs the optimisation.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            &one as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// The protocol a peer's first bytes show, for a client that reached the wrong port (the
/// answer it got is not its protocol's): `Some` with a name and the scheme that speaks it.
/// Only unmistakable openings are named: AMQP's protocol header, a TLS record (an alert or
/// a handshake), an HTTP status line, NATS's `INFO`, an SSH banner.
pub fn sniff(first: &[u8]) -> Option<&'static str> {
    let starts = |p: &[u8]| first.starts_with(p);
    if starts(b"AMQP") {
        Some("AMQP (its protocol header came back: amqp:// or amqp10://)")
    } else if first.len() >= 2 && matches!(first[0], 0x15 | 0x16) && first[1] == 0x03 {
        Some(
            "TLS (a TLS record came back: use the scheme's TLS form, e.g. mqtts://, amqps://, amqp10s://, wss://)",
        )
    } else if starts(b"HTTP/") {
        Some("HTTP (an HTTP status line came back: an HTTP or WebSocket port)")
    } else if starts(b"INFO {") {
        Some("NATS (its INFO came back: nats://)")
    } else if starts(b"SSH-") {
        Some("SSH")
    } else {
        None
    }
}

/// A connection's socket and buffers, shared by the drivers of framed binary protocols (MQTT,
/// AMQP): buffered writes, reads into one growing buffer, and a poll loop that hands out one
/// parsed unit at a time. All state lives here, so the async methods are cancel-safe.
///
/// With [`Wire::watch`], the wire also notices a silent peer ([`Liveness`]): `poll_next` and
/// `poll_flush` fail with `TimedOut` once nothing was heard for two keep-alive periods, and
/// queue the protocol's probe after the first.
pub struct Wire {
    stream: Option<Stream>,
    /// Bytes read and not yet parsed.
    pub rbuf: BytesMut,
    /// Bytes to write.
    pub wbuf: BytesMut,
    chunk: usize,
    live: Option<Box<Liveness>>,
    /// See [`Wire::lean`].
    lean: bool,
}

impl Wire {
    /// A disconnected wire whose read buffer grows by `chunk` bytes: large for data clients,
    /// small for the thousands of idle sessions.
    pub fn new(chunk: usize) -> Wire {
        Wire {
            stream: None,
            rbuf: BytesMut::new(),
            wbuf: BytesMut::new(),
            chunk,
            live: None,
            lean: false,
        }
    }

    /// From now on, an empty read buffer is given back whenever the socket has nothing more to
    /// read, so that a buffer exists only while bytes are being parsed. For the many mostly
    /// idle receivers of fan-out at scale (a WebSocket client getting ten messages a second
    /// would otherwise hold `chunk` bytes all along, 800 MB for 100,000 of them at 8 KiB); it
    /// costs one allocation per wake-up, which a busy connection, whose buffer rarely runs
    /// empty, seldom pays.
    pub fn lean(&mut self) {
        self.lean = true;
    }

    /// Watches the peer from now on (every connection attached later too): period `every`
    /// (0: off), `probe` the protocol's ping (empty: the peer's heartbeats are heard instead).
    pub fn watch(&mut self, every: std::time::Duration, probe: &'static [u8]) {
        let mut l = Liveness::new(every, probe);
        l.restart();
        self.live = Some(Box::new(l));
    }

    /// Called where the wire's I/O would block: queues a probe, or fails when the peer is
    /// silent for too long.
    fn poll_live(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let Some(l) = self.live.as_mut() else {
            return Poll::Pending;
        };
        loop {
            match l.poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Check::Dead) => return Poll::Ready(l.dead_error()),
                // Frames are encoded into wbuf whole, so its end is a frame boundary.
                Poll::Ready(Check::Probe) => {
                    self.wbuf.extend_from_slice(l.probe());
                    if let Some(s) = self.stream.as_mut()
                        && let Poll::Ready(Err(e)) = s.poll_write_all(cx, &mut self.wbuf)
                    {
                        return Poll::Ready(e);
                    }
                }
            }
        }
    }

    /// Starts using `stream`, dropping whatever was buffered for the previous one (never sent,
    /// so never replayed: it could duplicate what did go out before a cut).
    pub fn attach(&mut self, stream: Stream) {
        self.stream = Some(stream);
        self.rbuf.clear();
        self.wbuf.clear();
        if let Some(l) = self.live.as_mut() {
            l.restart();
        }
    }

    /// Drops the socket; true if there was one.
    pub fn detach(&mut self) -> bool {
        self.stream.take().is_some()
    }

    /// Takes the socket out, buffers untouched: for an upgrade in the middle of a handshake
    /// (STARTTLS-style), after which the secured stream is [attached](Wire::attach) again.
    pub fn take(&mut self) -> Option<Stream> {
        self.stream.take()
    }

    /// Whether a socket is attached.
    pub fn is_connected(&self) -> bool {
        self.stream.is_some()
    }

    /// The socket, if attached.
    pub fn stream_mut(&mut self) -> Option<&mut Stream> {
        self.stream.as_mut()
    }

    /// Frees buffers a handshake grew beyond one chunk (idle sessions stay small); a
    /// [lean](Wire::lean) wire frees empty buffers of any size.
    pub fn shrink(&mut self) {
        let keep = if self.lean { 0 } else { self.chunk };
        if self.rbuf.is_empty() && self.rbuf.capacity() > keep {
            self.rbuf = BytesMut::new();
        }
        if self.wbuf.is_empty() && self.wbuf.capacity() > keep {
            self.wbuf = BytesMut::new();
        }
    }

    /// Writes what the socket takes now; `Ready(Ok)` when everything is written.
    pub fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = match self.stream.as_mut() {
            None => return Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
            Some(s) => s.poll_write_all(cx, &mut self.wbuf),
        };
        if r.is_pending()
            && let Poll::Ready(e) = self.poll_live(cx)
        {
            return Poll::Ready(Err(e));
        }
        r
    }

    /// Writes everything buffered.
    pub async fn flush(&mut self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll_flush(cx)).await
    }

    /// The next unit `parse` splits off the read buffer, reading as needed. With `flush`,
    /// pending writes go out before waiting (producers pass false, so that looking for acks
    /// between sends does not write their batch one message at a time). Parse errors come back
    /// as `InvalidData`.
    pub fn poll_next<T, E: std::fmt::Display>(
        &mut self,
        cx: &mut Context<'_>,
        flush: bool,
        mut parse: impl FnMut(&mut BytesMut) -> Result<Option<T>, E>,
    ) -> Poll<io::Result<T>> {
        loop {
            match parse(&mut self.rbuf) {
                Ok(Some(t)) => return Poll::Ready(Ok(t)),
                Ok(None) => {}
                Err(e) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        e.to_string(),
                    )));
                }
            }
            if flush
                && !self.wbuf.is_empty()
                && let Poll::Ready(Err(e)) = self.poll_flush(cx)
            {
                return Poll::Ready(Err(e));
            }
            match self.poll_fill(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Reads what the socket has into the read buffer: `Ready(Ok)` once something was read,
    /// `UnexpectedEof` when the peer closed, `Pending` (with the liveness watch armed) when
    /// there is nothing yet. For protocols that parse the buffer themselves between reads.
    pub fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some(s) = self.stream.as_mut() else {
            return Poll::Ready(Err(io::ErrorKind::NotConnected.into()));
        };
        match s.poll_read_into(cx, &mut self.rbuf, self.chunk) {
            Poll::Ready(Ok(0)) => Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into())),
            Poll::Ready(Ok(_)) => {
                if let Some(l) = self.live.as_mut() {
                    l.heard();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                if self.lean && self.rbuf.is_empty() && self.rbuf.capacity() != 0 {
                    self.rbuf = BytesMut::new();
                }
                if just_looking(cx) {
                    // Nothing can be woken: the liveness watch is for the real wait.
                    return Poll::Pending;
                }
                match self.poll_live(cx) {
                    Poll::Ready(e) => Poll::Ready(Err(e)),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_ports_are_named_by_what_answered() {
        assert!(sniff(b"AMQP\x03\x01\x00\x00").unwrap().starts_with("AMQP"));
        assert!(
            sniff(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x0a])
                .unwrap()
                .starts_with("TLS")
        );
        assert!(
            sniff(b"HTTP/1.1 400 Bad Request\r\n")
                .unwrap()
                .starts_with("HTTP")
        );
        assert!(sniff(b"INFO {\"server_id\"").unwrap().starts_with("NATS"));
        assert_eq!(sniff(&[0x20, 0x02, 0x00, 0x00]), None);
        assert_eq!(sniff(b""), None);
    }

    #[test]
    fn targets_parse() {
        let t = Target::parse("localhost", 1883).unwrap();
        assert_eq!((t.host.as_str(), t.port), ("localhost", 1883));
        let t = Target::parse("[::1]:99", 1).unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 99));
        assert!(Target::parse("h:x", 1).is_err());
    }

    #[test]
    fn failures_are_classified() {
        assert_eq!(
            classify(&io::Error::from_raw_os_error(24)),
            ConnectFailure::NoFds
        );
        assert_eq!(
            classify(&io::Error::from_raw_os_error(99)),
            ConnectFailure::NoPorts
        );
        assert_eq!(
            classify(&io::ErrorKind::ConnectionRefused.into()),
            ConnectFailure::Refused
        );
        assert!(
            NetError::from_io(&io::Error::from_raw_os_error(24))
                .detail
                .contains("ulimit")
        );
    }

    /// A lean wire gives its read buffer back once the socket has nothing more to read; an
    /// ordinary one keeps it for the next read.
    #[tokio::test]
    async fn a_lean_wire_holds_no_read_buffer_while_idle() {
        use tokio::io::AsyncWriteExt;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut peer = tokio::net::TcpStream::connect(l.local_addr().unwrap())
            .await
            .unwrap();
        let (sock, _) = l.accept().await.unwrap();
        let mut peer2 = tokio::net::TcpStream::connect(l.local_addr().unwrap())
            .await
            .unwrap();
        let (sock2, _) = l.accept().await.unwrap();
        let unit = |b: &mut BytesMut| -> Result<Option<BytesMut>, String> {
            Ok((b.len() >= 4).then(|| b.split_to(4)))
        };
        let mut cx = Context::from_waker(std::task::Waker::noop());
        for (lean, sock, peer) in [(true, sock, &mut peer), (false, sock2, &mut peer2)] {
            let mut w = Wire::new(8 * 1024);
            if lean {
                w.lean();
            }
            w.attach(Stream::accepted(sock));
            peer.write_all(b"abcd").await.unwrap();
            let got = std::future::poll_fn(|cx| w.poll_next(cx, false, unit))
                .await
                .unwrap();
            assert_eq!(&got[..], b"abcd");
            drop(got);
            assert!(w.poll_next(&mut cx, false, unit).is_pending());
            assert_eq!(w.rbuf.capacity() == 0, lean, "lean: {lean}");
            // And reads again when bytes come.
            peer.write_all(b"efgh").await.unwrap();
            let got = std::future::poll_fn(|cx| w.poll_next(cx, false, unit))
                .await
                .unwrap();
            assert_eq!(&got[..], b"efgh");
        }
    }

    #[tokio::test]
    async fn refused_is_quick_and_classified() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        let t = Target::parse(&format!("127.0.0.1:{port}"), 1).unwrap();
        let e = connect(&t, None, None, Duration::from_secs(2))
            .await
            .err()
            .unwrap();
        assert_eq!(e.cause, ConnectFailure::Refused);
    }

    #[tokio::test]
    async fn source_address_is_used() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let t = Target::parse(&format!("127.0.0.1:{port}"), 1).unwrap();
        let src: IpAddr = "127.0.0.7".parse().unwrap();
        let s = connect(&t, Some(src), None, Duration::from_secs(2))
            .await
            .unwrap();
        assert_eq!(s.local_addr().unwrap().ip(), src);
        let (_peer, from) = l.accept().await.unwrap();
        assert_eq!(from.ip(), src);
    }
}
