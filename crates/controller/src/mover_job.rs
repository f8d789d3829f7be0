//! The one builder of a mover Job's input (crate root), used by every Job kind: backup, batch
//! delete, pin, restore, bootstrap/probe, maintenance and replication. [`input`] fills what
//! every mover Job shares (image, ServiceAccount, the hardened identity, the repository's
//! mounts, the failure policy's limits, logging, the plain environment); a kind sets only what
//! is its own with struct-update syntax (`JobInput { source: ..., ..mover_job::input(...) }`).
//! See docs/design/mover.md.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, PodSecurityContext};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kopiur_api::shared::failure_policy::FailurePolicy;
use kopiur_mover::job::{CacheVolume, ConfigMapFileMount, JobInput, PvcMount};
use kopiur_mover::workspec::WorkSpec;

use crate::config::Config;
use crate::identity::MOVER_SERVICE_ACCOUNT;
use crate::repo_view::RepoView;

/// The mounts and the kopia backend of one mover Job (built by `mounts::for_job`).
#[derive(Clone, Debug, PartialEq)]
pub struct BackendMounts {
    pub backend: kopiur_kopia::Backend,
    pub repository_volume: Option<PvcMount>,
    pub ca_bundle: Option<ConfigMapFileMount>,
}

/// The uid/gid every mover runs as unless `mover_settings` says otherwise.
pub fn mover_identity() -> PodSecurityContext {
    PodSecurityContext {
        run_as_user: Some(kopiur_mover::job::MOVER_UID),
        run_as_group: Some(kopiur_mover::job::MOVER_UID),
        ..Default::default()
    }
}

/// Plain variables every mover Job gets (never a secret): the kopia binary override used by
/// test environments and auditing wrappers.
pub fn mover_env(config: &Config) -> Vec<EnvVar> {
    config
        .mover_kopia_binary
        .iter()
        .map(|b| EnvVar { name: "KOPIUR_KOPIA_BINARY".into(), value: Some(b.clone()), value_from: None })
        .collect()
}

/// Who a Job is and what it runs: the parts every kind supplies.
pub struct Identity {
    pub name: String,
    pub namespace: String,
    pub owner: OwnerReference,
    pub work_spec: WorkSpec,
    /// The repository password Secret and key.
    pub password: (String, String),
    /// Secrets exposed whole as environment (backend credentials).
    pub env_from_secrets: Vec<String>,
}

/// A mover Job's input with everything kinds share filled in: the configured image and pull
/// policy, the mover ServiceAccount, the hardened uid/gid, the repository volume and CA bundle
/// from `mounts`, `backoffLimit` and `activeDeadlineSeconds` from `fp` (the shared defaults
/// without one), the default TTL, the mover log level and plain environment. No source,
/// restore target, result ConfigMap or annotations: those are a kind's own.
pub fn input(config: &Config, id: Identity, mounts: &BackendMounts, fp: Option<&FailurePolicy>) -> JobInput {
    JobInput {
        name: id.name,
        namespace: id.namespace,
        image: config.mover_image.clone(),
        image_pull_policy: config.mover_image_pull_policy.clone(),
        service_account_name: Some(MOVER_SERVICE_ACCOUNT.into()),
        work_spec: id.work_spec,
        password: id.password,
        env_from_secrets: id.env_from_secrets,
        destination_secret: None,
        result_configmap: None,
        connect_kind: None,
        delete_repo_uid: None,
        annotations: BTreeMap::new(),
        owner: id.owner,
        cache: CacheVolume::EmptyDir,
        source: None,
        restore: None,
        repository_volume: mounts.repository_volume.clone(),
        ca_bundle: mounts.ca_bundle.clone(),
        resources: None,
        security_context: None,
        pod_security_context: Some(mover_identity()),
        node_selector: None,
        tolerations: None,
        affinity: None,
        backoff_limit: fp.and_then(|f| f.backoff_limit).unwrap_or(kopiur_mover::job::DEFAULT_BACKOFF_LIMIT),
        active_deadline_seconds: fp
            .and_then(|f| f.active_deadline_seconds)
            .unwrap_or(kopiur_mover::job::DEFAULT_ACTIVE_DEADLINE_SECONDS),
        ttl_seconds_after_finished: Some(kopiur_mover::job::DEFAULT_TTL_SECONDS),
        rust_log: config.mover_rust_log.clone(),
        log_format: None,
        extra_env: mover_env(config),
    }
}

/// The object a mover Job works for, as its work spec names it (its result goes to that
/// object's status).
pub fn target_of<K: kube::Resource<DynamicType = ()>>(obj: &K) -> kopiur_mover::workspec::TargetRef {
    use kube::ResourceExt;
    kopiur_mover::workspec::TargetRef {
        api_version: K::api_version(&()).to_string(),
        kind: K::kind(&()).to_string(),
        namespace: obj.namespace(),
        name: obj.name_any(),
        uid: obj.uid().unwrap_or_default(),
    }
}

pub fn owner_of<K: kube::Resource<DynamicType = ()>>(obj: &K) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).to_string(),
        kind: K::kind(&()).to_string(),
        name: obj.meta().name.clone().unwrap_or_default(),
        uid: obj.meta().uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(false),
    }
}

/// Secrets the mover reads its credentials from: the password Secret and the backend's auth
/// Secret, both by reference.
pub fn secrets(repo: &RepoView) -> ((String, String), Vec<String>) {
    let (pw, auth) = match repo {
        RepoView::Namespaced(r) => crate::repo_view::secret_names(r.as_ref()),
        RepoView::Cluster(c) => crate::repo_view::secret_names(c.as_ref()),
    };
    let key = repo.common().encryption.password_secret_ref.resolved_key().to_string();
    let mut env_from = vec![pw.clone()];
    env_from.extend(auth.filter(|a| *a != pw));
    ((pw, key), env_from)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_target_names_the_object_by_kind_namespace_name_and_uid() {
        let s: kopiur_api::Snapshot = serde_json::from_value(serde_json::json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": "s", "namespace": "team-a", "uid": "u-1"},
            "spec": {"repository": {"name": "r"}}
        }))
        .unwrap();
        let t = super::target_of(&s);
        assert_eq!(
            (t.api_version.as_str(), t.kind.as_str(), t.namespace.as_deref(), t.name.as_str(), t.uid.as_str()),
            ("kopiur.home-operations.com/v1alpha1", "Snapshot", Some("team-a"), "s", "u-1")
        );
    }
}
