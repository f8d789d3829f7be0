//! Wires the pipeline's reconcilers to the kube runtime: one controller per kind, shared
//! reflector stores for every referent, and watch mappers so a parked consumer is enqueued as
//! soon as its repository changes (the store is updated before the event is yielded, so the
//! reconcile sees the new phase).
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kopiur_api::snapshot::SnapshotPhase;
use kopiur_api::{ClusterRepository, Repository, Snapshot, SnapshotPolicy, SnapshotSchedule};
use kube::runtime::controller::{Action, Config as CtlConfig};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};

use super::ctx::{PipelineCtx, Stores};
use crate::config::Config;
use crate::metrics::Metrics;
use crate::repository::Error;

fn error_policy<K>(_obj: Arc<K>, err: &Error, ctx: Arc<PipelineCtx>) -> Action {
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
                || matches!(st.and_then(|x| x.phase.as_ref()), None | Some(SnapshotPhase::Pending));
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

pub async fn run(client: Client, config: Config, metrics: Arc<Metrics>) {
    let wc = watcher::Config::default();
    // Referent stores driven here.
    let (jobs, job_w) = reflector::store::<Job>();
    let job_events = reflector::reflector(
        job_w,
        watcher(
            Api::<Job>::all(client.clone()),
            watcher::Config::default().labels("app.kubernetes.io/managed-by=kopiur"),
        ),
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
    let pvc_events = reflector::reflector(
        pvc_w,
        watcher(Api::<kube::core::PartialObjectMeta<PersistentVolumeClaim>>::all(client.clone()), wc.clone()),
    )
    .default_backoff()
    .touched_objects();

    let snap_ctl = Controller::new(Api::<Snapshot>::all(client.clone()), wc.clone());
    let sched_ctl = Controller::new(Api::<SnapshotSchedule>::all(client.clone()), wc.clone());
    let policy_ctl = Controller::new(Api::<SnapshotPolicy>::all(client.clone()), wc.clone());
    let snapshots = snap_ctl.store();
    let schedules = sched_ctl.store();
    let policies = policy_ctl.store();

    let ctx = Arc::new(PipelineCtx {
        client: client.clone(),
        config: config.clone(),
        metrics,
        recorder: Recorder::new(
            client.clone(),
            Reporter { controller: "kopiur-controller".into(), instance: Some(config.identity.clone()) },
        ),
        stores: Stores { jobs, repos, crepos, policies, snapshots: snapshots.clone(), schedules, pvcs: pvcs.clone() },
        mover_rbac_ready: Mutex::new(Default::default()),
    });

    // Job -> its Snapshot (backup Jobs are owned by their Snapshot).
    let snap_ctl = snap_ctl
        .watches_stream(job_events, |job: Job| {
            let ns = job.namespace().unwrap_or_default();
            job.owner_references()
                .iter()
                .filter(|o| o.kind == "Snapshot")
                .map(|o| ObjectRef::<Snapshot>::new(&o.name).within(&ns))
                .collect::<Vec<_>>()
        })
        .watches_stream(repo_events, {
            let s = snapshots.clone();
            move |r: Repository| parked_on(&s, "Repository", r.namespace().as_deref(), &r.name_any())
        })
        .watches_stream(crepo_events, {
            let s = snapshots.clone();
            move |r: ClusterRepository| parked_on(&s, "ClusterRepository", None, &r.name_any())
        })
        .watches_stream(pvc_events, {
            let s = snapshots.clone();
            move |p: kube::core::PartialObjectMeta<PersistentVolumeClaim>| {
                let ns = p.namespace();
                s.state()
                    .iter()
                    .filter(|x| x.namespace() == ns)
                    .filter(|x| {
                        matches!(
                            x.status.as_ref().and_then(|st| st.phase.as_ref()),
                            None | Some(SnapshotPhase::Pending)
                        )
                    })
                    .map(|x| ObjectRef::from_obj(x.as_ref()))
                    .collect::<Vec<_>>()
            }
        });
    let sched_ctl = sched_ctl.owns(Api::<Snapshot>::all(client.clone()), wc.clone());
    let policy_ctl = policy_ctl.watches(Api::<Snapshot>::all(client.clone()), wc.clone(), |s: Snapshot| {
        let ns = s.namespace().unwrap_or_default();
        s.spec
            .policy_ref
            .as_ref()
            .map(|p| ObjectRef::<SnapshotPolicy>::new(&p.name).within(p.namespace.as_deref().unwrap_or(&ns)))
    });

    let cfg = CtlConfig::default().debounce(Duration::from_millis(250));
    let a = snap_ctl
        .with_config(cfg.clone())
        .shutdown_on_signal()
        .run(super::reconcile::reconcile, error_policy::<Snapshot>, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    let b = sched_ctl
        .with_config(cfg.clone())
        .shutdown_on_signal()
        .run(crate::snapshot_schedule::reconcile::reconcile, error_policy::<SnapshotSchedule>, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    let c = policy_ctl
        .with_config(cfg)
        .shutdown_on_signal()
        .run(crate::snapshot_policy::reconcile::reconcile, error_policy::<SnapshotPolicy>, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    futures::join!(a, b, c);
}
