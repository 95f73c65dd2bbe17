//! Fuzz target `mqtt_broker`: the body is `msgbench_fuzz_targets::mqtt_broker` (crates/fuzz-targets), which
//! `cargo test` also runs over the seeds in fuzz/corpus/mqtt_broker/.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| msgbench_fuzz_targets::mqtt_broker(data));
