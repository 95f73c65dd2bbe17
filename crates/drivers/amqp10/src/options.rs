//! `[amqp10]` and the AMQP 1.0 flags of `msgbench run`: link settings, as written
//! ([`Amqp10Section`]), resolved ([`Amqp10Plan`]) and given on the command line
//! ([`Amqp10Args`]). Brokers differ in what they need: Artemis creates an anycast queue for a
//! `queue` capability; Qpid Broker-J creates nodes only by its virtual host's node
//! auto-creation policies (or uses existing ones), whatever the capabilities; ActiveMQ Classic
//! routes by address prefix (`topic://{topic}` for a topic) and ignores capabilities; RabbitMQ
//! 3.x addresses queues as `/queue/NAME` (or `/amq/queue/NAME` for one that exists). Tested
//! against Artemis, RabbitMQ 3.10, Qpid Broker-J 9.2 and ActiveMQ Classic 6.2.

use clap::Args;
use msgbench_core::registration::CommonFlags;
use msgbench_core::scenario::{DriverSection, PlanError, RunPlan, SubscriptionMode};
use serde::{Deserialize, Serialize};

/// `[amqp10]` as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Amqp10Section {
    /// Link address for a topic/queue name, `{topic}` replaced (default `"{topic}"`; RabbitMQ
    /// 3.x: `"/queue/{topic}"`).
    pub address: Option<String>,
    /// Capabilities asked for on sender targets and receiver sources (default `["queue"]`).
    pub capabilities: Option<Vec<String>>,
    /// Send pre-settled (fire and forget) instead of waiting for the broker's disposition.
    pub settled: Option<bool>,
    /// The `durable` header of every message.
    pub durable: Option<bool>,
    /// Link credit each receiver grants (default 1000).
    pub credit: Option<u32>,
    /// What receivers answer for each delivery: `accept` (default), `release` or `reject`.
    pub on_receive: Option<String>,
}

/// What a receiver tells the broker about each delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Disposition {
    /// Consumed; the broker forgets it.
    Accept,
    /// Not consumed; the broker may deliver it again (to this or another receiver).
    Release,
    /// Refused as invalid; the broker dead-letters or drops it.
    Reject,
}

/// Resolved AMQP 1.0 settings (used by the `amqp10://` driver only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Amqp10Plan {
    /// Address template, `{topic}` replaced.
    pub address: String,
    /// Target/source capabilities.
    pub capabilities: Vec<String>,
    /// Pre-settled sends (no publish latency, no acks).
    pub settled: bool,
    /// `durable` message header.
    pub durable: bool,
    /// Receiver link credit.
    pub credit: u32,
    /// Outcome receivers give each delivery.
    pub on_receive: Disposition,
}

impl Default for Amqp10Plan {
    fn default() -> Self {
        Amqp10Plan {
            address: "{topic}".into(),
            capabilities: vec!["queue".into()],
            settled: false,
            durable: false,
            credit: 1000,
            on_receive: Disposition::Accept,
        }
    }
}

impl Amqp10Plan {
    /// The link address of `topic`.
    pub fn address_of(&self, topic: &str) -> String {
        self.address.replace("{topic}", topic)
    }
}

/// AMQP 1.0 receivers on one queue (an anycast address: no `topic` capability, not a
/// RabbitMQ `/topic/` or `/exchange/` address) compete for its messages, whatever msgbench
/// calls them: several of them without a group are a queue group (`msgbench`), so each message
/// is expected once, not once per receiver (which would count all but one copy as lost).
pub fn competing(sub: SubscriptionMode, consumer_target: &str, p: &Amqp10Plan) -> SubscriptionMode {
    // Brokerless (`?bind=`): no queue in between; several consumers each get every message
    // unless they are given a group.
    let brokerless = consumer_target
        .split_once('?')
        .is_some_and(|(_, q)| q.split('&').any(|o| o.starts_with("bind=")));
    let amqp10 = (consumer_target.starts_with("amqp10://")
        || consumer_target.starts_with("amqp10s://"))
        && !brokerless;
    let fans_out = p.capabilities.iter().any(|c| c == "topic")
        || p.address.starts_with("/topic/")
        || p.address.starts_with("/exchange/");
    match sub {
        SubscriptionMode::Fanout if amqp10 && !fans_out => SubscriptionMode::Queue {
            group: "msgbench".to_string(),
        },
        other => other,
    }
}

impl DriverSection for Amqp10Section {
    const NAME: &'static str = "amqp10";
    type Plan = Amqp10Plan;

    fn resolve(&self) -> Result<Amqp10Plan, PlanError> {
        resolve_amqp10(self)
    }

    /// Consumers on one AMQP 1.0 queue compete ([`competing`]).
    fn refine(plan: &Amqp10Plan, run: &mut RunPlan) {
        run.subscription = competing(run.subscription.clone(), run.consumer_target(), plan);
    }
}

/// The AMQP 1.0 flags (`--persistent` is shared with AMQP 0-9-1: [`CommonFlags`]).
#[derive(Debug, Args, Default, Clone, PartialEq, Eq)]
#[command(next_help_heading = "AMQP 1.0")]
pub struct Amqp10Args {
    /// Link address for a topic, {topic} replaced (RabbitMQ 3.x: '/queue/{topic}'; ActiveMQ
    /// Classic topics: 'topic://{topic}').
    #[arg(long, value_name = "TEMPLATE")]
    pub address: Option<String>,
    /// Target/source capabilities, comma-separated (default queue; fan-out: topic; shared
    /// subscriptions: topic,shared). Qpid Broker-J creates queues only by its node
    /// auto-creation policies, ActiveMQ Classic ignores capabilities (use --address).
    #[arg(long, value_delimiter = ',')]
    pub capabilities: Option<Vec<String>>,
    /// Send pre-settled (fire and forget: no dispositions, no publish latency).
    #[arg(long)]
    pub settled: bool,
    /// Link credit per receiver (default 1000).
    #[arg(long)]
    pub credit: Option<u32>,
    /// What receivers answer: accept (default), release or reject.
    #[arg(long, value_name = "OUTCOME")]
    pub on_receive: Option<String>,
}

impl Amqp10Args {
    /// The `[amqp10]` section these flags stand for (unset flags leave the file's values).
    pub fn section(&self, common: &CommonFlags) -> Amqp10Section {
        Amqp10Section {
            address: self.address.clone(),
            capabilities: self.capabilities.clone(),
            settled: self.settled.then_some(true),
            durable: common.persistent.then_some(true),
            credit: self.credit,
            on_receive: self.on_receive.clone(),
        }
    }
}

/// `[amqp10]` → [`Amqp10Plan`].
pub fn resolve_amqp10(a: &Amqp10Section) -> Result<Amqp10Plan, PlanError> {
    let d = Amqp10Plan::default();
    let address = a.address.clone().unwrap_or(d.address);
    if !address.contains("{topic}") {
        return Err(PlanError {
            setting: "amqp10.address",
            message: format!("`{address}` must contain {{topic}} (e.g. \"/queue/{{topic}}\")"),
        });
    }
    let credit = a.credit.unwrap_or(d.credit);
    if credit == 0 {
        return Err(PlanError {
            setting: "amqp10.credit",
            message: "a receiver with no credit never receives; use at least 1".into(),
        });
    }
    let on_receive = match a.on_receive.as_deref() {
        None | Some("accept") => Disposition::Accept,
        Some("release") => Disposition::Release,
        Some("reject") => Disposition::Reject,
        Some(other) => {
            return Err(PlanError {
                setting: "amqp10.on_receive",
                message: format!("`{other}`: use accept, release or reject"),
            });
        }
    };
    Ok(Amqp10Plan {
        address,
        capabilities: a.capabilities.clone().unwrap_or(d.capabilities),
        settled: a.settled.unwrap_or(d.settled),
        durable: a.durable.unwrap_or(d.durable),
        credit,
        on_receive,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receivers_on_a_queue_compete() {
        let q = Amqp10Plan::default();
        let group = SubscriptionMode::Queue {
            group: "msgbench".into(),
        };
        let t = "amqp10://h";
        assert_eq!(competing(SubscriptionMode::Fanout, t, &q), group);
        let own = SubscriptionMode::Queue { group: "g".into() };
        assert_eq!(competing(own.clone(), t, &q), own);
        // Topics and RabbitMQ's exchange addresses fan out; other protocols are left alone.
        let topic = Amqp10Plan {
            capabilities: vec!["topic".into()],
            ..Amqp10Plan::default()
        };
        assert_eq!(
            competing(SubscriptionMode::Fanout, t, &topic),
            SubscriptionMode::Fanout
        );
        let exchange = Amqp10Plan {
            address: "/exchange/amq.topic/{topic}".into(),
            ..Amqp10Plan::default()
        };
        assert_eq!(
            competing(SubscriptionMode::Fanout, t, &exchange),
            SubscriptionMode::Fanout
        );
        assert_eq!(
            competing(SubscriptionMode::Fanout, "nats://h", &q),
            SubscriptionMode::Fanout
        );
        assert_eq!(
            competing(SubscriptionMode::Fanout, "amqp10://h:0?bind=consumer", &q),
            SubscriptionMode::Fanout
        );
    }

    #[test]
    fn defaults_and_errors() {
        let p = resolve_amqp10(&Amqp10Section::default()).unwrap();
        assert_eq!(p, Amqp10Plan::default());
        assert_eq!(p.address_of("q"), "q");
        let rabbit = Amqp10Section {
            address: Some("/queue/{topic}".into()),
            on_receive: Some("release".into()),
            ..Default::default()
        };
        let p = resolve_amqp10(&rabbit).unwrap();
        assert_eq!(p.address_of("q"), "/queue/q");
        assert_eq!(p.on_receive, Disposition::Release);
        let bad = Amqp10Section {
            on_receive: Some("drop".into()),
            ..Default::default()
        };
        assert_eq!(
            resolve_amqp10(&bad).unwrap_err().setting,
            "amqp10.on_receive"
        );
        let bad = Amqp10Section {
            address: Some("/queue/x".into()),
            ..Default::default()
        };
        assert!(resolve_amqp10(&bad).is_err());
    }
}
