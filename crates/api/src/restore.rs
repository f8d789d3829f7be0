//! Restore: reads a kopia snapshot into a PVC, once (docs/design/api-contract.md §9). The resolution is
//! pinned and later edits are ignored; to restore again, create a new Restore.

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Duration;
use crate::repository::CredentialProjection;
use crate::schema::{ExactlyOne, ListMap};
use crate::shared::phase::tolerant_enum;
use crate::shared::status::{Condition, Failure, ResolvedIdentity, ResolvedRepository, Time, Timing};
use crate::shared::{FailurePolicy, MoverSpec, ObjectRef, RepositoryRef};
use crate::snapshot_policy::WorkloadExec;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FromPolicy {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub namespace: Option<String>,
    /// The newest Snapshot at or before this instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub as_of: Option<Time>,
    /// Skip this many newer entries.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub offset: i32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.snapshotID) || (!has(self.asOf) && (!has(self.offset) || self.offset == 0))").message("snapshotID cannot be combined with asOf or offset"))]
pub struct IdentitySource {
    #[schemars(regex(pattern = r"^[^@:\s\x00-\x1f\x7f]{1,253}$"))]
    pub username: String,
    #[schemars(regex(pattern = r"^[^@:\s\x00-\x1f\x7f]{1,253}$"))]
    pub hostname: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub source_path: Option<String>,
    #[serde(default, rename = "snapshotID", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub snapshot_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub as_of: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub offset: Option<i32>,
}

/// What to restore.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = ExactlyOne { prefix: "source: " })]
pub enum RestoreSource {
    SnapshotRef(ObjectRef),
    FromPolicy(FromPolicy),
    Identity(IdentitySource),
}

impl RestoreSource {
    /// `status.sourceKind`.
    pub fn kind(&self) -> RestoreSourceKind {
        match self {
            Self::SnapshotRef(_) => RestoreSourceKind::SnapshotRef,
            Self::FromPolicy(_) => RestoreSourceKind::FromPolicy,
            Self::Identity(_) => RestoreSourceKind::Identity,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum AccessMode {
    ReadWriteOnce,
    ReadOnlyMany,
    ReadWriteMany,
    ReadWriteOncePod,
}

fn read_write_once() -> Vec<AccessMode> {
    vec![AccessMode::ReadWriteOnce]
}

/// A new PVC the Restore creates (and does not own).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct NewPvc {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    #[schemars(length(min = 1, max = 64))]
    #[x_kube(validation = Rule::new("isQuantity(self)").message("capacity must be a Kubernetes quantity"))]
    pub capacity: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub storage_class_name: Option<String>,
    #[serde(default = "read_write_once")]
    #[schemars(length(min = 1, max = 4))]
    #[x_kube(validation = Rule::new("!self.exists(m, m == 'ReadWriteOncePod') || self.size() == 1").message("ReadWriteOncePod must be the only access mode"))]
    pub access_modes: Vec<AccessMode>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Populator {}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StreamExec {
    #[schemars(length(min = 1, max = 253))]
    pub file_name: String,
    pub workload_exec: WorkloadExec,
}

/// Where to restore to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = ExactlyOne { prefix: "target: " })]
pub enum RestoreTarget {
    Pvc(NewPvc),
    PvcRef(ObjectRef),
    /// Populate the PVC whose spec.dataSourceRef names this Restore (apiGroup
    /// kopiur.home-operations.com, kind Restore), once, through a prime PVC.
    Populator(Populator),
    StreamExec(StreamExec),
}

/// Each maps to kopia's `--[no-]flag`; absent keeps kopia's default except the two resolved
/// defaults below.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_file_deletion: Option<bool>,
    /// Resolved `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_permission_errors: Option<bool>,
    /// Resolved `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_files_atomically: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub parallel: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_sparse_files: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_owners: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_permissions: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_times: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overwrite_files: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overwrite_directories: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overwrite_symlinks: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_errors: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_existing: Option<bool>,
}

impl RestoreOptions {
    pub fn resolved_ignore_permission_errors(options: Option<&Self>) -> bool {
        options.and_then(|o| o.ignore_permission_errors).unwrap_or(true)
    }

    pub fn resolved_write_files_atomically(options: Option<&Self>) -> bool {
        options.and_then(|o| o.write_files_atomically).unwrap_or(true)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum OnMissingSnapshot {
    Fail,
    // With a `pvc` target, provision an empty volume (deploy-or-restore).
    Continue,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestorePolicy {
    /// Resolved `Continue` for `fromPolicy`, `Fail` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_missing_snapshot: Option<OnMissingSnapshot>,
    /// How long to wait for a matching snapshot, from `status.waitStartedAt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_timeout: Option<Duration>,
}

#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "kopiur.home-operations.com",
    version = "v1alpha1",
    kind = "Restore",
    plural = "restores",
    shortname = "kopiarestore",
    category = "kopiur",
    namespaced,
    status = "RestoreStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Source","type":"string","jsonPath":".status.sourceKind"}"#,
    printcolumn = r#"{"name":"Target","type":"string","jsonPath":".status.target.pvcRef.name","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.source.identity) || has(self.repository)").message("repository is required when source.identity is used").reason(Reason::FieldValueRequired).field_path(".repository"),
    validation = Rule::new("!has(self.policy) || !has(self.policy.waitTimeout) || !has(self.failurePolicy) || !has(self.failurePolicy.activeDeadlineSeconds) || duration(self.policy.waitTimeout.matches('^[0-9]+$') ? self.policy.waitTimeout + 's' : self.policy.waitTimeout).getSeconds() < self.failurePolicy.activeDeadlineSeconds").message("policy.waitTimeout must be shorter than failurePolicy.activeDeadlineSeconds"),
)]
pub struct RestoreSpec {
    pub source: RestoreSource,
    pub target: RestoreTarget,
    /// Derived from the source when absent; required with `source.identity`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<RepositoryRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<RestoreOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<RestorePolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(crate::shared::mover::rule::RESTORE).message(crate::shared::mover::rule::RESTORE_MESSAGE))]
    pub mover: Option<MoverSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<FailurePolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_projection: Option<CredentialProjection>,
}

impl RestoreSpec {
    pub fn resolved_on_missing_snapshot(&self) -> OnMissingSnapshot {
        if let Some(explicit) = self.policy.as_ref().and_then(|p| p.on_missing_snapshot) {
            return explicit;
        }
        match self.source {
            RestoreSource::FromPolicy(_) => OnMissingSnapshot::Continue,
            RestoreSource::SnapshotRef(_) | RestoreSource::Identity(_) => OnMissingSnapshot::Fail,
        }
    }
}

tolerant_enum! {
    pub enum RestorePhase {
        Pending => "Pending",
        Resolving => "Resolving",
        Restoring => "Restoring",
        Completed => "Completed",
        Failed => "Failed",
    }
}

impl RestorePhase {
    pub fn is_terminal(&self) -> bool {
        match self {
            Self::Completed | Self::Failed => true,
            Self::Pending | Self::Resolving | Self::Restoring | Self::Unknown(_) => false,
        }
    }
}

tolerant_enum! {
    pub enum RestoreSourceKind {
        SnapshotRef => "SnapshotRef",
        FromPolicy => "FromPolicy",
        Identity => "Identity",
    }
}

tolerant_enum! {
    pub enum Resolution {
        Snapshot => "Snapshot",
        NoSnapshot => "NoSnapshot",
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreResolved {
    pub resolution: Resolution,
    #[serde(default, rename = "kopiaSnapshotID", skip_serializing_if = "Option::is_none")]
    pub kopia_snapshot_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_ref: Option<ObjectRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<ResolvedRepository>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<ResolvedIdentity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned_at: Option<Time>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreTargetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc_ref: Option<ObjectRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc_prime: Option<ObjectRef>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    #[serde(default)]
    pub bytes_restored: i64,
    #[serde(default)]
    pub files_restored: i64,
}

/// `status.ownership`: the restored entries compared with the owners the snapshot recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreOwnership {
    #[serde(default)]
    pub preserved: bool,
    #[serde(default)]
    pub not_preserved_count: i64,
    #[serde(default)]
    pub directories_checked: i64,
    /// Every directory of the snapshot was compared.
    #[serde(default)]
    pub complete: bool,
    /// Names the first entries and the settings that keep every owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub message: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RestorePhase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_kind: Option<RestoreSourceKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<RestoreResolved>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<RestoreTargetStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<Timing>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_started_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_tail: Option<String>,
    /// Whether the restored entries kept the owners recorded in the snapshot (written by a
    /// mover that could not chown; absent when the mover could, or `skipOwners` was set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ownership: Option<RestoreOwnership>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = ListMap("type"))]
    pub conditions: Vec<Condition>,
}
