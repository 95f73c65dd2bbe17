//! The `ecp` preset: go-mades-bench's benchmark of an ECP endpoint's AMQP business-application
//! API, as multi-stage tracking.
//!
//! The business application (msgbench) sends each message to the endpoint's outbox with the
//! application properties ECP requires (`receiverCode`, `messageType`, `businessType`,
//! `baMessageID`, `senderApplication`, `isTracingMessage`) and `correlation-id` = `baMessageID`
//! = `"<n>-<run>"`. ECP then answers on the reply queue (correlation-id = baMessageID, the
//! ECP-assigned `messageID`, or an `errorCode`), delivers the message to the receiving side's
//! inbox, and publishes status events (`ACCEPTED`, `TRANSPORTED`, `DELIVERED`, `RECEIVED`,
//! `FAILED`) on the send-event queue. Each of those is a stage, keyed by the baMessageID or,
//! after the reply taught it, the ECP messageID.
//!
//! Modes (go-mades-bench's): `endpoint` (every stage; the window is the RECEIVED event),
//! `toolbox` (the EDX toolbox: reply correlated by baMessageID, no send events), `amqp` (a plain
//! broker loop-back on the inbox), `tracing` (tracing messages: reply and delivery events).

use crate::scenario::{MessageSection, RateSpec, Scenario, StageSection, TrackingSection};
use std::collections::BTreeMap;

/// go-mades-bench's modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EcpMode {
    /// Outbox → reply → inbox → DELIVERED → RECEIVED.
    Endpoint,
    /// EDX toolbox: outbox → inbox → reply (by baMessageID).
    Toolbox,
    /// Plain AMQP 1.0 loop-back on the inbox queue of the inbox-side broker.
    Amqp,
    /// Tracing messages: outbox → reply → DELIVERED (and TRACING/RECEIVED when present).
    Tracing,
}

impl std::str::FromStr for EcpMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "endpoint" => Ok(EcpMode::Endpoint),
            "toolbox" => Ok(EcpMode::Toolbox),
            "amqp" => Ok(EcpMode::Amqp),
            "tracing" => Ok(EcpMode::Tracing),
            _ => Err(format!(
                "`{s}`: the ecp modes are endpoint, toolbox, amqp and tracing"
            )),
        }
    }
}

/// What the preset needs; every field has go-mades-bench's default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EcpOptions {
    /// Which flow.
    pub mode: EcpMode,
    /// The outbox side's broker (`amqp10://user:pass@host:port`).
    pub outbox_url: String,
    /// The inbox side's broker (the receiving endpoint's; often the same).
    pub inbox_url: String,
    /// `receiverCode`: the ECP component code of the receiving endpoint.
    pub receiver: String,
    /// `messageType` and `businessType`.
    pub message_type: String,
    /// Queue the business application sends to.
    pub outbox: String,
    /// Queue ECP acknowledges outbox messages on.
    pub reply: String,
    /// Queue ECP publishes send events on.
    pub send_event: String,
    /// Queue the receiving endpoint delivers to.
    pub inbox: String,
    /// Drain the stage queues before the run.
    pub clean: bool,
}

impl Default for EcpOptions {
    fn default() -> Self {
        EcpOptions {
            mode: EcpMode::Endpoint,
            outbox_url: "amqp10://endpoint:password@localhost:5672".into(),
            inbox_url: "amqp10://endpoint:password@localhost:5672".into(),
            receiver: "ecp-endpoint".into(),
            message_type: "TEST-MESSAGE".into(),
            outbox: "ecp.endpoint.outbox".into(),
            reply: "ecp.endpoint.outbox.reply".into(),
            send_event: "ecp.endpoint.send.event".into(),
            inbox: "ecp.endpoint.inbox".into(),
            clean: true,
        }
    }
}

const BY_IDS: [&str; 2] = ["property:baMessageID", "property:messageID"];

fn stage(name: &str, queue: &str, target: Option<&str>, keys: &[&str]) -> StageSection {
    StageSection {
        name: Some(name.into()),
        queue: Some(queue.into()),
        target: target.map(Into::into),
        key: Some(keys.iter().map(|k| k.to_string()).collect()),
        ..StageSection::default()
    }
}

fn event(name: &str, o: &EcpOptions, body: &str) -> StageSection {
    StageSection {
        body: Some(body.into()),
        ..stage(name, &o.send_event, None, &BY_IDS)
    }
}

fn optional(mut s: StageSection) -> StageSection {
    s.optional = Some(true);
    s
}

fn window(mut s: StageSection) -> StageSection {
    s.window = Some(true);
    s
}

/// The preset as a scenario layer.
pub fn scenario(o: &EcpOptions) -> Scenario {
    let mut s = Scenario {
        name: Some(format!(
            "ecp {}",
            match o.mode {
                EcpMode::Endpoint => "endpoint",
                EcpMode::Toolbox => "toolbox",
                EcpMode::Amqp => "amqp",
                EcpMode::Tracing => "tracing",
            }
        )),
        ..Scenario::default()
    };
    let amqp_mode = o.mode == EcpMode::Amqp;
    s.target = Some(
        if amqp_mode {
            &o.inbox_url
        } else {
            &o.outbox_url
        }
        .clone(),
    );
    s.topics.pattern = Some(if amqp_mode { &o.inbox } else { &o.outbox }.clone());
    s.producers.max_in_flight = Some(1000);
    s.producers.rate = Some(RateSpec::PerSecond(0.0));
    s.phases.messages = Some(10_000);
    s.phases.warmup = Some("0s".into());
    s.phases.drain = Some("30s".into());
    s.drivers.set("amqp10", "durable", true);
    // The AMQP 1.0 client runs several tasks per connection (connection, session, links) that
    // hand every frame to each other: on one worker thread those hand-offs cost no wake-ups,
    // which measured a third less CPU per message on this workload than a thread per core.
    s.output.workers = Some(1);

    let mut props = BTreeMap::new();
    let text = |v: &str| toml::Value::String(v.into());
    props.insert("receiverCode".into(), text(&o.receiver));
    props.insert("messageType".into(), text(&o.message_type));
    props.insert("businessType".into(), text(&o.message_type));
    props.insert("baMessageID".into(), text("{key}"));
    props.insert("senderApplication".into(), text("msgbench"));
    props.insert(
        "isTracingMessage".into(),
        toml::Value::Boolean(o.mode == EcpMode::Tracing),
    );
    s.message = MessageSection {
        message_id: None,
        correlation_id: Some("{key}".into()),
        properties: Some(props),
    };
    s.tracking = TrackingSection {
        key: Some("{n}-{run}".into()),
        clean: Some(o.clean),
    };
    let inbox_target = (o.inbox_url != o.outbox_url).then_some(o.inbox_url.as_str());
    let sent = StageSection {
        name: Some("Sent to outbox".into()),
        on: Some("ack".into()),
        ..StageSection::default()
    };
    let reply = StageSection {
        rekey: Some("property:messageID".into()),
        error_property: Some("errorCode".into()),
        ..stage(
            "Sent to broker",
            &o.reply,
            None,
            &["correlation-id", "property:baMessageID"],
        )
    };
    let failed = StageSection {
        failure: Some(true),
        ..event("Failed event", o, "FAILED")
    };
    s.stages = match o.mode {
        EcpMode::Endpoint => vec![
            sent,
            reply,
            stage("Received in inbox", &o.inbox, inbox_target, &BY_IDS),
            event("Delivery event", o, "DELIVERED"),
            window(event("Received event", o, "RECEIVED")),
            optional(event("Accepted event", o, "ACCEPTED")),
            optional(event("Transported event", o, "TRANSPORTED")),
            failed,
        ],
        EcpMode::Toolbox => vec![
            sent,
            stage("Received in inbox", &o.inbox, inbox_target, &BY_IDS),
            window(StageSection {
                error_property: Some("errorCode".into()),
                ..stage(
                    "Received reply",
                    &o.reply,
                    None,
                    &["property:baMessageID", "correlation-id"],
                )
            }),
        ],
        EcpMode::Amqp => vec![
            sent,
            window(stage("Received in inbox", &o.inbox, None, &BY_IDS)),
        ],
        EcpMode::Tracing => vec![
            sent,
            reply,
            window(event("Delivery event", o, "DELIVERED")),
            optional(event("Tracing event", o, "TRACING")),
            optional(event("Received event", o, "RECEIVED")),
            optional(event("Accepted event", o, "ACCEPTED")),
            optional(event("Transported event", o, "TRANSPORTED")),
            failed,
        ],
    };
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{StageSource, resolve};

    #[test]
    fn every_mode_resolves_with_its_stages() {
        for (mode, names, window) in [
            (EcpMode::Endpoint, 8, "Received event"),
            (EcpMode::Toolbox, 3, "Received reply"),
            (EcpMode::Amqp, 2, "Received in inbox"),
            (EcpMode::Tracing, 8, "Delivery event"),
        ] {
            let o = EcpOptions {
                mode,
                ..EcpOptions::default()
            };
            let s = scenario(&o);
            assert_eq!(
                s.drivers.value("amqp10", "durable"),
                Some(&toml::Value::Boolean(true))
            );
            let plan = resolve(&s, 0xab).unwrap();
            let t = plan.tracking.as_ref().unwrap();
            assert_eq!(t.stages.len(), names, "{mode:?}");
            assert_eq!(t.stages[t.window_stage().unwrap()].name, window);
            assert_eq!(t.stages[0].source, StageSource::Ack);
            assert_eq!(plan.consumers_per_topic, 0);
            let p: Vec<&str> = plan
                .message
                .properties
                .iter()
                .map(|(n, _)| n.as_str())
                .collect();
            assert!(
                p.contains(&"baMessageID") && p.contains(&"receiverCode"),
                "{p:?}"
            );
        }
    }

    #[test]
    fn the_inbox_may_be_another_broker() {
        let o = EcpOptions {
            inbox_url: "amqp10://other:5672".into(),
            ..EcpOptions::default()
        };
        let plan = resolve(&scenario(&o), 1).unwrap();
        let t = plan.tracking.unwrap();
        let inbox = t
            .stages
            .iter()
            .find(|s| s.name == "Received in inbox")
            .unwrap();
        assert_eq!(
            inbox.source,
            StageSource::Queue {
                queue: "ecp.endpoint.inbox".into(),
                target: Some("amqp10://other:5672".into())
            }
        );
        assert_eq!(t.queues().len(), 3);
    }
}
