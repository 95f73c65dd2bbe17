//! The sending side: one connection, one session, a sender link per topic, owned by the
//! producer itself (no connection task: a send is an encode into the write buffer).
//!
//! Unsettled transfers are pipelined: `send` writes the transfer (waiting only for link
//! credit) and `poll_ack` reads the broker's dispositions as they come, in whatever order the
//! broker settles. When the connection (or a link) is lost, outcomes already read are still
//! reported, everything else sent on that connection is reported in doubt at once, and the
//! next `send` reconnects (with backoff) before it sends.

use crate::Inner;
use crate::conn::{CHUNK, Conn, Event, LinkError, LinkId};
use crate::frames::Outcome;
use crate::message::{OutBody, OutMessage};
use msgbench_core::driver::{Ack, DriverError, DriverEventKind, Outbound, Producer, ProducerSpec};
use msgbench_net::Backoff;
use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Poll};

/// One connection's worth of sending: the connection and a sender per stream.
struct Live {
    conn: Conn,
    senders: Vec<LinkId>,
    /// When it opened: a connection lost soon after counts as a failed attempt.
    opened: tokio::time::Instant,
    /// The broker settled something sent on it: it took what this producer sends.
    worked: bool,
}

/// The AMQP 1.0 producer.
pub struct Amqp10Producer {
    d: Arc<Inner>,
    id: u64,
    label: String,
    addresses: Vec<String>,
    live: Option<Live>,
    acks: VecDeque<Ack>,
    /// Highest token sent on the current connection with its outcome still to come.
    last_token: Option<u64>,
    /// A refusal was reported as a warning already.
    warned: bool,
    /// A connection was lost before (the next one is a reconnection).
    was_lost: bool,
    backoff: Backoff,
    /// The broker refused a link for good (see [`LinkError::refusal`]): the next send stops
    /// the producer with this, instead of reconnecting to be refused again.
    refused: Option<String>,
}

impl Amqp10Producer {
    pub(crate) async fn connect(
        d: Arc<Inner>,
        spec: &ProducerSpec,
    ) -> Result<Amqp10Producer, DriverError> {
        let addresses: Vec<String> = spec.topics.iter().map(|t| d.plan.address_of(t)).collect();
        let mut p = Amqp10Producer {
            label: format!("producer {}", spec.id),
            id: spec.id as u64,
            addresses,
            live: None,
            acks: VecDeque::new(),
            last_token: None,
            warned: false,
            was_lost: false,
            backoff: Backoff::default(),
            refused: None,
            d,
        };
        p.live = Some(p.open().await?);
        Ok(p)
    }

    /// A new connection with a sender on every address.
    async fn open(&self) -> Result<Live, DriverError> {
        let d = &self.d;
        let mut conn =
            d.ep.open(&d.container_id("pub", self.id), None, d.timeout)
                .await?;
        let mut senders = Vec::with_capacity(self.addresses.len());
        for a in &self.addresses {
            let s = tokio::time::timeout(
                d.timeout,
                conn.attach(
                    None,
                    a,
                    &d.plan.capabilities,
                    false,
                    d.plan.settled,
                    0,
                    false,
                ),
            )
            .await
            .map_err(|_| DriverError::Timeout(format!("attaching a sender to `{a}`")))??;
            senders.push(s);
        }
        Ok(Live {
            conn,
            senders,
            opened: tokio::time::Instant::now(),
            worked: false,
        })
    }

    /// One reconnection attempt (after the backoff's pause).
    async fn reconnect(&mut self) -> Result<(), DriverError> {
        self.backoff.wait().await;
        match self.open().await {
            Ok(live) => {
                self.live = Some(live);
                if self.was_lost {
                    self.d
                        .events
                        .reconnected(&self.label, self.d.ep.display(), "");
                }
                Ok(())
            }
            Err(e) => {
                self.backoff.failed();
                Err(e)
            }
        }
    }

    /// Turns one outcome into an ack.
    fn on_outcome(&mut self, token: u64, outcome: Outcome) -> Ack {
        let why = match outcome {
            Outcome::Accepted => return Ack::One { token, ok: true },
            Outcome::Rejected(Some(e)) => format!("rejected: {e}"),
            Outcome::Rejected(None) => "rejected".into(),
            Outcome::Released => "released".into(),
            Outcome::Modified {
                delivery_failed,
                undeliverable_here,
            } => format!(
                "modified (delivery failed: {delivery_failed}, undeliverable here: {undeliverable_here})"
            ),
            Outcome::Other => "an unexpected outcome".into(),
        };
        if !self.warned {
            self.warned = true;
            let addrs = self.addresses.join("`, `");
            self.d.events.emit(
                DriverEventKind::Warning,
                format!(
                    "{}: the broker refused a message sent to `{addrs}`: {why} (further refusals are counted, not reported)",
                    self.label
                ),
            );
        }
        Ack::One { token, ok: false }
    }

    /// The connection is gone: reports it (once), keeps the outcomes that did arrive, and
    /// declares everything else sent on it in doubt.
    fn lost(&mut self, why: &LinkError) {
        let Some(mut live) = self.live.take() else {
            return;
        };
        // ActiveMQ Classic closes with `amqp:decode-error` for whatever failed while it
        // handled a frame: a message over its frame size, and also its own shutdown. Only a
        // connection that never worked is refused for good by it.
        let worked = live.worked || live.opened.elapsed() >= std::time::Duration::from_secs(1);
        let for_good = why
            .refusal()
            .filter(|e| !(worked && e.condition == "amqp:decode-error"));
        match why {
            // The connection itself was fine: say what the broker did to the link (the
            // connection is left all the same, and its unsettled sends go in doubt).
            LinkError::Detached { .. } => self.d.events.emit(
                DriverEventKind::Disconnected,
                format!(
                    "{}: {why}; {}",
                    self.label,
                    if for_good.is_some() {
                        "the producer stops"
                    } else {
                        "reconnecting"
                    }
                ),
            ),
            _ => self.d.events.connection_lost(&self.label, &why.loss()),
        }
        self.was_lost = true;
        self.backoff.lost_after(live.opened.elapsed());
        if let Some(e) = for_good {
            // Reconnecting would only be refused again: the next send (or the close) stops.
            let hint = if e.condition == "amqp:decode-error" {
                " (ActiveMQ Classic says so of a message over its maxFrameSize, among others: \
                 a smaller --size?)"
            } else {
                ""
            };
            self.refused = Some(format!("the broker refuses for good ({e}){hint}"));
        }
        let settled: Vec<Event> = live.conn.drain_events().collect();
        for e in settled {
            if let Event::Settled { tag, outcome } = e {
                let a = self.on_outcome(tag, outcome);
                self.acks.push_back(a);
            }
        }
        if let Some(up_to) = self.last_token.take()
            && live.conn.outstanding() > 0
        {
            self.acks.push_back(Ack::InDoubt { up_to });
        }
    }

    /// Writes what is buffered; a failure loses the connection (its sends go in doubt).
    async fn write_out(&mut self) {
        let Some(live) = self.live.as_mut() else {
            return;
        };
        if live.conn.buffered() == 0 {
            return;
        }
        if let Err(e) = live.conn.flush().await {
            self.lost(&LinkError::Io(e.to_string()));
        }
    }
}

impl Producer for Amqp10Producer {
    async fn send(&mut self, msg: Outbound<'_>) -> Result<(), DriverError> {
        let out = OutMessage {
            meta: msg.meta,
            body: OutBody::Data(msg.payload),
            durable: self.d.plan.durable,
        };
        if let Some(why) = self.refused.take() {
            return Err(DriverError::Refused(why));
        }
        // Two tries: a connection found dead while waiting for credit is replaced once right
        // away (the transfer never went out), so an idle producer's first send after a broker
        // restart is not lost.
        for attempt in 0..2 {
            if self.live.is_none() {
                self.reconnect().await?;
            }
            let Some(live) = self.live.as_mut() else {
                continue;
            };
            let Some(&link) = live.senders.get(msg.stream as usize) else {
                return Err(DriverError::Config(format!(
                    "stream {} has no sender",
                    msg.stream
                )));
            };
            if !live.conn.can_send(link) {
                let waited = match live.conn.flush().await {
                    Ok(()) => live.conn.wait_credit(link).await,
                    Err(e) => Err(LinkError::Io(e.to_string())),
                };
                if let Err(e) = waited {
                    self.lost(&e);
                    if attempt == 1 {
                        return Err(DriverError::Send(e.to_string()));
                    }
                    continue;
                }
            }
            live.conn.send(link, msg.token, &out);
            if !self.d.plan.settled {
                self.last_token = Some(msg.token);
            }
            if live.conn.buffered() >= CHUNK {
                self.write_out().await;
            }
            return Ok(());
        }
        Err(DriverError::Closed)
    }

    async fn idle(&mut self) -> Result<(), DriverError> {
        self.write_out().await;
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), DriverError> {
        self.write_out().await;
        Ok(())
    }

    fn poll_ack(&mut self, cx: &mut Context<'_>) -> Poll<Option<Ack>> {
        loop {
            if let Some(a) = self.acks.pop_front() {
                return Poll::Ready(Some(a));
            }
            // Nothing outstanding (or the connection is gone): the next send reconnects;
            // acks may come again after it, so this is never the end.
            let Some(live) = self.live.as_mut() else {
                return Poll::Pending;
            };
            match live.conn.poll_event(cx, false) {
                Poll::Ready(Ok(Event::Settled { tag, outcome })) => {
                    live.worked = true;
                    return Poll::Ready(Some(self.on_outcome(tag, outcome)));
                }
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => self.lost(&e),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    async fn close(mut self) -> Result<(), DriverError> {
        if let Some(mut live) = self.live.take() {
            let t = self.d.timeout;
            for s in live.senders.clone() {
                live.conn.detach(s, t).await;
            }
            live.conn.close(t).await;
        }
        // A refusal read after the last send still stops the run (see the 0-9-1 producer).
        match self.refused.take() {
            Some(why) => Err(DriverError::Refused(why)),
            None => Ok(()),
        }
    }
}
