//! What every consumer of a repository reads about it (shared layer): [`RepoObject`], the one
//! trait over Repository and ClusterRepository; [`RepoView`], the repository a consumer writes
//! to; their Secrets and lease host; the `Context` helpers that hand a view out; and the
//! reverify-nudge rules every consumer applies after a failed mover run
//! (docs/design/repository-breaker.md §3.8).
use kopiur_api::names::{annotation, reason};
use std::fmt::Debug;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kopiur_api::repository::{RepositoryCommonSpec, RepositoryStatus};
use kopiur_api::shared::RepositoryRef;
use kopiur_api::{ClusterRepository, Repository};
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{ApiStep, Error};
use crate::health::RepoKind;

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
            RepoView::Namespaced(r) => secret_names(r.as_ref()),
            RepoView::Cluster(c) => secret_names(c.as_ref()),
        };
        let mut v = vec![pw];
        v.extend(auth.filter(|a| !v.contains(a)));
        v
    }

    /// The repository's lease host .
    pub fn lease_host(&self) -> String {
        match self {
            RepoView::Namespaced(r) => lease_host(r.as_ref()),
            RepoView::Cluster(c) => lease_host(c.as_ref()),
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
            .and_then(|a| a.get(annotation::REVERIFY_REQUESTED_AT))
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
            annotation::REVERIFY_REQUESTED_AT: now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
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

/// What the reconciler needs from either kind.
pub trait RepoObject:
    Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Serialize + Send + Sync + 'static
{
    const KIND: RepoKind;
    fn common(&self) -> &RepositoryCommonSpec;
    fn status_common(&self) -> Option<&RepositoryStatus>;
    /// Where its Jobs, result ConfigMaps and (defaulted) Secret references live.
    fn home_namespace(&self, operator_ns: &str) -> String;
    fn api(client: Client, obj: &Self) -> Api<Self>;
    /// The `status` object to write, given the common part.
    fn status_value(&self, common: RepositoryStatus) -> serde_json::Value;
    fn job_base_name(&self) -> String;
    /// A ClusterRepository's tenancy gate (where its discovered Snapshots may go).
    fn allowed_namespaces(&self) -> Option<&kopiur_api::cluster_repository::AllowedNamespaces> {
        None
    }
}

impl RepoObject for Repository {
    const KIND: RepoKind = RepoKind::Repository;
    fn common(&self) -> &RepositoryCommonSpec {
        &self.spec.common
    }
    fn status_common(&self) -> Option<&RepositoryStatus> {
        self.status.as_ref()
    }
    fn home_namespace(&self, _operator_ns: &str) -> String {
        self.namespace().unwrap_or_default()
    }
    fn api(client: Client, obj: &Self) -> Api<Self> {
        Api::namespaced(client, &obj.namespace().unwrap_or_default())
    }
    fn status_value(&self, common: RepositoryStatus) -> serde_json::Value {
        serde_json::to_value(common).unwrap_or_default()
    }
    fn job_base_name(&self) -> String {
        format!("{}-discovery", self.name_any())
    }
}

impl RepoObject for ClusterRepository {
    const KIND: RepoKind = RepoKind::ClusterRepository;
    fn common(&self) -> &RepositoryCommonSpec {
        &self.spec.common
    }
    fn status_common(&self) -> Option<&RepositoryStatus> {
        self.status.as_ref().map(|s| &s.common)
    }
    fn home_namespace(&self, operator_ns: &str) -> String {
        operator_ns.to_string()
    }
    fn api(client: Client, _obj: &Self) -> Api<Self> {
        Api::all(client)
    }
    fn status_value(&self, common: RepositoryStatus) -> serde_json::Value {
        let mut v = serde_json::to_value(common).unwrap_or_default();
        let allowed = &self.spec.allowed_namespaces;
        if let Some(m) = v.as_object_mut() {
            m.insert("allowedNamespacesSummary".into(), allowed.summary().into());
            match allowed {
                kopiur_api::cluster_repository::AllowedNamespaces::List(l) => {
                    m.insert("allowedNamespaceCount".into(), (l.len() as i64).into());
                }
                kopiur_api::cluster_repository::AllowedNamespaces::All(_)
                | kopiur_api::cluster_repository::AllowedNamespaces::Selector(_) => {}
            }
        }
        v
    }
    fn job_base_name(&self) -> String {
        format!("crepo-{}-discovery", self.name_any())
    }
    fn allowed_namespaces(&self) -> Option<&kopiur_api::cluster_repository::AllowedNamespaces> {
        Some(&self.spec.allowed_namespaces)
    }
}

/// The lease host: `kopiur.` + the owner segments joined with `.`, sanitized.
pub fn lease_host<K: RepoObject>(obj: &K) -> String {
    let raw = match K::KIND {
        crate::health::RepoKind::Repository => {
            format!("kopiur.{}.{}", obj.namespace().unwrap_or_default(), obj.name_any())
        }
        crate::health::RepoKind::ClusterRepository => format!("kopiur.clusterrepository.{}", obj.name_any()),
    };
    raw.to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '-' })
        .collect()
}

/// The Secrets a repository's Jobs read: the password Secret, then the backend auth Secret.
pub fn secret_names<K: RepoObject>(obj: &K) -> (String, Option<String>) {
    let c = obj.common();
    let pw = c.encryption.password_secret_ref.name.clone();
    let auth = c.backend.s3().and_then(|s| s.auth.as_ref()?.secret_ref.as_ref()).map(|r| r.name.clone());
    (pw, auth)
}

/// Minimum spacing of `reverify-requested-at` stamps by writers.
pub const REVERIFY_SPACING_SECONDS: i64 = 60;

/// Whether a writer may stamp a new `reverify-requested-at` (spaced by 60 s).
pub fn nudge_due(current: Option<DateTime<Utc>>, now: DateTime<Utc>) -> bool {
    current.is_none_or(|t| now - t >= Duration::seconds(REVERIFY_SPACING_SECONDS))
}

/// Whether a mover failure of this kopia error class says anything about the backend: a file
/// the mover may not read (`PermissionDenied`) is the source's business and a rejected
/// certificate (`CertificateError`) is configuration a human fixes; neither nudges. An unknown
/// class (a Job that reported none) nudges: the probe is the one sensor that decides.
pub fn class_nudges(class: Option<&str>) -> bool {
    !matches!(class, Some(reason::PERMISSION_DENIED | reason::CERTIFICATE_ERROR))
}

/// Whether a recorded mover run stamps the reverify nudge on its repository (docs/design/repository-breaker.md §3.8,
/// docs/design/repository-breaker.md §3.7.1), the same rule for backup, Maintenance and batch-delete Jobs: it failed, its
/// pod was not wedged (a node problem, never the backend), its class is not local
/// (`class_nudges`), and the last stamp is at least 60 s old.
pub fn failure_nudge(
    failed: bool,
    wedged: bool,
    class: Option<&str>,
    current: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> bool {
    failed && !wedged && class_nudges(class) && nudge_due(current, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_nudge_rule_for_every_mover_failure() {
        let t = chrono::Utc::now();
        assert!(failure_nudge(true, false, None, None, t), "a failure without a class nudges");
        assert!(!failure_nudge(false, false, None, None, t), "a success never nudges");
        assert!(!failure_nudge(true, true, None, None, t), "a wedged pod never nudges");
        assert!(!failure_nudge(true, false, Some("PermissionDenied"), None, t));
        assert!(!failure_nudge(true, false, Some("CertificateError"), None, t));
        assert!(!failure_nudge(true, false, None, Some(t - Duration::seconds(59)), t), "spaced 60 s");
        assert!(failure_nudge(true, false, None, Some(t - Duration::seconds(60)), t));
    }
}
