//! Runtime plumbing shared by the Maintenance and RepositoryReplication controllers: their own
//! reflector stores for the referents (owned Jobs, repositories, Secret metadata) and the
//! streams their watch mappers consume.
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, ObjectReference, Secret};
use kopiur_api::shared::{RepositoryKind, RepositoryRef};
use kopiur_api::{ClusterRepository, Repository};
use kube::api::{Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::mpsc;

use crate::config::Config;
use crate::gating::{Gate, repository_ready};
use crate::metrics::Metrics;
use crate::repository::Error;
use crate::snapshot::ctx::RepoView;

/// What the Maintenance and RepositoryReplication reconcilers read and write through: their
/// own reflector stores, never a LIST per reconcile.
pub struct RunCtx {
    pub client: Client,
    pub config: Config,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    pub jobs: Store<Job>,
    pub repos: Store<Repository>,
    pub crepos: Store<ClusterRepository>,
    /// Metadata only: Secret values never reach the controller.
    pub secrets: Store<PartialObjectMeta<Secret>>,
    /// Namespace metadata: ClusterRepository tenancy by label selector reads the labels.
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    pub mover_rbac_ready: Mutex<HashSet<String>>,
}

impl RunCtx {
    pub fn repository(&self, consumer_ns: &str, r: &RepositoryRef) -> Option<RepoView> {
        match r.kind {
            RepositoryKind::Repository => {
                let ns = r.namespace.clone().unwrap_or_else(|| consumer_ns.to_string());
                self.repos.get(&ObjectRef::new(&r.name).within(&ns)).map(RepoView::Namespaced)
            }
            RepositoryKind::ClusterRepository => self.crepos.get(&ObjectRef::new(&r.name)).map(RepoView::Cluster),
        }
    }

    /// `RepositoryReady(R)`, with ClusterRepository tenancy read against the consumer
    /// namespace's labels from the Namespace store (absent from the store: a selector fails
    /// closed). A relabelled namespace re-enqueues its consumers (`maintenance::run`,
    /// `replication::run`).
    pub fn gate(&self, consumer_ns: &str, r: &RepositoryRef) -> Gate {
        let labels =
            self.namespaces.get(&ObjectRef::new(consumer_ns)).map(|n| n.metadata.labels.clone().unwrap_or_default());
        repository_ready(&self.repos, &self.crepos, consumer_ns, labels.as_ref(), r)
    }

    /// Of `names`, those with no Secret in `ns`.
    pub fn missing_secrets(&self, ns: &str, names: &[String]) -> Vec<String> {
        names.iter().filter(|n| self.secrets.get(&ObjectRef::new(n).within(ns)).is_none()).cloned().collect()
    }

    pub async fn event(&self, reference: &ObjectReference, warning: bool, reason: &str, note: String) {
        let ev = Event {
            type_: if warning { EventType::Warning } else { EventType::Normal },
            reason: reason.to_string(),
            note: Some(crate::snapshot::ctx::truncate(&note, 1024)),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(err) = self.recorder.publish(&ev, reference).await {
            tracing::warn!(%err, reason, "publishing an Event failed");
        }
    }

    /// Stamps `reverify-requested-at=now` on a repository (the caller checked the spacing).
    pub async fn nudge(&self, repo: &RepoView, now: chrono::DateTime<chrono::Utc>) -> Result<(), Error> {
        let body = serde_json::json!({"metadata": {"annotations": {
            kopiur_api::names::annotation::REVERIFY_REQUESTED_AT: now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        }}});
        let pp = PatchParams::default();
        match repo {
            RepoView::Namespaced(r) => {
                Api::<Repository>::namespaced(self.client.clone(), &r.metadata.namespace.clone().unwrap_or_default())
                    .patch(&repo.name(), &pp, &Patch::Merge(&body))
                    .await?;
            }
            RepoView::Cluster(_) => {
                Api::<ClusterRepository>::all(self.client.clone())
                    .patch(&repo.name(), &pp, &Patch::Merge(&body))
                    .await?;
            }
        }
        Ok(())
    }

    /// The mover's ServiceAccount and RoleBinding in the run's namespace (server-side apply,
    /// once per namespace per process).
    pub async fn ensure_mover_rbac(&self, ns: &str) -> Result<(), Error> {
        crate::mover_rbac::ensure(&self.client, ns, &self.mover_rbac_ready, &self.config.mover_image_pull_secrets).await
    }
}

pub struct Referents {
    pub ctx: Arc<RunCtx>,
    pub jobs: BoxStream<'static, Arc<Job>>,
    pub repos: BoxStream<'static, Arc<Repository>>,
    pub crepos: BoxStream<'static, Arc<ClusterRepository>>,
    pub secrets: BoxStream<'static, Arc<PartialObjectMeta<Secret>>>,
    /// Must be polled: it drives the Namespace store the tenancy gate reads.
    pub namespaces: BoxStream<'static, Arc<PartialObjectMeta<Namespace>>>,
}

fn ok_only<T: Send + 'static, E: Send + 'static>(
    s: impl Stream<Item = Result<T, E>> + Send + 'static,
) -> BoxStream<'static, T> {
    s.filter_map(|r| futures::future::ready(r.ok())).boxed()
}

/// Stores for the kinds these reconcilers read, and the event streams of their referents.
pub fn referents(client: &Client, config: &Config, metrics: Arc<Metrics>) -> Referents {
    let wc = watcher::Config::default();
    let (jobs, job_w) = reflector::store::<Job>();
    let job_events = reflector::reflector(
        job_w,
        watcher(
            Api::<Job>::all(client.clone()),
            watcher::Config::default().labels("app.kubernetes.io/managed-by=kopiur"),
        ),
    )
    .default_backoff()
    .touched_objects()
    .map(|r| r.map(Arc::new));
    let (repos, repo_w) = reflector::store::<Repository>();
    let repo_events = reflector::reflector(repo_w, watcher(Api::<Repository>::all(client.clone()), wc.clone()))
        .default_backoff()
        .touched_objects()
        .map(|r| r.map(Arc::new));
    let (crepos, crepo_w) = reflector::store::<ClusterRepository>();
    let crepo_events =
        reflector::reflector(crepo_w, watcher(Api::<ClusterRepository>::all(client.clone()), wc.clone()))
            .default_backoff()
            .touched_objects()
            .map(|r| r.map(Arc::new));
    let (secrets, secret_w) = reflector::store();
    let secret_events =
        reflector::reflector(secret_w, watcher(Api::<PartialObjectMeta<Secret>>::all(client.clone()), wc.clone()))
            .default_backoff()
            .touched_objects()
            .map(|r| r.map(Arc::new));
    let (namespaces, ns_w) = reflector::store();
    let ns_events = reflector::reflector(ns_w, watcher(Api::<PartialObjectMeta<Namespace>>::all(client.clone()), wc))
        .default_backoff()
        .touched_objects()
        .map(|r| r.map(Arc::new));
    let ctx = Arc::new(RunCtx {
        client: client.clone(),
        config: config.clone(),
        metrics,
        recorder: Recorder::new(
            client.clone(),
            Reporter { controller: "kopiur-controller".into(), instance: Some(config.identity.clone()) },
        ),
        jobs,
        repos,
        crepos,
        secrets,
        namespaces,
        mover_rbac_ready: Mutex::new(Default::default()),
    });
    Referents {
        ctx,
        jobs: ok_only(job_events),
        repos: ok_only(repo_events),
        crepos: ok_only(crepo_events),
        secrets: ok_only(secret_events),
        namespaces: ok_only(ns_events),
    }
}

/// A minimal mpsc receiver stream (one adapter, no extra dependency).
pub struct ReceiverStream<T>(pub mpsc::Receiver<T>);

impl<T> Stream for ReceiverStream<T> {
    type Item = T;
    fn poll_next(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<T>> {
        self.0.poll_recv(cx)
    }
}

/// Whether a consumer's Ready condition carries `reason` (parked consumers are found this way).
pub fn ready_reason_is(conds: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition], reason: &str) -> bool {
    conds.iter().any(|c| c.type_ == kopiur_api::names::condition::READY && c.reason == reason)
}

/// Whether a consumer that references `r` (in `consumer_ns`) points at this repository.
pub fn refers_to(
    r: &kopiur_api::shared::RepositoryRef,
    consumer_ns: &str,
    kind: kopiur_api::shared::RepositoryKind,
    repo_ns: Option<&str>,
    repo_name: &str,
) -> bool {
    use kopiur_api::shared::RepositoryKind;
    if r.kind != kind || r.name != repo_name {
        return false;
    }
    match kind {
        RepositoryKind::Repository => r.namespace.as_deref().unwrap_or(consumer_ns) == repo_ns.unwrap_or_default(),
        RepositoryKind::ClusterRepository => true,
    }
}

/// The consumers of one namespace to re-evaluate after a Namespace event: those referencing a
/// ClusterRepository, when the namespace's labels changed and some ClusterRepository admits
/// namespaces by selector (`tracker` remembers the labels last seen).
pub fn relabelled_consumers<K>(
    tracker: &mut crate::gating::NamespaceLabels,
    ns: &PartialObjectMeta<Namespace>,
    crepos: &Store<ClusterRepository>,
    store: &Store<K>,
    repository: impl Fn(&K) -> &RepositoryRef,
) -> Vec<ObjectRef<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    use kube::ResourceExt;
    let name = ns.name_any();
    if !tracker.changed(&name, ns.metadata.labels.as_ref()) || !crate::gating::any_label_dependent(crepos) {
        return Vec::new();
    }
    store
        .state()
        .iter()
        .filter(|x| x.namespace().as_deref() == Some(name.as_str()))
        .filter(|x| repository(x).kind == RepositoryKind::ClusterRepository)
        .map(|x| ObjectRef::from_obj(x.as_ref()))
        .collect()
}
