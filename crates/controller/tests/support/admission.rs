//! The chart's ValidatingAdmissionPolicy that keeps `pruned-by` writable only by the
//! controller, rendered from `deploy/helm/kopiur` with `helm template` and applied to a test
//! control plane, so a test runs the exact policy a user installs.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kopiur_api::Snapshot;
use kopiur_api::names::annotation;
use kopiur_testenv::controlplane::repo_root;
use kopiur_testenv::{apply, tools};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;

/// The ServiceAccount every test operator runs as (`kopiur_testenv::operator::Operator`).
pub const CONTROLLER_SA: &str = "kopiur-controller";

/// The policy and its binding, as the chart renders them for an operator in `op_ns`.
pub fn render(op_ns: &str) -> Result<String> {
    render_template(op_ns, "templates/admission-policy.yaml")
}

/// One chart template, rendered for an operator in `op_ns`.
fn render_template(op_ns: &str, template: &str) -> Result<String> {
    let out = Command::new(tools::helm()?)
        .args(["template", "kopiur"])
        .arg(repo_root().join("deploy/helm/kopiur"))
        .args(["--namespace", op_ns, "--show-only", template])
        .args(["--set", &format!("serviceAccount.name={CONTROLLER_SA}")])
        .env("HELM_CACHE_HOME", std::env::temp_dir().join("kopiur-helm-cache"))
        .env("HELM_CONFIG_HOME", std::env::temp_dir().join("kopiur-helm-config"))
        .output()
        .context("running helm template")?;
    if !out.status.success() {
        bail!("helm template failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// Applies the policy for an operator in `op_ns` and waits until the apiserver enforces it
/// (a policy is compiled asynchronously): a dry-run CREATE by `admin` of a Snapshot in
/// `probe_ns` carrying `pruned-by` is refused. Returns the refusal message.
pub async fn install_pruned_by_policy(admin: &Client, op_ns: &str, probe_ns: &str) -> Result<String> {
    let yaml = render(op_ns)?;
    let n = apply::apply_yaml(admin, op_ns, &yaml).await.context("applying the admission policy")?;
    anyhow::ensure!(n == 2, "expected the policy and its binding, applied {n} objects");
    let snaps: Api<Snapshot> = Api::namespaced(admin.clone(), probe_ns);
    let probe: Snapshot = serde_json::from_value(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
        "metadata": {"name": "admission-probe", "annotations": {annotation::PRUNED_BY: "retention"}},
        "spec": {"policyRef": {"name": "probe"}}
    }))?;
    let dry = PostParams { dry_run: true, ..Default::default() };
    let started = Instant::now();
    loop {
        match snaps.create(&dry, &probe).await {
            Err(kube::Error::Api(s)) if s.code == 422 || s.code == 403 => return Ok(s.message),
            Err(e) => bail!("dry-run create of the admission probe failed unexpectedly: {e}"),
            Ok(_) if started.elapsed() > Duration::from_secs(60) => {
                bail!("the pruned-by admission policy is not enforced 60 s after it was applied")
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// Applies the chart's controller-writes policy (audit 1.4) for an operator in `op_ns` and waits
/// until the apiserver enforces it: a dry-run CREATE of an unlabelled ConfigMap in `probe_ns` by
/// `controller` (a client with the controller's ServiceAccount token) is refused. Returns the
/// refusal message.
pub async fn install_controller_writes_policy(
    admin: &Client,
    controller: &Client,
    op_ns: &str,
    probe_ns: &str,
) -> Result<String> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let yaml = render_template(op_ns, "templates/controller-writes-policy.yaml")?;
    let n = apply::apply_yaml(admin, op_ns, &yaml).await.context("applying the controller-writes policy")?;
    anyhow::ensure!(n == 2, "expected the policy and its binding, applied {n} objects");
    let cms: Api<ConfigMap> = Api::namespaced(controller.clone(), probe_ns);
    let probe: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "admission-probe"}}))?;
    let dry = PostParams { dry_run: true, ..Default::default() };
    let started = Instant::now();
    loop {
        match cms.create(&dry, &probe).await {
            Err(kube::Error::Api(s)) if (s.code == 422 || s.code == 403) && s.message.contains("managed-by") => {
                return Ok(s.message);
            }
            Err(e) => bail!("dry-run create of the controller-writes probe failed unexpectedly: {e}"),
            Ok(_) if started.elapsed() > Duration::from_secs(60) => {
                bail!("the controller-writes admission policy is not enforced 60 s after it was applied")
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}
