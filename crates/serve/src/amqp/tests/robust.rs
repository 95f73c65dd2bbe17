//! Malformed input, abrupt disconnects and a fuzz run against a live sink: whatever a client
//! sends, the sink answers or closes that connection and goes on serving everyone else.

use super::client::{self, Client, T, encode, method, tcp};
use super::*;
use amq_protocol::frame::AMQPContentHeader;
use amq_protocol::protocol::{BasicProperties, confirm};
use amq_protocol::types::FieldTable;
use std::sync::atomic::AtomicUsize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

/// Rebuilds one generated frame with the last `cut` payload bytes replaced by `tail`.
fn with_tail(frame: &[u8], cut: usize, tail: &[u8]) -> Vec<u8> {
    let payload = &frame[7..frame.len() - 1 - cut];
    let mut out = frame[..3].to_vec();
    out.extend_from_slice(&((payload.len() + tail.len()) as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out.extend_from_slice(tail);
    out.push(0xce);
    out
}

/// The sink is still healthy: a new client completes the handshake and closes cleanly.
async fn healthy(addr: SocketAddr) {
    timeout(T, async {
        let c = Client::connect(addr).await;
        c.close_watching(Duration::ZERO).await;
    })
    .await
    .expect("a well-behaved client was not served in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_are_refused() {
    let s = server().await;

    // Not AMQP 0-9-1: the sink answers with the header it speaks, then closes.
    let mut c = Client::raw(tcp(s.addr).await);
    c.write(b"GET / HTTP/1.1\r\n\r\n").await;
    let mut b = [0u8; 16];
    let n = timeout(T, c.io.read(&mut b)).await.unwrap().unwrap();
    assert_eq!(&b[..n], b"AMQP\x00\x00\x09\x01");
    assert_eq!(timeout(T, c.io.read(&mut b)).await.unwrap().unwrap(), 0);

    let declare = encode(&[method(1, queue_declare("q"))]);
    let mut deep_header = encode(&[AMQPFrame::Header(
        1,
        AMQPContentHeader {
            class_id: 60,
            body_size: 1,
            properties: BasicProperties::default().with_headers(FieldTable::default()),
        },
    )]);
    deep_header = with_tail(&deep_header, 4, &frame::nested_table(20_000));
    let publish = encode(&client::publish_frames(1, b"x", 131_072, false)[..1]);
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("unknown frame type", vec![9, 0, 0, 0, 0, 0, 0, 0xce], 501),
        ("frame-end missing", vec![8, 0, 0, 0, 0, 0, 0, 0x00], 501),
        // Refused from the header alone: the gigabyte is never sent, nor buffered.
        ("frame above frame-max", vec![3, 0, 1, 0x40, 0, 0, 0], 501),
        (
            "heartbeat on a channel",
            vec![8, 0, 1, 0, 0, 0, 0, 0xce],
            501,
        ),
        (
            "unknown method",
            with_tail(&declare, declare.len() - 8, &[0, 60, 0x03, 0xe7]),
            540,
        ),
        (
            "server-only method",
            with_tail(&declare, declare.len() - 8, &[0, 60, 0, 60]),
            540,
        ),
        ("truncated arguments", with_tail(&declare, 6, &[]), 502),
        (
            "tables nested 20,000 deep",
            with_tail(&declare, 4, &frame::nested_table(20_000)),
            502,
        ),
        (
            "content header nested deep",
            [publish, deep_header].concat(),
            502,
        ),
        (
            "body without publish",
            vec![3, 0, 1, 0, 0, 0, 1, 7, 0xce],
            505,
        ),
        (
            "body beyond its size",
            [
                encode(&client::publish_frames(1, b"ab", 131_072, false)[..2]),
                encode(&[AMQPFrame::Body(1, b"abc".to_vec())]),
            ]
            .concat(),
            501,
        ),
    ];
    for (what, bytes, code) in cases {
        let mut c = Client::connect(s.addr).await;
        c.open_channel(1).await;
        c.write(&bytes).await;
        let close = timeout(T, c.expect_close(code))
            .await
            .unwrap_or_else(|_| panic!("{what}: no close"));
        assert!(!close.reply_text.as_str().is_empty(), "{what}");
        healthy(s.addr).await;
    }
    s.wait_open(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abrupt_disconnects_leave_others_served() {
    let s = server().await;
    let mut steady = Client::connect(s.addr).await;
    steady.open_channel(1).await;
    steady.confirm_select(1).await;
    let body = vec![9u8; 200_000];
    let frames = encode(&client::publish_frames(1, &body, 131_072, false));
    for (i, cut) in [3, 11, 20, 4_000, 131_000, frames.len() - 1]
        .into_iter()
        .enumerate()
    {
        let mut c = Client::connect(s.addr).await;
        c.open_channel(1).await;
        c.write(&frames[..cut]).await;
        if i % 2 == 1 {
            c.io.set_zero_linger().unwrap(); // reset rather than FIN
        }
        drop(c);
        // Mid-handshake, too.
        let mut raw = tcp(s.addr).await;
        raw.write_all(&b"AMQP\x00\x00\x09\x01"[..1 + i])
            .await
            .unwrap();
        drop(raw);
        steady.publish(1, &body).await;
        steady.confirms(1, i as u64 + 1, i as u64 + 1).await;
    }
    s.wait_open(1).await;
    let st = s.wait_stats(|s| s.messages == 6).await;
    assert_eq!(st.bytes, 6 * 200_000, "partial messages are not counted");
    steady.close().await;
}

/// xorshift64*: small, deterministic, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// A complete, well-formed client session, in two parts: the handshake (protocol header to
/// connection.open), then topology, confirms, publishes and connection.close.
fn valid_session() -> (Vec<u8>, Vec<u8>) {
    let tune = connection::Tune {
        channel_max: 2047,
        frame_max: 131_072,
        heartbeat: 0,
    };
    let mut hs = b"AMQP\x00\x00\x09\x01".to_vec();
    hs.extend(encode(&[client::start_ok()]));
    hs.extend(encode(&client::tune_ok_open(&tune, 0, 4096)));
    let mut rest = encode(&[
        method(
            1,
            AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
        ),
        method(
            1,
            AMQPClass::Confirm(confirm::AMQPMethod::Select(confirm::Select {
                nowait: false,
            })),
        ),
        method(1, exchange_declare(false)),
        method(1, queue_declare("")),
    ]);
    for body in [&b""[..], b"hello", &[7; 5000]] {
        rest.extend(encode(&client::publish_frames(1, body, 4096, true)));
    }
    rest.extend(encode(&[client::connection_close()]));
    (hs, rest)
}

/// One fuzz input: random bytes, a mutated valid session, or well-framed random frames.
fn fuzz_input(rng: &mut Rng, (handshake, rest): &(Vec<u8>, Vec<u8>)) -> Vec<u8> {
    const HEADER: &[u8] = b"AMQP\x00\x00\x09\x01";
    match rng.below(4) {
        0 => {
            let n = rng.below(600);
            rng.bytes(n)
        }
        1 => {
            let n = rng.below(600);
            [HEADER, &rng.bytes(n)].concat()
        }
        2 => {
            let mut v = [&handshake[..], rest].concat();
            for _ in 0..1 + rng.below(6) {
                let at = rng.below(v.len());
                match rng.below(6) {
                    0 => v[at] ^= 1 << rng.below(8),
                    1 => v[at] = rng.next() as u8,
                    2 => drop(v.drain(at..(at + 1 + rng.below(40)).min(v.len()))),
                    3 => {
                        let end = (at + 1 + rng.below(200)).min(v.len());
                        let dup = v[at..end].to_vec();
                        v.splice(at..at, dup);
                    }
                    4 => {
                        let n = rng.below(30);
                        let ins = rng.bytes(n);
                        v.splice(at..at, ins);
                    }
                    _ => v.truncate(at),
                }
                if v.is_empty() {
                    break;
                }
            }
            v
        }
        _ => {
            // The handshake, then frames with valid framing and random contents, often a
            // handled method's ids followed by random arguments.
            let mut v = handshake.clone();
            v.extend(encode(&[method(
                1,
                AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
            )]));
            for _ in 0..1 + rng.below(8) {
                let ty = [1u8, 1, 1, 2, 3, 8][rng.below(6)];
                let ch = rng.below(3) as u16;
                if ty == 2 && rng.below(4) > 0 {
                    // Mostly a content header where one is due: its properties get parsed.
                    v.extend(encode(&client::publish_frames(ch, b"", 4096, false)[..1]));
                }
                let mut payload = Vec::new();
                if ty == 1 {
                    let (class, m) = [
                        (10u16, 50u16),
                        (20, 10),
                        (20, 40),
                        (40, 10),
                        (50, 10),
                        (50, 20),
                        (60, 20),
                        (60, 40),
                        (85, 10),
                        (90, 10),
                    ][rng.below(10)];
                    payload.extend_from_slice(&class.to_be_bytes());
                    payload.extend_from_slice(&m.to_be_bytes());
                }
                let n = rng.below(120);
                payload.extend(rng.bytes(n));
                v.push(ty);
                v.extend_from_slice(&ch.to_be_bytes());
                v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
                v.extend(payload);
                v.push(0xce);
            }
            v
        }
    }
}

static PANICS: AtomicUsize = AtomicUsize::new(0);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzz_inputs_never_hurt_the_sink() {
    // Connection tasks are caught by the sink's JoinSet, so a panic would go unnoticed:
    // count them (the previous hook still prints them).
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Relaxed);
            prev(info);
        }));
    });
    let panics_before = PANICS.load(Relaxed);
    let s = server().await;
    const TASKS: u64 = 16;
    const PER_TASK: usize = 200;
    let valid = Arc::new(valid_session());
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(40);
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (addr, valid) = (s.addr, valid.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (t + 1).wrapping_mul(0xff51_afd7_ed55_8ccd));
            let mut done = 0;
            while done < PER_TASK && Instant::now() < deadline {
                let input = fuzz_input(&mut rng, &valid);
                let mut sock = tcp(addr).await;
                let _ = sock.write_all(&input).await;
                let shut = rng.below(2) == 0;
                if shut {
                    let _ = sock.shutdown().await;
                }
                // Whatever the sink answers; it closes, or we give up and drop the socket. (A
                // sink that answered a connection.close waits for the client to close first:
                // without our shutdown, only briefly.)
                let mut sink = vec![0u8; 64 * 1024];
                let wait = Duration::from_millis(if shut { 100 } else { 10 });
                let _ = timeout(wait, async {
                    while matches!(sock.read(&mut sink).await, Ok(n) if n > 0) {}
                })
                .await;
                drop(sock);
                healthy(addr).await;
                done += 1;
            }
            done
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += timeout(Duration::from_secs(60), t).await.unwrap().unwrap();
    }
    assert!(
        total >= 200,
        "only {total} fuzz inputs in {:?}",
        t0.elapsed()
    );
    // Every fuzz connection ends (closed by the sink, or by our drop): nothing lingers.
    s.wait_open(0).await;
    assert_eq!(
        PANICS.load(Relaxed),
        panics_before,
        "a connection task panicked"
    );
    healthy(s.addr).await;
    println!(
        "fuzz: {total} inputs in {:.1} s, {:?}",
        t0.elapsed().as_secs_f64(),
        s.stats.snapshot()
    );
}
