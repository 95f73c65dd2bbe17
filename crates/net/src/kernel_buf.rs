//! Buffers the kernel writes into while an io_uring operation is pending, and the receive half
//! both io_uring streams ([`crate::ring`] for held connections, [`crate::batch`] for batched
//! ones) build on: one buffer posted to the kernel at a time, its bytes handed out in order once
//! the receive completes, resized between receives to what the traffic needs.
//!
//! Safety rules (the callers keep them): no Rust reference to a [`Buf`]'s bytes exists while an
//! operation on it is pending, and a buffer is neither read, moved nor resized while its receive
//! is pending.

use std::io;
use std::task::{Context, Poll, Waker};
use tokio::io::ReadBuf;

/// A heap buffer the kernel may write into: a raw allocation, so that no Rust reference to its
/// bytes exists while an operation is pending.
pub(crate) struct Buf {
    pub(crate) ptr: *mut u8,
    pub(crate) cap: usize,
}

impl Buf {
    pub(crate) fn new(cap: usize) -> Buf {
        let b: Box<[u8]> = vec![0u8; cap].into_boxed_slice();
        Buf {
            ptr: Box::into_raw(b).cast::<u8>(),
            cap,
        }
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `cap` came from a boxed slice in `new`, dropped once here.
        unsafe {
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.ptr, self.cap,
            )))
        };
    }
}

// SAFETY: a Buf is a uniquely owned allocation; access is serialised by the stream's mutex and
// by the pending-operation rules in the module docs.
unsafe impl Send for Buf {}

/// A stream's receive half: the buffer, what of it is not yet handed out, and how the last
/// receive ended.
#[derive(Default)]
pub(crate) struct RecvSide {
    buf: Option<Buf>,
    /// Received bytes not yet handed out: `buf[start..end]`.
    start: usize,
    end: usize,
    /// A receive into `buf` is with the kernel.
    pub(crate) pending: bool,
    eof: bool,
    err: Option<i32>,
    pub(crate) waker: Option<Waker>,
}

impl RecvSide {
    /// What a read gets without a new receive: buffered bytes first, then the error or the
    /// end of stream that ended the last receive. `None`: a receive is needed (or pending).
    pub(crate) fn take(&mut self, out: &mut ReadBuf<'_>) -> Option<io::Result<()>> {
        if self.start < self.end {
            let n = out.remaining().min(self.end - self.start);
            let buf = self.buf.as_ref().expect("received bytes have a buffer");
            // SAFETY: no receive is pending (the bytes are complete), so nothing writes here.
            let src = unsafe { std::slice::from_raw_parts(buf.ptr.add(self.start), n) };
            out.put_slice(src);
            self.start += n;
            return Some(Ok(()));
        }
        if let Some(e) = self.err {
            return Some(Err(io::Error::from_raw_os_error(e)));
        }
        self.eof.then_some(Ok(()))
    }

    /// Like [`RecvSide::take`], but appends every buffered byte to `out`, which grows by exactly
    /// that much: `Ok(0)` is the end of stream. A reader that keeps no spare room of its own
    /// then holds only the bytes it has yet to parse (a partial frame, usually), not a chunk
    /// per connection beside the buffer posted to the kernel.
    pub(crate) fn take_into(&mut self, out: &mut bytes::BytesMut) -> Option<io::Result<usize>> {
        if self.start < self.end {
            let n = self.end - self.start;
            let buf = self.buf.as_ref().expect("received bytes have a buffer");
            // SAFETY: no receive is pending (the bytes are complete), so nothing writes here.
            out.extend_from_slice(unsafe {
                std::slice::from_raw_parts(buf.ptr.add(self.start), n)
            });
            self.start = self.end;
            return Some(Ok(n));
        }
        if let Some(e) = self.err {
            return Some(Err(io::Error::from_raw_os_error(e)));
        }
        self.eof.then_some(Ok(0))
    }

    /// Whether received bytes wait to be handed out.
    pub(crate) fn has_bytes(&self) -> bool {
        self.start < self.end
    }

    /// Keeps `cx`'s waker for the receive's completion (unless it is the one already kept).
    pub(crate) fn wait<T>(&mut self, cx: &Context<'_>) -> Poll<T> {
        if !self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            self.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    /// The buffer for the next receive, as `(pointer, length)`: every byte of the last one was
    /// handed out, so it may be resized. It doubles (up to `max`) after a receive that filled
    /// it, so a reader behind a busy peer catches up many messages per receive, and goes back
    /// to `initial` after one that took little. Marks the receive pending: the caller queues
    /// it, or calls [`RecvSide::not_queued`].
    pub(crate) fn next(&mut self, initial: usize, max: usize) -> (*mut u8, u32) {
        let want = match (self.buf.as_ref(), self.end) {
            (None, _) => initial,
            (Some(b), n) if n == b.cap => (b.cap * 2).min(max),
            (Some(b), n) if b.cap > initial && n < b.cap / 8 => initial,
            (Some(b), _) => b.cap,
        };
        if self.buf.as_ref().is_none_or(|b| b.cap != want) {
            self.buf = Some(Buf::new(want));
        }
        let buf = self.buf.as_ref().expect("just made");
        self.pending = true;
        (buf.ptr, buf.cap as u32)
    }

    /// The receive [`RecvSide::next`] prepared could not be queued.
    pub(crate) fn not_queued(&mut self) {
        self.pending = false;
    }

    /// Records a receive's result (`res` as the kernel gave it) and returns the waker to wake.
    /// A receive cancelled because its stream was dropped (`closed`) is no error.
    pub(crate) fn complete(&mut self, res: i32, closed: bool) -> Option<Waker> {
        self.pending = false;
        match res {
            n if n > 0 => (self.start, self.end) = (0, n as usize),
            0 => self.eof = true,
            e if e == -libc::ECANCELED && closed => {}
            e => self.err = Some(-e),
        }
        self.waker.take()
    }
}
