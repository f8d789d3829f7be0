//! Shared state of the backup pipeline's reconcilers: the client, the reflector stores every
//! consumer reads its facts from, and the status helpers they share.
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kopiur_api::shared::RepositoryRef;
use kopiur_api::{ClusterRepository, Repository};
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource};

use crate::error::{ApiStep, Error};

pub use crate::context::{Stores, StoresSynced};

/// The backup pipeline's reconcilers run on the one crate context.
pub type PipelineCtx = crate::context::Context;

/// The repository a consumer writes to, whichever kind, with what the run path needs.
pub enum RepoView {
    Namespaced(Arc<Repository>),
    Cluster(Arc<ClusterRepository>),
}

impl RepoView {
    pub fn common(&self) -> &kopiur_api::repository::RepositoryCommonSpec {
        match self {
            RepoView::Namespaced(r) => &r.spec.common,
            RepoView::Cluster(c) => &c.spec.common,
        }
    }
    pub fn status(&self) -> Option<&kopiur_api::repository::RepositoryStatus> {
        match self {
            RepoView::Namespaced(r) => r.status.as_ref(),
            RepoView::Cluster(c) => c.status.as_ref().map(|s| &s.common),
        }
    }
    pub fn meta(&self) -> &ObjectMeta {
        match self {
            RepoView::Namespaced(r) => r.meta(),
            RepoView::Cluster(c) => c.meta(),
        }
    }
    pub fn kind(&self) -> &'static str {
        match self {
            RepoView::Namespaced(_) => "Repository",
            RepoView::Cluster(_) => "ClusterRepository",
        }
    }
    /// Where the repository's own Jobs (batch deletes) run.
    pub fn home_namespace(&self, operator_ns: &str) -> String {
        match self {
            RepoView::Namespaced(r) => r.metadata.namespace.clone().unwrap_or_default(),
            RepoView::Cluster(_) => operator_ns.to_string(),
        }
    }
    pub fn uid(&self) -> String {
        self.meta().uid.clone().unwrap_or_default()
    }
    pub fn name(&self) -> String {
        self.meta().name.clone().unwrap_or_default()
    }
    pub fn namespace(&self) -> Option<String> {
        match self {
            RepoView::Namespaced(r) => r.metadata.namespace.clone(),
            RepoView::Cluster(_) => None,
        }
    }
    pub fn read_only(&self) -> bool {
        match self.common().mode {
            kopiur_api::repository::RepositoryMode::ReadOnly => true,
            kopiur_api::repository::RepositoryMode::ReadWrite => false,
        }
    }
    /// The Secrets a mover Job of this repository reads (password, backend auth).
    pub fn secret_names(&self) -> Vec<String> {
        let (pw, auth) = match self {
            RepoView::Namespaced(r) => crate::repository::observe::secret_names(r.as_ref()),
            RepoView::Cluster(c) => crate::repository::observe::secret_names(c.as_ref()),
        };
        let mut v = vec![pw];
        v.extend(auth.filter(|a| !v.contains(a)));
        v
    }

    /// The repository's lease host (`crate::repository::apply::lease_host`).
    pub fn lease_host(&self) -> String {
        match self {
            RepoView::Namespaced(r) => crate::repository::apply::lease_host(r.as_ref()),
            RepoView::Cluster(c) => crate::repository::apply::lease_host(c.as_ref()),
        }
    }

    /// The identity a short operational Job (batch delete, pin, restore) connects as:
    /// `kopiur-ops` at the lease host (docs/design/mover.md §2.2). Never the maintenance owner.
    pub fn ops_identity(&self) -> kopiur_kopia::cmd::Identity {
        kopiur_kopia::cmd::Identity::new("kopiur-ops", self.lease_host())
    }

    pub fn reverify_requested_at(&self) -> Option<DateTime<Utc>> {
        self.meta()
            .annotations
            .as_ref()
            .and_then(|a| a.get(kopiur_api::names::annotation::REVERIFY_REQUESTED_AT))
            .and_then(|v| DateTime::parse_from_rfc3339(v).ok())
            .map(|t| t.with_timezone(&Utc))
    }
}

/// The helpers that hand out a [`RepoView`], on the one crate context.
impl crate::context::Context {
    pub fn repository(&self, consumer_ns: &str, r: &RepositoryRef) -> Option<RepoView> {
        match r.kind {
            kopiur_api::shared::RepositoryKind::Repository => {
                let ns = r.namespace.clone().unwrap_or_else(|| consumer_ns.to_string());
                self.stores.repos.get(&ObjectRef::new(&r.name).within(&ns)).map(RepoView::Namespaced)
            }
            kopiur_api::shared::RepositoryKind::ClusterRepository => {
                self.stores.crepos.get(&ObjectRef::new(&r.name)).map(RepoView::Cluster)
            }
        }
    }

    /// Whether a consumer of `consumer_ns` may use `repo`: a ClusterRepository's
    /// `allowedNamespaces`, a Repository's own namespace or its `spec.allowedNamespaces`.
    pub fn tenancy_allows(&self, repo: &RepoView, consumer_ns: &str) -> bool {
        match repo {
            RepoView::Namespaced(r) => r.spec.admits(r.metadata.namespace.as_deref().unwrap_or_default(), consumer_ns),
            RepoView::Cluster(c) => crate::gating::consumer_allowed(
                Some(c.as_ref()),
                consumer_ns,
                self.namespace_labels(consumer_ns).as_ref(),
            ),
        }
    }

    /// Stamps `reverify-requested-at=now` on a repository (the caller checked the spacing).
    pub async fn nudge(&self, repo: &RepoView, now: DateTime<Utc>) -> Result<(), Error> {
        let body = serde_json::json!({"metadata": {"annotations": {
            kopiur_api::names::annotation::REVERIFY_REQUESTED_AT: now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        }}});
        let pp = PatchParams::default();
        match repo {
            RepoView::Namespaced(r) => {
                Api::<Repository>::namespaced(self.client.clone(), &r.metadata.namespace.clone().unwrap_or_default())
                    .patch(&repo.name(), &pp, &Patch::Merge(&body))
                    .await
                    .step("nudge Repository")?;
            }
            RepoView::Cluster(_) => {
                Api::<ClusterRepository>::all(self.client.clone())
                    .patch(&repo.name(), &pp, &Patch::Merge(&body))
                    .await
                    .step("nudge ClusterRepository")?;
            }
        }
        Ok(())
    }
}
