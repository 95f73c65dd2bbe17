//! # msgbench-driver-mem
//!
//! `mem://` — an in-process broker. It exists for two reasons: to test the engine without a
//! network (with exact, deterministic faults), and to measure the generator's own ceiling (how
//! fast msgbench can pace, stamp, send, receive and record when the "broker" costs almost
//! nothing).
//!
//! Semantics: topics are exact names; every fan-out subscriber gets every message; members of a
//! queue group share messages round-robin. Each subscriber has a bounded queue
//! ([`DEFAULT_CAPACITY`] messages, `?capacity=N`), so a slow consumer applies backpressure to
//! producers instead of growing memory. "Accepted" means enqueued for every subscriber; there are
//! no acks, except in request/reply mode where the reply is the ack.
//!
//! Speed: a producer writes each message as a frame into a per-subscriber outbox. The outbox is
//! handed over at once when the subscriber's queue is empty (so an idle system adds no latency),
//! and otherwise when it holds [`BATCH_FRAMES`] frames, when the producer goes idle, or at flush.
//! A batch is one shared buffer; consumers slice frames out of it without copying or allocating.
//!
//! Fault injection, deterministic so tests can assert exact counts (URL query parameters):
//! - `drop_every=N`: every N-th message of each producer is not delivered.
//! - `dup_every=N`: every N-th message is delivered twice.
//! - `reorder_every=N`: every N-th message is held back and delivered after the next one.
//! - `foreign_every=N`: after every N-th message, a payload that is not a msgbench stamp is
//!   delivered too.
//!
//! A known latency and a known capacity, so verdicts and the capacity search can be tested
//! against a system whose answer is known in advance:
//! - `delay=D` (`5ms`, `250us`): every message is handed to its consumers no earlier than D
//!   after it was sent (a fixed network or broker latency).
//! - `max_rate=N`: the broker accepts at most N messages per second, all producers together.
//!   It behaves as a single server with a queue: below N nothing waits; above N each send waits
//!   for its slot, so the backlog (and the latency measured from the intended send time) grows
//!   for as long as the offered rate stays above N — the knee a capacity search looks for.
//!
//! Brokers are per process and named by the URL host (`mem://a` and `mem://b` are separate).
//!
//! # Layout
//! - [`MemDriver`]: parses the URL, owns the broker handle.
//! - [`MemProducer`] / [`MemConsumer`]: the two sides.
#![deny(missing_docs)]

use bytes::{Buf, BufMut, Bytes, BytesMut};
use msgbench_core::clock::now_ns;
use msgbench_core::driver::{
    Ack, Capabilities, Consumer, ConsumerSpec, Delivery, Driver, DriverError, NoSession, Outbound,
    Producer, ProducerSpec, SessionSpec,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// Messages queued per subscriber before producers feel backpressure.
pub const DEFAULT_CAPACITY: usize = 8_192;

/// Frames per batch when a subscriber is busy.
pub const BATCH_FRAMES: usize = 64;

/// Frame header: payload length (u32), reply token (u64, `u64::MAX` = none) and the time the
/// frame becomes deliverable (u64 ns on the msgbench clock, 0 = at once; see `delay=`).
const FRAME_HEADER: usize = 20;
const NO_TOKEN: u64 = u64::MAX;

/// Faults injected into every producer's stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// Drop every N-th message.
    pub drop_every: u64,
    /// Duplicate every N-th message.
    pub dup_every: u64,
    /// Swap every N-th message with the next.
    pub reorder_every: u64,
    /// Inject a foreign payload after every N-th message.
    pub foreign_every: u64,
}

/// Frames from one producer, and where replies to them go.
struct Batch {
    frames: Bytes,
    replies: Option<mpsc::UnboundedSender<u64>>,
}

type Tx = mpsc::Sender<Batch>;

#[derive(Default)]
struct Topic {
    fanout: Vec<Tx>,
    groups: HashMap<String, (Vec<Tx>, Arc<AtomicUsize>)>,
}

/// One named in-process broker.
#[derive(Default)]
struct Broker {
    topics: Mutex<HashMap<String, Topic>>,
    /// `max_rate=`: when the single server is next free (ns on the msgbench clock), shared by
    /// every producer of this broker.
    next_free_ns: AtomicU64,
}

impl Broker {
    /// Reserves the next service slot of a broker that serves one message every `interval_ns`,
    /// and returns when that slot begins. Slots up to [`SLOT_CREDIT_NS`] in the past are still
    /// served: a producer that overslept its timer catches up instead of losing the server's
    /// time (which would make the capacity depend on the timer, not on `max_rate`).
    fn reserve(&self, interval_ns: u64, now: u64) -> u64 {
        let mut next = self.next_free_ns.load(Ordering::Relaxed);
        loop {
            let slot = next.max(now.saturating_sub(SLOT_CREDIT_NS));
            match self.next_free_ns.compare_exchange_weak(
                next,
                slot + interval_ns,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return slot,
                Err(seen) => next = seen,
            }
        }
    }
}

/// How far ahead of its slot a producer may run before it sleeps: sleeping per message would
/// cost more than the cap is meant to model, and the timer is no finer than a millisecond.
const SLOT_SLACK_NS: u64 = 1_000_000;

/// How far in the past an unused slot of `max_rate=` may still be taken (a token bucket this
/// deep): more than the timer's overshoot, little enough that an idle broker does not bank
/// a burst worth measuring.
const SLOT_CREDIT_NS: u64 = 5_000_000;

fn broker(name: &str) -> Arc<Broker> {
    static BROKERS: OnceLock<Mutex<HashMap<String, Arc<Broker>>>> = OnceLock::new();
    let mut all = BROKERS
        .get_or_init(Default::default)
        .lock()
        .expect("broker registry");
    all.entry(name.to_string()).or_default().clone()
}

/// The `mem://` driver.
pub struct MemDriver {
    broker: Arc<Broker>,
    capacity: usize,
    faults: Faults,
    /// `delay=`: the fixed latency added to every message, in ns (0 = none).
    delay_ns: u64,
    /// `max_rate=`: ns between two messages the broker serves (0 = no cap).
    interval_ns: u64,
}

impl MemDriver {
    /// Parses `mem://[name][?capacity=N&drop_every=N&dup_every=N&reorder_every=N&foreign_every=N&delay=D&max_rate=N]`.
    pub fn from_url(url: &str) -> Result<Self, DriverError> {
        let rest = url
            .strip_prefix("mem://")
            .ok_or_else(|| DriverError::Config(format!("`{url}` is not a mem:// URL")))?;
        let (name, query) = rest.split_once('?').unwrap_or((rest, ""));
        let mut capacity = DEFAULT_CAPACITY;
        let mut faults = Faults::default();
        let mut delay_ns = 0;
        let mut interval_ns = 0;
        for kv in query.split('&').filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=').ok_or_else(|| {
                DriverError::Config(format!("mem:// option `{kv}` needs a value"))
            })?;
            if k == "delay" {
                let d = msgbench_core::units::parse_duration(v)
                    .map_err(|e| DriverError::Config(format!("mem:// option `delay`: {e}")))?;
                delay_ns = d.as_nanos().min(u64::MAX as u128) as u64;
                continue;
            }
            if k == "max_rate" {
                let r = msgbench_core::units::parse_count(v)
                    .map_err(|e| DriverError::Config(format!("mem:// option `max_rate`: {e}")))?;
                if !(1.0..=1e9).contains(&r) {
                    return Err(DriverError::Config(format!(
                        "mem:// option `max_rate` must be between 1 and 1G messages per second, got `{v}`"
                    )));
                }
                interval_ns = (1e9 / r).round() as u64;
                continue;
            }
            let n: u64 = v.parse().map_err(|_| {
                DriverError::Config(format!(
                    "mem:// option `{k}` must be a whole number, got `{v}`"
                ))
            })?;
            match k {
                "capacity" => capacity = n.max(1) as usize,
                "drop_every" => faults.drop_every = n,
                "dup_every" => faults.dup_every = n,
                "reorder_every" => faults.reorder_every = n,
                "foreign_every" => faults.foreign_every = n,
                _ => {
                    return Err(DriverError::Config(format!(
                        "unknown mem:// option `{k}` (known: capacity, drop_every, dup_every, reorder_every, foreign_every, delay, max_rate)"
                    )));
                }
            }
        }
        Ok(Self {
            broker: broker(name),
            capacity,
            faults,
            delay_ns,
            interval_ns,
        })
    }
}

impl Driver for MemDriver {
    type Producer = MemProducer;
    type Consumer = MemConsumer;
    type Session = NoSession;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            acks: false,
            queue_groups: true,
            request_reply: true,
            responses: false,
            metadata: false,
        }
    }

    async fn producer(&self, spec: &ProducerSpec) -> Result<MemProducer, DriverError> {
        let (ack_tx, ack_rx) = mpsc::unbounded_channel();
        Ok(MemProducer {
            broker: self.broker.clone(),
            topics: spec.topics.clone(),
            routes: (0..spec.topics.len()).map(|_| None).collect(),
            faults: self.faults,
            delay_ns: self.delay_ns,
            interval_ns: self.interval_ns,
            n: 0,
            held: None,
            replies: spec.request_reply.then_some(ack_tx),
            ack_rx,
        })
    }

    async fn session(&self, _: &SessionSpec) -> Result<NoSession, DriverError> {
        Err(DriverError::Config(
            "the in-process mem:// broker has no connections; connection workloads need a network target"
                .into(),
        ))
    }

    async fn consumer(&self, spec: &ConsumerSpec) -> Result<MemConsumer, DriverError> {
        // Capacity is in messages; a batch holds up to BATCH_FRAMES of them.
        let (tx, rx) = mpsc::channel((self.capacity / BATCH_FRAMES).max(16));
        let mut topics = self.broker.topics.lock().expect("topic table");
        let topic = topics.entry(spec.topic.clone()).or_default();
        match &spec.group {
            None => topic.fanout.push(tx),
            Some(g) => topic
                .groups
                .entry(g.clone())
                .or_insert_with(|| (Vec::new(), Arc::default()))
                .0
                .push(tx),
        }
        Ok(MemConsumer {
            rx,
            current: None,
            respond: spec.respond,
        })
    }
}

/// Frames waiting for one subscriber.
struct Outbox {
    tx: Tx,
    buf: BytesMut,
    frames: usize,
}

impl Outbox {
    fn new(tx: Tx) -> Self {
        Self {
            tx,
            buf: BytesMut::new(),
            frames: 0,
        }
    }

    fn push(&mut self, payload: &[u8], token: u64, due_ns: u64) {
        self.buf.reserve(FRAME_HEADER + payload.len());
        self.buf.put_u32_le(payload.len() as u32);
        self.buf.put_u64_le(token);
        self.buf.put_u64_le(due_ns);
        self.buf.put_slice(payload);
        self.frames += 1;
    }

    /// Hands the frames over if the subscriber is idle or the batch is full (or `force`).
    async fn maybe_send(&mut self, replies: &Option<mpsc::UnboundedSender<u64>>, force: bool) {
        if self.frames == 0 {
            return;
        }
        let idle_subscriber = self.tx.capacity() == self.tx.max_capacity();
        if force || idle_subscriber || self.frames >= BATCH_FRAMES {
            let frames = self.buf.split().freeze();
            self.frames = 0;
            // A gone subscriber is not the producer's failure: the messages are simply not delivered.
            let _ = self
                .tx
                .send(Batch {
                    frames,
                    replies: replies.clone(),
                })
                .await;
        }
    }
}

/// Subscribers of one topic as a producer sees them, resolved at its first send.
struct Route {
    fanout: Vec<Outbox>,
    groups: Vec<(Vec<Outbox>, Arc<AtomicUsize>)>,
}

/// The sending side of `mem://`.
pub struct MemProducer {
    broker: Arc<Broker>,
    topics: Vec<String>,
    routes: Vec<Option<Route>>,
    faults: Faults,
    delay_ns: u64,
    interval_ns: u64,
    n: u64,
    held: Option<(u32, Vec<u8>, u64)>,
    replies: Option<mpsc::UnboundedSender<u64>>,
    ack_rx: mpsc::UnboundedReceiver<u64>,
}

impl MemProducer {
    fn route(&mut self, stream: u32) -> &mut Route {
        let broker = &self.broker;
        let name = &self.topics[stream as usize];
        self.routes[stream as usize].get_or_insert_with(|| {
            let topics = broker.topics.lock().expect("topic table");
            match topics.get(name) {
                Some(t) => Route {
                    fanout: t.fanout.iter().cloned().map(Outbox::new).collect(),
                    groups: t
                        .groups
                        .values()
                        .map(|(m, next)| {
                            (m.iter().cloned().map(Outbox::new).collect(), next.clone())
                        })
                        .collect(),
                },
                None => Route {
                    fanout: vec![],
                    groups: vec![],
                },
            }
        })
    }

    async fn deliver(&mut self, stream: u32, payload: &[u8], token: u64) {
        let replies = self.replies.clone();
        let due = if self.delay_ns > 0 {
            now_ns() + self.delay_ns
        } else {
            0
        };
        let route = self.route(stream);
        for o in &mut route.fanout {
            o.push(payload, token, due);
            o.maybe_send(&replies, false).await;
        }
        for (members, next) in &mut route.groups {
            if members.is_empty() {
                continue;
            }
            let i = next.fetch_add(1, Ordering::Relaxed) % members.len();
            members[i].push(payload, token, due);
            members[i].maybe_send(&replies, false).await;
        }
    }

    /// `max_rate=`: waits until the broker's server is free for this message. Sleeps only
    /// once the producer is more than [`SLOT_SLACK_NS`] ahead, handing over what it holds
    /// first so the consumers are not kept waiting by the producer's own sleep.
    async fn wait_for_slot(&mut self) {
        let now = now_ns();
        let slot = self.broker.reserve(self.interval_ns, now);
        if slot > now + SLOT_SLACK_NS {
            // Sleeps until its slot; whatever the timer oversleeps is caught up (see `reserve`).
            self.send_all().await;
            tokio::time::sleep(std::time::Duration::from_nanos(slot - now)).await;
        }
    }

    async fn send_all(&mut self) {
        let replies = self.replies.clone();
        for route in self.routes.iter_mut().flatten() {
            for o in route
                .fanout
                .iter_mut()
                .chain(route.groups.iter_mut().flat_map(|(m, _)| m.iter_mut()))
            {
                o.maybe_send(&replies, true).await;
            }
        }
    }
}

impl Producer for MemProducer {
    async fn send(&mut self, msg: Outbound<'_>) -> Result<(), DriverError> {
        self.n += 1;
        let n = self.n;
        let f = self.faults;
        let token = if self.replies.is_some() {
            msg.token
        } else {
            NO_TOKEN
        };
        if self.interval_ns > 0 {
            self.wait_for_slot().await;
        }
        if f.drop_every > 0 && n.is_multiple_of(f.drop_every) {
            return Ok(());
        }
        if f.reorder_every > 0 && n.is_multiple_of(f.reorder_every) && self.held.is_none() {
            self.held = Some((msg.stream, msg.payload.to_vec(), token));
            return Ok(());
        }
        self.deliver(msg.stream, msg.payload, token).await;
        if let Some((s, b, t)) = self.held.take() {
            self.deliver(s, &b, t).await;
        }
        if f.dup_every > 0 && n.is_multiple_of(f.dup_every) {
            self.deliver(msg.stream, msg.payload, token).await;
        }
        if f.foreign_every > 0 && n.is_multiple_of(f.foreign_every) {
            self.deliver(msg.stream, b"not a msgbench payload", NO_TOKEN)
                .await;
        }
        Ok(())
    }

    async fn idle(&mut self) -> Result<(), DriverError> {
        self.send_all().await;
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), DriverError> {
        if let Some((s, b, t)) = self.held.take() {
            self.deliver(s, &b, t).await;
        }
        self.send_all().await;
        Ok(())
    }

    fn poll_ack(&mut self, cx: &mut Context<'_>) -> Poll<Option<Ack>> {
        self.ack_rx
            .poll_recv(cx)
            .map(|t| t.map(|token| Ack::One { token, ok: true }))
    }

    async fn close(mut self) -> Result<(), DriverError> {
        self.flush().await
    }
}

/// The receiving side of `mem://`.
pub struct MemConsumer {
    rx: mpsc::Receiver<Batch>,
    /// The batch being read; frames are sliced out of it.
    current: Option<Batch>,
    respond: bool,
}

impl Consumer for MemConsumer {
    async fn recv(&mut self) -> Result<Option<Delivery>, DriverError> {
        loop {
            if let Some(b) = &mut self.current {
                if b.frames.len() >= FRAME_HEADER {
                    // `delay=`: wait before taking the frame, so a cancelled wait loses nothing.
                    let due = u64::from_le_bytes(b.frames[12..20].try_into().expect("8 bytes"));
                    if due > 0 {
                        let now = now_ns();
                        if due > now {
                            tokio::time::sleep(std::time::Duration::from_nanos(due - now)).await;
                            continue;
                        }
                    }
                    let len = b.frames.get_u32_le() as usize;
                    let token = b.frames.get_u64_le();
                    b.frames.advance(8);
                    let payload = b.frames.split_to(len);
                    if self.respond
                        && token != NO_TOKEN
                        && let Some(r) = &b.replies
                    {
                        let _ = r.send(token);
                    }
                    return Ok(Some(Delivery {
                        payload,
                        redelivered: false,
                        meta: None,
                    }));
                }
                self.current = None;
            }
            // Cancel-safe: nothing is taken from the queue unless this completes.
            match self.rx.recv().await {
                Some(b) => self.current = Some(b),
                None => return Ok(None),
            }
        }
    }

    async fn close(self) -> Result<(), DriverError> {
        Ok(())
    }
}

impl msgbench_core::registration::Registered for MemDriver {
    const INFO: msgbench_core::registration::DriverInfo = msgbench_core::registration::DriverInfo {
        name: "mem",
        schemes: &["mem"],
        about: "in-process broker: engine tests, generator ceiling, fault injection (?drop_every=N&dup_every=N&reorder_every=N)",
        caps: Capabilities {
            acks: false,
            queue_groups: true,
            request_reply: true,
            responses: false,
            metadata: false,
        },
        section: None,
    };

    fn build(
        url: &str,
        _: &msgbench_core::scenario::RunPlan,
        _: msgbench_core::driver::EventSink,
    ) -> Result<Self, DriverError> {
        MemDriver::from_url(url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_options() {
        let d = MemDriver::from_url("mem://t1?drop_every=10&dup_every=7").unwrap();
        assert_eq!(
            d.faults,
            Faults {
                drop_every: 10,
                dup_every: 7,
                ..Default::default()
            }
        );
        assert!(
            MemDriver::from_url("mem://?bogus=1")
                .err()
                .unwrap()
                .to_string()
                .contains("unknown mem:// option")
        );
        assert!(MemDriver::from_url("mem://?drop_every=x").is_err());
        assert!(MemDriver::from_url("nats://x").is_err());
    }

    #[tokio::test]
    async fn fanout_and_queue_groups() {
        let d = MemDriver::from_url("mem://unit-fanout").unwrap();
        let spec = |id, group: Option<&str>| ConsumerSpec {
            id,
            topic: "t".into(),
            group: group.map(Into::into),
            respond: false,
            meta: false,
            target: None,
            source: None,
            fd_free: false,
            lean: false,
        };
        let mut a = d.consumer(&spec(0, None)).await.unwrap();
        let mut b = d.consumer(&spec(1, None)).await.unwrap();
        let mut q1 = d.consumer(&spec(2, Some("g"))).await.unwrap();
        let mut q2 = d.consumer(&spec(3, Some("g"))).await.unwrap();
        let mut p = d
            .producer(&ProducerSpec {
                id: 0,
                topics: vec!["t".into()],
                request_reply: false,
                max_in_flight: 1,
            })
            .await
            .unwrap();
        for i in 0..4u8 {
            p.send(Outbound {
                stream: 0,
                token: i as u64,
                payload: &[i],
                meta: None,
            })
            .await
            .unwrap();
        }
        p.flush().await.unwrap();
        for c in [&mut a, &mut b] {
            for i in 0..4u8 {
                assert_eq!(c.recv().await.unwrap().unwrap().payload.as_ref(), &[i]);
            }
        }
        // Round-robin: each group member got two.
        assert_eq!(q1.recv().await.unwrap().unwrap().payload.as_ref(), &[0]);
        assert_eq!(q2.recv().await.unwrap().unwrap().payload.as_ref(), &[1]);
        assert_eq!(q1.recv().await.unwrap().unwrap().payload.as_ref(), &[2]);
        assert_eq!(q2.recv().await.unwrap().unwrap().payload.as_ref(), &[3]);
    }

    fn spec(topic: &str) -> (ConsumerSpec, ProducerSpec) {
        (
            ConsumerSpec {
                id: 0,
                topic: topic.into(),
                group: None,
                respond: false,
                meta: false,
                target: None,
                source: None,
                fd_free: false,
                lean: false,
            },
            ProducerSpec {
                id: 0,
                topics: vec![topic.into()],
                request_reply: false,
                max_in_flight: 1,
            },
        )
    }

    #[test]
    fn latency_and_capacity_options() {
        let d = MemDriver::from_url("mem://opts?delay=5ms&max_rate=50k").unwrap();
        assert_eq!(d.delay_ns, 5_000_000);
        assert_eq!(d.interval_ns, 20_000);
        for bad in ["delay=fast", "max_rate=0", "max_rate=x"] {
            let e = MemDriver::from_url(&format!("mem://?{bad}")).err().unwrap();
            assert!(
                e.to_string().contains(bad.split('=').next().unwrap()),
                "{e}"
            );
        }
    }

    #[tokio::test]
    async fn delay_holds_each_message_back() {
        let d = MemDriver::from_url("mem://unit-delay?delay=30ms").unwrap();
        let (cs, ps) = spec("t");
        let mut c = d.consumer(&cs).await.unwrap();
        let mut p = d.producer(&ps).await.unwrap();
        let t0 = now_ns();
        p.send(Outbound {
            stream: 0,
            token: 0,
            payload: b"x",
            meta: None,
        })
        .await
        .unwrap();
        p.flush().await.unwrap();
        assert_eq!(c.recv().await.unwrap().unwrap().payload.as_ref(), b"x");
        let waited = now_ns() - t0;
        assert!(waited >= 30_000_000, "delivered after {waited} ns");
    }

    #[tokio::test]
    async fn max_rate_serves_one_message_per_slot() {
        // 2,000 messages at most 20,000/s take 0.1 s however fast they are offered (less the
        // slots an idle broker may serve at once, SLOT_CREDIT_NS, and the SLOT_SLACK_NS a
        // producer may run ahead).
        let d = MemDriver::from_url("mem://unit-cap?max_rate=20000&capacity=100000").unwrap();
        let (cs, ps) = spec("t");
        let mut c = d.consumer(&cs).await.unwrap();
        let mut p = d.producer(&ps).await.unwrap();
        let t0 = now_ns();
        for i in 0..2_000u64 {
            p.send(Outbound {
                stream: 0,
                token: i,
                payload: b"x",
                meta: None,
            })
            .await
            .unwrap();
        }
        p.flush().await.unwrap();
        let took = now_ns() - t0;
        // The first message takes a slot SLOT_CREDIT_NS in the past and the last returns
        // SLOT_SLACK_NS before its own, 1,999 intervals of 50 µs later.
        let floor = 1_999 * 50_000 - SLOT_CREDIT_NS - SLOT_SLACK_NS;
        assert!(took >= floor, "2,000 sends took {took} ns");
        for _ in 0..2_000 {
            c.recv().await.unwrap().unwrap();
        }
    }
}
