//! One NATS connection: handshake, keep-alive answers, subscriptions replayed on reconnection.
//! The socket, its buffers and the silent-server watch are msgbench-net's [`Wire`], shared with
//! the other own clients. All state lives in the struct, so every async method here is
//! cancel-safe: an interrupted call loses no bytes.

use crate::proto::{self, Info, ServerOp};
use msgbench_core::driver::{ConnectFailure, DriverError, EventSink};
use msgbench_net::Wire;
use std::future::poll_fn;
use std::io;
use std::net::IpAddr;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// Where and how to connect, parsed from
/// `nats://[user:pass@|token@]host[:port][,host[:port]...][?nkey=FILE|?creds=FILE]`
/// (each further server may repeat `nats://`, as the `nats` CLI writes server lists). Several
/// servers (nodes of a cluster, or several servers on one machine) share the clients out round
/// robin by client index, as the MQTT driver does. `tls://` (or `nats+tls://`) asks for TLS,
/// which starts after the server's INFO, as NATS servers expect. `nats+ws://host:port[/path]`
/// and `nats+wss://` (`nats+js+ws[s]://` for JetStream) speak NATS over WebSocket, to a
/// nats-server `websocket` listener.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `host:port` of each server.
    pub addrs: Vec<String>,
    /// TLS connector, for `tls://` URLs.
    pub tls: Option<msgbench_net::Tls>,
    /// The WebSocket endpoint's path, for NATS over WebSocket (`None`: plain TCP).
    pub ws_path: Option<String>,
    /// `?tls_first`: the TLS handshake comes first, before the server's INFO (nats-server 2.10+
    /// with `handshake_first`, which otherwise waits in silence), instead of after it.
    pub tls_first: bool,
    user: Option<String>,
    pass: Option<String>,
    token: Option<String>,
    /// The URL with credentials removed, for messages.
    pub display: String,
    /// `nats+js://`: a JetStream client (headers on; options in the query, see `crate::js`).
    pub jetstream: bool,
    /// The nkey or `.creds` identity given in the query (`?nkey=FILE`, `?creds=FILE`).
    identity: Option<Arc<crate::nkey::Identity>>,
}

impl Endpoint {
    /// Parses a `nats://` or `tls://` URL; `tls` builds the connector for the latter.
    pub fn parse(
        url: &str,
        tls: impl FnOnce() -> Result<msgbench_net::Tls, String>,
    ) -> Result<Endpoint, DriverError> {
        let display = msgbench_core::redact::url(url);
        let (scheme, rest) = [
            "nats",
            "tls",
            "nats+tls",
            "nats+ws",
            "nats+wss",
            "nats+js",
            "nats+js+tls",
            "nats+js+ws",
            "nats+js+wss",
        ]
        .into_iter()
        .find_map(|s| Some((s, url.strip_prefix(s)?.strip_prefix("://")?)))
        .ok_or_else(|| {
            DriverError::Config(format!(
                "`{display}` is not a nats://, tls://, nats+ws:// or nats+js:// URL"
            ))
        })?;
        let jetstream = scheme.starts_with("nats+js");
        let websocket = scheme.ends_with("+ws") || scheme.ends_with("+wss");
        let tls = if matches!(scheme, "nats" | "nats+js" | "nats+ws" | "nats+js+ws") {
            None
        } else {
            Some(tls().map_err(|m| DriverError::Config(format!("TLS: {m}")))?)
        };
        let rest = rest.replace(&format!(",{scheme}://"), ",");
        let query = rest.split_once('?').map_or("", |(_, q)| q);
        let identity = identity(query)?;
        let tls_first = tls_first(query)?;
        if tls_first && websocket {
            return Err(DriverError::Config(format!(
                "`{display}`: tls_first is for TLS over plain TCP; over WebSocket TLS always comes first (nats+wss://)"
            )));
        }
        if tls_first && tls.is_none() {
            return Err(DriverError::Config(format!(
                "`{display}`: tls_first needs TLS: use tls:// (or nats+js+tls://)"
            )));
        }
        let before_query = rest.split('?').next().unwrap_or("");
        let authority = before_query.split('/').next().unwrap_or("");
        let ws_path = websocket.then(|| match &before_query[authority.len()..] {
            "" => "/".to_string(),
            p => p.to_string(),
        });
        let rest = authority;
        let (creds, hostports) = match rest.rsplit_once('@') {
            Some((c, h)) => (Some(c), h),
            None => (None, rest),
        };
        // Percent-decoded, as in every URL (the NATS clients do the same).
        use msgbench_core::redact::unescape;
        let (user, pass, token) = match creds {
            Some(c) => match c.split_once(':') {
                Some((u, p)) => (Some(unescape(u)), Some(unescape(p)), None),
                None => (None, None, Some(unescape(c))),
            },
            None => (None, None, None),
        };
        // NATS over TCP listens on 4222; a WebSocket listener has no NATS default, so a URL
        // without a port means the web's own (80, or 443 for wss), as the NATS clients take it.
        let default_port = match (websocket, tls.is_some()) {
            (false, _) => 4222,
            (true, false) => 80,
            (true, true) => 443,
        };
        let mut addrs = Vec::new();
        for hostport in hostports.split(',') {
            if hostport.is_empty() {
                return Err(DriverError::Config(format!("`{display}` has no host")));
            }
            addrs.push(if hostport.starts_with('[') {
                if hostport.contains("]:") {
                    hostport.to_string()
                } else {
                    format!("{hostport}:{default_port}")
                }
            } else if hostport.contains(':') {
                hostport.to_string()
            } else {
                format!("{hostport}:{default_port}")
            });
        }
        Ok(Endpoint {
            addrs,
            tls,
            ws_path,
            tls_first,
            user,
            pass,
            token,
            display,
            jetstream,
            identity,
        })
    }

    /// Whether the URL named an nkey or `.creds` file.
    pub fn has_identity(&self) -> bool {
        self.identity.is_some()
    }

    /// CONNECT's JSON; `nonce` is the one of the server's INFO, signed when the URL gave an
    /// nkey or `.creds` file.
    fn connect_json(&self, name: &str, nonce: Option<&str>) -> String {
        let mut v = serde_json::json!({
            "verbose": false, "pedantic": false, "name": name, "lang": "rust-msgbench",
            "version": env!("CARGO_PKG_VERSION"), "protocol": 1, "echo": true,
            // JetStream needs headers (status messages, flow control) and no-responders (a
            // publish to a subject no stream captures fails at once instead of timing out).
            "headers": self.jetstream, "no_responders": self.jetstream,
        });
        if let Some(u) = &self.user {
            v["user"] = u.clone().into();
        }
        if let Some(p) = &self.pass {
            v["pass"] = p.clone().into();
        }
        if let Some(t) = &self.token {
            v["auth_token"] = t.clone().into();
        }
        if let Some(id) = &self.identity {
            match &id.jwt {
                Some(jwt) => v["jwt"] = jwt.clone().into(),
                None => v["nkey"] = id.public.clone().into(),
            }
            if let Some(n) = nonce {
                v["sig"] = id.sign(n).into();
            }
        }
        v.to_string()
    }
}

/// The identity a query names (`nkey=FILE` or `creds=FILE`, not both), read now so a bad
/// file stops the run before it starts. Other query keys belong to `nats+js://`.
fn identity(query: &str) -> Result<Option<Arc<crate::nkey::Identity>>, DriverError> {
    let mut found = None;
    for (k, v) in query.split('&').filter_map(|p| p.split_once('=')) {
        let creds = match k {
            "nkey" => false,
            "creds" => true,
            _ => continue,
        };
        if found.is_some() {
            return Err(DriverError::Config(
                "give one of nkey= and creds=, once".into(),
            ));
        }
        found = Some(Arc::new(crate::nkey::Identity::load(v, creds)?));
    }
    Ok(found)
}

/// What a TLS client that heard no INFO is told.
const TLS_FIRST_HINT: &str = "a server with TLS handshake_first (nats-server 2.10+) waits for the \
                              client's TLS handshake before its INFO: add ?tls_first to the URL";

/// Whether the query asks for the TLS handshake first (`tls_first`, `tls_first=1|true`; `0` or
/// `false` say no).
fn tls_first(query: &str) -> Result<bool, DriverError> {
    let mut first = false;
    for p in query.split('&') {
        let (k, v) = p.split_once('=').unwrap_or((p, "1"));
        if k == "tls_first" {
            first = match v {
                "1" | "true" => true,
                "0" | "false" => false,
                _ => {
                    return Err(DriverError::Config(format!(
                        "tls_first={v}: expected 1, true, 0 or false"
                    )));
                }
            };
        }
    }
    Ok(first)
}

/// Which of the endpoint's servers a client uses, from which local address, and how its socket
/// is held.
#[derive(Debug, Clone, Copy, Default)]
pub struct Route {
    /// Client index: the server is `addrs[index % addrs.len()]`. Failed reconnections move
    /// the client on from there (`Conn::hop`), so a client whose server died fails over to
    /// the next one in the list, or to one the cluster announced.
    pub index: u64,
    /// Local address to connect from (`None`: the system's choice).
    pub source: Option<IpAddr>,
    /// Hold the socket in an io_uring table instead of a descriptor (`msgbench_net::ring`).
    pub fd_free: bool,
}

/// A subscription to replay after a reconnect.
#[derive(Debug, Clone)]
struct Sub {
    sid: u64,
    subject: String,
    queue: Option<String>,
}

/// A live (or reconnecting) connection.
pub struct Conn {
    ep: Arc<Endpoint>,
    pub(crate) name: String,
    events: EventSink,
    timeout: Duration,
    route: Route,
    /// The socket, its read and write buffers and the watch over a silent server
    /// ([`Conn::watch`]). Operations are queued whole into `wire.wbuf`.
    pub wire: Wire,
    subs: Vec<Sub>,
    /// From the server's INFO.
    pub info: Info,
    /// The handshake on the wire's socket completed. A handshake cancelled half-way (the caller's
    /// `select!` moved on) leaves a socket that is not a connection: the next call redoes it.
    ready: bool,
    /// The server's `-ERR`s, reported without flooding.
    pub errors: crate::server_errors::ServerErrors,
    /// Servers the cluster announced (INFO `connect_urls`) that the URL does not list: a
    /// client whose server dies moves on to them too, as NATS clients do, so a run given one
    /// node of a cluster rides out that node's loss.
    discovered: Vec<String>,
    /// Failed reconnections since the client's own server: the next attempt goes to the
    /// server this many places after it, over the listed then the discovered servers.
    hop: u64,
}

fn io_err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

impl Conn {
    /// Connects and completes the handshake; the error says clearly why not. `chunk` is the
    /// buffer size: large for data clients, small for held sessions. `route` picks the server,
    /// the local address and how the socket is held.
    pub async fn connect(
        ep: Arc<Endpoint>,
        name: String,
        events: EventSink,
        timeout: Duration,
        route: Route,
        chunk: usize,
    ) -> Result<Conn, DriverError> {
        let mut c = Conn {
            ep,
            name,
            events,
            timeout,
            route,
            wire: Wire::new(chunk),
            subs: Vec::new(),
            info: Info::default(),
            ready: false,
            errors: Default::default(),
            discovered: Vec::new(),
            hop: 0,
        };
        // Every server of a list is tried once, from the client's own, as NATS clients do: a
        // cluster with one node down still takes the run. The error is the first server's.
        let mut first = None;
        for _ in 0..c.ep.addrs.len() {
            match c.handshake().await {
                Ok(()) => return Ok(c),
                Err(e) => {
                    first.get_or_insert(c.connect_error(e));
                    c.route.index = c.route.index.wrapping_add(1);
                }
            }
        }
        Err(first.expect("an endpoint has at least one server"))
    }

    fn connect_error(&self, e: io::Error) -> DriverError {
        let net = e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<msgbench_net::NetError>());
        let cause = match net {
            Some(n) => n.cause,
            None if e.kind() == io::ErrorKind::PermissionDenied => ConnectFailure::Rejected,
            None => msgbench_net::classify(&e),
        };
        DriverError::Connect {
            target: if self.several() {
                format!("{} ({})", self.ep.display, self.addr())
            } else {
                self.ep.display.clone()
            },
            reason: e.to_string(),
            cause,
        }
    }

    /// `host:port` of this client's server: its own of the URL's list, or after failed
    /// reconnections (`hop`) the ones after it, the cluster's announced servers included.
    fn addr(&self) -> &str {
        let listed = &self.ep.addrs;
        let own = (self.route.index % listed.len() as u64) as usize;
        let n = listed.len() + self.discovered.len();
        let at = (own + (self.hop % n as u64) as usize) % n;
        match listed.get(at) {
            Some(a) => a,
            None => &self.discovered[at - listed.len()],
        }
    }

    /// Whether reconnections may go to several servers (events then name the one reached).
    fn several(&self) -> bool {
        self.ep.addrs.len() + self.discovered.len() > 1
    }

    /// Notes the servers a (clustered) server announced. Announcements add; a server that
    /// left the cluster stays a candidate, which costs a failed attempt at worst.
    fn learn(&mut self, urls: &[String]) {
        for u in urls {
            if !self.ep.addrs.contains(u) && !self.discovered.contains(u) {
                self.discovered.push(u.clone());
            }
        }
    }

    async fn handshake(&mut self) -> io::Result<()> {
        self.ready = false;
        self.wire.detach();
        let target = msgbench_net::Target::parse(self.addr(), 4222).map_err(io_err)?;
        // TCP_NODELAY is set by msgbench-net: Nagle plus delayed ACKs would add ~40 ms.
        let r = self.route;
        let connected = match &self.ep.ws_path {
            None => {
                msgbench_net::connect_with(&target, r.source, None, self.timeout, r.fd_free).await
            }
            // TLS, for nats+wss://, is under the WebSocket, from the start.
            Some(path) => {
                let up = msgbench_net::tunnel::Upgrade {
                    host: self.addr().to_string(),
                    path: path.clone(),
                    protocol: None,
                };
                let tls = self.ep.tls.as_ref();
                msgbench_net::tunnel::connect_ws(
                    &target,
                    r.source,
                    tls,
                    self.timeout,
                    r.fd_free,
                    &up,
                )
                .await
            }
        };
        // The classified failure travels inside the I/O error, for `connect_error`. Writes
        // buffered while disconnected are dropped by `attach`: they were never sent (integrity
        // counts them as lost); replaying them could duplicate what did go out before the cut.
        self.wire.attach(connected.map_err(io::Error::other)?);
        let limit = self.timeout;
        // Whether the server said anything: Send across the await, hence atomic.
        let heard = std::sync::atomic::AtomicBool::new(false);
        let fut = async {
            if let (true, Some(tls)) = (self.ep.tls_first, &self.ep.tls) {
                let plain = self.wire.take().ok_or_else(|| io_err("connection lost"))?;
                let secure = msgbench_net::upgrade_tls(plain, tls, &target.host, self.timeout);
                self.wire.attach(secure.await.map_err(|e| {
                    io_err(format!(
                        "{e} (with ?tls_first the TLS handshake comes first: does the server \
                         have handshake_first on? Without it, drop ?tls_first)"
                    ))
                })?);
            }
            let first = self.read_raw().await;
            heard.store(true, std::sync::atomic::Ordering::Relaxed);
            let first = match first {
                // Closed before its INFO: a handshake_first server gives up on a client that
                // does not start TLS.
                Err(e)
                    if e.kind() == io::ErrorKind::UnexpectedEof
                        && self.ep.tls.is_some()
                        && !self.ep.tls_first =>
                {
                    return Err(io::Error::new(e.kind(), format!("{e} ({TLS_FIRST_HINT})")));
                }
                // A plain client meets the same silence from a server that wants TLS first.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && self.ep.tls.is_none() => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!(
                            "{e}: the server closed the connection before its INFO (a TCP \
                             proxy whose server is down does this, and so does a server that \
                             wants TLS first, handshake_first, to a plain client: then use \
                             tls://HOST:PORT?tls_first)"
                        ),
                    ));
                }
                r => r?,
            };
            match first {
                ServerOp::Info(info) => {
                    // The servers a cluster announces are its client ports, not WebSocket ones.
                    if self.ep.ws_path.is_none() {
                        self.learn(&info.connect_urls);
                    }
                    self.info = info;
                }
                other => {
                    return Err(io_err(format!(
                        "expected INFO from the server, got {other:?}"
                    )));
                }
            }
            match (
                &self.ep.tls,
                self.info.tls_required || self.info.tls_available,
            ) {
                // Already over TLS, or TLS is the WebSocket's business.
                (Some(_), _) if self.ep.tls_first => {}
                _ if self.ep.ws_path.is_some() => {}
                (Some(tls), true) => {
                    let plain = self.wire.take().ok_or_else(|| io_err("connection lost"))?;
                    let secure = msgbench_net::upgrade_tls(plain, tls, &target.host, self.timeout);
                    self.wire.attach(secure.await.map_err(io::Error::other)?);
                }
                (Some(_), false) => {
                    return Err(io_err(
                        "the server does not offer TLS (use nats:// for a plain connection)",
                    ));
                }
                (None, _) if self.info.tls_required => {
                    return Err(io_err(
                        "the server requires TLS: use tls://host:port (with --ca-file, or --insecure)",
                    ));
                }
                (None, _) => {}
            }
            let w = &mut self.wire.wbuf;
            w.extend_from_slice(b"CONNECT ");
            let json = self.ep.connect_json(&self.name, self.info.nonce.as_deref());
            w.extend_from_slice(json.as_bytes());
            w.extend_from_slice(b"\r\n");
            for s in &self.subs {
                proto::put_sub(w, &s.subject, s.queue.as_deref(), s.sid);
            }
            w.extend_from_slice(b"PING\r\n");
            self.flush().await?;
            loop {
                match self.read_raw().await? {
                    ServerOp::Pong => return Ok(()),
                    ServerOp::Err(e) => {
                        // A nonce means nkey users or operator mode: say how to give a key,
                        // unless the URL gave a user or token (then the server may simply
                        // have nkey users beside password ones, and the password is wrong).
                        let hint = if self.info.nonce.is_some()
                            && !self.ep.has_identity()
                            && self.ep.user.is_none()
                            && self.ep.token.is_none()
                        {
                            " (the server takes nkeys or JWTs: add ?nkey=SEED_FILE or \
                             ?creds=CREDS_FILE to the URL)"
                        } else {
                            ""
                        };
                        return Err(io::Error::new(
                            io::ErrorKind::PermissionDenied,
                            format!("server refused the connection: {e}{hint}"),
                        ));
                    }
                    ServerOp::Ping => self.wire.wbuf.extend_from_slice(b"PONG\r\n"),
                    _ => {}
                }
            }
        };
        let r = match tokio::time::timeout(limit, fut).await {
            Ok(r) => r,
            Err(_)
                if !heard.load(std::sync::atomic::Ordering::Relaxed)
                    && self.ep.tls.is_some()
                    && !self.ep.tls_first =>
            {
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no INFO from the server ({TLS_FIRST_HINT})"),
                ))
            }
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no answer to the NATS handshake",
            )),
        };
        if r.is_err() {
            // A socket whose handshake failed or timed out (a server that accepted and then
            // said nothing) is not a connection: later sends must reconnect, not write to it.
            self.wire.detach();
        }
        self.ready = r.is_ok();
        r
    }

    /// Watches the server from now on (and after every reconnection): a PING after `every`
    /// without a byte from it, the connection lost after twice that (0: never). Data clients
    /// call it, so that a blackholed route or a frozen server is noticed and left; held
    /// sessions do not (the server's own PINGs keep them honest).
    pub fn watch(&mut self, every: Duration) {
        self.wire.watch(every, b"PING\r\n");
    }

    /// Registers a subscription (also replayed after reconnects) and queues the `SUB`.
    pub fn subscribe(&mut self, subject: &str, queue: Option<&str>) -> u64 {
        let sid = self.subs.len() as u64 + 1;
        self.subs.push(Sub {
            sid,
            subject: subject.to_string(),
            queue: queue.map(str::to_string),
        });
        proto::put_sub(&mut self.wire.wbuf, subject, queue, sid);
        sid
    }

    /// Whether the connection is up.
    pub fn is_connected(&self) -> bool {
        self.ready && self.wire.is_connected()
    }

    /// Writes what the socket takes now; `Ready(Ok)` once everything is written.
    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.wire.wbuf.is_empty() {
            return Poll::Ready(Ok(()));
        }
        self.wire.poll_flush(cx)
    }

    /// Writes everything buffered. Cancel-safe.
    pub async fn flush(&mut self) -> io::Result<()> {
        poll_fn(|cx| self.poll_flush(cx)).await
    }

    /// Writes what the socket takes now, without waiting.
    pub fn try_flush(&mut self) -> io::Result<()> {
        match self.poll_flush(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(r) => r,
            Poll::Pending => Ok(()),
        }
    }

    /// Handles keep-alive and errors; returns ops the caller cares about.
    fn filter(&mut self, op: ServerOp) -> Option<ServerOp> {
        match op {
            ServerOp::Ping => {
                self.wire.wbuf.extend_from_slice(b"PONG\r\n");
                None
            }
            ServerOp::Pong | ServerOp::Ok => None,
            ServerOp::Info(info) => {
                if self.ep.ws_path.is_none() {
                    self.learn(&info.connect_urls);
                }
                None
            }
            ServerOp::Err(e) => {
                self.errors.seen(&e, &self.name, &self.events);
                None
            }
            msg => Some(msg),
        }
    }

    /// The next operation, unfiltered (for handshakes). Cancel-safe.
    pub async fn raw_op(&mut self) -> io::Result<ServerOp> {
        self.read_raw().await
    }

    async fn read_raw(&mut self) -> io::Result<ServerOp> {
        loop {
            if let Some(op) = proto::parse(&mut self.wire.rbuf).map_err(|e| io_err(e.0))? {
                return Ok(op);
            }
            poll_fn(|cx| self.wire.poll_fill(cx)).await?;
        }
    }

    /// The next message, answering PINGs and flushing queued writes while it waits. Cancel-safe.
    pub async fn next_msg(&mut self) -> io::Result<ServerOp> {
        loop {
            if let Some(op) = proto::parse(&mut self.wire.rbuf).map_err(|e| io_err(e.0))? {
                if let Some(op) = self.filter(op) {
                    return Ok(op);
                }
                continue;
            }
            self.flush().await?;
            poll_fn(|cx| self.wire.poll_fill(cx)).await?;
        }
    }

    /// Polls for the next message without blocking the caller's task (producer side).
    pub fn poll_msg(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<ServerOp>> {
        loop {
            match proto::parse(&mut self.wire.rbuf) {
                Err(e) => return Poll::Ready(Err(io_err(e.0))),
                Ok(Some(op)) => {
                    if let Some(op) = self.filter(op) {
                        return Poll::Ready(Ok(op));
                    }
                    continue;
                }
                Ok(None) => {}
            }
            if let Err(e) = self.try_flush() {
                return Poll::Ready(Err(e));
            }
            match self.wire.poll_fill(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Marks the connection lost (once) and reports it.
    pub fn lost(&mut self, why: &io::Error) {
        if self.wire.detach() {
            // nats-server closes a subscriber that falls behind (its `max_pending`) without an
            // `-ERR`, and the client sees the end only once it has read what the kernel had
            // buffered, seconds later: the bare end of file is all there is to name it by.
            if !self.subs.is_empty() && why.kind() == io::ErrorKind::UnexpectedEof {
                self.events.connection_lost(
                    &self.name,
                    &format_args!(
                        "{why} (the server closed it without a word: it went down, or it dropped \
                         a slow consumer, one whose pending data passed its max_pending, which \
                         nats-server logs as \"Slow Consumer Detected\")"
                    ),
                );
            } else {
                self.events.connection_lost(&self.name, why);
            }
        }
    }

    /// One reconnection attempt; reports success. A failed attempt moves the client to the
    /// next server of a list, as NATS clients fail over within a cluster.
    pub async fn try_reconnect(&mut self) -> Result<(), DriverError> {
        match self.handshake().await.map_err(|e| self.connect_error(e)) {
            Ok(()) => {
                let to = if self.several() {
                    format!(" ({})", self.addr())
                } else {
                    String::new()
                };
                self.events.reconnected(&self.name, &self.ep.display, &to);
                Ok(())
            }
            Err(e) => {
                self.hop = self.hop.wrapping_add(1);
                Err(e)
            }
        }
    }

    /// Sends a PING and reads until its PONG (at most 2 s): the server has then taken every
    /// publish written before, or refused it with an `-ERR` that is now counted. What else
    /// arrives meanwhile is skipped (a closing producer's late replies).
    pub async fn sync(&mut self) -> io::Result<()> {
        self.wire.wbuf.extend_from_slice(b"PING\r\n");
        self.flush().await?;
        let read = async {
            loop {
                match self.read_raw().await? {
                    ServerOp::Pong => return Ok(()),
                    ServerOp::Ping => {
                        self.wire.wbuf.extend_from_slice(b"PONG\r\n");
                        self.flush().await?;
                    }
                    ServerOp::Err(e) => self.errors.seen(&e, &self.name, &self.events),
                    _ => {}
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(2), read)
            .await
            .unwrap_or(Ok(()))
    }

    /// Closes the socket (no protocol goodbye exists in NATS).
    pub fn close(&mut self) {
        self.wire.detach();
    }

    /// Reconnects, retrying with backoff (50 ms doubling to 2 s) until it works (the caller
    /// cancels to give up).
    pub async fn reconnect(&mut self) {
        let mut backoff =
            msgbench_net::Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
        while self.try_reconnect().await.is_err() {
            backoff.pause().await;
        }
    }
}

impl Drop for Conn {
    /// Repeated server errors not yet reported are reported (and counted) as it goes.
    fn drop(&mut self) {
        self.errors.flush(&self.name, &self.events);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(url: &str) -> Result<Endpoint, DriverError> {
        Endpoint::parse(url, || Err("not asked for".into()))
    }

    #[test]
    fn endpoints() {
        let e = plain("nats://127.0.0.1:14222").unwrap();
        assert_eq!(e.addrs, ["127.0.0.1:14222"]);
        let e = plain("nats://bob:pw@localhost").unwrap();
        assert_eq!(
            (e.addrs[0].as_str(), e.user.as_deref(), e.pass.as_deref()),
            ("localhost:4222", Some("bob"), Some("pw"))
        );
        assert_eq!(e.display, "nats://bob:***@localhost");
        assert!(e.connect_json("x", None).contains("\"pass\":\"pw\""));
        let e = plain("nats+ws://bob:pw@h:8080").unwrap();
        assert_eq!(
            (e.addrs[0].as_str(), e.ws_path.as_deref()),
            ("h:8080", Some("/"))
        );
        assert_eq!(e.user.as_deref(), Some("bob"));
        let e = plain("nats+js+ws://h:1/ws?stream=S").unwrap();
        assert_eq!((e.ws_path.as_deref(), e.jetstream), (Some("/ws"), true));
        assert_eq!(plain("nats://h:1/x").unwrap().ws_path, None);
        assert!(plain("nats+wss://h").is_err(), "TLS is asked for");
        let e = plain("nats://bob:p%40w%3A@h").unwrap();
        assert_eq!(e.pass.as_deref(), Some("p@w:"));
        let e = plain("nats://s3cret@h:1").unwrap();
        assert_eq!(e.token.as_deref(), Some("s3cret"));
        // TLS: asked for by the scheme, with the connector built from the TLS settings.
        assert!(e.tls.is_none());
        assert!(plain("tls://h:1").unwrap_err().to_string().contains("TLS"));
        let insecure = || {
            msgbench_net::Tls::new(&msgbench_core::scenario::TlsPlan {
                insecure: true,
                ..Default::default()
            })
        };
        let e = Endpoint::parse("nats+tls://a:1,nats+tls://b", insecure).unwrap();
        assert!(e.tls.is_some());
        assert_eq!(e.addrs, ["a:1", "b:4222"]);
        assert!(
            Endpoint::parse("tls://a:1", insecure)
                .unwrap()
                .tls
                .is_some()
        );
        assert!(plain("mqtt://a").is_err());
        assert!(plain("nats://").is_err());
        assert!(plain("nats://a:1,").is_err());
        assert_eq!(
            plain("nats://a:1,b,[::1]:3").unwrap().addrs,
            ["a:1", "b:4222", "[::1]:3"]
        );
        let e = plain("nats://u:p@a:1,nats://b:2/x").unwrap();
        assert_eq!((e.addrs.len(), e.user.as_deref()), (2, Some("u")));
        assert_eq!(plain("nats://[::1]").unwrap().addrs, ["[::1]:4222"]);
        // Over WebSocket a missing port is the web's default, not NATS's 4222.
        assert_eq!(plain("nats+ws://h/p").unwrap().addrs, ["h:80"]);
        assert_eq!(plain("nats+js+ws://[::1]").unwrap().addrs, ["[::1]:80"]);
        let wss = Endpoint::parse("nats+wss://h,g:8443", insecure).unwrap();
        assert_eq!(wss.addrs, ["h:443", "g:8443"]);
        // TLS first (nats-server's handshake_first): a flag or a boolean, over TLS only.
        let first = |url: &str| Endpoint::parse(url, insecure).map(|e| e.tls_first);
        assert!(!first("tls://a:1").unwrap());
        assert!(first("tls://a:1?tls_first").unwrap());
        assert!(first("nats+js+tls://a:1?stream=S&tls_first=true").unwrap());
        assert!(!first("tls://a:1?tls_first=0").unwrap());
        assert!(first("tls://a:1?tls_first=maybe").is_err());
        let e = plain("nats://a:1?tls_first").unwrap_err().to_string();
        assert!(e.contains("tls_first needs TLS"), "{e}");
    }
}
