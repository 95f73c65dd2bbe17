//! Sink tests over real TCP (and TLS) on 127.0.0.1, with a small client built on amq-protocol.
//! Every wait is bounded: a bug fails a test, never hangs it.

mod bench;
mod client;
mod robust;

use super::*;
use crate::tls::tls_acceptor;
use amq_protocol::frame::AMQPFrame;
use amq_protocol::protocol::{AMQPClass, basic, channel, connection, exchange, queue, tx};
use client::{Client, T, method, tcp};
use std::path::Path;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio::time::timeout;

struct Server {
    addr: SocketAddr,
    stats: Arc<SinkStats>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<io::Result<()>>,
}

async fn server() -> Server {
    server_with(SinkConfig::default()).await
}

async fn server_with(config: SinkConfig) -> Server {
    let sink = Sink::bind("127.0.0.1:0", config).await.unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    Server {
        addr: sink.local_addr(),
        stats: sink.stats(),
        stop,
        task: tokio::spawn(sink.run(async {
            let _ = stopped.await;
        })),
    }
}

impl Server {
    /// Waits until exactly `n` connections are open.
    async fn wait_open(&self, n: u64) {
        let t0 = Instant::now();
        while self.stats.snapshot().connections_current != n {
            assert!(t0.elapsed() < T, "still {:?}", self.stats.snapshot());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits until the counters satisfy `f` (they are published once per read).
    async fn wait_stats(&self, f: impl Fn(&StatsSnapshot) -> bool) -> StatsSnapshot {
        let t0 = Instant::now();
        loop {
            let s = self.stats.snapshot();
            if f(&s) {
                return s;
            }
            assert!(t0.elapsed() < T, "counters stuck at {s:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

fn exchange_declare(nowait: bool) -> AMQPClass {
    AMQPClass::Exchange(exchange::AMQPMethod::Declare(exchange::Declare {
        exchange: "bench".into(),
        kind: "direct".into(),
        durable: true,
        nowait,
        ..Default::default()
    }))
}

fn queue_declare(name: &str) -> AMQPClass {
    AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
        queue: name.into(),
        durable: true,
        ..Default::default()
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshake_topology_and_1000_confirms() {
    let s = server().await;
    let mut c = Client::connect(s.addr).await;
    assert_eq!(
        (c.tune.channel_max, c.tune.frame_max, c.tune.heartbeat),
        (2047, 131_072, 60)
    );
    c.open_channel(1).await;
    assert!(matches!(
        c.call(1, exchange_declare(false)).await,
        AMQPClass::Exchange(exchange::AMQPMethod::DeclareOk(_))
    ));
    let mut names = Vec::new();
    for _ in 0..2 {
        match c.call(1, queue_declare("")).await {
            AMQPClass::Queue(queue::AMQPMethod::DeclareOk(ok)) => {
                assert!(ok.queue.as_str().starts_with("amq.gen-"), "{ok:?}");
                assert_eq!((ok.message_count, ok.consumer_count), (0, 0));
                names.push(ok.queue);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_ne!(names[0], names[1], "server-named queues are unique");
    match c.call(1, queue_declare("orders")).await {
        AMQPClass::Queue(queue::AMQPMethod::DeclareOk(ok)) => {
            assert_eq!(ok.queue.as_str(), "orders")
        }
        other => panic!("{other:?}"),
    }
    let bind = queue::Bind {
        queue: "orders".into(),
        exchange: "bench".into(),
        routing_key: "rk".into(),
        ..Default::default()
    };
    assert!(matches!(
        c.call(1, AMQPClass::Queue(queue::AMQPMethod::Bind(bind)))
            .await,
        AMQPClass::Queue(queue::AMQPMethod::BindOk(_))
    ));
    // nowait: no reply, so the next reply is basic.qos's.
    c.send(&[method(1, exchange_declare(true))]).await;
    let qos = basic::Qos {
        prefetch_count: 10,
        global: false,
    };
    assert!(matches!(
        c.call(1, AMQPClass::Basic(basic::AMQPMethod::Qos(qos)))
            .await,
        AMQPClass::Basic(basic::AMQPMethod::QosOk(_))
    ));
    c.confirm_select(1).await;

    // 1,000 publishes in a few large writes: acks come batched with multiple = true.
    let mut bytes = Vec::new();
    for i in 0..1000u32 {
        let body = i.to_be_bytes().repeat(1 + (i % 8) as usize);
        bytes.extend(client::encode(&client::publish_frames(
            1,
            &body,
            c.frame_max,
            i % 2 == 0,
        )));
        if i % 250 == 249 {
            c.write(&bytes).await;
            bytes.clear();
        }
    }
    let frames = c.confirms(1, 1, 1000).await;
    assert!(frames < 1000, "acks were not batched ({frames} frames)");
    let want_bytes: u64 = (0..1000u64).map(|i| 4 * (1 + i % 8)).sum();
    let st = s.wait_stats(|s| s.messages == 1000).await;
    assert_eq!((st.bytes, st.confirms), (want_bytes, 1000));
    assert_eq!((st.connections_current, st.connections_total), (1, 1));
    c.close().await;
    s.wait_open(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_larger_than_frame_max_is_one_message() {
    let s = server().await;
    let mut c = Client::connect(s.addr).await;
    c.open_channel(1).await;
    c.confirm_select(1).await;
    let body = vec![0x5a; 1_000_003];
    c.publish(1, &body).await; // 8 body frames
    c.publish(1, &[]).await; // header only
    c.confirms(1, 1, 2).await;
    let st = s.wait_stats(|s| s.messages == 2).await;
    assert_eq!(st.bytes, 1_000_003);

    // A client announcing a smaller frame-max is held to it.
    let mut small = Client::handshake(tcp(s.addr).await, 0, 8192).await;
    small.open_channel(1).await;
    small.publish(1, &vec![1; 20_000]).await; // split at 8192
    let frames = client::publish_frames(1, &vec![1; 9000], 16_384, false);
    small.send(&frames).await; // one 9008-byte body frame
    small.expect_close(501).await;
    s.wait_stats(|s| s.messages == 3).await;
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_channels_count_their_own_tags() {
    let s = server().await;
    let mut c = Client::connect(s.addr).await;
    for ch in [1, 2] {
        c.open_channel(ch).await;
        c.confirm_select(ch).await;
    }
    c.open_channel(7).await; // no confirms: never acked
    let mut frames = Vec::new();
    for i in 0..10u8 {
        frames.extend(client::publish_frames(
            1 + u16::from(i % 2),
            &[i; 100],
            c.frame_max,
            false,
        ));
        frames.extend(client::publish_frames(7, &[i; 10], c.frame_max, false));
    }
    c.send(&frames).await;
    let (mut last1, mut last2) = (0, 0);
    while last1 < 5 || last2 < 5 {
        match c.recv_method().await {
            (ch, AMQPClass::Basic(basic::AMQPMethod::Ack(a))) => {
                let last = if ch == 1 { &mut last1 } else { &mut last2 };
                assert!(ch == 1 || ch == 2, "ack on channel {ch}");
                assert!(a.delivery_tag > *last && (a.multiple || a.delivery_tag == *last + 1));
                *last = a.delivery_tag;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((last1, last2), (5, 5));
    // Closing and reopening a channel restarts its tags.
    let close = AMQPClass::Channel(channel::AMQPMethod::Close(channel::Close {
        reply_code: 200,
        reply_text: "done".into(),
        class_id: 0,
        method_id: 0,
    }));
    assert!(matches!(
        c.call(2, close).await,
        AMQPClass::Channel(channel::AMQPMethod::CloseOk(_))
    ));
    c.open_channel(2).await;
    c.confirm_select(2).await;
    c.publish(2, b"again").await;
    c.confirms(2, 1, 1).await;
    let st = s.wait_stats(|s| s.messages == 21).await;
    assert_eq!((st.bytes, st.confirms), (10 * 100 + 10 * 10 + 5, 11));
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_sent_when_idle_and_silent_clients_closed() {
    let s = server_with(SinkConfig {
        heartbeat_s: 1,
        ..SinkConfig::default()
    })
    .await;
    let mut c = Client::handshake(tcp(s.addr).await, 1, 0).await;
    assert_eq!(c.tune.heartbeat, 1);
    // A client that sends heartbeats stays; the sink sends its own while idle.
    let hb = client::encode(&[AMQPFrame::Heartbeat]);
    let mut got = 0;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(3500) {
        c.write(&hb).await;
        if let Ok(f) = timeout(Duration::from_millis(500), c.next()).await {
            assert_eq!(f, Some(AMQPFrame::Heartbeat));
            got += 1;
        }
    }
    assert!((2..=5).contains(&got), "{got} heartbeats in 3.5 s");
    // Silent from now on: closed after two intervals.
    let t0 = Instant::now();
    assert_eq!(c.eof(Duration::from_secs(4)).await, None);
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(1400), "closed after {took:?}");

    // heartbeat 0 in tune-ok disables them.
    let mut quiet = Client::handshake(tcp(s.addr).await, 0, 0).await;
    quiet.quiet(Duration::from_millis(2500)).await;
    quiet.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn methods_answered_and_channel_errors() {
    let s = server().await;
    let mut c = Client::connect(s.addr).await;
    c.open_channel(1).await;
    let consume = basic::Consume {
        queue: "q".into(),
        ..Default::default()
    };
    let tag = match c
        .call(1, AMQPClass::Basic(basic::AMQPMethod::Consume(consume)))
        .await
    {
        AMQPClass::Basic(basic::AMQPMethod::ConsumeOk(ok)) => ok.consumer_tag,
        other => panic!("{other:?}"),
    };
    assert!(tag.as_str().starts_with("amq.ctag-"));
    let cancel = basic::Cancel {
        consumer_tag: tag.clone(),
        nowait: false,
    };
    match c
        .call(1, AMQPClass::Basic(basic::AMQPMethod::Cancel(cancel)))
        .await
    {
        AMQPClass::Basic(basic::AMQPMethod::CancelOk(ok)) => assert_eq!(ok.consumer_tag, tag),
        other => panic!("{other:?}"),
    }
    let get = basic::Get {
        queue: "q".into(),
        no_ack: true,
    };
    assert!(matches!(
        c.call(1, AMQPClass::Basic(basic::AMQPMethod::Get(get)))
            .await,
        AMQPClass::Basic(basic::AMQPMethod::GetEmpty(_))
    ));
    for (m, ok) in [
        (
            AMQPClass::Queue(queue::AMQPMethod::Purge(queue::Purge::default())),
            "PurgeOk",
        ),
        (
            AMQPClass::Queue(queue::AMQPMethod::Delete(queue::Delete::default())),
            "DeleteOk",
        ),
        (
            AMQPClass::Queue(queue::AMQPMethod::Unbind(queue::Unbind::default())),
            "UnbindOk",
        ),
        (
            AMQPClass::Exchange(exchange::AMQPMethod::Delete(exchange::Delete::default())),
            "DeleteOk",
        ),
        (
            AMQPClass::Tx(tx::AMQPMethod::Select(tx::Select {})),
            "SelectOk",
        ),
        (
            AMQPClass::Tx(tx::AMQPMethod::Commit(tx::Commit {})),
            "CommitOk",
        ),
    ] {
        let reply = format!("{:?}", c.call(1, m).await);
        assert!(reply.contains(ok), "{reply}");
    }
    c.publish(1, b"in a transaction").await;
    // Confirms on a transactional channel: 406 closes the channel, not the connection.
    let sel = amq_protocol::protocol::confirm::Select { nowait: false };
    let sel = AMQPClass::Confirm(amq_protocol::protocol::confirm::AMQPMethod::Select(sel));
    match c.call(1, sel).await {
        AMQPClass::Channel(channel::AMQPMethod::Close(cl)) => assert_eq!(cl.reply_code, 406),
        other => panic!("{other:?}"),
    }
    c.publish(1, b"discarded until close-ok").await;
    c.send(&[method(
        1,
        AMQPClass::Channel(channel::AMQPMethod::CloseOk(channel::CloseOk {})),
    )])
    .await;
    c.open_channel(1).await;
    // basic.ack names a tag the sink never delivered.
    let ack = basic::Ack {
        delivery_tag: 1,
        multiple: false,
    };
    match c
        .call(1, AMQPClass::Basic(basic::AMQPMethod::Ack(ack)))
        .await
    {
        AMQPClass::Channel(channel::AMQPMethod::Close(cl)) => assert_eq!(cl.reply_code, 406),
        other => panic!("{other:?}"),
    }
    c.open_channel(2).await;
    let st = s.wait_stats(|s| s.messages == 1).await;
    assert_eq!(st.bytes, 16);
    // A method on a channel never opened: 504 closes the connection.
    let qos = AMQPClass::Basic(basic::AMQPMethod::Qos(basic::Qos::default()));
    c.send(&[method(9, qos)]).await;
    let close = c.expect_close(504).await;
    assert_eq!((close.class_id, close.method_id), (60, 10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_close_and_stop() {
    let s = server().await;
    let c = Client::connect(s.addr).await;
    c.close().await;
    s.wait_open(0).await;
    // Stopping closes every connection with 320 and returns.
    let mut a = Client::connect(s.addr).await;
    let mut b = Client::connect(s.addr).await;
    b.open_channel(1).await;
    s.wait_open(2).await;
    s.stop.send(()).unwrap();
    timeout(T, s.task).await.unwrap().unwrap().unwrap();
    for c in [&mut a, &mut b] {
        let close = c.eof(T).await.expect("connection.close");
        assert_eq!(close.reply_code, 320);
    }
    assert_eq!(s.stats.snapshot().connections_current, 0);
}

/// Writes a self-signed certificate for "localhost" and returns the (cert, key) paths.
fn self_signed(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, Vec<u8>) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    (cert, key, ck.cert.der().to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_handshake_and_publish() {
    let dir = std::env::temp_dir().join(format!("msgbench-amqp-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key, der) = self_signed(&dir);
    assert!(tls_acceptor(&dir.join("missing.pem"), &key).is_err());
    let acceptor = tls_acceptor(&cert, &key).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let s = server_with(SinkConfig {
        tls: Some(acceptor),
        ..SinkConfig::default()
    })
    .await;

    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls_pki_types::CertificateDer::from(der))
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let tls = timeout(T, connector.connect(name, tcp(s.addr).await))
        .await
        .unwrap()
        .unwrap();
    let mut c = Client::handshake(tls, 0, 0).await;
    c.open_channel(1).await;
    c.confirm_select(1).await;
    c.publish(1, &vec![3; 300_000]).await;
    c.publish(1, b"small").await;
    c.confirms(1, 1, 2).await;
    let st = s.wait_stats(|s| s.messages == 2).await;
    assert_eq!(st.bytes, 300_005);
    c.close().await;

    // A plain-TCP client on the TLS port gets nowhere, and does no harm.
    let mut plain = tcp(s.addr).await;
    plain.write_all(b"AMQP\x00\x00\x09\x01").await.unwrap();
    let mut junk = Vec::new();
    let _ = timeout(T, plain.read_to_end(&mut junk))
        .await
        .expect("closed in time");
    assert!(!junk.starts_with(b"AMQP"));
    s.wait_open(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshake_variants() {
    let s = server().await;
    // AMQPLAIN is accepted; an unknown mechanism is refused with 403.
    let mut c = Client::raw(tcp(s.addr).await);
    c.write(b"AMQP\x00\x00\x09\x01").await;
    c.recv_method().await;
    let start_ok = |mechanism: &str| {
        method(
            0,
            AMQPClass::Connection(connection::AMQPMethod::StartOk(connection::StartOk {
                mechanism: mechanism.into(),
                ..Default::default()
            })),
        )
    };
    c.send(&[start_ok("EXTERNAL")]).await;
    c.expect_close(403).await;
    let mut c = Client::raw(tcp(s.addr).await);
    c.write(b"AMQP\x00\x00\x09\x01").await;
    c.recv_method().await;
    c.send(&[start_ok("AMQPLAIN")]).await;
    assert!(matches!(
        c.recv_method().await,
        (0, AMQPClass::Connection(connection::AMQPMethod::Tune(_)))
    ));
    // open before tune-ok is out of order.
    c.send(&client::tune_ok_open(&c.tune.clone(), 0, 131_072)[1..])
        .await;
    c.expect_close(503).await;
    // Channel numbers above channel-max are refused.
    let mut c = Client::handshake(tcp(s.addr).await, 0, 0).await;
    c.open_channel(2047).await;
    c.send(&[method(
        2048,
        AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
    )])
    .await;
    c.expect_close(504).await;
}
