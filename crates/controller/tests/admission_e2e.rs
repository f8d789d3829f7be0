//! `pruned-by` is read-only to users (docs/design/mass-deletion.md §6.1): the chart's ValidatingAdmissionPolicy,
//! rendered by `helm template` and applied to a real kube-apiserver, refuses every CREATE or
//! UPDATE of a Snapshot by anyone but the controller's ServiceAccount that sets, changes or
//! removes the annotation, and lets every other edit through. The controller's own stamps under
//! the policy are proven where kopiur prunes (`pipeline_acceptance_e2e` installs it too).
//!
//! The chart's second policy (audit 1.4) lets the controller's own token write only
//! ConfigMaps, ServiceAccounts, Roles and RoleBindings labelled `app.kubernetes.io/managed-by:
//! kopiur`; `pipeline_acceptance_e2e` runs the whole pipeline under it too.
mod support;
use support::admission;

use admission::{CONTROLLER_SA, install_controller_writes_policy, install_pruned_by_policy};
use anyhow::{Context, Result, ensure};
use kopiur_api::Snapshot;
use kopiur_api::names::annotation;
use kopiur_testenv::TestEnv;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn snapshot(name: &str, annotations: Value) -> Result<Snapshot> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"policyRef": {"name": "app"}}
    }))?)
}

fn annotate(value: Value) -> Patch<Value> {
    Patch::Merge(json!({"metadata": {"annotations": {annotation::PRUNED_BY: value}}}))
}

/// A refusal by the policy: 422/403 with the policy's message naming the annotation.
fn refused<T: std::fmt::Debug>(what: &str, r: kube::Result<T>) -> Result<()> {
    match r {
        Err(kube::Error::Api(s)) if (s.code == 422 || s.code == 403) && s.message.contains(annotation::PRUNED_BY) => {
            ensure!(s.message.contains("written only by the kopiur controller"), "{what}: message {:?}", s.message);
            Ok(())
        }
        other => anyhow::bail!("{what}: expected the admission policy to refuse it, got {other:?}"),
    }
}

fn stamp(s: &Snapshot) -> Option<&str> {
    s.metadata.annotations.as_ref()?.get(annotation::PRUNED_BY).map(String::as_str)
}

#[tokio::test]
async fn pruned_by_is_written_only_by_the_controller() -> Result<()> {
    let env = &TestEnv::start(kopiur_testenv::Options { node_agent: false, ..Default::default() }).await?;
    let _guard = env.log_guard();
    let admin = env.client().await?;
    let op_ns = env.namespace("kopiur-system").await?;
    let ns = env.namespace("apps").await?;

    // The controller's identity: its ServiceAccount, bound to the generated controller role
    // exactly as a test operator is (Snapshots: get, patch, delete…).
    let rbac = std::fs::read_to_string(kopiur_testenv::controlplane::repo_root().join("deploy/rbac/kopiur-rbac.yaml"))?;
    kopiur_testenv::apply::apply_yaml(&admin, &op_ns, &rbac).await?;
    kopiur_testenv::apply::apply_value(
        &admin,
        &op_ns,
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": format!("kopiur-controller-{op_ns}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kopiur-controller"},
            "subjects": [{"kind": "ServiceAccount", "name": CONTROLLER_SA, "namespace": op_ns}]
        }),
    )
    .await?;
    let kc = env.state_dir().join("controller-sa.kubeconfig");
    env.cp.service_account_kubeconfig(&op_ns, CONTROLLER_SA, &kc).await?;
    let controller = kopiur_testenv::kubeconfig::client(&kc).await?;

    let first = install_pruned_by_policy(&admin, &op_ns, &ns).await?;
    println!("policy enforced; its refusal reads: {first}");

    let users: Api<Snapshot> = Api::namespaced(admin.clone(), &ns);
    let ctl: Api<Snapshot> = Api::namespaced(controller.clone(), &ns);
    let pp = PostParams::default();
    let patch = PatchParams::default();

    // CREATE: a user may not create a Snapshot already stamped (not even with an unknown value);
    // without the stamp it is created as before.
    refused(
        "user CREATE with pruned-by",
        users.create(&pp, &snapshot("stamped", json!({annotation::PRUNED_BY: "retention"}))?).await,
    )?;
    refused(
        "user CREATE with an unknown pruned-by",
        users.create(&pp, &snapshot("odd", json!({annotation::PRUNED_BY: "me"}))?).await,
    )?;
    users.create(&pp, &snapshot("a", json!({"team": "media"}))?).await.context("a plain CREATE")?;

    // UPDATE by a user: adding the stamp is refused; every other edit goes through.
    refused("user adds pruned-by", users.patch("a", &patch, &annotate(json!("retention"))).await)?;
    users
        .patch(
            "a",
            &patch,
            &Patch::Merge(json!({"metadata": {"annotations": {"team": "music"}, "labels": {"x": "y"}}})),
        )
        .await
        .context("a user's unrelated edit")?;

    // The controller stamps it (its own prune): allowed.
    let s = ctl.patch("a", &patch, &annotate(json!("retention"))).await.context("the controller's stamp")?;
    ensure!(stamp(&s) == Some("retention"), "stamp stored: {:?}", stamp(&s));

    // A user may neither change nor remove the controller's stamp, and the stored value is intact.
    refused("user changes pruned-by", users.patch("a", &patch, &annotate(json!("failed-history"))).await)?;
    refused("user removes pruned-by", users.patch("a", &patch, &annotate(Value::Null)).await)?;
    let mut replaced = users.get("a").await?;
    replaced.metadata.annotations.as_mut().expect("annotations").remove(annotation::PRUNED_BY);
    refused("user replaces the object without pruned-by", users.replace("a", &pp, &replaced).await)?;
    ensure!(stamp(&users.get("a").await?) == Some("retention"), "the refused edits left the stamp as it was");
    // Unrelated edits of a stamped Snapshot still go through (the stamp is carried unchanged).
    users
        .patch("a", &patch, &Patch::Merge(json!({"metadata": {"labels": {"x": "z"}}})))
        .await
        .context("a user's unrelated edit of a stamped Snapshot")?;

    // The controller may change and remove it.
    ctl.patch("a", &patch, &annotate(json!("replaced-run"))).await.context("the controller changes its stamp")?;
    let s = ctl.patch("a", &patch, &annotate(Value::Null)).await.context("the controller removes its stamp")?;
    ensure!(stamp(&s).is_none(), "stamp removed");
    // The controller may also create a stamped Snapshot (no path does today; the policy allows it).
    ctl.create(&pp, &snapshot("b", json!({annotation::PRUNED_BY: "retention"}))?).await.context("controller CREATE")?;

    controller_writes_only_its_own(&admin, &controller, &op_ns, &ns).await.context("the controller-writes policy")
}

/// A refusal by the controller-writes policy: 403/422 naming the label.
fn not_its_own<T: std::fmt::Debug>(what: &str, r: kube::Result<T>) -> Result<()> {
    match r {
        Err(kube::Error::Api(s))
            if (s.code == 422 || s.code == 403)
                && s.message.contains("labelled app.kubernetes.io/managed-by=kopiur") =>
        {
            Ok(())
        }
        other => anyhow::bail!("{what}: expected the controller-writes policy to refuse it, got {other:?}"),
    }
}

/// Audit 1.4: with the chart's controller-writes policy, the controller's own token (bound to
/// the generated controller role, which grants ConfigMaps, ServiceAccounts and RoleBindings in
/// every namespace) creates, changes and deletes kopiur's labelled objects, and nothing else:
/// not an unlabelled ConfigMap of another owner (patch, delete, or a takeover by adding the
/// label), not an unlabelled ServiceAccount or RoleBinding. Other users are not affected.
async fn controller_writes_only_its_own(
    admin: &kube::Client,
    controller: &kube::Client,
    op_ns: &str,
    ns: &str,
) -> Result<()> {
    use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
    use k8s_openapi::api::rbac::v1::RoleBinding;
    use kube::api::DeleteParams;
    let first = install_controller_writes_policy(admin, controller, op_ns, ns).await?;
    println!("controller-writes policy enforced; its refusal reads: {first}");
    let ours = json!({"app.kubernetes.io/managed-by": "kopiur"});
    let pp = PostParams::default();
    let patch = PatchParams::default();
    let cm = |name: &str, labels: Value| -> Result<ConfigMap> {
        Ok(serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}))?)
    };
    let ctl_cms: Api<ConfigMap> = Api::namespaced(controller.clone(), ns);
    let admin_cms: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);

    // Its own: create, change, delete.
    ctl_cms.create(&pp, &cm("kopiur-own", ours.clone())?).await.context("the controller creates its own ConfigMap")?;
    ctl_cms
        .patch("kopiur-own", &patch, &Patch::Merge(json!({"data": {"k": "w"}})))
        .await
        .context("the controller changes its own ConfigMap")?;
    ctl_cms.delete("kopiur-own", &DeleteParams::default()).await.context("the controller deletes its own ConfigMap")?;
    // Anyone else's: not created, not changed, not taken over, not deleted.
    not_its_own("controller creates an unlabelled ConfigMap", ctl_cms.create(&pp, &cm("stray", json!({}))?).await)?;
    admin_cms.create(&pp, &cm("aws-auth", json!({"team": "platform"}))?).await.context("the admin's ConfigMap")?;
    not_its_own(
        "controller patches another owner's ConfigMap",
        ctl_cms.patch("aws-auth", &patch, &Patch::Merge(json!({"data": {"k": "evil"}}))).await,
    )?;
    not_its_own(
        "controller takes another owner's ConfigMap over by labelling it",
        ctl_cms.patch("aws-auth", &patch, &Patch::Merge(json!({"metadata": {"labels": ours.clone()}}))).await,
    )?;
    not_its_own(
        "controller deletes another owner's ConfigMap",
        ctl_cms.delete("aws-auth", &DeleteParams::default()).await,
    )?;
    let kept = admin_cms.get("aws-auth").await?;
    ensure!(
        kept.data.as_ref().and_then(|d| d.get("k")).map(String::as_str) == Some("v"),
        "the admin's ConfigMap changed"
    );
    // The admin is not affected by the policy.
    admin_cms.delete("aws-auth", &DeleteParams::default()).await.context("the admin deletes its ConfigMap")?;

    // ServiceAccounts and RoleBindings: the mover's (labelled, as the controller applies them) only.
    let sas: Api<ServiceAccount> = Api::namespaced(controller.clone(), ns);
    let apply = PatchParams::apply("kopiur-controller").force();
    sas.patch(
        "kopiur-mover",
        &apply,
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ServiceAccount",
                             "metadata": {"name": "kopiur-mover", "labels": ours.clone()}})),
    )
    .await
    .context("the controller applies the mover's ServiceAccount")?;
    not_its_own(
        "controller creates an unlabelled ServiceAccount",
        sas.create(&pp, &serde_json::from_value(json!({"metadata": {"name": "stray"}}))?).await,
    )?;
    let rbs: Api<RoleBinding> = Api::namespaced(controller.clone(), ns);
    let rb = |labels: Value| -> Result<RoleBinding> {
        Ok(serde_json::from_value(json!({
            "metadata": {"name": "kopiur-mover", "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kopiur-mover"},
            "subjects": [{"kind": "ServiceAccount", "name": "kopiur-mover", "namespace": ns}]
        }))?)
    };
    not_its_own("controller creates an unlabelled RoleBinding", rbs.create(&pp, &rb(json!({}))?).await)?;
    rbs.create(&pp, &rb(ours)?).await.context("the controller creates the mover's RoleBinding")?;
    println!(
        "controller-writes: its own ConfigMap, ServiceAccount and RoleBinding written; 6 writes of others' refused"
    );
    Ok(())
}
