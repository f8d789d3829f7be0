//! Pruning a Snapshot on kopiur's own decision: stamp who pruned it, then delete. Shared by the
//! SnapshotSchedule and SnapshotPolicy reconcilers (crate root).

use kopiur_api::Snapshot;
use kopiur_api::names::annotation;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};

use crate::error::Error;

/// Stamp, then delete. If the stamp fails the DELETE is not sent: an unstamped prune would
/// read as an external deletion.
pub async fn stamp_and_delete(api: &Api<Snapshot>, name: &str, value: &str) -> Result<(), Error> {
    let body = serde_json::json!({"metadata": {"annotations": {annotation::PRUNED_BY: value}}});
    match api.patch(name, &PatchParams::default(), &Patch::Merge(&body)).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
        Err(e) => return Err(Error::api("stamp pruned-by on Snapshot", e)),
    }
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(Error::api("delete pruned Snapshot", e)),
    }
}
