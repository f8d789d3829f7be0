//! What a repository's backend needs inside every mover Job, in one place: the kopia backend
//! (with `root_ca_pem_path` when a CA bundle is mounted), a filesystem repository's PVC mounted
//! at `path`, and an S3 CA bundle ConfigMap key mounted read-only. Every Job builder (bootstrap
//! and probe, backup, batch delete, restore, maintenance, replication) calls [`for_job`].
//!
//! The controller itself never runs kopia: every connect happens in a mover Job, so a
//! PVC-backed or CA-backed repository needs nothing mounted into the controller.
use k8s_openapi::api::core::v1::ConfigMap;
use kopiur_api::names::reason;
use kopiur_api::shared::Backend;
use kopiur_api::shared::backend::FilesystemVolume;
use kopiur_mover::job::{ConfigMapFileMount, JobInput, PvcMount};

use crate::error::Error;
use crate::mover_job::BackendMounts;
use crate::mover_settings::Refusal;

/// Where the CA bundle is mounted in every mover.
pub const CA_BUNDLE_DIR: &str = "/etc/kopiur/ca";
/// The file the ConfigMap key appears as.
pub const CA_BUNDLE_FILE: &str = "ca.crt";

impl BackendMounts {
    /// Puts the mounts into a Job input (the work spec carries `backend`).
    pub fn apply(&self, input: &mut JobInput) {
        input.repository_volume = self.repository_volume.clone();
        input.ca_bundle = self.ca_bundle.clone();
    }
}

/// Why no mover Job can be built for this backend in this namespace.
#[derive(Clone, Debug, PartialEq)]
pub enum MountError {
    /// The backend is not implemented in this release (or otherwise unusable).
    Invalid(String),
    /// A filesystem repository's PVC lives in `home_ns`, but the Job would run in `job_ns`.
    VolumeNotInNamespace { pvc: String, home_ns: String, job_ns: String },
}

impl MountError {
    pub fn message(&self) -> String {
        match self {
            MountError::Invalid(m) => m.clone(),
            MountError::VolumeNotInNamespace { pvc, home_ns, job_ns } => format!(
                "the repository's filesystem volume is PVC {pvc} in namespace {home_ns}, but this mover Job runs in \
                 namespace {job_ns} and a pod can mount only a PVC of its own namespace; use a repository whose \
                 volume lives in {job_ns}, or run this work in {home_ns}"
            ),
        }
    }

    /// As a settings refusal: Stalled, no Job, the reason on the consumer's conditions.
    pub fn refusal(&self) -> Refusal {
        Refusal {
            reason: match self {
                MountError::Invalid(_) => reason::INVALID_SPEC,
                MountError::VolumeNotInNamespace { .. } => reason::REPOSITORY_VOLUME_NOT_IN_NAMESPACE,
            },
            message: self.message(),
        }
    }
}

impl From<MountError> for Error {
    fn from(e: MountError) -> Error {
        match e {
            MountError::Invalid(m) => Error::InvalidSpec(m),
            MountError::VolumeNotInNamespace { .. } => Error::MoverRefused(e.refusal()),
        }
    }
}

/// The backend's mounts for a mover Job in `job_ns`, of a repository whose home namespace
/// (where its PVC and CA ConfigMap live) is `home_ns`.
pub fn for_job(b: &Backend, home_ns: &str, job_ns: &str) -> Result<BackendMounts, MountError> {
    let mut backend = crate::mounts::kopia_backend(b).map_err(|e| MountError::Invalid(e.to_string()))?;
    let mut out = BackendMounts { backend: backend.clone(), repository_volume: None, ca_bundle: None };
    if let Some(f) = b.filesystem() {
        match &f.volume {
            None => {}
            Some(FilesystemVolume::Pvc(p)) => {
                if home_ns != job_ns {
                    return Err(MountError::VolumeNotInNamespace {
                        pvc: p.name.clone(),
                        home_ns: home_ns.to_string(),
                        job_ns: job_ns.to_string(),
                    });
                }
                out.repository_volume =
                    Some(PvcMount { claim_name: p.name.clone(), mount_path: f.path.clone(), read_only: false });
            }
            Some(FilesystemVolume::Nfs(_)) => {
                return Err(MountError::Invalid(
                    "spec.backend.filesystem.volume.nfs is not implemented in this release".into(),
                ));
            }
        }
    }
    if let Some(r) = ca_bundle_ref(b) {
        let m = ConfigMapFileMount {
            config_map_name: r.config_map_name.clone(),
            key: r.key.clone(),
            dir: CA_BUNDLE_DIR.into(),
            file: CA_BUNDLE_FILE.into(),
        };
        if let kopiur_kopia::Backend::S3(k) = &mut backend {
            k.root_ca_pem_path = Some(m.path());
        }
        out.ca_bundle = Some(m);
        out.backend = backend;
    }
    Ok(out)
}

/// A replication destination's mounts are not built yet: a destination that needs one (a CA
/// bundle or a volume) is refused with this message instead of being synced without it.
pub fn destination_refusal(b: &Backend) -> Option<String> {
    if ca_bundle_ref(b).is_some() {
        Some(
            "spec.destination.s3.tls.caBundleRef is not implemented for replication destinations in this release"
                .into(),
        )
    } else if b.filesystem().is_some_and(|f| f.volume.is_some()) {
        Some(
            "spec.destination.filesystem.volume is not implemented for replication destinations in this release".into(),
        )
    } else {
        None
    }
}

/// The CA bundle reference of an S3 backend, if any.
pub fn ca_bundle_ref(b: &Backend) -> Option<&kopiur_api::shared::ConfigMapKeyRef> {
    b.s3()?.tls.as_ref()?.ca_bundle_ref.as_ref()
}

/// The CA bundle as the repository sees it in one namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaState {
    /// No `caBundleRef`.
    NotConfigured,
    /// The ConfigMap holds the key; its resourceVersion (a change reconnects strictly).
    Present { resource_version: String },
    /// The ConfigMap or its key is absent: `MissingCaBundle`, no Job.
    Missing { message: String },
}

/// Reads the referenced CA ConfigMap in `ns` (one GET; only for a backend with `caBundleRef`).
pub async fn ca_state(client: &kube::Client, ns: &str, b: &Backend) -> Result<CaState, kube::Error> {
    let Some(r) = ca_bundle_ref(b) else { return Ok(CaState::NotConfigured) };
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), ns);
    Ok(ca_state_of(api.get_opt(&r.config_map_name).await?.as_ref(), &r.config_map_name, &r.key, ns))
}

pub fn ca_state_of(cm: Option<&ConfigMap>, name: &str, key: &str, ns: &str) -> CaState {
    let Some(cm) = cm else {
        return CaState::Missing {
            message: format!(
                "spec.backend.s3.tls.caBundleRef names ConfigMap {name}, which does not exist in namespace {ns}; \
                 create it with the CA certificate (PEM) under key {key}"
            ),
        };
    };
    let has_key = cm.data.as_ref().is_some_and(|d| d.get(key).is_some_and(|v| !v.trim().is_empty()))
        || cm.binary_data.as_ref().is_some_and(|d| d.contains_key(key));
    if !has_key {
        return CaState::Missing {
            message: format!(
                "ConfigMap {name} in namespace {ns} has no (non-empty) key {key}; put the CA certificate (PEM) under \
                 that key or set spec.backend.s3.tls.caBundleRef.key"
            ),
        };
    }
    CaState::Present { resource_version: cm.metadata.resource_version.clone().unwrap_or_default() }
}

/// The kopia view of the API backend.
pub fn kopia_backend(b: &Backend) -> Result<kopiur_kopia::Backend, Error> {
    match b {
        Backend::S3(s) => {
            // Refused, never ignored (docs/design/api-contract.md §1.9): the movers have no workload identity yet.
            if s.auth.as_ref().is_some_and(|a| a.workload_identity.is_some()) {
                return Err(Error::InvalidSpec(
                    "spec.backend.s3.auth.workloadIdentity is not implemented in this release".into(),
                ));
            }
            let tls = s.tls.clone().unwrap_or_default();
            let (endpoint, plain_http) = match s.endpoint.as_deref() {
                Some(e) if e.starts_with("http://") => (Some(e.trim_start_matches("http://").to_string()), true),
                Some(e) => (Some(e.trim_start_matches("https://").to_string()), false),
                None => (None, false),
            };
            Ok(kopiur_kopia::Backend::S3(kopiur_kopia::S3Backend {
                bucket: s.bucket.clone(),
                endpoint: endpoint.map(|e| e.trim_end_matches('/').to_string()),
                prefix: s.prefix.clone(),
                region: s.region.clone(),
                disable_tls: plain_http || tls.disable_tls.unwrap_or(false),
                disable_tls_verification: tls.insecure_skip_verify.unwrap_or(false),
                root_ca_pem_path: None,
            }))
        }
        Backend::Filesystem(f) => {
            Ok(kopiur_kopia::Backend::Filesystem(kopiur_kopia::FilesystemBackend { path: f.path.clone() }))
        }
        Backend::Azure(_)
        | Backend::Gcs(_)
        | Backend::B2(_)
        | Backend::Sftp(_)
        | Backend::WebDav(_)
        | Backend::Rclone(_)
        | Backend::Gdrive(_) => {
            Err(Error::InvalidSpec(format!("spec.backend.{} is not implemented in this release", b.key())))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend(v: serde_json::Value) -> Backend {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_pvc_repository_mounts_its_volume_at_path_in_its_own_namespace() {
        let b = backend(serde_json::json!({"filesystem": {"path": "/repository", "volume": {"pvc": {"name": "nas"}}}}));
        let m = for_job(&b, "media", "media").unwrap();
        assert_eq!(
            m.repository_volume,
            Some(PvcMount { claim_name: "nas".into(), mount_path: "/repository".into(), read_only: false })
        );
        assert_eq!(m.backend.provider_flags().unwrap(), vec!["filesystem".to_string(), "--path=/repository".into()]);
        let e = for_job(&b, "media", "apps").unwrap_err();
        assert_eq!(e.refusal().reason, "RepositoryVolumeNotInNamespace");
        assert!(e.message().contains("PVC nas") && e.message().contains("apps"), "{}", e.message());
        // A bare path mounts nothing, in any namespace.
        let bare = backend(serde_json::json!({"filesystem": {"path": "/repository"}}));
        assert_eq!(for_job(&bare, "media", "apps").unwrap().repository_volume, None);
        let nfs = backend(
            serde_json::json!({"filesystem": {"path": "/r", "volume": {"nfs": {"server": "n", "path": "/x"}}}}),
        );
        assert!(matches!(for_job(&nfs, "a", "a"), Err(MountError::Invalid(_))), "nfs is refused, not ignored");
    }

    #[test]
    fn a_ca_bundle_is_mounted_and_reaches_kopia_as_root_ca_pem_path() {
        let b = backend(serde_json::json!({"s3": {"bucket": "bkt", "endpoint": "https://s3.local:9443",
            "tls": {"caBundleRef": {"configMapName": "garage-ca", "key": "root.pem"}}}}));
        let m = for_job(&b, "a", "b").unwrap();
        let ca = m.ca_bundle.clone().unwrap();
        assert_eq!((ca.config_map_name.as_str(), ca.key.as_str()), ("garage-ca", "root.pem"));
        let flags = m.backend.provider_flags().unwrap();
        assert!(flags.contains(&"--root-ca-pem-path=/etc/kopiur/ca/ca.crt".to_string()), "{flags:?}");
        assert!(!flags.contains(&"--disable-tls".to_string()));
        let skip = backend(serde_json::json!({"s3": {"bucket": "bkt", "tls": {"insecureSkipVerify": true}}}));
        let flags = for_job(&skip, "a", "a").unwrap().backend.provider_flags().unwrap();
        assert!(flags.contains(&"--disable-tls-verification".to_string()), "{flags:?}");
        let plain = backend(serde_json::json!({"s3": {"bucket": "bkt", "tls": {"disableTls": true}}}));
        let flags = for_job(&plain, "a", "a").unwrap().backend.provider_flags().unwrap();
        assert!(flags.contains(&"--disable-tls".to_string()), "{flags:?}");
    }

    #[test]
    fn a_destination_needing_a_mount_is_refused_not_ignored() {
        let ca = backend(serde_json::json!({"s3": {"bucket": "bkt", "tls": {"caBundleRef": {"configMapName": "c"}}}}));
        assert!(destination_refusal(&ca).is_some_and(|m| m.contains("caBundleRef")));
        let pvc = backend(serde_json::json!({"filesystem": {"path": "/r", "volume": {"pvc": {"name": "v"}}}}));
        assert!(destination_refusal(&pvc).is_some_and(|m| m.contains("volume")));
        assert_eq!(destination_refusal(&backend(serde_json::json!({"s3": {"bucket": "bkt"}}))), None);
    }

    #[test]
    fn a_missing_configmap_or_key_is_missing() {
        assert!(matches!(ca_state_of(None, "ca", "ca.crt", "ns"), CaState::Missing { .. }));
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "ca", "resourceVersion": "7"}, "data": {"other": "x"}}))
        .unwrap();
        assert!(matches!(ca_state_of(Some(&cm), "ca", "ca.crt", "ns"), CaState::Missing { .. }));
        assert_eq!(ca_state_of(Some(&cm), "ca", "other", "ns"), CaState::Present { resource_version: "7".into() });
    }
}
