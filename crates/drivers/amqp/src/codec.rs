//! AMQP 0-9-1 frames for a load-generating client, on top of the `amq-protocol` codec.
//!
//! Methods and content headers are encoded and decoded by `amq-protocol`. Two paths are kept
//! out of it because they run per message: publishing (the method and header frames of one
//! routing key are encoded once, then copied with the body size patched in) and receiving
//! bodies (handed out as slices of the read buffer, never copied).

use amq_protocol::frame::{AMQPFrame, gen_frame};
use amq_protocol::protocol::{AMQPClass, basic};
use amq_protocol::types::{ChannelId, ShortString};
use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Frame types (AMQP 0-9-1 §4.2.3).
pub const FRAME_METHOD: u8 = 1;
/// Content header frame.
pub const FRAME_HEADER: u8 = 2;
/// Content body frame.
pub const FRAME_BODY: u8 = 3;
/// Heartbeat frame.
pub const FRAME_HEARTBEAT: u8 = 8;
/// Every frame ends with this octet.
pub const FRAME_END: u8 = 0xCE;

/// The peer broke the protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("AMQP protocol error: {0}")]
pub struct ProtoError(pub String);

/// One received frame.
#[derive(Debug)]
pub enum Frame {
    /// A method.
    Method(ChannelId, Box<AMQPClass>),
    /// A content header: the body size, and the property flags and list when any property is
    /// set (`None` otherwise, the common case of benchmark messages; see [`correlation_id`]).
    Header(ChannelId, u64, Option<Bytes>),
    /// A piece of a body.
    Body(ChannelId, Bytes),
    /// A heartbeat.
    Heartbeat,
}

/// Deepest nesting of field tables and arrays handed to the `amq-protocol` parser, whose
/// recursion has no limit of its own (about 1,500 levels, 9 KB, abort the process); see
/// [`nesting_ok`].
pub const MAX_NESTING: usize = 32;

/// Whether the field tables and arrays a method or content-header payload may hold nest at
/// most [`MAX_NESTING`] deep, so that the codec's recursive parser cannot exhaust the stack.
///
/// Conservative and schema-free: every `F` or `A` octet followed by a length that fits in the
/// payload is a candidate table or array spanning that length, and a real value nested `d`
/// deep lies inside the spans of its `d` ancestors. So the largest number of candidate spans
/// covering one position bounds the depth. Ordinary payloads have a handful of candidates;
/// exceeding the bound needs dozens of overlapping ones, i.e. a crafted payload.
pub fn nesting_ok(payload: &[u8]) -> bool {
    // Ends of the candidate spans covering the current position (unordered; few).
    let mut open = [0usize; MAX_NESTING + 1];
    let mut n = 0;
    let mut i = 0;
    while i + 5 <= payload.len() {
        let b = payload[i];
        if b == b'F' || b == b'A' {
            let len = u32::from_be_bytes([
                payload[i + 1],
                payload[i + 2],
                payload[i + 3],
                payload[i + 4],
            ]) as usize;
            let start = i + 5;
            if len <= payload.len() - start {
                // Drop the spans this tag lies outside of.
                let mut k = 0;
                while k < n {
                    if open[k] <= i {
                        n -= 1;
                        open[k] = open[n];
                    } else {
                        k += 1;
                    }
                }
                if n == MAX_NESTING {
                    return false;
                }
                open[n] = start + len;
                n += 1;
            }
        }
        i += 1;
    }
    true
}

/// Appends one frame encoded by `amq-protocol`.
pub fn put_frame(buf: &mut BytesMut, frame: &AMQPFrame) {
    let v = cookie_factory::gen_simple(gen_frame(frame), Vec::with_capacity(64))
        .expect("writing to a Vec cannot fail");
    buf.extend_from_slice(&v);
}

/// Appends a method frame.
pub fn put_method(buf: &mut BytesMut, channel: ChannelId, method: AMQPClass) {
    put_frame(buf, &AMQPFrame::Method(channel, method));
}

/// Appends a heartbeat frame.
pub fn put_heartbeat(buf: &mut BytesMut) {
    buf.put_slice(&[FRAME_HEARTBEAT, 0, 0, 0, 0, 0, 0, FRAME_END]);
}

/// What a server's protocol header (the 4 bytes after `AMQP`) says about it.
fn protocol_header(v: &[u8]) -> String {
    match v {
        [0 | 2 | 3, 1, 0, 0] => {
            "the server speaks AMQP 1.0 on this port, not 0-9-1: use amqp10://".into()
        }
        [1, 1, 0, 10] => "the server speaks AMQP 0-10 on this port (Qpid C++), not 0-9-1".into(),
        [a, b, c, d] => format!(
            "the server answered with protocol header AMQP {a}.{b}.{c}.{d}: it does not take AMQP 0-9-1 on this port"
        ),
        _ => unreachable!("four bytes"),
    }
}

/// Splits one frame off the front of `buf`, or `Ok(None)` if it is not complete.
pub fn parse(buf: &mut BytesMut, frame_max: usize) -> Result<Option<Frame>, ProtoError> {
    if buf.len() < 7 {
        return Ok(None);
    }
    // No frame type is `A`: a server that does not take the version asked for answers with
    // the protocol header it speaks, then closes.
    if buf.starts_with(b"AMQP") && buf.len() >= 8 {
        return Err(ProtoError(protocol_header(&buf[4..8])));
    }
    let kind = buf[0];
    let channel = u16::from_be_bytes([buf[1], buf[2]]);
    let size = u32::from_be_bytes([buf[3], buf[4], buf[5], buf[6]]) as usize;
    if size + 8 > frame_max.max(4096) + 8 {
        return Err(ProtoError(format!(
            "a {size}-byte frame exceeds the negotiated frame-max of {frame_max}"
        )));
    }
    if buf.len() < size + 8 {
        buf.reserve(size + 8 - buf.len());
        return Ok(None);
    }
    if buf[7 + size] != FRAME_END {
        return Err(ProtoError("frame does not end with 0xCE".into()));
    }
    buf.advance(7);
    let payload = buf.split_to(size);
    buf.advance(1);
    Ok(Some(match kind {
        FRAME_METHOD => {
            if !nesting_ok(&payload) {
                return Err(ProtoError(format!(
                    "field tables nested deeper than {MAX_NESTING} levels"
                )));
            }
            let (_, class) = amq_protocol::protocol::parse_class(&payload[..])
                .map_err(|e| ProtoError(format!("bad method frame: {e}")))?;
            Frame::Method(channel, Box::new(class))
        }
        FRAME_HEADER => {
            if payload.len() < 12 {
                return Err(ProtoError("content header too short".into()));
            }
            let size = u64::from_be_bytes(payload[4..12].try_into().expect("8 bytes"));
            let props = (payload.len() > 14 && payload[12..14] != [0, 0]).then(|| {
                let mut p = payload.freeze();
                p.advance(12);
                p
            });
            Frame::Header(channel, size, props)
        }
        FRAME_BODY => Frame::Body(channel, payload.freeze()),
        FRAME_HEARTBEAT => Frame::Heartbeat,
        other => return Err(ProtoError(format!("unknown frame type {other}"))),
    }))
}

/// The frames that precede every body published with the same routing key, encoded once.
#[derive(Debug, Clone)]
pub struct PublishTemplate {
    method: Bytes,
    header: Bytes,
    channel: ChannelId,
}

/// Offset of the body size inside an encoded content header frame.
const BODY_SIZE_AT: usize = 7 + 4;

impl PublishTemplate {
    /// Encodes basic.publish and the content header for these settings.
    pub fn new(
        channel: ChannelId,
        exchange: &str,
        routing_key: &str,
        mandatory: bool,
        persistent: bool,
    ) -> Self {
        let mut m = BytesMut::new();
        put_method(
            &mut m,
            channel,
            AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish {
                exchange: ShortString::from(exchange),
                routing_key: ShortString::from(routing_key),
                mandatory,
                immediate: false,
            })),
        );
        let mut props = basic::AMQPProperties::default();
        if persistent {
            props = props.with_delivery_mode(2);
        }
        let mut h = BytesMut::new();
        put_frame(
            &mut h,
            &AMQPFrame::Header(
                channel,
                amq_protocol::frame::AMQPContentHeader {
                    class_id: 60,
                    body_size: 0,
                    properties: props,
                },
            ),
        );
        Self {
            method: m.freeze(),
            header: h.freeze(),
            channel,
        }
    }

    /// Appends one message: method, header and body frames no larger than `frame_max`.
    pub fn put(&self, buf: &mut BytesMut, body: &[u8], frame_max: usize) {
        let chunk = frame_max.saturating_sub(8).max(1);
        let frames = body.len().div_ceil(chunk);
        buf.reserve(self.method.len() + self.header.len() + body.len() + frames * 8);
        buf.put_slice(&self.method);
        let at = buf.len() + BODY_SIZE_AT;
        buf.put_slice(&self.header);
        buf[at..at + 8].copy_from_slice(&(body.len() as u64).to_be_bytes());
        put_body(buf, self.channel, body, chunk);
    }
}

/// The correlation-id in a content header's properties (as [`Frame::Header`] carries them:
/// the 16-bit flags, then the properties present, in flag order). `None` when it is not set or
/// the list is cut short.
pub fn correlation_id(props: &[u8]) -> Option<&[u8]> {
    let flags = u16::from_be_bytes(props.get(..2)?.try_into().ok()?);
    if flags & (1 << 10) == 0 || flags & 1 != 0 {
        // Not set, or a continuation of the flags, which AMQP 0-9-1 brokers do not send.
        return None;
    }
    let mut at = 2;
    let short = |at: &mut usize| -> Option<()> {
        *at += 1 + *props.get(*at)? as usize;
        Some(())
    };
    for bit in [15, 14] {
        if flags & (1 << bit) != 0 {
            short(&mut at)?;
        }
    }
    if flags & (1 << 13) != 0 {
        let len = u32::from_be_bytes(props.get(at..at + 4)?.try_into().ok()?) as usize;
        at += 4 + len;
    }
    for bit in [12, 11] {
        if flags & (1 << bit) != 0 {
            at += 1;
        }
    }
    let len = *props.get(at)? as usize;
    props.get(at + 1..at + 1 + len)
}

/// The `x-stream-offset` header of a delivery from a RabbitMQ stream (its place in the
/// stream), in a content header's properties as [`Frame::Header`] carries them. `None` when
/// the headers table does not hold it, or holds something this walk does not know how to step
/// over (it reads only the field types AMQP 0-9-1 and RabbitMQ define).
pub fn stream_offset(props: &[u8]) -> Option<u64> {
    let flags = u16::from_be_bytes(props.get(..2)?.try_into().ok()?);
    if flags & (1 << 13) == 0 || flags & 1 != 0 {
        return None;
    }
    let mut at = 2;
    for bit in [15, 14] {
        if flags & (1 << bit) != 0 {
            at += 1 + *props.get(at)? as usize;
        }
    }
    let len = u32::from_be_bytes(props.get(at..at + 4)?.try_into().ok()?) as usize;
    let table = props.get(at + 4..at + 4 + len)?;
    let mut at = 0;
    while at < table.len() {
        let name_len = *table.get(at)? as usize;
        let name = table.get(at + 1..at + 1 + name_len)?;
        at += 1 + name_len;
        let kind = *table.get(at)?;
        at += 1;
        if name == b"x-stream-offset" && kind == b'l' {
            return Some(i64::from_be_bytes(table.get(at..at + 8)?.try_into().ok()?) as u64);
        }
        let size = match kind {
            b'V' => 0,
            b't' | b'b' | b'B' => 1,
            b's' | b'u' => 2,
            b'I' | b'i' | b'f' => 4,
            b'D' => 5,
            b'l' | b'L' | b'd' | b'T' => 8,
            b'S' | b'x' | b'A' | b'F' => {
                4 + u32::from_be_bytes(table.get(at..at + 4)?.try_into().ok()?) as usize
            }
            _ => return None,
        };
        at += size;
    }
    None
}

/// Appends one request: basic.publish of `body` to `routing_key` on the default exchange,
/// with reply-to and correlation-id set (the two properties an RPC responder answers by).
/// Encoded per request, unlike [`PublishTemplate`]: requests wait for their replies one at a
/// time, so this is not a throughput path.
pub fn put_request(
    buf: &mut BytesMut,
    channel: ChannelId,
    routing_key: &str,
    body: &[u8],
    frame_max: usize,
    reply_to: &str,
    correlation_id: &str,
) {
    put_method(
        buf,
        channel,
        AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish {
            exchange: ShortString::from(""),
            routing_key: ShortString::from(routing_key),
            mandatory: false,
            immediate: false,
        })),
    );
    let props = basic::AMQPProperties::default()
        .with_reply_to(ShortString::from(reply_to))
        .with_correlation_id(ShortString::from(correlation_id));
    put_frame(
        buf,
        &AMQPFrame::Header(
            channel,
            amq_protocol::frame::AMQPContentHeader {
                class_id: 60,
                body_size: body.len() as u64,
                properties: props,
            },
        ),
    );
    put_body(buf, channel, body, frame_max.saturating_sub(8).max(1));
}

/// Appends `body` as body frames of at most `chunk` bytes each.
#[inline]
fn put_body(buf: &mut BytesMut, channel: ChannelId, body: &[u8], chunk: usize) {
    for piece in body.chunks(chunk) {
        buf.put_u8(FRAME_BODY);
        buf.put_u16(channel);
        buf.put_u32(piece.len() as u32);
        buf.put_slice(piece);
        buf.put_u8(FRAME_END);
    }
}

/// Appends basic.ack.
pub fn put_ack(buf: &mut BytesMut, channel: ChannelId, delivery_tag: u64, multiple: bool) {
    put_method(
        buf,
        channel,
        AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
            delivery_tag,
            multiple,
        })),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::types::{AMQPValue, FieldTable};

    #[test]
    fn another_protocols_header_is_named() {
        for (h, says) in [
            (&b"AMQP\x03\x01\x00\x00"[..], "AMQP 1.0"),
            (b"AMQP\x01\x01\x00\x0a", "AMQP 0-10"),
            (b"AMQP\x00\x00\x09\x01", "AMQP 0.0.9.1"),
        ] {
            let e = parse(&mut BytesMut::from(h), 4096).unwrap_err();
            assert!(e.0.contains(says), "{e}");
        }
    }

    #[test]
    fn publish_frames_round_trip() {
        let t = PublishTemplate::new(1, "ex", "key", false, true);
        let mut b = BytesMut::new();
        let body = vec![7u8; 300];
        t.put(&mut b, &body, 128);
        let Some(Frame::Method(1, m)) = parse(&mut b, 4096).unwrap() else {
            panic!("method first")
        };
        match *m {
            AMQPClass::Basic(basic::AMQPMethod::Publish(p)) => {
                assert_eq!(p.routing_key.as_str(), "key");
            }
            other => panic!("{other:?}"),
        }
        // Persistent: delivery-mode is a property, so the header carries them; no correlation.
        let Some(Frame::Header(1, 300, Some(props))) = parse(&mut b, 4096).unwrap() else {
            panic!("header next")
        };
        assert_eq!(correlation_id(&props), None);
        let mut got = Vec::new();
        while let Some(Frame::Body(1, piece)) = parse(&mut b, 4096).unwrap() {
            assert!(piece.len() <= 120);
            got.extend_from_slice(&piece);
        }
        assert_eq!(got, body);
        assert!(b.is_empty());
    }

    /// A request carries reply-to and correlation-id; the header hands the properties over
    /// and the correlation-id is found past the ones before it in flag order. A header without
    /// properties carries none.
    #[test]
    fn requests_carry_their_correlation_id() {
        let mut b = BytesMut::new();
        put_request(
            &mut b,
            1,
            "svc",
            b"ping",
            4096,
            "amq.rabbitmq.reply-to",
            "42",
        );
        assert!(matches!(
            parse(&mut b, 4096).unwrap(),
            Some(Frame::Method(1, _))
        ));
        let Some(Frame::Header(1, 4, Some(props))) = parse(&mut b, 4096).unwrap() else {
            panic!("header with properties")
        };
        assert_eq!(correlation_id(&props), Some(&b"42"[..]));
        assert!(
            matches!(parse(&mut b, 4096).unwrap(), Some(Frame::Body(1, p)) if &p[..] == b"ping")
        );
        // Properties before it (content-type, headers, delivery-mode, priority) are skipped.
        let mut headers = FieldTable::default();
        headers.insert("k".into(), AMQPValue::LongString("v".into()));
        let props = basic::AMQPProperties::default()
            .with_content_type(ShortString::from("text/plain"))
            .with_headers(headers)
            .with_delivery_mode(2)
            .with_priority(3)
            .with_correlation_id(ShortString::from("abc"))
            .with_message_id(ShortString::from("m"));
        let props = header_props(props);
        assert_eq!(correlation_id(&props), Some(&b"abc"[..]));
        assert_eq!(correlation_id(&props[..props.len() - 3]), None, "cut short");
        let t = PublishTemplate::new(1, "", "q", false, false);
        let mut b = BytesMut::new();
        t.put(&mut b, b"x", 4096);
        parse(&mut b, 4096).unwrap();
        assert!(matches!(
            parse(&mut b, 4096).unwrap(),
            Some(Frame::Header(1, 1, None))
        ));
    }

    /// The property bytes [`Frame::Header`] carries for a content header with `props`.
    fn header_props(props: basic::AMQPProperties) -> Bytes {
        let mut h = BytesMut::new();
        let header = amq_protocol::frame::AMQPContentHeader {
            class_id: 60,
            body_size: 0,
            properties: props,
        };
        put_frame(&mut h, &AMQPFrame::Header(1, header));
        let Some(Frame::Header(1, 0, Some(props))) = parse(&mut h, 4096).unwrap() else {
            panic!("header")
        };
        props
    }

    /// A stream delivery's offset is found in its headers table past other entries of every
    /// fixed and sized type, after content-type and content-encoding; absent, cut short, or of
    /// another type, it is not invented.
    #[test]
    fn a_stream_deliverys_offset_is_read_from_its_headers() {
        let header = |headers: FieldTable| {
            header_props(
                basic::AMQPProperties::default()
                    .with_content_type(ShortString::from("application/octet-stream"))
                    .with_content_encoding(ShortString::from("identity"))
                    .with_headers(headers)
                    .with_delivery_mode(2),
            )
        };
        let mut t = FieldTable::default();
        t.insert("a-bool".into(), AMQPValue::Boolean(true));
        t.insert("a-short".into(), AMQPValue::ShortInt(-2));
        t.insert("a-long".into(), AMQPValue::LongInt(7));
        t.insert("a-str".into(), AMQPValue::LongString("text".into()));
        t.insert("a-time".into(), AMQPValue::Timestamp(1_700_000_000));
        let mut inner = FieldTable::default();
        inner.insert("x".into(), AMQPValue::LongLongInt(1));
        t.insert("a-table".into(), AMQPValue::FieldTable(inner));
        t.insert("a-void".into(), AMQPValue::Void);
        t.insert(
            "x-stream-offset".into(),
            AMQPValue::LongLongInt(123_456_789_012),
        );
        let props = header(t.clone());
        assert_eq!(stream_offset(&props), Some(123_456_789_012));
        assert_eq!(stream_offset(&props[..props.len() - 4]), None, "cut short");
        t.insert("x-stream-offset".into(), AMQPValue::LongInt(5));
        assert_eq!(stream_offset(&header(t)), None, "not a long-long");
        assert_eq!(stream_offset(&header(FieldTable::default())), None);
    }

    #[test]
    fn deep_tables_are_refused_before_parsing() {
        let mut deep = vec![0u8, 0, 0, 0];
        for _ in 0..2000 {
            let mut t = ((2 + deep.len()) as u32).to_be_bytes().to_vec();
            t.extend_from_slice(&[0, b'F']);
            t.extend_from_slice(&deep);
            deep = t;
        }
        let mut b = BytesMut::new();
        b.put_u8(FRAME_METHOD);
        b.put_u16(0);
        b.put_u32(deep.len() as u32 + 4);
        b.put_slice(&[0, 10, 0, 10]); // connection.start
        b.put_slice(&deep);
        b.put_u8(FRAME_END);
        let e = parse(&mut b, 1 << 20).unwrap_err();
        assert!(e.0.contains("nested"), "{e}");
        assert!(nesting_ok(b"FFFFAAAA plain text, not tables"));
    }

    #[test]
    fn incomplete_and_bad_frames() {
        let mut b = BytesMut::new();
        put_heartbeat(&mut b);
        let mut part = BytesMut::from(&b[..5]);
        assert!(parse(&mut part, 4096).unwrap().is_none());
        assert!(matches!(
            parse(&mut b, 4096).unwrap(),
            Some(Frame::Heartbeat)
        ));
        let mut bad = BytesMut::from(&[8u8, 0, 0, 0, 0, 0, 0, 0xAB][..]);
        assert!(parse(&mut bad, 4096).is_err());
        let mut huge = BytesMut::from(&[3u8, 0, 1, 0x7f, 0, 0, 0][..]);
        assert!(parse(&mut huge, 131_072).is_err());
    }
}
