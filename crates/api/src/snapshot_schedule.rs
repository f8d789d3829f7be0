//! SnapshotSchedule: a cron that creates Snapshots (docs/design/api-contract.md §8).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema::{ExactlyOne, ListMap};
use crate::shared::status::{Condition, NameRef, Time};
use crate::shared::{CronSpec, PolicyRef};
use crate::snapshot::OnScheduleDelete;

// Which policies the schedule fires (flattened into the spec, so no doc comment: it would
// become the spec's description).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = ExactlyOne { prefix: "" })]
pub enum ScheduleTarget {
    /// One policy.
    PolicyRef(PolicyRef),
    /// Every matching policy in the namespace.
    PolicySelector(LabelSelector),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConcurrencyPolicy {
    // A parked or running child blocks the next slot.
    #[default]
    Forbid,
    Allow,
    Replace,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleSpec {
    #[serde(flatten)]
    pub cron: CronSpec,
    /// Fire once immediately if nothing has ever run.
    #[serde(default)]
    pub run_on_create: bool,
    #[serde(default)]
    pub suspend: bool,
    #[serde(default)]
    pub concurrency_policy: ConcurrencyPolicy,
    /// A slot missed by more than this is skipped and re-pinned forward.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub starting_deadline_seconds: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleDeletion {
    /// Stamped on every produced Snapshot; `Delete` opts back into the cascade.
    #[serde(default)]
    pub on_schedule_delete: OnScheduleDelete,
}

fn ten() -> i32 {
    10
}

#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "kopiur.home-operations.com",
    version = "v1alpha1",
    kind = "SnapshotSchedule",
    plural = "snapshotschedules",
    shortname = "kopiasched",
    category = "kopiur",
    namespaced,
    status = "SnapshotScheduleStatus",
    printcolumn = r#"{"name":"Config","type":"string","jsonPath":".spec.policyRef.name"}"#,
    printcolumn = r#"{"name":"Schedule","type":"string","jsonPath":".spec.schedule.cron"}"#,
    printcolumn = r#"{"name":"Suspended","type":"boolean","jsonPath":".spec.schedule.suspend"}"#,
    printcolumn = r#"{"name":"Next","type":"date","jsonPath":".status.nextSchedule.at","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
/// A cron that creates Snapshots of one policy (`policyRef`) or of every matching policy
/// (`policySelector`).
pub struct SnapshotScheduleSpec {
    #[serde(flatten)]
    pub target: ScheduleTarget,
    pub schedule: ScheduleSpec,
    /// How many Failed (and, separately, Unchanged) scheduled Snapshots to keep.
    #[serde(default = "ten")]
    #[schemars(range(min = 0))]
    pub failed_jobs_history_limit: i32,
    #[serde(default)]
    #[schemars(extend("default" = {}))]
    pub deletion: ScheduleDeletion,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleRecord {
    /// The fire time: the slot plus its jitter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<Time>,
    /// The unjittered cron instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_ref: Option<NameRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotScheduleStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule: Option<ScheduleRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_schedule: Option<ScheduleRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_schedule: Option<ScheduleRecord>,
    #[serde(default)]
    pub consecutive_failures: i32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = ListMap("type"))]
    pub conditions: Vec<Condition>,
}
