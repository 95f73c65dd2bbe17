//! Retransmission on session resume, the receive maximum, and what a let-go MQTT 5 client is
//! told (see the module doc of `inflight` and `conn`).

use super::*;

/// A persistent session's unacknowledged deliveries are sent again, first, on resume, with
/// their packet ids [MQTT-4.4.0-1]: the QoS 1 PUBLISH never acknowledged with DUP set, and
/// for the QoS 2 message past PUBREC its PUBREL. Acknowledged, nothing more comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacknowledged_deliveries_are_sent_again_when_the_session_resumes() {
    let s = server().await;
    let (mut sub, _) = Client::open(s.addr, Version::V311, "resumer", false, 0).await;
    assert_eq!(sub.subscribe(&[("r/t", 2)]).await, vec![2]);
    let mut publ = Client::connect(s.addr, Version::V311, "pub").await;
    publ.publish("r/t", b"one", 1, false).await;
    let one = sub.recv_publish().await;
    assert_eq!((pl(&one), one.qos), (&b"one"[..], 1));
    let pid = publ.next_pid();
    publ.write(|b, v| codec::put_publish(b, v, b"r/t", b"two", 2, false, false, pid))
        .await;
    assert_eq!(publ.recv().await, Packet::PubRec { pid, code: 0 });
    let two = sub.recv_publish().await;
    assert_eq!((pl(&two), two.qos), (&b"two"[..], 2));
    sub.write(|b, _| codec::put_ack(b, codec::PUBREC, two.pid))
        .await;
    assert_eq!(sub.recv().await, Packet::PubRel { pid: two.pid });
    // Gone without acknowledging "one" or completing "two".
    drop(sub);
    s.wait_open(1).await;

    let (mut sub, present) = Client::open(s.addr, Version::V311, "resumer", false, 0).await;
    assert!(present);
    let again = sub.recv_raw().await;
    assert_eq!(again[0], 0x30 | 0x08 | (1 << 1), "PUBLISH, DUP, QoS 1");
    assert_eq!(&again[again.len() - 3..], b"one");
    let n = again.len();
    assert_eq!(u16::from_be_bytes([again[n - 5], again[n - 4]]), one.pid);
    assert_eq!(sub.recv().await, Packet::PubRel { pid: two.pid });
    sub.write(|b, _| codec::put_ack(b, codec::PUBACK, one.pid))
        .await;
    sub.write(|b, _| codec::put_ack(b, codec::PUBCOMP, two.pid))
        .await;
    sub.quiet().await;
    // The ids are free again, and live messages flow.
    publ.publish("r/t", b"three", 1, false).await;
    assert_eq!(pl(&sub.recv_publish().await), b"three");
}

/// An MQTT 5 CONNECT asking for a receive maximum of `max`, with a persistent session.
async fn open_with_receive_max(addr: SocketAddr, id: &str, max: u16) -> Client {
    let sock = TcpStream::connect(addr).await.unwrap();
    let (rd, wr) = sock.into_split();
    let mut c = Client {
        rd,
        rbuf: BytesMut::new(),
        wr,
        v: Version::V5,
        pid: 1,
    };
    let [hi, lo] = max.to_be_bytes();
    let mut b = vec![
        0x10, 0, 0, 4, b'M', b'Q', b'T', b'T', 5, 0x02, 0, 0, 3, 0x21, hi, lo,
    ];
    b.extend_from_slice(&(id.len() as u16).to_be_bytes());
    b.extend_from_slice(id.as_bytes());
    b[1] = (b.len() - 2) as u8;
    c.wr.write_all(&b).await.unwrap();
    assert!(matches!(c.recv().await, Packet::ConnAck { code: 0, .. }));
    c
}

/// A client's receive maximum of 2: two QoS 1 messages are unacknowledged at most; each
/// PUBACK lets the next one go, in order, and QoS 0 is never held back [MQTT-3.3.4-9].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_receive_maximum_holds_back_qos1_until_acknowledged() {
    let s = server().await;
    let mut sub = open_with_receive_max(s.addr, "narrow", 2).await;
    sub.pid = 1;
    assert_eq!(sub.subscribe(&[("w/t", 1)]).await, vec![1]);
    let mut publ = Client::connect(s.addr, Version::V5, "pub").await;
    for i in 0..5u8 {
        publ.publish("w/t", &[i], 1, false).await;
    }
    publ.publish("w/t", b"q0", 0, false).await;
    publ.ping().await;
    let first = sub.recv_publish().await;
    let second = sub.recv_publish().await;
    assert_eq!((pl(&first), pl(&second)), (&[0u8][..], &[1u8][..]));
    let q0 = sub.recv_publish().await;
    assert_eq!((pl(&q0), q0.qos), (&b"q0"[..], 0), "QoS 0 is not held");
    sub.quiet().await;
    let mut last = first.pid;
    for i in 2..5u8 {
        sub.write(|b, _| codec::put_ack(b, codec::PUBACK, last))
            .await;
        let p = sub.recv_publish().await;
        assert_eq!(pl(&p), &[i][..]);
        sub.quiet().await;
        last = p.pid;
    }
}

/// MQTT 5 clients are told why the broker lets them go: DISCONNECT 0x8E when another
/// connection takes the session over, 0x8B when the broker stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt5_clients_are_told_why_they_are_let_go() {
    let s = server().await;
    let mut first = Client::connect(s.addr, Version::V5, "same").await;
    let mut second = Client::connect(s.addr, Version::V5, "same").await;
    assert!(matches!(
        first.recv().await,
        Packet::Disconnect { code: 0x8E, .. }
    ));
    first.closed(T).await;
    second.ping().await;
    s.stop.send(()).unwrap();
    assert!(matches!(
        second.recv().await,
        Packet::Disconnect { code: 0x8B, .. }
    ));
    second.closed(T).await;
}

/// What breaks the protocol ends the connection, and an MQTT 5 client is told why first
/// (MQTT 5 §4.13.1; found with a raw client: the broker had closed without a word, and had
/// answered some malformed packets instead of closing): a topic alias the broker never offered
/// (0x94), a subscription identifier (0xA1), a wildcard in a topic name (0x82), reserved
/// fixed-header flags (0x81). An MQTT 3.1.1 client with a malformed SUBSCRIBE gets no SUBACK,
/// only the close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_errors_close_with_their_reason() {
    let s = server().await;
    let cases: [(&[u8], u8); 4] = [
        // PUBLISH QoS 0 to "a" with a topic alias property (0x23) of 1.
        (&[0x30, 7, 0, 1, b'a', 3, 0x23, 0, 1], 0x94),
        // SUBSCRIBE with a subscription identifier (0x0B) of 5.
        (&[0x82, 9, 0, 1, 2, 0x0b, 5, 0, 1, b'a', 0], 0xa1),
        // PUBLISH QoS 0 to "a/#".
        (&[0x30, 6, 0, 3, b'a', b'/', b'#', 0], 0x82),
        // PINGREQ with flags 0001.
        (&[0xc1, 0], 0x81),
    ];
    for (bytes, reason) in cases {
        let mut c = Client::connect(s.addr, Version::V5, "breaker").await;
        c.write(|b, _| b.extend_from_slice(bytes)).await;
        match c.recv().await {
            Packet::Disconnect { code, .. } => assert_eq!(code, reason, "{bytes:02x?}"),
            other => panic!("{bytes:02x?}: expected DISCONNECT, got {other:?}"),
        }
        c.closed(T).await;
    }
    for bytes in [
        &[0x80, 6, 0, 1, 0, 1, b'a', 1][..], // SUBSCRIBE with flags 0000
        &[0x82, 6, 0, 1, 0, 1, b'a', 0x41][..], // reserved option bits
        &[0x82, 6, 0, 1, 0, 1, b'a', 3][..], // QoS 3
    ] {
        let mut c = Client::connect(s.addr, Version::V311, "breaker").await;
        c.write(|b, _| b.extend_from_slice(bytes)).await;
        match timeout(T, c.next()).await.expect("still open") {
            None => {}
            Some(p) => panic!("{bytes:02x?}: expected the close, got {p:?}"),
        }
    }
}
