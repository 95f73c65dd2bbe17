//! The sending side: a PUSH socket (one per topic) or a PUB socket, over our own connections.
//!
//! Messages are encoded straight into each peer's write buffer, and written when it holds
//! [`WRITE_AT`] bytes, when the peer reaches its high-water mark, and whenever the runner is
//! about to wait ([`OutSock::service`]): one `write` carries many messages at full rate, and a
//! paced message leaves at once. Nothing is allocated per message.
//!
//! **High-water mark** (`sndhwm`, ZeroMQ's `ZMQ_SNDHWM`): at most that many messages wait in the
//! generator for one peer, not yet taken by its socket. A PUSH socket then gives the message to
//! the next peer with room (round robin), or waits when none has any; a PUB socket waits for
//! that subscriber (`onhwm=wait`, the default) or drops the message for it (`onhwm=drop`, what
//! libzmq's PUB does), counted and reported.

use crate::conn::{self, ConnError};
use crate::links::{Ctx, Link, Links};
use crate::options::{Endpoint, OnHwm};
use crate::zmtp::{self, SocketType, Subscription, Unit};
use bytes::Bytes;
use msgbench_core::driver::{DriverError, DriverEventKind};
use std::future::poll_fn;
use std::task::{Context, Poll};
use tokio::time::Instant;

/// A peer's write buffer is written once it holds this many bytes.
pub const WRITE_AT: usize = 64 * 1024;

/// One connection of a sending socket.
struct OutPeer {
    conn: conn::Conn,
    dialled: Option<Endpoint>,
    /// Messages appended to the write buffer since it was last empty.
    queued: u32,
    /// PUB: the prefixes subscribed to, each with how many times (ZeroMQ subscriptions count).
    subs: Vec<(Bytes, u32)>,
    /// PUB: by stream, whether the socket's topic matches a subscription.
    wants: Vec<bool>,
}

impl OutPeer {
    fn resubscribe(&mut self, topics: &[Bytes]) {
        self.wants = topics
            .iter()
            .map(|t| self.subs.iter().any(|(p, _)| t.starts_with(p)))
            .collect();
    }

    fn take(&mut self, topics: &[Bytes], unit: &Unit) {
        if zmtp::pong(unit, &mut self.conn.wbuf) {
            return;
        }
        match zmtp::subscription(unit) {
            Some(Subscription::Subscribe(p)) => {
                match self.subs.iter_mut().find(|(s, _)| *s == p) {
                    Some((_, n)) => *n += 1,
                    None => self.subs.push((p, 1)),
                }
                self.resubscribe(topics);
            }
            Some(Subscription::Cancel(p)) => {
                if let Some(i) = self.subs.iter().position(|(s, _)| *s == p) {
                    self.subs[i].1 -= 1;
                    if self.subs[i].1 == 0 {
                        self.subs.swap_remove(i);
                    }
                }
                self.resubscribe(topics);
            }
            None => {}
        }
    }
}

/// A PUSH or PUB socket: its connections, and where new ones arrive.
pub struct OutSock {
    peers: Vec<OutPeer>,
    /// Round robin position (PUSH).
    next: usize,
    links: Links,
    /// PUB: the topic frame of each stream.
    topics: Vec<Bytes>,
    hwm: u32,
    onhwm: OnHwm,
    /// PUB: messages dropped at the high-water mark.
    pub dropped: u64,
}

impl OutSock {
    /// A socket with no connections yet; `topics` are a PUB socket's topic frames by stream.
    pub fn new(ours: SocketType, topics: Vec<Bytes>, hwm: u32, onhwm: OnHwm, ctx: Ctx) -> Self {
        OutSock {
            peers: Vec::new(),
            next: 0,
            links: Links::new(ours, Vec::new(), ctx),
            topics,
            hwm,
            onhwm,
            dropped: 0,
        }
    }

    /// Dials `ep` (retrying until `deadline` while nothing listens) and takes the connection.
    ///
    /// # Errors
    /// [`DriverError::Connect`].
    pub async fn connect(&mut self, ep: &Endpoint, deadline: Instant) -> Result<(), DriverError> {
        let conn = conn::dial(ep, self.links.dialer().ours, &[], deadline).await?;
        self.admit(Link {
            conn,
            dialled: Some(ep.clone()),
        });
        Ok(())
    }

    /// Binds `ep` and accepts peers from now on; returns the endpoint bound.
    ///
    /// # Errors
    /// [`DriverError::Connect`] when it cannot bind.
    pub async fn bind(&mut self, ep: &Endpoint) -> Result<Endpoint, DriverError> {
        self.links.bind(ep).await
    }

    fn admit(&mut self, link: Link) {
        let mut p = OutPeer {
            conn: link.conn,
            dialled: link.dialled,
            queued: 0,
            subs: Vec::new(),
            wants: Vec::new(),
        };
        p.resubscribe(&self.topics);
        self.peers.push(p);
    }

    /// Drops peer `i` after `e`, reports it, and dials it again if it was dialled.
    fn lose(&mut self, i: usize, e: &ConnError) {
        let p = self.peers.swap_remove(i);
        self.links.ctx().peer_left(&p.conn.peer.to_string(), e);
        self.links.dial_again(p.dialled);
    }

    /// Takes in new connections and whatever peers sent (subscriptions, heartbeats, their
    /// end), and writes what is buffered as far as the sockets take it, all without waiting.
    pub fn service(&mut self) {
        while let Some(link) = self.links.try_recv() {
            self.admit(link);
        }
        let mut i = 0;
        while i < self.peers.len() {
            let p = &mut self.peers[i];
            let r = loop {
                match p.conn.try_unit() {
                    Ok(Some(u)) => p.take(&self.topics, &u),
                    Ok(None) => break p.conn.try_flush().map_err(ConnError::from),
                    Err(e) => break Err(e),
                }
            };
            match r {
                Ok(empty) => {
                    if empty {
                        p.queued = 0;
                    }
                    i += 1;
                }
                Err(e) => self.lose(i, &e),
            }
        }
    }

    /// Peers that count as ready: connected (PUSH), or subscribed to something (PUB).
    fn ready_peers(&self) -> usize {
        match self.links.dialer().ours {
            SocketType::Pub => self.peers.iter().filter(|p| !p.subs.is_empty()).count(),
            _ => self.peers.len(),
        }
    }

    /// Waits until `n` peers are ready (see [`OutSock::ready_peers`]): only then can the first
    /// message reach all of them.
    ///
    /// # Errors
    /// [`DriverError::Timeout`] at `deadline`, saying how many were missing.
    pub async fn wait_ready(&mut self, n: usize, deadline: Instant) -> Result<(), DriverError> {
        loop {
            self.service();
            let have = self.ready_peers();
            if have >= n {
                return Ok(());
            }
            let woke = tokio::time::timeout_at(deadline, poll_fn(|cx| self.poll_activity(cx)));
            if woke.await.is_err() {
                let what = if self.links.dialer().ours == SocketType::Pub {
                    "subscriptions arrived"
                } else {
                    "consumers connected"
                };
                let ctx = self.links.ctx();
                return Err(DriverError::Timeout(format!(
                    "{}: {have} of {n} {what} before the connect timeout{}",
                    ctx.who,
                    ctx.waited_in_vain()
                )));
            }
        }
    }

    /// Ready when a connection arrived or a peer sent something.
    fn poll_activity(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let Poll::Ready(Some(link)) = self.links.poll_recv(cx) {
            self.admit(link);
            return Poll::Ready(());
        }
        if self
            .peers
            .iter()
            .any(|p| p.conn.poll_read_ready(cx).is_ready())
        {
            return Poll::Ready(());
        }
        Poll::Pending
    }

    /// Writes peer `i`'s buffer as far as its socket takes it now; false if the peer was lost.
    #[inline]
    fn write_some(&mut self, i: usize) -> bool {
        match self.peers[i].conn.try_flush() {
            Ok(empty) => {
                if empty {
                    self.peers[i].queued = 0;
                }
                true
            }
            Err(e) => {
                self.lose(i, &e.into());
                false
            }
        }
    }

    /// PUSH: hands `payload` to the next peer with room, waiting when none has any.
    ///
    /// # Errors
    /// [`DriverError::Send`] when no peer is left and none came back within the connect timeout.
    pub async fn push(&mut self, payload: &[u8]) -> Result<(), DriverError> {
        loop {
            let n = self.peers.len();
            for k in 0..n {
                let i = (self.next + k) % n;
                let p = &mut self.peers[i];
                if p.queued < self.hwm {
                    zmtp::put_frame(&mut p.conn.wbuf, false, payload);
                    p.queued += 1;
                    self.next = i + 1;
                    if p.conn.wbuf.len() >= WRITE_AT || p.queued >= self.hwm {
                        self.write_some(i);
                    }
                    return Ok(());
                }
            }
            self.wait_room(None).await?;
        }
    }

    /// PUB: writes `payload` under the topic of `stream` to every subscriber of it; at a
    /// subscriber's high-water mark, waits for it or drops the message for it (`onhwm`).
    ///
    /// # Errors
    /// [`DriverError::Config`] for a stream this socket has no topic for.
    pub async fn publish(&mut self, stream: usize, payload: &[u8]) -> Result<(), DriverError> {
        if stream >= self.topics.len() {
            return Err(DriverError::Config(format!(
                "stream {stream} is not one of this producer's topics"
            )));
        }
        let mut i = 0;
        while i < self.peers.len() {
            if !self.peers[i].wants[stream] {
                i += 1;
                continue;
            }
            if self.peers[i].queued >= self.hwm {
                if !self.write_some(i) {
                    continue;
                }
                if self.peers[i].queued >= self.hwm {
                    match self.onhwm {
                        OnHwm::Drop => {
                            if self.dropped == 0 {
                                let ctx = self.links.ctx();
                                ctx.events.emit(
                                    DriverEventKind::Warning,
                                    format!(
                                        "{}: the subscriber at {} has {} messages waiting \
                                         (sndhwm): messages for it are dropped (onhwm=drop) \
                                         and counted as lost",
                                        ctx.who, self.peers[i].conn.peer, self.hwm
                                    ),
                                );
                            }
                            self.dropped += 1;
                            i += 1;
                            continue;
                        }
                        OnHwm::Wait => {
                            if !self.wait_room(Some(i)).await? {
                                continue;
                            }
                        }
                    }
                }
            }
            let p = &mut self.peers[i];
            zmtp::put_frame(&mut p.conn.wbuf, true, &self.topics[stream]);
            zmtp::put_frame(&mut p.conn.wbuf, false, payload);
            p.queued += 1;
            if (p.conn.wbuf.len() >= WRITE_AT || p.queued >= self.hwm) && !self.write_some(i) {
                continue;
            }
            i += 1;
        }
        Ok(())
    }

    /// Waits for room: peer `only`'s buffer written out (false if that peer was lost instead),
    /// or, with `None`, any peer's buffer written out or a new peer.
    async fn wait_room(&mut self, only: Option<usize>) -> Result<bool, DriverError> {
        if self.peers.is_empty() {
            let within = self.links.ctx().attempt;
            return match self.links.recv_within(within).await {
                Some(link) => {
                    self.admit(link);
                    Ok(true)
                }
                None => Err(DriverError::Send(format!(
                    "{}: no consumer is connected, and none came within {within:?}",
                    self.links.ctx().who
                ))),
            };
        }
        poll_fn(|cx| {
            if only.is_none()
                && let Poll::Ready(Some(link)) = self.links.poll_recv(cx)
            {
                self.admit(link);
                return Poll::Ready(Ok(true));
            }
            let range = match only {
                Some(i) => i..i + 1,
                None => 0..self.peers.len(),
            };
            for i in range {
                match self.peers[i].conn.poll_flush(cx) {
                    Poll::Ready(Ok(())) => {
                        self.peers[i].queued = 0;
                        return Poll::Ready(Ok(true));
                    }
                    Poll::Ready(Err(e)) => {
                        self.lose(i, &e.into());
                        return Poll::Ready(Ok(only.is_none()));
                    }
                    Poll::Pending => {}
                }
            }
            Poll::Pending
        })
        .await
    }

    /// Writes everything buffered, waiting for the sockets, until `until`; false if some was
    /// left unwritten (a consumer that stopped reading).
    pub async fn flush(&mut self, until: Instant) -> bool {
        let all = poll_fn(|cx| {
            let mut pending = false;
            let mut i = 0;
            while i < self.peers.len() {
                match self.peers[i].conn.poll_flush(cx) {
                    Poll::Ready(Ok(())) => {
                        self.peers[i].queued = 0;
                        i += 1;
                    }
                    Poll::Ready(Err(e)) => self.lose(i, &e.into()),
                    Poll::Pending => {
                        pending = true;
                        i += 1;
                    }
                }
            }
            if pending {
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        });
        tokio::time::timeout_at(until, all).await.is_ok()
    }

    /// Writes what is buffered (until `until`), then ends every connection in order and stops
    /// accepting; false if something was left unwritten.
    pub async fn close(mut self, until: Instant) -> bool {
        self.links.stop();
        let mut all = true;
        for p in self.peers.drain(..) {
            all &= p.conn.close(until).await;
        }
        all
    }
}
