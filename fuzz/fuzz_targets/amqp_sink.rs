//! Fuzz target `amqp_sink`: the body is `msgbench_fuzz_targets::amqp_sink` (crates/fuzz-targets), which
//! `cargo test` also runs over the seeds in fuzz/corpus/amqp_sink/.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| msgbench_fuzz_targets::amqp_sink(data));
