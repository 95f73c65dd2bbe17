//! The one place where command-line flags and a scenario file become a validated `RunPlan`.

use super::args::{ContentArg, EcpArgs, IoArg, PacingArg, RunArgs, SegmentArgs, StampArg};
use anyhow::{Context, Result, anyhow, bail};
use msgbench_core::pacer::{RateShape, Step};
use msgbench_core::payload::{Content, StampFormat};
use msgbench_core::registration::CommonFlags;
use msgbench_core::scenario::groups;
use msgbench_core::scenario::plan::{IoMode, Pacing};
use msgbench_core::scenario::segment::{INDEX_ENV, Split};
use msgbench_core::scenario::{
    Arrival, ConnectionMode, ConsumerMode, RateSpec, RunPlan, Scenario, Segment, parse_start_at,
    segment_run_id,
};
use msgbench_core::units::{parse_count, parse_duration};
use msgbench_driver_http::options::HttpSection;
use std::path::Path;

/// Settings of the no-argument demo run (the README's first command).
pub const DEMO_RATE: f64 = 10_000.0;

/// The demo's target until the embedded broker has a port (`cmd::run` replaces it).
pub const DEMO_TARGET: &str = "mqtt://embedded";

/// Whether `input` names a scenario file rather than a URL.
pub fn is_scenario_path(input: &str) -> bool {
    !input.contains("://") && (input.ends_with(".toml") || Path::new(input).is_file())
}

/// Builds the plan for a command that runs one plan (`msgbench search`): a scenario with groups
/// is refused. Returns it with a flag saying whether this is the demo (no target anywhere).
pub fn build(args: &RunArgs, run_id: u32) -> Result<(RunPlan, bool)> {
    let (plan, groups, demo) = build_run(args, run_id)?;
    if !groups.is_empty() {
        bail!("a scenario with [[groups]] runs with `msgbench run` only");
    }
    Ok((plan, demo))
}

/// Builds the plan for `msgbench run`: the run's plan, each group's plan when the scenario has
/// `[[groups]]` (the run's plan is then the first group's, named after the run), and whether
/// this is the demo (no target anywhere).
pub fn build_run(args: &RunArgs, run_id: u32) -> Result<(RunPlan, Vec<RunPlan>, bool)> {
    let mut file = Scenario::default();
    let mut target = args.target.clone();
    if let Some(input) = &args.input {
        if is_scenario_path(input) {
            file = crate::registry::scenario_file(Path::new(input))?;
        } else if input.contains("://") {
            if target.is_some() {
                bail!("a target was given twice: `{input}` and --target");
            }
            target = Some(input.clone());
        } else {
            bail!(
                "`{input}` is neither a target URL (e.g. nats://127.0.0.1:4222, mem://) nor a scenario file (*.toml)"
            );
        }
    }
    match &args.preset {
        Some(name) => file = preset(name, args)?.overlay(file),
        None if args.ecp != EcpArgs::default() => {
            bail!(
                "the ECP flags (--ecp-mode, --outbox-url...) belong to the ecp preset: add --preset ecp"
            )
        }
        None => {}
    }
    let demo =
        target.is_none() && file.target.is_none() && file.groups.iter().all(|g| g.target.is_none());
    let mut over = flags_to_scenario(args)?;
    over.target = target;
    if demo {
        // A newcomer's first run: short, paced, and on the embedded MQTT broker.
        let mut base = Scenario {
            name: Some("demo (embedded MQTT broker)".into()),
            target: Some(DEMO_TARGET.into()),
            ..Default::default()
        };
        base.producers.rate = Some(RateSpec::PerSecond(DEMO_RATE));
        base.phases.duration = Some("5s".into());
        file = base.overlay(file);
    }
    let mut scenario = file.overlay(over);
    if !scenario.groups.is_empty() {
        let (plan, groups) = build_groups(&scenario, args, run_id)?;
        return Ok((plan, groups, demo));
    }
    target_defaults(&mut scenario)?;
    let mut plan =
        crate::registry::resolve(&scenario, run_id).map_err(|e| anyhow!("invalid run: {e}"))?;
    apply_segment(&mut plan, &args.segment)?;
    msgbench_report::verdict::parse_all(&plan.thresholds).map_err(|e| anyhow!("{e}"))?;
    Ok((plan, Vec::new(), demo))
}

/// The plans of a scenario with groups: each group's (the top level, flags included, under the
/// group's own keys), linked into one run; and the run's plan (the first group's, named after
/// the run; the thresholds are the top level's, every group's alike).
fn build_groups(
    scenario: &Scenario,
    args: &RunArgs,
    run_id: u32,
) -> Result<(RunPlan, Vec<RunPlan>)> {
    if args.segment != SegmentArgs::default() {
        bail!("a run with groups cannot be segmented (--segment, --start-at, --run-id)");
    }
    let mut plans = Vec::new();
    for mut g in groups::expand(scenario).map_err(|e| anyhow!("invalid run: {e}"))? {
        let name = g.name.clone().unwrap_or_default();
        target_defaults(&mut g).map_err(|e| anyhow!("invalid run: group `{name}`: {e}"))?;
        plans.push(
            crate::registry::resolve(&g, run_id)
                .map_err(|e| anyhow!("invalid run: group `{name}`: {e}"))?,
        );
    }
    groups::link(&mut plans).map_err(|e| anyhow!("invalid run: {e}"))?;
    // The run's plan is the first message group's (the live table shows messages), or the
    // first group's when all hold connections.
    let first = plans
        .iter()
        .position(|p| p.connections.is_none())
        .unwrap_or(0);
    let mut plan = plans[first].clone();
    plan.group = None;
    plan.name = scenario.name.clone().unwrap_or_else(|| {
        let names: Vec<&str> = plans.iter().map(|p| p.name.as_str()).collect();
        format!("groups {}", names.join(" + "))
    });
    // The run's threads are every group's (a group with none of its own uses the shared pool).
    plan.workers = if plans.iter().all(|p| p.workers > 0) {
        plans.iter().map(|p| p.workers).sum()
    } else {
        0
    };
    msgbench_report::verdict::parse_all(&plan.thresholds).map_err(|e| anyhow!("{e}"))?;
    Ok((plan, plans))
}

/// `--segment`, `--start-at`, `--run-id`: which slice of the run this process runs, when the
/// load is released, and the run id every segment shares.
fn apply_segment(plan: &mut RunPlan, a: &SegmentArgs) -> Result<()> {
    if let Some(s) = &a.segment {
        let env = std::env::var(INDEX_ENV).ok();
        let seg = Segment::parse(s, env.as_deref()).map_err(|e| anyhow!("--segment {e}"))?;
        if plan.tracking.is_some() {
            bail!(
                "--segment: multi-stage tracking ([[stages]]) follows each message through one process and cannot be split; run it unsegmented"
            );
        }
        if seg.split == Split::Roles {
            if plan.connections.is_some() {
                bail!(
                    "--segment {}: a connection workload has no producers and consumers to split by role; split it with --segment I/N",
                    seg.label()
                );
            }
            if plan.consumers() == 0 {
                bail!(
                    "--segment {}: the run has no consumers (-c 0), so there is nothing to split by role; run it unsegmented",
                    seg.label()
                );
            }
        }
        plan.segment = Some(seg);
    }
    if let Some(t) = &a.start_at {
        plan.start_at_unix_ms = Some(parse_start_at(t).map_err(|e| anyhow!("--start-at {e}"))?);
    }
    if let Some(id) = a.run_id {
        plan.run_id = id;
    } else if plan.segment.is_some() {
        let json = serde_json::to_value(plan.redacted()).context("encoding the plan")?;
        plan.run_id = segment_run_id(&json, plan.start_at_unix_ms);
    }
    Ok(())
}

/// The scenario layer of `--preset NAME`.
fn preset(name: &str, args: &RunArgs) -> Result<Scenario> {
    use msgbench_core::presets::ecp::{EcpOptions, scenario};
    if name != "ecp" {
        bail!("no preset `{name}` (available: ecp)");
    }
    let e = &args.ecp;
    let d = EcpOptions::default();
    let outbox_url = e.outbox_url.clone().unwrap_or(d.outbox_url);
    let o = EcpOptions {
        mode: match &e.ecp_mode {
            Some(m) => m.parse().map_err(|m: String| anyhow!("--ecp-mode {m}"))?,
            None => d.mode,
        },
        inbox_url: e.inbox_url.clone().unwrap_or_else(|| outbox_url.clone()),
        outbox_url,
        receiver: e.receiver_code.clone().unwrap_or(d.receiver),
        message_type: e.message_type.clone().unwrap_or(d.message_type),
        outbox: e.queues.outbox_queue.clone().unwrap_or(d.outbox),
        reply: e.queues.reply_queue.clone().unwrap_or(d.reply),
        send_event: e.queues.send_event_queue.clone().unwrap_or(d.send_event),
        inbox: e.queues.inbox_queue.clone().unwrap_or(d.inbox),
        clean: !e.no_clean,
    };
    Ok(scenario(&o))
}

/// HTTP targets have no consumers, and an HTTP/1.1 connection carries one request at a time:
/// unless told otherwise, such runs get no consumers and a window of 1 per producer
/// (concurrency comes from --producers, or from --http2 streams). A WebSocket echo server
/// (`--echo`) is answered the same way: its producers' responses are the echoes. Echo mode on
/// any other target is refused: it would be ignored, and the run would measure something else.
fn target_defaults(s: &mut Scenario) -> Result<()> {
    let echo = s
        .drivers
        .get::<msgbench_driver_ws::options::WsSection>()
        .ok()
        .and_then(|w| w.echo)
        == Some(true);
    let t = s.target.as_deref().unwrap_or("");
    if t.starts_with("ws://") || t.starts_with("wss://") {
        if echo {
            if s.consumers.target.is_none() {
                s.consumers.per_topic.get_or_insert(0);
            }
            s.producers.max_in_flight.get_or_insert(1);
        }
        return Ok(());
    }
    if echo {
        let what = match t.split_once("://") {
            Some((scheme, _)) => format!("{scheme}://"),
            None => "the embedded broker".to_string(),
        };
        bail!(
            "--echo (ws.echo) is for WebSocket echo servers: the target must be ws:// or wss://, not {what}"
        );
    }
    if !(t.starts_with("http://") || t.starts_with("https://")) {
        return Ok(());
    }
    if s.consumers.target.is_none() {
        s.consumers.per_topic.get_or_insert(0);
    }
    let http2 = s.drivers.get::<HttpSection>().ok().and_then(|h| h.http2);
    if http2 != Some(true) {
        s.producers.max_in_flight.get_or_insert(1);
    }
    Ok(())
}

/// Flags as a scenario layer: only what was given is set.
#[allow(clippy::field_reassign_with_default)] // one flag per line reads best
fn flags_to_scenario(a: &RunArgs) -> Result<Scenario> {
    let mut s = Scenario::default();
    s.name = a.name.clone();
    if !a.tag.is_empty() {
        s.tags = Some(a.tag.clone());
    }
    s.topics.count = a.topics;
    s.topics.pattern = a.topic.clone();
    s.topics.popularity = a.topic_popularity.clone();
    if !a.verdict.threshold.is_empty() {
        s.thresholds = Some(msgbench_core::scenario::ThresholdsSection(
            a.verdict.threshold.clone(),
        ));
    }
    s.output.threshold_abort = a.threshold_abort.then_some(true);
    if !a.redact_header.is_empty() {
        s.output.redact_headers = Some(a.redact_header.clone());
    }
    s.producers.per_topic = a.producers;
    s.consumers.per_topic = a.consumers;
    if let Some(g) = &a.queue_group {
        s.consumers.mode = Some(ConsumerMode::Queue);
        s.consumers.group = Some(g.clone());
    }
    let rate = a
        .rate
        .as_deref()
        .map(parse_count)
        .transpose()
        .map_err(|e| anyhow!("--rate: {e}"))?;
    s.producers.rate = match (&a.rate_shape, rate) {
        (None, None) => None,
        (None, Some(r)) => Some(RateSpec::PerSecond(r)),
        (Some(shape), r) => Some(RateSpec::Shape(
            parse_rate_shape(shape, r).context("--rate-shape")?,
        )),
    };
    s.producers.size = a.size.clone();
    s.producers.stamp = a.stamp.map(|f| match f {
        StampArg::Binary => StampFormat::Binary,
        StampArg::Text => StampFormat::Text,
    });
    s.producers.content = a.content.map(|c| match c {
        ContentArg::Random => Content::Random,
        ContentArg::Zeros => Content::Zeros,
        ContentArg::Text => Content::Text,
    });
    match a.payload.as_deref() {
        Some(file) if file.starts_with('@') => s.producers.payload_file = Some(file[1..].into()),
        Some(inline) => s.producers.payload = Some(inline.into()),
        None => {}
    }
    s.producers.payload_files = a.payload_files.clone();
    s.producers.max_in_flight = a.max_in_flight;
    s.producers.pacing = a.pacing.map(|p| match p {
        PacingArg::Efficient => Pacing::Efficient,
        PacingArg::Precise => Pacing::Precise,
    });
    s.producers.ack_timeout = a.ack_timeout.clone();
    if a.request_reply {
        s.producers.request_reply = Some(true);
    }
    s.phases.warmup = a.warmup.clone();
    s.phases.duration = a.duration.clone();
    s.phases.messages = a
        .messages
        .as_deref()
        .map(|m| parse_count(m).map(|n| n as u64))
        .transpose()
        .map_err(|e| anyhow!("--messages: {e}"))?;
    s.phases.drain = a.drain.clone();
    s.phases.backlog = a.backlog.clone();
    s.output.tick = a.tick.clone();
    s.output.workers = a.workers;
    s.output.io = a.io.map(|m| match m {
        IoArg::Readiness => IoMode::Readiness,
        IoArg::Batched => IoMode::Batched,
    });
    s.output.late_threshold = a.late_threshold.clone();
    s.output.connect_timeout = a.connect_timeout.clone();
    s.consumers.subscribe = a.subscribe.clone();
    s.consumers.target = a.consume_from.clone();
    s.consumers.processing = a.processing.clone();
    s.consumers.rate = a
        .consumer_rate
        .as_deref()
        .map(parse_count)
        .transpose()
        .map_err(|e| anyhow!("--consumer-rate: {e}"))?;
    s.client.qos = a.qos;
    s.client.retain = a.retain.then_some(true);
    s.client.version = a.mqtt_version.clone();
    s.client.keep_alive = a.keep_alive.clone();
    s.client.client_id = a.client_id.clone();
    s.client.persistent_session = a.persistent_session.then_some(true);
    s.client.hello = a.hello.clone();
    s.client.ack_every = a.ack_every;
    s.client.pipeline_handshake = a.pipeline_handshake.then_some(true);
    s.tls.ca_file = a.ca_file.clone();
    s.tls.cert_file = a.cert.clone();
    s.tls.key_file = a.key.clone();
    s.tls.insecure = a.insecure.then_some(true);
    let count = |flag: &str, v: &Option<String>| -> Result<Option<u64>> {
        v.as_deref()
            .map(|m| parse_count(m).map(|n| n as u64))
            .transpose()
            .map_err(|e| anyhow!("{flag}: {e}"))
    };
    s.connections.count = count("--connections", &a.connections)?;
    if a.connections.is_some() {
        s.connections.mode = Some(ConnectionMode::Hold);
    }
    if a.storm {
        s.connections.mode = Some(ConnectionMode::Storm);
    }
    if let Some(j) = &a.journey {
        s.connections.mode = Some(ConnectionMode::Journey);
        s.connections.journey = Some(
            j.split(';')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(|t| t.parse().map_err(|e: String| anyhow!("--journey: {e}")))
                .collect::<Result<_>>()?,
        );
    }
    s.connections.repeat = a.journey_repeat;
    s.connections.rate = a
        .connect_rate
        .as_deref()
        .map(parse_count)
        .transpose()
        .map_err(|e| anyhow!("--connect-rate: {e}"))?;
    s.connections.hold = a.hold.clone();
    s.connections.concurrency = a.concurrency;
    s.connections.messages = a.messages_per_connection;
    s.connections.publish_interval = a.publish_interval.clone();
    s.connections.reconnect_at = a.reconnect_at.clone();
    s.connections.churn = a
        .churn
        .as_deref()
        .map(parse_count)
        .transpose()
        .map_err(|e| anyhow!("--churn: {e}"))?;
    s.connections.arrival = match a.connect_arrival.as_deref() {
        None => None,
        Some("constant") => Some(Arrival::Constant),
        Some("poisson") => Some(Arrival::Poisson),
        Some(other) => bail!("--connect-arrival: `{other}` is neither constant nor poisson"),
    };
    s.connections.source_addrs = a.source_addrs.clone();
    let common = CommonFlags {
        persistent: a.persistent,
        ack_every: a.ack_every,
    };
    s.drivers.put(&a.amqp.section(&common));
    s.drivers.put(&a.http.section());
    // `--header` is both the HTTP requests' and the WebSocket upgrades' (both are HTTP): said
    // wrong once, as the flag, not as two sections.
    if let Some(bad) = a.http.header.iter().find(|h| !h.contains(':')) {
        bail!("--header: `{bad}` is not `NAME: VALUE`");
    }
    s.drivers.put(&msgbench_driver_ws::options::WsSection {
        headers: (!a.http.header.is_empty()).then(|| a.http.header.clone()),
        echo: a.echo.then_some(true),
    });
    s.drivers.put(&a.amqp10.section(&common));
    s.drivers.put(&a.kafka.section());
    Ok(s)
}

/// Parses `--rate-shape`: `constant`, `poisson` (both use --rate), `unlimited`,
/// `ramp:FROM..TO/OVER`, `steps:RATE/DUR,RATE/DUR`, `burst:SIZE/EVERY`.
pub fn parse_rate_shape(spec: &str, rate: Option<f64>) -> Result<RateShape> {
    let need_rate = || rate.ok_or_else(|| anyhow!("`{spec}` needs --rate"));
    let (kind, arg) = spec.split_once(':').unwrap_or((spec, ""));
    let dur = |s: &str| parse_duration(s).map_err(|e| anyhow!(e));
    let num = |s: &str| parse_count(s).map_err(|e| anyhow!(e));
    Ok(match kind {
        "unlimited" => RateShape::Unlimited,
        "constant" => RateShape::Constant { rate: need_rate()? },
        "poisson" => RateShape::Poisson { rate: need_rate()? },
        "ramp" => {
            let (range, over) = arg
                .split_once('/')
                .ok_or_else(|| anyhow!("expected ramp:FROM..TO/OVER, e.g. ramp:1000..50000/30s"))?;
            let (from, to) = range
                .split_once("..")
                .ok_or_else(|| anyhow!("expected ramp:FROM..TO/OVER"))?;
            RateShape::Ramp {
                from: num(from)?,
                to: num(to)?,
                over: dur(over)?,
            }
        }
        "steps" => {
            let steps = arg
                .split(',')
                .map(|st| {
                    let (r, d) = st.split_once('/').ok_or_else(|| {
                        anyhow!("expected steps:RATE/DUR,RATE/DUR, e.g. steps:1000/10s,5000/10s")
                    })?;
                    Ok(Step {
                        rate: num(r)?,
                        duration: dur(d)?,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            RateShape::Steps { steps }
        }
        "burst" => {
            let (size, every) = arg
                .split_once('/')
                .ok_or_else(|| anyhow!("expected burst:SIZE/EVERY, e.g. burst:500/1s"))?;
            RateShape::Burst {
                size: num(size)? as u64,
                every: dur(every)?,
            }
        }
        other => bail!(
            "unknown rate shape `{other}` (constant, poisson, unlimited, ramp:, steps:, burst:)"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rate_shapes_parse() {
        assert_eq!(
            parse_rate_shape("poisson", Some(5.0)).unwrap(),
            RateShape::Poisson { rate: 5.0 }
        );
        assert_eq!(
            parse_rate_shape("ramp:1k..50k/30s", None).unwrap(),
            RateShape::Ramp {
                from: 1000.0,
                to: 50000.0,
                over: Duration::from_secs(30)
            }
        );
        assert_eq!(
            parse_rate_shape("burst:500/1s", None).unwrap(),
            RateShape::Burst {
                size: 500,
                every: Duration::from_secs(1)
            }
        );
        assert!(
            matches!(parse_rate_shape("steps:100/1s,200/2s", None).unwrap(), RateShape::Steps { steps } if steps.len() == 2)
        );
        assert!(parse_rate_shape("constant", None).is_err());
        assert!(parse_rate_shape("zigzag", None).is_err());
    }
}
