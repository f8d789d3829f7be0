//! NA-1..3: the Node object, its status heartbeat and its Lease.
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::config::NODE_NAME;
use super::status::now;

const LEASE_NS: &str = "kube-node-lease";
const LEASE_RENEW: Duration = Duration::from_secs(10);
const HEARTBEAT: Duration = Duration::from_secs(40);

pub fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        other => other,
    }
}

fn memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|kb| kb.parse::<u64>().ok()))
        })
        .map(|kb| kb * 1024)
        .unwrap_or(8 << 30)
}

fn disk_bytes(path: &std::path::Path) -> u64 {
    nix::sys::statvfs::statvfs(path).map(|s| s.blocks() * s.fragment_size()).unwrap_or(100 << 30)
}

fn read_trim(p: &str) -> String {
    std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default()
}

pub fn node_object() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE_NAME,
            "labels": {
                "kubernetes.io/hostname": NODE_NAME,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": arch(),
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": arch(),
            },
        },
    })
}

pub fn node_status(state_dir: &std::path::Path, kubelet_version: &str, ready: bool) -> Value {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let resources = json!({
        "cpu": cpus.to_string(),
        "memory": format!("{}Ki", memory_bytes() / 1024),
        "pods": "110",
        "ephemeral-storage": format!("{}Ki", disk_bytes(state_dir) / 1024),
    });
    let t = now();
    let cond = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({
            "type": kind, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": t, "lastTransitionTime": t,
        })
    };
    let kernel = read_trim("/proc/sys/kernel/osrelease");
    json!({
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                cond("NetworkUnavailable", "False", "RouteCreated", "process node agent: host network"),
                if ready {
                    cond("Ready", "True", "KubeletReady", "kubelet is posting ready status")
                } else {
                    cond("Ready", "False", "KubeletNotReady", "node agent stopped")
                },
            ],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": NODE_NAME},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {
                "machineID": read_trim("/etc/machine-id"),
                "systemUUID": "",
                "bootID": read_trim("/proc/sys/kernel/random/boot_id"),
                "kernelVersion": kernel,
                "osImage": "kopiur process node agent",
                "containerRuntimeVersion": "proc://1",
                "kubeletVersion": kubelet_version,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": arch(),
            },
        }
    })
}

/// Creates (or adopts) the Node and reports it Ready.
pub async fn register(client: &Client, state_dir: &std::path::Path, kubelet_version: &str) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(node_object())?;
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let labels = json!({"metadata": {"labels": node_object()["metadata"]["labels"]}});
            nodes.patch(NODE_NAME, &PatchParams::default(), &Patch::Merge(&labels)).await?;
        }
        Err(e) => return Err(e.into()),
    }
    nodes
        .patch_status(
            NODE_NAME,
            &PatchParams::default(),
            &Patch::Strategic(&node_status(state_dir, kubelet_version, true)),
        )
        .await?;
    renew_lease(client).await?;
    Ok(())
}

fn micro_now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

async fn renew_lease(client: &Client) -> anyhow::Result<()> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NS);
    let patch = json!({"spec": {"holderIdentity": NODE_NAME, "leaseDurationSeconds": 40, "renewTime": micro_now()}});
    match leases.patch(NODE_NAME, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => {
            let lease: Lease = serde_json::from_value(json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": NODE_NAME,
                    "namespace": LEASE_NS,
                },
                "spec": {"holderIdentity": NODE_NAME, "leaseDurationSeconds": 40, "renewTime": micro_now()},
            }))?;
            leases.create(&PostParams::default(), &lease).await?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Renews the Lease every 10 s and the Ready heartbeat every 40 s until shutdown.
pub async fn heartbeat(
    client: Client,
    state_dir: std::path::PathBuf,
    kubelet_version: String,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut lease_tick = tokio::time::interval(LEASE_RENEW);
    let mut hb_tick = tokio::time::interval(HEARTBEAT);
    lease_tick.tick().await;
    hb_tick.tick().await;
    let nodes: Api<Node> = Api::all(client.clone());
    loop {
        tokio::select! {
            _ = super::stopped(&mut shutdown) => return,
            _ = lease_tick.tick() => {
                if let Err(e) = renew_lease(&client).await {
                    tracing::warn!("lease renewal failed: {e}");
                }
            }
            _ = hb_tick.tick() => {
                let st = node_status(&state_dir, &kubelet_version, true);
                if let Err(e) = nodes.patch_status(NODE_NAME, &PatchParams::default(), &Patch::Strategic(&st)).await {
                    tracing::warn!("node heartbeat failed: {e}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_shape() {
        let n = node_object();
        assert_eq!(n["metadata"]["labels"]["kubernetes.io/hostname"], "local");
        let _: Node = serde_json::from_value(n).unwrap();
        let s = node_status(std::path::Path::new("/"), "v1.34.4", true);
        let st = &s["status"];
        assert_eq!(st["capacity"]["pods"], "110");
        assert_eq!(st["nodeInfo"]["kubeletVersion"], "v1.34.4");
        let ready = st["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap();
        assert_eq!(ready["status"], "True");
        assert_eq!(ready["reason"], "KubeletReady");
        assert_eq!(st["addresses"][0]["address"], "127.0.0.1");
    }
}
