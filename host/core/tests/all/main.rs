//! capgate-core's integration tests, one binary (link once): each module is one
//! area of behaviour, named after it; shared support lives in the non-test modules.

mod common;

mod admission;
mod approvals;
mod canonical;
mod canonical_props;
mod confirmation_door;
mod execution_phase;
mod pipeline;
mod policy_laws;
mod progress_relay;
mod provenance;
mod registry_and_discovery;
mod shadow_policies;
mod simulate;
mod spec_fidelity;
mod tenancy_and_freshness;
mod walkthrough;
