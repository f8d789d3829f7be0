//! RepositoryReplication: mirrors a repository's blobs to a second, bare backend with
//! `kopia repository sync-to` (docs/design/pipeline.md §9.3). `plan` decides, `reconcile` observes and applies;
//! the referent stores and shared helpers come from `maintenance::{runtime, common}`.
pub mod plan;
pub mod reconcile;

use std::sync::Arc;

use futures::StreamExt;
use kopiur_api::shared::RepositoryKind;
use kopiur_api::{RepositoryReplication, names};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::mpsc;

use crate::config::Config;
use crate::maintenance::runtime::{ReceiverStream, RunCtx, ready_reason_is, referents, refers_to};
use crate::metrics::Metrics;
use crate::repository::Error;

fn error_policy(obj: Arc<RepositoryReplication>, err: &Error, ctx: Arc<RunCtx>) -> Action {
    crate::error_events::report(&ctx.recorder, obj.as_ref(), err);
    let class = err.class();
    ctx.metrics.reconcile_errors.inc(&["RepositoryReplication", class.label()]);
    tracing::warn!(error = %err, class = class.label(), "replication reconcile failed");
    Action::requeue(class.requeue())
}

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

/// Runs the RepositoryReplication controller until shutdown.
pub async fn run(client: Client, config: Config, metrics: Arc<Metrics>) {
    let r = referents(&client, &config, metrics);
    let ctl = Controller::new(Api::<RepositoryReplication>::all(client.clone()), watcher::Config::default());
    let store = ctl.store();
    let (tx, rx) = mpsc::channel::<ObjectRef<RepositoryReplication>>(1024);

    // Job -> its replication.
    {
        let tx = tx.clone();
        let mut jobs = r.jobs;
        tokio::spawn(async move {
            while let Some(job) = jobs.next().await {
                let ns = job.namespace().unwrap_or_default();
                for o in job.owner_references().iter().filter(|o| o.kind == "RepositoryReplication") {
                    let _ = tx.send(ObjectRef::new(&o.name).within(&ns)).await;
                }
            }
        });
    }
    // Source repository -> parked replications (G3).
    {
        let (tx, s) = (tx.clone(), store.clone());
        let mut repos = r.repos;
        tokio::spawn(async move {
            while let Some(repo) = repos.next().await {
                let ns = repo.namespace();
                for x in parked(&s, RepositoryKind::Repository, ns.as_deref(), &repo.name_any()) {
                    let _ = tx.send(x).await;
                }
            }
        });
    }
    {
        let (tx, s) = (tx.clone(), store.clone());
        let mut crepos = r.crepos;
        tokio::spawn(async move {
            while let Some(repo) = crepos.next().await {
                // Every replication of a ClusterRepository: an `allowedNamespaces` edit may
                // flip its tenancy either way (there are few of them per repository).
                let name = repo.name_any();
                let refs: Vec<ObjectRef<RepositoryReplication>> = s
                    .state()
                    .iter()
                    .filter(|r| refers_to(&r.spec.source_ref, "", RepositoryKind::ClusterRepository, None, &name))
                    .map(|r| ObjectRef::from_obj(r.as_ref()))
                    .collect();
                for x in refs {
                    let _ = tx.send(x).await;
                }
            }
        });
    }
    // Namespace relabelled -> its RepositoryReplications of a ClusterRepository (selector tenancy).
    {
        let (tx, s, crepos) = (tx.clone(), store.clone(), r.ctx.crepos.clone());
        let mut namespaces = r.namespaces;
        tokio::spawn(async move {
            let mut seen = crate::gating::NamespaceLabels::default();
            while let Some(n) = namespaces.next().await {
                for x in crate::maintenance::runtime::relabelled_consumers(
                    &mut seen,
                    &n,
                    &crepos,
                    &s,
                    |x: &RepositoryReplication| &x.spec.source_ref,
                ) {
                    let _ = tx.send(x).await;
                }
            }
        });
    }
    // Secret -> replications waiting for credentials in its namespace.
    {
        let (tx, s) = (tx, store.clone());
        let mut secrets = r.secrets;
        tokio::spawn(async move {
            while let Some(sec) = secrets.next().await {
                let ns = sec.namespace();
                for x in s.state().iter().filter(|x| x.namespace() == ns) {
                    if x.status
                        .as_ref()
                        .is_some_and(|st| ready_reason_is(&st.conditions, names::reason::MISSING_CREDENTIALS_SECRET))
                    {
                        let _ = tx.send(ObjectRef::from_obj(x.as_ref())).await;
                    }
                }
            }
        });
    }
    ctl.reconcile_on(ReceiverStream(rx))
        .with_config(config.controller_config())
        .shutdown_on_signal()
        .run(reconcile::reconcile, error_policy, r.ctx)
        .for_each(crate::error_events::settle)
        .await;
}
