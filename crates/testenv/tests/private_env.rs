//! Tests that own a private control plane: version, kcm restart, teardown.
use std::time::Duration;

use anyhow::Result;
use kopiur_testenv::{Options, TestEnv};

#[tokio::test]
async fn hv13_version_and_clean_teardown() -> Result<()> {
    let env = TestEnv::start(Options { node_agent: false, ..Options::harness_only() }).await?;
    let client = env.client().await?;
    let v = client.apiserver_version().await?;
    assert_eq!(v.git_version, kopiur_testenv::tools::version("K8S_VERSION"));
    let state = env.state_dir().to_path_buf();
    let pids = env.cp.pids();
    assert_eq!(pids.len(), 3, "etcd, apiserver and kcm run as children: {pids:?}");
    for p in &pids {
        assert!(alive(*p), "component {p} is running");
    }
    drop(client);
    drop(env);
    let left: Vec<u32> = pids.into_iter().filter(|p| alive(*p)).collect();
    assert!(left.is_empty(), "no component process remains after teardown: {left:?}");
    assert!(!state.exists(), "state directory removed");
    Ok(())
}

/// Whether `pid` is a live (non-zombie) process.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().next()).is_some_and(|st| st != "Z"),
        Err(_) => false,
    }
}

#[tokio::test]
async fn hv12_kcm_restart_keeps_gc_working() -> Result<()> {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Api;
    use kube::api::{DeleteParams, PostParams};
    let mut env = TestEnv::start(Options { node_agent: false, ..Options::harness_only() }).await?;
    env.cp.restart_kcm().await?;
    let ns = env.namespace("kcm").await?;
    let cms: Api<ConfigMap> = Api::namespaced(env.client().await?, &ns);
    let owner: ConfigMap = serde_json::from_value(serde_json::json!({"metadata": {"name": "owner"}}))?;
    let owner = cms.create(&PostParams::default(), &owner).await?;
    let dep: ConfigMap = serde_json::from_value(serde_json::json!({"metadata": {"name": "dep", "ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}]}}))?;
    cms.create(&PostParams::default(), &dep).await?;
    cms.delete("owner", &DeleteParams::background()).await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while cms.get_opt("dep").await?.is_some() {
        assert!(std::time::Instant::now() < deadline, "GC did not collect the dependent within 10 s of a kcm restart");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}
