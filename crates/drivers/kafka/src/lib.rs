//! # msgbench-driver-kafka
//!
//! Apache Kafka through librdkafka (the `rdkafka` crate on the system's librdkafka, linked
//! dynamically): the reference C client that serious Kafka tools build on, so what msgbench
//! measures is what a production client achieves, not a toy client's limits.
//!
//! - Producers: `acks` 0/1/all, idempotence, linger, batch size and compression are librdkafka
//!   settings ([`options::KafkaPlan`]). Each message is handed to librdkafka without a per-message
//!   allocation on our side (topic names are converted once, the token travels as the message's
//!   opaque pointer); its delivery report is the ack, so publish latency runs from `send` to
//!   the broker's acknowledgement (for `acks=0`, to the write). Partitions are chosen
//!   round-robin by the driver, by a key per message (murmur2, as Java clients hash), or left
//!   to librdkafka's sticky partitioner.
//! - Consumers: each in a group of its own (fan-out) or all in the run's group (competing).
//!   Every consumer has a thread polling librdkafka, so group rebalances are served even while
//!   the runner has not started reading, and hands messages over a bounded channel. A consumer
//!   is returned only once it has its partitions and their start offsets (latest: the high
//!   watermark looked up then; earliest: the beginning), so nothing sent afterwards is missed.
//!   Commits: librdkafka's periodic auto-commit, an async or sync commit per message, or none.
//! - Ordering: Kafka orders only within a partition, so each delivery's partition is its lane
//!   ([`Consumer::lane`](msgbench_core::driver::Consumer::lane)) and the integrity tracker never calls cross-partition order
//!   "reordered".
//! - Topics: created on first use with the plan's partitions and replication factor (an
//!   existing topic is used as it is), or required to exist.
//!
//! Failures: librdkafka reconnects by itself (within a second: its backoff is capped so); a
//! client that lost every broker connection says `disconnected`, and `reconnected` once
//! messages go through again (`reach`). A request unanswered for two `--keep-alive` periods
//! ends its connection; a connection not up within `--connect-timeout` is given up. Sends whose
//! report does not come within the ack timeout are in doubt, and stay so if it comes later.
//!
//! URLs: `kafka://[user:password@]host:port[,host:port...][?sasl=MECHANISM]`, `kafka+ssl://...`
//! for TLS (`--ca-file`, `--cert` and `--key`, `--insecure`). Credentials turn SASL on (PLAIN,
//! SCRAM-SHA-256 or SCRAM-SHA-512; over TLS, SASL_SSL).
//!
//! # Layout
//! - [`options`]: `[kafka]`, its resolution and its flags (built without librdkafka too, so a
//!   build without the driver still reads scenario files that have the section).
//! - this file (feature `client`, on by default): URL and configuration, topic provisioning, the `Driver`.
//! - [`producer`]: the producer and its delivery reports.
//! - [`consumer`]: the consumer thread, start offsets and commits.
//! - [`session`]: connection workloads, one librdkafka producer per connection.
//! - `reach`: a client's view of whether it reaches the cluster, turned into the runner's
//!   `disconnected` and `reconnected` events.

#![deny(missing_docs)]

pub mod options;

#[cfg(feature = "client")]
pub mod consumer;
#[cfg(feature = "client")]
pub mod producer;
#[cfg(feature = "client")]
mod reach;
#[cfg(feature = "client")]
pub mod session;

#[cfg(feature = "client")]
use msgbench_core::driver::{
    Capabilities, ConsumerSpec, Driver, DriverError, DriverEventKind, EventSink, ProducerSpec,
    SessionSpec,
};
#[cfg(feature = "client")]
use msgbench_core::scenario::TlsPlan;
#[cfg(feature = "client")]
use msgbench_metrics::ConnectFailure;
#[cfg(feature = "client")]
use options::KafkaPlan;
#[cfg(feature = "client")]
use rdkafka::ClientConfig;
#[cfg(feature = "client")]
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
#[cfg(feature = "client")]
use rdkafka::client::DefaultClientContext;
#[cfg(feature = "client")]
use rdkafka::consumer::{BaseConsumer, Consumer as _};
#[cfg(feature = "client")]
use rdkafka::error::RDKafkaErrorCode;
#[cfg(feature = "client")]
use rdkafka::types::RDKafkaRespErr;
#[cfg(feature = "client")]
use std::collections::HashMap;
#[cfg(feature = "client")]
use std::sync::Mutex;
#[cfg(feature = "client")]
use std::time::{Duration, Instant};

#[cfg(feature = "client")]
pub use consumer::KafkaConsumer;
#[cfg(feature = "client")]
pub use producer::KafkaProducer;
#[cfg(feature = "client")]
pub use session::KafkaSession;

/// A client context that keeps librdkafka's last error report, for set-up errors that would
/// otherwise say only "transport failure".
#[derive(Default)]
#[cfg(feature = "client")]
struct LastError(Mutex<Option<String>>);

#[cfg(feature = "client")]
impl rdkafka::ClientContext for LastError {
    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        let _ = error;
        *self.0.lock().expect("last error") = Some(reason.to_string());
    }
}

#[cfg(feature = "client")]
impl rdkafka::consumer::ConsumerContext for LastError {}

/// The Kafka driver: one per run.
#[cfg(feature = "client")]
pub struct KafkaDriver {
    /// Client settings every producer, consumer and admin client starts from.
    base: ClientConfig,
    /// `host:port,...` without credentials, for messages.
    servers: String,
    plan: KafkaPlan,
    events: EventSink,
    connect_timeout: Duration,
    run_id: u32,
    /// Partition counts of the topics provisioned so far (set-up only, never on the hot path).
    topics: Mutex<HashMap<String, i32>>,
}

/// The SASL mechanism of a URL's `?sasl=`: `PLAIN` (the default), `SCRAM-SHA-256` or
/// `SCRAM-SHA-512`, the mechanisms librdkafka has built in. The only option of the query.
#[cfg(feature = "client")]
fn mechanism(rest: &str, display: &str) -> Result<&'static str, DriverError> {
    let query = rest.split_once('?').map_or("", |(_, q)| q);
    let mut mechanism = "PLAIN";
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("sasl", v)) => {
                mechanism = match v.to_ascii_uppercase().as_str() {
                    "PLAIN" => "PLAIN",
                    "SCRAM-SHA-256" => "SCRAM-SHA-256",
                    "SCRAM-SHA-512" => "SCRAM-SHA-512",
                    _ => {
                        return Err(DriverError::Config(format!(
                            "`{display}`: sasl={v}: expected PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
                        )));
                    }
                }
            }
            _ => {
                return Err(DriverError::Config(format!(
                    "`{display}`: unknown option `{pair}` (known: sasl=PLAIN|SCRAM-SHA-256|SCRAM-SHA-512)"
                )));
            }
        }
    }
    Ok(mechanism)
}

/// SASL credentials from a URL's `user:password@` (percent-decoded).
#[cfg(feature = "client")]
fn credentials(userinfo: &str, display: &str) -> Result<(String, String), DriverError> {
    let Some((user, password)) = userinfo.split_once(':') else {
        return Err(DriverError::Config(format!(
            "`{display}`: credentials are user:password@ (SASL)"
        )));
    };
    use msgbench_core::redact::unescape;
    Ok((unescape(user), unescape(password)))
}

#[cfg(feature = "client")]
impl KafkaDriver {
    /// A driver for `kafka://[user:password@]host:port[,host:port...][?sasl=MECHANISM]` or
    /// `kafka+ssl://...`.
    pub fn new(
        url: &str,
        plan: &KafkaPlan,
        tls: &TlsPlan,
        run_id: u32,
        events: EventSink,
        connect_timeout: Duration,
    ) -> Result<Self, DriverError> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| DriverError::Config(format!("`{url}` is not a kafka:// URL")))?;
        let ssl = match scheme {
            "kafka" => false,
            "kafka+ssl" => true,
            other => {
                return Err(DriverError::Config(format!(
                    "`{other}://` is not Kafka: use kafka:// or kafka+ssl://"
                )));
            }
        };
        let display = msgbench_core::redact::url(url);
        let servers = rest.split(['/', '?']).next().unwrap_or("");
        let mechanism = mechanism(rest, &display)?;
        let (sasl, servers) = match servers.rsplit_once('@') {
            Some((userinfo, servers)) => (Some(credentials(userinfo, &display)?), servers),
            None => (None, servers),
        };
        let mut list = Vec::new();
        for s in servers.split(',') {
            if s.is_empty() {
                return Err(DriverError::Config(format!(
                    "`{display}`: expected kafka://[user:password@]host:port[,host:port...]"
                )));
            }
            list.push(
                if s.rsplit_once(':')
                    .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
                {
                    s.to_string()
                } else {
                    format!("{s}:9092")
                },
            );
        }
        let servers = list.join(",");
        let mut base = ClientConfig::new();
        base.set("bootstrap.servers", &servers)
            .set("socket.nagle.disable", "true")
            .set("log_level", "3")
            .set("socket.timeout.ms", "10000")
            // A connection that does not come up within the run's connect timeout is given up
            // (librdkafka waits 30 s by default: a silent network would hold it that long).
            .set(
                "socket.connection.setup.timeout.ms",
                connect_timeout
                    .as_millis()
                    .clamp(1000, i32::MAX as u128)
                    .to_string(),
            )
            // librdkafka backs off up to 10 s between connection attempts by default, which
            // would hide for that long that a restarted broker is back: the other drivers retry
            // within a second, and a benchmark measures recovery, so this one does too.
            .set("reconnect.backoff.ms", "100")
            .set("reconnect.backoff.max.ms", "1000");
        if let Some((user, password)) = &sasl {
            base.set(
                "security.protocol",
                if ssl { "sasl_ssl" } else { "sasl_plaintext" },
            )
            .set("sasl.mechanisms", mechanism)
            .set("sasl.username", user)
            .set("sasl.password", password);
        }
        if ssl {
            if sasl.is_none() {
                base.set("security.protocol", "ssl");
            }
            if let Some(ca) = &tls.ca_file {
                base.set("ssl.ca.location", ca.display().to_string());
            }
            if let (Some(c), Some(k)) = (&tls.cert_file, &tls.key_file) {
                base.set("ssl.certificate.location", c.display().to_string())
                    .set("ssl.key.location", k.display().to_string());
            }
            if tls.insecure {
                base.set("enable.ssl.certificate.verification", "false")
                    .set("ssl.endpoint.identification.algorithm", "none");
            }
        }
        Ok(Self {
            base,
            servers,
            plan: plan.clone(),
            events,
            connect_timeout,
            run_id,
            topics: Mutex::new(HashMap::new()),
        })
    }

    /// Judges a connection dead once a request has gone unanswered for two keep-alive periods
    /// (librdkafka's request timeout, `socket.timeout.ms`), the way the other drivers judge a
    /// silent connection: a network that swallows everything is noticed, and left, in seconds.
    pub fn with_keep_alive(mut self, every: Duration) -> Self {
        if !every.is_zero() {
            let ms = (every.as_millis() * 2).clamp(1000, 300_000);
            self.base.set("socket.timeout.ms", ms.to_string());
        }
        self
    }

    /// The settings in force (for tests and `--dry-run` style reports).
    pub fn plan(&self) -> &KafkaPlan {
        &self.plan
    }

    fn connect_error(&self, reason: String, cause: ConnectFailure) -> DriverError {
        DriverError::Connect {
            target: self.servers.clone(),
            reason,
            cause,
        }
    }

    /// Makes sure `topic` exists (creating it when the plan allows) and returns its partition
    /// count. A broker that does not answer within the connect timeout fails here, so an
    /// unreachable target is an error at start-up, not a silent run of retries.
    pub async fn provision(&self, topic: &str) -> Result<i32, DriverError> {
        if let Some(n) = self.topics.lock().expect("topics lock").get(topic) {
            return Ok(*n);
        }
        // A little inside the runner's own connect timeout, so the broker's reason is reported.
        let budget = self
            .connect_timeout
            .saturating_sub(Duration::from_millis(500));
        let deadline = Instant::now() + budget.max(Duration::from_millis(500));
        let existing = self.partitions_of(topic, deadline).await?;
        let n = match existing {
            Some(n) => {
                if self.plan.partitions_asked && n as u32 != self.plan.partitions {
                    self.events.emit(
                        DriverEventKind::Warning,
                        format!(
                            "topic `{topic}` exists with {n} partition{}, not the {} asked for \
                             (--partitions applies to topics msgbench creates): the run uses \
                             its {n}; use a new topic name to get {}",
                            if n == 1 { "" } else { "s" },
                            self.plan.partitions,
                            self.plan.partitions
                        ),
                    );
                }
                n
            }
            None if !self.plan.create_topics => {
                return Err(DriverError::Subscribe(format!(
                    "topic `{topic}` does not exist on {} (and --no-create-topics is set)",
                    self.servers
                )));
            }
            None => {
                self.create(topic).await?;
                // Wait until the metadata shows every partition with a leader.
                loop {
                    if let Some(n) = self.partitions_of(topic, deadline).await?
                        && n as u32 >= self.plan.partitions
                    {
                        break n;
                    }
                    if Instant::now() >= deadline {
                        return Err(DriverError::Timeout(format!(
                            "topic `{topic}` was created but has no leaders yet"
                        )));
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        self.topics
            .lock()
            .expect("topics lock")
            .insert(topic.to_string(), n);
        Ok(n)
    }

    /// Partitions of `topic` whose leader is known, `None` if the topic does not exist.
    async fn partitions_of(
        &self,
        topic: &str,
        deadline: Instant,
    ) -> Result<Option<i32>, DriverError> {
        let cfg = self.base.clone();
        let topic = topic.to_string();
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(100));
        let r = tokio::task::spawn_blocking(move || {
            let c: BaseConsumer<LastError> = cfg
                .create_with_context(LastError::default())
                .map_err(|e| (e, None))?;
            let md = c.fetch_metadata(Some(&topic), left);
            if md.is_err() {
                // Error reports are events: serving the queue hands them to the context.
                let _ = c.poll(Duration::from_millis(100));
            }
            let why = c.context().0.lock().expect("last error").take();
            md.map_err(|e| (e, why))
        })
        .await
        .map_err(|e| DriverError::Subscribe(format!("metadata task: {e}")))?;
        let md = r.map_err(|(e, why)| {
            let cause = if e.rdkafka_error_code() == Some(RDKafkaErrorCode::OperationTimedOut) {
                ConnectFailure::Timeout
            } else {
                ConnectFailure::Refused
            };
            // librdkafka gives the request only "transport failure"; the reason (a refused
            // connection, a TLS handshake that failed on the certificate) came to the context.
            let why = why.map(|w| format!(" ({w})")).unwrap_or_default();
            self.connect_error(format!("no answer to a metadata request: {e}{why}"), cause)
        })?;
        let Some(t) = md.topics().first() else {
            return Ok(None);
        };
        match t.error() {
            None => {}
            Some(RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) => return Ok(None),
            Some(e) => {
                return Err(DriverError::Subscribe(format!(
                    "topic `{}`: {}",
                    t.name(),
                    RDKafkaErrorCode::from(e)
                )));
            }
        }
        if t.partitions().is_empty() || t.partitions().iter().any(|p| p.leader() < 0) {
            return Ok(Some(0));
        }
        Ok(Some(t.partitions().len() as i32))
    }

    async fn create(&self, topic: &str) -> Result<(), DriverError> {
        let admin: AdminClient<DefaultClientContext> = self
            .base
            .create()
            .map_err(|e| DriverError::Config(format!("admin client: {e}")))?;
        let new = NewTopic::new(
            topic,
            self.plan.partitions as i32,
            TopicReplication::Fixed(self.plan.replication_factor as i32),
        );
        let opts = AdminOptions::new().operation_timeout(Some(self.connect_timeout));
        let res = admin
            .create_topics([&new], &opts)
            .await
            .map_err(|e| self.connect_error(format!("create topic: {e}"), ConnectFailure::Other))?;
        for r in res {
            match r {
                Ok(_) => {}
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((t, e)) => {
                    return Err(DriverError::Subscribe(format!(
                        "cannot create topic `{t}` ({} partitions, replication factor {}): {e}",
                        self.plan.partitions, self.plan.replication_factor
                    )));
                }
            }
        }
        Ok(())
    }
}

#[cfg(feature = "client")]
impl Driver for KafkaDriver {
    type Producer = KafkaProducer;
    type Consumer = KafkaConsumer;
    type Session = KafkaSession;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            acks: true,
            queue_groups: true,
            request_reply: false,
            responses: false,
            metadata: false,
        }
    }

    async fn producer(&self, spec: &ProducerSpec) -> Result<KafkaProducer, DriverError> {
        let mut topics = Vec::with_capacity(spec.topics.len());
        for t in &spec.topics {
            topics.push((t.clone(), self.provision(t).await?));
        }
        if spec.id == 0 && self.plan.acks == options::KafkaAcks::Zero {
            // librdkafka still reports each record delivered, once written: what the report
            // counts as acked is that, not a confirmation.
            self.events.emit(
                DriverEventKind::Warning,
                "--acks 0: the broker confirms nothing; \"acked\" counts records written to \
                 the broker's socket and the publish latency runs to that write, not to a \
                 broker's acknowledgement (records the broker drops are not seen)",
            );
        }
        KafkaProducer::new(
            &self.base,
            &self.plan,
            spec,
            topics,
            self.events.clone(),
            &self.servers,
        )
    }

    async fn consumer(&self, spec: &ConsumerSpec) -> Result<KafkaConsumer, DriverError> {
        if spec.target.is_some() {
            return Err(DriverError::Config(
                "kafka:// consumers read from the run's target only".into(),
            ));
        }
        if spec.source.is_some() {
            return Err(no_source_addrs());
        }
        self.provision(&spec.topic).await?;
        let group = match &spec.group {
            Some(g) => g.clone(),
            None => format!("msgbench-{:08x}-{}", self.run_id, spec.id),
        };
        KafkaConsumer::start(
            &self.base,
            &self.plan,
            spec,
            group,
            self.events.clone(),
            &self.servers,
            self.connect_timeout,
        )
        .await
    }

    async fn session(&self, spec: &SessionSpec) -> Result<KafkaSession, DriverError> {
        if spec.source.is_some() {
            return Err(no_source_addrs());
        }
        KafkaSession::start(self, spec).await
    }
}

/// librdkafka picks its connections' local address itself: `--source-addrs` is refused rather
/// than silently ignored.
#[cfg(feature = "client")]
fn no_source_addrs() -> DriverError {
    DriverError::Config(
        "kafka:// cannot spread clients over --source-addrs: librdkafka chooses its local address itself"
            .into(),
    )
}

/// What `msgbench drivers` lists for Kafka, and its section: known to every build, so that a
/// build without the driver reads `[kafka]` and can say how to get the driver.
pub const INFO: msgbench_core::registration::DriverInfo = msgbench_core::registration::DriverInfo {
    name: "kafka",
    schemes: &["kafka", "kafka+ssl"],
    about: "Apache Kafka (librdkafka): acks 0/1/all, idempotence, linger, batch size, compression, round-robin/keyed/sticky partitioning, fan-out and group consumers, latest/earliest, commit modes, topic creation, integrity per partition, TLS, SASL (PLAIN, SCRAM: kafka://user:password@host?sasl=SCRAM-SHA-512)",
    caps: msgbench_core::driver::Capabilities {
        acks: true,
        queue_groups: true,
        request_reply: false,
        responses: false,
        metadata: false,
    },
    section: Some(msgbench_core::scenario::SectionSpec::of::<
        options::KafkaSection,
    >()),
};

#[cfg(feature = "client")]
impl msgbench_core::registration::Registered for KafkaDriver {
    const INFO: msgbench_core::registration::DriverInfo = INFO;

    fn build(
        url: &str,
        plan: &msgbench_core::scenario::RunPlan,
        events: EventSink,
    ) -> Result<Self, DriverError> {
        let kafka = plan.drivers.get::<options::KafkaSection>()?;
        Ok(KafkaDriver::new(
            url,
            &kafka,
            &plan.tls,
            plan.run_id,
            events,
            plan.connect_timeout,
        )?
        .with_keep_alive(plan.client.keep_alive))
    }
}

#[cfg(test)]
#[cfg(feature = "client")]
mod tests {
    use super::*;

    fn driver(url: &str) -> Result<KafkaDriver, DriverError> {
        KafkaDriver::new(
            url,
            &KafkaPlan::default(),
            &TlsPlan::default(),
            1,
            EventSink::channel().0,
            Duration::from_secs(1),
        )
    }

    #[test]
    fn urls() {
        assert_eq!(
            driver("kafka://127.0.0.1:19092").unwrap().servers,
            "127.0.0.1:19092"
        );
        assert_eq!(driver("kafka://a,b:1/").unwrap().servers, "a:9092,b:1");
        assert!(driver("kafka+ssl://localhost:9093").is_ok());
        let d = driver("kafka+ssl://bench:s%40cret@h:1,h:2?sasl=scram-sha-256").unwrap();
        assert_eq!(d.servers, "h:1,h:2");
        let get = |k| d.base.get(k).map(str::to_string);
        assert_eq!(get("security.protocol").as_deref(), Some("sasl_ssl"));
        assert_eq!(get("sasl.mechanisms").as_deref(), Some("SCRAM-SHA-256"));
        assert_eq!(get("sasl.password").as_deref(), Some("s@cret"));
        let d = driver("kafka://u:p@h:1").unwrap();
        assert_eq!(d.base.get("sasl.mechanisms"), Some("PLAIN"));
        for bad in [
            "kafka://u@h:1",
            "kafka://u:p@h:1?sasl=GSSAPI",
            "kafka://h:1?x=1",
        ] {
            assert!(matches!(driver(bad), Err(DriverError::Config(_))), "{bad}");
        }
        assert!(matches!(driver("kafka://"), Err(DriverError::Config(_))));
        assert!(matches!(driver("nats://h:1"), Err(DriverError::Config(_))));
    }
}
