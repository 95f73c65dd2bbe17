//! One ZMTP connection: its handshake, its buffered non-blocking I/O, and dialling it (retrying
//! while nothing listens, as a ZeroMQ `connect` does). Listening and dialling again after a
//! loss are `links`.
//!
//! A [`Conn`] is a handshaken TCP stream (NODELAY) with a read buffer that messages are split
//! off without copying and a write buffer that messages are encoded into. Reads and writes are
//! non-blocking `try_*` calls plus poll-style readiness, so a client owns all its connections
//! on its own task: no writer tasks, no queues between the client and its sockets, no locks.

use crate::options::Endpoint;
use crate::zmtp::{self, GREETING_LEN, SocketType, Unit, ZmtpError};
use bytes::{Buf, BytesMut};
use msgbench_core::driver::{ConnectFailure, DriverError};
use std::io;
use std::net::SocketAddr;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Largest frame, and multipart message all told, accepted from a peer (ZeroMQ's own default,
/// `ZMQ_MAXMSGSIZE`, is unlimited; a bound keeps a confused peer from making us buffer without
/// end).
pub const MAX_FRAME: u64 = 256 << 20;

/// Bytes a read reserves when the read buffer runs low.
pub const READ_CHUNK: usize = 64 * 1024;

/// How long a failed dial waits before the next attempt (ZeroMQ's `ZMQ_RECONNECT_IVL` is 100 ms).
pub(crate) const REDIAL: Duration = Duration::from_millis(100);

/// A handshaken connection.
pub struct Conn {
    tcp: TcpStream,
    /// Received bytes not yet split into units.
    pub rbuf: BytesMut,
    /// Encoded bytes not yet written.
    pub wbuf: BytesMut,
    /// The peer's address, for messages.
    pub peer: SocketAddr,
}

/// Both ends of a ZeroMQ link are the generator's (one binds, the other dials), so every
/// connection adds its TCP counters to the run's tally as it closes.
impl Drop for Conn {
    fn drop(&mut self) {
        msgbench_net::tally_tcp(&self.tcp);
    }
}

impl Conn {
    /// The ZMTP handshake on a fresh TCP stream: greetings, then READY both ways, checking that
    /// the peer's socket type fits `ours`. `hello` (a subscription) follows our READY. Bytes the
    /// peer sent after its READY stay in the read buffer.
    ///
    /// # Errors
    /// The I/O error, or what was wrong with the peer's side ([`ZmtpError`]).
    pub async fn handshake(
        mut tcp: TcpStream,
        ours: SocketType,
        hello: &[u8],
    ) -> Result<Conn, HandshakeError> {
        let peer = tcp.peer_addr()?;
        tcp.write_all(&zmtp::greeting()).await?;
        let mut g = [0u8; GREETING_LEN];
        let mut have = 0;
        while have < GREETING_LEN {
            match tcp.read(&mut g[have..]).await? {
                0 => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
                n => have += n,
            }
            zmtp::check_greeting_start(&g[..have])?;
        }
        zmtp::check_greeting(&g)?;
        let mut wbuf = BytesMut::with_capacity(128 + hello.len());
        zmtp::put_ready(&mut wbuf, ours);
        wbuf.extend_from_slice(hello);
        tcp.write_all(&wbuf).await?;
        wbuf.clear();
        let mut rbuf = BytesMut::with_capacity(512);
        let ready = loop {
            if let Some(u) = zmtp::next_unit(&mut rbuf, 1 << 16)? {
                break u;
            }
            if tcp.read_buf(&mut rbuf).await? == 0 {
                return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
            }
        };
        zmtp::check_ready(&ready, ours)?;
        Ok(Conn {
            tcp,
            rbuf,
            wbuf,
            peer,
        })
    }

    /// Writes what the socket takes now, without waiting; `Ok(true)` when the write buffer is
    /// empty.
    #[inline]
    pub fn try_flush(&mut self) -> io::Result<bool> {
        while !self.wbuf.is_empty() {
            match self.tcp.try_write(&self.wbuf) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.wbuf.advance(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Writes until the write buffer is empty, waiting for the socket as needed.
    pub fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            if self.try_flush()? {
                return Poll::Ready(Ok(()));
            }
            match self.tcp.poll_write_ready(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// The next unit, reading as needed. A closed connection is `UnexpectedEof`.
    pub fn poll_unit(&mut self, cx: &mut Context<'_>) -> Poll<Result<Unit, ConnError>> {
        loop {
            if let Some(u) = zmtp::next_unit(&mut self.rbuf, MAX_FRAME)? {
                return Poll::Ready(Ok(u));
            }
            match self.read_some() {
                Ok(true) => {}
                Ok(false) => match self.tcp.poll_read_ready(cx) {
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
                    Poll::Pending => return Poll::Pending,
                },
                Err(e) => return Poll::Ready(Err(e.into())),
            }
        }
    }

    /// Ready once the socket has something to read (or has closed).
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.tcp.poll_read_ready(cx)
    }

    /// The next unit if one is buffered or readable now, without waiting.
    pub fn try_unit(&mut self) -> Result<Option<Unit>, ConnError> {
        loop {
            if let Some(u) = zmtp::next_unit(&mut self.rbuf, MAX_FRAME)? {
                return Ok(Some(u));
            }
            if !self.read_some()? {
                return Ok(None);
            }
        }
    }

    /// Reads what is there: `Ok(true)` if something was read, `Ok(false)` if nothing was ready.
    fn read_some(&mut self) -> io::Result<bool> {
        if self.rbuf.capacity() - self.rbuf.len() < READ_CHUNK / 4 {
            self.rbuf.reserve(READ_CHUNK);
        }
        match self.tcp.try_read_buf(&mut self.rbuf) {
            Ok(0) => Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Ends the connection in an orderly way once what is buffered is written (bounded by
    /// `until`): the peer reads everything, then the end of the stream.
    pub async fn close(mut self, until: Instant) -> bool {
        let flushed =
            tokio::time::timeout_at(until, std::future::poll_fn(|cx| self.poll_flush(cx)))
                .await
                .is_ok_and(|r| r.is_ok());
        let _ = self.tcp.shutdown().await;
        flushed
    }
}

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// The connection failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The peer's side of the protocol was wrong.
    #[error("{0}")]
    Zmtp(#[from] ZmtpError),
}

/// Why an established connection ended.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    /// Closed or failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The peer broke the protocol.
    #[error("{0}")]
    Zmtp(#[from] ZmtpError),
}

impl ConnError {
    /// An orderly close by the peer (as opposed to a failure).
    pub fn is_eof(&self) -> bool {
        matches!(self, ConnError::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof)
    }
}

/// Dials `ep` and handshakes, retrying every [`REDIAL`] while the connection is refused (the
/// other side has not bound yet), until `deadline`.
///
/// # Errors
/// [`DriverError::Connect`] with the last failure, classified.
pub async fn dial(
    ep: &Endpoint,
    ours: SocketType,
    hello: &[u8],
    deadline: Instant,
) -> Result<Conn, DriverError> {
    let target = ep.target();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let failure = match msgbench_net::connect(&target, None, None, left).await {
            Ok(stream) => {
                let Ok(tcp) = stream.into_tcp() else {
                    unreachable!("a plain TCP stream was asked for")
                };
                match tokio::time::timeout_at(deadline, Conn::handshake(tcp, ours, hello)).await {
                    Ok(Ok(conn)) => return Ok(conn),
                    Ok(Err(HandshakeError::Zmtp(e))) => {
                        return Err(DriverError::Connect {
                            target: ep.to_string(),
                            reason: format!("ZMTP handshake with {ep} failed: {e}"),
                            cause: ConnectFailure::Rejected,
                        });
                    }
                    Ok(Err(HandshakeError::Io(e))) => (
                        msgbench_net::classify(&e),
                        format!("the ZMTP handshake with {ep} failed: {e}"),
                    ),
                    Err(_) => (
                        ConnectFailure::Timeout,
                        format!(
                            "{ep} accepted the connection but did not complete the ZMTP handshake"
                        ),
                    ),
                }
            }
            Err(e) => (e.cause, format!("cannot connect to {ep}: {}", e.detail)),
        };
        let retry = matches!(failure.0, ConnectFailure::Refused | ConnectFailure::Reset);
        if !retry || Instant::now() + REDIAL >= deadline {
            let (cause, mut reason) = failure;
            if cause == ConnectFailure::Refused {
                reason.push_str(" (nothing listened there before the connect timeout)");
            }
            return Err(DriverError::Connect {
                target: ep.to_string(),
                reason,
                cause,
            });
        }
        tokio::time::sleep(REDIAL).await;
    }
}
