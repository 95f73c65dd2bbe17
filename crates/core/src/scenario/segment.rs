//! Segmented runs: one run split into N disjoint slices that run as separate processes (on one
//! machine or N, e.g. the pods of a Kubernetes Indexed Job) and merge back into one results file.
//!
//! Segment `I/N` (I from 0, as Kubernetes' `JOB_COMPLETION_INDEX`) runs every producer, consumer
//! and connection whose *global* index `g` satisfies `g % N == I`. Everything keeps its global
//! index: producer ids in stamps, consumer ids, client ids and connection ids, so ids and
//! sequence streams never collide across segments. Rates and message quotas are split by the
//! global producer count (a producer paces `1/P` of the whole run's rate and sends its global
//! share of `--messages`), so the N segments together are exactly the whole run.
//!
//! A run can also be split by role (`--segment producers` and `--segment consumers`, two
//! segments): one process runs every producer, the other every consumer. That is how a
//! brokerless protocol (ZeroMQ) is measured between two processes, or how the sending and the
//! receiving side of a broker are put on different machines. Stamps carry the wall-anchored
//! send time, so end-to-end latency is measured across the two processes as within one.
//!
//! Every segment of a run must share its run id (consumers ignore stamps of other runs): it is
//! derived from the plan and the start time, so identical command lines agree without talking
//! to each other (see [`segment_run_id`]).

use serde::{Deserialize, Serialize};

/// The environment variable Kubernetes Indexed Jobs set in every pod.
pub const INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

/// Which slice of the run this process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Segment {
    /// This segment, from 0.
    pub index: u32,
    /// How many segments the run has.
    pub count: u32,
    /// How the run is cut (absent in results files of task-split runs).
    #[serde(default, skip_serializing_if = "Split::is_tasks")]
    pub split: Split,
}

/// How a segmented run is cut into segments.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// Every task by global index, `g % N == I` (`--segment I/N`).
    #[default]
    Tasks,
    /// By role, two segments: 0 runs every producer, 1 every consumer (`--segment producers`,
    /// `--segment consumers`).
    Roles,
}

impl Split {
    /// Whether this is the default cut (kept out of results files, which then read as before).
    pub fn is_tasks(&self) -> bool {
        *self == Split::Tasks
    }
}

impl Segment {
    /// Parses `I/N` (I from 0 to N-1) or `auto/N`, which reads I from `index_env` (the value of
    /// [`INDEX_ENV`], passed in so tests do not depend on the environment).
    pub fn parse(s: &str, index_env: Option<&str>) -> Result<Segment, String> {
        let role = |index| Segment {
            index,
            count: 2,
            split: Split::Roles,
        };
        match s.trim() {
            "producers" => return Ok(role(0)),
            "consumers" => return Ok(role(1)),
            _ => {}
        }
        let (i, n) = s.split_once('/').ok_or_else(|| {
            format!("`{s}`: expected I/N (e.g. 0/4), auto/N, producers or consumers")
        })?;
        let count: u32 = n
            .trim()
            .parse()
            .map_err(|_| format!("`{s}`: the segment count `{n}` is not a whole number"))?;
        if count == 0 {
            return Err(format!("`{s}`: the segment count must be at least 1"));
        }
        let index: u32 = if i.trim() == "auto" {
            let v = index_env.ok_or_else(|| {
                format!("`{s}`: auto needs {INDEX_ENV} (set by Kubernetes Indexed Jobs)")
            })?;
            v.trim()
                .parse()
                .map_err(|_| format!("`{s}`: {INDEX_ENV}=`{v}` is not a whole number"))?
        } else {
            i.trim().parse().map_err(|_| {
                format!(
                    "`{s}`: the segment index `{i}` is not a whole number (segments count from 0)"
                )
            })?
        };
        if index >= count {
            return Err(format!(
                "`{s}`: segment {index} does not exist in a run of {count} (segments count from 0 to {})",
                count - 1
            ));
        }
        Ok(Segment {
            index,
            count,
            split: Split::Tasks,
        })
    }

    /// Whether producer `global` (its index in the whole run) runs in this segment.
    #[inline]
    pub fn owns_producer(&self, global: u64) -> bool {
        match self.split {
            Split::Tasks => self.owns(global),
            Split::Roles => self.index == 0,
        }
    }

    /// Whether consumer `global` (its index in the whole run) runs in this segment.
    #[inline]
    pub fn owns_consumer(&self, global: u64) -> bool {
        match self.split {
            Split::Tasks => self.owns(global),
            Split::Roles => self.index == 1,
        }
    }

    /// How many of the run's `total` producers run in this segment.
    pub fn producer_share(&self, total: u64) -> u64 {
        match self.split {
            Split::Tasks => self.share(total),
            Split::Roles if self.index == 0 => total,
            Split::Roles => 0,
        }
    }

    /// Whether the task with global index `global` runs in this segment of a task split
    /// (connections, whose runs cannot be split by role).
    #[inline]
    pub fn owns(&self, global: u64) -> bool {
        global % self.count as u64 == self.index as u64
    }

    /// This segment's share of `total` whole things spread round-robin (the first `total % N`
    /// segments get one more) in a task split.
    pub fn share(&self, total: u64) -> u64 {
        let n = self.count as u64;
        total / n + u64::from((self.index as u64) < total % n)
    }

    /// `I/N`, `producers` or `consumers`, as the user wrote it.
    pub fn label(&self) -> String {
        match (self.split, self.index) {
            (Split::Roles, 0) => "producers".to_string(),
            (Split::Roles, _) => "consumers".to_string(),
            (Split::Tasks, i) => format!("{i}/{}", self.count),
        }
    }
}

/// The run id every segment of one run derives alike: a hash of the plan (without the segment,
/// the targets — segments may reach different nodes of one cluster — and the run id itself)
/// and the start time.
pub fn segment_run_id(plan_json: &serde_json::Value, start_at_unix_ms: Option<u64>) -> u32 {
    let mut v = plan_json.clone();
    if let Some(o) = v.as_object_mut() {
        for k in [
            "run_id",
            "segment",
            "target",
            "consume_from",
            "start_at_unix_ms",
        ] {
            o.remove(k);
        }
    }
    let text = format!("{v}|{start_at_unix_ms:?}");
    // FNV-1a: stable across builds and platforms (std's hasher is not).
    let mut h: u32 = 0x811c_9dc5;
    for b in text.bytes() {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h.max(1)
}

/// Parses a start instant: Unix milliseconds (`1795000000000`) or RFC 3339
/// (`2026-11-22T10:00:00Z`, `2026-11-22T10:00:00.250+01:00`). Returns Unix milliseconds.
pub fn parse_start_at(s: &str) -> Result<u64, String> {
    let s = s.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        let v: u64 = s.parse().map_err(|_| format!("`{s}`: too large"))?;
        // Seconds would be a date in 1970: say so rather than start 50 years late.
        if v < 100_000_000_000 {
            return Err(format!(
                "`{s}`: Unix time must be in milliseconds (13 digits), e.g. {}",
                v * 1000
            ));
        }
        return Ok(v);
    }
    let bad = || {
        format!(
            "`{s}`: expected RFC 3339 (2026-11-22T10:00:00Z or with an offset like +01:00) or Unix milliseconds"
        )
    };
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64, String> {
        s.get(r)
            .filter(|x| x.bytes().all(|c| c.is_ascii_digit()))
            .and_then(|x| x.parse().ok())
            .ok_or_else(bad)
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if b[13] != b':' || b[16] != b':' {
        return Err(bad());
    }
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return Err(bad());
    }
    let mut i = 19;
    let mut ms = 0i64;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return Err(bad());
        }
        let frac = &s[start..i];
        let padded: String = frac.chars().chain("000".chars()).take(3).collect();
        ms = padded.parse().map_err(|_| bad())?;
    }
    let offset_min = match &s[i..] {
        "Z" | "z" => 0,
        o if o.len() == 6 && matches!(&o[..1], "+" | "-") && &o[3..4] == ":" => {
            let oh = num(i + 1..i + 3)?;
            let om = num(i + 4..i + 6)?;
            let sign = if &o[..1] == "-" { -1 } else { 1 };
            sign * (oh * 60 + om)
        }
        _ => return Err(bad()),
    };
    // Days from civil (Howard Hinnant's algorithm).
    let yy = if mo <= 2 { y - 1 } else { y };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let unix_s = days * 86_400 + h * 3600 + mi * 60 + sec - offset_min * 60;
    if unix_s < 0 {
        return Err(bad());
    }
    Ok(unix_s as u64 * 1000 + ms as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_segments() {
        assert_eq!(
            Segment::parse("2/4", None),
            Ok(Segment {
                index: 2,
                count: 4,
                split: Split::Tasks
            })
        );
        assert_eq!(
            Segment::parse("auto/3", Some("1")),
            Ok(Segment {
                index: 1,
                count: 3,
                split: Split::Tasks
            })
        );
        let p = Segment::parse("producers", None).unwrap();
        let c = Segment::parse("consumers", None).unwrap();
        assert_eq!(
            (p.label().as_str(), c.label().as_str()),
            ("producers", "consumers")
        );
        assert!((0..5).all(|g| p.owns_producer(g) && !p.owns_consumer(g)));
        assert!((0..5).all(|g| c.owns_consumer(g) && !c.owns_producer(g)));
        assert_eq!((p.producer_share(7), c.producer_share(7)), (7, 0));
        assert!(
            Segment::parse("4/4", None)
                .unwrap_err()
                .contains("count from 0")
        );
        assert!(
            Segment::parse("auto/4", None)
                .unwrap_err()
                .contains(INDEX_ENV)
        );
        assert!(Segment::parse("1", None).unwrap_err().contains("I/N"));
        assert!(
            Segment::parse("senders", None)
                .unwrap_err()
                .contains("producers or consumers")
        );
        assert!(Segment::parse("0/0", None).is_err());
        assert!(Segment::parse("auto/2", Some("x")).is_err());
    }

    #[test]
    fn segments_partition_everything() {
        for n in 1..6u32 {
            let segs: Vec<Segment> = (0..n)
                .map(|index| Segment {
                    index,
                    count: n,
                    split: Split::Tasks,
                })
                .collect();
            for total in 0..20u64 {
                assert_eq!(segs.iter().map(|s| s.share(total)).sum::<u64>(), total);
                for g in 0..total {
                    assert_eq!(segs.iter().filter(|s| s.owns(g)).count(), 1);
                }
            }
        }
    }

    #[test]
    fn run_id_ignores_segment_and_target() {
        let a = serde_json::json!({"name": "x", "run_id": 5, "target": "nats://a:1", "segment": {"index": 0, "count": 2}, "size": 10});
        let b = serde_json::json!({"name": "x", "run_id": 9, "target": "nats://b:1", "segment": {"index": 1, "count": 2}, "size": 10});
        let c = serde_json::json!({"name": "x", "run_id": 9, "target": "nats://b:1", "size": 11});
        assert_eq!(segment_run_id(&a, Some(1)), segment_run_id(&b, Some(1)));
        assert_ne!(segment_run_id(&a, Some(1)), segment_run_id(&a, Some(2)));
        assert_ne!(segment_run_id(&b, Some(1)), segment_run_id(&c, Some(1)));
    }

    #[test]
    fn parses_start_times() {
        assert_eq!(parse_start_at("1795000000000"), Ok(1_795_000_000_000));
        assert!(
            parse_start_at("1795000000")
                .unwrap_err()
                .contains("milliseconds")
        );
        assert_eq!(parse_start_at("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(
            parse_start_at("2026-11-18T11:06:40Z"),
            Ok(1_795_000_000_000)
        );
        assert_eq!(
            parse_start_at("2026-11-18T12:06:40.25+01:00"),
            Ok(1_795_000_000_250)
        );
        assert_eq!(
            parse_start_at("2026-11-18T06:06:40.5-05:00"),
            Ok(1_795_000_000_500)
        );
        assert!(parse_start_at("2026-13-18T11:06:40Z").is_err());
        assert!(parse_start_at("tomorrow").is_err());
        assert!(parse_start_at("2026-11-18T11:06:40").is_err());
    }
}
