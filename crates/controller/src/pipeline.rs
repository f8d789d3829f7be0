//! Wires the pipeline's reconcilers to the kube runtime: one controller per kind over the shared
//! feeds of `crate::controllers` (one watch per kind), and watch mappers so a parked consumer is
//! enqueued as soon as its repository changes (the store is updated before the mapper runs, so
//! the reconcile sees the new phase).
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kopiur_api::{ClusterRepository, Maintenance, Repository, Snapshot};
use kube::ResourceExt;
use kube::runtime::Controller;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;

use crate::context::Context;
use crate::error_events::error_policy;
use crate::feeds::{Feeds, ReceiverStream};
use crate::watch::{self, JobOwner};

/// Wires the pipeline's four controllers (Snapshot, SnapshotSchedule, SnapshotPolicy, Restore)
/// over the shared feeds; the returned future runs them until shutdown.
pub fn wire(shared: &Arc<Context>, feeds: &mut Feeds) -> impl Future<Output = ()> + Send + 'static {
    let st = &shared.stores;
    let ctx = shared.clone();
    let (snap_ctl, snap_tx, snap_progress) = snapshot_controller(shared, feeds);
    let restore_ctl = restore_controller(shared, feeds);
    // SnapshotSchedules: their own kind and their Snapshots (the controller owner reference).
    let sched_ctl = Controller::for_shared_stream(feeds.schedules.subscribe(), st.schedules.clone())
        .watches_shared_stream(feeds.snapshots.subscribe(), |s: Arc<Snapshot>| watch::schedule_of(&s));

    let policy_ctl = policy_controller(shared, feeds);

    tokio::spawn(crate::snapshot::gauges::run(ctx.clone(), st.restores.clone()));
    // The ADR-0006 batch-delete dispatcher.
    tokio::spawn(crate::snapshot::dispatch::run(ctx.clone(), snap_tx));

    let cfg = shared.config.controller_config();
    let a = snap_ctl
        .with_config(cfg.clone())
        .shutdown_on_signal()
        .run(crate::snapshot::reconcile::reconcile, error_policy, ctx.clone())
        .for_each(move |r| {
            snap_progress.done();
            crate::error_events::settle(r)
        });
    let b = sched_ctl
        .with_config(cfg.clone())
        .shutdown_on_signal()
        .run(crate::snapshot_schedule::reconcile::reconcile, error_policy, ctx.clone())
        .for_each(crate::error_events::settle);
    let c = policy_ctl
        .with_config(cfg.clone())
        .shutdown_on_signal()
        .run(crate::snapshot_policy::reconcile::reconcile, error_policy, ctx.clone())
        .for_each(crate::error_events::settle);
    let d = restore_ctl
        .with_config(cfg)
        .shutdown_on_signal()
        .run(crate::restore::reconcile::reconcile, error_policy, ctx)
        .for_each(crate::error_events::settle);
    async move {
        futures::join!(a, b, c, d);
    }
}

/// The Snapshot controller, the sender of the dispatcher's enqueues and the progress that paces
/// its trigger.
fn snapshot_controller(
    shared: &Arc<Context>,
    feeds: &mut Feeds,
) -> (Controller<Snapshot>, mpsc::Sender<ObjectRef<Snapshot>>, Arc<crate::pace::Progress>) {
    let snapshots = shared.stores.snapshots.clone();
    let crepos = &shared.stores.crepos;
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
    // The Snapshot controller's own trigger is paced by its reconciles: a start over a large
    // fleet queues about a window of rows, not all of them (`crate::pace`).
    let snap_progress = crate::pace::Progress::new();
    let snap_trigger =
        crate::pace::paced(feeds.snapshots.subscribe(), snap_progress.clone(), crate::pace::WINDOW, crate::pace::STALL);
    let snap_ctl = Controller::for_shared_stream(snap_trigger, snapshots.clone())
        // Job -> its Snapshot (backup Jobs are owned by their CR).
        .watches_shared_stream(feeds.jobs.subscribe(), |job: Arc<Job>| watch::owned_by(&job, JobOwner::Snapshot))
        // Repository -> parked Snapshots (G3).
        .watches_shared_stream(feeds.repos.subscribe(), move |repo: Arc<Repository>| {
            watch::parked_on(&s.state(), "Repository", repo.namespace().as_deref(), &repo.name_any())
        })
        .watches_shared_stream(feeds.crepos.subscribe(), move |repo: Arc<ClusterRepository>| {
            watch::parked_on(&s2.state(), "ClusterRepository", None, &repo.name_any())
        })
        // Maintenance -> Snapshots parked on its repository (the `maintenance.*` preflight variables).
        .watches_shared_stream(feeds.maintenances.subscribe(), move |m: Arc<Maintenance>| {
            watch::parked_on_maintained(&s3.state(), &m)
        })
        // Secret -> Snapshots not yet launched in its namespace (MissingCredentialsSecret; a
        // changed Secret may now hold the password key).
        .watches_shared_stream(feeds.secrets.subscribe(), move |sec| {
            watch::unlaunched(&s4.state(), sec.namespace().as_deref())
        })
        // PVC -> Snapshots waiting for their source.
        .watches_shared_stream(feeds.pvcs.subscribe(), move |p| {
            watch::unlaunched(&s5.state(), p.namespace().as_deref())
        })
        // Namespace -> its deleting Snapshots (the onNamespaceDelete axis); and, when its labels
        // changed while some ClusterRepository admits namespaces by selector, the Snapshots
        // whose tenancy verdict may flip: not yet launched or being deleted.
        .watches_shared_stream(feeds.namespaces.subscribe(), move |n| {
            let ns = n.name_any();
            let relabelled = snap_ns_seen.lock().is_ok_and(|mut seen| seen.changed(&ns, n.metadata.labels.as_ref()));
            let label_dependent = relabelled && crate::gating::any_label_dependent(&crepos_ns);
            if label_dependent && n.metadata.deletion_timestamp.is_none() {
                tracing::debug!(namespace = %ns, "namespace labels changed; re-evaluating tenancy of its consumers");
            }
            watch::namespace_snapshots(&s6.state(), &n.metadata, relabelled, label_dependent)
        })
        .reconcile_on(ReceiverStream(snap_rx));
    (snap_ctl, snap_tx, snap_progress)
}

/// The Restore controller; the populator's claim watch and its registration run beside it.
fn restore_controller(shared: &Arc<Context>, feeds: &mut Feeds) -> Controller<kopiur_api::Restore> {
    let (ctx, restores, crepos) = (shared, shared.stores.restores.clone(), &shared.stores.crepos);
    // Restores: their own kind, their Jobs, and what a Restore not past the gate waits on. A
    // Restore may reference a Repository in another namespace (docs/design/api-contract.md §1.8), so a repository
    // event looks at parked Restores everywhere (a Blocked RepositoryNotFound one resumes when
    // the Repository appears).
    let (r1, r2, r3, r4, r5) =
        (restores.clone(), restores.clone(), restores.clone(), restores.clone(), restores.clone());
    let crepos_r = crepos.clone();
    let restore_ns_seen = Mutex::new(crate::gating::NamespaceLabels::default());
    // Claims naming a Restore (`target.populator`) enqueue it; the populator's own PVC watch.
    let (claim_tx, claim_rx) = mpsc::channel::<ObjectRef<kopiur_api::Restore>>(1024);
    let restore_ctl = Controller::for_shared_stream(feeds.restores.subscribe(), restores.clone())
        .watches_shared_stream(feeds.jobs.subscribe(), |job: Arc<Job>| watch::owned_by(&job, JobOwner::Restore))
        .watches_shared_stream(feeds.repos.subscribe(), move |_: Arc<Repository>| {
            watch::parked_restores(&r1.state(), None)
        })
        .watches_shared_stream(feeds.crepos.subscribe(), move |_: Arc<ClusterRepository>| {
            watch::parked_restores(&r2.state(), None)
        })
        .watches_shared_stream(feeds.secrets.subscribe(), move |sec| match sec.namespace() {
            Some(ns) => watch::parked_restores(&r3.state(), Some(&ns)),
            None => Vec::new(),
        })
        // PVC -> parked Restores in its namespace, and its running populates (the prime or
        // the claim got bound).
        .watches_shared_stream(feeds.pvcs.subscribe(), move |p| {
            let state = r4.state();
            let mut refs = watch::parked_restores(&state, p.namespace().as_deref());
            refs.extend(watch::populating_restores(&state, p.namespace().as_deref()));
            refs
        })
        .watches_shared_stream(feeds.namespaces.subscribe(), move |n| {
            let ns = n.name_any();
            let relabelled = restore_ns_seen.lock().is_ok_and(|mut seen| seen.changed(&ns, n.metadata.labels.as_ref()));
            let label_dependent = relabelled && crate::gating::any_label_dependent(&crepos_r);
            watch::namespace_restores(&r5.state(), &n.metadata, relabelled, label_dependent)
        })
        .reconcile_on(ReceiverStream(claim_rx));
    tokio::spawn(crate::restore::populate::watch_claims(ctx.clone(), feeds.pvcs.subscribe(), claim_tx));
    tokio::spawn(crate::restore::populate::register_loop(ctx.client.clone()));
    restore_ctl
}

/// The SnapshotPolicy controller.
fn policy_controller(shared: &Arc<Context>, feeds: &mut Feeds) -> Controller<kopiur_api::SnapshotPolicy> {
    let (policies, crepos) = (shared.stores.policies.clone(), &shared.stores.crepos);
    // SnapshotPolicies: their own kind, their Snapshots, the repositories they target, the PVCs
    // of a namespace whose policies select by label (their `resolved.sources` expansion), and a
    // relabelled namespace's policies.
    let (p1, p2, p3, p4) = (policies.clone(), policies.clone(), policies.clone(), policies.clone());
    let crepos_p = crepos.clone();
    let policy_ns_seen = Mutex::new(crate::gating::NamespaceLabels::default());
    Controller::for_shared_stream(feeds.policies.subscribe(), policies.clone())
        .watches_shared_stream(feeds.snapshots.subscribe(), |s: Arc<Snapshot>| watch::policy_of(&s))
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
            watch::selecting_policies(&p3.state(), p.namespace().as_deref())
        })
        .watches_shared_stream(feeds.namespaces.subscribe(), move |n| {
            let ns = n.name_any();
            let relabelled = policy_ns_seen.lock().is_ok_and(|mut seen| seen.changed(&ns, n.metadata.labels.as_ref()));
            let label_dependent = relabelled && crate::gating::any_label_dependent(&crepos_p);
            watch::namespace_policies(&p4.state(), &n.metadata, relabelled, label_dependent)
        })
}
