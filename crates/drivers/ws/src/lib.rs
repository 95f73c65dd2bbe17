//! # msgbench-driver-ws
//!
//! WebSocket (RFC 6455) over a lean client written for fan-out load: tens of thousands of
//! receiving clients per generator (the rango scenario: a broker's messages relayed to every
//! connected browser), each one connection with a small read buffer, TCP_NODELAY on, `wss://`
//! through rustls with verification on by default.
//!
//! - **Consumers** connect, upgrade, optionally send a subscribe message (`subscribe`
//!   template), and hand every text or binary message (fragments reassembled) to the runner.
//!   Each consumer counts its own deliveries, so fan-out completeness is exact per client.
//! - **The answer to the subscribe message** is part of a consumer's handshake: it waits up to
//!   half the connect timeout (so the whole connection stays within it) for the server's first
//!   message. A JSON object without a msgbench stamp that refuses (an `"error"` key, or a
//!   `type`/`event`/`status` of `"error"`) fails the connection with an error quoting it; one
//!   that accepts (rango's `{"success":...}`, an `event`/`type`/`status` such as Kraken's
//!   `subscriptionStatus`, a JSON-RPC `result` with an `id`) is consumed, never handed to the
//!   runner; anything else (data arrived first) is the first delivery. A server that answers nothing in time (some never do, msgbench's plain
//!   broadcast server among them) costs that wait: the consumer goes on as subscribed and the
//!   run gets one `warning` event saying no answer came; if a success answer turns up later,
//!   it is still consumed (an error answer then is reported as an `error` event). The same
//!   happens after every reconnection. Held sessions send the message and do not wait.
//! - **Producers** send binary messages (masked, as RFC 6455 requires of clients), or text
//!   messages when the run's payloads are text (a template, `--payload`, or `--stamp text`), batched like
//!   the other drivers; frames a server sends back to a producer are read and dropped.
//! - The URL's path and query may hold `{i}` (client index) and `{topic}`: rango's
//!   `?stream=public.{i}` gives every client its own stream.
//! - Pings are answered with pongs; a close from the server is answered, reported with its
//!   code as a `disconnected` event, and the client reconnects with backoff (and subscribes
//!   again). Refused upgrades say what the server answered.
//! - Receiving connections (consumers, held sessions) keep themselves alive ([`alive`]): one
//!   that heard nothing for the client's keep-alive period (`--keep-alive`, 30 s by default;
//!   0 turns it off) pings the server, so that proxies do not close it as idle, and one that
//!   heard nothing for two periods is failed and reconnected.
//!
//! - **Echo servers** (`--echo`, [`echo`]): every message the server sends back on a producer's
//!   connection that carries one of its messages in flight is that message's response, timed
//!   like an HTTP response; such runs need no consumers.
//!
//! WebSocket has no acknowledgements: publish latency is not measured (except against an echo
//! server, where the echo is the answer); end-to-end latency is (the stamp travels in the
//! message). Text frames are accepted on receive; msgbench's own
//! messages carry a binary stamp, so producers always send binary frames.
//!
//! # Layout
//! - [`alive`]: the keep-alive of receiving connections.
//! - [`codec`]: frames and the upgrade handshake (shared with `msgbench serve ws-broadcast`).
//! - [`conn`]: one client connection.
//! - [`echo`]: matching an echo server's answers to the messages in flight.
//! - this file: the `Driver`, `Producer`, `Consumer` and `Session` implementations.
#![deny(missing_docs)]

pub mod alive;
/// RFC 6455 framing, which lives in `msgbench-net` since MQTT over WebSocket tunnels through
/// it too ([`msgbench_net::ws`]).
pub use msgbench_net::ws as codec;
pub mod conn;
pub mod echo;
pub mod options;

use bytes::Bytes;
use conn::{Conn, Dial, Endpoint, Message, fill};
use msgbench_core::driver::{
    Ack, Capabilities, Consumer, ConsumerSpec, Delivery, Driver, DriverError, DriverEventKind,
    EventSink, Outbound, Producer, ProducerSpec, Session, SessionSpec,
};
use msgbench_core::scenario::{ClientPlan, TlsPlan};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// Bytes buffered before an unpaced producer writes them out.
pub const WRITE_BATCH: usize = 64 * 1024;
const PRODUCER_CHUNK: usize = 64 * 1024;
/// Read buffer growth of a consumer: small, as there may be tens of thousands of them.
const CONSUMER_CHUNK: usize = 8 * 1024;
const SESSION_CHUNK: usize = 512;

/// Driver settings beyond the URL.
#[derive(Debug, Clone, Default)]
pub struct WsOptions {
    /// Text message each consumer (and session) sends after every handshake, with `{i}` and
    /// `{topic}` replaced: a subscribe request for servers that want one. Consumers then wait
    /// for the server's answer (see the crate doc).
    pub subscribe: Option<String>,
    /// Producers and held sessions send text messages instead of binary ones: the run's
    /// payloads are text ([`msgbench_core::payload::PayloadPlan::is_text`]: a template's
    /// documents, or a text stamp), which many gateways read from text frames only. (`serve ws-broadcast` relays binary messages and takes text
    /// ones as requests to itself.)
    pub text: bool,
    /// Extra headers of every upgrade request, and the echo mode ([`options::WsPlan`]).
    pub headers: options::WsPlan,
}

/// The WebSocket driver.
pub struct WsDriver {
    ep: Arc<Endpoint>,
    opts: WsOptions,
    client: ClientPlan,
    run_id: u32,
    events: EventSink,
    timeout: Duration,
    /// The run's one warning that a subscribe message went unanswered is out.
    unanswered: Arc<AtomicBool>,
}

impl WsDriver {
    /// A driver for `ws[s]://host[:port][/path][?query]`.
    pub fn new(
        url: &str,
        opts: WsOptions,
        client: &ClientPlan,
        tls: &TlsPlan,
        run_id: u32,
        events: EventSink,
        timeout: Duration,
    ) -> Result<Self, DriverError> {
        opts.headers.check().map_err(DriverError::Config)?;
        let mut ep = Endpoint::parse(url, || msgbench_net::Tls::new(tls))?;
        ep.subprotocols = opts.headers.subprotocols();
        ep.headers = opts.headers.headers.clone();
        Ok(WsDriver {
            ep: Arc::new(ep),
            opts,
            client: client.clone(),
            run_id,
            events,
            timeout,
            unanswered: Arc::default(),
        })
    }

    /// The opcode producers and sessions send with.
    fn opcode(&self) -> u8 {
        if self.opts.text {
            codec::OP_TEXT
        } else {
            codec::OP_BINARY
        }
    }

    async fn connect(
        &self,
        role: &str,
        topic: &str,
        dial: Dial,
        events: bool,
        chunk: usize,
    ) -> Result<Conn, DriverError> {
        let i = dial.index;
        // The subscribe message is the receiving clients' (consumers and held sessions).
        let hello = match role {
            "pub" => None,
            _ => self.opts.subscribe.as_deref().map(|t| fill(t, i, topic)),
        };
        Conn::connect(
            self.ep.clone(),
            fill(&self.ep.path, i, topic),
            self.client.client_id_for(self.run_id, role, i),
            hello,
            events.then(|| self.events.clone()),
            dial,
            self.timeout,
            chunk,
        )
        .await
    }
}

impl Driver for WsDriver {
    type Producer = WsProducer;
    type Consumer = WsConsumer;
    type Session = WsSession;

    /// Against an echo server, producers' messages are answered: acks that are responses.
    fn capabilities(&self) -> Capabilities {
        let echo = self.opts.headers.echo;
        Capabilities {
            acks: echo,
            queue_groups: false,
            request_reply: false,
            responses: echo,
            metadata: false,
        }
    }

    /// Plain `ws://` connections can live in io_uring tables; TLS ones need a descriptor each.
    fn fd_free_sessions(&self) -> bool {
        cfg!(target_os = "linux") && self.ep.tls.is_none()
    }

    fn fd_free_consumers(&self) -> bool {
        self.fd_free_sessions()
    }

    fn session_hosts(&self) -> usize {
        self.ep.targets.len()
    }

    async fn producer(&self, spec: &ProducerSpec) -> Result<WsProducer, DriverError> {
        let topic = spec.topics.first().map_or("", |t| t.as_str());
        let conn = self
            .connect(
                "pub",
                topic,
                Dial {
                    index: spec.id as u64,
                    ..Dial::default()
                },
                true,
                PRODUCER_CHUNK,
            )
            .await?;
        Ok(WsProducer {
            conn,
            opcode: self.opcode(),
            echo: self.opts.headers.echo.then(Box::default),
        })
    }

    async fn consumer(&self, spec: &ConsumerSpec) -> Result<WsConsumer, DriverError> {
        if spec.group.is_some() {
            return Err(DriverError::Config(
                "WebSocket has no competing consumers (no queue groups): every client gets \
                 what the server sends it"
                    .into(),
            ));
        }
        let mut conn = self
            .connect(
                "sub",
                &spec.topic,
                Dial {
                    index: spec.id as u64,
                    source: spec.source,
                    fd_free: spec.fd_free,
                },
                true,
                CONSUMER_CHUNK,
            )
            .await?;
        // A receiver at fan-out scale is idle between messages: no buffers meanwhile (nor
        // while the ramp goes on: the handshake's go now).
        conn.wire.lean();
        conn.wire.shrink();
        conn.keep_alive(self.client.keep_alive);
        let mut c = WsConsumer {
            conn,
            message: Message::default(),
            text: false,
            answer: self.opts.subscribe.as_ref().map(|_| Answer {
                wait: self.timeout / 2,
                awaited: false,
                early: None,
                warned: self.unanswered.clone(),
                events: self.events.clone(),
                target: self.ep.display.clone(),
            }),
        };
        if let Err(why) = c.await_answer().await {
            c.conn.close().await;
            return Err(DriverError::Subscribe(why));
        }
        Ok(c)
    }

    async fn session(&self, spec: &SessionSpec) -> Result<WsSession, DriverError> {
        let mut conn = self
            .connect(
                "conn",
                &spec.topic,
                Dial {
                    index: spec.id,
                    source: spec.source,
                    fd_free: spec.fd_free,
                },
                false,
                SESSION_CHUNK,
            )
            .await?;
        conn.keep_alive(self.client.keep_alive);
        Ok(WsSession {
            conn,
            opcode: self.opcode(),
        })
    }
}

/// The sending side: one connection.
pub struct WsProducer {
    conn: Conn,
    /// Text or binary messages ([`WsOptions::text`]).
    opcode: u8,
    /// Against an echo server: the messages awaiting their echo.
    echo: Option<Box<echo::Echoes>>,
}

impl WsProducer {
    /// Reads and drops whatever the server sent (a broadcast server echoes to everyone),
    /// answering pings, so the socket's receive side never fills. With a waker (`cx`; a
    /// paced producer's wait), the producer wakes when more comes: a server closing an idle
    /// connection is seen then, and the next send reconnects first.
    fn service_reads(&mut self, cx: Option<&mut Context<'_>>) {
        if !self.conn.is_connected() {
            return;
        }
        let mut noop = Context::from_waker(Waker::noop());
        let cx = match cx {
            Some(cx) if !msgbench_core::driver::is_look(cx) => cx,
            _ => &mut noop,
        };
        loop {
            match self.conn.poll_data(cx, false) {
                Poll::Ready(Ok(f)) => {
                    if let Some(echo) = self.echo.as_mut() {
                        echo.received(f);
                    }
                }
                Poll::Ready(Err(e)) => {
                    self.lost(&e);
                    return;
                }
                Poll::Pending => return,
            }
        }
    }

    /// The connection is gone: what awaited its echo on it is in doubt.
    fn lost(&mut self, e: &std::io::Error) {
        self.conn.lost(e);
        if let Some(echo) = self.echo.as_mut() {
            echo.lost();
        }
    }

    /// Writes what is buffered, reading while the write waits: a broadcast server echoes
    /// every message to every client, producers included, and one that is itself stuck
    /// writing to us reads nothing more from us until we read (both sides' buffers full: the
    /// run hung for good).
    async fn write_out(&mut self) -> Result<(), DriverError> {
        let r = std::future::poll_fn(|cx| match self.conn.wire.poll_flush(cx) {
            Poll::Pending => {
                self.service_reads(Some(cx));
                if self.conn.is_connected() {
                    Poll::Pending
                } else {
                    Poll::Ready(Err(std::io::Error::from(std::io::ErrorKind::NotConnected)))
                }
            }
            done => done,
        })
        .await;
        if let Err(e) = r {
            self.lost(&e);
            return Err(DriverError::Send(e.to_string()));
        }
        self.service_reads(None);
        Ok(())
    }
}

impl Producer for WsProducer {
    async fn send(&mut self, msg: Outbound<'_>) -> Result<(), DriverError> {
        if !self.conn.is_connected() {
            self.conn.try_reconnect().await?;
        }
        self.conn.put(self.opcode, msg.payload);
        if let Some(echo) = self.echo.as_mut() {
            echo.sent(msg.stream, msg.token, msg.payload);
        }
        if self.conn.wire.wbuf.len() >= WRITE_BATCH {
            self.write_out().await?;
        }
        Ok(())
    }

    async fn idle(&mut self) -> Result<(), DriverError> {
        if self.conn.is_connected() {
            self.write_out().await?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), DriverError> {
        if !self.conn.is_connected() {
            return Err(DriverError::Closed);
        }
        self.write_out().await
    }

    fn poll_ack(&mut self, cx: &mut Context<'_>) -> Poll<Option<Ack>> {
        self.service_reads(Some(cx));
        match self.echo.as_mut().and_then(|e| e.next_ack()) {
            Some(a) => Poll::Ready(Some(a)),
            None => Poll::Pending,
        }
    }

    async fn close(mut self) -> Result<(), DriverError> {
        let _ = self.conn.flush().await;
        self.conn.close().await;
        Ok(())
    }
}

/// The receiving side: one connection.
pub struct WsConsumer {
    conn: Conn,
    message: Message,
    /// The message being received is text (its first frame says).
    text: bool,
    /// The server's answer to the subscribe message, when one was sent.
    answer: Option<Answer>,
}

/// Where a consumer stands with the server's answer to its subscribe message.
struct Answer {
    /// How long to wait for it after each handshake.
    wait: Duration,
    /// It did not come in time; the next message is still looked at.
    awaited: bool,
    /// A data message that came first, delivered before anything else.
    early: Option<Bytes>,
    /// Shared by the driver's consumers: the warning is given once per run.
    warned: Arc<AtomicBool>,
    events: EventSink,
    target: String,
}

/// What the first message after a subscribe message is.
#[derive(Debug, PartialEq, Eq)]
enum Answered {
    /// `{"success":...}`: consumed.
    Success,
    /// `{"error":...}` (the message, shortened).
    Error(String),
    /// Anything else: a delivery.
    Data,
}

/// Reads the first message after a subscribe message (`text`: it came as a text message). A
/// text JSON object without a msgbench stamp that looks like an answer is one: `"error"`, or
/// `type`/`event`/`status` equal to `"error"`, refuses; `"success"` (rango), an `event`,
/// `type` or `status` of another value (Kraken's `subscriptionStatus`, Coinbase's
/// `subscriptions`, Bitstamp's `bts:subscription_succeeded`), or a JSON-RPC `result` with an
/// `id` (Binance) accepts. Anything else is data.
fn answered(text: bool, m: &[u8]) -> Answered {
    if !text
        || !m.trim_ascii_start().starts_with(b"{")
        || msgbench_core::stamp::Stamp::find_text(m).is_some()
    {
        return Answered::Data;
    }
    let Ok(o) = serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(m) else {
        return Answered::Data;
    };
    let says_error = ["type", "event", "status"]
        .iter()
        .any(|k| o.get(*k).and_then(|v| v.as_str()) == Some("error"));
    if o.contains_key("error") || says_error {
        let s = String::from_utf8_lossy(m);
        let cut = s.floor_char_boundary(300);
        return Answered::Error(format!(
            "{}{}",
            &s[..cut],
            if cut < s.len() { "..." } else { "" }
        ));
    }
    let accepts = o.contains_key("success")
        || ["type", "event", "status"]
            .iter()
            .any(|k| o.contains_key(*k))
        || (o.contains_key("result") && o.contains_key("id"));
    if accepts {
        Answered::Success
    } else {
        Answered::Data
    }
}

impl WsConsumer {
    /// The next whole message and whether it is text. Cancel-safe (the partial message is kept).
    async fn next_message(&mut self) -> std::io::Result<(bool, Bytes)> {
        loop {
            let f = self.conn.read_data().await?;
            if f.opcode != codec::OP_CONT {
                self.text = f.opcode == codec::OP_TEXT;
            }
            if let Some(m) = self.message.feed(f) {
                // Binary is what benchmarks send; text is checked, as a client must.
                if self.text && std::str::from_utf8(&m).is_err() {
                    return Err(self.conn.fail_invalid_text());
                }
                return Ok((self.text, m));
            }
        }
    }

    /// After a handshake that sent a subscribe message: waits for the server's answer (see the
    /// crate doc); the error quotes a refusal.
    async fn await_answer(&mut self) -> Result<(), String> {
        let Some(wait) = self.answer.as_ref().map(|a| a.wait) else {
            return Ok(());
        };
        let first = tokio::time::timeout(wait, self.next_message()).await;
        let a = self.answer.as_mut().expect("checked above");
        a.awaited = false;
        match first {
            Err(_) => {
                a.awaited = true;
                if !a.warned.swap(true, Ordering::Relaxed) {
                    a.events.emit(
                        DriverEventKind::Warning,
                        format!(
                            "{}: no answer to the subscribe message within {wait:?} (the server may send none); consumers go on as subscribed",
                            a.target
                        ),
                    );
                }
                Ok(())
            }
            Ok(Err(e)) => Err(format!(
                "{}: the connection broke while waiting for the answer to the subscribe message: {e}",
                a.target
            )),
            Ok(Ok((text, m))) => match answered(text, &m) {
                Answered::Success => Ok(()),
                Answered::Error(q) => Err(format!(
                    "{}: the server refused the subscribe message: {q}",
                    a.target
                )),
                Answered::Data => {
                    a.early = Some(m);
                    Ok(())
                }
            },
        }
    }

    /// One reconnection attempt with its subscribe answer (the connection's backoff paces
    /// the attempts).
    async fn reconnect(&mut self) -> Result<(), DriverError> {
        self.message = Message::default();
        self.conn.try_reconnect().await?;
        if let Err(why) = self.await_answer().await {
            self.conn.lost(&std::io::Error::other(why));
        }
        Ok(())
    }

    /// Whether a message is a late answer to the subscribe message (then it is no delivery).
    fn late_answer(&mut self, text: bool, m: &[u8]) -> bool {
        let Some(a) = self.answer.as_mut().filter(|a| a.awaited) else {
            return false;
        };
        a.awaited = false;
        match answered(text, m) {
            Answered::Success => true,
            Answered::Error(q) => {
                a.events.emit(
                    DriverEventKind::Error,
                    format!(
                        "{}: the server refused the subscribe message (late): {q}",
                        a.target
                    ),
                );
                true
            }
            Answered::Data => false,
        }
    }
}

fn delivery(payload: Bytes) -> Delivery {
    Delivery {
        payload,
        redelivered: false,
        meta: None,
    }
}

impl Consumer for WsConsumer {
    async fn recv(&mut self) -> Result<Option<Delivery>, DriverError> {
        loop {
            if let Some(m) = self.answer.as_mut().and_then(|a| a.early.take()) {
                return Ok(Some(delivery(m)));
            }
            if !self.conn.is_connected() {
                // Boxed: this future lives in every receiving task, and the reconnection's
                // state (handshake, TLS, timers) would otherwise size it for all of them.
                // A failed attempt goes to the runner, which counts it (a connect error)
                // and asks again; the connection's backoff paces the attempts.
                Box::pin(self.reconnect()).await?;
                continue;
            }
            match self.next_message().await {
                Ok((text, m)) => {
                    if !self.late_answer(text, &m) {
                        return Ok(Some(delivery(m)));
                    }
                }
                Err(e) => self.conn.lost(&e),
            }
        }
    }

    async fn close(mut self) -> Result<(), DriverError> {
        self.conn.close().await;
        Ok(())
    }
}

/// A held connection: answers pings, keeps nothing.
pub struct WsSession {
    conn: Conn,
    /// Text or binary messages ([`WsOptions::text`]).
    opcode: u8,
}

impl Session for WsSession {
    async fn publish(&mut self, payload: &[u8]) -> Result<(), DriverError> {
        self.conn.put(self.opcode, payload);
        self.conn
            .flush()
            .await
            .map_err(|e| DriverError::Send(e.to_string()))
    }

    async fn keep_alive(&mut self) -> DriverError {
        loop {
            match self.conn.read_data().await {
                Ok(_) => {}
                Err(e) => return DriverError::Receive(e.to_string()),
            }
        }
    }

    async fn close(mut self) -> Result<(), DriverError> {
        self.conn.close().await;
        Ok(())
    }
}

impl msgbench_core::registration::Registered for WsDriver {
    const INFO: msgbench_core::registration::DriverInfo = msgbench_core::registration::DriverInfo {
        name: "ws",
        schemes: &["ws", "wss"],
        about: "WebSocket: binary messages out (text with --stamp text or --payload), text or binary in, fan-out to many clients, {i}/{topic} in the URL, --hello subscribe message, --echo servers (the echo is the response), ping/pong, close codes, TLS (own lean client); usually the consumer end of a pipeline (--consume-from ws://...)",
        caps: Capabilities {
            acks: false,
            queue_groups: false,
            request_reply: false,
            responses: false,
            metadata: false,
        },
        section: Some(msgbench_core::scenario::SectionSpec::of::<options::WsSection>()),
    };

    fn build(
        url: &str,
        plan: &msgbench_core::scenario::RunPlan,
        events: EventSink,
    ) -> Result<Self, DriverError> {
        WsDriver::new(
            url,
            WsOptions {
                subscribe: plan.client.hello.clone(),
                text: plan.payload.is_text(),
                headers: plan.drivers.get::<options::WsSection>()?,
            },
            &plan.client,
            &plan.tls,
            plan.run_id,
            events,
            plan.connect_timeout,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use msgbench_core::driver::DriverEvent;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    #[test]
    fn answers_are_told_from_data() {
        let s = br#"{"success":{"message":"subscribed","streams":["a"]}}"#;
        assert_eq!(answered(true, s), Answered::Success);
        let e = br#" {"error":{"message":"no such stream"}}"#;
        assert!(matches!(answered(true, e), Answered::Error(q) if q.contains("no such stream")));
        assert_eq!(answered(false, s), Answered::Data, "binary is data");
        assert_eq!(
            answered(true, br#"{"btcusd.trades":{"error":1}}"#),
            Answered::Data
        );
        assert_eq!(answered(true, b"MB\x01"), Answered::Data);
        // Other services' answers, and data that merely looks like one (a stamp inside).
        for ok in [
            &br#"{"event":"subscribed","channel":"t"}"#[..],
            br#"{"type":"subscriptions","channels":[]}"#,
            br#"{"result":null,"id":1}"#,
        ] {
            assert_eq!(answered(true, ok), Answered::Success);
        }
        assert!(matches!(
            answered(true, br#"{"type":"error","message":"bad channel"}"#),
            Answered::Error(q) if q.contains("bad channel")
        ));
        let mut stamped = br#"{"type":"trade","id":""#.to_vec();
        let stamp = msgbench_core::stamp::Stamp {
            run_id: 1,
            producer: 2,
            stream: 0,
            seq: 3,
            intended_ns: 4,
            sent_ns: 5,
        };
        let mut text = [0u8; msgbench_core::stamp::TEXT_STAMP_LEN];
        stamp.write_text(&mut text);
        stamped.extend_from_slice(&text);
        stamped.extend_from_slice(br#""}"#);
        assert_eq!(answered(true, &stamped), Answered::Data);
    }

    /// A WebSocket server that answers each client's first message with `answers` (text
    /// frames; none: silence) and then keeps the connection open.
    async fn server(answers: &'static [&'static str]) -> String {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("ws://{}/", l.local_addr().unwrap());
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut buf = BytesMut::new();
                    let head = loop {
                        if let Some(h) = codec::parse_head(&mut buf, 8192).unwrap() {
                            break h;
                        }
                        if s.read_buf(&mut buf).await.unwrap() == 0 {
                            return;
                        }
                    };
                    let key = head.header("sec-websocket-key").unwrap().to_string();
                    let ok = format!(
                        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                         Connection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n\r\n",
                        codec::accept_key(&key)
                    );
                    s.write_all(ok.as_bytes()).await.unwrap();
                    while codec::parse(&mut buf, true, 1 << 20).unwrap().is_none() {
                        if s.read_buf(&mut buf).await.unwrap() == 0 {
                            return;
                        }
                    }
                    let mut out = BytesMut::new();
                    for a in answers {
                        codec::put_frame(&mut out, codec::OP_TEXT, a.as_bytes(), None);
                    }
                    s.write_all(&out).await.unwrap();
                    let mut sink = [0u8; 1024];
                    while s.read(&mut sink).await.is_ok_and(|n| n > 0) {}
                });
            }
        });
        url
    }

    /// The server side of one upgrade: reads the client's request, answers 101, and returns
    /// what the client sent after it.
    async fn upgrade(s: &mut tokio::net::TcpStream) -> BytesMut {
        let mut buf = BytesMut::new();
        let head = loop {
            if let Some(h) = codec::parse_head(&mut buf, 8192).unwrap() {
                break h;
            }
            assert!(s.read_buf(&mut buf).await.unwrap() > 0);
        };
        let key = head.header("sec-websocket-key").unwrap().to_string();
        let ok = format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n\r\n",
            codec::accept_key(&key)
        );
        s.write_all(ok.as_bytes()).await.unwrap();
        buf
    }

    /// A server that breaks RFC 6455 fails the connection with the close code the RFC
    /// prescribes, written before the client drops it, and a protocol violation reported
    /// (counted as a protocol error), not a plain disconnection: a frame with reserved bits
    /// set (no extension agreed) gets 1002, a text message that is not UTF-8 (sent in two
    /// fragments) gets 1007.
    #[tokio::test]
    async fn a_broken_frame_fails_the_connection_with_its_close_code() {
        let cases: [(&[u8], u16, &str); 2] = [
            (
                &[0x82 | 0x40, 2, b'h', b'i'],
                codec::CLOSE_PROTOCOL,
                "reserved bits set",
            ),
            (
                &[0x01, 1, 0xC3, 0x80, 1, 0x28],
                codec::CLOSE_INVALID_TEXT,
                "not valid UTF-8",
            ),
        ];
        for (wire, code, why) in cases {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("ws://{}/", l.local_addr().unwrap());
            let closed_with = tokio::spawn(async move {
                let (mut s, _) = l.accept().await.unwrap();
                let mut buf = upgrade(&mut s).await;
                s.write_all(wire).await.unwrap();
                loop {
                    if let Some(f) = codec::parse(&mut buf, true, 1 << 20).unwrap() {
                        assert_eq!(f.opcode, codec::OP_CLOSE);
                        return codec::close_code(&f.payload);
                    }
                    assert!(
                        s.read_buf(&mut buf).await.unwrap() > 0,
                        "EOF before a close"
                    );
                }
            });
            let (mut d, mut events) = driver(&url, Duration::from_secs(1));
            d.opts.subscribe = None;
            let mut c = d.consumer(&spec(0)).await.unwrap();
            let _ = tokio::time::timeout(Duration::from_millis(300), c.recv()).await;
            assert_eq!(closed_with.await.unwrap(), code, "{why}");
            let e = events.try_recv().unwrap();
            assert_eq!(e.kind, DriverEventKind::Violation, "{}", e.detail);
            assert!(e.detail.contains(why), "{}", e.detail);
        }
    }

    /// A server that writes to a producer and reads nothing more until the producer reads (a
    /// broadcast server stuck in a write to it): the producer reads while its own write waits,
    /// so neither waits on the other for good. 32 MiB each way, more than both sockets' buffers
    /// hold.
    #[tokio::test]
    async fn a_producer_reads_while_its_write_waits() {
        const FRAME: usize = 64 * 1024;
        const FRAMES: usize = 512;
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("ws://{}/", l.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = upgrade(&mut s).await;
            let mut frame = vec![0x82, 127];
            frame.extend_from_slice(&(FRAME as u64).to_be_bytes());
            frame.resize(frame.len() + FRAME, 7);
            for _ in 0..FRAMES {
                s.write_all(&frame).await.unwrap();
            }
            let mut got = buf.len();
            while got < FRAME * FRAMES {
                buf.clear();
                let n = s.read_buf(&mut buf).await.unwrap();
                assert!(n > 0, "the producer left after {got} bytes");
                got += n;
            }
        });
        let (d, _ev) = driver(&url, Duration::from_secs(2));
        let mut p = d
            .producer(&ProducerSpec {
                id: 0,
                topics: vec!["t".into()],
                request_reply: false,
                max_in_flight: 1,
            })
            .await
            .unwrap();
        let body = vec![0u8; FRAME];
        let sent = tokio::time::timeout(Duration::from_secs(30), async {
            for token in 0..FRAMES as u64 + 1 {
                let msg = Outbound {
                    stream: 0,
                    token,
                    payload: &body,
                    meta: None,
                };
                p.send(msg).await.unwrap();
            }
            p.flush().await.unwrap();
        })
        .await;
        assert!(
            sent.is_ok(),
            "the producer's write and the server's waited on each other"
        );
        tokio::time::timeout(Duration::from_secs(30), server)
            .await
            .expect("the server got everything")
            .unwrap();
    }

    /// Producers send text messages when the payloads are a template's documents, binary
    /// ones otherwise.
    #[tokio::test]
    async fn producers_send_text_for_templates() {
        for (text, opcode) in [(true, codec::OP_TEXT), (false, codec::OP_BINARY)] {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("ws://{}/", l.local_addr().unwrap());
            let seen = tokio::spawn(async move {
                let (mut s, _) = l.accept().await.unwrap();
                let mut buf = upgrade(&mut s).await;
                loop {
                    if let Some(f) = codec::parse(&mut buf, true, 1 << 20).unwrap() {
                        return (f.opcode, f.payload);
                    }
                    assert!(s.read_buf(&mut buf).await.unwrap() > 0);
                }
            });
            let (mut d, _ev) = driver(&url, Duration::from_secs(2));
            d.opts.text = text;
            let mut p = d
                .producer(&ProducerSpec {
                    id: 0,
                    topics: vec!["t".into()],
                    request_reply: false,
                    max_in_flight: 1,
                })
                .await
                .unwrap();
            let doc = br#"{"id":"x"}"#;
            p.send(Outbound {
                stream: 0,
                token: 0,
                payload: doc,
                meta: None,
            })
            .await
            .unwrap();
            p.flush().await.unwrap();
            let (op, payload) = seen.await.unwrap();
            assert_eq!((op, &payload[..]), (opcode, &doc[..]), "text: {text}");
        }
        // The run's plan decides: a text stamp alone makes text messages too.
        let mut plan = msgbench_core::scenario::plan::resolve(
            &msgbench_core::scenario::Scenario {
                target: Some("ws://127.0.0.1:1/".into()),
                ..Default::default()
            },
            0,
        )
        .unwrap();
        let built = |plan: &msgbench_core::scenario::RunPlan| {
            let (sink, _events) = EventSink::channel();
            <WsDriver as msgbench_core::registration::Registered>::build(&plan.target, plan, sink)
                .unwrap()
                .opts
                .text
        };
        assert!(!built(&plan));
        plan.payload.stamp = msgbench_core::payload::StampFormat::Text;
        assert!(built(&plan));
    }

    fn driver(
        url: &str,
        timeout: Duration,
    ) -> (WsDriver, tokio::sync::mpsc::UnboundedReceiver<DriverEvent>) {
        let s = msgbench_core::scenario::Scenario {
            target: Some(url.into()),
            ..Default::default()
        };
        let plan = msgbench_core::scenario::plan::resolve(&s, 0).unwrap();
        let (sink, events) = EventSink::channel();
        let opts = WsOptions {
            subscribe: Some(r#"{"event":"subscribe","streams":["s{i}"]}"#.into()),
            text: false,
            ..Default::default()
        };
        let d = WsDriver::new(url, opts, &plan.client, &plan.tls, 1, sink, timeout).unwrap();
        (d, events)
    }

    fn spec(id: u32) -> ConsumerSpec {
        ConsumerSpec {
            id,
            topic: "t".into(),
            group: None,
            respond: false,
            meta: false,
            target: None,
            source: None,
            fd_free: false,
            lean: false,
        }
    }

    #[tokio::test]
    async fn the_subscribe_answer_is_part_of_the_handshake() {
        let t = Duration::from_millis(600);
        // Success, then data: the answer is consumed, the data is the first delivery.
        let url = server(&[
            r#"{"success":{"message":"subscribed","streams":["s0"]}}"#,
            "{\"x\":1}",
        ])
        .await;
        let (d, _ev) = driver(&url, t);
        let mut c = d.consumer(&spec(0)).await.unwrap();
        // What waits in each of up to 100,000 receiving tasks stays small: the reconnection
        // (handshake, TLS, timers) is boxed away from it.
        assert!(std::mem::size_of_val(&c.recv()) <= 256);
        assert_eq!(&c.recv().await.unwrap().unwrap().payload[..], b"{\"x\":1}");

        // Data first: delivered, nothing lost.
        let url = server(&["{\"y\":2}", "{\"y\":3}"]).await;
        let (d, _ev) = driver(&url, t);
        let mut c = d.consumer(&spec(0)).await.unwrap();
        assert_eq!(&c.recv().await.unwrap().unwrap().payload[..], b"{\"y\":2}");
        assert_eq!(&c.recv().await.unwrap().unwrap().payload[..], b"{\"y\":3}");

        // An error: the connection fails, quoting it.
        let url = server(&[r#"{"error":{"message":"unknown stream s0"}}"#]).await;
        let (d, _ev) = driver(&url, t);
        let e = d.consumer(&spec(0)).await.err().unwrap().to_string();
        assert!(
            e.contains("refused the subscribe message") && e.contains("unknown stream s0"),
            "{e}"
        );

        // Silence: each consumer goes on after half the timeout, one warning for the run.
        let url = server(&[]).await;
        let (d, mut ev) = driver(&url, t);
        let started = std::time::Instant::now();
        let (s0, s1) = (spec(0), spec(1));
        let (a, b) = tokio::join!(d.consumer(&s0), d.consumer(&s1));
        assert!(a.is_ok() && b.is_ok());
        let took = started.elapsed();
        assert!(took >= t / 2 && took < t, "{took:?}");
        let w = ev.try_recv().unwrap();
        assert_eq!(w.kind, DriverEventKind::Warning);
        assert!(
            w.detail.contains("no answer to the subscribe message"),
            "{}",
            w.detail
        );
        assert!(ev.try_recv().is_err(), "one warning, not one per consumer");
    }
}
