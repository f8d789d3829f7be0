//! Least-privilege RBAC for the controller and for the mover Jobs it launches, rendered as
//! YAML (ClusterRoles only; the chart binds them). Self-contained on purpose: end-to-end tests
//! include this file to apply exactly what ships.

/// One RBAC rule: API group, resources, verbs, optional resource names.
struct Rule {
    group: &'static str,
    resources: &'static [&'static str],
    verbs: &'static [&'static str],
    names: &'static [&'static str],
}

const KINDS: &[&str] = &[
    "repositories",
    "clusterrepositories",
    "snapshotpolicies",
    "snapshots",
    "snapshotschedules",
    "restores",
    "maintenances",
    "repositoryreplications",
    "snapshotreplications",
];

const KIND_STATUS: &[&str] = &[
    "repositories/status",
    "clusterrepositories/status",
    "snapshotpolicies/status",
    "snapshots/status",
    "snapshotschedules/status",
    "restores/status",
    "maintenances/status",
    "repositoryreplications/status",
    "snapshotreplications/status",
];

/// The controller: reads every kopiur kind, writes only their status; owns Jobs and result
/// ConfigMaps; reads (never watches) mover pods; watches Secrets metadata-only (values never reach it); creates the mover's
/// ServiceAccount and RoleBinding and each run's Role, and may bind only the mover ClusterRole
/// (and the run Roles, whose permissions it holds).
const CONTROLLER: &[Rule] = &[
    Rule { group: "kopiur.home-operations.com", resources: KINDS, verbs: &["get", "list", "watch"], names: &[] },
    Rule {
        group: "kopiur.home-operations.com",
        resources: KIND_STATUS,
        verbs: &["get", "patch", "update"],
        names: &[],
    },
    // Scheduled children, retention prunes (stamped `pruned-by` before their delete) and the
    // `snapshot-cleanup` finalizer.
    Rule {
        group: "kopiur.home-operations.com",
        resources: &["snapshots"],
        verbs: &["create", "patch", "update", "delete"],
        names: &[],
    },
    // The projected Maintenance named after each repository.
    Rule {
        group: "kopiur.home-operations.com",
        resources: &["maintenances"],
        verbs: &["create", "patch", "delete"],
        names: &[],
    },
    // Finalizers and the annotations the controller itself writes (e.g. the reverify nudge).
    Rule {
        group: "kopiur.home-operations.com",
        resources: &["repositories", "clusterrepositories", "snapshotpolicies", "snapshotschedules", "restores"],
        verbs: &["patch", "update"],
        names: &[],
    },
    // Owner references with blockOwnerDeletion on clusters that enforce owner permissions.
    Rule {
        group: "kopiur.home-operations.com",
        resources: &[
            "repositories/finalizers",
            "clusterrepositories/finalizers",
            "snapshotschedules/finalizers",
            "snapshots/finalizers",
            "restores/finalizers",
        ],
        verbs: &["update"],
        names: &[],
    },
    // Source PVCs are read; a Restore may create its target PVC; `copyMethod: Snapshot | Clone`
    // creates and deletes its staged PVC (named `kopiur-stage-<Snapshot uid>`).
    Rule {
        group: "",
        resources: &["persistentvolumeclaims"],
        verbs: &["get", "list", "watch", "create", "delete"],
        names: &[],
    },
    // CSI staging: the VolumeSnapshot of a source, and whether a class's provisioner is a CSI
    // driver (a Clone or VolumeSnapshot of anything else is refused, never faked).
    Rule {
        group: "snapshot.storage.k8s.io",
        resources: &["volumesnapshots"],
        verbs: &["get", "create", "delete", "patch"],
        names: &[],
    },
    // A finished run follows its staged VolumeSnapshot's content until it is gone, and nudges
    // it (one kopiur annotation) when the snapshotter left a deletion for its resync.
    Rule {
        group: "snapshot.storage.k8s.io",
        resources: &["volumesnapshotcontents"],
        verbs: &["get", "list", "patch"],
        names: &[],
    },
    // A populate (`target.populator`) points its prime's volume at the user's PVC.
    Rule { group: "", resources: &["persistentvolumes"], verbs: &["get", "patch"], names: &[] },
    // The optional VolumePopulator registration: whether its CRD is installed, and kopiur's entry.
    Rule {
        group: "apiextensions.k8s.io",
        resources: &["customresourcedefinitions"],
        verbs: &["get"],
        names: &["volumepopulators.populator.storage.k8s.io"],
    },
    Rule {
        group: "populator.storage.k8s.io",
        resources: &["volumepopulators"],
        verbs: &["get", "create", "patch"],
        names: &[],
    },
    // Which VolumeSnapshotClass a run uses (the requested one, or its driver's default).
    Rule { group: "snapshot.storage.k8s.io", resources: &["volumesnapshotclasses"], verbs: &["list"], names: &[] },
    Rule { group: "storage.k8s.io", resources: &["storageclasses", "csidrivers"], verbs: &["get"], names: &[] },
    // patch: the `delete-outcomes` annotation on a failed batch Job.
    Rule {
        group: "batch",
        resources: &["jobs"],
        verbs: &["get", "list", "watch", "create", "delete", "patch"],
        names: &[],
    },
    Rule { group: "", resources: &["configmaps"], verbs: &["get", "create", "patch", "delete"], names: &[] },
    // The wedged mover pod check (docs/design/architecture.md §1.4): one bounded LIST by `job-name`, no watch, no
    // logs, no exec.
    Rule { group: "", resources: &["pods"], verbs: &["get", "list"], names: &[] },
    // Why a wedged mover cannot start: the Warning Events of its pod (ContainerCreating) or of its
    // Job (FailedCreate), read only for a Job past its pod startup deadline.
    Rule { group: "", resources: &["events"], verbs: &["list"], names: &[] },
    Rule { group: "", resources: &["secrets"], verbs: &["list", "watch"], names: &[] },
    Rule { group: "", resources: &["namespaces"], verbs: &["get", "list", "watch"], names: &[] },
    // The mover's ServiceAccount, applied by name (server-side apply is a patch); `create`
    // cannot be limited by name. The chart's controller-writes admission policy keeps every
    // write of the controller to objects labelled managed-by=kopiur.
    Rule { group: "", resources: &["serviceaccounts"], verbs: &["get", "patch"], names: &["kopiur-mover"] },
    Rule { group: "", resources: &["serviceaccounts"], verbs: &["create"], names: &[] },
    // The mover's standing RoleBinding, and each run's Role and RoleBinding (one object's
    // status or result ConfigMap, owned by the run's Job, deleted when it finishes; permissions
    // the controller holds).
    Rule {
        group: "rbac.authorization.k8s.io",
        resources: &["roles", "rolebindings"],
        verbs: &["get", "create", "patch", "delete"],
        names: &[],
    },
    Rule {
        group: "rbac.authorization.k8s.io",
        resources: &["clusterroles"],
        verbs: &["bind"],
        names: &["kopiur-mover"],
    },
    Rule { group: "coordination.k8s.io", resources: &["leases"], verbs: &["get", "create", "update"], names: &[] },
    Rule { group: "events.k8s.io", resources: &["events"], verbs: &["create", "patch"], names: &[] },
];

/// The kinds whose status a mover reads (its target's uid check before it runs).
const MOVER_READS: &[&str] = &[
    "snapshots/status",
    "restores/status",
    "maintenances/status",
    "repositoryreplications/status",
    "snapshotreplications/status",
    "repositories/status",
    "clusterrepositories/status",
];

/// The mover's standing role: reads only. Any Pod of a namespace can use the mover's
/// ServiceAccount (issue 31, audit findings 1.1 and 1.2), so the one write a run needs (its
/// target's status, or its result ConfigMap) comes from a per-run Role the controller creates
/// with the Job, names by `resourceNames`, and the Job owns (`mover_rbac::run_role`). No
/// Secrets, no ConfigMaps, no create, no delete, no patch.
const MOVER: &[Rule] =
    &[Rule { group: "kopiur.home-operations.com", resources: MOVER_READS, verbs: &["get"], names: &[] }];

fn list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("\"{i}\"")).collect();
    format!("[{}]", quoted.join(", "))
}

/// The cluster-scoped resources among the controller's: in the namespaced install mode
/// (chart value `watchNamespaces`) these alone stay in a ClusterRole
/// (`kopiur-controller-cluster`), and the chart gives the rest as a Role in each served
/// namespace, so no ClusterRole reads Secrets (audit finding 1.3).
const CLUSTER_SCOPED: &[&str] = &[
    "clusterrepositories",
    "clusterrepositories/status",
    "clusterrepositories/finalizers",
    "persistentvolumes",
    "customresourcedefinitions",
    "volumepopulators",
    "volumesnapshotclasses",
    "volumesnapshotcontents",
    "storageclasses",
    "csidrivers",
    "namespaces",
    "clusterroles",
];

fn cluster_role<'a>(name: &str, rules: impl IntoIterator<Item = (&'a Rule, Vec<&'a str>)>) -> String {
    let mut out = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: {name}\n  labels:\n    \
         app.kubernetes.io/managed-by: kopiur\n    app.kubernetes.io/name: kopiur\nrules:\n"
    );
    for (r, resources) in rules {
        out.push_str(&format!("  - apiGroups: {}\n", list(&[r.group])));
        out.push_str(&format!("    resources: {}\n", list(&resources)));
        if !r.names.is_empty() {
            out.push_str(&format!("    resourceNames: {}\n", list(r.names)));
        }
        out.push_str(&format!("    verbs: {}\n", list(r.verbs)));
    }
    out
}

fn whole(rules: &[Rule]) -> impl Iterator<Item = (&Rule, Vec<&str>)> {
    rules.iter().map(|r| (r, r.resources.to_vec()))
}

/// Each rule cut to its cluster-scoped resources; rules with none are dropped.
fn cluster_scoped(rules: &[Rule]) -> impl Iterator<Item = (&Rule, Vec<&str>)> {
    rules
        .iter()
        .map(|r| (r, r.resources.iter().copied().filter(|x| CLUSTER_SCOPED.contains(x)).collect::<Vec<_>>()))
        .filter(|(_, res)| !res.is_empty())
}

/// `deploy/rbac/kopiur-rbac.yaml`: the controller's and the mover's ClusterRoles, and the
/// controller's cluster-scoped part for the namespaced install mode.
pub fn render() -> String {
    format!(
        "# Generated by `cargo xtask gen`; do not edit.\n{}---\n{}---\n{}",
        cluster_role("kopiur-controller", whole(CONTROLLER)),
        cluster_role("kopiur-mover", whole(MOVER)),
        cluster_role("kopiur-controller-cluster", cluster_scoped(CONTROLLER))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standing_mover_role_only_reads() {
        let y = render();
        let mover = y.split("---").nth(1).unwrap();
        for verb in ["patch", "update", "create", "delete", "list", "watch"] {
            assert!(!mover.contains(&format!("\"{verb}\"")), "the mover may {verb}:\n{mover}");
        }
        assert!(!mover.contains("configmaps"), "{mover}");
        assert!(mover.contains("\"snapshots/status\""), "{mover}");
    }

    #[test]
    fn mover_has_no_secret_access_and_no_create() {
        let y = render();
        let mover = y.split("---").nth(1).unwrap();
        assert!(!mover.contains("secrets"));
        assert!(!mover.contains("\"create\""));
        assert!(!mover.contains("\"delete\""));
    }

    #[test]
    fn controller_pod_access_is_get_list_only() {
        let y = render();
        let ctl = y.split("---").next().unwrap();
        let pods: Vec<&str> = ctl.split("  - apiGroups").filter(|r| r.contains("\"pods")).collect();
        assert_eq!(pods.len(), 1, "one pods rule and no pod subresources: {pods:?}");
        assert!(pods[0].starts_with(": [\"\"]"), "the core group: {}", pods[0]);
        assert!(pods[0].contains("resources: [\"pods\"]"), "{}", pods[0]);
        assert!(pods[0].contains("verbs: [\"get\", \"list\"]"), "no watch, no writes: {}", pods[0]);
        assert!(!ctl.contains("pods/log") && !ctl.contains("pods/exec"), "no logs, no exec");
        let mover = y.split("---").nth(1).unwrap();
        assert!(!mover.contains("pods"), "the mover never reads pods");
    }

    #[test]
    fn controller_secret_access_is_metadata_watch_only() {
        let y = render();
        let ctl = y.split("---").next().unwrap();
        let secrets = ctl.split("  - apiGroups").find(|r| r.contains("\"secrets\"")).unwrap();
        assert!(secrets.contains("verbs: [\"list\", \"watch\"]"), "{secrets}");
    }
}
