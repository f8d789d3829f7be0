//! The run path's CSI staging step (`crate::staging`), between the plan and the launch: a
//! `copyMethod: Snapshot | Clone` run launches its Job only once its staged PVC exists, and
//! every run that staged releases the staged objects when it ends.
//!
//! Order, so no object can leak: the first pass past the gate only records `Staging=True`
//! (the staging clock starts there, after the gate); later passes create the VolumeSnapshot
//! and the staged PVC; a terminal run (Succeeded, Unchanged, Failed by the mover, a deadline,
//! a staging timeout or refusal) deletes both before it writes `Staging=False`, and its mover
//! Job (with the pod that mounted the staged PVC) once that status has landed.
use chrono::{DateTime, Utc};
use kopiur_api::Snapshot;
use kopiur_api::shared::status::Failure;
use kopiur_api::snapshot::SnapshotPhase;
use kopiur_api::snapshot_policy::CopyMethod;
use kube::ResourceExt;

use super::ctx::PipelineCtx;
use super::observe::RunObserved;
use super::plan::{RunDecision, Step, failed_terminal};
use crate::conditions::cond;
use crate::conditions::{Standing, trio};
use crate::error::Error;
use crate::health::kstatus::CondStatus;
use crate::metrics::labels::{StagingLabels, StagingMethodLabels};
use crate::staging::{self, Outcome};

/// How soon a staging wait looks again (the VolumeSnapshot and PVC are not watched).
const POLL: chrono::Duration = chrono::Duration::seconds(2);

fn method_name(m: CopyMethod) -> &'static str {
    match m {
        CopyMethod::Snapshot => "Snapshot",
        CopyMethod::Clone => "Clone",
        CopyMethod::Direct => "Direct",
    }
}

/// Holds the launch: Pending, waiting on staging, `Staging=True` (`reason`).
fn hold(d: &mut RunDecision, reason: &str, message: String) {
    d.step = Step::Idle;
    d.phase = Some(SnapshotPhase::Pending);
    d.conditions = trio(Standing::Waiting, staging::WAITING_REASON, message.clone());
    d.conditions.push(cond(staging::CONDITION, CondStatus::True, reason, message));
    d.requeue_after = Some(POLL);
}

fn fail(obs: &RunObserved, d: &mut RunDecision, message: String, now: DateTime<Utc>) {
    let failure = Failure { message: Some(message), ..Failure::default() };
    let mut f = failed_terminal(&obs.facts, staging::FAILED_REASON, failure, false, now);
    f.add_finalizer = d.add_finalizer;
    f.source_missing_since = d.source_missing_since;
    f.preflight_since = d.preflight_since;
    *d = f;
}

/// Applies staging to the plan's decision `d` (may hold the launch or fail the run), and
/// releases the staged objects of a run that is over.
pub(super) async fn apply(
    ctx: &PipelineCtx,
    snap: &Snapshot,
    obs: &RunObserved,
    d: &mut RunDecision,
    now: DateTime<Utc>,
) -> Result<(), Error> {
    let status = snap.status.clone().unwrap_or_default();
    let ns = snap.namespace().unwrap_or_default();
    let uid = snap.uid().unwrap_or_default();
    let held = staging::held(&status.conditions).cloned();
    if d.step == Step::Launch
        && let (Some(policy), Some(recipe)) = (&obs.policy, &obs.recipe)
        && policy.spec.copy_method != CopyMethod::Direct
    {
        let method = policy.spec.copy_method;
        let spec = &policy.spec;
        match &held {
            // Recorded before anything exists, so nothing can be created unrecorded.
            None => {
                hold(d, staging::PREPARING, format!("staging a {} copy of PVC {}", method_name(method), recipe.pvc))
            }
            Some(since) => {
                let outcome = staging::prepare(
                    &ctx.client,
                    &ns,
                    &uid,
                    &recipe.pvc,
                    method,
                    spec.volume_snapshot_class_name.as_deref(),
                    spec.staging.as_ref(),
                    &super::job::owner_of(snap),
                )
                .await?;
                let started = DateTime::<Utc>::from_timestamp(since.last_transition_time.0.as_second(), 0);
                let waited = started.map(|s| (now - s).to_std().unwrap_or_default()).unwrap_or_default();
                let labels = |outcome| StagingLabels { namespace: &ns, method: method_name(method), outcome };
                match outcome {
                    Outcome::Ready { claim } => {
                        // Counted on the transition only (a lost status write repeats it once).
                        if since.reason != staging::STAGED {
                            ctx.metrics.staging.inc(labels("staged"));
                            ctx.metrics.staging_wait_seconds.add(
                                StagingMethodLabels { namespace: &ns, method: method_name(method) },
                                waited.as_secs(),
                            );
                        }
                        d.conditions.push(cond(
                            staging::CONDITION,
                            CondStatus::True,
                            staging::STAGED,
                            format!(
                                "PVC {claim} holds a {} copy of PVC {} (staged in {}s)",
                                method_name(method),
                                recipe.pvc,
                                waited.as_secs()
                            ),
                        ))
                    }
                    Outcome::Waiting(message) => match staging::timeout(spec.staging.as_ref()) {
                        Some(t) if waited > t => {
                            ctx.metrics.staging.inc(labels("failed"));
                            fail(
                                obs,
                                d,
                                format!("staging timed out after {}s (spec.staging.timeout): {message}", t.as_secs()),
                                now,
                            )
                        }
                        Some(_) | None => hold(d, staging::PREPARING, message),
                    },
                    Outcome::Refused(message) => {
                        ctx.metrics.staging.inc(labels("failed"));
                        fail(obs, d, message, now)
                    }
                }
            }
        }
    }
    let over = d.phase.as_ref().or(status.phase.as_ref()).is_some_and(SnapshotPhase::is_terminal);
    if over && held.is_some() {
        staging::release(&ctx.client, &ns, &uid).await?;
        let method = obs.policy.as_ref().map(|p| method_name(p.spec.copy_method)).unwrap_or("unknown");
        ctx.metrics.staging.inc(StagingLabels { namespace: &ns, method, outcome: "released" });
        // A finished pod still holds its PVC (Kubernetes deletes a PVC only once no pod that
        // mounts it exists, finished or not): the mover Job goes too, with its pod, once this
        // terminal status has landed. The result and the stderr tail stay in the status.
        d.delete_job = true;
        d.conditions.push(cond(
            staging::CONDITION,
            CondStatus::False,
            staging::RELEASED,
            "the staged PVC and VolumeSnapshot are deleted",
        ));
    }
    Ok(())
}

/// A Snapshot deleted mid-staging: its staged PVC and VolumeSnapshot go now (their owner
/// reference is only the garbage collector's backstop, once the finalizer is off).
pub(super) async fn release_on_delete(ctx: &PipelineCtx, snap: &Snapshot) -> Result<(), Error> {
    if let Some(status) = &snap.status
        && staging::held(&status.conditions).is_some()
    {
        staging::release(&ctx.client, &snap.namespace().unwrap_or_default(), &snap.uid().unwrap_or_default()).await?;
    }
    Ok(())
}
