//! Hostile-ish: burns CPU for a configured number of iterations, then allows. Proves that
//! a plugin inside its budget is not stopped early. Config `{"iterations": 2000000}`.

use capgate_plugin::{Decision, Policy, PolicyRequest, export_policy};

struct Slow;

impl Policy for Slow {
    fn evaluate(request: PolicyRequest) -> Result<Decision, String> {
        let iterations = request
            .config_value("/iterations")
            .and_then(|v| v.as_u64())
            .unwrap_or(2_000_000);
        let mut acc: u64 = 0;
        for i in 0..iterations {
            acc = std::hint::black_box(acc.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
        std::hint::black_box(acc);
        Ok(Decision::Allow)
    }
}

export_policy!(Slow);
