//! Fuzz target `zmtp`: the body is `msgbench_fuzz_targets::zmtp` (crates/fuzz-targets), which
//! `cargo test` also runs over the seeds in fuzz/corpus/zmtp/.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| msgbench_fuzz_targets::zmtp(data));
