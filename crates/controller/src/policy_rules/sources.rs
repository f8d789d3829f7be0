//! Source expansion (docs/design/api-contract.md §6.2, §6.4), pure over the PVCs of the policy's namespace.
//! A `pvc` item is one source; a `pvcSelector` item is one source per matched PVC in the
//! policy's namespace, ordered by PVC name. A PVC reached by two items is backed up once, by the
//! first item that reaches it. `nfs`, `stream` and a `namespaceSelector` naming another
//! namespace are [next] gating: the expansion refuses them with a message naming the field.
use std::collections::{BTreeMap, BTreeSet};

use kopiur_api::domain::hash::fnv1a64;
use kopiur_api::domain::identity::source_path;
use kopiur_api::shared::status::ResolvedSource;
use kopiur_api::snapshot::{PvcTarget, SnapshotSource, SourceTarget};
use kopiur_api::snapshot_policy::{PvcSelectorSource, Source, SourceKind};

use crate::gating::selector_matches;

/// A PVC of the policy's namespace, as the metadata store sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PvcInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// The PVC is being deleted: a selector no longer picks it up.
    pub deleting: bool,
}

/// One expanded source: what one Snapshot backs up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expanded {
    /// The index of the policy's source item it came from.
    pub source_index: usize,
    pub namespace: String,
    pub pvc: String,
    pub source_path: String,
}

impl Expanded {
    /// `ns/name`: the source key (`status.resolved.sources[].pvc`, and the child-name hash input).
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.pvc)
    }

    pub fn resolved(&self) -> ResolvedSource {
        ResolvedSource { pvc: self.key(), source_path: self.source_path.clone() }
    }

    /// `Snapshot.spec.source` for a child that backs up this source.
    pub fn snapshot_source(&self) -> SnapshotSource {
        SnapshotSource {
            source_index: self.source_index as i32,
            target: SourceTarget { pvc: PvcTarget { namespace: Some(self.namespace.clone()), name: self.pvc.clone() } },
            group: None,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expansion {
    pub sources: Vec<Expanded>,
    /// Indexes of `pvcSelector` items that matched no PVC.
    pub empty_selectors: Vec<usize>,
}

impl Expansion {
    /// Why the expansion is empty, for status messages; `None` when it is not.
    pub fn empty_message(&self, namespace: &str) -> Option<String> {
        if !self.sources.is_empty() {
            return None;
        }
        let items: Vec<String> = self.empty_selectors.iter().map(|i| format!("spec.sources[{i}]")).collect();
        Some(if items.is_empty() {
            "the policy expands to no source".to_string()
        } else {
            format!("pvcSelector matched no PVC in namespace {namespace} ({})", items.join(", "))
        })
    }
}

/// The PVCs of `namespace` in the metadata store.
pub fn pvcs_in(
    store: &kube::runtime::reflector::Store<
        kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::PersistentVolumeClaim>,
    >,
    namespace: &str,
) -> Vec<PvcInfo> {
    store
        .state()
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(namespace))
        .map(|p| PvcInfo {
            name: p.metadata.name.clone().unwrap_or_default(),
            labels: p.metadata.labels.clone().unwrap_or_default(),
            deleting: p.metadata.deletion_timestamp.is_some(),
        })
        .collect()
}

/// Whether the policy has a `pvcSelector` item (its expansion depends on the PVCs).
pub fn uses_selector(sources: &[Source]) -> bool {
    sources.iter().any(|s| matches!(s.kind, SourceKind::PvcSelector(_)))
}

/// A `namespaceSelector` that names only the policy's own namespace (or nothing) asks for the
/// default, so only another namespace needs the [next] behaviour.
pub fn selector_refusal(index: usize, sel: &PvcSelectorSource, namespace: &str) -> Option<String> {
    let others: Vec<&str> = sel
        .namespace_selector
        .as_ref()
        .map(|n| n.match_names.iter().map(String::as_str).filter(|n| *n != namespace).collect())
        .unwrap_or_default();
    (!others.is_empty()).then(|| {
        format!(
            "spec.sources[{index}].pvcSelector.namespaceSelector is not implemented in this release \
             (it names {}); a pvcSelector selects PVCs in the policy's namespace only",
            others.join(", ")
        )
    })
}

/// Expands the policy's sources over the PVCs of its namespace.
pub fn expand(namespace: &str, sources: &[Source], pvcs: &[PvcInfo]) -> Result<Expansion, String> {
    let mut sorted: Vec<&PvcInfo> = pvcs.iter().filter(|p| !p.deleting).collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = Expansion::default();
    let mut seen = BTreeSet::new();
    for (index, source) in sources.iter().enumerate() {
        let names: Vec<String> = match &source.kind {
            SourceKind::Pvc(p) => vec![p.name.clone()],
            SourceKind::PvcSelector(sel) => {
                if let Some(m) = selector_refusal(index, sel, namespace) {
                    return Err(m);
                }
                let matched: Vec<String> = sorted
                    .iter()
                    .filter(|p| selector_matches(&sel.label_selector, &p.labels))
                    .map(|p| p.name.clone())
                    .collect();
                if matched.is_empty() {
                    out.empty_selectors.push(index);
                }
                matched
            }
            SourceKind::Nfs(_) => return Err(format!("spec.sources[{index}].nfs is not implemented in this release")),
            SourceKind::Stream(_) => {
                return Err(format!("spec.sources[{index}].stream is not implemented in this release"));
            }
        };
        for pvc in names {
            if !seen.insert(pvc.clone()) {
                continue;
            }
            let path = source_path(
                source.resolved_source_path_strategy(),
                namespace,
                &pvc,
                source.source_path_override.as_deref(),
            );
            out.sources.push(Expanded {
                source_index: index,
                namespace: namespace.to_string(),
                pvc,
                source_path: path,
            });
        }
    }
    Ok(out)
}

/// The 6-hex child-name suffix of a source key (docs/design/api-contract.md §8: `-<6 hex of a hash of the
/// source key>`): the top 24 bits of FNV-1a-64, so it is stable across versions and replicas.
pub fn key_hash6(key: &str) -> String {
    format!("{:06x}", fnv1a64(key.as_bytes()) >> 40)
}

/// The policies targeting a repository (docs/design/repository-breaker.md §4 G3, docs/design/api-contract.md §6.4): the Repository `ns/name` (`ns`
/// Some) or the ClusterRepository `name` (`ns` None). Every change of that repository
/// re-reconciles them, so `RepositoriesReady` and Ready follow it at once, not on the 300 s
/// requeue; a refused tenancy or an absent repository heals the same way.
pub fn policies_targeting(
    policies: &[std::sync::Arc<kopiur_api::SnapshotPolicy>],
    ns: Option<&str>,
    name: &str,
) -> Vec<kube::runtime::reflector::ObjectRef<kopiur_api::SnapshotPolicy>> {
    use kopiur_api::shared::RepositoryKind;
    use kube::ResourceExt;
    policies
        .iter()
        .filter(|p| {
            let own = p.namespace().unwrap_or_default();
            p.spec.target.repositories().iter().any(|r| {
                r.name == name
                    && match (r.kind, ns) {
                        (RepositoryKind::Repository, Some(ns)) => r.resolved_namespace(&own) == Some(ns),
                        (RepositoryKind::ClusterRepository, None) => true,
                        _ => false,
                    }
            })
        })
        .map(|p| kube::runtime::reflector::ObjectRef::from_obj(p.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kopiur_api::snapshot_policy::SourcePathStrategy;

    fn pvc(name: &str, labels: &[(&str, &str)]) -> PvcInfo {
        PvcInfo {
            name: name.into(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            deleting: false,
        }
    }

    fn source(v: serde_json::Value) -> Source {
        serde_json::from_value(v).unwrap()
    }

    fn pvcs() -> Vec<PvcInfo> {
        vec![
            pvc("media", &[("backup", "yes"), ("tier", "gold")]),
            pvc("db", &[("backup", "yes"), ("tier", "silver")]),
            pvc("cache", &[("tier", "bronze")]),
            pvc("scratch", &[]),
        ]
    }

    fn names(e: &Expansion) -> Vec<&str> {
        e.sources.iter().map(|s| s.pvc.as_str()).collect()
    }

    #[test]
    fn match_labels_expands_one_source_per_pvc_sorted_by_name() {
        let s = source(serde_json::json!({"pvcSelector": {"labelSelector": {"matchLabels": {"backup": "yes"}}}}));
        let e = expand("apps", &[s], &pvcs()).unwrap();
        assert_eq!(names(&e), vec!["db", "media"]);
        assert_eq!(e.sources[0].key(), "apps/db");
        assert_eq!(e.sources[0].source_path, "/pvc/db");
        assert_eq!(e.sources[1].source_index, 0);
        assert!(e.empty_selectors.is_empty());
        assert_eq!(e.empty_message("apps"), None);
    }

    #[test]
    fn match_expressions_in_notin_exists_doesnotexist() {
        let expr = |op: &str, values: Option<Vec<&str>>| {
            let mut req = serde_json::json!({"key": "tier", "operator": op});
            if let Some(v) = values {
                req["values"] = serde_json::json!(v);
            }
            let s = source(serde_json::json!({"pvcSelector": {"labelSelector": {"matchExpressions": [req]}}}));
            let e = expand("apps", &[s], &pvcs()).unwrap();
            names(&e).into_iter().map(String::from).collect::<Vec<_>>()
        };
        assert_eq!(expr("In", Some(vec!["gold", "bronze"])), vec!["cache", "media"]);
        assert_eq!(expr("NotIn", Some(vec!["gold", "bronze"])), vec!["db", "scratch"], "NotIn admits a missing key");
        assert_eq!(expr("Exists", None), vec!["cache", "db", "media"]);
        assert_eq!(expr("DoesNotExist", None), vec!["scratch"]);
        assert!(expr("Bogus", None).is_empty(), "an unknown operator matches nothing");
    }

    #[test]
    fn labels_and_expressions_combine_and_deleting_pvcs_are_skipped() {
        let s = source(serde_json::json!({"pvcSelector": {"labelSelector": {
            "matchLabels": {"backup": "yes"},
            "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["silver"]}]
        }}}));
        assert_eq!(names(&expand("apps", std::slice::from_ref(&s), &pvcs()).unwrap()), vec!["media"]);
        let mut ps = pvcs();
        ps[0].deleting = true;
        let e = expand("apps", &[s], &ps).unwrap();
        assert!(e.sources.is_empty());
        assert_eq!(e.empty_selectors, vec![0]);
    }

    #[test]
    fn no_match_is_an_empty_expansion_with_a_clear_message() {
        let s = source(serde_json::json!({"pvcSelector": {"labelSelector": {"matchLabels": {"app": "none"}}}}));
        let e = expand("apps", &[s], &pvcs()).unwrap();
        assert!(e.sources.is_empty());
        assert_eq!(e.empty_message("apps").unwrap(), "pvcSelector matched no PVC in namespace apps (spec.sources[0])");
    }

    #[test]
    fn source_path_per_strategy_and_override() {
        let sel = |strategy: Option<SourcePathStrategy>, over: Option<&str>| {
            let mut v = serde_json::json!({"pvcSelector": {"labelSelector": {"matchLabels": {"tier": "gold"}}}});
            if let Some(s) = strategy {
                v["sourcePathStrategy"] = serde_json::to_value(s).unwrap();
            }
            if let Some(o) = over {
                v["sourcePathOverride"] = serde_json::json!(o);
            }
            expand("apps", &[source(v)], &pvcs()).unwrap().sources[0].source_path.clone()
        };
        assert_eq!(sel(None, None), "/pvc/media", "resolved PvcName");
        assert_eq!(sel(Some(SourcePathStrategy::PvcName), None), "/pvc/media");
        assert_eq!(sel(Some(SourcePathStrategy::PvcNamespacedName), None), "/pvc/apps/media");
        assert_eq!(sel(Some(SourcePathStrategy::PvcNamespacedName), Some("/data")), "/data");
    }

    #[test]
    fn pvc_items_and_selectors_mix_and_a_pvc_is_backed_up_once() {
        let sources = vec![
            source(serde_json::json!({"pvc": {"name": "db"}})),
            source(serde_json::json!({
                "pvcSelector": {"labelSelector": {"matchLabels": {"backup": "yes"}}},
                "sourcePathStrategy": "PvcNamespacedName"
            })),
        ];
        let e = expand("apps", &sources, &pvcs()).unwrap();
        let got: Vec<(usize, &str, &str)> =
            e.sources.iter().map(|s| (s.source_index, s.pvc.as_str(), s.source_path.as_str())).collect();
        assert_eq!(got, vec![(0, "db", "/pvc/db"), (1, "media", "/pvc/apps/media")]);
        let r = e.sources[1].resolved();
        assert_eq!((r.pvc.as_str(), r.source_path.as_str()), ("apps/media", "/pvc/apps/media"));
        let ss = e.sources[1].snapshot_source();
        assert_eq!(ss.source_index, 1);
        assert_eq!(ss.target.pvc.name, "media");
        assert_eq!(ss.target.pvc.namespace.as_deref(), Some("apps"));
    }

    #[test]
    fn a_namespace_selector_naming_another_namespace_is_gated() {
        let s = source(serde_json::json!({"pvcSelector": {
            "labelSelector": {"matchLabels": {"backup": "yes"}},
            "namespaceSelector": {"matchNames": ["apps", "other"]}
        }}));
        let err = expand("apps", &[s], &pvcs()).unwrap_err();
        assert!(err.contains("spec.sources[0].pvcSelector.namespaceSelector is not implemented"), "{err}");
        assert!(err.contains("other"), "{err}");
        // Naming only the policy's own namespace is the default, not the [next] feature.
        let own = source(serde_json::json!({"pvcSelector": {
            "labelSelector": {"matchLabels": {"backup": "yes"}},
            "namespaceSelector": {"matchNames": ["apps"]}
        }}));
        assert_eq!(names(&expand("apps", &[own], &pvcs()).unwrap()), vec!["db", "media"]);
    }

    #[test]
    fn nfs_and_stream_are_gated() {
        let nfs = source(serde_json::json!({"nfs": {"server": "nas", "path": "/x"}}));
        let err = expand("apps", &[nfs], &[]).unwrap_err();
        assert_eq!(err, "spec.sources[0].nfs is not implemented in this release");
    }

    #[test]
    fn key_hash_is_six_stable_hex_digits() {
        let h = key_hash6("apps/media");
        assert_eq!(h.len(), 6);
        assert!(h.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(h, format!("{:016x}", fnv1a64(b"apps/media"))[..6]);
        assert_ne!(h, key_hash6("apps/db"));
    }

    #[test]
    fn policies_targeting_matches_kind_namespace_and_name() {
        use std::sync::Arc;
        let p = |ns: &str, name: &str, repo: serde_json::Value| {
            Arc::new(
                serde_json::from_value::<kopiur_api::SnapshotPolicy>(serde_json::json!({
                    "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotPolicy",
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {"repository": repo, "copyMethod": "Direct", "sources": [{"pvc": {"name": "a"}}]}
                }))
                .unwrap(),
            )
        };
        let all = vec![
            p("a", "own", serde_json::json!({"name": "r"})),
            p("b", "cross", serde_json::json!({"name": "r", "namespace": "a"})),
            p("b", "other-ns", serde_json::json!({"name": "r"})),
            p("a", "other-name", serde_json::json!({"name": "s"})),
            p("c", "cluster", serde_json::json!({"name": "r", "kind": "ClusterRepository"})),
        ];
        let names = |v: Vec<kube::runtime::reflector::ObjectRef<kopiur_api::SnapshotPolicy>>| {
            let mut n: Vec<String> = v.into_iter().map(|o| o.name).collect();
            n.sort();
            n
        };
        assert_eq!(names(policies_targeting(&all, Some("a"), "r")), vec!["cross", "own"]);
        assert_eq!(names(policies_targeting(&all, Some("b"), "r")), vec!["other-ns"]);
        assert_eq!(names(policies_targeting(&all, None, "r")), vec!["cluster"]);
        assert!(policies_targeting(&all, None, "s").is_empty(), "a ClusterRepository s is not the Repository a/s");
    }
}
