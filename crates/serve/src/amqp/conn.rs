//! One client connection, one task: reads into a growing buffer, lets [`Conn`] consume the
//! complete frames, writes all its replies with one write per read, and keeps time (handshake
//! timeout, heartbeats both ways, the wait for close-ok).

use super::proto::{Conn, Phase};
use super::{Shared, SinkStats};
use bytes::BytesMut;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::{Instant, timeout};

/// Time from accept to connection.open.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Time the client has to answer the sink's connection.close, and to take a final write.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);
/// Read buffer: initial capacity, and least free space before a read.
const INITIAL_BUF: usize = 4 * 1024;
const MIN_SPACE: usize = 2 * 1024;
/// Read buffer growth step for a client that keeps the buffer full.
const READ_CHUNK: usize = 256 * 1024;
/// A write buffer grown past this is not kept.
const KEEP_OUT: usize = 64 * 1024;

/// Decrements the open-connection count when the connection's task ends, however it ends.
pub(crate) struct OpenConn(pub Arc<SinkStats>);

impl Drop for OpenConn {
    fn drop(&mut self) {
        self.0.connections_current.fetch_sub(1, Relaxed);
    }
}

/// Serves one accepted connection (TCP or TLS) to the end. `tls`: end the stream with a
/// shutdown (TLS close_notify) rather than just closing the socket, which for TCP sends the
/// same FIN with one system call less.
pub(crate) async fn serve<S>(
    mut io: S,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
    _open: OpenConn,
    tls: bool,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let heartbeat_frame = shared.heartbeat_frame.clone();
    let mut conn = Conn::new(shared);
    let mut out = Vec::with_capacity(1024);
    let stopped = tokio::select! {
        () = drive(&mut io, &mut conn, &mut out, &heartbeat_frame, tls) => false,
        _ = shutdown.wait_for(|s| *s) => true,
    };
    conn.flush_stats();
    if stopped {
        // A write cut short may have left half a frame on the wire; then the client sees a
        // frame error instead of the close, which is as good at shutdown.
        out.clear();
        conn.shutdown(&mut out);
        if !out.is_empty() {
            let _ = timeout(CLOSE_TIMEOUT, async {
                io.write_all(&out).await?;
                io.shutdown().await
            })
            .await;
        }
    }
}

/// Writes and clears `out`; false if the socket failed or the client did not take the bytes
/// within two heartbeat intervals.
async fn write<S: AsyncWrite + Unpin>(io: &mut S, out: &mut Vec<u8>, heartbeat: u16) -> bool {
    let w = async {
        io.write_all(out).await?;
        io.flush().await
    };
    let ok = if heartbeat > 0 {
        let limit = Duration::from_secs(2 * u64::from(heartbeat));
        matches!(timeout(limit, w).await, Ok(Ok(())))
    } else {
        w.await.is_ok()
    };
    if out.capacity() > KEEP_OUT {
        *out = Vec::with_capacity(1024);
    } else {
        out.clear();
    }
    ok
}

/// When the timer must next look at the connection.
struct Clock {
    handshake_end: Instant,
    close_end: Instant,
    last_read: Instant,
    last_write: Instant,
}

impl Clock {
    fn deadline(&self, phase: Phase, heartbeat: u16) -> Option<Instant> {
        let hb = Duration::from_secs(u64::from(heartbeat));
        match phase {
            Phase::Header | Phase::StartOk | Phase::TuneOk | Phase::Open => {
                Some(self.handshake_end)
            }
            Phase::Closing | Phase::Draining | Phase::Done => Some(self.close_end),
            Phase::Running if heartbeat == 0 => None,
            Phase::Running => Some((self.last_write + hb).min(self.last_read + 2 * hb)),
        }
    }
}

async fn drive<S>(io: &mut S, conn: &mut Conn, out: &mut Vec<u8>, heartbeat_frame: &[u8], tls: bool)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = BytesMut::with_capacity(INITIAL_BUF);
    let mut chunk = INITIAL_BUF;
    let now = Instant::now();
    let mut clock = Clock {
        handshake_end: now + HANDSHAKE_TIMEOUT,
        close_end: now,
        last_read: now,
        last_write: now,
    };
    let mut phase = conn.phase;
    let far = now + Duration::from_secs(86_400 * 365);
    let timer = tokio::time::sleep_until(clock.deadline(phase, 0).unwrap_or(far));
    let mut timer = std::pin::pin!(timer);
    loop {
        let spare = buf.capacity() - buf.len();
        tokio::select! {
            biased;
            r = io.read_buf(&mut buf) => {
                let n = match r {
                    Ok(n) if n > 0 => n,
                    _ => return,
                };
                if n == spare && chunk < READ_CHUNK {
                    chunk *= 4;
                }
                conn.feed(&mut buf, out);
                conn.flush_stats();
                let now = Instant::now();
                clock.last_read = now;
                if !out.is_empty() {
                    if !write(io, out, conn.heartbeat).await {
                        return;
                    }
                    clock.last_write = now;
                }
                if conn.phase != phase {
                    phase = conn.phase;
                    if phase == Phase::Done {
                        if conn.closed_by_peer {
                            // close-ok tells the client it may close the socket: it does, and
                            // the sink waits for that (briefly), as RabbitMQ does. Closing first
                            // raced the client's read of the close-ok (amqp091-go reported
                            // 501 EOF for a clean close about one time in two).
                            let mut scratch = [0u8; 256];
                            let eof = async {
                                while matches!(io.read(&mut scratch).await, Ok(n) if n > 0) {}
                            };
                            let _ = timeout(CLOSE_TIMEOUT, eof).await;
                        }
                        if tls {
                            let _ = timeout(CLOSE_TIMEOUT, io.shutdown()).await;
                        }
                        return;
                    }
                    if matches!(phase, Phase::Closing | Phase::Draining) {
                        clock.close_end = now + CLOSE_TIMEOUT;
                    }
                    if phase == Phase::Draining {
                        // The stream cannot be parsed for a close-ok: end our side now, so the
                        // client sees the connection.close and then the end of the stream.
                        let _ = timeout(CLOSE_TIMEOUT, io.shutdown()).await;
                    }
                    let next = clock.deadline(phase, conn.heartbeat).unwrap_or(far);
                    timer.as_mut().reset(next);
                }
                // Room for the rest of the frame being read, and for a read of `chunk / 2` or
                // more: a busy connection reads in large pieces.
                let want = conn.need.saturating_sub(buf.len());
                let spare = buf.capacity() - buf.len();
                if spare < want.max(chunk / 2).max(MIN_SPACE) {
                    buf.reserve(want.max(chunk));
                }
            }
            () = &mut timer => {
                let now = Instant::now();
                let Some(due) = clock.deadline(phase, conn.heartbeat) else {
                    timer.as_mut().reset(far);
                    continue;
                };
                if phase != Phase::Running {
                    if now >= due {
                        return; // handshake or close timed out
                    }
                } else {
                    let hb = Duration::from_secs(u64::from(conn.heartbeat));
                    if now >= clock.last_read + 2 * hb {
                        return; // the client went silent
                    }
                    if now >= clock.last_write + hb {
                        out.extend_from_slice(heartbeat_frame);
                        if !write(io, out, conn.heartbeat).await {
                            return;
                        }
                        clock.last_write = now;
                    }
                }
                let next = clock.deadline(phase, conn.heartbeat).unwrap_or(far);
                timer.as_mut().reset(next);
            }
        }
    }
}
