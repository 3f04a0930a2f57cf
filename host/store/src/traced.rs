//! Store calls as trace spans: [`Traced`] wraps an [`ApprovalCoordinator`] or an
//! [`InvocationJournal`] and runs every call inside an info-level span named and attributed
//! after OpenTelemetry's database conventions (`db.system.name`, `db.operation.name`,
//! `db.collection.name`; name `{operation} {table}`), plus `capgate.store.operation` for the
//! trait method. No ids, inputs, statements or error messages are recorded (SI-10): only
//! what the call is and, when it fails, `error.type` (the error's kind).
//!
//! With no trace exporter installed the spans are disabled at their call sites and cost a
//! relaxed atomic load each.

use crate::db::Backend;
use async_trait::async_trait;
use capgate_core::approval::{
    ApprovalCoordinator, ApprovalFilter, ApprovalRecord, ApprovalRequest, ApprovalStoreError,
    Decision,
};
use capgate_core::journal::{
    ClaimOutcome, ClaimRequest, InvocationJournal, InvocationRecord, JournalError, ResumeClaim,
    SettleClaim, Settlement,
};
use chrono::{DateTime, Utc};
use std::future::Future;
use tracing::Instrument;

/// A store implementation whose calls are traced (see the module docs).
pub struct Traced<T> {
    inner: T,
    system: &'static str,
}

impl<T> Traced<T> {
    /// Wrap `inner`, a store on `backend`.
    pub fn new(inner: T, backend: Backend) -> Self {
        Traced {
            inner,
            system: db_system(backend),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &T {
        &self.inner
    }
}

/// The `db.system.name` of a backend: `sqlite` or `postgresql`.
pub fn db_system(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgresql",
    }
}

/// One traced store call: `name` is the span name (`{operation} {table}`).
struct Op {
    name: &'static str,
    operation: &'static str,
    table: &'static str,
    method: &'static str,
}

/// The operation `$operation` on table `$table`, its span named `{operation} {table}`; each
/// method names itself with [`Op::method`].
macro_rules! op {
    ($operation:ident $table:ident) => {
        Op {
            name: concat!(stringify!($operation), " ", stringify!($table)),
            operation: stringify!($operation),
            table: stringify!($table),
            method: "",
        }
    };
}

const DELETE_INVOCATIONS: Op = op!(DELETE capgate_invocations);
const INSERT_APPROVALS: Op = op!(INSERT capgate_approvals);
const INSERT_INVOCATIONS: Op = op!(INSERT capgate_invocations);
const SELECT_APPROVALS: Op = op!(SELECT capgate_approvals);
const SELECT_INVOCATIONS: Op = op!(SELECT capgate_invocations);
const UPDATE_APPROVALS: Op = op!(UPDATE capgate_approvals);
const UPDATE_INVOCATIONS: Op = op!(UPDATE capgate_invocations);

impl Op {
    /// This operation as run by `method` (the span's `capgate.store.method`).
    const fn method(self, method: &'static str) -> Op {
        Op { method, ..self }
    }
}

impl<T> Traced<T> {
    async fn run<R, E: ErrorKind>(
        &self,
        op: Op,
        call: impl Future<Output = Result<R, E>>,
    ) -> Result<R, E> {
        let span = tracing::info_span!(
            "capgate.store",
            otel.name = op.name,
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            db.system.name = self.system,
            db.operation.name = op.operation,
            db.collection.name = op.table,
            capgate.store.operation = op.method,
            error.type = tracing::field::Empty,
        );
        let result = call.instrument(span.clone()).await;
        if let Err(e) = &result {
            span.record("error.type", e.kind());
            if e.is_failure() {
                span.record("otel.status_code", "ERROR");
            }
        }
        result
    }
}

/// What a span may say about a store error: its kind, never its message.
trait ErrorKind {
    /// A short, fixed name of the error's kind.
    fn kind(&self) -> &'static str;
    /// Whether the store failed (as opposed to refusing the operation by its rules).
    fn is_failure(&self) -> bool;
}

impl ErrorKind for ApprovalStoreError {
    fn kind(&self) -> &'static str {
        match self {
            ApprovalStoreError::NotFound(_) => "not_found",
            ApprovalStoreError::WrongStatus { .. } => "wrong_status",
            ApprovalStoreError::Duplicate(_) => "duplicate",
            ApprovalStoreError::Malformed { .. } => "malformed",
            ApprovalStoreError::Backend(_) => "backend",
            ApprovalStoreError::QuotaExceeded { .. } => "quota_exceeded",
        }
    }
    fn is_failure(&self) -> bool {
        matches!(
            self,
            ApprovalStoreError::Malformed { .. } | ApprovalStoreError::Backend(_)
        )
    }
}

impl ErrorKind for JournalError {
    fn kind(&self) -> &'static str {
        match self {
            JournalError::Invalid(_) => "invalid",
            JournalError::NotFound(_) => "not_found",
            JournalError::StaleClaim(_) => "stale_claim",
            JournalError::NotPending(_) => "not_pending",
            JournalError::Malformed { .. } => "malformed",
            JournalError::QuotaExceeded { .. } => "quota_exceeded",
            JournalError::Backend(_) => "backend",
        }
    }
    fn is_failure(&self) -> bool {
        matches!(
            self,
            JournalError::Malformed { .. } | JournalError::Backend(_)
        )
    }
}

/// The traced implementation of a store trait: each listed method runs the inner one inside
/// the span of its operation (`OP "capgate.store.operation" => fn …`), the methods after
/// `also` are written out; `is_durable` is the inner one's.
macro_rules! traced {
    ($trait:ident {
        $($op:ident $method:literal => fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;)*
    } $(also { $($also:tt)* })?) => {
        #[async_trait]
        impl<T: $trait> $trait for Traced<T> {
            $(
                async fn $name(&self, $($arg: $ty),*) -> $ret {
                    self.run($op.method($method), self.inner.$name($($arg),*)).await
                }
            )*

            $($($also)*)?

            fn is_durable(&self) -> bool {
                self.inner.is_durable()
            }
        }
    };
}

traced!(ApprovalCoordinator {
    INSERT_APPROVALS "approval.create" => fn create(request: ApprovalRequest)
        -> Result<ApprovalRecord, ApprovalStoreError>;
    SELECT_APPROVALS "approval.get" => fn get(id: &str)
        -> Result<Option<ApprovalRecord>, ApprovalStoreError>;
    UPDATE_APPROVALS "approval.decide" => fn decide(id: &str, decision: Decision, now: DateTime<Utc>)
        -> Result<ApprovalRecord, ApprovalStoreError>;
    UPDATE_APPROVALS "approval.consume" => fn mark_consumed(id: &str, execution_id: &str, now: DateTime<Utc>)
        -> Result<ApprovalRecord, ApprovalStoreError>;
    UPDATE_APPROVALS "approval.withdraw" => fn withdraw(id: &str, now: DateTime<Utc>)
        -> Result<ApprovalRecord, ApprovalStoreError>;
    SELECT_APPROVALS "approval.list" => fn list(filter: &ApprovalFilter, now: DateTime<Utc>)
        -> Result<Vec<ApprovalRecord>, ApprovalStoreError>;
    UPDATE_APPROVALS "approval.expire_due" => fn expire_due(now: DateTime<Utc>, limit: usize)
        -> Result<Vec<ApprovalRecord>, ApprovalStoreError>;
    UPDATE_APPROVALS "approval.escalate_due" => fn escalate_due(
        requested_before: DateTime<Utc>, now: DateTime<Utc>, limit: usize,
    ) -> Result<Vec<ApprovalRecord>, ApprovalStoreError>;
});

traced!(InvocationJournal {
    INSERT_INVOCATIONS "invocation.claim" => fn claim(request: ClaimRequest, now: DateTime<Utc>)
        -> Result<ClaimOutcome, JournalError>;
    UPDATE_INVOCATIONS "invocation.claim_resume" => fn claim_resume(
        scope: &str, invocation_id: &str, approval_id: &str, now: DateTime<Utc>,
    ) -> Result<ResumeClaim, JournalError>;
    SELECT_INVOCATIONS "invocation.get" => fn get(scope: &str, invocation_id: &str)
        -> Result<Option<InvocationRecord>, JournalError>;
    SELECT_INVOCATIONS "invocation.find_approval" => fn find_approval(scope: &str, approval_id: &str)
        -> Result<Option<InvocationRecord>, JournalError>;
    DELETE_INVOCATIONS "invocation.purge" => fn purge_settled_before(cutoff: DateTime<Utc>)
        -> Result<u64, JournalError>;
    DELETE_INVOCATIONS "invocation.release" => fn release(
        scope: &str, invocation_id: &str, claim_token: &str,
    ) -> Result<bool, JournalError>;
} also {
    // `settle` and `reconcile` are the trait's own, through this: one span either way,
    // named after which of the two it is.
    async fn settle_claim(
        &self,
        claim: SettleClaim<'_>,
        settlement: Settlement,
        now: DateTime<Utc>,
    ) -> Result<InvocationRecord, JournalError> {
        let method = claim.pick("invocation.settle", "invocation.reconcile");
        let settled = self.inner.settle_claim(claim, settlement, now);
        self.run(UPDATE_INVOCATIONS.method(method), settled).await
    }
});
