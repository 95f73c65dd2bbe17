//! Fuzz target `stamp`: the body is `msgbench_fuzz_targets::stamp` (crates/fuzz-targets), which
//! `cargo test` also runs over the seeds in fuzz/corpus/stamp/.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| msgbench_fuzz_targets::stamp(data));
