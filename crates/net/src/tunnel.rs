//! Another protocol carried in WebSocket binary frames (RFC 6455): MQTT over WebSocket, which
//! is how browsers, and many gateways and device fleets, reach brokers (EMQX, HiveMQ,
//! RabbitMQ's `web_mqtt`, Mosquitto's `websockets` listener, ActiveMQ's `ws` transport).
//!
//! [`connect_ws`] opens the connection (TCP, TLS for `wss`), makes the HTTP/1.1 upgrade and
//! returns a [`Stream`] like any other: the driver above reads and writes its own protocol's
//! bytes and never sees a frame. Each write becomes masked binary frames of up to 16 KiB (a
//! driver writes its whole buffer at once, so a batch of small packets shares a frame); reads
//! take the payloads of data frames in order, whatever their boundaries (a server may split or
//! join the inner protocol's packets across frames at will). Pings are answered with pongs,
//! and the server's close ends the stream with its code and reason, answered as RFC 6455
//! §5.5.1 asks.

use crate::stream::{Io, Stream};
use crate::{NetError, Target, Tls, ws};
use bytes::{Buf, BytesMut};
use msgbench_core::driver::ConnectFailure;
use std::future::poll_fn;
use std::io;
use std::net::IpAddr;
use std::task::{Context, Poll};
use std::time::Duration;

/// The largest frame taken from a server (a broker's own packet limit is far below).
const MAX_FRAME: u64 = 1 << 28;
/// The largest frame sent: a write of more goes out as several frames. Servers cap what they
/// take (Netty, under Artemis and others, at 64 KiB by default, and it resets the connection
/// past that), while the inner protocol's packets may cross frame boundaries (MQTT 5.0 §6.0,
/// 3.1.1 §6.0), so small frames cost only their 8-byte headers.
const MAX_OUT_FRAME: usize = 16 * 1024;
/// The largest HTTP head taken in answer to the upgrade.
const MAX_HEAD: usize = 16 * 1024;

/// What the upgrade request asks for.
#[derive(Debug, Clone)]
pub struct Upgrade {
    /// The `Host` header (`host[:port]` as the URL gave it).
    pub host: String,
    /// Path and query of the WebSocket endpoint (`/mqtt`, `/ws`, ...).
    pub path: String,
    /// The subprotocol to ask for (`Sec-WebSocket-Protocol`: `mqtt` for MQTT).
    pub protocol: Option<&'static str>,
}

/// A connection's WebSocket state under the inner protocol.
pub(crate) struct Tunnel {
    inner: Stream,
    /// Bytes read and not yet a whole frame.
    raw: BytesMut,
    /// Framed bytes not yet written (whole frames only: its end is a frame boundary, so a pong
    /// or close can be appended at any time).
    tx: BytesMut,
    /// Masking key generator (xorshift): client frames must be masked.
    mask: u64,
    /// Set once the server closed the WebSocket: why, for every read after.
    closed: Option<String>,
    /// Payload bytes decoded and not yet taken, for readers through tokio's `AsyncRead`.
    spill: BytesMut,
    /// Our close frame is queued (once).
    closing: bool,
}

impl Tunnel {
    fn next_mask(&mut self) -> [u8; 4] {
        let mut x = self.mask;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.mask = x;
        (x as u32).to_ne_bytes()
    }

    /// Writes what is framed; `Ready(Ok)` once `tx` is empty.
    fn push(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.tx.is_empty() {
            match self.inner.poll_write(cx, &self.tx) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => self.tx.advance(n),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }

    /// The error every read returns once the server closed.
    fn ended(&self) -> Option<io::Error> {
        self.closed
            .as_ref()
            .map(|why| io::Error::new(io::ErrorKind::UnexpectedEof, why.clone()))
    }

    /// Appends the payloads of whole data frames to `buf`, reading as needed; the number of
    /// bytes appended (0: the connection ended without a close frame).
    pub(crate) fn poll_read_into(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
        chunk: usize,
    ) -> Poll<io::Result<usize>> {
        if let Some(e) = self.ended() {
            return Poll::Ready(Err(e));
        }
        let mut n = 0;
        loop {
            match ws::parse(&mut self.raw, false, MAX_FRAME) {
                Ok(Some(f)) => match f.opcode {
                    ws::OP_BINARY | ws::OP_CONT | ws::OP_TEXT => {
                        buf.extend_from_slice(&f.payload);
                        n += f.payload.len();
                    }
                    ws::OP_PING => {
                        let key = self.next_mask();
                        ws::put_frame(&mut self.tx, ws::OP_PONG, &f.payload, Some(key));
                        // A full socket keeps the pong queued for the next write or flush.
                        if let Poll::Ready(Err(e)) = self.push(cx) {
                            return Poll::Ready(Err(e));
                        }
                    }
                    ws::OP_CLOSE => {
                        let code = ws::close_code(&f.payload);
                        // Answered as RFC 6455 §5.5.1 asks: with the code, none for none, and
                        // a protocol error for a code no endpoint may send.
                        let key = self.next_mask();
                        match ws::bad_close(&f.payload) {
                            Some(bad) => ws::put_close(&mut self.tx, bad, Some(key)),
                            None if f.payload.is_empty() => {
                                ws::put_frame(&mut self.tx, ws::OP_CLOSE, &[], Some(key))
                            }
                            None => ws::put_close(&mut self.tx, code, Some(key)),
                        }
                        let _ = self.push(cx);
                        let reason = f.payload.get(2..).map(String::from_utf8_lossy);
                        let meaning = ws::close_meaning(code).unwrap_or("");
                        self.closed = Some(match (f.payload.len() >= 2, reason) {
                            (false, _) => "the server closed the WebSocket".to_string(),
                            (true, Some(r)) if !r.is_empty() => {
                                format!("the server closed the WebSocket: {code} {meaning} ({r})")
                            }
                            _ => format!("the server closed the WebSocket: {code} {meaning}"),
                        });
                        if n > 0 {
                            return Poll::Ready(Ok(n));
                        }
                        return Poll::Ready(Err(self.ended().expect("just closed")));
                    }
                    _ => {}
                },
                Ok(None) => {
                    if n > 0 {
                        return Poll::Ready(Ok(n));
                    }
                    match self.inner.poll_read_into(cx, &mut self.raw, chunk) {
                        Poll::Ready(Ok(0)) => return Poll::Ready(Ok(0)),
                        Poll::Ready(Ok(_)) => {}
                        other => return other,
                    }
                }
                Err(e) => {
                    let key = self.next_mask();
                    ws::put_close(&mut self.tx, e.close_code(), Some(key));
                    let _ = self.push(cx);
                    self.closed = Some(format!("the server broke the WebSocket protocol: {e}"));
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        self.closed.clone().expect("just set"),
                    )));
                }
            }
        }
    }

    /// Frames all of `data` (as binary frames of at most [`MAX_OUT_FRAME`] bytes) once what
    /// was framed before is written.
    pub(crate) fn poll_write(
        &mut self,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Some(why) = &self.closed {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, why.clone())));
        }
        match self.push(cx) {
            Poll::Ready(Ok(())) => {}
            other => return other.map_ok(|()| 0),
        }
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        for part in data.chunks(MAX_OUT_FRAME) {
            let key = self.next_mask();
            ws::put_frame(&mut self.tx, ws::OP_BINARY, part, Some(key));
        }
        // Taken whole: what the socket does not take now goes out at the next write or flush.
        if let Poll::Ready(Err(e)) = self.push(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(data.len()))
    }

    pub(crate) fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.push(cx) {
            Poll::Ready(Ok(())) => self.inner.poll_flush(cx),
            other => other,
        }
    }

    /// For tokio's `AsyncRead`: decoded payload handed out as the caller's buffer allows.
    pub(crate) fn poll_read(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.spill.is_empty() {
            let mut spill = std::mem::take(&mut self.spill);
            let r = self.poll_read_into(cx, &mut spill, 4096);
            self.spill = spill;
            match r {
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        let n = self.spill.len().min(out.remaining());
        out.put_slice(&self.spill[..n]);
        self.spill.advance(n);
        Poll::Ready(Ok(()))
    }

    /// Closes the WebSocket politely (close 1000), then the connection under it.
    pub(crate) fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.closing && self.closed.is_none() {
            self.closing = true;
            let key = self.next_mask();
            ws::put_close(&mut self.tx, ws::CLOSE_NORMAL, Some(key));
        }
        match self.push(cx) {
            Poll::Ready(Ok(())) => {
                tokio::io::AsyncWrite::poll_shutdown(std::pin::Pin::new(&mut self.inner), cx)
            }
            other => other,
        }
    }

    pub(crate) fn inner(&self) -> &Stream {
        &self.inner
    }
}

/// Connects as [`connect_with`](crate::connect_with) does (TLS for `wss`), then upgrades the
/// connection to a WebSocket at `up.path`: the stream returned carries the inner protocol in
/// binary frames. All within `timeout`. A refused upgrade, or a server that is not a WebSocket
/// endpoint, is a [`ConnectFailure::Rejected`] saying what answered.
pub async fn connect_ws(
    target: &Target,
    source: Option<IpAddr>,
    tls: Option<&Tls>,
    timeout: Duration,
    fd_free: bool,
    up: &Upgrade,
) -> Result<Stream, NetError> {
    let work = async {
        let mut s = crate::connect_with(target, source, tls, timeout, fd_free).await?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            ^ (target.port as u64) << 48;
        let key = ws::new_key(seed);
        let extra: Vec<(String, String)> = up
            .protocol
            .map(|p| ("Sec-WebSocket-Protocol".to_string(), p.to_string()))
            .into_iter()
            .collect();
        let mut out = BytesMut::new();
        ws::put_request(&mut out, &up.host, &up.path, &key, &extra);
        poll_fn(|cx| s.poll_write_all(cx, &mut out))
            .await
            .map_err(|e| NetError::from_io(&e))?;
        let mut raw = BytesMut::with_capacity(1024);
        let head = loop {
            match ws::parse_head(&mut raw, MAX_HEAD) {
                Ok(Some(h)) => break h,
                Ok(None) => {}
                Err(e) => return Err(not_websocket(&raw, &e)),
            }
            let hung_up = "the server hung up on the WebSocket upgrade: is this port a \
                           WebSocket listener, not one for the plain protocol? (or a TLS one: \
                           then the scheme ends in wss://)";
            let n = poll_fn(|cx| s.poll_read_into(cx, &mut raw, 4096))
                .await
                .map_err(|e| match e.kind() {
                    io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted => {
                        NetError::new(ConnectFailure::Reset, format!("{e}: {hung_up}"))
                    }
                    _ => NetError::from_io(&e),
                })?;
            if n == 0 {
                return Err(not_websocket(&raw, hung_up));
            }
        };
        check_answer(&head, &key, up)?;
        let mask = seed.rotate_left(17) | 1;
        Ok(Stream::wrapped(Io::Ws(Box::new(Tunnel {
            inner: s,
            raw,
            tx: BytesMut::new(),
            mask,
            closed: None,
            spill: BytesMut::new(),
            closing: false,
        }))))
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(r) => r,
        Err(_) => Err(NetError::new(
            ConnectFailure::Timeout,
            format!("no WebSocket connection within {timeout:?}"),
        )),
    }
}

/// The failure for an answer that is not an HTTP upgrade, naming the protocol that answered.
fn not_websocket(raw: &[u8], otherwise: &str) -> NetError {
    match crate::sniff(raw) {
        Some(what) if !what.starts_with("HTTP") => NetError::new(
            ConnectFailure::Rejected,
            format!("the server on this port speaks {what}, not WebSocket"),
        ),
        _ => NetError::new(ConnectFailure::Rejected, otherwise.to_string()),
    }
}

/// Checks the server's answer to the upgrade (RFC 6455 §4.1, the client's checks).
fn check_answer(head: &ws::Head, key: &str, up: &Upgrade) -> Result<(), NetError> {
    let refuse = |why: String| Err(NetError::new(ConnectFailure::Rejected, why));
    match head.status() {
        Some(101) => {}
        Some(404) => {
            return refuse(format!(
                "the server has no WebSocket endpoint at `{}` ({}): give the broker's path in \
                 the URL (EMQX, HiveMQ and Mosquitto serve /mqtt, RabbitMQ's web_mqtt /ws)",
                up.path, head.first
            ));
        }
        Some(401 | 403) => {
            return refuse(format!(
                "the server refused the WebSocket upgrade: {}",
                head.first
            ));
        }
        Some(400..500) => {
            return refuse(format!(
                "the server did not upgrade to WebSocket: {} (is `{}` its WebSocket path? \
                 EMQX, HiveMQ and Mosquitto serve /mqtt, RabbitMQ's web_mqtt /ws)",
                head.first, up.path
            ));
        }
        _ => {
            return refuse(format!(
                "the server did not upgrade to WebSocket: {}",
                head.first
            ));
        }
    }
    if !head.has_token("upgrade", "websocket") {
        return refuse("the server's 101 answer does not upgrade to websocket".into());
    }
    if head.header("sec-websocket-accept") != Some(ws::accept_key(key).as_str()) {
        return refuse("the server's Sec-WebSocket-Accept does not match the key".into());
    }
    // A server may leave the subprotocol out (older gateways do); it may not pick another.
    if let Some(chosen) = head.header("sec-websocket-protocol")
        && Some(chosen) != up.protocol
    {
        return refuse(format!(
            "the server chose the WebSocket subprotocol `{chosen}`, not the one asked for ({})",
            up.protocol.unwrap_or("none")
        ));
    }
    if let Some(ext) = head.header("sec-websocket-extensions") {
        return refuse(format!(
            "the server chose WebSocket extensions no one asked for: {ext}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A minimal WebSocket server for one connection: answers the upgrade, then runs `script`
    /// on the raw socket.
    async fn serve<F, Fut>(script: F) -> (Target, tokio::task::JoinHandle<()>)
    where
        F: FnOnce(tokio::net::TcpStream) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let h = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = BytesMut::new();
            let head = loop {
                s.read_buf(&mut buf).await.unwrap();
                if let Some(h) = ws::parse_head(&mut buf, 8192).unwrap() {
                    break h;
                }
            };
            assert_eq!(head.first, "GET /mqtt HTTP/1.1");
            assert_eq!(head.header("sec-websocket-protocol"), Some("mqtt"));
            let accept = ws::accept_key(head.header("sec-websocket-key").unwrap());
            s.write_all(
                format!(
                    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                     Connection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\
                     Sec-WebSocket-Protocol: mqtt\r\n\r\n"
                )
                .as_bytes(),
            )
            .await
            .unwrap();
            script(s).await;
        });
        let t = Target {
            host: "127.0.0.1".into(),
            port,
        };
        (t, h)
    }

    fn up() -> Upgrade {
        Upgrade {
            host: "127.0.0.1".into(),
            path: "/mqtt".into(),
            protocol: Some("mqtt"),
        }
    }

    async fn read_frame(s: &mut tokio::net::TcpStream, buf: &mut BytesMut) -> ws::Frame {
        loop {
            if let Some(f) = ws::parse(buf, true, 1 << 20).unwrap() {
                return f;
            }
            assert!(s.read_buf(buf).await.unwrap() > 0, "client hung up");
        }
    }

    #[tokio::test]
    async fn bytes_cross_in_frames_split_and_joined_at_will() {
        let (t, server) = serve(|mut s| async move {
            let mut buf = BytesMut::new();
            // The client's write is one masked binary frame, a long one several.
            let f = read_frame(&mut s, &mut buf).await;
            assert_eq!((f.opcode, &f.payload[..]), (ws::OP_BINARY, &b"hello"[..]));
            let mut long = Vec::new();
            while long.len() < 40_000 {
                let f = read_frame(&mut s, &mut buf).await;
                assert!(f.opcode == ws::OP_BINARY && f.payload.len() <= MAX_OUT_FRAME);
                long.extend_from_slice(&f.payload);
            }
            assert_eq!(long, (0..40_000).map(|i| i as u8).collect::<Vec<_>>());
            // The answer split over a ping and three frames, one of them a continuation.
            let mut out = BytesMut::new();
            ws::put_frame(&mut out, ws::OP_PING, b"p", None);
            out.extend_from_slice(&[ws::OP_BINARY, 2, b'w', b'o']);
            out.extend_from_slice(&[ws::OP_CONT, 1, b'r']);
            ws::put_frame(&mut out, ws::OP_BINARY, b"ld", None);
            s.write_all(&out).await.unwrap();
            let f = read_frame(&mut s, &mut buf).await;
            assert_eq!((f.opcode, &f.payload[..]), (ws::OP_PONG, &b"p"[..]));
            let mut out = BytesMut::new();
            ws::put_close(&mut out, 1001, None);
            s.write_all(&out).await.unwrap();
            let f = read_frame(&mut s, &mut buf).await;
            assert_eq!((f.opcode, ws::close_code(&f.payload)), (ws::OP_CLOSE, 1001));
        })
        .await;
        let mut s = connect_ws(&t, None, None, Duration::from_secs(5), false, &up())
            .await
            .unwrap();
        let mut data = BytesMut::from(&b"hello"[..]);
        poll_fn(|cx| s.poll_write_all(cx, &mut data)).await.unwrap();
        let mut data: BytesMut = (0..40_000).map(|i| i as u8).collect();
        poll_fn(|cx| s.poll_write_all(cx, &mut data)).await.unwrap();
        let mut got = BytesMut::new();
        while got.len() < 5 {
            poll_fn(|cx| s.poll_read_into(cx, &mut got, 64))
                .await
                .unwrap();
        }
        assert_eq!(&got[..], b"world");
        let e = poll_fn(|cx| s.poll_read_into(cx, &mut got, 64))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(e.to_string().contains("1001 going away"), "{e}");
        server.await.unwrap();
    }

    #[tokio::test]
    async fn a_missing_endpoint_names_the_path() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut b = [0u8; 1024];
            let _ = s.read(&mut b).await;
            let _ = s
                .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                .await;
        });
        let t = Target {
            host: "127.0.0.1".into(),
            port,
        };
        let e = connect_ws(&t, None, None, Duration::from_secs(5), false, &up())
            .await
            .err()
            .unwrap();
        assert_eq!(e.cause, ConnectFailure::Rejected);
        assert!(e.detail.contains("no WebSocket endpoint at `/mqtt`"), "{e}");
    }
}
