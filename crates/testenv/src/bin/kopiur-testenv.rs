//! `kopiur-testenv`: starts the local stack for the demo, or measures it for benchmarks.
//!   kopiur-testenv demo     control plane + node agent + Garage (+ the operator when built),
//!                           left running until Ctrl-C; prints the kubeconfig path
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
    Demo,
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
        Cmd::Demo => demo().await,
        Cmd::Bench { runs } => bench(runs).await,
    }
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
        .replace("${S3_ENDPOINT}", &garage.s3_addr().to_string());
    let n = apply::apply_yaml(&client, "demo", &manifest).await?;
    eprintln!("[demo] applied deploy/demo/demo.yaml ({n} objects) in namespace demo");
    eprintln!(
        "\nThe local stack is running.\n  export KUBECONFIG={}\n  kubectl get kopiur -A   # repositories, policies, schedules, snapshots\n  target/debug/kubectl-kopiur status -n demo   # breaker, held deletions, runs (docs/cli.md)\nState and logs: {}\nPress Ctrl-C to stop everything.\n",
        env.kubeconfig().display(),
        env.state_dir().display()
    );
    let mut last = String::new();
    loop {
        let report = demo_report(&client).await.unwrap_or_else(|e| format!("(status unavailable: {e})"));
        if report != last {
            eprintln!("[demo {:>5.0}s] {report}", t0.elapsed().as_secs_f64());
            last = report;
        }
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
    }
    eprintln!("[demo] stopping ...");
    operator.stop();
    drop(garage);
    drop(env);
    Ok(())
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
