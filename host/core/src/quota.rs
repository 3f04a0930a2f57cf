//! Rate-limit buckets that several processes can share: the seam between the gateway's
//! door (which decides what a bucket is: one per principal, one per namespace) and a store
//! every replica of a deployment reaches (capgate-store implements it on SQLite and
//! Postgres). Without it each replica limits on its own, and N replicas let a principal
//! through N times its quota.
//!
//! A bucket is a GCRA ("generic cell rate algorithm", the token bucket written as one
//! timestamp): its *theoretical arrival time* `tat` moves one emission interval
//! (`1 / per_second`) forward per admitted request, never from before now; a request is
//! admitted when the new `tat` is at most `burst` intervals ahead of now. A bucket never
//! seen, or idle long enough, admits `burst` requests at once, then `per_second`.
//!
//! [`InMemoryQuotaStore`] is the reference: one process's buckets, the behaviour every
//! shared implementation must match (the store's conformance suite runs the same checks
//! on all of them).

use crate::error::BoxError;
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The longest bucket key a [`QuotaStore`] must take: callers hash what they key on
/// (a principal, a namespace) so no bucket key grows with its input.
pub const MAX_BUCKET_KEY_BYTES: usize = 128;

/// A bucket's rate: `per_second` sustained, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketRate {
    /// Sustained requests per second.
    pub per_second: NonZeroU32,
    /// Requests admitted at once from a full bucket.
    pub burst: NonZeroU32,
}

impl BucketRate {
    /// The emission interval in microseconds: how far one admitted request moves the
    /// bucket's `tat` (at least 1).
    pub fn interval_us(self) -> i64 {
        (1_000_000 / i64::from(self.per_second.get())).max(1)
    }

    /// How far ahead of now a bucket's `tat` may be after an admitted request, in
    /// microseconds: `burst` intervals.
    pub fn tolerance_us(self) -> i64 {
        self.interval_us()
            .saturating_mul(i64::from(self.burst.get()))
    }
}

/// What a bucket answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// One token taken.
    Admitted,
    /// No token left; the next one is due after this long.
    Limited {
        /// How long until one request would be admitted again.
        retry_after: Duration,
    },
}

/// Why a bucket could not be consulted (the store is away). The door refuses the request
/// (fails closed) rather than letting it through unlimited.
#[derive(Debug, thiserror::Error)]
#[error("rate-limit store unavailable: {0}")]
pub struct QuotaStoreError(#[source] pub BoxError);

/// Where rate-limit buckets live. Implementations must be linearizable per bucket: two
/// processes taking from one bucket at once never both get its last token.
#[async_trait::async_trait]
pub trait QuotaStore: Send + Sync + 'static {
    /// Take one token from bucket `key` (at most [`MAX_BUCKET_KEY_BYTES`]) at `rate`.
    async fn take(&self, key: &str, rate: BucketRate) -> Result<Admission, QuotaStoreError>;
}

/// Most buckets an [`InMemoryQuotaStore`] keeps before it forgets the idle ones.
const MAX_MEMORY_BUCKETS: usize = 65_536;

/// Buckets in this process's memory: the reference behaviour of a [`QuotaStore`] (and a
/// single process's store). Idle buckets (whose `tat` is past) are forgotten once there
/// are many, which changes nothing: a forgotten bucket is a full one.
#[derive(Debug)]
pub struct InMemoryQuotaStore {
    epoch: Instant,
    buckets: Mutex<HashMap<String, i64>>,
}

impl Default for InMemoryQuotaStore {
    fn default() -> Self {
        InMemoryQuotaStore {
            epoch: Instant::now(),
            buckets: Mutex::new(HashMap::new()),
        }
    }
}

impl InMemoryQuotaStore {
    /// No buckets yet.
    pub fn new() -> Self {
        Self::default()
    }
}

/// One GCRA step from a bucket's `tat` (`None`: never seen) at `now_us`: the new `tat` if a
/// token is taken, else how long until one would be. What every implementation computes
/// (the SQL ones in one statement).
pub fn gcra(tat_us: Option<i64>, now_us: i64, rate: BucketRate) -> Result<i64, Duration> {
    let interval = rate.interval_us();
    let tolerance = rate.tolerance_us();
    let new_tat = tat_us
        .unwrap_or(now_us)
        .max(now_us)
        .saturating_add(interval);
    let ahead = new_tat.saturating_sub(now_us);
    if ahead <= tolerance {
        Ok(new_tat)
    } else {
        let wait = u64::try_from(ahead - tolerance).unwrap_or(0);
        Err(Duration::from_micros(wait))
    }
}

#[async_trait::async_trait]
impl QuotaStore for InMemoryQuotaStore {
    async fn take(&self, key: &str, rate: BucketRate) -> Result<Admission, QuotaStoreError> {
        let now = i64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(i64::MAX);
        // A poisoned lock only means a panic between two plain map updates.
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= MAX_MEMORY_BUCKETS && !buckets.contains_key(key) {
            buckets.retain(|_, tat| *tat > now);
        }
        match gcra(buckets.get(key).copied(), now, rate) {
            Ok(tat) => {
                buckets.insert(key.to_owned(), tat);
                Ok(Admission::Admitted)
            }
            Err(retry_after) => Ok(Admission::Limited { retry_after }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(per_second: u32, burst: u32) -> BucketRate {
        BucketRate {
            per_second: NonZeroU32::new(per_second).unwrap_or(NonZeroU32::MIN),
            burst: NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN),
        }
    }

    #[test]
    fn a_fresh_bucket_admits_its_burst_then_waits_one_interval() {
        let r = rate(2, 3);
        let mut tat = None;
        for _ in 0..3 {
            tat = Some(gcra(tat, 0, r).expect("within the burst"));
        }
        assert_eq!(gcra(tat, 0, r), Err(Duration::from_millis(500)));
        // Half a second later one more token is due, and only one.
        let later = 500_000;
        let tat = gcra(tat, later, r).expect("refilled");
        assert!(gcra(Some(tat), later, r).is_err());
    }

    #[tokio::test]
    async fn buckets_are_independent() {
        let q = InMemoryQuotaStore::new();
        let r = rate(1, 2);
        for _ in 0..2 {
            assert_eq!(q.take("a", r).await.ok(), Some(Admission::Admitted));
        }
        assert!(matches!(
            q.take("a", r).await,
            Ok(Admission::Limited { .. })
        ));
        assert_eq!(q.take("b", r).await.ok(), Some(Admission::Admitted));
    }
}
