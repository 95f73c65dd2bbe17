//! The lines of `results.jsonl`.
//!
//! Every line is an object with a `type` field:
//! - `begin`: format version, tool, host, clock, start time, and the run plan with credentials
//!   removed;
//! - `interval`: one tick of one phase: counters, integrity counts, and the three latency
//!   histograms (HdrHistogram V2 + DEFLATE + base64);
//! - `event`: connections, reconnects, errors, warnings, phase changes;
//! - `end`: per-phase totals with cumulative histograms, the final delivery account, warnings.

use crate::ReportError;
use msgbench_metrics::EventKind;
use msgbench_metrics::aggregate::Integrity;
use msgbench_metrics::{IntervalStats, PhaseTotals};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};

/// Version of the results format written by this build.
pub const FORMAT_VERSION: u32 = 1;

/// The first line: what ran, where, with what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Begin {
    /// [`FORMAT_VERSION`].
    pub version: u32,
    /// `msgbench <version>`.
    pub tool: String,
    /// Wall-clock start, Unix milliseconds.
    pub started_unix_ms: u64,
    /// Host facts.
    pub host: Host,
    /// How latencies are timed.
    pub clock: ClockInfo,
    /// The resolved run plan, credentials removed.
    pub plan: serde_json::Value,
    /// A merged run (`msgbench merge`): the segments it was merged from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub segments: Vec<SegmentInfo>,
}

impl Begin {
    /// The names of a multi-stage run's stages, in order (empty for other runs).
    pub fn stage_names(&self) -> Vec<String> {
        self.plan
            .pointer("/tracking/stages")
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .map(|s| s["name"].as_str().unwrap_or("?").to_string())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The machine the generator ran on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Host {
    /// Host name.
    pub hostname: String,
    /// Logical CPUs.
    pub cpus: u32,
    /// Operating system.
    pub os: String,
}

/// How latencies were measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockInfo {
    /// `CLOCK_MONOTONIC`, or `CLOCK_MONOTONIC anchored to CLOCK_REALTIME` (segmented runs).
    pub source: String,
    /// `host`: stamps compare directly only between processes on one host; `wall`: stamps are
    /// wall-clock time and compare across hosts within [`ClockInfo::uncertainty_us`].
    pub scope: String,
    /// The kernel considers the wall clock synchronized (adjtimex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synchronized: Option<bool>,
    /// The kernel's estimated wall-clock error, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub est_error_us: Option<u64>,
    /// The kernel's maximum wall-clock error, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_error_us: Option<u64>,
    /// The time reference the clock was corrected against (`--time-reference`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// The correction applied: the reference's time minus this host's, ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_offset_ns: Option<i64>,
    /// Round trip of the best probe to the reference, ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_rtt_ns: Option<u64>,
    /// `wall` scope: how far this clock may be off, µs (half the reference round trip, or the
    /// kernel's error without a reference). In a merged file: the bound on a latency measured
    /// between two segments (0 when all ran on one host, which shares one clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncertainty_us: Option<u64>,
}

/// One segment of a merged run, as its own `begin` described it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SegmentInfo {
    /// Segment index, from 0.
    pub index: u32,
    /// Where it ran.
    pub hostname: String,
    /// Its target (segments may reach different nodes of one cluster; credentials removed).
    pub target: String,
    /// Its clock, as recorded in its `begin`.
    pub clock: ClockInfo,
    /// Wall-clock start of its `begin`, Unix ms.
    pub started_unix_ms: u64,
}

/// Something that happened during the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventRecord {
    /// Seconds since the start of the run.
    pub at_s: f64,
    /// What happened.
    pub kind: EventKind,
    /// Detail for humans.
    pub detail: String,
}

/// The last line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct End {
    /// Seconds from the start barrier to the end of the drain.
    pub duration_s: f64,
    /// Stopped early by Ctrl-C or SIGTERM.
    pub interrupted: bool,
    /// Every expected delivery arrived before the drain timeout.
    pub drain_complete: bool,
    /// Totals of every phase that ran.
    pub phases: Vec<PhaseTotals>,
    /// The final delivery account.
    pub integrity: Integrity,
    /// What makes the figures less trustworthy.
    pub warnings: Vec<String>,
    /// Connection workloads: peak, rate, memory per connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections: Option<msgbench_metrics::ConnectionSummary>,
    /// Multi-stage runs: each stage and the messages that never reached it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<msgbench_metrics::StageEnd>,
    /// The kernel's TCP counters of the generator's connections (segments, bare ACKs,
    /// retransmissions), summed as they closed; absent when there were none to ask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<msgbench_metrics::TcpSummary>,
    /// Request/response drivers (HTTP): responses by status code, requests without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responses: Option<msgbench_metrics::ResponseSummary>,
    /// Backlog runs (`--backlog`): the backlog built and how fast the consumers drained it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog: Option<msgbench_metrics::BacklogSummary>,
    /// The verdict of each threshold of the plan, in order (none without thresholds).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thresholds: Vec<crate::verdict::Verdict>,
    /// A run with groups (`[[groups]]`): each group's own figures; the fields above are the
    /// run's totals.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupEnd>,
}

/// One group's figures in a run with groups.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupEnd {
    /// The group's name.
    pub name: String,
    /// Its target (credentials removed).
    pub target: String,
    /// Its producers and consumers (connections, for a connection workload).
    pub producers: u32,
    /// Its consumers.
    pub consumers: u32,
    /// Whether deliveries cross between this group and others: its `expected` then counts its
    /// messages' receivers in every group and its `delivered` what its consumers had from any
    /// group, so only the run's `lost` is a loss.
    pub crosses: bool,
    /// Totals of every phase (CPU is the process's: shared by the groups).
    pub phases: Vec<PhaseTotals>,
    /// Its delivery account (see `crosses`).
    pub integrity: Integrity,
    /// Connection workloads: peak, rate, reconnections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections: Option<msgbench_metrics::ConnectionSummary>,
}

/// One line of the results file.
// Records are written once per interval, never per message: their size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    /// First line.
    Begin(Begin),
    /// One tick.
    Interval(IntervalStats),
    /// A happening.
    Event(EventRecord),
    /// A capacity search: one step done (`msgbench search`).
    SearchStep(crate::search::SearchStep),
    /// A capacity search: its answer, before `end`.
    Search(crate::search::SearchEnd),
    /// Last line.
    End(End),
}

/// Appends records to a results file, one line each, flushed after every interval so a killed
/// run loses at most the current tick.
pub struct ResultsWriter<W: Write> {
    out: std::io::BufWriter<W>,
}

impl<W: Write> ResultsWriter<W> {
    /// Writes to `out`.
    pub fn new(out: W) -> Self {
        Self {
            out: std::io::BufWriter::new(out),
        }
    }

    /// Appends one record; intervals, begin and end are flushed at once.
    pub fn write(&mut self, r: &Record) -> Result<(), ReportError> {
        serde_json::to_writer(&mut self.out, r)?;
        self.out.write_all(b"\n")?;
        if !matches!(r, Record::Event(_)) {
            self.out.flush()?;
        }
        Ok(())
    }

    /// Flushes everything written.
    pub fn flush(&mut self) -> Result<(), ReportError> {
        self.out.flush()?;
        Ok(())
    }
}

/// Calls `f` with each record, streaming (constant memory). A truncated last line (the run was
/// killed mid-write) is ignored; any other bad line is an error naming its line number.
pub fn for_each_record(input: impl BufRead, mut f: impl FnMut(Record)) -> Result<(), ReportError> {
    let mut pending: Option<(usize, String)> = None;
    let mut seen = 0usize;
    for (i, line) in input.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        if let Some((n, prev)) = pending.take() {
            match serde_json::from_str::<Record>(&prev) {
                Ok(r) => {
                    seen += 1;
                    f(r)
                }
                Err(e) => {
                    return Err(ReportError::Parse {
                        line: n,
                        message: e.to_string(),
                    });
                }
            }
        }
        pending = Some((i + 1, line));
    }
    if let Some((n, last)) = pending {
        match serde_json::from_str::<Record>(&last) {
            Ok(r) => f(r),
            Err(_) if seen > 0 && !last.trim_end().ends_with('}') => {}
            Err(e) => {
                return Err(ReportError::Parse {
                    line: n,
                    message: e.to_string(),
                });
            }
        }
    }
    Ok(())
}

/// Reads every record into memory (same rules as [`for_each_record`]).
pub fn read_records(input: impl BufRead) -> Result<Vec<Record>, ReportError> {
    let mut out = Vec::new();
    for_each_record(input, |r| out.push(r))?;
    Ok(out)
}
