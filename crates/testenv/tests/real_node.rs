//! The real node on its own (issue 14): containerd, kubelet, kube-proxy and kube-scheduler come
//! up and the Node turns Ready; a busybox pod runs in a real container with its own network
//! namespace and reaches the API through the `kubernetes` Service; and teardown leaves the
//! host as it found it (links, routes, iptables chains, cgroups, mounts, sysctls).
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use kopiur_testenv::controlplane::repo_root;
use kopiur_testenv::realnode::{RealCluster, config, host};
use kube::Api;
use kube::api::PostParams;

fn archive(name: &str) -> Option<PathBuf> {
    let p = repo_root().join(format!("target/images/{name}-testenv-linux-amd64.oci.tar"));
    p.exists().then_some(p)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_node_joins_runs_a_pod_and_leaves_no_trace() -> Result<()> {
    let t0 = Instant::now();
    let images: Vec<PathBuf> =
        ["kopiur-testenv-pause", "kopiur-testenv-busybox"].iter().filter_map(|n| archive(n)).collect();
    ensure!(
        images.len() == 2,
        "the node images are missing: run `cargo xtask images --node-images --registry localhost --tag testenv`"
    );
    let mut cluster = RealCluster::start(&images).await?;
    // What the host held when this node took the lock (another real node may have been
    // tearing down while this test waited for it).
    let before = cluster.host_before().context("the host state recorded at start")?;
    println!("node Ready after {:.1} s", t0.elapsed().as_secs_f64());
    let res = async {
        let client = cluster.env().client().await?;
        let ns = cluster.env().namespace("rn").await?;
        // The pod asks the API for its own namespace through the Service IP (kube-proxy's
        // DNAT to the apiserver on the bridge address); the answer proves the path.
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "probe", "namespace": ns},
            "spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": false,
                "containers": [{
                    "name": "c", "image": "localhost/kopiur-testenv-busybox:testenv", "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", format!(
                        "id -u; grep memory /proc/self/cgroup; echo | nc -w 5 {} 443 >/dev/null && echo service-reachable",
                        config::SERVICE_IP)],
                    "securityContext": {"runAsUser": 1234, "runAsNonRoot": true, "readOnlyRootFilesystem": true,
                                        "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}
                }]
            }
        }))?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        pods.create(&PostParams::default(), &pod).await?;
        let done = kopiur_testenv::wait::wait_for(
            "pod probe Succeeded",
            Duration::from_secs(120),
            &cluster.env().cp.logs_dir().join("kubelet.log"),
            || async {
                let p = pods.get("probe").await?;
                let ph = p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
                ensure!(ph != "Failed", "pod failed: {:?}", p.status);
                Ok((ph == "Succeeded").then_some(p))
            },
        )
        .await?;
        let logs = pods.logs("probe", &Default::default()).await.context("kubectl logs through the kubelet")?;
        println!("pod output:\n{logs}");
        let st = done.status.clone().unwrap_or_default();
        ensure!(st.pod_ip.as_deref().is_some_and(|ip| ip.starts_with("198.18.0.")), "pod IP {:?}", st.pod_ip);
        ensure!(logs.lines().next() == Some("1234"), "runs as the requested uid: {logs}");
        ensure!(logs.contains(&cluster.layout.cgroup_root), "runs under the node's cgroup root: {logs}");
        ensure!(logs.contains("service-reachable"), "the Service reaches the apiserver: {logs}");
        anyhow::Ok(())
    }
    .await;
    if res.is_err() {
        cluster.env().keep_logs("real_node");
    }
    let report = cluster.shutdown();
    println!("teardown: {}", report.join("; "));
    res?;
    // Nothing left behind.
    ensure!(!std::path::Path::new("/sys/class/net").join(config::BRIDGE).exists(), "bridge left behind");
    let routes = host::sh("ip", &["route", "show", "table", "all"])?;
    ensure!(!routes.contains(config::SERVICE_CIDR), "route left behind: {routes}");
    let chains_after = host::iptables_chains();
    let extra: Vec<_> = chains_after.difference(&before.chains).collect();
    ensure!(extra.is_empty(), "iptables chains left behind: {extra:?}");
    ensure!(host::read_sysctls() == before.sysctls, "sysctls not restored");
    ensure!(host::mounts_under(&cluster.layout.dir).is_empty(), "mounts left behind");
    let cg = PathBuf::from("/sys/fs/cgroup/memory").join(cluster.layout.cgroup_root.trim_start_matches('/'));
    ensure!(!cg.exists(), "cgroup {} left behind", cg.display());
    let dirs_after: std::collections::BTreeSet<String> =
        host::FIXED_DIRS.iter().filter(|d| std::path::Path::new(d).exists()).map(|d| d.to_string()).collect();
    ensure!(
        dirs_after == before.fixed_dirs,
        "fixed host directories: before {:?}, after {dirs_after:?}",
        before.fixed_dirs
    );
    println!("host as before: no bridge, route, chain, mount or cgroup of the node; sysctls restored");
    Ok(())
}
