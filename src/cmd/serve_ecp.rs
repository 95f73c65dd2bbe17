//! `msgbench serve ecp-endpoint`: flags → [`EcpEndpointConfig`], and the simulator as a
//! [`Server`] (its own status line: messages handled, replies, deliveries, failures).

use super::serve::Bound;
use crate::cli::args::ServeArgs;
use anyhow::{Context, Result, anyhow};
use msgbench_core::redact;
use msgbench_core::scenario::TlsPlan;
use msgbench_core::units::parse_duration;
use msgbench_driver_amqp10::options::{Amqp10Section, resolve_amqp10};
use msgbench_serve::ecp::{EcpCounters, EcpEndpointConfig, run_with};
use msgbench_serve::server::{STATUS_EVERY, ServeError, Server, Serving, StatusLine, Stop};
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

/// The simulator, configured from the flags (it connects when it starts serving).
pub(super) fn bind(args: &ServeArgs) -> Result<Bound> {
    let cfg = config(args)?;
    let banner = format!(
        "ECP endpoint simulator on {} (outbox {}, reply {}, send events {}, inbox {}{}); Ctrl-C to stop",
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
    Ok(Bound {
        server: Box::new(Ecp {
            cfg,
            counters: Arc::new(EcpCounters::default()),
        }),
        banner,
        what: "ECP endpoint simulator",
    })
}

/// The simulator and its counters.
struct Ecp {
    cfg: EcpEndpointConfig,
    counters: Arc<EcpCounters>,
}

impl Server for Ecp {
    fn status(&self) -> Option<StatusLine> {
        let c = self.counters.clone();
        let mut last = c.stats().received;
        Some(Box::new(move || {
            let s = c.stats();
            let line = format!(
                "ecp-endpoint {:.0} msgs/s; {} received, {} replied ({} errors), {} delivered, {} failed",
                (s.received - last) as f64 / STATUS_EVERY.as_secs_f64(),
                s.received,
                s.replied,
                s.error_replies,
                s.delivered,
                s.failed
            );
            last = s.received;
            line
        }))
    }

    fn serve(self: Box<Self>, stop: Stop) -> Serving {
        Box::pin(async move {
            let Ecp { cfg, counters } = *self;
            let r = run_with(cfg, counters.clone(), stop).await;
            let s = counters.stats();
            r.map_err(|e| ServeError::Failed(e.to_string()))?;
            Ok(Some(format!(
                "ecp-endpoint handled {} messages: {} replies ({} with errorCode), {} deliveries ({} duplicated), events: {} accepted, {} transported, {} delivered, {} received, {} failed; {} reconnects",
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
            )))
        })
    }
}
