//! # msgbench-driver-http
//!
//! HTTP load: each producer is one keep-alive connection that sends requests and takes each
//! response as the acknowledgement of its request, so the runner's publish latency is
//! request → complete response and its ack window bounds the requests in flight. Connections
//! are driven inline by the producer that owns them (no task per connection for HTTP/1.1), over
//! msgbench-net's sockets (TCP_NODELAY, rustls).
//!
//! - **HTTP/1.1** (`http://`, `https://`) runs on a client of this crate's own, because what a
//!   load generator sends is the same request over and over: the request head is serialized
//!   once per run, each request is one copy into a reused buffer and normally one write, and
//!   responses are framed in a reused read buffer (Content-Length, chunked, or until the
//!   server closes) with their bodies skipped: the client allocates nothing per request, and
//!   a request costs little more than its write and its read. One request in flight per
//!   connection; the client does not pipeline, so producers need `max_in_flight = 1`
//!   ([`HttpDriver::max_in_flight`]) and concurrency comes from connections (`--producers`).
//!   A larger window is refused at connect time: the runner would stamp requests that can
//!   only wait for the one before them, and their latency would include that wait.
//! - **HTTP/2** ([`HttpOptions::http2`]) runs on hyper 1.x's connection-level API: many
//!   concurrent streams per connection, up to the window and the server's
//!   `SETTINGS_MAX_CONCURRENT_STREAMS` (read off the wire by `h2limit`, since hyper would
//!   queue what is beyond it: a request is sent only when a stream is free, and a window above
//!   the limit is said once as a warning). A request the server refuses unprocessed (a GOAWAY
//!   whose last stream id is below it, as nginx sends after `keepalive_requests`, or
//!   REFUSED_STREAM) is sent again on a new connection (RFC 9113 §8.7; up to four sends in all), counted in
//!   [`HttpStats::resent`]. Over cleartext (`http://`) with prior knowledge (h2c); over TLS
//!   (`https://`) agreed by ALPN (`h2`) in the handshake — a server that does not agree is a
//!   connect error, not a silent fallback to HTTP/1.1.
//!
//! Requests carry the runner's stamped payload as their body (`Content-Type:
//! application/octet-stream` unless a header says otherwise; on HTTP/1.1 with a
//! `Content-Length`, which like `Transfer-Encoding` cannot be given as a header). GET and HEAD
//! carry no body: the stamp is not sent, which costs nothing here because latency comes from
//! the ack window (send time by token), not from a stamp read back; the runner still counts
//! the payload size as bytes sent. The default method is POST.
//!
//! What "ok" means: a 2xx or 3xx response confirms its request (redirects are not followed);
//! 1xx as a final status (101), 4xx and 5xx are refusals (nacks); interim responses (100
//! Continue, 103...) are skipped. Responses are counted by status in [`HttpStats`] (shared,
//! allocation-free per response), and error statuses produce a rate-limited summary event. A
//! request that gets no complete response (connection reset, server closed mid-response, a
//! malformed response) is a nack too, counted as "without response".
//!
//! Failures: a refused or unreachable endpoint is a [`DriverError::Connect`] with the
//! classified cause; a connection that fails, or ends under a request, is reported
//! (`disconnected`) and the producer reconnects on its next send (`reconnected`). A server that
//! ends a connection in good order (keep-alive limits, `Connection: close` or an HTTP/1.0
//! response, a body delimited by the close, HTTP/2 GOAWAY) is not an error: the next request
//! opens a new connection, counted in [`HttpStats::server_closes`]; that connect then counts in
//! the request's latency, as it would for any client. The one race of keep-alive, a server
//! closing a connection it found idle just as a request goes out on it (the connection had
//! answered before, nothing of this request's answer came), is what RFC 9112 §9.3.1.1 lets a
//! client retry: an idempotent request is sent again, once, on a new connection, counted in
//! [`HttpStats::resent`] and not as a loss; any other is a nack counted in
//! [`HttpStats::closed_unanswered`] (sessions of connection workloads never resend: a session
//! is its one connection). The race is also kept out of reach where the server says when it
//! closes idle connections (`Keep-Alive: timeout=N`: Apache, Node.js, lighttpd): a producer's
//! connection idle for longer than that, less a second (half for 2 s or less), is replaced
//! before the next request rather than reused. An HTTP/1.1 request still unanswered
//! when the runner gives up on it (ack timeout) costs its connection: the next send closes it
//! and opens another.
//!
//! Connection workloads ([`Driver::session`]): a session is one open connection (HTTP/2: with
//! its handshake done); a publish is one full request/response; keep-alive waits for the server to
//! close it (idle timeouts are the server's to enforce).
//!
//! HTTP has no consumers: runs use `-c 0` (no consumers per topic).
//!
//! # Layout
//! - `endpoint`: URL and options, checked once; the request templates.
//! - `conn`: one connection driven inline by its owner, HTTP/1.1 or HTTP/2; `Exchange`, one
//!   HTTP/2 request on its way.
//! - `h1`: the HTTP/1.1 client (`h1::parse`: response framing).
//! - `h2limit`: the server's HTTP/2 stream limit, read from its first SETTINGS frame.
//! - `fuzzing` (hidden): entry points for the fuzz targets into the private parsers.
//! - [`stats`]: [`HttpStats`], responses by status.
//! - [`body`]: the body type of HTTP/2 requests and of the built-in server's answers (the
//!   server itself is `msgbench_serve::http`).
//! - this file: the `Driver`, `Producer` and `Session` implementations.

#![deny(missing_docs)]

pub mod body;
mod conn;
mod endpoint;
#[doc(hidden)]
pub mod fuzzing;
mod h1;
mod h2limit;
pub mod options;
pub mod stats;

pub use stats::{HttpStats, status_ok};

use bytes::BytesMut;
use conn::{Conn, Done, End, Exchange, NotReady, Outcome};
use endpoint::Endpoint;
use futures_util::stream::{FuturesUnordered, Stream as _};
use msgbench_core::driver::{
    Ack, Capabilities, Consumer, ConsumerSpec, Delivery, Driver, DriverError, DriverEventKind,
    EventSink, Outbound, Producer, ProducerSpec, Session, SessionSpec,
};
use msgbench_core::scenario::TlsPlan;
use stats::Tally;
use std::collections::VecDeque;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

/// Request settings the CLI fills from its flags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpOptions {
    /// Request method, case-insensitive (`GET`, `POST`, `PUT`...); empty means POST.
    pub method: String,
    /// Extra headers, in order (a `Host` given here replaces the URL's). On HTTP/1.1 the body
    /// framing is the driver's: `Content-Length` and `Transfer-Encoding` are refused.
    pub headers: Vec<(String, String)>,
    /// HTTP/2 with prior knowledge (cleartext only) instead of HTTP/1.1.
    pub http2: bool,
    /// Path and query to request instead of the URL's (must start with `/`).
    pub path: Option<String>,
    /// Forward proxy (`http://[user:password@]host:port`) to go through.
    pub proxy: Option<String>,
}

/// The HTTP driver: one value per run, creating connections on demand.
pub struct HttpDriver {
    ep: Arc<Endpoint>,
    events: EventSink,
    connect_timeout: Duration,
    stats: Arc<HttpStats>,
}

impl HttpDriver {
    /// A driver for `http://host[:port][/path]` or `https://...` (TLS with verification unless
    /// `tls.insecure`). Every option is checked here: errors are [`DriverError::Config`].
    pub fn new(
        url: &str,
        opts: HttpOptions,
        tls: &TlsPlan,
        events: EventSink,
        connect_timeout: Duration,
    ) -> Result<HttpDriver, DriverError> {
        Ok(HttpDriver {
            ep: Arc::new(Endpoint::parse(url, &opts, tls)?),
            events,
            connect_timeout,
            stats: Arc::new(HttpStats::default()),
        })
    }

    /// Responses by status and connection counts, shared with every producer and session of
    /// this driver: keep a clone before handing the driver to the runner, read it afterwards.
    pub fn stats(&self) -> Arc<HttpStats> {
        self.stats.clone()
    }

    /// The largest `max_in_flight` producers accept: `Some(1)` for HTTP/1.1 (no pipelining),
    /// `None` (any) for HTTP/2.
    pub fn max_in_flight(&self) -> Option<usize> {
        (!self.ep.http2).then_some(1)
    }

    fn conn(&self, source: Option<std::net::IpAddr>, report: bool) -> Conn {
        Conn::new(
            self.ep.clone(),
            self.stats.clone(),
            self.events.clone(),
            self.connect_timeout,
            source,
            report,
        )
    }
}

/// Why a window above 1 is refused on HTTP/1.1.
fn one_request_at_a_time(asked: usize) -> DriverError {
    DriverError::Config(format!(
        "HTTP/1.1 carries one request at a time per connection (no pipelining), but \
         max_in_flight is {asked}: set it to 1 (--max-in-flight 1) and add connections with \
         more producers, or use HTTP/2"
    ))
}

impl Driver for HttpDriver {
    type Producer = HttpProducer;
    type Consumer = NoConsumer;
    type Session = HttpSession;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            acks: true,
            queue_groups: false,
            request_reply: false,
            responses: true,
            metadata: false,
        }
    }

    fn responses(&self) -> Option<msgbench_metrics::ResponseSummary> {
        Some(self.stats.summary())
    }

    fn sends_payload(&self) -> bool {
        self.ep.with_body
    }

    async fn producer(&self, spec: &ProducerSpec) -> Result<HttpProducer, DriverError> {
        if let Some(max) = self.max_in_flight()
            && spec.max_in_flight > max
        {
            return Err(one_request_at_a_time(spec.max_in_flight));
        }
        let mut conn = self.conn(None, true);
        conn.connect().await?;
        let in_flight = if self.ep.http2 {
            InFlight::Many(FuturesUnordered::new())
        } else {
            InFlight::One
        };
        Ok(HttpProducer {
            tally: TallyGuard::new(self.stats.clone()),
            conn,
            in_flight,
            acks: VecDeque::new(),
            buf: BytesMut::new(),
            window: spec.max_in_flight,
            unprocessed: VecDeque::new(),
        })
    }

    async fn consumer(&self, _spec: &ConsumerSpec) -> Result<NoConsumer, DriverError> {
        Err(DriverError::Config(
            "HTTP has no consumers: requests are answered by the server, and each response is \
             its request's ack; run with no consumers (-c 0)"
                .into(),
        ))
    }

    async fn session(&self, spec: &SessionSpec) -> Result<HttpSession, DriverError> {
        let mut conn = self.conn(spec.source, false);
        conn.connect().await?;
        Ok(HttpSession {
            tally: TallyGuard::new(self.stats.clone()),
            conn,
            buf: BytesMut::new(),
        })
    }
}

/// The consumer type of a driver that has none ([`Driver::consumer`] always refuses).
pub enum NoConsumer {}

impl Consumer for NoConsumer {
    async fn recv(&mut self) -> Result<Option<Delivery>, DriverError> {
        match *self {}
    }
    async fn close(self) -> Result<(), DriverError> {
        match self {}
    }
}

/// A producer's tally, added to the shared statistics when dropped (whatever way the producer
/// ends).
struct TallyGuard {
    tally: Tally,
    stats: Arc<HttpStats>,
}

impl TallyGuard {
    fn new(stats: Arc<HttpStats>) -> TallyGuard {
        TallyGuard {
            tally: Tally::new(),
            stats,
        }
    }

    /// Counts how `outcome` ended; true if it confirms the request.
    fn record(&mut self, outcome: &Outcome, events: &EventSink) -> bool {
        match outcome {
            Outcome::Status(code) => {
                self.tally.response(*code, &self.stats, events);
                status_ok(*code)
            }
            Outcome::Failed(_) | Outcome::Unprocessed(..) => {
                self.tally.no_response(&self.stats, events);
                false
            }
        }
    }
}

impl Drop for TallyGuard {
    fn drop(&mut self) {
        self.tally.flush(&self.stats);
    }
}

/// The requests a producer has in flight.
enum InFlight {
    /// HTTP/1.1: at most one, held by the connection itself (see [`Conn::take_done`]).
    One,
    /// HTTP/2: any number of exchanges.
    Many(FuturesUnordered<Exchange>),
}

/// The sending side: one connection, reopened on the next send when lost.
pub struct HttpProducer {
    conn: Conn,
    in_flight: InFlight,
    /// Acks found outside `poll_ack`.
    acks: VecDeque<Ack>,
    /// HTTP/2 request bodies are cut from this buffer (see `Endpoint::request`).
    buf: BytesMut,
    tally: TallyGuard,
    /// The runner's window: requests it may have in flight on this producer.
    window: usize,
    /// HTTP/2 requests the server refused unprocessed, with their bodies and how many times
    /// they were sent, waiting for a connection to be sent again on
    /// ([`Outcome::Unprocessed`]).
    unprocessed: VecDeque<(u64, bytes::Bytes, u8)>,
}

impl HttpProducer {
    fn ack(&mut self, done: Done) -> Ack {
        match &done.outcome {
            Outcome::Failed(e) => self.conn.exchange_failed(done.generation, e),
            Outcome::Status(_) => self.conn.answered(),
            Outcome::Unprocessed(..) => {}
        }
        let ok = self.tally.record(&done.outcome, self.conn.events());
        match done.outcome {
            // No response: the server may or may not have acted on it (in doubt, not refused).
            Outcome::Failed(_) => Ack::Unanswered { token: done.token },
            _ => Ack::One {
                token: done.token,
                ok,
            },
        }
    }

    /// Whether requests are waiting for their outcome.
    fn busy(&self) -> bool {
        match &self.in_flight {
            InFlight::One => self.conn.h1_outstanding(),
            InFlight::Many(set) => !set.is_empty() || !self.unprocessed.is_empty(),
        }
    }

    /// HTTP/2: sends the requests refused unprocessed again, on a new connection (opened in
    /// the background, driven from here). If none can be opened they fail.
    fn resend_unprocessed(&mut self, cx: &mut Context<'_>) {
        if self.conn.take_reopen_failed() {
            while let Some((token, ..)) = self.unprocessed.pop_front() {
                self.give_up_unprocessed(token, cx);
            }
        }
        while let Some((token, body, sends)) = self.unprocessed.pop_front() {
            self.conn.open_in_background();
            match self.conn.poll_ready(cx, true) {
                Poll::Ready(Ok(())) => {
                    let req = self.conn.ep.request_with(body.clone());
                    let ex = self.conn.submit_h2(token, req, Some(body), sends + 1);
                    match (&mut self.in_flight, ex) {
                        (InFlight::Many(set), Ok(ex)) => {
                            self.tally.stats.add_resent();
                            set.push(ex);
                        }
                        _ => self.give_up_unprocessed(token, cx),
                    }
                }
                Poll::Pending => {
                    self.unprocessed.push_front((token, body, sends));
                    return;
                }
                // No connection opened: the connect error has been reported.
                Poll::Ready(Err(NotReady::Gone)) => {
                    self.give_up_unprocessed(token, cx);
                    while let Some((token, ..)) = self.unprocessed.pop_front() {
                        self.give_up_unprocessed(token, cx);
                    }
                }
            }
        }
    }

    /// A request refused unprocessed that cannot be sent again: a nack without response,
    /// queued for `poll_ack` (whose caller is woken to take it).
    fn give_up_unprocessed(&mut self, token: u64, cx: &mut Context<'_>) {
        self.tally
            .tally
            .no_response(&self.tally.stats, self.conn.events());
        self.acks.push_back(Ack::One { token, ok: false });
        cx.waker().wake_by_ref();
    }

    /// Waits (bounded by the connect timeout) until a connection takes a request, opening one
    /// if there is none or the server closed the last.
    async fn ready(&mut self) -> Result<(), DriverError> {
        for _ in 0..2 {
            if !self.conn.is_connected() {
                self.conn.connect().await?;
            }
            let busy = self.busy();
            let limit = self.conn.timeout();
            // Usually ready at once: no timer unless it has to wait.
            let now = poll_fn(|cx| Poll::Ready(self.conn.poll_ready(cx, busy))).await;
            let r = match now {
                Poll::Ready(r) => Ok(r),
                Poll::Pending => {
                    let wait = poll_fn(|cx| self.conn.poll_ready(cx, busy));
                    tokio::time::timeout(limit, wait).await
                }
            };
            match r {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(NotReady::Gone)) => continue,
                Err(_) => {
                    self.conn
                        .abandon("the connection did not take a request in time");
                    return Err(DriverError::Timeout(format!(
                        "{}: the connection did not take a request within {limit:?}",
                        self.conn.ep.display
                    )));
                }
            }
        }
        Err(DriverError::Closed)
    }
}

impl HttpProducer {
    /// HTTP/2: waits (bounded by the connect timeout) until the connection has a stream free
    /// under the server's limit, taking the responses that free one as acks. A request the
    /// server cannot take yet is not sent: hyper would queue it, it would count as sent, and
    /// its wait in msgbench would count as the server's latency.
    async fn stream_slot(&mut self) -> Result<(), DriverError> {
        let (InFlight::Many(set), Some(limit)) = (&self.in_flight, self.conn.h2_streams()) else {
            return Ok(());
        };
        if set.len() < limit {
            return Ok(());
        }
        // Said once the server's own limit is known (before its SETTINGS, the limit is
        // msgbench's assumption, not the server's).
        if self.conn.h2_limit_known() && self.tally.stats.first_stream_limit() {
            self.conn.events().emit(
                DriverEventKind::Warning,
                format!(
                    "{}: the server allows {limit} concurrent streams per connection \
                     (SETTINGS_MAX_CONCURRENT_STREAMS) and the window is {}: each producer \
                     keeps at most {limit} requests in flight, the next one waiting for a \
                     free stream before it is sent; add producers (connections) for more",
                    self.conn.ep.display, self.window
                ),
            );
        }
        let limit_time = self.conn.timeout();
        let wait = poll_fn(|cx| {
            loop {
                let free = match (&self.in_flight, self.conn.h2_streams()) {
                    (InFlight::Many(set), Some(limit)) => set.len() < limit,
                    _ => true,
                };
                if free {
                    return Poll::Ready(());
                }
                match self.poll_exchanges(cx) {
                    Poll::Ready(Some(ack)) => self.acks.push_back(ack),
                    Poll::Ready(None) => return Poll::Ready(()),
                    Poll::Pending => return Poll::Pending,
                }
            }
        });
        tokio::time::timeout(limit_time, wait).await.map_err(|_| {
            DriverError::Timeout(format!(
                "{}: no stream freed within {limit_time:?} (the server's limit: {limit})",
                self.conn.ep.display
            ))
        })
    }
}

impl Producer for HttpProducer {
    async fn send(&mut self, msg: Outbound<'_>) -> Result<(), DriverError> {
        if let InFlight::One = self.in_flight
            && self.conn.h1_outstanding()
        {
            // HTTP/1.1 with the previous request outstanding: the runner sends now only
            // because it gave up on that request (ack timeout, already counted). Its answer
            // may have just come in: take it if so (the runner counts a late ack)...
            let mut cx = Context::from_waker(Waker::noop());
            if let Poll::Ready(Some(ack)) = self.poll_exchanges(&mut cx) {
                self.acks.push_back(ack);
            }
            if self.conn.h1_outstanding() {
                // ...else give up on its connection too: it cannot carry another request
                // until that answer comes.
                self.tally
                    .tally
                    .no_response(&self.tally.stats, self.conn.events());
                self.conn.forget_request();
                self.conn.give_up();
            }
        }
        self.stream_slot().await?;
        self.ready().await?;
        match &mut self.in_flight {
            InFlight::One => self.conn.submit_h1(msg.token, msg.payload)?,
            InFlight::Many(set) => {
                let body = self.conn.ep.body(msg.payload, &mut self.buf);
                let req = self.conn.ep.request_with(body.clone());
                set.push(self.conn.submit_h2(msg.token, req, Some(body), 1)?);
            }
        }
        // The request goes out when the connection is driven: now, not when the runner next
        // waits.
        let busy = self.busy();
        poll_fn(|cx| {
            let _ = self.conn.poll_drive(cx, busy);
            Poll::Ready(())
        })
        .await;
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), DriverError> {
        let busy = self.busy();
        poll_fn(|cx| {
            let _ = self.conn.poll_drive(cx, busy);
            Poll::Ready(())
        })
        .await;
        Ok(())
    }

    fn poll_ack(&mut self, cx: &mut Context<'_>) -> Poll<Option<Ack>> {
        if let Some(a) = self.acks.pop_front() {
            return Poll::Ready(Some(a));
        }
        match self.poll_exchanges(cx) {
            Poll::Ready(Some(ack)) => Poll::Ready(Some(ack)),
            // Nothing in flight: the next send brings more (and reconnects if need be).
            _ => Poll::Pending,
        }
    }

    async fn close(mut self) -> Result<(), DriverError> {
        // Requests still unanswered at the end were given up on (the runner counted them in
        // doubt): without response here too, or the responses account would miss the last.
        let unanswered = match &self.in_flight {
            InFlight::One => usize::from(self.conn.h1_outstanding()),
            // With those refused unprocessed still waiting to be sent again.
            InFlight::Many(set) => set.len() + self.unprocessed.len(),
        };
        for _ in 0..unanswered {
            self.tally
                .tally
                .no_response(&self.tally.stats, self.conn.events());
        }
        self.tally.tally.flush(&self.tally.stats);
        self.conn.close().await;
        // Learned from the last answers, with no send left to say it.
        match self.conn.wrong_protocol() {
            Some(why @ conn::Error::NeverAnswers(_)) => Err(DriverError::Refused(format!(
                "{}: {why}",
                self.conn.ep.display
            ))),
            Some(why) => Err(DriverError::Config(format!(
                "{}: {why}",
                self.conn.ep.display
            ))),
            None => Ok(()),
        }
    }
}

impl HttpProducer {
    /// Drives the connection and returns the next finished exchange as an ack; `Ready(None)`
    /// when nothing is in flight.
    fn poll_exchanges(&mut self, cx: &mut Context<'_>) -> Poll<Option<Ack>> {
        let busy = self.busy();
        let _ = self.conn.poll_drive(cx, busy);
        let done = match &mut self.in_flight {
            // One drive reads and parses whatever has arrived of the response.
            InFlight::One => match self.conn.take_done() {
                Some(done) => done,
                None if self.conn.h1_outstanding() => return Poll::Pending,
                None => return Poll::Ready(None),
            },
            // Responses arrive through hyper's own tasks.
            InFlight::Many(_) => loop {
                self.resend_unprocessed(cx);
                let InFlight::Many(set) = &mut self.in_flight else {
                    unreachable!("HTTP/2 in flight");
                };
                match ready!(Pin::new(set).poll_next(cx)) {
                    Some(Done {
                        token,
                        generation,
                        outcome: Outcome::Unprocessed(body, sends),
                    }) => {
                        self.conn.h2_unprocessed(generation);
                        self.unprocessed.push_back((token, body, sends));
                    }
                    Some(done) => break done,
                    None if self.unprocessed.is_empty() => return Poll::Ready(None),
                    // Waiting for the connection they go on (its waker is registered).
                    None => return Poll::Pending,
                }
            },
        };
        Poll::Ready(Some(self.ack(done)))
    }
}

/// How long a held connection must have been idle for a server's orderly close of it to be
/// its keep-alive timeout, answered by opening another (see [`HttpSession`]'s `keep_alive`).
const REOPEN_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// A held connection of a connection workload.
pub struct HttpSession {
    conn: Conn,
    /// HTTP/2 request bodies are cut from this buffer.
    buf: BytesMut,
    tally: TallyGuard,
}

impl Session for HttpSession {
    /// One full request/response: HTTP has no fire-and-forget, and an HTTP/1.1 connection
    /// cannot carry the next request before this one's answer. Waits at most the connect
    /// timeout for it; an error status is an error.
    async fn publish(&mut self, payload: &[u8]) -> Result<(), DriverError> {
        let limit = self.conn.timeout();
        match tokio::time::timeout(limit, poll_fn(|cx| self.conn.poll_ready(cx, false))).await {
            Ok(Ok(())) => {}
            Ok(Err(NotReady::Gone)) => return Err(DriverError::Closed),
            Err(_) => {
                return Err(DriverError::Timeout(format!(
                    "connection busy for {limit:?}"
                )));
            }
        }
        let conn = &mut self.conn;
        let exchange = if conn.ep.http2 {
            let req = conn.ep.request(payload, &mut self.buf);
            let mut ex = conn.submit_h2(0, req, None, 1)?;
            tokio::time::timeout(
                limit,
                poll_fn(|cx| {
                    let _ = conn.poll_drive(cx, true);
                    Pin::new(&mut ex).poll(cx)
                }),
            )
            .await
        } else {
            // The late answer to a publish that timed out, if any: not this one's.
            drop(conn.take_done());
            conn.submit_h1(0, payload)?;
            tokio::time::timeout(
                limit,
                poll_fn(|cx| {
                    let _ = conn.poll_drive(cx, true);
                    match conn.take_done() {
                        Some(done) => Poll::Ready(done),
                        None => Poll::Pending,
                    }
                }),
            )
            .await
        };
        let Done { outcome, .. } =
            exchange.map_err(|_| DriverError::Timeout(format!("no response within {limit:?}")))?;
        let ok = self.tally.record(&outcome, self.conn.events());
        match outcome {
            Outcome::Status(_) if ok => Ok(()),
            Outcome::Status(code) => Err(DriverError::Send(format!("HTTP status {code}"))),
            Outcome::Failed(e) => Err(DriverError::Send(e.to_string())),
            // Sessions send nothing again (no body is kept for it): not reached.
            Outcome::Unprocessed(..) => Err(DriverError::Send(
                "the server refused the request unprocessed".into(),
            )),
        }
    }

    /// A server closing an idle kept-alive connection in order (its keep-alive timeout:
    /// lighttpd's is 5 s, nginx's 75 s) does what HTTP allows, and a client opens another:
    /// the session does so at once, so a held connection stays held and its next request
    /// goes out (as a drop, it had been counted lost and the client fell silent). A server
    /// that closes within `REOPEN_AFTER` (1 s) of the wait's start, or a connection that fails,
    /// ends the session as the runner counts it.
    async fn keep_alive(&mut self) -> DriverError {
        loop {
            let waiting_since = std::time::Instant::now();
            let end = poll_fn(|cx| {
                if !self.conn.is_connected() {
                    return Poll::Ready(None);
                }
                match self.conn.poll_drive(cx, false) {
                    Some(end) => Poll::Ready(Some(end)),
                    None => Poll::Pending,
                }
            })
            .await;
            match end {
                None | Some(End::Orderly) if waiting_since.elapsed() >= REOPEN_AFTER => {
                    if let Err(e) = self.conn.connect().await {
                        return e;
                    }
                }
                None | Some(End::Orderly) => return DriverError::Closed,
                Some(End::Failed(e)) => {
                    return DriverError::Receive(format!("connection lost: {e}"));
                }
            }
        }
    }

    async fn close(mut self) -> Result<(), DriverError> {
        self.conn.close().await;
        Ok(())
    }
}

impl msgbench_core::registration::Registered for HttpDriver {
    const INFO: msgbench_core::registration::DriverInfo = msgbench_core::registration::DriverInfo {
        name: "http",
        schemes: &["http", "https"],
        about: "HTTP/1.1 keep-alive (msgbench's own allocation-free client) and HTTP/2 (h2c, or ALPN h2 over TLS; hyper): a producer is a connection, a response its request's ack (2xx/3xx ok), status codes counted, TLS; no consumers",
        caps: Capabilities {
            acks: true,
            queue_groups: false,
            request_reply: false,
            responses: true,
            metadata: false,
        },
        section: Some(msgbench_core::scenario::SectionSpec::of::<
            options::HttpSection,
        >()),
    };

    fn build(
        url: &str,
        plan: &msgbench_core::scenario::RunPlan,
        events: EventSink,
    ) -> Result<Self, DriverError> {
        let http = plan.drivers.get::<options::HttpSection>()?;
        let d = HttpDriver::new(
            url,
            HttpOptions {
                method: http.method,
                headers: http.headers,
                http2: http.http2,
                path: None,
                proxy: http.proxy,
            },
            &plan.tls,
            events,
            plan.connect_timeout,
        )?;
        // Refused here, before connecting, so it is the usage error it is (exit 2); the
        // producer checks again for callers that build the driver themselves.
        if let Some(max) = d.max_in_flight()
            && plan.max_in_flight > max
        {
            return Err(one_request_at_a_time(plan.max_in_flight));
        }
        Ok(d)
    }
}
