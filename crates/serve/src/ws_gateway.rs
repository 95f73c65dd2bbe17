//! `msgbench serve ws-broadcast --gateway rango|envelope`: the broadcast server as a JSON
//! WebSocket gateway, the shape of openware's rango (a market-data gateway in front of a
//! RabbitMQ topic exchange), so the test suite and benchmarks cover that path without
//! third-party software.
//!
//! The contract, rango's:
//! - **In.** Each message handed to [`GatewayRelay::send`] (what `--from` consumes) comes with
//!   the key it was published on (routing key, subject, topic). The key names its *stream*
//!   ([`stream_of`]): a leading `public.` segment is dropped (`public.btcusd.trades` →
//!   `btcusd.trades`), `private.*` keys are ignored (counted in `ignored`: no anonymous client
//!   may see them), any other key is the stream as it is (`global.tickers`). The body must be
//!   JSON (UTF-8): one that is not is dropped and counted in `rejected` (rango logs "JSON parse
//!   error").
//! - **Out.** Each relayed message is encoded once, as one text frame, and shared by every
//!   client subscribed to its stream; the others skip it (counted in `unsubscribed`):
//!   - [`Shape::Rango`]: `{"<stream>":<body>}`, the body inserted verbatim;
//!   - [`Shape::Envelope`]: `{"stream":"<stream>","data":<body>,"ts":<unix ms>}`, the body
//!     parsed and re-serialized (keys sorted, whitespace gone: what a gateway that re-encodes
//!     does to a message; msgbench's text stamp survives it, its binary stamp would not).
//! - **Subscriptions.** A client names streams in its upgrade URL (`?stream=a&stream=b`, or
//!   `stream=a,b`) and/or by text message `{"event":"subscribe","streams":["a","b"]}`, answered
//!   with `{"success":{"message":"subscribed","streams":[...]}}` listing all its streams now
//!   (`unsubscribe` likewise, `"unsubscribed"`). Anything else a client sends gets
//!   `{"error":{"message":"..."}}` (counted in `bad_requests`) and changes nothing. Client
//!   messages are never relayed.
//!
//! Connections (upgrade, TLS, pings, close, lagging clients) are [`crate::ws`]'s: this module
//! only routes, wraps and answers.

use crate::ws::{Broadcast, BroadcastStats, Item, Shared};
use bytes::BytesMut;
use msgbench_driver_ws::codec::{self, OP_TEXT};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

/// What a gateway sends its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// rango's: `{"<stream>":<body>}`, the body verbatim.
    Rango,
    /// `{"stream":"<stream>","data":<body re-serialized>,"ts":<unix ms>}`.
    Envelope,
}

/// Streams one client may hold at once; a request beyond it is refused.
pub const MAX_STREAMS: usize = 1024;
/// Longest stream name accepted (an AMQP routing key's limit).
pub const MAX_STREAM_LEN: usize = 255;
/// Stream names the relay keeps shared (so routing them allocates nothing per message).
const INTERNED: usize = 4096;

/// The stream a message published on `key` belongs to: `key` without a leading `public.` (or
/// `public/`, MQTT-style); `None` for `private.*` keys and empty ones, which no client gets.
pub fn stream_of(key: &str) -> Option<&str> {
    if key.starts_with("private.") || key.starts_with("private/") {
        return None;
    }
    let s = key
        .strip_prefix("public.")
        .or_else(|| key.strip_prefix("public/"))
        .unwrap_or(key);
    (!s.is_empty()).then_some(s)
}

/// What [`GatewayRelay::send`] did with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Queued for the clients subscribed to its stream.
    Sent,
    /// Dropped: its body is not JSON.
    Rejected,
    /// Dropped: its key names no public stream.
    Ignored,
}

/// Feeds a gateway from outside (the `--from` consumer): one per feeding task; it keeps a
/// scratch buffer and the stream names seen, so routing allocates only the shared frame.
pub struct GatewayRelay {
    shared: Arc<Shared>,
    shape: Shape,
    names: HashSet<Arc<str>>,
    scratch: Vec<u8>,
}

impl Broadcast {
    /// A handle that relays published messages through the gateway (see the module doc). On a
    /// server configured without a gateway shape it wraps rango-style and every client gets
    /// everything.
    pub fn gateway_relay(&self) -> GatewayRelay {
        let shared = self.relay().0;
        GatewayRelay {
            shape: shared.gateway.unwrap_or(Shape::Rango),
            shared,
            names: HashSet::new(),
            scratch: Vec::new(),
        }
    }
}

impl GatewayRelay {
    /// Routes `body`, published on `key`, to the subscribers of its stream: checked (rango) or
    /// re-serialized (envelope), wrapped, encoded once as a text frame.
    pub fn send(&mut self, key: &str, body: &[u8]) -> Outcome {
        let stats = &self.shared.stats;
        stats.messages_in.fetch_add(1, Relaxed);
        let Some(stream) = stream_of(key) else {
            stats.ignored.fetch_add(1, Relaxed);
            return Outcome::Ignored;
        };
        // Text frames must be UTF-8, and `from_str` checks it (serde_json's byte reader does
        // not when it skips a value).
        let Ok(text) = std::str::from_utf8(body) else {
            stats.rejected.fetch_add(1, Relaxed);
            return Outcome::Rejected;
        };
        let out = &mut self.scratch;
        out.clear();
        match self.shape {
            Shape::Rango => {
                if serde_json::from_str::<serde::de::IgnoredAny>(text).is_err() {
                    stats.rejected.fetch_add(1, Relaxed);
                    return Outcome::Rejected;
                }
                out.push(b'{');
                put_json_str(out, stream);
                out.push(b':');
                out.extend_from_slice(body);
                out.push(b'}');
            }
            Shape::Envelope => {
                let Ok(v) = serde_json::from_str::<Value>(text) else {
                    stats.rejected.fetch_add(1, Relaxed);
                    return Outcome::Rejected;
                };
                out.extend_from_slice(b"{\"stream\":");
                put_json_str(out, stream);
                out.extend_from_slice(b",\"data\":");
                serde_json::to_writer(&mut *out, &v).expect("a JSON value serializes");
                let ts = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64);
                out.extend_from_slice(b",\"ts\":");
                out.extend_from_slice(ts.to_string().as_bytes());
                out.push(b'}');
            }
        }
        let name = match self.names.get(stream) {
            Some(n) => n.clone(),
            None => {
                let n: Arc<str> = Arc::from(stream);
                if self.names.len() < INTERNED {
                    self.names.insert(n.clone());
                }
                n
            }
        };
        let mut frame = BytesMut::with_capacity(self.scratch.len() + 10);
        codec::put_frame(&mut frame, OP_TEXT, &self.scratch, None);
        // No receiver is fine: nobody is connected.
        let frame = frame.freeze();
        let _ = self.shared.tx.send(Item {
            from: 0,
            _held: self.shared.held.hold(&frame),
            frame,
            stream: Some(name),
        });
        Outcome::Sent
    }
}

/// `s` as a JSON string (quoted, escaped).
fn put_json_str(out: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(out, s).expect("a string serializes");
}

/// The streams one client is subscribed to.
#[derive(Debug, Default)]
pub struct Subscriptions {
    streams: HashSet<Box<str>>,
}

impl Subscriptions {
    /// The streams an upgrade request names (`request_line`: `GET /path?stream=a,b HTTP/1.1`):
    /// every `stream` (or `stream[]`) parameter, each value split at commas and
    /// percent-decoded; at most [`MAX_STREAMS`], names longer than [`MAX_STREAM_LEN`] skipped.
    pub fn from_request(request_line: &str) -> Subscriptions {
        let mut subs = Subscriptions::default();
        let target = request_line.split_whitespace().nth(1).unwrap_or("");
        let Some((_, query)) = target.split_once('?') else {
            return subs;
        };
        for pair in query.split('&') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if k != "stream" && k != "stream[]" && k != "stream%5B%5D" {
                continue;
            }
            for name in v.split(',') {
                let name = percent_decode(name);
                if !name.is_empty()
                    && name.len() <= MAX_STREAM_LEN
                    && subs.streams.len() < MAX_STREAMS
                {
                    subs.streams.insert(name.into());
                }
            }
        }
        subs
    }

    /// Whether a message of `stream` goes to this client (`None`: not a gateway message).
    pub fn wants(&self, stream: Option<&str>) -> bool {
        stream.is_none_or(|s| self.streams.contains(s))
    }

    /// The streams, sorted.
    pub fn streams(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.streams.iter().map(|s| &**s).collect();
        v.sort_unstable();
        v
    }

    /// Applies a subscribe (`add`) or unsubscribe request; the error says why it is refused
    /// (then nothing changes).
    fn apply(&mut self, add: bool, names: Vec<String>) -> Result<(), String> {
        if let Some(n) = names
            .iter()
            .find(|n| n.is_empty() || n.len() > MAX_STREAM_LEN)
        {
            return Err(format!(
                "stream names are 1 to {MAX_STREAM_LEN} bytes (got {} bytes)",
                n.len()
            ));
        }
        if add {
            let new = names
                .iter()
                .filter(|n| !self.streams.contains(n.as_str()))
                .collect::<HashSet<_>>()
                .len();
            if self.streams.len() + new > MAX_STREAMS {
                return Err(format!("at most {MAX_STREAMS} streams per client"));
            }
            self.streams
                .extend(names.into_iter().map(String::into_boxed_str));
        } else {
            for n in &names {
                self.streams.remove(n.as_str());
            }
        }
        Ok(())
    }
}

/// `%XX` sequences decoded (`+` is a space); a malformed one is kept as it is.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match b[i] {
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Answers one client message (a subscribe or unsubscribe request) into `out`, as one text
/// frame, and applies it to `subs`.
pub(crate) fn request(
    msg: &[u8],
    subs: &mut Subscriptions,
    out: &mut BytesMut,
    stats: &BroadcastStats,
) {
    stats.requests.fetch_add(1, Relaxed);
    let answer = match parse_request(msg).and_then(|(add, names)| {
        subs.apply(add, names)?;
        Ok(add)
    }) {
        Ok(add) => json!({"success": {
            "message": if add { "subscribed" } else { "unsubscribed" },
            "streams": subs.streams(),
        }}),
        Err(why) => {
            stats.bad_requests.fetch_add(1, Relaxed);
            json!({"error": {"message": why}})
        }
    };
    let answer = serde_json::to_vec(&answer).expect("an answer serializes");
    codec::put_frame(out, OP_TEXT, &answer, None);
}

/// A request's event (`true`: subscribe) and streams, or why it is not one.
fn parse_request(msg: &[u8]) -> Result<(bool, Vec<String>), String> {
    let v: Value = serde_json::from_slice(msg).map_err(|e| {
        format!(
            "not a request: {e} (send {{\"event\":\"subscribe\",\"streams\":[\"btcusd.trades\"]}})"
        )
    })?;
    let add = match v.get("event").and_then(Value::as_str) {
        Some("subscribe") => true,
        Some("unsubscribe") => false,
        Some(other) => {
            return Err(format!(
                "unsupported event `{other}`: use subscribe or unsubscribe"
            ));
        }
        None => return Err("the request has no \"event\" (subscribe or unsubscribe)".into()),
    };
    let Some(list) = v.get("streams").and_then(Value::as_array) else {
        return Err("the request has no \"streams\" list".into());
    };
    list.iter()
        .map(|s| {
            s.as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("stream names are strings, not {s}"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(|names| (add, names))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_streams() {
        assert_eq!(stream_of("public.btcusd.trades"), Some("btcusd.trades"));
        assert_eq!(stream_of("public/btcusd/trades"), Some("btcusd/trades"));
        assert_eq!(stream_of("global.tickers"), Some("global.tickers"));
        assert_eq!(stream_of("btcusd.trades"), Some("btcusd.trades"));
        assert_eq!(stream_of("private.IDABC.orders"), None);
        assert_eq!(stream_of("public."), None);
        assert_eq!(stream_of(""), None);
    }

    #[test]
    fn urls_name_streams() {
        let s = Subscriptions::from_request(
            "GET /api/v2/ranger/public/?stream=btcusd.trades&stream=a,b&x=1&stream=%67lobal.tickers&stream= HTTP/1.1",
        );
        assert_eq!(
            s.streams(),
            ["a", "b", "btcusd.trades", "global.tickers"],
            "every stream parameter, commas split, percent-decoded, empty ones skipped"
        );
        assert!(s.wants(Some("a")) && !s.wants(Some("c")) && s.wants(None));
        assert!(
            Subscriptions::from_request("GET / HTTP/1.1")
                .streams()
                .is_empty()
        );
        assert_eq!(percent_decode("%zz%4"), "%zz%4", "malformed escapes kept");
    }

    #[test]
    fn requests_are_answered() {
        let stats = BroadcastStats::default();
        let mut subs = Subscriptions::default();
        let mut out = BytesMut::new();
        let mut ask = |m: &str, subs: &mut Subscriptions| {
            out.clear();
            request(m.as_bytes(), subs, &mut out, &stats);
            let f = codec::parse(&mut out, false, 1 << 20).unwrap().unwrap();
            assert_eq!(f.opcode, OP_TEXT);
            serde_json::from_slice::<Value>(&f.payload).unwrap()
        };
        let a = ask(r#"{"event":"subscribe","streams":["b","a"]}"#, &mut subs);
        assert_eq!(
            a,
            json!({"success": {"message": "subscribed", "streams": ["a", "b"]}})
        );
        let a = ask(r#"{"event":"unsubscribe","streams":["a","zz"]}"#, &mut subs);
        assert_eq!(
            a,
            json!({"success": {"message": "unsubscribed", "streams": ["b"]}})
        );
        for bad in [
            "hello",
            r#"{"streams":["a"]}"#,
            r#"{"event":"publish","streams":["a"]}"#,
            r#"{"event":"subscribe"}"#,
            r#"{"event":"subscribe","streams":[1]}"#,
            r#"{"event":"subscribe","streams":[""]}"#,
        ] {
            let a = ask(bad, &mut subs);
            assert!(a["error"]["message"].is_string(), "{bad}: {a}");
        }
        assert_eq!(subs.streams(), ["b"], "refused requests change nothing");
        assert_eq!(
            (
                stats.requests.load(Relaxed),
                stats.bad_requests.load(Relaxed)
            ),
            (8, 6)
        );
    }
}
