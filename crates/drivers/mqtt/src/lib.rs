//! # msgbench-driver-mqtt
//!
//! MQTT 3.1.1 and 5 over a lean client written for load generation: each producer, consumer
//! and held session owns one connection (TCP_NODELAY on, optional TLS) and nothing else — no
//! channel hop or allocation per message, payloads handed to the runner as slices of the read
//! buffer, idle sessions holding only a few hundred bytes of buffers.
//!
//! What the runner measures, per QoS:
//! - QoS 0: `send` is done when the PUBLISH is in the write buffer; there is no publish latency.
//! - QoS 1: publish latency is PUBLISH → PUBACK.
//! - QoS 2: publish latency is PUBLISH → PUBCOMP (PUBREC is answered with PUBREL on the way).
//!
//! End-to-end latency is measured at the subscriber as for every driver. Producers respect the
//! broker's receive maximum (MQTT 5): at that many unacknowledged messages `send` waits.
//!
//! Consumers subscribe with the run's QoS, answer PUBACK / PUBREC+PUBCOMP (at once, or in
//! batches with `ack_every`, see [`MAX_ACK_DELAY`]), send PINGREQ on the keep-alive schedule,
//! and use `$share/<group>/<filter>` for competing consumers.
//!
//! Failures: a lost connection is reported as a `disconnected` event and re-established with
//! backoff (`reconnected`); subscriptions are renewed unless the broker kept the session. With
//! several brokers in the URL, each failed attempt moves the client to the next one (failover).
//! Messages in flight at the cut are lost (QoS 1/2 ones expire in the runner's ack window) and
//! show up in the integrity counts.
//!
//! # Layout
//! - [`codec`]: wire format of both versions (also used by msgbench's embedded broker).
//! - [`conn`]: one connection: handshake, buffers, reconnection.
//! - this file: the `Driver`, `Producer`, `Consumer` and `Session` implementations.
#![deny(missing_docs)]

pub mod codec;
pub mod conn;

use bytes::Bytes;
use codec::{Packet, Version};
use conn::{Conn, Endpoint, Route, Settings};
use msgbench_core::driver::{
    Ack, Capabilities, Consumer, ConsumerSpec, Delivery, Driver, DriverError, DriverEventKind,
    EventSink, Outbound, Producer, ProducerSpec, Session, SessionSpec,
};
use msgbench_core::scenario::{ClientPlan, TlsPlan};
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// Bytes buffered before an unpaced producer writes them out.
pub const WRITE_BATCH: usize = 64 * 1024;
/// Read buffer growth for producers and consumers.
const DATA_CHUNK: usize = 64 * 1024;
/// Read buffer growth for held sessions (they only ever read PINGRESP and small packets).
const SESSION_CHUNK: usize = 256;
/// Largest packet accepted from a broker.
const MAX_PACKET: usize = 256 * 1024 * 1024;

/// The MQTT driver.
pub struct MqttDriver {
    ep: Arc<Endpoint>,
    client: ClientPlan,
    version: Version,
    run_id: u32,
    events: EventSink,
    connect_timeout: Duration,
}

impl MqttDriver {
    /// A driver for `mqtt[s]://[user[:pass]@]host[:port]`.
    pub fn new(
        url: &str,
        client: &ClientPlan,
        tls: &TlsPlan,
        run_id: u32,
        events: EventSink,
        connect_timeout: Duration,
    ) -> Result<Self, DriverError> {
        let version = match client.version.as_deref() {
            None | Some("3.1.1") | Some("3") | Some("4") => Version::V311,
            Some("5") | Some("5.0") => Version::V5,
            Some(other) => {
                return Err(DriverError::Config(format!(
                    "MQTT version `{other}` is not supported: use 3.1.1 or 5"
                )));
            }
        };
        let ep = Endpoint::parse(url, || msgbench_net::Tls::new(tls))?;
        Ok(Self {
            ep: Arc::new(ep),
            client: client.clone(),
            version,
            run_id,
            events,
            connect_timeout,
        })
    }

    fn settings(&self) -> Settings {
        Settings {
            version: self.version,
            keep_alive: self.client.keep_alive,
            clean: !self.client.persistent_session,
            timeout: self.connect_timeout,
            max_packet: MAX_PACKET,
        }
    }

    async fn connect(
        &self,
        role: &str,
        route: Route,
        events: bool,
        chunk: usize,
    ) -> Result<Conn, DriverError> {
        Conn::connect(
            self.ep.clone(),
            self.settings(),
            self.client.client_id_for(self.run_id, role, route.index),
            events.then(|| self.events.clone()),
            route,
            chunk,
        )
        .await
    }

    /// Route of a data client (producers and consumers): its index picks the host.
    fn data_route(i: u32) -> Route {
        Route {
            index: i as u64,
            ..Route::default()
        }
    }
}

impl Driver for MqttDriver {
    type Producer = MqttProducer;
    type Consumer = MqttConsumer;
    type Session = MqttSession;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            acks: self.client.qos > 0,
            queue_groups: true,
            request_reply: false,
            responses: false,
            metadata: false,
        }
    }

    /// Plain-TCP sessions can live in io_uring tables; TLS ones need a descriptor each.
    fn fd_free_sessions(&self) -> bool {
        cfg!(target_os = "linux") && self.ep.tls.is_none()
    }

    fn fd_free_consumers(&self) -> bool {
        self.fd_free_sessions()
    }

    fn session_hosts(&self) -> usize {
        self.ep.targets.len()
    }

    async fn producer(&self, spec: &ProducerSpec) -> Result<MqttProducer, DriverError> {
        let conn = self
            .connect("pub", Self::data_route(spec.id), true, DATA_CHUNK)
            .await?;
        conn.check_qos(self.client.qos)?;
        let keep_alive = conn.keep_alive();
        Ok(MqttProducer {
            conn,
            topics: spec.topics.iter().map(|t| Bytes::from(t.clone())).collect(),
            qos: self.client.qos,
            retain: self.client.retain,
            ids: PacketIds::new(),
            // A session the broker keeps must get its unacknowledged messages again after a
            // reconnection (MQTT 3.1.1 §4.4, MQTT 5 §4.4), so they are kept.
            kept: (self.client.persistent_session && self.client.qos > 0).then(Vec::new),
            acks: VecDeque::new(),
            release_pending: false,
            downgraded: false,
            refusal_told: false,
            size: SizeWatch::default(),
            keep_alive,
            last_write: Instant::now(),
        })
    }

    async fn consumer(&self, spec: &ConsumerSpec) -> Result<MqttConsumer, DriverError> {
        let mut conn = self
            .connect(
                "sub",
                Route {
                    source: spec.source,
                    fd_free: spec.fd_free,
                    ..Self::data_route(spec.id)
                },
                true,
                DATA_CHUNK,
            )
            .await?;
        let filter = match &spec.group {
            // A broker that says it takes no shared subscriptions would refuse the filter
            // (or, lenient, treat it as a topic of that name and deliver nothing).
            Some(_) if !conn.shared_subs => {
                return Err(DriverError::Config(
                    "the broker does not offer shared subscriptions (its CONNACK says Shared \
                     Subscription Available 0), which a queue group needs ($share/GROUP/...): \
                     run without --queue-group"
                        .into(),
                ));
            }
            Some(_) => filter_of(spec),
            None => spec.topic.clone(),
        };
        conn.check_qos(self.client.qos)?;
        conn.subscribe(&[(filter, self.client.qos)]).await?;
        if spec.lean {
            // One of thousands of receivers: no idle buffers, starting with the handshake's
            // (held until the run begins, they would make the connect ramp's peak).
            conn.wire.lean();
            conn.wire.shrink();
        }
        let keep_alive = conn.keep_alive();
        let share_on_v3 = (spec.group.is_some() && self.version == Version::V311)
            .then(|| (filter_of(spec), self.events.clone()));
        Ok(MqttConsumer {
            conn,
            keep_alive,
            ping: Box::pin(tokio::time::sleep(ping_period(keep_alive))),
            acks: AckBatch::new(self.client.ack_every),
            meta: spec.meta,
            share_on_v3,
            received_any: false,
        })
    }

    async fn session(&self, spec: &SessionSpec) -> Result<MqttSession, DriverError> {
        let route = Route {
            index: spec.id,
            source: spec.source,
            fd_free: spec.fd_free,
        };
        let conn = self.connect("conn", route, false, SESSION_CHUNK).await?;
        let keep_alive = conn.keep_alive();
        Ok(MqttSession {
            conn,
            topic: Bytes::from(spec.topic.clone()),
            keep_alive,
            next_ping: Instant::now() + ping_period(keep_alive),
            received: (0, 0),
            reply_prefix: None,
            requests: 0,
        })
    }

    fn sessions_subscribe(&self) -> bool {
        true
    }

    /// MQTT 5 only: a request names its response topic in the PUBLISH (3.1.1 has no such
    /// property, so a responder could not know where to answer).
    fn sessions_request(&self) -> bool {
        self.version == Version::V5
    }
}

/// The filter a consumer of a queue group subscribes to: `$share/GROUP/TOPIC`.
fn filter_of(spec: &ConsumerSpec) -> String {
    match &spec.group {
        Some(g) => format!("$share/{g}/{}", spec.topic),
        None => spec.topic.clone(),
    }
}

/// How often an otherwise silent client pings: a little before the keep-alive runs out.
fn ping_period(keep_alive: Duration) -> Duration {
    if keep_alive.is_zero() {
        Duration::from_secs(3600 * 24 * 365)
    } else {
        keep_alive.mul_f64(0.75)
    }
}

/// A producer's QoS 1/2 packet ids and the runner's token of the message under each.
///
/// Ids cycle through a table that starts at 64 and doubles, up to MQTT's 65,535, only when
/// every id in it is in flight. A full-size table is 512 KiB per connection: with a window of
/// one or a few messages that was most of the generator's memory, and the kernel zeroing its
/// pages a good part of a short run's CPU.
struct PacketIds {
    /// Token in flight under each id (`FREE` if none); index 0 is unused (id 0 is invalid).
    tokens: Vec<u64>,
    /// The id taken last.
    last: u16,
    in_flight: u32,
}

const FREE: u64 = u64::MAX;

impl PacketIds {
    const FIRST: usize = 64;

    fn new() -> Self {
        Self {
            tokens: vec![FREE; Self::FIRST + 1],
            last: 0,
            in_flight: 0,
        }
    }

    fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// The size of the table (ids 1..capacity).
    fn capacity(&self) -> usize {
        self.tokens.len()
    }

    /// (token, id) of every message in flight.
    fn in_flight_ids(&self) -> impl Iterator<Item = (u64, u16)> + '_ {
        self.tokens
            .iter()
            .enumerate()
            .filter(|(_, t)| **t != FREE)
            .map(|(id, t)| (*t, id as u16))
    }

    /// A free id for `token`; `None` only with 65,535 messages in flight.
    fn take(&mut self, token: u64) -> Option<u16> {
        let ids = self.tokens.len() - 1;
        if self.in_flight as usize >= ids {
            if ids >= u16::MAX as usize {
                return None;
            }
            self.tokens
                .resize((2 * ids + 1).min(u16::MAX as usize + 1), FREE);
            self.last = ids as u16;
        }
        let ids = self.tokens.len() - 1;
        for _ in 0..ids {
            self.last = if self.last as usize >= ids {
                1
            } else {
                self.last + 1
            };
            let slot = &mut self.tokens[self.last as usize];
            if *slot == FREE {
                *slot = token;
                self.in_flight += 1;
                return Some(self.last);
            }
        }
        None
    }

    /// The token under `id`, which is free again; `None` if nothing of ours is in flight
    /// under it (a duplicate acknowledgement, or an id the broker made up).
    fn release(&mut self, id: u16) -> Option<u64> {
        let slot = self.tokens.get_mut(id as usize)?;
        if *slot == FREE {
            return None;
        }
        self.in_flight -= 1;
        Some(std::mem::replace(slot, FREE))
    }

    /// Frees every id; the highest token that was in flight, if any was.
    fn release_all(&mut self) -> Option<u64> {
        if self.in_flight == 0 {
            return None;
        }
        let up_to = self.tokens.iter().copied().filter(|t| *t != FREE).max();
        self.tokens.fill(FREE);
        self.in_flight = 0;
        up_to
    }
}

/// The sending side: one connection; QoS 1/2 packet ids map to the runner's tokens.
pub struct MqttProducer {
    conn: Conn,
    topics: Vec<Bytes>,
    qos: u8,
    retain: bool,
    ids: PacketIds,
    /// With a persistent session: the encoded PUBLISH of each packet id in flight, to be sent
    /// again (DUP set) when the broker kept the session across a reconnection; empty once
    /// PUBREC came (a PUBREL is sent again instead). Buffers are reused.
    kept: Option<Vec<Vec<u8>>>,
    acks: VecDeque<Ack>,
    /// A PUBREL waits in the write buffer: the next ack poll must write it, or its PUBCOMP
    /// never comes.
    release_pending: bool,
    /// The broker answered a QoS 2 publish with PUBACK (warned once).
    downgraded: bool,
    /// A refusal (PUBACK or PUBREC reason code ≥ 0x80) was told already.
    refusal_told: bool,
    keep_alive: Duration,
    /// When the connection last carried anything from us (the keep-alive clock).
    last_write: Instant,
    size: SizeWatch,
}

/// What a lost connection suggests about message size. MQTT 3.1.1 cannot announce a maximum
/// packet size, and brokers close the connection on a PUBLISH over theirs (Moquette's 8092
/// bytes, ActiveMQ Classic's frame size, rumqttd's payload limit): a producer cut off before
/// the broker acknowledged anything on that connection, right after a large PUBLISH, is told
/// so once, where it would otherwise reconnect and be cut again with only an end of file.
#[derive(Default)]
struct SizeWatch {
    /// The largest PUBLISH payload written on this connection.
    largest: usize,
    /// The broker acknowledged something on this connection.
    acked: bool,
    told: bool,
}

impl SizeWatch {
    /// A hint for a connection lost with `e`, once per producer.
    fn hint(&mut self, e: &std::io::Error, qos: u8, lived: Duration) -> Option<String> {
        let cut = matches!(
            e.kind(),
            std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
        );
        // QoS 0 has no acknowledgement: a connection cut within a second stands for one.
        let nothing_taken = if qos > 0 {
            !self.acked
        } else {
            lived < Duration::from_secs(1)
        };
        let hint = (!self.told && cut && nothing_taken && self.largest > 1000).then(|| {
            format!(
                "the broker closed the connection before acknowledging anything on it, after a \
                 {}-byte PUBLISH: a broker closes the connection on a packet over its maximum \
                 size, which MQTT 3.1.1 cannot announce (Moquette's default is 8092 bytes): a \
                 smaller --size?",
                self.largest
            )
        });
        self.told |= hint.is_some();
        self.largest = 0;
        self.acked = false;
        hint
    }
}

impl MqttProducer {
    fn on_packet(&mut self, p: Packet) {
        match p {
            Packet::PubAck { pid, .. } if self.qos == 2 => {
                // The broker took a QoS 2 message as QoS 1 (a 3.1.1 broker whose maximum is
                // 1 downgrades silently): not what the run measures, so not a success.
                if !self.downgraded {
                    self.downgraded = true;
                    self.conn.warn(
                        "the broker answered a QoS 2 PUBLISH with PUBACK, i.e. took it as QoS 1 \
                         (its maximum QoS may be 1): such messages are counted as nacked; use \
                         --qos 1",
                    );
                }
                self.complete(pid, false);
            }
            Packet::PubAck { pid, code } => {
                self.refused(code);
                self.complete(pid, code < 0x80)
            }
            Packet::PubRec { pid, code } => {
                if code >= 0x80 {
                    self.refused(code);
                    self.complete(pid, false);
                } else {
                    codec::put_ack(&mut self.conn.wire.wbuf, codec::PUBREL, pid);
                    self.release_pending = true;
                    if let Some(b) = self.kept.as_mut().and_then(|k| k.get_mut(pid as usize)) {
                        b.clear();
                    }
                }
            }
            Packet::PubComp { pid } => self.complete(pid, true),
            // Lost with the broker's reason (else only the end of file that follows shows);
            // the next send reconnects.
            Packet::Disconnect { code, .. } => self.conn.lost(&codec::disconnected_by_broker(code)),
            _ => {}
        }
    }

    /// An MQTT 5 refusal of a publish, told once per producer with the broker's reason (the
    /// refusals themselves are counted as nacks).
    fn refused(&mut self, code: u8) {
        if code >= 0x80 && !self.refusal_told {
            self.refusal_told = true;
            self.conn.warn(&format!(
                "the broker refused a publish: {} (reason code 0x{code:02x}); further refusals \
                 are counted as nacked, not told",
                codec::disconnect_reason(code)
            ));
        }
    }

    fn complete(&mut self, pid: u16, ok: bool) {
        self.size.acked = true;
        if let Some(token) = self.ids.release(pid) {
            self.acks.push_back(Ack::One { token, ok });
        }
    }

    /// The connection is gone and no kept session will bring back what was in flight on it
    /// (see [`MqttProducer::reconnect`]): it is in doubt now rather than when its
    /// acknowledgement time-out runs out, which a producer with nothing left to send would
    /// otherwise wait for.
    fn abandon_in_flight(&mut self) {
        if let Some(up_to) = self.ids.release_all() {
            self.acks.push_back(Ack::InDoubt { up_to });
        }
    }

    /// Marks the connection lost and its messages in flight in doubt, unless a persistent
    /// session may bring them back (see [`MqttProducer::reconnect`]).
    fn lose(&mut self, e: &std::io::Error) {
        let lived = self.conn.lived();
        if self.conn.is_connected()
            && let Some(h) = self.size.hint(e, self.qos, lived)
        {
            self.conn.warn(&h);
        }
        self.conn.lost(e);
        if self.kept.is_none() {
            self.abandon_in_flight();
        }
    }

    /// Reconnects; with a persistent session the broker kept, what was in flight is sent
    /// again in its original order, PUBLISH with DUP set or PUBREL (the protocol requires
    /// it, and a strict broker waits for it); otherwise it is in doubt.
    async fn reconnect(&mut self) -> Result<(), DriverError> {
        if self.kept.is_none() {
            self.abandon_in_flight();
        }
        self.conn.try_reconnect().await?;
        let Some(kept) = self.kept.as_ref() else {
            return Ok(());
        };
        if !self.conn.session_present {
            self.abandon_in_flight();
            return Ok(());
        }
        let mut again: Vec<(u64, u16)> = self.ids.in_flight_ids().collect();
        again.sort_unstable();
        let wbuf = &mut self.conn.wire.wbuf;
        for (_, pid) in again {
            match kept.get(pid as usize) {
                Some(b) if !b.is_empty() => {
                    wbuf.extend_from_slice(b);
                    let at = wbuf.len() - b.len();
                    wbuf[at] |= 0x08;
                }
                _ => {
                    codec::put_ack(wbuf, codec::PUBREL, pid);
                    self.release_pending = true;
                }
            }
        }
        self.write_out().await
    }

    /// Takes what the broker sent without waiting.
    fn service_reads(&mut self) {
        let mut cx = Context::from_waker(Waker::noop());
        while let Poll::Ready(r) = self.conn.poll_packet(&mut cx, false) {
            match r {
                Ok(p) => self.on_packet(p),
                Err(e) => {
                    self.lose(&e);
                    break;
                }
            }
        }
    }

    async fn write_out(&mut self) -> Result<(), DriverError> {
        if let Err(e) = self.conn.flush().await {
            self.lose(&e);
            return Err(DriverError::Send(e.to_string()));
        }
        self.release_pending = false;
        self.last_write = Instant::now();
        Ok(())
    }
}

impl Producer for MqttProducer {
    async fn send(&mut self, msg: Outbound<'_>) -> Result<(), DriverError> {
        if !self.conn.is_connected() {
            self.reconnect().await?;
        }
        let topic = &self.topics[msg.stream as usize];
        let max = self.conn.server_max_packet as usize;
        let len = codec::publish_len(
            self.conn.version(),
            topic.len(),
            msg.payload.len(),
            self.qos,
        );
        if (max > 0 && len > max) || len > codec::MAX_REMAINING {
            return Err(DriverError::Config(format!(
                "a {}-byte message exceeds the broker's maximum packet size ({} bytes)",
                msg.payload.len(),
                if max > 0 { max } else { codec::MAX_REMAINING }
            )));
        }
        let mut pid = 0;
        if self.qos > 0 {
            // The broker's receive maximum bounds what may be unacknowledged.
            while self.ids.in_flight() >= self.conn.receive_max as u32 {
                self.write_out().await?;
                match self.conn.read_packet().await {
                    Ok(p) => self.on_packet(p),
                    Err(e) => {
                        self.lose(&e);
                        return Err(DriverError::Send(e.to_string()));
                    }
                }
            }
            pid = match self.ids.take(msg.token) {
                Some(p) => p,
                None => return Err(DriverError::Send("no free MQTT packet id".into())),
            };
        }
        let topic = &self.topics[msg.stream as usize];
        let version = self.conn.version();
        let start = self.conn.wire.wbuf.len();
        self.size.largest = self.size.largest.max(msg.payload.len());
        codec::put_publish(
            &mut self.conn.wire.wbuf,
            version,
            topic,
            msg.payload,
            self.qos,
            self.retain,
            false,
            pid,
        );
        if let Some(kept) = self.kept.as_mut() {
            if kept.len() <= pid as usize {
                kept.resize_with(self.ids.capacity(), Vec::new);
            }
            let b = &mut kept[pid as usize];
            b.clear();
            b.extend_from_slice(&self.conn.wire.wbuf[start..]);
        }
        if self.conn.wire.wbuf.len() >= WRITE_BATCH {
            self.write_out().await?;
            self.service_reads();
        }
        Ok(())
    }

    /// Writes what is buffered; a producer slower than its keep-alive also pings here (the
    /// runner calls `idle` at least once per tick while it waits).
    async fn idle(&mut self) -> Result<(), DriverError> {
        if !self.conn.is_connected() {
            // Kept messages in flight wait for this reconnection (a full window sends
            // nothing that would reconnect); otherwise the next send reconnects.
            if self.kept.is_some() && self.ids.in_flight() > 0 {
                self.reconnect().await?;
            }
            return Ok(());
        }
        if self.conn.wire.wbuf.is_empty()
            && self.last_write.elapsed() >= ping_period(self.keep_alive)
        {
            codec::put_pingreq(&mut self.conn.wire.wbuf);
        }
        if !self.conn.wire.wbuf.is_empty() {
            self.write_out().await?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), DriverError> {
        if !self.conn.is_connected() {
            return Err(DriverError::Closed);
        }
        self.write_out().await
    }

    fn poll_ack(&mut self, cx: &mut Context<'_>) -> Poll<Option<Ack>> {
        loop {
            if let Some(a) = self.acks.pop_front() {
                return Poll::Ready(Some(a));
            }
            if !self.conn.is_connected() {
                // The next send reconnects.
                return Poll::Pending;
            }
            if self.release_pending {
                match self.conn.poll_flush(cx) {
                    Poll::Ready(Ok(())) => self.release_pending = false,
                    Poll::Ready(Err(e)) => {
                        self.lose(&e);
                        return Poll::Pending;
                    }
                    Poll::Pending => {}
                }
            }
            match self.conn.poll_packet(cx, false) {
                Poll::Ready(Ok(p)) => self.on_packet(p),
                Poll::Ready(Err(e)) => {
                    self.lose(&e);
                    return Poll::Pending;
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    async fn close(mut self) -> Result<(), DriverError> {
        if self.conn.is_connected() {
            let _ = self.conn.flush().await;
            self.conn.disconnect().await;
        }
        Ok(())
    }
}

/// The receiving side: one connection, one subscription.
pub struct MqttConsumer {
    conn: Conn,
    keep_alive: Duration,
    ping: Pin<Box<Sleep>>,
    acks: AckBatch,
    /// Put each message's topic name in `Meta::topic` ([`ConsumerSpec::meta`]).
    meta: bool,
    /// A shared subscription over MQTT 3.1.1, where `$share` is an extension some brokers
    /// lack: its filter, and where to say so if nothing arrived through it.
    share_on_v3: Option<(String, EventSink)>,
    /// Whether anything was delivered (see `share_on_v3`).
    received_any: bool,
}

/// Longest an acknowledgement waits for others to share its write, when consumers batch them
/// (`ack_every` > 1; tokio's timer rounds it up to the next millisecond).
///
/// With `ack_every` = 1 each acknowledgement goes out as soon as the consumer has nothing more
/// to read, as MQTT client libraries do. A broker that sends each delivery in its own TCP
/// segment then gets one segment back per delivery, and that kernel work, on both sides, is
/// most of what a subscriber costs. Batched, the acknowledgements go out in one write once
/// `ack_every` are owed or the first is this old. Receive timestamps are not affected; what
/// changes is the broker's side: its window of unacknowledged deliveries stays fuller, and a
/// broker with Nagle's algorithm on sends its next small delivery only once the previous one
/// is acknowledged, so it may hold that delivery until the batch goes out (and then sends
/// several in one segment: fewer segments, but up to this much more latency at steady rates).
pub const MAX_ACK_DELAY: Duration = Duration::from_millis(1);

/// When a consumer writes the acknowledgements it owes (PUBACK, PUBREC, PUBCOMP): at once, or
/// per batch of `every` bounded by [`MAX_ACK_DELAY`].
struct AckBatch {
    every: u32,
    owed: u32,
    deadline: Pin<Box<Sleep>>,
}

impl AckBatch {
    fn new(every: u32) -> AckBatch {
        AckBatch {
            every: every.max(1),
            owed: 0,
            deadline: Box::pin(tokio::time::sleep(Duration::ZERO)),
        }
    }

    /// One more acknowledgement was put in the write buffer.
    fn owe(&mut self) {
        if self.every > 1 && self.owed == 0 {
            self.deadline.as_mut().reset(Instant::now() + MAX_ACK_DELAY);
        }
        self.owed = self.owed.saturating_add(1);
    }

    /// Whether the write buffer should go out before the next read; `written` says whether it
    /// is empty (flushed, or the connection was replaced). A pending deadline wakes the task.
    fn due(&mut self, cx: &mut Context<'_>, written: bool) -> bool {
        if written {
            self.owed = 0;
        }
        self.owed == 0 || self.owed >= self.every || self.deadline.as_mut().poll(cx).is_ready()
    }
}

impl MqttConsumer {
    fn poll_delivery(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<Delivery>> {
        loop {
            if self.ping.as_mut().poll(cx).is_ready() {
                codec::put_pingreq(&mut self.conn.wire.wbuf);
                let next = Instant::now() + ping_period(self.keep_alive);
                self.ping.as_mut().reset(next);
            }
            let flush = self.acks.due(cx, self.conn.wire.wbuf.is_empty());
            match self.conn.poll_packet(cx, flush) {
                Poll::Ready(Ok(Packet::Publish(p))) => {
                    match p.qos {
                        1 => codec::put_ack(&mut self.conn.wire.wbuf, codec::PUBACK, p.pid),
                        2 => codec::put_ack(&mut self.conn.wire.wbuf, codec::PUBREC, p.pid),
                        _ => {}
                    }
                    if p.qos > 0 {
                        self.acks.owe();
                    }
                    let meta = self.meta.then(|| {
                        Box::new(msgbench_core::meta::Meta {
                            topic: Some(String::from_utf8_lossy(&p.topic).into_owned()),
                            ..Default::default()
                        })
                    });
                    return Poll::Ready(Ok(Delivery {
                        payload: p.payload,
                        redelivered: p.dup,
                        meta,
                    }));
                }
                Poll::Ready(Ok(Packet::PubRel { pid })) => {
                    codec::put_ack(&mut self.conn.wire.wbuf, codec::PUBCOMP, pid);
                    self.acks.owe();
                }
                Poll::Ready(Ok(Packet::Disconnect { code, .. })) => {
                    return Poll::Ready(Err(codec::disconnected_by_broker(code)));
                }
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

use std::future::Future as _;

impl Consumer for MqttConsumer {
    async fn recv(&mut self) -> Result<Option<Delivery>, DriverError> {
        loop {
            if !self.conn.is_connected() {
                self.conn.reconnect().await;
            }
            match std::future::poll_fn(|cx| self.poll_delivery(cx)).await {
                Ok(d) => {
                    self.received_any = true;
                    return Ok(Some(d));
                }
                Err(e) => self.conn.lost(&e),
            }
        }
    }

    /// Disconnects; a shared subscription over MQTT 3.1.1 that delivered nothing says why
    /// that may be (aedes and amqtt take `$share/...` for a topic name there: the run then
    /// ends with everything lost and no other clue).
    async fn close(mut self) -> Result<(), DriverError> {
        if let Some((filter, events)) = &self.share_on_v3
            && !self.received_any
        {
            events.emit(
                DriverEventKind::Warning,
                format!(
                    "nothing arrived through the shared subscription `{filter}`: MQTT 3.1.1 has \
                     no shared subscriptions, and a broker without that extension (aedes, \
                     amqtt) takes the filter for a topic of that name; MQTT 5 has them \
                     (--mqtt-version 5)"
                ),
            );
        }
        self.conn.disconnect().await;
        Ok(())
    }
}

/// A held connection of a connection-scale run.
pub struct MqttSession {
    conn: Conn,
    topic: Bytes,
    keep_alive: Duration,
    next_ping: Instant,
    /// Messages and payload bytes its subscriptions delivered, not yet taken.
    received: (u64, u64),
    /// Request/reply (MQTT 5): the response topics' prefix (`msgbench/reply/<client id>/`),
    /// subscribed at the first request.
    reply_prefix: Option<Bytes>,
    /// Requests sent: the last one's number ends its response topic.
    requests: u64,
}

/// Counts `p` in `received` if it is a delivery.
fn count_delivery(received: &mut (u64, u64), p: &Packet) {
    if let Packet::Publish(m) = p {
        received.0 += 1;
        received.1 += m.payload.len() as u64;
    }
}

impl Session for MqttSession {
    async fn publish(&mut self, payload: &[u8]) -> Result<(), DriverError> {
        let v = self.conn.version();
        codec::put_publish(
            &mut self.conn.wire.wbuf,
            v,
            &self.topic,
            payload,
            0,
            false,
            false,
            0,
        );
        self.conn
            .flush()
            .await
            .map_err(|e| DriverError::Send(e.to_string()))?;
        self.next_ping = Instant::now() + ping_period(self.keep_alive);
        Ok(())
    }

    async fn keep_alive(&mut self) -> DriverError {
        loop {
            tokio::select! {
                p = self.conn.read_packet() => match p {
                    Ok(Packet::Disconnect { code, .. }) => {
                        return DriverError::Receive(codec::disconnected_by_broker(code).to_string());
                    }
                    Ok(p) => count_delivery(&mut self.received, &p),
                    Err(e) => return DriverError::Receive(e.to_string()),
                },
                _ = tokio::time::sleep_until(self.next_ping) => {
                    codec::put_pingreq(&mut self.conn.wire.wbuf);
                    self.next_ping = Instant::now() + ping_period(self.keep_alive);
                    if let Err(e) = self.conn.flush().await {
                        return DriverError::Send(e.to_string());
                    }
                }
            }
        }
    }

    async fn close(mut self) -> Result<(), DriverError> {
        self.conn.disconnect().await;
        Ok(())
    }

    /// QoS 0; the session's packet id 1 is free (its publishes are QoS 0 too). Deliveries
    /// that arrive before the SUBACK (of an earlier subscription) are counted.
    async fn subscribe(&mut self, topic: &str) -> Result<(), DriverError> {
        let received = &mut self.received;
        self.conn
            .subscribe_once(&[(topic.to_string(), 0)], |p| count_delivery(received, p))
            .await
    }

    /// An MQTT 5 request: a QoS 0 PUBLISH with the response topic `<prefix><n>` and the
    /// correlation data `<n>`, as responders expect; done at the PUBLISH on that topic (a late
    /// reply to an earlier request, whose wait timed out, is dropped). The session subscribes
    /// to `<prefix>+` before its first request.
    async fn request(&mut self, payload: &[u8]) -> Result<(), DriverError> {
        let prefix = match &self.reply_prefix {
            Some(p) => p.clone(),
            None => {
                // A wildcard character in a (user-chosen) client id would widen the filter.
                let id = self.conn.client_id().replace(['+', '#'], "_");
                let p = format!("msgbench/reply/{id}/");
                let received = &mut self.received;
                self.conn
                    .subscribe_once(&[(format!("{p}+"), 0)], |p| count_delivery(received, p))
                    .await?;
                let p = Bytes::from(p);
                self.reply_prefix = Some(p.clone());
                p
            }
        };
        self.requests += 1;
        let n = self.requests;
        let mut reply_to = Vec::with_capacity(prefix.len() + 20);
        reply_to.extend_from_slice(&prefix);
        reply_to.extend_from_slice(n.to_string().as_bytes());
        codec::put_request(
            &mut self.conn.wire.wbuf,
            &self.topic,
            payload,
            &reply_to,
            &reply_to[prefix.len()..],
        );
        self.conn
            .flush()
            .await
            .map_err(|e| DriverError::Send(e.to_string()))?;
        self.next_ping = Instant::now() + ping_period(self.keep_alive);
        loop {
            let p = self
                .conn
                .read_packet()
                .await
                .map_err(|e| DriverError::Receive(e.to_string()))?;
            match &p {
                Packet::Publish(m) if m.topic.starts_with(&prefix) => {
                    if m.topic[prefix.len()..] == reply_to[prefix.len()..] {
                        return Ok(());
                    }
                }
                Packet::Disconnect { code, .. } => {
                    return Err(DriverError::Receive(
                        codec::disconnected_by_broker(*code).to_string(),
                    ));
                }
                _ => count_delivery(&mut self.received, &p),
            }
        }
    }

    fn take_received(&mut self) -> (u64, u64) {
        std::mem::take(&mut self.received)
    }
}

impl msgbench_core::registration::Registered for MqttDriver {
    const INFO: msgbench_core::registration::DriverInfo = msgbench_core::registration::DriverInfo {
        name: "mqtt",
        schemes: &["mqtt", "mqtts", "mqtt+ws", "mqtt+wss"],
        // acks: at QoS 1 and 2 only (the plan decides).
        about: "MQTT 3.1.1 and 5: QoS 0/1/2 (acks at QoS 1/2), wildcards, $share groups, retained, persistent sessions, TLS, over WebSocket (mqtt+ws://host:port/path), connection workloads (own lean client)",
        caps: Capabilities {
            acks: true,
            queue_groups: true,
            request_reply: false,
            responses: false,
            metadata: false,
        },
        section: None,
    };

    fn build(
        url: &str,
        plan: &msgbench_core::scenario::RunPlan,
        events: EventSink,
    ) -> Result<Self, DriverError> {
        unique_client_ids(url, plan)?;
        MqttDriver::new(
            url,
            &plan.client,
            &plan.tls,
            plan.run_id,
            events,
            plan.connect_timeout,
        )
    }
}

/// MQTT brokers keep one connection per client id and cut an older one when a newer one comes
/// (session takeover): a pattern that gives several of this URL's clients one id is refused
/// before connecting, since such a run would only watch its clients cut each other off.
fn unique_client_ids(
    url: &str,
    plan: &msgbench_core::scenario::RunPlan,
) -> Result<(), DriverError> {
    let pattern = &plan.client.client_id;
    if pattern.contains("{i}") {
        return Ok(());
    }
    let sends = url == plan.target;
    let receives = plan.consume_from.as_deref().unwrap_or(&plan.target) == url;
    let publishers = if sends {
        plan.producers() as u64 + u64::from(plan.connections.is_some()) * 2
    } else {
        0
    };
    let subscribers = if receives { plan.consumers() as u64 } else { 0 };
    let clash = publishers > 1
        || subscribers > 1
        || (publishers > 0 && subscribers > 0 && !pattern.contains("{role}"));
    if clash {
        return Err(DriverError::Config(format!(
            "--client-id `{pattern}` gives several clients the same MQTT client id, and a broker \
             cuts a client off when another connects with its id (session takeover): add `{{i}}` \
             (and `{{role}}` when both publishers and subscribers use it), e.g. `{pattern}-{{role}}-{{i}}`"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(b: &mut AckBatch, written: bool) -> bool {
        b.due(&mut Context::from_waker(Waker::noop()), written)
    }

    #[test]
    fn packet_ids_cycle_grow_only_when_all_are_in_flight_and_stop_at_65535() {
        let mut ids = PacketIds::new();
        // A window of one cycles through the first table without growing it.
        for t in 0..1_000u64 {
            let id = ids.take(t).unwrap();
            assert_eq!(id as u64, t % 64 + 1);
            assert_eq!(ids.release(id), Some(t));
            assert_eq!(ids.release(id), None, "a duplicate ack completes nothing");
        }
        assert_eq!(ids.tokens.len(), 65);
        assert_eq!(
            ids.release(60_000),
            None,
            "an id beyond the table is not ours"
        );

        // A full table doubles; ids in flight stay distinct and keep their tokens.
        let taken: Vec<u16> = (0..100u64).map(|t| ids.take(t).unwrap()).collect();
        assert_eq!(ids.tokens.len(), 129);
        let mut distinct = taken.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 100);
        assert_eq!(ids.release(taken[70]), Some(70));
        assert_eq!(ids.in_flight(), 99);
        assert_eq!(ids.release_all(), Some(99));
        assert_eq!(ids.in_flight(), 0);
        assert_eq!(ids.release_all(), None);

        // 65,535 in flight is MQTT's limit.
        for t in 0..65_535u64 {
            assert!(ids.take(t).is_some(), "id for message {t}");
        }
        assert_eq!(ids.take(70_000), None);
        assert_eq!(ids.tokens.len(), 65_536);
        let freed = ids.release(12_345).unwrap();
        assert_eq!(
            ids.take(7),
            Some(12_345),
            "the one free id, whatever its token was ({freed})"
        );
    }

    #[tokio::test]
    async fn acks_go_out_per_batch_or_when_the_first_is_a_millisecond_old() {
        let mut one = AckBatch::new(1);
        one.owe();
        assert!(due(&mut one, false), "one at a time: always due");

        let mut b = AckBatch::new(3);
        assert!(
            due(&mut b, true),
            "nothing owed: anything else buffered goes out"
        );
        b.owe();
        b.owe();
        assert!(!due(&mut b, false));
        b.owe();
        assert!(due(&mut b, false), "a full batch");
        assert!(due(&mut b, true), "written: nothing owed");

        b.owe();
        assert!(!due(&mut b, false));
        tokio::time::sleep(MAX_ACK_DELAY * 3).await;
        assert!(due(&mut b, false), "the first waited its bound");
        assert!(due(&mut b, true));
        b.owe();
        assert!(!due(&mut b, false), "a new batch starts a new bound");
    }
}
