//! Batched I/O for busy connections: the connections of one worker thread share one io_uring,
//! and their sends and receives go to the kernel together, in one system call per pass of the
//! worker's scheduler instead of one or two per message.
//!
//! Why: a closed-loop client (HTTP/1.1, MQTT QoS 1 with one message in flight, request/reply)
//! spends most of its CPU entering and leaving the kernel: a send, a receive and a share of an
//! `epoll_wait` per round trip, and on a machine shared with the system under test each send
//! that wakes the server may switch to it on the spot. Queued on a ring instead, the sends of
//! every connection whose response arrived in one pass leave in one `io_uring_enter`, and the
//! server gets them together too.
//!
//! How: a [`BatchStream`] queues its operations on its thread's ring without entering the
//! kernel, and the first one queued after a submission wakes the ring's driver task. That task
//! runs on the same worker behind the tasks already woken, so by the time it submits, every
//! connection served in this pass has queued its work. Completions are read from the ring's
//! memory by the same task, woken through the reactor when the ring's descriptor turns
//! readable; they wake the tasks waiting on them, on the same thread. Only msgbench's worker
//! threads (single-threaded runtimes) batch; elsewhere, or where io_uring cannot be set up,
//! connections stay on readiness polling ([`crate::Stream`]'s plain TCP), and the reason is
//! said once.
//!
//! Safety: as in [`crate::ring`], each pending operation owns a strong reference to the
//! stream's shared state (its pointer is the operation's `user_data`), so the buffers the
//! kernel reads or writes live until the completion, even when the stream is dropped first; no
//! code reads or moves a buffer while its operation is pending; and the socket's descriptor is
//! closed only when the last reference goes, so no queued operation can reach a reused one.

use crate::kernel_buf::{Buf, RecvSide};
use io_uring::{IoUring, opcode, squeue, types};
use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Waker};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Operation kinds, in the low bits of `user_data` (the rest is a pointer).
const OP_RECV: u64 = 1;
const OP_SEND: u64 = 2;
const OP_IGNORE: u64 = 4;
const OP_MASK: u64 = 7;
/// Receive buffer per stream to begin with: a response or a few acknowledgements.
const READ_BUF: usize = 2 * 1024;
/// A stream whose receives fill their buffer gets a larger one, up to this (a consumer behind
/// a busy broker takes many messages per completion); one whose receives take little goes back
/// to [`READ_BUF`]. Buffers are only resized between receives.
const READ_BUF_MAX: usize = 64 * 1024;
/// Write buffer per stream to begin with.
const WRITE_BUF: usize = 4 * 1024;
/// A write larger than the buffer, arriving while nothing is queued, grows it up to this: as
/// large as the producers' batches, so a batch is one send.
const WRITE_BUF_MAX: usize = 64 * 1024;
/// Submission queue entries per ring (a full queue is submitted on the spot).
const SQ_ENTRIES: u32 = 1024;

/// Whether new plain TCP client connections batch their I/O (set once by the run).
static ENABLED: AtomicBool = AtomicBool::new(false);
/// Why batching is off in this process, once found (said once).
static UNAVAILABLE: OnceLock<String> = OnceLock::new();

/// Turns batched I/O on or off for connections made from now on.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether batched I/O is on.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Why batched I/O was asked for and could not be had (io_uring refused), if it was.
pub fn unavailable() -> Option<&'static str> {
    UNAVAILABLE.get().map(String::as_str)
}

/// A stream's state, shared between its owner and its ring's driver.
#[derive(Default)]
struct State {
    recv: RecvSide,
    wbuf: Option<Buf>,
    /// Bytes written and not yet sent: `wbuf[w_off..w_len]`; while a send is pending it covers
    /// `wbuf[w_off..w_sending]` and writes append after `w_len`.
    w_off: usize,
    w_sending: usize,
    w_len: usize,
    w_pending: bool,
    w_err: Option<i32>,
    w_waker: Option<Waker>,
    closed: bool,
}

struct Shared {
    fd: RawFd,
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Shared {
    /// The last reference: no operation is pending, so the descriptor may go.
    fn drop(&mut self) {
        // SAFETY: the descriptor is this struct's own, closed exactly once, here.
        unsafe { libc::close(self.fd) };
    }
}

/// One worker thread's ring.
struct LocalRing {
    uring: IoUring,
    /// Serialises the submission queue (a stream may be polled off its ring's thread).
    sq: Mutex<()>,
    /// Serialises the completion queue.
    cq: Mutex<Vec<(u64, i32)>>,
    /// The driver has been woken and has not submitted yet.
    scheduled: AtomicBool,
    driver: Mutex<Option<Waker>>,
    /// The driver task is gone (its runtime shut down): the thread needs a new ring.
    dead: AtomicBool,
}

impl LocalRing {
    /// Queues `e` (submitting the queue first if it is full) and makes sure the driver will
    /// submit it.
    fn push(&self, e: &squeue::Entry) -> io::Result<()> {
        {
            let _g = self.sq.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                // SAFETY: the `sq` mutex makes this the only submission queue handle; every
                // entry's buffers outlive the operation (module docs).
                if unsafe { self.uring.submission_shared().push(e) }.is_ok() {
                    break;
                }
                match self.uring.submitter().submit() {
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        if !self.scheduled.swap(true, Ordering::AcqRel)
            && let Some(w) = self
                .driver
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
        {
            w.wake_by_ref();
        }
        Ok(())
    }

    /// Hands everything queued to the kernel (one system call, none when nothing is queued).
    fn submit(&self) {
        let _g = self.sq.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: the `sq` mutex makes this the only submission queue handle.
        if unsafe { self.uring.submission_shared().is_empty() } {
            return;
        }
        loop {
            match self.uring.submitter().submit() {
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                // EBUSY (completions overflowing) clears once they are reaped, next pass.
                _ => return,
            }
        }
    }

    /// Takes every completion there is and completes it; how many.
    fn reap(&self) -> usize {
        let mut done = self.cq.lock().unwrap_or_else(|p| p.into_inner());
        {
            // SAFETY: the `cq` mutex makes this the only completion queue handle.
            let cq = unsafe { self.uring.completion_shared() };
            done.extend(cq.map(|c| (c.user_data(), c.result())));
        }
        let n = done.len();
        for (ud, res) in done.drain(..) {
            self.complete(ud, res);
        }
        n
    }

    fn complete(&self, ud: u64, res: i32) {
        let op = ud & OP_MASK;
        if op != OP_RECV && op != OP_SEND {
            return;
        }
        // SAFETY: the pointer was made by `Arc::into_raw` for this one operation.
        let sh = unsafe { Arc::from_raw((ud & !OP_MASK) as *const Shared) };
        let mut st = sh.lock();
        let waker = if op == OP_RECV {
            let closed = st.closed;
            st.recv.complete(res, closed)
        } else {
            st.w_pending = false;
            if res < 0 {
                st.w_err = Some(-res);
            } else {
                st.w_off += res as usize;
                if st.w_off < st.w_len {
                    // The rest of this send, and whatever was written behind it.
                    if let Err(e) = self.send(&sh, &mut st) {
                        st.w_err = Some(e.raw_os_error().unwrap_or(libc::EIO));
                    }
                } else {
                    (st.w_off, st.w_len) = (0, 0);
                }
            }
            st.w_waker.take()
        };
        drop(st);
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Queues the send of `wbuf[w_off..w_len]`.
    fn send(&self, sh: &Arc<Shared>, st: &mut State) -> io::Result<()> {
        let buf = st.wbuf.as_ref().expect("a send has a buffer");
        // SAFETY: `w_off < w_len <= cap`; the buffer lives while `sh` does (module docs).
        let ptr = unsafe { buf.ptr.add(st.w_off) };
        let e = opcode::Send::new(types::Fd(sh.fd), ptr, (st.w_len - st.w_off) as u32);
        self.push_owned(sh, OP_SEND, e.build())?;
        st.w_sending = st.w_len;
        st.w_pending = true;
        Ok(())
    }

    /// Queues a receive into the whole receive buffer (every byte of the last one was taken,
    /// so the buffer may be resized to what the last receive suggests).
    fn recv(&self, sh: &Arc<Shared>, st: &mut State) -> io::Result<()> {
        let (ptr, len) = st.recv.next(READ_BUF, READ_BUF_MAX);
        let e = opcode::Recv::new(types::Fd(sh.fd), ptr, len);
        self.push_owned(sh, OP_RECV, e.build())
            .inspect_err(|_| st.recv.not_queued())
    }

    /// Queues an operation on `sh`'s buffers, carrying a strong reference to `sh` as its
    /// `user_data` (taken back by the completion, or here if it could not be queued).
    fn push_owned(&self, sh: &Arc<Shared>, op: u64, e: squeue::Entry) -> io::Result<()> {
        let ud = Arc::into_raw(sh.clone()) as u64 | op;
        self.push(&e.user_data(ud)).inspect_err(|_| {
            // SAFETY: the operation was not queued; take back its reference.
            drop(unsafe { Arc::from_raw((ud & !OP_MASK) as *const Shared) });
        })
    }
}

/// A ring as the reactor sees it: its descriptor, open as long as this reference lives.
struct RingFd(Arc<LocalRing>);

impl AsRawFd for RingFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.uring.as_raw_fd()
    }
}

/// The task that submits a ring's queue and completes its operations.
struct Driver {
    ring: Arc<LocalRing>,
    ready: AsyncFd<RingFd>,
}

impl Future for Driver {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        {
            let mut w = this.ring.driver.lock().unwrap_or_else(|p| p.into_inner());
            if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *w = Some(cx.waker().clone());
            }
        }
        loop {
            // Readiness first, so completions posted after the reap below wake us again.
            let ready = match this.ready.poll_read_ready(cx) {
                Poll::Ready(Ok(mut g)) => {
                    g.clear_ready();
                    true
                }
                Poll::Ready(Err(_)) => return Poll::Ready(()),
                Poll::Pending => false,
            };
            this.ring.scheduled.store(false, Ordering::Release);
            this.ring.submit();
            this.ring.reap();
            if !ready {
                return Poll::Pending;
            }
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.ring.dead.store(true, Ordering::Release);
    }
}

thread_local! {
    /// This thread's ring, once made.
    static LOCAL: RefCell<Option<Arc<LocalRing>>> = const { RefCell::new(None) };
}

/// This thread's ring, made (with its driver) on first use; `None` off a single-threaded
/// runtime or where io_uring cannot be set up (said once).
fn local_ring() -> Option<Arc<LocalRing>> {
    if UNAVAILABLE.get().is_some() {
        return None;
    }
    let handle = tokio::runtime::Handle::try_current().ok()?;
    if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread {
        return None;
    }
    LOCAL.with(|l| {
        let mut l = l.borrow_mut();
        if let Some(r) = l.as_ref().filter(|r| !r.dead.load(Ordering::Acquire)) {
            return Some(r.clone());
        }
        match make_ring(&handle) {
            Ok(r) => {
                *l = Some(r.clone());
                Some(r)
            }
            Err(e) => {
                let why = format!(
                    "io_uring is unavailable ({e}): connections use readiness polling (epoll), \
                     one system call per send and receive"
                );
                if UNAVAILABLE.set(why.clone()).is_ok() {
                    eprintln!("msgbench: {why}");
                }
                None
            }
        }
    })
}

fn make_ring(handle: &tokio::runtime::Handle) -> io::Result<Arc<LocalRing>> {
    // Cooperative task running: a completion that arrives while the worker runs does not
    // interrupt it (an inter-processor interrupt per receive otherwise); it is run at the
    // worker's next system call. Before Linux 5.19 the ring is made without it.
    let uring = IoUring::builder()
        .setup_cqsize(SQ_ENTRIES * 8)
        .setup_coop_taskrun()
        .setup_taskrun_flag()
        .build(SQ_ENTRIES)
        .or_else(|_| {
            IoUring::builder()
                .setup_cqsize(SQ_ENTRIES * 8)
                .build(SQ_ENTRIES)
        })?;
    let ring = Arc::new(LocalRing {
        uring,
        sq: Mutex::new(()),
        cq: Mutex::new(Vec::with_capacity(256)),
        scheduled: AtomicBool::new(false),
        driver: Mutex::new(None),
        dead: AtomicBool::new(false),
    });
    let _guard = handle.enter();
    // SAFETY: the descriptor is the ring's, and `RingFd` holds the ring (so the descriptor
    // stays open and the same) for as long as the registration lives.
    let ready = unsafe {
        AsyncFd::register_with_interest(RingFd(ring.clone()), tokio::io::Interest::READABLE)
    }
    .map_err(io::Error::from)?;
    handle.spawn(Driver {
        ring: ring.clone(),
        ready,
    });
    Ok(ring)
}

/// A connected TCP socket whose I/O goes through its worker thread's ring (module docs).
pub struct BatchStream {
    shared: Arc<Shared>,
    ring: Arc<LocalRing>,
    local: SocketAddr,
}

impl std::fmt::Debug for BatchStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchStream")
            .field("fd", &self.shared.fd)
            .field("local", &self.local)
            .finish()
    }
}

impl BatchStream {
    /// Takes over a connected socket, or gives it back (`Ok(Err(tcp))`) when this thread
    /// cannot batch.
    pub(crate) fn adopt(
        tcp: tokio::net::TcpStream,
    ) -> io::Result<Result<BatchStream, tokio::net::TcpStream>> {
        let Some(ring) = local_ring() else {
            return Ok(Err(tcp));
        };
        let local = tcp.local_addr()?;
        // Out of the reactor: from now on only the ring does I/O on this socket.
        let std = tcp.into_std()?;
        Ok(Ok(BatchStream {
            shared: Arc::new(Shared {
                fd: std.into_raw_fd(),
                state: Mutex::new(State::default()),
            }),
            ring,
            local,
        }))
    }

    /// The socket's descriptor (for its kernel counters at close).
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.shared.fd
    }

    /// The local address the connection was made from.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Back to a reactor-driven socket, for a protocol that switches to TLS: only while nothing
    /// is pending or buffered, else the stream comes back unchanged.
    pub(crate) fn into_tcp(self) -> Result<tokio::net::TcpStream, BatchStream> {
        {
            let st = self.shared.lock();
            if st.recv.pending || st.w_pending || st.recv.has_bytes() || st.w_len > 0 {
                drop(st);
                return Err(self);
            }
        }
        // SAFETY: dup returns a new descriptor of our own (or -1, checked).
        let fd = unsafe { libc::dup(self.shared.fd) };
        if fd < 0 {
            return Err(self);
        }
        // SAFETY: `fd` is a fresh descriptor owned by nothing else.
        let std = unsafe { std::net::TcpStream::from_raw_fd(fd) };
        match tokio::net::TcpStream::from_std(std) {
            Ok(t) => Ok(t),
            Err(_) => Err(self),
        }
    }

    fn error(e: i32) -> io::Error {
        io::Error::from_raw_os_error(e)
    }
}

impl AsyncRead for BatchStream {
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
        // A look without waiting keeps the waker of the task's real wait.
        if crate::just_looking(cx) {
            return Poll::Pending;
        }
        st.recv.wait(cx)
    }
}

impl AsyncWrite for BatchStream {
    /// Copies what fits into the write buffer and queues its send (or lets it ride behind the
    /// send in progress); pending only while the buffer is full.
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let mut st = this.shared.lock();
        if let Some(e) = st.w_err {
            return Poll::Ready(Err(Self::error(e)));
        }
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if !st.w_pending && st.w_len == 0 {
            // Nothing queued: the buffer may be replaced, as large as this write needs.
            let cap = st.wbuf.as_ref().map_or(0, |b| b.cap);
            if cap < data.len().min(WRITE_BUF_MAX) || cap == 0 {
                let want = data
                    .len()
                    .next_power_of_two()
                    .clamp(WRITE_BUF, WRITE_BUF_MAX);
                st.wbuf = Some(Buf::new(want.max(cap)));
            }
        }
        let buf = st.wbuf.as_ref().expect("made when the first write came");
        let (cap, ptr) = (buf.cap, buf.ptr);
        let n = data.len().min(cap - st.w_len);
        if n == 0 {
            if !st.w_waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                st.w_waker = Some(cx.waker().clone());
            }
            return Poll::Pending;
        }
        // SAFETY: `w_len + n <= cap`, and bytes at `w_len` and after are not part of any
        // pending send (a pending send covers `w_off..w_sending`, `w_sending <= w_len`).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr.add(st.w_len), n) };
        st.w_len += n;
        if !st.w_pending {
            this.ring.send(&this.shared, &mut st)?;
        }
        Poll::Ready(Ok(n))
    }

    /// A queued send is in the kernel's hands, as a written socket buffer is: flushing waits
    /// for nothing (an error shows at the next write).
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.shared.lock().w_err {
            Some(e) => Poll::Ready(Err(Self::error(e))),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut st = self.shared.lock();
        if let Some(e) = st.w_err {
            return Poll::Ready(Err(Self::error(e)));
        }
        // io_uring does not order a shutdown after a queued send: wait for the sends.
        if st.w_pending {
            st.w_waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        drop(st);
        // SAFETY: a plain call on our own descriptor.
        if unsafe { libc::shutdown(self.shared.fd, libc::SHUT_WR) } < 0 {
            return Poll::Ready(Err(io::Error::last_os_error()));
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for BatchStream {
    /// Cancels the pending receive; a queued send still goes out, and the socket closes after
    /// the last operation on it (so a goodbye written just before leaves before the FIN).
    fn drop(&mut self) {
        let recv_pending = {
            let mut st = self.shared.lock();
            st.closed = true;
            st.recv.waker = None;
            st.w_waker = None;
            st.recv.pending
        };
        if recv_pending {
            let recv = Arc::as_ptr(&self.shared) as u64 | OP_RECV;
            let cancel = opcode::AsyncCancel::new(recv).build().user_data(OP_IGNORE);
            let _ = self.ring.push(&cancel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Adopts a fresh client connection to `addr` (this test's runtime is single-threaded).
    async fn batched(addr: SocketAddr) -> BatchStream {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        BatchStream::adopt(tcp)
            .unwrap()
            .expect("a current-thread runtime batches")
    }

    #[tokio::test]
    async fn echoes_through_the_ring_and_closes_after_the_last_send() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = vec![0u8; 300_000];
            s.read_exact(&mut buf).await.unwrap();
            s.write_all(&buf).await.unwrap();
            // A goodbye written just before the drop still arrives, then the end.
            let mut bye = [0u8; 3];
            s.read_exact(&mut bye).await.unwrap();
            assert_eq!(&bye, b"bye");
            assert_eq!(s.read(&mut [0u8; 16]).await.unwrap(), 0);
        });
        let mut s = batched(addr).await;
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let (mut rd, mut wr) = tokio::io::split(s);
        let writer = async {
            wr.write_all(&data).await.unwrap();
            wr
        };
        let reader = async {
            let mut back = vec![0u8; data.len()];
            rd.read_exact(&mut back).await.unwrap();
            assert!(back == data, "the echo differs");
            rd
        };
        let (wr, rd) = tokio::join!(writer, reader);
        s = rd.unsplit(wr);
        s.write_all(b"bye").await.unwrap();
        drop(s);
        tokio::time::timeout(std::time::Duration::from_secs(5), server)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn a_closed_peer_reads_as_the_end_and_writes_fail() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut s = batched(l.local_addr().unwrap()).await;
        let (peer, _) = l.accept().await.unwrap();
        drop(peer);
        let mut buf = [0u8; 8];
        let n = tokio::time::timeout(std::time::Duration::from_secs(5), s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(n, 0);
        let mut failed = false;
        for _ in 0..100 {
            if s.write_all(&[0u8; 1024]).await.is_err() {
                failed = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert!(failed, "writes to a closed peer kept succeeding");
    }

    #[tokio::test]
    async fn many_connections_take_turns_in_one_ring() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut b = [0u8; 8];
                    while s.read_exact(&mut b).await.is_ok() {
                        s.write_all(&b).await.unwrap();
                    }
                });
            }
        });
        let mut clients = Vec::new();
        for c in 0..20u64 {
            let mut s = batched(addr).await;
            clients.push(tokio::spawn(async move {
                for i in 0..200u64 {
                    let v = (c << 32 | i).to_le_bytes();
                    s.write_all(&v).await.unwrap();
                    let mut b = [0u8; 8];
                    s.read_exact(&mut b).await.unwrap();
                    assert_eq!(b, v);
                }
            }));
        }
        for c in clients {
            tokio::time::timeout(std::time::Duration::from_secs(10), c)
                .await
                .unwrap()
                .unwrap();
        }
    }

    /// A response that comes while the worker sleeps wakes it at once: completions are not left
    /// for the worker's next system call (cooperative task running must not mean late).
    #[tokio::test]
    async fn a_late_response_wakes_a_sleeping_worker() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            let (mut s, _) = l.accept().unwrap();
            let mut b = [0u8; 1];
            while s.read_exact(&mut b).is_ok() {
                std::thread::sleep(std::time::Duration::from_millis(20));
                s.write_all(&b).unwrap();
            }
        });
        let mut s = batched(addr).await;
        let mut worst = std::time::Duration::ZERO;
        for i in 0..10u8 {
            let t = std::time::Instant::now();
            s.write_all(&[i]).await.unwrap();
            let mut b = [0u8; 1];
            s.read_exact(&mut b).await.unwrap();
            assert_eq!(b[0], i);
            worst = worst.max(t.elapsed());
        }
        assert!(
            worst < std::time::Duration::from_millis(500),
            "a round trip with a 20 ms server took {worst:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_work_stealing_runtime_keeps_the_socket() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tcp = tokio::net::TcpStream::connect(l.local_addr().unwrap())
            .await
            .unwrap();
        assert!(BatchStream::adopt(tcp).unwrap().is_err());
    }
}
