//! One WebSocket client connection: URL parsing, the upgrade handshake, masked writes, frame
//! reads with the control frames answered (ping → pong, close → close), reconnection and the
//! closing handshake. All state lives in the struct, so the async methods are cancel-safe.

use crate::alive::{KeepAlive, Tick};
use crate::codec::{self, Frame};
use bytes::BytesMut;
use msgbench_core::driver::{ConnectFailure, DriverError, DriverEventKind, EventSink};
use msgbench_net::{Backoff, NetError, Target, Tls, Wire};
use std::future::poll_fn;
use std::io;
use std::net::IpAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

/// Largest frame accepted from a server.
pub const MAX_FRAME: u64 = 64 * 1024 * 1024;
/// Largest HTTP head accepted in the handshake.
const MAX_HEAD: usize = 16 * 1024;

/// Where to connect: `ws[s]://host[:port][,host[:port]...][/path][?query]`. With several
/// hosts, client `i` connects to host `i % n` (a fan-out of 100,000 receivers spread over
/// several broadcast servers, each within its own open-file limit). The path and query may
/// hold `{i}` and `{topic}`, replaced per client (rango-style `?stream=public.{i}`).
#[derive(Debug)]
pub struct Endpoint {
    /// Host and port of each server, with its `Host` header value.
    pub targets: Vec<(Target, String)>,
    /// TLS for `wss://`.
    pub tls: Option<Tls>,
    /// Path and query, placeholders unreplaced.
    pub path: String,
    /// The URL for messages (no credentials can be in a ws URL's authority we use).
    pub display: String,
    /// Extra headers of the upgrade request (`[ws] headers`, `--header`).
    pub headers: Vec<(String, String)>,
    /// The subprotocols those headers offer: the only ones the server may pick.
    pub subprotocols: Vec<String>,
    /// Failed reconnections reported so far by this endpoint's clients (the first
    /// [`RECONNECT_FAILURES_TOLD`] are, each with its cause; the rest only counted: a hundred
    /// thousand receivers of a server that went away would otherwise print a line each).
    reconnect_failures_told: std::sync::atomic::AtomicU32,
}

/// How many failed reconnections an endpoint's clients report as warnings.
const RECONNECT_FAILURES_TOLD: u32 = 5;

impl Endpoint {
    /// Parses the URL; `tls` builds the TLS settings for `wss://`.
    pub fn parse(
        url: &str,
        tls: impl FnOnce() -> Result<Tls, String>,
    ) -> Result<Endpoint, DriverError> {
        let display = msgbench_core::redact::url(url);
        let (secure, rest) = if let Some(r) = url.strip_prefix("ws://") {
            (false, r)
        } else if let Some(r) = url.strip_prefix("wss://") {
            (true, r)
        } else {
            return Err(DriverError::Config(format!(
                "`{display}` is not a ws:// or wss:// URL"
            )));
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_string()),
            Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
            None => (rest, "/".to_string()),
        };
        if authority.contains('@') {
            return Err(DriverError::Config(format!(
                "{display}: credentials in a ws:// URL are not supported (put a token in the query)"
            )));
        }
        let targets = authority
            .split(',')
            .map(|h| Target::parse(h, if secure { 443 } else { 80 }).map(|t| (t, h.to_string())))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|m| DriverError::Config(format!("{display}: {m}")))?;
        let tls = if secure {
            Some(tls().map_err(|m| DriverError::Config(format!("TLS: {m}")))?)
        } else {
            None
        };
        Ok(Endpoint {
            targets,
            tls,
            path,
            display,
            headers: Vec::new(),
            subprotocols: Vec::new(),
            reconnect_failures_told: Default::default(),
        })
    }
}

/// Where one client connects from and to, and how it holds its socket.
#[derive(Debug, Clone, Copy, Default)]
pub struct Dial {
    /// The client's index: it connects to host `index % n` of the URL.
    pub index: u64,
    /// Local address to connect from (`--source-addrs`).
    pub source: Option<IpAddr>,
    /// Hold the socket in an io_uring table instead of a descriptor (plain `ws://` only):
    /// for client counts beyond the open-file limit.
    pub fd_free: bool,
}

/// Whether a 101 answer keeps to what the request offered (RFC 6455 §4.1): no extension
/// (msgbench offers none, so a frame compressed by one would be read as garbage) and, if the
/// server names a subprotocol, one the request offered. The error says which was not kept to.
fn agreed(head: &codec::Head, offered: &[String]) -> Result<(), String> {
    if let Some(ext) = head
        .header("sec-websocket-extensions")
        .filter(|e| !e.trim().is_empty())
    {
        return Err(format!(
            "the server accepted the upgrade with extension `{ext}`, which msgbench did not offer"
        ));
    }
    match head.header("sec-websocket-protocol").map(str::trim) {
        Some(p) if !p.is_empty() && !offered.iter().any(|o| o == p) => Err(if offered.is_empty() {
            format!(
                "the server chose subprotocol `{p}` though none was offered (offer it with \
                 --header 'Sec-WebSocket-Protocol: {p}')"
            )
        } else {
            format!(
                "the server chose subprotocol `{p}`, not one of those offered ({})",
                offered.join(", ")
            )
        }),
        _ => Ok(()),
    }
}

/// How the server ended a connection, or why it broke.
fn closed(code: u16, reason: &[u8]) -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        format!(
            "the server closed the WebSocket: code {code}{}{}{}",
            codec::close_meaning(code)
                .map(|m| format!(" ({m})"))
                .unwrap_or_default(),
            if reason.is_empty() { "" } else { ", " },
            String::from_utf8_lossy(reason)
        ),
    )
}

/// A live (or reconnecting) connection.
pub struct Conn {
    ep: Arc<Endpoint>,
    /// Path and query with this client's placeholders replaced.
    path: String,
    name: String,
    /// Sent after every handshake (a subscribe request), if any.
    hello: Option<String>,
    events: Option<EventSink>,
    dial: Dial,
    timeout: Duration,
    /// Socket and buffers.
    pub wire: Wire,
    mask: u64,
    /// Pauses between reconnection attempts.
    backoff: Backoff,
    /// When the last handshake completed.
    opened: Instant,
    /// Pings on a quiet connection, fails a dead one ([`Conn::keep_alive`]).
    alive: Option<KeepAlive>,
    /// Reconnection attempts have failed since the connection was lost (the first failure
    /// of each outage is reported, not every retry).
    failing: bool,
}

impl Conn {
    /// Connects, upgrades and sends `hello`; the error says why not.
    #[allow(clippy::too_many_arguments)]
    pub async fn connect(
        ep: Arc<Endpoint>,
        path: String,
        name: String,
        hello: Option<String>,
        events: Option<EventSink>,
        dial: Dial,
        timeout: Duration,
        chunk: usize,
    ) -> Result<Conn, DriverError> {
        let seed = msgbench_core::clock::now_ns() ^ (name.len() as u64).rotate_left(17);
        let mut c = Conn {
            ep,
            path,
            name,
            hello,
            events,
            dial,
            timeout,
            wire: Wire::new(chunk),
            mask: seed | 1,
            backoff: Backoff::new(Duration::from_millis(100), Duration::from_secs(2)),
            opened: Instant::now(),
            alive: None,
            failing: false,
        };
        c.handshake().await?;
        Ok(c)
    }

    fn fail(&self, cause: ConnectFailure, reason: String) -> DriverError {
        DriverError::Connect {
            target: self.ep.display.clone(),
            reason,
            cause,
        }
    }

    async fn handshake(&mut self) -> Result<(), DriverError> {
        self.wire.detach();
        let ep = self.ep.clone();
        let (target, host) = &ep.targets[(self.dial.index % ep.targets.len() as u64) as usize];
        let stream = msgbench_net::connect_with(
            target,
            self.dial.source,
            ep.tls.as_ref(),
            self.timeout,
            self.dial.fd_free && ep.tls.is_none(),
        )
        .await
        .map_err(|e: NetError| self.fail(e.cause, e.detail))?;
        self.wire.attach(stream);
        let key = codec::new_key(self.next_mask());
        codec::put_request(&mut self.wire.wbuf, host, &self.path, &key, &ep.headers);
        let limit = self.timeout;
        let head = tokio::time::timeout(limit, async {
            self.wire.flush().await?;
            poll_fn(|cx| {
                self.wire
                    .poll_next(cx, true, |b| codec::parse_head(b, MAX_HEAD))
            })
            .await
        })
        .await;
        let head = match head {
            Err(_) => {
                self.wire.detach();
                return Err(self.fail(
                    ConnectFailure::Timeout,
                    format!("no answer to the WebSocket upgrade within {limit:?}"),
                ));
            }
            Ok(Err(e)) => {
                // Not HTTP that answered (or hung up half-way): say what did, when it shows.
                let what = msgbench_net::sniff(&self.wire.rbuf);
                self.wire.detach();
                if let Some(what) = what {
                    return Err(self.fail(
                        ConnectFailure::Rejected,
                        format!("the server on this port speaks {what}, not WebSocket"),
                    ));
                }
                let detail = match e.kind() {
                    std::io::ErrorKind::UnexpectedEof => format!(
                        "{e}: the server closed the connection before answering the upgrade (a \
                         TLS port does this to a plain client: use wss://; so does a TCP proxy \
                         whose server is down)"
                    ),
                    _ => e.to_string(),
                };
                return Err(self.fail(msgbench_net::classify(&e), detail));
            }
            Ok(Ok(h)) => h,
        };
        if head.status() != Some(101) {
            self.wire.detach();
            return Err(self.fail(
                ConnectFailure::Rejected,
                format!("the server refused the WebSocket upgrade: {}", head.first),
            ));
        }
        if head.header("sec-websocket-accept") != Some(codec::accept_key(&key).as_str()) {
            self.wire.detach();
            return Err(self.fail(
                ConnectFailure::Rejected,
                "the server's Sec-WebSocket-Accept does not match the key".into(),
            ));
        }
        if let Err(reason) = agreed(&head, &ep.subprotocols) {
            self.wire.detach();
            return Err(self.fail(ConnectFailure::Rejected, reason));
        }
        if let Some(h) = self.hello.clone() {
            self.put(codec::OP_TEXT, h.as_bytes());
            if let Err(e) = self.wire.flush().await {
                self.wire.detach();
                return Err(self.fail(msgbench_net::classify(&e), e.to_string()));
            }
        }
        self.wire.shrink();
        self.opened = Instant::now();
        if let Some(alive) = self.alive.as_mut() {
            alive.restart();
        }
        Ok(())
    }

    fn next_mask(&mut self) -> u64 {
        let mut x = self.mask;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.mask = x;
        x
    }

    /// Buffers one masked frame.
    #[inline]
    pub fn put(&mut self, opcode: u8, payload: &[u8]) {
        let key = (self.next_mask() as u32).to_ne_bytes();
        codec::put_frame(&mut self.wire.wbuf, opcode, payload, Some(key));
    }

    /// Whether the connection is up.
    pub fn is_connected(&self) -> bool {
        self.wire.is_connected()
    }

    /// Writes everything buffered.
    pub async fn flush(&mut self) -> io::Result<()> {
        self.wire.flush().await
    }

    /// Pings the server when it has sent nothing for `period`, and fails the connection when
    /// it sends nothing for another (see [`crate::alive`]); the reads of [`Conn::poll_data`]
    /// with `flush` drive it. Zero leaves the connection without.
    pub fn keep_alive(&mut self, period: Duration) {
        self.alive = (!period.is_zero()).then(|| KeepAlive::new(period));
    }

    /// The next data frame (text, binary or continuation); pings are answered, pongs skipped,
    /// a close is answered and becomes an error carrying its code. Cancel-safe. With `flush`,
    /// the keep-alive (if any) runs while nothing arrives.
    pub fn poll_data(&mut self, cx: &mut Context<'_>, flush: bool) -> Poll<io::Result<Frame>> {
        loop {
            let mut broken = None;
            let f = match self.wire.poll_next(cx, flush, |b| {
                codec::parse(b, false, MAX_FRAME).inspect_err(|e| broken = Some(e.close_code()))
            }) {
                Poll::Ready(Ok(f)) => f,
                Poll::Ready(Err(e)) => {
                    return Poll::Ready(Err(match broken {
                        Some(code) => self.fail_protocol(code, &e),
                        None => e,
                    }));
                }
                Poll::Pending => {
                    let Some(alive) = self.alive.as_mut().filter(|_| flush) else {
                        return Poll::Pending;
                    };
                    match alive.poll(cx) {
                        Tick::Wait => return Poll::Pending,
                        Tick::Ping => {
                            // Written by the next turn's flush.
                            self.put(codec::OP_PING, b"msgbench");
                            continue;
                        }
                        Tick::Dead => {
                            let period = alive.period();
                            return Poll::Ready(Err(io::Error::new(
                                io::ErrorKind::TimedOut,
                                format!(
                                    "nothing from the server for {:?}, a ping unanswered \
                                     (two keep-alive periods)",
                                    period * 2
                                ),
                            )));
                        }
                    }
                }
            };
            if let Some(alive) = self.alive.as_mut() {
                alive.heard();
            }
            match f.opcode {
                codec::OP_PING => {
                    let p = f.payload.clone();
                    self.put(codec::OP_PONG, &p);
                }
                codec::OP_PONG => {}
                codec::OP_CLOSE => {
                    if let Some(code) = codec::bad_close(&f.payload) {
                        let e = io::Error::other(format!(
                            "a close frame with status code {} or a reason that is not UTF-8",
                            codec::close_code(&f.payload)
                        ));
                        return Poll::Ready(Err(self.fail_protocol(code, &e)));
                    }
                    let code = codec::close_code(&f.payload);
                    let key = (self.next_mask() as u32).to_ne_bytes();
                    // The answer carries the server's code, or none when it sent none: 1005
                    // only stands for "none" and must never be sent [RFC 6455 7.4.1].
                    let answer: &[u8] = if f.payload.is_empty() {
                        &[]
                    } else {
                        &f.payload[..2]
                    };
                    codec::put_frame(&mut self.wire.wbuf, codec::OP_CLOSE, answer, Some(key));
                    let mut cx2 = Context::from_waker(std::task::Waker::noop());
                    let _ = self.wire.poll_flush(&mut cx2);
                    let reason = f.payload.get(2..).unwrap_or(&[]);
                    return Poll::Ready(Err(closed(code, reason)));
                }
                _ => return Poll::Ready(Ok(f)),
            }
        }
    }

    /// The server broke the protocol: the connection is failed as RFC 6455 §7.1.7 says, with a
    /// close frame carrying `code` (1002, or 1009 for a frame over the limit) written before
    /// the socket is dropped, so the server's log says why. The error is `InvalidData`, which
    /// [`Conn::lost`] reports as a protocol violation.
    fn fail_protocol(&mut self, code: u16, e: &io::Error) -> io::Error {
        let key = (self.next_mask() as u32).to_ne_bytes();
        codec::put_close(&mut self.wire.wbuf, code, Some(key));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let _ = self.wire.poll_flush(&mut cx);
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the server broke the WebSocket protocol ({e}); failed the connection with close {code}"
            ),
        )
    }

    /// A text message that is not UTF-8 (RFC 6455 §8.1): the connection is failed with close
    /// 1007, reported as a protocol violation like any other broken frame.
    pub fn fail_invalid_text(&mut self) -> io::Error {
        let e = io::Error::other("a text message is not valid UTF-8");
        self.fail_protocol(codec::CLOSE_INVALID_TEXT, &e)
    }

    /// The next data frame (see [`Conn::poll_data`]).
    pub async fn read_data(&mut self) -> io::Result<Frame> {
        poll_fn(|cx| self.poll_data(cx, true)).await
    }

    /// Marks the connection lost (once) and reports it: a protocol violation (an
    /// `InvalidData` error) as one, anything else as a lost connection. A connection lost
    /// within a second of opening makes the next attempt wait ([`Backoff::lost_after`]): a
    /// server that breaks the protocol at its first frame is not reconnected to in a loop.
    pub fn lost(&mut self, why: &io::Error) {
        if self.wire.detach() {
            self.backoff.lost_after(self.opened.elapsed());
            if let Some(ev) = &self.events {
                if why.kind() == io::ErrorKind::InvalidData {
                    ev.protocol_violation(&self.name, why);
                } else {
                    ev.connection_lost(&self.name, why);
                }
            }
        }
    }

    /// One reconnection attempt (handshake and hello), once the backoff allows it. A failed
    /// one is returned (the caller counts it as a connect error); the first of an outage is
    /// also reported with its cause (a refused connection, a proxy's 502 to the upgrade), or
    /// receivers kept away say nothing until their deliveries are missed.
    pub async fn try_reconnect(&mut self) -> Result<(), DriverError> {
        self.backoff.wait().await;
        if let Err(e) = self.handshake().await {
            self.backoff.failed();
            if !std::mem::replace(&mut self.failing, true)
                && let Some(ev) = &self.events
            {
                use std::sync::atomic::Ordering;
                let told = self
                    .ep
                    .reconnect_failures_told
                    .fetch_add(1, Ordering::Relaxed)
                    + 1;
                if told <= RECONNECT_FAILURES_TOLD {
                    let rest = if told == RECONNECT_FAILURES_TOLD {
                        " (further failed reconnections are counted as connect errors, not reported)"
                    } else {
                        ""
                    };
                    ev.emit(
                        DriverEventKind::Warning,
                        format!(
                            "{}: reconnecting failed: {e}; retrying with backoff until it works{rest}",
                            self.name
                        ),
                    );
                }
            }
            return Err(e);
        }
        self.failing = false;
        if let Some(ev) = &self.events {
            ev.reconnected(&self.name, &self.ep.display, "");
        }
        Ok(())
    }

    /// The closing handshake: close 1000, then wait (briefly) for the server's close.
    pub async fn close(&mut self) {
        if !self.wire.is_connected() {
            return;
        }
        let key = (self.next_mask() as u32).to_ne_bytes();
        codec::put_close(&mut self.wire.wbuf, codec::CLOSE_NORMAL, Some(key));
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            self.wire.flush().await?;
            loop {
                // Data still in flight is skipped; the server's close ends the wait (as an
                // error from read_data, which would answer it: the socket is dropped first).
                let f = poll_fn(|cx| {
                    self.wire
                        .poll_next(cx, false, |b| codec::parse(b, false, MAX_FRAME))
                })
                .await?;
                if f.opcode == codec::OP_CLOSE {
                    return Ok::<(), io::Error>(());
                }
            }
        })
        .await;
        self.wire.detach();
    }
}

/// Replaces `{i}` and `{topic}` in a path or message template.
pub fn fill(template: &str, i: u64, topic: &str) -> String {
    template
        .replace("{i}", &i.to_string())
        .replace("{topic}", topic)
}

/// A reassembler for fragmented messages: frames in, whole messages out.
#[derive(Debug, Default)]
pub struct Message {
    parts: Option<BytesMut>,
}

impl Message {
    /// The bytes of the message begun so far (0 between messages).
    pub fn pending_len(&self) -> usize {
        self.parts.as_ref().map_or(0, BytesMut::len)
    }

    /// Feeds one data frame; a whole message comes back when it is complete.
    pub fn feed(&mut self, f: Frame) -> Option<bytes::Bytes> {
        match (f.fin, self.parts.as_mut()) {
            (true, None) => Some(f.payload),
            (false, None) => {
                self.parts = Some(BytesMut::from(&f.payload[..]));
                None
            }
            (fin, Some(p)) => {
                p.extend_from_slice(&f.payload);
                if fin {
                    self.parts.take().map(|p| p.freeze())
                } else {
                    None
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_tls() -> Result<Tls, String> {
        Err("no TLS here".into())
    }

    #[test]
    fn endpoints() {
        let e = Endpoint::parse("ws://127.0.0.1:9000/feed?stream=public.{i}", no_tls).unwrap();
        assert_eq!(e.targets[0].0.port, 9000);
        assert_eq!(e.path, "/feed?stream=public.{i}");
        assert_eq!(fill(&e.path, 7, "t"), "/feed?stream=public.7");
        let e = Endpoint::parse("ws://h?x=1", no_tls).unwrap();
        assert_eq!((e.targets[0].0.port, e.path.as_str()), (80, "/?x=1"));
        let e = Endpoint::parse("ws://a:1,b:2/feed", no_tls).unwrap();
        let hosts: Vec<_> = e
            .targets
            .iter()
            .map(|(t, h)| (t.port, h.as_str()))
            .collect();
        assert_eq!(
            (hosts, e.path.as_str()),
            (vec![(1, "a:1"), (2, "b:2")], "/feed")
        );
        assert!(
            Endpoint::parse("wss://h", no_tls).is_err(),
            "TLS settings fail"
        );
        assert!(Endpoint::parse("http://h", no_tls).is_err());
        assert!(Endpoint::parse("ws://u:p@h", no_tls).is_err());
    }

    #[test]
    fn fragments_reassemble() {
        let mut m = Message::default();
        let f = |fin, p: &'static [u8]| Frame {
            fin,
            opcode: codec::OP_BINARY,
            payload: bytes::Bytes::from_static(p),
        };
        assert_eq!(m.feed(f(true, b"whole")).unwrap(), &b"whole"[..]);
        assert!(m.feed(f(false, b"ab")).is_none());
        assert!(m.feed(f(false, b"cd")).is_none());
        assert_eq!(m.feed(f(true, b"e")).unwrap(), &b"abcde"[..]);
    }

    /// A 101 naming an extension or a subprotocol the request did not offer fails the
    /// connection (RFC 6455 §4.1); one naming an offered subprotocol, or none, is kept.
    #[test]
    fn answers_must_keep_to_the_offer() {
        let head = |extra: &str| {
            let mut b = BytesMut::from(
                format!("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n{extra}\r\n")
                    .as_bytes(),
            );
            codec::parse_head(&mut b, 4096).unwrap().unwrap()
        };
        let mqtt = ["mqtt".to_string()];
        assert!(agreed(&head(""), &[]).is_ok());
        assert!(agreed(&head(""), &mqtt).is_ok());
        assert!(agreed(&head("Sec-WebSocket-Protocol: mqtt\r\n"), &mqtt).is_ok());
        let e = agreed(&head("Sec-WebSocket-Protocol: chat\r\n"), &[]).unwrap_err();
        assert!(
            e.contains("none was offered") && e.contains("'Sec-WebSocket-Protocol: chat'"),
            "{e}"
        );
        let e = agreed(&head("Sec-WebSocket-Protocol: chat\r\n"), &mqtt).unwrap_err();
        assert!(e.contains("not one of those offered (mqtt)"), "{e}");
        let e = agreed(
            &head("Sec-WebSocket-Extensions: permessage-deflate\r\n"),
            &mqtt,
        )
        .unwrap_err();
        assert!(e.contains("permessage-deflate"), "{e}");
    }

    #[test]
    fn the_upgrade_carries_extra_headers() {
        let mut b = BytesMut::new();
        let extra = [
            ("Host".to_string(), "gw.example".to_string()),
            ("Authorization".to_string(), "Bearer t".to_string()),
        ];
        codec::put_request(&mut b, "127.0.0.1:1", "/x", "k", &extra);
        let text = String::from_utf8(b.to_vec()).unwrap();
        assert!(text.starts_with("GET /x HTTP/1.1\r\n"), "{text}");
        assert_eq!(text.matches("Host:").count(), 1, "{text}");
        assert!(text.contains("Host: gw.example\r\n") && text.contains("User-Agent: msgbench\r\n"));
        assert!(text.ends_with("Authorization: Bearer t\r\n\r\n"), "{text}");
    }
}
