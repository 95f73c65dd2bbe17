//! The one body type of this crate's hyper code, for HTTP/2 requests (the runner's payload)
//! and for the built-in server's answers: zero or one chunk of [`Bytes`], with its exact
//! length known up front so hyper writes a `Content-Length` (HTTP/1.1 answers) or ends the
//! stream with the data (HTTP/2) instead of chunking. (HTTP/1.1 requests do not use it: the
//! client in `h1` copies the payload straight into its write buffer.)

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A body of at most one chunk.
#[derive(Debug, Default)]
pub struct Payload(Option<Bytes>);

impl Payload {
    /// A body holding `data` (an empty `data` makes an empty body).
    pub fn new(data: Bytes) -> Payload {
        if data.is_empty() {
            Payload(None)
        } else {
            Payload(Some(data))
        }
    }

    /// No body.
    pub fn empty() -> Payload {
        Payload(None)
    }
}

impl Body for Payload {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.take().map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.0.as_ref().map_or(0, |b| b.len() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_chunk_then_end() {
        let mut p = Payload::new(Bytes::from_static(b"abc"));
        assert_eq!(p.size_hint().exact(), Some(3));
        assert!(!p.is_end_stream());
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match Pin::new(&mut p).poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(f))) => assert_eq!(f.into_data().unwrap(), "abc"),
            other => panic!("{other:?}"),
        }
        assert!(p.is_end_stream());
        assert!(matches!(
            Pin::new(&mut p).poll_frame(&mut cx),
            Poll::Ready(None)
        ));
        assert!(Payload::new(Bytes::new()).is_end_stream());
    }
}
