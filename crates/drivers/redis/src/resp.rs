//! RESP2, the Redis wire format, as far as a load generator needs it: commands written straight
//! into a write buffer (no intermediate values), replies measured before they are taken
//! ([`reply_len`] scans a complete reply without allocating), and the two shapes read on the
//! hot path taken apart in place: pub/sub pushes ([`Push`]) and `XREAD`/`XREADGROUP` batches
//! ([`stream_entries`]), whose payloads are slices of the reply's bytes.

use bytes::{BufMut, Bytes, BytesMut};

/// A reply that is not RESP2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a Redis reply: {0}")]
pub struct RespError(pub String);

/// Nesting deeper than this is not a reply msgbench asked for.
const MAX_DEPTH: usize = 8;

/// Appends one command (an array of bulk strings) to `out`.
pub fn command(out: &mut BytesMut, args: &[&[u8]]) {
    let len: usize = args.iter().map(|a| a.len() + 16).sum();
    out.reserve(len + 16);
    put_header(out, b'*', args.len());
    for a in args {
        put_header(out, b'$', a.len());
        out.put_slice(a);
        out.put_slice(b"\r\n");
    }
}

/// The fixed head of a command whose last argument varies: `*N` for `args` plus one, then
/// each of `args`. A producer makes it once per key; each message then adds its payload with
/// [`CommandPrefix`] instead of encoding the whole command again.
pub fn command_head(args: &[&[u8]]) -> Bytes {
    let mut out = BytesMut::new();
    put_header(&mut out, b'*', args.len() + 1);
    for a in args {
        put_header(&mut out, b'$', a.len());
        out.put_slice(a);
        out.put_slice(b"\r\n");
    }
    out.freeze()
}

/// A producer's command for one key up to its payload, with the payload's length line for the
/// size last sent: a run of same-sized messages (the usual benchmark) is then two copies per
/// command, the prefix and the payload.
pub struct CommandPrefix {
    head: Bytes,
    /// `head` and `$len\r\n` for a payload of `len` bytes (`None`: not made yet).
    prefix: Vec<u8>,
    len: Option<usize>,
}

impl CommandPrefix {
    /// The prefix of commands made by [`command_head`].
    pub fn new(head: Bytes) -> CommandPrefix {
        CommandPrefix {
            head,
            prefix: Vec::new(),
            len: None,
        }
    }

    /// Appends the whole command for `data`: `head`'s arguments, then `data`.
    #[inline]
    pub fn put(&mut self, out: &mut BytesMut, data: &[u8]) {
        if self.len != Some(data.len()) {
            let mut digits = [0u8; 20];
            self.prefix.clear();
            self.prefix.extend_from_slice(&self.head);
            self.prefix.push(b'$');
            self.prefix
                .extend_from_slice(format_len(&mut digits, data.len()));
            self.prefix.extend_from_slice(b"\r\n");
            self.len = Some(data.len());
        }
        put_parts(out, [&self.prefix, data, b"\r\n"]);
    }
}

/// Appends `parts` with one reservation and plain copies.
#[inline]
fn put_parts<const N: usize>(out: &mut BytesMut, parts: [&[u8]; N]) {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    out.reserve(total);
    let spare = out.spare_capacity_mut();
    let mut at = 0;
    for p in parts {
        // SAFETY: `reserve(total)` made room for all the parts, so `at + p.len() <= total`
        // stays within the spare capacity; the source and the spare bytes do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(p.as_ptr(), spare.as_mut_ptr().add(at).cast(), p.len())
        };
        at += p.len();
    }
    // SAFETY: the `total` bytes after the length were written just above.
    unsafe { out.set_len(out.len() + total) };
}

/// `n` in decimal, in the tail of `digits`.
#[inline]
fn format_len(digits: &mut [u8; 20], mut n: usize) -> &[u8] {
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &digits[i..]
}

fn put_header(out: &mut BytesMut, kind: u8, n: usize) {
    let mut digits = [0u8; 20];
    out.put_u8(kind);
    out.put_slice(format_len(&mut digits, n));
    out.put_slice(b"\r\n");
}

/// The position just past the `\r\n` ending the line that starts at `at`.
fn line_end(buf: &[u8], at: usize) -> Option<usize> {
    let rest = buf.get(at..)?;
    let i = rest.iter().position(|&b| b == b'\n')?;
    Some(at + i + 1)
}

fn int(line: &[u8]) -> Result<i64, RespError> {
    let s = line
        .strip_suffix(b"\r\n")
        .ok_or_else(|| RespError("a line without CRLF".into()))?;
    let (neg, digits) = match s.split_first() {
        Some((b'-', d)) => (true, d),
        _ => (false, s),
    };
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(RespError(format!(
            "`{}` is not a length",
            String::from_utf8_lossy(s)
        )));
    }
    let v = digits
        .iter()
        .fold(0i64, |n, d| n * 10 + i64::from(d - b'0'));
    Ok(if neg { -v } else { v })
}

/// The length of the complete reply at the start of `buf`, or `None` if more bytes are needed.
pub fn reply_len(buf: &[u8]) -> Result<Option<usize>, RespError> {
    scan(buf, 0, 0)
}

fn scan(buf: &[u8], at: usize, depth: usize) -> Result<Option<usize>, RespError> {
    if depth > MAX_DEPTH {
        return Err(RespError("nested too deeply".into()));
    }
    let Some(&kind) = buf.get(at) else {
        return Ok(None);
    };
    let Some(end) = line_end(buf, at) else {
        return Ok(None);
    };
    match kind {
        // A simple line ends with CRLF (a lone LF would leave `-\n` one byte long, shorter
        // than what readers of an error strip).
        b'+' | b'-' | b':' if end < at + 3 || buf[end - 2] != b'\r' => {
            Err(RespError("a line without CRLF".into()))
        }
        b'+' | b'-' | b':' => Ok(Some(end)),
        b'$' => {
            let n = int(&buf[at + 1..end])?;
            if n < 0 {
                return Ok(Some(end));
            }
            let total = end + n as usize + 2;
            Ok((buf.len() >= total).then_some(total))
        }
        b'*' => {
            let n = int(&buf[at + 1..end])?;
            let mut pos = end;
            for _ in 0..n.max(0) {
                match scan(buf, pos, depth + 1)? {
                    Some(p) => pos = p,
                    None => return Ok(None),
                }
            }
            Ok(Some(pos))
        }
        other => Err(RespError(format!("unexpected type byte {other:#04x}"))),
    }
}

/// A reply as the client needs to judge it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `-ERR ...`: the server refused the command.
    Error(String),
    /// Anything else (status, integer, bulk, array, nil).
    Ok,
}

/// Takes one complete reply off `buf` and judges it, or `None` if it is incomplete.
pub fn take_reply(buf: &mut BytesMut) -> Result<Option<Reply>, RespError> {
    let Some(len) = reply_len(buf)? else {
        return Ok(None);
    };
    if buf.first() != Some(&b'-') {
        bytes::Buf::advance(buf, len);
        return Ok(Some(Reply::Ok));
    }
    let r = buf.split_to(len);
    Ok(Some(Reply::Error(
        String::from_utf8_lossy(&r[1..r.len() - 2]).into_owned(),
    )))
}

/// The run of complete replies that are not errors at the start of `buf`, at most `max` of
/// them: `(how many, bytes they take)`. A pipelining producer's acks are such a run, counted
/// in one pass over the bytes and taken off the buffer once. The run stops before an error
/// reply, an incomplete reply or bytes that are not RESP, which [`take_reply`] then takes or
/// judges.
pub fn ok_run(buf: &[u8], max: usize) -> (usize, usize) {
    let (mut n, mut at) = (0, 0);
    while n < max {
        let end = match buf.get(at) {
            // The integer of PUBLISH and the status of a command: one line.
            Some(b':' | b'+') => match line_end(buf, at) {
                Some(end) if end >= at + 3 && buf[end - 2] == b'\r' => end,
                _ => break,
            },
            // The entry id of XADD: a bulk string whose length is a few digits.
            Some(b'$') => match bulk_end(buf, at) {
                Some(end) if end <= buf.len() => end,
                Some(_) => break,
                None => match scan(buf, at, 0) {
                    Ok(Some(end)) => end,
                    Ok(None) | Err(_) => break,
                },
            },
            Some(b'-') | None => break,
            Some(_) => match scan(buf, at, 0) {
                Ok(Some(end)) => end,
                Ok(None) | Err(_) => break,
            },
        };
        (n, at) = (n + 1, end);
    }
    (n, at)
}

/// Where the bulk string at `at` (`$N\r\n` then N bytes and CRLF) ends, when its header is
/// whole and a plain length of 1 to 9 digits; `None` for anything else (a nil, a header still
/// incomplete, a malformed one), which the general [`scan`] then judges. The end may lie past
/// `buf` (the body is still coming).
#[inline]
fn bulk_end(buf: &[u8], at: usize) -> Option<usize> {
    let mut n = 0usize;
    let mut i = at + 1;
    while let Some(&d) = buf.get(i) {
        match d {
            b'0'..=b'9' if i - at <= 9 => n = n * 10 + usize::from(d - b'0'),
            b'\r' if i > at + 1 && buf.get(i + 1) == Some(&b'\n') => return Some(i + 2 + n + 2),
            _ => return None,
        }
        i += 1;
    }
    None
}

/// A cursor over one complete reply, for replies whose shape is known.
struct Walk<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Walk<'_> {
    fn header(&mut self, kind: u8) -> Result<i64, RespError> {
        let end = line_end(self.buf, self.pos).ok_or_else(|| RespError("truncated".into()))?;
        if self.buf[self.pos] != kind {
            return Err(RespError(format!(
                "expected `{}`, found `{}`",
                kind as char, self.buf[self.pos] as char
            )));
        }
        let n = int(&self.buf[self.pos + 1..end])?;
        self.pos = end;
        Ok(n)
    }

    /// A bulk string's range in the buffer (`None`: nil).
    fn bulk(&mut self) -> Result<Option<std::ops::Range<usize>>, RespError> {
        let n = self.header(b'$')?;
        if n < 0 {
            return Ok(None);
        }
        let start = self.pos;
        let end = start + n as usize;
        if end + 2 > self.buf.len() {
            return Err(RespError("truncated bulk string".into()));
        }
        self.pos = end + 2;
        Ok(Some(start..end))
    }

    fn skip(&mut self) -> Result<(), RespError> {
        match scan(self.buf, self.pos, 0)? {
            Some(p) => {
                self.pos = p;
                Ok(())
            }
            None => Err(RespError("truncated".into())),
        }
    }
}

/// A pub/sub push: a message on a channel, or something else (subscription confirmations).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Push {
    /// `message` or `pmessage`: the payload.
    Message(Bytes),
    /// `subscribe`, `psubscribe` and the like: how many subscriptions the connection holds.
    Subscribed,
    /// An error reply.
    Error(String),
    /// Any other reply (PONG, a command's answer).
    Other,
}

/// Takes one pub/sub push off `buf`, or `None` if it is incomplete. The payload is a slice of
/// the read buffer, not a copy.
pub fn take_push(buf: &mut BytesMut) -> Result<Option<Push>, RespError> {
    let Some(len) = reply_len(buf)? else {
        return Ok(None);
    };
    let frame = buf.split_to(len).freeze();
    match frame[0] {
        b'-' => {
            return Ok(Some(Push::Error(
                String::from_utf8_lossy(&frame[1..len - 2]).into_owned(),
            )));
        }
        b'*' => {}
        _ => return Ok(Some(Push::Other)),
    }
    let mut w = Walk {
        buf: &frame,
        pos: 0,
    };
    let n = w.header(b'*')?;
    let Some(kind) = w.bulk()? else {
        return Ok(Some(Push::Other));
    };
    let push = match (&frame[kind], n) {
        (b"message", 3) => {
            w.skip()?;
            let p = w.bulk()?.ok_or_else(|| RespError("a nil message".into()))?;
            Push::Message(frame.slice(p))
        }
        (b"pmessage", 4) => {
            w.skip()?;
            w.skip()?;
            let p = w.bulk()?.ok_or_else(|| RespError("a nil message".into()))?;
            Push::Message(frame.slice(p))
        }
        (b"subscribe" | b"psubscribe", 3) => Push::Subscribed,
        _ => Push::Other,
    };
    Ok(Some(push))
}

/// One entry of a stream as read: its id and the value of its field (msgbench writes one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The entry id (`1700000000000-0`).
    pub id: Bytes,
    /// The value of the entry's first field.
    pub payload: Bytes,
}

/// The entries of an `XREAD`/`XREADGROUP` reply (one stream asked for), appended to `out`.
/// A nil reply (the block timed out) adds none. Entries deleted from the stream while pending
/// (nil fields) are skipped.
pub fn stream_entries(
    reply: Bytes,
    out: &mut std::collections::VecDeque<Entry>,
) -> Result<(), RespError> {
    if reply.starts_with(b"*-1") || reply.starts_with(b"$-1") {
        return Ok(());
    }
    let mut w = Walk {
        buf: &reply,
        pos: 0,
    };
    let streams = w.header(b'*')?;
    for _ in 0..streams.max(0) {
        w.header(b'*')?;
        w.skip()?; // the stream's name
        let entries = w.header(b'*')?;
        for _ in 0..entries.max(0) {
            w.header(b'*')?;
            let id = w
                .bulk()?
                .ok_or_else(|| RespError("an entry without id".into()))?;
            // (An entry that ends with its id is malformed: `header` below says so.)
            if w.buf[w.pos..].starts_with(b"*-1") {
                w.skip()?;
                continue;
            }
            let fields = w.header(b'*')?;
            let mut payload = None;
            for k in 0..fields.max(0) {
                let r = w.bulk()?;
                if k == 1 {
                    payload = r;
                }
            }
            if let Some(p) = payload {
                out.push_back(Entry {
                    id: reply.slice(id),
                    payload: reply.slice(p),
                });
            }
        }
    }
    Ok(())
}

/// The id of the newest entry in an `XREVRANGE key + - COUNT 1` reply, if the stream has one.
pub fn last_id(reply: &[u8]) -> Result<Option<Bytes>, RespError> {
    let mut w = Walk { buf: reply, pos: 0 };
    if w.header(b'*')? < 1 {
        return Ok(None);
    }
    w.header(b'*')?;
    Ok(w.bulk()?.map(|r| Bytes::copy_from_slice(&reply[r])))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        let mut b = BytesMut::new();
        command(&mut b, &[b"PUBLISH", b"t", b"hello"]);
        assert_eq!(&b[..], b"*3\r\n$7\r\nPUBLISH\r\n$1\r\nt\r\n$5\r\nhello\r\n");
    }

    #[test]
    fn a_head_and_its_payload_make_the_same_command() {
        let head = command_head(&[b"XADD", b"key", b"*", b"d"]);
        let mut prefix = CommandPrefix::new(head);
        // Sizes change and come back: the cached length line follows them.
        for payload in [&b"abc"[..], b"xyz", b"", b"x", &[7u8; 1234][..], b"abc"] {
            let (mut whole, mut fast) = (BytesMut::new(), BytesMut::new());
            command(&mut whole, &[b"XADD", b"key", b"*", b"d", payload]);
            prefix.put(&mut fast, payload);
            assert_eq!(fast, whole, "payload of {} bytes", payload.len());
        }
    }

    #[test]
    fn a_run_of_successes_stops_at_an_error_or_an_incomplete_reply() {
        let replies = b":1\r\n+OK\r\n$3\r\n1-0\r\n*1\r\n:2\r\n-ERR no\r\n:3\r\n";
        let before_error = replies.len() - b"-ERR no\r\n:3\r\n".len();
        assert_eq!(ok_run(replies, 100), (4, before_error));
        assert_eq!(ok_run(replies, 2), (2, 9));
        assert_eq!(ok_run(&replies[..5], 100), (1, 4), "`+OK` is cut");
        assert_eq!(ok_run(b"$3\r\n1-", 100), (0, 0));
        assert_eq!(ok_run(b":1\n:2\r\n", 100), (0, 0), "a line without CR");
        assert_eq!(ok_run(b"?", 100), (0, 0));
        assert_eq!(
            ok_run(b"$-1\r\n$0\r\n\r\n$12\r\n1-0", 100),
            (2, 11),
            "nil, empty, cut"
        );
        assert_eq!(ok_run(b"$x\r\n", 100), (0, 0), "not a length");
        // Every cut of a run counts only the replies that are whole.
        for cut in 0..before_error {
            let (n, len) = ok_run(&replies[..cut], 100);
            assert!(len <= cut, "{cut}");
            assert_eq!(reply_len(&replies[len..cut]).unwrap(), None, "{cut}: {n}");
        }
    }

    #[test]
    fn replies_are_measured_only_when_complete() {
        let full = b"*2\r\n$3\r\nabc\r\n:12\r\n";
        for cut in 0..full.len() {
            assert_eq!(reply_len(&full[..cut]).unwrap(), None, "{cut}");
        }
        assert_eq!(reply_len(full).unwrap(), Some(full.len()));
        assert_eq!(reply_len(b"$-1\r\n+OK\r\n").unwrap(), Some(5));
        assert!(reply_len(b"?x\r\n").is_err());
        assert!(reply_len(b"$abc\r\n").is_err());
        let mut b = BytesMut::from(&b"-ERR wrong\r\n:1\r\n"[..]);
        assert_eq!(
            take_reply(&mut b).unwrap(),
            Some(Reply::Error("ERR wrong".into()))
        );
        assert_eq!(take_reply(&mut b).unwrap(), Some(Reply::Ok));
        assert!(b.is_empty());
    }

    #[test]
    fn pushes_hand_out_payload_slices() {
        let mut b = BytesMut::from(
            &b"*3\r\n$9\r\nsubscribe\r\n$1\r\nt\r\n:1\r\n*3\r\n$7\r\nmessage\r\n$1\r\nt\r\n$3\r\nxyz\r\n*4\r\n$8\r\npmessage\r\n$2\r\nt*\r\n$2\r\nt1\r\n$2\r\nab\r\n"[..],
        );
        assert_eq!(take_push(&mut b).unwrap(), Some(Push::Subscribed));
        assert_eq!(
            take_push(&mut b).unwrap(),
            Some(Push::Message(Bytes::from_static(b"xyz")))
        );
        assert_eq!(
            take_push(&mut b).unwrap(),
            Some(Push::Message(Bytes::from_static(b"ab")))
        );
        assert_eq!(take_push(&mut b).unwrap(), None);
    }

    #[test]
    fn stream_batches_and_timeouts() {
        let reply = Bytes::from_static(
            b"*1\r\n*2\r\n$1\r\ns\r\n*3\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nd\r\n$2\r\nhi\r\n*2\r\n$3\r\n2-0\r\n*-1\r\n*2\r\n$3\r\n3-0\r\n*2\r\n$1\r\nd\r\n$0\r\n\r\n",
        );
        assert_eq!(reply_len(&reply).unwrap(), Some(reply.len()));
        let mut out = VecDeque::new();
        stream_entries(reply, &mut out).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(
            (&out[0].id[..], &out[0].payload[..]),
            (&b"1-0"[..], &b"hi"[..])
        );
        assert_eq!(&out[1].id[..], b"3-0");
        stream_entries(Bytes::from_static(b"*-1\r\n"), &mut out).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(last_id(b"*0\r\n").unwrap(), None);
        assert_eq!(
            last_id(b"*1\r\n*2\r\n$3\r\n9-1\r\n*2\r\n$1\r\nd\r\n$1\r\nx\r\n").unwrap(),
            Some(Bytes::from_static(b"9-1"))
        );
    }

    /// Fuzzing (fuzz target redis_resp) found a panic (index out of bounds) on an XREAD
    /// entry that ends with its id, with no field list.
    #[test]
    fn fuzz_a_stream_entry_without_fields_is_an_error() {
        let reply = b"*1\r\n*2\r\n$5\r\nbench\r\n*1\r\n*1\r\n$15\r\n1700000080000-0\r\n";
        assert_eq!(reply_len(reply), Ok(Some(reply.len())));
        let r = stream_entries(Bytes::from_static(reply), &mut VecDeque::new());
        assert!(r.is_err());
    }

    /// Found by the redis_resp target: `-\n` (an error line ended by a lone LF) measured as a
    /// two-byte reply, and judging it sliced `[1..0]`.
    #[test]
    fn fuzz_a_simple_line_without_cr_is_an_error() {
        for line in [&b"-\n"[..], b"+\n", b":\n", b"-ERR x\n"] {
            assert!(reply_len(line).is_err(), "{line:?}");
            assert!(take_reply(&mut BytesMut::from(line)).is_err());
            assert!(take_push(&mut BytesMut::from(line)).is_err());
        }
        assert_eq!(
            take_reply(&mut BytesMut::from(&b"-\r\n"[..])),
            Ok(Some(Reply::Error(String::new())))
        );
    }
}
