//! RepositoryReplication: mirrors a repository's blobs to a second, bare backend with
//! `kopia repository sync-to` (docs/design/pipeline.md §9.3). `plan` decides, `reconcile` observes and applies;
//! the context and shared helpers come from `maintenance::{runtime, common}`.
pub mod plan;
pub mod reconcile;

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kopiur_api::shared::RepositoryKind;
use kopiur_api::{ClusterRepository, Repository, RepositoryReplication, names};
use kube::ResourceExt;
use kube::runtime::Controller;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::context::Context;
use crate::error_events::error_policy;
use crate::feeds::Feeds;
use crate::repo_ref::refers_to;
use crate::scheduled_run::watch::ready_reason_is;

/// Replications parked on this source (Ready reason `RepositoryNotReady`).
fn parked(
    store: &Store<RepositoryReplication>,
    kind: RepositoryKind,
    ns: Option<&str>,
    name: &str,
) -> Vec<ObjectRef<RepositoryReplication>> {
    store
        .state()
        .iter()
        .filter(|r| refers_to(&r.spec.source_ref, &r.namespace().unwrap_or_default(), kind, ns, name))
        .filter(|r| {
            r.status.as_ref().is_none_or(|s| ready_reason_is(&s.conditions, names::reason::REPOSITORY_NOT_READY))
        })
        .map(|r| ObjectRef::from_obj(r.as_ref()))
        .collect()
}

/// Wires the RepositoryReplication controller over the shared feeds (its own kind, its Jobs,
/// its source repository, relabelled namespaces, Secrets); the returned future runs it until
/// shutdown.
pub fn wire(shared: &Arc<Context>, feeds: &mut Feeds) -> impl Future<Output = ()> + Send + 'static {
    let ctx = shared.clone();
    let store = shared.stores.replications.clone();
    let (s1, s2, s3, s4) = (store.clone(), store.clone(), store.clone(), store.clone());
    let crepos = shared.stores.crepos.clone();
    let seen = std::sync::Mutex::new(crate::gating::NamespaceLabels::default());
    Controller::for_shared_stream(feeds.replications.subscribe(), store)
        // Job -> its replication.
        .watches_shared_stream(feeds.jobs.subscribe(), |job: Arc<Job>| {
            crate::watch::owned_by(&job, crate::watch::JobOwner::RepositoryReplication)
        })
        // Source repository -> parked replications (G3).
        .watches_shared_stream(feeds.repos.subscribe(), move |repo: Arc<Repository>| {
            parked(&s1, RepositoryKind::Repository, repo.namespace().as_deref(), &repo.name_any())
        })
        // Every replication of a ClusterRepository: an `allowedNamespaces` edit may flip its
        // tenancy either way (there are few of them per repository).
        .watches_shared_stream(feeds.crepos.subscribe(), move |repo: Arc<ClusterRepository>| {
            let name = repo.name_any();
            s2.state()
                .iter()
                .filter(|r| refers_to(&r.spec.source_ref, "", RepositoryKind::ClusterRepository, None, &name))
                .map(|r| ObjectRef::from_obj(r.as_ref()))
                .collect::<Vec<_>>()
        })
        // Namespace relabelled -> its RepositoryReplications of a ClusterRepository (selector tenancy).
        .watches_shared_stream(feeds.namespaces.subscribe(), move |n| match seen.lock() {
            Ok(mut seen) => crate::scheduled_run::watch::relabelled_consumers(
                &mut seen,
                &n,
                &crepos,
                &s3,
                |x: &RepositoryReplication| &x.spec.source_ref,
            ),
            Err(_) => Vec::new(),
        })
        // Secret -> replications waiting for credentials in its namespace.
        .watches_shared_stream(feeds.secrets.subscribe(), move |sec| {
            crate::scheduled_run::watch::waiting_for_credentials(
                &s4,
                sec.namespace().as_deref(),
                |r: &RepositoryReplication| r.status.as_ref().map(|st| st.conditions.as_slice()),
            )
        })
        .with_config(shared.config.controller_config())
        .shutdown_on_signal()
        .run(reconcile::reconcile, error_policy, ctx)
        .for_each(crate::error_events::settle)
}
