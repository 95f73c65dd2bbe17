//! Brokerless AMQP 1.0 (point to point): `amqp10://HOST:PORT?bind=consumer|producer[&peers=N]`.
//! No broker in between: one side listens and the other connects and attaches its links
//! straight to it, as ZeroMQ's sockets do (the option names and port rules are the `zmq://`
//! driver's, so a comparison of the two changes one word of the URL).
//!
//! - `bind=consumer`: consumer `i` listens on `HOST:PORT+i`; each producer connects to the
//!   consumers of its topics and attaches one sender link per topic. A listening consumer
//!   grants each link `[amqp10] credit` (refilled at half), settles unsettled transfers with
//!   one disposition per run (as `[amqp10] on_receive` says), and answers detach, end and
//!   close. Several producers into one consumer are several connections to it.
//! - `bind=producer`: producer `i` listens on `HOST:PORT+i`; each consumer connects to the
//!   producers of its topics (as each starts listening) and attaches a receiver link. The
//!   producer sends only within the credit each consumer grants.
//! - `PORT` 0: every listening client gets a free port of its own; both ends must then run in
//!   this msgbench, which tells the connecting side where (a small registry, as for `zmq://`).
//! - `peers=N` (default 1): for a topic with no client of the other side in this process
//!   (`--segment`, or a peer msgbench did not write such as Qpid Proton): a connecting producer
//!   connects to `PORT .. PORT+N`; a listening producer waits for N receiver links.
//! - Fan-out: several consumers of one topic each get every message (one link to each, every
//!   message on every link). Consumers of one queue group share the messages, round robin
//!   among those with credit.
//! - Unsettled transfers (the default) are acked when every receiver settled them (accepted =
//!   ok, anything else refused); `[amqp10] settled = true` sends pre-settled.
//!
//! Faults: a port in use is a connect error naming the address; a peer that speaks another
//! protocol is refused and counted as an error event; a peer granting no credit for the
//! connect timeout is reported once as a stall and each send that waited that long fails, a
//! send error (nothing goes missing or in doubt: the message was not sent). A peer leaving mid-run is a
//! `disconnected` event; its unsettled messages are reported in doubt at once.
//!
//! Limits: no TLS (`amqp10s://`), no connection workloads, no request/reply; a lost peer is not
//! dialled again; a listening side serves one session per connection.
//!
//! # Layout
//! - this file: the URL, who listens where within this process, the `Driver`.
//! - `producer`, `consumer`: the runner's producers and consumers, either side listening.

mod consumer;
mod producer;

pub use consumer::P2pConsumer;
pub use producer::P2pProducer;

use crate::conn::Serving;
use crate::options::Amqp10Plan;
use msgbench_core::driver::{
    Capabilities, ConsumerSpec, Driver, DriverError, EventSink, NoSession, ProducerSpec,
    SessionSpec,
};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// Which side listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bind {
    /// Consumers listen, producers connect.
    Consumer,
    /// Producers listen, consumers connect.
    Producer,
}

/// A brokerless URL, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// `user:pass@` as given (connecting to a listener that wants a login), or empty.
    pub userinfo: String,
    /// Host to listen on and connect to (IPv6 without brackets).
    pub host: String,
    /// Base port (listening client `i` uses `PORT + i`; 0: free ports).
    pub port: u16,
    /// Which side listens: the URL's `bind=consumer` or `bind=producer` (the plurals are
    /// taken too). [`Bind::Consumer`] if the option is absent, though a URL without it is
    /// not brokerless in the first place ([`is_brokerless`]).
    pub bind: Bind,
    /// Peers elsewhere, for a topic without a client of the other side here.
    pub peers: u16,
}

fn config(m: impl Into<String>) -> DriverError {
    DriverError::Config(m.into())
}

/// Whether `url` asks for brokerless mode (a `bind=` option).
pub fn is_brokerless(url: &str) -> bool {
    url.split_once('?')
        .is_some_and(|(_, q)| q.split('&').any(|p| p.starts_with("bind=")))
}

impl Options {
    /// Parses `amqp10://[user:pass@]HOST:PORT?bind=consumer|producer[&peers=N]`, strictly.
    pub fn parse(url: &str) -> Result<Options, DriverError> {
        let shown = msgbench_core::redact::url(url);
        if url.starts_with("amqp10s://") {
            return Err(config(format!(
                "`{shown}`: brokerless AMQP 1.0 (bind=) has no TLS; use amqp10://"
            )));
        }
        let rest = url
            .strip_prefix("amqp10://")
            .ok_or_else(|| config(format!("`{shown}` is not an amqp10:// URL")))?;
        let (authority, query) = rest.split_once('?').unwrap_or((rest, ""));
        let authority = authority.strip_suffix('/').unwrap_or(authority);
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (format!("{u}@"), h),
            None => (String::new(), authority),
        };
        let (host, port) = hostport.rsplit_once(':').ok_or_else(|| {
            config(format!(
                "`{shown}` needs a port: amqp10://HOST:PORT?bind=... (0 picks free ports)"
            ))
        })?;
        let port: u16 = port
            .parse()
            .map_err(|_| config(format!("`{shown}`: port `{port}` is not a number 0-65535")))?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if host.is_empty() || host.contains('/') {
            return Err(config(format!("`{shown}`: `{host}` is not a host")));
        }
        let mut o = Options {
            userinfo,
            host: host.to_string(),
            port,
            bind: Bind::Consumer,
            peers: 1,
        };
        let mut seen: Vec<&str> = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if seen.contains(&key) {
                return Err(config(format!("amqp10 option `{key}` is given twice")));
            }
            seen.push(key);
            match key {
                "bind" => {
                    o.bind = match value {
                        "consumer" | "consumers" => Bind::Consumer,
                        "producer" | "producers" => Bind::Producer,
                        _ => {
                            return Err(config(format!(
                                "amqp10 option bind=`{value}`: expected consumer or producer"
                            )));
                        }
                    }
                }
                "peers" => {
                    o.peers = value.parse().map_err(|_| {
                        config(format!(
                            "amqp10 option peers=`{value}`: expected a number of peers (0-65535)"
                        ))
                    })?;
                }
                _ => {
                    return Err(config(format!(
                        "unknown amqp10 option `{key}` (brokerless mode knows bind and peers)"
                    )));
                }
            }
        }
        Ok(o)
    }

    /// The port listening client `i` uses (0 stays 0: a free one).
    pub fn port_of(&self, i: u32) -> Result<u16, DriverError> {
        if self.port == 0 {
            return Ok(0);
        }
        u16::try_from(u32::from(self.port) + i).map_err(|_| {
            config(format!(
                "amqp10: client {i} would listen on port {} + {i}, past 65535; use a lower base port",
                self.port
            ))
        })
    }

    /// The connect URL of a listener at `addr` (credentials kept).
    pub fn url_of(&self, addr: SocketAddr) -> String {
        format!("amqp10://{}{addr}", self.userinfo)
    }

    /// Listeners in another process: `PORT .. PORT + peers`.
    pub fn remote(&self) -> Result<Vec<String>, DriverError> {
        if self.port == 0 {
            return Err(config(
                "amqp10: port 0 (free ports) only works with both ends in this msgbench; a peer \
                 in another process needs a fixed port",
            ));
        }
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        (0..u32::from(self.peers))
            .map(|i| {
                Ok(format!(
                    "amqp10://{}{host}:{}",
                    self.userinfo,
                    self.port_of(i)?
                ))
            })
            .collect()
    }
}

/// Whether a consumer topic (`name`, or `name*` for a prefix) receives `topic`.
pub(crate) fn matches(filter: &str, topic: &str) -> bool {
    match filter.strip_suffix('*') {
        Some(p) => topic.starts_with(p),
        None => filter == topic,
    }
}

/// A consumer of this process.
#[derive(Debug, Clone)]
pub(crate) struct LocalConsumer {
    pub id: u32,
    pub topic: String,
    /// In a queue group (competing), not a fan-out subscriber.
    pub competing: bool,
    /// Where it listens (`bind=consumer`).
    pub addr: Option<SocketAddr>,
}

/// A listening producer of this process.
#[derive(Debug, Clone)]
pub(crate) struct BoundProducer {
    pub topics: Vec<String>,
    pub addr: SocketAddr,
}

/// Who listens where within this process (set up once; never touched on the hot path).
#[derive(Debug)]
pub(crate) struct Registry {
    consumers: Mutex<Vec<LocalConsumer>>,
    producers: watch::Sender<Vec<BoundProducer>>,
    closing: AtomicBool,
}

impl Registry {
    pub fn add_consumer(&self, c: LocalConsumer) {
        self.consumers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(c);
    }

    /// The consumers that receive `topic`, by index.
    pub fn consumers_of(&self, topic: &str) -> Vec<LocalConsumer> {
        let mut v: Vec<LocalConsumer> = self
            .consumers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|c| matches(&c.topic, topic))
            .cloned()
            .collect();
        v.sort_by_key(|c| c.id);
        v
    }

    pub fn add_producer(&self, p: BoundProducer) {
        self.producers.send_modify(|v| v.push(p));
    }

    pub fn watch_producers(&self) -> watch::Receiver<Vec<BoundProducer>> {
        self.producers.subscribe()
    }

    /// Producers are closing: peers leaving from now on is the end of the run.
    pub fn set_closing(&self) {
        self.closing.store(true, Ordering::Relaxed);
    }

    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Relaxed)
    }
}

/// What every client of a brokerless run shares.
pub(crate) struct Shared {
    pub opts: Options,
    pub plan: Amqp10Plan,
    pub events: EventSink,
    pub timeout: Duration,
    pub registry: Registry,
    seq: AtomicU64,
}

impl Shared {
    /// A container id unique to this client.
    pub fn container_id(&self, role: &str, id: u32) -> String {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        format!("msgbench-p2p-{role}{id}-{}-{n}", std::process::id())
    }

    /// Time for one client's setup: a little less than the runner's connect timeout, so the
    /// driver's error (which says what was missing) comes first.
    pub fn budget(&self) -> Duration {
        self.timeout.mul_f64(0.9)
    }

    /// How a listening client answers links: a consumer takes senders; a producer, receivers
    /// of the addresses of `topics` (its own).
    pub fn serving(&self, takes_senders: bool, meta: bool, topics: &[String]) -> Serving {
        Serving {
            takes_senders,
            credit: self.plan.credit,
            settled: self.plan.settled,
            meta,
            sends: topics.iter().map(|t| self.plan.address_of(t)).collect(),
        }
    }
}

/// The brokerless AMQP 1.0 driver (see the module docs).
pub struct P2pDriver(std::sync::Arc<Shared>);

impl P2pDriver {
    /// A driver for a brokerless URL ([`is_brokerless`]); `connect_timeout` bounds each
    /// client's setup and is how long a send waits for credit before it counts as stalled.
    pub fn new(
        url: &str,
        plan: &Amqp10Plan,
        events: EventSink,
        connect_timeout: Duration,
    ) -> Result<P2pDriver, DriverError> {
        Ok(P2pDriver(std::sync::Arc::new(Shared {
            opts: Options::parse(url)?,
            plan: plan.clone(),
            events,
            timeout: connect_timeout,
            registry: Registry {
                consumers: Mutex::new(Vec::new()),
                producers: watch::Sender::new(Vec::new()),
                closing: AtomicBool::new(false),
            },
            seq: AtomicU64::new(0),
        })))
    }

    /// The parsed URL.
    pub fn options(&self) -> &Options {
        &self.0.opts
    }
}

impl Driver for P2pDriver {
    type Producer = P2pProducer;
    type Consumer = P2pConsumer;
    type Session = NoSession;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            acks: !self.0.plan.settled,
            queue_groups: true,
            request_reply: false,
            responses: false,
            metadata: true,
        }
    }

    async fn producer(&self, spec: &ProducerSpec) -> Result<P2pProducer, DriverError> {
        if spec.request_reply {
            return Err(config(
                "request/reply is not supported by brokerless AMQP 1.0 (amqp10://...?bind=)",
            ));
        }
        producer::start(self.0.clone(), spec).await
    }

    async fn consumer(&self, spec: &ConsumerSpec) -> Result<P2pConsumer, DriverError> {
        if spec.respond {
            return Err(config(
                "request/reply is not supported by brokerless AMQP 1.0 (amqp10://...?bind=)",
            ));
        }
        consumer::start(self.0.clone(), spec).await
    }

    async fn session(&self, _spec: &SessionSpec) -> Result<NoSession, DriverError> {
        Err(config(
            "connection workloads are not supported by brokerless AMQP 1.0: there is no server \
             to hold connections to (drop bind= to use a broker)",
        ))
    }
}

impl msgbench_core::registration::Registered for P2pDriver {
    /// Listed as part of the AMQP 1.0 driver (same name, same section).
    const INFO: msgbench_core::registration::DriverInfo =
        <crate::Amqp10Driver as msgbench_core::registration::Registered>::INFO;

    fn accepts(url: &str) -> bool {
        Self::INFO.answers(url) && is_brokerless(url)
    }

    fn build(
        url: &str,
        plan: &msgbench_core::scenario::RunPlan,
        events: EventSink,
    ) -> Result<Self, DriverError> {
        let amqp10 = plan.drivers.get::<crate::options::Amqp10Section>()?;
        P2pDriver::new(url, &amqp10, events, plan.connect_timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_strictly() {
        let o = Options::parse("amqp10://127.0.0.1:0?bind=consumer").unwrap();
        assert_eq!((o.bind, o.port, o.peers), (Bind::Consumer, 0, 1));
        assert!(o.remote().is_err());
        let o = Options::parse("amqp10://u:p@[::1]:5000/?bind=producer&peers=3").unwrap();
        assert_eq!(
            (o.bind, o.host.as_str(), o.userinfo.as_str()),
            (Bind::Producer, "::1", "u:p@")
        );
        assert_eq!(o.port_of(2).unwrap(), 5002);
        assert_eq!(o.remote().unwrap()[2], "amqp10://u:p@[::1]:5002");
        let e = |u: &str| Options::parse(u).unwrap_err().to_string();
        assert!(e("amqp10://h:1?bind=both").contains("bind=`both`"));
        assert!(e("amqp10://h:1?bind=consumer&colour=red").contains("unknown amqp10 option"));
        assert!(e("amqp10://h?bind=consumer").contains("needs a port"));
        assert!(e("amqp10s://h:1?bind=consumer").contains("no TLS"));
        assert!(e("amqp10://h:1?bind=consumer&bind=producer").contains("twice"));
        assert!(
            Options::parse("amqp10://h:65535?bind=consumer")
                .unwrap()
                .port_of(1)
                .is_err()
        );
        assert!(is_brokerless("amqp10://h:1?peers=2&bind=producer"));
        assert!(!is_brokerless("amqp10://h:1"));
        assert!(matches("a.*", "a.b") && matches("a", "a") && !matches("a", "a1"));
    }
}
