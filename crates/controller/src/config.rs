//! Operator configuration from the environment. Timing knobs default to the ADR's numbers;
//! tests shorten them, the schema minimums on user fields stay untouched.
use crate::health::Tuning;

#[derive(Clone, Debug)]
pub struct Config {
    /// The operator namespace (`KOPIUR_NAMESPACE`): Lease, ClusterRepository Jobs and Secrets.
    pub namespace: String,
    pub lease_name: String,
    /// This replica's identity in the Lease.
    pub identity: String,
    pub mover_image: String,
    /// `imagePullPolicy` of every mover container (`KOPIUR_MOVER_IMAGE_PULL_POLICY`); `None`
    /// leaves the kubelet's default.
    pub mover_image_pull_policy: Option<String>,
    /// Secrets the mover ServiceAccount lists as `imagePullSecrets` in every namespace a mover
    /// runs in (`KOPIUR_MOVER_IMAGE_PULL_SECRETS`, comma-separated names; each Secret must exist
    /// in those namespaces).
    pub mover_image_pull_secrets: Vec<String>,
    pub mover_rust_log: Option<String>,
    /// Passed to movers as `KOPIUR_KOPIA_BINARY` (test environments and auditing wrappers).
    pub mover_kopia_binary: Option<String>,
    pub metrics_addr: String,
    pub tuning: Tuning,
    /// `KOPIUR_MAX_CONCURRENT_DELETE_JOBS`: non-terminal batch delete Jobs cluster-wide; 0 = uncapped.
    pub max_concurrent_delete_jobs: usize,
    /// `KOPIUR_RECONCILE_CONCURRENCY`: reconciles in flight per kind (1..=1024, default
    /// [`DEFAULT_RECONCILE_CONCURRENCY`]). Bounded so a start-up over thousands of objects does
    /// not hold one task, request and connection per object at once.
    pub reconcile_concurrency: u16,
    /// `KOPIUR_STAGING_RELEASE_BOUND_SECONDS`: how long a finished run's staged objects may
    /// take to go before the run says `Staging=True / ReleaseStuck` and counts in
    /// `kopiur_staging_left` (default [`crate::staging::DEFAULT_RELEASE_BOUND`]).
    pub staging_release_bound: std::time::Duration,
    /// `KOPIUR_WATCH_NAMESPACES`: the namespaced install mode's namespaces (the operator's own
    /// included); `None` serves every namespace.
    pub watch_namespaces: crate::scope::Namespaces,
    /// Configuration errors found while reading the environment (reported at startup).
    pub errors: Vec<String>,
}

/// Dual-stack: IPv6 and IPv4 clients, IPv4 only where the node has no IPv6 (`crate::http`).
pub const DEFAULT_METRICS_ADDR: &str = "[::]:8081";

/// Reconciles in flight per kind unless `KOPIUR_RECONCILE_CONCURRENCY` says otherwise.
pub const MOVER_PULL_POLICY_ENV: &str = "KOPIUR_MOVER_IMAGE_PULL_POLICY";

/// `Always`, `IfNotPresent` or `Never`; unset or empty means the kubelet's default.
pub fn parse_pull_policy(raw: Option<&str>) -> Result<Option<String>, String> {
    match raw.map(str::trim) {
        None | Some("") => Ok(None),
        Some(p @ ("Always" | "IfNotPresent" | "Never")) => Ok(Some(p.to_string())),
        Some(other) => Err(format!(
            "{MOVER_PULL_POLICY_ENV} must be Always, IfNotPresent or Never, got {other:?} (chart value mover.image.pullPolicy)"
        )),
    }
}

pub const MOVER_PULL_SECRETS_ENV: &str = "KOPIUR_MOVER_IMAGE_PULL_SECRETS";

/// Comma-separated Secret names (DNS subdomains); unset or empty means none.
pub fn parse_pull_secrets(raw: Option<&str>) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for name in raw.unwrap_or_default().split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let valid = name.len() <= 253
            && name.split('.').all(|l| {
                !l.is_empty()
                    && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            });
        if !valid {
            return Err(format!(
                "{MOVER_PULL_SECRETS_ENV} lists {name:?}, which is not a Secret name (chart value mover.imagePullSecrets)"
            ));
        }
        if !out.iter().any(|n| n == name) {
            out.push(name.to_string());
        }
    }
    Ok(out)
}

pub const DEFAULT_RECONCILE_CONCURRENCY: u16 = 8;
pub const RECONCILE_CONCURRENCY_ENV: &str = "KOPIUR_RECONCILE_CONCURRENCY";

/// `KOPIUR_RECONCILE_CONCURRENCY`: unset means the default; anything but an integer in
/// 1..=1024 is a configuration error (0 would mean "unbounded" to kube, which is what this
/// knob exists to prevent).
pub fn parse_reconcile_concurrency(raw: Option<&str>) -> Result<u16, String> {
    let Some(raw) = raw.map(str::trim).filter(|r| !r.is_empty()) else {
        return Ok(DEFAULT_RECONCILE_CONCURRENCY);
    };
    match raw.parse::<u16>() {
        Ok(n) if (1..=1024).contains(&n) => Ok(n),
        _ => Err(format!("{RECONCILE_CONCURRENCY_ENV}={raw:?} is not an integer between 1 and 1024")),
    }
}

pub const STAGING_RELEASE_BOUND_ENV: &str = "KOPIUR_STAGING_RELEASE_BOUND_SECONDS";

/// `KOPIUR_STAGING_RELEASE_BOUND_SECONDS`: unset means the default; anything but a whole
/// number of seconds from 10 to 86400 is a configuration error.
pub fn parse_release_bound(raw: Option<&str>) -> Result<std::time::Duration, String> {
    let Some(raw) = raw.map(str::trim).filter(|r| !r.is_empty()) else {
        return Ok(crate::staging::DEFAULT_RELEASE_BOUND);
    };
    match raw.parse::<u64>() {
        Ok(n) if (10..=86_400).contains(&n) => Ok(std::time::Duration::from_secs(n)),
        _ => Err(format!("{STAGING_RELEASE_BOUND_ENV}={raw:?} is not a whole number of seconds between 10 and 86400")),
    }
}

fn env_i64(name: &str, default: i64) -> i64 {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default)
}

impl Config {
    pub fn from_env() -> Config {
        let d = Tuning::default();
        let mut errors = Vec::new();
        let max_concurrent_delete_jobs = crate::deletion::batch::parse_global_cap(
            std::env::var(crate::deletion::batch::GLOBAL_CAP_ENV).ok().as_deref(),
        )
        .unwrap_or_else(|e| {
            errors.push(e);
            0
        });
        let reconcile_concurrency =
            parse_reconcile_concurrency(std::env::var(RECONCILE_CONCURRENCY_ENV).ok().as_deref()).unwrap_or_else(|e| {
                errors.push(e);
                DEFAULT_RECONCILE_CONCURRENCY
            });
        let mover_image_pull_policy = parse_pull_policy(std::env::var(MOVER_PULL_POLICY_ENV).ok().as_deref())
            .unwrap_or_else(|e| {
                errors.push(e);
                None
            });
        let mover_image_pull_secrets = parse_pull_secrets(std::env::var(MOVER_PULL_SECRETS_ENV).ok().as_deref())
            .unwrap_or_else(|e| {
                errors.push(e);
                Vec::new()
            });
        let staging_release_bound = parse_release_bound(std::env::var(STAGING_RELEASE_BOUND_ENV).ok().as_deref())
            .unwrap_or_else(|e| {
                errors.push(e);
                crate::staging::DEFAULT_RELEASE_BOUND
            });
        let namespace = std::env::var("KOPIUR_NAMESPACE").unwrap_or_else(|_| "kopiur-system".into());
        let watch_namespaces =
            crate::scope::parse(std::env::var(crate::scope::WATCH_NAMESPACES_ENV).ok().as_deref(), &namespace)
                .unwrap_or_else(|e| {
                    errors.push(e);
                    None
                });
        Config {
            watch_namespaces,
            staging_release_bound,
            mover_image_pull_policy,
            mover_image_pull_secrets,
            max_concurrent_delete_jobs,
            reconcile_concurrency,
            errors,
            namespace,
            lease_name: std::env::var("KOPIUR_LEASE_NAME").unwrap_or_else(|_| "kopiur-leader".into()),
            identity: std::env::var("POD_NAME")
                .or_else(|_| std::env::var("HOSTNAME"))
                .unwrap_or_else(|_| format!("kopiur-controller-{}", std::process::id())),
            mover_image: std::env::var("KOPIUR_MOVER_IMAGE")
                .unwrap_or_else(|_| format!("kopiur-mover:{}", env!("CARGO_PKG_VERSION"))),
            mover_rust_log: std::env::var("KOPIUR_MOVER_RUST_LOG").ok(),
            mover_kopia_binary: std::env::var("KOPIUR_MOVER_KOPIA_BINARY").ok(),
            metrics_addr: std::env::var("KOPIUR_METRICS_ADDR").unwrap_or_else(|_| DEFAULT_METRICS_ADDR.into()),
            tuning: Tuning {
                strict_retry_base_seconds: env_i64("KOPIUR_STRICT_RETRY_BASE_SECONDS", d.strict_retry_base_seconds)
                    .max(1),
                strict_retry_cap_seconds: env_i64("KOPIUR_STRICT_RETRY_CAP_SECONDS", d.strict_retry_cap_seconds).max(1),
                reverify_spacing_seconds: env_i64("KOPIUR_REVERIFY_SPACING_SECONDS", d.reverify_spacing_seconds),
                ..d
            },
        }
    }

    /// Every controller's runner settings: a 250 ms debounce (a burst of events on one object
    /// folds into one reconcile) and the bounded concurrency.
    pub fn controller_config(&self) -> kube::runtime::controller::Config {
        kube::runtime::controller::Config::default()
            .debounce(std::time::Duration::from_millis(250))
            .concurrency(self.reconcile_concurrency)
    }

    /// Fails on any configuration error, naming the variable and the bad value.
    pub fn check(&self) -> Result<(), String> {
        if self.errors.is_empty() { Ok(()) } else { Err(self.errors.join("; ")) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_staging_release_bound_is_whole_seconds_in_range() {
        assert_eq!(parse_release_bound(None), Ok(crate::staging::DEFAULT_RELEASE_BOUND));
        assert_eq!(parse_release_bound(Some(" ")), Ok(crate::staging::DEFAULT_RELEASE_BOUND));
        assert_eq!(parse_release_bound(Some("60")), Ok(std::time::Duration::from_secs(60)));
        for bad in ["5", "86401", "1m", "-3"] {
            let e = parse_release_bound(Some(bad)).unwrap_err();
            assert!(e.starts_with("KOPIUR_STAGING_RELEASE_BOUND_SECONDS="), "{e}");
        }
    }

    /// The runner settings carry the 250 ms debounce (`kube::runtime::controller::Config` has
    /// private fields; its `Debug` is the only window on them).
    #[test]
    fn every_controller_runs_with_the_250_ms_debounce() {
        let config = Config::from_env();
        let shown = format!("{:?}", config.controller_config());
        assert!(shown.contains("debounce: 250ms"), "runner settings without the 250 ms debounce: {shown}");
        assert!(shown.contains(&format!("concurrency: {}", config.reconcile_concurrency)), "{shown}");
        // Every controller built in this crate takes those settings: per source file, no more
        // `Controller` constructions than `.with_config(` calls.
        fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for entry in std::fs::read_dir(dir).expect("read src") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    walk(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    out.push(path);
                }
            }
        }
        let mut files = Vec::new();
        walk(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
        let mut controllers = 0;
        for file in files {
            let text = std::fs::read_to_string(&file).expect("read");
            let built = ["Controller::new(", "Controller::for_stream(", "Controller::for_shared_stream("]
                .iter()
                .map(|c| text.matches(c).count())
                .sum::<usize>();
            let configured = text.matches(".with_config(").count();
            assert!(built <= configured, "{}: {built} controllers but {configured} `.with_config(`", file.display());
            controllers += built;
        }
        assert!(controllers >= 9, "expected every kind's controller, found {controllers}");
    }

    #[test]
    fn reconcile_concurrency_defaults_and_rejects_bad_values() {
        assert_eq!(parse_reconcile_concurrency(None), Ok(DEFAULT_RECONCILE_CONCURRENCY));
        assert_eq!(parse_reconcile_concurrency(Some("  ")), Ok(DEFAULT_RECONCILE_CONCURRENCY));
        assert_eq!(parse_reconcile_concurrency(Some("32")), Ok(32));
        for bad in ["0", "-1", "eight", "1025", "70000"] {
            let e = parse_reconcile_concurrency(Some(bad)).unwrap_err();
            assert!(e.contains(RECONCILE_CONCURRENCY_ENV) && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn mover_pull_secrets_are_validated() {
        assert_eq!(parse_pull_secrets(None), Ok(vec![]));
        assert_eq!(parse_pull_secrets(Some(" ")), Ok(vec![]));
        assert_eq!(
            parse_pull_secrets(Some("regcred, other.cred,regcred")),
            Ok(vec!["regcred".into(), "other.cred".into()])
        );
        let e = parse_pull_secrets(Some("ok,Bad_Name")).unwrap_err();
        assert!(e.contains("\"Bad_Name\"") && e.contains("mover.imagePullSecrets"), "{e}");
    }

    #[test]
    fn mover_pull_policy_is_validated() {
        assert_eq!(parse_pull_policy(None), Ok(None));
        assert_eq!(parse_pull_policy(Some("")), Ok(None));
        for p in ["Always", "IfNotPresent", "Never"] {
            assert_eq!(parse_pull_policy(Some(p)), Ok(Some(p.to_string())));
        }
        let e = parse_pull_policy(Some("always")).unwrap_err();
        assert!(e.contains(MOVER_PULL_POLICY_ENV) && e.contains("mover.image.pullPolicy"), "{e}");
    }
}
