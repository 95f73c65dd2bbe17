//! AMQP 1.0 messages (spec part 3) as msgbench sends and receives them: metadata ([`Meta`]:
//! message-id, correlation-id, creation-time, application properties) and a body.
//!
//! Sent: ids (strings) and `creation-time` go into `properties`, application properties
//! (string, boolean, long) into `application-properties`, the body into one `data` section or
//! an `amqp-value` string; `durable` sets the header. Received: ids of any AMQP type (ulong,
//! uuid, binary, string) become strings, property values of other types are stringified, and
//! the body comes back as a slice of the frame it arrived in, whatever section carried it.

use crate::codec::{CodecError, Dec, Enc, Value};
use bytes::{Bytes, BytesMut};
use msgbench_core::meta::{self, Meta};

const HEADER: u64 = 0x70;
const PROPERTIES: u64 = 0x73;
const APP_PROPERTIES: u64 = 0x74;
const DATA: u64 = 0x75;
const AMQP_VALUE: u64 = 0x77;

/// A message as msgbench sends it.
#[derive(Debug, Clone, Copy)]
pub struct OutMessage<'a> {
    /// Ids, creation time and application properties.
    pub meta: Option<&'a Meta>,
    /// The body.
    pub body: OutBody<'a>,
    /// The `durable` header.
    pub durable: bool,
}

/// A message body.
#[derive(Debug, Clone, Copy)]
pub enum OutBody<'a> {
    /// One `data` section.
    Data(&'a [u8]),
    /// An `amqp-value` string.
    Text(&'a str),
}

/// Appends `m`'s sections: header (when durable), properties and application properties
/// (from its metadata), and the body.
pub fn put_message(buf: &mut BytesMut, m: &OutMessage<'_>) {
    let mut e = Enc::new(buf);
    if m.durable {
        e.list(HEADER).bool(true).end();
    }
    if let Some(meta) = m.meta {
        if meta.message_id.is_some()
            || meta.correlation_id.is_some()
            || meta.creation_time_ms.is_some()
        {
            e.list(PROPERTIES);
            match &meta.message_id {
                Some(id) => e.str(id),
                None => e.null(),
            };
            e.null().null().null().null();
            match &meta.correlation_id {
                Some(id) => e.str(id),
                None => e.null(),
            };
            if let Some(ms) = meta.creation_time_ms {
                e.null()
                    .null()
                    .null()
                    .timestamp(ms.min(i64::MAX as u64) as i64);
            }
            e.end();
        }
        if !meta.properties.is_empty() {
            e.map(APP_PROPERTIES);
            for (k, v) in &meta.properties {
                e.str(k);
                match v {
                    meta::Value::Str(s) => e.str(s),
                    meta::Value::Bool(b) => e.bool(*b),
                    meta::Value::Int(i) => e.long(*i),
                };
            }
            e.end();
        }
    }
    match m.body {
        OutBody::Data(b) => e.described(DATA).binary(b),
        OutBody::Text(s) => e.described(AMQP_VALUE).str(s),
    };
}

/// The length [`put_message`] will write for `m` apart from the body bytes, an upper bound
/// (to decide whether a message fits in one frame).
pub fn message_overhead(m: &OutMessage<'_>) -> usize {
    let meta = m.meta.map_or(0, |meta| {
        64 + meta.message_id.as_ref().map_or(0, |s| s.len() + 5)
            + meta.correlation_id.as_ref().map_or(0, |s| s.len() + 5)
            + meta
                .properties
                .iter()
                .map(|(k, v)| {
                    k.len()
                        + 5
                        + match v {
                            meta::Value::Str(s) => s.len() + 5,
                            _ => 9,
                        }
                })
                .sum::<usize>()
    });
    32 + meta
}

/// A received message's parts.
#[derive(Debug, Default)]
pub struct Parts {
    /// Ids, creation time and application properties (only when asked for).
    pub meta: Meta,
    /// The body: data sections (one is a slice of the frame), or an `amqp-value` string's or
    /// binary's bytes.
    pub body: Bytes,
    /// The body was an `amqp-value` string.
    pub text: bool,
    /// delivery-count > 0 in the header.
    pub redelivered: bool,
}

/// Reads the message in `msg` (a frame body from `at`, or a reassembled multi-frame message).
pub fn read_message(msg: &Bytes, with_meta: bool) -> Result<Parts, CodecError> {
    let mut out = Parts::default();
    let mut d = Dec::new(msg);
    let mut joined: Option<BytesMut> = None;
    let base = msg.as_ptr() as usize;
    let slice_of =
        |s: &[u8]| msg.slice(s.as_ptr() as usize - base..s.as_ptr() as usize - base + s.len());
    while !d.is_empty() {
        let Value::Described(code, mut inner) = d.read()? else {
            return Err(CodecError("a message section without a descriptor".into()));
        };
        match code {
            HEADER => {
                if let Value::List(mut l) = inner.read()? {
                    for _ in 0..4 {
                        l.read()?;
                    }
                    out.redelivered = l.read()?.as_uint().is_some_and(|n| n > 0);
                }
            }
            PROPERTIES if with_meta => {
                if let Value::List(mut l) = inner.read()? {
                    out.meta.message_id = id_string(l.read()?);
                    for _ in 0..4 {
                        l.read()?;
                    }
                    out.meta.correlation_id = id_string(l.read()?);
                    for _ in 0..3 {
                        l.read()?;
                    }
                    if let Value::Timestamp(ms) = l.read()? {
                        out.meta.creation_time_ms = u64::try_from(ms).ok();
                    }
                }
            }
            APP_PROPERTIES if with_meta => {
                if let Value::Map(mut m) = inner.read()? {
                    while !m.is_empty() {
                        let k = m.read()?;
                        let v = m.read()?;
                        if let Some(k) = k.as_str() {
                            out.meta.properties.push((k.to_string(), meta_value(v)));
                        }
                    }
                }
            }
            DATA => {
                if let Value::Binary(b) = inner.read()? {
                    if out.body.is_empty() && joined.is_none() {
                        out.body = slice_of(b);
                    } else {
                        let j = joined.get_or_insert_with(|| BytesMut::from(&out.body[..]));
                        j.extend_from_slice(b);
                    }
                }
            }
            AMQP_VALUE => match inner.read()? {
                Value::Str(s) | Value::Symbol(s) => {
                    out.body = slice_of(s.as_bytes());
                    out.text = true;
                }
                Value::Binary(b) => out.body = slice_of(b),
                _ => {}
            },
            _ => {}
        }
    }
    if let Some(j) = joined {
        out.body = j.freeze();
    }
    Ok(out)
}

/// A message id of any AMQP type as a string (a UUID in its usual hyphenated form, binary as
/// UTF-8 when it is, else hex).
pub fn id_string(v: Value<'_>) -> Option<String> {
    match v {
        Value::Str(s) | Value::Symbol(s) => Some(s.to_string()),
        Value::Uint(n) => Some(n.to_string()),
        Value::Uuid(u) => Some(uuid_string(&u)),
        Value::Binary(b) => Some(bytes_string(b)),
        _ => None,
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

/// An application property value as msgbench keeps it.
fn meta_value(v: Value<'_>) -> meta::Value {
    use meta::Value as M;
    match v {
        Value::Bool(b) => M::Bool(b),
        Value::Str(s) | Value::Symbol(s) => M::Str(s.to_string()),
        Value::Uint(n) => match i64::try_from(n) {
            Ok(i) => M::Int(i),
            Err(_) => M::Str(n.to_string()),
        },
        Value::Int(n) | Value::Timestamp(n) => M::Int(n),
        Value::Uuid(u) => M::Str(uuid_string(&u)),
        Value::Binary(b) => M::Str(bytes_string(b)),
        Value::Char(c) => M::Str(char::from_u32(c).map(String::from).unwrap_or_default()),
        Value::Float(f) => M::Str(f.to_string()),
        Value::Null => M::Str(String::new()),
        other => M::Str(format!("{other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_any_type_become_strings() {
        assert_eq!(id_string(Value::Uint(42)).as_deref(), Some("42"));
        assert_eq!(
            id_string(Value::Uuid([0x12; 16])).as_deref(),
            Some("12121212-1212-1212-1212-121212121212")
        );
        assert_eq!(
            id_string(Value::Binary(&[0xff, 1])).as_deref(),
            Some("ff01")
        );
        assert_eq!(id_string(Value::Null), None);
        assert_eq!(
            meta_value(Value::Uint(u64::MAX)),
            meta::Value::Str(u64::MAX.to_string())
        );
    }
}
