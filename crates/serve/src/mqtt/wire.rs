//! What the broker reads from the wire beyond msgbench's codec, which skips it: will messages in
//! CONNECT, MQTT 5 PUBLISH (and will) properties to forward, MQTT 5 subscription options; and
//! the MQTT 5 PUBLISH that carries forwarded properties. Each parser reads a complete packet
//! still at the front of the read buffer, before the codec consumes it.

use super::router::valid_topic;
use bytes::{BufMut, Bytes, BytesMut};
use std::time::{Duration, Instant};

/// Reads a packet field by field; every reader returns `None` past the end.
pub(crate) struct Cursor<'a>(pub &'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// A two-byte length and that many bytes (strings and binary data).
    fn bin(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }
    /// A variable byte integer (at most four bytes).
    fn varint(&mut self) -> Option<usize> {
        let mut n = 0usize;
        for i in 0..4 {
            let b = self.u8()?;
            n |= usize::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Some(n);
            }
        }
        None
    }
}

/// The length of the packet at the front of `buf`, if all of it has arrived.
pub(crate) fn complete_packet(buf: &[u8]) -> Option<usize> {
    let mut c = Cursor(buf);
    c.u8()?;
    let rem = c.varint()?;
    let total = buf.len() - c.0.len() + rem;
    (buf.len() >= total).then_some(total)
}

/// MQTT 5 properties of an application message, forwarded to MQTT 5 subscribers
/// [MQTT-3.3.2-4, -17, -20], with the message (live, queued or retained).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Props {
    /// The properties forwarded unaltered, encoded as received and in their order: payload
    /// format indicator, content type, response topic, correlation data, user properties.
    pub raw: Bytes,
    /// Message expiry interval (seconds) and when it started: sent counted down, and the
    /// message is not delivered once it has passed [MQTT-3.3.2-5, -6].
    pub expiry: Option<(u32, Instant)>,
}

impl Props {
    /// `None` when there is nothing to forward.
    fn new(raw: Vec<u8>, expiry: Option<u32>) -> Option<Props> {
        (!raw.is_empty() || expiry.is_some()).then(|| Props {
            raw: raw.into(),
            expiry: expiry.map(|e| (e, Instant::now())),
        })
    }

    /// Whether the message expired; else the expiry interval to send (whole seconds left).
    pub fn expiry_left(&self) -> Result<Option<u32>, ()> {
        match self.expiry {
            None => Ok(None),
            Some((secs, since)) => {
                let waited = since.elapsed();
                if waited >= Duration::from_secs(u64::from(secs)) {
                    Err(())
                } else {
                    Ok(Some(secs - waited.as_secs() as u32))
                }
            }
        }
    }

    pub fn is_expired(&self) -> bool {
        self.expiry_left().is_err()
    }
}

/// MQTT 5 PUBLISH or will properties split into what is forwarded as it is, the message expiry
/// interval and (a will's) delay interval. `Err` with the reason code to close with for a
/// malformed list (0x81), or one holding a property a client may not send there: a topic
/// alias (0x94: the broker offers none) or a subscription identifier (0x82: server to client
/// only).
struct Split {
    keep: Vec<u8>,
    expiry: Option<u32>,
    delay: u32,
}

fn split_props(raw: &[u8], will: bool) -> Result<Split, u8> {
    let mut s = Split {
        keep: Vec::new(),
        expiry: None,
        delay: 0,
    };
    let mut c = Cursor(raw);
    while !c.0.is_empty() {
        let start = raw.len() - c.0.len();
        match c.u8().ok_or(MALFORMED)? {
            0x01 => drop(c.u8().ok_or(MALFORMED)?),
            0x03 | 0x08 | 0x09 => drop(c.bin().ok_or(MALFORMED)?),
            0x26 => drop((c.bin().ok_or(MALFORMED)?, c.bin().ok_or(MALFORMED)?)),
            0x02 => {
                s.expiry = Some(c.u32().ok_or(MALFORMED)?);
                continue;
            }
            0x18 if will => {
                s.delay = c.u32().ok_or(MALFORMED)?;
                continue;
            }
            0x23 if !will => return Err(TOPIC_ALIAS_INVALID),
            0x0b if !will => return Err(PROTOCOL_ERROR),
            _ => return Err(MALFORMED),
        }
        s.keep.extend_from_slice(&raw[start..raw.len() - c.0.len()]);
    }
    Ok(s)
}

/// MQTT 5 reason codes the broker closes a connection with (DISCONNECT, §3.14.2.1).
pub(crate) const MALFORMED: u8 = 0x81;
/// A packet against the protocol's rules.
pub(crate) const PROTOCOL_ERROR: u8 = 0x82;
/// A topic alias the broker did not offer.
pub(crate) const TOPIC_ALIAS_INVALID: u8 = 0x94;
/// A subscription identifier, which the broker says in CONNACK it does not support.
pub(crate) const SUBSCRIPTION_IDS_UNSUPPORTED: u8 = 0xa1;

/// The properties of the MQTT 5 PUBLISH `p` (complete) to forward; `Err` with the reason code
/// if they are malformed or not allowed (see [`split_props`]), which closes the connection.
pub(crate) fn publish_props(p: &[u8]) -> Result<Option<Props>, u8> {
    let mut c = Cursor(p);
    let raw = (|| {
        let qos = (c.u8()? >> 1) & 3;
        c.varint()?;
        c.bin()?;
        if qos > 0 {
            c.u16()?;
        }
        let n = c.varint()?;
        c.take(n)
    })()
    .ok_or(MALFORMED)?;
    if raw.is_empty() {
        return Ok(None);
    }
    let s = split_props(raw, false)?;
    Ok(Props::new(s.keep, s.expiry))
}

/// The subscription options byte of each topic filter of the MQTT 5 SUBSCRIBE `p` (complete).
/// `Err` with the reason code for reserved bits set or retain handling 3 (malformed,
/// [MQTT-3.8.3-5]), and for a subscription identifier: CONNACK tells clients the broker has
/// none, so one is a protocol error (MQTT 5 §3.2.2.3.12, reason 0xA1).
pub(crate) fn subscribe_options(p: &[u8]) -> Result<Vec<u8>, u8> {
    let mut c = Cursor(p);
    let props = (|| {
        c.u8()?;
        c.varint()?;
        c.u16()?; // packet id
        let n = c.varint()?;
        c.take(n)
    })()
    .ok_or(MALFORMED)?;
    let mut props = Cursor(props);
    while !props.0.is_empty() {
        match props.u8() {
            Some(0x26) => {
                props.bin().ok_or(MALFORMED)?;
                props.bin().ok_or(MALFORMED)?;
            }
            Some(0x0b) => return Err(SUBSCRIPTION_IDS_UNSUPPORTED),
            _ => return Err(MALFORMED),
        }
    }
    let mut opts = Vec::new();
    while !c.0.is_empty() {
        c.bin().ok_or(MALFORMED)?;
        let o = c.u8().ok_or(MALFORMED)?;
        if o & 0xc0 != 0 || (o >> 4) & 3 == 3 {
            return Err(MALFORMED);
        }
        opts.push(o);
    }
    Ok(opts)
}

/// The will message of a CONNECT: published when the connection ends without a DISCONNECT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Will {
    pub topic: Bytes,
    pub payload: Bytes,
    pub qos: u8,
    pub retain: bool,
    /// MQTT 5 will delay interval, in seconds (0: at once).
    pub delay: u32,
    /// MQTT 5 will properties forwarded with it (as PUBLISH properties).
    pub props: Bytes,
    /// MQTT 5 message expiry interval, counted from when the will is published.
    pub expiry: Option<u32>,
}

impl Will {
    /// Its properties as they go out now.
    pub fn props(&self) -> Option<Props> {
        Props::new(self.props.to_vec(), self.expiry)
    }
}

/// The will of the whole CONNECT packet `p`: `Ok(None)` without one, `Err` when the will part
/// is malformed — will QoS 3, will QoS or retain set without the will flag [MQTT-3.1.2-11, -13,
/// -15], a will topic that is not a valid topic name, a property not allowed there — which
/// closes the connection.
pub(crate) fn parse_will(p: &[u8]) -> Result<Option<Will>, ()> {
    let inner = || {
        let mut c = Cursor(p);
        c.u8()?;
        c.varint()?;
        c.bin()?; // protocol name
        let level = c.u8()?;
        let flags = c.u8()?;
        let (qos, retain) = ((flags >> 3) & 3, flags & 0x20 != 0);
        if flags & 0x04 == 0 {
            return (qos == 0 && !retain).then_some(None);
        }
        if qos > 2 {
            return None;
        }
        c.u16()?; // keep-alive
        if level == 5 {
            let n = c.varint()?;
            c.take(n)?; // CONNECT properties
        }
        c.bin()?; // client id
        let mut props = Split {
            keep: Vec::new(),
            expiry: None,
            delay: 0,
        };
        if level == 5 {
            let n = c.varint()?;
            props = split_props(c.take(n)?, true).ok()?;
        }
        let topic = c.bin()?;
        let payload = c.bin()?;
        if !valid_topic(topic) {
            return None;
        }
        Some(Some(Will {
            topic: Bytes::copy_from_slice(topic),
            payload: Bytes::copy_from_slice(payload),
            qos,
            retain,
            delay: props.delay,
            props: props.keep.into(),
            expiry: props.expiry,
        }))
    };
    inner().ok_or(())
}

/// What an MQTT 5 CONNECT asks of the broker beyond what the codec reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ClientProps {
    /// The maximum packet size: the broker must not send it anything larger
    /// [MQTT-3.1.2-24]. `None` when absent.
    pub max_packet: Option<u32>,
    /// The session expiry interval, seconds (0 when absent: the session ends with the network
    /// connection; `u32::MAX`: it never expires) [MQTT-3.1.2-11].
    pub session_expiry: u32,
    /// The receive maximum: QoS ≥ 1 messages the broker may have unacknowledged towards the
    /// client at once [MQTT-3.3.4-9]. `None` when absent (65,535) or 0 (not allowed).
    pub receive_max: Option<u16>,
}

/// The [`ClientProps`] of a CONNECT `p` (complete, well-formed); the defaults for 3.1.1.
pub(crate) fn client_props(p: &[u8]) -> ClientProps {
    let read = || -> Option<ClientProps> {
        let mut c = Cursor(p);
        c.u8()?;
        c.varint()?;
        c.bin()?;
        if c.u8()? != 5 {
            return None;
        }
        c.u8()?;
        c.u16()?;
        let n = c.varint()?;
        let mut props = Cursor(c.take(n)?);
        let mut out = ClientProps::default();
        while !props.0.is_empty() {
            match props.u8()? {
                0x27 => out.max_packet = Some(props.u32()?),
                0x11 => out.session_expiry = props.u32()?,
                0x21 => out.receive_max = Some(props.u16()?).filter(|&n| n > 0),
                0x22 => drop(props.u16()?),
                0x17 | 0x19 => drop(props.u8()?),
                0x15 | 0x16 => drop(props.bin()?),
                0x26 => drop((props.bin()?, props.bin()?)),
                _ => return None,
            }
        }
        Some(out)
    };
    read().unwrap_or_default()
}

/// The remaining length of a PUBLISH (MQTT 5: with `props` bytes of properties).
fn publish_remaining(v5: bool, topic: usize, payload: usize, qos: u8, props: usize) -> usize {
    let props = if v5 { varint_len(props) + props } else { 0 };
    2 + topic + if qos > 0 { 2 } else { 0 } + props + payload
}

/// The size on the wire of that PUBLISH, fixed header included.
pub(crate) fn publish_size(v5: bool, topic: usize, payload: usize, qos: u8, props: usize) -> usize {
    let rem = publish_remaining(v5, topic, payload, qos, props);
    1 + varint_len(rem) + rem
}

fn varint_len(n: usize) -> usize {
    match n {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    }
}

fn put_varint(buf: &mut BytesMut, mut n: usize) {
    loop {
        let b = (n % 128) as u8;
        n /= 128;
        buf.put_u8(if n > 0 { b | 0x80 } else { b });
        if n == 0 {
            return;
        }
    }
}

/// An MQTT 5 PUBLISH with properties: `raw` as received, then the message expiry interval
/// left (`expiry`), if any.
pub(crate) fn put_publish_v5(
    buf: &mut BytesMut,
    (topic, payload): (&[u8], &[u8]),
    qos: u8,
    retain: bool,
    pid: u16,
    (raw, expiry): (&[u8], Option<u32>),
) {
    let props = raw.len() + if expiry.is_some() { 5 } else { 0 };
    let rem = publish_remaining(true, topic.len(), payload.len(), qos, props);
    buf.reserve(1 + varint_len(rem) + rem);
    buf.put_u8(0x30 | (qos << 1) | u8::from(retain));
    put_varint(buf, rem);
    buf.put_u16(topic.len() as u16);
    buf.put_slice(topic);
    if qos > 0 {
        buf.put_u16(pid);
    }
    put_varint(buf, props);
    buf.put_slice(raw);
    if let Some(e) = expiry {
        buf.put_u8(0x02);
        buf.put_u32(e);
    }
    buf.put_slice(payload);
}

#[cfg(test)]
mod unit {
    use super::*;
    use msgbench_driver_mqtt::codec::{self, Packet, Version};

    #[test]
    fn props_split_and_reencode() {
        // payload format, expiry 60, user property k=v, content type "t"
        let raw = [
            0x01, 1, 0x02, 0, 0, 0, 60, 0x26, 0, 1, b'k', 0, 1, b'v', 0x03, 0, 1, b't',
        ];
        let s = split_props(&raw, false).unwrap();
        assert_eq!(
            s.keep,
            [0x01, 1, 0x26, 0, 1, b'k', 0, 1, b'v', 0x03, 0, 1, b't']
        );
        assert_eq!((s.expiry, s.delay), (Some(60), 0));
        assert_eq!(
            split_props(&[0x23, 0, 1], false).err(),
            Some(0x94),
            "topic alias"
        );
        assert_eq!(
            split_props(&[0x0b, 1], false).err(),
            Some(0x82),
            "subscription id"
        );
        assert_eq!(split_props(&[0x18, 0, 0, 0, 5], false).err(), Some(0x81));
        assert_eq!(split_props(&[0x18, 0, 0, 0, 5], true).unwrap().delay, 5);
        assert!(
            split_props(&[0x03, 0, 9, b'x'], false).err() == Some(0x81),
            "truncated"
        );

        let mut b = BytesMut::new();
        put_publish_v5(&mut b, (b"a/b", b"pay"), 1, true, 7, (&s.keep, Some(59)));
        let p = publish_props(&b).unwrap().unwrap();
        assert_eq!(&p.raw[..], &s.keep[..]);
        assert_eq!(p.expiry.map(|e| e.0), Some(59));
        match codec::parse(&mut b, Version::V5, 1 << 20).unwrap().unwrap() {
            Packet::Publish(p) => {
                assert_eq!((&p.topic[..], &p.payload[..]), (&b"a/b"[..], &b"pay"[..]));
                assert_eq!((p.qos, p.retain, p.pid), (1, true, 7));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn subscribe_options_checked() {
        let sub = |opts: u8, props: &[u8]| {
            let mut b = vec![0x82, 0, 0, 1, props.len() as u8];
            b.extend_from_slice(props);
            b.extend_from_slice(&[0, 1, b'a', opts]);
            b[1] = (b.len() - 2) as u8;
            subscribe_options(&b)
        };
        assert_eq!(sub(0b0010_1101, &[]), Ok(vec![0b0010_1101]));
        assert_eq!(sub(0b0011_0001, &[]), Err(0x81), "retain handling 3");
        assert_eq!(sub(0b0100_0001, &[]), Err(0x81), "reserved bit");
        assert_eq!(sub(1, &[0x0b, 5]), Err(0xa1), "subscription identifier");
        assert_eq!(sub(1, &[0x26, 0, 1, b'k', 0, 0]), Ok(vec![1]));
    }

    #[test]
    fn will_flags_checked() {
        // CONNECT 3.1.1, client id "c", will flag + QoS 1 + retain, will topic "w", payload "x".
        let connect = |flags: u8| {
            let mut b = vec![0x10, 0, 0, 4, b'M', b'Q', b'T', b'T', 4, flags, 0, 10];
            b.extend_from_slice(&[0, 1, b'c']);
            if flags & 4 != 0 {
                b.extend_from_slice(&[0, 1, b'w', 0, 1, b'x']);
            }
            b[1] = (b.len() - 2) as u8;
            b
        };
        let w = parse_will(&connect(0b0010_1110)).unwrap().unwrap();
        assert_eq!(
            (&w.topic[..], &w.payload[..], w.qos, w.retain),
            (&b"w"[..], &b"x"[..], 1, true)
        );
        assert_eq!(parse_will(&connect(0b0000_0010)), Ok(None));
        assert!(parse_will(&connect(0b0001_1110)).is_err(), "will QoS 3");
        assert!(
            parse_will(&connect(0b0000_1010)).is_err(),
            "will QoS without will"
        );
        assert!(
            parse_will(&connect(0b0010_0010)).is_err(),
            "will retain without will"
        );
        assert_eq!(
            client_props(&connect(0b0000_0010)),
            ClientProps::default(),
            "3.1.1"
        );
    }

    #[test]
    fn client_props_read() {
        // CONNECT 5 with session expiry 60, receive maximum 10, maximum packet size 1024.
        let mut b = vec![0x10, 0, 0, 4, b'M', b'Q', b'T', b'T', 5, 2, 0, 10];
        let props = [0x11, 0, 0, 0, 60, 0x21, 0, 10, 0x27, 0, 0, 4, 0];
        b.push(props.len() as u8);
        b.extend_from_slice(&props);
        b.extend_from_slice(&[0, 1, b'c']);
        b[1] = (b.len() - 2) as u8;
        assert_eq!(
            client_props(&b),
            ClientProps {
                max_packet: Some(1024),
                session_expiry: 60,
                receive_max: Some(10),
            }
        );
        assert_eq!(publish_size(true, 3, 10, 1, 0), 1 + 1 + 2 + 3 + 2 + 1 + 10);
        assert_eq!(publish_size(false, 3, 200, 0, 0), 1 + 2 + 2 + 3 + 200);
    }
}
