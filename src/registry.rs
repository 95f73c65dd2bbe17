//! The drivers of this build, in one list (`each_driver!`), and the dispatch that picks a
//! concrete driver type for a URL and runs the generic, monomorphised runner with it. Every
//! driver crate presents itself through [`Registered`]; adding one is a line in that list
//! (docs/adding-a-driver.md).

use anyhow::{Result, bail};
use msgbench_core::driver::{Driver, EventSink, Pipeline};
use msgbench_core::registration::{DriverInfo, Registered};
use msgbench_core::runner::together::Member;
use msgbench_core::runner::{self, Observer, RunOutcome};
use msgbench_core::scenario::{PlanError, RunPlan, Scenario, SectionSpec};
use msgbench_core::shutdown::Shutdown;
use std::sync::Arc;

/// Calls macro `$then` with its arguments followed by `;` and every registered driver type
/// (`#[cfg]`-gated where the driver is a cargo feature). The one list of drivers.
macro_rules! each_driver {
    ($then:ident ! ( $($args:tt)* )) => {
        $then!( $($args)* ;
            msgbench_driver_mem::MemDriver,
            msgbench_driver_nats::NatsDriver,
            msgbench_driver_nats::JetStreamDriver,
            msgbench_driver_amqp::AmqpDriver,
            msgbench_driver_amqp10::Amqp10Driver,
            msgbench_driver_amqp10::p2p::P2pDriver,
            msgbench_driver_ws::WsDriver,
            msgbench_driver_zmq::ZmqDriver,
            msgbench_driver_http::HttpDriver,
            msgbench_driver_mqtt::MqttDriver,
            msgbench_driver_redis::RedisDriver,
            #[cfg(feature = "kafka")] msgbench_driver_kafka::KafkaDriver,
        )
    };
}

/// `Vec` of every registered type's [`DriverInfo`], in list order.
macro_rules! infos {
    ( ; $( $(#[$m:meta])* $ty:path ),* $(,)? ) => {{
        // Pushes, not vec![]: a #[cfg] can gate each.
        let mut all: Vec<DriverInfo> = Vec::with_capacity(16);
        $( $(#[$m])* all.push(<$ty as Registered>::INFO); )*
        all
    }};
}

/// Checks the options in `$url` with the driver that takes it.
macro_rules! check_url {
    ( $url:expr ; $( $(#[$m:meta])* $ty:path ),* $(,)? ) => {{
        let url: &str = $url;
        let mut checked: Option<Result<(), msgbench_core::driver::DriverError>> = None;
        $( $(#[$m])* if checked.is_none() && <$ty as Registered>::accepts(url) {
            checked = Some(<$ty as Registered>::check_url(url));
        } )*
        checked
    }};
}

/// Builds the driver for `$url` as `$d` and evaluates `$body` with it: one monomorphised
/// runner per driver (per pair of drivers in a pipeline).
macro_rules! dispatch {
    ( $url:expr, $plan:expr, $sink:expr, |$d:ident| $body:expr ; $( $(#[$m:meta])* $ty:path ),* $(,)? ) => {{
        let url: &str = $url;
        let plan: &RunPlan = $plan;
        loop {
            $( $(#[$m])* if <$ty as Registered>::accepts(url) {
                // What a driver cannot be built from is what it was given: a usage error.
                let $d = <$ty as Registered>::build(url, plan, $sink.clone()).map_err(|e| {
                    match e {
                        msgbench_core::driver::DriverError::Config(_) => {
                            crate::cmd::verdict::usage(e.into())
                        }
                        e => e.into(),
                    }
                })?;
                break $body;
            } )*
            bail!("no driver for `{}`", msgbench_core::registration::scheme(url));
        }
    }};
}

macro_rules! with_driver {
    ($($args:tt)*) => { each_driver!(dispatch!($($args)*)) };
}

/// What `msgbench drivers` lists: every driver of this build, once (the AMQP 1.0 driver has two
/// types, with and without a broker, under one entry).
pub fn drivers() -> Vec<DriverInfo> {
    let mut all: Vec<DriverInfo> = each_driver!(infos!());
    let mut seen = std::collections::HashSet::new();
    all.retain(|d| seen.insert(d.name));
    all
}

/// The drivers' scenario sections, including those of drivers that are cargo features not in
/// this build (their options still parse, so one scenario file serves every build).
pub fn sections() -> Vec<SectionSpec> {
    #[allow(unused_mut)] // with the Kafka driver built in, its section is among the drivers'
    let mut all: Vec<SectionSpec> = drivers().iter().filter_map(|d| d.section).collect();
    #[cfg(not(feature = "kafka"))]
    all.extend(msgbench_driver_kafka::INFO.section);
    all
}

/// Every URL scheme msgbench has a driver for, in this build or behind a cargo feature (the
/// Kafka driver): what docs/ARCHITECTURE.md must name (`docs_check`).
#[cfg(test)]
pub(crate) fn all_schemes() -> Vec<&'static str> {
    let mut all: Vec<&'static str> = drivers()
        .iter()
        .flat_map(|d| d.schemes.iter().copied())
        .collect();
    all.extend(msgbench_driver_kafka::INFO.schemes);
    all.sort_unstable();
    all.dedup();
    all
}

/// Reads a scenario file, with the drivers' sections.
pub fn scenario_file(path: &std::path::Path) -> Result<Scenario> {
    Ok(Scenario::from_file(path, &sections())?)
}

/// Resolves the drivers' sections of `s` into `plan` (defaults for absent ones): after
/// [`msgbench_core::scenario::resolve`], before anything is built.
pub fn resolve_drivers(s: &Scenario, plan: &mut RunPlan) -> Result<(), PlanError> {
    for spec in sections() {
        (spec.resolve)(&s.drivers, plan)?;
    }
    Ok(())
}

/// `resolve` and [`resolve_drivers`]: the whole plan of a scenario.
pub fn resolve(s: &Scenario, run_id: u32) -> Result<RunPlan, PlanError> {
    let mut plan = msgbench_core::scenario::resolve(s, run_id)?;
    resolve_drivers(s, &mut plan)?;
    Ok(plan)
}

/// Every port in `url`'s authority (`host:port`, comma-separated hosts, `[v6]:port`) is a
/// number from 0 to 65535; a port with a `{...}` template is the driver's to expand.
fn check_ports(url: &str) -> Result<()> {
    let Some((_, rest)) = url.split_once("://") else {
        return Ok(());
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let hosts = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    for host in hosts.split(',') {
        let port = match host.strip_prefix('[') {
            Some(v6) => v6.split_once("]:").map(|(_, p)| p),
            None => host.rsplit_once(':').map(|(_, p)| p),
        };
        if let Some(p) = port
            && !p.is_empty()
            && !p.contains('{')
            && p.parse::<u16>().is_err()
        {
            bail!(
                "`{}`: `{p}` is not a port number (0 to 65535)",
                msgbench_core::redact::url(url)
            );
        }
    }
    Ok(())
}

/// Fails with a helpful message when no driver answers to a URL's scheme (the target's, and
/// the consumers' in a pipeline).
pub fn check_scheme(plan: &RunPlan) -> Result<()> {
    for url in [Some(plan.target.as_str()), plan.consume_from.as_deref()]
        .into_iter()
        .flatten()
    {
        let scheme = msgbench_core::registration::scheme(url);
        if cfg!(not(feature = "kafka")) && msgbench_driver_kafka::INFO.answers(url) {
            bail!(
                "`{scheme}://` needs the Kafka driver, which builds librdkafka from source: build with `--features kafka` (Debian: apt install build-essential pkg-config libssl-dev zlib1g-dev)"
            );
        }
        if !drivers().iter().any(|d| d.answers(url)) {
            let known: Vec<String> = drivers()
                .iter()
                .flat_map(|d| d.schemes.iter().map(|s| format!("{s}://")))
                .collect();
            bail!(
                "no driver for `{scheme}://` in this build (available: {})",
                known.join(", ")
            );
        }
        // Options in the URL are checked before anything connects: a wrong one is the user's.
        check_ports(url)?;
        if let Some(Err(e)) = each_driver!(check_url!(url)) {
            return Err(e.into());
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
    member: Option<Member>,
) -> Result<RunOutcome> {
    Ok(runner::run_member(Arc::new(d), plan, events, observer, shutdown, member).await?)
}

/// Runs `plan` with the driver its URL names (two drivers for a pipeline); `member`: its
/// group's handle in a run with groups.
pub async fn run_plan(
    plan: &RunPlan,
    observer: &mut dyn Observer,
    shutdown: Shutdown,
    member: Option<Member>,
) -> Result<RunOutcome> {
    check_scheme(plan)?;
    let (sink, events) = EventSink::channel();
    match plan.consume_from.as_deref() {
        None => with_driver!(&plan.target, plan, sink, |d| {
            go(d, plan, events, observer, shutdown, member).await
        }),
        Some(to) => with_driver!(&plan.target, plan, sink, |p| {
            with_driver!(to, plan, sink, |c| {
                go(
                    Pipeline::new(p, c),
                    plan,
                    events,
                    observer,
                    shutdown,
                    member,
                )
                .await
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
        lean: false,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// How many registered driver types take `$url`.
    macro_rules! accepting {
        ( $url:expr ; $( $(#[$m:meta])* $ty:path ),* $(,)? ) => {{
            let url: &str = $url;
            let mut n = 0;
            $( $(#[$m])* if <$ty as Registered>::accepts(url) { n += 1; } )*
            n
        }};
    }

    /// Every scheme `msgbench drivers` lists is taken by exactly one driver type (AMQP 1.0's
    /// two split it by `?bind=`), and a scheme no driver has by none.
    #[test]
    fn every_url_has_exactly_one_driver() {
        for d in drivers() {
            for s in d.schemes {
                assert_eq!(each_driver!(accepting!(&format!("{s}://h:1"))), 1, "{s}");
            }
        }
        assert_eq!(each_driver!(accepting!("amqp10://h:1?bind=consumer")), 1);
        assert_eq!(each_driver!(accepting!("gopher://h:1")), 0);
        let mut sections: Vec<&str> = sections().iter().map(|s| s.name).collect();
        sections.sort_unstable();
        assert_eq!(sections, ["amqp", "amqp10", "http", "kafka", "ws"]);
    }
}
