//! An ECP endpoint simulator: the broker-side half of the ENTSO-E ECP business-application API
//! over AMQP 1.0 (what go-mades-bench benchmarks), for running the `ecp` workload without an
//! ECP installation.
//!
//! A business application (msgbench's producers) sends to the outbox queue
//! (`ecp.endpoint.outbox`) with application properties `receiverCode`, `messageType`,
//! `businessType`, `baMessageID`, `senderApplication`, `isTracingMessage` and the correlation id
//! `baMessageID`. For each such message the simulator, like an ECP endpoint:
//! 1. answers on the reply queue (`ecp.endpoint.outbox.reply`): correlation-id = baMessageID,
//!    application properties `messageID` (the id the endpoint assigns) and `baMessageID`; a
//!    refused message gets `errorCode` and `errorMessage` instead, and nothing else happens;
//! 2. delivers it to the receiving side's inbox (`ecp.endpoint.inbox`, possibly on another
//!    broker): the same body, application properties `baMessageID`, `messageID`,
//!    `messageType`, `senderCode`, `receiverCode`;
//! 3. publishes status events on `ecp.endpoint.send.event`: an `amqp-value` string body
//!    (`ACCEPTED`, `TRANSPORTED`, `DELIVERED`, `RECEIVED` or `FAILED`) with `messageID` and
//!    `baMessageID`.
//!
//! Faults are deterministic, so tests and benchmarks can expect exact counts. Message n
//! (1-based, in outbox arrival order) gets an error reply iff ⌊n·r⌋ > ⌊(n−1)·r⌋ for
//! `error_reply_ratio` r; it fails (reply, then `FAILED`, no delivery) by the same rule with
//! `failed_ratio`, unless it already got an error reply (an error wins); every
//! `duplicate_every`-th message is delivered and reported `RECEIVED` twice. With `tracing`,
//! messages marked `isTracingMessage` are not delivered (their events are sent as usual).
//!
//! Timing: the reply goes `reply_delay` after arrival, the delivery `deliver_delay` after it,
//! `DELIVERED`/`RECEIVED` (or `FAILED`) `event_delay` after the delivery; `ACCEPTED` follows the
//! reply and `TRANSPORTED` precedes the delivery. Delays come from one timer queue, never from
//! a sleep per message, so they add latency without limiting throughput. Sends are pipelined
//! (outcomes are collected as they settle) and an outbox message is accepted once everything
//! it causes has been handed to the broker, so a crash redelivers rather than loses it.
//! A lost connection is re-established with backoff until the shutdown future resolves.

use bytes::Bytes;
use msgbench_core::driver::DriverError;
use msgbench_core::meta::{Meta, Value};
use msgbench_core::scenario::TlsPlan;
use msgbench_driver_amqp10::client::Endpoint;
use msgbench_driver_amqp10::conn::{Conn, Event, LinkId, Received};
use msgbench_driver_amqp10::frames::{Disposition, Outcome};
use msgbench_driver_amqp10::message::{OutBody, OutMessage};
use msgbench_driver_amqp10::options::Amqp10Plan;
use std::collections::{BinaryHeap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// What the simulator connects to and how it behaves.
#[derive(Debug, Clone)]
pub struct EcpEndpointConfig {
    /// The broker holding the outbox, reply and send-event queues (`amqp10[s]://...`).
    pub outbox_url: String,
    /// The broker holding the receiving side's inbox (may equal `outbox_url`).
    pub inbox_url: String,
    /// TLS for `amqp10s://` URLs.
    pub tls: TlsPlan,
    /// Address template and capabilities of every link (`{topic}` = a queue name below).
    pub amqp10: Amqp10Plan,
    /// Queue the business application sends to.
    pub outbox: String,
    /// Queue the endpoint answers each outbox message on.
    pub reply: String,
    /// Queue of status events.
    pub send_event: String,
    /// Queue of the receiving business application.
    pub inbox: String,
    /// The endpoint's own code (`senderCode` of inbox messages).
    pub sender_code: String,
    /// Arrival → reply.
    pub reply_delay: Duration,
    /// Reply → inbox delivery.
    pub deliver_delay: Duration,
    /// Delivery → DELIVERED / RECEIVED (or FAILED).
    pub event_delay: Duration,
    /// Also send ACCEPTED (after the reply) and TRANSPORTED (before the delivery).
    pub extra_events: bool,
    /// Share of messages answered with an `errorCode` reply (nothing else happens to them).
    pub error_reply_ratio: f64,
    /// Share of messages that fail: ordinary reply, then FAILED, no delivery.
    pub failed_ratio: f64,
    /// Every Nth message is delivered and reported RECEIVED twice (0: never).
    pub duplicate_every: u64,
    /// Honour `isTracingMessage`: such messages are not delivered (events as usual).
    pub tracing: bool,
}

impl Default for EcpEndpointConfig {
    /// go-mades-bench's queue names on a local broker, no delays, no faults.
    fn default() -> Self {
        EcpEndpointConfig {
            outbox_url: "amqp10://127.0.0.1:5672".into(),
            inbox_url: "amqp10://127.0.0.1:5672".into(),
            tls: TlsPlan::default(),
            amqp10: Amqp10Plan::default(),
            outbox: "ecp.endpoint.outbox".into(),
            reply: "ecp.endpoint.outbox.reply".into(),
            send_event: "ecp.endpoint.send.event".into(),
            inbox: "ecp.endpoint.inbox".into(),
            sender_code: "10V-MSGBENCH-ECP".into(),
            reply_delay: Duration::ZERO,
            deliver_delay: Duration::ZERO,
            event_delay: Duration::ZERO,
            extra_events: false,
            error_reply_ratio: 0.0,
            failed_ratio: 0.0,
            duplicate_every: 0,
            tracing: true,
        }
    }
}

/// Why the simulator could not run.
#[derive(Debug, thiserror::Error)]
pub enum EcpError {
    /// A setting is wrong.
    #[error("ecp-endpoint: {0}")]
    Config(String),
    /// The first connection failed (later losses are retried, not returned).
    #[error("ecp-endpoint: {0}")]
    Connect(#[from] DriverError),
}

/// What the simulator did (messages handed to the broker).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EcpStats {
    /// Outbox messages received (redeliveries after a reconnection count again).
    pub received: u64,
    /// Ordinary replies sent.
    pub replied: u64,
    /// Replies with an `errorCode`.
    pub error_replies: u64,
    /// Inbox deliveries (duplicates included).
    pub delivered: u64,
    /// ACCEPTED events.
    pub accepted: u64,
    /// TRANSPORTED events.
    pub transported: u64,
    /// DELIVERED events.
    pub delivered_events: u64,
    /// RECEIVED events (duplicates included).
    pub received_events: u64,
    /// FAILED events.
    pub failed: u64,
    /// Messages delivered (or reported RECEIVED) twice on purpose.
    pub duplicates: u64,
    /// Sends the broker refused (rejected, released, modified).
    pub refused: u64,
    /// Connections lost and re-established.
    pub reconnects: u64,
}

/// Live counters of a running simulator (read them while it runs, e.g. for a status line).
#[derive(Debug, Default)]
pub struct EcpCounters {
    c: [AtomicU64; 12],
}

const RECEIVED: usize = 0;
const REPLIED: usize = 1;
const ERROR_REPLIES: usize = 2;
const DELIVERED: usize = 3;
const EV_ACCEPTED: usize = 4;
const EV_TRANSPORTED: usize = 5;
const EV_DELIVERED: usize = 6;
const EV_RECEIVED: usize = 7;
const EV_FAILED: usize = 8;
const DUPLICATES: usize = 9;
const REFUSED: usize = 10;
const RECONNECTS: usize = 11;

impl EcpCounters {
    fn add(&self, i: usize, n: u64) {
        self.c[i].fetch_add(n, Ordering::Relaxed);
    }

    /// A snapshot.
    pub fn stats(&self) -> EcpStats {
        let g = |i: usize| self.c[i].load(Ordering::Relaxed);
        EcpStats {
            received: g(RECEIVED),
            replied: g(REPLIED),
            error_replies: g(ERROR_REPLIES),
            delivered: g(DELIVERED),
            accepted: g(EV_ACCEPTED),
            transported: g(EV_TRANSPORTED),
            delivered_events: g(EV_DELIVERED),
            received_events: g(EV_RECEIVED),
            failed: g(EV_FAILED),
            duplicates: g(DUPLICATES),
            refused: g(REFUSED),
            reconnects: g(RECONNECTS),
        }
    }
}

/// Whether message `n` (1-based) is one of the `ratio` share picked by the ⌊n·r⌋ rule.
pub fn picked(n: u64, ratio: f64) -> bool {
    if ratio <= 0.0 {
        return false;
    }
    let r = ratio.min(1.0);
    (n as f64 * r).floor() > ((n - 1) as f64 * r).floor()
}

/// Runs the simulator until `shutdown` resolves; returns what it did.
pub async fn run(
    cfg: EcpEndpointConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<EcpStats, EcpError> {
    let counters = Arc::new(EcpCounters::default());
    run_with(cfg, counters.clone(), shutdown).await?;
    Ok(counters.stats())
}

/// [`run`], counting into `counters` as it goes.
pub async fn run_with(
    cfg: EcpEndpointConfig,
    counters: Arc<EcpCounters>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), EcpError> {
    for (what, r) in [
        ("error_reply_ratio", cfg.error_reply_ratio),
        ("failed_ratio", cfg.failed_ratio),
    ] {
        if !(0.0..=1.0).contains(&r) {
            return Err(EcpError::Config(format!("{what} {r} is not within 0..1")));
        }
    }
    let outbox_ep = Endpoint::parse(&cfg.outbox_url, &cfg.tls)?;
    let inbox_ep = Endpoint::parse(&cfg.inbox_url, &cfg.tls)?;
    let mut sim = Sim {
        cfg,
        counters,
        n: 0,
        seq: 0,
        timers: BinaryHeap::new(),
        msgs: HashMap::new(),
        settle: Vec::new(),
        warned: false,
        id_prefix: format!(
            "ecp-{:x}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis())
        ),
    };
    let mut live = sim.connect(&outbox_ep, &inbox_ep).await?;
    let mut shutdown = std::pin::pin!(shutdown);
    let mut backoff = Duration::from_millis(100);
    loop {
        if let Err(why) = sim.serve(&mut live, &mut shutdown).await {
            eprintln!("ecp-endpoint: connection lost: {why}; reconnecting");
        } else {
            live.close().await;
            return Ok(());
        }
        drop(live);
        sim.reset();
        live = loop {
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                () = tokio::time::sleep(backoff) => {}
            }
            let attempt = tokio::select! {
                () = &mut shutdown => return Ok(()),
                r = sim.connect(&outbox_ep, &inbox_ep) => r,
            };
            match attempt {
                Ok(l) => {
                    backoff = Duration::from_millis(100);
                    sim.counters.add(RECONNECTS, 1);
                    break l;
                }
                Err(e) => {
                    eprintln!("ecp-endpoint: reconnecting: {e}");
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        };
    }
}

/// One connection pair and its links: the outbox receiver and the reply and event senders
/// on the outbox side, the inbox sender on the inbox side.
struct Live {
    out: Conn,
    inn: Conn,
    outbox: LinkId,
    reply: LinkId,
    event: LinkId,
    inbox: LinkId,
}

impl Live {
    async fn close(mut self) {
        let t = Duration::from_secs(2);
        self.out.detach(self.outbox, t).await;
        self.out.close(t).await;
        self.inn.close(t).await;
    }
}

/// What one scheduled send is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Job {
    Reply { error: bool },
    Event(&'static str),
    Deliver,
}

/// A scheduled send: due time, then arrival order (ties keep the order they were planned in).
#[derive(Debug, PartialEq, Eq)]
struct Timer {
    due: Instant,
    seq: u64,
    msg: u64,
    job: Job,
}

impl Ord for Timer {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // BinaryHeap is a max-heap: the earliest (due, seq) first.
        (o.due, o.seq).cmp(&(self.due, self.seq))
    }
}

impl PartialOrd for Timer {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// An outbox message whose consequences are still being sent.
struct InFlight {
    /// The outbox delivery's id (settled once everything it causes is sent).
    token: u32,
    body: Bytes,
    ba_id: String,
    ecp_id: String,
    message_type: Option<Value>,
    receiver_code: Option<Value>,
    /// Scheduled sends not yet handed over; accepted at zero.
    remaining: u32,
}

struct Sim {
    cfg: EcpEndpointConfig,
    counters: Arc<EcpCounters>,
    /// Outbox messages seen (n of the fault rules).
    n: u64,
    seq: u64,
    timers: BinaryHeap<Timer>,
    msgs: HashMap<u64, InFlight>,
    settle: Vec<u32>,
    warned: bool,
    id_prefix: String,
}

/// Most outbox messages taken in one go before their sends.
const BATCH: usize = 256;

impl Sim {
    async fn connect(&self, out_ep: &Endpoint, in_ep: &Endpoint) -> Result<Live, DriverError> {
        let c = &self.cfg;
        let t = Duration::from_secs(10);
        let caps = &c.amqp10.capabilities;
        let addr = |q: &str| c.amqp10.address_of(q);
        let pid = std::process::id();
        let mut out = out_ep.open(&format!("msgbench-ecp-{pid}"), None, t).await?;
        let mut inn = in_ep
            .open(&format!("msgbench-ecp-in-{pid}"), None, t)
            .await?;
        // Unsettled senders (their outcomes are counted), without metadata to read.
        let reply = out
            .attach(None, &addr(&c.reply), caps, false, false, 0, false)
            .await?;
        let event = out
            .attach(None, &addr(&c.send_event), caps, false, false, 0, false)
            .await?;
        let inbox = inn
            .attach(None, &addr(&c.inbox), caps, false, false, 0, false)
            .await?;
        let outbox = out
            .attach(
                None,
                &addr(&c.outbox),
                caps,
                true,
                false,
                c.amqp10.credit,
                true,
            )
            .await?;
        Ok(Live {
            out,
            inn,
            outbox,
            reply,
            event,
            inbox,
        })
    }

    /// Forgets the work of a lost connection: unaccepted outbox messages come again.
    fn reset(&mut self) {
        self.timers.clear();
        self.msgs.clear();
        self.settle.clear();
    }

    fn at(&mut self, due: Instant, msg: u64, job: Job) {
        self.seq += 1;
        self.timers.push(Timer {
            due,
            seq: self.seq,
            msg,
            job,
        });
    }

    /// Plans everything message `r` causes.
    fn plan(&mut self, r: Received) {
        self.n += 1;
        let n = self.n;
        self.counters.add(RECEIVED, 1);
        let c = &self.cfg;
        let now = Instant::now();
        let r_meta = &r.parts.meta;
        let prop = |k: &str| r_meta.property(k).cloned();
        let ba_id = prop("baMessageID")
            .map(|v| v.to_string())
            .or_else(|| r_meta.correlation_id.clone())
            .or_else(|| r_meta.message_id.clone())
            .unwrap_or_default();
        let tracing = c.tracing && prop("isTracingMessage") == Some(Value::Bool(true));
        let error = picked(n, c.error_reply_ratio);
        let failed = !error && picked(n, c.failed_ratio);
        let dup = !error && !failed && c.duplicate_every > 0 && n.is_multiple_of(c.duplicate_every);
        let (reply_at, deliver_at) = (now + c.reply_delay, now + c.reply_delay + c.deliver_delay);
        let events_at = deliver_at + c.event_delay;
        let extra = c.extra_events;
        let msg = InFlight {
            token: r.id,
            body: r.parts.body,
            ecp_id: format!("{}-{n}", self.id_prefix),
            ba_id,
            message_type: prop("messageType"),
            receiver_code: prop("receiverCode"),
            remaining: 0,
        };
        let mut jobs: Vec<(Instant, Job)> = vec![(reply_at, Job::Reply { error })];
        if !error {
            if extra {
                jobs.push((reply_at, Job::Event("ACCEPTED")));
            }
            if failed {
                jobs.push((events_at, Job::Event("FAILED")));
            } else {
                if extra {
                    jobs.push((deliver_at, Job::Event("TRANSPORTED")));
                }
                let copies = if dup { 2 } else { 1 };
                for _ in 0..copies {
                    if !tracing {
                        jobs.push((deliver_at, Job::Deliver));
                    }
                }
                jobs.push((events_at, Job::Event("DELIVERED")));
                for _ in 0..copies {
                    jobs.push((events_at, Job::Event("RECEIVED")));
                }
                if dup {
                    self.counters.add(DUPLICATES, 1);
                }
            }
        }
        let mut msg = msg;
        msg.remaining = jobs.len() as u32;
        self.msgs.insert(n, msg);
        for (due, job) in jobs {
            self.at(due, n, job);
        }
    }

    /// Sends one scheduled job; `Err` when the connection is gone.
    async fn send(&mut self, live: &mut Live, t: Timer) -> Result<(), String> {
        let Some(m) = self.msgs.get_mut(&t.msg) else {
            return Ok(());
        };
        let durable = self.cfg.amqp10.durable;
        let mut meta = Meta {
            correlation_id: Some(m.ba_id.clone()),
            ..Meta::default()
        };
        let ids = [
            ("messageID".to_string(), Value::Str(m.ecp_id.clone())),
            ("baMessageID".to_string(), Value::Str(m.ba_id.clone())),
        ];
        let (inbox_side, link, body, counter) = match t.job {
            Job::Reply { error } => {
                meta.properties.extend(ids);
                if error {
                    meta.properties
                        .push(("errorCode".into(), Value::Str("MSGBENCH-SIMULATED".into())));
                    meta.properties.push((
                        "errorMessage".into(),
                        Value::Str(
                            "rejected by msgbench's ECP endpoint simulator (error_reply_ratio)"
                                .into(),
                        ),
                    ));
                }
                let c = if error { ERROR_REPLIES } else { REPLIED };
                (false, live.reply, OutBody::Data(&[]), c)
            }
            Job::Event(status) => {
                meta.properties.extend(ids);
                let c = match status {
                    "ACCEPTED" => EV_ACCEPTED,
                    "TRANSPORTED" => EV_TRANSPORTED,
                    "DELIVERED" => EV_DELIVERED,
                    "RECEIVED" => EV_RECEIVED,
                    _ => EV_FAILED,
                };
                (false, live.event, OutBody::Text(status), c)
            }
            Job::Deliver => {
                meta.message_id = Some(m.ecp_id.clone());
                meta.properties.extend(ids);
                for (k, v) in [
                    ("messageType", &m.message_type),
                    ("receiverCode", &m.receiver_code),
                ] {
                    if let Some(v) = v {
                        meta.properties.push((k.into(), v.clone()));
                    }
                }
                meta.properties.push((
                    "senderCode".into(),
                    Value::Str(self.cfg.sender_code.clone()),
                ));
                (true, live.inbox, OutBody::Data(&m.body), DELIVERED)
            }
        };
        let conn = if inbox_side {
            &mut live.inn
        } else {
            &mut live.out
        };
        conn.wait_credit(link).await.map_err(|e| e.to_string())?;
        conn.send(
            link,
            0,
            &OutMessage {
                meta: Some(&meta),
                body,
                durable,
            },
        );
        self.counters.add(counter, 1);
        m.remaining -= 1;
        if m.remaining == 0
            && let Some(done) = self.msgs.remove(&t.msg)
        {
            self.settle.push(done.token);
        }
        Ok(())
    }

    /// Counts a refused send (warning once); accepted ones need nothing.
    fn on_outcome(&mut self, outcome: Outcome) {
        let why = match outcome {
            Outcome::Accepted => return,
            Outcome::Rejected(Some(e)) => format!("rejected: {e}"),
            Outcome::Rejected(None) => "rejected".into(),
            Outcome::Released => "released".into(),
            Outcome::Modified { .. } => "modified".into(),
            Outcome::Other => "an unexpected outcome".into(),
        };
        self.counters.add(REFUSED, 1);
        if !self.warned {
            self.warned = true;
            eprintln!(
                "ecp-endpoint: the broker refused a message: {why} (further refusals are counted)"
            );
        }
    }

    /// Handles one event of the outbox side (`outbox`: the outbox receiver) or the inbox side.
    fn on_event(&mut self, e: Event, outbox: Option<LinkId>) {
        match e {
            Event::Delivery(r) if Some(r.link) == outbox => self.plan(r),
            Event::Delivery(_) => {}
            Event::Settled { outcome, .. } => self.on_outcome(outcome),
            // Brokerless link events: not on a broker's connection.
            Event::Attached { .. } | Event::Refused(_) | Event::Detached { .. } => {}
        }
    }

    /// Accepts the outbox messages whose work is done, a disposition per run of ids.
    fn accept_done(&mut self, live: &mut Live) {
        if self.settle.is_empty() {
            return;
        }
        self.settle.sort_unstable();
        let mut run: Option<(u32, u32)> = None;
        for &id in &self.settle {
            run = match run {
                Some((first, last)) if last.wrapping_add(1) == id => Some((first, id)),
                Some((first, last)) => {
                    live.out.settle(first, last, Disposition::Accept);
                    Some((id, id))
                }
                None => Some((id, id)),
            };
        }
        if let Some((first, last)) = run {
            live.out.settle(first, last, Disposition::Accept);
        }
        self.settle.clear();
    }

    /// Serves one connection until `shutdown` (`Ok`) or a failure (`Err(why)`).
    async fn serve(
        &mut self,
        live: &mut Live,
        shutdown: &mut std::pin::Pin<&mut (impl Future<Output = ()> + Send)>,
    ) -> Result<(), String> {
        loop {
            // Everything due goes out first, then what it freed is accepted in one go.
            let now = Instant::now();
            while self.timers.peek().is_some_and(|t| t.due <= now) {
                if let Some(t) = self.timers.pop() {
                    self.send(live, t).await?;
                }
            }
            self.accept_done(live);
            let next = self.timers.peek().map(|t| t.due);
            let outbox = Some(live.outbox);
            tokio::select! {
                biased;
                () = shutdown.as_mut() => return Ok(()),
                e = live.out.next_event() => {
                    self.on_event(e.map_err(|e| e.to_string())?, outbox);
                    // What is already read is handled in the same go.
                    for _ in 1..BATCH {
                        if !live.out.frame_ready() {
                            break;
                        }
                        let e = live.out.next_event().await.map_err(|e| e.to_string())?;
                        self.on_event(e, outbox);
                    }
                }
                e = live.inn.next_event() => self.on_event(e.map_err(|e| e.to_string())?, None),
                () = sleep_until(next) => {}
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_rule_picks_exact_shares() {
        let count = |r: f64, n: u64| (1..=n).filter(|&i| picked(i, r)).count() as u64;
        assert_eq!(count(0.1, 100), 10);
        assert_eq!(count(0.25, 10), 2);
        assert_eq!(count(0.0, 100), 0);
        assert_eq!(count(1.0, 7), 7);
        assert_eq!(count(1.0 / 3.0, 9), 3);
        // Which ones: the 10th, 20th... for 0.1.
        assert!(picked(10, 0.1) && !picked(9, 0.1) && !picked(11, 0.1));
    }

    #[test]
    fn timers_pop_earliest_first_then_in_plan_order() {
        let t0 = Instant::now();
        let mut h = BinaryHeap::new();
        for (due, seq) in [(5, 1), (0, 3), (0, 2), (1, 4)] {
            h.push(Timer {
                due: t0 + Duration::from_millis(due),
                seq,
                msg: 0,
                job: Job::Deliver,
            });
        }
        let order: Vec<u64> = std::iter::from_fn(|| h.pop().map(|t| t.seq)).collect();
        assert_eq!(order, [2, 3, 4, 1]);
    }
}
