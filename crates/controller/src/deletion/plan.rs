//! The per-Snapshot deletion plan: rows D1–D11, first match wins. Each step is an exhaustive
//! match on one fact, so a new variant of any fact does not compile until the table places it.
use chrono::Duration;
use kopiur_api::names::{condition, event, reason};
use kopiur_api::snapshot::DeletionRecord;

use super::breaker::MemberBreaker;
use super::cascade::{self, CascadeGuard, Owner, ScheduleState};
use super::messages;
use super::namespace::{self, NamespaceAxis};
use super::pruned_by::{PruneKind, PrunedBy};
use super::types::{EventType, Manifest, PlannedCondition, PlannedEvent, RepoPresence, Time};
use kopiur_api::repository::OnNamespaceDelete;
use kopiur_api::snapshot::DeletionDecision;
use kopiur_api::snapshot::OnScheduleDelete;
use kopiur_api::snapshot_policy::DeletionPolicy;

/// How long D4 waits for a running backup to settle.
pub const WAIT_REQUEUE_SECONDS: i64 = 5;

/// The facts of docs/design/mass-deletion.md §5.3, gathered for one Snapshot with a `deletionTimestamp`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotDeletionFacts {
    pub deletion_timestamp: Time,
    /// `skip-snapshot-cleanup` is present.
    pub skip: bool,
    /// Effective: discovered rows are Retain; else spec, else the pinned resolved value.
    pub policy: DeletionPolicy,
    pub manifest: Manifest,
    pub pruned_by: PrunedBy,
    pub repo: RepoPresence,
    pub ns_terminating: bool,
    pub on_namespace_delete: OnNamespaceDelete,
    /// From a live GET of the controller-owner schedule.
    pub owner: Owner,
    /// The child's stamp (absent → Retain).
    pub on_schedule_delete: OnScheduleDelete,
    /// From `BreakerState::member(deletion_timestamp)` of the Snapshot's repository.
    pub breaker: MemberBreaker,
    /// `status.deletion` as last written.
    pub previous: Option<DeletionRecord>,
}

/// The row that matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Row {
    D1,
    D2,
    D3,
    D4,
    D5,
    D6,
    D7,
    D8,
    D9,
    D10,
    D11,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OrphanReason {
    SkipSnapshotCleanup,
    PolicyOrphan,
    RepositoryGone,
    NamespaceDeleted,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ReleaseReason {
    PolicyRetain,
    NoManifest,
    /// The cascade guard kept the data; the catalog rediscovers it.
    CascadeRetained {
        schedule: String,
        state: ScheduleState,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeleteReason {
    OperatorPrune(PruneKind),
    /// Approved (acked), below the threshold, or the breaker is disabled.
    External,
}

/// What to do with the finalizer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Remove the finalizer without contacting kopia; emit `SnapshotOrphaned`.
    Orphan(OrphanReason),
    /// Remove the finalizer without contacting kopia.
    Release(ReleaseReason),
    /// A manifest may still appear: delete the backup Job (background) and look again soon.
    Wait,
    /// Keep the finalizer until the ack, the count falling, skip, or the namespace axis.
    Held,
    /// Keep the finalizer; the member becomes eligible for a batch.
    DeleteSnapshot(DeleteReason),
}

impl Action {
    /// The `outcome` label of `kopiur_snapshot_deletions_total` when this plan releases the
    /// finalizer at once. Deleted members are counted when their batch completes.
    pub fn release_outcome(&self) -> Option<&'static str> {
        match self {
            Action::Orphan(_) => Some("orphaned"),
            Action::Release(ReleaseReason::CascadeRetained { .. }) => Some("cascade_retained"),
            Action::Release(ReleaseReason::PolicyRetain | ReleaseReason::NoManifest) => Some("released"),
            Action::Wait | Action::Held | Action::DeleteSnapshot(_) => None,
        }
    }

    /// Whether the finalizer comes off in this reconcile.
    pub fn releases_finalizer(&self) -> bool {
        match self {
            Action::Orphan(_) | Action::Release(_) => true,
            Action::Wait | Action::Held | Action::DeleteSnapshot(_) => false,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeletionPlan {
    pub row: Row,
    pub action: Action,
    /// `status.deletion` to write; `None` leaves no record (the finalizer goes at once).
    pub record: Option<DeletionRecord>,
    /// `DeletionHeld` to write, when it changes or is held.
    pub held_condition: Option<PlannedCondition>,
    pub events: Vec<PlannedEvent>,
    pub requeue_after: Option<Duration>,
    /// D9: set `catalog-scan-requested-at` on the repository (coalesced by the caller).
    pub request_catalog_scan: bool,
    /// DeleteSnapshot while the repository is not Ready: show `RepositoryNotReady` and park.
    pub parked_on_repository: bool,
}

fn decide(f: &SnapshotDeletionFacts) -> (Row, Action) {
    if f.skip {
        return (Row::D1, Action::Orphan(OrphanReason::SkipSnapshotCleanup));
    }
    match f.policy {
        DeletionPolicy::Orphan => return (Row::D2, Action::Orphan(OrphanReason::PolicyOrphan)),
        DeletionPolicy::Retain => return (Row::D3, Action::Release(ReleaseReason::PolicyRetain)),
        DeletionPolicy::Delete => {}
    }
    match f.manifest {
        Manifest::Unsettled => return (Row::D4, Action::Wait),
        Manifest::None => return (Row::D5, Action::Release(ReleaseReason::NoManifest)),
        Manifest::Known(_) => {}
    }
    match f.repo {
        RepoPresence::Gone => return (Row::D6, Action::Orphan(OrphanReason::RepositoryGone)),
        RepoPresence::Present { .. } => {}
    }
    match namespace::axis(f.ns_terminating, f.on_namespace_delete) {
        NamespaceAxis::Orphan => return (Row::D7, Action::Orphan(OrphanReason::NamespaceDeleted)),
        NamespaceAxis::NotTerminating | NamespaceAxis::Delete => {}
    }
    match f.pruned_by {
        PrunedBy::Operator(kind) => return (Row::D8, Action::DeleteSnapshot(DeleteReason::OperatorPrune(kind))),
        PrunedBy::External => {}
    }
    match cascade::guard(f.ns_terminating, &f.owner, f.on_schedule_delete) {
        CascadeGuard::Retain { schedule, state } => {
            return (Row::D9, Action::Release(ReleaseReason::CascadeRetained { schedule, state }));
        }
        CascadeGuard::PassThrough => {}
    }
    match (f.breaker.tripped, f.breaker.acked) {
        (true, false) => (Row::D10, Action::Held),
        (true, true) | (false, _) => (Row::D11, Action::DeleteSnapshot(DeleteReason::External)),
    }
}

fn was_held(previous: Option<&DeletionRecord>) -> bool {
    match previous.map(|r| &r.decision) {
        Some(DeletionDecision::Held) => true,
        Some(DeletionDecision::Delete | DeletionDecision::Unknown(_)) | None => false,
    }
}

fn was_delete(previous: Option<&DeletionRecord>) -> bool {
    match previous.map(|r| &r.decision) {
        Some(DeletionDecision::Delete) => true,
        Some(DeletionDecision::Held | DeletionDecision::Unknown(_)) | None => false,
    }
}

fn manifest_id(m: &Manifest) -> Option<&str> {
    match m {
        Manifest::Known(id) => Some(id.as_str()),
        Manifest::None | Manifest::Unsettled => None,
    }
}

/// Plan the deletion of one Snapshot. Pure: `now` only stamps `decidedAt` / `heldSince`.
pub fn plan_snapshot_deletion(f: &SnapshotDeletionFacts, now: Time) -> DeletionPlan {
    let (row, action) = decide(f);
    let manifest = manifest_id(&f.manifest);
    let mut plan = DeletionPlan {
        row,
        action: action.clone(),
        record: None,
        held_condition: None,
        events: Vec::new(),
        requeue_after: None,
        request_catalog_scan: false,
        parked_on_repository: false,
    };
    match &action {
        Action::Orphan(why) => {
            let message = match why {
                OrphanReason::SkipSnapshotCleanup => messages::orphaned_skip(manifest),
                OrphanReason::PolicyOrphan => messages::orphaned_policy(manifest),
                OrphanReason::RepositoryGone => messages::orphaned_repository_gone(manifest),
                OrphanReason::NamespaceDeleted => messages::orphaned_namespace_deleted(manifest),
            };
            plan.events.push(PlannedEvent { kind: EventType::Normal, reason: event::SNAPSHOT_ORPHANED, message });
        }
        Action::Release(ReleaseReason::CascadeRetained { schedule, state }) => {
            plan.events.push(PlannedEvent {
                kind: EventType::Warning,
                reason: event::SNAPSHOT_RETAINED_ON_SCHEDULE_DELETE,
                message: messages::retained_on_schedule_delete(schedule, *state, manifest.unwrap_or("<unknown>")),
            });
            plan.request_catalog_scan = true;
        }
        Action::Release(ReleaseReason::PolicyRetain | ReleaseReason::NoManifest) => {}
        Action::Wait => {
            plan.record = f.previous.clone();
            plan.requeue_after = Some(Duration::seconds(WAIT_REQUEUE_SECONDS));
        }
        Action::Held => held(f, now, &mut plan),
        Action::DeleteSnapshot(_) => delete(f, now, &mut plan),
    }
    plan
}

/// Held by the mass-deletion breaker: the Held record (its first decision and hold kept),
/// `DeletionHeld=True`, and one Warning Event when the hold starts.
fn held(f: &SnapshotDeletionFacts, now: Time, plan: &mut DeletionPlan) {
    let previous = f.previous.as_ref();
    let (decided_at, held_since) = match (was_held(previous), previous) {
        (true, Some(p)) => (p.decided_at.or(Some(now)), p.held_since.or(Some(now))),
        (true, None) | (false, _) => (Some(now), Some(now)),
    };
    plan.record = Some(DeletionRecord { decision: DeletionDecision::Held, decided_at, held_since });
    let message = f.breaker.held_message.clone().unwrap_or_else(|| {
        format!(
            "deletion held by the mass-deletion breaker: external deletions pending reached the threshold {}",
            f.breaker.threshold
        )
    });
    plan.held_condition = Some(PlannedCondition {
        type_: condition::DELETION_HELD,
        status: true,
        reason: reason::MASS_DELETION_BREAKER,
        message: message.clone(),
    });
    if !was_held(previous) {
        plan.events.push(PlannedEvent { kind: EventType::Warning, reason: event::SNAPSHOT_DELETION_HELD, message });
    }
}

/// Deleted: the Delete record (its first decision kept), `DeletionHeld=False` once a hold ends,
/// and whether the delete waits for the repository.
fn delete(f: &SnapshotDeletionFacts, now: Time, plan: &mut DeletionPlan) {
    let previous = f.previous.as_ref();
    let decided_at = match (was_delete(previous), previous) {
        (true, Some(p)) => p.decided_at.or(Some(now)),
        (true, None) | (false, _) => Some(now),
    };
    plan.record = Some(DeletionRecord { decision: DeletionDecision::Delete, decided_at, held_since: None });
    if was_held(previous) {
        let (reason, message) = match f.breaker.ack_effective.filter(|_| f.breaker.acked) {
            Some(e) => (reason::ACKNOWLEDGED, messages::snapshot_acknowledged(e)),
            None => (
                reason::BELOW_THRESHOLD,
                messages::snapshot_below_threshold(f.breaker.pending_external, f.breaker.threshold),
            ),
        };
        plan.held_condition =
            Some(PlannedCondition { type_: condition::DELETION_HELD, status: false, reason, message });
    }
    plan.parked_on_repository = match f.repo {
        RepoPresence::Present { ready } => !ready,
        // Unreachable after D6; parked is the cautious reading.
        RepoPresence::Gone => true,
    };
}

#[cfg(test)]
mod tests;
