//! Harness self-verification against real kopia and a real Garage: HV-10 (Garage down,
//! restart keeps the repository), HV-11 (proxy faults), and a snapshot through the proxy.
//!
//! With `KOPIUR_CAPTURE_FIXTURES=1` the stderr texts seen here are written to
//! `crates/kopia/tests/fixtures/`, where the classifier's unit tests read them.
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kopiur_kopia::backend::{Backend, S3Backend};
use kopiur_kopia::cmd::{self, CacheSizes, CreateOptions, Identity, SnapshotCreateOptions};
use kopiur_kopia::model::{self, RepositoryStatus, SnapshotManifest};
use kopiur_kopia::{ErrorClass, KopiaEnv, KopiaError, Output, Runner, classify};
use kopiur_testenv::garage::Garage;
use kopiur_testenv::proxy::{FaultProxy, Mode};

const PASSWORD: &str = "kopiur-test-password-0001";
/// Generous: a refused endpoint surfaces only after minio-go's and kopia's retries.
const SLOW: Duration = Duration::from_secs(180);

fn maint() -> Identity {
    Identity::new("kopiur", "maintenance")
}

fn s3(endpoint: &str, bucket: &str) -> Backend {
    Backend::S3(S3Backend {
        bucket: bucket.into(),
        endpoint: Some(endpoint.into()),
        region: Some("garage".into()),
        disable_tls: true,
        ..Default::default()
    })
}

/// A kopia runner with its own config, cache and logs under `dir/name`.
fn kopia(dir: &Path, name: &str, timeout: Duration) -> Runner {
    let work = dir.join(name);
    std::fs::create_dir_all(&work).unwrap();
    let env = KopiaEnv::new(&work, work.join("cache"));
    Runner::new(kopiur_testenv::tools::kopia().unwrap(), timeout)
        .envs(env.vars())
        .env("KOPIA_PASSWORD", PASSWORD)
        .env("AWS_ACCESS_KEY_ID", kopiur_testenv::garage::ACCESS_KEY_ID)
        .env("AWS_SECRET_ACCESS_KEY", kopiur_testenv::garage::SECRET_ACCESS_KEY)
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE")
}

fn capture(name: &str, out: &str) {
    if std::env::var_os("KOPIUR_CAPTURE_FIXTURES").is_none() {
        return;
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../kopia/tests/fixtures");
    std::fs::create_dir_all(&dir).unwrap();
    // Temp dirs vary per run; keep fixtures stable.
    let out = out.replace(std::env::temp_dir().to_str().unwrap(), "/tmp").replace("/tmp/kopiur-gk-", "/tmp/fixture-");
    std::fs::write(dir.join(format!("{name}.stderr")), out).unwrap();
}

async fn status(k: &Runner) -> RepositoryStatus {
    let out = k.run_ok(&cmd::repository_status()).await.expect("repository status");
    model::parse("repository status", &out.stdout).unwrap()
}

async fn create(k: &Runner, b: &Backend) -> Output {
    k.run_ok(&cmd::create(b, &maint(), &CreateOptions::default(), &CacheSizes::default()).unwrap())
        .await
        .expect("repository create")
}

async fn connect(k: &Runner, b: &Backend) -> Result<Output, KopiaError> {
    k.run(&cmd::connect(b, &maint(), false, &CacheSizes::default()).unwrap()).await
}

fn tmp() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("kopiur-gk-").tempdir().unwrap()
}

/// HV-10: Garage killed -> connect refused; restart on the same dirs -> same repository.
#[tokio::test]
async fn hv10_garage_down_then_restart_same_unique_id() {
    let t = tmp();
    let mut g = Garage::start(&t.path().join("garage")).await.unwrap();
    let b = s3(&g.s3_endpoint(), g.bucket());
    let k = kopia(t.path(), "creator", SLOW);
    create(&k, &b).await;
    let id = status(&k).await.unique_id_hex;
    assert_eq!(id.len(), 64, "{id}");

    g.kill().await.unwrap();
    let k2 = kopia(t.path(), "down", SLOW);
    let started = Instant::now();
    let out = connect(&k2, &b).await.expect("connect finished before the deadline");
    let took = started.elapsed();
    eprintln!("HV-10: connect to a killed Garage failed after {took:?} (exit {:?})", out.exit_code);
    capture("connect_s3_refused", &out.stderr);
    assert_eq!(out.exit_code, Some(1));
    assert!(out.stderr.contains("connect: connection refused"), "{}", out.stderr);
    assert_eq!(classify(&out.stderr).class, ErrorClass::RepositoryUnavailable);

    g.restart().await.unwrap();
    let k3 = kopia(t.path(), "after", SLOW);
    connect(&k3, &b).await.unwrap().ok().expect("connect after restart");
    assert_eq!(status(&k3).await.unique_id_hex, id);
}

/// HV-11: blackhole, reset and latency through the fault proxy.
#[tokio::test]
async fn hv11_proxy_faults() {
    let t = tmp();
    let g = Garage::start(&t.path().join("garage")).await.unwrap();
    let p = FaultProxy::start(g.s3_addr()).await.unwrap();
    let b = s3(&p.endpoint(), g.bucket());
    let k = kopia(t.path(), "creator", SLOW);
    create(&k, &b).await;

    // Blackhole: a connect under a 15 s deadline has not finished when the deadline fires.
    p.set(Mode::Blackhole);
    let before = p.stats();
    let kb = kopia(t.path(), "blackhole", Duration::from_secs(15));
    let started = Instant::now();
    let r = connect(&kb, &b).await;
    let took = started.elapsed();
    match &r {
        Err(e @ KopiaError::Timeout { .. }) => {
            assert_eq!(e.to_string(), "kopia repository connect timed out after 15s");
            assert_eq!(e.class(), ErrorClass::RepositoryUnavailable);
        }
        other => panic!("expected the deadline, got {other:?}"),
    }
    assert!(took >= Duration::from_secs(15) && took < Duration::from_secs(20), "{took:?}");
    assert!(p.stats().connections > before.connections, "kopia reached the proxy");

    // Back in pass, the next command succeeds.
    p.set(Mode::Pass);
    let kp = kopia(t.path(), "pass", SLOW);
    connect(&kp, &b).await.unwrap().ok().expect("connect in pass");

    // Reset: connection reset by peer, or EOF.
    p.set(Mode::Reset);
    let kr = kopia(t.path(), "reset", SLOW);
    let started = Instant::now();
    let out = connect(&kr, &b).await.expect("reset connect finished");
    eprintln!("HV-11: connect through reset failed after {:?}", started.elapsed());
    capture("connect_s3_reset", &out.stderr);
    assert_eq!(out.exit_code, Some(1));
    assert!(out.stderr.contains("connection reset by peer") || out.stderr.contains("EOF"), "{}", out.stderr);
    assert_eq!(classify(&out.stderr).class, ErrorClass::RepositoryUnavailable);

    // Latency: 500 ms per chunk measurably slows commands that reach the store.
    p.set(Mode::Pass);
    let timed = |name: &'static str| {
        let k = kopia(t.path(), name, SLOW);
        let b = b.clone();
        async move {
            let s = Instant::now();
            connect(&k, &b).await.unwrap().ok().unwrap();
            let connect_time = s.elapsed();
            let s = Instant::now();
            status(&k).await;
            (connect_time, s.elapsed())
        }
    };
    let (fast_connect, fast_status) = timed("fast").await;
    p.set(Mode::Latency(Duration::from_millis(500)));
    let (slow_connect, slow_status) = timed("slow").await;
    p.set(Mode::Pass);
    eprintln!(
        "HV-11: pass connect {fast_connect:?} status {fast_status:?}; latency(500ms) connect {slow_connect:?} status {slow_status:?}"
    );
    assert!(slow_connect >= fast_connect + Duration::from_millis(1000), "latency slows connect");
    assert!(slow_status >= fast_status + Duration::from_millis(1000), "latency slows repository status");
}

/// kopia creates a repository on Garage through the proxy, snapshots and lists; then
/// refuse, blackhole and pass behave as the harness promises.
#[tokio::test]
async fn snapshot_through_proxy_and_modes() {
    let t = tmp();
    let g = Garage::start(&t.path().join("garage")).await.unwrap();
    let p = FaultProxy::start(g.s3_addr()).await.unwrap();
    let b = s3(&p.endpoint(), g.bucket());
    let k = kopia(t.path(), "creator", SLOW);
    create(&k, &b).await;

    let src = t.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    for i in 0..20 {
        std::fs::write(src.join("sub").join(format!("f{i}")), format!("file {i}\n").repeat(100)).unwrap();
    }
    let app = Identity::new("app", "ns");
    let src_s = src.display().to_string();
    let out = k
        .run_ok(&cmd::snapshot_create(
            &src_s,
            &SnapshotCreateOptions {
                override_source: Some(app.source("/data")),
                tags: vec![("kopiur-snapshot".into(), "ns/s1".into())],
                ..Default::default()
            },
        ))
        .await
        .expect("snapshot create");
    let made: Vec<SnapshotManifest> = model::parse_stream("snapshot create", &out.stdout).unwrap();
    assert_eq!(made.len(), 1, "{}", out.stdout);
    assert_eq!(made[0].id.len(), 32);
    assert_eq!(made[0].source.path, "/data");
    assert_eq!(made[0].source.user_name, "app");
    assert_eq!(made[0].tag("kopiur-snapshot"), Some("ns/s1"));
    let summ = made[0].root_entry.as_ref().and_then(|r| r.summ.as_ref()).expect("summary");
    assert_eq!(summ.files, 20);

    let out = k.run_ok(&cmd::snapshot_list(None)).await.unwrap();
    let listed: Vec<SnapshotManifest> = model::parse("snapshot list", &out.stdout).unwrap();
    assert!(listed.iter().any(|m| m.id == made[0].id), "{}", out.stdout);
    let s = p.stats();
    assert!(s.connections > 0 && s.bytes_to_upstream > 10_000 && s.bytes_to_client > 1_000, "{s:?}");

    // Refuse: the connect is refused.
    p.set(Mode::Refuse);
    let kr = kopia(t.path(), "refuse", SLOW);
    let started = Instant::now();
    let out = connect(&kr, &b).await.expect("refused connect finished");
    eprintln!("proxy refuse: connect failed after {:?}", started.elapsed());
    assert_eq!(out.exit_code, Some(1));
    assert!(out.stderr.contains("connect: connection refused"), "{}", out.stderr);
    capture("connect_s3_proxy_refused", &out.stderr);

    // Blackhole: fails by the deadline.
    p.set(Mode::Blackhole);
    let kb = kopia(t.path(), "blackhole", Duration::from_secs(10));
    let r = connect(&kb, &b).await;
    assert!(matches!(r, Err(KopiaError::Timeout { .. })), "{r:?}");

    // Pass: the same connect succeeds and sees the snapshot.
    p.set(Mode::Pass);
    let kp = kopia(t.path(), "pass", SLOW);
    connect(&kp, &b).await.unwrap().ok().expect("connect in pass");
    let out = kp.run_ok(&cmd::snapshot_list(None)).await.unwrap();
    let listed: Vec<SnapshotManifest> = model::parse("snapshot list", &out.stdout).unwrap();
    assert_eq!(listed.len(), 1);
}

/// The error texts the classifier relies on, from real kopia against real Garage (and the
/// local filesystem). Each is asserted here and, with `KOPIUR_CAPTURE_FIXTURES=1`, stored
/// as a fixture for the classifier's unit tests.
#[tokio::test]
async fn error_texts_from_real_kopia() {
    let t = tmp();
    let g = Garage::start(&t.path().join("garage")).await.unwrap();
    let b = s3(&g.s3_endpoint(), g.bucket());
    let k = kopia(t.path(), "creator", SLOW);

    // Empty bucket, connect: not initialized.
    let out = connect(&kopia(t.path(), "empty", SLOW), &b).await.unwrap();
    capture("connect_s3_empty_bucket", &out.stderr);
    let c = classify(&out.stderr);
    assert_eq!((c.class, c.not_initialized), (ErrorClass::NotFound, true), "{}", out.stderr);

    // Missing bucket, connect: also not initialized (kopia maps NoSuchBucket to not-found).
    let missing = s3(&g.s3_endpoint(), "no-such-bucket");
    let out = connect(&kopia(t.path(), "missing", SLOW), &missing).await.unwrap();
    capture("connect_s3_missing_bucket", &out.stderr);
    let c = classify(&out.stderr);
    assert_eq!((c.class, c.not_initialized), (ErrorClass::NotFound, true), "{}", out.stderr);

    // Missing bucket, create: bucket not found.
    let out = kopia(t.path(), "missing-create", SLOW)
        .run(&cmd::create(&missing, &maint(), &CreateOptions::default(), &CacheSizes::default()).unwrap())
        .await
        .unwrap();
    capture("create_s3_missing_bucket", &out.stderr);
    assert_eq!(out.exit_code, Some(1));
    assert_eq!(classify(&out.stderr).class, ErrorClass::NotFound, "{}", out.stderr);

    create(&k, &b).await;

    // Create over existing data is refused.
    let out = kopia(t.path(), "recreate", SLOW)
        .run(&cmd::create(&b, &maint(), &CreateOptions::default(), &CacheSizes::default()).unwrap())
        .await
        .unwrap();
    capture("create_s3_existing", &out.stderr);
    assert_eq!(out.exit_code, Some(1));
    assert!(classify::is_existing_data(&out.stderr), "{}", out.stderr);

    // Wrong password.
    let out = connect(&kopia(t.path(), "badpw", SLOW).env("KOPIA_PASSWORD", "wrong"), &b).await.unwrap();
    capture("connect_s3_wrong_password", &out.stderr);
    assert_eq!(classify(&out.stderr).class, ErrorClass::AuthFailure, "{}", out.stderr);

    // Unknown access key and wrong secret.
    let out = connect(&kopia(t.path(), "badkey", SLOW).env("AWS_ACCESS_KEY_ID", "GK000000000000000000000000"), &b)
        .await
        .unwrap();
    capture("connect_s3_unknown_key", &out.stderr);
    assert_eq!(classify(&out.stderr).class, ErrorClass::AccessDenied, "{}", out.stderr);
    let out = connect(
        &kopia(t.path(), "badsecret", SLOW)
            .env("AWS_SECRET_ACCESS_KEY", "0000000000000000000000000000000000000000000000000000000000000000"),
        &b,
    )
    .await
    .unwrap();
    capture("connect_s3_wrong_secret", &out.stderr);
    assert_eq!(classify(&out.stderr).class, ErrorClass::AccessDenied, "{}", out.stderr);

    // DNS failure.
    let out = connect(&kopia(t.path(), "dns", SLOW), &s3("garage.invalid:3900", "kopiur-test")).await.unwrap();
    capture("connect_s3_dns", &out.stderr);
    assert_eq!(classify(&out.stderr).class, ErrorClass::RepositoryUnavailable, "{}", out.stderr);

    // Missing source path.
    let out = k
        .run(&cmd::snapshot_create(&t.path().join("nope").display().to_string(), &SnapshotCreateOptions::default()))
        .await
        .unwrap();
    capture("snapshot_create_missing_source", &out.stderr);
    assert_eq!(out.exit_code, Some(1));
    assert_eq!(classify(&out.stderr).class, ErrorClass::SourceError, "{}", out.stderr);

    // Deleting an unknown (well-formed) id.
    let out = k.run(&cmd::snapshot_delete(&["0123456789abcdef0123456789abcdef".into()])).await.unwrap();
    capture("snapshot_delete_unknown", &out.stderr);
    assert_eq!(out.exit_code, Some(1));
    assert!(classify::is_no_snapshots_matched(&out.stderr), "{}", out.stderr);

    // Maintenance by a non-owner.
    let other = kopia(t.path(), "other", SLOW);
    other
        .run_ok(&cmd::connect(&b, &Identity::new("someone", "else"), false, &CacheSizes::default()).unwrap())
        .await
        .unwrap();
    let out = other.run(&cmd::maintenance_run(false)).await.unwrap();
    capture("maintenance_run_not_owner", &out.stderr);
    assert_eq!(out.exit_code, Some(1));
    assert_eq!(
        classify::maintenance_owner_mismatch(&out.stderr).as_deref(),
        Some("kopiur@maintenance"),
        "{}",
        out.stderr
    );

    // Filesystem repository path missing.
    let fs =
        Backend::Filesystem(kopiur_kopia::FilesystemBackend { path: t.path().join("no-repo").display().to_string() });
    let out = connect(&kopia(t.path(), "fs", SLOW), &fs).await.unwrap();
    capture("connect_fs_missing_path", &out.stderr);
    assert_eq!(out.exit_code, Some(1));
    eprintln!("filesystem missing path -> {:?}", classify(&out.stderr));
}
