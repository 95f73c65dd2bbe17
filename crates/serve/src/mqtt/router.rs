//! The subscription table, the topic → recipients cache that makes routing a hash lookup, and
//! retained messages.
//!
//! The table changes on subscribe, unsubscribe, connect and disconnect; each change bumps a
//! generation counter. A cached route remembers the generation it was built at and is rebuilt
//! when that is no longer current, so the hot path is: read-lock the cache, hash the topic,
//! clone an `Arc`.

use super::session::{Msg, Out, Session, lock};
use super::wire::Props;
use bytes::Bytes;
use msgbench_driver_mqtt::codec::topic_matches;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use tokio::sync::mpsc;

/// Cached routes kept at most (a broker seeing more distinct topics rebuilds more often).
const CACHE_MAX: usize = 65_536;

fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A subscription filter, split into share group and filter; `None` if invalid.
pub(crate) fn parse_filter(raw: &str) -> Option<(Option<&str>, &str)> {
    let (group, filter) = match raw.strip_prefix("$share/") {
        Some(rest) => {
            let (g, f) = rest.split_once('/')?;
            if g.is_empty() || g.contains(['+', '#']) {
                return None;
            }
            (Some(g), f)
        }
        None => (None, raw),
    };
    if filter.is_empty() || filter.contains('\0') {
        return None;
    }
    let mut levels = filter.split('/').peekable();
    while let Some(level) = levels.next() {
        let ok = match level {
            "#" => levels.peek().is_none(),
            "+" => true,
            l => !l.contains(['+', '#']),
        };
        if !ok {
            return None;
        }
    }
    Some((group, filter))
}

/// Whether a PUBLISH topic name is valid: non-empty UTF-8 without wildcards or NUL.
pub(crate) fn valid_topic(topic: &[u8]) -> bool {
    !topic.is_empty()
        && !topic.iter().any(|c| matches!(c, b'+' | b'#' | 0))
        && std::str::from_utf8(topic).is_ok()
}

/// MQTT 5 subscription options beyond QoS (3.1.1: both off).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SubOpts {
    /// Not to the session that published the message.
    pub no_local: bool,
    /// Keep the retain flag of live deliveries as published (else 0).
    pub retain_as_published: bool,
}

/// An application message entering the broker: from a PUBLISH, or a will.
pub(crate) struct Publication {
    pub topic: Bytes,
    pub payload: Bytes,
    pub qos: u8,
    pub retain: bool,
    /// MQTT 5 properties forwarded with it.
    pub props: Option<Arc<Props>>,
    /// The publishing session (for no local).
    pub from: u64,
}

struct Sub {
    session: Arc<Session>,
    qos: u8,
    opts: SubOpts,
}

struct Group {
    name: String,
    members: Vec<Sub>,
    next: Arc<AtomicUsize>,
}

/// Everything subscribed to one filter.
#[derive(Default)]
struct Node {
    subs: Vec<Sub>,
    groups: Vec<Group>,
}

impl Node {
    fn is_empty(&self) -> bool {
        self.subs.is_empty() && self.groups.is_empty()
    }
}

fn upsert(list: &mut Vec<Sub>, session: &Arc<Session>, qos: u8, opts: SubOpts) {
    match list.iter_mut().find(|s| s.session.id == session.id) {
        Some(s) => (s.qos, s.opts) = (qos, opts),
        None => list.push(Sub {
            session: session.clone(),
            qos,
            opts,
        }),
    }
}

#[derive(Default)]
struct Table {
    /// Filters without wildcards, looked up by topic.
    exact: HashMap<String, Node>,
    /// Filters with `+` or `#`, matched one by one when a route is built.
    wild: HashMap<String, Node>,
}

impl Table {
    fn node(&mut self, filter: &str) -> &mut Node {
        let map = if filter.contains(['+', '#']) {
            &mut self.wild
        } else {
            &mut self.exact
        };
        map.entry(filter.to_string()).or_default()
    }

    fn remove(&mut self, raw: &str, session_id: u64) {
        let Some((group, filter)) = parse_filter(raw) else {
            return;
        };
        let map = if filter.contains(['+', '#']) {
            &mut self.wild
        } else {
            &mut self.exact
        };
        let Some(node) = map.get_mut(filter) else {
            return;
        };
        match group {
            None => node.subs.retain(|s| s.session.id != session_id),
            Some(name) => {
                if let Some(g) = node.groups.iter_mut().find(|g| g.name == name) {
                    g.members.retain(|s| s.session.id != session_id);
                }
                node.groups.retain(|g| !g.members.is_empty());
            }
        }
        if node.is_empty() {
            map.remove(filter);
        }
    }

    fn build(&self, topic: &[u8], generation: u64) -> Route {
        let mut route = Route {
            generation,
            plain: Vec::new(),
            groups: Vec::new(),
        };
        let mut seen: HashMap<u64, usize> = HashMap::new();
        let mut visit = |node: &Node| {
            for s in &node.subs {
                match seen.entry(s.session.id) {
                    Entry::Occupied(i) => {
                        // One copy for overlapping subscriptions: the highest QoS, kept from
                        // the publisher only if every one says no local, its retain flag if
                        // any says so.
                        let t = &mut route.plain[*i.get()];
                        t.qos = t.qos.max(s.qos);
                        t.opts.no_local &= s.opts.no_local;
                        t.opts.retain_as_published |= s.opts.retain_as_published;
                    }
                    Entry::Vacant(v) => {
                        v.insert(route.plain.len());
                        route.plain.push(Target::new(s));
                    }
                }
            }
            for g in &node.groups {
                route.groups.push(RouteGroup {
                    next: g.next.clone(),
                    members: g.members.iter().map(Target::new).collect(),
                });
            }
        };
        if let Some(node) = std::str::from_utf8(topic)
            .ok()
            .and_then(|t| self.exact.get(t))
        {
            visit(node);
        }
        for (filter, node) in &self.wild {
            if topic_matches(filter.as_bytes(), topic) {
                visit(node);
            }
        }
        route
    }
}

/// One recipient in a route, with its queue as of when the route was built.
pub(crate) struct Target {
    session: Arc<Session>,
    tx: Option<mpsc::Sender<Out>>,
    qos: u8,
    opts: SubOpts,
}

impl Target {
    fn new(s: &Sub) -> Target {
        Target {
            session: s.session.clone(),
            tx: s.session.live_tx(),
            qos: s.qos,
            opts: s.opts,
        }
    }

    fn is_live(&self) -> bool {
        self.tx.as_ref().is_some_and(|tx| !tx.is_closed())
    }

    async fn deliver(&self, msg: Msg) {
        let msg = match &self.tx {
            Some(tx) => match tx.send(Out::Pub(msg)).await {
                Ok(()) => return,
                Err(mpsc::error::SendError(Out::Pub(m))) => m,
                Err(_) => return,
            },
            None => msg,
        };
        self.session.deliver_slow(msg).await;
    }
}

struct RouteGroup {
    next: Arc<AtomicUsize>,
    members: Vec<Target>,
}

impl RouteGroup {
    /// The next member round robin, skipping members without a connection if any has one.
    fn pick(&self) -> &Target {
        let n = self.members.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|k| &self.members[(start + k) % n])
            .find(|t| t.is_live())
            .unwrap_or(&self.members[start % n])
    }
}

/// Who receives a message published to one topic.
pub(crate) struct Route {
    generation: u64,
    plain: Vec<Target>,
    groups: Vec<RouteGroup>,
}

impl Route {
    /// Queues the message for every recipient, waiting while a recipient's queue is full.
    pub async fn deliver(&self, p: &Publication) {
        let msg = |t: &Target| Msg {
            topic: p.topic.clone(),
            payload: p.payload.clone(),
            qos: p.qos.min(t.qos),
            retain: p.retain && t.opts.retain_as_published,
            props: p.props.clone(),
        };
        for t in &self.plain {
            if t.opts.no_local && t.session.id == p.from {
                continue;
            }
            t.deliver(msg(t)).await;
        }
        for g in &self.groups {
            let t = g.pick();
            t.deliver(msg(t)).await;
        }
    }

    /// Whether the route is still current.
    pub fn is_current(&self, router: &Router) -> bool {
        self.generation == router.generation.load(Ordering::Acquire)
    }
}

/// Subscriptions, routes and retained messages of one broker.
type Retained = (Bytes, u8, Option<Arc<Props>>);

#[derive(Default)]
pub(crate) struct Router {
    table: RwLock<Table>,
    cache: RwLock<HashMap<Bytes, Arc<Route>>>,
    generation: AtomicU64,
    /// Topic → (payload, QoS, MQTT 5 properties); copied so they do not pin a connection's
    /// read buffer.
    retained: Mutex<HashMap<Bytes, Retained>>,
}

impl Router {
    /// Makes every cached route stale (after a session's queue or subscriptions changed).
    pub fn invalidate(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The recipients of `topic`, from the cache when current.
    pub fn route(&self, topic: &[u8]) -> Arc<Route> {
        let generation = self.generation.load(Ordering::Acquire);
        if let Some(r) = read(&self.cache).get(topic)
            && r.generation == generation
        {
            return r.clone();
        }
        let route = {
            let table = read(&self.table);
            // Read under the table lock: a route built from this table is valid for this
            // generation (queue changes bump it after updating the sink it reads).
            let generation = self.generation.load(Ordering::Acquire);
            Arc::new(table.build(topic, generation))
        };
        let mut cache = write(&self.cache);
        if cache.len() >= CACHE_MAX {
            cache.clear();
        }
        match cache.get_mut(topic) {
            Some(slot) => *slot = route.clone(),
            None => {
                cache.insert(Bytes::copy_from_slice(topic), route.clone());
            }
        }
        route
    }

    /// Adds or updates a subscription: whether it existed already; `None` if the filter is
    /// invalid.
    pub fn subscribe(
        &self,
        session: &Arc<Session>,
        raw: &str,
        qos: u8,
        opts: SubOpts,
    ) -> Option<bool> {
        let (group, filter) = parse_filter(raw)?;
        let mut table = write(&self.table);
        let node = table.node(filter);
        match group {
            None => upsert(&mut node.subs, session, qos, opts),
            Some(name) => {
                let i = match node.groups.iter().position(|g| g.name == name) {
                    Some(i) => i,
                    None => {
                        node.groups.push(Group {
                            name: name.to_string(),
                            members: Vec::new(),
                            next: Arc::default(),
                        });
                        node.groups.len() - 1
                    }
                };
                upsert(&mut node.groups[i].members, session, qos, opts);
            }
        }
        let existed = lock(&session.filters)
            .insert(raw.to_string(), qos)
            .is_some();
        self.invalidate();
        Some(existed)
    }

    /// Removes a subscription; whether it existed.
    pub fn unsubscribe(&self, session: &Arc<Session>, raw: &str) -> bool {
        let mut table = write(&self.table);
        let existed = lock(&session.filters).remove(raw).is_some();
        if existed {
            table.remove(raw, session.id);
            self.invalidate();
        }
        existed
    }

    /// Ends a session: removes all its subscriptions and drops whatever is sent to it from now.
    pub fn drop_session(&self, session: &Arc<Session>) {
        let mut table = write(&self.table);
        for raw in lock(&session.filters).drain().map(|(f, _)| f) {
            table.remove(&raw, session.id);
        }
        drop(table);
        *lock(&session.sink) = super::session::Sink::Gone;
        self.invalidate();
    }

    /// Stores (or, with an empty payload, deletes) the retained message of `p`'s topic.
    pub fn retain(&self, p: &Publication) {
        let mut retained = lock(&self.retained);
        let topic = &p.topic[..];
        if p.payload.is_empty() {
            retained.remove(topic);
            return;
        }
        let value = (Bytes::copy_from_slice(&p.payload), p.qos, p.props.clone());
        if let Some(slot) = retained.get_mut(topic) {
            *slot = value;
        } else {
            retained.insert(Bytes::copy_from_slice(topic), value);
        }
    }

    /// Retained messages matching a (non-shared) filter, flagged retained, at QoS at most `qos`;
    /// expired ones (MQTT 5 message expiry) are deleted instead.
    pub fn retained_for(&self, filter: &str, qos: u8) -> Vec<Msg> {
        let mut retained = lock(&self.retained);
        retained.retain(|_, (_, _, props)| !props.as_deref().is_some_and(Props::is_expired));
        let msg = |t: &Bytes, (p, q, props): &Retained| Msg {
            topic: t.clone(),
            payload: p.clone(),
            qos: qos.min(*q),
            retain: true,
            props: props.clone(),
        };
        if filter.contains(['+', '#']) {
            retained
                .iter()
                .filter(|(t, _)| topic_matches(filter.as_bytes(), t))
                .map(|(t, v)| msg(t, v))
                .collect()
        } else {
            retained
                .get_key_value(filter.as_bytes())
                .map(|(t, v)| msg(t, v))
                .into_iter()
                .collect()
        }
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn filters() {
        assert_eq!(parse_filter("a/+/c"), Some((None, "a/+/c")));
        assert_eq!(parse_filter("#"), Some((None, "#")));
        assert_eq!(parse_filter("a/#"), Some((None, "a/#")));
        assert_eq!(parse_filter("$share/g/a/#"), Some((Some("g"), "a/#")));
        assert_eq!(parse_filter("/"), Some((None, "/")));
        for bad in [
            "",
            "a/#/b",
            "a#",
            "a/b+",
            "$share/g",
            "$share//t",
            "$share/g+/t",
            "$share/g/",
        ] {
            assert_eq!(parse_filter(bad), None, "{bad}");
        }
        assert!(valid_topic(b"a/b"));
        assert!(!valid_topic(b""));
        assert!(!valid_topic(b"a/+"));
        assert!(!valid_topic(b"a/#"));
        assert!(!valid_topic(b"\xff"));
    }
}
