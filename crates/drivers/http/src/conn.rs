//! One HTTP connection, driven inline by its owner: the producer (or session) that sends on it
//! also reads it, whenever it sends and whenever the runner asks for acks, so a response is
//! read, parsed and turned into an ack in one poll of the producer task, with no hop through
//! another task.
//!
//! - **HTTP/1.1** runs on this crate's own client ([`crate::h1`]): the connection holds its one
//!   request in flight, and when the response is complete (or the exchange fails) it keeps the
//!   [`Done`] for its owner to take ([`Conn::take_done`]). A request outstanding when the
//!   connection is dropped for any reason resolves as a failure, exactly once, unless its owner
//!   gave up on it first ([`Conn::forget_request`]).
//! - **HTTP/2** runs on hyper's connection-level API, which always runs the socket in a task of
//!   its own (spawned on the producer's worker at the handshake); the future polled here is
//!   only its request dispatcher. Each request is an [`Exchange`], a future resolving to the
//!   response status once the whole body has been read (latency is request → full response),
//!   or to the error that ended it; hyper fails what is in flight when a connection dies.

use crate::body::Payload;
use crate::endpoint::Endpoint;
use crate::h1::{Client, Event, Request as H1Request};
use crate::h2limit::{Limit, Sniff};
use crate::stats::HttpStats;
use hyper::body::{Body, Incoming};
use hyper::client::conn::http2;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use msgbench_core::driver::{ConnectFailure, DriverError, DriverEventKind, EventSink};
use msgbench_net::{Backoff, Stream};
use std::fmt;
use std::future::{Future, poll_fn};
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

/// A [`Stream`] through [`TokioIo`], which turns tokio's I/O traits into hyper's (HTTP/2), read
/// through [`Sniff`] for the server's stream limit.
type Io = TokioIo<Sniff<Stream>>;

/// The response head on its way (hyper's future is unnameable, hence the box).
type ResponseFut = Pin<Box<dyn Future<Output = hyper::Result<Response<Incoming>>> + Send>>;

/// Why an exchange or a connection failed. Built only on failures: the success path never
/// allocates one.
#[derive(Debug, Clone)]
pub(crate) enum Error {
    /// The socket failed (shared: an outcome and the connection's end both carry it).
    Io(Arc<io::Error>),
    /// The server's bytes are not a valid HTTP/1.1 response.
    Parse(&'static str),
    /// The server closed the connection before the response was complete.
    Closed,
    /// The server closed a TLS connection before its first response, having agreed to no
    /// protocol in the handshake although `http/1.1` was offered: the mark of a server that
    /// speaks only HTTP/2 there.
    ClosedWithoutAlpn,
    /// The server answered an HTTP/1.1 request with HTTP/2 frames: it speaks only HTTP/2.
    Http2Only,
    /// The server answered the HTTP/2 connection preface with an HTTP/1.x status line: it
    /// speaks no HTTP/2 with prior knowledge (h2c) here.
    Http1Only,
    /// The server answered a plain-text request with a TLS record (an alert, or a
    /// handshake): it speaks TLS on this port.
    TlsOnly,
    /// The request went down with a connection dropped by its owner.
    Abandoned,
    /// An HTTP/2 failure, as hyper reports it.
    Hyper(Arc<hyper::Error>),
    /// The server closed a kept-alive connection as the request went out, before any byte of
    /// its answer, and the request was not sent again: its method (named) is not idempotent.
    ClosedIdle(Arc<str>),
    /// The request was to be sent again after [`Error::ClosedIdle`]'s race, but no new
    /// connection opened (the connect error).
    Reopen(Arc<str>),
    /// HTTP/2 requests the server refused unprocessed (GOAWAY, REFUSED_STREAM) were to be
    /// sent again, but no new connection opened (the connect error).
    Reopened(Arc<str>),
    /// The server ended [`UNANSWERED_LOSSES`] connections in a row, none of which it ever
    /// answered: it does not speak what is sent to it. What it may speak instead.
    NeverAnswers(&'static str),
}

/// Connections a producer's server may end without ever answering before the run stops:
/// one could be a server still starting; several in a row, each taking requests and
/// answering none, is a server that speaks something else (varnish closes on an HTTP/2
/// preface, a TLS port on a plain request), and retrying made thousands of connections a
/// second with every request counted as lost.
pub(crate) const UNANSWERED_LOSSES: u32 = 3;

impl Error {
    /// An I/O failure.
    pub fn io(e: io::Error) -> Error {
        Error::Io(Arc::new(e))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => e.fmt(f),
            Error::Parse(what) => write!(f, "invalid HTTP response: {what}"),
            Error::Closed => f.write_str("connection closed before the response was complete"),
            Error::ClosedWithoutAlpn => f.write_str(
                "connection closed before the first response, and the server agreed to no \
                 protocol in the TLS handshake (ALPN http/1.1 offered): if it speaks only \
                 HTTP/2, run with --http2",
            ),
            Error::Http2Only => f.write_str(
                "the server answered in HTTP/2 (a SETTINGS or GOAWAY frame): it speaks only \
                 HTTP/2 here; run with --http2",
            ),
            Error::TlsOnly => f.write_str(
                "the server answered with a TLS record: it speaks TLS on this port; use https://",
            ),
            Error::Http1Only => f.write_str(
                "the server answered the HTTP/2 connection preface with an HTTP/1.x status \
                 line: it speaks no HTTP/2 with prior knowledge (h2c) here; run without --http2",
            ),
            Error::Abandoned => f.write_str("request abandoned with its connection"),
            Error::NeverAnswers(hint) => write!(
                f,
                "the server closed {UNANSWERED_LOSSES} connections in a row without answering \
                 any request: {hint}"
            ),
            // hyper's own text is a category ("http2 error"); what happened is in its source
            // (h2's GOAWAY code and the server's debug text, an I/O error).
            Error::Hyper(e) => {
                e.fmt(f)?;
                let mut cause = std::error::Error::source(&**e);
                while let Some(c) = cause {
                    write!(f, ": {c}")?;
                    cause = c.source();
                }
                Ok(())
            }
            Error::ClosedIdle(method) => write!(
                f,
                "the server closed the kept-alive connection as the request went out, before \
                 any response (not sent again: {method} is not idempotent, RFC 9112 §9.3.1.1)"
            ),
            Error::Reopen(e) => write!(
                f,
                "the server closed the kept-alive connection as the request went out, and no \
                 new connection opened to send it again: {e}"
            ),
            Error::Reopened(e) => write!(
                f,
                "the server ended the connection and no new one opened to send the requests it \
                 refused unprocessed again: {e}"
            ),
        }
    }
}

/// A TLS handshake the server failed because it takes none of the offered protocols: said
/// in terms of the flag that offers the other one.
fn alpn_hint(detail: String, http2: bool) -> String {
    if !detail.contains("NoApplicationProtocol") {
        return detail;
    }
    let hint = if http2 {
        "the server takes no HTTP/2 over TLS (ALPN h2); without --http2 the run uses HTTP/1.1"
    } else {
        "the server takes no HTTP/1.1 over TLS (ALPN http/1.1); if it speaks only HTTP/2, run \
         with --http2"
    };
    format!("{detail}: {hint}")
}

/// An open connection: our HTTP/1.1 client, or hyper's HTTP/2 handle and dispatcher future.
enum Live {
    H1(Client),
    H2 {
        tx: http2::SendRequest<Payload>,
        conn: http2::Connection<Io, Payload, TokioExecutor>,
        /// The server's stream limit, once its SETTINGS are read.
        limit: Limit,
    },
}

/// A connection on its way (boxed: it is stored while the request it will carry waits).
type Opening = Pin<Box<dyn Future<Output = Result<(Live, bool), DriverError>> + Send>>;

/// A connection opened in the background (polled by [`Conn::poll_drive`]): for an HTTP/1.1
/// request caught by the keep-alive race ([`Event::Stale`]), which it will carry, or for
/// HTTP/2 requests a server refused unprocessed ([`Conn::h2_unprocessed`]).
struct Reopen {
    opening: Opening,
    request: Option<H1Request>,
}

/// Why [`Conn::poll_ready`] could not hand out the connection.
pub(crate) enum NotReady {
    /// The connection ended (its end has been accounted for); open another.
    Gone,
}

/// A connection slot: at most one live connection, reopened on demand by its owner.
///
/// How a connection ended is decided with what was in flight on it: the server closing an
/// idle connection (keep-alive limits, `Connection: close`, GOAWAY) is an orderly close,
/// counted in [`HttpStats::server_closes`]; a connection that failed, or ended under a request
/// that then got no response, is lost: one `disconnected` event, and the next connection is
/// reported as `reconnected`. Connections are numbered (generations) so that exchanges
/// finishing after their connection was replaced are accounted to the right one.
pub(crate) struct Conn {
    pub ep: Arc<Endpoint>,
    stats: Arc<HttpStats>,
    events: EventSink,
    timeout: Duration,
    source: Option<IpAddr>,
    live: Option<Live>,
    /// The finished HTTP/1.1 exchange its owner has not taken yet.
    done: Option<Done>,
    /// Number of the current (or last) connection; 0 before the first.
    generation: u64,
    /// The highest generation whose loss was reported.
    lost_gen: u64,
    /// The last connection was given up on ([`Conn::give_up`]): its successor is no
    /// reconnection to report.
    quiet_reopen: bool,
    /// An HTTP/2 generation that ended without error while requests were in flight on it:
    /// orderly unless one of them fails (decided at the next connect).
    ended_busy: Option<u64>,
    /// The live connection is TLS without a protocol agreed by ALPN and has not answered yet
    /// (see [`Error::ClosedWithoutAlpn`]).
    unagreed: bool,
    /// Whether any connection of this slot got a response.
    answered: bool,
    /// Connections lost before this slot ever got a response (see [`UNANSWERED_LOSSES`]).
    unanswered_losses: u32,
    /// The generation of the connection that carried the last response.
    answered_gen: u64,
    /// Pauses before a producer's next connection while its connections end without an
    /// answer: behind a TLS terminator or a TCP load balancer whose backend is down, every
    /// connection opens (the terminator takes it) and is reset at the first request, and
    /// without a pause every request opened one, a handshake storm of the benchmark's own.
    backoff: Backoff,
    /// Set while [`Conn::backoff`] has pauses to make (cleared by a response).
    backing_off: bool,
    /// Responses on the live HTTP/1.1 connection.
    responses_here: u32,
    /// Connections in a row the server closed under the request after their first response.
    closed_after_one: u8,
    /// The server closes every connection after one response without saying so (no
    /// `Connection: close`; tinyproxy does): each response is then taken as its connection's
    /// last, and the next request opens a new one instead of being caught by the close.
    single_use: bool,
    /// Set when the server turned out to speak another protocol before it ever answered
    /// ([`Error::Http2Only`], [`Error::Http1Only`], [`Error::TlsOnly`]): the next connect
    /// fails the run instead of trying again what cannot work.
    wrong_protocol: Option<Error>,
    /// Report disconnects and reconnects as events (producers; not the thousands of sessions
    /// of a connection workload, whose drops the runner counts itself).
    report: bool,
    /// A producer's slot, which keeps to the server's keep-alive rules: a request caught by
    /// the keep-alive race is sent again on a new connection when RFC 9112 allows it, and a
    /// connection idle for longer than the server's `Keep-Alive: timeout` allows is replaced
    /// before a request goes out on it. (A session is one connection, whose end the runner
    /// counts.)
    producer: bool,
    /// The connection opening in the background, if any.
    reopen: Option<Reopen>,
    /// A background opening for HTTP/2 requests refused unprocessed failed: they fail too
    /// (taken by [`Conn::take_reopen_failed`]), whichever poll saw it.
    reopen_failed: bool,
}

/// Opens a connection to `ep`: TCP (NODELAY), TLS for https://, then for HTTP/2 the handshake
/// (the client preface and SETTINGS are written; hyper does not wait for the server's). All
/// within `timeout`. With it, whether the connection is TLS without a protocol agreed by ALPN
/// (HTTP/1.1).
async fn open(
    ep: Arc<Endpoint>,
    source: Option<IpAddr>,
    timeout: Duration,
) -> Result<(Live, bool), DriverError> {
    let work = async {
        let stream = match &ep.proxy {
            None => msgbench_net::connect(&ep.target, source, ep.tls.as_ref(), timeout).await,
            Some(proxy) => through_proxy(&ep, proxy, source, timeout).await,
        }
        .map_err(|e| DriverError::Connect {
            target: ep.display.clone(),
            reason: alpn_hint(e.detail, ep.http2),
            cause: e.cause,
        })?;
        if !ep.http2 {
            let unagreed = ep.tls.is_some() && stream.alpn_protocol().is_none();
            return Ok((Live::H1(Client::new(stream)), unagreed));
        }
        if ep.tls.is_some() && stream.alpn_protocol() != Some(b"h2") {
            return Err(DriverError::Connect {
                target: ep.display.clone(),
                reason: "the server did not agree to HTTP/2 in the TLS handshake (ALPN h2); \
                         without --http2 the run uses HTTP/1.1"
                    .into(),
                cause: ConnectFailure::Rejected,
            });
        }
        let (sniff, limit) = Sniff::new(stream);
        let (tx, conn) = http2::Builder::new(TokioExecutor::new())
            .handshake(TokioIo::new(sniff))
            .await
            .map_err(|e| DriverError::Connect {
                target: ep.display.clone(),
                reason: format!("HTTP handshake failed: {e}"),
                cause: ConnectFailure::Rejected,
            })?;
        Ok((Live::H2 { tx, conn, limit }, false))
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(r) => r,
        Err(_) => Err(DriverError::Connect {
            target: ep.display.clone(),
            reason: format!("no HTTP connection within {timeout:?}"),
            cause: ConnectFailure::Timeout,
        }),
    }
}

/// A connection to `ep`'s server through its forward proxy: the proxy's socket itself for
/// plain HTTP (the requests name the whole URL), or for TLS a CONNECT tunnel through it with
/// the TLS handshake inside, end to end with the server.
async fn through_proxy(
    ep: &Endpoint,
    proxy: &msgbench_net::Target,
    source: Option<IpAddr>,
    timeout: Duration,
) -> Result<Stream, msgbench_net::NetError> {
    use msgbench_net::NetError;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let at_proxy = |e: NetError| {
        NetError::new(
            e.cause,
            format!("proxy {}:{}: {}", proxy.host, proxy.port, e.detail),
        )
    };
    let mut stream = msgbench_net::connect(proxy, source, None, timeout)
        .await
        .map_err(at_proxy)?;
    let (Some(tls), Some(connect)) = (ep.tls.as_ref(), ep.tunnel.as_ref()) else {
        return Ok(stream);
    };
    let io = |e: io::Error| at_proxy(NetError::from_io(&e));
    stream.write_all(connect).await.map_err(io)?;
    // The proxy's answer, read to its blank line and no further: what follows is the server's.
    let mut head = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= 16 * 1024 || stream.read(&mut byte).await.map_err(io)? == 0 {
            return Err(at_proxy(NetError::new(
                ConnectFailure::Reset,
                "the proxy closed the connection without answering CONNECT",
            )));
        }
        head.push(byte[0]);
    }
    let status = head
        .split(|&b| b == b' ')
        .nth(1)
        .and_then(|c| std::str::from_utf8(c).ok()?.parse::<u16>().ok());
    if !matches!(status, Some(200..=299)) {
        let line =
            String::from_utf8_lossy(head.split(|&b| b == b'\r').next().unwrap_or(&[])).into_owned();
        let hint = match status {
            // tinyproxy answers wrong credentials with 401.
            Some(401 | 407) if connect.windows(20).any(|w| w == b"Proxy-Authorization:") => {
                " (the credentials in the proxy URL were not accepted)"
            }
            Some(407) => {
                " (it asks for credentials: give them in the proxy URL, \
                 http://USER:PASSWORD@HOST:PORT)"
            }
            _ => "",
        };
        return Err(at_proxy(NetError::new(
            ConnectFailure::Rejected,
            format!("the proxy refused the tunnel (CONNECT): {line}{hint}"),
        )));
    }
    msgbench_net::upgrade_tls(stream, tls, &ep.target.host, timeout).await
}

/// How a connection ended.
#[derive(Debug)]
pub(crate) enum End {
    /// The server closed it without error.
    Orderly,
    /// It failed.
    Failed(Error),
}

impl Conn {
    /// A slot with no connection yet.
    pub fn new(
        ep: Arc<Endpoint>,
        stats: Arc<HttpStats>,
        events: EventSink,
        timeout: Duration,
        source: Option<IpAddr>,
        report: bool,
    ) -> Conn {
        Conn {
            ep,
            stats,
            events,
            timeout,
            source,
            live: None,
            done: None,
            generation: 0,
            lost_gen: 0,
            quiet_reopen: false,
            ended_busy: None,
            unagreed: false,
            answered: false,
            unanswered_losses: 0,
            answered_gen: 0,
            backoff: Backoff::default(),
            backing_off: false,
            responses_here: 0,
            closed_after_one: 0,
            single_use: false,
            wrong_protocol: None,
            report,
            producer: report,
            reopen: None,
            reopen_failed: false,
        }
    }

    /// Whether a connection is open.
    pub fn is_connected(&self) -> bool {
        self.live.is_some()
    }

    /// The events sink (for the owner's own reports).
    pub fn events(&self) -> &EventSink {
        &self.events
    }

    /// The connect timeout (also the longest wait for a connection to take a request).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Opens a connection (see [`open`]) within the connect timeout, replacing the current
    /// one, if any.
    pub async fn connect(&mut self) -> Result<(), DriverError> {
        self.drop_live(Error::Abandoned);
        if let Some(reopen) = self.reopen.take() {
            match reopen.request {
                Some(request) => {
                    self.done = Some(Done {
                        token: request.token(),
                        generation: self.generation,
                        outcome: Outcome::Failed(Error::Abandoned),
                    })
                }
                // HTTP/2: the connection on its way is the one wanted.
                None => {
                    let live = reopen.opening.await?;
                    self.install(live);
                    return Ok(());
                }
            }
        }
        if let Some(g) = self.ended_busy.take()
            && self.lost_gen < g
        {
            self.stats.server_closed();
        }
        match &self.wrong_protocol {
            // Not a setting to change: a target that takes connections and answers none
            // (which a proxy whose backend is down also does) is refused as one.
            Some(why @ Error::NeverAnswers(_)) => {
                return Err(DriverError::Refused(format!("{}: {why}", self.ep.display)));
            }
            Some(why) => return Err(DriverError::Config(format!("{}: {why}", self.ep.display))),
            None => {}
        }
        if self.backing_off {
            self.backoff.wait().await;
        }
        let live = open(self.ep.clone(), self.source, self.timeout).await?;
        self.install(live);
        Ok(())
    }

    /// Makes a newly opened connection the live one.
    fn install(&mut self, (live, unagreed): (Live, bool)) {
        (self.live, self.unagreed) = (Some(live), unagreed);
        self.responses_here = 0;
        self.stats.connection_opened();
        if self.lost_gen == self.generation
            && self.generation > 0
            && self.report
            && !std::mem::take(&mut self.quiet_reopen)
        {
            self.events.emit(
                DriverEventKind::Reconnected,
                format!("{}: reconnected", self.ep.display),
            );
        }
        self.generation += 1;
    }

    /// Whether the request of an [`Event::Stale`] is sent again: RFC 9112 §9.3.1.1 allows it
    /// for idempotent requests and for requests none of whose bytes went out.
    fn resends(&self, nothing_written: bool) -> bool {
        self.producer && (self.ep.replayable || nothing_written)
    }

    /// Starts sending request `token` of the connection just closed again, on a new one. The
    /// server's close counts as an orderly one: the request is not lost.
    fn start_resend(&mut self, token: u64) {
        let Some(Live::H1(client)) = self.live.take() else {
            return;
        };
        self.stats.server_closed();
        self.reopen = Some(Reopen {
            opening: Box::pin(open(self.ep.clone(), self.source, self.timeout)),
            request: Some(client.into_request(token)),
        });
    }

    /// HTTP/2: an exchange sent on connection `generation` was refused unprocessed (see
    /// [`Outcome::Unprocessed`]). If that is the live connection, it is going away (GOAWAY)
    /// or refusing streams: a new one starts opening in the background, and the old one is
    /// left to finish what it took (its streams run in hyper's own tasks).
    pub fn h2_unprocessed(&mut self, generation: u64) {
        if generation != self.generation || self.reopen.is_some() {
            return;
        }
        if let Some(Live::H2 { .. }) = self.live.take() {
            self.stats.server_closed();
            self.reopen = Some(Reopen {
                opening: Box::pin(open(self.ep.clone(), self.source, self.timeout)),
                request: None,
            });
        }
    }

    /// Whether a background opening for HTTP/2 requests refused unprocessed failed since the
    /// last call: those requests fail.
    pub fn take_reopen_failed(&mut self) -> bool {
        std::mem::take(&mut self.reopen_failed)
    }

    /// Starts opening a connection in the background unless one is open or opening.
    pub fn open_in_background(&mut self) {
        if self.live.is_none() && self.reopen.is_none() && self.wrong_protocol.is_none() {
            self.reopen = Some(Reopen {
                opening: Box::pin(open(self.ep.clone(), self.source, self.timeout)),
                request: None,
            });
        }
    }

    /// Drives the opening of the connection a request is sent again on: `Ready(None)` once
    /// it is open and carries the request, `Ready(Some)` if it did not open (the request fails
    /// with [`Error::Reopen`]).
    fn poll_resend(&mut self, cx: &mut Context<'_>) -> Poll<Option<End>> {
        let Some(reopen) = self.reopen.as_mut() else {
            return Poll::Ready(None);
        };
        let opened = ready!(reopen.opening.as_mut().poll(cx));
        let Some(Reopen { request, .. }) = self.reopen.take() else {
            return Poll::Ready(None);
        };
        match opened {
            Ok(live) => {
                self.install(live);
                if let (Some(Live::H1(client)), Some(request)) = (self.live.as_mut(), request) {
                    // Counted as it goes: one whose new connection never opened was not.
                    self.stats.add_resent();
                    client.resend(request);
                }
                Poll::Ready(None)
            }
            Err(e) => {
                let error = match request {
                    Some(_) => Error::Reopen(e.to_string().into()),
                    None => {
                        self.reopen_failed = true;
                        Error::Reopened(e.to_string().into())
                    }
                };
                if let Some(request) = request {
                    self.done = Some(Done {
                        token: request.token(),
                        generation: self.generation,
                        outcome: Outcome::Failed(error.clone()),
                    });
                }
                self.lose(self.generation, &error);
                Poll::Ready(Some(End::Failed(error)))
            }
        }
    }

    /// Drives the connection: writes the pending request and reads what arrived (HTTP/1.1,
    /// leaving a finished exchange for [`Conn::take_done`]), or polls hyper's dispatcher
    /// (HTTP/2; `busy` says whether requests are in flight). `Some` when the connection ended
    /// during this poll, accounted for as the type's docs say. HTTP/2 exchanges still in
    /// flight resolve on their own (streams below a GOAWAY's last stream id even complete).
    pub fn poll_drive(&mut self, cx: &mut Context<'_>, busy: bool) -> Option<End> {
        if self.reopen.is_some() {
            match self.poll_resend(cx) {
                Poll::Pending => return None,
                Poll::Ready(Some(end)) => return Some(end),
                Poll::Ready(None) => {}
            }
        }
        let r = match self.live.as_mut() {
            None => return None,
            Some(Live::H1(client)) => match client.poll_event(cx) {
                Poll::Pending => return None,
                Poll::Ready(Event::Stale {
                    token,
                    nothing_written,
                }) if self.resends(nothing_written) => {
                    self.closed_under_request();
                    self.start_resend(token);
                    // Polls the opening (and, once open, the new connection).
                    return self.poll_drive(cx, busy);
                }
                Poll::Ready(event) => return self.h1_event(event),
            },
            Some(Live::H2 { conn, limit, .. }) => match Pin::new(conn).poll(cx) {
                Poll::Ready(Err(_)) if limit.answered_http1() => {
                    self.live = None;
                    let error = Error::Http1Only;
                    if !self.answered {
                        self.wrong_protocol = Some(error.clone());
                    }
                    self.lose(self.generation, &error);
                    return Some(End::Failed(error));
                }
                r => r,
            },
        };
        match r {
            Poll::Pending => None,
            Poll::Ready(Ok(())) => {
                self.ended(busy);
                Some(End::Orderly)
            }
            // A server ending an idle connection, nothing in flight on it, loses nothing,
            // whatever way it does it: h2o's idle timeout closes TLS without close_notify,
            // varnish's just closes the socket (a broken pipe for the next write). As an
            // HTTP/1.1 keep-alive close, it is the server's orderly close.
            Poll::Ready(Err(_)) if !busy => {
                self.ended(false);
                Some(End::Orderly)
            }
            Poll::Ready(Err(e)) => {
                self.live = None;
                let e = Error::Hyper(Arc::new(e));
                self.lose(self.generation, &e);
                Some(End::Failed(e))
            }
        }
    }

    /// Accounts for what the HTTP/1.1 client reported.
    fn h1_event(&mut self, event: Event) -> Option<End> {
        let generation = self.generation;
        let done = |token, outcome| {
            Some(Done {
                token,
                generation,
                outcome,
            })
        };
        match event {
            Event::Response {
                token,
                status,
                last,
            } => {
                (self.unagreed, self.answered) = (false, true);
                self.answered_on_this_connection();
                self.done = done(token, Outcome::Status(status));
                self.responses_here += 1;
                if !last && !self.single_use {
                    return None;
                }
                self.ended(false);
                Some(End::Orderly)
            }
            Event::Closed => {
                self.ended(false);
                Some(End::Orderly)
            }
            // Not sent again (see `resends`): the request is lost with the connection.
            Event::Stale { token, .. } => {
                self.closed_under_request();
                self.live = None;
                let error = if self.producer {
                    self.stats.add_closed_unanswered();
                    Error::ClosedIdle(self.ep.method_name.clone())
                } else {
                    Error::Closed
                };
                self.done = done(token, Outcome::Failed(error.clone()));
                self.lose(generation, &error);
                Some(End::Failed(error))
            }
            Event::Failed { token, error } => {
                self.live = None;
                let error = match error {
                    Error::Closed if self.unagreed => Error::ClosedWithoutAlpn,
                    e => e,
                };
                if matches!(error, Error::Http2Only | Error::TlsOnly) && !self.answered {
                    self.wrong_protocol = Some(error.clone());
                }
                if let Some(token) = token {
                    self.done = done(token, Outcome::Failed(error.clone()));
                }
                self.lose(generation, &error);
                Some(End::Failed(error))
            }
        }
    }

    /// The server closed the live connection as a request went out (the keep-alive race).
    /// Twice in a row right after a connection's first response is a server that closes
    /// each connection after one: from then on each response ends its connection.
    fn closed_under_request(&mut self) {
        if self.responses_here != 1 || self.single_use {
            self.closed_after_one = 0;
            return;
        }
        self.closed_after_one += 1;
        if self.closed_after_one >= 2 {
            self.single_use = true;
            if self.report && self.stats.first_single_use() {
                self.events.emit(
                    DriverEventKind::Warning,
                    format!(
                        "{}: the server closes each connection after its first response without \
                         saying so (no Connection: close), catching the next request in the \
                         close: each request now goes on a connection of its own",
                        self.ep.display
                    ),
                );
            }
        }
    }

    /// The current connection ended without error.
    fn ended(&mut self, busy: bool) {
        self.live = None;
        if busy {
            self.ended_busy = Some(self.generation);
        } else {
            self.stats.server_closed();
        }
    }

    /// Drops the current connection, if any (true if there was one). An HTTP/1.1 request in
    /// flight on it fails with `error` (HTTP/2's fail inside hyper).
    fn drop_live(&mut self, error: Error) -> bool {
        match self.live.take() {
            None => false,
            Some(Live::H1(client)) => {
                if let Some(token) = client.in_flight() {
                    self.done = Some(Done {
                        token,
                        generation: self.generation,
                        outcome: Outcome::Failed(error),
                    });
                }
                true
            }
            Some(Live::H2 { .. }) => true,
        }
    }

    /// Reports the loss of connection `generation` (once).
    fn lose(&mut self, generation: u64, e: &dyn std::fmt::Display) {
        if self.lost_gen >= generation {
            return;
        }
        self.lost_gen = generation;
        if self.report {
            self.events.emit(
                DriverEventKind::Disconnected,
                format!("{}: connection lost: {e}", self.ep.display),
            );
        }
        if self.producer && self.answered_gen < generation {
            // Lost without a single answer: the next connection waits its turn.
            self.backoff.failed();
            self.backing_off = true;
        }
        if self.producer && !self.answered && self.wrong_protocol.is_none() {
            self.unanswered_losses += 1;
            if self.unanswered_losses >= UNANSWERED_LOSSES {
                self.wrong_protocol = Some(Error::NeverAnswers(self.never_answers_hint()));
            }
        }
    }

    /// What a server that takes connections and answers nothing on them may speak instead.
    fn never_answers_hint(&self) -> &'static str {
        match (self.ep.tls.is_some(), self.ep.http2) {
            (false, true) => {
                "it may speak no HTTP/2 with prior knowledge (h2c) here: run without --http2, \
                 or use https:// if it offers HTTP/2 over TLS"
            }
            (false, false) => {
                "it may speak TLS on this port (use https://) or no HTTP at all, or be a proxy \
                 or TCP load balancer whose backend is down (retry when it is up)"
            }
            (true, _) => {
                "a TLS terminator or proxy whose backend is down does this (retry when it is \
                 up), as does a server that speaks another protocol over TLS on this port"
            }
        }
    }

    /// A response came on this slot's connection: the server speaks what it is sent.
    pub fn answered(&mut self) {
        self.answered = true;
        self.answered_on_this_connection();
    }

    /// The live connection answered: the connections that follow it open without a pause.
    #[inline]
    fn answered_on_this_connection(&mut self) {
        self.answered_gen = self.generation;
        if self.backing_off {
            self.backing_off = false;
            self.backoff.reset();
        }
    }

    /// An exchange sent on connection `generation` got no response. On HTTP/1.1 that always
    /// means its connection is lost (it is dropped if still held); on HTTP/2 only if the
    /// connection is gone (otherwise the server reset just that stream).
    pub fn exchange_failed(&mut self, generation: u64, e: &Error) {
        let current = generation == self.generation && self.live.is_some();
        if current && self.ep.http2 {
            return;
        }
        if current {
            self.drop_live(Error::Abandoned);
        }
        self.lose(generation, e);
    }

    /// Ready when the connection takes a request now (HTTP/1.1: no request in flight).
    /// Drives the connection while it waits.
    pub fn poll_ready(&mut self, cx: &mut Context<'_>, busy: bool) -> Poll<Result<(), NotReady>> {
        if self.poll_drive(cx, busy).is_some() {
            return Poll::Ready(Err(NotReady::Gone));
        }
        let r = match self.live.as_mut() {
            // Opening in the background (its waker registered by `poll_drive`).
            None if self.reopen.is_some() => return Poll::Pending,
            None => return Poll::Ready(Err(NotReady::Gone)),
            Some(Live::H1(client)) if client.is_busy() => return Poll::Pending,
            Some(Live::H1(client)) if self.producer && client.past_idle_limit() => {
                // The server said it closes the connection about now: ended in its name.
                self.ended(false);
                return Poll::Ready(Err(NotReady::Gone));
            }
            Some(Live::H1(_)) => return Poll::Ready(Ok(())),
            Some(Live::H2 { tx, .. }) => tx.poll_ready(cx),
        };
        match r {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(())) => Poll::Ready(Ok(())),
            // The dispatcher is gone: the connection has ended or is about to.
            Poll::Ready(Err(e)) if e.is_closed() || e.is_canceled() => {
                self.ended(busy);
                Poll::Ready(Err(NotReady::Gone))
            }
            Poll::Ready(Err(e)) => {
                self.live = None;
                self.lose(self.generation, &Error::Hyper(Arc::new(e)));
                Poll::Ready(Err(NotReady::Gone))
            }
        }
    }

    /// HTTP/1.1: queues request `token` carrying `payload` (call after [`Conn::poll_ready`]);
    /// it goes out when the connection is next driven, and its outcome comes from
    /// [`Conn::take_done`]. `Closed` when there is no connection.
    pub fn submit_h1(&mut self, token: u64, payload: &[u8]) -> Result<(), DriverError> {
        match self.live.as_mut() {
            Some(Live::H1(client)) => {
                debug_assert!(self.done.is_none(), "the last outcome was not taken");
                client.send(token, &self.ep.h1, payload);
                Ok(())
            }
            _ => Err(DriverError::Closed),
        }
    }

    /// HTTP/2: hands `req` to the connection (call after [`Conn::poll_ready`]); it goes out
    /// when the connection is next driven. `Closed` when there is no connection.
    /// `resend` is the body to send it again with if it is refused unprocessed (`None` for a
    /// request that is itself sent again: once only).
    /// Sends an HTTP/2 request. `body` is kept to send it again should the server refuse it
    /// unprocessed, unless this is already its [`MAX_SENDS`]th time (`sends` counts this one).
    pub fn submit_h2(
        &mut self,
        token: u64,
        req: Request<Payload>,
        body: Option<bytes::Bytes>,
        sends: u8,
    ) -> Result<Exchange, DriverError> {
        let head: ResponseFut = match self.live.as_mut() {
            Some(Live::H2 { tx, .. }) => Box::pin(tx.send_request(req)),
            _ => return Err(DriverError::Closed),
        };
        Ok(Exchange {
            token,
            generation: self.generation,
            state: Stage::Head(head),
            body: body.filter(|_| sends < MAX_SENDS),
            sends,
        })
    }

    /// HTTP/2: how many requests the live connection carries at once — the server's
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` (see [`crate::h2limit`]); `None` for HTTP/1.1 or
    /// with no connection.
    pub fn h2_streams(&self) -> Option<usize> {
        match &self.live {
            Some(Live::H2 { limit, .. }) => Some(limit.streams()),
            _ => None,
        }
    }

    /// HTTP/2: whether the live connection's limit is the server's own (its SETTINGS were
    /// read), not the one assumed before them.
    pub fn h2_limit_known(&self) -> bool {
        matches!(&self.live, Some(Live::H2 { limit, .. }) if limit.get().is_some())
    }

    /// HTTP/1.1: the outcome of the last request, once it has one.
    pub fn take_done(&mut self) -> Option<Done> {
        self.done.take()
    }

    /// HTTP/1.1: whether a request was submitted whose outcome has not been taken.
    pub fn h1_outstanding(&self) -> bool {
        self.done.is_some()
            || self.reopen.as_ref().is_some_and(|r| r.request.is_some())
            || matches!(&self.live, Some(Live::H1(c)) if c.is_busy())
    }

    /// HTTP/1.1: gives up on the outstanding request, which will have no outcome (its owner
    /// accounts for it); the connection cannot carry another until it is replaced.
    pub fn forget_request(&mut self) {
        self.done = None;
        self.reopen = None;
        if let Some(Live::H1(client)) = self.live.as_mut() {
            client.forget();
        }
    }

    /// Drops the connection at once, as lost (`why` is reported); what is in flight on it
    /// fails.
    pub fn abandon(&mut self, why: &str) {
        if self.drop_live(Error::Abandoned) {
            self.lose(self.generation, &why);
        }
    }

    /// Drops the connection of a request given up on (HTTP/1.1: it cannot carry the next one
    /// until that answer comes). Our own doing, and counted already (the request as a timeout
    /// and as without response): neither a disconnection nor, next, a reconnection to report,
    /// which had counted each such request twice among the run's errors.
    pub fn give_up(&mut self) {
        if self.drop_live(Error::Abandoned) && self.lost_gen < self.generation {
            self.lost_gen = self.generation;
            self.quiet_reopen = true;
        }
    }

    /// The protocol the target turned out not to speak (it answered only in another), if so.
    pub fn wrong_protocol(&self) -> Option<&Error> {
        self.wrong_protocol.as_ref()
    }

    /// Closes politely, bounded to one second: HTTP/1.1 reads the response in flight, if any,
    /// then shuts the socket down; HTTP/2 sends GOAWAY (from hyper's connection task, once
    /// every handle is gone). Outcomes not taken yet are dropped.
    pub async fn close(&mut self) {
        self.reopen = None;
        let limit = Duration::from_secs(1);
        match self.live.take() {
            None => {}
            Some(Live::H1(mut client)) => {
                let _ = tokio::time::timeout(limit, poll_fn(|cx| client.poll_close(cx))).await;
            }
            Some(Live::H2 { tx, conn, .. }) => {
                drop(tx);
                let _ = tokio::time::timeout(limit, conn).await;
            }
        }
        self.done = None;
    }
}

/// Whether an HTTP/2 failure says the server did not process the stream: it refused it
/// (REFUSED_STREAM), or its GOAWAY (the remote's) left it out; or the request never left
/// msgbench: hyper cancels a request still queued for the connection when that connection
/// closes (after nginx's GOAWAY, requests queued behind the last stream it took), so the
/// server never saw it. Likewise a request hyper was holding for a free stream (the server's
/// SETTINGS_MAX_CONCURRENT_STREAMS reached) when a GOAWAY ended the connection: hyper's
/// dispatcher stops there and drops the request unsent, which it reports as "dispatch task
/// is gone" (a user error; the runtime itself lives as long as the run). Such a stream was
/// not sent, or went out just before the GOAWAY arrived and this task was not polled in
/// between; hyper does not say which, and the first is what happens (a GOAWAY every 100
/// requests with 128 streams allowed: 1 request in 8,000 was lost as a disconnection).
fn unprocessed(e: &hyper::Error) -> bool {
    if e.is_canceled() || (e.is_user() && e.to_string() == "dispatch task is gone") {
        return true;
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(h2) = s.downcast_ref::<h2::Error>() {
            return h2.reason() == Some(h2::Reason::REFUSED_STREAM)
                || (h2.is_go_away() && h2.is_remote());
        }
        source = s.source();
    }
    false
}

/// How an exchange ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// A complete response with this status.
    Status(u16),
    /// No complete response: the request or the connection failed.
    Failed(Error),
    /// HTTP/2: the server refused the stream without processing it — a GOAWAY whose last
    /// stream id is below it (nginx after `keepalive_requests`, 1,000 by default), or
    /// REFUSED_STREAM — or the connection closed before the request left (see
    /// `unprocessed`), so it may be sent again on another connection (RFC 9113 §8.7). Carries
    /// the request's body and how many times it has been sent.
    Unprocessed(bytes::Bytes, u8),
}

/// How many times an HTTP/2 request refused unprocessed is sent in all. Against nginx's
/// GOAWAY every `keepalive_requests` a request can be refused again on the connection it was
/// sent again on (that one reached its own limit first); a server that keeps refusing it is
/// answered by a nack after the fourth time.
pub(crate) const MAX_SENDS: u8 = 4;

enum Stage {
    Head(ResponseFut),
    Body { status: u16, body: Incoming },
    Done,
}

/// One HTTP/2 request on its way: resolves to the status once the response body has been
/// read.
pub(crate) struct Exchange {
    token: u64,
    /// The connection it went out on.
    generation: u64,
    state: Stage,
    /// The request's body, kept (a reference count) to send it again if it is refused
    /// unprocessed; `None` once it has been sent [`MAX_SENDS`] times.
    body: Option<bytes::Bytes>,
    /// How many times it has been sent, this one included.
    sends: u8,
}

/// A finished exchange.
#[derive(Debug)]
pub(crate) struct Done {
    /// The runner's token.
    pub token: u64,
    /// The connection it went out on.
    pub generation: u64,
    /// How it ended.
    pub outcome: Outcome,
}

impl Exchange {
    fn finish(&mut self, outcome: Outcome) -> Done {
        self.state = Stage::Done;
        Done {
            token: self.token,
            generation: self.generation,
            outcome,
        }
    }
}

impl Future for Exchange {
    type Output = Done;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Done> {
        let this = self.get_mut();
        // Only a request refused before any answer may go again.
        let sends = this.sends;
        let failed = |body: Option<bytes::Bytes>, e: hyper::Error| match body {
            Some(body) if unprocessed(&e) => Outcome::Unprocessed(body, sends),
            _ => Outcome::Failed(Error::Hyper(Arc::new(e))),
        };
        loop {
            match &mut this.state {
                Stage::Head(head) => match head.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(resp)) => {
                        let status = resp.status().as_u16();
                        this.state = Stage::Body {
                            status,
                            body: resp.into_body(),
                        };
                    }
                    Poll::Ready(Err(e)) => {
                        let outcome = failed(this.body.take(), e);
                        return Poll::Ready(this.finish(outcome));
                    }
                },
                Stage::Body { status, body } => match Pin::new(&mut *body).poll_frame(cx) {
                    Poll::Pending => return Poll::Pending,
                    // Data is dropped as it comes: nothing of the response is kept.
                    Poll::Ready(Some(Ok(_frame))) => {}
                    Poll::Ready(Some(Err(e))) => {
                        return Poll::Ready(this.finish(failed(None, e)));
                    }
                    Poll::Ready(None) => {
                        let status = *status;
                        return Poll::Ready(this.finish(Outcome::Status(status)));
                    }
                },
                Stage::Done => panic!("exchange polled after completion"),
            }
        }
    }
}
