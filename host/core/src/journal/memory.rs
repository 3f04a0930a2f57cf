//! The development-only [`InvocationJournal`]: a mutex-protected map in this process, for
//! examples, tests and single-process experiments. It follows the same rules as the
//! durable journals of `capgate-store` (the conformance suite runs against both), but
//! nothing survives a restart and no other replica sees it.

use super::{
    ClaimOutcome, ClaimRequest, InvocationJournal, InvocationRecord, InvocationState, JournalError,
    ResumeClaim, SettleClaim, Settlement, new_claim_token,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::Mutex;

/// Development-only journal: a mutex-protected map. Not durable, not shared between
/// processes; use a `capgate-store` journal anywhere replicas or restarts matter.
#[derive(Default)]
pub struct InMemoryInvocationJournal {
    records: Mutex<HashMap<(String, String), InvocationRecord>>,
}

impl InMemoryInvocationJournal {
    /// An empty journal.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), InvocationRecord>> {
        // Every update below is a single assignment to a plain map: a poisoned lock still
        // guards consistent data.
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The map's key of a record.
fn key(scope: &str, invocation_id: &str) -> (String, String) {
    (scope.to_string(), invocation_id.to_string())
}

#[async_trait]
impl InvocationJournal for InMemoryInvocationJournal {
    async fn claim(
        &self,
        request: ClaimRequest,
        now: DateTime<Utc>,
    ) -> Result<ClaimOutcome, JournalError> {
        let mut map = self.lock();
        let key = (request.scope.clone(), request.invocation_id.clone());
        if let Some(existing) = map.get(&key) {
            return Ok(existing
                .clone()
                .existing_claim(&request.capability_id, &request.input_hash));
        }
        let claim_token = new_claim_token();
        let record = request.into_record(claim_token.clone(), now);
        map.insert(key, record.clone());
        Ok(ClaimOutcome::Admitted {
            claim_token,
            record,
        })
    }

    async fn claim_resume(
        &self,
        scope: &str,
        invocation_id: &str,
        approval_id: &str,
        now: DateTime<Utc>,
    ) -> Result<ResumeClaim, JournalError> {
        let mut map = self.lock();
        let Some(r) = map.get_mut(&key(scope, invocation_id)) else {
            return Ok(ResumeClaim::NotFound);
        };
        if !r.resumable_for(approval_id) {
            return Ok(ResumeClaim::NotResumable(r.clone()));
        }
        let claim_token = new_claim_token();
        r.state = InvocationState::Pending;
        r.awaiting_approval = false;
        r.outcome = None;
        r.claim_token = claim_token.clone();
        r.updated_at = now;
        Ok(ResumeClaim::Admitted {
            claim_token,
            record: r.clone(),
        })
    }

    async fn settle_claim(
        &self,
        claim: SettleClaim<'_>,
        settlement: Settlement,
        now: DateTime<Utc>,
    ) -> Result<InvocationRecord, JournalError> {
        settlement.validate()?;
        let mut map = self.lock();
        let r = map
            .get_mut(&key(claim.scope, claim.invocation_id))
            .ok_or_else(|| JournalError::NotFound(claim.invocation_id.to_string()))?;
        r.settleable_by(claim.claim_token)?;
        r.state = InvocationState::Settled;
        r.outcome = Some(settlement.outcome);
        r.awaiting_approval = settlement.awaiting_approval.is_some();
        if let Some(a) = settlement.awaiting_approval {
            r.approval_id = Some(a);
        }
        r.reconciled = claim.reconciled;
        r.updated_at = now;
        Ok(r.clone())
    }

    async fn release(
        &self,
        scope: &str,
        invocation_id: &str,
        claim_token: &str,
    ) -> Result<bool, JournalError> {
        let mut map = self.lock();
        let k = key(scope, invocation_id);
        let held = map
            .get(&k)
            .is_some_and(|r| r.state == InvocationState::Pending && r.claim_token == claim_token);
        if held {
            map.remove(&k);
        }
        Ok(held)
    }

    async fn get(
        &self,
        scope: &str,
        invocation_id: &str,
    ) -> Result<Option<InvocationRecord>, JournalError> {
        Ok(self.lock().get(&key(scope, invocation_id)).cloned())
    }

    async fn find_approval(
        &self,
        scope: &str,
        approval_id: &str,
    ) -> Result<Option<InvocationRecord>, JournalError> {
        Ok(self
            .lock()
            .values()
            .filter(|r| r.scope == scope && r.approval_id.as_deref() == Some(approval_id))
            // Ties broken by invocation id, as the SQL journal does: the map's iteration
            // order is random, and the answer must not be.
            .min_by(|a, b| {
                a.created_at
                    .cmp(&b.created_at)
                    .then_with(|| a.invocation_id.cmp(&b.invocation_id))
            })
            .cloned())
    }

    async fn purge_settled_before(&self, cutoff: DateTime<Utc>) -> Result<u64, JournalError> {
        let mut map = self.lock();
        let before = map.len();
        map.retain(|_, r| r.state == InvocationState::Pending || r.updated_at >= cutoff);
        Ok((before - map.len()) as u64)
    }

    fn is_durable(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actor::{ActorKind, ActorRef, Surface};
    use crate::journal::scope_hash;
    use serde_json::json;

    fn scope() -> String {
        let dana = ActorRef {
            id: "u_dana".into(),
            kind: ActorKind::User,
        };
        scope_hash("org_1", &dana, Surface::AiSdk).unwrap_or_default()
    }

    #[tokio::test]
    async fn in_memory_journal_admits_once_conflicts_on_other_input_and_refuses_stale_tokens() {
        let j = InMemoryInvocationJournal::new();
        let now = Utc::now();
        let req = |input| ClaimRequest::new(scope(), "inv_1", "orders.refund", input);
        let Ok(ClaimOutcome::Admitted { claim_token, .. }) =
            j.claim(req(json!({"a": 1})).unwrap(), now).await
        else {
            panic!("first claim is admitted");
        };
        assert!(matches!(
            j.claim(req(json!({"a": 1})).unwrap(), now).await,
            Ok(ClaimOutcome::Existing(_))
        ));
        assert!(matches!(
            j.claim(req(json!({"a": 2})).unwrap(), now).await,
            Ok(ClaimOutcome::Conflict)
        ));
        let s = Settlement::approval_required("apr_1", json!({"status": "approval-required"}));
        assert!(matches!(
            j.settle(&scope(), "inv_1", "clm_wrong", s.clone(), now)
                .await,
            Err(JournalError::StaleClaim(_))
        ));
        let settled = j
            .settle(&scope(), "inv_1", &claim_token, s, now)
            .await
            .unwrap();
        assert!(settled.awaiting_approval);
        let found = j.find_approval(&scope(), "apr_1").await.unwrap();
        assert_eq!(found.map(|r| r.invocation_id), Some("inv_1".to_string()));
        let Ok(ResumeClaim::Admitted {
            claim_token: t2, ..
        }) = j.claim_resume(&scope(), "inv_1", "apr_1", now).await
        else {
            panic!("resume reopens");
        };
        assert!(matches!(
            j.claim_resume(&scope(), "inv_1", "apr_1", now).await,
            Ok(ResumeClaim::NotResumable(_))
        ));
        assert!(matches!(
            j.settle(
                &scope(),
                "inv_1",
                &claim_token,
                Settlement::final_outcome(json!({})),
                now
            )
            .await,
            Err(JournalError::StaleClaim(_))
        ));
        let done = j
            .settle(
                &scope(),
                "inv_1",
                &t2,
                Settlement::final_outcome(json!({"status": "completed"})),
                now,
            )
            .await
            .unwrap();
        assert_eq!(done.approval_id.as_deref(), Some("apr_1"));
        assert!(!done.awaiting_approval);
    }
}
