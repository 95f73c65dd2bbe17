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
//! Brokers are per process and named by the URL host (`mem://a` and `mem://b` are separate).
//!
//! # Layout
//! - [`MemDriver`]: parses the URL, owns the broker handle.
//! - [`MemProducer`] / [`MemConsumer`]: the two sides.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use msgbench_core::driver::{
    Ack, Capabilities, Consumer, ConsumerSpec, Delivery, Driver, DriverError, NoSession, Outbound,
    Producer, ProducerSpec, SessionSpec,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// Messages queued per subscriber before producers feel backpressure.
pub const DEFAULT_CAPACITY: usize = 8_192;

/// Frames per batch when a subscriber is busy.
pub const BATCH_FRAMES: usize = 64;

/// Frame header: payload length (u32) and reply token (u64, `u64::MAX` = none).
const FRAME_HEADER: usize = 12;
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
}

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
}

impl MemDriver {
    /// Parses `mem://[name][?capacity=N&drop_every=N&dup_every=N&reorder_every=N&foreign_every=N]`.
    pub fn from_url(url: &str) -> Result<Self, DriverError> {
        let rest = url
            .strip_prefix("mem://")
            .ok_or_else(|| DriverError::Config(format!("`{url}` is not a mem:// URL")))?;
        let (name, query) = rest.split_once('?').unwrap_or((rest, ""));
        let mut capacity = DEFAULT_CAPACITY;
        let mut faults = Faults::default();
        for kv in query.split('&').filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=').ok_or_else(|| {
                DriverError::Config(format!("mem:// option `{kv}` needs a value"))
            })?;
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
                        "unknown mem:// option `{k}` (known: capacity, drop_every, dup_every, reorder_every, foreign_every)"
                    )));
                }
            }
        }
        Ok(Self {
            broker: broker(name),
            capacity,
            faults,
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

    fn push(&mut self, payload: &[u8], token: u64) {
        self.buf.reserve(FRAME_HEADER + payload.len());
        self.buf.put_u32_le(payload.len() as u32);
        self.buf.put_u64_le(token);
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
        let route = self.route(stream);
        for o in &mut route.fanout {
            o.push(payload, token);
            o.maybe_send(&replies, false).await;
        }
        for (members, next) in &mut route.groups {
            if members.is_empty() {
                continue;
            }
            let i = next.fetch_add(1, Ordering::Relaxed) % members.len();
            members[i].push(payload, token);
            members[i].maybe_send(&replies, false).await;
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
                    let len = b.frames.get_u32_le() as usize;
                    let token = b.frames.get_u64_le();
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
}
