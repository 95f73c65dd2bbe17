//! Topic popularity (`[topics] popularity`, `--topic-popularity`): production traffic is not
//! spread evenly over topics. A few are hot, most are quiet.
//!
//! Popularity places the producers. All producers send at the same rate, so a topic's traffic
//! is in proportion to the number of producers it has. Topic `i` gets a share of the run's
//! producers (`topics × producers per topic`) by its weight:
//!
//! - `uniform` (the default): the same number on every topic;
//! - `zipf:S`: weight `1 / (i + 1)^S`, so the first topic is the busiest (S = 1: twice the
//!   second, three times the third);
//! - `hot:T%:P%`: the first T% of the topics (at least one) share P% of the producers, the
//!   rest share what is left.
//!
//! Shares are rounded by largest remainder, so the counts add up to the total exactly. A topic
//! may get no producer (its consumers then expect nothing). Each producer still sends to one
//! topic, so integrity is tracked per producer as before.

use serde::{Deserialize, Serialize};

/// How producers are spread over topics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Popularity {
    /// The same number of producers on every topic.
    #[default]
    Uniform,
    /// Topic `i` weighs `1 / (i + 1)^s`.
    Zipf {
        /// The exponent (> 0).
        s: f64,
    },
    /// The first `topics` share of the topics gets `traffic` share of the producers.
    Hot {
        /// Share of the topics that is hot, in (0, 1).
        topics: f64,
        /// Share of the producers on them, in (0, 1].
        traffic: f64,
    },
}

impl Popularity {
    /// Parses `uniform`, `zipf:S` or `hot:T%:P%` (shares also as fractions: `hot:0.1:0.9`).
    pub fn parse(text: &str) -> Result<Popularity, String> {
        let t = text.trim();
        let expected = "expected uniform, zipf:S (S > 0) or hot:TOPICS%:TRAFFIC% (hot:10%:90%)";
        if t == "uniform" {
            return Ok(Popularity::Uniform);
        }
        if let Some(s) = t.strip_prefix("zipf:") {
            let s: f64 = s
                .trim()
                .parse()
                .map_err(|_| format!("`{t}`: the Zipf exponent is not a number; {expected}"))?;
            if !(s > 0.0 && s.is_finite()) {
                return Err(format!("`{t}`: the Zipf exponent must be above 0"));
            }
            return Ok(Popularity::Zipf { s });
        }
        if let Some(rest) = t.strip_prefix("hot:") {
            let mut parts = rest.split(':');
            let (Some(a), Some(b), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(format!("`{t}`: {expected}"));
            };
            let (topics, traffic) = (share(a, t)?, share(b, t)?);
            if !(topics > 0.0 && topics < 1.0) {
                return Err(format!(
                    "`{t}`: the hot share of topics must be between 0 and 100%"
                ));
            }
            if !(traffic > 0.0 && traffic <= 1.0) {
                return Err(format!(
                    "`{t}`: the hot share of traffic must be above 0, at most 100%"
                ));
            }
            return Ok(Popularity::Hot { topics, traffic });
        }
        Err(format!("`{t}`: {expected}"))
    }

    /// Each topic's weight (they add up to 1).
    pub fn weights(&self, topics: usize) -> Vec<f64> {
        let n = topics.max(1);
        let raw: Vec<f64> = match *self {
            Popularity::Uniform => vec![1.0; n],
            Popularity::Zipf { s } => (0..n).map(|i| 1.0 / ((i + 1) as f64).powf(s)).collect(),
            Popularity::Hot { topics, traffic } => {
                let hot = ((n as f64 * topics).round() as usize).clamp(1, n);
                let cold = n - hot;
                let traffic = if cold == 0 { 1.0 } else { traffic };
                (0..n)
                    .map(|i| {
                        if i < hot {
                            traffic / hot as f64
                        } else {
                            (1.0 - traffic) / cold as f64
                        }
                    })
                    .collect()
            }
        };
        let sum: f64 = raw.iter().sum();
        raw.into_iter().map(|w| w / sum).collect()
    }

    /// How many of `producers` each of `topics` topics gets (largest remainder: they add up).
    pub fn place(&self, producers: u32, topics: usize) -> Vec<u32> {
        let w = self.weights(topics);
        let exact: Vec<f64> = w.iter().map(|w| w * producers as f64).collect();
        let mut counts: Vec<u32> = exact.iter().map(|x| x.floor() as u32).collect();
        let mut left = producers - counts.iter().sum::<u32>();
        let mut order: Vec<usize> = (0..counts.len()).collect();
        // Largest remainder first; ties to the more popular (lower) topic.
        order.sort_by(|&a, &b| {
            let (ra, rb) = (exact[a] - exact[a].floor(), exact[b] - exact[b].floor());
            rb.total_cmp(&ra).then(a.cmp(&b))
        });
        for i in order {
            if left == 0 {
                break;
            }
            counts[i] += 1;
            left -= 1;
        }
        counts
    }

    /// Producer `id`'s topic index for `producers` over `topics` (producers are numbered topic
    /// by topic).
    pub fn topic_of(placement: &[u32], id: u32) -> usize {
        let mut end = 0;
        for (t, c) in placement.iter().enumerate() {
            end += c;
            if id < end {
                return t;
            }
        }
        placement.len().saturating_sub(1)
    }
}

/// `10%` or `0.1`.
fn share(v: &str, whole: &str) -> Result<f64, String> {
    let v = v.trim();
    let parsed = match v.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|x| x / 100.0),
        None => v.parse::<f64>(),
    };
    parsed.map_err(|_| format!("`{whole}`: `{v}` is not a share (10% or 0.1)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_parse_and_bad_ones_say_what_was_expected() {
        assert_eq!(Popularity::parse("uniform").unwrap(), Popularity::Uniform);
        assert_eq!(
            Popularity::parse("zipf:1.2").unwrap(),
            Popularity::Zipf { s: 1.2 }
        );
        assert_eq!(
            Popularity::parse("hot:10%:90%").unwrap(),
            Popularity::Hot {
                topics: 0.1,
                traffic: 0.9
            }
        );
        assert_eq!(
            Popularity::parse("hot:0.2:0.8").unwrap(),
            Popularity::Hot {
                topics: 0.2,
                traffic: 0.8
            }
        );
        for bad in [
            "zipf",
            "zipf:0",
            "zipf:x",
            "hot:10%",
            "hot:0%:50%",
            "hot:10%:0",
            "pareto",
        ] {
            let e = Popularity::parse(bad).unwrap_err();
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn placements_add_up_and_follow_the_weights() {
        let u = Popularity::Uniform.place(12, 4);
        assert_eq!(u, [3, 3, 3, 3]);
        // Zipf s = 1 over 4 topics: weights 12/25, 6/25, 4/25, 3/25 of 100.
        let z = Popularity::Zipf { s: 1.0 }.place(100, 4);
        assert_eq!(z, [48, 24, 16, 12]);
        // 10% of 10 topics (one) gets 90% of 100 producers; 9 cold ones share 10.
        let h = Popularity::Hot {
            topics: 0.1,
            traffic: 0.9,
        }
        .place(100, 10);
        assert_eq!(h[0], 90);
        assert_eq!(h.iter().sum::<u32>(), 100);
        assert!(h[1..].iter().all(|&c| c == 1 || c == 2), "{h:?}");
        // Fewer producers than topics: the popular ones get them.
        let few = Popularity::Zipf { s: 1.0 }.place(3, 10);
        assert_eq!(few.iter().sum::<u32>(), 3);
        assert!(few[0] >= 1, "{few:?}");
    }

    #[test]
    fn producers_are_numbered_topic_by_topic() {
        let p = [3, 0, 2];
        let topics: Vec<usize> = (0..5).map(|i| Popularity::topic_of(&p, i)).collect();
        assert_eq!(topics, [0, 0, 0, 2, 2]);
    }
}
