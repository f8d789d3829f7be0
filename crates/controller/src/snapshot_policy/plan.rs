//! GFS retention per repository, as a pure function over the policy's Snapshots. Pruning runs
//! only while the repository is Ready and every participant has its end time, so a half-known
//! set never decides what to delete. Each pruned Snapshot is stamped `pruned-by: retention`
//! by the caller immediately before its DELETE.
use chrono::{DateTime, Utc};
use kopiur_api::domain::retention::{Candidate, participates, select};
use kopiur_api::shared::Retention;
use kopiur_api::shared::phase::SnapshotOrigin;
use kopiur_api::snapshot::SnapshotPhase;

/// One Snapshot of the policy, as read from the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub phase: Option<SnapshotPhase>,
    pub origin: Option<SnapshotOrigin>,
    pub deleting: bool,
    pub end_time: Option<DateTime<Utc>>,
    pub kopia_snapshot_id: Option<String>,
    pub pinned: bool,
}

/// The Snapshots pinned to one repository the policy writes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepoMembers {
    /// `namespace/name` or the ClusterRepository name, for messages.
    pub repository: String,
    pub ready: bool,
    pub members: Vec<Member>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Blocked {
    RepositoryNotReady {
        repository: String,
    },
    /// A participant lacks `timing.endTime`; bucket placement would be a guess.
    MissingEndTime {
        repository: String,
        snapshot: String,
    },
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionPlan {
    /// Snapshot names to stamp `pruned-by: retention` and delete, in a stable order.
    pub prune: Vec<String>,
    /// Participants that stay (over every repository).
    pub active: usize,
    pub blocked: Vec<Blocked>,
}

/// The retention that applies now: none while the policy is suspended (docs/design/api-contract.md §6.1: a
/// suspended policy pauses retention; its Snapshots are counted, nothing is pruned).
pub fn retention_in_force(spec: &kopiur_api::snapshot_policy::SnapshotPolicySpec) -> Option<&Retention> {
    if spec.suspend { None } else { spec.retention.as_ref() }
}

/// A Snapshot is exempt from retention while its pin is asked for or still applied in kopia
/// (docs/design/api-contract.md §7.1): an unpin in flight keeps it, so nothing is pruned on a guess.
pub fn pinned(spec_pin: bool, status_pinned: Option<bool>) -> bool {
    spec_pin || status_pinned.unwrap_or(false)
}

pub fn plan(retention: Option<&Retention>, repos: &[RepoMembers]) -> RetentionPlan {
    let mut out = RetentionPlan::default();
    for r in repos {
        let participants: Vec<&Member> =
            r.members.iter().filter(|m| participates(m.phase.as_ref(), m.origin.as_ref(), m.deleting)).collect();
        let Some(retention) = retention else {
            // No retention block: never prune.
            out.active += participants.len();
            continue;
        };
        if !r.ready {
            out.active += participants.len();
            out.blocked.push(Blocked::RepositoryNotReady { repository: r.repository.clone() });
            continue;
        }
        let mut candidates = Vec::with_capacity(participants.len());
        let mut missing = None;
        for m in &participants {
            match m.end_time {
                Some(end_time) => candidates.push(Candidate {
                    name: m.name.clone(),
                    end_time,
                    kopia_snapshot_id: m.kopia_snapshot_id.clone().unwrap_or_default(),
                    pinned: m.pinned,
                }),
                None => missing = Some(m.name.clone()),
            }
        }
        if let Some(snapshot) = missing {
            out.active += participants.len();
            out.blocked.push(Blocked::MissingEndTime { repository: r.repository.clone(), snapshot });
            continue;
        }
        let sel = select(retention, &candidates);
        out.active += sel.keep.len();
        out.prune.extend(sel.prune);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Duration, TimeZone};

    fn member(i: i64, phase: SnapshotPhase) -> Member {
        Member {
            name: format!("s{i}"),
            phase: Some(phase),
            origin: Some(SnapshotOrigin::Scheduled),
            deleting: false,
            end_time: Some(Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap() + Duration::minutes(i)),
            kopia_snapshot_id: Some(format!("{i:032x}")),
            pinned: false,
        }
    }

    fn latest(n: i32) -> Retention {
        serde_json::from_value(serde_json::json!({"keepLatest": n})).unwrap()
    }

    fn repo(members: Vec<Member>) -> RepoMembers {
        RepoMembers { repository: "t/r".into(), ready: true, members }
    }

    #[test]
    fn keep_latest_three_of_six_prunes_the_oldest() {
        let ms = (0..6).map(|i| member(i, SnapshotPhase::Succeeded)).collect();
        let p = plan(Some(&latest(3)), &[repo(ms)]);
        assert_eq!(p.prune, vec!["s0", "s1", "s2"]);
        assert_eq!(p.active, 3);
    }

    #[test]
    fn pinned_survives_and_non_participants_are_ignored() {
        let mut ms: Vec<Member> = (0..6).map(|i| member(i, SnapshotPhase::Succeeded)).collect();
        ms[0].pinned = true;
        ms.push(member(7, SnapshotPhase::Failed));
        ms.push(member(8, SnapshotPhase::Unchanged));
        let mut discovered = member(9, SnapshotPhase::Discovered);
        discovered.origin = Some(SnapshotOrigin::Discovered);
        ms.push(discovered);
        let p = plan(Some(&latest(3)), &[repo(ms)]);
        assert_eq!(p.prune, vec!["s1", "s2"]);
    }

    #[test]
    fn a_suspended_policy_pauses_retention_and_resuming_prunes() {
        let mut spec: kopiur_api::snapshot_policy::SnapshotPolicySpec = serde_json::from_value(serde_json::json!({
            "repository": {"name": "r"}, "sources": [{"pvc": {"name": "a"}}], "retention": {"keepLatest": 3}
        }))
        .unwrap();
        let ms: Vec<Member> = (0..6).map(|i| member(i, SnapshotPhase::Succeeded)).collect();
        spec.suspend = true;
        let p = plan(retention_in_force(&spec), &[repo(ms.clone())]);
        assert!(p.prune.is_empty(), "suspended: nothing pruned");
        assert_eq!(p.active, 6, "suspended: every participant counted");
        spec.suspend = false;
        assert_eq!(plan(retention_in_force(&spec), &[repo(ms)]).prune, vec!["s0", "s1", "s2"]);
    }

    #[test]
    fn an_unpin_in_flight_still_exempts() {
        assert!(pinned(true, None));
        assert!(pinned(false, Some(true)), "spec.pin cleared, kopia pin not yet removed");
        assert!(!pinned(false, Some(false)));
        assert!(!pinned(false, None));
        let mut ms: Vec<Member> = (0..4).map(|i| member(i, SnapshotPhase::Succeeded)).collect();
        ms[0].pinned = pinned(false, Some(true));
        assert_eq!(plan(Some(&latest(2)), &[repo(ms)]).prune, vec!["s1"]);
    }

    #[test]
    fn not_ready_or_missing_end_time_prunes_nothing() {
        let ms: Vec<Member> = (0..6).map(|i| member(i, SnapshotPhase::Succeeded)).collect();
        let mut r = repo(ms.clone());
        r.ready = false;
        let p = plan(Some(&latest(1)), &[r]);
        assert!(p.prune.is_empty());
        assert_eq!(p.blocked, vec![Blocked::RepositoryNotReady { repository: "t/r".into() }]);
        let mut ms2 = ms;
        ms2[2].end_time = None;
        let p = plan(Some(&latest(1)), &[repo(ms2)]);
        assert!(p.prune.is_empty());
        assert!(matches!(p.blocked[0], Blocked::MissingEndTime { .. }));
    }

    #[test]
    fn absent_retention_never_prunes() {
        let ms = (0..6).map(|i| member(i, SnapshotPhase::Succeeded)).collect();
        let p = plan(None, &[repo(ms)]);
        assert!(p.prune.is_empty());
        assert_eq!(p.active, 6);
    }
}
