//! Broker tests over real TCP on 127.0.0.1, with a tiny raw client built on the codec. Every
//! wait is bounded: a bug fails a test, never hangs it.

use super::*;
use bytes::BytesMut;
use msgbench_driver_mqtt::codec::{self, ConnectOpts, Packet, Publish, Version};
use std::collections::HashSet;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio::time::timeout;

/// Longest any single expected packet may take.
const T: Duration = Duration::from_secs(5);
/// How long "nothing more arrives" is watched for.
const QUIET: Duration = Duration::from_millis(300);

struct Server {
    addr: SocketAddr,
    stats: Arc<BrokerStats>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<io::Result<()>>,
}

async fn server() -> Server {
    server_with(BrokerConfig::default()).await
}

async fn server_with(config: BrokerConfig) -> Server {
    let broker = Broker::bind("127.0.0.1:0", config).await.unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    Server {
        addr: broker.local_addr(),
        stats: broker.stats(),
        stop,
        task: tokio::spawn(broker.run(async {
            let _ = stopped.await;
        })),
    }
}

impl Server {
    /// Waits until exactly `n` connections are open (a closed one has fully detached).
    async fn wait_open(&self, n: u64) {
        let t0 = Instant::now();
        while self.stats.snapshot().connections_current != n {
            assert!(t0.elapsed() < T, "still {:?}", self.stats.snapshot());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

struct Client {
    rd: OwnedReadHalf,
    rbuf: BytesMut,
    wr: OwnedWriteHalf,
    v: Version,
    pid: u16,
}

impl Client {
    async fn connect(addr: SocketAddr, v: Version, id: &str) -> Client {
        Client::open(addr, v, id, true, 0).await.0
    }

    /// Connects and returns CONNACK's session-present flag (asserting acceptance).
    async fn open(addr: SocketAddr, v: Version, id: &str, clean: bool, ka: u16) -> (Client, bool) {
        Client::accepted(Client::try_open(addr, v, id, clean, ka, None).await)
    }

    /// What `try_open` returned, asserting the CONNACK accepted: the client and its
    /// session-present flag.
    fn accepted((mut c, code, present): (Client, u8, bool)) -> (Client, bool) {
        assert_eq!(code, 0);
        c.pid = 1;
        (c, present)
    }

    /// Connects; `level` overrides the protocol level byte. Returns the CONNACK code and flag.
    async fn try_open(
        addr: SocketAddr,
        v: Version,
        id: &str,
        clean: bool,
        ka: u16,
        level: Option<u8>,
    ) -> (Client, u8, bool) {
        let expiry = if clean { 0 } else { u32::MAX };
        Client::try_open_expiring(addr, v, id, clean, ka, level, expiry).await
    }

    /// MQTT 5: connects asking for session expiry `expiry` (seconds) whatever `clean` says.
    async fn open_expiring(addr: SocketAddr, id: &str, clean: bool, expiry: u32) -> (Client, bool) {
        Client::accepted(
            Client::try_open_expiring(addr, Version::V5, id, clean, 0, None, expiry).await,
        )
    }

    async fn try_open_expiring(
        addr: SocketAddr,
        v: Version,
        id: &str,
        clean: bool,
        ka: u16,
        level: Option<u8>,
        expiry: u32,
    ) -> (Client, u8, bool) {
        let sock = TcpStream::connect(addr).await.unwrap();
        sock.set_nodelay(true).unwrap();
        let (rd, wr) = sock.into_split();
        let mut c = Client {
            rd,
            rbuf: BytesMut::new(),
            wr,
            v,
            pid: 1,
        };
        let mut b = BytesMut::new();
        codec::put_connect(
            &mut b,
            &ConnectOpts {
                version: v,
                client_id: id,
                keep_alive: ka,
                clean,
                username: Some("anyone"),
                password: Some("anything"),
                session_expiry: expiry,
            },
        );
        if let Some(l) = level {
            b[8] = l;
        }
        c.wr.write_all(&b).await.unwrap();
        match c.recv().await {
            Packet::ConnAck {
                session_present,
                code,
                ..
            } => (c, code, session_present),
            other => panic!("expected CONNACK, got {other:?}"),
        }
    }

    async fn write(&mut self, f: impl FnOnce(&mut BytesMut, Version)) {
        let mut b = BytesMut::new();
        f(&mut b, self.v);
        self.wr.write_all(&b).await.unwrap();
    }

    /// The next packet, or `None` at end of stream.
    async fn next(&mut self) -> Option<Packet> {
        loop {
            if let Some(p) = codec::parse(&mut self.rbuf, self.v, codec::MAX_REMAINING).unwrap() {
                return Some(p);
            }
            self.rbuf.reserve(64 * 1024);
            match self.rd.read_buf(&mut self.rbuf).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }

    async fn recv(&mut self) -> Packet {
        timeout(T, self.next())
            .await
            .expect("no packet in time")
            .expect("connection closed")
    }

    /// The next packet as it came, bytes for bytes (for what the codec does not keep).
    async fn recv_raw(&mut self) -> Vec<u8> {
        loop {
            if let Some(n) = wire::complete_packet(&self.rbuf) {
                return self.rbuf.split_to(n).to_vec();
            }
            let n = timeout(T, self.rd.read_buf(&mut self.rbuf))
                .await
                .expect("no packet in time")
                .unwrap();
            assert!(n > 0, "connection closed");
        }
    }

    async fn recv_publish(&mut self) -> Publish {
        match self.recv().await {
            Packet::Publish(p) => p,
            other => panic!("expected PUBLISH, got {other:?}"),
        }
    }

    /// Asserts nothing arrives for a while.
    async fn quiet(&mut self) {
        if let Ok(p) = timeout(QUIET, self.next()).await {
            panic!("expected nothing, got {p:?}");
        }
    }

    /// Asserts the broker closes the connection within `within`.
    async fn closed(&mut self, within: Duration) {
        loop {
            match timeout(within, self.next()).await {
                Ok(None) => return,
                Ok(Some(_)) => {}
                Err(_) => panic!("connection still open"),
            }
        }
    }

    async fn subscribe(&mut self, filters: &[(&str, u8)]) -> Vec<u8> {
        let pid = self.next_pid();
        self.write(|b, v| codec::put_subscribe(b, v, pid, filters))
            .await;
        match self.recv().await {
            Packet::SubAck { pid: p, codes } if p == pid => codes,
            other => panic!("expected SUBACK {pid}, got {other:?}"),
        }
    }

    fn next_pid(&mut self) -> u16 {
        self.pid = self.pid.wrapping_add(1).max(1);
        self.pid
    }

    /// Publishes; QoS 1 waits for the PUBACK. Returns the packet id used.
    async fn publish(&mut self, topic: &str, payload: &[u8], qos: u8, retain: bool) -> u16 {
        let pid = if qos > 0 { self.next_pid() } else { 0 };
        self.write(|b, v| {
            codec::put_publish(b, v, topic.as_bytes(), payload, qos, retain, false, pid)
        })
        .await;
        if qos == 1 {
            assert_eq!(self.recv().await, Packet::PubAck { pid, code: 0 });
        }
        pid
    }

    async fn ping(&mut self) {
        self.write(|b, _| codec::put_pingreq(b)).await;
        assert_eq!(self.recv().await, Packet::PingResp);
    }

    async fn disconnect(mut self) {
        self.write(|b, _| codec::put_disconnect(b)).await;
        self.closed(T).await;
    }
}

fn pl(p: &Publish) -> &[u8] {
    &p.payload
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos0_publish_reaches_subscriber() {
    let s = server().await;
    let mut sub = Client::connect(s.addr, Version::V311, "sub").await;
    assert_eq!(sub.subscribe(&[("t/a", 0)]).await, vec![0]);
    let mut publ = Client::connect(s.addr, Version::V311, "pub").await;
    publ.publish("t/a", b"hello", 0, false).await;
    let p = sub.recv_publish().await;
    assert_eq!(
        (&p.topic[..], pl(&p), p.qos, p.retain),
        (&b"t/a"[..], &b"hello"[..], 0, false)
    );
    sub.quiet().await;
    let st = s.stats.snapshot();
    assert_eq!((st.connections_current, st.connections_total), (2, 2));
    assert_eq!((st.messages_in, st.messages_out), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos1_acknowledged_both_ways() {
    let s = server().await;
    let mut sub = Client::connect(s.addr, Version::V311, "sub1").await;
    let mut sub0 = Client::connect(s.addr, Version::V5, "sub0").await;
    assert_eq!(sub.subscribe(&[("q1", 1)]).await, vec![1]);
    assert_eq!(sub0.subscribe(&[("q1", 0)]).await, vec![0]);
    let mut publ = Client::connect(s.addr, Version::V311, "pub").await;
    let mut pids = HashSet::new();
    for i in 0..3u8 {
        publ.publish("q1", &[i], 1, false).await; // asserts the PUBACK
        let p = sub.recv_publish().await;
        assert_eq!((p.qos, pl(&p)), (1, &[i][..]));
        assert!(p.pid != 0 && pids.insert(p.pid));
        sub.write(|b, _| codec::put_ack(b, codec::PUBACK, p.pid))
            .await;
        let p0 = sub0.recv_publish().await;
        assert_eq!(
            (p0.qos, pl(&p0)),
            (0, &[i][..]),
            "downgraded to the subscription's QoS"
        );
    }
    sub.ping().await; // the PUBACKs were accepted: the connection is alive
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos2_full_flow_and_duplicate_not_redelivered() {
    let s = server().await;
    let mut sub = Client::connect(s.addr, Version::V5, "sub").await;
    assert_eq!(sub.subscribe(&[("q2", 2)]).await, vec![2]);
    let mut publ = Client::connect(s.addr, Version::V311, "pub").await;
    let publish = |dup: bool, payload: &'static [u8]| {
        move |b: &mut BytesMut, v: Version| {
            codec::put_publish(b, v, b"q2", payload, 2, false, dup, 9)
        }
    };
    publ.write(publish(false, b"once")).await;
    assert_eq!(publ.recv().await, Packet::PubRec { pid: 9, code: 0 });
    // Re-sent before PUBREL: acknowledged again, not routed again.
    publ.write(publish(true, b"once")).await;
    assert_eq!(publ.recv().await, Packet::PubRec { pid: 9, code: 0 });
    publ.write(|b, _| codec::put_ack(b, codec::PUBREL, 9)).await;
    assert_eq!(publ.recv().await, Packet::PubComp { pid: 9 });

    let p = sub.recv_publish().await;
    assert_eq!((p.qos, pl(&p), p.dup), (2, &b"once"[..], false));
    sub.write(|b, _| codec::put_ack(b, codec::PUBREC, p.pid))
        .await;
    assert_eq!(sub.recv().await, Packet::PubRel { pid: p.pid });
    sub.write(|b, _| codec::put_ack(b, codec::PUBCOMP, p.pid))
        .await;
    sub.quiet().await;

    // After PUBCOMP the id is free again: a new message with it is routed.
    publ.write(publish(false, b"twice")).await;
    assert_eq!(publ.recv().await, Packet::PubRec { pid: 9, code: 0 });
    assert_eq!(pl(&sub.recv_publish().await), b"twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wildcards_and_invalid_filters() {
    let s = server().await;
    let mut plus = Client::connect(s.addr, Version::V311, "plus").await;
    let mut hash = Client::connect(s.addr, Version::V5, "hash").await;
    let mut exact = Client::connect(s.addr, Version::V311, "exact").await;
    assert_eq!(plus.subscribe(&[("w/+/x", 0)]).await, vec![0]);
    assert_eq!(hash.subscribe(&[("w/#", 1)]).await, vec![1]);
    assert_eq!(exact.subscribe(&[("w/a", 0)]).await, vec![0]);
    let mut publ = Client::connect(s.addr, Version::V311, "pub").await;
    publ.publish("w/a/x", b"1", 0, false).await;
    publ.publish("w/a", b"2", 0, false).await;
    publ.publish("w/a/y", b"3", 0, false).await;
    assert_eq!(pl(&plus.recv_publish().await), b"1");
    for want in [b"1", b"2", b"3"] {
        assert_eq!(pl(&hash.recv_publish().await), want);
    }
    assert_eq!(pl(&exact.recv_publish().await), b"2");
    plus.quiet().await;
    exact.quiet().await;
    hash.quiet().await;

    // Overlapping filters of one client: one copy at the highest QoS.
    let mut both = Client::connect(s.addr, Version::V311, "both").await;
    assert_eq!(both.subscribe(&[("o/+", 0), ("o/#", 1)]).await, vec![0, 1]);
    publ.publish("o/1", b"o", 1, false).await;
    assert_eq!(both.recv_publish().await.qos, 1);
    both.quiet().await;

    let bad = [
        ("a/#/b", 0),
        ("", 1),
        ("a/b+", 0),
        ("$share/g", 0),
        ("ok/#", 2),
    ];
    assert_eq!(both.subscribe(&bad).await, vec![0x80, 0x80, 0x80, 0x80, 2]);
    assert_eq!(hash.subscribe(&bad).await, vec![0x8f, 0x8f, 0x8f, 0x8f, 2]);

    // UNSUBSCRIBE stops delivery.
    exact
        .write(|b, v| codec::put_unsubscribe(b, v, 77, &["w/a"]))
        .await;
    assert_eq!(exact.recv().await, Packet::UnsubAck { pid: 77 });
    publ.publish("w/a", b"gone", 1, false).await;
    exact.quiet().await;

    // MQTT 5: a reason code per filter, 0x11 where no subscription existed.
    let mut five = Client::connect(s.addr, Version::V5, "five").await;
    assert_eq!(five.subscribe(&[("u/a", 1)]).await, vec![1]);
    five.write(|b, v| codec::put_unsubscribe(b, v, 78, &["u/a", "u/never"]))
        .await;
    assert_eq!(five.recv_raw().await, [0xb0, 5, 0, 78, 0, 0x00, 0x11]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_subscription_delivers_each_message_once() {
    let s = server().await;
    let mut a = Client::connect(s.addr, Version::V5, "a").await;
    let mut b = Client::connect(s.addr, Version::V311, "b").await;
    let mut plain = Client::connect(s.addr, Version::V311, "plain").await;
    assert_eq!(a.subscribe(&[("$share/g/s/+", 1)]).await, vec![1]);
    assert_eq!(b.subscribe(&[("$share/g/s/+", 1)]).await, vec![1]);
    assert_eq!(plain.subscribe(&[("s/x", 0)]).await, vec![0]);
    let mut publ = Client::connect(s.addr, Version::V5, "pub").await;
    const N: usize = 200;
    for i in 0..N {
        publ.publish("s/x", i.to_string().as_bytes(), 1, false)
            .await;
    }
    let mut seen = HashSet::new();
    let mut per = [0usize; 2];
    for (k, c) in [&mut a, &mut b].into_iter().enumerate() {
        while let Ok(Some(Packet::Publish(p))) = timeout(QUIET, c.next()).await {
            assert!(
                seen.insert(p.payload.clone()),
                "delivered twice: {:?}",
                p.payload
            );
            per[k] += 1;
        }
    }
    assert_eq!(seen.len(), N);
    assert_eq!(per, [N / 2, N / 2], "round robin");
    for _ in 0..N {
        plain.recv_publish().await; // non-shared subscribers get everything
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retained_message_goes_to_late_subscribers() {
    let s = server().await;
    let mut publ = Client::connect(s.addr, Version::V311, "pub").await;
    publ.publish("r/1", b"keep", 1, true).await;
    publ.publish("r/2", b"other", 0, true).await;
    publ.ping().await;
    let mut late = Client::connect(s.addr, Version::V5, "late").await;
    assert_eq!(late.subscribe(&[("r/1", 1)]).await, vec![1]);
    let p = late.recv_publish().await;
    assert_eq!(
        (&p.topic[..], pl(&p), p.retain, p.qos),
        (&b"r/1"[..], &b"keep"[..], true, 1)
    );
    late.quiet().await;
    // Live messages carry retain = 0, even when published retained.
    publ.publish("r/1", b"new", 0, true).await;
    let p = late.recv_publish().await;
    assert_eq!((pl(&p), p.retain), (&b"new"[..], false));
    // A wildcard subscription gets every match; an empty retained payload deletes.
    publ.publish("r/2", b"", 1, true).await;
    let mut wild = Client::connect(s.addr, Version::V311, "wild").await;
    assert_eq!(wild.subscribe(&[("r/#", 0)]).await, vec![0]);
    let p = wild.recv_publish().await;
    assert_eq!(
        (&p.topic[..], pl(&p), p.retain, p.qos),
        (&b"r/1"[..], &b"new"[..], true, 0)
    );
    wild.quiet().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_session_keeps_subscriptions_and_queues_messages() {
    let s = server().await;
    let (mut sub, present) = Client::open(s.addr, Version::V311, "keeper", false, 0).await;
    assert!(!present);
    assert_eq!(sub.subscribe(&[("p/t", 1)]).await, vec![1]);
    sub.disconnect().await;
    s.wait_open(0).await;

    let mut publ = Client::connect(s.addr, Version::V5, "pub").await;
    for i in 0..3u8 {
        publ.publish("p/t", &[i], 1, false).await;
    }
    publ.publish("p/t", b"qos0 is dropped offline", 0, false)
        .await;
    publ.ping().await;

    let (mut sub, present) = Client::open(s.addr, Version::V311, "keeper", false, 0).await;
    assert!(present, "session present");
    for i in 0..3u8 {
        let p = sub.recv_publish().await;
        assert_eq!((pl(&p), p.qos), (&[i][..], 1));
        sub.write(|b, _| codec::put_ack(b, codec::PUBACK, p.pid))
            .await;
    }
    sub.quiet().await;
    publ.publish("p/t", b"live", 1, false).await;
    assert_eq!(
        pl(&sub.recv_publish().await),
        b"live",
        "subscription restored"
    );
    sub.disconnect().await;
    s.wait_open(1).await;

    // Clean session discards it.
    let (mut sub, present) = Client::open(s.addr, Version::V5, "keeper", true, 0).await;
    assert!(!present);
    publ.publish("p/t", b"nobody", 1, false).await;
    sub.quiet().await;
}

/// MQTT 5: the session expiry interval, not Clean Start, says whether a session outlives its
/// connection [MQTT-3.1.2-23]; Clean Start = 1 only discards an existing one. Found with Paho
/// v5 and the HiveMQ client, whose sessions started clean were gone at their next connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt5_session_expiry_decides_what_outlives_the_connection() {
    let s = server().await;
    let mut publ = Client::connect(s.addr, Version::V5, "pub-x").await;
    // Clean Start = 1 with an expiry: kept, and what came meanwhile is queued.
    let (mut sub, present) = Client::open_expiring(s.addr, "x1", true, 300).await;
    assert!(!present);
    assert_eq!(sub.subscribe(&[("x/t", 1)]).await, vec![1]);
    sub.disconnect().await;
    s.wait_open(1).await;
    publ.publish("x/t", b"kept", 1, false).await;
    publ.ping().await;
    let (mut sub, present) = Client::open_expiring(s.addr, "x1", false, 300).await;
    assert!(present, "a session started clean with an expiry is kept");
    let p = sub.recv_publish().await;
    assert_eq!(pl(&p), b"kept");
    sub.write(|b, _| codec::put_ack(b, codec::PUBACK, p.pid))
        .await;
    sub.disconnect().await;
    s.wait_open(1).await;
    // Clean Start = 0 without an expiry: the session ends with the connection.
    let (sub, _) = Client::open_expiring(s.addr, "x2", false, 0).await;
    drop(sub);
    s.wait_open(1).await;
    let (_sub, present) = Client::open_expiring(s.addr, "x2", false, 300).await;
    assert!(!present, "expiry 0 ends the session with its connection");
    // An expiry that passed while the client was away ends it too.
    let (mut sub, _) = Client::open_expiring(s.addr, "x3", false, 1).await;
    assert_eq!(sub.subscribe(&[("x/t", 1)]).await, vec![1]);
    sub.disconnect().await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let (_sub, present) = Client::open_expiring(s.addr, "x3", false, 300).await;
    assert!(!present, "expired after 1 s");
}

/// An MQTT 5 DISCONNECT may carry a new session expiry interval (Paho and the HiveMQ client
/// send one): 0 ends a session the CONNECT would have kept; a CONNECT's 0 cannot be
/// lengthened there (a protocol error [MQTT-3.14.2-2]: the session still ends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt5_disconnect_sets_the_session_expiry() {
    let s = server().await;
    // DISCONNECT, reason 0, properties: session expiry interval (0x11) of 4 bytes.
    let disconnect = |expiry: u32| {
        let mut p = vec![0xe0, 7, 0, 5, 0x11];
        p.extend_from_slice(&expiry.to_be_bytes());
        p
    };
    let (mut sub, _) = Client::open_expiring(s.addr, "d1", true, 300).await;
    assert_eq!(sub.subscribe(&[("d/t", 1)]).await, vec![1]);
    sub.write(|b, _| b.extend_from_slice(&disconnect(0))).await;
    sub.closed(T).await;
    s.wait_open(0).await;
    let (_sub, present) = Client::open_expiring(s.addr, "d1", false, 300).await;
    assert!(!present, "DISCONNECT's expiry 0 ended the session");

    // And the other way: kept for 300 s though the CONNECT said 1.
    let (mut sub, _) = Client::open_expiring(s.addr, "d2", true, 1).await;
    assert_eq!(sub.subscribe(&[("d/t", 1)]).await, vec![1]);
    sub.write(|b, _| b.extend_from_slice(&disconnect(300)))
        .await;
    sub.closed(T).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let (_sub2, present) = Client::open_expiring(s.addr, "d2", false, 300).await;
    assert!(
        present,
        "DISCONNECT's expiry 300 outlasted the CONNECT's 1 s"
    );

    let (mut sub, _) = Client::open_expiring(s.addr, "d3", true, 0).await;
    assert_eq!(sub.subscribe(&[("d/t", 1)]).await, vec![1]);
    sub.write(|b, _| b.extend_from_slice(&disconnect(300)))
        .await;
    sub.closed(T).await;
    s.wait_open(2).await;
    let (_sub3, present) = Client::open_expiring(s.addr, "d3", false, 300).await;
    assert!(
        !present,
        "a CONNECT's expiry 0 is not lengthened by DISCONNECT"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt5_and_311_interoperate() {
    let s = server().await;
    let mut s5 = Client::connect(s.addr, Version::V5, "s5").await;
    let mut s3 = Client::connect(s.addr, Version::V311, "s3").await;
    assert_eq!(s5.subscribe(&[("i/t", 1)]).await, vec![1]);
    assert_eq!(s3.subscribe(&[("i/t", 1)]).await, vec![1]);
    let mut p5 = Client::connect(s.addr, Version::V5, "p5").await;
    let mut p3 = Client::connect(s.addr, Version::V311, "p3").await;
    p5.publish("i/t", b"from five", 1, false).await;
    p3.publish("i/t", b"from three", 0, false).await;
    for c in [&mut s5, &mut s3] {
        let a = c.recv_publish().await;
        let b = c.recv_publish().await;
        assert_eq!(
            (&a.topic[..], pl(&a), a.qos),
            (&b"i/t"[..], &b"from five"[..], 1)
        );
        assert_eq!((pl(&b), b.qos), (&b"from three"[..], 0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_expiry_closes_silent_client() {
    let s = server().await;
    let (mut c, _) = Client::open(s.addr, Version::V311, "quiet", true, 1).await;
    let t0 = Instant::now();
    c.closed(Duration::from_secs(3)).await;
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(1200), "closed after {took:?}");
    // A client that pings in time stays.
    let (mut c, _) = Client::open(s.addr, Version::V311, "pinger", true, 1).await;
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        c.ping().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_to_own_subscription_does_not_deadlock() {
    // A small queue makes the reader wait on its own writer constantly.
    let s = server_with(BrokerConfig {
        queue_depth: 16,
        ..BrokerConfig::default()
    })
    .await;
    let mut c = Client::connect(s.addr, Version::V5, "loop").await;
    assert_eq!(c.subscribe(&[("loop", 1)]).await, vec![1]);
    const N: u16 = 20_000;
    let (mut rd, mut rbuf, mut wr) = (c.rd, c.rbuf, c.wr);
    let writer = tokio::spawn(async move {
        let mut b = BytesMut::new();
        for pid in 1..=N {
            codec::put_publish(
                &mut b,
                Version::V5,
                b"loop",
                &pid.to_be_bytes(),
                1,
                false,
                false,
                pid,
            );
            if pid % 100 == 0 {
                wr.write_all(&b).await.unwrap();
                b.clear();
            }
        }
        wr
    });
    let (mut msgs, mut acks) = (0u32, 0u32);
    let r = timeout(Duration::from_secs(30), async {
        while msgs < u32::from(N) || acks < u32::from(N) {
            match codec::parse(&mut rbuf, Version::V5, codec::MAX_REMAINING).unwrap() {
                Some(Packet::Publish(p)) => {
                    msgs += 1;
                    assert_eq!(pl(&p), (msgs as u16).to_be_bytes(), "in order");
                }
                Some(Packet::PubAck { .. }) => acks += 1,
                Some(other) => panic!("{other:?}"),
                None => {
                    rbuf.reserve(64 * 1024);
                    assert!(rd.read_buf(&mut rbuf).await.unwrap() > 0, "closed");
                }
            }
        }
    })
    .await;
    assert!(r.is_ok(), "stalled at {msgs} messages, {acks} acks");
    writer.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_messages_are_not_delayed_by_nagle() {
    // The subscriber answers every message with a PINGREQ, so its kernel treats the connection
    // as interactive and delays its ACKs (hoping to piggyback them). The broker's PINGRESP is
    // then an unacknowledged small segment when the next message is written, which Nagle's
    // algorithm would hold until the delayed ACK fires (≥ 40 ms): 200 rounds would take ≥ 8 s.
    let s = server().await;
    let mut sub = Client::connect(s.addr, Version::V311, "sub").await;
    assert_eq!(sub.subscribe(&[("nd", 0)]).await, vec![0]);
    let mut publ = Client::connect(s.addr, Version::V311, "pub").await;
    let t0 = Instant::now();
    for i in 0..200u16 {
        publ.publish("nd", &i.to_be_bytes(), 0, false).await;
        assert_eq!(pl(&sub.recv_publish().await), i.to_be_bytes());
        sub.ping().await;
    }
    let took = t0.elapsed();
    assert!(
        took < Duration::from_millis(1000),
        "200 rounds took {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_rules_takeover_and_stop() {
    let s = server().await;
    // Protocol level 3 (MQTT 3.1) is refused with return code 1, then closed.
    let (mut c, code, _) = Client::try_open(s.addr, Version::V311, "old", true, 0, Some(3)).await;
    assert_eq!(code, 1);
    c.closed(T).await;
    // 3.1.1: an empty client id needs a clean session (return code 2); MQTT 5 gets one assigned.
    let (mut c, code, _) = Client::try_open(s.addr, Version::V311, "", false, 0, None).await;
    assert_eq!(code, 2);
    c.closed(T).await;
    let (mut anon, _) = Client::open(s.addr, Version::V5, "", false, 0).await;
    anon.ping().await;
    let mut anon3 = Client::connect(s.addr, Version::V311, "").await;
    anon3.ping().await;
    // PUBLISH before CONNECT: closed without an answer.
    let mut raw = TcpStream::connect(s.addr).await.unwrap();
    let mut b = BytesMut::new();
    codec::put_publish(&mut b, Version::V311, b"t", b"x", 0, false, false, 0);
    raw.write_all(&b).await.unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(timeout(T, raw.read(&mut buf)).await.unwrap().unwrap(), 0);

    // Session takeover: the first connection with the id is closed.
    let mut first = Client::connect(s.addr, Version::V311, "same").await;
    let mut second = Client::connect(s.addr, Version::V5, "same").await;
    first.closed(T).await;
    second.ping().await;

    // Stopping closes every connection and returns.
    s.stop.send(()).unwrap();
    timeout(T, s.task).await.unwrap().unwrap().unwrap();
    second.closed(T).await;
    anon.closed(T).await;
    assert_eq!(s.stats.snapshot().connections_current, 0);
}

/// Throughput sanity check, not a test: 1 publisher → 1 subscriber, QoS 0, 100-byte payloads.
/// `cargo test -p msgbench-serve --release -- --ignored --nocapture throughput`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn throughput() {
    let s = server().await;
    let mut sub = Client::connect(s.addr, Version::V311, "sub").await;
    assert_eq!(sub.subscribe(&[("bench/t", 0)]).await, vec![0]);
    let mut publ = Client::connect(s.addr, Version::V311, "pub").await;
    const N: u64 = 3_000_000;
    let payload = [7u8; 100];
    let t0 = Instant::now();
    let writer = tokio::spawn(async move {
        let mut b = BytesMut::new();
        for i in 0..N {
            codec::put_publish(
                &mut b,
                Version::V311,
                b"bench/t",
                &payload,
                0,
                false,
                false,
                0,
            );
            if i % 500 == 499 {
                publ.wr.write_all(&b).await.unwrap();
                b.clear();
            }
        }
        publ.wr.write_all(&b).await.unwrap();
        publ
    });
    let mut got = 0u64;
    while got < N {
        match codec::parse(&mut sub.rbuf, Version::V311, codec::MAX_REMAINING).unwrap() {
            Some(Packet::Publish(p)) => {
                assert_eq!(p.payload.len(), 100);
                got += 1;
            }
            Some(other) => panic!("{other:?}"),
            None => {
                sub.rbuf.reserve(256 * 1024);
                assert!(sub.rd.read_buf(&mut sub.rbuf).await.unwrap() > 0);
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    writer.await.unwrap();
    println!(
        "throughput: {N} QoS 0 100-byte messages in {secs:.2} s = {:.0} msgs/s ({:?})",
        N as f64 / secs,
        s.stats.snapshot()
    );
}

#[path = "tests_retransmit.rs"]
mod retransmit;
