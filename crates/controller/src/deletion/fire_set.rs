//! The fire set F(R): the members a batch Job for repository R may delete right now. Counting
//! is inclusive, firing is exclusive: every member here is a real, irreversible kopia delete,
//! so anything doubtful is left out and drains later through its own reconcile or once the
//! excluding condition clears. When in doubt, fire less and requeue; never delete.
use std::collections::BTreeSet;

use super::breaker::BreakerState;
use super::cascade::ScheduleState;
use super::namespace::{self, NamespaceAxis};
use super::pruned_by::PrunedBy;
use super::types::{Binding, Manifest, Time};
use kopiur_api::repository::OnNamespaceDelete;
use kopiur_api::snapshot::DeletionDecision;
use kopiur_api::snapshot::OnScheduleDelete;
use kopiur_api::snapshot_policy::DeletionPolicy;

/// What the SnapshotSchedule store says about a member's producing schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScheduleLink {
    NotScheduleOwned,
    /// The store has not synced since start: it would report "alive" for a deleted schedule.
    OwnedStoreCold,
    OwnedStoreWarm(ScheduleState),
}

/// One deleting Snapshot as the dispatcher sees it, from the stores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FireCandidate {
    pub uid: String,
    pub deletion_timestamp: Time,
    pub finalizer_present: bool,
    pub manifest: Manifest,
    /// `status.deletion.decision`, persisted by the member's own reconcile with live facts.
    pub decision: Option<DeletionDecision>,
    pub binding: Binding,
    pub pruned_by: PrunedBy,
    pub skip: bool,
    pub policy: DeletionPolicy,
    pub ns_terminating: bool,
    pub schedule: ScheduleLink,
    pub on_schedule_delete: OnScheduleDelete,
    /// ClusterRepository tenancy of the member's namespace (always true for a namespaced
    /// Repository). The repository's own dispatcher is not a consumer; each member is.
    pub namespace_allowed: bool,
    /// `user@host:path` the controller recorded for it (`status.resolved.identity`); the batch
    /// mover deletes the manifest only if it is a snapshot of this source.
    pub source: String,
    /// A batch already refused its manifest (`DeletionRefused=True`): never batched again
    /// until a human decides.
    pub refused: bool,
}

/// Repository-wide facts for one selection.
#[derive(Clone, Copy, Debug)]
pub struct FireContext<'a> {
    pub repo_uid: &'a str,
    pub repo_ready: bool,
    pub on_namespace_delete: OnNamespaceDelete,
    /// The breaker computed in the same pass, from the same store snapshot.
    pub breaker: &'a BreakerState,
    /// Member uids listed by any unreaped batch Job (the `delete-members` annotation).
    pub in_flight: &'a BTreeSet<String>,
}

/// Why a candidate is not in the fire set (the first reason that applies).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Exclusion {
    /// Pinned to another repository: not R's business at all.
    OtherRepository,
    /// (d) Unpinned: the count matches it to every repository it could resolve to, but its id
    /// must never ride another repository's batch. It self-fires after pinning.
    UnpinnedPeer,
    FinalizerGone,
    /// No persisted Delete decision yet (undecided, or Held): its own reconcile decides first.
    NotDecidedDelete,
    /// The escape hatch was set after the decision: its own reconcile orphans it.
    SkipCleanup,
    /// The policy was switched away from Delete after the decision.
    NotDestructive,
    ManifestNotKnown,
    /// A batch found that the manifest is not this Snapshot's and kept it.
    Refused,
    /// Already listed by an unreaped batch Job.
    InFlight,
    /// (a) Breaker-held: R is tripped and this external member is not acknowledged.
    Held,
    /// (b) Its namespace is terminating under `onNamespaceDelete: Orphan`.
    NamespaceOrphan,
    /// (c) Schedule-owned while the schedule store is cold.
    ScheduleStoreCold,
    /// The store shows its schedule gone, replaced or terminating under Retain: its own
    /// reconcile will cascade-retain it.
    ScheduleCascade,
    /// Its namespace is not (or no longer) in the ClusterRepository's `allowedNamespaces`:
    /// the kopia snapshot is kept and the member parks `NamespaceNotAllowed` until the
    /// namespace is allowed again (never a delete on a guess).
    NamespaceNotAllowed,
    RepositoryNotReady,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FireMember {
    pub uid: String,
    pub snapshot_id: String,
    /// The recorded source the mover verifies the manifest against.
    pub source: String,
    pub deletion_timestamp: Time,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FireSet {
    /// Sorted by (deletionTimestamp, uid): the oldest go first.
    pub members: Vec<FireMember>,
    pub excluded: Vec<(String, Exclusion)>,
}

impl FireSet {
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn newest(&self) -> Option<Time> {
        self.members.iter().map(|m| m.deletion_timestamp).max()
    }
}

/// The first exclusion that applies to `c`, or its manifest id if it may fire.
pub fn classify(ctx: &FireContext<'_>, c: &FireCandidate) -> Result<String, Exclusion> {
    match &c.binding {
        Binding::Pinned { repo_uid } if repo_uid != ctx.repo_uid => return Err(Exclusion::OtherRepository),
        Binding::Unpinned { .. } => return Err(Exclusion::UnpinnedPeer),
        Binding::Pinned { .. } => {}
    }
    if !c.finalizer_present {
        return Err(Exclusion::FinalizerGone);
    }
    match &c.decision {
        Some(DeletionDecision::Delete) => {}
        Some(DeletionDecision::Held | DeletionDecision::Unknown(_)) | None => return Err(Exclusion::NotDecidedDelete),
    }
    if c.skip {
        return Err(Exclusion::SkipCleanup);
    }
    match c.policy {
        DeletionPolicy::Delete => {}
        DeletionPolicy::Retain | DeletionPolicy::Orphan => return Err(Exclusion::NotDestructive),
    }
    let id = match &c.manifest {
        Manifest::Known(id) => id.clone(),
        Manifest::None | Manifest::Unsettled => return Err(Exclusion::ManifestNotKnown),
    };
    if c.refused {
        return Err(Exclusion::Refused);
    }
    if ctx.in_flight.contains(&c.uid) {
        return Err(Exclusion::InFlight);
    }
    let external = c.pruned_by.is_external();
    if ctx.breaker.tripped() && external && !ctx.breaker.is_acked(c.deletion_timestamp) {
        return Err(Exclusion::Held);
    }
    match namespace::axis(c.ns_terminating, ctx.on_namespace_delete) {
        NamespaceAxis::Orphan => return Err(Exclusion::NamespaceOrphan),
        NamespaceAxis::NotTerminating | NamespaceAxis::Delete => {}
    }
    match (c.schedule, c.ns_terminating, external, c.on_schedule_delete) {
        (ScheduleLink::OwnedStoreCold, _, _, _) => return Err(Exclusion::ScheduleStoreCold),
        (
            ScheduleLink::OwnedStoreWarm(ScheduleState::Gone | ScheduleState::Replaced | ScheduleState::Terminating),
            false,
            true,
            OnScheduleDelete::Retain,
        ) => return Err(Exclusion::ScheduleCascade),
        (ScheduleLink::OwnedStoreWarm(_), _, _, _) | (ScheduleLink::NotScheduleOwned, _, _, _) => {}
    }
    if !c.namespace_allowed {
        return Err(Exclusion::NamespaceNotAllowed);
    }
    if !ctx.repo_ready {
        return Err(Exclusion::RepositoryNotReady);
    }
    Ok(id)
}

/// Compute F(R).
pub fn select(ctx: &FireContext<'_>, candidates: &[FireCandidate]) -> FireSet {
    let mut set = FireSet::default();
    for c in candidates {
        match classify(ctx, c) {
            Ok(snapshot_id) => set.members.push(FireMember {
                uid: c.uid.clone(),
                snapshot_id,
                source: c.source.clone(),
                deletion_timestamp: c.deletion_timestamp,
            }),
            Err(why) => set.excluded.push((c.uid.clone(), why)),
        }
    }
    set.members.sort_by(|a, b| (a.deletion_timestamp, &a.uid).cmp(&(b.deletion_timestamp, &b.uid)));
    set.members.dedup_by(|a, b| a.uid == b.uid);
    set
}

#[cfg(test)]
mod tests {
    use chrono::{Duration, TimeZone, Utc};

    use super::super::breaker::{PendingDeletion, RepoDeletionFacts, evaluate};
    use super::super::pruned_by::PruneKind;
    use super::super::types::RepoRef;
    use super::*;

    fn t(secs: i64) -> Time {
        Utc.with_ymd_and_hms(2026, 7, 17, 10, 0, 0).unwrap() + Duration::seconds(secs)
    }

    fn cand(uid: &str, ts: i64) -> FireCandidate {
        FireCandidate {
            uid: uid.into(),
            deletion_timestamp: t(ts),
            finalizer_present: true,
            manifest: Manifest::Known(format!("id-{uid}")),
            decision: Some(DeletionDecision::Delete),
            binding: Binding::Pinned { repo_uid: "r1".into() },
            pruned_by: PrunedBy::External,
            skip: false,
            policy: DeletionPolicy::Delete,
            ns_terminating: false,
            schedule: ScheduleLink::NotScheduleOwned,
            on_schedule_delete: OnScheduleDelete::Retain,
            namespace_allowed: true,
            source: format!("app@t:/pvc/{uid}"),
            refused: false,
        }
    }

    fn breaker(externals: usize, ack: Option<&str>) -> BreakerState {
        let deletions = (0..externals)
            .map(|i| PendingDeletion {
                uid: format!("w{i}"),
                deletion_timestamp: t(i as i64),
                finalizer_present: true,
                policy: DeletionPolicy::Delete,
                skip: false,
                pruned_by: PrunedBy::External,
                binding: Binding::Pinned { repo_uid: "r1".into() },
                held: true,
            })
            .collect();
        evaluate(
            &RepoDeletionFacts {
                repo: RepoRef::repository("t", "r", "r1"),
                threshold: 10,
                ack_annotation: ack.map(str::to_string),
                ack_recorded: None,
                held_condition_was_true: false,
                deletions,
            },
            t(1000),
        )
    }

    fn ctx<'a>(b: &'a BreakerState, in_flight: &'a BTreeSet<String>) -> FireContext<'a> {
        FireContext {
            repo_uid: "r1",
            repo_ready: true,
            on_namespace_delete: OnNamespaceDelete::Orphan,
            breaker: b,
            in_flight,
        }
    }

    #[test]
    fn ordinary_members_fire_oldest_first() {
        let b = breaker(0, None);
        let none = BTreeSet::new();
        let f = select(&ctx(&b, &none), &[cand("b", 5), cand("a", 5), cand("c", 1)]);
        let uids: Vec<_> = f.members.iter().map(|m| m.uid.as_str()).collect();
        assert_eq!(uids, ["c", "a", "b"]);
        assert!(f.excluded.is_empty());
        // Each member carries its recorded source, which the batch mover verifies against.
        assert!(f.members.iter().all(|m| m.source == format!("app@t:/pvc/{}", m.uid)));
    }

    #[test]
    fn a_held_wave_is_never_drained_by_a_prune() {
        let b = breaker(12, None);
        assert!(b.tripped());
        let none = BTreeSet::new();
        let mut prune = cand("prune", 2000);
        prune.pruned_by = PrunedBy::Operator(PruneKind::Retention);
        let held = cand("w3", 3);
        let f = select(&ctx(&b, &none), &[prune, held]);
        assert_eq!(f.members.len(), 1);
        assert_eq!(f.members[0].uid, "prune");
        assert_eq!(f.excluded, vec![("w3".to_string(), Exclusion::Held)]);
    }

    #[test]
    fn acked_older_members_fire_while_a_newer_wave_is_held() {
        // Twelve members at t0..t11 acked at t5: t6..t11 plus new arrivals stay counted.
        let mut b = breaker(12, Some("2026-07-17T10:00:05Z"));
        assert_eq!(b.pending_external, 6);
        // Force tripped to model a newer wave pushing the count back over.
        b.mode = super::super::breaker::BreakerMode::Tripped;
        let none = BTreeSet::new();
        let f = select(&ctx(&b, &none), &[cand("old", 5), cand("new", 6)]);
        assert_eq!(f.members.iter().map(|m| m.uid.as_str()).collect::<Vec<_>>(), ["old"]);
        assert_eq!(f.excluded, vec![("new".to_string(), Exclusion::Held)]);
    }

    #[test]
    fn each_exclusion() {
        let b = breaker(0, None);
        let in_flight: BTreeSet<String> = ["flying".to_string()].into();
        let c = ctx(&b, &in_flight);
        let mut cases: Vec<(FireCandidate, Exclusion)> = vec![];
        let mut x = cand("x1", 0);
        x.binding = Binding::Pinned { repo_uid: "r2".into() };
        cases.push((x, Exclusion::OtherRepository));
        let mut x = cand("x2", 0);
        x.binding = Binding::Unpinned { resolves: vec!["r1".into()] };
        cases.push((x, Exclusion::UnpinnedPeer));
        let mut x = cand("x3", 0);
        x.finalizer_present = false;
        cases.push((x, Exclusion::FinalizerGone));
        let mut x = cand("x4", 0);
        x.decision = Some(DeletionDecision::Held);
        cases.push((x, Exclusion::NotDecidedDelete));
        let mut x = cand("x5", 0);
        x.decision = None;
        cases.push((x, Exclusion::NotDecidedDelete));
        let mut x = cand("x6", 0);
        x.skip = true;
        cases.push((x, Exclusion::SkipCleanup));
        let mut x = cand("x7", 0);
        x.policy = DeletionPolicy::Retain;
        cases.push((x, Exclusion::NotDestructive));
        let mut x = cand("x8", 0);
        x.manifest = Manifest::Unsettled;
        cases.push((x, Exclusion::ManifestNotKnown));
        let mut x = cand("x8r", 0);
        x.refused = true;
        cases.push((x, Exclusion::Refused));
        cases.push((cand("flying", 0), Exclusion::InFlight));
        let mut x = cand("x9", 0);
        x.ns_terminating = true;
        cases.push((x, Exclusion::NamespaceOrphan));
        let mut x = cand("x10", 0);
        x.schedule = ScheduleLink::OwnedStoreCold;
        x.pruned_by = PrunedBy::Operator(PruneKind::FailedHistory);
        cases.push((x, Exclusion::ScheduleStoreCold));
        let mut x = cand("x11", 0);
        x.schedule = ScheduleLink::OwnedStoreWarm(ScheduleState::Replaced);
        cases.push((x, Exclusion::ScheduleCascade));
        let mut x = cand("x12", 0);
        x.namespace_allowed = false;
        x.pruned_by = PrunedBy::Operator(PruneKind::Retention);
        cases.push((x, Exclusion::NamespaceNotAllowed));
        for (cand, want) in &cases {
            assert_eq!(classify(&c, cand), Err(*want), "{}", cand.uid);
        }
        // Opted-in cascades, operator prunes and alive schedules pass the schedule check.
        let mut x = cand("ok1", 0);
        x.schedule = ScheduleLink::OwnedStoreWarm(ScheduleState::Gone);
        x.on_schedule_delete = OnScheduleDelete::Delete;
        assert!(classify(&c, &x).is_ok());
        let mut x = cand("ok2", 0);
        x.schedule = ScheduleLink::OwnedStoreWarm(ScheduleState::Gone);
        x.pruned_by = PrunedBy::Operator(PruneKind::FailedHistory);
        assert!(classify(&c, &x).is_ok());
        // Namespace teardown under Delete fires (once approved or below threshold).
        let mut x = cand("ok3", 0);
        x.ns_terminating = true;
        let del = FireContext { on_namespace_delete: OnNamespaceDelete::Delete, ..c };
        assert!(classify(&del, &x).is_ok());
        // Not Ready parks everything.
        let parked = FireContext { repo_ready: false, ..c };
        assert_eq!(classify(&parked, &cand("p", 0)), Err(Exclusion::RepositoryNotReady));
    }

    /// A ClusterRepository's dispatcher fires the members of allowed namespaces and keeps the
    /// rest (the data stays; those members park until their namespace is allowed again), in
    /// one selection: tenancy is per member, never a verdict on the whole repository.
    #[test]
    fn tenancy_is_per_member() {
        let b = breaker(0, None);
        let none = BTreeSet::new();
        let mut outsider = cand("outsider", 1);
        outsider.namespace_allowed = false;
        let f = select(&ctx(&b, &none), &[cand("tenant-a", 2), outsider, cand("tenant-b", 3)]);
        let uids: Vec<_> = f.members.iter().map(|m| m.uid.as_str()).collect();
        assert_eq!(uids, ["tenant-a", "tenant-b"]);
        assert_eq!(f.excluded, vec![("outsider".to_string(), Exclusion::NamespaceNotAllowed)]);
    }
}
