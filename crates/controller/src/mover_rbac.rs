//! The mover's ServiceAccount and its RoleBinding to the shipped `kopiur-mover` ClusterRole, in
//! every namespace a mover Job runs in. Server-side applied once per namespace per process.
use std::collections::HashSet;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{LocalObjectReference, ServiceAccount};
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

use crate::error::Error;
use crate::identity::{FIELD_MANAGER, MOVER_CLUSTER_ROLE, MOVER_SERVICE_ACCOUNT};

/// Applies the mover ServiceAccount and RoleBinding in `ns` unless `ready` already lists it.
/// `pull_secrets` become the ServiceAccount's `imagePullSecrets`, so every mover pod in `ns`
/// gets them (the ServiceAccount admission plugin copies them into the pod).
pub async fn ensure(
    client: &Client,
    ns: &str,
    ready: &Mutex<HashSet<String>>,
    pull_secrets: &[String],
) -> Result<(), Error> {
    if ready.lock().map(|s| s.contains(ns)).unwrap_or(false) {
        return Ok(());
    }
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let meta = || ObjectMeta {
        name: Some(MOVER_SERVICE_ACCOUNT.into()),
        namespace: Some(ns.into()),
        labels: Some(crate::labels::managed_labels()),
        ..Default::default()
    };
    let sa = ServiceAccount {
        metadata: meta(),
        image_pull_secrets: (!pull_secrets.is_empty())
            .then(|| pull_secrets.iter().map(|n| LocalObjectReference { name: n.clone() }).collect()),
        ..Default::default()
    };
    Api::<ServiceAccount>::namespaced(client.clone(), ns).patch(MOVER_SERVICE_ACCOUNT, &pp, &Patch::Apply(&sa)).await?;
    let rb = RoleBinding {
        metadata: meta(),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: MOVER_CLUSTER_ROLE.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: MOVER_SERVICE_ACCOUNT.into(),
            namespace: Some(ns.into()),
            api_group: None,
        }]),
    };
    Api::<RoleBinding>::namespaced(client.clone(), ns).patch(MOVER_SERVICE_ACCOUNT, &pp, &Patch::Apply(&rb)).await?;
    if let Ok(mut s) = ready.lock() {
        s.insert(ns.to_string());
    }
    Ok(())
}
