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
use super::types::{RepoIdentity, RepoKind, Time};

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

/// `IndexBlobHealth` past its threshold schedules a quick maintenance on its own and says so.
/// Runs after [`apply`]: when the rendered condition is False, a request is due on the
/// transition into False and again every [`QUICK_REQUEST_REPEAT_SECONDS`] while it stays
/// False; a due request stamps `status.health.quickMaintenanceRequestedAt` (whole seconds; the
/// Maintenance answers it with one quick run) with one `QuickMaintenanceRequested` Event. The
/// condition message names the request, or why there is none (no Maintenance; ReadOnly).
pub fn request_quick(d: &mut Decision, was_false: bool, maintainers: &Maintainers, now: Time) {
    let Some(c) =
        d.conditions.iter_mut().find(|c| c.type_ == condition::INDEX_BLOB_HEALTH && c.status == CondStatus::False)
    else {
        return;
    };
    let names = match maintainers {
        Maintainers::ReadOnly => {
            c.message.push_str("; the repository is ReadOnly, so maintenance is skipped and no quick run is requested");
            return;
        }
        Maintainers::Found(names) if names.is_empty() => {
            c.message.push_str(
                "; no Maintenance exists for this repository, so no quick maintenance run could be requested: enable \
                 spec.maintenance or create a Maintenance for it to compact the index",
            );
            return;
        }
        Maintainers::Found(names) => names.join(", "),
    };
    let last = d.status.health.quick_maintenance_requested_at;
    let due = !was_false || last.is_none_or(|l| now - l >= chrono::Duration::seconds(QUICK_REQUEST_REPEAT_SECONDS));
    let at = match (due, last) {
        (true, _) | (false, None) => {
            let at = chrono::SubsecRound::trunc_subsecs(now, 0);
            d.status.health.quick_maintenance_requested_at = Some(at);
            d.events.push(Event {
                type_: EventType::Normal,
                reason: event::QUICK_MAINTENANCE_REQUESTED,
                note: format!("{}; a quick maintenance run was requested from Maintenance {names}", c.message),
            });
            at
        }
        (false, Some(l)) => l,
    };
    c.message = format!(
        "{}; a quick maintenance run was requested at {} from Maintenance {names} (repeated every {}m while this \
         stays False)",
        c.message,
        at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        QUICK_REQUEST_REPEAT_SECONDS / 60,
    );
}
