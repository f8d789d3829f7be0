//! `kopiur-testnode`: the process node agent for the local test control plane (dev/test only).
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use kopiur_testenv::node::{self, Config, DEFAULT_KUBELET_VERSION, MAX_GRACE_ENV};

#[derive(Parser, Debug)]
#[command(
    name = "kopiur-testnode",
    about = "Process node agent: scheduler, kubelet and hostPath provisioner for Node `local`"
)]
struct Args {
    /// Admin kubeconfig.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Directory for PVs, pod volumes and logs.
    #[arg(long)]
    state_dir: PathBuf,
    /// JSON image map: {"images":[{"pattern","command","args"}]}.
    #[arg(long, required_unless_present = "provisioner_only")]
    image_map: Option<PathBuf>,
    /// Apiserver port on 127.0.0.1 (KUBERNETES_SERVICE_PORT for pods).
    #[arg(long, required_unless_present = "provisioner_only")]
    apiserver_port: Option<u16>,
    #[arg(long, default_value = DEFAULT_KUBELET_VERSION)]
    kubelet_version: String,
    /// Upper bound on termination grace; the KOPIUR_TESTNODE_MAX_GRACE env var is the fallback.
    #[arg(long)]
    max_grace_seconds: Option<f64>,
    /// Run only the default StorageClass's hostPath provisioner (beside a real kubelet).
    #[arg(long)]
    provisioner_only: bool,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn,hyper=warn,tower=warn")),
        )
        .init();
    let args = Args::parse();
    if args.provisioner_only {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
        return rt.block_on(node::run_provisioner_only(&args.kubeconfig, args.state_dir));
    }
    let max_grace = match args.max_grace_seconds {
        Some(s) if s.is_finite() && s >= 0.0 => Duration::from_secs_f64(s),
        Some(s) => anyhow::bail!("invalid --max-grace-seconds {s}"),
        None => match std::env::var(MAX_GRACE_ENV) {
            Ok(v) => node::parse_grace(&v).ok_or_else(|| anyhow::anyhow!("invalid {MAX_GRACE_ENV}={v:?}"))?,
            Err(_) => node::DEFAULT_MAX_GRACE,
        },
    };
    let cfg = Config {
        kubeconfig: args.kubeconfig,
        state_dir: args.state_dir,
        image_map: args.image_map.ok_or_else(|| anyhow::anyhow!("--image-map is required"))?,
        apiserver_port: args.apiserver_port.ok_or_else(|| anyhow::anyhow!("--apiserver-port is required"))?,
        kubelet_version: args.kubelet_version,
        max_grace,
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(node::run(cfg))
}
