//! SnapshotSchedule writes: the plan's disposition (replacing or skipping a run), the slot's
//! children (idempotent by name), `onScheduleDelete` propagation and history pruning (each
//! DELETE stamped `pruned-by` first). Every function here needs the client.
use std::sync::Arc;

use kopiur_api::names::{event, finalizer, pruned_by};
use kopiur_api::shared::status::NameRef;
use kopiur_api::snapshot::SnapshotSpec;
use kopiur_api::snapshot_schedule::{ScheduleRecord, SnapshotScheduleStatus};
use kopiur_api::{Snapshot, SnapshotSchedule};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};

use super::observe::{history_prunes, unreadable};
use super::plan::{Child, Disposition, Fire, ScheduleDecision};
use crate::context::Context;
use crate::error::{ApiStep, Error};
use crate::metrics::labels::{ReasonLabels, ScheduleLabels};
use crate::mover_job::owner_of;
use crate::prune::stamp_and_delete;

/// What the disposition itself asks for: a replaced run deleted, a skipped slot counted and
/// told, a slot with nothing to back up recorded (so a runOnCreate fire never fires late).
pub(super) async fn disposition(
    ctx: &Context,
    sched: &SnapshotSchedule,
    kids: &[Arc<Snapshot>],
    d: &ScheduleDecision,
    next: &mut SnapshotScheduleStatus,
) -> Result<(), Error> {
    let ns = sched.namespace().unwrap_or_default();
    let name = sched.name_any();
    let reference = sched.object_ref(&());
    if let Disposition::ReplaceActive { victims } = &d.disposition {
        // A run whose phase this version cannot read is never deleted on a guess.
        let keep = unreadable(kids);
        let snaps: Api<Snapshot> = Api::namespaced(ctx.client.clone(), &ns);
        for v in victims.iter().filter(|v| !keep.contains(v)) {
            stamp_and_delete(&snaps, v, pruned_by::REPLACED_RUN).await?;
        }
    }
    if let Some(reason) = d.disposition.skip_reason() {
        tracing::info!(schedule = %name, namespace = %ns, reason, "schedule slot skipped");
        ctx.metrics.schedule_slots_skipped.inc(ReasonLabels {
            namespace: ns.clone(),
            name: name.clone(),
            reason: reason.into(),
        });
        if matches!(d.disposition, Disposition::SkipExpired) {
            ctx.event(
                &reference,
                false,
                event::SCHEDULE_SLOT_SKIPPED,
                "the slot passed its startingDeadlineSeconds; re-pinned to the next slot".into(),
            )
            .await;
        }
    }
    if let Disposition::SkipNoSource { message, run_on_create_slot } = &d.disposition {
        tracing::info!(schedule = %name, namespace = %ns, %message, "schedule slot created no child");
        ctx.event(
            &reference,
            false,
            event::SCHEDULE_SLOT_SKIPPED,
            format!("{message}; no Snapshot created for this slot"),
        )
        .await;
        // The runOnCreate fire happened, with nothing to back up: never fire it late.
        if let Some(slot) = run_on_create_slot {
            next.last_schedule = Some(ScheduleRecord {
                at: Some(*slot),
                slot: Some(*slot),
                snapshot_ref: None,
                timezone: d.next.as_ref().map(|p| p.timezone.clone()),
            });
        }
    }
    Ok(())
}

/// The slot's child Snapshot for `c` under policy `pname`. Pure.
pub(super) fn child_snapshot(
    sched: &SnapshotSchedule,
    c: &Child,
    pname: &str,
    default_deletion: kopiur_api::snapshot_policy::DeletionPolicy,
) -> Snapshot {
    Snapshot {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(c.name.clone()),
            namespace: sched.namespace(),
            labels: Some(super::plan::child_labels(&sched.name_any(), pname)),
            owner_references: Some(vec![owner_of(sched)]),
            finalizers: Some(vec![finalizer::SNAPSHOT_CLEANUP.to_string()]),
            ..Default::default()
        },
        spec: SnapshotSpec {
            policy_ref: Some(kopiur_api::shared::PolicyRef { name: pname.to_string(), namespace: None }),
            source: c.source.clone().map(Box::new),
            deletion_policy: Some(default_deletion),
            on_schedule_delete: Some(sched.spec.deletion.on_schedule_delete),
            ..SnapshotSpec::default()
        },
        status: None,
    }
}

/// Creates the slot's children and records the slot in `lastSchedule`. A child that already
/// exists is this slot's (idempotent), unless it belongs to another policy or source: a
/// child-name hash collision, said in an Event rather than left silently unbacked-up.
pub(super) async fn fire(
    ctx: &Context,
    sched: &SnapshotSchedule,
    policy_name: Option<&String>,
    fire: &Fire,
    d: &ScheduleDecision,
    next: &mut SnapshotScheduleStatus,
) -> Result<(), Error> {
    let ns = sched.namespace().unwrap_or_default();
    let name = sched.name_any();
    let snaps: Api<Snapshot> = Api::namespaced(ctx.client.clone(), &ns);
    for c in &fire.children {
        // The child's policy: its own under a policySelector, else the policyRef.
        let Some(pname) = c.policy.as_ref().or(policy_name) else { continue };
        let default_deletion = ctx
            .stores
            .policies
            .get(&ObjectRef::new(pname).within(&ns))
            .map(|p| p.spec.default_deletion_policy)
            .unwrap_or_default();
        match snaps.create(&PostParams::default(), &child_snapshot(sched, c, pname, default_deletion)).await {
            Ok(_) => {
                ctx.metrics
                    .schedule_snapshots_created
                    .inc(ScheduleLabels { namespace: ns.clone(), name: name.clone() });
                tracing::info!(schedule = %name, child = %c.name, "scheduled Snapshot created")
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let existing = snaps.get_opt(&c.name).await.step("read schedule child")?;
                let same = existing.as_ref().is_none_or(|x| {
                    x.spec.policy_ref.as_ref().map(|p| p.name.as_str()) == Some(pname.as_str())
                        && x.spec.source.as_deref() == c.source.as_ref()
                });
                if !same {
                    let note = format!(
                        "slot child {} already exists for another policy or source; {pname} {:?} was not backed up \
                         for this slot (a child-name hash collision: rename the policy or PVC)",
                        c.name,
                        c.source.as_ref().map(|x| &x.target.pvc.name)
                    );
                    tracing::warn!(schedule = %name, child = %c.name, "{note}");
                    ctx.event(&sched.object_ref(&()), true, "ScheduleChildNameCollision", note).await;
                }
            }
            Err(e) => return Err(Error::api("create schedule child", e)),
        }
    }
    // With a fan-out, `snapshotRef` names the slot's first child (children sort by source).
    next.last_schedule = Some(ScheduleRecord {
        at: Some(fire.at),
        slot: Some(fire.slot),
        snapshot_ref: fire.children.first().map(|c| NameRef { name: c.name.clone() }),
        timezone: d.next.as_ref().map(|p| p.timezone.clone()),
    });
    Ok(())
}

/// onScheduleDelete propagation (T43): live children whose stamp differs get the schedule's
/// value; a child already being deleted keeps the stamp it was deleted under.
pub(super) async fn propagate_on_schedule_delete(
    ctx: &Context,
    sched: &SnapshotSchedule,
    kids: &[Arc<Snapshot>],
) -> Result<(), Error> {
    let snaps: Api<Snapshot> = Api::namespaced(ctx.client.clone(), &sched.namespace().unwrap_or_default());
    let desired = sched.spec.deletion.on_schedule_delete;
    let stamps: Vec<crate::deletion::cascade::ChildStamp> = kids
        .iter()
        .map(|k| crate::deletion::cascade::ChildStamp {
            name: k.name_any(),
            being_deleted: k.meta().deletion_timestamp.is_some(),
            stamp: k.spec.on_schedule_delete,
        })
        .collect();
    for child in crate::deletion::cascade::propagation_targets(desired, &stamps) {
        let body = serde_json::json!({"spec": {"onScheduleDelete": desired}});
        match snaps.patch(&child, &PatchParams::default(), &Patch::Merge(&body)).await {
            Ok(_) => {}
            // Gone since the store was read: nothing to stamp.
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(Error::api("stamp onScheduleDelete on child", e)),
        }
    }
    Ok(())
}

/// failedJobsHistoryLimit: the older Failed and Unchanged children, stamped and deleted.
pub(super) async fn prune_history(
    ctx: &Context,
    sched: &SnapshotSchedule,
    kids: &[Arc<Snapshot>],
) -> Result<(), Error> {
    let ns = sched.namespace().unwrap_or_default();
    let snaps: Api<Snapshot> = Api::namespaced(ctx.client.clone(), &ns);
    for victim in history_prunes(kids, sched.spec.failed_jobs_history_limit) {
        stamp_and_delete(&snaps, &victim, pruned_by::FAILED_HISTORY).await?;
        tracing::info!(schedule = %sched.name_any(), namespace = %ns, snapshot = %victim, "failed run pruned (failedJobsHistoryLimit)");
    }
    Ok(())
}
