//! Exact user-facing texts. A human reads these to act, so the held messages carry the whole
//! release command with the value to copy.
use super::cascade::ScheduleState;
use super::types::{RepoRef, Time, rfc3339};
use kopiur_api::names::{annotation, orphan_reason};
use kopiur_api::shared::RepositoryKind;

/// The value printed in the ack command. Rounded up to the whole second: Kubernetes stamps
/// second precision anyway, and rounding down could leave the newest held member unapproved.
pub fn ack_value(v: Time) -> String {
    use chrono::{Duration, SubsecRound};
    let floor = v.trunc_subsecs(0);
    rfc3339(if floor < v { floor + Duration::seconds(1) } else { floor })
}

/// `kubectl annotate repository/<name> -n <ns> kopiur.home-operations.com/allow-mass-deletion="<V>" --overwrite`
/// (a ClusterRepository: `clusterrepository/<name>`, without `-n`).
pub fn ack_command(repo: &RepoRef, v: Time) -> String {
    let target = match (repo.kind, &repo.namespace) {
        (RepositoryKind::Repository, Some(ns)) => format!("repository/{} -n {ns}", repo.name),
        (RepositoryKind::Repository, None) => format!("repository/{}", repo.name),
        (RepositoryKind::ClusterRepository, _) => format!("clusterrepository/{}", repo.name),
    };
    format!("kubectl annotate {target} {}=\"{}\" --overwrite", annotation::ALLOW_MASS_DELETION, ack_value(v))
}

/// `DeletionHeld=True/MassDeletionBreaker` on each held Snapshot.
pub fn snapshot_held(repo: &RepoRef, threshold: u32, v: Time) -> String {
    format!(
        "deletion held by the mass-deletion breaker: external deletions pending against {} reached the threshold \
         {threshold}. To approve every deletion requested at or before {}, run: {}",
        repo.display(),
        ack_value(v),
        ack_command(repo, v)
    )
}

/// `DeletionHeld=False/Acknowledged`.
pub fn snapshot_acknowledged(ack: Time) -> String {
    format!("deletion approved by allow-mass-deletion (effective {}); it proceeds through a batch", rfc3339(ack))
}

/// `DeletionHeld=False/BelowThreshold`.
pub fn snapshot_below_threshold(pending: u32, threshold: u32) -> String {
    format!("external deletions pending ({pending}) fell below the threshold {threshold}; the deletion proceeds")
}

/// `MassDeletionHeld=True/ThresholdExceeded` on the repository.
pub fn repository_held(repo: &RepoRef, held: u32, pending: u32, threshold: u32, v: Time) -> String {
    format!(
        "{held} external Snapshot deletions held ({pending} pending, threshold {threshold}). Approve with: {}",
        ack_command(repo, v)
    )
}

/// `MassDeletionHeld=False/BelowThreshold`.
pub fn repository_below_threshold(pending: u32, threshold: u32) -> String {
    format!("{pending} external Snapshot deletions pending, below the threshold {threshold}")
}

/// `MassDeletionHeld=False` while the count is at or above the threshold but no member's own
/// plan holds anything (a fully cascade-retained wave, or members not planned yet).
pub fn repository_pending_none_held(pending: u32, threshold: u32) -> String {
    format!(
        "{pending} external Snapshot deletions pending (threshold {threshold}); none is held: they resolve without a \
         kopia delete or are still being planned"
    )
}

/// `MassDeletionHeld=False/Disabled`.
pub fn repository_disabled() -> String {
    "the mass-deletion breaker is disabled (spec.deletionProtection.threshold: 0)".to_string()
}

/// Warning `InvalidMassDeletionAck`. The raw value is cut short to keep the Event small.
pub fn invalid_ack(raw: &str) -> String {
    let shown: String = raw.chars().take(128).collect();
    format!(
        "ignoring {}=\"{shown}\": not an RFC3339 timestamp; held deletions stay held. Use a value such as \
         2026-07-17T10:00:00Z, as printed in the MassDeletionHeld condition",
        annotation::ALLOW_MASS_DELETION
    )
}

/// Warning `SnapshotRetainedOnScheduleDelete`.
pub fn retained_on_schedule_delete(schedule: &str, state: ScheduleState, manifest: &str) -> String {
    format!(
        "schedule {schedule} is {}; kopia snapshot {manifest} was retained and will reappear as a discovered Snapshot",
        state.as_str()
    )
}

/// Normal `SnapshotOrphaned`, reason `SkipSnapshotCleanup`.
pub fn orphaned_skip(manifest: Option<&str>) -> String {
    format!(
        "{}: {} is set; {} was left in the repository",
        orphan_reason::SKIP_SNAPSHOT_CLEANUP,
        annotation::SKIP_SNAPSHOT_CLEANUP,
        manifest_phrase(manifest)
    )
}

/// Normal `SnapshotOrphaned` for `deletionPolicy: Orphan`.
pub fn orphaned_policy(manifest: Option<&str>) -> String {
    format!("deletionPolicy is Orphan; {} was left in the repository", manifest_phrase(manifest))
}

/// Normal `SnapshotOrphaned`, reason `RepositoryGone`.
pub fn orphaned_repository_gone(manifest: Option<&str>) -> String {
    format!(
        "{}: the repository this Snapshot is pinned to no longer exists; {} is kept and can be rediscovered",
        orphan_reason::REPOSITORY_GONE,
        manifest_phrase(manifest)
    )
}

/// Normal `SnapshotOrphaned`, reason `NamespaceDeleted`.
pub fn orphaned_namespace_deleted(manifest: Option<&str>) -> String {
    format!(
        "{}: the namespace is being deleted and the repository's onNamespaceDelete is Orphan; {} is kept",
        orphan_reason::NAMESPACE_DELETED,
        manifest_phrase(manifest)
    )
}

/// Warning `SnapshotDeletionHeld` (on the transition into held).
pub fn snapshot_deletion_held_event(repo: &RepoRef, threshold: u32, v: Time) -> String {
    snapshot_held(repo, threshold, v)
}

/// Warning `MassDeletionHeld` on the repository (False → True).
pub fn mass_deletion_held_event(repo: &RepoRef, held: u32, pending: u32, threshold: u32, v: Time) -> String {
    repository_held(repo, held, pending, threshold, v)
}

/// Warning `SnapshotDeletionBatchFailed` on the repository.
pub fn batch_failed(job: &str, members: usize) -> String {
    format!(
        "batch delete Job {job} failed; none of its {members} members was released. The Job is removed after 60s and \
         the members are retried in a new batch (deletes are idempotent)"
    )
}

fn manifest_phrase(manifest: Option<&str>) -> String {
    match manifest {
        Some(id) => format!("kopia snapshot {id}"),
        None => "the kopia data".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::*;

    fn v() -> Time {
        Utc.with_ymd_and_hms(2026, 7, 17, 10, 0, 0).unwrap()
    }

    #[test]
    fn repository_command_is_exact() {
        let r = RepoRef::repository("t", "r", "u1");
        assert_eq!(
            ack_command(&r, v()),
            "kubectl annotate repository/r -n t kopiur.home-operations.com/allow-mass-deletion=\"2026-07-17T10:00:00Z\" --overwrite"
        );
    }

    #[test]
    fn cluster_repository_command_has_no_namespace() {
        let r = RepoRef::cluster_repository("shared", "u2");
        assert_eq!(
            ack_command(&r, v()),
            "kubectl annotate clusterrepository/shared kopiur.home-operations.com/allow-mass-deletion=\"2026-07-17T10:00:00Z\" --overwrite"
        );
    }

    #[test]
    fn held_message_is_exact() {
        let r = RepoRef::repository("t", "r", "u1");
        assert_eq!(
            snapshot_held(&r, 10, v()),
            "deletion held by the mass-deletion breaker: external deletions pending against Repository t/r reached the \
             threshold 10. To approve every deletion requested at or before 2026-07-17T10:00:00Z, run: kubectl annotate \
             repository/r -n t kopiur.home-operations.com/allow-mass-deletion=\"2026-07-17T10:00:00Z\" --overwrite"
        );
        assert_eq!(
            repository_held(&r, 25, 25, 10, v()),
            "25 external Snapshot deletions held (25 pending, threshold 10). Approve with: kubectl annotate repository/r \
             -n t kopiur.home-operations.com/allow-mass-deletion=\"2026-07-17T10:00:00Z\" --overwrite"
        );
    }

    #[test]
    fn sub_second_values_round_up_so_the_command_covers_the_newest_member() {
        let t = v() + chrono::Duration::milliseconds(250);
        assert_eq!(ack_value(t), "2026-07-17T10:00:01Z");
        assert_eq!(ack_value(v()), "2026-07-17T10:00:00Z");
        let parsed = super::super::ack::parse(&ack_value(t)).unwrap();
        assert!(t <= parsed);
    }

    #[test]
    fn retained_message_names_schedule_state_and_manifest() {
        assert_eq!(
            retained_on_schedule_delete("s", ScheduleState::Replaced, "abc"),
            "schedule s is replaced; kopia snapshot abc was retained and will reappear as a discovered Snapshot"
        );
    }

    #[test]
    fn invalid_ack_message_is_bounded() {
        let long = "x".repeat(5000);
        assert!(invalid_ack(&long).len() < 400);
    }
}
