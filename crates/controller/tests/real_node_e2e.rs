//! kopiur from its own images on a real node (issue 14): containerd + runc + CNI, and kubelet,
//! kube-proxy and kube-scheduler from the pinned Kubernetes module, joined to a local control
//! plane that serves on the node's bridge address (`kopiur_testenv::realnode`).
//!
//! 1. `cargo xtask images --node-images` archives (built by `cargo xtask test` with registry
//!    `localhost` and tag `testenv`) import into the node's containerd.
//! 2. `helm install` of deploy/helm/kopiur with those images: the controller pod is Running and
//!    Ready through its real probes, talks to the API through the `kubernetes` Service
//!    (kube-proxy) under the chart's RBAC, and wins the Lease.
//! 3. A Repository on Garage, reached by pods through the fault proxy on the bridge address,
//!    becomes Ready.
//! 4. A PVC with ordinary files, a 0600 file owned by uid 999 inside a 0700 directory, a
//!    symlink and an empty directory is backed up. The hardened mover (uid 65532, no
//!    capabilities) cannot read the database-like directory: the Snapshot fails with
//!    `PermissionDenied`, naming the directory, its owner and mode and the setting that fixes
//!    it, in one pod (not retried), without nudging the repository breaker. With that setting
//!    (`mover.securityContext` runAsUser/runAsGroup 999 on the policy) the same volume backs up.
//!    Neither backup changes the source's owners or modes. Both backups restore into new PVCs
//!    byte-identical, the 0600 file, symlink and empty directory included.
//!    A `privilegedMode` mover is refused (Pending, Stalled `PrivilegedMoverNotPermitted`, no
//!    Job) until the namespace is annotated `kopiur.home-operations.com/privileged-movers=true`;
//!    then the backup runs as uid 0 with only `DAC_READ_SEARCH`, and a privileged restore (uid 0
//!    with only `CHOWN`, `FOWNER`, `DAC_OVERRIDE`) writes the files with their owners and modes.
//! 5. The backend cut at the proxy: the Repository goes Degraded, a scheduled child created
//!    meanwhile parks Pending without a Job, and on recovery runs exactly one Job.
//! 6. An external deletion of 12 Snapshots is held; the ack drains it in one batch Job.
//! 7. Every mover pod ran on the real node in a containerd container with the hardened base:
//!    a read-only root filesystem, all capabilities dropped, no privilege escalation, seccomp
//!    RuntimeDefault, a non-root user (the two privileged movers of 4 excepted, as checked there).
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod, Secret};
use kopiur_api::{Repository, Restore, Snapshot};
use kopiur_testenv::controlplane::repo_root;
use kopiur_testenv::garage::Garage;
use kopiur_testenv::proxy::{FaultProxy, Mode};
use kopiur_testenv::realnode::{RealCluster, config};
use kopiur_testenv::tools;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use support::status::StatusExt;
use support::{PASSWORD, condition, wait_for};

const RELEASE: &str = "kopiur";
const OP_NS: &str = "kopiur-system";

fn pvcs_api(client: &Client, ns: &str) -> Api<PersistentVolumeClaim> {
    Api::namespaced(client.clone(), ns)
}

async fn apply(client: &Client, ns: &str, v: Value) -> Result<()> {
    kopiur_testenv::apply::apply_value(client, ns, &v).await
}

/// Every Job and Pod ever seen in the watched namespaces, by uid (a watch sees each one,
/// however briefly it lived).
#[derive(Clone, Default)]
struct Seen {
    jobs: Arc<Mutex<BTreeMap<String, Job>>>,
    pods: Arc<Mutex<BTreeMap<String, Pod>>>,
}

impl Seen {
    fn spawn(client: Client, ns: &str) -> (Seen, Vec<tokio::task::JoinHandle<()>>) {
        let seen = Seen::default();
        let (s1, s2) = (seen.clone(), seen.clone());
        let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
        let pods: Api<Pod> = Api::namespaced(client, ns);
        let h1 = tokio::spawn(async move {
            let mut st = watcher(jobs, watcher::Config::default()).applied_objects().boxed();
            while let Some(ev) = st.next().await {
                if let Ok(j) = ev {
                    s1.jobs.lock().unwrap().insert(j.uid().unwrap_or_default(), j);
                }
            }
        });
        let h2 = tokio::spawn(async move {
            let mut st = watcher(pods, watcher::Config::default()).applied_objects().boxed();
            while let Some(ev) = st.next().await {
                if let Ok(p) = ev {
                    // Keep the latest version that has a container status (the runtime's id).
                    let mut m = s2.pods.lock().unwrap();
                    let key = p.uid().unwrap_or_default();
                    let has_status = |p: &Pod| p.status.as_ref().and_then(|s| s.container_statuses.as_ref()).is_some();
                    if has_status(&p) || !m.get(&key).is_some_and(has_status) {
                        m.insert(key, p);
                    }
                }
            }
        });
        (seen, vec![h1, h2])
    }

    fn jobs_named(&self, name: &str) -> Vec<Job> {
        self.jobs.lock().unwrap().values().filter(|j| j.name_any() == name).cloned().collect()
    }

    fn jobs(&self) -> Vec<Job> {
        self.jobs.lock().unwrap().values().cloned().collect()
    }

    fn pods(&self) -> Vec<Pod> {
        self.pods.lock().unwrap().values().cloned().collect()
    }
}

/// A file's (uid, gid, mode & 0o7777).
fn owner_mode(p: &Path) -> Result<(u32, u32, u32)> {
    let m = std::fs::symlink_metadata(p).with_context(|| format!("stat {}", p.display()))?;
    Ok((m.uid(), m.gid(), m.mode() & 0o7777))
}

fn chown(p: &Path, uid: u32, gid: u32) -> Result<()> {
    std::os::unix::fs::lchown(p, Some(uid), Some(gid)).with_context(|| format!("chown {}", p.display()))
}

/// Ordinary files, a symlink and an empty directory, and with `private` a database-like
/// directory: `db` 0700 999:999 holding `pgdata` 0600 999:999. Returns the blob's bytes.
fn seed_volume(root: &Path, private: bool) -> Result<Vec<u8>> {
    std::fs::create_dir_all(root.join("plain/nested"))?;
    std::fs::write(root.join("plain/hello.txt"), b"hello from the real node\n")?;
    let blob: Vec<u8> = (0..300_000u32).map(|i| (i.wrapping_mul(2654435761) >> 11) as u8).collect();
    std::fs::write(root.join("plain/nested/blob.bin"), &blob)?;
    std::os::unix::fs::symlink("plain/hello.txt", root.join("link"))?;
    std::fs::create_dir_all(root.join("empty"))?;
    if private {
        let db = root.join("db");
        std::fs::create_dir_all(&db)?;
        std::fs::write(db.join("pgdata"), b"rows a database owns\n")?;
        std::fs::set_permissions(db.join("pgdata"), std::fs::Permissions::from_mode(0o600))?;
        chown(&db.join("pgdata"), 999, 999)?;
        // A second owner in the same tree (readable by others, so the uid-999 mover reads it).
        std::fs::write(db.join("settings.conf"), b"owned by another uid\n")?;
        std::fs::set_permissions(db.join("settings.conf"), std::fs::Permissions::from_mode(0o644))?;
        chown(&db.join("settings.conf"), 1000, 1001)?;
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o700))?;
        chown(&db, 999, 999)?;
    }
    Ok(blob)
}

async fn pvc_dir(client: &Client, ns: &str, name: &str, node_dir: &Path, log: &Path) -> Result<PathBuf> {
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let pvc = wait_for(&format!("PVC {name} Bound"), Duration::from_secs(60), log, || async {
        let p = pvcs.get(name).await?;
        Ok((p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")).then_some(p))
    })
    .await?;
    Ok(kopiur_testenv::node::provisioner::pv_dir(node_dir, &pvc.uid().context("pvc uid")?))
}

async fn wait_snapshot_done(snaps: &Api<Snapshot>, name: &str, log: &Path) -> Result<Snapshot> {
    wait_for(&format!("Snapshot {name} Succeeded or Failed"), Duration::from_secs(300), log, || async {
        let s = snaps.get(name).await?;
        Ok(matches!(s.phase().as_str(), "Succeeded" | "Failed").then_some(s))
    })
    .await
}

/// A Direct SnapshotPolicy on PVC `pvc` with the given `mover` block (`null` for none).
async fn policy(client: &Client, ns: &str, name: &str, pvc: &str, mover: Value) -> Result<()> {
    let mut spec = json!({"repository": {"name": "r"}, "copyMethod": "Direct", "sources": [{"pvc": {"name": pvc}}]});
    if !mover.is_null() {
        spec["mover"] = mover;
    }
    let v = json!({"apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotPolicy",
                   "metadata": {"name": name, "namespace": ns}, "spec": spec});
    apply(client, ns, v).await
}

/// A manual Snapshot of `policy`.
async fn snapshot(client: &Client, ns: &str, name: &str, policy: &str) -> Result<()> {
    let v = json!({"apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
                   "metadata": {"name": name, "namespace": ns}, "spec": {"policyRef": {"name": policy}}});
    apply(client, ns, v).await
}

/// Restores Snapshot `snap` into a new PVC `target` (with the given `mover` block, `null` for
/// none) and waits until it is Completed; a Failed restore fails with its failure.
async fn restore(client: &Client, ns: &str, target: &str, snap: &str, mover: Value, log: &Path) -> Result<()> {
    let mut spec =
        json!({"source": {"snapshotRef": {"name": snap}}, "target": {"pvc": {"name": target, "capacity": "1Gi"}}});
    if !mover.is_null() {
        spec["mover"] = mover;
    }
    let v = json!({"apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Restore",
                   "metadata": {"name": target, "namespace": ns}, "spec": spec});
    apply(client, ns, v).await?;
    let restores: Api<Restore> = Api::namespaced(client.clone(), ns);
    wait_for(&format!("Restore {target} Completed"), Duration::from_secs(300), log, || async {
        let r = restores.get(target).await?;
        let p = r.status.as_ref().and_then(|s| s.phase.as_ref()).map(|p| p.as_str().to_string()).unwrap_or_default();
        if p == "Failed" {
            bail!("restore {target} failed: {:?}", r.status.as_ref().and_then(|s| s.failure.clone()));
        }
        Ok((p == "Completed").then_some(()))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kopiur_from_its_images_on_a_real_node() -> Result<()> {
    let t0 = Instant::now();
    let images = support::realnode::node_images(true)?;
    let mut cluster = RealCluster::start(&images).await?;
    println!("real node Ready after {:.1} s (images: {})", t0.elapsed().as_secs_f64(), images.len());
    let res = scenario(&cluster, t0).await;
    if let Err(e) = &res {
        println!("SCENARIO FAILED: {e:#}");
        if let Ok(client) = cluster.env().client().await {
            dump_kopiur_objects(&client).await;
        }
        cluster.keep_logs("real_node_e2e");
    }
    let report = cluster.shutdown();
    println!("teardown: {}", report.join("; "));
    res
}

/// Every kopiur object's status, for a failed run's output.
async fn dump_kopiur_objects(client: &Client) {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    for kind in ["Repository", "SnapshotPolicy", "Snapshot", "SnapshotSchedule", "Restore"] {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("kopiur.home-operations.com", "v1alpha1", kind));
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        if let Ok(l) = api.list(&ListParams::default()).await {
            for o in l.items {
                println!("{kind} {}/{}: {}", o.namespace().unwrap_or_default(), o.name_any(), o.data["status"]);
            }
        }
    }
    if let Ok(l) = Api::<Pod>::all(client.clone()).list(&ListParams::default()).await {
        for p in l.items {
            let st = p.status.clone().unwrap_or_default();
            println!(
                "Pod {}/{}: {:?} {:?}",
                p.namespace().unwrap_or_default(),
                p.name_any(),
                st.phase,
                st.container_statuses.iter().flatten().map(|c| (&c.state, &c.last_state)).collect::<Vec<_>>()
            );
        }
    }
}

async fn scenario(cluster: &RealCluster, t0: Instant) -> Result<()> {
    let env = cluster.env();
    let client = env.client().await?;
    let node_dir = cluster.layout.dir.clone();
    let log = env.cp.logs_dir().join("kubelet.log");

    // 1. The images are in the node's containerd under their own names.
    let held = cluster.images()?;
    for want in ["localhost/kopiur-controller:testenv", "localhost/kopiur-mover:testenv", config::PAUSE_IMAGE] {
        ensure!(held.iter().any(|i| i == want), "{want} not in the node's containerd: {held:?}");
    }

    // Garage on loopback; pods reach it through the fault proxy on the bridge address.
    let dir = tempfile::tempdir()?;
    let g = Garage::start(&dir.path().join("garage")).await?;
    let proxy = FaultProxy::start_on(config::NODE_IP, g.s3_addr()).await?;

    // 2. helm install with the built images; the controller's probes are the real ones.
    let helm_home = dir.path().join("helm");
    let out = Command::new(tools::helm()?)
        .args(["install", RELEASE])
        .arg(repo_root().join("deploy/helm/kopiur"))
        .args(["--namespace", OP_NS, "--create-namespace", "--kubeconfig"])
        .arg(env.kubeconfig())
        .args(["--set", "image.repository=localhost/kopiur-controller", "--set", "image.tag=testenv"])
        .args(["--set", "mover.image.repository=localhost/kopiur-mover", "--set", "mover.image.tag=testenv"])
        .args(["--set", "extraEnv[0].name=KOPIUR_STRICT_RETRY_BASE_SECONDS", "--set-string", "extraEnv[0].value=10"])
        .args(["--set", "extraEnv[1].name=KOPIUR_STRICT_RETRY_CAP_SECONDS", "--set-string", "extraEnv[1].value=20"])
        .args(["--set", "logLevel=info\\,kube=warn"])
        // A pull secret for movers reaches every mover pod through the mover ServiceAccount.
        .args(["--set", "mover.imagePullSecrets={kopiur-test-pull}"])
        .env("HELM_CACHE_HOME", helm_home.join("cache"))
        .env("HELM_CONFIG_HOME", helm_home.join("config"))
        .env("HELM_DATA_HOME", helm_home.join("data"))
        .output()
        .context("running helm")?;
    ensure!(
        out.status.success(),
        "helm install failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), OP_NS);
    let selector = format!("app.kubernetes.io/name=kopiur,app.kubernetes.io/instance={RELEASE}");
    let pod = wait_for("the controller pod Ready", Duration::from_secs(180), &log, || async {
        let list = pods.list(&ListParams::default().labels(&selector)).await?;
        Ok(list.items.into_iter().find(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        }))
    })
    .await?;
    let st = pod.status.clone().unwrap_or_default();
    let cs = st.container_statuses.clone().unwrap_or_default();
    let c0 = cs.first().context("controller container status")?;
    ensure!(
        c0.container_id.as_deref().is_some_and(|id| id.starts_with("containerd://")),
        "not a containerd container: {c0:?}"
    );
    ensure!(c0.image.contains("kopiur-controller"), "image {}", c0.image);
    let csc = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.security_context.clone())
        .unwrap_or_default();
    ensure!(csc.read_only_root_filesystem == Some(true), "the chart runs the controller with a read-only root");
    let pod_ip = st.pod_ip.clone().context("pod IP")?;
    ensure!(pod_ip.starts_with("198.18.0."), "pod IP {pod_ip} from the environment's range");
    println!(
        "controller pod {} Ready through its probes on {} ({}) after {:.1} s",
        pod.name_any(),
        pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default(),
        c0.image_id,
        t0.elapsed().as_secs_f64()
    );
    // In-cluster config through the Service: it holds the Lease and serves metrics.
    let http = reqwest::Client::builder().timeout(Duration::from_secs(3)).build()?;
    let metrics_url = format!("http://{pod_ip}:8081/metrics");
    let metrics = || {
        let (http, url) = (http.clone(), metrics_url.clone());
        async move { Ok::<String, anyhow::Error>(http.get(&url).send().await?.text().await?) }
    };
    wait_for("the controller to hold the Lease", Duration::from_secs(90), &log, || async {
        Ok(metrics().await.unwrap_or_default().lines().any(|l| l == "kopiur_leader 1").then_some(()))
    })
    .await?;
    // `kubectl logs` through the kubelet: plain text, no terminal colour codes.
    let text = pods.logs(&pod.name_any(), &Default::default()).await.context("controller logs through the kubelet")?;
    ensure!(!text.is_empty() && !text.contains('\u{1b}'), "the controller's log is plain text:\n{text:.400}");
    println!("kubectl logs of the controller: {} lines of plain text", text.lines().count());

    // 3. A Repository on Garage through the proxy, Ready; every Job and Pod recorded.
    let ns = env.namespace("real").await?;
    let (seen, watchers) = Seen::spawn(client.clone(), &ns);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "kopia", "namespace": ns},
        "stringData": {"KOPIA_PASSWORD": PASSWORD, "AWS_ACCESS_KEY_ID": g.access_key(), "AWS_SECRET_ACCESS_KEY": g.secret_key()}
    }))?;
    Api::<Secret>::namespaced(client.clone(), &ns).create(&PostParams::default(), &secret).await?;
    let endpoint = format!("http://{}", proxy.endpoint());
    let repository = |name: &str, prefix: &str, health: Value| {
        let mut spec = json!({
            "backend": {"s3": {"bucket": g.bucket(), "endpoint": endpoint, "region": g.region(), "prefix": prefix}},
            "encryption": {"passwordSecretRef": {"name": "kopia"}}
        });
        if !health.is_null() {
            spec["health"] = health;
        }
        json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
            "metadata": {"name": name, "namespace": ns}, "spec": spec
        })
    };
    apply(&client, &ns, repository("r", "real/", json!({"probe": {"interval": "30s", "failureThreshold": 2}}))).await?;
    let repos: Api<Repository> = Api::namespaced(client.clone(), &ns);
    wait_for("Repository r Ready", Duration::from_secs(300), &log, || async {
        Ok((repos.get("r").await?.phase() == "Ready").then_some(()))
    })
    .await?;
    println!("Repository r Ready after {:.1} s", t0.elapsed().as_secs_f64());

    // 4. Backups of a database-like volume and of a plain one.
    for name in ["data", "plain"] {
        apply(
            &client,
            &ns,
            json!({
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
            }),
        )
        .await?;
        policy(&client, &ns, name, name, Value::Null).await?;
    }
    let data_dir = pvc_dir(&client, &ns, "data", &node_dir, &log).await?;
    let plain_dir = pvc_dir(&client, &ns, "plain", &node_dir, &log).await?;
    seed_volume(&data_dir, true)?;
    let blob = seed_volume(&plain_dir, false)?;
    let before_db = (owner_mode(&data_dir.join("db"))?, owner_mode(&data_dir.join("db/pgdata"))?);

    let snaps: Api<Snapshot> = Api::namespaced(client.clone(), &ns);
    for (snap, pol) in [("full", "data"), ("plain-1", "plain")] {
        snapshot(&client, &ns, snap, pol).await?;
    }
    let full = wait_snapshot_done(&snaps, "full", &log).await?;
    let failure = full.status.as_ref().and_then(|s| s.failure.clone());
    let ready = condition(&full, "Ready").cloned();
    println!(
        "backup of the volume with a 0700 999:999 directory holding a 0600 999:999 file: {} (failure {failure:?}; Ready {:?}: {:?})",
        full.phase(),
        ready.as_ref().map(|c| c.reason.clone()),
        ready.as_ref().map(|c| c.message.clone())
    );
    // The hardened non-root mover cannot read it: said plainly, with the fix, never hidden.
    ensure!(full.phase() == "Failed", "a uid-65532 mover without capabilities cannot read a 0700 999:999 directory");
    let failure = failure.context("status.failure of the denied backup")?;
    let ready = ready.context("Ready condition of the denied backup")?;
    ensure!(ready.reason == "PermissionDenied", "Ready reason {}", ready.reason);
    ensure!(failure.kopia_error_class.as_deref() == Some("PermissionDenied"), "class {:?}", failure.kopia_error_class);
    for want in [
        "cannot read \"db\" (owner 999:999, mode 0700)",
        "runs as uid 65532",
        "runAsUser: 999, runAsGroup: 999",
        "privilegedMode: true",
    ] {
        ensure!(ready.message.contains(want), "the condition names {want:?}: {}", ready.message);
    }
    // Not retried (a terminal class), and not the backend's fault: no reverify nudge, r Ready.
    let full_pods: Vec<Pod> =
        seen.pods().into_iter().filter(|p| p.labels().get("job-name").is_some_and(|j| j == "full")).collect();
    ensure!(full_pods.len() == 1, "the denied backup ran one pod, not retried: {}", full_pods.len());
    let r_now = repos.get("r").await?;
    ensure!(r_now.phase() == "Ready", "r stays Ready after a local permission failure: {}", r_now.phase());
    ensure!(
        !r_now.annotations().contains_key(kopiur_api::names::annotation::REVERIFY_REQUESTED_AT),
        "a local permission failure does not nudge the breaker"
    );
    println!("the denied backup: Failed/PermissionDenied, 1 pod, r Ready, no reverify nudge");

    // The fix the message names: run the mover as the files' owner. Then the backup includes every file.
    policy(&client, &ns, "data", "data", json!({"securityContext": {"runAsUser": 999, "runAsGroup": 999}})).await?;
    snapshot(&client, &ns, "as-owner", "data").await?;
    let as_owner = wait_snapshot_done(&snaps, "as-owner", &log).await?;
    ensure!(
        as_owner.phase() == "Succeeded",
        "the backup as uid 999: {} {:?}",
        as_owner.phase(),
        as_owner.status.as_ref().and_then(|s| s.failure.clone())
    );
    let owner_pod = seen
        .pods()
        .into_iter()
        .find(|p| p.labels().get("job-name").is_some_and(|j| j == "as-owner"))
        .context("the as-owner mover pod")?;
    let osc = owner_pod.spec.as_ref().and_then(|s| s.containers[0].security_context.clone()).unwrap_or_default();
    ensure!((osc.run_as_user, osc.run_as_group) == (Some(999), Some(999)), "mover ran as {:?}", osc.run_as_user);
    println!("with mover.securityContext runAsUser/runAsGroup 999 the same volume backs up: as-owner Succeeded");
    // Neither backup changed anybody's files: owners and modes as they were (no fsGroup on the source).
    let after_db = (owner_mode(&data_dir.join("db"))?, owner_mode(&data_dir.join("db/pgdata"))?);
    ensure!(before_db == after_db, "the source's owners and modes changed: {before_db:?} -> {after_db:?}");
    ensure!(after_db == ((999, 999, 0o700), (999, 999, 0o600)), "source as seeded: {after_db:?}");
    println!("source owners and modes unchanged after both backups: db {:?}, db/pgdata {:?}", after_db.0, after_db.1);

    let plain = wait_snapshot_done(&snaps, "plain-1", &log).await?;
    ensure!(
        plain.phase() == "Succeeded",
        "plain-1 {}: {:?}",
        plain.phase(),
        plain.status.as_ref().and_then(|s| s.failure.clone())
    );
    // Restore both backups that succeeded into new PVCs.
    let to_restore = vec![("plain-1", "restored-plain", false), ("as-owner", "restored-full", true)];
    for (snap, target, private) in to_restore {
        restore(&client, &ns, target, snap, Value::Null, &log).await?;
        let out = pvc_dir(&client, &ns, target, &node_dir, &log).await?;
        ensure!(std::fs::read(out.join("plain/hello.txt"))? == b"hello from the real node\n", "hello.txt");
        ensure!(std::fs::read(out.join("plain/nested/blob.bin"))? == blob, "blob.bin bytes");
        ensure!(std::fs::read_link(out.join("link"))? == Path::new("plain/hello.txt"), "symlink target");
        ensure!(out.join("empty").is_dir() && std::fs::read_dir(out.join("empty"))?.next().is_none(), "empty dir");
        if private {
            ensure!(std::fs::read(out.join("db/pgdata"))? == b"rows a database owns\n", "pgdata bytes");
        }
        println!("restore of {snap} into PVC {target}: bytes, symlink and empty directory identical");
    }
    // The unprivileged mover (uid 65532, no CAP_CHOWN) could not keep the owners: the Restore says
    // which entries lost theirs, and how to keep them.
    // The mover writes status.ownership with Completed; the controller turns it into the condition.
    let restores_api = Api::<Restore>::namespaced(client.clone(), &ns);
    let (own, oc) = wait_for("restored-full OwnershipPreserved", Duration::from_secs(120), &log, || async {
        let rf = restores_api.get("restored-full").await?;
        let own = rf.status.as_ref().and_then(|s| s.ownership.clone());
        let oc = rf.status.iter().flat_map(|s| s.conditions.iter()).find(|c| c.type_ == "OwnershipPreserved").cloned();
        Ok(own.zip(oc))
    })
    .await?;
    ensure!(!own.preserved && own.complete && own.not_preserved_count >= 3, "ownership: {own:?}");
    ensure!(oc.status == "False" && oc.reason == "OwnersNotPreserved", "{oc:?}");
    for want in [
        "db (recorded 999:999, restored 65532:65532)",
        "db/pgdata (recorded 999:999",
        "uid 65532",
        "privilegedMode: true",
    ] {
        ensure!(oc.message.contains(want), "the condition names {want:?}: {}", oc.message);
    }
    println!("restored-full: OwnershipPreserved=False, {} entries named: {}", own.not_preserved_count, oc.message);

    // 4a. Inheriting the workload's identity: with no pod to inherit from the backup waits
    // (SecurityContextInherited=False, no Job); once a Deployment running as 999 mounts the
    // volume, the same Snapshot runs as 999, next to it (sourceColocation Auto), and succeeds.
    policy(
        &client,
        &ns,
        "data-inherit",
        "data",
        json!({"inheritSecurityContextFrom": {"workloadSelector": {"podSelector": {"matchLabels": {"app": "db"}}}},
               "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "512Mi"}},
               "cache": {"capacity": "256Mi"}}),
    )
    .await?;
    snapshot(&client, &ns, "inherited", "data-inherit").await?;
    let waiting = wait_for("the inheriting backup waits for its workload", Duration::from_secs(120), &log, || async {
        let s = snaps.get("inherited").await?;
        Ok(condition(&s, "SecurityContextInherited").filter(|c| c.status == "False").cloned().map(|c| (s.phase(), c)))
    })
    .await?;
    ensure!(waiting.0 == "Pending", "waits Pending: {}", waiting.0);
    ensure!(
        waiting.1.reason == "SecurityContextNotInherited" && waiting.1.message.contains("scaled to zero"),
        "the condition says why: {:?}",
        waiting.1
    );
    ensure!(seen.jobs_named("inherited").is_empty(), "no Job while nothing can be inherited");
    println!("inheritSecurityContextFrom with no matching pod: Pending, {}: {}", waiting.1.reason, waiting.1.message);
    apply(
        &client,
        &ns,
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "db", "namespace": ns},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "db"}},
                "template": {"metadata": {"labels": {"app": "db"}}, "spec": {
                    "securityContext": {"runAsUser": 999, "runAsGroup": 999, "runAsNonRoot": true,
                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{"name": "db", "image": config::PAUSE_IMAGE, "imagePullPolicy": "Never",
                        "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}}}
        }),
    )
    .await?;
    let inherited = wait_snapshot_done(&snaps, "inherited", &log).await?;
    ensure!(
        inherited.phase() == "Succeeded",
        "the inheriting backup: {} {:?}",
        inherited.phase(),
        inherited.status.as_ref().and_then(|s| s.failure.clone())
    );
    let ic = condition(&inherited, "SecurityContextInherited").cloned().context("SecurityContextInherited")?;
    ensure!(ic.status == "True" && ic.message.contains("uid 999, gid 999 from pod db-"), "{ic:?}");
    let ipod = seen
        .pods()
        .into_iter()
        .find(|p| p.labels().get("job-name").is_some_and(|j| j == "inherited"))
        .context("the inherited mover pod")?;
    let ispec = ipod.spec.clone().unwrap_or_default();
    let isc = ispec.containers[0].security_context.clone().unwrap_or_default();
    ensure!((isc.run_as_user, isc.run_as_group) == (Some(999), Some(999)), "mover ran as {:?}", isc.run_as_user);
    // The RWO source is in use on the node: the mover prefers that node (sourceColocation Auto).
    // The first run may have been planned while the db pod was not yet scheduled (no node to
    // prefer), so a second run, once db is Running, shows it.
    wait_for("the db pod Running", Duration::from_secs(120), &log, || async {
        let l = Api::<Pod>::namespaced(client.clone(), &ns).list(&ListParams::default().labels("app=db")).await?;
        Ok(l.items.iter().any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")).then_some(()))
    })
    .await?;
    snapshot(&client, &ns, "inherited-2", "data-inherit").await?;
    let second = wait_snapshot_done(&snaps, "inherited-2", &log).await?;
    ensure!(second.phase() == "Succeeded", "inherited-2: {:?}", second.status.as_ref().and_then(|s| s.failure.clone()));
    let ipod2 = seen
        .pods()
        .into_iter()
        .find(|p| p.labels().get("job-name").is_some_and(|j| j == "inherited-2"))
        .context("the inherited-2 mover pod")?;
    let pref = ipod2
        .spec
        .clone()
        .unwrap_or_default()
        .affinity
        .and_then(|a| a.node_affinity)
        .and_then(|n| n.preferred_during_scheduling_ignored_during_execution)
        .unwrap_or_default();
    ensure!(
        pref.iter().any(|t| t
            .preference
            .match_fields
            .iter()
            .flatten()
            .any(|f| f.key == "metadata.name" && f.values.as_deref() == Some(&[config::NODE_NAME.to_string()][..]))),
        "the mover prefers the source's node: {pref:?}"
    );
    // mover.resources are the container's cgroup limits: the mover logs what the kernel enforces.
    let ilog = Api::<Pod>::namespaced(client.clone(), &ns).logs(&ipod.name_any(), &Default::default()).await?;
    let start = ilog.lines().find(|l| l.contains("starting")).unwrap_or_default().to_string();
    ensure!(
        start.contains("536870912") && start.contains("50000 100000"),
        "memory.max 512Mi and cpu.max 500m inside the mover's cgroup: {start}"
    );
    println!("after Deployment db (uid 999) appeared: inherited Succeeded as uid 999, co-located; {}", ic.message);
    println!("the mover's cgroup enforces its resources: {start}");
    // cache.capacity: the kopia cache is a generic ephemeral volume, a PVC of that size bound for the pod.
    let cache_pvc = pvcs_api(&client, &ns).get_opt(&format!("{}-kopia-cache", ipod.name_any())).await?;
    let cache_pvc = cache_pvc.context("the mover's ephemeral cache PVC")?;
    let req =
        cache_pvc.spec.as_ref().and_then(|s| s.resources.as_ref()).and_then(|r| r.requests.clone()).unwrap_or_default();
    ensure!(req.get("storage").map(|q| q.0.as_str()) == Some("256Mi"), "cache PVC requests {req:?}");
    ensure!(
        cache_pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"),
        "cache PVC {:?}",
        cache_pvc.status
    );
    println!("cache.capacity 256Mi: the mover's cache was PVC {} (256Mi, Bound)", cache_pvc.name_any());
    Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), &ns)
        .delete("db", &DeleteParams::default())
        .await?;

    // 4a''. cache.mode Persistent: the policy's cache PVC is created once, owned by the policy,
    // and every backup of the policy mounts it (the second run finds the first run's cache).
    policy(&client, &ns, "cached", "plain", json!({"cache": {"mode": "Persistent", "capacity": "128Mi"}})).await?;
    for run in ["cached-1", "cached-2"] {
        snapshot(&client, &ns, run, "cached").await?;
        let done = wait_snapshot_done(&snaps, run, &log).await?;
        ensure!(
            done.phase() == "Succeeded",
            "{run}: {} {:?}",
            done.phase(),
            done.status.as_ref().and_then(|s| s.failure.clone())
        );
        if run == "cached-1" {
            let dir = pvc_dir(&client, &ns, "cached-kopia-cache", &node_dir, &log).await?;
            let entries = std::fs::read_dir(&dir)?.count();
            ensure!(entries > 0, "the first backup filled the persistent cache at {}", dir.display());
        }
    }
    let cache = pvcs_api(&client, &ns).get("cached-kopia-cache").await?;
    ensure!(
        cache.owner_references().iter().any(|o| o.kind == "SnapshotPolicy" && o.name == "cached"),
        "the cache PVC belongs to the policy: {:?}",
        cache.owner_references()
    );
    for run in ["cached-1", "cached-2"] {
        let pod = seen
            .pods()
            .into_iter()
            .find(|p| p.labels().get("job-name").is_some_and(|j| j == run))
            .with_context(|| format!("{run} mover pod"))?;
        let claim = pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .find(|v| v.name == "kopia-cache")
            .and_then(|v| v.persistent_volume_claim.as_ref().map(|c| c.claim_name.clone()));
        ensure!(claim.as_deref() == Some("cached-kopia-cache"), "{run} cache volume {claim:?}");
    }
    println!("cache.mode Persistent: cached-1 and cached-2 Succeeded on PVC cached-kopia-cache (owned by the policy)");

    // 4a'. A mover stuck in ContainerCreating: its source volume cannot be mounted (a hostPath PV
    // whose directory does not exist, type Directory), so the kubelet keeps reporting FailedMount.
    // Past podStartupDeadlineSeconds the Snapshot fails MoverPodWedged quoting the kubelet's
    // Event, and the Job is deleted (the same path a Multi-Attach FailedAttachVolume takes).
    let missing_dir = format!("/nonexistent/kopiur-{ns}");
    apply(
        &client,
        "",
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": format!("{ns}-broken")},
               "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                        "persistentVolumeReclaimPolicy": "Retain",
                        "hostPath": {"path": missing_dir, "type": "Directory"},
                        "claimRef": {"namespace": ns, "name": "broken"}}}),
    )
    .await?;
    apply(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "broken", "namespace": ns},
               "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": format!("{ns}-broken"),
                        "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .await?;
    // This cluster's binder is the environment's provisioner, which binds only the claims it
    // provisions: bind the static pair the way the PV controller would.
    {
        use kube::api::{Patch, PatchParams};
        let pv_name = format!("{ns}-broken");
        let bind = json!({"metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes"}}});
        pvcs_api(&client, &ns).patch("broken", &PatchParams::default(), &Patch::Merge(&bind)).await?;
        let claim_uid = pvcs_api(&client, &ns).get("broken").await?.uid().context("claim uid")?;
        let pvs = Api::<k8s_openapi::api::core::v1::PersistentVolume>::all(client.clone());
        let claim_ref = json!({"spec": {"claimRef": {"namespace": ns, "name": "broken", "uid": claim_uid}}});
        pvs.patch(&pv_name, &PatchParams::default(), &Patch::Merge(&claim_ref)).await?;
        let bound = json!({"status": {"phase": "Bound"}});
        pvs.patch_status(&pv_name, &PatchParams::default(), &Patch::Merge(&bound)).await?;
        let claim_bound =
            json!({"status": {"phase": "Bound", "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]}});
        pvcs_api(&client, &ns).patch_status("broken", &PatchParams::default(), &Patch::Merge(&claim_bound)).await?;
    }
    policy(&client, &ns, "broken", "broken", Value::Null).await?;
    apply(
        &client,
        &ns,
        json!({"apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
               "metadata": {"name": "stuck", "namespace": ns},
               "spec": {"policyRef": {"name": "broken"}, "failurePolicy": {"podStartupDeadlineSeconds": 15}}}),
    )
    .await?;
    let stuck_at = Instant::now();
    let stuck = wait_snapshot_done(&snaps, "stuck", &log).await?;
    let sr = condition(&stuck, "Ready").cloned().context("Ready of stuck")?;
    ensure!(stuck.phase() == "Failed" && sr.reason == "MoverPodWedged", "{} {sr:?}", stuck.phase());
    ensure!(
        sr.message.contains("stuck in ContainerCreating")
            && sr.message.contains("FailedMount")
            && sr.message.contains(&missing_dir),
        "the kubelet's cause is quoted: {}",
        sr.message
    );
    wait_for("the stuck Job deleted", Duration::from_secs(60), &log, || async {
        Ok(Api::<Job>::namespaced(client.clone(), &ns).get_opt("stuck").await?.is_none().then_some(()))
    })
    .await?;
    println!(
        "a mover stuck in ContainerCreating failed MoverPodWedged {:.0} s after its Snapshot (deadline 15 s), Job deleted: {}",
        stuck_at.elapsed().as_secs_f64(),
        sr.message
    );

    // 4b. Privileged movers: refused until the namespace opts in; then a backup reads everything
    // with DAC_READ_SEARCH only, and a restore keeps owners and modes with CHOWN, FOWNER and
    // DAC_OVERRIDE only.
    policy(&client, &ns, "data-priv", "data", json!({"privilegedMode": true})).await?;
    snapshot(&client, &ns, "privileged", "data-priv").await?;
    let refused =
        wait_for("privileged refused without the namespace opt-in", Duration::from_secs(120), &log, || async {
            let s = snaps.get("privileged").await?;
            Ok(condition(&s, "Stalled")
                .filter(|c| c.status == "True" && c.reason == "PrivilegedMoverNotPermitted")
                .map(|c| (s.phase(), c.message.clone())))
        })
        .await?;
    ensure!(refused.0 == "Pending", "a refused privileged backup waits Pending: {}", refused.0);
    ensure!(refused.1.contains("privileged-movers=true"), "the message names the opt-in: {}", refused.1);
    let mp = condition(&snaps.get("privileged").await?, "MoverPermitted").cloned();
    ensure!(
        mp.as_ref().is_some_and(|c| c.status == "False" && c.reason == "PrivilegedMoverNotPermitted"),
        "MoverPermitted=False/PrivilegedMoverNotPermitted: {mp:?}"
    );
    ensure!(seen.jobs_named("privileged").is_empty(), "no Job for a refused privileged mover");
    println!(
        "privilegedMode without the namespace opt-in: Pending, Stalled PrivilegedMoverNotPermitted, MoverPermitted=False, no Job"
    );
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            &ns,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"metadata": {"annotations": {"kopiur.home-operations.com/privileged-movers": "true"}}}),
            ),
        )
        .await?;
    let opted_in = Instant::now();
    let privileged = wait_snapshot_done(&snaps, "privileged", &log).await?;
    ensure!(
        privileged.phase() == "Succeeded",
        "privileged backup: {} {:?}",
        privileged.phase(),
        privileged.status.as_ref().and_then(|s| s.failure.clone())
    );
    let mp = condition(&privileged, "MoverPermitted").cloned();
    ensure!(mp.as_ref().is_some_and(|c| c.status == "True"), "MoverPermitted=True after the opt-in: {mp:?}");
    println!("after the opt-in the privileged backup Succeeded ({:.0} s later)", opted_in.elapsed().as_secs_f64());
    restore(&client, &ns, "restored-owned", "privileged", json!({"privilegedMode": true}), &log).await?;
    let owned = pvc_dir(&client, &ns, "restored-owned", &node_dir, &log).await?;
    let got = (owner_mode(&owned.join("db"))?, owner_mode(&owned.join("db/pgdata"))?);
    ensure!(got == ((999, 999, 0o700), (999, 999, 0o600)), "the privileged restore kept owners and modes: {got:?}");
    ensure!(std::fs::read(owned.join("db/pgdata"))? == b"rows a database owns\n", "pgdata bytes");
    // Every owner of the tree, not only the database's: uid 1000, and root's plain files.
    let ro = Api::<Restore>::namespaced(client.clone(), &ns).get("restored-owned").await?;
    ensure!(
        ro.status.as_ref().and_then(|s| s.ownership.clone()).is_none()
            && ro.status.iter().flat_map(|s| s.conditions.iter()).all(|c| c.type_ != "OwnershipPreserved"),
        "a mover with CAP_CHOWN keeps owners and reports no loss: {:?}",
        ro.status.as_ref().and_then(|s| s.ownership.clone())
    );
    for (rel, want) in [("db/settings.conf", (1000, 1001, 0o644)), ("plain/hello.txt", (0, 0, 0o644))] {
        let src = owner_mode(&data_dir.join(rel))?;
        ensure!((src.0, src.1) == (want.0, want.1), "{rel} seeded owned by {want:?}: {src:?}");
        let restored = owner_mode(&owned.join(rel))?;
        ensure!(restored == src, "the privileged restore kept {rel} as {src:?}: {restored:?}");
    }
    let unprivileged = owner_mode(&pvc_dir(&client, &ns, "restored-full", &node_dir, &log).await?.join("db/pgdata"))?;
    println!(
        "privileged restore: db {:?}, db/pgdata {:?}, db/settings.conf (uid 1000) and plain/hello.txt (root) as in the source (the unprivileged restore wrote db/pgdata as {:?})",
        got.0, got.1, unprivileged
    );
    for (job, caps) in
        [("privileged", vec!["DAC_READ_SEARCH"]), ("restored-owned-restore", vec!["CHOWN", "FOWNER", "DAC_OVERRIDE"])]
    {
        let pod = seen
            .pods()
            .into_iter()
            .find(|p| p.labels().get("job-name").is_some_and(|j| j == job))
            .with_context(|| format!("the {job} mover pod"))?;
        let sc = pod.spec.as_ref().and_then(|s| s.containers[0].security_context.clone()).unwrap_or_default();
        let c = sc.capabilities.clone().unwrap_or_default();
        ensure!(sc.run_as_user == Some(0), "{job}: runs as uid {:?}", sc.run_as_user);
        ensure!(c.drop.unwrap_or_default() == vec!["ALL".to_string()], "{job}: drops ALL");
        ensure!(c.add.unwrap_or_default() == caps, "{job}: exactly {caps:?}");
        ensure!(
            sc.privileged != Some(true) && sc.allow_privilege_escalation == Some(false),
            "{job}: no more than that"
        );
    }
    println!(
        "privileged movers: backup uid 0 + DAC_READ_SEARCH only; restore uid 0 + CHOWN, FOWNER, DAC_OVERRIDE only"
    );

    // 4c. Pod Security Admission (issue 31): from here on the namespace enforces `restricted`.
    // The apiserver really refuses a pod outside it (a dry-run root pod); a privileged backup is
    // refused before any Job, naming PSA, opt-in or not; a default backup, its restore and a
    // manual maintenance run are admitted and succeed. Sections 5 and 6 (a scheduled backup, a
    // bootstrap, probes and the batch delete) run under it too.
    namespaces
        .patch(
            &ns,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}),
            ),
        )
        .await?;
    let root_pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "psa-probe"},
        "spec": {"containers": [{"name": "c", "image": "localhost/kopiur-testenv-busybox:testenv"}]}
    }))?;
    let dry = kube::api::PostParams { dry_run: true, ..Default::default() };
    let psa = wait_for("Pod Security restricted enforced", Duration::from_secs(30), &log, || async {
        match Api::<Pod>::namespaced(client.clone(), &ns).create(&dry, &root_pod).await {
            Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains("PodSecurity") => Ok(Some(e.message)),
            _ => Ok(None),
        }
    })
    .await?;
    println!("namespace {ns} enforces restricted: {}", psa.chars().take(120).collect::<String>());
    snapshot(&client, &ns, "privileged-psa", "data-priv").await?;
    let refused = wait_for("privileged refused under PSA", Duration::from_secs(120), &log, || async {
        let s = snaps.get("privileged-psa").await?;
        Ok(condition(&s, "Stalled")
            .filter(|c| c.status == "True" && c.reason == "PrivilegedMoverNotPermitted")
            .map(|c| c.message.clone()))
    })
    .await?;
    ensure!(refused.contains("Pod Security Admission"), "the refusal names PSA: {refused}");
    ensure!(seen.jobs_named("privileged-psa").is_empty(), "no Job for a privileged mover under PSA restricted");
    snaps.delete("privileged-psa", &DeleteParams::default()).await?;
    snapshot(&client, &ns, "strict", "plain").await?;
    let strict = wait_snapshot_done(&snaps, "strict", &log).await?;
    ensure!(
        strict.phase() == "Succeeded",
        "a default backup under PSA restricted: {} {:?}",
        strict.phase(),
        strict.status.as_ref().and_then(|s| s.failure.clone())
    );
    restore(&client, &ns, "strict-restored", "strict", Value::Null, &log).await?;
    let maintenances: Api<kopiur_api::Maintenance> = Api::namespaced(client.clone(), &ns);
    let requested = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    wait_for("Maintenance r projected", Duration::from_secs(60), &log, || async {
        Ok(maintenances.get_opt("r").await?.map(|_| ()))
    })
    .await?;
    let body = json!({"metadata": {"annotations": {"kopiur.home-operations.com/run-requested": requested}}});
    maintenances.patch("r", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&body)).await?;
    wait_for("the manual maintenance run Succeeded under PSA", Duration::from_secs(300), &log, || async {
        let m = maintenances.get("r").await?;
        let run = m.status.as_ref().and_then(|s| s.manual_run.as_ref());
        let p = run.filter(|r| r.requested_at == requested).map(|r| r.phase.as_str().to_string());
        ensure!(p.as_deref() != Some("Failed"), "the maintenance run failed: {:?}", m.status);
        Ok((p.as_deref() == Some("Succeeded")).then_some(()))
    })
    .await?;
    println!(
        "PSA restricted: a privileged backup refused naming Pod Security Admission, no Job; a default backup, its restore and a maintenance run admitted and Succeeded"
    );

    // 5. The backend cut: Degraded; a scheduled child parks Pending without a Job; one Job on recovery.
    proxy.set(Mode::Refuse);
    let cut = Instant::now();
    wait_for("Repository r Degraded", Duration::from_secs(420), &log, || async {
        Ok((repos.get("r").await?.phase() == "Degraded").then_some(()))
    })
    .await?;
    println!("Repository r Degraded {:.0} s after the cut", cut.elapsed().as_secs_f64());
    apply(
        &client,
        &ns,
        json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotSchedule",
            "metadata": {"name": "minutely", "namespace": ns},
            "spec": {"policyRef": {"name": "plain"}, "schedule": {"cron": "* * * * *", "concurrencyPolicy": "Forbid"}}
        }),
    )
    .await?;
    let by_schedule = ListParams::default().labels("kopiur.home-operations.com/schedule=minutely");
    let child = wait_for("a scheduled child parked Pending", Duration::from_secs(150), &log, || async {
        let l = snaps.list(&by_schedule).await?;
        Ok(l.items.into_iter().find(|s| {
            s.phase() == "Pending" && condition(s, "Ready").is_some_and(|c| c.reason == "RepositoryNotReady")
        }))
    })
    .await?;
    let child_name = child.name_any();
    // Parked: no Job for it while the backend stays down (20 s more, two strict retries' worth).
    tokio::time::sleep(Duration::from_secs(20)).await;
    ensure!(seen.jobs_named(&child_name).is_empty(), "a Job ran for the parked child {child_name} during the outage");
    ensure!(snaps.get(&child_name).await?.phase() == "Pending", "the child stays Pending while Degraded");
    println!("scheduled child {child_name} parked Pending (RepositoryNotReady), no Job");
    proxy.set(Mode::Pass);
    let back = Instant::now();
    wait_for(&format!("{child_name} Succeeded after recovery"), Duration::from_secs(300), &log, || async {
        let s = snaps.get(&child_name).await?;
        ensure!(s.phase() != "Failed", "{child_name} failed: {:?}", s.status.as_ref().and_then(|x| x.failure.clone()));
        Ok((s.phase() == "Succeeded").then_some(()))
    })
    .await?;
    let runs = seen.jobs_named(&child_name);
    println!(
        "after recovery: Repository {} and {child_name} Succeeded {:.0} s after the backend returned, with {} Job(s)",
        repos.get("r").await?.phase(),
        back.elapsed().as_secs_f64(),
        runs.len()
    );
    ensure!(runs.len() == 1, "the parked child ran exactly once: {} Jobs", runs.len());
    Api::<kopiur_api::SnapshotSchedule>::namespaced(client.clone(), &ns)
        .delete("minutely", &DeleteParams::default())
        .await?;

    // 6. Twelve external deletions held, then drained by one batch Job after the ack.
    let seed_repo = support::KopiaRepo::create(&g, &dir.path().join("seed"), "seeded/").await?;
    let names = support::names("ext", 12);
    let ids = seed_repo.seed(&names).await?;
    apply(&client, &ns, repository("seeded", "seeded/", Value::Null)).await?;
    wait_for("Repository seeded Ready", Duration::from_secs(300), &log, || async {
        Ok((repos.get("seeded").await?.phase() == "Ready").then_some(()))
    })
    .await?;
    let pin = support::RepoPin::of(&repos.get("seeded").await?);
    support::seed_snapshots(&client, &ns, &pin, support::items(&names, &ids, "ext"), 4).await?;
    for n in &names {
        snaps.delete(n, &DeleteParams::default()).await?;
    }
    let held = wait_for("12 deletions held", Duration::from_secs(120), &log, || async {
        let l = support::list_set(&client, &ns, "ext").await?;
        let held = l.iter().filter(|s| condition(s, "DeletionHeld").is_some_and(|c| c.status == "True")).count();
        Ok((l.len() == 12 && held == 12).then_some(l))
    })
    .await?;
    let batch_jobs = |seen: &Seen| {
        seen.jobs()
            .into_iter()
            .filter(|j| {
                j.labels().get("kopiur.home-operations.com/op").map(String::as_str) == Some("snapshot-delete-batch")
            })
            .collect::<Vec<_>>()
    };
    ensure!(batch_jobs(&seen).is_empty(), "nothing deleted while held");
    let latest = held
        .iter()
        .filter_map(|s| s.metadata.deletion_timestamp.as_ref().map(|t| t.0))
        .max()
        .context("deletionTimestamps")?;
    let ack = latest.to_string();
    let body = json!({"metadata": {"annotations": {support::ALLOW_MASS_DELETION: ack}}});
    repos.patch("seeded", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&body)).await?;
    wait_for("the 12 held Snapshots drained", Duration::from_secs(300), &log, || async {
        Ok(support::list_set(&client, &ns, "ext").await?.is_empty().then_some(()))
    })
    .await?;
    let batches = batch_jobs(&seen);
    let members: BTreeSet<String> = batches
        .iter()
        .flat_map(|j| {
            j.annotations()
                .get(support::DELETE_MEMBERS)
                .cloned()
                .unwrap_or_default()
                .split(',')
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter(|m| !m.is_empty())
        .collect();
    println!(
        "held wave of 12 drained after the ack by {} batch Job(s) listing {} members",
        batches.len(),
        members.len()
    );
    ensure!(
        batches.len() == 1 && members.len() == 12,
        "one batch Job for the 12: {} Jobs, {} members",
        batches.len(),
        members.len()
    );
    let left = seed_repo.list().await?;
    ensure!(ids.values().all(|id| !left.contains(id)), "the 12 manifests are gone from kopia");
    println!("PSA restricted: the scheduled backup, the bootstrap of seeded and the batch delete ran under it too");

    // 7. Every mover ran on the real node, hardened.
    // (The mover of 4a' never started a container: its volume could not be mounted.)
    let mover_pods: Vec<Pod> = seen
        .pods()
        .into_iter()
        .filter(|p| p.owner_references().iter().any(|o| o.kind == "Job"))
        .filter(|p| p.labels().get("job-name").is_none_or(|j| j != "stuck"))
        .collect();
    ensure!(mover_pods.len() >= 5, "mover pods seen: {}", mover_pods.len());
    let privileged_jobs = ["privileged", "restored-owned-restore"];
    for p in &mover_pods {
        let spec = p.spec.as_ref().context("pod spec")?;
        let privileged = p.labels().get("job-name").is_some_and(|j| privileged_jobs.contains(&j.as_str()));
        ensure!(spec.node_name.as_deref() == Some(config::NODE_NAME), "{} ran on {:?}", p.name_any(), spec.node_name);
        let pulls: Vec<String> = spec.image_pull_secrets.iter().flatten().map(|r| r.name.clone()).collect();
        ensure!(pulls == ["kopiur-test-pull"], "{}: imagePullSecrets {pulls:?}", p.name_any());
        let pod_sc = spec.security_context.clone().unwrap_or_default();
        for c in &spec.containers {
            let sc = c.security_context.clone().unwrap_or_default();
            ensure!(
                c.image.as_deref() == Some("localhost/kopiur-mover:testenv"),
                "{} image {:?}",
                p.name_any(),
                c.image
            );
            // The hardened base: a read-only root (the mover writes to its cache and /tmp emptyDirs).
            ensure!(sc.read_only_root_filesystem == Some(true), "{}: root filesystem writable", p.name_any());
            let seccomp = sc.seccomp_profile.or(pod_sc.seccomp_profile.clone()).map(|s| s.type_);
            ensure!(seccomp.as_deref() == Some("RuntimeDefault"), "{}: seccomp {seccomp:?}", p.name_any());
            let drop = sc.capabilities.as_ref().and_then(|c| c.drop.clone()).unwrap_or_default();
            ensure!(drop.iter().any(|d| d == "ALL"), "{}: capabilities not all dropped: {drop:?}", p.name_any());
            // The two privileged movers of 4b are checked there (root with named capabilities).
            if !privileged {
                ensure!(
                    sc.capabilities.as_ref().and_then(|c| c.add.clone()).unwrap_or_default().is_empty(),
                    "{}: capabilities added",
                    p.name_any()
                );
                let non_root = sc.run_as_non_root.or(pod_sc.run_as_non_root) == Some(true)
                    && sc.run_as_user.or(pod_sc.run_as_user).is_some_and(|u| u != 0);
                ensure!(non_root, "{}: not a non-root user", p.name_any());
            }
            ensure!(sc.allow_privilege_escalation == Some(false), "{}: privilege escalation allowed", p.name_any());
        }
        let ids: Vec<String> = p
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.clone())
            .unwrap_or_default()
            .iter()
            .filter_map(|c| c.container_id.clone())
            .collect();
        ensure!(
            !ids.is_empty() && ids.iter().all(|i| i.starts_with("containerd://")),
            "{} ran in containerd: {ids:?}",
            p.name_any()
        );
    }
    println!(
        "{} mover pods, every one on {} in a containerd container: read-only root, capabilities ALL dropped, no privilege escalation, seccomp RuntimeDefault, non-root (but the 2 privileged movers of 4b)",
        mover_pods.len(),
        config::NODE_NAME
    );
    for h in watchers {
        h.abort();
    }
    println!("real node scenario done after {:.1} s", t0.elapsed().as_secs_f64());
    Ok(())
}
