//! Maintenance and RepositoryReplication end to end on a private control plane, Garage, the
//! fault proxy and the real mover: a manual quick maintenance run executes under kopiur's
//! lease (Job Complete, status records it, LeaseOwned=True); a RepositoryReplication copies the
//! repository's blobs into a second bucket; an idle object makes no writes; with the source
//! Degraded behind the proxy both park (Pending / RepositoryNotReady, no Job) on a new
//! `run-requested` (every version watched, no Job), and both run once after recovery, each Job
//! within 10 s of Ready (T10, G3), resumed by the repository watch; a
//! failed maintenance run stamps the repository's reverify nudge.
//!
//! Alongside (no extra wait of its own beyond about 10 s): a ClusterRepository whose
//! `spec.maintenance.namespace` does not exist reports `MaintenanceConfigured=False /
//! MaintenanceApplyFailed` with one Warning `MaintenanceNotConfigured` (docs/design/api-contract.md §4.5), and is
//! configured by the next projection pass once the namespace exists; a RepositoryReplication
//! whose destination Secret lives in another namespace is Stalled `CrossNamespaceReference`
//! (docs/design/api-contract.md §1.8, §15) and never gets a Job, though a run was requested at creation.
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kopiur_api::{ClusterRepository, Maintenance, Repository, RepositoryReplication};
use kopiur_testenv::proxy::{FaultProxy, Mode};
use kopiur_testenv::wait::wait_for;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use support::env::{Stack, start_operator};
use support::repos::{apply, apply_repository, s3_backend_through};
use support::status::{StatusExt, condition_parts};
use support::wait::repository_ready;

mod support;
use recorder::Recorder;
use support::recorder;

const MIRROR: &str = "kopiur-mirror";

fn ready(conds: &[Condition]) -> Option<(String, String)> {
    conds.iter().find(|c| c.type_ == "Ready").map(|c| (c.status.clone(), c.reason.clone()))
}

fn maint_manual(m: &Maintenance) -> Option<(String, String)> {
    m.status
        .as_ref()
        .and_then(|s| s.manual_run.as_ref())
        .map(|r| (r.requested_at.clone(), r.phase.as_str().to_string()))
}

fn repl_manual(r: &RepositoryReplication) -> Option<(String, String)> {
    r.status
        .as_ref()
        .and_then(|s| s.manual_run.as_ref())
        .map(|m| (m.requested_at.clone(), m.phase.as_str().to_string()))
}

async fn request_run(client: &Client, ns: &str, kind: &str, name: &str, at: &str) -> Result<()> {
    let body = json!({"metadata": {"annotations": {"kopiur.home-operations.com/run-requested": at}}});
    let pp = PatchParams::default();
    match kind {
        "Maintenance" => {
            Api::<Maintenance>::namespaced(client.clone(), ns).patch(name, &pp, &Patch::Merge(&body)).await?;
        }
        _ => {
            Api::<RepositoryReplication>::namespaced(client.clone(), ns).patch(name, &pp, &Patch::Merge(&body)).await?;
        }
    }
    Ok(())
}

fn job_complete(j: &Job) -> bool {
    j.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Complete" && c.status == "True"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_and_replication_run_park_and_resume() -> Result<()> {
    let started = Instant::now();
    let Stack { client, garage: g, op_ns, env, dir: _dir } = Stack::start().await?;
    let env = &env;
    let _guard = env.log_guard();
    g.create_bucket(MIRROR).await?;
    let proxy = FaultProxy::start(g.s3_addr()).await?;

    let (op, log) = start_operator(
        env,
        &op_ns,
        &[("KOPIUR_STRICT_RETRY_BASE_SECONDS", "5"), ("KOPIUR_STRICT_RETRY_CAP_SECONDS", "10")],
    )
    .await?;

    let ns = env.namespace("t").await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "kopia", "namespace": ns},
        "stringData": {"KOPIA_PASSWORD": "maintenance e2e", "AWS_ACCESS_KEY_ID": g.access_key(), "AWS_SECRET_ACCESS_KEY": g.secret_key()}
    }))?;
    secrets.create(&PostParams::default(), &secret).await?;
    let dest: Secret = serde_json::from_value(json!({
        "metadata": {"name": "mirror", "namespace": ns},
        "stringData": {"AWS_ACCESS_KEY_ID": g.access_key(), "AWS_SECRET_ACCESS_KEY": g.secret_key()}
    }))?;
    secrets.create(&PostParams::default(), &dest).await?;
    // docs/design/api-contract.md §4.5: a ClusterRepository whose managed Maintenance's namespace does not exist
    // yet (its password Secret is absent too, so it launches no Job of its own).
    let later = format!("{ns}-later");
    let cr_name = format!("{ns}-shared");
    Api::<ClusterRepository>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "ClusterRepository",
                "metadata": {"name": cr_name},
                "spec": {
                    "backend": {"s3": {"bucket": g.bucket(), "endpoint": format!("http://{}", g.s3_endpoint()), "region": g.region(), "prefix": "shared/"}},
                    "encryption": {"passwordSecretRef": {"name": "absent-password"}},
                    "allowedNamespaces": {"list": [ns]},
                    "maintenance": {"namespace": later}
                }
            }))?,
        )
        .await?;
    // docs/design/api-contract.md §1.8, §15: a destination Secret in another namespace, with a run requested.
    apply(
        &client,
        &ns,
        json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "RepositoryReplication",
            "metadata": {"name": "rr-x", "namespace": ns, "annotations": {"kopiur.home-operations.com/run-requested": "2026-01-01T00:00:00Z"}},
            "spec": {
                "sourceRef": {"name": "r"},
                "destination": {"s3": {"bucket": MIRROR, "endpoint": format!("http://{}", g.s3_endpoint()), "region": g.region(), "prefix": "x/",
                                       "auth": {"secretRef": {"name": "mirror", "namespace": op_ns}}}},
                "schedule": {"cron": "0 0 1 1 *"}
            }
        }),
    )
    .await?;
    let probe = json!({"health": {"probe": {"interval": "30s", "failureThreshold": 1}}});
    apply_repository(&client, &ns, "r", s3_backend_through(&g, &proxy, "maint/"), probe).await?;
    let repos: Api<Repository> = Api::namespaced(client.clone(), &ns);
    repository_ready(&client, &ns, "r", Duration::from_secs(120), &log).await?;
    println!("[{:>5.1}s] r Ready", started.elapsed().as_secs_f64());

    // MaintenanceApplyFailed: the projection's apply into a missing namespace fails; the
    // repository says so, with one Warning Event for the transition.
    let crepos: Api<ClusterRepository> = Api::all(client.clone());
    let failed =
        wait_for("MaintenanceConfigured=False/MaintenanceApplyFailed", Duration::from_secs(60), &log, || async {
            let c = condition_parts(&crepos.get(&cr_name).await?, "MaintenanceConfigured");
            Ok(c.filter(|(s, r, _)| s == "False" && r == "MaintenanceApplyFailed"))
        })
        .await?;
    assert!(
        failed.2.contains(&format!("namespace {later} does not exist")),
        "the message names the missing namespace: {}",
        failed.2
    );
    let warnings = || async {
        let evs = Api::<Event>::all(client.clone()).list(&ListParams::default()).await?.items;
        anyhow::Ok(
            evs.iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(cr_name.as_str()))
                .filter(|e| e.reason.as_deref() == Some("MaintenanceNotConfigured"))
                .filter(|e| e.type_.as_deref() == Some("Warning"))
                .count(),
        )
    };
    wait_for("the MaintenanceNotConfigured Warning", Duration::from_secs(30), &log, || async {
        Ok((warnings().await? >= 1).then_some(()))
    })
    .await?;
    println!("[{:>5.1}s] {cr_name}: MaintenanceApplyFailed ({})", started.elapsed().as_secs_f64(), failed.2);
    // The namespace appears: the next pass (every 10 s) applies the managed Maintenance.
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": later}}))?)
        .await?;
    let later_maints: Api<Maintenance> = Api::namespaced(client.clone(), &later);
    wait_for("MaintenanceConfigured=True once the namespace exists", Duration::from_secs(30), &log, || async {
        let c = condition_parts(&crepos.get(&cr_name).await?, "MaintenanceConfigured");
        let projected = later_maints.get_opt(&cr_name).await?.is_some();
        Ok((projected && c.is_some_and(|(s, r, _)| s == "True" && r == "MaintenanceConfigured")).then_some(()))
    })
    .await?;
    assert_eq!(warnings().await?, 1, "one Warning for the one transition to not configured");
    println!("[{:>5.1}s] {cr_name}: managed Maintenance {later}/{cr_name} applied", started.elapsed().as_secs_f64());

    // CrossNamespaceReference: Stalled, the message names both namespaces.
    let repls_x: Api<RepositoryReplication> = Api::namespaced(client.clone(), &ns);
    let stalled = wait_for("rr-x Stalled CrossNamespaceReference", Duration::from_secs(30), &log, || async {
        let r = repls_x.get("rr-x").await?;
        let ready = condition_parts(&r, "Ready").filter(|(s, why, _)| s == "False" && why == "CrossNamespaceReference");
        let stalled =
            condition_parts(&r, "Stalled").is_some_and(|(s, why, _)| s == "True" && why == "CrossNamespaceReference");
        Ok(ready.filter(|_| stalled))
    })
    .await?;
    assert!(stalled.2.contains(&op_ns) && stalled.2.contains(&ns), "{}", stalled.2);
    println!("[{:>5.1}s] rr-x Stalled: {}", started.elapsed().as_secs_f64(), stalled.2);

    // Projection (docs/design/repository-breaker.md §3.11): the repository gets a managed Maintenance named after itself, owned
    // by it, and MaintenanceConfigured=True.
    let maints: Api<Maintenance> = Api::namespaced(client.clone(), &ns);
    let managed = wait_for("the managed Maintenance r", Duration::from_secs(60), &log, || async {
        Ok(maints.get_opt("r").await?)
    })
    .await?;
    assert_eq!(managed.labels().get("app.kubernetes.io/managed-by").map(String::as_str), Some("kopiur"));
    let owner = managed.owner_references().first().cloned().context("owner")?;
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Repository", "r"));
    assert_eq!(managed.spec.ownership.as_ref().and_then(|o| o.owner.clone()), Some(format!("kopiur/{ns}/r")));
    wait_for("MaintenanceConfigured=True (managed)", Duration::from_secs(60), &log, || async {
        let r = repos.get("r").await?;
        let c =
            r.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == "MaintenanceConfigured").cloned());
        Ok(c.filter(|c| c.status == "True" && c.message.contains("managed")).map(|_| ()))
    })
    .await?;
    println!("[{:>5.1}s] managed Maintenance r projected", started.elapsed().as_secs_f64());

    // A manual quick run and a manual replication, requested at creation.
    let first = "2026-01-01T00:00:00Z";
    apply(
        &client,
        &ns,
        json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Maintenance",
            "metadata": {"name": "m", "namespace": ns, "annotations": {"kopiur.home-operations.com/run-requested": first}},
            // Yearly slots: no scheduled run can interleave with the manual ones below,
            // whatever the time of day the test runs at.
            "spec": {"repository": {"name": "r"}, "schedule": {
                "quick": {"cron": "0 0 1 1 *"}, "full": {"cron": "30 0 1 1 *"}}}
        }),
    )
    .await?;
    apply(
        &client,
        &ns,
        json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "RepositoryReplication",
            "metadata": {"name": "rr", "namespace": ns, "annotations": {"kopiur.home-operations.com/run-requested": first}},
            "spec": {
                "sourceRef": {"name": "r"},
                "destination": {"s3": {"bucket": MIRROR, "endpoint": format!("http://{}", g.s3_endpoint()), "region": g.region(), "prefix": "copy/",
                                       "auth": {"secretRef": {"name": "mirror"}}}},
                "schedule": {"cron": "0 0 1 1 *"}
            }
        }),
    )
    .await?;
    // A user-authored Maintenance for the repository wins: the managed one goes.
    wait_for("the managed Maintenance replaced by m", Duration::from_secs(60), &log, || async {
        let gone = maints.get_opt("r").await?.is_none();
        let r = repos.get("r").await?;
        let c =
            r.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == "MaintenanceConfigured").cloned());
        Ok((gone && c.is_some_and(|c| c.status == "True" && c.message.contains("/m "))).then_some(()))
    })
    .await?;
    println!("[{:>5.1}s] user-authored Maintenance m won; managed r deleted", started.elapsed().as_secs_f64());
    let repls: Api<RepositoryReplication> = Api::namespaced(client.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let m = wait_for("the first maintenance run Succeeded", Duration::from_secs(120), &log, || async {
        let m = maints.get("m").await?;
        assert_ne!(maint_manual(&m).map(|x| x.1).as_deref(), Some("Failed"), "{:?}", m.status);
        Ok((maint_manual(&m) == Some((first.into(), "Succeeded".into()))).then_some(m))
    })
    .await?;
    let st = m.status.clone().unwrap_or_default();
    println!(
        "[{:>5.1}s] maintenance: {:?} conditions {:?}",
        started.elapsed().as_secs_f64(),
        st.quick,
        ready(&st.conditions)
    );
    assert!(st.quick.as_ref().and_then(|q| q.last_run_at).is_some(), "quick.lastRunAt recorded");
    assert!(st.quick.as_ref().and_then(|q| q.next_scheduled_at).is_some(), "quick slot pinned");
    assert!(st.full.as_ref().and_then(|q| q.next_scheduled_at).is_some(), "full slot pinned");
    assert_eq!(
        st.ownership.as_ref().and_then(|o| o.owner.clone()).as_deref(),
        Some(format!("kopiur@kopiur.{ns}.r").as_str())
    );
    assert!(st.conditions.iter().any(|c| c.type_ == "LeaseOwned" && c.status == "True"), "{:?}", st.conditions);
    assert_eq!(ready(&st.conditions), Some(("True".into(), "MaintenanceScheduled".into())));
    let mjobs: Vec<Job> =
        jobs.list(&ListParams::default().labels("kopiur.home-operations.com/maintenance=m")).await?.items;
    assert_eq!(mjobs.len(), 1, "one maintenance Job");
    assert!(job_complete(&mjobs[0]), "the maintenance Job is Complete");
    assert!(mjobs[0].name_any().starts_with("m-quick-"), "{}", mjobs[0].name_any());

    let rr = wait_for("the first replication Succeeded", Duration::from_secs(120), &log, || async {
        let r = repls.get("rr").await?;
        assert_ne!(r.phase(), "Failed", "{:?}", r.status);
        Ok((repl_manual(&r) == Some((first.into(), "Succeeded".into()))).then_some(r))
    })
    .await?;
    let rst = rr.status.clone().unwrap_or_default();
    assert_eq!(rr.phase(), "Succeeded");
    // `kopiur_resource_phase` exports the replication's phase (its own watch in the operator).
    let series = format!(
        "kopiur_resource_phase{{kind=\"RepositoryReplication\",namespace=\"{ns}\",name=\"rr\",phase=\"Succeeded\"}} 1"
    );
    wait_for("the replication's phase series", Duration::from_secs(30), &log, || async {
        Ok(op.metrics().await?.lines().any(|l| l == series).then_some(()))
    })
    .await?;
    assert!(rst.last_replicated.is_some());
    assert_eq!(ready(&rst.conditions), Some(("True".into(), "Replicated".into())));
    // docs/design/mover.md §2.2: the replication that just succeeded connected as `kopiur-ops` at the
    // source's lease host, read-only.
    let rjobs = jobs.list(&ListParams::default().labels("kopiur.home-operations.com/replication=rr")).await?.items;
    let work_spec: Value = rjobs
        .first()
        .and_then(|j| j.spec.as_ref()?.template.spec.as_ref()?.containers.first()?.env.clone())
        .and_then(|env| env.into_iter().find(|e| e.name == "KOPIUR_WORK_SPEC")?.value)
        .map(|raw| serde_json::from_str(&raw))
        .transpose()?
        .context("the replication Job's work spec")?;
    assert_eq!(
        work_spec["repository"]["clientIdentity"],
        json!({"username": "kopiur-ops", "hostname": format!("kopiur.{ns}.r")}),
        "the replication identity"
    );
    assert_eq!(work_spec["repository"]["readOnly"], true);
    let copied = g.list_objects(MIRROR, "copy/").await?;
    println!("[{:>5.1}s] replication copied {} objects", started.elapsed().as_secs_f64(), copied.len());
    let source = g.list_objects(g.bucket(), "maint/").await?;
    assert!(copied.iter().any(|k| k.contains("kopia.repository")), "the mirror holds the repository: {copied:?}");
    assert!(copied.len() >= 3, "blobs copied: {copied:?}");
    let source_blobs: BTreeSet<String> = source.iter().map(|k| k.trim_start_matches("maint/").to_string()).collect();
    let copied_blobs: BTreeSet<String> = copied.iter().map(|k| k.trim_start_matches("copy/").to_string()).collect();
    println!("source {} objects, mirror {} objects", source_blobs.len(), copied_blobs.len());
    let shared = copied_blobs.intersection(&source_blobs).count();
    assert!(shared >= 3, "the mirror holds the source's blobs ({shared} in common)");

    // Idle: no writes between ticks.
    let (mrv, rrv) = (maints.get("m").await?.resource_version(), repls.get("rr").await?.resource_version());
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(maints.get("m").await?.resource_version(), mrv, "an idle Maintenance is not written");
    assert_eq!(repls.get("rr").await?.resource_version(), rrv, "an idle replication is not written");

    // Outage: the breaker opens at the first failed probe. From here watches record every
    // version of r, m, rr and of every maintenance or replication Job.
    let field = |n: &str| watcher::Config::default().fields(&format!("metadata.name={n}"));
    let repo_rec = Recorder::start(repos.clone(), field("r")).await?;
    let maint_rec = Recorder::start(maints.clone(), field("m")).await?;
    let repl_rec = Recorder::start(repls.clone(), field("rr")).await?;
    let job_rec = Recorder::start(jobs.clone(), watcher::Config::default()).await?;
    // Maintenance and replication Job uids with the name and the instant each was first seen.
    let sightings = |seen: &[recorder::Seen<Job>]| {
        let mut m = std::collections::BTreeMap::<String, (String, Instant)>::new();
        for v in seen {
            let l = v.obj.labels();
            if l.contains_key("kopiur.home-operations.com/maintenance")
                || l.contains_key("kopiur.home-operations.com/replication")
            {
                m.entry(v.uid()).or_insert((v.name(), v.at));
            }
        }
        m
    };
    let job_sightings = || sightings(&job_rec.all());
    let before: BTreeSet<String> = job_sightings().into_keys().collect();
    proxy.set(Mode::Refuse);
    let cut = Instant::now();
    repo_rec
        .wait("r Degraded", Duration::from_secs(150), &log, |seen| {
            Ok(seen.iter().any(|v| v.at >= cut && v.obj.phase() == "Degraded").then_some(()))
        })
        .await?;
    println!("[{:>5.1}s] r Degraded", started.elapsed().as_secs_f64());
    let second = "2026-01-02T00:00:00Z";
    request_run(&client, &ns, "Maintenance", "m", second).await?;
    request_run(&client, &ns, "RepositoryReplication", "rr", second).await?;
    // 15 s parked: every version of both is checked, and no Job appears.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let (mut m_parked, mut r_parked) = (false, false);
    for v in maint_rec.all() {
        assert_ne!(maint_manual(&v.obj).map(|x| x.1).as_deref(), Some("Failed"), "gating never fails a run");
        let mc = v.obj.status.clone().unwrap_or_default().conditions;
        m_parked |= maint_manual(&v.obj) == Some((second.into(), "Pending".into()))
            && ready(&mc) == Some(("False".into(), "RepositoryNotReady".into()));
    }
    for v in repl_rec.all() {
        assert_ne!(v.obj.phase(), "Failed", "gating never fails a replication");
        let rc = v.obj.status.clone().unwrap_or_default().conditions;
        r_parked |= v.obj.phase() == "Pending" && ready(&rc) == Some(("False".into(), "RepositoryNotReady".into()));
    }
    let during: Vec<String> =
        job_sightings().into_iter().filter(|(u, _)| !before.contains(u)).map(|(_, (n, _))| n).collect();
    assert!(during.is_empty(), "no maintenance or replication Job while Degraded: {during:?}");
    assert!(m_parked && r_parked, "both parked Pending with RepositoryNotReady (m {m_parked}, rr {r_parked})");
    println!(
        "[{:>5.1}s] both parked ({} Maintenance and {} replication versions watched)",
        started.elapsed().as_secs_f64(),
        maint_rec.all().len(),
        repl_rec.all().len()
    );

    // Recovery: each runs exactly once, promptly (T10/G3: a Job within 10 s of Ready).
    proxy.set(Mode::Pass);
    let healed = Instant::now();
    let ready_at = repo_rec
        .wait("r Ready again", Duration::from_secs(120), &log, |seen| {
            Ok(seen.iter().find(|v| v.at >= healed && v.obj.phase() == "Ready").map(|v| v.at))
        })
        .await?;
    println!("[{:>5.1}s] r Ready again", started.elapsed().as_secs_f64());
    let new_jobs = job_rec
        .wait("both Jobs after recovery", Duration::from_secs(60), &log, |seen| {
            let now: Vec<(String, Instant)> =
                sightings(seen).into_iter().filter(|(u, _)| !before.contains(u)).map(|(_, j)| j).collect();
            Ok((now.len() >= 2).then_some(now))
        })
        .await?;
    let latency = new_jobs.iter().map(|(_, at)| at.saturating_duration_since(ready_at)).max().unwrap_or_default();
    println!(
        "jobs {:?} seen within {:.1} s of Ready (both on watches)",
        new_jobs.iter().map(|(n, _)| n).collect::<Vec<_>>(),
        latency.as_secs_f64()
    );
    assert!(latency <= Duration::from_secs(10), "T10/G3: each Job within 10 s of Ready ({latency:?})");
    wait_for("both second runs Succeeded", Duration::from_secs(120), &log, || async {
        let m = maints.get("m").await?;
        let r = repls.get("rr").await?;
        Ok((maint_manual(&m) == Some((second.into(), "Succeeded".into()))
            && repl_manual(&r) == Some((second.into(), "Succeeded".into())))
        .then_some(()))
    })
    .await?;
    let after: Vec<String> =
        job_sightings().into_iter().filter(|(u, _)| !before.contains(u)).map(|(_, (n, _))| n).collect();
    assert_eq!(after.len(), 2, "exactly one Job (uid) each after recovery: {after:?}");
    drop((repo_rec, maint_rec, repl_rec, job_rec));

    // The cron path: minutely schedules fire by themselves (the edit re-pins), one Job per slot.
    // Up to 160 s: in one loaded CI run the first minute after the edit fired nothing and the
    // next slot's run was recorded just past a 100 s wait.
    let pp = PatchParams::default();
    let quick = json!({"spec": {"schedule": {"quick": {"cron": "* * * * *", "jitter": null}}}});
    maints.patch("m", &pp, &Patch::Merge(&quick)).await?;
    repls.patch("rr", &pp, &Patch::Merge(&json!({"spec": {"schedule": {"cron": "* * * * *"}}}))).await?;
    let cron_jobs = wait_for("a cron-triggered run of each recorded", Duration::from_secs(160), &log, || async {
        let list = jobs.list(&ListParams::default()).await?.items;
        let cron: Vec<&Job> = list
            .iter()
            .filter(|j| {
                j.annotations().get("kopiur.home-operations.com/run-trigger").map(String::as_str) == Some("cron")
            })
            .collect();
        let m = maints.get("m").await?;
        let r = repls.get("rr").await?;
        let m_done = m.status.as_ref().and_then(|s| s.quick.as_ref()).and_then(|q| q.last_handled_at).is_some();
        let r_job = cron.iter().find(|j| j.labels().contains_key("kopiur.home-operations.com/replication"));
        let r_done = r_job.is_some_and(|j| {
            let created = j.creation_timestamp().map(|t| t.0.as_second()).unwrap_or(i64::MAX);
            job_complete(j)
                && r.status.as_ref().and_then(|s| s.last_replicated).is_some_and(|l| l.timestamp() >= created)
        });
        Ok((m_done && r_done).then(|| cron.iter().map(|j| j.name_any()).collect::<BTreeSet<String>>()))
    })
    .await?;
    println!("[{:>5.1}s] cron runs {cron_jobs:?}", started.elapsed().as_secs_f64());
    let m = maints.get("m").await?;
    let q = m.status.as_ref().and_then(|s| s.quick.clone()).unwrap_or_default();
    assert!(q.next_scheduled_at > q.last_handled_at, "the quick slot re-pinned forward: {q:?}");
    assert_eq!(q.next_scheduled_at.map(|t| t.timestamp() % 60), Some(0), "no jitter: a whole minute");

    // A failed maintenance run nudges its repository (docs/design/repository-breaker.md §3.8, §3.7.1): the run's
    // Job exceeds a 1 s deadline (the proxy slows every chunk so it cannot finish in time);
    // the replication is suspended so that only the Maintenance can stamp the repository.
    const REVERIFY: &str = "kopiur.home-operations.com/reverify-requested-at";
    repls.patch("rr", &pp, &Patch::Merge(&json!({"spec": {"suspend": true}}))).await?;
    let failing = json!({"spec": {
        "schedule": {"quick": {"cron": "0 0 1 1 *"}},
        "failurePolicy": {"activeDeadlineSeconds": 1, "backoffLimit": 0}
    }});
    maints.patch("m", &pp, &Patch::Merge(&failing)).await?;
    wait_for("cron runs settled", Duration::from_secs(60), &log, || async {
        let active = jobs.list(&ListParams::default()).await?.items.into_iter().any(|j| {
            (j.labels().contains_key("kopiur.home-operations.com/maintenance")
                || j.labels().contains_key("kopiur.home-operations.com/replication"))
                && j.status.as_ref().and_then(|s| s.conditions.as_ref()).is_none_or(|c| {
                    !c.iter().any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
                })
        });
        Ok((!active).then_some(()))
    })
    .await?;
    let before_nudge = repos.get("r").await?.annotations().get(REVERIFY).cloned();
    proxy.set(Mode::Latency(Duration::from_millis(300)));
    let third = "2026-01-03T00:00:00Z";
    let requested = chrono::Utc::now() - chrono::Duration::seconds(1);
    request_run(&client, &ns, "Maintenance", "m", third).await?;
    wait_for("the third maintenance run Failed", Duration::from_secs(90), &log, || async {
        Ok((maint_manual(&maints.get("m").await?) == Some((third.into(), "Failed".into()))).then_some(()))
    })
    .await?;
    let nudged = wait_for("the repository nudged", Duration::from_secs(30), &log, || async {
        let v = repos.get("r").await?.annotations().get(REVERIFY).cloned();
        Ok(v.filter(|v| Some(v) != before_nudge.as_ref())
            .and_then(|v| chrono::DateTime::parse_from_rfc3339(&v).ok().filter(|t| *t >= requested).map(|_| v)))
    })
    .await?;
    proxy.set(Mode::Pass);
    println!(
        "[{:>5.1}s] a failed maintenance run nudged r: {REVERIFY}={nudged} (was {before_nudge:?})",
        started.elapsed().as_secs_f64()
    );
    // rr-x stayed refused for the whole run: no Job, ever.
    let x_jobs = jobs.list(&ListParams::default().labels("kopiur.home-operations.com/replication=rr-x")).await?.items;
    assert!(
        x_jobs.is_empty(),
        "a cross-namespace destination Secret launched a Job: {:?}",
        x_jobs.iter().map(|j| j.name_any()).collect::<Vec<_>>()
    );
    let r = repls_x.get("rr-x").await?;
    assert_eq!(
        condition_parts(&r, "Stalled").map(|c| c.1),
        Some("CrossNamespaceReference".into()),
        "still Stalled at the end"
    );
    println!("[{:>5.1}s] done", started.elapsed().as_secs_f64());
    drop(op);
    Ok(())
}
