//! Journeys (`[connections] mode = "journey"`): what each virtual user of a connection workload
//! does, as data. gobench writes a virtual user's behaviour as a Go function; here it is a list
//! of steps every user runs in order, `repeat` times (0: until the measure phase ends):
//!
//! ```toml
//! [connections]
//! mode = "journey"
//! count = 1000              # virtual users
//! rate = 200                # users started per second
//! arrival = "poisson"
//! repeat = 3
//! journey = ["connect", "publish 10 at 5/s", "sleep exp:2s", "disconnect", "sleep 1s"]
//! ```
//!
//! Steps: `connect`; `disconnect` (the polite close); `subscribe` (to the user's topic) or
//! `subscribe TOPIC` (done when the server confirmed it; what arrives afterwards is counted as
//! received while the user publishes or waits); `publish N` (back to back), `publish N at R/s`
//! or `publish for D at R/s`; `request N`, `request N at R/s` or `request for D at R/s` (each
//! waits for its reply, whose round trip is recorded); `sleep D` (fixed) or `sleep exp:D` (exponential with mean D, as
//! independent users' think times). Each step is parsed as it is read, so a bad one
//! is reported at its file, line and column; the order is checked as a whole (publish only
//! while connected, connect only while not, and a repeated journey ends where it began).

use crate::units::{parse_count, parse_duration};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::time::Duration;

/// One step of a journey.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Open a session (its latency is the workload's connect latency).
    Connect,
    /// Close the session the protocol's polite way.
    Disconnect,
    /// Subscribe the open session to a topic (`None`: the user's own topic).
    Subscribe(Option<String>),
    /// Publish on the open session.
    Publish(Publish),
    /// Send requests on the open session, one at a time, each waiting for its reply.
    Request(Publish),
    /// Wait.
    Sleep {
        /// The wait, or its mean when exponential.
        mean: Duration,
        /// Drawn from an exponential distribution of that mean.
        exponential: bool,
    },
}

/// How much a publish or request step sends, and how fast.
#[derive(Debug, Clone, PartialEq)]
pub enum Publish {
    /// A number of messages.
    Count {
        /// How many.
        count: u64,
        /// Per second (`None`: back to back).
        rate: Option<f64>,
    },
    /// For a while, at a rate.
    For {
        /// How long.
        duration: Duration,
        /// Per second.
        rate: f64,
    },
}

impl std::str::FromStr for Step {
    type Err = String;

    fn from_str(s: &str) -> Result<Step, String> {
        let words: Vec<&str> = s.split_whitespace().collect();
        let expected = "expected `connect`, `disconnect`, `subscribe [TOPIC]`, `publish N [at \
                        R/s]`, `publish for D at R/s`, `request` (as publish), `sleep D` or \
                        `sleep exp:D`";
        match words.as_slice() {
            ["connect"] => Ok(Step::Connect),
            ["disconnect"] => Ok(Step::Disconnect),
            ["sleep", d] => {
                let (text, exponential) = match d.strip_prefix("exp:") {
                    Some(m) => (m, true),
                    None => (*d, false),
                };
                let mean = parse_duration(text).map_err(|e| format!("step `{s}`: {e}"))?;
                Ok(Step::Sleep { mean, exponential })
            }
            ["publish", rest @ ..] => Ok(Step::Publish(sending(s, rest, expected)?)),
            ["request", rest @ ..] => Ok(Step::Request(sending(s, rest, expected)?)),
            ["subscribe"] => Ok(Step::Subscribe(None)),
            ["subscribe", topic] => Ok(Step::Subscribe(Some((*topic).to_string()))),
            _ => Err(format!("step `{s}`: {expected}")),
        }
    }
}

/// What follows `publish` or `request` in step `s`: `N`, `N at R/s` or `for D at R/s`.
fn sending(s: &str, words: &[&str], expected: &str) -> Result<Publish, String> {
    match words {
        ["for", d, "at", r] => {
            let duration = parse_duration(d).map_err(|e| format!("step `{s}`: {e}"))?;
            let rate = per_second(s, r)?;
            Ok(Publish::For { duration, rate })
        }
        [n, rest @ ..] => {
            let count = parse_count(n)
                .ok()
                .filter(|c| *c >= 1.0 && c.fract() == 0.0)
                .ok_or_else(|| {
                    format!("step `{s}`: `{n}` is not a whole number of messages (1 or more)")
                })? as u64;
            let rate = match rest {
                [] => None,
                ["at", r] => Some(per_second(s, r)?),
                _ => return Err(format!("step `{s}`: {expected}")),
            };
            Ok(Publish::Count { count, rate })
        }
        [] => Err(format!("step `{s}`: {expected}")),
    }
}

/// `R/s` (or a bare `R`) in a step: a positive rate.
fn per_second(step: &str, r: &str) -> Result<f64, String> {
    let n = r.strip_suffix("/s").unwrap_or(r);
    parse_count(n)
        .ok()
        .filter(|v| v.is_finite() && *v > 0.0)
        .ok_or_else(|| format!("step `{step}`: `{r}` is not a positive rate (like 5/s)"))
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = crate::units::format_duration;
        match self {
            Step::Connect => f.write_str("connect"),
            Step::Disconnect => f.write_str("disconnect"),
            Step::Subscribe(None) => f.write_str("subscribe"),
            Step::Subscribe(Some(t)) => write!(f, "subscribe {t}"),
            Step::Publish(p) => write!(f, "publish {p}"),
            Step::Request(p) => write!(f, "request {p}"),
            Step::Sleep {
                mean,
                exponential: false,
            } => write!(f, "sleep {}", d(*mean)),
            Step::Sleep {
                mean,
                exponential: true,
            } => write!(f, "sleep exp:{}", d(*mean)),
        }
    }
}

impl fmt::Display for Publish {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Publish::Count { count, rate: None } => write!(f, "{count}"),
            Publish::Count {
                count,
                rate: Some(r),
            } => write!(f, "{count} at {r}/s"),
            Publish::For { duration, rate } => write!(
                f,
                "for {} at {rate}/s",
                crate::units::format_duration(*duration)
            ),
        }
    }
}

impl Serialize for Step {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Step {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Step, D::Error> {
        // Parsed inside the visitor, so a TOML error carries the step's own position rather
        // than its array's.
        struct StepText;
        impl serde::de::Visitor<'_> for StepText {
            type Value = Step;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a journey step, like \"publish 10 at 5/s\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Step, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(StepText)
    }
}

/// Checks a journey's order for `repeat` passes (0: until the end): subscribe, publish and
/// disconnect only while connected, connect only while not; a journey run more than once must end
/// disconnected, as it began (one run once may end connected: the session is then held until
/// the end).
pub fn check(steps: &[Step], repeat: u32) -> Result<(), String> {
    if steps.is_empty() {
        return Err("a journey needs at least one step (like \"connect\")".into());
    }
    if !steps.contains(&Step::Connect) {
        return Err("a journey needs a `connect` step".into());
    }
    let mut connected = false;
    for (i, step) in steps.iter().enumerate() {
        let n = i + 1;
        match step {
            Step::Connect if connected => {
                return Err(format!(
                    "step {n} (`connect`): already connected; put `disconnect` before it"
                ));
            }
            Step::Connect => connected = true,
            Step::Disconnect | Step::Subscribe(_) | Step::Publish(_) | Step::Request(_)
                if !connected =>
            {
                return Err(format!(
                    "step {n} (`{step}`): not connected; put `connect` before it"
                ));
            }
            Step::Disconnect => connected = false,
            Step::Subscribe(_) | Step::Publish(_) | Step::Request(_) | Step::Sleep { .. } => {}
        }
    }
    if connected && repeat != 1 {
        return Err(
            "a journey that repeats must end with `disconnect` (each pass begins with a new \
             connection); or set repeat = 1 to hold the last session until the end"
                .into(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(s: &[&str]) -> Vec<Step> {
        s.iter().map(|t| t.parse().unwrap()).collect()
    }

    #[test]
    fn steps_parse_and_print_back() {
        for s in [
            "connect",
            "disconnect",
            "publish 10",
            "publish 10 at 5/s",
            "publish for 2s at 100/s",
            "sleep 1s",
            "sleep exp:250ms",
            "subscribe",
            "subscribe devices/+/state",
            "request 3",
            "request for 1s at 20/s",
        ] {
            let step: Step = s.parse().unwrap();
            assert_eq!(step.to_string(), s);
        }
        assert_eq!(
            "publish 3 at 2.5".parse::<Step>().unwrap(),
            Step::Publish(Publish::Count {
                count: 3,
                rate: Some(2.5)
            })
        );
    }

    #[test]
    fn bad_steps_say_what_was_expected() {
        for (s, needle) in [
            ("jump", "expected `connect`"),
            ("publish x", "whole number"),
            ("publish 0", "whole number"),
            ("publish 5 at 0/s", "positive rate"),
            ("publish 5 every 1s", "expected"),
            ("sleep soon", "step `sleep soon`"),
            ("subscribe a b", "expected `connect`"),
            ("request x", "whole number"),
            ("request", "expected `connect`"),
        ] {
            let e = s.parse::<Step>().unwrap_err();
            assert!(e.contains(needle), "{s}: {e}");
        }
    }

    #[test]
    fn the_order_is_checked() {
        assert!(check(&steps(&["connect", "publish 1", "disconnect"]), 0).is_ok());
        assert!(check(&steps(&["sleep 1s", "connect", "publish 1"]), 1).is_ok());
        let e = check(&steps(&["subscribe", "connect"]), 1).unwrap_err();
        assert!(e.contains("step 1 (`subscribe`): not connected"), "{e}");
        let e = check(&steps(&["publish 1", "connect"]), 1).unwrap_err();
        assert!(e.contains("step 1 (`publish 1`): not connected"), "{e}");
        let e = check(&steps(&["connect", "connect"]), 1).unwrap_err();
        assert!(e.contains("step 2"), "{e}");
        let e = check(&steps(&["connect", "publish 1"]), 3).unwrap_err();
        assert!(e.contains("must end with `disconnect`"), "{e}");
        assert!(check(&steps(&["sleep 1s"]), 1).is_err());
        assert!(check(&[], 1).is_err());
    }
}
