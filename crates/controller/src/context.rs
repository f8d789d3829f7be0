//! The one shared context every controller is built from: the client, the configuration, the
//! metrics, one Event recorder, and one reflector store per watched kind (each fed by one watch,
//! see `controllers.rs`), with a sync flag per store.
//!
//! Every reconciler gets this one context, under this one name, with the helpers they share:
//! the repository gate, Secret presence, Events, the mover's RBAC. The helpers that hand out a
//! repository view (`repository`, `tenancy_allows`, `nudge`) are in `repo_view.rs`, next to
//! `RepoView`.
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Secret};
use kopiur_api::shared::RepositoryRef;
use kopiur_api::{
    ClusterRepository, Maintenance, Repository, RepositoryReplication, Restore, Snapshot, SnapshotPolicy,
    SnapshotReplication, SnapshotSchedule,
};
use kube::Client;
use kube::core::PartialObjectMeta;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::config::Config;
use crate::error::{ApiStep, Error};
use crate::gating::{Gate, repository_ready};
use crate::metrics::Metrics;
use crate::metrics::labels::JobLabels;
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
    /// Namespaces where the mover ServiceAccount and RoleBinding are known to exist.
    pub mover_rbac_ready: Mutex<HashSet<String>>,
    /// Last InvalidReinitializeAck value warned per repository uid (process memory).
    pub warned_acks: Mutex<HashMap<String, String>>,
    /// The process's view of the repository pin ledger (`repository::pins`): location key ->
    /// recorded pin (None: looked up, nothing recorded).
    pub pins: Mutex<HashMap<String, Option<String>>>,
    /// Wakes the batch-delete dispatcher (`snapshot::dispatch`) ahead of its tick.
    pub dispatch: tokio::sync::Notify,
    /// The last Ready reason told to each populated claim (by claim uid) in an Event.
    pub populate_told: Mutex<HashMap<String, String>>,
}

impl Context {
    pub fn new(client: Client, config: Config, metrics: Arc<Metrics>, stores: Stores) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter { controller: "kopiur-controller".into(), instance: Some(config.identity.clone()) },
        );
        Self {
            client,
            config,
            metrics,
            recorder,
            stores,
            mover_rbac_ready: Mutex::new(HashSet::new()),
            warned_acks: Mutex::new(HashMap::new()),
            pins: Mutex::new(HashMap::new()),
            dispatch: tokio::sync::Notify::new(),
            populate_told: Mutex::new(HashMap::new()),
        }
    }

    /// `RepositoryReady(R)`, with ClusterRepository tenancy read against the consumer
    /// namespace's labels from the Namespace store (a namespace the store does not hold fails
    /// closed for a selector). A relabelled namespace re-enqueues its consumers.
    pub fn gate(&self, consumer_ns: &str, r: &RepositoryRef) -> Gate {
        let labels = self.namespace_labels(consumer_ns);
        repository_ready(&self.stores.repos, &self.stores.crepos, consumer_ns, labels.as_ref(), r)
    }

    /// A namespace's labels from the store; None when the store does not hold it.
    pub fn namespace_labels(&self, ns: &str) -> Option<BTreeMap<String, String>> {
        self.stores.namespaces.get(&ObjectRef::new(ns)).map(|n| n.metadata.labels.clone().unwrap_or_default())
    }

    /// Of `names`, those with no Secret in `ns`.
    pub fn missing_secrets(&self, ns: &str, names: &[String]) -> Vec<String> {
        names.iter().filter(|n| self.stores.secrets.get(&ObjectRef::new(n).within(ns)).is_none()).cloned().collect()
    }

    /// Publishes an Event on `reference` (the note cut to 1 KiB); a failure is logged.
    pub async fn event(&self, reference: &ObjectReference, warning: bool, reason: &str, note: String) {
        let ev = Event {
            type_: if warning { EventType::Warning } else { EventType::Normal },
            reason: reason.to_string(),
            note: Some(crate::text::truncate(&note, 1024)),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(err) = self.recorder.publish(&ev, reference).await {
            tracing::warn!(%err, reason, "publishing an Event failed");
        }
    }

    /// The mover's ServiceAccount and RoleBinding in `ns` (server-side apply, once per
    /// namespace per process).
    pub async fn ensure_mover_rbac(&self, ns: &str) -> Result<(), Error> {
        crate::mover_rbac::ensure(&self.client, ns, &self.mover_rbac_ready, &self.config.mover_image_pull_secrets).await
    }

    /// Creates a mover Job in `ns` (the mover's RBAC first, the run's own Role after, owned
    /// by the Job), idempotent by name: the Job's deterministic name is the single-flight
    /// lock, so AlreadyExists means done. `true` when this call created it (counted in
    /// `jobs_created{kind}`).
    pub async fn create_mover_job(&self, ns: &str, job: &Job, kind: &str) -> Result<bool, Error> {
        self.ensure_mover_rbac(ns).await?;
        let jobs = kube::Api::<Job>::namespaced(self.client.clone(), ns);
        let (created, live) = match jobs.create(&Default::default(), job).await {
            Ok(live) => (true, Some(live)),
            Err(kube::Error::Api(e)) if e.code == 409 => (
                false,
                jobs.get_opt(&job.metadata.name.clone().unwrap_or_default())
                    .await
                    .step("read the existing mover Job")?,
            ),
            Err(e) => return Err(Error::api("create mover Job", e)),
        };
        // The run's one write permission, owned by the Job (also re-applied when the Job was
        // already there: a controller that stopped between the two calls left it missing).
        // The rules come from the Job built here; the live Job gives only its uid, and only
        // when it has the owner this Job names (a look-alike made by someone else gets none).
        if let Some(live) = live.filter(|l| l.metadata.owner_references == job.metadata.owner_references) {
            let mut ours = job.clone();
            ours.metadata.uid = live.metadata.uid;
            ours.metadata.namespace = Some(ns.to_string());
            crate::mover_rbac::ensure_run_role(&self.client, &ours).await?;
        }
        if created {
            self.metrics.jobs_created.inc(JobLabels { op: kind.into(), namespace: ns.into() });
        }
        Ok(created)
    }
}
