//! SnapshotSchedule reconciler: observe (children, policies, facts) → `plan::plan` decides
//! the one disposition → apply it (create the slot's children idempotently by name, replace
//! or prune children, each DELETE stamped first) → write status once.
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use kopiur_api::SnapshotSchedule;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};

use super::{apply, observe, plan, report};
use crate::context::Context;
use crate::error::Error;
use crate::metrics::labels::KindLabels;

pub async fn reconcile(sched: Arc<SnapshotSchedule>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.metrics.reconciliations.inc(KindLabels { kind: "SnapshotSchedule".into() });
    if sched.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let now = Utc::now();
    let Some(obs) = observe::observe(&ctx, &sched, now) else {
        // A store it reads has not synced: an empty read would consume the slot.
        return Ok(Action::requeue(Duration::from_secs(2)));
    };
    let d = plan::plan(&obs.facts, now);
    let status = sched.status.clone().unwrap_or_default();
    let mut next = status.clone();
    next.observed_generation = sched.meta().generation;
    let mut conds = report::ready(&obs, &sched, &d.disposition);

    // client required: every write below.
    apply::disposition(&ctx, &sched, &obs.kids, &d, &mut next).await?;
    if let Some(fire) = &d.fire {
        apply::fire(&ctx, &sched, obs.policy_name.as_ref(), fire, &d, &mut next).await?;
    }
    if let Some(p) = &d.next {
        next.next_schedule = Some(kopiur_api::snapshot_schedule::ScheduleRecord {
            at: Some(p.at),
            slot: Some(p.slot),
            snapshot_ref: None,
            timezone: Some(p.timezone.clone()),
        });
    }
    if let Some(last) = report::last_successful(&obs.kids) {
        next.last_successful_schedule = Some(last);
    }
    // consecutiveFailures (docs/design/api-contract.md §8), before this pass prunes Failed history.
    next.consecutive_failures = plan::consecutive_failures(status.consecutive_failures, &observe::run_ends(&obs.kids));
    apply::propagate_on_schedule_delete(&ctx, &sched, &obs.kids).await?;
    apply::prune_history(&ctx, &sched, &obs.kids).await?;

    conds.extend(report::conditions(&obs, &sched));
    next.conditions =
        crate::conditions::merge_conditions(&status.conditions, &conds, sched.meta().generation.unwrap_or(0), now);
    let api: Api<SnapshotSchedule> = Api::namespaced(ctx.client.clone(), &sched.namespace().unwrap_or_default());
    // A lost conflict is left to the next reconcile, which the newer object's watch event brings.
    crate::status::write_status(&api, sched.as_ref(), &status, &next).await?;
    let mut requeue = d.requeue_after.to_std().unwrap_or_default().max(Duration::from_secs(1));
    // Policies are not watched here: a selector schedule re-reads them each minute so its
    // conditions follow labels being added or removed (the fire itself reads them at the slot).
    if obs.selection.is_some() {
        requeue = requeue.min(Duration::from_secs(60));
    }
    Ok(Action::requeue(requeue))
}
