//! Storage backends and their provider flags.
//!
//! A backend value holds locations and switches only. Credentials never appear here: kopia
//! reads them from the environment (`AWS_ACCESS_KEY_ID`, …), because argv is world-readable
//! through `/proc/<pid>/cmdline`.
use serde::{Deserialize, Serialize};

use crate::error::KopiaError;

/// One storage location. Externally tagged, like the API's backend union.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Backend {
    Filesystem(FilesystemBackend),
    S3(S3Backend),
    // Typed so the work spec can carry them; argv support comes later.
    Azure(AzureBackend),
    Gcs(BucketPrefix),
    B2(BucketPrefix),
    Sftp(SftpBackend),
    WebDav(WebDavBackend),
    Rclone(RcloneBackend),
    Gdrive(GdriveBackend),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FilesystemBackend {
    /// Absolute path as the mover sees it.
    pub path: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct S3Backend {
    pub bucket: String,
    /// `host[:port]` without a scheme; `None` means AWS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    #[serde(default)]
    pub disable_tls: bool,
    #[serde(default)]
    pub disable_tls_verification: bool,
    /// A CA bundle file the mover can read (mounted from a ConfigMap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_ca_pem_path: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AzureBackend {
    pub container: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_account: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BucketPrefix {
    pub bucket: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SftpBackend {
    pub host: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebDavBackend {
    pub url: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RcloneBackend {
    pub remote_path: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GdriveBackend {
    pub folder_id: String,
}

impl Backend {
    /// kopia's provider name.
    pub fn provider(&self) -> &'static str {
        match self {
            Backend::Filesystem(_) => "filesystem",
            Backend::S3(_) => "s3",
            Backend::Azure(_) => "azure",
            Backend::Gcs(_) => "gcs",
            Backend::B2(_) => "b2",
            Backend::Sftp(_) => "sftp",
            Backend::WebDav(_) => "webdav",
            Backend::Rclone(_) => "rclone",
            Backend::Gdrive(_) => "gdrive",
        }
    }

    /// Whether the mover can drive this backend yet.
    pub fn supported(&self) -> bool {
        self.provider_flags().is_ok()
    }

    /// `<target>` as used in messages: `s3://<bucket>/<prefix>` or `filesystem:<path>`.
    pub fn target(&self) -> String {
        match self {
            Backend::Filesystem(f) => format!("filesystem:{}", f.path),
            Backend::S3(s) => format!("s3://{}/{}", s.bucket, s.prefix.as_deref().unwrap_or("")),
            Backend::Azure(a) => format!("azure://{}/{}", a.container, a.prefix.as_deref().unwrap_or("")),
            Backend::Gcs(b) => format!("gcs://{}/{}", b.bucket, b.prefix.as_deref().unwrap_or("")),
            Backend::B2(b) => format!("b2://{}/{}", b.bucket, b.prefix.as_deref().unwrap_or("")),
            Backend::Sftp(s) => format!("sftp://{}:{}{}", s.host, s.port.unwrap_or(22), s.path),
            Backend::WebDav(w) => w.url.clone(),
            Backend::Rclone(r) => format!("rclone:{}", r.remote_path),
            Backend::Gdrive(g) => format!("gdrive:{}", g.folder_id),
        }
    }

    /// `<provider> <provider flags>`, identical for create, connect and sync-to.
    pub fn provider_flags(&self) -> Result<Vec<String>, KopiaError> {
        match self {
            Backend::Filesystem(f) => {
                if !f.path.starts_with('/') {
                    return Err(KopiaError::InvalidSpec(format!(
                        "filesystem repository path must be absolute, got {:?}",
                        f.path
                    )));
                }
                Ok(vec!["filesystem".into(), format!("--path={}", f.path)])
            }
            Backend::S3(s) => {
                if s.bucket.is_empty() {
                    return Err(KopiaError::InvalidSpec("s3 bucket name must be specified".into()));
                }
                let mut v = vec!["s3".into(), format!("--bucket={}", s.bucket)];
                if let Some(e) = &s.endpoint {
                    // kopia wants host[:port]; tolerate a scheme in the spec.
                    let e = e.trim_start_matches("https://").trim_start_matches("http://").trim_end_matches('/');
                    v.push(format!("--endpoint={e}"));
                }
                if let Some(p) = s.prefix.as_deref().filter(|p| !p.is_empty()) {
                    v.push(format!("--prefix={p}"));
                }
                // Always a region: with none, minio-go first asks GetBucketLocation, which
                // adds a request and changes which error surfaces.
                v.push(format!("--region={}", s.region.as_deref().filter(|r| !r.is_empty()).unwrap_or("us-east-1")));
                if s.disable_tls {
                    v.push("--disable-tls".into());
                }
                if s.disable_tls_verification {
                    v.push("--disable-tls-verification".into());
                }
                if let Some(ca) = &s.root_ca_pem_path {
                    v.push(format!("--root-ca-pem-path={ca}"));
                }
                Ok(v)
            }
            Backend::Azure(_)
            | Backend::Gcs(_)
            | Backend::B2(_)
            | Backend::Sftp(_)
            | Backend::WebDav(_)
            | Backend::Rclone(_)
            | Backend::Gdrive(_) => Err(KopiaError::UnsupportedBackend(self.provider())),
        }
    }

    /// The environment variables through which this backend's credentials reach kopia.
    pub fn credential_env_keys(&self) -> &'static [&'static str] {
        match self {
            Backend::Filesystem(_) => &[],
            Backend::S3(_) => &["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"],
            Backend::Azure(_) => &["AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN"],
            Backend::Gcs(_) => &["KOPIA_GCS_CREDENTIALS"],
            Backend::B2(_) => &["B2_KEY_ID", "B2_KEY"],
            Backend::Sftp(_) => &["KOPIA_SFTP_KEY_DATA", "KOPIA_SFTP_KNOWN_HOSTS"],
            Backend::WebDav(_) => &["KOPIA_WEBDAV_USERNAME", "KOPIA_WEBDAV_PASSWORD"],
            Backend::Rclone(_) => &["KOPIA_RCLONE_CONFIG"],
            Backend::Gdrive(_) => &["KOPIA_GDRIVE_CREDENTIALS"],
        }
    }
}
