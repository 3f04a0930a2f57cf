//! capgate (the CLI)'s integration tests, one binary (link once): each module is one
//! area of behaviour, named after it; shared support lives in the non-test modules.

#[macro_use]
mod common;

mod ai_sdk_client;
mod approval_webhooks;
mod audit_export;
mod audit_verify;
mod check;
mod conformance;
mod console_browser;
mod contract_diff;
mod crash_safety;
mod db_loss;
mod docs_truth;
mod edges_admission;
mod edges_budgets;
mod edges_cliwasm;
mod edges_identity;
mod example_commands;
mod example_mcp_upstream;
mod example_tenancy;
mod graceful_shutdown;
mod hot_reload;
mod http_upstream_e2e;
mod k8s_migration;
mod mcp_upstream_e2e;
mod oci_registry;
mod oidc_cli;
mod openapi_import;
mod otlp_traces;
mod prometheus_e2e;
mod provenance;
mod replay;
mod replicas;
mod scenario_test;
mod scripting;
mod serve_e2e;
mod shadow_rollout;
mod shipped_plugins;
mod spec_fidelity;
mod store_paths;
mod trust_boundaries;
