//! Deterministic simulation of mass-deletion protection: the pure planner, breaker, fire set
//! and batch dispatcher driven second by second through schedule flaps, namespace teardowns,
//! bulk deletes, prune waves, acks, failures and restarts. The "cluster" here is a few maps:
//! Snapshots with finalizers, schedules, repositories with their kopia manifests, batch Jobs.
//! The shell does what the real one does: evaluate each repository's breaker from the Snapshot
//! store, plan every deleting Snapshot, CREATE batch Jobs (AlreadyExists is success), run them,
//! release members listed by a Complete Job, reap. Counts are printed and asserted.
use std::collections::{BTreeMap, BTreeSet};

use chrono::{Duration, TimeZone, Utc};
use kopiur_api::repository::MassDeletionAck;
use kopiur_api::repository::OnNamespaceDelete;
use kopiur_api::snapshot::DeletionRecord;
use kopiur_api::snapshot::{DeletionDecision, OnScheduleDelete};
use kopiur_api::snapshot_policy::DeletionPolicy;
use kopiur_controller::deletion::batch::{self, MemberBatch, Reap, member_batch, reap};
use kopiur_controller::deletion::*;

fn t0() -> Time {
    Utc.with_ymd_and_hms(2026, 7, 17, 10, 0, 0).unwrap()
}

#[derive(Clone, Debug)]
struct Snap {
    uid: String,
    ns: String,
    deletion: Option<Time>,
    finalizer: bool,
    policy: DeletionPolicy,
    skip: bool,
    pruned_by: PrunedBy,
    /// (schedule name, schedule uid) of the controller ownerReference.
    owner: Option<(String, String)>,
    on_schedule_delete: OnScheduleDelete,
    manifest: Option<String>,
    /// Pinned repository uid.
    repo: Option<String>,
    record: Option<DeletionRecord>,
    discovered: bool,
}

#[derive(Clone, Debug)]
struct Sched {
    ns: String,
    uid: String,
}

#[derive(Clone, Debug)]
struct Repo {
    r: RepoRef,
    threshold: i32,
    on_ns_delete: OnNamespaceDelete,
    ack: Option<String>,
    ack_recorded: Option<MassDeletionAck>,
    held_cond: bool,
    ready: bool,
    manifests: BTreeSet<String>,
    state: Option<BreakerState>,
}

#[derive(Clone, Debug)]
struct SimJob {
    job: BatchJob,
    ids: Vec<String>,
    chunks: usize,
    finishes_at: Time,
}

#[derive(Default, Debug)]
struct Counts {
    jobs_created: usize,
    already_exists: usize,
    kopia_deletes: usize,
    /// A delete of a manifest that was already gone (would be `no snapshots matched`).
    repeat_deletes: usize,
    delete_calls: usize,
    connects: usize,
    failed_batches: usize,
    max_members: usize,
    max_in_flight_repo: usize,
    max_in_flight_global: usize,
    events: BTreeMap<&'static str, usize>,
    outcomes: BTreeMap<&'static str, usize>,
    discovered_rows: usize,
    /// Every member uid a created Job listed, to check no member rides two Jobs.
    listed: Vec<String>,
}

struct World {
    now: Time,
    snaps: BTreeMap<String, Snap>,
    scheds: BTreeMap<String, Sched>,
    repos: BTreeMap<String, Repo>,
    jobs: Vec<SimJob>,
    terminating_ns: BTreeSet<String>,
    /// The SnapshotSchedule store is unsynced until then (controller restart).
    store_cold_until: Option<Time>,
    tuning: BatchTuning,
    job_seconds: i64,
    /// Batches whose repository is unreachable fail instead of deleting.
    backend_down: BTreeSet<String>,
    next_uid: u64,
    /// Right after a restart the Job store has not listed yet: the dispatcher sees no Jobs.
    job_store_blind: bool,
    counts: Counts,
}

impl World {
    fn new() -> World {
        World {
            now: t0(),
            snaps: BTreeMap::new(),
            scheds: BTreeMap::new(),
            repos: BTreeMap::new(),
            jobs: vec![],
            terminating_ns: BTreeSet::new(),
            store_cold_until: None,
            tuning: BatchTuning::default(),
            job_seconds: 15,
            backend_down: BTreeSet::new(),
            next_uid: 0,
            job_store_blind: false,
            counts: Counts::default(),
        }
    }

    fn uid(&mut self, prefix: &str) -> String {
        self.next_uid += 1;
        format!("{prefix}-{:06}", self.next_uid)
    }

    fn add_repo(&mut self, ns: &str, name: &str, threshold: i32, on_ns_delete: OnNamespaceDelete) -> String {
        let uid = self.uid("repo");
        self.repos.insert(
            uid.clone(),
            Repo {
                r: RepoRef::repository(ns, name, uid.clone()),
                threshold,
                on_ns_delete,
                ack: None,
                ack_recorded: None,
                held_cond: false,
                ready: true,
                manifests: BTreeSet::new(),
                state: None,
            },
        );
        uid
    }

    fn add_schedule(&mut self, ns: &str, name: &str) -> String {
        let uid = self.uid("sched");
        self.scheds.insert(name.to_string(), Sched { ns: ns.into(), uid: uid.clone() });
        uid
    }

    /// A Succeeded Snapshot owning a manifest in `repo`.
    fn add_snapshot(&mut self, ns: &str, repo: &str, owner: Option<&str>) -> String {
        let uid = self.uid("snap");
        let manifest = format!("{:032x}", self.next_uid);
        self.repos.get_mut(repo).unwrap().manifests.insert(manifest.clone());
        let owner = owner.map(|s| (s.to_string(), self.scheds[s].uid.clone()));
        self.snaps.insert(
            uid.clone(),
            Snap {
                uid: uid.clone(),
                ns: ns.into(),
                deletion: None,
                finalizer: true,
                policy: DeletionPolicy::Delete,
                skip: false,
                pruned_by: PrunedBy::External,
                owner,
                on_schedule_delete: OnScheduleDelete::Retain,
                manifest: Some(manifest),
                repo: Some(repo.into()),
                record: None,
                discovered: false,
            },
        );
        uid
    }

    fn delete(&mut self, uid: &str) {
        let now = self.now;
        if let Some(s) = self.snaps.get_mut(uid)
            && s.deletion.is_none()
        {
            s.deletion = Some(now);
        }
    }

    /// kopiur's own prune: stamp first, then delete.
    fn prune(&mut self, uid: &str, kind: PruneKind) {
        self.snaps.get_mut(uid).unwrap().pruned_by = PrunedBy::Operator(kind);
        self.delete(uid);
    }

    /// `kubectl delete snapshotschedule` with background propagation: the schedule goes now,
    /// the garbage collector deletes its children a second later.
    fn delete_schedule(&mut self, name: &str) {
        self.scheds.remove(name);
    }

    fn delete_namespace(&mut self, ns: &str) {
        self.terminating_ns.insert(ns.to_string());
        self.scheds.retain(|_, s| s.ns != ns);
    }

    fn gc(&mut self) {
        let live: BTreeSet<String> = self.scheds.values().map(|s| s.uid.clone()).collect();
        let now = self.now;
        for s in self.snaps.values_mut() {
            let orphaned_child = s.owner.as_ref().is_some_and(|(_, u)| !live.contains(u));
            if s.deletion.is_none() && (orphaned_child || self.terminating_ns.contains(&s.ns)) {
                s.deletion = Some(now);
            }
        }
        // A namespace finishes terminating once nothing in it remains.
        let occupied: BTreeSet<String> = self.snaps.values().map(|s| s.ns.clone()).collect();
        self.terminating_ns.retain(|ns| occupied.contains(ns));
    }

    fn pending(&self) -> Vec<PendingDeletion> {
        self.snaps
            .values()
            .filter_map(|s| {
                Some(PendingDeletion {
                    uid: s.uid.clone(),
                    deletion_timestamp: s.deletion?,
                    finalizer_present: s.finalizer,
                    policy: s.policy,
                    skip: s.skip,
                    pruned_by: s.pruned_by,
                    binding: binding(s),
                    held: s.record.as_ref().is_some_and(|r| r.decision == DeletionDecision::Held),
                })
            })
            .collect()
    }

    fn repo_pass(&mut self) {
        let pending = self.pending();
        let now = self.now;
        for repo in self.repos.values_mut() {
            let state = evaluate(
                &RepoDeletionFacts {
                    repo: repo.r.clone(),
                    threshold: repo.threshold,
                    ack_annotation: repo.ack.clone(),
                    ack_recorded: repo.ack_recorded.clone(),
                    held_condition_was_true: repo.held_cond,
                    deletions: pending.clone(),
                },
                now,
            );
            for e in &state.events {
                *self.counts.events.entry(e.reason).or_default() += 1;
            }
            repo.ack_recorded = state.ack.status.clone();
            repo.held_cond = state.condition().status;
            repo.state = Some(state);
        }
    }

    fn owner(&self, s: &Snap) -> Owner {
        match &s.owner {
            None => Owner::NotScheduleOwned,
            Some((name, uid)) => {
                let live = match self.scheds.get(name) {
                    None => cascade::LiveSchedule::NotFound,
                    Some(sc) => cascade::LiveSchedule::Found { uid: sc.uid.clone(), terminating: false },
                };
                Owner::Schedule { name: name.clone(), state: cascade::schedule_state(uid, &live) }
            }
        }
    }

    fn member_pass(&mut self) {
        let uids: Vec<String> =
            self.snaps.values().filter(|s| s.deletion.is_some() && s.finalizer).map(|s| s.uid.clone()).collect();
        for uid in uids {
            let s = self.snaps[&uid].clone();
            // Evidence from a Complete batch releases the finalizer before any re-plan.
            if let MemberBatch::Completed { .. } = member_batch(&uid, &self.batch_jobs()) {
                self.snaps.get_mut(&uid).unwrap().finalizer = false;
                *self.counts.outcomes.entry("deleted").or_default() += 1;
                continue;
            }
            let repo = s.repo.as_ref().and_then(|r| self.repos.get(r));
            let breaker = repo
                .and_then(|r| r.state.as_ref())
                .map_or_else(MemberBreaker::quiet, |st| st.member(s.deletion.unwrap()));
            let facts = SnapshotDeletionFacts {
                deletion_timestamp: s.deletion.unwrap(),
                skip: s.skip,
                policy: s.policy,
                manifest: s.manifest.clone().map_or(Manifest::None, Manifest::Known),
                pruned_by: s.pruned_by,
                repo: repo.map_or(RepoPresence::Gone, |r| RepoPresence::Present { ready: r.ready }),
                ns_terminating: self.terminating_ns.contains(&s.ns),
                on_namespace_delete: repo.map_or(OnNamespaceDelete::Orphan, |r| r.on_ns_delete),
                owner: self.owner(&s),
                on_schedule_delete: s.on_schedule_delete,
                breaker,
                previous: s.record.clone(),
            };
            let plan = plan_snapshot_deletion(&facts, self.now);
            for e in &plan.events {
                *self.counts.events.entry(e.reason).or_default() += 1;
            }
            if let Some(o) = plan.action.release_outcome() {
                *self.counts.outcomes.entry(o).or_default() += 1;
            }
            let snap = self.snaps.get_mut(&uid).unwrap();
            if plan.action.releases_finalizer() {
                snap.finalizer = false;
            } else {
                snap.record = plan.record;
            }
        }
        // The apiserver removes an object once its finalizers are gone.
        self.snaps.retain(|_, s| s.deletion.is_none() || s.finalizer);
    }

    fn batch_jobs(&self) -> Vec<BatchJob> {
        self.jobs.iter().map(|j| j.job.clone()).collect()
    }

    fn dispatch(&mut self) {
        let jobs = if self.job_store_blind { vec![] } else { self.batch_jobs() };
        let in_flight = batch::in_flight_members(&jobs);
        let store_cold = self.store_cold_until.is_some_and(|u| self.now < u);
        let mut queues = vec![];
        for repo in self.repos.values() {
            let candidates: Vec<FireCandidate> = self
                .snaps
                .values()
                .filter(|s| s.deletion.is_some())
                .map(|s| FireCandidate {
                    uid: s.uid.clone(),
                    deletion_timestamp: s.deletion.unwrap(),
                    finalizer_present: s.finalizer,
                    manifest: s.manifest.clone().map_or(Manifest::None, Manifest::Known),
                    decision: s.record.as_ref().map(|r| r.decision.clone()),
                    binding: binding(s),
                    pruned_by: s.pruned_by,
                    skip: s.skip,
                    policy: s.policy,
                    ns_terminating: self.terminating_ns.contains(&s.ns),
                    schedule: match (&s.owner, store_cold) {
                        (None, _) => ScheduleLink::NotScheduleOwned,
                        (Some(_), true) => ScheduleLink::OwnedStoreCold,
                        (Some(_), false) => match self.owner(s) {
                            Owner::Schedule { state, .. } => ScheduleLink::OwnedStoreWarm(state),
                            Owner::NotScheduleOwned => ScheduleLink::NotScheduleOwned,
                        },
                    },
                    on_schedule_delete: s.on_schedule_delete,
                    namespace_allowed: true,
                    source: format!("app@{}:/pvc/{}", s.ns, s.uid),
                    refused: false,
                })
                .collect();
            let ctx = FireContext {
                repo_uid: &repo.r.uid,
                repo_ready: repo.ready,
                on_namespace_delete: repo.on_ns_delete,
                breaker: repo.state.as_ref().unwrap(),
                in_flight: &in_flight,
            };
            queues.push(RepoQueue { repo_uid: repo.r.uid.clone(), fire_set: select(&ctx, &candidates) });
        }
        let d = next_batches(&queues, &jobs, &self.tuning, self.now);
        for spec in d.create {
            // CREATE: the deterministic name is the single-flight lock.
            if self.jobs.iter().any(|j| j.job.name == spec.name) {
                self.counts.already_exists += 1;
                continue;
            }
            let fails = self.backend_down.contains(&spec.repo_uid);
            self.counts.jobs_created += 1;
            self.counts.max_members = self.counts.max_members.max(spec.members.len());
            self.counts.listed.extend(spec.members.iter().map(|m| m.uid.clone()));
            self.jobs.push(SimJob {
                job: BatchJob {
                    name: spec.name.clone(),
                    repo_uid: spec.repo_uid.clone(),
                    members: spec.members.iter().map(|m| m.uid.clone()).collect(),
                    phase: JobPhase::Running,
                    outcomes: Default::default(),
                },
                ids: spec.members.iter().map(|m| m.snapshot_id.clone()).collect(),
                chunks: spec.chunks.len(),
                finishes_at: self.now + Duration::seconds(if fails { 2 } else { self.job_seconds }),
            });
        }
        let running: Vec<&SimJob> = self.jobs.iter().filter(|j| !j.job.phase.is_terminal()).collect();
        self.counts.max_in_flight_global = self.counts.max_in_flight_global.max(running.len());
        for repo in self.repos.keys() {
            let n = running.iter().filter(|j| &j.job.repo_uid == repo).count();
            self.counts.max_in_flight_repo = self.counts.max_in_flight_repo.max(n);
        }
    }

    /// The mover: one connect, then deletes in chunks. A Job against a down backend fails at
    /// connect and deletes nothing.
    fn run_jobs(&mut self) {
        let now = self.now;
        for j in self.jobs.iter_mut().filter(|j| j.job.phase == JobPhase::Running && j.finishes_at <= now) {
            self.counts.connects += 1;
            if self.backend_down.contains(&j.job.repo_uid) {
                j.job.phase = JobPhase::Failed { at: now };
                self.counts.failed_batches += 1;
                continue;
            }
            let repo = self.repos.get_mut(&j.job.repo_uid).unwrap();
            for id in &j.ids {
                if repo.manifests.remove(id) {
                    self.counts.kopia_deletes += 1;
                } else {
                    self.counts.repeat_deletes += 1;
                }
            }
            self.counts.delete_calls += j.chunks;
            j.job.phase = JobPhase::Complete { at: now };
        }
    }

    fn reap(&mut self) {
        let holding: BTreeSet<String> = self.snaps.values().filter(|s| s.finalizer).map(|s| s.uid.clone()).collect();
        let tuning = self.tuning;
        let now = self.now;
        self.jobs.retain(|j| match reap(&j.job, |m| holding.contains(m), &tuning, now) {
            Reap::Keep | Reap::DeleteAt(_) => true,
            Reap::Delete => false,
        });
    }

    /// The catalog scan: every manifest no Snapshot owns reappears as a discovered Retain row.
    fn catalog_scan(&mut self) {
        let owned: BTreeSet<String> = self.snaps.values().filter_map(|s| s.manifest.clone()).collect();
        let mut rows = vec![];
        for (repo_uid, repo) in &self.repos {
            for m in repo.manifests.iter().filter(|m| !owned.contains(*m)) {
                rows.push((repo_uid.clone(), repo.r.namespace.clone().unwrap(), m.clone()));
            }
        }
        for (repo_uid, ns, m) in rows {
            let uid = self.uid("disc");
            self.counts.discovered_rows += 1;
            self.snaps.insert(
                uid.clone(),
                Snap {
                    uid,
                    ns,
                    deletion: None,
                    finalizer: true,
                    policy: DeletionPolicy::Retain,
                    skip: false,
                    pruned_by: PrunedBy::External,
                    owner: None,
                    on_schedule_delete: OnScheduleDelete::Retain,
                    manifest: Some(m),
                    repo: Some(repo_uid),
                    record: None,
                    discovered: true,
                },
            );
        }
    }

    fn tick(&mut self) {
        self.gc();
        self.repo_pass();
        self.member_pass();
        // A second pass in the same second models the Job watch and status writes re-enqueuing.
        self.repo_pass();
        self.dispatch();
        self.run_jobs();
        self.reap();
        if self.now.timestamp() % 30 == 0 {
            self.catalog_scan();
        }
        self.now += Duration::seconds(1);
    }

    fn run(&mut self, secs: i64) {
        for _ in 0..secs {
            self.tick();
        }
    }

    fn held(&self, repo: &str) -> u32 {
        self.repos[repo].state.as_ref().map_or(0, BreakerState::held_count)
    }

    fn pending_external(&self, repo: &str) -> u32 {
        self.repos[repo].state.as_ref().map_or(0, |s| s.pending_external)
    }

    /// Copy the value out of the exact command the repository condition prints, and apply it.
    fn ack_from_condition(&mut self, repo: &str) -> String {
        let msg = self.repos[repo].state.as_ref().unwrap().condition().message;
        let cmd = msg.split("Approve with: ").nth(1).expect("the condition carries the command").to_string();
        let value = cmd.split("allow-mass-deletion=\"").nth(1).unwrap().split('"').next().unwrap().to_string();
        self.repos.get_mut(repo).unwrap().ack = Some(value);
        cmd
    }

    fn event(&self, reason: &str) -> usize {
        self.counts.events.get(reason).copied().unwrap_or(0)
    }

    fn assert_no_member_in_two_jobs(&self) {
        let unique: BTreeSet<&String> = self.counts.listed.iter().collect();
        assert_eq!(unique.len(), self.counts.listed.len(), "a member rode two batch Jobs");
    }

    fn report(&self, name: &str) {
        let c = &self.counts;
        println!(
            "{name}: jobs={} kopia_deletes={} delete_calls={} connects={} max_members={} max_in_flight(repo/global)={}/{} \
             failed_batches={} already_exists={} repeat_deletes={} events={:?} outcomes={:?} discovered_rows={}",
            c.jobs_created,
            c.kopia_deletes,
            c.delete_calls,
            c.connects,
            c.max_members,
            c.max_in_flight_repo,
            c.max_in_flight_global,
            c.failed_batches,
            c.already_exists,
            c.repeat_deletes,
            c.events,
            c.outcomes,
            c.discovered_rows
        );
    }
}

fn binding(s: &Snap) -> Binding {
    match &s.repo {
        Some(r) => Binding::Pinned { repo_uid: r.clone() },
        None => Binding::Unpinned { resolves: vec![] },
    }
}

// --- Scenarios ------------------------------------------------------------------------------

/// The kro incident: a schedule with 50 produced Snapshots is deleted and recreated five
/// times, 30 s apart, under the default `onScheduleDelete: Retain`.
#[test]
fn flapping_schedule_with_50_children_deletes_nothing() {
    let mut w = World::new();
    let r = w.add_repo("t", "r", 10, OnNamespaceDelete::Orphan);
    w.add_schedule("t", "s");
    for _ in 0..50 {
        w.add_snapshot("t", &r, Some("s"));
    }
    w.run(5);
    for _ in 0..5 {
        w.delete_schedule("s");
        w.run(15);
        w.add_schedule("t", "s");
        w.run(15);
    }
    w.run(120);
    w.report("flap");
    assert_eq!(w.counts.jobs_created, 0);
    assert_eq!(w.counts.kopia_deletes, 0);
    assert_eq!(w.repos[&r].manifests.len(), 50);
    assert_eq!(w.event("SnapshotRetainedOnScheduleDelete"), 50);
    assert_eq!(w.counts.outcomes.get("cascade_retained"), Some(&50));
    assert_eq!(w.event("SnapshotDeletionHeld"), 0, "cascade-retained children are never held");
    assert_eq!(w.event("MassDeletionHeld"), 0, "counted (inclusive) but never held: no alarm");
    // Rediscovered once each; later flaps do not touch discovered rows.
    assert_eq!(w.counts.discovered_rows, 50);
    let disc: Vec<&Snap> = w.snaps.values().filter(|s| s.discovered).collect();
    assert_eq!(disc.len(), 50);
    let ids: BTreeSet<&String> = disc.iter().filter_map(|s| s.manifest.as_ref()).collect();
    assert_eq!(ids.len(), 50, "no duplicate discovered rows");
}

/// A namespace teardown of 200 Snapshots against a repository that lives elsewhere, under
/// `onNamespaceDelete: Delete` and threshold 10: held until the ack, then one batch.
#[test]
fn namespace_teardown_of_200_is_held_until_acked_then_one_batch() {
    let mut w = World::new();
    let r = w.add_repo("backup", "r", 10, OnNamespaceDelete::Delete);
    let uids: Vec<String> = (0..200).map(|_| w.add_snapshot("app", &r, None)).collect();
    w.run(2);
    w.delete_namespace("app");
    w.run(1800);
    w.report("teardown-held");
    assert_eq!((w.held(&r), w.pending_external(&r)), (200, 200));
    assert_eq!(w.counts.jobs_created, 0);
    assert_eq!(w.counts.kopia_deletes, 0);
    assert_eq!(w.event("SnapshotDeletionHeld"), 200, "one Event per transition into held");
    assert_eq!(w.event("MassDeletionHeld"), 1);
    assert!(w.terminating_ns.contains("app"), "the namespace stays Terminating");
    for u in &uids {
        assert_eq!(w.snaps[u].record.as_ref().unwrap().decision, DeletionDecision::Held);
    }

    let cmd = w.ack_from_condition(&r);
    assert!(
        cmd.starts_with("kubectl annotate repository/r -n backup kopiur.home-operations.com/allow-mass-deletion=\"")
    );
    w.run(120);
    w.report("teardown-acked");
    assert_eq!(w.counts.jobs_created, 1, "ceil(200/200) batches");
    assert_eq!(w.counts.max_members, 200);
    assert_eq!(w.counts.max_in_flight_repo, 1);
    assert_eq!(w.counts.connects, 1);
    assert_eq!(w.counts.delete_calls, 4, "50 ids per delete call");
    assert_eq!(w.counts.kopia_deletes, 200);
    assert_eq!(w.counts.repeat_deletes, 0);
    assert!(w.repos[&r].manifests.is_empty());
    assert!(w.snaps.is_empty() && w.jobs.is_empty(), "all finalizers drained, batch Job reaped");
    assert!(!w.terminating_ns.contains("app"), "the namespace finishes deleting");
}

/// T24 over the spec's whole window: a schedule whose 25 children opted in to the cascade
/// (`onScheduleDelete: Delete`) is deleted with the breaker at 10. Every child is held, and for
/// 10 minutes no batch Job runs and no kopia snapshot is deleted (the end-to-end form in
/// `deletion_scenarios_e2e` watches a shorter window); the ack then drains them in one batch.
#[test]
fn t24_opted_in_cascade_above_the_threshold_stays_held_for_ten_minutes() {
    let mut w = World::new();
    let r = w.add_repo("t", "r", 10, OnNamespaceDelete::Orphan);
    w.add_schedule("t", "s");
    let uids: Vec<String> = (0..25).map(|_| w.add_snapshot("t", &r, Some("s"))).collect();
    for u in &uids {
        w.snaps.get_mut(u).unwrap().on_schedule_delete = OnScheduleDelete::Delete;
    }
    w.run(5);
    w.delete_schedule("s");
    // Minute by minute over 10 minutes: all 25 held, nothing run, nothing deleted.
    for minute in 1..=10 {
        w.run(60);
        assert_eq!(w.held(&r), 25, "minute {minute}: every child held");
        assert_eq!(w.counts.jobs_created, 0, "minute {minute}: no batch Job for a held cascade");
        assert_eq!(w.counts.kopia_deletes, 0, "minute {minute}: no kopia snapshot deleted");
        assert_eq!(w.repos[&r].manifests.len(), 25);
    }
    w.report("t24-held");
    assert_eq!(w.event("SnapshotRetainedOnScheduleDelete"), 0, "an opted-in cascade is not retained");
    assert_eq!(w.event("SnapshotDeletionHeld"), 25, "one Event per child, on the transition only");
    assert_eq!(w.event("MassDeletionHeld"), 1);
    for u in &uids {
        assert_eq!(w.snaps[u].record.as_ref().unwrap().decision, DeletionDecision::Held);
    }
    w.ack_from_condition(&r);
    w.run(120);
    w.report("t24-acked");
    assert_eq!(w.counts.jobs_created, 1, "the acknowledged cascade drains in one batch");
    assert_eq!(w.counts.kopia_deletes, 25);
    assert!(w.repos[&r].manifests.is_empty() && w.snaps.is_empty());
}

/// The default namespace axis keeps every manifest.
#[test]
fn namespace_teardown_under_orphan_keeps_all_data() {
    let mut w = World::new();
    let r = w.add_repo("backup", "r", 10, OnNamespaceDelete::Orphan);
    for _ in 0..200 {
        w.add_snapshot("app", &r, None);
    }
    w.run(2);
    w.delete_namespace("app");
    w.run(60);
    w.report("teardown-orphan");
    assert_eq!(w.counts.jobs_created, 0);
    assert_eq!(w.counts.kopia_deletes, 0);
    assert_eq!(w.event("SnapshotOrphaned"), 200);
    assert_eq!(w.event("SnapshotDeletionHeld"), 0);
    assert_eq!(w.event("MassDeletionHeld"), 0);
    assert_eq!(w.repos[&r].manifests.len(), 200);
    assert!(!w.terminating_ns.contains("app"));
}

/// A retention prune wave of 300 is never held and runs as ceil(300/200) = 2 batches.
#[test]
fn retention_wave_of_300_is_not_held_and_batched() {
    let mut w = World::new();
    let r = w.add_repo("t", "r", 10, OnNamespaceDelete::Orphan);
    let uids: Vec<String> = (0..300).map(|_| w.add_snapshot("t", &r, None)).collect();
    w.run(2);
    for u in &uids {
        w.prune(u, PruneKind::Retention);
    }
    w.run(120);
    w.report("retention-300");
    assert_eq!(w.event("SnapshotDeletionHeld"), 0);
    assert_eq!(w.pending_external(&r), 0);
    assert_eq!(w.counts.jobs_created, 2);
    assert_eq!(w.counts.max_members, 200);
    assert_eq!(w.counts.max_in_flight_repo, 1);
    assert_eq!(w.counts.kopia_deletes, 300);
    assert!(w.snaps.is_empty() && w.jobs.is_empty());
    w.assert_no_member_in_two_jobs();
}

/// Prunes while a held wave exists are neither held nor allowed to drain held members.
#[test]
fn retention_during_a_held_wave_never_drains_it() {
    let mut w = World::new();
    let r = w.add_repo("t", "r", 10, OnNamespaceDelete::Orphan);
    let wave: Vec<String> = (0..12).map(|_| w.add_snapshot("t", &r, None)).collect();
    let old: Vec<String> = (0..30).map(|_| w.add_snapshot("t", &r, None)).collect();
    w.run(2);
    for u in &wave {
        w.delete(u);
    }
    w.run(30);
    assert_eq!(w.held(&r), 12);
    for u in &old[..28] {
        w.prune(u, PruneKind::Retention);
    }
    w.run(120);
    w.report("retention-during-held");
    assert_eq!(w.counts.jobs_created, 1);
    assert_eq!(w.counts.kopia_deletes, 28);
    let listed: BTreeSet<&String> = w.counts.listed.iter().collect();
    assert!(wave.iter().all(|u| !listed.contains(u)), "no held uid rode the prune batch");
    assert_eq!(w.held(&r), 12);
    assert_eq!(w.repos[&r].manifests.len(), 12 + 2);
}

/// 600 manual deletions by one call: all held; after the ack exactly 3 batches, never more than
/// one in flight. A second wave after the ack is held again.
#[test]
fn wave_of_600_then_ack_then_a_new_wave() {
    let mut w = World::new();
    let r = w.add_repo("t", "r", 10, OnNamespaceDelete::Orphan);
    let uids: Vec<String> = (0..600).map(|_| w.add_snapshot("t", &r, None)).collect();
    w.run(2);
    for u in &uids {
        w.delete(u);
    }
    w.run(600);
    assert_eq!((w.held(&r), w.counts.jobs_created, w.counts.kopia_deletes), (600, 0, 0));
    w.ack_from_condition(&r);
    w.run(300);
    w.report("wave-600");
    assert_eq!(w.counts.jobs_created, 3);
    assert_eq!(w.counts.connects, 3);
    assert_eq!(w.counts.max_in_flight_repo, 1);
    assert_eq!(w.counts.kopia_deletes, 600);
    assert!(w.snaps.is_empty() && w.jobs.is_empty());
    w.assert_no_member_in_two_jobs();

    let more: Vec<String> = (0..15).map(|_| w.add_snapshot("t", &r, None)).collect();
    w.run(1);
    for u in &more {
        w.delete(u);
    }
    w.run(300);
    w.report("wave-600-then-15");
    assert_eq!(w.held(&r), 15, "the ack covers its own wave only");
    assert_eq!(w.event("MassDeletionHeld"), 2, "one per wave");
    assert_eq!(w.counts.jobs_created, 3);
}

/// A future-dated ack is clamped to the moment it was first seen.
#[test]
fn future_ack_is_clamped() {
    let mut w = World::new();
    let r = w.add_repo("t", "r", 10, OnNamespaceDelete::Orphan);
    let uids: Vec<String> = (0..12).map(|_| w.add_snapshot("t", &r, None)).collect();
    w.repos.get_mut(&r).unwrap().ack = Some("2027-07-17T10:00:00Z".into());
    w.run(60);
    for u in &uids {
        w.delete(u);
    }
    w.run(600);
    assert_eq!(w.held(&r), 12);
    assert_eq!(w.counts.jobs_created, 0);
    assert_eq!(w.repos[&r].ack_recorded.as_ref().unwrap().effective, Some(t0()));
}

/// An unparseable ack warns once and releases nothing.
#[test]
fn invalid_ack_warns_once() {
    let mut w = World::new();
    let r = w.add_repo("t", "r", 10, OnNamespaceDelete::Orphan);
    let uids: Vec<String> = (0..12).map(|_| w.add_snapshot("t", &r, None)).collect();
    for u in &uids {
        w.delete(u);
    }
    w.run(30);
    w.repos.get_mut(&r).unwrap().ack = Some("tomorrow".into());
    w.run(600);
    assert_eq!(w.event("InvalidMassDeletionAck"), 1);
    assert_eq!((w.held(&r), w.counts.jobs_created), (12, 0));
}

/// skip-snapshot-cleanup on one held member orphans it and lowers the count by one.
#[test]
fn skip_overrides_the_breaker() {
    let mut w = World::new();
    let r = w.add_repo("t", "r", 10, OnNamespaceDelete::Orphan);
    let uids: Vec<String> = (0..12).map(|_| w.add_snapshot("t", &r, None)).collect();
    for u in &uids {
        w.delete(u);
    }
    w.run(30);
    w.snaps.get_mut(&uids[0]).unwrap().skip = true;
    w.run(10);
    assert!(!w.snaps.contains_key(&uids[0]));
    assert_eq!(w.pending_external(&r), 11);
    assert_eq!(w.event("SnapshotOrphaned"), 1);
    assert_eq!(w.repos[&r].manifests.len(), 12);
}

/// Threshold 0: never held; 50 deletions spread over 8 s pool into one batch; 600 need 3.
#[test]
fn threshold_zero_pools_and_batches() {
    let mut w = World::new();
    let r = w.add_repo("t", "r", 0, OnNamespaceDelete::Orphan);
    let uids: Vec<String> = (0..50).map(|_| w.add_snapshot("t", &r, None)).collect();
    for chunk in uids.chunks(10) {
        for u in chunk {
            w.delete(u);
        }
        w.run(2);
    }
    w.run(60);
    w.report("pool-50");
    assert_eq!((w.counts.jobs_created, w.counts.max_members), (1, 50));

    let mut w = World::new();
    let r = w.add_repo("t", "r", 0, OnNamespaceDelete::Orphan);
    let uids: Vec<String> = (0..600).map(|_| w.add_snapshot("t", &r, None)).collect();
    for u in &uids {
        w.delete(u);
    }
    w.run(300);
    w.report("threshold-0-600");
    assert_eq!(w.event("SnapshotDeletionHeld"), 0);
    assert_eq!((w.counts.jobs_created, w.counts.kopia_deletes), (3, 600));
}

/// A single deletion is a batch of one, created after the quiet window.
#[test]
fn single_deletion_is_a_batch_of_one_after_the_quiet_window() {
    let mut w = World::new();
    let r = w.add_repo("t", "r", 10, OnNamespaceDelete::Orphan);
    let u = w.add_snapshot("t", &r, None);
    w.delete(&u);
    w.run(9);
    assert_eq!(w.counts.jobs_created, 0, "still inside the quiet window");
    w.run(11);
    assert_eq!((w.counts.jobs_created, w.counts.max_members), (1, 1));
}

/// A restarted (or duplicate) dispatcher computing the same batch gets AlreadyExists.
#[test]
fn single_flight_across_a_restart() {
    let mut w = World::new();
    let r = w.add_repo("t", "r", 0, OnNamespaceDelete::Orphan);
    let uids: Vec<String> = (0..600).map(|_| w.add_snapshot("t", &r, None)).collect();
    for u in &uids {
        w.delete(u);
    }
    w.run(1);
    let mut restarted = false;
    for _ in 0..300 {
        let before = w.counts.jobs_created;
        w.tick();
        if w.counts.jobs_created > before && !restarted {
            // The controller dies right after the CREATE; its replacement starts with a Job
            // store that has not listed yet, recomputes the same batch from the Snapshot
            // store, and its CREATE hits the name lock.
            restarted = true;
            w.job_store_blind = true;
            w.dispatch();
            w.job_store_blind = false;
            assert_eq!(w.counts.already_exists, 1);
        }
    }
    w.report("restart");
    assert!(restarted);
    assert_eq!((w.counts.jobs_created, w.counts.kopia_deletes, w.counts.repeat_deletes), (3, 600, 0));
    w.assert_no_member_in_two_jobs();
}

/// With the global cap at 1, two repositories never run batch Jobs at the same time, and both
/// drain.
#[test]
fn global_cap_serializes_repositories() {
    let mut w = World::new();
    w.tuning.global_cap = 1;
    let r1 = w.add_repo("t", "r1", 10, OnNamespaceDelete::Orphan);
    let r2 = w.add_repo("t", "r2", 10, OnNamespaceDelete::Orphan);
    let mut uids = vec![];
    for _ in 0..5 {
        uids.push(w.add_snapshot("t", &r1, None));
        uids.push(w.add_snapshot("t", &r2, None));
    }
    for u in &uids {
        w.delete(u);
    }
    w.run(120);
    w.report("global-cap");
    assert_eq!(w.counts.max_in_flight_global, 1);
    assert_eq!((w.counts.jobs_created, w.counts.kopia_deletes), (2, 10));
}

/// A batch failing against a down backend releases nothing; after the reap delay and the
/// recovery the same members re-batch and drain.
#[test]
fn failed_batch_is_safe_and_retried() {
    let mut w = World::new();
    let r = w.add_repo("t", "r", 10, OnNamespaceDelete::Orphan);
    let uids: Vec<String> = (0..5).map(|_| w.add_snapshot("t", &r, None)).collect();
    w.backend_down.insert(r.clone());
    for u in &uids {
        w.delete(u);
    }
    w.run(20);
    assert_eq!((w.counts.failed_batches, w.counts.kopia_deletes), (1, 0));
    assert_eq!(w.snaps.len(), 5, "no finalizer removed");
    // The repository breaker notices and the repository is no longer Ready.
    w.repos.get_mut(&r).unwrap().ready = false;
    w.backend_down.clear();
    w.run(120);
    assert_eq!(w.counts.jobs_created, 1, "parked while the repository is not Ready");
    w.repos.get_mut(&r).unwrap().ready = true;
    w.run(60);
    w.report("failed-batch");
    assert_eq!((w.counts.jobs_created, w.counts.kopia_deletes), (2, 5));
    assert!(w.snaps.is_empty() && w.jobs.is_empty());
}

/// A child decided Delete while its schedule was alive; then the schedule is deleted and the
/// controller restarts with a cold schedule store. The fire set holds it back while cold, and
/// once warm the member's own reconcile cascade-retains it: 0 kopia deletes.
#[test]
fn cold_schedule_store_fires_nothing_schedule_owned() {
    let mut w = World::new();
    let r = w.add_repo("t", "r", 10, OnNamespaceDelete::Orphan);
    w.add_schedule("t", "s");
    let kids: Vec<String> = (0..20).map(|_| w.add_snapshot("t", &r, Some("s"))).collect();
    // Stamp the persisted decision as if decided with the schedule alive moments ago.
    for u in &kids {
        w.delete(u);
        w.snaps.get_mut(u).unwrap().record =
            Some(DeletionRecord { decision: DeletionDecision::Delete, decided_at: Some(w.now), held_since: None });
    }
    w.delete_schedule("s");
    w.store_cold_until = Some(w.now + Duration::seconds(30));
    // Model the planner not having run yet: only the dispatcher acts while the store is cold.
    for _ in 0..30 {
        w.gc();
        w.repo_pass();
        w.dispatch();
        w.run_jobs();
        w.now += Duration::seconds(1);
    }
    assert_eq!(w.counts.jobs_created, 0);
    w.run(60);
    w.report("cold-store");
    assert_eq!(w.counts.kopia_deletes, 0);
    assert_eq!(w.event("SnapshotRetainedOnScheduleDelete"), 20);
}
