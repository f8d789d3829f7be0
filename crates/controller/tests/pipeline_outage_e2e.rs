//! Consumers park during an outage and resume on recovery, end to end (T10 for Snapshot and
//! Restore): with the repository Degraded behind the fault proxy, a manual Snapshot and a
//! fromPolicy Restore stay Pending with `RepositoryNotReady`, no backup or restore Job is
//! created, nothing fails, and the Restore's wait window does not start. When the backend
//! returns and the breaker closes, the Snapshot's Job starts promptly (a watch, not a poll
//! interval), it succeeds, and the Restore restores it. Then a second outage of at least 8
//! schedule ticks under a Forbid and an Allow schedule (T07): at most 1 failed backup Job, no
//! Failed Snapshot once the breaker is open, exactly 1 parked Forbid child and one parked Allow
//! child per slot, each run exactly once on recovery, and the cadence resumes.
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use kopiur_api::{Repository, Restore, Snapshot};
use kopiur_testenv::TestEnv;
use kopiur_testenv::garage::Garage;
use kopiur_testenv::operator::Operator;
use kopiur_testenv::proxy::{FaultProxy, Mode};
use kopiur_testenv::wait::wait_for;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

async fn apply(client: &Client, ns: &str, v: Value) -> Result<()> {
    kopiur_testenv::apply::apply_value(client, ns, &v).await
}

fn repo_phase(r: &Repository) -> String {
    r.status.as_ref().and_then(|s| s.phase.as_ref()).map(|p| p.as_str().to_string()).unwrap_or_default()
}

fn snap_phase(s: &Snapshot) -> String {
    s.status.as_ref().and_then(|st| st.phase.as_ref()).map(|p| p.as_str().to_string()).unwrap_or_default()
}

fn ready_reason(conds: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]) -> Option<String> {
    conds.iter().find(|c| c.type_ == "Ready").map(|c| c.reason.clone())
}

/// The values of `name` series carrying every `labels` pair, from a `/metrics` scrape.
fn samples(text: &str, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let rest = series.strip_prefix(name)?;
            if !(rest.is_empty() || rest.starts_with('{')) {
                return None;
            }
            labels.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\""))).then(|| value.parse().ok())?
        })
        .collect()
}

/// The single series of `name` with `labels`, if present.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let v = samples(text, name, labels);
    assert!(v.len() <= 1, "{name}{labels:?} matches {} series", v.len());
    v.first().copied()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_consumers_park_during_outage_and_resume() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let env = &TestEnv::start(kopiur_testenv::Options::default()).await?;
    let _guard = env.log_guard();
    let client = env.client().await?;
    let g = Garage::start(&dir.path().join("garage")).await?;
    let proxy = FaultProxy::start(g.s3_addr()).await?;

    let op_ns = env.namespace("kopiur-system").await?;
    let op = Operator::start(
        env,
        &op_ns,
        &[("KOPIUR_STRICT_RETRY_BASE_SECONDS", "10"), ("KOPIUR_STRICT_RETRY_CAP_SECONDS", "20")],
    )
    .await?;
    let log = op.log_path().to_path_buf();

    let ns = env.namespace("t").await?;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "kopia", "namespace": ns},
        "stringData": {"KOPIA_PASSWORD": "outage e2e", "AWS_ACCESS_KEY_ID": g.access_key(), "AWS_SECRET_ACCESS_KEY": g.secret_key()}
    }))?;
    Api::<Secret>::namespaced(client.clone(), &ns).create(&PostParams::default(), &secret).await?;
    apply(
        &client,
        &ns,
        json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
            "metadata": {"name": "r", "namespace": ns},
            "spec": {
                "backend": {"s3": {"bucket": g.bucket(), "endpoint": format!("http://{}", proxy.endpoint()), "region": g.region(), "prefix": "outage/"}},
                "encryption": {"passwordSecretRef": {"name": "kopia"}},
                "health": {"probe": {"interval": "30s"}}
            }
        }),
    )
    .await?;
    apply(
        &client,
        &ns,
        json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "namespace": ns},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
        }),
    )
    .await?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let pvc = wait_for("PVC Bound", Duration::from_secs(60), &log, || async {
        let p = pvcs.get("data").await?;
        Ok((p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")).then_some(p))
    })
    .await?;
    let host = kopiur_testenv::node::provisioner::pv_dir(&env.node_state_dir(), &pvc.uid().context("pvc uid")?);
    std::fs::write(host.join("state.txt"), b"written before the outage\n")?;
    apply(
        &client,
        &ns,
        json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotPolicy",
            "metadata": {"name": "p", "namespace": ns},
            "spec": {"repository": {"name": "r"}, "copyMethod": "Direct", "sources": [{"pvc": {"name": "data"}}]}
        }),
    )
    .await?;
    let repos: Api<Repository> = Api::namespaced(client.clone(), &ns);
    wait_for("r Ready", Duration::from_secs(300), &log, || async {
        Ok((repo_phase(&repos.get("r").await?) == "Ready").then_some(()))
    })
    .await?;

    // ADR-0007 §8 metrics, scraped from the operator's /metrics.
    let rl = [("kind", "Repository"), ("namespace", ns.as_str()), ("name", "r")];
    const TRIPS: &str = "kopiur_repository_breaker_trips_total";
    const STREAK: &str = "kopiur_repository_consecutive_backend_failures";
    const OPEN_SINCE: &str = "kopiur_repository_breaker_open_since_timestamp_seconds";
    let trips_before: f64 = samples(&op.metrics().await?, TRIPS, &rl).iter().sum();

    // Outage: the breaker opens after three failed probes; the streak gauge rises meanwhile.
    proxy.set(Mode::Refuse);
    let mut streaks: Vec<f64> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(420);
    loop {
        if let Some(v) = sample(&op.metrics().await.unwrap_or_default(), STREAK, &rl)
            && streaks.last() != Some(&v)
        {
            streaks.push(v);
        }
        if repo_phase(&repos.get("r").await?) == "Degraded" {
            break;
        }
        if Instant::now() > deadline {
            bail!("timed out waiting for r Degraded\n{}", kopiur_testenv::process::log_tail(&log, 60));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!("consecutive backend failures during the outage: {streaks:?}");
    assert!(streaks.windows(2).all(|w| w[0] <= w[1]), "the streak only rises during the outage: {streaks:?}");
    assert!(streaks.len() >= 2 && streaks.last().copied().unwrap_or(0.0) >= 1.0, "the streak rose: {streaks:?}");
    let open = wait_for("breaker metrics of the open breaker", Duration::from_secs(15), &log, || async {
        let text = op.metrics().await?;
        Ok(sample(&text, OPEN_SINCE, &rl).is_some().then_some(text))
    })
    .await?;
    let trips: f64 = samples(&open, TRIPS, &rl).iter().sum();
    assert_eq!(trips, trips_before + 1.0, "one trip for the episode:\n{open}");
    assert!(sample(&open, STREAK, &rl).unwrap_or(0.0) >= *streaks.last().unwrap(), "the streak is kept while open");

    let snaps: Api<Snapshot> = Api::namespaced(client.clone(), &ns);
    let restores: Api<Restore> = Api::namespaced(client.clone(), &ns);
    apply(
        &client,
        &ns,
        json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": "during-outage", "namespace": ns},
            "spec": {"policyRef": {"name": "p"}}
        }),
    )
    .await?;
    apply(
        &client,
        &ns,
        json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Restore",
            "metadata": {"name": "back", "namespace": ns},
            "spec": {"source": {"fromPolicy": {"name": "p"}},
                     "target": {"pvc": {"name": "restored", "capacity": "1Gi"}},
                     "policy": {"waitTimeout": "10m"}}
        }),
    )
    .await?;
    // Parked, for 40 s of the outage: Pending / RepositoryNotReady, no Jobs, nothing Failed.
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let watch_until = Instant::now() + Duration::from_secs(40);
    let mut parked_seen = false;
    while Instant::now() < watch_until {
        let s = snaps.get("during-outage").await?;
        let r = restores.get("back").await?;
        assert_ne!(snap_phase(&s), "Failed", "a parked Snapshot never fails");
        let rst = r.status.clone().unwrap_or_default();
        assert_ne!(rst.phase.as_ref().map(|p| p.as_str().to_string()).as_deref(), Some("Failed"));
        assert!(rst.wait_started_at.is_none(), "the Restore's wait window does not start while parked");
        if snap_phase(&s) == "Pending"
            && ready_reason(&s.status.clone().unwrap_or_default().conditions).as_deref() == Some("RepositoryNotReady")
            && ready_reason(&rst.conditions).as_deref() == Some("RepositoryNotReady")
        {
            parked_seen = true;
        }
        let ops: Vec<String> = jobs
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter_map(|j| j.labels().get("kopiur.home-operations.com/op").cloned())
            .filter(|op| op == "backup" || op == "restore")
            .collect();
        assert!(ops.is_empty(), "no backup or restore Job while Degraded: {ops:?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(parked_seen, "both consumers parked with RepositoryNotReady");
    // The parked Snapshot is counted by kopiur_snapshot_gated (recomputed every 5 s).
    let gated = wait_for("kopiur_snapshot_gated 1", Duration::from_secs(15), &log, || async {
        let text = op.metrics().await?;
        Ok(sample(&text, "kopiur_snapshot_gated", &[("namespace", ns.as_str()), ("policy", "p")]).map(|v| (v, text)))
    })
    .await?;
    assert_eq!(gated.0, 1.0, "one parked Snapshot on policy p");
    assert!(sample(&gated.1, OPEN_SINCE, &rl).is_some(), "open_since stays while open");
    assert_eq!(samples(&gated.1, TRIPS, &rl).iter().sum::<f64>(), trips_before + 1.0, "no re-trip while open");
    let parked = snaps.get("during-outage").await?;
    let msg = parked.status.as_ref().unwrap().conditions.iter().find(|c| c.type_ == "Ready").unwrap().message.clone();
    println!("parked: {msg}");
    assert!(msg.contains("Degraded"), "the message names the repository phase: {msg}");

    // Recovery: the breaker closes, the parked Snapshot launches once and succeeds.
    proxy.set(Mode::Pass);
    wait_for("r Ready again", Duration::from_secs(300), &log, || async {
        Ok((repo_phase(&repos.get("r").await?) == "Ready").then_some(()))
    })
    .await?;
    let ready_at = Instant::now();
    // After recovery: no open_since series, and the streak's 0 is visible.
    wait_for("closed-breaker metrics", Duration::from_secs(15), &log, || async {
        let text = op.metrics().await?;
        Ok((sample(&text, OPEN_SINCE, &rl).is_none() && sample(&text, STREAK, &rl) == Some(0.0)).then_some(()))
    })
    .await?;
    wait_for("backup Job after recovery", Duration::from_secs(60), &log, || async {
        Ok(jobs.get_opt("during-outage").await?.map(|_| ()))
    })
    .await?;
    let latency = ready_at.elapsed();
    println!("backup Job created {:.1} s after the repository was seen Ready", latency.as_secs_f64());
    assert!(latency < Duration::from_secs(30), "resumed by a watch, not the 300 s safety requeue");
    let done = wait_for("during-outage Succeeded", Duration::from_secs(300), &log, || async {
        let s = snaps.get("during-outage").await?;
        assert_ne!(snap_phase(&s), "Failed", "{:?}", s.status.as_ref().and_then(|x| x.failure.clone()));
        Ok((snap_phase(&s) == "Succeeded").then_some(s))
    })
    .await?;
    let id = done.status.as_ref().and_then(|s| s.snapshot.as_ref()).and_then(|x| x.kopia_snapshot_id.clone());
    // The Restore proceeds once the gate passes and restores that snapshot.
    let r = wait_for("Restore Completed", Duration::from_secs(300), &log, || async {
        let r = restores.get("back").await?;
        let p = r.status.as_ref().and_then(|s| s.phase.as_ref()).map(|p| p.as_str().to_string()).unwrap_or_default();
        assert_ne!(p, "Failed", "{:?}", r.status.as_ref().and_then(|s| s.failure.clone()));
        Ok((p == "Completed").then_some(r))
    })
    .await?;
    let resolved = r.status.as_ref().and_then(|s| s.resolved.clone()).context("resolved")?;
    println!("restore resolved {:?} -> {:?}", resolved.resolution, resolved.kopia_snapshot_id);
    assert_eq!(resolved.kopia_snapshot_id, id, "the Restore pinned the backup made after recovery");
    let target = pvcs.get("restored").await?;
    let out = kopiur_testenv::node::provisioner::pv_dir(&env.node_state_dir(), &target.uid().context("uid")?);
    assert_eq!(std::fs::read(out.join("state.txt"))?, b"written before the outage\n");
    let backup_jobs =
        jobs.list(&ListParams::default().labels("kopiur.home-operations.com/op=backup")).await?.items.len();
    assert_eq!(backup_jobs, 1, "exactly one backup Job over the first outage and recovery");

    // T07: a Forbid and an Allow schedule every minute across a second outage of at least 8
    // ticks. Over the whole outage at most 1 backup Job fails (one launched just before the
    // open); no Snapshot fails once the breaker is open; Forbid parks exactly one child, Allow
    // one per slot; on recovery every parked child runs exactly once and the cadence resumes.
    for (name, policy) in [("minutely", "Forbid"), ("allowed", "Allow")] {
        apply(
            &client,
            &ns,
            json!({
                "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotSchedule",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"policyRef": {"name": "p"}, "schedule": {"cron": "* * * * *", "concurrencyPolicy": policy}}
            }),
        )
        .await?;
    }
    let by_schedule = ListParams::default().labels("kopiur.home-operations.com/schedule=minutely");
    let by_allowed = ListParams::default().labels("kopiur.home-operations.com/schedule=allowed");
    wait_for("a child of each schedule Succeeded", Duration::from_secs(180), &log, || async {
        let f = snaps.list(&by_schedule).await?.items.iter().any(|s| snap_phase(s) == "Succeeded");
        let a = snaps.list(&by_allowed).await?.items.iter().any(|s| snap_phase(s) == "Succeeded");
        Ok((f && a).then_some(()))
    })
    .await?;
    let backup_lp = ListParams::default().labels("kopiur.home-operations.com/op=backup");
    let job_failed = |j: &Job| {
        j.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Failed" && c.status == "True"))
    };
    let failed_before: std::collections::BTreeSet<String> =
        jobs.list(&backup_lp).await?.items.iter().filter(|j| job_failed(j)).map(|j| j.name_any()).collect();
    let cut = Instant::now();
    proxy.set(Mode::Refuse);
    let mut failed_jobs = std::collections::BTreeSet::new();
    let mut failed_allow_jobs = std::collections::BTreeSet::new();
    let mut failed_after_open = std::collections::BTreeSet::new();
    wait_for("r Degraded again", Duration::from_secs(420), &log, || async {
        Ok((repo_phase(&repos.get("r").await?) == "Degraded").then_some(()))
    })
    .await?;
    let opened_after = cut.elapsed();
    let at_open: std::collections::BTreeSet<String> =
        snaps.list(&by_schedule).await?.items.iter().map(|s| s.name_any()).collect();
    let allowed_at_open: std::collections::BTreeSet<String> =
        snaps.list(&by_allowed).await?.items.iter().map(|s| s.name_any()).collect();
    // Every Snapshot that exists at the open: a Job launched before it may still fail after
    // it; anything minted later must not.
    let existing_at_open: std::collections::BTreeSet<String> =
        snaps.list(&ListParams::default()).await?.items.iter().map(|s| s.name_any()).collect();
    // The outage lasts at least 8 schedule ticks from the cut.
    let until = cut + Duration::from_secs(8 * 60 + 10);
    let mut max_pending = 0;
    let mut minted_while_open = std::collections::BTreeSet::new();
    while Instant::now() < until {
        let items = snaps.list(&by_schedule).await?.items;
        assert_eq!(repo_phase(&repos.get("r").await?), "Degraded", "the breaker stays open during the outage");
        let pending = items.iter().filter(|s| matches!(snap_phase(s).as_str(), "Pending" | "")).count();
        max_pending = max_pending.max(pending);
        for s in &items {
            if !at_open.contains(&s.name_any()) {
                minted_while_open.insert(s.name_any());
            }
        }
        for s in snaps.list(&ListParams::default()).await?.items.iter().filter(|s| snap_phase(s) == "Failed") {
            if !existing_at_open.contains(&s.name_any()) {
                failed_after_open.insert(s.name_any());
            }
        }
        for j in jobs.list(&backup_lp).await?.items.iter().filter(|j| job_failed(j)) {
            if !failed_before.contains(&j.name_any()) {
                // Forbid's failed Jobs are T07's figure; Allow launches one per slot until
                // the breaker opens and is reported apart.
                if j.name_any().starts_with("minutely-") {
                    failed_jobs.insert(j.name_any());
                } else {
                    failed_allow_jobs.insert(j.name_any());
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let items = snaps.list(&by_schedule).await?.items;
    let failed: Vec<String> = items.iter().filter(|s| snap_phase(s) == "Failed").map(|s| s.name_any()).collect();
    let parked: Vec<String> = items.iter().filter(|s| snap_phase(s) == "Pending").map(|s| s.name_any()).collect();
    let allowed = snaps.list(&by_allowed).await?.items;
    let allowed_parked: Vec<String> = allowed
        .iter()
        .filter(|s| !allowed_at_open.contains(&s.name_any()) && snap_phase(s) == "Pending")
        .map(|s| s.name_any())
        .collect();
    let allowed_new = allowed.iter().filter(|s| !allowed_at_open.contains(&s.name_any())).count();
    println!(
        "outage of {:.0} s (breaker open after {:.0} s): Forbid children at open {}, minted while open {:?}, \
         parked {:?}, failed {:?}; Allow children minted while open {allowed_new}, parked {}; failed backup Jobs \
         (Forbid) {:?}, (Allow, before the open) {:?}; Snapshots minted after the open that failed {:?}",
        cut.elapsed().as_secs_f64(),
        opened_after.as_secs_f64(),
        at_open.len(),
        minted_while_open,
        parked,
        failed,
        allowed_parked.len(),
        failed_jobs,
        failed_allow_jobs,
        failed_after_open,
    );
    assert!(failed_jobs.len() <= 1, "at most 1 failed backup Job over the outage: {failed_jobs:?}");
    assert!(failed_after_open.is_empty(), "no Snapshot minted after the open fails: {failed_after_open:?}");
    assert!(max_pending <= 1, "parked work is bounded at one under Forbid (saw {max_pending})");
    // A child minted before the open may still be parked; either way, at most one new child.
    let total_parked_or_new: std::collections::BTreeSet<String> =
        minted_while_open.iter().cloned().chain(parked.iter().cloned()).collect();
    assert!(total_parked_or_new.len() <= 1, "no other child while the parked one is active: {total_parked_or_new:?}");
    assert_eq!(parked.len(), 1, "one Forbid child parked across the open ticks");
    // Under Allow every slot after the open parks its own child (the open came within ~2 ticks
    // of the cut, so at least 6 of the 8 slots fall after it).
    assert!(allowed_parked.len() >= 6, "one parked Allow child per slot: {allowed_parked:?}");
    assert_eq!(allowed_parked.len(), allowed_new, "every Allow child minted while open is parked");
    let parked_name = parked[0].clone();
    proxy.set(Mode::Pass);
    let healed = Instant::now();
    wait_for("r Ready after the second outage", Duration::from_secs(300), &log, || async {
        Ok((repo_phase(&repos.get("r").await?) == "Ready").then_some(()))
    })
    .await?;
    let ok = wait_for("the parked child Succeeded", Duration::from_secs(240), &log, || async {
        let s = snaps.get(&parked_name).await?;
        assert_ne!(snap_phase(&s), "Failed", "{:?}", s.status.as_ref().and_then(|x| x.failure.clone()));
        Ok((snap_phase(&s) == "Succeeded").then_some(s))
    })
    .await?;
    assert_eq!(ok.status.as_ref().and_then(|s| s.job.as_ref()).map(|j| j.name.clone()), Some(parked_name.clone()));
    wait_for("every parked Allow child Succeeded", Duration::from_secs(420), &log, || async {
        let mut done = 0;
        for n in &allowed_parked {
            let s = snaps.get(n).await?;
            assert_ne!(snap_phase(&s), "Failed", "{n}: {:?}", s.status.as_ref().and_then(|x| x.failure.clone()));
            done += usize::from(snap_phase(&s) == "Succeeded");
        }
        Ok((done == allowed_parked.len()).then_some(()))
    })
    .await?;
    let all_jobs = jobs.list(&backup_lp).await?.items;
    for n in std::iter::once(&parked_name).chain(allowed_parked.iter()) {
        let count = all_jobs.iter().filter(|j| &j.name_any() == n).count();
        assert_eq!(count, 1, "the parked child {n} launched exactly one Job");
    }
    // The cadence resumes: a Forbid child of a slot after recovery succeeds.
    let resumed = wait_for("a post-recovery Forbid child Succeeded", Duration::from_secs(240), &log, || async {
        let items = snaps.list(&by_schedule).await?.items;
        Ok(items
            .iter()
            .find(|s| {
                !at_open.contains(&s.name_any())
                    && s.name_any() != parked_name
                    && !minted_while_open.contains(&s.name_any())
                    && snap_phase(s) == "Succeeded"
            })
            .map(|s| s.name_any()))
    })
    .await?;
    println!(
        "recovery: parked Forbid child {parked_name} and {} Allow children each ran once; cadence resumed with \
         {resumed} {:.0} s after the backend returned",
        allowed_parked.len(),
        healed.elapsed().as_secs_f64()
    );
    for name in ["minutely", "allowed"] {
        Api::<kopiur_api::SnapshotSchedule>::namespaced(client.clone(), &ns)
            .delete(name, &kube::api::DeleteParams::default())
            .await?;
    }
    drop(op);
    Ok(())
}
