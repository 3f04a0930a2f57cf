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
    Settlement,
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

const APPROVALS: &str = "capgate_approvals";
const INVOCATIONS: &str = "capgate_invocations";

// One operation on one table; each method names itself with [`Op::method`].
const DELETE_INVOCATIONS: Op = Op {
    name: "DELETE capgate_invocations",
    operation: "DELETE",
    table: INVOCATIONS,
    method: "",
};
const INSERT_APPROVALS: Op = Op {
    name: "INSERT capgate_approvals",
    operation: "INSERT",
    table: APPROVALS,
    method: "",
};
const INSERT_INVOCATIONS: Op = Op {
    name: "INSERT capgate_invocations",
    operation: "INSERT",
    table: INVOCATIONS,
    method: "",
};
const SELECT_APPROVALS: Op = Op {
    name: "SELECT capgate_approvals",
    operation: "SELECT",
    table: APPROVALS,
    method: "",
};
const SELECT_INVOCATIONS: Op = Op {
    name: "SELECT capgate_invocations",
    operation: "SELECT",
    table: INVOCATIONS,
    method: "",
};
const UPDATE_APPROVALS: Op = Op {
    name: "UPDATE capgate_approvals",
    operation: "UPDATE",
    table: APPROVALS,
    method: "",
};
const UPDATE_INVOCATIONS: Op = Op {
    name: "UPDATE capgate_invocations",
    operation: "UPDATE",
    table: INVOCATIONS,
    method: "",
};

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

#[async_trait]
impl<T: ApprovalCoordinator> ApprovalCoordinator for Traced<T> {
    async fn create(&self, request: ApprovalRequest) -> Result<ApprovalRecord, ApprovalStoreError> {
        let op = INSERT_APPROVALS.method("approval.create");
        self.run(op, self.inner.create(request)).await
    }

    async fn get(&self, id: &str) -> Result<Option<ApprovalRecord>, ApprovalStoreError> {
        let op = SELECT_APPROVALS.method("approval.get");
        self.run(op, self.inner.get(id)).await
    }

    async fn decide(
        &self,
        id: &str,
        decision: Decision,
        now: DateTime<Utc>,
    ) -> Result<ApprovalRecord, ApprovalStoreError> {
        let op = UPDATE_APPROVALS.method("approval.decide");
        self.run(op, self.inner.decide(id, decision, now)).await
    }

    async fn mark_consumed(
        &self,
        id: &str,
        execution_id: &str,
        now: DateTime<Utc>,
    ) -> Result<ApprovalRecord, ApprovalStoreError> {
        let op = UPDATE_APPROVALS.method("approval.consume");
        self.run(op, self.inner.mark_consumed(id, execution_id, now))
            .await
    }

    async fn list(
        &self,
        filter: &ApprovalFilter,
        now: DateTime<Utc>,
    ) -> Result<Vec<ApprovalRecord>, ApprovalStoreError> {
        let op = SELECT_APPROVALS.method("approval.list");
        self.run(op, self.inner.list(filter, now)).await
    }

    fn is_durable(&self) -> bool {
        self.inner.is_durable()
    }
}

#[async_trait]
impl<T: InvocationJournal> InvocationJournal for Traced<T> {
    async fn claim(
        &self,
        request: ClaimRequest,
        now: DateTime<Utc>,
    ) -> Result<ClaimOutcome, JournalError> {
        let op = INSERT_INVOCATIONS.method("invocation.claim");
        self.run(op, self.inner.claim(request, now)).await
    }

    async fn claim_resume(
        &self,
        scope: &str,
        invocation_id: &str,
        approval_id: &str,
        now: DateTime<Utc>,
    ) -> Result<ResumeClaim, JournalError> {
        let op = UPDATE_INVOCATIONS.method("invocation.claim_resume");
        self.run(
            op,
            self.inner
                .claim_resume(scope, invocation_id, approval_id, now),
        )
        .await
    }

    async fn settle(
        &self,
        scope: &str,
        invocation_id: &str,
        claim_token: &str,
        settlement: Settlement,
        now: DateTime<Utc>,
    ) -> Result<InvocationRecord, JournalError> {
        let op = UPDATE_INVOCATIONS.method("invocation.settle");
        self.run(
            op,
            self.inner
                .settle(scope, invocation_id, claim_token, settlement, now),
        )
        .await
    }

    async fn reconcile(
        &self,
        scope: &str,
        invocation_id: &str,
        observed_claim_token: &str,
        settlement: Settlement,
        now: DateTime<Utc>,
    ) -> Result<InvocationRecord, JournalError> {
        let op = UPDATE_INVOCATIONS.method("invocation.reconcile");
        self.run(
            op,
            self.inner
                .reconcile(scope, invocation_id, observed_claim_token, settlement, now),
        )
        .await
    }

    async fn get(
        &self,
        scope: &str,
        invocation_id: &str,
    ) -> Result<Option<InvocationRecord>, JournalError> {
        let op = SELECT_INVOCATIONS.method("invocation.get");
        self.run(op, self.inner.get(scope, invocation_id)).await
    }

    async fn find_approval(
        &self,
        scope: &str,
        approval_id: &str,
    ) -> Result<Option<InvocationRecord>, JournalError> {
        let op = SELECT_INVOCATIONS.method("invocation.find_approval");
        self.run(op, self.inner.find_approval(scope, approval_id))
            .await
    }

    async fn purge_settled_before(&self, cutoff: DateTime<Utc>) -> Result<u64, JournalError> {
        let op = DELETE_INVOCATIONS.method("invocation.purge");
        self.run(op, self.inner.purge_settled_before(cutoff)).await
    }

    fn is_durable(&self) -> bool {
        self.inner.is_durable()
    }
}
