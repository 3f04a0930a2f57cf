//! Hostile: a policy that panics (a trap once compiled). The host must fail closed.

use capgate_plugin::{Decision, Policy, PolicyRequest, export_policy};

struct Panics;

impl Policy for Panics {
    fn evaluate(request: PolicyRequest) -> Result<Decision, String> {
        panic!(
            "hostile plugin panicked on purpose (capability {})",
            request.capability.id
        );
    }
}

export_policy!(Panics);
