//! The status of Repository and ClusterRepository: phase, storage and catalog figures, the
//! breaker state and the mass-deletion counts.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema::ListMap;
use crate::shared::phase::tolerant_enum;
use crate::shared::status::{Condition, Time};

tolerant_enum! {
    /// `status.phase` of Repository and ClusterRepository.
    pub enum RepositoryPhase {
        Pending => "Pending",
        Initializing => "Initializing",
        Ready => "Ready",
        Degraded => "Degraded",
        Failed => "Failed",
    }
}

impl RepositoryPhase {
    /// Consumers may launch only against a Ready repository.
    pub fn admits_consumers(&self) -> bool {
        match self {
            Self::Ready => true,
            Self::Pending | Self::Initializing | Self::Degraded | Self::Failed | Self::Unknown(_) => false,
        }
    }

    /// `Failed` needs a human; an unknown phase is never terminal.
    pub fn is_terminal(&self) -> bool {
        match self {
            Self::Failed => true,
            Self::Pending | Self::Initializing | Self::Ready | Self::Degraded | Self::Unknown(_) => false,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageStats {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_count: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_size_bytes: Option<i64>,
    /// Human-readable `totalSizeBytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_size: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_blob_count: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_observed_at: Option<Time>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CatalogStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovered_backup_count: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreign_snapshot_count: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_refresh_at: Option<Time>,
    /// The last `catalog-scan-requested-at` token honoured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan_request_honored: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan_request_attempt_at: Option<Time>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StrictRetry {
    pub attempt: i32,
    pub holdoff_seconds: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<Time>,
}

/// The breaker state, stored in status so a restart cannot reset it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthStatus {
    #[serde(default)]
    pub consecutive_probe_failures: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_failure_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_healthy_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_attempt_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker_opened_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict_retry: Option<StrictRetry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_deadline_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_folded_job_uid: Option<String>,
    /// Wall time, in seconds, of the last successful `kopia repository connect` (plus the
    /// `index list` that follows it) a bootstrap or probe Job measured. The connect deadline
    /// adapts to it (`bootstrapDeadlineSeconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_connect_seconds: Option<i64>,
    /// When the repository last asked its Maintenance for a quick run because
    /// `IndexBlobHealth` went False; the Maintenance runs one quick cycle after this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quick_maintenance_requested_at: Option<Time>,
}

/// The mass-deletion ack in effect.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MassDeletionAck {
    /// The annotation value as written.
    pub value: String,
    /// min(value, observedAt): a future-dated ack never approves later arrivals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effective: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_at: Option<Time>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeletionProtectionStatus {
    #[serde(default)]
    pub pending_external: i32,
    #[serde(default)]
    pub held: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ack: Option<MassDeletionAck>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RepositoryStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RepositoryPhase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Pinned by the first successful bootstrap; only an honoured `allow-reinitialize` changes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_credential_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reverify_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_stats: Option<StorageStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catalog: Option<CatalogStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_protection: Option<DeletionProtectionStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = ListMap("type"))]
    pub conditions: Vec<Condition>,
}
