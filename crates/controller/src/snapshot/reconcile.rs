//! Snapshot reconciler: observe (stores, the CR) -> `plan::plan` -> apply (finalizer, one
//! status write, Job, Events, nudge). The deletion path lives in `delete.rs`.
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::batch::v1::Job;
use kopiur_api::names::{annotation, event, finalizer, label, reason};
use kopiur_api::shared::phase::SnapshotOrigin;
use kopiur_api::shared::status::{ResolvedRepository, Timing};
use kopiur_api::shared::{FailurePolicy, RepositoryKind, RepositoryRef};
use kopiur_api::snapshot::{JobRef, SnapshotPhase, SnapshotResolved};
use kopiur_api::{Snapshot, SnapshotPolicy};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};

use super::ctx::{PipelineCtx, RepoView};
use super::job::{BuildError, Recipe, backup_job, recipe};
use super::plan::{
    Completion, JobState, PolicyState, PreflightState, RunFacts, SourceState, Step, Verdict, WorkSpecState, plan,
};
use crate::error::Error;

pub fn job_state(job: Option<&Job>) -> JobState {
    let Some(job) = job else { return JobState::Absent };
    let conds = job.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    if let Some(c) = conds.iter().find(|c| c.type_ == "Failed" && c.status == "True") {
        return JobState::Failed { reason: c.reason.clone().unwrap_or_else(|| "Failed".into()) };
    }
    if conds.iter().any(|c| c.type_ == "Complete" && c.status == "True") {
        let at = job.status.as_ref().and_then(|s| s.completion_time.as_ref()).map(|t| t.0);
        return JobState::Complete {
            at: at.map(|t| DateTime::<Utc>::from_timestamp(t.as_second(), 0).unwrap_or_default()),
        };
    }
    JobState::Active
}

/// The repository a Snapshot targets: the pin, else `spec.repository`, else the policy's
/// first repository.
pub fn repository_ref(snap: &Snapshot, policy: Option<&SnapshotPolicy>) -> Option<RepositoryRef> {
    if let Some(r) = snap.status.as_ref().and_then(|s| s.resolved.as_ref()).and_then(|r| r.repository.as_ref()) {
        return Some(RepositoryRef { name: r.name.clone(), kind: r.kind, namespace: r.namespace.clone() });
    }
    if let Some(r) = &snap.spec.repository {
        return Some(r.clone());
    }
    policy.and_then(|p| p.spec.target.repositories().first().map(|r| (*r).clone()))
}

fn policy_of(ctx: &PipelineCtx, snap: &Snapshot) -> Option<Arc<SnapshotPolicy>> {
    let pr = snap.spec.policy_ref.as_ref()?;
    let ns = pr.namespace.clone().or_else(|| snap.namespace()).unwrap_or_default();
    ctx.stores.policies.get(&ObjectRef::new(&pr.name).within(&ns))
}

/// The policy's preflight checks, evaluated against the repository's status and its
/// Maintenances from the stores, and the timeout (`spec.preflight.timeout`; zero = forever).
fn preflight_facts(
    ctx: &PipelineCtx,
    policy: Option<&SnapshotPolicy>,
    repo: Option<&RepoView>,
    now: DateTime<Utc>,
) -> (PreflightState, chrono::Duration) {
    let default_timeout = chrono::Duration::minutes(10);
    let Some(p) = policy else { return (PreflightState::NotConfigured, default_timeout) };
    let spec = p.spec.preflight.as_ref();
    let timeout = spec
        .map(|x| {
            i64::try_from(x.timeout.as_secs())
                .ok()
                .and_then(chrono::Duration::try_seconds)
                .unwrap_or(chrono::Duration::MAX)
        })
        .unwrap_or(default_timeout);
    let compiled = match crate::preflight::compile_policy(spec) {
        Ok(c) if c.is_empty() => return (PreflightState::NotConfigured, timeout),
        Ok(c) => c,
        Err(message) => return (PreflightState::Invalid { policy: p.name_any(), message }, timeout),
    };
    let maintenance = if compiled.uses_maintenance() {
        if !ctx.stores.synced.maintenances.is_synced() {
            return (PreflightState::WaitingForData, timeout);
        }
        let mine: Vec<_> = match repo {
            Some(rv) => ctx
                .stores
                .maintenances
                .state()
                .into_iter()
                .filter(|m| m.meta().deletion_timestamp.is_none() && maintains(m, rv))
                .collect(),
            None => Vec::new(),
        };
        crate::preflight::maintenance_vars(mine.iter().filter_map(|m| m.status.as_ref()), now)
    } else {
        crate::preflight::MaintenanceVars::default()
    };
    let vars = crate::preflight::Vars {
        repository: crate::preflight::repository_vars(repo.and_then(RepoView::status), now),
        maintenance,
    };
    let state = match crate::preflight::evaluate(&compiled, &vars) {
        crate::preflight::Outcome::Passed => PreflightState::Passed,
        crate::preflight::Outcome::Failed { check, message } => PreflightState::Failed { check, message },
    };
    (state, timeout)
}

/// Whether a Maintenance maintains the repository (its `spec.repository` names it).
fn maintains(m: &kopiur_api::Maintenance, rv: &RepoView) -> bool {
    let r = &m.spec.repository;
    r.name == rv.name()
        && match (r.kind, rv) {
            (RepositoryKind::Repository, RepoView::Namespaced(_)) => {
                r.namespace.clone().or_else(|| m.namespace()) == rv.namespace()
            }
            (RepositoryKind::ClusterRepository, RepoView::Cluster(_)) => true,
            (RepositoryKind::Repository, RepoView::Cluster(_))
            | (RepositoryKind::ClusterRepository, RepoView::Namespaced(_)) => false,
        }
}

pub fn origin(snap: &Snapshot) -> SnapshotOrigin {
    if let Some(o) = snap.status.as_ref().and_then(|s| s.origin.clone()) {
        return o;
    }
    match snap.labels().get(label::ORIGIN).map(String::as_str) {
        Some("scheduled") => SnapshotOrigin::Scheduled,
        Some("discovered") => SnapshotOrigin::Discovered,
        Some("adopted") => SnapshotOrigin::Adopted,
        Some("replicated") => SnapshotOrigin::Replicated,
        Some(_) | None => SnapshotOrigin::Manual,
    }
}

pub async fn reconcile(snap: Arc<Snapshot>, ctx: Arc<PipelineCtx>) -> Result<Action, Error> {
    ctx.metrics.reconciliations.inc(&["Snapshot"]);
    let now = Utc::now();
    if snap.meta().deletion_timestamp.is_some() {
        return super::delete::reconcile_deletion(&snap, &ctx, now).await;
    }
    run_path(&snap, &ctx, now).await
}

async fn run_path(snap: &Snapshot, ctx: &PipelineCtx, now: DateTime<Utc>) -> Result<Action, Error> {
    let ns = snap.namespace().unwrap_or_default();
    let name = snap.name_any();
    let status = snap.status.clone().unwrap_or_default();
    let policy = policy_of(ctx, snap);
    let origin = origin(snap);
    let discovered = matches!(origin, SnapshotOrigin::Discovered);
    let rref = repository_ref(snap, policy.as_deref());
    let repo = rref.as_ref().and_then(|r| ctx.repository(&ns, r));
    let gate = match &rref {
        Some(r) => ctx.gate(&ns, r),
        None => crate::gating::Gate::NotReady { repository: "(none)".into(), phase: "absent".into() },
    };
    let job_name = kopiur_mover::job::job_name(&name);
    let mut job = ctx.stores.jobs.get(&ObjectRef::new(&job_name).within(&ns));
    let phase = status.phase.clone();
    if job.is_none() && matches!(phase, Some(SnapshotPhase::Running)) {
        // The store may lag a Job we just created; ask the API before calling it lost.
        if let Some(j) = Api::<Job>::namespaced(ctx.client.clone(), &ns).get_opt(&job_name).await? {
            job = Some(Arc::new(j));
        }
    }
    // Only our own Job counts (a same-named Job owned by something else is not ours).
    let job = job.filter(|j| j.owner_references().iter().any(|o| Some(&o.uid) == snap.meta().uid.as_ref()));

    // X (docs/design/api-contract.md §1.8): a policyRef into another namespace is refused before anything is
    // looked up or gated there: Failed CrossNamespaceReference, no Job (the field is immutable,
    // so the Snapshot could never run as written).
    let policy_ns = snap.spec.policy_ref.as_ref().and_then(|p| p.namespace.as_deref());
    let cross_ns = crate::features::policy_ref_namespace("Snapshot", &ns, policy_ns);
    let policy_state = match (&snap.spec.policy_ref, &policy) {
        (None, _) => PolicyState::NoPolicyRef,
        (Some(_), _) if cross_ns.is_some() => PolicyState::Refused {
            reason: reason::CROSS_NAMESPACE_REFERENCE,
            message: cross_ns.clone().unwrap_or_default(),
        },
        // X/R rules against the recipe (docs/design/api-contract.md §7.1): a Snapshot that could never run as
        // written fails with the rule's reason.
        (Some(pr), Some(p)) => {
            let expanded = p.status.as_ref().and_then(|s| s.resolved.as_ref()).map(|r| r.sources.as_slice());
            match super::refusal::refusal(&snap.spec, &ns, &pr.name, &p.spec, expanded.unwrap_or(&[])) {
                Some((reason, message)) => PolicyState::Refused { reason, message },
                None => PolicyState::Known,
            }
        }
        (Some(p), None) => PolicyState::NotFound { name: p.name.clone() },
    };
    let mut rec: Option<Recipe> = None;
    let mut recipe_error = None;
    if let Some(p) = &policy {
        match recipe(snap, p) {
            Ok(r) => rec = Some(r),
            Err(e) => recipe_error = Some(e),
        }
    }
    let source = match &rec {
        Some(r) => {
            let present = ctx.stores.pvcs.get(&ObjectRef::new(&r.pvc).within(&ns)).is_some();
            if present { SourceState::Present } else { SourceState::Missing { pvc: r.pvc.clone() } }
        }
        None => SourceState::Present,
    };
    let built = if let (Some(p), Some(r), Some(rv)) = (&policy, &rec, &repo) {
        // The workload's identity and the volume's node are read only while a launch is possible.
        let mut mf = crate::mover_settings::MoverFacts::default();
        // A `Persistent` cache is one PVC per policy, reused by each of its backups.
        let cache_claim = crate::mover_settings::CacheClaim {
            name: crate::mover_settings::cache_claim_name(&p.name_any()),
            owner: super::job::owner_of(p.as_ref()),
        };
        // Parked or refused (repository gate closed, source volume or Secrets missing, policy
        // unknown, refused, suspended or colliding) no Job can launch, so the pods are not
        // listed: an event on a waiting Snapshot costs no LIST (docs/design/reconcile-shape.md §1.5).
        let refused = crate::features::snapshot_refusal(&snap.spec, &p.spec).is_err()
            || p.spec.suspend
            || crate::policy_rules::collision::collision(p, &ctx.stores.policies.state()).is_some()
            || crate::policy_rules::compression::unknown_compressor(&p.spec).is_some();
        let launch_possible = matches!(gate, crate::gating::Gate::Open)
            && matches!(source, SourceState::Present)
            && matches!(policy_state, PolicyState::Known)
            && recipe_error.is_none()
            && !refused
            && ctx.missing_secrets(&ns, &rv.secret_names()).is_empty();
        if matches!(phase, None | Some(SnapshotPhase::Pending)) && job.is_none() && launch_possible {
            mf = crate::mover_settings::io::facts(
                &ctx.client,
                &ns,
                rv.common().mover_defaults.as_ref(),
                p.spec.mover.as_ref(),
                Some(&r.pvc),
            )
            .await;
        }
        mf.cache_claim = Some(cache_claim);
        let first = backup_job(snap, p, r, rv, &ctx.config, &mf);
        // Privileged settings: read the namespace's opt-in only when they ask for it.
        Some(match first {
            Err(BuildError::Refused(ref why))
                if why.reason == kopiur_api::names::reason::PRIVILEGED_MOVER_NOT_PERMITTED
                    && crate::mover_settings::namespace_permits_privileged(&ctx.client, &ns).await =>
            {
                mf.privileged_permitted = true;
                backup_job(snap, p, r, rv, &ctx.config, &mf)
            }
            other => other,
        })
    } else {
        None
    };
    let work_spec = match (&built, &recipe_error) {
        (_, Some(e)) => WorkSpecState::Invalid { message: e.clone() },
        (Some(Ok(_)), None) => WorkSpecState::Fits,
        (Some(Err(BuildError::TooLarge(n))), None) => WorkSpecState::TooLarge { bytes: *n },
        (Some(Err(BuildError::Invalid(m))), None) => WorkSpecState::Invalid { message: m.clone() },
        (Some(Err(BuildError::Refused(r))), None) => {
            WorkSpecState::MoverRefused { reason: r.reason, message: r.message.clone() }
        }
        (None, None) => WorkSpecState::Invalid { message: "the repository is not known yet".into() },
    };
    // A gating [next] field on the Snapshot or its policy (docs/design/api-contract.md §1.9): Stalled
    // FeatureNotImplemented, no Job; it heals when the field goes.
    let work_spec = match policy.as_ref().and_then(|p| crate::features::snapshot_refusal(&snap.spec, &p.spec).err()) {
        Some(message) => WorkSpecState::MoverRefused { reason: crate::features::FEATURE_NOT_IMPLEMENTED, message },
        None => work_spec,
    };
    // A suspended policy (docs/design/api-contract.md §6.1): new runs park with PolicySuspended, no Job; a run
    // in flight finishes. Resumes when spec.suspend is false.
    let work_spec = match policy.as_ref().filter(|p| p.spec.suspend) {
        Some(p) => WorkSpecState::MoverRefused {
            reason: "PolicySuspended",
            message: format!(
                "SnapshotPolicy {} is suspended (spec.suspend); this Snapshot waits until it is not",
                p.name_any()
            ),
        },
        None => work_spec,
    };
    // A policy refused by the identity-collision rule runs nothing (docs/design/api-contract.md §6.5): its new
    // Snapshots park Stalled with the rule's message until the collision is resolved. Decided
    // here from the policy store (the same pure rule the policy reconciler writes), so a
    // Snapshot created before the policy's status lands is refused too.
    let work_spec = match policy.as_ref().and_then(|p| {
        crate::policy_rules::collision::collision(p, &ctx.stores.policies.state()).map(|m| (p.name_any(), m))
    }) {
        Some((p, m)) => WorkSpecState::MoverRefused {
            reason: crate::policy_rules::collision::IDENTITY_COLLISION,
            message: format!("SnapshotPolicy {p}: {m}"),
        },
        None => work_spec,
    };
    // R (docs/design/api-contract.md §6.1): a compressor kopia cannot write with parks the run Stalled
    // InvalidSpec, no Job, until the policy names a known one.
    let work_spec = match policy.as_ref().and_then(|p| crate::policy_rules::compression::unknown_compressor(&p.spec)) {
        Some(m) => {
            WorkSpecState::MoverRefused { reason: reason::INVALID_SPEC, message: format!("its SnapshotPolicy: {m}") }
        }
        None => work_spec,
    };
    let (preflight, preflight_timeout) = preflight_facts(ctx, policy.as_deref(), repo.as_ref(), now);
    let pod_startup_deadline = chrono::Duration::seconds(FailurePolicy::resolved_pod_startup_deadline_seconds(
        snap.spec.failure_policy.as_deref(),
    ));
    let job_facts = job_state(job.as_deref());
    let mut pods = Verdict::NotWedged { recheck_at: None };
    // Pods are only read for an active Job the Snapshot is running (a terminal phase never looks).
    if matches!(phase, Some(SnapshotPhase::Running))
        && job_facts == JobState::Active
        && let Some(j) = &job
    {
        pods = crate::wedged::io::check(&ctx.client, j, pod_startup_deadline, now).await;
    }
    let facts = RunFacts {
        phase: phase.clone(),
        discovered,
        has_finalizer: snap.finalizers().iter().any(|f| f == finalizer::SNAPSHOT_CLEANUP),
        policy: policy_state,
        gate,
        repository_read_only: repo.as_ref().is_some_and(RepoView::read_only),
        preflight,
        preflight_timeout,
        preflight_since: status.preflight_since,
        missing_secrets: repo.as_ref().map(|rv| ctx.missing_secrets(&ns, &rv.secret_names())).unwrap_or_default(),
        source,
        source_missing_since: status.source_missing_since,
        work_spec,
        job: job_facts,
        job_created: job.as_deref().and_then(crate::wedged::io::job_created),
        pod_startup_deadline,
        pods,
        failure: status.failure.as_deref().cloned(),
        ready_reason: status.conditions.iter().find(|c| c.type_ == "Ready").map(|c| c.reason.clone()),
        completion_recorded: status.completion_recorded_at.is_some(),
        reverify_requested_at: repo.as_ref().and_then(RepoView::reverify_requested_at),
        inherited_from: built.as_ref().and_then(|b| b.as_ref().ok()).and_then(|b| b.inherited_from.clone()),
    };
    let d = plan(&facts, now);
    let api: Api<Snapshot> = Api::namespaced(ctx.client.clone(), &ns);
    // The `<name>-pin` Job (docs/design/api-contract.md §7.1): runs whatever the backup's phase; never the backup Job.
    let pin = super::pin::reconcile(ctx, snap, repo.as_ref(), &facts.gate, &facts.missing_secrets).await?;

    let mut fresh: Option<Snapshot> = None;
    if d.add_finalizer {
        let mut fins = snap.finalizers().to_vec();
        fins.push(finalizer::SNAPSHOT_CLEANUP.to_string());
        let body = serde_json::json!({"metadata": {"finalizers": fins, "resourceVersion": snap.resource_version()}});
        fresh = Some(api.patch(&name, &PatchParams::default(), &Patch::Merge(&body)).await?);
    }

    // The Job first: a lost status write is healed by adopting the Job next time, while a
    // Running status without a Job would read as a lost Job.
    if d.step == Step::Launch
        && let Some(Ok(b)) = built
    {
        ctx.ensure_mover_rbac(&ns).await?;
        if let Some(pvc) = &b.cache_claim {
            // The policy's cache PVC: created once, then reused as it is (a PVC's class and size
            // are not edited in place; delete it to resize).
            match Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(ctx.client.clone(), &ns)
                .create(&PostParams::default(), pvc)
                .await
            {
                Ok(_) => {
                    tracing::info!(snapshot = %name, namespace = %ns, pvc = %pvc.name_any(), "created the policy's kopia cache PVC")
                }
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
        match Api::<Job>::namespaced(ctx.client.clone(), &ns).create(&PostParams::default(), &b.job).await {
            Ok(_) => {
                ctx.metrics.jobs_created.inc(&["backup", &ns]);
                tracing::info!(snapshot = %name, namespace = %ns, bytes = b.bytes, "launched backup Job");
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    // The desired status.
    let mut next = status.clone();
    if let Some(p) = &d.phase {
        next.phase = Some(p.clone());
    }
    if next.origin.is_none() {
        next.origin = Some(origin.clone());
    }
    next.observed_generation = snap.meta().generation;
    next.source_missing_since = d.source_missing_since;
    next.preflight_since = d.preflight_since;
    if let Some(f) = &d.failure {
        next.failure = Some(Box::new(f.clone()));
    }
    // Pin once: repository (with uid), identity, policy, deletion policy.
    if next.resolved.is_none()
        && let (Some(r), Some(rv), Some(p), Some(rc)) = (&rref, &repo, &policy, &rec)
    {
        next.resolved = Some(SnapshotResolved {
            repository: Some(ResolvedRepository {
                kind: r.kind,
                namespace: match r.kind {
                    RepositoryKind::Repository => rv.namespace(),
                    RepositoryKind::ClusterRepository => None,
                },
                name: rv.name(),
                uid: Some(rv.uid()),
            }),
            policy: Some(p.name_any()),
            identity: Some(rc.identity.clone()),
            deletion_policy: Some(snap.spec.deletion_policy.unwrap_or(p.spec.default_deletion_policy)),
            ..SnapshotResolved::default()
        });
    }
    if d.step == Step::Launch {
        next.job = Some(Box::new(JobRef { name: job_name.clone(), attempts: 0 }));
        next.timing = Some(Timing { start_time: Some(now), ..Timing::default() });
    }
    if d.record_completion.is_some() {
        next.completion_recorded_at = Some(now);
    }
    // A controller-side refusal: terminal Failed without a Job, counted on the transition.
    if matches!(next.phase, Some(SnapshotPhase::Failed))
        && !matches!(status.phase, Some(SnapshotPhase::Failed))
        && status.job.is_none()
        && d.step != Step::Launch
    {
        let reason = d.conditions.iter().find(|c| c.type_ == "Ready").map(|c| c.reason.clone()).unwrap_or_default();
        ctx.metrics.snapshot_refusals.inc(&[&ns, &name, &reason]);
    }
    next.conditions = crate::conditions::merge_conditions(
        &status.conditions,
        &d.conditions,
        snap.meta().generation.unwrap_or(0),
        now,
    );
    super::pin::apply_to_status(&mut next, &pin, snap.meta().generation.unwrap_or(0), now);
    let written = crate::status::write_status(&api, fresh.as_ref().unwrap_or(snap), &status, &next).await?.landed();
    // docs/design/api-contract.md §7.6: a discovered row whose spec is not `Retain` (or carries `onScheduleDelete`) is
    // forced to Retain with one Warning `InvalidSpec` per generation: emitted by the reconcile
    // whose status write records that generation as observed.
    if written
        && discovered
        && status.observed_generation != snap.meta().generation
        && let Some(message) = super::plan::discovered_row_violation(&snap.spec)
    {
        ctx.event(&snap.object_ref(&()), true, event::INVALID_SPEC, message).await;
    }
    // After the Failed status landed: deleting first would read as a lost Job if the write lost
    // a conflict. A failed delete does not hold back the Event below; the requeue retries it.
    if d.delete_job
        && written
        && let Some(j) = &job
    {
        crate::wedged::io::delete_job(&ctx.client, j).await;
    }

    let reference = snap.object_ref(&());
    if let Some((reason, note)) = &d.warning {
        ctx.event(&reference, true, reason, note.clone()).await;
    }
    // A completion whose status write lost a conflict is decided again on the newer object;
    // announcing it now as well would emit its Event twice.
    match d.record_completion.filter(|_| written) {
        Some(Completion::Succeeded) => {
            let id = next.snapshot.as_ref().and_then(|s| s.kopia_snapshot_id.clone()).unwrap_or_default();
            ctx.event(&reference, false, "SnapshotSucceeded", format!("kopia snapshot {id} created")).await;
        }
        Some(Completion::Unchanged) => {
            ctx.event(&reference, false, "SnapshotSucceeded", "source unchanged; no new manifest".into()).await;
        }
        Some(Completion::Failed) => {
            let msg = next.failure.as_ref().and_then(|f| f.message.clone()).unwrap_or_default();
            let wedged = d.conditions.iter().any(|c| c.type_ == "Ready" && c.reason == reason::MOVER_POD_WEDGED);
            let why = if wedged { event::MOVER_POD_WEDGED } else { event::SNAPSHOT_FAILED };
            ctx.event(&reference, true, why, msg).await;
        }
        None => {}
    }
    if d.nudge
        && let Some(rv) = &repo
        && let Err(e) = ctx.nudge(rv, now).await
    {
        tracing::warn!(error = %e, snapshot = %name, "stamping reverify-requested-at failed");
    }
    if let Some(after) = pin.requeue_after.filter(|_| d.requeue_after.is_none() && d.step == Step::Idle) {
        return Ok(Action::requeue(after.to_std().unwrap_or_default()));
    }
    Ok(match d.requeue_after {
        Some(after) => Action::requeue(after.to_std().unwrap_or_default().max(std::time::Duration::from_secs(1))),
        None => match d.step {
            Step::AwaitJob | Step::Launch => Action::requeue(std::time::Duration::from_secs(300)),
            Step::Idle => Action::await_change(),
        },
    })
}

/// Whether the Snapshot carries `skip-snapshot-cleanup`.
pub fn skip_cleanup(snap: &Snapshot) -> bool {
    snap.annotations().contains_key(annotation::SKIP_SNAPSHOT_CLEANUP)
}
