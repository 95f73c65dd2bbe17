//! `msgbench search`: the capacity search. The strategy (which rate next, when to stop) is
//! `msgbench_core::search`; judging a step and adding the steps up is `msgbench_report::search`;
//! this glue runs each step as a `run` at the rate chosen and writes every step to one
//! results file, on one time axis.

use crate::cli::args::{SearchArgs, SearchOptions};
use crate::output::RunOutput;
use crate::registry;
use anyhow::{Context, Result, anyhow};
use msgbench_core::clock::unix_ms;
use msgbench_core::pacer::RateShape;
use msgbench_core::runner::EventKind;
use msgbench_core::runner::{Observer, RunEvent};
use msgbench_core::scenario::{Measure, RunPlan};
use msgbench_core::search::{Limit, RateSearch, SearchSettings, StepKind, StepOutcome};
use msgbench_core::shutdown::Shutdown;
use msgbench_core::units::{format_duration, parse_count};
use msgbench_metrics::IntervalStats;
use msgbench_report::records::{FORMAT_VERSION, Host};
use msgbench_report::search::{SearchEnd, combined_end, judge_step};
use msgbench_report::verdict::Threshold;
use msgbench_report::{Begin, End, Record, ReportBuilder, ResultsWriter};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use super::verdict::{EXIT_INTERRUPTED, EXIT_OK, EXIT_VERDICT, usage};

/// Each step's warm-up and measure phase unless --warmup / --duration say otherwise.
const STEP_WARMUP: Duration = Duration::from_secs(1);
const STEP_MEASURE: Duration = Duration::from_secs(2);
/// The longest drain of a step unless --drain says otherwise: an overloaded step's backlog is
/// loss or in doubt, not a reason to wait.
const STEP_DRAIN: Duration = Duration::from_secs(2);

/// The search as the user asked for it, validated.
struct SearchPlan {
    settings: SearchSettings,
    objectives: Vec<Threshold>,
    min_achieved: f64,
}

fn percent(flag: &str, v: &str) -> Result<f64> {
    let x: f64 = v
        .trim()
        .trim_end_matches('%')
        .parse()
        .map_err(|_| anyhow!("--{flag} {v}: expected a percentage such as 2%"))?;
    if !(x > 0.0 && x < 100.0) {
        return Err(anyhow!("--{flag} {v}: must be between 0% and 100%"));
    }
    Ok(x / 100.0)
}

fn rate(flag: &str, v: &str) -> Result<f64> {
    let r = parse_count(v).map_err(|e| anyhow!("--{flag} {v}: {e}"))?;
    if r.is_nan() || r < 1.0 {
        return Err(anyhow!(
            "--{flag} {v}: must be at least 1 message per second"
        ));
    }
    Ok(r)
}

/// Refuses the `run` options a search sets itself or cannot honour.
fn refuse_run_options(a: &crate::cli::args::RunArgs) -> Result<()> {
    let refused: [(bool, &str); 8] = [
        (
            a.rate.is_some(),
            "--rate (the search chooses the rates: --start-rate, --max-rate)",
        ),
        (
            a.rate_shape.is_some(),
            "--rate-shape (each step runs at a constant rate)",
        ),
        (
            a.messages.is_some(),
            "--messages (each step runs for --duration)",
        ),
        (a.tui, "--tui"),
        (a.dashboard.dashboard.is_some(), "--dashboard"),
        (a.metrics.is_some(), "--metrics"),
        (
            a.verdict.junit.is_some() || a.verdict.summary.is_some(),
            "--junit and --summary",
        ),
        (a.segment.segment.is_some(), "--segment"),
    ];
    match refused.iter().find(|(given, _)| *given) {
        Some((_, what)) => Err(anyhow!("msgbench search does not take {what}")),
        None => Ok(()),
    }
}

fn search_plan(o: &SearchOptions, plan: &RunPlan) -> Result<SearchPlan> {
    let mut conds = o.slo.clone();
    conds.extend(plan.thresholds.iter().cloned());
    if conds.is_empty() {
        return Err(anyhow!(
            "a search needs at least one objective: --slo 'e2e.p99 < 10ms' (or --threshold, or [thresholds] in the scenario)"
        ));
    }
    let objectives = msgbench_report::verdict::parse_all(&conds).map_err(anyhow::Error::msg)?;
    let d = SearchSettings::default();
    let settings = SearchSettings {
        start: o
            .start_rate
            .as_deref()
            .map_or(Ok(d.start), |v| rate("start-rate", v))?,
        ceiling: o
            .max_rate
            .as_deref()
            .map_or(Ok(d.ceiling), |v| rate("max-rate", v))?,
        precision: o
            .precision
            .as_deref()
            .map_or(Ok(d.precision), |v| percent("precision", v))?,
        repeats: o.repeat.unwrap_or(d.repeats),
        max_steps: o.max_steps.unwrap_or(d.max_steps).max(1),
        ..d
    };
    if settings.start > settings.ceiling {
        return Err(anyhow!(
            "--start-rate {} is above --max-rate {}",
            settings.start,
            settings.ceiling
        ));
    }
    let min_achieved = o
        .min_achieved
        .as_deref()
        .map_or(Ok(0.95), |v| percent("min-achieved", v))?;
    Ok(SearchPlan {
        settings,
        objectives,
        min_achieved,
    })
}

/// Feeds one step's records to the file (shifted onto the search's time axis) and to the
/// step's own report.
struct StepObserver<'a> {
    out: &'a mut RunOutput,
    secrets: &'a msgbench_core::redact::Secrets,
    step: ReportBuilder,
    /// Where this step starts on the file's time axis, seconds.
    t0: f64,
    /// The first interval index of this step in the file.
    index0: u64,
    intervals: u64,
    last_end_s: f64,
}

impl Observer for StepObserver<'_> {
    fn interval(&mut self, iv: &IntervalStats) {
        self.step.add(&Record::Interval(iv.clone()));
        let mut shifted = iv.clone();
        shifted.start_s += self.t0;
        shifted.end_s += self.t0;
        shifted.index += self.index0;
        self.intervals = self.intervals.max(iv.index + 1);
        self.last_end_s = self.last_end_s.max(iv.end_s);
        self.out.interval(&shifted);
    }

    fn event(&mut self, ev: &RunEvent) {
        self.step.add(&Record::Event(msgbench_report::EventRecord {
            at_s: ev.at_s,
            kind: ev.kind,
            detail: ev.detail.clone(),
        }));
        let at_s = self.t0 + ev.at_s.max(0.0);
        if matches!(
            ev.kind,
            EventKind::Error | EventKind::Warning | EventKind::Disconnected
        ) {
            eprintln!("           {}: {}", ev.kind, self.secrets.scrub(&ev.detail));
        }
        self.out.event(&RunEvent {
            at_s,
            kind: ev.kind,
            detail: ev.detail.clone(),
        });
    }
}

fn kind_name(k: StepKind) -> &'static str {
    match k {
        StepKind::Probe => "probe",
        StepKind::Bisect => "bisect",
        StepKind::Repeat => "repeat",
    }
}

fn limit_name(l: Limit) -> &'static str {
    match l {
        Limit::Objectives => "objectives",
        Limit::Ceiling => "ceiling",
        Limit::Generator => "generator",
        Limit::NothingHeld => "nothing_held",
        Limit::Steps => "steps",
    }
}

fn fmt_rate(r: f64) -> String {
    let r = r.round() as u64;
    let s = r.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The answer in one sentence.
fn summary(c: &msgbench_core::search::Conclusion, interrupted: bool, ceiling: f64) -> String {
    let held = format!(
        "held in {} of {} runs at that rate",
        c.held_at_capacity, c.runs_at_capacity
    );
    let next = c
        .failed_at
        .map(|f| format!("; {} msgs/s failed", fmt_rate(f)))
        .unwrap_or_default();
    let head = if interrupted { "INTERRUPTED: " } else { "" };
    match (c.limit, c.capacity) {
        (_, None) => format!(
            "{head}no rate tried held every objective (the lowest tried: {} msgs/s)",
            c.failed_at.map_or("none".into(), fmt_rate)
        ),
        (Limit::Objectives, Some(cap)) => {
            format!("{head}capacity {} msgs/s ({held}{next})", fmt_rate(cap))
        }
        (Limit::Ceiling, Some(_)) => format!(
            "{head}capacity at least {} msgs/s: every rate up to --max-rate held",
            fmt_rate(ceiling)
        ),
        (Limit::Generator, Some(cap)) => format!(
            "{head}capacity at least {} msgs/s: msgbench itself was the bottleneck above it ({} msgs/s saturated its threads; give it more with --workers or measure from several processes)",
            fmt_rate(cap),
            c.failed_at.map_or("?".into(), fmt_rate)
        ),
        (Limit::Steps, Some(cap)) | (Limit::NothingHeld, Some(cap)) => format!(
            "{head}capacity at least {} msgs/s ({held}{next}); the search stopped before the bracket was narrow enough",
            fmt_rate(cap)
        ),
    }
}

/// Runs the search; see `msgbench search --help` for the exit codes.
pub fn run(args: SearchArgs) -> Result<ExitCode> {
    refuse_run_options(&args.run).map_err(usage)?;
    let run_id = super::run::new_run_id();
    let (mut base, demo) = crate::cli::plan::build(&args.run, run_id).map_err(usage)?;
    if demo {
        return Err(usage(anyhow!(
            "msgbench search needs a target: a URL (nats://host:4222, 'mem://?max_rate=50k') or a scenario file"
        )));
    }
    if base.connections.is_some() {
        return Err(usage(anyhow!(
            "msgbench search measures message rates; connection workloads (--connections) are not searched"
        )));
    }
    registry::check_scheme(&base).map_err(usage)?;
    let sp = search_plan(&args.search, &base).map_err(usage)?;
    if args.run.warmup.is_none() {
        base.warmup = STEP_WARMUP;
    }
    if args.run.duration.is_none() {
        base.measure = Measure::Duration(STEP_MEASURE);
    }
    if args.run.drain.is_none() {
        base.drain = base.drain.min(STEP_DRAIN);
    }
    // The objectives are judged per step here, not at the end of each step's run.
    base.thresholds.clear();
    base.threshold_abort = false;
    let clock = super::run::setup_clock(&base, None, args.run.quiet)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let path: Option<PathBuf> = if args.run.no_output {
        None
    } else {
        Some(args.run.output.clone().unwrap_or_else(|| {
            PathBuf::from(format!(
                "msgbench-search-{}.jsonl",
                super::run::utc_stamp(unix_ms() / 1000)
            ))
        }))
    };
    let writer = match &path {
        Some(p) => Some(ResultsWriter::new(std::fs::File::create(p).with_context(
            || format!("cannot create results file {}", p.display()),
        )?)),
        None => None,
    };
    let fanout = matches!(
        base.subscription,
        msgbench_core::scenario::SubscriptionMode::Fanout
    );
    let secrets = base.secrets();
    let mut out = RunOutput::new(writer, true, fanout, secrets.clone());
    let mut plan_json = serde_json::to_value(base.redacted())?;
    if let Some(obj) = plan_json.as_object_mut() {
        obj.insert(
            "search".into(),
            serde_json::json!({
                "objectives": sp.objectives.iter().map(|t| t.describe()).collect::<Vec<_>>(),
                "start_rate": sp.settings.start,
                "max_rate": sp.settings.ceiling,
                "precision": sp.settings.precision,
                "repeats": sp.settings.repeats,
                "min_achieved": sp.min_achieved,
            }),
        );
    }
    let begin = Begin {
        version: FORMAT_VERSION,
        tool: format!("msgbench {}", env!("CARGO_PKG_VERSION")),
        started_unix_ms: unix_ms(),
        host: Host {
            hostname: super::run::hostname(),
            cpus: msgbench_core::available_cpus() as u32,
            os: std::env::consts::OS.to_string(),
        },
        clock,
        plan: plan_json,
        segments: Vec::new(),
    };
    out.push(Record::Begin(begin.clone()));
    if !args.run.quiet {
        eprintln!(
            "msgbench: capacity search on {}: objectives {}; each step {} warm-up + {} measure",
            base.redacted().target,
            sp.objectives
                .iter()
                .map(|t| t.describe())
                .collect::<Vec<_>>()
                .join(", "),
            format_duration(base.warmup),
            match base.measure {
                Measure::Duration(d) => format_duration(d),
                Measure::Messages(n) => format!("{n} messages"),
            }
        );
    }

    let shutdown = Shutdown::new();
    rt.block_on(async { shutdown.listen_for_signals() });
    // A results file that cannot be written stops the step and the search, as it stops a run.
    out.stop_on_write_error(shutdown.clone());
    let mut search = RateSearch::new(sp.settings);
    let mut ends: Vec<(End, bool)> = Vec::new();
    let (mut t0, mut index0) = (0.0f64, 0u64);
    let mut interrupted = false;
    let mut index = 0u32;
    while let Some(probe) = search.next() {
        index += 1;
        let mut plan = base.clone();
        plan.rate = RateShape::Constant { rate: probe.rate };
        // Each step's messages are its own: a backlog left by an overloaded step counts as
        // foreign in the next, never as its deliveries.
        plan.run_id = run_id.wrapping_add(index);
        out.push(Record::Event(msgbench_report::EventRecord {
            at_s: t0,
            kind: EventKind::Search,
            detail: format!(
                "step {index} ({}): {} msgs/s offered",
                kind_name(probe.kind),
                fmt_rate(probe.rate)
            ),
        }));
        let mut obs = StepObserver {
            out: &mut out,
            secrets: &secrets,
            step: ReportBuilder::new(),
            t0,
            index0,
            intervals: 0,
            last_end_s: 0.0,
        };
        obs.step.add(&Record::Begin(begin.clone()));
        let outcome = rt
            .block_on(registry::run_plan(&plan, &mut obs, shutdown.clone(), None))
            .map_err(|e| anyhow!("{}", secrets.scrub(&format!("{e:#}"))))
            .with_context(|| format!("search step {index} at {} msgs/s", fmt_rate(probe.rate)))?;
        let end = super::run::end_record(&outcome, &plan, outcome.interrupted);
        obs.step.add(&Record::End(end.clone()));
        let (step_builder, intervals, last_end) = (obs.step, obs.intervals, obs.last_end_s);
        let report = step_builder.finish()?;
        let (mut step, generator_limited) = judge_step(
            index,
            kind_name(probe.kind),
            probe.rate,
            &report,
            &sp.objectives,
            sp.min_achieved,
        );
        let length = outcome.duration_s.max(last_end);
        step.start_s = t0;
        step.end_s = t0 + length;
        if !args.run.quiet {
            eprintln!(
                "step {index:>2} {:<6} {:>12} msgs/s offered: sent {:>12}/s, received {:>12}/s, e2e p99 {}, lost {} -> {}",
                step.kind,
                fmt_rate(step.offered_per_s),
                fmt_rate(step.sent_per_s),
                fmt_rate(step.received_per_s),
                msgbench_report::live::latency(step.e2e_ns[1]),
                step.lost,
                if step.pass {
                    "pass".to_string()
                } else {
                    format!("FAIL: {}", step.why)
                }
            );
        }
        out.push(Record::SearchStep(step.clone()));
        ends.push((end, step.pass));
        t0 += length;
        index0 += intervals;
        if outcome.interrupted {
            interrupted = true;
            break;
        }
        search.record(StepOutcome {
            pass: step.pass,
            generator_limited,
        });
    }
    let c = search.conclusion();
    let sentence = summary(&c, interrupted, sp.settings.ceiling);
    out.push(Record::Search(SearchEnd {
        objectives: sp.objectives.iter().map(|t| t.describe()).collect(),
        min_achieved: sp.min_achieved,
        capacity_per_s: c.capacity,
        failed_at_per_s: c.failed_at,
        runs_at_capacity: c.runs_at_capacity,
        held_at_capacity: c.held_at_capacity,
        limit: if interrupted {
            "interrupted".into()
        } else {
            limit_name(c.limit).into()
        },
        summary: sentence.clone(),
    }));
    out.push(Record::End(combined_end(&ends, interrupted)));
    out.flush();
    rt.shutdown_timeout(Duration::from_secs(1));

    let report = out.report.finish()?;
    let mut stdout = std::io::stdout().lock();
    msgbench_report::render(&report, super::format(args.run.format), &mut stdout)?;
    if let (Some(p), Some(e)) = (&path, &out.write_error) {
        eprintln!(
            "error: cannot write the results file {} ({e}); the search was stopped, the report \
             above covers every step run and the file holds the records written before the failure",
            p.display()
        );
        return Ok(ExitCode::from(super::verdict::EXIT_COULD_NOT_RUN));
    }
    if let Some(p) = &path {
        eprintln!("msgbench: results written to {}", p.display());
    }
    eprintln!("msgbench: {sentence}");
    Ok(ExitCode::from(if interrupted {
        EXIT_INTERRUPTED
    } else if c.capacity.is_none() {
        EXIT_VERDICT
    } else {
        EXIT_OK
    }))
}
