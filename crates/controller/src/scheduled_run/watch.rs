//! The helpers the Maintenance and RepositoryReplication watch mappers share: which of their
//! objects a Secret or Namespace event wakes (one watch per kind, see `crate::controllers`).

use k8s_openapi::api::core::v1::Namespace;
use kopiur_api::ClusterRepository;
use kopiur_api::names::{condition, reason};
use kopiur_api::shared::{RepositoryKind, RepositoryRef};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};

/// Whether a consumer's Ready condition carries `reason` (parked consumers are found this way).
pub fn ready_reason_is(conds: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition], reason: &str) -> bool {
    conds.iter().any(|c| c.type_ == condition::READY && c.reason == reason)
}

/// The objects of `ns` in `store` waiting for credentials (Ready reason
/// `MissingCredentialsSecret`), which a Secret event in `ns` wakes; `conditions` reads an
/// object's status conditions (Maintenance and RepositoryReplication alike).
pub fn waiting_for_credentials<K>(
    store: &kube::runtime::reflector::Store<K>,
    ns: Option<&str>,
    conditions: impl Fn(&K) -> Option<&[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]>,
) -> Vec<kube::runtime::reflector::ObjectRef<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    store
        .state()
        .iter()
        .filter(|o| o.meta().namespace.as_deref() == ns)
        .filter(|o| conditions(o).is_some_and(|c| ready_reason_is(c, reason::MISSING_CREDENTIALS_SECRET)))
        .map(|o| kube::runtime::reflector::ObjectRef::from_obj(o.as_ref()))
        .collect()
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

#[cfg(test)]
mod tests {
    use kopiur_api::Maintenance;
    use kube::runtime::reflector::{self, ObjectRef};
    use kube::runtime::watcher;
    use serde_json::json;

    use super::*;

    fn maintenance(ns: &str, name: &str, ready_reason: Option<&str>) -> Maintenance {
        let mut m = json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Maintenance",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"repository": {"name": "r"}}
        });
        if let Some(reason) = ready_reason {
            m["status"] = json!({"conditions": [{"type": "Ready", "status": "False", "reason": reason, "message": "",
                                                  "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        }
        serde_json::from_value(m).unwrap()
    }

    /// A Secret event in a namespace wakes exactly its objects parked on missing credentials.
    #[test]
    fn a_secret_wakes_only_its_namespace_objects_waiting_for_credentials() {
        let (store, mut writer) = reflector::store::<Maintenance>();
        for m in [
            maintenance("apps", "waiting", Some(reason::MISSING_CREDENTIALS_SECRET)),
            maintenance("apps", "parked", Some(reason::REPOSITORY_NOT_READY)),
            maintenance("apps", "new", None),
            maintenance("other", "waiting", Some(reason::MISSING_CREDENTIALS_SECRET)),
        ] {
            writer.apply_watcher_event(&watcher::Event::Apply(m));
        }
        fn conditions(m: &Maintenance) -> Option<&[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]> {
            m.status.as_ref().map(|s| s.conditions.as_slice())
        }
        assert_eq!(
            waiting_for_credentials(&store, Some("apps"), conditions),
            vec![ObjectRef::new("waiting").within("apps")]
        );
        assert!(waiting_for_credentials(&store, Some("empty"), conditions).is_empty());
    }
}
