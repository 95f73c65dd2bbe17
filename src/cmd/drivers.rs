//! `msgbench drivers`: what this build can talk to.

use crate::registry;
use std::process::ExitCode;

/// Prints one line per driver.
pub fn run() -> ExitCode {
    println!(
        "{:<6} {:<18} {:<5} {:<7} {:<14} about",
        "driver", "schemes", "acks", "queues", "request/reply"
    );
    for d in registry::drivers() {
        let yn = |b: bool| if b { "yes" } else { "no" };
        println!(
            "{:<6} {:<18} {:<5} {:<7} {:<14} {}",
            d.name,
            d.schemes
                .iter()
                .map(|s| format!("{s}://"))
                .collect::<Vec<_>>()
                .join(","),
            yn(d.caps.acks),
            yn(d.caps.queue_groups),
            yn(d.caps.request_reply),
            d.about
        );
    }
    ExitCode::SUCCESS
}
