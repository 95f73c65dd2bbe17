//! The JetStream producer: core `PUB`s with a reply subject `<inbox><token>`; the stream's
//! PubAck (`{"stream":..,"seq":..}`) on that subject is the message's ack, so publish latency is
//! send → PubAck and the runner's `--max-in-flight` is the async publish window. A refusal (an
//! error JSON, or a 503 "no responders" status: no stream captures the subject) is a refused
//! ack. Sends are batched in the write buffer exactly as the core producer does.

use super::api::{ApiInbox, JsError, ensure_stream};
use super::options::JsOptions;
use crate::WRITE_BATCH;
use crate::conn::Conn;
use crate::proto::{self, ServerOp};
use bytes::Bytes;
use msgbench_core::driver::{Ack, DriverError, DriverEventKind, EventSink, Outbound, Producer};
use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// One producer: one connection, one PubAck inbox.
pub struct JsProducer {
    pub(super) conn: Conn,
    pub(super) api: ApiInbox,
    pub(super) opts: Arc<JsOptions>,
    pub(super) events: EventSink,
    pub(super) name: String,
    /// Topics, as given, and their subjects (indexed by `Outbound::stream`).
    pub(super) topics: Vec<String>,
    pub(super) subjects: Vec<Bytes>,
    /// PubAck reply subject prefix (`<inbox>.`); the token follows.
    pub(super) inbox: Bytes,
    pub(super) acks: VecDeque<Ack>,
    /// Highest token sent on the current connection (for `Ack::InDoubt` after a cut).
    pub(super) last_token: Option<u64>,
    /// A refusal was reported as an event already (once per producer: they come per message).
    pub(super) refusal_reported: bool,
    /// The tokens sent on this connection that have no PubAck yet, oldest first, one queue
    /// per distinct subject. NATS refuses a publish the user may not make with an `-ERR` that
    /// names the subject but no message, and then no PubAck ever comes; PubAcks of one subject
    /// come in order, so the refused one is that subject's oldest outstanding, which is
    /// resolved as refused at once instead of waiting out the ack timeout to be counted in
    /// doubt.
    pub(super) outstanding: Vec<VecDeque<u64>>,
    /// The queue of `outstanding` each stream's subject uses (streams naming one subject
    /// share one).
    pub(super) queue_of: Vec<usize>,
    /// The streams are known to be there on the current connection (set up at creation; after
    /// a reconnection, once checked again).
    pub(super) streams_checked: bool,
    /// Messages over the server's `max_payload`.
    pub(super) oversized: crate::Oversized,
}

impl JsProducer {
    /// Takes what the server sent without waiting.
    fn service_reads(&mut self) {
        let mut cx = Context::from_waker(Waker::noop());
        while let Poll::Ready(r) = self.conn.poll_msg(&mut cx) {
            match r {
                Ok(op) => self.on_op(op),
                Err(e) => {
                    self.cut(&e);
                    break;
                }
            }
        }
        self.take_refusals();
    }

    /// Resolves the publishes the server refused with `-ERR` (see `outstanding`).
    fn take_refusals(&mut self) {
        if !self.conn.errors.has_refusals() {
            return;
        }
        for subject in self.conn.errors.take_refusals() {
            let named = self
                .subjects
                .iter()
                .position(|s| s[..] == *subject.as_bytes());
            let q = match named {
                Some(stream) => self.queue_of[stream],
                // Not one of the messages' subjects (an API call's): no message of ours.
                None if !subject.is_empty() => continue,
                // No subject named (a server that words it otherwise): the oldest of all.
                None => match (0..self.outstanding.len())
                    .filter_map(|q| self.outstanding[q].front().map(|&t| (t, q)))
                    .min()
                {
                    Some((_, q)) => q,
                    None => continue,
                },
            };
            if let Some(token) = self.outstanding[q].pop_front() {
                self.acks.push_back(Ack::One { token, ok: false });
            }
        }
    }

    /// A PubAck (or a refusal) came for `token`: it and the older ones of its subject, which
    /// will get none, are no longer outstanding.
    fn settle(&mut self, token: u64) {
        let q = if self.outstanding.len() == 1 {
            0
        } else {
            // The runner sends its streams in turn, so this is nearly always the queue.
            let guess = self.queue_of[(token % self.queue_of.len() as u64) as usize];
            let holds = |q: &VecDeque<u64>| q.binary_search(&token).is_ok();
            match holds(&self.outstanding[guess]) {
                true => guess,
                false => match self.outstanding.iter().position(holds) {
                    Some(q) => q,
                    None => return,
                },
            }
        };
        let out = &mut self.outstanding[q];
        while out.front().is_some_and(|&t| t <= token) {
            out.pop_front();
        }
    }

    /// The connection is gone: PubAcks for what it carried will never come.
    fn cut(&mut self, e: &std::io::Error) {
        self.conn.lost(e);
        for out in &mut self.outstanding {
            out.clear();
        }
        if let Some(up_to) = self.last_token.take() {
            self.acks.push_back(Ack::InDoubt { up_to });
        }
    }

    fn on_op(&mut self, op: ServerOp) {
        let (subject, headers, payload) = match &op {
            ServerOp::Msg {
                subject, payload, ..
            } => (subject, None, payload),
            ServerOp::HMsg {
                subject,
                headers,
                payload,
                ..
            } => (subject, Some(headers), payload),
            _ => return,
        };
        let Some(token) = proto::token_of(subject, &self.inbox) else {
            return;
        };
        // A PubAck is `{"stream":"S","seq":N}` (maybe `"duplicate":true`); a refusal carries
        // `"error"`, or is a status message (503: nothing captures the subject).
        let status = headers.and_then(|h| proto::status(h));
        let ok = status.is_none() && !contains(payload, b"\"error\"");
        if !ok && !self.refusal_reported {
            self.refusal_reported = true;
            let why = match status {
                Some(503) => "no stream captures the subject (503 no responders)".to_string(),
                Some(s) => format!("status {s}"),
                None => String::from_utf8_lossy(payload).into_owned(),
            };
            self.events.emit(
                DriverEventKind::Error,
                format!("{}: JetStream refused a publish: {why}", self.name),
            );
        }
        self.settle(token);
        self.acks.push_back(Ack::One { token, ok });
    }

    async fn write_out(&mut self) -> Result<(), DriverError> {
        if let Err(e) = self.conn.flush().await {
            self.cut(&e);
            return Err(DriverError::Send(e.to_string()));
        }
        Ok(())
    }

    /// Reconnects and makes sure the streams are there again (a memory stream does not survive
    /// a server restart).
    async fn reconnect(&mut self) -> Result<(), DriverError> {
        self.conn.try_reconnect().await?;
        self.streams_checked = false;
        self.check_streams().await
    }

    /// Sets the streams up again on a new connection. A JetStream API that does not answer
    /// (a cluster electing its leaders) keeps the connection: the next send asks again. The
    /// failed attempt is a failed send, retried, not a message in doubt.
    async fn check_streams(&mut self) -> Result<(), DriverError> {
        let mut stash = VecDeque::new();
        for topic in self.topics.clone() {
            let stream = self.opts.stream_of(&topic);
            if let Err(e) = ensure_stream(
                &mut self.api,
                &mut self.conn,
                &self.opts,
                &stream,
                &topic,
                &mut stash,
            )
            .await
            {
                let why = format!("setting stream `{stream}` up again after a reconnection: {e}");
                return Err(match e {
                    JsError::Denied { .. } => DriverError::Config(why),
                    JsError::Io { .. } => {
                        self.conn.lost(&std::io::Error::other(e.to_string()));
                        DriverError::Send(why)
                    }
                    _ => DriverError::Send(why),
                });
            }
        }
        self.streams_checked = true;
        Ok(())
    }
}

/// Whether `needle` occurs in `hay`.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

impl Producer for JsProducer {
    async fn send(&mut self, msg: Outbound<'_>) -> Result<(), DriverError> {
        if !self.conn.is_connected() {
            self.reconnect().await?;
        } else if !self.streams_checked {
            self.check_streams().await?;
        }
        let max = self.conn.info.max_payload;
        if !self.oversized.check(&self.name, msg.payload.len(), max)? {
            // Its refusal is its ack, so it is not left waiting for one.
            self.acks.push_back(Ack::One {
                token: msg.token,
                ok: false,
            });
            return Ok(());
        }
        proto::put_pub(
            &mut self.conn.wire.wbuf,
            &self.subjects[msg.stream as usize],
            Some((&self.inbox, msg.token)),
            msg.payload,
        );
        self.last_token = Some(msg.token);
        self.outstanding[self.queue_of[msg.stream as usize]].push_back(msg.token);
        if self.conn.wire.wbuf.len() >= WRITE_BATCH {
            self.write_out().await?;
            self.service_reads();
        }
        Ok(())
    }

    async fn idle(&mut self) -> Result<(), DriverError> {
        if self.conn.is_connected() && !self.conn.wire.wbuf.is_empty() {
            self.write_out().await?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), DriverError> {
        if !self.conn.is_connected() {
            return Err(DriverError::Closed);
        }
        self.write_out().await
    }

    fn poll_ack(&mut self, cx: &mut Context<'_>) -> Poll<Option<Ack>> {
        loop {
            if let Some(a) = self.acks.pop_front() {
                return Poll::Ready(Some(a));
            }
            if !self.conn.is_connected() {
                // The next send reconnects; what was in flight was declared in doubt.
                return Poll::Pending;
            }
            match self.conn.poll_msg(cx) {
                Poll::Ready(Ok(op)) => self.on_op(op),
                Poll::Ready(Err(e)) => self.cut(&e),
                Poll::Pending => {
                    self.take_refusals();
                    if self.acks.is_empty() {
                        return Poll::Pending;
                    }
                }
            }
        }
    }

    async fn close(mut self) -> Result<(), DriverError> {
        if self.conn.is_connected() {
            self.write_out().await?;
        }
        Ok(())
    }
}
