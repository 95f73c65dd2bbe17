//! High-water marks (`sndhwm`, `onhwm`) and lost connections against hand-driven ZeroMQ peers
//! on 127.0.0.1: peers that read, peers that stop reading (so the generator's queues really
//! fill), and a peer that hangs up and comes back.
//!
//! Every high-water-mark test accounts for each message exactly: received by some peer, or
//! dropped and counted.

mod common;

use bytes::BytesMut;
use msgbench_core::driver::{Driver, DriverEvent, EventSink, Outbound, Producer, ProducerSpec};
use msgbench_driver_zmq::zmtp::{self, GREETING_LEN, SocketType, Unit};
use msgbench_driver_zmq::{ZmqDriver, ZmqProducer};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

/// Messages of this size fill loopback socket buffers quickly.
const SIZE: usize = 1000;

/// A listener on 127.0.0.1:`port`.
fn listen(port: u16) -> TcpListener {
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    listener.set_nonblocking(true).unwrap();
    TcpListener::from_std(listener).unwrap()
}

/// Reads messages (each of [`SIZE`] bytes) until `upto` of them or the end of the stream;
/// returns how many.
async fn read_messages(s: &mut TcpStream, rbuf: &mut BytesMut, upto: u64) -> u64 {
    let mut n = 0u64;
    while n < upto {
        while n < upto
            && let Some(u) = zmtp::next_unit(rbuf, 1 << 20).unwrap()
        {
            if let Unit::Message { last, .. } = u {
                assert_eq!(last.len(), SIZE);
                n += 1;
            }
        }
        rbuf.reserve(64 * 1024);
        if n < upto && s.read_buf(rbuf).await.unwrap() == 0 {
            break;
        }
    }
    n
}

/// A ZeroMQ peer driven by hand: it accepts one connection on `port`, handshakes as `ours`
/// (subscribing to everything if a SUB), and counts the messages it reads once `go` fires
/// until the connection ends; returns the count.
fn peer(port: u16, ours: SocketType, go: oneshot::Receiver<()>) -> tokio::task::JoinHandle<u64> {
    let listener = listen(port);
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut rbuf = handshake(&mut s, ours).await;
        go.await.unwrap();
        read_messages(&mut s, &mut rbuf, u64::MAX).await
    })
}

async fn handshake(s: &mut TcpStream, ours: SocketType) -> BytesMut {
    s.write_all(&zmtp::greeting()).await.unwrap();
    let mut g = [0u8; GREETING_LEN];
    s.read_exact(&mut g).await.unwrap();
    zmtp::check_greeting(&g).unwrap();
    let mut out = BytesMut::new();
    zmtp::put_ready(&mut out, ours);
    if ours == SocketType::Sub {
        zmtp::put_subscribe(&mut out, b"");
    }
    s.write_all(&out).await.unwrap();
    let mut rbuf = BytesMut::new();
    loop {
        if let Some(u) = zmtp::next_unit(&mut rbuf, 1 << 16).unwrap() {
            zmtp::check_ready(&u, ours).unwrap();
            return rbuf;
        }
        assert!(
            s.read_buf(&mut rbuf).await.unwrap() > 0,
            "closed in the handshake"
        );
    }
}

async fn send_all<P: Producer>(p: &mut P, n: u64) {
    let payload = vec![7u8; SIZE];
    for i in 0..n {
        p.send(Outbound {
            stream: 0,
            token: i,
            payload: &payload,
            meta: None,
        })
        .await
        .unwrap();
    }
}

fn spec() -> ProducerSpec {
    ProducerSpec {
        id: 0,
        topics: vec!["t".into()],
        request_reply: false,
        max_in_flight: 1000,
    }
}

fn drain(rx: &mut mpsc::UnboundedReceiver<DriverEvent>) -> Vec<String> {
    let mut v = Vec::new();
    while let Ok(e) = rx.try_recv() {
        v.push(format!("{:?}: {}", e.kind, e.detail));
    }
    v
}

/// Two hand-driven peers of type `ours` on consecutive ports and a producer connected to both
/// (`zmq://127.0.0.1:PORT?peers=2&` + `query`): peer `a` reads from the start, `b` once `go_b`
/// fires.
struct TwoPeers {
    p: ZmqProducer,
    events: mpsc::UnboundedReceiver<DriverEvent>,
    a: tokio::task::JoinHandle<u64>,
    b: tokio::task::JoinHandle<u64>,
    go_b: oneshot::Sender<()>,
}

async fn two_peers(ours: SocketType, query: &str) -> TwoPeers {
    let port = common::free_ports(2);
    let (go_a, a_go) = oneshot::channel();
    let (go_b, b_go) = oneshot::channel();
    let a = peer(port, ours, a_go);
    let b = peer(port + 1, ours, b_go);
    let (sink, events) = EventSink::channel();
    let url = format!("zmq://127.0.0.1:{port}?peers=2&{query}");
    let d = ZmqDriver::new(&url, sink, Duration::from_secs(5)).unwrap();
    let p = d.producer(&spec()).await.unwrap();
    go_a.send(()).unwrap();
    TwoPeers {
        p,
        events,
        a,
        b,
        go_b,
    }
}

/// PUSH at the high-water mark gives messages to the peer with room: one consumer that stops
/// reading holds up nothing, and nothing is dropped (what it was given, it gets once it reads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_passes_a_stuck_peer_by_and_drops_nothing() {
    let TwoPeers {
        mut p,
        mut events,
        a,
        b,
        go_b,
    } = two_peers(SocketType::Pull, "sndhwm=10").await;
    let n = 100_000u64;
    tokio::time::timeout(Duration::from_secs(60), send_all(&mut p, n))
        .await
        .expect("a stuck peer does not stop a PUSH producer that has another");
    go_b.send(()).unwrap();
    p.close().await.unwrap();
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    assert_eq!(a + b, n, "PUSH drops nothing: a {a}, b {b}");
    assert!(a > n / 2, "the reading peer took most: a {a}, b {b}");
    assert!(drain(&mut events).is_empty());
}

/// PUB with `onhwm=drop` drops for a subscriber that stopped reading, like libzmq, and counts
/// what it dropped: received plus dropped is every message times every subscriber.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pub_drops_for_a_stuck_subscriber_and_counts_it() {
    let TwoPeers {
        mut p,
        mut events,
        a,
        b,
        go_b,
    } = two_peers(SocketType::Sub, "pattern=pubsub&sndhwm=10&onhwm=drop").await;
    let n = 50_000u64;
    tokio::time::timeout(Duration::from_secs(60), send_all(&mut p, n))
        .await
        .expect("a stuck subscriber does not stop a dropping PUB producer");
    go_b.send(()).unwrap();
    p.close().await.unwrap();
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    let ev = drain(&mut events);
    let summary = ev
        .iter()
        .find(|e| e.contains("were dropped at the high-water mark"))
        .unwrap_or_else(|| panic!("no drop summary in {ev:?}"));
    let dropped: u64 = summary
        .split_once("producer 0: ")
        .and_then(|(_, r)| r.split(' ').next())
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("no count in {summary}"));
    assert!(b < n && dropped > 0, "b {b}, dropped {dropped}");
    assert_eq!(a + b + dropped, 2 * n, "a {a}, b {b}, dropped {dropped}");
    assert!(
        ev.iter().any(|e| e.contains("messages for it are dropped")),
        "the first drop is reported as it happens: {ev:?}"
    );
}

/// PUB with the default `onhwm=wait` loses nothing: a subscriber that reads late makes the
/// producer wait, and then gets everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pub_waits_for_a_late_subscriber_by_default() {
    let TwoPeers {
        mut p,
        mut events,
        a,
        b,
        go_b,
    } = two_peers(SocketType::Sub, "pattern=pubsub&sndhwm=10").await;
    let n = 30_000u64;
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        go_b.send(()).unwrap();
    });
    tokio::time::timeout(Duration::from_secs(60), send_all(&mut p, n))
        .await
        .expect("the producer resumes once the late subscriber reads");
    late.await.unwrap();
    p.close().await.unwrap();
    assert_eq!((a.await.unwrap(), b.await.unwrap()), (n, n));
    assert!(drain(&mut events).is_empty());
}

/// A PUSH producer whose consumer hangs up reports it, dials it again, and sends on over the new
/// connection; what was in flight on the old one is lost, nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_dials_a_lost_consumer_again() {
    let port = common::free_ports(1);
    let listener = listen(port);
    let (hung_up_tx, hung_up) = oneshot::channel();
    let first = 100u64;
    let peer = tokio::spawn(async move {
        // The first connection takes `first` messages and hangs up.
        let (mut s, _) = listener.accept().await.unwrap();
        let mut rbuf = handshake(&mut s, SocketType::Pull).await;
        assert_eq!(read_messages(&mut s, &mut rbuf, first).await, first);
        drop(s);
        hung_up_tx.send(()).unwrap();
        // The second counts what comes until the producer closes.
        let (mut s, _) = listener.accept().await.unwrap();
        let mut rbuf = handshake(&mut s, SocketType::Pull).await;
        read_messages(&mut s, &mut rbuf, u64::MAX).await
    });
    let (sink, mut events) = EventSink::channel();
    let url = format!("zmq://127.0.0.1:{port}?peers=1");
    let d = ZmqDriver::new(&url, sink, Duration::from_secs(5)).unwrap();
    let mut p = d.producer(&spec()).await.unwrap();
    send_all(&mut p, first).await;
    p.flush().await.unwrap();
    hung_up.await.unwrap();
    let rest = 5_000u64;
    tokio::time::timeout(Duration::from_secs(30), send_all(&mut p, rest))
        .await
        .expect("sends go on once the consumer is dialled again");
    p.close().await.unwrap();
    let again = peer.await.unwrap();
    let ev = drain(&mut events);
    assert!(
        // Seen as the end of the stream, or as a failed write (EPIPE), whichever comes first.
        ev.iter()
            .any(|e| e.starts_with("Disconnected") && e.contains("the peer at")),
        "{ev:?}"
    );
    assert!(
        ev.iter()
            .any(|e| e.starts_with("Reconnected") && e.contains("connected to")),
        "{ev:?}"
    );
    // Lost: what was written to the dead connection before its end was noticed (one batch).
    assert!(again > 0 && again <= rest, "again {again} of {rest}");
    assert!(rest - again <= 1000, "lost {} in the hang-up", rest - again);
}
