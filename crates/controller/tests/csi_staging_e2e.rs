//! `copyMethod: Snapshot` and `Clone` on the real node with a real CSI stack (issue 18):
//! kubelet + containerd, the external-snapshotter's snapshot-controller and csi-snapshotter,
//! csi-provisioner, and the test environment's own CSI driver (`kopiur_testenv::realnode::csi`).
//! The controller runs as a process; its movers run from the mover image on the node.
//!
//! 1. A Deployment (uid 1000) rewrites `/data/counter` (atomically, by rename) ten times a
//!    second on an RWO CSI volume. A `copyMethod: Snapshot` backup succeeds while it runs: its
//!    mover mounted the staged PVC `kopiur-stage-<uid>` read-only, never the live volume, and
//!    the restored counter is a whole number older than the live one when the Job was created
//!    (the copy was cut before the Job existed: a `Direct` run would read a newer value).
//! 2. `Clone` likewise (the mover mounts the clone; the restored counter is whole).
//! 3. The snapshot-controller stopped for 30 s mid-staging: the run waits Pending, with no Job,
//!    and succeeds once it is back.
//! 4. A staging timeout (CreateSnapshot failing, `staging.timeout: 20s`): Failed
//!    `StagingFailed` with the driver's message. Its VolumeSnapshot's content is still being
//!    created (the driver keeps failing), so the run says `Staging=True / Releasing`; once the
//!    driver answers again, the VolumeSnapshot and its content are gone within the release bound
//!    (issue 30: no restart of any CSI component). A permanent driver error (gRPC
//!    `InvalidArgument`) fails at once, inside the timeout. A VolumeSnapshotClass that does not
//!    exist fails the run at once with the reason.
//! 5. The controller killed mid-staging: after it returns, the run succeeds and nothing leaks.
//! 6. A run that ends by its deadline (`activeDeadlineSeconds: 2`, the backend slowed to 5 s a
//!    request so the mover cannot finish first) releases its staging.
//! 7. A release kept past the bound (the snapshot-controller stopped as the run ends): the run
//!    says `Staging=True / ReleaseStuck` only after the bound, with a Warning Event,
//!    `kopiur_staging_left` 1 and `kopiur_staging_total{outcome="leaked"}` 1, and the shipped
//!    `KopiurStagedObjectsLeft` fires on the scraped series (promtool); the snapshot-controller
//!    back, it is released and the gauge is gone. (Steps 6 and 7 run before step 5.)
//!
//! After all of it: no staged PVC, no VolumeSnapshot or VolumeSnapshotContent, no PV but the
//! source's and the restore targets', and the driver holds only the source volume.
mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kopiur_api::{Restore, Snapshot};
use kopiur_testenv::operator::Operator;
use kopiur_testenv::realnode::RealCluster;
use kopiur_testenv::realnode::csi::{STORAGE_CLASS, volume_snapshot_contents, volume_snapshots};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use support::status::StatusExt;
use support::wait_for;

const OP_NS: &str = "kopiur-system";
use support::realnode::MOVER_IMAGE;
const BUSYBOX: &str = "localhost/kopiur-testenv-busybox:testenv";
/// The controller's staging release bound here (`KOPIUR_STAGING_RELEASE_BOUND_SECONDS`).
const BOUND_SECS: u64 = 60;
const BOUND_ENV: (&str, &str) = ("KOPIUR_STAGING_RELEASE_BOUND_SECONDS", "60");

/// Runs the shipped `KopiurStagedObjectsLeft` over `series` (a line scraped from the controller,
/// held at its value for 15 minutes) with promtool and checks it is firing with `labels`.
fn staged_objects_left_alert_fires(series: &str, value: f64, labels: &str) -> Result<()> {
    let rules = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/prometheus/kopiur-rules.yaml");
    let dir = tempfile::tempdir()?;
    let test = dir.path().join("left.yaml");
    std::fs::write(
        &test,
        format!(
            "rule_files:\n- {rules}\nevaluation_interval: 1m\ntests:\n- interval: 1m\n  input_series:\n  - series: '{series}'\n    values: '{value}x15'\n  promql_expr_test:\n  - expr: ALERTS{{alertname=\"KopiurStagedObjectsLeft\",alertstate=\"firing\"}}\n    eval_time: 10m\n    exp_samples:\n    - labels: 'ALERTS{{alertname=\"KopiurStagedObjectsLeft\",alertstate=\"firing\",{labels},severity=\"warning\"}}'\n      value: 1\n",
            rules = rules.canonicalize()?.display()
        ),
    )?;
    let out = std::process::Command::new("promtool")
        .args(["test", "rules"])
        .arg(&test)
        .output()
        .context("promtool (Debian package prometheus; `cargo xtask test` installs it)")?;
    ensure!(
        out.status.success(),
        "KopiurStagedObjectsLeft does not fire on {series} {value}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

async fn apply(client: &Client, ns: &str, v: Value) -> Result<()> {
    kopiur_testenv::apply::apply_value(client, ns, &v).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_and_clone_staging_on_a_real_csi_driver() -> Result<()> {
    support::realnode::with_csi_cluster("csi_staging_e2e", scenario).await
}

/// The source volume's directory in the driver (through its PV's volume handle).
async fn volume_dir(cluster: &RealCluster, client: &Client, ns: &str, pvc: &str, log: &Path) -> Result<PathBuf> {
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let pv = wait_for(&format!("PVC {pvc} Bound"), Duration::from_secs(120), log, || async {
        let p = pvcs.get(pvc).await?;
        Ok(p.spec.and_then(|s| s.volume_name).filter(|v| !v.is_empty()))
    })
    .await?;
    let pv = Api::<PersistentVolume>::all(client.clone()).get(&pv).await?;
    let handle = pv.spec.and_then(|s| s.csi).map(|c| c.volume_handle).context("a CSI PV")?;
    Ok(cluster.csi().context("CSI stack")?.volume_dir(&handle))
}

fn counter(dir: &Path) -> Result<u64> {
    let text = std::fs::read_to_string(dir.join("counter")).with_context(|| format!("{}/counter", dir.display()))?;
    text.trim().parse::<u64>().with_context(|| format!("a torn counter file: {text:?}"))
}

/// Restores `snap` into a new PVC `target` (the default class) and returns its directory.
async fn restore(client: &Client, ns: &str, target: &str, snap: &str, node_dir: &Path, log: &Path) -> Result<PathBuf> {
    apply(
        client,
        ns,
        json!({"apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Restore",
               "metadata": {"name": target, "namespace": ns},
               "spec": {"source": {"snapshotRef": {"name": snap}}, "target": {"pvc": {"name": target, "capacity": "1Gi"}}}}),
    )
    .await?;
    let restores: Api<Restore> = Api::namespaced(client.clone(), ns);
    wait_for(&format!("Restore {target} Completed"), Duration::from_secs(300), log, || async {
        let r = restores.get(target).await?;
        let p = r.status.as_ref().and_then(|s| s.phase.as_ref()).map(|p| p.as_str().to_string()).unwrap_or_default();
        if p == "Failed" {
            bail!("restore {target} failed: {:?}", r.status.as_ref().and_then(|s| s.failure.clone()));
        }
        Ok((p == "Completed").then_some(()))
    })
    .await?;
    let pvc = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns).get(target).await?;
    Ok(kopiur_testenv::node::provisioner::pv_dir(node_dir, &pvc.uid().context("pvc uid")?))
}

async fn policy(client: &Client, ns: &str, name: &str, extra: Value) -> Result<()> {
    let mut spec = json!({"repository": {"name": "r"}, "sources": [{"pvc": {"name": "data"}}]});
    for (k, v) in extra.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    apply(
        client,
        ns,
        json!({"apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotPolicy",
               "metadata": {"name": name, "namespace": ns}, "spec": spec}),
    )
    .await
}

async fn snapshot(client: &Client, ns: &str, name: &str, policy: &str) -> Result<()> {
    apply(
        client,
        ns,
        json!({"apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
               "metadata": {"name": name, "namespace": ns}, "spec": {"policyRef": {"name": policy}}}),
    )
    .await
}

async fn finished(snaps: &Api<Snapshot>, name: &str, log: &Path) -> Result<Snapshot> {
    wait_for(&format!("Snapshot {name} over and released"), Duration::from_secs(300), log, || async {
        let s = snaps.get(name).await?;
        let released = s.condition("Staging").cloned().is_some_and(|c| c.status == "False");
        Ok((matches!(s.phase().as_str(), "Succeeded" | "Failed") && released).then_some(s))
    })
    .await
}

/// Waits until Snapshot `name` is Succeeded or Failed (its staging may still be releasing).
async fn over(snaps: &Api<Snapshot>, name: &str, log: &Path) -> Result<Snapshot> {
    wait_for(&format!("Snapshot {name} over"), Duration::from_secs(300), log, || async {
        let s = snaps.get(name).await?;
        Ok(matches!(s.phase().as_str(), "Succeeded" | "Failed").then_some(s))
    })
    .await
}

fn succeeded(s: &Snapshot) -> Result<()> {
    ensure!(
        s.phase() == "Succeeded",
        "Snapshot {} is {}: {:?}",
        s.name_any(),
        s.phase(),
        s.status.as_ref().and_then(|st| st.failure.clone())
    );
    Ok(())
}

/// The claim the backup Job's pod mounts at the source, and whether read-only.
async fn mover_source(client: &Client, ns: &str, snap: &str) -> Result<(String, bool)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let job = kopiur_mover::job::job_name(snap);
    let list = pods.list(&ListParams::default().labels(&format!("job-name={job}"))).await?;
    let pod = list.items.first().with_context(|| format!("no pod of Job {job}"))?;
    let vols = pod.spec.as_ref().and_then(|s| s.volumes.clone()).unwrap_or_default();
    vols.iter()
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .find(|c| c.claim_name == "data" || c.claim_name.starts_with("kopiur-stage-"))
        .map(|c| (c.claim_name.clone(), c.read_only == Some(true)))
        .with_context(|| format!("Job {job}'s pod mounts no source claim: {vols:?}"))
}

async fn staged_left(client: &Client, ns: &str) -> Result<(Vec<String>, Vec<String>, Vec<String>)> {
    let pvcs: Vec<String> = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|p| p.name_any())
        .filter(|n| n.starts_with("kopiur-stage-"))
        .collect();
    let names = |l: kube::core::ObjectList<kube::api::DynamicObject>| l.items.iter().map(|o| o.name_any()).collect();
    let vs: Vec<String> = names(volume_snapshots(client, ns).list(&ListParams::default()).await?);
    let vsc: Vec<String> = names(volume_snapshot_contents(client).list(&ListParams::default()).await?);
    Ok((pvcs, vs, vsc))
}

/// Waits until no staged PVC, VolumeSnapshot or VolumeSnapshotContent is left.
async fn all_gone(client: &Client, ns: &str, log: &Path) -> Result<(Vec<String>, Vec<String>, Vec<String>)> {
    let gone = wait_for("staged objects gone", Duration::from_secs(120), log, || async {
        let left = staged_left(client, ns).await?;
        Ok((left.0.is_empty() && left.1.is_empty() && left.2.is_empty()).then_some(left))
    })
    .await;
    match gone {
        Ok(l) => Ok(l),
        Err(e) => {
            bail!("{e:#}: left (PVCs, VolumeSnapshots, VolumeSnapshotContents) {:?}", staged_left(client, ns).await?)
        }
    }
}

async fn scenario(cluster: &mut RealCluster, t0: Instant) -> Result<()> {
    let client = cluster.env().client().await?;
    let node_dir = cluster.layout.dir.clone();
    let stack = support::realnode::NodeStack::start_with_env(cluster, OP_NS, "csi", &[BOUND_ENV]).await?;
    let (mut op, ns, log) = (stack.op, stack.ns, stack.log);

    // The live workload: an RWO CSI volume rewritten ten times a second.
    apply(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": ns},
               "spec": {"storageClassName": STORAGE_CLASS, "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "64Mi"}}}}),
    )
    .await?;
    let script = "echo 'written by the app' > /data/seed.txt; i=0; \
                  while true; do i=$((i+1)); echo $i > /data/counter.tmp; mv /data/counter.tmp /data/counter; sleep 0.1; done";
    apply(
        &client,
        &ns,
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "writer", "namespace": ns},
               "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "writer"}},
                        "template": {"metadata": {"labels": {"app": "writer"}},
                                     "spec": {"securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000},
                                              "containers": [{"name": "w", "image": BUSYBOX, "imagePullPolicy": "IfNotPresent",
                                                              "command": ["/bin/sh", "-c", script],
                                                              "volumeMounts": [{"name": "d", "mountPath": "/data"}]}],
                                              "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}}}}),
    )
    .await?;
    let live = volume_dir(cluster, &client, &ns, "data", &log).await?;
    wait_for("the writer to count", Duration::from_secs(120), &log, || async {
        Ok(counter(&live).ok().filter(|c| *c > 5).map(|_| ()))
    })
    .await?;
    println!("writer running on the CSI volume after {:.1} s", t0.elapsed().as_secs_f64());
    let snaps: Api<Snapshot> = Api::namespaced(client.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);

    // 1 and 2. Snapshot and Clone backups of the live volume.
    policy(&client, &ns, "p-snapshot", json!({"copyMethod": "Snapshot"})).await?;
    policy(&client, &ns, "p-clone", json!({"copyMethod": "Clone"})).await?;
    for (method, name) in [("Snapshot", "s-snapshot"), ("Clone", "s-clone")] {
        let started = Instant::now();
        snapshot(&client, &ns, name, &format!("p-{}", method.to_lowercase())).await?;
        let job = kopiur_mover::job::job_name(name);
        // The live counter once the backup Job exists.
        let at_job = wait_for(&format!("Job {job}"), Duration::from_secs(180), &log, || async {
            Ok(match jobs.get_opt(&job).await? {
                Some(_) => Some(counter(&live)?),
                None => None,
            })
        })
        .await?;
        // The mover's pod, while it exists (a staged run's Job goes with it once the run ends).
        let (claim, ro) = wait_for(&format!("Job {job}'s pod"), Duration::from_secs(120), &log, || async {
            Ok(mover_source(&client, &ns, name).await.ok())
        })
        .await?;
        let s = over(&snaps, name, &log).await?;
        succeeded(&s)?;
        let uid = s.uid().unwrap_or_default();
        ensure!(
            claim == format!("kopiur-stage-{uid}") && ro,
            "{method}: the mover mounted {claim} (read-only {ro}), not the staged copy"
        );
        let restored = restore(&client, &ns, &format!("r-{}", method.to_lowercase()), name, &node_dir, &log).await?;
        let got = counter(&restored)?;
        ensure!(
            std::fs::read_to_string(restored.join("seed.txt"))? == "written by the app\n",
            "{method}: seed.txt differs"
        );
        if method == "Snapshot" {
            ensure!(
                got < at_job,
                "the snapshot's counter {got} is not older than the live {at_job} at the Job's creation"
            );
        }
        let s = finished(&snaps, name, &log).await?;
        succeeded(&s)?;
        println!(
            "{method}: backup of the live volume Succeeded in {:.1} s; restored counter {got} (live at the Job's creation: {at_job}), whole",
            started.elapsed().as_secs_f64()
        );
    }

    // 3. The snapshot-controller stopped for 30 s mid-staging.
    cluster.stop_csi_component("snapshot-controller")?;
    snapshot(&client, &ns, "s-paused", "p-snapshot").await?;
    let stopped = Instant::now();
    wait_for("s-paused waiting on its VolumeSnapshot", Duration::from_secs(60), &log, || async {
        let s = snaps.get("s-paused").await?;
        Ok(s.condition("Ready")
            .cloned()
            .is_some_and(|c| c.reason == "Staging" && c.message.contains("waiting for VolumeSnapshot"))
            .then_some(()))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(30).saturating_sub(stopped.elapsed())).await;
    let s = snaps.get("s-paused").await?;
    ensure!(s.phase() == "Pending", "s-paused is {} with the snapshot-controller down", s.phase());
    ensure!(
        jobs.get_opt(&kopiur_mover::job::job_name("s-paused")).await?.is_none(),
        "a Job launched before its copy was staged"
    );
    cluster.start_csi_component("snapshot-controller").await?;
    let s = finished(&snaps, "s-paused", &log).await?;
    succeeded(&s)?;
    println!(
        "snapshot-controller down for {:.0} s: the run waited Pending, then Succeeded {:.1} s after it returned",
        30.0,
        stopped.elapsed().as_secs_f64() - 30.0
    );

    // 4. A staging timeout: CreateSnapshot fails until the 20 s timeout.
    let csi = cluster.csi().context("CSI stack")?;
    csi.fail_create_snapshot(Some("injected: the storage array is busy"))?;
    policy(&client, &ns, "p-timeout", json!({"copyMethod": "Snapshot", "staging": {"timeout": "20s"}})).await?;
    snapshot(&client, &ns, "s-timeout", "p-timeout").await?;
    let s = over(&snaps, "s-timeout", &log).await?;
    let ready = s.condition("Ready").cloned().context("Ready")?;
    ensure!(
        s.phase() == "Failed"
            && ready.reason == "StagingFailed"
            && ready.message.contains("staging timed out after 20s")
            && ready.message.contains("injected: the storage array is busy"),
        "s-timeout: {} {} {}",
        s.phase(),
        ready.reason,
        ready.message
    );
    ensure!(jobs.get_opt(&kopiur_mover::job::job_name("s-timeout")).await?.is_none(), "a timed-out staging launched");
    // The driver still fails, so its VolumeSnapshot's content is still being created: the run
    // is over and not released (kopiur says so, and says why).
    let staging = s.condition("Staging").cloned().context("Staging")?;
    ensure!(
        staging.status == "True" && staging.reason == "Releasing",
        "s-timeout released while its content was still being created: {} {} {}",
        staging.status,
        staging.reason,
        staging.message
    );
    println!(
        "staging timeout: Failed StagingFailed ({}); Staging {}: {}",
        ready.message, staging.reason, staging.message
    );
    // issue 30: once the driver answers again, its VolumeSnapshot and content are gone within
    // kopiur's bound, with no restart of any CSI component.
    csi.fail_create_snapshot(None)?;
    let answered = Instant::now();
    let s = finished(&snaps, "s-timeout", &log).await?;
    let took = answered.elapsed();
    let uid = s.uid().unwrap_or_default();
    let (_, vs, vsc) = staged_left(&client, &ns).await?;
    let vs_left: Vec<&String> = vs.iter().filter(|v| v.contains(&uid)).collect();
    ensure!(vs_left.is_empty() && vsc.is_empty(), "s-timeout Released with {vs_left:?} and contents {vsc:?} left");
    ensure!(
        took < Duration::from_secs(BOUND_SECS),
        "s-timeout's VolumeSnapshot took {took:?} to go after the driver answered (bound {BOUND_SECS} s)"
    );
    let released = s.condition("Staging").cloned().context("Staging")?;
    println!(
        "a VolumeSnapshot whose content was still being created when its run failed: gone {:.1} s after the driver answered again (bound {BOUND_SECS} s): {}",
        took.as_secs_f64(),
        released.message
    );
    // A permanent driver error (gRPC InvalidArgument) fails the run at once, well inside the
    // 20 s timeout, with the driver's message.
    csi.fail_create_snapshot(Some("InvalidArgument: injected: the snapshot parameters are invalid"))?;
    let asked = Instant::now();
    snapshot(&client, &ns, "s-permanent", "p-timeout").await?;
    let s = finished(&snaps, "s-permanent", &log).await?;
    csi.fail_create_snapshot(None)?;
    let took = asked.elapsed();
    let ready = s.condition("Ready").cloned().context("Ready")?;
    ensure!(
        s.phase() == "Failed"
            && ready.reason == "StagingFailed"
            && ready.message.contains("retrying cannot fix")
            && ready.message.contains("injected: the snapshot parameters are invalid"),
        "s-permanent: {} {} {}",
        s.phase(),
        ready.reason,
        ready.message
    );
    ensure!(!ready.message.contains("timed out"), "a permanent error waited for the timeout: {}", ready.message);
    println!(
        "a permanent snapshot error: Failed in {:.1} s (timeout 20 s), staged objects deleted: {}",
        took.as_secs_f64(),
        ready.message
    );
    // A class that cannot work fails at once with the reason, not at the staging timeout.
    policy(&client, &ns, "p-class", json!({"copyMethod": "Snapshot", "volumeSnapshotClassName": "missing"})).await?;
    let asked = Instant::now();
    snapshot(&client, &ns, "s-class", "p-class").await?;
    let s = finished(&snaps, "s-class", &log).await?;
    let ready = s.condition("Ready").cloned().context("Ready")?;
    ensure!(
        s.phase() == "Failed"
            && ready.reason == "StagingFailed"
            && ready.message == "VolumeSnapshotClass missing (spec.volumeSnapshotClassName) does not exist",
        "s-class: {} {} {}",
        s.phase(),
        ready.reason,
        ready.message
    );
    println!("a missing VolumeSnapshotClass: Failed in {:.1} s: {}", asked.elapsed().as_secs_f64(), ready.message);

    // 6. A run that ends by its deadline releases its staging like any other end. The backend
    // answers each request only after 5 s (slow is not down: the breaker stays closed), so the
    // 2 s deadline ends the run before its mover can finish; without it a quiet machine backs
    // the small volume up inside 2 s and the run Succeeds.
    stack.proxy.set(kopiur_testenv::proxy::Mode::Latency(Duration::from_secs(5)));
    apply(
        &client,
        &ns,
        json!({"apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
               "metadata": {"name": "s-deadline", "namespace": ns},
               "spec": {"policyRef": {"name": "p-snapshot"}, "failurePolicy": {"activeDeadlineSeconds": 2}}}),
    )
    .await?;
    let s = over(&snaps, "s-deadline", &log).await;
    stack.proxy.set(kopiur_testenv::proxy::Mode::Pass);
    let s = s?;
    let ready = s.condition("Ready").cloned().context("Ready")?;
    ensure!(s.phase() == "Failed", "s-deadline is {}: {} {}", s.phase(), ready.reason, ready.message);
    finished(&snaps, "s-deadline", &log).await?;
    println!("a 2 s deadline: Failed {} ({}), staged objects released", ready.reason, ready.message);

    // 7. A release kept past the bound: the snapshot-controller stopped as the run ends, so its
    // VolumeSnapshot cannot go.
    snapshot(&client, &ns, "s-leak", "p-snapshot").await?;
    let job = kopiur_mover::job::job_name("s-leak");
    wait_for(&format!("Job {job}"), Duration::from_secs(180), &log, || async {
        Ok(jobs.get_opt(&job).await?.map(|_| ()))
    })
    .await?;
    cluster.stop_csi_component("snapshot-controller")?;
    let s = over(&snaps, "s-leak", &log).await?;
    succeeded(&s)?;
    let ended = Instant::now();
    let uid = s.uid().unwrap_or_default();
    let stuck = wait_for("s-leak ReleaseStuck", Duration::from_secs(BOUND_SECS + 90), &log, || async {
        let s = snaps.get("s-leak").await?;
        Ok(s.condition("Staging").cloned().filter(|c| c.status == "True" && c.reason == "ReleaseStuck"))
    })
    .await?;
    let after = ended.elapsed();
    // `over` is seen up to a poll after the run ended, and the bound counts from its first release
    // pass: a few seconds of slack, never a stuck report well inside the bound.
    ensure!(
        after + Duration::from_secs(10) >= Duration::from_secs(BOUND_SECS),
        "ReleaseStuck after {after:?}, inside the bound"
    );
    ensure!(
        stuck.message.contains(&format!("VolumeSnapshot kopiur-stage-{uid}"))
            && stuck.message.contains(&format!("kubectl -n {ns} describe volumesnapshot kopiur-stage-{uid}")),
        "the stuck message does not name what is left and the command: {}",
        stuck.message
    );
    let series = format!("kopiur_staging_left{{namespace=\"{ns}\",name=\"s-leak\"}}");
    let left = wait_for("kopiur_staging_left for s-leak", Duration::from_secs(30), &log, || async {
        Ok(op.metric(&series).await)
    })
    .await?;
    ensure!(left == 1.0, "{series} = {left}");
    let leaked_series = format!("kopiur_staging_total{{namespace=\"{ns}\",method=\"Snapshot\",outcome=\"leaked\"}}");
    ensure!(op.metric(&leaked_series).await == Some(1.0), "{leaked_series} is {:?}", op.metric(&leaked_series).await);
    let events: Vec<k8s_openapi::api::core::v1::Event> =
        Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), &ns)
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| {
                e.reason.as_deref() == Some("StagedObjectsLeft") && e.involved_object.name.as_deref() == Some("s-leak")
            })
            .collect();
    ensure!(
        events.len() == 1 && events[0].type_.as_deref() == Some("Warning"),
        "expected one Warning StagedObjectsLeft for s-leak, got {events:?}"
    );
    staged_objects_left_alert_fires(&series, left, &format!("namespace=\"{ns}\",name=\"s-leak\""))?;
    println!(
        "a release kept past the bound: ReleaseStuck {:.1} s after the run ended (bound {BOUND_SECS} s), {series} {left}, leaked 1, one Warning, KopiurStagedObjectsLeft fires on the scraped series: {}",
        after.as_secs_f64(),
        stuck.message
    );
    cluster.start_csi_component("snapshot-controller").await?;
    let back = Instant::now();
    finished(&snaps, "s-leak", &log).await?;
    wait_for("kopiur_staging_left gone", Duration::from_secs(30), &log, || async {
        Ok(op.metric(&series).await.is_none().then_some(()))
    })
    .await?;
    println!(
        "snapshot-controller back: s-leak Released {:.1} s later, kopiur_staging_left gone",
        back.elapsed().as_secs_f64()
    );

    // Every staging so far is accounted for: 5 staged, 3 failed, all 8 released, 1 leaked (and
    // then released: nothing is left).
    let ns_label = format!("kopiur_staging_total{{namespace=\"{ns}\",method=");
    let mut counts = [0.0; 4];
    for (i, outcome) in ["staged", "failed", "released", "leaked"].iter().enumerate() {
        for method in ["Snapshot", "Clone"] {
            let series = format!("{ns_label}\"{method}\",outcome=\"{outcome}\"}}");
            counts[i] += op.metric(&series).await.unwrap_or(0.0);
        }
    }
    ensure!(counts == [5.0, 3.0, 8.0, 1.0], "kopiur_staging_total staged/failed/released/leaked = {counts:?}");
    let left_now = op.metric("kopiur_staging_left").await;
    ensure!(left_now.is_none(), "kopiur_staging_left still has series: {left_now:?}");
    let waited = op.metric("kopiur_staging_wait_seconds_total").await.unwrap_or(0.0);
    println!(
        "kopiur_staging_total staged 5, failed 3, released 8, leaked 1 (kopiur_staging_left: no series); kopiur_staging_wait_seconds_total {waited}"
    );

    // 5. The controller killed mid-staging, then back: the run completes, nothing leaks.
    cluster.stop_csi_component("snapshot-controller")?;
    snapshot(&client, &ns, "s-killed", "p-snapshot").await?;
    wait_for("s-killed staging", Duration::from_secs(60), &log, || async {
        Ok(volume_snapshots(&client, &ns)
            .get_opt(&format!("kopiur-stage-{}", snaps.get("s-killed").await?.uid().unwrap_or_default()))
            .await?
            .map(|_| ()))
    })
    .await?;
    op.proc_.signal(9);
    op.stop();
    cluster.start_csi_component("snapshot-controller").await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let op2 = Operator::start(cluster.env(), OP_NS, &[("KOPIUR_MOVER_IMAGE", MOVER_IMAGE), BOUND_ENV]).await?;
    let s = finished(&snaps, "s-killed", &log).await?;
    succeeded(&s)?;
    println!("controller killed mid-staging: Succeeded after it returned");

    // Nothing staged is left: objects, PVs, and the driver's volumes and snapshots.
    let (pvcs, vs, vsc) = all_gone(&client, &ns, &log).await?;
    // Every staged run's mover Job went with its run (its pod held the staged PVC).
    let jobs_left: Vec<String> =
        jobs.list(&ListParams::default()).await?.items.into_iter().map(|j| j.name_any()).collect();
    ensure!(
        !jobs_left.iter().any(|j| j.starts_with("s-") && !j.contains("discovery")),
        "mover Jobs of staged runs left: {jobs_left:?}"
    );
    let pvs = wait_for("staged PVs gone", Duration::from_secs(120), &log, || async {
        let pvs: Vec<String> = Api::<PersistentVolume>::all(client.clone())
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|pv| pv.spec.as_ref().and_then(|s| s.csi.as_ref()).is_some())
            .map(|pv| pv.name_any())
            .collect();
        Ok((pvs.len() == 1).then_some(pvs))
    })
    .await?;
    let (volumes, snapshots) = cluster.csi().context("CSI stack")?.leftovers();
    let data_dirs: Vec<&String> = volumes.iter().filter(|v| !v.ends_with(".json")).collect();
    ensure!(data_dirs.len() == 1 && snapshots.is_empty(), "the driver holds {volumes:?} and {snapshots:?}");
    println!(
        "leftovers: {} staged PVCs, {} VolumeSnapshots, {} VolumeSnapshotContents, CSI PVs {pvs:?} (the source), driver volumes {data_dirs:?}, snapshots 0",
        pvcs.len(),
        vs.len(),
        vsc.len()
    );
    drop(op2);
    Ok(())
}
