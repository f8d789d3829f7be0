//! HV-12 (node agent part), on a private control plane: after the agent is killed and
//! restarted, pods it had started are failed as ContainerStatusUnknown (NA-17), and new
//! pods run again. Neither a killed nor a stopped agent leaves any process of its pods
//! behind, not even one in a session of its own.
use std::time::{Duration, Instant};

use anyhow::Result;
use k8s_openapi::api::core::v1::Pod;
use kopiur_testenv::{Options, TestEnv};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return Ok(v);
        }
        anyhow::ensure!(Instant::now() < deadline, "timed out after {timeout:?} waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn phase(p: &Pod) -> Option<String> {
    p.status.as_ref().and_then(|s| s.phase.clone())
}

fn sleeper(name: &str, script: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", script]}]},
    }))
    .unwrap()
}

#[tokio::test]
async fn hv12_node_agent_restart_fails_orphans() -> Result<()> {
    // No CRDs: this test is about pods only.
    let mut env = TestEnv::start(Options { crds: vec![], ..Options::default() }).await?;
    let res = body(&mut env).await;
    if res.is_err() {
        eprintln!("---- test environment logs ----\n{}", env.logs_summary(60));
    }
    res
}

/// A container whose child runs in a session of its own, with `marker` in its argv.
fn with_grandchild(marker: &str) -> String {
    format!("setsid sh -c 'sleep 600; :' {marker} & sleep 600")
}

async fn body(env: &mut TestEnv) -> Result<()> {
    let ns = env.namespace("hv12").await?;
    let client = env.client().await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let marker = format!("kopiur-hv12-{}", std::process::id());
    let orphan_marker = format!("{marker}-orphan");
    pods.create(&PostParams::default(), &sleeper("orphan", &with_grandchild(&orphan_marker))).await?;
    let running = eventually("pod Running", Duration::from_secs(30), || async {
        let p = pods.get("orphan").await.ok()?;
        (phase(&p).as_deref() == Some("Running")).then_some(p)
    })
    .await?;
    let cid = running.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0].container_id.clone().unwrap();
    let pid: u32 = cid.strip_prefix("proc://").unwrap().parse()?;

    eventually("the grandchild runs", Duration::from_secs(10), || async {
        (!kopiur_testenv::process::processes_with(&orphan_marker).is_empty()).then_some(())
    })
    .await?;

    env.cp.kill_node_agent();
    // The parent-death signals take the container's shim, then its PID 1, then the rest of its
    // PID namespace with the agent.
    eventually("container process gone with the agent", Duration::from_secs(5), || async {
        (!std::path::Path::new(&format!("/proc/{pid}")).exists()).then_some(())
    })
    .await?;
    eventually("the grandchild gone with the agent", Duration::from_secs(5), || async {
        kopiur_testenv::process::processes_with(&orphan_marker).is_empty().then_some(())
    })
    .await?;
    env.cp.start_node_agent().await?;

    let failed = eventually("orphan marked Failed", Duration::from_secs(30), || async {
        let p = pods.get("orphan").await.ok()?;
        (phase(&p).as_deref() == Some("Failed")).then_some(p)
    })
    .await?;
    let cs = &failed.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
    let t = cs
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .ok_or_else(|| anyhow::anyhow!("not terminated: {cs:?}"))?;
    anyhow::ensure!(t.exit_code == 137, "exit code {}", t.exit_code);
    anyhow::ensure!(t.reason.as_deref() == Some("ContainerStatusUnknown"), "reason {:?}", t.reason);
    anyhow::ensure!(t.finished_at.is_some(), "finishedAt missing");

    pods.create(&PostParams::default(), &sleeper("after", "exit 0")).await?;
    eventually("a new pod succeeds after the restart", Duration::from_secs(30), || async {
        let p = pods.get("after").await.ok()?;
        (phase(&p).as_deref() == Some("Succeeded")).then_some(())
    })
    .await?;

    // A stopped agent (SIGTERM) ends its pods' whole process trees before it exits.
    let stop_marker = format!("{marker}-stop");
    pods.create(&PostParams::default(), &sleeper("at-stop", &with_grandchild(&stop_marker))).await?;
    eventually("the grandchild runs", Duration::from_secs(30), || async {
        (!kopiur_testenv::process::processes_with(&stop_marker).is_empty()).then_some(())
    })
    .await?;
    env.cp.stop_node_agent();
    let left = kopiur_testenv::process::processes_with(&stop_marker);
    anyhow::ensure!(left.is_empty(), "processes outlived the stopped agent: {left:?}");
    Ok(())
}
