//! The real node's configuration files, rendered from one [`Layout`] (pure: no I/O, unit
//! tested). Every path is private to the node's state directory except the ones containerd
//! 1.6 and the CNI plugins fix themselves (`docs/testenv.md`, "The real node").
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use serde_json::json;

/// The node's fixed network plan. The 198.18.0.0/15 benchmarking range is nobody's network:
/// the bridge, its pods and the Service range all live there, on links the environment
/// creates, and a guard rule drops anything a pod sends elsewhere.
pub const POD_SUBNET: &str = "198.18.0.0/24";
pub const NODE_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
pub const POD_RANGE_START: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 10);
pub const SERVICE_CIDR: &str = "198.18.1.0/24";
/// The `kubernetes` Service's ClusterIP (the first address of [`SERVICE_CIDR`]).
pub const SERVICE_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
/// The bridge the CNI plugin attaches pods to (created by the environment, not the plugin).
pub const BRIDGE: &str = "kopiur-br0";
/// The CNI network name (CNI result-cache files carry it).
pub const CNI_NETWORK: &str = "kopiur-testenv";
pub const NODE_NAME: &str = "kopiur-node";
/// The sandbox image containerd runs for every pod (built by `cargo xtask images --node-images`).
pub const PAUSE_IMAGE: &str = "localhost/kopiur-testenv-pause:testenv";

/// Where everything of one node lives.
#[derive(Clone, Debug)]
pub struct Layout {
    pub dir: PathBuf,
    /// The cgroup (same path in every hierarchy) kubelet puts its pods under.
    pub cgroup_root: String,
    pub kubelet_port: u16,
    pub kubelet_healthz_port: u16,
    pub proxy_healthz_port: u16,
    pub proxy_metrics_port: u16,
}

impl Layout {
    pub fn containerd_dir(&self) -> PathBuf {
        self.dir.join("containerd")
    }
    pub fn containerd_config(&self) -> PathBuf {
        self.containerd_dir().join("config.toml")
    }
    pub fn containerd_socket(&self) -> PathBuf {
        self.containerd_dir().join("containerd.sock")
    }
    pub fn cri_endpoint(&self) -> String {
        format!("unix://{}", self.containerd_socket().display())
    }
    pub fn cni_conf_dir(&self) -> PathBuf {
        self.dir.join("cni/net.d")
    }
    pub fn ipam_dir(&self) -> PathBuf {
        self.dir.join("cni/ipam")
    }
    pub fn kubelet_dir(&self) -> PathBuf {
        self.dir.join("kubelet")
    }
    pub fn kubelet_config(&self) -> PathBuf {
        self.dir.join("kubelet-config.yaml")
    }
    pub fn proxy_config(&self) -> PathBuf {
        self.dir.join("kube-proxy-config.yaml")
    }
    /// Container logs (kubelet's `podLogsDir`; `/var/log/containers` gets only symlinks).
    pub fn pod_logs_dir(&self) -> PathBuf {
        self.dir.join("pod-logs")
    }
    pub fn resolv_conf(&self) -> PathBuf {
        self.dir.join("resolv.conf")
    }
}

fn p(path: &Path) -> String {
    path.display().to_string()
}

/// containerd 1.6 with its own root, state, sockets and runc root; the CRI plugin with the
/// switches this machine needs (`restrict_oom_score_adj`, no AppArmor, cgroupfs, the local
/// pause image, CNI from Debian's plugins directory).
pub fn containerd_toml(l: &Layout) -> String {
    let d = l.containerd_dir();
    format!(
        r#"version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{sock}"

[ttrpc]
  address = "{sock}.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  max_container_log_line_size = 16384

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{runc}"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
    max_conf_num = 1
"#,
        root = p(&d.join("root")),
        state = p(&d.join("state")),
        sock = p(&l.containerd_socket()),
        opt = p(&d.join("opt")),
        pause = PAUSE_IMAGE,
        runc = p(&d.join("runc")),
        cni = p(&l.cni_conf_dir()),
    )
}

/// bridge + host-local on the environment's own bridge: no masquerade, and no default route
/// in a pod (its only route beyond its own subnet is the Service range), so nothing a pod
/// sends can leave the machine; IP allocations kept in the node's directory.
pub fn cni_conflist(l: &Layout) -> serde_json::Value {
    json!({
        "cniVersion": "1.0.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "dataDir": p(&l.ipam_dir()),
                    "ranges": [[{"subnet": POD_SUBNET, "rangeStart": POD_RANGE_START.to_string(), "gateway": NODE_IP.to_string()}]],
                    "routes": [{"dst": SERVICE_CIDR}]
                }
            },
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    })
}

/// kubelet 1.34 on cgroup v1 with containerd 1.6: cgroupfs, its pods under the
/// environment's own cgroup, no kernel-default enforcement, image GC off (the pause image is
/// local and containerd 1.6 does not pin it), no eviction on this shared disk.
pub fn kubelet_yaml(l: &Layout, ca: &Path) -> String {
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: "{ip}"
port: {port}
readOnlyPort: 0
healthzBindAddress: "127.0.0.1"
healthzPort: {healthz}
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: "{ca}"
authorization:
  mode: AlwaysAllow
cgroupDriver: cgroupfs
cgroupRoot: "{cgroup}"
cgroupsPerQOS: true
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: "{cri}"
imageServiceEndpoint: "{cri}"
oomScoreAdj: 0
protectKernelDefaults: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
imageMinimumGCAge: 24h
evictionHard:
  memory.available: "0%"
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
resolvConf: "{resolv}"
podLogsDir: "{logs}"
serializeImagePulls: false
syncFrequency: 10s
fileCheckFrequency: 10s
nodeStatusUpdateFrequency: 5s
nodeStatusReportFrequency: 20s
runtimeRequestTimeout: 2m
maxPods: 110
podPidsLimit: 4096
localStorageCapacityIsolation: false
enableServer: true
enableDebuggingHandlers: true
shutdownGracePeriod: 0s
"#,
        ip = NODE_IP,
        port = l.kubelet_port,
        healthz = l.kubelet_healthz_port,
        ca = p(ca),
        cgroup = l.cgroup_root,
        cri = l.cri_endpoint(),
        resolv = p(&l.resolv_conf()),
        logs = p(&l.pod_logs_dir()),
    )
}

/// kube-proxy in iptables mode: NodePorts only on the node's own address, no conntrack
/// sysctls touched, no masquerade of pod traffic.
pub fn kube_proxy_yaml(l: &Layout, kubeconfig: &Path) -> String {
    format!(
        r#"apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: "{kc}"
hostnameOverride: {node}
bindAddress: "{ip}"
healthzBindAddress: "127.0.0.1:{healthz}"
metricsBindAddress: "127.0.0.1:{metrics}"
clusterCIDR: "{pods}"
nodePortAddresses: ["{ip}/32"]
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  masqueradeAll: false
  localhostNodePorts: false
  syncPeriod: 30s
  minSyncPeriod: 1s
"#,
        kc = p(kubeconfig),
        node = NODE_NAME,
        ip = NODE_IP,
        healthz = l.proxy_healthz_port,
        metrics = l.proxy_metrics_port,
        pods = POD_SUBNET,
    )
}

/// Pods resolve nothing: the host's resolver is outside the machine, and every address a
/// test uses is an IP the environment made.
pub fn resolv_conf() -> &'static str {
    "# kopiur test node: no DNS (every address a pod uses is an IP of the environment)\nnameserver 127.0.0.1\noptions timeout:1 attempts:1\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            dir: PathBuf::from("/state/node"),
            cgroup_root: "/process_api/abc/kopiur-node-1".into(),
            kubelet_port: 20250,
            kubelet_healthz_port: 20248,
            proxy_healthz_port: 20256,
            proxy_metrics_port: 20249,
        }
    }

    #[test]
    fn containerd_keeps_its_files_in_the_node_directory() {
        let t: toml::Value = toml::from_str(&containerd_toml(&layout())).expect("valid TOML");
        assert_eq!(t["root"].as_str(), Some("/state/node/containerd/root"));
        assert_eq!(t["state"].as_str(), Some("/state/node/containerd/state"));
        assert_eq!(t["grpc"]["address"].as_str(), Some("/state/node/containerd/containerd.sock"));
        let cri = &t["plugins"]["io.containerd.grpc.v1.cri"];
        assert_eq!(cri["restrict_oom_score_adj"].as_bool(), Some(true));
        assert_eq!(cri["sandbox_image"].as_str(), Some(PAUSE_IMAGE));
        assert_eq!(cri["cni"]["conf_dir"].as_str(), Some("/state/node/cni/net.d"));
        let runc = &cri["containerd"]["runtimes"]["runc"]["options"];
        assert_eq!(runc["SystemdCgroup"].as_bool(), Some(false));
        assert_eq!(runc["Root"].as_str(), Some("/state/node/containerd/runc"));
    }

    #[test]
    fn cni_never_masquerades_and_allocates_from_the_environment_range() {
        let c = cni_conflist(&layout());
        assert_eq!(c["plugins"][0]["ipMasq"], json!(false));
        assert_eq!(c["plugins"][0]["bridge"], json!(BRIDGE));
        assert_eq!(c["plugins"][0]["ipam"]["dataDir"], json!("/state/node/cni/ipam"));
        assert_eq!(c["plugins"][0]["ipam"]["ranges"][0][0]["gateway"], json!("198.18.0.1"));
        assert_eq!(c["plugins"][0]["ipam"]["routes"], json!([{"dst": SERVICE_CIDR}]), "no default route in a pod");
    }

    #[test]
    fn kubelet_and_proxy_configs_parse_and_bind_only_the_node_address() {
        let k: serde_norway::Value = serde_norway::from_str(&kubelet_yaml(&layout(), Path::new("/ca.crt"))).unwrap();
        assert_eq!(k["address"].as_str(), Some("198.18.0.1"));
        assert_eq!(k["cgroupRoot"].as_str(), Some("/process_api/abc/kopiur-node-1"));
        assert_eq!(k["failCgroupV1"].as_bool(), Some(false));
        assert_eq!(k["cgroupDriver"].as_str(), Some("cgroupfs"));
        assert_eq!(k["imageGCHighThresholdPercent"].as_u64(), Some(100));
        assert_eq!(k["podLogsDir"].as_str(), Some("/state/node/pod-logs"));
        let p: serde_norway::Value = serde_norway::from_str(&kube_proxy_yaml(&layout(), Path::new("/kc"))).unwrap();
        assert_eq!(p["nodePortAddresses"][0].as_str(), Some("198.18.0.1/32"));
        assert_eq!(p["conntrack"]["maxPerCore"].as_u64(), Some(0));
        assert!(SERVICE_IP.to_string().starts_with("198.18.1."));
    }
}
