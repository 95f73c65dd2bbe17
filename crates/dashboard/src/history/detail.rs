//! One run of the history, read from its results file: the report (a pure function of the file,
//! through `msgbench_report`) and its chart series, downsampled like the live page's.

use crate::DashboardError;
use crate::frame::FrameBuilder;
use crate::series::Downsampler;
use crate::store::RunSummary;
use msgbench_report::{Record, ReportBuilder, RunReport, for_each_record};
use serde::Serialize;
use std::io::BufReader;
use std::path::Path;

/// A run as its page shows it.
#[derive(Debug, Serialize)]
pub struct RunDetail {
    /// The history row.
    pub summary: RunSummary,
    /// The report of its results file (per-interval rows left out: they are in `series`).
    pub report: RunReport,
    /// Chart points.
    pub series: Downsampler,
}

/// Reads a results file into its report and its series (at most `cap` points), streaming:
/// memory does not grow with the length of the run beyond the report's own.
///
/// # Errors
/// [`DashboardError::Results`] when the file cannot be read or is not a results file.
pub fn load(path: &Path, cap: usize) -> Result<(RunReport, Downsampler), DashboardError> {
    let err = |m: String| DashboardError::Results {
        path: path.to_path_buf(),
        message: m,
    };
    let file = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    let mut builder = ReportBuilder::new();
    let mut frame: Option<(FrameBuilder, Downsampler)> = None;
    for_each_record(BufReader::new(file), |r| {
        match &r {
            Record::Begin(b) => {
                let f = FrameBuilder::new(b, false);
                let d = Downsampler::new(f.schema().clone(), cap);
                frame = Some((f, d));
            }
            Record::Interval(iv) => {
                if let Some((f, d)) = frame.as_mut()
                    && let Some(row) = f.row(iv, None)
                {
                    d.push(row);
                }
            }
            _ => {}
        }
        builder.add(&r);
    })
    .map_err(|e| err(e.to_string()))?;
    let mut report = builder.finish().map_err(|e| err(e.to_string()))?;
    report.intervals.clear();
    let (mut f, mut series) = frame.ok_or_else(|| err("no `begin` record".into()))?;
    if let Some(row) = f.flush() {
        series.push(row);
    }
    Ok((report, series))
}

/// Only the report of a results file (streaming; what recording a run needs).
///
/// # Errors
/// [`DashboardError::Results`] when the file cannot be read or is not a results file.
pub fn report(path: &Path) -> Result<RunReport, DashboardError> {
    let err = |m: String| DashboardError::Results {
        path: path.to_path_buf(),
        message: m,
    };
    let file = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    let mut builder = ReportBuilder::new();
    for_each_record(BufReader::new(file), |r| builder.add(&r)).map_err(|e| err(e.to_string()))?;
    builder.finish().map_err(|e| err(e.to_string()))
}

/// The page data of the run `summary` describes.
pub fn detail(summary: RunSummary, cap: usize) -> Result<RunDetail, DashboardError> {
    let (report, series) = load(Path::new(&summary.results_path), cap)?;
    Ok(RunDetail {
        summary,
        report,
        series,
    })
}
