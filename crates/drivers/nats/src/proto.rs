//! The NATS core wire protocol: parsing what the server sends and writing what the client sends.
//! Pure functions over byte buffers, so they are unit-tested without a server.
//!
//! Server → client: `INFO {json}`, `MSG <subject> <sid> [reply-to] <#bytes>\r\n<payload>\r\n`,
//! `PING`, `PONG`, `+OK`, `-ERR <message>`, and, on connections that ask for headers
//! (JetStream), `HMSG <subject> <sid> [reply-to] <#header bytes> <#total bytes>\r\n<headers><payload>\r\n`.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::Deserialize;

/// Longest control line accepted before the input is declared broken.
pub const MAX_CONTROL_LINE: usize = 64 * 1024;

/// The largest message (headers and payload) a server may announce: nats-server's ceiling for
/// `max_payload` (64 MiB). A size above it is a broken or hostile peer, refused before the
/// read buffer is grown for it (a 19-digit size would otherwise reserve exabytes and abort).
pub const MAX_MESSAGE: u64 = 64 << 20;

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
    /// A message with headers (only on connections that asked for them): JetStream status
    /// messages (`NATS/1.0 408 Request Timeout`, flow control) and messages published with
    /// headers.
    HMsg {
        /// Subject it was published on.
        subject: Bytes,
        /// Our subscription id.
        sid: u64,
        /// Reply subject, if any.
        reply: Option<Bytes>,
        /// The header block, from `NATS/1.0` to the blank line (a slice of the read buffer).
        headers: Bytes,
        /// The payload after the headers.
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
    /// The challenge an nkey signs (sent when the server has nkey users or runs in operator
    /// mode).
    #[serde(default)]
    pub nonce: Option<String>,
    /// The cluster's other servers clients may use (`host:port`), announced by a clustered
    /// server at connect and again, in an INFO of its own, when the cluster changes.
    #[serde(default)]
    pub connect_urls: Vec<String>,
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
        b"MSG" | b"msg" | b"HMSG" | b"hmsg" => {
            let with_headers = verb.len() == 4;
            let mut args: [&[u8]; 5] = [&[]; 5];
            let mut n = 0;
            for a in rest
                .split(|c| *c == b' ' || *c == b'\t')
                .filter(|a| !a.is_empty())
            {
                if n == args.len() {
                    n += 1;
                    break;
                }
                args[n] = a;
                n += 1;
            }
            let bad = || {
                ParseError(format!(
                    "bad {} line: {}",
                    String::from_utf8_lossy(verb),
                    String::from_utf8_lossy(line)
                ))
            };
            // MSG: subject sid [reply] len; HMSG: subject sid [reply] hlen len.
            let fixed = if with_headers { 4 } else { 3 };
            let (subject, sid, reply) = match n.checked_sub(fixed) {
                Some(0) => (args[0], args[1], None),
                Some(1) => (args[0], args[1], Some(args[2])),
                _ => return Err(bad()),
            };
            let sid = parse_u64(sid).ok_or_else(|| ParseError("bad MSG sid".into()))?;
            let len = parse_u64(args[n - 1]).ok_or_else(|| ParseError("bad MSG size".into()))?;
            if len > MAX_MESSAGE {
                return Err(ParseError(format!(
                    "a {len}-byte message exceeds the {MAX_MESSAGE}-byte limit of NATS servers"
                )));
            }
            let len = len as usize;
            let hlen = if with_headers {
                let h = parse_u64(args[n - 2]).ok_or_else(bad)? as usize;
                if h > len {
                    return Err(bad());
                }
                h
            } else {
                0
            };
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
            let mut payload = buf.split_to(len).freeze();
            if &buf[..2] != b"\r\n" {
                return Err(ParseError("MSG payload not followed by CRLF".into()));
            }
            buf.advance(2);
            if with_headers {
                let headers = payload.split_to(hlen);
                return Ok(Some(ServerOp::HMsg {
                    subject,
                    sid,
                    reply,
                    headers,
                    payload,
                }));
            }
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

/// The status code of a header block (`NATS/1.0 408 Request Timeout` → 408), if it has one.
pub fn status(headers: &[u8]) -> Option<u16> {
    let line = headers.strip_prefix(b"NATS/1.0")?;
    let line = &line[..find_crlf(line).unwrap_or(line.len())];
    let code = line.split(|c| *c == b' ').find(|t| !t.is_empty())?;
    parse_u64(code).and_then(|c| u16::try_from(c).ok())
}

/// The value of header `name` (case-insensitive) in a header block.
pub fn header<'a>(headers: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    headers.split(|c| *c == b'\n').skip(1).find_map(|l| {
        let l = l.strip_suffix(b"\r").unwrap_or(l);
        let colon = l.iter().position(|c| *c == b':')?;
        l[..colon]
            .eq_ignore_ascii_case(name)
            .then(|| l[colon + 1..].trim_ascii())
    })
}

/// Parses a decimal number (no sign, no spaces).
pub fn number(b: &[u8]) -> Option<u64> {
    parse_u64(b)
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
    fn parses_hmsg_and_status_headers() {
        let ops = all(b"HMSG _INBOX.a 3 _INBOX.r 58 60\r\nNATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 7\r\n\r\nhi\r\nHMSG s 1 12 12\r\nNATS/1.0\r\n\r\n\r\n");
        let ServerOp::HMsg {
            subject,
            sid,
            reply,
            headers,
            payload,
        } = &ops[0]
        else {
            panic!("{:?}", ops[0])
        };
        assert_eq!((&subject[..], *sid), (&b"_INBOX.a"[..], 3));
        assert_eq!(reply.as_deref(), Some(&b"_INBOX.r"[..]));
        assert_eq!(&payload[..], b"hi");
        assert_eq!(status(headers), Some(408));
        assert_eq!(header(headers, b"nats-pending-messages"), Some(&b"7"[..]));
        assert_eq!(header(headers, b"Nats-Pending-Bytes"), None);
        let ServerOp::HMsg {
            headers, payload, ..
        } = &ops[1]
        else {
            panic!()
        };
        assert_eq!((status(headers), payload.len()), (None, 0));
        assert!(
            parse(&mut BytesMut::from(
                &b"HMSG a 1 9 5\r\nNATS/1.0\r\n\r\n"[..]
            ))
            .is_err()
        );
        assert!(parse(&mut BytesMut::from(&b"HMSG a 1 5\r\nhello\r\n"[..])).is_err());
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

    /// Fuzzing (fuzz target nats_proto) found that a 19-digit size made the parser reserve
    /// that many bytes: a capacity overflow that aborted the process.
    #[test]
    fn fuzz_a_message_size_beyond_any_server_is_refused() {
        let mut b = BytesMut::from(&b"MSG bench.0 1 5555555555555555555\r\nhello\r\n"[..]);
        assert!(parse(&mut b).is_err());
        let mut b = BytesMut::from(&b"HMSG a 1 12 99999999999999\r\n"[..]);
        assert!(parse(&mut b).is_err());
        // The largest size still waits for its bytes.
        let mut b = BytesMut::from(format!("MSG a 1 {MAX_MESSAGE}\r\n").as_bytes());
        assert_eq!(parse(&mut b), Ok(None));
    }
}
