//! The process node agent (docs/testenv.md, "The node agent"): scheduler, kubelet and hostPath PV
//! provisioner for the one Node `local`, running each pod's containers as local processes.
//!
//! Layout: [`lease`] (NA-1..3), [`scheduler`] (NA-4), [`kubelet`] + [`pod`] (NA-5, 12..18),
//! [`container`] + [`imagemap`] + [`env`] (NA-6, NA-7, NA-11), [`volumes`] (NA-9),
//! [`mounts`] + [`pidns`] + [`runner`] (NA-10), [`status`] (NA-13..16), [`provisioner`] (NA-8).
//!
//! Where it behaves like a kubelet and where not (details in `docs/testenv.md`):
//! - Each container is PID 1 of its own PID namespace (with its own `/proc`), behind a shim:
//!   when a pod ends (PID 1 exits, deletion, Job deletion, `activeDeadlineSeconds`, the agent
//!   stopping or being killed) its whole process tree ends, whatever process groups or
//!   sessions it made. PID 1 only gets the SIGTERMs it handles, as in a container; grace is
//!   capped at [`DEFAULT_MAX_GRACE`] (a kubelet waits the full grace period).
//! - fsGroup is always a supplementary group; it is applied to emptyDir and the agent-written
//!   secret/configMap/downwardAPI/projected volumes, and to PVCs on `local` PVs that no
//!   container mounts read-only, never to hostPath volumes or PVCs on hostPath PVs (which the
//!   provisioner makes): see [`volumes::fs_group_targets`]. Unlike a kubelet with a CSI driver,
//!   it never rewrites a PVC that is read-only only at the volumeMount.
//! - No image root filesystem, user namespace, cgroup, capabilities, seccomp or probes;
//!   host network; memory emptyDirs are per-container tmpfs mounts.
pub mod config;
pub mod container;
pub mod env;
pub mod imagemap;
pub mod kubelet;
pub mod lease;
pub mod mounts;
pub mod pidns;
pub mod pod;
pub mod provisioner;
pub mod runner;
pub mod scheduler;
pub mod status;
pub mod volumes;

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use base64::Engine as _;
use kube::Client;
use kube::config::Kubeconfig;
use tokio::sync::watch;

pub use config::{
    Config, DEFAULT_KUBELET_VERSION, DEFAULT_MAX_GRACE, MAX_GRACE_ENV, NODE_NAME, STORAGE_CLASS, parse_grace,
};
pub use provisioner::pv_dir;

/// `<state>/pods/<ns>_<name>_<uid>/<container>/<restart>.log` (NA-12).
pub fn pod_log_path(state_dir: &Path, ns: &str, name: &str, uid: &str, container: &str, restart: u32) -> PathBuf {
    state_dir.join("pods").join(format!("{ns}_{name}_{uid}")).join(container).join(format!("{restart}.log"))
}

/// Reads one container log (stdout and stderr interleaved).
pub fn read_pod_log(
    state_dir: &Path,
    ns: &str,
    name: &str,
    uid: &str,
    container: &str,
    restart: u32,
) -> std::io::Result<String> {
    let bytes = std::fs::read(pod_log_path(state_dir, ns, name, uid, container, restart))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Shared by all tasks of one agent.
pub struct Ctx {
    pub client: Client,
    pub cfg: Config,
    /// Mount targets created on the host, removed at shutdown.
    pub created: mounts::CreatedPaths,
    /// The cluster CA, for the synthesised service-account volume.
    pub ca_pem: Option<String>,
    /// Agent PATH: resolves `command[0]` and stands in for an image's PATH.
    pub host_path: String,
    pub shutdown: watch::Receiver<bool>,
    /// Containers still running (by shim pid), for a last-resort kill at shutdown.
    pub live: Mutex<HashMap<i32, Arc<runner::ProcessTree>>>,
}

fn ca_from_kubeconfig(kc: &Kubeconfig, base: &Path) -> Option<String> {
    let ctx_name = kc.current_context.clone()?;
    let cluster_name = kc.contexts.iter().find(|c| c.name == ctx_name)?.context.as_ref()?.cluster.clone();
    let cluster = kc.clusters.iter().find(|c| c.name == cluster_name)?.cluster.as_ref()?;
    if let Some(data) = &cluster.certificate_authority_data {
        let bytes = base64::engine::general_purpose::STANDARD.decode(data.trim()).ok()?;
        return String::from_utf8(bytes).ok();
    }
    let file = cluster.certificate_authority.as_ref()?;
    std::fs::read_to_string(base.join(file)).ok()
}

/// Runs the agent until SIGTERM or SIGINT.
pub async fn run(cfg: Config) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    run_until(cfg, async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
    .await
}

/// Only the default StorageClass and its hostPath provisioner, until SIGTERM/SIGINT: the
/// real node's stand-in for a local-path provisioner (its kubelet, scheduler and Service
/// proxy are the real ones; CSI drivers come with the CSI tier).
pub async fn run_provisioner_only(kubeconfig: &Path, state_dir: PathBuf) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let kc = Kubeconfig::read_from(kubeconfig).with_context(|| format!("reading {}", kubeconfig.display()))?;
    let client = Client::try_from(kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?)?;
    std::fs::create_dir_all(state_dir.join("pv"))?;
    let mut delay = Duration::from_millis(200);
    while let Err(e) = provisioner::ensure_storage_class(&client).await {
        tracing::warn!("creating the default StorageClass: {e:#}");
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
    }
    let (tx, rx) = watch::channel(false);
    let task = tokio::spawn(provisioner::run(client, state_dir, rx));
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    let _ = tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    Ok(())
}

/// Runs the agent until `stop` completes, then stops every pod process (SIGTERM, then
/// SIGKILL) and removes the mount targets it created.
pub async fn run_until(cfg: Config, stop: impl Future<Output = ()>) -> anyhow::Result<()> {
    let kc = Kubeconfig::read_from(&cfg.kubeconfig).with_context(|| format!("reading {}", cfg.kubeconfig.display()))?;
    let ca_pem = ca_from_kubeconfig(&kc, cfg.kubeconfig.parent().unwrap_or(Path::new(".")));
    let kcfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    let client = Client::try_from(kcfg)?;
    std::fs::create_dir_all(cfg.state_dir.join("pv"))?;
    std::fs::create_dir_all(cfg.state_dir.join("pods"))?;
    if let Err(e) = imagemap::ImageMap::load(&cfg.image_map) {
        tracing::warn!("image map unusable for now: {e:#}");
    }

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        ca_pem,
        host_path: std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
        shutdown: shutdown_rx.clone(),
        live: Mutex::new(HashMap::new()),
        created: {
            let created = mounts::CreatedPaths::with_journal(cfg.state_dir.join("created-mount-targets"));
            match mounts::SharedTargets::register(Path::new(SHARED_TARGETS_DIR)) {
                Ok(shared) => created.sharing(shared),
                Err(e) => {
                    tracing::warn!(
                        "mount-target registry {SHARED_TARGETS_DIR}: {e}; this agent removes its targets alone"
                    );
                    created
                }
            }
        },
        cfg,
    });

    tokio::pin!(stop);
    // The apiserver may still be settling (RBAC bootstrap, system namespaces): retry.
    let mut delay = Duration::from_millis(200);
    loop {
        let attempt = async {
            lease::register(&client, &ctx.cfg.state_dir, &ctx.cfg.kubelet_version).await?;
            provisioner::ensure_storage_class(&client).await
        };
        match attempt.await {
            Ok(()) => break,
            Err(e) => {
                tracing::warn!("registering node: {e:#}");
                tokio::select! {
                    _ = &mut stop => return Ok(()),
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
    tracing::info!(node = NODE_NAME, "node registered and ready");

    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(lease::heartbeat(
        client.clone(),
        ctx.cfg.state_dir.clone(),
        ctx.cfg.kubelet_version.clone(),
        shutdown_rx.clone(),
    ));
    tasks.spawn(scheduler::run(client.clone(), shutdown_rx.clone()));
    tasks.spawn(provisioner::run(client.clone(), ctx.cfg.state_dir.clone(), shutdown_rx.clone()));
    tasks.spawn(kubelet::run(ctx.clone()));

    stop.await;
    tracing::info!("shutting down");
    let _ = shutdown_tx.send(true);
    // Pod processes first, directly: workers may be stuck on an apiserver that is going
    // away at the same time, and the supervisor may not wait long.
    let grace = ctx.cfg.max_grace.min(SHUTDOWN_GRACE);
    stop_groups(&ctx, grace).await;
    ctx.created.cleanup();
    let _ = tokio::time::timeout(Duration::from_secs(2), async { while tasks.join_next().await.is_some() {} }).await;
    tasks.abort_all();
    // Anything a worker started meanwhile.
    stop_groups(&ctx, Duration::ZERO).await;
    ctx.created.cleanup();
    tracing::info!("stopped");
    Ok(())
}

/// The host-wide registry of mount targets shared by the agents alive (see
/// [`mounts::SharedTargets`]); the last agent out removes it.
pub const SHARED_TARGETS_DIR: &str = "/run/kopiur-testnode-targets";

/// Upper bound on the SIGTERM grace at agent shutdown (not pod deletion).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// SIGTERM to every live container's PID 1, SIGKILL to those left after `grace` (each
/// takes its whole PID namespace with it), then SIGKILL to shims still there.
async fn stop_groups(ctx: &Ctx, grace: Duration) {
    let trees: Vec<Arc<runner::ProcessTree>> = ctx.live.lock().unwrap().values().cloned().collect();
    if trees.is_empty() {
        return;
    }
    let wait = |d: Duration| {
        let trees = &trees;
        async move {
            let deadline = tokio::time::Instant::now() + d;
            while tokio::time::Instant::now() < deadline && trees.iter().any(|t| !t.exited()) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    for t in &trees {
        t.signal(libc::SIGTERM);
    }
    wait(grace).await;
    for t in trees.iter().filter(|t| !t.exited()) {
        t.kill();
    }
    wait(Duration::from_secs(2)).await;
    for t in trees.iter().filter(|t| !t.exited()) {
        t.kill_shim();
    }
    wait(Duration::from_secs(1)).await;
}

/// Completes once the shutdown flag is set (or its sender is gone).
pub(crate) async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_paths() {
        let p = pod_log_path(Path::new("/s"), "ns", "p", "u1", "main", 2);
        assert_eq!(p, Path::new("/s/pods/ns_p_u1/main/2.log"));
        let tmp = tempfile::tempdir().unwrap();
        let p = pod_log_path(tmp.path(), "ns", "p", "u", "c", 0);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, b"hello\n").unwrap();
        assert_eq!(read_pod_log(tmp.path(), "ns", "p", "u", "c", 0).unwrap(), "hello\n");
        assert!(read_pod_log(tmp.path(), "ns", "p", "u", "c", 1).is_err());
    }
}
