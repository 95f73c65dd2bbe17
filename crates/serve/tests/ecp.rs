//! The ECP endpoint simulator against a real Artemis (started by `scripts/brokers.sh`; the URL
//! comes from `MSGBENCH_IT_ARTEMIS_URL`): a business application's messages to the outbox get
//! replies, inbox deliveries and status events with the right contents, faults and duplicates
//! in exact numbers, and delays that do not hold the pipeline up.

use msgbench_core::driver::DriverError;
use msgbench_core::meta::{Meta, Value};
use msgbench_core::scenario::TlsPlan;
use msgbench_driver_amqp10::client::Endpoint;
use msgbench_driver_amqp10::conn::{Conn, Event, LinkId, Received};
use msgbench_driver_amqp10::frames::{Disposition, Outcome};
use msgbench_driver_amqp10::message::{OutBody, OutMessage};
use msgbench_serve::ecp::{self, EcpEndpointConfig, EcpStats};
use std::collections::HashMap;
use std::time::{Duration, Instant};

fn url() -> String {
    std::env::var("MSGBENCH_IT_ARTEMIS_URL").expect("checked by the test's `artemis()`")
}

/// Whether the Artemis broker is there: without `MSGBENCH_IT_ARTEMIS_URL` the test is skipped
/// with a message (it fails instead under `MSGBENCH_IT_REQUIRE=1`, as `scripts/test.sh` runs).
fn artemis(test: &str) -> bool {
    if std::env::var_os("MSGBENCH_IT_ARTEMIS_URL").is_some() {
        return true;
    }
    let hint = "start the test brokers with `scripts/brokers.sh up` and `eval \"$(scripts/brokers.sh env)\"`, or run everything with `scripts/test.sh`";
    if std::env::var_os("MSGBENCH_IT_REQUIRE").is_some() {
        panic!("MSGBENCH_IT_ARTEMIS_URL is not set (and MSGBENCH_IT_REQUIRE is): {hint}");
    }
    eprintln!("\n{test} skipped: MSGBENCH_IT_ARTEMIS_URL is not set: {hint}");
    false
}

/// Queue names of their own for each test run (Artemis creates them on demand).
fn config(tag: &str) -> EcpEndpointConfig {
    let p = format!("it.ecp.{tag}.{}", std::process::id());
    EcpEndpointConfig {
        outbox_url: url(),
        inbox_url: url(),
        outbox: format!("{p}.outbox"),
        reply: format!("{p}.outbox.reply"),
        send_event: format!("{p}.send.event"),
        inbox: format!("{p}.inbox"),
        ..EcpEndpointConfig::default()
    }
}

/// The business application's side: each link on a connection of its own, so the test can
/// wait on one queue at a time.
struct Client(String);

async fn client(name: &str) -> Client {
    Client(name.to_string())
}

impl Client {
    async fn link(
        &self,
        address: &str,
        caps: &[String],
        receiver: bool,
        credit: u32,
    ) -> Result<Link, DriverError> {
        let ep = Endpoint::parse(&url(), &TlsPlan::default()).unwrap();
        let mut conn = ep
            .open(
                &format!("{}-{address}", self.0),
                None,
                Duration::from_secs(10),
            )
            .await?;
        let link = conn
            .attach(None, address, caps, receiver, false, credit, true)
            .await?;
        Ok(Link { conn, link })
    }

    async fn receiver(
        &self,
        address: &str,
        caps: &[String],
        credit: u32,
        _: Option<&str>,
    ) -> Result<Link, DriverError> {
        self.link(address, caps, true, credit).await
    }

    async fn sender(
        &self,
        address: &str,
        caps: &[String],
        _settled: bool,
    ) -> Result<Link, DriverError> {
        self.link(address, caps, false, 0).await
    }

    async fn close(&self, _: Duration) {}
}

/// One link on its own connection.
struct Link {
    conn: Conn,
    link: LinkId,
}

impl Link {
    fn address(&self) -> &str {
        self.conn.address(self.link)
    }

    /// Sends without waiting for the outcome.
    async fn send(&mut self, m: OutMessage<'_>) {
        self.conn.wait_credit(self.link).await.unwrap();
        self.conn.send(self.link, 0, &m);
        self.conn.flush().await.unwrap();
    }

    /// The next `n` outcomes.
    async fn outcomes(&mut self, n: usize) -> Vec<Outcome> {
        let mut out = Vec::new();
        while out.len() < n {
            if let Event::Settled { outcome, .. } = self.conn.next_event().await.unwrap() {
                out.push(outcome);
            }
        }
        out
    }

    async fn send_wait(&mut self, m: OutMessage<'_>) -> Result<Outcome, String> {
        self.send(m).await;
        Ok(self.outcomes(1).await.remove(0))
    }

    async fn recv(&mut self, _meta: bool) -> Result<Received, String> {
        loop {
            match self.conn.next_event().await {
                Ok(Event::Delivery(r)) => return Ok(r),
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    }
}

/// A business application's message `seq`.
fn ba_message(seq: u64, tracing: bool) -> Meta {
    let ba = format!("{seq}-run1");
    Meta {
        message_id: None,
        correlation_id: Some(ba.clone()),
        creation_time_ms: Some(1_700_000_000_000 + seq),
        properties: vec![
            ("receiverCode".into(), Value::Str("10V-RECEIVER".into())),
            ("messageType".into(), Value::Str("MSGBENCH-TEST".into())),
            ("businessType".into(), Value::Str("A01".into())),
            ("baMessageID".into(), Value::Str(ba)),
            ("senderApplication".into(), Value::Str("msgbench".into())),
            ("isTracingMessage".into(), Value::Bool(tracing)),
        ],
        topic: None,
    }
}

/// Receives `n` messages (accepting them) or panics after `within`.
async fn take(r: &mut Link, n: usize, within: Duration) -> Vec<Received> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    while out.len() < n {
        let m = tokio::time::timeout_at(deadline, r.recv(true))
            .await
            .unwrap_or_else(|_| panic!("{} of {n} messages from `{}`", out.len(), r.address()))
            .unwrap();
        r.conn.settle(m.id, m.id, Disposition::Accept);
        out.push(m);
    }
    out
}

/// Nothing more arrives within `quiet`.
async fn nothing_more(r: &mut Link, quiet: Duration) {
    if let Ok(m) = tokio::time::timeout(quiet, r.recv(true)).await {
        panic!("unexpected message on `{}`: {m:?}", r.address());
    }
}

fn prop<'a>(m: &'a Received, k: &str) -> Option<&'a str> {
    m.parts.meta.property(k).and_then(Value::as_str)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_deliveries_events_and_exact_faults() {
    if !artemis("replies_deliveries_events_and_exact_faults") {
        return;
    }
    let mut cfg = config("faults");
    cfg.extra_events = true;
    cfg.error_reply_ratio = 0.1; // messages 10 and 20
    cfg.failed_ratio = 0.2; // 5 and 15 (10 and 20 got error replies: an error wins)
    cfg.duplicate_every = 7; // 7 and 14
    let caps = cfg.amqp10.capabilities.clone();
    let c = client("ecp-test-ba").await;
    let mut replies = c.receiver(&cfg.reply, &caps, 100, None).await.unwrap();
    let mut events = c.receiver(&cfg.send_event, &caps, 100, None).await.unwrap();
    let mut inbox = c.receiver(&cfg.inbox, &caps, 100, None).await.unwrap();
    let mut outbox = c.sender(&cfg.outbox, &caps, false).await.unwrap();

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let sim = tokio::spawn(ecp::run(cfg, async {
        let _ = stop_rx.await;
    }));
    let mut bodies = HashMap::new();
    for seq in 1..=20u64 {
        let meta = ba_message(seq, seq == 3);
        let body = format!("payload {seq} {}", "x".repeat(3000));
        let outcome = outbox
            .send_wait(OutMessage {
                meta: Some(&meta),
                body: OutBody::Data(body.as_bytes()),
                durable: false,
            })
            .await
            .unwrap();
        assert_eq!(outcome, Outcome::Accepted);
        bodies.insert(format!("{seq}-run1"), body);
    }
    let t = Duration::from_secs(20);

    // Replies: one per message, correlated by baMessageID; 10 and 20 carry an errorCode.
    let rs = take(&mut replies, 20, t).await;
    let mut errors = Vec::new();
    for r in &rs {
        let ba = r.parts.meta.correlation_id.clone().unwrap();
        assert_eq!(prop(r, "baMessageID"), Some(ba.as_str()));
        assert!(
            prop(r, "messageID").is_some_and(|id| !id.is_empty()),
            "{r:?}"
        );
        if prop(r, "errorCode").is_some() {
            assert!(prop(r, "errorMessage").is_some());
            errors.push(ba);
        }
    }
    errors.sort();
    assert_eq!(errors, ["10-run1", "20-run1"]);

    // Inbox: 20 - 2 errors - 2 failed - 1 tracing = 15, plus 2 duplicates.
    let ds = take(&mut inbox, 17, t).await;
    let mut seen: HashMap<String, u32> = HashMap::new();
    for d in &ds {
        let ba = prop(d, "baMessageID").unwrap().to_string();
        assert_eq!(
            d.parts.body,
            bodies[&ba].as_bytes(),
            "the body travels unchanged"
        );
        assert!(!d.parts.text);
        assert_eq!(prop(d, "messageType"), Some("MSGBENCH-TEST"));
        assert_eq!(prop(d, "receiverCode"), Some("10V-RECEIVER"));
        assert!(prop(d, "senderCode").is_some());
        assert!(prop(d, "messageID").is_some());
        *seen.entry(ba).or_default() += 1;
    }
    for gone in ["3-run1", "5-run1", "10-run1", "15-run1", "20-run1"] {
        assert!(
            !seen.contains_key(gone),
            "{gone} must not be delivered: {seen:?}"
        );
    }
    assert_eq!((seen["7-run1"], seen["14-run1"], seen["1-run1"]), (2, 2, 1));

    // Events: ACCEPTED 18, TRANSPORTED 16, DELIVERED 16, RECEIVED 16 + 2, FAILED 2.
    let es = take(&mut events, 18 + 16 + 16 + 18 + 2, t).await;
    let mut by_status: HashMap<String, u64> = HashMap::new();
    for e in &es {
        assert!(e.parts.text, "status events are amqp-value strings");
        assert!(prop(e, "messageID").is_some() && prop(e, "baMessageID").is_some());
        let status = String::from_utf8(e.parts.body.to_vec()).unwrap();
        if status == "FAILED" {
            assert!(["5-run1", "15-run1"].contains(&prop(e, "baMessageID").unwrap()));
        }
        *by_status.entry(status).or_default() += 1;
    }
    let want: HashMap<String, u64> = [
        ("ACCEPTED", 18),
        ("TRANSPORTED", 16),
        ("DELIVERED", 16),
        ("RECEIVED", 18),
        ("FAILED", 2),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(by_status, want);
    let quiet = Duration::from_millis(300);
    nothing_more(&mut replies, quiet).await;
    nothing_more(&mut inbox, quiet).await;
    nothing_more(&mut events, quiet).await;

    let _ = stop_tx.send(());
    let stats = sim.await.unwrap().unwrap();
    assert_eq!(
        stats,
        EcpStats {
            received: 20,
            replied: 18,
            error_replies: 2,
            delivered: 17,
            accepted: 18,
            transported: 16,
            delivered_events: 16,
            received_events: 18,
            failed: 2,
            duplicates: 2,
            refused: 0,
            reconnects: 0,
        }
    );
    c.close(Duration::from_secs(2)).await;
}

/// A 200 ms reply delay for 300 messages sent at once: every reply waits its 200 ms, and all
/// of them are out within a fraction of 300 × 200 ms (one timer queue, not a sleep each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delays_do_not_serialize() {
    if !artemis("delays_do_not_serialize") {
        return;
    }
    let mut cfg = config("delays");
    cfg.reply_delay = Duration::from_millis(200);
    let caps = cfg.amqp10.capabilities.clone();
    let c = client("ecp-test-delay").await;
    let mut replies = c.receiver(&cfg.reply, &caps, 500, None).await.unwrap();
    let mut outbox = c.sender(&cfg.outbox, &caps, false).await.unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let sim = tokio::spawn(ecp::run(cfg, async {
        let _ = stop_rx.await;
    }));
    // Let the simulator attach, so the delay is not hidden in its start.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t0 = Instant::now();
    for seq in 1..=300u64 {
        let meta = ba_message(seq, false);
        outbox
            .send(OutMessage {
                meta: Some(&meta),
                body: OutBody::Data(b"x"),
                durable: false,
            })
            .await;
    }
    outbox.outcomes(300).await;
    let first = take(&mut replies, 1, Duration::from_secs(10)).await;
    assert!(
        t0.elapsed() >= Duration::from_millis(190),
        "the first reply came after {:?}",
        t0.elapsed()
    );
    drop(first);
    take(&mut replies, 299, Duration::from_secs(10)).await;
    let all = t0.elapsed();
    assert!(all < Duration::from_secs(5), "300 replies took {all:?}");
    let _ = stop_tx.send(());
    let stats = sim.await.unwrap().unwrap();
    assert_eq!((stats.received, stats.replied), (300, 300));
    assert_eq!(stats.delivered, 300, "{stats:?}");
    c.close(Duration::from_secs(2)).await;
}
