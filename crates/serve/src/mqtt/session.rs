//! Sessions: what outlives a connection (subscriptions, messages queued while offline, pending
//! incoming QoS 2 ids) and the client-id registry that performs session takeover.
//!
//! Lock order, everywhere: registry → subscription table → a session's `filters` → a session's
//! `sink`. Route building takes table → sink; nothing takes sink → table.

use super::router::Router;
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// Locks, ignoring poisoning (every critical section leaves its data consistent).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An application message on its way to one subscriber.
#[derive(Debug, Clone)]
pub(crate) struct Msg {
    pub topic: Bytes,
    pub payload: Bytes,
    /// Delivery QoS (already lowered to the subscription's).
    pub qos: u8,
    pub retain: bool,
    /// MQTT 5 properties, sent to MQTT 5 subscribers (shared, never pinning a read buffer).
    pub props: Option<Arc<super::wire::Props>>,
}

impl Msg {
    /// A copy that does not share (and so does not keep alive) the read buffer the message was
    /// parsed from: for messages kept while a session is offline, which can stay for long and
    /// be a sparse selection of what the publisher sent.
    fn unpinned(self) -> Msg {
        Msg {
            topic: Bytes::copy_from_slice(&self.topic),
            payload: Bytes::copy_from_slice(&self.payload),
            ..self
        }
    }
}

/// A QoS ≥ 1 delivery to a persistent session's client that the client has not acknowledged:
/// sent again, with its packet id, when the session resumes on a new connection
/// [MQTT-4.4.0-1].
#[derive(Debug, Clone)]
pub(crate) enum Unacked {
    /// PUBLISH sent, no PUBACK or PUBREC yet: sent again with DUP set.
    Publish(u16, Msg),
    /// QoS 2 past PUBREC (PUBREL sent, no PUBCOMP yet): the PUBREL is sent again.
    Released(u16),
}

impl Unacked {
    /// Its packet id.
    pub fn pid(&self) -> u16 {
        match self {
            Unacked::Publish(pid, _) | Unacked::Released(pid) => *pid,
        }
    }

    /// Whether it is still a PUBLISH (not yet received by the client).
    #[cfg(test)]
    pub fn is_publish(&self) -> bool {
        matches!(self, Unacked::Publish(..))
    }
}

/// What a connection's writer sends, in queue order.
#[derive(Debug)]
pub(crate) enum Out {
    /// A PUBLISH; the writer assigns the packet id.
    Pub(Msg),
    /// PUBACK / PUBREC / PUBREL / PUBCOMP (header byte, packet id).
    Ack(u8, u16),
    /// A pre-encoded control packet (SUBACK, UNSUBACK, PINGRESP).
    Raw(Bytes),
}

/// Where a session's messages go now.
pub(crate) enum Sink {
    /// Connected: the connection's outbound queue.
    Live(mpsc::Sender<Out>),
    /// A persistent session without a connection: QoS ≥ 1 messages wait here.
    Offline(VecDeque<Msg>),
    /// Ended: messages are dropped.
    Gone,
}

/// Received QoS 2 packet ids waiting for their PUBREL (one bit per id).
pub(crate) struct PidBits(Box<[u64; 1024]>);

impl PidBits {
    pub fn new() -> PidBits {
        PidBits(Box::new([0; 1024]))
    }
    pub fn contains(&self, pid: u16) -> bool {
        self.0[usize::from(pid / 64)] & (1 << (pid % 64)) != 0
    }
    pub fn insert(&mut self, pid: u16) {
        self.0[usize::from(pid / 64)] |= 1 << (pid % 64);
    }
    pub fn remove(&mut self, pid: u16) {
        self.0[usize::from(pid / 64)] &= !(1 << (pid % 64));
    }
}

/// One client session.
pub(crate) struct Session {
    /// Unique per session (never reused), the key for de-duplicating deliveries.
    pub id: u64,
    /// How long it outlives its connection, seconds (0: it ends with it; `u32::MAX`: never
    /// expires): the session expiry interval of the CONNECT that last took it.
    expiry_s: AtomicU32,
    /// Messages kept while offline, at most.
    depth: usize,
    pub sink: Mutex<Sink>,
    /// The session's subscriptions as subscribed (`$share/...` included) → granted QoS.
    pub filters: Mutex<HashMap<String, u8>>,
    /// Incoming QoS 2 ids awaiting PUBREL, while no connection holds them.
    qos2: Mutex<Option<PidBits>>,
    /// Deliveries the client had not acknowledged when its last connection ended.
    unacked: Mutex<VecDeque<Unacked>>,
    /// Connections that resumed this session (CONNECT with session present = 1): a delayed
    /// will is not published once it changed.
    pub resumed: AtomicU64,
    /// Set when the session ends (discarded by a clean start, expired, or without expiry at
    /// its connection's end): a delayed will goes out then, if its delay has not passed.
    pub ended: watch::Sender<bool>,
}

impl Session {
    /// The live queue, if connected.
    pub fn live_tx(&self) -> Option<mpsc::Sender<Out>> {
        match &*lock(&self.sink) {
            Sink::Live(tx) if !tx.is_closed() => Some(tx.clone()),
            _ => None,
        }
    }

    /// Delivers through the session's current sink: the path for offline sessions and for
    /// messages whose cached queue turned out to be closed.
    pub async fn deliver_slow(&self, mut msg: Msg) {
        loop {
            let tx = match &mut *lock(&self.sink) {
                Sink::Live(tx) if !tx.is_closed() => tx.clone(),
                // A connection on its way out; its cleanup switches the sink under this lock.
                Sink::Live(_) | Sink::Gone => return,
                Sink::Offline(q) => {
                    if msg.qos > 0 && q.len() < self.depth {
                        q.push_back(msg.unpinned());
                    }
                    return;
                }
            };
            match tx.send(Out::Pub(msg)).await {
                Ok(()) => return,
                // Closed meanwhile: the sink has changed (or the message is dropped next round).
                Err(mpsc::error::SendError(Out::Pub(m))) => msg = m,
                Err(_) => return,
            }
        }
    }
}

/// Per-connection control: `close` asks the connection to end, `done` says it has detached.
pub(crate) struct ConnCtl {
    pub close: watch::Sender<bool>,
    pub done: watch::Sender<bool>,
    /// Set before `close` when another connection took the session over (an MQTT 5 client is
    /// then told so: DISCONNECT 0x8E).
    pub taken_over: std::sync::atomic::AtomicBool,
}

impl ConnCtl {
    pub fn new() -> ConnCtl {
        ConnCtl {
            close: watch::Sender::new(false),
            done: watch::Sender::new(false),
            taken_over: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Closes the connection because another one takes its session.
    fn take_over(&self) {
        self.taken_over.store(true, Relaxed);
        self.close.send_replace(true);
    }
}

impl Session {
    /// How long the session outlives its connection, seconds (`u32::MAX`: for good).
    pub fn expiry_s(&self) -> u32 {
        self.expiry_s.load(Relaxed)
    }

    /// Sets the session expiry interval from an MQTT 5 DISCONNECT (it replaces the
    /// CONNECT's, and holds from the end of the connection on).
    pub fn set_expiry_s(&self, expiry_s: u32) {
        self.expiry_s.store(expiry_s, Relaxed);
    }
}

struct Entry {
    session: Arc<Session>,
    live: Option<(u64, Arc<ConnCtl>)>,
    /// When an offline session ends (`None`: never, or online).
    expires_at: Option<Instant>,
}

impl Entry {
    fn expired(&self, now: Instant) -> bool {
        self.live.is_none() && self.expires_at.is_some_and(|t| t <= now)
    }
}

/// Client id → session.
pub(crate) struct Sessions {
    map: Mutex<HashMap<String, Entry>>,
    next_id: AtomicU64,
    depth: usize,
    /// When offline sessions are next looked at for expiry (at most once a second, as clients
    /// connect and disconnect).
    next_sweep: Mutex<Instant>,
}

/// A connection's share of its session after CONNECT.
pub(crate) struct Attached {
    pub session: Arc<Session>,
    pub present: bool,
    /// Deliveries the last connection left unacknowledged, to send again first.
    pub unacked: VecDeque<Unacked>,
    /// Messages queued while offline, to send before anything else.
    pub backlog: VecDeque<Msg>,
    pub qos2: Option<PidBits>,
}

impl Sessions {
    pub fn new(depth: usize) -> Sessions {
        Sessions {
            map: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            depth,
            next_sweep: Mutex::new(Instant::now()),
        }
    }

    /// Ends the offline sessions whose expiry passed (their subscriptions stop taking
    /// messages), at most once a second.
    fn sweep(&self, router: &Router, map: &mut HashMap<String, Entry>, now: Instant) {
        {
            let mut next = lock(&self.next_sweep);
            if now < *next {
                return;
            }
            *next = now + Duration::from_secs(1);
        }
        map.retain(|_, e| {
            let keep = !e.expired(now);
            if !keep {
                router.drop_session(&e.session);
                e.session.ended.send_replace(true);
            }
            keep
        });
    }

    /// Binds connection `conn` (queue `tx`) to the session of `client_id`, closing any connection
    /// holding it first and waiting (up to 5 s) for that one to detach, so its queued messages
    /// are kept in order. `clean` discards an existing session; `expiry_s` is how long the
    /// session is to outlive this connection (see [`Session::expiry_s`]).
    #[allow(clippy::too_many_arguments)]
    pub async fn attach(
        &self,
        router: &Router,
        client_id: &str,
        clean: bool,
        expiry_s: u32,
        conn: u64,
        ctl: Arc<ConnCtl>,
        tx: mpsc::Sender<Out>,
    ) -> Attached {
        for _ in 0..3 {
            let holder = lock(&self.map)
                .get(client_id)
                .and_then(|e| e.live.as_ref().map(|(_, c)| c.clone()));
            let Some(holder) = holder else { break };
            holder.take_over();
            let mut done = holder.done.subscribe();
            let _ = tokio::time::timeout(Duration::from_secs(5), done.wait_for(|d| *d)).await;
        }
        let mut map = lock(&self.map);
        let now = Instant::now();
        self.sweep(router, &mut map, now);
        if let Some((_, old)) = map.get_mut(client_id).and_then(|e| e.live.take()) {
            // Did not detach in time: it will find itself replaced and leave the session alone.
            old.take_over();
        }
        let (session, present) = match map.remove(client_id) {
            Some(e) if !clean && e.session.expiry_s() > 0 && !e.expired(now) => {
                e.session.expiry_s.store(expiry_s, Relaxed);
                (e.session, true)
            }
            old => {
                if let Some(e) = old {
                    router.drop_session(&e.session);
                    e.session.ended.send_replace(true);
                }
                let s = Arc::new(Session {
                    id: self.next_id.fetch_add(1, Relaxed),
                    expiry_s: AtomicU32::new(expiry_s),
                    depth: self.depth,
                    sink: Mutex::new(Sink::Gone),
                    filters: Mutex::new(HashMap::new()),
                    qos2: Mutex::new(None),
                    unacked: Mutex::new(VecDeque::new()),
                    resumed: AtomicU64::new(0),
                    ended: watch::Sender::new(false),
                });
                (s, false)
            }
        };
        let backlog = match std::mem::replace(&mut *lock(&session.sink), Sink::Live(tx)) {
            Sink::Offline(q) => q,
            _ => VecDeque::new(),
        };
        let qos2 = lock(&session.qos2).take();
        let unacked = std::mem::take(&mut *lock(&session.unacked));
        if present {
            session.resumed.fetch_add(1, Relaxed);
        }
        map.insert(
            client_id.to_string(),
            Entry {
                session: session.clone(),
                live: Some((conn, ctl)),
                expires_at: None,
            },
        );
        drop(map);
        router.invalidate();
        Attached {
            session,
            present,
            unacked,
            backlog,
            qos2,
        }
    }

    /// Unbinds connection `conn` after its reader and writer stopped. A session with an expiry
    /// goes offline until it passes, keeping what its client had not acknowledged
    /// (`unacked`) and the QoS ≥ 1 messages still in `rx`; one without ends. Does nothing to a
    /// session another connection has taken over.
    #[allow(clippy::too_many_arguments)]
    pub fn detach(
        &self,
        router: &Router,
        client_id: &str,
        conn: u64,
        session: &Arc<Session>,
        rx: Option<mpsc::Receiver<Out>>,
        qos2: Option<PidBits>,
        unacked: VecDeque<Unacked>,
    ) {
        let mut map = lock(&self.map);
        let Some(entry) = map.get_mut(client_id) else {
            return;
        };
        if entry.live.as_ref().is_none_or(|(c, _)| *c != conn) {
            return;
        }
        entry.live = None;
        let expiry_s = session.expiry_s();
        if expiry_s > 0 {
            entry.expires_at = (expiry_s != u32::MAX)
                .then(|| Instant::now() + Duration::from_secs(u64::from(expiry_s)));
            *lock(&session.qos2) = qos2;
            *lock(&session.unacked) = unacked
                .into_iter()
                .map(|u| match u {
                    Unacked::Publish(pid, m) => Unacked::Publish(pid, m.unpinned()),
                    released => released,
                })
                .collect();
            let mut sink = lock(&session.sink);
            let mut q = VecDeque::new();
            if let Some(mut rx) = rx {
                // Under the sink lock: publishers that find the queue closed retry through the
                // sink and queue behind these.
                rx.close();
                while let Ok(out) = rx.try_recv() {
                    if let Out::Pub(m) = out
                        && m.qos > 0
                        && q.len() < self.depth
                    {
                        q.push_back(m.unpinned());
                    }
                }
            }
            *sink = Sink::Offline(q);
        } else {
            map.remove(client_id);
            router.drop_session(session);
            session.ended.send_replace(true);
        }
        drop(map);
        router.invalidate();
    }
}
