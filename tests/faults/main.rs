//! Tests that kill, stop, cut or restart the shared brokers mid-run (the fault matrix, and
//! RabbitMQ and Artemis restarted): a binary of their own, because a restart cuts every
//! connection of any test running beside it, and cargo runs test binaries one at a time.
//! One row: `cargo test --features kafka --test faults faults::NAME -- --nocapture`.

#[path = "../util/mod.rs"]
mod util;

mod amqp10_restart;
mod amqp_restart;
mod faults;
