use chrono::{TimeZone, Utc};

use super::*;
use crate::deletion::breaker::MemberBreaker;

fn now() -> Time {
    Utc.with_ymd_and_hms(2026, 7, 17, 10, 5, 0).unwrap()
}

fn ts() -> Time {
    Utc.with_ymd_and_hms(2026, 7, 17, 10, 0, 0).unwrap()
}

/// Delete + external + schedule alive + not tripped: the ordinary manual deletion.
fn base() -> SnapshotDeletionFacts {
    SnapshotDeletionFacts {
        deletion_timestamp: ts(),
        skip: false,
        policy: DeletionPolicy::Delete,
        manifest: Manifest::Known("0123456789abcdef0123456789abcdef".into()),
        pruned_by: PrunedBy::External,
        repo: RepoPresence::Present { ready: true },
        ns_terminating: false,
        on_namespace_delete: OnNamespaceDelete::Orphan,
        owner: Owner::Schedule { name: "s".into(), state: ScheduleState::Alive },
        on_schedule_delete: OnScheduleDelete::Retain,
        breaker: MemberBreaker::quiet(),
        previous: None,
    }
}

fn tripped() -> MemberBreaker {
    MemberBreaker {
        tripped: true,
        acked: false,
        threshold: 10,
        pending_external: 25,
        ack_effective: None,
        held_message: Some("held; run: kubectl annotate ...".into()),
    }
}

fn row(f: &SnapshotDeletionFacts) -> Row {
    plan_snapshot_deletion(f, now()).row
}

// --- The golden cases of docs/design/mass-deletion.md §5.4 -------------------------------------------------------

#[test]
fn golden_external_delete_with_live_schedule_deletes() {
    let p = plan_snapshot_deletion(&base(), now());
    assert_eq!(p.row, Row::D11);
    assert_eq!(p.action, Action::DeleteSnapshot(DeleteReason::External));
    assert_eq!(p.record.unwrap().decision, DeletionDecision::Delete);
    assert!(p.events.is_empty());
}

#[test]
fn golden_schedule_gone_replaced_terminating_is_cascade_retained() {
    for state in [ScheduleState::Gone, ScheduleState::Replaced, ScheduleState::Terminating] {
        let mut f = base();
        f.owner = Owner::Schedule { name: "s".into(), state };
        let p = plan_snapshot_deletion(&f, now());
        assert_eq!(p.row, Row::D9);
        assert_eq!(p.action, Action::Release(ReleaseReason::CascadeRetained { schedule: "s".into(), state }));
        assert_eq!(p.action.release_outcome(), Some("cascade_retained"));
        assert!(p.request_catalog_scan);
        assert_eq!(p.events.len(), 1);
        assert_eq!(p.events[0].reason, "SnapshotRetainedOnScheduleDelete");
        assert_eq!(p.events[0].kind, EventType::Warning);
        assert!(p.events[0].message.contains(state.as_str()));
        assert!(p.record.is_none());
    }
}

#[test]
fn golden_cascade_opt_in_tripped_not_acked_is_held() {
    let mut f = base();
    f.owner = Owner::Schedule { name: "s".into(), state: ScheduleState::Gone };
    f.on_schedule_delete = OnScheduleDelete::Delete;
    f.breaker = tripped();
    let p = plan_snapshot_deletion(&f, now());
    assert_eq!(p.row, Row::D10);
    assert_eq!(p.action, Action::Held);
    let rec = p.record.unwrap();
    assert_eq!((rec.decision, rec.held_since), (DeletionDecision::Held, Some(now())));
    let c = p.held_condition.unwrap();
    assert_eq!((c.type_, c.status, c.reason), ("DeletionHeld", true, "MassDeletionBreaker"));
    assert_eq!(p.events.len(), 1);
    assert_eq!(p.events[0].reason, "SnapshotDeletionHeld");
}

#[test]
fn golden_retention_prune_while_tripped_deletes() {
    let mut f = base();
    f.pruned_by = PrunedBy::Operator(PruneKind::Retention);
    f.breaker = tripped();
    assert_eq!(
        plan_snapshot_deletion(&f, now()).action,
        Action::DeleteSnapshot(DeleteReason::OperatorPrune(PruneKind::Retention))
    );
}

#[test]
fn golden_namespace_terminating_under_orphan_orphans() {
    let mut f = base();
    f.ns_terminating = true;
    f.breaker = tripped();
    let p = plan_snapshot_deletion(&f, now());
    assert_eq!(p.row, Row::D7);
    assert_eq!(p.action, Action::Orphan(OrphanReason::NamespaceDeleted));
    assert!(p.events[0].message.starts_with("NamespaceDeleted"));
}

#[test]
fn golden_namespace_terminating_under_delete_tripped_not_acked_is_held() {
    let mut f = base();
    f.ns_terminating = true;
    f.on_namespace_delete = OnNamespaceDelete::Delete;
    // The schedule dies with the namespace; the schedule axis is not consulted.
    f.owner = Owner::Schedule { name: "s".into(), state: ScheduleState::Terminating };
    f.breaker = tripped();
    assert_eq!(row(&f), Row::D10);
    f.breaker.acked = true;
    assert_eq!(row(&f), Row::D11);
}

#[test]
fn golden_skip_overrides_tripped() {
    let mut f = base();
    f.skip = true;
    f.breaker = tripped();
    let p = plan_snapshot_deletion(&f, now());
    assert_eq!(p.action, Action::Orphan(OrphanReason::SkipSnapshotCleanup));
    assert!(p.events[0].message.starts_with("SkipSnapshotCleanup"));
}

#[test]
fn golden_retain_tripped_releases() {
    let mut f = base();
    f.policy = DeletionPolicy::Retain;
    f.breaker = tripped();
    assert_eq!(plan_snapshot_deletion(&f, now()).action, Action::Release(ReleaseReason::PolicyRetain));
}

#[test]
fn golden_failed_without_manifest_releases() {
    let mut f = base();
    f.manifest = Manifest::None;
    assert_eq!(plan_snapshot_deletion(&f, now()).action, Action::Release(ReleaseReason::NoManifest));
}

// --- One test per row ---------------------------------------------------------------------

#[test]
fn row_d1_skip() {
    let mut f = base();
    f.skip = true;
    f.repo = RepoPresence::Gone;
    assert_eq!(row(&f), Row::D1);
}

#[test]
fn row_d2_policy_orphan() {
    let mut f = base();
    f.policy = DeletionPolicy::Orphan;
    let p = plan_snapshot_deletion(&f, now());
    assert_eq!((p.row, p.action.release_outcome()), (Row::D2, Some("orphaned")));
    assert_eq!(p.events[0].reason, "SnapshotOrphaned");
}

#[test]
fn row_d3_policy_retain() {
    let mut f = base();
    f.policy = DeletionPolicy::Retain;
    let p = plan_snapshot_deletion(&f, now());
    assert_eq!((p.row, p.action.release_outcome()), (Row::D3, Some("released")));
    assert!(p.events.is_empty());
}

#[test]
fn row_d4_unsettled_waits_five_seconds() {
    let mut f = base();
    f.manifest = Manifest::Unsettled;
    let p = plan_snapshot_deletion(&f, now());
    assert_eq!((p.row, &p.action), (Row::D4, &Action::Wait));
    assert_eq!(p.requeue_after, Some(Duration::seconds(5)));
    assert!(!p.action.releases_finalizer());
}

#[test]
fn row_d5_no_manifest() {
    let mut f = base();
    f.manifest = Manifest::None;
    f.breaker = tripped();
    assert_eq!(row(&f), Row::D5);
}

#[test]
fn row_d6_repository_gone() {
    let mut f = base();
    f.repo = RepoPresence::Gone;
    let p = plan_snapshot_deletion(&f, now());
    assert_eq!((p.row, &p.action), (Row::D6, &Action::Orphan(OrphanReason::RepositoryGone)));
    assert!(p.events[0].message.starts_with("RepositoryGone"));
}

#[test]
fn row_d7_namespace_orphan_beats_operator_prune() {
    let mut f = base();
    f.ns_terminating = true;
    f.pruned_by = PrunedBy::Operator(PruneKind::FailedHistory);
    assert_eq!(row(&f), Row::D7);
}

#[test]
fn row_d8_operator_prune_is_never_held_nor_cascade_retained() {
    for kind in PruneKind::ALL {
        let mut f = base();
        f.pruned_by = PrunedBy::Operator(kind);
        f.owner = Owner::Schedule { name: "s".into(), state: ScheduleState::Gone };
        f.breaker = tripped();
        assert_eq!(row(&f), Row::D8);
    }
}

#[test]
fn row_d9_cascade_retain() {
    let mut f = base();
    f.owner = Owner::Schedule { name: "s".into(), state: ScheduleState::Replaced };
    f.breaker = tripped();
    assert_eq!(row(&f), Row::D9);
}

#[test]
fn row_d10_held_keeps_held_since_and_emits_the_event_once() {
    let mut f = base();
    f.breaker = tripped();
    let first = plan_snapshot_deletion(&f, now());
    assert_eq!(first.events.len(), 1);
    f.previous = first.record.clone();
    let later = now() + Duration::minutes(30);
    let again = plan_snapshot_deletion(&f, later);
    assert_eq!(again.row, Row::D10);
    assert!(again.events.is_empty(), "the Event fires on the transition into held only");
    assert_eq!(again.record.unwrap().held_since, Some(now()));
    assert!(again.requeue_after.is_none(), "no timer: nothing auto-releases a hold");
}

#[test]
fn row_d11_leaving_held_by_ack_or_by_count() {
    let mut f = base();
    f.previous =
        Some(DeletionRecord { decision: DeletionDecision::Held, decided_at: Some(ts()), held_since: Some(ts()) });
    f.breaker = tripped();
    f.breaker.acked = true;
    f.breaker.ack_effective = Some(ts());
    let p = plan_snapshot_deletion(&f, now());
    assert_eq!(p.row, Row::D11);
    let c = p.held_condition.unwrap();
    assert_eq!((c.status, c.reason), (false, "Acknowledged"));
    assert_eq!(p.record.unwrap().decided_at, Some(now()));

    f.breaker = MemberBreaker { pending_external: 3, ..MemberBreaker::quiet() };
    let c = plan_snapshot_deletion(&f, now()).held_condition.unwrap();
    assert_eq!((c.status, c.reason), (false, "BelowThreshold"));
}

#[test]
fn delete_decision_keeps_its_first_timestamp_and_parks_when_not_ready() {
    let mut f = base();
    f.repo = RepoPresence::Present { ready: false };
    let first = plan_snapshot_deletion(&f, now());
    assert!(first.parked_on_repository);
    f.previous = first.record;
    let again = plan_snapshot_deletion(&f, now() + Duration::minutes(5));
    assert_eq!(again.record.unwrap().decided_at, Some(now()));
    assert!(again.held_condition.is_none());
}

// --- Every fact combination against the literal table ------------------------------------

/// The table of docs/design/mass-deletion.md §5.4 written as a list of predicates; the first true one is the row.
fn oracle(f: &SnapshotDeletionFacts) -> Row {
    let owner_not_alive = matches!(
        &f.owner,
        Owner::Schedule { state: ScheduleState::Gone | ScheduleState::Replaced | ScheduleState::Terminating, .. }
    );
    let rows: [(Row, bool); 10] = [
        (Row::D1, f.skip),
        (Row::D2, f.policy == DeletionPolicy::Orphan),
        (Row::D3, f.policy == DeletionPolicy::Retain),
        (Row::D4, f.manifest == Manifest::Unsettled),
        (Row::D5, f.manifest == Manifest::None),
        (Row::D6, f.repo == RepoPresence::Gone),
        (Row::D7, f.ns_terminating && f.on_namespace_delete == OnNamespaceDelete::Orphan),
        (Row::D8, matches!(f.pruned_by, PrunedBy::Operator(_))),
        (Row::D9, !f.ns_terminating && owner_not_alive && f.on_schedule_delete == OnScheduleDelete::Retain),
        (Row::D10, f.breaker.tripped && !f.breaker.acked),
    ];
    rows.iter().find(|(_, hit)| *hit).map_or(Row::D11, |(r, _)| *r)
}

#[test]
fn every_fact_combination_matches_the_table() {
    let owners = [
        Owner::NotScheduleOwned,
        Owner::Schedule { name: "s".into(), state: ScheduleState::Alive },
        Owner::Schedule { name: "s".into(), state: ScheduleState::Gone },
        Owner::Schedule { name: "s".into(), state: ScheduleState::Replaced },
        Owner::Schedule { name: "s".into(), state: ScheduleState::Terminating },
    ];
    let pruned = [
        PrunedBy::External,
        PrunedBy::Operator(PruneKind::Retention),
        PrunedBy::Operator(PruneKind::FailedHistory),
        PrunedBy::Operator(PruneKind::ReplacedRun),
    ];
    let previous = [
        None,
        Some(DeletionRecord { decision: DeletionDecision::Held, decided_at: Some(ts()), held_since: Some(ts()) }),
        Some(DeletionRecord { decision: DeletionDecision::Delete, decided_at: Some(ts()), held_since: None }),
    ];
    let mut seen = std::collections::BTreeSet::new();
    let mut n = 0;
    for skip in [false, true] {
        for policy in [DeletionPolicy::Delete, DeletionPolicy::Retain, DeletionPolicy::Orphan] {
            for manifest in [Manifest::Known("id".into()), Manifest::None, Manifest::Unsettled] {
                for repo in
                    [RepoPresence::Present { ready: true }, RepoPresence::Present { ready: false }, RepoPresence::Gone]
                {
                    for ns_terminating in [false, true] {
                        for on_namespace_delete in [OnNamespaceDelete::Orphan, OnNamespaceDelete::Delete] {
                            for pruned_by in pruned {
                                for owner in &owners {
                                    for on_schedule_delete in [OnScheduleDelete::Retain, OnScheduleDelete::Delete] {
                                        for (tripped, acked) in
                                            [(false, false), (false, true), (true, false), (true, true)]
                                        {
                                            for prev in &previous {
                                                let f = SnapshotDeletionFacts {
                                                    deletion_timestamp: ts(),
                                                    skip,
                                                    policy,
                                                    manifest: manifest.clone(),
                                                    pruned_by,
                                                    repo,
                                                    ns_terminating,
                                                    on_namespace_delete,
                                                    owner: owner.clone(),
                                                    on_schedule_delete,
                                                    breaker: MemberBreaker { tripped, acked, ..tripped_view() },
                                                    previous: prev.clone(),
                                                };
                                                let p = plan_snapshot_deletion(&f, now());
                                                assert_eq!(p.row, oracle(&f), "{f:?}");
                                                check_side_effects(&f, &p);
                                                seen.insert(p.row);
                                                n += 1;
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert_eq!(n, 2 * 3 * 3 * 3 * 2 * 2 * 4 * 5 * 2 * 4 * 3);
    assert_eq!(seen.len(), 11, "every row is reachable");
}

fn tripped_view() -> MemberBreaker {
    MemberBreaker { ack_effective: Some(ts()), ..tripped() }
}

fn check_side_effects(f: &SnapshotDeletionFacts, p: &DeletionPlan) {
    // Only D10 holds, and only DeleteSnapshot/Held keep a record besides Wait.
    assert_eq!(p.action == Action::Held, p.row == Row::D10);
    match &p.action {
        Action::Orphan(_) | Action::Release(_) => assert!(p.record.is_none()),
        Action::Wait => assert_eq!(p.record, f.previous),
        Action::Held | Action::DeleteSnapshot(_) => assert!(p.record.is_some()),
    }
    // The held Event fires exactly on the transition into held.
    let held_events = p.events.iter().filter(|e| e.reason == "SnapshotDeletionHeld").count();
    let was_held = f.previous.as_ref().is_some_and(|r| r.decision == DeletionDecision::Held);
    assert_eq!(held_events, usize::from(p.row == Row::D10 && !was_held));
    // Leaving held through D8/D11 writes DeletionHeld=False.
    if was_held && matches!(p.action, Action::DeleteSnapshot(_)) {
        assert!(p.held_condition.as_ref().is_some_and(|c| !c.status));
    }
    // A held member or an un-acked external tripped member never becomes a delete.
    if f.breaker.tripped && !f.breaker.acked && f.pruned_by == PrunedBy::External && !f.skip {
        assert!(!matches!(p.action, Action::DeleteSnapshot(_)));
    }
}
