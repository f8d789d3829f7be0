//! Runtime plumbing shared by the Maintenance and RepositoryReplication controllers: their
//! context over the shared referent stores (owned Jobs, repositories, Secret and Namespace
//! metadata; one watch per kind, see `crate::controllers`) and the helpers their watch mappers use.
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, ObjectReference, Secret};
use kopiur_api::shared::{RepositoryKind, RepositoryRef};
use kopiur_api::{ClusterRepository, Repository};
use kube::api::{Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client};

use crate::config::Config;
use crate::error::Error;
use crate::gating::{Gate, repository_ready};
use crate::metrics::Metrics;
use crate::snapshot::ctx::RepoView;

/// What the Maintenance and RepositoryReplication reconcilers read and write through: the shared
/// reflector stores, never a LIST per reconcile.
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
            note: Some(crate::text::truncate(&note, 1024)),
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

impl RunCtx {
    /// A context over the shared stores of `crate::context::Context` (no watch of its own).
    pub fn from_context(ctx: &crate::context::Context) -> Arc<Self> {
        Arc::new(Self {
            client: ctx.client.clone(),
            config: ctx.config.clone(),
            metrics: ctx.metrics.clone(),
            recorder: ctx.recorder.clone(),
            jobs: ctx.stores.jobs.clone(),
            repos: ctx.stores.repos.clone(),
            crepos: ctx.stores.crepos.clone(),
            secrets: ctx.stores.secrets.clone(),
            namespaces: ctx.stores.namespaces.clone(),
            mover_rbac_ready: Mutex::new(Default::default()),
        })
    }
}

/// Whether a consumer's Ready condition carries `reason` (parked consumers are found this way).
pub fn ready_reason_is(conds: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition], reason: &str) -> bool {
    conds.iter().any(|c| c.type_ == kopiur_api::names::condition::READY && c.reason == reason)
}

pub use crate::repo_ref::refers_to;

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
