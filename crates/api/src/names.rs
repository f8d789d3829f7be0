//! Every name the API promises: group, finalizers, annotations, labels, condition types,
//! condition reasons and Event reasons. Other crates use these constants, never literals.

pub const GROUP: &str = "kopiur.home-operations.com";
pub const VERSION: &str = "v1alpha1";
pub const API_VERSION: &str = "kopiur.home-operations.com/v1alpha1";
/// `kubectl get kopiur` lists every kind.
pub const CATEGORY: &str = "kopiur";
/// The prefix of every reserved annotation and label key.
pub const PREFIX: &str = "kopiur.home-operations.com/";

pub mod finalizer {
    pub const SNAPSHOT_CLEANUP: &str = "kopiur.home-operations.com/snapshot-cleanup";
}

pub mod annotation {
    pub const PRUNED_BY: &str = "kopiur.home-operations.com/pruned-by";
    pub const ALLOW_MASS_DELETION: &str = "kopiur.home-operations.com/allow-mass-deletion";
    pub const ALLOW_REINITIALIZE: &str = "kopiur.home-operations.com/allow-reinitialize";
    pub const SKIP_SNAPSHOT_CLEANUP: &str = "kopiur.home-operations.com/skip-snapshot-cleanup";
    pub const REVERIFY_REQUESTED_AT: &str = "kopiur.home-operations.com/reverify-requested-at";
    pub const CATALOG_SCAN_REQUESTED_AT: &str = "kopiur.home-operations.com/catalog-scan-requested-at";
    pub const RUN_REQUESTED: &str = "kopiur.home-operations.com/run-requested";
    pub const RUN_MODE: &str = "kopiur.home-operations.com/run-mode";
    pub const ALLOW_IDENTITY_CHANGE: &str = "kopiur.home-operations.com/allow-identity-change";
    /// On a Namespace: `"true"` admits privileged movers there.
    pub const PRIVILEGED_MOVERS: &str = "kopiur.home-operations.com/privileged-movers";
    // Written by the operator on its own objects.
    pub const DELETE_MEMBERS: &str = "kopiur.home-operations.com/delete-members";
    /// On a failed batch Job, written by the controller: the per-member answer it read from the
    /// Job's Pod (`kopiur_mover::batch_outcome`).
    /// On a Namespace, Snapshot or SnapshotPolicy: the namespaces (comma-separated, or `*`) whose
    /// Restores may read this data (audit finding 2.7).
    pub const RESTORE_ALLOWED_NAMESPACES: &str = "kopiur.home-operations.com/restore-allowed-namespaces";
    /// On a Namespace: the namespaces (comma-separated, or `*`) whose SnapshotPolicies may write
    /// under this namespace's hostname on a shared repository (audit finding 2.8).
    pub const IDENTITY_ALLOWED_NAMESPACES: &str = "kopiur.home-operations.com/identity-allowed-namespaces";
    pub const DELETE_OUTCOMES: &str = "kopiur.home-operations.com/delete-outcomes";
    pub const BOOTSTRAP_GENERATION: &str = "kopiur.home-operations.com/bootstrap-generation";
    pub const MAINTENANCE_SLOT: &str = "kopiur.home-operations.com/maintenance-slot";
    pub const REPLICATION_SLOT: &str = "kopiur.home-operations.com/replication-slot";
    pub const RUN_TRIGGER: &str = "kopiur.home-operations.com/run-trigger";
    pub const PIN_TARGET: &str = "kopiur.home-operations.com/pin-target";
    /// On a PersistentVolume a Restore populated: the uid of that Restore.
    pub const POPULATED_BY: &str = "kopiur.home-operations.com/populated-by";
    /// On a PersistentVolume a Restore populated: the uid of the claim it was populated for.
    pub const POPULATED_FOR: &str = "kopiur.home-operations.com/populated-for";
}

/// Recognized values of the `pruned-by` annotation. Anything else reads as an external delete.
pub mod pruned_by {
    pub const RETENTION: &str = "retention";
    pub const FAILED_HISTORY: &str = "failed-history";
    pub const REPLACED_RUN: &str = "replaced-run";
    // Reserved for features not shipped yet: read as external until they are.
    pub const POLICY_CASCADE: &str = "policy-cascade";
    pub const REPLICATION_RETENTION: &str = "replication-retention";
}

/// Values of the `run-trigger` annotation.
pub mod run_trigger {
    pub const CRON: &str = "cron";
    pub const MANUAL: &str = "manual";
}

/// Values of the `run-mode` annotation.
pub mod run_mode {
    pub const QUICK: &str = "quick";
    pub const FULL: &str = "full";
}

pub mod label {
    pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
    pub const MANAGED_BY_VALUE: &str = "kopiur";
    pub const COMPONENT: &str = "app.kubernetes.io/component";
    pub const ORIGIN: &str = "kopiur.home-operations.com/origin";
    pub const CONFIG: &str = "kopiur.home-operations.com/config";
    pub const SCHEDULE: &str = "kopiur.home-operations.com/schedule";
    pub const SNAPSHOT_ID: &str = "kopiur.home-operations.com/snapshot-id";
    pub const REPOSITORY_UID: &str = "kopiur.home-operations.com/repository-uid";
    pub const OP: &str = "kopiur.home-operations.com/op";
    pub const DELETE_REPO: &str = "kopiur.home-operations.com/delete-repo";
    pub const MAINTENANCE: &str = "kopiur.home-operations.com/maintenance";
    pub const REPLICATION: &str = "kopiur.home-operations.com/replication";
}

/// Values of `app.kubernetes.io/component`.
pub mod component {
    pub const BOOTSTRAP: &str = "bootstrap";
    pub const BACKUP: &str = "backup";
    pub const RESTORE: &str = "restore";
    pub const MAINTENANCE: &str = "maintenance";
    pub const REPLICATION: &str = "replication";
    pub const SNAPSHOT_DELETE: &str = "snapshot-delete";
}

/// Values of the `op` label.
pub mod op {
    pub const SNAPSHOT_DELETE_BATCH: &str = "snapshot-delete-batch";
    pub const RESTORE: &str = "restore";
}

/// Values of the `origin` label (and `status.origin` on Snapshots).
pub mod origin {
    pub const SCHEDULED: &str = "scheduled";
    pub const MANUAL: &str = "manual";
    pub const DISCOVERED: &str = "discovered";
    pub const ADOPTED: &str = "adopted";
    pub const REPLICATED: &str = "replicated";
}

pub mod condition {
    // kstatus trio, on every kind.
    pub const READY: &str = "Ready";
    pub const RECONCILING: &str = "Reconciling";
    pub const STALLED: &str = "Stalled";
    // Repository / ClusterRepository.
    pub const BOOTSTRAPPED: &str = "Bootstrapped";
    pub const BACKEND_REACHABLE: &str = "BackendReachable";
    pub const CREDENTIALS_AVAILABLE: &str = "CredentialsAvailable";
    pub const INDEX_BLOB_HEALTH: &str = "IndexBlobHealth";
    pub const MASS_DELETION_HELD: &str = "MassDeletionHeld";
    pub const MAINTENANCE_CONFIGURED: &str = "MaintenanceConfigured";
    pub const FEATURES_IGNORED: &str = "FeaturesIgnored";
    // SnapshotPolicy.
    pub const REPOSITORIES_READY: &str = "RepositoriesReady";
    // Snapshot.
    pub const MOVER_PERMITTED: &str = "MoverPermitted";
    /// Snapshot and Restore: what `mover.inheritSecurityContextFrom` gave, or why nothing.
    pub const SECURITY_CONTEXT_INHERITED: &str = "SecurityContextInherited";
    pub const REPOSITORY_WRITABLE: &str = "RepositoryWritable";
    pub const SOURCE_PVC_AVAILABLE: &str = "SourcePvcAvailable";
    pub const DELETION_HELD: &str = "DeletionHeld";
    /// The batch delete found that the kopia manifest the Snapshot names is not its own and
    /// kept it; the finalizer stays until a human decides.
    pub const DELETION_REFUSED: &str = "DeletionRefused";
    pub const PINNED: &str = "Pinned";
    // SnapshotSchedule.
    pub const SCHEDULE_RUNNABLE: &str = "ScheduleRunnable";
    pub const FANOUT_CAPPED: &str = "FanoutCapped";
    pub const REPLACEMENT_HELD: &str = "ReplacementHeld";
    pub const TIMEZONE_DEFAULT_AMBIGUOUS: &str = "TimezoneDefaultAmbiguous";
    // Restore.
    pub const REFERENT_AVAILABLE: &str = "ReferentAvailable";
    pub const RESOLVED: &str = "Resolved";
    pub const OWNERSHIP_PRESERVED: &str = "OwnershipPreserved";
    /// A populator Restore whose claim was bound before it ran (nothing restored).
    pub const TARGET_ALREADY_BOUND: &str = "TargetAlreadyBound";
    // Maintenance.
    pub const LEASE_OWNED: &str = "LeaseOwned";
}

/// Condition reasons (UpperCamelCase), shared across kinds where the spec reuses a name.
pub mod reason {
    // Repository Ready / Bootstrapped / BackendReachable.
    pub const CONNECTED: &str = "Connected";
    pub const BOOTSTRAPPING: &str = "Bootstrapping";
    pub const BREAKER_OPEN: &str = "BreakerOpen";
    pub const BACKEND_UNREACHABLE: &str = "BackendUnreachable";
    pub const REPOSITORY_VANISHED: &str = "RepositoryVanished";
    pub const PROBE_DEADLINE_EXCEEDED: &str = "ProbeDeadlineExceeded";
    /// A connect killed by its deadline while the backend answered: slow, not down.
    pub const TIMED_OUT: &str = "TimedOut";
    pub const REPOSITORY_NOT_INITIALIZED: &str = "RepositoryNotInitialized";
    pub const REPOSITORY_REINITIALIZE_BLOCKED: &str = "RepositoryReinitializeBlocked";
    pub const REPOSITORY_UNIQUE_ID_MISMATCH: &str = "RepositoryUniqueIdMismatch";
    pub const BOOTSTRAP_JOB_FAILED: &str = "BootstrapJobFailed";
    pub const BOOTSTRAP_DEADLINE_EXCEEDED: &str = "BootstrapDeadlineExceeded";
    pub const AUTH_FAILURE: &str = "AuthFailure";
    pub const ACCESS_DENIED: &str = "AccessDenied";
    pub const PERMISSION_DENIED: &str = "PermissionDenied";
    pub const LOCKED: &str = "Locked";
    pub const SOURCE_ERROR: &str = "SourceError";
    pub const UNKNOWN: &str = "Unknown";
    pub const CERTIFICATE_ERROR: &str = "CertificateError";
    pub const NOT_FOUND: &str = "NotFound";
    pub const REPOSITORY_UNAVAILABLE: &str = "RepositoryUnavailable";
    pub const MISSING_CREDENTIALS_SECRET: &str = "MissingCredentialsSecret";
    pub const MISSING_CA_BUNDLE: &str = "MissingCaBundle";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const FEATURE_NOT_IMPLEMENTED: &str = "FeatureNotImplemented";
    /// `inheritSecurityContextFrom` found no pod or no uid to inherit (the run waits).
    pub const SECURITY_CONTEXT_NOT_INHERITED: &str = "SecurityContextNotInherited";
    pub const SECURITY_CONTEXT_INHERITED: &str = "SecurityContextInherited";
    pub const CROSS_NAMESPACE_REFERENCE: &str = "CrossNamespaceReference";
    pub const BOOTSTRAPPED: &str = "Bootstrapped";
    pub const REACHABLE: &str = "Reachable";
    pub const CONNECT_FAILED: &str = "ConnectFailed";
    pub const PROBE_DISABLED: &str = "ProbeDisabled";
    pub const FOUND: &str = "Found";
    pub const HEALTHY: &str = "Healthy";
    pub const TOO_MANY_INDEX_BLOBS: &str = "TooManyIndexBlobs";
    pub const THRESHOLD_EXCEEDED: &str = "ThresholdExceeded";
    pub const BELOW_THRESHOLD: &str = "BelowThreshold";
    pub const DISABLED: &str = "Disabled";
    pub const MAINTENANCE_CONFIGURED: &str = "MaintenanceConfigured";
    pub const MAINTENANCE_DISABLED: &str = "MaintenanceDisabled";
    pub const MAINTENANCE_NAMESPACE_UNRESOLVED: &str = "MaintenanceNamespaceUnresolved";
    pub const MAINTENANCE_APPLY_FAILED: &str = "MaintenanceApplyFailed";
    pub const NOT_IMPLEMENTED: &str = "NotImplemented";
    pub const INVALID_SCHEDULE: &str = "InvalidSchedule";
    pub const REPOSITORY_VOLUME_NOT_IN_NAMESPACE: &str = "RepositoryVolumeNotInNamespace";
    // Tenancy and references.
    pub const NAMESPACE_NOT_ALLOWED: &str = "NamespaceNotAllowed";
    pub const REPOSITORY_NOT_READY: &str = "RepositoryNotReady";
    pub const REPOSITORY_NOT_FOUND: &str = "RepositoryNotFound";
    pub const REPOSITORY_READY: &str = "RepositoryReady";
    // SnapshotPolicy.
    pub const READY: &str = "Ready";
    pub const IDENTITY_COLLISION: &str = "IdentityCollision";
    pub const IDENTITY_WOULD_FORK: &str = "IdentityWouldFork";
    pub const INVALID_PREFLIGHT: &str = "InvalidPreflight";
    // Snapshot.
    pub const SNAPSHOT_CREATED: &str = "SnapshotCreated";
    pub const SNAPSHOT_UNCHANGED: &str = "SnapshotUnchanged";
    pub const SNAPSHOT_DISCOVERED: &str = "SnapshotDiscovered";
    pub const POLICY_NOT_FOUND: &str = "PolicyNotFound";
    pub const POLICY_SUSPENDED: &str = "PolicySuspended";
    pub const PREFLIGHT_FAILED: &str = "PreflightFailed";
    pub const WAITING_FOR_PREFLIGHT_DATA: &str = "WaitingForPreflightData";
    pub const SNAPSHOT_FAILED: &str = "SnapshotFailed";
    pub const MOVER_POD_WEDGED: &str = "MoverPodWedged";
    pub const MOVER_JOB_LOST: &str = "MoverJobLost";
    pub const PREFLIGHT_TIMEOUT: &str = "PreflightTimeout";
    pub const SOURCE_REQUIRED: &str = "SourceRequired";
    pub const REPOSITORY_NOT_IN_POLICY: &str = "RepositoryNotInPolicy";
    pub const REPOSITORY_READ_ONLY: &str = "RepositoryReadOnly";
    pub const PRIVILEGED_MOVER_NOT_PERMITTED: &str = "PrivilegedMoverNotPermitted";
    /// `MoverPermitted=True`: the mover's settings are permitted in the namespace.
    pub const MOVER_PERMITTED: &str = "MoverPermitted";
    pub const SOURCE_PVC_MISSING: &str = "SourcePvcMissing";
    pub const SOURCE_PVC_FOUND: &str = "SourcePvcFound";
    pub const MASS_DELETION_BREAKER: &str = "MassDeletionBreaker";
    /// A deleting Snapshot held by the repository's mass-deletion breaker.
    pub const DELETION_HELD: &str = "DeletionHeld";
    /// A deleting Snapshot whose kopia manifest is not its own (see `condition::DELETION_REFUSED`).
    pub const DELETION_REFUSED: &str = "DeletionRefused";
    /// The work spec is over its size cap (the `WorkSpecTooLarge` Event says so too).
    pub const WORK_SPEC_TOO_LARGE: &str = "WorkSpecTooLarge";
    pub const ACKNOWLEDGED: &str = "Acknowledged";
    pub const PINNED: &str = "Pinned";
    pub const PIN_JOB_RUNNING: &str = "PinJobRunning";
    pub const PIN_JOB_FAILED: &str = "PinJobFailed";
    // SnapshotSchedule.
    pub const SCHEDULED: &str = "Scheduled";
    pub const SUSPENDED: &str = "Suspended";
    pub const BLOCKED_ON_UNREADABLE_RUN: &str = "BlockedOnUnreadableRun";
    pub const FANOUT_TOO_LARGE: &str = "FanoutTooLarge";
    pub const WAITING_FOR_REPOSITORY_SLOT: &str = "WaitingForRepositorySlot";
    pub const REPOSITORY_DEFAULTS_DISAGREE: &str = "RepositoryDefaultsDisagree";
    // Restore.
    pub const RESTORE_REFERENT_FOUND: &str = "RestoreReferentFound";
    pub const RESTORE_REFERENT_MISSING: &str = "RestoreReferentMissing";
    pub const SNAPSHOT_RESOLVED: &str = "SnapshotResolved";
    pub const NO_SNAPSHOT_CONTINUE: &str = "NoSnapshotContinue";
    pub const WAITING_FOR_SNAPSHOT: &str = "WaitingForSnapshot";
    pub const SNAPSHOT_NOT_FOUND: &str = "SnapshotNotFound";
    pub const RESTORE_SUCCEEDED: &str = "RestoreSucceeded";
    pub const TARGET_EXISTS: &str = "TargetExists";
    pub const RESTORE_FAILED: &str = "RestoreFailed";
    // Restore as a volume populator (`target: populator: {}`).
    pub const WAITING_FOR_CLAIM: &str = "WaitingForClaim";
    pub const WAITING_FOR_CONSUMER: &str = "WaitingForConsumer";
    pub const WAITING_FOR_PRIME: &str = "WaitingForPrime";
    /// The claim was bound before the Restore ran: nothing is restored.
    pub const TARGET_ALREADY_BOUND: &str = "TargetAlreadyBound";
    pub const POPULATING: &str = "Populating";
    pub const BINDING: &str = "Binding";
    pub const POPULATE_REFUSED: &str = "PopulateRefused";
    pub const POPULATE_TARGET_GONE: &str = "PopulateTargetGone";
    pub const POPULATE_PRIME_LOST: &str = "PopulatePrimeLost";
    // Maintenance.
    pub const MAINTENANCE_SCHEDULED: &str = "MaintenanceScheduled";
    pub const MAINTENANCE_YIELDING: &str = "MaintenanceYielding";
    pub const LEASE_HELD_BY_OTHER: &str = "LeaseHeldByOther";
    pub const LEASE_TAKEOVER_PROMPT: &str = "LeaseTakeoverPrompt";
    /// `LeaseOwned=True`: this Maintenance owns kopia's maintenance.
    pub const LEASE_OWNED: &str = "LeaseOwned";
    // RepositoryReplication.
    pub const REPLICATED: &str = "Replicated";
    pub const SUSPENDED_WITH_PENDING_RUN: &str = "SuspendedWithPendingRun";
    pub const DESTINATION_IS_SOURCE: &str = "DestinationIsSource";
    pub const LAST_RUN_FAILED: &str = "LastRunFailed";
}

/// Event reasons.
pub mod event {
    pub const REPOSITORY_BOOTSTRAPPED: &str = "RepositoryBootstrapped";
    pub const REPOSITORY_PROBE_FAILED: &str = "RepositoryProbeFailed";
    pub const REPOSITORY_BREAKER_OPENED: &str = "RepositoryBreakerOpened";
    pub const REPOSITORY_BREAKER_CLOSED: &str = "RepositoryBreakerClosed";
    pub const REPOSITORY_REINITIALIZE_BLOCKED: &str = "RepositoryReinitializeBlocked";
    pub const REPOSITORY_REINITIALIZED: &str = "RepositoryReinitialized";
    pub const INVALID_REINITIALIZE_ACK: &str = "InvalidReinitializeAck";
    pub const REINITIALIZE_ACK_IGNORED_REPOSITORY_PRESENT: &str = "ReinitializeAckIgnoredRepositoryPresent";
    pub const MASS_DELETION_HELD: &str = "MassDeletionHeld";
    pub const INVALID_MASS_DELETION_ACK: &str = "InvalidMassDeletionAck";
    pub const SNAPSHOT_DELETION_BATCH_FAILED: &str = "SnapshotDeletionBatchFailed";
    pub const SNAPSHOT_DELETION_REFUSED: &str = "SnapshotDeletionRefused";
    pub const DISCOVERED_SNAPSHOT_UNPLACED: &str = "DiscoveredSnapshotUnplaced";
    pub const MAINTENANCE_NOT_CONFIGURED: &str = "MaintenanceNotConfigured";
    pub const TOO_MANY_INDEX_BLOBS: &str = "TooManyIndexBlobs";
    /// `IndexBlobHealth` went False and the repository asked its Maintenance for a quick run.
    pub const QUICK_MAINTENANCE_REQUESTED: &str = "QuickMaintenanceRequested";
    pub const SNAPSHOT_SUCCEEDED: &str = "SnapshotSucceeded";
    pub const SNAPSHOT_FAILED: &str = "SnapshotFailed";
    pub const MOVER_POD_WEDGED: &str = "MoverPodWedged";
    /// A finished run's staged PVC, VolumeSnapshot or content outlived the release bound.
    pub const STAGED_OBJECTS_LEFT: &str = "StagedObjectsLeft";
    pub const SNAPSHOT_DELETION_HELD: &str = "SnapshotDeletionHeld";
    pub const SNAPSHOT_RETAINED_ON_SCHEDULE_DELETE: &str = "SnapshotRetainedOnScheduleDelete";
    pub const SNAPSHOT_ORPHANED: &str = "SnapshotOrphaned";
    pub const SCHEDULE_SLOT_SKIPPED: &str = "ScheduleSlotSkipped";
    pub const INVALID_RUN_REQUEST: &str = "InvalidRunRequest";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const KUBE_API_ERROR: &str = "KubeApiError";
    /// The API server refused a call with 403: the controller's RBAC lacks a verb.
    pub const KUBE_API_FORBIDDEN: &str = "KubeApiForbidden";
    /// The API server refused a call as invalid (400, 422): retrying the same call cannot help.
    pub const KUBE_API_REJECTED: &str = "KubeApiRejected";
    pub const WORK_SPEC_TOO_LARGE: &str = "WorkSpecTooLarge";
    pub const WORK_SPEC_INVALID: &str = "WorkSpecInvalid";
    pub const FEATURES_IGNORED: &str = "FeaturesIgnored";
    // On a PVC whose `dataSourceRef` names a Restore (the volume populator).
    pub const RESTORE_NOT_FOUND: &str = "RestoreNotFound";
    pub const RESTORE_NOT_POPULATOR: &str = "RestoreNotPopulator";
    pub const RESTORE_ALREADY_RAN: &str = "RestoreAlreadyRan";
    pub const POPULATE_WAITING: &str = "PopulateWaiting";
    pub const POPULATING: &str = "Populating";
    pub const POPULATED: &str = "Populated";
    pub const POPULATE_FAILED: &str = "PopulateFailed";
}

/// Reasons carried in the message of the `SnapshotOrphaned` Event.
pub mod orphan_reason {
    pub const SKIP_SNAPSHOT_CLEANUP: &str = "SkipSnapshotCleanup";
    pub const REPOSITORY_GONE: &str = "RepositoryGone";
    pub const NAMESPACE_DELETED: &str = "NamespaceDeleted";
}

/// Operator-wide constants that are not fields.
pub mod constants {
    /// The resolved `SecretKeyRef.key`.
    pub const DEFAULT_PASSWORD_KEY: &str = "KOPIA_PASSWORD";
    /// The environment prefix of a replication destination's credentials.
    pub const DESTINATION_ENV_PREFIX: &str = "KOPIUR_DEST_";
    /// Mover UID, GID and fsGroup.
    pub const MOVER_ID: i64 = 65532;
}
