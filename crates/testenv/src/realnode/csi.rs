//! The real node's CSI stack, started on demand by [`RealCluster::start_csi`]: the snapshot
//! CRDs, our own driver `hostpath.csi.kopiur.dev` (`testenv/go/csi-driver`: volumes are
//! directories, snapshots and clones are `cp -a` copies, pods get bind mounts; it registers
//! with the kubelet itself), the upstream csi-provisioner, csi-snapshotter and
//! snapshot-controller, a kube-controller-manager running only the PV binder (the external
//! provisioner needs it; the real node's own kcm has none), StorageClass and default
//! VolumeSnapshotClass `kopiur-csi`. Every component is a host process with its log in the
//! control plane's logs directory; tests stop and restart them one at a time
//! ([`RealCluster::stop_csi_component`]). `docs/testenv.md` ("CSI stack") describes it.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use super::{RealCluster, config};
use crate::process::{self, Proc, free_port};
use crate::tools;

/// The driver's name (CSIDriver, StorageClass provisioner, VolumeSnapshotClass driver).
pub const DRIVER: &str = "hostpath.csi.kopiur.dev";
/// The StorageClass (WaitForFirstConsumer, Delete) and the default VolumeSnapshotClass.
pub const STORAGE_CLASS: &str = "kopiur-csi";
pub const SNAPSHOT_CLASS: &str = "kopiur-csi";
/// The driver's one topology segment (its volumes live on the node that made them).
pub const TOPOLOGY_KEY: &str = "topology.hostpath.csi.kopiur.dev/node";
/// The components [`RealCluster::stop_csi_component`] and
/// [`RealCluster::start_csi_component`] know, in start order.
pub const COMPONENTS: &[&str] = &["driver", "pv-binder", "snapshot-controller", "csi-snapshotter", "csi-provisioner"];
/// A file whose presence makes the driver's CreateSnapshot fail with `UNAVAILABLE` and the
/// file's contents as the message (under [`CsiStack::state_dir`]).
pub const FAIL_CREATE_SNAPSHOT: &str = "fail-create-snapshot";

const STEP: Duration = Duration::from_secs(90);

/// One component: how to start it again with the same arguments.
struct Component {
    name: &'static str,
    program: PathBuf,
    args: Vec<String>,
    log: PathBuf,
}

/// The running CSI stack of a [`RealCluster`].
pub struct CsiStack {
    /// The driver's state: `volumes/<id>/` and `snapshots/<id>/` (each with a `.json` beside).
    pub state_dir: PathBuf,
    /// The driver's CSI socket (the sidecars' and the kubelet's endpoint).
    pub socket: PathBuf,
    /// The kubelet registration socket the driver serves.
    pub registration_socket: PathBuf,
    components: Vec<Component>,
    procs: Vec<Proc>,
    /// How long [`RealCluster::start_csi`] took.
    pub startup: Duration,
}

impl CsiStack {
    /// Names of what is left in the driver's `volumes/` and `snapshots/` directories (data
    /// directories and metadata files alike).
    pub fn leftovers(&self) -> (Vec<String>, Vec<String>) {
        let list = |d: &str| -> Vec<String> {
            let mut v: Vec<String> = std::fs::read_dir(self.state_dir.join(d))
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        (list("volumes"), list("snapshots"))
    }

    /// The data directory of volume `handle` (a PV's `spec.csi.volumeHandle`).
    pub fn volume_dir(&self, handle: &str) -> PathBuf {
        self.state_dir.join("volumes").join(handle)
    }

    /// The data directory of snapshot `handle` (a VolumeSnapshotContent's `status.snapshotHandle`).
    pub fn snapshot_dir(&self, handle: &str) -> PathBuf {
        self.state_dir.join("snapshots").join(handle)
    }

    /// Turns the CreateSnapshot fault switch on (`Some(message)`) or off (`None`).
    pub fn fail_create_snapshot(&self, message: Option<&str>) -> Result<()> {
        let f = self.state_dir.join(FAIL_CREATE_SNAPSHOT);
        match message {
            Some(m) => std::fs::write(&f, m)?,
            None => match std::fs::remove_file(&f) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            },
        }
        Ok(())
    }

    fn spawn(&mut self, name: &str) -> Result<()> {
        let c = self.components.iter().find(|c| c.name == name).with_context(|| format!("no CSI component {name}"))?;
        let mut cmd = Command::new(&c.program);
        cmd.args(&c.args);
        self.procs.push(process::spawn(c.name, cmd, &c.log)?);
        Ok(())
    }

    fn proc_mut(&mut self, name: &str) -> Option<&mut Proc> {
        self.procs.iter_mut().find(|p| p.name == name)
    }

    /// Fails with the log tail of the first component that exited.
    fn check_alive(&mut self) -> Result<()> {
        for p in &mut self.procs {
            if let Some(st) = p.try_wait() {
                bail!("{} exited with {st}:\n{}", p.name, p.log_tail(40));
            }
        }
        Ok(())
    }

    /// Stops every component (sidecars first, the driver last) and unmounts whatever is
    /// mounted under the driver's state directory; returns what it did, for the teardown log.
    pub(super) fn stop(&mut self) -> Vec<String> {
        let mut report = Vec::new();
        for name in COMPONENTS.iter().rev() {
            while let Some(i) = self.procs.iter().position(|p| p.name == *name) {
                let mut p = self.procs.remove(i);
                p.stop(Duration::from_secs(10));
            }
        }
        for mut p in self.procs.drain(..) {
            p.stop(Duration::from_secs(10));
        }
        report.push("CSI stack stopped".to_string());
        let n = super::host::unmount_all(&self.state_dir);
        if n > 0 {
            report.push(format!("unmounted {n} mounts under {}", self.state_dir.display()));
        }
        report
    }
}

/// The API of VolumeSnapshots (`snapshot.storage.k8s.io/v1`) in `ns`, as dynamic objects.
pub fn volume_snapshots(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &snapshot_resource("VolumeSnapshot", "volumesnapshots"))
}

/// The API of VolumeSnapshotContents (cluster-scoped).
pub fn volume_snapshot_contents(client: &Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &snapshot_resource("VolumeSnapshotContent", "volumesnapshotcontents"))
}

/// The API of VolumeSnapshotClasses (cluster-scoped).
pub fn volume_snapshot_classes(client: &Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &snapshot_resource("VolumeSnapshotClass", "volumesnapshotclasses"))
}

fn snapshot_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("snapshot.storage.k8s.io", "v1", kind), plural)
}

/// Server-side applies `obj` (a JSON object with apiVersion, kind and name) through `api`.
async fn apply<K>(api: &Api<K>, obj: serde_json::Value) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = obj["metadata"]["name"].as_str().context("metadata.name")?.to_string();
    let kind = obj["kind"].as_str().unwrap_or("object").to_string();
    api.patch(&name, &PatchParams::apply("kopiur-testenv").force(), &Patch::Apply(&obj))
        .await
        .with_context(|| format!("applying {kind} {name}"))?;
    Ok(())
}

impl RealCluster {
    /// Starts the CSI stack (see the module documentation) and waits until the kubelet has
    /// registered the driver (CSINode [`config::NODE_NAME`] lists it). Idempotent. Only
    /// tests that call it pay for it.
    pub async fn start_csi(&mut self) -> Result<()> {
        if self.csi.is_some() {
            return Ok(());
        }
        let t0 = Instant::now();
        let client = self.env().client().await?;
        let logs = self.env().cp.logs_dir();
        let kc = self.env().kubeconfig().display().to_string();
        let kubelet = self.layout.kubelet_dir();
        let state_dir = self.layout.dir.join("csi");
        let socket = kubelet.join("plugins").join(DRIVER).join("csi.sock");
        let reg_dir = kubelet.join("plugins_registry");
        let registration_socket = reg_dir.join(format!("{DRIVER}-reg.sock"));
        for s in [&socket, &registration_socket] {
            // sun_path holds 108 bytes with the terminating NUL.
            if s.as_os_str().len() > 107 {
                bail!(
                    "socket path {} is longer than a unix socket allows: use a shorter KOPIUR_TESTENV_STATE",
                    s.display()
                );
            }
        }
        std::fs::create_dir_all(&state_dir)?;

        // The snapshot CRDs first: the sidecars watch their kinds from the start.
        let mut crds: Vec<CustomResourceDefinition> = Vec::new();
        for f in tools::csi_crds()? {
            let text = std::fs::read_to_string(&f)?;
            crds.extend(crate::yaml::parse_all(&text).with_context(|| format!("parsing {}", f.display()))?);
        }
        crate::controlplane::apply_crds(&client, &crds).await.context("the snapshot CRDs")?;
        apply(
            &Api::<CSIDriver>::all(client.clone()),
            json!({
                "apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                "metadata": {"name": DRIVER},
                "spec": {
                    "attachRequired": false,
                    "podInfoOnMount": false,
                    "fsGroupPolicy": "File",
                    "volumeLifecycleModes": ["Persistent"],
                    "requiresRepublish": false,
                    "storageCapacity": false,
                },
            }),
        )
        .await?;

        let k8s = tools::kube_apiserver()?.with_file_name("k8sbin");
        let sock = socket.display().to_string();
        let components = vec![
            Component {
                name: "driver",
                program: tools::csi_bin("kopiur-csi-hostpath")?,
                args: vec![
                    format!("--endpoint={sock}"),
                    format!("--state-dir={}", state_dir.display()),
                    format!("--node-id={}", config::NODE_NAME),
                    format!("--registration-dir={}", reg_dir.display()),
                ],
                log: logs.join("csi-driver.log"),
            },
            Component {
                name: "pv-binder",
                program: k8s,
                args: vec![
                    "kube-controller-manager".into(),
                    format!("--kubeconfig={kc}"),
                    format!("--authentication-kubeconfig={kc}"),
                    format!("--authorization-kubeconfig={kc}"),
                    "--controllers=persistentvolume-binder-controller".into(),
                    "--leader-elect=false".into(),
                    "--bind-address=127.0.0.1".into(),
                    format!("--secure-port={}", free_port()?),
                    format!("--cert-dir={}", state_dir.join("pv-binder-pki").display()),
                    "--v=1".into(),
                ],
                log: logs.join("pv-binder.log"),
            },
            Component {
                name: "snapshot-controller",
                program: tools::csi_bin("snapshot-controller")?,
                args: vec![
                    format!("--kubeconfig={kc}"),
                    "--leader-election=false".into(),
                    // No group-snapshot CRDs here: without this it waits 30 s for them at
                    // every start before it gives up on them.
                    "--feature-gates=CSIVolumeGroupSnapshot=false".into(),
                    "--v=2".into(),
                ],
                log: logs.join("snapshot-controller.log"),
            },
            Component {
                name: "csi-snapshotter",
                program: tools::csi_bin("csi-snapshotter")?,
                args: vec![
                    format!("--csi-address={sock}"),
                    format!("--kubeconfig={kc}"),
                    "--leader-election=false".into(),
                    "--feature-gates=CSIVolumeGroupSnapshot=false".into(),
                    "--timeout=60s".into(),
                    "--v=2".into(),
                ],
                log: logs.join("csi-snapshotter.log"),
            },
            Component {
                name: "csi-provisioner",
                program: tools::csi_bin("csi-provisioner")?,
                args: vec![
                    format!("--csi-address={sock}"),
                    format!("--kubeconfig={kc}"),
                    "--leader-election=false".into(),
                    "--feature-gates=Topology=true".into(),
                    "--extra-create-metadata".into(),
                    "--timeout=60s".into(),
                    "--v=2".into(),
                ],
                log: logs.join("csi-provisioner.log"),
            },
        ];
        let mut stack =
            CsiStack { state_dir, socket, registration_socket, components, procs: Vec::new(), startup: Duration::ZERO };
        // The driver first, serving, so the sidecars find its socket at once.
        stack.spawn("driver")?;
        // Owned by the cluster from here, so a failure below still stops what started.
        self.csi = Some(stack);
        self.wait_csi_socket().await?;
        for name in &COMPONENTS[1..] {
            self.csi_mut()?.spawn(name)?;
        }

        // The classes, once the snapshot kinds are served.
        apply(
            &Api::<k8s_openapi::api::storage::v1::StorageClass>::all(client.clone()),
            json!({
                "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                "metadata": {"name": STORAGE_CLASS},
                "provisioner": DRIVER,
                "volumeBindingMode": "WaitForFirstConsumer",
                "reclaimPolicy": "Delete",
                "allowVolumeExpansion": false,
            }),
        )
        .await?;
        let vsc = json!({
            "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
            "metadata": {"name": SNAPSHOT_CLASS, "annotations": {"snapshot.storage.kubernetes.io/is-default-class": "true"}},
            "driver": DRIVER,
            "deletionPolicy": "Delete",
        });
        let classes = volume_snapshot_classes(&client);
        let deadline = Instant::now() + STEP;
        while let Err(e) = apply(&classes, vsc.clone()).await {
            if Instant::now() > deadline {
                return Err(e);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }

        self.wait_csi_registered(&client).await?;
        let startup = t0.elapsed();
        self.csi_mut()?.startup = startup;
        tracing::info!("CSI stack up after {startup:?}");
        Ok(())
    }

    /// The running CSI stack, if [`RealCluster::start_csi`] was called.
    pub fn csi(&self) -> Option<&CsiStack> {
        self.csi.as_ref()
    }

    /// The driver's state directory (`volumes/`, `snapshots/`, the fault switch).
    pub fn csi_state_dir(&self) -> Option<&Path> {
        self.csi.as_ref().map(|c| c.state_dir.as_path())
    }

    fn csi_mut(&mut self) -> Result<&mut CsiStack> {
        self.csi.as_mut().context("the CSI stack is not running: call RealCluster::start_csi first")
    }

    /// Stops one component of [`COMPONENTS`] (SIGTERM, SIGKILL after 10 s) and waits for it
    /// to end. Stopping one that is not running is a no-op.
    pub fn stop_csi_component(&mut self, name: &str) -> Result<()> {
        if !COMPONENTS.contains(&name) {
            bail!("unknown CSI component {name} (known: {})", COMPONENTS.join(", "));
        }
        let stack = self.csi_mut()?;
        while let Some(i) = stack.procs.iter().position(|p| p.name == name) {
            let mut p = stack.procs.remove(i);
            p.stop(Duration::from_secs(10));
        }
        tracing::info!("CSI component {name} stopped");
        Ok(())
    }

    /// Starts a stopped component again with the arguments it first ran with. For the
    /// driver, waits until the kubelet has registered it again.
    pub async fn start_csi_component(&mut self, name: &str) -> Result<()> {
        if !COMPONENTS.contains(&name) {
            bail!("unknown CSI component {name} (known: {})", COMPONENTS.join(", "));
        }
        let stack = self.csi_mut()?;
        if stack.proc_mut(name).is_some_and(|p| p.is_running()) {
            return Ok(());
        }
        stack.procs.retain(|p| p.name != name);
        stack.spawn(name)?;
        if name == "driver" {
            self.wait_csi_socket().await?;
            let client = self.env().client().await?;
            self.wait_csi_registered(&client).await?;
        }
        tracing::info!("CSI component {name} started");
        Ok(())
    }

    async fn wait_csi_socket(&mut self) -> Result<()> {
        let deadline = Instant::now() + STEP;
        loop {
            let stack = self.csi_mut()?;
            stack.check_alive()?;
            if std::os::unix::net::UnixStream::connect(&stack.socket).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the CSI driver does not serve {} after {STEP:?}", stack.socket.display());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until CSINode [`config::NODE_NAME`] lists the driver with its topology key.
    async fn wait_csi_registered(&mut self, client: &Client) -> Result<()> {
        let nodes: Api<CSINode> = Api::all(client.clone());
        let deadline = Instant::now() + STEP;
        loop {
            self.csi_mut()?.check_alive()?;
            let registered = nodes.get_opt(config::NODE_NAME).await.ok().flatten().is_some_and(|n| {
                n.spec.drivers.iter().any(|d| {
                    d.name == DRIVER && d.topology_keys.as_ref().is_some_and(|k| k.iter().any(|k| k == TOPOLOGY_KEY))
                })
            });
            if registered {
                return Ok(());
            }
            if Instant::now() > deadline {
                let kubelet = self.env().cp.logs_dir().join("kubelet.log");
                let driver = self.csi.as_ref().map(|c| c.state_dir.clone()).unwrap_or_default();
                bail!(
                    "CSINode {} does not list {DRIVER} after {STEP:?} (driver state {}); kubelet log:\n{}",
                    config::NODE_NAME,
                    driver.display(),
                    process::log_tail(&kubelet, 40)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}
