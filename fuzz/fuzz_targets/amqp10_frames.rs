//! Fuzz target `amqp10_frames`: the body is `msgbench_fuzz_targets::amqp10_frames` (crates/fuzz-targets), which
//! `cargo test` also runs over the seeds in fuzz/corpus/amqp10_frames/.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| msgbench_fuzz_targets::amqp10_frames(data));
