//! A held connection of a connection workload or journey ([`AmqpSession`]): publishes to the
//! default exchange (the topic names the queue), keeps the connection alive with heartbeats,
//! and sends requests the RabbitMQ way, with direct reply-to.

use crate::codec::{self, Frame, PublishTemplate};
use crate::conn::{CHANNEL, Conn};
use crate::half;
use amq_protocol::protocol::{AMQPClass, basic};
use amq_protocol::types::{FieldTable, ShortString};
use msgbench_core::driver::{DriverError, Session};
use tokio::time::Instant;

/// The pseudo-queue of RabbitMQ's direct reply-to: consumed (without acks) on the channel
/// that publishes the requests, and named as their reply-to.
const REPLY_TO: &str = "amq.rabbitmq.reply-to";

/// A held connection: heartbeats keep it alive.
pub struct AmqpSession {
    conn: Conn,
    template: PublishTemplate,
    /// The topic: the queue requests are published to.
    topic: String,
    next_beat: Instant,
    /// Consuming from [`REPLY_TO`] (set up by the first request).
    replying: bool,
    /// Requests sent: the last one's number is its correlation-id.
    requests: u64,
}

impl AmqpSession {
    pub(crate) fn new(conn: Conn, topic: &str) -> AmqpSession {
        let hb = conn.heartbeat_every;
        AmqpSession {
            template: PublishTemplate::new(CHANNEL, "", topic, false, false),
            topic: topic.to_string(),
            conn,
            next_beat: Instant::now() + half(hb),
            replying: false,
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

    /// Starts consuming from the direct reply-to pseudo-queue (no acks, as it requires).
    async fn consume_replies(&mut self) -> Result<(), DriverError> {
        let answer = self
            .conn
            .call(AMQPClass::Basic(basic::AMQPMethod::Consume(
                basic::Consume {
                    queue: ShortString::from(REPLY_TO),
                    consumer_tag: ShortString::from(""),
                    no_local: false,
                    no_ack: true,
                    exclusive: false,
                    nowait: false,
                    arguments: FieldTable::default(),
                },
            )))
            .await
            .map_err(|e| {
                DriverError::Subscribe(format!(
                    "requests need direct reply-to ({REPLY_TO}, as RabbitMQ has): {e}"
                ))
            })?;
        match answer {
            AMQPClass::Basic(basic::AMQPMethod::ConsumeOk(_)) => {
                self.replying = true;
                Ok(())
            }
            other => Err(DriverError::Subscribe(format!(
                "expected basic.consume-ok for {REPLY_TO}, got {other:?}"
            ))),
        }
    }
}

impl Session for AmqpSession {
    async fn publish(&mut self, payload: &[u8]) -> Result<(), DriverError> {
        let fm = self.conn.frame_max;
        self.template.put(&mut self.conn.wire.wbuf, payload, fm);
        self.send_buffered().await
    }

    async fn keep_alive(&mut self) -> DriverError {
        loop {
            tokio::select! {
                f = self.conn.read_frame() => match f {
                    Ok(Frame::Method(c, m)) => {
                        if let Err(e) = self.conn.check_close(c, &m) {
                            return DriverError::Receive(e.to_string());
                        }
                    }
                    Ok(_) => {}
                    Err(e) => return DriverError::Receive(e.to_string()),
                },
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
        if !self.replying {
            self.consume_replies().await?;
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
        loop {
            let f = self
                .conn
                .read_frame()
                .await
                .map_err(|e| DriverError::Receive(e.to_string()))?;
            match f {
                Frame::Method(c, m) => self
                    .conn
                    .check_close(c, &m)
                    .map_err(|e| DriverError::Receive(e.to_string()))?,
                // The header says whose reply this is; its body frames are skipped like any.
                Frame::Header(_, _, Some(props))
                    if codec::correlation_id(&props) == Some(id.as_bytes()) =>
                {
                    return Ok(());
                }
                _ => {}
            }
        }
    }
}
