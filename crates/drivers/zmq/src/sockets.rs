//! The zeromq sockets behind producers and consumers, and everything done with them off the hot
//! path: binding, connecting, waiting for peers, reporting their comings and goings, and turning
//! the crate's errors into [`DriverError`]s that say what happened.

use crate::registry::{Filter, Registry};
use futures::StreamExt;
use futures::channel::mpsc;
use msgbench_core::driver::{ConnectFailure, DriverError, DriverEventKind, EventSink};
use std::io::ErrorKind;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use zeromq::{
    Endpoint, PullSocket, Socket, SocketEvent, SocketOptions, SocketRecv, SubSocket, XPubSocket,
    ZmqError, ZmqMessage, ZmqResult,
};

/// Socket options for every socket of a run.
pub fn socket_options(connect_timeout: Duration) -> SocketOptions {
    let mut o = SocketOptions::default();
    o.connect_timeout(connect_timeout);
    o
}

/// A consumer's socket.
pub enum InSock {
    /// PUSH/PULL.
    Pull(PullSocket),
    /// PUB/SUB.
    Sub(SubSocket),
}

impl InSock {
    /// A socket for `pubsub` (subscribed to `filter`) or PUSH/PULL.
    pub async fn new(
        pubsub: bool,
        filter: &Filter,
        opts: SocketOptions,
    ) -> Result<InSock, DriverError> {
        if pubsub {
            let mut s = SubSocket::with_options(opts);
            // Remembered and sent to every peer as it connects, so subscribing before binding
            // or connecting loses nothing.
            s.subscribe(filter.subscription())
                .await
                .map_err(|e| DriverError::Subscribe(e.to_string()))?;
            Ok(InSock::Sub(s))
        } else {
            Ok(InSock::Pull(PullSocket::with_options(opts)))
        }
    }

    /// Binds `ep`; returns the endpoint actually bound (port 0 resolved).
    pub async fn bind(&mut self, ep: &Endpoint, who: &str) -> Result<String, DriverError> {
        let s = ep.to_string();
        let r = match self {
            InSock::Pull(p) => p.bind(&s).await,
            InSock::Sub(p) => p.bind(&s).await,
        };
        r.map(|e| e.to_string()).map_err(|e| bind_error(&s, who, e))
    }

    /// Connects to `ep` (retrying while nothing listens there, up to the connect timeout).
    pub async fn connect(&mut self, ep: &str) -> Result<(), DriverError> {
        let r = match self {
            InSock::Pull(p) => p.connect(ep).await,
            InSock::Sub(p) => p.connect(ep).await,
        };
        r.map_err(|e| connect_error(ep, e))
    }

    /// Peer events from now on.
    pub fn monitor(&mut self) -> mpsc::Receiver<SocketEvent> {
        match self {
            InSock::Pull(p) => p.monitor(),
            InSock::Sub(p) => p.monitor(),
        }
    }

    /// The next message. Cancel-safe: the crate's fair queue keeps what it has not returned.
    #[inline]
    pub async fn recv(&mut self) -> ZmqResult<ZmqMessage> {
        match self {
            InSock::Pull(p) => p.recv().await,
            InSock::Sub(p) => p.recv().await,
        }
    }

    /// Stops listening and drops every connection.
    pub async fn close(self) {
        match self {
            InSock::Pull(mut p) => {
                let backend = p.backend();
                let _ = p.unbind_all().await;
                // A PULL socket has no `Drop` of its own: without this its connections (held by
                // the crate's per-peer tasks) would stay open until the runtime ends.
                backend.shutdown();
            }
            InSock::Sub(p) => {
                let _ = p.close().await;
            }
        }
    }
}

/// How a client is named in errors and events: `zmq producer 3`.
pub fn who(role: &str, id: u32) -> String {
    format!("zmq {role} {id}")
}

/// `bind` failed: usually the port is taken.
pub fn bind_error(ep: &str, who: &str, e: ZmqError) -> DriverError {
    let reason = match &e {
        ZmqError::Network(io) if io.kind() == ErrorKind::AddrInUse => format!(
            "{who} cannot bind {ep}: the port is already in use (by another program, or by \
             another client of this run: the binding side's client i uses PORT + i)"
        ),
        ZmqError::Network(io) if io.kind() == ErrorKind::AddrNotAvailable => {
            format!("{who} cannot bind {ep}: that address is not one of this host's")
        }
        _ => format!("{who} cannot bind {ep}: {e}"),
    };
    DriverError::Connect {
        target: ep.to_string(),
        reason,
        cause: ConnectFailure::Other,
    }
}

/// `connect` failed.
pub fn connect_error(ep: &str, e: ZmqError) -> DriverError {
    let cause = match &e {
        ZmqError::ConnectTimeout(_) => ConnectFailure::Timeout,
        ZmqError::Network(io) => match io.kind() {
            ErrorKind::ConnectionRefused => ConnectFailure::Refused,
            ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe => {
                ConnectFailure::Reset
            }
            ErrorKind::TimedOut => ConnectFailure::Timeout,
            _ => ConnectFailure::Other,
        },
        ZmqError::Other(_) | ZmqError::UnsupportedVersion(_) => ConnectFailure::Rejected,
        _ => ConnectFailure::Other,
    };
    DriverError::Connect {
        target: ep.to_string(),
        reason: e.to_string(),
        cause,
    }
}

/// A send failed: no peer, or the peer's connection is gone.
pub fn send_error(e: ZmqError) -> DriverError {
    match e {
        ZmqError::ReturnToSender { .. } => {
            DriverError::Send("no consumer is connected to this PUSH socket".to_string())
        }
        ZmqError::BufferFull(_) => {
            DriverError::Send("the consumer's connection is gone".to_string())
        }
        e => DriverError::Send(e.to_string()),
    }
}

/// Waits until `expected` peers completed the handshake on a bound socket whose monitor is `mon`.
pub async fn wait_accepted(
    mon: &mut mpsc::Receiver<SocketEvent>,
    expected: usize,
    deadline: Instant,
    who: &str,
) -> Result<(), DriverError> {
    let mut joined = 0usize;
    while joined < expected {
        match tokio::time::timeout_at(deadline, mon.next()).await {
            Ok(Some(SocketEvent::Accepted(..))) => joined += 1,
            Ok(Some(SocketEvent::Disconnected(_))) => joined = joined.saturating_sub(1),
            Ok(Some(_)) => {}
            Ok(None) => return Err(DriverError::Closed),
            Err(_) => {
                return Err(DriverError::Timeout(format!(
                    "{who}: {joined} of {expected} consumers connected before the connect \
                     timeout"
                )));
            }
        }
    }
    Ok(())
}

/// Waits until `expected` subscriptions reached an XPUB socket: from then on nothing it sends to
/// those subscribers is dropped for want of a subscription (the slow-joiner problem).
pub async fn wait_subscribed(
    sock: &mut XPubSocket,
    expected: usize,
    deadline: Instant,
    who: &str,
) -> Result<(), DriverError> {
    let mut subscribed = 0usize;
    while subscribed < expected {
        match tokio::time::timeout_at(deadline, sock.recv()).await {
            // A subscription message is one frame: 0x01, then the prefix.
            Ok(Ok(m)) => {
                if m.get(0).is_some_and(|f| f.first() == Some(&1)) {
                    subscribed += 1;
                }
            }
            Ok(Err(e)) => {
                return Err(DriverError::Subscribe(format!(
                    "{who}: a subscriber failed while subscribing: {e}"
                )));
            }
            Err(_) => {
                return Err(DriverError::Timeout(format!(
                    "{who}: {subscribed} of {expected} subscriptions arrived before the connect \
                     timeout"
                )));
            }
        }
    }
    Ok(())
}

/// Reports peers leaving (and failed accepts) to the runner for as long as the socket lives.
/// Peers leaving once producers close are the end of the run and are not reported. In a
/// process without producers every peer is a producer elsewhere, which leaves when its run
/// ends: a warning (what it sent and what arrived is settled by `msgbench merge`), not an
/// error.
pub fn forward_events(
    mut mon: mpsc::Receiver<SocketEvent>,
    events: EventSink,
    registry: Arc<Registry>,
    who: String,
) {
    tokio::spawn(async move {
        while let Some(ev) = mon.next().await {
            match ev {
                SocketEvent::Disconnected(_) if !registry.is_producing() => {
                    events.emit(
                        DriverEventKind::Warning,
                        format!("{who}: a producer of another process disconnected (its run ended, or it failed)"),
                    );
                }
                SocketEvent::Disconnected(_) if !registry.is_closing() => {
                    events.emit(
                        DriverEventKind::Disconnected,
                        format!("{who}: a peer disconnected"),
                    );
                }
                SocketEvent::AcceptFailed(e) => {
                    events.emit(DriverEventKind::Error, format!("{who}: accept failed: {e}"));
                }
                _ => {}
            }
        }
    });
}
