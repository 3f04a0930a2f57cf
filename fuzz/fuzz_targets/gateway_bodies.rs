#![no_main]
//! libFuzzer entry for `capgate_fuzz::gateway_bodies` (the property is documented there).
libfuzzer_sys::fuzz_target!(|data: &[u8]| capgate_fuzz::gateway_bodies(data));
