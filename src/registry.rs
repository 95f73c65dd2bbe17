//! URL scheme → driver. The one `match` that picks a concrete driver type and runs the generic,
//! monomorphised runner with it.

use anyhow::{Result, bail};
use msgbench_core::driver::{Capabilities, Driver, EventSink, Pipeline};
use msgbench_core::runner::{self, Observer, RunOutcome};
use msgbench_core::scenario::RunPlan;
use msgbench_core::shutdown::Shutdown;
use msgbench_driver_amqp::AmqpDriver;
use msgbench_driver_amqp10::Amqp10Driver;
use msgbench_driver_amqp10::p2p::{P2pDriver, is_brokerless};
use msgbench_driver_http::{HttpDriver, HttpOptions};
#[cfg(feature = "kafka")]
use msgbench_driver_kafka::KafkaDriver;
use msgbench_driver_mem::MemDriver;
use msgbench_driver_mqtt::MqttDriver;
use msgbench_driver_nats::{JetStreamDriver, NatsDriver};
use msgbench_driver_redis::RedisDriver;
use msgbench_driver_ws::{WsDriver, WsOptions};
use msgbench_driver_zmq::ZmqDriver;
use std::sync::Arc;

/// What `msgbench drivers` lists.
pub struct DriverInfo {
    /// Driver name.
    pub name: &'static str,
    /// URL schemes it answers to.
    pub schemes: &'static [&'static str],
    /// One line about it.
    pub about: &'static str,
    /// What it supports.
    pub caps: Capabilities,
}

/// The Kafka driver's schemes: known in every build, so that a build without the driver (it is
/// the cargo feature `kafka`) can say how to get it rather than "no driver".
const KAFKA_SCHEMES: &[&str] = &["kafka", "kafka+ssl"];

/// Every URL scheme msgbench has a driver for, in this build or behind a cargo feature (the
/// Kafka driver): what docs/ARCHITECTURE.md must name (`docs_check`).
#[cfg(test)]
pub(crate) fn all_schemes() -> Vec<&'static str> {
    let mut all: Vec<&'static str> = drivers()
        .iter()
        .flat_map(|d| d.schemes.iter().copied())
        .collect();
    all.extend(KAFKA_SCHEMES);
    all.sort_unstable();
    all.dedup();
    all
}

/// Every driver in this build.
pub fn drivers() -> Vec<DriverInfo> {
    #[allow(unused_mut)]
    let mut all = vec![
        DriverInfo {
            name: "mem",
            schemes: &["mem"],
            about: "in-process broker: engine tests, generator ceiling, fault injection (?drop_every=N&dup_every=N&reorder_every=N)",
            caps: Capabilities {
                acks: false,
                queue_groups: true,
                request_reply: true,
                responses: false,
                metadata: false,
            },
        },
        DriverInfo {
            name: "nats",
            schemes: &["nats", "tls", "nats+tls"],
            about: "NATS core: pub/sub, fan-out, queue groups, request/reply, connection workloads, TLS (own lean client)",
            caps: Capabilities {
                acks: false,
                queue_groups: true,
                request_reply: true,
                responses: false,
                metadata: false,
            },
        },
        DriverInfo {
            name: "nats-jetstream",
            schemes: &["nats+js", "nats+js+tls"],
            about: "NATS JetStream: streams (file/memory), publishes confirmed by PubAcks (acks; --max-in-flight = async publish window), pull (batched fetch) and push consumers, durable or ephemeral, explicit acks, redeliveries marked, TLS; nats+js://HOST:PORT?stream=NAME&storage=file|memory&consumer=pull|push&durable=NAME&batch=N&create=1|0&max_bytes=SIZE&replicas=N&ack_pending=N&ack_wait=D&deliver=new|all&expires=D (own client)",
            caps: Capabilities {
                acks: true,
                queue_groups: true,
                request_reply: false,
                responses: false,
                metadata: false,
            },
        },
        DriverInfo {
            name: "amqp",
            schemes: &["amqp", "amqps"],
            // acks: with --confirm only (the plan decides).
            about: "AMQP 0-9-1 (RabbitMQ): exchanges, fan-out and shared queues, confirms, prefetch, manual/auto acks, TLS, connection workloads (own lean client on amq-protocol)",
            caps: Capabilities {
                acks: true,
                queue_groups: true,
                request_reply: false,
                responses: false,
                metadata: false,
            },
        },
        DriverInfo {
            name: "amqp10",
            schemes: &["amqp10", "amqp10s"],
            // acks: unless [amqp10] settled = true (the plan decides).
            about: "AMQP 1.0 (Artemis, RabbitMQ's AMQP 1.0 plugin, Qpid, ECP endpoints): queues and topics by address and capabilities ([amqp10]), pipelined unsettled sends (acks = broker outcomes) or pre-settled, credit, accept/release/reject, message ids and application properties, SASL PLAIN/ANONYMOUS, TLS, reconnection, connection workloads (own AMQP 1.0 implementation); brokerless with ?bind=consumer|producer&peers=N (either side listens, port 0 picks free ports; fan-out, queue groups, credit)",
            caps: Capabilities {
                acks: true,
                queue_groups: true,
                request_reply: false,
                responses: false,
                metadata: true,
            },
        },
        DriverInfo {
            name: "ws",
            schemes: &["ws", "wss"],
            about: "WebSocket: binary messages out, text or binary in, fan-out to many clients, {i}/{topic} in the URL, --hello subscribe message, ping/pong, close codes, TLS (own lean client); usually the consumer end of a pipeline (--consume-from ws://...)",
            caps: Capabilities {
                acks: false,
                queue_groups: false,
                request_reply: false,
                responses: false,
                metadata: false,
            },
        },
        DriverInfo {
            name: "zmq",
            schemes: &["zmq"],
            about: "ZeroMQ, brokerless: PUSH/PULL (competing consumers) and PUB/SUB (fan-out), either side binds; zmq://HOST:PORT?pattern=pushpull|pubsub&bind=consumer|producer&peers=N&sndhwm=N&onhwm=wait|drop (own ZMTP 3, libzmq-compatible)",
            caps: Capabilities {
                acks: false,
                queue_groups: true,
                request_reply: false,
                responses: false,
                metadata: false,
            },
        },
        DriverInfo {
            name: "http",
            schemes: &["http", "https"],
            about: "HTTP/1.1 keep-alive (msgbench's own allocation-free client) and HTTP/2 (h2c, or ALPN h2 over TLS; hyper): a producer is a connection, a response its request's ack (2xx/3xx ok), status codes counted, TLS; no consumers",
            caps: Capabilities {
                acks: true,
                queue_groups: false,
                request_reply: false,
                responses: true,
                metadata: false,
            },
        },
        DriverInfo {
            name: "mqtt",
            schemes: &["mqtt", "mqtts"],
            // acks: at QoS 1 and 2 only (the plan decides).
            about: "MQTT 3.1.1 and 5: QoS 0/1/2 (acks at QoS 1/2), wildcards, $share groups, retained, persistent sessions, TLS, connection workloads (own lean client)",
            caps: Capabilities {
                acks: true,
                queue_groups: true,
                request_reply: false,
                responses: false,
                metadata: false,
            },
        },
        DriverInfo {
            name: "redis",
            schemes: &["redis", "rediss"],
            // queue groups: in streams mode only (the URL decides).
            about: "Redis pub/sub (PUBLISH, SUBSCRIBE/PSUBSCRIBE) and Streams (?mode=streams: XADD with ?maxlen=N trimming, XREAD fan-out, consumer groups with XREADGROUP and XACK); every reply is the message's ack; /DB, user:pass@, TLS (rediss://), connection workloads (own lean RESP2 client)",
            caps: Capabilities {
                acks: true,
                queue_groups: true,
                request_reply: false,
                responses: false,
                metadata: false,
            },
        },
    ];
    // Kafka links librdkafka (Debian: librdkafka-dev): built with `--features kafka`.
    #[cfg(feature = "kafka")]
    all.push(
    DriverInfo {
        name: "kafka",
        schemes: KAFKA_SCHEMES,
        about: "Apache Kafka (librdkafka): acks 0/1/all, idempotence, linger, batch size, compression, round-robin/keyed/sticky partitioning, fan-out and group consumers, latest/earliest, commit modes, topic creation, integrity per partition, TLS",
        caps: Capabilities {
            acks: true,
            queue_groups: true,
            request_reply: false,
            responses: false,
            metadata: false,
        },
    },
    );
    all
}

/// Fails with a helpful message when no driver answers to a URL's scheme (the target's, and
/// the consumers' in a pipeline).
pub fn check_scheme(plan: &RunPlan) -> Result<()> {
    for url in [Some(plan.target.as_str()), plan.consume_from.as_deref()]
        .into_iter()
        .flatten()
    {
        let scheme = url.split("://").next().unwrap_or("");
        if cfg!(not(feature = "kafka")) && KAFKA_SCHEMES.contains(&scheme) {
            bail!(
                "`{scheme}://` needs the Kafka driver, which links librdkafka: build with `--features kafka` (Debian: apt install librdkafka-dev)"
            );
        }
        if !drivers().iter().any(|d| d.schemes.contains(&scheme)) {
            let known: Vec<String> = drivers()
                .iter()
                .flat_map(|d| d.schemes.iter().map(|s| format!("{s}://")))
                .collect();
            bail!(
                "no driver for `{scheme}://` in this build (available: {})",
                known.join(", ")
            );
        }
    }
    // Options in the URL are checked here, before anything connects: a wrong one is the user's.
    for url in [Some(plan.target.as_str()), plan.consume_from.as_deref()]
        .into_iter()
        .flatten()
        .filter(|u| u.starts_with("nats+js"))
    {
        msgbench_driver_nats::js::options::JsOptions::parse(url).map_err(|e| anyhow::anyhow!(e))?;
    }
    if let Some(c) = plan.consume_from.as_deref()
        && (plan.scheme() == "mem" || c.starts_with("mem://"))
    {
        bail!("mem:// is an in-process broker of one run: it cannot be one end of a pipeline");
    }
    Ok(())
}

async fn go<D: Driver>(
    d: D,
    plan: &RunPlan,
    events: tokio::sync::mpsc::UnboundedReceiver<msgbench_core::driver::DriverEvent>,
    observer: &mut dyn Observer,
    shutdown: Shutdown,
) -> Result<RunOutcome> {
    Ok(runner::run(Arc::new(d), plan, events, observer, shutdown).await?)
}

/// Builds the driver for `$url` as `$d` and evaluates `$body` with it: one monomorphised
/// runner per driver (per pair of drivers in a pipeline).
macro_rules! with_driver {
    ($url:expr, $plan:expr, $sink:expr, |$d:ident| $body:expr) => {{
        let url: &str = $url;
        let plan: &RunPlan = $plan;
        match url.split("://").next().unwrap_or("") {
            "mem" => {
                let $d = MemDriver::from_url(url)?;
                $body
            }
            "nats" | "tls" | "nats+tls" => {
                let $d = NatsDriver::new(url, &plan.tls, $sink.clone(), plan.connect_timeout)?
                    .with_keep_alive(plan.client.keep_alive);
                $body
            }
            "nats+js" | "nats+js+tls" => {
                let $d = JetStreamDriver::new(url, &plan.tls, $sink.clone(), plan.connect_timeout)?
                    .with_keep_alive(plan.client.keep_alive);
                $body
            }
            "amqp" | "amqps" => {
                let $d = AmqpDriver::new(
                    url,
                    &plan.amqp,
                    &plan.client,
                    &plan.tls,
                    plan.run_id,
                    $sink.clone(),
                    plan.connect_timeout,
                )?;
                $body
            }
            #[cfg(feature = "kafka")]
            "kafka" | "kafka+ssl" => {
                let $d = KafkaDriver::new(
                    url,
                    &plan.kafka,
                    &plan.tls,
                    plan.run_id,
                    $sink.clone(),
                    plan.connect_timeout,
                )?
                .with_keep_alive(plan.client.keep_alive);
                $body
            }
            "zmq" => {
                let $d = ZmqDriver::new(url, $sink.clone(), plan.connect_timeout)?;
                $body
            }
            "amqp10" | "amqp10s" if is_brokerless(url) => {
                let $d = P2pDriver::new(url, &plan.amqp10, $sink.clone(), plan.connect_timeout)?;
                $body
            }
            "amqp10" | "amqp10s" => {
                let $d = Amqp10Driver::new(
                    url,
                    &plan.amqp10,
                    &plan.tls,
                    $sink.clone(),
                    plan.connect_timeout,
                )?
                .with_pipelined_handshake(plan.client.pipeline_handshake)
                .with_keep_alive(plan.client.keep_alive);
                $body
            }
            "http" | "https" => {
                let $d = HttpDriver::new(
                    url,
                    HttpOptions {
                        method: plan.http.method.clone(),
                        headers: plan.http.headers.clone(),
                        http2: plan.http.http2,
                        path: None,
                    },
                    &plan.tls,
                    $sink.clone(),
                    plan.connect_timeout,
                )?;
                $body
            }
            "ws" | "wss" => {
                let $d = WsDriver::new(
                    url,
                    WsOptions {
                        subscribe: plan.client.hello.clone(),
                        text: plan.payload.template.is_some(),
                    },
                    &plan.client,
                    &plan.tls,
                    plan.run_id,
                    $sink.clone(),
                    plan.connect_timeout,
                )?;
                $body
            }
            "redis" | "rediss" => {
                let $d = RedisDriver::new(url, &plan.tls, $sink.clone(), plan.connect_timeout)?
                    .with_keep_alive(plan.client.keep_alive);
                $body
            }
            "mqtt" | "mqtts" => {
                let $d = MqttDriver::new(
                    url,
                    &plan.client,
                    &plan.tls,
                    plan.run_id,
                    $sink.clone(),
                    plan.connect_timeout,
                )?;
                $body
            }
            other => bail!("no driver for `{other}://`"),
        }
    }};
}

/// Runs `plan` with the driver its URL names (two drivers for a pipeline).
pub async fn run_plan(
    plan: &RunPlan,
    observer: &mut dyn Observer,
    shutdown: Shutdown,
) -> Result<RunOutcome> {
    check_scheme(plan)?;
    let (sink, events) = EventSink::channel();
    match plan.consume_from.as_deref() {
        None => with_driver!(&plan.target, plan, sink, |d| {
            go(d, plan, events, observer, shutdown).await
        }),
        Some(to) => with_driver!(&plan.target, plan, sink, |p| {
            with_driver!(to, plan, sink, |c| {
                go(Pipeline::new(p, c), plan, events, observer, shutdown).await
            })
        }),
    }
}

/// Consumes `topic` from the system `plan.target` names and hands every message to `each` until
/// `stop` resolves (`msgbench serve ws-broadcast --from`). With `meta`, each delivery's
/// metadata is filled (`Meta::topic`: the routing key, subject or topic it was published on,
/// for the drivers that know it). Says on stderr once it consumes. Reconnection is the
/// driver's.
pub async fn relay(
    plan: &RunPlan,
    topic: &str,
    meta: bool,
    mut each: impl FnMut(&msgbench_core::driver::Delivery) + Send,
    stop: impl std::future::Future<Output = ()> + Send,
) -> Result<()> {
    use msgbench_core::driver::{Consumer, ConsumerSpec};
    check_scheme(plan)?;
    let (sink, mut events) = EventSink::channel();
    let spec = ConsumerSpec {
        id: 0,
        topic: topic.to_string(),
        group: None,
        respond: false,
        meta,
        target: None,
        source: None,
        fd_free: false,
    };
    let mut stop = std::pin::pin!(stop);
    with_driver!(&plan.target, plan, sink, |d| {
        let mut c = d
            .consumer(&spec)
            .await
            .map_err(|e| anyhow::anyhow!("--from {}: {e}", plan.redacted().target))?;
        eprintln!(
            "msgbench serve: --from {}: consuming `{topic}`",
            plan.redacted().target
        );
        loop {
            tokio::select! {
                () = &mut stop => break,
                Some(ev) = events.recv() => eprintln!("msgbench serve: --from: {}", ev.detail),
                r = c.recv() => match r {
                    Ok(Some(m)) => each(&m),
                    Ok(None) => bail!("--from {}: the subscription ended", plan.redacted().target),
                    Err(e) => eprintln!("msgbench serve: --from: {e}"),
                },
            }
        }
        let _ = c.close().await;
        Ok(())
    })
}
