//! Fuzz target `amqp_client`: the body is `msgbench_fuzz_targets::amqp_client` (crates/fuzz-targets), which
//! `cargo test` also runs over the seeds in fuzz/corpus/amqp_client/.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| msgbench_fuzz_targets::amqp_client(data));
