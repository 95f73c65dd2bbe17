//! A small AMQP 0-9-1 test client over any stream (TCP or TLS), built on amq-protocol: frames
//! are generated with `gen_frame` and parsed with `parse_frame`. Every wait is bounded.

use super::super::frame;
use amq_protocol::frame::parsing::parse_frame;
use amq_protocol::frame::{AMQPContentHeader, AMQPFrame, ProtocolVersion};
use amq_protocol::protocol::{AMQPClass, BasicProperties, basic, channel, confirm, connection};
use amq_protocol::types::FieldTable;
use bytes::{Buf, BytesMut};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// Longest any single expected frame may take.
pub const T: Duration = Duration::from_secs(5);

/// Generates frames into one buffer.
pub fn encode(frames: &[AMQPFrame]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frames {
        assert!(frame::put(&mut out, f), "cannot generate {f}");
    }
    out
}

pub fn method(ch: u16, class: AMQPClass) -> AMQPFrame {
    AMQPFrame::Method(ch, class)
}

/// basic.publish, its content header and body frames of at most `frame_max` bytes in all.
pub fn publish_frames(ch: u16, body: &[u8], frame_max: u32, mandatory: bool) -> Vec<AMQPFrame> {
    let mut v = vec![
        method(
            ch,
            AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish {
                exchange: "ex".into(),
                routing_key: "rk".into(),
                mandatory,
                immediate: false,
            })),
        ),
        AMQPFrame::Header(
            ch,
            AMQPContentHeader {
                class_id: 60,
                body_size: body.len() as u64,
                properties: BasicProperties::default().with_delivery_mode(2),
            },
        ),
    ];
    for chunk in body.chunks(frame_max as usize - frame::OVERHEAD) {
        v.push(AMQPFrame::Body(ch, chunk.to_vec()));
    }
    v
}

/// The frames a client sends to complete the handshake after connection.start and tune.
pub fn start_ok() -> AMQPFrame {
    method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::StartOk(connection::StartOk {
            client_properties: FieldTable::default(),
            mechanism: "PLAIN".into(),
            response: "\0guest\0guest".into(),
            locale: "en_US".into(),
        })),
    )
}

pub fn tune_ok_open(tune: &connection::Tune, heartbeat: u16, frame_max: u32) -> Vec<AMQPFrame> {
    vec![
        method(
            0,
            AMQPClass::Connection(connection::AMQPMethod::TuneOk(connection::TuneOk {
                channel_max: tune.channel_max,
                frame_max,
                heartbeat,
            })),
        ),
        method(
            0,
            AMQPClass::Connection(connection::AMQPMethod::Open(connection::Open {
                virtual_host: "/".into(),
            })),
        ),
    ]
}

pub fn connection_close() -> AMQPFrame {
    method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::Close(connection::Close {
            reply_code: 200,
            reply_text: "bye".into(),
            class_id: 0,
            method_id: 0,
        })),
    )
}

pub struct Client<S = TcpStream> {
    pub io: S,
    rbuf: BytesMut,
    /// connection.tune as the sink sent it.
    pub tune: connection::Tune,
    /// The frame-max this client announced.
    pub frame_max: u32,
}

pub async fn tcp(addr: SocketAddr) -> TcpStream {
    let s = timeout(T, TcpStream::connect(addr))
        .await
        .expect("connect timed out")
        .expect("connect");
    s.set_nodelay(true).unwrap();
    s
}

impl Client<TcpStream> {
    /// Connects and completes the handshake, no heartbeats, the sink's frame-max.
    pub async fn connect(addr: SocketAddr) -> Client {
        Client::handshake(tcp(addr).await, 0, 0).await
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    pub fn raw(io: S) -> Client<S> {
        Client {
            io,
            rbuf: BytesMut::with_capacity(64 * 1024),
            tune: connection::Tune::default(),
            frame_max: 0,
        }
    }

    /// Completes the handshake announcing `heartbeat` and `frame_max` (0: the sink's) in tune-ok.
    pub async fn handshake(io: S, heartbeat: u16, frame_max: u32) -> Client<S> {
        let mut c = Client::raw(io);
        c.send(&[AMQPFrame::ProtocolHeader(ProtocolVersion::amqp_0_9_1())])
            .await;
        match c.recv_method().await {
            (0, AMQPClass::Connection(connection::AMQPMethod::Start(s))) => {
                assert_eq!((s.version_major, s.version_minor), (0, 9));
                assert!(s.mechanisms.to_string().contains("PLAIN"));
            }
            other => panic!("expected connection.start, got {other:?}"),
        }
        c.send(&[start_ok()]).await;
        let tune = match c.recv_method().await {
            (0, AMQPClass::Connection(connection::AMQPMethod::Tune(t))) => t,
            other => panic!("expected connection.tune, got {other:?}"),
        };
        c.frame_max = if frame_max == 0 {
            tune.frame_max
        } else {
            frame_max
        };
        c.send(&tune_ok_open(&tune, heartbeat, c.frame_max)).await;
        c.tune = tune;
        match c.recv_method().await {
            (0, AMQPClass::Connection(connection::AMQPMethod::OpenOk(_))) => {}
            other => panic!("expected connection.open-ok, got {other:?}"),
        }
        c
    }

    pub async fn write(&mut self, bytes: &[u8]) {
        timeout(T, self.io.write_all(bytes))
            .await
            .expect("write timed out")
            .expect("write");
        self.io.flush().await.expect("flush");
    }

    pub async fn send(&mut self, frames: &[AMQPFrame]) {
        self.write(&encode(frames)).await;
    }

    /// The next frame, heartbeats included; `None` at end of stream or on a reset.
    pub async fn next(&mut self) -> Option<AMQPFrame> {
        loop {
            if !self.rbuf.is_empty() {
                match parse_frame(&self.rbuf[..]) {
                    Ok((rest, f)) => {
                        let used = self.rbuf.len() - rest.len();
                        self.rbuf.advance(used);
                        return Some(f);
                    }
                    Err(e) if e.is_incomplete() => {}
                    Err(e) => panic!("sink sent an unparsable frame: {e:?}"),
                }
            }
            self.rbuf.reserve(64 * 1024);
            match self.io.read_buf(&mut self.rbuf).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }

    /// The next frame other than a heartbeat; panics on timeout or end of stream.
    pub async fn recv(&mut self) -> AMQPFrame {
        loop {
            match timeout(T, self.next()).await {
                Ok(Some(AMQPFrame::Heartbeat)) => {}
                Ok(Some(f)) => return f,
                Ok(None) => panic!("connection closed"),
                Err(_) => panic!("no frame in time"),
            }
        }
    }

    pub async fn recv_method(&mut self) -> (u16, AMQPClass) {
        match self.recv().await {
            AMQPFrame::Method(ch, m) => (ch, m),
            other => panic!("expected a method, got {other:?}"),
        }
    }

    /// Sends a method and returns the reply on the same channel.
    pub async fn call(&mut self, ch: u16, class: AMQPClass) -> AMQPClass {
        self.send(&[method(ch, class)]).await;
        let (got, reply) = self.recv_method().await;
        assert_eq!(got, ch, "reply on another channel: {reply:?}");
        reply
    }

    pub async fn open_channel(&mut self, ch: u16) {
        let open = AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {}));
        match self.call(ch, open).await {
            AMQPClass::Channel(channel::AMQPMethod::OpenOk(_)) => {}
            other => panic!("expected channel.open-ok, got {other:?}"),
        }
    }

    pub async fn confirm_select(&mut self, ch: u16) {
        let sel = confirm::Select { nowait: false };
        match self
            .call(ch, AMQPClass::Confirm(confirm::AMQPMethod::Select(sel)))
            .await
        {
            AMQPClass::Confirm(confirm::AMQPMethod::SelectOk(_)) => {}
            other => panic!("expected confirm.select-ok, got {other:?}"),
        }
    }

    pub async fn publish(&mut self, ch: u16, body: &[u8]) {
        let frames = publish_frames(ch, body, self.frame_max, false);
        self.send(&frames).await;
    }

    /// Waits for acks on `ch` until `last` is acknowledged; checks that the tags acknowledged
    /// are exactly `from..=last`, each once, and returns how many ack frames it took.
    pub async fn confirms(&mut self, ch: u16, from: u64, last: u64) -> usize {
        let mut acked = from - 1;
        let mut frames = 0;
        while acked < last {
            match self.recv_method().await {
                (c, AMQPClass::Basic(basic::AMQPMethod::Ack(a))) if c == ch => {
                    frames += 1;
                    if a.multiple {
                        assert!(
                            a.delivery_tag > acked,
                            "tag {} after {acked}",
                            a.delivery_tag
                        );
                    } else {
                        assert_eq!(a.delivery_tag, acked + 1, "single ack out of order");
                    }
                    acked = a.delivery_tag;
                }
                other => panic!("expected basic.ack on {ch}, got {other:?}"),
            }
        }
        assert_eq!(acked, last, "acknowledged past the last publish");
        frames
    }

    /// Sends connection.close and expects close-ok; then closes its side, as close-ok says it
    /// may, and expects the end of the stream. The sink leaves that to the client: nothing,
    /// not even the end of the stream, comes before (amqp091-go took an early end for an
    /// error, 501 EOF).
    pub async fn close(self) {
        self.close_watching(Duration::from_millis(50)).await;
    }

    /// [`Client::close`], watching for an early end of the stream for `watch` (zero: not at
    /// all, for loops of many connections).
    pub async fn close_watching(mut self, watch: Duration) {
        self.send(&[connection_close()]).await;
        match self.recv_method().await {
            (0, AMQPClass::Connection(connection::AMQPMethod::CloseOk(_))) => {}
            other => panic!("expected connection.close-ok, got {other:?}"),
        }
        if !watch.is_zero() {
            let early = timeout(watch, self.next()).await;
            assert!(early.is_err(), "the sink closed first: {early:?}");
        }
        let _ = self.io.shutdown().await;
        self.eof(T).await;
    }

    /// Reads until the sink closes the stream within `within`; returns the connection.close
    /// it sent on the way, if any.
    pub async fn eof(&mut self, within: Duration) -> Option<connection::Close> {
        let mut close = None;
        loop {
            match timeout(within, self.next()).await {
                Ok(None) => return close,
                Ok(Some(AMQPFrame::Method(
                    0,
                    AMQPClass::Connection(connection::AMQPMethod::Close(c)),
                ))) => close = Some(c),
                Ok(Some(_)) => {}
                Err(_) => panic!("connection still open"),
            }
        }
    }

    /// Expects connection.close with `code`, answers close-ok and expects the end of stream.
    pub async fn expect_close(&mut self, code: u16) -> connection::Close {
        let c = match self.recv_method().await {
            (0, AMQPClass::Connection(connection::AMQPMethod::Close(c))) => c,
            other => panic!("expected connection.close {code}, got {other:?}"),
        };
        assert_eq!(c.reply_code, code, "{c:?}");
        let ok = connection::AMQPMethod::CloseOk(connection::CloseOk {});
        // The sink may already have closed (after a frame error): ignore write errors.
        let _ = self
            .io
            .write_all(&encode(&[method(0, AMQPClass::Connection(ok))]))
            .await;
        assert_eq!(self.eof(T).await, None, "a second connection.close");
        c
    }

    /// Asserts nothing but heartbeats arrives for `d`.
    pub async fn quiet(&mut self, d: Duration) {
        let end = tokio::time::Instant::now() + d;
        loop {
            match tokio::time::timeout_at(end, self.next()).await {
                Err(_) => return,
                Ok(Some(AMQPFrame::Heartbeat)) => {}
                Ok(other) => panic!("expected nothing, got {other:?}"),
            }
        }
    }
}
