//! # msgbench-core
//!
//! The engine of msgbench: how a benchmark is described, paced, stamped and run, independent of
//! any protocol. Protocol drivers implement the [`driver`] traits; the binary turns flags and
//! scenario files into a [`scenario::RunPlan`] and hands it, with a driver, to [`runner::run`].
//!
//! # Layout
//! - [`driver`]: the `Driver` / `Producer` / `Consumer` traits every protocol implements.
//! - [`scenario`]: the TOML scenario model, command-line overlay, and `resolve` → `RunPlan`.
//! - [`pacer`]: rate shapes and per-producer schedules (intended send times).
//! - [`stamp`]: the header every payload carries (binary at offset 0, or text anywhere).
//! - [`meta`]: message ids, correlation and properties, for drivers and stages that use them.
//! - [`presets`]: ready-made scenarios (the `ecp` preset).
//! - [`registration`]: how a driver crate presents itself to the binary (info, schemes, build).
//! - [`redact`]: the one rule for hiding credentials from everything msgbench prints or writes.
//! - [`payload`]: stamped, incompressible bodies; [`sizes`]: size distributions.
//! - [`template`]: payload templates (JSON for gateways) with the text stamp inside.
//! - [`runner`]: producer and consumer loops, phases, the coordinator.
//! - [`search`]: the capacity search's strategy (which rate next, when the answer is known).
//! - [`tcp_tally`]: process-wide TCP counters the drivers' sockets add to as they close.
//! - [`clock`], [`units`], [`rng`], [`shutdown`]: small supporting pieces.
#![deny(missing_docs)]

pub mod clock;
pub mod driver;
pub mod meta;
pub mod pacer;
pub mod payload;
pub mod popularity;
pub mod presets;
pub mod redact;
pub mod registration;
pub mod rng;
pub mod runner;
pub mod scenario;
pub mod search;
pub mod shutdown;
pub mod sizes;
pub mod stamp;
pub mod tcp_tally;
pub mod template;
pub mod units;

/// CPUs this process may run on (1 when the system cannot say): sizes worker pools and turns
/// CPU time into a share of the machine.
pub fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
