//! `msgbench report`: re-render a results file.

use crate::cli::args::ReportArgs;
use anyhow::{Context, Result};
use msgbench_report::{RunReport, read_records};
use std::process::ExitCode;

/// Reads the results file and renders it.
pub fn run(args: ReportArgs) -> Result<ExitCode> {
    let f = std::fs::File::open(&args.results)
        .with_context(|| format!("cannot open {}", args.results.display()))?;
    let records = read_records(std::io::BufReader::new(f))
        .with_context(|| format!("{}", args.results.display()))?;
    let report =
        RunReport::from_records(&records).with_context(|| format!("{}", args.results.display()))?;
    msgbench_report::render(
        &report,
        super::format(args.format),
        &mut std::io::stdout().lock(),
    )?;
    Ok(ExitCode::SUCCESS)
}
