//! Snapshot observation for the run path: the policy, the repository and its gate, the Job
//! and its pods, the recipe and the mover Job it builds, the preflight checks, gathered into
//! [`RunFacts`]. Reads stores, and the API only where it must (a Job the store may lag, pods
//! of an active Job, the mover identity while a launch is possible).
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::batch::v1::Job;
use kopiur_api::names::{finalizer, reason};
use kopiur_api::shared::phase::SnapshotOrigin;
use kopiur_api::shared::{RepositoryKind, RepositoryRef};
use kopiur_api::snapshot::SnapshotPhase;
use kopiur_api::{Snapshot, SnapshotPolicy};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};

use super::job::{BuildError, Built, Recipe, backup_job, recipe};
use super::plan::{PolicyState, PreflightState, RunFacts, SourceState, WorkSpecState};
use crate::context::Context;
use crate::error::{ApiStep, Error};
use crate::labels::origin;
use crate::repo_view::RepoView;

/// What the run path read: the plan's [`RunFacts`], and what applying it needs.
pub(super) struct RunObserved {
    pub facts: RunFacts,
    pub origin: SnapshotOrigin,
    pub policy: Option<Arc<SnapshotPolicy>>,
    pub rref: Option<RepositoryRef>,
    pub repo: Option<RepoView>,
    pub recipe: Option<Recipe>,
    /// The backup Job as it would launch (or why it cannot be built).
    pub built: Option<Result<Built, BuildError>>,
    pub job_name: String,
    pub job: Option<Arc<Job>>,
}

pub(super) async fn observe(ctx: &Context, snap: &Snapshot, now: DateTime<Utc>) -> Result<RunObserved, Error> {
    let ns = snap.namespace().unwrap_or_default();
    let status = snap.status.clone().unwrap_or_default();
    let policy = policy_of(ctx, snap);
    let origin = origin(snap);
    let rref = repository_ref(snap, policy.as_deref());
    let repo = rref.as_ref().and_then(|r| ctx.repository(&ns, r));
    let gate = match &rref {
        Some(r) => ctx.gate(&ns, r),
        None => crate::gating::Gate::NotReady { repository: "(none)".into(), phase: "absent".into() },
    };
    let (job_name, job) = job(ctx, snap).await?;
    let policy_state = policy_state(snap, policy.as_deref());
    let (rec, recipe_error) = match policy.as_deref().map(|p| recipe(snap, p)) {
        Some(Ok(r)) => (Some(r), None),
        Some(Err(e)) => (None, Some(e)),
        None => (None, None),
    };
    let source = match &rec {
        Some(r) if ctx.stores.pvcs.get(&ObjectRef::new(&r.pvc).within(&ns)).is_none() => {
            SourceState::Missing { pvc: r.pvc.clone() }
        }
        Some(_) | None => SourceState::Present,
    };
    let built = match (&policy, &rec, &repo) {
        (Some(p), Some(r), Some(rv)) => {
            // Parked or refused no Job can launch, so the pods are not listed: an event on a
            // waiting Snapshot costs no LIST (docs/design/reconcile-shape.md §1.5).
            let launch_possible = matches!(status.phase, None | Some(SnapshotPhase::Pending))
                && job.is_none()
                && matches!(gate, crate::gating::Gate::Open)
                && matches!(source, SourceState::Present)
                && matches!(policy_state, PolicyState::Known)
                && recipe_error.is_none()
                && !policy_refused(ctx, snap, p)
                && ctx.missing_secrets(&ns, &rv.secret_names()).is_empty();
            Some(build(ctx, snap, p, r, rv, launch_possible).await)
        }
        // Nothing to build until the policy, its recipe and the repository are all known.
        (None, _, _) | (_, None, _) | (_, _, None) => None,
    };
    let work_spec = work_spec_state(ctx, snap, policy.as_deref(), built.as_ref(), recipe_error);
    let (preflight, preflight_timeout) = preflight_facts(ctx, policy.as_deref(), repo.as_ref(), now);
    let running = matches!(status.phase, Some(SnapshotPhase::Running));
    let job_facts = crate::run_job::observe(
        &ctx.client,
        job.as_ref(),
        running,
        snap.spec.failure_policy.as_deref(),
        status.failure.as_deref().cloned(),
        &status.conditions,
        now,
    )
    .await;
    let facts = RunFacts {
        phase: status.phase.clone(),
        discovered: matches!(origin, SnapshotOrigin::Discovered),
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
        completion_recorded: status.completion_recorded_at.is_some(),
        reverify_requested_at: repo.as_ref().and_then(RepoView::reverify_requested_at),
        inherited_from: built.as_ref().and_then(|b| b.as_ref().ok()).and_then(|b| b.inherited_from.clone()),
    };
    Ok(RunObserved { facts, origin, policy, rref, repo, recipe: rec, built, job_name, job })
}

/// The backup Job (owned by this Snapshot), from the store; while Running and absent from
/// the store, read from the API (the store may lag a Job just created).
async fn job(ctx: &Context, snap: &Snapshot) -> Result<(String, Option<Arc<Job>>), Error> {
    let ns = snap.namespace().unwrap_or_default();
    let job_name = kopiur_mover::job::job_name(&snap.name_any());
    let mut job = ctx.stores.jobs.get(&ObjectRef::new(&job_name).within(&ns));
    let running = matches!(snap.status.as_ref().and_then(|s| s.phase.as_ref()), Some(SnapshotPhase::Running));
    if job.is_none()
        && running
        && let Some(j) =
            Api::<Job>::namespaced(ctx.client.clone(), &ns).get_opt(&job_name).await.step("read backup Job")?
    {
        job = Some(Arc::new(j));
    }
    // Only our own Job counts (a same-named Job owned by something else is not ours).
    let job = job.filter(|j| j.owner_references().iter().any(|o| Some(&o.uid) == snap.meta().uid.as_ref()));
    Ok((job_name, job))
}

/// The policy as the run sees it. X (docs/design/api-contract.md §1.8): a policyRef into
/// another namespace is refused before anything is looked up or gated there (Failed
/// CrossNamespaceReference, no Job: the field is immutable). X/R rules against the recipe
/// (docs/design/api-contract.md §7.1): a Snapshot that could never run as written fails with the rule's reason.
fn policy_state(snap: &Snapshot, policy: Option<&SnapshotPolicy>) -> PolicyState {
    let ns = snap.namespace().unwrap_or_default();
    let policy_ns = snap.spec.policy_ref.as_ref().and_then(|p| p.namespace.as_deref());
    let cross_ns = crate::features::policy_ref_namespace("Snapshot", &ns, policy_ns);
    match (&snap.spec.policy_ref, policy) {
        (None, _) => PolicyState::NoPolicyRef,
        (Some(_), _) if cross_ns.is_some() => {
            PolicyState::Refused { reason: reason::CROSS_NAMESPACE_REFERENCE, message: cross_ns.unwrap_or_default() }
        }
        (Some(pr), Some(p)) => {
            let expanded = p.status.as_ref().and_then(|s| s.resolved.as_ref()).map(|r| r.sources.as_slice());
            match super::refusal::refusal(&snap.spec, &ns, &pr.name, &p.spec, expanded.unwrap_or(&[])) {
                Some((reason, message)) => PolicyState::Refused { reason, message },
                None => PolicyState::Known,
            }
        }
        (Some(p), None) => PolicyState::NotFound { name: p.name.clone() },
    }
}

/// Whether the policy refuses every run: a gating [next] field, suspended, an identity
/// collision, or a compressor kopia cannot write.
fn policy_refused(ctx: &Context, snap: &Snapshot, p: &SnapshotPolicy) -> bool {
    crate::features::snapshot_refusal(&snap.spec, &p.spec).is_err()
        || p.spec.suspend
        || crate::policy_rules::collision::collision(p, &ctx.stores.policies.state()).is_some()
        || crate::policy_rules::compression::unknown_compressor(&p.spec).is_some()
}

/// Builds the backup Job. The workload's identity and the volume's node are read only while
/// a launch is possible; privileged settings read the namespace's opt-in only when they ask
/// for it. A `Persistent` cache is one PVC per policy, reused by each of its backups.
async fn build(
    ctx: &Context,
    snap: &Snapshot,
    p: &SnapshotPolicy,
    r: &Recipe,
    rv: &RepoView,
    launch_possible: bool,
) -> Result<Built, BuildError> {
    let ns = snap.namespace().unwrap_or_default();
    let mut mf = crate::mover_settings::MoverFacts::default();
    if launch_possible {
        mf = crate::mover_settings::io::facts(
            &ctx.client,
            &ns,
            rv.common().mover_defaults.as_ref(),
            p.spec.mover.as_ref(),
            Some(&r.pvc),
        )
        .await;
    }
    mf.cache_claim = Some(crate::mover_settings::CacheClaim {
        name: crate::mover_settings::cache_claim_name(&p.name_any()),
        owner: crate::mover_job::owner_of(p),
    });
    use crate::mover_settings::PrivilegeVerdict;
    match backup_job(snap, p, r, rv, &ctx.config, &mf) {
        Err(BuildError::Refused(why)) if why.reason == reason::PRIVILEGED_MOVER_NOT_PERMITTED => {
            match crate::mover_settings::namespace_privilege(&ctx.client, &ns).await {
                PrivilegeVerdict::Permitted => {
                    mf.privileged_permitted = true;
                    backup_job(snap, p, r, rv, &ctx.config, &mf)
                }
                PrivilegeVerdict::PodSecurity(level) => {
                    Err(BuildError::Refused(crate::mover_settings::pod_security_refusal(&ns, &level)))
                }
                PrivilegeVerdict::NotOptedIn => Err(BuildError::Refused(why)),
            }
        }
        other => other,
    }
}

/// Whether the work spec can become a Job, and the policy-level refusals that park the run
/// (the last that applies wins, as each overrides the one before).
fn work_spec_state(
    ctx: &Context,
    snap: &Snapshot,
    policy: Option<&SnapshotPolicy>,
    built: Option<&Result<Built, BuildError>>,
    recipe_error: Option<String>,
) -> WorkSpecState {
    let mut work_spec = match (built, recipe_error) {
        (_, Some(e)) => WorkSpecState::Invalid { message: e },
        (Some(Ok(_)), None) => WorkSpecState::Fits,
        (Some(Err(BuildError::TooLarge(n))), None) => WorkSpecState::TooLarge { bytes: *n },
        (Some(Err(BuildError::Invalid(m))), None) => WorkSpecState::Invalid { message: m.clone() },
        (Some(Err(BuildError::Refused(r))), None) => {
            WorkSpecState::MoverRefused { reason: r.reason, message: r.message.clone() }
        }
        (None, None) => WorkSpecState::Invalid { message: "the repository is not known yet".into() },
    };
    let Some(p) = policy else { return work_spec };
    // A gating [next] field on the Snapshot or its policy (docs/design/api-contract.md §1.9): Stalled
    // FeatureNotImplemented, no Job; it heals when the field goes.
    if let Err(message) = crate::features::snapshot_refusal(&snap.spec, &p.spec) {
        work_spec = WorkSpecState::MoverRefused { reason: crate::features::FEATURE_NOT_IMPLEMENTED, message };
    }
    // A suspended policy (docs/design/api-contract.md §6.1): new runs park with PolicySuspended, no Job; a run
    // in flight finishes. Resumes when spec.suspend is false.
    if p.spec.suspend {
        work_spec = WorkSpecState::MoverRefused {
            reason: reason::POLICY_SUSPENDED,
            message: format!(
                "SnapshotPolicy {} is suspended (spec.suspend); this Snapshot waits until it is not",
                p.name_any()
            ),
        };
    }
    // A policy refused by the identity-collision rule runs nothing (docs/design/api-contract.md §6.5): its new
    // Snapshots park Stalled with the rule's message until the collision is resolved. Decided
    // here from the policy store (the same pure rule the policy reconciler writes), so a
    // Snapshot created before the policy's status lands is refused too.
    if let Some(m) = crate::policy_rules::collision::collision(p, &ctx.stores.policies.state()) {
        work_spec = WorkSpecState::MoverRefused {
            reason: crate::policy_rules::collision::IDENTITY_COLLISION,
            message: format!("SnapshotPolicy {}: {m}", p.name_any()),
        };
    }
    // A policy writing under another namespace's hostname on a shared repository without its
    // grant runs nothing (audit 2.8): the same pure rule the policy reconciler stalls on.
    if let Some(m) = crate::policy_rules::hostname::check(p, &ctx.stores.namespaces) {
        work_spec = WorkSpecState::MoverRefused {
            reason: reason::CROSS_NAMESPACE_REFERENCE,
            message: format!("SnapshotPolicy {}: {m}", p.name_any()),
        };
    }
    // R (docs/design/api-contract.md §6.1): a compressor kopia cannot write with parks the run Stalled
    // InvalidSpec, no Job, until the policy names a known one.
    if let Some(m) = crate::policy_rules::compression::unknown_compressor(&p.spec) {
        work_spec =
            WorkSpecState::MoverRefused { reason: reason::INVALID_SPEC, message: format!("its SnapshotPolicy: {m}") };
    }
    work_spec
}

fn policy_of(ctx: &Context, snap: &Snapshot) -> Option<Arc<SnapshotPolicy>> {
    let pr = snap.spec.policy_ref.as_ref()?;
    let ns = pr.namespace.clone().or_else(|| snap.namespace()).unwrap_or_default();
    ctx.stores.policies.get(&ObjectRef::new(&pr.name).within(&ns))
}

/// The policy's preflight checks, evaluated against the repository's status and its
/// Maintenances from the stores, and the timeout (`spec.preflight.timeout`; zero = forever).
fn preflight_facts(
    ctx: &Context,
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
