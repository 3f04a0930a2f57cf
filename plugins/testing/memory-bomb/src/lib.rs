//! Hostile: a policy that allocates until something stops it. The host's memory cap must.

use capgate_plugin::{Decision, Policy, PolicyRequest, export_policy};

struct Bomb;

impl Policy for Bomb {
    fn evaluate(_request: PolicyRequest) -> Result<Decision, String> {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(std::hint::black_box(vec![0xA5u8; 1 << 20]));
        }
    }
}

export_policy!(Bomb);
