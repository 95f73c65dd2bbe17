//! Fuzz target `amqp10_codec`: the body is `msgbench_fuzz_targets::amqp10_codec` (crates/fuzz-targets), which
//! `cargo test` also runs over the seeds in fuzz/corpus/amqp10_codec/.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| msgbench_fuzz_targets::amqp10_codec(data));
