//! Resolved defaults (docs/design/api-contract.md §14.2): values deliberately left out of the schema because
//! they depend on context or are inherited from another layer.

use crate::Duration;
use crate::snapshot::SnapshotSpec;
use crate::snapshot_policy::DeletionPolicy;

/// The deletion policy in effect for a Snapshot. Discovered rows are always `Retain`; a set
/// field wins (it is mutable); otherwise the value pinned at first reconcile, else the
/// policy's default.
pub fn effective_deletion_policy(
    spec: &SnapshotSpec,
    discovered: bool,
    pinned: Option<DeletionPolicy>,
    policy_default: Option<DeletionPolicy>,
) -> DeletionPolicy {
    if discovered {
        return DeletionPolicy::Retain;
    }
    spec.deletion_policy.or(pinned).or(policy_default).unwrap_or_default()
}

/// Jitter precedence: the object's own, then the repository's `scheduleDefaults`, then 0.
pub fn effective_jitter(own: Option<&Duration>, repository_default: Option<&Duration>) -> Duration {
    own.or(repository_default).cloned().unwrap_or_else(|| Duration::from_secs(0))
}

/// The mover Job TTL; batch-delete Jobs never get one.
pub fn ttl_seconds_after_finished(recipe: Option<i64>, repository_default: Option<i64>) -> i64 {
    recipe.or(repository_default).unwrap_or(crate::shared::MoverDefaults::DEFAULT_TTL_SECONDS_AFTER_FINISHED)
}

/// Hold-off of the breaker's strict retry: 120 s doubling per attempt, capped at 600 s.
pub fn strict_retry_holdoff_seconds(attempt: u32) -> u64 {
    const BASE: u64 = 120;
    const CAP: u64 = 600;
    BASE.checked_shl(attempt.min(16)).unwrap_or(CAP).min(CAP)
}
