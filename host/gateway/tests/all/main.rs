//! capgate-gateway's integration tests, one binary (link once): each module is one
//! area of behaviour, named after it; shared support lives in the non-test modules.

mod gateway_support;
mod mcp_support;

mod app_mounts;
mod console_http;
mod edges_spec;
mod http_api;
mod identity_edges;
mod mcp_python;
mod mcp_tasks;
mod mcp_typescript;
mod oidc_harness;
mod oidc_identity;
mod replicas_postgres;
