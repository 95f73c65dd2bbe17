//! Fuzz target `http_server`: the body is `msgbench_fuzz_targets::http_server` (crates/fuzz-targets), which
//! `cargo test` also runs over the seeds in fuzz/corpus/http_server/.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| msgbench_fuzz_targets::http_server(data));
