//! Runs kopia: stdin null, stdout and stderr read concurrently, every command under a
//! deadline (kopia's S3 transport has no response timeout, so a stalled server would hang
//! it forever), the whole process group killed when the deadline fires.
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;

use crate::classify::classify;
use crate::cmd::KopiaCommand;
use crate::error::KopiaError;

/// How many non-empty stderr lines are kept for reports.
pub const STDERR_TAIL_LINES: usize = 20;
/// How much stderr is kept for classification (the end of it).
pub const STDERR_KEEP_BYTES: usize = 64 * 1024;
/// Cap on stdout (a catalog listing of many thousand snapshots fits easily).
pub const STDOUT_MAX_BYTES: usize = 256 * 1024 * 1024;

/// Process groups of the kopia children running now (each child leads its own group), so a
/// signal handler can stop them: [`terminate_running`].
static RUNNING: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// Removes a child's group from [`RUNNING`] when its `run` finishes or is dropped.
struct Registered(Option<i32>);

impl Registered {
    fn new(pid: Option<u32>) -> Registered {
        let pid = pid.and_then(|p| i32::try_from(p).ok());
        if let (Some(p), Ok(mut r)) = (pid, RUNNING.lock()) {
            r.push(p);
        }
        Registered(pid)
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let (Some(p), Ok(mut r)) = (self.0, RUNNING.lock()) {
            r.retain(|x| *x != p);
        }
    }
}

/// The process ids (= process group ids) of the kopia children running now.
pub fn running_children() -> Vec<i32> {
    RUNNING.lock().map(|r| r.clone()).unwrap_or_default()
}

/// Stops every running kopia child: SIGTERM to its whole process group, up to `grace` for it
/// to exit, then SIGKILL; each child is reaped (waited for) before this returns. Meant for a
/// signal handler while the futures that own the children are no longer polled (a child
/// another waiter already reaped counts as gone). Returns the pids that were stopped.
pub fn terminate_running(grace: Duration) -> Vec<i32> {
    let pids = running_children();
    for &p in &pids {
        // SAFETY: plain syscalls on the child's own process group (process_group(0)).
        unsafe {
            libc::killpg(p, libc::SIGTERM);
        }
    }
    let deadline = Instant::now() + grace;
    let mut left: Vec<i32> = pids.clone();
    while !left.is_empty() {
        left.retain(|&p| !reaped(p, false));
        if left.is_empty() || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for &p in &left {
        // SAFETY: as above.
        unsafe {
            libc::killpg(p, libc::SIGKILL);
        }
        reaped(p, true);
    }
    pids
}

/// True once `pid` has exited and is reaped (by this call or by another waiter).
fn reaped(pid: i32, block: bool) -> bool {
    loop {
        let mut status = 0;
        // SAFETY: waitpid on our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, if block { 0 } else { libc::WNOHANG }) };
        if r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        // r == pid: reaped now; -1 (ECHILD): already reaped elsewhere; 0: still running.
        return r != 0;
    }
}

/// The variables every kopia process gets, so it has no side effects outside `workdir`
/// and the cache: a private config, no persisted password, no update checks.
#[derive(Clone, Debug)]
pub struct KopiaEnv {
    pub workdir: PathBuf,
    /// Must be absolute: kopia only honours (and cleans) absolute cache paths.
    pub cache_dir: PathBuf,
    /// Where kopia's config file goes (the workdir unless set): it holds the backend's keys,
    /// so a mover Job puts it on a memory-backed volume, never on a cache that outlives the run.
    pub config_dir: PathBuf,
}

impl KopiaEnv {
    pub fn new(workdir: impl Into<PathBuf>, cache_dir: impl Into<PathBuf>) -> KopiaEnv {
        let workdir = workdir.into();
        KopiaEnv { config_dir: workdir.clone(), workdir, cache_dir: cache_dir.into() }
    }

    /// The same environment with kopia's config file in `dir`.
    pub fn with_config_dir(mut self, dir: impl Into<PathBuf>) -> KopiaEnv {
        self.config_dir = dir.into();
        self
    }

    pub fn config_path(&self) -> PathBuf {
        self.config_dir.join("repository.config")
    }

    /// Non-secret variables only; the password and backend keys are inherited or added by
    /// the caller and never logged.
    pub fn vars(&self) -> Vec<(String, String)> {
        let p = |x: &Path| x.display().to_string();
        vec![
            ("KOPIA_CONFIG_PATH".into(), p(&self.config_path())),
            ("KOPIA_CACHE_DIRECTORY".into(), p(&self.cache_dir)),
            ("KOPIA_LOG_DIR".into(), p(&self.workdir.join("logs"))),
            ("KOPIA_CHECK_FOR_UPDATES".into(), "false".into()),
            ("KOPIA_PERSIST_CREDENTIALS_ON_CONNECT".into(), "false".into()),
            // With no HOME and no cache directory kopia fails with
            // `unable to determine cache directory`.
            ("HOME".into(), p(&self.workdir)),
        ]
    }
}

/// What a finished kopia process left behind.
#[derive(Clone, Debug)]
pub struct Output {
    pub command: &'static str,
    /// `None` when killed by a signal.
    pub exit_code: Option<i32>,
    pub stdout: String,
    /// The end of stderr, at most [`STDERR_KEEP_BYTES`].
    pub stderr: String,
    /// The last [`STDERR_TAIL_LINES`] non-empty stderr lines.
    pub stderr_tail: Vec<String>,
    pub elapsed: Duration,
}

impl Output {
    pub fn success(&self) -> bool {
        self.exit_code == Some(0)
    }

    /// The failure as an error, classified from stderr.
    pub fn to_error(&self) -> KopiaError {
        KopiaError::Failed {
            command: self.command,
            exit_code: self.exit_code,
            classification: classify(&self.stderr),
            stderr_tail: self.stderr_tail.clone(),
        }
    }

    /// `Ok(self)` on exit 0, the classified failure otherwise.
    pub fn ok(self) -> Result<Output, KopiaError> {
        if self.success() { Ok(self) } else { Err(self.to_error()) }
    }
}

/// Spawns kopia with a fixed binary, environment and default deadline.
#[derive(Clone, Debug)]
pub struct Runner {
    bin: PathBuf,
    env: Vec<(String, String)>,
    env_remove: Vec<String>,
    default_timeout: Duration,
}

impl Runner {
    pub fn new(bin: impl Into<PathBuf>, default_timeout: Duration) -> Runner {
        Runner { bin: bin.into(), env: Vec::new(), env_remove: Vec::new(), default_timeout }
    }

    /// `kopia` from `KOPIUR_KOPIA_BINARY`, else from PATH.
    pub fn from_env(default_timeout: Duration) -> Runner {
        let bin = std::env::var_os("KOPIUR_KOPIA_BINARY").map(PathBuf::from).unwrap_or_else(|| "kopia".into());
        Runner::new(bin, default_timeout)
    }

    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// Adds a variable to every child. Values may be secrets: they are never logged.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Runner {
        let key = key.into();
        self.env.retain(|(k, _)| *k != key);
        self.env.push((key, value.into()));
        self
    }

    pub fn envs(mut self, vars: impl IntoIterator<Item = (String, String)>) -> Runner {
        for (k, v) in vars {
            self = self.env(k, v);
        }
        self
    }

    /// Removes an inherited variable from every child.
    pub fn env_remove(mut self, key: impl Into<String>) -> Runner {
        self.env_remove.push(key.into());
        self
    }

    pub fn default_timeout(&self) -> Duration {
        self.default_timeout
    }

    /// Runs to completion or deadline. A non-zero exit is an `Ok(Output)`; only a spawn
    /// failure or the deadline is an `Err`.
    pub async fn run(&self, cmd: &KopiaCommand) -> Result<Output, KopiaError> {
        let timeout = cmd.timeout.unwrap_or(self.default_timeout);
        let mut c = Command::new(&self.bin);
        c.args(&cmd.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        for k in &self.env_remove {
            c.env_remove(k);
        }
        for (k, v) in &self.env {
            c.env(k, v);
        }
        tracing::debug!(target: "kopia", command = cmd.name, args = ?cmd.args, "running kopia");
        let start = Instant::now();
        let mut child =
            c.spawn().map_err(|source| KopiaError::Spawn { bin: self.bin.display().to_string(), source })?;
        let pid = child.id();
        let _registered = Registered::new(pid);
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let out_task = tokio::spawn(async move {
            let mut buf = Vec::new();
            let _ = stdout.take(STDOUT_MAX_BYTES as u64).read_to_end(&mut buf).await;
            String::from_utf8_lossy(&buf).into_owned()
        });
        let err_task = tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            let mut kept = String::new();
            let mut tail: VecDeque<String> = VecDeque::new();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::debug!(target: "kopia", "{line}");
                kept.push_str(&line);
                kept.push('\n');
                if kept.len() > STDERR_KEEP_BYTES {
                    let mut cut = kept.len() - STDERR_KEEP_BYTES;
                    while !kept.is_char_boundary(cut) {
                        cut += 1;
                    }
                    kept.drain(..cut);
                }
                if !line.trim().is_empty() {
                    if tail.len() == STDERR_TAIL_LINES {
                        tail.pop_front();
                    }
                    tail.push_back(line);
                }
            }
            (kept, Vec::from(tail))
        });
        let status = match tokio::time::timeout(timeout, child.wait()).await {
            Ok(r) => r.map_err(|source| KopiaError::Spawn { bin: self.bin.display().to_string(), source })?,
            Err(_) => {
                if let Some(pid) = pid {
                    // SAFETY: plain syscall; the group id is the child's pid (process_group(0)).
                    unsafe {
                        libc::killpg(pid as libc::pid_t, libc::SIGKILL);
                    }
                }
                let _ = child.wait().await;
                out_task.abort();
                err_task.abort();
                tracing::debug!(target: "kopia", command = cmd.name, ?timeout, "kopia deadline fired");
                return Err(KopiaError::Timeout { command: cmd.name, after: timeout });
            }
        };
        // Pipes close when the process exits (unless it left a grandchild holding them:
        // bound the wait so that cannot hang the mover).
        let stdout =
            tokio::time::timeout(Duration::from_secs(10), out_task).await.ok().and_then(Result::ok).unwrap_or_default();
        let (stderr, stderr_tail) =
            tokio::time::timeout(Duration::from_secs(10), err_task).await.ok().and_then(Result::ok).unwrap_or_default();
        Ok(Output {
            command: cmd.name,
            exit_code: status.code(),
            stdout,
            stderr,
            stderr_tail,
            elapsed: start.elapsed(),
        })
    }

    /// Runs and maps a non-zero exit to the classified error.
    pub async fn run_ok(&self, cmd: &KopiaCommand) -> Result<Output, KopiaError> {
        self.run(cmd).await?.ok()
    }
}
