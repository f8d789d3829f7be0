//! Rendering kstatus conditions onto a status, shared by every kind (crate root).

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time as KTime};

use crate::health::kstatus::Cond;

pub fn ktime(t: DateTime<Utc>) -> KTime {
    KTime(k8s_openapi::jiff::Timestamp::from_second(t.timestamp()).unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH))
}

/// Desired conditions replace existing ones of the same type in place (order kept; new types
/// appended). `lastTransitionTime` moves only when the status changes.
pub fn merge_conditions(
    existing: &[Condition],
    desired: &[Cond],
    generation: i64,
    now: DateTime<Utc>,
) -> Vec<Condition> {
    let render = |d: &Cond, prev: Option<&Condition>| Condition {
        type_: d.type_.to_string(),
        status: d.status.as_str().to_string(),
        reason: d.reason.clone(),
        message: d.message.clone(),
        observed_generation: Some(generation),
        last_transition_time: match prev {
            Some(p) if p.status == d.status.as_str() => p.last_transition_time.clone(),
            Some(_) | None => ktime(now),
        },
    };
    let mut out: Vec<Condition> = existing
        .iter()
        .map(|c| match desired.iter().find(|d| d.type_ == c.type_) {
            Some(d) => render(d, Some(c)),
            None => c.clone(),
        })
        .collect();
    for d in desired {
        if !existing.iter().any(|c| c.type_ == d.type_) {
            out.push(render(d, None));
        }
    }
    out
}
