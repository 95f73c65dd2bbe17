//! The JetStream consumer, pull or push, durable or ephemeral, with explicit acks.
//!
//! Pull: batched fetches (`CONSUMER.MSG.NEXT` with `{"batch":N,"expires":..}`) to a private
//! inbox, pipelined: a new request goes out when fewer than half a batch is still owed, so the
//! server always holds one. Status messages are accounted for: 408 (the request expired) gives
//! back what it still owed (`Nats-Pending-Messages`), 409 "Consumer Deleted" sets the consumer
//! up again, other 409s and 404 end a request. Push: the server sends to a deliver subject;
//! flow-control requests and stalled heartbeats are answered at once.
//!
//! Every delivery is acked (an empty message to its `$JS.ACK...` reply subject, queued in the
//! write buffer and written with the next read, so acks cost no extra system call) and marked
//! `redelivered` when the ack subject's delivery count is above 1. `recv` is cancel-safe: all
//! state lives in the struct, and the set-up after a reconnection (stream, consumer) is
//! idempotent, so an interrupted one is done again; messages that arrive during it are kept.

use super::api::{ApiInbox, ConsumerDef, ensure_stream, write_request};
use super::options::JsOptions;
use crate::conn::Conn;
use crate::proto::{self, ServerOp};
use bytes::Bytes;
use msgbench_core::driver::{Consumer, Delivery, DriverError, DriverEventKind, EventSink};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// One consumer: one connection, one JetStream consumer (or a share of a durable one).
pub struct JsConsumer {
    pub(super) conn: Conn,
    pub(super) api: ApiInbox,
    pub(super) opts: Arc<JsOptions>,
    pub(super) events: EventSink,
    pub(super) name: String,
    pub(super) def: ConsumerDef,
    /// Put each message's subject in `Meta::topic`.
    pub(super) meta: bool,
    /// Pull: `PUB $JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer> <inbox> <body>` parts.
    pub(super) next_subject: String,
    pub(super) pull_inbox: String,
    pub(super) pull_body: Bytes,
    /// Pull: messages asked for and not yet delivered or given back.
    pub(super) requested: u64,
    /// Pull: when to stop waiting for what was asked (a status lost with a connection).
    pub(super) pull_deadline: Instant,
    /// Messages that arrived during a set-up, delivered first.
    pub(super) stash: VecDeque<ServerOp>,
    /// The stream and consumer must be set up (again) before reading.
    pub(super) needs_setup: bool,
    /// Shared by the driver's consumers: the redelivery wait is told once per run.
    pub(super) told_redelivery_wait: Arc<AtomicBool>,
}

/// The delivery count in a `$JS.ACK` subject: `$JS.ACK.<stream>.<consumer>.<delivered>...`
/// (9 tokens), or with domain and account hash (12 tokens and more), two tokens later.
pub fn delivered_count(ack: &[u8]) -> Option<u64> {
    let n = ack.split(|c| *c == b'.').count();
    let at = match n {
        9 => 4,
        n if n >= 11 => 6,
        _ => return None,
    };
    ack.split(|c| *c == b'.').nth(at).and_then(proto::number)
}

impl JsConsumer {
    /// Makes sure the stream and the consumer exist (idempotent); says how an existing stream
    /// differs from what was asked (see [`ensure_stream`]).
    pub(super) async fn setup(&mut self) -> Result<Option<String>, DriverError> {
        let differ = ensure_stream(
            &mut self.api,
            &mut self.conn,
            &self.opts,
            &self.def.stream,
            &self.def.filter,
            &mut self.stash,
        )
        .await?;
        self.def
            .create(&mut self.api, &mut self.conn, &self.opts, &mut self.stash)
            .await?;
        self.requested = 0;
        Ok(differ)
    }

    /// Asks for another batch when less than half a batch is owed.
    fn pull_more(&mut self) {
        let batch = self.opts.batch as u64;
        if self.requested <= batch / 2 {
            write_request(
                &mut self.conn.wire.wbuf,
                &self.next_subject,
                &self.pull_inbox,
                &self.pull_body,
            );
            self.requested += batch;
            self.pull_deadline = Instant::now() + self.opts.expires + Duration::from_secs(2);
        }
    }

    /// A delivery: acked, counted against the pull, handed over.
    fn data(&mut self, subject: &[u8], reply: Option<&Bytes>, payload: Bytes) -> Delivery {
        let mut redelivered = false;
        if let Some(r) = reply
            && r.starts_with(b"$JS.ACK.")
        {
            // An empty message to the ack subject is `+ACK`.
            proto::put_pub(&mut self.conn.wire.wbuf, r, None, b"");
            redelivered = delivered_count(r).is_some_and(|n| n > 1);
        }
        self.requested = self.requested.saturating_sub(1);
        Delivery {
            payload,
            redelivered,
            meta: self.meta.then(|| {
                Box::new(msgbench_core::meta::Meta {
                    topic: Some(String::from_utf8_lossy(subject).into_owned()),
                    ..Default::default()
                })
            }),
        }
    }

    /// A status message (no payload of ours).
    fn status(&mut self, code: u16, reply: Option<&Bytes>, headers: &[u8]) {
        let batch = self.opts.batch as u64;
        match code {
            // Flow control asks for an answer on its reply subject; a heartbeat may say the
            // consumer is stalled, naming the subject that unblocks it.
            100 => {
                let to = reply
                    .map(|r| &r[..])
                    .or_else(|| proto::header(headers, b"Nats-Consumer-Stalled"));
                if let Some(to) = to {
                    proto::put_pub(&mut self.conn.wire.wbuf, to, None, b"");
                }
            }
            408 => {
                self.requested = match proto::header(headers, b"Nats-Pending-Messages")
                    .and_then(proto::number)
                {
                    Some(n) => self.requested.saturating_sub(n),
                    None => 0,
                };
            }
            404 => self.requested = self.requested.saturating_sub(batch),
            409 if contains(headers, b"Consumer Deleted") => {
                self.events.emit(
                    DriverEventKind::Warning,
                    format!(
                        "{}: JetStream consumer deleted; creating it again",
                        self.name
                    ),
                );
                self.needs_setup = true;
            }
            _ => {
                let line = headers.split(|c| *c == b'\r').next().unwrap_or(headers);
                self.events.emit(
                    DriverEventKind::Warning,
                    format!(
                        "{}: JetStream status: {}",
                        self.name,
                        String::from_utf8_lossy(line)
                    ),
                );
                self.requested = self.requested.saturating_sub(batch);
            }
        }
    }

    /// The next message from the stash or the connection (`None`: look again).
    async fn next_op(&mut self) -> Option<ServerOp> {
        if let Some(op) = self.stash.pop_front() {
            return Some(op);
        }
        let pull = self.def.deliver.is_none();
        if pull {
            self.pull_more();
        }
        let got = if pull {
            match tokio::time::timeout_at(self.pull_deadline, self.conn.next_msg()).await {
                Ok(r) => r,
                Err(_) => {
                    // What was asked for will not come (its status was lost): ask again.
                    self.requested = 0;
                    return None;
                }
            }
        } else {
            self.conn.next_msg().await
        };
        match got {
            Ok(op) => Some(op),
            Err(e) => {
                self.conn.lost(&e);
                None
            }
        }
    }
}

impl JsConsumer {
    /// Says once per run that what the server sent down a lost connection is redelivered only
    /// after `ack_wait`: a drain shorter than that counts those messages lost, not late.
    fn tell_redelivery_wait(&self) {
        if self.told_redelivery_wait.swap(true, Ordering::Relaxed) {
            return;
        }
        self.events.emit(
            DriverEventKind::Warning,
            format!(
                "{}: messages the server sent before the connection was lost come back after \
                 ack_wait ({:?}); a --drain shorter than that counts them lost \
                 (set ?ack_wait= lower to see them redelivered)",
                self.name, self.opts.ack_wait
            ),
        );
    }
}

/// Whether `needle` occurs in `hay`.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

impl Consumer for JsConsumer {
    async fn recv(&mut self) -> Result<Option<Delivery>, DriverError> {
        loop {
            if !self.conn.is_connected() {
                self.conn.reconnect().await;
                self.requested = 0;
                self.needs_setup = true;
                self.tell_redelivery_wait();
            }
            if self.needs_setup {
                match self.setup().await {
                    Ok(_) => self.needs_setup = false,
                    Err(e) => {
                        self.events.emit(
                            DriverEventKind::Error,
                            format!("{}: setting the consumer up again: {e}", self.name),
                        );
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                }
            }
            let Some(op) = self.next_op().await else {
                continue;
            };
            match op {
                // API replies are read where they are asked for; a late one is dropped.
                ServerOp::Msg {
                    subject,
                    reply,
                    payload,
                    ..
                } if !self.api.owns(&subject) => {
                    return Ok(Some(self.data(&subject, reply.as_ref(), payload)));
                }
                ServerOp::HMsg {
                    subject,
                    reply,
                    headers,
                    payload,
                    ..
                } => {
                    if self.api.owns(&subject) {
                        continue;
                    }
                    match proto::status(&headers) {
                        Some(code) => self.status(code, reply.as_ref(), &headers),
                        None => return Ok(Some(self.data(&subject, reply.as_ref(), payload))),
                    }
                }
                _ => {}
            }
        }
    }

    async fn close(mut self) -> Result<(), DriverError> {
        if self.conn.is_connected() {
            // An ephemeral consumer goes with its client (it would linger until its inactivity
            // threshold otherwise); the pull request still open ends with the connection.
            if !self.def.durable {
                let subject = format!(
                    "$JS.API.CONSUMER.DELETE.{}.{}",
                    self.def.stream, self.def.name
                );
                proto::put_pub(&mut self.conn.wire.wbuf, subject.as_bytes(), None, b"");
            }
            let _ = self.conn.flush().await;
            self.conn.close();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_delivery_counts() {
        assert_eq!(
            delivered_count(b"$JS.ACK.S.C.1.10.10.1700000000.0"),
            Some(1)
        );
        assert_eq!(delivered_count(b"$JS.ACK.S.C.3.10.9.1700000000.5"), Some(3));
        assert_eq!(
            delivered_count(b"$JS.ACK.dom.acchash.S.C.2.10.9.1700000000.5.tok"),
            Some(2)
        );
        assert_eq!(delivered_count(b"$JS.ACK.S.C"), None);
    }
}
