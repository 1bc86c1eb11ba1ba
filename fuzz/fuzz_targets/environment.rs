#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| wasm_ipam::fuzz::environment(data));
