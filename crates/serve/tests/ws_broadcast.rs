//! `ws-broadcast` with a client that stopped reading: the queue stays within its byte budget
//! (that client skips what it has not taken, counted as lagged) while a client that reads gets
//! every message. Clients are minimal ones on the frame codec, so every frame is checked.

use bytes::BytesMut;
use msgbench_driver_ws::codec::{self, OP_BINARY};
use msgbench_serve::ws::{Broadcast, BroadcastConfig};
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Connects (with a receive buffer of `rcvbuf` bytes) and upgrades; returns the socket and
/// whatever followed the 101 in the same read.
async fn upgrade(addr: SocketAddr, rcvbuf: u32) -> (TcpStream, BytesMut) {
    let sock = TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(rcvbuf).unwrap();
    let mut s = sock.connect(addr).await.unwrap();
    let mut req = BytesMut::new();
    codec::put_request(&mut req, "bc", "/", "dGhlIHNhbXBsZSBub25jZQ==", &[]);
    s.write_all(&req).await.unwrap();
    let mut buf = BytesMut::new();
    loop {
        if let Some(h) = codec::parse_head(&mut buf, 16 * 1024).unwrap() {
            assert_eq!(h.status(), Some(101), "{}", h.first);
            return (s, buf);
        }
        assert!(s.read_buf(&mut buf).await.unwrap() > 0, "closed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_does_not_hold_the_queue() {
    const BUDGET: usize = 1 << 20;
    const SIZE: usize = 16 * 1024;
    const N: usize = 1500;
    let config = BroadcastConfig {
        queue_bytes: BUDGET,
        ..BroadcastConfig::default()
    };
    let b = Broadcast::bind("127.0.0.1:0", config).await.unwrap();
    let (addr, stats, relay) = (b.local_addr(), b.stats(), b.relay());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(b.run(async move {
        let _ = stop_rx.await;
    }));

    // Upgraded, then never read again.
    let (stuck, _) = upgrade(addr, 4096).await;
    let (mut s, mut buf) = upgrade(addr, 256 * 1024).await;
    let reader = tokio::spawn(async move {
        let mut got = 0;
        while got < N {
            match codec::parse(&mut buf, false, 1 << 20).unwrap() {
                Some(f) => {
                    assert_eq!((f.opcode, f.payload.len()), (OP_BINARY, SIZE));
                    assert_eq!(&f.payload[..8], &(got as u64).to_be_bytes(), "in order");
                    got += 1;
                }
                None => {
                    let r = tokio::time::timeout(Duration::from_secs(10), s.read_buf(&mut buf));
                    assert!(r.await.expect("a frame within 10 s").unwrap() > 0, "closed");
                }
            }
        }
        got
    });
    while stats.connections_current.load(Relaxed) < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // 24 MB at 16 MB/s: the stuck client's socket fills within the first few hundred.
    let mut body = vec![7u8; SIZE];
    let mut most = 0;
    for i in 0..N {
        body[..8].copy_from_slice(&(i as u64).to_be_bytes());
        relay.send(&body);
        most = most.max(relay.queued_bytes());
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(
        reader.await.unwrap(),
        N,
        "the client that reads gets everything"
    );
    let lagged = stats.lagged.load(Relaxed);
    assert!(lagged > 0, "the stuck client skipped what it did not take");
    assert!(lagged < N as u64, "{lagged}: it had some before it stopped");
    // One look every 100 ms: at 16 MB/s up to 1.6 MB more comes in between.
    assert!(
        most <= BUDGET + 3 * 1024 * 1024,
        "the queue held {most} bytes; its budget is {BUDGET}"
    );
    drop(stuck);
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), server).await;
}
