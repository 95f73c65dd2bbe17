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
