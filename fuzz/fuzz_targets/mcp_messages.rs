#![no_main]
//! libFuzzer entry for `capgate_fuzz::mcp_messages` (the property is documented there).
libfuzzer_sys::fuzz_target!(|data: &[u8]| capgate_fuzz::mcp_messages(data));
