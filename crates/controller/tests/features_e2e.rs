//! [next] fields end to end (docs/design/api-contract.md §1.9) on a private control plane, process node, Garage
//! and the real mover: a Repository with advisory fields becomes Ready and carries
//! `FeaturesIgnored=True / NotImplemented` (one Warning Event for the generation, the condition
//! gone once the fields are); a Repository with a gating field (`s3.auth.workloadIdentity`) is
//! `Pending`, `Stalled / FeatureNotImplemented`, with no Job, and proceeds to Ready once the field
//! is removed. `copyMethod: Snapshot` and `Clone` on this node, which runs no CSI driver: each
//! run fails `StagingFailed` with the reason, launches no Job and leaves no staged object.
//!
//! Beside it, on an environment of its own, the namespaced install mode (chart value
//! `watchNamespaces`, audit finding 1.3): under the chart's RBAC for it the controller holds no
//! ClusterRole that reads Secrets, may read Secrets in its served namespace and nowhere else,
//! bootstraps a Repository and backs up a PVC there (the kopia snapshot checked with kopia), and
//! leaves a namespace it does not serve alone.
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
use support::status::{StatusExt, condition_parts as cond, events_about};
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
    assert_eq!(wi.phase(), "Pending");
    assert_eq!(cond(&wi, "Ready"), Some(("False".into(), "FeatureNotImplemented".into(), wi_msg.into())));
    // Both repositories keep reconciling (the advisory one launched and cleaned up its Jobs).
    tokio::time::sleep(Duration::from_secs(15)).await;
    ensure!(jobs_of(&h, &ns, "wi").await?.is_empty(), "a gated repository launched a Job");
    let wi = repos.get("wi").await?;
    assert_eq!(wi.phase(), "Pending");
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
    assert_eq!(repos.get("adv").await?.phase(), "Ready");

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
            let released =
                s.condition("Staging").cloned().is_some_and(|c| c.status == "False" && c.reason == "Released");
            Ok((s.phase() == "Failed" && released).then_some(s))
        })
        .await
        {
            Ok(s) => s,
            Err(e) => bail!("{e:#}\n{p}: {:?}", snaps.get(&p).await.map(|s| s.status)),
        };
        let ready = s.condition("Ready").cloned().expect("Ready");
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

/// Audit 1.3: the namespaced install mode installs and backs up with no ClusterRole that reads
/// Secrets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_namespaced_install_backs_up_without_reading_secrets_cluster_wide() -> Result<()> {
    use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use kube::api::PostParams;
    let mut h = Harness::start().await?;
    let (apps, other) = futures::try_join!(h.env.namespace("apps"), h.env.namespace("other"))?;
    h.start_operator_namespaced(&[&apps]).await?;
    let _guard = h.env.log_guard();
    let sa = format!("system:serviceaccount:{}:kopiur-controller", h.op_ns);

    // No ClusterRole bound to the controller reads Secrets (or everything).
    let bindings = Api::<ClusterRoleBinding>::all(h.client.clone()).list(&ListParams::default()).await?.items;
    let mine: Vec<String> = bindings
        .iter()
        .filter(|b| {
            b.subjects.iter().flatten().any(|s| {
                s.kind == "ServiceAccount"
                    && s.name == "kopiur-controller"
                    && s.namespace.as_deref() == Some(h.op_ns.as_str())
            })
        })
        .map(|b| b.role_ref.name.clone())
        .collect();
    ensure!(!mine.is_empty(), "the controller holds its cluster-scoped ClusterRole");
    let roles: Api<ClusterRole> = Api::all(h.client.clone());
    for name in &mine {
        let r = roles.get(name).await?;
        for rule in r.rules.iter().flatten() {
            let res = rule.resources.clone().unwrap_or_default();
            ensure!(
                !res.iter().any(|x| x == "secrets" || x == "*"),
                "ClusterRole {name}, bound to {sa}, reads Secrets: {rule:?}"
            );
        }
    }
    // What the apiserver says (kubectl auth can-i, as the controller's token).
    let kc = h.env.state_dir().join("namespaced-controller.kubeconfig");
    h.env.cp.service_account_kubeconfig(&h.op_ns, "kopiur-controller", &kc).await?;
    let controller = kopiur_testenv::kubeconfig::client(&kc).await?;
    let can = |ns: &str, verb: &str| {
        let review: SelfSubjectAccessReview = serde_json::from_value(json!({
            "spec": {"resourceAttributes": {"namespace": ns, "verb": verb, "resource": "secrets"}}
        }))
        .expect("a review");
        let api: Api<SelfSubjectAccessReview> = Api::all(controller.clone());
        async move {
            let r = api.create(&PostParams::default(), &review).await?;
            Ok::<bool, anyhow::Error>(r.status.is_some_and(|s| s.allowed))
        }
    };
    ensure!(can(&apps, "list").await?, "the controller may list Secrets in its served namespace");
    ensure!(!can(&other, "list").await?, "the controller may list Secrets in a namespace it does not serve");
    ensure!(!can("", "list").await?, "the controller may list Secrets cluster-wide");
    ensure!(!can(&other, "watch").await?, "the controller may watch Secrets in a namespace it does not serve");
    println!(
        "[namespaced] ClusterRoles {mine:?}: no Secrets; can-i list secrets: {apps} yes, {other} no, cluster-wide no"
    );

    // It installs and backs up in its namespace.
    let k = h.kopia_repo("nsmode/").await?;
    h.repository(&apps, "r", "nsmode/", json!({})).await?;
    h.wait_repository_ready(&apps, "r", Duration::from_secs(120)).await?;
    apply(&h.client, &apps, claim(&apps, "data")).await?;
    apply(&h.client, &apps, policy(&apps, "p", json!({"name": "r"}), "data", json!({}))).await?;
    apply(
        &h.client,
        &apps,
        json!({"apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
               "metadata": {"name": "s1", "namespace": apps}, "spec": {"policyRef": {"name": "p"}}}),
    )
    .await?;
    let snaps: Api<Snapshot> = Api::namespaced(h.client.clone(), &apps);
    let id = wait_for("s1 Succeeded", Duration::from_secs(180), &h.log(), || async {
        let s = snaps.get("s1").await?;
        if s.phase() == "Failed" {
            bail!("s1 failed: {:?}", s.status);
        }
        Ok((s.phase() == "Succeeded")
            .then(|| s.status.and_then(|st| st.snapshot).and_then(|x| x.kopia_snapshot_id))
            .flatten())
    })
    .await?;
    ensure!(k.list().await?.contains(&id), "kopia lists the backup {id}");
    println!("[namespaced] Repository Ready and a backup Succeeded in {apps}: kopia snapshot {id}");

    // A namespace it does not serve is left alone: no status, no Job.
    h.repository(&other, "r", "nsother/", json!({})).await?;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let r = Api::<Repository>::namespaced(h.client.clone(), &other).get("r").await?;
    ensure!(r.status.is_none(), "a Repository in {other}, which it does not serve, was reconciled: {:?}", r.status);
    let jobs = Api::<Job>::namespaced(h.client.clone(), &other).list(&ListParams::default()).await?.items;
    ensure!(jobs.is_empty(), "a Job in a namespace it does not serve");
    println!("[namespaced] {other}: not served, untouched after 15 s");

    forbidden_step_stalls_the_object(&h, &apps).await
}

/// Issue #32: a Role missing one verb (`create` on Jobs). The Snapshot goes Stalled with the
/// verb, the resource and the step in its message, a Warning Event `KubeApiForbidden` carries
/// the step as its action, the error is counted structural (never retried as transient), no
/// Job appears; once the verb is granted back, the next reconcile runs the backup.
async fn forbidden_step_stalls_the_object(h: &Harness, apps: &str) -> Result<()> {
    use anyhow::Context as _;
    use k8s_openapi::api::rbac::v1::Role;
    use kube::ResourceExt;
    use kube::api::PostParams;
    let roles: Api<Role> = Api::namespaced(h.client.clone(), apps);
    let has_jobs = |r: &Role| r.rules.iter().flatten().any(|x| x.resources.iter().flatten().any(|y| y == "jobs"));
    let role = roles
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .find(|r| r.name_any().ends_with("-controller") && has_jobs(r))
        .context("the controller's Role in the served namespace")?;
    let mut cut = role.clone();
    for rule in cut.rules.iter_mut().flatten() {
        if rule.resources.iter().flatten().any(|y| y == "jobs") {
            rule.verbs.retain(|v| v != "create" && v != "*");
        }
    }
    roles.replace(&role.name_any(), &PostParams::default(), &cut).await?;
    let errors = |text: &str, class: &str| {
        support::metrics::sum(
            text,
            "kopiur_controller_reconcile_errors_total",
            &[("kind", "Snapshot"), ("class", class)],
        )
    };
    let transient_before = errors(&h.metrics().await?, "transient");

    apply(
        &h.client,
        apps,
        json!({"apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
               "metadata": {"name": "s2", "namespace": apps}, "spec": {"policyRef": {"name": "p"}}}),
    )
    .await?;
    let snaps: Api<Snapshot> = Api::namespaced(h.client.clone(), apps);
    let want = format!("create mover Job: RBAC: the controller may not create jobs.batch in namespace {apps};");
    let stalled = wait_for("s2 Stalled by the missing verb", Duration::from_secs(90), &h.log(), || async {
        let s = snaps.get("s2").await?;
        Ok(s.condition("Stalled").cloned().filter(|c| c.status == "True"))
    })
    .await?;
    ensure!(stalled.reason == "KubeApiForbidden", "Stalled reason: {stalled:?}");
    ensure!(stalled.message.starts_with(&want), "Stalled message: {}", stalled.message);
    let can_i = format!("kubectl auth can-i create jobs.batch -n {apps} --as=system:serviceaccount:");
    ensure!(stalled.message.contains(&can_i), "the message gives the check command: {}", stalled.message);
    let s2 = snaps.get("s2").await?;
    let ready = s2.condition("Ready").cloned().context("s2 has Ready")?;
    ensure!(ready.status == "False" && ready.reason == "KubeApiForbidden", "Ready: {ready:?}");
    let ev = wait_for("the KubeApiForbidden Event", Duration::from_secs(30), &h.log(), || async {
        Ok(events_about(&h.client, apps, "s2", "KubeApiForbidden").await?.into_iter().next())
    })
    .await?;
    let note = ev.note.clone().unwrap_or_default();
    ensure!(ev.type_.as_deref() == Some("Warning"), "{ev:?}");
    ensure!(ev.action.as_deref() == Some("create mover Job"), "Event action: {:?}", ev.action);
    ensure!(note.starts_with(&format!("structural: {want}")), "Event note: {note}");
    println!("[forbidden] s2 Stalled/KubeApiForbidden: {}", stalled.message.lines().next().unwrap_or_default());

    // Not retried as transient: past the 30 s transient requeue nothing changes.
    tokio::time::sleep(Duration::from_secs(40)).await;
    let text = h.metrics().await?;
    let (transient, structural) = (errors(&text, "transient"), errors(&text, "structural"));
    ensure!(transient == transient_before, "Snapshot transient errors {transient_before} -> {transient}");
    ensure!(structural >= 1.0, "the forbidden create was not counted structural: {structural}");
    let s2 = snaps.get("s2").await?;
    ensure!(s2.condition("Stalled").cloned().is_some_and(|c| c.status == "True"), "s2 left Stalled: {:?}", s2.status);
    let jobs = Api::<Job>::namespaced(h.client.clone(), apps).list(&ListParams::default()).await?.items;
    ensure!(
        !jobs.iter().any(|j| j.labels().values().any(|v| v == "s2") || j.name_any().contains("s2")),
        "a Job for s2 exists without the create verb"
    );
    println!("[forbidden] 40 s later: still Stalled, {structural} structural and 0 new transient errors, no Job");

    // The verb granted back: the next reconcile (any change to the object) runs the backup.
    let mut back = roles.get(&role.name_any()).await?;
    back.rules = role.rules.clone();
    roles.replace(&role.name_any(), &PostParams::default(), &back).await?;
    snaps
        .patch(
            "s2",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {"test.kopiur/touch": "1"}}})),
        )
        .await?;
    wait_for("s2 Succeeded once the verb is back", Duration::from_secs(180), &h.log(), || async {
        let s = snaps.get("s2").await?;
        if s.phase() == "Failed" {
            bail!("s2 failed: {:?}", s.status);
        }
        Ok((s.phase() == "Succeeded").then_some(()))
    })
    .await?;
    let s2 = snaps.get("s2").await?;
    ensure!(
        s2.condition("Stalled").cloned().is_none_or(|c| c.status == "False"),
        "Stalled outlived the fix: {:?}",
        s2.status
    );
    println!("[forbidden] verb granted back: s2 Succeeded, Stalled cleared");
    Ok(())
}
