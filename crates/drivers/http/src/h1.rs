//! The HTTP/1.1 client: one request at a time on one connection, with no allocation per
//! request.
//!
//! A generic client pays per request for what a load generator asks the same way every time:
//! building a header map, handing the request to a dispatcher, a channel back with the answer,
//! body frames. Here the request head is serialized once per run ([`Template`]); each request
//! copies it, its `Content-Length` and its body into a reusable write buffer that normally
//! goes out in one write. Responses are read into a reusable buffer and framed by
//! [`parse::Parser`] (heads parsed in place, bodies skipped as they arrive). The state of the
//! one request in flight lives here, in the connection; its owner drives it
//! ([`Client::poll_event`]) and takes each outcome as an [`Event`].

pub(crate) mod parse;

use crate::conn::Error;
use msgbench_core::clock::now_ns;
use msgbench_net::Stream;
use parse::{MAX_HEAD, Parser};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Initial size of a connection's read buffer; it grows (up to [`MAX_HEAD`]) only for a
/// response head that does not fit.
const READ_BUF: usize = 16 * 1024;

/// Every request of a run up to its last header, serialized once.
#[derive(Debug, Clone)]
pub(crate) struct Template {
    /// `METHOD target HTTP/1.1\r\n`, then each header line.
    head: Box<[u8]>,
    /// Requests carry the runner's payload as their body.
    with_body: bool,
    /// HEAD requests: responses have no body.
    head_only: bool,
}

impl Template {
    /// `headers` are written in order, as given (names and values already validated).
    pub fn new<'a>(
        method: &str,
        target: &str,
        headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
        with_body: bool,
    ) -> Template {
        let mut head = Vec::with_capacity(256);
        for part in [method, " ", target, " HTTP/1.1\r\n"] {
            head.extend_from_slice(part.as_bytes());
        }
        for (name, value) in headers {
            head.extend_from_slice(name.as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value);
            head.extend_from_slice(b"\r\n");
        }
        Template {
            head: head.into_boxed_slice(),
            with_body,
            head_only: method == "HEAD",
        }
    }

    /// Writes one request carrying `payload` (unless the method sends no body) into `out`,
    /// replacing its contents.
    pub fn encode(&self, payload: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.head);
        if self.with_body && !payload.is_empty() {
            out.extend_from_slice(b"content-length: ");
            let mut digits = [0u8; 20];
            let mut i = digits.len();
            let mut n = payload.len();
            loop {
                i -= 1;
                digits[i] = b'0' + (n % 10) as u8;
                n /= 10;
                if n == 0 {
                    break;
                }
            }
            out.extend_from_slice(&digits[i..]);
            out.extend_from_slice(b"\r\n\r\n");
            out.extend_from_slice(payload);
        } else {
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// What happened on a connection, as its owner sees it.
#[derive(Debug)]
pub(crate) enum Event {
    /// The response to request `token` is complete. With `last`, the connection has ended in
    /// good order after it (drop the client).
    Response { token: u64, status: u16, last: bool },
    /// The server closed the connection while no request was in flight.
    Closed,
    /// The connection failed (drop the client); the request in flight, if any, got no
    /// complete response.
    Failed { token: Option<u64>, error: Error },
    /// The server closed (or reset) a connection that had already carried a response while
    /// request `token` went out, before any byte of its answer: the race of every kept-alive
    /// connection, where the server closes what it sees as idle just as a request arrives.
    /// The request is still held ([`Client::into_request`]) so that its owner can send it
    /// again on a new connection (RFC 9112 §9.3.1.1 allows it for idempotent requests, and
    /// for any request none of whose bytes were written: `nothing_written`); else it is
    /// failed with [`Error::ClosedIdle`].
    Stale { token: u64, nothing_written: bool },
}

/// A request taken off a connection that closed under it, to be written again on another.
#[derive(Debug)]
pub(crate) struct Request {
    token: u64,
    head_only: bool,
    bytes: Vec<u8>,
}

impl Request {
    /// The runner's token of the request.
    pub fn token(&self) -> u64 {
        self.token
    }
}

/// One HTTP/1.1 connection.
pub(crate) struct Client {
    io: Stream,
    /// The request being written (whole, until the next one replaces it).
    wbuf: Vec<u8>,
    /// How much of `wbuf` the socket has taken.
    written: usize,
    /// Written but not flushed (TLS) or not written yet.
    unsent: bool,
    /// Received bytes not parsed yet are `rbuf[start..end]`.
    rbuf: Vec<u8>,
    start: usize,
    end: usize,
    parser: Parser,
    /// The request in flight: its token, and whether it was a HEAD.
    in_flight: Option<(u64, bool)>,
    /// A response has been completed on this connection: a close under the next request may
    /// be the keep-alive race ([`Event::Stale`]).
    reused: bool,
    /// Bytes have arrived since the request in flight was queued.
    heard: bool,
    /// How long the connection may stay idle and still be reused, from the server's last
    /// `Keep-Alive: timeout` ([`reuse_within`]); 0 when it said none.
    idle_limit_ns: u64,
    /// When the last response was complete (read only with an `idle_limit_ns`).
    answered_ns: u64,
}

/// How long after a response a connection whose server said `Keep-Alive: timeout=idle_s` is
/// still reused: a second less (half for a timeout of 2 s or less), so that a request does not
/// go out just as the server closes the connection (the keep-alive race, [`Event::Stale`]):
/// undici, Node.js's client, keeps the same second.
fn reuse_within(idle_s: u32) -> u64 {
    let t = idle_s as u64 * 1_000_000_000;
    if t > 2_000_000_000 {
        t - 1_000_000_000
    } else {
        t / 2
    }
}

impl Client {
    /// A client on an open connection.
    pub fn new(io: Stream) -> Client {
        Client {
            io,
            wbuf: Vec::new(),
            written: 0,
            unsent: false,
            rbuf: vec![0; READ_BUF],
            start: 0,
            end: 0,
            parser: Parser::new(),
            in_flight: None,
            reused: false,
            heard: false,
            idle_limit_ns: 0,
            answered_ns: 0,
        }
    }

    /// Whether a request is waiting for its response.
    pub fn is_busy(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Queues request `token` (the client must not be busy); it is written when the client is
    /// next polled.
    pub fn send(&mut self, token: u64, template: &Template, payload: &[u8]) {
        debug_assert!(self.in_flight.is_none(), "one request at a time");
        template.encode(payload, &mut self.wbuf);
        self.written = 0;
        self.unsent = true;
        self.heard = false;
        self.in_flight = Some((token, template.head_only));
    }

    /// Takes the request of an [`Event::Stale`] off the connection (which is dropped).
    pub fn into_request(self, token: u64) -> Request {
        Request {
            token,
            head_only: self.in_flight.is_some_and(|(_, h)| h),
            bytes: self.wbuf,
        }
    }

    /// Queues `request`, taken off another connection, as [`Client::send`] does.
    pub fn resend(&mut self, request: Request) {
        debug_assert!(self.in_flight.is_none(), "one request at a time");
        self.wbuf = request.bytes;
        self.written = 0;
        self.unsent = true;
        self.heard = false;
        self.in_flight = Some((request.token, request.head_only));
    }

    /// Whether the connection has been idle longer than its server's `Keep-Alive: timeout`
    /// lets it be reused (see [`reuse_within`]): replace it instead.
    pub fn past_idle_limit(&self) -> bool {
        self.idle_limit_ns > 0
            && self.in_flight.is_none()
            && now_ns().saturating_sub(self.answered_ns) >= self.idle_limit_ns
    }

    /// Forgets the request in flight, which will get no outcome: the caller gives up on it and
    /// drops the connection.
    pub fn forget(&mut self) {
        self.in_flight = None;
    }

    /// The request in flight, if any (to fail it when the connection is dropped).
    pub fn in_flight(&self) -> Option<u64> {
        self.in_flight.map(|(token, _)| token)
    }

    /// Writes the pending request, then reads and parses what has arrived: `Ready` with the
    /// next event, `Pending` (wakers registered) when there is none yet. Once a response is
    /// complete nothing more is read, so an exchange costs no read that finds nothing; while
    /// idle, the connection is read to notice the server closing it.
    pub fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Event> {
        if self.unsent
            && let Poll::Ready(Err(e)) = self.poll_write(cx)
        {
            return Poll::Ready(self.broken(Error::io(e)));
        }
        loop {
            if self.start < self.end {
                let Some((token, head_only)) = self.in_flight else {
                    let early = &self.rbuf[self.start..self.end];
                    let e = if parse::looks_like_h2(early) {
                        Error::Http2Only
                    } else if parse::looks_like_tls(early) {
                        Error::TlsOnly
                    } else {
                        Error::Parse("data received with no request")
                    };
                    return Poll::Ready(self.fail(e));
                };
                let buf = &self.rbuf[self.start..self.end];
                match self.parser.parse(buf, head_only) {
                    Err(e) => return Poll::Ready(self.fail(e)),
                    Ok((n, done)) => {
                        self.start += n;
                        if self.start == self.end {
                            (self.start, self.end) = (0, 0);
                        }
                        if let Some(r) = done {
                            self.in_flight = None;
                            self.reused = true;
                            self.idle_limit_ns = reuse_within(r.idle_s);
                            if self.idle_limit_ns > 0 {
                                self.answered_ns = now_ns();
                            }
                            // Unread request bytes, or bytes beyond the response: the
                            // connection is out of step with the server, use it no more.
                            let last = r.last || self.unsent || self.start < self.end;
                            return Poll::Ready(Event::Response {
                                token,
                                status: r.status,
                                last,
                            });
                        }
                    }
                }
            }
            if let Err(e) = self.make_room() {
                return Poll::Ready(self.fail(e));
            }
            let mut rb = ReadBuf::new(&mut self.rbuf[self.end..]);
            let r = Pin::new(&mut self.io).poll_read(cx, &mut rb);
            let n = rb.filled().len();
            match r {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(self.broken(Error::io(e))),
                Poll::Ready(Ok(())) if n == 0 => return Poll::Ready(self.eof()),
                Poll::Ready(Ok(())) => {
                    self.end += n;
                    self.heard = true;
                }
            }
        }
    }

    /// Writes (and flushes) what is left of the request.
    fn poll_write(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.wbuf.len() {
            match ready!(self.io.poll_write(cx, &self.wbuf[self.written..])) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(n) => self.written += n,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        ready!(self.io.poll_flush(cx))?;
        self.unsent = false;
        Poll::Ready(Ok(()))
    }

    /// Free space at the end of the read buffer: unparsed bytes move to the front, and the
    /// buffer grows only when a head fills it.
    fn make_room(&mut self) -> Result<(), Error> {
        let free = self.rbuf.len() - self.end;
        if free >= READ_BUF / 4 {
            return Ok(());
        }
        if self.start > 0 {
            self.rbuf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        if self.end == self.rbuf.len() {
            if self.rbuf.len() >= MAX_HEAD {
                return Err(Error::Parse("response head too large"));
            }
            let len = (self.rbuf.len() * 2).min(MAX_HEAD);
            self.rbuf.resize(len, 0);
        }
        Ok(())
    }

    /// The server closed the connection.
    fn eof(&mut self) -> Event {
        if let Some(stale) = self.stale() {
            return stale;
        }
        match self.in_flight.take() {
            None => Event::Closed,
            Some((token, _)) => match self.parser.eof() {
                Some(r) => Event::Response {
                    token,
                    status: r.status,
                    last: true,
                },
                None => Event::Failed {
                    token: Some(token),
                    error: Error::Closed,
                },
            },
        }
    }

    /// The socket failed: a reset or broken pipe under a request on a reused connection that
    /// has not answered it is the keep-alive race (a server that closes with our request
    /// unread in its buffer resets the connection instead of closing it).
    fn broken(&mut self, error: Error) -> Event {
        if let Error::Io(e) = &error
            && matches!(
                e.kind(),
                io::ErrorKind::ConnectionReset
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::UnexpectedEof
            )
            && let Some(stale) = self.stale()
        {
            return stale;
        }
        self.fail(error)
    }

    /// [`Event::Stale`] if the connection's end caught the request in flight as the
    /// keep-alive race does: a reused connection, nothing of the answer received.
    fn stale(&self) -> Option<Event> {
        let (token, _) = self.in_flight?;
        (self.reused && !self.heard).then_some(Event::Stale {
            token,
            nothing_written: self.written == 0,
        })
    }

    fn fail(&mut self, error: Error) -> Event {
        Event::Failed {
            token: self.in_flight.take().map(|(token, _)| token),
            error,
        }
    }

    /// Ends the connection politely: the response in flight, if any, is read (and dropped),
    /// then the socket is shut down (TLS: close_notify first).
    pub fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.in_flight.is_some() {
            match ready!(self.poll_event(cx)) {
                Event::Response { last: false, .. } => {}
                _ => return Poll::Ready(()),
            }
        }
        let _ = ready!(Pin::new(&mut self.io).poll_shutdown(cx));
        Poll::Ready(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    /// A client connected to a socket the test plays the server on.
    async fn pair() -> (Client, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (server, _) = l.accept().await.unwrap();
        (Client::new(Stream::from_client_tcp(c)), server)
    }

    fn template(method: &str) -> Template {
        Template::new(
            method,
            "/x",
            [("host", &b"t"[..])],
            matches!(method, "POST" | "PUT"),
        )
    }

    /// Sends request `token` and reads it as the server: the whole request comes in.
    async fn request(
        c: &mut Client,
        server: &mut TcpStream,
        token: u64,
        t: &Template,
        body: &[u8],
    ) {
        c.send(token, t, body);
        assert!(c.is_busy());
        let polled = poll_fn(|cx| Poll::Ready(c.poll_event(cx))).await;
        assert!(polled.is_pending(), "{polled:?}");
        let mut expect = Vec::new();
        t.encode(body, &mut expect);
        let mut got = vec![0; expect.len()];
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(got, expect);
    }

    async fn next(c: &mut Client) -> Event {
        poll_fn(|cx| c.poll_event(cx)).await
    }

    /// The next event is the response to `token` with `status`, `last` on its connection or not.
    async fn expect_response(c: &mut Client, token: u64, status: u16, last: bool) {
        let ev = next(c).await;
        assert!(
            matches!(ev, Event::Response { token: t, status: s, last: l } if t == token && s == status && l == last),
            "{ev:?}"
        );
    }

    #[tokio::test]
    async fn exchanges_follow_each_other_on_one_connection() {
        let (mut c, mut server) = pair().await;
        let post = template("POST");
        request(&mut c, &mut server, 1, &post, b"hello").await;
        server
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .await
            .unwrap();
        expect_response(&mut c, 1, 200, false).await;
        assert!(!c.is_busy());

        // Chunked, written in pieces; an interim 100 first.
        request(&mut c, &mut server, 2, &post, b"again").await;
        for piece in [
            &b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\ntransfer-encoding: chunked\r\n\r\n4\r"[..],
            b"\nnope\r\n0\r\n",
            b"\r\n",
        ] {
            server.write_all(piece).await.unwrap();
        }
        expect_response(&mut c, 2, 404, false).await;

        // HEAD: the Content-Length is the resource's, no body follows.
        request(&mut c, &mut server, 3, &template("HEAD"), b"").await;
        server
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 9999\r\n\r\n")
            .await
            .unwrap();
        let ev = next(&mut c).await;
        assert!(matches!(ev, Event::Response { token: 3, .. }), "{ev:?}");

        // The server ends the connection with a response, in good order.
        request(&mut c, &mut server, 4, &template("GET"), b"ignored").await;
        server
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        expect_response(&mut c, 4, 200, true).await;
    }

    #[tokio::test]
    async fn a_body_running_until_close_ends_with_the_connection() {
        let (mut c, mut server) = pair().await;
        request(&mut c, &mut server, 7, &template("GET"), b"").await;
        server
            .write_all(b"HTTP/1.0 200 OK\r\n\r\nsome body")
            .await
            .unwrap();
        server.write_all(&[b'z'; 40_000]).await.unwrap();
        drop(server);
        expect_response(&mut c, 7, 200, true).await;
    }

    #[tokio::test]
    async fn the_end_of_the_connection_mid_response_fails_the_request() {
        let (mut c, mut server) = pair().await;
        request(&mut c, &mut server, 5, &template("POST"), b"abc").await;
        server
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
            .await
            .unwrap();
        drop(server);
        match next(&mut c).await {
            Event::Failed {
                token: Some(5),
                error: Error::Closed,
            } => {}
            ev => panic!("{ev:?}"),
        }
    }

    #[tokio::test]
    async fn an_idle_connection_ends_in_order_or_fails_on_unsolicited_data() {
        let (mut c, server) = pair().await;
        drop(server);
        assert!(matches!(next(&mut c).await, Event::Closed));

        let (mut c, mut server) = pair().await;
        server.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        match next(&mut c).await {
            Event::Failed {
                token: None,
                error: Error::Parse(_),
            } => {}
            ev => panic!("{ev:?}"),
        }
    }

    #[tokio::test]
    async fn a_close_under_a_request_on_a_reused_connection_is_the_keep_alive_race() {
        let (mut c, mut server) = pair().await;
        let get = template("GET");
        request(&mut c, &mut server, 1, &get, b"").await;
        server
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            .await
            .unwrap();
        expect_response(&mut c, 1, 200, false).await;
        // The server has read the next request and closes as if it had found the
        // connection idle: the request is held for sending again, whole.
        request(&mut c, &mut server, 2, &get, b"").await;
        drop(server);
        match next(&mut c).await {
            Event::Stale {
                token: 2,
                nothing_written: false,
            } => {}
            ev => panic!("{ev:?}"),
        }
        let held = c.into_request(2);
        assert_eq!(held.token(), 2);
        let (mut c, mut server) = pair().await;
        c.resend(held);
        let polled = poll_fn(|cx| Poll::Ready(c.poll_event(cx))).await;
        assert!(polled.is_pending(), "{polled:?}");
        let mut expect = Vec::new();
        get.encode(b"", &mut expect);
        let mut got = vec![0; expect.len()];
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(got, expect);
        // A new connection closed the same way is not the race: the request fails.
        drop(server);
        match next(&mut c).await {
            Event::Failed {
                token: Some(2),
                error: Error::Closed,
            } => {}
            ev => panic!("{ev:?}"),
        }

        // Part of an answer before the close: not the race either.
        let (mut c, mut server) = pair().await;
        request(&mut c, &mut server, 3, &get, b"").await;
        server
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            .await
            .unwrap();
        expect_response(&mut c, 3, 200, false).await;
        request(&mut c, &mut server, 4, &get, b"").await;
        server.write_all(b"HTTP/1.1 200").await.unwrap();
        drop(server);
        match next(&mut c).await {
            Event::Failed {
                token: Some(4),
                error: Error::Closed,
            } => {}
            ev => panic!("{ev:?}"),
        }
    }

    #[tokio::test]
    async fn a_malformed_response_fails_the_request() {
        let (mut c, mut server) = pair().await;
        request(&mut c, &mut server, 9, &template("GET"), b"").await;
        server.write_all(b"HTTP/1.1 2xx OK\r\n\r\n").await.unwrap();
        match next(&mut c).await {
            Event::Failed {
                token: Some(9),
                error: e @ Error::Parse(_),
            } => assert!(e.to_string().contains("status line"), "{e}"),
            ev => panic!("{ev:?}"),
        }
    }
}
