//! End to end on the real local control plane, Garage behind the fault proxy, the mover run
//! by the node agent, and the controller as a child process under its own ServiceAccount and
//! the generated RBAC. One test, in sequence, because one operator reconciles the whole
//! cluster: defaults stored (T01), bootstrap to Ready with uniqueId pinned, outage opens the
//! breaker at the threshold (T03), recovery closes it without an ack (T06), a wrong password
//! is terminal Failed (not Degraded), and a ClusterRepository reaches Ready too.
#[path = "../../xtask/src/rbac.rs"]
#[allow(dead_code)]
mod rbac;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kopiur_api::{ClusterRepository, Repository};
use kopiur_testenv::TestEnv;
use kopiur_testenv::garage::Garage;
use kopiur_testenv::proxy::{FaultProxy, Mode};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const FM: &str = "e2e";

struct Operator {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Operator {
    fn log_tail(&self, n: usize) -> String {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    async fn metrics(&self) -> Result<String> {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        Ok(out)
    }

    async fn metric(&self, series: &str) -> Option<f64> {
        let text = self.metrics().await.ok()?;
        text.lines().find(|l| l.starts_with(series)).and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }
}

async fn apply_rbac(client: &Client, op_ns: &str) -> Result<()> {
    let pp = PatchParams::apply(FM).force();
    for doc in rbac::render().split("\n---\n") {
        let v: Value = serde_yaml::from_str(doc)?;
        let role: ClusterRole = serde_json::from_value(v)?;
        let name = role.metadata.name.clone().context("name")?;
        Api::<ClusterRole>::all(client.clone()).patch(&name, &pp, &Patch::Apply(&role)).await?;
    }
    let crb: ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": format!("kopiur-controller-{op_ns}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kopiur-controller"},
        "subjects": [{"kind": "ServiceAccount", "name": "kopiur-controller", "namespace": op_ns}]
    }))?;
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(&format!("kopiur-controller-{op_ns}"), &pp, &Patch::Apply(&crb))
        .await?;
    Ok(())
}

async fn start_operator(env: &TestEnv, op_ns: &str, dir: &std::path::Path) -> Result<Operator> {
    let kc = env.cp.service_account_kubeconfig(op_ns, "kopiur-controller", &dir.join("operator.kubeconfig")).await?;
    let port = kopiur_testenv::garage::free_port()?;
    let log = dir.join("operator.log");
    let f = std::fs::File::create(&log)?;
    let child = Command::new(kopiur_testenv::tools::workspace_bin("kopiur-controller")?)
        .env("KUBECONFIG", kc)
        .env("KOPIUR_NAMESPACE", op_ns)
        .env("KOPIUR_METRICS_ADDR", format!("127.0.0.1:{port}"))
        .env("KOPIUR_MOVER_IMAGE", "kopiur-mover:e2e")
        // Operator timing knobs: shorter strict retries keep this test to minutes.
        .env("KOPIUR_STRICT_RETRY_BASE_SECONDS", "10")
        .env("KOPIUR_STRICT_RETRY_CAP_SECONDS", "40")
        .env("KOPIUR_MOVER_KOPIA_BINARY", mover_kopia(dir)?)
        .env("RUST_LOG", "info,kube=warn")
        .stdout(Stdio::from(f.try_clone()?))
        .stderr(Stdio::from(f))
        .spawn()?;
    Ok(Operator { child, port, log })
}

/// Movers run as UID 65532, which cannot traverse root's home where the tool cache lives:
/// hand them a copy in a world-readable directory.
fn mover_kopia(dir: &std::path::Path) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    let bin = dir.join("kopia");
    std::fs::copy(kopiur_testenv::tools::kopia()?, &bin)?;
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755))?;
    Ok(bin)
}

fn secret(ns: &str, name: &str, password: &str, g: &Garage) -> Result<Secret> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "stringData": {
            "KOPIA_PASSWORD": password,
            "AWS_ACCESS_KEY_ID": g.access_key(),
            "AWS_SECRET_ACCESS_KEY": g.secret_key(),
        }
    }))?)
}

fn backend(proxy: &FaultProxy, g: &Garage, prefix: &str) -> Value {
    json!({"s3": {"bucket": g.bucket(), "endpoint": format!("http://{}", proxy.endpoint()), "region": g.region(), "prefix": prefix}})
}

async fn pods_summary(client: &Client) -> String {
    use k8s_openapi::api::core::v1::Pod;
    let Ok(pods) = Api::<Pod>::all(client.clone()).list(&Default::default()).await else { return String::new() };
    pods.items
        .iter()
        .map(|p| {
            let st = p.status.clone().unwrap_or_default();
            format!(
                "{}/{} phase={:?} containers={:?}",
                p.metadata.namespace.as_deref().unwrap_or(""),
                p.metadata.name.as_deref().unwrap_or(""),
                st.phase,
                st.container_statuses.map(|c| c.iter().map(|c| format!("{:?}", c.state)).collect::<Vec<_>>())
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, op: &Operator, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await? {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}\noperator log tail:\n{}", op.log_tail(40));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn phase(r: &Repository) -> String {
    r.status.as_ref().and_then(|s| s.phase.as_ref()).map(|p| p.as_str().to_string()).unwrap_or_default()
}

fn condition<'a>(r: &'a Repository, t: &str) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    r.status.as_ref()?.conditions.iter().find(|c| c.type_ == t)
}

async fn events(client: &Client, ns: &str, name: &str, reason: &str) -> Result<usize> {
    let evs = Api::<Event>::namespaced(client.clone(), ns).list(&Default::default()).await?;
    Ok(evs
        .items
        .iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repository_breaker_end_to_end() -> Result<()> {
    // A private control plane with the shipped CRDs (deploy/crds, drift-checked).
    let dir = tempfile::tempdir()?;
    let env = &TestEnv::start(kopiur_testenv::Options::default()).await?;
    let _guard = env.log_guard();
    let client = env.client().await?;
    let g = Garage::start(&dir.path().join("garage")).await?;
    let proxy = FaultProxy::start(g.s3_addr()).await?;

    let op_ns = env.namespace("kopiur-system").await?;
    apply_rbac(&client, &op_ns).await?;
    let op = start_operator(env, &op_ns, dir.path()).await?;

    let ns = env.namespace("t").await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets.create(&PostParams::default(), &secret(&ns, "kopia", "correct horse", &g)?).await?;
    secrets.create(&PostParams::default(), &secret(&ns, "kopia-wrong", "battery staple", &g)?).await?;

    // T01: created without `health`; the stored object carries the probe defaults.
    let repos: Api<Repository> = Api::namespaced(client.clone(), &ns);
    let r: Repository = serde_json::from_value(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
        "metadata": {"name": "r", "namespace": ns},
        "spec": {"backend": backend(&proxy, &g, "r/"), "encryption": {"passwordSecretRef": {"name": "kopia"}}}
    }))?;
    let stored = repos.create(&PostParams::default(), &r).await?;
    let probe = &stored.spec.common.health.probe;
    assert!(probe.enabled);
    assert_eq!(probe.interval.as_secs(), 1800);
    assert_eq!(probe.failure_threshold, 3);
    assert_eq!(probe.on_failure, kopiur_api::repository::OnFailure::Degrade);
    let raw: Value = client
        .request(http_get(&format!("/apis/kopiur.home-operations.com/v1alpha1/namespaces/{ns}/repositories/r")))
        .await?;
    let stored_probe = &raw["spec"]["health"]["probe"];
    assert_eq!(stored_probe["enabled"], json!(true), "materialized: {stored_probe}");
    assert_eq!(stored_probe["failureThreshold"], json!(3));
    assert_eq!(stored_probe["onFailure"], json!("Degrade"));
    assert!(stored_probe["interval"].is_string(), "interval materialized: {stored_probe}");

    // Bootstrap to Ready, uniqueId pinned, probe clock seeded.
    let ready = match wait_for("r Ready", Duration::from_secs(240), &op, || async {
        let r = repos.get("r").await?;
        Ok((phase(&r) == "Ready").then_some(r))
    })
    .await
    {
        Ok(r) => r,
        Err(e) => panic!(
            "{e:#}\nstatus: {:?}\npods:\n{}\nlogs:\n{}",
            repos.get("r").await.ok().and_then(|r| r.status),
            pods_summary(&client).await,
            env.logs_summary(30)
        ),
    };
    let st = ready.status.clone().unwrap();
    let pin = st.unique_id.clone().context("uniqueId pinned")?;
    assert!(pin.len() >= 16 && pin.chars().all(|c| c.is_ascii_hexdigit()), "uniqueId {pin}");
    assert!(st.health.as_ref().and_then(|h| h.last_probe_at).is_some(), "probe clock seeded");
    assert_eq!(condition(&ready, "Ready").map(|c| c.status.as_str()), Some("True"));
    assert_eq!(events(&client, &ns, "r", "RepositoryBootstrapped").await?, 1);

    // Short probe interval for the outage.
    repos
        .patch(
            "r",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"health": {"probe": {"interval": "30s"}}}})),
        )
        .await?;
    wait_for("strict reconnect after the spec change", Duration::from_secs(120), &op, || async {
        let r = repos.get("r").await?;
        let st = r.status.clone().unwrap_or_default();
        Ok((st.observed_generation == r.metadata.generation && phase(&r) == "Ready").then_some(()))
    })
    .await?;

    // T03: down -> Degraded at the threshold, one trip, one Event.
    let trips_series = format!(
        "kopiur_repository_breaker_trips_total{{kind=\"Repository\",namespace=\"{ns}\",name=\"r\",probe_kind=\"probe\"}}"
    );
    proxy.set(Mode::Refuse);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
    let degraded = wait_for("r Degraded", Duration::from_secs(480), &op, || {
        let repos = repos.clone();
        let seen = seen.clone();
        async move {
            let r = repos.get("r").await?;
            seen.lock().unwrap().insert(phase(&r));
            Ok((phase(&r) == "Degraded").then_some(r))
        }
    })
    .await?;
    let seen_phases = seen.lock().unwrap().clone();
    assert!(seen_phases.iter().all(|p| p == "Ready" || p == "Degraded"), "phases during the outage: {seen_phases:?}");
    let h = degraded.status.as_ref().unwrap().health.clone().unwrap();
    assert_eq!(h.consecutive_probe_failures, 3, "opened at exactly the threshold");
    assert!(h.breaker_opened_at.is_some() && h.strict_retry.is_some());
    let br = condition(&degraded, "BackendReachable").unwrap();
    assert_eq!((br.status.as_str(), br.reason.as_str()), ("False", "BackendUnreachable"));
    assert_eq!(
        condition(&degraded, "Ready").map(|c| (c.status.as_str(), c.reason.as_str())),
        Some(("False", "BreakerOpen"))
    );
    assert_eq!(condition(&degraded, "Reconciling").map(|c| c.status.as_str()), Some("True"));
    assert_ne!(condition(&degraded, "Stalled").map(|c| c.status.as_str()), Some("True"));
    assert_eq!(events(&client, &ns, "r", "RepositoryBreakerOpened").await?, 1);
    assert_eq!(op.metric(&trips_series).await, Some(1.0));
    let open_since = format!(
        "kopiur_repository_breaker_open_since_timestamp_seconds{{kind=\"Repository\",namespace=\"{ns}\",name=\"r\"}}"
    );
    assert!(op.metric(&open_since).await.is_some(), "open_since series exists while open");

    // Stays Degraded through strict retries: no flapping, no second trip.
    let hold_until = Instant::now() + Duration::from_secs(90);
    while Instant::now() < hold_until {
        let r = repos.get("r").await?;
        assert_eq!(phase(&r), "Degraded");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let r = repos.get("r").await?;
    let attempts = r.status.unwrap().health.unwrap().strict_retry.unwrap().attempt;
    assert!(attempts >= 2, "strict retries ran while open: attempt {attempts}");
    assert_eq!(events(&client, &ns, "r", "RepositoryBreakerOpened").await?, 1);
    assert_eq!(op.metric(&trips_series).await, Some(1.0));

    // T06: restore; the next connect heals without any ack.
    proxy.set(Mode::Pass);
    let healed = wait_for("r Ready again", Duration::from_secs(180), &op, || async {
        let r = repos.get("r").await?;
        Ok((phase(&r) == "Ready").then_some(r))
    })
    .await?;
    let h = healed.status.as_ref().unwrap().health.clone().unwrap();
    assert_eq!(h.consecutive_probe_failures, 0);
    assert!(h.breaker_opened_at.is_none() && h.strict_retry.is_none());
    assert_eq!(healed.status.as_ref().unwrap().unique_id.as_deref(), Some(pin.as_str()), "same repository");
    assert_eq!(condition(&healed, "BackendReachable").map(|c| c.status.as_str()), Some("True"));
    assert_eq!(events(&client, &ns, "r", "RepositoryBreakerClosed").await?, 1);
    assert!(healed.metadata.annotations.unwrap_or_default().keys().all(|k| !k.contains("allow-reinitialize")));
    let streak =
        format!("kopiur_repository_consecutive_backend_failures{{kind=\"Repository\",namespace=\"{ns}\",name=\"r\"}}");
    assert_eq!(op.metric(&streak).await, Some(0.0));
    assert!(op.metric(&open_since).await.is_none(), "open_since gone after close");

    // Wrong password against the existing repository: terminal Failed (Stalled), never Degraded.
    let bad: Repository = serde_json::from_value(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
        "metadata": {"name": "wrong", "namespace": ns},
        "spec": {"backend": backend(&proxy, &g, "r/"), "encryption": {"passwordSecretRef": {"name": "kopia-wrong"}}}
    }))?;
    repos.create(&PostParams::default(), &bad).await?;
    let failed = wait_for("wrong Failed", Duration::from_secs(240), &op, || async {
        let r = repos.get("wrong").await?;
        assert_ne!(phase(&r), "Degraded", "an auth failure is not an outage");
        Ok((phase(&r) == "Failed").then_some(r))
    })
    .await?;
    assert_eq!(condition(&failed, "Ready").map(|c| c.reason.as_str()), Some("AuthFailure"));
    assert_eq!(condition(&failed, "Stalled").map(|c| c.status.as_str()), Some("True"));
    let jobs_series = format!("kopiur_mover_jobs_created_total{{op=\"bootstrap\",namespace=\"{ns}\"}}");
    let jobs_before = op.metric(&jobs_series).await.unwrap_or(0.0);
    tokio::time::sleep(Duration::from_secs(45)).await;
    assert_eq!(phase(&repos.get("wrong").await?), "Failed", "sticky");
    let jobs_after = op.metric(&jobs_series).await.unwrap_or(0.0);
    // Only r's periodic probes may have run meanwhile (30 s interval), never a retry loop.
    assert!(jobs_after - jobs_before <= 2.0, "no retry loop for a wrong password: {jobs_before} -> {jobs_after}");

    // A ClusterRepository on its own prefix reaches Ready in the operator namespace.
    Api::<Secret>::namespaced(client.clone(), &op_ns)
        .create(&PostParams::default(), &secret(&op_ns, "kopia", "cluster pw", &g)?)
        .await?;
    let crepos: Api<ClusterRepository> = Api::all(client.clone());
    let cname = format!("shared-{}", &ns[ns.len() - 8..]);
    let cr: ClusterRepository = serde_json::from_value(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "ClusterRepository",
        "metadata": {"name": cname},
        "spec": {"backend": backend(&proxy, &g, &format!("{cname}/")), "encryption": {"passwordSecretRef": {"name": "kopia"}},
                 "allowedNamespaces": {"list": [ns.clone()]}}
    }))?;
    crepos.create(&PostParams::default(), &cr).await?;
    let crr = wait_for("ClusterRepository Ready", Duration::from_secs(240), &op, || async {
        let c = crepos.get(&cname).await?;
        let ready = c.status.as_ref().and_then(|s| s.common.phase.as_ref()).map(|p| p.as_str() == "Ready");
        Ok((ready == Some(true)).then_some(c))
    })
    .await?;
    let cst = crr.status.unwrap();
    assert!(cst.common.unique_id.is_some());
    assert_eq!(cst.allowed_namespaces_summary.as_deref(), Some("list(1)"));
    let _ = crepos.delete(&cname, &Default::default()).await;
    Ok(())
}

fn http_get(path: &str) -> http::Request<Vec<u8>> {
    http::Request::get(path).body(Vec::new()).unwrap()
}
