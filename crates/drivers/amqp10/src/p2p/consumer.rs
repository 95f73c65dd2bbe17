//! The receiving side of brokerless AMQP 1.0: one consumer, any number of connections.
//!
//! - `bind=consumer`: the consumer listens; producers (msgbench's, or any AMQP 1.0 sender)
//!   connect and attach sender links, which the connection answers and grants credit
//!   ([`Serving`](crate::conn::Serving)).
//! - `bind=producer`: a background task connects to each listening producer of this process
//!   whose topics this consumer receives, as it starts listening, and attaches a receiver.
//!
//! Either way new connections arrive on one channel, and `recv` reads them all, fairly (at
//! most [`BURST`] messages in a row from one while others have some). Deliveries are settled
//! per connection with one disposition per run of consecutive ids, when nothing more is
//! buffered or the run is long. Everything lives in the struct: `recv` is cancel-safe.

use super::{Bind, BoundProducer, LocalConsumer, Shared, matches};
use crate::client::Endpoint;
use crate::conn::{Conn, Event, LinkError};
use crate::listen::{self, Accepted};
use msgbench_core::driver::{Consumer, ConsumerSpec, Delivery, DriverError, DriverEventKind};
use msgbench_core::scenario::TlsPlan;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// Messages taken from one connection in a row while others may have some.
const BURST: u32 = 64;
/// Most deliveries settled by one disposition.
const MAX_BATCH: u32 = 256;

struct Peer {
    conn: Conn,
    who: String,
    /// Delivery ids handed over and not yet settled: first, last.
    range: Option<(u32, u32)>,
}

impl Peer {
    fn settle(&mut self, how: crate::frames::Disposition) {
        if let Some((first, last)) = self.range.take() {
            self.conn.settle(first, last, how);
        }
    }
}

/// The brokerless consumer.
pub struct P2pConsumer {
    d: Arc<Shared>,
    label: String,
    meta: bool,
    incoming: mpsc::UnboundedReceiver<Accepted>,
    peers: Vec<Peer>,
    next: usize,
    burst: u32,
    /// The accept loop or the dialler.
    task: JoinHandle<()>,
}

pub(crate) async fn start(d: Arc<Shared>, spec: &ConsumerSpec) -> Result<P2pConsumer, DriverError> {
    let label = format!("consumer {}", spec.id);
    let (tx, incoming) = mpsc::unbounded_channel();
    let mut entry = LocalConsumer {
        id: spec.id,
        topic: spec.topic.clone(),
        competing: spec.group.is_some(),
        addr: None,
    };
    let task = match d.opts.bind {
        Bind::Consumer => {
            let who = format!("amqp10 {label}");
            let (listener, addr) =
                listen::bind(&d.opts.host, d.opts.port_of(spec.id)?, &who).await?;
            entry.addr = Some(addr);
            listen::accept(
                listener,
                d.serving(true, spec.meta, &[]),
                d.container_id("sub", spec.id),
                tx,
                d.events.clone(),
                who,
                d.budget(),
            )
        }
        Bind::Producer => {
            let dial = Dial {
                d: d.clone(),
                id: spec.id,
                topic: spec.topic.clone(),
                meta: spec.meta,
                tx,
            };
            tokio::spawn(dial.run(d.registry.watch_producers()))
        }
    };
    // Entered only now: a producer never sees a consumer that is not listening yet.
    d.registry.add_consumer(entry);
    Ok(P2pConsumer {
        label,
        meta: spec.meta,
        incoming,
        peers: Vec::new(),
        next: 0,
        burst: 0,
        task,
        d,
    })
}

/// `bind=producer`: connects to each listening producer whose topics this consumer receives.
#[derive(Clone)]
struct Dial {
    d: Arc<Shared>,
    id: u32,
    topic: String,
    meta: bool,
    tx: mpsc::UnboundedSender<Accepted>,
}

impl Dial {
    async fn run(self, mut producers: watch::Receiver<Vec<BoundProducer>>) {
        let mut seen = 0usize;
        loop {
            let todo: Vec<BoundProducer> = {
                let list = producers.borrow_and_update();
                let new = list.get(seen..).unwrap_or_default();
                seen = list.len();
                new.iter()
                    .filter(|p| p.topics.iter().any(|t| matches(&self.topic, t)))
                    .cloned()
                    .collect()
            };
            // Each producer on a task of its own: one that is slow to answer holds up no other.
            for p in todo {
                let me = self.clone();
                tokio::spawn(async move {
                    match me.connect(&p).await {
                        Ok(conn) => {
                            let _ = me.tx.send(Accepted { conn, peer: p.addr });
                        }
                        Err(e) => me.d.events.emit(
                            DriverEventKind::Error,
                            format!(
                                "amqp10 consumer {} cannot connect to the producer at {}: {e}",
                                me.id, p.addr
                            ),
                        ),
                    }
                });
            }
            tokio::select! {
                changed = producers.changed() => if changed.is_err() { return },
                () = self.tx.closed() => return,
            }
        }
    }

    /// Connects to `p` and attaches a receiver on each of its topics this consumer takes.
    async fn connect(&self, p: &BoundProducer) -> Result<Conn, DriverError> {
        let d = &self.d;
        let ep = Endpoint::parse(&d.opts.url_of(p.addr), &TlsPlan::default())?;
        let conn = ep
            .open(&d.container_id("sub", self.id), None, d.timeout)
            .await?;
        let mut conn = conn.brokerless(None);
        for t in p.topics.iter().filter(|t| matches(&self.topic, t)) {
            let address = d.plan.address_of(t);
            tokio::time::timeout(
                d.timeout,
                conn.attach(None, &address, &[], true, false, d.plan.credit, self.meta),
            )
            .await
            .map_err(|_| DriverError::Timeout(format!("attaching a receiver to `{address}`")))??;
        }
        Ok(conn)
    }
}

impl P2pConsumer {
    /// A peer's connection ended: quietly when it closed politely (a producer that finished),
    /// as a `disconnected` event otherwise.
    fn lose(&mut self, i: usize, why: &LinkError, cx: &mut Context<'_>) {
        let mut p = self.peers.swap_remove(i);
        // Our answer to its close, if the socket still takes it.
        let _ = p.conn.poll_flush(cx);
        let polite = matches!(why, LinkError::Closed(None));
        if !polite && !self.d.registry.is_closing() {
            self.d
                .events
                .connection_lost(&format!("{} (peer {})", self.label, p.who), &why.loss());
        }
    }

    fn poll_delivery(&mut self, cx: &mut Context<'_>) -> Poll<Delivery> {
        while let Poll::Ready(Some(a)) = self.incoming.poll_recv(cx) {
            self.peers.push(Peer {
                conn: a.conn,
                who: a.peer.to_string(),
                range: None,
            });
        }
        let how = self.d.plan.on_receive;
        let mut tried = 0;
        while tried < self.peers.len() {
            let i = self.next % self.peers.len();
            let p = &mut self.peers[i];
            // Settle what was handed over before waiting, or once the run is long.
            if p.range.is_some_and(|(first, last)| {
                !p.conn.frame_ready() || last.wrapping_sub(first) >= MAX_BATCH
            }) {
                p.settle(how);
            }
            match p.conn.poll_event(cx, true) {
                Poll::Ready(Ok(Event::Delivery(r))) => {
                    if !r.settled {
                        p.range = match p.range {
                            Some((first, last)) if last.wrapping_add(1) == r.id => {
                                Some((first, r.id))
                            }
                            Some(_) => {
                                p.settle(how);
                                Some((r.id, r.id))
                            }
                            None => Some((r.id, r.id)),
                        };
                    }
                    self.burst += 1;
                    if self.burst >= BURST {
                        self.burst = 0;
                        self.next = i + 1;
                    }
                    let parts = r.parts;
                    return Poll::Ready(Delivery {
                        payload: parts.body,
                        redelivered: parts.redelivered,
                        meta: self.meta.then(|| Box::new(parts.meta)),
                    });
                }
                Poll::Ready(Ok(Event::Refused(why))) => self.d.events.emit(
                    DriverEventKind::Error,
                    format!("amqp10 {}: {why}", self.label),
                ),
                // A sender giving up with a reason: what it sends no longer comes, and why is
                // the peer's to say (a detach without one is a sender that finished).
                Poll::Ready(Ok(Event::Detached {
                    link,
                    error: Some(e),
                })) => {
                    let address = p.conn.address(link).to_string();
                    self.d.events.emit(
                        DriverEventKind::Error,
                        format!(
                            "amqp10 {}: {} detached its link to `{address}`: {e}",
                            self.label, p.who
                        ),
                    );
                }
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => self.lose(i, &e, cx),
                Poll::Pending => {
                    self.next = i + 1;
                    self.burst = 0;
                    tried += 1;
                }
            }
        }
        Poll::Pending
    }
}

impl Consumer for P2pConsumer {
    async fn recv(&mut self) -> Result<Option<Delivery>, DriverError> {
        Ok(Some(
            std::future::poll_fn(|cx| self.poll_delivery(cx)).await,
        ))
    }

    /// Settles what was handed over and closes every connection (each waits at most the
    /// connect timeout for the peer's close).
    async fn close(mut self) -> Result<(), DriverError> {
        self.task.abort();
        let how = self.d.plan.on_receive;
        let t = self.d.timeout;
        for mut p in self.peers.drain(..) {
            p.settle(how);
            p.conn.close(t).await;
        }
        Ok(())
    }
}
