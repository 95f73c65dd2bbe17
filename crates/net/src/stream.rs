//! [`Stream`]: one connection type for every driver, plain TCP, TLS or held in an io_uring
//! table, with poll-style I/O into the drivers' own buffers.

use crate::tcp_info;
#[cfg(target_os = "linux")]
use crate::{batch, ring};
use bytes::BytesMut;
use std::io;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsStream;

/// A connection, plain or TLS: a client's (from [`connect`](crate::connect)) or, in msgbench's
/// own servers, an accepted one.
///
/// A client connection adds its kernel TCP counters to the run's tally
/// ([`msgbench_core::tcp_tally`]) when it is dropped: one `getsockopt` per connection, at close.
/// Accepted connections do not, since their counters are the server's, not the generator's.
pub struct Stream {
    pub(crate) io: Io,
    tallied: bool,
}

/// The transport under a [`Stream`].
pub(crate) enum Io {
    /// Plain TCP.
    Tcp(TcpStream),
    /// TLS over TCP, client or server side.
    Tls(Box<TlsStream<TcpStream>>),
    /// Plain TCP held in an io_uring table instead of a descriptor ([`ring`]).
    #[cfg(target_os = "linux")]
    Ring(ring::RingStream),
    /// Plain TCP whose I/O is batched on its worker thread's io_uring ([`batch`]).
    #[cfg(target_os = "linux")]
    Batch(batch::BatchStream),
    /// Another protocol in WebSocket frames over an inner stream ([`tunnel`](crate::tunnel)).
    Ws(Box<crate::tunnel::Tunnel>),
}

impl Drop for Stream {
    fn drop(&mut self) {
        if self.tallied
            && let Some(fd) = self.raw_fd()
        {
            #[cfg(target_os = "linux")]
            let batched = matches!(self.io, Io::Batch(_));
            #[cfg(not(target_os = "linux"))]
            let batched = false;
            tcp_info::tally(fd, batched);
        }
    }
}

impl Stream {
    /// A client connection: tallied when dropped.
    pub(crate) fn client(io: Io) -> Stream {
        Stream { io, tallied: true }
    }

    /// A stream over another (a tunnel): the inner one tallies itself.
    pub(crate) fn wrapped(io: Io) -> Stream {
        Stream { io, tallied: false }
    }

    /// A plain TCP client connection made outside [`connect`](crate::connect) (tests, or a
    /// driver's own dialing): tallied when dropped, like [`connect`](crate::connect)'s.
    pub fn from_client_tcp(tcp: TcpStream) -> Stream {
        Stream::client(Io::Tcp(tcp))
    }

    /// A connection one of msgbench's own servers accepted: not tallied.
    pub fn accepted(tcp: TcpStream) -> Stream {
        Stream {
            io: Io::Tcp(tcp),
            tallied: false,
        }
    }

    /// A TLS connection one of msgbench's own servers accepted: not tallied.
    pub fn accepted_tls(tls: tokio_rustls::server::TlsStream<TcpStream>) -> Stream {
        Stream {
            io: Io::Tls(Box::new(tls.into())),
            tallied: false,
        }
    }

    /// The plain TCP socket, for a driver that does its own I/O on it (and then tallies it
    /// itself with [`tally_tcp`](crate::tally_tcp) when it closes); a TLS or ring stream comes
    /// back unchanged.
    pub fn into_tcp(self) -> Result<TcpStream, Stream> {
        let tallied = self.tallied;
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped after this read, so `io` is moved out of it
        // exactly once and nothing else of it needs dropping (`tallied` is a bool).
        let io = unsafe { std::ptr::read(&this.io) };
        match io {
            Io::Tcp(t) => Ok(t),
            #[cfg(target_os = "linux")]
            Io::Batch(b) => b.into_tcp().map_err(|b| Stream {
                io: Io::Batch(b),
                tallied,
            }),
            io => Err(Stream { io, tallied }),
        }
    }

    /// Whether closing this stream has something to say (TLS's `close_notify`, a WebSocket
    /// tunnel's close frame): a driver that closes politely shuts such a stream down before
    /// dropping it.
    pub fn closes_politely(&self) -> bool {
        matches!(self.io, Io::Tls(_) | Io::Ws(_))
    }

    /// The TLS session, for a driver that closes it politely (`close_notify`) before dropping.
    pub fn tls_mut(&mut self) -> Option<&mut TlsStream<TcpStream>> {
        match &mut self.io {
            Io::Tls(s) => Some(s.as_mut()),
            _ => None,
        }
    }

    /// The socket's descriptor (`None` when held in an io_uring table).
    fn raw_fd(&self) -> Option<RawFd> {
        match &self.io {
            Io::Tcp(s) => Some(s.as_raw_fd()),
            Io::Tls(s) => Some(s.get_ref().0.as_raw_fd()),
            #[cfg(target_os = "linux")]
            Io::Ring(_) => None,
            #[cfg(target_os = "linux")]
            Io::Batch(s) => Some(s.raw_fd()),
            Io::Ws(t) => t.inner().raw_fd(),
        }
    }

    /// The protocol the server chose by ALPN in the TLS handshake (`None` for plain TCP, or
    /// when the server chose none).
    pub fn alpn_protocol(&self) -> Option<&[u8]> {
        match &self.io {
            Io::Tls(s) => s.get_ref().1.alpn_protocol(),
            Io::Ws(t) => t.inner().alpn_protocol(),
            _ => None,
        }
    }

    /// Reads what is available into the spare capacity of `buf` (reserving `chunk` bytes if it
    /// has less than `chunk / 4` free; a connection held in an io_uring table instead appends
    /// exactly what its posted receive took). `Ready(Ok(0))` means the peer closed.
    pub fn poll_read_into(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
        chunk: usize,
    ) -> Poll<io::Result<usize>> {
        #[cfg(target_os = "linux")]
        if let Io::Ring(s) = &mut self.io {
            return s.poll_read_buf(cx, buf);
        }
        if let Io::Ws(t) = &mut self.io {
            return t.poll_read_into(cx, buf, chunk);
        }
        if buf.capacity() - buf.len() < chunk / 4 {
            buf.reserve(chunk);
        }
        if let Io::Tcp(s) = &self.io
            && crate::just_looking(cx)
        {
            // A look without waiting: read if the socket is known readable, and leave the
            // waker the task registered in place (a no-op waker would replace it).
            return match s.try_read_buf(buf) {
                Ok(n) => Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
                Err(e) => Poll::Ready(Err(e)),
            };
        }
        let spare = buf.spare_capacity_mut();
        // SAFETY: ReadBuf only writes initialised bytes into the spare capacity and reports how
        // many; we then mark exactly that many as part of the buffer.
        let spare: &mut [MaybeUninit<u8>] = spare;
        let mut rb = ReadBuf::uninit(spare);
        let r = match &mut self.io {
            Io::Tcp(s) => Pin::new(s).poll_read(cx, &mut rb),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, &mut rb),
            #[cfg(target_os = "linux")]
            Io::Ring(s) => Pin::new(s).poll_read(cx, &mut rb),
            #[cfg(target_os = "linux")]
            Io::Batch(s) => Pin::new(s).poll_read(cx, &mut rb),
            Io::Ws(t) => t.poll_read(cx, &mut rb),
        };
        match r {
            Poll::Ready(Ok(())) => {
                let n = rb.filled().len();
                unsafe { buf.set_len(buf.len() + n) };
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Writes some of `data`.
    pub fn poll_write(&mut self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        match &mut self.io {
            Io::Tcp(s) => Pin::new(s).poll_write(cx, data),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, data),
            #[cfg(target_os = "linux")]
            Io::Ring(s) => Pin::new(s).poll_write(cx, data),
            #[cfg(target_os = "linux")]
            Io::Batch(s) => Pin::new(s).poll_write(cx, data),
            Io::Ws(t) => t.poll_write(cx, data),
        }
    }

    /// Pushes out anything the TLS layer or the ring still holds (no-op for TCP).
    pub fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.io {
            Io::Tcp(_) => Poll::Ready(Ok(())),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            #[cfg(target_os = "linux")]
            Io::Ring(s) => Pin::new(s).poll_flush(cx),
            #[cfg(target_os = "linux")]
            Io::Batch(s) => Pin::new(s).poll_flush(cx),
            Io::Ws(t) => t.poll_flush(cx),
        }
    }

    /// Writes all of `buf` (advancing it) and flushes. Cancel-safe: what was written is gone
    /// from `buf`, what was not stays.
    pub fn poll_write_all(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
    ) -> Poll<io::Result<()>> {
        use bytes::Buf;
        while !buf.is_empty() {
            match self.poll_write(cx, buf) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => buf.advance(n),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        self.poll_flush(cx)
    }

    /// The local address (to report which source address a connection used).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match &self.io {
            Io::Tcp(s) => s.local_addr(),
            Io::Tls(s) => s.get_ref().0.local_addr(),
            #[cfg(target_os = "linux")]
            Io::Ring(s) => Ok(s.local_addr()),
            #[cfg(target_os = "linux")]
            Io::Batch(s) => Ok(s.local_addr()),
            Io::Ws(t) => t.inner().local_addr(),
        }
    }
}

/// Every stream kind through tokio's I/O traits (for libraries that take them, such as hyper).
impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            #[cfg(target_os = "linux")]
            Io::Ring(s) => Pin::new(s).poll_read(cx, buf),
            #[cfg(target_os = "linux")]
            Io::Batch(s) => Pin::new(s).poll_read(cx, buf),
            Io::Ws(t) => t.poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
            #[cfg(target_os = "linux")]
            Io::Ring(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            #[cfg(target_os = "linux")]
            Io::Batch(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Ws(t) => match bufs.iter().find(|b| !b.is_empty()) {
                Some(b) => t.poll_write(cx, b),
                None => Poll::Ready(Ok(0)),
            },
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.io {
            Io::Tcp(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
            #[cfg(target_os = "linux")]
            Io::Ring(_) => false,
            #[cfg(target_os = "linux")]
            Io::Batch(_) => false,
            Io::Ws(_) => false,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Stream::poll_flush(self.get_mut(), cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            #[cfg(target_os = "linux")]
            Io::Ring(s) => Pin::new(s).poll_shutdown(cx),
            #[cfg(target_os = "linux")]
            Io::Batch(s) => Pin::new(s).poll_shutdown(cx),
            Io::Ws(t) => t.poll_shutdown(cx),
        }
    }
}
