//! msgbench's protocol-neutral [`Meta`] and bodies ↔ AMQP 1.0 message sections.
//!
//! Sent: `message-id`, `correlation-id` (strings) and `creation-time` go into `properties`,
//! application properties into `application-properties` (string, boolean, long), the body into
//! one `data` section or an `amqp-value` string. Received: ids of any AMQP type (ulong, uuid,
//! binary, string) become strings, property values of other types are stringified, and a body
//! becomes bytes whatever section carried it.

use crate::client::{OutBody, OutMessage};
use bytes::{Bytes, BytesMut};
use fe2o3_amqp::types::messaging::{
    AmqpValue, ApplicationProperties, Batch, Body, Data, Header, Message, MessageId, Properties,
};
use fe2o3_amqp::types::primitives::{OrderedMap, SimpleValue, Timestamp, Value};
use msgbench_core::meta::{self, Meta};

/// The AMQP message for `m`.
pub(crate) fn message(m: OutMessage<'_>) -> Message<Body<Value>> {
    let body = match m.body {
        OutBody::Data(b) => Body::Data(Batch::new(vec![Data::from(b)])),
        OutBody::Text(s) => Body::Value(AmqpValue(Value::String(s.to_string()))),
    };
    let header = m.durable.then(|| Header {
        durable: true,
        ..Header::default()
    });
    let (properties, application_properties) = match m.meta {
        None => (None, None),
        Some(meta) => {
            let props = (meta.message_id.is_some()
                || meta.correlation_id.is_some()
                || meta.creation_time_ms.is_some())
            .then(|| Properties {
                message_id: meta.message_id.clone().map(MessageId::String),
                correlation_id: meta.correlation_id.clone().map(MessageId::String),
                creation_time: meta
                    .creation_time_ms
                    .map(|ms| Timestamp::from_milliseconds(ms.min(i64::MAX as u64) as i64)),
                ..Properties::default()
            });
            let app = (!meta.properties.is_empty()).then(|| {
                let mut map = OrderedMap::new();
                for (k, v) in &meta.properties {
                    map.insert(k.clone(), simple(v));
                }
                ApplicationProperties(map)
            });
            (props, app)
        }
    };
    Message {
        header,
        delivery_annotations: None,
        message_annotations: None,
        properties,
        application_properties,
        body,
        footer: None,
    }
}

fn simple(v: &meta::Value) -> SimpleValue {
    match v {
        meta::Value::Str(s) => SimpleValue::String(s.clone()),
        meta::Value::Bool(b) => SimpleValue::Bool(*b),
        meta::Value::Int(i) => SimpleValue::Long(*i),
    }
}

/// The metadata of a received message.
pub(crate) fn meta_of(m: &Message<Body<Value>>) -> Meta {
    let mut out = Meta::default();
    if let Some(p) = &m.properties {
        out.message_id = p.message_id.as_ref().map(id_string);
        out.correlation_id = p.correlation_id.as_ref().map(id_string);
        out.creation_time_ms = p
            .creation_time
            .as_ref()
            .and_then(|t| u64::try_from(t.milliseconds()).ok());
    }
    if let Some(app) = &m.application_properties {
        out.properties = app
            .0
            .iter()
            .map(|(k, v)| (k.clone(), value_of(v)))
            .collect();
    }
    out
}

/// A message id of any AMQP type as a string (a UUID in its usual hyphenated form, binary as
/// UTF-8 when it is, else hex).
pub fn id_string(id: &MessageId) -> String {
    match id {
        MessageId::String(s) => s.clone(),
        MessageId::Ulong(n) => n.to_string(),
        MessageId::Uuid(u) => uuid_string(u.as_ref()),
        MessageId::Binary(b) => bytes_string(b),
    }
}

fn uuid_string(b: &[u8; 16]) -> String {
    let mut s = String::with_capacity(36);
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push_str(&format!("{byte:02x}"));
    }
    s
}

fn bytes_string(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => s.to_string(),
        Err(_) => b.iter().map(|x| format!("{x:02x}")).collect(),
    }
}

fn value_of(v: &SimpleValue) -> meta::Value {
    use meta::Value as M;
    match v {
        SimpleValue::Bool(b) => M::Bool(*b),
        SimpleValue::String(s) => M::Str(s.clone()),
        SimpleValue::Symbol(s) => M::Str(s.0.clone()),
        SimpleValue::Ubyte(n) => M::Int(*n as i64),
        SimpleValue::Ushort(n) => M::Int(*n as i64),
        SimpleValue::Uint(n) => M::Int(*n as i64),
        SimpleValue::Ulong(n) => match i64::try_from(*n) {
            Ok(i) => M::Int(i),
            Err(_) => M::Str(n.to_string()),
        },
        SimpleValue::Byte(n) => M::Int(*n as i64),
        SimpleValue::Short(n) => M::Int(*n as i64),
        SimpleValue::Int(n) => M::Int(*n as i64),
        SimpleValue::Long(n) => M::Int(*n),
        SimpleValue::Timestamp(t) => M::Int(t.milliseconds()),
        SimpleValue::Uuid(u) => M::Str(uuid_string(u.as_ref())),
        SimpleValue::Binary(b) => M::Str(bytes_string(b)),
        SimpleValue::Char(c) => M::Str(c.to_string()),
        SimpleValue::Float(f) => M::Str(f.to_string()),
        SimpleValue::Double(f) => M::Str(f.to_string()),
        SimpleValue::Null => M::Str(String::new()),
        other => M::Str(format!("{other:?}")),
    }
}

/// The body as bytes, and whether it was an `amqp-value` string: data sections concatenated;
/// an `amqp-value` string's UTF-8 or binary's bytes; nothing for other sections.
pub(crate) fn body_of(b: Body<Value>) -> (Bytes, bool) {
    match b {
        Body::Data(batch) => {
            let mut sections = batch.into_inner();
            if sections.len() == 1 {
                let Data(bin) = sections.remove(0);
                return (Bytes::from(bin.into_vec()), false);
            }
            let mut all = BytesMut::with_capacity(sections.iter().map(|d| d.0.len()).sum());
            for Data(bin) in sections {
                all.extend_from_slice(&bin);
            }
            (all.freeze(), false)
        }
        Body::Value(AmqpValue(Value::String(s))) => (Bytes::from(s.into_bytes()), true),
        Body::Value(AmqpValue(Value::Symbol(s))) => (Bytes::from(s.0.into_bytes()), true),
        Body::Value(AmqpValue(Value::Binary(b))) => (Bytes::from(b.into_vec()), false),
        _ => (Bytes::new(), false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fe2o3_amqp::types::primitives::{Binary, Uuid};

    #[test]
    fn meta_round_trips_and_ids_become_strings() {
        let meta = Meta {
            message_id: Some("m-1".into()),
            correlation_id: Some("7-run".into()),
            creation_time_ms: Some(1_700_000_000_123),
            properties: vec![
                ("receiverCode".into(), meta::Value::Str("X".into())),
                ("isTracingMessage".into(), meta::Value::Bool(true)),
                ("n".into(), meta::Value::Int(-3)),
            ],
        };
        let m = message(OutMessage {
            meta: Some(&meta),
            body: OutBody::Data(b"abc"),
            durable: true,
        });
        assert!(m.header.as_ref().is_some_and(|h| h.durable));
        assert_eq!(meta_of(&m), meta);
        assert_eq!(body_of(m.body), (Bytes::from_static(b"abc"), false));

        let t = message(OutMessage {
            meta: None,
            body: OutBody::Text("DELIVERED"),
            durable: false,
        });
        assert!(t.header.is_none() && t.properties.is_none());
        assert_eq!(body_of(t.body), (Bytes::from_static(b"DELIVERED"), true));

        assert_eq!(id_string(&MessageId::Ulong(42)), "42");
        assert_eq!(
            id_string(&MessageId::Uuid(Uuid::from([0x12u8; 16]))),
            "12121212-1212-1212-1212-121212121212"
        );
        assert_eq!(
            id_string(&MessageId::Binary(Binary::from(vec![0xff, 1]))),
            "ff01"
        );
        assert_eq!(
            value_of(&SimpleValue::Ulong(u64::MAX)),
            meta::Value::Str(u64::MAX.to_string())
        );
        let two = Body::Data(Batch::new(vec![
            Data::from(&b"ab"[..]),
            Data::from(&b"c"[..]),
        ]));
        assert_eq!(body_of(two).0, Bytes::from_static(b"abc"));
    }
}
