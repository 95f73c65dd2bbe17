//! `msgbench validate`: parse and resolve scenario files without running them.

use crate::cli::args::ValidateArgs;
use crate::registry;
use anyhow::{Result, anyhow};
use std::process::ExitCode;

/// Checks every file; reports each problem with file, line and column; fails if any is bad.
pub fn run(args: ValidateArgs) -> Result<ExitCode> {
    let mut bad = 0;
    for f in &args.files {
        let checked = registry::scenario_file(f).and_then(|s| {
            let plan = registry::resolve(&s, 0).map_err(|e| anyhow!("{}: {e}", f.display()))?;
            registry::check_scheme(&plan).map_err(|e| anyhow!("{}: {e}", f.display()))?;
            msgbench_report::verdict::parse_all(&plan.thresholds)
                .map_err(|e| anyhow!("{}: [thresholds]: {e}", f.display()))?;
            Ok(plan)
        });
        match checked {
            Ok(p) => {
                let what = match &p.connections {
                    Some(c) => format!(
                        "{:?} connections{}",
                        c.mode,
                        c.count.map(|n| format!(", {n}")).unwrap_or_default()
                    )
                    .to_lowercase(),
                    None => format!(
                        "{} producers, {} consumers{}, {} topics",
                        p.producers(),
                        p.consumers(),
                        p.redacted()
                            .consume_from
                            .map(|c| format!(" on {c}"))
                            .unwrap_or_default(),
                        p.topics.len()
                    ),
                };
                println!(
                    "ok: {}: {} -> {} ({what})",
                    f.display(),
                    p.name,
                    p.redacted().target
                )
            }
            Err(e) => {
                eprintln!("error: {e}");
                bad += 1;
            }
        }
    }
    Ok(if bad == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}
