//! What a SnapshotSchedule reconcile reports: its conditions and the status records read
//! from its children. Pure: from the observation and the plan's disposition only.
use std::sync::Arc;

use kopiur_api::names::{condition, reason};
use kopiur_api::shared::status::NameRef;
use kopiur_api::snapshot::SnapshotPhase;
use kopiur_api::snapshot_schedule::ScheduleRecord;
use kopiur_api::{Snapshot, SnapshotSchedule};
use kube::{Resource, ResourceExt};

use super::observe::{MAX_SCHEDULE_FANOUT, Observed, Selection, unreadable};
use super::plan::Disposition;
use crate::conditions::{Cond, CondStatus};

/// The kstatus trio (Ready, Reconciling, Stalled) for this disposition: why the schedule
/// fires, waits, or cannot fire (docs/design/api-contract.md §1.6, §8); Suspended while
/// `spec.schedule.suspend`.
pub(super) fn ready(obs: &Observed, sched: &SnapshotSchedule, disposition: &Disposition) -> Vec<Cond> {
    if let Disposition::Invalid { message } = disposition {
        return super::kstatus::trio(reason::INVALID_SCHEDULE, message);
    }
    let ns = sched.namespace().unwrap_or_default();
    let cron = &sched.spec.schedule.cron.cron;
    let (reason, msg) = match (&obs.policy_name, &obs.policy, &obs.expansion) {
        _ if obs.cross_ns.is_some() => {
            (reason::CROSS_NAMESPACE_REFERENCE.to_string(), obs.cross_ns.clone().unwrap_or_default())
        }
        _ if obs.suspended.is_some() => {
            (reason::POLICY_SUSPENDED.to_string(), obs.suspended.clone().unwrap_or_default())
        }
        (Some(p), Some(_), Some(Err(m))) => {
            (reason::FEATURE_NOT_IMPLEMENTED.to_string(), format!("SnapshotPolicy {p}: {m}; slots create no child"))
        }
        (Some(p), Some(_), Some(Ok(e))) if e.sources.is_empty() => (
            "NoSourceMatched".to_string(),
            format!(
                "SnapshotPolicy {p}: {}; slots create no child until one matches",
                e.empty_message(&ns).unwrap_or_default()
            ),
        ),
        (Some(_), Some(_), _) => (reason::SCHEDULED.to_string(), format!("next slot pinned for {cron}")),
        (Some(p), None, _) => (
            reason::POLICY_NOT_FOUND.to_string(),
            format!("SnapshotPolicy {p} does not exist; children park until it does"),
        ),
        (None, _, _) => match obs.selection.as_ref().and_then(|x| x.problem.clone()) {
            Some(p) => p,
            None => (
                reason::SCHEDULED.to_string(),
                format!(
                    "next slot pinned for {cron}; policies {}",
                    obs.selection
                        .as_ref()
                        .map(|x| x.policies.iter().map(|p| p.name_any()).collect::<Vec<_>>().join(", "))
                        .unwrap_or_default()
                ),
            ),
        },
    };
    let (reason, msg) = super::kstatus::ready_reason(reason, msg, sched.spec.schedule.suspend);
    super::kstatus::trio(&reason, &msg)
}

/// ScheduleRunnable, ReplacementHeld, and under a `policySelector` FanoutCapped and
/// TimezoneDefaultAmbiguous.
pub(super) fn conditions(obs: &Observed, sched: &SnapshotSchedule) -> Vec<Cond> {
    let kids = &obs.kids;
    let mut conds = vec![super::kstatus::runnable(&unreadable(kids))];
    // ReplacementHeld (docs/design/api-contract.md §8): the runs of a Replace schedule parked on their repository.
    let parked: Vec<String> = kids
        .iter()
        .filter(|s| s.meta().deletion_timestamp.is_none())
        .filter(|s| {
            let st = s.status.as_ref();
            matches!(st.and_then(|x| x.phase.as_ref()), Some(SnapshotPhase::Pending))
                && st.is_some_and(|x| {
                    x.conditions.iter().any(|c| c.type_ == "Ready" && c.reason == reason::REPOSITORY_NOT_READY)
                })
        })
        .map(|s| s.name_any())
        .collect();
    conds.extend(super::kstatus::replacement_held(sched.spec.schedule.concurrency_policy, &parked));
    if let Some(sel) = &obs.selection {
        conds.extend(selection_conditions(sel));
    }
    conds
}

fn selection_conditions(sel: &Selection) -> [Cond; 2] {
    let capped = match &sel.capped {
        Some(m) => Cond {
            type_: condition::FANOUT_CAPPED,
            status: CondStatus::True,
            reason: reason::FANOUT_TOO_LARGE.into(),
            message: m.clone(),
        },
        None => Cond {
            type_: condition::FANOUT_CAPPED,
            status: CondStatus::False,
            reason: "WithinCap".into(),
            message: format!("at most {MAX_SCHEDULE_FANOUT} (policy x repository) pairs"),
        },
    };
    let tz = match &sel.repo_tz {
        Err(m) => Cond {
            type_: condition::TIMEZONE_DEFAULT_AMBIGUOUS,
            status: CondStatus::True,
            reason: reason::REPOSITORY_DEFAULTS_DISAGREE.into(),
            message: m.clone(),
        },
        Ok(_) => Cond {
            type_: condition::TIMEZONE_DEFAULT_AMBIGUOUS,
            status: CondStatus::False,
            reason: "RepositoriesAgree".into(),
            message: String::new(),
        },
    };
    [capped, tz]
}

/// `lastSuccessfulSchedule`: the newest Succeeded child.
pub(super) fn last_successful(kids: &[Arc<Snapshot>]) -> Option<ScheduleRecord> {
    let s = kids
        .iter()
        .filter(|s| s.status.as_ref().and_then(|st| st.phase.as_ref()) == Some(&SnapshotPhase::Succeeded))
        .max_by_key(|s| s.status.as_ref().and_then(|st| st.timing.as_ref()).and_then(|t| t.end_time))?;
    let end = s.status.as_ref().and_then(|st| st.timing.as_ref()).and_then(|t| t.end_time);
    Some(ScheduleRecord { at: end, slot: None, snapshot_ref: Some(NameRef { name: s.name_any() }), timezone: None })
}
