//! Measurements, not tests (ignored):
//! `cargo test -p msgbench-serve --release -- --ignored --nocapture amqp`
//!
//! The sink runs on its own thread (one core at most) and reports its CPU time; the clients
//! run on the test's runtime and share the machine with it, so rates are a floor.

use super::client::{self, Client, encode, tcp};
use super::*;
use amq_protocol::frame::parsing::parse_frame;
use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// A sink on its own thread and single-threaded runtime, so that its CPU time can be told
/// apart from the client's.
struct SinkThread {
    addr: SocketAddr,
    stats: Arc<SinkStats>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<f64>>,
}

impl SinkThread {
    fn start() -> SinkThread {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("amqp-sink".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    let sink = Sink::bind("127.0.0.1:0", SinkConfig::default())
                        .await
                        .unwrap();
                    tx.send((sink.local_addr(), sink.stats())).unwrap();
                    let cpu0 = thread_cpu_secs();
                    sink.run(async {
                        let _ = stopped.await;
                    })
                    .await
                    .unwrap();
                    thread_cpu_secs() - cpu0
                })
            })
            .unwrap();
        let (addr, stats) = rx.recv().unwrap();
        SinkThread {
            addr,
            stats,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Stops the sink; the CPU seconds its thread used (user + system, 10 ms resolution).
    fn stop(mut self) -> f64 {
        let _ = self.stop.take().unwrap().send(());
        self.thread.take().unwrap().join().unwrap()
    }
}

/// This thread's CPU time from /proc (Linux), in seconds; 0 elsewhere.
fn thread_cpu_secs() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/thread-self/stat") else {
        return 0.0;
    };
    // Fields after the parenthesised command name: utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    (tick(11) + tick(12)) as f64 / 100.0
}

/// Reads and parses frames until `n` method frames have arrived; false on end of stream.
async fn read_methods<R: AsyncRead + Unpin>(rd: &mut R, buf: &mut BytesMut, n: usize) -> bool {
    let mut got = 0;
    while got < n {
        match parse_frame(&buf[..]) {
            Ok((rest, f)) => {
                let used = buf.len() - rest.len();
                buf.advance(used);
                if matches!(f, AMQPFrame::Method(..)) {
                    got += 1;
                }
            }
            Err(e) if e.is_incomplete() => {
                buf.reserve(4096);
                if !matches!(rd.read_buf(buf).await, Ok(k) if k > 0) {
                    return false;
                }
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn amqp_sink_connection_rate() {
    let s = SinkThread::start();
    let tune = connection::Tune {
        channel_max: 2047,
        frame_max: 131_072,
        heartbeat: 0,
    };
    let start_ok = Arc::new(encode(&[client::start_ok()]));
    let open = Arc::new(encode(&client::tune_ok_open(&tune, 0, 131_072)));
    let close = Arc::new(encode(&[client::connection_close()]));
    const TASKS: usize = 64;
    let secs = Duration::from_secs(3);
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (addr, start_ok, open, close) = (s.addr, start_ok.clone(), open.clone(), close.clone());
        tasks.push(tokio::spawn(async move {
            let (mut done, mut failed) = (0u64, 0u64);
            let mut buf = BytesMut::with_capacity(4096);
            while t0.elapsed() < secs {
                buf.clear();
                let ok = async {
                    let mut sock = tokio::net::TcpStream::connect(addr).await.ok()?;
                    sock.set_nodelay(true).ok()?;
                    for (out, _) in [
                        (&b"AMQP\x00\x00\x09\x01"[..], "start"),
                        (&start_ok[..], "tune"),
                        (&open[..], "open-ok"),
                        (&close[..], "close-ok"),
                    ] {
                        sock.write_all(out).await.ok()?;
                        read_methods(&mut sock, &mut buf, 1).await.then_some(())?;
                    }
                    Some(())
                };
                match timeout(Duration::from_secs(5), ok).await {
                    Ok(Some(())) => done += 1,
                    _ => failed += 1,
                }
            }
            (done, failed)
        }));
    }
    let (mut done, mut failed) = (0, 0);
    for t in tasks {
        let (d, f) = t.await.unwrap();
        done += d;
        failed += f;
    }
    let secs = t0.elapsed().as_secs_f64();
    let cpu = s.stop();
    println!(
        "amqp sink: {done} connections (handshake + close, {TASKS} concurrent) in {secs:.2} s \
         = {:.0}/s, {failed} failed; sink thread CPU {cpu:.2} s = {:.1} us per connection",
        done as f64 / secs,
        cpu * 1e6 / done as f64
    );
}

/// `clients` publishers with confirms, `size`-byte messages, pipelined for `secs`; returns
/// (messages, bytes, seconds, sink CPU seconds) counted when their confirms arrived.
async fn publish_rate(
    clients: usize,
    size: usize,
    batch: usize,
    secs: Duration,
) -> (u64, u64, f64, f64) {
    let s = SinkThread::start();
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let addr = s.addr;
        tasks.push(tokio::spawn(async move {
            let mut c = Client::handshake(tcp(addr).await, 0, 0).await;
            c.open_channel(1).await;
            c.confirm_select(1).await;
            let one = encode(&client::publish_frames(
                1,
                &vec![0x42; size],
                c.frame_max,
                false,
            ));
            let msg = bytes::Bytes::from(one.repeat(batch));
            let (mut rd, mut wr) = c.io.into_split();
            let (sent_tx, mut sent_rx) = tokio::sync::watch::channel(None::<u64>);
            let writer = tokio::spawn(async move {
                let mut sent = 0u64;
                while t0.elapsed() < secs {
                    wr.write_all(&msg).await.unwrap();
                    sent += batch as u64;
                }
                sent_tx.send_replace(Some(sent));
                wr
            });
            let mut buf = BytesMut::with_capacity(64 * 1024);
            let mut acked = 0u64;
            loop {
                if let Some(n) = *sent_rx.borrow_and_update()
                    && acked >= n
                {
                    break;
                }
                match parse_frame(&buf[..]) {
                    Ok((rest, f)) => {
                        let used = buf.len() - rest.len();
                        buf.advance(used);
                        if let AMQPFrame::Method(_, AMQPClass::Basic(basic::AMQPMethod::Ack(a))) = f
                        {
                            acked = a.delivery_tag;
                        }
                    }
                    Err(e) if e.is_incomplete() => {
                        buf.reserve(64 * 1024);
                        tokio::select! {
                            r = rd.read_buf(&mut buf) => assert!(r.unwrap() > 0, "closed"),
                            _ = sent_rx.changed() => {}
                        }
                    }
                    Err(e) => panic!("{e:?}"),
                }
            }
            drop(writer.await.unwrap());
            acked
        }));
    }
    let mut msgs = 0;
    for t in tasks {
        msgs += timeout(secs + Duration::from_secs(60), t)
            .await
            .unwrap()
            .unwrap();
    }
    let secs = t0.elapsed().as_secs_f64();
    let st = s.stats.snapshot();
    assert_eq!((st.messages, st.confirms), (msgs, msgs));
    (msgs, st.bytes, secs, s.stop())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn amqp_sink_throughput() {
    let (msgs, bytes, secs, cpu) = publish_rate(10, 10 << 20, 1, Duration::from_secs(3)).await;
    println!(
        "amqp sink: 10 clients x 10 MB messages with confirms: {msgs} messages in {secs:.2} s \
         = {:.2} GB/s; sink thread CPU {cpu:.2} s = {:.2} GB per CPU second",
        bytes as f64 / secs / 1e9,
        bytes as f64 / cpu.max(0.01) / 1e9
    );
    let (msgs, _, secs, cpu) = publish_rate(4, 100, 500, Duration::from_secs(3)).await;
    println!(
        "amqp sink: 4 clients x 100-byte messages with confirms: {:.0} msgs/s; sink thread CPU \
         {cpu:.2} s = {:.0} msgs per CPU second",
        msgs as f64 / secs,
        msgs as f64 / cpu.max(0.01)
    );
}
