//! The `snapshot-cleanup` finalizer. Orphan and Retain release without contacting kopia; a
//! Snapshot with no manifest releases; an operator-stamped prune (retention, failed-history,
//! replaced-run: never held) deletes its manifest through a one-member batch Job and releases
//! only after that Job Completes. An external deletion under `Delete` is recorded as
//! `Deleting` and waits for the mass-deletion dispatcher: nothing is deleted on a state this
//! path cannot fully judge.
use chrono::{DateTime, Utc};
use k8s_openapi::api::batch::v1::Job;
use kopiur_api::Snapshot;
use kopiur_api::names::finalizer;
use kopiur_api::shared::RepositoryRef;
use kopiur_api::shared::phase::SnapshotOrigin;
use kopiur_api::snapshot::{DeletionDecision, DeletionRecord, SnapshotPhase};
use kopiur_api::snapshot_policy::DeletionPolicy;
use kopiur_kopia::cmd::Identity;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};

use super::ctx::PipelineCtx;
use super::plan::JobState;
use super::reconcile::{job_state, origin, skip_cleanup, write_status};
use crate::health::kstatus::{Cond, CondStatus};
use crate::repository::Error;

/// What this path decides for a deleting Snapshot (first match wins).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Deletion {
    /// Release the finalizer, keep the data.
    Orphan,
    Release,
    /// The backup Job still runs; delete it and wait.
    WaitForJob,
    /// Run (or await) the one-member delete Job.
    DeleteManifest {
        id: String,
    },
    /// External deletion under Delete: recorded, waiting for the dispatcher.
    AwaitDispatcher {
        id: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeletionFacts {
    pub skip: bool,
    pub policy: DeletionPolicy,
    pub phase: Option<SnapshotPhase>,
    pub backup_job: JobState,
    pub manifest: Option<String>,
    /// The pinned repository exists with the pinned uid.
    pub repo_present: bool,
    pub operator_pruned: bool,
    /// Schedule-owned, the schedule is gone, replaced or terminating, and the child's stamped
    /// `onScheduleDelete` is Retain: the cascade guard keeps the data.
    pub cascade_retain: bool,
}

pub fn decide(f: &DeletionFacts) -> Deletion {
    if f.skip {
        return Deletion::Orphan;
    }
    match f.policy {
        DeletionPolicy::Orphan => return Deletion::Orphan,
        DeletionPolicy::Retain => return Deletion::Release,
        DeletionPolicy::Delete => {}
    }
    let unsettled = match &f.phase {
        Some(SnapshotPhase::Running) => true,
        Some(SnapshotPhase::Pending) | None => matches!(f.backup_job, JobState::Active),
        Some(
            SnapshotPhase::Succeeded
            | SnapshotPhase::Unchanged
            | SnapshotPhase::Failed
            | SnapshotPhase::Discovered
            | SnapshotPhase::Deleting
            | SnapshotPhase::Unknown(_),
        ) => false,
    };
    if unsettled && f.manifest.is_none() {
        return Deletion::WaitForJob;
    }
    let Some(id) = f.manifest.clone() else { return Deletion::Release };
    if !f.repo_present {
        return Deletion::Orphan;
    }
    if !f.operator_pruned && f.cascade_retain {
        return Deletion::Release;
    }
    if f.operator_pruned { Deletion::DeleteManifest { id } } else { Deletion::AwaitDispatcher { id } }
}

fn effective_policy(snap: &Snapshot) -> DeletionPolicy {
    if matches!(origin(snap), SnapshotOrigin::Discovered) {
        return DeletionPolicy::Retain;
    }
    snap.spec
        .deletion_policy
        .or_else(|| snap.status.as_ref().and_then(|s| s.resolved.as_ref()).and_then(|r| r.deletion_policy))
        .unwrap_or_default()
}

/// The schedule axis, read by a live GET (never the cache): a stale store must not turn a
/// schedule deletion into data loss.
async fn cascade_retain(snap: &Snapshot, ctx: &PipelineCtx) -> Result<bool, Error> {
    let Some(owner) =
        snap.owner_references().iter().find(|o| o.kind == "SnapshotSchedule" && o.controller == Some(true))
    else {
        return Ok(false);
    };
    if snap.spec.resolved_on_schedule_delete() != kopiur_api::snapshot::OnScheduleDelete::Retain {
        return Ok(false);
    }
    let api: Api<kopiur_api::SnapshotSchedule> =
        Api::namespaced(ctx.client.clone(), &snap.namespace().unwrap_or_default());
    Ok(match api.get_opt(&owner.name).await? {
        None => true,
        Some(s) => s.uid().as_deref() != Some(owner.uid.as_str()) || s.meta().deletion_timestamp.is_some(),
    })
}

async fn release(snap: &Snapshot, ctx: &PipelineCtx) -> Result<Action, Error> {
    let fins: Vec<String> = snap.finalizers().iter().filter(|f| *f != finalizer::SNAPSHOT_CLEANUP).cloned().collect();
    let body = serde_json::json!({"metadata": {"finalizers": fins, "resourceVersion": snap.resource_version()}});
    let api: Api<Snapshot> = Api::namespaced(ctx.client.clone(), &snap.namespace().unwrap_or_default());
    match api.patch(&snap.name_any(), &PatchParams::default(), &Patch::Merge(&body)).await {
        Ok(_) => Ok(Action::await_change()),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {
            Ok(Action::requeue(std::time::Duration::from_secs(1)))
        }
        Err(e) => Err(e.into()),
    }
}

pub async fn reconcile_deletion(snap: &Snapshot, ctx: &PipelineCtx, now: DateTime<Utc>) -> Result<Action, Error> {
    if !snap.finalizers().iter().any(|f| f == finalizer::SNAPSHOT_CLEANUP) {
        return Ok(Action::await_change());
    }
    let ns = snap.namespace().unwrap_or_default();
    let name = snap.name_any();
    let status = snap.status.clone().unwrap_or_default();
    let backup_job_name = kopiur_mover::job::job_name(&name);
    let backup_job = ctx.stores.jobs.get(&ObjectRef::new(&backup_job_name).within(&ns));
    let pinned = status.resolved.as_ref().and_then(|r| r.repository.clone());
    let repo = pinned.as_ref().and_then(|p| {
        let r = RepositoryRef { name: p.name.clone(), kind: p.kind, namespace: p.namespace.clone() };
        ctx.repository(&ns, &r).filter(|rv| p.uid.as_deref().is_none_or(|u| u == rv.uid()))
    });
    let facts = DeletionFacts {
        skip: skip_cleanup(snap),
        policy: effective_policy(snap),
        phase: status.phase.clone(),
        backup_job: job_state(backup_job.as_deref()),
        manifest: status.snapshot.as_ref().and_then(|s| s.kopia_snapshot_id.clone()),
        repo_present: repo.is_some(),
        operator_pruned: !crate::deletion::pruned_by::from_annotations(snap.metadata.annotations.as_ref())
            .is_external(),
        cascade_retain: cascade_retain(snap, ctx).await?,
    };
    let reference = snap.object_ref(&());
    match decide(&facts) {
        Deletion::Orphan => {
            let why = if facts.skip {
                "SkipSnapshotCleanup"
            } else if facts.policy == DeletionPolicy::Orphan {
                "DeletionPolicyOrphan"
            } else {
                "RepositoryGone"
            };
            ctx.event(&reference, false, "SnapshotOrphaned", format!("{why}: the kopia snapshot is kept")).await;
            release(snap, ctx).await
        }
        Deletion::Release => release(snap, ctx).await,
        Deletion::WaitForJob => {
            let dp =
                DeleteParams { propagation_policy: Some(PropagationPolicy::Background), ..DeleteParams::default() };
            match Api::<Job>::namespaced(ctx.client.clone(), &ns).delete(&backup_job_name, &dp).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
            Ok(Action::requeue(std::time::Duration::from_secs(5)))
        }
        Deletion::AwaitDispatcher { .. } => {
            let mut next = status.clone();
            next.phase = Some(SnapshotPhase::Deleting);
            if next.deletion.is_none() {
                next.deletion = Some(DeletionRecord {
                    decision: DeletionDecision::Delete,
                    decided_at: Some(now),
                    held_since: None,
                });
            }
            let c = Cond {
                type_: "Ready",
                status: CondStatus::False,
                reason: "DeletionPending".into(),
                message: "waiting for the batch delete dispatcher to remove the kopia snapshot".into(),
            };
            next.conditions = super::ctx::merge(&status.conditions, &[c], snap.meta().generation.unwrap_or(0), now);
            let api: Api<Snapshot> = Api::namespaced(ctx.client.clone(), &ns);
            write_status(&api, snap, &status, &next).await?;
            Ok(Action::requeue(std::time::Duration::from_secs(300)))
        }
        Deletion::DeleteManifest { id } => {
            let Some(rv) = repo else { return release(snap, ctx).await };
            let ident = status
                .resolved
                .as_ref()
                .and_then(|r| r.identity.clone())
                .map(|i| Identity::new(i.username, i.hostname))
                .unwrap_or_else(|| Identity::new("kopiur-ops", "kopiur"));
            let job = super::job::delete_job(snap, &id, ident, &rv, &ctx.config)
                .map_err(|e| Error::WorkSpec(e.to_string()))?;
            let job_ns = rv.home_namespace(&ctx.config.namespace);
            let job_name = job.metadata.name.clone().unwrap_or_default();
            let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &job_ns);
            let existing = match ctx.stores.jobs.get(&ObjectRef::new(&job_name).within(&job_ns)) {
                Some(j) => Some((*j).clone()),
                None => jobs.get_opt(&job_name).await?,
            };
            match job_state(existing.as_ref()) {
                JobState::Complete { .. } => release(snap, ctx).await,
                JobState::Active => Ok(Action::requeue(std::time::Duration::from_secs(5))),
                JobState::Failed { reason } => {
                    if super::plan::nudge_due(rv.reverify_requested_at(), now) {
                        let _ = ctx.nudge(&rv, now).await;
                    }
                    tracing::warn!(snapshot = %name, %reason, "delete Job failed; retrying in 60 s");
                    let dp = DeleteParams {
                        propagation_policy: Some(PropagationPolicy::Background),
                        ..DeleteParams::default()
                    };
                    let _ = jobs.delete(&job_name, &dp).await;
                    Ok(Action::requeue(std::time::Duration::from_secs(60)))
                }
                JobState::Absent => {
                    let gate = ctx.gate(
                        &ns,
                        &RepositoryRef {
                            name: rv.name(),
                            kind: pinned.map(|p| p.kind).unwrap_or_default(),
                            namespace: rv.namespace(),
                        },
                    );
                    if gate != crate::gating::Gate::Open {
                        // Parked: joins a batch once the repository is Ready again.
                        return Ok(Action::requeue(std::time::Duration::from_secs(300)));
                    }
                    ctx.ensure_mover_rbac(&job_ns).await?;
                    match jobs.create(&PostParams::default(), &job).await {
                        Ok(_) => ctx.metrics.jobs_created.inc(&["snapshot-delete-batch", &job_ns]),
                        Err(kube::Error::Api(e)) if e.code == 409 => {}
                        Err(e) => return Err(e.into()),
                    }
                    Ok(Action::requeue(std::time::Duration::from_secs(5)))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> DeletionFacts {
        DeletionFacts {
            skip: false,
            policy: DeletionPolicy::Delete,
            phase: Some(SnapshotPhase::Succeeded),
            backup_job: JobState::Absent,
            manifest: Some("a".repeat(32)),
            repo_present: true,
            operator_pruned: true,
            cascade_retain: false,
        }
    }

    #[test]
    fn schedule_cascade_retains_unless_operator_pruned() {
        let mut f = facts();
        f.operator_pruned = false;
        f.cascade_retain = true;
        assert_eq!(decide(&f), Deletion::Release);
        f.operator_pruned = true;
        assert!(matches!(decide(&f), Deletion::DeleteManifest { .. }), "a retention prune is never cascade-retained");
    }

    #[test]
    fn skip_and_orphan_and_retain_never_contact_kopia() {
        let mut f = facts();
        f.skip = true;
        assert_eq!(decide(&f), Deletion::Orphan);
        f.skip = false;
        f.policy = DeletionPolicy::Orphan;
        assert_eq!(decide(&f), Deletion::Orphan);
        f.policy = DeletionPolicy::Retain;
        assert_eq!(decide(&f), Deletion::Release);
    }

    #[test]
    fn unsettled_waits_and_no_manifest_releases() {
        let mut f = facts();
        f.manifest = None;
        f.phase = Some(SnapshotPhase::Running);
        assert_eq!(decide(&f), Deletion::WaitForJob);
        f.phase = Some(SnapshotPhase::Failed);
        assert_eq!(decide(&f), Deletion::Release);
    }

    #[test]
    fn operator_prune_deletes_external_waits() {
        let f = facts();
        assert!(matches!(decide(&f), Deletion::DeleteManifest { .. }));
        let mut ext = facts();
        ext.operator_pruned = false;
        assert!(matches!(decide(&ext), Deletion::AwaitDispatcher { .. }));
        let mut gone = facts();
        gone.repo_present = false;
        assert_eq!(decide(&gone), Deletion::Orphan);
    }
}
