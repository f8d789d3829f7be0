//! SnapshotReplication [next] (docs/design/api-contract.md §12): copies snapshots between two repositories with
//! `kopia snapshot migrate`. The whole kind is [next]: the CRD ships so that manifests for it
//! apply (docs/design/api-contract.md §1.1), and a core build answers every object with `Stalled /
//! FeatureNotImplemented` and launches nothing (docs/design/api-contract.md §15; `kopiur-controller`'s
//! `snapshot_replication` gate).

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::repository::{CredentialProjection, MigratePolicies};
use crate::schema::{ExactlyOne, ListMap};
use crate::shared::mover::Throttle;
use crate::shared::phase::tolerant_enum;
use crate::shared::status::{Condition, Time};
use crate::shared::{CronSpec, MoverSpec, RepositoryRef, Retention};

/// The message every SnapshotReplication gets in a core build (docs/design/api-contract.md §15, exact).
pub const NOT_IMPLEMENTED_MESSAGE: &str = "SnapshotReplication is not implemented in this release";

/// Which kopia identities (`user@host`, or `user@host:/path`) are copied.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IdentityFilter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), inner(length(min = 1, max = 512)))]
    pub include: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), inner(length(min = 1, max = 512)))]
    pub exclude: Option<Vec<String>>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Selection {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identities: Option<IdentityFilter>,
    /// Copy only the newest snapshot of each source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_only: Option<bool>,
}

/// `kopia snapshot migrate` options.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotMigrate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub parallel: Option<i32>,
    /// Whether kopia policies are copied too: `none` (default), `copy`, `copyOverwrite`.
    #[serde(default)]
    pub policies: MigratePolicies,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle: Option<Throttle>,
}

/// A variant without payload (`none: {}`, `mirrorSource: {}`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Empty {}

/// What happens to copies at the destination; exactly one key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = ExactlyOne { prefix: "pruning: " })]
pub enum Pruning {
    /// Copies are never pruned (the default).
    None(Empty),
    /// A copy whose source snapshot is gone is deleted (left unstamped on purpose, so the
    /// destination's mass-deletion breaker counts it).
    MirrorSource(Empty),
    /// GFS retention over the copies.
    Retention(Retention),
}

impl Default for Pruning {
    fn default() -> Self {
        Pruning::None(Empty {})
    }
}

#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "kopiur.home-operations.com",
    version = "v1alpha1",
    kind = "SnapshotReplication",
    plural = "snapshotreplications",
    shortname = "kopiasrepl",
    category = "kopiur",
    namespaced,
    status = "SnapshotReplicationStatus",
    printcolumn = r#"{"name":"Source","type":"string","jsonPath":".spec.sourceRef.name"}"#,
    printcolumn = r#"{"name":"Destination","type":"string","jsonPath":".spec.destinationRef.name"}"#,
    printcolumn = r#"{"name":"Schedule","type":"string","jsonPath":".spec.schedule.cron"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Last","type":"date","jsonPath":".status.lastReplicated"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotReplicationSpec {
    /// The repository snapshots are copied from. It must differ from `destinationRef`; that is
    /// checked by the controller once the kind is built (a CEL comparison of the two references
    /// exceeds the apiserver's cost budget).
    pub source_ref: RepositoryRef,
    /// The repository they are copied to.
    pub destination_ref: RepositoryRef,
    pub schedule: CronSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<Selection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migrate: Option<SnapshotMigrate>,
    /// Defaults to `{none: {}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {"none": {}}))]
    pub pruning: Option<Pruning>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mover: Option<MoverSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_projection: Option<CredentialProjection>,
    #[serde(default)]
    pub suspend: bool,
}

impl SnapshotReplicationSpec {
    /// `pruning`, resolved: absent means `none`.
    pub fn resolved_pruning(&self) -> Pruning {
        self.pruning.clone().unwrap_or_default()
    }
}

tolerant_enum! {
    /// `status.phase` of a SnapshotReplication.
    pub enum SnapshotReplicationPhase {
        Pending => "Pending",
        Replicating => "Replicating",
        Succeeded => "Succeeded",
        Failed => "Failed",
        Suspended => "Suspended",
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotReplicationStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<SnapshotReplicationPhase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_replicated: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_scheduled_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = ListMap("type"))]
    pub conditions: Vec<Condition>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimal_manifest_parses_and_pruning_resolves_to_none() {
        let s: SnapshotReplication = serde_json::from_value(serde_json::json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotReplication",
            "metadata": {"name": "copy", "namespace": "apps"},
            "spec": {"sourceRef": {"name": "a"}, "destinationRef": {"name": "b"},
                     "schedule": {"cron": "0 4 * * *"}}
        }))
        .unwrap();
        assert_eq!(s.spec.resolved_pruning(), Pruning::None(Empty {}));
        let p: Pruning = serde_json::from_value(serde_json::json!({"retention": {"keepDaily": 7}})).unwrap();
        assert!(matches!(p, Pruning::Retention(r) if r.keep_daily == Some(7)));
    }

    #[test]
    fn the_schema_keeps_the_union_shape_and_the_pruning_default() {
        use kube::CustomResourceExt;
        let crd = serde_json::to_value(SnapshotReplication::crd()).unwrap();
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec["properties"]["pruning"]["default"], serde_json::json!({"none": {}}));
        let rules = spec["properties"]["pruning"]["x-kubernetes-validations"].to_string();
        assert!(rules.contains("pruning: set exactly one of: none, mirrorSource, retention"), "{rules}");
        let req: Vec<&str> = spec["required"].as_array().unwrap().iter().filter_map(|v| v.as_str()).collect();
        assert_eq!(req, ["destinationRef", "schedule", "sourceRef"]);
    }
}
