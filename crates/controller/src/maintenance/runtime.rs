//! Runtime plumbing shared by the Maintenance and RepositoryReplication controllers: their
//! context over the shared referent stores (owned Jobs, repositories, Secret and Namespace
//! metadata; one watch per kind, see `crate::controllers`) and the helpers their watch mappers use.

use k8s_openapi::api::core::v1::Namespace;
use kopiur_api::ClusterRepository;
use kopiur_api::shared::{RepositoryKind, RepositoryRef};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};

/// The Maintenance and RepositoryReplication reconcilers run on the one crate context.
pub type RunCtx = crate::context::Context;

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
