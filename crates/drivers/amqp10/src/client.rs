//! Where and how to connect, and the handshake: an `amqp10://` / `amqp10s://` URL parsed
//! once ([`Endpoint`]) and [`Endpoint::open`], which makes a [`Conn`] of it.
//!
//! - TCP (NODELAY) and TLS (rustls with the run's [`TlsPlan`]) come from `msgbench-net`.
//! - SASL PLAIN with the URL's userinfo (percent-decoded), SCRAM with it where the broker
//!   offers no PLAIN ([`msgbench_net::scram`]), ANONYMOUS without one.
//! - Each handshake step waits for the answer it depends on (SASL header, init, AMQP header,
//!   `open`, `begin`), so intermediaries that terminate the handshake step by step work; with
//!   [`Endpoint::pipeline`] (`--pipeline-handshake`) `open` and `begin` go with the protocol
//!   header, two round trips fewer per connection.
//!
//! Errors are [`DriverError`]s that say what the broker said: the SASL outcome for a wrong
//! password, the error condition and description of a refused connection. Credentials never
//! appear in them.

// Percent-decoding of URL parts (`%40` is `@`), shared with the other drivers.
use crate::conn::{CHUNK, Conn};
use crate::frames::{self, AmqpError, Performative};
use bytes::BytesMut;
use msgbench_core::driver::{ConnectFailure, DriverError};
use msgbench_core::redact::unescape;
use msgbench_core::scenario::TlsPlan;
use msgbench_net::Wire;
use msgbench_net::scram::{self, Scram};
use std::net::IpAddr;
use std::time::Duration;

/// Read buffer growth of idle connections.
const IDLE_CHUNK: usize = 2048;

/// Default port of `amqp10://`.
pub const PORT: u16 = 5672;
/// Default port of `amqp10s://`.
pub const TLS_PORT: u16 = 5671;

/// Where and how to connect: an `amqp10[s]://[user:pass@]host[:port]` URL, parsed.
#[derive(Debug)]
pub struct Endpoint {
    target: msgbench_net::Target,
    tls: Option<msgbench_net::Tls>,
    /// User and password (percent-decoded), or `None` for SASL ANONYMOUS.
    login: Option<(String, String)>,
    /// The hostname `open` and `sasl-init` name (the virtual host, for the brokers that keep
    /// several), when not the target's host.
    hostname: Option<String>,
    display: String,
    /// Write open and begin with the protocol header instead of waiting for each answer
    /// (`ClientPlan::pipeline_handshake`).
    pub pipeline: bool,
    /// Data connections announce this as their idle time-out and drop a connection on which
    /// the peer was silent for two of them ([`Wire::watch`]); 0: neither.
    pub keep_alive: Duration,
}

impl Endpoint {
    /// Parses `url`; `tls` is used for `amqp10s://` (verification on unless `tls.insecure`).
    pub fn parse(url: &str, tls: &TlsPlan) -> Result<Endpoint, DriverError> {
        let display = msgbench_core::redact::url(url);
        let (secure, rest) = if let Some(r) = url.strip_prefix("amqp10://") {
            (false, r)
        } else if let Some(r) = url.strip_prefix("amqp10s://") {
            (true, r)
        } else {
            return Err(DriverError::Config(format!(
                "`{display}` is not an amqp10:// or amqp10s:// URL"
            )));
        };
        let authority = rest.split(['/', '?']).next().unwrap_or("");
        // The open frame's hostname: Qpid Broker-J picks the virtual host by it (as its
        // AMQP 0-9-1 side does by the URL's path), RabbitMQ's plugin by `vhost:NAME`. From the
        // path or `?hostname=`; the host itself by default. Nothing else is taken, and
        // nothing is ignored in silence.
        let (path, query) = rest[authority.len()..]
            .split_once('?')
            .unwrap_or((&rest[authority.len()..], ""));
        let mut hostname = Some(unescape(path.trim_start_matches('/'))).filter(|h| !h.is_empty());
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("hostname", v)) if !v.is_empty() => hostname = Some(unescape(v)),
                _ => {
                    return Err(DriverError::Config(format!(
                        "`{display}`: unknown option `{pair}` (a broker URL takes ?hostname=NAME, \
                         the virtual host to open; brokerless ones ?bind=...)"
                    )));
                }
            }
        }
        let (login, hostport) = match authority.rsplit_once('@') {
            Some((creds, h)) => {
                let (u, p) = creds.split_once(':').unwrap_or((creds, ""));
                (Some((unescape(u), unescape(p))), h)
            }
            None => (None, authority),
        };
        let target = msgbench_net::Target::parse(hostport, if secure { TLS_PORT } else { PORT })
            .map_err(|m| DriverError::Config(format!("{display}: {m}")))?;
        let tls = if secure {
            Some(
                msgbench_net::Tls::new(tls)
                    .map_err(|m| DriverError::Config(format!("TLS: {m}")))?,
            )
        } else {
            None
        };
        Ok(Endpoint {
            target,
            tls,
            login,
            hostname,
            display,
            pipeline: false,
            keep_alive: Duration::ZERO,
        })
    }

    /// The URL without its password, for messages and events.
    pub fn display(&self) -> &str {
        &self.display
    }

    fn who(&self) -> String {
        match &self.login {
            Some((u, _)) => format!("user `{u}`"),
            None => "an anonymous login (no user in the URL)".into(),
        }
    }

    fn connect_error(&self, reason: String, cause: ConnectFailure) -> DriverError {
        DriverError::Connect {
            target: self.display.clone(),
            reason,
            cause,
        }
    }

    /// The broker closed the connection with `err` while it was being set up (Artemis accepts
    /// any SASL mechanism, then refuses an unauthenticated connection this way).
    fn closed_with(&self, err: Option<&AmqpError>) -> DriverError {
        let unauthorized = err.is_some_and(|e| e.condition == "amqp:unauthorized-access");
        let said = err.map_or_else(|| "no reason given".to_string(), AmqpError::to_string);
        let reason = if unauthorized {
            format!(
                "authentication failed: the broker refused {}: {said}",
                self.who()
            )
        } else if self.login.is_none() {
            format!(
                "the broker closed the connection ({said}); for {} that usually means \
                 authentication failed: put user:password in the URL",
                self.who()
            )
        } else {
            format!("the broker closed the connection: {said}")
        };
        self.connect_error(reason, ConnectFailure::Rejected)
    }

    /// Connects (TCP + TLS from `source` if given), authenticates, opens the connection and
    /// begins its session, all within `timeout`. `container_id` names this client.
    pub async fn open(
        &self,
        container_id: &str,
        source: Option<IpAddr>,
        timeout: Duration,
    ) -> Result<Conn, DriverError> {
        self.open_with(container_id, source, timeout, CHUNK).await
    }

    /// [`Endpoint::open`] for a connection that stays mostly idle (connection workloads hold
    /// thousands): its read buffer grows in small steps.
    pub async fn open_idle(
        &self,
        container_id: &str,
        source: Option<IpAddr>,
        timeout: Duration,
    ) -> Result<Conn, DriverError> {
        self.open_with(container_id, source, timeout, IDLE_CHUNK)
            .await
    }

    async fn open_with(
        &self,
        container_id: &str,
        source: Option<IpAddr>,
        timeout: Duration,
        chunk: usize,
    ) -> Result<Conn, DriverError> {
        let work = self.handshake(container_id, source, timeout, chunk);
        match tokio::time::timeout(timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(self.connect_error(
                format!("no AMQP 1.0 connection within {timeout:?}"),
                ConnectFailure::Timeout,
            )),
        }
    }

    async fn handshake(
        &self,
        container_id: &str,
        source: Option<IpAddr>,
        timeout: Duration,
        chunk: usize,
    ) -> Result<Conn, DriverError> {
        let stream = msgbench_net::connect(&self.target, source, self.tls.as_ref(), timeout)
            .await
            .map_err(|e| self.connect_error(e.detail, e.cause))?;
        let mut w = Wire::new(chunk);
        // Held (idle) connections are not watched: nothing of theirs is in flight.
        let watch = chunk != IDLE_CHUNK && !self.keep_alive.is_zero();
        let idle_ms = if watch {
            self.keep_alive.as_millis().min(u32::MAX as u128) as u32
        } else {
            0
        };
        w.attach(stream);
        let host = self
            .hostname
            .as_deref()
            .unwrap_or(self.target.host.as_str());

        // SASL.
        w.wbuf.extend_from_slice(frames::SASL_HEADER);
        let header = "the protocol header";
        self.header_answer(&mut w, frames::SASL_HEADER, header, header, " with SASL")
            .await?;
        let io = |e: std::io::Error, stage: &str| self.io_error(e, stage);
        let offered = match read_frame(&mut w)
            .await
            .map_err(|e| io(e, "authentication"))?
        {
            Performative::SaslMechanisms(m) => m,
            other => return Err(self.unexpected("SASL mechanisms", &other)),
        };
        // PLAIN with the URL's credentials, or SCRAM where the broker hides PLAIN on a plain
        // port (Qpid Broker-J does); ANONYMOUS without credentials. Each refusal says what to do.
        let has = |m: &str| offered.iter().any(|o| o == m);
        let (mechanism, response, mut scram) = match &self.login {
            Some((u, p)) if !has("PLAIN") => {
                let Some(hash) = scram::Hash::strongest(offered.iter().map(String::as_str)) else {
                    let why = format!(
                        "the broker offers neither SASL PLAIN nor SCRAM for {} (it offers {offered:?})",
                        self.who()
                    );
                    return Err(self.connect_error(why, ConnectFailure::Rejected));
                };
                let s = Scram::new(hash, u, p);
                (s.mechanism(), Some(s.client_first().into_bytes()), Some(s))
            }
            Some((u, p)) => {
                let mut r = Vec::with_capacity(u.len() + p.len() + 2);
                r.push(0);
                r.extend_from_slice(u.as_bytes());
                r.push(0);
                r.extend_from_slice(p.as_bytes());
                ("PLAIN", Some(r), None)
            }
            None if !has("ANONYMOUS") => {
                let why = format!(
                    "authentication failed: the broker does not take {} (it offers {offered:?}): put user:password in the URL",
                    self.who()
                );
                return Err(self.connect_error(why, ConnectFailure::Rejected));
            }
            None => ("ANONYMOUS", None, None),
        };
        frames::put_sasl_init(&mut w.wbuf, mechanism, response.as_deref(), host);
        w.flush().await.map_err(|e| io(e, "authentication"))?;
        let scram_failed = |e: scram::ScramError| {
            self.connect_error(
                format!(
                    "authentication failed ({mechanism}) for {}: {e}",
                    self.who()
                ),
                ConnectFailure::Rejected,
            )
        };
        loop {
            match read_frame(&mut w)
                .await
                .map_err(|e| io(e, "authentication"))?
            {
                Performative::SaslChallenge(c) => {
                    let Some(s) = scram.as_mut().filter(|s| !s.awaits_server_final()) else {
                        return Err(
                            self.unexpected("the SASL outcome", &Performative::SaslChallenge(c))
                        );
                    };
                    let answer = s.client_final(&c).map_err(scram_failed)?;
                    frames::put_sasl_response(&mut w.wbuf, answer.as_bytes());
                    w.flush().await.map_err(|e| io(e, "authentication"))?;
                }
                Performative::SaslOutcome(0, data) => {
                    // SCRAM's last step: the broker proves it knows the password too.
                    if let Some(s) = &scram {
                        s.verify_server_final(&data).map_err(scram_failed)?;
                    }
                    break;
                }
                Performative::SaslOutcome(code, _) => {
                    return Err(self.connect_error(
                        format!(
                            "authentication failed: the broker refused {} ({mechanism}; SASL outcome: {})",
                            self.who(),
                            match code {
                                1 => "auth",
                                2 => "sys",
                                3 => "sys-perm",
                                _ => "sys-temp",
                            }
                        ),
                        ConnectFailure::Rejected,
                    ));
                }
                other => return Err(self.unexpected("the SASL outcome", &other)),
            }
        }

        // AMQP: by default each step waits for the peer's answer (header, then open, then
        // begin), so an intermediary that terminates the handshake step by step never holds a
        // frame that came early. Pipelined (opt-in), header, open and begin go in one write.
        w.wbuf.extend_from_slice(frames::AMQP_HEADER);
        if self.pipeline {
            frames::put_open(&mut w.wbuf, container_id, host, idle_ms);
            frames::put_begin(&mut w.wbuf, 0, crate::conn::INCOMING_WINDOW);
        }
        self.header_answer(
            &mut w,
            frames::AMQP_HEADER,
            "the AMQP open",
            "the AMQP header",
            "",
        )
        .await?;
        if !self.pipeline {
            frames::put_open(&mut w.wbuf, container_id, host, idle_ms);
            w.flush().await.map_err(|e| io(e, "the AMQP open"))?;
        }
        let (mut max_frame, mut idle_ms, mut shared_subs) = (frames::MAX_FRAME, None, false);
        loop {
            match read_frame(&mut w)
                .await
                .map_err(|e| io(e, "the AMQP open"))?
            {
                Performative::Open {
                    max_frame: m,
                    idle_ms: i,
                    shared_subs: s,
                } => {
                    (max_frame, idle_ms, shared_subs) = (m, i, s);
                    if !self.pipeline {
                        frames::put_begin(&mut w.wbuf, 0, crate::conn::INCOMING_WINDOW);
                        w.flush().await.map_err(|e| io(e, "the AMQP begin"))?;
                    }
                }
                Performative::Begin {
                    next_outgoing_id,
                    incoming_window,
                } => {
                    w.shrink();
                    if watch {
                        w.watch(self.keep_alive, b"");
                    }
                    let mut conn =
                        Conn::new(w, max_frame, idle_ms, next_outgoing_id, incoming_window);
                    conn.shared_subs = shared_subs;
                    return Ok(conn);
                }
                Performative::Close(err) | Performative::End(err) => {
                    return Err(self.closed_with(err.as_ref()));
                }
                Performative::Empty => {}
                other => return Err(self.unexpected("the AMQP open", &other)),
            }
        }
    }

    /// An I/O failure during `stage` of the handshake, in words (a peer hanging up there is
    /// most often refusing the credentials).
    fn io_error(&self, e: std::io::Error, stage: &str) -> DriverError {
        let cause = msgbench_net::classify(&e);
        let reason = if matches!(
            e.kind(),
            std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
        ) {
            format!(
                "the broker closed the connection during {stage}: wrong credentials for {}, \
                 its connection limit reached (when others got in), or not an AMQP 1.0 port",
                self.who()
            )
        } else {
            format!("AMQP handshake ({stage}): {e}")
        };
        self.connect_error(reason, cause)
    }

    /// Writes what is buffered and reads the peer's protocol header, which must be `want`
    /// (`stage` names the step for I/O errors, `header` the header, `server` what is expected).
    async fn header_answer(
        &self,
        w: &mut Wire,
        want: &[u8; 8],
        stage: &str,
        header: &str,
        server: &str,
    ) -> Result<(), DriverError> {
        w.flush().await.map_err(|e| self.io_error(e, stage))?;
        let got = read_header(w).await.map_err(|e| {
            // A TLS alert is shorter than a header: what came before the hang-up names it.
            match msgbench_net::sniff(&w.rbuf) {
                Some(what) => self.connect_error(
                    format!("the server on this port speaks {what}, not AMQP 1.0"),
                    ConnectFailure::Rejected,
                ),
                None => self.io_error(e, stage),
            }
        })?;
        if &got != want
            && !got.starts_with(b"AMQP")
            && let Some(what) = msgbench_net::sniff(&got)
        {
            return Err(self.connect_error(
                format!("the server on this port speaks {what}, not AMQP 1.0"),
                ConnectFailure::Rejected,
            ));
        }
        if &got != want {
            return Err(self.connect_error(
                format!("not an AMQP 1.0 server{server} (it answered {header} with {got:?})"),
                ConnectFailure::Rejected,
            ));
        }
        Ok(())
    }

    fn unexpected(&self, wanted: &str, got: &Performative) -> DriverError {
        self.connect_error(
            format!("AMQP handshake: expected {wanted}, the broker sent {got:?}"),
            ConnectFailure::Rejected,
        )
    }
}

/// The peer's 8-byte protocol header.
pub(crate) async fn read_header(w: &mut Wire) -> std::io::Result<[u8; 8]> {
    std::future::poll_fn(|cx| {
        w.poll_next(cx, true, |b: &mut BytesMut| {
            Ok::<_, crate::codec::CodecError>((b.len() >= 8).then(|| {
                let mut h = [0u8; 8];
                h.copy_from_slice(&b.split_to(8));
                h
            }))
        })
    })
    .await
}

/// One whole frame's performative.
pub(crate) async fn read_frame(w: &mut Wire) -> std::io::Result<Performative> {
    let (_, _, body) =
        std::future::poll_fn(|cx| w.poll_next(cx, true, frames::split_frame)).await?;
    let p = Performative::parse(&body)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls_and_hides_passwords() {
        let tls = TlsPlan::default();
        let e = Endpoint::parse("amqp10://u%40x:p%3Aw@127.0.0.1", &tls).unwrap();
        assert_eq!((e.target.host.as_str(), e.target.port), ("127.0.0.1", 5672));
        assert_eq!(e.login, Some(("u@x".into(), "p:w".into())));
        assert!(!e.display().contains("p%3Aw"), "{}", e.display());
        let e = Endpoint::parse("amqp10://h/other%2dvhost", &tls).unwrap();
        assert_eq!(e.hostname.as_deref(), Some("other-vhost"));
        let e = Endpoint::parse("amqp10://h:1?hostname=vhost:x", &tls).unwrap();
        assert_eq!(e.hostname.as_deref(), Some("vhost:x"));
        let e = Endpoint::parse("amqp10://h:1/", &tls).unwrap();
        assert_eq!(e.hostname, None);
        assert!(matches!(
            Endpoint::parse("amqp10://h:1?vhost=x", &tls),
            Err(DriverError::Config(m)) if m.contains("unknown option `vhost=x`")
        ));
        let e = Endpoint::parse("amqp10://broker:26672", &tls).unwrap();
        assert_eq!((e.target.port, e.login.is_none()), (26672, true));
        assert!(matches!(
            Endpoint::parse("amqp://x", &tls),
            Err(DriverError::Config(_))
        ));
        assert_eq!(unescape("a%2"), "a%2");
        assert_eq!(unescape("%zz%41"), "%zzA");
    }
}
