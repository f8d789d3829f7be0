//! Snapshot: one backup invocation, or a kopia snapshot that already exists (docs/design/api-contract.md §7).
//! The CR's lifecycle is the kopia snapshot's, mediated by the `snapshot-cleanup` finalizer.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema::ListMap;
use crate::shared::phase::{SnapshotOrigin, tolerant_enum};
use crate::shared::status::{Condition, Failure, ResolvedIdentity, ResolvedRepository, ResolvedSource, Time, Timing};
use crate::shared::{FailurePolicy, PolicyRef, RepositoryRef};
use crate::snapshot_policy::DeletionPolicy;

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PvcTarget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub namespace: Option<String>,
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceTarget {
    pub pvc: PvcTarget,
}

/// Which expanded source of the policy to back up.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotSource {
    #[schemars(range(min = 0))]
    pub source_index: i32,
    pub target: SourceTarget,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub group: Option<String>,
}

/// The cascade guard stamped by the producing schedule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum OnScheduleDelete {
    #[default]
    Retain,
    Delete,
}

/// Every field is optional: a discovered row sets only `deletionPolicy: Retain`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "kopiur.home-operations.com",
    version = "v1alpha1",
    kind = "Snapshot",
    plural = "snapshots",
    shortname = "kopiasnap",
    category = "kopiur",
    namespaced,
    status = "SnapshotStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Origin","type":"string","jsonPath":".status.origin"}"#,
    printcolumn = r#"{"name":"Snapshot","type":"string","jsonPath":".status.snapshot.kopiaSnapshotID","priority":1}"#,
    printcolumn = r#"{"name":"Source","type":"string","jsonPath":".spec.source.target.pvc.name"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.policyRef) == has(oldSelf.policyRef) && (!has(self.policyRef) || self.policyRef == oldSelf.policyRef)").message("spec.policyRef is immutable; create a new Snapshot"),
    validation = Rule::new("has(self.repository) == has(oldSelf.repository) && (!has(self.repository) || self.repository == oldSelf.repository)").message("spec.repository is immutable; create a new Snapshot"),
    validation = Rule::new("has(self.source) == has(oldSelf.source) && (!has(self.source) || self.source == oldSelf.source)").message("spec.source is immutable; create a new Snapshot"),
)]
pub struct SnapshotSpec {
    /// The recipe to run; required for a Snapshot that runs a backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_ref: Option<PolicyRef>,
    /// An explicit target; must be one of the policy's repositories.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<RepositoryRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Box<SnapshotSource>>,
    /// kopia manifest tags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 10))]
    #[x_kube(
        validation = Rule::new("self.all(k, size(k) >= 1 && size(k) <= 63 && !k.contains(':') && !k.startsWith('kopiur'))").message("tag keys must be 1-63 bytes, contain no ':' and not start with 'kopiur'"),
        validation = Rule::new("self.all(k, size(self[k]) <= 256)").message("tag values must be at most 256 bytes"),
    )]
    pub tags: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<Box<FailurePolicy>>,
    /// Resolved from the policy once and pinned in `status.resolved.deletionPolicy` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<DeletionPolicy>,
    /// Absent means `Retain`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_schedule_delete: Option<OnScheduleDelete>,
    /// Pin the snapshot in kopia; a pinned snapshot is exempt from GFS retention.
    #[serde(default)]
    pub pin: bool,
}

impl SnapshotSpec {
    pub fn resolved_on_schedule_delete(&self) -> OnScheduleDelete {
        self.on_schedule_delete.unwrap_or_default()
    }
}

tolerant_enum! {
    /// `status.phase` of a Snapshot.
    pub enum SnapshotPhase {
        Pending => "Pending",
        Running => "Running",
        Succeeded => "Succeeded",
        Unchanged => "Unchanged",
        Failed => "Failed",
        Discovered => "Discovered",
        Deleting => "Deleting",
    }
}

impl SnapshotPhase {
    /// A terminal Snapshot never launches its backup Job again. Unknown is never terminal.
    pub fn is_terminal(&self) -> bool {
        match self {
            Self::Succeeded | Self::Unchanged | Self::Failed | Self::Discovered => true,
            Self::Pending | Self::Running | Self::Deleting | Self::Unknown(_) => false,
        }
    }

    /// Whether the Snapshot owns a kopia manifest and takes part in GFS retention.
    pub fn owns_manifest(&self) -> bool {
        match self {
            Self::Succeeded | Self::Discovered => true,
            Self::Pending | Self::Running | Self::Unchanged | Self::Failed | Self::Deleting | Self::Unknown(_) => false,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KopiaSnapshotRef {
    #[serde(default, rename = "kopiaSnapshotID", skip_serializing_if = "Option::is_none")]
    pub kopia_snapshot_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<ResolvedIdentity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotStats {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_new: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_new: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_modified: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_unchanged: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_failed: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobRef {
    pub name: String,
    #[serde(default)]
    pub attempts: i32,
}

/// Pinned on the first reconcile and never changed, so a deleted policy cannot strand the
/// deletion.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotResolved {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<ResolvedRepository>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository_unique_id: Option<String>,
    /// The policy's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<ResolvedIdentity>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<ResolvedSource>,
    /// The value resolved for an absent `spec.deletionPolicy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<DeletionPolicy>,
}

tolerant_enum! {
    /// What the deletion plan decided while it keeps the finalizer.
    pub enum DeletionDecision {
        Delete => "Delete",
        Held => "Held",
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeletionRecord {
    pub decision: DeletionDecision,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_since: Option<Time>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<SnapshotPhase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<SnapshotOrigin>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<KopiaSnapshotRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<Timing>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<SnapshotStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<Box<JobRef>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<SnapshotResolved>,
    /// At most 4 KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_tail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Box<Failure>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preflight_since: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_missing_since: Option<Time>,
    /// The last mover heartbeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_recorded_at: Option<Time>,
    /// When the controller first deleted this run's staged objects (`copyMethod: Snapshot |
    /// Clone`) and found them not gone; the release bound counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_started_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<Box<DeletionRecord>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = ListMap("type"))]
    pub conditions: Vec<Condition>,
}
