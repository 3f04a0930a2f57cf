//! The host-wide ledger of idle pooled instances. Each pooled binding keeps idle instances
//! per namespace (`Isolation::Pooled::max_idle`); without a cap across them, enough tenants
//! (or bindings) would hold every slot of the pooling allocator idle and leave none for
//! calls. The ledger counts every idle instance of every binding and namespace together
//! and, past `HostOptions::max_idle_pooled`, evicts the oldest-parked first (LRU: an
//! instance is parked when its call ends, so the oldest entry is the least recently used).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Weak};

/// A pool that can give up one of its idle instances.
pub(crate) trait Evict: Send + Sync {
    /// Retire the idle instance parked as `seq` in `namespace`, if it is still idle.
    fn evict(&self, namespace: &str, seq: u64);
}

/// An idle instance's owner and namespace.
type Entry = (Weak<dyn Evict>, String);

/// Every idle pooled instance of the host, by the order it was parked in.
#[derive(Default)]
pub(crate) struct IdleLedger {
    next: AtomicU64,
    entries: Mutex<BTreeMap<u64, Entry>>,
    evicted: AtomicU64,
}

impl IdleLedger {
    /// A fresh parking number (increasing: smaller is older).
    pub(crate) fn next_seq(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Count an instance parked as `seq` by `owner` in `namespace`. Called with the owner's
    /// pool lock held (lock order: pool, then ledger).
    pub(crate) fn track(&self, seq: u64, owner: Weak<dyn Evict>, namespace: &str) {
        if let Ok(mut e) = self.entries.lock() {
            e.insert(seq, (owner, namespace.to_string()));
        }
    }

    /// Stop counting `seq` (taken for a call, retired, or its binding dropped).
    pub(crate) fn forget(&self, seq: u64) {
        if let Ok(mut e) = self.entries.lock() {
            e.remove(&seq);
        }
    }

    /// Idle instances counted right now.
    pub(crate) fn len(&self) -> usize {
        self.entries.lock().map_or(0, |e| e.len())
    }

    /// Instances evicted by the cap so far.
    pub(crate) fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// Bring the count down to `cap`: the oldest entries beyond it are removed from the
    /// ledger here and retired by their owners outside the ledger's lock.
    pub(crate) fn enforce(&self, cap: usize) {
        let over: Vec<(u64, Entry)> = match self.entries.lock() {
            Ok(mut e) => {
                let mut out = Vec::new();
                while e.len() > cap {
                    match e.pop_first() {
                        Some(x) => out.push(x),
                        None => break,
                    }
                }
                out
            }
            Err(_) => return,
        };
        for (seq, (owner, namespace)) in over {
            if let Some(owner) = owner.upgrade() {
                owner.evict(&namespace, seq);
                self.evicted.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}
