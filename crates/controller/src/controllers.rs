//! How the controller is wired: one watch per kind, fanned out to every controller that needs it.
//!
//! [`build`] opens one watcher + reflector per kind ([`Feed`]) and returns the crate-root
//! [`Context`] over their stores. Each controller then subscribes to the feeds it reacts to:
//! its own kind through `Controller::for_shared_stream`, its referents through
//! `watches_shared_stream` with a mapper (Job → owner, Repository → parked consumers, Secret →
//! consumers waiting on credentials, …). [`run`] starts the feeds once every subscriber exists,
//! so none misses an event, and drives the controllers until shutdown.
//!
//! A feed applies each event to its store before it hands the object to any subscriber, so a
//! reconcile triggered by it reads the new state. Subscribers get every touched object, deleted
//! ones included (kube's own `store_shared` subscribers get no deletes and hold the root stream
//! when one subscriber lags; these are unbounded and never hold it).
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kopiur_api::{ClusterRepository, Repository};
use kube::runtime::{Controller, watcher};
use kube::{Api, Client, ResourceExt};

use crate::config::Config;
use crate::context::{Context, Stores, StoresSynced};
use crate::error_events::error_policy;
use crate::feeds::{Feed, Feeds};
use crate::metrics::Metrics;
use crate::repository::reconcile;
use crate::watch::{JobOwner, owned_by, secret_referrers};

/// The label every mover Job kopiur creates carries (the Job watch selects on it).
pub const MANAGED_JOBS: &str = "app.kubernetes.io/managed-by=kopiur";

/// One feed per kind (not started) and the crate-root context over their stores.
pub fn build(client: &Client, config: Config, metrics: Arc<Metrics>) -> (Arc<Context>, Feeds) {
    let all = watcher::Config::default;
    // Cluster-scoped kinds: every object.
    macro_rules! feed {
        ($k:ty, $wc:expr, $slim:expr) => {
            Feed::<$k>::new(Api::all(client.clone()), $wc, $slim)
        };
    }
    // Namespaced kinds: the served namespaces (every one, or the namespaced install's list).
    macro_rules! ns_feed {
        ($k:ty, $wc:expr, $slim:expr) => {{
            let (client, namespaces) = (client.clone(), config.watch_namespaces.clone());
            Feed::<$k>::from_source(Box::new(move |wc| crate::scope::watch::<$k>(client, namespaces, wc)), $wc, $slim)
        }};
    }
    // Slimmed as before: the pipeline's own kinds and Maintenance (the stores that grow with a
    // fleet); the others as the apiserver sends them. Each is `(feed, store, synced)`.
    let jobs = ns_feed!(Job, all().labels(MANAGED_JOBS), None);
    let secrets = ns_feed!(kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Secret>, all(), None);
    let namespaces = feed!(kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Namespace>, all(), None);
    let pvcs = ns_feed!(kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::PersistentVolumeClaim>, all(), None);
    let repos = ns_feed!(Repository, all(), None);
    let crepos = feed!(ClusterRepository, all(), None);
    // Snapshots, the store that grows with a fleet, are read lean (`lean.rs`), then slimmed.
    let snapshot_watch = {
        let (client, namespaces) = (client.clone(), config.watch_namespaces.clone());
        Box::new(move |wc| crate::lean::snapshot_watch(client, namespaces, wc))
    };
    let snapshots = Feed::<kopiur_api::Snapshot>::from_source(snapshot_watch, all(), Some(crate::heap::slim_snapshot));
    let schedules = ns_feed!(kopiur_api::SnapshotSchedule, all(), Some(crate::heap::slim_object));
    let policies = ns_feed!(kopiur_api::SnapshotPolicy, all(), Some(crate::heap::slim_object));
    let restores = ns_feed!(kopiur_api::Restore, all(), None);
    let maintenances = ns_feed!(kopiur_api::Maintenance, all(), Some(crate::heap::slim_object));
    let replications = ns_feed!(kopiur_api::RepositoryReplication, all(), None);
    let snapshot_replications = ns_feed!(kopiur_api::SnapshotReplication, all(), None);
    // Each kind's feed, store and synced flag go to the field of its name in `Feeds`, `Stores`
    // and `StoresSynced`.
    macro_rules! split {
        ($($kind:ident),*) => {
            (Feeds { $($kind: $kind.0),* }, Stores { $($kind: $kind.1),*, synced: StoresSynced { $($kind: $kind.2),* } })
        };
    }
    let (feeds, stores) = split!(
        jobs,
        secrets,
        namespaces,
        pvcs,
        repos,
        crepos,
        snapshots,
        schedules,
        policies,
        restores,
        maintenances,
        replications,
        snapshot_replications
    );
    (Arc::new(Context::new(client.clone(), config, metrics, stores)), feeds)
}

/// The Repository and ClusterRepository controllers: each over its own kind, its owned Jobs
/// and the Secrets it references (metadata only: values never reach us).
fn repositories(ctx: &Arc<Context>, feeds: &mut Feeds) -> impl Future<Output = ()> + Send + 'static {
    let rctx = ctx.clone();
    let op_ns = ctx.config.namespace.clone();
    let (repos, crepos) = (ctx.stores.repos.clone(), ctx.stores.crepos.clone());
    let cfg = ctx.config.controller_config();

    let rs = repos.clone();
    let ns = op_ns.clone();
    let a = Controller::for_shared_stream(feeds.repos.subscribe(), repos.clone())
        // Job -> owning repository.
        .watches_shared_stream(feeds.jobs.subscribe(), |job: Arc<Job>| owned_by(&job, JobOwner::Repository))
        // Secret -> repositories that reference it.
        .watches_shared_stream(feeds.secrets.subscribe(), move |sec| {
            secret_referrers(&rs.state(), &sec.namespace().unwrap_or_default(), &sec.name_any(), &ns)
        })
        .with_config(cfg.clone())
        .shutdown_on_signal()
        .run(reconcile::<Repository>, error_policy::<Repository>, rctx.clone())
        .for_each(crate::error_events::settle);
    let cs = crepos.clone();
    let b = Controller::for_shared_stream(feeds.crepos.subscribe(), crepos)
        // Job -> owning ClusterRepository.
        .watches_shared_stream(feeds.jobs.subscribe(), |job: Arc<Job>| owned_by(&job, JobOwner::ClusterRepository))
        .watches_shared_stream(feeds.secrets.subscribe(), move |sec| {
            secret_referrers(&cs.state(), &sec.namespace().unwrap_or_default(), &sec.name_any(), &op_ns)
        })
        .with_config(cfg)
        .shutdown_on_signal()
        .run(reconcile::<ClusterRepository>, error_policy::<ClusterRepository>, rctx)
        .for_each(crate::error_events::settle);
    async move {
        futures::join!(a, b);
    }
}

/// Wires every controller over the feeds, starts the watches, and runs until shutdown.
pub async fn run(ctx: Arc<Context>, mut feeds: Feeds) {
    let repositories = repositories(&ctx, &mut feeds);
    // The backup pipeline: Snapshot, SnapshotSchedule, SnapshotPolicy and Restore.
    let pipeline = crate::pipeline::wire(&ctx, &mut feeds);
    let maintenance = crate::maintenance::wire(&ctx, &mut feeds);
    let replication = crate::replication::wire(&ctx, &mut feeds);
    // `kopiur_resource_phase{kind="RepositoryReplication"}` (the pipeline publishes the others).
    tokio::spawn(crate::resource_phase::run(ctx.metrics.clone(), ctx.stores.replications.clone()));
    // SnapshotReplication is [next]: every object is answered Stalled / FeatureNotImplemented.
    let snapshot_replication = crate::snapshot_replication::wire(&ctx, &mut feeds);
    // Each run's Role goes when its Job finishes (issue 31).
    tokio::spawn(crate::mover_rbac::revoke_finished(ctx.client.clone(), feeds.jobs.subscribe()));
    feeds.start();
    futures::join!(repositories, pipeline, maintenance, replication, snapshot_replication);
}
