//! The real local control plane: etcd -> kube-apiserver -> CRDs -> kube-controller-manager
//! -> node agent, each a supervised process on free loopback ports.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};

use crate::kubeconfig::{self, Credential};
use crate::pki::Pki;
use crate::process::{self, Proc, free_port};
use crate::tools;

mod kcm;
mod node_agent;

/// How much of the control plane to start and how to tune it.
#[derive(Clone, Debug)]
pub struct Options {
    /// CRD manifests (files or directories of `*.yaml`) installed before the kcm starts,
    /// so the garbage collector sees them from its first discovery.
    pub crds: Vec<PathBuf>,
    /// Lowers the Job controller's pod-failure backoff (e.g. `("200ms", "2s")`).
    pub job_backoff: Option<(String, String)>,
    /// Starts the process node agent (scheduler, kubelet, PV provisioner).
    pub node_agent: bool,
    /// Extra image-pattern -> command entries for the node agent's image map.
    pub images: Vec<(String, Vec<String>)>,
    /// Serve the API on an address the test environment created (the real node's bridge)
    /// instead of loopback, for a cluster whose pods reach it through the `kubernetes`
    /// Service: see [`crate::realnode`].
    pub cluster: Option<ClusterNet>,
}

/// Where a control plane for a real node serves, and the Service range kube-proxy programs.
#[derive(Clone, Debug)]
pub struct ClusterNet {
    /// The apiserver binds and advertises this address (the node's bridge address).
    pub advertise: std::net::Ipv4Addr,
    /// `--service-cluster-ip-range`; its first address is the `kubernetes` Service.
    pub service_cidr: String,
    /// The `kubernetes` Service's ClusterIP (a SAN of the serving certificate).
    pub service_ip: std::net::Ipv4Addr,
}

impl Options {
    /// Only the harness's own test CRDs, so the harness can be verified independently of
    /// kopiur's generated CRDs.
    pub fn harness_only() -> Options {
        Options { crds: vec![repo_root().join("crates/testenv/fixtures/crds")], ..Options::default() }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            crds: vec![repo_root().join("deploy/crds"), repo_root().join("crates/testenv/fixtures/crds")],
            job_backoff: Some(("200ms".into(), "2s".into())),
            node_agent: true,
            images: Vec::new(),
            cluster: None,
        }
    }
}

/// The repository root (this crate lives at `crates/testenv`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repo root")
}

pub struct ControlPlane {
    pub state: PathBuf,
    pub pki: Pki,
    pub apiserver_port: u16,
    pub kcm_port: u16,
    pub admin_kubeconfig: PathBuf,
    opts: Options,
    etcd: Option<Proc>,
    apiserver: Option<Proc>,
    kcm: Option<Proc>,
    node: Option<Proc>,
}

const STEP_TIMEOUT: Duration = Duration::from_secs(60);

impl ControlPlane {
    pub async fn start(state: &Path, opts: Options) -> Result<ControlPlane> {
        std::fs::create_dir_all(state)?;
        // Ancestors must be traversable for non-root pod users (fsGroup tests).
        std::fs::set_permissions(state, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
        let extra_ips: Vec<std::net::IpAddr> =
            opts.cluster.iter().flat_map(|c| [c.advertise.into(), c.service_ip.into()]).collect();
        let pki = Pki::generate_with(state, &extra_ips)?;
        let mut cp = ControlPlane {
            state: state.to_path_buf(),
            admin_kubeconfig: state.join("admin.kubeconfig"),
            pki,
            apiserver_port: 0,
            kcm_port: 0,
            opts,
            etcd: None,
            apiserver: None,
            kcm: None,
            node: None,
        };
        let t0 = Instant::now();
        cp.start_etcd().await.context("etcd")?;
        tracing::info!("etcd ready after {:?}", t0.elapsed());
        cp.start_apiserver().await.context("kube-apiserver")?;
        tracing::info!("kube-apiserver ready after {:?}", t0.elapsed());
        cp.install_crds().await.context("installing CRDs")?;
        cp.start_kcm().await.context("kube-controller-manager")?;
        tracing::info!("kube-controller-manager ready after {:?}", t0.elapsed());
        if cp.opts.node_agent {
            cp.start_node_agent().await.context("node agent")?;
            tracing::info!("node agent ready after {:?}", t0.elapsed());
        }
        Ok(cp)
    }

    /// PIDs of the running components (etcd, apiserver, kcm, node agent).
    pub fn pids(&self) -> Vec<u32> {
        [&self.etcd, &self.apiserver, &self.kcm, &self.node]
            .iter()
            .filter_map(|p| p.as_ref().and_then(|p| p.pid()))
            .collect()
    }

    /// Sends `sig` to kube-apiserver. SIGSTOP then SIGCONT is a stalled control plane: the
    /// kernel still accepts connections on its port, and nothing answers them until SIGCONT.
    pub fn signal_apiserver(&self, sig: i32) {
        if let Some(p) = &self.apiserver {
            p.signal(sig);
        }
    }

    pub fn server(&self) -> String {
        format!("https://{}:{}", self.host(), self.apiserver_port)
    }

    /// The address the apiserver serves on: loopback, or the real node's bridge address.
    pub fn host(&self) -> std::net::Ipv4Addr {
        self.opts.cluster.as_ref().map(|c| c.advertise).unwrap_or(std::net::Ipv4Addr::LOCALHOST)
    }

    pub fn admin_client_cert(&self) -> (&Path, &Path) {
        (&self.pki.admin_crt, &self.pki.admin_key)
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.state.join("logs")
    }

    /// Directory the node agent keeps pod logs, PVs and volumes in.
    pub fn node_state_dir(&self) -> PathBuf {
        self.state.join("node")
    }

    /// A fresh admin client bound to the calling runtime.
    pub async fn client(&self) -> Result<kube::Client> {
        kubeconfig::client(&self.admin_kubeconfig).await
    }

    async fn start_etcd(&mut self) -> Result<()> {
        self.start_etcd_on(None).await
    }

    /// SIGKILLs etcd and starts it again on the same ports over the same data (a crashed and
    /// restarted etcd; kube-apiserver reconnects by itself).
    pub async fn restart_etcd(&mut self) -> Result<()> {
        let ports = (self.etcd_port()?, self.state_get("etcd_peer_port")?);
        if let Some(mut p) = self.etcd.take() {
            p.signal(libc::SIGKILL);
            p.stop(Duration::from_secs(5));
        }
        self.start_etcd_on(Some(ports)).await
    }

    /// SIGKILLs kube-apiserver and starts it again on the same port (kubeconfigs stay valid).
    pub async fn restart_apiserver(&mut self) -> Result<()> {
        let port = self.apiserver_port;
        if let Some(mut p) = self.apiserver.take() {
            p.signal(libc::SIGKILL);
            p.stop(Duration::from_secs(5));
        }
        self.start_apiserver_on(Some(port)).await
    }

    /// `fixed`: restart on these (client, peer) ports, keeping the data; `None`: fresh data on
    /// free ports.
    async fn start_etcd_on(&mut self, fixed: Option<(u16, u16)>) -> Result<()> {
        let etcd = tools::etcd()?;
        for attempt in 0..3 {
            let (e, p) = match fixed {
                Some(ports) => ports,
                None => (free_port()?, free_port()?),
            };
            let data = self.state.join("etcd");
            if fixed.is_none() {
                let _ = std::fs::remove_dir_all(&data);
            }
            let mut cmd = Command::new(&etcd);
            cmd.args([
                "--name=default".to_string(),
                format!("--data-dir={}", data.display()),
                format!("--listen-client-urls=http://127.0.0.1:{e}"),
                format!("--advertise-client-urls=http://127.0.0.1:{e}"),
                format!("--listen-peer-urls=http://127.0.0.1:{p}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{p}"),
                format!("--initial-cluster=default=http://127.0.0.1:{p}"),
                "--initial-cluster-state=new".into(),
                "--unsafe-no-fsync=true".into(),
                "--quota-backend-bytes=2147483648".into(),
                "--log-level=warn".into(),
            ]);
            let mut proc_ = process::spawn("etcd", cmd, &self.logs_dir().join("etcd.log"))?;
            let http = reqwest::Client::new();
            let url = format!("http://127.0.0.1:{e}/health");
            let ok = wait_until(STEP_TIMEOUT, &mut proc_, || {
                let http = http.clone();
                let url = url.clone();
                async move {
                    match http.get(&url).send().await {
                        Ok(r) => r.text().await.unwrap_or_default().contains("\"health\":\"true\""),
                        Err(_) => false,
                    }
                }
            })
            .await;
            match ok {
                Ok(()) => {
                    self.etcd = Some(proc_);
                    self.state_set("etcd_port", e)?;
                    self.state_set("etcd_peer_port", p)?;
                    return Ok(());
                }
                Err(err) if attempt < 2 && fixed.is_none() => {
                    tracing::warn!("etcd attempt {attempt} failed ({err}); retrying on new ports");
                }
                Err(err) => return Err(err.context(proc_.log_tail(50))),
            }
        }
        unreachable!("the loop returns on its last attempt")
    }

    fn state_set(&self, key: &str, v: u16) -> Result<()> {
        std::fs::write(self.state.join(key), v.to_string())?;
        Ok(())
    }

    fn state_get(&self, key: &str) -> Result<u16> {
        Ok(std::fs::read_to_string(self.state.join(key))?.trim().parse()?)
    }

    fn etcd_port(&self) -> Result<u16> {
        self.state_get("etcd_port")
    }

    async fn start_apiserver(&mut self) -> Result<()> {
        self.start_apiserver_on(None).await
    }

    async fn start_apiserver_on(&mut self, fixed: Option<u16>) -> Result<()> {
        let bin = tools::kube_apiserver()?;
        let e = self.etcd_port()?;
        let ca = std::fs::read(&self.pki.ca_crt)?;
        for attempt in 0..3 {
            let a = match fixed {
                Some(port) => port,
                None => free_port()?,
            };
            let p = &self.pki;
            let host = self.host();
            let mut cmd = Command::new(&bin);
            cmd.args([
                format!("--etcd-servers=http://127.0.0.1:{e}"),
                format!("--bind-address={host}"),
                format!("--advertise-address={host}"),
                format!("--secure-port={a}"),
                format!("--cert-dir={}", self.state.join("apiserver").display()),
                format!("--tls-cert-file={}", p.apiserver_crt.display()),
                format!("--tls-private-key-file={}", p.apiserver_key.display()),
                format!("--client-ca-file={}", p.ca_crt.display()),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                format!("--service-account-key-file={}", p.sa_pub.display()),
                format!("--service-account-signing-key-file={}", p.sa_key.display()),
                "--authorization-mode=RBAC".into(),
                "--allow-privileged=true".into(),
                "--profiling=false".into(),
                "--enable-priority-and-fairness=false".into(),
                "--v=1".into(),
            ]);
            match &self.opts.cluster {
                // The process node agent mounts tokens itself and has no Service proxy.
                None => cmd.args([
                    "--service-cluster-ip-range=10.0.0.0/24",
                    "--disable-admission-plugins=ServiceAccount",
                    "--endpoint-reconciler-type=none",
                ]),
                // A real kubelet needs the admission-injected token volume, and pods reach the
                // API through the `kubernetes` Service, whose endpoint the lease reconciler keeps.
                Some(c) => cmd.args([
                    format!("--service-cluster-ip-range={}", c.service_cidr),
                    "--endpoint-reconciler-type=lease".into(),
                    // The kubelet is reached at the node's InternalIP, never by a name that
                    // would be looked up in the host's (outside) resolver.
                    "--kubelet-preferred-address-types=InternalIP".into(),
                    format!("--kubelet-client-certificate={}", p.admin_crt.display()),
                    format!("--kubelet-client-key={}", p.admin_key.display()),
                ]),
            };
            let mut proc_ = process::spawn("kube-apiserver", cmd, &self.logs_dir().join("kube-apiserver.log"))?;
            let http = reqwest::Client::builder()
                .add_root_certificate(reqwest::Certificate::from_pem(&ca)?)
                .timeout(Duration::from_secs(5))
                .build()?;
            let url = format!("https://{host}:{a}/readyz");
            let ready = wait_until(STEP_TIMEOUT, &mut proc_, || {
                let (http, url) = (http.clone(), url.clone());
                async move { matches!(http.get(&url).send().await, Ok(r) if r.status().is_success()) }
            })
            .await;
            match ready {
                Ok(()) => {
                    self.apiserver_port = a;
                    self.apiserver = Some(proc_);
                    break;
                }
                Err(err) if attempt < 2 && !proc_.is_running() => {
                    tracing::warn!("kube-apiserver attempt {attempt} failed ({err}); retrying");
                }
                Err(err) => return Err(err.context(proc_.log_tail(50))),
            }
        }
        let admin_crt = std::fs::read(&self.pki.admin_crt)?;
        let admin_key = std::fs::read(&self.pki.admin_key)?;
        let kc = kubeconfig::render(
            &self.server(),
            &ca,
            "admin",
            Credential::ClientCert { cert_pem: &admin_crt, key_pem: &admin_key },
        );
        kubeconfig::write(&self.admin_kubeconfig, &kc)?;
        let client = self.client().await?;
        let ns: Api<Namespace> = Api::all(client);
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            match ns.get("default").await {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => bail!("namespace default never appeared: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    /// Server-side applies every CRD in the configured files/directories and waits until
    /// each is Established and NamesAccepted.
    pub async fn install_crds(&self) -> Result<()> {
        let mut files = Vec::new();
        for p in &self.opts.crds {
            if p.is_dir() {
                let mut v: Vec<PathBuf> = std::fs::read_dir(p)?
                    .flatten()
                    .map(|e| e.path())
                    .filter(|f| f.extension().is_some_and(|x| x == "yaml" || x == "yml"))
                    .collect();
                v.sort();
                files.extend(v);
            } else if p.exists() {
                files.push(p.clone());
            }
        }
        let docs: Vec<CustomResourceDefinition> = files
            .iter()
            .map(|f| -> Result<Vec<CustomResourceDefinition>> {
                let text = std::fs::read_to_string(f)?;
                crate::yaml::parse_all(&text).with_context(|| format!("parsing {}", f.display()))
            })
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .flatten()
            .collect();
        apply_crds(&self.client().await?, &docs).await
    }

    /// A kubeconfig that authenticates as ServiceAccount `ns/name` with a TokenRequest token,
    /// so a component runs under its own RBAC rather than as admin.
    pub async fn service_account_kubeconfig(&self, ns: &str, name: &str, path: &Path) -> Result<PathBuf> {
        let client = self.client().await?;
        let sas: Api<ServiceAccount> = Api::namespaced(client, ns);
        if sas.get_opt(name).await?.is_none() {
            let sa: ServiceAccount = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": ns}
            }))?;
            sas.create(&PostParams::default(), &sa).await?;
        }
        let tr: k8s_openapi::api::authentication::v1::TokenRequest = serde_json::from_value(serde_json::json!({
            "spec": {"audiences": ["https://kubernetes.default.svc.cluster.local"], "expirationSeconds": 86400}
        }))?;
        let out = sas.create_token_request(name, &PostParams::default(), &tr).await?;
        let token = out.status.context("TokenRequest returned no status")?.token;
        let ca = std::fs::read(&self.pki.ca_crt)?;
        let kc = kubeconfig::render(&self.server(), &ca, &format!("{ns}-{name}"), Credential::Token(&token));
        kubeconfig::write(path, &kc)?;
        Ok(path.to_path_buf())
    }

    /// The last lines of every component log, for a failing test's output.
    pub fn logs_summary(&self, lines: usize) -> String {
        let mut out = String::new();
        if let Ok(rd) = std::fs::read_dir(self.logs_dir()) {
            let mut files: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
            files.sort();
            for f in files {
                out.push_str(&format!("==== {} ====\n{}\n", f.display(), process::log_tail(&f, lines)));
            }
        }
        out
    }

    /// Reverse-order shutdown: node agent, kcm, apiserver, etcd.
    pub fn shutdown(&mut self) {
        self.stop_node_agent();
        for p in [self.kcm.take(), self.apiserver.take(), self.etcd.take()].into_iter().flatten() {
            let mut p = p;
            p.stop(Duration::from_secs(10));
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Whether Node `name` exists with condition Ready=True (any error reads as not ready).
pub async fn node_ready(nodes: &Api<k8s_openapi::api::core::v1::Node>, name: &str) -> bool {
    nodes.get_opt(name).await.ok().flatten().is_some_and(|n| {
        n.status.and_then(|s| s.conditions).unwrap_or_default().iter().any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

/// Server-side applies CRDs and waits for Established + NamesAccepted.
pub async fn apply_crds(client: &kube::Client, crds: &[CustomResourceDefinition]) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let pp = PatchParams::apply("kopiur-testenv").force();
    for crd in crds {
        let name = crd.metadata.name.clone().context("CRD without a name")?;
        api.patch(&name, &pp, &Patch::Apply(crd)).await.with_context(|| format!("applying CRD {name}"))?;
    }
    let deadline = Instant::now() + STEP_TIMEOUT;
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        loop {
            let cur = api.get(&name).await?;
            let conds = cur.status.and_then(|s| s.conditions).unwrap_or_default();
            let is = |t: &str| conds.iter().any(|c| c.type_ == t && c.status == "True");
            if is("Established") && is("NamesAccepted") {
                break;
            }
            if Instant::now() > deadline {
                bail!("CRD {name} not Established: {conds:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// Polls `check` every 200 ms until true, failing early if `proc_` exits.
async fn wait_until<F, Fut>(timeout: Duration, proc_: &mut Proc, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await {
            return Ok(());
        }
        if let Some(st) = proc_.try_wait() {
            bail!("{} exited with {st} before becoming ready", proc_.name);
        }
        if Instant::now() > deadline {
            bail!("{} not ready after {timeout:?}", proc_.name);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
