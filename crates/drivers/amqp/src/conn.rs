//! One AMQP 0-9-1 connection with one channel: URL parsing, the handshake (start, tune, open),
//! synchronous methods for provisioning, buffered writes, frame reads, heartbeats and close.
//! All state lives in the struct, so the async methods are cancel-safe.

// Percent-decoding of URL parts (`%40` is `@`), shared with the other drivers.
use crate::codec::{self, Frame};
use amq_protocol::protocol::{AMQPClass, basic, channel, confirm, connection};
use amq_protocol::types::{AMQPValue, FieldTable, LongString, ShortString};
use msgbench_core::driver::{ConnectFailure, DriverError, EventSink};
use msgbench_core::redact::unescape;
use msgbench_net::scram::{self, Scram};
use msgbench_net::{NetError, Target, Tls, Wire};
use std::future::poll_fn;
use std::io;
use std::net::IpAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// The channel every msgbench connection uses.
pub const CHANNEL: u16 = 1;
/// Largest frame msgbench asks for.
const FRAME_MAX: u32 = 131_072;

/// The SASL mechanism a connection logs in with, chosen from what `connection.start` offers.
enum Login {
    Plain,
    Scram(Scram),
    Anonymous,
}

impl Login {
    fn mechanism(&self) -> &'static str {
        match self {
            Login::Plain => "PLAIN",
            Login::Scram(s) => s.mechanism(),
            Login::Anonymous => "ANONYMOUS",
        }
    }
}

/// Where and how to connect: `amqp[s]://[user[:pass]@]host[:port][/vhost]`.
#[derive(Debug)]
pub struct Endpoint {
    /// Host and port.
    pub target: Target,
    /// TLS for `amqps://`.
    pub tls: Option<Tls>,
    user: String,
    pass: String,
    /// The URL named no user: guest/guest, RabbitMQ's default.
    default_user: bool,
    vhost: String,
    /// The URL without its password.
    pub display: String,
    /// Send channel.open before connection.open-ok arrives (see `ClientPlan::pipeline_handshake`).
    pub pipeline: bool,
}

impl Endpoint {
    /// Parses the URL (`/` is the default vhost; `%2f` in the path also means `/`).
    pub fn parse(
        url: &str,
        tls: impl FnOnce() -> Result<Tls, String>,
    ) -> Result<Endpoint, DriverError> {
        let display = msgbench_core::redact::url(url);
        let (secure, rest) = if let Some(r) = url.strip_prefix("amqp://") {
            (false, r)
        } else if let Some(r) = url.strip_prefix("amqps://") {
            (true, r)
        } else {
            return Err(DriverError::Config(format!(
                "`{display}` is not an amqp:// or amqps:// URL"
            )));
        };
        let rest = rest.split('?').next().unwrap_or("");
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        let (creds, hostport) = match authority.rsplit_once('@') {
            Some((c, h)) => (Some(c), h),
            None => (None, authority),
        };
        let (user, pass) = match creds {
            Some(c) => match c.split_once(':') {
                Some((u, p)) => (unescape(u), unescape(p)),
                None => (unescape(c), String::new()),
            },
            None => ("guest".into(), "guest".into()),
        };
        let default_user = creds.is_none();
        let vhost = match path {
            None | Some("") => "/".to_string(),
            Some(p) => unescape(p),
        };
        if vhost.len() > 255 {
            return Err(DriverError::Config(format!(
                "{display}: the vhost name is longer than 255 bytes"
            )));
        }
        let target = Target::parse(hostport, if secure { 5671 } else { 5672 })
            .map_err(|m| DriverError::Config(format!("{display}: {m}")))?;
        let tls = if secure {
            Some(tls().map_err(|m| DriverError::Config(format!("TLS: {m}")))?)
        } else {
            None
        };
        Ok(Endpoint {
            target,
            tls,
            user,
            pass,
            default_user,
            vhost,
            display,
            pipeline: false,
        })
    }
}

/// A live connection with channel 1 open.
pub struct Conn {
    ep: Arc<Endpoint>,
    name: String,
    events: Option<EventSink>,
    source: Option<IpAddr>,
    timeout: Duration,
    heartbeat: Duration,
    /// Socket and buffers.
    pub wire: Wire,
    /// Negotiated frame-max.
    pub frame_max: usize,
    /// Negotiated heartbeat interval (zero = none).
    pub heartbeat_every: Duration,
    /// The broker's channel-max (0: no limit of its own).
    pub channel_max: u16,
    /// Something was published on the channel: close it before the connection.
    pub published: bool,
    /// The server asked the channel to stop publishing (`channel.flow` inactive) and has not
    /// let it go on yet.
    pub flow_paused: bool,
    /// Since when the broker has blocked the connection's publishes (`connection.blocked`:
    /// RabbitMQ's memory or disk alarm), if it has.
    blocked_since: Option<std::time::Instant>,
    /// Pauses between reconnection attempts (100 ms doubling to 2 s), kept across losses: a
    /// connection lost within a second of opening counts as a failed attempt, so a broker
    /// that accepts the connection and closes it at once (a queue or exchange the setup
    /// cannot use, a refused publish) is not reconnected to in a loop.
    backoff: msgbench_net::Backoff,
    /// When the last handshake completed.
    opened: std::time::Instant,
}

fn io_err(m: impl Into<String>) -> io::Error {
    io::Error::other(m.into())
}

impl Conn {
    /// Connects, completes the handshake and opens channel 1.
    pub async fn connect(
        ep: Arc<Endpoint>,
        name: String,
        events: Option<EventSink>,
        source: Option<IpAddr>,
        timeout: Duration,
        heartbeat: Duration,
        chunk: usize,
    ) -> Result<Conn, DriverError> {
        let mut c = Conn {
            ep,
            name,
            events,
            source,
            timeout,
            heartbeat,
            wire: Wire::new(chunk),
            frame_max: FRAME_MAX as usize,
            channel_max: 0,
            heartbeat_every: Duration::ZERO,
            published: false,
            flow_paused: false,
            blocked_since: None,
            backoff: msgbench_net::Backoff::default(),
            opened: std::time::Instant::now(),
        };
        c.handshake().await?;
        Ok(c)
    }

    fn fail(&self, cause: ConnectFailure, detail: String) -> DriverError {
        DriverError::Connect {
            target: self.ep.display.clone(),
            reason: detail,
            cause,
        }
    }

    async fn handshake(&mut self) -> Result<(), DriverError> {
        self.wire.detach();
        let stream = msgbench_net::connect(
            &self.ep.target,
            self.source,
            self.ep.tls.as_ref(),
            self.timeout,
        )
        .await
        .map_err(|e: NetError| self.fail(e.cause, e.detail))?;
        self.wire.attach(stream);
        self.frame_max = FRAME_MAX as usize;
        let limit = self.timeout;
        let r = tokio::time::timeout(limit, self.open_sequence()).await;
        let r = match r {
            Ok(r) => r,
            Err(_) => Err((
                ConnectFailure::Timeout,
                format!("no answer to the AMQP handshake within {limit:?}"),
            )),
        };
        if let Err((cause, detail)) = r {
            self.wire.detach();
            return Err(self.fail(cause, detail));
        }
        // Data connections notice a silent broker (a blackholed route, a frozen host): the
        // broker's heartbeats, at the negotiated interval, must be heard; two intervals without
        // a byte drop the connection (AMQP 0-9-1's own rule). Held sessions are not watched.
        if self.events.is_some() {
            self.wire.watch(self.heartbeat_every, b"");
        }
        Ok(())
    }

    async fn open_sequence(&mut self) -> Result<(), (ConnectFailure, String)> {
        let io = |e: io::Error| (msgbench_net::classify(&e), e.to_string());
        self.wire.wbuf.extend_from_slice(b"AMQP\x00\x00\x09\x01");
        self.flush().await.map_err(io)?;
        // PLAIN with the URL's user (guest by default); SCRAM where the server hides PLAIN on a
        // plain port (Qpid Broker-J's password providers do); ANONYMOUS where the server offers
        // only that (Broker-J can, on a port of its choosing).
        // Closed without a word after the protocol header: no broker answered it.
        let first = self.method(0).await.map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => (
                msgbench_net::classify(&e),
                format!(
                    "{e}: the server closed the connection before connection.start (a TLS port \
                     does this to a plain client: use amqps://; so does a TCP proxy whose \
                     broker is down)"
                ),
            ),
            _ => io(e),
        })?;
        let login = match first {
            AMQPClass::Connection(connection::AMQPMethod::Start(s)) => {
                let offered = s.mechanisms.to_string();
                let has = |m: &str| offered.split(' ').any(|o| o == m);
                if has("PLAIN") {
                    Login::Plain
                } else if let Some(hash) = scram::Hash::strongest(offered.split(' ')) {
                    Login::Scram(Scram::new(hash, &self.ep.user, &self.ep.pass))
                } else if has("ANONYMOUS") {
                    Login::Anonymous
                } else {
                    return Err((
                        ConnectFailure::Rejected,
                        format!(
                            "the server offers no login msgbench knows (it offers {offered}; \
                             msgbench speaks PLAIN, SCRAM-SHA-1/256/512 and ANONYMOUS)"
                        ),
                    ));
                }
            }
            other => {
                return Err((
                    ConnectFailure::Other,
                    format!("expected connection.start, got {other:?}"),
                ));
            }
        };
        let mut props = FieldTable::default();
        props.insert("product".into(), AMQPValue::LongString("msgbench".into()));
        props.insert(
            "connection_name".into(),
            AMQPValue::LongString(self.name.as_str().into()),
        );
        let mut caps = FieldTable::default();
        // authentication_failure_close: RabbitMQ says why a login failed (403 and its words)
        // instead of dropping the socket; connection.blocked: it says when a memory or disk
        // alarm stops it reading publishes, which otherwise shows only as latency.
        for c in [
            "publisher_confirms",
            "basic.nack",
            "consumer_cancel_notify",
            "authentication_failure_close",
            "connection.blocked",
        ] {
            caps.insert(c.into(), AMQPValue::Boolean(true));
        }
        props.insert("capabilities".into(), AMQPValue::FieldTable(caps));
        let (mechanism, response) = match &login {
            Login::Anonymous => ("ANONYMOUS", String::new()),
            Login::Plain => ("PLAIN", format!("\0{}\0{}", self.ep.user, self.ep.pass)),
            Login::Scram(s) => (s.mechanism(), s.client_first()),
        };
        codec::put_method(
            &mut self.wire.wbuf,
            0,
            AMQPClass::Connection(connection::AMQPMethod::StartOk(connection::StartOk {
                client_properties: props,
                mechanism: ShortString::from(mechanism),
                response: LongString::from(response.as_str()),
                locale: ShortString::from("en_US"),
            })),
        );
        self.flush().await.map_err(io)?;
        let tune = self.login_answers(login).await?;
        let frame_max = match tune.frame_max {
            0 => FRAME_MAX,
            f => f.min(FRAME_MAX),
        };
        let heartbeat = negotiate_heartbeat(tune.heartbeat, self.heartbeat);
        self.frame_max = frame_max as usize;
        self.channel_max = tune.channel_max;
        self.heartbeat_every = Duration::from_secs(heartbeat as u64);
        codec::put_method(
            &mut self.wire.wbuf,
            0,
            AMQPClass::Connection(connection::AMQPMethod::TuneOk(connection::TuneOk {
                // 0 is the broker's "no limit": then ours (2047) is the limit.
                channel_max: match tune.channel_max {
                    0 => 2047,
                    n => n.min(2047),
                },
                frame_max,
                heartbeat,
            })),
        );
        codec::put_method(
            &mut self.wire.wbuf,
            0,
            AMQPClass::Connection(connection::AMQPMethod::Open(connection::Open {
                virtual_host: ShortString::from(self.ep.vhost.as_str()),
            })),
        );
        // tune-ok and connection.open go together: tune-ok has no answer, so every client
        // (and every proxy) expects open right behind it. channel.open waits for open-ok by
        // default: an intermediary that answers the handshake itself (amqpprox) reads it frame
        // by frame, then connects upstream and replays it, and holds a channel.open that came
        // early. Pipelined (opt-in) it saves one round trip per connection.
        let channel_open = |wbuf: &mut bytes::BytesMut| {
            codec::put_method(
                wbuf,
                CHANNEL,
                AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
            )
        };
        if self.ep.pipeline {
            channel_open(&mut self.wire.wbuf);
        }
        self.flush().await.map_err(io)?;
        match self
            .method(0)
            .await
            .map_err(|e| (ConnectFailure::Rejected, e.to_string()))?
        {
            AMQPClass::Connection(connection::AMQPMethod::OpenOk(_)) => {}
            other => {
                return Err((
                    ConnectFailure::Other,
                    format!("expected connection.open-ok, got {other:?}"),
                ));
            }
        }
        if !self.ep.pipeline {
            channel_open(&mut self.wire.wbuf);
            self.flush().await.map_err(io)?;
        }
        match self.method(CHANNEL).await.map_err(io)? {
            AMQPClass::Channel(channel::AMQPMethod::OpenOk(_)) => {}
            other => {
                return Err((
                    ConnectFailure::Other,
                    format!("expected channel.open-ok, got {other:?}"),
                ));
            }
        }
        self.wire.shrink();
        Ok(())
    }

    /// Sends one synchronous method on channel 1 and waits for its answer. A channel or
    /// connection close from the server becomes an error carrying the server's reply text.
    pub async fn call(&mut self, method: AMQPClass) -> io::Result<AMQPClass> {
        codec::put_method(&mut self.wire.wbuf, CHANNEL, method);
        self.flush().await?;
        tokio::time::timeout(self.timeout, self.method(CHANNEL))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no answer from the server"))?
    }

    /// Enables publisher confirms on channel 1.
    pub async fn confirm_select(&mut self) -> io::Result<()> {
        match self
            .call(AMQPClass::Confirm(confirm::AMQPMethod::Select(
                confirm::Select { nowait: false },
            )))
            .await?
        {
            AMQPClass::Confirm(confirm::AMQPMethod::SelectOk(_)) => Ok(()),
            other => Err(io_err(format!("expected confirm.select-ok, got {other:?}"))),
        }
    }

    /// The next method for `channel`, skipping heartbeats; server closes become errors.
    /// Reads the server's answers to `connection.start-ok` up to `connection.tune`: the SCRAM
    /// challenges (`connection.secure`, each answered with `secure-ok`), or a refusal.
    async fn login_answers(
        &mut self,
        mut login: Login,
    ) -> Result<connection::Tune, (ConnectFailure, String)> {
        let refused = |detail: String| (ConnectFailure::Rejected, detail);
        loop {
            let response = match self.method(0).await {
                Ok(AMQPClass::Connection(connection::AMQPMethod::Tune(t))) => return Ok(t),
                Ok(AMQPClass::Connection(connection::AMQPMethod::Secure(c))) => match &mut login {
                    // The first challenge is the server's first message; Broker-J sends its
                    // final one (the signature) as a second challenge, answered empty.
                    Login::Scram(s) if !s.awaits_server_final() => s
                        .client_final(c.challenge.as_bytes())
                        .map_err(|e| refused(e.to_string()))?,
                    Login::Scram(s) => {
                        s.verify_server_final(c.challenge.as_bytes())
                            .map_err(|e| refused(e.to_string()))?;
                        String::new()
                    }
                    _ => {
                        return Err(refused(format!(
                            "the server sent a login challenge ({}) that {} does not have",
                            c.challenge,
                            login.mechanism()
                        )));
                    }
                },
                Ok(other) => {
                    return Err((
                        ConnectFailure::Other,
                        format!("expected connection.tune, got {other:?}"),
                    ));
                }
                // RabbitMQ closes the socket on bad credentials (or sends connection.close).
                Err(e) => {
                    let who = match &login {
                        Login::Anonymous => "an anonymous login".to_string(),
                        _ if self.ep.default_user => "user `guest` (the URL names no user: \
                                                      guest:guest is the default)"
                            .to_string(),
                        _ => format!("user `{}`", self.ep.user),
                    };
                    return Err(refused(format!(
                        "the server refused the login ({}) of {who}: {e}",
                        login.mechanism()
                    )));
                }
            };
            codec::put_method(
                &mut self.wire.wbuf,
                0,
                AMQPClass::Connection(connection::AMQPMethod::SecureOk(connection::SecureOk {
                    response: LongString::from(response),
                })),
            );
            self.flush()
                .await
                .map_err(|e| (msgbench_net::classify(&e), e.to_string()))?;
        }
    }

    async fn method(&mut self, ch: u16) -> io::Result<AMQPClass> {
        loop {
            match self.read_frame().await? {
                Frame::Method(c, m) => {
                    self.check_close(c, &m)?;
                    if c == ch {
                        return Ok(*m);
                    }
                }
                Frame::Heartbeat | Frame::Header(..) | Frame::Body(..) => {}
            }
        }
    }

    /// Turns a server-side channel or connection close into an error (answering it), and
    /// answers the server's flow control of the channel (`channel.flow`, which Qpid Broker-J
    /// sends when a queue is full: a client that does not answer and stop publishing has its
    /// channel closed, 311), noting it in [`Conn::flow_paused`].
    pub fn check_close(&mut self, ch: u16, m: &AMQPClass) -> io::Result<()> {
        if let AMQPClass::Channel(channel::AMQPMethod::Flow(f)) = m {
            self.flow_paused = !f.active;
            codec::put_method(
                &mut self.wire.wbuf,
                ch,
                AMQPClass::Channel(channel::AMQPMethod::FlowOk(channel::FlowOk {
                    active: f.active,
                })),
            );
            return Ok(());
        }
        match m {
            AMQPClass::Connection(connection::AMQPMethod::Blocked(b)) => {
                if self.blocked_since.is_none() {
                    self.blocked_since = Some(std::time::Instant::now());
                    self.warn(format!(
                        "the broker blocked a connection's publishing ({}; connection.blocked): \
                         its sends wait until the broker unblocks it",
                        b.reason
                    ));
                }
                return Ok(());
            }
            AMQPClass::Connection(connection::AMQPMethod::Unblocked(_)) => {
                if let Some(t) = self.blocked_since.take() {
                    self.warn(format!(
                        "the broker unblocked a connection's publishing after {:.1} s",
                        t.elapsed().as_secs_f64()
                    ));
                }
                return Ok(());
            }
            _ => {}
        }
        let (code, text, what) = match m {
            AMQPClass::Connection(connection::AMQPMethod::Close(c)) => {
                codec::put_method(
                    &mut self.wire.wbuf,
                    0,
                    AMQPClass::Connection(connection::AMQPMethod::CloseOk(connection::CloseOk {})),
                );
                (c.reply_code, c.reply_text.to_string(), "connection")
            }
            AMQPClass::Channel(channel::AMQPMethod::Close(c)) => {
                codec::put_method(
                    &mut self.wire.wbuf,
                    ch,
                    AMQPClass::Channel(channel::AMQPMethod::CloseOk(channel::CloseOk {})),
                );
                (c.reply_code, c.reply_text.to_string(), "channel")
            }
            _ => return Ok(()),
        };
        Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            format!("the server closed the {what}: {code} {text}"),
        ))
    }

    fn warn(&self, detail: String) {
        if let Some(ev) = &self.events {
            ev.emit(msgbench_core::driver::DriverEventKind::Warning, detail);
        }
    }

    /// Whether the connection is up.
    pub fn is_connected(&self) -> bool {
        self.wire.is_connected()
    }

    /// Writes what the socket takes now; `Ready(Ok)` when all is written.
    pub fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.wire.poll_flush(cx)
    }

    /// Writes everything buffered.
    pub async fn flush(&mut self) -> io::Result<()> {
        self.wire.flush().await
    }

    /// The next frame (see [`Wire::poll_next`] for `flush`). Cancel-safe.
    pub fn poll_frame(&mut self, cx: &mut Context<'_>, flush: bool) -> Poll<io::Result<Frame>> {
        let frame_max = self.frame_max;
        self.wire
            .poll_next(cx, flush, |b| codec::parse(b, frame_max))
    }

    /// The next frame (see [`Conn::poll_frame`]).
    pub async fn read_frame(&mut self) -> io::Result<Frame> {
        poll_fn(|cx| self.poll_frame(cx, true)).await
    }

    /// Marks the connection lost (once) and reports it.
    pub fn lost(&mut self, why: &io::Error) {
        if self.wire.detach() {
            self.backoff.lost_after(self.opened.elapsed());
            if let Some(ev) = &self.events {
                ev.connection_lost(&self.name, why);
            }
        }
    }

    /// One reconnection attempt (handshake and channel, not the caller's setup), once the
    /// backoff allows it.
    pub async fn try_reconnect(&mut self) -> Result<(), DriverError> {
        self.backoff.wait().await;
        if let Err(e) = self.handshake().await {
            self.backoff.failed();
            return Err(e);
        }
        self.opened = std::time::Instant::now();
        self.flow_paused = false;
        self.blocked_since = None;
        if let Some(ev) = &self.events {
            ev.reconnected(&self.name, &self.ep.display, "");
        }
        Ok(())
    }

    /// Closes politely: channel.close first (RabbitMQ answers it only after every earlier
    /// method on the channel, publishes included, was handled; closing the connection
    /// straight away loses the last unconfirmed publishes), then connection.close.
    pub async fn close(&mut self) {
        if !self.wire.is_connected() {
            return;
        }
        if self.published {
            self.close_channel().await;
        }
        self.close_connection().await;
    }

    async fn close_channel(&mut self) {
        codec::put_method(
            &mut self.wire.wbuf,
            CHANNEL,
            AMQPClass::Channel(channel::AMQPMethod::Close(channel::Close {
                reply_code: 200,
                reply_text: ShortString::from("bye"),
                class_id: 0,
                method_id: 0,
            })),
        );
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            self.flush().await?;
            loop {
                if let Frame::Method(CHANNEL, m) = self.read_frame().await?
                    && matches!(*m, AMQPClass::Channel(channel::AMQPMethod::CloseOk(_)))
                {
                    return Ok::<(), io::Error>(());
                }
            }
        })
        .await;
    }

    async fn close_connection(&mut self) {
        codec::put_method(
            &mut self.wire.wbuf,
            0,
            AMQPClass::Connection(connection::AMQPMethod::Close(connection::Close {
                reply_code: 200,
                reply_text: ShortString::from("bye"),
                class_id: 0,
                method_id: 0,
            })),
        );
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            self.flush().await?;
            loop {
                if let Frame::Method(0, m) = self.read_frame().await?
                    && matches!(
                        *m,
                        AMQPClass::Connection(connection::AMQPMethod::CloseOk(_))
                    )
                {
                    return Ok::<(), io::Error>(());
                }
            }
        })
        .await;
        self.wire.detach();
    }
}

/// Where a consumer of a RabbitMQ stream starts reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamStart {
    /// At its end: only what is appended from now on (`x-stream-offset` `next`).
    Next,
    /// At this offset: a consumer back after a lost connection, at the entry after the last
    /// one it received, so nothing appended meanwhile is missed or read twice.
    At(u64),
}

/// basic.qos + basic.consume on the link's channel; returns when the server confirmed the
/// consumer. A consumer of a stream says where to start (`stream`).
pub async fn start_consuming(
    conn: &mut crate::link::Link,
    queue: &str,
    prefetch: u16,
    no_ack: bool,
    stream: Option<StreamStart>,
) -> io::Result<()> {
    let mut arguments = FieldTable::default();
    let start = match stream {
        None => None,
        Some(StreamStart::Next) => Some(AMQPValue::LongString("next".into())),
        Some(StreamStart::At(n)) => Some(AMQPValue::LongLongInt(n as i64)),
    };
    if let Some(start) = start {
        arguments.insert("x-stream-offset".into(), start);
    }
    if prefetch > 0 {
        match conn
            .call(AMQPClass::Basic(basic::AMQPMethod::Qos(basic::Qos {
                prefetch_count: prefetch,
                global: false,
            })))
            .await?
        {
            AMQPClass::Basic(basic::AMQPMethod::QosOk(_)) => {}
            other => return Err(io_err(format!("expected basic.qos-ok, got {other:?}"))),
        }
    }
    match conn
        .call(AMQPClass::Basic(basic::AMQPMethod::Consume(
            basic::Consume {
                queue: ShortString::from(queue),
                consumer_tag: ShortString::from(""),
                no_local: false,
                no_ack,
                exclusive: false,
                nowait: false,
                arguments,
            },
        )))
        .await?
    {
        AMQPClass::Basic(basic::AMQPMethod::ConsumeOk(_)) => Ok(()),
        other => Err(io_err(format!("expected basic.consume-ok, got {other:?}"))),
    }
}

/// The heartbeat interval agreed in connection.tune-ok, in seconds: the shorter of the
/// broker's and ours, or the one of them that is not zero (RabbitMQ's rule). Whole seconds on
/// the wire: a keep-alive under one second is one, not none (a zero would take the broker's
/// interval, 60 s on RabbitMQ, for a `--keep-alive 500ms`).
fn negotiate_heartbeat(server: u16, ours: Duration) -> u16 {
    let want = match ours {
        d if d.is_zero() => 0,
        d => d.as_secs().clamp(1, u16::MAX as u64) as u16,
    };
    match (server, want) {
        (0, h) | (h, 0) => h,
        (a, b) => a.min(b),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn heartbeats_are_agreed_in_whole_seconds() {
        let ms = Duration::from_millis;
        assert_eq!(
            super::negotiate_heartbeat(60, ms(500)),
            1,
            "under a second is one"
        );
        assert_eq!(super::negotiate_heartbeat(60, ms(1500)), 1);
        assert_eq!(super::negotiate_heartbeat(60, ms(30_000)), 30);
        assert_eq!(super::negotiate_heartbeat(10, ms(30_000)), 10);
        assert_eq!(super::negotiate_heartbeat(0, ms(5_000)), 5);
        assert_eq!(super::negotiate_heartbeat(60, Duration::ZERO), 60);
    }
    use super::*;

    fn no_tls() -> Result<Tls, String> {
        Err("no TLS here".into())
    }

    #[test]
    fn endpoints() {
        let e = Endpoint::parse("amqp://127.0.0.1", no_tls).unwrap();
        assert_eq!(
            (e.target.port, e.user.as_str(), e.vhost.as_str()),
            (5672, "guest", "/")
        );
        let e = Endpoint::parse("amqp://bob:s%40cret@h:1/%2f", no_tls).unwrap();
        assert_eq!((e.pass.as_str(), e.vhost.as_str()), ("s@cret", "/"));
        assert_eq!(e.display, "amqp://bob:***@h:1/%2f");
        let e = Endpoint::parse("amqp://h/prod", no_tls).unwrap();
        assert_eq!(e.vhost, "prod");
        assert!(Endpoint::parse("amqps://h", no_tls).is_err());
        assert!(Endpoint::parse("mqtt://h", no_tls).is_err());
    }
}
