//! The mover's ServiceAccount and its RoleBinding to the shipped `kopiur-mover` ClusterRole, in
//! every namespace a mover Job runs in (server-side applied once per namespace per process), and
//! each run's own Role.
//!
//! Any Pod of a namespace can use that ServiceAccount, so the standing ClusterRole only reads.
//! The one write a run needs (its target's status, or its result ConfigMap) comes from a Role
//! named after the run's Job, listing that one object by `resourceNames`, bound to the
//! ServiceAccount and owned by the Job: created with the Job, collected with it (audit findings
//! 1.1 and 1.2). What the Role lists is read from the Job the controller itself built, never from
//! anything a tenant wrote.
use std::collections::HashSet;
use std::sync::Mutex;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{LocalObjectReference, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kopiur_mover::workspec::WorkSpec;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

use crate::error::{ApiStep, Error};
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
    Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .patch(MOVER_SERVICE_ACCOUNT, &pp, &Patch::Apply(&sa))
        .await
        .step("apply mover ServiceAccount")?;
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
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .patch(MOVER_SERVICE_ACCOUNT, &pp, &Patch::Apply(&rb))
        .await
        .step("apply mover RoleBinding")?;
    if let Ok(mut s) = ready.lock() {
        s.insert(ns.to_string());
    }
    Ok(())
}

/// The kinds whose status a mover run reports to (the others report through a result
/// ConfigMap or their exit): kept in step with the kopiur-mover ClusterRole's reads.
const REPORTS_TO: &[&str] = &["Snapshot", "Restore", "Maintenance", "RepositoryReplication", "SnapshotReplication"];

/// The one run's Role and RoleBinding for `job` (the Job as the controller built it, with its
/// uid once created): `None` when the run writes nothing through the API. Pure, so the rules
/// are tested without a cluster.
pub fn run_role(job: &Job) -> Option<(Role, RoleBinding)> {
    let name = job.metadata.name.clone()?;
    let ns = job.metadata.namespace.clone()?;
    let uid = job.metadata.uid.clone()?;
    let env = job.spec.as_ref()?.template.spec.as_ref()?.containers.first()?.env.as_ref()?;
    let value = |n: &str| env.iter().find(|e| e.name == n).and_then(|e| e.value.clone());
    let mut rules = Vec::new();
    if let Some(spec) = value("KOPIUR_WORK_SPEC").and_then(|s| WorkSpec::from_json(&s).ok()) {
        let t = &spec.target_ref;
        if REPORTS_TO.contains(&t.kind.as_str()) && t.namespace.as_deref() == Some(ns.as_str()) {
            let group = t.api_version.split_once('/').map(|(g, _)| g).unwrap_or_default();
            rules.push(PolicyRule {
                api_groups: Some(vec![group.to_string()]),
                resources: Some(vec![format!("{}/status", kopiur_mover::result::plural(&t.kind))]),
                resource_names: Some(vec![t.name.clone()]),
                verbs: vec!["get".into(), "patch".into()],
                non_resource_urls: None,
            });
        }
    }
    if let Some(cm) = value("KOPIUR_RESULT_CONFIGMAP") {
        rules.push(PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into()]),
            resource_names: Some(vec![cm]),
            verbs: vec!["get".into(), "patch".into()],
            non_resource_urls: None,
        });
    }
    if rules.is_empty() {
        return None;
    }
    let meta = ObjectMeta {
        name: Some(name.clone()),
        namespace: Some(ns.clone()),
        labels: Some(crate::labels::managed_labels()),
        owner_references: Some(vec![OwnerReference {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            name: name.clone(),
            uid,
            controller: Some(true),
            block_owner_deletion: None,
        }]),
        ..Default::default()
    };
    let role = Role { metadata: meta.clone(), rules: Some(rules) };
    let binding = RoleBinding {
        metadata: meta,
        role_ref: RoleRef { api_group: "rbac.authorization.k8s.io".into(), kind: "Role".into(), name },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: MOVER_SERVICE_ACCOUNT.into(),
            namespace: Some(ns),
            api_group: None,
        }]),
    };
    Some((role, binding))
}

/// Applies the run's Role and RoleBinding (idempotent: server-side apply by name).
pub async fn ensure_run_role(client: &Client, job: &Job) -> Result<(), Error> {
    let Some((role, binding)) = run_role(job) else { return Ok(()) };
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    let name = job.metadata.name.clone().unwrap_or_default();
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    Api::<Role>::namespaced(client.clone(), &ns)
        .patch(&name, &pp, &Patch::Apply(&role))
        .await
        .step("apply run Role")?;
    Api::<RoleBinding>::namespaced(client.clone(), &ns)
        .patch(&name, &pp, &Patch::Apply(&binding))
        .await
        .step("apply run RoleBinding")?;
    Ok(())
}

/// How long after a Job finished its run's Role is still revoked on sight. A controller that
/// was down for longer leaves the Role to go with its Job (owned by it, collected with it).
const REVOKE_WINDOW_SECONDS: i64 = 600;

/// Revokes each run's Role once its Job has finished: after its last report the mover's
/// ServiceAccount writes nothing, not even its own run's status. Each finished Job at most once
/// per process (a DELETE of an absent Role is fine).
pub async fn revoke_finished(client: Client, mut jobs: crate::feeds::Subscription<Job>) {
    use futures::StreamExt;
    let mut revoked: HashSet<String> = HashSet::new();
    while let Some(job) = jobs.next().await {
        let Some(uid) = job.metadata.uid.clone() else { continue };
        if revoked.contains(&uid) || !finished_recently(&job, chrono::Utc::now()) {
            continue;
        }
        let managed = job.metadata.labels.as_ref().and_then(|l| l.get(kopiur_mover::job::LABEL_MANAGED_BY));
        if managed.map(String::as_str) != Some("kopiur") {
            continue;
        }
        let (Some(ns), Some(name)) = (job.metadata.namespace.as_deref(), job.metadata.name.as_deref()) else {
            continue;
        };
        if revoked.len() > 10_000 {
            revoked.clear();
        }
        revoked.insert(uid.clone());
        if let Err(err) = revoke(&client, ns, name, &uid).await {
            tracing::warn!(%err, namespace = ns, job = name, "revoking a finished run's Role failed; it goes with its Job");
        }
    }
}

/// Whether `job` finished (Complete or Failed) within the revoke window before `now`.
pub fn finished_recently(job: &Job, now: chrono::DateTime<chrono::Utc>) -> bool {
    let conds = job.status.as_ref().and_then(|s| s.conditions.as_ref());
    conds.into_iter().flatten().any(|c| {
        (c.type_ == "Complete" || c.type_ == "Failed")
            && c.status == "True"
            && c.last_transition_time.as_ref().is_none_or(|t| now.timestamp() - t.0.as_second() < REVOKE_WINDOW_SECONDS)
    })
}

/// Deletes the Role and RoleBinding named `name` in `ns` if the Job `uid` owns them.
async fn revoke(client: &Client, ns: &str, name: &str, uid: &str) -> Result<(), Error> {
    let dp = kube::api::DeleteParams { preconditions: None, ..Default::default() };
    let roles = Api::<Role>::namespaced(client.clone(), ns);
    let owned = |m: &ObjectMeta| m.owner_references.iter().flatten().any(|o| o.kind == "Job" && o.uid == uid);
    if let Some(r) = roles.get_opt(name).await.step("read run Role")?
        && owned(&r.metadata)
    {
        let bindings = Api::<RoleBinding>::namespaced(client.clone(), ns);
        if let Some(b) = bindings.get_opt(name).await.step("read run RoleBinding")?
            && owned(&b.metadata)
        {
            ignore_gone(bindings.delete(name, &dp).await.map(|_| ()), "delete run RoleBinding")?;
        }
        ignore_gone(roles.delete(name, &dp).await.map(|_| ()), "delete run Role")?;
        tracing::debug!(namespace = ns, job = name, "run Role revoked");
    }
    Ok(())
}

fn ignore_gone(r: Result<(), kube::Error>, step: &'static str) -> Result<(), Error> {
    match r {
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        other => other.step(step),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(conditions: serde_json::Value) -> Job {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "apps", "uid": "u"},
            "status": {"conditions": conditions}
        }))
        .unwrap()
    }

    #[test]
    fn a_run_role_is_revoked_once_its_job_finished_within_the_window() {
        let now = chrono::Utc::now();
        let at = |secs: i64| (now - chrono::Duration::seconds(secs)).to_rfc3339();
        let cases = [
            (serde_json::json!([]), false, "running"),
            (
                serde_json::json!([{"type": "Complete", "status": "True", "lastTransitionTime": at(5)}]),
                true,
                "complete",
            ),
            (serde_json::json!([{"type": "Failed", "status": "True", "lastTransitionTime": at(5)}]), true, "failed"),
            (
                serde_json::json!([{"type": "Failed", "status": "False", "lastTransitionTime": at(5)}]),
                false,
                "not failed",
            ),
            (
                serde_json::json!([{"type": "Complete", "status": "True", "lastTransitionTime": at(3600)}]),
                false,
                "finished before the window: left to go with its Job",
            ),
        ];
        for (conds, want, what) in cases {
            assert_eq!(finished_recently(&job(conds), now), want, "{what}");
        }
    }
}
