//! SnapshotPolicy: the backup recipe (docs/design/api-contract.md §6). It runs nothing by itself; Snapshots
//! run it, and it owns GFS retention over them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Duration;
use crate::repository::{Adoption, CredentialProjection};
use crate::schema::{ExactlyOne, ListMap};
use crate::shared::backend::NfsVolume;
use crate::shared::status::{Condition, ResolvedRepository, ResolvedSource, Time};
use crate::shared::{Identity, MoverSpec, RepositoryRef, Retention};

// The repositories a policy writes to (flattened into the spec).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = ExactlyOne { prefix: "" })]
pub enum PolicyTarget {
    /// The single target.
    Repository(RepositoryRef),
    /// Fan-out: one Snapshot per (source, repository).
    Repositories(#[schemars(length(min = 1, max = 8))] Vec<RepositoryRef>),
}

impl PolicyTarget {
    pub fn repositories(&self) -> Vec<&RepositoryRef> {
        match self {
            Self::Repository(r) => vec![r],
            Self::Repositories(rs) => rs.iter().collect(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PvcSource {
    /// A PVC in the policy's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceSelector {
    #[schemars(length(max = 64), inner(length(min = 1, max = 63)))]
    pub match_names: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PvcSelectorSource {
    /// Expands into one Snapshot per matched PVC.
    pub label_selector: LabelSelector,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<NamespaceSelector>,
}

fn one_hour() -> Duration {
    Duration::from_secs(3600)
}

/// A command run inside a workload's container.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadExec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub container: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub command: Option<Vec<String>>,
    #[serde(default = "one_hour")]
    pub timeout: Duration,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StreamSource {
    #[schemars(length(min = 1, max = 253))]
    pub file_name: String,
    pub workload_exec: WorkloadExec,
}

// What a source item backs up (flattened into the item).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = ExactlyOne { prefix: "each source must " })]
pub enum SourceKind {
    Pvc(PvcSource),
    PvcSelector(PvcSelectorSource),
    Nfs(NfsVolume),
    Stream(StreamSource),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum SourcePathStrategy {
    // `/pvc/<name>`.
    #[default]
    PvcName,
    // `/pvc/<namespace>/<name>`.
    PvcNamespacedName,
}

/// One thing to back up: exactly one of `pvc`, `pvcSelector`, `nfs` and `stream`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    #[serde(flatten)]
    pub kind: SourceKind,
    /// Mount the source read-only; resolved `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledge_live_mutation: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    #[x_kube(validation = Rule::new("self.startsWith('/')").message("sourcePathOverride must be an absolute path"))]
    pub source_path_override: Option<String>,
    /// Used with `pvcSelector` only; resolved `PvcName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_path_strategy: Option<SourcePathStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc_publication_read_only: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledge_read_write_publication: Option<bool>,
}

impl Source {
    pub fn resolved_read_only(&self) -> bool {
        self.read_only.unwrap_or(true)
    }

    pub fn resolved_source_path_strategy(&self) -> SourcePathStrategy {
        self.source_path_strategy.unwrap_or_default()
    }
}

/// How the source is captured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum CopyMethod {
    // The reference's default, kept for compatibility; gated in this release.
    #[default]
    Snapshot,
    Clone,
    // Back up the live volume.
    Direct,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum GroupBy {
    #[default]
    VolumeGroupSnapshot,
    None,
}

/// What deleting a Snapshot CR does to its kopia snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum DeletionPolicy {
    #[default]
    Delete,
    Retain,
    Orphan,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum OnPolicyDelete {
    #[default]
    Retain,
    Delete,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyDeletion {
    #[serde(default)]
    pub on_policy_delete: OnPolicyDelete,
}

fn ten_minutes() -> Duration {
    Duration::from_secs(600)
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Staging {
    /// 0 waits forever.
    #[serde(default = "ten_minutes")]
    pub timeout: Duration,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub storage_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4))]
    pub access_modes: Option<Vec<crate::restore::AccessMode>>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Compression {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub compressor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), inner(length(max = 256)))]
    pub never_compress: Option<Vec<String>>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Files {
    /// Replaces the built-in list; `[]` turns it off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256), inner(length(max = 4096)))]
    pub ignore_rules: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_cache_dirs: Option<bool>,
    /// A run that finds nothing new ends `Unchanged`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_identical_snapshots: Option<bool>,
}

/// The built-in ignore rules used when `files.ignoreRules` is absent.
pub const DEFAULT_IGNORE_RULES: &[&str] =
    &["/lost+found", "System Volume Information", "$RECYCLE.BIN", "@eaDir", ".snapshot"];

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorHandling {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_file_errors: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_dir_errors: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_unknown_types: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_fast: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Upload {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_parallel_snapshots: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_parallel_file_reads: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub limit_mb: Option<i32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreflightCheck {
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// A CEL expression over `repository.*` and `maintenance.*`.
    #[schemars(length(min = 1, max = 1024))]
    pub expr: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub message: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Preflight {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 50), transform = ListMap("name"))]
    pub checks: Option<Vec<PreflightCheck>>,
    /// How long failing checks may park a Snapshot; 0 waits forever.
    #[serde(default = "ten_minutes")]
    pub timeout: Duration,
}

/// Opaque until verification is implemented; kept so existing manifests apply.
pub type Opaque = serde_json::Map<String, serde_json::Value>;

fn opaque_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true, "nullable": true})
}

fn opaque_object_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = ExactlyOne { prefix: "each hook must " })]
pub enum Hook {
    WorkloadExec(#[schemars(schema_with = "opaque_object_schema")] Opaque),
    RunJob(#[schemars(schema_with = "opaque_object_schema")] Opaque),
    HttpRequest(#[schemars(schema_with = "opaque_object_schema")] Opaque),
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Hooks {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub before_snapshot: Option<Vec<Hook>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub after_snapshot: Option<Vec<Hook>>,
}

/// The backup recipe.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "kopiur.home-operations.com",
    version = "v1alpha1",
    kind = "SnapshotPolicy",
    plural = "snapshotpolicies",
    shortname = "kopiasp",
    category = "kopiur",
    namespaced,
    status = "SnapshotPolicyStatus",
    printcolumn = r#"{"name":"Repository","type":"string","jsonPath":".spec.repository.name"}"#,
    printcolumn = r#"{"name":"Repositories","type":"string","jsonPath":".status.repositorySummary","priority":1}"#,
    printcolumn = r#"{"name":"Last-Snapshot","type":"date","jsonPath":".status.lastSuccessfulSnapshot.endTime"}"#,
    printcolumn = r#"{"name":"Last-Verified","type":"date","jsonPath":".status.lastVerified","priority":1}"#,
    printcolumn = r#"{"name":"Suspended","type":"boolean","jsonPath":".spec.suspend"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!(has(self.repositories) && has(self.hooks))").message("hooks cannot be combined with repositories"),
    validation = Rule::new("!self.sources.exists(s, has(s.stream)) || self.sources.size() == 1").message("a stream source must be the only source"),
    validation = Rule::new("!has(self.copyMethod) || self.copyMethod != 'Direct' || self.sources.all(s, !has(s.readOnly) || s.readOnly || (has(s.acknowledgeLiveMutation) && s.acknowledgeLiveMutation))").message("copyMethod Direct with readOnly: false requires acknowledgeLiveMutation: true"),
    validation = Rule::new("!has(self.copyMethod) || self.copyMethod != 'Direct' || !has(self.staging)").message("staging is not used with copyMethod Direct"),
    validation = Rule::new("!has(self.volumeSnapshotClassName) || !self.sources.exists(s, has(s.nfs))").message("volumeSnapshotClassName cannot be used with an nfs source"),
)]
pub struct SnapshotPolicySpec {
    /// Exactly one of `repository` and `repositories`.
    #[serde(flatten)]
    pub target: PolicyTarget,
    /// Overrides the identity; defaults to the policy name and the namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<Identity>,
    #[schemars(length(min = 1, max = 100))]
    pub sources: Vec<Source>,
    #[serde(default)]
    pub copy_method: CopyMethod,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub volume_snapshot_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staging: Option<Staging>,
    #[serde(default)]
    pub group_by: GroupBy,
    /// GFS retention over this policy's Snapshots; absent never prunes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<Retention>,
    #[serde(default)]
    pub default_deletion_policy: DeletionPolicy,
    #[serde(default)]
    #[schemars(extend("default" = {}))]
    pub deletion: PolicyDeletion,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<Compression>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Files>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_handling: Option<ErrorHandling>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload: Option<Upload>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preflight: Option<Preflight>,
    #[serde(default)]
    pub suspend: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mover: Option<MoverSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), inner(length(max = 1024)))]
    pub extra_args: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "opaque_schema")]
    pub verification: Option<Opaque>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<Hooks>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_projection: Option<CredentialProjection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adoption: Option<Adoption>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PinnedIdentity {
    pub username: String,
    pub hostname: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyResolved {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<PinnedIdentity>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<ResolvedSource>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repositories: Vec<ResolvedRepository>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetentionStatus {
    #[serde(default)]
    pub active_snapshot_count: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_prune_at: Option<Time>,
    #[serde(default)]
    pub last_prune_deleted: i32,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastSuccessfulSnapshot {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotPolicyStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<PolicyResolved>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<RetentionStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_snapshot: Option<LastSuccessfulSnapshot>,
    /// For example `s3-main (Ready)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository_summary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_verified: Option<Time>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = ListMap("type"))]
    pub conditions: Vec<Condition>,
}
