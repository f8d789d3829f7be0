//! `TestEnv`: one control plane per test binary (shared, started lazily), or private ones
//! for tests that restart or kill components.
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::Result;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PostParams;

use crate::controlplane::{ControlPlane, Options};

pub struct TestEnv {
    pub cp: ControlPlane,
    keep: bool,
}

/// The shared environment, or why it could not start (remembered, so a broken setup fails
/// every test at once instead of being retried by each).
static SHARED: OnceLock<Result<TestEnv, String>> = OnceLock::new();
static SHARED_STATE: OnceLock<PathBuf> = OnceLock::new();

extern "C" fn at_exit() {
    crate::process::kill_all_recorded();
    if let Some(dir) = SHARED_STATE.get()
        && std::env::var("KOPIUR_TESTENV_KEEP").is_err()
    {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A fresh state directory under `$KOPIUR_TESTENV_STATE` or the system temp dir. It must be
/// traversable by non-root pod users.
pub fn new_state_dir(prefix: &str) -> Result<PathBuf> {
    let base = std::env::var("KOPIUR_TESTENV_STATE").map(PathBuf::from).unwrap_or_else(|_| std::env::temp_dir());
    std::fs::create_dir_all(&base)?;
    let dir = tempfile::Builder::new().prefix(&format!("{prefix}-")).tempdir_in(base)?.keep();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    Ok(dir)
}

impl TestEnv {
    /// The control plane shared by every test of this binary. Its components are spawned
    /// from a dedicated thread that lives as long as the process (the parent-death signal
    /// is per thread), and are ended by an exit hook.
    pub fn shared() -> &'static TestEnv {
        SHARED
            .get_or_init(|| {
                let (tx, rx) = std::sync::mpsc::channel();
                std::thread::Builder::new()
                    .name("testenv-supervisor".into())
                    .spawn(move || {
                        let rt = tokio::runtime::Builder::new_multi_thread()
                            .worker_threads(1)
                            .enable_all()
                            .build()
                            .expect("tokio runtime");
                        rt.block_on(async move {
                            let res = async {
                                let state = new_state_dir("kopiur-testenv")?;
                                let _ = SHARED_STATE.set(state.clone());
                                unsafe { libc::atexit(at_exit) };
                                TestEnv::start_in(&state, Options::default()).await
                            }
                            .await;
                            tx.send(res).expect("send env");
                            std::future::pending::<()>().await;
                        });
                    })
                    .expect("spawn supervisor");
                rx.recv().expect("supervisor thread died").map_err(|e| format!("{e:#}"))
            })
            .as_ref()
            .unwrap_or_else(|e| panic!("starting the shared test environment failed: {e}"))
    }

    /// A private control plane (caller owns it; dropped = shut down).
    pub async fn start(opts: Options) -> Result<TestEnv> {
        let state = new_state_dir("kopiur-testenv-private")?;
        TestEnv::start_in(&state, opts).await
    }

    pub async fn start_in(state: &Path, opts: Options) -> Result<TestEnv> {
        let keep = std::env::var("KOPIUR_TESTENV_KEEP").is_ok();
        let cp = match ControlPlane::start(state, opts).await {
            Ok(cp) => cp,
            Err(e) => {
                let logs = crate::process::log_tail(&state.join("logs/kube-apiserver.log"), 30);
                return Err(e.context(format!("state dir {} (apiserver log tail:\n{logs})", state.display())));
            }
        };
        Ok(TestEnv { cp, keep })
    }

    /// A fresh admin client bound to the calling test's runtime.
    pub async fn client(&self) -> Result<kube::Client> {
        self.cp.client().await
    }

    pub fn kubeconfig(&self) -> &Path {
        &self.cp.admin_kubeconfig
    }

    pub fn state_dir(&self) -> &Path {
        &self.cp.state
    }

    pub fn node_state_dir(&self) -> PathBuf {
        self.cp.node_state_dir()
    }

    /// Creates a namespace named `<prefix>-<random>` and returns its name.
    pub async fn namespace(&self, prefix: &str) -> Result<String> {
        let name = format!("{prefix}-{:08x}", rand::random::<u32>());
        let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
        Api::<Namespace>::all(self.client().await?).create(&PostParams::default(), &ns).await?;
        Ok(name)
    }

    /// Prints every component's log tail if the current thread is panicking when dropped.
    pub fn log_guard(&self) -> LogGuard<'_> {
        LogGuard(self)
    }

    pub fn logs_summary(&self, lines: usize) -> String {
        self.cp.logs_summary(lines)
    }

    /// Copies every component log (operator, apiserver, node agent, ...) out of the state
    /// directory, which teardown removes, to `target/test-env-logs/<label>-<pid>/` (or under
    /// `$KOPIUR_TEST_LOGS_DIR`), and prints where: `cargo xtask test` repeats that line in its
    /// summary of a failed binary.
    pub fn keep_logs(&self, label: &str) -> PathBuf {
        let base = std::env::var("KOPIUR_TEST_LOGS_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| crate::controlplane::repo_root().join("target/test-env-logs"));
        let dest = base.join(format!("{label}-{}", std::process::id()));
        let copied = std::fs::create_dir_all(&dest).and_then(|()| {
            let mut n = 0;
            for e in std::fs::read_dir(self.cp.logs_dir())?.flatten() {
                if e.path().is_file() {
                    std::fs::copy(e.path(), dest.join(e.file_name()))?;
                    n += 1;
                }
            }
            Ok(n)
        });
        match copied {
            Ok(n) => {
                println!("ENVIRONMENT LOGS KEPT: {} ({n} files: operator, control plane, node agent)", dest.display())
            }
            Err(e) => println!("ENVIRONMENT LOGS NOT KEPT: copying to {} failed: {e}", dest.display()),
        }
        dest
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        self.cp.shutdown();
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.cp.state);
        }
    }
}

pub struct LogGuard<'a>(&'a TestEnv);

impl Drop for LogGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- test environment logs ({}) ----\n{}",
                self.0.state_dir().display(),
                self.0.logs_summary(50)
            );
            let label = std::thread::current().name().unwrap_or("test").replace("::", "-");
            self.0.keep_logs(&label);
        }
    }
}
