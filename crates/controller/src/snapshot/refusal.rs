//! The rules a Snapshot must meet against its policy before it may run (docs/design/api-contract.md §7.1, §7.6,
//! docs/design/api-contract.md §15), as a pure function: `RepositoryNotInPolicy` (X: an explicit `spec.repository` must be
//! one of the policy's repositories) and `SourceRequired` (R: `spec.source` is required when the
//! policy expands to more than one source; the message lists the choices). A refused Snapshot
//! ends `Failed` with that reason and never launches a Job: every field involved is immutable,
//! so it could never run as written.
use kopiur_api::names::reason;
use kopiur_api::shared::status::ResolvedSource;
use kopiur_api::shared::{RepositoryKind, RepositoryRef};
use kopiur_api::snapshot::SnapshotSpec;
use kopiur_api::snapshot_policy::{SnapshotPolicySpec, SourceKind};

/// `(kind, namespace, name)` with the referrer's namespace filled in (none for a
/// ClusterRepository).
fn key(r: &RepositoryRef, referrer_ns: &str) -> (RepositoryKind, Option<String>, String) {
    let ns = match r.kind {
        RepositoryKind::Repository => Some(r.namespace.clone().unwrap_or_else(|| referrer_ns.to_string())),
        RepositoryKind::ClusterRepository => None,
    };
    (r.kind, ns, r.name.clone())
}

fn display(r: &RepositoryRef, referrer_ns: &str) -> String {
    match key(r, referrer_ns) {
        (RepositoryKind::Repository, Some(ns), name) => format!("Repository {ns}/{name}"),
        (RepositoryKind::Repository, None, name) => format!("Repository {name}"),
        (RepositoryKind::ClusterRepository, _, name) => format!("ClusterRepository {name}"),
    }
}

/// The reason and message refusing this Snapshot, or None when it may run. `snapshot_ns` is
/// the Snapshot's namespace, which is also its policy's (X: `policyRef` stays in-namespace).
/// `expanded` is the policy's `status.resolved.sources` (what its selectors matched).
pub fn refusal(
    spec: &SnapshotSpec,
    snapshot_ns: &str,
    policy_name: &str,
    policy: &SnapshotPolicySpec,
    expanded: &[ResolvedSource],
) -> Option<(&'static str, String)> {
    if let Some(r) = &spec.repository {
        let want = key(r, snapshot_ns);
        let allowed = policy.target.repositories();
        if !allowed.iter().any(|a| key(a, snapshot_ns) == want) {
            let list: Vec<String> = allowed.iter().map(|a| display(a, snapshot_ns)).collect();
            return Some((
                reason::REPOSITORY_NOT_IN_POLICY,
                format!(
                    "spec.repository {} is not one of SnapshotPolicy {policy_name}'s repositories ({}); create a new Snapshot without spec.repository, or with one of those",
                    display(r, snapshot_ns),
                    list.join(", ")
                ),
            ));
        }
    }
    if spec.source.is_none() && (policy.sources.len() > 1 || expanded.len() > 1) {
        let choices: Vec<String> = policy
            .sources
            .iter()
            .enumerate()
            .map(|(i, s)| match &s.kind {
                SourceKind::Pvc(p) => format!("sourceIndex {i} (pvc {})", p.name),
                SourceKind::PvcSelector(_) => {
                    let pvcs: Vec<&str> = expanded.iter().map(|e| e.pvc.as_str()).collect();
                    if pvcs.is_empty() {
                        format!("sourceIndex {i} (a pvcSelector; also set target.pvc)")
                    } else {
                        format!("sourceIndex {i} (a pvcSelector; target.pvc one of {})", pvcs.join(", "))
                    }
                }
                SourceKind::Nfs(_) => format!("sourceIndex {i} (nfs)"),
                SourceKind::Stream(_) => format!("sourceIndex {i} (stream)"),
            })
            .collect();
        return Some((
            reason::SOURCE_REQUIRED,
            format!(
                "SnapshotPolicy {policy_name} has more than one source, so spec.source is required; create a new Snapshot with spec.source set to one of: {}",
                choices.join("; ")
            ),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(v: serde_json::Value) -> SnapshotPolicySpec {
        serde_json::from_value(v).unwrap()
    }

    fn snap(v: serde_json::Value) -> SnapshotSpec {
        serde_json::from_value(v).unwrap()
    }

    fn three() -> SnapshotPolicySpec {
        policy(json!({"repository": {"name": "r"}, "copyMethod": "Direct",
            "sources": [{"pvc": {"name": "a"}}, {"pvc": {"name": "b"}}, {"pvc": {"name": "c"}}]}))
    }

    #[test]
    fn a_multi_source_policy_needs_spec_source_and_lists_the_choices() {
        let (r, m) = refusal(&snap(json!({"policyRef": {"name": "p"}})), "t", "p", &three(), &[]).unwrap();
        assert_eq!(r, "SourceRequired");
        for want in ["sourceIndex 0 (pvc a)", "sourceIndex 1 (pvc b)", "sourceIndex 2 (pvc c)", "SnapshotPolicy p"] {
            assert!(m.contains(want), "{want} in {m}");
        }
        let with_source = snap(json!({"policyRef": {"name": "p"},
            "source": {"sourceIndex": 1, "target": {"pvc": {"name": "b"}}}}));
        assert_eq!(refusal(&with_source, "t", "p", &three(), &[]), None);
        let one = policy(json!({"repository": {"name": "r"}, "sources": [{"pvc": {"name": "a"}}]}));
        assert_eq!(refusal(&snap(json!({"policyRef": {"name": "p"}})), "t", "p", &one, &[]), None);
        // A single selector that matched two PVCs expands to two sources.
        let sel = policy(json!({"repository": {"name": "r"},
            "sources": [{"pvcSelector": {"labelSelector": {"matchLabels": {"b": "y"}}}}]}));
        let expanded = vec![
            ResolvedSource { pvc: "t/x".into(), source_path: "/pvc/x".into() },
            ResolvedSource { pvc: "t/y".into(), source_path: "/pvc/y".into() },
        ];
        let (r, m) = refusal(&snap(json!({"policyRef": {"name": "p"}})), "t", "p", &sel, &expanded).unwrap();
        assert_eq!(r, "SourceRequired");
        assert!(m.contains("t/x, t/y"), "{m}");
    }

    #[test]
    fn an_explicit_repository_must_be_one_of_the_policys() {
        let two = policy(json!({"repositories": [{"name": "r"}, {"kind": "ClusterRepository", "name": "shared"}],
            "sources": [{"pvc": {"name": "a"}}]}));
        let s = |r: serde_json::Value| snap(json!({"policyRef": {"name": "p"}, "repository": r}));
        assert_eq!(refusal(&s(json!({"name": "r"})), "t", "p", &two, &[]), None);
        assert_eq!(refusal(&s(json!({"name": "r", "namespace": "t"})), "t", "p", &two, &[]), None, "same, spelled out");
        assert_eq!(refusal(&s(json!({"kind": "ClusterRepository", "name": "shared"})), "t", "p", &two, &[]), None);
        let (r, m) = refusal(&s(json!({"name": "other"})), "t", "p", &two, &[]).unwrap();
        assert_eq!(r, "RepositoryNotInPolicy");
        assert!(m.contains("Repository t/other") && m.contains("Repository t/r, ClusterRepository shared"), "{m}");
        // Same name, another namespace or kind: not the policy's.
        assert!(refusal(&s(json!({"name": "r", "namespace": "u"})), "t", "p", &two, &[]).is_some());
        assert!(refusal(&s(json!({"kind": "ClusterRepository", "name": "r"})), "t", "p", &two, &[]).is_some());
    }
}
