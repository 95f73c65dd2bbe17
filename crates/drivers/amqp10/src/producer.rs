//! The sending side: one connection, one session, a sender link per topic.
//!
//! Unsettled transfers are pipelined: `send` hands the transfer over and keeps its outcome as a
//! future; `poll_ack` reports outcomes as they settle, in whatever order the broker settles
//! them. When the connection (or a link) is lost, outcomes already settled are still reported,
//! everything else sent on that connection is reported in doubt at once, and the next `send`
//! reconnects (with backoff) before it sends.

use crate::client::{Client, OutBody, OutMessage, Pending, Sender, Settled};
use crate::{Backoff, Inner};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use msgbench_core::driver::{Ack, DriverError, DriverEventKind, Outbound, Producer, ProducerSpec};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// One connection's worth of sending.
struct Live {
    client: Client,
    senders: Vec<Sender>,
}

/// An outstanding transfer: its token, its stream (for naming the address) and its outcome.
struct Tagged {
    token: u64,
    stream: u32,
    outcome: Pending,
}

impl Future for Tagged {
    type Output = (u64, u32, Settled);
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (token, stream) = (self.token, self.stream);
        Pin::new(&mut self.outcome)
            .poll(cx)
            .map(|s| (token, stream, s))
    }
}

/// The AMQP 1.0 producer.
pub struct Amqp10Producer {
    d: Arc<Inner>,
    id: u64,
    label: String,
    addresses: Vec<String>,
    live: Option<Live>,
    pending: FuturesUnordered<Tagged>,
    acks: VecDeque<Ack>,
    /// Highest token sent on the current connection with its outcome still to come.
    last_token: Option<u64>,
    /// A refusal was reported as a warning already.
    warned: bool,
    /// A connection was lost before (the next one is a reconnection).
    was_lost: bool,
    backoff: Backoff,
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
            pending: FuturesUnordered::new(),
            acks: VecDeque::new(),
            last_token: None,
            warned: false,
            was_lost: false,
            backoff: Backoff::new(),
            d,
        };
        p.live = Some(p.open().await?);
        Ok(p)
    }

    /// A new connection with a sender on every address.
    async fn open(&self) -> Result<Live, DriverError> {
        let d = &self.d;
        let mut client =
            Client::connect(&d.ep, &d.container_id("pub", self.id), None, d.timeout).await?;
        let mut senders = Vec::with_capacity(self.addresses.len());
        for a in &self.addresses {
            let s = tokio::time::timeout(
                d.timeout,
                client.sender(a, &d.plan.capabilities, d.plan.settled),
            )
            .await
            .map_err(|_| DriverError::Timeout(format!("attaching a sender to `{a}`")))??;
            senders.push(s);
        }
        Ok(Live { client, senders })
    }

    /// One reconnection attempt (after the backoff's pause).
    async fn reconnect(&mut self) -> Result<(), DriverError> {
        self.backoff.wait().await;
        match self.open().await {
            Ok(live) => {
                self.live = Some(live);
                self.backoff.reset();
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

    /// Turns one settled outcome into an ack (or into a lost connection).
    fn on_outcome(&mut self, token: u64, stream: u32, s: Settled) -> Option<Ack> {
        match s {
            Settled::Accepted => Some(Ack::One { token, ok: true }),
            Settled::Refused(why) => {
                if !self.warned {
                    self.warned = true;
                    let addr = self.addresses.get(stream as usize).map_or("?", |a| a);
                    self.d.events.emit(
                        DriverEventKind::Warning,
                        format!(
                            "{}: the broker refused a message sent to `{addr}`: {why} (further refusals are counted, not reported)",
                            self.label
                        ),
                    );
                }
                Some(Ack::One { token, ok: false })
            }
            Settled::Lost(why) => {
                self.lost(&why);
                None
            }
        }
    }

    /// The connection is gone: reports it (once), keeps the outcomes that did arrive, and
    /// declares everything else sent on it in doubt.
    fn lost(&mut self, why: &str) {
        let Some(live) = self.live.take() else {
            return;
        };
        self.d.events.connection_lost(&self.label, &why);
        self.was_lost = true;
        drop(live);
        let mut cx = Context::from_waker(Waker::noop());
        while let Poll::Ready(Some((token, _, s))) = self.pending.poll_next_unpin(&mut cx) {
            if let Settled::Accepted = s {
                self.acks.push_back(Ack::One { token, ok: true });
            } else if let Settled::Refused(_) = s {
                self.acks.push_back(Ack::One { token, ok: false });
            }
        }
        if let Some(up_to) = self.last_token.take()
            && !self.pending.is_empty()
        {
            self.acks.push_back(Ack::InDoubt { up_to });
        }
        self.pending = FuturesUnordered::new();
    }
}

impl Producer for Amqp10Producer {
    async fn send(&mut self, msg: Outbound<'_>) -> Result<(), DriverError> {
        let out = OutMessage {
            meta: msg.meta,
            body: OutBody::Data(msg.payload),
            durable: self.d.plan.durable,
        };
        // Two tries: a connection found dead when sending is replaced once right away (the
        // transfer never went out), so an idle producer's first send after a broker restart
        // is not lost.
        for attempt in 0..2 {
            if self.live.is_none() {
                self.reconnect().await?;
            }
            let Some(sender) = self
                .live
                .as_mut()
                .and_then(|l| l.senders.get_mut(msg.stream as usize))
            else {
                return Err(DriverError::Config(format!(
                    "stream {} has no sender",
                    msg.stream
                )));
            };
            match sender.send(out).await {
                Ok(outcome) => {
                    if !self.d.plan.settled {
                        self.pending.push(Tagged {
                            token: msg.token,
                            stream: msg.stream,
                            outcome,
                        });
                        self.last_token = Some(msg.token);
                    }
                    return Ok(());
                }
                Err(why) => {
                    self.lost(&why);
                    if attempt == 1 {
                        return Err(DriverError::Send(why));
                    }
                }
            }
        }
        Err(DriverError::Closed)
    }

    async fn flush(&mut self) -> Result<(), DriverError> {
        // fe2o3 writes every frame as it goes.
        Ok(())
    }

    fn poll_ack(&mut self, cx: &mut Context<'_>) -> Poll<Option<Ack>> {
        loop {
            if let Some(a) = self.acks.pop_front() {
                return Poll::Ready(Some(a));
            }
            match self.pending.poll_next_unpin(cx) {
                Poll::Ready(Some((token, stream, s))) => {
                    if let Some(a) = self.on_outcome(token, stream, s) {
                        return Poll::Ready(Some(a));
                    }
                }
                // Nothing outstanding (or the connection is gone): the next send reconnects;
                // acks may come again after it, so this is never the end.
                Poll::Ready(None) | Poll::Pending => return Poll::Pending,
            }
        }
    }

    async fn close(mut self) -> Result<(), DriverError> {
        if let Some(live) = self.live.take() {
            for s in live.senders {
                s.close(self.d.timeout).await;
            }
            live.client.close(self.d.timeout).await;
        }
        Ok(())
    }
}
