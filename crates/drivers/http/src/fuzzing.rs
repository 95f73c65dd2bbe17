//! Entry points for the fuzz targets (`fuzz/`, `crates/fuzz-targets`): the response parser of
//! the HTTP/1.1 client and the request side of the built-in server are private, so these
//! functions drive them the way a connection does. Hidden from the documentation; not an API.
//!
//! Contract: any byte string is a valid argument; the functions return normally for all of
//! them (a panic, hang or unbounded allocation is a bug in the code they drive).

use crate::h1::parse::{MAX_HEAD, Parser};
use crate::server::{HttpServer, MAX_CONCURRENT_STREAMS};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Feeds `wire` to the client's response parser as a connection does: it arrives in pieces of
/// `piece` bytes (0: all at once) appended to a read buffer that loses what the parser
/// consumes; `head_only` as for responses to HEAD. Returns the statuses of the complete
/// responses (then of the one the end of the stream completes, if any).
pub fn h1_responses(wire: &[u8], piece: usize, head_only: bool) -> Vec<u16> {
    let mut parser = Parser::new();
    let mut buf = Vec::new();
    let mut statuses = Vec::new();
    let piece = if piece == 0 { wire.len().max(1) } else { piece };
    for chunk in wire.chunks(piece) {
        buf.extend_from_slice(chunk);
        loop {
            match parser.parse(&buf, head_only) {
                Ok((n, done)) => {
                    assert!(n <= buf.len(), "the parser consumed more than it was given");
                    buf.drain(..n);
                    match done {
                        Some(r) => statuses.push(r.status),
                        None => break,
                    }
                }
                Err(_) => return statuses,
            }
        }
        // A connection refuses a head that cannot fit its buffer; the parser must have said so.
        assert!(
            buf.len() <= MAX_HEAD + piece,
            "the parser buffered an oversized head"
        );
    }
    statuses.extend(parser.eof().map(|r| r.status));
    statuses
}

/// Serves one connection of the built-in server (HTTP/1.1 or h2c, chosen by hyper-util as for
/// a real client) whose client sends `request`, closes its side and reads every answer.
/// Returns the bytes the server answered.
///
/// # Panics
/// If the connection is not over within 10 s of the client closing its side: a server must
/// not wait forever on a client that has gone.
pub fn server_connection(request: &[u8]) -> Vec<u8> {
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime");
    }
    RUNTIME.with(|rt| {
        rt.block_on(async {
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder
                .http2()
                .max_concurrent_streams(MAX_CONCURRENT_STREAMS);
            let answer = HttpServer::new().with_body(&b"ok"[..]).answer();
            let (client, server) = tokio::io::duplex(64 * 1024);
            let conn = async move {
                let _ = builder.serve_connection(TokioIo::new(server), answer).await;
            };
            let talk = async move {
                let mut out = Vec::new();
                let (mut rd, mut wr) = tokio::io::split(client);
                let send = async {
                    let _ = wr.write_all(request).await;
                    let _ = wr.shutdown().await;
                };
                let read = async {
                    let _ = rd.read_to_end(&mut out).await;
                };
                tokio::join!(send, read);
                out
            };
            let both = async { tokio::join!(conn, talk).1 };
            tokio::time::timeout(Duration::from_secs(10), both)
                .await
                .expect("the server connection outlived its client by 10 s")
        })
    })
}
