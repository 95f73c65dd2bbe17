//! The zmq driver under the real msgbench runner, over real TCP on 127.0.0.1.

mod common;

use bytes::Bytes;
use msgbench_core::driver::{Consumer, ConsumerSpec, Driver, DriverError, EventSink, SessionSpec};
use msgbench_core::runner::{self, EventKind, Observer, RunError, RunEvent, RunOutcome};
use msgbench_core::scenario::{
    ConsumerMode, ConsumersSection, OutputSection, PhasesSection, ProducersSection, RateSpec,
    Scenario, TopicsSection, plan,
};
use msgbench_core::shutdown::Shutdown;
use msgbench_core::stamp::Stamp;
use msgbench_driver_zmq::{ZmqConsumer, ZmqDriver};
use msgbench_metrics::IntervalStats;
use std::sync::Arc;
use std::time::Duration;
use zeromq::{Endpoint, PullSocket, Socket, SocketRecv, SocketSend, XPubSocket, ZmqMessage};

/// Collects events; intervals are not needed here.
#[derive(Default)]
struct Collect {
    events: Vec<RunEvent>,
}

impl Observer for Collect {
    fn interval(&mut self, _iv: &IntervalStats) {}
    fn event(&mut self, ev: &RunEvent) {
        self.events.push(ev.clone());
    }
}

/// Throughput measurements run one at a time.
static PERF: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The first of 16 consecutive free ports.
fn free_port() -> u16 {
    common::free_ports(16)
}

struct Setup {
    topics: u32,
    topic_pattern: &'static str,
    producers: u32,
    consumers: u32,
    queue: bool,
    messages: u64,
    workers: Option<usize>,
    /// Messages per second, all producers together (0: unlimited).
    rate: f64,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            topics: 1,
            topic_pattern: "msgbench",
            producers: 1,
            consumers: 1,
            queue: false,
            messages: 20_000,
            workers: None,
            rate: 0.0,
        }
    }
}

fn scenario(url: &str, s: &Setup) -> Scenario {
    Scenario {
        target: Some(url.to_string()),
        topics: TopicsSection {
            count: Some(s.topics),
            pattern: Some(s.topic_pattern.to_string()),
            ..Default::default()
        },
        producers: ProducersSection {
            per_topic: Some(s.producers),
            rate: Some(RateSpec::PerSecond(s.rate)),
            size: Some("64".into()),
            ..Default::default()
        },
        consumers: ConsumersSection {
            per_topic: Some(s.consumers),
            mode: Some(if s.queue {
                ConsumerMode::Queue
            } else {
                ConsumerMode::Fanout
            }),
            ..Default::default()
        },
        phases: PhasesSection {
            warmup: Some("0s".into()),
            messages: Some(s.messages),
            drain: Some("20s".into()),
            ..Default::default()
        },
        output: OutputSection {
            connect_timeout: Some("5s".into()),
            workers: s.workers,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// One run of the real runner with the zmq driver; bounded by a minute whatever happens.
async fn run(url: &str, s: &Setup) -> (Result<RunOutcome, RunError>, Collect) {
    let plan = plan::resolve(&scenario(url, s), 7).expect("valid scenario");
    let (sink, events) = EventSink::channel();
    let driver = ZmqDriver::new(url, sink, plan.connect_timeout).expect("valid URL");
    let mut obs = Collect::default();
    let r = tokio::time::timeout(
        Duration::from_secs(60),
        runner::run(Arc::new(driver), &plan, events, &mut obs, Shutdown::new()),
    )
    .await
    .expect("the run ends within a minute");
    (r, obs)
}

fn assert_complete(o: &RunOutcome, expected: u64) {
    let i = &o.integrity;
    assert_eq!(i.expected, expected, "{i:?}");
    assert_eq!(i.delivered, expected, "{i:?}");
    assert_eq!(i.lost, 0, "{i:?}");
    assert_eq!(i.duplicated, 0, "{i:?}");
    assert_eq!(i.foreign, 0, "{i:?}");
    assert!(o.drain_complete, "{o:?}");
    assert_eq!(o.producers_failed, 0);
}

fn no_disconnects(c: &Collect) {
    let bad: Vec<_> = c
        .events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Disconnected | EventKind::Error))
        .collect();
    assert!(bad.is_empty(), "{bad:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushpull_one_producer_one_consumer() {
    let url = format!("zmq://127.0.0.1:{}", free_port());
    let (r, c) = run(&url, &Setup::default()).await;
    let o = r.unwrap();
    assert_complete(&o, 20_000);
    assert_eq!(o.integrity.reordered, 0, "one PUSH to one PULL keeps order");
    no_disconnects(&c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushpull_thread_per_core_workers() {
    let url = format!("zmq://127.0.0.1:{}?pattern=pushpull", free_port());
    let s = Setup {
        workers: Some(2),
        ..Setup::default()
    };
    let (r, c) = run(&url, &s).await;
    assert_complete(&r.unwrap(), 20_000);
    no_disconnects(&c);
}

/// Two consumers, each receiving everything: they bind and subscribe first, and the producer
/// returns only once both subscriptions have reached it, so nothing is lost to slow joiners.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pubsub_fanout_to_two_consumers() {
    let url = "zmq://127.0.0.1:0?pattern=pubsub";
    let s = Setup {
        consumers: 2,
        messages: 10_000,
        ..Setup::default()
    };
    let (r, c) = run(url, &s).await;
    assert_complete(&r.unwrap(), 20_000);
    no_disconnects(&c);
}

/// Paced: the producer goes idle between sends (where a PUB producer also takes in subscription
/// changes) and the crate's writer task runs while it waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pubsub_paced() {
    let url = "zmq://127.0.0.1:0?pattern=pubsub";
    let s = Setup {
        consumers: 2,
        messages: 4_000,
        rate: 10_000.0,
        ..Setup::default()
    };
    let (r, c) = run(url, &s).await;
    let o = r.unwrap();
    assert_complete(&o, 8_000);
    assert!(o.duration_s >= 0.35, "paced at 10k/s: {}s", o.duration_s);
    no_disconnects(&c);
}

/// Producers bind, consumers connect to them as they appear. Eleven topics `m0`..`m10`: the
/// subscription `m1` is a ZeroMQ prefix of `m10`, yet the consumer of `m1` gets only `m1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pubsub_producers_bind_topics_stay_apart() {
    let url = "zmq://127.0.0.1:0?pattern=pubsub&bind=producer";
    let s = Setup {
        topics: 11,
        topic_pattern: "m{i}",
        messages: 11_000,
        workers: Some(2),
        ..Setup::default()
    };
    let (r, c) = run(url, &s).await;
    assert_complete(&r.unwrap(), 11_000);
    no_disconnects(&c);
}

/// Competing consumers: a PUSH socket deals messages out among the PULL sockets that connected
/// to it; each message reaches exactly one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushpull_queue_group_producer_binds() {
    let url = format!("zmq://127.0.0.1:{}?bind=producer", free_port());
    let s = Setup {
        consumers: 2,
        queue: true,
        ..Setup::default()
    };
    let (r, c) = run(&url, &s).await;
    assert_complete(&r.unwrap(), 20_000);
    no_disconnects(&c);
}

/// Two producers connect to one binding consumer; two topics keep their own consumers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushpull_two_topics_two_producers_each() {
    let url = "zmq://127.0.0.1:0";
    let s = Setup {
        topics: 2,
        topic_pattern: "t.{i}",
        producers: 2,
        messages: 20_000,
        ..Setup::default()
    };
    let (r, _) = run(url, &s).await;
    assert_complete(&r.unwrap(), 20_000);
}

/// A run with no consumers of its own (`--consumers 0`) feeds a PULL socket that is not
/// msgbench's: the producer connects to `PORT .. PORT + peers`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_only_run_feeds_an_outside_pull_socket() {
    let mut pull = PullSocket::new();
    let port = match pull.bind("tcp://127.0.0.1:0").await.unwrap() {
        Endpoint::Tcp(_, port) => port,
        other => panic!("bound {other}"),
    };
    let n = 200_000u64;
    let sink = tokio::spawn(async move {
        let mut ours = 0u64;
        while ours < n {
            let m = pull.recv().await.unwrap();
            assert_eq!(m.len(), 1, "PUSH/PULL messages are one frame");
            let stamp = Stamp::read(m.get(0).unwrap()).expect("the frame is the stamped payload");
            assert_eq!(stamp.run_id, 7);
            assert_eq!(stamp.seq, ours, "in order");
            ours += 1;
        }
        ours
    });
    // On a worker thread of the run's own: when the run ends its runtime ends too, so every
    // message must have been written before the producer's `close` returned.
    let s = Setup {
        consumers: 0,
        messages: n,
        workers: Some(1),
        ..Setup::default()
    };
    let (r, _) = run(&format!("zmq://127.0.0.1:{port}?peers=1"), &s).await;
    let o = r.unwrap();
    assert_eq!(
        o.integrity.expected, 0,
        "no consumer of this run expects anything"
    );
    let got = tokio::time::timeout(Duration::from_secs(15), sink)
        .await
        .expect("the outside socket receives everything")
        .unwrap();
    assert_eq!(got, n);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushpull_refuses_fanout_to_several_consumers() {
    let s = Setup {
        consumers: 2,
        ..Setup::default()
    };
    let (r, _) = run("zmq://127.0.0.1:0", &s).await;
    match r {
        Err(RunError::Connect {
            role: "producer",
            error: DriverError::Config(m),
            ..
        }) => assert!(
            m.contains("fan-out consumers") && m.contains("pubsub"),
            "{m}"
        ),
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pubsub_has_no_queue_groups() {
    let s = Setup {
        consumers: 2,
        queue: true,
        ..Setup::default()
    };
    let (r, _) = run("zmq://127.0.0.1:0?pattern=pubsub", &s).await;
    match r {
        Err(RunError::Unsupported(m)) => assert!(m.contains("competing consumers"), "{m}"),
        other => panic!("expected unsupported, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_failure_says_the_port_is_taken() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let (r, _) = run(&format!("zmq://127.0.0.1:{port}"), &Setup::default()).await;
    match r {
        Err(RunError::Connect {
            role: "consumer",
            error: e @ DriverError::Connect { .. },
            ..
        }) => {
            let m = e.to_string();
            assert!(
                m.contains("already in use") && m.contains(&port.to_string()),
                "{m}"
            );
        }
        other => panic!("expected a bind error, got {other:?}"),
    }
    drop(taken);
}

/// The next delivery's payload, within five seconds.
async fn next(c: &mut ZmqConsumer) -> Bytes {
    tokio::time::timeout(Duration::from_secs(5), c.recv())
        .await
        .expect("a delivery within 5s")
        .unwrap()
        .expect("the subscription is open")
        .payload
}

/// A SUB subscription is a prefix: a consumer of `m1` is sent `m10` too, and drops it; a
/// consumer topic ending in `*` takes the prefix. The payload handed over is the second frame,
/// byte for byte. The publisher here is not msgbench's: an XPUB socket that waits for the
/// subscriptions before it sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_filters_topics_exactly_unless_starred() {
    let port = free_port();
    let d = ZmqDriver::new(
        &format!("zmq://127.0.0.1:{port}?pattern=pubsub"),
        EventSink::channel().0,
        Duration::from_secs(5),
    )
    .unwrap();
    let spec = |id, topic: &str| ConsumerSpec {
        id,
        topic: topic.into(),
        group: None,
        respond: false,
        meta: false,
        target: None,
        source: None,
        fd_free: false,
        lean: false,
    };
    let mut exact = d.consumer(&spec(0, "m1")).await.unwrap();
    let mut prefix = d.consumer(&spec(1, "m*")).await.unwrap();
    let mut xpub = XPubSocket::new();
    for i in 0..2 {
        xpub.connect(&format!("tcp://127.0.0.1:{}", port + i))
            .await
            .unwrap();
    }
    for _ in 0..2 {
        let sub = tokio::time::timeout(Duration::from_secs(5), xpub.recv())
            .await
            .expect("both subscriptions arrive")
            .unwrap();
        assert_eq!(sub.get(0).unwrap()[0], 1, "a subscribe message");
    }
    for (topic, body) in [(&b"m10"[..], &b"ten"[..]), (b"m1", b"one")] {
        let m: ZmqMessage = vec![Bytes::from_static(topic), Bytes::from_static(body)]
            .try_into()
            .unwrap();
        xpub.send(m).await.unwrap();
    }
    assert_eq!(&next(&mut exact).await[..], b"one", "m10 is not m1");
    assert_eq!(&next(&mut prefix).await[..], b"ten");
    assert_eq!(&next(&mut prefix).await[..], b"one");
    exact.close().await.unwrap();
    prefix.close().await.unwrap();
}

#[test]
fn bad_options_are_config_errors_naming_the_option() {
    let t = Duration::from_secs(1);
    let err = |url: &str| match ZmqDriver::new(url, EventSink::channel().0, t) {
        Err(DriverError::Config(m)) => m,
        Err(e) => panic!("{url}: not a config error: {e}"),
        Ok(_) => panic!("{url}: accepted"),
    };
    assert!(err("zmq://127.0.0.1:5555?pattern=pair").contains("pattern=`pair`"));
    assert!(err("zmq://127.0.0.1:5555?bind=nobody").contains("bind=`nobody`"));
    assert!(err("zmq://127.0.0.1:5555?sndhwm=0").contains("sndhwm"));
    assert!(err("zmq://127.0.0.1:5555?rcvhwm=1000").contains("rcvhwm"));
    assert!(err("zmq://127.0.0.1:5555?onhwm=drop").contains("pubsub"));
    assert!(err("zmq://127.0.0.1:5555?linger=0").contains("`linger`"));
    assert!(err("zmq://127.0.0.1").contains("port"));
    let ok = ZmqDriver::new(
        "zmq://127.0.0.1:5555?pattern=pubsub",
        EventSink::channel().0,
        t,
    );
    let caps = ok.unwrap().capabilities();
    assert!(!caps.acks && !caps.queue_groups && !caps.request_reply);
    let pp = ZmqDriver::new("zmq://127.0.0.1:5555", EventSink::channel().0, t).unwrap();
    assert!(pp.capabilities().queue_groups);
}

#[tokio::test]
async fn sessions_are_refused() {
    let d = ZmqDriver::new(
        "zmq://127.0.0.1:5555",
        EventSink::channel().0,
        Duration::from_secs(1),
    )
    .unwrap();
    let spec = SessionSpec {
        id: 0,
        topic: "t".into(),
        source: None,
        fd_free: false,
    };
    match d.session(&spec).await {
        Err(DriverError::Config(m)) => assert!(m.contains("not supported for zmq"), "{m}"),
        Err(e) => panic!("not a config error: {e}"),
        Ok(_) => panic!("a session was opened"),
    }
}

/// Throughput of PUSH/PULL with 64-byte messages, one producer and one consumer on their own
/// threads. `cargo test --release -p msgbench-driver-zmq -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn pushpull_64b_throughput() {
    let _one_at_a_time = PERF.lock().await;
    let url = format!("zmq://127.0.0.1:{}", free_port());
    let s = Setup {
        messages: 5_000_000,
        workers: Some(2),
        ..Setup::default()
    };
    let t = std::time::Instant::now();
    let (r, _) = run(&url, &s).await;
    let o = r.unwrap();
    let wall = t.elapsed();
    assert_complete(&o, 5_000_000);
    let rate = o.integrity.delivered as f64 / o.duration_s;
    println!(
        "PUSH/PULL 64 B: {} messages in {:.2}s (run), {:.2}s (wall, incl. connect): {:.0} msgs/s",
        o.integrity.delivered,
        o.duration_s,
        wall.as_secs_f64(),
        rate
    );
}

/// Throughput of PUB/SUB (an XPUB producer, which writes each message before `send` returns)
/// with 64-byte messages, one producer and one consumer on their own threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn pubsub_64b_throughput() {
    let _one_at_a_time = PERF.lock().await;
    let s = Setup {
        messages: 1_000_000,
        workers: Some(2),
        ..Setup::default()
    };
    let (r, _) = run("zmq://127.0.0.1:0?pattern=pubsub", &s).await;
    let o = r.unwrap();
    assert_complete(&o, 1_000_000);
    println!(
        "PUB/SUB 64 B: {} messages in {:.2}s: {:.0} msgs/s",
        o.integrity.delivered,
        o.duration_s,
        o.integrity.delivered as f64 / o.duration_s
    );
}

/// Environment variable that turns [`sink_process`] on: `PORT:COUNT`.
const SINK_ENV: &str = "MSGBENCH_ZMQ_SINK";

/// The receiving process of [`pushpull_64b_two_processes`] (does nothing unless started by it):
/// a PULL socket that binds, takes COUNT messages and prints its rate.
#[test]
#[ignore]
fn sink_process() {
    let Ok(arg) = std::env::var(SINK_ENV) else {
        return;
    };
    let (port, count) = arg.split_once(':').unwrap();
    let count: u64 = count.parse().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut pull = PullSocket::new();
        pull.bind(&format!("tcp://127.0.0.1:{port}")).await.unwrap();
        let mut first = None;
        let mut got = 0u64;
        let limit = tokio::time::Instant::now() + Duration::from_secs(120);
        while got < count {
            let m = tokio::time::timeout_at(limit, pull.recv())
                .await
                .expect("all messages within two minutes")
                .unwrap();
            Stamp::read(m.get(0).unwrap()).expect("stamped");
            first.get_or_insert_with(std::time::Instant::now);
            got += 1;
        }
        let s = first.unwrap().elapsed().as_secs_f64();
        println!(
            "SINK received {got} in {s:.2}s: {:.0} msgs/s",
            got as f64 / s
        );
    });
}

/// PUSH/PULL 64 B between two processes: this one runs msgbench's producer (no consumers of its
/// own, `peers=1`), a child process (this test binary, running [`sink_process`]) receives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn pushpull_64b_two_processes() {
    let _one_at_a_time = PERF.lock().await;
    let port = free_port();
    let n = 5_000_000u64;
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "sink_process", "--nocapture"])
        .env(SINK_ENV, format!("{port}:{n}"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let s = Setup {
        consumers: 0,
        messages: n,
        workers: Some(1),
        ..Setup::default()
    };
    // The producer's connect retries until the child has bound (within the connect timeout).
    let (r, _) = run(&format!("zmq://127.0.0.1:{port}?peers=1"), &s).await;
    let o = r.unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("SINK")).unwrap_or("");
    assert!(out.status.success() && !line.is_empty(), "{text}");
    let sent = o.phases.iter().map(|p| p.counters.sent).sum::<u64>();
    println!(
        "PUSH/PULL 64 B, two processes: sent {sent} in {:.2}s; {line}",
        o.duration_s
    );
}
