//! One MQTT connection: URL parsing, connect + CONNECT/CONNACK handshake, buffered writes,
//! packet reads, subscriptions, keep-alive and reconnection. All state lives in the struct, so
//! every async method here is cancel-safe: an interrupted call loses no bytes.

use crate::codec::{self, ConnectOpts, Packet, Version};
use msgbench_core::driver::{ConnectFailure, DriverError, DriverEventKind, EventSink};
use msgbench_net::{NetError, Stream, Target, Tls, Wire};
use std::future::poll_fn;
use std::io;
use std::net::IpAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// Where and how to connect, parsed from `mqtt[s]://[user[:pass]@]host[:port][,host[:port]...]`,
/// or `mqtt+ws[s]://…[/path]` for MQTT over WebSocket (path `/mqtt` unless given).
/// Several hosts (cluster nodes, or several brokers on one machine) share the clients out round
/// robin by client index, as emqtt-bench's `-h a,b` does.
#[derive(Debug)]
pub struct Endpoint {
    /// Hosts and ports.
    pub targets: Vec<Target>,
    /// TLS connector for `mqtts://` and `mqtt+wss://`.
    pub tls: Option<Tls>,
    /// The WebSocket endpoint's path and query, for MQTT over WebSocket (`None`: plain MQTT).
    pub ws_path: Option<String>,
    username: Option<String>,
    password: Option<String>,
    /// The URL with credentials removed, for messages.
    pub display: String,
}

impl Endpoint {
    /// Parses the URL; `tls` builds the connector for `mqtts://`.
    pub fn parse(
        url: &str,
        tls: impl FnOnce() -> Result<Tls, String>,
    ) -> Result<Endpoint, DriverError> {
        let display = msgbench_core::redact::url(url);
        let (secure, websocket, rest) = if let Some(r) = url.strip_prefix("mqtt://") {
            (false, false, r)
        } else if let Some(r) = url.strip_prefix("mqtts://") {
            (true, false, r)
        } else if let Some(r) = url.strip_prefix("mqtt+ws://") {
            (false, true, r)
        } else if let Some(r) = url.strip_prefix("mqtt+wss://") {
            (true, true, r)
        } else {
            return Err(DriverError::Config(format!(
                "`{display}` is not an mqtt://, mqtts://, mqtt+ws:// or mqtt+wss:// URL"
            )));
        };
        let authority = rest.split(['/', '?']).next().unwrap_or("");
        let path = &rest[authority.len()..];
        let ws_path = match path {
            _ if websocket && (path.is_empty() || path.starts_with('?')) => {
                Some(format!("/mqtt{path}"))
            }
            _ if websocket => Some(path.to_string()),
            "" | "/" => None,
            // A path or options would be silently ignored, and a run believed to be QoS 1
            // would measure QoS 0: refused, with where those settings go instead.
            _ => {
                return Err(DriverError::Config(format!(
                    "`{display}`: an MQTT URL names hosts and ports only, no path or ?options: QoS, protocol version, client ids and sessions are set with --qos, --mqtt-version, --client-id and --persistent-session (a path is for MQTT over WebSocket: mqtt+ws://host:port/path)"
                )));
            }
        };
        let (creds, hostport) = match authority.rsplit_once('@') {
            Some((c, h)) => (Some(c), h),
            None => (None, authority),
        };
        // Percent-decoded, as in every URL: a password with `@`, `:` or `/` can only be
        // written escaped.
        use msgbench_core::redact::unescape;
        let (username, password) = match creds {
            Some(c) => match c.split_once(':') {
                Some((u, p)) => (Some(unescape(u)), Some(unescape(p))),
                None => (Some(unescape(c)), None),
            },
            None => (None, None),
        };
        let targets = hostport
            .split(',')
            .map(|h| {
                let port = match (websocket, secure) {
                    (false, false) => 1883,
                    (false, true) => 8883,
                    (true, false) => 80,
                    (true, true) => 443,
                };
                Target::parse(h, port)
            })
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
            ws_path,
            username,
            password,
            display,
        })
    }
}

/// Per-connection protocol settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// 3.1.1 or 5.
    pub version: Version,
    /// Keep-alive (PINGREQ when nothing was sent for this long; 0 = off).
    pub keep_alive: Duration,
    /// Clean session / clean start.
    pub clean: bool,
    /// Connect timeout (TCP + TLS + CONNACK).
    pub timeout: Duration,
    /// Largest packet accepted from the server.
    pub max_packet: usize,
}

/// Which of the endpoint's hosts a client uses, from which local address, and how its socket is
/// held.
#[derive(Debug, Clone, Copy, Default)]
pub struct Route {
    /// Client index: the host is `targets[index % targets.len()]`. A failed reconnection moves
    /// it on, so a client whose broker died fails over to the next one in the list.
    pub index: u64,
    /// Local address to connect from (`None`: the system's choice).
    pub source: Option<IpAddr>,
    /// Hold the socket in an io_uring table instead of a descriptor (plain TCP only; see
    /// `msgbench_net::ring`).
    pub fd_free: bool,
}

/// How far a handshake got on the socket attached. The runner cancels a consumer's `recv`,
/// reconnection included, at every tick: a handshake cut short after its CONNECT went out goes
/// on at the next attempt, on the same socket, instead of opening another connection with the
/// same client id, which a broker still busy with the first takes for a second client
/// (ActiveMQ Classic refused it with CONNACK 0x02 over WebSocket, or cut one of the two). The
/// connection attempt before it is kept the same way (`Conn::connecting`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Nothing sent on this socket (or no socket): connect afresh.
    Fresh,
    /// CONNECT sent (or being written); the CONNACK is due by then.
    Connack(tokio::time::Instant),
    /// CONNACK taken; the subscriptions are being made again.
    Subscribing,
    /// Up.
    Done,
}

/// A connection attempt in progress (TCP, TLS, the WebSocket upgrade).
type Connecting =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Stream, NetError>> + Send>>;

/// A live (or reconnecting) connection.
pub struct Conn {
    ep: Arc<Endpoint>,
    settings: Settings,
    client_id: String,
    /// Where connection events go (`None` for connection-scale sessions, which count instead).
    events: Option<EventSink>,
    route: Route,
    /// Socket and buffers.
    pub wire: Wire,
    subs: Vec<(String, u8)>,
    /// Packets that arrived while a consumer's SUBSCRIBE waited for its SUBACK (a persistent
    /// session's stored messages come before it on HiveMQ): read before the socket, so they
    /// are delivered and acknowledged like any.
    early: std::collections::VecDeque<Packet>,
    /// MQTT 5 receive maximum from CONNACK (65535 for 3.1.1).
    pub receive_max: u16,
    /// Largest packet the server takes (0 = unknown).
    pub server_max_packet: u32,
    /// The server kept our session at the last connect.
    pub session_present: bool,
    /// MQTT 5 maximum QoS the server supports (2 for 3.1.1, which cannot say).
    pub max_qos: u8,
    /// Whether the server takes `$share` filters (MQTT 5 CONNACK; 3.1.1 cannot say).
    pub shared_subs: bool,
    /// Pauses between reconnection attempts (50 ms doubling to 2 s), kept across losses: a
    /// connection lost within a second of opening counts as a failed attempt, so a broker
    /// that accepts the connection and drops it at the first PUBLISH (a topic the ACL
    /// forbids) is not reconnected to in a loop.
    backoff: msgbench_net::Backoff,
    /// When the last handshake completed.
    opened: std::time::Instant,
    /// The last handshake went through to its end (CONNACK taken, subscriptions made again):
    /// the runner cancels a consumer's `recv` at every tick, and a reconnection cut short
    /// after the socket was attached had left a connection that looked up and was never
    /// subscribed, for the rest of the run.
    up: bool,
    /// How far the handshake on the attached socket got (see [`Stage`]).
    stage: Stage,
    /// A connection being made, kept across a cancelled handshake like [`Stage`]: dropped
    /// half-way, it would reach the broker as a client that came and went at once.
    connecting: Option<Connecting>,
    /// Said once: the broker claimed a kept session for a clean one.
    told_session_claim: bool,
}

impl Conn {
    /// Connects and completes the handshake; the error says why not. `chunk` is the read
    /// buffer growth step: large for data clients, small for the thousands of idle sessions.
    pub async fn connect(
        ep: Arc<Endpoint>,
        settings: Settings,
        client_id: String,
        events: Option<EventSink>,
        route: Route,
        chunk: usize,
    ) -> Result<Conn, DriverError> {
        let mut c = Conn {
            ep,
            settings,
            client_id,
            events,
            route,
            wire: Wire::new(chunk),
            subs: Vec::new(),
            early: Default::default(),
            receive_max: u16::MAX,
            server_max_packet: 0,
            session_present: false,
            max_qos: 2,
            shared_subs: true,
            backoff: msgbench_net::Backoff::new(Duration::from_millis(50), Duration::from_secs(2)),
            opened: std::time::Instant::now(),
            up: false,
            stage: Stage::Fresh,
            connecting: None,
            told_session_claim: false,
        };
        c.handshake().await?;
        Ok(c)
    }

    fn target(&self) -> &Target {
        let t = &self.ep.targets;
        &t[(self.route.index % t.len() as u64) as usize]
    }

    fn connect_error(&self, e: NetError) -> DriverError {
        DriverError::Connect {
            target: if self.ep.targets.len() > 1 {
                let t = self.target();
                format!("{} ({}:{})", self.ep.display, t.host, t.port)
            } else {
                self.ep.display.clone()
            },
            reason: e.detail,
            cause: e.cause,
        }
    }

    async fn handshake(&mut self) -> Result<(), DriverError> {
        self.up = false;
        if !self.wire.is_connected() || matches!(self.stage, Stage::Fresh | Stage::Done) {
            self.open().await?;
        }
        if let Stage::Connack(deadline) = self.stage {
            self.await_connack(deadline).await?;
            self.stage = Stage::Subscribing;
        }
        // Resubscribe when the broker did not keep the session.
        if !self.subs.is_empty() && !self.session_present {
            let subs = self.subs.clone();
            if let Err(e) = self.subscribe_keeping_early(&subs).await {
                self.wire.detach();
                self.stage = Stage::Fresh;
                return Err(DriverError::Subscribe(e.to_string()));
            }
        }
        self.stage = Stage::Done;
        self.wire.shrink();
        self.opened = std::time::Instant::now();
        self.up = true;
        Ok(())
    }

    /// Connects afresh and queues the CONNECT.
    async fn open(&mut self) -> Result<(), DriverError> {
        self.stage = Stage::Fresh;
        if self.connecting.is_none() {
            self.wire.detach();
            let timeout = self.settings.timeout;
            let (target, source, fd_free) =
                (self.target().clone(), self.route.source, self.route.fd_free);
            let tls = self.ep.tls.clone();
            let up = self.ep.ws_path.as_ref().map(|path| {
                let t = &target;
                let host = if t.host.contains(':') {
                    format!("[{}]:{}", t.host, t.port)
                } else {
                    format!("{}:{}", t.host, t.port)
                };
                msgbench_net::tunnel::Upgrade {
                    host,
                    path: path.clone(),
                    protocol: Some("mqtt"),
                }
            });
            self.connecting = Some(Box::pin(async move {
                match up {
                    None => {
                        msgbench_net::connect_with(&target, source, tls.as_ref(), timeout, fd_free)
                            .await
                    }
                    Some(up) => {
                        let tls = tls.as_ref();
                        msgbench_net::tunnel::connect_ws(
                            &target, source, tls, timeout, fd_free, &up,
                        )
                        .await
                    }
                }
            }));
        }
        let connecting = self.connecting.as_mut().expect("set above");
        let r = connecting.await;
        self.connecting = None;
        let stream = r.map_err(|e| self.connect_error(e))?;
        // Writes buffered while disconnected are dropped (integrity counts them as lost).
        self.wire.attach(stream);
        // Data clients notice a silent broker (a blackholed route, a frozen host): a PINGREQ
        // after one keep-alive period without a byte, the connection dropped after two (held
        // sessions, thousands of them, are not watched: nothing of theirs is in flight).
        if self.events.is_some() {
            self.wire.watch(self.settings.keep_alive, &codec::PINGREQ);
        }
        let v5 = self.settings.version == Version::V5;
        codec::put_connect(
            &mut self.wire.wbuf,
            &ConnectOpts {
                version: self.settings.version,
                client_id: &self.client_id,
                keep_alive: self.settings.keep_alive.as_secs().min(65_535) as u16,
                clean: self.settings.clean,
                username: self.ep.username.as_deref(),
                password: self.ep.password.as_deref(),
                session_expiry: if v5 && !self.settings.clean {
                    u32::MAX
                } else {
                    0
                },
            },
        );
        // No await since the socket was attached: a cancellation leaves a consistent stage.
        self.stage = Stage::Connack(tokio::time::Instant::now() + self.settings.timeout);
        Ok(())
    }

    /// Writes what is left of the CONNECT and takes the CONNACK, by `deadline`.
    async fn await_connack(&mut self, deadline: tokio::time::Instant) -> Result<(), DriverError> {
        let timeout = self.settings.timeout;
        let v5 = self.settings.version == Version::V5;
        let r = tokio::time::timeout_at(deadline, async {
            self.flush().await.map_err(|e| NetError::from_io(&e))?;
            let packet = self.read_packet().await.map_err(|e| {
                let mut n = NetError::from_io(&e);
                // Not MQTT that answered: say what did (the parse error alone would name a
                // packet type the other protocol's first byte happens to look like).
                if let Some(what) = msgbench_net::sniff(&self.wire.rbuf) {
                    n.cause = ConnectFailure::Rejected;
                    n.detail = format!("the server on this port speaks {what}, not MQTT");
                    return n;
                }
                // Brokers that know only MQTT 3.1.1 (RabbitMQ 3.x, ActiveMQ Classic) may
                // answer an MQTT 5 CONNECT by closing the connection.
                if v5 && e.kind() == std::io::ErrorKind::UnexpectedEof {
                    n.detail = "the broker closed the connection in answer to an MQTT 5 \
                                CONNECT: it may not speak MQTT 5 (use --mqtt-version 3.1.1), \
                                or it is a TCP proxy whose broker is down"
                        .into();
                } else if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    n.detail = format!(
                        "{e}: the server closed the connection before its CONNACK (a TLS port \
                         does this to a plain client: use mqtts://; so does a TCP proxy whose \
                         broker is down)"
                    );
                }
                n
            })?;
            match packet {
                Packet::ConnAck {
                    session_present,
                    code,
                    receive_max,
                    max_packet,
                    max_qos,
                    server_keep_alive,
                    shared_subs,
                    reason,
                } => {
                    if code != 0 {
                        return Err(NetError {
                            cause: ConnectFailure::Rejected,
                            detail: format!(
                                "the broker refused the connection: {}{}",
                                connack_meaning(self.settings.version, code),
                                reason.map(|r| format!(" ({r})")).unwrap_or_default()
                            ),
                        });
                    }
                    // A clean session has nothing kept (MQTT-3.2.2-1): a broker that says
                    // otherwise (hmq) would leave the consumer unsubscribed.
                    let claimed = session_present && self.settings.clean;
                    if claimed && !self.told_session_claim {
                        self.told_session_claim = true;
                        self.warn(
                            "the broker answered a clean session's CONNECT with Session Present \
                             (MQTT-3.2.2-1 forbids it): taken as a new session, subscribed again",
                        );
                    }
                    self.session_present = session_present && !claimed;
                    self.receive_max = receive_max.max(1);
                    self.server_max_packet = max_packet;
                    self.max_qos = max_qos;
                    self.shared_subs = shared_subs;
                    // The server's keep-alive replaces ours (MQTT 5, 3.2.2.3.14): pinging at
                    // our own period, a connection idle longer than its is closed.
                    if let Some(k) = server_keep_alive {
                        self.settings.keep_alive = Duration::from_secs(k.into());
                        if self.events.is_some() {
                            self.wire.watch(self.settings.keep_alive, &codec::PINGREQ);
                        }
                    }
                    Ok(())
                }
                other => Err(NetError {
                    cause: ConnectFailure::Other,
                    detail: format!("expected CONNACK, got {other:?}"),
                }),
            }
        })
        .await;
        let r = match r {
            Ok(r) => r,
            Err(_) => Err(NetError {
                cause: ConnectFailure::Timeout,
                detail: if self.wire.rbuf.is_empty() && self.ep.ws_path.is_none() {
                    format!(
                        "no CONNACK within {timeout:?}, nor any byte (a WebSocket listener \
                         waits in silence for an HTTP upgrade: mqtt+ws://HOST:PORT/PATH)"
                    )
                } else {
                    format!("no CONNACK within {timeout:?}")
                },
            }),
        };
        if let Err(e) = r {
            self.wire.detach();
            self.stage = Stage::Fresh;
            return Err(self.connect_error(e));
        }
        Ok(())
    }

    /// Subscribes (and remembers the filters, to resubscribe after a reconnect without a kept
    /// session). Returns when the broker granted every filter.
    /// Whatever arrives before the SUBACK is kept and read first (see [`Conn::poll_packet`]).
    pub async fn subscribe(&mut self, filters: &[(String, u8)]) -> Result<(), DriverError> {
        self.subs.extend_from_slice(filters);
        self.subscribe_keeping_early(filters)
            .await
            .map_err(|e| DriverError::Subscribe(e.to_string()))
    }

    /// Sends SUBSCRIBE and waits for its SUBACK, keeping what arrives meanwhile in `early`.
    async fn subscribe_keeping_early(&mut self, filters: &[(String, u8)]) -> io::Result<()> {
        let mut early = std::mem::take(&mut self.early);
        let r = self.send_subscribe(filters, |p| early.push_back(p)).await;
        self.early = early;
        r
    }

    /// Subscribes once (not replayed after a reconnect: for sessions, which do not
    /// reconnect); packets that arrive before the SUBACK go to `heard`.
    pub async fn subscribe_once(
        &mut self,
        filters: &[(String, u8)],
        heard: impl FnMut(&Packet),
    ) -> Result<(), DriverError> {
        let mut heard = heard;
        self.send_subscribe(filters, |p| heard(&p))
            .await
            .map_err(|e| DriverError::Subscribe(e.to_string()))
    }

    /// Sends SUBSCRIBE and waits for its SUBACK; what else arrives meanwhile goes to `heard`.
    async fn send_subscribe(
        &mut self,
        filters: &[(String, u8)],
        mut heard: impl FnMut(Packet),
    ) -> io::Result<()> {
        let list: Vec<(&str, u8)> = filters.iter().map(|(f, q)| (f.as_str(), *q)).collect();
        codec::put_subscribe(&mut self.wire.wbuf, self.settings.version, 1, &list);
        self.flush().await?;
        let deadline = tokio::time::Instant::now() + self.settings.timeout;
        let codes = loop {
            let p = tokio::time::timeout_at(deadline, self.read_packet())
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no SUBACK"))??;
            match p {
                Packet::SubAck { codes, .. } => break codes,
                p => heard(p),
            }
        };
        if let Some((i, c)) = codes.iter().enumerate().find(|(_, c)| **c >= 0x80) {
            return Err(io::Error::other(format!(
                "the broker refused the subscription to `{}`: {} (reason code 0x{c:02x})",
                filters.get(i).map_or("?", |f| f.0.as_str()),
                codec::disconnect_reason(*c)
            )));
        }
        // A lower QoS granted than asked: deliveries would come at that QoS, and the run would
        // report figures for one it does not measure.
        if let Some(((f, asked), granted)) = filters.iter().zip(&codes).find(|((_, q), g)| **g < *q)
        {
            return Err(io::Error::other(format!(
                "the broker granted QoS {granted} for `{f}`, not the {asked} asked: deliveries \
                 would not be QoS {asked} (its maximum may be {granted}: use --qos {granted})"
            )));
        }
        Ok(())
    }

    /// Whether the connection is up.
    pub fn is_connected(&self) -> bool {
        self.up && self.wire.is_connected()
    }

    /// The client identifier this connection presents.
    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    /// Reports a warning about this connection (data clients only; sessions count instead).
    pub fn warn(&self, detail: &str) {
        if let Some(ev) = &self.events {
            ev.emit(
                msgbench_core::driver::DriverEventKind::Warning,
                format!("{}: {detail}", self.client_id),
            );
        }
    }

    /// The keep-alive in force: the client's, or the one the server set in its CONNACK.
    pub fn keep_alive(&self) -> Duration {
        self.settings.keep_alive
    }

    /// Refuses `qos` if the server said it does not support it (MQTT 5 maximum QoS): its
    /// messages would travel at a lower QoS than the run measures.
    pub fn check_qos(&self, qos: u8) -> Result<(), DriverError> {
        if qos > self.max_qos {
            return Err(DriverError::Config(format!(
                "{}: the broker supports QoS {} at most (maximum QoS in its CONNACK), so QoS \
                 {qos} cannot be measured there: use --qos {}",
                self.ep.display, self.max_qos, self.max_qos
            )));
        }
        Ok(())
    }

    /// Protocol version of this connection.
    pub fn version(&self) -> Version {
        self.settings.version
    }

    /// Writes what the socket takes now; `Ready(Ok)` when everything is written.
    pub fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.wire.poll_flush(cx)
    }

    /// Writes everything buffered. Cancel-safe.
    pub async fn flush(&mut self) -> io::Result<()> {
        self.wire.flush().await
    }

    /// The next packet (see [`Wire::poll_next`] for `flush`). Cancel-safe.
    pub fn poll_packet(&mut self, cx: &mut Context<'_>, flush: bool) -> Poll<io::Result<Packet>> {
        if let Some(p) = self.early.pop_front() {
            return Poll::Ready(Ok(p));
        }
        let (version, max) = (self.settings.version, self.settings.max_packet);
        self.wire
            .poll_next(cx, flush, |b| codec::parse(b, version, max))
    }

    /// The next packet (see [`Conn::poll_packet`]).
    pub async fn read_packet(&mut self) -> io::Result<Packet> {
        poll_fn(|cx| self.poll_packet(cx, true)).await
    }

    /// How long the current connection has been open.
    pub fn lived(&self) -> Duration {
        self.opened.elapsed()
    }

    /// Marks the connection lost (once) and reports it.
    pub fn lost(&mut self, why: &io::Error) {
        if self.wire.detach() {
            self.backoff.lost_after(self.opened.elapsed());
            if let Some(ev) = &self.events {
                ev.connection_lost(&self.client_id, why);
            }
        }
    }

    /// One reconnection attempt. A failed attempt moves the client to the next host of a list
    /// (a clustered broker's other nodes).
    pub async fn try_reconnect(&mut self) -> Result<(), DriverError> {
        self.backoff.wait().await;
        if let Err(e) = self.handshake().await {
            self.backoff.failed();
            self.route.index = self.route.index.wrapping_add(1);
            return Err(e);
        }
        if let Some(ev) = &self.events {
            let mut note = String::new();
            if self.ep.targets.len() > 1 {
                let t = self.target();
                note = format!(" ({}:{})", t.host, t.port);
            }
            if self.session_present {
                note.push_str(" (session kept)");
            } else if !self.settings.clean {
                // A persistent session the broker did not keep (restarted without persistence,
                // or expired): what it held for this client is gone, which the loss would
                // otherwise blame on the broker's delivery.
                // Some brokers never set the flag (ActiveMQ Classic keeps sessions and still
                // answers 0), so this says what the broker answered, not what it did.
                note.push_str(
                    " (the broker's CONNACK says it kept no session for this client: what it \
                     held for it is gone, or the broker does not say so, as ActiveMQ Classic \
                     never does",
                );
                note.push_str(if self.subs.is_empty() {
                    ")"
                } else {
                    "; subscribed again)"
                });
            }
            ev.reconnected(&self.client_id, &self.ep.display, &note);
        }
        Ok(())
    }

    /// Reconnects, retrying with backoff (50 ms doubling to 2 s) until it works (the caller
    /// cancels to give up). The first failed attempt is reported, with its reason: a
    /// subscriber kept away (a broker still down, or refusing it) is otherwise silent until
    /// its deliveries are missed.
    pub async fn reconnect(&mut self) {
        let mut told = false;
        while let Err(e) = self.try_reconnect().await {
            if !told && let Some(ev) = &self.events {
                told = true;
                ev.emit(
                    DriverEventKind::Warning,
                    format!(
                        "{}: reconnecting failed: {e}; retrying with backoff until it works",
                        self.client_id
                    ),
                );
            }
        }
    }

    /// Closes politely (DISCONNECT), ignoring errors: the peer may already be gone.
    pub async fn disconnect(&mut self) {
        if self.wire.is_connected() {
            codec::put_disconnect(&mut self.wire.wbuf);
            let _ = tokio::time::timeout(Duration::from_secs(2), self.flush()).await;
            if let Some(s) = self.wire.stream_mut().filter(|s| s.closes_politely()) {
                let _ = tokio::time::timeout(
                    Duration::from_secs(1),
                    tokio::io::AsyncWriteExt::shutdown(s),
                )
                .await;
            }
        }
        self.wire.detach();
    }
}

/// Human meaning of a CONNACK refusal.
fn connack_meaning(version: Version, code: u8) -> String {
    let text = match (version, code) {
        (Version::V311, 1) => "unacceptable protocol version",
        // A 3.1.1-only broker answers an MQTT 5 CONNECT with its own refusal code 1.
        (Version::V5, 1) => {
            "unacceptable protocol version: the broker does not speak MQTT 5 (use --mqtt-version 3.1.1)"
        }
        // Also what ActiveMQ Classic answers while it still holds another connection with the
        // same client id.
        (Version::V311, 2) => {
            "client identifier rejected (the broker may still hold another connection with this \
             client id)"
        }
        (Version::V311, 3) => "server unavailable",
        (Version::V311, 4) => "bad user name or password",
        (Version::V311, 5) => "not authorized",
        (Version::V5, 0x84) => "unsupported protocol version",
        (Version::V5, 0x85) => "client identifier not valid",
        (Version::V5, 0x86) => "bad user name or password",
        (Version::V5, 0x87) => "not authorized",
        (Version::V5, 0x88) => "server unavailable",
        (Version::V5, 0x89) => "server busy",
        (Version::V5, 0x8a) => "banned",
        (Version::V5, 0x97) => "quota exceeded",
        _ => "refused",
    };
    format!("{text} (code 0x{code:02x})")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_tls() -> Result<Tls, String> {
        Err("no TLS in this test".into())
    }

    #[test]
    fn endpoints() {
        let e = Endpoint::parse("mqtt://127.0.0.1", no_tls).unwrap();
        let t = &e.targets[0];
        assert_eq!((t.host.as_str(), t.port), ("127.0.0.1", 1883));
        let e = Endpoint::parse("mqtt://u:p@a:1,b,c:3", no_tls).unwrap();
        let hosts: Vec<_> = e
            .targets
            .iter()
            .map(|t| (t.host.as_str(), t.port))
            .collect();
        assert_eq!(hosts, [("a", 1), ("b", 1883), ("c", 3)]);
        assert!(Endpoint::parse("mqtt://a,", no_tls).is_err());
        let e = Endpoint::parse("mqtt://bob:pw@h:2", no_tls).unwrap();
        assert_eq!(
            (
                e.username.as_deref(),
                e.password.as_deref(),
                e.display.as_str()
            ),
            (Some("bob"), Some("pw"), "mqtt://bob:***@h:2")
        );
        assert!(
            Endpoint::parse("mqtts://h", no_tls)
                .unwrap_err()
                .to_string()
                .contains("TLS")
        );
        assert!(Endpoint::parse("nats://h", no_tls).is_err());
        assert!(Endpoint::parse("mqtt://", no_tls).is_err());
        assert!(Endpoint::parse("mqtt://h:1/", no_tls).is_ok());
        let e = Endpoint::parse("mqtt://b%40b:p%40ss%3Aw%2Frd@h", no_tls).unwrap();
        assert_eq!(
            (e.username.as_deref(), e.password.as_deref()),
            (Some("b@b"), Some("p@ss:w/rd"))
        );
        let e = Endpoint::parse("mqtt+ws://h", no_tls).unwrap();
        let t = &e.targets[0];
        assert_eq!((t.port, e.ws_path.as_deref()), (80, Some("/mqtt")));
        let e = Endpoint::parse("mqtt+ws://u:p@h:15675/ws?x=1", no_tls).unwrap();
        let t = &e.targets[0];
        assert_eq!((t.port, e.ws_path.as_deref()), (15675, Some("/ws?x=1")));
        assert_eq!(e.display, "mqtt+ws://u:***@h:15675/ws?x=1");
        let e = Endpoint::parse("mqtt+ws://h:1?a", no_tls).unwrap();
        assert_eq!(e.ws_path.as_deref(), Some("/mqtt?a"));
        assert!(Endpoint::parse("mqtt+wss://h", no_tls).is_err());
        for bad in ["mqtt://h?qos=1", "mqtt://u:pw@h:1/x", "mqtt://h/?clean=0"] {
            let e = Endpoint::parse(bad, no_tls).unwrap_err().to_string();
            assert!(
                e.contains("no path or ?options") && e.contains("--qos"),
                "{bad}: {e}"
            );
            assert!(!e.contains("pw"), "{e}");
        }
        assert!(connack_meaning(Version::V311, 5).contains("not authorized"));
    }
}
