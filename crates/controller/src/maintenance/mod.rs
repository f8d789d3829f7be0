//! Maintenance: kopia quick and full maintenance for one repository under the ownership lease
//! (docs/design/pipeline.md §9.2). `plan` decides, `reconcile` observes and applies; what the
//! RepositoryReplication reconciler shares is in `crate::scheduled_run`.
pub mod plan;
pub mod projection;
pub mod reconcile;

use std::sync::Arc;

use chrono::SubsecRound;
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kopiur_api::shared::RepositoryKind;
use kopiur_api::{ClusterRepository, Maintenance, Repository, names};
use kube::ResourceExt;
use kube::runtime::Controller;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::context::Context;
use crate::error_events::error_policy;
use crate::feeds::Feeds;
use crate::repo_ref::refers_to;
use crate::scheduled_run::watch::{self, ready_reason_is};

/// Maintenances parked on this repository (Ready reason `RepositoryNotReady`), plus every
/// Maintenance of it that has work the repository just handed it: a quick run it asked for
/// and no quick run answered yet, or a cure while it is Degraded for `TimedOut`.
fn parked(
    store: &Store<Maintenance>,
    kind: RepositoryKind,
    ns: Option<&str>,
    name: &str,
    repo: Option<&kopiur_api::repository::RepositoryStatus>,
) -> Vec<ObjectRef<Maintenance>> {
    let curing = crate::gating::maintenance_gate(repo) == crate::gating::MaintenanceGate::Cure;
    let requested = repo.and_then(|s| s.health.as_ref()).and_then(|h| h.quick_maintenance_requested_at);
    store
        .state()
        .iter()
        .filter(|m| refers_to(&m.spec.repository, &m.namespace().unwrap_or_default(), kind, ns, name))
        .filter(|m| {
            let handled = m.status.as_ref().and_then(|s| s.quick.as_ref()).and_then(|q| q.last_handled_at);
            let unanswered = requested.is_some_and(|r| handled.is_none_or(|h| h < r.trunc_subsecs(0)));
            curing
                || unanswered
                || m.status.as_ref().is_none_or(|s| ready_reason_is(&s.conditions, names::reason::REPOSITORY_NOT_READY))
        })
        .map(|m| ObjectRef::from_obj(m.as_ref()))
        .collect()
}

/// Wires the Maintenance controller over the shared feeds (its own kind, its Jobs, its
/// repository, relabelled namespaces, Secrets) and the managed-Maintenance projection; the
/// returned future runs it until shutdown.
pub fn wire(shared: &Arc<Context>, feeds: &mut Feeds) -> impl Future<Output = ()> + Send + 'static {
    let ctx = shared.clone();
    let store = shared.stores.maintenances.clone();
    let (s1, s2, s3, s4) = (store.clone(), store.clone(), store.clone(), store.clone());
    let crepos = shared.stores.crepos.clone();
    let seen = std::sync::Mutex::new(crate::gating::NamespaceLabels::default());
    let ctl = Controller::for_shared_stream(feeds.maintenances.subscribe(), store.clone())
        // Job -> its Maintenance.
        .watches_shared_stream(feeds.jobs.subscribe(), |job: Arc<Job>| {
            crate::watch::owned_by(&job, crate::watch::JobOwner::Maintenance)
        })
        // Repository -> parked Maintenances (G3: the store is updated before the mapper runs).
        .watches_shared_stream(feeds.repos.subscribe(), move |repo: Arc<Repository>| {
            parked(&s1, RepositoryKind::Repository, repo.namespace().as_deref(), &repo.name_any(), repo.status.as_ref())
        })
        // Every Maintenance of a ClusterRepository: an `allowedNamespaces` edit may flip its
        // tenancy either way (there are few of them per repository).
        .watches_shared_stream(feeds.crepos.subscribe(), move |repo: Arc<ClusterRepository>| {
            let name = repo.name_any();
            s2.state()
                .iter()
                .filter(|m| refers_to(&m.spec.repository, "", RepositoryKind::ClusterRepository, None, &name))
                .map(|m| ObjectRef::from_obj(m.as_ref()))
                .collect::<Vec<_>>()
        })
        // Namespace relabelled -> its Maintenances of a ClusterRepository (selector tenancy).
        .watches_shared_stream(feeds.namespaces.subscribe(), move |n| match seen.lock() {
            Ok(mut seen) => {
                watch::relabelled_consumers(&mut seen, &n, &crepos, &s3, |x: &Maintenance| &x.spec.repository)
            }
            Err(_) => Vec::new(),
        })
        // Secret -> Maintenances waiting for credentials in its namespace.
        .watches_shared_stream(feeds.secrets.subscribe(), move |sec| {
            watch::waiting_for_credentials(&s4, sec.namespace().as_deref(), |m: &Maintenance| {
                m.status.as_ref().map(|st| st.conditions.as_slice())
            })
        });
    // The managed Maintenance of every repository (docs/design/repository-breaker.md §3.11). It starts once the three
    // stores it reads have synced (or after the same 5 s it would wait itself), so it never
    // waits on a store's readiness before the controller that owns the store: kube's readiness
    // future wakes only its last waiter (see `crate::synced`).
    {
        let synced = shared.stores.synced.clone();
        let projection = projection::run(
            shared.client.clone(),
            shared.config.namespace.clone(),
            shared.config.identity.clone(),
            shared.stores.repos.clone(),
            shared.stores.crepos.clone(),
            store,
        );
        tokio::spawn(async move {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), async {
                futures::join!(synced.repos.wait(), synced.crepos.wait(), synced.maintenances.wait())
            })
            .await;
            projection.await;
        });
    }
    ctl.with_config(shared.config.controller_config())
        .shutdown_on_signal()
        .run(reconcile::reconcile, error_policy, ctx)
        .for_each(crate::error_events::settle)
}
