//! Polling waits: `wait_for` (the environment's, which prints the operator log's tail on a
//! timeout) and the waits every test repeats. The waits that follow a watch instead of
//! polling are `super::phase_watch` and `super::recorder`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kopiur_api::Repository;
use kopiur_testenv::TestEnv;
pub use kopiur_testenv::wait::wait_for;
use kube::{Api, Client, ResourceExt};

use super::status::StatusExt;

/// Waits up to `timeout` for the Repository `ns/name` to be `Ready` (`"{name} Ready"`) and
/// returns it.
pub async fn repository_ready(
    client: &Client,
    ns: &str,
    name: &str,
    timeout: Duration,
    log: &Path,
) -> Result<Repository> {
    let repos: Api<Repository> = Api::namespaced(client.clone(), ns);
    wait_for(&format!("{name} Ready"), timeout, log, || async {
        let r = repos.get(name).await?;
        Ok((r.phase() == "Ready").then_some(r))
    })
    .await
}

/// Waits up to `timeout` (as `what`) for the PVC `ns/name` to be Bound and returns it.
pub async fn pvc_bound(
    client: &Client,
    ns: &str,
    name: &str,
    what: &str,
    timeout: Duration,
    log: &Path,
) -> Result<PersistentVolumeClaim> {
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    wait_for(what, timeout, log, || async {
        let p = pvcs.get(name).await?;
        Ok((p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")).then_some(p))
    })
    .await
}

/// The host directory of a Bound PVC on the process node (write test data straight into it).
pub fn pv_dir(env: &TestEnv, pvc: &PersistentVolumeClaim) -> Result<PathBuf> {
    Ok(kopiur_testenv::node::provisioner::pv_dir(&env.node_state_dir(), &pvc.uid().context("pvc uid")?))
}
