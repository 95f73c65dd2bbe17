//! Connections held outside the process's descriptor table, for connection counts beyond the
//! open-file limit.
//!
//! A process may not hold more sockets than `RLIMIT_NOFILE` allows, and raising the hard limit
//! needs privileges a benchmark often does not have. io_uring's fixed-file tables do not count
//! against that limit (each table may be as large as the limit), so a [`RingStream`] connects
//! as an ordinary socket, moves it into a slot of a ring's table and closes its descriptor: from
//! then on the socket is reachable only through the ring. Rings are created as their tables
//! fill, each served by one thread that waits for completions and wakes the tasks waiting on
//! them; the tasks themselves submit their reads and writes.
//!
//! Built for the thousands of mostly idle connections of connection-scale workloads: each
//! stream keeps one small receive buffer posted to the kernel, and a write is copied into a
//! buffer that stays with the kernel until the send completes. Data-heavy clients stay on
//! ordinary sockets.
//!
//! Safety: the kernel writes into a stream's buffers while a receive or send is pending. Each
//! pending operation owns a strong reference to the stream's shared state (its pointer is the
//! operation's `user_data`), so the buffers live until the operation's completion, even when the
//! stream is dropped first; and no code reads or moves a buffer while its operation is pending.

use crate::kernel_buf::{Buf, RecvSide};
use io_uring::{IoUring, opcode, squeue, types};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering, fence};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Waker};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Operation kinds, in the low bits of `user_data` (the rest is a pointer or a slot).
const OP_RECV: u64 = 1;
const OP_SEND: u64 = 2;
const OP_CLOSE: u64 = 3;
const OP_IGNORE: u64 = 4;
const OP_MASK: u64 = 7;
/// Receive buffer per stream to begin with: held connections read pings and acknowledgements.
const READ_BUF: usize = 512;
/// A stream whose receives keep filling its buffer (it has fallen behind a busy peer) gets a
/// larger one, up to this, so it catches up many messages per receive instead of one or two;
/// one whose receives take little goes back to [`READ_BUF`].
const READ_BUF_MAX: usize = 2 * 1024;
/// Largest single send; a longer write is taken in parts.
const WRITE_MAX: usize = 16 * 1024;
/// Submission queue entries per ring.
const SQ_ENTRIES: u32 = 4096;
/// Longest wait of a ring's completion thread before it looks at the submission queue again.
const WAIT_CAP: std::time::Duration = std::time::Duration::from_millis(20);
/// At most this many rings (each as large as the open-file limit allows).
const MAX_RINGS: usize = 256;

/// A stream's state, shared between its owner and the ring's completion thread.
#[derive(Default)]
struct State {
    recv: RecvSide,
    wbuf: Option<Buf>,
    /// The send in progress covers `wbuf[w_off..w_len]`.
    w_off: usize,
    w_len: usize,
    w_pending: bool,
    w_err: Option<i32>,
    w_waker: Option<Waker>,
    closed: bool,
}

struct Shared {
    slot: u32,
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One ring: a fixed-file table of `size` slots and the thread that completes its operations.
struct Ring {
    uring: IoUring,
    /// Serialises use of the submission queue.
    sq: Mutex<()>,
    free: Mutex<Vec<u32>>,
    /// The completion thread is (about to be) blocked in the kernel. While it is not, it will
    /// submit whatever is queued when it next waits, so a task queueing an operation need not
    /// enter the kernel itself: under load, a receive re-armed per message costs no system
    /// call (see [`Ring::submit`]).
    waiting: AtomicBool,
}

impl Ring {
    fn new(size: u32, index: usize) -> io::Result<Arc<Ring>> {
        let uring = IoUring::builder()
            .setup_cqsize(SQ_ENTRIES * 4)
            .build(SQ_ENTRIES)?;
        uring.submitter().register_files_sparse(size)?;
        let ring = Arc::new(Ring {
            uring,
            sq: Mutex::new(()),
            free: Mutex::new((0..size).rev().collect()),
            waiting: AtomicBool::new(false),
        });
        let r = ring.clone();
        std::thread::Builder::new()
            .name(format!("msgbench-ring-{index}"))
            .stack_size(64 * 1024)
            .spawn(move || r.complete_forever())?;
        Ok(ring)
    }

    /// Queues `entries` in order and has them submitted: by the completion thread when it is
    /// busy completing (it submits everything queued before it waits again), else here.
    ///
    /// The hand-over is a store-buffer pattern: the thread sets `waiting` and then reads the
    /// queue's tail; a task moves the tail and then reads `waiting`. With a full fence on both
    /// sides at least one of them sees the other's store, so no entry is left unsubmitted
    /// (and the thread's wait times out every [`WAIT_CAP`] regardless).
    fn submit(&self, entries: &[squeue::Entry]) -> io::Result<()> {
        let _g = self.sq.lock().unwrap_or_else(|p| p.into_inner());
        for e in entries {
            loop {
                // SAFETY: the `sq` mutex makes this the only submission queue handle; every
                // entry's buffers outlive the operation (module docs).
                let pushed = unsafe { self.uring.submission_shared().push(e) };
                if pushed.is_ok() {
                    break;
                }
                // Full: let the kernel take what is queued, then retry.
                match self.uring.submitter().submit() {
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) => std::thread::yield_now(),
                    Err(e) => return Err(e),
                }
            }
        }
        // The tail moved when the queue handle above was dropped (a release store).
        fence(Ordering::SeqCst);
        if !self.waiting.load(Ordering::SeqCst) {
            return Ok(());
        }
        loop {
            match self.uring.submitter().submit() {
                Ok(_) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => std::thread::yield_now(),
                Err(e) => return Err(e),
            }
        }
    }

    fn complete_forever(&self) {
        let mut done: Vec<(u64, i32)> = Vec::with_capacity(256);
        let cap = types::Timespec::new()
            .sec(WAIT_CAP.as_secs())
            .nsec(WAIT_CAP.subsec_nanos());
        let args = types::SubmitArgs::new().timespec(&cap);
        loop {
            // A full fence (SeqCst swap) before the tail is read: see `submit`.
            self.waiting.swap(true, Ordering::SeqCst);
            let r = if self.uring.params().is_feature_ext_arg() {
                self.uring.submitter().submit_with_args(1, &args)
            } else {
                // Before Linux 5.11: no time-out, and the hand-over alone must hold.
                self.uring.submitter().submit_and_wait(1)
            };
            self.waiting.store(false, Ordering::SeqCst);
            match r {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EBUSY | libc::ETIME)
                    ) => {}
                Err(_) => return,
            }
            {
                // SAFETY: this thread is the only consumer of the completion queue.
                let cq = unsafe { self.uring.completion_shared() };
                done.extend(cq.map(|c| (c.user_data(), c.result())));
            }
            for (ud, res) in done.drain(..) {
                self.complete(ud, res);
            }
        }
    }

    fn complete(&self, ud: u64, res: i32) {
        match ud & OP_MASK {
            OP_CLOSE => self
                .free
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((ud >> 3) as u32),
            OP_RECV | OP_SEND => {
                // SAFETY: the pointer was made by `Arc::into_raw` for this one operation.
                let sh = unsafe { Arc::from_raw((ud & !OP_MASK) as *const Shared) };
                let mut st = sh.lock();
                let waker = if ud & OP_MASK == OP_RECV {
                    let closed = st.closed;
                    st.recv.complete(res, closed)
                } else {
                    if res < 0 {
                        st.w_pending = false;
                        st.w_err = Some(-res);
                    } else {
                        st.w_off += res as usize;
                        if st.w_off < st.w_len && !st.closed {
                            if let Err(e) = self.send(&sh, &st) {
                                st.w_pending = false;
                                st.w_err = Some(e.raw_os_error().unwrap_or(libc::EIO));
                            }
                            return;
                        }
                        st.w_pending = false;
                    }
                    st.w_waker.take()
                };
                drop(st);
                if let Some(w) = waker {
                    w.wake();
                }
            }
            _ => {}
        }
    }

    /// Submits the send of `wbuf[w_off..w_len]`.
    fn send(&self, sh: &Arc<Shared>, st: &State) -> io::Result<()> {
        let buf = st.wbuf.as_ref().expect("a send has a buffer");
        // SAFETY: `w_off < w_len <= cap`; the buffer lives while `sh` does (module docs).
        let ptr = unsafe { buf.ptr.add(st.w_off) };
        let e = opcode::Send::new(types::Fixed(sh.slot), ptr, (st.w_len - st.w_off) as u32);
        self.submit_owned(sh, OP_SEND, e.build())
    }

    /// Submits a receive into the whole receive buffer (every byte of the last one was handed
    /// out, so the buffer is free to be resized: see [`READ_BUF_MAX`]).
    fn recv(&self, sh: &Arc<Shared>, st: &mut State) -> io::Result<()> {
        let (ptr, len) = st.recv.next(READ_BUF, READ_BUF_MAX);
        let e = opcode::Recv::new(types::Fixed(sh.slot), ptr, len);
        self.submit_owned(sh, OP_RECV, e.build())
            .inspect_err(|_| st.recv.not_queued())
    }

    /// Submits an operation on `sh`'s buffers: it carries a strong reference to `sh` as its
    /// `user_data` (taken back by the completion, or here if it could not be queued).
    fn submit_owned(&self, sh: &Arc<Shared>, op: u64, e: squeue::Entry) -> io::Result<()> {
        let ud = Arc::into_raw(sh.clone()) as u64 | op;
        self.submit(&[e.user_data(ud)]).inspect_err(|_| {
            // SAFETY: the operation was not queued; take back its reference.
            drop(unsafe { Arc::from_raw((ud & !OP_MASK) as *const Shared) });
        })
    }

    fn take_slot(&self) -> Option<u32> {
        self.free.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }
}

/// The rings of this process.
#[derive(Default)]
struct Pool {
    rings: Mutex<Vec<Arc<Ring>>>,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(Pool::default)
}

/// Slots per ring: as many as the open-file limit allows a table to have.
fn table_size() -> u32 {
    // SAFETY: getrlimit fills a struct we own.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    let cur = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur
    } else {
        1024
    };
    cur.clamp(64, 32_768) as u32
}

impl Pool {
    /// Moves `fd` into a free slot of some ring (creating a ring when all are full).
    fn adopt(&self, fd: RawFd) -> io::Result<(Arc<Ring>, u32)> {
        let mut rings = self.rings.lock().unwrap_or_else(|p| p.into_inner());
        let found = rings
            .iter()
            .find_map(|r| r.take_slot().map(|s| (r.clone(), s)));
        let (ring, slot) = match found {
            Some(x) => x,
            None => {
                if rings.len() >= MAX_RINGS {
                    return Err(io::Error::other(format!(
                        "all {MAX_RINGS} io_uring tables are full"
                    )));
                }
                let ring = Ring::new(table_size(), rings.len()).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!(
                            "cannot set up io_uring to hold connections beyond the open-file \
                             limit: {e}"
                        ),
                    )
                })?;
                rings.push(ring.clone());
                let slot = ring.take_slot().expect("a new ring has free slots");
                (ring, slot)
            }
        };
        drop(rings);
        if let Err(e) = ring.uring.submitter().register_files_update(slot, &[fd]) {
            ring.free
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(slot);
            return Err(e);
        }
        Ok((ring, slot))
    }
}

/// How many rings this process has set up (each holds up to the open-file limit).
pub fn rings() -> usize {
    pool().rings.lock().unwrap_or_else(|p| p.into_inner()).len()
}

/// A connected TCP socket held in an io_uring fixed-file table (see the module docs).
pub struct RingStream {
    shared: Arc<Shared>,
    ring: Arc<Ring>,
    local: SocketAddr,
}

impl std::fmt::Debug for RingStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingStream")
            .field("slot", &self.shared.slot)
            .field("local", &self.local)
            .finish()
    }
}

impl RingStream {
    /// Takes over a connected socket: it moves into a ring and its descriptor is closed.
    pub fn adopt(tcp: tokio::net::TcpStream) -> io::Result<RingStream> {
        let local = tcp.local_addr()?;
        let std = tcp.into_std()?;
        let (ring, slot) = pool().adopt(std.as_raw_fd())?;
        drop(std);
        Ok(RingStream {
            shared: Arc::new(Shared {
                slot,
                state: Mutex::new(State::default()),
            }),
            ring,
            local,
        })
    }

    /// The local address the connection was made from.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Appends what has been received to `buf`, growing it by exactly as much (see
    /// `RecvSide::take_into`); `Ready(Ok(0))` means the peer closed. The wire of a held
    /// connection reads this way instead of through [`AsyncRead`], so it keeps no spare chunk
    /// of its own beside the buffer posted to the kernel: at fan-out scale that chunk was most
    /// of a behind receiver's memory.
    pub fn poll_read_buf(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut bytes::BytesMut,
    ) -> Poll<io::Result<usize>> {
        let mut st = self.shared.lock();
        if let Some(done) = st.recv.take_into(buf) {
            return Poll::Ready(done);
        }
        if !st.recv.pending {
            self.ring.recv(&self.shared, &mut st)?;
        }
        st.recv.wait(cx)
    }

    fn error(e: i32) -> io::Error {
        io::Error::from_raw_os_error(e)
    }

    /// Ready once no send is in progress (with the error of a failed one).
    fn send_done(st: &mut State, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(e) = st.w_err {
            return Poll::Ready(Err(Self::error(e)));
        }
        if st.w_pending {
            st.w_waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for RingStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let mut st = this.shared.lock();
        if let Some(done) = st.recv.take(out) {
            return Poll::Ready(done);
        }
        if !st.recv.pending {
            this.ring.recv(&this.shared, &mut st)?;
        }
        st.recv.wait(cx)
    }
}

impl AsyncWrite for RingStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let mut st = this.shared.lock();
        std::task::ready!(Self::send_done(&mut st, cx))?;
        let n = data.len().min(WRITE_MAX);
        if n == 0 {
            return Poll::Ready(Ok(0));
        }
        if st.wbuf.as_ref().is_none_or(|b| b.cap < n) {
            st.wbuf = Some(Buf::new(n.max(256)));
        }
        let buf = st.wbuf.as_ref().expect("just made");
        // SAFETY: no send is pending, so the kernel does not read this buffer now; `n <= cap`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf.ptr, n) };
        (st.w_off, st.w_len) = (0, n);
        this.ring.send(&this.shared, &st)?;
        st.w_pending = true;
        Poll::Ready(Ok(n))
    }

    /// A submitted send is in the kernel's hands, as a written socket buffer is: flushing waits
    /// for nothing (an error shows at the next write). Not waiting keeps closes cheap: a
    /// polite goodbye goes out without a wake-up per connection.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.shared.lock().w_err {
            Some(e) => Poll::Ready(Err(Self::error(e))),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // io_uring does not order a shutdown after a send in progress: wait for the send.
        std::task::ready!(Self::send_done(&mut self.shared.lock(), cx))?;
        let e = opcode::Shutdown::new(types::Fixed(self.shared.slot), libc::SHUT_WR)
            .build()
            .user_data(OP_IGNORE);
        self.ring.submit(&[e])?;
        Poll::Ready(Ok(()))
    }
}

impl Drop for RingStream {
    fn drop(&mut self) {
        let recv_pending = {
            let mut st = self.shared.lock();
            st.closed = true;
            st.recv.waker = None;
            st.w_waker = None;
            st.recv.pending
        };
        let slot = self.shared.slot;
        // Cancel the pending receive (its completion drops its reference) and empty the slot; a
        // send in progress still completes, and the socket closes after the last operation on
        // it (so a goodbye written just before goes out before the FIN).
        let close = opcode::Close::new(types::Fixed(slot))
            .build()
            .user_data(((slot as u64) << 3) | OP_CLOSE);
        let r = if recv_pending {
            let recv = Arc::as_ptr(&self.shared) as u64 | OP_RECV;
            let cancel = opcode::AsyncCancel::new(recv).build().user_data(OP_IGNORE);
            self.ring.submit(&[cancel, close])
        } else {
            self.ring.submit(&[close])
        };
        let _ = r;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn echoes_through_a_ring_and_closes() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = vec![0u8; 100_000];
            s.read_exact(&mut buf).await.unwrap();
            s.write_all(&buf).await.unwrap();
            // The client's drop closes the socket: the server sees the end.
            let n = s.read(&mut [0u8; 16]).await.unwrap();
            assert_eq!(n, 0);
        });
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let fd = tcp.as_raw_fd();
        let mut s = RingStream::adopt(tcp).unwrap();
        // The descriptor is gone from this process's table.
        assert_eq!(unsafe { libc::fcntl(fd, libc::F_GETFD) }, -1);
        assert!(rings() >= 1);
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        s.write_all(&data).await.unwrap();
        s.flush().await.unwrap();
        let mut back = vec![0u8; data.len()];
        s.read_exact(&mut back).await.unwrap();
        assert_eq!(back, data);
        drop(s);
        tokio::time::timeout(std::time::Duration::from_secs(5), server)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn a_closed_peer_reads_as_the_end() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (peer, _) = l.accept().await.unwrap();
        let mut s = RingStream::adopt(tcp).unwrap();
        drop(peer);
        let mut buf = [0u8; 8];
        let n = tokio::time::timeout(std::time::Duration::from_secs(5), s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(n, 0);
    }

    /// A held stream's buffered read appends exactly what arrived: the reader's buffer holds
    /// the received bytes, not a chunk per connection; the peer's close reads as 0.
    #[tokio::test]
    async fn a_buffered_read_grows_the_buffer_by_what_arrived() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tcp = tokio::net::TcpStream::connect(l.local_addr().unwrap())
            .await
            .unwrap();
        let (mut peer, _) = l.accept().await.unwrap();
        let mut s = RingStream::adopt(tcp).unwrap();
        peer.write_all(&[7u8; 100]).await.unwrap();
        let mut buf = bytes::BytesMut::new();
        async fn read(s: &mut RingStream, buf: &mut bytes::BytesMut) -> io::Result<usize> {
            std::future::poll_fn(|cx| s.poll_read_buf(cx, buf)).await
        }
        let mut got = 0;
        while got < 100 {
            got += tokio::time::timeout(std::time::Duration::from_secs(5), read(&mut s, &mut buf))
                .await
                .unwrap()
                .unwrap();
        }
        assert_eq!(&buf[..], &[7u8; 100][..]);
        assert!(buf.capacity() < 256, "capacity {}", buf.capacity());
        drop(peer);
        let n = tokio::time::timeout(std::time::Duration::from_secs(5), read(&mut s, &mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(n, 0);
    }
}
