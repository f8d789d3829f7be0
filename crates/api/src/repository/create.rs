//! How a repository comes to exist: the create-time algorithms, a seed from a replica, and
//! the bootstrap Job's tuning.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::yes;
use crate::repository_replication::SyncOptions;
use crate::schema::ExactlyOne;
use crate::shared::{Backend, FailurePolicy, RepositoryRef};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Ecc {
    #[schemars(length(min = 1, max = 64))]
    pub algorithm: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub overhead_percent: Option<i32>,
}

/// Behaviour at the first bootstrap. The algorithm fields are immutable once set because
/// they only take effect when the repository is created.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(oldSelf.encryption) || (has(self.encryption) && self.encryption == oldSelf.encryption)").message("create.encryption is immutable once set").field_path(".encryption"),
    validation = Rule::new("!has(oldSelf.hash) || (has(self.hash) && self.hash == oldSelf.hash)").message("create.hash is immutable once set").field_path(".hash"),
    validation = Rule::new("!has(oldSelf.splitter) || (has(self.splitter) && self.splitter == oldSelf.splitter)").message("create.splitter is immutable once set").field_path(".splitter"),
    validation = Rule::new("!has(oldSelf.ecc) || (has(self.ecc) && self.ecc == oldSelf.ecc)").message("create.ecc is immutable once set").field_path(".ecc"),
)]
pub struct CreateSpec {
    /// Create the repository on the very first bootstrap when the storage is empty.
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub encryption: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub splitter: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc: Option<Ecc>,
}

impl Default for CreateSpec {
    fn default() -> Self {
        Self { enabled: true, encryption: None, hash: None, splitter: None, ecc: None }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = ExactlyOne { prefix: "seed.from: " })]
pub enum SeedFrom {
    Backend(Backend),
    Repository(RepositoryRef),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum MigratePolicies {
    #[default]
    #[serde(rename = "none")]
    None,
    #[serde(rename = "copy")]
    Copy,
    #[serde(rename = "copyOverwrite")]
    CopyOverwrite,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Migrate {
    #[serde(default)]
    pub policies: MigratePolicies,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub parallel: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialProjection {
    #[serde(default)]
    pub enabled: bool,
}

/// Initialize a new repository from a replica.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Seed {
    pub from: SeedFrom,
    #[serde(default)]
    pub allow_empty_source: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<FailurePolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migrate: Option<Migrate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_projection: Option<CredentialProjection>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Bootstrap {
    /// Tunes the `<name>-discovery` bootstrap, probe and catalog Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<FailurePolicy>,
}
