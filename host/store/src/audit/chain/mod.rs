//! The audit trail's hash chains and signed checkpoints: what makes an edited, deleted,
//! inserted or reordered event, and a truncated tail, detectable ([`AuditLog::verify`]).
//!
//! **One chain per writer.** Every [`SqlAuditSink`](super::SqlAuditSink) (one per process:
//! a replica, a CLI command) appends to a chain of its own, named by a UUIDv7 when it
//! starts. Its events carry `seq` (1, 2, … without gaps), the hash of the chain's previous
//! event and their own hash: the SHA-256 of the event's canonical JSON (RFC 8785), chain
//! fields included. A writer is the only appender of its chain, so it knows the chain's
//! head without reading it, appends never wait on another replica's lock, and any number
//! of replicas and CLI processes on one database stay correct; the order within a chain is
//! that writer's commit order. (A chain per namespace would need a lock shared by every
//! replica on each batch, and the audit table has no namespace column.)
//!
//! **Checkpoints, chained from a signed start.** With a key configured, a writer signs a
//! start record before its first event ("chain C starts; a checkpoint at least every N
//! events; chain-less rows end at id U") and then checkpoints "chain C reached event SEQ
//! whose hash is H, after the record whose signature digests to P" (Ed25519), into
//! `capgate_audit_checkpoints`: once `checkpointEvents` events went without one, about a second
//! after a commit leaves events uncovered, at every flush and at a clean stop. Each
//! record signs the SHA-256 of the previous one's signature, so deleting a checkpoint
//! breaks the next. With the public key, verification requires every chain to have its
//! signed start, an unbroken run of checkpoints no further apart than N, and to end on a
//! checkpoint; it checks each signature, that the event at SEQ still has hash H (a chain
//! rewritten from some point on with recomputed hashes), and that the chain still reaches
//! SEQ (a truncated tail). What the database alone cannot show (a chain truncated back to
//! one of its checkpoints together with the later ones, a whole chain deleted) the
//! exported copy of the checkpoints shows: [`VerifyOptions::copy`]. SECURITY.md states the
//! threat model.
//!
//! By job: [`link`] is what an event's hash covers and where a writer's chain stands,
//! [`checkpoint`] the signer and the signed records (start, checkpoint, purge), [`report`]
//! what verification is asked and answers, [`verify`] the walk of each chain,
//! [`unchained`] the rows outside every chain, and [`coverage`] whether a chain's signed
//! records vouch for all of its events.

mod checkpoint;
mod coverage;
mod link;
mod report;
mod unchained;
mod verify;

pub(crate) use checkpoint::CheckpointFields;
pub use checkpoint::{CheckpointKeyError, CheckpointSigner, ExportedCheckpoint, key_id};
pub(crate) use link::{ChainHead, Linked};
pub use report::{ChainSummary, Finding, Tamper, VerifyOptions, VerifyReport};
pub(crate) use verify::read_record;
