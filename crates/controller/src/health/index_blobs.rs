//! Index-blob health (docs/design/repository-breaker.md §3.10): `indexBlobCount > health.indexBlobWarnThreshold` sets
//! `IndexBlobHealth=False`/`TooManyIndexBlobs` with one Warning Event of that name per
//! transition into False; otherwise True/`Healthy`. A threshold of 0 disables the check, which
//! reads as True/`Healthy` (the "otherwise" branch), so a False left over from before the check
//! was disabled is cleared. With no count known yet no condition is rendered. It never touches
//! the phase, Ready or any launch decision. Pure: the caller passes the previous condition.
use kopiur_api::names::{condition, event, reason};

use super::fold::{Event, EventType};
use super::kstatus::{Cond, CondStatus};
use super::plan::Decision;
use super::types::{RepoIdentity, RepoKind};

/// The verdict for one reconcile: the condition to render and the Event for a transition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexBlobHealth {
    pub condition: Cond,
    pub event: Option<Event>,
}

/// Where the repository's Maintenance can be looked at.
fn maintenance_hint(id: &RepoIdentity) -> String {
    match (id.kind, id.namespace.as_deref()) {
        (RepoKind::Repository, Some(ns)) => format!("kubectl get maintenance -n {ns}"),
        (RepoKind::Repository, None) | (RepoKind::ClusterRepository, _) => "kubectl get maintenance -A".to_string(),
    }
}

/// `count` is the last known `status.storageStats.indexBlobCount` (after this reconcile's fold),
/// `threshold` is `spec.health.indexBlobWarnThreshold` (≤ 0 disables), `was_false` says the
/// stored `IndexBlobHealth` condition is False. None when no count is known.
pub fn index_blob_health(
    id: &RepoIdentity,
    count: Option<u64>,
    threshold: i32,
    was_false: bool,
) -> Option<IndexBlobHealth> {
    let count = count?;
    if threshold <= 0 {
        return Some(IndexBlobHealth {
            condition: Cond {
                type_: condition::INDEX_BLOB_HEALTH,
                status: CondStatus::True,
                reason: reason::HEALTHY.to_string(),
                message: format!("{count} index blobs; the check is disabled (health.indexBlobWarnThreshold is 0)"),
            },
            event: None,
        });
    }
    if count > threshold as u64 {
        let message = format!(
            "{count} index blobs exceed health.indexBlobWarnThreshold {threshold}: check that maintenance runs and \
             succeeds for this repository ({})",
            maintenance_hint(id)
        );
        let event = (!was_false).then(|| Event {
            type_: EventType::Warning,
            reason: event::TOO_MANY_INDEX_BLOBS,
            note: message.clone(),
        });
        return Some(IndexBlobHealth {
            condition: Cond {
                type_: condition::INDEX_BLOB_HEALTH,
                status: CondStatus::False,
                reason: reason::TOO_MANY_INDEX_BLOBS.to_string(),
                message,
            },
            event,
        });
    }
    Some(IndexBlobHealth {
        condition: Cond {
            type_: condition::INDEX_BLOB_HEALTH,
            status: CondStatus::True,
            reason: reason::HEALTHY.to_string(),
            message: format!("{count} index blobs (health.indexBlobWarnThreshold {threshold})"),
        },
        event: None,
    })
}

/// Adds the index-blob verdict to a decision: the condition (replacing any of the same type)
/// and the transition Event. Reads the count the decision is about to write.
pub fn apply(d: &mut Decision, id: &RepoIdentity, threshold: i32, was_false: bool) {
    let Some(v) = index_blob_health(id, d.status.index_blob_count, threshold, was_false) else { return };
    d.conditions.retain(|c| c.type_ != condition::INDEX_BLOB_HEALTH);
    d.conditions.push(v.condition);
    d.events.extend(v.event);
}
