//! [next] fields end to end (docs/design/api-contract.md §1.9) on a private control plane, process node, Garage
//! and the real mover: a Repository with advisory fields becomes Ready and carries
//! `FeaturesIgnored=True / NotImplemented` (one Warning Event for the generation, the condition
//! gone once the fields are); a Repository with a gating field (`s3.auth.workloadIdentity`) is
//! `Pending`, `Stalled / FeatureNotImplemented`, with no Job, and proceeds to Ready once the field
//! is removed. `copyMethod: Snapshot` and `Clone` on this node, which runs no CSI driver: each
//! run fails `StagingFailed` with the reason, launches no Job and leaves no staged object.
mod support;

use std::time::Duration;

use anyhow::{Result, bail, ensure};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kopiur_api::{Repository, Snapshot};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::json;
use support::repos::{apply, claim, policy};
use support::status::{events_about, repo_condition as cond, repo_phase as phase, snap_condition, snap_phase};
use support::{Harness, wait_for};

async fn events(h: &Harness, ns: &str, name: &str, reason: &str) -> Result<usize> {
    Ok(events_about(&h.client, ns, name, reason)
        .await?
        .iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .count())
}

async fn jobs_of(h: &Harness, ns: &str, name: &str) -> Result<Vec<String>> {
    let jobs: Api<Job> = Api::namespaced(h.client.clone(), ns);
    Ok(jobs
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|j| j.metadata.owner_references.iter().flatten().any(|o| o.name == name))
        .filter_map(|j| j.metadata.name)
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advisory_fields_are_reported_and_gating_fields_refused() -> Result<()> {
    let mut h = Harness::start().await?;
    h.start_operator().await?;
    let _guard = h.env.log_guard();
    let ns = h.env.namespace("features").await?;
    let repos: Api<Repository> = Api::namespaced(h.client.clone(), &ns);
    let t = Duration::from_secs(240);

    // Gating: workload identity on S3 (the movers have none yet).
    let endpoint = format!("http://{}", h.garage.s3_addr());
    let wi_backend = json!({"s3": {"bucket": h.garage.bucket(), "endpoint": endpoint, "region": h.garage.region(),
        "prefix": "wi/", "auth": {"workloadIdentity": {"serviceAccountName": "backup-sa"}}}});
    h.repository(&ns, "wi", "wi/", json!({"backend": wi_backend})).await?;
    // Advisory: server and concurrency.
    h.repository(&ns, "adv", "adv/", json!({"server": {}, "concurrency": {"maxConcurrentJobs": 1}})).await?;

    let wi_msg = "spec.backend.s3.auth.workloadIdentity is not implemented in this release";
    wait_for("wi Stalled FeatureNotImplemented", t, &h.log(), || async {
        let r = repos.get("wi").await?;
        Ok(cond(&r, "Stalled")
            .is_some_and(|(s, reason, m)| s == "True" && reason == "FeatureNotImplemented" && m == wi_msg)
            .then_some(()))
    })
    .await?;
    h.wait_repository_ready(&ns, "adv", t).await?;

    // The advisory repository works and says what it ignores.
    let adv = repos.get("adv").await?;
    assert_eq!(
        cond(&adv, "FeaturesIgnored"),
        Some((
            "True".into(),
            "NotImplemented".into(),
            "spec.server, spec.concurrency are not implemented in this release and are ignored".into()
        ))
    );
    assert_eq!(cond(&adv, "Ready").map(|c| c.0), Some("True".into()));

    // The gated repository: Pending, Ready=False, never a Job.
    let wi = repos.get("wi").await?;
    assert_eq!(phase(&wi), "Pending");
    assert_eq!(cond(&wi, "Ready"), Some(("False".into(), "FeatureNotImplemented".into(), wi_msg.into())));
    // Both repositories keep reconciling (the advisory one launched and cleaned up its Jobs).
    tokio::time::sleep(Duration::from_secs(15)).await;
    ensure!(jobs_of(&h, &ns, "wi").await?.is_empty(), "a gated repository launched a Job");
    let wi = repos.get("wi").await?;
    assert_eq!(phase(&wi), "Pending");
    // One Warning Event each for the generation, however many reconciles ran.
    assert_eq!(events(&h, &ns, "wi", "FeatureNotImplemented").await?, 1);
    assert_eq!(events(&h, &ns, "adv", "FeaturesIgnored").await?, 1);

    // Removing the advisory fields removes the condition; the repository stays Ready.
    repos
        .patch("adv", &PatchParams::default(), &Patch::Merge(json!({"spec": {"server": null, "concurrency": null}})))
        .await?;
    wait_for("adv: FeaturesIgnored gone", t, &h.log(), || async {
        let r = repos.get("adv").await?;
        let gone = cond(&r, "FeaturesIgnored").is_none()
            && r.status.as_ref().and_then(|s| s.observed_generation) == r.metadata.generation;
        Ok(gone.then_some(()))
    })
    .await?;
    assert_eq!(phase(&repos.get("adv").await?), "Ready");

    // Removing the gating field lifts the refusal: the repository bootstraps and is Ready.
    repos
        .patch("wi", &PatchParams::default(), &Patch::Merge(json!({"spec": {"backend": {"s3": {"auth": null}}}})))
        .await?;
    h.wait_repository_ready(&ns, "wi", t).await?;
    let wi = repos.get("wi").await?;
    assert_eq!(cond(&wi, "Stalled").map(|c| c.0), Some("False".into()));

    // CSI staging without a CSI driver: refused per run with the reason, never run as Direct.
    apply(&h.client, &ns, claim(&ns, "data")).await?;
    let snaps: Api<Snapshot> = Api::namespaced(h.client.clone(), &ns);
    for method in ["Snapshot", "Clone"] {
        let p = format!("p-{}", method.to_lowercase());
        apply(&h.client, &ns, policy(&ns, &p, json!({"name": "adv"}), "data", json!({"copyMethod": method}))).await?;
        apply(
            &h.client,
            &ns,
            json!({"apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": p, "namespace": &ns}, "spec": {"policyRef": {"name": p}}}),
        )
        .await?;
        let s = match wait_for(&format!("{p} Failed"), t, &h.log(), || async {
            let s = snaps.get(&p).await?;
            let released = snap_condition(&s, "Staging").is_some_and(|c| c.status == "False" && c.reason == "Released");
            Ok((snap_phase(&s) == "Failed" && released).then_some(s))
        })
        .await
        {
            Ok(s) => s,
            Err(e) => bail!("{e:#}\n{p}: {:?}", snaps.get(&p).await.map(|s| s.status)),
        };
        let ready = snap_condition(&s, "Ready").expect("Ready");
        assert_eq!(ready.reason, "StagingFailed", "{method}");
        ensure!(
            ready.message.contains(&format!("copyMethod: {method} needs a CSI driver"))
                && ready.message.contains("which has no CSIDriver object; set copyMethod: Direct"),
            "{method}: {}",
            ready.message
        );
        ensure!(jobs_of(&h, &ns, &p).await?.is_empty(), "{method}: a refused staging launched a Job");
    }
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(h.client.clone(), &ns);
    let staged: Vec<String> = pvcs
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .filter(|n| n.starts_with("kopiur-stage-"))
        .collect();
    ensure!(staged.is_empty(), "staged PVCs left: {staged:?}");
    Ok(())
}
