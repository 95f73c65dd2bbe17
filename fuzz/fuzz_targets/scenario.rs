//! Fuzz target `scenario`: the body is `msgbench_fuzz_targets::scenario` (crates/fuzz-targets), which
//! `cargo test` also runs over the seeds in fuzz/corpus/scenario/.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| msgbench_fuzz_targets::scenario(data));
