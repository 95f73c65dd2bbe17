//! HTTP/1.1 response framing: where each response ends in the byte stream, and what it says
//! about the connection. Heads go through `httparse`; bodies are delimited (Content-Length,
//! chunked, or the end of the connection) and skipped, never stored.
//!
//! The parser is fed whatever bytes have arrived and says how many it consumed, so the
//! connection can read into one reusable buffer: a body (chunk framing included) is consumed
//! as it arrives, split anywhere; only a head must be whole before it is consumed.

use crate::conn::Error;
use httparse::{Header, ParserConfig, Status};
use std::mem::MaybeUninit;

/// The largest response head accepted (status line and headers).
pub(crate) const MAX_HEAD: usize = 64 * 1024;

/// The most headers a response head may carry.
const MAX_HEADERS: usize = 100;

/// A complete response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Response {
    /// Its status (a final one: interim 1xx responses are skipped).
    pub status: u16,
    /// The connection ends after it, in good order (`Connection: close`, HTTP/1.0 without
    /// keep-alive, a body delimited by the end of the connection, 101).
    pub last: bool,
    /// The server's `Keep-Alive: timeout=N` (seconds it keeps an idle connection open;
    /// Apache, Node.js and lighttpd say it), 0 without one.
    pub idle_s: u32,
}

/// Where the parser is in the byte stream of a chunked body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Hex digits of a chunk size: the value so far and whether any digit was seen.
    Size(u64, bool),
    /// After the size (kept): whitespace and extensions, ignored up to the CR.
    Ext(u64),
    /// The LF ending a size line (of a chunk of this size).
    SizeLf(u64),
    /// Data bytes still to skip in the current chunk.
    Data(u64),
    /// The CRLF after a chunk's data.
    DataCr,
    DataLf,
    /// At the start of a trailer line, or of the empty line that ends the body.
    Trailer,
    /// Inside a trailer field, skipped up to its LF.
    TrailerLine,
    /// The LF of the final empty line.
    EndLf,
}

/// How the body being read is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    /// This many bytes still to come.
    Length(u64),
    Chunked(Chunk),
    /// Everything until the server closes the connection.
    UntilClose,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for a (final or interim) response head.
    Head,
    /// Reading the body of a response with this status and connection fate.
    Body(Body, Response),
}

/// Parses the responses of one connection, one after the other.
#[derive(Debug)]
pub(crate) struct Parser {
    state: State,
}

/// What a head says about the response it starts.
enum Head {
    /// 1xx other than 101: another head follows.
    Interim,
    /// The final head: the response, and its body unless it has none.
    Final(Response, Option<Body>),
}

impl Parser {
    pub fn new() -> Parser {
        Parser { state: State::Head }
    }

    /// Consumes what it can of `buf`, the bytes received so far of the response to a request
    /// (`head_only`: a HEAD request, whose response has no body). Returns how many bytes were
    /// consumed, and the response once it is complete; the parser is then ready for the next
    /// response and the bytes after it are left unconsumed. An incomplete head is not
    /// consumed: it must be offered again, with more bytes, on the next call.
    pub fn parse(
        &mut self,
        buf: &[u8],
        head_only: bool,
    ) -> Result<(usize, Option<Response>), Error> {
        let mut pos = 0;
        loop {
            match self.state {
                State::Head => match parse_head(&buf[pos..], head_only)? {
                    None => return Ok((pos, None)),
                    Some((n, Head::Interim)) => pos += n,
                    Some((n, Head::Final(resp, None))) => return Ok((pos + n, Some(resp))),
                    Some((n, Head::Final(resp, Some(body)))) => {
                        pos += n;
                        self.state = State::Body(body, resp);
                    }
                },
                State::Body(mut body, resp) => {
                    let (n, complete) = skip_body(&mut body, &buf[pos..])?;
                    pos += n;
                    if complete {
                        self.state = State::Head;
                        return Ok((pos, Some(resp)));
                    }
                    self.state = State::Body(body, resp);
                    return Ok((pos, None));
                }
            }
        }
    }

    /// The server closed the connection: the response being read is complete if its body
    /// runs until the close, else it is cut off (`None`).
    pub fn eof(&mut self) -> Option<Response> {
        match std::mem::replace(&mut self.state, State::Head) {
            State::Body(Body::UntilClose, resp) => Some(resp),
            _ => None,
        }
    }
}

fn malformed(e: httparse::Error) -> Error {
    Error::Parse(match e {
        httparse::Error::Status | httparse::Error::Version => "malformed status line",
        httparse::Error::TooManyHeaders => "too many headers",
        _ => "malformed header",
    })
}

/// Whether `buf` starts with an HTTP/2 connection-level frame a server sends first (SETTINGS,
/// or GOAWAY when it rejects the connection): a frame header with a small length, type 4 or 7
/// and stream 0. An HTTP/1.1 response starts with `HTTP/`, so the two are never confused.
pub(crate) fn looks_like_h2(buf: &[u8]) -> bool {
    buf.len() >= 9 && buf[0] == 0 && matches!(buf[3], 4 | 7) && buf[5..9] == [0, 0, 0, 0]
}

/// Whether `buf` starts with a TLS record a server sends to a plain-text request: an alert
/// (type 21; most servers) or a handshake (22), version 3.x. `HTTP/` starts with 0x48.
pub(crate) fn looks_like_tls(buf: &[u8]) -> bool {
    buf.len() >= 3 && matches!(buf[0], 0x15 | 0x16) && buf[1] == 3 && buf[2] <= 4
}

/// Parses one head at the start of `buf`: `None` if it is not complete yet.
fn parse_head(buf: &[u8], head_only: bool) -> Result<Option<(usize, Head)>, Error> {
    let mut slots = [const { MaybeUninit::<Header<'_>>::uninit() }; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut []);
    let len = match ParserConfig::default()
        .parse_response_with_uninit_headers(&mut resp, buf, &mut slots)
    {
        Ok(Status::Complete(len)) => len,
        Ok(Status::Partial) if buf.len() >= MAX_HEAD => {
            return Err(Error::Parse("response head too large"));
        }
        Ok(Status::Partial) => return Ok(None),
        Err(_) if looks_like_h2(buf) => return Err(Error::Http2Only),
        Err(_) if looks_like_tls(buf) => return Err(Error::TlsOnly),
        Err(e) => return Err(malformed(e)),
    };
    let status = match resp.code {
        Some(code) if code >= 100 => code,
        _ => return Err(Error::Parse("malformed status line")),
    };
    if status < 200 && status != 101 {
        return Ok(Some((len, Head::Interim)));
    }
    let http10 = resp.version == Some(0);
    let (mut close, mut keep_alive, mut idle_s) = (false, false, 0);
    let (mut length, mut encoded, mut chunked) = (None::<u64>, false, false);
    for h in resp.headers.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            for part in h.value.split(|&b| b == b',') {
                let n = decimal(trim(part)).ok_or(Error::Parse("invalid content-length"))?;
                if length.is_some_and(|l| l != n) {
                    return Err(Error::Parse("conflicting content-length"));
                }
                length = Some(n);
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            // The last coding applied decides: chunked framing only if it is "chunked".
            encoded = true;
            let last = h.value.rsplit(|&b| b == b',').next().unwrap_or_default();
            chunked = trim(last).eq_ignore_ascii_case(b"chunked");
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in h.value.split(|&b| b == b',').map(trim) {
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case(b"keep-alive") {
            for param in h.value.split(|&b| b == b',').map(trim) {
                if let Some(v) = param
                    .split_at_checked(8)
                    .filter(|(k, _)| k.eq_ignore_ascii_case(b"timeout="))
                    .and_then(|(_, v)| decimal(trim(v)))
                {
                    idle_s = v.min(u32::MAX as u64) as u32;
                }
            }
        }
    }
    let body = if head_only || matches!(status, 101 | 204 | 304) {
        None
    } else if encoded {
        // Transfer-Encoding overrides Content-Length; a coding other than chunked runs until
        // the connection closes.
        Some(if chunked {
            Body::Chunked(Chunk::Size(0, false))
        } else {
            Body::UntilClose
        })
    } else {
        match length {
            Some(0) => None,
            Some(n) => Some(Body::Length(n)),
            None => Some(Body::UntilClose),
        }
    };
    let last =
        close || (http10 && !keep_alive) || status == 101 || matches!(body, Some(Body::UntilClose));
    let response = Response {
        status,
        last,
        idle_s,
    };
    Ok(Some((len, Head::Final(response, body))))
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// A non-empty string of decimal digits that fits a u64.
fn decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.iter().try_fold(0u64, |n, &b| {
        let d = (b as char).to_digit(10)?;
        n.checked_mul(10)?.checked_add(u64::from(d))
    })
}

/// Skips what `buf` holds of a body: bytes consumed and whether the body ended.
fn skip_body(body: &mut Body, buf: &[u8]) -> Result<(usize, bool), Error> {
    match body {
        Body::Length(left) => {
            let n = (*left).min(buf.len() as u64);
            *left -= n;
            Ok((n as usize, *left == 0))
        }
        Body::UntilClose => Ok((buf.len(), false)),
        Body::Chunked(state) => skip_chunked(state, buf),
    }
}

/// The chunked framing, byte by byte (data in bulk), so a chunk may be cut anywhere.
fn skip_chunked(state: &mut Chunk, buf: &[u8]) -> Result<(usize, bool), Error> {
    const BAD_SIZE: Error = Error::Parse("invalid chunk size");
    let mut pos = 0;
    while pos < buf.len() {
        if let Chunk::Data(left) = state {
            let n = (*left).min((buf.len() - pos) as u64);
            *left -= n;
            pos += n as usize;
            if *left == 0 {
                *state = Chunk::DataCr;
            }
            continue;
        }
        let b = buf[pos];
        pos += 1;
        *state = match (*state, b) {
            (Chunk::Size(n, _), b) if b.is_ascii_hexdigit() => {
                if n >> 60 != 0 {
                    return Err(BAD_SIZE);
                }
                let d = (b as char).to_digit(16).unwrap_or_default();
                Chunk::Size(n << 4 | u64::from(d), true)
            }
            (Chunk::Size(n, true), b'\r') => Chunk::SizeLf(n),
            (Chunk::Size(n, true), b' ' | b'\t' | b';') => Chunk::Ext(n),
            (Chunk::Size(..), _) => return Err(BAD_SIZE),
            (Chunk::Ext(n), b'\r') => Chunk::SizeLf(n),
            (Chunk::Ext(_), b'\n') => return Err(Error::Parse("invalid chunk extension")),
            (Chunk::Ext(n), _) => Chunk::Ext(n),
            (Chunk::SizeLf(0), b'\n') => Chunk::Trailer,
            (Chunk::SizeLf(n), b'\n') => Chunk::Data(n),
            (Chunk::SizeLf(_), _) => return Err(BAD_SIZE),
            (Chunk::DataCr, b'\r') => Chunk::DataLf,
            (Chunk::DataLf, b'\n') => Chunk::Size(0, false),
            (Chunk::DataCr | Chunk::DataLf, _) => {
                return Err(Error::Parse("chunk data not followed by CRLF"));
            }
            (Chunk::Trailer, b'\r') => Chunk::EndLf,
            (Chunk::Trailer, b'\n') => return Err(Error::Parse("malformed chunked trailer")),
            (Chunk::TrailerLine, b'\n') => Chunk::Trailer,
            (Chunk::Trailer | Chunk::TrailerLine, _) => Chunk::TrailerLine,
            (Chunk::EndLf, b'\n') => return Ok((pos, true)),
            (Chunk::EndLf, _) => return Err(Error::Parse("malformed end of chunked body")),
            (Chunk::Data(_), _) => unreachable!("data is skipped in bulk above"),
        };
    }
    Ok((pos, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `wire` to a parser the way a connection does: the bytes arrive in pieces (cut at
    /// `cuts`), each is appended to a buffer, and what the parser consumes leaves it; after a
    /// complete response the rest is parsed as the next one. Returns the responses and the
    /// bytes consumed.
    fn feed(wire: &[u8], cuts: &[usize], head_only: bool) -> Result<(Vec<Response>, usize), Error> {
        let mut parser = Parser::new();
        let (mut buf, mut consumed, mut responses) = (Vec::new(), 0, Vec::new());
        let mut from = 0;
        for &to in cuts.iter().chain([wire.len()].iter()) {
            buf.extend_from_slice(&wire[from..to]);
            from = to;
            loop {
                let (n, done) = parser.parse(&buf, head_only)?;
                buf.drain(..n);
                consumed += n;
                match done {
                    Some(r) => responses.push(r),
                    None => break,
                }
            }
        }
        Ok((responses, consumed))
    }

    fn whole(wire: &[u8]) -> Result<(Vec<Response>, usize), Error> {
        feed(wire, &[], false)
    }

    fn ok(status: u16) -> Response {
        Response {
            status,
            last: false,
            idle_s: 0,
        }
    }

    fn last(status: u16) -> Response {
        Response {
            status,
            last: true,
            idle_s: 0,
        }
    }

    fn parse_error(wire: &[u8]) -> String {
        match whole(wire) {
            Err(e @ (Error::Parse(_) | Error::Http2Only | Error::TlsOnly)) => e.to_string(),
            other => panic!("expected a parse error, got {other:?}"),
        }
    }

    const CHUNKED: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
        5;name=value\r\nhello\r\nA \r\n0123456789\r\n1a\r\nabcdefghijklmnopqrstuvwxyz\r\n\
        0\r\nX-Trailer: yes\r\nX-Other: 1\r\n\r\n";

    #[test]
    fn content_length_bodies_end_where_the_length_says() {
        let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        let mut parser = Parser::new();
        assert_eq!(
            parser.parse(wire, false).unwrap(),
            (wire.len(), Some(ok(200)))
        );
        // The next response's bytes are not consumed with this one.
        let two = [
            &wire[..],
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
        ]
        .concat();
        let mut parser = Parser::new();
        assert_eq!(
            parser.parse(&two, false).unwrap(),
            (wire.len(), Some(ok(200)))
        );
        assert_eq!(
            parser.parse(&two[wire.len()..], false).unwrap(),
            (two.len() - wire.len(), Some(ok(404)))
        );
        // A body is consumed as it arrives: nothing is kept for later.
        let mut parser = Parser::new();
        assert_eq!(parser.parse(&wire[..40], false).unwrap(), (40, None));
        assert_eq!(
            parser.parse(&wire[40..], false).unwrap(),
            (3, Some(ok(200)))
        );
        // Equal repeated values are one length.
        let (r, n) =
            whole(b"HTTP/1.1 200 OK\r\ncontent-length: 2, 2\r\ncontent-length: 2\r\n\r\nok")
                .unwrap();
        assert_eq!((r, n), (vec![ok(200)], 62));
    }

    #[test]
    fn chunked_bodies_may_be_split_at_any_byte() {
        assert_eq!(whole(CHUNKED).unwrap(), (vec![ok(200)], CHUNKED.len()));
        for cut in 0..=CHUNKED.len() {
            assert_eq!(
                feed(CHUNKED, &[cut], false).unwrap(),
                (vec![ok(200)], CHUNKED.len()),
                "cut at {cut}"
            );
        }
        let every: Vec<usize> = (1..CHUNKED.len()).collect();
        assert_eq!(
            feed(CHUNKED, &every, false).unwrap(),
            (vec![ok(200)], CHUNKED.len())
        );
        // Chunked wins over a Content-Length; the next response follows the trailers.
        let wire = [
            &b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: gzip, chunked\r\n\r\n"[..],
            b"3\r\nabc\r\n0\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
        ]
        .concat();
        assert_eq!(whole(&wire).unwrap(), (vec![ok(200), ok(204)], wire.len()));
    }

    #[test]
    fn a_response_split_across_many_reads() {
        let wire = [
            &b"HTTP/1.1 200 OK\r\nServer: t\r\nContent-Length: 300\r\n\r\n"[..],
            &[b'x'; 300],
            CHUNKED,
            b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbusy",
        ]
        .concat();
        for piece in [1, 2, 7, 64, 1000] {
            let cuts: Vec<usize> = (piece..wire.len()).step_by(piece).collect();
            assert_eq!(
                feed(&wire, &cuts, false).unwrap(),
                (vec![ok(200), ok(200), last(503)], wire.len()),
                "pieces of {piece}"
            );
        }
    }

    #[test]
    fn head_204_and_304_responses_have_no_body() {
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n";
        assert_eq!(feed(head, &[], true).unwrap(), (vec![ok(200)], head.len()));
        let chunked_head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(
            feed(chunked_head, &[], true).unwrap(),
            (vec![ok(200)], chunked_head.len())
        );
        let wire = b"HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 304 Not Modified\r\ncontent-length: 50\r\n\r\n";
        assert_eq!(whole(wire).unwrap(), (vec![ok(204), ok(304)], wire.len()));
    }

    #[test]
    fn interim_responses_are_skipped() {
        let interim =
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n";
        let wire = [
            &interim[..],
            b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok",
        ]
        .concat();
        assert_eq!(whole(&wire).unwrap(), (vec![ok(201)], wire.len()));
        // Interim heads are consumed on their own, before the final one arrives.
        let mut parser = Parser::new();
        assert_eq!(parser.parse(interim, false).unwrap(), (interim.len(), None));
        // 101 is final: a refusal, and the connection speaks something else afterwards.
        let wire = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n";
        assert_eq!(whole(wire).unwrap(), (vec![last(101)], wire.len()));
    }

    #[test]
    fn the_keep_alive_timeout_is_read() {
        for (header, idle_s) in [
            ("Keep-Alive: timeout=5, max=100", 5),
            ("keep-alive: max=3,TIMEOUT=15", 15),
            ("Keep-Alive: timeout = x", 0),
            ("Keep-Alive: max=100", 0),
            ("Keep-Alive: timeout=99999999999", u32::MAX),
        ] {
            let wire = format!("HTTP/1.1 200 OK\r\n{header}\r\nContent-Length: 0\r\n\r\n");
            let (got, _) = whole(wire.as_bytes()).unwrap();
            assert_eq!(got[0].idle_s, idle_s, "{header}");
        }
    }

    #[test]
    fn connection_close_and_http10_end_the_connection() {
        for (head, end) in [
            ("HTTP/1.1 200 OK\r\nConnection: close\r\n", true),
            ("HTTP/1.1 200 OK\r\nconnection: keep-alive, CLOSE\r\n", true),
            ("HTTP/1.1 200 OK\r\nConnection: keep-alive\r\n", false),
            ("HTTP/1.0 200 OK\r\n", true),
            ("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\n", false),
            (
                "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nConnection: close\r\n",
                true,
            ),
        ] {
            let wire = format!("{head}Content-Length: 2\r\n\r\nok");
            let expect = Response {
                status: 200,
                last: end,
                idle_s: 0,
            };
            assert_eq!(
                whole(wire.as_bytes()).unwrap(),
                (vec![expect], wire.len()),
                "{head}"
            );
        }
    }

    #[test]
    fn without_length_or_chunking_the_body_runs_until_close() {
        for head in [
            &b"HTTP/1.1 200 OK\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 3\r\n\r\n",
        ] {
            let mut parser = Parser::new();
            let wire = [head, b"all of this, however long"].concat();
            assert_eq!(parser.parse(&wire, false).unwrap(), (wire.len(), None));
            assert_eq!(parser.parse(b"more", false).unwrap(), (4, None));
            assert_eq!(parser.eof(), Some(last(200)));
        }
        // The end of the connection cuts off any other body, or a head.
        for cut in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel"[..],
            &CHUNKED[..CHUNKED.len() - 2],
            b"HTTP/1.1 200 OK\r\nContent-Le",
        ] {
            let mut parser = Parser::new();
            parser.parse(cut, false).unwrap();
            assert_eq!(parser.eof(), None);
        }
    }

    #[test]
    fn malformed_responses_are_errors() {
        for (wire, what) in [
            (&b"HTTP/1.1 abc OK\r\n\r\n"[..], "malformed status line"),
            (b"HTTP/1.1 099 Low\r\n\r\n", "malformed status line"),
            (b"XTTP/1.1 200 OK\r\n\r\n", "malformed status line"),
            // A TLS server's alert to a plain-text request (Jetty's: protocol_version).
            (
                b"\x15\x03\x03\x00\x02\x02\x46",
                "it speaks TLS on this port",
            ),
            (b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n", "malformed header"),
            (
                &[
                    &b"HTTP/1.1 200 OK\r\n"[..],
                    &b"A: b\r\n".repeat(101),
                    b"\r\n",
                ]
                .concat(),
                "too many headers",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
                "invalid content-length",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                "conflicting",
            ),
            // An h2c-only server's first frames: SETTINGS (6 bytes of it), then GOAWAY.
            (
                b"\0\0\x06\x04\0\0\0\0\0\0\x03\0\0\0\x64\0\0\x08\x07\0\0\0\0\0",
                "run with --http2",
            ),
            (b"\0\0\x08\x07\0\0\0\0\0\0\0\0\0\0\0\0\x01", "only HTTP/2"),
        ] {
            let e = parse_error(wire);
            assert!(e.contains(what), "{e}");
        }
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        for (body, what) in [
            (&b"zz\r\n"[..], "invalid chunk size"),
            (b"\r\n", "invalid chunk size"),
            (b"5\nhello", "invalid chunk size"),
            (b"11111111111111111\r\n", "invalid chunk size"),
            (b"3\r\nabcd\r\n", "not followed by CRLF"),
            (b"3;x\n", "invalid chunk extension"),
            (b"0\r\n\n", "trailer"),
        ] {
            let e = parse_error(&[&chunked[..], body].concat());
            assert!(e.contains(what), "{e}");
        }
        // A head that never ends is refused at the limit, not buffered forever.
        let mut huge = b"HTTP/1.1 200 OK\r\n".to_vec();
        while huge.len() < MAX_HEAD {
            huge.extend_from_slice(b"X-Filler: ");
            huge.extend_from_slice(&[b'a'; 1000]);
            huge.extend_from_slice(b"\r\n");
        }
        assert!(parse_error(&huge).contains("too large"));
        assert!(parse_error(&huge[..MAX_HEAD]).contains("too large"));
        assert_eq!(whole(&huge[..MAX_HEAD - 1]).unwrap(), (vec![], 0));
    }
}
