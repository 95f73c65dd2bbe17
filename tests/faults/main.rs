//! Tests that kill, stop, cut or restart the shared brokers mid-run (the fault matrix, and
//! RabbitMQ and Artemis restarted): a binary of their own, because a restart cuts every
//! connection of any test running beside it, and cargo runs test binaries one at a time.
//! One row: `cargo test --features kafka --test faults faults::NAME -- --nocapture`.

#[path = "../util/mod.rs"]
mod util;

use std::sync::{Mutex, MutexGuard};

/// A test's turn with one shared broker: the tests of this binary that kill or restart the same
/// broker take turns (tests run two at a time within a binary), while those on different
/// brokers still run side by side.
pub fn turn(broker: &str) -> MutexGuard<'static, ()> {
    static RABBITMQ: Mutex<()> = Mutex::new(());
    static ARTEMIS: Mutex<()> = Mutex::new(());
    static OTHER: Mutex<()> = Mutex::new(());
    let lock = match broker {
        "rabbitmq" => &RABBITMQ,
        "artemis" => &ARTEMIS,
        _ => &OTHER,
    };
    // A test that failed holding it poisoned it; the next one still gets its turn.
    lock.lock().unwrap_or_else(|p| p.into_inner())
}

mod amqp10_restart;
mod amqp_restart;
mod faults;
