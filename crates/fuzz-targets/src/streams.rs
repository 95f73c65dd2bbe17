//! Targets for the WebSocket, ZMTP, NATS and Redis decoders.

use crate::{feed, mode, piece};
use bytes::BytesMut;
use msgbench_driver_nats::proto::{self as nats, ServerOp};
use msgbench_driver_redis::resp;
use msgbench_driver_ws::codec as ws;
use msgbench_driver_zmq::zmtp::{self, SocketType, Unit};
use std::collections::VecDeque;

/// The largest frame the stream targets accept (larger than any fuzzer input).
const MAX: u64 = 1 << 20;

/// WebSocket frames (`msgbench_driver_ws::codec::parse`; low mode bit: the server side, which
/// reads masked frames) with a round trip through `put_frame`, and the upgrade handshake's
/// head parser over the same bytes.
pub fn ws_codec(data: &[u8]) {
    let (m, stream) = mode(data);
    let masked = m & 1 == 1;
    feed(stream, piece(m), |buf| match ws::parse(buf, masked, MAX) {
        Ok(Some(f)) => {
            if f.opcode == ws::OP_CLOSE {
                let _ = ws::close_code(&f.payload);
            }
            if f.fin {
                let mut b = BytesMut::new();
                ws::put_frame(
                    &mut b,
                    f.opcode,
                    &f.payload,
                    masked.then_some([7, 0, 0x80, 0xff]),
                );
                assert_eq!(
                    ws::parse(&mut b, masked, MAX),
                    Ok(Some(f)),
                    "WebSocket round trip"
                );
                assert!(b.is_empty(), "WebSocket round trip left bytes");
            }
            Ok(true)
        }
        Ok(None) => Ok(false),
        Err(e) => {
            let _ = e.close_code();
            Err(())
        }
    });
    feed(stream, piece(m), |buf| {
        match ws::parse_head(buf, 16 * 1024) {
            Ok(Some(h)) => {
                let _ = (h.status(), h.header("sec-websocket-accept"));
                let _ = h.has_token("connection", "upgrade");
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(_) => Err(()),
        }
    });
}

/// ZMTP 3.0 (`msgbench_driver_zmq::zmtp`): low mode bit: the stream starts with a 64-byte
/// greeting; then units (messages and commands), each checked as READY for both socket
/// kinds, as a subscription and as a PING; a one-frame message round-trips.
pub fn zmtp(data: &[u8]) {
    let (m, mut stream) = mode(data);
    if m & 1 == 1 {
        let Some((greeting, rest)) = stream.split_first_chunk::<{ zmtp::GREETING_LEN }>() else {
            return;
        };
        if zmtp::check_greeting(greeting).is_err() {
            return;
        }
        stream = rest;
    }
    feed(stream, piece(m), |buf| match zmtp::next_unit(buf, MAX) {
        Ok(Some(u)) => {
            let _ = zmtp::check_ready(&u, SocketType::Sub);
            let _ = zmtp::check_ready(&u, SocketType::Push);
            let _ = zmtp::subscription(&u);
            let _ = zmtp::pong(&u, &mut BytesMut::new());
            if let Unit::Message {
                first, frames: 1, ..
            } = &u
            {
                let mut b = BytesMut::new();
                zmtp::put_frame(&mut b, false, first);
                assert_eq!(
                    zmtp::next_unit(&mut b, MAX),
                    Ok(Some(u.clone())),
                    "ZMTP round trip"
                );
                assert!(b.is_empty(), "ZMTP round trip left bytes");
            }
            Ok(true)
        }
        Ok(None) => Ok(false),
        Err(_) => Err(()),
    });
}

/// What a NATS server sends (`msgbench_driver_nats::proto::parse`), headers of HMSG read as
/// JetStream reads them.
pub fn nats_proto(data: &[u8]) {
    let (m, stream) = mode(data);
    feed(stream, piece(m), |buf| match nats::parse(buf) {
        Ok(Some(op)) => {
            match &op {
                ServerOp::HMsg { headers, reply, .. } => {
                    let _ = (nats::status(headers), nats::header(headers, b"Nats-Msg-Id"));
                    let _ = reply.as_ref().map(|r| nats::token_of(r, b"_INBOX.x."));
                }
                ServerOp::Msg { reply, .. } => {
                    let _ = reply.as_ref().map(|r| nats::token_of(r, b"_INBOX.x."));
                }
                _ => {}
            }
            Ok(true)
        }
        Ok(None) => Ok(false),
        Err(_) => Err(()),
    });
}

/// RESP2 replies (`msgbench_driver_redis::resp`): low mode bit: pub/sub pushes
/// (`take_push`), else replies (`reply_len`, judged by `take_reply` and read as stream
/// entries and as a last id); commands built from the input's words measure as complete.
pub fn redis_resp(data: &[u8]) {
    let (m, stream) = mode(data);
    let pushes = m & 1 == 1;
    feed(stream, piece(m), |buf| {
        if pushes {
            return match resp::take_push(buf) {
                Ok(Some(_)) => Ok(true),
                Ok(None) => Ok(false),
                Err(_) => Err(()),
            };
        }
        match resp::reply_len(buf) {
            Ok(Some(n)) => {
                let reply = buf.split_to(n).freeze();
                let mut whole = BytesMut::from(&reply[..]);
                assert!(
                    matches!(resp::take_reply(&mut whole), Ok(Some(_))),
                    "a measured reply"
                );
                assert!(
                    whole.is_empty(),
                    "take_reply left bytes of a measured reply"
                );
                let _ = resp::stream_entries(reply.clone(), &mut VecDeque::new());
                let _ = resp::last_id(&reply);
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(_) => Err(()),
        }
    });
    let args: Vec<&[u8]> = stream.split(|&b| b == b' ').collect();
    let mut cmd = BytesMut::new();
    resp::command(&mut cmd, &args);
    assert_eq!(
        resp::reply_len(&cmd),
        Ok(Some(cmd.len())),
        "a command measured as a reply"
    );
}
