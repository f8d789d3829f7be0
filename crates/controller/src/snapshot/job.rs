//! The backup and batch-delete Jobs: work spec and Job object for one Snapshot. Pure given
//! its inputs, so the size cap is checked before anything is created.
use kopiur_api::names::annotation;
use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use kopiur_api::domain::identity::{resolve_identity, source_path};
use kopiur_api::names;
use kopiur_api::shared::status::ResolvedIdentity;
use kopiur_api::snapshot_policy::{CopyMethod, DEFAULT_IGNORE_RULES, SourceKind};
use kopiur_api::{Snapshot, SnapshotPolicy};
use kopiur_kopia::cmd::{CacheSizes, Identity, PathPolicy};
use kopiur_mover::job::{JobInput, PvcMount, SOURCE_MOUNT, build_job};
use kopiur_mover::workspec::{
    DEFAULT_COMMAND_TIMEOUT_SECONDS, DEFAULT_HEARTBEAT_SECONDS, DeleteMember, MAX_WORK_SPEC_BYTES, Operation,
    RepositoryInfo, SCHEMA_VERSION, SnapshotDeleteBatchOp, SnapshotOp, TargetRef, WorkSpec,
};
use kube::ResourceExt;

use crate::mounts::MountError;
use crate::mover_job::BackendMounts;
use crate::mover_job::{owner_of, secrets};
use crate::repo_view::RepoView;

/// What the policy resolves to for one Snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recipe {
    pub pvc: String,
    pub read_only: bool,
    /// How a staged copy is published (`pvcPublicationReadOnly`, resolved `true`; `false` is
    /// refused without `acknowledgeReadWritePublication` by `crate::features`).
    pub publish_read_only: bool,
    pub identity: ResolvedIdentity,
}

/// The PVC and identity a Snapshot backs up: `spec.source` if set, else the policy's first
/// `pvc` source.
pub fn recipe(snap: &Snapshot, policy: &SnapshotPolicy) -> Result<Recipe, String> {
    let ns = snap.namespace().unwrap_or_default();
    let (index, pvc_override) = match &snap.spec.source {
        Some(s) => (s.source_index.max(0) as usize, Some(s.target.pvc.name.clone())),
        None => (0, None),
    };
    let source = policy.spec.sources.get(index).ok_or_else(|| format!("the policy has no source at index {index}"))?;
    if let Some(other) = snap.spec.source.as_ref().and_then(|s| s.target.pvc.namespace.as_deref()).filter(|o| *o != ns)
    {
        return Err(format!(
            "spec.source.target.pvc.namespace {other} is not the Snapshot's namespace {ns}; sources are PVCs in the policy's namespace"
        ));
    }
    if let SourceKind::PvcSelector(sel) = &source.kind
        && let Some(m) = crate::policy_rules::sources::selector_refusal(index, sel, &ns)
    {
        return Err(m);
    }
    let pvc = match (&source.kind, pvc_override) {
        (_, Some(name)) => name,
        (SourceKind::Pvc(p), None) => p.name.clone(),
        (SourceKind::PvcSelector(_), None) => {
            return Err("a pvcSelector source needs spec.source.target.pvc on the Snapshot".into());
        }
        (SourceKind::Nfs(_) | SourceKind::Stream(_), None) => {
            return Err("only pvc sources are implemented in this release".into());
        }
    };
    // The spec must resolve (a broken identity is reported, never papered over), but the run
    // writes under what the policy pinned: the fork guard keeps the pinned identity and each
    // existing source's pinned path while a fork is refused (docs/design/api-contract.md §2.5). A PVC not
    // pinned yet (new to a selector, or the policy not reconciled yet) takes the spec's path.
    let desired =
        resolve_identity(&policy.name_any(), &ns, policy.spec.identity.as_ref()).map_err(|e| e.to_string())?;
    let pinned = policy.status.as_ref().and_then(|s| s.resolved.as_ref());
    let id = pinned.and_then(|r| r.identity.clone()).unwrap_or(desired);
    let key = format!("{ns}/{pvc}");
    let path = match pinned.and_then(|r| r.sources.iter().find(|s| s.pvc == key)) {
        Some(s) => s.source_path.clone(),
        None => source_path(source.resolved_source_path_strategy(), &ns, &pvc, source.source_path_override.as_deref()),
    };
    Ok(Recipe {
        pvc,
        read_only: source.resolved_read_only(),
        publish_read_only: source.pvc_publication_read_only.unwrap_or(true)
            || source.acknowledge_read_write_publication != Some(true),
        identity: ResolvedIdentity { username: id.username, hostname: id.hostname, source_path: Some(path) },
    })
}

/// The repository's backend mounts for a mover Job in `job_ns` (`crate::mounts`).
pub fn backend_mounts(
    repo: &RepoView,
    job_ns: &str,
    config: &crate::config::Config,
) -> Result<BackendMounts, BuildError> {
    crate::mounts::for_job(&repo.common().backend, &repo.home_namespace(&config.namespace), job_ns).map_err(|e| match e
    {
        MountError::Invalid(m) => BuildError::Invalid(m),
        MountError::VolumeNotInNamespace { .. } => BuildError::Refused(e.refusal()),
    })
}

pub(crate) fn repository_info(
    repo: &RepoView,
    identity: Identity,
    mounts: &BackendMounts,
) -> Result<RepositoryInfo, String> {
    Ok(RepositoryInfo {
        kind: repo.kind().to_string(),
        namespace: repo.namespace(),
        name: repo.name(),
        uid: repo.uid(),
        backend: mounts.backend.clone(),
        client_identity: identity,
        read_only: repo.read_only(),
        cache: CacheSizes::default(),
    })
}

pub struct Built {
    pub job: Job,
    pub bytes: usize,
    /// What `inheritSecurityContextFrom` gave, when the recipe inherits.
    pub inherited_from: Option<String>,
    /// The `Persistent` cache PVC (namespaced), applied before the Job is created.
    pub cache_claim: Option<k8s_openapi::api::core::v1::PersistentVolumeClaim>,
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("the work spec is {0} bytes, over the cap")]
    TooLarge(usize),
    #[error("{0}")]
    Invalid(String),
    /// The mover settings are refused (privileged, or a mode this version does not build).
    #[error("{0}")]
    Refused(crate::mover_settings::Refusal),
}

pub fn backup_job(
    snap: &Snapshot,
    policy: &SnapshotPolicy,
    recipe: &Recipe,
    repo: &RepoView,
    config: &crate::config::Config,
    facts: &crate::mover_settings::MoverFacts,
) -> Result<Built, BuildError> {
    let ns = snap.namespace().unwrap_or_default();
    let mounts = backend_mounts(repo, &ns, config)?;
    let id = Identity::new(recipe.identity.username.clone(), recipe.identity.hostname.clone());
    let p = &policy.spec;
    let op = snapshot_op(snap, policy, recipe);
    let spec = WorkSpec {
        schema_version: SCHEMA_VERSION,
        target_ref: crate::mover_job::target_of(snap),
        repository: repository_info(repo, id, &mounts).map_err(BuildError::Invalid)?,
        command_timeout_seconds: DEFAULT_COMMAND_TIMEOUT_SECONDS,
        heartbeat_seconds: DEFAULT_HEARTBEAT_SECONDS,
        connect_timeout_seconds: None,
        operation: Operation::Snapshot(op),
    };
    let bytes = serde_json::to_vec(&spec).map(|v| v.len()).unwrap_or(usize::MAX);
    if bytes > MAX_WORK_SPEC_BYTES {
        return Err(BuildError::TooLarge(bytes));
    }
    let (password, env_from) = secrets(repo);
    let source = source_mount(snap, policy, recipe);
    let input = JobInput {
        source: Some(source),
        ..crate::mover_job::input(
            config,
            crate::mover_job::Identity {
                name: kopiur_mover::job::job_name(&snap.name_any()),
                namespace: ns,
                owner: owner_of(snap),
                work_spec: spec,
                password,
                env_from_secrets: env_from,
            },
            &mounts,
            snap.spec.failure_policy.as_deref(),
        )
    };
    let mut input = input;
    let settings = crate::mover_settings::resolve_with(
        repo.common().mover_defaults.as_ref(),
        p.mover.as_ref(),
        crate::mover_settings::MoverOp::Backup,
        facts,
    )
    .map_err(BuildError::Refused)?;
    settings.apply(&mut input, true);
    let job = build_job(&input).map_err(|e| BuildError::Invalid(e.to_string()))?;
    let cache_claim = settings.cache_claim.map(|mut c| {
        c.metadata.namespace = snap.namespace();
        c
    });
    Ok(Built { job, bytes, inherited_from: settings.inherited_from, cache_claim })
}

/// The backup's operation: what to snapshot and the policy's path options.
fn snapshot_op(snap: &Snapshot, policy: &SnapshotPolicy, recipe: &Recipe) -> SnapshotOp {
    let ns = snap.namespace().unwrap_or_default();
    let p = &policy.spec;
    let files = p.files.clone().unwrap_or_default();
    let ignore =
        files.ignore_rules.clone().unwrap_or_else(|| DEFAULT_IGNORE_RULES.iter().map(|s| s.to_string()).collect());
    SnapshotOp {
        mount_path: SOURCE_MOUNT.to_string(),
        source_path: recipe.identity.source_path.clone().unwrap_or_default(),
        snapshot: format!("{ns}/{}", snap.name_any()),
        snapshot_uid: snap.uid().unwrap_or_default(),
        tags: snap.spec.tags.clone().unwrap_or_default(),
        description: snap.spec.description.clone(),
        policy: PathPolicy {
            ignore_identical_snapshots: files.ignore_identical_snapshots.unwrap_or(false),
            compression: p.compression.as_ref().and_then(|c| c.compressor.clone()),
            add_ignore: ignore,
            ignore_file_errors: p.error_handling.as_ref().and_then(|e| e.ignore_file_errors),
            ignore_dir_errors: p.error_handling.as_ref().and_then(|e| e.ignore_dir_errors),
            ignore_unknown_types: p.error_handling.as_ref().and_then(|e| e.ignore_unknown_types),
            ignore_cache_dirs: files.ignore_cache_dirs,
            never_compress: p.compression.as_ref().and_then(|c| c.never_compress.clone()).unwrap_or_default(),
            max_parallel_snapshots: p.upload.as_ref().and_then(|u| u.max_parallel_snapshots).map(|v| v.max(1) as u32),
        },
        fail_fast: p.error_handling.as_ref().and_then(|e| e.fail_fast).unwrap_or(false),
        upload_limit_mb: p.upload.as_ref().and_then(|u| u.limit_mb).map(|v| v.max(0) as u64),
        parallel: p.upload.as_ref().and_then(|u| u.max_parallel_file_reads).map(|v| v.max(1) as u32),
    }
}

/// The volume the backup reads.
fn source_mount(snap: &Snapshot, policy: &SnapshotPolicy, recipe: &Recipe) -> PvcMount {
    // `Snapshot` and `Clone` mount the staged copy (`crate::staging`), read-only unless
    // `pvcPublicationReadOnly: false` is acknowledged.
    let p = &policy.spec;
    match p.copy_method {
        CopyMethod::Direct => {
            PvcMount { claim_name: recipe.pvc.clone(), mount_path: SOURCE_MOUNT.into(), read_only: recipe.read_only }
        }
        CopyMethod::Snapshot | CopyMethod::Clone => PvcMount {
            claim_name: crate::staging::staged_name(&snap.uid().unwrap_or_default()),
            mount_path: SOURCE_MOUNT.into(),
            read_only: recipe.publish_read_only,
        },
    }
}

/// The batch delete Job for one `BatchSpec` of the dispatcher: one connect, then
/// `snapshot delete` over the member ids in chunks. No TTL: the dispatcher reaps it once every
/// member's finalizer has drained (a Complete Job listing a member is what releases it).
pub fn batch_delete_job(
    spec: &crate::deletion::batch::BatchSpec,
    repo: &RepoView,
    config: &crate::config::Config,
) -> Result<Job, BuildError> {
    let repo_uid = repo.uid();
    let ns = repo.home_namespace(&config.namespace);
    let mounts = backend_mounts(repo, &ns, config)?;
    let chunk_size = spec.chunks.iter().map(Vec::len).max().unwrap_or(50).max(1);
    let work = WorkSpec {
        schema_version: SCHEMA_VERSION,
        target_ref: TargetRef {
            api_version: names::API_VERSION.into(),
            kind: repo.kind().to_string(),
            namespace: repo.namespace(),
            name: repo.name(),
            uid: repo_uid.clone(),
        },
        repository: repository_info(repo, repo.ops_identity(), &mounts).map_err(BuildError::Invalid)?,
        command_timeout_seconds: DEFAULT_COMMAND_TIMEOUT_SECONDS,
        heartbeat_seconds: DEFAULT_HEARTBEAT_SECONDS,
        connect_timeout_seconds: None,
        operation: Operation::SnapshotDeleteBatch(SnapshotDeleteBatchOp {
            members: spec
                .members
                .iter()
                .map(|m| DeleteMember {
                    uid: m.uid.clone(),
                    snapshot_id: m.snapshot_id.clone(),
                    source: m.source.clone(),
                })
                .collect(),
            chunk_size,
            chunk_timeout_seconds: 300,
        }),
    };
    let (password, env_from) = secrets(repo);
    let owner = match repo {
        RepoView::Namespaced(r) => owner_of(r.as_ref()),
        RepoView::Cluster(c) => owner_of(c.as_ref()),
    };
    let input = JobInput {
        delete_repo_uid: Some(repo_uid),
        annotations: BTreeMap::from([(annotation::DELETE_MEMBERS.to_string(), spec.members_annotation())]),
        // Drained batches are reaped by the controller, not by a TTL.
        ttl_seconds_after_finished: None,
        // The shared backoff and 48 h backstop (docs/design/architecture.md §1.4 defaults): a batch has no
        // failurePolicy of its own.
        ..crate::mover_job::input(
            config,
            crate::mover_job::Identity {
                name: spec.name.clone(),
                namespace: ns,
                owner,
                work_spec: work,
                password,
                env_from_secrets: env_from,
            },
            &mounts,
            None,
        )
    };
    let mut input = input;
    // Only the repository configures a batch delete; it never gets a TTL (its dispatcher reaps it).
    crate::mover_settings::resolve(
        repo.common().mover_defaults.as_ref(),
        None,
        crate::mover_settings::MoverOp::Other,
        false,
    )
    .map_err(BuildError::Refused)?
    .apply(&mut input, false);
    build_job(&input).map_err(|e| BuildError::Invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mover_settings::MoverFacts;

    fn policy(status: serde_json::Value) -> SnapshotPolicy {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotPolicy",
            "metadata": {"name": "p", "namespace": "apps"},
            "spec": {"repository": {"name": "r"}, "copyMethod": "Direct",
                     "identity": {"hostname": "elsewhere"},
                     "sources": [{"pvc": {"name": "data"}, "sourcePathOverride": "/new"}]},
            "status": status
        }))
        .unwrap()
    }

    fn snap() -> Snapshot {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": "s", "namespace": "apps"},
            "spec": {"policyRef": {"name": "p"}}
        }))
        .unwrap()
    }

    #[test]
    fn a_run_writes_under_the_pinned_identity_and_path_not_the_edited_spec() {
        let pinned = policy(serde_json::json!({"resolved": {
            "identity": {"username": "p", "hostname": "apps"},
            "sources": [{"pvc": "apps/data", "sourcePath": "/pvc/data"}]}}));
        let r = recipe(&snap(), &pinned).unwrap();
        assert_eq!((r.identity.username.as_str(), r.identity.hostname.as_str()), ("p", "apps"));
        assert_eq!(r.identity.source_path.as_deref(), Some("/pvc/data"));
    }

    #[test]
    fn before_the_policy_pins_anything_the_spec_decides() {
        let r = recipe(&snap(), &policy(serde_json::json!({}))).unwrap();
        assert_eq!(r.identity.hostname, "elsewhere");
        assert_eq!(r.identity.source_path.as_deref(), Some("/new"));
    }

    /// One row per mover setting of docs/design/api-contract.md §2.6: the repository's `moverDefaults`, the
    /// policy's `mover` and the cluster facts go in, and the backup Job's pod spec must show the
    /// documented effect (merge order: hardened base < moverDefaults < inherited < recipe).
    #[test]
    fn every_mover_setting_reaches_the_pod_spec_in_merge_order() {
        use crate::mover_pods::Inherited;
        use k8s_openapi::api::core::v1::PodSpec;
        use serde_json::json;
        type Check = fn(&PodSpec, &k8s_openapi::api::batch::v1::JobSpec);
        let inherited = MoverFacts {
            inherited: Some(Ok(Inherited {
                from: "pod db-0, container db".into(),
                run_as_user: 999,
                run_as_group: Some(998),
                fs_group: Some(997),
                supplemental_groups: Some(vec![5]),
            })),
            ..Default::default()
        };
        let on_node = MoverFacts { colocate_node: Some("node-a".into()), ..Default::default() };
        let rows: Vec<(&str, serde_json::Value, serde_json::Value, MoverFacts, Check)> = vec![
            (
                "inherited identity over the defaults, under the recipe",
                json!({"securityContext": {"runAsUser": 1234}, "podSecurityContext": {"fsGroup": 2000}}),
                json!({"inheritSecurityContextFrom": {"workloadSelector": {"podSelector": {"matchLabels": {"app": "db"}}}},
                       "securityContext": {"runAsGroup": 5}}),
                inherited.clone(),
                |p, _| {
                    let sc = p.containers[0].security_context.clone().unwrap();
                    assert_eq!((sc.run_as_user, sc.run_as_group), (Some(999), Some(5)));
                    let ps = p.security_context.clone().unwrap();
                    assert_eq!((ps.fs_group, ps.supplemental_groups.clone()), (Some(997), Some(vec![5])));
                },
            ),
            (
                "cache: capacity gives an ephemeral volume; sizes are kopia's",
                json!({"cache": {"capacity": "2Gi", "storageClassName": "fast", "contentCacheSizeMb": 100}}),
                json!({"cache": {"metadataCacheSizeMb": 50}}),
                MoverFacts::default(),
                |p, _| {
                    let v =
                        p.volumes.iter().flatten().find(|v| v.ephemeral.is_some()).expect("an ephemeral cache volume");
                    let t = v.ephemeral.clone().unwrap().volume_claim_template.unwrap().spec;
                    assert_eq!(t.storage_class_name.as_deref(), Some("fast"));
                    assert_eq!(t.resources.unwrap().requests.unwrap()["storage"].0, "2Gi");
                    let ws = p.containers[0]
                        .env
                        .iter()
                        .flatten()
                        .find(|e| e.name == "KOPIUR_WORK_SPEC")
                        .and_then(|e| e.value.clone())
                        .expect("work spec env");
                    let ws: serde_json::Value = serde_json::from_str(&ws).unwrap();
                    assert_eq!(ws["repository"]["cache"]["contentMb"], 100);
                    assert_eq!(ws["repository"]["cache"]["metadataMb"], 50);
                },
            ),
            (
                "cache Persistent: the policy's own PVC, reused by its backups",
                json!({"cache": {"mode": "Persistent", "capacity": "1Gi"}}),
                json!(null),
                MoverFacts {
                    cache_claim: Some(crate::mover_settings::CacheClaim {
                        name: crate::mover_settings::cache_claim_name("p"),
                        owner: Default::default(),
                    }),
                    ..Default::default()
                },
                |p, _| {
                    let v = p.volumes.iter().flatten().find(|v| v.name == "kopia-cache").unwrap();
                    assert_eq!(
                        v.persistent_volume_claim.as_ref().map(|c| c.claim_name.as_str()),
                        Some("p-kopia-cache")
                    );
                },
            ),
            (
                "sourceColocation Required joins the user's required terms",
                json!({"sourceColocation": {"mode": "Required"},
                       "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                           {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}}),
                json!(null),
                on_node.clone(),
                |p, _| {
                    let t = crate::mover_rows::required_terms(p);
                    assert_eq!(t[0].match_expressions.clone().unwrap()[0].key, "zone");
                    assert_eq!(t[0].match_fields.clone().unwrap()[0].values, Some(vec!["node-a".to_string()]));
                },
            ),
            ("sourceColocation Auto prefers the node", json!(null), json!(null), on_node.clone(), |p, _| {
                let pref = p
                    .affinity
                    .clone()
                    .unwrap()
                    .node_affinity
                    .unwrap()
                    .preferred_during_scheduling_ignored_during_execution
                    .unwrap();
                assert_eq!(
                    (pref[0].weight, pref[0].preference.match_fields.clone().unwrap()[0].key.as_str()),
                    (100, "metadata.name")
                );
            }),
            (
                "privilegedMode in an opted-in namespace: root with DAC_READ_SEARCH only",
                json!(null),
                json!({"privilegedMode": true}),
                MoverFacts { privileged_permitted: true, ..Default::default() },
                |p, _| {
                    let sc = p.containers[0].security_context.clone().unwrap();
                    assert_eq!((sc.run_as_user, sc.run_as_non_root), (Some(0), Some(false)));
                    assert_eq!(sc.capabilities.unwrap().add, Some(vec!["DAC_READ_SEARCH".to_string()]));
                },
            ),
        ];
        let config = crate::config::Config::from_env();
        for (name, defaults, mover, facts, check) in rows {
            let (pod, js) = built_with(name, defaults, mover, &facts, &config);
            check(&pod, &js);
        }
    }

    /// The shared mover-settings table (`crate::mover_rows`) holds for the backup Job too.
    #[test]
    fn the_backup_job_follows_the_shared_mover_table() {
        let config = crate::config::Config::from_env();
        for (name, defaults, mover, check) in crate::mover_rows::rows() {
            let (pod, js) = built_with(name, defaults, mover, &MoverFacts::default(), &config);
            check(&pod, &js);
        }
    }

    /// The backup Job's pod and Job spec over a repository with `moverDefaults` `defaults` and a
    /// policy with `mover` (each unless null).
    fn built_with(
        name: &str,
        defaults: serde_json::Value,
        mover: serde_json::Value,
        facts: &MoverFacts,
        config: &crate::config::Config,
    ) -> (k8s_openapi::api::core::v1::PodSpec, k8s_openapi::api::batch::v1::JobSpec) {
        let mut repo = serde_json::json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
            "metadata": {"name": "r", "namespace": "apps", "uid": "u-r"},
            "spec": {"backend": {"filesystem": {"path": "/repo"}},
                     "encryption": {"passwordSecretRef": {"name": "pw", "key": "password"}}}
        });
        if !defaults.is_null() {
            repo["spec"]["moverDefaults"] = defaults;
        }
        let repo: kopiur_api::Repository = serde_json::from_value(repo).unwrap();
        let mut p = policy(serde_json::json!({}));
        if !mover.is_null() {
            p.spec.mover = Some(serde_json::from_value(mover).unwrap());
        }
        let r = recipe(&snap(), &p).unwrap();
        let rv = RepoView::Namespaced(std::sync::Arc::new(repo));
        let built = backup_job(&snap(), &p, &r, &rv, config, facts).unwrap_or_else(|e| panic!("{name}: {e}"));
        let js = built.job.spec.clone().unwrap();
        (js.template.spec.clone().unwrap(), js)
    }

    /// docs/design/architecture.md §1.4: every Job kind, the batch delete included, carries the 48 h backstop
    /// deadline and the default backoff; the batch has no TTL (it is reaped by the dispatcher).
    #[test]
    fn the_batch_delete_job_has_the_shared_backstop_deadline() {
        let repo: kopiur_api::Repository = serde_json::from_value(serde_json::json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
            "metadata": {"name": "r", "namespace": "apps", "uid": "u-r"},
            "spec": {"backend": {"filesystem": {"path": "/repo"}},
                     "encryption": {"passwordSecretRef": {"name": "pw", "key": "password"}}}
        }))
        .unwrap();
        let spec = crate::deletion::batch::BatchSpec {
            name: "snapdel-0123456789".into(),
            repo_uid: "u-r".into(),
            members: vec![],
            chunks: vec![vec!["0123456789abcdef0123456789abcdef".into()]],
        };
        let rv = RepoView::Namespaced(std::sync::Arc::new(repo));
        let job = batch_delete_job(&spec, &rv, &crate::config::Config::from_env()).unwrap();
        let js = job.spec.unwrap();
        assert_eq!(js.active_deadline_seconds, Some(172_800));
        assert_eq!(js.backoff_limit, Some(kopiur_mover::job::DEFAULT_BACKOFF_LIMIT));
        assert_eq!(js.ttl_seconds_after_finished, None);
    }

    /// Issue 31: a backup run may write one thing, its own Snapshot's status, through a Role
    /// named after and owned by its Job; a batch delete (which reports by its exit) gets none.
    #[test]
    fn a_run_role_grants_only_its_own_target_status() {
        let repo: kopiur_api::Repository = serde_json::from_value(serde_json::json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
            "metadata": {"name": "r", "namespace": "apps", "uid": "u-r"},
            "spec": {"backend": {"filesystem": {"path": "/repo"}},
                     "encryption": {"passwordSecretRef": {"name": "pw", "key": "password"}}}
        }))
        .unwrap();
        let rv = RepoView::Namespaced(std::sync::Arc::new(repo));
        let config = crate::config::Config::from_env();
        let p = policy(serde_json::json!({}));
        let r = recipe(&snap(), &p).unwrap();
        let mut job = backup_job(&snap(), &p, &r, &rv, &config, &MoverFacts::default()).unwrap().job;
        assert!(crate::mover_rbac::run_role(&job).is_none(), "no Role before the Job has a uid to own it");
        job.metadata.uid = Some("u-job".into());
        job.metadata.namespace = Some(snap().metadata.namespace.unwrap());
        let (role, binding) = crate::mover_rbac::run_role(&job).expect("a backup writes its Snapshot status");
        let name = job.metadata.name.clone().unwrap();
        assert_eq!(role.metadata.name.as_deref(), Some(name.as_str()));
        let owner = &role.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str(), owner.controller), ("Job", "u-job", Some(true)));
        let rules = role.rules.unwrap();
        assert_eq!(rules.len(), 1, "{rules:?}");
        assert_eq!(rules[0].api_groups, Some(vec!["kopiur.home-operations.com".to_string()]));
        assert_eq!(rules[0].resources, Some(vec!["snapshots/status".to_string()]));
        assert_eq!(rules[0].resource_names, Some(vec![snap().metadata.name.unwrap()]));
        assert_eq!(rules[0].verbs, vec!["get".to_string(), "patch".to_string()]);
        assert_eq!((binding.role_ref.kind.as_str(), binding.role_ref.name.as_str()), ("Role", name.as_str()));
        let subject = &binding.subjects.unwrap()[0];
        assert_eq!(subject.name, crate::identity::MOVER_SERVICE_ACCOUNT);

        let spec = crate::deletion::batch::BatchSpec {
            name: "snapdel-0123456789".into(),
            repo_uid: "u-r".into(),
            members: vec![],
            chunks: vec![vec!["0123456789abcdef0123456789abcdef".into()]],
        };
        let mut batch = batch_delete_job(&spec, &rv, &config).unwrap();
        batch.metadata.uid = Some("u-batch".into());
        batch.metadata.namespace = Some("apps".into());
        assert!(crate::mover_rbac::run_role(&batch).is_none(), "a batch delete writes nothing through the API");
    }

    fn work_spec(job: &Job) -> serde_json::Value {
        let env = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0].env.clone().unwrap();
        let ws = env.iter().find(|e| e.name == "KOPIUR_WORK_SPEC").and_then(|e| e.value.clone()).unwrap();
        serde_json::from_str(&ws).unwrap()
    }

    /// docs/design/mover.md §2.2: the batch delete connects as `kopiur-ops` at the repository's
    /// lease host (`kopiur.<ns>.<name>`, `kopiur.clusterrepository.<name>`), never `@kopiur`.
    #[test]
    fn the_batch_delete_connects_as_kopiur_ops_at_the_lease_host() {
        let spec = crate::deletion::batch::BatchSpec {
            name: "snapdel-0123456789".into(),
            repo_uid: "u-r".into(),
            members: vec![],
            chunks: vec![vec!["0123456789abcdef0123456789abcdef".into()]],
        };
        let backend = serde_json::json!({"backend": {"filesystem": {"path": "/repo"}},
                                         "encryption": {"passwordSecretRef": {"name": "pw", "key": "password"}}});
        let ns: kopiur_api::Repository = serde_json::from_value(serde_json::json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
            "metadata": {"name": "nas", "namespace": "media", "uid": "u-r"}, "spec": backend
        }))
        .unwrap();
        let cluster: kopiur_api::ClusterRepository = serde_json::from_value(serde_json::json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "ClusterRepository",
            "metadata": {"name": "Shared", "uid": "u-c"},
            "spec": {"allowedNamespaces": {"all": true}, "backend": backend["backend"], "encryption": backend["encryption"]}
        }))
        .unwrap();
        let config = crate::config::Config::from_env();
        for (rv, host) in [
            (RepoView::Namespaced(std::sync::Arc::new(ns)), "kopiur.media.nas"),
            (RepoView::Cluster(std::sync::Arc::new(cluster)), "kopiur.clusterrepository.shared"),
        ] {
            let ws = work_spec(&batch_delete_job(&spec, &rv, &config).unwrap());
            assert_eq!(
                ws["repository"]["clientIdentity"],
                serde_json::json!({"username": "kopiur-ops", "hostname": host})
            );
            assert!(ws["operation"]["SnapshotDeleteBatch"].is_object());
        }
    }
}
