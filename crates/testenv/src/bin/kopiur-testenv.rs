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
    let t0 = Instant::now();
    eprintln!("[demo] starting etcd, kube-apiserver, CRDs, kube-controller-manager, node agent ...");
    let env = TestEnv::start(Options::default()).await?;
    eprintln!("[demo] control plane ready in {:.1?}", t0.elapsed());
    let garage_dir = env.state_dir().join("garage");
    let garage = kopiur_testenv::garage::Garage::start(&garage_dir).await?;
    eprintln!(
        "[demo] Garage S3 ready at http://{} (bucket {}, key {})",
        garage.s3_addr(),
        garage.bucket(),
        garage.access_key()
    );
    eprintln!(
        "\nThe local stack is running.\n  export KUBECONFIG={}\n  kubectl get nodes; kubectl get crds | grep kopiur\nState and logs: {}\n\nThe kopiur controller is not built yet (see README \"Status\"), so no backups run in this demo yet.\nPress Ctrl-C to stop everything.",
        env.kubeconfig().display(),
        env.state_dir().display()
    );
    tokio::signal::ctrl_c().await?;
    eprintln!("[demo] stopping ...");
    drop(garage);
    drop(env);
    Ok(())
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
    println!("bench testenv_warm_start_control_plane_ready_seconds median={:.2} runs={runs}", med(&mut cp).as_secs_f64());
    println!("bench testenv_warm_start_with_node_agent_ready_seconds median={:.2} runs={runs}", med(&mut full).as_secs_f64());
    Ok(())
}
