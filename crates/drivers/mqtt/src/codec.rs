//! MQTT 3.1.1 and 5 wire format: the packets a benchmark client and a benchmark broker need,
//! encoded straight into a caller's `BytesMut` (no allocation per packet) and decoded from a read
//! buffer with topics and payloads handed out as zero-copy `Bytes` slices.
//!
//! MQTT 5 properties are written empty and, when received, skipped — except the few that change
//! what a client may do (receive maximum, maximum packet size, assigned client id, reason
//! string), which are decoded. Will messages, topic aliases and authentication exchanges are not
//! supported (a benchmark needs none of them).

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Protocol level in CONNECT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Version {
    /// MQTT 3.1.1 (protocol level 4).
    #[default]
    #[serde(rename = "3.1.1")]
    V311,
    /// MQTT 5 (protocol level 5).
    #[serde(rename = "5")]
    V5,
}

impl Version {
    fn level(self) -> u8 {
        match self {
            Version::V311 => 4,
            Version::V5 => 5,
        }
    }
}

/// Largest remaining length the encoding allows (256 MiB − 1).
pub const MAX_REMAINING: usize = 268_435_455;

/// The peer broke the protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("MQTT protocol error: {0}")]
pub struct ProtoError(pub String);

fn perr<T>(m: impl Into<String>) -> Result<T, ProtoError> {
    Err(ProtoError(m.into()))
}

/// Fields of a CONNECT the server side looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    /// Protocol version asked for.
    pub version: Version,
    /// Client identifier (may be empty with a clean session).
    pub client_id: String,
    /// Keep-alive in seconds (0 = none).
    pub keep_alive: u16,
    /// Clean session (3.1.1) / clean start (5).
    pub clean: bool,
    /// User name, if any.
    pub username: Option<String>,
    /// Password, if any.
    pub password: Option<Bytes>,
}

/// What a client sends in CONNECT.
#[derive(Debug, Clone, Copy)]
pub struct ConnectOpts<'a> {
    /// Protocol version.
    pub version: Version,
    /// Client identifier.
    pub client_id: &'a str,
    /// Keep-alive in seconds.
    pub keep_alive: u16,
    /// Clean session / clean start.
    pub clean: bool,
    /// User name.
    pub username: Option<&'a str>,
    /// Password.
    pub password: Option<&'a str>,
    /// MQTT 5: session expiry interval in seconds (0 = ends with the connection). Persistent
    /// sessions need a non-zero value.
    pub session_expiry: u32,
}

/// A decoded packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    /// Client → server: open a session.
    Connect(Connect),
    /// Server → client: the answer to CONNECT.
    ConnAck {
        /// The server kept a session for this client id.
        session_present: bool,
        /// 0 = accepted; anything else is a refusal (3.1.1 return code or 5 reason code).
        code: u8,
        /// MQTT 5 receive maximum (QoS 1/2 messages in flight towards the server); 65535 if absent.
        receive_max: u16,
        /// MQTT 5 maximum packet size the server accepts; 0 = no limit given.
        max_packet: u32,
        /// MQTT 5 maximum QoS the server supports (property 0x24); 2 if absent.
        max_qos: u8,
        /// MQTT 5 server keep alive (property 0x13), seconds: the keep-alive the client must
        /// use instead of the one it asked for.
        server_keep_alive: Option<u16>,
        /// MQTT 5 Shared Subscription Available (property 0x2A); true if absent.
        shared_subs: bool,
        /// MQTT 5 reason string, if the server sent one.
        reason: Option<String>,
    },
    /// An application message.
    Publish(Publish),
    /// QoS 1 acknowledgement.
    PubAck {
        /// Packet identifier.
        pid: u16,
        /// MQTT 5 reason code (0 = success; ≥ 0x80 = refused).
        code: u8,
    },
    /// QoS 2, step 1 answer.
    PubRec {
        /// Packet identifier.
        pid: u16,
        /// MQTT 5 reason code.
        code: u8,
    },
    /// QoS 2, step 2.
    PubRel {
        /// Packet identifier.
        pid: u16,
    },
    /// QoS 2, done.
    PubComp {
        /// Packet identifier.
        pid: u16,
    },
    /// Client → server: subscribe.
    Subscribe {
        /// Packet identifier.
        pid: u16,
        /// Topic filters with their maximum QoS.
        filters: Vec<(String, u8)>,
    },
    /// Server → client: subscription results (granted QoS, or ≥ 0x80 for a failure).
    SubAck {
        /// Packet identifier.
        pid: u16,
        /// One code per filter.
        codes: Vec<u8>,
    },
    /// Client → server: unsubscribe.
    Unsubscribe {
        /// Packet identifier.
        pid: u16,
        /// Topic filters.
        filters: Vec<String>,
    },
    /// Server → client: unsubscribed.
    UnsubAck {
        /// Packet identifier.
        pid: u16,
    },
    /// Keep-alive request.
    PingReq,
    /// Keep-alive answer.
    PingResp,
    /// Orderly close (MQTT 5 carries a reason code).
    Disconnect {
        /// Reason code (0 = normal).
        code: u8,
        /// MQTT 5: the session expiry interval a client's DISCONNECT sets in place of its
        /// CONNECT's (seconds), if it carries one.
        session_expiry: Option<u32>,
    },
}

/// A PUBLISH, with topic and payload sharing the read buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    /// Topic name.
    pub topic: Bytes,
    /// Application payload.
    pub payload: Bytes,
    /// 0, 1 or 2.
    pub qos: u8,
    /// Retained message.
    pub retain: bool,
    /// Redelivery of an earlier attempt.
    pub dup: bool,
    /// Packet identifier (0 for QoS 0).
    pub pid: u16,
}

fn put_varint(buf: &mut BytesMut, mut n: usize) {
    loop {
        let mut b = (n % 128) as u8;
        n /= 128;
        if n > 0 {
            b |= 0x80;
        }
        buf.put_u8(b);
        if n == 0 {
            return;
        }
    }
}

fn varint_len(n: usize) -> usize {
    match n {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    }
}

/// Decodes a variable byte integer: `Ok(None)` if more bytes are needed.
fn get_varint(b: &[u8]) -> Result<Option<(usize, usize)>, ProtoError> {
    let mut n = 0usize;
    for (i, byte) in b.iter().enumerate().take(4) {
        n |= ((byte & 0x7f) as usize) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(Some((n, i + 1)));
        }
    }
    if b.len() >= 4 {
        return perr("malformed remaining length");
    }
    Ok(None)
}

fn put_str(buf: &mut BytesMut, s: &[u8]) {
    buf.put_u16(s.len() as u16);
    buf.put_slice(s);
}

/// Writes CONNECT.
pub fn put_connect(buf: &mut BytesMut, o: &ConnectOpts<'_>) {
    let v5 = o.version == Version::V5;
    let props = if v5 && o.session_expiry > 0 { 5 } else { 0 };
    let mut len = 2 + 4 + 1 + 1 + 2 + 2 + o.client_id.len();
    if v5 {
        len += varint_len(props) + props;
    }
    if let Some(u) = o.username {
        len += 2 + u.len();
    }
    if let Some(p) = o.password {
        len += 2 + p.len();
    }
    buf.put_u8(0x10);
    put_varint(buf, len);
    put_str(buf, b"MQTT");
    buf.put_u8(o.version.level());
    let mut flags = 0u8;
    if o.clean {
        flags |= 0x02;
    }
    if o.username.is_some() {
        flags |= 0x80;
    }
    if o.password.is_some() {
        flags |= 0x40;
    }
    buf.put_u8(flags);
    buf.put_u16(o.keep_alive);
    if v5 {
        put_varint(buf, props);
        if props > 0 {
            buf.put_u8(0x11);
            buf.put_u32(o.session_expiry);
        }
    }
    put_str(buf, o.client_id.as_bytes());
    if let Some(u) = o.username {
        put_str(buf, u.as_bytes());
    }
    if let Some(p) = o.password {
        put_str(buf, p.as_bytes());
    }
}

/// Writes CONNACK (server side).
pub fn put_connack(buf: &mut BytesMut, version: Version, session_present: bool, code: u8) {
    buf.put_u8(0x20);
    if version == Version::V5 {
        buf.put_u8(3);
        buf.put_u8(session_present as u8);
        buf.put_u8(code);
        buf.put_u8(0);
    } else {
        buf.put_u8(2);
        buf.put_u8(session_present as u8);
        buf.put_u8(code);
    }
}

/// Bytes a PUBLISH of this topic and payload takes on the wire.
pub fn publish_len(version: Version, topic: usize, payload: usize, qos: u8) -> usize {
    let rem = publish_remaining(version, topic, payload, qos);
    1 + varint_len(rem) + rem
}

fn publish_remaining(version: Version, topic: usize, payload: usize, qos: u8) -> usize {
    2 + topic + if qos > 0 { 2 } else { 0 } + usize::from(version == Version::V5) + payload
}

/// Writes PUBLISH.
// The arguments are the packet's fields; bundling them would build a struct per message.
#[allow(clippy::too_many_arguments)]
pub fn put_publish(
    buf: &mut BytesMut,
    version: Version,
    topic: &[u8],
    payload: &[u8],
    qos: u8,
    retain: bool,
    dup: bool,
    pid: u16,
) {
    let rem = publish_remaining(version, topic.len(), payload.len(), qos);
    buf.reserve(1 + varint_len(rem) + rem);
    buf.put_u8(0x30 | (u8::from(dup) << 3) | (qos << 1) | u8::from(retain));
    put_varint(buf, rem);
    put_str(buf, topic);
    if qos > 0 {
        buf.put_u16(pid);
    }
    if version == Version::V5 {
        buf.put_u8(0);
    }
    buf.put_slice(payload);
}

/// Writes an MQTT 5 request: a QoS 0 PUBLISH carrying a Response Topic (property 0x08) and
/// Correlation Data (0x09), the two properties a responder echoes in its reply.
pub fn put_request(buf: &mut BytesMut, topic: &[u8], payload: &[u8], reply_to: &[u8], corr: &[u8]) {
    let props = 1 + 2 + reply_to.len() + 1 + 2 + corr.len();
    let rem = 2 + topic.len() + varint_len(props) + props + payload.len();
    buf.reserve(1 + varint_len(rem) + rem);
    buf.put_u8(0x30);
    put_varint(buf, rem);
    put_str(buf, topic);
    put_varint(buf, props);
    buf.put_u8(0x08);
    put_str(buf, reply_to);
    buf.put_u8(0x09);
    put_str(buf, corr);
    buf.put_slice(payload);
}

/// Writes PUBACK (0x40), PUBREC (0x50), PUBREL (0x62) or PUBCOMP (0x70) with success.
pub fn put_ack(buf: &mut BytesMut, header: u8, pid: u16) {
    // Both versions: a 2-byte body means "success, no properties".
    buf.put_u8(header);
    buf.put_u8(2);
    buf.put_u16(pid);
}

/// PUBACK header byte.
pub const PUBACK: u8 = 0x40;
/// PUBREC header byte.
pub const PUBREC: u8 = 0x50;
/// PUBREL header byte.
pub const PUBREL: u8 = 0x62;
/// PUBCOMP header byte.
pub const PUBCOMP: u8 = 0x70;

/// Writes SUBSCRIBE.
pub fn put_subscribe(buf: &mut BytesMut, version: Version, pid: u16, filters: &[(&str, u8)]) {
    let v5 = version == Version::V5;
    let len = 2 + usize::from(v5) + filters.iter().map(|(f, _)| 2 + f.len() + 1).sum::<usize>();
    buf.put_u8(0x82);
    put_varint(buf, len);
    buf.put_u16(pid);
    if v5 {
        buf.put_u8(0);
    }
    for (f, qos) in filters {
        put_str(buf, f.as_bytes());
        buf.put_u8(*qos);
    }
}

/// Writes SUBACK (server side).
pub fn put_suback(buf: &mut BytesMut, version: Version, pid: u16, codes: &[u8]) {
    let v5 = version == Version::V5;
    buf.put_u8(0x90);
    put_varint(buf, 2 + usize::from(v5) + codes.len());
    buf.put_u16(pid);
    if v5 {
        buf.put_u8(0);
    }
    buf.put_slice(codes);
}

/// Writes UNSUBSCRIBE.
pub fn put_unsubscribe(buf: &mut BytesMut, version: Version, pid: u16, filters: &[&str]) {
    let v5 = version == Version::V5;
    let len = 2 + usize::from(v5) + filters.iter().map(|f| 2 + f.len()).sum::<usize>();
    buf.put_u8(0xa2);
    put_varint(buf, len);
    buf.put_u16(pid);
    if v5 {
        buf.put_u8(0);
    }
    for f in filters {
        put_str(buf, f.as_bytes());
    }
}

/// Writes UNSUBACK (server side; MQTT 5 gets one success code per filter).
pub fn put_unsuback(buf: &mut BytesMut, version: Version, pid: u16, filters: usize) {
    if version == Version::V5 {
        buf.put_u8(0xb0);
        put_varint(buf, 3 + filters);
        buf.put_u16(pid);
        buf.put_u8(0);
        buf.put_bytes(0, filters);
    } else {
        buf.put_u8(0xb0);
        buf.put_u8(2);
        buf.put_u16(pid);
    }
}

/// A PINGREQ packet.
pub const PINGREQ: [u8; 2] = [0xc0, 0];

/// Writes PINGREQ.
pub fn put_pingreq(buf: &mut BytesMut) {
    buf.put_slice(&[0xc0, 0]);
}

/// Writes PINGRESP.
pub fn put_pingresp(buf: &mut BytesMut) {
    buf.put_slice(&[0xd0, 0]);
}

/// Writes DISCONNECT (normal).
pub fn put_disconnect(buf: &mut BytesMut) {
    buf.put_slice(&[0xe0, 0]);
}

/// A cursor over one packet's body.
struct Body {
    b: Bytes,
}

impl Body {
    fn need(&self, n: usize) -> Result<(), ProtoError> {
        if self.b.len() < n {
            return perr("packet shorter than its fields");
        }
        Ok(())
    }
    fn u8(&mut self) -> Result<u8, ProtoError> {
        self.need(1)?;
        Ok(self.b.get_u8())
    }
    fn u16(&mut self) -> Result<u16, ProtoError> {
        self.need(2)?;
        Ok(self.b.get_u16())
    }
    fn u32(&mut self) -> Result<u32, ProtoError> {
        self.need(4)?;
        Ok(self.b.get_u32())
    }
    fn bin(&mut self) -> Result<Bytes, ProtoError> {
        let n = self.u16()? as usize;
        self.need(n)?;
        Ok(self.b.split_to(n))
    }
    fn string(&mut self) -> Result<String, ProtoError> {
        String::from_utf8(self.bin()?.to_vec()).or_else(|_| perr("string is not UTF-8"))
    }
    fn varint(&mut self) -> Result<usize, ProtoError> {
        match get_varint(&self.b)? {
            Some((n, used)) => {
                self.b.advance(used);
                Ok(n)
            }
            None => perr("truncated variable integer"),
        }
    }
    /// MQTT 5 properties, handing each (id, value) to `f`; values of unknown ids are skipped.
    fn props(
        &mut self,
        mut f: impl FnMut(u8, &mut Body) -> Result<bool, ProtoError>,
    ) -> Result<(), ProtoError> {
        let n = self.varint()?;
        self.need(n)?;
        let mut p = Body {
            b: self.b.split_to(n),
        };
        while !p.b.is_empty() {
            let id = p.varint()? as u8;
            if f(id, &mut p)? {
                continue;
            }
            match id {
                0x01 | 0x17 | 0x19 | 0x24 | 0x25 | 0x28 | 0x29 | 0x2a => {
                    p.u8()?;
                }
                0x13 | 0x21 | 0x22 | 0x23 => {
                    p.u16()?;
                }
                0x02 | 0x11 | 0x18 | 0x27 => {
                    p.u32()?;
                }
                0x0b => {
                    p.varint()?;
                }
                0x03 | 0x08 | 0x09 | 0x12 | 0x15 | 0x16 | 0x1a | 0x1c | 0x1f => {
                    p.bin()?;
                }
                0x26 => {
                    p.bin()?;
                    p.bin()?;
                }
                other => return perr(format!("unknown property 0x{other:02x}")),
            }
        }
        Ok(())
    }
}

/// Decodes one packet from the front of `buf`, or `Ok(None)` if it is not complete yet.
/// `version` is the session's protocol version (CONNECT carries its own). Packets larger than
/// `max_len` are refused rather than buffered.
pub fn parse(
    buf: &mut BytesMut,
    version: Version,
    max_len: usize,
) -> Result<Option<Packet>, ProtoError> {
    if buf.len() < 2 {
        return Ok(None);
    }
    let Some((rem, used)) = get_varint(&buf[1..])? else {
        return Ok(None);
    };
    if rem > max_len {
        return perr(format!(
            "a {rem}-byte packet exceeds the {max_len}-byte limit"
        ));
    }
    let total = 1 + used + rem;
    if buf.len() < total {
        buf.reserve(total - buf.len());
        return Ok(None);
    }
    let header = buf[0];
    // The fixed header's flags are fixed for every packet but PUBLISH: 0010 for PUBREL,
    // SUBSCRIBE and UNSUBSCRIBE, 0000 for the others; anything else is malformed and ends
    // the connection [MQTT-2.2.2-2].
    let flags_ok = match header >> 4 {
        3 => true,
        6 | 8 | 10 => header & 0x0f == 0x02,
        _ => header & 0x0f == 0,
    };
    if !flags_ok {
        return perr(format!(
            "reserved fixed-header flags 0x{:x} on packet type {}",
            header & 0x0f,
            header >> 4
        ));
    }
    let mut frame = buf.split_to(total).freeze();
    frame.advance(1 + used);
    let mut b = Body { b: frame };
    let v5 = version == Version::V5;
    let pkt = match header >> 4 {
        1 => parse_connect(&mut b)?,
        2 => {
            let session_present = b.u8()? & 1 == 1;
            let code = b.u8()?;
            let (mut receive_max, mut max_packet, mut reason) = (65_535u16, 0u32, None);
            let (mut max_qos, mut server_keep_alive, mut shared_subs) = (2u8, None, true);
            if v5 && !b.b.is_empty() {
                b.props(|id, p| {
                    Ok(match id {
                        0x21 => {
                            receive_max = p.u16()?;
                            true
                        }
                        0x24 => {
                            max_qos = p.u8()?;
                            true
                        }
                        0x13 => {
                            server_keep_alive = Some(p.u16()?);
                            true
                        }
                        0x2a => {
                            shared_subs = p.u8()? != 0;
                            true
                        }
                        0x27 => {
                            max_packet = p.u32()?;
                            true
                        }
                        0x1f => {
                            reason = Some(p.string()?);
                            true
                        }
                        _ => false,
                    })
                })?;
            }
            Packet::ConnAck {
                session_present,
                code,
                receive_max,
                max_packet,
                max_qos,
                server_keep_alive,
                shared_subs,
                reason,
            }
        }
        3 => {
            let qos = (header >> 1) & 3;
            if qos == 3 {
                return perr("PUBLISH with QoS 3");
            }
            let topic = b.bin()?;
            let pid = if qos > 0 { b.u16()? } else { 0 };
            if v5 {
                b.props(|_, _| Ok(false))?;
            }
            Packet::Publish(Publish {
                topic,
                payload: b.b,
                qos,
                retain: header & 1 == 1,
                dup: header & 8 == 8,
                pid,
            })
        }
        4..=7 => {
            let pid = b.u16()?;
            let code = if b.b.is_empty() { 0 } else { b.u8()? };
            match header >> 4 {
                4 => Packet::PubAck { pid, code },
                5 => Packet::PubRec { pid, code },
                6 => Packet::PubRel { pid },
                _ => Packet::PubComp { pid },
            }
        }
        8 => {
            let pid = b.u16()?;
            if v5 {
                b.props(|_, _| Ok(false))?;
            }
            let mut filters = Vec::new();
            while !b.b.is_empty() {
                let f = b.string()?;
                let options = b.u8()?;
                // QoS 3, and bits reserved in the version (3.1.1: all but the QoS; 5: the top
                // two, and retain handling 3), make the packet malformed [MQTT-3-8.3-4],
                // [MQTT-3.8.3-5].
                let reserved = if v5 {
                    options & 0xc0 != 0 || options & 0x30 == 0x30
                } else {
                    options & 0xfc != 0
                };
                if options & 3 == 3 || reserved {
                    return perr(format!("SUBSCRIBE options byte 0x{options:02x}"));
                }
                filters.push((f, options & 3));
            }
            if filters.is_empty() {
                return perr("SUBSCRIBE without topic filters");
            }
            Packet::Subscribe { pid, filters }
        }
        9 => {
            let pid = b.u16()?;
            if v5 {
                b.props(|_, _| Ok(false))?;
            }
            Packet::SubAck {
                pid,
                codes: b.b.to_vec(),
            }
        }
        10 => {
            let pid = b.u16()?;
            if v5 {
                b.props(|_, _| Ok(false))?;
            }
            let mut filters = Vec::new();
            while !b.b.is_empty() {
                filters.push(b.string()?);
            }
            Packet::Unsubscribe { pid, filters }
        }
        11 => Packet::UnsubAck { pid: b.u16()? },
        12 => Packet::PingReq,
        13 => Packet::PingResp,
        14 => {
            let code = if b.b.is_empty() { 0 } else { b.u8()? };
            let mut session_expiry = None;
            if v5 && !b.b.is_empty() {
                b.props(|id, p| {
                    Ok(id == 0x11 && {
                        session_expiry = Some(p.u32()?);
                        true
                    })
                })?;
            }
            Packet::Disconnect {
                code,
                session_expiry,
            }
        }
        other => return perr(format!("unsupported packet type {other}")),
    };
    Ok(Some(pkt))
}

fn parse_connect(b: &mut Body) -> Result<Packet, ProtoError> {
    let name = b.bin()?;
    if name.as_ref() != b"MQTT" && name.as_ref() != b"MQIsdp" {
        return perr("CONNECT without the MQTT protocol name");
    }
    let version = match b.u8()? {
        4 => Version::V311,
        5 => Version::V5,
        other => {
            return perr(format!(
                "protocol level {other} is not supported (only 4 = 3.1.1 and 5)"
            ));
        }
    };
    let flags = b.u8()?;
    let keep_alive = b.u16()?;
    if version == Version::V5 {
        b.props(|_, _| Ok(false))?;
    }
    let client_id = b.string()?;
    if flags & 0x04 != 0 {
        if version == Version::V5 {
            b.props(|_, _| Ok(false))?;
        }
        b.bin()?;
        b.bin()?;
    }
    let username = if flags & 0x80 != 0 {
        Some(b.string()?)
    } else {
        None
    };
    let password = if flags & 0x40 != 0 {
        Some(b.bin()?)
    } else {
        None
    };
    Ok(Packet::Connect(Connect {
        version,
        client_id,
        keep_alive,
        clean: flags & 0x02 != 0,
        username,
        password,
    }))
}

/// Whether `topic` matches the subscription `filter` (`+` one level, `#` the rest; topics
/// starting with `$` only match filters that name the `$` level).
pub fn topic_matches(filter: &[u8], topic: &[u8]) -> bool {
    if topic.first() == Some(&b'$') && matches!(filter.first(), Some(b'+' | b'#')) {
        return false;
    }
    let mut f = filter.split(|c| *c == b'/');
    let mut t = topic.split(|c| *c == b'/');
    loop {
        match (f.next(), t.next()) {
            (Some(b"#"), _) => return true,
            (Some(b"+"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(version: Version, write: impl FnOnce(&mut BytesMut)) -> Packet {
        let mut b = BytesMut::new();
        write(&mut b);
        let whole = b.clone();
        // Every strict prefix is incomplete, never an error.
        for cut in 0..whole.len() {
            let mut part = BytesMut::from(&whole[..cut]);
            assert_eq!(
                parse(&mut part, version, MAX_REMAINING),
                Ok(None),
                "cut at {cut}"
            );
        }
        let p = parse(&mut b, version, MAX_REMAINING).unwrap().unwrap();
        assert!(b.is_empty());
        p
    }

    /// The packets the spec says to close the connection on, found with a raw client against
    /// `serve mqtt` (Mosquitto closes on each): reserved fixed-header flags, and SUBSCRIBE
    /// options with QoS 3 or reserved bits.
    #[test]
    fn reserved_flags_and_subscribe_options_are_malformed() {
        let bad: [(&[u8], Version); 8] = [
            (&[0x80, 6, 0, 1, 0, 1, b'a', 1], Version::V311), // SUBSCRIBE flags 0000
            (&[0x82, 6, 0, 1, 0, 1, b'a', 0x41], Version::V311), // reserved option bits
            (&[0x82, 6, 0, 1, 0, 1, b'a', 3], Version::V311), // QoS 3
            (&[0x82, 7, 0, 1, 0, 0, 1, b'a', 3], Version::V5), // QoS 3
            (&[0x82, 7, 0, 1, 0, 0, 1, b'a', 0x31], Version::V5), // retain handling 3
            (&[0xa0, 5, 0, 1, 0, 1, b'a'], Version::V311),    // UNSUBSCRIBE flags 0000
            (&[0x60, 2, 0, 1], Version::V311),                // PUBREL flags 0000
            (&[0xc1, 0], Version::V311),                      // PINGREQ flags 0001
        ];
        for (bytes, version) in bad {
            let mut b = BytesMut::from(bytes);
            assert!(
                parse(&mut b, version, MAX_REMAINING).is_err(),
                "{bytes:02x?}"
            );
        }
        // The same with the flags and options the spec says: accepted.
        let good: [(&[u8], Version); 4] = [
            (&[0x82, 6, 0, 1, 0, 1, b'a', 2], Version::V311),
            (&[0x82, 7, 0, 1, 0, 0, 1, b'a', 0x2e], Version::V5),
            (&[0x62, 2, 0, 1], Version::V311),
            (&[0xc0, 0], Version::V311),
        ];
        for (bytes, version) in good {
            let mut b = BytesMut::from(bytes);
            assert!(
                matches!(parse(&mut b, version, MAX_REMAINING), Ok(Some(_))),
                "{bytes:02x?}"
            );
        }
    }

    #[test]
    fn connect_both_versions() {
        for version in [Version::V311, Version::V5] {
            let p = roundtrip(version, |b| {
                put_connect(
                    b,
                    &ConnectOpts {
                        version,
                        client_id: "c-1",
                        keep_alive: 30,
                        clean: false,
                        username: Some("u"),
                        password: Some("pw"),
                        session_expiry: 60,
                    },
                )
            });
            assert_eq!(
                p,
                Packet::Connect(Connect {
                    version,
                    client_id: "c-1".into(),
                    keep_alive: 30,
                    clean: false,
                    username: Some("u".into()),
                    password: Some(Bytes::from_static(b"pw")),
                })
            );
        }
    }

    /// An MQTT 5 request carries its response topic and correlation data as properties, and
    /// parses as the PUBLISH it is.
    #[test]
    fn a_request_names_where_to_answer() {
        let p = roundtrip(Version::V5, |b| {
            put_request(b, b"svc", b"hello", b"msgbench/reply/c1/7", b"7");
            let props = [
                &[0x08, 0, 19][..],
                b"msgbench/reply/c1/7",
                &[0x09, 0, 1, b'7'],
            ]
            .concat();
            let at = 2 + 2 + 3;
            assert_eq!(&b[at..at + 1], &[props.len() as u8]);
            assert_eq!(&b[at + 1..at + 1 + props.len()], &props[..]);
        });
        assert_eq!(
            p,
            Packet::Publish(Publish {
                topic: Bytes::from_static(b"svc"),
                payload: Bytes::from_static(b"hello"),
                qos: 0,
                retain: false,
                dup: false,
                pid: 0
            })
        );
    }

    #[test]
    fn publish_and_acks() {
        for version in [Version::V311, Version::V5] {
            let payload = vec![7u8; 300];
            let p = roundtrip(version, |b| {
                put_publish(b, version, b"bench/1", &payload, 2, true, true, 513);
                assert_eq!(b.len(), publish_len(version, 7, 300, 2));
            });
            assert_eq!(
                p,
                Packet::Publish(Publish {
                    topic: Bytes::from_static(b"bench/1"),
                    payload: Bytes::from(payload.clone()),
                    qos: 2,
                    retain: true,
                    dup: true,
                    pid: 513
                })
            );
            let p = roundtrip(version, |b| {
                put_publish(b, version, b"t", b"x", 0, false, false, 0)
            });
            assert!(matches!(p, Packet::Publish(Publish { qos: 0, pid: 0, .. })));
            assert_eq!(
                roundtrip(version, |b| put_ack(b, PUBACK, 9)),
                Packet::PubAck { pid: 9, code: 0 }
            );
            assert_eq!(
                roundtrip(version, |b| put_ack(b, PUBREC, 9)),
                Packet::PubRec { pid: 9, code: 0 }
            );
            assert_eq!(
                roundtrip(version, |b| put_ack(b, PUBREL, 9)),
                Packet::PubRel { pid: 9 }
            );
            assert_eq!(
                roundtrip(version, |b| put_ack(b, PUBCOMP, 9)),
                Packet::PubComp { pid: 9 }
            );
        }
    }

    #[test]
    fn subscribe_connack_and_control() {
        for version in [Version::V311, Version::V5] {
            let p = roundtrip(version, |b| {
                put_subscribe(b, version, 3, &[("a/+", 1), ("$share/g/b", 2)])
            });
            assert_eq!(
                p,
                Packet::Subscribe {
                    pid: 3,
                    filters: vec![("a/+".into(), 1), ("$share/g/b".into(), 2)]
                }
            );
            assert_eq!(
                roundtrip(version, |b| put_suback(b, version, 3, &[1, 0x80])),
                Packet::SubAck {
                    pid: 3,
                    codes: vec![1, 0x80]
                }
            );
            assert_eq!(
                roundtrip(version, |b| put_unsubscribe(b, version, 4, &["a/+"])),
                Packet::Unsubscribe {
                    pid: 4,
                    filters: vec!["a/+".into()]
                }
            );
            assert_eq!(
                roundtrip(version, |b| put_unsuback(b, version, 4, 1)),
                Packet::UnsubAck { pid: 4 }
            );
            assert!(matches!(
                roundtrip(version, |b| put_connack(b, version, true, 0)),
                Packet::ConnAck {
                    session_present: true,
                    code: 0,
                    receive_max: 65_535,
                    ..
                }
            ));
            assert_eq!(roundtrip(version, put_pingreq), Packet::PingReq);
            assert_eq!(roundtrip(version, put_pingresp), Packet::PingResp);
            assert_eq!(
                roundtrip(version, put_disconnect),
                Packet::Disconnect {
                    code: 0,
                    session_expiry: None
                }
            );
        }
    }

    /// A broker that supports QoS 0 and 1 only and sets the keep-alive itself says so in its
    /// CONNACK (as mochi-mqtt does with a maximum QoS configured).
    #[test]
    fn v5_connack_maximum_qos_and_server_keep_alive_are_read() {
        // flags, reason 0, 8 bytes of properties: receive maximum 10, maximum QoS 1, server
        // keep alive 2 s.
        let mut b = BytesMut::from(&[0x20, 11, 0, 0, 8, 0x21, 0, 10, 0x24, 1, 0x13, 0, 2][..]);
        match parse(&mut b, Version::V5, MAX_REMAINING).unwrap().unwrap() {
            Packet::ConnAck {
                receive_max,
                max_qos,
                server_keep_alive,
                ..
            } => assert_eq!((receive_max, max_qos, server_keep_alive), (10, 1, Some(2))),
            other => panic!("{other:?}"),
        }
        let mut b = BytesMut::from(&[0x20, 3, 0, 0, 0][..]);
        assert!(matches!(
            parse(&mut b, Version::V5, MAX_REMAINING).unwrap().unwrap(),
            Packet::ConnAck {
                max_qos: 2,
                server_keep_alive: None,
                shared_subs: true,
                ..
            }
        ));
        // Shared Subscription Available 0: the broker takes no $share filters.
        let mut b = BytesMut::from(&[0x20, 5, 0, 0, 2, 0x2a, 0][..]);
        assert!(matches!(
            parse(&mut b, Version::V5, MAX_REMAINING).unwrap().unwrap(),
            Packet::ConnAck {
                shared_subs: false,
                ..
            }
        ));
    }

    #[test]
    fn v5_connack_properties_are_read() {
        // flags, reason 0x87, 10 bytes of properties: receive maximum 20, reason string "nope".
        let mut b = BytesMut::from(
            &[
                0x20, 13, 0, 0x87, 10, 0x21, 0, 20, 0x1f, 0, 4, b'n', b'o', b'p', b'e',
            ][..],
        );
        match parse(&mut b, Version::V5, MAX_REMAINING).unwrap().unwrap() {
            Packet::ConnAck {
                code,
                receive_max,
                reason,
                ..
            } => {
                assert_eq!(
                    (code, receive_max, reason.as_deref()),
                    (0x87, 20, Some("nope"))
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn malformed_and_oversized_are_errors() {
        let mut b = BytesMut::from(&[0x30, 0xff, 0xff, 0xff, 0xff, 0x01][..]);
        assert!(parse(&mut b, Version::V311, MAX_REMAINING).is_err());
        let mut b = BytesMut::new();
        put_publish(&mut b, Version::V311, b"t", &[0; 2000], 0, false, false, 0);
        assert!(
            parse(&mut b, Version::V311, 1000)
                .unwrap_err()
                .0
                .contains("exceeds")
        );
        let mut b = BytesMut::from(&[0x40, 1, 0][..]);
        assert!(parse(&mut b, Version::V311, MAX_REMAINING).is_err());
    }

    #[test]
    fn wildcards() {
        assert!(topic_matches(b"a/+/c", b"a/b/c"));
        assert!(!topic_matches(b"a/+/c", b"a/b/d"));
        assert!(topic_matches(b"a/#", b"a/b/c"));
        assert!(topic_matches(b"a/#", b"a"));
        assert!(topic_matches(b"#", b"x/y"));
        assert!(!topic_matches(b"#", b"$SYS/x"));
        assert!(!topic_matches(b"a/b", b"a/b/c"));
        assert!(topic_matches(b"bench/1", b"bench/1"));
    }
}

/// What an MQTT 5 reason code means (MQTT 5.0, 2.4: DISCONNECT's, PUBACK's, PUBREC's and
/// SUBACK's share one table), for the user.
pub fn disconnect_reason(code: u8) -> &'static str {
    match code {
        0x00 => "normal disconnection",
        0x04 => "disconnect with will message",
        0x80 => "unspecified error",
        0x81 => "malformed packet",
        0x82 => "protocol error",
        0x83 => "implementation specific error",
        0x87 => "not authorized",
        0x88 => "server unavailable",
        0x89 => "server busy",
        0x8b => "server shutting down",
        0x8d => "keep alive timeout",
        0x8e => "session taken over (another client connected with the same client id)",
        0x8f => "topic filter invalid",
        0x90 => "topic name invalid",
        0x91 => "packet identifier in use",
        0x93 => "receive maximum exceeded",
        0x94 => "topic alias invalid",
        0x95 => "packet too large",
        0x96 => "message rate too high",
        0x97 => "quota exceeded",
        0x98 => "administrative action",
        0x99 => "payload format invalid",
        0x9a => "retain not supported",
        0x9b => "QoS not supported",
        0x9c => "use another server",
        0x9d => "server moved",
        0x9e => "shared subscriptions not supported",
        0x9f => "connection rate exceeded",
        0xa0 => "maximum connect time",
        0xa1 => "subscription identifiers not supported",
        0xa2 => "wildcard subscriptions not supported",
        _ => "unknown reason",
    }
}

/// The broker's DISCONNECT as the reason a connection was lost.
pub fn disconnected_by_broker(code: u8) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        format!(
            "the broker disconnected us: {} (reason code 0x{code:02x})",
            disconnect_reason(code)
        ),
    )
}

#[cfg(test)]
mod disconnect_tests {
    #[test]
    fn disconnect_reasons_are_named() {
        let e = super::disconnected_by_broker(0x93).to_string();
        assert!(
            e.contains("receive maximum exceeded") && e.contains("0x93"),
            "{e}"
        );
        assert!(super::disconnect_reason(0x8e).contains("same client id"));
        assert_eq!(super::disconnect_reason(0x7f), "unknown reason");
    }
}
