//! RepositoryReplication: mirrors a repository's blobs to a second, bare backend with
//! `kopia repository sync-to` (docs/design/api-contract.md §11).

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema::ListMap;
use crate::shared::phase::{ManualRunPhase, tolerant_enum};
use crate::shared::status::{Condition, Time};
use crate::shared::{Backend, CronSpec, MoverSpec, RepositoryRef};

/// `kopia repository sync-to` options; absent leaves kopia's default.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub parallel: Option<i32>,
    /// Maps to `--delete`: destructive at the destination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_extra: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub must_exist: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_download_speed_bytes_per_second: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_upload_speed_bytes_per_second: Option<i64>,
}

#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "kopiur.home-operations.com",
    version = "v1alpha1",
    kind = "RepositoryReplication",
    plural = "repositoryreplications",
    shortname = "kopiarepl",
    category = "kopiur",
    namespaced,
    status = "RepositoryReplicationStatus",
    printcolumn = r#"{"name":"Source","type":"string","jsonPath":".spec.sourceRef.name"}"#,
    printcolumn = r#"{"name":"Destination","type":"string","jsonPath":".status.destinationBackend"}"#,
    printcolumn = r#"{"name":"Schedule","type":"string","jsonPath":".spec.schedule.cron"}"#,
    printcolumn = r#"{"name":"Last","type":"date","jsonPath":".status.lastReplicated"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RepositoryReplicationSpec {
    /// Read while it is Ready.
    pub source_ref: RepositoryRef,
    /// A bare backend; its Secrets must live in this object's namespace.
    pub destination: Backend,
    pub schedule: CronSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(crate::shared::mover::rule::REPLICATION).message(crate::shared::mover::rule::REPLICATION_MESSAGE))]
    pub mover: Option<MoverSpec>,
    #[serde(default)]
    pub suspend: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncOptions>,
}

tolerant_enum! {
    pub enum ReplicationPhase {
        Pending => "Pending",
        Replicating => "Replicating",
        Succeeded => "Succeeded",
        Failed => "Failed",
        Suspended => "Suspended",
    }
}

impl ReplicationPhase {
    /// `Failed` retries at the next slot, so no phase is final for the object.
    pub fn is_run_finished(&self) -> bool {
        match self {
            Self::Succeeded | Self::Failed => true,
            Self::Pending | Self::Replicating | Self::Suspended | Self::Unknown(_) => false,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicationManualRun {
    pub requested_at: String,
    pub phase: ManualRunPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RepositoryReplicationStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ReplicationPhase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_backend: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_replicated: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_replicated_bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_replicated_blobs: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_scheduled_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manual_run: Option<ReplicationManualRun>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = ListMap("type"))]
    pub conditions: Vec<Condition>,
}
