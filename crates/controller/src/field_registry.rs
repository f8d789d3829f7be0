//! Every field of every CRD spec, classified (docs/design/api-contract.md §1.9, §15: no inert field).
//!
//! `tests/no_inert_field.rs` generates each CRD's `openAPIV3Schema`, enumerates every leaf of
//! `spec` (`spec.a.b`, `[]` for list items, `.*` for map values) and requires each leaf to be
//! covered by a rule here: the longest rule whose path equals the leaf or is a parent of it
//! (a rule on an embedded Kubernetes type such as `affinity` covers its whole subtree, which
//! is passed through verbatim). A leaf no rule covers fails the test with its path, so a field
//! added to the API without wiring fails until it is read, refused or listed as advisory.
//!
//! Every rule names its evidence: a file (from the workspace root) whose non-test part (the
//! text before its `#[cfg(test)] mod …`) must contain `symbol`, which the test checks. Rules that match no
//! leaf any more fail the test too.
use Class::*;

/// What the operator does with a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Read by the controller or the mover (`symbol` is the read).
    Read,
    /// Enforced at admission by a CEL rule in the CRD (`symbol` is the rule text); the field
    /// has no other effect (an acknowledgement).
    Admission,
    /// Refused when set (`symbol` is the refusal): Stalled with `FeatureNotImplemented` (or
    /// `CrossNamespaceReference`), no Job.
    Refused,
    /// [next] advisory (the documented list, docs/design/api-contract.md §1.9, docs/operations.md):
    /// `FeaturesIgnored=True / NotImplemented`, one Warning Event per generation.
    Advisory,
    /// [next] and without effect in this release because every value that would give it one
    /// is refused elsewhere (`symbol` is that refusal); e.g. `groupBy` only matters with a copy
    /// method other than `Direct`, which is refused.
    Inert,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub kinds: &'static [&'static str],
    /// `spec.…`; covers itself and everything below it.
    pub path: String,
    pub class: Class,
    pub file: &'static str,
    pub symbol: &'static str,
}

const REPOS: &[&str] = &["Repository", "ClusterRepository"];
const CLUSTER: &[&str] = &["ClusterRepository"];
const NAMESPACED_REPO: &[&str] = &["Repository"];
const POLICY: &[&str] = &["SnapshotPolicy"];
const SNAPSHOT: &[&str] = &["Snapshot"];
const SCHEDULE: &[&str] = &["SnapshotSchedule"];
const RESTORE: &[&str] = &["Restore"];
const MAINT: &[&str] = &["Maintenance"];
const REPL: &[&str] = &["RepositoryReplication"];
const SNAP_REPL: &[&str] = &["SnapshotReplication"];

const FEATURES: &str = "crates/controller/src/features.rs";
const SETTINGS: &str = "crates/controller/src/mover_settings.rs";
const REPO_APPLY: &str = "crates/controller/src/repository/apply.rs";
const REPO_OBSERVE: &str = "crates/controller/src/repository/observe.rs";
const REPO_NEXT: &str = "crates/controller/src/repository/next.rs";
const MOUNTS: &str = "crates/controller/src/mounts.rs";
const REPO_VIEW: &str = "crates/controller/src/repo_view.rs";
const CATALOG: &str = "crates/controller/src/repository/catalog.rs";
const PROJECTION: &str = "crates/controller/src/maintenance/projection.rs";
const MAINT_COMMON: &str = "crates/controller/src/scheduled_run/mod.rs";
/// The one mover `JobInput` builder: reads a kind's failurePolicy limits (`mover_job::input`).
const MOVER_JOB: &str = "crates/controller/src/mover_job.rs";
const MAINT_RECONCILE: &str = "crates/controller/src/maintenance/reconcile.rs";
const SNAP_JOB: &str = "crates/controller/src/snapshot/job.rs";
const SNAP_STAGE: &str = "crates/controller/src/snapshot/stage.rs";
const STAGING: &str = "crates/controller/src/staging.rs";
const SNAP_RECONCILE: &str = "crates/controller/src/snapshot/reconcile.rs";
const SNAP_OBSERVE: &str = "crates/controller/src/snapshot/observe.rs";
const SOURCES: &str = "crates/controller/src/policy_rules/sources.rs";
const POLICY_PLAN: &str = "crates/controller/src/snapshot_policy/plan.rs";
const SCHED_RECONCILE: &str = "crates/controller/src/snapshot_schedule/reconcile.rs";
const SCHED_OBSERVE: &str = "crates/controller/src/snapshot_schedule/observe.rs";
const SCHED_APPLY: &str = "crates/controller/src/snapshot_schedule/apply.rs";
const SCHED_PLAN: &str = "crates/controller/src/snapshot_schedule/plan.rs";
const RESTORE_RECONCILE: &str = "crates/controller/src/restore/reconcile.rs";
const RESTORE_OBSERVE: &str = "crates/controller/src/restore/observe.rs";
const REPL_RECONCILE: &str = "crates/controller/src/replication/reconcile.rs";
const API_REPOSITORY: &str = "crates/api/src/repository.rs";
const GATING: &str = "crates/controller/src/gating.rs";
const SNAP_REPL_GATE: &str = "crates/controller/src/snapshot_replication.rs";

fn rule(kinds: &'static [&'static str], path: &str, class: Class, file: &'static str, symbol: &'static str) -> Rule {
    Rule { kinds, path: path.to_string(), class, file, symbol }
}

/// A `MoverSpec` (a recipe's `mover`) at `p`.
fn mover_spec(out: &mut Vec<Rule>, kinds: &'static [&'static str], p: &str) {
    let r = |s: &str, class, file, symbol| rule(kinds, &format!("{p}.{s}"), class, file, symbol);
    out.extend([
        r("resources", Read, SETTINGS, "r.resources.clone()"),
        r("securityContext", Read, SETTINGS, "r.security_context.as_ref()"),
        r("podSecurityContext", Read, SETTINGS, "r.pod_security_context.as_ref()"),
        r("ttlSecondsAfterFinished", Read, SETTINGS, "r.ttl_seconds_after_finished"),
        r("privilegedMode", Read, SETTINGS, "r.privileged_mode"),
        r("inheritSecurityContextFrom", Read, SETTINGS, "inherit_security_context_from"),
    ]);
    cache(out, kinds, &format!("{p}.cache"));
}

fn cache(out: &mut Vec<Rule>, kinds: &'static [&'static str], p: &str) {
    let r = |s: &str, symbol| rule(kinds, &format!("{p}.{s}"), Read, SETTINGS, symbol);
    out.extend([
        r("capacity", "capacity: u.capacity"),
        r("storageClassName", "storage_class_name: u.storage_class_name"),
        r("metadataCacheSizeMb", "c.metadata_cache_size_mb"),
        r("contentCacheSizeMb", "c.content_cache_size_mb"),
        // `Persistent`: the policy's cache PVC for backups; refused for other Job kinds.
        r("mode", "CacheMode::Persistent"),
    ]);
}

fn failure_policy(out: &mut Vec<Rule>, kinds: &'static [&'static str], p: &str, file: &'static str) {
    out.extend([
        rule(kinds, &format!("{p}.backoffLimit"), Read, file, "backoff_limit"),
        rule(kinds, &format!("{p}.activeDeadlineSeconds"), Read, file, "active_deadline_seconds"),
    ]);
}

/// A `RepositoryRef` at `p`, resolved through the gating stores.
fn repository_ref(out: &mut Vec<Rule>, kinds: &'static [&'static str], p: &str) {
    out.extend([
        rule(kinds, &format!("{p}.name"), Read, GATING, "r.name"),
        rule(kinds, &format!("{p}.kind"), Read, GATING, "match r.kind"),
        rule(kinds, &format!("{p}.namespace"), Read, GATING, "r.namespace.clone()"),
    ]);
}

/// The backend union at `p` (`spec.backend`, `spec.destination`).
fn backend(out: &mut Vec<Rule>, kinds: &'static [&'static str], p: &str, secret_file: &'static str) {
    let r = |s: &str, class, file, symbol| rule(kinds, &format!("{p}.{s}"), class, file, symbol);
    out.extend([
        r("s3.bucket", Read, MOUNTS, "s.bucket.clone()"),
        r("s3.endpoint", Read, MOUNTS, "s.endpoint.as_deref()"),
        r("s3.prefix", Read, MOUNTS, "s.prefix.clone()"),
        r("s3.region", Read, MOUNTS, "s.region.clone()"),
        r("s3.tls.disableTls", Read, MOUNTS, "tls.disable_tls"),
        r("s3.tls.insecureSkipVerify", Read, MOUNTS, "tls.insecure_skip_verify"),
        r("s3.tls.caBundleRef", Read, MOUNTS, "ca_bundle_ref"),
        r("s3.auth.secretRef.name", Read, secret_file, "secret_ref"),
        r("s3.auth.workloadIdentity", Refused, FEATURES, ".s3.auth.workloadIdentity"),
        r("filesystem.path", Read, MOUNTS, "f.path.clone()"),
        r("filesystem.volume.pvc", Read, MOUNTS, "FilesystemVolume::Pvc(p)"),
        r("filesystem.volume.nfs", Refused, FEATURES, ".filesystem.volume.nfs"),
        r("azure", Refused, FEATURES, "Backend::Azure(_)"),
        r("gcs", Refused, FEATURES, "Backend::Gcs(_)"),
        r("b2", Refused, FEATURES, "Backend::B2(_)"),
        r("sftp", Refused, FEATURES, "Backend::Sftp(_)"),
        r("webDav", Refused, FEATURES, "Backend::WebDav(_)"),
        r("rclone", Refused, FEATURES, "Backend::Rclone(_)"),
        r("gdrive", Refused, FEATURES, "Backend::Gdrive(_)"),
    ]);
}

/// Every rule, for every kind.
pub fn rules() -> Vec<Rule> {
    let mut v = Vec::new();

    // Repository and ClusterRepository (the shared spec).
    backend(&mut v, REPOS, "spec.backend", REPO_VIEW);
    v.extend([
        rule(REPOS, "spec.backend.s3.auth.secretRef.namespace", Refused, REPO_NEXT, "auth.secretRef.namespace"),
        rule(REPOS, "spec.encryption.passwordSecretRef.name", Read, REPO_VIEW, "password_secret_ref.name"),
        rule(REPOS, "spec.encryption.passwordSecretRef.key", Read, REPO_APPLY, "password_secret_ref.key"),
        rule(REPOS, "spec.encryption.passwordSecretRef.namespace", Refused, REPO_NEXT, "passwordSecretRef.namespace"),
        rule(REPOS, "spec.create.enabled", Read, REPO_OBSERVE, "create.enabled"),
        rule(REPOS, "spec.create.encryption", Read, REPO_APPLY, "c.encryption.clone()"),
        rule(REPOS, "spec.create.hash", Read, REPO_APPLY, "c.hash.clone()"),
        rule(REPOS, "spec.create.splitter", Read, REPO_APPLY, "c.splitter.clone()"),
        rule(REPOS, "spec.create.ecc.algorithm", Read, REPO_APPLY, "e.algorithm"),
        rule(REPOS, "spec.create.ecc.overheadPercent", Read, REPO_APPLY, "e.overhead_percent"),
        rule(REPOS, "spec.seed", Refused, FEATURES, "\"spec.seed\""),
        rule(REPOS, "spec.identityDefaults", Refused, FEATURES, "\"spec.identityDefaults\""),
        rule(REPOS, "spec.parameters.blobRetention", Refused, FEATURES, "\"spec.parameters.blobRetention\""),
        rule(REPOS, "spec.parameters.epoch", Advisory, FEATURES, "\"spec.parameters.epoch\""),
        rule(REPOS, "spec.server", Advisory, FEATURES, "\"spec.server\""),
        rule(REPOS, "spec.concurrency", Advisory, FEATURES, "\"spec.concurrency\""),
        rule(REPOS, "spec.scheduleDefaults.jitter", Advisory, FEATURES, "\"spec.scheduleDefaults.jitter\""),
        rule(REPOS, "spec.scheduleDefaults.timezone", Read, SCHED_RECONCILE, "timezone"),
        rule(REPOS, "spec.moverDefaults.throttle", Advisory, FEATURES, "(\"throttle\""),
        rule(REPOS, "spec.moverDefaults.scratch", Advisory, FEATURES, "(\"scratch\""),
        rule(REPOS, "spec.moverDefaults.podLabels", Advisory, FEATURES, "(\"podLabels\""),
        rule(REPOS, "spec.moverDefaults.podAnnotations", Advisory, FEATURES, "(\"podAnnotations\""),
        rule(REPOS, "spec.moverDefaults.sourceColocation", Read, SETTINGS, "d.source_colocation"),
        rule(REPOS, "spec.moverDefaults.resources", Read, SETTINGS, "d.resources.clone()"),
        rule(REPOS, "spec.moverDefaults.securityContext", Read, SETTINGS, "d.security_context.as_ref()"),
        rule(REPOS, "spec.moverDefaults.podSecurityContext", Read, SETTINGS, "d.pod_security_context.as_ref()"),
        rule(REPOS, "spec.moverDefaults.nodeSelector", Read, SETTINGS, "d.node_selector.clone()"),
        rule(REPOS, "spec.moverDefaults.tolerations", Read, SETTINGS, "d.tolerations.clone()"),
        rule(REPOS, "spec.moverDefaults.affinity", Read, SETTINGS, "d.affinity.clone()"),
        rule(REPOS, "spec.moverDefaults.ttlSecondsAfterFinished", Read, SETTINGS, "d.ttl_seconds_after_finished"),
        // ClusterRepository only: a CEL rule rejects them on a Repository.
        rule(
            &["Repository"],
            "spec.catalog.fallbackNamespace",
            Admission,
            API_REPOSITORY,
            "catalog.fallbackNamespace is only valid on ClusterRepository",
        ),
        rule(
            &["Repository"],
            "spec.maintenance.namespace",
            Admission,
            API_REPOSITORY,
            "maintenance.namespace is only valid on ClusterRepository",
        ),
        rule(REPOS, "spec.catalog.adoption", Advisory, FEATURES, "\"spec.catalog.adoption\""),
        rule(REPOS, "spec.catalog.foreignSnapshots", Advisory, FEATURES, "\"spec.catalog.foreignSnapshots\""),
        rule(REPOS, "spec.catalog.retain.perIdentity", Read, CATALOG, "retain.per_identity"),
        rule(REPOS, "spec.catalog.retain.maxAgeDays", Read, CATALOG, "retain.max_age_days"),
        rule(REPOS, "spec.catalog.periodicRefresh", Read, CATALOG, "periodic_refresh"),
        rule(REPOS, "spec.catalog.refreshInterval", Read, CATALOG, "refresh_interval"),
        rule(CLUSTER, "spec.catalog.fallbackNamespace", Read, CATALOG, "c.fallback_namespace.clone()"),
        rule(REPOS, "spec.maintenance.enabled", Read, PROJECTION, "maintenance.enabled"),
        rule(REPOS, "spec.maintenance.schedule", Read, PROJECTION, "schedule"),
        rule(REPOS, "spec.maintenance.failurePolicy", Read, PROJECTION, "failure_policy"),
        rule(REPOS, "spec.maintenance.takeoverPolicy", Read, PROJECTION, "takeover_policy"),
        rule(CLUSTER, "spec.maintenance.namespace", Read, PROJECTION, "maintenance.namespace.clone()"),
        rule(
            REPOS,
            "spec.onNamespaceDelete",
            Read,
            "crates/controller/src/deletion/namespace.rs",
            "on_namespace_delete",
        ),
        rule(REPOS, "spec.deletionProtection.threshold", Read, "crates/controller/src/deletion/mod.rs", "threshold"),
        rule(REPOS, "spec.mode", Read, REPO_OBSERVE, "mode"),
        rule(REPOS, "spec.suspend", Read, REPO_OBSERVE, "suspend"),
        rule(
            REPOS,
            "spec.health.indexBlobWarnThreshold",
            Read,
            "crates/controller/src/repository/mod.rs",
            "index_blob_warn_threshold",
        ),
        rule(REPOS, "spec.health.probe.enabled", Read, REPO_OBSERVE, "enabled"),
        rule(REPOS, "spec.health.probe.interval", Read, REPO_OBSERVE, "interval"),
        rule(REPOS, "spec.health.probe.failureThreshold", Read, REPO_OBSERVE, "failure_threshold"),
        rule(REPOS, "spec.health.probe.onFailure", Read, REPO_OBSERVE, "on_failure"),
        rule(
            REPOS,
            "spec.bootstrap.failurePolicy.activeDeadlineSeconds",
            Read,
            REPO_OBSERVE,
            "active_deadline_seconds",
        ),
        rule(REPOS, "spec.bootstrap.failurePolicy.backoffLimit", Read, REPO_APPLY, "backoff_limit"),
        // Bootstrap ignores it by specification (docs/design/api-contract.md §2.2).
        rule(REPOS, "spec.bootstrap.failurePolicy.podStartupDeadlineSeconds", Inert, REPO_APPLY, "bootstrap"),
        rule(CLUSTER, "spec.allowedNamespaces", Read, GATING, "namespace_allowed"),
        rule(NAMESPACED_REPO, "spec.allowedNamespaces", Read, GATING, "spec.admits"),
        rule(CLUSTER, "spec.credentialProjection.allowed", Refused, FEATURES, "\"spec.credentialProjection.allowed\""),
    ]);
    mover_spec(&mut v, REPOS, "spec.maintenance.mover");
    cache(&mut v, REPOS, "spec.moverDefaults.cache");

    // SnapshotPolicy.
    repository_ref(&mut v, POLICY, "spec.repository");
    mover_spec(&mut v, POLICY, "spec.mover");
    v.extend([
        rule(POLICY, "spec.repositories", Refused, FEATURES, "\"spec.repositories\""),
        rule(POLICY, "spec.copyMethod", Read, SNAP_JOB, "match p.copy_method"),
        rule(POLICY, "spec.extraArgs", Refused, FEATURES, "\"spec.extraArgs\""),
        rule(POLICY, "spec.hooks", Refused, FEATURES, "\"spec.hooks\""),
        rule(POLICY, "spec.credentialProjection.enabled", Refused, FEATURES, "\"spec.credentialProjection.enabled\""),
        rule(POLICY, "spec.verification", Advisory, FEATURES, "\"spec.verification\""),
        rule(POLICY, "spec.adoption", Advisory, FEATURES, "\"spec.adoption\""),
        rule(POLICY, "spec.deletion.onPolicyDelete", Advisory, FEATURES, "\"spec.deletion.onPolicyDelete\""),
        rule(POLICY, "spec.groupBy", Refused, FEATURES, "GroupBy::VolumeGroupSnapshot"),
        rule(POLICY, "spec.volumeSnapshotClassName", Read, SNAP_STAGE, "volume_snapshot_class_name"),
        rule(POLICY, "spec.staging.timeout", Read, SNAP_STAGE, "staging::timeout(spec.staging"),
        rule(POLICY, "spec.staging.storageClassName", Read, STAGING, "s.storage_class_name"),
        rule(POLICY, "spec.staging.accessModes", Read, STAGING, "s.access_modes"),
        rule(POLICY, "spec.sources[].pvcPublicationReadOnly", Read, SNAP_JOB, "source.pvc_publication_read_only"),
        rule(
            POLICY,
            "spec.sources[].acknowledgeReadWritePublication",
            Read,
            SNAP_JOB,
            "source.acknowledge_read_write_publication",
        ),
        rule(POLICY, "spec.identity.username", Read, "crates/api/src/domain/identity.rs", "username"),
        rule(POLICY, "spec.identity.hostname", Read, "crates/api/src/domain/identity.rs", "hostname"),
        rule(POLICY, "spec.sources[].pvc.name", Read, SNAP_JOB, "SourceKind::Pvc(p)"),
        rule(POLICY, "spec.sources[].pvcSelector.labelSelector", Read, SOURCES, "label_selector"),
        rule(
            POLICY,
            "spec.sources[].pvcSelector.namespaceSelector",
            Refused,
            SOURCES,
            "namespaceSelector is not implemented",
        ),
        rule(POLICY, "spec.sources[].nfs", Refused, SOURCES, "nfs is not implemented"),
        rule(POLICY, "spec.sources[].stream", Refused, SOURCES, "stream is not implemented"),
        rule(POLICY, "spec.sources[].readOnly", Read, SNAP_JOB, "resolved_read_only()"),
        rule(
            POLICY,
            "spec.sources[].acknowledgeLiveMutation",
            Admission,
            "crates/api/src/snapshot_policy.rs",
            "s.acknowledgeLiveMutation",
        ),
        rule(POLICY, "spec.sources[].sourcePathOverride", Read, SNAP_JOB, "source_path_override"),
        rule(POLICY, "spec.sources[].sourcePathStrategy", Read, SNAP_JOB, "resolved_source_path_strategy()"),
        rule(POLICY, "spec.retention", Read, "crates/controller/src/snapshot_policy/plan.rs", "retention"),
        rule(POLICY, "spec.defaultDeletionPolicy", Read, SNAP_RECONCILE, "default_deletion_policy"),
        rule(POLICY, "spec.compression.compressor", Read, SNAP_JOB, "c.compressor.clone()"),
        rule(POLICY, "spec.compression.neverCompress", Read, SNAP_JOB, "never_compress"),
        rule(POLICY, "spec.files.ignoreRules", Read, SNAP_JOB, "files.ignore_rules"),
        rule(POLICY, "spec.files.ignoreCacheDirs", Read, SNAP_JOB, "files.ignore_cache_dirs"),
        rule(POLICY, "spec.files.ignoreIdenticalSnapshots", Read, SNAP_JOB, "files.ignore_identical_snapshots"),
        rule(POLICY, "spec.errorHandling.ignoreFileErrors", Read, SNAP_JOB, "e.ignore_file_errors"),
        rule(POLICY, "spec.errorHandling.ignoreDirErrors", Read, SNAP_JOB, "e.ignore_dir_errors"),
        rule(POLICY, "spec.errorHandling.ignoreUnknownTypes", Read, SNAP_JOB, "e.ignore_unknown_types"),
        rule(POLICY, "spec.errorHandling.failFast", Read, SNAP_JOB, "e.fail_fast"),
        rule(POLICY, "spec.upload.maxParallelSnapshots", Read, SNAP_JOB, "u.max_parallel_snapshots"),
        rule(POLICY, "spec.upload.maxParallelFileReads", Read, SNAP_JOB, "u.max_parallel_file_reads"),
        rule(POLICY, "spec.upload.limitMb", Read, SNAP_JOB, "u.limit_mb"),
        rule(POLICY, "spec.preflight", Read, "crates/controller/src/preflight.rs", "checks"),
        rule(POLICY, "spec.suspend", Read, POLICY_PLAN, "spec.suspend"),
    ]);

    // Snapshot.
    repository_ref(&mut v, SNAPSHOT, "spec.repository");
    failure_policy(&mut v, SNAPSHOT, "spec.failurePolicy", "crates/mover/src/job.rs");
    v.extend([
        rule(
            SNAPSHOT,
            "spec.failurePolicy.podStartupDeadlineSeconds",
            Read,
            SNAP_OBSERVE,
            "snap.spec.failure_policy.as_deref()",
        ),
        rule(SNAPSHOT, "spec.policyRef.name", Read, SNAP_OBSERVE, "pr.name"),
        rule(SNAPSHOT, "spec.policyRef.namespace", Refused, SNAP_OBSERVE, "policy_ref_namespace(\"Snapshot\""),
        rule(SNAPSHOT, "spec.source.sourceIndex", Read, SNAP_JOB, "source_index"),
        rule(SNAPSHOT, "spec.source.target.pvc.name", Read, SNAP_JOB, "target.pvc.name"),
        rule(SNAPSHOT, "spec.source.target.pvc.namespace", Refused, SNAP_JOB, "target.pvc.namespace"),
        rule(SNAPSHOT, "spec.source.group", Refused, FEATURES, "\"spec.source.group\""),
        rule(SNAPSHOT, "spec.tags", Read, SNAP_JOB, "tags"),
        rule(SNAPSHOT, "spec.description", Read, SNAP_JOB, "description"),
        rule(SNAPSHOT, "spec.deletionPolicy", Read, SNAP_RECONCILE, "deletion_policy"),
        rule(
            SNAPSHOT,
            "spec.onScheduleDelete",
            Read,
            "crates/controller/src/deletion/cascade.rs",
            "on_schedule_delete",
        ),
        rule(SNAPSHOT, "spec.pin", Read, SNAP_RECONCILE, "pin"),
    ]);

    // SnapshotSchedule.
    v.extend([
        rule(SCHEDULE, "spec.policyRef.name", Read, SCHED_OBSERVE, "policy_ref"),
        rule(SCHEDULE, "spec.policyRef.namespace", Refused, SCHED_OBSERVE, "policy_ref_namespace(\"SnapshotSchedule\""),
        rule(SCHEDULE, "spec.policySelector", Read, SCHED_OBSERVE, "ScheduleTarget::PolicySelector(sel)"),
        rule(SCHEDULE, "spec.schedule.cron", Read, SCHED_OBSERVE, "cron"),
        rule(SCHEDULE, "spec.schedule.jitter", Read, SCHED_OBSERVE, "jitter"),
        rule(SCHEDULE, "spec.schedule.timezone", Read, SCHED_RECONCILE, "timezone"),
        rule(SCHEDULE, "spec.schedule.runOnCreate", Read, SCHED_PLAN, "run_on_create"),
        rule(SCHEDULE, "spec.schedule.suspend", Read, SCHED_PLAN, "suspend"),
        rule(SCHEDULE, "spec.schedule.concurrencyPolicy", Read, SCHED_OBSERVE, "concurrency_policy"),
        rule(SCHEDULE, "spec.schedule.startingDeadlineSeconds", Read, SCHED_PLAN, "starting_deadline_seconds"),
        rule(SCHEDULE, "spec.failedJobsHistoryLimit", Read, SCHED_APPLY, "failed_jobs_history_limit"),
        rule(SCHEDULE, "spec.deletion.onScheduleDelete", Read, SCHED_RECONCILE, "on_schedule_delete"),
    ]);

    // Restore.
    repository_ref(&mut v, RESTORE, "spec.repository");
    mover_spec(&mut v, RESTORE, "spec.mover");
    failure_policy(&mut v, RESTORE, "spec.failurePolicy", MOVER_JOB);
    v.extend([
        rule(
            RESTORE,
            "spec.failurePolicy.podStartupDeadlineSeconds",
            Read,
            RESTORE_OBSERVE,
            "restore.spec.failure_policy.as_ref()",
        ),
        rule(RESTORE, "spec.source.snapshotRef", Read, RESTORE_RECONCILE, "RestoreSource::SnapshotRef"),
        rule(RESTORE, "spec.source.fromPolicy", Read, RESTORE_RECONCILE, "RestoreSource::FromPolicy"),
        rule(RESTORE, "spec.source.identity", Read, RESTORE_RECONCILE, "RestoreSource::Identity"),
        rule(RESTORE, "spec.target.pvc", Read, RESTORE_RECONCILE, "RestoreTarget::Pvc"),
        rule(RESTORE, "spec.target.pvcRef", Read, RESTORE_OBSERVE, "RestoreTarget::PvcRef"),
        rule(RESTORE, "spec.target.populator", Read, RESTORE_OBSERVE, "RestoreTarget::Populator(_) if !finished"),
        rule(RESTORE, "spec.target.streamExec", Refused, RESTORE_OBSERVE, "NotImplemented { what: \"streamExec\" }"),
        rule(RESTORE, "spec.options", Read, RESTORE_RECONCILE, "o.enable_file_deletion"),
        rule(RESTORE, "spec.policy.onMissingSnapshot", Read, RESTORE_OBSERVE, "resolved_on_missing_snapshot"),
        rule(RESTORE, "spec.policy.waitTimeout", Read, RESTORE_OBSERVE, "wait_timeout"),
        rule(RESTORE, "spec.credentialProjection.enabled", Refused, FEATURES, "\"spec.credentialProjection.enabled\""),
    ]);

    // Maintenance.
    repository_ref(&mut v, MAINT, "spec.repository");
    mover_spec(&mut v, MAINT, "spec.mover");
    failure_policy(&mut v, MAINT, "spec.failurePolicy", MOVER_JOB);
    v.extend([
        rule(
            MAINT,
            "spec.failurePolicy.podStartupDeadlineSeconds",
            Read,
            MAINT_RECONCILE,
            "resolved_pod_startup_deadline_seconds",
        ),
        rule(MAINT, "spec.schedule", Read, MAINT_COMMON, "timezone"),
        rule(MAINT, "spec.ownership.owner", Read, MAINT_RECONCILE, "o.owner.clone()"),
        rule(MAINT, "spec.ownership.ownerAliases", Read, MAINT_RECONCILE, "owner_aliases"),
        rule(MAINT, "spec.ownership.takeoverPolicy", Read, MAINT_RECONCILE, "takeover_policy"),
        rule(MAINT, "spec.credentialProjection.enabled", Refused, FEATURES, "\"spec.credentialProjection.enabled\""),
    ]);

    // RepositoryReplication.
    repository_ref(&mut v, REPL, "spec.sourceRef");
    mover_spec(&mut v, REPL, "spec.mover");
    backend(&mut v, REPL, "spec.destination", REPL_RECONCILE);
    v.extend([
        rule(
            REPL,
            "spec.destination.s3.auth.secretRef.namespace",
            Refused,
            REPL_RECONCILE,
            "destination_secret_namespace(",
        ),
        rule(REPL, "spec.schedule", Read, REPL_RECONCILE, "cron"),
        rule(REPL, "spec.suspend", Read, REPL_RECONCILE, "suspend"),
        rule(REPL, "spec.sync.deleteExtra", Read, REPL_RECONCILE, "sync.delete_extra"),
        rule(REPL, "spec.sync.parallel", Read, REPL_RECONCILE, "sync.parallel"),
        rule(REPL, "spec.sync.mustExist", Read, REPL_RECONCILE, "sync.must_exist"),
        rule(REPL, "spec.sync.times", Read, REPL_RECONCILE, "sync.times"),
        rule(REPL, "spec.sync.update", Read, REPL_RECONCILE, "sync.update"),
        rule(
            REPL,
            "spec.sync.maxDownloadSpeedBytesPerSecond",
            Read,
            REPL_RECONCILE,
            "sync.max_download_speed_bytes_per_second",
        ),
        rule(
            REPL,
            "spec.sync.maxUploadSpeedBytesPerSecond",
            Read,
            REPL_RECONCILE,
            "sync.max_upload_speed_bytes_per_second",
        ),
    ]);

    // SnapshotReplication: the whole kind is [next] gating (docs/design/api-contract.md §1.1, §15): every field is
    // refused by the kind's Stalled / FeatureNotImplemented gate.
    v.push(rule(SNAP_REPL, "spec", Refused, SNAP_REPL_GATE, "verdict().gating_conditions()"));
    v
}

/// The documented advisory list (docs/design/api-contract.md §1.9; docs/operations.md repeats it).
pub const ADVISORY: &[(&str, &str)] = &[
    ("Repository", "spec.server"),
    ("Repository", "spec.concurrency"),
    ("Repository", "spec.scheduleDefaults.jitter"),
    ("Repository", "spec.moverDefaults.throttle"),
    ("Repository", "spec.moverDefaults.scratch"),
    ("Repository", "spec.moverDefaults.podLabels"),
    ("Repository", "spec.moverDefaults.podAnnotations"),
    ("Repository", "spec.parameters.epoch"),
    ("Repository", "spec.catalog.adoption"),
    ("Repository", "spec.catalog.foreignSnapshots"),
    ("SnapshotPolicy", "spec.verification"),
    ("SnapshotPolicy", "spec.adoption"),
    ("SnapshotPolicy", "spec.deletion.onPolicyDelete"),
];
