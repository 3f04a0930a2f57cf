//! Rate-limit buckets (`capgate_rate_limits`) every replica on the store shares: the
//! [`QuotaStore`] seam of capgate-core, one conditional upsert per request (a GCRA, see
//! [`capgate_core::quota`]). On Postgres the time is the database's (`clock_timestamp()`),
//! so the replicas' clocks need not agree; the table is unlogged (a bucket needs no
//! write-ahead log: a lost bucket is a full one). On SQLite the time is this process's.

use crate::Store;
use crate::db::{Sql, Via};
use capgate_core::quota::{
    Admission, BucketRate, MAX_BUCKET_KEY_BYTES, QuotaStore, QuotaStoreError, gcra,
};
use std::time::Duration;

/// Take a token: insert a fresh bucket, or move an existing one's `tat` forward when the
/// result stays within the tolerance. No row back: no token. `$1` bucket, `$2` interval,
/// `$3` tolerance (µs); SQLite's `$4` is now (µs).
const TAKE: Sql = Sql {
    sqlite: "INSERT INTO capgate_rate_limits AS t (bucket, tat_us) VALUES ($1, $4 + $2) \
         ON CONFLICT (bucket) DO UPDATE SET tat_us = MAX(t.tat_us, excluded.tat_us - $2) + $2 \
         WHERE MAX(t.tat_us, excluded.tat_us - $2) + $2 - (excluded.tat_us - $2) <= $3 \
         RETURNING tat_us",
    postgres: "INSERT INTO capgate_rate_limits AS t (bucket, tat_us) \
         SELECT $1, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::bigint + $2 \
         ON CONFLICT (bucket) DO UPDATE SET tat_us = GREATEST(t.tat_us, excluded.tat_us - $2) + $2 \
         WHERE GREATEST(t.tat_us, excluded.tat_us - $2) + $2 - (excluded.tat_us - $2) <= $3 \
         RETURNING tat_us",
};

/// A refused bucket's `tat` and the time, to tell the caller when to retry.
const PEEK: Sql = Sql {
    sqlite: "SELECT tat_us, $2 AS now_us FROM capgate_rate_limits WHERE bucket = $1",
    postgres: "SELECT tat_us, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::bigint AS now_us \
         FROM capgate_rate_limits WHERE bucket = $1",
};

/// Forget buckets that are full again (their `tat` is past): the same as no row.
const PURGE: Sql = Sql {
    sqlite: "DELETE FROM capgate_rate_limits WHERE tat_us < $1",
    postgres: "DELETE FROM capgate_rate_limits \
         WHERE tat_us < (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::bigint",
};

/// This process's clock in microseconds since the epoch (SQLite's time).
fn now_us() -> i64 {
    crate::time::micros(chrono::Utc::now())
}

/// Rate-limit buckets on a [`Store`], shared by every process that opens it.
#[derive(Clone)]
pub struct SqlQuotaStore {
    store: Store,
}

impl std::fmt::Debug for SqlQuotaStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlQuotaStore")
            .field("backend", &self.store.backend())
            .finish()
    }
}

impl Store {
    /// The rate-limit buckets on this store.
    pub fn quotas(&self) -> SqlQuotaStore {
        SqlQuotaStore {
            store: self.clone(),
        }
    }
}

fn unavailable(e: impl Into<capgate_core::error::BoxError>) -> QuotaStoreError {
    QuotaStoreError(e.into())
}

impl SqlQuotaStore {
    /// Delete the buckets that are full again (idle ones); how many went. Nothing changes
    /// for anyone: a missing bucket is a full one.
    pub async fn purge_idle(&self) -> Result<u64, QuotaStoreError> {
        let now = now_us();
        let params: &[&dyn crate::params::Param] = match self.store.backend() {
            crate::Backend::Sqlite => &[&now],
            crate::Backend::Postgres => &[],
        };
        self.store
            .execute(Via::Group, PURGE, params)
            .await
            .map_err(unavailable)
    }
}

#[async_trait::async_trait]
impl QuotaStore for SqlQuotaStore {
    async fn take(&self, key: &str, rate: BucketRate) -> Result<Admission, QuotaStoreError> {
        if key.len() > MAX_BUCKET_KEY_BYTES {
            return Err(unavailable(format!(
                "a bucket key is longer than {MAX_BUCKET_KEY_BYTES} bytes"
            )));
        }
        let (interval, tolerance) = (rate.interval_us(), rate.tolerance_us());
        let now = now_us();
        let sqlite = self.store.backend() == crate::Backend::Sqlite;
        let params: &[&dyn crate::params::Param] = if sqlite {
            &[&key, &interval, &tolerance, &now]
        } else {
            &[&key, &interval, &tolerance]
        };
        let taken = self
            .store
            .fetch_optional(Via::Group, TAKE, params, |row| row.int("tat_us"))
            .await
            .map_err(unavailable)?;
        if taken.is_some() {
            return Ok(Admission::Admitted);
        }
        let peek_params: &[&dyn crate::params::Param] =
            if sqlite { &[&key, &now] } else { &[&key] };
        let seen = self
            .store
            .fetch_optional(Via::Readers, PEEK, peek_params, |row| {
                Ok::<_, String>((row.int("tat_us")?, row.int("now_us")?))
            })
            .await
            .map_err(unavailable)?
            .transpose()
            .map_err(unavailable)?;
        // Refused a moment ago: the wait from what the bucket holds now, at least one
        // interval if it has moved since.
        let retry_after = match seen.map(|(tat, now)| gcra(Some(tat), now, rate)) {
            Some(Err(wait)) => wait,
            _ => Duration::from_micros(u64::try_from(rate.interval_us()).unwrap_or(1)),
        };
        Ok(Admission::Limited { retry_after })
    }
}
