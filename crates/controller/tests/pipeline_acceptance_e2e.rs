//! The backup pipeline's remaining acceptance items, end to end on a private local control plane,
//! Garage, the fault proxy and the real mover; every figure is printed:
//! - with the chart's `pruned-by` admission policy installed (only the controller's
//!   ServiceAccount may write the annotation), kopiur's own stamps go through:
//! - retention keepLatest 3 after 6 runs leaves exactly 3 kopia snapshots (`kopia snapshot
//!   list`), each pruned Snapshot stamped `pruned-by: retention`; a pinned Snapshot survives;
//! - T31: on a repository with mass-deletion threshold 1, failedJobsHistoryLimit 2 with 6 Failed
//!   children keeps 2; exactly 4 are stamped `pruned-by: failed-history` and gone within 30 s,
//!   none held;
//! - T19: a Snapshot failing against a cut backend stamps `reverify-requested-at` on its
//!   repository, which launches one reverify probe within 10 s and records `lastReverifyAt`
//!   equal to the stamp; a second failure within 60 s stamps nothing and launches no probe;
//! - a preflight on `repository.backendReachable` (repository in Alert mode, backend cut)
//!   holds a Snapshot Pending without a Job, then fails it at the timeout;
//! - deleting Snapshots: Delete removes the kopia snapshot; Retain keeps it and the catalog
//!   rediscovers it as `origin: discovered`; `skip-snapshot-cleanup` releases at once while
//!   the repository is Degraded, without a delete Job; a Delete parked by the outage drains
//!   after recovery;
//! - a `pvcSelector` policy on a schedule with runOnCreate fans out into one Succeeded child per
//!   matched PVC, each backed up under its own kopia source;
//! - a `policySelector` schedule fans out one child per matched policy (named after it), each
//!   Succeeded under its policy's identity; an unlabelled policy is not backed up;
//! - 20 idle policies with schedules make zero writes over 2 minutes between ticks;
//! - the identity fork guard: changing a policy's hostname after a Succeeded run is refused
//!   (Stalled `IdentityWouldFork` with the exact annotate command; runs continue under the
//!   pinned identity) until `allow-identity-change` accepts it;
//! - startingDeadlineSeconds: an expired pinned slot is skipped and re-pinned forward, and the
//!   schedule reconciles stay in single digits over the next 60 s.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use chrono::{Timelike, Utc};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim};
use kopiur_api::names::{annotation, label};
use kopiur_api::{Repository, Snapshot, SnapshotPolicy, SnapshotSchedule};
use kopiur_kopia::Runner;
use kopiur_kopia::cmd::{self, CacheSizes, Identity};
use kopiur_kopia::model::{self, SnapshotManifest};
use kopiur_testenv::garage::Garage;
use kopiur_testenv::operator::Operator;
use kopiur_testenv::proxy::{FaultProxy, Mode};
use kopiur_testenv::wait::wait_for;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use support::env::Stack;
use support::metrics;
use support::repos::{create_secret, kopia_backend, kopia_runner};
use support::status::StatusExt;

mod support;
use kopiur_api::names::condition as names_cond;
use recorder::Recorder;
use support::admission;
use support::recorder;

const PASSWORD: &str = "acceptance e2e correct horse";

struct World {
    client: Client,
    ns: String,
    log: std::path::PathBuf,
    started: Instant,
}

impl World {
    fn say(&self, msg: impl AsRef<str>) {
        println!("[{:>6.1}s] {}", self.started.elapsed().as_secs_f64(), msg.as_ref());
    }

    async fn apply(&self, v: Value) -> Result<()> {
        kopiur_testenv::apply::apply_value(&self.client, &self.ns, &v).await
    }

    fn snaps(&self) -> Api<Snapshot> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    async fn snapshot(&self, name: &str, policy: &str, extra: Value) -> Result<()> {
        let mut spec = json!({"policyRef": {"name": policy}});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        self.apply(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": name, "namespace": self.ns}, "spec": spec
        }))
        .await
    }

    /// Waits for Succeeded; a Failed Snapshot fails the test with its failure.
    async fn succeeded(&self, name: &str) -> Result<Snapshot> {
        let snaps = self.snaps();
        wait_for(&format!("{name} Succeeded"), Duration::from_secs(300), &self.log, || async {
            let s = snaps.get(name).await?;
            ensure!(s.phase() != "Failed", "{name} failed: {:?}", s.status.as_ref().and_then(|x| x.failure.clone()));
            Ok((s.phase() == "Succeeded").then_some(s))
        })
        .await
    }

    /// Waits for exactly `n` children of a schedule, all Succeeded; a Failed one fails the test.
    async fn children_succeeded(&self, schedule: &str, n: usize) -> Result<Vec<Snapshot>> {
        let snaps = self.snaps();
        let lp = ListParams::default().labels(&format!("{}={schedule}", label::SCHEDULE));
        wait_for(&format!("{n} children of {schedule} Succeeded"), Duration::from_secs(300), &self.log, || async {
            let l = snaps.list(&lp).await?.items;
            for s in &l {
                ensure!(
                    s.phase() != "Failed",
                    "{} failed: {:?}",
                    s.name_any(),
                    s.status.as_ref().and_then(|x| x.failure.clone())
                );
            }
            Ok((l.len() == n && l.iter().all(|s| s.phase() == "Succeeded")).then_some(l))
        })
        .await
    }

    async fn repo(&self, name: &str) -> Result<Repository> {
        Ok(Api::<Repository>::namespaced(self.client.clone(), &self.ns).get(name).await?)
    }

    async fn nudge(&self, repo: &str) -> Result<()> {
        let patch = json!({"metadata": {"annotations": {annotation::REVERIFY_REQUESTED_AT: Utc::now().to_rfc3339()}}});
        Api::<Repository>::namespaced(self.client.clone(), &self.ns)
            .patch(repo, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    async fn events(&self, object: &str, reason: &str) -> Result<usize> {
        let l = Api::<Event>::namespaced(self.client.clone(), &self.ns).list(&ListParams::default()).await?;
        Ok(l.items
            .iter()
            .filter(|e| e.involved_object.name.as_deref() == Some(object) && e.reason.as_deref() == Some(reason))
            .count())
    }
}

fn kopia_id(s: &Snapshot) -> Option<String> {
    s.status.as_ref()?.snapshot.as_ref()?.kopia_snapshot_id.clone()
}

async fn batch_jobs_created(op: &Operator) -> Result<f64> {
    Ok(metrics::sum(&op.metrics().await?, "kopiur_mover_jobs_created_total", &[("op", "snapshot-delete-batch")]))
}

/// The kopia CLI connected to one repository prefix under its own config dir.
struct Kopia {
    runner: Runner,
}

impl Kopia {
    async fn connect(dir: &Path, g: &Garage, prefix: &str) -> Result<Kopia> {
        let runner = kopia_runner(&dir.join(format!("kopia-{}", prefix.trim_end_matches('/'))), g, PASSWORD)?;
        let backend = kopia_backend(g, prefix);
        runner.run_ok(&cmd::connect(&backend, &Identity::new("audit", "e2e"), false, &CacheSizes::default())?).await?;
        Ok(Kopia { runner })
    }

    /// `kopia snapshot list` ids of one source (`user@host:/path`).
    async fn ids(&self, source: &str) -> Result<BTreeSet<String>> {
        let out = self.runner.run_ok(&cmd::snapshot_list(Some(source))).await?;
        let listed: Vec<SnapshotManifest> = model::parse("snapshot list", &out.stdout)?;
        Ok(listed.into_iter().map(|m| m.id).collect())
    }
}

/// Records the `pruned-by` stamp of every Snapshot seen deleting or stamped.
type PruneStamps = Arc<Mutex<BTreeMap<String, Option<String>>>>;

/// A watch, not a poll: a pruned Snapshot without kopia data (a Failed run) is stamped, deleted
/// and gone within milliseconds, between two polls; the watch delivers every version, the
/// DELETED one included.
fn observe_prunes(snaps: Api<Snapshot>) -> (PruneStamps, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(BTreeMap::new()));
    let s2 = seen.clone();
    let h = tokio::spawn(async move {
        let mut events = watcher(snaps, watcher::Config::default()).default_backoff().touched_objects().boxed();
        while let Some(ev) = events.next().await {
            let Ok(s) = ev else { continue };
            let stamp = s.annotations().get(annotation::PRUNED_BY).cloned();
            if s.metadata.deletion_timestamp.is_some() || stamp.is_some() {
                let mut m = s2.lock().unwrap();
                let e = m.entry(s.name_any()).or_insert(None);
                if stamp.is_some() {
                    *e = stamp;
                }
            }
        }
    });
    (seen, h)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_acceptance_end_to_end() -> Result<()> {
    let started = Instant::now();
    let Stack { client, garage: g, op_ns, env, dir } = Stack::start().await?;
    let env = &env;
    let _guard = env.log_guard();
    let alert_proxy = FaultProxy::start(g.s3_addr()).await?;
    let down_proxy = FaultProxy::start(g.s3_addr()).await?;
    let op = Operator::start(
        env,
        &op_ns,
        &[
            ("KOPIUR_STRICT_RETRY_BASE_SECONDS", "10"),
            ("KOPIUR_STRICT_RETRY_CAP_SECONDS", "20"),
            ("KOPIUR_REVERIFY_SPACING_SECONDS", "5"),
        ],
    )
    .await?;
    let ns = env.namespace("acc").await?;
    // The chart's admission policy is in force: only the controller may write `pruned-by`, and
    // every stamp this test sees (retention, failed-history) is the controller's own.
    admission::install_pruned_by_policy(&client, &op_ns, &ns).await?;
    // And the controller's own token writes only kopiur's labelled ConfigMaps (results, the pin
    // ledger), ServiceAccounts, Roles and RoleBindings (audit 1.4): every run below is under it.
    let kc = env.state_dir().join("controller-sa.kubeconfig");
    env.cp.service_account_kubeconfig(&op_ns, admission::CONTROLLER_SA, &kc).await?;
    let controller = kopiur_testenv::kubeconfig::client(&kc).await?;
    admission::install_controller_writes_policy(&client, &controller, &op_ns, &ns).await?;
    let w = World { client: client.clone(), ns: ns.clone(), log: op.log_path().to_path_buf(), started };

    create_secret(&client, &ns, &g, PASSWORD).await?;
    let repo = |name: &str, endpoint: String, extra: Value| {
        let mut spec = json!({
            "backend": {"s3": {"bucket": g.bucket(), "endpoint": format!("http://{endpoint}"), "region": g.region(), "prefix": format!("{name}/")}},
            "encryption": {"passwordSecretRef": {"name": "kopia"}}
        });
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        json!({"apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
               "metadata": {"name": name, "namespace": ns}, "spec": spec})
    };
    // r: direct, with a 30 s catalog refresh (Retain rediscovery); alert: Alert mode behind a
    // proxy; down: the default Degrade behind another proxy.
    w.apply(repo(
        "r",
        g.s3_addr().to_string(),
        json!({"catalog": {"periodicRefresh": true, "refreshInterval": "30s"}}),
    ))
    .await?;
    w.apply(repo(
        "alert",
        alert_proxy.endpoint(),
        json!({"health": {"probe": {"onFailure": "Alert", "failureThreshold": 1}}}),
    ))
    .await?;
    w.apply(repo("down", down_proxy.endpoint(), json!({"health": {"probe": {"failureThreshold": 1}}}))).await?;
    // hist: the mass-deletion breaker at threshold 1 (T31: failed history is never held).
    w.apply(repo("hist", g.s3_addr().to_string(), json!({"deletionProtection": {"threshold": 1}}))).await?;
    for pvc in ["a", "b", "c", "d", "e"] {
        let labels = if pvc == "c" || pvc == "d" { json!({"tier": "gold"}) } else { json!({}) };
        w.apply(json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": pvc, "namespace": ns, "labels": labels},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
        }))
        .await?;
    }
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let mut host = BTreeMap::new();
    for pvc in ["a", "b", "c", "d", "e"] {
        let p = wait_for(&format!("PVC {pvc} Bound"), Duration::from_secs(60), &w.log, || async {
            let p = pvcs.get(pvc).await?;
            Ok((p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")).then_some(p))
        })
        .await?;
        let dir = kopiur_testenv::node::provisioner::pv_dir(&env.node_state_dir(), &p.uid().context("pvc uid")?);
        std::fs::write(dir.join("data.txt"), format!("pvc {pvc}\n"))?;
        host.insert(pvc, dir);
    }
    for r in ["r", "alert", "down", "hist"] {
        wait_for(&format!("{r} Ready"), Duration::from_secs(300), &w.log, || async {
            Ok((w.repo(r).await?.phase() == "Ready").then_some(()))
        })
        .await?;
    }
    w.say("repositories r, alert, down and hist Ready");
    let policy = |name: &str, repo: &str, pvc: &str, extra: Value| {
        let mut spec =
            json!({"repository": {"name": repo}, "copyMethod": "Direct", "sources": [{"pvc": {"name": pvc}}]});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        json!({"apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotPolicy",
               "metadata": {"name": name, "namespace": ns}, "spec": spec})
    };
    w.apply(policy("ret", "r", "a", json!({"retention": {"keepLatest": 3}}))).await?;
    w.apply(policy("pin", "r", "b", json!({"retention": {"keepLatest": 1}}))).await?;
    w.apply(policy("plain", "r", "a", json!({}))).await?;
    w.apply(policy(
        "pf",
        "alert",
        "a",
        json!({"preflight": {"checks": [{"name": "reachable", "expr": "repository.backendReachable",
                                          "message": "the backend is unreachable"}], "timeout": "40s"}}),
    ))
    .await?;
    w.apply(policy("dp", "down", "a", json!({}))).await?;
    w.apply(policy("nudge", "alert", "a", json!({}))).await?;
    w.apply(json!({"apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotPolicy",
                   "metadata": {"name": "sel", "namespace": ns},
                   "spec": {"repository": {"name": "r"}, "copyMethod": "Direct",
                            "sources": [{"pvcSelector": {"labelSelector": {"matchLabels": {"tier": "gold"}}}}]}}))
        .await?;

    let (pruned, observer) = observe_prunes(w.snaps());
    let k_r = Kopia::connect(dir.path(), &g, "r/").await?;

    // Everything below runs side by side; each scenario waits on its own objects.
    let (sel, ret, hist, pre, del, idle, fk, psel) = tokio::join!(
        selector(&w, &k_r),
        retention(&w, &k_r, &host, &pruned),
        failed_history(&w),
        preflight_backend(&w, &alert_proxy),
        deletions(&w, &op, &k_r, dir.path(), &g, &down_proxy),
        idle_policies(&w),
        identity_fork(&w, &k_r),
        policy_selector(&w, &k_r),
    );
    observer.abort();
    let mut failures = Vec::new();
    for (what, r) in [
        ("pvcSelector", sel),
        ("retention", ret),
        ("failedJobsHistoryLimit", hist),
        ("preflight", pre),
        ("deletions", del),
        ("idle", idle),
        ("identity fork", fk),
        ("policySelector", psel),
    ] {
        if let Err(e) = r {
            println!("SCENARIO FAILED: {what}: {e:#}");
            failures.push(what);
        }
    }
    // Last, alone among the schedules: an expired slot (the schedules above are gone).
    if let Err(e) = starting_deadline(&w, &op).await {
        println!("SCENARIO FAILED: startingDeadlineSeconds: {e:#}");
        failures.push("startingDeadlineSeconds");
    }
    // T21, after it (its every-minute children would add reconciles to that count).
    if let Err(e) = one_catch_up(&w).await {
        println!("SCENARIO FAILED: one catch-up without a deadline: {e:#}");
        failures.push("one catch-up (T21)");
    }
    w.say(format!("acceptance e2e total {:.1}s", started.elapsed().as_secs_f64()));
    drop(op);
    ensure!(failures.is_empty(), "{} scenario(s) failed: {failures:?}", failures.len());
    Ok(())
}

/// A selector policy fans out: one child per matched PVC from the same slot, each Succeeded
/// under its own kopia source; the unlabelled PVC is not backed up.
async fn selector(w: &World, k: &Kopia) -> Result<()> {
    w.apply(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotSchedule",
        "metadata": {"name": "sel", "namespace": w.ns},
        "spec": {"policyRef": {"name": "sel"}, "schedule": {"cron": "0 0 1 1 *", "runOnCreate": true}}
    }))
    .await?;
    let kids = w.children_succeeded("sel", 2).await?;
    let targets: BTreeSet<String> =
        kids.iter().filter_map(|s| s.spec.source.as_ref().map(|x| x.target.pvc.name.clone())).collect();
    let want: BTreeSet<String> = ["c", "d"].map(String::from).into();
    ensure!(targets == want, "one child per matched PVC: {targets:?}");
    let mut per_source = Vec::new();
    for pvc in ["c", "d", "e"] {
        per_source.push((pvc, k.ids(&format!("sel@{}:/pvc/{pvc}", w.ns)).await?.len()));
    }
    w.say(format!(
        "[selector] children {:?} targeting {targets:?}; kopia snapshots per source {per_source:?}",
        kids.iter().map(|s| s.name_any()).collect::<Vec<_>>()
    ));
    ensure!(per_source == [("c", 1), ("d", 1), ("e", 0)], "each matched PVC backed up once, e not at all");
    let policy: SnapshotPolicy = Api::namespaced(w.client.clone(), &w.ns).get("sel").await?;
    let resolved = serde_json::to_value(policy.status.as_ref().and_then(|s| s.resolved.clone()))?;
    w.say(format!("[selector] policy status.resolved.sources {}", resolved["sources"]));
    ensure!(resolved["sources"].as_array().map(Vec::len) == Some(2), "the expansion is published in status");
    Api::<SnapshotSchedule>::namespaced(w.client.clone(), &w.ns).delete("sel", &DeleteParams::default()).await?;
    Ok(())
}

/// keepLatest 3 after 6 runs -> exactly 3 kopia snapshots; keepLatest 1 with a pinned first run
/// keeps the pinned one and the newest.
async fn retention(
    w: &World,
    k: &Kopia,
    host: &BTreeMap<&str, std::path::PathBuf>,
    pruned: &Mutex<BTreeMap<String, Option<String>>>,
) -> Result<()> {
    let snaps = w.snaps();
    let mut ids = BTreeMap::new();
    for i in 1..=6 {
        std::fs::write(host["a"].join("run.txt"), format!("run {i}\n"))?;
        let name = format!("ret-{i}");
        w.snapshot(&name, "ret", json!({})).await?;
        let s = w.succeeded(&name).await?;
        ids.insert(name, kopia_id(&s).context("kopia id")?);
    }
    for (i, pin) in [(1, true), (2, false), (3, false)] {
        std::fs::write(host["b"].join("run.txt"), format!("run {i}\n"))?;
        let name = format!("pin-{i}");
        w.snapshot(&name, "pin", json!({"pin": pin})).await?;
        let s = w.succeeded(&name).await?;
        ids.insert(name, kopia_id(&s).context("kopia id")?);
    }
    // Manual Snapshots carry no policy label: select by spec.policyRef.
    let live = |l: &[Snapshot], p: &str| -> BTreeSet<String> {
        l.iter()
            .filter(|s| s.metadata.deletion_timestamp.is_none())
            .filter(|s| s.spec.policy_ref.as_ref().is_some_and(|r| r.name == p))
            .map(|s| s.name_any())
            .collect()
    };
    let want_ret: BTreeSet<String> = ["ret-4", "ret-5", "ret-6"].map(String::from).into();
    let want_pin: BTreeSet<String> = ["pin-1", "pin-3"].map(String::from).into();
    let ret_source = format!("ret@{}:/pvc/a", w.ns);
    let pin_source = format!("pin@{}:/pvc/b", w.ns);
    wait_for("retention converged (CRs and kopia)", Duration::from_secs(240), &w.log, || async {
        let all = snaps.list(&ListParams::default()).await?.items;
        let (r, p) = (live(&all, "ret"), live(&all, "pin"));
        if r != want_ret || p != want_pin {
            return Ok(None);
        }
        let kr = k.ids(&ret_source).await?;
        let kp = k.ids(&pin_source).await?;
        Ok((kr.len() == 3 && kp.len() == 2).then_some(()))
    })
    .await?;
    let kr = k.ids(&ret_source).await?;
    let kp = k.ids(&pin_source).await?;
    // A pin rewrites the kopia manifest under a new id and the Snapshot's status follows it, so
    // the kept ids are read from the kept Snapshots now (the ids at Succeeded cover the rest).
    let mut current = ids.clone();
    for n in want_ret.iter().chain(want_pin.iter()) {
        let id = kopia_id(&snaps.get(n).await?).with_context(|| format!("{n}'s kopia id"))?;
        if id != ids[n] {
            w.say(format!("[retention] {n}'s kopia id moved {} -> {id} (pinned)", ids[n]));
        }
        current.insert(n.clone(), id);
    }
    let want_ids = |names: &BTreeSet<String>| names.iter().map(|n| current[n].clone()).collect::<BTreeSet<_>>();
    w.say(format!(
        "[retention] keepLatest 3 after 6 runs: kopia snapshot list for {ret_source} = {} snapshots",
        kr.len()
    ));
    ensure!(kr == want_ids(&want_ret), "kopia keeps exactly ret-4..6: {kr:?}");
    w.say(format!("[retention] keepLatest 1 with pinned pin-1: kopia keeps {} (pin-1 and pin-3)", kp.len()));
    ensure!(kp == want_ids(&want_pin), "kopia keeps pin-1 (pinned) and pin-3: {kp:?}");
    let seen = pruned.lock().unwrap().clone();
    let expect_pruned = ["ret-1", "ret-2", "ret-3", "pin-2"];
    for n in expect_pruned {
        ensure!(
            seen.get(n).map(|v| v.as_deref()) == Some(Some("retention")),
            "{n} was pruned with pruned-by: retention (saw {:?})",
            seen.get(n)
        );
    }
    w.say(format!("[retention] pruned {expect_pruned:?}, each stamped pruned-by: retention"));
    Ok(())
}

/// T31 — failed history is never held: on repository `hist` with `deletionProtection.threshold:
/// 1`, a schedule with `failedJobsHistoryLimit: 2` ends with 6 Failed children; exactly 4 are
/// stamped `pruned-by: failed-history` before their delete and are gone within 30 s of the sixth
/// failure, the 2 kept are never older than a pruned one, and nothing is held (no
/// `DeletionHeld=True` on any version, no `SnapshotDeletionHeld` Event, `MassDeletionHeld` never
/// True on the repository). The 6 children come from one slot: a `policySelector` schedule with
/// `runOnCreate` fans out to 6 policies whose preflight can never pass (timeout 1 s), so the six
/// failures take seconds rather than six cron minutes. Every version is recorded by watches.
async fn failed_history(w: &World) -> Result<()> {
    let snaps = w.snaps();
    let lp = watcher::Config::default().labels(&format!("{}=fails", label::SCHEDULE));
    let kids = Recorder::start(snaps.clone(), lp).await?;
    let repos: Api<Repository> = Api::namespaced(w.client.clone(), &w.ns);
    let repo = Recorder::start(repos, watcher::Config::default().fields("metadata.name=hist")).await?;
    for i in 0..6 {
        w.apply(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotPolicy",
            "metadata": {"name": format!("hist-{i}"), "namespace": w.ns, "labels": {"t31": "fails"}},
            "spec": {"repository": {"name": "hist"}, "copyMethod": "Direct", "sources": [{"pvc": {"name": "a"}}],
                     "preflight": {"checks": [{"name": "impossible", "expr": "repository.snapshotCount < 0",
                                               "message": "this check never passes"}], "timeout": "1s"}}
        }))
        .await?;
    }
    // The schedule fans out once, at creation: let the controller see all 6 policies first.
    let policies: Api<SnapshotPolicy> = Api::namespaced(w.client.clone(), &w.ns);
    wait_for("the 6 hist policies reconciled", Duration::from_secs(60), &w.log, || async {
        let settled = policies
            .list(&ListParams::default().labels("t31=fails"))
            .await?
            .items
            .iter()
            .filter(|p| p.status.as_ref().is_some_and(|s| s.observed_generation == p.metadata.generation))
            .count();
        Ok((settled == 6).then_some(()))
    })
    .await?;
    w.apply(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotSchedule",
        "metadata": {"name": "fails", "namespace": w.ns},
        "spec": {"policySelector": {"matchLabels": {"t31": "fails"}},
                 "schedule": {"cron": "0 0 1 1 *", "runOnCreate": true}, "failedJobsHistoryLimit": 2}
    }))
    .await?;
    // Each child's first version seen Failed.
    let failed_at = |seen: &[recorder::Seen<Snapshot>]| -> Result<BTreeMap<String, Instant>> {
        let mut m = BTreeMap::new();
        for v in seen.iter().filter(|v| v.obj.phase() == "Failed") {
            ensure!(
                v.obj.ready_reason().as_deref() == Some("PreflightTimeout"),
                "{} failed for another reason: {:?}",
                v.name(),
                v.obj.ready_reason()
            );
            m.entry(v.name()).or_insert(v.at);
        }
        Ok(m)
    };
    let sixth = kids
        .wait("6 Failed children of fails", Duration::from_secs(180), &w.log, |seen| {
            let f = failed_at(seen)?;
            Ok((f.len() >= 6).then(|| f.values().max().copied()).flatten())
        })
        .await?;
    let gone = kids
        .wait("4 of the 6 Failed children gone", Duration::from_secs(60), &w.log, |seen| {
            let gone: BTreeMap<String, Instant> = seen.iter().filter(|v| v.deleted).map(|v| (v.name(), v.at)).collect();
            Ok((gone.len() >= 4).then_some(gone))
        })
        .await?;
    // A fifth deletion would show within the same window: wait it out before counting.
    tokio::time::sleep(Duration::from_secs(30).saturating_sub(sixth.elapsed())).await;
    let seen = kids.all();
    let failed = failed_at(&seen)?;
    let stamped: BTreeSet<String> = seen
        .iter()
        .filter(|v| v.obj.annotations().get(annotation::PRUNED_BY).map(String::as_str) == Some("failed-history"))
        .map(|v| v.name())
        .collect();
    let deleted: BTreeSet<String> = seen.iter().filter(|v| v.deleted).map(|v| v.name()).collect();
    // The stamp on each child's first version carrying a deletionTimestamp: written before the delete.
    let mut first_deleting = BTreeMap::<String, Option<String>>::new();
    for v in seen.iter().filter(|v| v.obj.metadata.deletion_timestamp.is_some() || v.deleted) {
        first_deleting.entry(v.name()).or_insert_with(|| v.obj.annotations().get(annotation::PRUNED_BY).cloned());
    }
    let held: BTreeSet<String> = seen
        .iter()
        .filter(|v| {
            v.obj.status.as_ref().is_some_and(|st| {
                st.conditions.iter().any(|c| c.type_ == names_cond::DELETION_HELD && c.status == "True")
            })
        })
        .map(|v| v.name())
        .collect();
    let mut held_events = 0;
    for n in failed.keys() {
        held_events += w.events(n, "SnapshotDeletionHeld").await?;
    }
    let repo_held = repo.all().iter().any(|v| {
        v.obj.status.as_ref().is_some_and(|st| {
            st.conditions.iter().any(|c| c.type_ == names_cond::MASS_DELETION_HELD && c.status == "True")
        })
    });
    let kept: BTreeSet<String> = failed.keys().filter(|n| !deleted.contains(*n)).cloned().collect();
    let latest = kids.latest();
    let end = |n: &str| -> Option<chrono::DateTime<Utc>> {
        seen.iter().rev().filter(|v| v.name() == n).find_map(|v| v.obj.status.as_ref()?.timing.as_ref()?.end_time)
    };
    let slowest = gone.values().map(|t| t.saturating_duration_since(sixth)).max().unwrap_or_default();
    w.say(format!(
        "[history] T31 threshold 1, failedJobsHistoryLimit 2: {} Failed children {:?}; stamped failed-history \
         {stamped:?}; deleted {deleted:?} (last gone {:.1}s after the sixth failure); kept {kept:?}; DeletionHeld on \
         {held:?}, SnapshotDeletionHeld Events {held_events}, repository MassDeletionHeld ever True: {repo_held}",
        failed.len(),
        failed.keys().collect::<Vec<_>>(),
        slowest.as_secs_f64()
    ));
    ensure!(failed.len() == 6, "6 Failed children: {failed:?}");
    ensure!(stamped.len() == 4, "exactly 4 stamped failed-history: {stamped:?}");
    ensure!(deleted == stamped, "the 4 stamped are the 4 gone: deleted {deleted:?}, stamped {stamped:?}");
    for (n, stamp) in &first_deleting {
        ensure!(stamp.as_deref() == Some("failed-history"), "{n} was deleted before its stamp ({stamp:?})");
    }
    ensure!(slowest <= Duration::from_secs(30), "gone within 30 s of the sixth failure ({slowest:?})");
    ensure!(held.is_empty() && held_events == 0 && !repo_held, "failed history is never held");
    ensure!(kept.len() == 2, "2 Failed kept: {kept:?}");
    for k in &kept {
        let obj = latest.get(k).with_context(|| format!("{k} present"))?;
        ensure!(obj.phase() == "Failed" && obj.metadata.deletion_timestamp.is_none(), "{k} stays, Failed");
        for p in &deleted {
            ensure!(end(k) >= end(p), "the kept {k} is not older than the pruned {p}");
        }
    }
    Api::<SnapshotSchedule>::namespaced(w.client.clone(), &w.ns).delete("fails", &DeleteParams::default()).await?;
    Ok(())
}

/// T19 — the reverify nudge, from a failed Snapshot (nobody writes the annotation by hand).
/// Repository `alert` (probe interval 30m by default, so no periodic probe runs during the
/// test) has its backend cut: the manual Snapshot `nudge-1` fails, the controller stamps
/// `reverify-requested-at` on the repository, one reverify probe Job starts within 10 s of the
/// stamp, and `status.lastReverifyAt` equals the stamp. `nudge-2` then fails within 60 s of the
/// stamp: the stamp is not rewritten, no probe Job starts in the 10 s after, and the streak stays
/// at one. The repository is in Alert mode: under Degrade a streak of one re-probes after the
/// shortened strict-retry base (10 s in this binary), which would launch a probe for another
/// reason; in Alert mode the only probe is the nudge's.
async fn reverify_nudge(w: &World) -> Result<()> {
    const REVERIFY: &str = annotation::REVERIFY_REQUESTED_AT;
    let repos: Api<Repository> = Api::namespaced(w.client.clone(), &w.ns);
    let uid = w.repo("alert").await?.uid().context("uid")?;
    let repo = Recorder::start(repos, watcher::Config::default().fields("metadata.name=alert")).await?;
    let probe_cfg = watcher::Config::default().labels("kopiur.home-operations.com/connect-kind=probe");
    let jobs = Recorder::start(Api::<Job>::namespaced(w.client.clone(), &w.ns), probe_cfg).await?;
    // Probe Jobs of `alert` (by owner uid), first sighting of each uid.
    let probes = |seen: &[recorder::Seen<Job>]| -> Vec<(String, Instant, String)> {
        let mut out: Vec<(String, Instant, String)> = Vec::new();
        for v in seen.iter().filter(|v| v.obj.owner_references().iter().any(|o| o.uid == uid)) {
            if !out.iter().any(|(u, _, _)| *u == v.uid()) {
                let kind =
                    v.obj.annotations().get("kopiur.home-operations.com/probe-kind").cloned().unwrap_or_default();
                out.push((v.uid(), v.at, kind));
            }
        }
        out
    };
    let stamp_of = |r: &Repository| r.annotations().get(REVERIFY).cloned();
    let before = repo.latest().get("alert").and_then(|r| stamp_of(r));
    let probes_before = probes(&jobs.all()).len();
    let snaps = w.snaps();
    let failed = |name: &'static str| {
        let snaps = snaps.clone();
        async move {
            wait_for(&format!("{name} Failed"), Duration::from_secs(180), &w.log, || async {
                let s = snaps.get(name).await?;
                ensure!(s.phase() != "Succeeded", "{name} succeeded against a cut backend");
                Ok((s.phase() == "Failed").then_some(s))
            })
            .await
        }
    };
    let t1 = Instant::now();
    w.snapshot("nudge-1", "nudge", json!({})).await?;
    let f1 = failed("nudge-1").await?;
    let fail_secs = t1.elapsed().as_secs_f64();
    let (stamp, stamped_at) = repo
        .wait("alert stamped reverify-requested-at", Duration::from_secs(30), &w.log, |seen| {
            Ok(seen.iter().find_map(|v| stamp_of(&v.obj).filter(|s| Some(s) != before.as_ref()).map(|s| (s, v.at))))
        })
        .await?;
    // The second failure must land within 60 s of the stamp: its Snapshot starts at once.
    w.snapshot("nudge-2", "nudge", json!({})).await?;
    let (_, probe_at, kind) = jobs
        .wait("the reverify probe Job", Duration::from_secs(30), &w.log, |seen| {
            Ok(probes(seen).into_iter().nth(probes_before))
        })
        .await?;
    let latency = probe_at.saturating_duration_since(stamped_at);
    let stamp_t = chrono::DateTime::parse_from_rfc3339(&stamp).context("the stamp is RFC 3339")?.timestamp();
    let folded = repo
        .wait("lastReverifyAt recorded and the probe folded", Duration::from_secs(120), &w.log, |seen| {
            let r = &seen.last().context("a version")?.obj;
            let st = r.status.clone().unwrap_or_default();
            let streak = st.health.as_ref().map(|h| h.consecutive_probe_failures).unwrap_or(0);
            let reachable = r.condition("BackendReachable").map(|c| c.status.clone());
            Ok((st.last_reverify_at.is_some() && streak >= 1 && reachable.as_deref() == Some("False"))
                .then_some((st.last_reverify_at.map(|t| t.timestamp()), streak)))
        })
        .await?;
    w.say(format!(
        "[nudge] T19: nudge-1 Failed {fail_secs:.1}s after its creation ({:?}); alert stamped {REVERIFY}={stamp}; probe Job (probe-kind {kind}) seen \
         {:.1}s after the stamp; lastReverifyAt {:?}; streak {}",
        f1.status.as_ref().and_then(|s| s.failure.as_ref()).and_then(|f| f.kopia_error_class.clone()),
        latency.as_secs_f64(),
        folded.0,
        folded.1
    ));
    ensure!(kind == "reverify", "the probe was launched by the nudge (probe-kind {kind})");
    ensure!(latency <= Duration::from_secs(10), "the probe starts within 10 s of the stamp ({latency:?})");
    ensure!(folded.0 == Some(stamp_t), "lastReverifyAt {:?} equals the stamp {stamp}", folded.0);
    ensure!(folded.1 == 1, "one failed probe: streak {}", folded.1);

    // A second failure within 60 s of the stamp: no new stamp, no probe.
    failed("nudge-2").await?;
    let second_at = Utc::now().timestamp();
    ensure!(
        second_at - stamp_t < 60,
        "nudge-2 failed {} s after the stamp, outside the 60 s this check needs",
        second_at - stamp_t
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    let r = repo.latest().get("alert").cloned().context("alert")?;
    let streak = r.status.as_ref().and_then(|s| s.health.as_ref()).map(|h| h.consecutive_probe_failures);
    let all_probes = probes(&jobs.all());
    w.say(format!(
        "[nudge] nudge-2 Failed {} s after the stamp; 10 s later: stamp {:?}, probe Jobs since nudge-1 {}, streak {streak:?}",
        second_at - stamp_t,
        stamp_of(&r),
        all_probes.len() - probes_before
    ));
    ensure!(stamp_of(&r).as_deref() == Some(stamp.as_str()), "the stamp is not rewritten within 60 s");
    ensure!(all_probes.len() - probes_before == 1, "the second failure launched no probe: {all_probes:?}");
    ensure!(streak == Some(1), "the streak stays 1: {streak:?}");
    Ok(())
}

/// Alert mode keeps the repository Ready while BackendReachable=False; a preflight on
/// `repository.backendReachable` parks the Snapshot and fails it at the timeout, without a Job.
async fn preflight_backend(w: &World, proxy: &FaultProxy) -> Result<()> {
    proxy.set(Mode::Refuse);
    // The failed Snapshot's nudge makes the probe that turns BackendReachable False.
    reverify_nudge(w).await?;
    wait_for("alert: BackendReachable=False", Duration::from_secs(120), &w.log, || async {
        let r = w.repo("alert").await?;
        ensure!(r.phase() == "Ready", "Alert mode stays Ready: {:?}", r.status);
        Ok((r.condition("BackendReachable").map(|c| c.status.as_str()) == Some("False")).then_some(()))
    })
    .await?;
    w.snapshot("pf-1", "pf", json!({})).await?;
    let snaps = w.snaps();
    let parked = wait_for("pf-1 PreflightFailed", Duration::from_secs(60), &w.log, || async {
        let s = snaps.get("pf-1").await?;
        Ok((s.phase() == "Pending" && s.ready_reason().as_deref() == Some("PreflightFailed")).then_some(s))
    })
    .await?;
    let since = parked.status.as_ref().and_then(|s| s.preflight_since).context("preflightSince set")?;
    let msg = parked
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.message.clone())
        .unwrap_or_default();
    w.say(format!("[preflight] pf-1 Pending/PreflightFailed since {since}: {msg}"));
    ensure!(msg.contains("the backend is unreachable"), "the message carries the check's message: {msg}");
    let failed = wait_for("pf-1 Failed at the timeout", Duration::from_secs(120), &w.log, || async {
        let s = snaps.get("pf-1").await?;
        if s.phase() == "Pending" {
            ensure!(
                s.status.as_ref().and_then(|x| x.preflight_since) == Some(since),
                "preflightSince is not reset while parked"
            );
        }
        Ok((s.phase() == "Failed").then_some(s))
    })
    .await?;
    let failed_at = Utc::now();
    ensure!(failed.ready_reason().as_deref() == Some("PreflightTimeout"), "reason {:?}", failed.ready_reason());
    let waited = (failed_at - since).num_seconds();
    w.say(format!("[preflight] pf-1 Failed/PreflightTimeout {waited}s after preflightSince (timeout 40s)"));
    ensure!(waited >= 40, "failed no earlier than the timeout ({waited}s)");
    let job = Api::<Job>::namespaced(w.client.clone(), &w.ns).get_opt("pf-1").await?;
    ensure!(job.is_none(), "a preflight-failed Snapshot never launches its Job");
    proxy.set(Mode::Pass);
    Ok(())
}

/// Delete / Retain on a healthy repository; skip-snapshot-cleanup and a parked Delete while the
/// repository is Degraded.
async fn deletions(w: &World, op: &Operator, k_r: &Kopia, dir: &Path, g: &Garage, proxy: &FaultProxy) -> Result<()> {
    let snaps = w.snaps();
    for (name, policy, extra) in [
        ("del-1", "plain", json!({})),
        ("keep-1", "plain", json!({"deletionPolicy": "Retain"})),
        ("skip-1", "dp", json!({})),
        ("del-down", "dp", json!({})),
    ] {
        w.snapshot(name, policy, extra).await?;
    }
    let mut ids = BTreeMap::new();
    for name in ["del-1", "keep-1", "skip-1", "del-down"] {
        ids.insert(name, kopia_id(&w.succeeded(name).await?).context("kopia id")?);
    }
    let plain_source = format!("plain@{}:/pvc/a", w.ns);
    let before = k_r.ids(&plain_source).await?;
    ensure!(before.contains(&ids["del-1"]) && before.contains(&ids["keep-1"]));
    // Delete removes the kopia snapshot; Retain keeps it.
    snaps.delete("del-1", &DeleteParams::default()).await?;
    snaps.delete("keep-1", &DeleteParams::default()).await?;
    for n in ["del-1", "keep-1"] {
        wait_for(&format!("{n} gone"), Duration::from_secs(120), &w.log, || async {
            Ok(snaps.get_opt(n).await?.is_none().then_some(()))
        })
        .await?;
    }
    let after = k_r.ids(&plain_source).await?;
    w.say(format!(
        "[delete] Delete: del-1's kopia snapshot present {}; Retain: keep-1's present {}",
        after.contains(&ids["del-1"]),
        after.contains(&ids["keep-1"])
    ));
    ensure!(!after.contains(&ids["del-1"]), "Delete removed the kopia snapshot");
    ensure!(after.contains(&ids["keep-1"]), "Retain kept the kopia snapshot");
    let keep_id = ids["keep-1"].clone();
    let row = wait_for("keep-1 rediscovered", Duration::from_secs(180), &w.log, || async {
        let lp = ListParams::default().labels(&format!("{}={keep_id}", label::SNAPSHOT_ID));
        Ok(snaps.list(&lp).await?.items.into_iter().next())
    })
    .await?;
    let origin = row.labels().get(label::ORIGIN).cloned();
    w.say(format!("[delete] keep-1's kopia snapshot rediscovered as {} (origin {origin:?})", row.name_any()));
    ensure!(origin.as_deref() == Some("discovered"), "origin discovered");

    // The backend goes down: repository `down` turns Degraded.
    let skip = json!({"metadata": {"annotations": {annotation::SKIP_SNAPSHOT_CLEANUP: "true"}}});
    snaps.patch("skip-1", &PatchParams::default(), &Patch::Merge(&skip)).await?;
    proxy.set(Mode::Refuse);
    w.nudge("down").await?;
    wait_for("down Degraded", Duration::from_secs(180), &w.log, || async {
        Ok((w.repo("down").await?.phase() == "Degraded").then_some(()))
    })
    .await?;
    // Every batch delete Job against `down` (label delete-repo=<uid>), seen by a watch: Jobs
    // for other repositories (retention prunes on r) run concurrently and must not count, and a
    // Job created and reaped between two polls would be missed by a poll.
    let down_uid = w.repo("down").await?.uid().context("uid")?;
    let down_jobs_rec = Recorder::start(
        Api::<Job>::namespaced(w.client.clone(), &w.ns),
        watcher::Config::default().labels(&format!("{}={down_uid}", label::DELETE_REPO)),
    )
    .await?;
    let down_jobs_seen = || down_jobs_rec.all().iter().map(|v| v.uid()).collect::<BTreeSet<String>>().len();
    let jobs_before = batch_jobs_created(op).await?;
    let t = Instant::now();
    snaps.delete("skip-1", &DeleteParams::default()).await?;
    snaps.delete("del-down", &DeleteParams::default()).await?;
    wait_for("skip-1 released while Degraded", Duration::from_secs(60), &w.log, || async {
        Ok(snaps.get_opt("skip-1").await?.is_none().then_some(()))
    })
    .await?;
    w.say(format!("[delete] skip-snapshot-cleanup released in {:.1}s while Degraded", t.elapsed().as_secs_f64()));
    tokio::time::sleep(Duration::from_secs(15)).await;
    let parked = snaps.get("del-down").await?;
    ensure!(parked.metadata.deletion_timestamp.is_some(), "del-down is deleting");
    ensure!(
        parked.finalizers().iter().any(|f| f == kopiur_api::names::finalizer::SNAPSHOT_CLEANUP),
        "a Delete parks while the repository is Degraded"
    );
    let jobs_during = batch_jobs_created(op).await?;
    let down_jobs_during = down_jobs_seen();
    w.say(format!(
        "[delete] while Degraded: delete Jobs against down {down_jobs_during} (all repositories: {jobs_before} -> \
         {jobs_during}); del-down parked with Ready reason {:?}",
        parked.ready_reason()
    ));
    ensure!(down_jobs_during == 0, "nothing contacts the repository while it is Degraded");
    // Recovery: the parked Delete drains; skip-1's data was never touched.
    proxy.set(Mode::Pass);
    w.nudge("down").await?;
    wait_for("del-down drained after recovery", Duration::from_secs(300), &w.log, || async {
        Ok(snaps.get_opt("del-down").await?.is_none().then_some(()))
    })
    .await?;
    let down_jobs = down_jobs_seen();
    w.say(format!("[delete] del-down drained after recovery through {down_jobs} batch Job(s)"));
    ensure!(down_jobs >= 1, "the parked Delete ran through a batch Job once the repository was Ready");
    let k_down = Kopia::connect(dir, g, "down/").await?;
    let left = k_down.ids(&format!("dp@{}:/pvc/a", w.ns)).await?;
    w.say(format!(
        "[delete] after recovery: del-down's kopia snapshot present {}, skip-1's present {}",
        left.contains(&ids["del-down"]),
        left.contains(&ids["skip-1"])
    ));
    ensure!(!left.contains(&ids["del-down"]), "the parked Delete removed its kopia snapshot after recovery");
    ensure!(left.contains(&ids["skip-1"]), "skip-snapshot-cleanup never touches the data");
    Ok(())
}

/// A policySelector schedule with runOnCreate: one child per matched policy, each under its
/// own policy's identity; the unlabelled policy runs nothing.
async fn policy_selector(w: &World, k: &Kopia) -> Result<()> {
    for (name, pvc, labelled) in [("gs-a", "c", true), ("gs-b", "d", true), ("gs-x", "e", false)] {
        let labels = if labelled { json!({"backup-group": "nightly"}) } else { json!({}) };
        w.apply(json!({"apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotPolicy",
                       "metadata": {"name": name, "namespace": w.ns, "labels": labels},
                       "spec": {"repository": {"name": "r"}, "copyMethod": "Direct", "sources": [{"pvc": {"name": pvc}}]}}))
            .await?;
    }
    w.apply(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotSchedule",
        "metadata": {"name": "gs", "namespace": w.ns},
        "spec": {"policySelector": {"matchLabels": {"backup-group": "nightly"}},
                 "schedule": {"cron": "0 0 1 1 *", "runOnCreate": true}}
    }))
    .await?;
    let kids = w.children_succeeded("gs", 2).await?;
    let by_policy: BTreeMap<String, String> = kids
        .iter()
        .map(|s| (s.spec.policy_ref.as_ref().map(|p| p.name.clone()).unwrap_or_default(), s.name_any()))
        .collect();
    let policies: Vec<&str> = by_policy.keys().map(String::as_str).collect();
    ensure!(policies == ["gs-a", "gs-b"], "one child per matched policy: {by_policy:?}");
    for s in &kids {
        let p = s.spec.policy_ref.as_ref().map(|p| p.name.clone()).unwrap_or_default();
        ensure!(s.labels().get(label::CONFIG) == Some(&p), "the config label names the child's policy");
    }
    let mut counts = Vec::new();
    for (policy, pvc) in [("gs-a", "c"), ("gs-b", "d"), ("gs-x", "e")] {
        counts.push((policy, k.ids(&format!("{policy}@{}:/pvc/{pvc}", w.ns)).await?.len()));
    }
    let sched: SnapshotSchedule = Api::namespaced(w.client.clone(), &w.ns).get("gs").await?;
    let conds: Vec<(String, String, String)> = sched
        .status
        .as_ref()
        .map(|s| s.conditions.iter().map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone())).collect())
        .unwrap_or_default();
    w.say(format!(
        "[policySelector] children {by_policy:?}; kopia snapshots per policy source {counts:?}; schedule conditions {conds:?}"
    ));
    ensure!(counts == [("gs-a", 1), ("gs-b", 1), ("gs-x", 0)], "each matched policy backed up once, gs-x not at all");
    ensure!(
        conds.iter().any(|(t, st, r)| t == "FanoutCapped" && st == "False" && r == "WithinCap"),
        "FanoutCapped=False"
    );
    ensure!(conds.iter().any(|(t, st, _)| t == "Ready" && st == "True"), "the schedule is Ready");
    Api::<SnapshotSchedule>::namespaced(w.client.clone(), &w.ns).delete("gs", &DeleteParams::default()).await?;
    Ok(())
}

/// The fork guard: a hostname change after a Succeeded run is refused and runs keep the pinned
/// identity; `allow-identity-change` accepts it and the next run writes under the new one.
async fn identity_fork(w: &World, k: &Kopia) -> Result<()> {
    w.apply(json!({"apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotPolicy",
                   "metadata": {"name": "fk", "namespace": w.ns},
                   "spec": {"repository": {"name": "r"}, "copyMethod": "Direct", "sources": [{"pvc": {"name": "e"}}]}}))
        .await?;
    let policies: Api<SnapshotPolicy> = Api::namespaced(w.client.clone(), &w.ns);
    let host_of = |s: &Snapshot| {
        s.status.as_ref().and_then(|x| x.resolved.as_ref()?.identity.as_ref()).map(|i| i.hostname.clone())
    };
    let pinned_host = |p: &SnapshotPolicy| {
        p.status.as_ref().and_then(|x| x.resolved.as_ref()?.identity.as_ref()).map(|i| i.hostname.clone())
    };
    let cond_of = |p: &SnapshotPolicy, t: &str| {
        p.status
            .as_ref()
            .and_then(|x| x.conditions.iter().find(|c| c.type_ == t))
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    };
    wait_for("fk pinned", Duration::from_secs(60), &w.log, || async {
        Ok(pinned_host(&policies.get("fk").await?).filter(|h| *h == w.ns))
    })
    .await?;
    w.snapshot("fk-1", "fk", json!({})).await?;
    let first = w.succeeded("fk-1").await?;
    ensure!(host_of(&first).as_deref() == Some(w.ns.as_str()), "fk-1 ran under the pinned hostname");

    // The fork: a new hostname after a Succeeded run.
    let patch = json!({"spec": {"identity": {"hostname": "elsewhere"}}});
    policies.patch("fk", &PatchParams::default(), &Patch::Merge(&patch)).await?;
    let refused = wait_for("fk IdentityWouldFork", Duration::from_secs(60), &w.log, || async {
        let p = policies.get("fk").await?;
        let stalled = cond_of(&p, "Stalled");
        Ok(stalled.filter(|(st, r, _)| st == "True" && r == "IdentityWouldFork").map(|_| p))
    })
    .await?;
    let (ready_status, ready_reason, msg) = cond_of(&refused, "Ready").context("Ready condition")?;
    w.say(format!("[fork] hostname change refused: Ready={ready_status}/{ready_reason}: {msg}"));
    ensure!(ready_status == "False" && ready_reason == "IdentityWouldFork", "Ready is False/IdentityWouldFork");
    let cmd = format!("kubectl annotate snapshotpolicy fk -n {} {}=true", w.ns, annotation::ALLOW_IDENTITY_CHANGE);
    ensure!(msg.contains(&cmd), "the message carries the exact command: {msg}");
    ensure!(pinned_host(&refused).as_deref() == Some(w.ns.as_str()), "the pinned identity stays");
    w.snapshot("fk-2", "fk", json!({})).await?;
    let second = w.succeeded("fk-2").await?;
    ensure!(
        host_of(&second).as_deref() == Some(w.ns.as_str()),
        "a run while the fork is refused writes under the pinned identity: {:?}",
        host_of(&second)
    );
    let warned = w.events("fk", "IdentityWouldFork").await?;
    ensure!(warned == 1, "one IdentityWouldFork Warning on the transition, saw {warned}");

    // The ack accepts the fork; the next run writes under the new hostname.
    let ack = json!({"metadata": {"annotations": {annotation::ALLOW_IDENTITY_CHANGE: "true"}}});
    policies.patch("fk", &PatchParams::default(), &Patch::Merge(&ack)).await?;
    let accepted = wait_for("fk re-pinned to elsewhere", Duration::from_secs(60), &w.log, || async {
        let p = policies.get("fk").await?;
        Ok((pinned_host(&p).as_deref() == Some("elsewhere")).then_some(p))
    })
    .await?;
    let stalled = cond_of(&accepted, "Stalled");
    ensure!(stalled.as_ref().is_none_or(|(st, _, _)| st != "True"), "the stall is lifted: {stalled:?}");
    w.snapshot("fk-3", "fk", json!({})).await?;
    let third = w.succeeded("fk-3").await?;
    ensure!(host_of(&third).as_deref() == Some("elsewhere"), "after the ack the run writes under the new hostname");
    let old = k.ids(&format!("fk@{}:/pvc/e", w.ns)).await?.len();
    let new = k.ids("fk@elsewhere:/pvc/e").await?.len();
    w.say(format!(
        "[fork] kopia snapshots: fk@{}:/pvc/e {old} (fk-1, fk-2), fk@elsewhere:/pvc/e {new} (fk-3, after the ack); \
         IdentityWouldFork events {warned}",
        w.ns
    ));
    ensure!((old, new) == (2, 1), "2 snapshots under the pinned source, 1 under the accepted one");
    Ok(())
}

/// 20 policies with daily schedules far from now: zero writes to any of them over 2 minutes.
async fn idle_policies(w: &World) -> Result<()> {
    let later = Utc::now() + chrono::Duration::hours(12);
    let cron = format!("{} {} * * *", later.minute(), later.hour());
    for i in 0..20 {
        let name = format!("idle-{i:02}");
        w.apply(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotPolicy",
            "metadata": {"name": name, "namespace": w.ns},
            "spec": {"repository": {"name": "r"}, "copyMethod": "Direct", "sources": [{"pvc": {"name": "a"}}]}
        }))
        .await?;
        w.apply(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotSchedule",
            "metadata": {"name": name, "namespace": w.ns},
            "spec": {"policyRef": {"name": name}, "schedule": {"cron": cron}}
        }))
        .await?;
    }
    let policies: Api<SnapshotPolicy> = Api::namespaced(w.client.clone(), &w.ns);
    let schedules: Api<SnapshotSchedule> = Api::namespaced(w.client.clone(), &w.ns);
    let versions = || async {
        let mut v = BTreeMap::new();
        for p in policies.list(&ListParams::default()).await?.items {
            if p.name_any().starts_with("idle-") {
                let settled = p.status.as_ref().is_some_and(|s| s.observed_generation == p.metadata.generation);
                v.insert(format!("policy/{}", p.name_any()), (p.resource_version(), settled));
            }
        }
        for s in schedules.list(&ListParams::default()).await?.items {
            if s.name_any().starts_with("idle-") {
                let settled = s.status.as_ref().is_some_and(|x| x.next_schedule.is_some());
                v.insert(format!("schedule/{}", s.name_any()), (s.resource_version(), settled));
            }
        }
        anyhow::Ok(v)
    };
    wait_for("40 idle objects settled", Duration::from_secs(120), &w.log, || async {
        let v = versions().await?;
        Ok((v.len() == 40 && v.values().all(|(_, s)| *s)).then_some(()))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let first = versions().await?;
    tokio::time::sleep(Duration::from_secs(120)).await;
    let second = versions().await?;
    let changed: Vec<&String> =
        first.keys().filter(|k| first[*k].0 != second.get(*k).and_then(|x| x.0.clone())).collect();
    w.say(format!(
        "[idle] 20 policies + 20 schedules (cron {cron:?}): {} of 40 objects written over 120 s",
        changed.len()
    ));
    ensure!(changed.is_empty(), "idle objects were written: {changed:?}");
    Ok(())
}

/// An expired pinned slot is skipped and re-pinned forward without a tight loop.
async fn starting_deadline(w: &World, op: &Operator) -> Result<()> {
    let later = Utc::now() + chrono::Duration::hours(12);
    w.apply(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotSchedule",
        "metadata": {"name": "late", "namespace": w.ns},
        "spec": {"policyRef": {"name": "plain"},
                 "schedule": {"cron": format!("{} {} * * *", later.minute(), later.hour()), "startingDeadlineSeconds": 10}}
    }))
    .await?;
    let schedules: Api<SnapshotSchedule> = Api::namespaced(w.client.clone(), &w.ns);
    let pinned = wait_for("late pinned", Duration::from_secs(60), &w.log, || async {
        Ok(schedules.get("late").await?.status.and_then(|s| s.next_schedule))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    // As if the controller had been down across the slot: the pinned slot is 3 minutes old.
    let past = (Utc::now() - chrono::Duration::minutes(3)).with_nanosecond(0).context("time")?;
    let count = || async {
        anyhow::Ok(metrics::sum(
            &op.metrics().await?,
            "kopiur_controller_reconciliations_total",
            &[("kind", "SnapshotSchedule")],
        ))
    };
    let before = count().await?;
    let patch = json!({"status": {"nextSchedule": {"slot": past.to_rfc3339(), "at": past.to_rfc3339(),
                                                   "timezone": pinned.timezone}}});
    schedules.patch_status("late", &PatchParams::default(), &Patch::Merge(&patch)).await?;
    let t = Instant::now();
    let next = wait_for("late re-pinned forward", Duration::from_secs(60), &w.log, || async {
        let s = schedules.get("late").await?;
        let at = s.status.and_then(|x| x.next_schedule).and_then(|n| n.at);
        Ok(at.filter(|a| *a > Utc::now()))
    })
    .await?;
    w.say(format!(
        "[deadline] expired slot {past} skipped; re-pinned to {next} after {:.1}s",
        t.elapsed().as_secs_f64()
    ));
    let skipped = w.events("late", "ScheduleSlotSkipped").await?;
    ensure!(skipped >= 1, "a ScheduleSlotSkipped event");
    let children = w.snaps().list(&ListParams::default().labels(&format!("{}=late", label::SCHEDULE))).await?;
    ensure!(children.items.is_empty(), "the expired slot created no Snapshot");
    tokio::time::sleep(Duration::from_secs(60).saturating_sub(t.elapsed())).await;
    let reconciles = count().await? - before;
    w.say(format!("[deadline] SnapshotSchedule reconciles over the 60 s after the expiry: {reconciles}"));
    ensure!(reconciles < 10.0, "no tight requeue loop: {reconciles} reconciles");
    Ok(())
}

/// T21 (docs/design/test-tiers.md §13.1): T20 without a deadline. The pinned slot of an every-minute schedule
/// is set 3 minutes into the past, as if the controller had been down across 3 slots: exactly
/// one child fires at once, for the pinned slot, and the next child is the next nominal minute;
/// the other missed minutes create nothing.
async fn one_catch_up(w: &World) -> Result<()> {
    // Start early in a minute, so the natural first slot cannot fire before the patch lands.
    let sec = Utc::now().second();
    if !(3..=30).contains(&sec) {
        tokio::time::sleep(Duration::from_secs(u64::from((63 - sec) % 60))).await;
    }
    w.apply(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotSchedule",
        "metadata": {"name": "catchup", "namespace": w.ns},
        "spec": {"policyRef": {"name": "plain"},
                 // Allow: a catch-up backup still running must not skip the next slot.
                 "schedule": {"cron": "* * * * *", "concurrencyPolicy": "Allow"}}
    }))
    .await?;
    let schedules: Api<SnapshotSchedule> = Api::namespaced(w.client.clone(), &w.ns);
    let pinned = wait_for("catchup pinned", Duration::from_secs(30), &w.log, || async {
        Ok(schedules.get("catchup").await?.status.and_then(|s| s.next_schedule))
    })
    .await?;
    let past = (Utc::now() - chrono::Duration::minutes(3))
        .with_second(0)
        .and_then(|t| t.with_nanosecond(0))
        .context("time")?;
    let patch = json!({"status": {"nextSchedule": {"slot": past.to_rfc3339(), "at": past.to_rfc3339(),
                                                   "timezone": pinned.timezone}}});
    schedules.patch_status("catchup", &PatchParams::default(), &Patch::Merge(&patch)).await?;
    let patched = Utc::now();
    ensure!(patched.second() < 50, "the patch landed late in its minute ({patched}); the next slot could race it");
    let children = || async {
        let l = w.snaps().list(&ListParams::default().labels(&format!("{}=catchup", label::SCHEDULE))).await?;
        let mut names: Vec<String> = l.items.iter().map(|s| s.name_any()).collect();
        names.sort();
        anyhow::Ok(names)
    };
    let catch_up = kopiur_controller::snapshot_schedule::plan::child_name("catchup", past);
    let t = Instant::now();
    let first = wait_for("the catch-up child", Duration::from_secs(10), &w.log, || async {
        let c = children().await?;
        Ok((!c.is_empty()).then_some(c))
    })
    .await?;
    w.say(format!("[catch-up] {:?} {:.1}s after the pinned slot was set 3 min back", first, t.elapsed().as_secs_f64()));
    ensure!(first == vec![catch_up.clone()], "exactly one child, for the pinned slot {past}: {first:?}");
    let next_slot =
        (patched + chrono::Duration::minutes(1)).with_second(0).and_then(|t| t.with_nanosecond(0)).context("time")?;
    let next = kopiur_controller::snapshot_schedule::plan::child_name("catchup", next_slot);
    let after = wait_for("the next nominal child", Duration::from_secs(90), &w.log, || async {
        let c = children().await?;
        Ok((c.len() >= 2).then_some(c))
    })
    .await?;
    let mut want = vec![catch_up, next];
    want.sort();
    w.say(format!("[catch-up] then {after:?} (next nominal slot {next_slot})"));
    ensure!(
        after == want,
        "one catch-up, then the next nominal minute {next_slot}, nothing for the other missed slots: {after:?}"
    );
    schedules.delete("catchup", &DeleteParams::default()).await?;
    Ok(())
}
