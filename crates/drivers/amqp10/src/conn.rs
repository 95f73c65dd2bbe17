//! One AMQP 1.0 connection with one session, owned by the task that uses it: no connection
//! task, no channel hops. Whoever owns the [`Conn`] writes frames into its buffer and pumps the
//! socket with [`Conn::next_event`] (or [`Conn::poll_event`]); flow control, settlement
//! bookkeeping and heartbeats happen inside that pump.
//!
//! - Links are attached by name ([`Conn::attach`]) and addressed by [`LinkId`].
//! - Sending ([`Conn::send`]) writes the transfer straight into the write buffer (split into
//!   frames when the peer's frame size asks for it); an unsettled send remembers the caller's
//!   `tag`, and the broker's outcome comes back as [`Event::Settled`] with that tag, one event
//!   per delivery even when one disposition settles a range.
//! - Receiving: transfers arrive as [`Event::Delivery`] (a message split over frames is joined
//!   first); credit is refilled by half whenever it runs half down, and the session's incoming
//!   window is refreshed with it. Settling is [`Conn::settle`], one disposition per range.
//! - The broker's idle timeout is honoured with empty frames at half its period.
//!
//! A detach, an end or a close from the broker, or an I/O error, ends the pump with a
//! [`LinkError`] saying what the broker said; the connection is then of no further use.
//! Everything lives in this struct, so the async methods are cancel-safe.

use crate::frames::{
    self, AmqpError, Disposition, Outcome, Performative, SessionFlow, Terminus, Transfer,
};
use crate::message::{self, OutMessage, Parts};
use bytes::{Bytes, BytesMut};
use msgbench_core::driver::{ConnectFailure, DriverError};
use msgbench_net::Wire;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

mod serve;
use serve::PeerAttach;
pub use serve::Serving;

/// Read buffer growth, and the write batch a sender flushes at.
pub(crate) const CHUNK: usize = 64 * 1024;
/// The session's incoming window (transfer frames); refreshed at half.
pub(crate) const INCOMING_WINDOW: u32 = 1 << 16;

/// Which link of a connection.
pub type LinkId = usize;

/// Why a connection (or one of its links) cannot go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// The broker closed the connection.
    #[error("the broker closed the connection{}", why(.0))]
    Closed(Option<AmqpError>),
    /// The broker ended the session.
    #[error("the broker ended the session{}", why(.0))]
    Ended(Option<AmqpError>),
    /// The broker detached a link.
    #[error("the broker detached the link to `{address}`{}", why(.error))]
    Detached {
        /// The address the link was attached with (as given to [`Conn::attach`]), to name it
        /// in the error.
        address: String,
        /// The error the broker's `detach` carried (for example `amqp:resource-deleted` when
        /// the queue went away); `None` when it detached without saying why.
        error: Option<AmqpError>,
    },
    /// The socket failed or the peer hung up.
    #[error("connection lost: {0}")]
    Io(String),
}

impl LinkError {
    /// The broker's error when it refused for good: what the same link or connection would
    /// meet again (a durable message on a store without durability, an access denied, a field
    /// it does not take), so reconnecting cannot help and the client should stop and say it.
    pub fn refusal(&self) -> Option<&AmqpError> {
        const FOR_GOOD: [&str; 6] = [
            "amqp:precondition-failed",
            "amqp:not-allowed",
            "amqp:unauthorized-access",
            "amqp:not-implemented",
            "amqp:invalid-field",
            "amqp:decode-error",
        ];
        match self {
            LinkError::Closed(e) | LinkError::Ended(e) | LinkError::Detached { error: e, .. } => e
                .as_ref()
                .filter(|e| FOR_GOOD.contains(&e.condition.as_str())),
            LinkError::Io(_) => None,
        }
    }
}

impl LinkError {
    /// Why the connection went, for a "connection lost: …" event: an I/O failure's own
    /// words (its display says "connection lost" already), anything else as displayed.
    pub fn loss(&self) -> String {
        match self {
            LinkError::Io(e) => e.clone(),
            e => e.to_string(),
        }
    }
}

fn why(e: &Option<AmqpError>) -> String {
    e.as_ref().map(|e| format!(": {e}")).unwrap_or_default()
}

/// What the pump hands out.
#[derive(Debug)]
pub enum Event {
    /// The broker settled one of our unsettled transfers (`tag` as given to [`Conn::send`]).
    Settled {
        /// The `tag` given to [`Conn::send`] for this delivery: the caller's own token, so
        /// it needs no map from delivery ids.
        tag: u64,
        /// The broker's outcome. A disposition that settles without one counts as
        /// [`Outcome::Accepted`], so this is never [`Outcome::Other`]; a disposition that
        /// neither settles nor carries an outcome (a `received` state) yields no event.
        outcome: Outcome,
    },
    /// A message arrived on a receiver link.
    Delivery(Received),
    /// Brokerless: a peer attached a link and it was answered ([`Serving`]); `address` is the
    /// link's (its target for a sender, its source for a receiver).
    Attached {
        /// Our id for the new link: what [`Conn::send`] takes when we send on it, and what
        /// [`Received::link`] says when we receive on it.
        link: LinkId,
        /// The link's address (empty when the peer's terminus had none).
        address: String,
    },
    /// Brokerless: a peer's link was refused (the peer was told why; this says it again).
    Refused(String),
    /// Brokerless: the peer detached a link, and the detach was answered.
    Detached {
        /// The link the peer detached, whichever side attached it; it is no longer open
        /// ([`Conn::is_open`]) and must not be sent on.
        link: LinkId,
        /// The error the peer's `detach` carried, if any: for a link of ours it refused, the
        /// reason.
        error: Option<AmqpError>,
    },
}

/// One received message.
#[derive(Debug)]
pub struct Received {
    /// The receiver link it came on.
    pub link: LinkId,
    /// Its delivery id, for [`Conn::settle`].
    pub id: u32,
    /// The broker sent it pre-settled (nothing to settle).
    pub settled: bool,
    /// Metadata (when the link asked for it), body, redelivery.
    pub parts: Parts,
}

struct Link {
    name: String,
    address: String,
    receiver: bool,
    /// Sender: transfers go pre-settled.
    settled: bool,
    remote_handle: Option<u32>,
    /// The peer's attach came (`Some(has_terminus)`).
    answered: Option<bool>,
    /// The peer detached it.
    detached: Option<Option<AmqpError>>,
    delivery_count: u32,
    /// Sender: credit the broker gave; receiver: credit left before a refill.
    credit: u32,
    /// Receiver: the credit it keeps up.
    window: u32,
    /// Receiver: decode metadata.
    meta: bool,
    /// Receiver: a message arriving in several frames (id, settled, bytes so far).
    partial: Option<(u32, bool, BytesMut)>,
    /// We sent a detach (the peer's detach answers it, and needs no answer).
    we_detached: bool,
}

/// One connection and its session (channel 0). See the module docs.
pub struct Conn {
    pub(crate) wire: Wire,
    max_frame: usize,
    heartbeat: Option<(Duration, Pin<Box<Sleep>>)>,
    next_outgoing_id: u32,
    remote_incoming_window: u32,
    next_incoming_id: u32,
    received_since_flow: u32,
    next_delivery_id: u32,
    links: Vec<Link>,
    /// Tags of unsettled sends, from delivery id `unsettled_base` on (`None`: settled).
    unsettled: VecDeque<Option<u64>>,
    unsettled_base: u32,
    events: VecDeque<Event>,
    scratch: BytesMut,
    /// Brokerless listening side: links peers attach are answered (see [`Serving`]).
    serving: Option<Serving>,
    /// Answer the peer's detach, end and close and go on (brokerless peers end politely),
    /// instead of leaving the connection at the first of them as a broker's client does
    /// (which answers it on the way out).
    polite: bool,
    sent_end: bool,
    sent_close: bool,
    /// Listening: the channel of the peer's session. A frame on another one (a second
    /// session, past the channel-max of 0 our open announced: Qpid JMS begins one per
    /// producer or consumer) closes the connection with `amqp:not-allowed`, said, instead of
    /// being taken for the first session's.
    pub(crate) peer_channel: Option<u16>,
    /// The broker offered `SHARED-SUBS` in its open (see [`frames::Performative::Open`]).
    pub(crate) shared_subs: bool,
}

impl Conn {
    /// A connection over `wire` after the handshake: the broker's frame size and idle timeout,
    /// the session's first ids and window.
    pub(crate) fn new(
        wire: Wire,
        max_frame: u32,
        idle_ms: Option<u32>,
        remote_next_outgoing: u32,
        remote_incoming_window: u32,
    ) -> Conn {
        let heartbeat = idle_ms.map(|ms| {
            let every = Duration::from_millis((ms as u64 / 2).max(100));
            (every, Box::pin(tokio::time::sleep(every)))
        });
        Conn {
            wire,
            max_frame: max_frame.clamp(frames::MIN_MAX_FRAME, frames::MAX_FRAME) as usize,
            heartbeat,
            next_outgoing_id: 0,
            remote_incoming_window,
            next_incoming_id: remote_next_outgoing,
            received_since_flow: 0,
            next_delivery_id: 0,
            links: Vec::new(),
            unsettled: VecDeque::new(),
            unsettled_base: 0,
            events: VecDeque::new(),
            scratch: BytesMut::new(),
            serving: None,
            polite: false,
            peer_channel: None,
            shared_subs: false,
            sent_end: false,
            sent_close: false,
        }
    }

    fn session_flow(&mut self) -> SessionFlow {
        self.received_since_flow = 0;
        SessionFlow {
            next_incoming_id: self.next_incoming_id,
            incoming_window: INCOMING_WINDOW,
            next_outgoing_id: self.next_outgoing_id,
        }
    }

    /// Writes the attach of a link and returns at once (brokerless producers: the listening
    /// consumer answers once its owner reads, which may be after the producer's setup). The
    /// answer is taken in as it comes; a sender's credit follows it, a refusal detaches the
    /// link ([`Event::Detached`] on a brokerless connection). Nothing is flushed.
    #[allow(clippy::too_many_arguments)]
    pub fn attach_later(
        &mut self,
        name: Option<&str>,
        address: &str,
        capabilities: &[String],
        receiver: bool,
        settled: bool,
        credit: u32,
        meta: bool,
    ) -> LinkId {
        let id = self.links.len();
        let role = if receiver { "rcv" } else { "snd" };
        let name = name.map_or_else(
            || format!("msgbench-{role}-{}-{address}", id + 1),
            str::to_string,
        );
        frames::put_attach(
            &mut self.wire.wbuf,
            &name,
            id as u32,
            receiver,
            settled,
            &Terminus {
                address,
                capabilities,
            },
        );
        let credit = credit.max(1);
        self.links.push(Link {
            name,
            address: address.to_string(),
            receiver,
            settled,
            remote_handle: None,
            answered: None,
            detached: None,
            delivery_count: 0,
            credit: if receiver { credit } else { 0 },
            window: credit,
            meta,
            partial: None,
            we_detached: false,
        });
        id
    }

    /// Attaches a sender (`credit` unused) or a receiver granting `credit`, on `address` with
    /// terminus `capabilities`; `name` is the link name (a shared subscription's), or a unique
    /// one is made. Waits for the broker's answer; a refusal says what the broker said.
    #[allow(clippy::too_many_arguments)]
    pub async fn attach(
        &mut self,
        name: Option<&str>,
        address: &str,
        capabilities: &[String],
        receiver: bool,
        settled: bool,
        credit: u32,
        meta: bool,
    ) -> Result<LinkId, DriverError> {
        let id = self.attach_later(name, address, capabilities, receiver, settled, credit, meta);
        let credit = credit.max(1);
        let refused = |why: String| {
            let what = if receiver {
                "a receiver link from"
            } else {
                "a sender link to"
            };
            let reason = format!("the broker refused {what} `{address}`: {why}");
            if receiver {
                DriverError::Subscribe(reason)
            } else {
                DriverError::Connect {
                    target: address.to_string(),
                    reason,
                    cause: ConnectFailure::Rejected,
                }
            }
        };
        let lost = |e: LinkError| refused(e.to_string());
        self.flush()
            .await
            .map_err(|e| lost(LinkError::Io(e.to_string())))?;
        loop {
            let l = &self.links[id];
            if let Some(err) = &l.detached {
                return Err(refused(match err {
                    Some(e) => e.to_string(),
                    None => "it detached the link without an error".into(),
                }));
            }
            if l.answered == Some(true) {
                break;
            }
            // Answered without a terminus: a detach with the reason follows (if any).
            let step = if l.answered == Some(false) {
                match tokio::time::timeout(Duration::from_secs(2), self.pump_one()).await {
                    Ok(r) => r,
                    Err(_) => {
                        let side = if receiver { "source" } else { "target" };
                        return Err(refused(format!(
                            "it answered without a {side} and sent no error (the address does not exist?)"
                        )));
                    }
                }
            } else {
                self.pump_one().await
            };
            step.map_err(lost)?;
        }
        if receiver {
            let s = self.session_flow();
            let l = &self.links[id];
            frames::put_flow(
                &mut self.wire.wbuf,
                s,
                Some((id as u32, l.delivery_count, credit)),
            );
            self.flush()
                .await
                .map_err(|e| lost(LinkError::Io(e.to_string())))?;
        }
        Ok(id)
    }

    /// Reads and handles one frame (events it yields are queued).
    async fn pump_one(&mut self) -> Result<(), LinkError> {
        std::future::poll_fn(|cx| self.poll_frame(cx, true)).await
    }

    /// The link's address.
    pub fn address(&self, link: LinkId) -> &str {
        &self.links[link].address
    }

    /// Why `link` cannot send, for a stall report: the peer gave the link no credit, or keeps
    /// its session's incoming window shut (too many transfers it has not taken in yet),
    /// which stops every link of the session whatever their credit.
    pub fn blocked_by(&self, link: LinkId) -> &'static str {
        if self.links[link].credit == 0 {
            "granted no credit"
        } else {
            "kept its session's incoming window closed"
        }
    }

    /// Whether `link` (a sender) may send now: it has credit and the session window is open.
    pub fn can_send(&self, link: LinkId) -> bool {
        self.links[link].credit > 0 && self.remote_incoming_window > 0
    }

    /// Waits until `link` may send, handling (and queueing) whatever arrives meanwhile.
    pub async fn wait_credit(&mut self, link: LinkId) -> Result<(), LinkError> {
        while !self.can_send(link) {
            self.pump_one().await?;
        }
        Ok(())
    }

    /// Writes `msg` as a transfer on sender `link` (which [`Conn::can_send`]); unless the link
    /// sends pre-settled, its outcome will come as [`Event::Settled`] with `tag`. Nothing is
    /// written to the socket yet (see [`Conn::flush`]).
    pub fn send(&mut self, link: LinkId, tag: u64, msg: &OutMessage<'_>) {
        let id = self.next_delivery_id;
        self.next_delivery_id = id.wrapping_add(1);
        let l = &mut self.links[link];
        l.credit = l.credit.saturating_sub(1);
        l.delivery_count = l.delivery_count.wrapping_add(1);
        let (handle, settled) = (link as u32, l.settled);
        let body_len = match msg.body {
            message::OutBody::Data(b) => b.len(),
            message::OutBody::Text(s) => s.len(),
        };
        let fits = frames::TRANSFER_OVERHEAD + message::message_overhead(msg) + body_len;
        if fits <= self.max_frame {
            frames::put_transfer(&mut self.wire.wbuf, handle, Some(id), settled, false, |b| {
                message::put_message(b, msg)
            });
            self.sent_frames(1);
        } else {
            self.scratch.clear();
            message::put_message(&mut self.scratch, msg);
            let chunk = self.max_frame - frames::TRANSFER_OVERHEAD;
            let whole = self.scratch.split().freeze();
            let n = whole.len().div_ceil(chunk);
            for (i, part) in whole.chunks(chunk).enumerate() {
                let first = (i == 0).then_some(id);
                frames::put_transfer(
                    &mut self.wire.wbuf,
                    handle,
                    first,
                    settled,
                    i + 1 < n,
                    |b| b.extend_from_slice(part),
                );
            }
            self.sent_frames(n as u32);
            self.scratch = whole.try_into_mut().unwrap_or_default();
        }
        if !settled {
            if self.unsettled.is_empty() {
                self.unsettled_base = id;
            }
            self.unsettled.push_back(Some(tag));
        } else if !self.unsettled.is_empty() {
            self.unsettled.push_back(None);
        }
    }

    fn sent_frames(&mut self, n: u32) {
        self.next_outgoing_id = self.next_outgoing_id.wrapping_add(n);
        self.remote_incoming_window = self.remote_incoming_window.saturating_sub(n);
    }

    /// Unsettled transfers sent and not yet settled by the broker.
    pub fn outstanding(&self) -> usize {
        self.unsettled.iter().filter(|t| t.is_some()).count()
    }

    /// Writes a disposition settling received deliveries `first..=last` as `how`.
    pub fn settle(&mut self, first: u32, last: u32, how: Disposition) {
        frames::put_disposition(&mut self.wire.wbuf, first, last, how);
    }

    /// Takes the events already read and not handed out (a lost connection's last outcomes).
    pub fn drain_events(&mut self) -> impl Iterator<Item = Event> + '_ {
        self.events.drain(..)
    }

    /// Whether a whole frame is already buffered (reading on will not wait).
    pub fn frame_ready(&self) -> bool {
        let b = &self.wire.rbuf;
        !self.events.is_empty()
            || (b.len() >= 8 && b.len() >= u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }

    /// Writes everything buffered.
    pub async fn flush(&mut self) -> std::io::Result<()> {
        self.wire.flush().await
    }

    /// Bytes waiting to be written.
    pub fn buffered(&self) -> usize {
        self.wire.wbuf.len()
    }

    /// The next event, reading as needed; with `flush`, pending writes go out before it waits.
    pub fn poll_event(
        &mut self,
        cx: &mut Context<'_>,
        flush: bool,
    ) -> Poll<Result<Event, LinkError>> {
        loop {
            if let Some(e) = self.events.pop_front() {
                return Poll::Ready(Ok(e));
            }
            match self.poll_frame(cx, flush) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// [`Conn::poll_event`] with flushing, as a future. Cancel-safe.
    pub async fn next_event(&mut self) -> Result<Event, LinkError> {
        std::future::poll_fn(|cx| self.poll_event(cx, true)).await
    }

    /// Reads one frame and handles it (heartbeats go out on the way).
    fn poll_frame(&mut self, cx: &mut Context<'_>, flush: bool) -> Poll<Result<(), LinkError>> {
        let mut beat = false;
        if let Some((every, sleep)) = &mut self.heartbeat
            && sleep.as_mut().poll(cx).is_ready()
        {
            sleep.as_mut().reset(Instant::now() + *every);
            // Registers for the next period.
            let _ = sleep.as_mut().poll(cx);
            beat = true;
        }
        if beat {
            frames::put_heartbeat(&mut self.wire.wbuf);
            if let Poll::Ready(Err(e)) = self.wire.poll_flush(cx) {
                return Poll::Ready(Err(LinkError::Io(e.to_string())));
            }
        }
        let frame = match self.wire.poll_next(cx, flush, frames::split_frame) {
            Poll::Ready(Ok(f)) => f,
            Poll::Ready(Err(e)) => {
                let why = if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    // Brokerless, the other end is a peer (a consumer or a producer).
                    if self.polite {
                        "the peer hung up"
                    } else {
                        "the broker hung up"
                    }
                    .to_string()
                } else {
                    e.to_string()
                };
                return Poll::Ready(Err(LinkError::Io(why)));
            }
            Poll::Pending => return Poll::Pending,
        };
        let (_kind, channel, body) = frame;
        if let Some(ours) = self.peer_channel
            && channel != ours
            && !body.is_empty()
        {
            let why = format!(
                "the peer began a second session (channel {channel}); a listening msgbench takes \
                 one session per connection (channel-max 0, as its open says): connect a \
                 client that opens one session, or one connection per session"
            );
            crate::reply::put_close_error(&mut self.wire.wbuf, "amqp:not-allowed", &why);
            let _ = self.wire.poll_flush(cx);
            return Poll::Ready(Err(LinkError::Io(why)));
        }
        let r = self.on_frame(body);
        if !self.polite && matches!(r, Err(LinkError::Closed(_) | LinkError::Ended(_))) {
            self.say_goodbye();
        }
        if r.is_err() && self.sent_close {
            // A broker's client leaves the connection at the broker's close, end or detach
            // (and reconnects afresh): it answers first, so the broker sees a client that
            // closed, not one that vanished. Best effort: what the socket does not take now
            // is dropped with it.
            let _ = self.wire.poll_flush(cx);
        }
        Poll::Ready(r)
    }

    /// Our end and close, each once: the answer to the peer's close (AMQP 1.0 §2.4.3: a
    /// close is answered with a close before the socket goes), or our leaving.
    fn say_goodbye(&mut self) {
        if !self.sent_end {
            self.sent_end = true;
            frames::put_end(&mut self.wire.wbuf);
        }
        if !self.sent_close {
            self.sent_close = true;
            frames::put_close(&mut self.wire.wbuf);
        }
    }

    fn link_of(&self, remote_handle: u32) -> Option<LinkId> {
        self.links
            .iter()
            .position(|l| l.remote_handle == Some(remote_handle))
    }

    fn on_frame(&mut self, body: Bytes) -> Result<(), LinkError> {
        let p = Performative::parse(&body).map_err(|e| LinkError::Io(e.to_string()))?;
        match p {
            Performative::Transfer(t) => self.on_transfer(t, body.slice(t.payload_at..)),
            Performative::Disposition {
                receiver: true,
                first,
                last,
                settled,
                outcome,
            } => {
                if !settled && outcome == Outcome::Other {
                    return Ok(());
                }
                let outcome = if outcome == Outcome::Other {
                    Outcome::Accepted
                } else {
                    outcome
                };
                let mut id = first;
                loop {
                    let idx = id.wrapping_sub(self.unsettled_base) as usize;
                    if let Some(Some(tag)) = self.unsettled.get_mut(idx).map(Option::take) {
                        self.events.push_back(Event::Settled {
                            tag,
                            outcome: outcome.clone(),
                        });
                    }
                    if id == last {
                        break;
                    }
                    id = id.wrapping_add(1);
                }
                while let Some(None) = self.unsettled.front() {
                    self.unsettled.pop_front();
                    self.unsettled_base = self.unsettled_base.wrapping_add(1);
                }
                Ok(())
            }
            Performative::Flow {
                next_incoming_id,
                incoming_window,
                handle,
                delivery_count,
                link_credit,
                drain,
                echo,
            } => {
                let nii = next_incoming_id.unwrap_or(0);
                self.remote_incoming_window = nii
                    .wrapping_add(incoming_window)
                    .wrapping_sub(self.next_outgoing_id);
                if let Some(id) = handle.and_then(|h| self.link_of(h)) {
                    let l = &mut self.links[id];
                    // A receiver that has not seen our attach yet leaves delivery-count out:
                    // it counts from our initial delivery count (0).
                    if !l.receiver
                        && let Some(credit) = link_credit
                    {
                        let count = delivery_count.unwrap_or(0);
                        l.credit = count.wrapping_add(credit).wrapping_sub(l.delivery_count);
                    }
                    if drain && !l.receiver {
                        // Nothing waits to be sent here (the runner hands messages over one at a
                        // time, each sent at once): the credit is given back, and the receiver
                        // told (Qpid JMS's receive with a time-out drains; rhea waited for good).
                        l.delivery_count = l.delivery_count.wrapping_add(l.credit);
                        l.credit = 0;
                        let (count, s) = (l.delivery_count, self.session_flow());
                        frames::put_drained_flow(&mut self.wire.wbuf, s, id as u32, count);
                    } else if echo {
                        let (count, credit) = (l.delivery_count, l.credit);
                        let s = self.session_flow();
                        frames::put_flow(&mut self.wire.wbuf, s, Some((id as u32, count, credit)));
                    }
                } else if echo {
                    let s = self.session_flow();
                    frames::put_flow(&mut self.wire.wbuf, s, None);
                }
                Ok(())
            }
            Performative::Attach {
                name,
                handle,
                has_terminus,
                peer_receiver,
                snd_settle,
                address,
                source,
                target,
                initial_delivery_count,
            } => {
                if let Some(l) = self
                    .links
                    .iter_mut()
                    .find(|l| l.name == name && l.answered.is_none())
                {
                    l.remote_handle = Some(handle);
                    l.answered = Some(has_terminus);
                    return Ok(());
                }
                self.serve_attach(PeerAttach {
                    name,
                    handle,
                    peer_receiver,
                    snd_settle,
                    address,
                    source,
                    target,
                    initial_delivery_count,
                })
            }
            Performative::Detach { handle, error } => {
                let Some(id) = self.link_of(handle) else {
                    return Ok(());
                };
                let l = &mut self.links[id];
                l.detached = Some(error.clone());
                // Answered (once) so the handle can be reused; the same handle may come again.
                l.remote_handle = None;
                if self.polite {
                    if !l.we_detached {
                        l.we_detached = true;
                        frames::put_detach(&mut self.wire.wbuf, id as u32);
                    }
                    // Also a refusal (answered without a terminus), for a link not waited for.
                    self.events.push_back(Event::Detached { link: id, error });
                    return Ok(());
                }
                if l.answered == Some(true) {
                    if !l.we_detached {
                        // Not the answer to ours: the connection is left (poll_frame), after
                        // our detach, end and close.
                        l.we_detached = true;
                        frames::put_detach(&mut self.wire.wbuf, id as u32);
                        self.say_goodbye();
                    }
                    let l = &self.links[id];
                    return Err(LinkError::Detached {
                        address: l.address.clone(),
                        error,
                    });
                }
                Ok(())
            }
            Performative::End(e) if self.polite => {
                if !self.sent_end {
                    self.sent_end = true;
                    frames::put_end(&mut self.wire.wbuf);
                }
                match e {
                    None => Ok(()),
                    Some(e) => Err(LinkError::Ended(Some(e))),
                }
            }
            Performative::Close(e) if self.polite => {
                self.say_goodbye();
                Err(LinkError::Closed(e))
            }
            // Answered on the way out (poll_frame).
            Performative::End(e) => Err(LinkError::Ended(e)),
            Performative::Close(e) => Err(LinkError::Closed(e)),
            _ => Ok(()),
        }
    }

    fn on_transfer(&mut self, t: Transfer, payload: Bytes) -> Result<(), LinkError> {
        let Transfer {
            handle,
            delivery_id,
            settled,
            more,
            aborted,
            ..
        } = t;
        self.next_incoming_id = self.next_incoming_id.wrapping_add(1);
        self.received_since_flow += 1;
        let Some(link) = self.link_of(handle) else {
            return Ok(());
        };
        let l = &mut self.links[link];
        let continuing = l.partial.is_some();
        if !continuing {
            l.delivery_count = l.delivery_count.wrapping_add(1);
            l.credit = l.credit.saturating_sub(1);
        }
        let mut refill = None;
        if l.credit <= l.window / 2 {
            l.credit = l.window;
            refill = Some((link as u32, l.delivery_count, l.window));
        }
        let done = if aborted {
            l.partial = None;
            None
        } else if more || continuing {
            let (id, s, mut buf) = l
                .partial
                .take()
                .unwrap_or_else(|| (delivery_id.unwrap_or(0), settled, BytesMut::new()));
            buf.extend_from_slice(&payload);
            if more {
                l.partial = Some((id, s, buf));
                None
            } else {
                Some((id, s, buf.freeze()))
            }
        } else {
            Some((delivery_id.unwrap_or(0), settled, payload))
        };
        let meta = l.meta;
        if let Some((id, settled, bytes)) = done {
            let parts =
                message::read_message(&bytes, meta).map_err(|e| LinkError::Io(e.to_string()))?;
            self.events.push_back(Event::Delivery(Received {
                link,
                id,
                settled,
                parts,
            }));
        }
        if let Some(r) = refill {
            let s = self.session_flow();
            frames::put_flow(&mut self.wire.wbuf, s, Some(r));
        } else if self.received_since_flow >= INCOMING_WINDOW / 2 {
            let s = self.session_flow();
            frames::put_flow(&mut self.wire.wbuf, s, None);
        }
        Ok(())
    }

    /// Detaches `link` politely, waiting (at most `timeout`) for the broker's detach.
    pub async fn detach(&mut self, link: LinkId, timeout: Duration) {
        if self.links[link].we_detached {
            return;
        }
        self.links[link].we_detached = true;
        frames::put_detach(&mut self.wire.wbuf, link as u32);
        let _ = tokio::time::timeout(timeout, async {
            self.flush().await.ok()?;
            while self.links[link].detached.is_none() {
                match self.pump_one().await {
                    Ok(()) => {}
                    // The link's own detach answers ours.
                    Err(LinkError::Detached { .. }) => break,
                    Err(_) => return None,
                }
            }
            Some(())
        })
        .await;
    }

    /// Ends the session and closes the connection, waiting (at most `timeout`) for the
    /// broker's close so everything before it has been handled.
    pub async fn close(mut self, timeout: Duration) {
        if !self.sent_end {
            frames::put_end(&mut self.wire.wbuf);
        }
        if self.sent_close {
            let _ = tokio::time::timeout(timeout, self.flush()).await;
            self.wire.detach();
            return;
        }
        self.sent_end = true;
        self.sent_close = true;
        frames::put_close(&mut self.wire.wbuf);
        let _ = tokio::time::timeout(timeout, async {
            if self.flush().await.is_err() {
                return;
            }
            loop {
                match self.pump_one().await {
                    Ok(()) | Err(LinkError::Ended(_)) | Err(LinkError::Detached { .. }) => {}
                    Err(_) => return,
                }
            }
        })
        .await;
        self.wire.detach();
    }

    /// Waits until the connection fails or the broker closes it (held sessions), keeping it
    /// alive meanwhile; events are dropped.
    pub async fn closed(&mut self) -> LinkError {
        loop {
            if let Err(e) = self.next_event().await {
                return e;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detached(condition: &str) -> LinkError {
        LinkError::Detached {
            address: "q".into(),
            error: Some(AmqpError {
                condition: condition.into(),
                description: Some("why".into()),
            }),
        }
    }

    #[test]
    fn refusals_for_good_are_told_from_passing_trouble() {
        for c in ["amqp:precondition-failed", "amqp:unauthorized-access"] {
            assert_eq!(detached(c).refusal().unwrap().condition, c);
        }
        for c in [
            "amqp:resource-limit-exceeded",
            "amqp:link:detach-forced",
            "amqp:connection:forced",
        ] {
            assert!(detached(c).refusal().is_none(), "{c}");
        }
        assert!(LinkError::Closed(None).refusal().is_none());
        assert!(LinkError::Io("reset".into()).refusal().is_none());
    }
}
