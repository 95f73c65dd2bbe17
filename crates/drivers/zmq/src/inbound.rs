//! The receiving side: a PULL or SUB socket over our own connections.
//!
//! Messages are split off each connection's read buffer without copying (the payload handed to
//! the runner shares the buffer) and taken fairly: a connection gives at most [`BURST`]
//! messages in a row while others have some. A SUB socket sends its subscription right after
//! the handshake, on every connection, accepted or dialled, and a dialled one that is lost is
//! dialled again.

use crate::conn::{self, ConnError};
use crate::links::{Ctx, Dialer, Link, Links};
use crate::options::Endpoint;
use crate::registry::{BoundProducer, Filter};
use crate::zmtp::{self, SocketType, Unit};
use bytes::Bytes;
use msgbench_core::driver::{DriverError, DriverEventKind};
use std::task::{Context, Poll};
use tokio::sync::watch;
use tokio::time::Instant;

/// Messages taken from one connection in a row while others may have some.
pub const BURST: u32 = 64;

struct InPeer {
    conn: conn::Conn,
    dialled: Option<Endpoint>,
}

/// A PULL or SUB socket.
pub struct InSock {
    filter: Filter,
    peers: Vec<InPeer>,
    /// The connection read from first.
    next: usize,
    /// Messages taken in a row from `next`.
    burst: u32,
    /// New connections; their hello is a SUB's subscription.
    links: Links,
}

impl InSock {
    /// A socket of type `ours` (PULL, or SUB subscribed to `filter`) with no connections yet.
    pub fn new(ours: SocketType, filter: Filter, ctx: Ctx) -> InSock {
        let mut hello = bytes::BytesMut::new();
        if ours == SocketType::Sub {
            zmtp::put_subscribe(&mut hello, filter.subscription().as_bytes());
        }
        InSock {
            filter,
            peers: Vec::new(),
            next: 0,
            burst: 0,
            links: Links::new(ours, hello.to_vec(), ctx),
        }
    }

    /// Binds `ep` and accepts producers from now on; returns the endpoint bound.
    ///
    /// # Errors
    /// [`DriverError::Connect`] when it cannot bind.
    pub async fn bind(&mut self, ep: &Endpoint) -> Result<Endpoint, DriverError> {
        self.links.bind(ep).await
    }

    /// Dials every producer of this process that binds a topic this socket receives, as each
    /// appears (`bind=producer`), in the background.
    pub fn connect_to_producers(&mut self, producers: watch::Receiver<Vec<BoundProducer>>) {
        let task = dial_producers(self.links.dialer().clone(), self.filter.clone(), producers);
        self.links.run(task);
    }

    fn lose(&mut self, i: usize, e: &ConnError) {
        let p = self.peers.swap_remove(i);
        let peer = p.conn.peer.to_string();
        let ctx = self.links.ctx();
        if !ctx.registry.is_producing() {
            ctx.events.emit(
                DriverEventKind::Warning,
                format!(
                    "{}: the producer of another process at {peer} disconnected (its run \
                     ended, or it failed)",
                    ctx.who
                ),
            );
        } else {
            ctx.peer_left(&peer, e);
        }
        self.links.dial_again(p.dialled);
    }

    /// The next message's payload for this socket. Cancel-safe: everything lives in `self`.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Bytes> {
        while let Poll::Ready(Some(link)) = self.links.poll_recv(cx) {
            self.peers.push(InPeer {
                conn: link.conn,
                dialled: link.dialled,
            });
        }
        let mut tried = 0;
        while tried < self.peers.len() {
            let i = self.next % self.peers.len();
            match self.peers[i].conn.poll_unit(cx) {
                Poll::Ready(Ok(Unit::Message {
                    first,
                    last,
                    frames,
                })) => {
                    self.burst += 1;
                    if self.burst >= BURST {
                        self.burst = 0;
                        self.next = i + 1;
                    }
                    // PUB/SUB messages are [topic][payload]: ZeroMQ filters by prefix, we by
                    // the exact topic unless the consumer's ends in `*`. Anything else (a
                    // sender that is not msgbench) hands over its last frame, which the runner
                    // counts as foreign.
                    if self.links.dialer().ours == SocketType::Sub
                        && frames == 2
                        && !self.filter.matches(&first)
                    {
                        continue;
                    }
                    return Poll::Ready(last);
                }
                Poll::Ready(Ok(cmd)) => {
                    let c = &mut self.peers[i].conn;
                    // A failed write shows up on the next read.
                    if zmtp::pong(&cmd, &mut c.wbuf) {
                        let _ = c.try_flush();
                    }
                }
                Poll::Ready(Err(e)) => self.lose(i, &e),
                Poll::Pending => {
                    self.next = i + 1;
                    self.burst = 0;
                    tried += 1;
                }
            }
        }
        Poll::Pending
    }

    /// Stops accepting and dialling, and drops every connection.
    pub fn close(mut self) {
        self.links.stop();
    }
}

/// With `bind=producer`: dials each producer whose topics this socket receives as it binds.
async fn dial_producers(
    d: Dialer,
    filter: Filter,
    mut producers: watch::Receiver<Vec<BoundProducer>>,
) {
    let mut seen = 0usize;
    loop {
        let todo: Vec<Endpoint> = {
            let list = producers.borrow_and_update();
            let new = list.get(seen..).unwrap_or_default();
            seen = list.len();
            new.iter()
                .filter(|p| p.topics.iter().any(|t| filter.matches(t.as_bytes())))
                .map(|p| p.endpoint.clone())
                .collect()
        };
        for ep in todo {
            match conn::dial(&ep, d.ours, &d.hello, Instant::now() + d.ctx.attempt).await {
                Ok(conn) => d.deliver(Link {
                    conn,
                    dialled: Some(ep),
                }),
                Err(e) => d.ctx.events.emit(
                    DriverEventKind::Error,
                    format!("{} cannot connect to the producer at {ep}: {e}", d.ctx.who),
                ),
            }
        }
        tokio::select! {
            changed = producers.changed() => if changed.is_err() { return },
            () = d.closed() => return,
        }
    }
}
