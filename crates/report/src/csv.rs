//! CSV: one row per interval, latencies in microseconds.

use crate::model::RunReport;
use std::io::Write;

/// The header row.
pub const HEADER: &str = "index,phase,start_s,end_s,sent,sent_per_s,received,received_per_s,sent_bytes,received_bytes,acked,e2e_p50_us,e2e_p99_us,e2e_max_us,publish_p50_us,publish_p99_us,gaps_open,duplicated,reordered,foreign,late_sends,errors,cpu_s";

/// Writes every interval as a CSV row.
pub fn write(r: &RunReport, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "{HEADER}")?;
    let us = |ns: u64| ns as f64 / 1e3;
    for row in &r.intervals {
        let c = &row.counters;
        let d = (row.end_s - row.start_s).max(1e-9);
        writeln!(
            out,
            "{},{},{:.3},{:.3},{},{:.1},{},{:.1},{},{},{},{:.1},{:.1},{:.1},{:.1},{:.1},{},{},{},{},{},{},{:.3}",
            row.index,
            row.phase.name(),
            row.start_s,
            row.end_s,
            c.sent,
            c.sent as f64 / d,
            c.received,
            c.received as f64 / d,
            c.sent_bytes,
            c.received_bytes,
            c.acked,
            us(row.e2e.p50),
            us(row.e2e.p99),
            us(row.e2e.max),
            us(row.publish.p50),
            us(row.publish.p99),
            c.open_gaps(),
            c.duplicated,
            c.reordered,
            c.foreign,
            c.late_sends,
            c.errors.total(),
            row.cpu_s
        )?;
    }
    Ok(())
}
