//! `capgate-server`'s integration tests: one binary (it links wasmtime once), in process,
//! no spawned `capgate`.

mod approval_webhooks;
mod audit_export;
mod embedded;
mod mcp_tasks_replicas;
mod plugin_config;
mod reload;
mod resolve;
mod shutdown;
mod support;
