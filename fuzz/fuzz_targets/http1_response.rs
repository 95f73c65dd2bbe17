//! Fuzz target `http1_response`: the body is `msgbench_fuzz_targets::http1_response` (crates/fuzz-targets), which
//! `cargo test` also runs over the seeds in fuzz/corpus/http1_response/.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| msgbench_fuzz_targets::http1_response(data));
