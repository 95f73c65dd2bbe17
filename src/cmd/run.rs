//! `msgbench run`: plan, connect, run, write the results file, print the report.

use crate::cli::args::RunArgs;
use crate::output::RunOutput;
use crate::registry;
use anyhow::{Context, Result};
use msgbench_core::clock::{now_ns, unix_ms};
use msgbench_core::pacer::RateShape;
use msgbench_core::payload::SizeSpec;
use msgbench_core::scenario::{ConnectionMode, Measure, RunPlan, SubscriptionMode};
use msgbench_core::shutdown::Shutdown;
use msgbench_core::units::format_duration;
use msgbench_report::records::{ClockInfo, FORMAT_VERSION, Host};
use msgbench_report::{Begin, End, Record, ResultsWriter};
use msgbench_serve::mqtt::{Broker, BrokerConfig};
use std::path::PathBuf;
use std::process::ExitCode;

fn new_run_id() -> u32 {
    let x = (now_ns() ^ ((std::process::id() as u64) << 40)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 32) as u32
}

/// `YYYYmmdd-HHMMSS` (UTC) for default file names.
fn utc_stamp(unix_s: u64) -> String {
    let days = (unix_s / 86_400) as i64;
    let secs = unix_s % 86_400;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
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
        "{to} | {} topic(s), {} producer(s), {} consumer(s) ({subs}){} | rate {rate} | size {} | warm-up {}, measure {measure}, drain ≤ {}",
        plan.topics.len(),
        plan.producers(),
        plan.consumers(),
        if plan.request_reply {
            ", request/reply"
        } else {
            ""
        },
        match plan.size {
            SizeSpec::Fixed { bytes } => format!("{bytes} B"),
            SizeSpec::Range { min, max } => format!("{min}..{max} B"),
        },
        format_duration(plan.warmup),
        format_duration(plan.drain),
    )
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Runs the benchmark; the exit code is 0 on a completed run, 130 when interrupted.
pub fn run(args: RunArgs) -> Result<ExitCode> {
    let (mut plan, demo) = crate::cli::plan::build(&args, new_run_id())?;
    registry::check_scheme(&plan)?;
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
    let writer = match &path {
        Some(p) => Some(ResultsWriter::new(std::fs::File::create(p).with_context(
            || format!("cannot create results file {}", p.display()),
        )?)),
        None => None,
    };
    let fanout = matches!(plan.subscription, SubscriptionMode::Fanout);
    let mut out = RunOutput::new(writer, args.quiet, fanout);
    // Live views are added here, before `begin` is written, so each sees every record.
    let redacted = plan.redacted();
    out.push(Record::Begin(Begin {
        version: FORMAT_VERSION,
        tool: format!("msgbench {}", env!("CARGO_PKG_VERSION")),
        started_unix_ms: unix_ms(),
        host: Host {
            hostname: hostname(),
            cpus: std::thread::available_parallelism()
                .map(|n| n.get() as u32)
                .unwrap_or(1),
            os: std::env::consts::OS.to_string(),
        },
        clock: ClockInfo {
            source: "CLOCK_MONOTONIC".into(),
            scope: "host".into(),
        },
        plan: serde_json::to_value(&redacted)?,
    }));
    if !args.quiet {
        eprintln!("msgbench: {}", describe(&plan));
    }

    let outcome = rt.block_on(async {
        let shutdown = Shutdown::new();
        shutdown.listen_for_signals();
        registry::run_plan(&plan, &mut out, shutdown).await
    });
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            out.push(Record::Event(msgbench_report::EventRecord {
                at_s: 0.0,
                kind: "error".into(),
                detail: format!("{e:#}"),
            }));
            out.flush();
            return Err(e);
        }
    };
    out.push(Record::End(End {
        duration_s: outcome.duration_s,
        interrupted: outcome.interrupted,
        drain_complete: outcome.drain_complete,
        phases: outcome.phases.clone(),
        integrity: outcome.integrity,
        warnings: outcome.warnings.clone(),
        connections: outcome.connections.clone(),
        stages: outcome.stages.clone(),
    }));
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
    if let Some(p) = &path {
        eprintln!(
            "msgbench: results written to {}{}",
            p.display(),
            match &write_error {
                Some(e) => format!(" (INCOMPLETE: {e})"),
                None => String::new(),
            }
        );
    }
    if outcome.producers_failed >= plan.producers() {
        eprintln!(
            "error: every producer stopped on an error that retrying cannot fix (see the warnings above)"
        );
        return Ok(ExitCode::from(1));
    }
    Ok(if outcome.interrupted {
        ExitCode::from(130)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_stamps() {
        assert_eq!(super::utc_stamp(0), "19700101-000000");
        assert_eq!(super::utc_stamp(1_795_000_000), "20261118-110640");
    }
}
