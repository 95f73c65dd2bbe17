//! ZMTP 3.0 (ZeroMQ's wire protocol over TCP, RFC 23) as far as msgbench speaks it: the
//! greeting, the NULL security mechanism's READY handshake, frames and multipart messages,
//! subscriptions both ways they travel, and heartbeats. Pure functions over byte buffers: the
//! I/O lives in `conn`.
//!
//! We announce version 3.0, not 3.1: a libzmq peer then sends subscriptions as messages
//! (`0x01` + prefix) rather than SUBSCRIBE commands; both forms are understood on receipt.

use bytes::{BufMut, Bytes, BytesMut};

/// Bytes in a ZMTP 3 greeting.
pub const GREETING_LEN: usize = 64;

/// Frame flag: more frames of this message follow.
const MORE: u8 = 0x01;
/// Frame flag: the size is 8 bytes (else 1).
const LONG: u8 = 0x02;
/// Frame flag: a command, not a message frame.
const COMMAND: u8 = 0x04;

/// The socket types msgbench's clients are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketType {
    /// A producer of PUSH/PULL.
    Push,
    /// A consumer of PUSH/PULL.
    Pull,
    /// A producer of PUB/SUB (it reads subscriptions, as an XPUB does, but needs no more).
    Pub,
    /// A consumer of PUB/SUB.
    Sub,
}

impl SocketType {
    /// The name in the READY command's `Socket-Type` property.
    pub fn name(self) -> &'static str {
        match self {
            SocketType::Push => "PUSH",
            SocketType::Pull => "PULL",
            SocketType::Pub => "PUB",
            SocketType::Sub => "SUB",
        }
    }

    /// The peer types ZeroMQ lets this type talk to.
    pub fn peers(self) -> &'static [&'static str] {
        match self {
            SocketType::Push => &["PULL"],
            SocketType::Pull => &["PUSH"],
            SocketType::Pub => &["SUB", "XSUB"],
            SocketType::Sub => &["PUB", "XPUB"],
        }
    }
}

/// What can go wrong on the wire. Each says what the peer did, for an error a user can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ZmtpError {
    /// The first bytes are not a ZeroMQ greeting.
    #[error("the peer does not speak ZeroMQ (no ZMTP greeting)")]
    NotZmtp,
    /// ZMTP 1 or 2.
    #[error("the peer speaks ZMTP {0}.x (libzmq before 4.0); msgbench speaks ZMTP 3")]
    OldVersion(u8),
    /// A security mechanism other than NULL.
    #[error(
        "the peer wants the {0} security mechanism; msgbench speaks only NULL (no CURVE, no PLAIN)"
    )]
    Mechanism(String),
    /// Something else arrived where the protocol has one thing.
    #[error("protocol error: expected {0}")]
    Expected(&'static str),
    /// The peer's socket type cannot talk to ours.
    #[error(
        "the peer is a {theirs} socket; a {ours} socket talks to {expected} (do both sides use the same pattern?)"
    )]
    PeerType {
        /// Ours.
        ours: &'static str,
        /// Theirs, as it said.
        theirs: String,
        /// What ours accepts.
        expected: String,
    },
    /// The peer sent an ERROR command.
    #[error("the peer refused the connection: {0}")]
    Refused(String),
    /// A frame larger than we accept.
    #[error("a frame of {0} bytes is larger than the {1}-byte limit")]
    TooLarge(u64, u64),
}

/// Our greeting: signature, version 3.0, mechanism NULL, not as-server.
pub fn greeting() -> [u8; GREETING_LEN] {
    let mut g = [0u8; GREETING_LEN];
    g[0] = 0xFF;
    // Padding, with the ZMTP 1.0 identity length libzmq sends for backward compatibility.
    g[8] = 0x01;
    g[9] = 0x7F;
    g[10] = 3;
    g[11] = 0;
    g[12..16].copy_from_slice(b"NULL");
    g
}

/// Checks the start of a peer's greeting as it arrives: what is not ZMTP, or is ZMTP before
/// 3.0, shows in its first 11 bytes. A ZMTP 2.0 peer sends 12 and waits for ours in its form;
/// an HTTP client sends its request and waits: waiting for all 64 bytes would end both in the
/// same time-out as a silent peer, their reasons unsaid.
///
/// # Errors
/// [`ZmtpError::NotZmtp`] or [`ZmtpError::OldVersion`].
pub fn check_greeting_start(g: &[u8]) -> Result<(), ZmtpError> {
    if g.first().is_some_and(|&b| b != 0xFF) || g.get(9).is_some_and(|&b| b != 0x7F) {
        return Err(ZmtpError::NotZmtp);
    }
    match g.get(10) {
        Some(&v) if v < 3 => Err(ZmtpError::OldVersion(v)),
        _ => Ok(()),
    }
}

/// Checks a peer's greeting.
///
/// # Errors
/// [`ZmtpError::NotZmtp`], [`ZmtpError::OldVersion`] or [`ZmtpError::Mechanism`].
pub fn check_greeting(g: &[u8; GREETING_LEN]) -> Result<(), ZmtpError> {
    if g[0] != 0xFF || g[9] != 0x7F {
        return Err(ZmtpError::NotZmtp);
    }
    if g[10] < 3 {
        return Err(ZmtpError::OldVersion(g[10]));
    }
    let mech = &g[12..32];
    let end = mech.iter().position(|&b| b == 0).unwrap_or(mech.len());
    if &mech[..end] != b"NULL" {
        return Err(ZmtpError::Mechanism(
            String::from_utf8_lossy(&mech[..end]).into_owned(),
        ));
    }
    Ok(())
}

/// Appends one frame: `more` when another frame of the message follows.
#[inline]
pub fn put_frame(buf: &mut BytesMut, more: bool, body: &[u8]) {
    let flags = if more { MORE } else { 0 };
    put_header(buf, flags, body.len());
    buf.put_slice(body);
}

#[inline]
fn put_header(buf: &mut BytesMut, flags: u8, len: usize) {
    if len <= 255 {
        buf.put_u8(flags);
        buf.put_u8(len as u8);
    } else {
        buf.put_u8(flags | LONG);
        buf.put_u64(len as u64);
    }
}

/// Appends a command: its name, then `data`.
pub fn put_command(buf: &mut BytesMut, name: &str, data: &[u8]) {
    put_header(buf, COMMAND, 1 + name.len() + data.len());
    buf.put_u8(name.len() as u8);
    buf.put_slice(name.as_bytes());
    buf.put_slice(data);
}

/// Appends the NULL mechanism's READY command for a socket of type `ours`.
pub fn put_ready(buf: &mut BytesMut, ours: SocketType) {
    let mut props = Vec::with_capacity(32);
    let (key, value) = (b"Socket-Type", ours.name().as_bytes());
    props.push(key.len() as u8);
    props.extend_from_slice(key);
    props.extend_from_slice(&(value.len() as u32).to_be_bytes());
    props.extend_from_slice(value);
    put_command(buf, "READY", &props);
}

/// Appends a ZMTP 3.0 subscription message: `0x01` and the prefix.
pub fn put_subscribe(buf: &mut BytesMut, prefix: &[u8]) {
    put_header(buf, 0, 1 + prefix.len());
    buf.put_u8(1);
    buf.put_slice(prefix);
}

/// One unit split off the front of a read buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unit {
    /// A whole message: its first and last frames (the same frame when it has one).
    Message {
        /// The first frame (the topic, in PUB/SUB).
        first: Bytes,
        /// The last frame (the payload).
        last: Bytes,
        /// How many frames it had.
        frames: u32,
    },
    /// A command: its name and what follows the name.
    Command {
        /// The name (`READY`, `PING`, `SUBSCRIBE`, ...).
        name: Bytes,
        /// Its data.
        data: Bytes,
    },
}

/// Splits the next whole unit off `buf`; `Ok(None)` when `buf` does not hold one yet (it is
/// then left as it was). Frames, and multipart messages all told, larger than `max` bytes are
/// an error, so a peer that is not ZeroMQ cannot make us buffer without bound.
///
/// # Errors
/// [`ZmtpError::TooLarge`], or [`ZmtpError::Expected`] for a command inside a multipart
/// message.
pub fn next_unit(buf: &mut BytesMut, max: u64) -> Result<Option<Unit>, ZmtpError> {
    let mut off = 0usize;
    let mut frames = 0u32;
    let mut first = 0..0;
    let mut total = 0u64;
    loop {
        let Some(&flags) = buf.get(off) else {
            return Ok(None);
        };
        let (head, len) = if flags & LONG != 0 {
            let Some(size) = buf.get(off + 1..off + 9) else {
                return Ok(None);
            };
            let mut b = [0u8; 8];
            b.copy_from_slice(size);
            (9, u64::from_be_bytes(b))
        } else {
            let Some(&size) = buf.get(off + 1) else {
                return Ok(None);
            };
            (2, u64::from(size))
        };
        total = total.saturating_add(len);
        if total > max {
            return Err(ZmtpError::TooLarge(total, max));
        }
        let start = off + head;
        let end = start + len as usize;
        if buf.len() < end {
            return Ok(None);
        }
        if flags & COMMAND != 0 {
            if frames > 0 {
                return Err(ZmtpError::Expected(
                    "a message frame, not a command, within a multipart message",
                ));
            }
            let all = buf.split_to(end).freeze();
            let body = all.slice(start..);
            let Some(&n) = body.first() else {
                return Err(ZmtpError::Expected("a command name"));
            };
            let n = usize::from(n);
            if body.len() < 1 + n {
                return Err(ZmtpError::Expected("a command name within the command"));
            }
            return Ok(Some(Unit::Command {
                name: body.slice(1..1 + n),
                data: body.slice(1 + n..),
            }));
        }
        if frames == 0 {
            first = start..end;
        }
        frames += 1;
        off = end;
        if flags & MORE == 0 {
            let all = buf.split_to(end).freeze();
            return Ok(Some(Unit::Message {
                first: all.slice(first),
                last: all.slice(start..end),
                frames,
            }));
        }
    }
}

/// Checks a peer's READY command for a socket of type `ours`.
///
/// # Errors
/// [`ZmtpError::Refused`] for an ERROR command, [`ZmtpError::PeerType`] for an incompatible
/// peer, [`ZmtpError::Expected`] for anything malformed.
pub fn check_ready(unit: &Unit, ours: SocketType) -> Result<(), ZmtpError> {
    let Unit::Command { name, data } = unit else {
        return Err(ZmtpError::Expected("the READY command"));
    };
    if name.as_ref() == b"ERROR" {
        let reason = data.get(1..).unwrap_or_default();
        return Err(ZmtpError::Refused(
            String::from_utf8_lossy(reason).into_owned(),
        ));
    }
    if name.as_ref() != b"READY" {
        return Err(ZmtpError::Expected("the READY command"));
    }
    let mut rest: &[u8] = data;
    let mut theirs: Option<&[u8]> = None;
    while let Some((&n, r)) = rest.split_first() {
        let n = usize::from(n);
        let (key, r) = r
            .split_at_checked(n)
            .ok_or(ZmtpError::Expected("a whole property name in READY"))?;
        let (len, r) = r
            .split_at_checked(4)
            .ok_or(ZmtpError::Expected("a property length in READY"))?;
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let (value, r) = r
            .split_at_checked(len)
            .ok_or(ZmtpError::Expected("a whole property value in READY"))?;
        if key.eq_ignore_ascii_case(b"Socket-Type") {
            theirs = Some(value);
        }
        rest = r;
    }
    let theirs = theirs.ok_or(ZmtpError::Expected("a Socket-Type property in READY"))?;
    if ours.peers().iter().any(|p| p.as_bytes() == theirs) {
        Ok(())
    } else {
        Err(ZmtpError::PeerType {
            ours: ours.name(),
            theirs: String::from_utf8_lossy(theirs).into_owned(),
            expected: ours.peers().join(" or "),
        })
    }
}

/// A change to what a subscriber receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subscription {
    /// Receive topics starting with this prefix.
    Subscribe(Bytes),
    /// Stop receiving them.
    Cancel(Bytes),
}

/// The subscription change a unit from a subscriber carries, in either form: a ZMTP 3.0
/// message (`0x01`/`0x00` + prefix) or a ZMTP 3.1 SUBSCRIBE/CANCEL command.
pub fn subscription(unit: &Unit) -> Option<Subscription> {
    match unit {
        Unit::Message {
            first, frames: 1, ..
        } => match first.first() {
            Some(1) => Some(Subscription::Subscribe(first.slice(1..))),
            Some(0) => Some(Subscription::Cancel(first.slice(1..))),
            _ => None,
        },
        Unit::Command { name, data } => match name.as_ref() {
            b"SUBSCRIBE" => Some(Subscription::Subscribe(data.clone())),
            b"CANCEL" => Some(Subscription::Cancel(data.clone())),
            _ => None,
        },
        Unit::Message { .. } => None,
    }
}

/// The PONG that answers a unit, if it is a PING (ZMTP 3.1 heartbeats: a peer that sends them
/// closes a connection that does not answer).
pub fn pong(unit: &Unit, out: &mut BytesMut) -> bool {
    match unit {
        Unit::Command { name, data } if name.as_ref() == b"PING" => {
            // Two bytes of TTL, then the context to echo (at most 16 bytes).
            let context = data.get(2..).unwrap_or_default();
            put_command(out, "PONG", &context[..context.len().min(16)]);
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(mut buf: BytesMut) -> Vec<Unit> {
        let mut v = Vec::new();
        while let Some(u) = next_unit(&mut buf, 1 << 20).unwrap() {
            v.push(u);
        }
        assert!(buf.is_empty(), "{} bytes left over", buf.len());
        v
    }

    #[test]
    fn greetings_are_judged_as_they_arrive() {
        assert!(matches!(
            check_greeting_start(b"GET / HTTP/1.1\r\n"),
            Err(ZmtpError::NotZmtp)
        ));
        let zmtp2 = [0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0x7F, 1, 8];
        assert!(matches!(
            check_greeting_start(&zmtp2),
            Err(ZmtpError::OldVersion(1))
        ));
        let ours = greeting();
        for n in 0..=ours.len() {
            assert!(check_greeting_start(&ours[..n]).is_ok(), "{n} bytes");
        }
    }

    #[test]
    fn greetings_round_trip_and_bad_ones_are_named() {
        let g = greeting();
        assert_eq!(g.len(), 64);
        check_greeting(&g).unwrap();
        let mut http = [0u8; 64];
        http[..4].copy_from_slice(b"GET ");
        assert_eq!(check_greeting(&http), Err(ZmtpError::NotZmtp));
        let mut old = g;
        old[10] = 2;
        assert_eq!(check_greeting(&old), Err(ZmtpError::OldVersion(2)));
        let mut curve = g;
        curve[12..17].copy_from_slice(b"CURVE");
        assert!(matches!(check_greeting(&curve), Err(ZmtpError::Mechanism(m)) if m == "CURVE"));
    }

    #[test]
    fn short_and_long_frames() {
        let mut buf = BytesMut::new();
        put_frame(&mut buf, false, b"hello");
        let long = vec![7u8; 300];
        put_frame(&mut buf, false, &long);
        assert_eq!(buf[0..2], [0, 5]);
        assert_eq!(buf[7], LONG);
        assert_eq!(buf[8..16], 300u64.to_be_bytes());
        let v = units(buf);
        assert_eq!(v.len(), 2);
        match &v[1] {
            Unit::Message { last, frames, .. } => {
                assert_eq!((last.len(), *frames), (300, 1));
            }
            u => panic!("{u:?}"),
        }
    }

    #[test]
    fn multipart_messages_arrive_whole() {
        let mut buf = BytesMut::new();
        put_frame(&mut buf, true, b"topic");
        put_frame(&mut buf, false, b"payload");
        let whole = buf.clone();
        // Every prefix short of the whole message yields nothing and is left in place.
        for cut in 0..whole.len() {
            let mut part = BytesMut::from(&whole[..cut]);
            assert_eq!(next_unit(&mut part, 100).unwrap(), None);
            assert_eq!(part.len(), cut);
        }
        let v = units(buf);
        assert_eq!(
            v,
            [Unit::Message {
                first: Bytes::from_static(b"topic"),
                last: Bytes::from_static(b"payload"),
                frames: 2
            }]
        );
    }

    #[test]
    fn oversized_frames_are_refused() {
        let mut buf = BytesMut::new();
        put_frame(&mut buf, false, &[0u8; 300]);
        assert_eq!(next_unit(&mut buf, 256), Err(ZmtpError::TooLarge(300, 256)));
        // Small frames do not add up to more either: a multipart message is bounded whole.
        let mut buf = BytesMut::new();
        put_frame(&mut buf, true, &[0u8; 200]);
        put_frame(&mut buf, true, &[0u8; 200]);
        assert_eq!(next_unit(&mut buf, 256), Err(ZmtpError::TooLarge(400, 256)));
    }

    #[test]
    fn ready_is_checked_for_the_peer_type() {
        let mut buf = BytesMut::new();
        put_ready(&mut buf, SocketType::Push);
        let v = units(buf);
        check_ready(&v[0], SocketType::Pull).unwrap();
        let e = check_ready(&v[0], SocketType::Sub).unwrap_err();
        assert!(e.to_string().contains("peer is a PUSH socket"), "{e}");
        assert!(e.to_string().contains("PUB or XPUB"), "{e}");
        // libzmq's READY carries more properties (Identity, ...); unknown ones are skipped.
        let mut buf = BytesMut::new();
        let mut props = Vec::new();
        for (k, v) in [(&b"Identity"[..], &b""[..]), (b"Socket-Type", b"XPUB")] {
            props.push(k.len() as u8);
            props.extend_from_slice(k);
            props.extend_from_slice(&(v.len() as u32).to_be_bytes());
            props.extend_from_slice(v);
        }
        put_command(&mut buf, "READY", &props);
        check_ready(&units(buf)[0], SocketType::Sub).unwrap();
        let mut buf = BytesMut::new();
        put_command(&mut buf, "ERROR", b"\x0bnot allowed");
        let e = check_ready(&units(buf)[0], SocketType::Sub).unwrap_err();
        assert_eq!(e, ZmtpError::Refused("not allowed".into()));
    }

    #[test]
    fn subscriptions_in_both_forms() {
        let mut buf = BytesMut::new();
        put_subscribe(&mut buf, b"bench.");
        put_command(&mut buf, "SUBSCRIBE", b"x");
        put_command(&mut buf, "CANCEL", b"x");
        put_frame(&mut buf, false, b"\x00bench.");
        let subs: Vec<_> = units(buf).iter().map(subscription).collect();
        assert_eq!(
            subs,
            [
                Some(Subscription::Subscribe(Bytes::from_static(b"bench."))),
                Some(Subscription::Subscribe(Bytes::from_static(b"x"))),
                Some(Subscription::Cancel(Bytes::from_static(b"x"))),
                Some(Subscription::Cancel(Bytes::from_static(b"bench."))),
            ]
        );
    }

    #[test]
    fn pings_are_answered_with_their_context() {
        let mut buf = BytesMut::new();
        put_command(&mut buf, "PING", b"\x00\x0actx");
        let mut out = BytesMut::new();
        assert!(pong(&units(buf)[0], &mut out));
        match &units(out)[0] {
            Unit::Command { name, data } => {
                assert_eq!((name.as_ref(), data.as_ref()), (&b"PONG"[..], &b"ctx"[..]));
            }
            u => panic!("{u:?}"),
        }
    }
}
