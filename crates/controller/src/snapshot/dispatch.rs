//! The ADR-0006 wiring: observes the stores, calls the pure deletion core
//! (`crate::deletion`), and applies what it decides. Per repository, one pass computes the
//! mass-deletion breaker, writes the repository's `status.deletionProtection` and
//! `MassDeletionHeld` (only when they change), publishes the held / pending gauges, selects the
//! exclusive fire set, CREATEs `snapdel-*` batch Jobs (the deterministic name is the
//! single-flight lock), reaps drained ones, and enqueues members whose decision must change.
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::batch::v1::Job;
use kopiur_api::Snapshot;
use kopiur_api::names::{annotation, condition, event, label};
use kopiur_api::snapshot::DeletionDecision;
use kube::api::{DeleteParams, PropagationPolicy};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};

use crate::conditions::{Cond, CondStatus};
use crate::context::Context;
use crate::deletion::batch::{self, BatchJob, BatchTuning, JobPhase, Reap, RepoQueue};
use crate::deletion::breaker::{self, BreakerState, RepoDeletionFacts};
use crate::deletion::fire_set::{self, FireCandidate, FireContext, ScheduleLink};
use crate::deletion::{cascade, observe, types::RepoRef};
use crate::error::{ApiStep, Error};
use crate::metrics::labels::{DeletionFailureLabels, RepoLabels, RepoOutcomeLabels};
use crate::repo_view::RepoView;

/// The repository as the deletion core names it.
pub fn repo_ref(repo: &RepoView) -> RepoRef {
    match repo {
        RepoView::Namespaced(_) => RepoRef::repository(repo.namespace().unwrap_or_default(), repo.name(), repo.uid()),
        RepoView::Cluster(_) => RepoRef::cluster_repository(repo.name(), repo.uid()),
    }
}

fn status_common(repo: &RepoView) -> Option<&kopiur_api::repository::RepositoryStatus> {
    use crate::repo_view::RepoObject;
    match repo {
        RepoView::Namespaced(r) => r.status_common(),
        RepoView::Cluster(c) => c.status_common(),
    }
}

/// The repository uids an unpinned Snapshot could resolve to (its spec or policy).
fn resolves(ctx: &Context, s: &Snapshot) -> Vec<String> {
    let ns = s.namespace().unwrap_or_default();
    let policy = s.spec.policy_ref.as_ref().and_then(|pr| {
        let pns = pr.namespace.clone().unwrap_or_else(|| ns.clone());
        ctx.stores.policies.get(&ObjectRef::new(&pr.name).within(&pns))
    });
    let mut refs = Vec::new();
    if let Some(r) = &s.spec.repository {
        refs.push(r.clone());
    }
    if let Some(p) = &policy {
        refs.extend(p.spec.target.repositories().into_iter().cloned());
    }
    refs.iter().filter_map(|r| ctx.repository(&ns, r)).map(|r| r.uid()).collect()
}

fn policy_default(ctx: &Context, s: &Snapshot) -> Option<kopiur_api::snapshot_policy::DeletionPolicy> {
    let pr = s.spec.policy_ref.as_ref()?;
    let ns = pr.namespace.clone().or_else(|| s.namespace()).unwrap_or_default();
    ctx.stores.policies.get(&ObjectRef::new(&pr.name).within(&ns)).map(|p| p.spec.default_deletion_policy)
}

/// Every Snapshot being deleted, from the store (every namespace).
fn deleting(ctx: &Context) -> Vec<Arc<Snapshot>> {
    ctx.stores.snapshots.state().into_iter().filter(|s| s.meta().deletion_timestamp.is_some()).collect()
}

/// The breaker for one repository, from one store snapshot.
pub fn breaker_for(ctx: &Context, repo: &RepoView, dels: &[Arc<Snapshot>], now: DateTime<Utc>) -> BreakerState {
    let st = status_common(repo);
    let facts = RepoDeletionFacts {
        repo: repo_ref(repo),
        threshold: repo.common().deletion_protection.threshold,
        ack_annotation: repo.meta().annotations.as_ref().and_then(|a| a.get(annotation::ALLOW_MASS_DELETION)).cloned(),
        ack_recorded: st.and_then(|s| s.deletion_protection.as_ref()).and_then(|d| d.ack.clone()),
        held_condition_was_true: st.is_some_and(|s| {
            s.conditions.iter().any(|c| c.type_ == condition::MASS_DELETION_HELD && c.status == "True")
        }),
        deletions: dels
            .iter()
            .filter_map(|s| observe::pending_deletion(s, policy_default(ctx, s), || resolves(ctx, s)))
            .collect(),
    };
    breaker::evaluate(&facts, now)
}

/// Batch Jobs from the store (every repository, for the cluster-wide cap).
pub fn batch_jobs(ctx: &Context) -> Vec<(Arc<Job>, BatchJob)> {
    // Each known repository's home namespace, by uid: a batch Job counts only there.
    let mut homes: BTreeMap<String, String> = BTreeMap::new();
    for r in ctx.stores.repos.state() {
        let v = RepoView::Namespaced(r);
        homes.insert(v.uid(), v.home_namespace(&ctx.config.namespace));
    }
    for c in ctx.stores.crepos.state() {
        let v = RepoView::Cluster(c);
        homes.insert(v.uid(), v.home_namespace(&ctx.config.namespace));
    }
    ctx.stores
        .jobs
        .state()
        .into_iter()
        .filter_map(|j| {
            let repo_uid = j.labels().get(label::DELETE_REPO)?.clone();
            let members: Vec<String> = j
                .annotations()
                .get(annotation::DELETE_MEMBERS)
                .map(|m| m.split(',').filter(|x| !x.is_empty()).map(str::to_string).collect())
                .unwrap_or_default();
            let trusted = batch::trusted_batch(
                &j.namespace().unwrap_or_default(),
                &j.name_any(),
                j.owner_references(),
                &repo_uid,
                &members,
                homes.get(&repo_uid).map(String::as_str),
            );
            if !trusted {
                tracing::debug!(job = %j.name_any(), namespace = ?j.namespace(), "a Job labelled as a batch that the controller did not create: ignored");
                return None;
            }
            let phase = job_phase(&j);
            let outcomes = super::batch_outcome::recorded(&j, phase, &members);
            let b = BatchJob { name: j.name_any(), repo_uid, members, phase, outcomes };
            Some((j, b))
        })
        .collect()
}

fn job_phase(job: &Job) -> JobPhase {
    let conds = job.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    let at = |t: &str| {
        conds.iter().find(|c| c.type_ == t && c.status == "True").map(|c| c.last_transition_time.as_ref().map(|x| x.0))
    };
    let ts = |x: Option<k8s_openapi::jiff::Timestamp>| {
        x.and_then(|t| DateTime::<Utc>::from_timestamp(t.as_second(), 0)).unwrap_or_else(Utc::now)
    };
    if let Some(t) = at("Failed") {
        return JobPhase::Failed { at: ts(t) };
    }
    if let Some(t) = at("Complete") {
        return JobPhase::Complete { at: ts(t) };
    }
    JobPhase::Running
}

fn ns_terminating(ctx: &Context, ns: &str) -> bool {
    ctx.stores.namespaces.get(&ObjectRef::new(ns)).is_some_and(|n| n.metadata.deletion_timestamp.is_some())
}

fn schedule_link(ctx: &Context, s: &Snapshot, warm: bool) -> ScheduleLink {
    let Some((name, uid)) = observe::schedule_owner(s) else { return ScheduleLink::NotScheduleOwned };
    if !warm {
        return ScheduleLink::OwnedStoreCold;
    }
    let ns = s.namespace().unwrap_or_default();
    let live = match ctx.stores.schedules.get(&ObjectRef::new(&name).within(&ns)) {
        None => cascade::LiveSchedule::NotFound,
        Some(x) => cascade::LiveSchedule::Found {
            uid: x.uid().unwrap_or_default(),
            terminating: x.meta().deletion_timestamp.is_some(),
        },
    };
    ScheduleLink::OwnedStoreWarm(cascade::schedule_state(&uid, &live))
}

/// Whether the member's persisted decision disagrees with what the breaker now says, so its
/// own reconcile must run (held -> released on ack or count drop; undecided -> decide).
fn needs_replan(s: &Snapshot, state: &BreakerState) -> bool {
    let Some(uid) = s.uid() else { return false };
    let Some(ts) = observe::deletion_timestamp(s) else { return false };
    if !observe::finalizer_present(s) {
        return false;
    }
    let held_now = state.holding.contains(&uid) && !state.is_acked(ts);
    match observe::previous_record(s).map(|r| r.decision) {
        Some(DeletionDecision::Held) => !held_now,
        Some(DeletionDecision::Delete) => held_now,
        Some(DeletionDecision::Unknown(_)) | None => true,
    }
}

/// The dispatcher's memory: batches already counted (each terminal batch Job once, by uid).
#[derive(Default)]
pub struct DispatchMemory {
    counted: HashSet<String>,
    /// Failed batch Jobs (by uid) whose Pods were already read for a per-member answer.
    outcomes_read: HashSet<String>,
    /// Per repository uid: the backlog of Held members waiting to flip to Delete.
    flips: std::collections::HashMap<String, batch::FlipBacklog>,
    /// Batch Jobs this dispatcher created that the Job store may not show yet.
    created: BTreeMap<String, (BatchJob, DateTime<Utc>)>,
}

/// One pass over every repository. Returns Snapshots to enqueue.
pub async fn pass(
    ctx: &Context,
    tuning: &BatchTuning,
    schedules_warm: bool,
    memory: &mut DispatchMemory,
    now: DateTime<Utc>,
) -> Vec<ObjectRef<Snapshot>> {
    let dels = deleting(ctx);
    let jobs = batch_jobs(ctx);
    let store_jobs: Vec<BatchJob> = jobs.iter().map(|(_, b)| b.clone()).collect();
    let mut all_jobs = batch::with_created(&store_jobs, &mut memory.created, now);
    let mut enqueue: Vec<ObjectRef<Snapshot>> = Vec::new();
    let mut repos: Vec<RepoView> = ctx.stores.repos.state().into_iter().map(RepoView::Namespaced).collect();
    repos.extend(ctx.stores.crepos.state().into_iter().map(RepoView::Cluster));

    let mut held_series = BTreeMap::new();
    let mut pending_series = BTreeMap::new();
    for repo in &repos {
        let state = breaker_for(ctx, repo, &dels, now);
        let p = RepoPass { ctx, repo, uid: repo.uid(), rr: repo_ref(repo), state, tuning, schedules_warm, now };
        let key = RepoLabels {
            kind: repo.kind().to_string(),
            namespace: p.rr.namespace.clone().unwrap_or_default(),
            name: p.rr.name.clone(),
        };
        // Series exist while the repository shows deletion activity (0 after a wave drains)
        // and disappear with the repository.
        let active = p.state.pending_external > 0
            || p.state.held_count() > 0
            || status_common(repo).is_some_and(|s| s.deletion_protection.is_some());
        if active {
            pending_series.insert(key.clone(), i64::from(p.state.pending_external));
            held_series.insert(key, i64::from(p.state.held_count()));
        }
        if let Err(e) = write_repo_status(ctx, repo, &p.state, now).await {
            tracing::warn!(repository = %p.rr.display(), error = %e, "writing deletionProtection status failed");
        }
        let mine: Vec<&Arc<Snapshot>> =
            dels.iter().filter(|s| observe::binding(s, || resolves(ctx, s)).counts_against(&p.uid)).collect();
        // Members whose decision is about to change (e.g. an acked wave flipping Held ->
        // Delete one status write at a time): while any remain, only full batches fire, so a
        // released wave pools into as few Jobs (and connects) as possible.
        let mut flipping = 0usize;
        for s in &mine {
            if needs_replan(s, &p.state) {
                if observe::previous_record(s).is_some_and(|r| r.decision == DeletionDecision::Held) {
                    flipping += 1;
                }
                enqueue.push(ObjectRef::from_obj(s.as_ref()));
            }
        }
        // Bounded by progress: a backlog that stops shrinking must not stall partial batches.
        let (more_coming, backlog) = batch::pool_more_coming(memory.flips.get(&p.uid).copied(), flipping, now);
        match backlog {
            Some(b) => memory.flips.insert(p.uid.clone(), b),
            None => memory.flips.remove(&p.uid),
        };
        for (job, b) in jobs.iter().filter(|(_, b)| b.repo_uid == p.uid) {
            p.settle_batch(job, b, &dels, memory, &mut enqueue).await;
        }
        let fire = p.fire(&mine, &all_jobs);
        if !fire.is_empty() {
            p.create_batches(fire, more_coming, &mut all_jobs, memory).await;
        }
    }
    ctx.metrics.deletions_held.replace(held_series);
    ctx.metrics.deletions_pending_external.replace(pending_series);
    enqueue
}

/// One repository's part of a pass: what its steps share.
struct RepoPass<'a> {
    ctx: &'a Context,
    repo: &'a RepoView,
    uid: String,
    rr: RepoRef,
    state: BreakerState,
    tuning: &'a BatchTuning,
    schedules_warm: bool,
    now: DateTime<Utc>,
}

impl RepoPass<'_> {
    /// A batch Job: counted once terminal, a failed one's answer read, a complete one's members enqueued, reaped.
    async fn settle_batch(
        &self,
        job: &Job,
        b: &BatchJob,
        dels: &[Arc<Snapshot>],
        memory: &mut DispatchMemory,
        enqueue: &mut Vec<ObjectRef<Snapshot>>,
    ) {
        // Keyed by the Job's uid, not its name: a failed batch's retry reuses the name
        // and must be counted (and, failing again, nudge) as a batch of its own.
        if b.phase.is_terminal() && memory.counted.insert(job.uid().unwrap_or_else(|| b.name.clone())) {
            self.count_terminal(job, b).await;
        }
        // A failed batch says which members it released and which it refused: record it on
        // the Job once, then let its members decide from it.
        if matches!(b.phase, JobPhase::Failed { .. })
            && b.outcomes.is_empty()
            && memory.outcomes_read.insert(job.uid().unwrap_or_else(|| b.name.clone()))
        {
            match super::batch_outcome::record(self.ctx, job, &b.members).await {
                Ok(true) => enqueue.extend(
                    dels.iter()
                        .filter(|s| s.uid().is_some_and(|u| b.members.contains(&u)))
                        .map(|s| ObjectRef::from_obj(s.as_ref())),
                ),
                Ok(false) => {}
                // Read once: its members then re-batch and a new Job answers for them.
                Err(e) => tracing::warn!(job = %b.name, error = %e, "reading a failed batch's answer failed"),
            }
        }
        let holding = |m: &str| dels.iter().any(|s| s.uid().as_deref() == Some(m) && observe::finalizer_present(s));
        if matches!(b.phase, JobPhase::Complete { .. }) {
            for s in dels.iter().filter(|s| s.uid().is_some_and(|u| b.members.contains(&u))) {
                enqueue.push(ObjectRef::from_obj(s.as_ref()));
            }
        }
        match batch::reap(b, holding, self.tuning, self.now) {
            Reap::Keep | Reap::DeleteAt(_) => {}
            Reap::Delete => {
                let api: Api<Job> = Api::namespaced(self.ctx.client.clone(), &job.namespace().unwrap_or_default());
                let dp =
                    DeleteParams { propagation_policy: Some(PropagationPolicy::Background), ..DeleteParams::default() };
                match api.delete(&b.name, &dp).await {
                    Ok(_) => tracing::info!(job = %b.name, "batch delete Job reaped"),
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => tracing::warn!(job = %b.name, error = %e, "reaping a batch Job failed"),
                }
            }
        }
    }

    /// A terminal batch Job, counted once; a failed one also counts its members' failures,
    /// publishes a Warning Event and nudges the repository's reverify.
    async fn count_terminal(&self, job: &Job, b: &BatchJob) {
        let (ctx, repo, rr) = (self.ctx, self.repo, &self.rr);
        let outcome = match b.phase {
            JobPhase::Complete { .. } => "succeeded",
            JobPhase::Failed { .. } | JobPhase::Running => "failed",
        };
        let ns = rr.namespace.clone().unwrap_or_default();
        ctx.metrics.deletion_batches.inc(RepoOutcomeLabels {
            kind: repo.kind().into(),
            namespace: ns,
            name: rr.name.clone(),
            outcome: outcome.into(),
        });
        if outcome != "failed" {
            return;
        }
        for _ in &b.members {
            ctx.metrics.deletion_failures.inc(DeletionFailureLabels { namespace: job.namespace().unwrap_or_default() });
        }
        ctx.event(
            &repo_object_ref(repo),
            true,
            event::SNAPSHOT_DELETION_BATCH_FAILED,
            crate::deletion::messages::batch_failed(&b.name, b.members.len()),
        )
        .await;
        // No member was released; the repository re-probes sooner (behavior
        // docs/design/repository-breaker.md §3.8, docs/design/mass-deletion.md §6.4). A batch Job reports no failure class: the probe decides.
        if crate::repo_view::failure_nudge(true, false, None, repo.reverify_requested_at(), self.now)
            && let Err(e) = ctx.nudge(repo, self.now).await
        {
            tracing::warn!(repository = %rr.display(), error = %e, "stamping reverify-requested-at failed");
        }
    }

    /// The fire set: the members to delete now, each quiet window running from the last activity.
    fn fire(&self, mine: &[&Arc<Snapshot>], all_jobs: &[BatchJob]) -> fire_set::FireSet {
        let (ctx, repo) = (self.ctx, self.repo);
        let in_flight = batch::in_flight_members(all_jobs);
        // The dispatcher acts for the repository itself (its Jobs run in the repository's home
        // namespace): its phase alone decides. Tenancy is asked of each member below.
        let fctx = FireContext {
            repo_uid: &self.uid,
            repo_ready: crate::gating::own_phase_ready(status_common(repo).and_then(|s| s.phase.as_ref())),
            on_namespace_delete: repo.common().on_namespace_delete,
            breaker: &self.state,
            in_flight: &in_flight,
        };
        let candidates: Vec<FireCandidate> = mine
            .iter()
            .filter_map(|s| {
                let backup_active = backup_job_active(ctx, s);
                Some(FireCandidate {
                    uid: s.uid()?,
                    deletion_timestamp: observe::deletion_timestamp(s)?,
                    finalizer_present: observe::finalizer_present(s),
                    manifest: observe::manifest(s, backup_active),
                    decision: observe::previous_record(s).map(|r| r.decision),
                    binding: observe::binding(s, || resolves(ctx, s)),
                    pruned_by: observe::pruned_by(s),
                    skip: observe::skip(s),
                    policy: observe::effective_policy(s, policy_default(ctx, s)),
                    ns_terminating: ns_terminating(ctx, &s.namespace().unwrap_or_default()),
                    schedule: schedule_link(ctx, s, self.schedules_warm),
                    on_schedule_delete: observe::on_schedule_delete(s),
                    namespace_allowed: ctx.tenancy_allows(repo, &s.namespace().unwrap_or_default()),
                    source: observe::recorded_source(s),
                    refused: observe::deletion_refused(s),
                })
            })
            .collect();
        let mut fire = fire_set::select(&fctx, &candidates);
        // The quiet window runs from a member's last activity: its deletion or, later, the
        // decision that made it eligible (an ack releases members whose deletionTimestamp is
        // long past; they must still pool).
        for m in &mut fire.members {
            let decided = mine
                .iter()
                .find(|s| s.uid().as_deref() == Some(m.uid.as_str()))
                .and_then(|s| observe::previous_record(s))
                .and_then(|r| r.decided_at);
            if let Some(d) = decided {
                m.deletion_timestamp = m.deletion_timestamp.max(d);
            }
        }
        if !fire.excluded.is_empty() {
            tracing::debug!(repository = %self.rr.display(), excluded = ?fire.excluded, "members left out of the fire set");
        }
        fire
    }

    /// The fire set's batches created (only full ones while a flip backlog pools) and remembered.
    async fn create_batches(
        &self,
        fire: fire_set::FireSet,
        more_coming: bool,
        all_jobs: &mut Vec<BatchJob>,
        memory: &mut DispatchMemory,
    ) {
        let queue = [RepoQueue { repo_uid: self.uid.clone(), fire_set: fire }];
        let d = batch::next_batches(&queue, all_jobs, self.tuning, self.now);
        for spec in d.create.into_iter().filter(|b| !more_coming || b.members.len() >= self.tuning.max_members) {
            match create_batch(self.ctx, self.repo, &spec).await {
                Ok(()) => {
                    let members = spec.members.iter().map(|m| m.uid.clone()).collect();
                    let job = BatchJob {
                        name: spec.name.clone(),
                        repo_uid: self.uid.clone(),
                        members,
                        phase: JobPhase::Running,
                        outcomes: BTreeMap::new(),
                    };
                    all_jobs.push(job.clone());
                    memory.created.insert(spec.name.clone(), (job, self.now));
                }
                Err(e) => tracing::warn!(job = %spec.name, error = %e, "creating a batch delete Job failed"),
            }
        }
    }
}

fn backup_job_active(ctx: &Context, s: &Snapshot) -> bool {
    let name = kopiur_mover::job::job_name(&s.name_any());
    let job = ctx.stores.jobs.get(&ObjectRef::new(&name).within(&s.namespace().unwrap_or_default()));
    matches!(crate::run_job::job_state(job.as_deref()), crate::run_job::JobState::Active)
}

pub fn repo_object_ref(repo: &RepoView) -> k8s_openapi::api::core::v1::ObjectReference {
    match repo {
        RepoView::Namespaced(r) => r.object_ref(&()),
        RepoView::Cluster(c) => c.object_ref(&()),
    }
}

async fn create_batch(ctx: &Context, repo: &RepoView, spec: &batch::BatchSpec) -> Result<(), Error> {
    let job = super::job::batch_delete_job(spec, repo, &ctx.config).map_err(|e| match e {
        super::job::BuildError::Refused(r) => Error::MoverRefused(r),
        e @ super::job::BuildError::TooLarge(_) => Error::WorkSpecTooLarge(e.to_string()),
        e => Error::WorkSpec(e.to_string()),
    })?;
    let ns = repo.home_namespace(&ctx.config.namespace);
    // The deterministic member-set name is the single-flight lock.
    if ctx.create_mover_job(&ns, &job, kopiur_api::names::op::SNAPSHOT_DELETE_BATCH).await? {
        tracing::info!(job = %spec.name, members = spec.members.len(), "batch delete Job created");
    }
    Ok(())
}

/// `status.deletionProtection` and `MassDeletionHeld`, written only when they change (and
/// never on a repository that has never seen a deletion and holds nothing).
async fn write_repo_status(
    ctx: &Context,
    repo: &RepoView,
    state: &BreakerState,
    now: DateTime<Utc>,
) -> Result<(), Error> {
    let st = status_common(repo);
    let current_dp = st.and_then(|s| s.deletion_protection.clone());
    let desired_dp = state.status();
    let current_conds = st.map(|s| s.conditions.clone()).unwrap_or_default();
    let has_cond = current_conds.iter().any(|c| c.type_ == condition::MASS_DELETION_HELD);
    let quiet = desired_dp.pending_external == 0 && desired_dp.held == 0 && desired_dp.ack.is_none();
    if current_dp.is_none() && !has_cond && quiet {
        return Ok(());
    }
    let pc = state.condition();
    let cond = Cond {
        type_: pc.type_,
        status: if pc.status { CondStatus::True } else { CondStatus::False },
        reason: pc.reason.to_string(),
        message: pc.message,
    };
    let generation = repo.meta().generation.unwrap_or(0);
    let conds = crate::conditions::merge_conditions(&current_conds, &[cond], generation, now);
    if current_dp.as_ref() == Some(&desired_dp) && conds == current_conds {
        return Ok(());
    }
    // Only the fields this pass owns: the rest of the repository's status is the health loop's.
    let before = serde_json::json!({"deletionProtection": current_dp, "conditions": current_conds});
    let after = serde_json::json!({"deletionProtection": desired_dp, "conditions": conds});
    let guard = repo.meta().resource_version.clone();
    let write = match repo {
        RepoView::Namespaced(r) => {
            let api = Api::<kopiur_api::Repository>::namespaced(ctx.client.clone(), &r.namespace().unwrap_or_default());
            crate::status::write_status_value(&api, &repo.name(), guard.as_deref(), &before, &after)
                .await
                .step("patch repository status")?
        }
        RepoView::Cluster(_) => {
            let api = Api::<kopiur_api::ClusterRepository>::all(ctx.client.clone());
            crate::status::write_status_value(&api, &repo.name(), guard.as_deref(), &before, &after)
                .await
                .step("patch repository status")?
        }
    };
    // A concurrent status write: the next pass sees the new version and tries again.
    if !write.landed() {
        return Ok(());
    }
    let reference = repo_object_ref(repo);
    for ev in &state.events {
        ctx.event(&reference, ev.kind == crate::deletion::types::EventType::Warning, ev.reason, ev.message.clone())
            .await;
    }
    Ok(())
}

/// The dispatcher task: a pass every two seconds or when a member asks for one.
pub async fn run(ctx: Arc<Context>, snap_tx: tokio::sync::mpsc::Sender<ObjectRef<Snapshot>>) {
    let tuning = BatchTuning { global_cap: ctx.config.max_concurrent_delete_jobs, ..BatchTuning::default() };
    let mut memory = DispatchMemory::default();
    // The stores the passes read. Their flags wake every waiter (crate::synced); the guard only
    // bounds a store that never syncs (e.g. missing RBAC), which the dispatcher then treats
    // as cold.
    let t0 = std::time::Instant::now();
    let wait = std::time::Duration::from_secs(60);
    let synced = &ctx.stores.synced;
    let guard = |s: &crate::synced::Synced| {
        let s = s.clone();
        async move { tokio::time::timeout(wait, s.wait()).await.unwrap_or(false) }
    };
    let (snaps_ok, jobs_ok, mut schedules_warm) =
        tokio::join!(guard(&synced.snapshots), guard(&synced.jobs), guard(&synced.schedules));
    for (what, ok) in [("snapshots", snaps_ok), ("jobs", jobs_ok), ("schedules", schedules_warm)] {
        if !ok {
            tracing::warn!(store = what, "store not synced after 60 s; the dispatcher treats it as cold");
        }
    }
    tracing::info!(
        snaps_ok,
        jobs_ok,
        schedules_warm,
        waited_ms = u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX),
        "batch delete dispatcher started"
    );
    let mut seen: HashSet<ObjectRef<Snapshot>> = HashSet::new();
    loop {
        if !schedules_warm && synced.schedules.is_synced() {
            schedules_warm = true;
        }
        let enqueue = pass(&ctx, &tuning, schedules_warm, &mut memory, Utc::now()).await;
        // Enqueue each member once per change of need (the reconcile itself settles it).
        let now_set: HashSet<ObjectRef<Snapshot>> = enqueue.into_iter().collect();
        for r in now_set.iter() {
            if !seen.contains(r) {
                let _ = snap_tx.send(r.clone()).await;
            }
        }
        seen = now_set;
        tokio::select! {
            _ = ctx.dispatch.notified() => {}
            _ = tokio::time::sleep(std::time::Duration::from_secs(2)) => {}
        }
    }
}
