//! The chart's RBAC: least privilege for the controller, exactly behavior.md §1.1 for the
//! mover, and rule-for-rule equal to the generated deploy/rbac once `cargo xtask gen` writes it.
use std::collections::BTreeSet;

use serde_json::Value;

use super::{chart_dir, helm, repo_root, run, yaml_docs};

const GROUP: &str = "kopiur.home-operations.com";

/// One permission: (apiGroup, resource, verb, resourceName or "").
type Grant = (String, String, String, String);

fn grants(rules: &Value) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    let list = |v: &Value| -> Vec<String> {
        v.as_array().map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect()).unwrap_or_default()
    };
    for r in rules.as_array().into_iter().flatten() {
        let names = list(&r["resourceNames"]);
        let names = if names.is_empty() { vec![String::new()] } else { names };
        for g in list(&r["apiGroups"]) {
            for res in list(&r["resources"]) {
                for v in list(&r["verbs"]) {
                    for n in &names {
                        out.insert((g.clone(), res.clone(), v.clone(), n.clone()));
                    }
                }
            }
        }
    }
    out
}

fn grant(g: &str, r: &str, v: &str) -> Grant {
    (g.into(), r.into(), v.into(), String::new())
}

/// The plurals of the generated CRDs.
fn plurals() -> Vec<String> {
    let dir = repo_root().join("deploy/crds");
    let mut p: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .flat_map(|t| yaml_docs(&t))
        .map(|d| d["spec"]["names"]["plural"].as_str().unwrap().to_string())
        .collect();
    p.sort();
    p
}

fn rendered() -> Vec<Value> {
    let mut c = helm();
    c.args(["template", "kopiur"]).arg(chart_dir()).args(["--namespace", "kopiur-system"]);
    let out = run(c);
    assert!(out.ok, "{}", out.stderr);
    yaml_docs(&out.stdout)
}

fn role<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the chart"))
}

#[test]
fn mover_cluster_role_is_exactly_status_and_configmaps() {
    let docs = rendered();
    // The controller binds this name into each Job namespace.
    let mover = grants(&role(&docs, "ClusterRole", "kopiur-mover")["rules"]);
    let mut want = BTreeSet::new();
    for p in plurals() {
        for v in ["get", "patch"] {
            want.insert(grant(GROUP, &format!("{p}/status"), v));
        }
    }
    for v in ["get", "patch"] {
        want.insert(grant("", "configmaps", v));
    }
    assert_eq!(mover, want, "mover RBAC is exactly get/patch on kopiur status and ConfigMaps");
}

#[test]
fn controller_cluster_role_is_least_privilege() {
    let docs = rendered();
    let ctl = grants(&role(&docs, "ClusterRole", "kopiur-controller")["rules"]);
    assert!(ctl.iter().all(|(g, r, v, _)| g != "*" && r != "*" && v != "*"), "no wildcards");
    for p in plurals() {
        for v in ["get", "list", "watch", "patch"] {
            assert!(ctl.contains(&grant(GROUP, &p, v)), "controller lacks {v} on {p}");
        }
        assert!(ctl.contains(&grant(GROUP, &format!("{p}/status"), "patch")), "controller lacks patch on {p}/status");
    }
    for (g, r, v) in [("batch", "jobs", "create"), ("", "configmaps", "create"), ("coordination.k8s.io", "leases", "create")] {
        if g == "coordination.k8s.io" {
            assert!(!ctl.contains(&grant(g, r, v)), "Leases belong in the namespaced leader-election Role");
        } else {
            assert!(ctl.contains(&grant(g, r, v)), "controller lacks {v} on {r}");
        }
    }
    // Secrets are watched metadata-only; never read by name, never written.
    let secret_verbs: BTreeSet<&str> = ctl.iter().filter(|(g, r, _, _)| g.is_empty() && r == "secrets").map(|(_, _, v, _)| v.as_str()).collect();
    assert_eq!(secret_verbs, BTreeSet::from(["list", "watch"]));
    // It may bind only the mover ClusterRole.
    let binds: Vec<&Grant> = ctl.iter().filter(|(_, _, v, _)| v == "bind" || v == "escalate").collect();
    assert_eq!(binds, vec![&("rbac.authorization.k8s.io".into(), "clusterroles".into(), "bind".into(), "kopiur-mover".into())]);
}

/// Once `cargo xtask gen` writes deploy/rbac, the chart's ClusterRoles and Roles must grant
/// exactly what the generated ones grant.
#[test]
fn chart_rbac_equals_generated_rbac() {
    let dir = repo_root().join("deploy/rbac");
    if !dir.is_dir() {
        eprintln!("deploy/rbac does not exist yet (cargo xtask gen does not generate RBAC): nothing to compare");
        return;
    }
    let generated: Vec<Value> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| matches!(p.extension().and_then(|x| x.to_str()), Some("yaml" | "yml")))
        .flat_map(|p| yaml_docs(&std::fs::read_to_string(p).unwrap()))
        .collect();
    let chart = rendered();
    for kind in ["ClusterRole", "Role"] {
        let union = |docs: &[Value]| -> BTreeSet<Grant> {
            docs.iter().filter(|d| d["kind"] == kind).flat_map(|d| grants(&d["rules"])).collect()
        };
        let (want, have) = (union(&generated), union(&chart));
        assert_eq!(
            have.difference(&want).collect::<Vec<_>>(),
            Vec::<&Grant>::new(),
            "{kind} grants in deploy/helm/kopiur/templates but not in deploy/rbac"
        );
        assert_eq!(
            want.difference(&have).collect::<Vec<_>>(),
            Vec::<&Grant>::new(),
            "{kind} grants in deploy/rbac but not in deploy/helm/kopiur/templates"
        );
    }
}
