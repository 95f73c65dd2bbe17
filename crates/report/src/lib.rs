//! # msgbench-report
//!
//! The results file and everything rendered from it. `results.jsonl` is the contract: one JSON
//! object per line, `begin`, then `interval` and `event` lines as the run goes (flushed every
//! interval, append-only, so a killed run can still be reported), then `end`. A [`RunReport`] is a
//! pure function of those lines, and every output format renders a `RunReport`.
//!
//! # Layout
//! - [`records`]: the line types ([`Record`]) and reading/writing them.
//! - [`model`]: [`RunReport`], computed from records.
//! - [`stages`]: the stage table of multi-stage runs.
//! - [`merge`]: the segments of a segmented run merged into one results file, exactly.
//! - [`text`], [`csv`], [`live`], [`html`]: renderers (JSON is `serde_json` of the
//!   `RunReport`); [`chart`] and [`distribution`] hold the chart series and percentile curves
//!   the HTML report draws.
//! - [`compare`]: the [`Comparison`] of two runs and its text/JSON/HTML renderings.
//! - [`prometheus`]: the live figures in the Prometheus text exposition format.
//! - [`search`]: a capacity search's steps and answer, its knee and the comparison of two.
//! - [`verdict`]: thresholds (`e2e.p99 < 10ms`) judged against a report, and their JUnit XML.
//! - `schema/results.schema.json`: the JSON Schema every line satisfies (enforced by tests).
#![deny(missing_docs)]

pub mod chart;
pub mod compare;
pub mod csv;
pub mod distribution;
pub mod html;
pub mod live;
pub mod merge;
pub mod model;
pub mod prometheus;
pub mod records;
pub mod search;
pub mod stages;
pub mod text;
pub mod verdict;

pub use compare::Comparison;
pub use model::{PhaseReport, ReportBuilder, RunReport};
pub use records::{Begin, End, EventRecord, Record, ResultsWriter, for_each_record, read_records};

/// The JSON Schema of one `results.jsonl` line.
pub const RESULTS_SCHEMA: &str = include_str!("../schema/results.schema.json");

/// Output formats of `msgbench report` (and the final report of `msgbench run`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Human-readable tables.
    Text,
    /// The `RunReport` as JSON.
    Json,
    /// One row per interval.
    Csv,
    /// One self-contained HTML page with charts.
    Html,
}

/// Why a report could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Reading or writing failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A line of the results file is not a valid record.
    #[error("line {line}: {message}")]
    Parse {
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        message: String,
    },
    /// The file has no `begin` record.
    #[error("not a msgbench results file: no `begin` record")]
    NoBegin,
    /// JSON encoding failed.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// Renders `report` in `format` to `out`.
pub fn render(
    report: &RunReport,
    format: Format,
    out: &mut dyn std::io::Write,
) -> Result<(), ReportError> {
    match format {
        Format::Text => text::write(report, out)?,
        Format::Json => {
            serde_json::to_writer_pretty(&mut *out, report)?;
            writeln!(out)?;
        }
        Format::Csv => csv::write(report, out)?,
        Format::Html => html::write(report, out)?,
    }
    Ok(())
}
