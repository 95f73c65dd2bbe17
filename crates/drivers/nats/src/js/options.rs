//! JetStream options: the query of a `nats+js://` URL. One place parses and validates them, so a
//! wrong option fails before anything connects (a usage error), and the driver, `msgbench
//! drivers`, `--help` and docs/GUIDE.md describe the same set.

use msgbench_core::driver::DriverError;
use std::time::Duration;

/// Where a stream keeps its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// On disk (JetStream's default).
    File,
    /// In the server's memory.
    Memory,
}

impl Storage {
    /// The name the JetStream API uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Storage::File => "file",
            Storage::Memory => "memory",
        }
    }
}

/// How consumers receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The client asks for batches (`CONSUMER.MSG.NEXT`).
    Pull,
    /// The server sends to a deliver subject, with flow control.
    Push,
}

/// Where a consumer created by msgbench starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deliver {
    /// Messages published after the consumer was created.
    New,
    /// Everything the stream holds.
    All,
}

/// The JetStream options of a run (all have defaults; see [`JsOptions::parse`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsOptions {
    /// `stream=NAME`: one stream for every topic; `None` derives one stream per topic.
    pub stream: Option<String>,
    /// `storage=file|memory` of streams msgbench creates.
    pub storage: Storage,
    /// `consumer=pull|push`.
    pub mode: Mode,
    /// `durable=NAME`: durable consumers (`NAME`, or `NAME-<i>` per fan-out consumer);
    /// `None`: ephemeral ones (a queue group makes a durable named after the group).
    pub durable: Option<String>,
    /// `batch=N`: messages per pull request.
    pub batch: u32,
    /// `create=1|0`: create missing streams (0: a missing stream is an error).
    pub create: bool,
    /// `max_bytes=SIZE` of streams msgbench creates (oldest messages discarded beyond it);
    /// `None`: 256 MiB on file, 64 MiB in memory. JetStream reserves each stream's max_bytes
    /// from the server's store limits, so defaults stay small enough for many streams.
    pub max_bytes: Option<u64>,
    /// `replicas=N` of streams msgbench creates.
    pub replicas: u32,
    /// `ack_pending=N`: the consumer's max_ack_pending (deliveries awaiting our ack).
    pub ack_pending: u32,
    /// `ack_wait=DURATION` before the server redelivers an unacknowledged message.
    pub ack_wait: Duration,
    /// `deliver=new|all`: where a consumer msgbench creates starts.
    pub deliver: Deliver,
    /// `expires=DURATION` of each pull request.
    pub expires: Duration,
}

impl Default for JsOptions {
    fn default() -> Self {
        JsOptions {
            stream: None,
            storage: Storage::File,
            mode: Mode::Pull,
            durable: None,
            batch: 256,
            create: true,
            max_bytes: None,
            replicas: 1,
            ack_pending: 65_536,
            ack_wait: Duration::from_secs(30),
            deliver: Deliver::New,
            expires: Duration::from_secs(10),
        }
    }
}

/// The option names, for messages and `--help`.
pub const OPTION_NAMES: &str = "stream, storage, consumer, durable, batch, create, max_bytes, replicas, ack_pending, ack_wait, deliver, expires";

/// Whether `name` is a valid JetStream stream or consumer name (no `.`, `*`, `>`, spaces or
/// path separators).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.chars().any(|c| {
            matches!(c, '.' | '*' | '>' | '/' | '\\') || c.is_whitespace() || c.is_control()
        })
}

/// The stream derived from a topic when no `stream=` is given: `MSGBENCH_` and the topic with
/// every character a name cannot hold replaced by `_` (`bench.a` → `MSGBENCH_bench_a`).
pub fn stream_for_topic(topic: &str) -> String {
    let mut s = String::with_capacity(9 + topic.len());
    s.push_str("MSGBENCH_");
    s.extend(topic.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
            c
        } else {
            '_'
        }
    }));
    s
}

impl JsOptions {
    /// Parses the query of `nats+js://host:port?opt=value&...` (the part after `?`).
    pub fn parse(url: &str) -> Result<JsOptions, DriverError> {
        let mut o = JsOptions::default();
        let query = url.split_once('?').map(|(_, q)| q).unwrap_or("");
        let bad = |k: &str, v: &str, want: &str| {
            DriverError::Config(format!("nats+js option `{k}={v}`: expected {want}"))
        };
        let num = |k: &str, v: &str| -> Result<u64, DriverError> {
            msgbench_core::units::parse_count(v)
                .ok()
                .filter(|n| *n >= 1.0 && n.fract() == 0.0 && *n <= u32::MAX as f64)
                .map(|n| n as u64)
                .ok_or_else(|| bad(k, v, "a whole number of at least 1"))
        };
        let dur = |k: &str, v: &str| {
            msgbench_core::units::parse_duration(v)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| bad(k, v, "a duration such as 30s or 500ms"))
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "stream" | "durable" => {
                    if !valid_name(v) {
                        return Err(bad(k, v, "a name without `.`, `*`, `>`, `/` or spaces"));
                    }
                    if k == "stream" {
                        o.stream = Some(v.to_string());
                    } else {
                        o.durable = Some(v.to_string());
                    }
                }
                "storage" => {
                    o.storage = match v {
                        "file" => Storage::File,
                        "memory" | "mem" => Storage::Memory,
                        _ => return Err(bad(k, v, "file or memory")),
                    }
                }
                "consumer" => {
                    o.mode = match v {
                        "pull" => Mode::Pull,
                        "push" => Mode::Push,
                        _ => return Err(bad(k, v, "pull or push")),
                    }
                }
                "deliver" => {
                    o.deliver = match v {
                        "new" => Deliver::New,
                        "all" => Deliver::All,
                        _ => return Err(bad(k, v, "new or all")),
                    }
                }
                "create" => {
                    o.create = match v {
                        "1" | "true" | "yes" => true,
                        "0" | "false" | "no" => false,
                        _ => return Err(bad(k, v, "1 or 0")),
                    }
                }
                "batch" => o.batch = num(k, v)? as u32,
                "replicas" => o.replicas = num(k, v)? as u32,
                "ack_pending" => o.ack_pending = num(k, v)? as u32,
                "max_bytes" => {
                    o.max_bytes = Some(
                        msgbench_core::units::parse_size(v)
                            .ok()
                            .filter(|b| *b > 0)
                            .ok_or_else(|| bad(k, v, "a size such as 256MiB"))?,
                    )
                }
                // Who the connection is: read by the connection (`crate::conn`).
                "nkey" | "creds" | "tls_first" => {}
                "ack_wait" => o.ack_wait = dur(k, v)?,
                "expires" => o.expires = dur(k, v)?,
                other => {
                    return Err(DriverError::Config(format!(
                        "unknown nats+js option `{other}` (known: {OPTION_NAMES})"
                    )));
                }
            }
        }
        Ok(o)
    }

    /// The `max_bytes` of the streams msgbench creates.
    pub fn stream_max_bytes(&self) -> u64 {
        self.max_bytes.unwrap_or(match self.storage {
            Storage::File => 256 << 20,
            Storage::Memory => 64 << 20,
        })
    }

    /// The stream that holds `topic`.
    pub fn stream_of(&self, topic: &str) -> String {
        self.stream
            .clone()
            .unwrap_or_else(|| stream_for_topic(topic))
    }
}

/// Whether subject `pattern` (with `*` and `>` wildcards) matches `subject`, which may itself
/// hold wildcards (then it must be covered token by token).
pub fn subject_covers(pattern: &str, subject: &str) -> bool {
    let mut p = pattern.split('.');
    let mut s = subject.split('.');
    loop {
        match (p.next(), s.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(t)) if t != ">" => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_options() {
        let o = JsOptions::parse("nats+js://h:1").unwrap();
        assert_eq!(o, JsOptions::default());
        let o = JsOptions::parse(
            "nats+js://h:1?stream=S1&storage=memory&consumer=push&durable=d&batch=10&create=0&max_bytes=64MiB&replicas=3&ack_pending=5&ack_wait=2s&deliver=all&expires=1s",
        )
        .unwrap();
        assert_eq!(o.stream.as_deref(), Some("S1"));
        assert_eq!(
            (o.storage, o.mode, o.deliver),
            (Storage::Memory, Mode::Push, Deliver::All)
        );
        assert_eq!(
            (o.durable.as_deref(), o.batch, o.create),
            (Some("d"), 10, false)
        );
        assert_eq!(
            (o.stream_max_bytes(), o.replicas, o.ack_pending),
            (64 << 20, 3, 5)
        );
        assert_eq!(
            (o.ack_wait, o.expires),
            (Duration::from_secs(2), Duration::from_secs(1))
        );
        for bad in [
            "?stream=a.b",
            "?storage=disk",
            "?consumer=both",
            "?batch=0",
            "?create=maybe",
            "?bogus=1",
            "?ack_wait=0s",
        ] {
            let e = JsOptions::parse(&format!("nats+js://h{bad}")).unwrap_err();
            assert!(matches!(e, DriverError::Config(_)), "{bad}: {e}");
        }
    }

    #[test]
    fn names_and_subjects() {
        assert_eq!(stream_for_topic("bench.a-1>"), "MSGBENCH_bench_a-1_");
        assert!(valid_name("ORDERS_1") && !valid_name("a b") && !valid_name(""));
        assert!(subject_covers("a.*", "a.b") && subject_covers("a.>", "a.b.c"));
        assert!(subject_covers("a.*", "a.*") && !subject_covers("a.b", "a.*"));
        assert!(!subject_covers("a.*", "a.b.c") && !subject_covers("a.b", "a"));
        assert!(subject_covers("a.b", "a.b") && !subject_covers("a.*", "a.>"));
    }
}
