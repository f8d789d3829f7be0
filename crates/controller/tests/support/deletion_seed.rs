//! Fast seeding for the ADR-0006 deletion end-to-end test and the deletion-wave benchmark:
//! the local control plane, Garage, kopia repositories created directly with the kopia
//! binary (one `kopia snapshot create d1 … dN` makes N manifests with one connect),
//! Repository CRs pointing at them, Succeeded Snapshot CRs written straight through the API
//! (finalizer in metadata, status through the status subresource), an auditing kopia wrapper
//! for the movers (every invocation and its exit code, so repository connects and deletes can
//! be counted) and a recorder of every batch delete Job ever seen.
//!
//! Shared by `tests/deletion_e2e.rs` and `examples/deletion-wave-bench.rs` through `#[path]`.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kopiur_api::{Repository, Snapshot};
use kopiur_testenv::TestEnv;
use kopiur_testenv::garage::Garage;
use kopiur_testenv::operator::Operator;
pub use kopiur_testenv::wait::wait_for;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

pub const PASSWORD: &str = "deletion-e2e correct horse";
pub const FINALIZER: &str = "kopiur.home-operations.com/snapshot-cleanup";
pub const PRUNED_BY: &str = "kopiur.home-operations.com/pruned-by";
pub const ALLOW_MASS_DELETION: &str = "kopiur.home-operations.com/allow-mass-deletion";
pub const DELETE_MEMBERS: &str = "kopiur.home-operations.com/delete-members";
pub const DELETE_REPO: &str = "kopiur.home-operations.com/delete-repo";
pub const OP_BATCH: &str = "kopiur.home-operations.com/op=snapshot-delete-batch";
/// Seeded Snapshots are grouped by this label (one value per scenario set).
pub const SET: &str = "deletion-e2e/set";
/// A SnapshotPolicy that never exists: a Snapshot the controller reads before its status is
/// written parks as PolicyNotFound instead of being failed, and its resourceVersion-guarded
/// status write cannot overwrite the seeded Succeeded status.
pub const ABSENT_POLICY: &str = "seeded-no-such-policy";

/// One kopia invocation by a mover, from the auditing wrapper's log.
#[derive(Clone, Debug)]
pub struct Call {
    /// Order in the log.
    pub seq: usize,
    /// The wrapper's pid inside its container: each container is PID 1 of its own PID
    /// namespace, so pids repeat across pods and identify a call only with `host`.
    pub pid: u32,
    pub ppid: u32,
    /// The pod (HOSTNAME): one mover run, since mover pods never restart.
    pub host: String,
    pub args: Vec<String>,
    /// None while running, or when the wrapper was killed.
    pub rc: Option<i32>,
}

impl Call {
    pub fn is_connect(&self) -> bool {
        self.args.len() >= 2 && self.args[0] == "repository" && self.args[1] == "connect"
    }
    pub fn is_delete(&self) -> bool {
        self.args.len() >= 2 && self.args[0] == "snapshot" && self.args[1] == "delete"
    }
    /// The manifest ids of a `snapshot delete`.
    pub fn delete_ids(&self) -> Vec<String> {
        if !self.is_delete() {
            return Vec::new();
        }
        self.args[2..].iter().filter(|a| !a.starts_with('-')).cloned().collect()
    }
}

/// The auditing wrapper the movers run instead of kopia (`KOPIUR_MOVER_KOPIA_BINARY`).
/// Movers run as a non-root UID: the directory, the kopia copy and the log are world
/// readable/writable.
pub struct Audit {
    pub dir: PathBuf,
    pub wrapper: PathBuf,
    pub log: PathBuf,
}

impl Audit {
    pub fn new(dir: &Path) -> Result<Audit> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777))?;
        let kopia = dir.join("kopia-real");
        std::fs::copy(kopiur_testenv::tools::kopia()?, &kopia)?;
        std::fs::set_permissions(&kopia, std::fs::Permissions::from_mode(0o755))?;
        let log = dir.join("kopia-calls.log");
        std::fs::write(&log, b"")?;
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o666))?;
        let wrapper = dir.join("kopia-audit");
        // One line before and one after each call: `S pid ppid host args…` / `E pid host rc`.
        // Not `exec`, so the exit code is recorded. A `snapshot delete` naming an id with a
        // `fail-delete-<id>` marker in the directory consumes the marker (one `rm` wins) and
        // fails without calling kopia: a one-shot fault for exactly that batch.
        let script = format!(
            "#!/bin/sh\nL='{log}'\nD='{dir}'\necho \"S $$ $PPID ${{HOSTNAME:-?}} $*\" >> \"$L\"\n\
             if [ \"$1\" = snapshot ] && [ \"$2\" = delete ]; then\n\
             for a in \"$@\"; do\n\
             if rm \"$D/fail-delete-$a\" 2>/dev/null; then\n\
             echo \"kopiur test fault: snapshot delete refused for $a\" >&2\n\
             echo \"E $$ ${{HOSTNAME:-?}} 1\" >> \"$L\"\nexit 1\nfi\ndone\nfi\n\
             '{kopia}' \"$@\"\nrc=$?\necho \"E $$ ${{HOSTNAME:-?}} $rc\" >> \"$L\"\nexit $rc\n",
            log = log.display(),
            dir = dir.display(),
            kopia = kopia.display()
        );
        std::fs::write(&wrapper, script)?;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))?;
        Ok(Audit { dir: dir.to_path_buf(), wrapper, log })
    }

    pub fn calls(&self) -> Vec<Call> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut calls: Vec<Call> = Vec::new();
        let mut open: BTreeMap<(String, u32), usize> = BTreeMap::new();
        for line in text.lines() {
            let mut it = line.split(' ');
            match it.next() {
                Some("S") => {
                    let pid: u32 = it.next().and_then(|v| v.parse().ok()).unwrap_or(0);
                    let ppid: u32 = it.next().and_then(|v| v.parse().ok()).unwrap_or(0);
                    let host = it.next().unwrap_or("").to_string();
                    let args: Vec<String> = it.filter(|a| !a.is_empty()).map(str::to_string).collect();
                    open.insert((host.clone(), pid), calls.len());
                    calls.push(Call { seq: calls.len(), pid, ppid, host, args, rc: None });
                }
                Some("E") => {
                    let pid: u32 = it.next().and_then(|v| v.parse().ok()).unwrap_or(0);
                    let host = it.next().unwrap_or("").to_string();
                    let rc: Option<i32> = it.next().and_then(|v| v.parse().ok());
                    if let Some(i) = open.remove(&(host, pid)) {
                        calls[i].rc = rc;
                    }
                }
                _ => {}
            }
        }
        calls
    }

    /// Arms a one-shot fault: the next mover `snapshot delete` naming manifest `id` fails
    /// (exit 1, an unclassified kopia error, so the batch Job fails without a retry) and
    /// deletes nothing. Later calls run kopia again.
    pub fn fail_next_delete_of(&self, id: &str) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let marker = self.dir.join(format!("fail-delete-{id}"));
        std::fs::write(&marker, b"")?;
        std::fs::set_permissions(&marker, std::fs::Permissions::from_mode(0o666))?;
        Ok(())
    }

    /// Whether the fault armed for `id` is still waiting (not yet consumed by a delete).
    pub fn fault_armed(&self, id: &str) -> bool {
        self.dir.join(format!("fail-delete-{id}")).exists()
    }

    /// Calls at or after `mark` (a previous `calls().len()`).
    pub fn since(&self, mark: usize) -> Vec<Call> {
        self.calls().into_iter().skip(mark).collect()
    }
}

/// Connects made by mover runs (pods) that also deleted snapshots (batch delete Jobs), and all
/// connects, among `calls`.
pub fn connect_counts(calls: &[Call]) -> (usize, usize) {
    let deleters: BTreeSet<&str> = calls.iter().filter(|c| c.is_delete()).map(|c| c.host.as_str()).collect();
    let all = calls.iter().filter(|c| c.is_connect()).count();
    let batch = calls.iter().filter(|c| c.is_connect() && deleters.contains(c.host.as_str())).count();
    (batch, all)
}

/// Manifest id -> number of successful (`rc=0`) `snapshot delete` calls naming it.
pub fn successful_deletes(calls: &[Call]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for c in calls.iter().filter(|c| c.is_delete() && c.rc == Some(0)) {
        for id in c.delete_ids() {
            *m.entry(id).or_insert(0) += 1;
        }
    }
    m
}

/// A kopia repository created and seeded directly, with its own client config.
pub struct KopiaRepo {
    pub prefix: String,
    pub work: PathBuf,
    bin: PathBuf,
    bucket: String,
    endpoint: String,
    region: String,
}

impl KopiaRepo {
    fn cmd(&self) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(&self.bin);
        c.env("KOPIA_CONFIG_PATH", self.work.join("repository.config"))
            .env("KOPIA_CACHE_DIRECTORY", self.work.join("cache"))
            .env("KOPIA_LOG_DIR", self.work.join("logs"))
            .env("KOPIA_CHECK_FOR_UPDATES", "false")
            .env("KOPIA_PASSWORD", PASSWORD)
            .env("AWS_ACCESS_KEY_ID", kopiur_testenv::garage::ACCESS_KEY_ID)
            .env("AWS_SECRET_ACCESS_KEY", kopiur_testenv::garage::SECRET_ACCESS_KEY)
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_PROFILE")
            .kill_on_drop(true);
        c
    }

    async fn run(&self, args: &[String], cwd: Option<&Path>) -> Result<String> {
        let mut c = self.cmd();
        c.args(args);
        if let Some(d) = cwd {
            c.current_dir(d);
        }
        let out = tokio::time::timeout(Duration::from_secs(300), c.output()).await.context("kopia timed out")??;
        if !out.status.success() {
            bail!(
                "kopia {} failed ({}):\n{}",
                args.iter().take(3).cloned().collect::<Vec<_>>().join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Creates the kopia repository at `prefix` in the Garage bucket.
    pub async fn create(g: &Garage, work: &Path, prefix: &str) -> Result<KopiaRepo> {
        std::fs::create_dir_all(work)?;
        let r = KopiaRepo {
            prefix: prefix.to_string(),
            work: work.to_path_buf(),
            bin: kopiur_testenv::tools::kopia()?,
            bucket: g.bucket().to_string(),
            endpoint: g.s3_endpoint(),
            region: g.region().to_string(),
        };
        let args: Vec<String> = [
            "repository",
            "create",
            "s3",
            &format!("--bucket={}", r.bucket),
            &format!("--endpoint={}", r.endpoint),
            &format!("--prefix={prefix}"),
            &format!("--region={}", r.region),
            "--disable-tls",
            "--override-username=seed",
            "--override-hostname=deletion-e2e",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        r.run(&args, None).await.context("kopia repository create")?;
        Ok(r)
    }

    /// One `kopia snapshot create` over one tiny distinct directory per name: N manifests,
    /// one connect. Returns name -> manifest id.
    pub async fn seed(&self, names: &[String]) -> Result<BTreeMap<String, String>> {
        let src = self.work.join("src");
        for n in names {
            let d = src.join(n);
            std::fs::create_dir_all(&d)?;
            std::fs::write(d.join("data.txt"), format!("seeded snapshot {n} in {}\n", self.prefix))?;
        }
        let before = self.list().await?;
        let mut args: Vec<String> = vec!["snapshot".into(), "create".into()];
        args.extend(names.iter().cloned());
        args.push("--no-progress".into());
        self.run(&args, Some(&src)).await.context("kopia snapshot create")?;
        let listed = self.list_json().await?;
        let mut out = BTreeMap::new();
        for m in listed {
            let id = m["id"].as_str().unwrap_or_default().to_string();
            if before.contains(&id) {
                continue;
            }
            let path = m["source"]["path"].as_str().unwrap_or_default();
            let name = Path::new(path).file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
            out.insert(name, id);
        }
        for n in names {
            if !out.contains_key(n) {
                bail!("no manifest for seeded directory {n} ({} new manifests)", out.len());
            }
        }
        Ok(out)
    }

    async fn list_json(&self) -> Result<Vec<Value>> {
        let out = self.run(&["snapshot".into(), "list".into(), "--all".into(), "--json".into()], None).await?;
        serde_json::from_str(&out).with_context(|| format!("parsing snapshot list: {out:.200}"))
    }

    /// `kopia snapshot list --all`: every manifest id in the repository.
    pub async fn list(&self) -> Result<BTreeSet<String>> {
        Ok(self.list_json().await?.iter().filter_map(|m| m["id"].as_str().map(str::to_string)).collect())
    }
}

/// A batch delete Job as first seen (one per Job object: a retry under the same name is
/// another entry).
#[derive(Clone, Debug)]
pub struct SeenJob {
    pub namespace: String,
    pub name: String,
    pub members: Vec<String>,
    pub repo_uid: String,
    pub managed_by: Option<String>,
    pub first_seen: Instant,
    pub ttl: Option<i32>,
    pub completed: bool,
    /// The Job reached `Failed=True` at some point.
    pub failed: bool,
    pub gone: bool,
}

/// Whether `j` is a batch delete Job (label `op=snapshot-delete-batch` or name `snapdel-*`).
fn is_batch_job(j: &Job) -> bool {
    j.name_any().starts_with("snapdel-")
        || j.labels().get("kopiur.home-operations.com/op").map(String::as_str) == Some("snapshot-delete-batch")
}

/// One entry per Job object: a failed batch's retry reuses the name, never the uid.
fn job_key(j: &Job) -> String {
    j.uid().unwrap_or_else(|| format!("{}/{}", j.namespace().unwrap_or_default(), j.name_any()))
}

fn job_condition(j: &Job, type_: &str) -> bool {
    j.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

/// Records every batch delete Job in every namespace from a watch (kube::runtime::watcher):
/// every ADDED/MODIFIED/DELETED event is applied, so a Job that lives for less than any
/// polling period is still counted, and its `Complete`/`Failed` transitions are never
/// missed. A re-list after a broken watch marks Jobs absent from it as gone. Jobs are
/// reaped, so a final listing would not be enough to count them.
#[derive(Clone, Default)]
pub struct JobRecorder(pub Arc<Mutex<BTreeMap<String, SeenJob>>>);

impl JobRecorder {
    pub fn spawn(client: Client) -> (JobRecorder, tokio::task::JoinHandle<()>) {
        use kube::runtime::watcher;
        let rec = JobRecorder::default();
        let r2 = rec.clone();
        let h = tokio::spawn(async move {
            let api: Api<Job> = Api::all(client);
            let mut relisted: Option<BTreeSet<String>> = None;
            let mut stream = watcher(api, watcher::Config::default()).boxed();
            while let Some(ev) = stream.next().await {
                let ev = match ev {
                    Ok(ev) => ev,
                    // The watcher re-lists by itself after an error.
                    Err(_) => continue,
                };
                let mut m = r2.0.lock().unwrap();
                match ev {
                    watcher::Event::Init => relisted = Some(BTreeSet::new()),
                    watcher::Event::InitApply(j) | watcher::Event::Apply(j) if is_batch_job(&j) => {
                        let key = job_key(&j);
                        if let Some(r) = relisted.as_mut() {
                            r.insert(key.clone());
                        }
                        let e = m.entry(key).or_insert_with(|| SeenJob {
                            namespace: j.namespace().unwrap_or_default(),
                            name: j.name_any(),
                            members: j
                                .annotations()
                                .get(DELETE_MEMBERS)
                                .map(|v| v.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect())
                                .unwrap_or_default(),
                            repo_uid: j.labels().get(DELETE_REPO).cloned().unwrap_or_default(),
                            managed_by: j.labels().get("app.kubernetes.io/managed-by").cloned(),
                            first_seen: Instant::now(),
                            ttl: j.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished),
                            completed: false,
                            failed: false,
                            gone: false,
                        });
                        e.completed |= job_condition(&j, "Complete");
                        e.failed |= job_condition(&j, "Failed");
                    }
                    watcher::Event::InitApply(_) | watcher::Event::Apply(_) => {}
                    watcher::Event::Delete(j) => {
                        if let Some(e) = m.get_mut(&job_key(&j)) {
                            e.gone = true;
                        }
                    }
                    watcher::Event::InitDone => {
                        if let Some(seen) = relisted.take() {
                            for (k, v) in m.iter_mut() {
                                if !seen.contains(k) {
                                    v.gone = true;
                                }
                            }
                        }
                    }
                }
            }
        });
        (rec, h)
    }

    /// Every Job seen, in the order first seen.
    pub fn all(&self) -> Vec<SeenJob> {
        let mut v: Vec<SeenJob> = self.0.lock().unwrap().values().cloned().collect();
        v.sort_by_key(|j| j.first_seen);
        v
    }

    /// Jobs any of whose members is in `uids`.
    pub fn touching(&self, uids: &BTreeSet<String>) -> Vec<SeenJob> {
        self.all().into_iter().filter(|j| j.members.iter().any(|m| uids.contains(m))).collect()
    }

    pub fn in_namespace(&self, ns: &str) -> Vec<SeenJob> {
        self.all().into_iter().filter(|j| j.namespace == ns).collect()
    }
}

/// One Snapshot to write.
#[derive(Clone, Debug)]
pub struct SeedSnap {
    pub name: String,
    pub kopia_id: String,
    pub labels: BTreeMap<String, String>,
    /// A controller ownerReference (a SnapshotSchedule).
    pub owner: Option<Value>,
    pub origin: &'static str,
}

/// The pin every seeded Snapshot carries.
#[derive(Clone, Debug)]
pub struct RepoPin {
    /// `Repository` or `ClusterRepository` (whose namespace is empty).
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl RepoPin {
    pub fn of(r: &Repository) -> RepoPin {
        RepoPin {
            kind: "Repository",
            namespace: r.namespace().unwrap_or_default(),
            name: r.name_any(),
            uid: r.uid().unwrap_or_default(),
        }
    }

    pub fn of_cluster(c: &kopiur_api::ClusterRepository) -> RepoPin {
        RepoPin {
            kind: "ClusterRepository",
            namespace: String::new(),
            name: c.name_any(),
            uid: c.uid().unwrap_or_default(),
        }
    }
}

/// Creates each Snapshot with the finalizer, then writes a Succeeded status with the kopia
/// id and the pinned repository through the status subresource. `concurrency` requests in
/// flight. Returns name -> uid.
pub async fn seed_snapshots(
    client: &Client,
    ns: &str,
    pin: &RepoPin,
    items: Vec<SeedSnap>,
    concurrency: usize,
) -> Result<BTreeMap<String, String>> {
    let api: Api<Snapshot> = Api::namespaced(client.clone(), ns);
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let results: Vec<(String, String)> = futures::stream::iter(items.into_iter().map(|s| {
        let api = api.clone();
        let pin = pin.clone();
        let now = now.clone();
        let ns = ns.to_string();
        async move {
            let mut meta = json!({
                "name": s.name, "namespace": ns,
                "finalizers": [FINALIZER],
                "labels": s.labels,
            });
            if let Some(o) = &s.owner {
                meta["ownerReferences"] = json!([o]);
            }
            let mut spec = json!({"policyRef": {"name": ABSENT_POLICY}, "deletionPolicy": "Delete"});
            if pin.kind == "ClusterRepository" {
                spec["repository"] = json!({"kind": "ClusterRepository", "name": pin.name});
            } else if pin.namespace != ns {
                spec["repository"] = json!({"name": pin.name, "namespace": pin.namespace});
            } else {
                spec["repository"] = json!({"name": pin.name});
            }
            let obj: Snapshot = serde_json::from_value(json!({
                "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
                "metadata": meta, "spec": spec,
            }))?;
            let created = match api.create(&PostParams::default(), &obj).await {
                Ok(c) => c,
                Err(kube::Error::Api(e)) if e.code == 409 => api.get(&s.name).await?,
                Err(e) => return Err(anyhow::Error::from(e).context(format!("creating Snapshot {}", s.name))),
            };
            let status = json!({"status": {
                "phase": "Succeeded",
                "origin": s.origin,
                "observedGeneration": created.metadata.generation,
                "snapshot": {"kopiaSnapshotID": s.kopia_id},
                "resolved": {
                    "repository": if pin.kind == "ClusterRepository" {
                        json!({"kind": "ClusterRepository", "name": pin.name, "uid": pin.uid})
                    } else {
                        json!({"kind": "Repository", "namespace": pin.namespace, "name": pin.name, "uid": pin.uid})
                    },
                    "deletionPolicy": "Delete",
                },
                "completionRecordedAt": now,
            }});
            api.patch_status(&s.name, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .with_context(|| format!("writing the status of Snapshot {}", s.name))?;
            Ok::<_, anyhow::Error>((s.name.clone(), created.uid().unwrap_or_default()))
        }
    }))
    .buffer_unordered(concurrency.max(1))
    .try_collect()
    .await?;
    Ok(results.into_iter().collect())
}

/// The whole environment: private control plane, Garage, the auditing wrapper and (once
/// started) the operator. Field order is drop order.
pub struct Harness {
    pub op: Option<Operator>,
    pub op_ns: String,
    pub client: Client,
    pub audit: Audit,
    pub garage: Garage,
    pub env: TestEnv,
    pub dir: tempfile::TempDir,
}

impl Harness {
    pub async fn start() -> Result<Harness> {
        let dir = tempfile::tempdir()?;
        let env = TestEnv::start(kopiur_testenv::Options::default()).await?;
        let client = env.client().await?;
        let garage = Garage::start(&dir.path().join("garage")).await?;
        let audit = Audit::new(&env.state_dir().join("audit"))?;
        let op_ns = env.namespace("kopiur-system").await?;
        Ok(Harness { op: None, op_ns, client, audit, garage, env, dir })
    }

    pub async fn start_operator(&mut self) -> Result<()> {
        let wrapper = self.audit.wrapper.display().to_string();
        let op = Operator::start(&self.env, &self.op_ns, &[("KOPIUR_MOVER_KOPIA_BINARY", wrapper.as_str())]).await?;
        self.op = Some(op);
        Ok(())
    }

    /// SIGKILL to the controller's process group (no graceful shutdown, the Lease is not
    /// released), then reaps it.
    pub fn kill_operator(&mut self) {
        if let Some(mut op) = self.op.take() {
            op.proc_.signal(9);
            op.stop();
        }
    }

    pub fn stop_operator(&mut self) {
        if let Some(mut op) = self.op.take() {
            op.stop();
        }
    }

    pub fn log(&self) -> PathBuf {
        kopiur_testenv::operator::log_file(&self.env, &self.op_ns)
    }

    pub async fn metrics(&self) -> Result<String> {
        self.op.as_ref().context("operator not running")?.metrics().await
    }

    /// The `kopia` Secret (password and S3 keys) in `ns`.
    pub async fn secret(&self, ns: &str) -> Result<()> {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "kopia", "namespace": ns},
            "stringData": {"KOPIA_PASSWORD": PASSWORD, "AWS_ACCESS_KEY_ID": self.garage.access_key(), "AWS_SECRET_ACCESS_KEY": self.garage.secret_key()}
        }))?;
        match Api::<Secret>::namespaced(self.client.clone(), ns).create(&PostParams::default(), &secret).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// A kopia repository at `prefix` created directly (not by the operator).
    pub async fn kopia_repo(&self, prefix: &str) -> Result<KopiaRepo> {
        let work = self.dir.path().join("kopia").join(prefix.trim_end_matches('/'));
        KopiaRepo::create(&self.garage, &work, prefix).await
    }

    /// A Repository CR over the existing kopia repository at `prefix`; `extra` is merged into
    /// its spec (e.g. `{"onNamespaceDelete": "Delete"}`).
    pub async fn repository(&self, ns: &str, name: &str, prefix: &str, extra: Value) -> Result<Repository> {
        self.secret(ns).await?;
        let mut spec = json!({
            "backend": {"s3": {"bucket": self.garage.bucket(), "endpoint": format!("http://{}", self.garage.s3_addr()), "region": self.garage.region(), "prefix": prefix}},
            "encryption": {"passwordSecretRef": {"name": "kopia"}}
        });
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                s.insert(k.clone(), v.clone());
            }
        }
        let obj: Repository = serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
            "metadata": {"name": name, "namespace": ns}, "spec": spec,
        }))?;
        Ok(Api::<Repository>::namespaced(self.client.clone(), ns).create(&PostParams::default(), &obj).await?)
    }

    /// A ClusterRepository over the existing kopia repository at `prefix`, admitting
    /// `allowed` (`{"list": [...]}` or `{"selector": {...}}`); its `kopia` Secret lives in the
    /// operator namespace (an absent Secret namespace means the operator's).
    pub async fn cluster_repository(
        &self,
        name: &str,
        prefix: &str,
        allowed: Value,
    ) -> Result<kopiur_api::ClusterRepository> {
        self.secret(&self.op_ns).await?;
        let obj: kopiur_api::ClusterRepository = serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "ClusterRepository",
            "metadata": {"name": name},
            "spec": {
                "backend": {"s3": {"bucket": self.garage.bucket(), "endpoint": format!("http://{}", self.garage.s3_addr()), "region": self.garage.region(), "prefix": prefix}},
                "encryption": {"passwordSecretRef": {"name": "kopia"}},
                "allowedNamespaces": allowed
            },
        }))?;
        Ok(Api::<kopiur_api::ClusterRepository>::all(self.client.clone()).create(&PostParams::default(), &obj).await?)
    }

    pub async fn wait_cluster_repository_ready(&self, name: &str, timeout: Duration) -> Result<()> {
        let repos: Api<kopiur_api::ClusterRepository> = Api::all(self.client.clone());
        wait_for(&format!("ClusterRepository {name} Ready"), timeout, &self.log(), || async {
            let r = repos.get(name).await?;
            let phase = r.status.as_ref().and_then(|s| s.common.phase.as_ref()).map(|p| p.as_str().to_string());
            Ok((phase.as_deref() == Some("Ready")).then_some(()))
        })
        .await
    }

    pub async fn wait_repository_ready(&self, ns: &str, name: &str, timeout: Duration) -> Result<()> {
        let repos: Api<Repository> = Api::namespaced(self.client.clone(), ns);
        wait_for(&format!("Repository {ns}/{name} Ready"), timeout, &self.log(), || async {
            let r = repos.get(name).await?;
            Ok((r.status.as_ref().and_then(|s| s.phase.as_ref()).map(|p| p.as_str()) == Some("Ready")).then_some(()))
        })
        .await
    }

    /// Annotates the ClusterRepository with `allow-mass-deletion=<value>` (overwriting).
    pub async fn ack_cluster(&self, name: &str, value: &str) -> Result<()> {
        let body = json!({"metadata": {"annotations": {ALLOW_MASS_DELETION: value}}});
        Api::<kopiur_api::ClusterRepository>::all(self.client.clone())
            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await?;
        Ok(())
    }

    /// Annotates the repository with `allow-mass-deletion=<value>` (overwriting).
    pub async fn ack(&self, ns: &str, name: &str, value: &str) -> Result<()> {
        let body = json!({"metadata": {"annotations": {ALLOW_MASS_DELETION: value}}});
        Api::<Repository>::namespaced(self.client.clone(), ns)
            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await?;
        Ok(())
    }
}

/// Names `prefix-0000` … for `n` seeded Snapshots.
pub fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:04}")).collect()
}

/// Seed items for `names` with their kopia ids and the set label.
pub fn items(names: &[String], ids: &BTreeMap<String, String>, set: &str) -> Vec<SeedSnap> {
    names
        .iter()
        .map(|n| SeedSnap {
            name: n.clone(),
            kopia_id: ids[n].clone(),
            labels: BTreeMap::from([(SET.to_string(), set.to_string())]),
            owner: None,
            origin: "manual",
        })
        .collect()
}

/// The value of `family{…namespace="ns",name="name"…}` in a Prometheus text exposition.
pub fn metric(text: &str, family: &str, ns: &str, name: &str) -> Option<f64> {
    let want_ns = format!("namespace=\"{ns}\"");
    let want_name = format!("name=\"{name}\"");
    text.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .find(|l| {
            let labels = l.split('}').next().unwrap_or("");
            labels.split(',').any(|kv| kv.trim_start_matches(&format!("{family}{{")) == want_ns)
                && labels.split(',').any(|kv| kv.trim_start_matches(&format!("{family}{{")) == want_name)
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// The value of the sample of `family` whose labels include every `(key, value)` of `want`
/// (other labels ignored), in a Prometheus text exposition; None when no sample matches.
pub fn sample(text: &str, family: &str, want: &[(&str, &str)]) -> Option<f64> {
    let prefix = format!("{family}{{");
    text.lines().filter_map(|l| l.strip_prefix(&prefix)).find_map(|rest| {
        let (labels, value) = rest.split_once('}')?;
        let pairs: Vec<(&str, &str)> = labels
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.trim(), v.trim_matches('"')))
            .collect();
        want.iter().all(|w| pairs.contains(w)).then(|| value.trim().parse().ok()).flatten()
    })
}

/// Snapshots in `ns` with label `SET=set`.
pub async fn list_set(client: &Client, ns: &str, set: &str) -> Result<Vec<Snapshot>> {
    Ok(Api::<Snapshot>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{SET}={set}")))
        .await?
        .items)
}

pub fn condition<'a>(s: &'a Snapshot, type_: &str) -> Option<&'a kopiur_api::shared::status::Condition> {
    s.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)
}

pub fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
