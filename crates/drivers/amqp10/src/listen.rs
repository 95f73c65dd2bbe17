//! The listening side of brokerless AMQP 1.0 (`amqp10://HOST:PORT?bind=...`): binding a port,
//! accepting peers, and the server half of the handshake, which makes each accepted socket a
//! [`Conn`] like a client's.
//!
//! The handshake, step by step as the spec has it:
//! 1. the peer's protocol header: the SASL header gets ours and `sasl-mechanisms` (ANONYMOUS
//!    and PLAIN: a benchmark peer checks no password), its `sasl-init` gets outcome ok, and
//!    the AMQP header follows; a plain AMQP header skips SASL. Anything else (HTTP, another
//!    AMQP version) gets our AMQP header, as the spec asks, and is refused with an error that
//!    quotes what the peer sent.
//! 2. the peer's `open` is answered with ours (our frame size, one channel), its `begin` with
//!    a `begin` naming its channel. What the peer pipelined after them (attaches) stays in the
//!    read buffer for the connection.
//!
//! Accepting runs on a task of its own; each handshake on another (a slow peer holds up no
//! other), bounded by the connect timeout. Failures are [`ListenError`]s, reported by the
//! owner as error events: a peer that could not join is counted, never silent.

use crate::client::read_frame;
use crate::conn::{CHUNK, Conn, INCOMING_WINDOW, Serving};
use crate::frames::{self, AMQP_HEADER, Performative, SASL_HEADER};
use crate::reply;
use bytes::BytesMut;
use msgbench_core::driver::{ConnectFailure, DriverError, DriverEventKind, EventSink};
use msgbench_net::{Stream, Wire};
use std::io;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Why a peer could not join a listening msgbench.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// The peer's first bytes are not an AMQP 1.0 protocol header.
    #[error(
        "{peer} does not speak AMQP 1.0: it sent {sent} (expected the AMQP 1.0 or SASL protocol header)"
    )]
    NotAmqp {
        /// Where the peer connected from.
        peer: SocketAddr,
        /// What it sent instead, quoted: its first 8 bytes (as text when they are text,
        /// else as bytes), or fewer followed by `and hung up`.
        sent: String,
    },
    /// The handshake went wrong after the header.
    #[error("the AMQP 1.0 handshake with {peer} failed: {why}")]
    Handshake {
        /// Where the peer connected from.
        peer: SocketAddr,
        /// What went wrong, in words: the step (SASL, the AMQP open, the AMQP begin) and the
        /// I/O error, or what the peer sent or asked for that a listening msgbench does not
        /// take (another AMQP version, a SASL mechanism other than ANONYMOUS and PLAIN, a
        /// frame out of order, a `close`).
        why: String,
    },
    /// The peer stopped half way.
    #[error("{peer} connected but did not complete the AMQP 1.0 handshake within {timeout:?}")]
    Timeout {
        /// Where the peer connected from.
        peer: SocketAddr,
        /// The whole handshake's allowance (the run's connect timeout), counted from the
        /// accept.
        timeout: Duration,
    },
}

/// A peer that completed the handshake.
pub struct Accepted {
    /// Its connection (links it attaches are answered by the connection, see [`Serving`]).
    pub conn: Conn,
    /// Where it connected from.
    pub peer: SocketAddr,
}

/// Binds `host:port` (port 0: a free one) for `who`; returns the listener and the address
/// actually bound.
///
/// # Errors
/// [`DriverError::Connect`] naming the address and why (usually: the port is in use).
pub async fn bind(
    host: &str,
    port: u16,
    who: &str,
) -> Result<(TcpListener, SocketAddr), DriverError> {
    let shown = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let fail = |e: io::Error| {
        let reason = match e.kind() {
            io::ErrorKind::AddrInUse => format!(
                "{who} cannot listen on {shown}: the port is already in use (by another \
                 program, or by another client of this run: the listening side's client i \
                 uses PORT + i; port 0 picks free ports)"
            ),
            io::ErrorKind::AddrNotAvailable => {
                format!("{who} cannot listen on {shown}: that address is not one of this host's")
            }
            _ => format!("{who} cannot listen on {shown}: {e}"),
        };
        DriverError::Connect {
            target: shown.clone(),
            reason,
            cause: ConnectFailure::Other,
        }
    };
    let listener = TcpListener::bind((host, port)).await.map_err(fail)?;
    let local = listener.local_addr().map_err(fail)?;
    Ok((listener, local))
}

/// Accepts peers on `listener` until nobody takes them (`tx` closed): each completes the
/// handshake on a task of its own within `timeout`, then goes to `tx`; failures are reported
/// as error events by `who`.
pub fn accept(
    listener: TcpListener,
    serving: Serving,
    container_id: String,
    tx: mpsc::UnboundedSender<Accepted>,
    events: EventSink,
    who: String,
    timeout: Duration,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                () = tx.closed() => return,
            };
            let (tcp, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    events.emit(DriverEventKind::Error, format!("{who}: accept failed: {e}"));
                    // Out of descriptors, typically: do not spin.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let (tx, events, who) = (tx.clone(), events.clone(), who.clone());
            let (serving, id) = (serving.clone(), container_id.clone());
            tokio::spawn(async move {
                let work = handshake(tcp, peer, &id, serving);
                let r = match tokio::time::timeout(timeout, work).await {
                    Ok(r) => r,
                    Err(_) => Err(ListenError::Timeout { peer, timeout }),
                };
                match r {
                    Ok(conn) => {
                        let _ = tx.send(Accepted { conn, peer });
                    }
                    Err(e) => events.emit(DriverEventKind::Error, format!("{who}: {e}")),
                }
            });
        }
    })
}

/// Up to 8 bytes of the peer's first words, quoted (text as text, anything else as bytes).
fn quote(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) if s.chars().all(|c| !c.is_control() || c == '\r' || c == '\n') => {
            format!("{s:?}")
        }
        _ => format!("{b:02x?}"),
    }
}

/// The peer's 8-byte protocol header; a peer that hangs up sooner is not speaking AMQP.
async fn header(w: &mut Wire, peer: SocketAddr) -> Result<[u8; 8], ListenError> {
    let r = std::future::poll_fn(|cx| {
        w.poll_next(cx, true, |b: &mut BytesMut| {
            Ok::<_, crate::codec::CodecError>((b.len() >= 8).then(|| {
                let mut h = [0u8; 8];
                h.copy_from_slice(&b.split_to(8));
                h
            }))
        })
    })
    .await;
    r.map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof && !w.rbuf.is_empty() {
            ListenError::NotAmqp {
                peer,
                sent: format!("{} and hung up", quote(&w.rbuf)),
            }
        } else {
            ListenError::Handshake {
                peer,
                why: format!("reading its protocol header: {e}"),
            }
        }
    })
}

/// The server half of the handshake on `tcp` (see the module docs).
pub async fn handshake(
    tcp: TcpStream,
    peer: SocketAddr,
    container_id: &str,
    serving: Serving,
) -> Result<Conn, ListenError> {
    let mut w = Wire::new(CHUNK);
    w.attach(Stream::accepted(tcp));
    let fail = |why: String| ListenError::Handshake { peer, why };
    let io = |e: io::Error, stage: &str| fail(format!("{stage}: {e}"));
    let mut got = header(&mut w, peer).await?;
    if &got == SASL_HEADER {
        w.wbuf.extend_from_slice(SASL_HEADER);
        reply::put_sasl_mechanisms(&mut w.wbuf, &["ANONYMOUS".into(), "PLAIN".into()]);
        w.flush().await.map_err(|e| io(e, "SASL"))?;
        let mechanism = match read_frame(&mut w).await.map_err(|e| io(e, "SASL"))? {
            Performative::SaslInit { mechanism } => mechanism,
            other => return Err(fail(format!("expected sasl-init, it sent {other:?}"))),
        };
        if !matches!(mechanism.as_str(), "ANONYMOUS" | "PLAIN") {
            reply::put_sasl_outcome(&mut w.wbuf, 1);
            let _ = w.flush().await;
            return Err(fail(format!(
                "it chose SASL mechanism `{mechanism}`; a listening msgbench offers ANONYMOUS and PLAIN"
            )));
        }
        reply::put_sasl_outcome(&mut w.wbuf, 0);
        w.flush().await.map_err(|e| io(e, "SASL"))?;
        got = header(&mut w, peer).await?;
    }
    if &got != AMQP_HEADER {
        // The spec's answer to a header we do not take: ours, then hang up.
        w.wbuf.extend_from_slice(AMQP_HEADER);
        let _ = w.flush().await;
        return Err(if got.starts_with(b"AMQP") {
            fail(format!(
                "it asked for protocol {} version {}.{}.{}; a listening msgbench speaks AMQP 1.0.0",
                got[4], got[5], got[6], got[7]
            ))
        } else {
            ListenError::NotAmqp {
                peer,
                sent: quote(&got),
            }
        });
    }
    w.wbuf.extend_from_slice(AMQP_HEADER);
    let (mut max_frame, mut idle_ms) = (frames::MAX_FRAME, None);
    loop {
        let (_, channel, body) =
            std::future::poll_fn(|cx| w.poll_next(cx, true, frames::split_frame))
                .await
                .map_err(|e| io(e, "the AMQP open"))?;
        let p = Performative::parse(&body).map_err(|e| fail(e.to_string()))?;
        match p {
            Performative::Empty => {}
            Performative::Open {
                max_frame: m,
                idle_ms: i,
                ..
            } => {
                (max_frame, idle_ms) = (m, i);
                let host = w
                    .stream_mut()
                    .and_then(|s| s.local_addr().ok())
                    .map(|a| a.ip().to_string())
                    .unwrap_or_default();
                frames::put_open(&mut w.wbuf, container_id, &host, 0);
                w.flush().await.map_err(|e| io(e, "the AMQP open"))?;
            }
            Performative::Begin {
                next_outgoing_id,
                incoming_window,
            } => {
                reply::put_begin_reply(&mut w.wbuf, channel, 0, INCOMING_WINDOW);
                w.flush().await.map_err(|e| io(e, "the AMQP begin"))?;
                let mut conn = Conn::new(w, max_frame, idle_ms, next_outgoing_id, incoming_window)
                    .brokerless(Some(serving));
                conn.peer_channel = Some(channel);
                return Ok(conn);
            }
            Performative::Close(e) => {
                return Err(fail(format!(
                    "it closed the connection{}",
                    e.map(|e| format!(": {e}")).unwrap_or_default()
                )));
            }
            other => {
                return Err(fail(format!("expected open and begin, it sent {other:?}")));
            }
        }
    }
}
