//! capgate-wasm's integration tests, one binary (link once): each module is one
//! area of behaviour, named after it; shared support lives in the non-test modules.

mod common;

mod authorizer_versions;
mod cache_binding;
mod concurrency;
mod fresh_state;
mod hostile;
mod idle_cap;
mod lazy_reads;
mod loading;
mod polyglot;
mod reaper;
mod sdk_wit;
mod walkthrough;
