//! `msgbench merge`: the results files of a segmented run's segments, merged into one results
//! file that every report, `compare` and the dashboard read like a single-machine run.
//!
//! The merge is exact, not an average:
//! - intervals are merged tick by tick (the segments share their start instant, so tick `k`
//!   is the same wall-clock second everywhere): counts summed, histograms merged from their
//!   encodings, so percentiles are those of the whole run;
//! - the `end` totals merge the same way from the cumulative histograms;
//! - delivery integrity joins across segments: each producer's segment counts its messages
//!   times the receivers of the whole run (`expected`), each consumer's segment counts the
//!   distinct messages it received from any producer of any segment, so a message produced in
//!   segment 2 and consumed in segment 5 is matched, and `lost = expected − delivered` is the
//!   loss of the whole run.
//!
//! Reading is streaming: each file is read once, in step with the others (a k-way merge on the
//! interval index), so memory depends on the number of segments, not on the run's length or
//! message count.

use crate::ReportError;
use crate::records::{Begin, ClockInfo, End, EventRecord, Host, Record, SegmentInfo};
use msgbench_metrics::aggregate::Integrity;
use msgbench_metrics::{IntervalStats, LatencySummary, Phase, PhaseTotals};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

/// The warning each segment writes about its own, partial delivery figures; the merge drops
/// it, since the merged figures are whole.
pub const PARTIAL_INTEGRITY_WARNING: &str = "segment: delivery figures here count only this segment's sends and receipts; merge all segments (msgbench merge) for the run's loss and duplicates";

/// Why segments could not be merged.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What happened.
        source: std::io::Error,
    },
    /// A line did not parse.
    #[error("{path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        source: ReportError,
    },
    /// Something about the set of files is wrong (different runs or plans, missing segments).
    #[error("{0}")]
    Refused(String),
}

#[derive(Deserialize)]
struct SegmentField {
    index: u32,
    count: u32,
    /// `roles` for `--segment producers|consumers`; absent for `I/N`.
    #[serde(default)]
    split: Option<String>,
}

/// Parsed lines of one file: (line number, record), or the error that ended the file.
type Parsed = Result<(usize, Record), MergeError>;

/// A results file being read, one record ahead. Its lines are parsed on a thread of their own
/// (parsing and decoding histograms is most of a merge's work; the files parse in parallel),
/// handed over through a bounded channel so memory stays flat.
struct Reader {
    path: PathBuf,
    rx: std::sync::mpsc::Receiver<Parsed>,
    line: usize,
    index: u32,
    begin: Begin,
    end: Option<End>,
    next: Option<IntervalStats>,
}

fn spawn_parser(path: PathBuf, f: std::fs::File) -> std::sync::mpsc::Receiver<Parsed> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<Parsed>(4);
    std::thread::spawn(move || {
        for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
            let line = match line {
                Ok(l) => l,
                Err(source) => {
                    let _ = tx.send(Err(MergeError::Io { path, source }));
                    return;
                }
            };
            if line.trim().is_empty() {
                continue;
            }
            let parsed = match serde_json::from_str::<Record>(&line) {
                Ok(r) => Ok((i + 1, r)),
                // A killed run's last line may be cut short: the file ends there.
                Err(e) if e.is_eof() => return,
                Err(e) => Err(MergeError::Parse {
                    path: path.clone(),
                    source: ReportError::Parse {
                        line: i + 1,
                        message: e.to_string(),
                    },
                }),
            };
            let stop = parsed.is_err();
            // The merge gave up on this file (an error elsewhere): stop reading.
            if tx.send(parsed).is_err() || stop {
                return;
            }
        }
    });
    rx
}

impl Reader {
    fn open(path: &Path) -> Result<Reader, MergeError> {
        let f = std::fs::File::open(path).map_err(|source| MergeError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut r = Reader {
            path: path.to_path_buf(),
            rx: spawn_parser(path.to_path_buf(), f),
            line: 0,
            index: 0,
            begin: Begin {
                version: 0,
                tool: String::new(),
                started_unix_ms: 0,
                host: Host {
                    hostname: String::new(),
                    cpus: 0,
                    os: String::new(),
                },
                clock: ClockInfo::default(),
                plan: serde_json::Value::Null,
                segments: Vec::new(),
            },
            end: None,
            next: None,
        };
        match r.read_record(&mut |_| {})? {
            Some(Record::Begin(b)) => r.begin = b,
            _ => {
                return Err(MergeError::Parse {
                    path: path.to_path_buf(),
                    source: ReportError::NoBegin,
                });
            }
        }
        Ok(r)
    }

    /// The next record; events go to `on_event` as they pass.
    fn read_record(
        &mut self,
        on_event: &mut dyn FnMut(EventRecord),
    ) -> Result<Option<Record>, MergeError> {
        loop {
            let Ok(parsed) = self.rx.recv() else {
                return Ok(None);
            };
            let (line, rec) = parsed?;
            self.line = line;
            match rec {
                Record::Event(e) => on_event(e),
                other => return Ok(Some(other)),
            }
        }
    }

    /// Reads up to the next interval (or the end), passing events on.
    fn advance(&mut self, on_event: &mut dyn FnMut(EventRecord)) -> Result<(), MergeError> {
        self.next = None;
        while let Some(r) = self.read_record(on_event)? {
            match r {
                Record::Interval(iv) => {
                    self.next = Some(iv);
                    return Ok(());
                }
                Record::End(e) => self.end = Some(e),
                Record::Begin(_) => {
                    return Err(MergeError::Refused(format!(
                        "{}: line {}: a second `begin` (two runs in one file?)",
                        self.path.display(),
                        self.line
                    )));
                }
                Record::SearchStep(_) | Record::Search(_) => {
                    return Err(MergeError::Refused(format!(
                        "{}: line {}: a capacity search (`msgbench search`) is one process's run: it cannot be merged",
                        self.path.display(),
                        self.line
                    )));
                }
                Record::Event(_) => unreachable!("events are passed on by read_record"),
            }
        }
        Ok(())
    }
}

fn phase_slot(p: Phase) -> u8 {
    match p {
        Phase::Warmup => 0,
        Phase::Measure => 1,
        Phase::Drain => 2,
    }
}

/// The plan without what may differ between segments of one run.
fn comparable(plan: &serde_json::Value) -> serde_json::Value {
    let mut v = plan.clone();
    if let Some(o) = v.as_object_mut() {
        for k in ["segment", "target", "consume_from"] {
            o.remove(k);
        }
    }
    v
}

fn scheme(plan: &serde_json::Value, key: &str) -> String {
    plan.get(key)
        .and_then(|t| t.as_str())
        .and_then(|t| t.split_once("://"))
        .map(|(s, _)| s.to_string())
        .unwrap_or_default()
}

fn first_difference(a: &serde_json::Value, b: &serde_json::Value) -> String {
    match (a.as_object(), b.as_object()) {
        (Some(x), Some(y)) => x
            .keys()
            .chain(y.keys())
            .find(|k| x.get(*k) != y.get(*k))
            .map(|k| {
                format!(
                    "`{k}` is {} in one and {} in the other",
                    x.get(k).map_or("absent".into(), |v| v.to_string()),
                    y.get(k).map_or("absent".into(), |v| v.to_string())
                )
            })
            .unwrap_or_default(),
        _ => String::new(),
    }
}

/// What the merge did, for the command's closing line.
#[derive(Debug, Clone, PartialEq)]
pub struct MergeSummary {
    /// Segments merged.
    pub segments: u32,
    /// Segments the run had.
    pub of: u32,
    /// Interval records written.
    pub intervals: u64,
    /// Whether every segment had its `end` (else the merged file has none: it reads as a killed
    /// run).
    pub complete: bool,
    /// The merged delivery account (when complete).
    pub integrity: Option<Integrity>,
}

/// Merges the segment files `paths` into `out`. With `allow_partial`, missing segments or a
/// segment without its `end` are tolerated (and said in the warnings); otherwise refused.
pub fn merge(
    paths: &[PathBuf],
    out: &mut dyn Write,
    allow_partial: bool,
) -> Result<MergeSummary, MergeError> {
    if paths.is_empty() {
        return Err(MergeError::Refused("no files to merge".into()));
    }
    let mut readers = Vec::with_capacity(paths.len());
    for p in paths {
        readers.push(Reader::open(p)?);
    }
    // Every file must be a segment of the same run and plan, each segment once.
    let mut count = None;
    let mut split: Option<Option<String>> = None;
    for r in &mut readers {
        let seg: SegmentField = r
            .begin
            .plan
            .get("segment")
            .and_then(|s| serde_json::from_value(s.clone()).ok())
            .ok_or_else(|| {
                MergeError::Refused(format!(
                    "{}: not a segment (it was not run with --segment I/N)",
                    r.path.display()
                ))
            })?;
        if *count.get_or_insert(seg.count) != seg.count {
            return Err(MergeError::Refused(format!(
                "{}: segment {}/{} belongs to a run of {} segments, {} to a run of {}",
                r.path.display(),
                seg.index,
                seg.count,
                seg.count,
                readers_first(paths),
                count.unwrap_or(0)
            )));
        }
        if *split.get_or_insert(seg.split.clone()) != seg.split {
            return Err(MergeError::Refused(format!(
                "{}: the run was split by {} here and by {} in {}: a role split (--segment producers|consumers) and a task split (--segment I/N) overlap",
                r.path.display(),
                if seg.split.is_some() { "role" } else { "task" },
                if seg.split.is_some() { "task" } else { "role" },
                readers_first(paths),
            )));
        }
        r.index = seg.index;
    }
    let count = count.unwrap_or(1);
    let first = &readers[0];
    let run_id = first.begin.plan.get("run_id").cloned();
    let base = comparable(&first.begin.plan);
    for r in &readers[1..] {
        if r.begin.plan.get("run_id").cloned() != run_id {
            return Err(MergeError::Refused(format!(
                "{} and {} are segments of different runs (run ids {} and {}); segments of one run share the plan and --start-at (or --run-id)",
                first.path.display(),
                r.path.display(),
                run_id.clone().unwrap_or_default(),
                r.begin.plan.get("run_id").cloned().unwrap_or_default()
            )));
        }
        let other = comparable(&r.begin.plan);
        if other != base || scheme(&r.begin.plan, "target") != scheme(&first.begin.plan, "target") {
            return Err(MergeError::Refused(format!(
                "{} and {} ran different plans: {}",
                first.path.display(),
                r.path.display(),
                match first_difference(&base, &other) {
                    d if d.is_empty() => "the targets' protocols differ".to_string(),
                    d => d,
                }
            )));
        }
    }
    let by_role = split.flatten().is_some();
    let label = |i: u32| match (by_role, i) {
        (true, 0) => "producers".to_string(),
        (true, _) => "consumers".to_string(),
        (false, i) => format!("{i}/{count}"),
    };
    readers.sort_by_key(|r| r.index);
    for w in readers.windows(2) {
        if w[0].index == w[1].index {
            return Err(MergeError::Refused(format!(
                "{} and {} are both segment {}",
                w[0].path.display(),
                w[1].path.display(),
                label(w[0].index)
            )));
        }
    }
    let mut warnings = Vec::new();
    let missing: Vec<String> = (0..count)
        .filter(|i| !readers.iter().any(|r| r.index == *i))
        .map(|i| if by_role { label(i) } else { i.to_string() })
        .collect();
    if !missing.is_empty() {
        let msg = if by_role {
            format!(
                "the {} segment is missing: the merged figures cover only part of the run",
                missing.join(", ")
            )
        } else {
            format!(
                "segments {} of {count} are missing: the merged figures cover only part of the run",
                missing.join(", ")
            )
        };
        if !allow_partial {
            return Err(MergeError::Refused(format!(
                "{msg} (pass --partial to merge anyway)"
            )));
        }
        warnings.push(msg);
    }

    let mut w = crate::ResultsWriter::new(out);
    let wr = |w: &mut crate::ResultsWriter<&mut dyn Write>, r: &Record| {
        w.write(r).map_err(|e| MergeError::Io {
            path: PathBuf::from("<output>"),
            source: std::io::Error::other(e.to_string()),
        })
    };
    wr(&mut w, &Record::Begin(merged_begin(&readers)))?;

    // Events wait (ordered by time) until the intervals around them are written.
    let mut events: BTreeMap<(i64, u64), EventRecord> = BTreeMap::new();
    let mut seq = 0u64;
    for r in &mut readers {
        let idx = r.index;
        r.advance(&mut |mut e| {
            e.detail = format!("[segment {idx}] {}", e.detail);
            events.insert(((e.at_s * 1e6) as i64, seq), e);
            seq += 1;
        })?;
    }
    let mut intervals = 0u64;
    while let Some(key) = readers
        .iter()
        .filter_map(|r| r.next.as_ref().map(|iv| (iv.index, phase_slot(iv.phase))))
        .min()
    {
        let mut merged: Option<IntervalStats> = None;
        for r in &mut readers {
            if r.next
                .as_ref()
                .is_some_and(|iv| (iv.index, phase_slot(iv.phase)) == key)
            {
                let iv = r.next.take().expect("checked");
                merge_interval(&mut merged, iv);
                let idx = r.index;
                r.advance(&mut |mut e| {
                    e.detail = format!("[segment {idx}] {}", e.detail);
                    events.insert(((e.at_s * 1e6) as i64, seq), e);
                    seq += 1;
                })?;
            }
        }
        let iv = merged.expect("at least one interval had the key");
        let upto = (iv.end_s * 1e6) as i64;
        while let Some(entry) = events.first_entry() {
            if entry.key().0 > upto {
                break;
            }
            wr(&mut w, &Record::Event(entry.remove()))?;
        }
        wr(&mut w, &Record::Interval(iv))?;
        intervals += 1;
    }
    while let Some((_, e)) = events.pop_first() {
        wr(&mut w, &Record::Event(e))?;
    }
    let ended = readers.iter().filter(|r| r.end.is_some()).count();
    let complete = ended == readers.len();
    let mut integrity = None;
    if complete || (allow_partial && ended > 0) {
        if !complete {
            warnings.push(format!(
                "{} of {} segments have no `end` (killed?): their totals are missing",
                readers.len() - ended,
                readers.len()
            ));
        }
        let end = merged_end(&readers, warnings);
        integrity = Some(end.integrity);
        wr(&mut w, &Record::End(end))?;
    } else if !allow_partial {
        let without: Vec<String> = readers
            .iter()
            .filter(|r| r.end.is_none())
            .map(|r| r.path.display().to_string())
            .collect();
        return Err(MergeError::Refused(format!(
            "{} has no `end` record (the segment was killed or is still running); pass --partial to merge what there is",
            without.join(", ")
        )));
    }
    w.flush().map_err(|e| MergeError::Io {
        path: PathBuf::from("<output>"),
        source: std::io::Error::other(e.to_string()),
    })?;
    Ok(MergeSummary {
        segments: readers.len() as u32,
        of: count,
        intervals,
        complete,
        integrity,
    })
}

fn readers_first(paths: &[PathBuf]) -> String {
    paths[0].display().to_string()
}

fn merge_interval(into: &mut Option<IntervalStats>, iv: IntervalStats) {
    merge_intervals(into, iv, false)
}

/// Adds `iv` to `into` (the same tick of another part of the run). Parts of one process
/// (`one_process`) each measured the process's CPU and memory: taken once, not summed.
pub fn merge_intervals(into: &mut Option<IntervalStats>, iv: IntervalStats, one_process: bool) {
    let Some(m) = into else {
        *into = Some(iv);
        return;
    };
    m.start_s = m.start_s.min(iv.start_s);
    m.end_s = m.end_s.max(iv.end_s);
    m.counters.merge(&iv.counters);
    m.histograms.merge(&iv.histograms);
    m.cpu_s = if one_process {
        m.cpu_s.max(iv.cpu_s)
    } else {
        m.cpu_s + iv.cpu_s
    };
    m.gauges = match (m.gauges, iv.gauges) {
        (Some(a), Some(b)) => Some(msgbench_metrics::Gauges {
            held: a.held + b.held,
            rss_bytes: if one_process {
                a.rss_bytes.max(b.rss_bytes)
            } else {
                a.rss_bytes + b.rss_bytes
            },
        }),
        (a, b) => a.or(b),
    };
    for (i, s) in iv.stages.iter().enumerate() {
        match m.stages.get_mut(i) {
            Some(t) => t.merge(s),
            None => m.stages.push(s.clone()),
        }
    }
    for g in iv.groups {
        match m.groups.iter_mut().find(|x| x.name == g.name) {
            Some(x) => x.merge(&g),
            None => m.groups.push(g),
        }
    }
}

fn merged_begin(readers: &[Reader]) -> Begin {
    let first = &readers[0].begin;
    let mut plan = first.plan.clone();
    if let Some(o) = plan.as_object_mut() {
        o.remove("segment");
    }
    let hosts: Vec<&str> = {
        let mut h: Vec<&str> = readers
            .iter()
            .map(|r| r.begin.host.hostname.as_str())
            .collect();
        h.sort();
        h.dedup();
        h
    };
    let one_host = hosts.len() == 1;
    // A latency measured between two segments is off by at most the two clocks' errors: the
    // sum of the two largest bounds (none on one host, whose segments share one clock).
    let uncertainty_us = if one_host {
        Some(0)
    } else {
        let mut b: Vec<Option<u64>> = readers
            .iter()
            .map(|r| r.begin.clock.uncertainty_us)
            .collect();
        if b.iter().any(|x| x.is_none()) {
            None
        } else {
            b.sort_unstable_by(|x, y| y.cmp(x));
            Some(b.iter().take(2).map(|x| x.unwrap_or(0)).sum())
        }
    };
    let all_synced = readers
        .iter()
        .all(|r| r.begin.clock.synchronized == Some(true));
    Begin {
        version: first.version,
        tool: first.tool.clone(),
        started_unix_ms: readers
            .iter()
            .map(|r| r.begin.started_unix_ms)
            .min()
            .unwrap_or(0),
        host: Host {
            hostname: if one_host {
                hosts[0].to_string()
            } else {
                format!("{} hosts: {}", hosts.len(), hosts.join(", "))
            },
            cpus: if one_host {
                first.host.cpus
            } else {
                readers.iter().map(|r| r.begin.host.cpus).sum()
            },
            os: first.host.os.clone(),
        },
        clock: ClockInfo {
            source: first.clock.source.clone(),
            scope: first.clock.scope.clone(),
            synchronized: Some(all_synced),
            uncertainty_us,
            ..ClockInfo::default()
        },
        plan,
        segments: readers
            .iter()
            .map(|r| SegmentInfo {
                index: r.index,
                hostname: r.begin.host.hostname.clone(),
                target: r
                    .begin
                    .plan
                    .get("target")
                    .and_then(|t| t.as_str())
                    .unwrap_or_default()
                    .to_string(),
                clock: r.begin.clock.clone(),
                started_unix_ms: r.begin.started_unix_ms,
            })
            .collect(),
    }
}

fn merged_end(readers: &[Reader], warnings: Vec<String>) -> End {
    let ends: Vec<(String, &End)> = readers
        .iter()
        .filter_map(|r| r.end.as_ref().map(|e| (format!("segment {}", r.index), e)))
        .collect();
    merge_ends(&ends, warnings, false)
}

/// The `end` of a run made of parts, from each part's `end` (`(label, end)`; the label prefixes
/// the part's warnings): counts and histograms summed, the delivery account joined. Parts of
/// one process (`one_process`: the groups of a run) each measured the whole process's CPU,
/// memory and TCP counters, so those are taken once (the largest) instead of summed.
pub fn merge_ends(ends: &[(String, &End)], mut warnings: Vec<String>, one_process: bool) -> End {
    let add = |a: f64, b: f64| if one_process { a.max(b) } else { a + b };
    let mut phases: Vec<PhaseTotals> = Vec::new();
    let mut integrity = Integrity::default();
    for (idx, e) in ends {
        for p in &e.phases {
            match phases.iter_mut().find(|q| q.phase == p.phase) {
                Some(q) => {
                    q.start_s = q.start_s.min(p.start_s);
                    q.end_s = q.end_s.max(p.end_s);
                    q.counters.merge(&p.counters);
                    q.histograms.merge(&p.histograms);
                    q.cpu_s = add(q.cpu_s, p.cpu_s);
                    for (i, s) in p.stages.iter().enumerate() {
                        match q.stages.get_mut(i) {
                            Some(t) => t.merge(s),
                            None => q.stages.push(s.clone()),
                        }
                    }
                }
                None => phases.push(p.clone()),
            }
        }
        let i = &e.integrity;
        integrity.expected += i.expected;
        integrity.delivered += i.delivered;
        integrity.duplicated += i.duplicated;
        integrity.reordered += i.reordered;
        integrity.foreign += i.foreign;
        for w in &e.warnings {
            if w != PARTIAL_INTEGRITY_WARNING {
                warnings.push(format!("{idx}: {w}"));
            }
        }
    }
    phases.sort_by_key(|p| phase_slot(p.phase));
    // A phase's length is the basis of its send rate: where some segments sent, it ends when
    // the last of them stopped (consumer-only segments linger until deliveries stop; that
    // is drain, not sending).
    for p in &mut phases {
        let senders_end = ends
            .iter()
            .flat_map(|(_, e)| &e.phases)
            .filter(|q| q.phase == p.phase && q.counters.sent > 0)
            .map(|q| q.end_s)
            .fold(f64::NAN, f64::max);
        if senders_end.is_finite() {
            p.end_s = senders_end;
        }
    }
    integrity.lost = integrity.expected.saturating_sub(integrity.delivered);
    integrity.completeness = if integrity.expected == 0 {
        1.0
    } else {
        integrity.delivered as f64 / integrity.expected as f64
    };
    let connections = ends
        .iter()
        .filter_map(|(_, e)| e.connections.clone())
        .reduce(|mut a, b| {
            a.requested = match (a.requested, b.requested) {
                (Some(x), Some(y)) => Some(x + y),
                (x, y) => x.or(y),
            };
            a.peak_held += b.peak_held;
            a.ramp_s = a.ramp_s.max(b.ramp_s);
            a.connections_per_s += b.connections_per_s;
            if one_process {
                a.rss_baseline_bytes = a.rss_baseline_bytes.max(b.rss_baseline_bytes);
                a.rss_peak_bytes = a.rss_peak_bytes.max(b.rss_peak_bytes);
            } else {
                a.rss_baseline_bytes += b.rss_baseline_bytes;
                a.rss_peak_bytes += b.rss_peak_bytes;
            }
            a.fd_limit = a.fd_limit.min(b.fd_limit);
            a.fd_free |= b.fd_free;
            a.reconnect = match (a.reconnect.take(), b.reconnect) {
                (Some(x), Some(y)) => Some(merge_reconnects(x, y)),
                (x, y) => x.or(y),
            };
            a.churn = match (a.churn.take(), b.churn) {
                (Some(x), Some(y)) => Some(msgbench_metrics::ChurnSummary {
                    rate: x.rate + y.rate,
                    from_s: x.from_s.min(y.from_s),
                    dropped: x.dropped + y.dropped,
                    back: x.back + y.back,
                    failed: x.failed + y.failed,
                    skipped: x.skipped + y.skipped,
                    latency: merge_latency_summaries(&x.latency, &y.latency),
                }),
                (x, y) => x.or(y),
            };
            a.publishes_missed += b.publishes_missed;
            a
        })
        .map(|mut a| {
            a.rss_per_connection_bytes = if a.peak_held == 0 {
                0.0
            } else {
                a.rss_peak_bytes.saturating_sub(a.rss_baseline_bytes) as f64 / a.peak_held as f64
            };
            a
        });
    End {
        duration_s: ends.iter().map(|(_, e)| e.duration_s).fold(0.0, f64::max),
        interrupted: ends.iter().any(|(_, e)| e.interrupted),
        drain_complete: ends.iter().all(|(_, e)| e.drain_complete),
        phases,
        integrity,
        warnings,
        connections,
        stages: Vec::new(),
        tcp: ends.iter().filter_map(|(_, e)| e.tcp).reduce(|mut a, b| {
            if one_process {
                // Each part counted every connection of the process.
                return if b.segs_out > a.segs_out { b } else { a };
            }
            a.add(&b);
            a
        }),
        responses: ends
            .iter()
            .filter_map(|(_, e)| e.responses.clone())
            .reduce(|mut a, b| {
                a.add(&b);
                a
            }),
        // A segmented run cannot build a backlog (each segment sees only its own sends).
        backlog: None,
        // Judged again on the merged figures (see `RunReport`): a segment's verdict is not
        // the run's.
        thresholds: Vec::new(),
        groups: Vec::new(),
    }
}

/// What a report says about cross-host clocks: a wall-clock run whose clocks' error is unknown,
/// or whose end-to-end latencies are smaller than that error (they may then be off by more than
/// their own size).
pub fn clock_warnings(
    begin: &Begin,
    e2e: Option<&msgbench_metrics::LatencySummary>,
) -> Vec<String> {
    let mut out = Vec::new();
    if begin.clock.scope != "wall" || begin.segments.is_empty() {
        return out;
    }
    match begin.clock.uncertainty_us {
        None => out.push(
            "end-to-end latency between segments on different hosts has an unknown clock error (a segment did not record its clock's bound)".to_string(),
        ),
        Some(u) if u > 0 => {
            if let Some(e) = e2e.filter(|e| e.count > 0)
                && e.p50 < u * 1000
            {
                out.push(format!(
                    "end-to-end latencies (p50 {:.3} ms) are below the clocks' uncertainty between hosts (± {:.3} ms): they may be off by more than their own size; synchronize the clocks (chrony, PTP) or give every segment --time-reference",
                    e.p50 as f64 / 1e6,
                    u as f64 / 1e3
                ));
            }
        }
        Some(_) => {}
    }
    out
}

/// Two segments' reconnect storms as one: counts added, the earliest drop, the latest
/// settling, the latencies as [`merge_latency_summaries`] does.
fn merge_reconnects(
    a: msgbench_metrics::ReconnectSummary,
    b: msgbench_metrics::ReconnectSummary,
) -> msgbench_metrics::ReconnectSummary {
    msgbench_metrics::ReconnectSummary {
        at_s: a.at_s.min(b.at_s),
        dropped: a.dropped + b.dropped,
        back: a.back + b.back,
        failed: a.failed + b.failed,
        settled_s: a.settled_s.zip(b.settled_s).map(|(p, q)| p.max(q)),
        latency: merge_latency_summaries(&a.latency, &b.latency),
    }
}

/// Two latency summaries as one. Percentiles cannot be merged from summaries: each is the
/// larger of the two (an upper bound of the merged one), the mean weighted by count.
fn merge_latency_summaries(x: &LatencySummary, y: &LatencySummary) -> LatencySummary {
    let count = x.count + y.count;
    LatencySummary {
        count,
        min: match (x.count, y.count) {
            (0, _) => y.min,
            (_, 0) => x.min,
            _ => x.min.min(y.min),
        },
        mean: if count == 0 {
            0.0
        } else {
            (x.mean * x.count as f64 + y.mean * y.count as f64) / count as f64
        },
        p50: x.p50.max(y.p50),
        p90: x.p90.max(y.p90),
        p99: x.p99.max(y.p99),
        p999: x.p999.max(y.p999),
        p9999: x.p9999.max(y.p9999),
        max: x.max.max(y.max),
    }
}
