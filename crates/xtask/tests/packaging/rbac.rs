//! The chart's RBAC: least privilege for the controller, exactly docs/design/architecture.md §1.1 for the
//! mover, and grant-for-grant equal to the generated deploy/rbac (`cargo xtask gen`).
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
fn mover_cluster_role_only_reads_status() {
    let docs = rendered();
    // The controller binds this name into each Job namespace, where any Pod can use it (issue
    // 31): it reads statuses and writes nothing. A run's one write comes from its own Role.
    let mover = grants(&role(&docs, "ClusterRole", "kopiur-mover")["rules"]);
    for (g, r, v, n) in &mover {
        let status = g == GROUP && r.ends_with("/status");
        assert!(status && v == "get" && n.is_empty(), "mover may not {v} {g}/{r}");
    }
    let reads = ["snapshots", "restores", "maintenances", "repositoryreplications", "snapshotreplications"];
    for p in reads.iter().chain(&["repositories", "clusterrepositories"]) {
        assert!(mover.contains(&grant(GROUP, &format!("{p}/status"), "get")), "mover lacks get on {p}/status");
    }
}

#[test]
fn controller_cluster_role_is_least_privilege() {
    let docs = rendered();
    let ctl = grants(&role(&docs, "ClusterRole", "kopiur-controller")["rules"]);
    assert!(ctl.iter().all(|(g, r, v, _)| g != "*" && r != "*" && v != "*"), "no wildcards");
    for p in plurals() {
        for v in ["get", "list", "watch"] {
            assert!(ctl.contains(&grant(GROUP, &p, v)), "controller lacks {v} on {p}");
        }
        assert!(ctl.contains(&grant(GROUP, &format!("{p}/status"), "patch")), "controller lacks patch on {p}/status");
    }
    assert!(ctl.contains(&grant("batch", "jobs", "create")), "controller creates mover Jobs");
    assert!(
        ctl.iter().all(|(g, _, _, _)| g != "coordination.k8s.io"),
        "Leases belong in the namespaced leader-election Role, not the ClusterRole"
    );
    // Secrets are watched metadata-only; never read by name, never written.
    let secret_verbs: BTreeSet<&str> =
        ctl.iter().filter(|(g, r, _, _)| g.is_empty() && r == "secrets").map(|(_, _, v, _)| v.as_str()).collect();
    assert!(secret_verbs.is_subset(&BTreeSet::from(["list", "watch"])), "secrets: {secret_verbs:?}");
    // Mover pods are read for the wedged-pod check: get and list only, no subresources.
    let pod_verbs: BTreeSet<&str> =
        ctl.iter().filter(|(g, r, _, _)| g.is_empty() && r == "pods").map(|(_, _, v, _)| v.as_str()).collect();
    assert_eq!(pod_verbs, BTreeSet::from(["get", "list"]), "pods: {pod_verbs:?}");
    assert!(ctl.iter().all(|(_, r, _, _)| !r.starts_with("pods/")), "no pods/log, pods/exec or other subresources");
    // A populate re-points a PersistentVolume at its claim: it never creates or deletes one. The
    // only CRD it reads is the optional VolumePopulator's.
    let pv_verbs: BTreeSet<&str> = ctl
        .iter()
        .filter(|(g, r, _, _)| g.is_empty() && r == "persistentvolumes")
        .map(|(_, _, v, _)| v.as_str())
        .collect();
    assert_eq!(pv_verbs, BTreeSet::from(["get", "patch"]), "persistentvolumes: {pv_verbs:?}");
    let crd: Vec<&Grant> = ctl.iter().filter(|(_, r, _, _)| r == "customresourcedefinitions").collect();
    assert!(
        !crd.is_empty()
            && crd.iter().all(|(_, _, v, n)| v == "get" && n == "volumepopulators.populator.storage.k8s.io"),
        "customresourcedefinitions: {crd:?}"
    );
    // It may bind only the mover ClusterRole, and escalate nothing.
    let binds: Vec<&Grant> =
        ctl.iter().filter(|(_, _, v, _)| v == "bind" || v == "escalate" || v == "impersonate").collect();
    assert_eq!(
        binds,
        vec![&("rbac.authorization.k8s.io".into(), "clusterroles".into(), "bind".into(), "kopiur-mover".into())]
    );
}

#[test]
fn leader_election_role_is_namespaced_to_leases() {
    let docs = rendered();
    let r = role(&docs, "Role", "kopiur-leader-election");
    assert_eq!(r["metadata"]["namespace"], "kopiur-system");
    let g = grants(&r["rules"]);
    assert!(g.iter().all(|(grp, res, _, _)| grp == "coordination.k8s.io" && res == "leases"), "{g:?}");
    for v in ["get", "create", "update"] {
        assert!(g.iter().any(|(_, _, verb, _)| verb == v), "the Lease needs {v}");
    }
}

/// The chart's ClusterRoles and Role together grant exactly what the generated deploy/rbac grants.
#[test]
fn chart_rbac_equals_generated_rbac() {
    let dir = repo_root().join("deploy/rbac");
    let generated: Vec<Value> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e} (run cargo xtask gen)", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| matches!(p.extension().and_then(|x| x.to_str()), Some("yaml" | "yml")))
        .flat_map(|p| yaml_docs(&std::fs::read_to_string(p).unwrap()))
        .collect();
    let chart = rendered();
    let union = |docs: &[Value]| -> BTreeSet<Grant> {
        docs.iter()
            .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
            .flat_map(|d| grants(&d["rules"]))
            .collect()
    };
    let (want, have) = (union(&generated), union(&chart));
    assert!(!want.is_empty(), "deploy/rbac grants nothing");
    assert_eq!(
        have.difference(&want).collect::<Vec<_>>(),
        Vec::<&Grant>::new(),
        "grants in the chart but not in deploy/rbac"
    );
    assert_eq!(
        want.difference(&have).collect::<Vec<_>>(),
        Vec::<&Grant>::new(),
        "grants in deploy/rbac but not in the chart"
    );
    let mover = |docs: &[Value]| grants(&role(docs, "ClusterRole", "kopiur-mover")["rules"]);
    assert_eq!(mover(&chart), mover(&generated), "the kopiur-mover ClusterRole");
}
