//! The pure Job builder the controller (and the CLI) use to launch a mover.
//!
//! Everything is computed from the input; nothing reads the cluster. Credentials are
//! referenced, never copied, and key by key: the password through `secretKeyRef`, each
//! credential key the backend reads (`Backend::credential_env_keys`) through an optional
//! `secretKeyRef` per credential Secret, a replication destination's keys the same way under
//! the prefix `KOPIUR_DEST_`. No `envFrom`: the rest of a Secret never reaches the mover.
use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{
    Job, JobSpec, PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement, PodFailurePolicyOnPodConditionsPattern,
    PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMapVolumeSource, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    EphemeralVolumeSource, KeyToPath, PersistentVolumeClaimSpec, PersistentVolumeClaimTemplate,
    PersistentVolumeClaimVolumeSource, PodSecurityContext, PodSpec, PodTemplateSpec, ResourceRequirements,
    SeccompProfile, SecretKeySelector, SecurityContext, Toleration, Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kopiur_api::names::label;
use sha2::{Digest, Sha256};

use crate::workspec::{WorkSpec, WorkSpecError};

pub const LABEL_MANAGED_BY: &str = label::MANAGED_BY;
pub const LABEL_OP: &str = label::OP;
pub const LABEL_CONNECT_KIND: &str = "kopiur.home-operations.com/connect-kind";
pub const LABEL_DELETE_REPO: &str = label::DELETE_REPO;
pub const CACHE_MOUNT: &str = "/var/cache/kopia";
/// kopia's config file (which holds the backend's keys): a memory-backed emptyDir, gone with
/// the Pod, never the cache (which may be a PVC that outlives the run).
pub const CONFIG_MOUNT: &str = "/var/run/kopiur";
/// The config volume's size limit (the file is a few KiB).
pub const CONFIG_VOLUME_LIMIT: &str = "4Mi";
/// The only writable path besides the cache: the root filesystem is read-only.
pub const TMP_MOUNT: &str = "/tmp";
pub const SOURCE_MOUNT: &str = "/source";
/// The restore target's mount. kopia touches `<target>.kopia-entry` next to the target when it
/// finishes the root directory, so the target sits inside a writable emptyDir
/// ([`RESTORE_PARENT`]) rather than on the read-only root filesystem.
pub const RESTORE_MOUNT: &str = "/restore/data";
pub const RESTORE_PARENT: &str = "/restore";
pub const DEFAULT_TTL_SECONDS: i32 = 3600;
pub const DEFAULT_BACKOFF_LIMIT: i32 = 2;
pub const DEFAULT_ACTIVE_DEADLINE_SECONDS: i64 = 172_800;
pub const MOVER_UID: i64 = 65532;

/// A Job name over 63 characters becomes `<first 52>-<10 hex of sha256(name)>`.
pub fn job_name(name: &str) -> String {
    if name.len() <= 63 {
        return name.to_string();
    }
    let digest = hex::encode(Sha256::digest(name.as_bytes()));
    let mut cut = 52;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}-{}", name[..cut].trim_end_matches(['-', '.']), &digest[..10])
}

#[derive(Clone, Debug, PartialEq)]
pub enum CacheVolume {
    EmptyDir,
    /// A generic ephemeral volume of this size.
    Ephemeral {
        capacity: String,
        storage_class_name: Option<String>,
    },
    /// A controller-owned PVC reused across runs.
    Persistent {
        claim_name: String,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub enum ConnectKind {
    Strict,
    Probe,
}

/// One ConfigMap key mounted read-only as the file `<dir>/<file>` (an S3 CA bundle).
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigMapFileMount {
    pub config_map_name: String,
    pub key: String,
    /// The directory the volume is mounted at.
    pub dir: String,
    /// The file name the key appears as inside `dir`.
    pub file: String,
}

impl ConfigMapFileMount {
    /// The file's absolute path inside the mover.
    pub fn path(&self) -> String {
        format!("{}/{}", self.dir.trim_end_matches('/'), self.file)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct PvcMount {
    pub claim_name: String,
    pub mount_path: String,
    pub read_only: bool,
}

/// Everything a mover Job is built from (values already resolved and merged).
#[derive(Clone, Debug)]
pub struct JobInput {
    pub name: String,
    pub namespace: String,
    pub image: String,
    pub image_pull_policy: Option<String>,
    pub service_account_name: Option<String>,
    pub work_spec: WorkSpec,
    /// The repository password Secret key (becomes `KOPIA_PASSWORD`).
    pub password: (String, String),
    /// Secrets exposed whole as environment (backend credentials).
    pub env_from_secrets: Vec<String>,
    /// A replication destination Secret, exposed with prefix `KOPIUR_DEST_`.
    pub destination_secret: Option<String>,
    pub result_configmap: Option<String>,
    pub connect_kind: Option<ConnectKind>,
    pub delete_repo_uid: Option<String>,
    pub annotations: BTreeMap<String, String>,
    pub owner: OwnerReference,
    pub cache: CacheVolume,
    pub source: Option<PvcMount>,
    pub restore: Option<PvcMount>,
    /// A filesystem repository's PVC, mounted at the repository path.
    pub repository_volume: Option<PvcMount>,
    /// An S3 CA bundle ConfigMap key, mounted read-only (kopia's `--root-ca-pem-path`).
    pub ca_bundle: Option<ConfigMapFileMount>,
    pub resources: Option<ResourceRequirements>,
    /// Overlays on the hardened bases, field by field.
    pub security_context: Option<SecurityContext>,
    pub pod_security_context: Option<PodSecurityContext>,
    pub node_selector: Option<BTreeMap<String, String>>,
    pub tolerations: Option<Vec<Toleration>>,
    pub affinity: Option<Affinity>,
    pub backoff_limit: i32,
    pub active_deadline_seconds: i64,
    /// `None` means no TTL (batch-delete Jobs).
    pub ttl_seconds_after_finished: Option<i32>,
    pub rust_log: Option<String>,
    pub log_format: Option<String>,
    /// Additional plain variables (e.g. `KOPIUR_KOPIA_BINARY` for an auditing wrapper).
    /// Never a secret value: those are referenced through Secrets only.
    pub extra_env: Vec<EnvVar>,
}

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error(transparent)]
    WorkSpec(#[from] WorkSpecError),
}

/// Applies `overlay` onto `base` field by field: a field the overlay sets wins.
fn overlay_container(base: &mut SecurityContext, o: &SecurityContext) {
    macro_rules! take {
        ($($f:ident),*) => { $( if o.$f.is_some() { base.$f = o.$f.clone(); } )* };
    }
    take!(
        run_as_non_root,
        allow_privilege_escalation,
        capabilities,
        seccomp_profile,
        read_only_root_filesystem,
        run_as_user,
        run_as_group,
        privileged,
        proc_mount,
        se_linux_options,
        windows_options,
        app_armor_profile
    );
}

fn overlay_pod(base: &mut PodSecurityContext, o: &PodSecurityContext) {
    macro_rules! take {
        ($($f:ident),*) => { $( if o.$f.is_some() { base.$f = o.$f.clone(); } )* };
    }
    take!(
        fs_group,
        fs_group_change_policy,
        seccomp_profile,
        run_as_user,
        run_as_group,
        run_as_non_root,
        supplemental_groups,
        supplemental_groups_policy,
        sysctls,
        se_linux_options,
        windows_options,
        app_armor_profile,
        se_linux_change_policy
    );
}

/// Merges overlays from lowest to highest (for example `moverDefaults`, then a recipe's
/// `mover`) into one overlay, field by field.
pub fn merge_container_overlays<'a>(
    layers: impl IntoIterator<Item = Option<&'a SecurityContext>>,
) -> Option<SecurityContext> {
    let mut out: Option<SecurityContext> = None;
    for o in layers.into_iter().flatten() {
        overlay_container(out.get_or_insert_with(Default::default), o);
    }
    out
}

/// Pod-level counterpart of [`merge_container_overlays`].
pub fn merge_pod_overlays<'a>(
    layers: impl IntoIterator<Item = Option<&'a PodSecurityContext>>,
) -> Option<PodSecurityContext> {
    let mut out: Option<PodSecurityContext> = None;
    for o in layers.into_iter().flatten() {
        overlay_pod(out.get_or_insert_with(Default::default), o);
    }
    out
}

/// The hardened container security context, with `overlay` applied field by field. The root
/// filesystem is read-only: the mover writes only to its cache volume and the `/tmp` emptyDir.
pub fn container_security_context(overlay: Option<&SecurityContext>) -> SecurityContext {
    let mut base = SecurityContext {
        run_as_non_root: Some(true),
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), add: None }),
        seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), localhost_profile: None }),
        read_only_root_filesystem: Some(true),
        ..Default::default()
    };
    if let Some(o) = overlay {
        overlay_container(&mut base, o);
    }
    base
}

pub fn pod_security_context(overlay: Option<&PodSecurityContext>) -> PodSecurityContext {
    let mut base = PodSecurityContext {
        fs_group: Some(MOVER_UID),
        fs_group_change_policy: Some("OnRootMismatch".into()),
        seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), localhost_profile: None }),
        ..Default::default()
    };
    if let Some(o) = overlay {
        overlay_pod(&mut base, o);
    }
    base
}

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar { name: name.into(), value: Some(value.into()), value_from: None }
}

/// `name` from key `key` of Secret `secret`, unset when the Secret has no such key.
fn secret_key_env(name: String, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name,
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector { name: secret.into(), key: key.into(), optional: Some(true) }),
            ..Default::default()
        }),
    }
}

fn pvc_volume(name: &str, m: &PvcMount) -> (Volume, VolumeMount) {
    (
        Volume {
            name: name.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: m.claim_name.clone(),
                read_only: Some(m.read_only),
            }),
            ..Default::default()
        },
        VolumeMount {
            name: name.into(),
            mount_path: m.mount_path.clone(),
            read_only: Some(m.read_only),
            ..Default::default()
        },
    )
}

/// Builds the Job. Fails only when the work spec is over the size cap.
pub fn build_job(input: &JobInput) -> Result<Job, JobError> {
    let spec_json = input.work_spec.to_json()?;
    let op = input.work_spec.operation.label();
    let name = job_name(&input.name);

    let mut labels =
        BTreeMap::from([(LABEL_MANAGED_BY.to_string(), "kopiur".to_string()), (LABEL_OP.to_string(), op.to_string())]);
    if let Some(c) = input.work_spec.operation.component() {
        labels.insert(kopiur_api::names::label::COMPONENT.to_string(), c.to_string());
    }
    match &input.connect_kind {
        Some(ConnectKind::Strict) => {
            labels.insert(LABEL_CONNECT_KIND.into(), "strict".into());
        }
        Some(ConnectKind::Probe) => {
            labels.insert(LABEL_CONNECT_KIND.into(), "probe".into());
        }
        None => {}
    }
    if let Some(uid) = &input.delete_repo_uid {
        labels.insert(LABEL_DELETE_REPO.into(), uid.clone());
    }

    let mut envs = vec![
        env("KOPIUR_WORK_SPEC", spec_json),
        env("KOPIA_CONFIG_PATH", format!("{CONFIG_MOUNT}/repository.config")),
        env("KOPIUR_CONFIG_DIR", CONFIG_MOUNT),
        env("KOPIA_CACHE_DIRECTORY", format!("{CACHE_MOUNT}/cache")),
        env("KOPIA_LOG_DIR", format!("{CACHE_MOUNT}/logs")),
        env("KOPIA_CHECK_FOR_UPDATES", "false"),
        env("KOPIA_PERSIST_CREDENTIALS_ON_CONNECT", "false"),
        env("KOPIUR_WORKDIR", CACHE_MOUNT),
        EnvVar {
            name: "KOPIA_PASSWORD".into(),
            value: None,
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: input.password.0.clone(),
                    key: input.password.1.clone(),
                    optional: Some(false),
                }),
                ..Default::default()
            }),
        },
        EnvVar {
            name: "KOPIUR_JOB_UID".into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(k8s_openapi::api::core::v1::ObjectFieldSelector {
                    field_path: "metadata.labels['batch.kubernetes.io/controller-uid']".into(),
                    api_version: None,
                }),
                ..Default::default()
            }),
        },
        EnvVar {
            name: "POD_NAMESPACE".into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(k8s_openapi::api::core::v1::ObjectFieldSelector {
                    field_path: "metadata.namespace".into(),
                    api_version: None,
                }),
                ..Default::default()
            }),
        },
    ];
    if let Some(cm) = &input.result_configmap {
        envs.push(env("KOPIUR_RESULT_CONFIGMAP", cm.clone()));
    }
    if let Some(l) = &input.rust_log {
        envs.push(env("RUST_LOG", l.clone()));
    }
    if let Some(f) = &input.log_format {
        envs.push(env("KOPIUR_LOG_FORMAT", f.clone()));
    }
    envs.extend(input.extra_env.iter().cloned());

    // Each known credential key of the backend through its own optional `secretKeyRef`, from
    // each credential Secret in order (a later Secret's key wins, as with `envFrom`): the
    // mover's environment gets the keys kopia reads and nothing else the Secret holds.
    let mut seen = std::collections::BTreeSet::new();
    let keys = input.work_spec.repository.backend.credential_env_keys();
    for secret in input.env_from_secrets.iter().filter(|s| seen.insert((*s).clone())) {
        envs.extend(keys.iter().map(|k| secret_key_env(k.to_string(), secret, k)));
    }
    if let (Some(d), crate::workspec::Operation::Replicate(op)) =
        (&input.destination_secret, &input.work_spec.operation)
    {
        let dest = op.destination.credential_env_keys();
        envs.extend(dest.iter().map(|k| secret_key_env(format!("KOPIUR_DEST_{k}"), d, k)));
    }

    let cache_volume = match &input.cache {
        CacheVolume::EmptyDir => Volume {
            name: "kopia-cache".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
        CacheVolume::Ephemeral { capacity, storage_class_name } => Volume {
            name: "kopia-cache".into(),
            ephemeral: Some(EphemeralVolumeSource {
                volume_claim_template: Some(PersistentVolumeClaimTemplate {
                    metadata: None,
                    spec: PersistentVolumeClaimSpec {
                        access_modes: Some(vec!["ReadWriteOnce".into()]),
                        storage_class_name: storage_class_name.clone(),
                        resources: Some(VolumeResourceRequirements {
                            requests: Some(BTreeMap::from([("storage".to_string(), Quantity(capacity.clone()))])),
                            limits: None,
                        }),
                        ..Default::default()
                    },
                }),
            }),
            ..Default::default()
        },
        CacheVolume::Persistent { claim_name } => Volume {
            name: "kopia-cache".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim_name.clone(),
                read_only: Some(false),
            }),
            ..Default::default()
        },
    };
    let tmp_volume =
        Volume { name: "tmp".into(), empty_dir: Some(EmptyDirVolumeSource::default()), ..Default::default() };
    let config_volume = Volume {
        name: "kopia-config".into(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: Some("Memory".into()),
            size_limit: Some(Quantity(CONFIG_VOLUME_LIMIT.into())),
        }),
        ..Default::default()
    };
    let mut volumes = vec![cache_volume, tmp_volume, config_volume];
    let mut mounts = vec![
        VolumeMount { name: "kopia-cache".into(), mount_path: CACHE_MOUNT.into(), ..Default::default() },
        VolumeMount { name: "tmp".into(), mount_path: TMP_MOUNT.into(), ..Default::default() },
        VolumeMount { name: "kopia-config".into(), mount_path: CONFIG_MOUNT.into(), ..Default::default() },
    ];
    if let Some(parent) = input.restore.as_ref().and_then(|m| std::path::Path::new(&m.mount_path).parent())
        && parent != std::path::Path::new("/")
    {
        volumes.push(Volume {
            name: "restore-parent".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        });
        mounts.push(VolumeMount {
            name: "restore-parent".into(),
            mount_path: parent.to_string_lossy().into_owned(),
            ..Default::default()
        });
    }
    for (vname, m) in [("source", &input.source), ("restore", &input.restore), ("repository", &input.repository_volume)]
    {
        if let Some(m) = m {
            let (v, vm) = pvc_volume(vname, m);
            volumes.push(v);
            mounts.push(vm);
        }
    }

    if let Some(ca) = &input.ca_bundle {
        volumes.push(Volume {
            name: "ca-bundle".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: ca.config_map_name.clone(),
                items: Some(vec![KeyToPath { key: ca.key.clone(), path: ca.file.clone(), mode: None }]),
                optional: Some(false),
                default_mode: Some(0o444),
            }),
            ..Default::default()
        });
        mounts.push(VolumeMount {
            name: "ca-bundle".into(),
            mount_path: ca.dir.clone(),
            read_only: Some(true),
            ..Default::default()
        });
    }

    let container = Container {
        name: "mover".into(),
        image: Some(input.image.clone()),
        image_pull_policy: input.image_pull_policy.clone(),
        args: None,
        env: Some(envs),
        env_from: None,
        volume_mounts: Some(mounts),
        resources: input.resources.clone(),
        security_context: Some(container_security_context(input.security_context.as_ref())),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    };

    let mut owner = input.owner.clone();
    owner.controller = Some(true);
    owner.block_owner_deletion = Some(false);

    let pod_failure_policy = PodFailurePolicy {
        rules: vec![
            PodFailurePolicyRule {
                action: "FailJob".into(),
                on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                    container_name: Some("mover".into()),
                    operator: "In".into(),
                    values: vec![2, 3],
                }),
                on_pod_conditions: None,
            },
            PodFailurePolicyRule {
                action: "Ignore".into(),
                on_exit_codes: None,
                on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                    type_: "DisruptionTarget".into(),
                    status: "True".into(),
                }]),
            },
        ],
    };

    Ok(Job {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(input.namespace.clone()),
            labels: Some(labels.clone()),
            annotations: if input.annotations.is_empty() { None } else { Some(input.annotations.clone()) },
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(input.backoff_limit),
            active_deadline_seconds: Some(input.active_deadline_seconds),
            ttl_seconds_after_finished: input.ttl_seconds_after_finished,
            pod_failure_policy: Some(pod_failure_policy),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(labels), ..Default::default() }),
                spec: Some(PodSpec {
                    restart_policy: Some("Never".into()),
                    service_account_name: input.service_account_name.clone(),
                    containers: vec![container],
                    volumes: Some(volumes),
                    security_context: Some(pod_security_context(input.pod_security_context.as_ref())),
                    node_selector: input.node_selector.clone(),
                    tolerations: input.tolerations.clone(),
                    affinity: input.affinity.clone(),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    })
}
