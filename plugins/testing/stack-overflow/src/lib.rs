//! Hostile: unbounded recursion. The host must trap it (wasm stack limit).

use capgate_plugin::{Decision, Policy, PolicyRequest, export_policy};

#[inline(never)]
#[allow(unconditional_recursion)]
fn dive(depth: u64, acc: u64) -> u64 {
    let next = std::hint::black_box(acc.wrapping_mul(31).wrapping_add(depth));
    dive(depth + 1, next).wrapping_add(std::hint::black_box(1))
}

struct Overflow;

impl Policy for Overflow {
    fn evaluate(_request: PolicyRequest) -> Result<Decision, String> {
        let n = dive(0, 7);
        Ok(if n == 0 {
            Decision::Allow
        } else {
            Decision::Hide
        })
    }
}

export_policy!(Overflow);
