//! The protocol state of one connection: the handshake, channels, methods and their replies,
//! content counting and publisher confirms. No I/O: [`Conn::feed`] consumes whole frames from
//! the read buffer and appends replies to a write buffer; the caller (`conn.rs`) moves bytes.

use super::Shared;
use super::frame::{self, Next, Raw};
use amq_protocol::frame::parsing::parse_content_header;
use amq_protocol::frame::{AMQPFrame, AMQPFrameType};
use amq_protocol::protocol::{
    AMQPClass, access, basic, channel, confirm, connection, exchange, parse_class, queue, tx,
};
use amq_protocol::types::ShortString;
use amq_protocol::types::parsing::parse_id;
use bytes::{Buf, BytesMut};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

/// Where the connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Waiting for the 8-octet protocol header.
    Header,
    /// connection.start sent.
    StartOk,
    /// connection.tune sent.
    TuneOk,
    /// Tuned; waiting for connection.open.
    Open,
    /// Open for business.
    Running,
    /// The sink sent connection.close and waits for close-ok; other frames are discarded.
    Closing,
    /// The stream is no longer framed (after a frame error): bytes are discarded until the
    /// client closes or the close timeout passes.
    Draining,
    /// Finished: write what is pending, then close the socket.
    Done,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum ChState {
    #[default]
    Closed,
    Open,
    /// The sink sent channel.close; waiting for channel.close-ok.
    Closing,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Content {
    #[default]
    None,
    /// After basic.publish: the content header is next.
    Header,
    /// Body frames still due.
    Body { size: u64, left: u64 },
}

#[derive(Debug, Clone, Default)]
struct Channel {
    state: ChState,
    content: Content,
    confirm: bool,
    tx: bool,
    /// Confirm mode: delivery tag of the last message received in full.
    published: u64,
    /// Confirm mode: highest delivery tag acknowledged.
    acked: u64,
}

/// A connection-level error: answered with connection.close.
struct Fault {
    code: u16,
    text: &'static str,
    class: u16,
    method: u16,
}

fn fault(code: u16, text: &'static str) -> Fault {
    Fault {
        code,
        text,
        class: 0,
        method: 0,
    }
}

const FRAME_ERROR: u16 = 501;
const SYNTAX_ERROR: u16 = 502;
const COMMAND_INVALID: u16 = 503;
const CHANNEL_ERROR: u16 = 504;
const UNEXPECTED_FRAME: u16 = 505;
const NOT_IMPLEMENTED: u16 = 540;
const ACCESS_REFUSED: u16 = 403;
const PRECONDITION_FAILED: u16 = 406;
const CONNECTION_FORCED: u16 = 320;
/// The smallest frame-max a peer must accept (AMQP 0-9-1 frame-min-size).
const FRAME_MIN: u32 = 4096;

/// The smaller of two limits where 0 means "none".
fn lower(client: u32, server: u32) -> u32 {
    if client == 0 {
        server
    } else {
        client.min(server)
    }
}

/// Whether the sink handles method `method` of class `class` from a client.
fn handled(class: u16, method: u16) -> bool {
    matches!(
        (class, method),
        (10, 11 | 31 | 40 | 50 | 51 | 70)
            | (20, 10 | 20 | 40 | 41)
            | (30, 10)
            | (40, 10 | 20 | 30 | 40)
            | (50, 10 | 20 | 30 | 40 | 50)
            | (60, 10 | 20 | 30 | 40 | 70 | 80 | 90 | 100 | 110 | 120)
            | (85, 10)
            | (90, 10 | 20 | 30)
    )
}

/// One connection's protocol state.
pub(crate) struct Conn {
    shared: Arc<Shared>,
    pub phase: Phase,
    /// The client closed the connection (the sink answered close-ok): the client closes the
    /// socket, so the sink waits for it to.
    pub closed_by_peer: bool,
    /// Largest frame accepted (negotiated once tuned).
    frame_max: u32,
    channel_max: u16,
    /// Negotiated heartbeat in seconds; 0 = none.
    pub heartbeat: u16,
    /// Indexed by channel number; grown on channel.open.
    channels: Vec<Channel>,
    /// Channels with publishes not yet acknowledged.
    dirty: Vec<u16>,
    /// Bytes the frame at the front of the read buffer needs in all.
    pub need: usize,
    /// Counted since the last [`Conn::flush_stats`].
    messages: u64,
    bytes: u64,
    confirms: u64,
}

impl Conn {
    pub fn new(shared: Arc<Shared>) -> Conn {
        Conn {
            frame_max: shared.frame_max,
            channel_max: shared.channel_max,
            heartbeat: 0,
            shared,
            phase: Phase::Header,
            closed_by_peer: false,
            channels: Vec::new(),
            dirty: Vec::new(),
            need: 8,
            messages: 0,
            bytes: 0,
            confirms: 0,
        }
    }

    /// Consumes every complete frame at the front of `buf`, appending replies to `out`, and
    /// leaves [`Conn::phase`] and [`Conn::need`] up to date. Pending confirms are acknowledged
    /// at the end, one ack per channel.
    pub fn feed(&mut self, buf: &mut BytesMut, out: &mut Vec<u8>) {
        loop {
            match self.phase {
                Phase::Done => return,
                Phase::Draining => {
                    buf.clear();
                    return;
                }
                Phase::Header => {
                    let ok = match buf.first_chunk::<8>() {
                        Some(head) => frame::is_protocol_header(head),
                        None if b"AMQP".starts_with(&buf[..buf.len().min(4)]) => {
                            self.need = 8;
                            return;
                        }
                        None => false,
                    };
                    if !ok {
                        // The spec's answer to an unsupported header: ours, then close (after
                        // draining, so that the header is not lost to a reset).
                        out.extend_from_slice(&frame::protocol_header());
                        self.phase = Phase::Draining;
                        buf.clear();
                        return;
                    }
                    buf.advance(8);
                    out.extend_from_slice(&self.shared.start);
                    self.phase = Phase::StartOk;
                }
                _ => {
                    let (len, result) = match frame::next(buf, self.frame_max) {
                        Next::Frame(raw, len) => (len, self.frame(raw, out)),
                        Next::Need(n) => {
                            self.need = n;
                            break;
                        }
                        Next::Bad(text) => (0, Err(fault(FRAME_ERROR, text))),
                    };
                    if let Err(f) = result {
                        if self.phase == Phase::Closing {
                            // Unparsable while waiting for close-ok: give up on it.
                            self.phase = Phase::Done;
                            return;
                        }
                        self.close_with(f, out);
                        if len == 0 {
                            // The stream cannot be parsed any further.
                            self.phase = Phase::Draining;
                            buf.clear();
                            return;
                        }
                    }
                    buf.advance(len);
                }
            }
        }
        self.flush_acks(out);
    }

    /// Adds what this connection counted to the sink's counters.
    pub fn flush_stats(&mut self) {
        let stats = &self.shared.stats;
        if self.messages > 0 {
            stats
                .messages
                .fetch_add(std::mem::take(&mut self.messages), Relaxed);
            stats
                .bytes
                .fetch_add(std::mem::take(&mut self.bytes), Relaxed);
        }
        if self.confirms > 0 {
            stats
                .confirms
                .fetch_add(std::mem::take(&mut self.confirms), Relaxed);
        }
    }

    /// The sink is stopping: connection.close with 320 (connection-forced).
    pub fn shutdown(&mut self, out: &mut Vec<u8>) {
        if matches!(self.phase, Phase::Open | Phase::Running) {
            self.close_with(fault(CONNECTION_FORCED, "sink shutting down"), out);
        }
    }

    /// Sends connection.close (after the acks due, so the client knows what arrived).
    fn close_with(&mut self, f: Fault, out: &mut Vec<u8>) {
        self.flush_acks(out);
        let close = connection::Close {
            reply_code: f.code,
            reply_text: f.text.into(),
            class_id: f.class,
            method_id: f.method,
        };
        self.send(
            out,
            0,
            AMQPClass::Connection(connection::AMQPMethod::Close(close)),
        );
        self.phase = Phase::Closing;
    }

    /// Appends a method frame, acknowledging pending publishes first so that acks never
    /// arrive after a reply to a later method.
    fn reply(&mut self, out: &mut Vec<u8>, ch: u16, class: AMQPClass) {
        self.flush_acks(out);
        self.send(out, ch, class);
    }

    fn send(&mut self, out: &mut Vec<u8>, ch: u16, class: AMQPClass) {
        if !frame::put(out, &AMQPFrame::Method(ch, class)) {
            self.phase = Phase::Done;
        }
    }

    fn flush_acks(&mut self, out: &mut Vec<u8>) {
        while let Some(ch) = self.dirty.pop() {
            let c = &mut self.channels[usize::from(ch)];
            let n = c.published - c.acked;
            if n == 0 || c.state != ChState::Open {
                continue;
            }
            c.acked = c.published;
            let ack = basic::Ack {
                delivery_tag: c.published,
                multiple: n > 1,
            };
            self.confirms += n;
            self.send(out, ch, AMQPClass::Basic(basic::AMQPMethod::Ack(ack)));
        }
    }

    fn name(&self, prefix: &str) -> ShortString {
        let n = self.shared.names.fetch_add(1, Relaxed);
        // splitmix64: a bijection, so names never repeat within one sink.
        let mut z = self
            .shared
            .name_seed
            .wrapping_add(n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        format!("{prefix}{:016x}", z ^ (z >> 31)).into()
    }

    fn frame(&mut self, f: Raw<'_>, out: &mut Vec<u8>) -> Result<(), Fault> {
        if self.phase == Phase::Closing {
            return self.closing(f, out);
        }
        match f.ty {
            AMQPFrameType::Heartbeat if f.channel == 0 => Ok(()),
            AMQPFrameType::Heartbeat => Err(fault(FRAME_ERROR, "heartbeat on a channel")),
            AMQPFrameType::Method => self.method(f, out),
            AMQPFrameType::Header | AMQPFrameType::Body => self.content(f),
            AMQPFrameType::ProtocolHeader => Err(fault(FRAME_ERROR, "unexpected frame")),
        }
    }

    /// After the sink's connection.close: only close and close-ok matter.
    fn closing(&mut self, f: Raw<'_>, out: &mut Vec<u8>) -> Result<(), Fault> {
        if f.ty == AMQPFrameType::Method && f.channel == 0 {
            match ids(f.payload) {
                Some((10, 51)) => self.phase = Phase::Done,
                Some((10, 50)) => {
                    let ok = connection::AMQPMethod::CloseOk(connection::CloseOk {});
                    self.send(out, 0, AMQPClass::Connection(ok));
                    self.phase = Phase::Done;
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn content(&mut self, f: Raw<'_>) -> Result<(), Fault> {
        if self.phase != Phase::Running {
            return Err(fault(UNEXPECTED_FRAME, "content before connection.open"));
        }
        if f.channel == 0 || f.channel > self.channel_max {
            return Err(fault(CHANNEL_ERROR, "content frame on an invalid channel"));
        }
        let Some(c) = self.channels.get_mut(usize::from(f.channel)) else {
            return Err(fault(CHANNEL_ERROR, "channel not open"));
        };
        match c.state {
            ChState::Open => {}
            ChState::Closing => return Ok(()),
            ChState::Closed => return Err(fault(CHANNEL_ERROR, "channel not open")),
        }
        let (size, left) = match (f.ty, c.content) {
            (AMQPFrameType::Header, Content::Header) => {
                if !frame::nesting_ok(f.payload) {
                    return Err(fault(SYNTAX_ERROR, "field tables nested too deep"));
                }
                match parse_content_header(f.payload) {
                    Ok(([], h)) if h.class_id == 60 => (h.body_size, h.body_size),
                    Ok(([], _)) => {
                        return Err(fault(UNEXPECTED_FRAME, "content header not for basic"));
                    }
                    _ => return Err(fault(SYNTAX_ERROR, "malformed content header")),
                }
            }
            (AMQPFrameType::Body, Content::Body { size, left })
                if f.payload.len() as u64 <= left =>
            {
                (size, left - f.payload.len() as u64)
            }
            (AMQPFrameType::Body, Content::Body { .. }) => {
                return Err(fault(
                    FRAME_ERROR,
                    "content body larger than its header said",
                ));
            }
            _ => {
                return Err(fault(
                    UNEXPECTED_FRAME,
                    "content frame without basic.publish",
                ));
            }
        };
        if left > 0 {
            c.content = Content::Body { size, left };
            return Ok(());
        }
        c.content = Content::None;
        self.messages += 1;
        self.bytes += size;
        if c.confirm {
            c.published += 1;
            if c.published == c.acked + 1 {
                self.dirty.push(f.channel);
            }
        }
        Ok(())
    }

    fn method(&mut self, f: Raw<'_>, out: &mut Vec<u8>) -> Result<(), Fault> {
        let Some((class, method)) = ids(f.payload) else {
            return Err(fault(SYNTAX_ERROR, "method frame too short"));
        };
        let at = |code, text| Fault {
            code,
            text,
            class,
            method,
        };
        if !handled(class, method) {
            return Err(at(
                NOT_IMPLEMENTED,
                "method not implemented by the amqp sink",
            ));
        }
        if let Some(c) = self.channels.get(usize::from(f.channel))
            && c.content != Content::None
        {
            return Err(at(UNEXPECTED_FRAME, "method frame inside content"));
        }
        // basic.publish, the one method per message, holds no field table.
        if (class, method) != (60, 40) && !frame::nesting_ok(f.payload) {
            return Err(at(SYNTAX_ERROR, "field tables nested too deep"));
        }
        let m = match parse_class(f.payload) {
            Ok(([], m)) => m,
            _ => return Err(at(SYNTAX_ERROR, "malformed method arguments")),
        };
        if f.channel == 0 {
            let AMQPClass::Connection(m) = m else {
                return Err(at(
                    COMMAND_INVALID,
                    "channel 0 carries connection methods only",
                ));
            };
            return self
                .connection(m, out)
                .map_err(|(code, text)| at(code, text));
        }
        if matches!(m, AMQPClass::Connection(_)) {
            return Err(at(COMMAND_INVALID, "connection method on a channel"));
        }
        if self.phase != Phase::Running {
            return Err(at(COMMAND_INVALID, "channel method before connection.open"));
        }
        if f.channel > self.channel_max {
            return Err(at(CHANNEL_ERROR, "channel number above channel-max"));
        }
        self.channel_method(f.channel, m, out)
            .map_err(|(code, text)| at(code, text))
    }

    fn connection(
        &mut self,
        m: connection::AMQPMethod,
        out: &mut Vec<u8>,
    ) -> Result<(), (u16, &'static str)> {
        use connection::AMQPMethod as M;
        match (self.phase, m) {
            (_, M::Close(_)) => {
                self.reply(
                    out,
                    0,
                    AMQPClass::Connection(M::CloseOk(connection::CloseOk {})),
                );
                self.phase = Phase::Done;
                self.closed_by_peer = true;
            }
            (_, M::CloseOk(_)) => self.phase = Phase::Done,
            (Phase::StartOk, M::StartOk(s)) => {
                if !matches!(s.mechanism.as_str(), "PLAIN" | "AMQPLAIN") {
                    return Err((ACCESS_REFUSED, "only PLAIN and AMQPLAIN are supported"));
                }
                out.extend_from_slice(&self.shared.tune);
                self.phase = Phase::TuneOk;
            }
            (Phase::TuneOk, M::TuneOk(t)) => {
                self.channel_max =
                    lower(u32::from(t.channel_max), u32::from(self.shared.channel_max)) as u16;
                self.frame_max = lower(t.frame_max, self.shared.frame_max).max(FRAME_MIN);
                self.heartbeat = t.heartbeat;
                self.phase = Phase::Open;
            }
            (Phase::Open, M::Open(_)) => {
                self.reply(
                    out,
                    0,
                    AMQPClass::Connection(M::OpenOk(connection::OpenOk {})),
                );
                self.phase = Phase::Running;
            }
            (Phase::Running, M::UpdateSecret(_)) => {
                let ok = M::UpdateSecretOk(connection::UpdateSecretOk {});
                self.reply(out, 0, AMQPClass::Connection(ok));
            }
            _ => return Err((COMMAND_INVALID, "connection method out of order")),
        }
        Ok(())
    }

    fn channel_method(
        &mut self,
        ch: u16,
        m: AMQPClass,
        out: &mut Vec<u8>,
    ) -> Result<(), (u16, &'static str)> {
        let idx = usize::from(ch);
        if self.channels.len() <= idx {
            if !matches!(m, AMQPClass::Channel(channel::AMQPMethod::Open(_))) {
                return Err((CHANNEL_ERROR, "channel not open"));
            }
            self.channels.resize(idx + 1, Channel::default());
        }
        let state = self.channels[idx].state;
        match (state, &m) {
            (ChState::Closed, AMQPClass::Channel(channel::AMQPMethod::Open(_))) => {
                self.channels[idx] = Channel {
                    state: ChState::Open,
                    ..Channel::default()
                };
                let ok = channel::AMQPMethod::OpenOk(channel::OpenOk {});
                self.reply(out, ch, AMQPClass::Channel(ok));
                return Ok(());
            }
            (ChState::Closed, _) => return Err((CHANNEL_ERROR, "channel not open")),
            (ChState::Open, AMQPClass::Channel(channel::AMQPMethod::Open(_))) => {
                return Err((CHANNEL_ERROR, "channel already open"));
            }
            (ChState::Closing, AMQPClass::Channel(channel::AMQPMethod::CloseOk(_))) => {
                self.channels[idx].state = ChState::Closed;
                return Ok(());
            }
            (ChState::Closing, AMQPClass::Channel(channel::AMQPMethod::Close(_))) => {}
            // Discarded until the client acknowledges the sink's channel.close.
            (ChState::Closing, _) => return Ok(()),
            (ChState::Open, _) => {}
        }
        if !matches!(m, AMQPClass::Basic(basic::AMQPMethod::Publish(_))) {
            // Acknowledge what came before (channel.close below forgets the channel's tags).
            self.flush_acks(out);
        }
        if let Some(reply) = self.answer(ch, m) {
            self.reply(out, ch, reply);
        }
        Ok(())
    }

    /// Handles a method on open channel `ch`; the reply, if any.
    fn answer(&mut self, ch: u16, m: AMQPClass) -> Option<AMQPClass> {
        let c = &mut self.channels[usize::from(ch)];
        let reply = match m {
            AMQPClass::Basic(basic::AMQPMethod::Publish(_)) => {
                c.content = Content::Header;
                return None;
            }
            AMQPClass::Channel(channel::AMQPMethod::Close(_)) => {
                *c = Channel::default();
                AMQPClass::Channel(channel::AMQPMethod::CloseOk(channel::CloseOk {}))
            }
            AMQPClass::Channel(channel::AMQPMethod::Flow(f)) => {
                AMQPClass::Channel(channel::AMQPMethod::FlowOk(channel::FlowOk {
                    active: f.active,
                }))
            }
            AMQPClass::Channel(_) => return None, // close-ok with no close pending
            AMQPClass::Access(_) => {
                AMQPClass::Access(access::AMQPMethod::RequestOk(access::RequestOk {}))
            }
            AMQPClass::Exchange(e) => {
                use exchange::AMQPMethod as M;
                AMQPClass::Exchange(match e {
                    M::Declare(d) if !d.nowait => M::DeclareOk(exchange::DeclareOk {}),
                    M::Delete(d) if !d.nowait => M::DeleteOk(exchange::DeleteOk {}),
                    M::Bind(b) if !b.nowait => M::BindOk(exchange::BindOk {}),
                    M::Unbind(u) if !u.nowait => M::UnbindOk(exchange::UnbindOk {}),
                    _ => return None,
                })
            }
            AMQPClass::Queue(q) => {
                use queue::AMQPMethod as M;
                AMQPClass::Queue(match q {
                    M::Declare(d) if !d.nowait => {
                        let queue = if d.queue.as_str().is_empty() {
                            self.name("amq.gen-")
                        } else {
                            d.queue
                        };
                        M::DeclareOk(queue::DeclareOk {
                            queue,
                            message_count: 0,
                            consumer_count: 0,
                        })
                    }
                    M::Bind(b) if !b.nowait => M::BindOk(queue::BindOk {}),
                    M::Unbind(_) => M::UnbindOk(queue::UnbindOk {}),
                    M::Purge(p) if !p.nowait => M::PurgeOk(queue::PurgeOk { message_count: 0 }),
                    M::Delete(d) if !d.nowait => M::DeleteOk(queue::DeleteOk { message_count: 0 }),
                    _ => return None,
                })
            }
            AMQPClass::Basic(b) => {
                use basic::AMQPMethod as M;
                AMQPClass::Basic(match b {
                    M::Qos(_) => M::QosOk(basic::QosOk {}),
                    M::Consume(con) if !con.nowait => {
                        let consumer_tag = if con.consumer_tag.as_str().is_empty() {
                            self.name("amq.ctag-")
                        } else {
                            con.consumer_tag
                        };
                        M::ConsumeOk(basic::ConsumeOk { consumer_tag })
                    }
                    M::Cancel(can) if !can.nowait => M::CancelOk(basic::CancelOk {
                        consumer_tag: can.consumer_tag,
                    }),
                    M::Get(_) => M::GetEmpty(basic::GetEmpty {}),
                    M::Recover(_) => M::RecoverOk(basic::RecoverOk {}),
                    M::Ack(_) => return refuse(c, UNKNOWN_TAG, 60, 80),
                    M::Reject(_) => return refuse(c, UNKNOWN_TAG, 60, 90),
                    M::Nack(_) => return refuse(c, UNKNOWN_TAG, 60, 120),
                    _ => return None,
                })
            }
            AMQPClass::Confirm(confirm::AMQPMethod::Select(s)) => {
                if c.tx {
                    return refuse(c, "PRECONDITION_FAILED - channel is transactional", 85, 10);
                }
                c.confirm = true;
                if s.nowait {
                    return None;
                }
                AMQPClass::Confirm(confirm::AMQPMethod::SelectOk(confirm::SelectOk {}))
            }
            AMQPClass::Confirm(_) => return None,
            AMQPClass::Tx(t) => {
                use tx::AMQPMethod as M;
                const NOT_TX: &str = "PRECONDITION_FAILED - channel is not transactional";
                AMQPClass::Tx(match t {
                    M::Select(_) if c.confirm => {
                        return refuse(
                            c,
                            "PRECONDITION_FAILED - channel is in confirm mode",
                            90,
                            10,
                        );
                    }
                    M::Select(_) => {
                        c.tx = true;
                        M::SelectOk(tx::SelectOk {})
                    }
                    M::Commit(_) if c.tx => M::CommitOk(tx::CommitOk {}),
                    M::Rollback(_) if c.tx => M::RollbackOk(tx::RollbackOk {}),
                    M::Commit(_) => return refuse(c, NOT_TX, 90, 20),
                    M::Rollback(_) => return refuse(c, NOT_TX, 90, 30),
                    _ => return None,
                })
            }
            AMQPClass::Connection(_) => return None, // refused by the caller
        };
        Some(reply)
    }
}

const UNKNOWN_TAG: &str = "PRECONDITION_FAILED - unknown delivery tag";

/// A channel error (406): channel.close, after which the channel ignores everything until
/// the client's close-ok.
fn refuse(c: &mut Channel, text: &str, class_id: u16, method_id: u16) -> Option<AMQPClass> {
    c.state = ChState::Closing;
    Some(AMQPClass::Channel(channel::AMQPMethod::Close(
        channel::Close {
            reply_code: PRECONDITION_FAILED,
            reply_text: text.into(),
            class_id,
            method_id,
        },
    )))
}

/// Class and method ids at the front of a method payload.
fn ids(payload: &[u8]) -> Option<(u16, u16)> {
    let (rest, class) = parse_id(payload).ok()?;
    let (_, method) = parse_id(rest).ok()?;
    Some((class, method))
}
