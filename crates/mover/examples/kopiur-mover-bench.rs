//! Mover backup throughput against raw `kopia snapshot create` on the same tree, against a
//! real Garage. Prints figures only; it asserts nothing, because on shared machines the
//! numbers move too much for a fixed gate.
//!
//! An example rather than a `bin` so it can use the test environment (a dev-dependency)
//! without shipping it in the mover's dependency tree.
//!
//! Environment: `KOPIUR_BENCH_BYTES` (tree size, default 1 GiB), `KOPIUR_BENCH_RUNS`
//! (runs per side, default 5), `KOPIUR_MOVER_BINARY` (default: `kopiur-mover` next to the
//! `examples/` directory this runs from).
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kopiur_kopia::backend::{Backend, S3Backend};
use kopiur_kopia::cmd::{self, CacheSizes, Identity, PathPolicy};
use kopiur_kopia::{KopiaEnv, Runner};
use kopiur_mover::result::Report;
use kopiur_mover::workspec::*;
use kopiur_testenv::garage::Garage;

const PASSWORD: &str = "mover-bench-password-5d1e";
const MIB: f64 = 1024.0 * 1024.0;

fn env_u64(name: &str, default: u64) -> Result<u64> {
    match std::env::var(name) {
        Ok(v) => v.parse().with_context(|| format!("{name}={v} is not a number")),
        Err(_) => Ok(default),
    }
}

/// Random bytes so neither compression nor dedup inside one snapshot flatters either
/// side; file sizes cycle so both kopia's small-file and large-file paths are exercised.
fn make_tree(root: &Path, total: u64) -> Result<usize> {
    const SIZES: [u64; 5] = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20];
    let mut rnd = std::fs::File::open("/dev/urandom")?;
    let mut buf = vec![0u8; 1 << 20];
    let (mut written, mut files) = (0u64, 0usize);
    while written < total {
        let size = SIZES[files % SIZES.len()].min(total - written);
        let dir = root.join(format!("d{:02}", files % 16));
        std::fs::create_dir_all(&dir)?;
        let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join(format!("f{files:05}.bin")))?);
        let mut left = size;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            rnd.read_exact(&mut buf[..n])?;
            f.write_all(&buf[..n])?;
            left -= n as u64;
        }
        f.flush()?;
        written += size;
        files += 1;
    }
    Ok(files)
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let m = v.len() / 2;
    if v.len() % 2 == 1 { v[m] } else { (v[m - 1] + v[m]) / 2.0 }
}

struct Bench {
    tmp: tempfile::TempDir,
    garage: Garage,
    kopia: PathBuf,
    mover: PathBuf,
    tree: PathBuf,
    bytes: u64,
}

impl Bench {
    fn backend(&self, prefix: &str) -> Backend {
        Backend::S3(S3Backend {
            bucket: self.garage.bucket().into(),
            endpoint: Some(self.garage.s3_endpoint()),
            prefix: Some(prefix.into()),
            region: Some(self.garage.region().into()),
            disable_tls: true,
            ..Default::default()
        })
    }

    fn secrets<'a>(&self, c: &'a mut tokio::process::Command) -> &'a mut tokio::process::Command {
        c.env("KOPIA_PASSWORD", PASSWORD)
            .env("AWS_ACCESS_KEY_ID", self.garage.access_key())
            .env("AWS_SECRET_ACCESS_KEY", self.garage.secret_key())
    }

    /// Creates an empty repository under `prefix` (untimed), leaving `work` connected to it.
    async fn create_repo(&self, prefix: &str, work: &Path, id: &Identity) -> Result<()> {
        std::fs::create_dir_all(work)?;
        let r = Runner::new(&self.kopia, Duration::from_secs(300))
            .envs(KopiaEnv::new(work, work.join("cache")).vars())
            .env("KOPIA_PASSWORD", PASSWORD)
            .env("AWS_ACCESS_KEY_ID", self.garage.access_key())
            .env("AWS_SECRET_ACCESS_KEY", self.garage.secret_key());
        r.run_ok(&cmd::create(&self.backend(prefix), id, &Default::default(), &CacheSizes::default())?)
            .await
            .with_context(|| format!("creating the repository under {prefix}"))?;
        Ok(())
    }

    /// Removes a run's repository and kopia state so disk use stays at one run's worth.
    async fn cleanup(&self, prefix: &str, dirs: &[&Path]) -> Result<()> {
        self.garage.wipe_bucket(self.garage.bucket(), prefix).await?;
        for d in dirs {
            let _ = std::fs::remove_dir_all(d);
        }
        Ok(())
    }

    /// One raw `kopia snapshot create <tree>` into a fresh repository; returns seconds.
    async fn raw(&self, i: u64) -> Result<f64> {
        let prefix = format!("raw-{i}/");
        let work = self.tmp.path().join(format!("raw-{i}"));
        self.create_repo(&prefix, &work, &Identity::new("raw", "bench")).await?;
        let mut c = tokio::process::Command::new(&self.kopia);
        c.args(["snapshot", "create"])
            .arg(&self.tree)
            .arg("--no-progress")
            .envs(KopiaEnv::new(&work, work.join("cache")).vars())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        self.secrets(&mut c);
        let start = Instant::now();
        let out = c.output().await?;
        let secs = start.elapsed().as_secs_f64();
        if !out.status.success() {
            bail!("raw kopia snapshot create failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
        }
        self.cleanup(&prefix, &[&work]).await?;
        Ok(secs)
    }

    /// One mover Snapshot op (a whole mover process: connect, policies, create, report)
    /// into a fresh repository; returns (wall seconds, the mover's own create-only seconds).
    async fn mover(&self, i: u64) -> Result<(f64, Option<f64>)> {
        let prefix = format!("mover-{i}/");
        let setup = self.tmp.path().join(format!("mover-setup-{i}"));
        let id = Identity::new("mover", "bench");
        self.create_repo(&prefix, &setup, &id).await?;
        let work = self.tmp.path().join(format!("mover-{i}"));
        std::fs::create_dir_all(&work)?;
        let result = self.tmp.path().join(format!("mover-result-{i}.jsonl"));
        let spec = WorkSpec {
            schema_version: SCHEMA_VERSION,
            target_ref: TargetRef {
                api_version: "kopiur.home-operations.com/v1alpha1".into(),
                kind: "Snapshot".into(),
                namespace: Some("bench".into()),
                name: format!("bench-{i}"),
                uid: format!("uid-bench-{i}"),
            },
            repository: RepositoryInfo {
                kind: "Repository".into(),
                namespace: Some("bench".into()),
                name: "bench".into(),
                uid: "uid-bench-repo".into(),
                backend: self.backend(&prefix),
                client_identity: id,
                read_only: false,
                cache: CacheSizes::default(),
            },
            command_timeout_seconds: 120,
            heartbeat_seconds: 30,
            connect_timeout_seconds: None,
            operation: Operation::Snapshot(SnapshotOp {
                mount_path: self.tree.display().to_string(),
                source_path: "/pvc/data".into(),
                snapshot: format!("bench/s{i}"),
                snapshot_uid: format!("uid-s{i}"),
                tags: BTreeMap::new(),
                description: None,
                policy: PathPolicy::default(),
                fail_fast: false,
                upload_limit_mb: None,
                parallel: None,
            }),
        };
        let mut c = tokio::process::Command::new(&self.mover);
        c.env("KOPIUR_WORK_SPEC", spec.to_json()?)
            .env("KOPIUR_WORKDIR", &work)
            .env("KOPIUR_KOPIA_BINARY", &self.kopia)
            .env("KOPIUR_RESULT_FILE", &result)
            .env("KOPIUR_JOB_UID", format!("job-bench-{i}"))
            .env("RUST_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        self.secrets(&mut c);
        let start = Instant::now();
        let out = c.output().await?;
        let secs = start.elapsed().as_secs_f64();
        let status = std::fs::read_to_string(&result)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Report>(l).ok())
            .filter_map(|r| match r {
                Report::Status(v) if v["status"]["phase"].is_string() => Some(v["status"].clone()),
                _ => None,
            })
            .next_back();
        let phase = status.as_ref().and_then(|s| s["phase"].as_str()).unwrap_or("<none>");
        if !out.status.success() || phase != "Succeeded" {
            bail!("mover run {i} ended {} with phase {phase}: {}", out.status, String::from_utf8_lossy(&out.stderr));
        }
        let ts =
            |k: &str| status.as_ref()?["timing"][k].as_str().and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
        let create = match (ts("startTime"), ts("endTime")) {
            (Some(a), Some(b)) => Some((b - a).num_milliseconds() as f64 / 1000.0),
            _ => None,
        };
        self.cleanup(&prefix, &[&setup, &work]).await?;
        let _ = std::fs::remove_file(&result);
        Ok((secs, create))
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let bytes = env_u64("KOPIUR_BENCH_BYTES", 1 << 30)?;
    let runs = env_u64("KOPIUR_BENCH_RUNS", 5)?.max(1);
    let mover = match std::env::var_os("KOPIUR_MOVER_BINARY") {
        Some(p) => PathBuf::from(p),
        None => {
            let exe = std::env::current_exe()?;
            exe.parent().and_then(Path::parent).context("no target directory")?.join("kopiur-mover")
        }
    };
    if !mover.exists() {
        bail!("{} not found: build it with `cargo build -p kopiur-mover --bins`", mover.display());
    }
    let kopia = kopiur_testenv::tools::kopia()?;
    let tmp = tempfile::Builder::new().prefix("kopiur-mover-bench-").tempdir()?;
    let tree = tmp.path().join("tree");
    let t = Instant::now();
    let files = make_tree(&tree, bytes)?;
    eprintln!("tree: {files} files, {bytes} bytes in {:.1}s", t.elapsed().as_secs_f64());
    let garage = Garage::start(&tmp.path().join("garage")).await?;
    let b = Bench { tmp, garage, kopia, mover, tree, bytes };

    let mib = b.bytes as f64 / MIB;
    let (mut raw, mut mov, mut mov_create) = (Vec::new(), Vec::new(), Vec::new());
    // Alternating keeps drift on a shared machine (other builds, page cache) from landing
    // on one side only.
    for i in 0..runs {
        let r = b.raw(i).await?;
        let (m, c) = b.mover(i).await?;
        eprintln!(
            "run {}: raw {r:.2}s ({:.1} MiB/s), mover {m:.2}s ({:.1} MiB/s){}",
            i + 1,
            mib / r,
            mib / m,
            c.map(|c| format!(", of which kopia create {c:.2}s")).unwrap_or_default()
        );
        raw.push(mib / r);
        mov.push(mib / m);
        mov_create.extend(c);
    }
    let fmt = |v: &[f64]| v.iter().map(|x| format!("{x:.1}")).collect::<Vec<_>>().join(",");
    let (mr, mm) = (median(&raw), median(&mov));
    println!("bench tree_bytes={} files={files}", b.bytes);
    println!("bench raw_kopia_throughput_mib_s median={mr:.1} runs={runs} samples={}", fmt(&raw));
    println!("bench mover_backup_throughput_mib_s median={mm:.1} runs={runs} samples={}", fmt(&mov));
    if !mov_create.is_empty() {
        // The mover's own create step alone, to separate its fixed overhead (connect,
        // policies, process start) from the data path. Its status timing has whole-second
        // resolution, so this is only a rough split.
        println!("bench mover_kopia_create_seconds median={:.2}", median(&mov_create));
    }
    println!("bench mover_vs_raw_ratio={:.3} (goal >= 0.97)", mm / mr);
    let mut g = b.garage;
    g.stop().await?;
    Ok(())
}
