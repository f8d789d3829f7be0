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
    pub mover_rust_log: Option<String>,
    /// Passed to movers as `KOPIUR_KOPIA_BINARY` (test environments and auditing wrappers).
    pub mover_kopia_binary: Option<String>,
    pub metrics_addr: String,
    pub tuning: Tuning,
    /// `KOPIUR_MAX_CONCURRENT_DELETE_JOBS`: non-terminal batch delete Jobs cluster-wide; 0 = uncapped.
    pub max_concurrent_delete_jobs: usize,
    /// Configuration errors found while reading the environment (reported at startup).
    pub errors: Vec<String>,
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
        Config {
            max_concurrent_delete_jobs,
            errors,
            namespace: std::env::var("KOPIUR_NAMESPACE").unwrap_or_else(|_| "kopiur-system".into()),
            lease_name: std::env::var("KOPIUR_LEASE_NAME").unwrap_or_else(|_| "kopiur-leader".into()),
            identity: std::env::var("POD_NAME")
                .or_else(|_| std::env::var("HOSTNAME"))
                .unwrap_or_else(|_| format!("kopiur-controller-{}", std::process::id())),
            mover_image: std::env::var("KOPIUR_MOVER_IMAGE")
                .unwrap_or_else(|_| format!("ghcr.io/home-operations/kopiur:{}", env!("CARGO_PKG_VERSION"))),
            mover_rust_log: std::env::var("KOPIUR_MOVER_RUST_LOG").ok(),
            mover_kopia_binary: std::env::var("KOPIUR_MOVER_KOPIA_BINARY").ok(),
            metrics_addr: std::env::var("KOPIUR_METRICS_ADDR").unwrap_or_else(|_| "0.0.0.0:8081".into()),
            tuning: Tuning {
                strict_retry_base_seconds: env_i64("KOPIUR_STRICT_RETRY_BASE_SECONDS", d.strict_retry_base_seconds)
                    .max(1),
                strict_retry_cap_seconds: env_i64("KOPIUR_STRICT_RETRY_CAP_SECONDS", d.strict_retry_cap_seconds).max(1),
                reverify_spacing_seconds: env_i64("KOPIUR_REVERIFY_SPACING_SECONDS", d.reverify_spacing_seconds),
                ..d
            },
        }
    }

    /// Fails on any configuration error, naming the variable and the bad value.
    pub fn check(&self) -> Result<(), String> {
        if self.errors.is_empty() { Ok(()) } else { Err(self.errors.join("; ")) }
    }
}
