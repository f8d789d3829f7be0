//! Wires the pipeline's reconcilers to the kube runtime: one controller per kind, shared
//! reflector stores for every referent, and watch mappers so a parked consumer is enqueued as
//! soon as its repository changes (the store is updated before the event is yielded, so the
//! reconcile sees the new phase).
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use kopiur_api::restore::RestorePhase;
use kopiur_api::shared::RepositoryKind;
use kopiur_api::snapshot::SnapshotPhase;
use kopiur_api::{ClusterRepository, Maintenance, Repository, Restore, Snapshot, SnapshotPolicy, SnapshotSchedule};
use kube::runtime::controller::Action;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::mpsc;

use super::ctx::{PipelineCtx, Stores};
use crate::config::Config;
use crate::metrics::Metrics;
use crate::repository::Error;
use crate::synced::{self, SyncMark, Synced};

fn error_policy<K: Resource<DynamicType = ()>>(obj: Arc<K>, err: &Error, ctx: Arc<PipelineCtx>) -> Action {
    crate::error_events::report(&ctx.recorder, obj.as_ref(), err);
    let class = err.class();
    ctx.metrics.reconcile_errors.inc(&[std::any::type_name::<K>().rsplit("::").next().unwrap_or("?"), class.label()]);
    tracing::warn!(error = %err, class = class.label(), "pipeline reconcile failed");
    Action::requeue(class.requeue())
}

/// Snapshots waiting on a repository: not yet terminal, or deleting, and pinned to it (or not
/// pinned yet, in its namespace).
fn parked_on(snaps: &Store<Snapshot>, kind: &str, ns: Option<&str>, name: &str) -> Vec<ObjectRef<Snapshot>> {
    snaps
        .state()
        .iter()
        .filter(|s| {
            let st = s.status.as_ref();
            let waiting = s.meta().deletion_timestamp.is_some()
                || matches!(st.and_then(|x| x.phase.as_ref()), None | Some(SnapshotPhase::Pending))
                || super::pin::outstanding(s);
            if !waiting {
                return false;
            }
            match st.and_then(|x| x.resolved.as_ref()).and_then(|r| r.repository.as_ref()) {
                Some(r) => format!("{:?}", r.kind) == kind && r.name == name && r.namespace.as_deref() == ns,
                None => ns.is_none() || s.namespace().as_deref() == ns,
            }
        })
        .map(|s| ObjectRef::from_obj(s.as_ref()))
        .collect()
}

/// Restores not yet past the gate, in a namespace (or everywhere for a ClusterRepository).
/// The kopiur kinds that own mover Jobs. Matched exhaustively where a Job event is routed, so
/// a new owning kind must be routed (or said to be watched elsewhere) to compile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobOwner {
    Snapshot,
    Restore,
    Repository,
    ClusterRepository,
    Maintenance,
    RepositoryReplication,
}

impl JobOwner {
    pub const ALL: [JobOwner; 6] = [
        Self::Snapshot,
        Self::Restore,
        Self::Repository,
        Self::ClusterRepository,
        Self::Maintenance,
        Self::RepositoryReplication,
    ];

    pub fn kind(self) -> &'static str {
        match self {
            Self::Snapshot => "Snapshot",
            Self::Restore => "Restore",
            Self::Repository => "Repository",
            Self::ClusterRepository => "ClusterRepository",
            Self::Maintenance => "Maintenance",
            Self::RepositoryReplication => "RepositoryReplication",
        }
    }

    /// The owner reference's kind, when its API group is kopiur's (a `Snapshot` of another
    /// group, such as a VolumeSnapshot's, is not ours).
    pub fn of(api_version: &str, kind: &str) -> Option<JobOwner> {
        let group = api_version.split_once('/').map(|(g, _)| g).unwrap_or("");
        if group != kopiur_api::names::GROUP {
            return None;
        }
        Self::ALL.into_iter().find(|o| o.kind() == kind)
    }
}

fn parked_restores(restores: &Store<Restore>, ns: Option<&str>) -> Vec<ObjectRef<Restore>> {
    restores
        .state()
        .iter()
        .filter(|r| ns.is_none() || r.namespace().as_deref() == ns)
        .filter(|r| {
            matches!(
                r.status.as_ref().and_then(|s| s.phase.as_ref()),
                None | Some(RestorePhase::Pending | RestorePhase::Resolving)
            )
        })
        .map(|r| ObjectRef::from_obj(r.as_ref()))
        .collect()
}

/// A minimal mpsc receiver stream (one adapter, no extra dependency).
struct ReceiverStream<T>(mpsc::Receiver<T>);

impl<T> futures::Stream for ReceiverStream<T> {
    type Item = T;
    fn poll_next(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<T>> {
        self.0.poll_recv(cx)
    }
}

/// An unbounded receiver as a stream (the decoupled reflector never waits on the controller).
struct UnboundedStream<T>(mpsc::UnboundedReceiver<T>);

impl<T> futures::Stream for UnboundedStream<T> {
    type Item = T;
    fn poll_next(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<T>> {
        self.0.poll_recv(cx)
    }
}

/// A store fed by a reflector polled in its own task, and the trigger stream for a
/// `Controller::for_stream` over it. Objects are slimmed before the store (`heap::slim`:
/// `managedFields` and the `kubectl apply` copy, which nothing here reads); `fanout` sees every event, so
/// other controllers can map it without a watch of their own.
fn decoupled<K>(
    client: &Client,
    wc: &watcher::Config,
    fanout: impl Fn(&K) + Send + 'static,
) -> (Store<K>, Synced, impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static)
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let (mark, synced) = synced::flag();
    let events = marked(
        reflector::reflector(
            writer,
            watcher(Api::<K>::all(client.clone()), wc.clone()).modify(|o| crate::heap::slim(o.meta_mut())),
        ),
        mark,
    )
    .default_backoff()
    .touched_objects();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut s = std::pin::pin!(events);
        while let Some(ev) = s.next().await {
            if let Ok(o) = &ev {
                fanout(o);
            }
            if tx.send(ev).is_err() {
                break;
            }
        }
    });
    (store, synced, UnboundedStream(rx))
}

/// Raises `mark` when the reflector has applied the stream's first `InitDone` to its store.
fn marked<K, S>(events: S, mark: SyncMark) -> impl futures::Stream<Item = S::Item> + Send + 'static
where
    K: Send + 'static,
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    events.inspect(move |ev| {
        if let Ok(e) = ev {
            mark.observe(e);
        }
    })
}

pub async fn run(client: Client, config: Config, metrics: Arc<Metrics>) {
    let wc = watcher::Config::default();
    // Referent stores driven here.
    let (jobs, job_w) = reflector::store::<Job>();
    let (job_mark, jobs_synced) = synced::flag();
    let job_events = marked(
        reflector::reflector(
            job_w,
            watcher(
                Api::<Job>::all(client.clone()),
                watcher::Config::default().labels("app.kubernetes.io/managed-by=kopiur"),
            ),
        ),
        job_mark,
    )
    .default_backoff()
    .touched_objects();
    let (repos, repo_w) = reflector::store::<Repository>();
    let repo_events = reflector::reflector(repo_w, watcher(Api::<Repository>::all(client.clone()), wc.clone()))
        .default_backoff()
        .touched_objects();
    let (crepos, crepo_w) = reflector::store::<ClusterRepository>();
    let crepo_events =
        reflector::reflector(crepo_w, watcher(Api::<ClusterRepository>::all(client.clone()), wc.clone()))
            .default_backoff()
            .touched_objects();
    let (pvcs, pvc_w) = reflector::store();
    let (pvc_mark, pvcs_synced) = synced::flag();
    let pvc_events = marked(
        reflector::reflector(
            pvc_w,
            watcher(Api::<kube::core::PartialObjectMeta<PersistentVolumeClaim>>::all(client.clone()), wc.clone()),
        ),
        pvc_mark,
    )
    .default_backoff()
    .touched_objects();

    let (secrets, secret_w) = reflector::store();
    let secret_events = reflector::reflector(
        secret_w,
        watcher(Api::<kube::core::PartialObjectMeta<Secret>>::all(client.clone()), wc.clone()),
    )
    .default_backoff()
    .touched_objects();

    let (namespaces, ns_w) = reflector::store();
    let ns_events = reflector::reflector(
        ns_w,
        watcher(
            Api::<kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Namespace>>::all(client.clone()),
            wc.clone(),
        ),
    )
    .default_backoff()
    .touched_objects();

    let (maintenances, maint_w) = reflector::store::<Maintenance>();
    let (maint_mark, maintenances_synced) = synced::flag();
    let maint_events = marked(
        reflector::reflector(
            maint_w,
            watcher(Api::<Maintenance>::all(client.clone()), wc.clone()).modify(|m| crate::heap::slim(m.meta_mut())),
        ),
        maint_mark,
    )
    .default_backoff()
    .touched_objects();

    // Snapshots and SnapshotSchedules: the reflector runs in its own task so its store keeps
    // syncing (and signals readiness) however busy the controller is; the deletion path waits
    // on that signal, because a breaker counted over a half-synced store would under-count.
    // One Snapshot watch serves three controllers: the Snapshot store, and (mapped here) the
    // owning SnapshotSchedule and the referenced SnapshotPolicy.
    let (sched_tx, sched_rx) = mpsc::unbounded_channel::<ObjectRef<SnapshotSchedule>>();
    let (policy_tx, policy_rx) = mpsc::unbounded_channel::<ObjectRef<SnapshotPolicy>>();
    let pvc_policy_tx = policy_tx.clone();
    let ns_policy_tx = policy_tx.clone();
    let (repo_policy_tx, crepo_policy_tx) = (policy_tx.clone(), policy_tx.clone());
    let (snapshots, snapshots_synced, snap_trigger) = decoupled::<Snapshot>(&client, &wc, move |s: &Snapshot| {
        let ns = s.namespace().unwrap_or_default();
        for o in s.owner_references().iter().filter(|o| o.controller == Some(true) && o.kind == "SnapshotSchedule") {
            let _ = sched_tx.send(ObjectRef::new(&o.name).within(&ns));
        }
        if let Some(p) = &s.spec.policy_ref {
            let _ = policy_tx.send(ObjectRef::new(&p.name).within(p.namespace.as_deref().unwrap_or(&ns)));
        }
    });
    let (schedules, schedules_synced, sched_trigger) = decoupled::<SnapshotSchedule>(&client, &wc, |_| {});
    // Policies too: their store's readiness is read by the schedule reconciler.
    let (policies, policies_synced, policy_trigger) = decoupled::<SnapshotPolicy>(&client, &wc, |_| {});
    let snap_ctl = Controller::for_stream(snap_trigger, snapshots.clone());
    let sched_ctl = Controller::for_stream(sched_trigger, schedules.clone());
    let policy_ctl = Controller::for_stream(policy_trigger, policies.clone());

    let ctx = Arc::new(PipelineCtx {
        client: client.clone(),
        config: config.clone(),
        metrics,
        recorder: Recorder::new(
            client.clone(),
            Reporter { controller: "kopiur-controller".into(), instance: Some(config.identity.clone()) },
        ),
        stores: Stores {
            jobs,
            repos,
            crepos,
            policies,
            snapshots: snapshots.clone(),
            schedules,
            pvcs: pvcs.clone(),
            secrets,
            namespaces,
            maintenances,
            synced: super::ctx::StoresSynced {
                jobs: jobs_synced,
                policies: policies_synced,
                snapshots: snapshots_synced,
                schedules: schedules_synced,
                pvcs: pvcs_synced,
                maintenances: maintenances_synced,
            },
        },
        mover_rbac_ready: Mutex::new(Default::default()),
        dispatch: tokio::sync::Notify::new(),
    });

    let restore_ctl = Controller::new(Api::<Restore>::all(client.clone()), wc.clone());
    let restores = restore_ctl.store();
    let (snap_tx, snap_rx) = mpsc::channel::<ObjectRef<Snapshot>>(1024);
    let (restore_tx, restore_rx) = mpsc::channel::<ObjectRef<Restore>>(1024);

    // Job -> its Snapshot or Restore (backup and restore Jobs are owned by their CR).
    {
        let (stx, rtx) = (snap_tx.clone(), restore_tx.clone());
        tokio::spawn(async move {
            let mut s = std::pin::pin!(job_events);
            while let Some(ev) = s.next().await {
                let Ok(job) = ev else { continue };
                let ns = job.namespace().unwrap_or_default();
                for o in job.owner_references() {
                    match JobOwner::of(&o.api_version, &o.kind) {
                        Some(JobOwner::Snapshot) => drop(stx.send(ObjectRef::new(&o.name).within(&ns)).await),
                        Some(JobOwner::Restore) => drop(rtx.send(ObjectRef::new(&o.name).within(&ns)).await),
                        // Their own controllers watch these Jobs.
                        Some(
                            JobOwner::Repository
                            | JobOwner::ClusterRepository
                            | JobOwner::Maintenance
                            | JobOwner::RepositoryReplication,
                        ) => {}
                        // Not a kopiur kind (another controller's Job).
                        None => {}
                    }
                }
            }
        });
    }
    // Repository -> parked consumers (G3). The reflector has already updated the store the
    // reconcile reads, so the re-reconcile sees the new phase.
    {
        let (stx, rtx, s, r) = (snap_tx.clone(), restore_tx.clone(), snapshots.clone(), restores.clone());
        let policies = ctx.stores.policies.clone();
        tokio::spawn(async move {
            let mut ev = std::pin::pin!(repo_events);
            while let Some(e) = ev.next().await {
                let Ok(repo) = e else { continue };
                let ns = repo.namespace();
                // The policies targeting it (their RepositoriesReady and Ready follow it).
                for x in crate::snapshot_policy::sources::policies_targeting(
                    &policies.state(),
                    Some(ns.as_deref().unwrap_or_default()),
                    &repo.name_any(),
                ) {
                    let _ = repo_policy_tx.send(x);
                }
                for x in parked_on(&s, "Repository", ns.as_deref(), &repo.name_any()) {
                    let _ = stx.send(x).await;
                }
                // A Restore may reference a Repository in another namespace (docs/design/api-contract.md §1.8), so
                // parked Restores everywhere are looked at (a Blocked RepositoryNotFound one
                // resumes when the Repository appears).
                for x in parked_restores(&r, None) {
                    let _ = rtx.send(x).await;
                }
            }
        });
    }
    {
        let (stx, rtx, s, r) = (snap_tx.clone(), restore_tx.clone(), snapshots.clone(), restores.clone());
        let policies = ctx.stores.policies.clone();
        tokio::spawn(async move {
            let mut ev = std::pin::pin!(crepo_events);
            while let Some(e) = ev.next().await {
                let Ok(repo) = e else { continue };
                for x in crate::snapshot_policy::sources::policies_targeting(&policies.state(), None, &repo.name_any())
                {
                    let _ = crepo_policy_tx.send(x);
                }
                for x in parked_on(&s, "ClusterRepository", None, &repo.name_any()) {
                    let _ = stx.send(x).await;
                }
                for x in parked_restores(&r, None) {
                    let _ = rtx.send(x).await;
                }
            }
        });
    }
    // Maintenance -> Snapshots parked on its repository (the `maintenance.*` preflight variables).
    {
        let (stx, s) = (snap_tx.clone(), snapshots.clone());
        tokio::spawn(async move {
            let mut ev = std::pin::pin!(maint_events);
            while let Some(e) = ev.next().await {
                let Ok(m) = e else { continue };
                let r = &m.spec.repository;
                let ns = match r.kind {
                    RepositoryKind::Repository => r.namespace.clone().or_else(|| m.namespace()),
                    RepositoryKind::ClusterRepository => None,
                };
                for x in parked_on(&s, &format!("{:?}", r.kind), ns.as_deref(), &r.name) {
                    let _ = stx.send(x).await;
                }
            }
        });
    }
    // Secret -> Snapshots not yet launched and Restores not past the gate in its namespace
    // (MissingCredentialsSecret; a changed Secret may now hold the password key).
    {
        let (stx, rtx, s, r) = (snap_tx.clone(), restore_tx.clone(), snapshots.clone(), restores.clone());
        tokio::spawn(async move {
            let mut ev = std::pin::pin!(secret_events);
            while let Some(e) = ev.next().await {
                let Ok(sec) = e else { continue };
                let ns = sec.namespace();
                for x in s.state().iter().filter(|x| x.namespace() == ns).filter(|x| {
                    matches!(x.status.as_ref().and_then(|st| st.phase.as_ref()), None | Some(SnapshotPhase::Pending))
                }) {
                    let _ = stx.send(ObjectRef::from_obj(x.as_ref())).await;
                }
                if let Some(ns) = ns.as_deref() {
                    for x in parked_restores(&r, Some(ns)) {
                        let _ = rtx.send(x).await;
                    }
                }
            }
        });
    }
    // PVC -> Snapshots waiting for their source, Restores waiting for their target, and the
    // policies of its namespace with a pvcSelector (their `resolved.sources` expansion).
    {
        let (stx, rtx, s, r) = (snap_tx.clone(), restore_tx.clone(), snapshots.clone(), restores.clone());
        let policies = ctx.stores.policies.clone();
        tokio::spawn(async move {
            let mut ev = std::pin::pin!(pvc_events);
            while let Some(e) = ev.next().await {
                let Ok(p) = e else { continue };
                let ns = p.namespace();
                for x in policies.state().iter().filter(|x| x.namespace() == ns) {
                    if crate::snapshot_policy::sources::uses_selector(&x.spec.sources) {
                        let _ = pvc_policy_tx.send(ObjectRef::from_obj(x.as_ref()));
                    }
                }
                for x in s.state().iter().filter(|x| x.namespace() == ns).filter(|x| {
                    matches!(x.status.as_ref().and_then(|st| st.phase.as_ref()), None | Some(SnapshotPhase::Pending))
                }) {
                    let _ = stx.send(ObjectRef::from_obj(x.as_ref())).await;
                }
                for x in parked_restores(&r, ns.as_deref()) {
                    let _ = rtx.send(x).await;
                }
            }
        });
    }
    tokio::spawn(super::gauges::run(ctx.clone(), restores.clone()));
    // Namespace -> its deleting Snapshots (the onNamespaceDelete axis); and, when its labels
    // changed while some ClusterRepository admits namespaces by selector, the consumers whose
    // tenancy verdict may flip (docs/design/api-contract.md §5): Snapshots not yet launched or being deleted,
    // Restores not past the gate, and the namespace's SnapshotPolicies.
    {
        let (stx, rtx, s, r) = (snap_tx.clone(), restore_tx.clone(), snapshots.clone(), restores.clone());
        let (policies, crepos) = (ctx.stores.policies.clone(), ctx.stores.crepos.clone());
        tokio::spawn(async move {
            let mut seen = crate::gating::NamespaceLabels::default();
            let mut ev = std::pin::pin!(ns_events);
            while let Some(e) = ev.next().await {
                let Ok(n) = e else { continue };
                let ns = n.name_any();
                let relabelled = seen.changed(&ns, n.metadata.labels.as_ref());
                if n.metadata.deletion_timestamp.is_some() {
                    for x in s.state().iter().filter(|x| x.namespace().as_deref() == Some(ns.as_str())) {
                        if x.meta().deletion_timestamp.is_some() {
                            let _ = stx.send(ObjectRef::from_obj(x.as_ref())).await;
                        }
                    }
                    continue;
                }
                if !relabelled || !crate::gating::any_label_dependent(&crepos) {
                    continue;
                }
                tracing::debug!(namespace = %ns, "namespace labels changed; re-evaluating tenancy of its consumers");
                for x in s.state().iter().filter(|x| x.namespace().as_deref() == Some(ns.as_str())) {
                    let waiting = x.meta().deletion_timestamp.is_some()
                        || matches!(
                            x.status.as_ref().and_then(|st| st.phase.as_ref()),
                            None | Some(SnapshotPhase::Pending)
                        );
                    if waiting {
                        let _ = stx.send(ObjectRef::from_obj(x.as_ref())).await;
                    }
                }
                for x in parked_restores(&r, Some(ns.as_str())) {
                    let _ = rtx.send(x).await;
                }
                for x in policies.state().iter().filter(|x| x.namespace().as_deref() == Some(ns.as_str())) {
                    let _ = ns_policy_tx.send(ObjectRef::from_obj(x.as_ref()));
                }
            }
        });
    }
    // The ADR-0006 batch-delete dispatcher.
    tokio::spawn(super::dispatch::run(ctx.clone(), snap_tx.clone()));
    let snap_ctl = snap_ctl.reconcile_on(ReceiverStream(snap_rx));
    let restore_ctl = restore_ctl.reconcile_on(ReceiverStream(restore_rx));
    let sched_ctl = sched_ctl.reconcile_on(UnboundedStream(sched_rx));
    let policy_ctl = policy_ctl.reconcile_on(UnboundedStream(policy_rx));

    let cfg = config.controller_config();
    let a = snap_ctl
        .with_config(cfg.clone())
        .shutdown_on_signal()
        .run(super::reconcile::reconcile, error_policy::<Snapshot>, ctx.clone())
        .for_each(crate::error_events::settle);
    let b = sched_ctl
        .with_config(cfg.clone())
        .shutdown_on_signal()
        .run(crate::snapshot_schedule::reconcile::reconcile, error_policy::<SnapshotSchedule>, ctx.clone())
        .for_each(crate::error_events::settle);
    let c = policy_ctl
        .with_config(cfg.clone())
        .shutdown_on_signal()
        .run(crate::snapshot_policy::reconcile::reconcile, error_policy::<SnapshotPolicy>, ctx.clone())
        .for_each(crate::error_events::settle);
    let d = restore_ctl
        .with_config(cfg.clone())
        .shutdown_on_signal()
        .run(crate::restore::reconcile::reconcile, error_policy::<Restore>, ctx.clone())
        .for_each(crate::error_events::settle);
    futures::join!(a, b, c, d);
}

#[cfg(test)]
mod tests {
    use super::JobOwner;

    #[test]
    fn job_owners_are_kopiur_kinds_only() {
        for o in JobOwner::ALL {
            assert_eq!(JobOwner::of("kopiur.home-operations.com/v1alpha1", o.kind()), Some(o));
        }
        assert_eq!(JobOwner::of("snapshot.storage.k8s.io/v1", "Snapshot"), None, "another group's Snapshot");
        assert_eq!(JobOwner::of("batch/v1", "CronJob"), None);
        assert_eq!(JobOwner::of("v1", "Restore"), None);
        assert_eq!(JobOwner::of("kopiur.home-operations.com/v1alpha1", "Unknown"), None);
    }
}
