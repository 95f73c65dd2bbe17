//! Fuzz target `mqtt_codec`: the body is `msgbench_fuzz_targets::mqtt_codec` (crates/fuzz-targets), which
//! `cargo test` also runs over the seeds in fuzz/corpus/mqtt_codec/.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| msgbench_fuzz_targets::mqtt_codec(data));
