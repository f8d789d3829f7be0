//! The work spec: the whole operation as one JSON document in `KOPIUR_WORK_SPEC`.
//!
//! It holds resolved values only (backend location, identity, flags, member lists) and
//! never a password, key, token or other Secret value: those reach the mover as
//! environment sourced from Secrets. Unknown fields are ignored so an older mover can run a
//! newer controller's spec; an unknown operation is a contract error.
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use kopiur_api::names::op;
use kopiur_kopia::Backend;
use kopiur_kopia::cmd::{CacheSizes, CreateOptions, Identity, PathPolicy, RestoreOptions, SyncOptions};
use serde::{Deserialize, Serialize};

/// The version this mover writes and understands.
pub const SCHEMA_VERSION: u32 = 1;
/// Linux caps one environment string at 128 KiB; stay well below it.
pub const MAX_WORK_SPEC_BYTES: usize = 102_400;
pub const DEFAULT_COMMAND_TIMEOUT_SECONDS: u64 = 60;
pub const DEFAULT_HEARTBEAT_SECONDS: u64 = 30;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkSpec {
    pub schema_version: u32,
    pub target_ref: TargetRef,
    pub repository: RepositoryInfo,
    #[serde(default = "default_command_timeout")]
    pub command_timeout_seconds: u64,
    #[serde(default = "default_heartbeat")]
    pub heartbeat_seconds: u64,
    /// The bound on the slow connects (the bootstrap/probe connect and maintenance's): the
    /// controller sets it to [`connect_backstop`] of the Job's deadline, so a repository with
    /// thousands of index blobs can still connect and the Job deadline always ends a hung
    /// connect first (its verdict, DeadlineExceeded, is what tells a slow backend from a dead
    /// one; the mover's own timeout reads as RepositoryUnavailable). Absent (a mover run outside
    /// a Job, an older controller): the short `command_timeout_seconds`, so a blackholed backend
    /// still gets a verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_timeout_seconds: Option<u64>,
    pub operation: Operation,
}

/// The mover's own bound on a slow connect inside a Job whose deadline is `deadline_seconds`:
/// strictly later than the deadline, with a margin for the Job controller to act on it (a
/// minute, or half the deadline when that is longer), so the mover's timer is only a backstop
/// and never races the Job's DeadlineExceeded verdict.
pub fn connect_backstop(deadline_seconds: i64) -> Option<u64> {
    let d = u64::try_from(deadline_seconds).ok()?;
    Some(d.saturating_add((d / 2).max(60)))
}

fn default_command_timeout() -> u64 {
    DEFAULT_COMMAND_TIMEOUT_SECONDS
}
fn default_heartbeat() -> u64 {
    DEFAULT_HEARTBEAT_SECONDS
}

/// The CR the mover reports to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetRef {
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    pub uid: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RepositoryInfo {
    /// `Repository` or `ClusterRepository`.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    pub uid: String,
    pub backend: Backend,
    /// The identity every connect of this Job uses.
    pub client_identity: Identity,
    #[serde(default)]
    pub read_only: bool,
    #[serde(default)]
    pub cache: CacheSizes,
}

/// Externally tagged: `{"Snapshot": {…}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Operation {
    Snapshot(SnapshotOp),
    Restore(RestoreOp),
    SnapshotDeleteBatch(SnapshotDeleteBatchOp),
    BootstrapRepository(BootstrapRepositoryOp),
    Maintenance(MaintenanceOp),
    Replicate(ReplicateOp),
    /// `<snapshot>-pin`: add or remove kopiur's pin on one kopia snapshot.
    SnapshotPin(crate::ops::pin::SnapshotPinOp),
}

impl Operation {
    /// The `…/op` label value and the `failure.op` field.
    pub fn label(&self) -> &'static str {
        match self {
            Operation::Snapshot(_) => "backup",
            Operation::Restore(_) => op::RESTORE,
            Operation::SnapshotDeleteBatch(_) => op::SNAPSHOT_DELETE_BATCH,
            Operation::BootstrapRepository(_) => "bootstrap",
            Operation::Maintenance(_) => "maintenance",
            Operation::Replicate(_) => "replication",
            Operation::SnapshotPin(_) => "pin",
        }
    }

    /// The `app.kubernetes.io/component` label value (docs/design/api-contract.md §13). The pin Job has none: the
    /// spec names no component for it, and its `…/op=pin` label identifies it.
    pub fn component(&self) -> Option<&'static str> {
        use kopiur_api::names::component;
        match self {
            Operation::Snapshot(_) => Some(component::BACKUP),
            Operation::Restore(_) => Some(component::RESTORE),
            Operation::SnapshotDeleteBatch(_) => Some(component::SNAPSHOT_DELETE),
            Operation::BootstrapRepository(_) => Some(component::BOOTSTRAP),
            Operation::Maintenance(_) => Some(component::MAINTENANCE),
            Operation::Replicate(_) => Some(component::REPLICATION),
            Operation::SnapshotPin(_) => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotOp {
    /// Where the source is mounted in the mover (normally `/source`).
    pub mount_path: String,
    /// The identity's source path (`/pvc/<pvc>`): the snapshot is recorded under
    /// `<username>@<hostname>:<source_path>` whatever the mount path.
    pub source_path: String,
    /// `<namespace>/<name>` of the Snapshot CR, stored as tag `kopiur-snapshot`.
    pub snapshot: String,
    /// The Snapshot CR's uid, stored as tag `kopiur-uid`.
    pub snapshot_uid: String,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default)]
    pub policy: PathPolicy,
    #[serde(default)]
    pub fail_fast: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload_limit_mb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestoreOp {
    /// Known manifest id; `None` when the mover resolves from `resolve`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolve: Option<ResolveIdentity>,
    /// Where the target volume is mounted (normally `/restore`).
    pub target_path: String,
    #[serde(default)]
    pub options: RestoreOptions,
    /// The controller, not the mover, sets `phase: Completed`: a populate (`target.populator`)
    /// binds the restored volume to the user's PVC first. The mover still records the
    /// resolution, timing and log tail.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub controller_completes: bool,
}

/// Deferred resolution: the newest snapshot of a source ending at or before `as_of`,
/// skipping `offset` newer ones.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolveIdentity {
    pub identity: Identity,
    pub source_path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub as_of: Option<DateTime<Utc>>,
    #[serde(default)]
    pub offset: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotDeleteBatchOp {
    pub members: Vec<DeleteMember>,
    /// Ids per `snapshot delete` call.
    #[serde(default = "default_chunk")]
    pub chunk_size: usize,
    /// Deadline per delete chunk.
    #[serde(default = "default_chunk_timeout")]
    pub chunk_timeout_seconds: u64,
}

fn default_chunk() -> usize {
    50
}
fn default_chunk_timeout() -> u64 {
    300
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteMember {
    /// The Snapshot CR's uid.
    pub uid: String,
    pub snapshot_id: String,
    /// `user@host:path`: the source the controller recorded for the Snapshot
    /// (`status.resolved.identity`). The manifest must be a snapshot of it; empty refuses.
    #[serde(default)]
    pub source: String,
}

/// Whether bootstrap may create a repository, as the controller computed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CreateGate {
    #[serde(rename_all = "camelCase")]
    Allowed {
        via_reinit_ack: bool,
    },
    #[serde(rename_all = "camelCase")]
    DisabledBySpec {
        also_pinned: bool,
    },
    PinnedOnceReady,
}

impl CreateGate {
    pub fn label(&self) -> &'static str {
        match self {
            CreateGate::Allowed { .. } => "Allowed",
            CreateGate::DisabledBySpec { .. } => "DisabledBySpec",
            CreateGate::PinnedOnceReady => "PinnedOnceReady",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapRepositoryOp {
    pub create_gate: CreateGate,
    /// `status.uniqueId`, when pinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned_unique_id: Option<String>,
    /// Probe connects never create, whatever the gate says.
    #[serde(default)]
    pub probe: bool,
    /// List snapshots for the catalog (first bootstrap, spec changes, scans).
    #[serde(default)]
    pub list_snapshots: bool,
    #[serde(default = "default_catalog_limit")]
    pub catalog_limit: usize,
    /// Kopia snapshot ids the controller wants checked against the full listing (at most
    /// [`MAX_VERIFY_SNAPSHOT_IDS`]): the mover answers which are absent
    /// (`BootstrapResult::verified`), so a truncated listing still expires stale catalog rows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verify_snapshot_ids: Vec<String>,
    /// `kopiur@<lease host>`, made maintenance owner right after a create.
    pub maintenance_owner: String,
    #[serde(default)]
    pub create: CreateOptions,
}

fn default_catalog_limit() -> usize {
    1000
}

/// Most ids one bootstrap work spec asks to verify (about 36 KB of the 100 KiB spec).
pub const MAX_VERIFY_SNAPSHOT_IDS: usize = 1000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TakeoverPolicy {
    Never,
    PromptCondition,
    Force,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MaintenanceMode {
    Quick,
    Full,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceOp {
    pub mode: MaintenanceMode,
    /// `kopiur@<lease host>`: the connection identity and the owner kopiur expects.
    pub lease_owner: String,
    /// Owners that also count as ours (re-stamped to the lease owner).
    #[serde(default)]
    pub owner_aliases: Vec<String>,
    pub takeover_policy: TakeoverPolicy,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicateOp {
    pub destination: Backend,
    #[serde(default)]
    pub sync: SyncOptions,
}

/// Why a work spec cannot run.
#[derive(Debug, thiserror::Error)]
pub enum WorkSpecError {
    #[error(
        "the work spec is {size} bytes, above the {MAX_WORK_SPEC_BYTES}-byte limit; reduce the member list or tags"
    )]
    TooLarge { size: usize },
    #[error("the work spec is unreadable: {0}")]
    Unreadable(String),
    #[error("work spec schema version {0} is not supported by this mover (supports {SCHEMA_VERSION})")]
    Version(u32),
    #[error("work spec target uid {actual} does not match the expected {expected}")]
    UidMismatch { expected: String, actual: String },
}

impl WorkSpec {
    /// Serializes and enforces the size cap: a spec above it never becomes a Job.
    pub fn to_json(&self) -> Result<String, WorkSpecError> {
        let s = serde_json::to_string(self).map_err(|e| WorkSpecError::Unreadable(e.to_string()))?;
        if s.len() > MAX_WORK_SPEC_BYTES {
            return Err(WorkSpecError::TooLarge { size: s.len() });
        }
        Ok(s)
    }

    pub fn from_json(s: &str) -> Result<WorkSpec, WorkSpecError> {
        if s.len() > MAX_WORK_SPEC_BYTES {
            return Err(WorkSpecError::TooLarge { size: s.len() });
        }
        let spec: WorkSpec = serde_json::from_str(s).map_err(|e| WorkSpecError::Unreadable(e.to_string()))?;
        if spec.schema_version != SCHEMA_VERSION {
            return Err(WorkSpecError::Version(spec.schema_version));
        }
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::connect_backstop;

    #[test]
    fn the_connect_backstop_always_comes_after_the_job_deadline() {
        // The Job's DeadlineExceeded must be the first verdict on a slow connect: equal
        // bounds raced in CI and the mover's timeout (RepositoryUnavailable) won.
        for d in [1_i64, 10, 57, 120, 600, 3600, 48 * 3600] {
            let b = connect_backstop(d).expect("a positive deadline has a backstop");
            assert!(b >= d as u64 + 60, "deadline {d}: backstop {b} leaves the Job controller under a minute");
        }
        assert_eq!(connect_backstop(10), Some(70));
        assert_eq!(connect_backstop(600), Some(900));
        assert_eq!(connect_backstop(-1), None);
    }
}
