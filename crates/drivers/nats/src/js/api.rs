//! The JetStream API over core NATS: JSON requests to `$JS.API.*` subjects with a reply inbox,
//! used at set-up time (streams, consumers) — never on the message path. Requests are
//! idempotent (creating a stream or a named consumer with the same configuration again
//! succeeds), so a set-up interrupted by a lost connection is simply done again.

use super::options::{Deliver, JsOptions, Mode, subject_covers};
use crate::conn::Conn;
use crate::proto::{self, ServerOp};
use msgbench_core::driver::DriverError;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::time::Duration;

/// How long an API request may take.
const API_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a request waiting for its answer looks whether the server refused it instead.
const API_DENIAL_LOOK: Duration = Duration::from_millis(100);

/// JetStream's error code for "stream not found".
const STREAM_NOT_FOUND: u64 = 10059;
/// JetStream's error code for "stream name already in use with a different configuration".
const STREAM_NAME_IN_USE: u64 = 10058;
/// JetStream's error code for "subjects overlap with an existing stream": what a create gets
/// when another client created the same stream a moment earlier.
const SUBJECTS_OVERLAP: u64 = 10065;

/// Why a JetStream API call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum JsError {
    /// Nothing answers on `$JS.API`: the server runs without JetStream.
    #[error(
        "JetStream is not enabled on the server (no responders on $JS.API; start nats-server with -js)"
    )]
    NotEnabled,
    /// The stream does not exist and `create=0` forbids creating it.
    #[error("JetStream stream `{0}` does not exist (create=0: msgbench does not create streams)")]
    StreamMissing(String),
    /// The server refused a request.
    #[error("JetStream {op}: {description} (code {code}, err_code {err_code})")]
    Api {
        /// What was asked.
        op: String,
        /// HTTP-like status.
        code: u64,
        /// JetStream's own error code.
        err_code: u64,
        /// The server's words.
        description: String,
    },
    /// A durable consumer of that name exists with settings this run cannot change (push
    /// against pull, another filter, heartbeats...): an earlier run's, usually.
    #[error(
        "JetStream durable consumer `{name}` of stream `{stream}` exists with other settings ({description}): delete it (`nats consumer rm {stream} {name}`) or name another with ?durable="
    )]
    DurableMismatch {
        /// The stream.
        stream: String,
        /// The durable's name.
        name: String,
        /// The server's words.
        description: String,
    },
    /// The stream to create would capture a subject another stream already captures.
    #[error(
        "JetStream subject `{subject}` is already captured by stream `{holder}` (this run would create `{stream}`): add ?stream={holder} to use it, or remove it (`nats stream rm {holder}`)"
    )]
    SubjectTaken {
        /// The subject.
        subject: String,
        /// The stream this run would create.
        stream: String,
        /// The stream that has it.
        holder: String,
    },
    /// No answer in time.
    #[error("JetStream {0}: no answer within 5s")]
    Timeout(String),
    /// The server refused the request itself (the user may not publish to `$JS.API.…`).
    #[error(
        "JetStream {op}: the server refused the request: {reason} (the user needs publish permission on $JS.API.> and subscribe permission on its inbox)"
    )]
    Denied {
        /// What was asked.
        op: String,
        /// The server's `-ERR`.
        reason: String,
    },
    /// The connection failed during the request.
    #[error("JetStream {op}: {reason}")]
    Io {
        /// What was asked.
        op: String,
        /// Why.
        reason: String,
    },
}

impl From<JsError> for DriverError {
    fn from(e: JsError) -> Self {
        match e {
            JsError::Timeout(_) => DriverError::Timeout(e.to_string()),
            // Asking again would be refused again.
            JsError::Denied { .. } => DriverError::Config(e.to_string()),
            _ => DriverError::Subscribe(e.to_string()),
        }
    }
}

/// The reply inbox of a connection's API requests (`<prefix>api.<n>`).
pub struct ApiInbox {
    prefix: String,
    next: u64,
}

impl ApiInbox {
    /// Subscribes `<prefix>api.*` on `conn` (replayed on reconnection).
    pub fn new(conn: &mut Conn, prefix: &str) -> ApiInbox {
        let prefix = format!("{prefix}api.");
        conn.subscribe(&format!("{prefix}*"), None);
        ApiInbox { prefix, next: 0 }
    }

    /// Whether `subject` is an API reply (a late one, from an interrupted request, is dropped).
    pub fn owns(&self, subject: &[u8]) -> bool {
        subject.starts_with(self.prefix.as_bytes())
    }

    /// Sends `body` to `$JS.API.<what>` and waits for the answer. Other messages that arrive
    /// meanwhile go to `stash`, in order, for the caller to handle afterwards.
    pub async fn request(
        &mut self,
        conn: &mut Conn,
        what: &str,
        body: &Value,
        stash: &mut VecDeque<ServerOp>,
    ) -> Result<Value, JsError> {
        self.next += 1;
        let reply = format!("{}{}", self.prefix, self.next);
        let subject = format!("$JS.API.{what}");
        let payload = body.to_string();
        let op = || what.split('.').take(2).collect::<Vec<_>>().join(".");
        write_request(&mut conn.wire.wbuf, &subject, &reply, payload.as_bytes());
        let io = |e: std::io::Error| JsError::Io {
            op: op(),
            reason: e.to_string(),
        };
        let deadline = tokio::time::Instant::now() + API_TIMEOUT;
        let _ = conn.errors.take_api_denial();
        loop {
            // In slices: a request the user may not make is refused by an `-ERR` that has no
            // reply to wait for, looked for between them.
            let slice = (tokio::time::Instant::now() + API_DENIAL_LOOK).min(deadline);
            let got = match tokio::time::timeout_at(slice, conn.next_msg()).await {
                Ok(got) => got.map_err(io)?,
                Err(_) => {
                    if let Some(e) = conn.errors.take_api_denial() {
                        return Err(JsError::Denied {
                            op: op(),
                            reason: e,
                        });
                    }
                    if tokio::time::Instant::now() >= deadline {
                        return Err(JsError::Timeout(op()));
                    }
                    continue;
                }
            };
            let (subject, headers, payload) = match &got {
                ServerOp::Msg {
                    subject, payload, ..
                } => (subject, None, payload),
                ServerOp::HMsg {
                    subject,
                    headers,
                    payload,
                    ..
                } => (subject, Some(headers), payload),
                _ => continue,
            };
            if subject.as_ref() != reply.as_bytes() {
                if !self.owns(subject) {
                    stash.push_back(got);
                }
                continue;
            }
            if headers.and_then(|h| proto::status(h)) == Some(503) {
                return Err(JsError::NotEnabled);
            }
            let v: Value = serde_json::from_slice(payload).map_err(|e| JsError::Io {
                op: op(),
                reason: format!("unreadable answer: {e}"),
            })?;
            if let Some(err) = v.get("error") {
                return Err(JsError::Api {
                    op: op(),
                    code: err["code"].as_u64().unwrap_or(0),
                    err_code: err["err_code"].as_u64().unwrap_or(0),
                    description: err["description"]
                        .as_str()
                        .unwrap_or("(no description)")
                        .to_string(),
                });
            }
            return Ok(v);
        }
    }
}

/// Appends `PUB <subject> <reply> <len>\r\n<payload>\r\n`.
pub fn write_request(out: &mut bytes::BytesMut, subject: &str, reply: &str, payload: &[u8]) {
    out.extend_from_slice(b"PUB ");
    out.extend_from_slice(subject.as_bytes());
    out.extend_from_slice(b" ");
    out.extend_from_slice(reply.as_bytes());
    out.extend_from_slice(b" ");
    proto::put_u64(out, payload.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(payload);
    out.extend_from_slice(b"\r\n");
}

/// The lock the clients of this process take turns with to set stream `name` up (see
/// [`ensure_stream`]).
fn stream_turn(name: &str) -> std::sync::Arc<tokio::sync::Mutex<()>> {
    static TURNS: std::sync::LazyLock<
        std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>>,
    > = std::sync::LazyLock::new(Default::default);
    let mut turns = TURNS.lock().unwrap_or_else(|e| e.into_inner());
    turns.entry(name.to_string()).or_default().clone()
}

/// Makes sure stream `stream` exists and captures `topic`: with `create`, creates it (file or
/// memory storage, limits retention, `max_bytes` with the oldest messages discarded) or adds
/// `topic` to an existing stream's subjects; without, only checks it exists.
///
/// An existing stream is used as it is: when its storage, size limit or replicas differ from
/// what this run asks, the answer says how (the run would otherwise measure another stream
/// than the one asked for, and say nothing).
pub async fn ensure_stream(
    api: &mut ApiInbox,
    conn: &mut Conn,
    o: &JsOptions,
    stream: &str,
    topic: &str,
    stash: &mut VecDeque<ServerOp>,
) -> Result<Option<String>, JsError> {
    // A stream update replaces the whole subject list: two clients adding their topics at once
    // would each write the list they read, and the last write drops the other's topic (every
    // publish to it then refused with 503). The clients of this process take turns.
    let turn = stream_turn(stream);
    let _turn = turn.lock().await;
    // Two rounds at most: a stream another client created between our look and our create is
    // looked at again.
    for _ in 0..2 {
        match ensure_once(api, conn, o, stream, topic, stash).await {
            Err(JsError::Api { err_code, .. })
                if err_code == STREAM_NAME_IN_USE || err_code == SUBJECTS_OVERLAP =>
            {
                continue;
            }
            r => return r,
        }
    }
    match ensure_once(api, conn, o, stream, topic, stash).await {
        Err(e @ JsError::Api { err_code, .. }) if err_code == SUBJECTS_OVERLAP => {
            // Name the stream in the way: what the user needs to choose between them.
            let names = api
                .request(conn, "STREAM.NAMES", &json!({ "subject": topic }), stash)
                .await;
            let holder = names.ok().and_then(|v| {
                v["streams"]
                    .as_array()?
                    .iter()
                    .filter_map(Value::as_str)
                    .find(|n| *n != stream)
                    .map(str::to_string)
            });
            Err(match holder {
                Some(holder) => JsError::SubjectTaken {
                    subject: topic.into(),
                    stream: stream.into(),
                    holder,
                },
                None => e,
            })
        }
        r => r,
    }
}

/// How existing stream `stream` (its `config`) differs from what `o` asks: storage, a size
/// limit asked for, replicas; `None` when it does not.
fn settings_differ(o: &JsOptions, stream: &str, cfg: &Value) -> Option<String> {
    let mut has = Vec::new();
    let mut asked = Vec::new();
    let storage = cfg["storage"].as_str().unwrap_or("file");
    if storage != o.storage.as_str() {
        has.push(format!("storage {storage}"));
        asked.push(format!("storage {}", o.storage.as_str()));
    }
    if let Some(want) = o.max_bytes
        && let Some(max) = cfg["max_bytes"].as_i64()
        && max != want as i64
    {
        has.push(format!("max_bytes {max}"));
        asked.push(format!("max_bytes {want}"));
    }
    let replicas = cfg["num_replicas"].as_u64().unwrap_or(1);
    if replicas != u64::from(o.replicas) {
        has.push(format!("replicas {replicas}"));
        asked.push(format!("replicas {}", o.replicas));
    }
    (!has.is_empty()).then(|| {
        format!(
            "JetStream stream `{stream}` exists with {} where this run asks for {}: it is \
             used as it is (remove it with `nats stream rm {stream}`, or name another with \
             ?stream=NAME)",
            has.join(", "),
            asked.join(", ")
        )
    })
}

async fn ensure_once(
    api: &mut ApiInbox,
    conn: &mut Conn,
    o: &JsOptions,
    stream: &str,
    topic: &str,
    stash: &mut VecDeque<ServerOp>,
) -> Result<Option<String>, JsError> {
    let info = match api
        .request(conn, &format!("STREAM.INFO.{stream}"), &json!({}), stash)
        .await
    {
        Ok(v) => Some(v),
        Err(JsError::Api { err_code, .. }) if err_code == STREAM_NOT_FOUND => None,
        Err(e) => return Err(e),
    };
    let Some(info) = info else {
        if !o.create {
            return Err(JsError::StreamMissing(stream.to_string()));
        }
        let cfg = json!({
            "name": stream,
            "subjects": [topic],
            "retention": "limits",
            "storage": o.storage.as_str(),
            "max_bytes": o.stream_max_bytes(),
            "max_msgs": -1,
            "max_age": 0,
            "discard": "old",
            "num_replicas": o.replicas,
        });
        return api
            .request(conn, &format!("STREAM.CREATE.{stream}"), &cfg, stash)
            .await
            .map(|_| None);
    };
    let mut cfg = info["config"].clone();
    let differ = settings_differ(o, stream, &cfg);
    let subjects = cfg["subjects"].as_array().cloned().unwrap_or_default();
    let covered = subjects
        .iter()
        .filter_map(Value::as_str)
        .any(|s| subject_covers(s, topic));
    if covered || !o.create {
        return Ok(differ);
    }
    let mut subjects = subjects;
    subjects.push(topic.into());
    cfg["subjects"] = Value::Array(subjects);
    api.request(conn, &format!("STREAM.UPDATE.{stream}"), &cfg, stash)
        .await
        .map(|_| differ)
}

/// What a consumer is, fixed at set-up so that creating it again (after a reconnection) asks
/// for exactly the same thing.
#[derive(Debug, Clone)]
pub struct ConsumerDef {
    /// Stream it reads.
    pub stream: String,
    /// Its name (a durable's, or the name of an ephemeral consumer unique to this client).
    pub name: String,
    /// Durable (survives its clients) or ephemeral (removed once unused).
    pub durable: bool,
    /// Push consumers: the subject the server delivers to, and the queue group sharing it.
    pub deliver: Option<(String, Option<String>)>,
    /// The subject it takes from the stream.
    pub filter: String,
}

impl ConsumerDef {
    /// The create request: explicit acks, instant replay, the options' start, ack wait and
    /// window; push consumers get flow control and idle heartbeats unless a queue group shares
    /// them (the server allows neither with a deliver group).
    pub fn config(&self, o: &JsOptions) -> Value {
        let mut c = json!({
            "ack_policy": "explicit",
            "ack_wait": o.ack_wait.as_nanos() as u64,
            "max_ack_pending": o.ack_pending,
            "deliver_policy": match o.deliver { Deliver::New => "new", Deliver::All => "all" },
            "replay_policy": "instant",
            "filter_subject": self.filter,
        });
        if self.durable {
            c["durable_name"] = self.name.clone().into();
        } else {
            c["name"] = self.name.clone().into();
            c["inactive_threshold"] = (Duration::from_secs(30).as_nanos() as u64).into();
        }
        match (&self.deliver, o.mode) {
            (Some((subject, group)), Mode::Push) => {
                c["deliver_subject"] = subject.clone().into();
                match group {
                    Some(g) => c["deliver_group"] = g.clone().into(),
                    None => {
                        c["flow_control"] = true.into();
                        c["idle_heartbeat"] = (Duration::from_secs(5).as_nanos() as u64).into();
                    }
                }
            }
            _ => c["max_waiting"] = 512.into(),
        }
        json!({ "stream_name": self.stream, "config": c })
    }

    /// The API subject that creates it.
    pub fn create_subject(&self) -> String {
        if self.durable {
            format!("CONSUMER.DURABLE.CREATE.{}.{}", self.stream, self.name)
        } else {
            format!("CONSUMER.CREATE.{}.{}", self.stream, self.name)
        }
    }

    /// Creates it (or finds it as it is).
    pub async fn create(
        &self,
        api: &mut ApiInbox,
        conn: &mut Conn,
        o: &JsOptions,
        stash: &mut VecDeque<ServerOp>,
    ) -> Result<(), JsError> {
        match api
            .request(conn, &self.create_subject(), &self.config(o), stash)
            .await
        {
            Ok(_) => Ok(()),
            // The server's words for a config it will not apply to an existing consumer:
            // "... can not be updated", "cannot update ...", "... already in use".
            Err(JsError::Api { description, .. })
                if self.durable
                    && ["update", "already", "existing"]
                        .iter()
                        .any(|w| description.to_lowercase().contains(w)) =>
            {
                Err(JsError::DurableMismatch {
                    stream: self.stream.clone(),
                    name: self.name.clone(),
                    description,
                })
            }
            Err(e) => Err(e),
        }
    }
}
