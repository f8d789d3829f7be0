//! Wires the pipeline's reconcilers to the kube runtime: one controller per kind over the shared
//! feeds of `crate::controllers` (one watch per kind), and watch mappers so a parked consumer is
//! enqueued as soon as its repository changes (the store is updated before the mapper runs, so
//! the reconcile sees the new phase).
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kopiur_api::restore::RestorePhase;
use kopiur_api::shared::RepositoryKind;
use kopiur_api::snapshot::SnapshotPhase;
use kopiur_api::{ClusterRepository, Maintenance, Repository, Restore, Snapshot, SnapshotPolicy, SnapshotSchedule};
use kube::runtime::Controller;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use tokio::sync::mpsc;

use crate::context::Context;
use crate::error::Error;
use crate::feeds::{Feeds, ReceiverStream};
use crate::snapshot::ctx::PipelineCtx;

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
                || crate::snapshot::pin::outstanding(s);
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

/// The kopiur kinds that own mover Jobs (an owner reference of another API group is not ours).
/// Each kind's controller maps its own Jobs from the one Job watch: Snapshot and Restore here
/// ([`owned_by`]), the repositories in `controllers.rs`, Maintenance and RepositoryReplication
/// in their modules.
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

/// Restores not yet past the gate, in a namespace (or everywhere for a ClusterRepository).
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

/// Snapshots not yet launched (or with no phase yet) in a namespace.
fn unlaunched(snaps: &Store<Snapshot>, ns: Option<&str>) -> Vec<ObjectRef<Snapshot>> {
    snaps
        .state()
        .iter()
        .filter(|x| x.namespace().as_deref() == ns)
        .filter(|x| matches!(x.status.as_ref().and_then(|st| st.phase.as_ref()), None | Some(SnapshotPhase::Pending)))
        .map(|x| ObjectRef::from_obj(x.as_ref()))
        .collect()
}

/// Wires the pipeline's four controllers (Snapshot, SnapshotSchedule, SnapshotPolicy, Restore)
/// over the shared feeds; the returned future runs them until shutdown.
pub fn wire(shared: &Arc<Context>, feeds: &mut Feeds) -> impl Future<Output = ()> + Send + 'static {
    let st = &shared.stores;
    let ctx = shared.clone();
    let (snapshots, restores, policies, crepos) =
        (st.snapshots.clone(), st.restores.clone(), st.policies.clone(), st.crepos.clone());

    // Snapshots: their own kind, their Jobs, and the referents a parked one waits on. The
    // feeds update each store before the mapper runs, so the re-reconcile sees the new state.
    let s = snapshots.clone();
    let s2 = snapshots.clone();
    let s3 = snapshots.clone();
    let s4 = snapshots.clone();
    let s5 = snapshots.clone();
    let s6 = snapshots.clone();
    let crepos_ns = crepos.clone();
    let snap_ns_seen = Mutex::new(crate::gating::NamespaceLabels::default());
    // The ADR-0006 batch-delete dispatcher enqueues Snapshots too.
    let (snap_tx, snap_rx) = mpsc::channel::<ObjectRef<Snapshot>>(1024);
    let snap_ctl = Controller::for_shared_stream(feeds.snapshots.subscribe(), snapshots.clone())
        // Job -> its Snapshot (backup Jobs are owned by their CR).
        .watches_shared_stream(feeds.jobs.subscribe(), |job: Arc<Job>| owned_by(&job, JobOwner::Snapshot))
        // Repository -> parked Snapshots (G3).
        .watches_shared_stream(feeds.repos.subscribe(), move |repo: Arc<Repository>| {
            parked_on(&s, "Repository", repo.namespace().as_deref(), &repo.name_any())
        })
        .watches_shared_stream(feeds.crepos.subscribe(), move |repo: Arc<ClusterRepository>| {
            parked_on(&s2, "ClusterRepository", None, &repo.name_any())
        })
        // Maintenance -> Snapshots parked on its repository (the `maintenance.*` preflight variables).
        .watches_shared_stream(feeds.maintenances.subscribe(), move |m: Arc<Maintenance>| {
            let r = &m.spec.repository;
            let ns = match r.kind {
                RepositoryKind::Repository => r.namespace.clone().or_else(|| m.namespace()),
                RepositoryKind::ClusterRepository => None,
            };
            parked_on(&s3, &format!("{:?}", r.kind), ns.as_deref(), &r.name)
        })
        // Secret -> Snapshots not yet launched in its namespace (MissingCredentialsSecret; a
        // changed Secret may now hold the password key).
        .watches_shared_stream(feeds.secrets.subscribe(), move |sec| unlaunched(&s4, sec.namespace().as_deref()))
        // PVC -> Snapshots waiting for their source.
        .watches_shared_stream(feeds.pvcs.subscribe(), move |p| unlaunched(&s5, p.namespace().as_deref()))
        // Namespace -> its deleting Snapshots (the onNamespaceDelete axis); and, when its labels
        // changed while some ClusterRepository admits namespaces by selector, the Snapshots
        // whose tenancy verdict may flip: not yet launched or being deleted.
        .watches_shared_stream(feeds.namespaces.subscribe(), move |n| {
            let ns = n.name_any();
            let relabelled = snap_ns_seen.lock().is_ok_and(|mut seen| seen.changed(&ns, n.metadata.labels.as_ref()));
            let in_ns = s6.state().into_iter().filter(|x| x.namespace().as_deref() == Some(ns.as_str()));
            if n.metadata.deletion_timestamp.is_some() {
                return in_ns
                    .filter(|x| x.meta().deletion_timestamp.is_some())
                    .map(|x| ObjectRef::from_obj(x.as_ref()))
                    .collect::<Vec<_>>();
            }
            if !relabelled || !crate::gating::any_label_dependent(&crepos_ns) {
                return Vec::new();
            }
            tracing::debug!(namespace = %ns, "namespace labels changed; re-evaluating tenancy of its consumers");
            in_ns
                .filter(|x| {
                    x.meta().deletion_timestamp.is_some()
                        || matches!(
                            x.status.as_ref().and_then(|st| st.phase.as_ref()),
                            None | Some(SnapshotPhase::Pending)
                        )
                })
                .map(|x| ObjectRef::from_obj(x.as_ref()))
                .collect()
        })
        .reconcile_on(ReceiverStream(snap_rx));

    // Restores: their own kind, their Jobs, and what a Restore not past the gate waits on. A
    // Restore may reference a Repository in another namespace (docs/design/api-contract.md §1.8), so a repository
    // event looks at parked Restores everywhere (a Blocked RepositoryNotFound one resumes when
    // the Repository appears).
    let (r1, r2, r3, r4, r5) =
        (restores.clone(), restores.clone(), restores.clone(), restores.clone(), restores.clone());
    let crepos_r = crepos.clone();
    let restore_ns_seen = Mutex::new(crate::gating::NamespaceLabels::default());
    let restore_ctl = Controller::for_shared_stream(feeds.restores.subscribe(), restores.clone())
        .watches_shared_stream(feeds.jobs.subscribe(), |job: Arc<Job>| owned_by(&job, JobOwner::Restore))
        .watches_shared_stream(feeds.repos.subscribe(), move |_: Arc<Repository>| parked_restores(&r1, None))
        .watches_shared_stream(feeds.crepos.subscribe(), move |_: Arc<ClusterRepository>| parked_restores(&r2, None))
        .watches_shared_stream(feeds.secrets.subscribe(), move |sec| match sec.namespace() {
            Some(ns) => parked_restores(&r3, Some(&ns)),
            None => Vec::new(),
        })
        .watches_shared_stream(feeds.pvcs.subscribe(), move |p| parked_restores(&r4, p.namespace().as_deref()))
        .watches_shared_stream(feeds.namespaces.subscribe(), move |n| {
            let ns = n.name_any();
            let relabelled = restore_ns_seen.lock().is_ok_and(|mut seen| seen.changed(&ns, n.metadata.labels.as_ref()));
            if n.metadata.deletion_timestamp.is_some() || !relabelled || !crate::gating::any_label_dependent(&crepos_r)
            {
                return Vec::new();
            }
            parked_restores(&r5, Some(ns.as_str()))
        });

    // SnapshotSchedules: their own kind and their Snapshots (the controller owner reference).
    let sched_ctl = Controller::for_shared_stream(feeds.schedules.subscribe(), st.schedules.clone())
        .watches_shared_stream(feeds.snapshots.subscribe(), |s: Arc<Snapshot>| {
            let ns = s.namespace().unwrap_or_default();
            s.owner_references()
                .iter()
                .filter(|o| o.controller == Some(true) && o.kind == "SnapshotSchedule")
                .map(|o| ObjectRef::new(&o.name).within(&ns))
                .collect::<Vec<_>>()
        });

    // SnapshotPolicies: their own kind, their Snapshots, the repositories they target, the PVCs
    // of a namespace whose policies select by label (their `resolved.sources` expansion), and a
    // relabelled namespace's policies.
    let (p1, p2, p3, p4) = (policies.clone(), policies.clone(), policies.clone(), policies.clone());
    let crepos_p = crepos.clone();
    let policy_ns_seen = Mutex::new(crate::gating::NamespaceLabels::default());
    let policy_ctl = Controller::for_shared_stream(feeds.policies.subscribe(), policies.clone())
        .watches_shared_stream(feeds.snapshots.subscribe(), |s: Arc<Snapshot>| {
            let ns = s.namespace().unwrap_or_default();
            s.spec.policy_ref.as_ref().map(|p| ObjectRef::new(&p.name).within(p.namespace.as_deref().unwrap_or(&ns)))
        })
        .watches_shared_stream(feeds.repos.subscribe(), move |repo: Arc<Repository>| {
            crate::policy_rules::sources::policies_targeting(
                &p1.state(),
                Some(repo.namespace().as_deref().unwrap_or_default()),
                &repo.name_any(),
            )
        })
        .watches_shared_stream(feeds.crepos.subscribe(), move |repo: Arc<ClusterRepository>| {
            crate::policy_rules::sources::policies_targeting(&p2.state(), None, &repo.name_any())
        })
        .watches_shared_stream(feeds.pvcs.subscribe(), move |p| {
            let ns = p.namespace();
            p3.state()
                .iter()
                .filter(|x| x.namespace() == ns)
                .filter(|x| crate::policy_rules::sources::uses_selector(&x.spec.sources))
                .map(|x| ObjectRef::from_obj(x.as_ref()))
                .collect::<Vec<_>>()
        })
        .watches_shared_stream(feeds.namespaces.subscribe(), move |n| {
            let ns = n.name_any();
            let relabelled = policy_ns_seen.lock().is_ok_and(|mut seen| seen.changed(&ns, n.metadata.labels.as_ref()));
            if n.metadata.deletion_timestamp.is_some() || !relabelled || !crate::gating::any_label_dependent(&crepos_p)
            {
                return Vec::new();
            }
            p4.state()
                .iter()
                .filter(|x| x.namespace().as_deref() == Some(ns.as_str()))
                .map(|x| ObjectRef::from_obj(x.as_ref()))
                .collect()
        });

    tokio::spawn(crate::snapshot::gauges::run(ctx.clone(), restores.clone()));
    // The ADR-0006 batch-delete dispatcher.
    tokio::spawn(crate::snapshot::dispatch::run(ctx.clone(), snap_tx));

    let cfg = shared.config.controller_config();
    let a = snap_ctl
        .with_config(cfg.clone())
        .shutdown_on_signal()
        .run(crate::snapshot::reconcile::reconcile, error_policy::<Snapshot>, ctx.clone())
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
        .with_config(cfg)
        .shutdown_on_signal()
        .run(crate::restore::reconcile::reconcile, error_policy::<Restore>, ctx)
        .for_each(crate::error_events::settle);
    async move {
        futures::join!(a, b, c, d);
    }
}

/// The Jobs' owner references of kind `owner` (a kopiur kind), as objects in the Job's namespace.
fn owned_by<K: Resource<DynamicType = ()>>(job: &Job, owner: JobOwner) -> Vec<ObjectRef<K>> {
    let ns = job.namespace().unwrap_or_default();
    job.owner_references()
        .iter()
        .filter(|o| JobOwner::of(&o.api_version, &o.kind) == Some(owner))
        .map(|o| ObjectRef::new(&o.name).within(&ns))
        .collect()
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
