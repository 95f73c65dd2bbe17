//! Fuzz target `redis_resp`: the body is `msgbench_fuzz_targets::redis_resp` (crates/fuzz-targets), which
//! `cargo test` also runs over the seeds in fuzz/corpus/redis_resp/.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| msgbench_fuzz_targets::redis_resp(data));
