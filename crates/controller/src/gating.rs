//! Consumer gating: `RepositoryReady(R)` and the ClusterRepository tenancy gate, read from
//! reflector stores by every consumer reconciler.
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kopiur_api::cluster_repository::AllowedNamespaces;
use kopiur_api::repository::RepositoryPhase;
use kopiur_api::shared::{RepositoryKind, RepositoryRef};
use kopiur_api::{ClusterRepository, Repository};
use kube::runtime::reflector::{ObjectRef, Store};

/// Why a consumer may or may not launch against a repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    Open,
    /// Park Pending with Ready=False/RepositoryNotReady; the message names the phase.
    NotReady {
        repository: String,
        phase: String,
    },
    /// Stalled with NamespaceNotAllowed (ClusterRepository tenancy).
    NamespaceNotAllowed {
        repository: String,
    },
}

impl Gate {
    pub fn message(&self) -> String {
        match self {
            Gate::Open => String::new(),
            Gate::NotReady { repository, phase } => {
                format!("repository {repository} is {phase}; waiting for it to become Ready")
            }
            Gate::NamespaceNotAllowed { repository } => {
                format!("this namespace is not in allowedNamespaces of ClusterRepository {repository}")
            }
        }
    }
}

fn phase_gate(display: String, phase: Option<&RepositoryPhase>) -> Gate {
    match phase {
        Some(p) if p.admits_consumers() => Gate::Open,
        Some(p) => Gate::NotReady { repository: display, phase: p.as_str().to_string() },
        None => Gate::NotReady { repository: display, phase: "Pending".into() },
    }
}

/// `RepositoryReady(R)`: R exists and its phase is Ready (Alert mode with an unreachable
/// backend is Ready). For a ClusterRepository the consumer's namespace must be allowed;
/// `namespace_labels` is None when the Namespace cannot be read (fail closed).
pub fn repository_ready(
    repos: &Store<Repository>,
    crepos: &Store<ClusterRepository>,
    consumer_ns: &str,
    namespace_labels: Option<&BTreeMap<String, String>>,
    r: &RepositoryRef,
) -> Gate {
    match r.kind {
        RepositoryKind::Repository => {
            let ns = r.namespace.clone().unwrap_or_else(|| consumer_ns.to_string());
            let display = format!("{ns}/{}", r.name);
            let obj = repos.get(&ObjectRef::new(&r.name).within(&ns));
            match obj {
                Some(o) => phase_gate(display, o.status.as_ref().and_then(|s| s.phase.as_ref())),
                None => Gate::NotReady { repository: display, phase: "absent".into() },
            }
        }
        RepositoryKind::ClusterRepository => {
            let display = r.name.clone();
            match crepos.get(&ObjectRef::new(&r.name)) {
                None => Gate::NotReady { repository: display, phase: "absent".into() },
                Some(o) => {
                    if !namespace_allowed(&o.spec.allowed_namespaces, consumer_ns, namespace_labels) {
                        return Gate::NamespaceNotAllowed { repository: display };
                    }
                    phase_gate(display, o.status.as_ref().and_then(|s| s.common.phase.as_ref()))
                }
            }
        }
    }
}

/// The repository acting for itself (its batch-delete dispatcher, whose Jobs run in the
/// repository's home namespace, the operator namespace for a ClusterRepository): the phase
/// alone. Tenancy is never a question about the repository itself; it is asked of each
/// consumer (`consumer_allowed`), per deleting Snapshot.
pub fn own_phase_ready(phase: Option<&RepositoryPhase>) -> bool {
    phase.is_some_and(RepositoryPhase::admits_consumers)
}

/// ClusterRepository tenancy for one consumer namespace (a namespaced Repository has none).
pub fn consumer_allowed(
    cluster: Option<&ClusterRepository>,
    consumer_ns: &str,
    namespace_labels: Option<&BTreeMap<String, String>>,
) -> bool {
    cluster.is_none_or(|c| namespace_allowed(&c.spec.allowed_namespaces, consumer_ns, namespace_labels))
}

/// Whether `allowed` admits namespaces by label: only then does a namespace's relabelling
/// change a tenancy verdict.
pub fn label_dependent(allowed: &AllowedNamespaces) -> bool {
    matches!(allowed, AllowedNamespaces::Selector(_))
}

/// Remembers each namespace's labels as the Namespace watch last delivered them, so a mapper
/// fans out to a namespace's consumers only when its labels changed (or it is seen for the
/// first time: a consumer created before its namespace reached the store failed closed and
/// must be re-evaluated). Status-only updates of a namespace fan out nothing.
#[derive(Debug, Default)]
pub struct NamespaceLabels {
    seen: std::collections::HashMap<String, BTreeMap<String, String>>,
}

impl NamespaceLabels {
    /// Records `labels` for `ns`; true when they differ from the last ones recorded.
    pub fn changed(&mut self, ns: &str, labels: Option<&BTreeMap<String, String>>) -> bool {
        let now = labels.cloned().unwrap_or_default();
        match self.seen.get(ns) {
            Some(prev) if *prev == now => false,
            Some(_) | None => {
                self.seen.insert(ns.to_string(), now);
                true
            }
        }
    }

    pub fn forget(&mut self, ns: &str) {
        self.seen.remove(ns);
    }
}

/// Whether any ClusterRepository admits namespaces by label (else a relabelling changes no
/// tenancy verdict and the Namespace mappers fan out nothing).
pub fn any_label_dependent(crepos: &Store<ClusterRepository>) -> bool {
    crepos.state().iter().any(|c| label_dependent(&c.spec.allowed_namespaces))
}

/// The tenancy gate with full LabelSelector semantics; fails closed for selectors when the
/// namespace's labels are unknown.
pub fn namespace_allowed(allowed: &AllowedNamespaces, ns: &str, labels: Option<&BTreeMap<String, String>>) -> bool {
    match allowed {
        AllowedNamespaces::All(_) => true,
        AllowedNamespaces::List(list) => list.iter().any(|n| n == ns),
        AllowedNamespaces::Selector(sel) => labels.is_some_and(|l| selector_matches(sel, l)),
    }
}

pub fn selector_matches(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = sel.match_labels.as_ref().is_none_or(|m| m.iter().all(|(k, v)| labels.get(k) == Some(v)));
    let exprs_ok = sel.match_expressions.as_ref().is_none_or(|exprs| {
        exprs.iter().all(|e| {
            let vals = e.values.clone().unwrap_or_default();
            match e.operator.as_str() {
                "In" => labels.get(&e.key).is_some_and(|v| vals.contains(v)),
                "NotIn" => labels.get(&e.key).is_none_or(|v| !vals.contains(v)),
                "Exists" => labels.contains_key(&e.key),
                "DoesNotExist" => !labels.contains_key(&e.key),
                // An operator this version does not know admits nothing (fail closed).
                _ => false,
            }
        })
    });
    labels_ok && exprs_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn namespace_labels_fan_out_only_on_a_change() {
        let mut t = NamespaceLabels::default();
        assert!(t.changed("a", Some(&labels(&[("team", "media")]))), "first sight re-evaluates");
        assert!(!t.changed("a", Some(&labels(&[("team", "media")]))), "a status-only update is quiet");
        assert!(t.changed("a", Some(&labels(&[("team", "other")]))), "a relabelling re-evaluates");
        assert!(t.changed("a", None), "labels removed");
        assert!(!t.changed("a", Some(&labels(&[]))), "no labels and empty labels are the same");
        assert!(t.changed("b", None), "another namespace is tracked on its own");
        t.forget("a");
        assert!(t.changed("a", None));
    }

    #[test]
    fn the_dispatcher_reads_the_phase_and_members_carry_tenancy() {
        assert!(own_phase_ready(Some(&RepositoryPhase::Ready)));
        assert!(!own_phase_ready(Some(&RepositoryPhase::Degraded)));
        assert!(!own_phase_ready(None));
        let c: ClusterRepository = serde_json::from_value(serde_json::json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "ClusterRepository",
            "metadata": {"name": "shared"},
            "spec": {
                "backend": {"s3": {"bucket": "b", "endpoint": "http://s3.invalid", "region": "garage"}},
                "encryption": {"passwordSecretRef": {"name": "kopia"}},
                "allowedNamespaces": {"list": ["tenant"]}
            }
        }))
        .unwrap();
        // The repository's own home (the operator namespace) is not a tenant: a gate asked
        // there, as the dispatcher once did with namespace "", fails closed.
        assert!(!consumer_allowed(Some(&c), "", None));
        assert!(consumer_allowed(Some(&c), "tenant", None));
        assert!(!consumer_allowed(Some(&c), "other", None));
        assert!(consumer_allowed(None, "anything", None), "a namespaced Repository has no tenancy");
        assert!(!label_dependent(&c.spec.allowed_namespaces));
    }

    #[test]
    fn list_and_all() {
        assert!(namespace_allowed(&AllowedNamespaces::All(kopiur_api::shared::marker::True), "x", None));
        let l = AllowedNamespaces::List(vec!["a".into(), "b".into()]);
        assert!(namespace_allowed(&l, "b", None));
        assert!(!namespace_allowed(&l, "c", None));
    }

    #[test]
    fn selector_with_expressions_and_fail_closed() {
        let sel = LabelSelector {
            match_labels: Some(labels(&[("team", "media")])),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "env".into(),
                operator: "NotIn".into(),
                values: Some(vec!["dev".into()]),
            }]),
        };
        let a = AllowedNamespaces::Selector(sel);
        assert!(namespace_allowed(&a, "n", Some(&labels(&[("team", "media"), ("env", "prod")]))));
        assert!(namespace_allowed(&a, "n", Some(&labels(&[("team", "media")]))));
        assert!(!namespace_allowed(&a, "n", Some(&labels(&[("team", "media"), ("env", "dev")]))));
        assert!(!namespace_allowed(&a, "n", Some(&labels(&[("team", "other")]))));
        assert!(!namespace_allowed(&a, "n", None), "unknown labels fail closed");
    }
}
