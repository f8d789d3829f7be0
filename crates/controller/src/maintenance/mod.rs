//! Maintenance: kopia quick and full maintenance for one repository under the ownership lease
//! (docs/design/pipeline.md §9.2). `plan` decides, `reconcile` observes and applies, `common` holds what the
//! RepositoryReplication reconciler shares, `runtime` the referent stores.
pub mod common;
pub mod plan;
pub mod projection;
pub mod reconcile;
pub mod runtime;

use std::sync::Arc;

use futures::StreamExt;
use kopiur_api::shared::RepositoryKind;
use kopiur_api::{Maintenance, names};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::mpsc;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::repository::Error;
use runtime::{ReceiverStream, RunCtx, ready_reason_is, referents, refers_to};

fn error_policy(obj: Arc<Maintenance>, err: &Error, ctx: Arc<RunCtx>) -> Action {
    crate::error_events::report(&ctx.recorder, obj.as_ref(), err);
    let class = err.class();
    ctx.metrics.reconcile_errors.inc(&["Maintenance", class.label()]);
    tracing::warn!(error = %err, class = class.label(), "maintenance reconcile failed");
    Action::requeue(class.requeue())
}

/// Maintenances parked on this repository (Ready reason `RepositoryNotReady`).
fn parked(
    store: &Store<Maintenance>,
    kind: RepositoryKind,
    ns: Option<&str>,
    name: &str,
) -> Vec<ObjectRef<Maintenance>> {
    store
        .state()
        .iter()
        .filter(|m| refers_to(&m.spec.repository, &m.namespace().unwrap_or_default(), kind, ns, name))
        .filter(|m| {
            m.status.as_ref().is_none_or(|s| ready_reason_is(&s.conditions, names::reason::REPOSITORY_NOT_READY))
        })
        .map(|m| ObjectRef::from_obj(m.as_ref()))
        .collect()
}

/// Runs the Maintenance controller until shutdown.
pub async fn run(client: Client, config: Config, metrics: Arc<Metrics>) {
    let r = referents(&client, &config, metrics);
    let ctl = Controller::new(Api::<Maintenance>::all(client.clone()), watcher::Config::default());
    let store = ctl.store();
    let (tx, rx) = mpsc::channel::<ObjectRef<Maintenance>>(1024);

    // Job -> its Maintenance.
    {
        let tx = tx.clone();
        let mut jobs = r.jobs;
        tokio::spawn(async move {
            while let Some(job) = jobs.next().await {
                let ns = job.namespace().unwrap_or_default();
                for o in job.owner_references().iter().filter(|o| o.kind == "Maintenance") {
                    let _ = tx.send(ObjectRef::new(&o.name).within(&ns)).await;
                }
            }
        });
    }
    // Repository -> parked Maintenances (G3: the store is updated before the event).
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
                // Every Maintenance of a ClusterRepository: an `allowedNamespaces` edit may
                // flip its tenancy either way (there are few of them per repository).
                let name = repo.name_any();
                let refs: Vec<ObjectRef<Maintenance>> = s
                    .state()
                    .iter()
                    .filter(|m| refers_to(&m.spec.repository, "", RepositoryKind::ClusterRepository, None, &name))
                    .map(|m| ObjectRef::from_obj(m.as_ref()))
                    .collect();
                for x in refs {
                    let _ = tx.send(x).await;
                }
            }
        });
    }
    // Namespace relabelled -> its Maintenances of a ClusterRepository (selector tenancy).
    {
        let (tx, s, crepos) = (tx.clone(), store.clone(), r.ctx.crepos.clone());
        let mut namespaces = r.namespaces;
        tokio::spawn(async move {
            let mut seen = crate::gating::NamespaceLabels::default();
            while let Some(n) = namespaces.next().await {
                for x in runtime::relabelled_consumers(&mut seen, &n, &crepos, &s, |x: &Maintenance| &x.spec.repository)
                {
                    let _ = tx.send(x).await;
                }
            }
        });
    }
    // Secret -> Maintenances waiting for credentials in its namespace.
    {
        let (tx, s) = (tx, store.clone());
        let mut secrets = r.secrets;
        tokio::spawn(async move {
            while let Some(sec) = secrets.next().await {
                let ns = sec.namespace();
                for m in s.state().iter().filter(|m| m.namespace() == ns) {
                    if m.status
                        .as_ref()
                        .is_some_and(|st| ready_reason_is(&st.conditions, names::reason::MISSING_CREDENTIALS_SECRET))
                    {
                        let _ = tx.send(ObjectRef::from_obj(m.as_ref())).await;
                    }
                }
            }
        });
    }
    // The managed Maintenance of every repository (docs/design/repository-breaker.md §3.11).
    tokio::spawn(projection::run(
        client.clone(),
        config.namespace.clone(),
        config.identity.clone(),
        r.ctx.repos.clone(),
        r.ctx.crepos.clone(),
        store.clone(),
    ));
    ctl.reconcile_on(ReceiverStream(rx))
        .with_config(config.controller_config())
        .shutdown_on_signal()
        .run(reconcile::reconcile, error_policy, r.ctx)
        .for_each(crate::error_events::settle)
        .await;
}
