//! Hostile: a policy that never returns. The host must stop it by deadline or fuel.

use capgate_plugin::{Decision, Policy, PolicyRequest, export_policy};

struct Spin;

impl Policy for Spin {
    fn evaluate(_request: PolicyRequest) -> Result<Decision, String> {
        let mut n: u64 = 0;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }
}

export_policy!(Spin);
