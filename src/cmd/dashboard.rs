//! `msgbench dashboard`: serve the run history, or `--import` results files into it. Also the
//! run's side of the history: where the database is and recording a finished run.

use crate::cli::args::DashboardArgs;
use anyhow::{Context, Result, bail};
use msgbench_dashboard::HistoryDashboard;
use msgbench_dashboard::history::{import, record};
use msgbench_report::RunReport;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The history database: `--results-db`, else the default location.
pub fn db_path(flag: Option<&Path>) -> Result<PathBuf> {
    match flag {
        Some(p) => Ok(p.to_path_buf()),
        None => msgbench_dashboard::store::default_path().context(
            "no run history location: set MSGBENCH_RESULTS_DB or HOME, or pass --results-db",
        ),
    }
}

/// Records a finished run in the history; a failure is a warning, never a failed run.
pub fn record_run(flag: Option<&Path>, report: &RunReport, results: &Path) {
    let recorded = db_path(flag).and_then(|db| {
        record(&db, report, results)
            .with_context(|| format!("recording the run in {}", db.display()))
    });
    if let Err(e) = recorded {
        eprintln!("msgbench: warning: the run is not in the history: {e:#}");
    }
}

/// Runs `msgbench dashboard`.
pub fn run(args: DashboardArgs) -> Result<ExitCode> {
    let db = db_path(args.results_db.as_deref())?;
    if !args.import.is_empty() {
        let results = import(&db, &args.import)?;
        let mut failed = 0;
        for (file, r) in args.import.iter().zip(results) {
            match r {
                Ok(id) => eprintln!("msgbench: imported {} as run {id}", file.display()),
                Err(e) => {
                    failed += 1;
                    eprintln!("msgbench: cannot import {}: {e}", file.display());
                }
            }
        }
        eprintln!(
            "msgbench: {} of {} file(s) imported into {}",
            args.import.len() - failed,
            args.import.len(),
            db.display()
        );
        return Ok(if failed == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    let server = HistoryDashboard::start(&args.listen, args.token.as_deref(), &db)?;
    eprintln!("msgbench: dashboard on {}", server.url());
    if args.token.is_some() {
        eprintln!(
            "msgbench: every request needs the token given with --token (open {}?token=TOKEN, or send Authorization: Bearer TOKEN)",
            server.url()
        );
    }
    eprintln!("msgbench: run history {} (Ctrl-C stops)", db.display());
    server.wait();
    bail!("the dashboard server stopped")
}
