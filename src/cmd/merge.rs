//! `msgbench merge`: a segmented run's results files, merged into one.

use crate::cli::args::MergeArgs;
use anyhow::{Context, Result};
use msgbench_report::{ReportBuilder, for_each_record};
use std::process::ExitCode;

/// Merges, says what was merged, optionally prints the merged report.
pub fn run(args: MergeArgs) -> Result<ExitCode> {
    if args.files.iter().any(|f| f == &args.output) {
        anyhow::bail!(
            "the output {} is also an input: write the merged file elsewhere",
            args.output.display()
        );
    }
    let tmp = args.output.with_extension("jsonl.partial");
    let mut out =
        std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    let started = std::time::Instant::now();
    let summary = match msgbench_report::merge::merge(&args.files, &mut out, args.partial) {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e.into());
        }
    };
    drop(out);
    // The merged file appears whole or not at all.
    std::fs::rename(&tmp, &args.output)
        .with_context(|| format!("cannot write {}", args.output.display()))?;
    eprintln!(
        "msgbench merge: {} of {} segments, {} intervals -> {} in {:.2}s{}",
        summary.segments,
        summary.of,
        summary.intervals,
        args.output.display(),
        started.elapsed().as_secs_f64(),
        match &summary.integrity {
            Some(i) => format!(
                "; delivered {} of {} expected, lost {}, duplicated {}",
                i.delivered, i.expected, i.lost, i.duplicated
            ),
            None => " (incomplete: no end record)".to_string(),
        }
    );
    if let Some(f) = args.format {
        let file = std::fs::File::open(&args.output)?;
        let mut builder = ReportBuilder::new();
        for_each_record(std::io::BufReader::new(file), |r| builder.add(&r))?;
        let report = builder.finish()?;
        msgbench_report::render(&report, super::format(f), &mut std::io::stdout().lock())?;
    }
    Ok(ExitCode::SUCCESS)
}
