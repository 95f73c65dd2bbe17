//! # msgbench-driver-ws
//!
//! WebSocket (RFC 6455) over a lean client written for fan-out load: tens of thousands of
//! receiving clients per generator (the rango scenario: a broker's messages relayed to every
//! connected browser), each one connection with a small read buffer, TCP_NODELAY on, `wss://`
//! through rustls with verification on by default.
//!
//! - **Consumers** connect, upgrade, optionally send a subscribe message (`subscribe`
//!   template), and hand every text or binary message (fragments reassembled) to the runner.
//!   Each consumer counts its own deliveries, so fan-out completeness is exact per client.
//! - **Producers** send binary messages (masked, as RFC 6455 requires of clients), batched like
//!   the other drivers; frames a server sends back to a producer are read and dropped.
//! - The URL's path and query may hold `{i}` (client index) and `{topic}`: rango's
//!   `?stream=public.{i}` gives every client its own stream.
//! - Pings are answered with pongs; a close from the server is answered, reported with its
//!   code as a `disconnected` event, and the client reconnects with backoff (and subscribes
//!   again). Refused upgrades say what the server answered.
//!
//! WebSocket has no acknowledgements: publish latency is not measured; end-to-end latency is
//! (the stamp travels in the message). Text frames are accepted on receive; msgbench's own
//! messages carry a binary stamp, so producers always send binary frames.
//!
//! # Layout
//! - [`codec`]: frames and the upgrade handshake (shared with `msgbench serve ws-broadcast`).
//! - [`conn`]: one client connection.
//! - this file: the `Driver`, `Producer`, `Consumer` and `Session` implementations.

pub mod codec;
pub mod conn;

use conn::{Conn, Endpoint, Message, fill};
use msgbench_core::driver::{
    Ack, Capabilities, Consumer, ConsumerSpec, Delivery, Driver, DriverError, EventSink, Outbound,
    Producer, ProducerSpec, Session, SessionSpec,
};
use msgbench_core::scenario::{ClientPlan, TlsPlan};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// Bytes buffered before an unpaced producer writes them out.
pub const WRITE_BATCH: usize = 64 * 1024;
const PRODUCER_CHUNK: usize = 64 * 1024;
/// Read buffer growth of a consumer: small, as there may be tens of thousands of them.
const CONSUMER_CHUNK: usize = 8 * 1024;
const SESSION_CHUNK: usize = 512;

/// Driver settings beyond the URL.
#[derive(Debug, Clone, Default)]
pub struct WsOptions {
    /// Text message each consumer (and session) sends after every handshake, with `{i}` and
    /// `{topic}` replaced: a subscribe request for servers that want one.
    pub subscribe: Option<String>,
}

/// The WebSocket driver.
pub struct WsDriver {
    ep: Arc<Endpoint>,
    opts: WsOptions,
    client: ClientPlan,
    run_id: u32,
    events: EventSink,
    timeout: Duration,
}

impl WsDriver {
    /// A driver for `ws[s]://host[:port][/path][?query]`.
    pub fn new(
        url: &str,
        opts: WsOptions,
        client: &ClientPlan,
        tls: &TlsPlan,
        run_id: u32,
        events: EventSink,
        timeout: Duration,
    ) -> Result<Self, DriverError> {
        Ok(WsDriver {
            ep: Arc::new(Endpoint::parse(url, || msgbench_net::Tls::new(tls))?),
            opts,
            client: client.clone(),
            run_id,
            events,
            timeout,
        })
    }

    async fn connect(
        &self,
        role: &str,
        i: u64,
        topic: &str,
        source: Option<std::net::IpAddr>,
        events: bool,
        chunk: usize,
    ) -> Result<Conn, DriverError> {
        // The subscribe message is the receiving clients' (consumers and held sessions).
        let hello = match role {
            "pub" => None,
            _ => self.opts.subscribe.as_deref().map(|t| fill(t, i, topic)),
        };
        Conn::connect(
            self.ep.clone(),
            fill(&self.ep.path, i, topic),
            self.client.client_id_for(self.run_id, role, i),
            hello,
            events.then(|| self.events.clone()),
            source,
            self.timeout,
            chunk,
        )
        .await
    }
}

impl Driver for WsDriver {
    type Producer = WsProducer;
    type Consumer = WsConsumer;
    type Session = WsSession;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            acks: false,
            queue_groups: false,
            request_reply: false,
            responses: false,
            metadata: false,
        }
    }

    async fn producer(&self, spec: &ProducerSpec) -> Result<WsProducer, DriverError> {
        let topic = spec.topics.first().map_or("", |t| t.as_str());
        let conn = self
            .connect("pub", spec.id as u64, topic, None, true, PRODUCER_CHUNK)
            .await?;
        Ok(WsProducer { conn })
    }

    async fn consumer(&self, spec: &ConsumerSpec) -> Result<WsConsumer, DriverError> {
        if spec.group.is_some() {
            return Err(DriverError::Config(
                "WebSocket has no competing consumers (no queue groups): every client gets \
                 what the server sends it"
                    .into(),
            ));
        }
        let conn = self
            .connect(
                "sub",
                spec.id as u64,
                &spec.topic,
                None,
                true,
                CONSUMER_CHUNK,
            )
            .await?;
        Ok(WsConsumer {
            conn,
            message: Message::default(),
        })
    }

    async fn session(&self, spec: &SessionSpec) -> Result<WsSession, DriverError> {
        let conn = self
            .connect(
                "conn",
                spec.id,
                &spec.topic,
                spec.source,
                false,
                SESSION_CHUNK,
            )
            .await?;
        Ok(WsSession { conn })
    }
}

/// The sending side: one connection.
pub struct WsProducer {
    conn: Conn,
}

impl WsProducer {
    /// Reads and drops whatever the server sent (a broadcast server echoes to everyone),
    /// answering pings, so the socket's receive side never fills.
    fn service_reads(&mut self) {
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            match self.conn.poll_data(&mut cx, false) {
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => {
                    self.conn.lost(&e);
                    return;
                }
                Poll::Pending => return,
            }
        }
    }

    async fn write_out(&mut self) -> Result<(), DriverError> {
        if let Err(e) = self.conn.flush().await {
            self.conn.lost(&e);
            return Err(DriverError::Send(e.to_string()));
        }
        self.service_reads();
        Ok(())
    }
}

impl Producer for WsProducer {
    async fn send(&mut self, msg: Outbound<'_>) -> Result<(), DriverError> {
        if !self.conn.is_connected() {
            self.conn.try_reconnect().await?;
        }
        self.conn.put(codec::OP_BINARY, msg.payload);
        if self.conn.wire.wbuf.len() >= WRITE_BATCH {
            self.write_out().await?;
        }
        Ok(())
    }

    async fn idle(&mut self) -> Result<(), DriverError> {
        if self.conn.is_connected() {
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

    fn poll_ack(&mut self, _cx: &mut Context<'_>) -> Poll<Option<Ack>> {
        self.service_reads();
        Poll::Pending
    }

    async fn close(mut self) -> Result<(), DriverError> {
        let _ = self.conn.flush().await;
        self.conn.close().await;
        Ok(())
    }
}

/// The receiving side: one connection.
pub struct WsConsumer {
    conn: Conn,
    message: Message,
}

impl Consumer for WsConsumer {
    async fn recv(&mut self) -> Result<Option<Delivery>, DriverError> {
        loop {
            if !self.conn.is_connected() {
                self.message = Message::default();
                if self.conn.try_reconnect().await.is_err() {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                continue;
            }
            match std::future::poll_fn(|cx| self.conn.poll_data(cx, true)).await {
                Ok(f) => {
                    if let Some(payload) = self.message.feed(f) {
                        return Ok(Some(Delivery {
                            payload,
                            redelivered: false,
                            meta: None,
                        }));
                    }
                }
                Err(e) => self.conn.lost(&e),
            }
        }
    }

    async fn close(mut self) -> Result<(), DriverError> {
        self.conn.close().await;
        Ok(())
    }
}

/// A held connection: answers pings, keeps nothing.
pub struct WsSession {
    conn: Conn,
}

impl Session for WsSession {
    async fn publish(&mut self, payload: &[u8]) -> Result<(), DriverError> {
        self.conn.put(codec::OP_BINARY, payload);
        self.conn
            .flush()
            .await
            .map_err(|e| DriverError::Send(e.to_string()))
    }

    async fn keep_alive(&mut self) -> DriverError {
        loop {
            match self.conn.read_data().await {
                Ok(_) => {}
                Err(e) => return DriverError::Receive(e.to_string()),
            }
        }
    }

    async fn close(mut self) -> Result<(), DriverError> {
        self.conn.close().await;
        Ok(())
    }
}
