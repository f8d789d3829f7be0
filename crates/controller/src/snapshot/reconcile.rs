//! Snapshot reconciler: observe (stores, the CR) -> `plan::plan` -> apply (finalizer, one
//! status write, Job, Events, nudge). The deletion path lives in `delete.rs`.
use std::sync::Arc;

use chrono::{DateTime, Utc};
use kopiur_api::Snapshot;
use kopiur_api::names::{event, finalizer, reason};
use kopiur_api::shared::RepositoryKind;
use kopiur_api::shared::status::{ResolvedRepository, Timing};
use kopiur_api::snapshot::{JobRef, SnapshotPhase, SnapshotResolved};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};

use super::plan::{Completion, Step, plan};
use crate::context::Context;
use crate::error::{ApiStep, Error};
use crate::metrics::labels::{KindLabels, ReasonLabels};

pub async fn reconcile(snap: Arc<Snapshot>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.metrics.reconciliations.inc(KindLabels { kind: "Snapshot".into() });
    let now = Utc::now();
    if snap.meta().deletion_timestamp.is_some() {
        return super::delete::reconcile_deletion(&snap, &ctx, now).await;
    }
    run_path(&snap, &ctx, now).await
}

async fn run_path(snap: &Snapshot, ctx: &Context, now: DateTime<Utc>) -> Result<Action, Error> {
    let ns = snap.namespace().unwrap_or_default();
    let status = snap.status.clone().unwrap_or_default();
    let obs = super::observe::observe(ctx, snap, now).await?;
    let mut d = plan(&obs.facts, now);
    let api: Api<Snapshot> = Api::namespaced(ctx.client.clone(), &ns);
    // client required from here on.
    // The `<name>-pin` Job (docs/design/api-contract.md §7.1): runs whatever the backup's phase; never the backup Job.
    let pin = super::pin::reconcile(ctx, snap, obs.repo.as_ref(), &obs.facts.gate, &obs.facts.missing_secrets).await?;
    // CSI staging (copyMethod Snapshot | Clone): may hold the launch or fail the run; releases
    // the staged objects of a run that is over.
    super::stage::apply(ctx, snap, &obs, &mut d, now).await?;
    let mut fresh: Option<Snapshot> = None;
    if d.add_finalizer {
        let mut fins = snap.finalizers().to_vec();
        fins.push(finalizer::SNAPSHOT_CLEANUP.to_string());
        let body = serde_json::json!({"metadata": {"finalizers": fins, "resourceVersion": snap.resource_version()}});
        fresh = Some(
            api.patch(&snap.name_any(), &PatchParams::default(), &Patch::Merge(&body))
                .await
                .step("add Snapshot finalizer")?,
        );
    }
    // The Job first: a lost status write is healed by adopting the Job next time, while a
    // Running status without a Job would read as a lost Job.
    if d.step == Step::Launch
        && let Some(Ok(b)) = &obs.built
    {
        launch(ctx, snap, b).await?;
    }
    let mut next = next_status(snap, &obs, &d, now);
    // A controller-side refusal: terminal Failed without a Job, counted on the transition.
    if matches!(next.phase, Some(SnapshotPhase::Failed))
        && !matches!(status.phase, Some(SnapshotPhase::Failed))
        && status.job.is_none()
        && d.step != Step::Launch
    {
        let reason = d.conditions.iter().find(|c| c.type_ == "Ready").map(|c| c.reason.clone()).unwrap_or_default();
        ctx.metrics.snapshot_refusals.inc(ReasonLabels { namespace: ns.clone(), name: snap.name_any(), reason });
    }
    super::pin::apply_to_status(&mut next, &pin, snap.meta().generation.unwrap_or(0), now);
    let written = crate::status::write_status(&api, fresh.as_ref().unwrap_or(snap), &status, &next).await?.landed();
    // After the Failed status landed: deleting first would read as a lost Job if the write lost
    // a conflict. A failed delete does not hold back the Events; the requeue retries it.
    if d.delete_job
        && written
        && let Some(j) = &obs.job
    {
        crate::wedged::io::delete_job(&ctx.client, j).await;
    }
    announce(ctx, snap, &obs, &d, &next, written).await;
    if d.nudge
        && let Some(rv) = &obs.repo
        && let Err(e) = ctx.nudge(rv, now).await
    {
        tracing::warn!(error = %e, snapshot = %snap.name_any(), "stamping reverify-requested-at failed");
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

/// Creates the policy's cache PVC (once, then reused as it is: a PVC's class and size are
/// not edited in place; delete it to resize) and the backup Job, both idempotent by name.
async fn launch(ctx: &Context, snap: &Snapshot, b: &super::job::Built) -> Result<(), Error> {
    let ns = snap.namespace().unwrap_or_default();
    let name = snap.name_any();
    ctx.ensure_mover_rbac(&ns).await?;
    if let Some(pvc) = &b.cache_claim {
        match Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(ctx.client.clone(), &ns)
            .create(&PostParams::default(), pvc)
            .await
        {
            Ok(_) => {
                tracing::info!(snapshot = %name, namespace = %ns, pvc = %pvc.name_any(), "created the policy's kopia cache PVC")
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(Error::api("create kopia cache PVC", e)),
        }
    }
    if ctx.create_mover_job(&ns, &b.job, "backup").await? {
        tracing::info!(snapshot = %name, namespace = %ns, bytes = b.bytes, "launched backup Job");
    }
    Ok(())
}

/// The desired status: the plan's phase, failure and conditions; the pin of repository (with
/// uid), identity, policy and deletion policy, once; the Job and start time on a launch. Pure.
fn next_status(
    snap: &Snapshot,
    obs: &super::observe::RunObserved,
    d: &super::plan::RunDecision,
    now: DateTime<Utc>,
) -> kopiur_api::snapshot::SnapshotStatus {
    let status = snap.status.clone().unwrap_or_default();
    let mut next = status.clone();
    if let Some(p) = &d.phase {
        next.phase = Some(p.clone());
    }
    if next.origin.is_none() {
        next.origin = Some(obs.origin.clone());
    }
    next.observed_generation = snap.meta().generation;
    next.source_missing_since = d.source_missing_since;
    next.preflight_since = d.preflight_since;
    if let Some(f) = &d.failure {
        next.failure = Some(Box::new(f.clone()));
    }
    if next.resolved.is_none()
        && let (Some(r), Some(rv), Some(p), Some(rc)) = (&obs.rref, &obs.repo, &obs.policy, &obs.recipe)
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
        next.job = Some(Box::new(JobRef { name: obs.job_name.clone(), attempts: 0 }));
        next.timing = Some(Timing { start_time: Some(now), ..Timing::default() });
    }
    if d.record_completion.is_some() {
        next.completion_recorded_at = Some(now);
    }
    if let Some(t) = d.release_started_at {
        next.release_started_at = Some(t);
    }
    next.conditions = crate::conditions::merge_conditions(
        &status.conditions,
        &d.conditions,
        snap.meta().generation.unwrap_or(0),
        now,
    );
    next
}

/// The Events of this pass, once its status write `written` landed: a discovered row forced
/// to Retain, the plan's warning, and a completion.
async fn announce(
    ctx: &Context,
    snap: &Snapshot,
    obs: &super::observe::RunObserved,
    d: &super::plan::RunDecision,
    next: &kopiur_api::snapshot::SnapshotStatus,
    written: bool,
) {
    let reference = snap.object_ref(&());
    let status = snap.status.clone().unwrap_or_default();
    // docs/design/api-contract.md §7.6: a discovered row whose spec is not `Retain` (or carries `onScheduleDelete`) is
    // forced to Retain with one Warning `InvalidSpec` per generation: emitted by the reconcile
    // whose status write records that generation as observed.
    if written
        && obs.facts.discovered
        && status.observed_generation != snap.meta().generation
        && let Some(message) = super::plan::discovered_row_violation(&snap.spec)
    {
        ctx.event(&reference, true, event::INVALID_SPEC, message).await;
    }
    if let Some((reason, note)) = &d.warning {
        ctx.event(&reference, true, reason, note.clone()).await;
    }
    // A completion whose status write lost a conflict is decided again on the newer object;
    // announcing it now as well would emit its Event twice.
    match d.record_completion.filter(|_| written) {
        Some(Completion::Succeeded) => {
            let id = next.snapshot.as_ref().and_then(|s| s.kopia_snapshot_id.clone()).unwrap_or_default();
            ctx.event(&reference, false, event::SNAPSHOT_SUCCEEDED, format!("kopia snapshot {id} created")).await;
        }
        Some(Completion::Unchanged) => {
            ctx.event(&reference, false, event::SNAPSHOT_SUCCEEDED, "source unchanged; no new manifest".into()).await;
        }
        Some(Completion::Failed) => {
            let msg = next.failure.as_ref().and_then(|f| f.message.clone()).unwrap_or_default();
            let wedged = d.conditions.iter().any(|c| c.type_ == "Ready" && c.reason == reason::MOVER_POD_WEDGED);
            let why = if wedged { event::MOVER_POD_WEDGED } else { event::SNAPSHOT_FAILED };
            ctx.event(&reference, true, why, msg).await;
        }
        None => {}
    }
}
