//! The identity-collision X rule (docs/design/api-contract.md §6.5, §15): two SnapshotPolicies whose resolved
//! identities (`username`, `hostname`) are equal and that share a repository would write the
//! same kopia source. The later-created one gets `Stalled` with reason `IdentityCollision`,
//! naming the other, and runs nothing; the earlier one is untouched. Pure: the shell passes
//! every policy from the store.
use chrono::{DateTime, Utc};
use kopiur_api::SnapshotPolicy;
use kopiur_api::domain::identity::resolve_identity;
use kopiur_api::names::reason;
use kopiur_api::shared::{RepositoryKind, RepositoryRef};
use kube::ResourceExt;

/// The Ready/Stalled reason.
pub const IDENTITY_COLLISION: &str = reason::IDENTITY_COLLISION;

type RepoKey = (RepositoryKind, Option<String>, String);

fn repo_key(r: &RepositoryRef, policy_ns: &str) -> RepoKey {
    let ns = match r.kind {
        RepositoryKind::Repository => Some(r.namespace.clone().unwrap_or_else(|| policy_ns.to_string())),
        RepositoryKind::ClusterRepository => None,
    };
    (r.kind, ns, r.name.clone())
}

/// What the rule reads of one policy.
struct Facts {
    namespace: String,
    name: String,
    created: Option<DateTime<Utc>>,
    identity: Option<(String, String)>,
    repositories: Vec<RepoKey>,
}

fn facts(p: &SnapshotPolicy) -> Facts {
    let namespace = p.namespace().unwrap_or_default();
    let name = p.name_any();
    let identity = resolve_identity(&name, &namespace, p.spec.identity.as_ref()).ok().map(|i| (i.username, i.hostname));
    let repositories = p.spec.target.repositories().into_iter().map(|r| repo_key(r, &namespace)).collect();
    let created = p.metadata.creation_timestamp.as_ref().and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0));
    Facts { namespace, name, created, identity, repositories }
}

/// Whether `a` was created before `b` (ties broken by namespace/name, so exactly one of two
/// colliding policies is the later one).
fn earlier(a: &Facts, b: &Facts) -> bool {
    (a.created, &a.namespace, &a.name) < (b.created, &b.namespace, &b.name)
}

/// The Stalled message when `me` collides with an earlier policy among `all` (which may
/// include `me` itself and policies being deleted, which are skipped), else None.
pub fn collision(me: &SnapshotPolicy, all: &[std::sync::Arc<SnapshotPolicy>]) -> Option<String> {
    let mine = facts(me);
    let id = mine.identity.clone()?;
    all.iter()
        .filter(|o| o.metadata.deletion_timestamp.is_none())
        .map(|o| facts(o))
        .filter(|o| (o.namespace.as_str(), o.name.as_str()) != (mine.namespace.as_str(), mine.name.as_str()))
        .filter(|o| o.identity.as_ref() == Some(&id) && earlier(o, &mine))
        .filter_map(|o| {
            let shared = mine.repositories.iter().find(|r| o.repositories.contains(r))?;
            Some((o, shared.clone()))
        })
        .min_by(|(a, _), (b, _)| (a.created, &a.namespace, &a.name).cmp(&(b.created, &b.namespace, &b.name)))
        .map(|(o, (kind, ns, name))| {
            let repo = match (kind, ns) {
                (RepositoryKind::Repository, Some(ns)) => format!("Repository {ns}/{name}"),
                (RepositoryKind::Repository, None) => format!("Repository {name}"),
                (RepositoryKind::ClusterRepository, _) => format!("ClusterRepository {name}"),
            };
            format!(
                "the resolved identity {}@{} is already used by SnapshotPolicy {}/{} in {repo}; set spec.identity to a distinct username or hostname (or delete one of the two)",
                id.0, id.1, o.namespace, o.name
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn policy(
        ns: &str,
        name: &str,
        created: &str,
        identity: serde_json::Value,
        repo: serde_json::Value,
    ) -> Arc<SnapshotPolicy> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotPolicy",
                "metadata": {"name": name, "namespace": ns, "creationTimestamp": created},
                "spec": {"repository": repo, "identity": identity, "copyMethod": "Direct", "sources": [{"pvc": {"name": "a"}}]}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn the_later_of_two_equal_identities_in_one_repository_is_refused() {
        let id = json!({"username": "app", "hostname": "home"});
        let first = policy("t", "first", "2026-01-01T00:00:00Z", id.clone(), json!({"name": "r"}));
        let second = policy("t", "second", "2026-01-02T00:00:00Z", id.clone(), json!({"name": "r", "namespace": "t"}));
        let all = vec![first.clone(), second.clone()];
        assert_eq!(collision(&first, &all), None, "the earlier one is untouched");
        let m = collision(&second, &all).expect("the later one collides");
        assert!(m.contains("app@home") && m.contains("SnapshotPolicy t/first") && m.contains("Repository t/r"), "{m}");
        // Another repository, or another identity: no collision.
        let elsewhere = policy("t", "third", "2026-01-03T00:00:00Z", id.clone(), json!({"name": "other"}));
        assert_eq!(collision(&elsewhere, &[first.clone(), elsewhere.clone()]), None);
        let distinct = policy(
            "t",
            "fourth",
            "2026-01-04T00:00:00Z",
            json!({"username": "app2", "hostname": "home"}),
            json!({"name": "r"}),
        );
        assert_eq!(collision(&distinct, &[first.clone(), distinct.clone()]), None);
        // Defaults (policy name @ namespace) never collide with each other.
        let a = policy("t", "a", "2026-01-01T00:00:00Z", json!(null), json!({"name": "r"}));
        let b = policy("t", "b", "2026-01-02T00:00:00Z", json!(null), json!({"name": "r"}));
        assert_eq!(collision(&b, &[a, b.clone()]), None);
    }

    #[test]
    fn a_cluster_repository_is_shared_across_namespaces_and_ties_break_by_name() {
        let id = json!({"username": "app", "hostname": "home"});
        let cr = json!({"kind": "ClusterRepository", "name": "shared"});
        let x = policy("x", "p", "2026-01-01T00:00:00Z", id.clone(), cr.clone());
        let y = policy("y", "p", "2026-01-01T00:00:00Z", id.clone(), cr.clone());
        let all = vec![x.clone(), y.clone()];
        assert_eq!(collision(&x, &all), None);
        assert!(
            collision(&y, &all)
                .is_some_and(|m| m.contains("SnapshotPolicy x/p") && m.contains("ClusterRepository shared"))
        );
        // A namespaced Repository of the same name in two namespaces is two repositories.
        let u = policy("u", "p", "2026-01-01T00:00:00Z", id.clone(), json!({"name": "r"}));
        let v = policy("v", "p", "2026-01-02T00:00:00Z", id.clone(), json!({"name": "r"}));
        assert_eq!(collision(&v, &[u, v.clone()]), None);
    }
}
