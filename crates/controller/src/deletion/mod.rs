//! Mass-deletion protection (ADR-0006), the pure core. Every function takes gathered facts and
//! an explicit `now`; nothing here reads the clock, a store or a client. The reconcilers
//! observe, call these, and apply the result.
//!
//! Four mechanisms, none weakening another:
//!
//! - [`pruned_by`]: kopiur stamps `pruned-by` immediately before its own deletes; anything
//!   else (missing, unknown) is external. Operator prunes are never counted, held or
//!   cascade-retained.
//! - [`cascade`]: the schedule-deletion guard (row D9). An external deletion of a produced
//!   Snapshot whose schedule is gone, replaced or terminating is downgraded to a release under
//!   the default `onScheduleDelete: Retain`. [`namespace`] is the other axis
//!   (`onNamespaceDelete`, default Orphan).
//! - [`breaker`] + [`ack`]: per repository, an inclusive count of pending external destructive
//!   deletions; at or above `deletionProtection.threshold` (default 10, 0 disables) every one
//!   is held until `allow-mass-deletion=<RFC3339>` approves the deletions requested at or
//!   before it (a future value is clamped to first sight; an unparseable one is ignored).
//! - [`fire_set`] + [`batch`]: the exclusive set a batch may delete, pooled over a 10 s quiet
//!   window into `snapdel-<10 hex>` Jobs of at most 200 members, one in flight per repository,
//!   optionally capped cluster-wide.
//!
//! # Calling it
//!
//! Per repository, once per pass (from the Snapshot store):
//! ```text
//! let state = breaker::evaluate(&RepoDeletionFacts { repo, threshold, ack_annotation,
//!                                ack_recorded, held_condition_was_true, deletions }, now);
//! // write state.status() and state.condition() on the repository, emit state.events
//! ```
//! Per deleting Snapshot (its own reconcile; `owner` from a live GET via
//! `cascade::schedule_state`):
//! ```text
//! // First: a Complete batch Job listing this uid is the evidence that releases it.
//! if let MemberBatch::Completed { .. } = batch::member_batch(uid, &jobs) { /* remove finalizer */ }
//! let facts = SnapshotDeletionFacts { .., breaker: state.member(deletion_timestamp), .. };
//! let plan = plan::plan_snapshot_deletion(&facts, now);
//! // plan.action: Orphan/Release -> remove finalizer; Wait -> delete backup Job, requeue 5 s;
//! // Held / DeleteSnapshot -> write plan.record and plan.held_condition; emit plan.events
//! ```
//! Dispatch (any eligible member's reconcile, or a dispatcher requeue):
//! ```text
//! let f = fire_set::select(&FireContext { repo_uid, repo_ready, on_namespace_delete,
//!                                         breaker: &state, in_flight: &batch::in_flight_members(&jobs) },
//!                          &candidates);
//! let d = batch::next_batches(&[RepoQueue { repo_uid, fire_set: f }], &jobs, &tuning, now);
//! // CREATE each d.create (AlreadyExists is success); requeue at d.requeue_at()
//! // per Job: batch::reap(..); per member: batch::member_batch(uid, &jobs)
//! ```
//! `observe` reads the Snapshot-local facts off the CR; `messages` holds every user-facing
//! text, including the exact `kubectl annotate … allow-mass-deletion="<V>" --overwrite` line.
pub mod ack;
pub mod batch;
pub mod breaker;
pub mod cascade;
pub mod digest;
pub mod fire_set;
pub mod messages;
pub mod namespace;
pub mod observe;
pub mod plan;
pub mod pruned_by;
pub mod types;

pub use batch::{BatchJob, BatchSpec, BatchTuning, Dispatch, JobPhase, RepoQueue, Wait, next_batches};
pub use breaker::{BreakerMode, BreakerState, MemberBreaker, PendingDeletion, RepoDeletionFacts, evaluate};
pub use cascade::{LiveSchedule, Owner, ScheduleState};
pub use fire_set::{Exclusion, FireCandidate, FireContext, FireMember, FireSet, ScheduleLink, select};
pub use plan::{Action, DeletionPlan, Row, SnapshotDeletionFacts, plan_snapshot_deletion};
pub use pruned_by::{PruneKind, PrunedBy};
pub use types::*;
