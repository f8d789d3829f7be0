//! The backup pipeline end to end on a private local control plane, Garage and the real
//! mover: a Repository on Garage, a SnapshotPolicy over a PVC holding data, a manual Snapshot
//! reaching Succeeded with a kopia snapshot id, a SnapshotSchedule firing a child that also
//! succeeds, retention pruning with every prune stamped `pruned-by: retention`, and the
//! finalizer releasing a Retain Snapshot without contacting the repository.
//!
//! The controller runs under exactly the generated RBAC, so a missing rule fails here.
use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kopiur_api::Snapshot;
use kopiur_testenv::operator::Operator;
use kopiur_testenv::wait::wait_for;
use kube::api::{DeleteParams, ListParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;
use support::env::{Stack, start_operator};
use support::metrics;
use support::repos::{apply, claim, create_secret, policy, repository, s3_backend};
use support::status::StatusExt;
use support::wait::{pv_dir, pvc_bound, repository_ready};

mod support;
use recorder::Recorder;
use support::recorder;

const PASSWORD: &str = "pipeline-e2e correct horse";

/// `kopiur_mover_jobs_created_total{op="snapshot-delete-batch"}` summed over namespaces.
async fn batch_jobs_created(op: &Operator) -> Result<u64> {
    let text = op.metrics().await?;
    Ok(metrics::sum(&text, "kopiur_mover_jobs_created_total", &[("op", "snapshot-delete-batch")]) as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_backup_schedule_and_retention_end_to_end() -> Result<()> {
    let Stack { client, garage: g, op_ns, env, dir: _dir } = Stack::start().await?;
    let env = &env;
    let _guard = env.log_guard();

    let (op, log) = start_operator(env, &op_ns, &[]).await?;

    let ns = env.namespace("t").await?;
    create_secret(&client, &ns, &g, PASSWORD).await?;
    apply(&client, &ns, repository(&ns, "r", s3_backend(&g, "pipeline/"), json!({}))).await?;

    // A PVC with data, written straight into its host directory.
    apply(&client, &ns, claim(&ns, "data")).await?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let pvc = pvc_bound(&client, &ns, "data", "PVC Bound", Duration::from_secs(60), &log).await?;
    let host = pv_dir(env, &pvc)?;
    std::fs::create_dir_all(host.join("nested"))?;
    std::fs::write(host.join("hello.txt"), b"hello from the pipeline e2e\n")?;
    let blob: Vec<u8> = (0..200_000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    std::fs::write(host.join("nested/blob.bin"), &blob)?;

    repository_ready(&client, &ns, "r", Duration::from_secs(300), &log).await?;

    apply(&client, &ns, policy(&ns, "p", json!({"name": "r"}), "data", json!({"retention": {"keepLatest": 2}})))
        .await?;

    // A manual Snapshot reaches Succeeded with a kopia snapshot id.
    let snaps: Api<Snapshot> = Api::namespaced(client.clone(), &ns);
    apply(
        &client,
        &ns,
        json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": "manual-1", "namespace": ns},
            "spec": {"policyRef": {"name": "p"}}
        }),
    )
    .await?;
    let done = wait_for("manual-1 Succeeded and healed", Duration::from_secs(300), &log, || async {
        let s = snaps.get("manual-1").await?;
        assert_ne!(s.phase(), "Failed", "manual-1 failed: {:?}", s.status.as_ref().and_then(|x| x.failure.clone()));
        Ok((s.phase() == "Succeeded" && s.ready_reason().as_deref() == Some("SnapshotCreated")).then_some(s))
    })
    .await?;
    let st = done.status.clone().unwrap();
    let id = st.snapshot.as_ref().and_then(|x| x.kopia_snapshot_id.clone()).context("kopiaSnapshotID")?;
    println!("manual-1 kopia snapshot id {id}");
    assert!(id.len() >= 32 && id.chars().all(|c| c.is_ascii_hexdigit()), "snapshot id {id}");
    assert!(st.completion_recorded_at.is_some(), "second pass recorded the completion");
    assert!(done.finalizers().iter().any(|f| f == kopiur_api::names::finalizer::SNAPSHOT_CLEANUP));
    let resolved = st.resolved.clone().context("resolved pinned")?;
    assert_eq!(resolved.repository.as_ref().map(|r| r.name.as_str()), Some("r"));
    assert_eq!(resolved.identity.as_ref().map(|i| i.to_string()), Some(format!("p@{ns}:/pvc/data")));
    // The backup Job carries no Secret value.
    let job = Api::<Job>::namespaced(client.clone(), &ns).get("manual-1").await?;
    let job_text = serde_json::to_string(&job)?;
    assert!(!job_text.contains(PASSWORD) && !job_text.contains(g.secret_key()), "a Secret value leaked into the Job");

    // Restore manual-1 into a new PVC; the files match byte for byte.
    apply(
        &client,
        &ns,
        json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Restore",
            "metadata": {"name": "back", "namespace": ns},
            "spec": {"source": {"snapshotRef": {"name": "manual-1"}},
                     "target": {"pvc": {"name": "restored", "capacity": "1Gi"}}}
        }),
    )
    .await?;
    let restores: Api<kopiur_api::Restore> = Api::namespaced(client.clone(), &ns);
    let restored = wait_for("Restore Completed", Duration::from_secs(300), &log, || async {
        let r = restores.get("back").await?;
        let p = r.status.as_ref().and_then(|s| s.phase.as_ref()).map(|p| p.as_str().to_string()).unwrap_or_default();
        assert_ne!(p, "Failed", "restore failed: {:?}", r.status.as_ref().and_then(|s| s.failure.clone()));
        Ok((p == "Completed").then_some(r))
    })
    .await?;
    let pinned = restored.status.as_ref().and_then(|s| s.resolved.clone()).context("resolved")?;
    assert_eq!(pinned.kopia_snapshot_id.as_deref(), Some(id.as_str()), "pinned to manual-1's manifest");
    let target = pvcs.get("restored").await?;
    let out = kopiur_testenv::node::provisioner::pv_dir(&env.node_state_dir(), &target.uid().context("uid")?);
    assert_eq!(std::fs::read(out.join("hello.txt"))?, b"hello from the pipeline e2e\n");
    assert_eq!(std::fs::read(out.join("nested/blob.bin"))?, blob, "restored bytes match");
    println!("restore into PVC restored matched {} + {} bytes", 28, blob.len());

    // From here on every version of every Snapshot is recorded (for the retention check below).
    let rec = Recorder::start(snaps.clone(), watcher::Config::default()).await?;
    // A schedule fires every minute; its children succeed too.
    apply(
        &client,
        &ns,
        json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotSchedule",
            "metadata": {"name": "every-minute", "namespace": ns},
            "spec": {"policyRef": {"name": "p"}, "schedule": {"cron": "* * * * *"}}
        }),
    )
    .await?;
    let by_schedule = ListParams::default().labels("kopiur.home-operations.com/schedule=every-minute");
    let children = wait_for("two scheduled Snapshots Succeeded", Duration::from_secs(240), &log, || async {
        let l = snaps.list(&by_schedule).await?;
        for s in &l.items {
            assert_ne!(
                s.phase(),
                "Failed",
                "{} failed: {:?}",
                s.name_any(),
                s.status.as_ref().and_then(|x| x.failure.clone())
            );
        }
        let ok: Vec<Snapshot> = l.items.into_iter().filter(|s| s.phase() == "Succeeded").collect();
        Ok((ok.len() >= 2).then_some(ok))
    })
    .await?;
    for c in &children {
        let owner = c.owner_references().first().cloned().context("owner")?;
        assert_eq!(owner.kind, "SnapshotSchedule");
        assert_eq!(owner.controller, Some(true));
        assert_eq!(
            c.labels().get("app.kubernetes.io/managed-by").map(String::as_str),
            Some("kopiur"),
            "docs/design/api-contract.md §1.7"
        );
        assert_eq!(c.spec.on_schedule_delete, Some(kopiur_api::snapshot::OnScheduleDelete::Retain));
        let slot: i64 = c.name_any().rsplit('-').next().unwrap().parse()?;
        assert_eq!(slot % 60, 0, "children are named by their minute slot: {}", c.name_any());
    }
    let sched: kopiur_api::SnapshotSchedule = Api::namespaced(client.clone(), &ns).get("every-minute").await?;
    let next = sched.status.as_ref().and_then(|s| s.next_schedule.clone()).context("nextSchedule pinned")?;
    assert!(next.slot.is_some() && next.at.is_some());
    assert_eq!(sched.status.as_ref().map(|s| s.consecutive_failures), Some(0), "no failed run: consecutiveFailures 0");

    // Retention keepLatest 2 over manual-1 plus the scheduled children: the oldest go, each
    // stamped before its delete; their kopia manifests are removed through a delete Job. A watch
    // records every version of every Snapshot, the DELETED one included, so a prune stamped,
    // deleted and gone between two polls is still seen.
    rec.wait("manual-1 pruned by retention", Duration::from_secs(240), &log, |seen| {
        Ok(seen.iter().any(|s| s.deleted && s.name() == "manual-1").then_some(()))
    })
    .await?;
    let versions = rec.all();
    // Per Snapshot seen deleting: the pruned-by stamp on its first version carrying a
    // deletionTimestamp (the stamp must be written before the delete).
    let mut seen = BTreeMap::<String, Option<String>>::new();
    for v in &versions {
        if (v.obj.metadata.deletion_timestamp.is_some() || v.deleted) && !seen.contains_key(&v.name()) {
            seen.insert(v.name(), v.obj.annotations().get("kopiur.home-operations.com/pruned-by").cloned());
        }
    }
    let gone: Vec<String> = versions.iter().filter(|v| v.deleted).map(|v| v.name()).collect();
    println!(
        "deleted while watched ({} versions, {} list(s)): first deleting version's stamp {seen:?}; DELETED events {gone:?}",
        versions.len(),
        rec.starts()
    );
    assert_eq!(rec.starts(), 1, "the watch never re-listed, so no version was missed");
    drop(rec);
    assert!(gone.contains(&"manual-1".to_string()), "manual-1 was seen deleted");
    for (name, v) in &seen {
        assert_eq!(v.as_deref(), Some("retention"), "{name} was deleted without its pruned-by stamp");
    }
    // Batch Jobs are reaped once their members drain, so count creations on /metrics.
    let delete_jobs = batch_jobs_created(&op).await?;
    println!("delete Jobs created: {delete_jobs}");
    assert!(delete_jobs >= 1, "the manifest was deleted through a batch Job");

    // Deleting the schedule cascades to its children through the garbage collector; under
    // the default onScheduleDelete Retain each is released with its data kept, no delete Job.
    let jobs_before_cascade = delete_jobs;
    Api::<kopiur_api::SnapshotSchedule>::namespaced(client.clone(), &ns)
        .delete("every-minute", &DeleteParams::default())
        .await?;
    wait_for("scheduled children released", Duration::from_secs(120), &log, || async {
        Ok(snaps.list(&by_schedule).await?.items.is_empty().then_some(()))
    })
    .await?;
    let delete_jobs = batch_jobs_created(&op).await?;
    assert_eq!(delete_jobs, jobs_before_cascade, "cascade-retained children are not deleted from kopia");

    // A Retain Snapshot releases its finalizer without any delete Job.
    apply(
        &client,
        &ns,
        json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": "keep-me", "namespace": ns},
            "spec": {"policyRef": {"name": "p"}, "deletionPolicy": "Retain"}
        }),
    )
    .await?;
    wait_for("keep-me Succeeded", Duration::from_secs(300), &log, || async {
        let s = snaps.get("keep-me").await?;
        Ok((s.phase() == "Succeeded").then_some(()))
    })
    .await?;
    let before = delete_jobs;
    snaps.delete("keep-me", &DeleteParams::default()).await?;
    wait_for("keep-me gone", Duration::from_secs(60), &log, || async {
        Ok(snaps.get_opt("keep-me").await?.is_none().then_some(()))
    })
    .await?;
    let after = batch_jobs_created(&op).await?;
    assert_eq!(before, after, "Retain never contacts the repository");
    drop(op);
    Ok(())
}
