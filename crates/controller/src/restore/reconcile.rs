//! Restore reconciler: observe (source rows and the target PVC from stores) -> `plan::plan` ->
//! apply (pin, target PVC, Job, one status write, nudge).
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kopiur_api::restore::{
    Resolution, RestorePhase, RestoreResolved, RestoreSource, RestoreTarget, RestoreTargetStatus,
};
use kopiur_api::shared::status::ResolvedRepository;
use kopiur_api::shared::{ObjectRef as ApiObjectRef, RepositoryRef};
use kopiur_api::snapshot::SnapshotPhase;
use kopiur_api::{Restore, Snapshot};
use kopiur_kopia::cmd::{CacheSizes, Identity, RestoreOptions as KopiaRestoreOptions};
use kopiur_mover::job::{JobInput, PvcMount, RESTORE_MOUNT, build_job};
use kopiur_mover::workspec::{
    DEFAULT_COMMAND_TIMEOUT_SECONDS, DEFAULT_HEARTBEAT_SECONDS, Operation, RepositoryInfo, ResolveIdentity, RestoreOp,
    SCHEMA_VERSION, TargetRef, WorkSpec,
};
use kube::api::PostParams;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};

use super::plan::{Candidate, Credentials, Referent, RestoreFacts, Step, TargetState, Verdict, plan};
use crate::error::Error;
use crate::snapshot::ctx::{PipelineCtx, RepoView};
use crate::snapshot::job::owner_of;
use crate::snapshot::plan::JobState;
use crate::snapshot::reconcile::job_state;

/// Annotation on a PVC this Restore created (its uid), so a rerun recognizes its own target.
pub const CREATED_BY: &str = "kopiur.home-operations.com/restore-uid";

fn target_name(r: &Restore) -> Option<String> {
    match &r.spec.target {
        RestoreTarget::Pvc(p) => Some(p.name.clone()),
        RestoreTarget::PvcRef(o) => Some(o.name.clone()),
        RestoreTarget::Populator(_) | RestoreTarget::StreamExec(_) => None,
    }
}

/// The newest Snapshot of a policy that owns a manifest, at or before `as_of`, skipping
/// `offset` newer ones.
fn from_policy(
    ctx: &PipelineCtx,
    ns: &str,
    name: &str,
    as_of: Option<DateTime<Utc>>,
    offset: usize,
) -> Option<Arc<Snapshot>> {
    let mut rows: Vec<(DateTime<Utc>, Arc<Snapshot>)> = ctx
        .stores
        .snapshots
        .state()
        .into_iter()
        .filter(|s| s.namespace().as_deref() == Some(ns) && s.meta().deletion_timestamp.is_none())
        .filter(|s| s.spec.policy_ref.as_ref().is_some_and(|p| p.name == name))
        .filter(|s| {
            s.status
                .as_ref()
                .and_then(|st| st.phase.as_ref())
                .is_some_and(|p| matches!(p, SnapshotPhase::Succeeded | SnapshotPhase::Discovered))
        })
        .filter_map(|s| {
            let end = s.status.as_ref()?.timing.as_ref()?.end_time?;
            s.status.as_ref()?.snapshot.as_ref()?.kopia_snapshot_id.as_ref()?;
            Some((end, s))
        })
        .filter(|(end, _)| as_of.is_none_or(|a| *end <= a))
        .collect();
    rows.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name_any().cmp(&b.1.name_any())));
    rows.into_iter().nth(offset).map(|(_, s)| s)
}

pub async fn reconcile(restore: Arc<Restore>, ctx: Arc<PipelineCtx>) -> Result<Action, Error> {
    ctx.metrics.reconciliations.inc(&["Restore"]);
    if restore.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let now = Utc::now();
    let ns = restore.namespace().unwrap_or_default();
    let name = restore.name_any();
    let status = restore.status.clone().unwrap_or_default();

    // Source -> candidate and repository.
    let mut source_snapshot: Option<Arc<Snapshot>> = None;
    // ReferentAvailable (docs/design/api-contract.md §9): the object the source names, from the stores.
    let referent = match &restore.spec.source {
        RestoreSource::SnapshotRef(o) => {
            let sns = o.namespace.clone().unwrap_or_else(|| ns.clone());
            let what = format!("Snapshot {sns}/{}", o.name);
            match ctx.stores.snapshots.get(&ObjectRef::new(&o.name).within(&sns)) {
                Some(_) => Referent::Found { what },
                None => Referent::Missing { what },
            }
        }
        RestoreSource::FromPolicy(p) => {
            let pns = p.namespace.clone().unwrap_or_else(|| ns.clone());
            let what = format!("SnapshotPolicy {pns}/{}", p.name);
            match ctx.stores.policies.get(&ObjectRef::new(&p.name).within(&pns)) {
                Some(_) => Referent::Found { what },
                None => Referent::Missing { what },
            }
        }
        RestoreSource::Identity(_) => Referent::NotApplicable,
    };
    let candidate = match &restore.spec.source {
        RestoreSource::SnapshotRef(o) => {
            let sns = o.namespace.clone().unwrap_or_else(|| ns.clone());
            match ctx.stores.snapshots.get(&ObjectRef::new(&o.name).within(&sns)) {
                Some(s) => match s
                    .status
                    .as_ref()
                    .and_then(|st| st.snapshot.as_ref())
                    .and_then(|x| x.kopia_snapshot_id.clone())
                {
                    Some(id) => {
                        source_snapshot = Some(s.clone());
                        Candidate::Found { kopia_snapshot_id: id, snapshot: Some(o.name.clone()) }
                    }
                    None => Candidate::NotFound { what: format!("a manifest for Snapshot {}", o.name) },
                },
                None => Candidate::NotFound { what: format!("Snapshot {}", o.name) },
            }
        }
        RestoreSource::FromPolicy(p) => {
            let pns = p.namespace.clone().unwrap_or_else(|| ns.clone());
            match from_policy(&ctx, &pns, &p.name, p.as_of, p.offset.max(0) as usize) {
                Some(s) => {
                    let id =
                        s.status.as_ref().and_then(|st| st.snapshot.as_ref()).and_then(|x| x.kopia_snapshot_id.clone());
                    source_snapshot = Some(s.clone());
                    Candidate::Found { kopia_snapshot_id: id.unwrap_or_default(), snapshot: Some(s.name_any()) }
                }
                None => Candidate::NotFound { what: format!("a snapshot of policy {}", p.name) },
            }
        }
        RestoreSource::Identity(_) => Candidate::Deferred,
    };
    let pinned_repo = status.resolved.as_ref().and_then(|r| r.repository.clone());
    let rref: Option<RepositoryRef> = pinned_repo
        .as_ref()
        .map(|r| RepositoryRef { name: r.name.clone(), kind: r.kind, namespace: r.namespace.clone() })
        .or_else(|| restore.spec.repository.clone())
        .or_else(|| {
            source_snapshot
                .as_ref()
                .and_then(|s| s.status.as_ref()?.resolved.as_ref()?.repository.as_ref())
                .map(|r| RepositoryRef { name: r.name.clone(), kind: r.kind, namespace: r.namespace.clone() })
        })
        .or_else(|| match &restore.spec.source {
            // No row yet: the policy's repository is the one the Restore waits on.
            RestoreSource::FromPolicy(p) => {
                let pns = p.namespace.clone().unwrap_or_else(|| ns.clone());
                ctx.stores
                    .policies
                    .get(&ObjectRef::new(&p.name).within(&pns))
                    .and_then(|pol| pol.spec.target.repositories().first().map(|r| (*r).clone()))
            }
            RestoreSource::SnapshotRef(_) | RestoreSource::Identity(_) => None,
        });
    let gate = match &rref {
        Some(r) => ctx.gate(&ns, r),
        // No repository known yet (the source is missing): the gate is open so the
        // missing-snapshot decision can be taken.
        None => crate::gating::Gate::Open,
    };
    let repo = rref.as_ref().and_then(|r| ctx.repository(&ns, r));

    let uid = restore.uid().unwrap_or_default();
    let target = match (&restore.spec.target, target_name(&restore)) {
        (RestoreTarget::Populator(_), _) => TargetState::NotImplemented { what: "populator" },
        (RestoreTarget::StreamExec(_), _) => TargetState::NotImplemented { what: "streamExec" },
        (RestoreTarget::Pvc(_), Some(t)) => match ctx.stores.pvcs.get(&ObjectRef::new(&t).within(&ns)) {
            None => TargetState::Create,
            Some(p) if p.annotations().get(CREATED_BY) == Some(&uid) => TargetState::Ready,
            Some(_) => TargetState::ExistsNotOurs { name: t },
        },
        (RestoreTarget::PvcRef(o), Some(t)) => {
            let tns = o.namespace.clone().unwrap_or_else(|| ns.clone());
            if ctx.stores.pvcs.get(&ObjectRef::new(&t).within(&tns)).is_some() {
                TargetState::Ready
            } else {
                TargetState::Missing { name: t }
            }
        }
        (RestoreTarget::Pvc(_) | RestoreTarget::PvcRef(_), None) => TargetState::NotImplemented { what: "target" },
    };
    let job_name = kopiur_mover::job::job_name(&format!("{name}-restore"));
    let job = ctx
        .stores
        .jobs
        .get(&ObjectRef::new(&job_name).within(&ns))
        .filter(|j| j.owner_references().iter().any(|o| o.uid == uid));
    let job = match (job, &status.phase) {
        (None, Some(RestorePhase::Restoring)) => {
            Api::<Job>::namespaced(ctx.client.clone(), &ns).get_opt(&job_name).await?.map(Arc::new)
        }
        (j, _) => j,
    };
    let pod_startup_deadline = chrono::Duration::seconds(
        kopiur_api::shared::FailurePolicy::resolved_pod_startup_deadline_seconds(restore.spec.failure_policy.as_ref()),
    );
    let job_facts = job_state(job.as_deref());
    let mut pods = Verdict::NotWedged { recheck_at: None };
    // Pods are only read for an active Job the Restore is running (a terminal phase never looks).
    if matches!(status.phase, Some(RestorePhase::Restoring))
        && job_facts == JobState::Active
        && let Some(j) = &job
    {
        pods = crate::wedged::io::check(&ctx.client, j, pod_startup_deadline, now).await;
    }
    // The workload's identity and the target's node are read only while a launch is possible;
    // privileged settings read the namespace's opt-in only when they ask for it.
    let mut mf = crate::mover_settings::MoverFacts::default();
    let mut settings = None;
    if let Some(rv) = &repo {
        // Parked behind a closed repository gate no Job can launch: no pod LIST (docs/design/reconcile-shape.md §1.5).
        if matches!(status.phase, None | Some(RestorePhase::Pending | RestorePhase::Resolving))
            && job.is_none()
            && matches!(gate, crate::gating::Gate::Open)
        {
            let claim = target_name(&restore).unwrap_or_default();
            mf = crate::mover_settings::io::facts(
                &ctx.client,
                &ns,
                rv.common().mover_defaults.as_ref(),
                restore.spec.mover.as_ref(),
                Some(claim.as_str()).filter(|c| !c.is_empty()),
            )
            .await;
        }
        let resolve = |mf: &crate::mover_settings::MoverFacts| {
            crate::mover_settings::resolve_with(
                rv.common().mover_defaults.as_ref(),
                restore.spec.mover.as_ref(),
                crate::mover_settings::MoverOp::Restore,
                mf,
            )
        };
        let mut r = resolve(&mf);
        if matches!(&r, Err(e) if e.reason == kopiur_api::names::reason::PRIVILEGED_MOVER_NOT_PERMITTED)
            && crate::mover_settings::namespace_permits_privileged(&ctx.client, &ns).await
        {
            mf.privileged_permitted = true;
            r = resolve(&mf);
        }
        settings = Some(r);
    }
    // The credentials the Job would read, only while a launch is possible (docs/design/mover.md §1.2).
    let credentials = match &repo {
        Some(rv)
            if matches!(status.phase, None | Some(RestorePhase::Pending | RestorePhase::Resolving))
                && job.is_none() =>
        {
            let pw = &rv.common().encryption.password_secret_ref;
            let (pw_name, key) = (pw.name.clone(), pw.resolved_key().to_string());
            let missing = ctx.missing_secrets(&ns, &rv.secret_names());
            let has_key =
                if missing.is_empty() { secret_has_key(&ctx.client, &ns, &pw_name, &key).await } else { None };
            match Credentials::observe(missing, (&pw_name, &key), has_key) {
                // The CA bundle the Job mounts from this namespace (docs/design/api-contract.md §7.4, MissingCaBundle);
                // an unreadable ConfigMap refuses nothing on a guess.
                Credentials::Found => {
                    match crate::repository::mounts::ca_state(&ctx.client, &ns, &rv.common().backend).await {
                        Ok(crate::repository::mounts::CaState::Missing { message }) => {
                            Credentials::MissingCaBundle { message }
                        }
                        Ok(
                            crate::repository::mounts::CaState::NotConfigured
                            | crate::repository::mounts::CaState::Present { .. },
                        )
                        | Err(_) => Credentials::Found,
                    }
                }
                c @ (Credentials::NotChecked
                | Credentials::MissingSecrets { .. }
                | Credentials::MissingKey { .. }
                | Credentials::MissingCaBundle { .. }) => c,
            }
        }
        Some(_) | None => Credentials::NotChecked,
    };
    let facts = RestoreFacts {
        phase: status.phase.clone(),
        gate,
        pinned: status.resolved.is_some(),
        candidate: candidate.clone(),
        on_missing: restore.spec.resolved_on_missing_snapshot(),
        wait_timeout: restore
            .spec
            .policy
            .as_ref()
            .and_then(|p| p.wait_timeout.as_ref())
            .map(|d| chrono::Duration::seconds(d.as_secs() as i64)),
        wait_started_at: status.wait_started_at,
        target,
        job: job_facts,
        job_created: job.as_deref().and_then(crate::wedged::io::job_created),
        pod_startup_deadline,
        pods,
        failure: status.failure.clone(),
        ready_reason: status.conditions.iter().find(|c| c.type_ == "Ready").map(|c| c.reason.clone()),
        reverify_requested_at: repo.as_ref().and_then(RepoView::reverify_requested_at),
        // A gating [next] field (docs/design/api-contract.md §1.9) first: Stalled FeatureNotImplemented, no Job.
        mover_refused: crate::features::restore(&restore.spec)
            .gating_message()
            .map(|m| (crate::features::FEATURE_NOT_IMPLEMENTED, m))
            .or_else(|| settings.as_ref().and_then(|r| r.as_ref().err()).map(|r| (r.reason, r.message.clone())))
            // A filesystem repository's PVC must live in this namespace
            // (`RepositoryVolumeNotInNamespace`): Stalled, no Job.
            .or_else(|| {
                let rv = repo.as_ref()?;
                let home = rv.home_namespace(&ctx.config.namespace);
                let r = crate::repository::mounts::for_job(&rv.common().backend, &home, &ns).err()?.refusal();
                Some((r.reason, r.message))
            }),
        inherited_from: settings.as_ref().and_then(|r| r.as_ref().ok()).and_then(|s| s.inherited_from.clone()),
        ownership: status.ownership.clone(),
        namespace: ns.clone(),
        credentials,
        referent,
    };
    let d = plan(&facts, now);

    let mut next = status.clone();
    next.observed_generation = restore.meta().generation;
    next.source_kind = Some(restore.spec.source.kind());
    if let Some(p) = &d.phase {
        next.phase = Some(p.clone());
    }
    next.wait_started_at = d.wait_started_at;
    if let Some(f) = &d.failure {
        next.failure = Some(f.clone());
    }
    let resolved_repo = repo.as_ref().map(|rv| ResolvedRepository {
        kind: rref.as_ref().map(|r| r.kind).unwrap_or_default(),
        namespace: rv.namespace(),
        name: rv.name(),
        uid: Some(rv.uid()),
    });
    let identity = source_snapshot.as_ref().and_then(|s| s.status.as_ref()?.resolved.as_ref()?.identity.clone());
    for step in &d.steps {
        match step {
            Step::Pin => {
                next.resolved = Some(match &candidate {
                    Candidate::Found { kopia_snapshot_id, snapshot } => RestoreResolved {
                        resolution: Resolution::Snapshot,
                        kopia_snapshot_id: Some(kopia_snapshot_id.clone()),
                        snapshot_ref: snapshot.clone().map(|n| ApiObjectRef { name: n, namespace: None }),
                        repository: resolved_repo.clone(),
                        identity: identity.clone(),
                        pinned_at: Some(now),
                    },
                    Candidate::Deferred | Candidate::NotFound { .. } => RestoreResolved {
                        resolution: Resolution::Snapshot,
                        kopia_snapshot_id: None,
                        snapshot_ref: None,
                        repository: resolved_repo.clone(),
                        identity: None,
                        pinned_at: Some(now),
                    },
                });
            }
            Step::CompleteEmpty => {
                next.resolved = Some(RestoreResolved {
                    resolution: Resolution::NoSnapshot,
                    kopia_snapshot_id: None,
                    snapshot_ref: None,
                    repository: resolved_repo.clone(),
                    identity: None,
                    pinned_at: Some(now),
                });
                if let RestoreTarget::Pvc(_) = &restore.spec.target
                    && facts.target == TargetState::Create
                {
                    create_pvc(&ctx, &restore).await?;
                }
            }
            Step::CreatePvc => create_pvc(&ctx, &restore).await?,
            Step::Launch => {
                let Some(rv) = &repo else { continue };
                let pinned = next.resolved.clone();
                let job = restore_job(&restore, &ctx.config, rv, pinned.as_ref(), &job_name, &mf)?;
                ctx.ensure_mover_rbac(&ns).await?;
                match Api::<Job>::namespaced(ctx.client.clone(), &ns).create(&PostParams::default(), &job).await {
                    Ok(_) => ctx.metrics.jobs_created.inc(&["restore", &ns]),
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => return Err(e.into()),
                }
                next.timing = Some(kopiur_api::shared::status::Timing { start_time: Some(now), ..Default::default() });
            }
            Step::AwaitJob | Step::Idle => {}
        }
    }
    if let Some(t) = target_name(&restore) {
        next.target =
            Some(RestoreTargetStatus { pvc_ref: Some(ApiObjectRef { name: t, namespace: None }), pvc_prime: None });
    }
    next.conditions = crate::conditions::merge_conditions(
        &status.conditions,
        &d.conditions,
        restore.meta().generation.unwrap_or(0),
        now,
    );
    if d.nudge
        && let Some(rv) = &repo
        && let Err(e) = ctx.nudge(rv, now).await
    {
        tracing::warn!(error = %e, restore = %name, "stamping reverify-requested-at failed");
    }
    // Whether `next` is what the API now holds (nothing to write counts).
    let api: Api<Restore> = Api::namespaced(ctx.client.clone(), &ns);
    let written = crate::status::write_status(&api, restore.as_ref(), &status, &next).await?.landed();
    // After the Failed status landed: deleting first would read as a lost Job if the write lost
    // a conflict. A failed delete is retried by the plan's requeue.
    if d.delete_job
        && written
        && let Some(j) = &job
    {
        crate::wedged::io::delete_job(&ctx.client, j).await;
    }
    Ok(match d.requeue_after {
        Some(a) => Action::requeue(a.to_std().unwrap_or_default().max(std::time::Duration::from_secs(1))),
        None => Action::requeue(std::time::Duration::from_secs(300)),
    })
}

/// Whether Secret `name` in `ns` holds `key` (in `data`). The operator may list Secrets, not
/// get them, so this is a list narrowed to the one name; only the key names are looked at and
/// the object is dropped at once (no value is kept, logged or copied anywhere). None when the
/// list fails: nothing is refused on a guess.
async fn secret_has_key(client: &kube::Client, ns: &str, name: &str, key: &str) -> Option<bool> {
    use k8s_openapi::api::core::v1::Secret;
    let lp = kube::api::ListParams::default().fields(&format!("metadata.name={name}"));
    match Api::<Secret>::namespaced(client.clone(), ns).list(&lp).await {
        Ok(list) => {
            let s = list.items.into_iter().find(|s| s.metadata.name.as_deref() == Some(name))?;
            Some(
                s.data.as_ref().is_some_and(|d| d.contains_key(key))
                    || s.string_data.as_ref().is_some_and(|d| d.contains_key(key)),
            )
        }
        Err(e) => {
            tracing::debug!(error = %e, secret = %name, "reading the password Secret's keys failed");
            None
        }
    }
}

async fn create_pvc(ctx: &PipelineCtx, restore: &Restore) -> Result<(), Error> {
    let RestoreTarget::Pvc(p) = &restore.spec.target else { return Ok(()) };
    let ns = restore.namespace().unwrap_or_default();
    let modes: Vec<String> = p.access_modes.iter().map(|m| format!("{m:?}")).collect();
    let pvc: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": p.name, "namespace": ns,
                     "annotations": {CREATED_BY: restore.uid().unwrap_or_default()},
                     "labels": crate::labels::managed_labels()},
        "spec": {"accessModes": modes, "resources": {"requests": {"storage": p.capacity}},
                 "storageClassName": p.storage_class_name}
    }))
    .map_err(|e| Error::InvalidSpec(e.to_string()))?;
    match Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), &ns).create(&PostParams::default(), &pvc).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn restore_job(
    restore: &Restore,
    config: &crate::config::Config,
    repo: &RepoView,
    pinned: Option<&RestoreResolved>,
    job_name: &str,
    facts: &crate::mover_settings::MoverFacts,
) -> Result<Job, Error> {
    let ns = restore.namespace().unwrap_or_default();
    let mounts =
        crate::repository::mounts::for_job(&repo.common().backend, &repo.home_namespace(&config.namespace), &ns)?;
    let target = target_name(restore).unwrap_or_default();
    let o = restore.spec.options.clone().unwrap_or_default();
    let (snapshot_id, resolve) = match (&restore.spec.source, pinned.and_then(|p| p.kopia_snapshot_id.clone())) {
        (_, Some(id)) => (Some(id), None),
        (RestoreSource::Identity(i), None) => (
            i.snapshot_id.clone(),
            Some(ResolveIdentity {
                identity: Identity::new(i.username.clone(), i.hostname.clone()),
                source_path: i.source_path.clone().unwrap_or_else(|| "/".into()),
                as_of: i.as_of,
                offset: i.offset.unwrap_or(0).max(0) as u32,
            }),
        ),
        (RestoreSource::SnapshotRef(_) | RestoreSource::FromPolicy(_), None) => {
            return Err(Error::WorkSpec("the restore has no pinned snapshot id".into()));
        }
    };
    // The connect identity is `kopiur-ops` at the lease host (docs/design/mover.md §2.2); the
    // source's identity only finds the snapshot (`resolve`, or the pinned id).
    let id = repo.ops_identity();
    let spec = WorkSpec {
        schema_version: SCHEMA_VERSION,
        target_ref: TargetRef {
            api_version: Restore::api_version(&()).to_string(),
            kind: "Restore".into(),
            namespace: Some(ns.clone()),
            name: restore.name_any(),
            uid: restore.uid().unwrap_or_default(),
        },
        repository: RepositoryInfo {
            kind: repo.kind().into(),
            namespace: repo.namespace(),
            name: repo.name(),
            uid: repo.uid(),
            backend: mounts.backend.clone(),
            client_identity: id,
            read_only: true,
            cache: CacheSizes::default(),
        },
        command_timeout_seconds: DEFAULT_COMMAND_TIMEOUT_SECONDS,
        heartbeat_seconds: DEFAULT_HEARTBEAT_SECONDS,
        connect_timeout_seconds: None,
        operation: Operation::Restore(RestoreOp {
            snapshot_id,
            resolve,
            target_path: RESTORE_MOUNT.into(),
            options: KopiaRestoreOptions {
                parallel: o.parallel.map(|p| p.max(1) as u32),
                ignore_permission_errors: Some(kopiur_api::restore::RestoreOptions::resolved_ignore_permission_errors(
                    restore.spec.options.as_ref(),
                )),
                write_files_atomically: Some(kopiur_api::restore::RestoreOptions::resolved_write_files_atomically(
                    restore.spec.options.as_ref(),
                )),
                overwrite_files: o.overwrite_files,
                overwrite_directories: o.overwrite_directories,
                overwrite_symlinks: o.overwrite_symlinks,
                skip_existing: o.skip_existing,
                delete_extra: o.enable_file_deletion,
                write_sparse_files: o.write_sparse_files,
                skip_owners: o.skip_owners,
                skip_permissions: o.skip_permissions,
                skip_times: o.skip_times,
                ignore_errors: o.ignore_errors,
            },
        }),
    };
    let (pw, auth) = match repo {
        RepoView::Namespaced(r) => crate::repository::observe::secret_names(r.as_ref()),
        RepoView::Cluster(c) => crate::repository::observe::secret_names(c.as_ref()),
    };
    let key = repo.common().encryption.password_secret_ref.resolved_key().to_string();
    let mut env_from = vec![pw.clone()];
    env_from.extend(auth.filter(|a| *a != pw));
    let input = JobInput {
        restore: Some(PvcMount { claim_name: target, mount_path: RESTORE_MOUNT.into(), read_only: false }),
        ..crate::mover_job::input(
            config,
            crate::mover_job::Identity {
                name: job_name.to_string(),
                namespace: ns,
                owner: owner_of(restore),
                work_spec: spec,
                password: (pw, key),
                env_from_secrets: env_from,
            },
            &mounts,
            restore.spec.failure_policy.as_ref(),
        )
    };
    let mut input = input;
    // A refusal was planned already (`mover_refused`); this is the same resolution.
    crate::mover_settings::resolve_with(
        repo.common().mover_defaults.as_ref(),
        restore.spec.mover.as_ref(),
        crate::mover_settings::MoverOp::Restore,
        facts,
    )
    .map_err(Error::MoverRefused)?
    .apply(&mut input, true);
    build_job(&input).map_err(Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work_spec(job: &Job) -> serde_json::Value {
        let env = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0].env.clone().unwrap();
        let ws = env.iter().find(|e| e.name == "KOPIUR_WORK_SPEC").and_then(|e| e.value.clone()).unwrap();
        serde_json::from_str(&ws).unwrap()
    }

    fn repo() -> RepoView {
        RepoView::Namespaced(Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
                "metadata": {"name": "NAS_1", "namespace": "media", "uid": "u-r"},
                "spec": {"backend": {"filesystem": {"path": "/repo"}},
                         "encryption": {"passwordSecretRef": {"name": "pw"}}}
            }))
            .unwrap(),
        ))
    }

    fn restore(source: serde_json::Value) -> Restore {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Restore",
            "metadata": {"name": "rs", "namespace": "media", "uid": "u-rs"},
            "spec": {"repository": {"name": "NAS_1"}, "source": source,
                     "target": {"pvc": {"name": "data", "capacity": "1Gi"}}}
        }))
        .unwrap()
    }

    /// docs/design/mover.md §2.2: a restore connects as `kopiur-ops` at the lease host; the
    /// source's identity (pinned from the Snapshot, or `source.identity`) only finds the
    /// snapshot, and never becomes the connect identity.
    #[test]
    fn a_restore_connects_as_kopiur_ops_at_the_lease_host_and_finds_by_the_source_identity() {
        let config = crate::config::Config::from_env();
        let mf = crate::mover_settings::MoverFacts::default();
        // By pinned snapshot id (snapshotRef / fromPolicy): the row's backup identity is recorded
        // in status, the Job connects as kopiur-ops and restores that id.
        let r = restore(serde_json::json!({"snapshotRef": {"name": "s1"}}));
        let pinned = RestoreResolved {
            resolution: Resolution::Snapshot,
            kopia_snapshot_id: Some("k0123".into()),
            snapshot_ref: None,
            repository: None,
            identity: Some(kopiur_api::shared::status::ResolvedIdentity {
                username: "app".into(),
                hostname: "media".into(),
                source_path: Some("/pvc/data".into()),
            }),
            pinned_at: None,
        };
        let job = restore_job(&r, &config, &repo(), Some(&pinned), "rs-restore", &mf).unwrap();
        let ws = work_spec(&job);
        assert_eq!(
            ws["repository"]["clientIdentity"],
            serde_json::json!({"username": "kopiur-ops", "hostname": "kopiur.media.nas-1"})
        );
        assert_eq!(ws["operation"]["Restore"]["snapshotId"], "k0123");
        // By identity: the mover resolves under the source's identity, connected as kopiur-ops.
        let r = restore(serde_json::json!({"identity": {"username": "app", "hostname": "media",
                                                        "sourcePath": "/pvc/data"}}));
        let job = restore_job(&r, &config, &repo(), None, "rs-restore", &mf).unwrap();
        let ws = work_spec(&job);
        assert_eq!(ws["repository"]["clientIdentity"]["username"], "kopiur-ops");
        assert_eq!(ws["repository"]["clientIdentity"]["hostname"], "kopiur.media.nas-1");
        let resolve = &ws["operation"]["Restore"]["resolve"];
        assert_eq!(resolve["identity"], serde_json::json!({"username": "app", "hostname": "media"}));
        assert_eq!(resolve["sourcePath"], "/pvc/data");
        // The ops identity is never the maintenance owner (kopia's auto-maintenance never runs).
        let ci = &ws["repository"]["clientIdentity"];
        let connect = format!("{}@{}", ci["username"].as_str().unwrap(), ci["hostname"].as_str().unwrap());
        let owner = kopiur_api::domain::identity::lease_owner(Some("media"), "NAS_1");
        assert_eq!(kopiur_api::domain::identity::maintenance_owner(&owner), "kopiur@kopiur.media.nas-1");
        assert_ne!(connect, kopiur_api::domain::identity::maintenance_owner(&owner));
    }
}
