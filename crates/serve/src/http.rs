//! A small HTTP server to measure against without installing one: the HTTP driver tests'
//! target and the engine of `msgbench serve http`. It answers every request (any method, any path) with one
//! fixed status and a small fixed body once it has read the request body, and counts the
//! requests; nothing is echoed, logged or allocated per request beyond what hyper needs.
//!
//! HTTP/1.1 and HTTP/2 with prior knowledge (h2c) on the same port: hyper-util's auto
//! connection looks at the first bytes of each connection. With a TLS acceptor
//! ([`HttpServer::with_tls`]) the same over TLS (`https://`), HTTP/2 agreed by ALPN when the
//! acceptor offers `h2` (and then only HTTP/2 on that connection); a handshake that fails or takes longer than [`TLS_HANDSHAKE`] just
//! ends that connection.

use bytes::Bytes;
use hyper::body::{Body, Incoming};
use hyper::service::Service;
use hyper::{Request, Response, StatusCode, Version};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use msgbench_driver_http::body::Payload;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Concurrent HTTP/2 streams allowed per connection (above the runner's default window of
/// 1000, so the server is not what queues requests).
pub const MAX_CONCURRENT_STREAMS: u32 = 1024;

/// How long connections get to finish after a stop before they are cut.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Time a client has for its TLS handshake.
pub const TLS_HANDSHAKE: Duration = Duration::from_secs(10);

/// What the server has received, shared: read it while the server runs or after.
#[derive(Debug, Default)]
pub struct ServerCounts {
    /// Requests, counted as each request's head arrives.
    pub requests: AtomicU64,
    /// Of those, the ones that came over HTTP/2.
    pub http2_requests: AtomicU64,
    /// Request body bytes read (counted when a body has been read to its end).
    pub body_bytes: AtomicU64,
}

/// The server's settings and counters.
#[derive(Clone)]
pub struct HttpServer {
    status: StatusCode,
    body: Bytes,
    delay: Option<Duration>,
    counts: Arc<ServerCounts>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    max_streams: u32,
}

impl Default for HttpServer {
    fn default() -> Self {
        HttpServer {
            status: StatusCode::OK,
            body: Bytes::from_static(b"ok\n"),
            delay: None,
            counts: Arc::new(ServerCounts::default()),
            tls: None,
            max_streams: MAX_CONCURRENT_STREAMS,
        }
    }
}

impl HttpServer {
    /// Answers `200 ok\n`.
    pub fn new() -> HttpServer {
        HttpServer::default()
    }

    /// Answers with `code` instead (e.g. 503 to see how a client takes refusals).
    pub fn with_status(mut self, code: u16) -> Result<HttpServer, String> {
        self.status =
            StatusCode::from_u16(code).map_err(|_| format!("{code} is not an HTTP status code"))?;
        Ok(self)
    }

    /// Answers with this body instead.
    pub fn with_body(mut self, body: impl Into<Bytes>) -> HttpServer {
        self.body = body.into();
        self
    }

    /// Answers each request this long after its body arrived (a slow backend; zero = at once).
    pub fn with_delay(mut self, delay: Duration) -> HttpServer {
        self.delay = (!delay.is_zero()).then_some(delay);
        self
    }

    /// Allows HTTP/2 clients this many concurrent streams per connection instead of
    /// [`MAX_CONCURRENT_STREAMS`] (the limit of nginx, 128, or Apache, 100, to see how a
    /// client lives with it).
    pub fn with_max_streams(mut self, streams: u32) -> HttpServer {
        self.max_streams = streams;
        self
    }

    /// Serves over TLS with `acceptor` (which should offer `h2` and `http/1.1` by ALPN).
    pub fn with_tls(mut self, acceptor: tokio_rustls::TlsAcceptor) -> HttpServer {
        self.tls = Some(acceptor);
        self
    }

    /// The counters, shared with the running server.
    pub fn counts(&self) -> Arc<ServerCounts> {
        self.counts.clone()
    }

    /// The service every connection of this server gets.
    pub(crate) fn answer(&self) -> Answer {
        Answer {
            status: self.status,
            body: self.body.clone(),
            delay: self.delay,
            counts: self.counts.clone(),
        }
    }

    /// Serves connections from `listener` until `stop` resolves, on the accept loop every
    /// embedded server shares (TCP_NODELAY, a task per connection, accept errors reported and
    /// retried). On stop the listener closes, connections are asked to finish (HTTP/1.1: after
    /// the request in progress; HTTP/2: GOAWAY) and cut after two seconds.
    pub async fn serve(self, listener: TcpListener, stop: impl Future<Output = ()> + Send) {
        let builders = Arc::new(Builders::new(self.max_streams));
        let answer = self.answer();
        let tls = self.tls.clone();
        let name = "msgbench http server";
        crate::listen::accept_loop_with_grace(
            listener,
            name,
            stop,
            STOP_GRACE,
            |sock, shutdown| {
                let (builders, answer, tls) = (builders.clone(), answer.clone(), tls.clone());
                async move {
                    match tls {
                        None => {
                            let io = TokioIo::new(sock);
                            connection(&builders.either, io, answer, shutdown).await
                        }
                        Some(acceptor) => {
                            let tls = tokio::time::timeout(TLS_HANDSHAKE, acceptor.accept(sock));
                            if let Ok(Ok(tls)) = tls.await {
                                let builder = builders.for_alpn(tls.get_ref().1.alpn_protocol());
                                connection(builder, TokioIo::new(tls), answer, shutdown).await;
                            }
                        }
                    }
                }
            },
        )
        .await;
    }
}

/// A server and the listener it serves (for [`crate::server::Server`]).
pub struct Bound {
    /// The server's settings and counters.
    pub server: HttpServer,
    /// Where it accepts connections.
    pub listener: TcpListener,
}

/// How a connection is served: either version, told apart by its first bytes (plain TCP, and
/// TLS without ALPN), or the one version TLS agreed on. Once ALPN chose `h2` the connection is
/// HTTP/2 and nothing else (RFC 9113 3.3): a client that then sends something other than the
/// connection preface gets the connection closed, not an HTTP/1.1 answer to what it sent.
struct Builders {
    either: auto::Builder<TokioExecutor>,
    h1: auto::Builder<TokioExecutor>,
    h2: auto::Builder<TokioExecutor>,
}

impl Builders {
    fn new(max_streams: u32) -> Builders {
        let builder = || {
            let mut b = auto::Builder::new(TokioExecutor::new());
            b.http2().max_concurrent_streams(max_streams);
            b
        };
        Builders {
            either: builder(),
            h1: builder().http1_only(),
            h2: builder().http2_only(),
        }
    }

    /// The builder for a TLS connection whose handshake agreed on `alpn`.
    fn for_alpn(&self, alpn: Option<&[u8]>) -> &auto::Builder<TokioExecutor> {
        match alpn {
            Some(b"h2") => &self.h2,
            Some(b"http/1.1") => &self.h1,
            _ => &self.either,
        }
    }
}

/// Serves one connection (TCP or TLS) until it ends, finishing gracefully when told to stop.
async fn connection<S>(
    builder: &auto::Builder<TokioExecutor>,
    io: TokioIo<S>,
    answer: Answer,
    mut shutdown: watch::Receiver<bool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let conn = builder.serve_connection(io, answer);
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = shutdown.wait_for(|stop| *stop) => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

/// The service: the same answer to every request.
#[derive(Clone)]
pub(crate) struct Answer {
    status: StatusCode,
    body: Bytes,
    delay: Option<Duration>,
    counts: Arc<ServerCounts>,
}

impl Service<Request<Incoming>> for Answer {
    type Response = Response<Payload>;
    type Error = Infallible;
    type Future = Reply;

    fn call(&self, req: Request<Incoming>) -> Reply {
        self.counts.requests.fetch_add(1, Relaxed);
        if req.version() == Version::HTTP_2 {
            self.counts.http2_requests.fetch_add(1, Relaxed);
        }
        // An HTTP/1.1 request must carry exactly one Host header; the answer to one without,
        // or with two, is 400 (RFC 9112 §3.2, a MUST; hyper leaves it to the service).
        let bad_host = req.version() == Version::HTTP_11
            && req.headers().get_all(hyper::header::HOST).iter().count() != 1;
        Reply {
            body: Some(req.into_body()),
            read: 0,
            answer: self.clone(),
            sleep: None,
            bad_host,
        }
    }
}

/// Reads the request body to its end (discarding it), then answers. Reading it all keeps an
/// HTTP/1.1 connection reusable and means the answer confirms the whole request arrived.
pub(crate) struct Reply {
    body: Option<Incoming>,
    /// Body bytes read so far.
    read: u64,
    answer: Answer,
    /// The configured delay, once the body is in (boxed only when a delay is set).
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    /// An HTTP/1.1 request without exactly one Host header: answered 400, and the
    /// connection closed.
    bad_host: bool,
}

impl Future for Reply {
    type Output = Result<Response<Payload>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        while let Some(body) = this.body.as_mut() {
            match Pin::new(body).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => {
                    this.read += frame.data_ref().map_or(0, |d| d.len() as u64);
                }
                // A broken request body still gets its answer; hyper closes the connection
                // if it cannot be reused.
                Poll::Ready(Some(Err(_))) | Poll::Ready(None) => {
                    this.body = None;
                    if this.read > 0 {
                        this.answer.counts.body_bytes.fetch_add(this.read, Relaxed);
                    }
                    if let Some(d) = this.answer.delay {
                        this.sleep = Some(Box::pin(tokio::time::sleep(d)));
                    }
                }
            }
        }
        if let Some(sleep) = this.sleep.as_mut() {
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.sleep = None;
        }
        if this.bad_host {
            let why = Bytes::from_static(b"an HTTP/1.1 request needs exactly one Host header\n");
            let mut resp = Response::new(Payload::new(why));
            *resp.status_mut() = StatusCode::BAD_REQUEST;
            resp.headers_mut().insert(
                hyper::header::CONNECTION,
                hyper::header::HeaderValue::from_static("close"),
            );
            return Poll::Ready(Ok(resp));
        }
        let mut resp = Response::new(Payload::new(this.answer.body.clone()));
        *resp.status_mut() = this.answer.status;
        Poll::Ready(Ok(resp))
    }
}

/// Entry point for the fuzz targets (`fuzz/`, `crates/fuzz-targets`): the server's request
/// side is private, so this drives it the way a connection does. Hidden from the
/// documentation; not an API.
///
/// Contract: any byte string is a valid argument; the function returns normally for all of
/// them (a panic, hang or unbounded allocation is a bug in the code it drives).
#[doc(hidden)]
pub mod fuzzing {
    use super::{HttpServer, MAX_CONCURRENT_STREAMS};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::server::conn::auto;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Serves one connection of the built-in server (HTTP/1.1 or h2c, chosen by hyper-util as for
    /// a real client) whose client sends `request`, closes its side and reads every answer.
    /// Returns the bytes the server answered.
    ///
    /// # Panics
    /// If the connection is not over within 10 s of the client closing its side: a server must
    /// not wait forever on a client that has gone.
    pub fn server_connection(request: &[u8]) -> Vec<u8> {
        thread_local! {
            static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a current-thread runtime");
        }
        RUNTIME.with(|rt| {
            rt.block_on(async {
                let mut builder = auto::Builder::new(TokioExecutor::new());
                builder
                    .http2()
                    .max_concurrent_streams(MAX_CONCURRENT_STREAMS);
                let answer = HttpServer::new().with_body(&b"ok"[..]).answer();
                let (client, server) = tokio::io::duplex(64 * 1024);
                let conn = async move {
                    let _ = builder.serve_connection(TokioIo::new(server), answer).await;
                };
                let talk = async move {
                    let mut out = Vec::new();
                    let (mut rd, mut wr) = tokio::io::split(client);
                    let send = async {
                        let _ = wr.write_all(request).await;
                        let _ = wr.shutdown().await;
                    };
                    let read = async {
                        let _ = rd.read_to_end(&mut out).await;
                    };
                    tokio::join!(send, read);
                    out
                };
                let both = async { tokio::join!(conn, talk).1 };
                tokio::time::timeout(Duration::from_secs(10), both)
                    .await
                    .expect("the server connection outlived its client by 10 s")
            })
        })
    }
}
