//! The runner: connects everything, releases all tasks together, drives the phases, merges
//! snapshots every tick and hands intervals and events to an [`Observer`].
//!
//! # Layout
//! - `messages`: the coordinator of a message run, step by step (check the plan, connect,
//!   release); `drive`: its loop over the phases; `finish`: stopping, the last counts, the
//!   outcome. `phases`: the phase machine they follow (pure: time is passed in).
//! - [`connections`]: the connection workloads (hold, storm).
//! - [`state`]: phase and stop flags shared with the tasks.
//! - `produce`: the producer loop (pace → stamp → send → record, ack window).
//! - `consume`: the consumer loop (recv → unstamp → record + integrity).
//! - `inflight`: the ack window.
//! - `timer`: precise waits for paced sends.
//! - `release`: when the load is released (`--start-at`) and when a segment stops waiting.
//! - `stall`: producers the system under test holds back; tasks that will not end.
//! - `connect`: connecting the clients; interval arithmetic. `outcome`: the public results.
//! - `backlog`: backlog runs (consumers held back until a backlog is built, then released).
//! - [`together`]: the groups of one run (`[[groups]]`): one start, one drain.
//!
//! A segmented run (`plan.segment`) starts only the tasks whose global index is its own; they
//! keep their global ids, and rates and quotas stay split over the whole run's producers.
//!
//! Timeline of a run: connect consumers (subscriptions are live before anything is sent) →
//! connect producers → start barrier at `t0` → warm-up → measure (a duration, or until the
//! message quota is sent) → drain (until every expected delivery arrived or the drain timeout)
//! → final snapshots → [`RunOutcome`].

mod backlog;
mod connect;
pub mod connections;
mod consume;
mod drive;
mod finish;
mod inflight;
pub mod lag;
mod messages;
mod outcome;
mod phases;
mod produce;
mod release;
mod send_clock;
mod stages;
mod stall;
pub mod state;
mod tagging;
mod timer;
pub mod together;
mod tracker;
pub mod workers;

use crate::driver::{Driver, DriverEvent};
use crate::scenario::RunPlan;
use crate::shutdown::Shutdown;
use std::sync::Arc;
use tokio::sync::mpsc;

use connect::{process_cpu_s, secs};
pub use outcome::{EventKind, Observer, RunError, RunEvent, RunOutcome};

/// Consumers beyond which a run without `workers` gets dedicated worker threads anyway.
pub(crate) const MANY_CONSUMERS: u32 = 256;

/// Runs `plan` against `driver`, reporting to `observer`. Driver events arrive on `events`.
///
/// # Errors
/// Only when the run cannot start (unsupported plan, a client cannot connect). Once running,
/// failures are counted, never fatal: the run completes and the outcome says what went wrong.
pub async fn run<D: Driver>(
    driver: Arc<D>,
    plan: &RunPlan,
    events: mpsc::UnboundedReceiver<DriverEvent>,
    observer: &mut dyn Observer,
    shutdown: Shutdown,
) -> Result<RunOutcome, RunError> {
    run_member(driver, plan, events, observer, shutdown, None).await
}

/// [`run`] for one group of a run with groups (`member`: its handle on the run it shares;
/// `None` for a run of its own).
///
/// # Errors
/// As [`run`].
pub async fn run_member<D: Driver>(
    driver: Arc<D>,
    plan: &RunPlan,
    events: mpsc::UnboundedReceiver<DriverEvent>,
    observer: &mut dyn Observer,
    shutdown: Shutdown,
    member: Option<together::Member>,
) -> Result<RunOutcome, RunError> {
    // Every client has closed when either returns, so the TCP tally is complete.
    let tcp0 = crate::tcp_tally::totals();
    let counted = driver.clone();
    let mut outcome = match &plan.connections {
        Some(cp) => {
            connections::run_connections(driver, plan, cp, events, observer, shutdown, member)
                .await?
        }
        None => messages::run_messages(driver, plan, events, observer, shutdown, member).await?,
    };
    outcome.tcp = crate::tcp_tally::since(&tcp0);
    outcome.responses = counted.responses();
    Ok(outcome)
}
