//! How many streams an HTTP/2 server lets a connection have open at once, read off the wire.
//!
//! hyper's HTTP/2 client queues the requests a server's `SETTINGS_MAX_CONCURRENT_STREAMS`
//! does not let out yet, without limit, and says nothing of the setting. For a load generator
//! that queue is a lie twice over: a request waiting in it counts as sent although the server
//! has not seen it, and its wait in the client counts in the server's latency (with the
//! default window of 1,000 against nginx's 128 streams, 22 ms of a 2.8 ms service). So the
//! connection's reads pass through [`Sniff`], which parses the server's first frame — always
//! its SETTINGS (RFC 9113 §3.4) — and publishes the limit in a [`Limit`]; producers send no
//! more than that many requests at once. After that first frame the reads pass through
//! untouched. Later SETTINGS that change the limit are not followed (servers send their
//! limit once). A server that answers the preface with an HTTP/1.x status line instead (one
//! that speaks only HTTP/1.1 on a cleartext port) is marked too, so the failure can say so.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The limit assumed until the server's SETTINGS arrive: the smallest RFC 9113 §6.5.2
/// recommends servers allow, so the first requests of a connection do not queue either.
pub const BEFORE_SETTINGS: u32 = 100;

/// A connection's stream limit, shared between its reader and its producer.
#[derive(Debug, Clone)]
pub struct Limit(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    /// The limit; 0 until the SETTINGS are read.
    streams: AtomicU32,
    /// The server answered with an HTTP/1.x status line.
    http1: AtomicBool,
}

impl Limit {
    fn new() -> Limit {
        Limit(Arc::new(Shared::default()))
    }

    /// The server's limit, or `None` before its SETTINGS were read. A SETTINGS frame without
    /// the setting means no limit (`u32::MAX`).
    pub fn get(&self) -> Option<u32> {
        match self.0.streams.load(Relaxed) {
            0 => None,
            n => Some(n),
        }
    }

    /// The number of requests to have in flight at most.
    pub fn streams(&self) -> usize {
        self.get().unwrap_or(BEFORE_SETTINGS) as usize
    }

    fn set(&self, n: u32) {
        // 0 (the server takes no streams for now) would read as "unknown": 1 keeps requests
        // going one at a time, and the server resets what it refuses.
        self.0.streams.store(n.max(1), Relaxed);
    }

    /// Whether the server answered the connection preface with an HTTP/1.x status line: it
    /// does not speak HTTP/2 on this port.
    pub fn answered_http1(&self) -> bool {
        self.0.http1.load(Relaxed)
    }
}

/// Where the parse of the first frame stands.
#[derive(Debug)]
enum State {
    /// Reading the 9-byte frame header: the bytes so far.
    Header([u8; 9], usize),
    /// Reading the SETTINGS payload: bytes left, and the 6-byte entry being read.
    Entries {
        left: usize,
        entry: [u8; 6],
        got: usize,
        limit: u32,
    },
    /// Done: reads pass through.
    Done,
}

/// A socket whose first received HTTP/2 frame is parsed for the stream limit as it goes by.
pub struct Sniff<S> {
    inner: S,
    state: State,
    limit: Limit,
}

impl<S> Sniff<S> {
    /// Wraps `inner`; the returned [`Limit`] fills in when the server's SETTINGS are read.
    pub fn new(inner: S) -> (Sniff<S>, Limit) {
        let limit = Limit::new();
        let sniff = Sniff {
            inner,
            state: State::Header([0; 9], 0),
            limit: limit.clone(),
        };
        (sniff, limit)
    }

    /// Feeds bytes just read to the parse.
    fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            match &mut self.state {
                State::Done => return,
                State::Header(head, got) => {
                    let n = (9 - *got).min(bytes.len());
                    head[*got..*got + n].copy_from_slice(&bytes[..n]);
                    (*got, bytes) = (*got + n, &bytes[n..]);
                    if *got < 9 {
                        return;
                    }
                    if head.starts_with(b"HTTP/1.") {
                        self.limit.0.http1.store(true, Relaxed);
                        self.state = State::Done;
                        return;
                    }
                    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
                    // Not a SETTINGS frame (type 4, no ACK flag) with whole entries: not a
                    // server preface; hyper will say what is wrong with it.
                    if head[3] != 4 || head[4] & 1 != 0 || !len.is_multiple_of(6) {
                        self.state = State::Done;
                        return;
                    }
                    self.state = State::Entries {
                        left: len,
                        entry: [0; 6],
                        got: 0,
                        limit: u32::MAX,
                    };
                }
                State::Entries {
                    left,
                    entry,
                    got,
                    limit,
                } => {
                    if *left == 0 {
                        self.limit.set(*limit);
                        self.state = State::Done;
                        return;
                    }
                    let n = (6 - *got).min(bytes.len());
                    entry[*got..*got + n].copy_from_slice(&bytes[..n]);
                    (*got, bytes) = (*got + n, &bytes[n..]);
                    if *got == 6 {
                        // SETTINGS_MAX_CONCURRENT_STREAMS is identifier 3.
                        if entry[..2] == [0, 3] {
                            *limit = u32::from_be_bytes([entry[2], entry[3], entry[4], entry[5]]);
                        }
                        (*left, *got) = (*left - 6, 0);
                    }
                }
            }
        }
        if let State::Entries { left: 0, limit, .. } = self.state {
            self.limit.set(limit);
            self.state = State::Done;
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Sniff<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if !matches!(this.state, State::Done) {
            this.feed(&buf.filled()[before..]);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Sniff<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(entries: &[(u16, u32)]) -> Vec<u8> {
        let len = entries.len() * 6;
        let mut f = vec![
            (len >> 16) as u8,
            (len >> 8) as u8,
            len as u8,
            4,
            0,
            0,
            0,
            0,
            0,
        ];
        for (id, v) in entries {
            f.extend_from_slice(&id.to_be_bytes());
            f.extend_from_slice(&v.to_be_bytes());
        }
        f
    }

    fn sniffed(bytes: &[u8], pieces: usize) -> Limit {
        let (mut s, limit) = Sniff::new(());
        let step = bytes.len().div_ceil(pieces).max(1);
        for chunk in bytes.chunks(step) {
            s.feed(chunk);
        }
        limit
    }

    #[test]
    fn the_limit_is_read_from_the_first_settings_in_any_pieces() {
        // nginx: MAX_CONCURRENT_STREAMS 128 between two other settings, then a WINDOW_UPDATE.
        let mut wire = settings(&[(4, 65_536), (3, 128), (5, 16_384)]);
        wire.extend_from_slice(&[0, 0, 4, 8, 0, 0, 0, 0, 0, 0, 0x7f, 0, 1]);
        for pieces in [1, 2, 5, 13, wire.len()] {
            assert_eq!(sniffed(&wire, pieces).get(), Some(128), "{pieces}");
        }
        assert_eq!(sniffed(&wire, 1).streams(), 128);
    }

    #[test]
    fn no_setting_means_no_limit_and_nothing_read_means_the_default() {
        assert_eq!(sniffed(&settings(&[(4, 1)]), 1).get(), Some(u32::MAX));
        assert_eq!(sniffed(&settings(&[]), 1).get(), Some(u32::MAX));
        assert_eq!(sniffed(&settings(&[(3, 0)]), 1).get(), Some(1));
        let partial = &settings(&[(3, 7)])[..12];
        let limit = sniffed(partial, 1);
        assert_eq!(limit.get(), None);
        assert_eq!(limit.streams(), BEFORE_SETTINGS as usize);
        // Not SETTINGS first (an HTTP/1.1 answer): no limit learnt, and the answer marked.
        for pieces in [1, 4, 9] {
            let limit = sniffed(b"HTTP/1.1 400 Bad Request\r\n\r\n", pieces);
            assert_eq!(limit.get(), None);
            assert!(limit.answered_http1(), "{pieces}");
        }
        assert!(!sniffed(&settings(&[(3, 7)]), 1).answered_http1());
    }

    #[test]
    fn later_settings_are_not_followed() {
        let mut wire = settings(&[(3, 50)]);
        wire.extend(settings(&[(3, 10)]));
        assert_eq!(sniffed(&wire, 3).get(), Some(50));
    }
}
