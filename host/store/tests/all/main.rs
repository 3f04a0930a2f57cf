//! capgate-store's integration tests, one binary (link once): each module is one
//! area of behaviour, named after it; shared support lives in the non-test modules.

#[macro_use]
mod common;

mod approval_expiry;
mod audit_chain;
mod audit_export;
mod audit_retention;
mod conformance;
mod console_sessions;
mod journal_window;
mod mcp_tasks;
mod postgres_tls;
mod store;
