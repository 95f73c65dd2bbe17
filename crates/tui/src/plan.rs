//! Where a run is: its phase, how far through it, and how long is left — computed only from the
//! records of the results file (the plan in `begin`, `phase` events, `interval` counts).
//!
//! Both live views use it: the TUI's phase gauge and the plain mode's progress line.

use crate::format;
use msgbench_core::units::parse_duration;
use msgbench_metrics::EventKind;
use msgbench_metrics::Phase;
use msgbench_report::Record;
use serde_json::Value;

/// When the measure phase ends, as the plan says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Goal {
    /// After this many seconds.
    Duration(f64),
    /// After this many messages were sent (all producers).
    Messages(u64),
    /// Hold mode: open `count` connections (the ramp), then hold them `hold_s` seconds.
    Hold {
        /// Connections to open.
        count: u64,
        /// Seconds to hold them once open.
        hold_s: f64,
    },
    /// Connect storm of this many cycles.
    Cycles(u64),
}

/// The facts of the plan the live views show, read leniently from the `begin` record's JSON
/// (a missing field gives a default, never an error: a view must not fail on a plan it does
/// not fully understand).
#[derive(Debug, Clone, PartialEq)]
pub struct PlanInfo {
    /// Run name.
    pub name: String,
    /// Target URL (credentials already removed by the writer).
    pub target: String,
    /// Consumers' URL of a cross-protocol pipeline.
    pub consume_from: Option<String>,
    /// One line: topics, producers → consumers, subscription, rate, size.
    pub summary: String,
    /// Warm-up length, s.
    pub warmup_s: f64,
    /// How the measure phase ends.
    pub goal: Goal,
    /// Longest drain, s.
    pub drain_s: f64,
    /// Interval length, s.
    pub tick_s: f64,
    /// Stage names of a multi-stage run, in order.
    pub stages: Vec<String>,
    /// Fan-out subscription: open sequence gaps are (so far) lost messages.
    pub fanout: bool,
    /// A connection workload (hold or storm) rather than pub/sub.
    pub connections: bool,
}

fn secs(v: Option<&Value>, default: f64) -> f64 {
    match v {
        Some(Value::String(s)) => parse_duration(s).map_or(default, |d| d.as_secs_f64()),
        Some(Value::Number(n)) => n.as_f64().unwrap_or(default),
        _ => default,
    }
}

fn text(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or("").to_string()
}

fn uint(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

impl PlanInfo {
    /// Reads the plan of a `begin` record.
    pub fn from_plan(plan: &Value) -> PlanInfo {
        let conn = plan.get("connections").filter(|c| !c.is_null());
        let measure = plan.get("measure");
        let measure_s = secs(measure.and_then(|m| m.get("duration")), 0.0);
        let messages = measure
            .and_then(|m| m.get("messages"))
            .and_then(Value::as_u64);
        let goal = match conn {
            Some(c) if c.get("mode").and_then(Value::as_str) == Some("hold") => Goal::Hold {
                count: uint(c, "count"),
                hold_s: secs(c.get("hold"), 0.0),
            },
            Some(c) if c.get("count").and_then(Value::as_u64).is_some() => {
                Goal::Cycles(uint(c, "count"))
            }
            _ => match messages {
                Some(n) => Goal::Messages(n),
                None => Goal::Duration(measure_s),
            },
        };
        let stages: Vec<String> = plan
            .pointer("/tracking/stages")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(|s| text(s, "name")).collect())
            .unwrap_or_default();
        let fanout = plan.pointer("/subscription/mode").and_then(Value::as_str) != Some("queue");
        PlanInfo {
            name: text(plan, "name"),
            target: text(plan, "target"),
            consume_from: Some(text(plan, "consume_from")).filter(|s| !s.is_empty()),
            summary: summary(plan, conn),
            warmup_s: secs(plan.get("warmup"), 0.0),
            goal,
            drain_s: secs(plan.get("drain"), 0.0),
            tick_s: secs(plan.get("tick"), 1.0),
            stages,
            fanout,
            connections: conn.is_some(),
        }
    }

    /// Whether the run is long enough to deserve a progress line in plain mode: a message or
    /// connection count, or at least `min_s` seconds of warm-up plus measure.
    pub fn is_long(&self, min_s: f64) -> bool {
        match self.goal {
            Goal::Duration(d) => self.warmup_s + d >= min_s,
            _ => true,
        }
    }
}

fn summary(plan: &Value, conn: Option<&Value>) -> String {
    if let Some(c) = conn {
        let mode = text(c, "mode");
        let count = c.get("count").and_then(Value::as_u64);
        let rate = c
            .get("rate")
            .and_then(Value::as_f64)
            .map_or("as fast as possible".into(), |r| {
                format!("{}/s", format::si(r))
            });
        return match (mode.as_str(), count) {
            ("hold", n) => format!(
                "hold {} connections · attempts {rate} · {} at a time",
                format::count(n.unwrap_or(0)),
                uint(c, "concurrency")
            ),
            (_, n) => format!(
                "connect storm{} · attempts {rate} · {} at a time",
                n.map(|n| format!(" of {} cycles", format::count(n)))
                    .unwrap_or_default(),
                uint(c, "concurrency")
            ),
        };
    }
    let topics = plan
        .get("topics")
        .and_then(Value::as_array)
        .map_or(1, Vec::len);
    let rate = match plan.get("rate") {
        Some(r) => match r.get("shape").and_then(Value::as_str) {
            Some("unlimited") | None => "unlimited".to_string(),
            Some(shape) => match r.get("rate").and_then(Value::as_f64) {
                Some(v) if shape == "constant" => format!("{} msgs/s", format::si(v)),
                Some(v) => format!("{shape} {} msgs/s", format::si(v)),
                None => shape.to_string(),
            },
        },
        None => "unlimited".into(),
    };
    let size = match plan.get("size") {
        Some(s) if s.get("kind").and_then(Value::as_str) == Some("range") => {
            format!("{}..{} B", uint(s, "min"), uint(s, "max"))
        }
        Some(s) => format!("{} B", uint(s, "bytes")),
        None => "? B".into(),
    };
    let subscription = match plan.pointer("/subscription/mode").and_then(Value::as_str) {
        Some("queue") => "queue group",
        _ => "fan-out",
    };
    format!(
        "{topics} topic{} · {} → {} per topic ({subscription}{}) · rate {rate} · size {size}",
        if topics == 1 { "" } else { "s" },
        uint(plan, "producers_per_topic"),
        uint(plan, "consumers_per_topic"),
        if plan.get("request_reply").and_then(Value::as_bool) == Some(true) {
            ", request/reply"
        } else {
            ""
        },
    )
}

/// The part of the run in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RunPhase {
    /// Before the first phase: connecting and provisioning.
    #[default]
    Starting,
    /// Warm-up (recorded, not summarised).
    Warmup,
    /// The measured part.
    Measure,
    /// Waiting for in-flight messages.
    Drain,
    /// The `end` record was written.
    Done {
        /// Stopped early (Ctrl-C, `q`).
        interrupted: bool,
    },
}

impl RunPhase {
    /// The name shown to people.
    pub fn name(self) -> &'static str {
        match self {
            RunPhase::Starting => "starting",
            RunPhase::Warmup => "warmup",
            RunPhase::Measure => "measure",
            RunPhase::Drain => "drain",
            RunPhase::Done { interrupted: false } => "done",
            RunPhase::Done { interrupted: true } => "stopped",
        }
    }
}

/// How far the run is, at the last record seen.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    /// The phase.
    pub phase: RunPhase,
    /// Seconds since the start of the run (the last record's time).
    pub now_s: f64,
    /// Share of the current phase done (0..=1), when it is known.
    pub fraction: Option<f64>,
    /// Seconds left in the current phase (an estimate for message and cycle counts; an upper
    /// bound for the drain).
    pub left_s: Option<f64>,
    /// Counted goals: what is done of what (messages sent, connections open, cycles run).
    pub units: Option<(u64, u64, &'static str)>,
    /// What comes after this phase, e.g. `drain ≤ 5.0s`.
    pub next: Option<String>,
}

/// Follows a run's records and tells where it is.
#[derive(Debug, Clone, Default)]
pub struct RunProgress {
    /// The plan, once `begin` was seen.
    pub plan: Option<PlanInfo>,
    phase: RunPhase,
    now_s: f64,
    phase_start: [Option<f64>; 3],
    measure_sent: u64,
    measure_connects: u64,
    held: u64,
    ramp_done_s: Option<f64>,
}

fn slot(p: Phase) -> usize {
    match p {
        Phase::Warmup => 0,
        Phase::Measure => 1,
        Phase::Drain => 2,
    }
}

impl RunProgress {
    /// Nothing seen yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one record into account.
    pub fn apply(&mut self, r: &Record) {
        match r {
            Record::Begin(b) => self.plan = Some(PlanInfo::from_plan(&b.plan)),
            Record::Event(e) => {
                self.now_s = self.now_s.max(e.at_s);
                if e.kind == EventKind::Phase {
                    let p = match e.detail.as_str() {
                        "warmup" => Some(Phase::Warmup),
                        "measure" => Some(Phase::Measure),
                        "drain" => Some(Phase::Drain),
                        _ => None,
                    };
                    if let Some(p) = p {
                        self.enter(p, e.at_s);
                    }
                }
            }
            Record::Interval(iv) => {
                self.now_s = self.now_s.max(iv.end_s);
                self.enter(iv.phase, iv.start_s);
                if iv.phase == Phase::Measure {
                    self.measure_sent += iv.counters.sent;
                    self.measure_connects += iv.counters.connects;
                }
                if let Some(g) = iv.gauges {
                    self.held = g.held;
                    if let Some(PlanInfo {
                        goal: Goal::Hold { count, .. },
                        ..
                    }) = &self.plan
                        && g.held >= *count
                        && self.ramp_done_s.is_none()
                    {
                        self.ramp_done_s = Some(iv.end_s);
                    }
                }
            }
            Record::SearchStep(_) | Record::Search(_) => {}
            Record::End(e) => {
                self.now_s = self.now_s.max(e.duration_s);
                self.phase = RunPhase::Done {
                    interrupted: e.interrupted,
                };
            }
        }
    }

    /// Notes that `p` runs from `at_s` on (phases only move forward).
    fn enter(&mut self, p: Phase, at_s: f64) {
        let start = &mut self.phase_start[slot(p)];
        if start.is_none() {
            *start = Some(at_s);
        }
        let next = match p {
            Phase::Warmup => RunPhase::Warmup,
            Phase::Measure => RunPhase::Measure,
            Phase::Drain => RunPhase::Drain,
        };
        let rank = |r: RunPhase| match r {
            RunPhase::Starting => 0,
            RunPhase::Warmup => 1,
            RunPhase::Measure => 2,
            RunPhase::Drain => 3,
            RunPhase::Done { .. } => 4,
        };
        if rank(next) > rank(self.phase) {
            self.phase = next;
        }
    }

    /// Seconds since the start of the run.
    pub fn now_s(&self) -> f64 {
        self.now_s
    }

    /// Where the run is.
    pub fn status(&self) -> Status {
        let mut st = Status {
            phase: self.phase,
            now_s: self.now_s,
            fraction: None,
            left_s: None,
            units: None,
            next: None,
        };
        let Some(plan) = &self.plan else {
            return st;
        };
        let since = |p: Phase| (self.now_s - self.phase_start[slot(p)].unwrap_or(0.0)).max(0.0);
        let drain_next = format!("drain ≤ {}", format::duration(plan.drain_s));
        match self.phase {
            RunPhase::Warmup if plan.warmup_s > 0.0 => {
                let done = since(Phase::Warmup);
                st.fraction = Some((done / plan.warmup_s).clamp(0.0, 1.0));
                st.left_s = Some((plan.warmup_s - done).max(0.0));
                st.next = Some(match plan.goal {
                    Goal::Duration(d) => format!("measure {}", format::duration(d)),
                    Goal::Messages(n) => format!("measure {} msgs", format::count(n)),
                    Goal::Hold { count, .. } => format!("{} connections", format::count(count)),
                    Goal::Cycles(n) => format!("{} cycles", format::count(n)),
                });
            }
            RunPhase::Measure => {
                let elapsed = since(Phase::Measure);
                st.next = Some(drain_next);
                match plan.goal {
                    Goal::Duration(d) if d > 0.0 => {
                        st.fraction = Some((elapsed / d).clamp(0.0, 1.0));
                        st.left_s = Some((d - elapsed).max(0.0));
                    }
                    Goal::Duration(_) => {}
                    Goal::Messages(n) => {
                        self.counted(&mut st, self.measure_sent, n, elapsed, "msgs");
                    }
                    Goal::Cycles(n) => {
                        self.counted(&mut st, self.measure_connects, n, elapsed, "cycles");
                    }
                    Goal::Hold { count, hold_s } => match self.ramp_done_s {
                        None => {
                            st.units = Some((self.held.min(count), count, "open"));
                            st.fraction =
                                Some((self.held as f64 / count.max(1) as f64).clamp(0.0, 1.0));
                            st.next = Some(format!("hold {}", format::duration(hold_s)));
                        }
                        Some(t) => {
                            let held_for = (self.now_s - t).max(0.0);
                            st.fraction = Some((held_for / hold_s.max(1e-9)).clamp(0.0, 1.0));
                            st.left_s = Some((hold_s - held_for).max(0.0));
                        }
                    },
                }
            }
            RunPhase::Drain => {
                st.left_s = Some((plan.drain_s - since(Phase::Drain)).max(0.0));
            }
            _ => {}
        }
        st
    }

    fn counted(&self, st: &mut Status, done: u64, goal: u64, elapsed: f64, unit: &'static str) {
        st.units = Some((done.min(goal), goal, unit));
        st.fraction = Some((done as f64 / goal.max(1) as f64).clamp(0.0, 1.0));
        if done > 0 && elapsed > 0.0 {
            st.left_s = Some(goal.saturating_sub(done) as f64 / (done as f64 / elapsed));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use msgbench_report::EventRecord;
    use serde_json::json;

    fn begin(plan: Value) -> Record {
        serde_json::from_value(json!({
            "type": "begin", "version": 1, "tool": "msgbench", "started_unix_ms": 0,
            "host": {"hostname": "h", "cpus": 2, "os": "linux"},
            "clock": {"source": "CLOCK_MONOTONIC", "scope": "host"}, "plan": plan
        }))
        .unwrap()
    }

    fn phase(at_s: f64, name: &str) -> Record {
        Record::Event(EventRecord {
            at_s,
            kind: EventKind::Phase,
            detail: name.into(),
        })
    }

    fn interval(phase: &str, start_s: f64, end_s: f64, sent: u64) -> Record {
        serde_json::from_value(json!({
            "type": "interval", "index": start_s as u64, "phase": phase, "start_s": start_s,
            "end_s": end_s, "cpu_s": 0.1,
            "counters": {"sent": sent, "sent_bytes": 0, "acked": 0, "nacked": 0, "late_sends": 0,
                "received": 0, "received_bytes": 0, "foreign": 0, "gaps_opened": 0,
                "gaps_filled": 0, "duplicated": 0, "reordered": 0, "redelivered": 0,
                "reconnects": 0, "errors": {"connect": 0, "send": 0, "nack": 0, "receive": 0,
                "timeout": 0, "disconnect": 0, "protocol": 0}},
            "histograms": {
                "publish": "HISTFAAAABx4nJNpmSzMwMDAyAABzFAaxmey/wBlAQA8yQJ9",
                "send_delay": "HISTFAAAABx4nJNpmSzMwMDAyAABzFAaxmey/wBlAQA8yQJ9",
                "e2e": "HISTFAAAABx4nJNpmSzMwMDAyAABzFAaxmey/wBlAQA8yQJ9"
            }
        }))
        .unwrap()
    }

    /// The plan as `msgbench run` writes it (abridged).
    fn plan(measure: Value) -> Value {
        json!({"name": "msgbench", "target": "mem://x", "topics": ["msgbench"],
            "producers_per_topic": 1, "consumers_per_topic": 1, "subscription": {"mode": "fanout"},
            "rate": {"rate": 10000.0, "shape": "constant"}, "size": {"bytes": 128, "kind": "fixed"},
            "request_reply": false, "warmup": "1s", "measure": measure, "drain": "5s",
            "tick": "1s", "connections": null})
    }

    #[test]
    fn reads_the_plan_as_run_writes_it() {
        let p = PlanInfo::from_plan(&plan(json!({"duration": "1m30s"})));
        assert_eq!(p.goal, Goal::Duration(90.0));
        assert_eq!((p.warmup_s, p.drain_s, p.tick_s), (1.0, 5.0, 1.0));
        assert!(p.fanout && !p.connections);
        assert_eq!(
            p.summary,
            "1 topic · 1 → 1 per topic (fan-out) · rate 10k msgs/s · size 128 B"
        );
        assert!(p.is_long(10.0));
        let short = PlanInfo::from_plan(&plan(json!({"duration": "5s"})));
        assert!(!short.is_long(10.0), "1 s warm-up + 5 s is not a long run");
        let counted = PlanInfo::from_plan(&plan(json!({"messages": 1000})));
        assert_eq!(counted.goal, Goal::Messages(1000));
        assert!(
            counted.is_long(10.0),
            "a message count always gets progress"
        );
        let odd = PlanInfo::from_plan(&json!({"warmup": 3}));
        assert_eq!(odd.warmup_s, 3.0, "numbers are seconds");
        assert_eq!(odd.goal, Goal::Duration(0.0), "missing fields default");
    }

    #[test]
    fn duration_run_goes_through_its_phases() {
        let mut p = RunProgress::new();
        p.apply(&begin(plan(json!({"duration": "10s"}))));
        assert_eq!(p.status().phase, RunPhase::Starting);
        p.apply(&phase(0.0, "warmup"));
        p.apply(&interval("warmup", 0.0, 0.5, 10));
        let st = p.status();
        assert_eq!(st.phase, RunPhase::Warmup);
        assert_eq!(st.fraction, Some(0.5));
        assert_eq!(st.left_s, Some(0.5));
        assert_eq!(st.next.as_deref(), Some("measure 10s"));
        p.apply(&phase(1.0, "measure"));
        p.apply(&interval("measure", 1.0, 5.0, 10));
        let st = p.status();
        assert_eq!(st.phase, RunPhase::Measure);
        assert_eq!(st.fraction, Some(0.4));
        assert_eq!(st.left_s, Some(6.0));
        assert_eq!(st.next.as_deref(), Some("drain ≤ 5.0s"));
        p.apply(&phase(11.0, "drain"));
        p.apply(&interval("drain", 11.0, 12.0, 0));
        let st = p.status();
        assert_eq!(st.phase, RunPhase::Drain);
        assert_eq!(st.left_s, Some(4.0), "an upper bound: 5 s drain, 1 s gone");
        // A late interval of an earlier phase does not move the phase back.
        p.apply(&interval("measure", 10.0, 11.0, 5));
        assert_eq!(p.status().phase, RunPhase::Drain);
    }

    #[test]
    fn message_goal_estimates_time_left_from_the_rate_so_far() {
        let mut p = RunProgress::new();
        p.apply(&begin(plan(json!({"messages": 10000}))));
        p.apply(&phase(1.0, "measure"));
        p.apply(&interval("warmup", 0.0, 1.0, 5000));
        p.apply(&interval("measure", 1.0, 3.0, 2500));
        let st = p.status();
        assert_eq!(
            st.units,
            Some((2500, 10000, "msgs")),
            "warm-up sends do not count"
        );
        assert_eq!(st.fraction, Some(0.25));
        assert_eq!(st.left_s, Some(6.0), "7,500 left at 1,250/s");
    }

    #[test]
    fn hold_goal_shows_the_ramp_then_the_hold() {
        let conn = json!({"mode": "hold", "count": 100, "hold": "10s", "concurrency": 8});
        let mut pl = plan(json!({"duration": "10s"}));
        pl["connections"] = conn;
        pl["warmup"] = json!("0s");
        let mut p = RunProgress::new();
        p.apply(&begin(pl));
        p.apply(&phase(0.0, "measure"));
        let mut iv = interval("measure", 0.0, 1.0, 0);
        if let Record::Interval(i) = &mut iv {
            i.gauges = Some(msgbench_metrics::Gauges {
                held: 40,
                rss_bytes: 0,
            });
        }
        p.apply(&iv);
        let st = p.status();
        assert_eq!(st.units, Some((40, 100, "open")));
        assert_eq!(st.left_s, None, "the ramp's length is not known ahead");
        if let Record::Interval(i) = &mut iv {
            i.start_s = 1.0;
            i.end_s = 2.0;
            i.gauges = Some(msgbench_metrics::Gauges {
                held: 100,
                rss_bytes: 0,
            });
        }
        p.apply(&iv);
        if let Record::Interval(i) = &mut iv {
            i.start_s = 2.0;
            i.end_s = 5.0;
        }
        p.apply(&iv);
        let st = p.status();
        assert_eq!(st.left_s, Some(7.0), "held since 2 s, 10 s hold, now 5 s");
        assert_eq!(st.units, None);
    }
}
