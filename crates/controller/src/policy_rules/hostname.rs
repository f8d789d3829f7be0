//! Whose identity a policy may write under (audit finding 2.8). On a repository other
//! namespaces share (a ClusterRepository, or a namespaced Repository of another namespace), a
//! policy writes only under its own namespace's hostname, the default. Another hostname would
//! plant snapshots under that namespace's identity, where its identity restores pick them up,
//! and make the catalog place rows in its namespace. The namespace a hostname names may grant it
//! with the annotation `identity-allowed-namespaces` naming the policy's namespace (or `*`); a
//! hostname that names no namespace cannot be granted. A namespace's own Repository takes any
//! hostname. Pure: the shell passes the namespace annotation.
use kopiur_api::SnapshotPolicy;
use kopiur_api::domain::identity::resolve_identity;
use kopiur_api::names::annotation::IDENTITY_ALLOWED_NAMESPACES;
use kopiur_api::shared::RepositoryKind;
use kube::ResourceExt;

/// The refusal message, or `None`. `grant(h)` is the annotation on namespace `h`, if it exists.
pub fn foreign_hostname(p: &SnapshotPolicy, grant: impl Fn(&str) -> Option<String>) -> Option<String> {
    let ns = p.namespace().unwrap_or_default();
    // What runs write under: the pinned hostname, else the spec's.
    let pinned = p.status.as_ref().and_then(|s| s.resolved.as_ref()).and_then(|r| r.identity.as_ref());
    let hostname = match pinned {
        Some(i) => i.hostname.clone(),
        None => resolve_identity(&p.name_any(), &ns, p.spec.identity.as_ref()).ok()?.hostname,
    };
    if hostname == ns {
        return None;
    }
    let shared: Vec<String> = p
        .spec
        .target
        .repositories()
        .into_iter()
        .filter(|r| match r.kind {
            RepositoryKind::ClusterRepository => true,
            RepositoryKind::Repository => r.namespace.as_deref().is_some_and(|x| x != ns),
        })
        .map(|r| match (&r.kind, &r.namespace) {
            (RepositoryKind::ClusterRepository, _) => format!("ClusterRepository {}", r.name),
            (RepositoryKind::Repository, n) => format!("Repository {}/{}", n.as_deref().unwrap_or(&ns), r.name),
        })
        .collect();
    if shared.is_empty() || crate::gating::annotation_grants(grant(&hostname).as_deref(), &ns) {
        return None;
    }
    Some(format!(
        "identity hostname {hostname} is not this namespace ({ns}), and {} is shared with other namespaces: a policy \
         writes there only under its own namespace's hostname. Remove spec.identity.hostname, or have namespace \
         {hostname} grant it: kubectl annotate namespace {hostname} {IDENTITY_ALLOWED_NAMESPACES}={ns}",
        shared.join(", ")
    ))
}

/// [`foreign_hostname`] with the grant read from the Namespace store.
pub fn check(
    p: &SnapshotPolicy,
    namespaces: &kube::runtime::reflector::Store<kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Namespace>>,
) -> Option<String> {
    foreign_hostname(p, |h| {
        namespaces
            .get(&kube::runtime::reflector::ObjectRef::new(h))
            .and_then(|n| n.annotations().get(IDENTITY_ALLOWED_NAMESPACES).cloned())
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn policy(identity: serde_json::Value, repositories: serde_json::Value) -> SnapshotPolicy {
        let mut spec = json!({"sources": [{"pvc": {"name": "data"}}], "repositories": repositories});
        if !identity.is_null() {
            spec["identity"] = identity;
        }
        serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotPolicy",
            "metadata": {"name": "app", "namespace": "t2"}, "spec": spec
        }))
        .unwrap()
    }

    fn none(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn a_policy_writes_under_another_namespace_only_with_its_grant() {
        let shared = json!([{"kind": "ClusterRepository", "name": "shared"}]);
        // The default hostname is the namespace; a username alone changes nothing.
        assert_eq!(foreign_hostname(&policy(serde_json::Value::Null, shared.clone()), none), None);
        assert_eq!(foreign_hostname(&policy(json!({"username": "x"}), shared.clone()), none), None);
        let p = policy(json!({"hostname": "t1"}), shared.clone());
        let m = foreign_hostname(&p, none).unwrap();
        assert!(
            m.contains("ClusterRepository shared") && m.contains(&format!("{IDENTITY_ALLOWED_NAMESPACES}=t2")),
            "{m}"
        );
        assert!(foreign_hostname(&p, |_| Some("t3".into())).is_some());
        assert_eq!(foreign_hostname(&p, |h| (h == "t1").then(|| "t3,t2".into())), None);
        assert_eq!(foreign_hostname(&p, |_| Some("*".into())), None);
        // Another namespace's Repository is shared too; the namespace's own takes any hostname.
        let theirs = policy(json!({"hostname": "t1"}), json!([{"name": "r", "namespace": "t1"}]));
        assert!(foreign_hostname(&theirs, none).unwrap().contains("Repository t1/r"));
        let own = policy(json!({"hostname": "laptop"}), json!([{"name": "r"}, {"name": "s", "namespace": "t2"}]));
        assert_eq!(foreign_hostname(&own, none), None);
    }

    #[test]
    fn the_pinned_hostname_is_what_counts() {
        let mut p = policy(serde_json::Value::Null, json!([{"kind": "ClusterRepository", "name": "shared"}]));
        p.status = Some(
            serde_json::from_value(json!({"resolved": {"identity": {"username": "app", "hostname": "t1"}}})).unwrap(),
        );
        assert!(foreign_hostname(&p, none).is_some());
    }
}
