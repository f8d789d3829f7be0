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
    let before = child_pids();
    assert!(before.len() >= 3, "etcd, apiserver and kcm run as children: {before:?}");
    drop(client);
    drop(env);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(child_pids().is_empty(), "no child process remains: {:?}", child_pids());
    assert!(!state.exists(), "state directory removed");
    Ok(())
}

/// Live (non-zombie) children of this test process.
fn child_pids() -> Vec<u32> {
    let me = std::process::id();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // After the parenthesised command come: state, ppid, ...
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() > 1 && f[1].parse::<u32>().ok() == Some(me) && f[0] != "Z" {
            out.push(pid);
        }
    }
    out
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
