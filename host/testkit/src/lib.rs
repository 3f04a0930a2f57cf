//! capgate-testkit: what capgate's integration tests share, so each crate's tests say what
//! they check rather than how to set it up.
//!
//! - [`actors`]: the lifecycle walkthrough's people (Dana the requester, Priya the
//!   approver) as core actors.
//! - [`schemas`]: the `orders.refund` input schema the walkthrough deploys.
//! - [`walkthrough`]: `orders.refund` as a native capability (metadata, the refund-limit
//!   policy, a counting procedure).
//! - [`paths`]: the repository's root and where the built guest plugins are.
//! - [`postgres`]: a fresh database per test on the server in `CAPGATE_TEST_POSTGRES_URL`,
//!   dropped with the value; without the variable a test is skipped with a notice, except
//!   under `CI=true`, where it fails (Postgres tests never skip silently in CI).
//! - [`kube`]: `kubectl` and what `kubectl kustomize` renders, for the manifests' tests.
//! - [`mcp_tasks`]: a raw 2026-07-28 JSON-RPC client of `/mcp` for MCP tasks, and the
//!   tasks extension's wire shapes.
//! - [`tools`]: the system tools a test drives, installed from Debian's packages when
//!   missing; a failure under `CI=true`, else a loud skip.
//! - [`oidc`]: a real OpenID Provider (npm `oidc-provider`, `tests/oidc/provider.mjs`) on
//!   loopback, with test controls (key rotation, minted tokens, request counts); without
//!   Node a test is skipped with a notice, except under `CI=true`, where it fails.
//!
//! ```
//! use capgate_testkit::{actors, schemas};
//! let dana = actors::dana();
//! assert_eq!(dana.id, "u_dana");
//! assert_eq!(schemas::refund()["required"][0], "orderId");
//! ```
//!
//! Test support, not an API: `publish = false`, and it may change with the tests.

pub mod actors;
pub mod kube;
pub mod mcp_tasks;
pub mod oidc;
pub mod paths;
pub mod postgres;
pub mod schemas;
pub mod tools;
pub mod walkthrough;
