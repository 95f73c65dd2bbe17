//! `msgbench validate`: parse and resolve scenario files without running them.

use crate::cli::args::ValidateArgs;
use crate::registry;
use anyhow::{Result, anyhow};
use msgbench_core::scenario::{RunPlan, groups};
use std::process::ExitCode;

/// Checks every file; reports each problem with file, line and column; fails if any is bad.
pub fn run(args: ValidateArgs) -> Result<ExitCode> {
    let mut bad = 0;
    for f in &args.files {
        let checked = registry::scenario_file(f).and_then(|s| {
            let at = |e: &dyn std::fmt::Display| anyhow!("{}: {e}", f.display());
            if !s.groups.is_empty() {
                let mut plans = Vec::new();
                for g in groups::expand(&s).map_err(|e| at(&e))? {
                    let name = g.name.clone().unwrap_or_default();
                    let p = registry::resolve(&g, 0)
                        .map_err(|e| at(&format!("group `{name}`: {e}")))?;
                    registry::check_scheme(&p).map_err(|e| at(&format!("group `{name}`: {e}")))?;
                    plans.push(p);
                }
                groups::link(&mut plans).map_err(|e| at(&e))?;
                msgbench_report::verdict::parse_all(&plans[0].thresholds)
                    .map_err(|e| at(&format!("[thresholds]: {e}")))?;
                return Ok((s.name.clone().unwrap_or_default(), plans));
            }
            let plan = registry::resolve(&s, 0).map_err(|e| at(&e))?;
            registry::check_scheme(&plan).map_err(|e| at(&e))?;
            msgbench_report::verdict::parse_all(&plan.thresholds)
                .map_err(|e| anyhow!("{}: [thresholds]: {e}", f.display()))?;
            Ok((String::new(), vec![plan]))
        });
        match checked {
            Ok((run, plans)) if plans.len() > 1 || plans[0].group.is_some() => {
                println!("ok: {}: {run} -> {} groups", f.display(), plans.len());
                for p in &plans {
                    println!("  group {}: {} ({})", p.name, p.redacted().target, what(p));
                }
            }
            Ok((_, plans)) => {
                let p = &plans[0];
                println!(
                    "ok: {}: {} -> {} ({})",
                    f.display(),
                    p.name,
                    p.redacted().target,
                    what(p)
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

/// What a plan runs, in a few words.
fn what(p: &RunPlan) -> String {
    match &p.connections {
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
    }
}
