//! `msgbench run`: plan, connect, run, write the results file, print the report.

use crate::cli::args::RunArgs;
use crate::output::RunOutput;
use crate::registry;
use anyhow::{Context, Result};
use msgbench_core::clock::{ClockState, anchor_to_wall, now_ns, unix_ms};
use msgbench_core::pacer::RateShape;
use msgbench_core::runner::EventKind;
use msgbench_core::scenario::{ConnectionMode, Measure, RunPlan, SubscriptionMode};
use msgbench_core::shutdown::Shutdown;
use msgbench_core::units::format_duration;
use msgbench_report::records::{ClockInfo, FORMAT_VERSION, Host};
use msgbench_report::{Begin, End, Record, ResultsWriter};
use msgbench_serve::mqtt::{Broker, BrokerConfig};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

pub(crate) fn new_run_id() -> u32 {
    let x = (now_ns() ^ ((std::process::id() as u64) << 40)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 32) as u32
}

/// `YYYYmmdd-HHMMSS` (UTC) for default file names.
pub(crate) fn utc_stamp(unix_s: u64) -> String {
    let (y, m, d, hh, mm, ss) = msgbench_report::html::civil(unix_s);
    format!("{y:04}{m:02}{d:02}-{hh:02}{mm:02}{ss:02}")
}

fn describe(plan: &RunPlan) -> String {
    if let Some(c) = &plan.connections {
        let rate = c
            .rate
            .map_or("as fast as possible".to_string(), |r| format!("{r}/s"));
        let sources = match c.source_addrs.len() {
            0 => String::new(),
            n => format!(", from {n} source addresses"),
        };
        return match c.mode {
            ConnectionMode::Hold => format!(
                "{} | hold {} connections (attempts {rate}, {} at a time{sources}) for {}, then close",
                plan.redacted().target,
                c.count.unwrap_or(0),
                c.concurrency,
                format_duration(c.hold)
            ),
            ConnectionMode::Journey => format!(
                "{} | journey of {} virtual users (started {rate}{sources}), {} time(s) each: {}",
                plan.redacted().target,
                c.count.unwrap_or(0),
                match c.repeat {
                    0 => "until the end".to_string(),
                    n => n.to_string(),
                },
                c.journey
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            ConnectionMode::Storm => format!(
                "{} | connect storm: connect, handshake, {} message(s), close; {} at a time, attempts {rate}{sources}, {}",
                plan.redacted().target,
                c.messages,
                c.concurrency,
                match (c.count, plan.measure) {
                    (Some(n), _) => format!("{n} cycles"),
                    (None, Measure::Duration(d)) => format_duration(d),
                    (None, Measure::Messages(n)) => format!("{n} cycles"),
                }
            ),
        };
    }
    let rate = match &plan.rate {
        RateShape::Unlimited => "unlimited".to_string(),
        RateShape::Constant { rate } => format!("{rate} msgs/s"),
        other => format!("{other:?}").to_lowercase(),
    };
    let measure = match plan.measure {
        Measure::Duration(d) => format_duration(d),
        Measure::Messages(n) => format!("{n} messages"),
    };
    let mut subs = match &plan.subscription {
        SubscriptionMode::Fanout => "fan-out".to_string(),
        SubscriptionMode::Queue { group } => format!("queue group `{group}`"),
    };
    if let Some(t) = &plan.tracking {
        // Stage listeners replace consumers; name the stages in order (s1, s2... in the table).
        let names: Vec<String> = t
            .stages
            .iter()
            .enumerate()
            .map(|(i, s)| format!("s{}={}", i + 1, s.name))
            .collect();
        subs = format!(
            "{} stages on {} queues: {}{}",
            t.stages.len(),
            t.queues().len(),
            names.join(", "),
            t.window_stage()
                .map(|w| format!("; window {} before s{}", plan.max_in_flight, w + 1))
                .unwrap_or_default()
        );
    }
    let r = plan.redacted();
    let to = match &r.consume_from {
        Some(c) => format!("{} -> {c} (producers -> consumers)", r.target),
        None => r.target.clone(),
    };
    format!(
        "{to} | {} topic(s), {} producer(s), {} consumer(s) ({subs}){} | rate {rate} | size {} | warm-up {}, measure {measure}, drain ≤ {}{}",
        plan.topics.len(),
        plan.producers(),
        plan.consumers(),
        if plan.request_reply {
            ", request/reply"
        } else {
            ""
        },
        plan.size.describe(),
        format_duration(plan.warmup),
        format_duration(plan.drain),
        match plan.workers {
            0 => String::new(),
            1 => " | 1 worker thread".to_string(),
            n => format!(" | {n} worker threads"),
        }
    )
}

/// Chooses the clock of this run and describes it for `begin`. Segments (and runs given a time
/// reference) measure in wall-clock time, corrected against the reference if there is one, so
/// stamps compare across hosts; everything else uses the host's monotonic clock.
pub(crate) fn setup_clock(
    plan: &RunPlan,
    reference: Option<&str>,
    quiet: bool,
) -> Result<ClockInfo> {
    let kernel = ClockState::read();
    let mut info = ClockInfo {
        source: "CLOCK_MONOTONIC".into(),
        scope: "host".into(),
        synchronized: kernel.as_ref().map(|k| k.synchronized),
        est_error_us: kernel.as_ref().map(|k| k.est_error_us),
        max_error_us: kernel.as_ref().map(|k| k.max_error_us),
        ..ClockInfo::default()
    };
    if plan.segment.is_none() && reference.is_none() {
        return Ok(info);
    }
    let mut correction = 0i64;
    if let Some(r) = reference {
        let off = msgbench_serve::time::measure(r, 16, std::time::Duration::from_millis(500))
            .with_context(|| format!("--time-reference {}", msgbench_core::redact::url(r)))?;
        correction = off.offset_ns;
        info.reference = Some(msgbench_core::redact::url(r));
        info.reference_offset_ns = Some(off.offset_ns);
        info.reference_rtt_ns = Some(off.rtt_ns);
        info.uncertainty_us = Some(off.rtt_ns.div_ceil(2000));
        if !quiet {
            eprintln!(
                "msgbench: clock offset to {}: {:+.3} ms (± {:.3} ms, best of {} probes)",
                msgbench_core::redact::url(r),
                off.offset_ns as f64 / 1e6,
                off.rtt_ns as f64 / 2e6,
                off.answered
            );
        }
    } else {
        info.uncertainty_us = kernel.as_ref().map(|k| k.bound_us());
        if !quiet && kernel.as_ref().is_none_or(|k| !k.synchronized) {
            eprintln!(
                "msgbench: this host's clock is not synchronized (adjtimex): end-to-end latency between segments on different hosts is uncertain by up to {}; give --time-reference to measure the offset (segments on this one host share its clock and need nothing)",
                kernel
                    .as_ref()
                    .map_or("an unknown amount".to_string(), |k| format!(
                        "{:.1} ms",
                        k.max_error_us as f64 / 1e3
                    ))
            );
        }
    }
    anchor_to_wall(correction);
    info.source = "CLOCK_MONOTONIC anchored to CLOCK_REALTIME".into();
    info.scope = "wall".into();
    Ok(info)
}

pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// `--dashboard` takes an optional value, so `run --dashboard mem://` reads the target as the
/// address: say so before anything starts.
fn check_dashboard_addr(addr: &str) -> Result<()> {
    if addr.contains("://") || addr.ends_with(".toml") {
        anyhow::bail!(
            "--dashboard {addr}: that looks like the target; put the target before --dashboard, or write --dashboard=ADDR"
        );
    }
    Ok(())
}

/// Starts the live dashboard on `addr` and prints its URL (never the token: see
/// `msgbench_dashboard::auth`).
fn start_dashboard(addr: &str, token: Option<&str>) -> Result<msgbench_dashboard::LiveDashboard> {
    let d = msgbench_dashboard::LiveDashboard::start(addr, token)?;
    eprintln!("msgbench: dashboard on {}", d.url());
    if token.is_some() {
        eprintln!(
            "msgbench: every dashboard request needs the --dashboard-token (open {}?token=TOKEN, or send Authorization: Bearer TOKEN)",
            d.url()
        );
    }
    Ok(d)
}

/// The `end` record of a run that ended with `outcome` (without verdicts).
pub(crate) fn end_record(
    outcome: &msgbench_core::runner::RunOutcome,
    plan: &RunPlan,
    interrupted: bool,
) -> End {
    End {
        duration_s: outcome.duration_s,
        interrupted,
        drain_complete: outcome.drain_complete,
        phases: outcome.phases.clone(),
        integrity: outcome.integrity,
        warnings: {
            let mut w = outcome.warnings.clone();
            if plan.segment.is_some_and(|s| s.count > 1) {
                w.push(msgbench_report::merge::PARTIAL_INTEGRITY_WARNING.to_string());
            }
            w
        },
        connections: outcome.connections.clone(),
        stages: outcome.stages.clone(),
        tcp: outcome.tcp,
        backlog: outcome.backlog,
        responses: outcome.responses.clone(),
        thresholds: Vec::new(),
        groups: Vec::new(),
    }
}

/// Runs the benchmark; the exit code is 0 on a completed run, 130 when interrupted.
pub fn run(args: RunArgs) -> Result<ExitCode> {
    use super::verdict::usage;
    if let Some(addr) = &args.dashboard.dashboard {
        check_dashboard_addr(addr).map_err(usage)?;
    }
    let (mut plan, mut groups, demo) =
        crate::cli::plan::build_run(&args, new_run_id()).map_err(usage)?;
    if groups.is_empty() {
        registry::check_scheme(&plan).map_err(usage)?;
    }
    for g in &groups {
        registry::check_scheme(g)
            .map_err(|e| e.context(format!("group `{}`", g.name)))
            .map_err(usage)?;
    }
    let thresholds =
        msgbench_report::verdict::parse_all(&plan.thresholds).map_err(anyhow::Error::msg)?;
    let clock = setup_clock(&plan, args.segment.time_reference.as_deref(), args.quiet)?;
    msgbench_net::batch::set_enabled(plan.io == msgbench_core::scenario::plan::IoMode::Batched);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // The demo's broker runs on this process's runtime until the run ends.
    let (stop_broker, broker_stopped) = tokio::sync::oneshot::channel::<()>();
    let broker = if demo {
        let broker = rt
            .block_on(Broker::bind("127.0.0.1:0", BrokerConfig::default()))
            .context("starting the embedded MQTT broker")?;
        plan.target = format!("mqtt://{}", broker.local_addr());
        for g in &mut groups {
            g.target = plan.target.clone();
        }
        // The broker's end of every connection counts against this process's open files.
        let clients = |p: &RunPlan| {
            p.connections.as_ref().and_then(|c| c.count).unwrap_or(0)
                + u64::from(p.producers() + p.consumers())
        };
        msgbench_core::runner::connections::reserve_fds(if groups.is_empty() {
            clients(&plan)
        } else {
            groups.iter().map(clients).sum()
        });
        eprintln!(
            "msgbench: no target given: started an embedded MQTT broker on {} for a short demo; \
             pass a URL such as mqtt://host:1883 or nats://host:4222 to measure a real system",
            plan.target
        );
        Some(rt.spawn(broker.run(async {
            let _ = broker_stopped.await;
        })))
    } else {
        None
    };
    let path: Option<PathBuf> = if args.no_output {
        None
    } else {
        Some(args.output.clone().unwrap_or_else(|| {
            PathBuf::from(format!("msgbench-{}.jsonl", utc_stamp(unix_ms() / 1000)))
        }))
    };
    // The dashboard binds before the results file is created: a bad address fails the run
    // before it leaves anything behind.
    let dashboard = match &args.dashboard.dashboard {
        Some(addr) => Some(start_dashboard(
            addr,
            args.dashboard.dashboard_token.as_deref(),
        )?),
        None => None,
    };
    // So does the Prometheus endpoint (it serves on the run's runtime until the run ends).
    let metrics = match &args.metrics {
        Some(addr) => {
            let view = crate::live::metrics::MetricsView::start(
                &rt,
                crate::live::metrics::parse_addr(addr)?,
            )?;
            eprintln!(
                "msgbench: Prometheus metrics at http://{}/metrics",
                view.local_addr()
            );
            Some(view)
        }
        None => None,
    };
    let writer = match &path {
        Some(p) => Some(ResultsWriter::new(std::fs::File::create(p).with_context(
            || format!("cannot create results file {}", p.display()),
        )?)),
        None => None,
    };
    let fanout = matches!(plan.subscription, SubscriptionMode::Fanout);
    // One stop handle for Ctrl-C, SIGTERM and the TUI's `q`.
    let shutdown = Shutdown::new();
    // --tui takes over the terminal (when stderr is one; otherwise the plain table shows).
    let tui = if args.tui {
        let mut notes = Vec::new();
        if let Some(d) = &dashboard {
            notes.push(format!("dashboard {}", d.url()));
        }
        if let Some(m) = &metrics {
            notes.push(format!("metrics http://{}/metrics", m.local_addr()));
        }
        crate::live::tui::TuiView::start(&shutdown, notes)
    } else {
        None
    };
    let quiet = args.quiet || tui.is_some();
    let mut secrets = plan.secrets();
    for g in &groups {
        secrets.extend(&g.secrets());
    }
    let mut out = RunOutput::new(writer, quiet, fanout, secrets.clone());
    if plan.threshold_abort {
        out.watch_thresholds(&thresholds, shutdown.clone());
    }
    out.stop_on_write_error(shutdown.clone());
    if tui.is_some() {
        out.terminal_taken();
    } else if !quiet && std::io::stderr().is_terminal() {
        out.show_progress();
    }
    // Live views are added here, before `begin` is written, so each sees every record. The
    // TUI goes first so it has given the terminal back before other views print at the end.
    if let Some(t) = tui {
        out.add_view(Box::new(t));
    }
    if let Some(d) = &dashboard {
        out.add_view(Box::new(crate::live::dashboard::DashboardView::new(
            d.feed(),
        )));
    }
    if let Some(m) = metrics {
        out.add_view(Box::new(m));
    }
    let redacted = plan.redacted();
    out.push(Record::Begin(Begin {
        version: FORMAT_VERSION,
        tool: format!("msgbench {}", env!("CARGO_PKG_VERSION")),
        started_unix_ms: unix_ms(),
        host: Host {
            hostname: hostname(),
            cpus: msgbench_core::available_cpus() as u32,
            os: std::env::consts::OS.to_string(),
        },
        clock,
        plan: {
            let mut v = serde_json::to_value(&redacted)?;
            if !groups.is_empty() {
                let all: Vec<RunPlan> = groups.iter().map(RunPlan::redacted).collect();
                let mut targets: Vec<String> = all.iter().map(|g| g.target.clone()).collect();
                targets.dedup();
                v["target"] = targets.join(" + ").into();
                v["groups"] = serde_json::to_value(&all)?;
            }
            v
        },
        segments: Vec::new(),
    }));
    if !quiet {
        if groups.is_empty() {
            eprintln!("msgbench: {}", describe(&plan));
        }
        for g in &groups {
            eprintln!("msgbench: group {}: {}", g.name, describe(g));
        }
    }

    let outcome = rt.block_on(async {
        shutdown.listen_for_signals();
        if groups.is_empty() {
            registry::run_plan(&plan, &mut out, shutdown, None)
                .await
                .map(|o| (o, Vec::new()))
        } else {
            super::groups::run(&groups, &mut out, shutdown).await
        }
    });
    let (outcome, group_ends) = match outcome {
        Ok(o) => o,
        Err(e) => {
            // Errors may quote what failed, credentials included: scrubbed for the file (by
            // `push`) and for the terminal alike.
            let detail = secrets.scrub(&format!("{e:#}")).into_owned();
            out.push(Record::Event(msgbench_report::EventRecord {
                at_s: 0.0,
                kind: EventKind::Error,
                detail: detail.clone(),
            }));
            out.flush();
            let e_scrubbed = anyhow::Error::msg(detail);
            // What the driver could not be built from stays the user's mistake (exit 2).
            if e.downcast_ref::<super::verdict::UsageError>().is_some() {
                return Err(super::verdict::usage(e_scrubbed));
            }
            return Err(e_scrubbed);
        }
    };
    // A stop the thresholds asked for is a verdict, not an interruption.
    let tripped = out.tripped().map(str::to_string);
    let mut end = end_record(&outcome, &plan, outcome.interrupted && tripped.is_none());
    end.groups = group_ends;
    if !thresholds.is_empty() {
        // Judged on the report the file will give, `end` included (its delivery account).
        let mut probe = out.report.clone();
        probe.add(&Record::End(end.clone()));
        if let Ok(r) = probe.finish() {
            end.thresholds = msgbench_report::verdict::evaluate(&r, &thresholds);
        }
    }
    out.push(Record::End(end));
    out.flush();
    out.finish_views();
    if let Some(b) = broker {
        let _ = stop_broker.send(());
        let _ = rt.block_on(b);
    }
    rt.shutdown_timeout(std::time::Duration::from_secs(1));

    let write_error = out.write_error.clone();
    let report = out.report.finish()?;
    let mut stdout = std::io::stdout().lock();
    msgbench_report::render(&report, super::format(args.format), &mut stdout)?;
    if let (Some(p), Some(e)) = (&path, &write_error) {
        // The report above is whole (built from every record); the file ends where the
        // writing failed and `report` renders it up to there.
        eprintln!(
            "error: cannot write the results file {} ({e}); the run was stopped at {:.1} s, \
             the report above covers it and the file holds the records written before the failure",
            p.display(),
            outcome.duration_s
        );
        return Ok(ExitCode::from(super::verdict::EXIT_COULD_NOT_RUN));
    }
    if let Some(p) = &path {
        eprintln!("msgbench: results written to {}", p.display());
    }
    if let Some(p) = &path
        && !args.dashboard.no_history
    {
        super::dashboard::record_run(args.dashboard.results_db.as_deref(), &report, p);
    }
    let local_producers = if groups.is_empty() {
        plan.segment.map_or(plan.producers(), |s| {
            s.producer_share(plan.producers() as u64) as u32
        })
    } else {
        groups.iter().map(RunPlan::producers).sum()
    };
    if local_producers > 0 && outcome.producers_failed >= local_producers {
        // Named here too: with --quiet no warning was printed above.
        let why = report
            .warnings
            .iter()
            .find(|w| w.starts_with("producer ") && w.contains(" stopped"))
            .map_or_else(
                || " (see the report's warnings)".to_string(),
                |w| format!(": {w}"),
            );
        eprintln!("error: every producer stopped on an error it could not get past{why}");
        return Ok(ExitCode::from(super::verdict::EXIT_COULD_NOT_RUN));
    }
    let c = super::verdict::conclude(&report, outcome.interrupted && tripped.is_none());
    super::verdict::write_outputs(&args.verdict, &report, &c, path.as_deref())?;
    super::verdict::explain(&c, &report);
    Ok(ExitCode::from(c.code))
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_stamps() {
        assert_eq!(super::utc_stamp(0), "19700101-000000");
        assert_eq!(super::utc_stamp(1_795_000_000), "20261118-110640");
    }
}
