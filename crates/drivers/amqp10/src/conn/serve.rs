//! The listening side of a brokerless connection ([`Serving`]): links peers attach are
//! answered here — the role flipped, the source and target echoed as the peer encoded them, a
//! sender granted credit at once — and links of the wrong direction refused with a reason. The
//! rest of the connection (transfers, flow, settlement) is the same [`Conn`] a client uses.

use super::{Conn, Event, Link, LinkError, LinkId};
use crate::frames;
use std::task::{Context, Poll};

/// How a listening side answers the links peers attach (brokerless mode): a listening
/// consumer takes sender links and grants them credit, a listening producer takes receiver
/// links and sends within the credit they grant. A link of the other direction is refused with
/// `amqp:not-allowed`.
#[derive(Debug, Clone)]
pub struct Serving {
    /// Take peers' sender links (we receive); else their receiver links (we send).
    pub takes_senders: bool,
    /// Credit granted to each sender link, refilled at half.
    pub credit: u32,
    /// Our sender links send pre-settled, unless the receiver asks otherwise.
    pub settled: bool,
    /// Decode metadata of what arrives.
    pub meta: bool,
    /// A listening producer: the addresses it sends to. A receiver link attached to another
    /// (that no `prefix*` filter of it covers either) gets nothing: it is refused at once with
    /// `amqp:not-found`, naming them, instead of waiting on a link that stays empty.
    pub sends: Vec<String>,
}

/// A peer's attach, as the listening side answers it.
pub(super) struct PeerAttach {
    pub(super) name: String,
    pub(super) handle: u32,
    pub(super) peer_receiver: bool,
    pub(super) snd_settle: u8,
    pub(super) address: Option<String>,
    pub(super) source: Option<Vec<u8>>,
    pub(super) target: Option<Vec<u8>>,
    pub(super) initial_delivery_count: Option<u32>,
}

impl Conn {
    /// Brokerless mode: answers the peer's detach, end and close, and (with `serving`, on the
    /// listening side) the links it attaches.
    pub(crate) fn brokerless(mut self, serving: Option<Serving>) -> Conn {
        self.polite = true;
        self.serving = serving;
        self
    }

    /// Whether `link` is still attached (neither side detached it).
    pub fn is_open(&self, link: LinkId) -> bool {
        let l = &self.links[link];
        l.detached.is_none() && !l.we_detached
    }

    /// Whether our sender `link` sends pre-settled (no outcome will come for what it sends).
    pub fn settles(&self, link: LinkId) -> bool {
        self.links[link].settled
    }

    /// Links so far (attached by us or, listening, by peers), open or not.
    pub fn links(&self) -> usize {
        self.links.len()
    }

    /// Writes what the socket takes now (a brokerless side answering a close).
    pub fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.wire.poll_flush(cx)
    }

    /// Answers a peer's attach on the listening side: the role flipped, source and target
    /// echoed, credit granted to a sender; a link of the wrong direction is refused.
    pub(super) fn serve_attach(&mut self, a: PeerAttach) -> Result<(), LinkError> {
        let Some(s) = self.serving.clone() else {
            return Ok(());
        };
        let id = self.links.len();
        let receiver = !a.peer_receiver;
        let asked = a.address.as_deref().unwrap_or("");
        let refusal = if receiver != s.takes_senders {
            let (ours, theirs) = if s.takes_senders {
                ("consumer", "receiver")
            } else {
                ("producer", "sender")
            };
            Some((
                "amqp:not-allowed",
                format!(
                    "msgbench's listening {ours} does not take {theirs} links (link `{}` to \
                     `{asked}`)",
                    a.name
                ),
            ))
        } else if !receiver && !s.sends.iter().any(|to| crate::p2p::matches(asked, to)) {
            Some((
                "amqp:not-found",
                format!(
                    "msgbench's listening producer sends to `{}`, not to `{asked}` (link `{}`): \
                     attach to one of those",
                    s.sends.join("`, `"),
                    a.name
                ),
            ))
        } else {
            None
        };
        if let Some((condition, why)) = refusal {
            crate::reply::put_attach_refusal(&mut self.wire.wbuf, &a.name, id as u32, receiver);
            crate::reply::put_detach_error(&mut self.wire.wbuf, id as u32, Some((condition, &why)));
            self.links.push(Link {
                name: a.name,
                address: a.address.unwrap_or_default(),
                receiver,
                settled: false,
                remote_handle: None,
                answered: Some(false),
                detached: Some(None),
                delivery_count: 0,
                credit: 0,
                window: 0,
                meta: false,
                partial: None,
                we_detached: true,
            });
            self.events.push_back(Event::Refused(why));
            return Ok(());
        }
        // Our sender settles as the receiver asks (AMQP 1.0 §2.8.2: 0 unsettled, 1 settled);
        // "mixed" (2, the default) leaves it to the run. A receiver that asks for pre-settled
        // delivery and gets unsettled refuses the link (go-amqp) or never settles (Qpid's
        // at-most-once receivers).
        let settles = !receiver
            && match a.snd_settle {
                0 => false,
                1 => true,
                _ => s.settled,
            };
        let snd_settle = if receiver {
            a.snd_settle
        } else {
            u8::from(settles)
        };
        crate::reply::put_attach_reply(
            &mut self.wire.wbuf,
            &crate::reply::AttachReply {
                name: &a.name,
                handle: id as u32,
                receiver,
                snd_settle,
                source: a.source.as_deref(),
                target: a.target.as_deref(),
            },
        );
        let credit = s.credit.max(1);
        let count = if receiver {
            a.initial_delivery_count.unwrap_or(0)
        } else {
            0
        };
        let address = a.address.unwrap_or_default();
        self.links.push(Link {
            name: a.name,
            address: address.clone(),
            receiver,
            settled: settles,
            remote_handle: Some(a.handle),
            answered: Some(true),
            detached: None,
            delivery_count: count,
            credit: if receiver { credit } else { 0 },
            window: credit,
            meta: s.meta,
            partial: None,
            we_detached: false,
        });
        if receiver {
            let f = self.session_flow();
            frames::put_flow(&mut self.wire.wbuf, f, Some((id as u32, count, credit)));
        }
        self.events.push_back(Event::Attached { link: id, address });
        Ok(())
    }
}
