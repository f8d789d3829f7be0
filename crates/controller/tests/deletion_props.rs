//! Property tests over random mixes of pruned, external, held, acked, unpinned, skipped,
//! namespace-orphaned and schedule-owned deletions: the invariants ADR-0006 rests on.
use std::collections::BTreeSet;

use chrono::{Duration, TimeZone, Utc};
use kopiur_api::repository::OnNamespaceDelete;
use kopiur_api::snapshot::DeletionRecord;
use kopiur_api::snapshot::{DeletionDecision, OnScheduleDelete};
use kopiur_api::snapshot_policy::DeletionPolicy;
use kopiur_controller::deletion::batch::{self, batch_name};
use kopiur_controller::deletion::breaker::counts;
use kopiur_controller::deletion::*;
use proptest::prelude::*;

const REPO: &str = "r1";

fn t(secs: i64) -> Time {
    Utc.with_ymd_and_hms(2026, 7, 17, 10, 0, 0).unwrap() + Duration::seconds(secs)
}

#[derive(Clone, Debug)]
struct M {
    uid: String,
    ts: i64,
    finalizer: bool,
    policy: DeletionPolicy,
    skip: bool,
    pruned_by: PrunedBy,
    binding: Binding,
    ns_terminating: bool,
    schedule: ScheduleLink,
    on_schedule_delete: OnScheduleDelete,
    manifest: Manifest,
    decision: Option<DeletionDecision>,
}

fn arb_pruned() -> impl Strategy<Value = PrunedBy> {
    prop_oneof![
        4 => Just(PrunedBy::External),
        1 => Just(PrunedBy::Operator(PruneKind::Retention)),
        1 => Just(PrunedBy::Operator(PruneKind::FailedHistory)),
        1 => Just(PrunedBy::Operator(PruneKind::ReplacedRun)),
    ]
}

fn arb_binding() -> impl Strategy<Value = Binding> {
    prop_oneof![
        6 => Just(Binding::Pinned { repo_uid: REPO.into() }),
        1 => Just(Binding::Pinned { repo_uid: "r2".into() }),
        1 => Just(Binding::Unpinned { resolves: vec![REPO.into()] }),
        1 => Just(Binding::Unpinned { resolves: vec![REPO.into(), "r2".into()] }),
        1 => Just(Binding::Unpinned { resolves: vec!["r2".into()] }),
    ]
}

fn arb_schedule() -> impl Strategy<Value = ScheduleLink> {
    prop_oneof![
        3 => Just(ScheduleLink::NotScheduleOwned),
        1 => Just(ScheduleLink::OwnedStoreCold),
        1 => Just(ScheduleLink::OwnedStoreWarm(ScheduleState::Alive)),
        1 => Just(ScheduleLink::OwnedStoreWarm(ScheduleState::Gone)),
        1 => Just(ScheduleLink::OwnedStoreWarm(ScheduleState::Replaced)),
        1 => Just(ScheduleLink::OwnedStoreWarm(ScheduleState::Terminating)),
    ]
}

fn arb_member(i: usize) -> impl Strategy<Value = M> {
    (
        0i64..600,
        prop::bool::weighted(0.95),
        prop_oneof![6 => Just(DeletionPolicy::Delete), 1 => Just(DeletionPolicy::Retain), 1 => Just(DeletionPolicy::Orphan)],
        prop::bool::weighted(0.05),
        arb_pruned(),
        arb_binding(),
        prop::bool::weighted(0.15),
        arb_schedule(),
        prop_oneof![Just(OnScheduleDelete::Retain), Just(OnScheduleDelete::Delete)],
        prop_oneof![8 => Just(Manifest::Known(format!("{i:032x}"))), 1 => Just(Manifest::None), 1 => Just(Manifest::Unsettled)],
        prop_oneof![Just(None), Just(Some(DeletionDecision::Held)), Just(Some(DeletionDecision::Delete))],
    )
        .prop_map(move |(ts, finalizer, policy, skip, pruned_by, binding, ns_terminating, schedule, osd, manifest, decision)| M {
            uid: format!("u{i:04}"),
            ts,
            finalizer,
            policy,
            skip,
            pruned_by,
            binding,
            ns_terminating,
            schedule,
            on_schedule_delete: osd,
            manifest,
            decision,
        })
}

fn arb_members(max: usize) -> impl Strategy<Value = Vec<M>> {
    (0..max).prop_flat_map(|n| (0..n).map(arb_member).collect::<Vec<_>>())
}

fn pending(m: &M) -> PendingDeletion {
    PendingDeletion {
        uid: m.uid.clone(),
        deletion_timestamp: t(m.ts),
        finalizer_present: m.finalizer,
        policy: m.policy,
        skip: m.skip,
        pruned_by: m.pruned_by,
        binding: m.binding.clone(),
        held: m.decision == Some(DeletionDecision::Held),
    }
}

fn candidate(m: &M) -> FireCandidate {
    FireCandidate {
        uid: m.uid.clone(),
        deletion_timestamp: t(m.ts),
        finalizer_present: m.finalizer,
        manifest: m.manifest.clone(),
        decision: m.decision.clone(),
        binding: m.binding.clone(),
        pruned_by: m.pruned_by,
        skip: m.skip,
        policy: m.policy,
        ns_terminating: m.ns_terminating,
        schedule: m.schedule,
        on_schedule_delete: m.on_schedule_delete,
        namespace_allowed: true,
        source: format!("app@t:/pvc/{}", m.uid),
        refused: false,
    }
}

fn repo_facts(members: &[M], threshold: i32, ack: Option<String>) -> RepoDeletionFacts {
    RepoDeletionFacts {
        repo: RepoRef::repository("t", "r", REPO),
        threshold,
        ack_annotation: ack,
        ack_recorded: None,
        held_condition_was_true: false,
        deletions: members.iter().map(pending).collect(),
    }
}

fn arb_ack() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        2 => Just(None),
        3 => (0i64..900).prop_map(|s| Some(kopiur_controller::deletion::rfc3339(t(s)))),
        1 => Just(Some("not-a-time".to_string())),
    ]
}

/// The plan facts a member's own reconcile would gather (schedule alive unless the store
/// says otherwise; the live GET agrees with a warm store).
fn plan_facts(m: &M, state: &BreakerState, on_namespace_delete: OnNamespaceDelete) -> SnapshotDeletionFacts {
    SnapshotDeletionFacts {
        deletion_timestamp: t(m.ts),
        skip: m.skip,
        policy: m.policy,
        manifest: m.manifest.clone(),
        pruned_by: m.pruned_by,
        repo: RepoPresence::Present { ready: true },
        ns_terminating: m.ns_terminating,
        on_namespace_delete,
        owner: match m.schedule {
            ScheduleLink::NotScheduleOwned => Owner::NotScheduleOwned,
            ScheduleLink::OwnedStoreCold => Owner::Schedule { name: "s".into(), state: ScheduleState::Alive },
            ScheduleLink::OwnedStoreWarm(state) => Owner::Schedule { name: "s".into(), state },
        },
        on_schedule_delete: m.on_schedule_delete,
        breaker: state.member(t(m.ts)),
        previous: m.decision.clone().map(|decision| DeletionRecord {
            decision,
            decided_at: Some(t(m.ts)),
            held_since: None,
        }),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The fire set never contains a held member, an unpinned peer, another repository's
    /// member, or anything its own plan would not delete right now.
    #[test]
    fn the_fire_set_never_contains_a_held_member(
        members in arb_members(60),
        threshold in 0i32..15,
        ack in arb_ack(),
        ready in prop::bool::weighted(0.8),
        nsd in prop_oneof![Just(OnNamespaceDelete::Orphan), Just(OnNamespaceDelete::Delete)],
    ) {
        let state = evaluate(&repo_facts(&members, threshold, ack), t(1000));
        let in_flight = BTreeSet::new();
        let ctx = FireContext { repo_uid: REPO, repo_ready: ready, on_namespace_delete: nsd, breaker: &state, in_flight: &in_flight };
        let cands: Vec<FireCandidate> = members.iter().map(candidate).collect();
        let f = select(&ctx, &cands);
        for fm in &f.members {
            let m = members.iter().find(|m| m.uid == fm.uid).unwrap();
            prop_assert!(!(state.tripped() && m.pruned_by.is_external() && !state.is_acked(t(m.ts))), "held member fired: {m:?}");
            prop_assert_eq!(&m.binding, &Binding::Pinned { repo_uid: REPO.into() });
            prop_assert!(!state.holding.contains(&m.uid) || state.is_acked(t(m.ts)));
            prop_assert!(ready);
            let plan = plan_snapshot_deletion(&plan_facts(m, &state, nsd), t(1000));
            prop_assert!(matches!(plan.action, Action::DeleteSnapshot(_)), "fired but its own plan says {:?}: {m:?}", plan.action);
        }
        // Selection is exhaustive: every candidate is either fired or excluded, once.
        prop_assert_eq!(f.members.len() + f.excluded.len(), members.len());
    }

    /// Counting is inclusive: adding a pending external never lowers the count, and the count
    /// is never below the true pending external count (pinned members).
    #[test]
    fn counting_is_inclusive(
        members in arb_members(60),
        extra in arb_member(9999),
        threshold in 0i32..15,
        ack in arb_ack(),
    ) {
        let before = evaluate(&repo_facts(&members, threshold, ack.clone()), t(1000));
        let truly = members.iter().filter(|m| {
            m.finalizer && m.policy == DeletionPolicy::Delete && !m.skip && m.pruned_by.is_external()
                && !before.is_acked(t(m.ts)) && m.binding == Binding::Pinned { repo_uid: REPO.into() }
        }).count() as u32;
        prop_assert!(before.pending_external >= truly);

        let extra = M { pruned_by: PrunedBy::External, ..extra };
        let mut more = members.clone();
        more.push(extra.clone());
        let after = evaluate(&repo_facts(&more, threshold, ack), t(1000));
        prop_assert!(after.pending_external >= before.pending_external);
        let counted = counts(&pending(&extra), REPO, after.ack.effective);
        prop_assert_eq!(after.pending_external, before.pending_external + u32::from(counted));
        // Tripping is monotone in the count.
        prop_assert!(!before.tripped() || after.tripped());
    }

    /// An acked member is released iff its deletionTimestamp ≤ the clamped ack.
    #[test]
    fn an_acked_member_is_released_iff_its_timestamp_is_at_or_before_the_clamped_ack(
        ack_at in -600i64..1800,
        seen_at in 0i64..1200,
        ts in 0i64..1200,
        wave in 10usize..40,
    ) {
        // A wave big enough to trip, plus the member under test.
        let mut members: Vec<M> = (0..wave).map(|i| M {
            uid: format!("w{i}"), ts: 1100, finalizer: true, policy: DeletionPolicy::Delete, skip: false,
            pruned_by: PrunedBy::External, binding: Binding::Pinned { repo_uid: REPO.into() }, ns_terminating: false,
            schedule: ScheduleLink::NotScheduleOwned, on_schedule_delete: OnScheduleDelete::Retain,
            manifest: Manifest::Known(format!("{i:032x}")), decision: Some(DeletionDecision::Held),
        }).collect();
        let me = M { uid: "me".into(), ts, ..members[0].clone() };
        members.push(me.clone());
        let raw = rfc3339(t(ack_at));
        let first = evaluate(&repo_facts(&members, 10, Some(raw.clone())), t(seen_at));
        // Later reconciles reuse the recorded ack.
        let mut facts = repo_facts(&members, 10, Some(raw));
        facts.ack_recorded = first.ack.status.clone();
        let later = evaluate(&facts, t(seen_at + 3600));
        let clamped = t(ack_at.min(seen_at));
        prop_assert_eq!(later.ack.effective, Some(clamped));
        let released = t(ts) <= clamped;
        prop_assert_eq!(later.is_acked(t(ts)), released);
        let mut f = plan_facts(&me, &later, OnNamespaceDelete::Orphan);
        // Force the wave to count as tripped so the ack alone decides.
        f.breaker.tripped = true;
        let plan = plan_snapshot_deletion(&f, t(seen_at + 3600));
        prop_assert_eq!(plan.row == Row::D11, released);
        prop_assert_eq!(plan.row == Row::D10, !released);
    }

    /// Batch names are deterministic and independent of member order.
    #[test]
    fn batch_names_are_deterministic_and_independent_of_member_order(
        uids in prop::collection::btree_set("[a-f0-9]{8}", 1..50),
        seed in any::<u64>(),
    ) {
        let sorted: Vec<&str> = uids.iter().map(String::as_str).collect();
        let mut shuffled = sorted.clone();
        // A deterministic Fisher-Yates from the seed.
        let mut s = seed;
        for i in (1..shuffled.len()).rev() {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            shuffled.swap(i, (s >> 33) as usize % (i + 1));
        }
        let a = batch_name(REPO, sorted.iter().copied());
        prop_assert_eq!(&a, &batch_name(REPO, shuffled.iter().copied()));
        prop_assert!(a.starts_with("snapdel-") && a.len() == 18);
        prop_assert_ne!(&a, &batch_name("r2", sorted.iter().copied()));
        if sorted.len() > 1 {
            prop_assert_ne!(&a, &batch_name(REPO, sorted[1..].iter().copied()));
        }
    }

    /// No member is in two batches, per-repository and global limits hold, and every batch
    /// is at most 200 members chunked 50 ids per call.
    #[test]
    fn no_member_is_in_two_batches(
        sizes in prop::collection::vec(0usize..450, 1..5),
        running in prop::collection::vec(prop::bool::ANY, 5),
        cap in 0usize..4,
        now in 0i64..40,
    ) {
        let mut queues = vec![];
        let mut jobs = vec![];
        for (r, n) in sizes.iter().enumerate() {
            let repo = format!("r{r}");
            let members: Vec<FireMember> = (0..*n).map(|i| FireMember {
                uid: format!("{repo}-u{i}"), snapshot_id: format!("{r:02}{i:030x}"), source: String::new(), deletion_timestamp: t((i % 30) as i64),
            }).collect();
            if running[r] && *n > 0 {
                // A running Job already lists this repository's first member.
                jobs.push(BatchJob { name: format!("snapdel-{r}"), repo_uid: repo.clone(), members: vec![members[0].uid.clone()], phase: JobPhase::Running, outcomes: Default::default() });
            }
            let mut sorted = members;
            sorted.sort_by(|a, b| (a.deletion_timestamp, &a.uid).cmp(&(b.deletion_timestamp, &b.uid)));
            queues.push(RepoQueue { repo_uid: repo, fire_set: FireSet { members: sorted, excluded: vec![] } });
        }
        let tuning = BatchTuning { global_cap: cap, max_in_flight_per_repo: 1 + (now as usize % 2), ..BatchTuning::default() };
        let d = next_batches(&queues, &jobs, &tuning, t(now));
        let mut seen: BTreeSet<String> = batch::in_flight_members(&jobs);
        for b in &d.create {
            prop_assert!(!b.members.is_empty() && b.members.len() <= 200);
            prop_assert!(b.chunks.iter().all(|c| !c.is_empty() && c.len() <= 50));
            prop_assert_eq!(b.chunks.concat().len(), b.members.len());
            prop_assert_eq!(&b.name, &batch_name(&b.repo_uid, b.members.iter().map(|m| m.uid.as_str())));
            for m in &b.members {
                prop_assert!(seen.insert(m.uid.clone()), "{} in two batches", m.uid);
            }
            // Short of a full batch, the quiet window must have passed.
            if b.members.len() < 200 {
                prop_assert!(b.members.iter().all(|m| m.deletion_timestamp <= t(now) - Duration::seconds(10)));
            }
        }
        for q in &queues {
            let existing = jobs.iter().filter(|j| j.repo_uid == q.repo_uid).count();
            let created = d.create.iter().filter(|b| b.repo_uid == q.repo_uid).count();
            prop_assert!(existing + created <= tuning.max_in_flight_per_repo.max(existing));
        }
        if cap > 0 {
            prop_assert!(jobs.len() + d.create.len() <= cap.max(jobs.len()));
        }
    }

    /// Every excluded member eventually fires once its exclusion clears: run dispatch rounds
    /// with held waves acked, cold stores warmed, members pinned, the repository Ready and
    /// in-flight Jobs completed, and each manifest is deleted exactly once.
    #[test]
    fn every_excluded_member_eventually_fires_once_its_exclusion_clears(
        members in arb_members(80),
        threshold in 1i32..15,
    ) {
        // Only members whose own plan would delete them once nothing excludes them.
        let eligible = |m: &M| m.finalizer && !m.skip && m.policy == DeletionPolicy::Delete
            && matches!(m.manifest, Manifest::Known(_)) && !matches!(m.binding, Binding::Pinned { ref repo_uid } if repo_uid != REPO);
        let mut live: Vec<M> = members.into_iter().filter(eligible).map(|mut m| {
            // Namespace teardown under Orphan and schedule cascades under Retain resolve
            // without a delete; keep the ones that end in a delete.
            m.ns_terminating = false;
            m.on_schedule_delete = OnScheduleDelete::Delete;
            m
        }).collect();
        let expected: BTreeSet<String> = live.iter().map(|m| m.uid.clone()).collect();
        let mut fired: Vec<String> = vec![];
        let mut jobs: Vec<BatchJob> = vec![];
        let tuning = BatchTuning::default();
        let mut ack: Option<String> = None;
        let mut ready = false;
        let mut store_warm = false;
        for round in 0..200i64 {
            let now = t(1000 + round * 5);
            // Conditions clear over time.
            if round == 3 { ready = true; }
            if round == 6 { store_warm = true; }
            if round == 9 {
                for m in live.iter_mut() { m.binding = Binding::Pinned { repo_uid: REPO.into() }; }
            }
            let state = evaluate(&repo_facts(&live, threshold, ack.clone()), now);
            if round == 12 { ack = state.ack_command().and_then(|c| c.split('"').nth(1).map(str::to_string)); }
            // Each member's own reconcile persists its decision.
            for m in live.iter_mut() {
                if !store_warm && matches!(m.schedule, ScheduleLink::OwnedStoreWarm(_)) { continue; }
                let p = plan_snapshot_deletion(&plan_facts(m, &state, OnNamespaceDelete::Orphan), now);
                m.decision = p.record.map(|r| r.decision);
            }
            let cands: Vec<FireCandidate> = live.iter().map(|m| {
                let mut c = candidate(m);
                if !store_warm && !matches!(m.schedule, ScheduleLink::NotScheduleOwned) { c.schedule = ScheduleLink::OwnedStoreCold; }
                if store_warm && matches!(m.schedule, ScheduleLink::OwnedStoreCold) { c.schedule = ScheduleLink::OwnedStoreWarm(ScheduleState::Alive); }
                c
            }).collect();
            let in_flight = batch::in_flight_members(&jobs);
            let ctx = FireContext { repo_uid: REPO, repo_ready: ready, on_namespace_delete: OnNamespaceDelete::Orphan, breaker: &state, in_flight: &in_flight };
            let f = select(&ctx, &cands);
            // Jobs created last round complete now; their members drain and the Job is reaped.
            for j in jobs.drain(..) {
                fired.extend(j.members.iter().cloned());
                live.retain(|m| !j.members.contains(&m.uid));
            }
            let d = next_batches(&[RepoQueue { repo_uid: REPO.into(), fire_set: f }], &jobs, &tuning, now);
            for b in d.create {
                jobs.push(BatchJob { name: b.name, repo_uid: REPO.into(), members: b.members.iter().map(|m| m.uid.clone()).collect(), phase: JobPhase::Running, outcomes: Default::default() });
            }
            if live.is_empty() && jobs.is_empty() { break; }
        }
        let once: BTreeSet<String> = fired.iter().cloned().collect();
        prop_assert_eq!(once.len(), fired.len(), "a member fired twice");
        prop_assert_eq!(once, expected, "every member drained");
    }
}
