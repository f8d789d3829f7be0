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
    let out = Command::new(tools::helm()?)
        .args(["template", "kopiur"])
        .arg(repo_root().join("deploy/helm/kopiur"))
        .args(["--namespace", op_ns, "--show-only", "templates/admission-policy.yaml"])
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
