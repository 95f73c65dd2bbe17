//! URL scheme → driver. The one `match` that picks a concrete driver type and runs the generic,
//! monomorphised runner with it.

use anyhow::{Result, bail};
use msgbench_core::driver::{Capabilities, Driver, EventSink, Pipeline};
use msgbench_core::runner::{self, Observer, RunOutcome};
use msgbench_core::scenario::RunPlan;
use msgbench_core::shutdown::Shutdown;
use msgbench_driver_amqp::AmqpDriver;
use msgbench_driver_mem::MemDriver;
use msgbench_driver_mqtt::MqttDriver;
use msgbench_driver_nats::NatsDriver;
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

/// Every driver in this build.
pub fn drivers() -> Vec<DriverInfo> {
    vec![
        DriverInfo {
            name: "mem",
            schemes: &["mem"],
            about: "in-process broker: engine tests, generator ceiling, fault injection (?drop_every=N&dup_every=N&reorder_every=N)",
            caps: Capabilities {
                acks: false,
                queue_groups: true,
                request_reply: true,
            },
        },
        DriverInfo {
            name: "nats",
            schemes: &["nats"],
            about: "NATS core: pub/sub, fan-out, queue groups, request/reply, connection workloads (own lean client; no TLS yet)",
            caps: Capabilities {
                acks: false,
                queue_groups: true,
                request_reply: true,
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
            },
        },
    ]
}

/// Fails with a helpful message when no driver answers to a URL's scheme (the target's, and
/// the consumers' in a pipeline).
pub fn check_scheme(plan: &RunPlan) -> Result<()> {
    for url in [Some(plan.target.as_str()), plan.consume_from.as_deref()]
        .into_iter()
        .flatten()
    {
        let scheme = url.split("://").next().unwrap_or("");
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
            "nats" => {
                let $d = NatsDriver::new(url, $sink.clone(), plan.connect_timeout)?;
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
