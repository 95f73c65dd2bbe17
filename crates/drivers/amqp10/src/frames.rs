//! AMQP 1.0 frames and performatives (spec part 2), as msgbench writes and reads them.
//!
//! Writing: each `put_*` appends one whole frame to a connection's write buffer; a transfer's
//! message is encoded straight after its performative (`message::put_message`), so a payload
//! is copied once, into the buffer the socket writes from. Reading: [`split_frame`] takes one
//! frame off the read buffer as `Bytes` and [`Performative::parse`] reads the fields msgbench
//! acts on (the message of a transfer is read by `message::read_message`).

use crate::codec::{CodecError, Dec, Enc, Value};
use bytes::{BufMut, Bytes, BytesMut};

/// The protocol header that starts the SASL layer.
pub const SASL_HEADER: &[u8; 8] = b"AMQP\x03\x01\x00\x00";
/// The protocol header that starts AMQP proper.
pub const AMQP_HEADER: &[u8; 8] = b"AMQP\x00\x01\x00\x00";
/// The largest frame msgbench accepts (and offers in `open`).
pub const MAX_FRAME: u32 = 1 << 20;
/// The smallest maximum frame size a peer may ask for.
pub const MIN_MAX_FRAME: u32 = 512;

pub(crate) const OPEN: u64 = 0x10;
pub(crate) const BEGIN: u64 = 0x11;
pub(crate) const ATTACH: u64 = 0x12;
pub(crate) const FLOW: u64 = 0x13;
const TRANSFER: u64 = 0x14;
const DISPOSITION: u64 = 0x15;
pub(crate) const DETACH: u64 = 0x16;
pub(crate) const END: u64 = 0x17;
pub(crate) const CLOSE: u64 = 0x18;
pub(crate) const ERROR: u64 = 0x1d;
pub(crate) const SOURCE: u64 = 0x28;
pub(crate) const TARGET: u64 = 0x29;
const ACCEPTED: u64 = 0x24;
const REJECTED: u64 = 0x25;
const RELEASED: u64 = 0x26;
const MODIFIED: u64 = 0x27;
pub(crate) const SASL_MECHANISMS: u64 = 0x40;
pub(crate) const SASL_INIT: u64 = 0x41;
pub(crate) const SASL_CHALLENGE: u64 = 0x42;
pub(crate) const SASL_RESPONSE: u64 = 0x43;
pub(crate) const SASL_OUTCOME: u64 = 0x44;

/// Frame type 0x00 (the `type` octet of the frame header, spec 2.3.1): an AMQP frame,
/// carrying a performative (`open` to `close`, 2.7) and, for a `transfer`, the message after
/// it. Every frame msgbench writes after the SASL layer is of this type.
pub const AMQP: u8 = 0;
/// Frame type 0x01: a SASL frame (spec 5.3), only between the SASL protocol header and the
/// AMQP one, always on channel 0 (the spec has SASL frames ignore the channel).
pub const SASL: u8 = 1;

/// Appends one frame on `channel`: the 8-byte header, then what `body` writes.
pub fn put_frame(buf: &mut BytesMut, kind: u8, channel: u16, body: impl FnOnce(&mut Enc)) {
    let at = buf.len();
    buf.put_u32(0);
    buf.put_u8(2);
    buf.put_u8(kind);
    buf.put_u16(channel);
    body(&mut Enc::new(buf));
    let size = (buf.len() - at) as u32;
    buf[at..at + 4].copy_from_slice(&size.to_be_bytes());
}

/// An empty frame: keeps an idle connection alive.
pub fn put_heartbeat(buf: &mut BytesMut) {
    buf.put_slice(&[0, 0, 0, 8, 2, 0, 0, 0]);
}

/// `sasl-init` with `mechanism` and its initial response.
pub fn put_sasl_init(buf: &mut BytesMut, mechanism: &str, response: Option<&[u8]>, host: &str) {
    put_frame(buf, SASL, 0, |e| {
        e.list(SASL_INIT).symbol(mechanism);
        match response {
            Some(r) => e.binary(r),
            None => e.null(),
        };
        e.str(host).end();
    });
}

/// `sasl-response` (spec 5.3.3.4): the answer to a challenge (SCRAM's second message).
pub fn put_sasl_response(buf: &mut BytesMut, response: &[u8]) {
    put_frame(buf, SASL, 0, |e| {
        e.list(SASL_RESPONSE).binary(response).end();
    });
}

/// `open`: who we are, the largest frame we take, one channel, and (`idle_ms` > 0) our idle
/// time-out, within which the peer must send something (it sends empty frames when it has
/// nothing else, so a silent connection is a dead one).
pub fn put_open(buf: &mut BytesMut, container_id: &str, host: &str, idle_ms: u32) {
    put_frame(buf, AMQP, 0, |e| {
        let l = e
            .list(OPEN)
            .str(container_id)
            .str(host)
            .uint(MAX_FRAME)
            .ushort(0);
        if idle_ms > 0 {
            l.uint(idle_ms);
        }
        l.end();
    });
}

/// `begin` of the session on channel 0.
pub fn put_begin(buf: &mut BytesMut, next_outgoing_id: u32, incoming_window: u32) {
    put_frame(buf, AMQP, 0, |e| {
        e.list(BEGIN)
            .null()
            .uint(next_outgoing_id)
            .uint(incoming_window)
            .uint(u32::MAX)
            .uint(u32::MAX)
            .end();
    });
}

/// What a link attaches to.
pub struct Terminus<'a> {
    /// The node's `address` (the first field of `source`, spec 3.5.3, or `target`, 3.5.4):
    /// a queue or topic name, as the broker spells it. Written as a string.
    pub address: &'a str,
    /// The terminus's `capabilities`, written as an array of symbols (for example `queue`
    /// or `topic` for Artemis's routing type, `shared` and `global` for a shared
    /// subscription); empty leaves the field out.
    pub capabilities: &'a [String],
}

/// `attach` of a sender (`receiver` false: our terminus is the target) or a receiver (it is
/// the source). `settled`: the sender sends pre-settled.
pub fn put_attach(
    buf: &mut BytesMut,
    name: &str,
    handle: u32,
    receiver: bool,
    settled: bool,
    t: &Terminus<'_>,
) {
    put_frame(buf, AMQP, 0, |e| {
        e.list(ATTACH)
            .str(name)
            .uint(handle)
            .bool(receiver)
            .ubyte(if settled { 1 } else { 0 })
            .ubyte(0);
        if receiver {
            put_source(e, Some(t));
            e.list(TARGET).end();
        } else {
            put_source(e, None);
            e.list(TARGET).str(t.address);
            if t.capabilities.is_empty() {
                e.end();
            } else {
                e.null()
                    .null()
                    .null()
                    .null()
                    .null()
                    .symbols(t.capabilities)
                    .end();
            }
        }
        e.null().null();
        if receiver {
            e.null();
        } else {
            e.uint(0);
        }
        e.end();
    });
}

fn put_source(e: &mut Enc, t: Option<&Terminus<'_>>) {
    e.list(SOURCE);
    if let Some(t) = t {
        e.str(t.address);
        if !t.capabilities.is_empty() {
            for _ in 0..9 {
                e.null();
            }
            e.symbols(t.capabilities);
        }
    }
    e.end();
}

/// Session flow state sent with every `flow`.
#[derive(Debug, Clone, Copy)]
pub struct SessionFlow {
    /// `next-incoming-id` (spec 2.7.4, 2.5.6): the transfer id we expect next from the peer,
    /// its `begin`'s next-outgoing-id advanced by one per transfer frame received.
    pub next_incoming_id: u32,
    /// `incoming-window`: how many more transfer frames (not deliveries) we take before the
    /// peer must wait for our next `flow`.
    pub incoming_window: u32,
    /// `next-outgoing-id`: the transfer id our next transfer frame takes (one per frame, so a
    /// message split over frames uses several). Our outgoing window is always written as
    /// `u32::MAX` (unlimited).
    pub next_outgoing_id: u32,
}

/// `flow`: the session's windows, and a receiver link's credit when `link` is given
/// (handle, delivery count, credit).
pub fn put_flow(buf: &mut BytesMut, s: SessionFlow, link: Option<(u32, u32, u32)>) {
    put_frame(buf, AMQP, 0, |e| {
        e.list(FLOW)
            .uint(s.next_incoming_id)
            .uint(s.incoming_window)
            .uint(s.next_outgoing_id)
            .uint(u32::MAX);
        if let Some((handle, count, credit)) = link {
            e.uint(handle).uint(count).uint(credit);
        }
        e.end();
    });
}

/// A sender's `flow` after a drain (spec 2.6.7): link `handle` with its credit used up
/// (delivery-count advanced to `count`, link-credit 0) and drain set, so the receiver knows
/// the drain is done.
pub fn put_drained_flow(buf: &mut BytesMut, s: SessionFlow, handle: u32, count: u32) {
    put_frame(buf, AMQP, 0, |e| {
        e.list(FLOW)
            .uint(s.next_incoming_id)
            .uint(s.incoming_window)
            .uint(s.next_outgoing_id)
            .uint(u32::MAX)
            .uint(handle)
            .uint(count)
            .uint(0)
            .null()
            .bool(true)
            .end();
    });
}

/// One frame of a transfer: the first (`first`: id and tag) or a continuation, `more` when
/// further frames follow; `body` writes the frame's share of the message.
pub fn put_transfer(
    buf: &mut BytesMut,
    handle: u32,
    first: Option<u32>,
    settled: bool,
    more: bool,
    body: impl FnOnce(&mut BytesMut),
) {
    put_frame(buf, AMQP, 0, |e| {
        e.list(TRANSFER).uint(handle);
        match first {
            Some(id) => {
                e.uint(id).binary(&id.to_be_bytes()).uint(0).bool(settled);
            }
            None => {
                e.null().null().null().null();
            }
        }
        if more {
            e.bool(true);
        }
        e.end();
        body(e.buf);
    });
}

/// How a receiver settles deliveries.
pub use crate::options::Disposition;

/// `disposition` settling deliveries `first..=last` as `how` (receiver role).
pub fn put_disposition(buf: &mut BytesMut, first: u32, last: u32, how: Disposition) {
    put_frame(buf, AMQP, 0, |e| {
        e.list(DISPOSITION)
            .bool(true)
            .uint(first)
            .uint(last)
            .bool(true);
        match how {
            Disposition::Accept => e.list(ACCEPTED).end(),
            Disposition::Release => e.list(RELEASED).end(),
            Disposition::Reject => e.list(REJECTED).end(),
        };
        e.end();
    });
}

/// `detach` (closing the link).
pub fn put_detach(buf: &mut BytesMut, handle: u32) {
    put_frame(buf, AMQP, 0, |e| {
        e.list(DETACH).uint(handle).bool(true).end();
    });
}

/// `end` of the session.
pub fn put_end(buf: &mut BytesMut) {
    put_frame(buf, AMQP, 0, |e| {
        e.list(END).end();
    });
}

/// `close` of the connection.
pub fn put_close(buf: &mut BytesMut) {
    put_frame(buf, AMQP, 0, |e| {
        e.list(CLOSE).end();
    });
}

/// The frame header and the performative of a transfer, an upper bound.
pub const TRANSFER_OVERHEAD: usize = 64;

/// One frame off the front of `rbuf`, if it is all there: (type, channel, body).
pub fn split_frame(rbuf: &mut BytesMut) -> Result<Option<(u8, u16, Bytes)>, CodecError> {
    if rbuf.len() < 8 {
        return Ok(None);
    }
    let size = u32::from_be_bytes([rbuf[0], rbuf[1], rbuf[2], rbuf[3]]) as usize;
    let doff = rbuf[4] as usize * 4;
    if size < 8 || doff < 8 || doff > size {
        return Err(CodecError(format!(
            "a frame of {size} bytes with data offset {doff}"
        )));
    }
    if size > MAX_FRAME as usize {
        return Err(CodecError(format!(
            "a frame of {size} bytes, larger than the {MAX_FRAME} agreed"
        )));
    }
    if rbuf.len() < size {
        rbuf.reserve(size - rbuf.len());
        return Ok(None);
    }
    let kind = rbuf[5];
    let channel = u16::from_be_bytes([rbuf[6], rbuf[7]]);
    let frame = rbuf.split_to(size).freeze();
    Ok(Some((kind, channel, frame.slice(doff..))))
}

/// An AMQP error: condition and description, as the broker sent them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmqpError {
    /// The `condition` symbol (spec 2.8.14; standard ones in 2.8.15 to 2.8.18), for example
    /// `amqp:not-found` or `amqp:unauthorized-access`; `amqp:unknown` when the peer sent an
    /// error without one.
    pub condition: String,
    /// The error's `description`, the peer's own words, when it gave one.
    pub description: Option<String>,
}

impl std::fmt::Display for AmqpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.description {
            Some(d) => write!(f, "{}: {d}", self.condition),
            None => f.write_str(&self.condition),
        }
    }
}

fn error(v: Value<'_>) -> Result<Option<AmqpError>, CodecError> {
    let Value::Described(ERROR, mut inner) = v else {
        return Ok(None);
    };
    let Value::List(mut l) = inner.read()? else {
        return Ok(None);
    };
    Ok(Some(AmqpError {
        condition: l.read()?.as_str().unwrap_or("amqp:unknown").to_string(),
        description: l.read()?.as_str().map(str::to_string),
    }))
}

/// The address of a source or target (its first field), if it has one.
fn terminus_address(v: Value<'_>) -> Result<Option<String>, CodecError> {
    let Value::Described(_, mut inner) = v else {
        return Ok(None);
    };
    let Value::List(mut l) = inner.read()? else {
        return Ok(None);
    };
    Ok(l.read()?.as_str().map(str::to_string))
}

/// What the receiving end said about a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `accepted` (spec 3.4.2): the receiver took the message; for a producer, the ack.
    Accepted,
    /// `rejected` (3.4.3): the receiver refused the message as invalid; with the `error` it
    /// gave, if any.
    Rejected(Option<AmqpError>),
    /// `released` (3.4.4): the message was not processed and may go to another receiver;
    /// for a producer, not delivered (msgbench counts it as refused).
    Released,
    /// `modified` (3.4.5): like released, with the receiver's annotations (the
    /// message-annotations field is not read).
    Modified {
        /// `delivery-failed`: the attempt counts as a failed delivery (the broker raises the
        /// delivery count). `false` when absent.
        delivery_failed: bool,
        /// `undeliverable-here`: the broker must not deliver the message to this receiver
        /// again. `false` when absent.
        undeliverable_here: bool,
    },
    /// No state, or one that is not an outcome.
    Other,
}

impl Outcome {
    fn parse(v: Value<'_>) -> Result<Outcome, CodecError> {
        let Value::Described(code, mut inner) = v else {
            return Ok(Outcome::Other);
        };
        let mut l = match inner.read()? {
            Value::List(l) => l,
            _ => Dec::new(&[]),
        };
        Ok(match code {
            ACCEPTED => Outcome::Accepted,
            REJECTED => Outcome::Rejected(error(l.read()?)?),
            RELEASED => Outcome::Released,
            MODIFIED => Outcome::Modified {
                delivery_failed: l.read()?.as_bool().unwrap_or(false),
                undeliverable_here: l.read()?.as_bool().unwrap_or(false),
            },
            _ => Outcome::Other,
        })
    }
}

/// A transfer frame's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    /// `handle` (spec 2.7.5): the sender's handle of the link, as its `attach` announced it
    /// (0 if absent); map it to a link by the peer's handle, not ours.
    pub handle: u32,
    /// Set on a delivery's first frame.
    pub delivery_id: Option<u32>,
    /// `settled`: the sender settled the delivery already (pre-settled): there is no
    /// disposition to send. `false` when absent; a multi-frame delivery is taken as its
    /// first frame says.
    pub settled: bool,
    /// More frames of the same delivery follow.
    pub more: bool,
    /// `aborted`: the sender abandoned the delivery; the frames of it received so far are to
    /// be discarded and nothing is delivered or settled.
    pub aborted: bool,
    /// Where the message bytes start in the frame body.
    pub payload_at: usize,
}

/// The fields msgbench acts on, of every frame it may receive.
#[derive(Debug, Clone, PartialEq)]
pub enum Performative {
    /// An empty frame (a peer's heartbeat).
    Empty,
    /// `sasl-mechanisms` (spec 5.3.3.1): the mechanisms the server offers, as names (a
    /// single symbol instead of an array is read too).
    SaslMechanisms(Vec<String>),
    /// `sasl-challenge` (5.3.3.3): the server's next step of a mechanism with several (SCRAM).
    SaslChallenge(Vec<u8>),
    /// `sasl-outcome` (5.3.3.5): its `code` (5.3.3.6): 0 ok, 1 auth (bad credentials), 2 sys,
    /// 3 sys-perm, 4 sys-temp; a missing code reads as 4, so only an explicit 0 is success.
    /// Then its `additional-data` (empty if none): SCRAM's server signature on success.
    SaslOutcome(u8, Vec<u8>),
    /// A client's choice of SASL mechanism (the listening side reads it).
    SaslInit {
        /// The chosen mechanism (`sasl-init`'s first field, 5.3.3.2), empty if absent. The
        /// initial response (credentials) is not read: a listening msgbench checks nobody.
        mechanism: String,
    },
    /// `open` (spec 2.7.1): the peer's limits for the connection.
    Open {
        /// `max-frame-size`: the largest frame, in bytes, the peer takes; `u32::MAX` (the
        /// spec's default) when absent. Not clamped here: the connection bounds it to
        /// [`MIN_MAX_FRAME`]..=[`MAX_FRAME`].
        max_frame: u32,
        /// `idle-time-out` in milliseconds: the peer drops the connection if we send nothing
        /// for that long, so we owe it a frame (an empty one if need be) sooner. `None` when
        /// absent or 0 (no time-out).
        idle_ms: Option<u32>,
        /// `offered-capabilities` names `SHARED-SUBS`: the peer shares a subscription among
        /// receivers that attach with one link name and the `shared` capability (the JMS
        /// mapping's extension; Qpid JMS refuses shared subscriptions to a peer without it).
        shared_subs: bool,
    },
    /// `begin` (spec 2.7.2): the peer's half of the session.
    Begin {
        /// `next-outgoing-id`: the transfer id of the peer's first transfer frame, where our
        /// next-incoming-id starts (0 if absent).
        next_outgoing_id: u32,
        /// `incoming-window`: how many transfer frames the peer takes before it sends a
        /// `flow` (0 if absent: we may send nothing until it does).
        incoming_window: u32,
    },
    /// `attach` (spec 2.7.3): a link, either the answer to ours (matched by `name`) or, on a
    /// listening side, a peer's new link.
    Attach {
        /// The link `name`, which identifies the link in both directions (the answer to our
        /// attach carries our name). Empty if absent.
        name: String,
        /// The peer's `handle` for the link: what its later `flow`, `transfer` and `detach`
        /// frames name it by (0 if absent).
        handle: u32,
        /// The peer's terminus (the source of its sender, the target of its receiver) is
        /// there: a link refused outright comes without it, followed by a detach.
        has_terminus: bool,
        /// The peer's role is receiver (it attaches to take messages).
        peer_receiver: bool,
        /// The peer's sender settle mode (0 unsettled, 1 settled, 2 mixed).
        snd_settle: u8,
        /// The address the link is about: the target's of a sender, the source's of a
        /// receiver.
        address: Option<String>,
        /// The source and target as encoded by the peer (`None`: absent), echoed back by a
        /// listening side when it answers.
        source: Option<Vec<u8>>,
        /// The target as encoded by the peer (`None`: absent or null), echoed back like
        /// `source`.
        target: Option<Vec<u8>>,
        /// A sender's initial delivery count.
        initial_delivery_count: Option<u32>,
    },
    /// `flow` (spec 2.7.4): the peer's session window and, when `handle` is set, one link's
    /// flow state. Fields not listed (outgoing-window, available, properties) are not read.
    Flow {
        /// `next-incoming-id`: the next transfer id the peer expects from us; absent when the
        /// peer has not yet seen our `begin` (then it counts from our initial id, 0).
        next_incoming_id: Option<u32>,
        /// `incoming-window`: how many transfer frames, counted from `next_incoming_id`, the
        /// peer takes (0 if absent). Our remaining window is their sum minus our
        /// next-outgoing-id.
        incoming_window: u32,
        /// The peer's `handle` of the link the rest applies to; `None`: a session-only flow.
        handle: Option<u32>,
        /// The link's `delivery-count` as the peer has it; a receiver that has not seen our
        /// attach leaves it out (it then counts from our initial delivery count).
        delivery_count: Option<u32>,
        /// `link-credit`: how many deliveries, counted from `delivery_count`, the receiver
        /// takes (credit = delivery-count + link-credit - our delivery count, 2.6.7).
        link_credit: Option<u32>,
        /// `drain`: a receiver asks the sender to use up its credit or give it back
        /// (advancing delivery-count) and say so in a `flow` (`false` if absent).
        drain: bool,
        /// `echo`: the peer asks for our flow state back in a `flow` of ours (`false` if
        /// absent).
        echo: bool,
    },
    /// `transfer` (spec 2.7.5): one frame of a delivery; the message follows at
    /// [`Transfer::payload_at`].
    Transfer(Transfer),
    /// `disposition` (spec 2.7.6): the peer's settlement or state for a range of deliveries.
    Disposition {
        /// The peer settles as the receiver (of our transfers).
        receiver: bool,
        /// `first`: the first delivery id of the range.
        first: u32,
        /// `last`: the last delivery id of the range, inclusive (`first` when absent: one
        /// delivery). Ids wrap around, so the range may cross `u32::MAX`.
        last: u32,
        /// `settled`: the peer settled the range (it forgets the deliveries); `false` when
        /// absent.
        settled: bool,
        /// The `state` field as an outcome ([`Outcome::Other`] when absent or a non-terminal
        /// state such as `received`).
        outcome: Outcome,
    },
    /// `detach` (spec 2.7.7): the peer detached a link, or answered our detach.
    Detach {
        /// The peer's `handle` of the link (0 if absent).
        handle: u32,
        /// The `error` saying why, if the peer gave one (a refused link carries the reason
        /// here). The `closed` flag is not read: either way the link is over for msgbench.
        error: Option<AmqpError>,
    },
    /// `end` (spec 2.7.8): the peer ended the session, with its `error` if it gave one.
    End(Option<AmqpError>),
    /// `close` (spec 2.7.9): the peer closed the connection, with its `error` if it gave one
    /// (a broker refusing the connection after the handshake says why here).
    Close(Option<AmqpError>),
    /// A frame msgbench ignores.
    Other(u64),
}

impl Performative {
    /// Reads the performative at the start of a frame body (`Empty` for an empty body).
    pub fn parse(body: &[u8]) -> Result<Performative, CodecError> {
        if body.is_empty() {
            return Ok(Performative::Empty);
        }
        let mut top = Dec::new(body);
        let Value::Described(code, mut inner) = top.read()? else {
            return Err(CodecError("a frame without a performative".into()));
        };
        let payload_at = top.pos();
        let mut f = match inner.read()? {
            Value::List(l) => l,
            _ => Dec::new(&[]),
        };
        let uint = |v: Value<'_>| v.as_u32();
        Ok(match code {
            SASL_MECHANISMS => {
                let mut names = Vec::new();
                match f.read()? {
                    Value::Array(mut a) => {
                        while !a.is_empty() {
                            if let Some(s) = a.read()?.as_str() {
                                names.push(s.to_string());
                            }
                        }
                    }
                    v => names.extend(v.as_str().map(str::to_string)),
                }
                Performative::SaslMechanisms(names)
            }
            SASL_OUTCOME => {
                let code = f.read()?.as_uint().unwrap_or(4) as u8;
                match f.read()? {
                    Value::Binary(b) => Performative::SaslOutcome(code, b.to_vec()),
                    _ => Performative::SaslOutcome(code, Vec::new()),
                }
            }
            SASL_CHALLENGE => match f.read()? {
                Value::Binary(b) => Performative::SaslChallenge(b.to_vec()),
                _ => Performative::SaslChallenge(Vec::new()),
            },
            SASL_INIT => Performative::SaslInit {
                mechanism: f.read()?.as_str().unwrap_or("").to_string(),
            },
            OPEN => {
                f.read()?;
                f.read()?;
                let max_frame = uint(f.read()?).unwrap_or(u32::MAX);
                f.read()?;
                let idle_ms = uint(f.read()?).filter(|&ms| ms > 0);
                f.read()?;
                f.read()?;
                let shared_subs = match f.read()? {
                    Value::Array(mut a) => {
                        let mut found = false;
                        while !a.is_empty() {
                            found |= a.read()?.as_str() == Some("SHARED-SUBS");
                        }
                        found
                    }
                    v => v.as_str() == Some("SHARED-SUBS"),
                };
                Performative::Open {
                    max_frame,
                    idle_ms,
                    shared_subs,
                }
            }
            BEGIN => {
                f.read()?;
                Performative::Begin {
                    next_outgoing_id: uint(f.read()?).unwrap_or(0),
                    incoming_window: uint(f.read()?).unwrap_or(0),
                }
            }
            ATTACH => {
                let name = f.read()?.as_str().unwrap_or("").to_string();
                let handle = uint(f.read()?).unwrap_or(0);
                let peer_receiver = f.read()?.as_bool().unwrap_or(false);
                let snd_settle = f.read()?.as_uint().unwrap_or(2).min(2) as u8;
                f.read()?;
                let (source, source_raw) = f.read_raw()?;
                let (target, target_raw) = f.read_raw()?;
                // unsettled, incomplete-unsettled, then the initial delivery count.
                f.read()?;
                f.read()?;
                let initial_delivery_count = uint(f.read()?);
                let raw = |v: Value<'_>, r: &[u8]| v.some().map(|_| r.to_vec());
                let terminus = if peer_receiver { source } else { target };
                Performative::Attach {
                    name,
                    handle,
                    has_terminus: if peer_receiver {
                        target.some().is_some()
                    } else {
                        source.some().is_some()
                    },
                    peer_receiver,
                    snd_settle,
                    address: terminus_address(terminus)?,
                    source: raw(source, source_raw),
                    target: raw(target, target_raw),
                    initial_delivery_count,
                }
            }
            FLOW => {
                let next_incoming_id = uint(f.read()?);
                let incoming_window = uint(f.read()?).unwrap_or(0);
                f.read()?;
                f.read()?;
                let handle = uint(f.read()?);
                let delivery_count = uint(f.read()?);
                let link_credit = uint(f.read()?);
                f.read()?;
                let drain = f.read()?.as_bool().unwrap_or(false);
                let echo = f.read()?.as_bool().unwrap_or(false);
                Performative::Flow {
                    next_incoming_id,
                    incoming_window,
                    handle,
                    delivery_count,
                    link_credit,
                    drain,
                    echo,
                }
            }
            TRANSFER => {
                let handle = uint(f.read()?).unwrap_or(0);
                let delivery_id = uint(f.read()?);
                f.read()?;
                f.read()?;
                let settled = f.read()?.as_bool().unwrap_or(false);
                let more = f.read()?.as_bool().unwrap_or(false);
                f.read()?;
                f.read()?;
                f.read()?;
                let aborted = f.read()?.as_bool().unwrap_or(false);
                Performative::Transfer(Transfer {
                    handle,
                    delivery_id,
                    settled,
                    more,
                    aborted,
                    payload_at,
                })
            }
            DISPOSITION => {
                let receiver = f.read()?.as_bool().unwrap_or(false);
                let first = uint(f.read()?).unwrap_or(0);
                let last = uint(f.read()?).unwrap_or(first);
                let settled = f.read()?.as_bool().unwrap_or(false);
                let outcome = Outcome::parse(f.read()?)?;
                Performative::Disposition {
                    receiver,
                    first,
                    last,
                    settled,
                    outcome,
                }
            }
            DETACH => {
                let handle = uint(f.read()?).unwrap_or(0);
                f.read()?;
                Performative::Detach {
                    handle,
                    error: error(f.read()?)?,
                }
            }
            END => Performative::End(error(f.read()?)?),
            CLOSE => Performative::Close(error(f.read()?)?),
            other => Performative::Other(other),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{OutBody, OutMessage, message_overhead, put_message, read_message};
    use msgbench_core::meta::{self, Meta};

    fn one(buf: &mut BytesMut) -> Bytes {
        let (kind, ch, body) = split_frame(buf).unwrap().unwrap();
        assert_eq!((kind, ch), (AMQP, 0));
        body
    }

    #[test]
    fn a_transfer_carries_its_message_and_reads_back() {
        let meta = Meta {
            message_id: Some("m-1".into()),
            correlation_id: Some("7-run".into()),
            creation_time_ms: Some(1_700_000_000_123),
            properties: vec![
                ("receiverCode".into(), meta::Value::Str("X".into())),
                ("isTracingMessage".into(), meta::Value::Bool(true)),
                ("n".into(), meta::Value::Int(-300)),
            ],
            topic: None,
        };
        let body = vec![7u8; 3000];
        let m = OutMessage {
            meta: Some(&meta),
            body: OutBody::Data(&body),
            durable: true,
        };
        let mut buf = BytesMut::new();
        put_transfer(&mut buf, 3, Some(41), false, false, |b| put_message(b, &m));
        let len = buf.len();
        assert!(len <= body.len() + message_overhead(&m) + TRANSFER_OVERHEAD);
        let f = one(&mut buf);
        assert!(buf.is_empty());
        let p = Performative::parse(&f).unwrap();
        let Performative::Transfer(Transfer {
            handle: 3,
            delivery_id: Some(41),
            settled: false,
            more: false,
            aborted: false,
            payload_at,
        }) = p
        else {
            panic!("{p:?}");
        };
        let parts = read_message(&f.slice(payload_at..), true).unwrap();
        assert_eq!(parts.meta, meta);
        assert_eq!(&parts.body[..], &body[..]);
        assert!(!parts.text && !parts.redelivered);
        // Without metadata asked for, none is decoded.
        assert_eq!(
            read_message(&f.slice(payload_at..), false).unwrap().meta,
            Meta::default()
        );

        let mut buf = BytesMut::new();
        put_transfer(&mut buf, 0, Some(1), true, false, |b| {
            put_message(
                b,
                &OutMessage {
                    meta: None,
                    body: OutBody::Text("DELIVERED"),
                    durable: false,
                },
            )
        });
        let f = one(&mut buf);
        let Performative::Transfer(Transfer {
            payload_at,
            settled: true,
            ..
        }) = Performative::parse(&f).unwrap()
        else {
            panic!()
        };
        let parts = read_message(&f.slice(payload_at..), true).unwrap();
        assert_eq!((&parts.body[..], parts.text), (&b"DELIVERED"[..], true));
    }

    /// A broker's open says whether it shares subscriptions (Artemis offers `SHARED-SUBS`
    /// with other capabilities; msgbench's own open, like ActiveMQ Classic's, offers none).
    #[test]
    fn an_open_says_whether_subscriptions_are_shared() {
        let mut buf = BytesMut::new();
        put_frame(&mut buf, AMQP, 0, |e| {
            e.list(OPEN)
                .str("broker")
                .str("localhost")
                .uint(65536)
                .ushort(65535)
                .uint(30000)
                .null()
                .null()
                .symbols(&["ANONYMOUS-RELAY".into(), "SHARED-SUBS".into()])
                .end();
        });
        put_open(&mut buf, "msgbench", "localhost", 0);
        let f = one(&mut buf);
        assert_eq!(
            Performative::parse(&f).unwrap(),
            Performative::Open {
                max_frame: 65536,
                idle_ms: Some(30000),
                shared_subs: true
            }
        );
        let f = one(&mut buf);
        assert!(matches!(
            Performative::parse(&f).unwrap(),
            Performative::Open {
                shared_subs: false,
                ..
            }
        ));
    }

    #[test]
    fn dispositions_flows_and_errors_read_back() {
        let mut buf = BytesMut::new();
        put_disposition(&mut buf, 5, 9, Disposition::Release);
        put_flow(
            &mut buf,
            SessionFlow {
                next_incoming_id: 10,
                incoming_window: 2048,
                next_outgoing_id: 1,
            },
            Some((2, 100, 500)),
        );
        put_heartbeat(&mut buf);
        let f = one(&mut buf);
        assert_eq!(
            Performative::parse(&f).unwrap(),
            Performative::Disposition {
                receiver: true,
                first: 5,
                last: 9,
                settled: true,
                outcome: Outcome::Released
            }
        );
        let f = one(&mut buf);
        assert_eq!(
            Performative::parse(&f).unwrap(),
            Performative::Flow {
                next_incoming_id: Some(10),
                incoming_window: 2048,
                handle: Some(2),
                delivery_count: Some(100),
                link_credit: Some(500),
                drain: false,
                echo: false
            }
        );
        assert_eq!(
            Performative::parse(&one(&mut buf)).unwrap(),
            Performative::Empty
        );
        // A sender's answer to a drain: its credit used up, drain set.
        put_drained_flow(
            &mut buf,
            SessionFlow {
                next_incoming_id: 0,
                incoming_window: 64,
                next_outgoing_id: 3,
            },
            1,
            42,
        );
        assert_eq!(
            Performative::parse(&one(&mut buf)).unwrap(),
            Performative::Flow {
                next_incoming_id: Some(0),
                incoming_window: 64,
                handle: Some(1),
                delivery_count: Some(42),
                link_credit: Some(0),
                drain: true,
                echo: false
            }
        );
        // A detach with an error, as a broker writes it.
        let mut buf = BytesMut::new();
        put_frame(&mut buf, AMQP, 0, |e| {
            e.list(DETACH).uint(1).bool(true);
            e.list(ERROR)
                .symbol("amqp:not-found")
                .str("no such queue")
                .end();
            e.end();
        });
        assert_eq!(
            Performative::parse(&one(&mut buf)).unwrap(),
            Performative::Detach {
                handle: 1,
                error: Some(AmqpError {
                    condition: "amqp:not-found".into(),
                    description: Some("no such queue".into())
                })
            }
        );
        // Incomplete frames wait; nonsense sizes are errors.
        let mut part = BytesMut::from(&[0u8, 0, 0, 20, 2, 0, 0, 0, 1][..]);
        assert!(split_frame(&mut part).unwrap().is_none());
        let mut bad = BytesMut::from(&[0u8, 0, 0, 4, 2, 0, 0, 0][..]);
        assert!(split_frame(&mut bad).is_err());
    }

    /// The input fuzzing found (fuzz target amqp10_frames), reduced: sasl-mechanisms whose
    /// array claims 4 billion zero-width elements; parsing it looped for minutes.
    #[test]
    fn fuzz_sasl_mechanisms_with_a_bottomless_array_is_an_error() {
        let body = [
            0x00, 0x53, 0x40, 0xc0, 12, 1, 0xf0, 0, 0, 0, 6, 0xff, 0xff, 0xff, 0xff, 0x41, 0,
        ];
        assert!(Performative::parse(&body).is_err());
    }
}
