//! Component tests: the `kopiur-mover` binary run directly against real kopia, a real
//! Garage, a real filesystem and the fault proxy. kopia runs through an auditing wrapper
//! that records every argv, so tests can count invocations and search argv for secrets.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kopiur_kopia::backend::{Backend, S3Backend};
use kopiur_kopia::cmd::{self, CacheSizes, Identity, PathPolicy};
use kopiur_kopia::model::{self, MaintenanceInfo, SnapshotManifest};
use kopiur_kopia::{KopiaEnv, Runner};
use kopiur_mover::result::{BootstrapOutcome, BootstrapResult, DeleteBatchReport, Report};
use kopiur_mover::workspec::*;
use kopiur_testenv::garage::{self, Garage};
use kopiur_testenv::proxy::{FaultProxy, Mode};
use serde_json::Value;
use sha2::{Digest, Sha256};

const PASSWORD: &str = "mover-test-password-7f3a9c";
const OWNER: &str = "kopiur@kopiur.t.r";

struct Bench {
    tmp: tempfile::TempDir,
    garage: Garage,
    proxy: FaultProxy,
    wrapper: PathBuf,
    audit: PathBuf,
    runs: std::cell::Cell<u32>,
}

struct Run {
    exit: i32,
    reports: Vec<Report>,
    stderr: String,
    elapsed: Duration,
}

impl Run {
    fn bootstrap(&self) -> BootstrapResult {
        self.reports
            .iter()
            .rev()
            .find_map(|r| match r {
                Report::Bootstrap(b) => Some(b.clone()),
                Report::Status(_) | Report::DeleteBatch(_) => None,
            })
            .unwrap_or_else(|| panic!("no bootstrap result; stderr:\n{}", self.stderr))
    }
    /// The last status patch's `status`.
    fn status(&self) -> Value {
        self.reports
            .iter()
            .rev()
            .find_map(|r| match r {
                Report::Status(v) if v["status"].get("observedAt").is_none() => Some(v["status"].clone()),
                Report::Status(_) | Report::Bootstrap(_) | Report::DeleteBatch(_) => None,
            })
            .unwrap_or_else(|| panic!("no status report; stderr:\n{}", self.stderr))
    }
    fn batch(&self) -> DeleteBatchReport {
        self.reports
            .iter()
            .find_map(|r| match r {
                Report::DeleteBatch(b) => Some(b.clone()),
                Report::Status(_) | Report::Bootstrap(_) => None,
            })
            .unwrap_or_else(|| panic!("no batch report; stderr:\n{}", self.stderr))
    }
}

impl Bench {
    async fn new() -> Bench {
        let tmp = tempfile::Builder::new().prefix("kopiur-mover-").tempdir().unwrap();
        let garage = Garage::start(&tmp.path().join("garage")).await.unwrap();
        let proxy = FaultProxy::start(garage.s3_addr()).await.unwrap();
        let audit = tmp.path().join("kopia-argv.log");
        let wrapper = tmp.path().join("kopia-audit");
        let kopia = kopiur_testenv::tools::kopia().unwrap();
        std::fs::write(
            &wrapper,
            format!("#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{}'\nexec '{}' \"$@\"\n", audit.display(), kopia.display()),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
        Bench { tmp, garage, proxy, wrapper, audit, runs: std::cell::Cell::new(0) }
    }

    fn path(&self) -> &Path {
        self.tmp.path()
    }

    fn backend(&self, bucket: &str) -> Backend {
        Backend::S3(S3Backend {
            bucket: bucket.into(),
            endpoint: Some(self.proxy.endpoint()),
            region: Some("garage".into()),
            disable_tls: true,
            ..Default::default()
        })
    }

    fn spec(&self, backend: Backend, identity: Identity, op: Operation) -> WorkSpec {
        WorkSpec {
            schema_version: SCHEMA_VERSION,
            target_ref: TargetRef {
                api_version: "kopiur.home-operations.com/v1alpha1".into(),
                kind: "Snapshot".into(),
                namespace: Some("t".into()),
                name: "target".into(),
                uid: "uid-target".into(),
            },
            repository: RepositoryInfo {
                kind: "Repository".into(),
                namespace: Some("t".into()),
                name: "r".into(),
                uid: "uid-r".into(),
                backend,
                client_identity: identity,
                read_only: false,
                cache: CacheSizes::default(),
            },
            command_timeout_seconds: 60,
            heartbeat_seconds: 30,
            connect_timeout_seconds: None,
            operation: op,
        }
    }

    fn audit_lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.audit).unwrap_or_default().lines().map(String::from).collect()
    }

    /// Runs the mover binary with the given env overrides.
    async fn mover(&self, spec: &WorkSpec, env: &[(&str, &str)]) -> Run {
        let n = self.runs.get() + 1;
        self.runs.set(n);
        let work = self.path().join(format!("work-{n}"));
        std::fs::create_dir_all(&work).unwrap();
        let result = self.path().join(format!("result-{n}.jsonl"));
        std::fs::write(self.path().join(format!("spec-{n}.json")), spec.to_json().unwrap()).unwrap();
        let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_kopiur-mover"));
        c.env("KOPIUR_WORK_SPEC", spec.to_json().unwrap())
            .env("KOPIUR_WORKDIR", &work)
            .env("KOPIUR_KOPIA_BINARY", &self.wrapper)
            .env("KOPIUR_RESULT_FILE", &result)
            .env("KOPIUR_JOB_UID", format!("job-{n}"))
            .env("KOPIA_PASSWORD", PASSWORD)
            .env("AWS_ACCESS_KEY_ID", garage::ACCESS_KEY_ID)
            .env("AWS_SECRET_ACCESS_KEY", garage::SECRET_ACCESS_KEY)
            .env("RUST_LOG", "info,kopia=debug")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        for (k, v) in env {
            c.env(k, v);
        }
        let start = Instant::now();
        let out =
            tokio::time::timeout(Duration::from_secs(600), c.output()).await.expect("mover under 10 min").unwrap();
        let reports = std::fs::read_to_string(&result)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
        std::fs::write(self.path().join(format!("mover-{n}.log")), &stderr).unwrap();
        Run { exit: out.status.code().unwrap_or(-1), reports, stderr, elapsed: start.elapsed() }
    }

    async fn bootstrap(&self, bucket: &str, gate: CreateGate, pinned: Option<String>, probe: bool) -> Run {
        let op = Operation::BootstrapRepository(BootstrapRepositoryOp {
            create_gate: gate,
            pinned_unique_id: pinned,
            probe,
            list_snapshots: true,
            catalog_limit: 1000,
            verify_snapshot_ids: Vec::new(),
            maintenance_owner: OWNER.into(),
            create: Default::default(),
        });
        self.mover(&self.spec(self.backend(bucket), Identity::new("kopiur-ops", "kopiur.t.r"), op), &[]).await
    }

    fn snapshot_op(&self, mount: &Path, ignore_identical: bool) -> Operation {
        Operation::Snapshot(SnapshotOp {
            mount_path: mount.display().to_string(),
            source_path: "/pvc/data".into(),
            snapshot: "t/s1".into(),
            snapshot_uid: "uid-s1".into(),
            tags: BTreeMap::from([("team".to_string(), "a".to_string())]),
            description: None,
            policy: PathPolicy { ignore_identical_snapshots: ignore_identical, ..Default::default() },
            fail_fast: false,
            upload_limit_mb: None,
            parallel: None,
        })
    }

    /// A direct kopia client (not through the mover) for setup and checks.
    async fn kopia(&self, name: &str, id: Identity) -> Runner {
        let work = self.path().join(format!("direct-{name}"));
        std::fs::create_dir_all(&work).unwrap();
        let r = Runner::new(kopiur_testenv::tools::kopia().unwrap(), Duration::from_secs(120))
            .envs(KopiaEnv::new(&work, work.join("cache")).vars())
            .env("KOPIA_PASSWORD", PASSWORD)
            .env("AWS_ACCESS_KEY_ID", garage::ACCESS_KEY_ID)
            .env("AWS_SECRET_ACCESS_KEY", garage::SECRET_ACCESS_KEY);
        r.run_ok(&cmd::connect(&self.backend(garage::BUCKET), &id, false, &CacheSizes::default()).unwrap())
            .await
            .expect("direct connect");
        r
    }
}

fn tree(root: &Path, files: usize) {
    for i in 0..files {
        let d = root.join(format!("d{:02}", i % 40));
        std::fs::create_dir_all(&d).unwrap();
        let body: Vec<u8> = (0..(64 + (i * 37) % 4000)).map(|j| ((i * 31 + j * 7) % 251) as u8).collect();
        std::fs::write(d.join(format!("f{i:05}.bin")), body).unwrap();
    }
}

fn checksums(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            } else {
                let h = hex::encode(Sha256::digest(std::fs::read(&p).unwrap()));
                out.insert(p.strip_prefix(root).unwrap().to_path_buf(), h);
            }
        }
    }
    out
}

fn failure_class(status: &Value) -> &str {
    status["failure"]["kopiaErrorClass"].as_str().unwrap_or("<none>")
}

/// The classification acceptance list, from real kopia runs through the mover.
#[tokio::test]
async fn classification_acceptance() {
    let b = Bench::new().await;

    // Empty bucket: not initialized (probe: never creates).
    let r = b.bootstrap(garage::BUCKET, CreateGate::Allowed { via_reinit_ack: false }, None, true).await;
    let res = r.bootstrap();
    assert_eq!(r.exit, 0);
    assert_eq!(res.outcome, BootstrapOutcome::Failed);
    let f = res.failure.unwrap();
    assert_eq!((f.class.as_str(), f.not_initialized), ("NotFound", true), "{f:?}");
    assert!(b.garage.list_objects(garage::BUCKET, "").await.unwrap().is_empty(), "probe created nothing");

    // Missing bucket, on connect: not initialized too.
    let r = b.bootstrap("no-such-bucket", CreateGate::DisabledBySpec { also_pinned: false }, None, false).await;
    let f = r.bootstrap().failure.unwrap();
    assert_eq!((f.class.as_str(), f.not_initialized), ("NotFound", true), "{f:?}");
    assert_eq!(r.bootstrap().create_blocked.as_deref(), Some("DisabledBySpec"));

    // Create it for the rest.
    let r = b.bootstrap(garage::BUCKET, CreateGate::Allowed { via_reinit_ack: false }, None, false).await;
    assert_eq!(r.bootstrap().outcome, BootstrapOutcome::Created, "{}", r.stderr);

    // Wrong password: AuthFailure.
    let spec = b.spec(
        b.backend(garage::BUCKET),
        Identity::new("kopiur-ops", "kopiur.t.r"),
        Operation::BootstrapRepository(BootstrapRepositoryOp {
            create_gate: CreateGate::PinnedOnceReady,
            pinned_unique_id: None,
            probe: true,
            list_snapshots: false,
            catalog_limit: 10,
            verify_snapshot_ids: Vec::new(),
            maintenance_owner: OWNER.into(),
            create: Default::default(),
        }),
    );
    let r = b.mover(&spec, &[("KOPIA_PASSWORD", "not-the-password")]).await;
    assert_eq!(r.bootstrap().failure.unwrap().class, "AuthFailure");

    // Bad S3 secret: AccessDenied.
    let r = b.mover(&spec, &[("AWS_SECRET_ACCESS_KEY", &"0".repeat(64))]).await;
    assert_eq!(r.bootstrap().failure.unwrap().class, "AccessDenied", "{}", r.stderr);

    // Proxy refuse: RepositoryUnavailable.
    b.proxy.set(Mode::Refuse);
    let r = b.mover(&spec, &[]).await;
    let f = r.bootstrap().failure.unwrap();
    eprintln!("refuse: bootstrap verdict after {:?}", r.elapsed);
    assert_eq!((f.class.as_str(), f.timed_out), ("RepositoryUnavailable", false), "{f:?}");

    // Proxy blackhole: RepositoryUnavailable within the configured timeout.
    b.proxy.set(Mode::Blackhole);
    let mut short = spec.clone();
    short.command_timeout_seconds = 10;
    let r = b.mover(&short, &[]).await;
    let f = r.bootstrap().failure.unwrap();
    eprintln!("blackhole: bootstrap verdict after {:?}", r.elapsed);
    assert_eq!((f.class.as_str(), f.timed_out), ("RepositoryUnavailable", true), "{f:?}");
    assert_eq!(f.summary, "kopia repository connect timed out after 10s");
    assert!(r.elapsed < Duration::from_secs(15), "{:?}", r.elapsed);
    b.proxy.set(Mode::Pass);

    // Missing source path: SourceError (retryable -> exit 1).
    let missing = b.path().join("no-such-source");
    let s = b.spec(b.backend(garage::BUCKET), Identity::new("app", "t"), b.snapshot_op(&missing, false));
    let r = b.mover(&s, &[]).await;
    assert_eq!(failure_class(&r.status()), "SourceError", "{}", r.stderr);
    assert_eq!(r.exit, 1, "{}", r.stderr);

    // Foreign maintenance owner: Never yields and leaves the owner; Force takes over.
    let foreign = b.kopia("foreign", Identity::new("user", "host")).await;
    foreign.run_ok(&cmd::maintenance_set_owner("me")).await.unwrap();
    let maint = |policy| {
        b.spec(
            b.backend(garage::BUCKET),
            Identity::new("kopiur", "kopiur.t.r"),
            Operation::Maintenance(MaintenanceOp {
                mode: MaintenanceMode::Quick,
                lease_owner: OWNER.into(),
                owner_aliases: vec![],
                takeover_policy: policy,
            }),
        )
    };
    let r = b.mover(&maint(TakeoverPolicy::Never), &[]).await;
    let st = r.status();
    assert_eq!(r.exit, 0);
    assert_eq!((st["phase"].as_str(), st["reason"].as_str()), (Some("Yielded"), Some("LeaseHeldByOther")), "{st}");
    assert_eq!(st["owner"], "user@host");
    let info: MaintenanceInfo =
        model::parse("maintenance info", &foreign.run_ok(&cmd::maintenance_info()).await.unwrap().stdout).unwrap();
    assert_eq!(info.owner, "user@host");
    let r = b.mover(&maint(TakeoverPolicy::Force), &[]).await;
    let st = r.status();
    assert_eq!(st["phase"], "Succeeded", "{st} {}", r.stderr);
    assert_eq!(st["owner"], OWNER);

    // A maintenance Job connecting with the wrong identity is refused by kopia itself:
    // its own verdict (lease lost -> Yielded), not a failure.
    let mut wrong = maint(TakeoverPolicy::Never);
    wrong.repository.client_identity = Identity::new("kopiur", "somewhere.else");
    let r = b.mover(&wrong, &[]).await;
    let st = r.status();
    assert_eq!((st["phase"].as_str(), st["owner"].as_str()), (Some("Yielded"), Some(OWNER)), "{st} {}", r.stderr);
    assert!(r.stderr.contains("maintenance must be run by designated user"), "{}", r.stderr);

    assert_no_secrets(&b);
}

/// Bootstrap creates and reports a uniqueId; a second one reports the same; with the id
/// pinned and the bucket wiped the verdict is vanished and nothing is re-created.
#[tokio::test]
async fn bootstrap_lifecycle() {
    let b = Bench::new().await;
    let allowed = CreateGate::Allowed { via_reinit_ack: false };
    let r = b.bootstrap(garage::BUCKET, allowed.clone(), None, false).await;
    let first = r.bootstrap();
    assert_eq!(first.outcome, BootstrapOutcome::Created, "{}", r.stderr);
    let id = first.unique_id_hex.clone().unwrap();
    assert_eq!(id.len(), 64);
    assert_eq!(first.maintenance_owner.as_deref(), Some(OWNER), "{}", r.stderr);
    assert!(first.index_blob_count.is_some());

    let r = b.bootstrap(garage::BUCKET, CreateGate::PinnedOnceReady, Some(id.clone()), false).await;
    let second = r.bootstrap();
    assert_eq!(second.outcome, BootstrapOutcome::Connected);
    assert_eq!(second.unique_id_hex.as_deref(), Some(id.as_str()));

    let wiped = b.garage.wipe_bucket(garage::BUCKET, "").await.unwrap();
    assert!(wiped > 0);
    let creates_before = b.audit_lines().iter().filter(|l| l.starts_with("repository create")).count();
    let r = b.bootstrap(garage::BUCKET, CreateGate::PinnedOnceReady, Some(id.clone()), false).await;
    let third = r.bootstrap();
    assert_eq!(third.outcome, BootstrapOutcome::Failed);
    let f = third.failure.unwrap();
    assert_eq!((f.class.as_str(), f.not_initialized), ("NotFound", true));
    assert_eq!(third.create_blocked.as_deref(), Some("PinnedOnceReady"));
    assert_eq!(b.audit_lines().iter().filter(|l| l.starts_with("repository create")).count(), creates_before);
    assert!(b.garage.list_objects(garage::BUCKET, "").await.unwrap().is_empty(), "storage stays empty");
    assert_no_secrets(&b);
}

/// ≥ 1,000 files back up with stats, an identical re-run is Unchanged, a restore into an
/// empty directory reproduces every file byte for byte, and kopia's own retention keeps
/// every snapshot of the identity.
#[tokio::test]
async fn backup_unchanged_restore() {
    let b = Bench::new().await;
    assert_eq!(
        b.bootstrap(garage::BUCKET, CreateGate::Allowed { via_reinit_ack: false }, None, false)
            .await
            .bootstrap()
            .outcome,
        BootstrapOutcome::Created
    );
    let src = b.path().join("src");
    tree(&src, 1200);
    let app = Identity::new("app", "t");
    let s = b.spec(b.backend(garage::BUCKET), app.clone(), b.snapshot_op(&src, true));
    let r = b.mover(&s, &[]).await;
    let st = r.status();
    assert_eq!(r.exit, 0, "{}", r.stderr);
    assert_eq!(st["phase"], "Succeeded", "{st}");
    let id = st["snapshot"]["kopiaSnapshotID"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 32);
    // status.stats uses the API's field names (it must parse as kopiur_api's SnapshotStats).
    let stats: kopiur_api::snapshot::SnapshotStats = serde_json::from_value(st["stats"].clone()).unwrap();
    assert_eq!(stats.files_new.unwrap_or(0) + stats.files_unchanged.unwrap_or(0), 1200, "{st}");
    assert_eq!(stats.files_new, Some(1200), "a first backup hashes every file: {st}");
    assert!(stats.size_bytes.unwrap_or(0) > 0, "{st}");
    eprintln!("backup of 1200 files took {:?}", r.elapsed);

    let r = b.mover(&s, &[]).await;
    assert_eq!(r.exit, 0);
    assert_eq!(r.status()["phase"], "Unchanged", "{}", r.stderr);

    // Restore by identity resolution into an empty directory.
    let dst = b.path().join("restored");
    std::fs::create_dir_all(&dst).unwrap();
    let op = Operation::Restore(RestoreOp {
        snapshot_id: None,
        resolve: Some(ResolveIdentity {
            identity: app.clone(),
            source_path: "/pvc/data".into(),
            as_of: None,
            offset: 0,
        }),
        target_path: dst.display().to_string(),
        options: Default::default(),
        controller_completes: false,
    });
    let r = b.mover(&b.spec(b.backend(garage::BUCKET), Identity::new("kopiur-ops", "kopiur.t.r"), op), &[]).await;
    let st = r.status();
    assert_eq!(st["phase"], "Completed", "{st} {}", r.stderr);
    assert_eq!(st["resolved"]["kopiaSnapshotID"], id.as_str());
    let (a, c) = (checksums(&src), checksums(&dst));
    assert_eq!(a.len(), 1200);
    assert_eq!(a, c, "restored tree differs");

    // A populate (`controller_completes`): the same restore, but the phase is left to the
    // controller, which binds the volume first; the resolution and timing are still reported.
    let dst2 = b.path().join("restored-populate");
    std::fs::create_dir_all(&dst2).unwrap();
    let op = Operation::Restore(RestoreOp {
        snapshot_id: Some(id.clone()),
        resolve: None,
        target_path: dst2.display().to_string(),
        options: Default::default(),
        controller_completes: true,
    });
    let r = b.mover(&b.spec(b.backend(garage::BUCKET), Identity::new("kopiur-ops", "kopiur.t.r"), op), &[]).await;
    assert_eq!(r.exit, 0, "{}", r.stderr);
    let st = r.status();
    assert!(st.get("phase").is_none(), "the controller completes a populate: {st}");
    assert_eq!(st["resolved"]["kopiaSnapshotID"], id.as_str());
    assert!(st["timing"]["endTime"].is_string(), "{st}");
    assert_eq!(checksums(&dst2), a, "restored tree differs");

    // kopia's retention is pinned to keep-forever at the identity: 12 more snapshots
    // (more than kopia's default keep-latest 10) all survive.
    let s2 = b.spec(b.backend(garage::BUCKET), app.clone(), b.snapshot_op(&src, false));
    for i in 0..12 {
        std::fs::write(src.join(format!("changing-{i}")), format!("{i}")).unwrap();
        let r = b.mover(&s2, &[]).await;
        assert_eq!(r.status()["phase"], "Succeeded", "{}", r.stderr);
    }
    let direct = b.kopia("check", Identity::new("kopiur-ops", "kopiur.t.r")).await;
    let out = direct.run_ok(&cmd::snapshot_list(Some(&app.source("/pvc/data")))).await.unwrap();
    let list: Vec<SnapshotManifest> = model::parse("snapshot list", &out.stdout).unwrap();
    assert_eq!(list.len(), 13, "every snapshot kept");
    let pol = direct.run_ok(&cmd::policy_show(&app.user_at_host())).await.unwrap();
    let pol: Value = model::parse("policy show", &pol.stdout).unwrap();
    assert_eq!(pol["retention"]["keepLatest"], 1_000_000_000, "{pol}");
    assert_no_secrets(&b);
}

/// A batch verifies every member against the repository before it deletes anything: one
/// connect and one listing for the whole batch, chunked deletes of the verified ids, ids already
/// gone released, manifests made outside kopiur (no uid tag) deleted on their recorded source, and
/// every forged member refused with its kopia data kept: another source's id,
/// another Snapshot's id under the right source, a root object id, a member with no recorded
/// source, and a policy manifest's id. The termination message says the same to the controller.
#[tokio::test]
async fn delete_batch_verifies_every_member_before_it_deletes() {
    let b = Bench::new().await;
    assert_eq!(
        b.bootstrap(garage::BUCKET, CreateGate::Allowed { via_reinit_ack: false }, None, false)
            .await
            .bootstrap()
            .outcome,
        BootstrapOutcome::Created
    );
    const N: usize = 40;
    let direct = b.kopia("maker", Identity::new("app", "t")).await;
    direct.run_ok(&cmd::policy_keep_forever(&Identity::new("app", "t"))).await.unwrap();
    let root = b.path().join("many");
    let mut members = Vec::new();
    let mut made = Vec::new();
    for i in 0..N {
        let d = root.join(format!("s{i:03}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("f"), format!("{i}")).unwrap();
        let uid = format!("uid-{i}");
        // The last two were made outside kopiur (no uid tag): their recorded source vouches.
        let tags = if i < N - 2 { vec![("kopiur-uid".into(), uid.clone())] } else { vec![] };
        let o = cmd::SnapshotCreateOptions { tags, ..Default::default() };
        let out = direct.run_ok(&cmd::snapshot_create(&d.display().to_string(), &o)).await.unwrap();
        let m: Vec<SnapshotManifest> = model::parse_stream("snapshot create", &out.stdout).unwrap();
        members.push(DeleteMember { uid, snapshot_id: m[0].id.clone(), source: format!("app@t:{}", d.display()) });
        made.push(m[0].clone());
    }
    // Another tenant's backup, which every forged member points at.
    let victim_dir = b.path().join("victim");
    std::fs::create_dir_all(&victim_dir).unwrap();
    std::fs::write(victim_dir.join("precious"), "t1's data").unwrap();
    let o = cmd::SnapshotCreateOptions {
        override_source: Some("app@t1:/pvc/victim".into()),
        tags: vec![("kopiur-uid".into(), "uid-victim".into())],
        ..Default::default()
    };
    let out = direct.run_ok(&cmd::snapshot_create(&victim_dir.display().to_string(), &o)).await.unwrap();
    let victim: SnapshotManifest = model::parse_stream("snapshot create", &out.stdout).unwrap().remove(0);
    let victim_root = victim.root_entry.as_ref().unwrap().obj.clone();
    let manifests = direct.run_ok(&cmd::manifest_list()).await.unwrap();
    let manifests: Vec<model::ManifestEntry> = model::parse("manifest list", &manifests.stdout).unwrap();
    let policy_id = manifests.iter().find(|m| m.label("type") == Some("policy")).expect("a policy manifest").id.clone();
    let forged = |uid: &str, id: &str, source: &str| DeleteMember {
        uid: uid.into(),
        snapshot_id: id.into(),
        source: source.into(),
    };
    members.extend([
        forged("uid-f-other-source", &victim.id, "app@t:/pvc/mine"),
        forged("uid-f-other-uid", &victim.id, "app@t1:/pvc/victim"),
        forged("uid-f-root", &victim_root, "app@t1:/pvc/victim"),
        forged("uid-f-no-source", &victim.id, ""),
        forged("uid-f-policy", &policy_id, "app@t:/pvc/mine"),
    ]);
    // Five are deleted out of band first.
    let gone: Vec<String> = made[..5].iter().map(|m| m.id.clone()).collect();
    direct.run_ok(&cmd::snapshot_delete(&gone)).await.unwrap();

    let uids: Vec<String> = members.iter().map(|m| m.uid.clone()).collect();
    let op =
        Operation::SnapshotDeleteBatch(SnapshotDeleteBatchOp { members, chunk_size: 10, chunk_timeout_seconds: 300 });
    let before = b.audit_lines().len();
    let message = b.path().join("termination-log");
    let r = b
        .mover(
            &b.spec(b.backend(garage::BUCKET), Identity::new("kopiur-ops", "kopiur.t.r"), op),
            &[("KOPIUR_TERMINATION_LOG", &message.display().to_string())],
        )
        .await;
    assert_eq!(r.exit, 3, "a refused member fails the Job (FailJob), its message names who was released: {}", r.stderr);
    let calls: Vec<String> = b.audit_lines()[before..].to_vec();
    assert_eq!(calls.iter().filter(|l| l.starts_with("repository connect")).count(), 1, "{calls:#?}");
    assert_eq!(calls.iter().filter(|l| l.starts_with("manifest list")).count(), 1, "{calls:#?}");
    assert_eq!(calls.iter().filter(|l| l.starts_with("manifest show")).count(), 0, "{calls:#?}");
    for l in calls.iter().filter(|l| l.starts_with("snapshot delete")) {
        assert!(!l.contains(&victim.id) && !l.contains(&victim_root) && !l.contains(&policy_id), "{l}");
    }
    let rep = r.batch();
    let count = |o: &str| rep.members.iter().filter(|m| m.outcome == o).count();
    assert_eq!((count("deleted"), count("alreadyDeleted"), count("refused"), count("failed")), (N - 5, 5, 5, 0));
    let refusal = |uid: &str| rep.members.iter().find(|m| m.uid == uid).and_then(|m| m.refusal.clone());
    assert_eq!(refusal("uid-f-other-source").as_deref(), Some("other-source"));
    assert_eq!(refusal("uid-f-other-uid").as_deref(), Some("uid-tag-mismatch"));
    assert_eq!(refusal("uid-f-root").as_deref(), Some("not-a-manifest-id"));
    assert_eq!(refusal("uid-f-no-source").as_deref(), Some("no-recorded-identity"));
    assert_eq!(refusal("uid-f-policy").as_deref(), Some("other-source"));
    eprintln!("delete batch: {} delete calls in {:?}", rep.delete_calls, r.elapsed);
    let text = std::fs::read_to_string(&message).unwrap();
    let said = kopiur_mover::batch_outcome::parse(&text, &uids).expect("a batch message");
    use kopiur_mover::batch_outcome::MemberOutcome;
    assert_eq!(said.values().filter(|o| **o == MemberOutcome::Released).count(), N);
    assert_eq!(said.values().filter(|o| matches!(o, MemberOutcome::Refused(_))).count(), 5);
    // The victim's backup and the policy are intact; every legitimate member's is gone.
    let out = direct.run_ok(&cmd::manifest_list()).await.unwrap();
    let left: Vec<model::ManifestEntry> = model::parse("manifest list", &out.stdout).unwrap();
    let snapshots: Vec<&str> =
        left.iter().filter(|m| m.label("type") == Some("snapshot")).map(|m| m.id.as_str()).collect();
    assert_eq!(snapshots, vec![victim.id.as_str()]);
    assert!(left.iter().any(|m| m.id == policy_id), "the policy manifest is kept");
    assert_no_secrets(&b);
}

/// No secret value in argv (audit log), work specs, mover logs or reports.
fn assert_no_secrets(b: &Bench) {
    let secrets = [PASSWORD, garage::SECRET_ACCESS_KEY];
    let mut haystacks = vec![("argv", std::fs::read_to_string(&b.audit).unwrap_or_default())];
    for e in std::fs::read_dir(b.path()).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with("result-") || name.starts_with("mover-") || name.starts_with("spec-") {
            haystacks.push(("file", std::fs::read_to_string(&p).unwrap()));
        }
    }
    for (what, text) in haystacks {
        for s in secrets {
            assert!(!text.contains(s), "a secret appears in {what}");
        }
    }
    // The private kopia config (which holds the S3 secret) is removed after each run.
    for e in std::fs::read_dir(b.path()).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap().to_string_lossy().starts_with("work-") {
            assert!(!p.join("repository.config").exists(), "{} kept its config", p.display());
        }
    }
}

/// T48 (docs/design/test-tiers.md §13.3): replication with the destination's own credentials. The
/// destination keys reach only the `sync-to` child, as `KOPIUR_DEST_*`: with a wrong
/// destination secret the sync fails while the source connect succeeds (so those keys, not
/// the source's, are the ones used); with the right one it succeeds. No key or password is in
/// any argv or work spec, and the destination then opens with the source's password and holds
/// the source's snapshot.
#[tokio::test]
async fn replication_uses_the_destination_credentials_and_leaks_none() {
    let b = Bench::new().await;
    let at = |prefix: &str| {
        Backend::S3(S3Backend {
            bucket: garage::BUCKET.into(),
            endpoint: Some(b.proxy.endpoint()),
            region: Some("garage".into()),
            disable_tls: true,
            prefix: Some(prefix.into()),
            ..Default::default()
        })
    };
    let ops = Identity::new("kopiur-ops", "kopiur.t.r");
    let boot = Operation::BootstrapRepository(BootstrapRepositoryOp {
        create_gate: CreateGate::Allowed { via_reinit_ack: false },
        pinned_unique_id: None,
        probe: false,
        list_snapshots: false,
        catalog_limit: 1000,
        verify_snapshot_ids: Vec::new(),
        maintenance_owner: OWNER.into(),
        create: Default::default(),
    });
    let r = b.mover(&b.spec(at("t48-src/"), ops.clone(), boot), &[]).await;
    assert_eq!(r.bootstrap().outcome, BootstrapOutcome::Created, "{}", r.stderr);
    let src = b.path().join("t48-data");
    tree(&src, 40);
    let app = Identity::new("app", "t48");
    let r = b.mover(&b.spec(at("t48-src/"), app.clone(), b.snapshot_op(&src, false)), &[]).await;
    assert_eq!(r.status()["phase"], "Succeeded", "{}", r.stderr);
    let id = r.status()["snapshot"]["kopiaSnapshotID"].as_str().unwrap().to_string();

    let replicate = b.spec(
        at("t48-src/"),
        ops.clone(),
        Operation::Replicate(ReplicateOp { destination: at("t48-dst/"), sync: Default::default() }),
    );
    let wrong = b
        .mover(
            &replicate,
            &[
                ("KOPIUR_DEST_AWS_ACCESS_KEY_ID", garage::ACCESS_KEY_ID),
                ("KOPIUR_DEST_AWS_SECRET_ACCESS_KEY", "not-the-destination-secret"),
            ],
        )
        .await;
    assert_ne!(wrong.exit, 0, "a wrong destination secret must fail the sync: {}", wrong.stderr);
    assert!(
        b.audit_lines().iter().filter(|l| l.starts_with("repository sync-to")).count() >= 1,
        "the source connected and the sync ran: {}",
        wrong.stderr
    );
    let right = b
        .mover(
            &replicate,
            &[
                ("KOPIUR_DEST_AWS_ACCESS_KEY_ID", garage::ACCESS_KEY_ID),
                ("KOPIUR_DEST_AWS_SECRET_ACCESS_KEY", garage::SECRET_ACCESS_KEY),
            ],
        )
        .await;
    assert_eq!(right.exit, 0, "{}", right.stderr);
    assert_eq!(right.status()["phase"], "Succeeded", "{}", right.stderr);

    // Nothing secret in any argv, work spec, result or log, and no key in the work spec.
    assert_no_secrets(&b);
    let spec_text = replicate.to_json().unwrap();
    for k in [garage::ACCESS_KEY_ID, garage::SECRET_ACCESS_KEY, PASSWORD] {
        assert!(!spec_text.contains(k), "the replication work spec holds a credential");
        assert!(!b.audit_lines().iter().any(|l| l.contains(k)), "a kopia argv holds a credential");
    }

    // The destination is a copy of the source repository: the source password opens it.
    let work = b.path().join("direct-t48-dst");
    std::fs::create_dir_all(&work).unwrap();
    let dst = Runner::new(kopiur_testenv::tools::kopia().unwrap(), Duration::from_secs(120))
        .envs(KopiaEnv::new(&work, work.join("cache")).vars())
        .env("KOPIA_PASSWORD", PASSWORD)
        .env("AWS_ACCESS_KEY_ID", garage::ACCESS_KEY_ID)
        .env("AWS_SECRET_ACCESS_KEY", garage::SECRET_ACCESS_KEY);
    dst.run_ok(&cmd::connect(&at("t48-dst/"), &ops, true, &CacheSizes::default()).unwrap())
        .await
        .expect("the destination opens with the source password");
    let out = dst.run_ok(&cmd::snapshot_list(Some(&app.source("/pvc/data")))).await.unwrap();
    let list: Vec<SnapshotManifest> = model::parse("snapshot list", &out.stdout).unwrap();
    assert!(list.iter().any(|m| m.id == id), "the destination holds the source's snapshot {id}: {list:?}");
}

/// docs/design/mover.md §2.3 "Partial": kopia exits 1 with a manifest on stdout when it saved a
/// snapshot with fatal file errors; the mover records that manifest's id so deleting the CR
/// removes it. Real kopia runs as uid 65532 (through `setpriv`) and meets a mode-000 file it
/// cannot read: the attempt fails as `PermissionDenied` (its own class, exit 3, naming the
/// file), and `status.snapshot.kopiaSnapshotID` is the id of the manifest kopia really saved.
#[tokio::test]
async fn a_partial_snapshot_records_the_saved_manifest_id() {
    use std::os::unix::fs::PermissionsExt;
    let b = Bench::new().await;
    assert_eq!(
        b.bootstrap(garage::BUCKET, CreateGate::Allowed { via_reinit_ack: false }, None, false)
            .await
            .bootstrap()
            .outcome,
        BootstrapOutcome::Created
    );
    // uid 65532 must reach kopia, its work directory and the source.
    std::fs::set_permissions(b.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let kopia = b.path().join("kopia-65532");
    std::fs::copy(kopiur_testenv::tools::kopia().unwrap(), &kopia).unwrap();
    std::fs::set_permissions(&kopia, std::fs::Permissions::from_mode(0o755)).unwrap();
    let wrapper = b.path().join("kopia-as-65532");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{}'\nexec setpriv --reuid=65532 --regid=65532 --clear-groups '{}' \"$@\"\n",
            b.audit.display(),
            kopia.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let work = b.path().join("work-as-65532");
    std::fs::create_dir_all(work.join("logs")).unwrap();
    for d in [&work, &work.join("logs")] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let src = b.path().join("partial-src");
    tree(&src, 30);
    let locked = src.join("d00").join("locked.bin");
    std::fs::write(&locked, "nobody but root reads this").unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();

    let app = Identity::new("app", "t");
    let s = b.spec(b.backend(garage::BUCKET), app.clone(), b.snapshot_op(&src, false));
    let r = b
        .mover(&s, &[("KOPIUR_KOPIA_BINARY", wrapper.to_str().unwrap()), ("KOPIUR_WORKDIR", work.to_str().unwrap())])
        .await;
    let st = r.status();
    assert!(r.stderr.contains("fatal error"), "kopia reported a partial snapshot: {}", r.stderr);
    assert_eq!(failure_class(&st), "PermissionDenied", "{st}\n{}", r.stderr);
    assert_eq!(r.exit, 3, "{}", r.stderr);
    assert!(st["failure"]["message"].as_str().unwrap_or_default().contains("locked.bin"), "{st}");
    assert!(st.get("phase").is_none(), "a failed attempt writes no phase: {st}");
    let id = st["snapshot"]["kopiaSnapshotID"].as_str().unwrap_or_else(|| panic!("no manifest id recorded: {st}"));
    assert_eq!(st["snapshot"]["identity"]["username"], "app", "{st}");

    // The recorded id is the manifest kopia saved, and only that one exists for the identity.
    let direct = b.kopia("partial-check", Identity::new("kopiur-ops", "kopiur.t.r")).await;
    let out = direct.run_ok(&cmd::snapshot_list(Some(&app.source("/pvc/data")))).await.unwrap();
    let list: Vec<SnapshotManifest> = model::parse("snapshot list", &out.stdout).unwrap();
    assert_eq!(
        list.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
        vec![id],
        "the saved manifest is the one recorded"
    );
    assert_no_secrets(&b);
}
