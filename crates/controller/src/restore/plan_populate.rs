//! The populate paths of the Restore plan (`target: populator: {}`, docs/controller.md
//! "Volume populator"): before the launch, and while the populate runs.
use chrono::{DateTime, Duration, Utc};
use kopiur_api::names::{condition, reason};
use kopiur_api::restore::RestorePhase;

use super::plan::{RestoreDecision, RestoreFacts, Step, decision, fail};
use super::populate::{Populate, Prime};
use crate::conditions::{CondStatus, cond};
use crate::run_job::JobState;

/// A populate before its launch: wait for a claim or its node, complete at once for a claim
/// that is bound already, refuse what cannot be populated. None: go on to the launch.
pub(super) fn before_populate(f: &RestoreFacts, p: &Populate, now: DateTime<Utc>) -> Option<RestoreDecision> {
    let waiting = |reason: &str, message: String, secs: i64| {
        let mut d = decision(RestorePhase::Pending, CondStatus::False, reason, message);
        d.requeue_after = Some(Duration::seconds(secs));
        d
    };
    match p {
        Populate::NoClaim => Some(waiting(
            reason::WAITING_FOR_CLAIM,
            format!(
                "no PVC in namespace {} names this Restore in spec.dataSourceRef (apiGroup {}, kind Restore); the populate starts when one does",
                f.namespace,
                kopiur_api::names::GROUP
            ),
            60,
        )),
        Populate::AwaitingConsumer { claim, class } => Some(waiting(
            reason::WAITING_FOR_CONSUMER,
            format!(
                "PVC {claim} uses StorageClass {class}, which binds WaitForFirstConsumer: the populate starts once a pod that mounts it is scheduled"
            ),
            60,
        )),
        Populate::Priming { claim, prime: Prime::Foreign, .. } => Some(waiting(
            reason::WAITING_FOR_PRIME,
            format!("the prime PVC of an earlier Restore for PVC {claim} is still being removed"),
            10,
        )),
        Populate::AlreadyBound { claim, volume } | Populate::Populated { claim, volume, .. } => {
            let message = format!(
                "PVC {claim} is already bound to volume {volume}: nothing is restored (a PVC is populated once; to restore again, delete and re-create the PVC with a new Restore)"
            );
            let mut d =
                decision(RestorePhase::Completed, CondStatus::True, reason::TARGET_ALREADY_BOUND, message.clone());
            d.conditions.push(cond(
                condition::TARGET_ALREADY_BOUND,
                CondStatus::True,
                reason::TARGET_ALREADY_BOUND,
                message,
            ));
            Some(d)
        }
        Populate::Refused { message } => Some(fail(reason::POPULATE_REFUSED, message.clone(), false, f, now)),
        Populate::ClaimGone { claim } => Some(fail(
            reason::POPULATE_TARGET_GONE,
            format!("PVC {claim} was deleted or re-created before the populate started"),
            false,
            f,
            now,
        )),
        Populate::Priming { prime: Prime::Absent | Prime::Pending | Prime::Bound { .. }, .. } => None,
    }
}

/// A running populate: bind once the data is in the prime, complete once the claim is bound
/// to it, fail (discarding the prime) when the claim went away. None: the Job is still the
/// story (the usual Restoring path).
pub(super) fn populating(f: &RestoreFacts, p: &Populate, now: DateTime<Utc>) -> Option<RestoreDecision> {
    let restored = f.pinned_empty || matches!(f.job.state, JobState::Complete { .. });
    let running = |reason: &str, message: String, step: Option<Step>| {
        let mut d = decision(RestorePhase::Restoring, CondStatus::False, reason, message);
        d.steps.extend(step);
        d.requeue_after = Some(Duration::seconds(3));
        d
    };
    let discard = |reason: &str, message: String| {
        let mut d = fail(reason, message, false, f, now);
        d.steps.push(Step::DeletePrime);
        // Any pod of the Job, finished or not, holds the prime.
        d.delete_job = f.job.state != JobState::Absent;
        d
    };
    match p {
        Populate::Populated { claim, volume, prime_left } => {
            let mut d = decision(
                RestorePhase::Completed,
                CondStatus::True,
                reason::RESTORE_SUCCEEDED,
                format!("PVC {claim} is bound to volume {volume}, populated by this Restore"),
            );
            if *prime_left {
                // The Job's finished pod holds the prime: it goes too (its result is in status).
                d.steps.push(Step::DeletePrime);
                d.delete_job = f.job.state != JobState::Absent;
            }
            Some(d)
        }
        Populate::ClaimGone { claim } => Some(discard(
            reason::POPULATE_TARGET_GONE,
            format!(
                "PVC {claim} was deleted or re-created before its data was bound; the restored copy was discarded (a new PVC needs a new Restore)"
            ),
        )),
        Populate::AlreadyBound { claim, volume } => Some(discard(
            reason::POPULATE_TARGET_GONE,
            format!(
                "PVC {claim} was bound to volume {volume} by something else during the populate; the restored copy was discarded"
            ),
        )),
        Populate::Priming { claim, prime: Prime::Bound { volume }, .. } if restored => Some(running(
            reason::BINDING,
            format!("binding the restored volume {volume} to PVC {claim}"),
            Some(Step::Rebind { volume: volume.clone() }),
        )),
        Populate::Priming { claim, prime: Prime::Absent | Prime::Foreign, .. } if restored && !f.pinned_empty => {
            Some(discard(
                reason::POPULATE_PRIME_LOST,
                format!("the prime PVC vanished before its volume was bound to PVC {claim}; create a new Restore"),
            ))
        }
        Populate::Priming { prime: Prime::Absent, .. } if f.pinned_empty => Some(running(
            reason::POPULATING,
            "no snapshot: the PVC gets an empty volume".into(),
            Some(Step::CreatePrime),
        )),
        Populate::Priming { claim, .. } if restored => Some(running(
            reason::BINDING,
            format!("waiting for the prime volume of PVC {claim} to be provisioned"),
            None,
        )),
        Populate::Priming { .. } | Populate::NoClaim | Populate::AwaitingConsumer { .. } | Populate::Refused { .. } => {
            None
        }
    }
}
