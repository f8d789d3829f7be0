//! Restore as a volume populator (`target: populator: {}`, docs/controller.md "Volume
//! populator"). A PVC whose `spec.dataSourceRef` names a Restore (apiGroup
//! `kopiur.home-operations.com`, kind `Restore`) stays Pending while the Restore:
//!
//! 1. finds the claim (the oldest PVC in its namespace naming it) and, for a
//!    WaitForFirstConsumer class, waits for the scheduler to pick the claim's node;
//! 2. creates the prime PVC `kopiur-prime-<claim uid>`: the claim's class, modes, size and
//!    selected node, owned by the Restore (a deleted Restore takes it along);
//! 3. restores the pinned snapshot into the prime through the usual restore Job (nothing is
//!    run for `NoSnapshotContinue`: the prime stays empty);
//! 4. points the prime's PersistentVolume at the claim (`spec.claimRef`, annotated with the
//!    Restore's and the claim's uids) and, once the claim is bound to it, deletes the prime.
//!
//! One populate per claim: a claim that is bound already is never written to (the Restore
//! completes with `TargetAlreadyBound`), and the prime's name carries the claim's uid, so a
//! re-created claim never inherits another claim's volume. No `VolumePopulator` CRD is needed;
//! when one is installed, [`register`] adds kopiur's entry.
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kopiur_api::Restore;
use kopiur_api::names::{annotation, event, label};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};

use super::reconcile::CREATED_BY;
use crate::error::{ApiStep, Error};

/// The prime PVC's name prefix; the claim's uid follows.
pub const PRIME_PREFIX: &str = "kopiur-prime-";
/// The node the scheduler picked for a WaitForFirstConsumer claim.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The Restore kind a `dataSourceRef` names.
pub const KIND: &str = "Restore";

/// The prime PVC of a claim.
pub fn prime_name(claim_uid: &str) -> String {
    format!("{PRIME_PREFIX}{claim_uid}")
}

/// The Restore a PVC's `dataSourceRef` names (its name), when it names one of ours in the
/// PVC's own namespace.
pub fn named_restore(pvc: &PersistentVolumeClaim) -> Option<String> {
    let r = pvc.spec.as_ref()?.data_source_ref.as_ref()?;
    let ours = r.api_group.as_deref() == Some(kopiur_api::names::GROUP) && r.kind == KIND;
    let same_ns = r.namespace.as_ref().is_none_or(|n| Some(n) == pvc.metadata.namespace.as_ref());
    (ours && same_ns).then(|| r.name.clone())
}

/// The prime PVC as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prime {
    Absent,
    /// Created by this Restore, not bound yet.
    Pending,
    /// Created by this Restore and bound to `volume`.
    Bound {
        volume: String,
    },
    /// Left by another (deleted) Restore for the same claim: garbage collection removes it.
    Foreign,
}

/// Where a populate stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Populate {
    /// No PVC in the namespace names this Restore.
    NoClaim,
    /// The claim is bound to a volume this Restore did not populate: nothing is written.
    AlreadyBound { claim: String, volume: String },
    /// A WaitForFirstConsumer claim whose node is not chosen yet.
    AwaitingConsumer { claim: String, class: String },
    /// The claim waits for its data; the prime as observed.
    Priming { claim: String, claim_uid: String, prime: Prime },
    /// The claim is bound to the volume this Restore populated.
    Populated { claim: String, volume: String, prime_left: bool },
    /// The claim this populate started for was deleted or re-created.
    ClaimGone { claim: String },
    /// The claim cannot be populated (the message says why and what to change).
    Refused { message: String },
}

impl Populate {
    /// The claim's name, when one is known.
    pub fn claim(&self) -> Option<&str> {
        match self {
            Populate::AlreadyBound { claim, .. }
            | Populate::AwaitingConsumer { claim, .. }
            | Populate::Priming { claim, .. }
            | Populate::Populated { claim, .. }
            | Populate::ClaimGone { claim } => Some(claim),
            Populate::NoClaim | Populate::Refused { .. } => None,
        }
    }
}

/// What a reconcile read of a populate: the state, the claim object (for its Events) and the
/// prime's name.
pub struct Observed {
    pub state: Populate,
    pub claim: Option<PersistentVolumeClaim>,
    pub prime: Option<String>,
}

/// Reads the populate of `restore`. `recorded` is the claim the status names once the populate
/// started (`status.target`): it is then read by name, fresh from the API, so a lagging list
/// can never read as a deleted claim.
pub async fn observe(client: &Client, restore: &Restore, recorded: Option<(&str, &str)>) -> Result<Observed, Error> {
    let ns = restore.namespace().unwrap_or_default();
    let uid = restore.uid().unwrap_or_default();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let claim = match recorded {
        Some((name, prime)) => match pvcs.get_opt(name).await.step("read populated claim")? {
            // A claim being deleted is as gone: nothing is bound to it.
            Some(c) if prime_name(&c.uid().unwrap_or_default()) == prime && c.metadata.deletion_timestamp.is_none() => {
                Some(c)
            }
            Some(_) | None => {
                let state = Populate::ClaimGone { claim: name.to_string() };
                return Ok(Observed { state, claim: None, prime: Some(prime.to_string()) });
            }
        },
        None => {
            let mut claims: Vec<PersistentVolumeClaim> = pvcs
                .list(&ListParams::default())
                .await
                .step("list claims to populate")?
                .items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter(|p| named_restore(p).as_deref() == Some(restore.name_any().as_str()))
                .collect();
            claims.sort_by(|a, b| {
                a.metadata
                    .creation_timestamp
                    .cmp(&b.metadata.creation_timestamp)
                    .then_with(|| a.name_any().cmp(&b.name_any()))
            });
            claims.into_iter().next()
        }
    };
    let Some(claim) = claim else { return Ok(Observed { state: Populate::NoClaim, claim: None, prime: None }) };
    let name = claim.name_any();
    let claim_uid = claim.uid().unwrap_or_default();
    let prime = prime_name(&claim_uid);
    let spec = claim.spec.clone().unwrap_or_default();
    if let Some(volume) = spec.volume_name.clone().filter(|v| !v.is_empty()) {
        let pv =
            Api::<PersistentVolume>::all(client.clone()).get_opt(&volume).await.step("read prime PersistentVolume")?;
        let ours = pv.as_ref().is_some_and(|pv| pv.annotations().get(annotation::POPULATED_BY) == Some(&uid));
        let state = if ours {
            let prime_left = pvcs.get_opt(&prime).await.step("read prime claim")?.is_some();
            Populate::Populated { claim: name, volume, prime_left }
        } else {
            Populate::AlreadyBound { claim: name, volume }
        };
        return Ok(Observed { state, claim: Some(claim), prime: Some(prime) });
    }
    let Some(class) = spec.storage_class_name.clone().filter(|c| !c.is_empty()) else {
        let message = format!(
            "PVC {name} names no storageClassName: a populated PVC needs a StorageClass with a dynamic provisioner (set spec.storageClassName)"
        );
        return Ok(Observed { state: Populate::Refused { message }, claim: Some(claim), prime: None });
    };
    let Some(sc) = Api::<StorageClass>::all(client.clone()).get_opt(&class).await.step("read StorageClass")? else {
        let message = format!("PVC {name} names StorageClass {class}, which does not exist");
        return Ok(Observed { state: Populate::Refused { message }, claim: Some(claim), prime: None });
    };
    let wffc = sc.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer");
    if wffc && !claim.annotations().contains_key(SELECTED_NODE) {
        let state = Populate::AwaitingConsumer { claim: name, class };
        return Ok(Observed { state, claim: Some(claim), prime: None });
    }
    let state = match pvcs.get_opt(&prime).await.step("read prime claim")? {
        None => Prime::Absent,
        Some(p) if p.annotations().get(CREATED_BY) != Some(&uid) => Prime::Foreign,
        Some(p) => match p.spec.as_ref().and_then(|s| s.volume_name.clone()).filter(|v| !v.is_empty()) {
            Some(volume) => Prime::Bound { volume },
            None => Prime::Pending,
        },
    };
    let state = Populate::Priming { claim: name, claim_uid, prime: state };
    Ok(Observed { state, claim: Some(claim), prime: Some(prime) })
}

/// The prime PVC for `claim`: the claim's class, access modes, size, volume mode and selected
/// node; no data source; owned by the Restore and annotated with its uid.
pub fn prime_claim(restore: &Restore, claim: &PersistentVolumeClaim) -> PersistentVolumeClaim {
    let spec = claim.spec.clone().unwrap_or_default();
    let mut annotations = BTreeMap::from([(CREATED_BY.to_string(), restore.uid().unwrap_or_default())]);
    if let Some(node) = claim.annotations().get(SELECTED_NODE) {
        annotations.insert(SELECTED_NODE.to_string(), node.clone());
    }
    let mut labels = crate::labels::managed_labels();
    labels.insert(label::OP.to_string(), "restore-populate".to_string());
    PersistentVolumeClaim {
        metadata: kube::api::ObjectMeta {
            name: Some(prime_name(&claim.uid().unwrap_or_default())),
            namespace: claim.namespace(),
            annotations: Some(annotations),
            labels: Some(labels),
            owner_references: Some(vec![crate::mover_job::owner_of(restore)]),
            ..Default::default()
        },
        spec: Some(k8s_openapi::api::core::v1::PersistentVolumeClaimSpec {
            access_modes: spec.access_modes,
            resources: spec.resources,
            storage_class_name: spec.storage_class_name,
            volume_mode: spec.volume_mode,
            ..Default::default()
        }),
        status: None,
    }
}

/// Creates the prime PVC (an existing one is left as it is).
pub async fn create_prime(client: &Client, restore: &Restore, claim: &PersistentVolumeClaim) -> Result<(), Error> {
    let ns = claim.namespace().unwrap_or_default();
    let pvc = prime_claim(restore, claim);
    match Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns).create(&PostParams::default(), &pvc).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(Error::api("create prime claim", e)),
    }
}

/// Points the prime's volume at the claim. Only a volume bound to this Restore's prime (or
/// already pointed at this claim) is touched; anything else is an error and nothing changes.
pub async fn rebind(
    client: &Client,
    restore: &Restore,
    claim: &PersistentVolumeClaim,
    volume: &str,
) -> Result<(), Error> {
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let ns = claim.namespace().unwrap_or_default();
    let claim_uid = claim.uid().unwrap_or_default();
    let prime = prime_name(&claim_uid);
    let pv = pvs.get(volume).await.step("read prime PersistentVolume")?;
    let bound_to = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    let points_at = |name: &str| {
        bound_to.is_some_and(|r| r.namespace.as_deref() == Some(ns.as_str()) && r.name.as_deref() == Some(name))
    };
    if !points_at(&prime) && !points_at(&claim.name_any()) {
        return Err(Error::InvalidSpec(format!(
            "volume {volume} is not bound to the prime PVC {prime}; the populate does not touch it"
        )));
    }
    let patch = serde_json::json!({
        "metadata": {"annotations": {annotation::POPULATED_BY: restore.uid().unwrap_or_default(),
                                     annotation::POPULATED_FOR: claim_uid}},
        "spec": {"claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": ns,
                              "name": claim.name_any(), "uid": claim_uid, "resourceVersion": null}}
    });
    pvs.patch(volume, &PatchParams::default(), &Patch::Merge(&patch)).await.step("rebind PersistentVolume")?;
    Ok(())
}

/// Deletes the prime PVC (gone already counts as done).
pub async fn delete_prime(client: &Client, ns: &str, prime: &str) -> Result<(), Error> {
    match Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns).delete(prime, &DeleteParams::background()).await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(Error::api("delete prime claim", e)),
    }
}

/// The `VolumePopulator` CRD (volume-data-source-validator's); optional.
pub const VOLUME_POPULATOR_CRD: &str = "volumepopulators.populator.storage.k8s.io";
/// The name of kopiur's `VolumePopulator` entry.
pub const VOLUME_POPULATOR_NAME: &str = "kopiur-restore";

/// Registers kopiur's `VolumePopulator` (sourceKind Restore) when the CRD is installed; with no
/// CRD nothing is needed (the populate works without it). Returns whether it registered.
pub async fn register(client: &Client) -> Result<bool, Error> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let Some(crd) = crds.get_opt(VOLUME_POPULATOR_CRD).await.step("read VolumePopulator CRD")? else {
        return Ok(false);
    };
    let version = crd
        .spec
        .versions
        .iter()
        .find(|v| v.storage)
        .or_else(|| crd.spec.versions.first())
        .map(|v| v.name.clone())
        .unwrap_or_else(|| "v1beta1".into());
    let gvk = kube::api::GroupVersionKind::gvk("populator.storage.k8s.io", &version, "VolumePopulator");
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, "volumepopulators");
    let api: Api<kube::api::DynamicObject> = Api::all_with(client.clone(), &ar);
    let obj = serde_json::json!({
        "apiVersion": format!("populator.storage.k8s.io/{version}"),
        "kind": "VolumePopulator",
        "metadata": {"name": VOLUME_POPULATOR_NAME, "labels": crate::labels::managed_labels()},
        "sourceKind": {"group": kopiur_api::names::GROUP, "kind": KIND},
    });
    api.patch(VOLUME_POPULATOR_NAME, &PatchParams::apply("kopiur-controller").force(), &Patch::Apply(&obj))
        .await
        .step("apply VolumePopulator")?;
    Ok(true)
}

/// Registers the `VolumePopulator` at start-up and then hourly (a CRD installed later is
/// picked up); failures are logged and retried, never fatal.
pub async fn register_loop(client: Client) {
    let mut registered = false;
    loop {
        match register(&client).await {
            Ok(true) if !registered => {
                registered = true;
                tracing::info!(name = VOLUME_POPULATOR_NAME, "registered the VolumePopulator for Restore");
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "registering the VolumePopulator failed; retried later"),
        }
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
    }
}

/// Why a pending claim that names a Restore gets nothing from it (an Event on the claim), or
/// None when the Restore takes it (it is then enqueued).
pub fn unserved(claim: &PersistentVolumeClaim, restore: Option<&Restore>) -> Option<(&'static str, String)> {
    use kopiur_api::restore::{RestorePhase, RestoreTarget};
    let ns = claim.namespace().unwrap_or_default();
    let name = named_restore(claim)?;
    let Some(r) = restore else {
        return Some((
            event::RESTORE_NOT_FOUND,
            format!(
                "spec.dataSourceRef names Restore {ns}/{name}, which does not exist; create it with target: populator: {{}} and this PVC is populated from it (it stays Pending until then)"
            ),
        ));
    };
    if !matches!(r.spec.target, RestoreTarget::Populator(_)) {
        return Some((
            event::RESTORE_NOT_POPULATOR,
            format!(
                "Restore {ns}/{name} does not have target: populator: {{}}, so it does not populate PVCs; create a Restore with that target for this PVC"
            ),
        ));
    }
    let status = r.status.as_ref();
    let served = status.and_then(|s| s.target.as_ref()).and_then(|t| t.pvc_prime.as_ref()).map(|p| p.name.clone());
    let finished =
        matches!(status.and_then(|s| s.phase.as_ref()), Some(RestorePhase::Completed | RestorePhase::Failed));
    let mine = served.as_deref() == Some(prime_name(&claim.uid().unwrap_or_default()).as_str());
    if finished && !mine {
        return Some((
            event::RESTORE_ALREADY_RAN,
            format!(
                "Restore {ns}/{name} already ran for another PVC (a Restore populates one PVC, once); create a new Restore and point this PVC's dataSourceRef at it"
            ),
        ));
    }
    None
}

/// Follows the PVC feed (the one PVC watch, metadata only) for claims naming a Restore: an
/// unbound claim (no `pv.kubernetes.io/bind-completed`) is read whole once per event; one its
/// Restore takes is enqueued on `tx`; one no Restore serves gets a Warning Event saying why
/// (once per claim and reason in this process).
pub async fn watch_claims(
    ctx: Arc<crate::context::Context>,
    claims: crate::feeds::Subscription<kube::core::PartialObjectMeta<PersistentVolumeClaim>>,
    tx: tokio::sync::mpsc::Sender<kube::runtime::reflector::ObjectRef<Restore>>,
) {
    use futures::StreamExt;
    // Judging "no such Restore" needs the Restore store.
    ctx.stores.synced.restores.wait().await;
    let mut told: std::collections::HashMap<String, &'static str> = std::collections::HashMap::new();
    let mut claims = claims;
    while let Some(meta) = claims.next().await {
        let bound = meta.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(BIND_COMPLETED));
        if bound || meta.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let ns = meta.metadata.namespace.clone().unwrap_or_default();
        let name = meta.metadata.name.clone().unwrap_or_default();
        let claim = match Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), &ns).get_opt(&name).await {
            Ok(Some(c)) => c,
            Ok(None) => continue,
            Err(e) => {
                tracing::debug!(error = %e, claim = %name, namespace = %ns, "reading a pending PVC failed");
                continue;
            }
        };
        let Some(restore_name) = named_restore(&claim) else { continue };
        let key = kube::runtime::reflector::ObjectRef::<Restore>::new(&restore_name).within(&ns);
        let restore = ctx.stores.restores.get(&key);
        match unserved(&claim, restore.as_deref()) {
            Some((reason, note)) => {
                let uid = claim.uid().unwrap_or_default();
                if told.get(&uid) != Some(&reason) {
                    told.insert(uid, reason);
                    ctx.event(&claim.object_ref(&()), true, reason, note).await;
                }
            }
            None => {
                let _ = tx.send(key).await;
            }
        }
    }
}

/// The PV binder's annotation on a bound claim.
const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(ds: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "data", "namespace": "app", "uid": "c-1",
                         "annotations": {SELECTED_NODE: "node-a", "other": "x"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "csi",
                     "resources": {"requests": {"storage": "1Gi"}}, "dataSourceRef": ds}
        }))
        .unwrap()
    }

    fn restore(target: serde_json::Value, status: serde_json::Value) -> Restore {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Restore",
            "metadata": {"name": "rs", "namespace": "app", "uid": "r-1"},
            "spec": {"source": {"snapshotRef": {"name": "s"}}, "target": target},
            "status": status
        }))
        .unwrap()
    }

    /// Only a `dataSourceRef` to kopiur's Restore kind, in the claim's own namespace, names a
    /// Restore.
    #[test]
    fn a_claim_names_a_restore_only_through_kopiurs_group_and_kind_in_its_namespace() {
        let g = kopiur_api::names::GROUP;
        assert_eq!(
            named_restore(&claim(serde_json::json!({"apiGroup": g, "kind": "Restore", "name": "rs"}))).as_deref(),
            Some("rs")
        );
        let same = serde_json::json!({"apiGroup": g, "kind": "Restore", "name": "rs", "namespace": "app"});
        assert_eq!(named_restore(&claim(same)).as_deref(), Some("rs"));
        for other in [
            serde_json::json!({"apiGroup": "example.com", "kind": "Restore", "name": "rs"}),
            serde_json::json!({"apiGroup": g, "kind": "Snapshot", "name": "rs"}),
            serde_json::json!({"apiGroup": g, "kind": "Restore", "name": "rs", "namespace": "elsewhere"}),
            serde_json::json!({"kind": "PersistentVolumeClaim", "name": "rs"}),
        ] {
            assert_eq!(named_restore(&claim(other.clone())), None, "{other}");
        }
    }

    /// The prime copies the claim's class, modes, size and selected node (nothing else), has
    /// no data source, is named after the claim's uid and is owned by the Restore.
    #[test]
    fn the_prime_claim_mirrors_the_claim_and_is_owned_by_the_restore() {
        let c = claim(serde_json::json!({"apiGroup": kopiur_api::names::GROUP, "kind": "Restore", "name": "rs"}));
        let r = restore(serde_json::json!({"populator": {}}), serde_json::json!({}));
        let p = prime_claim(&r, &c);
        assert_eq!(p.metadata.name.as_deref(), Some("kopiur-prime-c-1"));
        let ann = p.metadata.annotations.clone().unwrap();
        assert_eq!(ann.get(SELECTED_NODE).map(String::as_str), Some("node-a"));
        assert_eq!(ann.get(CREATED_BY).map(String::as_str), Some("r-1"));
        assert!(!ann.contains_key("other"));
        assert_eq!(p.metadata.labels.unwrap().get(label::OP).map(String::as_str), Some("restore-populate"));
        let owners = p.metadata.owner_references.unwrap();
        assert_eq!((owners[0].kind.as_str(), owners[0].uid.as_str()), ("Restore", "r-1"));
        let spec = p.spec.unwrap();
        assert_eq!(spec.storage_class_name.as_deref(), Some("csi"));
        assert_eq!(spec.access_modes, Some(vec!["ReadWriteOnce".to_string()]));
        assert!(spec.data_source_ref.is_none() && spec.data_source.is_none());
        assert_eq!(spec.resources.unwrap().requests.unwrap()["storage"].0, "1Gi");
    }

    /// A pending claim is told why no Restore serves it: none exists, it is not a populator,
    /// or it already ran for another claim; a Restore that may take it gets it enqueued.
    #[test]
    fn a_claim_no_restore_serves_is_told_why() {
        let c = claim(serde_json::json!({"apiGroup": kopiur_api::names::GROUP, "kind": "Restore", "name": "rs"}));
        assert_eq!(unserved(&c, None).map(|(r, _)| r), Some("RestoreNotFound"));
        assert!(unserved(&c, None).unwrap().1.contains("Restore app/rs, which does not exist"));
        let pvc_target = restore(serde_json::json!({"pvc": {"name": "x", "capacity": "1Gi"}}), serde_json::json!({}));
        assert_eq!(unserved(&c, Some(&pvc_target)).map(|(r, _)| r), Some("RestoreNotPopulator"));
        let fresh = restore(serde_json::json!({"populator": {}}), serde_json::json!({}));
        assert_eq!(unserved(&c, Some(&fresh)), None);
        let ran_other = restore(
            serde_json::json!({"populator": {}}),
            serde_json::json!({"phase": "Completed", "target": {"pvcRef": {"name": "data"}, "pvcPrime": {"name": "kopiur-prime-old"}}}),
        );
        assert_eq!(unserved(&c, Some(&ran_other)).map(|(r, _)| r), Some("RestoreAlreadyRan"));
        let running_mine = restore(
            serde_json::json!({"populator": {}}),
            serde_json::json!({"phase": "Restoring", "target": {"pvcRef": {"name": "data"}, "pvcPrime": {"name": "kopiur-prime-c-1"}}}),
        );
        assert_eq!(unserved(&c, Some(&running_mine)), None);
    }
}
