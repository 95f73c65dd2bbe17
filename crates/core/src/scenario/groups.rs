//! Groups: several kinds of clients in one run (`[[groups]]`), each with its own target, roles,
//! counts, rates, sizes, topics and client settings: slow devices beside fast publishers and a
//! dashboard on a wildcard, or MQTT devices beside an AMQP backend.
//!
//! ```toml
//! target = "mqtt://127.0.0.1:1883"   # what every group inherits unless it says otherwise
//! [phases]
//! duration = "60s"                   # shared: every group runs the same phases
//!
//! [[groups]]
//! name = "devices"
//! topics = { count = 100, pattern = "site/{i}" }
//! producers = { per_topic = 10, rate = 100 }
//! consumers = { per_topic = 0 }
//!
//! [[groups]]
//! name = "dashboard"
//! producers = { per_topic = 0 }
//! consumers = { per_topic = 1, subscribe = "site/#" }
//! ```
//!
//! Each group is the file's top level with the group's own keys laid over it ([`expand`]), so
//! it resolves into a [`RunPlan`] of its own through the one resolver. The groups then share
//! one run ([`link`]): one run id, producer ids that do not overlap (each group's start at its
//! [`GroupPlace::stamp_base`]), and a delivery account across groups, so a message one group
//! publishes and another group's wildcard subscriber receives is expected there and matched.
//! The runner releases every group at one instant and ends the drain when the run as a whole
//! has every expected delivery.
//!
//! What is shared stays at the top level and is refused inside a group: the phases (one
//! timeline, so the run's intervals add up tick by tick), the reporting tick and the
//! thresholds (judged on the run's totals).

use super::plan::{PlanError, RunPlan, SubscriptionMode};
use super::{PhasesSection, Scenario};
use serde::{Deserialize, Serialize};

/// A group's place in a run of several.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupPlace {
    /// The group's name (in reports and client ids).
    pub name: String,
    /// Its position among the run's groups, from 0.
    pub index: u32,
    /// How many groups the run has.
    pub count: u32,
    /// Added to this group's producer ids in stamps, so every producer of the run has an id of
    /// its own and consumers of any group tell their streams apart.
    pub stamp_base: u32,
    /// Per topic of this group: the receivers other groups have for it (consumers on the same
    /// broker whose subscription matches). Added to this group's own receivers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub elsewhere: Vec<u64>,
    /// Deliveries cross between this group and another (either way): its own account is then
    /// part of the run's, and only the run's loss is a loss.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub crosses: bool,
}

impl GroupPlace {
    /// Receivers other groups have for this group's topic `t`.
    pub fn elsewhere(&self, t: usize) -> u64 {
        self.elsewhere.get(t).copied().unwrap_or(0)
    }
}

/// The default client id in a run with groups: ids must differ across groups (an MQTT broker
/// drops the older of two sessions with one id).
pub const GROUP_CLIENT_ID: &str = "msgbench-{run}-{group}-{role}-{i}";

fn err(message: String) -> PlanError {
    PlanError {
        setting: "groups",
        message,
    }
}

/// Each group's scenario: the file's top level (without its groups) with the group's keys laid
/// over it. Refuses what groups cannot set (phases, tick, thresholds, tags) and names that are
/// missing, repeated or unfit for client ids.
pub fn expand(file: &Scenario) -> Result<Vec<Scenario>, PlanError> {
    let mut base = file.clone();
    base.groups.clear();
    let mut names: Vec<&str> = Vec::new();
    let mut out = Vec::with_capacity(file.groups.len());
    for (i, g) in file.groups.iter().enumerate() {
        let name = g
            .name
            .as_deref()
            .ok_or_else(|| err(format!("group {} has no `name`", i + 1)))?;
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(err(format!(
                "group name `{name}`: use letters, digits, `-`, `_` and `.` (it goes into client ids)"
            )));
        }
        if names.contains(&name) {
            return Err(err(format!("two groups are named `{name}`")));
        }
        names.push(name);
        let shared = [
            (g.phases != PhasesSection::default(), "phases"),
            (g.output.tick.is_some(), "output.tick"),
            (g.thresholds.is_some(), "thresholds"),
            (g.tags.is_some(), "tags"),
        ];
        if let Some((_, key)) = shared.iter().find(|(set, _)| *set) {
            return Err(err(format!(
                "group `{name}` sets `{key}`, which every group shares: set it at the top level"
            )));
        }
        let mut s = base.clone().overlay(g.clone());
        let template = s
            .client
            .client_id
            .clone()
            .unwrap_or_else(|| GROUP_CLIENT_ID.to_string());
        if !template.contains("{group}") {
            return Err(err(format!(
                "group `{name}`: client_id `{template}` has no `{{group}}`, so two groups would use the same client ids"
            )));
        }
        s.client.client_id = Some(template.replace("{group}", name));
        s.member = true;
        out.push(s);
    }
    Ok(out)
}

/// Joins the groups' plans into one run: the run id of the first, producer ids that do not
/// overlap, and each topic's receivers in the other groups.
pub fn link(plans: &mut [RunPlan]) -> Result<(), PlanError> {
    let count = plans.len() as u32;
    let run_id = plans.first().map_or(0, |p| p.run_id);
    let mut base = 0u32;
    for p in plans.iter() {
        if p.segment.is_some() {
            return Err(err(
                "a run with groups cannot be segmented (--segment)".into()
            ));
        }
        if p.tracking.is_some() {
            return Err(err(format!(
                "group `{}`: multi-stage tracking ([[stages]]) cannot run in a group",
                p.name
            )));
        }
    }
    let elsewhere: Vec<Vec<u64>> = (0..plans.len())
        .map(|i| {
            plans[i]
                .topics
                .iter()
                .map(|t| {
                    plans
                        .iter()
                        .enumerate()
                        .filter(|(j, _)| *j != i)
                        .map(|(_, other)| receivers_for(other, &plans[i].target, t))
                        .sum()
                })
                .collect()
        })
        .collect();
    let receives_others: Vec<bool> = (0..plans.len())
        .map(|i| {
            plans.iter().enumerate().any(|(j, other)| {
                j != i
                    && other
                        .topics
                        .iter()
                        .any(|t| receivers_for(&plans[i], &other.target, t) > 0)
            })
        })
        .collect();
    for (i, (p, elsewhere)) in plans.iter_mut().zip(elsewhere).enumerate() {
        p.run_id = run_id;
        let crosses = receives_others[i] || elsewhere.iter().any(|&n| n > 0);
        p.group = Some(GroupPlace {
            name: p.name.clone(),
            index: i as u32,
            count,
            stamp_base: base,
            elsewhere: if elsewhere.iter().all(|&n| n == 0) {
                Vec::new()
            } else {
                elsewhere
            },
            crosses,
        });
        base = base
            .checked_add(p.producers())
            .ok_or_else(|| err("more than 2^32 producers over all groups".into()))?;
    }
    Ok(())
}

/// How many of `plan`'s consumers receive a message published to `topic` on the broker at
/// `target`: none unless they consume from the same broker (same host and port); a wildcard
/// subscription counts where it matches.
fn receivers_for(plan: &RunPlan, target: &str, topic: &str) -> u64 {
    if plan.connections.is_some()
        || plan.consumers_per_topic == 0
        || authority(plan.consumer_target()) != authority(target)
    {
        return 0;
    }
    let covered = match &plan.subscribe {
        Some(filter) => covers(filter, topic),
        None => plan.topics.iter().any(|t| t == topic),
    };
    match (&plan.subscription, covered, plan.subscribe.is_some()) {
        (_, false, _) => 0,
        (SubscriptionMode::Queue { .. }, true, _) => 1,
        (SubscriptionMode::Fanout, true, true) => plan.consumers() as u64,
        (SubscriptionMode::Fanout, true, false) => plan.consumers_per_topic as u64,
    }
}

/// `host:port` of a URL, without scheme, credentials, path or query (`mqtt://u:p@h:1/x` → `h:1`).
fn authority(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let auth = rest.split(['/', '?', '#']).next().unwrap_or("");
    auth.rsplit_once('@').map_or(auth, |(_, h)| h)
}

/// Whether a subscription filter matches a topic, in the wildcard syntax of MQTT (`/`, `+` one
/// level, `#` the rest), NATS (`.`, `*`, `>`) and AMQP topic exchanges (`.`, `*`, `#` zero or
/// more words). A filter without wildcards matches itself only.
pub fn covers(filter: &str, topic: &str) -> bool {
    let sep = if filter.contains('/') || topic.contains('/') {
        '/'
    } else {
        '.'
    };
    let f: Vec<&str> = filter.split(sep).collect();
    let t: Vec<&str> = topic.split(sep).collect();
    matches(&f, &t)
}

fn matches(f: &[&str], t: &[&str]) -> bool {
    match (f.first(), t.first()) {
        (None, None) => true,
        (Some(&"#"), _) if f.len() == 1 => true,
        (Some(&"#"), _) => (0..=t.len()).any(|k| matches(&f[1..], &t[k..])),
        (Some(&">"), Some(_)) => f.len() == 1,
        (Some(&"+") | Some(&"*"), Some(_)) => matches(&f[1..], &t[1..]),
        (Some(a), Some(b)) if a == b => matches(&f[1..], &t[1..]),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(toml: &str) -> Result<Vec<RunPlan>, PlanError> {
        let s = Scenario::from_str_named(toml, "t").unwrap();
        let mut plans = expand(&s)?
            .iter()
            .map(|g| super::super::resolve(g, 7))
            .collect::<Result<Vec<_>, _>>()?;
        link(&mut plans)?;
        Ok(plans)
    }

    #[test]
    fn wildcards_match_as_the_brokers_do() {
        for (f, t, yes) in [
            ("site/#", "site/1/temp", true),
            ("site/#", "site", true),
            ("site/+/temp", "site/1/temp", true),
            ("site/+", "site/1/temp", false),
            ("site.*", "site.1", true),
            ("site.>", "site.1.x", true),
            ("site.>", "site", false),
            ("a.#.z", "a.z", true),
            ("a.#.z", "a.b.c.z", true),
            ("bench", "bench", true),
            ("bench", "bench2", false),
        ] {
            assert_eq!(covers(f, t), yes, "{f} {t}");
        }
    }

    #[test]
    fn groups_inherit_the_top_level_and_share_one_run() {
        let p = groups(
            "target = \"mqtt://127.0.0.1:1883\"\n[producers]\nrate = 100\n\
             [[groups]]\nname = \"devices\"\ntopics = { count = 4, pattern = \"site/{i}\" }\nconsumers = { per_topic = 0 }\n\
             [[groups]]\nname = \"dash\"\ntarget = \"mqtt://u:p@127.0.0.1:1883\"\nproducers = { per_topic = 0 }\nconsumers = { per_topic = 2, subscribe = \"site/#\" }\n\
             [[groups]]\nname = \"other\"\ntarget = \"nats://127.0.0.1:4222\"\nconsumers = { per_topic = 3, subscribe = \">\" }\n",
        )
        .unwrap();
        assert_eq!(p.len(), 3);
        assert!(p.iter().all(|p| p.run_id == p.run_id));
        let g: Vec<&GroupPlace> = p.iter().map(|p| p.group.as_ref().unwrap()).collect();
        assert_eq!(
            (g[0].stamp_base, g[1].stamp_base, g[2].stamp_base),
            (0, 4, 4)
        );
        // The dashboard's 2 consumers see every device topic; the NATS group is another broker.
        assert_eq!(g[0].elsewhere, vec![2, 2, 2, 2]);
        assert!(g[1].elsewhere.is_empty() && g[2].elsewhere.is_empty());
        assert_eq!(
            (g[0].crosses, g[1].crosses, g[2].crosses),
            (true, true, false)
        );
        assert_eq!(p[0].rate, p[2].rate);
        assert_eq!(
            p[0].client.client_id_for(1, "pub", 0),
            "msgbench-00000001-devices-pub-0"
        );
        assert_eq!(p[1].name, "dash");
    }

    #[test]
    fn shared_settings_and_bad_names_are_refused() {
        for (toml, needle) in [
            (
                "[[groups]]\nname = \"a\"\nphases = { duration = \"5s\" }\n",
                "`phases`",
            ),
            (
                "[[groups]]\nname = \"a\"\n[[groups]]\nname = \"a\"\n",
                "two groups",
            ),
            ("[[groups]]\ntarget = \"mem://\"\n", "no `name`"),
            ("[[groups]]\nname = \"a b\"\n", "letters"),
            (
                "[client]\nclient_id = \"x-{i}\"\n[[groups]]\nname = \"a\"\n",
                "{group}",
            ),
        ] {
            let e = groups(toml).unwrap_err().to_string();
            assert!(e.contains(needle), "{toml}: {e}");
        }
    }

    #[test]
    fn a_group_key_error_names_its_line() {
        let e = Scenario::from_str_named(
            "[[groups]]\nname = \"a\"\n\n[[groups]]\nname = \"b\"\nproducerz = 3\n",
            "f.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("f.toml:6:1:"), "{e}");
        assert!(e.contains("unknown field `producerz`"), "{e}");
        let e = Scenario::from_str_named("[[groups]]\nname = \"a\"\n[[groups.groups]]\n", "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("do not nest"), "{e}");
    }
}
