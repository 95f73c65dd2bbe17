//! One Redis connection: where it goes (`redis://[user:pass@]host[:port][/db][?options]`), the
//! handshake (AUTH, SELECT), commands that wait for their reply, and reconnection with backoff.
//! All state lives in the struct (the [`Wire`] holds the buffers), so every async method is
//! cancel-safe.

use crate::resp::{self, Reply};
use bytes::Bytes;
use msgbench_core::driver::{ConnectFailure, DriverError, EventSink};
use msgbench_net::{Target, Wire};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// How messages travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `PUBLISH` / `SUBSCRIBE` (or `PSUBSCRIBE` for a pattern): fan-out, nothing kept.
    PubSub,
    /// `XADD` to a stream per topic; consumers `XREAD` it (fan-out) or share it in a consumer
    /// group with `XREADGROUP` and `XACK` (queue groups).
    Streams,
}

/// Where and how to connect, parsed from the URL.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// Host and port (default 6379).
    pub target: Target,
    /// TLS connector, for `rediss://`.
    pub tls: Option<msgbench_net::Tls>,
    user: Option<String>,
    pass: Option<String>,
    db: Option<u32>,
    /// Pub/sub or streams (`?mode=`).
    pub mode: Mode,
    /// Streams: `XADD ... MAXLEN ~ N` (`?maxlen=`), so a long run does not fill the server's
    /// memory.
    pub maxlen: Option<u64>,
    /// Streams: entries per `XREAD` (`?count=`).
    pub count: u32,
    /// Streams: how long a read blocks on the server, ms (`?block=`).
    pub block_ms: u64,
    /// The URL with credentials removed, for messages.
    pub display: String,
}

impl Endpoint {
    /// Parses `redis[s]://[user:pass@|:pass@]host[:port][/db][?mode=pubsub|streams&maxlen=N&count=N&block=MS]`.
    pub fn parse(
        url: &str,
        tls: impl FnOnce() -> Result<msgbench_net::Tls, String>,
    ) -> Result<Endpoint, DriverError> {
        let display = msgbench_core::redact::url(url);
        let bad = |why: String| DriverError::Config(format!("`{display}`: {why}"));
        let (secure, rest) = if let Some(r) = url.strip_prefix("rediss://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("redis://") {
            (false, r)
        } else {
            return Err(bad("not a redis:// or rediss:// URL".into()));
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (auth_host, db) = match rest.split_once('/') {
            Some((h, "")) => (h, None),
            Some((h, d)) => (
                h,
                Some(
                    d.parse::<u32>()
                        .map_err(|_| bad(format!("`/{d}` is not a database number")))?,
                ),
            ),
            None => (rest, None),
        };
        let (creds, hostport) = match auth_host.rsplit_once('@') {
            Some((c, h)) => (Some(c), h),
            None => (None, auth_host),
        };
        // Percent-decoded, as in every URL (redis-cli and the client libraries do the same).
        use msgbench_core::redact::unescape;
        let (user, pass) = match creds {
            Some(c) => match c.split_once(':') {
                Some(("", p)) => (None, Some(unescape(p))),
                Some((u, p)) => (Some(unescape(u)), Some(unescape(p))),
                None => (None, Some(unescape(c))),
            },
            None => (None, None),
        };
        let target = Target::parse(hostport, 6379).map_err(bad)?;
        let mut ep = Endpoint {
            target,
            tls: None,
            user,
            pass,
            db,
            mode: Mode::PubSub,
            maxlen: None,
            count: 256,
            block_ms: 1000,
            display: display.clone(),
        };
        for kv in query.split('&').filter(|s| !s.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| bad(format!("option `{kv}` needs a value")))?;
            let num = || {
                v.parse::<u64>()
                    .map_err(|_| bad(format!("option `{k}` must be a whole number, got `{v}`")))
            };
            match k {
                "mode" => {
                    ep.mode = match v {
                        "pubsub" => Mode::PubSub,
                        "streams" | "stream" => Mode::Streams,
                        _ => {
                            return Err(bad(format!("mode `{v}`: expected pubsub or streams")));
                        }
                    }
                }
                "maxlen" => ep.maxlen = Some(num()?),
                "count" => ep.count = num()?.clamp(1, 100_000) as u32,
                "block" => ep.block_ms = num()?.max(1),
                _ => {
                    return Err(bad(format!(
                        "unknown option `{k}` (known: mode, maxlen, count, block)"
                    )));
                }
            }
        }
        if secure {
            ep.tls = Some(tls().map_err(|m| DriverError::Config(format!("TLS: {m}")))?);
        }
        Ok(ep)
    }
}

/// Read buffer growth of data connections.
pub const DATA_CHUNK: usize = 64 * 1024;

/// A connection (or one being re-established).
pub struct Conn {
    /// Socket and buffers.
    pub wire: Wire,
    /// Where it goes.
    pub ep: Arc<Endpoint>,
    /// `msgbench-producer-3`, for events.
    pub name: String,
    events: EventSink,
    timeout: Duration,
    source: Option<IpAddr>,
    /// The handshake on the attached socket completed. An `open` cancelled half-way (a
    /// consumer's `select!` moved on) leaves a socket that is not a connection yet.
    ready: bool,
    /// The current loss was reported (a cancelled `reconnect` called again does not report it
    /// again).
    loss_told: bool,
    /// The current loss's first failed reconnection attempt was reported.
    failure_told: bool,
}

impl Conn {
    /// Connects and authenticates; the error says why not (nothing is retried here).
    pub async fn connect(
        ep: Arc<Endpoint>,
        name: String,
        events: EventSink,
        timeout: Duration,
        source: Option<IpAddr>,
        chunk: usize,
    ) -> Result<Conn, DriverError> {
        let mut c = Conn {
            wire: Wire::new(chunk),
            ep,
            name,
            events,
            timeout,
            source,
            ready: false,
            loss_told: false,
            failure_told: false,
        };
        c.open().await?;
        Ok(c)
    }

    /// Connected, handshake done: the socket may be used.
    pub fn is_connected(&self) -> bool {
        self.ready && self.wire.is_connected()
    }

    /// Opens the socket and runs the handshake (AUTH, SELECT).
    async fn open(&mut self) -> Result<(), DriverError> {
        self.ready = false;
        let ep = self.ep.clone();
        let stream = msgbench_net::connect(&ep.target, self.source, ep.tls.as_ref(), self.timeout)
            .await
            .map_err(|e| DriverError::Connect {
                target: ep.display.clone(),
                reason: e.detail.clone(),
                cause: e.cause,
            })?;
        self.wire.attach(stream);
        let timeout = self.timeout;
        let handshake = async {
            if let Some(pass) = &ep.pass {
                let reply = match &ep.user {
                    Some(u) => self.call(&[b"AUTH", u.as_bytes(), pass.as_bytes()]).await?,
                    None => self.call(&[b"AUTH", pass.as_bytes()]).await?,
                };
                if reply.first() == Some(&b'-') {
                    return Err(DriverError::Connect {
                        target: ep.display.clone(),
                        reason: format!("authentication refused: {}", error_text(&reply)),
                        cause: ConnectFailure::Rejected,
                    });
                }
            }
            if let Some(db) = ep.db {
                let reply = self.call(&[b"SELECT", db.to_string().as_bytes()]).await?;
                if reply.first() == Some(&b'-') {
                    return Err(DriverError::Config(format!(
                        "`{}`: SELECT {db}: {}",
                        ep.display,
                        error_text(&reply)
                    )));
                }
            }
            // One round trip proves the server speaks RESP (a wrong port fails here, clearly).
            let pong = self.call(&[b"PING"]).await?;
            if pong.first() == Some(&b'-') {
                return Err(DriverError::Connect {
                    target: ep.display.clone(),
                    reason: format!("PING refused: {}", error_text(&pong)),
                    cause: ConnectFailure::Rejected,
                });
            }
            Ok(())
        };
        match tokio::time::timeout(timeout, handshake).await {
            Ok(Ok(())) => {
                self.ready = true;
                Ok(())
            }
            Ok(Err(e)) => {
                // Not RESP that answered, or nothing: say what did, and what may be wrong.
                let what = msgbench_net::sniff(&self.wire.rbuf);
                self.wire.detach();
                Err(match (e, what) {
                    (DriverError::Closed | DriverError::Receive(_), Some(what)) => {
                        DriverError::Connect {
                            target: ep.display.clone(),
                            reason: format!("the server on this port speaks {what}, not RESP"),
                            cause: ConnectFailure::Rejected,
                        }
                    }
                    (DriverError::Closed, None) => DriverError::Connect {
                        target: ep.display.clone(),
                        reason: format!(
                            "the server closed the connection before answering its handshake: {}",
                            if ep.tls.is_some() {
                                "a TLS terminator whose Redis is down does this"
                            } else {
                                "a TLS port does this to a plain client (use rediss://), as \
                                 does a proxy whose Redis is down"
                            }
                        ),
                        cause: ConnectFailure::Reset,
                    },
                    (e, _) => e,
                })
            }
            Err(_) => {
                self.wire.detach();
                Err(DriverError::Connect {
                    target: ep.display.clone(),
                    reason: format!("no answer to the handshake within {timeout:?}"),
                    cause: ConnectFailure::Timeout,
                })
            }
        }
    }

    /// Sends one command and waits for its reply (whole, as raw RESP bytes). Only for
    /// commands outside the hot path, on a connection with no other reply pending.
    pub async fn call(&mut self, args: &[&[u8]]) -> Result<Bytes, DriverError> {
        resp::command(&mut self.wire.wbuf, args);
        self.reply().await
    }

    /// The next reply, whole.
    pub async fn reply(&mut self) -> Result<Bytes, DriverError> {
        std::future::poll_fn(|cx| {
            self.wire.poll_next(cx, true, |buf| {
                Ok::<_, resp::RespError>(resp::reply_len(buf)?.map(|n| buf.split_to(n).freeze()))
            })
        })
        .await
        .map_err(|e| self.lost_error(e))
    }

    /// An I/O error as the driver reports it.
    pub fn lost_error(&self, e: std::io::Error) -> DriverError {
        if e.kind() == std::io::ErrorKind::InvalidData {
            DriverError::Receive(format!("{}: {e}", self.ep.display))
        } else {
            DriverError::Closed
        }
    }

    /// Re-establishes a lost connection, retrying with backoff (100 ms doubling to 2 s) until
    /// it works; says so in events. The caller redoes its subscriptions.
    ///
    /// Cancel-safe as the runner uses it (a consumer's `recv` is cancelled at every tick): the
    /// loss and the first failed attempt's reason are told once per loss, not once per call.
    pub async fn reconnect(&mut self, why: &str) {
        self.wire.detach();
        if !self.loss_told {
            self.loss_told = true;
            self.failure_told = false;
            self.events.connection_lost(&self.name, &why);
        }
        let mut backoff = msgbench_net::Backoff::default();
        loop {
            backoff.pause().await;
            match self.open().await {
                Ok(()) => {
                    self.loss_told = false;
                    self.events.reconnected(&self.name, &self.ep.display, "");
                    return;
                }
                Err(e) if !self.failure_told => {
                    self.failure_told = true;
                    self.events.emit(
                        msgbench_core::driver::DriverEventKind::Warning,
                        format!(
                            "{}: reconnecting failed ({e}); retrying with backoff",
                            self.name
                        ),
                    );
                }
                Err(_) => {}
            }
        }
    }

    /// Reports an error reply once per connection kind of failure (the runner counts them).
    pub fn refused(&self, reply: &Reply) {
        if let Reply::Error(e) = reply {
            self.events.emit(
                msgbench_core::driver::DriverEventKind::Error,
                format!("{}: {e}", self.name),
            );
        }
    }
}

/// A Redis Cluster's redirection (`MOVED 13006 10.0.0.3:6379`, `ASK ...`) as the error it is
/// for msgbench, which talks to the one node of its URL: a setting to change (exit 2), not a
/// refusal to count message after message or retry.
pub fn cluster_redirect(error: &str) -> Option<DriverError> {
    let (verb, rest) = error.split_once(' ')?;
    if verb != "MOVED" && verb != "ASK" {
        return None;
    }
    let node = rest.split_whitespace().nth(1).unwrap_or("another node");
    Some(DriverError::Config(format!(
        "the server is a Redis Cluster node and the key lives on {node} ({error}); msgbench's \
         Redis driver talks to the one node of its URL (no cluster routing): point it at that \
         node, or use topics whose keys live on the node given"
    )))
}

/// The text of an error reply (`-ERR ...\r\n` → `ERR ...`).
pub fn error_text(reply: &[u8]) -> String {
    let s = reply.strip_prefix(b"-").unwrap_or(reply);
    let s = s.strip_suffix(b"\r\n").unwrap_or(s);
    String::from_utf8_lossy(s).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_tls() -> Result<msgbench_net::Tls, String> {
        Err("no TLS in this test".into())
    }

    #[test]
    fn cluster_redirects_are_settings_to_change() {
        let e = cluster_redirect("MOVED 13006 127.0.0.1:37003").unwrap();
        assert!(e.is_fatal());
        assert!(e.to_string().contains("lives on 127.0.0.1:37003"), "{e}");
        assert!(cluster_redirect("ASK 3999 127.0.0.1:37002").is_some());
        assert!(cluster_redirect("WRONGTYPE Operation against a key").is_none());
        assert!(cluster_redirect("NOPERM no").is_none());
    }

    #[test]
    fn urls() {
        let e = Endpoint::parse(
            "redis://u:pw@h:7000/2?mode=streams&maxlen=1000&count=64",
            no_tls,
        )
        .unwrap();
        assert_eq!((e.target.host.as_str(), e.target.port), ("h", 7000));
        assert_eq!(
            (e.user.as_deref(), e.pass.as_deref(), e.db),
            (Some("u"), Some("pw"), Some(2))
        );
        assert_eq!((e.mode, e.maxlen, e.count), (Mode::Streams, Some(1000), 64));
        assert!(!e.display.contains("pw"), "{}", e.display);
        let e = Endpoint::parse("redis://u%3A1:p%40w%2F@h", no_tls).unwrap();
        assert_eq!(
            (e.user.as_deref(), e.pass.as_deref()),
            (Some("u:1"), Some("p@w/"))
        );
        let e = Endpoint::parse("redis://:secret@localhost", no_tls).unwrap();
        assert_eq!(
            (e.user, e.pass.as_deref(), e.target.port),
            (None, Some("secret"), 6379)
        );
        for (bad, says) in [
            ("redis://h?mode=kafka", "mode `kafka`"),
            ("redis://h?bogus=1", "unknown option"),
            ("redis://h/x", "database number"),
            ("redis://h?count=x", "whole number"),
            ("nats://h", "not a redis://"),
            ("rediss://h", "TLS"),
        ] {
            let e = Endpoint::parse(bad, no_tls).err().unwrap().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
