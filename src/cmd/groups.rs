//! `msgbench run` with `[[groups]]`: every group's plan runs at once in this process, each with
//! its own driver, tied together by one [`Together`] (one start, one drain), and their
//! intervals, events and ends are folded into the run's.
//!
//! The groups share the start instant, so tick `k` is the same second for all of them: the
//! run's interval `k` is theirs summed ([`merge_intervals`], CPU and memory taken once since
//! they are the process's), handed on once every group still running has passed it. The run's
//! `end` is theirs merged the same way ([`merge_ends`]); each group's own figures go into
//! `end.groups`.

use crate::registry;
use anyhow::Result;
use msgbench_core::runner::together::Together;
use msgbench_core::runner::{EventKind, Observer, RunEvent, RunOutcome};
use msgbench_core::scenario::RunPlan;
use msgbench_core::shutdown::Shutdown;
use msgbench_metrics::{GroupTick, IntervalStats};
use msgbench_report::merge::{merge_ends, merge_intervals};
use msgbench_report::records::{End, GroupEnd};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The run's observer, fed by every group.
struct Fold<'o> {
    out: &'o mut dyn Observer,
    names: Vec<String>,
    /// Intervals waiting for the other groups, by tick: the run's sum, and each group's own
    /// (for [`IntervalStats::groups`]).
    pending: BTreeMap<u64, (Option<IntervalStats>, Vec<Option<IntervalStats>>)>,
    /// Each group's last tick handed in, and whether it still runs.
    last: Vec<Option<u64>>,
    running: Vec<bool>,
    /// Phases already announced (each group announces each phase).
    phases: Vec<String>,
}

impl Fold<'_> {
    fn interval(&mut self, g: usize, iv: &IntervalStats) {
        self.last[g] = Some(self.last[g].map_or(iv.index, |l| l.max(iv.index)));
        let n = self.names.len();
        let (total, own) = self
            .pending
            .entry(iv.index)
            .or_insert_with(|| (None, vec![None; n]));
        merge_intervals(total, iv.clone(), true);
        merge_intervals(&mut own[g], iv.clone(), true);
        self.emit();
    }

    /// Hands on every tick that every running group has passed (all of them once none runs).
    fn emit(&mut self) {
        let upto = (0..self.last.len())
            .filter(|&g| self.running[g])
            .map(|g| self.last[g])
            .min();
        let upto = match upto {
            None => u64::MAX,
            Some(None) => return,
            Some(Some(k)) => k,
        };
        while let Some(e) = self.pending.first_entry() {
            if *e.key() > upto {
                break;
            }
            let (total, own) = e.remove();
            if let Some(mut iv) = total {
                iv.groups = own
                    .iter()
                    .zip(&self.names)
                    .filter_map(|(x, name)| x.as_ref().map(|x| GroupTick::of(name, x)))
                    .collect();
                self.out.interval(&iv);
            }
        }
    }

    fn event(&mut self, g: usize, ev: &RunEvent) {
        if ev.kind == EventKind::Phase {
            if self.phases.contains(&ev.detail) {
                return;
            }
            self.phases.push(ev.detail.clone());
            return self.out.event(ev);
        }
        self.out.event(&RunEvent {
            at_s: ev.at_s,
            kind: ev.kind,
            detail: format!("[{}] {}", self.names[g], ev.detail),
        });
    }

    fn done(&mut self, g: usize) {
        self.running[g] = false;
        self.emit();
    }
}

/// One group's observer: its share of the [`Fold`].
struct GroupView<'o> {
    g: usize,
    fold: Arc<Mutex<Fold<'o>>>,
}

impl Observer for GroupView<'_> {
    fn interval(&mut self, iv: &IntervalStats) {
        self.fold
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .interval(self.g, iv);
    }
    fn event(&mut self, ev: &RunEvent) {
        self.fold
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .event(self.g, ev);
    }
}

/// Runs `groups` at once, reporting to `observer`; returns the run's outcome and each group's
/// figures. A group that cannot start fails the run (the others are stopped).
pub async fn run(
    groups: &[RunPlan],
    observer: &mut dyn Observer,
    shutdown: Shutdown,
) -> Result<(RunOutcome, Vec<GroupEnd>)> {
    let n = groups.len();
    let fold = Arc::new(Mutex::new(Fold {
        out: observer,
        names: groups.iter().map(|p| p.name.clone()).collect(),
        pending: BTreeMap::new(),
        last: vec![None; n],
        running: vec![true; n],
        phases: Vec::new(),
    }));
    let runs = groups
        .iter()
        .zip(Together::members(n))
        .enumerate()
        .map(|(g, (plan, member))| {
            let fold = fold.clone();
            let shutdown = shutdown.clone();
            async move {
                let mut view = GroupView {
                    g,
                    fold: fold.clone(),
                };
                let r = registry::run_plan(plan, &mut view, shutdown, Some(member)).await;
                fold.lock().unwrap_or_else(|e| e.into_inner()).done(g);
                r.map_err(|e| e.context(format!("group `{}`", plan.name)))
            }
        });
    let outcomes = futures_util::future::try_join_all(runs).await?;
    let ends: Vec<End> = outcomes
        .iter()
        .zip(groups)
        .map(|(o, p)| super::run::end_record(o, p, o.interrupted))
        .collect();
    let labelled: Vec<(String, &End)> = ends
        .iter()
        .zip(groups)
        .map(|(e, p)| (format!("group {}", p.name), e))
        .collect();
    let mut total = merge_ends(&labelled, Vec::new(), true);
    // A connection group's summary is its own (in `groups`); the run's stands for connection
    // workloads only when every group is one.
    if groups.iter().any(|p| p.connections.is_none()) {
        total.connections = None;
    }
    let group_ends = ends
        .into_iter()
        .zip(groups)
        .map(|(e, p)| GroupEnd {
            name: p.name.clone(),
            target: p.redacted().target,
            producers: p
                .connections
                .as_ref()
                .map_or(p.producers(), |c| c.count.unwrap_or(0) as u32),
            consumers: if p.connections.is_some() {
                0
            } else {
                p.consumers()
            },
            crosses: p.group.as_ref().is_some_and(|g| g.crosses),
            phases: e.phases,
            integrity: e.integrity,
            connections: e.connections,
        })
        .collect();
    let outcome = RunOutcome {
        started_unix_ms: outcomes
            .iter()
            .map(|o| o.started_unix_ms)
            .min()
            .unwrap_or(0),
        duration_s: total.duration_s,
        phases: total.phases,
        integrity: total.integrity,
        interrupted: total.interrupted,
        drain_complete: total.drain_complete,
        warnings: total.warnings,
        producers_failed: outcomes.iter().map(|o| o.producers_failed).sum(),
        connections: total.connections,
        stages: Vec::new(),
        tcp: total.tcp,
        backlog: None,
        responses: outcomes
            .iter()
            .filter_map(|o| o.responses.clone())
            .reduce(|mut a, b| {
                a.add(&b);
                a
            }),
    };
    Ok((outcome, group_ends))
}
