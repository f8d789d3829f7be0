//! Issue 8: `helm install` of deploy/helm/kopiur on the local control plane brings the operator
//! up and reconciling. The chart's Deployment -> ReplicaSet -> Pod runs the workspace's
//! `kopiur-controller` through the node agent's image map, in-cluster (the agent mounts the
//! pod's ServiceAccount token and sets KUBERNETES_SERVICE_HOST/PORT), under the chart's own
//! RBAC; a Repository on Garage then becomes Ready through a mover Job.
//!
//! Needs the workspace binaries (`cargo build --workspace --bins`) and the cached tools
//! (`testenv/build-tools.sh`, helm included).
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kopiur_testenv::controlplane::repo_root;
use kopiur_testenv::garage::Garage;
use kopiur_testenv::process::free_port;
use kopiur_testenv::{Options, TestEnv, apply, tools};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

const RELEASE: &str = "kopiur";
const NS: &str = "kopiur-system";

/// The controller pod's log files under the node agent's state directory.
fn controller_logs(env: &TestEnv) -> String {
    let mut out = String::new();
    let pods = env.node_state_dir().join("pods");
    for e in std::fs::read_dir(&pods).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with(&format!("{NS}_")) {
            continue;
        }
        for log in std::fs::read_dir(e.path().join("controller")).into_iter().flatten().flatten() {
            out.push_str(&format!(
                "==== {} ====\n{}\n",
                log.path().display(),
                kopiur_testenv::process::log_tail(&log.path(), 60)
            ));
        }
    }
    out
}

async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, env: &TestEnv, f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    kopiur_testenv::wait::wait_explained(what, timeout, || controller_logs(env), f).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_brings_the_operator_up_and_reconciling() -> Result<()> {
    let t0 = Instant::now();
    tools::workspace_bin("kopiur-controller").context("the chart's controller image maps to this binary")?;
    tools::workspace_bin("kopiur-mover").context("the mover image maps to this binary")?;
    let helm = tools::helm()?;
    let dir = tempfile::tempdir()?;
    // The CRDs go in before the kcm (GC discovery); helm leaves the chart's identical copies
    // alone because they already exist.
    let env = &TestEnv::start(Options::default()).await?;
    let _guard = env.log_guard();
    let client = env.client().await?;
    let g = Garage::start(&dir.path().join("garage")).await?;
    println!("control plane and Garage up after {:.1} s", t0.elapsed().as_secs_f64());

    // Pods share the host network here: the metrics listener gets a free port instead of
    // the chart's 8081 (extraEnv comes after the chart's env, and later entries win).
    let port = free_port()?;
    let helm_home = dir.path().join("helm");
    let out = Command::new(&helm)
        .args(["install", RELEASE])
        .arg(repo_root().join("deploy/helm/kopiur"))
        .args(["--namespace", NS, "--create-namespace", "--kubeconfig"])
        .arg(env.kubeconfig())
        .args(["--set", "extraEnv[0].name=KOPIUR_METRICS_ADDR"])
        .args(["--set-string", &format!("extraEnv[0].value=127.0.0.1:{port}")])
        .args(["--set", "logLevel=info\\,kube=warn"])
        .env("HELM_CACHE_HOME", helm_home.join("cache"))
        .env("HELM_CONFIG_HOME", helm_home.join("config"))
        .env("HELM_DATA_HOME", helm_home.join("data"))
        .output()
        .context("running helm")?;
    println!("helm install: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        bail!("helm install failed ({})", out.status);
    }

    // Deployment -> ReplicaSet -> Pod, bound and started by the node agent.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let selector = format!("app.kubernetes.io/name=kopiur,app.kubernetes.io/instance={RELEASE}");
    let pod = wait_for("the controller pod Running", Duration::from_secs(90), env, || async {
        let list = pods.list(&ListParams::default().labels(&selector)).await?;
        for p in &list.items {
            let st = p.status.clone().unwrap_or_default();
            if let Some(w) = st
                .container_statuses
                .iter()
                .flatten()
                .filter_map(|c| c.state.as_ref().and_then(|s| s.waiting.as_ref()))
                .find(|w| w.reason.as_deref() == Some("ErrImagePull"))
            {
                bail!("controller image not mapped: {:?}", w.message);
            }
        }
        Ok(list.items.into_iter().find(|p| {
            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                && p.metadata.owner_references.iter().flatten().any(|o| o.kind == "ReplicaSet")
        }))
    })
    .await?;
    println!("controller pod {} Running after {:.1} s", pod.name_any(), t0.elapsed().as_secs_f64());

    // It serves metrics and wins the election (in-cluster credentials work under the chart's RBAC).
    let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build()?;
    let url = format!("http://127.0.0.1:{port}/metrics");
    wait_for("the controller to hold the Lease", Duration::from_secs(60), env, || async {
        let Ok(r) = http.get(&url).send().await else { return Ok(None) };
        Ok(r.text().await.unwrap_or_default().lines().any(|l| l == "kopiur_leader 1").then_some(()))
    })
    .await?;

    // A Repository on Garage becomes Ready: the operator reconciles and launches its mover.
    let ns = env.namespace("t").await?;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "kopia", "namespace": ns},
        "stringData": {"KOPIA_PASSWORD": "helm install", "AWS_ACCESS_KEY_ID": g.access_key(), "AWS_SECRET_ACCESS_KEY": g.secret_key()}
    }))?;
    Api::<Secret>::namespaced(client.clone(), &ns).create(&PostParams::default(), &secret).await?;
    apply::apply_value(
        &client,
        &ns,
        &json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
            "metadata": {"name": "r", "namespace": ns},
            "spec": {
                "backend": {"s3": {"bucket": g.bucket(), "endpoint": format!("http://{}", g.s3_addr()), "region": g.region(), "prefix": "helm/"}},
                "encryption": {"passwordSecretRef": {"name": "kopia"}}
            }
        }),
    )
    .await?;
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("kopiur.home-operations.com", "v1alpha1", "Repository"));
    let repos: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
    wait_for("Repository r Ready", Duration::from_secs(120), env, || async {
        let r = repos.get("r").await?;
        Ok((r.data["status"]["phase"] == "Ready").then_some(()))
    })
    .await?;
    println!("Repository Ready after {:.1} s", t0.elapsed().as_secs_f64());
    let text = http.get(&url).send().await?.text().await?;
    let phase = format!("kopiur_resource_phase{{kind=\"Repository\",namespace=\"{ns}\",name=\"r\",phase=\"Ready\"}} 1");
    assert!(text.contains(&phase), "the in-cluster controller exports the phase:\n{text}");
    assert!(
        text.contains("kopiur_mover_jobs_created_total{op=\"bootstrap\""),
        "it launched the bootstrap Job:\n{text}"
    );
    println!("done after {:.1} s", t0.elapsed().as_secs_f64());
    Ok(())
}
