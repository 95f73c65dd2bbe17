//! Fuzz target `nats_proto`: the body is `msgbench_fuzz_targets::nats_proto` (crates/fuzz-targets), which
//! `cargo test` also runs over the seeds in fuzz/corpus/nats_proto/.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| msgbench_fuzz_targets::nats_proto(data));
