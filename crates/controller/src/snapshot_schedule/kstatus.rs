//! The kstatus trio of a SnapshotSchedule (docs/design/api-contract.md §1.6, §8): exactly one of Ready, Reconciling
//! and Stalled is True. Ready True `Scheduled` or `Suspended`; Stalled when a human or a spec
//! change is needed (`InvalidSchedule`, `CrossNamespaceReference`, `FeatureNotImplemented`,
//! `FanoutTooLarge`, and `PolicySuspended`: someone suspended the policy and must resume it,
//! as its Snapshots park Stalled too); Reconciling for a wait that heals by itself once another
//! object appears (`PolicyNotFound`, `NoSourceMatched`, `NoPolicyMatched`).
use kopiur_api::names::reason;

use crate::conditions::Standing;
use crate::conditions::{Cond, CondStatus};

/// The Ready reasons a schedule writes, matched exhaustively by [`ScheduleReason::standing`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScheduleReason {
    Scheduled,
    Suspended,
    InvalidSchedule,
    CrossNamespaceReference,
    FeatureNotImplemented,
    FanoutTooLarge,
    PolicyNotFound,
    PolicySuspended,
    NoSourceMatched,
    NoPolicyMatched,
}

impl ScheduleReason {
    pub const ALL: [ScheduleReason; 10] = [
        Self::Scheduled,
        Self::Suspended,
        Self::InvalidSchedule,
        Self::CrossNamespaceReference,
        Self::FeatureNotImplemented,
        Self::FanoutTooLarge,
        Self::PolicyNotFound,
        Self::PolicySuspended,
        Self::NoSourceMatched,
        Self::NoPolicyMatched,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scheduled => reason::SCHEDULED,
            Self::Suspended => reason::SUSPENDED,
            Self::InvalidSchedule => reason::INVALID_SCHEDULE,
            Self::CrossNamespaceReference => reason::CROSS_NAMESPACE_REFERENCE,
            Self::FeatureNotImplemented => reason::FEATURE_NOT_IMPLEMENTED,
            Self::FanoutTooLarge => reason::FANOUT_TOO_LARGE,
            Self::PolicyNotFound => reason::POLICY_NOT_FOUND,
            Self::PolicySuspended => reason::POLICY_SUSPENDED,
            Self::NoSourceMatched => "NoSourceMatched",
            Self::NoPolicyMatched => "NoPolicyMatched",
        }
    }

    pub fn parse(s: &str) -> Option<ScheduleReason> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }

    pub fn standing(self) -> Standing {
        match self {
            Self::Scheduled | Self::Suspended => Standing::Ready,
            Self::InvalidSchedule
            | Self::CrossNamespaceReference
            | Self::FeatureNotImplemented
            | Self::FanoutTooLarge
            | Self::PolicySuspended => Standing::Stalled,
            Self::PolicyNotFound | Self::NoSourceMatched | Self::NoPolicyMatched => Standing::Waiting,
        }
    }
}

/// The trio for a Ready `reason` and `message`. A reason this version does not know is a wait
/// (Reconciling): never Stalled on a guess.
pub fn trio(reason: &str, message: &str) -> Vec<Cond> {
    let standing = ScheduleReason::parse(reason).map_or(Standing::Waiting, ScheduleReason::standing);
    crate::conditions::trio(standing, reason, message)
}

/// `Scheduled` becomes `Suspended` while `spec.schedule.suspend` is true (docs/design/api-contract.md §8).
pub fn ready_reason(reason: String, message: String, suspended: bool) -> (String, String) {
    if suspended && reason == reason::SCHEDULED {
        return (reason::SUSPENDED.to_string(), "spec.schedule.suspend is true; no slot fires".to_string());
    }
    (reason, message)
}

/// `ScheduleRunnable` (docs/design/api-contract.md §8): False `BlockedOnUnreadableRun` while a child's phase is one
/// this version does not know (a newer operator's), naming the children; such a child counts
/// as active, so a `Forbid` schedule does not fire over a run it cannot read.
pub fn runnable(unreadable: &[String]) -> Cond {
    use kopiur_api::names::condition::SCHEDULE_RUNNABLE;
    if unreadable.is_empty() {
        return Cond {
            type_: SCHEDULE_RUNNABLE,
            status: CondStatus::True,
            reason: "Runnable".into(),
            message: String::new(),
        };
    }
    Cond {
        type_: SCHEDULE_RUNNABLE,
        status: CondStatus::False,
        reason: reason::BLOCKED_ON_UNREADABLE_RUN.into(),
        message: format!(
            "Snapshot {} has a phase this operator version does not know; it counts as a run in flight until an operator that knows it (or a human) settles it",
            unreadable.join(", ")
        ),
    }
}

/// `ReplacementHeld` (docs/design/api-contract.md §8) for a `Replace` schedule: True `WaitingForRepositorySlot` while
/// a replacement run it created is parked on its repository (not Ready: the breaker is open or
/// the repository is not there yet), naming the runs; False once none is. No condition for the
/// other concurrency policies.
pub fn replacement_held(
    concurrency: kopiur_api::snapshot_schedule::ConcurrencyPolicy,
    parked: &[String],
) -> Option<Cond> {
    use kopiur_api::names::condition::REPLACEMENT_HELD;
    use kopiur_api::snapshot_schedule::ConcurrencyPolicy;
    match concurrency {
        ConcurrencyPolicy::Forbid | ConcurrencyPolicy::Allow => None,
        ConcurrencyPolicy::Replace if parked.is_empty() => Some(Cond {
            type_: REPLACEMENT_HELD,
            status: CondStatus::False,
            reason: "SlotAvailable".into(),
            message: String::new(),
        }),
        ConcurrencyPolicy::Replace => Some(Cond {
            type_: REPLACEMENT_HELD,
            status: CondStatus::True,
            reason: reason::WAITING_FOR_REPOSITORY_SLOT.into(),
            message: format!(
                "the replacement run {} waits for its repository to be Ready; it starts by itself then",
                parked.join(", ")
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statuses(reason: &str) -> (CondStatus, CondStatus, CondStatus) {
        let t = trio(reason, "m");
        (t[0].status, t[1].status, t[2].status)
    }

    #[test]
    fn exactly_one_of_the_trio_is_true() {
        use CondStatus::{False, True};
        for r in ScheduleReason::ALL {
            assert_eq!(ScheduleReason::parse(r.as_str()), Some(r));
            let t = trio(r.as_str(), "m");
            assert_eq!(t.iter().filter(|c| c.status == True).count(), 1, "{r:?}");
        }
        assert_eq!(statuses("Scheduled"), (True, False, False));
        assert_eq!(statuses("Suspended"), (True, False, False));
        assert_eq!(statuses("InvalidSchedule"), (False, False, True));
        assert_eq!(statuses("CrossNamespaceReference"), (False, False, True));
        assert_eq!(statuses("FanoutTooLarge"), (False, False, True));
        assert_eq!(statuses("PolicyNotFound"), (False, True, False), "heals once the policy exists");
        assert_eq!(statuses("PolicySuspended"), (False, False, True), "a human resumes the policy");
        assert_eq!(statuses("NoSourceMatched"), (False, True, False));
        assert_eq!(statuses("SomethingNewer"), (False, True, False), "unknown: a wait, never Stalled");
        let t = trio("InvalidSchedule", "minute 61 out of range 0-59");
        assert_eq!(t[2].message, "minute 61 out of range 0-59");
        assert_eq!(t[1].message, "");
    }

    #[test]
    fn an_unreadable_child_blocks_the_schedule() {
        let ok = runnable(&[]);
        assert_eq!((ok.type_, ok.status, ok.reason.as_str()), ("ScheduleRunnable", CondStatus::True, "Runnable"));
        let blocked = runnable(&["s-1700000000".to_string()]);
        assert_eq!((blocked.status, blocked.reason.as_str()), (CondStatus::False, "BlockedOnUnreadableRun"));
        assert!(blocked.message.contains("s-1700000000"));
    }

    #[test]
    fn a_parked_replacement_is_held() {
        use kopiur_api::snapshot_schedule::ConcurrencyPolicy;
        assert_eq!(replacement_held(ConcurrencyPolicy::Forbid, &["x".into()]), None);
        assert_eq!(replacement_held(ConcurrencyPolicy::Allow, &["x".into()]), None);
        let free = replacement_held(ConcurrencyPolicy::Replace, &[]).unwrap();
        assert_eq!(
            (free.type_, free.status, free.reason.as_str()),
            ("ReplacementHeld", CondStatus::False, "SlotAvailable")
        );
        let held = replacement_held(ConcurrencyPolicy::Replace, &["s-1700000000".into()]).unwrap();
        assert_eq!((held.status, held.reason.as_str()), (CondStatus::True, "WaitingForRepositorySlot"));
        assert!(held.message.contains("s-1700000000"));
    }

    #[test]
    fn a_suspended_schedule_is_ready_suspended() {
        let (r, m) = ready_reason("Scheduled".into(), "next slot".into(), true);
        assert_eq!((r.as_str(), m.as_str()), ("Suspended", "spec.schedule.suspend is true; no slot fires"));
        assert_eq!(ready_reason("Scheduled".into(), "next slot".into(), false).0, "Scheduled");
        assert_eq!(ready_reason("PolicyNotFound".into(), "x".into(), true).0, "PolicyNotFound", "the problem wins");
    }
}
