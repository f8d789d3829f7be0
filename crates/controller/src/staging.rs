//! CSI staging for `copyMethod: Snapshot | Clone` (docs/controller.md, "CSI staging"): the
//! backup mounts a point-in-time copy of its source, never the live volume.
//!
//! - `Snapshot`: a VolumeSnapshot of the source, then a PVC restored from it.
//! - `Clone`: a PVC cloned from the source (`dataSource: PersistentVolumeClaim`).
//!
//! Both staged objects are named `kopiur-stage-<Snapshot uid>` (unique, and found again after
//! a restart without a LIST), labelled `staged-for=<uid>` and owned by the Snapshot (the
//! garbage collector's backstop). The Snapshot's `Staging` condition is the record that they
//! may exist: it turns True before the first object is created and False (`Released`) only
//! once the PVC, the VolumeSnapshot and its VolumeSnapshotContent are gone, so a controller
//! killed anywhere in between still deletes them. A release not done is `Releasing`, and past
//! the bound `ReleaseStuck` (counted in `kopiur_staging_left`): nothing is left silently.
//!
//! Only a CSI driver can stage: a source whose StorageClass's provisioner has no CSIDriver
//! object is refused with a message, never backed up from an empty "clone".
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, TypedLocalObjectReference, VolumeResourceRequirements,
};
use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, OwnerReference};
use kopiur_api::names::{event, label};
use kopiur_api::snapshot_policy::{CopyMethod, Staging};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::error::{ApiStep, Error};

mod release;
pub use release::{ContentLeft, Left, dynamic_content_name, nudge_due, release, volume_snapshot_content_resource};

/// The condition that records staged objects (True: they may exist).
pub const CONDITION: &str = "Staging";
/// `Staging=True` reasons.
pub const PREPARING: &str = "Preparing";
pub const STAGED: &str = "Staged";
/// `Staging=False`: both objects are gone.
pub const RELEASED: &str = "Released";
/// `Staging=True` while a finished run's staged objects are deleted and not gone yet.
pub const RELEASING: &str = "Releasing";
/// `Staging=True` once they are still there past the release bound
/// ([`DEFAULT_RELEASE_BOUND`]): counted in `kopiur_staging_left`, alerted, still followed.
pub const RELEASE_STUCK: &str = "ReleaseStuck";
/// The Warning Event of a run whose staged objects outlive the bound.
pub const LEFT_EVENT: &str = event::STAGED_OBJECTS_LEFT;
/// How long kopiur expects a finished run's staged objects to take to go, unless
/// `KOPIUR_STAGING_RELEASE_BOUND_SECONDS` says otherwise.
pub const DEFAULT_RELEASE_BOUND: Duration = Duration::from_secs(300);
/// On a staged VolumeSnapshot or VolumeSnapshotContent still there after its delete: when
/// kopiur last asked for it to go.
pub const RELEASE_REQUESTED_AT: &str = "kopiur.home-operations.com/release-requested-at";
/// How often a nudge of one object may repeat.
pub const NUDGE_EVERY: Duration = Duration::from_secs(10);
/// The csi-snapshotter's mark on a content whose CreateSnapshot has not answered yet.
pub const BEING_CREATED: &str = "snapshot.storage.kubernetes.io/volumesnapshot-being-created";
/// The label every staged object carries: the Snapshot's uid.
pub const STAGED_FOR: &str = "kopiur.home-operations.com/staged-for";
/// The Ready reason of a run waiting for its staged copy, and of one that failed staging.
pub const WAITING_REASON: &str = "Staging";
pub const FAILED_REASON: &str = "StagingFailed";

/// The staged PVC's and VolumeSnapshot's name.
pub fn staged_name(snapshot_uid: &str) -> String {
    format!("kopiur-stage-{snapshot_uid}")
}

/// The VolumeSnapshot API (snapshot.storage.k8s.io/v1), served by the external-snapshotter CRDs.
pub fn volume_snapshot_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("snapshot.storage.k8s.io", "v1", "VolumeSnapshot"),
        "volumesnapshots",
    )
}

/// The staging timeout: `staging.timeout`, 10 minutes when `staging` is absent; `None` waits
/// forever (`timeout: 0`).
pub fn timeout(staging: Option<&Staging>) -> Option<Duration> {
    let t = staging.map(|s| s.timeout.as_std()).unwrap_or(Duration::from_secs(600));
    (!t.is_zero()).then_some(t)
}

/// Whether the conditions say staged objects may exist.
pub fn held(conditions: &[Condition]) -> Option<&Condition> {
    conditions.iter().find(|c| c.type_ == CONDITION && c.status == "True")
}

fn labels(uid: &str) -> std::collections::BTreeMap<String, String> {
    [(label::MANAGED_BY.to_string(), label::MANAGED_BY_VALUE.to_string()), (STAGED_FOR.to_string(), uid.to_string())]
        .into()
}

/// The VolumeSnapshot of `source` (pure).
pub fn volume_snapshot(
    name: &str,
    ns: &str,
    uid: &str,
    source: &str,
    class: Option<&str>,
    owner: &OwnerReference,
) -> Value {
    let mut spec = json!({"source": {"persistentVolumeClaimName": source}});
    if let Some(c) = class {
        spec["volumeSnapshotClassName"] = json!(c);
    }
    json!({
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {"name": name, "namespace": ns, "labels": labels(uid), "ownerReferences": [owner]},
        "spec": spec,
    })
}

/// The size a staged claim asks for: the VolumeSnapshot's restore size when it reports one,
/// else the source's bound capacity, else its request.
pub fn staged_size(source: &PersistentVolumeClaim, restore_size: Option<&str>) -> Option<Quantity> {
    if let Some(r) = restore_size.filter(|r| !r.is_empty() && *r != "0") {
        return Some(Quantity(r.to_string()));
    }
    let status = source.status.as_ref().and_then(|s| s.capacity.as_ref()).and_then(|c| c.get("storage"));
    let request = source
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"));
    status.or(request).cloned()
}

/// The staged PVC (pure): restored from the VolumeSnapshot (`Snapshot`) or cloned from the
/// source (`Clone`), in `staging.storageClassName` (else the source's class) with
/// `staging.accessModes` (else ReadWriteOnce).
pub fn staged_claim(
    name: &str,
    uid: &str,
    source: &PersistentVolumeClaim,
    method: CopyMethod,
    staging: Option<&Staging>,
    size: Quantity,
    owner: &OwnerReference,
) -> PersistentVolumeClaim {
    let data_source = match method {
        CopyMethod::Clone => {
            TypedLocalObjectReference { api_group: None, kind: "PersistentVolumeClaim".into(), name: source.name_any() }
        }
        CopyMethod::Snapshot | CopyMethod::Direct => TypedLocalObjectReference {
            api_group: Some("snapshot.storage.k8s.io".into()),
            kind: "VolumeSnapshot".into(),
            name: name.into(),
        },
    };
    let class = staging
        .and_then(|s| s.storage_class_name.clone())
        .or_else(|| source.spec.as_ref().and_then(|s| s.storage_class_name.clone()));
    let modes = staging
        .and_then(|s| s.access_modes.as_ref())
        .filter(|m| !m.is_empty())
        .map(|m| {
            m.iter()
                .map(|a| serde_json::to_value(a).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default())
                .collect()
        })
        .unwrap_or_else(|| vec!["ReadWriteOnce".to_string()]);
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: source.namespace(),
            labels: Some(labels(uid)),
            owner_references: Some(vec![owner.clone()]),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(modes),
            storage_class_name: class,
            data_source: Some(data_source),
            resources: Some(VolumeResourceRequirements {
                requests: Some([("storage".to_string(), size)].into()),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
}

/// Where a VolumeSnapshot stands (pure).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnapState {
    Ready {
        restore_size: Option<String>,
    },
    /// Not ready yet; the snapshotter's latest error, if any (retried until the timeout).
    Pending {
        error: Option<String>,
    },
}

pub fn snap_state(vs: &Value) -> SnapState {
    let st = &vs["status"];
    if st["readyToUse"].as_bool() == Some(true) {
        return SnapState::Ready { restore_size: st["restoreSize"].as_str().map(String::from) };
    }
    SnapState::Pending { error: st["error"]["message"].as_str().filter(|m| !m.is_empty()).map(String::from) }
}

/// The gRPC codes of a CSI error that retrying cannot fix (a bad request, an unsupported
/// call, no permission, a missing volume). Anything else (Unavailable, ResourceExhausted,
/// Aborted, DeadlineExceeded, Internal, FailedPrecondition, or no code at all) is retried
/// until the staging timeout.
const PERMANENT_CODES: &[&str] = &[
    "InvalidArgument",
    "Unimplemented",
    "PermissionDenied",
    "NotFound",
    "AlreadyExists",
    "OutOfRange",
    "Unauthenticated",
];

/// Whether a VolumeSnapshot's error is permanent: the snapshotter's message carries the
/// driver's gRPC status (`rpc error: code = InvalidArgument desc = …`) and the code is one of
/// [`PERMANENT_CODES`].
pub fn permanent_snapshot_error(message: &str) -> bool {
    message.match_indices("code = ").any(|(i, m)| {
        let rest = &message[i + m.len()..];
        let code: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric()).collect();
        PERMANENT_CODES.contains(&code.as_str())
    })
}

/// What one staging pass found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The staged PVC exists: the Job may mount it.
    Ready { claim: String },
    /// Still working; the message says on what.
    Waiting(String),
    /// Cannot stage at all (a message for the user); the run fails now.
    Refused(String),
}

/// Whether the source's class is provisioned by a CSI driver; `Err` with the refusal if not.
async fn csi_driver(
    client: &Client,
    source: &PersistentVolumeClaim,
    method: CopyMethod,
) -> Result<Result<String, String>, Error> {
    let what = match method {
        CopyMethod::Clone => "copyMethod: Clone",
        CopyMethod::Snapshot | CopyMethod::Direct => "copyMethod: Snapshot",
    };
    let name = source.name_any();
    let Some(class) = source.spec.as_ref().and_then(|s| s.storage_class_name.clone()).filter(|c| !c.is_empty()) else {
        return Ok(Err(format!(
            "{what} needs a CSI driver, and PVC {name} has no StorageClass (a pre-bound volume); set copyMethod: Direct"
        )));
    };
    let sc = match Api::<StorageClass>::all(client.clone()).get_opt(&class).await.step("read StorageClass")? {
        Some(sc) => sc,
        None => return Ok(Err(format!("{what}: StorageClass {class} of PVC {name} does not exist"))),
    };
    // A name with a `/` (an in-tree or external provisioner's) cannot be a CSIDriver's.
    let csi = !sc.provisioner.contains('/')
        && Api::<CSIDriver>::all(client.clone()).get_opt(&sc.provisioner).await.step("read CSIDriver")?.is_some();
    if !csi {
        return Ok(Err(format!(
            "{what} needs a CSI driver, and StorageClass {class} of PVC {name} is provisioned by {}, which has no CSIDriver object; set copyMethod: Direct",
            sc.provisioner
        )));
    }
    Ok(Ok(sc.provisioner))
}

/// The VolumeSnapshotClass API.
pub fn volume_snapshot_class_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("snapshot.storage.k8s.io", "v1", "VolumeSnapshotClass"),
        "volumesnapshotclasses",
    )
}

/// The annotation that marks a driver's default VolumeSnapshotClass.
pub const DEFAULT_CLASS_ANNOTATION: &str = "snapshot.storage.kubernetes.io/is-default-class";

/// The VolumeSnapshotClass a run uses (pure): the requested one, which must exist and be for
/// `driver`, else the driver's one default class. `Err` is the refusal (a class that cannot
/// work is never left to fail at the snapshotter until the staging timeout).
pub fn pick_class(requested: Option<&str>, classes: &[Value], driver: &str) -> Result<String, String> {
    let name = |c: &Value| c["metadata"]["name"].as_str().unwrap_or_default().to_string();
    match requested {
        Some(want) => match classes.iter().find(|c| name(c) == want) {
            None => Err(format!("VolumeSnapshotClass {want} (spec.volumeSnapshotClassName) does not exist")),
            Some(c) if c["driver"].as_str() != Some(driver) => Err(format!(
                "VolumeSnapshotClass {want} (spec.volumeSnapshotClassName) is for driver {}, and the source is provisioned by {driver}",
                c["driver"].as_str().unwrap_or("?")
            )),
            Some(_) => Ok(want.to_string()),
        },
        None => {
            let defaults: Vec<String> = classes
                .iter()
                .filter(|c| c["driver"].as_str() == Some(driver))
                .filter(|c| c["metadata"]["annotations"][DEFAULT_CLASS_ANNOTATION].as_str() == Some("true"))
                .map(name)
                .collect();
            match defaults.as_slice() {
                [one] => Ok(one.clone()),
                [] => Err(format!(
                    "no default VolumeSnapshotClass for driver {driver}: set spec.volumeSnapshotClassName, or annotate a class of that driver {DEFAULT_CLASS_ANNOTATION}: \"true\""
                )),
                many => Err(format!(
                    "driver {driver} has {} default VolumeSnapshotClasses ({}): set spec.volumeSnapshotClassName",
                    many.len(),
                    many.join(", ")
                )),
            }
        }
    }
}

/// One staging pass: creates what is missing (idempotent by name) and reports where it
/// stands. Called only once the `Staging` condition is True.
#[allow(clippy::too_many_arguments)]
pub async fn prepare(
    client: &Client,
    ns: &str,
    uid: &str,
    source_pvc: &str,
    method: CopyMethod,
    class: Option<&str>,
    staging: Option<&Staging>,
    owner: &OwnerReference,
) -> Result<Outcome, Error> {
    let name = staged_name(uid);
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    if pvcs.get_opt(&name).await.step("read staged PVC")?.is_some() {
        return Ok(Outcome::Ready { claim: name });
    }
    let Some(source) = pvcs.get_opt(source_pvc).await.step("read source PVC")? else {
        return Ok(Outcome::Waiting(format!("source PVC {source_pvc} not found")));
    };
    let driver = match csi_driver(client, &source, method).await? {
        Ok(d) => d,
        Err(refusal) => return Ok(Outcome::Refused(refusal)),
    };
    if source.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound") {
        return Ok(Outcome::Waiting(format!(
            "source PVC {source_pvc} is not Bound yet (a WaitForFirstConsumer volume binds once a pod uses it)"
        )));
    }
    let restore_size = match method {
        CopyMethod::Snapshot => {
            match snapshot_restore_size(client, ns, uid, source_pvc, class, &driver, owner).await? {
                Ok(size) => size,
                Err(outcome) => return Ok(outcome),
            }
        }
        CopyMethod::Clone | CopyMethod::Direct => None,
    };
    let Some(size) = staged_size(&source, restore_size.as_deref()) else {
        return Ok(Outcome::Refused(format!("PVC {source_pvc} reports no size to stage a copy of")));
    };
    let claim = staged_claim(&name, uid, &source, method, staging, size, owner);
    match pvcs.create(&PostParams::default(), &claim).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(kube::Error::Api(e)) if e.code == 422 || e.code == 400 => {
            return Ok(Outcome::Refused(format!("the staged PVC {name} was refused: {}", e.message)));
        }
        Err(e) => return Err(Error::api("create staged PVC", e)),
    }
    Ok(Outcome::Ready { claim: name })
}

/// `copyMethod: Snapshot`: the source's VolumeSnapshot (created with the class picked for the
/// source's driver), and its restore size once it is ready. `Err`: where staging stands
/// meanwhile (waiting, or refused).
async fn snapshot_restore_size(
    client: &Client,
    ns: &str,
    uid: &str,
    source_pvc: &str,
    class: Option<&str>,
    driver: &str,
    owner: &OwnerReference,
) -> Result<Result<Option<String>, Outcome>, Error> {
    let name = staged_name(uid);
    let vss: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &volume_snapshot_resource());
    let vs = match vss.get_opt(&name).await {
        Ok(Some(vs)) => serde_json::to_value(vs).unwrap_or_default(),
        Ok(None) => {
            let classes: Api<DynamicObject> = Api::all_with(client.clone(), &volume_snapshot_class_resource());
            let classes = match classes.list(&Default::default()).await {
                Ok(l) => l.items.into_iter().map(|c| serde_json::to_value(c).unwrap_or_default()).collect::<Vec<_>>(),
                Err(kube::Error::Api(e)) if e.code == 404 => return Ok(Err(Outcome::Refused(no_snapshot_api()))),
                Err(e) => return Err(Error::api("list VolumeSnapshotClasses", e)),
            };
            let class = match pick_class(class, &classes, driver) {
                Ok(c) => c,
                Err(refusal) => return Ok(Err(Outcome::Refused(refusal))),
            };
            let body: DynamicObject =
                serde_json::from_value(volume_snapshot(&name, ns, uid, source_pvc, Some(&class), owner))
                    .map_err(|e| Error::InvalidSpec(format!("VolumeSnapshot body: {e}")))?;
            match vss.create(&PostParams::default(), &body).await {
                Ok(vs) => serde_json::to_value(vs).unwrap_or_default(),
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    return Ok(Err(Outcome::Waiting(format!("VolumeSnapshot {name} created"))));
                }
                Err(kube::Error::Api(e)) if e.code == 404 => return Ok(Err(Outcome::Refused(no_snapshot_api()))),
                Err(e) => return Err(Error::api("create VolumeSnapshot", e)),
            }
        }
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(Err(Outcome::Refused(no_snapshot_api()))),
        Err(e) => return Err(Error::api("read VolumeSnapshot", e)),
    };
    Ok(match snap_state(&vs) {
        SnapState::Ready { restore_size } => Ok(restore_size),
        SnapState::Pending { error: Some(e) } if permanent_snapshot_error(&e) => Err(Outcome::Refused(format!(
            "VolumeSnapshot {name} of PVC {source_pvc} failed with an error retrying cannot fix: {e}"
        ))),
        SnapState::Pending { error: Some(e) } => {
            Err(Outcome::Waiting(format!("VolumeSnapshot {name} of PVC {source_pvc} is not ready: {e}")))
        }
        SnapState::Pending { error: None } => {
            Err(Outcome::Waiting(format!("waiting for VolumeSnapshot {name} of PVC {source_pvc} to be ready")))
        }
    })
}

fn no_snapshot_api() -> String {
    "copyMethod: Snapshot needs the CSI snapshot API (snapshot.storage.k8s.io/v1 VolumeSnapshot), which this cluster does not serve: install the external-snapshotter CRDs and snapshot-controller with a CSI driver, or set copyMethod: Direct".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "kopiur.home-operations.com/v1alpha1".into(),
            kind: "Snapshot".into(),
            name: "s".into(),
            uid: "u-1".into(),
            controller: Some(true),
            block_owner_deletion: Some(false),
        }
    }

    fn source() -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "app"},
            "spec": {"storageClassName": "csi", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Bound", "capacity": {"storage": "2Gi"}}
        }))
        .unwrap()
    }

    #[test]
    fn a_volume_snapshot_names_its_source_and_class_and_is_owned() {
        let v = volume_snapshot("kopiur-stage-u-1", "app", "u-1", "data", Some("fast"), &owner());
        assert_eq!(v["spec"]["source"]["persistentVolumeClaimName"], "data");
        assert_eq!(v["spec"]["volumeSnapshotClassName"], "fast");
        assert_eq!(v["metadata"]["labels"][STAGED_FOR], "u-1");
        assert_eq!(v["metadata"]["ownerReferences"][0]["uid"], "u-1");
        let v = volume_snapshot("n", "app", "u-1", "data", None, &owner());
        assert!(v["spec"].get("volumeSnapshotClassName").is_none(), "no class: the cluster's default class");
    }

    #[test]
    fn a_staged_claim_restores_from_the_snapshot_or_clones_the_source() {
        let snap = staged_claim("n", "u-1", &source(), CopyMethod::Snapshot, None, Quantity("2Gi".into()), &owner());
        let spec = snap.spec.unwrap();
        let ds = spec.data_source.unwrap();
        assert_eq!(
            (ds.api_group.as_deref(), ds.kind.as_str(), ds.name.as_str()),
            (Some("snapshot.storage.k8s.io"), "VolumeSnapshot", "n")
        );
        assert_eq!(spec.storage_class_name.as_deref(), Some("csi"), "the source's class by default");
        assert_eq!(spec.access_modes.unwrap(), ["ReadWriteOnce"]);
        let staging: Staging =
            serde_json::from_value(json!({"storageClassName": "other", "accessModes": ["ReadOnlyMany"]})).unwrap();
        let clone =
            staged_claim("n", "u-1", &source(), CopyMethod::Clone, Some(&staging), Quantity("2Gi".into()), &owner());
        let spec = clone.spec.unwrap();
        let ds = spec.data_source.unwrap();
        assert_eq!((ds.api_group, ds.kind.as_str(), ds.name.as_str()), (None, "PersistentVolumeClaim", "data"));
        assert_eq!(spec.storage_class_name.as_deref(), Some("other"));
        assert_eq!(spec.access_modes.unwrap(), ["ReadOnlyMany"]);
        assert_eq!(clone.metadata.namespace.as_deref(), Some("app"));
    }

    #[test]
    fn the_size_is_the_restore_size_then_the_capacity_then_the_request() {
        assert_eq!(staged_size(&source(), Some("3Gi")), Some(Quantity("3Gi".into())));
        assert_eq!(staged_size(&source(), Some("0")), Some(Quantity("2Gi".into())));
        assert_eq!(staged_size(&source(), None), Some(Quantity("2Gi".into())));
        let mut s = source();
        s.status = None;
        assert_eq!(staged_size(&s, None), Some(Quantity("1Gi".into())));
    }

    /// issue 18: transient snapshot errors are retried within the timeout; a permanent one
    /// (by the driver's gRPC code) fails the run at once with the driver's message.
    #[test]
    fn a_snapshot_error_is_permanent_only_by_its_grpc_code() {
        let wrap = |code: &str| {
            format!(
                "Failed to check and update snapshot content: failed to take snapshot of the volume vol-1: \"rpc error: code = {code} desc = the array said no\""
            )
        };
        for code in ["InvalidArgument", "Unimplemented", "PermissionDenied", "NotFound", "AlreadyExists"] {
            assert!(permanent_snapshot_error(&wrap(code)), "{code}");
        }
        for code in
            ["Unavailable", "ResourceExhausted", "Aborted", "DeadlineExceeded", "Internal", "FailedPrecondition"]
        {
            assert!(!permanent_snapshot_error(&wrap(code)), "{code}");
        }
        // No code at all (the snapshot-controller's own errors): retried until the timeout.
        assert!(!permanent_snapshot_error("Failed to create snapshot content with error snapshot controller failed"));
        assert!(!permanent_snapshot_error("code = InvalidArgumentish desc = x"));
    }

    #[test]
    fn a_snapshot_is_ready_only_when_ready_to_use_and_carries_its_error() {
        assert_eq!(
            snap_state(&json!({"status": {"readyToUse": true, "restoreSize": "1Gi"}})),
            SnapState::Ready { restore_size: Some("1Gi".into()) }
        );
        assert_eq!(snap_state(&json!({})), SnapState::Pending { error: None });
        assert_eq!(
            snap_state(&json!({"status": {"readyToUse": false, "error": {"message": "driver busy"}}})),
            SnapState::Pending { error: Some("driver busy".into()) }
        );
    }

    #[test]
    fn the_snapshot_class_is_the_requested_one_for_the_driver_or_its_one_default() {
        let class = |name: &str, driver: &str, default: bool| {
            let mut c = json!({"metadata": {"name": name}, "driver": driver});
            if default {
                c["metadata"]["annotations"] = json!({DEFAULT_CLASS_ANNOTATION: "true"});
            }
            c
        };
        let classes = [class("a", "d1", true), class("b", "d1", false), class("c", "d2", true)];
        assert_eq!(pick_class(Some("b"), &classes, "d1"), Ok("b".into()));
        assert_eq!(pick_class(None, &classes, "d1"), Ok("a".into()));
        assert_eq!(pick_class(None, &classes, "d2"), Ok("c".into()));
        let missing = pick_class(Some("x"), &classes, "d1").unwrap_err();
        assert_eq!(missing, "VolumeSnapshotClass x (spec.volumeSnapshotClassName) does not exist");
        let other = pick_class(Some("c"), &classes, "d1").unwrap_err();
        assert!(other.contains("is for driver d2, and the source is provisioned by d1"), "{other}");
        let none = pick_class(None, &classes, "d3").unwrap_err();
        assert!(none.starts_with("no default VolumeSnapshotClass for driver d3"), "{none}");
        let two = [class("a", "d1", true), class("b", "d1", true)];
        assert!(pick_class(None, &two, "d1").unwrap_err().contains("has 2 default VolumeSnapshotClasses (a, b)"));
    }

    #[test]
    fn the_timeout_defaults_to_ten_minutes_and_zero_waits_forever() {
        assert_eq!(timeout(None), Some(Duration::from_secs(600)));
        let s: Staging = serde_json::from_value(json!({"timeout": "0s"})).unwrap();
        assert_eq!(timeout(Some(&s)), None);
        let s: Staging = serde_json::from_value(json!({"timeout": "90s"})).unwrap();
        assert_eq!(timeout(Some(&s)), Some(Duration::from_secs(90)));
    }

    #[test]
    fn only_a_true_staging_condition_holds_objects() {
        let c = |status: &str| Condition {
            type_: CONDITION.into(),
            status: status.into(),
            reason: "r".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: crate::conditions::ktime(chrono::Utc::now()),
        };
        assert!(held(&[c("True")]).is_some());
        assert!(held(&[c("False")]).is_none());
        assert!(held(&[]).is_none());
    }
}
