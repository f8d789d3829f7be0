//! Maintenance: kopia quick and full maintenance for one repository under an ownership lease
//! (docs/design/api-contract.md §10). Repositories project one automatically.

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Duration;
use crate::repository::CredentialProjection;
use crate::schema::ListMap;
use crate::shared::phase::ManualRunPhase;
use crate::shared::status::{Condition, Time};
use crate::shared::{CronSpec, FailurePolicy, MoverSpec, RepositoryRef};

pub fn default_quick() -> CronSpec {
    CronSpec::new("0 */6 * * *").with_jitter(Duration::from_secs(30 * 60))
}

pub fn default_full() -> CronSpec {
    CronSpec::new("0 3 * * *").with_jitter(Duration::from_secs(3600))
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceSchedule {
    /// `maintenance run` without `--full`.
    #[serde(default = "default_quick")]
    pub quick: CronSpec,
    /// `maintenance run --full`; when both are due, full runs and both clocks advance.
    #[serde(default = "default_full")]
    pub full: CronSpec,
    /// Used by a tier that sets no zone of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9_+\-/]{1,64}$"))]
    pub timezone: Option<String>,
}

impl Default for MaintenanceSchedule {
    fn default() -> Self {
        Self { quick: default_quick(), full: default_full(), timezone: None }
    }
}

/// What to do when another owner holds the maintenance lease.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum TakeoverPolicy {
    #[default]
    Never,
    PromptCondition,
    Force,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Ownership {
    /// The lease; derived `kopiur/<ns>/<repo>` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16), inner(length(max = 253)))]
    pub owner_aliases: Option<Vec<String>>,
    #[serde(default)]
    pub takeover_policy: TakeoverPolicy,
}

#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "kopiur.home-operations.com",
    version = "v1alpha1",
    kind = "Maintenance",
    plural = "maintenances",
    shortname = "kopiamaint",
    category = "kopiur",
    namespaced,
    status = "MaintenanceStatus",
    printcolumn = r#"{"name":"Repository","type":"string","jsonPath":".spec.repository.name"}"#,
    printcolumn = r#"{"name":"Owner","type":"string","jsonPath":".status.ownership.owner"}"#,
    printcolumn = r#"{"name":"Last-Full","type":"date","jsonPath":".status.full.lastRunAt","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceSpec {
    pub repository: RepositoryRef,
    #[serde(default)]
    #[schemars(extend("default" = {}))]
    pub schedule: MaintenanceSchedule,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ownership: Option<Ownership>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(crate::shared::mover::rule::MAINTENANCE).message(crate::shared::mover::rule::MAINTENANCE_MESSAGE))]
    pub mover: Option<MoverSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<FailurePolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_projection: Option<CredentialProjection>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OwnershipStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_at: Option<Time>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TierStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_scheduled_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_at: Option<Time>,
    #[serde(default)]
    pub consecutive_failures: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_content_reclaimed_bytes: Option<i64>,
}

/// The kind of a manual maintenance run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunMode {
    Quick,
    Full,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceManualRun {
    pub requested_at: String,
    pub mode: RunMode,
    pub phase: ManualRunPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ownership: Option<OwnershipStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quick: Option<TierStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full: Option<TierStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manual_run: Option<MaintenanceManualRun>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = ListMap("type"))]
    pub conditions: Vec<Condition>,
}
