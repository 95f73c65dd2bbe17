//! The seed corpora in `fuzz/corpus/TARGET/`: a few valid inputs per target, written by
//! msgbench's own encoders (or by hand where it has none), so fuzzing starts from valid
//! structure. Regenerate them with
//! `cargo test -p msgbench-fuzz-targets --test seeds -- --ignored` (the files are committed;
//! `tests/corpus.rs` runs them through the targets on every `cargo test`).

use amq_protocol::frame::{AMQPContentHeader, AMQPFrame};
use amq_protocol::protocol::{AMQPClass, basic, channel, confirm, connection, queue};
use amq_protocol::types::{AMQPValue, FieldTable, LongString, ShortString};
use bytes::{BufMut, BytesMut};
use msgbench_core::meta::{Meta, Value};
use msgbench_core::stamp::{STAMP_LEN, Stamp, TEXT_STAMP_LEN};
use msgbench_driver_amqp::codec as amqp;
use msgbench_driver_amqp10::codec::Enc;
use msgbench_driver_amqp10::frames as a10;
use msgbench_driver_amqp10::message::{OutBody, OutMessage, put_message};
use msgbench_driver_amqp10::options::Disposition;
use msgbench_driver_amqp10::reply;
use msgbench_driver_mqtt::codec::{self as mqtt, ConnectOpts, Version};
use msgbench_driver_redis::resp;
use msgbench_driver_ws::codec as ws;
use msgbench_driver_zmq::zmtp::{self, SocketType};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus")
}

/// Writes one seed: the mode byte (stream targets; see the crate docs) and the bytes.
fn seed(target: &str, name: &str, mode: Option<u8>, bytes: &[u8]) {
    let dir = root().join(target);
    std::fs::create_dir_all(&dir).unwrap();
    let mut data = Vec::from_iter(mode);
    data.extend_from_slice(bytes);
    std::fs::write(dir.join(name), data).unwrap();
}

/// Mode byte: reads of `piece` bytes (0: all at once), `flag` in the low bit.
fn mode(piece: u8, flag: bool) -> Option<u8> {
    Some(piece << 1 | u8::from(flag))
}

#[test]
#[ignore = "writes the committed seed corpora"]
fn write_seeds() {
    mqtt_seeds();
    amqp_seeds();
    amqp10_seeds();
    http_seeds();
    ws_seeds();
    zmtp_seeds();
    nats_seeds();
    redis_seeds();
    file_seeds();
}

fn connect_opts(version: Version) -> ConnectOpts<'static> {
    ConnectOpts {
        version,
        client_id: "msgbench-1",
        keep_alive: 30,
        clean: true,
        username: Some("user"),
        password: Some("secret"),
        session_expiry: 60,
    }
}

fn mqtt_seeds() {
    for (v, name) in [(Version::V311, "v311"), (Version::V5, "v5")] {
        let v5 = v == Version::V5;
        // What a client receives.
        let mut b = BytesMut::new();
        mqtt::put_connack(&mut b, v, false, 0);
        mqtt::put_suback(&mut b, v, 1, &[1, 0x80]);
        mqtt::put_publish(&mut b, v, b"bench/0", b"hello", 1, false, false, 7);
        mqtt::put_publish(&mut b, v, b"bench/1", &[0u8; 40], 0, true, false, 0);
        mqtt::put_ack(&mut b, mqtt::PUBACK, 7);
        mqtt::put_ack(&mut b, mqtt::PUBREC, 8);
        mqtt::put_unsuback(&mut b, v, 2, 1);
        mqtt::put_pingresp(&mut b);
        seed("mqtt_codec", &format!("{name}_server"), mode(0, v5), &b);
        seed(
            "mqtt_codec",
            &format!("{name}_server_split"),
            mode(3, v5),
            &b,
        );
        // What a broker receives.
        let mut b = BytesMut::new();
        mqtt::put_connect(&mut b, &connect_opts(v));
        mqtt::put_subscribe(&mut b, v, 1, &[("bench/+", 1), ("$share/g/bench/#", 2)]);
        mqtt::put_publish(&mut b, v, b"bench/0", b"hello", 2, false, false, 9);
        mqtt::put_ack(&mut b, mqtt::PUBREL, 9);
        mqtt::put_unsubscribe(&mut b, v, 3, &["bench/+"]);
        mqtt::put_pingreq(&mut b);
        mqtt::put_disconnect(&mut b);
        seed("mqtt_codec", &format!("{name}_client"), mode(0, v5), &b);
        seed("mqtt_broker", &format!("{name}_session"), None, &b);
    }
    // MQTT 5 CONNECT with a will (properties: will delay, expiry, content type) and a PUBLISH
    // with properties and a SUBSCRIBE with options, by hand: msgbench's codec writes neither.
    let will_props = [
        0x18, 0, 0, 0, 5, 0x02, 0, 0, 0, 60, 0x03, 0, 4, b't', b'e', b'x', b't',
    ];
    let mut body = vec![
        0,
        4,
        b'M',
        b'Q',
        b'T',
        b'T',
        5,
        0x02 | 0x04 | 0x08 | 0x20,
        0,
        30,
    ];
    body.extend_from_slice(&[5, 0x27, 0, 1, 0, 0]); // maximum packet size 65536
    body.extend_from_slice(&[0, 2, b'c', b'1']);
    body.push(will_props.len() as u8);
    body.extend_from_slice(&will_props);
    body.extend_from_slice(&[0, 4, b'w', b'/', b'i', b'l', 0, 3, b'b', b'y', b'e']);
    let mut b = vec![0x10, body.len() as u8];
    b.extend_from_slice(&body);
    let publish = [
        0x32, 17, 0, 3, b'a', b'/', b'b', 0, 1, 7, 0x01, 1, 0x02, 0, 0, 0, 9, b'h', b'i',
    ];
    b.extend_from_slice(&publish);
    let subscribe = [0x82, 10, 0, 2, 0, 0, 4, b'a', b'/', b'+', b'#', 0x2d];
    b.extend_from_slice(&subscribe);
    seed("mqtt_broker", "v5_will_props", None, &b);
}

fn method(b: &mut BytesMut, channel: u16, m: AMQPClass) {
    amqp::put_method(b, channel, m);
}

fn amqp_seeds() {
    let mut nested = FieldTable::default();
    nested.insert("publisher_confirms".into(), AMQPValue::Boolean(true));
    let mut props = FieldTable::default();
    props.insert("capabilities".into(), AMQPValue::FieldTable(nested));
    props.insert("product".into(), AMQPValue::LongString("msgbench".into()));
    // Server to client (the client's parser).
    let mut b = BytesMut::new();
    let start = connection::Start {
        version_major: 0,
        version_minor: 9,
        server_properties: props.clone(),
        mechanisms: LongString::from("PLAIN AMQPLAIN"),
        locales: LongString::from("en_US"),
    };
    method(
        &mut b,
        0,
        AMQPClass::Connection(connection::AMQPMethod::Start(start)),
    );
    let tune = connection::Tune {
        channel_max: 2047,
        frame_max: 131_072,
        heartbeat: 60,
    };
    method(
        &mut b,
        0,
        AMQPClass::Connection(connection::AMQPMethod::Tune(tune)),
    );
    let open_ok = connection::OpenOk {};
    method(
        &mut b,
        0,
        AMQPClass::Connection(connection::AMQPMethod::OpenOk(open_ok)),
    );
    method(
        &mut b,
        1,
        AMQPClass::Channel(channel::AMQPMethod::OpenOk(channel::OpenOk {})),
    );
    let consume_ok = basic::ConsumeOk {
        consumer_tag: ShortString::from("ctag-1"),
    };
    method(
        &mut b,
        1,
        AMQPClass::Basic(basic::AMQPMethod::ConsumeOk(consume_ok)),
    );
    let deliver = basic::Deliver {
        consumer_tag: ShortString::from("ctag-1"),
        delivery_tag: 1,
        redelivered: false,
        exchange: ShortString::from(""),
        routing_key: ShortString::from("bench.0"),
    };
    method(
        &mut b,
        1,
        AMQPClass::Basic(basic::AMQPMethod::Deliver(deliver)),
    );
    content(&mut b, 1, b"hello");
    amqp::put_ack(&mut b, 1, 1, false);
    amqp::put_heartbeat(&mut b);
    seed("amqp_client", "server", mode(0, false), &b);
    seed("amqp_client", "server_split", mode(5, false), &b);
    // Client to server (the sink): the handshake, then topology, confirms and publishes.
    let mut b = BytesMut::new();
    let start_ok = connection::StartOk {
        client_properties: props,
        mechanism: ShortString::from("PLAIN"),
        response: LongString::from("\0guest\0guest"),
        locale: ShortString::from("en_US"),
    };
    method(
        &mut b,
        0,
        AMQPClass::Connection(connection::AMQPMethod::StartOk(start_ok)),
    );
    let tune_ok = connection::TuneOk {
        channel_max: 2047,
        frame_max: 131_072,
        heartbeat: 60,
    };
    method(
        &mut b,
        0,
        AMQPClass::Connection(connection::AMQPMethod::TuneOk(tune_ok)),
    );
    let open = connection::Open {
        virtual_host: ShortString::from("/"),
    };
    method(
        &mut b,
        0,
        AMQPClass::Connection(connection::AMQPMethod::Open(open)),
    );
    method(
        &mut b,
        1,
        AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
    );
    let declare = queue::Declare {
        queue: ShortString::from("bench.0"),
        passive: false,
        durable: true,
        exclusive: false,
        auto_delete: false,
        nowait: false,
        arguments: FieldTable::default(),
    };
    method(
        &mut b,
        1,
        AMQPClass::Queue(queue::AMQPMethod::Declare(declare)),
    );
    let select = confirm::Select { nowait: false };
    method(
        &mut b,
        1,
        AMQPClass::Confirm(confirm::AMQPMethod::Select(select)),
    );
    let template = amqp::PublishTemplate::new(1, "", "bench.0", false, true);
    template.put(&mut b, b"hello", 131_072);
    template.put(&mut b, &[7u8; 300], 4096);
    let close = channel::Close {
        reply_code: 200,
        reply_text: "bye".into(),
        class_id: 0,
        method_id: 0,
    };
    method(
        &mut b,
        1,
        AMQPClass::Channel(channel::AMQPMethod::Close(close)),
    );
    let close = connection::Close {
        reply_code: 200,
        reply_text: "bye".into(),
        class_id: 0,
        method_id: 0,
    };
    method(
        &mut b,
        0,
        AMQPClass::Connection(connection::AMQPMethod::Close(close)),
    );
    seed("amqp_sink", "session", mode(0, true), &b);
    seed("amqp_sink", "session_split", mode(9, true), &b);
    let mut with_header = b"AMQP\x00\x00\x09\x01".to_vec();
    with_header.extend_from_slice(&b);
    seed(
        "amqp_sink",
        "session_own_header",
        mode(0, false),
        &with_header,
    );
}

/// A content header and one body frame.
fn content(b: &mut BytesMut, channel: u16, body: &[u8]) {
    let header = AMQPContentHeader {
        class_id: 60,
        body_size: body.len() as u64,
        properties: basic::AMQPProperties::default().with_delivery_mode(2),
    };
    amqp::put_frame(b, &AMQPFrame::Header(channel, header));
    b.put_u8(3);
    b.put_u16(channel);
    b.put_u32(body.len() as u32);
    b.put_slice(body);
    b.put_u8(0xce);
}

fn amqp10_seeds() {
    let meta = Meta {
        message_id: Some("id-1".into()),
        correlation_id: Some("corr-1".into()),
        creation_time_ms: Some(1_700_000_000_000),
        properties: vec![
            ("kind".into(), Value::Str("bench".into())),
            ("n".into(), Value::Int(-3)),
        ],
        ..Meta::default()
    };
    let caps = ["queue".to_string(), "shared".to_string()];
    let t = a10::Terminus {
        address: "bench.0",
        capabilities: &caps,
    };
    let mut b = BytesMut::new();
    reply::put_sasl_mechanisms(&mut b, &["ANONYMOUS".into(), "PLAIN".into()]);
    reply::put_sasl_outcome(&mut b, 0);
    a10::put_sasl_init(&mut b, "PLAIN", Some(b"\0u\0p"), "localhost");
    a10::put_open(&mut b, "msgbench", "localhost", 0);
    a10::put_begin(&mut b, 0, 1000);
    a10::put_attach(&mut b, "link-1", 0, true, false, &t);
    a10::put_attach(&mut b, "link-2", 1, false, true, &t);
    let flow = a10::SessionFlow {
        next_incoming_id: 0,
        incoming_window: 1000,
        next_outgoing_id: 0,
    };
    a10::put_flow(&mut b, flow, Some((0, 0, 100)));
    let durable = OutMessage {
        meta: Some(&meta),
        body: OutBody::Data(b"hello"),
        durable: true,
    };
    a10::put_transfer(&mut b, 0, Some(0), false, false, |buf| {
        put_message(buf, &durable)
    });
    let text = OutMessage {
        meta: None,
        body: OutBody::Text("{\"n\":1}"),
        durable: false,
    };
    a10::put_transfer(&mut b, 0, Some(1), true, true, |buf| {
        put_message(buf, &text)
    });
    a10::put_transfer(&mut b, 0, None, true, false, |buf| put_message(buf, &text));
    a10::put_disposition(&mut b, 0, 1, Disposition::Accept);
    a10::put_disposition(&mut b, 2, 2, Disposition::Reject);
    reply::put_detach_error(&mut b, 0, Some(("amqp:not-found", "no queue")));
    a10::put_detach(&mut b, 1);
    a10::put_end(&mut b);
    reply::put_close_error(&mut b, "amqp:internal-error", "bye");
    a10::put_heartbeat(&mut b);
    a10::put_close(&mut b);
    seed("amqp10_frames", "session", mode(0, true), &b);
    seed("amqp10_frames", "session_split", mode(11, false), &b);
    // Values: a described list of every scalar kind, a map and a symbol array.
    let mut v = BytesMut::new();
    let mut e = Enc::new(&mut v);
    e.list(0x70)
        .null()
        .bool(true)
        .bool(false)
        .ubyte(7)
        .ushort(300)
        .uint(0)
        .uint(70_000);
    e.ulong(1 << 40)
        .long(-5)
        .long(1 << 40)
        .timestamp(1_700_000_000_000);
    e.binary(b"\x00\x01")
        .str("text")
        .symbol("sym")
        .symbols(&caps)
        .end();
    e.map(0x74).str("k").long(1).symbol("s").str("v").end();
    e.binary(&[9u8; 300]);
    seed("amqp10_codec", "values", None, &v);
    let mut m = BytesMut::new();
    put_message(&mut m, &durable);
    seed("amqp10_codec", "message", None, &m);
}

fn http_seeds() {
    let s = "http1_response";
    let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello";
    seed(s, "content_length", mode(0, false), ok);
    let chunked = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nTrailer: 1\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n";
    seed(s, "chunked_split", mode(3, false), chunked);
    let close = b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\nHTTP/1.1 503 Unavailable\r\nConnection: close\r\n\r\nuntil the end";
    seed(s, "until_close", mode(0, false), close);
    seed(
        s,
        "head",
        mode(0, true),
        b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n",
    );
    let s = "http_server";
    seed(s, "get", None, b"GET /x?y=1 HTTP/1.1\r\nHost: localhost\r\n\r\nGET / HTTP/1.1\r\nHost: l\r\nConnection: close\r\n\r\n");
    seed(s, "post", None, b"POST /in HTTP/1.1\r\nHost: l\r\nContent-Length: 5\r\n\r\nhelloPUT / HTTP/1.1\r\nHost: l\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n");
    // h2c with prior knowledge: preface, empty SETTINGS, then HEADERS (GET / on stream 1,
    // HPACK indexed :method GET, :scheme http, :path /, literal :authority "x") and a POST
    // with DATA on stream 3.
    let mut h2 = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    h2.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    h2.extend_from_slice(&[0, 0, 6, 1, 5, 0, 0, 0, 1, 0x82, 0x86, 0x84, 0x41, 1, b'x']);
    h2.extend_from_slice(&[0, 0, 6, 1, 4, 0, 0, 0, 3, 0x83, 0x86, 0x84, 0x41, 1, b'x']);
    h2.extend_from_slice(&[0, 0, 2, 0, 1, 0, 0, 0, 3, b'h', b'i']);
    seed(s, "h2c", None, &h2);
}

fn ws_seeds() {
    let mut b = BytesMut::new();
    b.put_slice(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n",
    );
    b.put_slice(
        format!(
            "Sec-WebSocket-Accept: {}\r\n\r\n",
            ws::accept_key("dGhlIHNhbXBsZSBub25jZQ==")
        )
        .as_bytes(),
    );
    ws::put_frame(&mut b, ws::OP_TEXT, b"hello", None);
    ws::put_frame(&mut b, ws::OP_BINARY, &[1u8; 200], None);
    ws::put_frame(&mut b, ws::OP_PING, b"p", None);
    ws::put_close(&mut b, 1000, None);
    seed("ws_codec", "server_handshake", mode(0, false), &b);
    let mut b = BytesMut::new();
    ws::put_frame(&mut b, ws::OP_TEXT, b"hello", None);
    b.put_slice(&[0x01, 2, b'h', b'e', 0x80, 1, b'y']); // fragmented text
    ws::put_frame(&mut b, ws::OP_BINARY, &[2u8; 1000], None);
    b.put_slice(&[0x82, 127, 0, 0, 0, 0, 0, 0, 0, 3, 1, 2, 3]); // a 64-bit length
    seed("ws_codec", "server_frames", mode(0, false), &b);
    let mut b = BytesMut::new();
    ws::put_request(&mut b, "localhost:8080", "/ws?x=1", &ws::new_key(7), &[]);
    ws::put_frame(&mut b, ws::OP_TEXT, b"hello", Some([1, 2, 3, 4]));
    ws::put_frame(&mut b, ws::OP_PONG, b"", Some([9, 9, 9, 9]));
    ws::put_close(&mut b, 1001, Some([5, 6, 7, 8]));
    seed("ws_codec", "client_frames", mode(0, true), &b);
    seed("ws_codec", "client_frames_split", mode(2, true), &b);
}

fn zmtp_seeds() {
    let mut b = BytesMut::new();
    b.put_slice(&zmtp::greeting());
    zmtp::put_ready(&mut b, SocketType::Pub);
    zmtp::put_subscribe(&mut b, b"bench.");
    b.put_slice(&[0x00, 7, 0, b'b', b'e', b'n', b'c', b'h', b'.']); // cancel, as a message
    zmtp::put_frame(&mut b, true, b"bench.0");
    zmtp::put_frame(&mut b, false, b"hello");
    zmtp::put_frame(&mut b, false, &[3u8; 300]);
    zmtp::put_command(&mut b, "PING", &[0, 10, b'c', b't', b'x']);
    zmtp::put_command(&mut b, "ERROR", b"\x04nope");
    seed("zmtp", "session", mode(0, true), &b);
    seed("zmtp", "session_split", mode(7, true), &b);
    let mut b = BytesMut::new();
    zmtp::put_ready(&mut b, SocketType::Push);
    zmtp::put_frame(&mut b, false, b"work");
    seed("zmtp", "units", mode(0, false), &b);
}

fn nats_seeds() {
    let info = br#"INFO {"server_id":"x","version":"2.10.0","max_payload":1048576,"headers":true,"proto":1}"#;
    let mut b = info.to_vec();
    b.extend_from_slice(b"\r\n+OK\r\nPING\r\nPONG\r\nMSG bench.0 1 5\r\nhello\r\nMSG bench.1 2 _INBOX.x.7 3\r\nabc\r\n");
    b.extend_from_slice(b"HMSG js.0 3 $JS.ACK.s.c.1.2.3.4.0 37 39\r\nNATS/1.0 408 Request Timeout\r\nA: b\r\n\r\nhi\r\n");
    b.extend_from_slice(b"-ERR 'Authorization Violation'\r\n");
    seed("nats_proto", "session", mode(0, false), &b);
    seed("nats_proto", "session_split", mode(4, false), &b);
}

fn redis_seeds() {
    let replies =
        b"+OK\r\n:42\r\n$5\r\nhello\r\n$-1\r\n*-1\r\n-ERR wrong type\r\n*2\r\n$3\r\nabc\r\n:1\r\n";
    seed("redis_resp", "replies", mode(0, false), replies);
    // XREADGROUP: one stream, two entries (one deleted while pending).
    let xread = b"*1\r\n*2\r\n$5\r\nbench\r\n*2\r\n*2\r\n$15\r\n1700000000000-0\r\n*2\r\n$1\r\np\r\n$5\r\nhello\r\n*2\r\n$15\r\n1700000000000-1\r\n*-1\r\n";
    seed("redis_resp", "xread", mode(0, false), xread);
    let pushes = b"*3\r\n$9\r\nsubscribe\r\n$5\r\nbench\r\n:1\r\n*3\r\n$7\r\nmessage\r\n$5\r\nbench\r\n$5\r\nhello\r\n*4\r\n$8\r\npmessage\r\n$2\r\nb*\r\n$5\r\nbench\r\n$2\r\nhi\r\n";
    seed("redis_resp", "pushes", mode(0, true), pushes);
    seed("redis_resp", "pushes_split", mode(6, true), pushes);
    let mut cmd = BytesMut::new();
    resp::command(&mut cmd, &[b"XADD", b"bench", b"*", b"p", b"hello"]);
    seed("redis_resp", "command", mode(0, false), &cmd);
}

fn file_seeds() {
    let s = Stamp {
        run_id: 7,
        producer: 2,
        stream: 1,
        seq: 1000,
        intended_ns: 123_456_789,
        sent_ns: 123_456_999,
    };
    let mut raw = [0u8; STAMP_LEN + 8];
    s.write(&mut raw);
    seed("stamp", "binary", None, &raw);
    let mut text = [0u8; TEXT_STAMP_LEN];
    s.write_text(&mut text);
    let mut json = b"{\"n\":1,\"stamp\":\"".to_vec();
    json.extend_from_slice(&text);
    json.extend_from_slice(b"\"}");
    seed("stamp", "text_in_json", None, &json);
    let scenarios = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    for name in [
        "nats-4x4-1k-50k",
        "mqtt5-shared-wildcard",
        "amqp-to-mqtt-pipeline",
        "ecp-endpoint",
        "mem-ramp-steps",
    ] {
        let text = std::fs::read(scenarios.join(format!("{name}.toml"))).unwrap();
        seed("scenario", name, None, &text);
    }
    let run = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../report/tests/fixtures/run.jsonl"),
    )
    .unwrap();
    seed("results_file", "run", None, run.as_bytes());
    let lines: Vec<&str> = run.lines().collect();
    let short: Vec<&str> = [0, 1, 2, 3, 8, 9].iter().map(|&i| lines[i]).collect();
    seed(
        "results_file",
        "short",
        None,
        format!("{}\n", short.join("\n")).as_bytes(),
    );
}
