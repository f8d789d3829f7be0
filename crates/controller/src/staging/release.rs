//! The release of a finished run's staged objects (`crate::staging`): deleted, followed until
//! gone, and nudged when a CSI sidecar left a deletion for its resync.
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::{BEING_CREATED, NUDGE_EVERY, RELEASE_REQUESTED_AT, staged_name, volume_snapshot_resource};
use crate::error::Error;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;

/// The VolumeSnapshotContent API (cluster-scoped), whose objects the snapshotter creates for a
/// VolumeSnapshot.
pub fn volume_snapshot_content_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("snapshot.storage.k8s.io", "v1", "VolumeSnapshotContent"),
        "volumesnapshotcontents",
    )
}

/// The content the snapshot-controller creates for a dynamically provisioned VolumeSnapshot
/// (its naming scheme: `snapcontent-<VolumeSnapshot uid>`).
pub fn dynamic_content_name(vs_uid: &str) -> String {
    format!("snapcontent-{vs_uid}")
}

/// What a release pass found still there. A staged object that is deleted and not gone is
/// looked at again and, from its second look on, nudged (see [`nudge_due`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Left {
    /// The staged PVC (held by `kubernetes.io/pvc-protection` while the mover's pod exists).
    pub claim: Option<String>,
    /// The staged VolumeSnapshot.
    pub snapshot: Option<String>,
    pub content: Option<ContentLeft>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContentLeft {
    pub name: String,
    /// The snapshotter's CreateSnapshot has not answered yet: the content (and its
    /// VolumeSnapshot) are deleted only once it does, so no snapshot leaks on the storage.
    pub being_created: bool,
}

impl Left {
    pub fn gone(&self) -> bool {
        self.claim.is_none() && self.snapshot.is_none() && self.content.is_none()
    }

    /// What is left and why, for the `Staging` condition (pure).
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(c) = &self.claim {
            parts.push(format!("PVC {c} (kept while the mover's pod exists)"));
        }
        if let Some(s) = &self.snapshot {
            parts.push(format!("VolumeSnapshot {s}"));
        }
        match &self.content {
            Some(c) if c.being_created => parts.push(format!(
                "VolumeSnapshotContent {} (the CSI driver has not answered CreateSnapshot yet; it is deleted once it does)",
                c.name
            )),
            Some(c) => parts.push(format!("VolumeSnapshotContent {}", c.name)),
            None => {}
        }
        parts.join(", ")
    }

    /// The commands that show why (pure).
    pub fn commands(&self, ns: &str) -> String {
        let mut out = Vec::new();
        if let Some(c) = &self.claim {
            out.push(format!("kubectl -n {ns} describe pvc {c}"));
        }
        if let Some(s) = &self.snapshot {
            out.push(format!("kubectl -n {ns} describe volumesnapshot {s}"));
        }
        if let Some(c) = &self.content {
            out.push(format!("kubectl describe volumesnapshotcontent {}", c.name));
        }
        out.join("; ")
    }
}

/// A staged object kopiur already asked to go is nudged (its [`RELEASE_REQUESTED_AT`]
/// annotation set to now) at most once per [`NUDGE_EVERY`] (pure): an update the CSI sidecars
/// do not make themselves, so the one that owns the object looks at it again at once instead of
/// at its resync (15 minutes by default).
pub fn nudge_due(annotations: &std::collections::BTreeMap<String, String>, now: chrono::DateTime<chrono::Utc>) -> bool {
    match annotations.get(RELEASE_REQUESTED_AT).and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok()) {
        Some(last) => (now - last.with_timezone(&chrono::Utc)).to_std().unwrap_or_default() >= NUDGE_EVERY,
        None => true,
    }
}

async fn nudge(api: &Api<DynamicObject>, name: &str, now: chrono::DateTime<chrono::Utc>) -> Result<(), Error> {
    let touch = json!({"metadata": {"annotations": {RELEASE_REQUESTED_AT: now.to_rfc3339()}}});
    match api.patch(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&touch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(Error::api("nudge staged object", e)),
    }
}

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(e) if e.code == 404)
}

/// One release pass over a run's staged objects: deletes the staged PVC and VolumeSnapshot
/// (404 is done), follows the VolumeSnapshotContent the snapshot-controller deletes with them,
/// and nudges whatever was asked to go in an earlier pass and is still there. Returns what is
/// left; empty once everything is gone.
///
/// Why the nudge: a VolumeSnapshot deleted while the snapshotter still retries CreateSnapshot
/// (the driver answered `Unavailable`) keeps its content until CreateSnapshot succeeds; the
/// csi-snapshotter then removes its own `volumesnapshot-being-created` mark, an update it does
/// not act on, so the deletion that arrived meanwhile can wait for its 15-minute resync. A
/// change of kopiur's annotation on the content is an update it does act on.
pub async fn release(client: &Client, ns: &str, uid: &str, now: chrono::DateTime<chrono::Utc>) -> Result<Left, Error> {
    let name = staged_name(uid);
    let mut left = Left::default();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    match pvcs.delete(&name, &DeleteParams::background()).await {
        Ok(either) => {
            if either.is_left() {
                left.claim = Some(name.clone());
            }
        }
        Err(e) if not_found(&e) => {}
        Err(e) => return Err(Error::api("delete staged PVC", e)),
    }
    let vss: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &volume_snapshot_resource());
    let contents: Api<DynamicObject> = Api::all_with(client.clone(), &volume_snapshot_content_resource());
    let vs = match vss.get_opt(&name).await {
        Ok(vs) => vs,
        // No snapshot API at all: nothing was ever created.
        Err(e) if not_found(&e) => return Ok(left),
        Err(e) => return Err(Error::api("read staged VolumeSnapshot", e)),
    };
    let asked_before = vs.as_ref().is_some_and(|v| v.metadata.deletion_timestamp.is_some());
    let content = match &vs {
        Some(v) => {
            if !asked_before {
                match vss.delete(&name, &DeleteParams::background()).await {
                    Ok(_) => {}
                    Err(e) if not_found(&e) => {}
                    Err(e) => return Err(Error::api("delete staged VolumeSnapshot", e)),
                }
            }
            left.snapshot = Some(name.clone());
            let bound = v.data["status"]["boundVolumeSnapshotContentName"].as_str().filter(|n| !n.is_empty());
            let content_name =
                bound.map(String::from).unwrap_or_else(|| dynamic_content_name(&v.uid().unwrap_or_default()));
            match contents.get_opt(&content_name).await {
                Ok(c) => c,
                Err(e) if not_found(&e) => None,
                Err(e) => return Err(Error::api("read VolumeSnapshotContent", e)),
            }
        }
        // The VolumeSnapshot is gone: a content still pointing at it is looked for by its
        // reference (one LIST, only while a release is not done).
        None => match contents.list(&Default::default()).await {
            Ok(l) => l.items.into_iter().find(|c| {
                let r = &c.data["spec"]["volumeSnapshotRef"];
                r["name"].as_str() == Some(name.as_str()) && r["namespace"].as_str() == Some(ns)
            }),
            Err(e) if not_found(&e) => None,
            Err(e) => return Err(Error::api("list VolumeSnapshotContents", e)),
        },
    };
    if let Some(c) = &content {
        let being_created = c.annotations().get(BEING_CREATED).map(String::as_str) == Some("yes");
        left.content = Some(ContentLeft { name: c.name_any(), being_created });
        // The content is the csi-snapshotter's to finish (its deletion, or the CreateSnapshot
        // retry that must answer first): nudged once the snapshot-controller has deleted it.
        if c.metadata.deletion_timestamp.is_some() && nudge_due(c.annotations(), now) {
            nudge(&contents, &c.name_any(), now).await?;
        }
    }
    // A VolumeSnapshot asked to go in an earlier pass whose content is not being deleted (or
    // is gone): the snapshot-controller's to finish.
    if let Some(v) = &vs
        && asked_before
        && content.as_ref().is_none_or(|c| c.metadata.deletion_timestamp.is_none())
        && nudge_due(v.annotations(), now)
    {
        nudge(&vss, &name, now).await?;
    }
    Ok(left)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// issue 30: a staged object asked to go is nudged at most every 10 s.
    #[test]
    fn a_nudge_repeats_at_most_every_ten_seconds() {
        let now = chrono::Utc::now();
        let at = |t: chrono::DateTime<chrono::Utc>| {
            std::collections::BTreeMap::from([(RELEASE_REQUESTED_AT.to_string(), t.to_rfc3339())])
        };
        assert!(nudge_due(&Default::default(), now), "never nudged");
        assert!(!nudge_due(&at(now - chrono::Duration::seconds(3)), now));
        assert!(nudge_due(&at(now - chrono::Duration::seconds(10)), now));
        let bad = std::collections::BTreeMap::from([(RELEASE_REQUESTED_AT.to_string(), "yesterday".to_string())]);
        assert!(nudge_due(&bad, now), "an unreadable stamp is no reason to wait");
    }

    #[test]
    fn what_is_left_is_named_with_the_commands_that_show_why() {
        assert!(Left::default().gone());
        let left = Left {
            claim: Some("kopiur-stage-u".into()),
            snapshot: Some("kopiur-stage-u".into()),
            content: Some(ContentLeft { name: "snapcontent-v".into(), being_created: false }),
        };
        assert!(!left.gone());
        assert_eq!(
            left.describe(),
            "PVC kopiur-stage-u (kept while the mover's pod exists), VolumeSnapshot kopiur-stage-u, VolumeSnapshotContent snapcontent-v"
        );
        assert_eq!(
            left.commands("app"),
            "kubectl -n app describe pvc kopiur-stage-u; kubectl -n app describe volumesnapshot kopiur-stage-u; kubectl describe volumesnapshotcontent snapcontent-v"
        );
        assert_eq!(dynamic_content_name("1-2"), "snapcontent-1-2");
    }
}
