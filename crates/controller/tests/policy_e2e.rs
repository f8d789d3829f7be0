//! SnapshotPolicy conditions and the `pruned-by` stamp end to end (docs/design/api-contract.md §6.1, §6.4,
//! docs/design/repository-breaker.md §4, docs/design/mass-deletion.md §6.1, docs/design/pipeline.md §7.2), on one private control plane with Garage, real kopia and the
//! operator; every state is read from a watch (every version the apiserver reports):
//!
//! 1. **Ready reasons and the trio** (docs/design/api-contract.md §6.4): a policy on a Ready Repository is `Ready=True /
//!    Ready`, `RepositoriesReady=True / RepositoryReady`; one naming a Repository that does not
//!    exist is `Stalled / RepositoryNotFound`; one on a ClusterRepository that refuses its
//!    namespace is `Stalled / NamespaceNotAllowed` (not `RepositoryNotReady`), and admitting
//!    the namespace lifts it within 10 s (the ClusterRepository watch).
//! 2. **The repository watch** (docs/design/repository-breaker.md §4 G3): the policy naming nothing follows its
//!    Repository once it is created: `Ready=True` within 10 s of the Repository's Ready version,
//!    and back to `RepositoryNotFound` within 10 s of its deletion (the safety requeue is 300 s,
//!    so only the Repository → SnapshotPolicy mapping can do it).
//! 3. **The compressor R check** (docs/design/api-contract.md §6.1): a policy naming a compressor kopia cannot write with is
//!    `Stalled / InvalidSpec` with the list of names; its Snapshot parks `Stalled / InvalidSpec`
//!    and gets no Job; fixing the name lifts the policy's stall and the run's Job follows.
//! 4. **`replaced-run` and a failed stamp** (S6-1, S6-3): a ValidatingAdmissionPolicy installed
//!    by the test refuses every `pruned-by` stamp in the namespace. At the next slot of a
//!    `Replace` schedule whose runOnCreate child is still active, and in a retention pass over
//!    two Succeeded Snapshots with real kopia data (`keepLatest: 1`), the stamp is refused (the
//!    reconcile's `KubeApiError` Warning carries the policy's message): neither Snapshot is
//!    deleted, no new child is created, and kopia deletes nothing. Once the admission policy is
//!    removed, the replaced child is stamped `replaced-run` before its DELETE (a version with
//!    the stamp and no deletionTimestamp precedes its deletion) and the next child is created;
//!    the older seeded Snapshot is stamped `retention`, deleted, and its kopia snapshot deleted
//!    by a batch Job.
mod support;
use support::phase_watch;
use support::recorder;

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use k8s_openapi::api::events::v1::Event;
use kopiur_api::names::annotation;
use kopiur_api::shared::status::Condition;
use kopiur_api::{ClusterRepository, Repository, Snapshot, SnapshotPolicy, SnapshotSchedule};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use phase_watch::JobWatch;
use recorder::{Recorder, Seen};
use serde_json::{Value, json};
use support::status::{StatusExt, cond, is, one_true, summary};
use support::{Harness, successful_deletes};

/// The admission policy's message (the reconcile's Warning carries it).
const REFUSAL: &str = "policy_e2e refuses every pruned-by stamp";
const VAP: &str = "policy-e2e-refuse-stamps";

fn trio(cs: &[Condition]) -> String {
    summary(cs, &["Ready", "Reconciling", "Stalled", "RepositoriesReady"])
}

/// Stalled with `reason` as the spec's trio has it: Ready False and Stalled True with that
/// reason, Reconciling False.
fn stalled_with(cs: &[Condition], reason: &str) -> bool {
    cond(cs, "Ready").is_some_and(|c| c.status == "False" && c.reason == reason)
        && cond(cs, "Stalled").is_some_and(|c| c.status == "True" && c.reason == reason)
        && is(cs, "Reconciling", "False")
}

fn stamp(s: &Snapshot) -> Option<&str> {
    s.metadata.annotations.as_ref()?.get(annotation::PRUNED_BY).map(String::as_str)
}

/// The latest recorded version of the policy `name` satisfying `pred`, from `since` on.
fn policy_seen(
    log: &[Seen<SnapshotPolicy>],
    name: &str,
    since: Instant,
    pred: impl Fn(&[Condition]) -> bool,
) -> Option<Seen<SnapshotPolicy>> {
    log.iter().filter(|s| s.at >= since && s.name() == name && !s.deleted).find(|s| pred(s.obj.conditions())).cloned()
}

fn policy(ns: &str, name: &str, spec: Value) -> Result<SnapshotPolicy> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotPolicy",
        "metadata": {"name": name, "namespace": ns}, "spec": spec,
    }))?)
}

/// Succeeded Snapshots of policy `policy` pinned to `repo`, with real kopia ids, an end time
/// each (`ends[i]` seconds ago, so retention can order them) and the snapshot-cleanup finalizer.
async fn seed_policy_snapshots(
    client: &Client,
    ns: &str,
    repo: &Repository,
    policy: &str,
    items: &[(String, String, i64)],
) -> Result<()> {
    let api: Api<Snapshot> = Api::namespaced(client.clone(), ns);
    for (name, kopia_id, ago) in items {
        let obj: Snapshot = serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": name, "namespace": ns, "finalizers": [support::FINALIZER]},
            "spec": {"policyRef": {"name": policy}, "repository": {"name": repo.name_any()}, "deletionPolicy": "Delete"},
        }))?;
        let created = api.create(&PostParams::default(), &obj).await.with_context(|| format!("creating {name}"))?;
        let end = chrono::Utc::now() - chrono::Duration::seconds(*ago);
        let status = json!({"status": {
            "phase": "Succeeded",
            "origin": "manual",
            "observedGeneration": created.metadata.generation,
            "snapshot": {"kopiaSnapshotID": kopia_id},
            "timing": {"startTime": support::rfc3339(end - chrono::Duration::seconds(5)), "endTime": support::rfc3339(end)},
            "resolved": {
                "repository": {"kind": "Repository", "namespace": ns, "name": repo.name_any(), "uid": repo.uid()},
                "deletionPolicy": "Delete",
                // The source a real run records; the batch delete checks the manifest against it.
                "identity": support::seed::recorded_identity(kopia_id),
            },
            "completionRecordedAt": support::rfc3339(end),
        }});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .with_context(|| format!("writing the status of {name}"))?;
    }
    Ok(())
}

/// Installs a ValidatingAdmissionPolicy refusing every CREATE or UPDATE of a Snapshot in `ns`
/// that carries `pruned-by` (the controller's stamp included), and waits until the apiserver
/// enforces it (policies compile asynchronously): a dry-run CREATE carrying it is refused.
async fn refuse_stamps(client: &Client, ns: &str) -> Result<()> {
    let vap: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": VAP},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["kopiur.home-operations.com"], "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE"], "resources": ["snapshots"]
            }]},
            "validations": [{
                "expression": format!("!has(object.metadata.annotations) || !('{}' in object.metadata.annotations)", annotation::PRUNED_BY),
                "message": REFUSAL
            }]
        }
    }))?;
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": VAP},
        "spec": {
            "policyName": VAP, "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}
        }
    }))?;
    let pp = PostParams::default();
    Api::<ValidatingAdmissionPolicy>::all(client.clone()).create(&pp, &vap).await?;
    Api::<ValidatingAdmissionPolicyBinding>::all(client.clone()).create(&pp, &binding).await?;
    let started = Instant::now();
    loop {
        match probe(client, ns).await {
            Err(kube::Error::Api(s)) if s.message.contains(REFUSAL) => return Ok(()),
            Err(e) => bail!("the admission probe failed unexpectedly: {e}"),
            Ok(_) if started.elapsed() > Duration::from_secs(60) => {
                bail!("the admission policy is not enforced after 60 s")
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// Removes the policy and its binding and waits until the probe is admitted again.
async fn allow_stamps(client: &Client, ns: &str) -> Result<()> {
    let dp = DeleteParams::default();
    Api::<ValidatingAdmissionPolicyBinding>::all(client.clone()).delete(VAP, &dp).await?;
    Api::<ValidatingAdmissionPolicy>::all(client.clone()).delete(VAP, &dp).await?;
    let started = Instant::now();
    loop {
        match probe(client, ns).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.message.contains(REFUSAL) && started.elapsed() < Duration::from_secs(60) => {
                tokio::time::sleep(Duration::from_millis(250)).await
            }
            Err(e) => bail!("the admission probe is still refused or failed: {e}"),
        }
    }
}

async fn probe(client: &Client, ns: &str) -> kube::Result<Snapshot> {
    let probe: Snapshot = serde_json::from_value(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
        "metadata": {"name": "admission-probe", "annotations": {annotation::PRUNED_BY: "retention"}},
        "spec": {"policyRef": {"name": "probe"}}
    }))
    .expect("probe");
    Api::<Snapshot>::namespaced(client.clone(), ns)
        .create(&PostParams { dry_run: true, ..Default::default() }, &probe)
        .await
}

/// A `KubeApiError` Warning on `name` whose note carries the admission policy's refusal.
fn refusal_event(log: &[Seen<Event>], name: &str) -> Option<String> {
    log.iter()
        .filter(|e| !e.deleted)
        .find(|e| {
            e.obj.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.obj.reason.as_deref() == Some("KubeApiError")
                && e.obj.note.as_deref().is_some_and(|n| n.contains(REFUSAL))
        })
        .and_then(|e| e.obj.note.clone())
}

/// Every recorded version of Snapshot `name`: its stamp and whether it was deleting (a
/// deletionTimestamp, or the DELETED event).
fn versions(log: &[Seen<Snapshot>], name: &str) -> Vec<(Option<String>, bool)> {
    log.iter()
        .filter(|s| s.name() == name)
        .map(|s| (stamp(&s.obj).map(str::to_string), s.deleted || s.obj.metadata.deletion_timestamp.is_some()))
        .collect()
}

/// The stamp precedes the DELETE: the first version carrying `value` has no deletionTimestamp,
/// and every deleting version carries it.
fn stamped_before_delete(log: &[Seen<Snapshot>], name: &str, value: &str) -> Result<bool> {
    let v = versions(log, name);
    let Some(first) = v.iter().position(|(s, _)| s.as_deref() == Some(value)) else { return Ok(false) };
    ensure!(!v[first].1, "{name}: the first version stamped {value} is already deleting: {v:?}");
    for (s, deleting) in &v {
        ensure!(
            !deleting || s.as_deref() == Some(value),
            "{name}: a deleting version without the stamp {value}: {v:?}"
        );
    }
    Ok(v.iter().any(|(_, d)| *d))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_reasons_repository_watch_and_stamps() -> Result<()> {
    let started = Instant::now();
    let at = || started.elapsed().as_secs_f64();
    let mut h = Harness::start().await?;
    h.start_operator().await?;
    let _guard = h.env.log_guard();
    let log = h.log();
    let jobs = JobWatch::start(h.client.clone());
    let ns = h.env.namespace("pol").await?;
    let client = h.client.clone();
    let pp = PostParams::default();
    let kopia = h.kopia_repo("pol/").await?;
    let ids = kopia.seed(&["old".to_string(), "new".to_string()]).await?;
    h.repository(&ns, "r", "pol/", json!({})).await?;
    let policies: Api<SnapshotPolicy> = Api::namespaced(client.clone(), &ns);
    let snaps: Api<Snapshot> = Api::namespaced(client.clone(), &ns);
    let prec = Recorder::start(policies.clone(), watcher::Config::default()).await?;
    let srec = Recorder::start(snaps.clone(), watcher::Config::default()).await?;
    let rrec = Recorder::start(Api::<Repository>::namespaced(client.clone(), &ns), watcher::Config::default()).await?;
    let erec = Recorder::start(Api::<Event>::namespaced(client.clone(), &ns), watcher::Config::default()).await?;

    // ---- 4 (set up first, so the wait for the next cron slot overlaps scenarios 1-3).
    refuse_stamps(&client, &ns).await?;
    println!("[{:5.1}s] admission policy refusing pruned-by stamps enforced in {ns}", at());
    // A Replace schedule whose runOnCreate child stays active (its PVC does not exist).
    policies
        .create(
            &pp,
            &policy(
                &ns,
                "rp",
                json!({"repository": {"name": "r"}, "copyMethod": "Direct", "sources": [{"pvc": {"name": "absent"}}]}),
            )?,
        )
        .await?;
    let sched: SnapshotSchedule = serde_json::from_value(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotSchedule",
        "metadata": {"name": "rs", "namespace": ns},
        "spec": {"policyRef": {"name": "rp"},
                 "schedule": {"cron": "* * * * *", "jitter": "0s", "concurrencyPolicy": "Replace", "runOnCreate": true}}
    }))?;
    Api::<SnapshotSchedule>::namespaced(client.clone(), &ns).create(&pp, &sched).await?;
    let children = |log: &[Seen<Snapshot>]| -> Vec<String> {
        let mut v: Vec<String> = log
            .iter()
            .filter(|s| s.obj.owner_references().iter().any(|o| o.kind == "SnapshotSchedule" && o.name == "rs"))
            .map(|s| s.name())
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let first = srec
        .wait("the runOnCreate child, Pending", Duration::from_secs(30), &log, |l| {
            Ok(l.iter()
                .find(|s| {
                    children(std::slice::from_ref(s)).len() == 1
                        && s.obj.status.as_ref().and_then(|x| x.phase.as_ref()).map(|p| p.as_str()) == Some("Pending")
                })
                .map(|s| s.name()))
        })
        .await?;
    println!("[{:5.1}s] Replace schedule rs: child {first} parked Pending", at());

    h.wait_repository_ready(&ns, "r", Duration::from_secs(120)).await?;
    let repo = Api::<Repository>::namespaced(client.clone(), &ns).get("r").await?;
    println!("[{:5.1}s] Repository {ns}/r Ready", at());
    // Retention over two Succeeded Snapshots with real kopia data: keepLast 1 prunes "old".
    seed_policy_snapshots(
        &client,
        &ns,
        &repo,
        "ret",
        &[("old".into(), ids["old"].clone(), 7200), ("new".into(), ids["new"].clone(), 60)],
    )
    .await?;
    policies
        .create(
            &pp,
            &policy(&ns, "ret", json!({"repository": {"name": "r"}, "copyMethod": "Direct", "sources": [{"pvc": {"name": "absent"}}], "retention": {"keepLatest": 1}}))?,
        )
        .await?;

    // ---- 1. Ready reasons and the trio.
    let t = Duration::from_secs(30);
    let since = Instant::now();
    let scenario1 = since;
    policies
        .create(
            &pp,
            &policy(
                &ns,
                "good",
                json!({"repository": {"name": "r"}, "copyMethod": "Direct", "sources": [{"pvc": {"name": "data"}}]}),
            )?,
        )
        .await?;
    policies
        .create(
            &pp,
            &policy(
                &ns,
                "late",
                json!({"repository": {"name": "late"}, "copyMethod": "Direct", "sources": [{"pvc": {"name": "data"}}]}),
            )?,
        )
        .await?;
    kopia_repo_and_cluster(&h, &ns).await?;
    policies
        .create(
            &pp,
            &policy(&ns, "tenant", json!({"repository": {"kind": "ClusterRepository", "name": "pol-shared"}, "copyMethod": "Direct", "sources": [{"pvc": {"name": "data"}}]}))?,
        )
        .await?;
    let good = prec
        .wait("good Ready", t, &log, |l| {
            Ok(policy_seen(l, "good", since, |cs| {
                cond(cs, "Ready").is_some_and(|c| c.status == "True" && c.reason == "Ready")
                    && cond(cs, "RepositoriesReady")
                        .is_some_and(|c| c.status == "True" && c.reason == "RepositoryReady")
            }))
        })
        .await?;
    ensure!(one_true(good.obj.conditions()), "good: {}", trio(good.obj.conditions()));
    let late = prec
        .wait("late Stalled RepositoryNotFound", t, &log, |l| {
            Ok(policy_seen(l, "late", since, |cs| stalled_with(cs, "RepositoryNotFound")))
        })
        .await?;
    let cs = late.obj.conditions();
    ensure!(
        cond(&cs, "RepositoriesReady").is_some_and(|c| c.status == "False" && c.reason == "RepositoryNotReady"),
        "late: {}",
        trio(&cs)
    );
    let msg = cond(&cs, "Ready").map(|c| c.message.clone()).unwrap_or_default();
    ensure!(msg.contains(&format!("repository {ns}/late does not exist")), "late's message: {msg}");
    let tenant = prec
        .wait("tenant Stalled NamespaceNotAllowed", t, &log, |l| {
            Ok(policy_seen(l, "tenant", since, |cs| stalled_with(cs, "NamespaceNotAllowed")))
        })
        .await?;
    let msg = tenant.obj.condition("Ready").map(|c| c.message.clone()).unwrap_or_default();
    ensure!(msg.contains("not in allowedNamespaces of ClusterRepository pol-shared"), "tenant's message: {msg}");
    ensure!(
        !prec.all().iter().any(|s| s.name() == "tenant"
            && s.obj.condition("Ready").is_some_and(|c| c.reason == "RepositoryNotReady")),
        "a tenancy refusal is never reported as RepositoryNotReady"
    );
    println!("[{:5.1}s] good Ready; late Stalled RepositoryNotFound; tenant Stalled NamespaceNotAllowed", at());
    // Let the policy's own follow-up reconciles (its status write comes back on its watch)
    // settle, so only the ClusterRepository watch can bring the admission to it in time.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let admit = Instant::now();
    Api::<ClusterRepository>::all(client.clone())
        .patch(
            "pol-shared",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"allowedNamespaces": {"list": ["nobody", ns]}}})),
        )
        .await?;
    let lifted = prec
        .wait("tenant no longer NamespaceNotAllowed", Duration::from_secs(10), &log, |l| {
            Ok(policy_seen(l, "tenant", admit, |cs| {
                cond(cs, "Ready").is_some_and(|c| c.reason != "NamespaceNotAllowed") && !is(cs, "Stalled", "True")
            }))
        })
        .await?;
    println!(
        "[{:5.1}s] admitted: tenant {} after {:.1}s",
        at(),
        trio(lifted.obj.conditions()),
        (lifted.at - admit).as_secs_f64()
    );

    // ---- 3. The compressor R check.
    let since = Instant::now();
    policies
        .create(
            &pp,
            &policy(&ns, "squash", json!({"repository": {"name": "r"}, "copyMethod": "Direct", "sources": [{"pvc": {"name": "data"}}], "compression": {"compressor": "zstd-turbo"}}))?,
        )
        .await?;
    let sq = prec
        .wait("squash Stalled InvalidSpec", t, &log, |l| {
            Ok(policy_seen(l, "squash", since, |cs| stalled_with(cs, "InvalidSpec")))
        })
        .await?;
    let msg = sq.obj.condition("Ready").map(|c| c.message.clone()).unwrap_or_default();
    ensure!(
        msg.contains("\"zstd-turbo\" is not a compressor kopia") && msg.contains("zstd-fastest"),
        "squash's message: {msg}"
    );
    // Its source exists, so nothing but the compressor stops the run.
    let pvc: k8s_openapi::api::core::v1::PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data", "namespace": ns},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }))?;
    Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(client.clone(), &ns).create(&pp, &pvc).await?;
    let run: Snapshot = serde_json::from_value(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
        "metadata": {"name": "squash-run", "namespace": ns}, "spec": {"policyRef": {"name": "squash"}}
    }))?;
    let run_uid = snaps.create(&pp, &run).await?.uid().unwrap_or_default();
    srec.wait("squash-run Pending, Stalled InvalidSpec", t, &log, |l| {
        Ok(l.iter()
            .find(|s| {
                let cs = s.obj.conditions();
                s.name() == "squash-run"
                    && s.obj.status.as_ref().and_then(|x| x.phase.as_ref()).map(|p| p.as_str()) == Some("Pending")
                    && cond(&cs, "Stalled").is_some_and(|c| {
                        c.status == "True" && c.reason == "InvalidSpec" && c.message.contains("zstd-turbo")
                    })
            })
            .map(|_| ()))
    })
    .await?;
    let fix = Instant::now();
    policies
        .patch(
            "squash",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"compression": {"compressor": "zstd"}}})),
        )
        .await?;
    prec.wait("squash's stall lifted", t, &log, |l| {
        Ok(policy_seen(l, "squash", fix, |cs| {
            is(cs, "Stalled", "False") && cond(cs, "Ready").is_some_and(|c| c.reason != "InvalidSpec")
        }))
    })
    .await?;
    println!("[{:5.1}s] squash Stalled InvalidSpec, its Snapshot parked with no Job; fixed -> lifted", at());

    // ---- 2. The Repository -> SnapshotPolicy watch: late follows its Repository both ways.
    h.kopia_repo("pol-late/").await?;
    h.repository(&ns, "late", "pol-late/", json!({})).await?;
    let repo_ready = rrec
        .wait("Repository late Ready", Duration::from_secs(120), &log, |l| {
            Ok(l.iter()
                .find(|s| {
                    s.name() == "late"
                        && s.obj.status.as_ref().and_then(|x| x.phase.as_ref()).map(|p| p.as_str()) == Some("Ready")
                })
                .map(|s| s.at))
        })
        .await?;
    // Versions from scenario 1 on: the policy's watch may deliver its Ready before the
    // Repository's watch delivers the Repository's (two streams); it cannot be Ready earlier.
    let ready = prec
        .wait(
            "late Ready within 10 s of its Repository",
            Duration::from_secs(10).saturating_sub(repo_ready.elapsed()),
            &log,
            |l| {
                Ok(policy_seen(l, "late", scenario1, |cs| {
                    cond(cs, "Ready").is_some_and(|c| c.status == "True" && c.reason == "Ready")
                }))
            },
        )
        .await?;
    let follow_up = ready.at.saturating_duration_since(repo_ready).as_secs_f64();
    ensure!(follow_up <= 10.0, "late followed its Repository after {follow_up:.1}s");
    Api::<Repository>::namespaced(client.clone(), &ns).delete("late", &DeleteParams::default()).await?;
    let gone = rrec
        .wait("Repository late deleted", Duration::from_secs(60), &log, |l| {
            Ok(l.iter().find(|s| s.name() == "late" && s.deleted).map(|s| s.at))
        })
        .await?;
    let back = prec
        .wait(
            "late back to RepositoryNotFound within 10 s",
            Duration::from_secs(10).saturating_sub(gone.elapsed()),
            &log,
            |l| Ok(policy_seen(l, "late", ready.at, |cs| stalled_with(cs, "RepositoryNotFound"))),
        )
        .await?;
    let follow_down = back.at.saturating_duration_since(gone).as_secs_f64();
    println!(
        "[{:5.1}s] late followed its Repository: Ready after {follow_up:.1}s, RepositoryNotFound {follow_down:.1}s after its deletion",
        at()
    );

    // ---- 4. The failed stamps: both reconciles tried and were refused.
    let mark = h.audit.calls().len();
    let sched_refused = erec
        .wait("schedule rs refused at its next slot", Duration::from_secs(75), &log, |l| Ok(refusal_event(l, "rs")))
        .await?;
    let ret_refused =
        erec.wait("policy ret's retention stamp refused", t, &log, |l| Ok(refusal_event(l, "ret"))).await?;
    let short = |n: &str| n.chars().take(160).collect::<String>();
    println!("[{:5.1}s] refused: rs {:?}; ret {:?}", at(), short(&sched_refused), short(&ret_refused));
    // Give a retry time to (wrongly) go through, then check nothing was deleted.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let log_now = srec.all();
    for name in [first.as_str(), "old", "new"] {
        let v = versions(&log_now, name);
        ensure!(!v.is_empty(), "{name} was never seen");
        ensure!(
            v.iter().all(|(s, d)| s.is_none() && !d),
            "{name} was stamped or deleted although the stamp was refused: {v:?}"
        );
        ensure!(
            snaps.get_opt(name).await?.is_some_and(|s| s.metadata.deletion_timestamp.is_none()),
            "{name} is gone or deleting"
        );
    }
    ensure!(
        children(&log_now) == vec![first.clone()],
        "a new child was created while the victim could not be removed: {:?}",
        children(&log_now)
    );
    let listed = kopia.list().await?;
    ensure!(listed.contains(&ids["old"]) && listed.contains(&ids["new"]), "kopia lost a snapshot: {listed:?}");
    let deletes = successful_deletes(&h.audit.since(mark));
    ensure!(deletes.is_empty(), "kopia deleted {deletes:?} while every stamp was refused");
    println!("[{:5.1}s] no DELETE after a failed stamp: {first}, old and new present, kopia intact", at());

    // ---- The stamps allowed again: the prunes proceed, each stamped before its DELETE.
    allow_stamps(&client, &ns).await?;
    let allowed = Instant::now();
    println!("[{:5.1}s] admission policy removed", at());
    let second = srec
        .wait(
            "the replaced child stamped replaced-run, deleted, and the next child",
            Duration::from_secs(45),
            &log,
            |l| {
                if !stamped_before_delete(l, &first, "replaced-run")? {
                    return Ok(None);
                }
                Ok(children(l).into_iter().find(|c| *c != first))
            },
        )
        .await?;
    srec.wait("old stamped retention and deleted", Duration::from_secs(45), &log, |l| {
        Ok(stamped_before_delete(l, "old", "retention")?.then_some(()))
    })
    .await?;
    ensure!(versions(&srec.all(), "new").iter().all(|(s, d)| s.is_none() && !d), "new was pruned too");
    println!(
        "[{:5.1}s] {first} stamped replaced-run then deleted, next child {second}; old stamped retention then deleted ({:.1}s after the removal)",
        at(),
        allowed.elapsed().as_secs_f64()
    );
    let gone_by = Instant::now() + Duration::from_secs(60);
    loop {
        let listed = kopia.list().await?;
        if !listed.contains(&ids["old"]) {
            ensure!(listed.contains(&ids["new"]), "kopia lost the kept snapshot: {listed:?}");
            break;
        }
        ensure!(Instant::now() < gone_by, "old's kopia snapshot was not deleted within 60 s");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    println!("[{:5.1}s] old's kopia snapshot deleted by its batch", at());

    // No Job for the refused run while the name was bad; once fixed, the compressor was the
    // only thing that stopped it, so its Job follows (on its parked requeue, at most 60 s).
    let healed = jobs
        .wait("squash-run's Job after the fix", Duration::from_secs(60).saturating_sub(fix.elapsed()), |j| {
            j.owner_uid == run_uid
        })
        .await?;
    let early: Vec<_> = jobs.owned_by(&run_uid).into_iter().filter(|j| j.first_seen < fix).collect();
    ensure!(early.is_empty(), "squash-run got a Job while its policy named zstd-turbo: {early:?}");
    println!(
        "[{:5.1}s] squash-run: no Job while refused; its Job {:.1}s after the fix",
        at(),
        healed.first_seen.saturating_duration_since(fix).as_secs_f64()
    );
    println!("[{:5.1}s] done", at());
    Ok(())
}

/// A kopia repository and a ClusterRepository `pol-shared` over it that admits only `nobody`.
async fn kopia_repo_and_cluster(h: &Harness, _ns: &str) -> Result<()> {
    h.kopia_repo("pol-shared/").await?;
    h.cluster_repository("pol-shared", "pol-shared/", json!({"list": ["nobody"]})).await?;
    Ok(())
}
