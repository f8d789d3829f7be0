//! References to other objects (docs/design/api-contract.md §2.1).

use kube::KubeSchema;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::names::constants::DEFAULT_PASSWORD_KEY;

/// Which repository kind a [`RepositoryRef`] points at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum RepositoryKind {
    #[default]
    Repository,
    ClusterRepository,
}

/// A reference to a Repository or ClusterRepository.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.namespace) && has(self.kind) && self.kind == 'ClusterRepository')")
    .message("namespace must not be set when kind is ClusterRepository")
    .reason(Reason::FieldValueForbidden)
    .field_path(".namespace"))]
pub struct RepositoryRef {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    #[serde(default)]
    pub kind: RepositoryKind,
    /// Absent means the referrer's namespace. Forbidden for a ClusterRepository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub namespace: Option<String>,
}

impl RepositoryRef {
    pub fn repository(name: impl Into<String>) -> Self {
        Self { name: name.into(), kind: RepositoryKind::Repository, namespace: None }
    }

    pub fn cluster_repository(name: impl Into<String>) -> Self {
        Self { name: name.into(), kind: RepositoryKind::ClusterRepository, namespace: None }
    }

    /// The namespace the referenced Repository lives in; `None` for a ClusterRepository.
    pub fn resolved_namespace<'a>(&'a self, referrer_namespace: &'a str) -> Option<&'a str> {
        match self.kind {
            RepositoryKind::Repository => Some(self.namespace.as_deref().unwrap_or(referrer_namespace)),
            RepositoryKind::ClusterRepository => None,
        }
    }
}

/// A reference to a SnapshotPolicy.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRef {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub namespace: Option<String>,
}

/// A reference to a namespaced object (a Snapshot or a PVC).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub namespace: Option<String>,
}

/// One key of a Secret: the repository password.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub namespace: Option<String>,
    /// Resolved to `KOPIA_PASSWORD` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub key: Option<String>,
}

impl SecretKeyRef {
    pub fn resolved_key(&self) -> &str {
        self.key.as_deref().unwrap_or(DEFAULT_PASSWORD_KEY)
    }
}

/// A whole Secret, read by its well-known keys.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretRef {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub namespace: Option<String>,
}

pub fn default_ca_key() -> String {
    "ca.crt".to_owned()
}

/// A TLS CA bundle in a ConfigMap.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapKeyRef {
    #[schemars(length(min = 1, max = 253))]
    pub config_map_name: String,
    #[serde(default = "default_ca_key")]
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}
