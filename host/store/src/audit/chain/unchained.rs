//! The rows outside every chain: written before the chains began (counted, not
//! verifiable) or inserted since (a finding), and rows with an id no insert gives.

use super::{Finding, Tamper, VerifyReport};
use crate::audit::log::AuditLog;
use capgate_core::error::BoxError;

impl AuditLog {
    /// Rows without a chain, and rows with an id no insert gives (`id <= 0`). Chain-less
    /// rows at most `bound` (the id the writers' signed start records name) or, without
    /// one, older than every chained row predate the chain; others were inserted.
    pub(super) async fn unchained(
        &self,
        bound: Option<i64>,
        report: &mut VerifyReport,
    ) -> Result<(), BoxError> {
        let not_positive = self
            .store
            .fetch_all(
                "SELECT id, chain, seq FROM capgate_audit_events WHERE id <= 0 ORDER BY id LIMIT 1",
                &[],
                |r| {
                    Ok::<_, crate::columns::ColumnError>((
                        r.int("id")?,
                        r.opt_text("chain")?,
                        r.opt_int("seq")?,
                    ))
                },
            )
            .await?;
        if let Some((id, chain, seq)) = not_positive.into_iter().next().transpose()? {
            report.findings.push(Finding {
                kind: Tamper::Inserted,
                chain,
                seq,
                event_id: Some(id),
                detail: format!(
                    "event {id} has an id no insert gives (at most 0): it was put there by hand"
                ),
            });
        }
        let first_chained = self
            .store
            .fetch_all(
                "SELECT min(id) AS id FROM capgate_audit_events WHERE chain IS NOT NULL AND id > 0",
                &[],
                |r| r.opt_int("id"),
            )
            .await?
            .into_iter()
            .next()
            .transpose()?
            .flatten();
        // Chain-less rows up to `legit` predate the chain.
        let legit = match (bound, first_chained) {
            (Some(b), _) => b,
            (None, Some(first)) => first - 1,
            (None, None) => return Ok(()),
        };
        let before = self
            .store
            .fetch_all(
                "SELECT count(*) AS n FROM capgate_audit_events WHERE chain IS NULL \
                 AND id > 0 AND id <= $1",
                &[&legit],
                |r| r.int("n"),
            )
            .await?;
        report.unchained_before = before
            .into_iter()
            .next()
            .transpose()?
            .map_or(0, |n| u64::try_from(n).unwrap_or(0));
        let inserted = self
            .store
            .fetch_all(
                "SELECT id FROM capgate_audit_events WHERE chain IS NULL AND id > $1 \
                 ORDER BY id LIMIT 1",
                &[&legit],
                |r| r.int("id"),
            )
            .await?;
        if let Some(id) = inserted.into_iter().next().transpose()? {
            report.findings.push(Finding {
                kind: Tamper::Inserted,
                chain: None,
                seq: None,
                event_id: Some(id),
                detail: format!(
                    "event {id} belongs to no chain but was stored after the chains began"
                ),
            });
        }
        Ok(())
    }
}
