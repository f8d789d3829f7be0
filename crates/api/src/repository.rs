//! Repository: one kopia repository that belongs to a namespace (docs/design/api-contract.md §4). The spec
//! fields it shares with ClusterRepository live in [`RepositoryCommonSpec`].

use k8s_openapi::api::core::v1::{PodSecurityContext, ResourceRequirements, SecurityContext};

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Duration;
use crate::maintenance::{MaintenanceSchedule, TakeoverPolicy};
use crate::schema::ExactlyOne;
use crate::shared::marker::True;
use crate::shared::{Backend, FailurePolicy, MoverDefaults, MoverSpec, SecretKeyRef, SecretRef};

mod create;
mod status;

pub use create::{Bootstrap, CreateSpec, CredentialProjection, Ecc, Migrate, MigratePolicies, Seed, SeedFrom};
pub use status::{
    CatalogStatus, DeletionProtectionStatus, HealthStatus, MassDeletionAck, RepositoryPhase, RepositoryStatus,
    ServerStatus, StorageStats, StrictRetry,
};

fn yes() -> bool {
    true
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Encryption {
    /// The repository password. The reference may change; the value must stay this
    /// repository's password.
    pub password_secret_ref: SecretKeyRef,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleDefaults {
    /// Inherited by schedules, Maintenance and replication that set no zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9_+\-/]{1,64}$"))]
    pub timezone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("duration(self.matches('^[0-9]+$') ? self + 's' : self) <= duration('24h')").message("jitter must be at most 24h"))]
    pub jitter: Option<Duration>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Concurrency {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_concurrent_jobs: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_concurrent_delete_jobs: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CatalogRetain {
    /// Maximum discovered rows per identity; 0 materializes none. Unbounded when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub per_identity: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_age_days: Option<i32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ForeignSnapshots {
    Ignore,
    Fallback,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Adoption {
    Adopt,
    Ignore,
}

fn one_hour() -> Duration {
    Duration::from_secs(3600)
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Catalog {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retain: Option<CatalogRetain>,
    #[serde(default)]
    pub periodic_refresh: bool,
    #[serde(default = "one_hour")]
    #[x_kube(validation = Rule::new("duration(self.matches('^[0-9]+$') ? self + 's' : self) >= duration('30s')").message("catalog.refreshInterval must be at least 30s"))]
    pub refresh_interval: Duration,
    /// ClusterRepository only: where a discovered Snapshot goes when its hostname names no
    /// allowed, existing namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub fallback_namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreign_snapshots: Option<ForeignSnapshots>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adoption: Option<Adoption>,
}

impl Default for Catalog {
    fn default() -> Self {
        Self {
            retain: None,
            periodic_refresh: false,
            refresh_interval: one_hour(),
            fallback_namespace: None,
            foreign_snapshots: None,
            adoption: None,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IdentityDefaults {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub cluster: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub hostname_expr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub username_expr: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ServiceType {
    #[default]
    ClusterIP,
    NodePort,
    LoadBalancer,
}

fn default_server_port() -> i32 {
    51515
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerService {
    #[serde(default, rename = "type")]
    pub service_type: ServiceType,
    #[serde(default = "default_server_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
}

/// The kopia UI server.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Server {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<SecretAuthRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServerService>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_security_context: Option<PodSecurityContext>,
    /// ClusterRepository only: where the server runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub namespace: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretAuthRef {
    pub secret_ref: SecretRef,
}

/// The inline managed Maintenance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RepositoryMaintenance {
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<MaintenanceSchedule>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(crate::shared::mover::rule::MAINTENANCE).message(crate::shared::mover::rule::MAINTENANCE_MESSAGE))]
    pub mover: Option<MoverSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<FailurePolicy>,
    #[serde(default)]
    pub takeover_policy: TakeoverPolicy,
    /// ClusterRepository only: where the managed Maintenance is created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub namespace: Option<String>,
}

impl Default for RepositoryMaintenance {
    fn default() -> Self {
        Self {
            enabled: true,
            schedule: None,
            mover: None,
            failure_policy: None,
            takeover_policy: TakeoverPolicy::Never,
            namespace: None,
        }
    }
}

/// What happens to a Snapshot using this repository when the Snapshot's namespace is deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum OnNamespaceDelete {
    #[default]
    Orphan,
    Delete,
}

fn ten() -> i32 {
    10
}

/// The mass-deletion breaker (ADR-0006).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeletionProtection {
    /// Pending external destructive deletions at which every one of them is held; 0 disables.
    #[serde(default = "ten")]
    #[schemars(range(min = 0))]
    pub threshold: i32,
}

impl Default for DeletionProtection {
    fn default() -> Self {
        Self { threshold: ten() }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum RepositoryMode {
    #[default]
    ReadWrite,
    ReadOnly,
}

/// What an open breaker does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum OnFailure {
    // Open the breaker: phase Degraded, consumers park.
    #[default]
    Degrade,
    // Only the condition, the Event and the metric.
    Alert,
}

fn thirty_minutes() -> Duration {
    Duration::from_secs(30 * 60)
}

fn three() -> i32 {
    3
}

/// The breaker's only sensor (ADR-0007).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Probe {
    /// `false` disables both the probe and the breaker.
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default = "thirty_minutes")]
    #[x_kube(validation = Rule::new("duration(self.matches('^[0-9]+$') ? self + 's' : self) >= duration('30s')").message("health.probe.interval must be at least 30s"))]
    pub interval: Duration,
    /// Consecutive failed connects that open the breaker.
    #[serde(default = "three")]
    #[schemars(range(min = 1))]
    pub failure_threshold: i32,
    #[serde(default)]
    pub on_failure: OnFailure,
}

impl Default for Probe {
    fn default() -> Self {
        Self { enabled: true, interval: thirty_minutes(), failure_threshold: three(), on_failure: OnFailure::Degrade }
    }
}

fn one_thousand() -> i32 {
    1000
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    /// Index-blob count above which `IndexBlobHealth=False`; 0 disables the check.
    #[serde(default = "one_thousand")]
    #[schemars(range(min = 0))]
    pub index_blob_warn_threshold: i32,
    #[serde(default)]
    #[schemars(extend("default" = {}))]
    pub probe: Probe,
}

impl Default for Health {
    fn default() -> Self {
        Self { index_blob_warn_threshold: one_thousand(), probe: Probe::default() }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Epoch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_duration: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_frequency: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub advance_on_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub advance_on_size_mi_b: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub checkpoint_frequency: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub delete_parallelism: Option<i32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetentionPeriod {
    pub period: Duration,
}

/// Object lock on the backend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = ExactlyOne { prefix: "blobRetention: " })]
pub enum BlobRetention {
    Governance(RetentionPeriod),
    Compliance(RetentionPeriod),
    Disabled(True),
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Parameters {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<Epoch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("!has(self.disabled) || self.disabled == true").message("blobRetention.disabled must be true; choose governance or compliance instead"))]
    pub blob_retention: Option<BlobRetention>,
}

/// The spec fields Repository and ClusterRepository share.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RepositoryCommonSpec {
    /// Where the repository lives; exactly one key.
    pub backend: Backend,
    pub encryption: Encryption,
    #[serde(default)]
    #[schemars(extend("default" = {}))]
    pub create: CreateSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<Seed>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<Bootstrap>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mover_defaults: Option<MoverDefaults>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_defaults: Option<ScheduleDefaults>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<Concurrency>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catalog: Option<Catalog>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_defaults: Option<IdentityDefaults>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<Server>,
    #[serde(default)]
    #[schemars(extend("default" = {}))]
    pub maintenance: RepositoryMaintenance,
    #[serde(default)]
    pub on_namespace_delete: OnNamespaceDelete,
    #[serde(default)]
    #[schemars(extend("default" = {}))]
    pub deletion_protection: DeletionProtection,
    #[serde(default)]
    pub mode: RepositoryMode,
    #[serde(default)]
    pub suspend: bool,
    #[serde(default)]
    #[schemars(extend("default" = {}))]
    pub health: Health,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Parameters>,
}

impl RepositoryCommonSpec {
    /// A minimal spec: the backend and the password, everything else at its default.
    pub fn new(backend: Backend, password: SecretKeyRef) -> Self {
        Self {
            backend,
            encryption: Encryption { password_secret_ref: password },
            create: CreateSpec::default(),
            seed: None,
            bootstrap: None,
            mover_defaults: None,
            schedule_defaults: None,
            concurrency: None,
            catalog: None,
            identity_defaults: None,
            server: None,
            maintenance: RepositoryMaintenance::default(),
            on_namespace_delete: OnNamespaceDelete::default(),
            deletion_protection: DeletionProtection::default(),
            mode: RepositoryMode::default(),
            suspend: false,
            health: Health::default(),
            parameters: None,
        }
    }
}

/// One kopia repository that belongs to a namespace.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "kopiur.home-operations.com",
    version = "v1alpha1",
    kind = "Repository",
    plural = "repositories",
    shortname = "kopiarepo",
    category = "kopiur",
    namespaced,
    status = "RepositoryStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Backend","type":"string","jsonPath":".status.backend"}"#,
    printcolumn = r#"{"name":"Server","type":"string","jsonPath":".status.server.endpoint","priority":1}"#,
    printcolumn = r#"{"name":"IndexBlobs","type":"integer","jsonPath":".status.storageStats.indexBlobCount","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.maintenance) || !has(self.maintenance.namespace)").message("maintenance.namespace is only valid on ClusterRepository").reason(Reason::FieldValueForbidden).field_path(".maintenance.namespace"),
    validation = Rule::new("!has(self.catalog) || !has(self.catalog.fallbackNamespace)").message("catalog.fallbackNamespace is only valid on ClusterRepository").reason(Reason::FieldValueForbidden).field_path(".catalog.fallbackNamespace"),
)]
pub struct RepositorySpec {
    #[serde(flatten)]
    pub common: RepositoryCommonSpec,
    /// Other namespaces whose objects (Snapshots, policies, schedules, Restores, Maintenances,
    /// replications) may use this Repository, by name. Absent: only its own namespace. A
    /// consumer of a namespace not listed is parked `NamespaceNotAllowed`, and so are its
    /// deletions, whose batch Jobs run here with this namespace's credentials.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 256),
        inner(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))
    )]
    pub allowed_namespaces: Vec<String>,
}

impl RepositorySpec {
    /// Whether a consumer of namespace `consumer` may use this Repository of namespace `home`.
    pub fn admits(&self, home: &str, consumer: &str) -> bool {
        consumer == home || self.allowed_namespaces.iter().any(|n| n == consumer)
    }
}
