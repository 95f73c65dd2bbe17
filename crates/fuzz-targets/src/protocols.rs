//! Targets for the MQTT, AMQP 0-9-1, AMQP 1.0 and HTTP decoders, client and server sides.

use crate::{feed, mode, piece};
use bytes::BytesMut;
use msgbench_driver_amqp::codec as amqp;
use msgbench_driver_amqp10::codec::{Dec, Enc, Value};
use msgbench_driver_amqp10::frames::{Performative, split_frame};
use msgbench_driver_amqp10::message::{id_string, read_message};
use msgbench_driver_mqtt::codec::{self as mqtt, Packet, Version};

/// The largest packet or frame the stream targets accept: larger than any fuzzer input, so
/// the limit checks are exercised only by the lengths the inputs claim.
const MAX: usize = 1 << 20;

/// The MQTT client codec (`msgbench_driver_mqtt::codec::parse`), both versions (low mode
/// bit: MQTT 5), with a round trip for the packets it also encodes.
pub fn mqtt_codec(data: &[u8]) {
    let (m, stream) = mode(data);
    let version = if m & 1 == 1 {
        Version::V5
    } else {
        Version::V311
    };
    feed(stream, piece(m), |buf| {
        match mqtt::parse(buf, version, MAX) {
            Ok(Some(p)) => {
                mqtt_round_trip(&p, version);
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(_) => Err(()),
        }
    });
}

/// Encodes `p` (if the codec encodes its kind) and checks it decodes back to `p`.
fn mqtt_round_trip(p: &Packet, v: Version) {
    let mut b = BytesMut::new();
    match p {
        Packet::Publish(x) => {
            let (topic, payload) = (&x.topic[..], &x.payload[..]);
            mqtt::put_publish(&mut b, v, topic, payload, x.qos, x.retain, x.dup, x.pid);
        }
        Packet::Subscribe { pid, filters } => {
            let f: Vec<(&str, u8)> = filters.iter().map(|(s, q)| (s.as_str(), *q)).collect();
            mqtt::put_subscribe(&mut b, v, *pid, &f);
        }
        Packet::Unsubscribe { pid, filters } => {
            let f: Vec<&str> = filters.iter().map(String::as_str).collect();
            mqtt::put_unsubscribe(&mut b, v, *pid, &f);
        }
        Packet::SubAck { pid, codes } => mqtt::put_suback(&mut b, v, *pid, codes),
        Packet::PingReq => mqtt::put_pingreq(&mut b),
        Packet::PingResp => mqtt::put_pingresp(&mut b),
        _ => return,
    }
    let again = mqtt::parse(&mut b, v, usize::MAX);
    assert_eq!(again, Ok(Some(p.clone())), "MQTT round trip");
    assert!(b.is_empty(), "MQTT round trip left bytes");
}

/// The MQTT broker's reader (`msgbench serve mqtt`): CONNECT with its will, then packets with
/// their MQTT 5 properties and subscription options, filters and topics checked.
pub fn mqtt_broker(data: &[u8]) {
    msgbench_serve::mqtt::fuzzing::broker_reads(data);
}

/// The AMQP 0-9-1 client's frame parser (`msgbench_driver_amqp::codec::parse`, methods decoded
/// by amq-protocol behind the nesting guard); a method re-encodes to bytes that decode and
/// encode the same (bytes, not values, are compared: field tables may hold NaN).
pub fn amqp_client(data: &[u8]) {
    let (m, stream) = mode(data);
    feed(stream, piece(m), |buf| match amqp::parse(buf, 131_072) {
        Ok(Some(amqp::Frame::Method(ch, class))) => {
            let mut once = BytesMut::new();
            amqp::put_method(&mut once, ch, *class);
            let mut again = once.clone();
            let Ok(Some(amqp::Frame::Method(ch2, class2))) = amqp::parse(&mut again, MAX) else {
                panic!("a re-encoded method does not parse: {once:?}");
            };
            let mut twice = BytesMut::new();
            amqp::put_method(&mut twice, ch2, *class2);
            assert_eq!(once, twice, "AMQP method round trip");
            Ok(true)
        }
        Ok(Some(_)) => Ok(true),
        Ok(None) => Ok(false),
        Err(_) => Err(()),
    });
}

/// The AMQP 0-9-1 sink's connection (`msgbench serve amqp-sink`): handshake, channels,
/// methods, content; low mode bit: the protocol header is sent first.
pub fn amqp_sink(data: &[u8]) {
    let (m, stream) = mode(data);
    msgbench_serve::amqp::fuzzing::sink_reads(stream, piece(m), m & 1 == 1);
}

/// The AMQP 1.0 type decoder (`msgbench_driver_amqp10::codec::Dec`), walked as its users walk
/// it (lists, maps, arrays and described values entered, items read until the cursor is
/// empty), with a round trip for the scalars the encoder writes.
pub fn amqp10_codec(data: &[u8]) {
    walk(Dec::new(data), 0);
}

fn walk(mut d: Dec<'_>, depth: usize) {
    while !d.is_empty() {
        let Ok(v) = d.read() else { return };
        match v {
            Value::List(inner)
            | Value::Map(inner)
            | Value::Array(inner)
            | Value::Described(_, inner) => {
                if depth < 32 {
                    walk(inner, depth + 1);
                }
            }
            v => {
                let _ = (v.as_str(), v.as_u32(), v.as_bool(), id_string(v));
                amqp10_round_trip(v);
            }
        }
    }
}

fn amqp10_round_trip(v: Value<'_>) {
    let mut buf = BytesMut::new();
    let mut e = Enc::new(&mut buf);
    match v {
        Value::Null => e.null(),
        Value::Bool(b) => e.bool(b),
        Value::Uint(n) => e.ulong(n),
        Value::Int(n) => e.long(n),
        Value::Timestamp(t) => e.timestamp(t),
        Value::Binary(b) => e.binary(b),
        Value::Str(s) => e.str(s),
        Value::Symbol(s) => e.symbol(s),
        _ => return,
    };
    let mut d = Dec::new(&buf);
    assert_eq!(d.read().ok(), Some(v), "AMQP 1.0 round trip");
    assert!(d.rest().is_empty(), "AMQP 1.0 round trip left bytes");
}

/// AMQP 1.0 frames as a connection reads them (`split_frame`, `Performative::parse`, and a
/// transfer's message with `read_message`; low mode bit: with its properties).
pub fn amqp10_frames(data: &[u8]) {
    let (m, stream) = mode(data);
    let with_meta = m & 1 == 1;
    feed(stream, piece(m), |buf| match split_frame(buf) {
        Ok(Some((_kind, _channel, body))) => match Performative::parse(&body) {
            Ok(Performative::Transfer(t)) => {
                read_message(&body.slice(t.payload_at..), with_meta).map_err(|_| ())?;
                Ok(true)
            }
            Ok(_) => Ok(true),
            Err(_) => Err(()),
        },
        Ok(None) => Ok(false),
        Err(_) => Err(()),
    });
}

/// The HTTP/1.1 client's response parser (heads, Content-Length, chunked, until-close bodies;
/// low mode bit: responses to HEAD).
pub fn http1_response(data: &[u8]) {
    let (m, stream) = mode(data);
    msgbench_driver_http::fuzzing::h1_responses(stream, piece(m), m & 1 == 1);
}

/// The built-in HTTP server (`msgbench serve http`, hyper's HTTP/1.1 and h2c behind
/// hyper-util's protocol detection) given one client connection's bytes.
pub fn http_server(data: &[u8]) {
    msgbench_serve::http::fuzzing::server_connection(data);
}
