//! The NATS core wire protocol: parsing what the server sends and writing what the client sends.
//! Pure functions over byte buffers, so they are unit-tested without a server.
//!
//! Server → client: `INFO {json}`, `MSG <subject> <sid> [reply-to] <#bytes>\r\n<payload>\r\n`,
//! `PING`, `PONG`, `+OK`, `-ERR <message>`. (`HMSG`, headers, is not requested: the client
//! connects with `headers: false`.)

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::Deserialize;

/// Longest control line accepted before the input is declared broken.
pub const MAX_CONTROL_LINE: usize = 64 * 1024;

/// What the server sent.
#[derive(Debug, PartialEq, Eq)]
pub enum ServerOp {
    /// Server information (first thing on every connection).
    Info(Info),
    /// A message for subscription `sid`.
    Msg {
        /// Subject it was published on.
        subject: Bytes,
        /// Our subscription id.
        sid: u64,
        /// Reply subject, if the publisher asked for one.
        reply: Option<Bytes>,
        /// The payload (a slice of the read buffer, no copy).
        payload: Bytes,
    },
    /// Keep-alive probe: answer `PONG`.
    Ping,
    /// Answer to our `PING`.
    Pong,
    /// Acknowledgement in verbose mode.
    Ok,
    /// A protocol error.
    Err(String),
}

/// The parts of `INFO` the client uses.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
pub struct Info {
    /// Largest payload the server accepts.
    #[serde(default)]
    pub max_payload: u64,
    /// The server requires TLS.
    #[serde(default)]
    pub tls_required: bool,
    /// The server accepts TLS without requiring it (`allow_non_tls`).
    #[serde(default)]
    pub tls_available: bool,
    /// The server requires authentication.
    #[serde(default)]
    pub auth_required: bool,
    /// Server version.
    #[serde(default)]
    pub version: String,
}

/// Why input could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

fn find_crlf(b: &[u8]) -> Option<usize> {
    b.windows(2).position(|w| w == b"\r\n")
}

fn parse_u64(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 19 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in b {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + (c - b'0') as u64;
    }
    Some(v)
}

/// Takes one complete operation from the front of `buf`, or `Ok(None)` if more bytes are needed.
pub fn parse(buf: &mut BytesMut) -> Result<Option<ServerOp>, ParseError> {
    let Some(eol) = find_crlf(buf) else {
        if buf.len() > MAX_CONTROL_LINE {
            return Err(ParseError("control line too long".into()));
        }
        return Ok(None);
    };
    let line = &buf[..eol];
    let (verb, rest) = match line.iter().position(|c| *c == b' ' || *c == b'\t') {
        Some(i) => (&line[..i], &line[i + 1..]),
        None => (line, &line[line.len()..]),
    };
    let op = match verb {
        b"MSG" | b"msg" => {
            let args: Vec<&[u8]> = rest
                .split(|c| *c == b' ' || *c == b'\t')
                .filter(|a| !a.is_empty())
                .collect();
            let (subject, sid, reply, len) = match args.as_slice() {
                [s, sid, len] => (*s, *sid, None, *len),
                [s, sid, r, len] => (*s, *sid, Some(*r), *len),
                _ => {
                    return Err(ParseError(format!(
                        "bad MSG line: {}",
                        String::from_utf8_lossy(line)
                    )));
                }
            };
            let sid = parse_u64(sid).ok_or_else(|| ParseError("bad MSG sid".into()))?;
            let len = parse_u64(len).ok_or_else(|| ParseError("bad MSG size".into()))? as usize;
            let total = eol + 2 + len + 2;
            if buf.len() < total {
                buf.reserve(total - buf.len());
                return Ok(None);
            }
            let (subject, reply) = (
                Bytes::copy_from_slice(subject),
                reply.map(Bytes::copy_from_slice),
            );
            buf.advance(eol + 2);
            let payload = buf.split_to(len).freeze();
            if &buf[..2] != b"\r\n" {
                return Err(ParseError("MSG payload not followed by CRLF".into()));
            }
            buf.advance(2);
            return Ok(Some(ServerOp::Msg {
                subject,
                sid,
                reply,
                payload,
            }));
        }
        b"PING" | b"ping" => ServerOp::Ping,
        b"PONG" | b"pong" => ServerOp::Pong,
        b"+OK" | b"+ok" => ServerOp::Ok,
        b"-ERR" | b"-err" => ServerOp::Err(
            String::from_utf8_lossy(rest)
                .trim()
                .trim_matches('\'')
                .to_string(),
        ),
        b"INFO" | b"info" => {
            let info: Info =
                serde_json::from_slice(rest).map_err(|e| ParseError(format!("bad INFO: {e}")))?;
            ServerOp::Info(info)
        }
        other => {
            return Err(ParseError(format!(
                "unknown operation `{}`",
                String::from_utf8_lossy(other)
            )));
        }
    };
    buf.advance(eol + 2);
    Ok(Some(op))
}

/// Appends `PUB <subject> [reply] <len>\r\n<payload>\r\n`. `reply_token` appends
/// `<reply_prefix><token>` as the reply subject (request/reply) without allocating.
pub fn put_pub(out: &mut BytesMut, subject: &[u8], reply: Option<(&[u8], u64)>, payload: &[u8]) {
    out.reserve(subject.len() + payload.len() + 64);
    out.put_slice(b"PUB ");
    out.put_slice(subject);
    out.put_u8(b' ');
    if let Some((prefix, token)) = reply {
        out.put_slice(prefix);
        put_u64(out, token);
        out.put_u8(b' ');
    }
    put_u64(out, payload.len() as u64);
    out.put_slice(b"\r\n");
    out.put_slice(payload);
    out.put_slice(b"\r\n");
}

/// Appends `SUB <subject> [queue] <sid>\r\n`.
pub fn put_sub(out: &mut BytesMut, subject: &str, queue: Option<&str>, sid: u64) {
    out.put_slice(b"SUB ");
    out.put_slice(subject.as_bytes());
    out.put_u8(b' ');
    if let Some(q) = queue {
        out.put_slice(q.as_bytes());
        out.put_u8(b' ');
    }
    put_u64(out, sid);
    out.put_slice(b"\r\n");
}

/// Decimal digits of `v`, without allocating.
pub fn put_u64(out: &mut BytesMut, mut v: u64) {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.put_slice(&tmp[i..]);
}

/// Parses the trailing decimal token of a reply subject (`<prefix><token>`).
pub fn token_of(subject: &[u8], prefix: &[u8]) -> Option<u64> {
    subject.strip_prefix(prefix).and_then(parse_u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &[u8]) -> Vec<ServerOp> {
        let mut b = BytesMut::from(input);
        let mut out = vec![];
        while let Some(op) = parse(&mut b).unwrap() {
            out.push(op);
        }
        assert!(b.is_empty(), "left over: {:?}", b);
        out
    }

    #[test]
    fn parses_every_operation() {
        let ops = all(b"INFO {\"max_payload\":1048576,\"version\":\"2.9.10\"}\r\nPING\r\nPONG\r\n+OK\r\n-ERR 'Authorization Violation'\r\nMSG a.b 7 5\r\nhello\r\nMSG a.b 7 _INBOX.x.9 0\r\n\r\n");
        assert_eq!(
            ops[0],
            ServerOp::Info(Info {
                max_payload: 1048576,
                version: "2.9.10".into(),
                ..Default::default()
            })
        );
        assert_eq!(ops[1], ServerOp::Ping);
        assert_eq!(ops[2], ServerOp::Pong);
        assert_eq!(ops[3], ServerOp::Ok);
        assert_eq!(ops[4], ServerOp::Err("Authorization Violation".into()));
        assert_eq!(
            ops[5],
            ServerOp::Msg {
                subject: Bytes::from_static(b"a.b"),
                sid: 7,
                reply: None,
                payload: Bytes::from_static(b"hello")
            }
        );
        assert_eq!(
            ops[6],
            ServerOp::Msg {
                subject: Bytes::from_static(b"a.b"),
                sid: 7,
                reply: Some(Bytes::from_static(b"_INBOX.x.9")),
                payload: Bytes::new()
            }
        );
    }

    #[test]
    fn waits_for_split_input() {
        let whole = b"MSG s 1 10\r\n0123456789\r\nPING\r\n";
        for cut in 1..whole.len() {
            let mut b = BytesMut::from(&whole[..cut]);
            let mut got = vec![];
            while let Some(op) = parse(&mut b).unwrap() {
                got.push(op);
            }
            b.extend_from_slice(&whole[cut..]);
            while let Some(op) = parse(&mut b).unwrap() {
                got.push(op);
            }
            assert_eq!(got.len(), 2, "cut at {cut}");
            assert!(
                matches!(&got[0], ServerOp::Msg { payload, .. } if payload.as_ref() == b"0123456789")
            );
        }
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse(&mut BytesMut::from(&b"HELLO\r\n"[..])).is_err());
        assert!(parse(&mut BytesMut::from(&b"MSG a x 5\r\nhello\r\n"[..])).is_err());
        assert!(parse(&mut BytesMut::from(&b"MSG a 1 2\r\nhello\r\n"[..])).is_err());
        assert!(
            parse(&mut BytesMut::from(
                vec![b'x'; MAX_CONTROL_LINE + 1].as_slice()
            ))
            .is_err()
        );
    }

    #[test]
    fn writes_pub_and_sub() {
        let mut b = BytesMut::new();
        put_pub(&mut b, b"s.1", None, b"hi");
        put_pub(&mut b, b"s.1", Some((b"_INBOX.a.", 42)), b"");
        put_sub(&mut b, "s.*", Some("q"), 3);
        assert_eq!(
            &b[..],
            b"PUB s.1 2\r\nhi\r\nPUB s.1 _INBOX.a.42 0\r\n\r\nSUB s.* q 3\r\n"
        );
        assert_eq!(token_of(b"_INBOX.a.42", b"_INBOX.a."), Some(42));
        assert_eq!(token_of(b"_INBOX.b.42", b"_INBOX.a."), None);
    }
}
