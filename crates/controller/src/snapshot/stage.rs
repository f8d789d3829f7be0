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

use super::observe::RunObserved;
use super::plan::{RunDecision, Step, failed_terminal};
use crate::conditions::CondStatus;
use crate::conditions::cond;
use crate::conditions::{Standing, trio};
use crate::context::Context;
use crate::error::Error;
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
    ctx: &Context,
    snap: &Snapshot,
    obs: &RunObserved,
    d: &mut RunDecision,
    now: DateTime<Utc>,
) -> Result<(), Error> {
    let status = snap.status.clone().unwrap_or_default();
    let held = staging::held(&status.conditions).cloned();
    if d.step == Step::Launch
        && let (Some(policy), Some(recipe)) = (&obs.policy, &obs.recipe)
        && policy.spec.copy_method != CopyMethod::Direct
    {
        let method = policy.spec.copy_method;
        match &held {
            // Recorded before anything exists, so nothing can be created unrecorded.
            None => {
                hold(d, staging::PREPARING, format!("staging a {} copy of PVC {}", method_name(method), recipe.pvc))
            }
            Some(since) => stage(ctx, snap, obs, d, since, now).await?,
        }
    }
    let over = d.phase.as_ref().or(status.phase.as_ref()).is_some_and(SnapshotPhase::is_terminal);
    if let Some(held) = held.as_ref().filter(|_| over) {
        release(ctx, snap, obs, d, held, now).await?;
    }
    Ok(())
}

/// A staging pass past the first: create or look at the staged copy, then launch (it is
/// ready), hold (not yet), or fail the run (refused, or waited past `spec.staging.timeout`).
async fn stage(
    ctx: &Context,
    snap: &Snapshot,
    obs: &RunObserved,
    d: &mut RunDecision,
    since: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition,
    now: DateTime<Utc>,
) -> Result<(), Error> {
    // `apply` stages only a run with a policy and a recipe.
    let (Some(policy), Some(recipe)) = (&obs.policy, &obs.recipe) else { return Ok(()) };
    let ns = snap.namespace().unwrap_or_default();
    let uid = snap.uid().unwrap_or_default();
    let method = policy.spec.copy_method;
    let spec = &policy.spec;
    let outcome = staging::prepare(
        &ctx.client,
        &ns,
        &uid,
        &recipe.pvc,
        method,
        spec.volume_snapshot_class_name.as_deref(),
        spec.staging.as_ref(),
        &crate::mover_job::owner_of(snap),
    )
    .await?;
    let started = DateTime::<Utc>::from_timestamp(since.last_transition_time.0.as_second(), 0);
    let waited = started.map(|s| (now - s).to_std().unwrap_or_default()).unwrap_or_default();
    let labels = |outcome: &str| StagingLabels {
        namespace: ns.clone(),
        method: method_name(method).into(),
        outcome: outcome.into(),
    };
    match outcome {
        Outcome::Ready { claim } => {
            // Counted on the transition only (a lost status write repeats it once).
            if since.reason != staging::STAGED {
                ctx.metrics.staging.inc(labels("staged"));
                ctx.metrics.staging_wait_seconds.add(
                    StagingMethodLabels { namespace: ns.clone(), method: method_name(method).into() },
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
                fail(obs, d, format!("staging timed out after {}s (spec.staging.timeout): {message}", t.as_secs()), now)
            }
            Some(_) | None => hold(d, staging::PREPARING, message),
        },
        Outcome::Refused(message) => {
            ctx.metrics.staging.inc(labels("failed"));
            fail(obs, d, message, now)
        }
    }
    Ok(())
}

/// Releases the staged objects of a run that is over: its mover Job goes too, once this
/// terminal status has landed, and the release is counted and reported (`release_verdict`).
async fn release(
    ctx: &Context,
    snap: &Snapshot,
    obs: &RunObserved,
    d: &mut RunDecision,
    held: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition,
    now: DateTime<Utc>,
) -> Result<(), Error> {
    let ns = snap.namespace().unwrap_or_default();
    let uid = snap.uid().unwrap_or_default();
    // A finished pod still holds its PVC (Kubernetes deletes a PVC only once no pod that
    // mounts it exists, finished or not): the mover Job goes too, with its pod, once this
    // terminal status has landed. The result and the stderr tail stay in the status.
    d.delete_job = true;
    let left = staging::release(&ctx.client, &ns, &uid, now).await?;
    let started = snap.status.as_ref().and_then(|s| s.release_started_at);
    let v = release_verdict(&left, &ns, held, started, ctx.config.staging_release_bound, now);
    if let Some(outcome) = v.outcome {
        let method = obs.policy.as_ref().map(|p| method_name(p.spec.copy_method)).unwrap_or("unknown");
        ctx.metrics.staging.inc(StagingLabels {
            namespace: ns.clone(),
            method: method.into(),
            outcome: outcome.into(),
        });
    }
    if let Some(note) = v.warning
        && d.warning.is_none()
    {
        d.warning = Some((staging::LEFT_EVENT, note));
    }
    d.release_started_at = v.started;
    if v.look_again {
        d.requeue_after = Some(d.requeue_after.map_or(RELEASE_POLL, |r| r.min(RELEASE_POLL)));
    }
    d.conditions.push(v.condition);
    Ok(())
}

/// How soon a run whose staged objects are not gone yet is looked at again.
const RELEASE_POLL: chrono::Duration = chrono::Duration::seconds(5);

/// What one release pass writes (pure).
#[derive(Debug, PartialEq)]
pub(super) struct ReleaseVerdict {
    pub condition: crate::conditions::Cond,
    /// `status.releaseStartedAt` to write (`None`: leave it).
    pub started: Option<DateTime<Utc>>,
    /// The `kopiur_staging_total` outcome this pass counts (on a transition only).
    pub outcome: Option<&'static str>,
    /// The Warning Event of a release that outlives the bound (on the transition only).
    pub warning: Option<String>,
    pub look_again: bool,
}

/// The release bound, from the first pass that found something left (pure): within it
/// `Staging=True / Releasing`; past it `Staging=True / ReleaseStuck`, counted once as
/// `leaked`, with a Warning naming what is left and the commands that show why; once all is
/// gone `Staging=False / Released`, counted once as `released`. Nothing is ever left silently.
pub(super) fn release_verdict(
    left: &staging::Left,
    ns: &str,
    held: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition,
    started: Option<DateTime<Utc>>,
    bound: std::time::Duration,
    now: DateTime<Utc>,
) -> ReleaseVerdict {
    if left.gone() {
        let took = started.map(|s| (now - s).num_seconds().max(0));
        let message = match took {
            Some(t) => format!("the staged PVC and VolumeSnapshot are gone ({t}s after the run ended)"),
            None => "the staged PVC and VolumeSnapshot are gone".to_string(),
        };
        return ReleaseVerdict {
            condition: cond(staging::CONDITION, CondStatus::False, staging::RELEASED, message),
            started: None,
            outcome: Some("released"),
            warning: None,
            look_again: false,
        };
    }
    let since = started.unwrap_or(now);
    let waited = (now - since).to_std().unwrap_or_default();
    let what = left.describe();
    if waited > bound {
        let message = format!(
            "staged objects not gone {}s after the run ended (bound {}s): {what}; kopiur keeps releasing them (a look every {}s, a nudge at most every 10s); see {}",
            waited.as_secs(),
            bound.as_secs(),
            RELEASE_POLL.num_seconds(),
            left.commands(ns)
        );
        let transition = held.reason != staging::RELEASE_STUCK;
        return ReleaseVerdict {
            // The message of a stuck release is written once (no churn of a counting clock).
            condition: cond(
                staging::CONDITION,
                CondStatus::True,
                staging::RELEASE_STUCK,
                if transition { message.clone() } else { held.message.clone() },
            ),
            started: Some(since),
            outcome: transition.then_some("leaked"),
            warning: transition.then_some(message),
            look_again: true,
        };
    }
    ReleaseVerdict {
        condition: cond(
            staging::CONDITION,
            CondStatus::True,
            staging::RELEASING,
            format!("deleted, not gone yet (bound {}s): {what}", bound.as_secs()),
        ),
        started: Some(since),
        outcome: None,
        warning: None,
        look_again: true,
    }
}

/// A Snapshot deleted mid-staging: its staged PVC and VolumeSnapshot go now (their owner
/// reference is only the garbage collector's backstop, once the finalizer is off).
pub(super) async fn release_on_delete(ctx: &Context, snap: &Snapshot) -> Result<(), Error> {
    if let Some(status) = &snap.status
        && staging::held(&status.conditions).is_some()
    {
        let (ns, uid) = (snap.namespace().unwrap_or_default(), snap.uid().unwrap_or_default());
        staging::release(&ctx.client, &ns, &uid, Utc::now()).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::staging::{ContentLeft, Left};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    fn held(reason: &str, message: &str) -> Condition {
        Condition {
            type_: staging::CONDITION.into(),
            status: "True".into(),
            reason: reason.into(),
            message: message.into(),
            observed_generation: None,
            last_transition_time: crate::conditions::ktime(Utc::now()),
        }
    }

    fn creating() -> Left {
        Left {
            claim: None,
            snapshot: Some("kopiur-stage-u".into()),
            content: Some(ContentLeft { name: "snapcontent-v".into(), being_created: true }),
        }
    }

    const BOUND: std::time::Duration = std::time::Duration::from_secs(60);

    /// issue 30: a release that finds something left is Releasing within the bound, from the
    /// first pass that found it (its start recorded), and looks again.
    #[test]
    fn a_release_not_done_is_releasing_within_the_bound() {
        let now = Utc::now();
        let v = release_verdict(&creating(), "app", &held(staging::STAGED, "m"), None, BOUND, now);
        assert_eq!((v.condition.status, v.condition.reason.as_str()), (CondStatus::True, staging::RELEASING));
        assert!(v.condition.message.contains("VolumeSnapshot kopiur-stage-u"), "{}", v.condition.message);
        assert!(v.condition.message.contains("has not answered CreateSnapshot"), "{}", v.condition.message);
        assert_eq!(v.started, Some(now), "the bound counts from the first pass that found something left");
        assert_eq!((v.outcome, v.warning.is_some(), v.look_again), (None, false, true));
        let later = now + chrono::Duration::seconds(60);
        let v = release_verdict(&creating(), "app", &held(staging::RELEASING, "m"), Some(now), BOUND, later);
        assert_eq!(v.condition.reason, staging::RELEASING, "exactly at the bound is still within it");
        assert_eq!(v.started, Some(now), "the start is kept");
    }

    /// issue 30: past the bound the run says ReleaseStuck, counts `leaked` and warns once, with
    /// what is left and the commands; it still looks again (the objects are still released).
    #[test]
    fn past_the_bound_a_release_is_stuck_counted_once_and_announced() {
        let start = Utc::now();
        let now = start + chrono::Duration::seconds(61);
        let v = release_verdict(&creating(), "app", &held(staging::RELEASING, "m"), Some(start), BOUND, now);
        assert_eq!((v.condition.status, v.condition.reason.as_str()), (CondStatus::True, staging::RELEASE_STUCK));
        assert_eq!(v.outcome, Some("leaked"));
        let note = v.warning.expect("a Warning on the transition");
        assert!(note.contains("not gone 61s after the run ended (bound 60s)"), "{note}");
        assert!(note.contains("kubectl -n app describe volumesnapshot kopiur-stage-u"), "{note}");
        assert!(note.contains("kubectl describe volumesnapshotcontent snapcontent-v"), "{note}");
        assert!(v.look_again);
        // The next pass: no second count, no second Event, the message kept as written.
        let stuck = held(staging::RELEASE_STUCK, &note);
        let v = release_verdict(&creating(), "app", &stuck, Some(start), BOUND, now + chrono::Duration::seconds(5));
        assert_eq!((v.outcome, v.warning), (None, None));
        assert_eq!(v.condition.message, note);
    }

    /// issue 30: once all is gone, Released (False), counted once as released, whatever came
    /// before (a stuck release heals).
    #[test]
    fn a_release_is_done_only_when_everything_is_gone() {
        let start = Utc::now();
        for before in [staging::STAGED, staging::RELEASING, staging::RELEASE_STUCK] {
            let v = release_verdict(
                &Left::default(),
                "app",
                &held(before, "m"),
                Some(start),
                BOUND,
                start + chrono::Duration::seconds(90),
            );
            assert_eq!((v.condition.status, v.condition.reason.as_str()), (CondStatus::False, staging::RELEASED));
            assert!(v.condition.message.contains("90s after the run ended"), "{}", v.condition.message);
            assert_eq!((v.outcome, v.look_again), (Some("released"), false));
        }
        let claim_only = Left { claim: Some("kopiur-stage-u".into()), ..Left::default() };
        let v = release_verdict(&claim_only, "app", &held(staging::STAGED, "m"), None, BOUND, start);
        assert_eq!(v.condition.reason, staging::RELEASING, "a PVC still held is not released");
    }
}
