//! capgate-provider's integration tests, one binary (link once): each module is one
//! area of behaviour, named after it; shared support lives in the non-test modules.

mod common;

mod events;
mod health;
mod http_upstream;
mod mcp_upstream_tasks;
mod procedure_bridge;
mod provider_primitives;
mod stall_timeout;
mod wasm_procedure;
mod watchdog;
