//! Message metadata templates (`[message]`) and multi-stage tracking (`[tracking]`,
//! `[[stages]]`), as written and resolved.
//!
//! A stage is a point a sent message is seen to reach: the publish confirmation, a reply on a
//! queue, the message itself on another broker's queue, a status event. Each stage matches its
//! events to the sent message by a key the event carries (the stamp, the correlation id, a
//! property), may teach the tracker a second key later events use instead (ECP replies carry the
//! ECP-assigned message id), and records its own latency from the message's intended send time.
//! One stage can be the flow-control trigger: `max_in_flight` then bounds the messages that have
//! not reached it yet (go-mades-bench's `-max-in-transit`).
//!
//! ```toml
//! [message]                       # sent with every message (drivers with metadata only)
//! correlation_id = "{key}"
//! [message.properties]
//! receiverCode = "ecp-endpoint"
//! baMessageID = "{key}"
//! isTracingMessage = false
//!
//! [tracking]
//! key = "{n}-{run}"               # the key each message is tracked by
//! clean = true                    # consume what stage queues hold before the run
//!
//! [[stages]]
//! name = "Sent"
//! on = "ack"                      # the publish confirmation (the send, without confirms)
//!
//! [[stages]]
//! name = "Replied"
//! queue = "replies"
//! key = ["correlation-id"]        # stamp | correlation-id | message-id | property:NAME
//! rekey = "property:messageID"
//! error_property = "errorCode"    # an event carrying it is a failure
//!
//! [[stages]]
//! name = "Delivered"
//! queue = "events"
//! body = "DELIVERED"              # events on a shared queue, told apart by body
//! key = ["property:baMessageID", "property:messageID"]
//! window = true
//! ```

use super::plan::PlanError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// `[message]` as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageSection {
    /// Message id template.
    pub message_id: Option<String>,
    /// Correlation id template.
    pub correlation_id: Option<String>,
    /// Application properties: strings are templates; booleans and integers are sent as such.
    pub properties: Option<BTreeMap<String, toml::Value>>,
}

/// `[tracking]` as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrackingSection {
    /// The key each message is tracked by (default `"{producer}.{seq}"`).
    pub key: Option<String>,
    /// Consume and discard what the stage queues hold before the run starts.
    pub clean: Option<bool>,
}

/// One `[[stages]]` entry as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageSection {
    /// Name shown in reports.
    pub name: Option<String>,
    /// `"ack"`: the publish confirmation. Otherwise the stage is observed on `queue`.
    pub on: Option<String>,
    /// The queue (topic, address) its events arrive on.
    pub queue: Option<String>,
    /// Where that queue is, when not on the run's target (same protocol; may carry
    /// credentials).
    pub target: Option<String>,
    /// Where an event carries the message's key, tried in order (default `["stamp"]`).
    pub key: Option<Vec<String>>,
    /// A second key this event teaches the tracker, used by later events.
    pub rekey: Option<String>,
    /// Only events whose body is exactly this text belong to this stage.
    pub body: Option<String>,
    /// An event carrying this property is the message's failure.
    pub error_property: Option<String>,
    /// Reaching this stage means the message failed (a FAILED status event).
    pub failure: Option<bool>,
    /// Recorded when present, never counted missing (statuses a system may not emit).
    pub optional: Option<bool>,
    /// `max_in_flight` counts messages that have not reached this stage.
    pub window: Option<bool>,
}

/// Where an event carries a message's key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeySource {
    /// The msgbench stamp at the start of the payload.
    Stamp,
    /// The correlation id.
    CorrelationId,
    /// The message id.
    MessageId,
    /// An application property.
    Property(String),
}

impl KeySource {
    fn parse(s: &str) -> Option<KeySource> {
        match s {
            "stamp" => Some(KeySource::Stamp),
            "correlation-id" | "correlation_id" => Some(KeySource::CorrelationId),
            "message-id" | "message_id" => Some(KeySource::MessageId),
            _ => s
                .strip_prefix("property:")
                .filter(|n| !n.is_empty())
                .map(|n| KeySource::Property(n.to_string())),
        }
    }
}

/// Where a stage is observed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageSource {
    /// The producer's publish confirmation (or the send itself, without confirms).
    Ack,
    /// Events on a queue.
    Queue {
        /// Queue (topic, address).
        queue: String,
        /// Another URL of the same protocol, if not the run's target.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<String>,
    },
}

/// A resolved stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StagePlan {
    /// Name shown in reports.
    pub name: String,
    /// Where it is observed.
    pub source: StageSource,
    /// Key sources, tried in order.
    pub keys: Vec<KeySource>,
    /// Alias key taught by its events.
    pub rekey: Option<KeySource>,
    /// Body filter.
    pub body: Option<String>,
    /// Failure marker property.
    pub error_property: Option<String>,
    /// Reaching it is a failure.
    pub failure: bool,
    /// Never counted missing.
    pub optional: bool,
    /// The flow-control trigger.
    pub window: bool,
}

impl StagePlan {
    /// Whether a message that never reaches this stage is missing (not optional, not a failure
    /// marker).
    pub fn required(&self) -> bool {
        !self.optional && !self.failure
    }
}

/// A template with `{key}`, `{n}`, `{seq}`, `{producer}`, `{run}` variables.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Template(pub String);

/// The values a template can use, for one message.
#[derive(Debug, Clone, Copy)]
pub struct TemplateVars<'a> {
    /// The message's tracking key (empty while rendering the key itself).
    pub key: &'a str,
    /// Run-wide message number, from 1.
    pub n: u64,
    /// Sequence number within its producer, from 0 (as in the stamp).
    pub seq: u64,
    /// Producer index.
    pub producer: u32,
    /// Run id.
    pub run: u32,
}

const VARS: [&str; 5] = ["key", "n", "seq", "producer", "run"];

impl Template {
    fn check(setting: &'static str, s: &str) -> Result<Template, PlanError> {
        let mut rest = s;
        while let Some(i) = rest.find('{') {
            let Some(j) = rest[i..].find('}') else {
                return Err(PlanError {
                    setting,
                    message: format!("`{s}`: unclosed `{{`"),
                });
            };
            let name = &rest[i + 1..i + j];
            if !VARS.contains(&name) {
                return Err(PlanError {
                    setting,
                    message: format!(
                        "`{s}`: unknown variable {{{name}}} (known: {{key}}, {{n}}, {{seq}}, {{producer}}, {{run}})"
                    ),
                });
            }
            rest = &rest[i + j + 1..];
        }
        Ok(Template(s.to_string()))
    }

    /// Whether it uses `{name}`.
    pub fn uses(&self, name: &str) -> bool {
        self.0.contains(&format!("{{{name}}}"))
    }

    /// Writes the template with `v` into `out` (cleared first; its capacity is reused, so
    /// rendering allocates only when a value outgrows it).
    pub fn render(&self, v: &TemplateVars<'_>, out: &mut String) {
        out.clear();
        let mut rest = self.0.as_str();
        while let Some(i) = rest.find('{') {
            out.push_str(&rest[..i]);
            let j = rest[i..].find('}').map_or(rest.len(), |j| i + j);
            let _ = match &rest[i + 1..j] {
                "key" => {
                    out.push_str(v.key);
                    Ok(())
                }
                "n" => write!(out, "{}", v.n),
                "seq" => write!(out, "{}", v.seq),
                "producer" => write!(out, "{}", v.producer),
                "run" => write!(out, "{:08x}", v.run),
                _ => Ok(()),
            };
            rest = rest.get(j + 1..).unwrap_or("");
        }
        out.push_str(rest);
    }
}

/// A property to send: a template or a fixed typed value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PropertyTemplate {
    /// A string, rendered per message.
    Str(Template),
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
}

/// Resolved `[message]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessagePlan {
    /// Message id template.
    pub message_id: Option<Template>,
    /// Correlation id template.
    pub correlation_id: Option<Template>,
    /// Application properties in name order.
    pub properties: Vec<(String, PropertyTemplate)>,
}

impl MessagePlan {
    /// Whether anything is sent besides the payload.
    pub fn is_empty(&self) -> bool {
        self.message_id.is_none() && self.correlation_id.is_none() && self.properties.is_empty()
    }
}

/// Resolved `[tracking]` and `[[stages]]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrackingPlan {
    /// The key each message is tracked by.
    pub key: Template,
    /// Clean the stage queues before the run.
    pub clean: bool,
    /// The stages, in report order.
    pub stages: Vec<StagePlan>,
}

impl TrackingPlan {
    /// The flow-control stage, if any.
    pub fn window_stage(&self) -> Option<usize> {
        self.stages.iter().position(|s| s.window)
    }

    /// The distinct queues stages are observed on, with the stages of each, in order of first
    /// appearance.
    pub fn queues(&self) -> Vec<StageQueue> {
        let mut out: Vec<StageQueue> = Vec::new();
        for (i, s) in self.stages.iter().enumerate() {
            if let StageSource::Queue { queue, target } = &s.source {
                match out
                    .iter_mut()
                    .find(|q| q.queue == *queue && q.target == *target)
                {
                    Some(q) => q.stages.push(i as u16),
                    None => out.push(StageQueue {
                        queue: queue.clone(),
                        target: target.clone(),
                        stages: vec![i as u16],
                    }),
                }
            }
        }
        out
    }
}

/// A queue stages are observed on: one listener each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageQueue {
    /// Queue (topic, address).
    pub queue: String,
    /// Another URL of the same protocol, if not the run's target.
    pub target: Option<String>,
    /// The stages observed on it, in plan order.
    pub stages: Vec<u16>,
}

/// Most stages a run can track (one bit each per message).
pub const MAX_STAGES: usize = 32;

/// `[message]` → [`MessagePlan`].
pub fn resolve_message(m: &MessageSection) -> Result<MessagePlan, PlanError> {
    let mut properties = Vec::new();
    for (name, v) in m.properties.iter().flatten() {
        let p = match v {
            toml::Value::String(s) => {
                PropertyTemplate::Str(Template::check("message.properties", s)?)
            }
            toml::Value::Boolean(b) => PropertyTemplate::Bool(*b),
            toml::Value::Integer(i) => PropertyTemplate::Int(*i),
            other => {
                return Err(PlanError {
                    setting: "message.properties",
                    message: format!(
                        "`{name}` is a {}: properties are strings, booleans or integers",
                        other.type_str()
                    ),
                });
            }
        };
        properties.push((name.clone(), p));
    }
    Ok(MessagePlan {
        message_id: m
            .message_id
            .as_deref()
            .map(|t| Template::check("message.message_id", t))
            .transpose()?,
        correlation_id: m
            .correlation_id
            .as_deref()
            .map(|t| Template::check("message.correlation_id", t))
            .transpose()?,
        properties,
    })
}

fn stage_err(i: usize, message: String) -> PlanError {
    PlanError {
        setting: "stages",
        message: format!("stage {}: {message}", i + 1),
    }
}

/// One `[[stages]]` entry (the `i`-th) resolved and checked against the tracking key and the
/// stages before it.
fn resolve_stage(
    i: usize,
    s: &StageSection,
    key: &Template,
    earlier: &[StagePlan],
) -> Result<StagePlan, PlanError> {
    let name = s
        .name
        .clone()
        .ok_or_else(|| stage_err(i, "needs a name".into()))?;
    if earlier.iter().any(|o| o.name == name) {
        return Err(stage_err(i, format!("the name `{name}` is used twice")));
    }
    let source = match (s.on.as_deref(), &s.queue) {
        (Some("ack"), None) => StageSource::Ack,
        (Some("ack"), Some(_)) => {
            return Err(stage_err(
                i,
                "`on = \"ack\"` and `queue` exclude each other".into(),
            ));
        }
        (Some(other), _) => {
            return Err(stage_err(
                i,
                format!("on = `{other}`: the only value is \"ack\""),
            ));
        }
        (None, Some(q)) if !q.is_empty() => StageSource::Queue {
            queue: q.clone(),
            target: s.target.clone(),
        },
        (None, _) => {
            return Err(stage_err(i, "needs a `queue` (or `on = \"ack\"`)".into()));
        }
    };
    if let Some(t) = &s.target
        && !t.contains("://")
    {
        return Err(stage_err(
            i,
            format!("target `{}` is not a URL", crate::redact::url(t)),
        ));
    }
    let parse = |k: &str| {
        KeySource::parse(k).ok_or_else(|| {
            stage_err(
                i,
                format!("key `{k}`: use stamp, correlation-id, message-id or property:NAME"),
            )
        })
    };
    let keys = match &s.key {
        None if source == StageSource::Ack => Vec::new(),
        None => vec![KeySource::Stamp],
        Some(v) if v.is_empty() => return Err(stage_err(i, "an empty key list".into())),
        Some(v) => v.iter().map(|k| parse(k)).collect::<Result<Vec<_>, _>>()?,
    };
    if keys.contains(&KeySource::Stamp) && key.uses("n") {
        return Err(stage_err(
            i,
            format!(
                "a stamp key needs a tracking.key made of {{producer}}, {{seq}} and {{run}} (what the stamp carries), not `{}`",
                key.0
            ),
        ));
    }
    let rekey = s.rekey.as_deref().map(parse).transpose()?;
    let plan = StagePlan {
        name,
        source,
        keys,
        rekey,
        body: s.body.clone(),
        error_property: s.error_property.clone(),
        failure: s.failure.unwrap_or(false),
        optional: s.optional.unwrap_or(false),
        window: s.window.unwrap_or(false),
    };
    if plan.window && plan.source == StageSource::Ack {
        return Err(stage_err(
            i,
            "the publish confirmation is already bounded by max_in_flight; put the window on a queue stage".into(),
        ));
    }
    if plan.window && !plan.required() {
        return Err(stage_err(
            i,
            "an optional or failure stage cannot be the window".into(),
        ));
    }
    if plan.source == StageSource::Ack && (plan.failure || plan.body.is_some()) {
        return Err(stage_err(
            i,
            "an ack stage has no body and is no failure marker".into(),
        ));
    }
    Ok(plan)
}

/// `[tracking]` + `[[stages]]` → [`TrackingPlan`] (`None` without stages).
pub fn resolve_tracking(
    t: &TrackingSection,
    stages: &[StageSection],
) -> Result<Option<TrackingPlan>, PlanError> {
    if stages.is_empty() {
        if t.key.is_some() || t.clean.is_some() {
            return Err(PlanError {
                setting: "tracking",
                message: "tracking settings without [[stages]] do nothing; add stages".into(),
            });
        }
        return Ok(None);
    }
    if stages.len() > MAX_STAGES {
        return Err(PlanError {
            setting: "stages",
            message: format!("{} stages; at most {MAX_STAGES}", stages.len()),
        });
    }
    let key = Template::check(
        "tracking.key",
        t.key.as_deref().unwrap_or("{producer}.{seq}"),
    )?;
    if key.uses("key") {
        return Err(PlanError {
            setting: "tracking.key",
            message: "the key cannot use {key} (it is the key)".into(),
        });
    }
    let mut out = Vec::new();
    for (i, s) in stages.iter().enumerate() {
        out.push(resolve_stage(i, s, &key, &out)?);
    }
    if out.iter().filter(|s| s.window).count() > 1 {
        return Err(PlanError {
            setting: "stages",
            message: "only one stage can be the window".into(),
        });
    }
    if out.iter().filter(|s| s.source == StageSource::Ack).count() > 1 {
        return Err(PlanError {
            setting: "stages",
            message: "only one stage can be the publish confirmation (on = \"ack\")".into(),
        });
    }
    Ok(Some(TrackingPlan {
        key,
        clean: t.clean.unwrap_or(false),
        stages: out,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(key: &str) -> TemplateVars<'_> {
        TemplateVars {
            key,
            n: 42,
            seq: 7,
            producer: 3,
            run: 0xabc,
        }
    }

    #[test]
    fn templates_render_and_reject_unknown_variables() {
        let t = Template::check("x", "{n}-{run}/{producer}.{seq}:{key}").unwrap();
        let mut s = String::new();
        t.render(&vars("K"), &mut s);
        assert_eq!(s, "42-00000abc/3.7:K");
        assert!(Template::check("x", "{nope}").is_err());
        assert!(Template::check("x", "{n").is_err());
    }

    fn queue_stage(name: &str, queue: &str) -> StageSection {
        StageSection {
            name: Some(name.into()),
            queue: Some(queue.into()),
            ..Default::default()
        }
    }

    #[test]
    fn stages_resolve_and_group_by_queue() {
        let t = TrackingSection {
            key: Some("{n}-{run}".into()),
            clean: Some(true),
        };
        let mut events = queue_stage("Delivered", "ev");
        events.body = Some("DELIVERED".into());
        events.key = Some(vec!["property:baMessageID".into(), "correlation-id".into()]);
        events.window = Some(true);
        let mut failed = queue_stage("Failed", "ev");
        failed.failure = Some(true);
        failed.key = Some(vec!["property:messageID".into()]);
        let mut reply = queue_stage("Replied", "re");
        reply.key = Some(vec!["correlation-id".into()]);
        reply.rekey = Some("property:messageID".into());
        let sent = StageSection {
            name: Some("Sent".into()),
            on: Some("ack".into()),
            ..Default::default()
        };
        let p = resolve_tracking(&t, &[sent, reply, events, failed])
            .unwrap()
            .unwrap();
        assert_eq!(p.window_stage(), Some(2));
        assert_eq!(p.stages[0].source, StageSource::Ack);
        assert_eq!(
            p.stages[2].keys,
            vec![
                KeySource::Property("baMessageID".into()),
                KeySource::CorrelationId
            ]
        );
        assert!(!p.stages[3].required());
        let q = p.queues();
        assert_eq!(q.len(), 2);
        assert_eq!(q[0].stages, vec![1]);
        assert_eq!(q[1].stages, vec![2, 3]);
    }

    #[test]
    fn bad_stages_name_the_stage() {
        let t = TrackingSection::default();
        let mut a = queue_stage("A", "q");
        a.key = Some(vec!["header".into()]);
        let e = resolve_tracking(&t, &[a]).unwrap_err();
        assert!(e.message.starts_with("stage 1: key `header`"), "{e}");
        let e = resolve_tracking(&t, &[queue_stage("A", "q"), queue_stage("A", "r")]).unwrap_err();
        assert!(e.message.contains("used twice"), "{e}");
        let stamped = TrackingSection {
            key: Some("{n}".into()),
            clean: None,
        };
        let e = resolve_tracking(&stamped, &[queue_stage("A", "q")]).unwrap_err();
        assert!(e.message.contains("stamp key"), "{e}");
        let e = resolve_tracking(&stamped, &[]).unwrap_err();
        assert_eq!(e.setting, "tracking");
    }

    #[test]
    fn message_properties_keep_their_types() {
        let m: MessageSection = toml::from_str(
            "correlation_id = \"{key}\"\n[properties]\na = \"x-{n}\"\nb = true\nc = 5\n",
        )
        .unwrap();
        let p = resolve_message(&m).unwrap();
        assert_eq!(p.properties.len(), 3);
        assert_eq!(p.properties[1], ("b".into(), PropertyTemplate::Bool(true)));
        let bad: MessageSection = toml::from_str("[properties]\nf = 1.5\n").unwrap();
        assert!(resolve_message(&bad).is_err());
    }
}
