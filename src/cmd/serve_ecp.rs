//! `msgbench serve ecp-endpoint`: flags → [`EcpEndpointConfig`], then the simulator until
//! Ctrl-C, with a status line every 10 s and a summary at the end.

use crate::cli::args::ServeArgs;
use anyhow::{Context, Result, anyhow};
use msgbench_core::redact;
use msgbench_core::scenario::{Amqp10Section, TlsPlan, amqp10::resolve_amqp10};
use msgbench_core::units::parse_duration;
use msgbench_serve::ecp::{EcpCounters, EcpEndpointConfig, run_with};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

fn delay(flag: &str, v: &str) -> Result<Duration> {
    parse_duration(v).map_err(|e| anyhow!("--{flag}: {e}"))
}

/// The simulator's configuration from the command line.
pub fn config(args: &ServeArgs) -> Result<EcpEndpointConfig> {
    let e = &args.ecp;
    let broker = e.broker.clone().context(
        "ecp-endpoint needs --broker amqp10://USER:PASS@HOST:PORT (the AMQP 1.0 broker of the outbox side)",
    )?;
    let amqp10 = resolve_amqp10(&Amqp10Section {
        address: e.address.clone(),
        capabilities: e.capabilities.clone(),
        ..Amqp10Section::default()
    })
    .map_err(|e| anyhow!("{e}"))?;
    let d = EcpEndpointConfig::default();
    Ok(EcpEndpointConfig {
        outbox: e.queues.outbox_queue.clone().unwrap_or(d.outbox),
        reply: e.queues.reply_queue.clone().unwrap_or(d.reply),
        send_event: e.queues.send_event_queue.clone().unwrap_or(d.send_event),
        inbox: e.queues.inbox_queue.clone().unwrap_or(d.inbox),
        inbox_url: e.inbox_broker.clone().unwrap_or_else(|| broker.clone()),
        outbox_url: broker,
        tls: TlsPlan {
            ca_file: e.ca_file.as_ref().map(Into::into),
            insecure: e.insecure,
            ..TlsPlan::default()
        },
        amqp10,
        reply_delay: delay("reply-delay", &e.reply_delay)?,
        deliver_delay: delay("deliver-delay", &e.deliver_delay)?,
        event_delay: delay("event-delay", &e.event_delay)?,
        extra_events: e.extra_events,
        error_reply_ratio: e.error_ratio,
        failed_ratio: e.failed_ratio,
        duplicate_every: e.duplicate_every,
        ..d
    })
}

/// Runs the simulator until `stop`.
pub async fn run(args: &ServeArgs, stop: impl Future<Output = ()> + Send) -> Result<()> {
    let cfg = config(args)?;
    eprintln!(
        "msgbench serve: ECP endpoint simulator on {} (outbox {}, reply {}, send events {}, inbox {}{}); Ctrl-C to stop",
        redact::url(&cfg.outbox_url),
        cfg.outbox,
        cfg.reply,
        cfg.send_event,
        cfg.inbox,
        if cfg.inbox_url != cfg.outbox_url {
            format!(" on {}", redact::url(&cfg.inbox_url))
        } else {
            String::new()
        }
    );
    let counters = Arc::new(EcpCounters::default());
    let c = counters.clone();
    let quiet = args.quiet;
    let status = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(10));
        tick.tick().await;
        let mut last = c.stats().received;
        loop {
            tick.tick().await;
            let s = c.stats();
            if !quiet {
                eprintln!(
                    "msgbench serve: ecp-endpoint {:.0} msgs/s; {} received, {} replied ({} errors), {} delivered, {} failed",
                    (s.received - last) as f64 / 10.0,
                    s.received,
                    s.replied,
                    s.error_replies,
                    s.delivered,
                    s.failed
                );
            }
            last = s.received;
        }
    });
    let r = run_with(cfg, counters.clone(), stop).await;
    status.abort();
    let s = counters.stats();
    eprintln!(
        "msgbench serve: ecp-endpoint handled {} messages: {} replies ({} with errorCode), {} deliveries ({} duplicated), events: {} accepted, {} transported, {} delivered, {} received, {} failed; {} reconnects",
        s.received,
        s.replied,
        s.error_replies,
        s.delivered,
        s.duplicates,
        s.accepted,
        s.transported,
        s.delivered_events,
        s.received_events,
        s.failed,
        s.reconnects
    );
    r.map_err(|e| anyhow!("{e}"))
}
