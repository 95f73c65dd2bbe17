//! `msgbench report`: re-render a results file (to stdout, or to a file with `-o`).

use crate::cli::args::ReportArgs;
use anyhow::{Context, Result};
use msgbench_report::{ReportBuilder, RunReport, for_each_record};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

/// Reads a results file into its report (streaming: memory does not grow with the run).
pub fn load(path: &Path) -> Result<RunReport> {
    let f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut builder = ReportBuilder::new();
    for_each_record(std::io::BufReader::new(f), |r| builder.add(&r))
        .with_context(|| format!("{}", path.display()))?;
    builder
        .finish()
        .with_context(|| format!("{}", path.display()))
}

/// Runs `write` on `output` (created or truncated), or on stdout when there is none.
pub fn write_to(
    output: Option<&Path>,
    write: impl FnOnce(&mut dyn Write) -> Result<()>,
) -> Result<()> {
    match output {
        Some(p) => {
            let f = std::fs::File::create(p)
                .with_context(|| format!("cannot create {}", p.display()))?;
            let mut w = std::io::BufWriter::new(f);
            write(&mut w)?;
            w.flush()
                .with_context(|| format!("cannot write {}", p.display()))?;
            eprintln!("msgbench: written to {}", p.display());
        }
        None => {
            let mut out = std::io::stdout().lock();
            write(&mut out)?;
            out.flush()?;
        }
    }
    Ok(())
}

/// Reads the results file and renders it; with `--threshold`, judges it by those instead of
/// the run's own thresholds. The exit code is the verdict's (3 when a threshold fails).
pub fn run(args: ReportArgs) -> Result<ExitCode> {
    let thresholds = msgbench_report::verdict::parse_all(&args.verdict.threshold)
        .map_err(|e| super::verdict::usage(anyhow::anyhow!(e)))?;
    let mut report = load(&args.results)?;
    if !thresholds.is_empty() {
        report.judge(&thresholds);
    }
    write_to(args.output.as_deref(), |out| {
        msgbench_report::render(&report, super::format(args.format), out)?;
        Ok(())
    })?;
    let c = super::verdict::conclude(&report, false);
    super::verdict::write_outputs(&args.verdict, &report, &c, Some(&args.results))?;
    super::verdict::explain(&c, &report);
    Ok(ExitCode::from(c.code))
}
