//! The integration tests: one binary, one module per area (a driver against its real broker,
//! a command, a view), all run by `scripts/test.sh` with the brokers of `scripts/brokers.sh`.
//! One test: `cargo test --test it mqtt::NAME`; one area: `cargo test --test it mqtt::`.
//!
//! A test whose broker variable is unset skips itself with a message (`need!`). Tests that kill
//! or restart the shared brokers are in the `faults` binary: cargo runs test binaries one
//! after the other, so nothing else runs beside them.

#[path = "../util/mod.rs"]
mod util;

mod amqp;
mod amqp10;
mod amqp10_p2p;
mod amqp_proxy;
mod backlog;
mod batched_io;
mod cli;
mod conformance;
mod dashboard;
mod ecp;
mod groups;
mod haproxy;
mod http;
mod jetstream;
mod journeys;
mod kafka;
mod libzmq;
mod mqtt;
mod nats;
mod own_faults;
mod payload;
mod pipeline;
mod qpid;
mod redis;
mod search;
mod secrets;
mod segments;
mod stages;
mod thirdparty;
mod tui;
mod verdicts;
mod views;
mod ws;
mod ws_gateway;
mod zmq;
