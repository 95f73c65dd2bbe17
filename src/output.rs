//! What `msgbench run` shows and writes while it runs: the live table on stderr and the
//! results file. Every record written is also folded into a [`ReportBuilder`], so the final
//! report is computed from exactly the records written (the results file is the contract), in
//! memory that does not grow with the length of the run.
//!
//! Every record passes [`RunOutput::push`], which scrubs the run's secrets
//! ([`msgbench_core::redact::Secrets`]) from its text before anything sees it: the results file,
//! the report, the live views (TUI, dashboard, Prometheus endpoint) and stderr only ever get
//! the scrubbed record. Interval records hold no text and are passed as they are.

use crate::live::LiveView;
use msgbench_core::redact::Secrets;
use msgbench_core::runner::EventKind;
use msgbench_core::runner::{Observer, RunEvent};
use msgbench_core::shutdown::Shutdown;
use msgbench_metrics::IntervalStats;
use msgbench_report::verdict::Threshold;
use msgbench_report::{EventRecord, Record, ReportBuilder, ResultsWriter, live};
use std::fs::File;

/// The observer of a CLI run.
pub struct RunOutput {
    writer: Option<ResultsWriter<File>>,
    /// The report, built from every record written.
    pub report: ReportBuilder,
    quiet: bool,
    fanout: bool,
    lines: u64,
    gaps_opened: u64,
    gaps_filled: u64,
    /// The first failure to write the results file (a full disk, a file-size limit). Nothing
    /// more is written; the run is asked to stop (see [`RunOutput::stop_on_write_error`]) and
    /// the report on stdout, built from every record, says what the file lacks.
    pub write_error: Option<String>,
    /// Asked to stop when the results file cannot be written.
    write_stop: Option<Shutdown>,
    /// Live views (TUI, dashboard, metrics endpoint); each sees every record written.
    views: Vec<Box<dyn LiveView>>,
    /// Plain mode on a terminal: the progress line kept below the table.
    progress: Option<msgbench_tui::ProgressLine>,
    /// A full-screen view owns the terminal: print nothing on stderr until it is gone.
    terminal_taken: bool,
    /// `--threshold-abort`: the thresholds judged every measure interval.
    watch: Option<Watch>,
    /// The host's figures for each interval record, and the last taken (intervals written
    /// together at a phase's end share it instead of measuring a few microseconds each).
    host: msgbench_metrics::HostSampler,
    last_host: Option<(std::time::Instant, msgbench_metrics::HostStats)>,
    /// The run's secrets, scrubbed from every record's text.
    secrets: Secrets,
}

/// Thresholds judged while the run goes on, and the stop they ask for.
struct Watch {
    thresholds: Vec<Threshold>,
    shutdown: Shutdown,
    /// The first verdict that failed, once one has.
    tripped: Option<String>,
}

impl RunOutput {
    /// Writes to `writer` (if any); `fanout` says whether open gaps mean loss (not so for queue
    /// groups, whose members each see part of a stream).
    /// `secrets` are scrubbed from every record ([`msgbench_core::scenario::RunPlan::secrets`]).
    pub fn new(
        writer: Option<ResultsWriter<File>>,
        quiet: bool,
        fanout: bool,
        secrets: Secrets,
    ) -> Self {
        Self {
            writer,
            report: ReportBuilder::new(),
            quiet,
            fanout,
            lines: 0,
            gaps_opened: 0,
            gaps_filled: 0,
            write_error: None,
            write_stop: None,
            views: Vec::new(),
            progress: None,
            terminal_taken: false,
            watch: None,
            host: msgbench_metrics::HostSampler::new(),
            last_host: None,
            secrets,
        }
    }

    /// The host since the last interval written.
    fn host_stats(&mut self) -> Option<msgbench_metrics::HostStats> {
        let now = std::time::Instant::now();
        if let Some((at, h)) = self.last_host
            && now.duration_since(at) < std::time::Duration::from_millis(200)
        {
            return Some(h);
        }
        let h = self.host.sample()?;
        self.last_host = Some((now, h));
        Some(h)
    }

    /// Judges `thresholds` (those that can be judged before the end) on the figures so far
    /// after every interval of the measure phase, and requests a stop at the first failure.
    pub fn watch_thresholds(&mut self, thresholds: &[Threshold], shutdown: Shutdown) {
        let thresholds: Vec<Threshold> = thresholds
            .iter()
            .filter(|t| t.judged_live())
            .cloned()
            .collect();
        if !thresholds.is_empty() {
            self.watch = Some(Watch {
                thresholds,
                shutdown,
                tripped: None,
            });
        }
    }

    /// The failed threshold that stopped the run, if one did.
    pub fn tripped(&self) -> Option<&str> {
        self.watch.as_ref()?.tripped.as_deref()
    }

    /// After a measure interval: the thresholds judged on the report so far (a clone of the
    /// builder: once per interval, never on the hot path).
    fn judge_live(&mut self, iv: &IntervalStats) {
        let Some(w) = &self.watch else { return };
        if w.tripped.is_some() || iv.phase != msgbench_metrics::Phase::Measure {
            return;
        }
        let Ok(so_far) = self.report.clone().finish() else {
            return;
        };
        let Some(failed) = msgbench_report::verdict::evaluate(&so_far, &w.thresholds)
            .into_iter()
            .find(|v| !v.pass)
        else {
            return;
        };
        let detail = format!(
            "threshold {} failed (actual {}) after {:.1}s: stopping the run (--threshold-abort)",
            failed.threshold, failed.shown, iv.end_s
        );
        if let Some(w) = &mut self.watch {
            w.tripped = Some(failed.threshold.clone());
            w.shutdown.request();
        }
        self.say(&format!("msgbench: {detail}"));
        self.push(Record::Event(EventRecord {
            at_s: iv.end_s,
            kind: EventKind::Threshold,
            detail,
        }));
    }

    /// Shows a progress line below the table on long runs (call only when stderr is a
    /// terminal and the table is shown).
    pub fn show_progress(&mut self) {
        self.progress = Some(msgbench_tui::ProgressLine::new());
    }

    /// A full-screen view (the TUI) draws on the terminal: nothing else may print there.
    pub fn terminal_taken(&mut self) {
        self.terminal_taken = true;
    }

    /// Prints one line of the live output on stderr: above the progress line if there is one,
    /// not at all while a full-screen view owns the terminal.
    fn say(&self, line: &str) {
        if self.terminal_taken {
            return;
        }
        match &self.progress {
            Some(p) => p.println(line),
            None => eprintln!("{line}"),
        }
    }

    /// Adds a live view; it sees every record from the next one written on.
    pub fn add_view(&mut self, view: Box<dyn LiveView>) {
        self.views.push(view);
    }

    /// Tells every view the run is over (after the `end` record).
    pub fn finish_views(&mut self) {
        if let Some(p) = &mut self.progress {
            p.finish();
        }
        for v in &mut self.views {
            v.finish();
        }
    }

    /// Stops the run through `shutdown` once the results file cannot be written: a benchmark
    /// whose results cannot be kept should not go on loading the system under test.
    pub fn stop_on_write_error(&mut self, shutdown: Shutdown) {
        self.write_stop = Some(shutdown);
    }

    /// Records and writes one line, its secrets scrubbed first.
    pub fn push(&mut self, mut r: Record) {
        scrub(&self.secrets, &mut r);
        if let Some(w) = &mut self.writer
            && let Err(e) = w.write(&r)
        {
            // Nothing more is written after the first failure: the file ends with whole
            // records (and perhaps one torn line, which readers skip), never with a gap.
            self.writer = None;
            self.write_error = Some(e.to_string());
            self.say(&format!(
                "msgbench: cannot write the results file ({e}): stopping the run"
            ));
            if let Some(s) = &self.write_stop {
                s.request();
            }
        }
        self.report.add(&r);
        if let Some(p) = &mut self.progress {
            p.record(&r);
        }
        for v in &mut self.views {
            v.record(&r);
        }
    }

    /// Flushes the results file.
    pub fn flush(&mut self) {
        if let Some(w) = &mut self.writer {
            let _ = w.flush();
        }
    }
}

impl Observer for RunOutput {
    fn interval(&mut self, iv: &IntervalStats) {
        self.gaps_opened += iv.counters.gaps_opened;
        self.gaps_filled += iv.counters.gaps_filled;
        if !self.quiet {
            let conn = iv.gauges.is_some();
            if self.lines.is_multiple_of(25) {
                let h = if conn {
                    live::conn_header()
                } else {
                    live::header()
                };
                self.say(&h);
            }
            let lost = if self.fanout {
                self.gaps_opened.saturating_sub(self.gaps_filled)
            } else {
                0
            };
            if conn {
                self.say(&live::conn_line(iv));
            } else {
                self.say(&live::line(iv, lost));
            }
            for g in &iv.groups {
                self.say(&live::group_line(g, iv.duration_s()));
            }
            self.lines += 1;
        }
        let mut record = iv.clone();
        if record.host.is_none() {
            record.host = self.host_stats();
        }
        self.push(Record::Interval(record));
        self.judge_live(iv);
    }

    fn event(&mut self, ev: &RunEvent) {
        if !self.quiet && ev.kind.is_notable() {
            let detail = self.secrets.scrub(&ev.detail);
            self.say(&format!("[{:>7.1}s] {}: {detail}", ev.at_s, ev.kind));
        }
        self.push(Record::Event(EventRecord {
            at_s: ev.at_s,
            kind: ev.kind,
            detail: ev.detail.clone(),
        }));
    }
}

/// Scrubs `secrets` from the text of `r`. Events are scrubbed field by field; `begin`, `end`
/// and a search's records (once per run or step each) through their JSON form, so text added
/// to them later is covered too.
fn scrub(secrets: &Secrets, r: &mut Record) {
    if secrets.is_empty() {
        return;
    }
    match r {
        Record::Interval(_) => {}
        Record::Event(e) => {
            e.detail = secrets.scrub(&e.detail).into_owned();
        }
        Record::Begin(_) | Record::End(_) | Record::SearchStep(_) | Record::Search(_) => {
            let Ok(mut v) = serde_json::to_value(&*r) else {
                return;
            };
            scrub_json(secrets, &mut v);
            if let Ok(clean) = serde_json::from_value(v) {
                *r = clean;
            }
        }
    }
}

fn scrub_json(secrets: &Secrets, v: &mut serde_json::Value) {
    match v {
        serde_json::Value::String(s) => {
            if let std::borrow::Cow::Owned(clean) = secrets.scrub(s) {
                *s = clean;
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(|x| scrub_json(secrets, x)),
        serde_json::Value::Object(m) => m.values_mut().for_each(|x| scrub_json(secrets, x)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use msgbench_report::End;

    /// Free text that quotes a secret (a driver's error, a warning) reaches neither the file nor
    /// the report with it.
    #[test]
    fn records_are_scrubbed_before_anything_sees_them() {
        let mut secrets = Secrets::new();
        secrets.add("S3cr3t-XYZZY-42");
        let dir = std::env::temp_dir().join(format!("msgbench-scrub-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.jsonl");
        let writer = ResultsWriter::new(File::create(&path).unwrap());
        let mut out = RunOutput::new(Some(writer), true, true, secrets);
        out.push(Record::Event(EventRecord {
            at_s: 1.0,
            kind: EventKind::Error,
            detail: "connect to mqtt://u:S3cr3t-XYZZY-42@h failed".into(),
        }));
        let end = End {
            duration_s: 1.0,
            interrupted: false,
            drain_complete: true,
            phases: Vec::new(),
            integrity: Default::default(),
            warnings: vec!["auth S3cr3t-XYZZY-42 refused".into()],
            connections: None,
            stages: Vec::new(),
            tcp: None,
            backlog: None,
            responses: None,
            thresholds: Vec::new(),
            groups: Vec::new(),
        };
        out.push(Record::End(end));
        out.flush();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(!text.contains("S3cr3t"), "{text}");
        assert!(text.contains("mqtt://u:***@h failed"), "{text}");
        assert!(text.contains("auth *** refused"), "{text}");
    }
}
