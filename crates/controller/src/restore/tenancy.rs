//! Whose data a Restore may read (audit findings 2.7 and 2.11). A Restore reads its own
//! namespace's data and writes into its own namespace. Reading another namespace's Snapshot,
//! policy or identity needs a grant from the side that is read: the annotation
//! `restore-allowed-namespaces` naming the reader (or `*`) on the Snapshot, on the
//! SnapshotPolicy, or on the namespace itself. A `pvcRef` into another namespace is refused
//! outright: the Job mounts claims of its own namespace only.
//!
//! The check runs before anything the source names is looked up, so a refused Restore learns
//! nothing about the other namespace (not even whether the object exists).
use kopiur_api::Restore;
use kopiur_api::names::annotation::RESTORE_ALLOWED_NAMESPACES;
use kopiur_api::restore::{RestoreSource, RestoreTarget};
use kopiur_api::shared::RepositoryKind;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use crate::context::Context;
use crate::gating::annotation_grants;

/// Where a grant may sit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Site<'a> {
    Namespace(&'a str),
    Snapshot { namespace: &'a str, name: &'a str },
    Policy { namespace: &'a str, name: &'a str },
}

/// The refusal message, or `None` when the Restore reads and writes only what it may.
/// `annotation` reads the grant annotation at a site.
pub fn refusal<'a>(restore: &'a Restore, annotation: impl Fn(Site<'a>) -> Option<String>) -> Option<String> {
    let ns = restore.metadata.namespace.as_deref().unwrap_or_default();
    let granted = |site: Site<'a>, other: &'a str| {
        annotation_grants(annotation(site).as_deref(), ns)
            || annotation_grants(annotation(Site::Namespace(other)).as_deref(), ns)
    };
    if let RestoreTarget::PvcRef(o) = &restore.spec.target
        && let Some(tns) = o.namespace.as_deref().filter(|t| *t != ns)
    {
        return Some(format!(
            "target.pvcRef.namespace is {tns}: a Restore writes only into a PVC of its own namespace ({ns}); remove the \
             namespace, or create the Restore in {tns}"
        ));
    }
    let hint = |kind: &str, other: &str, name: &str| {
        format!(
            "kubectl annotate {kind} {name} -n {other} {RESTORE_ALLOWED_NAMESPACES}={ns} (or annotate namespace {other} \
             the same way)"
        )
    };
    match &restore.spec.source {
        RestoreSource::SnapshotRef(o) => {
            let other = o.namespace.as_deref().filter(|x| *x != ns)?;
            (!granted(Site::Snapshot { namespace: other, name: &o.name }, other)).then(|| {
                format!(
                    "source.snapshotRef names a Snapshot of namespace {other}, which has not granted {ns} its restores; \
                     the owner of {other} can: {}",
                    hint("snapshot.kopiur.home-operations.com", other, &o.name)
                )
            })
        }
        RestoreSource::FromPolicy(p) => {
            let other = p.namespace.as_deref().filter(|x| *x != ns)?;
            (!granted(Site::Policy { namespace: other, name: &p.name }, other)).then(|| {
                format!(
                    "source.fromPolicy names a SnapshotPolicy of namespace {other}, which has not granted {ns} its \
                     restores; the owner of {other} can: {}",
                    hint("snapshotpolicy.kopiur.home-operations.com", other, &p.name)
                )
            })
        }
        RestoreSource::Identity(i) => {
            // A namespace's own Repository is its own: any identity in it is its data.
            let own_repository = restore.spec.repository.as_ref().is_some_and(|r| {
                r.kind == RepositoryKind::Repository && r.namespace.as_deref().is_none_or(|x| x == ns)
            });
            let other = Some(i.hostname.as_str()).filter(|h| *h != ns && !own_repository)?;
            (!annotation_grants(annotation(Site::Namespace(other)).as_deref(), ns)).then(|| {
                format!(
                    "source.identity.hostname is {other}, not this namespace ({ns}), on a repository other namespaces \
                     share; kopiur restores another namespace's identity only when it grants it: kubectl annotate \
                     namespace {other} {RESTORE_ALLOWED_NAMESPACES}={ns}"
                )
            })
        }
    }
}

/// [`refusal`] over the controller's stores.
pub fn check(ctx: &Context, restore: &Restore) -> Option<String> {
    refusal(restore, |site| match site {
        Site::Namespace(n) => ctx.stores.namespaces.get(&ObjectRef::new(n)).and_then(|o| value(o.annotations())),
        Site::Snapshot { namespace, name } => {
            ctx.stores.snapshots.get(&ObjectRef::new(name).within(namespace)).and_then(|o| value(o.annotations()))
        }
        Site::Policy { namespace, name } => {
            ctx.stores.policies.get(&ObjectRef::new(name).within(namespace)).and_then(|o| value(o.annotations()))
        }
    })
}

fn value(a: &std::collections::BTreeMap<String, String>) -> Option<String> {
    a.get(RESTORE_ALLOWED_NAMESPACES).cloned()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;

    fn restore(source: serde_json::Value, target: serde_json::Value, repository: serde_json::Value) -> Restore {
        let mut spec = json!({"source": source, "target": target});
        if !repository.is_null() {
            spec["repository"] = repository;
        }
        serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Restore",
            "metadata": {"name": "r", "namespace": "t2"}, "spec": spec
        }))
        .unwrap()
    }

    fn pvc() -> serde_json::Value {
        json!({"pvc": {"name": "copy", "capacity": "1Gi"}})
    }

    /// Grants by site, as `namespace/name` (or the namespace alone) -> annotation value.
    fn with(grants: &[(&str, &str)]) -> impl Fn(Site<'_>) -> Option<String> {
        let m: BTreeMap<String, String> = grants.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |site| {
            let key = match site {
                Site::Namespace(n) => n.to_string(),
                Site::Snapshot { namespace, name } => format!("snapshot:{namespace}/{name}"),
                Site::Policy { namespace, name } => format!("policy:{namespace}/{name}"),
            };
            m.get(&key).cloned()
        }
    }

    #[test]
    fn a_restore_reads_its_own_namespace_without_any_grant() {
        let none = with(&[]);
        for source in [
            json!({"snapshotRef": {"name": "s"}}),
            json!({"snapshotRef": {"name": "s", "namespace": "t2"}}),
            json!({"fromPolicy": {"name": "p"}}),
            json!({"identity": {"username": "app", "hostname": "t2"}}),
        ] {
            let r = restore(source.clone(), pvc(), json!({"kind": "ClusterRepository", "name": "shared"}));
            assert_eq!(refusal(&r, &none), None, "{source}");
        }
        // Any identity of the namespace's own Repository.
        let r = restore(json!({"identity": {"username": "app", "hostname": "laptop"}}), pvc(), json!({"name": "mine"}));
        assert_eq!(refusal(&r, &none), None);
    }

    /// The three ways issue 31 reproduced, each refused with the grant that would allow it.
    #[test]
    fn another_namespaces_data_needs_its_grant() {
        let cases = [
            (json!({"snapshotRef": {"name": "s", "namespace": "t1"}}), "snapshot:t1/s", "annotate snapshot.kopiur"),
            (json!({"fromPolicy": {"name": "p", "namespace": "t1"}}), "policy:t1/p", "annotate snapshotpolicy.kopiur"),
            (json!({"identity": {"username": "app", "hostname": "t1"}}), "t1", "annotate namespace t1"),
        ];
        let shared = json!({"kind": "ClusterRepository", "name": "shared"});
        for (source, site, hint) in cases {
            let r = restore(source.clone(), pvc(), shared.clone());
            let m = refusal(&r, with(&[])).unwrap_or_else(|| panic!("{source} was not refused"));
            assert!(m.contains(hint) && m.contains(&format!("{RESTORE_ALLOWED_NAMESPACES}=t2")), "{m}");
            // A grant for someone else, then for t2 (by name, in a list, or `*`).
            assert!(refusal(&r, with(&[(site, "t3")])).is_some(), "{source}");
            for v in ["t2", "t3, t2", "*"] {
                assert_eq!(refusal(&r, with(&[(site, v)])), None, "{source} granted by {v}");
            }
            // The namespace-wide grant works for every kind.
            assert_eq!(refusal(&r, with(&[("t1", "t2")])), None, "{source}");
        }
        // Another namespace's Repository is not the Restore's own: its identities need a grant.
        let r = restore(
            json!({"identity": {"username": "app", "hostname": "t1"}}),
            pvc(),
            json!({"name": "theirs", "namespace": "t1"}),
        );
        assert!(refusal(&r, with(&[])).is_some());
    }

    #[test]
    fn a_pvc_ref_into_another_namespace_is_refused_even_with_a_grant() {
        let r = restore(
            json!({"snapshotRef": {"name": "s"}}),
            json!({"pvcRef": {"name": "data", "namespace": "t1"}}),
            serde_json::Value::Null,
        );
        let m = refusal(&r, with(&[("t1", "*")])).unwrap();
        assert!(m.contains("target.pvcRef.namespace is t1"), "{m}");
        let own = restore(
            json!({"snapshotRef": {"name": "s"}}),
            json!({"pvcRef": {"name": "data", "namespace": "t2"}}),
            serde_json::Value::Null,
        );
        assert_eq!(refusal(&own, with(&[])), None);
    }
}
