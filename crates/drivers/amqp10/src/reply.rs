//! Frames only a listening side writes (brokerless mode, [`crate::listen`]): the server half of
//! SASL, `begin` answering a peer's session, `attach` answering a peer's link (the role
//! flipped, its source and target echoed as it encoded them), and `detach`/`close` carrying an
//! error when a link or a connection is refused. Kept apart from [`crate::frames`], which
//! holds what both sides write and read.

use crate::codec::Enc;
use crate::frames::{
    AMQP, ATTACH, BEGIN, CLOSE, DETACH, ERROR, SASL, SASL_MECHANISMS, SASL_OUTCOME, SOURCE, TARGET,
    put_frame,
};
use bytes::BytesMut;

/// `sasl-mechanisms`: what a listening msgbench accepts (any login: it checks nobody).
pub fn put_sasl_mechanisms(buf: &mut BytesMut, mechanisms: &[String]) {
    put_frame(buf, SASL, 0, |e| {
        e.list(SASL_MECHANISMS).symbols(mechanisms).end();
    });
}

/// `sasl-outcome` with `code` (0 = ok, 1 = auth).
pub fn put_sasl_outcome(buf: &mut BytesMut, code: u8) {
    put_frame(buf, SASL, 0, |e| {
        e.list(SASL_OUTCOME).ubyte(code).end();
    });
}

/// `begin` answering the peer's session on `remote_channel` (ours is channel 0).
pub fn put_begin_reply(
    buf: &mut BytesMut,
    remote_channel: u16,
    next_outgoing_id: u32,
    incoming_window: u32,
) {
    put_frame(buf, AMQP, 0, |e| {
        e.list(BEGIN)
            .ushort(remote_channel)
            .uint(next_outgoing_id)
            .uint(incoming_window)
            .uint(u32::MAX)
            .uint(u32::MAX)
            .end();
    });
}

/// How a listening side answers one `attach`.
pub struct AttachReply<'a> {
    /// The link's name, as the peer gave it.
    pub name: &'a str,
    /// Our handle for it.
    pub handle: u32,
    /// Our role: receiver (the peer sends) or sender (the peer receives).
    pub receiver: bool,
    /// Sender settle mode: ours as a sender, the peer's echoed as a receiver.
    pub snd_settle: u8,
    /// The peer's source, encoded as it sent it, echoed byte for byte. `None` (or empty):
    /// when the source is the peer's own terminus (the peer sends, we are the receiver) it
    /// is written as an empty source so the link exists; otherwise (our own terminus) as
    /// null, which by the spec (2.6.3) refuses the link, a detach with the reason to follow.
    pub source: Option<&'a [u8]>,
    /// The peer's target, echoed like `source`. `None` (or empty): an empty target when it
    /// is the peer's own terminus (the peer receives, we are the sender), else null (a
    /// refusal, as for `source`).
    pub target: Option<&'a [u8]>,
}

/// `attach` answering a peer's link. A sender's answer carries initial delivery count 0.
pub fn put_attach_reply(buf: &mut BytesMut, r: &AttachReply<'_>) {
    put_frame(buf, AMQP, 0, |e| {
        e.list(ATTACH)
            .str(r.name)
            .uint(r.handle)
            .bool(r.receiver)
            .ubyte(r.snd_settle)
            .ubyte(0);
        for (t, code) in [(r.source, SOURCE), (r.target, TARGET)] {
            match t {
                Some(raw) if !raw.is_empty() => e.raw(raw),
                // A terminus the peer left out is given back empty, so the link exists.
                _ if code == SOURCE && r.receiver => e.list(SOURCE).end(),
                _ if code == TARGET && !r.receiver => e.list(TARGET).end(),
                _ => e.null(),
            };
        }
        e.null().null();
        if r.receiver {
            e.null();
        } else {
            e.uint(0);
        }
        e.end();
    });
}

/// `attach` refusing a peer's link: our terminus null, so the peer expects the detach with
/// the reason that follows ([`put_detach_error`]).
pub fn put_attach_refusal(buf: &mut BytesMut, name: &str, handle: u32, receiver: bool) {
    put_frame(buf, AMQP, 0, |e| {
        e.list(ATTACH)
            .str(name)
            .uint(handle)
            .bool(receiver)
            .ubyte(0)
            .ubyte(0)
            .null()
            .null()
            .end();
    });
}

fn put_error(e: &mut Enc, condition: &str, description: &str) {
    e.list(ERROR).symbol(condition).str(description).end();
}

/// `detach` (closed) of our `handle`, with an error when given.
pub fn put_detach_error(buf: &mut BytesMut, handle: u32, error: Option<(&str, &str)>) {
    put_frame(buf, AMQP, 0, |e| {
        e.list(DETACH).uint(handle).bool(true);
        if let Some((c, d)) = error {
            put_error(e, c, d);
        }
        e.end();
    });
}

/// `close` with an error (a connection refused).
pub fn put_close_error(buf: &mut BytesMut, condition: &str, description: &str) {
    put_frame(buf, AMQP, 0, |e| {
        e.list(CLOSE);
        put_error(e, condition, description);
        e.end();
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frames::{Performative, Terminus, put_attach, split_frame};

    #[test]
    fn an_attach_answer_echoes_the_terminus_and_flips_the_role() {
        // A peer's sender to `q` with capabilities; the answer is a receiver with the same
        // target, byte for byte.
        let caps = vec!["queue".to_string()];
        let mut buf = BytesMut::new();
        put_attach(
            &mut buf,
            "l1",
            3,
            false,
            false,
            &Terminus {
                address: "q",
                capabilities: &caps,
            },
        );
        let (_, _, body) = split_frame(&mut buf).unwrap().unwrap();
        let Performative::Attach {
            name,
            peer_receiver: false,
            address: Some(address),
            source,
            target: Some(target),
            snd_settle: 0,
            ..
        } = Performative::parse(&body).unwrap()
        else {
            panic!("not a sender's attach")
        };
        assert_eq!((name.as_str(), address.as_str()), ("l1", "q"));
        put_attach_reply(
            &mut buf,
            &AttachReply {
                name: &name,
                handle: 0,
                receiver: true,
                snd_settle: 0,
                source: source.as_deref(),
                target: Some(&target),
            },
        );
        let (_, _, body) = split_frame(&mut buf).unwrap().unwrap();
        // (As a receiver's, its address is its source's: the sender gave an empty one.)
        let Performative::Attach {
            peer_receiver: true,
            has_terminus: true,
            target: Some(t),
            ..
        } = Performative::parse(&body).unwrap()
        else {
            panic!("not a receiver's answer")
        };
        assert_eq!(t, target);
    }
}
