//! ClusterRepository: a cluster-scoped repository that many tenants share (docs/design/api-contract.md §5).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::repository::{RepositoryCommonSpec, RepositoryStatus};
use crate::schema::ExactlyOne;
use crate::shared::marker::True;

/// The tenancy gate for every consumer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = ExactlyOne { prefix: "allowedNamespaces: " })]
pub enum AllowedNamespaces {
    All(True),
    List(
        #[schemars(
            length(min = 1, max = 256),
            inner(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))
        )]
        Vec<String>,
    ),
    Selector(LabelSelector),
}

impl AllowedNamespaces {
    /// `status.allowedNamespacesSummary`.
    pub fn summary(&self) -> String {
        match self {
            Self::All(True) => "all".to_owned(),
            Self::List(list) => format!("list({})", list.len()),
            Self::Selector(_) => "selector".to_owned(),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterCredentialProjection {
    /// The owner's side of credential projection.
    #[serde(default)]
    pub allowed: bool,
}

#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "kopiur.home-operations.com",
    version = "v1alpha1",
    kind = "ClusterRepository",
    plural = "clusterrepositories",
    shortname = "kopiacrepo",
    category = "kopiur",
    status = "ClusterRepositoryStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Backend","type":"string","jsonPath":".status.backend"}"#,
    printcolumn = r#"{"name":"Namespaces","type":"string","jsonPath":".status.allowedNamespacesSummary"}"#,
    printcolumn = r#"{"name":"Server","type":"string","jsonPath":".status.server.endpoint","priority":1}"#,
    printcolumn = r#"{"name":"IndexBlobs","type":"integer","jsonPath":".status.storageStats.indexBlobCount","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRepositorySpec {
    #[serde(flatten)]
    pub common: RepositoryCommonSpec,
    #[x_kube(validation = Rule::new("!has(self.all) || self.all == true").message("allowedNamespaces.all must be true; list the namespaces instead to admit fewer"))]
    pub allowed_namespaces: AllowedNamespaces,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_projection: Option<ClusterCredentialProjection>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRepositoryStatus {
    #[serde(flatten)]
    pub common: RepositoryStatus,
    /// Absent for `all`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_namespace_count: Option<i32>,
    /// `all`, `list(3)` or `selector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_namespaces_summary: Option<String>,
}
