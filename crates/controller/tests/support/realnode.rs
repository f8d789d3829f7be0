//! The node image archives `cargo xtask test` builds for the real-node tests.
use std::path::PathBuf;

use anyhow::{Context, Result, ensure};

/// The `*-testenv-linux-amd64.oci.tar` archives in `KOPIUR_IMAGES_DIR` (default
/// `target/images`), sorted; the controller's only when `with_controller` (a test that runs
/// the controller as a process leaves it out). The mover and pause archives must be there.
pub fn node_images(with_controller: bool) -> Result<Vec<PathBuf>> {
    let dir = std::env::var_os("KOPIUR_IMAGES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| kopiur_testenv::controlplane::repo_root().join("target/images"));
    let hint = "run `cargo xtask images --node-images --registry localhost --tag testenv`";
    let name = |p: &PathBuf| p.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("{}: {hint}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| name(p).ends_with("-testenv-linux-amd64.oci.tar"))
        .filter(|p| with_controller || !name(p).starts_with("kopiur-controller"))
        .collect();
    v.sort();
    let mut want = vec!["kopiur-mover", "kopiur-testenv-pause", "kopiur-testenv-busybox"];
    if with_controller {
        want.push("kopiur-controller");
    }
    for w in want {
        ensure!(
            v.iter().any(|p| name(p).starts_with(&format!("{w}-testenv"))),
            "{w} archive missing in {}: {hint}",
            dir.display()
        );
    }
    Ok(v)
}

/// The mover image the node loads from the archives (`KOPIUR_MOVER_IMAGE` of a controller run
/// as a process next to the real node).
pub const MOVER_IMAGE: &str = "localhost/kopiur-mover:testenv";

/// What a real-node test backs up into: Garage behind a fault proxy on the node's address,
/// the controller as a process (its movers from [`MOVER_IMAGE`]), and a namespace holding the
/// repository Secret and Repository `r`, Ready.
pub struct NodeStack {
    pub garage: kopiur_testenv::garage::Garage,
    pub proxy: kopiur_testenv::proxy::FaultProxy,
    pub op: kopiur_testenv::operator::Operator,
    pub ns: String,
    /// The controller's log (what waits print on a timeout).
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl NodeStack {
    /// Starts it in a new namespace `<ns_prefix>-…`; the repository's objects go under the
    /// bucket prefix `<ns_prefix>/`; the controller's namespace is `op_ns`.
    pub async fn start(cluster: &kopiur_testenv::realnode::RealCluster, op_ns: &str, ns_prefix: &str) -> Result<Self> {
        Self::start_with_env(cluster, op_ns, ns_prefix, &[]).await
    }

    /// [`NodeStack::start`] with more controller environment (`extra_env` after the mover image).
    pub async fn start_with_env(
        cluster: &kopiur_testenv::realnode::RealCluster,
        op_ns: &str,
        ns_prefix: &str,
        extra_env: &[(&str, &str)],
    ) -> Result<Self> {
        use k8s_openapi::api::core::v1::Secret;
        use kube::Api;
        use serde_json::json;
        let client = cluster.env().client().await?;
        let dir = tempfile::tempdir()?;
        let garage = kopiur_testenv::garage::Garage::start(&dir.path().join("garage")).await?;
        let proxy =
            kopiur_testenv::proxy::FaultProxy::start_on(kopiur_testenv::realnode::config::NODE_IP, garage.s3_addr())
                .await?;
        let mut env = vec![("KOPIUR_MOVER_IMAGE", MOVER_IMAGE)];
        env.extend_from_slice(extra_env);
        let op = kopiur_testenv::operator::Operator::start(cluster.env(), op_ns, &env).await?;
        let log = op.log_path().to_path_buf();
        let ns = cluster.env().namespace(ns_prefix).await?;
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "kopia", "namespace": ns},
            "stringData": {"KOPIA_PASSWORD": super::PASSWORD, "AWS_ACCESS_KEY_ID": garage.access_key(),
                           "AWS_SECRET_ACCESS_KEY": garage.secret_key()}
        }))?;
        Api::<Secret>::namespaced(client.clone(), &ns).create(&Default::default(), &secret).await?;
        let repo = json!({"apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
               "metadata": {"name": "r", "namespace": ns},
               "spec": {"backend": {"s3": {"bucket": garage.bucket(), "endpoint": format!("http://{}", proxy.endpoint()),
                                           "region": garage.region(), "prefix": format!("{ns_prefix}/")}},
                        "encryption": {"passwordSecretRef": {"name": "kopia"}}}});
        kopiur_testenv::apply::apply_value(&client, &ns, &repo).await?;
        let repos: Api<kopiur_api::Repository> = Api::namespaced(client.clone(), &ns);
        super::wait_for("Repository r Ready", std::time::Duration::from_secs(300), &log, || async {
            let r = repos.get("r").await?;
            Ok((r.status.as_ref().and_then(|s| s.phase.as_ref()).map(|p| p.as_str()) == Some("Ready")).then_some(()))
        })
        .await?;
        Ok(NodeStack { garage, proxy, op, ns, log, _dir: dir })
    }
}

/// Starts the real node (the controller's image left out: it runs as a process) and its CSI
/// stack, runs `scenario` with the start instant, keeps the node's logs under `name` when it
/// fails, and tears everything down whatever happened.
pub async fn with_csi_cluster<F>(name: &str, scenario: F) -> Result<()>
where
    F: AsyncFnOnce(&mut kopiur_testenv::realnode::RealCluster, std::time::Instant) -> Result<()>,
{
    let t0 = std::time::Instant::now();
    let mut cluster = kopiur_testenv::realnode::RealCluster::start(&node_images(false)?).await?;
    let res = async {
        cluster.start_csi().await?;
        println!("real node and CSI stack up after {:.1} s", t0.elapsed().as_secs_f64());
        scenario(&mut cluster, t0).await
    }
    .await;
    if let Err(e) = &res {
        println!("SCENARIO FAILED: {e:#}");
        cluster.keep_logs(name);
    }
    let report = cluster.shutdown();
    println!("teardown: {}", report.join("; "));
    res
}
