//! `capgate-server`'s integration tests: one binary (it links wasmtime once), in process,
//! no spawned `capgate`.

mod embedded;
mod resolve;
