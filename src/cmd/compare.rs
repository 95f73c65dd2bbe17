//! `msgbench compare`: run B against run A (the baseline), from their results files.

use crate::cli::args::{CompareArgs, CompareFormatArg};
use anyhow::Result;
use msgbench_report::Comparison;
use msgbench_report::compare::{write_html, write_json, write_text};
use std::process::ExitCode;

/// Loads both results files, compares them and renders the comparison.
pub fn run(args: CompareArgs) -> Result<ExitCode> {
    let a = super::report::load(&args.a)?;
    let b = super::report::load(&args.b)?;
    let c = Comparison::new(&a, &b)
        .with_sources(&args.a.display().to_string(), &args.b.display().to_string());
    super::report::write_to(args.output.as_deref(), |out| {
        match args.format {
            CompareFormatArg::Text => write_text(&c, out)?,
            CompareFormatArg::Json => write_json(&c, out)?,
            CompareFormatArg::Html => write_html(&c, &a, &b, out)?,
        }
        Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}
