//! The sending side of brokerless AMQP 1.0: one producer, one connection per consumer.
//!
//! - `bind=consumer`: at setup the producer connects to every listening consumer of its
//!   topics (or `peers` listeners elsewhere) and attaches one sender link per topic on each.
//! - `bind=producer`: the producer listens; consumers connect and attach receiver links,
//!   answered by the connection ([`Serving`](crate::conn::Serving)); setup returns once the
//!   expected number of receivers is attached, so nothing is sent before anyone listens.
//!
//! Each stream (topic) has a route: its links, and whether every message goes to all of them
//! (fan-out) or to the next one with credit (a queue group). A send encodes the transfer into
//! the connection's write buffer (written at 64 KiB, and whenever the runner waits): no lock,
//! no allocation. It waits only for credit, at most the connect timeout; a peer that grants
//! none for that long is reported once as a stall and the send fails (a send error, not a
//! message in doubt: it never left).
//!
//! Unsettled transfers: each message is acked once every link it went on has settled it
//! (`pending` holds, in token order, how many outcomes each still waits for). A receiver may ask
//! for pre-settled delivery (at most once), and gets it: no outcome comes from it, and a
//! message that went only to such receivers is acked as it is sent (a warning says so).

use super::{Bind, BoundProducer, Shared};
use crate::client::Endpoint;
use crate::conn::{CHUNK, Conn, Event, LinkError, LinkId};
use crate::frames::Outcome;
use crate::listen::{self, Accepted};
use crate::message::{OutBody, OutMessage};
use msgbench_core::driver::{Ack, DriverError, DriverEventKind, Outbound, Producer, ProducerSpec};
use msgbench_core::scenario::TlsPlan;
use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// New connections are taken in once every this many sends (and whenever the runner waits).
const SERVICE_EVERY: u32 = 1024;

struct Peer {
    conn: Conn,
    who: String,
    alive: bool,
}

/// Where one stream's messages go.
#[derive(Default)]
struct Route {
    /// (peer, link) pairs.
    links: Vec<(usize, LinkId)>,
    /// Every message to every link; else round robin among links with credit.
    fan_out: bool,
    next: usize,
}

/// The brokerless producer.
pub struct P2pProducer {
    d: Arc<Shared>,
    label: String,
    topics: Vec<String>,
    peers: Vec<Peer>,
    routes: Vec<Route>,
    /// `bind=producer`: connections accepted, and the accept loop.
    incoming: Option<(mpsc::UnboundedReceiver<Accepted>, JoinHandle<()>)>,
    acks: VecDeque<Ack>,
    /// Unsettled messages in token order: token, outcomes still to come, all accepted so far.
    pending: VecDeque<(u64, u32, bool)>,
    until_service: u32,
    /// A stall was reported and credit has not come back since.
    stalled: bool,
    warned: bool,
}

pub(crate) async fn start(d: Arc<Shared>, spec: &ProducerSpec) -> Result<P2pProducer, DriverError> {
    let label = format!("amqp10 producer {}", spec.id);
    if spec.topics.is_empty() {
        return Err(DriverError::Config(format!("{label} has no topic")));
    }
    let deadline = Instant::now() + d.budget();
    let mut p = P2pProducer {
        label,
        topics: spec.topics.clone(),
        peers: Vec::new(),
        routes: spec.topics.iter().map(|_| Route::default()).collect(),
        incoming: None,
        acks: VecDeque::new(),
        pending: VecDeque::new(),
        until_service: SERVICE_EVERY,
        stalled: false,
        warned: false,
        d: d.clone(),
    };
    // Fan-out unless every local consumer of the topic is in a queue group.
    let mut expected = 0usize;
    let mut ids: Vec<u32> = Vec::new();
    for (i, t) in spec.topics.iter().enumerate() {
        let cs = d.registry.consumers_of(t);
        p.routes[i].fan_out = cs.is_empty() || cs.iter().any(|c| !c.competing);
        ids.extend(cs.iter().map(|c| c.id));
    }
    ids.sort_unstable();
    ids.dedup();
    match d.opts.bind {
        Bind::Consumer => {
            // One connection per listening consumer, a link per topic it receives.
            let mut urls: Vec<(String, Vec<usize>)> = Vec::new();
            for (i, t) in spec.topics.iter().enumerate() {
                let cs = d.registry.consumers_of(t);
                let targets: Vec<String> = if cs.is_empty() {
                    d.opts.remote()?
                } else {
                    cs.iter()
                        .filter_map(|c| c.addr)
                        .map(|a| d.opts.url_of(a))
                        .collect()
                };
                if targets.is_empty() {
                    return Err(nobody(&p.label));
                }
                for u in targets {
                    match urls.iter_mut().find(|(x, _)| *x == u) {
                        Some((_, s)) => s.push(i),
                        None => urls.push((u, vec![i])),
                    }
                }
            }
            for (url, streams) in urls {
                p.connect(&url, &streams, spec.id, deadline).await?;
            }
        }
        Bind::Producer => {
            let (listener, addr) =
                listen::bind(&d.opts.host, d.opts.port_of(spec.id)?, &p.label).await?;
            let (tx, rx) = mpsc::unbounded_channel();
            let task = listen::accept(
                listener,
                d.serving(false, false, &spec.topics),
                d.container_id("pub", spec.id),
                tx,
                d.events.clone(),
                p.label.clone(),
                d.budget(),
            );
            p.incoming = Some((rx, task));
            d.registry.add_producer(BoundProducer {
                topics: spec.topics.clone(),
                addr,
            });
            expected = if ids.is_empty() {
                usize::from(d.opts.peers)
            } else {
                ids.len()
            };
            if expected == 0 {
                return Err(nobody(&p.label));
            }
        }
    }
    p.wait_ready(expected, deadline).await?;
    Ok(p)
}

fn nobody(who: &str) -> DriverError {
    DriverError::Config(format!(
        "{who}: its topic has no consumer in this run and peers=0: nobody to send to"
    ))
}

impl P2pProducer {
    /// `bind=consumer`: connects to the listener at `url` (retrying while nothing listens,
    /// until `deadline`) and attaches a sender for each of `streams`.
    async fn connect(
        &mut self,
        url: &str,
        streams: &[usize],
        id: u32,
        deadline: Instant,
    ) -> Result<(), DriverError> {
        let d = self.d.clone();
        let ep = Endpoint::parse(url, &TlsPlan::default())?;
        let conn = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match ep
                .open(&d.container_id("pub", id), None, left.max(d.timeout / 10))
                .await
            {
                Ok(c) => break c,
                // A listener in another process may not be up yet.
                Err(e)
                    if Instant::now() + d.timeout / 20 < deadline
                        && e.connect_failure()
                            == msgbench_core::driver::ConnectFailure::Refused =>
                {
                    tokio::time::sleep(d.timeout / 20).await;
                }
                Err(e) => return Err(e),
            }
        };
        let mut conn = conn.brokerless(None);
        let peer = self.peers.len();
        for &s in streams {
            // Not waited for: the listening consumer answers once its owner reads, after the
            // run's setup; the first send waits for its credit.
            let address = d.plan.address_of(&self.topics[s]);
            let caps = &d.plan.capabilities;
            let link = conn.attach_later(None, &address, caps, false, d.plan.settled, 0, false);
            self.routes[s].links.push((peer, link));
        }
        conn.flush()
            .await
            .map_err(|e| DriverError::Send(format!("{}: attaching: {e}", ep.display())))?;
        self.peers.push(Peer {
            conn,
            who: ep.display().to_string(),
            alive: true,
        });
        Ok(())
    }

    /// Receiver links attached so far.
    fn attached(&self) -> usize {
        let mut all: Vec<(usize, LinkId)> = self
            .routes
            .iter()
            .flat_map(|r| r.links.iter().copied())
            .collect();
        all.sort_unstable();
        all.dedup();
        all.len()
    }

    /// `bind=producer`: waits until `n` receivers are attached (at most until `deadline`).
    async fn wait_ready(&mut self, n: usize, deadline: Instant) -> Result<(), DriverError> {
        if self.incoming.is_none() {
            return Ok(());
        }
        let work = std::future::poll_fn(|cx| {
            loop {
                let progressed = self.poll_service(cx).is_ready();
                // Each peer has its answers at once (attach, refusal), not when the last of
                // the peers waited for has come.
                for p in self.peers.iter_mut().filter(|p| p.alive) {
                    let _ = p.conn.poll_flush(cx);
                }
                if self.attached() >= n {
                    return Poll::Ready(());
                }
                if !progressed {
                    return Poll::Pending;
                }
            }
        });
        let r = tokio::time::timeout_at(deadline, work).await;
        self.write_out().await;
        r.map_err(|_| {
            let to: Vec<String> = self
                .topics
                .iter()
                .map(|t| self.d.plan.address_of(t))
                .collect();
            DriverError::Timeout(format!(
                "{}: {} of {n} consumers attached a receiver to `{}` in time",
                self.label,
                self.attached(),
                to.join("`, `")
            ))
        })
    }

    /// Takes in new connections and handles what peers sent (attaches, credit, outcomes,
    /// departures). `Ready` when something happened, `Pending` when nothing is left to read.
    fn poll_service(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut any = false;
        if let Some((rx, _)) = self.incoming.as_mut() {
            while let Poll::Ready(Some(a)) = rx.poll_recv(cx) {
                self.peers.push(Peer {
                    conn: a.conn,
                    who: a.peer.to_string(),
                    alive: true,
                });
                any = true;
            }
        }
        for i in 0..self.peers.len() {
            while self.peers[i].alive {
                match self.peers[i].conn.poll_event(cx, false) {
                    Poll::Ready(Ok(e)) => {
                        self.on_event(i, e);
                        any = true;
                    }
                    Poll::Ready(Err(e)) => {
                        self.lose(i, &e, cx);
                        any = true;
                    }
                    Poll::Pending => break,
                }
            }
        }
        if any { Poll::Ready(()) } else { Poll::Pending }
    }

    fn on_event(&mut self, peer: usize, e: Event) {
        match e {
            Event::Settled { tag, outcome } => self.outcome(tag, outcome),
            Event::Attached { link, address } => {
                // A receiver of one of our topics (its address, or a `prefix*` filter).
                let mut found = false;
                for (i, t) in self.topics.iter().enumerate() {
                    if address == self.d.plan.address_of(t)
                        || super::matches(&address, &self.d.plan.address_of(t))
                    {
                        self.routes[i].links.push((peer, link));
                        found = true;
                    }
                }
                if found && !self.d.plan.settled && self.peers[peer].conn.settles(link) {
                    self.d.events.emit(
                        DriverEventKind::Warning,
                        format!(
                            "{}: {} asked for pre-settled delivery (at most once) on `{address}`: \
                             what goes to it has no outcome, and a message sent only to such \
                             receivers counts as acknowledged when sent",
                            self.label, self.peers[peer].who
                        ),
                    );
                }
                if !found {
                    let known = self.topics.join("`, `");
                    self.d.events.emit(
                        DriverEventKind::Warning,
                        format!(
                            "{}: {} attached a receiver to `{address}`, which this producer \
                             does not send (it sends `{known}`): it gets nothing",
                            self.label, self.peers[peer].who
                        ),
                    );
                }
            }
            Event::Detached { link, error } => {
                for r in &mut self.routes {
                    r.links.retain(|&l| l != (peer, link));
                }
                if let Some(e) = error {
                    let address = self.peers[peer].conn.address(link).to_string();
                    self.d.events.emit(
                        DriverEventKind::Error,
                        format!(
                            "{}: {} detached the link to `{address}`: {e}",
                            self.label, self.peers[peer].who
                        ),
                    );
                }
            }
            Event::Refused(why) => self
                .d
                .events
                .emit(DriverEventKind::Error, format!("{}: {why}", self.label)),
            Event::Delivery(_) => {}
        }
    }

    /// One outcome of an unsettled transfer.
    fn outcome(&mut self, token: u64, outcome: Outcome) {
        let i = self.pending.partition_point(|&(t, _, _)| t < token);
        let Some(entry) = self.pending.get_mut(i).filter(|e| e.0 == token) else {
            return;
        };
        let accepted = outcome == Outcome::Accepted;
        if !accepted && !self.warned {
            self.warned = true;
            self.d.events.emit(
                DriverEventKind::Warning,
                format!(
                    "{}: a consumer refused a message: {outcome:?} (further refusals are \
                     counted, not reported)",
                    self.label
                ),
            );
        }
        entry.1 = entry.1.saturating_sub(1);
        entry.2 &= accepted;
        if entry.1 == 0 {
            self.acks.push_back(Ack::One { token, ok: entry.2 });
        }
        while self.pending.front().is_some_and(|e| e.1 == 0) {
            self.pending.pop_front();
        }
    }

    /// A peer's connection ended: its links leave every route; what is unsettled is in doubt.
    fn lose(&mut self, i: usize, why: &LinkError, cx: &mut Context<'_>) {
        let p = &mut self.peers[i];
        p.alive = false;
        let _ = p.conn.poll_flush(cx);
        for r in &mut self.routes {
            r.links.retain(|&(peer, _)| peer != i);
        }
        if !self.d.registry.is_closing() {
            let who = format!("{} (peer {})", self.label, p.who);
            if matches!(why, LinkError::Closed(None)) {
                // Polite, but mid-run: what it received ends here, which the counts alone
                // would not explain.
                self.d.events.emit(
                    DriverEventKind::Warning,
                    format!("{who}: the peer closed its connection; it receives nothing more"),
                );
            } else {
                self.d.events.connection_lost(&who, &why.loss());
            }
        }
        if let Some(&(up_to, _, _)) = self.pending.back() {
            self.pending.clear();
            self.acks.push_back(Ack::InDoubt { up_to });
        }
    }

    /// Writes every connection's buffer (a failure shows up on its next read).
    async fn write_out(&mut self) {
        for p in self.peers.iter_mut().filter(|p| p.alive) {
            if p.conn.buffered() > 0 {
                let _ = p.conn.flush().await;
            }
        }
    }

    /// Waits until some link of `stream` may send (all of them for a fan-out); at most the
    /// connect timeout, then reports the stall once and fails the send as a timeout.
    async fn wait_credit(&mut self, stream: usize) -> Result<(), DriverError> {
        self.write_out().await;
        let limit = self.d.timeout;
        let ready = |s: &Self| {
            let r = &s.routes[stream];
            let ok = |&(p, l): &(usize, LinkId)| s.peers[p].conn.can_send(l);
            !r.links.is_empty()
                && if r.fan_out {
                    r.links.iter().all(ok)
                } else {
                    r.links.iter().any(ok)
                }
        };
        let waited = tokio::time::timeout(
            limit,
            std::future::poll_fn(|cx| {
                loop {
                    if ready(self) {
                        return Poll::Ready(Ok(()));
                    }
                    if self.routes[stream].links.is_empty() && self.incoming.is_none() {
                        return Poll::Ready(Err(()));
                    }
                    // Credit comes in flow frames, which are no events: reading them to the
                    // end leaves `poll_service` pending with the credit already there.
                    let more = self.poll_service(cx);
                    if ready(self) {
                        return Poll::Ready(Ok(()));
                    }
                    if more.is_pending() {
                        return Poll::Pending;
                    }
                }
            }),
        )
        .await;
        match waited {
            Ok(Ok(())) => {
                if self.stalled {
                    self.stalled = false;
                    self.d.events.emit(
                        DriverEventKind::Warning,
                        format!("{}: credit came again, sending resumes", self.label),
                    );
                }
                Ok(())
            }
            Ok(Err(())) => Err(DriverError::Send(format!(
                "{}: no consumer of `{}` is connected any more",
                self.label, self.topics[stream]
            ))),
            Err(_) => {
                let who: Vec<String> = self.routes[stream]
                    .links
                    .iter()
                    .filter(|&&(p, l)| !self.peers[p].conn.can_send(l))
                    .map(|&(p, l)| {
                        let c = &self.peers[p].conn;
                        format!("{} {}", self.peers[p].who, c.blocked_by(l))
                    })
                    .collect();
                let why = if who.is_empty() {
                    format!("no consumer of `{}` attached", self.topics[stream])
                } else {
                    who.join(", ")
                };
                if !self.stalled {
                    self.stalled = true;
                    self.d.events.emit(
                        DriverEventKind::Warning,
                        format!(
                            "{}: stalled: {why} for {limit:?}; every send that waits that long \
                             fails (the message is not sent)",
                            self.label
                        ),
                    );
                }
                Err(DriverError::Send(format!(
                    "{}: {why} for {limit:?}",
                    self.label
                )))
            }
        }
    }
}

impl Producer for P2pProducer {
    async fn send(&mut self, msg: Outbound<'_>) -> Result<(), DriverError> {
        let s = msg.stream as usize;
        if s >= self.routes.len() {
            return Err(DriverError::Config(format!("stream {s} has no route")));
        }
        self.until_service -= 1;
        if self.until_service == 0 {
            self.until_service = SERVICE_EVERY;
            std::future::poll_fn(|cx| {
                while self.poll_service(cx).is_ready() {}
                Poll::Ready(())
            })
            .await;
        }
        let out = OutMessage {
            meta: msg.meta,
            body: OutBody::Data(msg.payload),
            durable: self.d.plan.durable,
        };
        let r = &self.routes[s];
        let ok = |&(p, l): &(usize, LinkId)| self.peers[p].conn.can_send(l);
        let ready = !r.links.is_empty()
            && if r.fan_out {
                r.links.iter().all(ok)
            } else {
                r.links.iter().any(ok)
            };
        if !ready {
            self.wait_credit(s).await?;
        }
        let r = &mut self.routes[s];
        // Links it went on, and those of them whose outcome will come (a receiver may have
        // asked for pre-settled delivery).
        let (mut sent, mut unsettled) = (0u32, 0u32);
        if r.fan_out {
            for &(p, l) in &r.links {
                self.peers[p].conn.send(l, msg.token, &out);
                sent += 1;
                unsettled += u32::from(!self.peers[p].conn.settles(l));
            }
        } else {
            let n = r.links.len();
            for k in 0..n {
                let (p, l) = r.links[(r.next + k) % n];
                if self.peers[p].conn.can_send(l) {
                    self.peers[p].conn.send(l, msg.token, &out);
                    r.next = (r.next + k + 1) % n;
                    sent = 1;
                    unsettled = u32::from(!self.peers[p].conn.settles(l));
                    break;
                }
            }
        }
        if !self.d.plan.settled && unsettled > 0 {
            self.pending.push_back((msg.token, unsettled, true));
        } else if !self.d.plan.settled && sent > 0 {
            self.acks.push_back(Ack::One {
                token: msg.token,
                ok: true,
            });
        }
        let links = &self.routes[s].links;
        for &(p, _) in links {
            if self.peers[p].conn.buffered() >= CHUNK {
                let _ = self.peers[p].conn.flush().await;
            }
        }
        Ok(())
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
            if self.poll_service(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }

    /// Writes what is left, detaches every link and closes every connection (each waits at
    /// most the connect timeout for the peer's close).
    async fn close(mut self) -> Result<(), DriverError> {
        self.d.registry.set_closing();
        self.write_out().await;
        let t = self.d.timeout;
        let links: Vec<(usize, LinkId)> = self
            .routes
            .iter()
            .flat_map(|r| r.links.iter().copied())
            .collect();
        for (p, l) in links {
            if self.peers[p].alive && self.peers[p].conn.is_open(l) {
                self.peers[p].conn.detach(l, t).await;
            }
        }
        for p in self.peers.drain(..).filter(|p| p.alive) {
            p.conn.close(t).await;
        }
        if let Some((_, task)) = self.incoming.take() {
            task.abort();
        }
        Ok(())
    }
}
