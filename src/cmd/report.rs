//! `msgbench report`: re-render a results file.

use crate::cli::args::ReportArgs;
use anyhow::{Context, Result};
use msgbench_report::{ReportBuilder, for_each_record};
use std::process::ExitCode;

/// Reads the results file and renders it.
pub fn run(args: ReportArgs) -> Result<ExitCode> {
    let f = std::fs::File::open(&args.results)
        .with_context(|| format!("cannot open {}", args.results.display()))?;
    let mut builder = ReportBuilder::new();
    for_each_record(std::io::BufReader::new(f), |r| builder.add(&r))
        .with_context(|| format!("{}", args.results.display()))?;
    let report = builder
        .finish()
        .with_context(|| format!("{}", args.results.display()))?;
    msgbench_report::render(
        &report,
        super::format(args.format),
        &mut std::io::stdout().lock(),
    )?;
    Ok(ExitCode::SUCCESS)
}
