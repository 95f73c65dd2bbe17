//! # msgbench-driver-amqp10
//!
//! AMQP 1.0 (ActiveMQ Artemis, Qpid Broker-J, RabbitMQ's AMQP 1.0 plugin, ECP endpoints) for
//! `amqp10://[user:pass@]host[:port]` and `amqp10s://` (TLS), on msgbench's own implementation
//! of the protocol: the type system, the frames and one connection with one session, owned by
//! whoever uses it (no connection task, no per-frame allocation; a payload is copied once on
//! the way out and handed to the runner as a slice of the read buffer on the way in). TCP
//! (NODELAY on) and TLS are `msgbench-net`'s. Credentials in the URL log in with SASL PLAIN,
//! none with ANONYMOUS.
//!
//! Each producer, consumer and held session owns one connection with one session:
//! - a producer attaches one sender link per topic, to `[amqp10] address` with `{topic}`
//!   replaced and the target capabilities of `[amqp10] capabilities` (`queue`: Artemis creates
//!   an anycast queue; `topic`: a multicast address). Unsettled sends are pipelined: `send`
//!   returns once the transfer is written to the buffer (it waits only for link credit), the
//!   broker's outcome arrives later as an ack (accepted = ok; rejected, released, modified =
//!   refused, with one warning event carrying the broker's error). `settled = true` sends
//!   pre-settled: no outcome, no acks.
//! - a consumer attaches one receiver link with `credit` (refilled at half), hands each
//!   delivery to the runner and settles it as `on_receive` says, one disposition per run of
//!   consecutive deliveries. Several receivers on one queue compete (queue groups); with the
//!   `topic` capability each receiver gets every message, and a group shares one subscription
//!   (`shared` + `global`, the group as the link name, as Artemis does it).
//! - metadata: `Outbound::meta` becomes `properties` (message-id, correlation-id, creation-time)
//!   and `application-properties`; consumers asked for it fill `Delivery::meta` back.
//!
//! Failures: a lost connection (or a link the broker detaches) is a `disconnected` event; the
//! client reconnects with backoff for as long as the run lasts and says `reconnected`. Outcomes
//! outstanding on the lost connection never come: the producer reports them in doubt at once
//! ([`Ack::InDoubt`](msgbench_core::driver::Ack)). Errors say what the broker said: a wrong
//! password is an authentication failure, a refused link names its address and the broker's
//! error condition and description.
//!
//! Brokerless (point to point): `amqp10://HOST:PORT?bind=consumer|producer[&peers=N]` puts no
//! broker in between: one side listens and the other attaches its links straight to it
//! ([`p2p`], with the listening half of the protocol in [`listen`] and [`reply`]).
//!
//! # Layout
//! - [`codec`]: the AMQP type system (encoder, borrowing decoder).
//! - [`frames`]: frames and performatives.
//! - [`message`]: message sections ↔ msgbench's metadata and bodies.
//! - [`client`]: URLs and the handshake (SASL, open, begin).
//! - [`conn`]: one connection: links, sending, receiving, settlement, flow control
//!   (public: the ECP endpoint simulator in `msgbench-serve` uses it too).
//! - `producer`, `consumer`: the runner's producers and consumers, with reconnection.
//! - [`listen`], [`reply`]: the listening side (brokerless): accepting, the server half of the
//!   handshake, the frames only a listener writes; [`conn`] answers peers' links.
//! - [`p2p`]: the brokerless driver, either side listening.
//! - this file: the `Driver` and the held session of connection workloads.
#![deny(missing_docs)]

pub mod client;
pub mod codec;
pub mod conn;
mod consumer;
pub mod frames;
pub mod listen;
pub mod message;
pub mod options;
pub mod p2p;
mod producer;
pub mod reply;

pub use consumer::Amqp10Consumer;
pub use producer::Amqp10Producer;

use client::Endpoint;
use conn::{Conn, LinkId};
use message::{OutBody, OutMessage};
use msgbench_core::driver::{
    Capabilities, ConsumerSpec, Driver, DriverError, EventSink, ProducerSpec, Session, SessionSpec,
};
use msgbench_core::scenario::TlsPlan;
pub use options::Amqp10Plan;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The AMQP 1.0 driver.
pub struct Amqp10Driver(Arc<Inner>);

/// What every client of a run shares.
pub(crate) struct Inner {
    pub(crate) ep: Arc<Endpoint>,
    pub(crate) plan: Amqp10Plan,
    pub(crate) tls: TlsPlan,
    pub(crate) events: EventSink,
    pub(crate) timeout: Duration,
    /// Makes container ids unique within the process.
    seq: AtomicU64,
}

impl Inner {
    /// A container id unique to this client (brokers may refuse duplicates).
    pub(crate) fn container_id(&self, role: &str, id: u64) -> String {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        format!("msgbench-{role}{id}-{}-{n}", std::process::id())
    }
}

impl Amqp10Driver {
    /// A driver for `amqp10://[user:pass@]host[:port]` (default port 5672) or `amqp10s://`
    /// (TLS, default port 5671, verified unless `tls.insecure`).
    pub fn new(
        url: &str,
        plan: &Amqp10Plan,
        tls: &TlsPlan,
        events: EventSink,
        connect_timeout: Duration,
    ) -> Result<Self, DriverError> {
        Ok(Amqp10Driver(Arc::new(Inner {
            ep: Arc::new(Endpoint::parse(url, tls)?),
            plan: plan.clone(),
            tls: tls.clone(),
            events,
            timeout: connect_timeout,
            seq: AtomicU64::new(0),
        })))
    }

    /// Writes `open` and `begin` with the protocol header instead of waiting for each answer
    /// ([`Endpoint::pipeline`]). Takes effect only before the driver is shared.
    pub fn with_pipelined_handshake(mut self, on: bool) -> Self {
        if let Some(ep) = Arc::get_mut(&mut self.0).and_then(|i| Arc::get_mut(&mut i.ep)) {
            ep.pipeline = on;
        }
        self
    }

    /// Data connections announce `every` as their idle time-out and drop a connection whose
    /// peer stays silent for two of them (a blackholed route, a frozen broker).
    pub fn with_keep_alive(mut self, every: Duration) -> Self {
        if let Some(ep) = Arc::get_mut(&mut self.0).and_then(|i| Arc::get_mut(&mut i.ep)) {
            ep.keep_alive = every;
        }
        self
    }
}

impl Driver for Amqp10Driver {
    type Producer = Amqp10Producer;
    type Consumer = Amqp10Consumer;
    type Session = Amqp10Session;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            acks: !self.0.plan.settled,
            queue_groups: true,
            request_reply: false,
            responses: false,
            metadata: true,
        }
    }

    async fn producer(&self, spec: &ProducerSpec) -> Result<Amqp10Producer, DriverError> {
        Amqp10Producer::connect(self.0.clone(), spec).await
    }

    async fn consumer(&self, spec: &ConsumerSpec) -> Result<Amqp10Consumer, DriverError> {
        consumer::start(self.0.clone(), spec).await
    }

    async fn session(&self, spec: &SessionSpec) -> Result<Amqp10Session, DriverError> {
        let d = &self.0;
        let conn =
            d.ep.open_idle(&d.container_id("conn", spec.id), spec.source, d.timeout)
                .await?;
        Ok(Amqp10Session {
            conn,
            sender: None,
            address: d.plan.address_of(&spec.topic),
            capabilities: d.plan.capabilities.clone(),
            durable: d.plan.durable,
            timeout: d.timeout,
        })
    }
}

/// A held connection (connection workloads): one connection and session; its first publish
/// attaches a pre-settled sender.
pub struct Amqp10Session {
    conn: Conn,
    sender: Option<LinkId>,
    address: String,
    capabilities: Vec<String>,
    durable: bool,
    timeout: Duration,
}

impl Session for Amqp10Session {
    async fn publish(&mut self, payload: &[u8]) -> Result<(), DriverError> {
        let link = match self.sender {
            Some(l) => l,
            None => {
                let l = tokio::time::timeout(
                    self.timeout,
                    self.conn.attach(
                        None,
                        &self.address,
                        &self.capabilities,
                        false,
                        true,
                        0,
                        false,
                    ),
                )
                .await
                .map_err(|_| DriverError::Timeout(format!("attaching to `{}`", self.address)))??;
                self.sender = Some(l);
                l
            }
        };
        let send = |e: conn::LinkError| DriverError::Send(e.to_string());
        self.conn.wait_credit(link).await.map_err(send)?;
        self.conn.send(
            link,
            0,
            &OutMessage {
                meta: None,
                body: OutBody::Data(payload),
                durable: self.durable,
            },
        );
        self.conn
            .flush()
            .await
            .map_err(|e| DriverError::Send(e.to_string()))
    }

    async fn keep_alive(&mut self) -> DriverError {
        DriverError::Receive(format!("connection ended: {}", self.conn.closed().await))
    }

    async fn close(mut self) -> Result<(), DriverError> {
        if let Some(s) = self.sender.take() {
            self.conn.detach(s, self.timeout).await;
        }
        self.conn.close(self.timeout).await;
        Ok(())
    }
}

impl msgbench_core::registration::Registered for Amqp10Driver {
    const INFO: msgbench_core::registration::DriverInfo = msgbench_core::registration::DriverInfo {
        name: "amqp10",
        schemes: &["amqp10", "amqp10s"],
        // acks: unless [amqp10] settled = true (the plan decides).
        about: "AMQP 1.0 (Artemis, RabbitMQ's AMQP 1.0 plugin, Qpid, ECP endpoints): queues and topics by address and capabilities ([amqp10]), pipelined unsettled sends (acks = broker outcomes) or pre-settled, credit, accept/release/reject, message ids and application properties, SASL PLAIN/SCRAM/ANONYMOUS, TLS, reconnection, connection workloads (own AMQP 1.0 implementation); brokerless with ?bind=consumer|producer&peers=N (either side listens, port 0 picks free ports; fan-out, queue groups, credit)",
        caps: msgbench_core::driver::Capabilities {
            acks: true,
            queue_groups: true,
            request_reply: false,
            responses: false,
            metadata: true,
        },
        section: Some(msgbench_core::scenario::SectionSpec::of::<
            options::Amqp10Section,
        >()),
    };

    /// Brokerless URLs (`?bind=`) are [`p2p::P2pDriver`]'s.
    fn accepts(url: &str) -> bool {
        Self::INFO.answers(url) && !p2p::is_brokerless(url)
    }

    fn build(
        url: &str,
        plan: &msgbench_core::scenario::RunPlan,
        events: EventSink,
    ) -> Result<Self, DriverError> {
        let amqp10 = plan.drivers.get::<options::Amqp10Section>()?;
        Ok(
            Amqp10Driver::new(url, &amqp10, &plan.tls, events, plan.connect_timeout)?
                .with_pipelined_handshake(plan.client.pipeline_handshake)
                .with_keep_alive(plan.client.keep_alive),
        )
    }
}
