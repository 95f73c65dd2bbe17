//! RFC 6455 framing and the HTTP/1.1 upgrade handshake, shared by the WebSocket driver,
//! `msgbench serve ws-broadcast` and the WebSocket tunnel other protocols ride in
//! ([`crate::tunnel`]: MQTT over WebSocket).
//!
//! Frames: FIN + opcode, 7/16/64-bit lengths, client frames masked (the mask is applied while
//! copying into the write buffer, so masking costs no extra pass), server frames not. Parsing
//! splits whole frames off a read buffer and unmasks in place; payloads come back as slices of
//! that buffer (`Bytes`), never copied.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use sha1::{Digest, Sha1};
use std::fmt;

/// Continuation of a fragmented message.
pub const OP_CONT: u8 = 0x0;
/// A text message (UTF-8).
pub const OP_TEXT: u8 = 0x1;
/// A binary message.
pub const OP_BINARY: u8 = 0x2;
/// Close, with an optional 2-byte code and reason.
pub const OP_CLOSE: u8 = 0x8;
/// Ping.
pub const OP_PING: u8 = 0x9;
/// Pong.
pub const OP_PONG: u8 = 0xA;

/// Normal closure.
pub const CLOSE_NORMAL: u16 = 1000;
/// The endpoint is going away (server shutdown).
pub const CLOSE_GOING_AWAY: u16 = 1001;
/// Protocol error.
pub const CLOSE_PROTOCOL: u16 = 1002;
/// A text message that is not UTF-8 (invalid payload data).
pub const CLOSE_INVALID_TEXT: u16 = 1007;
/// Message too big.
pub const CLOSE_TOO_BIG: u16 = 1009;

/// What a close code means (RFC 6455 §7.4.1 and the IANA registry), for reports: servers send
/// bare codes, and "1009" alone tells a user nothing.
pub fn close_meaning(code: u16) -> Option<&'static str> {
    Some(match code {
        1000 => "normal closure",
        1001 => "going away",
        1002 => "protocol error",
        1003 => "unsupported data",
        1005 => "no status code",
        1006 => "closed abnormally",
        1007 => "invalid payload data",
        1008 => "policy violation",
        1009 => "message too big",
        1010 => "a mandatory extension was not agreed",
        1011 => "internal server error",
        1012 => "service restart",
        1013 => "try again later",
        1014 => "bad gateway",
        1015 => "TLS handshake failure",
        _ => return None,
    })
}

const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// One frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Last fragment of its message.
    pub fin: bool,
    /// Opcode.
    pub opcode: u8,
    /// Payload, unmasked.
    pub payload: Bytes,
}

/// A frame that breaks the protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// Reserved bits set (no extension was negotiated).
    Reserved,
    /// An opcode RFC 6455 does not define.
    Opcode(u8),
    /// A control frame longer than 125 bytes or fragmented.
    BadControl,
    /// Longer than the limit.
    TooBig(u64),
    /// Masked when it must not be, or unmasked when it must.
    Masking,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Reserved => write!(f, "reserved bits set"),
            FrameError::Opcode(o) => write!(f, "unknown opcode {o:#x}"),
            FrameError::BadControl => write!(f, "control frame too long or fragmented"),
            FrameError::TooBig(n) => write!(f, "frame of {n} bytes is over the limit"),
            FrameError::Masking => write!(f, "wrong masking for this direction"),
        }
    }
}

impl FrameError {
    /// The close code that answers it.
    pub fn close_code(&self) -> u16 {
        match self {
            FrameError::TooBig(_) => CLOSE_TOO_BIG,
            _ => CLOSE_PROTOCOL,
        }
    }
}

/// Appends one frame. `mask`: the client's masking key (clients must mask, servers must not).
pub fn put_frame(buf: &mut BytesMut, opcode: u8, payload: &[u8], mask: Option<[u8; 4]>) {
    let len = payload.len();
    buf.reserve(14 + len);
    buf.put_u8(0x80 | opcode);
    let m = if mask.is_some() { 0x80 } else { 0 };
    if len < 126 {
        buf.put_u8(m | len as u8);
    } else if len <= u16::MAX as usize {
        buf.put_u8(m | 126);
        buf.put_u16(len as u16);
    } else {
        buf.put_u8(m | 127);
        buf.put_u64(len as u64);
    }
    match mask {
        None => buf.extend_from_slice(payload),
        Some(key) => {
            buf.extend_from_slice(&key);
            let start = buf.len();
            buf.extend_from_slice(payload);
            apply_mask(&mut buf[start..], key);
        }
    }
}

/// Appends a close frame with `code`.
pub fn put_close(buf: &mut BytesMut, code: u16, mask: Option<[u8; 4]>) {
    put_frame(buf, OP_CLOSE, &code.to_be_bytes(), mask);
}

/// XORs `data` with the repeating 4-byte key, 8 bytes at a time.
pub fn apply_mask(data: &mut [u8], key: [u8; 4]) {
    let wide = u64::from_ne_bytes([
        key[0], key[1], key[2], key[3], key[0], key[1], key[2], key[3],
    ]);
    let mut chunks = data.chunks_exact_mut(8);
    for c in &mut chunks {
        let v = u64::from_ne_bytes(c.try_into().expect("8 bytes")) ^ wide;
        c.copy_from_slice(&v.to_ne_bytes());
    }
    for (i, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b ^= key[i % 4];
    }
}

/// Splits one whole frame off `buf`, if there is one. `masked`: whether frames in this
/// direction must be masked (true on the server). Payloads over `max` are refused.
pub fn parse(buf: &mut BytesMut, masked: bool, max: u64) -> Result<Option<Frame>, FrameError> {
    if buf.len() < 2 {
        return Ok(None);
    }
    let (b0, b1) = (buf[0], buf[1]);
    if b0 & 0x70 != 0 {
        return Err(FrameError::Reserved);
    }
    let opcode = b0 & 0x0F;
    let fin = b0 & 0x80 != 0;
    match opcode {
        OP_CONT | OP_TEXT | OP_BINARY => {}
        OP_CLOSE | OP_PING | OP_PONG => {
            if !fin || (b1 & 0x7F) > 125 {
                return Err(FrameError::BadControl);
            }
        }
        o => return Err(FrameError::Opcode(o)),
    }
    let is_masked = b1 & 0x80 != 0;
    if is_masked != masked {
        return Err(FrameError::Masking);
    }
    let (len, mut head) = match b1 & 0x7F {
        126 => {
            if buf.len() < 4 {
                return Ok(None);
            }
            (u16::from_be_bytes([buf[2], buf[3]]) as u64, 4)
        }
        127 => {
            if buf.len() < 10 {
                return Ok(None);
            }
            (
                u64::from_be_bytes(buf[2..10].try_into().expect("8 bytes")),
                10,
            )
        }
        n => (n as u64, 2),
    };
    if len > max {
        return Err(FrameError::TooBig(len));
    }
    let key = if masked {
        if buf.len() < head + 4 {
            return Ok(None);
        }
        let k = [buf[head], buf[head + 1], buf[head + 2], buf[head + 3]];
        head += 4;
        Some(k)
    } else {
        None
    };
    let total = head + len as usize;
    if buf.len() < total {
        // Room for the rest, once: large frames are read straight into place.
        buf.reserve(total - buf.len());
        return Ok(None);
    }
    buf.advance(head);
    let mut payload = buf.split_to(len as usize);
    if let Some(k) = key {
        apply_mask(&mut payload, k);
    }
    Ok(Some(Frame {
        fin,
        opcode,
        payload: payload.freeze(),
    }))
}

/// The close code of a close frame's payload (1005 "no status" when it has none).
pub fn close_code(payload: &[u8]) -> u16 {
    if payload.len() >= 2 {
        u16::from_be_bytes([payload[0], payload[1]])
    } else {
        1005
    }
}

/// Why a close frame received must fail the connection instead of being echoed: a one-byte
/// body, a code no endpoint may send (1005, 1006, 1015, unassigned ones), or a reason that is
/// not UTF-8 [RFC 6455 5.5.1, 7.4].
pub fn bad_close(body: &[u8]) -> Option<u16> {
    match body {
        [] => None,
        [_] => Some(CLOSE_PROTOCOL),
        [hi, lo, reason @ ..] => {
            let code = u16::from_be_bytes([*hi, *lo]);
            if !matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999) {
                Some(CLOSE_PROTOCOL)
            } else if std::str::from_utf8(reason).is_err() {
                Some(CLOSE_INVALID_TEXT)
            } else {
                None
            }
        }
    }
}

/// `Sec-WebSocket-Accept` for a `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    use base64::Engine as _;
    let mut h = Sha1::new();
    h.update(key.trim().as_bytes());
    h.update(GUID.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(h.finalize())
}

/// Whether a `Sec-WebSocket-Key` is what RFC 6455 §4.1 says it must be: 16 bytes, base64.
pub fn valid_key(key: &str) -> bool {
    use base64::Engine as _;
    key.len() == 24
        && base64::engine::general_purpose::STANDARD
            .decode(key)
            .is_ok_and(|k| k.len() == 16)
}

/// A fresh random `Sec-WebSocket-Key` (16 random bytes, base64).
pub fn new_key(seed: u64) -> String {
    use base64::Engine as _;
    let mut x = seed | 1;
    let mut raw = [0u8; 16];
    for b in raw.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    base64::engine::general_purpose::STANDARD.encode(raw)
}

/// The client's upgrade request, with `extra` headers after msgbench's own (an extra `Host` or
/// `User-Agent` replaces msgbench's).
pub fn put_request(
    buf: &mut BytesMut,
    host: &str,
    path_and_query: &str,
    key: &str,
    extra: &[(String, String)],
) {
    let given = |name: &str| extra.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    buf.extend_from_slice(format!("GET {path_and_query} HTTP/1.1\r\n").as_bytes());
    if !given("host") {
        buf.extend_from_slice(format!("Host: {host}\r\n").as_bytes());
    }
    buf.extend_from_slice(
        format!(
            "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n\
             Sec-WebSocket-Version: 13\r\n"
        )
        .as_bytes(),
    );
    if !given("user-agent") {
        buf.extend_from_slice(b"User-Agent: msgbench\r\n");
    }
    for (n, v) in extra {
        buf.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
    }
    buf.extend_from_slice(b"\r\n");
}

/// An HTTP/1.1 head (request or response): its first line and headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// Request line or status line.
    pub first: String,
    /// Headers, names lower-cased.
    pub headers: Vec<(String, String)>,
}

impl Head {
    /// A header's value (names compare case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The status code of a response head.
    pub fn status(&self) -> Option<u16> {
        self.first.split_whitespace().nth(1)?.parse().ok()
    }

    /// Whether a header's comma-separated values include `token` (case-insensitive).
    pub fn has_token(&self, name: &str, token: &str) -> bool {
        self.header(name)
            .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    }
}

/// Splits an HTTP head off `buf` once it is complete (`\r\n\r\n`); errors past `max` bytes or
/// on a head that is not text.
pub fn parse_head(buf: &mut BytesMut, max: usize) -> Result<Option<Head>, String> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        if buf.len() > max {
            return Err(format!("no end of the HTTP head within {max} bytes"));
        }
        return Ok(None);
    };
    let raw = buf.split_to(end + 4);
    let text = std::str::from_utf8(&raw[..end]).map_err(|_| "the HTTP head is not text")?;
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or("").to_string();
    let headers = lines
        .filter_map(|l| {
            let (n, v) = l.split_once(':')?;
            Some((n.trim().to_ascii_lowercase(), v.trim().to_string()))
        })
        .collect();
    Ok(Some(Head { first, headers }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_example_accept_key() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn frames_round_trip_masked_and_not() {
        for len in [0usize, 5, 125, 126, 1000, 65_535, 65_536, 200_000] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            for mask in [None, Some([1, 2, 3, 4])] {
                let mut b = BytesMut::new();
                put_frame(&mut b, OP_BINARY, &payload, mask);
                b.extend_from_slice(b"\x81"); // the start of a next frame stays
                let f = parse(&mut b, mask.is_some(), u64::MAX).unwrap().unwrap();
                assert_eq!((f.fin, f.opcode), (true, OP_BINARY));
                assert_eq!(f.payload, payload, "len {len} mask {mask:?}");
                assert_eq!(&b[..], b"\x81");
            }
        }
    }

    #[test]
    fn partial_frames_wait_for_more() {
        let mut whole = BytesMut::new();
        put_frame(&mut whole, OP_TEXT, b"hello world", Some([9, 8, 7, 6]));
        for cut in 0..whole.len() {
            let mut b = BytesMut::from(&whole[..cut]);
            assert_eq!(parse(&mut b, true, 1 << 20), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn close_codes_have_meanings() {
        assert_eq!(close_meaning(1009), Some("message too big"));
        assert_eq!(
            close_meaning(CLOSE_INVALID_TEXT),
            Some("invalid payload data")
        );
        assert_eq!(close_meaning(4001), None);
    }

    #[test]
    fn protocol_violations_are_errors() {
        let mut b = BytesMut::from(&[0x80 | OP_BINARY, 0x05, 1, 2, 3, 4, 5][..]);
        assert_eq!(parse(&mut b, true, 100), Err(FrameError::Masking));
        let mut b = BytesMut::from(&[0xC2, 0x00][..]);
        assert_eq!(parse(&mut b, false, 100), Err(FrameError::Reserved));
        let mut b = BytesMut::from(&[0x83, 0x00][..]);
        assert_eq!(parse(&mut b, false, 100), Err(FrameError::Opcode(3)));
        let mut b = BytesMut::from(&[0x09, 0x00][..]);
        assert_eq!(parse(&mut b, false, 100), Err(FrameError::BadControl));
        let mut b = BytesMut::new();
        put_frame(&mut b, OP_BINARY, &[0; 300], None);
        assert_eq!(parse(&mut b, false, 100), Err(FrameError::TooBig(300)));
    }

    #[test]
    fn heads_parse() {
        let mut b = BytesMut::from(
            &b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n\r\nrest"[..],
        );
        let h = parse_head(&mut b, 8192).unwrap().unwrap();
        assert_eq!(h.status(), Some(101));
        assert!(h.has_token("connection", "upgrade"));
        assert_eq!(h.header("UPGRADE"), Some("websocket"));
        assert_eq!(&b[..], b"rest");
        let mut b = BytesMut::from(&b"GET / HTTP/1.1\r\nHost: x\r\n"[..]);
        assert_eq!(parse_head(&mut b, 8192), Ok(None));
        assert!(parse_head(&mut b, 4).is_err());
    }
}
