//! Gathered writes under fe2o3: its connection task writes and flushes every frame on its own
//! (one `write` system call per transfer, per disposition), which at thousands of messages a
//! second costs more CPU than the messages themselves, on both ends of the socket.
//!
//! [`Gathered`] is the stream fe2o3 is given instead of the socket: a write only appends to a
//! buffer and wakes a writer task, which sends everything gathered meanwhile in one call. Under
//! load many frames go out together; when the connection is quiet each frame still goes out at
//! once (the writer runs as soon as the connection task yields), so nothing waits on a timer and
//! latency is unchanged. Reads go straight to the socket. The buffer is bounded: past
//! [`HIGH_WATER`] bytes writes wait until the writer has drained it (backpressure as before),
//! and a write error is returned to the next write.

use bytes::BytesMut;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf, ReadHalf, WriteHalf};
use tokio::sync::Notify;

/// Bytes gathered before writes wait for the writer.
pub(crate) const HIGH_WATER: usize = 1 << 20;

#[derive(Default)]
struct State {
    buf: BytesMut,
    /// Why the writer stopped (kind and text; io::Error is not Clone).
    error: Option<(io::ErrorKind, String)>,
    /// No more writes will come: drain, shut the socket's write side down, stop.
    closing: bool,
    /// A write waiting for room.
    blocked: Option<Waker>,
}

struct Shared {
    state: Mutex<State>,
    wake_writer: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain bytes behind: still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The stream handed to fe2o3: reads from the socket, writes into the gathering buffer.
pub(crate) struct Gathered<S> {
    read: ReadHalf<S>,
    shared: Arc<Shared>,
}

impl<S> std::fmt::Debug for Gathered<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Gathered")
    }
}

impl<S: AsyncRead + AsyncWrite + Send + 'static> Gathered<S> {
    /// Wraps `stream` and starts its writer task (on the current runtime).
    pub(crate) fn new(stream: S) -> Gathered<S> {
        let (read, write) = tokio::io::split(stream);
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake_writer: Notify::new(),
        });
        tokio::spawn(writer(write, shared.clone()));
        Gathered { read, shared }
    }
}

/// Sends what is gathered, one write per batch, until closed or the socket fails.
async fn writer<S: AsyncWrite>(mut w: WriteHalf<S>, shared: Arc<Shared>) {
    let mut out = BytesMut::new();
    loop {
        let closing = {
            let mut st = shared.lock();
            std::mem::swap(&mut out, &mut st.buf);
            if let Some(waker) = st.blocked.take() {
                waker.wake();
            }
            st.closing
        };
        if out.is_empty() {
            if closing {
                break;
            }
            shared.wake_writer.notified().await;
            continue;
        }
        if let Err(e) = w.write_all(&out).await {
            let mut st = shared.lock();
            st.error = Some((e.kind(), e.to_string()));
            if let Some(waker) = st.blocked.take() {
                waker.wake();
            }
            return;
        }
        out.clear();
    }
    let _ = w.shutdown().await;
}

impl<S: AsyncRead> AsyncRead for Gathered<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.read).poll_read(cx, buf)
    }
}

impl<S> AsyncWrite for Gathered<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut st = self.shared.lock();
        if let Some((kind, msg)) = &st.error {
            return Poll::Ready(Err(io::Error::new(*kind, msg.clone())));
        }
        if st.closing {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        if st.buf.len() >= HIGH_WATER {
            st.blocked = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let first = st.buf.is_empty();
        st.buf.extend_from_slice(data);
        drop(st);
        if first {
            self.shared.wake_writer.notify_one();
        }
        Poll::Ready(Ok(data.len()))
    }

    /// Handed to the writer counts as flushed: it writes without delay.
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &self.shared.lock().error {
            Some((kind, msg)) => Poll::Ready(Err(io::Error::new(*kind, msg.clone()))),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.shared.lock().closing = true;
        self.shared.wake_writer.notify_one();
        Poll::Ready(Ok(()))
    }
}

impl<S> Drop for Gathered<S> {
    fn drop(&mut self) {
        self.shared.lock().closing = true;
        self.shared.wake_writer.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn writes_arrive_in_order_and_close_shuts_down() {
        let (a, mut b) = tokio::io::duplex(64);
        let mut g = Gathered::new(a);
        for i in 0..100u8 {
            g.write_all(&[i; 10]).await.unwrap();
            g.flush().await.unwrap();
        }
        g.shutdown().await.unwrap();
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.unwrap();
        assert_eq!(got.len(), 1000);
        assert!(got.chunks(10).enumerate().all(|(i, c)| c == [i as u8; 10]));
        b.write_all(b"back").await.unwrap();
        let mut back = [0u8; 4];
        g.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"back");
    }

    #[tokio::test]
    async fn a_dead_peer_fails_later_writes() {
        let (a, b) = tokio::io::duplex(16);
        drop(b);
        let mut g = Gathered::new(a);
        let _ = g.write_all(b"hello").await;
        let mut failed = false;
        for _ in 0..100 {
            tokio::task::yield_now().await;
            if g.write_all(b"x").await.is_err() {
                failed = true;
                break;
            }
        }
        assert!(failed, "a write error reaches the writer's caller");
    }
}
