//! NA-8: default StorageClass and a hostPath provisioner/binder for its PVCs.
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::config::{PROVISIONER, STORAGE_CLASS};

const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";

pub fn pv_dir(state_dir: &Path, pvc_uid: &str) -> PathBuf {
    state_dir.join("pv").join(format!("pvc-{pvc_uid}"))
}

pub async fn ensure_storage_class(client: &Client) -> anyhow::Result<()> {
    let api: Api<StorageClass> = Api::all(client.clone());
    let sc: StorageClass = serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": STORAGE_CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    }))?;
    match api.create(&PostParams::default(), &sc).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn ours(pvc: &PersistentVolumeClaim) -> bool {
    match pvc.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()) {
        None => true,
        Some(c) => c == STORAGE_CLASS,
    }
}

/// The PV object for a claim (NA-8 step 1).
pub fn pv_for(pvc: &PersistentVolumeClaim, dir: &Path) -> Value {
    let uid = pvc.metadata.uid.clone().unwrap_or_default();
    let spec = pvc.spec.clone().unwrap_or_default();
    let storage = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.clone())
        .unwrap_or_else(|| "1Gi".into());
    let modes = spec.access_modes.clone().filter(|m| !m.is_empty()).unwrap_or_else(|| vec!["ReadWriteOnce".into()]);
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": format!("pvc-{uid}"),
            "annotations": {PROVISIONED_BY: PROVISIONER},
        },
        "spec": {
            "capacity": {"storage": storage},
            "accessModes": modes,
            "volumeMode": spec.volume_mode.clone().unwrap_or_else(|| "Filesystem".into()),
            "storageClassName": STORAGE_CLASS,
            "persistentVolumeReclaimPolicy": "Delete",
            "hostPath": {"path": dir.to_string_lossy(), "type": "DirectoryOrCreate"},
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": pvc.metadata.namespace,
                "name": pvc.metadata.name,
                "uid": uid,
            },
        },
    })
}

async fn provision(client: &Client, state_dir: &Path, pvc: &PersistentVolumeClaim) -> anyhow::Result<()> {
    let ns = pvc.metadata.namespace.clone().unwrap_or_default();
    let name = pvc.metadata.name.clone().unwrap_or_default();
    let uid = pvc.metadata.uid.clone().unwrap_or_default();
    let pv_name = format!("pvc-{uid}");
    let dir = pv_dir(state_dir, &uid);
    std::fs::create_dir_all(&dir)?;
    // Non-root pods must be able to write a fresh volume, as with most provisioners.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))?;

    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv_json = pv_for(pvc, &dir);
    let pv: PersistentVolume = serde_json::from_value(pv_json.clone())?;
    match pvs.create(&PostParams::default(), &pv).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let current = pvc.spec.as_ref().and_then(|s| s.volume_name.clone()).unwrap_or_default();
    if current.is_empty() {
        // The annotations the PV controller writes when it binds: a real kube-scheduler
        // (beside the real node) treats a claim without `bind-completed` as unbound.
        let patch = json!({
            "metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes", "pv.kubernetes.io/bound-by-controller": "yes"}},
            "spec": {"volumeName": pv_name}
        });
        pvcs.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    } else if current != pv_name {
        anyhow::bail!("claim already names volume {current}");
    }
    pvs.patch_status(&pv_name, &PatchParams::default(), &Patch::Merge(&json!({"status": {"phase": "Bound"}}))).await?;
    let status = json!({"status": {
        "phase": "Bound",
        "capacity": pv_json["spec"]["capacity"],
        "accessModes": pv_json["spec"]["accessModes"],
    }});
    pvcs.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await?;
    tracing::info!(%ns, %name, pv = %pv_name, "claim bound");
    Ok(())
}

/// The claim is gone: remove the directory, then the PV (unless Retain).
async fn release(client: &Client, state_dir: &Path, pv_name: &str) {
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv = match pvs.get_opt(pv_name).await {
        Ok(Some(pv)) => pv,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(pv = pv_name, "get: {e}");
            return;
        }
    };
    let provisioned =
        pv.metadata.annotations.as_ref().and_then(|a| a.get(PROVISIONED_BY)).map(String::as_str) == Some(PROVISIONER);
    let spec = pv.spec.unwrap_or_default();
    if !provisioned || spec.persistent_volume_reclaim_policy.as_deref() == Some("Retain") {
        return;
    }
    if let Some(uid) = pv_name.strip_prefix("pvc-") {
        let _ = std::fs::remove_dir_all(pv_dir(state_dir, uid));
    }
    // The pv-protection controller keeps its finalizer while the PV reports Bound, and no
    // PV binder runs here to move it on, so mark it Released first (as the binder would).
    let released = json!({"status": {"phase": "Released"}});
    if let Err(e) = pvs.patch_status(pv_name, &PatchParams::default(), &Patch::Merge(&released)).await {
        tracing::warn!(pv = pv_name, "marking released: {e}");
    }
    match pvs.delete(pv_name, &DeleteParams::default()).await {
        Ok(_) => tracing::info!(pv = pv_name, "volume released"),
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => tracing::warn!(pv = pv_name, "delete: {e}"),
    }
}

/// Whether the PV's claim (by namespace, name and uid) still exists.
async fn claim_exists(client: &Client, pv: &PersistentVolume) -> Option<bool> {
    let cr = pv.spec.as_ref()?.claim_ref.as_ref()?;
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), cr.namespace.as_deref()?);
    match api.get_opt(cr.name.as_deref()?).await {
        Ok(Some(pvc)) => Some(pvc.metadata.uid == cr.uid),
        Ok(None) => Some(false),
        Err(_) => None,
    }
}

pub async fn run(client: Client, state_dir: PathBuf, mut shutdown: watch::Receiver<bool>) {
    let pvcs = watcher(Api::<PersistentVolumeClaim>::all(client.clone()), watcher::Config::default()).default_backoff();
    let pvs = watcher(Api::<PersistentVolume>::all(client.clone()), watcher::Config::default()).default_backoff();
    futures::pin_mut!(pvcs);
    futures::pin_mut!(pvs);
    loop {
        tokio::select! {
            _ = super::stopped(&mut shutdown) => return,
            ev = pvcs.next() => match ev {
                Some(Ok(watcher::Event::Apply(pvc) | watcher::Event::InitApply(pvc))) => {
                    let bound = pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
                    if ours(&pvc)
                        && !bound
                        && pvc.metadata.deletion_timestamp.is_none()
                        && let Err(e) = provision(&client, &state_dir, &pvc).await
                    {
                        tracing::warn!(ns = ?pvc.metadata.namespace, name = ?pvc.metadata.name, "provisioning failed: {e}");
                    }
                }
                Some(Ok(watcher::Event::Delete(pvc))) => {
                    if let Some(uid) = &pvc.metadata.uid {
                        release(&client, &state_dir, &format!("pvc-{uid}")).await;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => tracing::warn!("pvc watch: {e}"),
                None => return,
            },
            ev = pvs.next() => match ev {
                // Catches claims deleted while the agent or its watch was down.
                Some(Ok(watcher::Event::Apply(pv) | watcher::Event::InitApply(pv))) => {
                    let ours = pv.metadata.annotations.as_ref().and_then(|a| a.get(PROVISIONED_BY)).map(String::as_str) == Some(PROVISIONER);
                    if ours && pv.metadata.deletion_timestamp.is_none() && claim_exists(&client, &pv).await == Some(false) {
                        release(&client, &state_dir, pv.metadata.name.as_deref().unwrap_or_default()).await;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => tracing::warn!("pv watch: {e}"),
                None => return,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PersistentVolumeClaimSpec, VolumeResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    #[test]
    fn pv_shape() {
        let mut pvc = PersistentVolumeClaim::default();
        pvc.metadata.name = Some("data".into());
        pvc.metadata.namespace = Some("ns".into());
        pvc.metadata.uid = Some("abc".into());
        pvc.spec = Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteMany".into()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some([("storage".to_string(), Quantity("2Gi".into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert!(ours(&pvc));
        let dir = pv_dir(Path::new("/state"), "abc");
        assert_eq!(dir, Path::new("/state/pv/pvc-abc"));
        let v = pv_for(&pvc, &dir);
        assert_eq!(v["metadata"]["name"], "pvc-abc");
        assert_eq!(v["spec"]["capacity"]["storage"], "2Gi");
        assert_eq!(v["spec"]["accessModes"][0], "ReadWriteMany");
        assert_eq!(v["spec"]["claimRef"]["uid"], "abc");
        assert_eq!(v["spec"]["hostPath"]["path"], "/state/pv/pvc-abc");
        let _: PersistentVolume = serde_json::from_value(v).unwrap();
        pvc.spec.as_mut().unwrap().storage_class_name = Some("other".into());
        assert!(!ours(&pvc));
    }
}
