//! kopiur API types (`kopiur.home-operations.com/v1alpha1`) and the pure domain logic every
//! other crate shares: durations, cron slots with deterministic `H` and jitter, GFS retention
//! and identity resolution. No async runtime and no Kubernetes client live here.

pub mod error;
pub mod names;
pub mod schema;
pub mod shared;

pub mod cluster_repository;
pub mod maintenance;
pub mod repository;
pub mod repository_replication;
pub mod restore;
pub mod snapshot;
pub mod snapshot_policy;
pub mod snapshot_replication;
pub mod snapshot_schedule;

pub mod domain;

pub use error::Error;
pub use shared::duration::Duration;

pub use cluster_repository::{ClusterRepository, ClusterRepositorySpec};
pub use maintenance::{Maintenance, MaintenanceSpec};
pub use repository::{Repository, RepositorySpec};
pub use repository_replication::{RepositoryReplication, RepositoryReplicationSpec};
pub use restore::{Restore, RestoreSpec};
pub use snapshot::{Snapshot, SnapshotSpec};
pub use snapshot_policy::{SnapshotPolicy, SnapshotPolicySpec};
pub use snapshot_replication::{SnapshotReplication, SnapshotReplicationSpec};
pub use snapshot_schedule::{SnapshotSchedule, SnapshotScheduleSpec};

/// Every CRD this crate defines, in a stable order (used by CRD generation and tests).
pub fn crds() -> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> {
    use kube::CustomResourceExt;
    vec![
        Repository::crd(),
        ClusterRepository::crd(),
        SnapshotPolicy::crd(),
        Snapshot::crd(),
        SnapshotSchedule::crd(),
        Restore::crd(),
        Maintenance::crd(),
        RepositoryReplication::crd(),
        SnapshotReplication::crd(),
    ]
}
