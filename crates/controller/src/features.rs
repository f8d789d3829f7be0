//! [next] fields before they are implemented (docs/design/api-contract.md §1.9), detected in one place.
//!
//! Each kind's function returns the [next] fields a spec sets, split by class:
//! - **gating**: the field's effective value needs behaviour this release lacks. The owner gets
//!   `Ready=False`, `Stalled=True`, reason `FeatureNotImplemented`, a message naming the JSON
//!   path (`spec.backend.gcs is not implemented in this release`), and no Job.
//! - **advisory** (the documented list only): ignoring the field skips an optional extra or
//!   keeps more data. The object works and carries `FeaturesIgnored=True`, reason
//!   `NotImplemented`, with a message listing the paths; one Warning Event per generation.
//!
//! A value that does not matter in context is inert and reported by neither list
//! (`deletion.onPolicyDelete: Retain`, `credentialProjection.enabled: false`, an empty
//! `extraArgs`). Some gating fields are refused where they are resolved instead: source kinds
//! in `snapshot_policy::sources`, restore targets in `restore::plan`, mover inheritance in
//! `mover_settings`, a replication destination's backend in `replication::reconcile`.
//! `tests/no_inert_field.rs` walks every CRD leaf against `crate::field_registry`.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kopiur_api::cluster_repository::ClusterRepositorySpec;
use kopiur_api::maintenance::MaintenanceSpec;
use kopiur_api::names::{condition, reason};
use kopiur_api::repository::RepositoryCommonSpec;
use kopiur_api::restore::RestoreSpec;
use kopiur_api::shared::Backend;
use kopiur_api::shared::backend::FilesystemVolume;
use kopiur_api::snapshot::SnapshotSpec;
use kopiur_api::snapshot_policy::{CopyMethod, GroupBy, OnPolicyDelete, PolicyTarget, SnapshotPolicySpec};

use crate::conditions::{Cond, CondStatus};

pub const FEATURES_IGNORED: &str = condition::FEATURES_IGNORED;
pub const NOT_IMPLEMENTED: &str = reason::NOT_IMPLEMENTED;
pub const FEATURE_NOT_IMPLEMENTED: &str = reason::FEATURE_NOT_IMPLEMENTED;

/// One gating field: its JSON path and the refusal message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gated {
    pub path: String,
    pub message: String,
}

impl Gated {
    fn new(path: impl Into<String>) -> Gated {
        let path = path.into();
        let message = format!("{path} is not implemented in this release");
        Gated { path, message }
    }
}

/// The [next] fields one spec sets (module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NextFields {
    pub advisory: Vec<String>,
    pub gating: Vec<Gated>,
}

impl NextFields {
    /// The `FeatureNotImplemented` message, when a gating field is set.
    pub fn gating_message(&self) -> Option<String> {
        (!self.gating.is_empty()).then(|| self.gating.iter().map(|g| g.message.as_str()).collect::<Vec<_>>().join("; "))
    }

    /// `Err(message)` when a gating field is set.
    pub fn refusal(&self) -> Result<(), String> {
        match self.gating_message() {
            Some(m) => Err(m),
            None => Ok(()),
        }
    }

    /// The `FeaturesIgnored` message, when an advisory field is set.
    pub fn advisory_message(&self) -> Option<String> {
        match self.advisory.as_slice() {
            [] => None,
            [one] => Some(format!("{one} is not implemented in this release and is ignored")),
            many => Some(format!("{} are not implemented in this release and are ignored", many.join(", "))),
        }
    }

    /// `FeaturesIgnored=True / NotImplemented`, when an advisory field is set.
    pub fn advisory_condition(&self) -> Option<Cond> {
        self.advisory_message().map(|message| Cond {
            type_: FEATURES_IGNORED,
            status: CondStatus::True,
            reason: NOT_IMPLEMENTED.into(),
            message,
        })
    }

    /// The note of the one Warning Event per generation: Some when advisory fields are set and
    /// the stored conditions do not yet report them for `generation`.
    pub fn advisory_event(&self, stored: &[Condition], generation: i64) -> Option<String> {
        let message = self.advisory_message()?;
        let reported = stored.iter().any(|c| {
            c.type_ == FEATURES_IGNORED
                && c.status == "True"
                && c.observed_generation == Some(generation)
                && c.message == message
        });
        (!reported).then_some(message)
    }

    /// The conditions `Ready=False`, `Reconciling=False`, `Stalled=True`, reason
    /// `FeatureNotImplemented`, when a gating field is set.
    pub fn gating_conditions(&self) -> Option<Vec<Cond>> {
        let m = self.gating_message()?;
        let c = |type_: &'static str, status, message: &str| Cond {
            type_,
            status,
            reason: FEATURE_NOT_IMPLEMENTED.into(),
            message: message.to_string(),
        };
        Some(vec![
            c("Ready", CondStatus::False, &m),
            c(condition::RECONCILING, CondStatus::False, ""),
            c(condition::STALLED, CondStatus::True, &m),
        ])
    }
}

/// `FeaturesIgnored` is present only while it applies: a stored one is dropped when the
/// desired conditions no longer carry it (condition merging keeps unknown types).
pub fn drop_stale_features_ignored(conditions: &mut Vec<Condition>, desired: &[Cond]) {
    if !desired.iter().any(|d| d.type_ == FEATURES_IGNORED) {
        conditions.retain(|c| c.type_ != FEATURES_IGNORED);
    }
}

/// Gating fields of a backend union at `prefix` (`spec.backend`, `spec.destination`): every
/// key but `s3` and `filesystem`, S3 workload identity, and the NFS filesystem volume.
pub fn backend(prefix: &str, b: &Backend, gating: &mut Vec<Gated>) {
    match b {
        Backend::S3(s) => {
            if s.auth.as_ref().is_some_and(|a| a.workload_identity.is_some()) {
                gating.push(Gated::new(format!("{prefix}.s3.auth.workloadIdentity")));
            }
        }
        Backend::Filesystem(f) => {
            if matches!(f.volume, Some(FilesystemVolume::Nfs(_))) {
                gating.push(Gated::new(format!("{prefix}.filesystem.volume.nfs")));
            }
        }
        Backend::Azure(_)
        | Backend::Gcs(_)
        | Backend::B2(_)
        | Backend::Sftp(_)
        | Backend::WebDav(_)
        | Backend::Rclone(_)
        | Backend::Gdrive(_) => gating.push(Gated::new(format!("{prefix}.{}", b.key()))),
    }
}

/// Repository and ClusterRepository (the shared spec).
pub fn repository(spec: &RepositoryCommonSpec) -> NextFields {
    let mut n = NextFields::default();
    backend("spec.backend", &spec.backend, &mut n.gating);
    if spec.seed.is_some() {
        n.gating.push(Gated::new("spec.seed"));
    }
    if spec.identity_defaults.is_some() {
        n.gating.push(Gated::new("spec.identityDefaults"));
    }
    if let Some(p) = &spec.parameters {
        if p.blob_retention.is_some() {
            n.gating.push(Gated::new("spec.parameters.blobRetention"));
        }
        if p.epoch.is_some() {
            n.advisory.push("spec.parameters.epoch".into());
        }
    }
    if spec.server.is_some() {
        n.advisory.push("spec.server".into());
    }
    if spec.concurrency.is_some() {
        n.advisory.push("spec.concurrency".into());
    }
    if spec.schedule_defaults.as_ref().is_some_and(|s| s.jitter.is_some()) {
        n.advisory.push("spec.scheduleDefaults.jitter".into());
    }
    // `moverDefaults.sourceColocation` is implemented (`mover_settings`), so not listed.
    if let Some(m) = &spec.mover_defaults {
        let set = [
            ("throttle", m.throttle.is_some()),
            ("scratch", m.scratch.is_some()),
            ("podLabels", m.pod_labels.is_some()),
            ("podAnnotations", m.pod_annotations.is_some()),
        ];
        for (field, is_set) in set {
            if is_set {
                n.advisory.push(format!("spec.moverDefaults.{field}"));
            }
        }
    }
    if let Some(c) = &spec.catalog {
        if c.adoption.is_some() {
            n.advisory.push("spec.catalog.adoption".into());
        }
        if c.foreign_snapshots.is_some() {
            n.advisory.push("spec.catalog.foreignSnapshots".into());
        }
    }
    n
}

/// ClusterRepository: the shared spec plus the owner's side of credential projection.
pub fn cluster_repository(spec: &ClusterRepositorySpec) -> NextFields {
    let mut n = repository(&spec.common);
    if spec.credential_projection.as_ref().is_some_and(|c| c.allowed) {
        n.gating.push(Gated::new("spec.credentialProjection.allowed"));
    }
    n
}

/// SnapshotPolicy. Source kinds are refused by `snapshot_policy::sources`.
pub fn snapshot_policy(spec: &SnapshotPolicySpec) -> NextFields {
    let mut n = NextFields::default();
    // `Snapshot` and `Clone` stage a copy through the CSI driver (`crate::staging`); a cluster
    // without one fails each run with the reason, never silently falls back to `Direct`.
    if spec.copy_method == CopyMethod::Snapshot
        && spec.group_by == GroupBy::VolumeGroupSnapshot
        && spec.sources.len() > 1
    {
        n.gating.push(Gated {
            path: "spec.groupBy".into(),
            message: "spec.groupBy: VolumeGroupSnapshot (the default) over several sources is not implemented in this release; set groupBy: None to snapshot each source on its own".into(),
        });
    }
    if spec.copy_method != CopyMethod::Direct {
        for (i, s) in spec.sources.iter().enumerate() {
            if s.pvc_publication_read_only == Some(false) && s.acknowledge_read_write_publication != Some(true) {
                n.gating.push(Gated {
                    path: format!("spec.sources[{i}].pvcPublicationReadOnly"),
                    message: format!(
                        "spec.sources[{i}].pvcPublicationReadOnly: false publishes the staged copy read-write; set acknowledgeReadWritePublication: true to allow it"
                    ),
                });
            }
        }
    }
    if matches!(spec.target, PolicyTarget::Repositories(_)) {
        n.gating.push(Gated::new("spec.repositories"));
    }
    if spec.extra_args.as_ref().is_some_and(|a| !a.is_empty()) {
        n.gating.push(Gated::new("spec.extraArgs"));
    }
    if let Some(h) = &spec.hooks {
        let any = |l: &Option<Vec<_>>| l.as_ref().is_some_and(|l| !l.is_empty());
        if any(&h.before_snapshot) || any(&h.after_snapshot) {
            n.gating.push(Gated::new("spec.hooks"));
        }
    }
    if spec.credential_projection.as_ref().is_some_and(|c| c.enabled) {
        n.gating.push(Gated::new("spec.credentialProjection.enabled"));
    }
    if spec.verification.is_some() {
        n.advisory.push("spec.verification".into());
    }
    if spec.adoption.is_some() {
        n.advisory.push("spec.adoption".into());
    }
    if spec.deletion.on_policy_delete == OnPolicyDelete::Delete {
        n.advisory.push("spec.deletion.onPolicyDelete".into());
    }
    n
}

/// Snapshot: a volume-group member needs group snapshots.
pub fn snapshot(spec: &SnapshotSpec) -> NextFields {
    let mut n = NextFields::default();
    if spec.source.as_ref().is_some_and(|s| s.group.is_some()) {
        n.gating.push(Gated::new("spec.source.group"));
    }
    n
}

/// Restore. Its [next] targets are refused by `restore::plan`.
pub fn restore(spec: &RestoreSpec) -> NextFields {
    let mut n = NextFields::default();
    if spec.credential_projection.as_ref().is_some_and(|c| c.enabled) {
        n.gating.push(Gated::new("spec.credentialProjection.enabled"));
    }
    n
}

/// Maintenance.
pub fn maintenance(spec: &MaintenanceSpec) -> NextFields {
    let mut n = NextFields::default();
    if spec.credential_projection.as_ref().is_some_and(|c| c.enabled) {
        n.gating.push(Gated::new("spec.credentialProjection.enabled"));
    }
    n
}

/// A Snapshot cannot run while its policy or itself sets a gating field: `Err(message)`.
pub fn snapshot_refusal(snap: &SnapshotSpec, policy: &SnapshotPolicySpec) -> Result<(), String> {
    snapshot(snap).refusal()?;
    snapshot_policy(policy).refusal().map_err(|m| format!("its SnapshotPolicy: {m}"))
}

/// X rule `CrossNamespaceReference` (docs/design/api-contract.md §1.8): a Snapshot's or SnapshotSchedule's
/// `policyRef.namespace` must be its own namespace (or absent). Some(message) when it is not.
pub fn policy_ref_namespace(kind: &str, own: &str, namespace: Option<&str>) -> Option<String> {
    let n = namespace.filter(|n| *n != own)?;
    Some(format!(
        "spec.policyRef.namespace is {n}, but a {kind} uses only a SnapshotPolicy of its own namespace {own}; \
         remove the namespace or create the {kind} in {n}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kopiur_api::{ClusterRepository, Maintenance, Repository, Restore, Snapshot, SnapshotPolicy};
    use serde_json::{Value, json};

    fn repo(spec: Value) -> RepositoryCommonSpec {
        let mut base =
            json!({"backend": {"s3": {"bucket": "bkt"}}, "encryption": {"passwordSecretRef": {"name": "pw"}}});
        merge(&mut base, spec);
        let r: Repository =
            serde_json::from_value(json!({"apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
                "metadata": {"name": "r", "namespace": "n"}, "spec": base}))
            .unwrap();
        r.spec.common
    }

    fn merge(a: &mut Value, b: Value) {
        match (a, b) {
            (Value::Object(a), Value::Object(b)) => {
                // JSON merge patch: null removes the key.
                for (k, v) in b {
                    if v.is_null() {
                        a.remove(&k);
                    } else {
                        merge(a.entry(k).or_insert(Value::Null), v);
                    }
                }
            }
            (a, b) => *a = b,
        }
    }

    fn paths(g: &[Gated]) -> Vec<&str> {
        g.iter().map(|g| g.path.as_str()).collect()
    }

    fn policy(spec: Value) -> SnapshotPolicySpec {
        let mut base =
            json!({"repository": {"name": "r"}, "copyMethod": "Direct", "sources": [{"pvc": {"name": "d"}}]});
        merge(&mut base, spec);
        let p: SnapshotPolicy = serde_json::from_value(
            json!({"apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotPolicy",
                "metadata": {"name": "p", "namespace": "n"}, "spec": base}),
        )
        .unwrap();
        p.spec
    }

    #[test]
    fn a_core_repository_sets_nothing() {
        let n = repository(&repo(json!({"backend": {"s3": {"bucket": "bkt", "auth": {"secretRef": {"name": "s"}},
            "tls": {"caBundleRef": {"configMapName": "ca"}}}}, "moverDefaults": {"nodeSelector": {"a": "b"}},
            "scheduleDefaults": {"timezone": "UTC"}, "catalog": {"periodicRefresh": true}})));
        assert_eq!(n, NextFields::default());
        assert_eq!(n.refusal(), Ok(()));
        assert_eq!(n.advisory_condition(), None);
        assert_eq!(n.gating_conditions(), None);
    }

    #[test]
    fn every_next_backend_and_workload_identity_gate() {
        for (b, path) in [
            (json!({"gcs": {"bucket": "b"}}), "spec.backend.gcs"),
            (json!({"azure": {"container": "c"}}), "spec.backend.azure"),
            (json!({"b2": {"bucket": "b"}}), "spec.backend.b2"),
            (json!({"sftp": {"host": "h", "path": "/p"}}), "spec.backend.sftp"),
            (json!({"webDav": {"url": "https://x"}}), "spec.backend.webDav"),
            (json!({"rclone": {"remotePath": "r:p"}}), "spec.backend.rclone"),
            (json!({"gdrive": {"folderId": "f"}}), "spec.backend.gdrive"),
            (
                json!({"s3": {"bucket": "bkt", "auth": {"workloadIdentity": {"serviceAccountName": "sa"}}}}),
                "spec.backend.s3.auth.workloadIdentity",
            ),
            (
                json!({"filesystem": {"path": "/r", "volume": {"nfs": {"server": "s", "path": "/e"}}}}),
                "spec.backend.filesystem.volume.nfs",
            ),
        ] {
            let mut spec = repo(json!({}));
            spec.backend = serde_json::from_value(b).unwrap();
            let n = repository(&spec);
            assert_eq!(paths(&n.gating), [path]);
            assert_eq!(n.refusal(), Err(format!("{path} is not implemented in this release")));
            let conds = n.gating_conditions().unwrap();
            assert_eq!(
                conds.iter().map(|c| (c.type_, c.status)).collect::<Vec<_>>(),
                [("Ready", CondStatus::False), ("Reconciling", CondStatus::False), ("Stalled", CondStatus::True)]
            );
            assert!(conds.iter().all(|c| c.reason == "FeatureNotImplemented"));
        }
        let fs = repository(&repo(
            json!({"backend": {"s3": null, "filesystem": {"path": "/r", "volume": {"pvc": {"name": "v"}}}}}),
        ));
        assert!(fs.gating.is_empty(), "a PVC volume is core: {fs:?}");
    }

    #[test]
    fn repository_gating_and_advisory_fields() {
        let n = repository(&repo(json!({
            "seed": {"from": {"repository": {"name": "o"}}},
            "identityDefaults": {"cluster": "c"},
            "parameters": {"blobRetention": {"disabled": true}, "epoch": {"minDuration": "1h"}},
            "server": {},
            "concurrency": {"maxConcurrentJobs": 1},
            "scheduleDefaults": {"jitter": "5m"},
            "moverDefaults": {"throttle": {"uploadBytesPerSecond": 1}, "scratch": {}, "sourceColocation": {"mode": "Auto"},
                "podLabels": {"a": "b"}, "podAnnotations": {"a": "b"}},
            "catalog": {"adoption": "Adopt", "foreignSnapshots": "Ignore"}
        })));
        assert_eq!(paths(&n.gating), ["spec.seed", "spec.identityDefaults", "spec.parameters.blobRetention"]);
        assert_eq!(
            n.advisory,
            [
                "spec.parameters.epoch",
                "spec.server",
                "spec.concurrency",
                "spec.scheduleDefaults.jitter",
                "spec.moverDefaults.throttle",
                "spec.moverDefaults.scratch",
                "spec.moverDefaults.podLabels",
                "spec.moverDefaults.podAnnotations",
                "spec.catalog.adoption",
                "spec.catalog.foreignSnapshots",
            ]
        );
        assert_eq!(
            n.gating_message().unwrap(),
            "spec.seed is not implemented in this release; spec.identityDefaults is not implemented in this release; \
             spec.parameters.blobRetention is not implemented in this release"
        );
    }

    #[test]
    fn advisory_condition_and_one_event_per_generation() {
        let n = repository(&repo(json!({"server": {}})));
        let c = n.advisory_condition().unwrap();
        assert_eq!((c.type_, c.status, c.reason.as_str()), ("FeaturesIgnored", CondStatus::True, "NotImplemented"));
        assert_eq!(c.message, "spec.server is not implemented in this release and is ignored");
        let two = repository(&repo(json!({"server": {}, "concurrency": {}})));
        assert_eq!(
            two.advisory_message().unwrap(),
            "spec.server, spec.concurrency are not implemented in this release and are ignored"
        );
        // Due on the first reconcile of a generation, not once the status reports it.
        assert_eq!(n.advisory_event(&[], 3).as_deref(), Some(c.message.as_str()));
        let stored = crate::conditions::merge_conditions(&[], std::slice::from_ref(&c), 3, chrono::Utc::now());
        assert_eq!(n.advisory_event(&stored, 3), None);
        assert!(n.advisory_event(&stored, 4).is_some(), "a new generation warns again");
        assert!(two.advisory_event(&stored, 3).is_some(), "a different set warns again");
        assert_eq!(NextFields::default().advisory_event(&[], 3), None);
        // Dropped once it no longer applies; kept while it does.
        let mut conds = stored.clone();
        drop_stale_features_ignored(&mut conds, &[c]);
        assert_eq!(conds.len(), 1);
        drop_stale_features_ignored(&mut conds, &[]);
        assert!(conds.is_empty());
    }

    #[test]
    fn cluster_repository_credential_projection() {
        let spec = |cp: Value| -> ClusterRepositorySpec {
            let c: ClusterRepository =
                serde_json::from_value(json!({"apiVersion": "kopiur.home-operations.com/v1alpha1",
                "kind": "ClusterRepository", "metadata": {"name": "c"}, "spec": {"backend": {"s3": {"bucket": "bkt"}},
                "encryption": {"passwordSecretRef": {"name": "pw"}}, "allowedNamespaces": {"all": true},
                "credentialProjection": cp}}))
                .unwrap();
            c.spec
        };
        assert_eq!(
            paths(&cluster_repository(&spec(json!({"allowed": true}))).gating),
            ["spec.credentialProjection.allowed"]
        );
        assert!(cluster_repository(&spec(json!({"allowed": false}))).gating.is_empty(), "false is inert");
    }

    #[test]
    fn policy_fields() {
        assert_eq!(snapshot_policy(&policy(json!({}))), NextFields::default());
        // Snapshot and Clone run (through CSI staging): nothing to refuse for one source.
        assert_eq!(snapshot_policy(&policy(json!({"copyMethod": "Snapshot"}))), NextFields::default());
        assert_eq!(snapshot_policy(&policy(json!({"copyMethod": "Clone"}))), NextFields::default());
        // A group snapshot over several sources is not built: refused, not silently ungrouped.
        let two = json!([{"pvc": {"name": "a"}}, {"pvc": {"name": "b"}}]);
        let n = snapshot_policy(&policy(json!({"copyMethod": "Snapshot", "sources": two})));
        assert_eq!(paths(&n.gating), ["spec.groupBy"]);
        assert!(n.refusal().unwrap_err().contains("set groupBy: None"));
        let n = snapshot_policy(&policy(json!({"copyMethod": "Snapshot", "groupBy": "None", "sources": two})));
        assert_eq!(n, NextFields::default());
        assert_eq!(snapshot_policy(&policy(json!({"copyMethod": "Clone", "sources": two}))), NextFields::default());
        // A read-write publication of the staged copy needs its acknowledgement.
        let rw = json!([{"pvc": {"name": "a"}, "pvcPublicationReadOnly": false}]);
        let n = snapshot_policy(&policy(json!({"copyMethod": "Clone", "sources": rw})));
        assert_eq!(paths(&n.gating), ["spec.sources[0].pvcPublicationReadOnly"]);
        let ack =
            json!([{"pvc": {"name": "a"}, "pvcPublicationReadOnly": false, "acknowledgeReadWritePublication": true}]);
        assert_eq!(snapshot_policy(&policy(json!({"copyMethod": "Clone", "sources": ack}))), NextFields::default());
        let n = snapshot_policy(&policy(json!({"repository": null, "repositories": [{"name": "a"}],
            "extraArgs": ["--x"], "hooks": {"beforeSnapshot": [{"httpRequest": {}}]},
            "credentialProjection": {"enabled": true}})));
        assert_eq!(
            paths(&n.gating),
            ["spec.repositories", "spec.extraArgs", "spec.hooks", "spec.credentialProjection.enabled"]
        );
        let inert =
            snapshot_policy(&policy(json!({"extraArgs": [], "hooks": {}, "credentialProjection": {"enabled": false},
            "deletion": {"onPolicyDelete": "Retain"}, "groupBy": "None"})));
        assert_eq!(inert, NextFields::default());
        let n = snapshot_policy(&policy(json!({"verification": {"quick": {}}, "adoption": "Adopt",
            "deletion": {"onPolicyDelete": "Delete"}})));
        assert!(n.gating.is_empty());
        assert_eq!(n.advisory, ["spec.verification", "spec.adoption", "spec.deletion.onPolicyDelete"]);
        assert_eq!(
            snapshot_policy(&policy(json!({"verification": {}}))).advisory_message().unwrap(),
            "spec.verification is not implemented in this release and is ignored"
        );
    }

    #[test]
    fn policy_ref_must_stay_in_the_namespace() {
        assert_eq!(policy_ref_namespace("Snapshot", "a", None), None);
        assert_eq!(policy_ref_namespace("Snapshot", "a", Some("a")), None);
        let m = policy_ref_namespace("SnapshotSchedule", "a", Some("b")).unwrap();
        assert!(m.starts_with("spec.policyRef.namespace is b, but a SnapshotSchedule uses only"), "{m}");
    }

    #[test]
    fn snapshot_restore_maintenance_fields() {
        let snap: Snapshot = serde_json::from_value(json!({"apiVersion": "kopiur.home-operations.com/v1alpha1",
            "kind": "Snapshot", "metadata": {"name": "s", "namespace": "n"}, "spec": {"policyRef": {"name": "p"},
            "source": {"sourceIndex": 0, "target": {"pvc": {"name": "d"}}, "group": "g"}}}))
        .unwrap();
        assert_eq!(paths(&snapshot(&snap.spec).gating), ["spec.source.group"]);
        assert_eq!(
            snapshot_refusal(&snap.spec, &policy(json!({}))),
            Err("spec.source.group is not implemented in this release".into())
        );
        let plain = SnapshotSpec::default();
        assert_eq!(snapshot_refusal(&plain, &policy(json!({}))), Ok(()));
        assert_eq!(
            snapshot_refusal(&plain, &policy(json!({"hooks": {"afterSnapshot": [{"runJob": {}}]}}))),
            Err("its SnapshotPolicy: spec.hooks is not implemented in this release".into())
        );
        let r: Restore = serde_json::from_value(json!({"apiVersion": "kopiur.home-operations.com/v1alpha1",
            "kind": "Restore", "metadata": {"name": "r", "namespace": "n"}, "spec": {"source": {"snapshotRef": {"name": "s"}},
            "target": {"pvcRef": {"name": "d"}}, "credentialProjection": {"enabled": true}}}))
        .unwrap();
        assert_eq!(paths(&restore(&r.spec).gating), ["spec.credentialProjection.enabled"]);
        let m: Maintenance = serde_json::from_value(json!({"apiVersion": "kopiur.home-operations.com/v1alpha1",
            "kind": "Maintenance", "metadata": {"name": "m", "namespace": "n"}, "spec": {"repository": {"name": "r"},
            "credentialProjection": {"enabled": false}}}))
        .unwrap();
        assert!(maintenance(&m.spec).gating.is_empty(), "enabled: false is inert");
    }
}
