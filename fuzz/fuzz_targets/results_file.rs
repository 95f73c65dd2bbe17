//! Fuzz target `results_file`: the body is `msgbench_fuzz_targets::results_file` (crates/fuzz-targets), which
//! `cargo test` also runs over the seeds in fuzz/corpus/results_file/.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| msgbench_fuzz_targets::results_file(data));
