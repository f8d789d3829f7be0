//! Agent configuration and fixed names shared by the node agent's parts.
use std::path::PathBuf;
use std::time::Duration;

/// The single Node this agent plays.
pub const NODE_NAME: &str = "local";
/// The default StorageClass created by the provisioner (NA-8).
pub const STORAGE_CLASS: &str = "kopiur-test-hostpath";
/// The provisioner name recorded on the StorageClass.
pub const PROVISIONER: &str = "kopiur.test/hostpath";
/// Default kubelet version reported in `nodeInfo`.
pub const DEFAULT_KUBELET_VERSION: &str = "v1.34.4";
/// Default upper bound on a pod's termination grace (NA-18).
pub const DEFAULT_MAX_GRACE: Duration = Duration::from_secs(5);
/// Environment variable that overrides the maximum grace (seconds, or a duration such as `500ms`).
pub const MAX_GRACE_ENV: &str = "KOPIUR_TESTNODE_MAX_GRACE";

#[derive(Debug, Clone)]
pub struct Config {
    /// Admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// Root for PV directories, pod volumes and logs.
    pub state_dir: PathBuf,
    /// JSON image map (NA-6).
    pub image_map: PathBuf,
    /// Port of the apiserver on 127.0.0.1, injected as `KUBERNETES_SERVICE_PORT`.
    pub apiserver_port: u16,
    pub kubelet_version: String,
    /// Upper bound on termination grace before SIGKILL.
    pub max_grace: Duration,
}

/// Parses `KOPIUR_TESTNODE_MAX_GRACE`-style values: plain seconds (`5`, `0.5`) or with a
/// unit suffix (`500ms`, `2s`).
pub fn parse_grace(s: &str) -> Option<Duration> {
    let s = s.trim();
    if let Some(ms) = s.strip_suffix("ms") {
        return ms.trim().parse::<u64>().ok().map(Duration::from_millis);
    }
    let secs = s.strip_suffix('s').unwrap_or(s).trim();
    secs.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0).map(Duration::from_secs_f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grace_parsing() {
        assert_eq!(parse_grace("5"), Some(Duration::from_secs(5)));
        assert_eq!(parse_grace("2s"), Some(Duration::from_secs(2)));
        assert_eq!(parse_grace("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_grace("0.25"), Some(Duration::from_millis(250)));
        assert_eq!(parse_grace("x"), None);
        assert_eq!(parse_grace("-1"), None);
    }
}
