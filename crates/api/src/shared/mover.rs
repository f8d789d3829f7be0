//! Mover Job customization (docs/design/api-contract.md §2.6).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, PodSecurityContext, ResourceRequirements, SecurityContext, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema::ExactlyOne;

/// How the kopia cache volume lives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum CacheMode {
    #[default]
    Ephemeral,
    Persistent,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CacheSpec {
    /// With `Ephemeral`, turns the emptyDir into a generic ephemeral volume of this size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new("isQuantity(self)").message("cache.capacity must be a Kubernetes quantity"))]
    pub capacity: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub storage_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub metadata_cache_size_mb: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub content_cache_size_mb: Option<i32>,
    /// Resolved `Ephemeral` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<CacheMode>,
}

impl CacheSpec {
    pub fn resolved_mode(cache: Option<&Self>) -> CacheMode {
        cache.and_then(|c| c.mode).unwrap_or_default()
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum SourceColocationMode {
    #[default]
    Auto,
    Required,
    Disabled,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceColocation {
    #[serde(default)]
    pub mode: SourceColocationMode,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Throttle {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub upload_bytes_per_second: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub download_bytes_per_second: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub read_ops_per_second: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub write_ops_per_second: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Scratch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub storage_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new("isQuantity(self)").message("scratch.capacity must be a Kubernetes quantity"))]
    pub capacity: Option<String>,
}

const RESERVED_KEYS_RULE: &str =
    "self.all(k, !k.startsWith('kopiur.home-operations.com/') && k != 'app.kubernetes.io/managed-by')";

/// Repository-level mover settings, applied to every Job the repository spawns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct MoverDefaults {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_security_context: Option<PodSecurityContext>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 64))]
    pub node_selector: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub tolerations: Option<Vec<Toleration>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Resolved 3600; batch-delete Jobs never get a TTL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scratch: Option<Scratch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_colocation: Option<SourceColocation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle: Option<Throttle>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 64))]
    #[x_kube(validation = Rule::new(RESERVED_KEYS_RULE).message("moverDefaults.podLabels must not use reserved keys (kopiur.home-operations.com/*, app.kubernetes.io/managed-by)"))]
    pub pod_labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 64))]
    #[x_kube(validation = Rule::new(RESERVED_KEYS_RULE).message("moverDefaults.podAnnotations must not use reserved keys (kopiur.home-operations.com/*, app.kubernetes.io/managed-by)"))]
    pub pod_annotations: Option<BTreeMap<String, String>>,
}

impl MoverDefaults {
    pub const DEFAULT_TTL_SECONDS_AFTER_FINISHED: i64 = 3600;
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSelector {
    pub pod_selector: LabelSelector,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub container: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PvcConsumer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub container: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FromSnapshot {}

/// Where a mover copies its security context from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = ExactlyOne { prefix: "inheritSecurityContextFrom: " })]
pub enum InheritSecurityContextFrom {
    WorkloadSelector(WorkloadSelector),
    PvcConsumer(PvcConsumer),
    Snapshot(FromSnapshot),
}

/// The per-recipe `mover` block. It has no scheduling fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MoverSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_security_context: Option<PodSecurityContext>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i64>,
    /// Runs the mover as root; needs the `privileged-movers` annotation on the namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privileged_mode: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inherit_security_context_from: Option<InheritSecurityContextFrom>,
}

/// CEL for `mover` fields of kinds that restrict inheritance.
pub mod rule {
    pub const MAINTENANCE: &str = "!has(self.inheritSecurityContextFrom) || (!has(self.inheritSecurityContextFrom.pvcConsumer) && !has(self.inheritSecurityContextFrom.snapshot))";
    pub const MAINTENANCE_MESSAGE: &str = "inheritSecurityContextFrom: only workloadSelector is valid on Maintenance";
    pub const RESTORE: &str =
        "!has(self.inheritSecurityContextFrom) || !has(self.inheritSecurityContextFrom.pvcConsumer)";
    pub const RESTORE_MESSAGE: &str = "inheritSecurityContextFrom.pvcConsumer is not valid on a Restore";
    pub const REPLICATION: &str = "!has(self.inheritSecurityContextFrom)";
    pub const REPLICATION_MESSAGE: &str = "inheritSecurityContextFrom is not valid on RepositoryReplication";
}
