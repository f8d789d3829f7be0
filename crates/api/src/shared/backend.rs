//! Where a repository lives (docs/design/api-contract.md §3): an externally tagged union, one key per backend.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Duration;
use crate::schema::ExactlyOne;
use crate::shared::refs::{ConfigMapKeyRef, SecretRef};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadIdentity {
    #[schemars(length(min = 1, max = 253))]
    pub service_account_name: String,
}

/// Cloud credentials: a Secret, or workload identity, not both.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.secretRef) && has(self.workloadIdentity))").message("set secretRef or workloadIdentity, not both"))]
pub struct CloudAuth {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_identity: Option<WorkloadIdentity>,
}

/// Credentials that can only come from a Secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretAuth {
    pub secret_ref: SecretRef,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.disableTls) && self.disableTls && (has(self.caBundleRef) || (has(self.insecureSkipVerify) && self.insecureSkipVerify)))").message("disableTls cannot be combined with caBundleRef or insecureSkipVerify"))]
pub struct S3Tls {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle_ref: Option<ConfigMapKeyRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_tls: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_skip_verify: Option<bool>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3Backend {
    #[schemars(length(min = 3, max = 63))]
    pub bucket: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub prefix: Option<String>,
    /// Omit for AWS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub region: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<S3Tls>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<CloudAuth>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PvcVolume {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NfsVolume {
    #[schemars(length(min = 1, max = 253))]
    pub server: String,
    #[schemars(length(min = 1, max = 4096))]
    pub path: String,
}

/// The volume a filesystem repository lives on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = ExactlyOne { prefix: "" })]
pub enum FilesystemVolume {
    Pvc(PvcVolume),
    Nfs(NfsVolume),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct FilesystemBackend {
    /// Absolute path; with `volume`, the mount point in every mover.
    #[schemars(length(min = 1, max = 4096))]
    #[x_kube(validation = Rule::new("self.startsWith('/')").message("filesystem.path must be an absolute path"))]
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<FilesystemVolume>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AzureBackend {
    #[schemars(length(min = 1, max = 63))]
    pub container: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub prefix: Option<String>,
    /// Required with workload identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub storage_account: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<CloudAuth>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GcsBackend {
    #[schemars(length(min = 1, max = 222))]
    pub bucket: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<CloudAuth>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct B2Backend {
    #[schemars(length(min = 1, max = 63))]
    pub bucket: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<SecretAuth>,
}

pub fn default_sftp_port() -> i32 {
    22
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SftpBackend {
    #[schemars(length(min = 1, max = 253))]
    pub host: String,
    #[schemars(length(min = 1, max = 4096))]
    pub path: String,
    #[serde(default = "default_sftp_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub username: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<SecretAuth>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebDavBackend {
    #[schemars(length(min = 1, max = 2048))]
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<SecretAuth>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RcloneBackend {
    /// `remote:path`.
    #[schemars(length(min = 1, max = 4096))]
    pub remote_path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_secret_ref: Option<SecretRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_timeout: Option<Duration>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GdriveBackend {
    #[schemars(length(min = 1, max = 256))]
    pub folder_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<SecretRef>,
}

/// Exactly one backend. The variant order is the order of the admission message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = ExactlyOne { prefix: "" })]
pub enum Backend {
    S3(S3Backend),
    Azure(AzureBackend),
    Gcs(GcsBackend),
    B2(B2Backend),
    Filesystem(FilesystemBackend),
    Sftp(SftpBackend),
    WebDav(WebDavBackend),
    Rclone(RcloneBackend),
    Gdrive(GdriveBackend),
}

impl Backend {
    /// The union key, as shown in `status.backend`.
    pub fn key(&self) -> &'static str {
        match self {
            Self::S3(_) => "s3",
            Self::Azure(_) => "azure",
            Self::Gcs(_) => "gcs",
            Self::B2(_) => "b2",
            Self::Filesystem(_) => "filesystem",
            Self::Sftp(_) => "sftp",
            Self::WebDav(_) => "webDav",
            Self::Rclone(_) => "rclone",
            Self::Gdrive(_) => "gdrive",
        }
    }

    /// Whether this release implements the backend; the others are gating `[next]` keys.
    pub fn is_core(&self) -> bool {
        match self {
            Self::S3(_) | Self::Filesystem(_) => true,
            Self::Azure(_)
            | Self::Gcs(_)
            | Self::B2(_)
            | Self::Sftp(_)
            | Self::WebDav(_)
            | Self::Rclone(_)
            | Self::Gdrive(_) => false,
        }
    }

    /// The S3 part, for code that reads an S3-only field (TLS, auth, endpoint); code that
    /// decides something for every backend matches exhaustively instead.
    pub fn s3(&self) -> Option<&S3Backend> {
        match self {
            Self::S3(b) => Some(b),
            Self::Azure(_)
            | Self::Gcs(_)
            | Self::B2(_)
            | Self::Filesystem(_)
            | Self::Sftp(_)
            | Self::WebDav(_)
            | Self::Rclone(_)
            | Self::Gdrive(_) => None,
        }
    }

    /// The filesystem part, for code that reads a filesystem-only field (its volume).
    pub fn filesystem(&self) -> Option<&FilesystemBackend> {
        match self {
            Self::Filesystem(b) => Some(b),
            Self::S3(_)
            | Self::Azure(_)
            | Self::Gcs(_)
            | Self::B2(_)
            | Self::Sftp(_)
            | Self::WebDav(_)
            | Self::Rclone(_)
            | Self::Gdrive(_) => None,
        }
    }

    /// Two backends with the same key are the same storage (replication refuses them).
    pub fn same_target_key(&self) -> String {
        fn opt(v: &Option<String>) -> &str {
            v.as_deref().unwrap_or("")
        }
        match self {
            Self::S3(b) => format!("s3|{}|{}|{}|{}", opt(&b.endpoint), opt(&b.region), b.bucket, opt(&b.prefix)),
            Self::Filesystem(b) => {
                let volume = match &b.volume {
                    None => String::new(),
                    Some(FilesystemVolume::Pvc(p)) => format!("pvc:{}", p.name),
                    Some(FilesystemVolume::Nfs(n)) => format!("nfs:{}:{}", n.server, n.path),
                };
                format!("filesystem|{}|{volume}", b.path)
            }
            Self::Azure(b) => format!("azure|{}|{}|{}", opt(&b.storage_account), b.container, opt(&b.prefix)),
            Self::Gcs(b) => format!("gcs|{}|{}", b.bucket, opt(&b.prefix)),
            Self::B2(b) => format!("b2|{}|{}", b.bucket, opt(&b.prefix)),
            Self::Sftp(b) => format!("sftp|{}|{}|{}", b.host, b.port, b.path),
            Self::WebDav(b) => format!("webDav|{}", b.url),
            Self::Rclone(b) => format!("rclone|{}", b.remote_path),
            Self::Gdrive(b) => format!("gdrive|{}", b.folder_id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accessors_project_one_variant() {
        let s3 = Backend::S3(S3Backend {
            bucket: "b".into(),
            prefix: None,
            endpoint: None,
            region: None,
            tls: None,
            auth: None,
        });
        let fs = Backend::Filesystem(FilesystemBackend { path: "/r".into(), volume: None });
        let gcs = Backend::Gcs(GcsBackend { bucket: "g".into(), prefix: None, auth: None });
        assert_eq!(s3.s3().map(|b| b.bucket.as_str()), Some("b"));
        assert_eq!(fs.filesystem().map(|f| f.path.as_str()), Some("/r"));
        for b in [&fs, &gcs] {
            assert!(b.s3().is_none(), "{}", b.key());
        }
        for b in [&s3, &gcs] {
            assert!(b.filesystem().is_none(), "{}", b.key());
        }
    }
}
