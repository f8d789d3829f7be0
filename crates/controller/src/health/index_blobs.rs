//! Index-blob health (docs/design/repository-breaker.md §3.10): `indexBlobCount > health.indexBlobWarnThreshold` sets
//! `IndexBlobHealth=False`/`TooManyIndexBlobs` with one Warning Event of that name per
//! transition into False; otherwise True/`Healthy`. A threshold of 0 disables the check, which
//! reads as True/`Healthy` (the "otherwise" branch), so a False left over from before the check
//! was disabled is cleared. With no count known yet no condition is rendered. It never touches
//! the phase, Ready or any launch decision. Pure: the caller passes the previous condition.
use kopiur_api::names::{condition, event, reason};

use super::fold::{Event, EventType};
use super::plan::Decision;
use super::types::{RepoIdentity, RepoKind, Time};
use crate::conditions::{Cond, CondStatus};

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

/// While `IndexBlobHealth` stays False the request is repeated this often (a quick run that
/// could not compact enough, or failed, gets another chance without flooding Events).
pub const QUICK_REQUEST_REPEAT_SECONDS: i64 = 3600;

/// What answers a quick-maintenance request for this repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Maintainers {
    /// The Maintenances that refer to the repository, as `namespace/name` (may be empty).
    Found(Vec<String>),
    /// A ReadOnly repository skips maintenance: nothing is requested.
    ReadOnly,
}

/// `IndexBlobHealth` past its threshold schedules a quick maintenance on its own and says so;
/// so does a breaker open for `TimedOut` (slow, not down: maintenance is the cure). Runs after
/// [`apply`]. A request is due when the rendered `IndexBlobHealth` turns False, when the
/// breaker opened for `TimedOut` after the last request, and again every
/// [`QUICK_REQUEST_REPEAT_SECONDS`] while either holds. A due request stamps
/// `status.health.quickMaintenanceRequestedAt` (whole seconds; the Maintenance answers it with
/// one quick run) with one `QuickMaintenanceRequested` Event naming the Maintenance(s). A False
/// `IndexBlobHealth` message names the request, or why there is none (no Maintenance;
/// ReadOnly).
pub fn request_quick(d: &mut Decision, was_false: bool, maintainers: &Maintainers, now: Time) {
    let blobs =
        d.conditions.iter().position(|c| c.type_ == condition::INDEX_BLOB_HEALTH && c.status == CondStatus::False);
    let timed_out = d.status.phase == Some(super::types::Phase::Degraded)
        && d.status.reach.as_ref().is_some_and(|r| r.reach == super::types::Reach::TimedOut);
    if blobs.is_none() && !timed_out {
        return;
    }
    let names = match maintainers {
        Maintainers::ReadOnly => {
            if let Some(i) = blobs {
                d.conditions[i]
                    .message
                    .push_str("; the repository is ReadOnly, so maintenance is skipped and no quick run is requested");
            }
            return;
        }
        Maintainers::Found(names) if names.is_empty() => {
            if let Some(i) = blobs {
                d.conditions[i].message.push_str(
                    "; no Maintenance exists for this repository, so no quick maintenance run could be requested: \
                     enable spec.maintenance or create a Maintenance for it to compact the index",
                );
            }
            return;
        }
        Maintainers::Found(names) => names.join(", "),
    };
    let last = d.status.health.quick_maintenance_requested_at;
    let opened = d.status.health.breaker_opened_at;
    let due = last.is_none_or(|l| now - l >= chrono::Duration::seconds(QUICK_REQUEST_REPEAT_SECONDS))
        || (blobs.is_some() && !was_false)
        || (timed_out && opened.is_some_and(|o| last.is_some_and(|l| l < chrono::SubsecRound::trunc_subsecs(o, 0))));
    let at = match (due, last) {
        (false, Some(l)) => l,
        (true, _) | (false, None) => {
            let at = chrono::SubsecRound::trunc_subsecs(now, 0);
            d.status.health.quick_maintenance_requested_at = Some(at);
            let why = match blobs {
                Some(i) => d.conditions[i].message.clone(),
                None => "connects time out while the backend answers (slow, not down)".to_string(),
            };
            d.events.push(Event {
                type_: EventType::Normal,
                reason: event::QUICK_MAINTENANCE_REQUESTED,
                note: format!("{why}; a quick maintenance run was requested from Maintenance {names}"),
            });
            at
        }
    };
    if let Some(i) = blobs {
        let c = &mut d.conditions[i];
        c.message = format!(
            "{}; a quick maintenance run was requested at {} from Maintenance {names} (repeated every {}m while \
             this stays False)",
            c.message,
            at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            QUICK_REQUEST_REPEAT_SECONDS / 60,
        );
    }
}
