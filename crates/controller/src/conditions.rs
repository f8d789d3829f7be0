//! kstatus conditions for every kind (crate root): the desired [`Cond`], the one constructor
//! [`cond`], the trio [`trio`] by how an object [`Standing`]s, and [`merge_conditions`], which
//! renders them onto a status.

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time as KTime};
use kopiur_api::names::reason;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CondStatus {
    True,
    False,
    Unknown,
}

impl CondStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CondStatus::True => "True",
            CondStatus::False => "False",
            CondStatus::Unknown => "Unknown",
        }
    }
}

/// One desired condition; `lastTransitionTime` is the status writer's business.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cond {
    pub type_: &'static str,
    pub status: CondStatus,
    pub reason: String,
    pub message: String,
}

/// The one way to build a [`Cond`].
pub fn cond(type_: &'static str, status: CondStatus, reason: &str, message: impl Into<String>) -> Cond {
    Cond { type_, status, reason: reason.to_string(), message: message.into() }
}

/// How an object stands, for the kstatus trio: at most one of Ready, Reconciling, Stalled is
/// True.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Ready=True.
    Ready,
    /// Ready=False, Reconciling=True: a wait that heals by itself.
    Waiting,
    /// Ready=False, Stalled=True: a human or a spec change is needed.
    Stalled,
    /// Ready=False with neither (a failed run the next slot retries).
    Failed,
}

/// The kstatus trio: Ready carries `reason` and `message`; Reconciling and Stalled carry the
/// reason, and the message only when True.
pub fn trio(standing: Standing, reason: &str, message: impl Into<String>) -> Vec<Cond> {
    use kopiur_api::names::condition::{READY, RECONCILING, STALLED};
    let m = message.into();
    let (ready, reconciling, stalled) = match standing {
        Standing::Ready => (CondStatus::True, CondStatus::False, CondStatus::False),
        Standing::Waiting => (CondStatus::False, CondStatus::True, CondStatus::False),
        Standing::Stalled => (CondStatus::False, CondStatus::False, CondStatus::True),
        Standing::Failed => (CondStatus::False, CondStatus::False, CondStatus::False),
    };
    let side = |s: CondStatus| if s == CondStatus::True { m.clone() } else { String::new() };
    vec![
        cond(READY, ready, reason, m.clone()),
        cond(RECONCILING, reconciling, reason, side(reconciling)),
        cond(STALLED, stalled, reason, side(stalled)),
    ]
}

/// A discovered Snapshot row's conditions: Ready, nothing to re-check. The Snapshot plan
/// decides them, and the catalog writes them when it creates a row
/// (`catalog::created_row_status`), so the reconcile has nothing to write.
pub fn discovered_row() -> Vec<Cond> {
    trio(Standing::Ready, reason::SNAPSHOT_DISCOVERED, "a kopia snapshot found in the repository")
}

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
