//! The repository fault paths end to end (issue 5 acceptance; docs/design/repository-breaker.md §3, docs/design/test-tiers.md §13.1), on a
//! private control plane with Garage, the fault proxy, the real mover and two controller
//! replicas under the generated RBAC. One environment; independent scenarios run concurrently
//! on their own namespaces, prefixes and proxies, with the operator's timing knobs shortened:
//!
//! - A backup before any fault (T45): Ready=True within 1 s of the mover's terminal PATCH,
//!   `kopiur_snapshots_completed_total{result="succeeded"}` +1, no Secret value in the Job.
//! - `onFailure: Alert` (T17): an outage keeps the repository Ready (every version on a watch)
//!   with BackendReachable=False while `kopiur_repository_health_probe_failures_total` rises;
//!   one RepositoryProbeFailed; a manual Snapshot created mid-outage launches its Job.
//! - Wrong password (T15): Failed (Stalled) after exactly one strict Job and no retry loop for
//!   the rest of the test; fixing the Secret's value re-opens it to Ready through the Secret
//!   watch within 10 s.
//! - Wiped storage (T11–T13): Degraded, then Failed/RepositoryReinitializeBlocked with nothing
//!   re-created; `allow-reinitialize=<uniqueId>` re-creates once and pins a new id; the now-stale
//!   ack is ignored with InvalidReinitializeAck, a second wipe ends blocked again, and nothing
//!   is launched or re-created until the test ends.
//! - Create disabled (T14): Failed/RepositoryNotInitialized with the exact message of docs/design/repository-breaker.md §3.4, one
//!   strict Job that may not create, nothing written, and no retry until the test ends.
//! - An outage during a re-bootstrap opens the breaker from the strict connect (T16).
//! - Two replicas: the leader is killed mid-outage; the standby takes the Lease, keeps the
//!   stamped strict-retry holdoff (no early launch, no reset to the base) and reconciling
//!   continues until the breaker closes.
//! - A Ready repository with nothing changing makes zero writes over more than two minutes,
//!   the leader handover included (its resourceVersion never moves).
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use chrono::{DateTime, SecondsFormat, Utc};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kopiur_api::names::annotation;
use kopiur_api::repository::StrictRetry;
use kopiur_api::{Repository, Snapshot};
use kopiur_testenv::garage::Garage;
use kopiur_testenv::operator::Operator;
use kopiur_testenv::proxy::{FaultProxy, Mode};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use support::env::Stack;
use support::status::{StatusExt, event_count};

mod support;
use phase_watch::PhaseWatch;
use support::phase_watch;

const PASSWORD: &str = "faults correct horse";
/// Operator timing knobs: strict retries 10 s doubling to 40 s, reverify nudges 5 s apart.
const BASE: i64 = 10;
const CAP: i64 = 40;
const KNOBS: [(&str, &str); 3] = [
    ("KOPIUR_STRICT_RETRY_BASE_SECONDS", "10"),
    ("KOPIUR_STRICT_RETRY_CAP_SECONDS", "40"),
    ("KOPIUR_REVERIFY_SPACING_SECONDS", "5"),
];

/// A connect Job as first seen on a watch.
/// The S3 secret key of the access-denied scenario (a value the sweep must never find).
const WRONG_S3_KEY: &str = "wrong-s3-secret-key-of-the-faults-e2e-7f3a";

#[derive(Clone, Debug)]
struct JobRec {
    namespace: String,
    uid: String,
    /// The `probe-kind` annotation: strict, probe or reverify.
    kind: String,
    /// The `create-gate` annotation.
    gate: String,
    /// The `op` label (`bootstrap`, `backup`, …).
    op: String,
    created: DateTime<Utc>,
}

/// Every kopiur Job created in the cluster, recorded from a watch (connect Jobs are deleted
/// once folded, so a list would miss them).
#[derive(Clone, Default)]
struct JobLog(Arc<Mutex<Vec<JobRec>>>);

impl JobLog {
    fn start(client: Client) -> JobLog {
        let log = JobLog::default();
        let out = log.clone();
        tokio::spawn(async move {
            let cfg = watcher::Config::default().labels("app.kubernetes.io/managed-by=kopiur");
            let mut s = watcher(Api::<Job>::all(client), cfg).default_backoff().applied_objects().boxed();
            while let Some(ev) = s.next().await {
                let Ok(job) = ev else { continue };
                let uid = job.uid().unwrap_or_default();
                let mut v = out.0.lock().unwrap();
                if v.iter().any(|j| j.uid == uid) {
                    continue;
                }
                let ann = job.annotations();
                v.push(JobRec {
                    namespace: job.namespace().unwrap_or_default(),
                    uid,
                    kind: ann.get("kopiur.home-operations.com/probe-kind").cloned().unwrap_or_default(),
                    gate: ann.get("kopiur.home-operations.com/create-gate").cloned().unwrap_or_default(),
                    op: job.labels().get("kopiur.home-operations.com/op").cloned().unwrap_or_default(),
                    created: support::jobs::created_or_now(&job),
                });
            }
        });
        log
    }

    fn in_ns(&self, ns: &str) -> Vec<JobRec> {
        self.0.lock().unwrap().iter().filter(|j| j.namespace == ns).cloned().collect()
    }

    fn uids(&self, ns: &str) -> BTreeSet<String> {
        self.in_ns(ns).into_iter().map(|j| j.uid).collect()
    }

    /// Jobs of `ns` not in `before`.
    fn since(&self, ns: &str, before: &BTreeSet<String>) -> Vec<JobRec> {
        self.in_ns(ns).into_iter().filter(|j| !before.contains(&j.uid)).collect()
    }
}

struct World {
    client: Client,
    g: Garage,
    jobs: JobLog,
    logs: Vec<PathBuf>,
    started: Instant,
}

impl World {
    fn say(&self, msg: impl std::fmt::Display) {
        println!("[{:>6.1}s] {msg}", self.started.elapsed().as_secs_f64());
    }

    async fn wait<T, F, Fut>(&self, what: &str, timeout: Duration, mut f: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<Option<T>>>,
    {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = f().await.with_context(|| format!("while waiting for {what}"))? {
                return Ok(v);
            }
            if Instant::now() > deadline {
                let tails: Vec<String> = self
                    .logs
                    .iter()
                    .map(|l| format!("== {}\n{}", l.display(), kopiur_testenv::process::log_tail(l, 40)))
                    .collect();
                bail!("timed out after {timeout:?} waiting for {what}\n{}", tails.join("\n"));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    fn repos(&self, ns: &str) -> Api<Repository> {
        Api::namespaced(self.client.clone(), ns)
    }

    async fn create_secret(&self, ns: &str, password: &str) -> Result<()> {
        self.create_secret_with_key(ns, password, self.g.secret_key()).await
    }

    async fn create_secret_with_key(&self, ns: &str, password: &str, secret_key: &str) -> Result<()> {
        let s: Secret = serde_json::from_value(json!({
            "metadata": {"name": "kopia", "namespace": ns},
            "stringData": {"KOPIA_PASSWORD": password, "AWS_ACCESS_KEY_ID": self.g.access_key(),
                           "AWS_SECRET_ACCESS_KEY": secret_key}
        }))?;
        Api::<Secret>::namespaced(self.client.clone(), ns).create(&PostParams::default(), &s).await?;
        Ok(())
    }

    async fn set_password(&self, ns: &str, password: &str) -> Result<()> {
        Api::<Secret>::namespaced(self.client.clone(), ns)
            .patch(
                "kopia",
                &PatchParams::default(),
                &Patch::Merge(&json!({"stringData": {"KOPIA_PASSWORD": password}})),
            )
            .await?;
        Ok(())
    }

    /// A Repository on `prefix`, through `endpoint` (Garage itself or a fault proxy).
    async fn create_repo(&self, ns: &str, name: &str, endpoint: &str, prefix: &str, health: Value) -> Result<()> {
        let mut spec = json!({
            "backend": {"s3": {"bucket": self.g.bucket(), "endpoint": format!("http://{endpoint}"),
                               "region": self.g.region(), "prefix": prefix}},
            "encryption": {"passwordSecretRef": {"name": "kopia"}}
        });
        if !health.is_null() {
            spec["health"] = health;
        }
        let r: Repository = serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
            "metadata": {"name": name, "namespace": ns}, "spec": spec
        }))?;
        self.repos(ns).create(&PostParams::default(), &r).await?;
        Ok(())
    }

    async fn wait_phase(&self, ns: &str, name: &str, want: &str, timeout: Duration) -> Result<Repository> {
        let repos = self.repos(ns);
        self.wait(&format!("{ns}/{name} {want}"), timeout, || async {
            let r = repos.get(name).await?;
            Ok((r.phase() == want).then_some(r))
        })
        .await
    }

    async fn annotate(&self, ns: &str, name: &str, key: &str, value: &str) -> Result<()> {
        self.repos(ns)
            .patch(name, &PatchParams::default(), &Patch::Merge(&json!({"metadata": {"annotations": {key: value}}})))
            .await?;
        Ok(())
    }

    /// A reverify nudge, as a failed consumer would stamp it: one probe connect at once.
    async fn nudge(&self, ns: &str, name: &str) -> Result<()> {
        let now = Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true);
        self.annotate(ns, name, annotation::REVERIFY_REQUESTED_AT, &now).await
    }

    /// A spec change (a strict S2 connect at once, even while Degraded).
    async fn bump_spec(&self, ns: &str, name: &str, threshold: i32) -> Result<i64> {
        let r = self
            .repos(ns)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"health": {"probe": {"failureThreshold": threshold}}}})),
            )
            .await?;
        r.metadata.generation.context("generation")
    }

    /// Events about `name` with `reason`, counting a recorder series as its count.
    async fn events(&self, ns: &str, name: &str, reason: &str) -> Result<usize> {
        Ok(event_count(&self.client, ns, name, reason).await?)
    }

    /// The count of an Event that must exist: a reconcile writes its status before it publishes
    /// its Events, so a reader that saw the status waits (up to 10 s) for the first occurrence.
    async fn event_recorded(&self, ns: &str, name: &str, reason: &str) -> Result<usize> {
        self.wait(&format!("{name}: {reason} recorded"), Duration::from_secs(10), || async {
            let n = self.events(ns, name, reason).await?;
            Ok((n > 0).then_some(n))
        })
        .await
    }

    async fn objects(&self, prefix: &str) -> Result<usize> {
        Ok(self.g.list_objects(self.g.bucket(), prefix).await?.len())
    }
}

fn cond_status<'a>(r: &'a Repository, t: &str) -> (&'a str, &'a str) {
    r.condition(t).map(|c| (c.status.as_str(), c.reason.as_str())).unwrap_or(("", ""))
}

fn unique_id(r: &Repository) -> String {
    r.status.as_ref().and_then(|s| s.unique_id.clone()).unwrap_or_default()
}

fn streak(r: &Repository) -> i32 {
    r.status.as_ref().and_then(|s| s.health.as_ref()).map(|h| h.consecutive_probe_failures).unwrap_or(0)
}

fn strict_retry(r: &Repository) -> Option<StrictRetry> {
    r.status.as_ref()?.health.as_ref()?.strict_retry.clone()
}

fn series(metric: &str, ns: &str, name: &str) -> String {
    format!("{metric}{{kind=\"Repository\",namespace=\"{ns}\",name=\"{name}\"")
}

fn snap_ready(s: &Snapshot) -> Option<&Condition> {
    s.status.as_ref()?.conditions.iter().find(|c| c.type_ == "Ready" && c.status == "True")
}

/// A PVC with a few files (written straight into its host directory) and a Direct policy `p`
/// over it, backing up to repository `repo`.
async fn backup_source(w: &World, node_dir: &std::path::Path, ns: &str, repo: &str) -> Result<()> {
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data", "namespace": ns},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }))?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(w.client.clone(), ns);
    pvcs.create(&PostParams::default(), &pvc).await?;
    let bound = w
        .wait(&format!("{ns}: PVC Bound"), Duration::from_secs(60), || async {
            let p = pvcs.get("data").await?;
            Ok((p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")).then_some(p))
        })
        .await?;
    let host = kopiur_testenv::node::provisioner::pv_dir(node_dir, &bound.uid().context("pvc uid")?);
    std::fs::create_dir_all(&host)?;
    std::fs::write(host.join("hello.txt"), b"hello from the faults e2e\n")?;
    kopiur_testenv::apply::apply_value(
        &w.client,
        ns,
        &json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotPolicy",
            "metadata": {"name": "p", "namespace": ns},
            "spec": {"repository": {"name": repo}, "copyMethod": "Direct", "sources": [{"pvc": {"name": "data"}}]}
        }),
    )
    .await
}

async fn manual_snapshot(w: &World, ns: &str, name: &str) -> Result<()> {
    let s: Snapshot = serde_json::from_value(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"policyRef": {"name": "p"}}
    }))?;
    Api::<Snapshot>::namespaced(w.client.clone(), ns).create(&PostParams::default(), &s).await?;
    Ok(())
}

/// T45 on the alert repository before its outage: a manual Snapshot reaches Succeeded with a
/// 32-hex id; Ready=True follows within 1 s of the mover's terminal PATCH (both seen on one
/// watch of the Snapshot); `kopiur_snapshots_completed_total{result="succeeded"}` rises by
/// exactly 1; the Job carries no Secret value.
async fn backup_heals(w: &World, op: &Operator, ns: &str) -> Result<()> {
    let snaps: Api<Snapshot> = Api::namespaced(w.client.clone(), ns);
    let watch = PhaseWatch::start(snaps.clone(), "pre", Snapshot::phase);
    let completed = format!("kopiur_snapshots_completed_total{{namespace=\"{ns}\",policy=\"p\",result=\"succeeded\"}}");
    let before = op.metric(&completed).await.unwrap_or(0.0);
    manual_snapshot(w, ns, "pre").await?;
    let patched = watch
        .wait_since("pre: the mover's terminal PATCH", 0, Duration::from_secs(240), |s| {
            let p = s.phase();
            p == "Succeeded" || p == "Failed"
        })
        .await?;
    ensure!(patched.phase == "Succeeded", "pre: {:?}", patched.object.status);
    ensure!(snap_ready(&patched.object).is_none(), "the mover's PATCH writes no Ready condition");
    let healed = watch.wait_since("pre: Ready=True", 0, Duration::from_secs(30), |s| snap_ready(s).is_some()).await?;
    let lag = healed.at.saturating_duration_since(patched.at);
    w.say(format!("pre: Ready=True {lag:?} after the mover's PATCH"));
    ensure!(lag <= Duration::from_secs(1), "T45: Ready=True {lag:?} after the mover's PATCH (spec: 1 s)");
    assert_eq!(snap_ready(&healed.object).map(|c| c.reason.as_str()), Some("SnapshotCreated"));
    let st = healed.object.status.clone().context("status")?;
    let id = st.snapshot.as_ref().and_then(|x| x.kopia_snapshot_id.clone()).context("kopiaSnapshotID")?;
    ensure!(id.len() == 32 && id.chars().all(|c| c.is_ascii_hexdigit()), "snapshot id {id}");
    let after = w
        .wait("pre: completed_total counted", Duration::from_secs(10), || async {
            Ok(op.metric(&completed).await.filter(|v| *v > before))
        })
        .await?;
    assert_eq!(after - before, 1.0, "completed_total{{result=\"succeeded\"}} rises by exactly 1");
    let job = Api::<Job>::namespaced(w.client.clone(), ns).get("pre").await?;
    let text = serde_json::to_string(&job)?;
    ensure!(!text.contains(PASSWORD) && !text.contains(w.g.secret_key()), "a Secret value leaked into the Job");
    Ok(())
}

/// T17: Alert mode stays Ready through an outage (every version on a watch); only the
/// condition, one Event and the probe-failure counter show it, and a manual Snapshot created
/// mid-outage launches its Job.
async fn alert_mode(w: &World, op: &Operator, ns: &str, proxy: &FaultProxy) -> Result<()> {
    let repos = w.repos(ns);
    let failures = series("kopiur_repository_health_probe_failures_total", ns, "alert");
    backup_heals(w, op, ns).await?;
    w.say("alert: a backup before the outage Succeeded");
    let watch = PhaseWatch::start(repos.clone(), "alert", Repository::phase);
    watch.wait_since("alert: watch synced", 0, Duration::from_secs(10), |_| true).await?;
    proxy.set(Mode::Refuse);
    w.nudge(ns, "alert").await?;
    let first = watch
        .wait_since("alert: first failed probe folded", 0, Duration::from_secs(120), |r| {
            cond_status(r, "BackendReachable").0 == "False"
        })
        .await?
        .object;
    w.say(format!("alert: first probe failed, streak {}", streak(&first)));
    let c1 = w
        .wait("alert: probe-failure counter", Duration::from_secs(10), || async { Ok(op.metric(&failures).await) })
        .await?;
    ensure!(c1 >= 1.0, "probe failures counted: {c1}");
    // T17: a manual Snapshot created mid-outage launches a Job: Alert mode gates nothing.
    let before = w.jobs.uids(ns);
    manual_snapshot(w, ns, "mid").await?;
    let launched = w
        .wait("alert: the mid-outage Snapshot's Job", Duration::from_secs(30), || async {
            Ok(w.jobs.since(ns, &before).into_iter().find(|j| j.op == "backup"))
        })
        .await?;
    w.say(format!("alert: mid-outage Snapshot launched {launched:?}"));
    // A second nudge (5 s spacing) re-probes: the counter rises, the phase holds.
    tokio::time::sleep(Duration::from_secs(6)).await;
    w.nudge(ns, "alert").await?;
    let c2 = w
        .wait("alert: the counter rises", Duration::from_secs(120), || async {
            Ok(op.metric(&failures).await.filter(|c| *c > c1))
        })
        .await?;
    let r = repos.get("alert").await?;
    w.say(format!("alert: probe failures {c1} -> {c2}, streak {}", streak(&r)));
    ensure!(streak(&r) >= 2 && streak(&r) >= r.spec.common.health.probe.failure_threshold, "past the threshold");
    assert_eq!(cond_status(&r, "Ready").0, "True", "still Ready=True");
    assert_eq!(cond_status(&r, "BackendReachable"), ("False", "BackendUnreachable"));
    assert_eq!(w.event_recorded(ns, "alert", "RepositoryProbeFailed").await?, 1, "one Event per failure episode");
    assert_eq!(w.events(ns, "alert", "RepositoryBreakerOpened").await?, 0, "Alert never opens the breaker");
    assert_eq!(op.metric(&series("kopiur_repository_breaker_trips_total", ns, "alert")).await, None);
    // Back up: the next probe heals the condition.
    proxy.set(Mode::Pass);
    tokio::time::sleep(Duration::from_secs(6)).await;
    w.nudge(ns, "alert").await?;
    watch
        .wait_since("alert: BackendReachable again", 0, Duration::from_secs(120), |r| {
            cond_status(r, "BackendReachable").0 == "True" && streak(r) == 0
        })
        .await?;
    let phases = watch.phases_since(0);
    ensure!(phases.iter().all(|p| p == "Ready"), "Alert mode left Ready during the outage: {phases:?}");
    w.say(format!("alert: done ({} versions, all Ready)", phases.len()));
    Ok(())
}

/// T14: `create.enabled: false` on an empty prefix ends Failed/RepositoryNotInitialized with
/// the exact message of docs/design/repository-breaker.md §3.4 (it names `spec.create.enabled: true`, never `allow-reinitialize`),
/// after one strict Job that may not create, and nothing written to storage.
async fn create_disabled(w: &World, ns: &str, watch: &PhaseWatch<Repository>) -> Result<Repository> {
    let failed =
        watch.wait_since("nocreate: Failed", 0, Duration::from_secs(240), |r| r.phase() == "Failed").await?.object;
    let phases = watch.transitions_since(0);
    ensure!(
        phases.iter().all(|p| p.is_empty() || p == "Pending" || p == "Initializing" || p == "Failed"),
        "nocreate: never Ready nor Degraded: {phases:?}"
    );
    assert_eq!(cond_status(&failed, "Ready"), ("False", "RepositoryNotInitialized"));
    assert_eq!(cond_status(&failed, "Stalled").0, "True");
    let msg = failed.condition("Ready").map(|c| c.message.clone()).unwrap_or_default();
    let want = format!(
        "no kopia repository exists at s3://{}/nocreate/ and spec.create.enabled is false; set spec.create.enabled: \
         true to create one, or point spec.backend at an existing repository",
        w.g.bucket()
    );
    assert_eq!(msg, want, "the RepositoryNotInitialized message of docs/design/repository-breaker.md §3.4");
    ensure!(!msg.contains("allow-reinitialize"), "no reinitialize advice: {msg}");
    assert!(unique_id(&failed).is_empty(), "nothing pinned");
    let jobs = w.jobs.in_ns(ns);
    ensure!(
        jobs.len() == 1 && jobs[0].kind == "strict" && jobs[0].gate == "DisabledBySpec",
        "one strict Job that may not create: {jobs:?}"
    );
    assert_eq!(w.objects("nocreate/").await?, 0, "0 creates: nothing written under the prefix");
    w.say("nocreate: Failed/RepositoryNotInitialized");
    Ok(failed)
}

/// The state T15's second half starts from.
struct PwFailed {
    before: BTreeSet<String>,
    pin: String,
    mark: usize,
    at: Instant,
}

/// T15, first half: a wrong password is terminal after one strict Job, never Degraded.
async fn wrong_password(w: &World, op: &Operator, ns: &str, watch: &PhaseWatch<Repository>) -> Result<PwFailed> {
    let repos = w.repos(ns);
    let pin = unique_id(&repos.get("pw").await?);
    let before = w.jobs.uids(ns);
    let mark = watch.mark().saturating_sub(1);
    w.set_password(ns, "battery staple").await?;
    let failed = watch
        .wait_since("pw: Failed after the password change", mark, Duration::from_secs(120), |r| r.phase() == "Failed")
        .await?;
    let phases = watch.transitions_since(mark);
    assert_eq!(phases, ["Ready", "Failed"], "an auth failure is not an outage");
    w.say("pw: Failed");
    let r = &failed.object;
    assert_eq!(cond_status(r, "Ready"), ("False", "AuthFailure"));
    assert_eq!(cond_status(r, "Stalled").0, "True");
    assert_ne!(cond_status(r, "Reconciling").0, "True");
    let jobs = w.jobs.since(ns, &before);
    ensure!(jobs.len() == 1 && jobs[0].kind == "strict", "exactly one strict connect Job, got {jobs:?}");
    assert_eq!(op.metric(&series("kopiur_repository_breaker_trips_total", ns, "pw")).await, None, "no trip");
    Ok(PwFailed { before, pin, mark: watch.mark().saturating_sub(1), at: failed.at })
}

/// T15, second half, once every other scenario is over (the leader handover included): no
/// retry loop over that whole window (every version of `pw` on the watch is Failed, and still
/// the one Job); fixing the Secret's value re-opens the gate through the Secret watch (≤ 10 s).
async fn password_fixed(w: &World, ns: &str, watch: &PhaseWatch<Repository>, f: PwFailed) -> Result<()> {
    let window = f.at.elapsed();
    let phases = watch.phases_since(f.mark);
    ensure!(phases.iter().all(|p| p == "Failed"), "pw: sticky Failed over {window:?}: {phases:?}");
    let jobs = w.jobs.since(ns, &f.before);
    ensure!(jobs.len() == 1, "pw: no retry loop over {window:?}: {jobs:?}");
    w.say(format!("pw: one Job and Failed throughout {window:?}"));
    let fixed_at = Utc::now();
    w.set_password(ns, PASSWORD).await?;
    let ready = w.wait_phase(ns, "pw", "Ready", Duration::from_secs(120)).await?;
    assert_eq!(unique_id(&ready), f.pin, "the same repository");
    let jobs = w.jobs.since(ns, &f.before);
    ensure!(jobs.len() == 2, "one more strict Job after the fix: {jobs:?}");
    let lag = (jobs[1].created - fixed_at).num_seconds();
    ensure!(lag <= 10, "the fix re-opened the gate {lag}s later (≤ 10 s)");
    w.say(format!("pw: Ready again ({lag}s after the fix)"));
    Ok(())
}

/// Wipe the repository's storage and nudge: Degraded, then Failed/RepositoryReinitializeBlocked
/// with nothing re-created. Returns the Failed object.
async fn wipe_until_blocked(w: &World, ns: &str, pin: &str) -> Result<Repository> {
    let repos = w.repos(ns);
    let wiped = w.g.wipe_bucket(w.g.bucket(), "wipe/").await?;
    ensure!(wiped > 0, "the repository had objects");
    w.nudge(ns, "wipe").await?;
    let seen = Mutex::new(Vec::<String>::new());
    let failed = w
        .wait("wipe: Failed", Duration::from_secs(180), || async {
            let r = repos.get("wipe").await?;
            let p = r.phase();
            let mut s = seen.lock().unwrap();
            if s.last() != Some(&p) {
                s.push(p.clone());
            }
            Ok((p == "Failed").then_some(r))
        })
        .await?;
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen, ["Ready", "Degraded", "Failed"], "phase sequence after the wipe");
    assert_eq!(cond_status(&failed, "Ready"), ("False", "RepositoryReinitializeBlocked"));
    assert_eq!(cond_status(&failed, "Stalled").0, "True");
    let msg = failed.condition("Ready").map(|c| c.message.clone()).unwrap_or_default();
    let ack = format!("kubectl annotate repository/wipe -n {ns} {}={pin} --overwrite", annotation::ALLOW_REINITIALIZE);
    ensure!(msg.contains(&ack), "the message names the ack command: {msg}");
    ensure!(!msg.contains("spec.create.enabled"), "no create.enabled advice: {msg}");
    assert_eq!(unique_id(&failed), pin, "the pin stands");
    Ok(failed)
}

/// T11–T13: a wiped repository is never re-created without the ack; the ack re-creates once
/// and expires by itself. Returns the Jobs seen once blocked the second time, for T11's "no
/// bootstrap Job afterwards" check at the end of the test.
async fn wiped_storage(w: &World, ns: &str) -> Result<BTreeSet<String>> {
    let repos = w.repos(ns);
    let pin1 = unique_id(&repos.get("wipe").await?);
    let before = w.jobs.uids(ns);
    wipe_until_blocked(w, ns, &pin1).await?;
    w.say("wipe: blocked");
    // A short absence window here (the ack follows); the second block's runs to the test's end.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(w.objects("wipe/").await?, 0, "storage not re-created");
    let jobs = w.jobs.since(ns, &before);
    let kinds: Vec<&str> = jobs.iter().map(|j| j.kind.as_str()).collect();
    assert_eq!(kinds, ["reverify", "strict"], "one probe, one strict confirmation: {jobs:?}");
    assert_eq!(jobs[1].gate, "PinnedOnceReady");
    assert_eq!(w.events(ns, "wipe", "RepositoryBreakerOpened").await?, 1);

    // The ack: exactly one strict Job that may create; a new id is pinned.
    let before = w.jobs.uids(ns);
    w.annotate(ns, "wipe", annotation::ALLOW_REINITIALIZE, &pin1).await?;
    let ready = w.wait_phase(ns, "wipe", "Ready", Duration::from_secs(120)).await?;
    let pin2 = unique_id(&ready);
    ensure!(!pin2.is_empty() && pin2 != pin1, "a new uniqueId is pinned: {pin1} -> {pin2}");
    assert_eq!(streak(&ready), 0);
    ensure!(w.objects("wipe/").await? > 0, "re-created");
    let jobs = w.jobs.since(ns, &before);
    ensure!(jobs.len() == 1 && jobs[0].gate == "AllowedViaReinitAck", "one ack'd strict Job: {jobs:?}");
    assert_eq!(w.event_recorded(ns, "wipe", "RepositoryReinitialized").await?, 1);
    w.say(format!("wipe: re-created {pin1} -> {pin2}"));

    // The annotation still names the old id: a second wipe ends blocked again, and the stale
    // ack is ignored with one InvalidReinitializeAck.
    tokio::time::sleep(Duration::from_secs(5)).await; // reverify spacing
    let before = w.jobs.uids(ns);
    wipe_until_blocked(w, ns, &pin2).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(w.objects("wipe/").await?, 0, "the stale ack re-created nothing");
    let jobs = w.jobs.since(ns, &before);
    ensure!(jobs.iter().all(|j| j.gate != "AllowedViaReinitAck"), "no create allowed: {jobs:?}");
    let r = repos.get("wipe").await?;
    assert_eq!(r.annotations().get(annotation::ALLOW_REINITIALIZE), Some(&pin1), "kopiur never edits the ack");
    let invalid = w
        .wait("wipe: InvalidReinitializeAck", Duration::from_secs(10), || async {
            let n = w.events(ns, "wipe", "InvalidReinitializeAck").await?;
            Ok((n > 0).then_some(n))
        })
        .await?;
    assert_eq!(invalid, 1, "once per value");
    w.say("wipe: stale ack ignored");
    Ok(w.jobs.uids(ns))
}

/// Issue 31 (audit 4.5): the pin outlives the status. A `uniqueId` cleared or rewritten in
/// the status is restored from the controller's ledger with one `RepositoryPinRestored` each;
/// the CR deleted and re-created (a GitOps prune and re-apply) is pinned before its first
/// connect and comes back Ready on the same repository with no Job that may create; deleted,
/// its storage wiped and re-created with `create.enabled`, it is never re-created: Failed
/// `RepositoryReinitializeBlocked` naming the old pin and the exact ack, nothing written. The ack
/// creates anew once, and the ledger follows (a further re-creation pins the new id).
async fn recreated(w: &World, ns: &str, op_ns: &str, direct: &str) -> Result<()> {
    use kopiur_controller::repository::pins;
    let repos = w.repos(ns);
    let pin = unique_id(&repos.get("re").await?);
    ensure!(!pin.is_empty(), "re: pinned once Ready");
    let restored = |want: String| async move {
        let repos = w.repos(ns);
        w.wait(&format!("re: uniqueId back to {want}"), Duration::from_secs(30), || async {
            Ok((unique_id(&repos.get("re").await?) == want).then_some(()))
        })
        .await
    };
    // A status that lost its pin, then one rewritten to another repository's id.
    repos.patch_status("re", &PatchParams::default(), &Patch::Merge(&json!({"status": {"uniqueId": null}}))).await?;
    restored(pin.clone()).await?;
    let forged = "0123456789abcdef0123456789abcdef";
    repos.patch_status("re", &PatchParams::default(), &Patch::Merge(&json!({"status": {"uniqueId": forged}}))).await?;
    restored(pin.clone()).await?;
    let n = w
        .wait("re: two RepositoryPinRestored", Duration::from_secs(10), || async {
            let n = w.events(ns, "re", pins::EVENT_RESTORED).await?;
            Ok((n >= 2).then_some(n))
        })
        .await?;
    assert_eq!(n, 2, "one Event per restore");
    ensure!(repos.get("re").await?.phase() == "Ready", "re stays Ready through a restored pin");
    w.say(format!("re: a cleared and a forged uniqueId restored to {pin}"));

    let recreate = || async {
        repos.delete("re", &kube::api::DeleteParams::foreground()).await?;
        w.wait("re: deleted", Duration::from_secs(60), || async {
            Ok(repos.get_opt("re").await?.is_none().then_some(()))
        })
        .await?;
        w.create_repo(ns, "re", direct, "recreate/", Value::Null).await
    };
    // Deleted and re-created over intact storage: the same repository, no create allowed.
    let before = w.jobs.uids(ns);
    recreate().await?;
    let r = w.wait_phase(ns, "re", "Ready", Duration::from_secs(120)).await?;
    assert_eq!(unique_id(&r), pin, "the re-created CR pins the recorded id");
    let jobs = w.jobs.since(ns, &before);
    ensure!(
        !jobs.is_empty() && jobs.iter().all(|j| j.gate.is_empty() || j.gate == "PinnedOnceReady"),
        "no Job of the re-created CR may create: {jobs:?}"
    );
    w.say(format!(
        "re: re-created over intact storage, Ready on {pin}; gates {:?}",
        jobs.iter().map(|j| &j.gate).collect::<Vec<_>>()
    ));

    // Deleted, storage wiped, re-created with create enabled: blocked, nothing written.
    repos.delete("re", &kube::api::DeleteParams::foreground()).await?;
    w.wait("re: deleted", Duration::from_secs(60), || async { Ok(repos.get_opt("re").await?.is_none().then_some(())) })
        .await?;
    ensure!(w.g.wipe_bucket(w.g.bucket(), "recreate/").await? > 0, "the repository had objects");
    let before = w.jobs.uids(ns);
    w.create_repo(ns, "re", direct, "recreate/", Value::Null).await?;
    let failed = w.wait_phase(ns, "re", "Failed", Duration::from_secs(120)).await?;
    assert_eq!(cond_status(&failed, "Ready"), ("False", "RepositoryReinitializeBlocked"));
    let message = failed.condition("Ready").map(|c| c.message.clone()).unwrap_or_default();
    let ack = format!("kubectl annotate repository/re -n {ns} {}={pin} --overwrite", annotation::ALLOW_REINITIALIZE);
    ensure!(message.contains(&ack), "the exact ack is named: {message}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(w.objects("recreate/").await?, 0, "a re-created CR over wiped storage created nothing");
    let jobs = w.jobs.since(ns, &before);
    ensure!(jobs.iter().all(|j| j.gate.is_empty() || j.gate == "PinnedOnceReady"), "no create allowed: {jobs:?}");
    w.say("re: re-created over wiped storage: blocked, nothing written");

    // The human's ack: created once; the ledger now holds the new id.
    w.annotate(ns, "re", annotation::ALLOW_REINITIALIZE, &pin).await?;
    let pin2 = unique_id(&w.wait_phase(ns, "re", "Ready", Duration::from_secs(120)).await?);
    ensure!(!pin2.is_empty() && pin2 != pin, "a new id: {pin} -> {pin2}");
    let ledger =
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(w.client.clone(), op_ns).get(pins::LEDGER).await?;
    let loc = format!("s3://{}/recreate/@http://{direct}", w.g.bucket());
    let entry = ledger.data.unwrap_or_default().get(&pins::key(&loc)).cloned().unwrap_or_default();
    ensure!(entry.contains(&pin2) && entry.contains(&loc), "the ledger follows the ack: {entry}");
    w.say(format!("re: acked, re-created {pin} -> {pin2}; the ledger records {pin2}"));
    Ok(())
}

/// A wrong S3 secret key: the storage denies access; the repository never turns Ready and says
/// why (`AccessDenied`), and the wrong key is among the values the end-of-test sweep looks for.
async fn access_denied(w: &World, ns: &str) -> Result<()> {
    let repos = w.repos(ns);
    let r = w
        .wait("denied: refused by the storage", Duration::from_secs(180), || async {
            let r = repos.get("denied").await?;
            let said = serde_json::to_string(&r.status)?.contains("AccessDenied");
            Ok((said && matches!(r.phase().as_str(), "Failed" | "Degraded")).then_some(r))
        })
        .await?;
    ensure!(unique_id(&r).is_empty(), "denied: nothing pinned");
    assert_eq!(w.objects("denied/").await?, 0, "denied: nothing written");
    w.say(format!("denied: {} / {:?}", r.phase(), r.condition("Ready").map(|c| (c.reason.clone(), c.message.clone()))));
    Ok(())
}

/// T16: an outage during a re-bootstrap opens the breaker from the strict connect.
async fn outage_opens(w: &World, op: &Operator, ns: &str, proxy: &FaultProxy) -> Result<()> {
    proxy.set(Mode::Refuse);
    w.bump_spec(ns, "out", 2).await?;
    let r = w.wait_phase(ns, "out", "Degraded", Duration::from_secs(120)).await?;
    assert_eq!(cond_status(&r, "Ready"), ("False", "BreakerOpen"));
    assert_eq!(cond_status(&r, "Reconciling").0, "True");
    let sr = strict_retry(&r).context("strictRetry stamped")?;
    assert_eq!((sr.attempt, sr.holdoff_seconds), (1, BASE));
    let trips = format!("{},probe_kind=\"strict\"}}", series("kopiur_repository_breaker_trips_total", ns, "out"));
    let n =
        w.wait("out: strict trip counted", Duration::from_secs(10), || async { Ok(op.metric(&trips).await) }).await?;
    assert_eq!(n, 1.0);
    w.say("out: Degraded from a strict connect");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repository_faults_end_to_end() -> Result<()> {
    let started = Instant::now();
    let Stack { client, garage: g, op_ns, env, dir: _dir } = Stack::start().await?;
    let env = &env;
    let _guard = env.log_guard();
    let alert_proxy = FaultProxy::start(g.s3_addr()).await?;
    let out_proxy = FaultProxy::start(g.s3_addr()).await?;
    let direct = g.s3_addr().to_string();

    // Two replicas of one operator: a leads, b stands by.
    let mut a = Operator::start_replica(env, &op_ns, "a", &KNOBS).await?;
    let mut w = World { client: client.clone(), g, jobs: JobLog::start(client.clone()), logs: vec![], started };
    w.logs.push(a.log_path().to_path_buf());
    w.wait("replica a leads", Duration::from_secs(60), || async { Ok(a.is_leader().await.then_some(())) }).await?;
    let mut b = Operator::start_replica(env, &op_ns, "b", &KNOBS).await?;
    w.logs.push(b.log_path().to_path_buf());
    w.say("replica a leads; b started");

    let [ns_alert, ns_pw, ns_wipe, ns_out, ns_idle, ns_nocreate, ns_re, ns_denied] = [
        env.namespace("alert").await?,
        env.namespace("pw").await?,
        env.namespace("wipe").await?,
        env.namespace("out").await?,
        env.namespace("idle").await?,
        env.namespace("nocreate").await?,
        env.namespace("recreate").await?,
        env.namespace("denied").await?,
    ];
    for ns in [&ns_alert, &ns_pw, &ns_wipe, &ns_out, &ns_idle, &ns_nocreate, &ns_re] {
        w.create_secret(ns, PASSWORD).await?;
    }
    let nocreate_watch = PhaseWatch::start(w.repos(&ns_nocreate), "nocreate", Repository::phase);
    let pw_watch = PhaseWatch::start(w.repos(&ns_pw), "pw", Repository::phase);
    let alert_health = json!({"probe": {"onFailure": "Alert", "failureThreshold": 1}});
    w.create_repo(&ns_alert, "alert", &alert_proxy.endpoint(), "alert/", alert_health).await?;
    w.create_repo(&ns_pw, "pw", &direct, "pw/", Value::Null).await?;
    w.create_repo(&ns_wipe, "wipe", &direct, "wipe/", json!({"probe": {"failureThreshold": 1}})).await?;
    w.create_repo(&ns_out, "out", &out_proxy.endpoint(), "out/", Value::Null).await?;
    w.create_repo(&ns_idle, "idle", &direct, "idle/", Value::Null).await?;
    w.create_repo(&ns_re, "re", &direct, "recreate/", Value::Null).await?;
    w.create_secret_with_key(&ns_denied, PASSWORD, WRONG_S3_KEY).await?;
    w.create_repo(&ns_denied, "denied", &direct, "denied/", Value::Null).await?;
    // T14's repository: create disabled from its first version, on an empty prefix.
    let nocreate: Repository = serde_json::from_value(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
        "metadata": {"name": "nocreate", "namespace": ns_nocreate},
        "spec": {"backend": {"s3": {"bucket": w.g.bucket(), "endpoint": format!("http://{direct}"),
                                    "region": w.g.region(), "prefix": "nocreate/"}},
                 "encryption": {"passwordSecretRef": {"name": "kopia"}}, "create": {"enabled": false}}
    }))?;
    w.repos(&ns_nocreate).create(&PostParams::default(), &nocreate).await?;
    backup_source(&w, &env.node_state_dir(), &ns_alert, "alert").await?;
    let t = Duration::from_secs(240);
    let scenarios_done = AtomicBool::new(false);

    // The idle repository: once its bootstrap Job is cleaned up, nothing writes it again, for
    // at least two minutes and until every other scenario (the leader handover included) ends.
    let idle_repos = w.repos(&ns_idle);
    let idle_jobs: Api<Job> = Api::namespaced(client.clone(), &ns_idle);
    let idle_window = async {
        w.wait_phase(&ns_idle, "idle", "Ready", t).await?;
        w.wait("idle: bootstrap Job cleaned up", Duration::from_secs(60), || async {
            Ok(idle_jobs.list(&Default::default()).await?.items.is_empty().then_some(()))
        })
        .await?;
        // Settled: the maintenance projection has reported on it too (a one-time write).
        w.wait("idle: MaintenanceConfigured reported", Duration::from_secs(60), || async {
            let r = idle_repos.get("idle").await?;
            let has =
                r.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "MaintenanceConfigured"));
            Ok(has.then_some(()))
        })
        .await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let idle0 = idle_repos.get("idle").await?;
        let idle_since = Instant::now();
        w.say("idle: window starts");
        let rv0 = idle0.resource_version();
        let mut versions = vec![rv0.clone()];
        while idle_since.elapsed() < Duration::from_secs(121) || !scenarios_done.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let r = idle_repos.get("idle").await?;
            if versions.last() != Some(&r.resource_version()) {
                versions.push(r.resource_version());
            }
        }
        let r = idle_repos.get("idle").await?;
        ensure!(
            r.resource_version() == rv0,
            "a Ready repository with nothing changing was written over {:?} (resourceVersions {versions:?})\n\
             managedFields: {:#?}\nbefore: {:#?}\nafter: {:#?}",
            idle_since.elapsed(),
            r.metadata.managed_fields,
            idle0.status,
            r.status
        );
        assert_eq!(r.phase(), "Ready");
        // The window saw reconciles of it: b's takeover reconciled every repository.
        let b_reconciles = b.metric("kopiur_controller_reconciliations_total{kind=\"Repository\"}").await;
        ensure!(b_reconciles >= Some(5.0), "b reconciled every repository: {b_reconciles:?}");
        w.say(format!("idle: zero writes over {:?}", idle_since.elapsed()));
        Ok::<_, anyhow::Error>(())
    };

    let scenarios = async {
        tokio::try_join!(
            w.wait_phase(&ns_alert, "alert", "Ready", t),
            w.wait_phase(&ns_pw, "pw", "Ready", t),
            w.wait_phase(&ns_wipe, "wipe", "Ready", t),
            w.wait_phase(&ns_out, "out", "Ready", t),
            w.wait_phase(&ns_re, "re", "Ready", t),
        )?;
        w.say("five scenario repositories Ready");

        // Phase 1, concurrently on separate namespaces, prefixes and proxies.
        let ((), pw_failed, wipe_blocked, (), nocreate_failed, (), ()) = tokio::try_join!(
            Box::pin(alert_mode(&w, &a, &ns_alert, &alert_proxy)),
            Box::pin(wrong_password(&w, &a, &ns_pw, &pw_watch)),
            Box::pin(wiped_storage(&w, &ns_wipe)),
            Box::pin(outage_opens(&w, &a, &ns_out, &out_proxy)),
            Box::pin(create_disabled(&w, &ns_nocreate, &nocreate_watch)),
            Box::pin(recreated(&w, &ns_re, &op_ns, &direct)),
            Box::pin(access_denied(&w, &ns_denied)),
        )?;
        let nocreate_mark = nocreate_watch.mark().saturating_sub(1);
        w.say("phase 1 done");

        // Phase 2: kill the leader mid-outage, right after a strict failure stamped a holdoff
        // at the cap (a spec change runs one strict connect at once, even while open).
        let repos = w.repos(&ns_out);
        let mut threshold = 3;
        let (stamped, next_at) = loop {
            threshold += 1;
            let generation = w.bump_spec(&ns_out, "out", threshold).await?;
            let r = w
                .wait("out: the strict connect folded", Duration::from_secs(120), || async {
                    let r = repos.get("out").await?;
                    ensure!(r.phase() == "Degraded", "held Degraded: {:?}", r.status);
                    let st = r.status.as_ref();
                    Ok((st.and_then(|s| s.observed_generation) == Some(generation)).then_some(r))
                })
                .await?;
            let sr = strict_retry(&r).context("strictRetry")?;
            if sr.holdoff_seconds == CAP {
                let at = sr.next_attempt_at.context("nextAttemptAt")?;
                break (sr, at);
            }
        };
        let before = w.jobs.uids(&ns_out);
        a.kill();
        let killed_at = Utc::now();
        w.say(format!("killed leader a; stamped {stamped:?}"));
        ensure!(next_at > killed_at + chrono::Duration::seconds(25), "kill inside the holdoff");

        w.wait("b takes the Lease", Duration::from_secs(60), || async { Ok(b.is_leader().await.then_some(())) })
            .await?;
        let lease = Api::<Lease>::namespaced(client.clone(), &op_ns).get("kopiur-leader").await?;
        let spec = lease.spec.unwrap_or_default();
        assert_eq!(spec.holder_identity, b.identity, "the Lease names b");
        ensure!(spec.lease_transitions.unwrap_or(0) >= 1, "a transition is recorded: {spec:?}");
        let took_over = Utc::now();
        w.say(format!("b leads, {}s after the kill", (took_over - killed_at).num_seconds()));
        ensure!(took_over < next_at, "b took over inside the stamped holdoff");

        // b resumes the stamped schedule: nothing before nextAttemptAt, then one strict retry
        // whose failure continues the sequence (attempt + 1, holdoff not reset to the base).
        let r = repos.get("out").await?;
        assert_eq!(strict_retry(&r).as_ref(), Some(&stamped), "the takeover keeps the stamp");
        let next = w
            .wait("out: b's strict retry folded", Duration::from_secs(120), || async {
                let r = repos.get("out").await?;
                ensure!(r.phase() == "Degraded", "held Degraded: {:?}", r.status);
                Ok(strict_retry(&r).filter(|s| s.attempt > stamped.attempt))
            })
            .await?;
        let jobs = w.jobs.since(&ns_out, &before);
        ensure!(!jobs.is_empty(), "b launched the retry");
        let first = jobs.iter().map(|j| j.created).min().unwrap();
        ensure!(
            first >= next_at - chrono::Duration::seconds(1),
            "b launched at {first}, before the stamped nextAttemptAt {next_at}"
        );
        assert_eq!(jobs.len(), 1, "one retry: {jobs:?}");
        assert_eq!((next.attempt, next.holdoff_seconds), (stamped.attempt + 1, CAP), "no reset to the base");
        assert_eq!(w.events(&ns_out, "out", "RepositoryBreakerOpened").await?, 1, "no second trip");
        w.say(format!("out: b kept the holdoff; next {next:?}"));

        // Reconciling continues under b: the backend returns and a spec change closes the
        // breaker at once.
        out_proxy.set(Mode::Pass);
        w.bump_spec(&ns_out, "out", 2).await?;
        let healed = w.wait_phase(&ns_out, "out", "Ready", Duration::from_secs(120)).await?;
        assert_eq!(streak(&healed), 0);
        assert!(strict_retry(&healed).is_none());
        let closed = w.event_recorded(&ns_out, "out", "RepositoryBreakerClosed").await?;
        assert_eq!(closed, 1, "exactly one RepositoryBreakerClosed");
        let gauge = format!("{}}}", series("kopiur_repository_consecutive_backend_failures", &ns_out, "out"));
        let g = w.wait("b's gauge", Duration::from_secs(10), || async { Ok(b.metric(&gauge).await) }).await?;
        assert_eq!(g, 0.0);
        w.say("out: healed under b");

        // Absence windows that ran through phase 2 and the handover, watched, not slept:
        // T11, a blocked wiped repository launched nothing more and re-created nothing;
        // T14, the create-disabled repository stayed Failed after its one Job.
        let late = w.jobs.since(&ns_wipe, &wipe_blocked);
        ensure!(late.is_empty(), "wipe: Jobs after the block: {late:?}");
        assert_eq!(w.objects("wipe/").await?, 0, "wipe: nothing re-created");
        assert_eq!(w.repos(&ns_wipe).get("wipe").await?.phase(), "Failed", "wipe: sticky");
        let phases = nocreate_watch.phases_since(nocreate_mark);
        ensure!(phases.iter().all(|p| p == "Failed"), "nocreate: sticky Failed: {phases:?}");
        let jobs = w.jobs.in_ns(&ns_nocreate);
        ensure!(jobs.len() == 1, "nocreate: no retry: {jobs:?}");
        assert_eq!(w.objects("nocreate/").await?, 0, "nocreate: 0 creates");
        assert_eq!(unique_id(&nocreate_failed), "");
        w.say("wipe and nocreate: nothing launched to the end");
        // T15's second half.
        Box::pin(password_fixed(&w, &ns_pw, &pw_watch, pw_failed)).await?;
        scenarios_done.store(true, Ordering::Relaxed);
        Ok::<_, anyhow::Error>(())
    };
    let res = tokio::try_join!(Box::pin(idle_window), Box::pin(scenarios));
    if let Err(e) = &res {
        eprintln!("{e:#}");
    }
    res?;
    // After wrong-password, access-denied and outage runs (and a leader kill): no fixture secret
    // (the passwords, right and wrong, the S3 secret key) in any object, Event, log or /metrics.
    let mut extra = vec![("b's /metrics".to_string(), b.metrics().await?)];
    for (who, op) in [("a", &a), ("b", &b)] {
        extra.push((format!("{who}'s log"), std::fs::read_to_string(op.log_path())?));
    }
    let searched =
        support::sweep_for_secrets(&client, extra, &[PASSWORD, "battery staple", w.g.secret_key(), WRONG_S3_KEY])
            .await?;
    w.say(format!("secrets sweep: {searched} documents, no fixture secret"));
    // No graceful shutdown to wait for: the test is over.
    b.kill();
    w.say("done");
    Ok(())
}
