//! The schedule-deletion cascade guard (row D9). When a schedule disappears, Kubernetes'
//! garbage collector deletes its children; each child alone looks like an ordinary deletion.
//! The guard recognizes "my schedule is gone, replaced or terminating" and, unless the schedule
//! opted in with `onScheduleDelete: Delete`, keeps the kopia data.
use kopiur_api::snapshot::OnScheduleDelete;

/// What a live GET of the controller-owner schedule says (never the cache: a lagging store
/// shows a just-deleted schedule alive).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LiveSchedule {
    NotFound,
    Found { uid: String, terminating: bool },
}

/// The producing schedule's state relative to the child's ownerReference.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScheduleState {
    Alive,
    Gone,
    /// Deleted and recreated under the same name: a different uid.
    Replaced,
    Terminating,
}

impl ScheduleState {
    pub const ALL: [ScheduleState; 4] =
        [ScheduleState::Alive, ScheduleState::Gone, ScheduleState::Replaced, ScheduleState::Terminating];

    /// The word the `SnapshotRetainedOnScheduleDelete` message uses.
    pub fn as_str(self) -> &'static str {
        match self {
            ScheduleState::Alive => "alive",
            ScheduleState::Gone => "gone",
            ScheduleState::Replaced => "replaced",
            ScheduleState::Terminating => "terminating",
        }
    }
}

/// The `owner` fact of the deletion plan.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Owner {
    NotScheduleOwned,
    Schedule { name: String, state: ScheduleState },
}

/// Derive the schedule state from the ownerReference uid and the live GET. A replaced schedule
/// counts as replaced even while the new one is terminating: either way the child's producer
/// is not the schedule that exists now.
pub fn schedule_state(owner_ref_uid: &str, live: &LiveSchedule) -> ScheduleState {
    match live {
        LiveSchedule::NotFound => ScheduleState::Gone,
        LiveSchedule::Found { uid, .. } if uid != owner_ref_uid => ScheduleState::Replaced,
        LiveSchedule::Found { terminating: true, .. } => ScheduleState::Terminating,
        LiveSchedule::Found { terminating: false, .. } => ScheduleState::Alive,
    }
}

/// The guard's answer for an external, destructive deletion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CascadeGuard {
    /// Not a schedule cascade (or the schedule opted in): the deletion continues.
    PassThrough,
    /// Downgrade to retain: release the finalizer without a kopia delete.
    Retain { schedule: String, state: ScheduleState },
}

/// Row D9's condition. While the namespace is terminating the namespace axis decides instead,
/// because the schedule dies with its namespace. The caller has already established that the
/// deletion is external and the effective policy is Delete (rows D1–D8).
pub fn guard(ns_terminating: bool, owner: &Owner, on_schedule_delete: OnScheduleDelete) -> CascadeGuard {
    if ns_terminating {
        return CascadeGuard::PassThrough;
    }
    match (owner, on_schedule_delete) {
        (Owner::NotScheduleOwned, _) => CascadeGuard::PassThrough,
        (Owner::Schedule { state: ScheduleState::Alive, .. }, _) => CascadeGuard::PassThrough,
        (Owner::Schedule { .. }, OnScheduleDelete::Delete) => CascadeGuard::PassThrough,
        (
            Owner::Schedule {
                name,
                state: state @ (ScheduleState::Gone | ScheduleState::Replaced | ScheduleState::Terminating),
            },
            OnScheduleDelete::Retain,
        ) => CascadeGuard::Retain { schedule: name.clone(), state: *state },
    }
}

/// One produced child as the propagation pass (`onScheduleDelete` edits) sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildStamp {
    pub name: String,
    pub being_deleted: bool,
    pub stamp: Option<OnScheduleDelete>,
}

/// The children whose `spec.onScheduleDelete` must be patched to `desired` (the SnapshotSchedule
/// reconciler's propagation pass, T43). Children already being deleted keep the stamp they were
/// deleted under: D9 reads it after the schedule is gone.
pub fn propagation_targets(desired: OnScheduleDelete, children: &[ChildStamp]) -> Vec<String> {
    children.iter().filter(|c| !c.being_deleted && c.stamp != Some(desired)).map(|c| c.name.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(state: ScheduleState) -> Owner {
        Owner::Schedule { name: "s".into(), state }
    }

    #[test]
    fn live_get_maps_to_state() {
        assert_eq!(schedule_state("a", &LiveSchedule::NotFound), ScheduleState::Gone);
        assert_eq!(
            schedule_state("a", &LiveSchedule::Found { uid: "b".into(), terminating: false }),
            ScheduleState::Replaced
        );
        assert_eq!(
            schedule_state("a", &LiveSchedule::Found { uid: "b".into(), terminating: true }),
            ScheduleState::Replaced
        );
        assert_eq!(
            schedule_state("a", &LiveSchedule::Found { uid: "a".into(), terminating: true }),
            ScheduleState::Terminating
        );
        assert_eq!(
            schedule_state("a", &LiveSchedule::Found { uid: "a".into(), terminating: false }),
            ScheduleState::Alive
        );
    }

    #[test]
    fn default_retain_keeps_data_when_the_schedule_is_not_alive() {
        for state in [ScheduleState::Gone, ScheduleState::Replaced, ScheduleState::Terminating] {
            assert_eq!(
                guard(false, &owned(state), OnScheduleDelete::default()),
                CascadeGuard::Retain { schedule: "s".into(), state }
            );
        }
    }

    #[test]
    fn alive_schedule_unowned_child_and_opt_in_pass_through() {
        assert_eq!(guard(false, &owned(ScheduleState::Alive), OnScheduleDelete::Retain), CascadeGuard::PassThrough);
        assert_eq!(guard(false, &Owner::NotScheduleOwned, OnScheduleDelete::Retain), CascadeGuard::PassThrough);
        for state in ScheduleState::ALL {
            assert_eq!(guard(false, &owned(state), OnScheduleDelete::Delete), CascadeGuard::PassThrough);
        }
    }

    #[test]
    fn namespace_teardown_is_not_a_schedule_cascade() {
        for state in ScheduleState::ALL {
            assert_eq!(guard(true, &owned(state), OnScheduleDelete::Retain), CascadeGuard::PassThrough);
        }
    }

    #[test]
    fn propagation_patches_live_children_with_a_different_stamp() {
        let children = vec![
            ChildStamp { name: "a".into(), being_deleted: false, stamp: None },
            ChildStamp { name: "b".into(), being_deleted: false, stamp: Some(OnScheduleDelete::Delete) },
            ChildStamp { name: "c".into(), being_deleted: true, stamp: Some(OnScheduleDelete::Retain) },
            ChildStamp { name: "d".into(), being_deleted: false, stamp: Some(OnScheduleDelete::Retain) },
        ];
        assert_eq!(propagation_targets(OnScheduleDelete::Delete, &children), vec!["a", "d"]);
        assert_eq!(propagation_targets(OnScheduleDelete::Retain, &children), vec!["a", "b"]);
    }
}
