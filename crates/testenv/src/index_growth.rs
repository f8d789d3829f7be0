//! A real kopia repository with thousands of index blobs, grown fast, for the death-spiral test
//! (issue 19: `repository connect` slows as index blobs pile up while maintenance lags).
//!
//! kopia writes one index blob per flush, and a flush costs more the more index blobs the process
//! already holds (every content lookup walks every index), so one `kopia snapshot create` per
//! blob is far too slow (about 0.3 s each at the start, growing). The trick used here: a
//! snapshot flushes at every upload checkpoint, and the (hidden) `--checkpoint-interval` may be
//! as short as 10 ms. A `before-folder` action on a sub-directory holds each upload open until
//! a stop file appears, so each of [`PROCESSES`] parallel `snapshot create` processes (one
//! source each) checkpoints, and so flushes one index blob, about every 10-40 ms. Growth runs
//! on a filesystem repository (no network in the loop); `kopia repository sync-to s3` then
//! copies the blobs into the Garage bucket in one parallel pass.
//!
//! The repository uses kopia's legacy index format (`--format-version=1`). The epoch format
//! (kopia's default) only ever drops index blobs after its write epoch advanced, which kopia
//! allows only once that epoch's index blobs span `--epoch-min-duration` (floor 10 minutes,
//! default 24 h), and compacts an epoch only two advances later: a test cannot see the count
//! fall in minutes. In the legacy format a quick `kopia maintenance run` compacts the index
//! blobs at once (measured: 566 -> 1). Both formats read every index blob on connect, so the
//! slow connect is the same.
//!
//! Measured on the 2-core CI-sized machine while other builds ran: 2,049 index blobs in 44 s
//! of growth with 8 processes (one process alone: 2,003 in 210 s, the rate falling from
//! 20/s to 7/s as blobs pile up); see [`Growth`] for what a run reports.
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use tokio::process::{Child, Command};

use crate::garage::Garage;
use crate::tools;

/// Parallel `snapshot create` processes. Each holds only its own new index blobs, so the
/// per-flush cost grows with target/PROCESSES, not with the target.
pub const PROCESSES: usize = 8;
/// How long growth may take before the fixture gives up.
const GROW_TIMEOUT: Duration = Duration::from_secs(240);

/// What one growth did, with its timings.
#[derive(Clone, Debug)]
pub struct Growth {
    /// `kopia index list` on the S3 repository after the copy (a fresh connect).
    pub index_blobs: usize,
    /// Creating the filesystem repository and its policies.
    pub setup: Duration,
    /// Checkpointing until the target was reached.
    pub grow: Duration,
    /// `kopia repository sync-to s3`.
    pub copy: Duration,
    /// The verifying `kopia repository connect s3` straight to Garage (no proxy): a cold connect
    /// over every index blob.
    pub direct_connect: Duration,
}

/// The kopia CLI with a private config, cache and log directory under `work`.
#[derive(Clone)]
pub struct Kopia {
    bin: PathBuf,
    work: PathBuf,
    password: String,
    access_key: String,
    secret_key: String,
}

impl Kopia {
    pub fn new(g: &Garage, work: &Path, password: &str) -> Result<Kopia> {
        std::fs::create_dir_all(work)?;
        Ok(Kopia {
            bin: tools::kopia()?,
            work: work.to_path_buf(),
            password: password.to_string(),
            access_key: g.access_key().to_string(),
            secret_key: g.secret_key().to_string(),
        })
    }

    /// The same CLI with its own config and cache (another client of the same repository).
    pub fn fresh(&self, name: &str) -> Kopia {
        Kopia { work: self.work.join(name), ..self.clone() }
    }

    pub fn command(&self, args: &[String]) -> Command {
        let mut c = Command::new(&self.bin);
        c.args(args)
            .env("KOPIA_CONFIG_PATH", self.work.join("repository.config"))
            .env("KOPIA_CACHE_DIRECTORY", self.work.join("cache"))
            .env("KOPIA_LOG_DIR", self.work.join("logs"))
            .env("KOPIA_CHECK_FOR_UPDATES", "false")
            .env("KOPIA_PASSWORD", &self.password)
            .env("AWS_ACCESS_KEY_ID", &self.access_key)
            .env("AWS_SECRET_ACCESS_KEY", &self.secret_key)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        c
    }

    /// Runs to completion within `timeout`; stdout on success, stderr in the error.
    pub async fn run(&self, args: &[String], timeout: Duration) -> Result<String> {
        let out = tokio::time::timeout(timeout, self.command(args).output())
            .await
            .with_context(|| format!("kopia {} timed out after {timeout:?}", args.join(" ")))??;
        ensure!(
            out.status.success(),
            "kopia {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `kopia index list --json`: the count the mover reports as `indexBlobCount`.
    pub async fn index_count(&self) -> Result<usize> {
        let out = self.run(&args(&["index", "list", "--json"]), Duration::from_secs(120)).await?;
        let v: Vec<serde_json::Value> = serde_json::from_str(&out).context("index list --json")?;
        Ok(v.len())
    }

    /// `kopia repository connect s3` to `endpoint` (`host:port`); returns how long it took.
    pub async fn connect_s3(&self, g: &Garage, endpoint: &str, prefix: &str, timeout: Duration) -> Result<Duration> {
        let t = Instant::now();
        self.run(
            &args(&[
                "repository",
                "connect",
                "s3",
                &format!("--bucket={}", g.bucket()),
                &format!("--endpoint={endpoint}"),
                &format!("--prefix={prefix}"),
                &format!("--region={}", g.region()),
                "--disable-tls",
                "--readonly",
            ]),
            timeout,
        )
        .await?;
        Ok(t.elapsed())
    }
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// Index blobs of a legacy-format filesystem repository: files under the `n*` shard directories.
fn count_index_files(repo: &Path) -> usize {
    fn walk(p: &Path) -> usize {
        std::fs::read_dir(p)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| {
                let path = e.path();
                if path.is_dir() { walk(&path) } else { 1 }
            })
            .sum()
    }
    std::fs::read_dir(repo)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with('n') && e.path().is_dir())
        .map(|e| walk(&e.path()))
        .sum()
}

/// Grows a legacy-format kopia repository to at least `target` index blobs and copies it into
/// `g`'s bucket at `prefix`, encrypted with `password`. Its maintenance owner is set to
/// `maintenance_owner` (so the fixture's own commands never run maintenance, and the owner the
/// operator's maintenance expects already holds the lease).
pub async fn grow_into_garage(
    g: &Garage,
    work: &Path,
    prefix: &str,
    password: &str,
    maintenance_owner: &str,
    target: usize,
) -> Result<Growth> {
    let started = Instant::now();
    let k = Kopia::new(g, &work.join("grow"), password)?;
    let fs_repo = work.join("fs-repo");
    let stop = work.join("stop");
    let hold = work.join("hold.sh");
    std::fs::write(&hold, format!("#!/bin/sh\nwhile [ ! -e '{}' ]; do sleep 0.05; done\n", stop.display()))?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&hold, std::fs::Permissions::from_mode(0o755))?;
    }
    let t = Duration::from_secs(60);
    k.run(
        &args(&[
            "repository",
            "create",
            "filesystem",
            &format!("--path={}", fs_repo.display()),
            "--format-version=1",
            "--override-username=grow",
            "--override-hostname=index-growth",
        ]),
        t,
    )
    .await
    .context("kopia repository create filesystem")?;
    k.run(&args(&["maintenance", "set", &format!("--owner={maintenance_owner}")]), t).await?;
    let mut sources = Vec::new();
    for p in 0..PROCESSES {
        let src = work.join("src").join(format!("p{p}"));
        std::fs::create_dir_all(src.join("a"))?;
        std::fs::create_dir_all(src.join("slow"))?;
        std::fs::write(src.join("a/file"), format!("index growth source {p}\n"))?;
        std::fs::write(src.join("slow/file"), format!("held open until {}\n", stop.display()))?;
        sources.push(src);
    }
    let mut policy = args(&["policy", "set", &format!("--before-folder-action={}", hold.display())]);
    policy.extend(sources.iter().map(|s| s.join("slow").display().to_string()));
    k.run(&policy, t).await.context("kopia policy set --before-folder-action")?;
    let setup = started.elapsed();

    let grow_started = Instant::now();
    let mut children: Vec<Child> = Vec::new();
    for src in &sources {
        let mut c = k.command(&args(&[
            "snapshot",
            "create",
            &src.display().to_string(),
            "--force-enable-actions",
            "--checkpoint-interval=10ms",
            "--no-progress",
        ]));
        c.stdout(Stdio::null()).stderr(Stdio::null());
        children.push(c.spawn().context("spawn kopia snapshot create")?);
    }
    let reached = loop {
        let n = count_index_files(&fs_repo);
        if n >= target {
            break Ok(n);
        }
        if grow_started.elapsed() > GROW_TIMEOUT {
            break Err(anyhow::anyhow!("only {n} of {target} index blobs after {GROW_TIMEOUT:?}"));
        }
        let mut exited = 0;
        for c in &mut children {
            if c.try_wait()?.is_some() {
                exited += 1;
            }
        }
        if exited == children.len() {
            break Err(anyhow::anyhow!("every snapshot process ended at {n} of {target} index blobs"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    std::fs::write(&stop, b"stop\n")?;
    for mut c in children {
        if tokio::time::timeout(Duration::from_secs(60), c.wait()).await.is_err() {
            let _ = c.kill().await;
        }
    }
    reached?;
    let grow = grow_started.elapsed();

    let copy = copy_to_garage(g, work, prefix, password, false).await?;

    let check = k.fresh("verify");
    let direct_connect = check.connect_s3(g, &g.s3_endpoint(), prefix, Duration::from_secs(180)).await?;
    let index_blobs = check.index_count().await?;
    if index_blobs < target {
        bail!("the copied repository lists {index_blobs} index blobs, fewer than {target}");
    }
    Ok(Growth { index_blobs, setup, grow, copy, direct_connect })
}

/// Copies the grown filesystem repository under `work` (as [`grow_into_garage`] left it) into
/// `g`'s bucket at `prefix`. With `delete`, blobs the copy does not hold are removed first: the
/// bucket holds exactly the grown repository again (every index blob back, a compaction undone),
/// which is how a test grows the repository a second time in seconds.
pub async fn copy_to_garage(g: &Garage, work: &Path, prefix: &str, password: &str, delete: bool) -> Result<Duration> {
    let k = Kopia::new(g, &work.join("grow"), password)?;
    let started = Instant::now();
    let mut a = args(&[
        "repository",
        "sync-to",
        "s3",
        &format!("--bucket={}", g.bucket()),
        &format!("--endpoint={}", g.s3_endpoint()),
        &format!("--prefix={prefix}"),
        &format!("--region={}", g.region()),
        "--disable-tls",
        "--parallel=16",
        "--no-progress",
    ]);
    if delete {
        a.push("--delete".into());
    }
    k.run(&a, Duration::from_secs(180)).await.context("kopia repository sync-to s3")?;
    Ok(started.elapsed())
}
