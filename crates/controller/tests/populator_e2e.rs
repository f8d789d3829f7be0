//! Restore as a volume populator (issue 18, `target: populator: {}`) on the real node with the
//! real CSI stack (`kopiur_testenv::realnode::csi`): kubelet + containerd, kube-scheduler,
//! csi-provisioner, the PV binder, and the controller as a process (its movers run from the
//! mover image on the node). The claims use the WaitForFirstConsumer CSI class.
//!
//! Every round creates a PVC whose `dataSourceRef` names a Restore, and a reader pod that
//! mounts it and checks the data (a 1 MiB file against its checksum, written by a seed pod and
//! backed up with `copyMethod: Direct`). The reader can only start once the PVC is bound, so
//! its success proves the data was there before the workload saw the volume.
//!
//! 1. The claim before its Restore: the PVC carries a `RestoreNotFound` Event, then is
//!    populated once the Restore exists; no `VolumePopulator` CRD is installed.
//! 2. The Restore deleted and re-created while the PVC is bound: it completes with
//!    `TargetAlreadyBound`, runs no Job, and the PVC keeps its volume (one restore per PVC).
//! 3. The Restore deleted mid-populate: its prime PVC and volume go (the PVC stays Pending);
//!    a re-created Restore then populates it.
//! 4. The controller killed mid-populate (with the `VolumePopulator` CRD now installed): after
//!    it returns the populate completes, and it registered `VolumePopulator kopiur-restore`.
//! 5. The PVC deleted mid-populate: the Restore fails `PopulateTargetGone`, the prime goes.
//! 6. Deploy-or-restore with no backup yet (`fromPolicy`, `onMissingSnapshot: Continue`): an
//!    empty volume, bound without a Job.
//! 7. The PVC and its Restore (and the reader) deleted and re-created 10 times.
//!
//! The reader checks bytes (a checksum) and owners (1234:5678, kept by the privileged restore
//! mover). `kopiur_restore_populates_total` shows one populate per PVC instance.
//!
//! After every round, and at the end: no prime PVC, every CSI PersistentVolume bound to a live
//! PVC, and the driver holds exactly those volumes (orphans counted: 0).
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim, Pod};
use kopiur_api::{Restore, Snapshot};
use kopiur_testenv::operator::Operator;
use kopiur_testenv::realnode::RealCluster;
use kopiur_testenv::realnode::csi::STORAGE_CLASS;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use support::status::StatusExt;
use support::wait_for;

const OP_NS: &str = "kopiur-system";
use support::realnode::MOVER_IMAGE;
const BUSYBOX: &str = "localhost/kopiur-testenv-busybox:testenv";
const API: &str = "kopiur.home-operations.com/v1alpha1";
/// How many times round 7 deletes and re-creates the PVC and its Restore.
const RECREATIONS: usize = 10;

/// `kopiur_restore_populates_total{namespace,outcome}` of one controller process.
async fn populated(op: &Operator, ns: &str, outcome: &str) -> f64 {
    op.metric(&format!("kopiur_restore_populates_total{{namespace=\"{ns}\",outcome=\"{outcome}\"}}"))
        .await
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_populates_pvcs_through_a_prime_and_leaves_nothing_behind() -> Result<()> {
    support::realnode::with_csi_cluster("populator_e2e", scenario).await
}

async fn apply(client: &Client, ns: &str, v: Value) -> Result<()> {
    kopiur_testenv::apply::apply_value(client, ns, &v).await
}

/// A PVC on the CSI class whose `dataSourceRef` names Restore `restore`.
async fn claim(client: &Client, ns: &str, name: &str, restore: &str) -> Result<()> {
    apply(
        client,
        ns,
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": ns},
               "spec": {"storageClassName": STORAGE_CLASS, "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "64Mi"}},
                        "dataSourceRef": {"apiGroup": "kopiur.home-operations.com", "kind": "Restore", "name": restore}}}),
    )
    .await
}

/// A populator Restore of `source` (a Restore source union).
async fn populator(client: &Client, ns: &str, name: &str, source: Value) -> Result<()> {
    apply(
        client,
        ns,
        json!({"apiVersion": API, "kind": "Restore", "metadata": {"name": name, "namespace": ns},
               "spec": {"source": source, "target": {"populator": {}}, "mover": {"privilegedMode": true}}}),
    )
    .await
}

/// A pod that mounts `claim` and runs `script` once.
async fn pod(client: &Client, ns: &str, name: &str, claim: &str, script: &str) -> Result<()> {
    apply(
        client,
        ns,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
               "spec": {"restartPolicy": "Never",
                        "containers": [{"name": "c", "image": BUSYBOX, "imagePullPolicy": "IfNotPresent",
                                        "command": ["/bin/sh", "-c", script],
                                        "volumeMounts": [{"name": "d", "mountPath": "/data"}]}],
                        "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": claim}}]}}),
    )
    .await
}

/// The reader: the backed-up bytes are whole and the recorded owners are kept.
const READ: &str = "cd /data && sha256sum -c blob.sum && grep -q 'hello from the source' hello.txt \
                    && [ \"$(stat -c %u:%g blob)\" = 1234:5678 ] && [ \"$(stat -c %u:%g hello.txt)\" = 1234:5678 ]";

async fn pod_succeeded(client: &Client, ns: &str, name: &str, log: &Path) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    wait_for(&format!("pod {name} Succeeded"), Duration::from_secs(300), log, || async {
        let p = pods.get(name).await?;
        match p.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Succeeded") => Ok(Some(())),
            Some("Failed") => bail!("pod {name} failed: {:?}", p.status),
            _ => Ok(None),
        }
    })
    .await
}

fn ready(r: &Restore) -> (String, String) {
    r.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| (c.reason.clone(), c.message.clone()))
        .unwrap_or_default()
}

async fn restore_done(client: &Client, ns: &str, name: &str, log: &Path) -> Result<Restore> {
    let restores: Api<Restore> = Api::namespaced(client.clone(), ns);
    wait_for(&format!("Restore {name} Completed or Failed"), Duration::from_secs(300), log, || async {
        let r = restores.get(name).await?;
        Ok(matches!(r.phase().as_str(), "Completed" | "Failed").then_some(r))
    })
    .await
}

async fn completed(client: &Client, ns: &str, name: &str, log: &Path) -> Result<Restore> {
    let r = restore_done(client, ns, name, log).await?;
    ensure!(r.phase() == "Completed", "Restore {name} is {}: {:?}", r.phase(), ready(&r));
    Ok(r)
}

/// Deletes a namespaced object and waits until it is gone.
async fn delete<K>(api: &Api<K>, name: &str, log: &Path) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::foreground()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    wait_for(&format!("{name} gone"), Duration::from_secs(120), log, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
}

/// The Events of reason `reason` on PVC `claim`.
async fn claim_events(client: &Client, ns: &str, claim: &str, reason: &str) -> Result<Vec<String>> {
    Ok(Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(claim) && e.reason.as_deref() == Some(reason))
        .map(|e| e.message.unwrap_or_default())
        .collect())
}

/// What a populate may leave behind: prime PVCs, CSI PersistentVolumes not bound to a live
/// PVC, and driver volumes beyond the live PVs.
#[derive(Debug, Default)]
struct Orphans {
    primes: Vec<String>,
    unbound_pvs: Vec<String>,
    live_pvs: usize,
    driver_volumes: usize,
}

impl Orphans {
    fn zero(&self) -> bool {
        self.primes.is_empty() && self.unbound_pvs.is_empty() && self.driver_volumes == self.live_pvs
    }
}

async fn orphans(cluster: &RealCluster, client: &Client, ns: &str) -> Result<Orphans> {
    let pvcs = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns).list(&ListParams::default()).await?.items;
    let primes = pvcs.iter().map(|p| p.name_any()).filter(|n| n.starts_with("kopiur-prime-")).collect();
    let mut o = Orphans { primes, ..Orphans::default() };
    for pv in Api::<PersistentVolume>::all(client.clone()).list(&ListParams::default()).await?.items {
        if pv.spec.as_ref().and_then(|s| s.csi.as_ref()).is_none() {
            continue;
        }
        let r = pv.spec.as_ref().and_then(|s| s.claim_ref.clone()).unwrap_or_default();
        let live = pvcs.iter().any(|p| {
            Some(p.name_any()) == r.name
                && p.uid() == r.uid
                && p.spec.as_ref().and_then(|s| s.volume_name.as_deref()) == Some(pv.name_any().as_str())
                && !p.name_any().starts_with("kopiur-prime-")
        });
        if live {
            o.live_pvs += 1;
        } else {
            o.unbound_pvs.push(format!("{} -> {:?}", pv.name_any(), r.name));
        }
    }
    let (volumes, _) = cluster.csi().context("CSI stack")?.leftovers();
    o.driver_volumes = volumes.iter().filter(|v| !v.ends_with(".json")).count();
    Ok(o)
}

async fn no_orphans(cluster: &RealCluster, client: &Client, ns: &str, log: &Path) -> Result<Orphans> {
    let got = wait_for("no populate orphans", Duration::from_secs(120), log, || async {
        let o = orphans(cluster, client, ns).await?;
        Ok(o.zero().then_some(o))
    })
    .await;
    match got {
        Ok(o) => Ok(o),
        Err(e) => bail!("{e:#}: {:?}", orphans(cluster, client, ns).await?),
    }
}

/// Waits until Restore `name`'s populate is under way: its Job exists.
async fn populating(client: &Client, ns: &str, name: &str, log: &Path) -> Result<()> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let job = kopiur_mover::job::job_name(&format!("{name}-restore"));
    wait_for(&format!("Job {job}"), Duration::from_secs(180), log, || async {
        Ok(jobs.get_opt(&job).await?.map(|_| ()))
    })
    .await
}

/// The PersistentVolume a PVC is bound to, with its populated-by annotation.
async fn bound_volume(client: &Client, ns: &str, claim: &str) -> Result<(String, Option<String>)> {
    let pvc = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns).get(claim).await?;
    let pv = pvc.spec.and_then(|s| s.volume_name).context("the PVC is not bound")?;
    let pv = Api::<PersistentVolume>::all(client.clone()).get(&pv).await?;
    Ok((pv.name_any(), pv.annotations().get("kopiur.home-operations.com/populated-by").cloned()))
}

/// A full populate of a new PVC `c` from a new Restore `r` (snapshot `s1`), checked by a
/// reader, with the PV annotated by the Restore's uid.
async fn full_round(client: &Client, ns: &str, c: &str, r: &str, log: &Path) -> Result<()> {
    populator(client, ns, r, json!({"snapshotRef": {"name": "s1"}})).await?;
    claim(client, ns, c, r).await?;
    pod(client, ns, &format!("read-{c}"), c, READ).await?;
    pod_succeeded(client, ns, &format!("read-{c}"), log).await?;
    let rs = completed(client, ns, r, log).await?;
    let (_, by) = bound_volume(client, ns, c).await?;
    ensure!(by == rs.uid(), "{c}'s volume is annotated populated-by {by:?}, not Restore {r}'s uid");
    Ok(())
}

/// Deletes round `c`'s reader, PVC and Restore `r`.
async fn clear_round(client: &Client, ns: &str, c: &str, r: &str, log: &Path) -> Result<()> {
    delete(&Api::<Pod>::namespaced(client.clone(), ns), &format!("read-{c}"), log).await?;
    delete(&Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns), c, log).await?;
    delete(&Api::<Restore>::namespaced(client.clone(), ns), r, log).await
}

async fn install_volume_populator_crd(client: &Client, log: &Path) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        // A *.k8s.io group needs the approval annotation; this is the VolumePopulator KEP's.
        "metadata": {"name": "volumepopulators.populator.storage.k8s.io",
                     "annotations": {"api-approved.kubernetes.io": "https://github.com/kubernetes/enhancements/pull/2934"}},
        "spec": {"group": "populator.storage.k8s.io", "scope": "Cluster",
                 "names": {"kind": "VolumePopulator", "listKind": "VolumePopulatorList",
                           "plural": "volumepopulators", "singular": "volumepopulator"},
                 "versions": [{"name": "v1beta1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd).await?;
    wait_for("VolumePopulator CRD established", Duration::from_secs(60), log, || async {
        let c = crds.get("volumepopulators.populator.storage.k8s.io").await?;
        let est = c.status.and_then(|s| s.conditions).unwrap_or_default();
        Ok(est.iter().any(|c| c.type_ == "Established" && c.status == "True").then_some(()))
    })
    .await
}

async fn scenario(cluster: &mut RealCluster, t0: Instant) -> Result<()> {
    let client = cluster.env().client().await?;
    let stack = support::realnode::NodeStack::start(cluster, OP_NS, "populate").await?;
    let (mut op, ns, log) = (stack.op, stack.ns, stack.log);
    // Restores run privileged (uid 0 with CHOWN), so the restored files keep their owners.
    let annotate = json!({"metadata": {"annotations": {"kopiur.home-operations.com/privileged-movers": "true"}}});
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .patch(&ns, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&annotate))
        .await?;

    // The source: a CSI volume with a 1 MiB file and its checksum, backed up once.
    apply(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "src", "namespace": ns},
               "spec": {"storageClassName": STORAGE_CLASS, "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "64Mi"}}}}),
    )
    .await?;
    let seed = "cd /data && head -c 1048576 /dev/urandom > blob && sha256sum blob > blob.sum \
                && echo 'hello from the source' > hello.txt && chown 1234:5678 blob hello.txt";
    pod(&client, &ns, "seed", "src", seed).await?;
    pod_succeeded(&client, &ns, "seed", &log).await?;
    apply(
        &client,
        &ns,
        json!({"apiVersion": API, "kind": "SnapshotPolicy", "metadata": {"name": "p", "namespace": ns},
               "spec": {"repository": {"name": "r"}, "sources": [{"pvc": {"name": "src"}}], "copyMethod": "Direct"}}),
    )
    .await?;
    apply(
        &client,
        &ns,
        json!({"apiVersion": API, "kind": "Snapshot", "metadata": {"name": "s1", "namespace": ns},
               "spec": {"policyRef": {"name": "p"}}}),
    )
    .await?;
    let snaps: Api<Snapshot> = Api::namespaced(client.clone(), &ns);
    wait_for("Snapshot s1 Succeeded", Duration::from_secs(300), &log, || async {
        let s = snaps.get("s1").await?;
        match s.phase().as_str() {
            "Succeeded" => Ok(Some(())),
            "Failed" => bail!("s1 failed: {:?}", s.status.and_then(|st| st.failure)),
            _ => Ok(None),
        }
    })
    .await?;
    println!("source backed up after {:.1} s", t0.elapsed().as_secs_f64());
    let restores: Api<Restore> = Api::namespaced(client.clone(), &ns);
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    let mut populates = 0;
    let mut recreated_restores = 0;

    // 1. The claim first: an Event says its Restore does not exist; then the Restore populates it.
    ensure!(crds.get_opt("volumepopulators.populator.storage.k8s.io").await?.is_none(), "no VolumePopulator CRD");
    let started = Instant::now();
    claim(&client, &ns, "c1", "rs1").await?;
    pod(&client, &ns, "read-c1", "c1", READ).await?;
    let note = wait_for("c1's RestoreNotFound Event", Duration::from_secs(60), &log, || async {
        Ok(claim_events(&client, &ns, "c1", "RestoreNotFound").await?.into_iter().next())
    })
    .await?;
    ensure!(note.contains("Restore") && note.contains("rs1, which does not exist"), "RestoreNotFound: {note}");
    populator(&client, &ns, "rs1", json!({"snapshotRef": {"name": "s1"}})).await?;
    pod_succeeded(&client, &ns, "read-c1", &log).await?;
    let rs1 = completed(&client, &ns, "rs1", &log).await?;
    let (pv1, by) = bound_volume(&client, &ns, "c1").await?;
    ensure!(by == rs1.uid(), "c1's volume populated-by {by:?}");
    let told = claim_events(&client, &ns, "c1", "Populated").await?;
    ensure!(!told.is_empty(), "no Populated Event on c1");
    populates += 1;
    no_orphans(cluster, &client, &ns, &log).await?;
    println!(
        "1. claim before its Restore: Event RestoreNotFound ({note}); populated and read in {:.1} s with no VolumePopulator CRD; Event Populated: {}",
        started.elapsed().as_secs_f64(),
        told[0]
    );

    // 2. The Restore re-created while its PVC is bound: nothing restored, no Job.
    delete(&restores, "rs1", &log).await?;
    populator(&client, &ns, "rs1", json!({"snapshotRef": {"name": "s1"}})).await?;
    recreated_restores += 1;
    let again = completed(&client, &ns, "rs1", &log).await?;
    ensure!(ready(&again).0 == "TargetAlreadyBound", "re-created rs1: {:?}", ready(&again));
    let owned = jobs
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|j| j.owner_references().iter().any(|o| Some(&o.uid) == again.uid().as_ref()));
    ensure!(owned.count() == 0, "a re-created Restore ran a Job for a bound PVC");
    ensure!(bound_volume(&client, &ns, "c1").await?.0 == pv1, "c1 changed volume");
    println!("2. Restore re-created over a bound PVC: Completed TargetAlreadyBound, no Job ({})", ready(&again).1);
    clear_round(&client, &ns, "c1", "rs1", &log).await?;

    // 3. The Restore deleted mid-populate: the prime and its volume go; a new Restore populates.
    populator(&client, &ns, "rs3", json!({"snapshotRef": {"name": "s1"}})).await?;
    claim(&client, &ns, "c3", "rs3").await?;
    pod(&client, &ns, "read-c3", "c3", READ).await?;
    populating(&client, &ns, "rs3", &log).await?;
    delete(&restores, "rs3", &log).await?;
    let o = no_orphans(cluster, &client, &ns, &log).await?;
    let c3 = pvcs.get("c3").await?;
    ensure!(c3.spec.as_ref().and_then(|s| s.volume_name.as_ref()).is_none(), "c3 bound without its Restore");
    println!("3. Restore deleted mid-populate: prime PVC and volume gone ({o:?}); c3 still Pending");
    populator(&client, &ns, "rs3", json!({"snapshotRef": {"name": "s1"}})).await?;
    recreated_restores += 1;
    pod_succeeded(&client, &ns, "read-c3", &log).await?;
    completed(&client, &ns, "rs3", &log).await?;
    populates += 1;
    no_orphans(cluster, &client, &ns, &log).await?;
    clear_round(&client, &ns, "c3", "rs3", &log).await?;

    // 4. The controller killed mid-populate, the VolumePopulator CRD installed meanwhile.
    install_volume_populator_crd(&client, &log).await?;
    populator(&client, &ns, "rs4", json!({"snapshotRef": {"name": "s1"}})).await?;
    claim(&client, &ns, "c4", "rs4").await?;
    pod(&client, &ns, "read-c4", "c4", READ).await?;
    wait_for("rs4's prime PVC", Duration::from_secs(180), &log, || async {
        let left = orphans(cluster, &client, &ns).await?;
        Ok((!left.primes.is_empty()).then_some(()))
    })
    .await?;
    let first = (populated(&op, &ns, "populated").await, populated(&op, &ns, "already_bound").await);
    ensure!(
        first == (2.0, 1.0),
        "kopiur_restore_populates_total before the kill (populated, already_bound) = {first:?}"
    );
    op.kill();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let op2 = Operator::start(cluster.env(), OP_NS, &[("KOPIUR_MOVER_IMAGE", MOVER_IMAGE)]).await?;
    pod_succeeded(&client, &ns, "read-c4", &log).await?;
    completed(&client, &ns, "rs4", &log).await?;
    populates += 1;
    no_orphans(cluster, &client, &ns, &log).await?;
    let gvk = kube::api::GroupVersionKind::gvk("populator.storage.k8s.io", "v1beta1", "VolumePopulator");
    let vp_api: Api<kube::api::DynamicObject> =
        Api::all_with(client.clone(), &kube::api::ApiResource::from_gvk_with_plural(&gvk, "volumepopulators"));
    let vp = wait_for("VolumePopulator kopiur-restore", Duration::from_secs(60), &log, || async {
        Ok(vp_api.get_opt("kopiur-restore").await?)
    })
    .await?;
    ensure!(
        vp.data["sourceKind"] == json!({"group": "kopiur.home-operations.com", "kind": "Restore"}),
        "VolumePopulator: {:?}",
        vp.data
    );
    println!("4. controller killed mid-populate: Completed after it returned, no orphans; VolumePopulator registered");
    clear_round(&client, &ns, "c4", "rs4", &log).await?;

    // 5. The PVC deleted mid-populate: Failed PopulateTargetGone, the prime discarded.
    populator(&client, &ns, "rs5", json!({"snapshotRef": {"name": "s1"}})).await?;
    claim(&client, &ns, "c5", "rs5").await?;
    pod(&client, &ns, "read-c5", "c5", READ).await?;
    populating(&client, &ns, "rs5", &log).await?;
    delete(&Api::<Pod>::namespaced(client.clone(), &ns), "read-c5", &log).await?;
    delete(&pvcs, "c5", &log).await?;
    let rs5 = restore_done(&client, &ns, "rs5", &log).await?;
    ensure!(
        rs5.phase() == "Failed" && ready(&rs5).0 == "PopulateTargetGone",
        "rs5 after its PVC was deleted: {} {:?}",
        rs5.phase(),
        ready(&rs5)
    );
    no_orphans(cluster, &client, &ns, &log).await?;
    println!("5. PVC deleted mid-populate: Failed PopulateTargetGone ({}); prime discarded", ready(&rs5).1);
    delete(&restores, "rs5", &log).await?;

    // 6. Deploy-or-restore before any backup: an empty volume, bound without a Job.
    apply(
        &client,
        &ns,
        json!({"apiVersion": API, "kind": "SnapshotPolicy", "metadata": {"name": "p-new", "namespace": ns},
               "spec": {"repository": {"name": "r"}, "sources": [{"pvc": {"name": "c6"}}], "copyMethod": "Direct"}}),
    )
    .await?;
    populator(&client, &ns, "rs6", json!({"fromPolicy": {"name": "p-new"}})).await?;
    claim(&client, &ns, "c6", "rs6").await?;
    pod(&client, &ns, "read-c6", "c6", "test ! -e /data/blob && echo first > /data/state").await?;
    pod_succeeded(&client, &ns, "read-c6", &log).await?;
    let rs6 = completed(&client, &ns, "rs6", &log).await?;
    let resolved = rs6.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == "Resolved")).cloned();
    ensure!(resolved.as_ref().is_some_and(|c| c.reason == "NoSnapshotContinue"), "rs6 Resolved: {resolved:?}");
    ensure!(jobs.get_opt(&kopiur_mover::job::job_name("rs6-restore")).await?.is_none(), "an empty populate ran a Job");
    populates += 1;
    no_orphans(cluster, &client, &ns, &log).await?;
    println!("6. no backup yet: c6 bound to an empty volume, no Job");
    clear_round(&client, &ns, "c6", "rs6", &log).await?;

    // 7. The PVC and its Restore deleted and re-created 10 times.
    let started = Instant::now();
    let mut claim_uids = std::collections::BTreeSet::new();
    for _ in 0..RECREATIONS {
        full_round(&client, &ns, "c7", "rs7", &log).await?;
        claim_uids.insert(pvcs.get("c7").await?.uid().unwrap_or_default());
        populates += 1;
        recreated_restores += 1;
        no_orphans(cluster, &client, &ns, &log).await?;
        clear_round(&client, &ns, "c7", "rs7", &log).await?;
    }
    ensure!(claim_uids.len() == RECREATIONS, "each round a new PVC instance: {claim_uids:?}");
    println!(
        "7. PVC and Restore re-created {RECREATIONS} times: each populated and read, {:.1} s per round",
        started.elapsed().as_secs_f64() / RECREATIONS as f64
    );
    // One populate per PVC instance: the second process counted rs4 (finished after its
    // return), rs6 and the re-creations as populated, rs5 as failed, and nothing else.
    let second = (
        populated(&op2, &ns, "populated").await,
        populated(&op2, &ns, "failed").await,
        populated(&op2, &ns, "already_bound").await,
    );
    ensure!(
        second == (2.0 + RECREATIONS as f64, 1.0, 0.0),
        "kopiur_restore_populates_total after the restart (populated, failed, already_bound) = {second:?}"
    );

    let o = no_orphans(cluster, &client, &ns, &log).await?;
    ensure!(o.live_pvs == 1, "only the source's volume is left: {o:?}");
    println!(
        "{populates} populates, {recreated_restores} re-created Restores: orphans 0 (prime PVCs {}, unbound CSI PVs {}, driver volumes {} = live PVs {}) after {:.1} s",
        o.primes.len(),
        o.unbound_pvs.len(),
        o.driver_volumes,
        o.live_pvs,
        t0.elapsed().as_secs_f64()
    );
    drop(op2);
    Ok(())
}
