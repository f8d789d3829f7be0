//! The real node's CSI stack (`RealCluster::start_csi`): our hostpath driver with the upstream
//! provisioner, snapshotter and snapshot-controller, on a real kubelet. A pod writes to a
//! dynamically provisioned PVC (the kubelet applies the fsGroup: the CSIDriver's
//! fsGroupPolicy is File); a VolumeSnapshot without a class gets the default class and turns
//! ready; a PVC restored from it and a clone of the source PVC come up, bound on first use,
//! with contents, ownership, modes and timestamps kept, and mounted read-only into a pod; a
//! VolumeSnapshot created while the snapshot-controller is down turns ready once it is back;
//! deleting everything removes every PV, VolumeSnapshotContent, volume and snapshot of the
//! driver, and no mount is left on the host.
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kopiur_testenv::controlplane::repo_root;
use kopiur_testenv::realnode::csi::{self, DRIVER, SNAPSHOT_CLASS, STORAGE_CLASS};
use kopiur_testenv::realnode::{RealCluster, host};
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const BUSYBOX: &str = "localhost/kopiur-testenv-busybox:testenv";

fn archive(name: &str) -> Option<PathBuf> {
    let p = repo_root().join(format!("target/images/{name}-testenv-linux-amd64.oci.tar"));
    p.exists().then_some(p)
}

/// Polls `f` every 500 ms; on timeout fails with the tails of every component log.
async fn wait<T, F, Fut>(cluster: &RealCluster, what: &str, secs: u64, f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let summary = || cluster.env().logs_summary(25);
    kopiur_testenv::wait::wait_explained(what, Duration::from_secs(secs), summary, f).await
}

fn pvc(ns: &str, name: &str, data_source: Option<serde_json::Value>) -> Result<PersistentVolumeClaim> {
    let mut spec = json!({
        "storageClassName": STORAGE_CLASS,
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "64Mi"}},
    });
    if let Some(ds) = data_source {
        spec["dataSource"] = ds;
    }
    Ok(serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns}, "spec": spec}))?)
}

fn snapshot(ns: &str, name: &str, pvc: &str) -> Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"source": {"persistentVolumeClaimName": pvc}},
    }))?)
}

/// A busybox pod running `script` as uid 1000, with the given volumes (name, claim,
/// mount path, read-only).
fn pod(ns: &str, name: &str, script: &str, fs_group: Option<i64>, vols: &[(&str, &str, &str, bool)]) -> Result<Pod> {
    let mut sc = json!({"runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": true});
    if let Some(g) = fs_group {
        sc["fsGroup"] = json!(g);
    }
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 1,
            "securityContext": sc,
            "volumes": vols.iter().map(|(v, c, _, ro)| json!({"name": v, "persistentVolumeClaim": {"claimName": c, "readOnly": ro}})).collect::<Vec<_>>(),
            "containers": [{
                "name": "c", "image": BUSYBOX, "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", script],
                "volumeMounts": vols.iter().map(|(v, _, m, ro)| json!({"name": v, "mountPath": m, "readOnly": ro})).collect::<Vec<_>>(),
                "securityContext": {"readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
            }],
        },
    }))?)
}

/// Waits for pod `name` to succeed and returns its log.
async fn run_to_completion(cluster: &RealCluster, pods: &Api<Pod>, name: &str) -> Result<String> {
    wait(cluster, &format!("pod {name} Succeeded"), 180, || async {
        let p = pods.get(name).await?;
        let ph = p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
        if ph == "Failed" {
            let logs = pods.logs(name, &Default::default()).await.unwrap_or_default();
            anyhow::bail!("pod {name} failed: {logs}\n{:?}", p.status);
        }
        Ok((ph == "Succeeded").then_some(()))
    })
    .await?;
    Ok(pods.logs(name, &Default::default()).await?)
}

async fn snapshot_ready(api: &Api<DynamicObject>, name: &str) -> Result<Option<DynamicObject>> {
    let s = api.get(name).await?;
    if let Some(err) = s.data["status"]["error"]["message"].as_str() {
        tracing::info!("VolumeSnapshot {name}: {err}");
    }
    Ok((s.data["status"]["readyToUse"] == json!(true)).then_some(s))
}

async fn volume_handle(client: &Client, ns: &str, claim: &str) -> Result<String> {
    let c = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns).get(claim).await?;
    let pv = c.spec.and_then(|s| s.volume_name).context("claim not bound")?;
    let pv = Api::<PersistentVolume>::all(client.clone()).get(&pv).await?;
    let csi = pv.spec.and_then(|s| s.csi).context("not a CSI PV")?;
    ensure!(csi.driver == DRIVER, "PV of {claim} belongs to {}", csi.driver);
    Ok(csi.volume_handle)
}

/// `uid:gid mode mtime` of a host file.
fn attrs(p: &Path) -> Result<String> {
    let m = std::fs::metadata(p).with_context(|| format!("stat {}", p.display()))?;
    Ok(format!("{}:{} {:o} {}", m.uid(), m.gid(), m.mode() & 0o7777, m.mtime()))
}

fn csi_mounts(cluster: &RealCluster) -> Vec<PathBuf> {
    host::mounts_under(&cluster.layout.kubelet_dir().join("pods"))
        .into_iter()
        .filter(|m| m.to_string_lossy().contains("kubernetes.io~csi"))
        .collect()
}

async fn scenario(cluster: &mut RealCluster) -> Result<()> {
    let client = cluster.env().client().await?;
    let ns = cluster.env().namespace("csi").await?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let snaps = csi::volume_snapshots(&client, &ns);
    let pp = PostParams::default();

    // 1. A dynamically provisioned volume, written by a non-root pod with an fsGroup.
    let t = Instant::now();
    pvcs.create(&pp, &pvc(&ns, "data", None)?).await?;
    let writer = "set -e; echo hello-csi > /data/hello.txt; mkdir /data/sub; echo private > /data/sub/owned.txt; \
                  chmod 0600 /data/sub/owned.txt; stat -c '%u:%g %a' /data /data/sub/owned.txt";
    pods.create(&pp, &pod(&ns, "writer", writer, Some(2000), &[("d", "data", "/data", false)])?).await?;
    let out = run_to_completion(cluster, &pods, "writer").await?;
    println!("writer ({:.1} s from the claim):\n{out}", t.elapsed().as_secs_f64());
    let lines: Vec<&str> = out.lines().collect();
    ensure!(lines.first() == Some(&"0:2000 2775"), "the kubelet applies the fsGroup to the volume root: {out}");
    ensure!(lines.get(1) == Some(&"1000:2000 600"), "the file is the writer's, in the fsGroup: {out}");
    let stack = cluster.csi().context("CSI stack")?;
    let data = volume_handle(&client, &ns, "data").await?;
    let src_attrs = attrs(&stack.volume_dir(&data).join("sub/owned.txt"))?;
    ensure!(src_attrs.starts_with("1000:2000 600 "), "on the host: {src_attrs}");

    // 2. A VolumeSnapshot without a class: the default class is chosen, and it turns ready.
    let t = Instant::now();
    snaps.create(&pp, &snapshot(&ns, "snap1", "data")?).await?;
    let s1 = wait(cluster, "VolumeSnapshot snap1 readyToUse", 120, || snapshot_ready(&snaps, "snap1")).await?;
    println!("snap1 ready after {:.1} s", t.elapsed().as_secs_f64());
    ensure!(
        s1.data["spec"]["volumeSnapshotClassName"] == json!(SNAPSHOT_CLASS),
        "the default VolumeSnapshotClass is picked: {}",
        s1.data["spec"]
    );
    let content_name = s1.data["status"]["boundVolumeSnapshotContentName"].as_str().context("bound content")?;
    let content = csi::volume_snapshot_contents(&client).get(content_name).await?;
    let snap_handle = content.data["status"]["snapshotHandle"].as_str().context("snapshotHandle")?.to_string();
    ensure!(stack.snapshot_dir(&snap_handle).join("hello.txt").is_file(), "the snapshot holds the data");

    // 3. A claim restored from the snapshot and a clone of the source claim, bound when a pod
    //    that mounts both read-only is scheduled.
    let t = Instant::now();
    let from_snap = json!({"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "snap1"});
    pvcs.create(&pp, &pvc(&ns, "from-snap", Some(from_snap))?).await?;
    pvcs.create(&pp, &pvc(&ns, "clone", Some(json!({"kind": "PersistentVolumeClaim", "name": "data"})))?).await?;
    let reader = "for d in /a /b; do cat $d/hello.txt $d/sub/owned.txt; stat -c '%u:%g %a' $d/sub/owned.txt; \
                  if touch $d/new 2>/dev/null; then echo $d writable; else echo $d read-only; fi; done";
    let vols = [("a", "from-snap", "/a", true), ("b", "clone", "/b", true)];
    pods.create(&pp, &pod(&ns, "reader", reader, None, &vols)?).await?;
    let out = run_to_completion(cluster, &pods, "reader").await?;
    println!("reader ({:.1} s from the claims):\n{out}", t.elapsed().as_secs_f64());
    let want = "hello-csi\nprivate\n1000:2000 600\n/a read-only\nhello-csi\nprivate\n1000:2000 600\n/b read-only";
    ensure!(out.trim() == want, "restored and cloned data as written, read-only: {out}");
    for claim in ["from-snap", "clone"] {
        let h = volume_handle(&client, &ns, claim).await?;
        let a = attrs(&stack.volume_dir(&h).join("sub/owned.txt"))?;
        ensure!(a == src_attrs, "{claim}: owner, mode and mtime kept: {a} vs {src_attrs}");
    }

    // 4. The snapshot-controller down for 5 s: a VolumeSnapshot made meanwhile waits, then
    //    turns ready once it is back.
    cluster.stop_csi_component("snapshot-controller")?;
    snaps.create(&pp, &snapshot(&ns, "snap2", "data")?).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let s2 = snaps.get("snap2").await?;
    ensure!(s2.data["status"]["readyToUse"] != json!(true), "no controller, no progress: {}", s2.data["status"]);
    let t = Instant::now();
    cluster.start_csi_component("snapshot-controller").await?;
    wait(cluster, "VolumeSnapshot snap2 readyToUse after the restart", 120, || snapshot_ready(&snaps, "snap2")).await?;
    println!(
        "snap2 (made while the snapshot-controller was down) ready {:.1} s after its restart",
        t.elapsed().as_secs_f64()
    );

    // 5. The fault switch: CreateSnapshot fails with its message, which reaches the
    //    VolumeSnapshot's status; once it is off, the snapshotter's retry succeeds.
    let t = Instant::now();
    cluster.csi().context("CSI stack")?.fail_create_snapshot(Some("injected: disk on fire"))?;
    snaps.create(&pp, &snapshot(&ns, "snap3", "data")?).await?;
    let err = wait(cluster, "VolumeSnapshot snap3 reports the injected error", 120, || async {
        let s = snaps.get("snap3").await?;
        ensure!(s.data["status"]["readyToUse"] != json!(true), "snap3 ready despite the fault switch");
        Ok(s.data["status"]["error"]["message"].as_str().filter(|m| m.contains("disk on fire")).map(str::to_string))
    })
    .await?;
    println!("snap3 failed as injected after {:.1} s: {err}", t.elapsed().as_secs_f64());
    let t = Instant::now();
    cluster.csi().context("CSI stack")?.fail_create_snapshot(None)?;
    wait(cluster, "VolumeSnapshot snap3 readyToUse once the switch is off", 120, || snapshot_ready(&snaps, "snap3"))
        .await?;
    println!("snap3 ready {:.1} s after the switch went off", t.elapsed().as_secs_f64());

    // 6. Everything deleted: no PV, content, volume, snapshot or mount of the driver is left.
    let t = Instant::now();
    let dp = DeleteParams::default();
    for p in ["writer", "reader"] {
        pods.delete(p, &dp).await?;
    }
    for s in ["snap1", "snap2", "snap3"] {
        snaps.delete(s, &dp).await?;
    }
    for c in ["data", "from-snap", "clone"] {
        pvcs.delete(c, &dp).await?;
    }
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let contents = csi::volume_snapshot_contents(&client);
    wait(cluster, "every PV, content, volume and snapshot of the driver gone", 180, || async {
        let pv_left = pvs
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.csi.as_ref()).is_some_and(|c| c.driver == DRIVER))
            .count();
        let contents_left = contents.list(&ListParams::default()).await?.items.len();
        let (v, s) = cluster.csi().context("CSI stack")?.leftovers();
        let mounts = csi_mounts(cluster);
        Ok((pv_left == 0 && contents_left == 0 && v.is_empty() && s.is_empty() && mounts.is_empty()).then_some(()))
    })
    .await?;
    println!(
        "everything deleted after {:.1} s: 0 PVs, 0 contents, 0 volumes, 0 snapshots, 0 CSI mounts",
        t.elapsed().as_secs_f64()
    );
    // Through the driver: the kubelet published and unpublished every pod volume, the
    // sidecars deleted every volume and snapshot.
    let log = std::fs::read_to_string(cluster.env().cp.logs_dir().join("csi-driver.log"))?;
    let ok = |call: &str| log.lines().filter(|l| l.contains(&format!(" {call}(")) && l.contains(") ok in ")).count();
    let calls: Vec<(&str, usize)> = [
        "CreateVolume",
        "DeleteVolume",
        "CreateSnapshot",
        "DeleteSnapshot",
        "NodePublishVolume",
        "NodeUnpublishVolume",
    ]
    .iter()
    .map(|c| (*c, ok(c)))
    .collect();
    println!("driver calls that succeeded: {calls:?}");
    let n = |c: &str| calls.iter().find(|(k, _)| *k == c).map_or(0, |(_, v)| *v);
    ensure!(n("CreateVolume") >= 3 && n("DeleteVolume") >= 3, "3 volumes made and deleted by the driver: {calls:?}");
    ensure!(n("CreateSnapshot") >= 3 && n("DeleteSnapshot") >= 3, "3 snapshots made and deleted: {calls:?}");
    ensure!(
        n("NodePublishVolume") >= 3 && n("NodeUnpublishVolume") >= 3,
        "3 pod volumes mounted and unmounted: {calls:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csi_volumes_snapshots_restores_and_clones_on_a_real_kubelet() -> Result<()> {
    let t0 = Instant::now();
    let images: Vec<PathBuf> =
        ["kopiur-testenv-pause", "kopiur-testenv-busybox"].iter().filter_map(|n| archive(n)).collect();
    ensure!(
        images.len() == 2,
        "the node images are missing: run `cargo xtask images --node-images --registry localhost --tag testenv`"
    );
    let mut cluster = RealCluster::start(&images).await?;
    println!("node Ready after {:.1} s", t0.elapsed().as_secs_f64());
    let res = async {
        cluster.start_csi().await?;
        let stack = cluster.csi().context("CSI stack")?;
        println!("CSI stack up in {:.1} s (state {})", stack.startup.as_secs_f64(), stack.state_dir.display());
        scenario(&mut cluster).await
    }
    .await;
    if res.is_err() {
        cluster.keep_logs("real_node_csi");
    }
    let node_dir = cluster.layout.dir.clone();
    let t = Instant::now();
    let report = cluster.shutdown();
    println!("teardown in {:.1} s: {}", t.elapsed().as_secs_f64(), report.join("; "));
    res?;
    let left = host::mounts_under(&node_dir);
    ensure!(left.is_empty(), "mounts left behind (/proc/self/mountinfo): {left:?}");
    println!("no mount left under {}; test wall time {:.1} s", node_dir.display(), t0.elapsed().as_secs_f64());
    Ok(())
}
