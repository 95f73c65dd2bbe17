//! A held connection of a connection workload or journey ([`AmqpSession`]): publishes to the
//! run's exchange with the topic as routing key, subscribes as the run's consumers do, keeps
//! the connection alive with heartbeats, and sends requests the RabbitMQ way, with direct
//! reply-to.

use crate::Inner;
use crate::codec::{self, Frame, PublishTemplate};
use crate::conn::{CHANNEL, Conn};
use crate::half;
use crate::link::Caller;
use amq_protocol::protocol::{AMQPClass, basic};
use amq_protocol::types::{FieldTable, ShortString};
use msgbench_core::driver::{DriverError, Session};
use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::time::Instant;

/// The pseudo-queue of RabbitMQ's direct reply-to: consumed (without acks) on the channel
/// that publishes the requests, and named as their reply-to.
const REPLY_TO: &str = "amq.rabbitmq.reply-to";

/// A held connection: heartbeats keep it alive.
pub struct AmqpSession {
    conn: Conn,
    driver: Arc<Inner>,
    template: PublishTemplate,
    /// The topic: the routing key of publishes, the queue requests go to.
    topic: String,
    next_beat: Instant,
    /// The run's exchange is known to exist (declared by this session or an earlier one).
    exchange_ready: bool,
    /// The consumer tag of [`REPLY_TO`] once consumed (set up by the first request).
    reply_tag: Option<ShortString>,
    /// The delivery whose frames arrive now is a reply, not a subscription's message.
    in_reply: bool,
    /// Messages and payload bytes its subscriptions delivered, not yet taken.
    received: (u64, u64),
    /// Requests sent: the last one's number is its correlation-id.
    requests: u64,
}

impl AmqpSession {
    pub(crate) fn new(conn: Conn, topic: &str, driver: Arc<Inner>) -> AmqpSession {
        let hb = conn.heartbeat_every;
        AmqpSession {
            template: PublishTemplate::new(CHANNEL, &driver.amqp.exchange, topic, false, false),
            topic: topic.to_string(),
            conn,
            next_beat: Instant::now() + half(hb),
            exchange_ready: driver.sessions_declared.load(Ordering::Relaxed),
            driver,
            reply_tag: None,
            in_reply: false,
            received: (0, 0),
            requests: 0,
        }
    }

    /// Writes the publish (or request) just buffered; a heartbeat is due half a period later.
    async fn send_buffered(&mut self) -> Result<(), DriverError> {
        self.conn.published = true;
        self.conn
            .flush()
            .await
            .map_err(|e| DriverError::Send(e.to_string()))?;
        self.next_beat = Instant::now() + half(self.conn.heartbeat_every);
        Ok(())
    }

    /// Declares the run's exchange unless a session of the run already did (declares are
    /// idempotent, so sessions racing to be first only cost a round trip each).
    async fn ensure_exchange(&mut self) -> Result<(), DriverError> {
        if !self.exchange_ready {
            let d = self.driver.clone();
            d.declare_exchange(self).await?;
            d.sessions_declared.store(true, Ordering::Relaxed);
            self.exchange_ready = true;
        }
        Ok(())
    }

    /// Follows what arrives: counts the messages subscriptions deliver (by their content
    /// headers), tells replies apart by their consumer tag, and hands back any other method.
    fn take(&mut self, f: Frame) -> io::Result<Option<AMQPClass>> {
        match f {
            Frame::Method(c, m) => {
                self.conn.check_close(c, &m)?;
                if let AMQPClass::Basic(basic::AMQPMethod::Deliver(d)) = &*m {
                    self.in_reply = self.reply_tag.as_ref() == Some(&d.consumer_tag);
                    return Ok(None);
                }
                Ok((c == CHANNEL).then_some(*m))
            }
            Frame::Header(_, size, _) if !self.in_reply => {
                self.received.0 += 1;
                self.received.1 += size;
                Ok(None)
            }
            _ => Ok(None),
        }
    }

    /// Consumes `queue` without acks; returns the consumer tag.
    async fn consume(&mut self, queue: &str) -> io::Result<ShortString> {
        let answer = self
            .call(AMQPClass::Basic(basic::AMQPMethod::Consume(
                basic::Consume {
                    queue: ShortString::from(queue),
                    consumer_tag: ShortString::from(""),
                    no_local: false,
                    no_ack: true,
                    exclusive: false,
                    nowait: false,
                    arguments: FieldTable::default(),
                },
            )))
            .await?;
        match answer {
            AMQPClass::Basic(basic::AMQPMethod::ConsumeOk(ok)) => Ok(ok.consumer_tag),
            other => Err(io::Error::other(format!(
                "expected basic.consume-ok, got {other:?}"
            ))),
        }
    }
}

/// Synchronous methods of a session: deliveries that arrive before the answer are counted
/// (or, for replies, passed over), not taken for it.
impl Caller for AmqpSession {
    async fn call(&mut self, method: AMQPClass) -> io::Result<AMQPClass> {
        codec::put_method(&mut self.conn.wire.wbuf, CHANNEL, method);
        self.conn.flush().await?;
        let timeout = self.driver.timeout;
        tokio::time::timeout(timeout, async {
            loop {
                let f = self.conn.read_frame().await?;
                if let Some(m) = self.take(f)? {
                    return Ok(m);
                }
            }
        })
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no answer from the server"))?
    }
}

impl Session for AmqpSession {
    async fn publish(&mut self, payload: &[u8]) -> Result<(), DriverError> {
        self.ensure_exchange().await?;
        let fm = self.conn.frame_max;
        self.template.put(&mut self.conn.wire.wbuf, payload, fm);
        self.send_buffered().await
    }

    async fn keep_alive(&mut self) -> DriverError {
        loop {
            tokio::select! {
                f = self.conn.read_frame() => {
                    if let Err(e) = f.and_then(|f| self.take(f)) {
                        return DriverError::Receive(e.to_string());
                    }
                }
                _ = tokio::time::sleep_until(self.next_beat) => {
                    codec::put_heartbeat(&mut self.conn.wire.wbuf);
                    self.next_beat = Instant::now() + half(self.conn.heartbeat_every);
                    if let Err(e) = self.conn.flush().await {
                        return DriverError::Send(e.to_string());
                    }
                }
            }
        }
    }

    async fn close(mut self) -> Result<(), DriverError> {
        self.conn.close().await;
        Ok(())
    }

    /// A request: published to the topic's queue with reply-to `amq.rabbitmq.reply-to` and
    /// the request's number as its correlation-id; done at the reply carrying that
    /// correlation-id (a late reply to an earlier request, whose wait timed out, is dropped).
    async fn request(&mut self, payload: &[u8]) -> Result<(), DriverError> {
        if self.reply_tag.is_none() {
            let tag = self.consume(REPLY_TO).await.map_err(|e| {
                DriverError::Subscribe(format!(
                    "requests need direct reply-to ({REPLY_TO}, as RabbitMQ has): {e}"
                ))
            })?;
            self.reply_tag = Some(tag);
        }
        self.requests += 1;
        let id = self.requests.to_string();
        let fm = self.conn.frame_max;
        codec::put_request(
            &mut self.conn.wire.wbuf,
            CHANNEL,
            &self.topic,
            payload,
            fm,
            REPLY_TO,
            &id,
        );
        self.send_buffered().await?;
        let gone = |e: io::Error| DriverError::Receive(e.to_string());
        loop {
            match self.conn.read_frame().await.map_err(gone)? {
                // The header says whose reply this is; its body frames are skipped like any.
                Frame::Header(_, _, Some(props))
                    if self.in_reply && codec::correlation_id(&props) == Some(id.as_bytes()) =>
                {
                    return Ok(());
                }
                f => {
                    self.take(f).map_err(gone)?;
                }
            }
        }
    }

    /// On the run's exchange, a queue of the session's own (exclusive, server-named) bound
    /// with `topic`, so every subscriber hears every message; on the default exchange, the
    /// queue `topic` names, whose messages its subscribers share. Consumed without acks.
    async fn subscribe(&mut self, topic: &str) -> Result<(), DriverError> {
        crate::short("the routing key", topic)?;
        self.ensure_exchange().await?;
        let d = self.driver.clone();
        let queue = if d.amqp.exchange.is_empty() {
            d.declare_queue(self, topic, topic, true, false).await?
        } else {
            d.declare_queue(self, "", topic, false, false).await?
        };
        self.consume(&queue)
            .await
            .map_err(|e| DriverError::Subscribe(format!("consuming from `{queue}`: {e}")))?;
        Ok(())
    }

    fn take_received(&mut self) -> (u64, u64) {
        std::mem::take(&mut self.received)
    }
}
