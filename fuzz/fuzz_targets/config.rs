#![no_main]
//! libFuzzer entry for `capgate_fuzz::config` (the property is documented there).
libfuzzer_sys::fuzz_target!(|data: &[u8]| capgate_fuzz::config(data));
