//! The one shared context every controller is built from: the client, the configuration, the
//! metrics, one Event recorder, and one reflector store per watched kind (each fed by one watch,
//! see `controllers.rs`), with a sync flag per store.
//!
//! The per-kind contexts (`repository::Ctx`, `snapshot::ctx::PipelineCtx`,
//! `maintenance::runtime::RunCtx`) keep their own fields for now, but every store in them is a
//! clone of a store here: a kind is watched once, whoever reads it.
use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Secret};
use kopiur_api::{
    ClusterRepository, Maintenance, Repository, RepositoryReplication, Restore, Snapshot, SnapshotPolicy,
    SnapshotReplication, SnapshotSchedule,
};
use kube::Client;
use kube::core::PartialObjectMeta;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::Store;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::synced::Synced;

/// One store per watched kind. Secrets, Namespaces and PVCs are metadata only (a Secret's
/// values never reach the controller); Jobs are those labelled `managed-by=kopiur`.
#[derive(Clone)]
pub struct Stores {
    pub jobs: Store<Job>,
    pub secrets: Store<PartialObjectMeta<Secret>>,
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    pub pvcs: Store<PartialObjectMeta<PersistentVolumeClaim>>,
    pub repos: Store<Repository>,
    pub crepos: Store<ClusterRepository>,
    pub snapshots: Store<Snapshot>,
    pub schedules: Store<SnapshotSchedule>,
    pub policies: Store<SnapshotPolicy>,
    pub restores: Store<Restore>,
    pub maintenances: Store<Maintenance>,
    pub replications: Store<RepositoryReplication>,
    pub snapshot_replications: Store<SnapshotReplication>,
    pub synced: StoresSynced,
}

/// Whether each store has applied its watch's first full list (read these, never
/// `Store::wait_until_ready`: see `crate::synced`).
#[derive(Clone)]
pub struct StoresSynced {
    pub jobs: Synced,
    pub secrets: Synced,
    pub namespaces: Synced,
    pub pvcs: Synced,
    pub repos: Synced,
    pub crepos: Synced,
    pub snapshots: Synced,
    pub schedules: Synced,
    pub policies: Synced,
    pub restores: Synced,
    pub maintenances: Synced,
    pub replications: Synced,
    pub snapshot_replications: Synced,
}

/// The crate-root context: built once at start-up, shared by every controller.
pub struct Context {
    pub client: Client,
    pub config: Config,
    pub metrics: Arc<Metrics>,
    /// One recorder (its cache is keyed by object and reason, so kinds never collide).
    pub recorder: Recorder,
    pub stores: Stores,
}

impl Context {
    pub fn new(client: Client, config: Config, metrics: Arc<Metrics>, stores: Stores) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter { controller: "kopiur-controller".into(), instance: Some(config.identity.clone()) },
        );
        Self { client, config, metrics, recorder, stores }
    }
}
