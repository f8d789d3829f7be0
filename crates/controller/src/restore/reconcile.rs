//! Restore reconciler: observe (source rows and the target PVC from stores) -> `plan::plan` ->
//! apply (pin, target PVC, Job, one status write, nudge).
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kopiur_api::Restore;
use kopiur_api::names::{condition, event, reason};
use kopiur_api::restore::{Resolution, RestoreResolved, RestoreSource, RestoreTarget, RestoreTargetStatus};
use kopiur_api::shared::ObjectRef as ApiObjectRef;
use kopiur_api::shared::status::ResolvedRepository;
use kopiur_kopia::cmd::{CacheSizes, Identity, RestoreOptions as KopiaRestoreOptions};
use kopiur_mover::job::{JobInput, PvcMount, RESTORE_MOUNT, build_job};
use kopiur_mover::workspec::{
    DEFAULT_COMMAND_TIMEOUT_SECONDS, DEFAULT_HEARTBEAT_SECONDS, Operation, RepositoryInfo, ResolveIdentity, RestoreOp,
    SCHEMA_VERSION, WorkSpec,
};
use kube::api::PostParams;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};

use super::observe::{Observed, observe, target_name};
use super::plan::{Candidate, Step, TargetState, plan};
use crate::context::Context;
use crate::error::Error;
use crate::metrics::labels::KindLabels;
use crate::mover_job::owner_of;
use crate::repo_view::RepoView;

/// Annotation on a PVC this Restore created (its uid), so a rerun recognizes its own target.
pub const CREATED_BY: &str = "kopiur.home-operations.com/restore-uid";

pub async fn reconcile(restore: Arc<Restore>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.metrics.reconciliations.inc(KindLabels { kind: "Restore".into() });
    if restore.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let now = Utc::now();
    let ns = restore.namespace().unwrap_or_default();
    let status = restore.status.clone().unwrap_or_default();
    let obs = observe(&ctx, &restore, now).await?;
    let d = plan(&obs.facts, now);

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
    // client required: the steps' writes, the nudge and the status write.
    apply_steps(&ctx, &restore, &obs, &d.steps, &mut next, now).await?;
    if let Some(t) = target_name(&restore) {
        next.target =
            Some(RestoreTargetStatus { pvc_ref: Some(ApiObjectRef { name: t, namespace: None }), pvc_prime: None });
    }
    // A populate records its claim and prime once it has them (a running one reads the claim
    // by this name).
    if let Some(p) = &obs.populate
        && let (Some(claim), Some(prime)) = (p.state.claim(), p.prime.clone())
    {
        next.target = Some(RestoreTargetStatus {
            pvc_ref: Some(ApiObjectRef { name: claim.to_string(), namespace: None }),
            pvc_prime: Some(ApiObjectRef { name: prime, namespace: None }),
        });
    }
    next.conditions = crate::conditions::merge_conditions(
        &status.conditions,
        &d.conditions,
        restore.meta().generation.unwrap_or(0),
        now,
    );
    if d.nudge
        && let Some(rv) = &obs.repo
        && let Err(e) = ctx.nudge(rv, now).await
    {
        tracing::warn!(error = %e, restore = %restore.name_any(), "stamping reverify-requested-at failed");
    }
    // Whether `next` is what the API now holds (nothing to write counts).
    let api: Api<Restore> = Api::namespaced(ctx.client.clone(), &ns);
    let written = crate::status::write_status(&api, restore.as_ref(), &status, &next).await?.landed();
    if let Some(claim) = obs.populate.as_ref().and_then(|p| p.claim.as_ref()) {
        tell_claim(&ctx, &restore, claim, &d).await;
    }
    // A populate that finished now (counted once: the transition landed).
    if written
        && obs.populate.is_some()
        && let Some(outcome) = populate_outcome(status.phase.as_ref(), &d)
    {
        ctx.metrics
            .populates
            .inc(crate::metrics::labels::PopulateLabels { namespace: ns.clone(), outcome: outcome.into() });
    }
    // After the Failed status landed: deleting first would read as a lost Job if the write lost
    // a conflict. A failed delete is retried by the plan's requeue.
    if d.delete_job
        && written
        && let Some(j) = &obs.job
    {
        crate::wedged::io::delete_job(&ctx.client, j).await;
    }
    Ok(match d.requeue_after {
        Some(a) => Action::requeue(a.to_std().unwrap_or_default().max(std::time::Duration::from_secs(1))),
        None => Action::requeue(std::time::Duration::from_secs(300)),
    })
}

/// `status.resolved` as pinned now: the candidate's manifest, the repository and the source
/// row's identity (`resolution` says whether a snapshot was found).
fn pinned(obs: &Observed, resolution: Resolution, now: DateTime<Utc>) -> RestoreResolved {
    let repository = obs.repo.as_ref().map(|rv| ResolvedRepository {
        kind: obs.rref.as_ref().map(|r| r.kind).unwrap_or_default(),
        namespace: rv.namespace(),
        name: rv.name(),
        uid: Some(rv.uid()),
    });
    let identity = obs.source_snapshot.as_ref().and_then(|s| s.status.as_ref()?.resolved.as_ref()?.identity.clone());
    match (&obs.facts.candidate, resolution) {
        (Candidate::Found { kopia_snapshot_id, snapshot }, Resolution::Snapshot) => RestoreResolved {
            resolution: Resolution::Snapshot,
            kopia_snapshot_id: Some(kopia_snapshot_id.clone()),
            snapshot_ref: snapshot.clone().map(|n| ApiObjectRef { name: n, namespace: None }),
            repository,
            identity,
            pinned_at: Some(now),
        },
        (_, resolution) => RestoreResolved {
            resolution,
            kopia_snapshot_id: None,
            snapshot_ref: None,
            repository,
            identity: None,
            pinned_at: Some(now),
        },
    }
}

/// The plan's steps, in order: pin, complete with nothing to restore, create the target PVC,
/// launch the Job (idempotent by name).
async fn apply_steps(
    ctx: &Context,
    restore: &Restore,
    obs: &Observed,
    steps: &[Step],
    next: &mut kopiur_api::restore::RestoreStatus,
    now: DateTime<Utc>,
) -> Result<(), Error> {
    let ns = restore.namespace().unwrap_or_default();
    for step in steps {
        match step {
            Step::Pin => next.resolved = Some(pinned(obs, Resolution::Snapshot, now)),
            Step::CompleteEmpty => {
                next.resolved = Some(pinned(obs, Resolution::NoSnapshot, now));
                if let RestoreTarget::Pvc(_) = &restore.spec.target
                    && obs.facts.target == TargetState::Create
                {
                    create_pvc(ctx, restore).await?;
                }
            }
            Step::CreatePvc => create_pvc(ctx, restore).await?,
            Step::PinEmpty => next.resolved = Some(pinned(obs, Resolution::NoSnapshot, now)),
            Step::CreatePrime => {
                if let Some(claim) = obs.populate.as_ref().and_then(|p| p.claim.as_ref()) {
                    super::populate::create_prime(&ctx.client, restore, claim).await?;
                }
            }
            Step::Rebind { volume } => {
                if let Some(claim) = obs.populate.as_ref().and_then(|p| p.claim.as_ref()) {
                    super::populate::rebind(&ctx.client, restore, claim, volume).await?;
                }
            }
            Step::DeletePrime => {
                let recorded = next.target.as_ref().and_then(|t| t.pvc_prime.as_ref()).map(|p| p.name.clone());
                if let Some(prime) = obs.populate.as_ref().and_then(|p| p.prime.clone()).or(recorded) {
                    super::populate::delete_prime(&ctx.client, &ns, &prime).await?;
                }
            }
            Step::Launch => {
                let Some(rv) = &obs.repo else { continue };
                let Some(claim) = obs.mount_claim(restore) else { continue };
                let pinned = next.resolved.clone();
                let job = restore_job(restore, &ctx.config, rv, pinned.as_ref(), &obs.job_name, &obs.mover, &claim)?;
                ctx.create_mover_job(&ns, &job, "restore").await?;
                next.timing = Some(kopiur_api::shared::status::Timing { start_time: Some(now), ..Default::default() });
            }
            Step::AwaitJob | Step::Idle => {}
        }
    }
    Ok(())
}

/// An Event on a populate's claim saying where its data stands: waiting (and on what),
/// populating, bound, or failed; once per claim and reason in this process.
async fn tell_claim(ctx: &Context, restore: &Restore, claim: &PersistentVolumeClaim, d: &super::plan::RestoreDecision) {
    let Some(ready) = d.conditions.iter().find(|c| c.type_ == "Ready") else { return };
    let uid = claim.uid().unwrap_or_default();
    let first = ctx.populate_told.lock().map(|mut m| m.insert(uid, ready.reason.clone()) != Some(ready.reason.clone()));
    if !first.unwrap_or(false) {
        return;
    }
    let failed = matches!(d.phase, Some(kopiur_api::restore::RestorePhase::Failed));
    let stalled =
        d.conditions.iter().any(|c| c.type_ == condition::STALLED && c.status == crate::conditions::CondStatus::True);
    let reason = {
        use kopiur_api::restore::RestorePhase;
        match &d.phase {
            Some(RestorePhase::Completed) => event::POPULATED,
            Some(RestorePhase::Failed) => event::POPULATE_FAILED,
            Some(RestorePhase::Restoring) => event::POPULATING,
            Some(RestorePhase::Pending | RestorePhase::Resolving | RestorePhase::Unknown(_)) | None => {
                event::POPULATE_WAITING
            }
        }
    };
    let note = format!(
        "Restore {}/{}: {} ({})",
        restore.namespace().unwrap_or_default(),
        restore.name_any(),
        ready.message,
        ready.reason
    );
    ctx.event(&claim.object_ref(&()), failed || stalled, reason, note).await;
}

/// `kopiur_restore_populates_total`'s outcome when this decision finishes a populate.
fn populate_outcome(
    before: Option<&kopiur_api::restore::RestorePhase>,
    d: &super::plan::RestoreDecision,
) -> Option<&'static str> {
    use kopiur_api::restore::RestorePhase;
    if matches!(before, Some(RestorePhase::Completed | RestorePhase::Failed)) {
        return None;
    }
    let reason = d.conditions.iter().find(|c| c.type_ == "Ready").map(|c| c.reason.as_str());
    match &d.phase {
        Some(RestorePhase::Completed) if reason == Some(reason::TARGET_ALREADY_BOUND) => Some("already_bound"),
        Some(RestorePhase::Completed) => Some("populated"),
        Some(RestorePhase::Failed) => Some("failed"),
        Some(RestorePhase::Pending | RestorePhase::Resolving | RestorePhase::Restoring | RestorePhase::Unknown(_))
        | None => None,
    }
}

async fn create_pvc(ctx: &Context, restore: &Restore) -> Result<(), Error> {
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
        Err(e) => Err(Error::api("create restore target PVC", e)),
    }
}

fn restore_job(
    restore: &Restore,
    config: &crate::config::Config,
    repo: &RepoView,
    pinned: Option<&RestoreResolved>,
    job_name: &str,
    facts: &crate::mover_settings::MoverFacts,
    target: &str,
) -> Result<Job, Error> {
    let ns = restore.namespace().unwrap_or_default();
    let mounts = crate::mounts::for_job(&repo.common().backend, &repo.home_namespace(&config.namespace), &ns)?;
    let target = target.to_string();
    let (snapshot_id, resolve) = snapshot_to_restore(restore, pinned)?;
    // The connect identity is `kopiur-ops` at the lease host (docs/design/mover.md §2.2); the
    // source's identity only finds the snapshot (`resolve`, or the pinned id).
    let id = repo.ops_identity();
    let spec = WorkSpec {
        schema_version: SCHEMA_VERSION,
        target_ref: crate::mover_job::target_of(restore),
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
            options: restore_options(restore),
            controller_completes: matches!(restore.spec.target, RestoreTarget::Populator(_)),
        }),
    };
    let ((pw, key), env_from) = crate::mover_job::secrets(repo);
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

/// The snapshot to restore: the pinned kopia id, or (an `identity` source) the identity the
/// mover resolves in-Job.
fn snapshot_to_restore(
    restore: &Restore,
    pinned: Option<&RestoreResolved>,
) -> Result<(Option<String>, Option<ResolveIdentity>), Error> {
    match (&restore.spec.source, pinned.and_then(|p| p.kopia_snapshot_id.clone())) {
        (_, Some(id)) => Ok((Some(id), None)),
        (RestoreSource::Identity(i), None) => Ok((
            i.snapshot_id.clone(),
            Some(ResolveIdentity {
                identity: Identity::new(i.username.clone(), i.hostname.clone()),
                source_path: i.source_path.clone().unwrap_or_else(|| "/".into()),
                as_of: i.as_of,
                offset: i.offset.unwrap_or(0).max(0) as u32,
            }),
        )),
        (RestoreSource::SnapshotRef(_) | RestoreSource::FromPolicy(_), None) => {
            Err(Error::WorkSpec("the restore has no pinned snapshot id".into()))
        }
    }
}

/// `spec.options` as kopia restore options.
fn restore_options(restore: &Restore) -> KopiaRestoreOptions {
    let o = restore.spec.options.clone().unwrap_or_default();
    KopiaRestoreOptions {
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
    }
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
        let job = restore_job(&r, &config, &repo(), Some(&pinned), "rs-restore", &mf, "data").unwrap();
        let ws = work_spec(&job);
        assert_eq!(
            ws["repository"]["clientIdentity"],
            serde_json::json!({"username": "kopiur-ops", "hostname": "kopiur.media.nas-1"})
        );
        assert_eq!(ws["operation"]["Restore"]["snapshotId"], "k0123");
        // By identity: the mover resolves under the source's identity, connected as kopiur-ops.
        let r = restore(serde_json::json!({"identity": {"username": "app", "hostname": "media",
                                                        "sourcePath": "/pvc/data"}}));
        let job = restore_job(&r, &config, &repo(), None, "rs-restore", &mf, "data").unwrap();
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
