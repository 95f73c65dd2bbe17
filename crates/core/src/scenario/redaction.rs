//! Where a [`RunPlan`] carries credentials, and its redacted copy: the one place that lists
//! them, so a new URL or header in the plan is redacted by adding it here (and the test below,
//! which fills every such place with one secret, fails until it is).
//!
//! The rule itself (what of a URL or a header is secret) is [`crate::redact`]'s.

use super::plan::RunPlan;
use super::stages::StageSource;
use crate::redact::{self, HeaderRule, Secrets};

impl RunPlan {
    /// The header rule of this run: the built-in credential headers plus `redact_headers`.
    pub fn header_rule(&self) -> HeaderRule {
        // `resolve` refused bad patterns; a plan read back from a file with a bad one still
        // redacts the built-in headers and every header the valid patterns match.
        HeaderRule::new(&self.redact_headers).unwrap_or_else(|_| {
            let valid: Vec<&String> = self
                .redact_headers
                .iter()
                .filter(|p| HeaderRule::new(&[p.as_str()]).is_ok())
                .collect();
            HeaderRule::new(&valid).unwrap_or_default()
        })
    }

    /// Every URL of the plan that may carry credentials: the target, `consume_from`, a
    /// driver's proxy and the stages' own targets (the `ecp` preset's outbox and inbox
    /// brokers).
    fn urls_mut(&mut self) -> Vec<&mut String> {
        let mut v = vec![&mut self.target];
        v.extend(self.consume_from.as_mut());
        v.extend(self.drivers.urls_mut());
        if let Some(t) = &mut self.tracking {
            for s in &mut t.stages {
                if let StageSource::Queue {
                    target: Some(url), ..
                } = &mut s.source
                {
                    v.push(url);
                }
            }
        }
        v
    }

    /// A copy safe to print and write: every URL and credential header redacted by
    /// [`crate::redact`]'s rule. The results file, and so every report, the dashboard and the
    /// run history, only ever sees this copy.
    pub fn redacted(&self) -> RunPlan {
        let rule = self.header_rule();
        let mut r = self.clone();
        for u in r.urls_mut() {
            *u = redact::url(u);
        }
        for (name, value) in r.drivers.headers_mut() {
            *value = rule.value(name, value).to_string();
        }
        r
    }

    /// The secret values of this plan, to scrub from free text (error messages, warnings,
    /// events) before it is printed or written.
    pub fn secrets(&self) -> Secrets {
        let rule = self.header_rule();
        let mut s = Secrets::new();
        let mut plan = self.clone();
        for u in plan.urls_mut() {
            s.add_url(u);
        }
        for (name, value) in plan.drivers.headers_mut() {
            if rule.is_secret(name) {
                s.add_header_value(value);
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use crate::presets::ecp::{EcpOptions, scenario};
    use crate::scenario::{Scenario, resolve};

    const SECRET: &str = "S3cr3t-XYZZY-42";

    fn plan(toml: &str) -> crate::scenario::RunPlan {
        resolve(&Scenario::from_str_named(toml, "t").unwrap(), 1).unwrap()
    }

    /// One secret in every place a plan can carry one: none of it survives redaction, and the
    /// scrubber knows each of them.
    #[test]
    fn no_secret_survives_in_the_redacted_plan() {
        let mut p = plan(&format!(
            r#"target = "mqtt://alice:{SECRET}@a:1883,b:1883"
[consumers]
target = "nats://bob:{SECRET}@h:4222,nats://{SECRET}@h2:4222"
[output]
redact_headers = ["x-tenant-*"]
[tracking]
[[stages]]
name = "Sent"
on = "ack"
[[stages]]
name = "Far"
queue = "q"
target = "mqtt://carol:{SECRET}@far:1883/?token={SECRET}"
"#
        ));
        // A driver's headers, as the HTTP driver's plan holds them.
        p.drivers = serde_json::from_value(serde_json::json!({"http": {"headers": [
            ["Authorization", format!("Bearer {SECRET}")], ["Cookie", format!("s={SECRET}")],
            ["X-Api-Key", SECRET], ["X-Tenant-Sig", SECRET], ["Accept", "text/plain"]],
            "proxy": format!("http://dave:{SECRET}@proxy:3128")}}))
        .unwrap();
        assert!(serde_json::to_string(&p).unwrap().contains(SECRET));
        let r = p.redacted();
        let json = serde_json::to_string(&r).unwrap();
        assert!(!json.contains(SECRET), "{json}");
        assert_eq!(r.target, "mqtt://alice:***@a:1883,b:1883");
        assert!(json.contains("carol:***@far"), "{json}");
        assert!(json.contains(r#"["Accept","text/plain"]"#), "{json}");
        assert!(json.contains("dave:***@proxy:3128"), "{json}");
        assert_eq!(r.redact_headers, vec!["x-tenant-*"]);
        let s = p.secrets();
        assert_eq!(
            s.scrub(&format!("connect failed: {SECRET} / Bearer {SECRET}")),
            "connect failed: *** / ***"
        );
        // The original is untouched: it is what the drivers connect with.
        assert!(p.target.contains(SECRET));
    }

    /// The `ecp` preset's outbox and inbox URLs become the target and the stages' targets.
    #[test]
    fn ecp_preset_urls_are_redacted() {
        let o = EcpOptions {
            outbox_url: format!("amqp10://endpoint:{SECRET}@out:5672"),
            inbox_url: format!("amqp10://endpoint:{SECRET}@in:5672"),
            ..EcpOptions::default()
        };
        let p = resolve(&scenario(&o), 1).unwrap();
        assert!(serde_json::to_string(&p).unwrap().contains("@in:5672"));
        let json = serde_json::to_string(&p.redacted()).unwrap();
        assert!(!json.contains(SECRET), "{json}");
        assert!(json.contains("endpoint:***@in:5672"), "{json}");
    }

    #[test]
    fn bad_header_patterns_are_refused_with_the_setting() {
        let e = resolve(
            &Scenario::from_str_named("[output]\nredact_headers = [\"x-(a|b)\"]\n", "t").unwrap(),
            1,
        )
        .unwrap_err();
        assert_eq!(e.setting, "output.redact_headers");
    }
}
