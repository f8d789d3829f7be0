//! deploy/helm/kopiur: lint, render with default values and with every monitoring toggle,
//! hardened pod, leader election and mover settings, the values schema, and that the
//! PrometheusRule and dashboard are exactly the files under deploy/.
use serde_json::{Value, json};

use super::{Output, chart_dir, helm, read, run, yaml_docs, yaml_file};

const ALL_MONITORING: &[&str] = &[
    "monitoring.serviceMonitor.enabled=true",
    "monitoring.prometheusRule.enabled=true",
    "monitoring.dashboard.enabled=true",
];

fn template(sets: &[&str]) -> Output {
    let mut c = helm();
    c.args(["template", "kopiur"]).arg(chart_dir()).args(["--namespace", "kopiur-system"]);
    for s in sets {
        c.args(["--set", s]);
    }
    run(c)
}

fn render(sets: &[&str]) -> Vec<Value> {
    let out = template(sets);
    assert!(out.ok, "helm template {sets:?} failed:\n{}", out.stderr);
    yaml_docs(&out.stdout)
}

fn find<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let v = find(docs, kind);
    assert_eq!(v.len(), 1, "expected exactly one {kind}, found {}", v.len());
    v[0]
}

/// The one object of `kind` whose name ends with `suffix`.
fn named<'a>(docs: &'a [Value], kind: &str, suffix: &str) -> &'a Value {
    let v: Vec<&Value> = find(docs, kind)
        .into_iter()
        .filter(|d| d["metadata"]["name"].as_str().is_some_and(|n| n.ends_with(suffix)))
        .collect();
    assert_eq!(v.len(), 1, "expected exactly one {kind} named *{suffix}, found {}", v.len());
    v[0]
}

fn env<'a>(container: &'a Value, name: &str) -> &'a Value {
    container["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("env {name} missing"))
}

fn controller(docs: &[Value]) -> Value {
    one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0].clone()
}

#[test]
fn helm_lint_passes_with_defaults_and_every_monitoring_toggle() {
    for sets in [&[][..], ALL_MONITORING] {
        let mut c = helm();
        c.arg("lint").arg(chart_dir()).arg("--strict");
        for s in sets {
            c.args(["--set", s]);
        }
        let out = run(c);
        assert!(out.ok, "helm lint --strict {sets:?} failed:\n{}{}", out.stdout, out.stderr);
        assert!(out.stdout.contains("0 chart(s) failed"), "{}", out.stdout);
    }
}

#[test]
fn default_render_is_the_operator_without_monitoring_objects() {
    let docs = render(&[]);
    for kind in ["ServiceAccount", "Deployment", "Service", "ClusterRoleBinding", "Role", "RoleBinding"] {
        assert!(!find(&docs, kind).is_empty(), "default render lacks a {kind}");
    }
    assert_eq!(find(&docs, "ClusterRole").len(), 2, "controller and mover ClusterRoles");
    assert!(find(&docs, "ServiceMonitor").is_empty());
    assert!(find(&docs, "PrometheusRule").is_empty());
    assert!(find(&docs, "ConfigMap").is_empty());
    assert_eq!(find(&docs, "ValidatingAdmissionPolicy").len(), 2, "both admission policies are on by default");
    const CLUSTER_SCOPED: &[&str] =
        &["ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"];
    for d in &docs {
        if !CLUSTER_SCOPED.iter().any(|k| d["kind"] == *k) {
            assert_eq!(d["metadata"]["namespace"], "kopiur-system", "{} {}", d["kind"], d["metadata"]["name"]);
        }
    }
}

#[test]
fn controller_pod_is_hardened() {
    let docs = render(&[]);
    let pod = &one(&docs, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
    let c = controller(&docs);
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert!(sc["capabilities"]["add"].is_null());
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    assert!(c["resources"]["requests"]["memory"].is_string() && c["resources"]["limits"]["memory"].is_string());
    assert_eq!(c["ports"], json!([{"name": "metrics", "containerPort": 8081, "protocol": "TCP"}]));
}

#[test]
fn controller_env_carries_namespace_lease_and_mover_settings() {
    let app_version = yaml_file("deploy/helm/kopiur/Chart.yaml")["appVersion"].as_str().unwrap().to_string();
    let c = controller(&render(&[]));
    assert_eq!(env(&c, "KOPIUR_NAMESPACE")["valueFrom"]["fieldRef"]["fieldPath"], "metadata.namespace");
    assert_eq!(env(&c, "POD_NAME")["valueFrom"]["fieldRef"]["fieldPath"], "metadata.name");
    assert_eq!(env(&c, "KOPIUR_LEASE_NAME")["value"], "kopiur-leader");
    assert_eq!(env(&c, "KOPIUR_MAX_CONCURRENT_DELETE_JOBS")["value"], "0");
    assert_eq!(env(&c, "KOPIUR_RECONCILE_CONCURRENCY")["value"], "8");
    assert_eq!(env(&c, "KOPIUR_STAGING_RELEASE_BOUND_SECONDS")["value"], "300", "the controller's default bound");
    assert_eq!(env(&c, "KOPIUR_MOVER_IMAGE")["value"], format!("kopiur-mover:{app_version}"));
    assert_eq!(env(&c, "KOPIUR_MOVER_IMAGE_PULL_POLICY")["value"], "IfNotPresent");
    assert!(
        c["env"].as_array().unwrap().iter().all(|e| e["name"] != "KOPIUR_MOVER_IMAGE_PULL_SECRETS"),
        "no mover pull secrets by default"
    );
    assert_eq!(c["image"], format!("kopiur-controller:{app_version}"));

    let c = controller(&render(&[
        "maxConcurrentDeleteJobs=4",
        "reconcileConcurrency=32",
        "stagingReleaseBoundSeconds=90",
        "mover.image.repository=registry.example/mover",
        "mover.image.tag=v9",
        "mover.image.pullPolicy=Always",
        "image.tag=v8",
        "leaderElection.leaseName=other-lease",
        "mover.imagePullSecrets={regcred,mirror-cred}",
    ]));
    assert_eq!(env(&c, "KOPIUR_MOVER_IMAGE_PULL_SECRETS")["value"], "regcred,mirror-cred");
    assert_eq!(env(&c, "KOPIUR_MAX_CONCURRENT_DELETE_JOBS")["value"], "4");
    assert_eq!(env(&c, "KOPIUR_RECONCILE_CONCURRENCY")["value"], "32");
    assert_eq!(env(&c, "KOPIUR_STAGING_RELEASE_BOUND_SECONDS")["value"], "90");
    assert_eq!(env(&c, "KOPIUR_MOVER_IMAGE")["value"], "registry.example/mover:v9");
    assert_eq!(env(&c, "KOPIUR_MOVER_IMAGE_PULL_POLICY")["value"], "Always");
    assert_eq!(env(&c, "KOPIUR_LEASE_NAME")["value"], "other-lease");
    assert_eq!(c["image"], "kopiur-controller:v8");
}

/// The defaults name this project's own images (`cargo xtask images`, deploy/images), and a
/// digest pins either image as `repository:tag@digest` (the release workflow sets both).
#[test]
fn images_default_to_kopiur_names_and_pin_by_digest() {
    let values = yaml_file("deploy/helm/kopiur/values.yaml");
    assert_eq!(values["image"]["repository"], "kopiur-controller");
    assert_eq!(values["mover"]["image"]["repository"], "kopiur-mover");
    assert_eq!(values["image"]["digest"], "");
    assert_eq!(values["mover"]["image"]["digest"], "");
    let d1 = format!("sha256:{}", "a".repeat(64));
    let d2 = format!("sha256:{}", "b".repeat(64));
    let c = controller(&render(&[
        "image.repository=registry.example/team/kopiur-controller",
        &format!("image.digest={d1}"),
        "mover.image.repository=registry.example/team/kopiur-mover",
        "mover.image.tag=0.9.0",
        &format!("mover.image.digest={d2}"),
    ]));
    let app_version = yaml_file("deploy/helm/kopiur/Chart.yaml")["appVersion"].as_str().unwrap().to_string();
    assert_eq!(c["image"], format!("registry.example/team/kopiur-controller:{app_version}@{d1}"));
    assert_eq!(env(&c, "KOPIUR_MOVER_IMAGE")["value"], format!("registry.example/team/kopiur-mover:0.9.0@{d2}"));
}

#[test]
fn controller_service_account_is_bound() {
    let docs = render(&[]);
    let sa = one(&docs, "ServiceAccount")["metadata"]["name"].clone();
    assert_eq!(one(&docs, "RoleBinding")["subjects"][0]["name"], sa);
    assert_eq!(one(&docs, "RoleBinding")["roleRef"]["name"], one(&docs, "Role")["metadata"]["name"]);
    assert_eq!(one(&docs, "ClusterRoleBinding")["subjects"][0]["name"], sa);
    assert_eq!(one(&docs, "ClusterRoleBinding")["roleRef"]["name"], "kopiur-controller");
    assert_eq!(one(&docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"], sa);
}

/// The `pruned-by` admission policy exempts exactly the controller's ServiceAccount (in the
/// release namespace, under its configured name), is bound with Deny, and goes away when
/// disabled. Its behaviour on a real apiserver is `admission_e2e`.
#[test]
fn pruned_by_admission_policy_exempts_only_the_controller() {
    let docs = render(&["serviceAccount.name=ops"]);
    let policy = named(&docs, "ValidatingAdmissionPolicy", "-pruned-by");
    let conditions = policy["spec"]["matchConditions"].as_array().expect("matchConditions");
    assert_eq!(conditions.len(), 1);
    assert_eq!(conditions[0]["expression"], "request.userInfo.username != 'system:serviceaccount:kopiur-system:ops'");
    assert_eq!(policy["spec"]["failurePolicy"], "Fail");
    assert_eq!(policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"], json!(["snapshots"]));
    assert_eq!(policy["spec"]["matchConstraints"]["resourceRules"][0]["operations"], json!(["CREATE", "UPDATE"]));
    let binding = named(&docs, "ValidatingAdmissionPolicyBinding", "-pruned-by");
    assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    let off = render(&["admissionPolicy.enabled=false"]);
    assert!(
        find(&off, "ValidatingAdmissionPolicy").is_empty() && find(&off, "ValidatingAdmissionPolicyBinding").is_empty()
    );
}

/// Issue 31: an install without Helm gets the same admission policies. Each plain
/// `deploy/admission/` file has the chart's policy and binding (rendered with the default
/// values in `kopiur-system`), field for field but the labels.
#[test]
fn plain_deploy_admission_policy_is_the_charts() {
    let chart = render(&[]);
    for (file, suffix) in
        [("kopiur-pruned-by.yaml", "-pruned-by"), ("kopiur-controller-writes.yaml", "-controller-writes")]
    {
        let plain = yaml_docs(&read(&format!("deploy/admission/{file}")));
        for kind in ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] {
            let (c, p) = (named(&chart, kind, suffix), one(&plain, kind));
            assert_eq!(p["spec"], c["spec"], "{kind}: deploy/admission/{file} differs from the chart");
            assert_eq!(p["metadata"]["name"], c["metadata"]["name"], "{kind} name");
        }
    }
}

/// Audit 1.4: the controller's token writes only kopiur's own ConfigMaps, ServiceAccounts,
/// Roles and RoleBindings: the policy matches exactly the controller's account, every write
/// verb, and asks the label of the object before and after.
#[test]
fn controller_writes_policy_binds_only_the_controller_to_its_own_objects() {
    let docs = render(&["serviceAccount.name=ops"]);
    let policy = named(&docs, "ValidatingAdmissionPolicy", "-controller-writes");
    assert_eq!(
        policy["spec"]["matchConditions"],
        json!([{"name": "the-kopiur-controller",
                "expression": "request.userInfo.username == 'system:serviceaccount:kopiur-system:ops'"}])
    );
    assert_eq!(policy["spec"]["failurePolicy"], "Fail");
    let rules = &policy["spec"]["matchConstraints"]["resourceRules"];
    assert_eq!(rules[0]["resources"], json!(["configmaps", "serviceaccounts"]));
    assert_eq!(rules[1]["resources"], json!(["roles", "rolebindings"]));
    for r in rules.as_array().expect("rules") {
        assert_eq!(r["operations"], json!(["CREATE", "UPDATE", "DELETE"]));
    }
    let vars = policy["spec"]["variables"].to_string();
    assert!(vars.contains("app.kubernetes.io/managed-by") && vars.contains("oldObject"), "{vars}");
    let binding = named(&docs, "ValidatingAdmissionPolicyBinding", "-controller-writes");
    assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
}

#[test]
fn metrics_service_selects_the_controller_on_8081() {
    let docs = render(&[]);
    let svc = one(&docs, "Service");
    assert_eq!(
        svc["spec"]["ports"],
        json!([{"name": "metrics", "port": 8081, "targetPort": "metrics", "protocol": "TCP"}])
    );
    let pod_labels = &one(&docs, "Deployment")["spec"]["template"]["metadata"]["labels"];
    for (k, v) in svc["spec"]["selector"].as_object().unwrap() {
        assert_eq!(&pod_labels[k], v, "service selector {k}");
    }
}

#[test]
fn every_monitoring_toggle_renders_its_object() {
    let docs = render(ALL_MONITORING);
    let sm = one(&docs, "ServiceMonitor");
    assert_eq!(sm["apiVersion"], "monitoring.coreos.com/v1");
    let ep = &sm["spec"]["endpoints"][0];
    assert_eq!(ep["port"], "metrics");
    assert_eq!(ep["path"], "/metrics");
    assert_eq!(ep["honorLabels"], true, "kopiur's own `namespace` label must survive the scrape");
    let svc_labels = &one(&docs, "Service")["metadata"]["labels"];
    for (k, v) in sm["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(&svc_labels[k], v, "ServiceMonitor selector {k}");
    }

    let rule = one(&docs, "PrometheusRule");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    let file = yaml_file("deploy/prometheus/kopiur-rules.yaml");
    assert_eq!(
        rule["spec"]["groups"], file["groups"],
        "the PrometheusRule must render exactly deploy/prometheus/kopiur-rules.yaml"
    );

    let cm = one(&docs, "ConfigMap");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let shipped: Value =
        serde_json::from_str(cm["data"]["kopiur.json"].as_str().expect("data kopiur.json")).expect("dashboard JSON");
    let source: Value = serde_json::from_str(&read("deploy/dashboards/kopiur.json")).unwrap();
    assert_eq!(shipped, source, "the dashboard ConfigMap must carry deploy/dashboards/kopiur.json");
}

#[test]
fn backup_stale_threshold_follows_values() {
    let docs =
        render(&["monitoring.prometheusRule.enabled=true", "monitoring.prometheusRule.backupStaleAfterSeconds=90000"]);
    let file = yaml_file("deploy/prometheus/kopiur-rules.yaml");
    let rendered = &one(&docs, "PrometheusRule")["spec"]["groups"];
    let mut changed = 0;
    for (g, fg) in rendered.as_array().unwrap().iter().zip(file["groups"].as_array().unwrap()) {
        for (r, fr) in g["rules"].as_array().unwrap().iter().zip(fg["rules"].as_array().unwrap()) {
            if r["alert"] == "KopiurBackupStale" {
                assert!(r["expr"].as_str().unwrap().ends_with("> 90000"), "{}", r["expr"]);
                changed += 1;
            } else {
                assert_eq!(r, fr);
            }
        }
    }
    assert_eq!(changed, 1);
}

#[test]
fn crds_are_installed_from_the_chart() {
    let mut c = helm();
    c.args(["template", "kopiur"]).arg(chart_dir()).arg("--include-crds");
    let out = run(c);
    assert!(out.ok, "{}", out.stderr);
    let crds: Vec<String> = yaml_docs(&out.stdout)
        .into_iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .map(|d| d["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    let generated = std::fs::read_dir(super::repo_root().join("deploy/crds")).unwrap().count();
    assert_eq!(crds.len(), generated, "{crds:?}");
    assert!(crds.iter().all(|n| n.ends_with(".kopiur.home-operations.com")));
}

fn rejected(sets: &[&str], mentions: &str) {
    let out = template(sets);
    assert!(!out.ok, "values {sets:?} must be rejected by values.schema.json");
    assert!(out.stderr.contains(mentions), "rejection of {sets:?} should mention {mentions}:\n{}", out.stderr);
}

#[test]
fn values_schema_rejects_bad_values() {
    rejected(&["maxConcurrentDeleteJobs=-1"], "maxConcurrentDeleteJobs");
    rejected(&["maxConcurrentDeleteJobs=many"], "maxConcurrentDeleteJobs");
    rejected(&["reconcileConcurrency=0"], "reconcileConcurrency");
    rejected(&["reconcileConcurrency=2000"], "reconcileConcurrency");
    rejected(&["stagingReleaseBoundSeconds=5"], "stagingReleaseBoundSeconds");
    rejected(&["unknownTopLevelKey=1"], "unknownTopLevelKey");
    rejected(&["mover.image.pullPolicy=Sometimes"], "pullPolicy");
    rejected(&["mover.imagePullSecrets={Bad_Name}"], "imagePullSecrets");
    rejected(&["image.digest=latest"], "digest");
    rejected(&["mover.image.digest=sha256:abc"], "digest");
    rejected(&["monitoring.prometheusRule.enabeld=true"], "enabeld");
    rejected(&["monitoring.serviceMonitor.interval=soon"], "interval");
    // And the defaults themselves satisfy it (render succeeds).
    assert!(template(&[]).ok);
}

#[test]
fn values_schema_is_strict_at_the_top_level() {
    let schema: Value = serde_json::from_str(&read("deploy/helm/kopiur/values.schema.json")).unwrap();
    assert_eq!(schema["additionalProperties"], false);
    let values = yaml_file("deploy/helm/kopiur/values.yaml");
    let props = schema["properties"].as_object().unwrap();
    for k in values.as_object().unwrap().keys() {
        assert!(props.contains_key(k), "values.yaml key {k} is missing from values.schema.json");
    }
}

/// Audit 1.3, the namespaced install mode: with `watchNamespaces`, no ClusterRole the chart
/// renders reads Secrets (or any namespaced kind), each served namespace and the release
/// namespace get the controller's namespaced rules as a Role bound to its ServiceAccount, the
/// two together grant every resource of the generated controller role (Leases aside, which the
/// leader-election Role holds), and the controller is told the list.
#[test]
fn the_namespaced_install_mode_reads_secrets_only_where_it_serves() {
    let docs = render(&["watchNamespaces={apps,team-b}", "serviceAccount.name=ops"]);
    for cr in find(&docs, "ClusterRole") {
        let text = cr["rules"].to_string();
        assert!(!text.contains("\"secrets\""), "{} reads Secrets: {text}", cr["metadata"]["name"]);
        assert!(!text.contains("\"snapshots\"") && !text.contains("\"jobs\""), "{}: {text}", cr["metadata"]["name"]);
    }
    let roles: Vec<&Value> =
        find(&docs, "Role").into_iter().filter(|r| r["metadata"]["name"] == "kopiur-controller").collect();
    let mut served: Vec<&str> = roles.iter().map(|r| r["metadata"]["namespace"].as_str().unwrap()).collect();
    served.sort();
    assert_eq!(served, ["apps", "kopiur-system", "team-b"]);
    for rb in find(&docs, "RoleBinding").into_iter().filter(|r| r["metadata"]["name"] == "kopiur-controller") {
        assert_eq!(
            rb["roleRef"],
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kopiur-controller"})
        );
        assert_eq!(rb["subjects"], json!([{"kind": "ServiceAccount", "name": "ops", "namespace": "kopiur-system"}]));
    }
    assert_eq!(find(&docs, "RoleBinding").iter().filter(|r| r["metadata"]["name"] == "kopiur-controller").count(), 3);
    assert!(roles[0]["rules"].to_string().contains("\"secrets\""), "a served namespace's Role reads Secrets");
    // Nothing lost: every resource the generated controller role names is granted by one side.
    let generated = yaml_docs(&read("deploy/rbac/kopiur-rbac.yaml"));
    let controller = generated.iter().find(|d| d["metadata"]["name"] == "kopiur-controller").unwrap();
    let cluster = named(&docs, "ClusterRole", "-controller-cluster");
    let granted = |v: &Value| -> std::collections::BTreeSet<String> {
        v["rules"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r["resources"].as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()))
            .collect()
    };
    let mut both = granted(cluster);
    both.extend(granted(roles[0]));
    let want: std::collections::BTreeSet<String> = granted(controller).into_iter().filter(|r| r != "leases").collect();
    assert_eq!(both, want);
    let crb = named(&docs, "ClusterRoleBinding", "-controller-cluster");
    assert_eq!(crb["roleRef"]["name"], cluster["metadata"]["name"]);
    let deployment = one(&docs, "Deployment");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(env(container, "KOPIUR_WATCH_NAMESPACES")["value"], "apps,team-b");
    // The default is cluster-wide: one controller ClusterRole, no namespaced Roles, no list.
    let default = render(&[]);
    assert!(find(&default, "Role").iter().all(|r| r["metadata"]["name"] != "kopiur-controller"));
    assert!(find(&default, "ClusterRole").iter().any(|r| r["metadata"]["name"] == "kopiur-controller"));
}
