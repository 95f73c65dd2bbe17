//! The JSON gateway (`ws-broadcast --gateway`) with messages injected through its relay, seen by
//! WebSocket clients: a minimal one written here on the frame codec (so every byte on the wire
//! is checked) and a third-party one, Debian's python3-websockets for the system Python
//! (`fixtures/ws_gateway_client.py`; the test says it was skipped when that is not installed).
//! Clients get only their streams, wrapped exactly; requests are answered; bodies that are not
//! JSON and private keys go to nobody and are counted; the envelope shape re-serializes.

use bytes::BytesMut;
use msgbench_driver_ws::codec::{self, OP_TEXT};
use msgbench_serve::ws::{Broadcast, BroadcastConfig, BroadcastStats};
use msgbench_serve::ws_gateway::{GatewayRelay, Outcome, Shape};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

async fn start(
    shape: Shape,
) -> (
    SocketAddr,
    Arc<BroadcastStats>,
    GatewayRelay,
    oneshot::Sender<()>,
) {
    let config = BroadcastConfig {
        gateway: Some(shape),
        ..BroadcastConfig::default()
    };
    let b = Broadcast::bind("127.0.0.1:0", config).await.unwrap();
    let (addr, stats, relay) = (b.local_addr(), b.stats(), b.gateway_relay());
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(b.run(async move {
        let _ = rx.await;
    }));
    (addr, stats, relay, tx)
}

/// A WebSocket client on the raw codec.
struct Client {
    s: TcpStream,
    buf: BytesMut,
}

impl Client {
    /// Connects and upgrades with `path` (and query).
    async fn connect(addr: SocketAddr, path: &str) -> Client {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut req = BytesMut::new();
        codec::put_request(&mut req, "gw", path, "dGhlIHNhbXBsZSBub25jZQ==", &[]);
        s.write_all(&req).await.unwrap();
        let mut c = Client {
            s,
            buf: BytesMut::new(),
        };
        let head = loop {
            if let Some(h) = codec::parse_head(&mut c.buf, 16 * 1024).unwrap() {
                break h;
            }
            assert!(c.s.read_buf(&mut c.buf).await.unwrap() > 0, "closed");
        };
        assert_eq!(head.status(), Some(101), "{}", head.first);
        c
    }

    /// Sends one masked text message.
    async fn send(&mut self, text: &str) {
        let mut f = BytesMut::new();
        codec::put_frame(&mut f, OP_TEXT, text.as_bytes(), Some([9, 8, 7, 6]));
        self.s.write_all(&f).await.unwrap();
    }

    /// The next message's text (it must be a text frame), or `None` after `within`.
    async fn next_within(&mut self, within: Duration) -> Option<String> {
        tokio::time::timeout(within, async {
            loop {
                if let Some(f) = codec::parse(&mut self.buf, false, 1 << 24).unwrap() {
                    assert_eq!(f.opcode, OP_TEXT, "gateway messages are text frames");
                    assert!(f.fin);
                    return String::from_utf8(f.payload.to_vec()).unwrap();
                }
                assert!(self.s.read_buf(&mut self.buf).await.unwrap() > 0, "closed");
            }
        })
        .await
        .ok()
    }

    async fn next(&mut self) -> String {
        self.next_within(Duration::from_secs(5))
            .await
            .expect("a message within 5 s")
    }

    async fn next_json(&mut self) -> Value {
        serde_json::from_str(&self.next().await).unwrap()
    }
}

#[tokio::test]
async fn clients_get_their_streams_wrapped_verbatim() {
    let (addr, stats, mut relay, _stop) = start(Shape::Rango).await;
    let mut btc = Client::connect(addr, "/?stream=btcusd.trades").await;
    let mut both = Client::connect(addr, "/ranger?stream=ethusd.trades,btcusd.trades").await;
    let mut none = Client::connect(addr, "/").await;

    assert_eq!(
        relay.send("public.ethusd.trades", b"{\"p\":1}"),
        Outcome::Sent
    );
    let body = b" {\"id\": 7, \"price\":\"1.5\"} ";
    assert_eq!(relay.send("public.btcusd.trades", body), Outcome::Sent);
    let want = "{\"btcusd.trades\": {\"id\": 7, \"price\":\"1.5\"} }";
    assert_eq!(
        btc.next().await,
        want,
        "the body verbatim, under its stream"
    );
    assert_eq!(both.next().await, "{\"ethusd.trades\":{\"p\":1}}");
    assert_eq!(both.next().await, want);

    // Dropped and counted: a private key, bodies that are not JSON (or not UTF-8).
    assert_eq!(relay.send("private.IDX.orders", b"{}"), Outcome::Ignored);
    assert_eq!(
        relay.send("public.btcusd.trades", b"not json"),
        Outcome::Rejected
    );
    assert_eq!(
        relay.send("public.btcusd.trades", b"{\"a\":\"\xff\"}"),
        Outcome::Rejected
    );
    assert_eq!(relay.send("public.btcusd.trades", b"[1]"), Outcome::Sent);
    assert_eq!(
        btc.next().await,
        "{\"btcusd.trades\":[1]}",
        "nothing before it"
    );
    assert_eq!(both.next().await, "{\"btcusd.trades\":[1]}");
    assert_eq!(
        none.next_within(Duration::from_millis(300)).await,
        None,
        "a client with no stream gets nothing"
    );
    let n = |c: &std::sync::atomic::AtomicU64| c.load(Relaxed);
    assert_eq!(n(&stats.messages_in), 6);
    assert_eq!((n(&stats.rejected), n(&stats.ignored)), (2, 1));
    assert_eq!(n(&stats.frames_out), 5);
    // eth: skipped by btc and none; btc twice: skipped by none.
    assert_eq!(n(&stats.unsubscribed), 4);
}

#[tokio::test]
async fn subscribe_and_unsubscribe_messages_are_answered() {
    let (addr, stats, mut relay, _stop) = start(Shape::Rango).await;
    let mut c = Client::connect(addr, "/").await;
    c.send(r#"{"event":"subscribe","streams":["btcusd.trades","global.tickers"]}"#)
        .await;
    assert_eq!(
        c.next_json().await,
        json!({"success": {"message": "subscribed", "streams": ["btcusd.trades", "global.tickers"]}})
    );
    relay.send("global.tickers", b"{\"t\":1}");
    assert_eq!(c.next().await, "{\"global.tickers\":{\"t\":1}}");
    c.send(r#"{"event":"unsubscribe","streams":["btcusd.trades"]}"#)
        .await;
    assert_eq!(
        c.next_json().await,
        json!({"success": {"message": "unsubscribed", "streams": ["global.tickers"]}})
    );
    relay.send("public.btcusd.trades", b"{\"gone\":1}");
    relay.send("global.tickers", b"{\"t\":2}");
    assert_eq!(
        c.next().await,
        "{\"global.tickers\":{\"t\":2}}",
        "unsubscribed: btcusd.trades no longer comes"
    );
    // A malformed request: an error answer, the connection and subscriptions stay.
    c.send("subscribe me").await;
    let e = c.next_json().await;
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not a request"),
        "{e}"
    );
    c.send(r#"{"event":"publish","streams":["x"]}"#).await;
    let e = c.next_json().await;
    assert!(
        e["error"]["message"].as_str().unwrap().contains("publish"),
        "{e}"
    );
    relay.send("global.tickers", b"{\"t\":3}");
    assert_eq!(c.next().await, "{\"global.tickers\":{\"t\":3}}");
    assert_eq!(
        (
            stats.requests.load(Relaxed),
            stats.bad_requests.load(Relaxed)
        ),
        (4, 2)
    );
}

#[tokio::test]
async fn the_envelope_shape_reserializes_the_body() {
    let (addr, stats, mut relay, _stop) = start(Shape::Envelope).await;
    let mut c = Client::connect(addr, "/?stream=btcusd.trades").await;
    let body = br#"{ "z": 1, "a": {"y": [1, 2.5, "MB1~stamp"]}, "m": null }"#;
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert_eq!(relay.send("public.btcusd.trades", body), Outcome::Sent);
    let text = c.next().await;
    let prefix =
        r#"{"stream":"btcusd.trades","data":{"a":{"y":[1,2.5,"MB1~stamp"]},"m":null,"z":1},"ts":"#;
    assert!(
        text.starts_with(prefix),
        "keys sorted, whitespace gone, in the envelope: {text}"
    );
    let v: Value = serde_json::from_str(&text).unwrap();
    let ts = v["ts"].as_u64().unwrap();
    assert!(ts >= before && ts < before + 60_000, "{ts} vs {before}");
    assert_eq!(relay.send("public.btcusd.trades", b"{"), Outcome::Rejected);
    assert_eq!(stats.rejected.load(Relaxed), 1);
    assert_eq!(c.next_within(Duration::from_millis(300)).await, None);
}

/// python3-websockets, a client msgbench did not write: URL and message subscriptions, the
/// answers rango gives, and exactly the messages of its streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_party_client_subscribes_and_receives() {
    let python = "/usr/bin/python3";
    let has = std::process::Command::new(python)
        .args(["-c", "import websockets"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has {
        eprintln!(
            "skipped: install the Debian package python3-websockets ({python} cannot import websockets)"
        );
        return;
    }
    let (addr, _stats, mut relay, _stop) = start(Shape::Rango).await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/ws_gateway_client.py"
    );
    let requests = json!([
        r#"{"event":"subscribe","streams":["ethusd.trades"]}"#,
        r#"{"event":"unsubscribe","streams":["btcusd.trades"]}"#,
        r#"{"event":"subscribe","streams":["btcusd.trades"]}"#,
        "hello",
    ]);
    let mut child = std::process::Command::new(python)
        .arg(script)
        .arg(format!(
            "ws://{addr}/api/v2/ranger/public/?stream=btcusd.trades"
        ))
        .arg(requests.to_string())
        .arg("3")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            let _ = tx.send(line.unwrap());
        }
    });
    let line = |rx: std::sync::mpsc::Receiver<String>| {
        tokio::task::spawn_blocking(move || {
            let l = rx.recv_timeout(Duration::from_secs(30));
            (l, rx)
        })
    };
    let (ready, rx) = line(rx).await.unwrap();
    assert_eq!(
        ready.as_deref(),
        Ok("ready"),
        "the client did not get its answers"
    );
    relay.send("public.btcusd.trades", b"{\"n\":1}");
    relay.send("public.xrpusd.trades", b"{\"n\":2}");
    relay.send("public.ethusd.trades", b"{\"n\":3}");
    relay.send("public.btcusd.trades", b"garbage");
    relay.send("public.btcusd.trades", b"{\"n\":4}");
    let (out, _rx) = line(rx).await.unwrap();
    let out: Value = serde_json::from_str(&out.expect("the client's report")).unwrap();
    assert!(child.wait().unwrap().success());
    let answers: Vec<Value> = out["answers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| serde_json::from_str(a.as_str().unwrap()).unwrap())
        .collect();
    let ok = |m: &str, s: &[&str]| json!({"success": {"message": m, "streams": s}});
    assert_eq!(
        answers[..3],
        [
            ok("subscribed", &["btcusd.trades", "ethusd.trades"]),
            ok("unsubscribed", &["ethusd.trades"]),
            ok("subscribed", &["btcusd.trades", "ethusd.trades"]),
        ]
    );
    assert!(answers[3]["error"]["message"].is_string(), "{}", answers[3]);
    assert_eq!(
        out["messages"],
        json!([
            "{\"btcusd.trades\":{\"n\":1}}",
            "{\"ethusd.trades\":{\"n\":3}}",
            "{\"btcusd.trades\":{\"n\":4}}",
        ]),
        "exactly its streams' messages, as text"
    );
}
