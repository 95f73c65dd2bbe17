//! A small AMQP 1.0 client on fe2o3-amqp: what the driver and msgbench's simulators (the ECP
//! endpoint in `msgbench-serve`) need, and nothing else.
//!
//! - [`Endpoint`]: an `amqp10://` / `amqp10s://` URL parsed once: where to connect, TLS (our
//!   rustls with the run's [`TlsPlan`]), SASL PLAIN from the URL's userinfo (percent-decoded) or
//!   ANONYMOUS without one, and a display form without the password.
//! - [`Client`]: one connection with one session, opened within a timeout. TCP (NODELAY) and
//!   TLS come from `msgbench-net`; fe2o3 speaks AMQP over the stream it is handed
//!   (`open_with_stream`), so it needs none of its own TLS features. Its per-frame writes are
//!   gathered into one write per batch (`gather`).
//! - [`Sender`] / [`Receiver`]: links on an address with terminus capabilities (`queue` makes
//!   Artemis create an anycast queue; Qpid Broker-J wants `create-on-demand`...). Sending
//!   unsettled returns at once with a [`Pending`] outcome, so many transfers can be in flight.
//! - [`OutMessage`] / [`Received`]: a message as msgbench sees it: [`Meta`] (ids, creation time,
//!   application properties) and a body that is either bytes (one `data` section) or text (an
//!   `amqp-value` string, as ECP's send events carry).
//!
//! Errors are [`DriverError`]s that say what the broker said: the SASL outcome for a wrong
//! password, the error condition and description of a refused link, with the link's address.
//! Credentials never appear in them.

use crate::convert;
use crate::gather::Gathered;
use bytes::Bytes;
use fe2o3_amqp::connection::{ConnectionHandle, OpenError};
use fe2o3_amqp::link::delivery::{DeliveryFut, DeliveryInfo};
use fe2o3_amqp::link::{
    CreditMode, DetachError, ReceiverAttachError, RecvError, SendError, SenderAttachError,
};
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::session::{BeginError, SessionHandle};
use fe2o3_amqp::types::definitions::{self, ReceiverSettleMode, SenderSettleMode};
use fe2o3_amqp::types::messaging::{Body, Outcome, Source, Target};
use fe2o3_amqp::types::primitives::{Symbol, Value};
use fe2o3_amqp::{Connection, Delivery, Sendable, Session};
use msgbench_core::driver::{ConnectFailure, DriverError};
use msgbench_core::meta::Meta;
use msgbench_core::scenario::TlsPlan;
use msgbench_net::Stream;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

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
    display: String,
}

/// Percent-decoding of URL userinfo (`%40` → `@`); invalid escapes stay as they are.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 3 <= b.len()
            && let Some(v) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Endpoint {
    /// Parses `url`; `tls` is used for `amqp10s://` (verification on unless `tls.insecure`).
    pub fn parse(url: &str, tls: &TlsPlan) -> Result<Endpoint, DriverError> {
        let display = msgbench_core::scenario::plan::redact_url(url);
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
            display,
        })
    }

    /// The URL without its password, for messages and events.
    pub fn display(&self) -> &str {
        &self.display
    }

    fn sasl(&self) -> SaslProfile {
        match &self.login {
            Some((u, p)) => SaslProfile::Plain {
                username: u.clone(),
                password: p.clone(),
            },
            None => SaslProfile::Anonymous,
        }
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

    /// Why opening the AMQP connection failed, in words.
    fn open_error(&self, e: OpenError) -> DriverError {
        match e {
            OpenError::SaslError { code, .. } => self.connect_error(
                format!(
                    "authentication failed: the broker refused {} (SASL outcome: {code:?})",
                    self.who()
                ),
                ConnectFailure::Rejected,
            ),
            OpenError::Io(io) => {
                let cause = msgbench_net::classify(&io);
                let why = if cause == ConnectFailure::Reset {
                    // RabbitMQ closes the socket on a wrong password instead of a SASL outcome.
                    format!(
                        "the broker closed the connection during the handshake ({io}): wrong credentials for {}, or not an AMQP 1.0 port",
                        self.who()
                    )
                } else {
                    format!("AMQP handshake: {io}")
                };
                self.connect_error(why, cause)
            }
            OpenError::ProtocolHeaderMismatch(h) => self.connect_error(
                format!(
                    "not an AMQP 1.0 server with SASL (it answered the protocol header with {h:?})"
                ),
                ConnectFailure::Rejected,
            ),
            OpenError::RemoteClosedWithError(err) => self.closed_with(&err),
            OpenError::RemoteClosed => self.connect_error(
                "the broker closed the connection during the AMQP open".into(),
                ConnectFailure::Rejected,
            ),
            other => self.connect_error(format!("AMQP open: {other}"), ConnectFailure::Other),
        }
    }
}

impl Endpoint {
    /// The broker closed the connection with `err` while it was being set up (Artemis accepts
    /// any SASL mechanism, then refuses an unauthenticated connection this way).
    fn closed_with(&self, err: &definitions::Error) -> DriverError {
        let unauthorized = matches!(
            err.condition,
            definitions::ErrorCondition::AmqpError(definitions::AmqpError::UnauthorizedAccess)
        );
        let reason = if unauthorized {
            format!(
                "authentication failed: the broker refused {}: {}",
                self.who(),
                describe(err)
            )
        } else {
            format!("the broker closed the connection: {}", describe(err))
        };
        self.connect_error(reason, ConnectFailure::Rejected)
    }

    fn begin_error(&self, e: BeginError) -> DriverError {
        use fe2o3_amqp::connection::ConnectionStopReason as C;
        match e {
            BeginError::ConnectionStopped(C::RemoteClosedWithError(err))
            | BeginError::RemoteEndedWithError(err) => self.closed_with(&err),
            // Artemis refuses an unauthenticated connection by closing it as the session
            // begins; the error it closes with does not always reach us before the close does.
            BeginError::ConnectionStopped(stop) if self.login.is_none() => self.connect_error(
                format!(
                    "beginning a session: the broker closed the connection ({stop:?}); for {} \
                     that usually means authentication failed: put user:password in the URL",
                    self.who()
                ),
                ConnectFailure::Rejected,
            ),
            other => self.connect_error(
                format!("beginning a session: {other}"),
                ConnectFailure::Rejected,
            ),
        }
    }
}

/// `condition: description` of an AMQP error, as the broker sent it.
pub fn describe(e: &definitions::Error) -> String {
    let cond = match &e.condition {
        definitions::ErrorCondition::AmqpError(c) => Symbol::from(c).0,
        definitions::ErrorCondition::ConnectionError(c) => Symbol::from(c).0,
        definitions::ErrorCondition::SessionError(c) => Symbol::from(c).0,
        definitions::ErrorCondition::LinkError(c) => Symbol::from(c).0,
        definitions::ErrorCondition::Custom(s) => s.0.clone(),
    };
    match &e.description {
        Some(d) => format!("{cond}: {d}"),
        None => cond,
    }
}

/// One connection with one session: what every producer, consumer and held session owns.
pub struct Client {
    conn: ConnectionHandle<()>,
    session: SessionHandle<()>,
    links: u32,
}

impl Client {
    /// Connects to `ep` (TCP + TLS from `source` if given, SASL, AMQP open, session begin),
    /// all within `timeout`. `container_id` names this client to the broker.
    pub async fn connect(
        ep: &Endpoint,
        container_id: &str,
        source: Option<IpAddr>,
        timeout: Duration,
    ) -> Result<Client, DriverError> {
        let work = async {
            let stream = msgbench_net::connect(&ep.target, source, ep.tls.as_ref(), timeout)
                .await
                .map_err(|e| ep.connect_error(e.detail, e.cause))?;
            let builder = Connection::builder()
                .container_id(container_id)
                .hostname(ep.target.host.as_str())
                .sasl_profile(ep.sasl());
            // fe2o3 flushes every frame; `Gathered` turns that into one write per batch.
            let mut conn = match stream {
                Stream::Tcp(s) => builder.open_with_stream(Gathered::new(s)).await,
                Stream::Tls(s) => builder.open_with_stream(Gathered::new(s)).await,
            }
            .map_err(|e| ep.open_error(e))?;
            let session = Session::begin(&mut conn)
                .await
                .map_err(|e| ep.begin_error(e))?;
            Ok(Client {
                conn,
                session,
                links: 0,
            })
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(ep.connect_error(
                format!("no AMQP 1.0 connection within {timeout:?}"),
                ConnectFailure::Timeout,
            )),
        }
    }

    fn link_name(&mut self, role: &str, address: &str) -> String {
        self.links += 1;
        format!("msgbench-{role}-{}-{address}", self.links)
    }

    /// Attaches a sender to `address`. `settled`: transfers go pre-settled (no outcome).
    pub async fn sender(
        &mut self,
        address: &str,
        capabilities: &[String],
        settled: bool,
    ) -> Result<Sender, DriverError> {
        let name = self.link_name("snd", address);
        let mut target = Target::builder().address(address);
        if !capabilities.is_empty() {
            target = target.capabilities(symbols(capabilities));
        }
        let mode = if settled {
            SenderSettleMode::Settled
        } else {
            SenderSettleMode::Unsettled
        };
        let link = fe2o3_amqp::Sender::builder()
            .name(name)
            .target(target.build())
            .sender_settle_mode(mode)
            .attach(&mut self.session)
            .await
            .map_err(|e| DriverError::Connect {
                target: address.to_string(),
                reason: format!(
                    "the broker refused a sender link to `{address}`: {}",
                    sender_attach_error(&e)
                ),
                cause: ConnectFailure::Rejected,
            })?;
        Ok(Sender {
            link,
            address: address.to_string(),
        })
    }

    /// Attaches a receiver to `address` granting `credit` (refilled as deliveries are settled).
    /// `name`: the link name (a shared subscription's name), or `None` for a unique one.
    pub async fn receiver(
        &mut self,
        address: &str,
        capabilities: &[String],
        credit: u32,
        name: Option<&str>,
    ) -> Result<Receiver, DriverError> {
        let name = match name {
            Some(n) => n.to_string(),
            None => self.link_name("rcv", address),
        };
        let mut source = Source::builder().address(address);
        if !capabilities.is_empty() {
            source = source.capabilities(symbols(capabilities));
        }
        let link = fe2o3_amqp::Receiver::builder()
            .name(name)
            .source(source.build())
            .receiver_settle_mode(ReceiverSettleMode::First)
            .credit_mode(CreditMode::Auto(credit.max(1)))
            .auto_accept(false)
            .attach(&mut self.session)
            .await
            .map_err(|e| {
                DriverError::Subscribe(format!(
                    "the broker refused a receiver link from `{address}`: {}",
                    receiver_attach_error(&e)
                ))
            })?;
        Ok(Receiver {
            link,
            address: address.to_string(),
        })
    }

    /// Whether the connection has ended (lost or closed).
    pub fn is_closed(&self) -> bool {
        self.conn.is_closed() || self.session.is_ended()
    }

    /// Waits until the connection ends and says why. Cancel-safe.
    pub async fn closed(&mut self) -> DriverError {
        match self.conn.on_close().await {
            Ok(()) => DriverError::Closed,
            Err(e) => DriverError::Receive(format!("connection ended: {e}")),
        }
    }

    /// Ends the session and closes the connection politely (bounded by `timeout`).
    pub async fn close(mut self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, async {
            let _ = self.session.end().await;
            let _ = self.conn.close().await;
        })
        .await;
    }
}

fn symbols(caps: &[String]) -> Vec<Symbol> {
    caps.iter().map(|c| Symbol::from(c.as_str())).collect()
}

fn sender_attach_error(e: &SenderAttachError) -> String {
    match e {
        SenderAttachError::RemoteClosedWithError(err) => describe(err),
        SenderAttachError::IncomingTargetIsNone => {
            "it answered without a target and sent no error (the address does not exist?)".into()
        }
        other => other.to_string(),
    }
}

fn receiver_attach_error(e: &ReceiverAttachError) -> String {
    match e {
        ReceiverAttachError::RemoteClosedWithError(err) => describe(err),
        ReceiverAttachError::IncomingSourceIsNone => {
            "it answered without a source and sent no error (the address does not exist?)".into()
        }
        other => other.to_string(),
    }
}

/// What went wrong on a link, for events and errors.
pub fn send_error(e: &SendError) -> String {
    match e {
        SendError::Detached(d) => detach_error(d),
        SendError::LinkStateError(l) => link_state_error(l),
        other => other.to_string(),
    }
}

fn detach_error(e: &DetachError) -> String {
    match e {
        DetachError::RemoteDetachedWithError(err) | DetachError::RemoteClosedWithError(err) => {
            format!("the broker detached the link: {}", describe(err))
        }
        DetachError::SessionStopped(r) => stop_reason(r),
        other => other.to_string(),
    }
}

fn link_state_error(e: &fe2o3_amqp::link::LinkStateError) -> String {
    use fe2o3_amqp::link::LinkStateError as L;
    match e {
        L::RemoteDetachedWithError(err) | L::RemoteClosedWithError(err) => {
            format!("the broker detached the link: {}", describe(err))
        }
        L::SessionStopped(r) => stop_reason(r),
        other => other.to_string(),
    }
}

fn stop_reason(r: &fe2o3_amqp::link::SessionStopReason) -> String {
    use fe2o3_amqp::connection::ConnectionStopReason as C;
    use fe2o3_amqp::link::SessionStopReason as S;
    match r {
        S::ConnectionStopped(C::RemoteClosedWithError(err)) => {
            format!("the broker closed the connection: {}", describe(err))
        }
        S::ConnectionStopped(C::RemoteClosed) => "the broker closed the connection".into(),
        S::ConnectionStopped(_) => "the connection ended".into(),
        S::RemoteEndedWithError(err) => format!("the broker ended the session: {}", describe(err)),
        S::RemoteEnded => "the broker ended the session".into(),
        S::Ended | S::EndedWithError(_) => "the session ended".into(),
    }
}

/// What the receiving side said about a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// Accepted (or sent pre-settled).
    Accepted,
    /// Rejected, released or modified, with the broker's detail.
    Refused(String),
    /// No outcome will come: the link or connection is gone (why).
    Lost(String),
}

/// The outcome of one unsettled transfer, resolved when the broker settles it.
pub struct Pending(DeliveryFut<Result<Outcome, SendError>>);

impl Future for Pending {
    type Output = Settled;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Settled> {
        Pin::new(&mut self.0).poll(cx).map(|r| match r {
            Ok(Outcome::Accepted(_)) => Settled::Accepted,
            Ok(Outcome::Rejected(r)) => Settled::Refused(match r.error {
                Some(e) => format!("rejected: {}", describe(&e)),
                None => "rejected".into(),
            }),
            Ok(Outcome::Released(_)) => Settled::Refused("released".into()),
            Ok(Outcome::Modified(m)) => Settled::Refused(format!(
                "modified (delivery failed: {}, undeliverable here: {})",
                m.delivery_failed.unwrap_or(false),
                m.undeliverable_here.unwrap_or(false)
            )),
            #[allow(unreachable_patterns)]
            Ok(_) => Settled::Refused("an unexpected outcome".into()),
            Err(e) => Settled::Lost(send_error(&e)),
        })
    }
}

/// A message to send: metadata and body.
#[derive(Debug, Clone, Copy)]
pub struct OutMessage<'a> {
    /// Ids, creation time and application properties.
    pub meta: Option<&'a Meta>,
    /// The body.
    pub body: OutBody<'a>,
    /// The `durable` header.
    pub durable: bool,
}

/// A message body.
#[derive(Debug, Clone, Copy)]
pub enum OutBody<'a> {
    /// One `data` section.
    Data(&'a [u8]),
    /// An `amqp-value` string.
    Text(&'a str),
}

/// The sending end of a link.
pub struct Sender {
    link: fe2o3_amqp::Sender,
    address: String,
}

impl Sender {
    /// The link's address.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Sends `msg`. Returns once the transfer is handed to the connection (waiting only for
    /// link credit); the outcome comes through the returned [`Pending`] (at once for a
    /// pre-settled link).
    pub async fn send(&mut self, msg: OutMessage<'_>) -> Result<Pending, String> {
        let sendable: Sendable<Body<Value>> =
            Sendable::builder().message(convert::message(msg)).build();
        match self.link.send_batchable(sendable).await {
            Ok(fut) => Ok(Pending(fut)),
            Err(e) => Err(format!("sending to `{}`: {}", self.address, send_error(&e))),
        }
    }

    /// Sends and waits for the outcome.
    pub async fn send_wait(&mut self, msg: OutMessage<'_>) -> Result<Settled, String> {
        Ok(self.send(msg).await?.await)
    }

    /// Detaches politely (bounded by `timeout`).
    pub async fn close(self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.link.close()).await;
    }
}

/// One received message.
#[derive(Debug)]
pub struct Received {
    /// Ids, creation time and application properties (empty unless asked for).
    pub meta: Meta,
    /// The body: the data sections' bytes, or an `amqp-value` string's or binary's bytes.
    pub body: Bytes,
    /// The body was an `amqp-value` string.
    pub text: bool,
    /// The broker delivered it before (delivery-count > 0).
    pub redelivered: bool,
    /// What settling it takes ([`Receiver::settle`]); kept when the message is handed on.
    pub token: DeliveryToken,
}

/// Identifies one received delivery for settling it.
#[derive(Debug, Clone)]
pub struct DeliveryToken(DeliveryInfo);

/// How a receiver settles deliveries.
pub use msgbench_core::scenario::Disposition;

/// The receiving end of a link.
pub struct Receiver {
    link: fe2o3_amqp::Receiver,
    address: String,
}

impl Receiver {
    /// The link's address.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The next message (`meta`: decode properties too). Cancel-safe (fe2o3's receive only
    /// awaits its channel and sends nothing while auto-accept is off).
    pub async fn recv(&mut self, meta: bool) -> Result<Received, String> {
        let d: Delivery<Body<Value>> = self
            .link
            .recv()
            .await
            .map_err(|e| format!("receiving from `{}`: {}", self.address, recv_error(&e)))?;
        let info = DeliveryInfo::from(&d);
        let msg = d.into_message();
        let redelivered = msg.header.as_ref().is_some_and(|h| h.delivery_count > 0);
        let m = if meta {
            convert::meta_of(&msg)
        } else {
            Meta::default()
        };
        let (body, text) = convert::body_of(msg.body);
        Ok(Received {
            meta: m,
            body,
            text,
            redelivered,
            token: DeliveryToken(info),
        })
    }

    /// The next message if one is ready now (never waits).
    pub async fn try_recv(&mut self, meta: bool) -> Option<Result<Received, String>> {
        tokio::select! {
            biased;
            r = self.recv(meta) => Some(r),
            () = std::future::ready(()) => None,
        }
    }

    /// Settles `deliveries` as `how` (one disposition per run of consecutive ids).
    pub async fn settle(
        &self,
        deliveries: Vec<DeliveryToken>,
        how: Disposition,
    ) -> Result<(), String> {
        if deliveries.is_empty() {
            return Ok(());
        }
        let deliveries: Vec<DeliveryInfo> = deliveries.into_iter().map(|t| t.0).collect();
        let r = match how {
            Disposition::Accept => self.link.accept_all(deliveries).await,
            Disposition::Release => self.link.release_all(deliveries).await,
            Disposition::Reject => self.link.reject_all(deliveries, None).await,
        };
        r.map_err(|e| format!("settling on `{}`: {e}", self.address))
    }

    /// Detaches politely (bounded by `timeout`).
    pub async fn close(self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.link.close()).await;
    }
}

fn recv_error(e: &RecvError) -> String {
    match e {
        RecvError::LinkStateError(l) => link_state_error(l),
        other => other.to_string(),
    }
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
