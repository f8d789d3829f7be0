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
