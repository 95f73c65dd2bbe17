//! msgbench's embedded servers: brokers that run inside the msgbench process so that a benchmark
//! needs nothing installed besides msgbench itself.
//!
//! `msgbench run` with no target starts one in-process on a local port and points the load
//! generator at it (a newcomer's first benchmark); `msgbench serve mqtt --listen ADDR` runs the
//! same broker standalone, for a second machine or for other clients. Each server runs on the
//! caller's tokio runtime and stops when the caller's stop future resolves.
//!
//! - [`mqtt`]: an MQTT 3.1.1 / 5 broker (QoS 0/1/2, wildcards, shared subscriptions, retained
//!   messages, persistent sessions held in memory).
//! - [`amqp`]: an AMQP 0-9-1 sink (`msgbench serve amqp-sink`): completes the handshake,
//!   answers topology methods and publisher confirms, and counts and discards every message;
//!   for measuring proxies and AMQP clients without a broker.
//! - [`amqp_proxy`]: a strict AMQP 0-9-1 proxy (`msgbench serve amqp-proxy`) that answers the
//!   handshake itself frame by frame, as amqpprox does, then replays it upstream and relays:
//!   for proving clients work through such intermediaries and measuring what one costs.
//! - [`ecp`]: an ECP endpoint simulator (`msgbench serve ecp-endpoint`): on an AMQP 1.0
//!   broker, answers what a business application sends to the ECP outbox with replies, inbox
//!   deliveries and status events, with configurable delays and deterministic faults.
//! - [`http`]: an HTTP/1.1 + h2c (or TLS with ALPN) server answering every request alike
//!   (`msgbench serve http`, the HTTP driver tests' target).
//! - [`time`]: a time reference for segmented runs (`msgbench serve time`) and the client that
//!   measures a host's clock offset against it.
//! - [`ws`]: a WebSocket broadcast server (`msgbench serve ws-broadcast`): every binary message a
//!   client sends, or that is relayed from a broker, goes to every other client (a client's text
//!   messages are requests, not relayed); `ws://` or `wss://`.
//! - [`ws_gateway`]: the same server as a JSON gateway (`ws-broadcast --gateway rango|envelope`):
//!   relayed messages wrapped per stream and sent only to the clients subscribed to it.
//! - [`server`]: the one interface `msgbench serve` runs any of them through (status line,
//!   serving until stopped, summary); every TCP server accepts on the same loop (`listen`).
//! - [`tls`]: the TLS acceptor the AMQP sink and the broadcast server share.
#![deny(missing_docs)]

pub mod amqp;
pub mod amqp_proxy;
pub mod ecp;
pub mod http;
mod listen;
pub mod mqtt;
pub mod server;
pub mod time;
pub mod tls;
pub mod ws;
pub mod ws_gateway;
