//! `kopiur-testenv`: starts the local stack for the demo, or measures it for benchmarks.
//!   kopiur-testenv demo     control plane + a real node (containerd, kubelet, kube-proxy) +
//!                           Garage + kopiur installed by helm from its own images, left
//!                           running until Ctrl-C; prints the kubeconfig path
//!   kopiur-testenv demo --process-node   the same on the process node agent, the operator
//!                           run as a local process (no images, no root-only host changes)
//!   kopiur-testenv node     only the control plane and the real node, until Ctrl-C
//!   kopiur-testenv bench    warm start-to-ready figures of the control plane
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::{Parser, Subcommand};
use kopiur_testenv::{Options, TestEnv};

#[derive(Parser)]
#[command(about = "kopiur's local test environment (dev/test only)")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start the local stack and keep it running until Ctrl-C.
    Demo {
        /// Run pods through the process node agent instead of the real node.
        #[arg(long)]
        process_node: bool,
    },
    /// Start the control plane and the real node only (images from target/images), until Ctrl-C.
    Node,
    /// Print start-to-ready figures (warm tool cache).
    Bench {
        #[arg(long, default_value_t = 3)]
        runs: u32,
    },
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().cmd {
        Cmd::Demo { process_node: true } => demo().await,
        Cmd::Demo { process_node: false } => demo_real_node().await,
        Cmd::Node => node().await,
        Cmd::Bench { runs } => bench(runs).await,
    }
}

/// The node images `cargo xtask images --node-images --registry localhost --tag testenv` wrote.
fn node_images() -> Result<Vec<std::path::PathBuf>> {
    let dir = kopiur_testenv::controlplane::repo_root().join("target/images");
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .map_err(|e| {
            anyhow::anyhow!(
                "{}: {e}: run `cargo xtask images --node-images --registry localhost --tag testenv`",
                dir.display()
            )
        })?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with("-testenv-linux-amd64.oci.tar"))
        .collect();
    v.sort();
    Ok(v)
}

async fn node() -> Result<()> {
    let t0 = Instant::now();
    let images = node_images()?;
    eprintln!("[node] starting the control plane and the real node ({} images) ...", images.len());
    let mut cluster = kopiur_testenv::realnode::RealCluster::start(&images).await?;
    eprintln!(
        "[node] Node {} Ready in {:.1?}\n  export KUBECONFIG={}\nState and logs: {}\nPress Ctrl-C to stop and clean up.",
        kopiur_testenv::realnode::config::NODE_NAME,
        t0.elapsed(),
        cluster.env().kubeconfig().display(),
        cluster.env().state_dir().display()
    );
    tokio::signal::ctrl_c().await?;
    for line in cluster.shutdown() {
        eprintln!("[node] teardown: {line}");
    }
    Ok(())
}

/// The demo on the real node: kopiur installed by helm from its own images.
async fn demo_real_node() -> Result<()> {
    use kopiur_testenv::realnode::{RealCluster, config};
    use kopiur_testenv::{apply, controlplane::repo_root};
    let t0 = Instant::now();
    let images = node_images()?;
    eprintln!(
        "[demo] starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd, kubelet, kube-proxy ({} images) ...",
        images.len()
    );
    let mut cluster = RealCluster::start(&images).await?;
    let env = cluster.env();
    eprintln!("[demo] control plane and Node {} Ready in {:.1?}", config::NODE_NAME, t0.elapsed());
    let garage = kopiur_testenv::garage::Garage::start(&env.state_dir().join("garage")).await?;
    // Pods reach Garage (on loopback) through a forwarder on the node's bridge address.
    let s3 = kopiur_testenv::proxy::FaultProxy::start_on(config::NODE_IP, garage.s3_addr()).await?;
    eprintln!("[demo] Garage S3 ready; pods reach it at {} (bucket {})", s3.endpoint(), garage.bucket());
    let helm_home = env.state_dir().join("helm");
    let out = std::process::Command::new(kopiur_testenv::tools::helm()?)
        .args(["install", "kopiur"])
        .arg(repo_root().join("deploy/helm/kopiur"))
        .args(["--namespace", "kopiur-system", "--create-namespace", "--wait", "--timeout", "5m", "--kubeconfig"])
        .arg(env.kubeconfig())
        .args(["--set", "image.repository=localhost/kopiur-controller", "--set", "image.tag=testenv"])
        .args(["--set", "mover.image.repository=localhost/kopiur-mover", "--set", "mover.image.tag=testenv"])
        .env("HELM_CACHE_HOME", helm_home.join("cache"))
        .env("HELM_CONFIG_HOME", helm_home.join("config"))
        .env("HELM_DATA_HOME", helm_home.join("data"))
        .output()?;
    if !out.status.success() {
        anyhow::bail!(
            "helm install failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    eprintln!("[demo] helm install kopiur: the controller pod is Ready (localhost/kopiur-controller:testenv)");
    let client = env.client().await?;
    kopiur_testenv::operator::ensure_namespace(&client, "demo").await?;
    let manifest = std::fs::read_to_string(repo_root().join("deploy/demo/demo.yaml"))?
        .replace("${AWS_ACCESS_KEY_ID}", garage.access_key())
        .replace("${AWS_SECRET_ACCESS_KEY}", garage.secret_key())
        .replace("${BUCKET}", garage.bucket())
        .replace("${REGION}", garage.region())
        .replace("${S3_ENDPOINT}", &s3.endpoint())
        .replace("${BUSYBOX_IMAGE}", "localhost/kopiur-testenv-busybox:testenv");
    let n = apply::apply_yaml(&client, "demo", &manifest).await?;
    eprintln!("[demo] applied deploy/demo/demo.yaml ({n} objects) in namespace demo");
    eprintln!(
        "\nThe local stack is running on a real node.\n  export KUBECONFIG={kc}\n  export PATH={bin}:$PATH   # kubectl, built with the control plane\n  kubectl get nodes,pods -A\n  kubectl get kopiur -A   # repositories, policies, schedules, snapshots\n  target/debug/kubectl-kopiur status -n demo   # breaker, held deletions, runs (docs/cli.md)\nState and logs: {state}\nPress Ctrl-C to stop everything and clean up.\n",
        kc = env.kubeconfig().display(),
        bin = kopiur_testenv::tools::kube_apiserver()?.parent().map(|p| p.display().to_string()).unwrap_or_default(),
        state = env.state_dir().display()
    );
    report_until_ctrl_c(&client, t0).await;
    eprintln!("[demo] stopping and cleaning up ...");
    drop(s3);
    drop(garage);
    for line in cluster.shutdown() {
        eprintln!("[demo] teardown: {line}");
    }
    Ok(())
}

async fn demo() -> Result<()> {
    use kopiur_testenv::{apply, operator::Operator};
    let t0 = Instant::now();
    eprintln!("[demo] starting etcd, kube-apiserver, CRDs, kube-controller-manager, node agent ...");
    let env = TestEnv::start(Options::default()).await?;
    eprintln!("[demo] control plane ready in {:.1?}", t0.elapsed());
    let garage = kopiur_testenv::garage::Garage::start(&env.state_dir().join("garage")).await?;
    eprintln!("[demo] Garage S3 ready at {} (bucket {})", garage.s3_endpoint(), garage.bucket());
    let mut operator = Operator::start(&env, "kopiur-system", &[]).await?;
    eprintln!("[demo] kopiur controller started (log: {})", operator.log_path().display());

    let client = env.client().await?;
    kopiur_testenv::operator::ensure_namespace(&client, "demo").await?;
    let manifest = std::fs::read_to_string(kopiur_testenv::controlplane::repo_root().join("deploy/demo/demo.yaml"))?
        .replace("${AWS_ACCESS_KEY_ID}", garage.access_key())
        .replace("${AWS_SECRET_ACCESS_KEY}", garage.secret_key())
        .replace("${BUCKET}", garage.bucket())
        .replace("${REGION}", garage.region())
        .replace("${S3_ENDPOINT}", &garage.s3_addr().to_string())
        .replace("${BUSYBOX_IMAGE}", "busybox");
    let n = apply::apply_yaml(&client, "demo", &manifest).await?;
    eprintln!("[demo] applied deploy/demo/demo.yaml ({n} objects) in namespace demo");
    eprintln!(
        "\nThe local stack is running.\n  export KUBECONFIG={}\n  kubectl get kopiur -A   # repositories, policies, schedules, snapshots\n  target/debug/kubectl-kopiur status -n demo   # breaker, held deletions, runs (docs/cli.md)\nState and logs: {}\nPress Ctrl-C to stop everything.\n",
        env.kubeconfig().display(),
        env.state_dir().display()
    );
    report_until_ctrl_c(&client, t0).await;
    eprintln!("[demo] stopping ...");
    operator.stop();
    drop(garage);
    drop(env);
    Ok(())
}

/// Prints the demo's status line whenever it changes, until Ctrl-C.
async fn report_until_ctrl_c(client: &kube::Client, t0: Instant) {
    let mut last = String::new();
    loop {
        let report = demo_report(client).await.unwrap_or_else(|e| format!("(status unavailable: {e})"));
        if report != last {
            eprintln!("[demo {:>5.0}s] {report}", t0.elapsed().as_secs_f64());
            last = report;
        }
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
    }
}

/// One line: the repository phase and each Snapshot's phase.
async fn demo_report(client: &kube::Client) -> Result<String> {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let ar = |k: &str| ApiResource::from_gvk(&GroupVersionKind::gvk("kopiur.home-operations.com", "v1alpha1", k));
    let repos: kube::Api<DynamicObject> = kube::Api::namespaced_with(client.clone(), "demo", &ar("Repository"));
    let snaps: kube::Api<DynamicObject> = kube::Api::namespaced_with(client.clone(), "demo", &ar("Snapshot"));
    let phase = |o: &DynamicObject| o.data["status"]["phase"].as_str().unwrap_or("-").to_string();
    let repo = repos.get_opt("demo").await?.map(|r| phase(&r)).unwrap_or_else(|| "absent".into());
    let list = snaps.list(&Default::default()).await?;
    let mut items: Vec<String> =
        list.items.iter().map(|s| format!("{}={}", s.metadata.name.clone().unwrap_or_default(), phase(s))).collect();
    items.sort();
    Ok(format!("repository demo: {repo}; snapshots ({}): {}", items.len(), items.join(", ")))
}

async fn bench(runs: u32) -> Result<()> {
    let mut cp = Vec::new();
    let mut full = Vec::new();
    for i in 0..runs {
        let t0 = Instant::now();
        let env = TestEnv::start(Options { node_agent: false, ..Options::default() }).await?;
        cp.push(t0.elapsed());
        drop(env);
        let t0 = Instant::now();
        let env = TestEnv::start(Options::default()).await?;
        full.push(t0.elapsed());
        drop(env);
        eprintln!("run {i}: control plane {:.2?}, with node agent {:.2?}", cp.last().unwrap(), full.last().unwrap());
    }
    let med = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    println!(
        "bench testenv_warm_start_control_plane_ready_seconds median={:.2} runs={runs}",
        med(&mut cp).as_secs_f64()
    );
    println!(
        "bench testenv_warm_start_with_node_agent_ready_seconds median={:.2} runs={runs}",
        med(&mut full).as_secs_f64()
    );
    Ok(())
}
