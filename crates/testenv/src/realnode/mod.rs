//! The real node: containerd + runc + the CNI bridge plugin (Debian packages), and kubelet,
//! kube-proxy and kube-scheduler built from the pinned Kubernetes module, joined to a local
//! control plane that serves on the node's bridge address. Pods run in real containers
//! (namespaces, cgroups, capabilities, seccomp, read-only root filesystems) from images
//! imported into the node's own containerd; they reach the API through the `kubernetes`
//! Service (kube-proxy) and the test's servers through the bridge address.
//!
//! Everything it changes on the host is recorded and undone at shutdown (`host.rs`); only one
//! real node runs on a machine at a time (a lock), because kube-proxy owns the host's
//! KUBE-* chains. `docs/testenv.md` ("The real node") lists what it needs and changes.
pub mod config;
pub mod csi;
pub mod host;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Node;
use kube::Api;

use crate::controlplane::{ClusterNet, Options};
use crate::env::TestEnv;
use crate::process::{self, Proc, free_port};
use crate::tools;
use config::Layout;

/// The Debian packages the real node runs on; installed when missing.
pub const PACKAGES: &[&str] =
    &["containerd", "runc", "containernetworking-plugins", "iptables", "conntrack", "nftables"];

/// Installs [`PACKAGES`] when any of their commands is missing (as `cargo xtask test` does
/// for promtool).
pub fn ensure_packages() -> Result<()> {
    let missing = ["containerd", "runc", "iptables", "conntrack", "nft", "ctr"].iter().any(|c| {
        Command::new("sh")
            .args(["-c", &format!("command -v {c}")])
            .output()
            .map(|o| !o.status.success())
            .unwrap_or(true)
    }) || !Path::new("/usr/lib/cni/bridge").exists();
    if !missing {
        return Ok(());
    }
    eprintln!("installing the real node's Debian packages: {}", PACKAGES.join(" "));
    let st = Command::new("apt-get").args(["update", "-qq"]).status()?;
    if !st.success() {
        bail!("apt-get update failed ({st})");
    }
    let st = Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(PACKAGES)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()?;
    if !st.success() {
        bail!("apt-get install {} failed ({st})", PACKAGES.join(" "));
    }
    Ok(())
}

/// What was on the host before the node started, so shutdown removes exactly what it added.
/// Recorded under the node lock, so another real node tearing down cannot blur it.
#[derive(Clone, Debug)]
pub struct HostBefore {
    pub sysctls: BTreeMap<String, String>,
    pub chains: BTreeSet<(String, String, String)>,
    pub nft: BTreeSet<String>,
    /// Which of [`host::FIXED_DIRS`] existed.
    pub fixed_dirs: BTreeSet<String>,
}

/// A control plane with one real node. Dropping it tears everything down.
pub struct RealCluster {
    /// The control plane (serving on [`config::NODE_IP`]); `None` once shut down.
    env: Option<TestEnv>,
    pub layout: Layout,
    procs: Vec<Proc>,
    cgroups: Option<host::Cgroups>,
    before: Option<HostBefore>,
    network: bool,
    /// The CSI stack, once [`RealCluster::start_csi`] ran.
    csi: Option<csi::CsiStack>,
    _lock: host::NodeLock,
}

const STEP: Duration = Duration::from_secs(90);

impl RealCluster {
    /// Starts the control plane on the node's bridge address, the scheduler, the hostPath
    /// provisioner, containerd (importing `images`, OCI archives), kubelet and kube-proxy,
    /// and waits until Node [`config::NODE_NAME`] is Ready.
    pub async fn start(images: &[PathBuf]) -> Result<RealCluster> {
        ensure_packages()?;
        let lock = host::lock(Duration::from_secs(900))?;
        let before = HostBefore {
            sysctls: host::read_sysctls(),
            chains: host::iptables_chains(),
            nft: host::nft_tables(),
            fixed_dirs: host::FIXED_DIRS.iter().filter(|d| Path::new(d).exists()).map(|d| d.to_string()).collect(),
        };
        let t0 = Instant::now();
        host::create_network()?;
        let mut rc = RealCluster {
            env: None,
            layout: Layout {
                dir: PathBuf::new(),
                cgroup_root: String::new(),
                kubelet_port: 0,
                kubelet_healthz_port: 0,
                proxy_healthz_port: 0,
                proxy_metrics_port: 0,
            },
            procs: Vec::new(),
            cgroups: None,
            before: Some(before),
            network: true,
            csi: None,
            _lock: lock,
        };
        rc.boot(images, t0).await?;
        Ok(rc)
    }

    async fn boot(&mut self, images: &[PathBuf], t0: Instant) -> Result<()> {
        let opts = Options {
            node_agent: false,
            cluster: Some(ClusterNet {
                advertise: config::NODE_IP,
                service_cidr: config::SERVICE_CIDR.into(),
                service_ip: config::SERVICE_IP,
            }),
            ..Options::default()
        };
        let state = crate::env::new_state_dir("kopiur-realnode")?;
        let env = TestEnv::start_in(&state, opts).await?;
        tracing::info!("control plane on {} after {:?}", env.cp.server(), t0.elapsed());
        let dir = state.join("node");
        std::fs::create_dir_all(&dir)?;
        let cg = host::Cgroups::create(&format!("kopiur-node-{}", std::process::id()))?;
        self.layout = Layout {
            dir,
            cgroup_root: cg.root.clone(),
            kubelet_port: free_port()?,
            kubelet_healthz_port: free_port()?,
            proxy_healthz_port: free_port()?,
            proxy_metrics_port: free_port()?,
        };
        self.cgroups = Some(cg);
        let logs = env.cp.logs_dir();
        let kubeconfig = env.kubeconfig().to_path_buf();
        self.env = Some(env);

        // kube-scheduler and the hostPath provisioner (the real node has no local-path one).
        let k8s = tools::kube_apiserver()?.with_file_name("k8sbin");
        let kc = kubeconfig.display().to_string();
        let mut c = Command::new(&k8s);
        c.arg("kube-scheduler").args([
            format!("--kubeconfig={kc}"),
            format!("--authentication-kubeconfig={kc}"),
            format!("--authorization-kubeconfig={kc}"),
            "--leader-elect=false".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", free_port()?),
            "--v=1".into(),
        ]);
        self.procs.push(process::spawn("kube-scheduler", c, &logs.join("kube-scheduler.log"))?);
        let mut c = Command::new(tools::workspace_bin("kopiur-testnode")?);
        c.arg("--provisioner-only").arg("--kubeconfig").arg(&kubeconfig).arg("--state-dir").arg(&self.layout.dir);
        self.procs.push(process::spawn("provisioner", c, &logs.join("provisioner.log"))?);

        // containerd, then the images.
        let l = &self.layout;
        for d in [l.containerd_dir(), l.cni_conf_dir(), l.ipam_dir(), l.kubelet_dir()] {
            std::fs::create_dir_all(d)?;
        }
        std::fs::write(l.containerd_config(), config::containerd_toml(l))?;
        std::fs::write(
            l.cni_conf_dir().join("10-kopiur.conflist"),
            serde_json::to_vec_pretty(&config::cni_conflist(l))?,
        )?;
        std::fs::write(l.resolv_conf(), config::resolv_conf())?;
        let mut c = Command::new("containerd");
        c.arg("--config").arg(l.containerd_config());
        let mut containerd = process::spawn("containerd", c, &logs.join("containerd.log"))?;
        let deadline = Instant::now() + STEP;
        while !(l.containerd_socket().exists() && self.ctr(&["version"]).is_ok()) {
            if let Some(st) = containerd.try_wait() {
                bail!("containerd exited with {st}:\n{}", containerd.log_tail(40));
            }
            if Instant::now() > deadline {
                bail!("containerd not serving after {STEP:?}:\n{}", containerd.log_tail(40));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.procs.push(containerd);
        for img in images {
            self.import(img)?;
        }
        tracing::info!("containerd up, {} images imported after {:?}", images.len(), t0.elapsed());

        // kubelet and kube-proxy.
        let ca = self.env().cp.pki.ca_crt.clone();
        std::fs::write(l.kubelet_config(), config::kubelet_yaml(l, &ca))?;
        std::fs::write(l.proxy_config(), config::kube_proxy_yaml(l, &kubeconfig))?;
        let mut c = Command::new(&k8s);
        c.arg("kubelet")
            .arg(format!("--config={}", l.kubelet_config().display()))
            .arg(format!("--kubeconfig={kc}"))
            .arg(format!("--root-dir={}", l.kubelet_dir().display()))
            .arg(format!("--cert-dir={}", l.dir.join("kubelet-pki").display()))
            .arg(format!("--hostname-override={}", config::NODE_NAME))
            .arg(format!("--node-ip={}", config::NODE_IP))
            .arg("--v=1");
        self.procs.push(process::spawn("kubelet", c, &logs.join("kubelet.log"))?);
        let mut c = Command::new(&k8s);
        c.arg("kube-proxy").arg(format!("--config={}", l.proxy_config().display())).arg("--v=1");
        self.procs.push(process::spawn("kube-proxy", c, &logs.join("kube-proxy.log"))?);

        let nodes: Api<Node> = Api::all(self.env().client().await?);
        let deadline = Instant::now() + STEP;
        loop {
            for p in &mut self.procs {
                if let Some(st) = p.try_wait() {
                    bail!("{} exited with {st}:\n{}", p.name, p.log_tail(40));
                }
            }
            if crate::controlplane::node_ready(&nodes, config::NODE_NAME).await {
                break;
            }
            if Instant::now() > deadline {
                let kubelet = self.procs.iter().find(|p| p.name == "kubelet").map(|p| p.log_tail(40));
                bail!("Node {} not Ready after {STEP:?}:\n{}", config::NODE_NAME, kubelet.unwrap_or_default());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        tracing::info!("node {} Ready after {:?}", config::NODE_NAME, t0.elapsed());
        Ok(())
    }

    /// The host as it was when this node took the lock (`None` after [`RealCluster::shutdown`]).
    pub fn host_before(&self) -> Option<HostBefore> {
        self.before.clone()
    }

    pub fn env(&self) -> &TestEnv {
        self.env.as_ref().expect("the cluster is running")
    }

    pub fn env_mut(&mut self) -> &mut TestEnv {
        self.env.as_mut().expect("the cluster is running")
    }

    /// Keeps the component logs (as [`TestEnv::keep_logs`]) and every container's log from
    /// the node's pod-logs directory (under `pods/`), which teardown removes.
    pub fn keep_logs(&self, label: &str) -> PathBuf {
        let dest = self.env().keep_logs(label);
        fn copy_tree(from: &Path, to: &Path) -> std::io::Result<usize> {
            let mut n = 0;
            std::fs::create_dir_all(to)?;
            for e in std::fs::read_dir(from)?.flatten() {
                let t = to.join(e.file_name());
                if e.file_type()?.is_dir() {
                    n += copy_tree(&e.path(), &t)?;
                } else if e.file_type()?.is_file() {
                    std::fs::copy(e.path(), &t)?;
                    n += 1;
                }
            }
            Ok(n)
        }
        match copy_tree(&self.layout.pod_logs_dir(), &dest.join("pods")) {
            Ok(n) => println!("ENVIRONMENT LOGS KEPT: {} ({n} container logs)", dest.join("pods").display()),
            Err(e) => println!("container logs not kept: {e}"),
        }
        dest
    }

    /// `ctr` against the node's containerd, in the CRI's `k8s.io` namespace.
    pub fn ctr(&self, args: &[&str]) -> Result<String> {
        let sock = self.layout.containerd_socket().display().to_string();
        let mut a = vec!["-a", sock.as_str(), "-n", "k8s.io"];
        a.extend(args);
        host::sh("ctr", &a)
    }

    /// Imports an OCI archive (`cargo xtask images`) into the node's containerd; the CRI
    /// sees it at once, so pods with `imagePullPolicy: IfNotPresent` never pull.
    pub fn import(&self, archive: &Path) -> Result<()> {
        let a = archive.display().to_string();
        self.ctr(&["images", "import", "--platform", "linux/amd64", &a])
            .with_context(|| format!("importing {a} into the node's containerd"))?;
        Ok(())
    }

    /// The image references containerd holds.
    pub fn images(&self) -> Result<Vec<String>> {
        Ok(self.ctr(&["images", "list", "-q"])?.lines().map(str::to_string).collect())
    }

    /// Tears the node down and undoes every host change; returns what it removed, for the
    /// test log. Idempotent.
    pub fn shutdown(&mut self) -> Vec<String> {
        let mut report = Vec::new();
        let stop = |procs: &mut Vec<Proc>, name: &str| {
            if let Some(i) = procs.iter().position(|p| p.name == name) {
                let mut p = procs.remove(i);
                p.stop(Duration::from_secs(10));
            }
        };
        // The CSI stack before anything it talks to goes.
        if let Some(mut c) = self.csi.take() {
            report.extend(c.stop());
        }
        // kubelet first (it would restart what we remove), then every pod through the CRI
        // (StopPodSandbox runs the CNI DEL), then the proxy and its rules, then containerd.
        stop(&mut self.procs, "kubelet");
        if self.layout.containerd_socket().exists()
            && let Ok(k8s) = tools::kube_apiserver().map(|p| p.with_file_name("k8sbin"))
        {
            match host::sh(k8s.to_str().unwrap_or_default(), &["cri-reset", &self.layout.cri_endpoint()]) {
                Ok(out) => report.push(format!("pods removed through the CRI: {}", out.lines().count())),
                Err(e) => report.push(format!("cri-reset: {e:#}")),
            }
        }
        stop(&mut self.procs, "kube-proxy");
        if let Ok(k8s) = tools::kube_apiserver().map(|p| p.with_file_name("k8sbin"))
            && self.before.is_some()
        {
            let _ = Command::new(k8s).args(["kube-proxy", "--cleanup"]).output();
        }
        stop(&mut self.procs, "containerd");
        // Shims outlive containerd by design; ours name our socket.
        let sock = self.layout.containerd_socket().display().to_string();
        if !sock.is_empty() && self.layout.dir != Path::new("") {
            for pid in process::processes_with(&sock) {
                // SAFETY: plain kill(2) of a pid we just found.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                report.push(format!("killed shim {pid}"));
            }
        }
        for mut p in self.procs.drain(..) {
            p.stop(Duration::from_secs(10));
        }
        if self.layout.dir != Path::new("") {
            let n = host::unmount_all(&self.layout.dir);
            if n > 0 {
                report.push(format!("unmounted {n} mounts under {}", self.layout.dir.display()));
            }
        }
        // kubelet links every container log into /var/log/containers (a fixed path).
        for e in std::fs::read_dir("/var/log/containers").into_iter().flatten().flatten() {
            if std::fs::read_link(e.path()).is_ok_and(|t| t.starts_with(self.layout.pod_logs_dir())) {
                let _ = std::fs::remove_file(e.path());
            }
        }
        // The CNI result cache is the one file the plugins write outside our directory.
        for e in std::fs::read_dir("/var/lib/cni/results").into_iter().flatten().flatten() {
            if e.file_name().to_string_lossy().starts_with(&format!("{}-", config::CNI_NETWORK)) {
                let _ = std::fs::remove_file(e.path());
            }
        }
        if let Some(mut cg) = self.cgroups.take() {
            report.extend(cg.remove());
            report.push(format!("removed cgroup {}", cg.root));
        }
        if let Some(mut env) = self.env.take() {
            env.cp.shutdown();
            drop(env);
        }
        if self.network {
            report.extend(host::remove_network());
            self.network = false;
        }
        if let Some(b) = self.before.take() {
            let chains = host::remove_new_chains(&b.chains);
            if !chains.is_empty() {
                report.push(format!("removed {} iptables chains", chains.len()));
            }
            let tables = host::remove_new_empty_tables(&b.nft);
            if !tables.is_empty() {
                report.push(format!("removed nft tables {}", tables.join(", ")));
            }
            for d in host::FIXED_DIRS.iter().filter(|d| !b.fixed_dirs.contains(**d)) {
                if host::remove_empty_tree(Path::new(d)) {
                    report.push(format!("removed {d}"));
                }
            }
            let s = host::restore_sysctls(&b.sysctls);
            if !s.is_empty() {
                report.push(format!("restored {}", s.join(" ")));
            }
        }
        report
    }
}

impl Drop for RealCluster {
    fn drop(&mut self) {
        for line in self.shutdown() {
            tracing::info!("real node teardown: {line}");
        }
    }
}
