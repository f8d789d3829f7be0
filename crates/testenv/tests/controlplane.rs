//! Harness self-verification against the real etcd + kube-apiserver + kube-controller-manager:
//! schema defaults and pruning, CEL, ownerReference GC, namespace deletion, RBAC.
use std::time::{Duration, Instant};

use anyhow::Result;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kopiur_testenv::TestEnv;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams, PropagationPolicy,
};
use kube::{Api, Client};
use serde_json::json;

fn widgets(client: Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("testenv.kopiur.test", "v1", "Widget"));
    Api::namespaced_with(client, ns, &ar)
}

fn widget(name: &str, spec: serde_json::Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "testenv.kopiur.test/v1", "kind": "Widget",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap()
}

async fn eventually<F, Fut>(what: &str, timeout: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !f().await {
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn owned_by(owner: &DynamicObject) -> serde_json::Value {
    json!([{
        "apiVersion": "testenv.kopiur.test/v1", "kind": "Widget",
        "name": owner.metadata.name, "uid": owner.metadata.uid, "blockOwnerDeletion": true
    }])
}

fn sleeper_job(name: &str, owner_refs: serde_json::Value) -> Job {
    serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": owner_refs},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", "sleep 600"]}]
        }}}
    }))
    .unwrap()
}

#[tokio::test]
async fn hv1_schema_default_is_materialized_and_unknown_fields_pruned() -> Result<()> {
    let env = TestEnv::shared();
    let _g = env.log_guard();
    let ns = env.namespace("hv1").await?;
    let api = widgets(env.client().await?, &ns);
    let created = api.create(&PostParams::default(), &widget("w", json!({"unknownField": "x"}))).await?;
    let spec = &created.data["spec"];
    assert_eq!(spec["mode"], "Fast", "schema default materialized: {spec}");
    assert_eq!(spec["size"], 1);
    assert!(spec.get("unknownField").is_none(), "unknown field pruned: {spec}");
    Ok(())
}

#[tokio::test]
async fn hv2_cel_rules_reject_with_their_message() -> Result<()> {
    let env = TestEnv::shared();
    let _g = env.log_guard();
    let ns = env.namespace("hv2").await?;
    let api = widgets(env.client().await?, &ns);
    let err = api.create(&PostParams::default(), &widget("big", json!({"size": 11}))).await.unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("spec.size must be at most 10"), "{msg}");
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 422), "{err:?}");

    api.create(&PostParams::default(), &widget("frozen", json!({"size": 2, "frozen": true}))).await?;
    let err =
        api.patch("frozen", &PatchParams::default(), &Patch::Merge(json!({"spec": {"size": 3}}))).await.unwrap_err();
    assert!(err.to_string().contains("immutable once spec.frozen"), "{err}");
    // An allowed update still goes through.
    api.patch("frozen", &PatchParams::default(), &Patch::Merge(json!({"spec": {"mode": "Slow"}}))).await?;
    Ok(())
}

#[tokio::test]
async fn hv3_owner_reference_gc_background_foreground_orphan() -> Result<()> {
    let env = TestEnv::shared();
    let _g = env.log_guard();
    let ns = env.namespace("hv3").await?;
    let client = env.client().await?;
    let w = widgets(client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);

    // Background: owner deleted -> ConfigMap and Job (and its running pod) go.
    let owner = w.create(&PostParams::default(), &widget("bg", json!({}))).await?;
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "bg-cm", "ownerReferences": owned_by(&owner)}}))?;
    cms.create(&PostParams::default(), &cm).await?;
    jobs.create(&PostParams::default(), &sleeper_job("bg-job", owned_by(&owner))).await?;
    eventually("the Job's pod is Running", Duration::from_secs(30), || async {
        pods.list(&Default::default())
            .await
            .map(|l| l.items.iter().any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")))
            .unwrap_or(false)
    })
    .await;
    w.delete("bg", &DeleteParams::background()).await?;
    eventually("ConfigMap and Job garbage-collected", Duration::from_secs(10), || async {
        cms.get_opt("bg-cm").await.unwrap().is_none() && jobs.get_opt("bg-job").await.unwrap().is_none()
    })
    .await;
    eventually("the Job's pod is gone (process ended by the node agent)", Duration::from_secs(30), || async {
        pods.list(&Default::default()).await.map(|l| l.items.is_empty()).unwrap_or(false)
    })
    .await;

    // Foreground: the owner carries foregroundDeletion until its dependents are gone.
    let owner = w.create(&PostParams::default(), &widget("fg", json!({}))).await?;
    let cm: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "fg-cm", "ownerReferences": owned_by(&owner), "finalizers": ["testenv.kopiur.test/hold"]}}),
    )?;
    cms.create(&PostParams::default(), &cm).await?;
    w.delete("fg", &DeleteParams::foreground()).await?;
    eventually("dependent marked for deletion by the foreground cascade", Duration::from_secs(10), || async {
        cms.get("fg-cm").await.unwrap().metadata.deletion_timestamp.is_some()
    })
    .await;
    let held = w.get("fg").await?;
    assert!(held.metadata.finalizers.unwrap_or_default().contains(&"foregroundDeletion".to_string()));
    cms.patch("fg-cm", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await?;
    eventually("foreground owner gone after its dependent", Duration::from_secs(10), || async {
        w.get_opt("fg").await.unwrap().is_none()
    })
    .await;

    // Orphan: the dependent survives without the ownerReference.
    let owner = w.create(&PostParams::default(), &widget("or", json!({}))).await?;
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "or-cm", "ownerReferences": owned_by(&owner)}}))?;
    cms.create(&PostParams::default(), &cm).await?;
    let dp = DeleteParams { propagation_policy: Some(PropagationPolicy::Orphan), ..Default::default() };
    w.delete("or", &dp).await?;
    eventually("orphaned dependent loses its ownerReference", Duration::from_secs(10), || async {
        let cm = cms.get("or-cm").await.unwrap();
        cm.metadata.owner_references.unwrap_or_default().is_empty() && w.get_opt("or").await.unwrap().is_none()
    })
    .await;
    Ok(())
}

#[tokio::test]
async fn hv4_namespace_deletion_waits_for_finalizers() -> Result<()> {
    let env = TestEnv::shared();
    let _g = env.log_guard();
    let ns = env.namespace("hv4").await?;
    let client = env.client().await?;
    let w = widgets(client.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let pvcs: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let nss: Api<Namespace> = Api::all(client.clone());

    let mut held = widget("held", json!({}));
    held.metadata.finalizers = Some(vec!["testenv.kopiur.test/hold".into()]);
    w.create(&PostParams::default(), &held).await?;
    jobs.create(&PostParams::default(), &sleeper_job("sleeper", json!([]))).await?;
    let pvc = serde_json::from_value(json!({"metadata": {"name": "data"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}}}))?;
    pvcs.create(&PostParams::default(), &pvc).await?;
    eventually("PVC bound", Duration::from_secs(30), || async {
        pvcs.get("data").await.ok().and_then(|p| p.status).and_then(|s| s.phase).as_deref() == Some("Bound")
    })
    .await;
    let pv_name = pvcs.get("data").await?.spec.unwrap().volume_name.unwrap();

    nss.delete(&ns, &DeleteParams::default()).await?;
    eventually("the Widget is marked for deletion", Duration::from_secs(30), || async {
        w.get_opt("held").await.ok().flatten().is_some_and(|o| o.metadata.deletion_timestamp.is_some())
    })
    .await;
    eventually("everything but the held Widget is gone", Duration::from_secs(60), || async {
        jobs.list(&Default::default()).await.map(|l| l.items.is_empty()).unwrap_or(false)
            && pvcs.list(&Default::default()).await.map(|l| l.items.is_empty()).unwrap_or(false)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let phase = nss.get(&ns).await?.status.and_then(|s| s.phase);
    assert_eq!(phase.as_deref(), Some("Terminating"), "namespace held by the finalizer");

    w.patch("held", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await?;
    eventually("namespace gone", Duration::from_secs(60), || async { nss.get_opt(&ns).await.unwrap().is_none() }).await;
    let pvs: Api<k8s_openapi::api::core::v1::PersistentVolume> = Api::all(client);
    eventually("PV deleted", Duration::from_secs(30), || async { pvs.get_opt(&pv_name).await.unwrap().is_none() })
        .await;
    Ok(())
}

#[tokio::test]
async fn service_account_kubeconfig_is_limited_by_its_role() -> Result<()> {
    let env = TestEnv::shared();
    let _g = env.log_guard();
    let ns = env.namespace("rbac").await?;
    let admin = env.client().await?;
    let role: k8s_openapi::api::rbac::v1::Role = serde_json::from_value(json!({
        "metadata": {"name": "cm-reader"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]
    }))?;
    Api::namespaced(admin.clone(), &ns).create(&PostParams::default(), &role).await?;
    let rb: k8s_openapi::api::rbac::v1::RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "cm-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "limited", "namespace": ns}]
    }))?;
    Api::namespaced(admin.clone(), &ns).create(&PostParams::default(), &rb).await?;
    let path = env.state_dir().join(format!("{ns}-limited.kubeconfig"));
    env.cp.service_account_kubeconfig(&ns, "limited", &path).await?;
    let sa = kopiur_testenv::kubeconfig::client(&path).await?;

    let cms: Api<ConfigMap> = Api::namespaced(sa.clone(), &ns);
    cms.list(&Default::default()).await?; // granted
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "x"}}))?;
    let err = cms.create(&PostParams::default(), &cm).await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 403), "create must be forbidden: {err:?}");
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(sa, &ns);
    let err = secrets.list(&Default::default()).await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 403), "secrets must be forbidden: {err:?}");
    Ok(())
}
