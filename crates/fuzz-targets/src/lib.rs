//! The bodies of msgbench's fuzz targets. Each takes arbitrary bytes, hands them to one of the
//! decoders msgbench wrote for what it reads from the network or from files, and must return
//! for every input: a panic, a hang or an allocation without bound is a bug in the decoder
//! (a peer, a proxy or a damaged file could trigger it).
//!
//! The bodies live here, in the workspace, rather than in the cargo-fuzz crate (`fuzz/`, built
//! with nightly and libFuzzer by `scripts/fuzz.sh`), so that `cargo test` on stable compiles
//! them and runs every committed seed input through them (`tests/corpus.rs`): the fuzz
//! binaries are one-line wrappers around [`TARGETS`]. Where a decoder has an encoder, its
//! target also checks the round trip: what was decoded encodes to bytes that decode the same.
//!
//! Stream targets read their first byte as a mode (how the stream is cut into reads, which
//! protocol version or direction) and the rest as the bytes received, so the fuzzer explores
//! reads split anywhere as well as the bytes themselves.
#![deny(missing_docs)]

mod files;
mod protocols;
mod streams;

pub use files::{results_file, scenario, stamp};
pub use protocols::{
    amqp_client, amqp_sink, amqp10_codec, amqp10_frames, http_server, http1_response, mqtt_broker,
    mqtt_codec,
};
pub use streams::{nats_proto, redis_resp, ws_codec, zmtp};

/// A fuzz target's body.
pub type Target = fn(&[u8]);

/// Every target: its name (the binary `fuzz/fuzz_targets/NAME.rs`, the seed directory
/// `fuzz/corpus/NAME/`) and its body.
pub const TARGETS: &[(&str, Target)] = &[
    ("mqtt_codec", mqtt_codec),
    ("mqtt_broker", mqtt_broker),
    ("amqp_client", amqp_client),
    ("amqp_sink", amqp_sink),
    ("amqp10_codec", amqp10_codec),
    ("amqp10_frames", amqp10_frames),
    ("http1_response", http1_response),
    ("http_server", http_server),
    ("ws_codec", ws_codec),
    ("zmtp", zmtp),
    ("nats_proto", nats_proto),
    ("redis_resp", redis_resp),
    ("stamp", stamp),
    ("scenario", scenario),
    ("results_file", results_file),
];

/// The body of the target called `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// Splits a stream target's input into its mode byte (0 for an empty input) and the stream.
fn mode(data: &[u8]) -> (u8, &[u8]) {
    match data.split_first() {
        Some((&m, rest)) => (m, rest),
        None => (0, data),
    }
}

/// The size of the reads a mode byte asks for: its upper seven bits, 0 meaning the whole
/// stream in one read. (The low bit is left to each target.)
fn piece(mode: u8) -> usize {
    usize::from(mode >> 1)
}

/// Feeds `stream` to `parse` as a connection does: in reads of `piece` bytes (0: all at once)
/// appended to one buffer, calling `parse` after each read until it wants more bytes
/// (`Ok(false)`) or fails (`Err`: the connection would end there).
///
/// # Panics
/// If `parse` reports a decoded unit (`Ok(true)`) without having consumed a byte: the
/// connection would loop forever.
fn feed(
    stream: &[u8],
    piece: usize,
    mut parse: impl FnMut(&mut bytes::BytesMut) -> Result<bool, ()>,
) {
    let mut buf = bytes::BytesMut::new();
    let piece = if piece == 0 {
        stream.len().max(1)
    } else {
        piece
    };
    for chunk in stream.chunks(piece) {
        buf.extend_from_slice(chunk);
        loop {
            let before = buf.len();
            match parse(&mut buf) {
                Ok(true) => assert!(buf.len() < before, "a unit was decoded from no bytes"),
                Ok(false) => break,
                Err(()) => return,
            }
        }
    }
}
