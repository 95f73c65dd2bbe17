//! The frame layer: splitting the byte stream into frames with amq-protocol's parsers (in
//! place: a frame's payload is a slice of the read buffer), writing frames with its generator
//! (including the connection.start and tune every connection gets, generated once per sink),
//! and the guard against deeply nested field tables.

use amq_protocol::frame::parsing::{parse_frame_type, parse_protocol_header, parse_raw_frame};
use amq_protocol::frame::{AMQPFrame, AMQPFrameType, ProtocolVersion, WriteContext, gen_frame};
use amq_protocol::protocol::{AMQPClass, connection};
use amq_protocol::types::parsing::{parse_id, parse_long_uint};
use amq_protocol::types::{AMQPValue, FieldTable, LongString};

/// Type octet, channel and payload size.
pub(crate) const HEADER_LEN: usize = 7;
/// Header plus the frame-end octet.
pub(crate) const OVERHEAD: usize = HEADER_LEN + 1;
pub(crate) use msgbench_driver_amqp::codec::nesting_ok;

/// One complete frame, borrowed from the read buffer.
#[derive(Debug)]
pub(crate) struct Raw<'a> {
    pub ty: AMQPFrameType,
    pub channel: u16,
    pub payload: &'a [u8],
}

/// What the front of the read buffer holds.
#[derive(Debug)]
pub(crate) enum Next<'a> {
    /// A complete frame, and its length on the wire.
    Frame(Raw<'a>, usize),
    /// An incomplete frame: this many bytes are needed in all.
    Need(usize),
    /// Not a frame, or a frame larger than the limit.
    Bad(&'static str),
}

/// Splits the next frame off `buf`, refusing frames longer than `max` bytes (header and
/// frame-end included) as soon as their header has arrived.
pub(crate) fn next(buf: &[u8], max: u32) -> Next<'_> {
    if buf.len() < HEADER_LEN {
        return Next::Need(HEADER_LEN);
    }
    let Ok((rest, ty)) = parse_frame_type(buf) else {
        return Next::Bad("unknown frame type");
    };
    if ty == AMQPFrameType::ProtocolHeader {
        return Next::Bad("protocol header inside a connection");
    }
    let Ok((rest, _channel)) = parse_id(rest) else {
        return Next::Bad("truncated frame header");
    };
    let Ok((_, size)) = parse_long_uint(rest) else {
        return Next::Bad("truncated frame header");
    };
    let total = OVERHEAD as u64 + u64::from(size);
    if total > u64::from(max) {
        return Next::Bad("frame larger than frame-max");
    }
    let total = total as usize;
    if buf.len() < total {
        return Next::Need(total);
    }
    match parse_raw_frame(ty)(&buf[1..total]) {
        Ok((_, raw)) => Next::Frame(
            Raw {
                ty,
                channel: raw.channel_id,
                payload: raw.payload,
            },
            total,
        ),
        Err(_) => Next::Bad("frame-end octet missing"),
    }
}

/// Whether the 8 bytes of `buf` are the AMQP 0-9-1 protocol header.
pub(crate) fn is_protocol_header(buf: &[u8; 8]) -> bool {
    matches!(parse_frame_type(&buf[..]), Ok((rest, AMQPFrameType::ProtocolHeader))
        if parse_protocol_header(rest).is_ok_and(|(_, v)| v == ProtocolVersion::amqp_0_9_1()))
}

/// Appends `frame` to `out`; false if it could not be generated (the caller then closes the
/// connection: writing to a `Vec` does not fail, so this does not happen in practice).
#[must_use]
pub(crate) fn put(out: &mut Vec<u8>, frame: &AMQPFrame) -> bool {
    let buf = std::mem::take(out);
    match gen_frame(frame)(WriteContext::from(buf)) {
        Ok(ctx) => {
            *out = ctx.into_inner().0;
            true
        }
        Err(_) => false,
    }
}

/// A frame generated on its own.
pub(crate) fn encode(frame: &AMQPFrame) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    let ok = put(&mut out, frame);
    debug_assert!(ok);
    out
}

/// The heartbeat frame.
pub(crate) fn heartbeat() -> Vec<u8> {
    encode(&AMQPFrame::Heartbeat)
}

/// The AMQP 0-9-1 protocol header, sent to a client that opens with anything else.
pub(crate) fn protocol_header() -> Vec<u8> {
    encode(&AMQPFrame::ProtocolHeader(ProtocolVersion::amqp_0_9_1()))
}

/// connection.start as the sink sends it.
pub(crate) fn start_frame() -> Vec<u8> {
    let mut caps = FieldTable::default();
    for cap in [
        "publisher_confirms",
        "basic.nack",
        "consumer_cancel_notify",
        "exchange_exchange_bindings",
        "per_consumer_qos",
        "authentication_failure_close",
    ] {
        caps.insert(cap.into(), AMQPValue::Boolean(true));
    }
    let mut props = FieldTable::default();
    let s = |v: &str| AMQPValue::LongString(LongString::from(v));
    props.insert("product".into(), s("msgbench amqp-sink"));
    props.insert("version".into(), s(env!("CARGO_PKG_VERSION")));
    props.insert("platform".into(), s("Rust"));
    props.insert("capabilities".into(), AMQPValue::FieldTable(caps));
    encode(&AMQPFrame::Method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::Start(connection::Start {
            version_major: 0,
            version_minor: 9,
            server_properties: props,
            mechanisms: "PLAIN AMQPLAIN".into(),
            locales: "en_US".into(),
        })),
    ))
}

/// connection.tune with the sink's limits.
pub(crate) fn tune_frame(channel_max: u16, frame_max: u32, heartbeat: u16) -> Vec<u8> {
    encode(&AMQPFrame::Method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::Tune(connection::Tune {
            channel_max,
            frame_max,
            heartbeat,
        })),
    ))
}

/// A field table nested `depth` deep, as it appears on the wire: each level is one entry
/// with an empty key.
#[cfg(test)]
pub(crate) fn nested_table(depth: usize) -> Vec<u8> {
    let mut inner = vec![0, 0, 0, 0];
    for _ in 0..depth {
        let mut t = ((2 + inner.len()) as u32).to_be_bytes().to_vec();
        t.extend_from_slice(&[0, b'F']);
        t.extend_from_slice(&inner);
        inner = t;
    }
    inner
}

#[cfg(test)]
mod unit {
    use super::*;
    use msgbench_driver_amqp::codec::MAX_NESTING;

    #[test]
    fn nesting_guard_bounds_depth() {
        assert!(nesting_ok(&nested_table(MAX_NESTING - 1)));
        assert!(!nesting_ok(&nested_table(MAX_NESTING + 1)));
        assert!(!nesting_ok(&nested_table(20_000)));
        // Many sibling tables are fine: their spans do not overlap.
        let mut wide = Vec::new();
        for _ in 0..1000 {
            wide.extend_from_slice(&[1, b'k', b'F', 0, 0, 0, 0]);
        }
        assert!(nesting_ok(&wide));
        assert!(nesting_ok(b"FFFFAAAA plain text, not tables"));
    }

    #[test]
    fn splits_frames_and_enforces_max() {
        let hb = heartbeat();
        let mut two = hb.clone();
        two.extend_from_slice(&hb);
        match next(&two, 4096) {
            Next::Frame(f, 8) => assert_eq!((f.ty, f.channel), (AMQPFrameType::Heartbeat, 0)),
            other => panic!("{other:?}"),
        }
        assert!(matches!(next(&hb[..5], 4096), Next::Need(7)));
        let body = encode(&AMQPFrame::Body(3, vec![7; 100]));
        assert!(matches!(next(&body[..50], 4096), Next::Need(108)));
        assert!(matches!(next(&body, 107), Next::Bad(_)));
        let mut bad_end = body.clone();
        *bad_end.last_mut().unwrap() = 0;
        assert!(matches!(next(&bad_end, 4096), Next::Bad(_)));
        assert!(matches!(
            next(&[9, 0, 0, 0, 0, 0, 0, 0xce], 4096),
            Next::Bad(_)
        ));
        assert!(is_protocol_header(b"AMQP\x00\x00\x09\x01"));
        assert!(!is_protocol_header(b"AMQP\x01\x01\x00\x09"));
    }
}
