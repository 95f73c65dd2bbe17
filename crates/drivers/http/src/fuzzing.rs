//! Entry point for the fuzz targets (`fuzz/`, `crates/fuzz-targets`): the response parser of
//! the HTTP/1.1 client is private, so this function drives it the way a connection does.
//! Hidden from the documentation; not an API. (The built-in server's request side is fuzzed
//! through `msgbench_serve::http::fuzzing`.)
//!
//! Contract: any byte string is a valid argument; the functions return normally for all of
//! them (a panic, hang or unbounded allocation is a bug in the code they drive).

use crate::h1::parse::{MAX_HEAD, Parser};

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
