//! A wedged mover pod, end to end (docs/design/architecture.md §1.4, docs/design/api-contract.md §2.2 `podStartupDeadlineSeconds`).
//!
//! The wedge is one users really hit: a mover reads its credentials from the namespace it runs
//! in, so the consumer namespace holds a user-made copy of the repository's password Secret
//! (docs/design/api-contract.md §4 references). Here the copy has the key misspelt. The Secret exists, so the
//! controller's `MissingCredentialsSecret` gate passes and the backup Job is created, but the
//! pod's container cannot be created: the node reports it waiting with
//! `CreateContainerConfigError` ("couldn't find key KOPIA_PASSWORD in Secret …"), as a kubelet
//! does. With `podStartupDeadlineSeconds: 1` the Snapshot must fail with `MoverPodWedged`, its
//! Job must be deleted, exactly one `MoverPodWedged` Warning Event must be emitted, and the
//! repository must not be nudged (the backend is not at fault). A Restore in the same namespace
//! wedges the same way and fails `MoverPodWedged` with its Job deleted, and so does a manual
//! Maintenance run (a failed run, one `MoverPodWedged` Event). Once the copy is fixed, a
//! new Snapshot and a Restore of it, both with the same 1 s deadline, succeed: a healthy pod is
//! not taken for a wedged one.
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use kopiur_api::names::{annotation, label};
use kopiur_api::shared::phase::ManualRunPhase;
use kopiur_api::{Maintenance, Repository, Restore, Snapshot};
use kopiur_testenv::wait::wait_for;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
mod support;
use serde_json::json;
use support::env::{Stack, start_operator};
use support::repos::{apply, claim, policy, repository, s3_backend, secret};
use support::status::{StatusExt, events_about};
use support::wait::{pv_dir, pvc_bound, repository_ready};

/// Occurrences of Events with `reason` about the object named `object` (an Event series counts
/// each occurrence, so a repeat folded into one object is still seen).
async fn occurrences(client: &Client, ns: &str, object: &str, reason: &str) -> Result<(usize, Vec<Event>)> {
    let evs: Vec<Event> = events_about(client, ns, object, reason).await?;
    let n = evs.iter().map(support::status::occurrences).sum();
    Ok((n, evs))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wedged_mover_pod_fails_the_snapshot_and_deletes_its_job() -> Result<()> {
    let started = Instant::now();
    let Stack { client, garage: g, op_ns, env, dir: _dir } = Stack::start().await?;
    let env = &env;
    let _guard = env.log_guard();
    let (op, log) = start_operator(env, &op_ns, &[]).await?;

    // The repository, with its own (correct) Secret, in its namespace, admitting the consumer
    // namespace (a Repository serves another namespace only when it lists it).
    let repo_ns = env.namespace("wedged-repo").await?;
    let ns = env.namespace("wedged-app").await?;
    Api::<Secret>::namespaced(client.clone(), &repo_ns)
        .create(&PostParams::default(), &secret(&repo_ns, &g, "KOPIA_PASSWORD", "wedged e2e")?)
        .await?;
    let admits = json!({"allowedNamespaces": [ns]});
    apply(&client, &repo_ns, repository(&repo_ns, "r", s3_backend(&g, "wedged/"), admits)).await?;

    // The consumer namespace: a copy of the Secret with the password key misspelt.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets.create(&PostParams::default(), &secret(&ns, &g, "KOPIA_PASWORD", "wedged e2e")?).await?;
    apply(&client, &ns, claim(&ns, "data")).await?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let pvc = pvc_bound(&client, &ns, "data", "PVC Bound", Duration::from_secs(120), &log).await?;
    let host = pv_dir(env, &pvc)?;
    std::fs::write(host.join("state.txt"), b"backed up once the Secret copy is fixed\n")?;
    apply(&client, &ns, policy(&ns, "p", json!({"name": "r", "namespace": repo_ns}), "data", json!({}))).await?;
    let repos: Api<Repository> = Api::namespaced(client.clone(), &repo_ns);
    repository_ready(&client, &repo_ns, "r", Duration::from_secs(420), &log).await?;
    let nudge_before = repos.get("r").await?.annotations().get(annotation::REVERIFY_REQUESTED_AT).cloned();
    println!("setup: repository Ready {:.1} s after the test started", started.elapsed().as_secs_f64());

    // The wedged Snapshot.
    let snaps: Api<Snapshot> = Api::namespaced(client.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    apply(
        &client,
        &ns,
        json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": "wedged", "namespace": ns},
            "spec": {"policyRef": {"name": "p"}, "failurePolicy": {"podStartupDeadlineSeconds": 1}}
        }),
    )
    .await?;
    let created = Instant::now();
    let job = wait_for("the wedged backup Job", Duration::from_secs(180), &log, || async {
        Ok(jobs.get_opt("wedged").await?)
    })
    .await?;
    let job_seen = Instant::now();
    let job_uid = job.uid().context("job uid")?;
    // Watch the pod (when it is seen before the Job goes) and the Snapshot, polling both.
    let pod_waiting: std::sync::Mutex<Option<(Duration, String)>> = std::sync::Mutex::new(None);
    let failed = wait_for("wedged Failed", Duration::from_secs(240), &log, || async {
        if pod_waiting.lock().unwrap().is_none() {
            let lp = ListParams::default().labels("job-name=wedged");
            for p in pods.list(&lp).await?.items {
                let waiting = p
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
                    .find(|r| kopiur_controller::wedged::WEDGE_REASONS.contains(&r.as_str()));
                if let Some(r) = waiting {
                    *pod_waiting.lock().unwrap() = Some((job_seen.elapsed(), r));
                }
            }
        }
        let s = snaps.get("wedged").await?;
        ensure!(s.phase() != "Succeeded", "a pod without its password cannot back up");
        Ok((s.phase() == "Failed").then_some(s))
    })
    .await?;
    let pod_waiting = pod_waiting.into_inner().unwrap();
    let to_failed = job_seen.elapsed();
    let ready = failed.condition("Ready").cloned().context("Ready condition")?;
    println!("wedged Ready: {} / {}", ready.reason, ready.message);
    assert_eq!(ready.reason, "MoverPodWedged", "{ready:?}");
    assert_eq!(ready.status, "False");
    let stalled = failed.condition("Stalled").cloned().context("Stalled condition")?;
    assert_eq!((stalled.status.as_str(), stalled.reason.as_str()), ("True", "MoverPodWedged"), "{stalled:?}");
    let message = failed.status.as_ref().and_then(|s| s.failure.as_ref()).and_then(|f| f.message.clone());
    let message = message.context("status.failure.message")?;
    assert_eq!(message, ready.message, "the failure and the condition tell the same story");
    for needle in [
        "container mover waiting with CreateContainerConfigError",
        &format!("couldn't find key KOPIA_PASSWORD in Secret {ns}/kopia"),
        "longer than the 1s pod startup deadline",
        "kubectl describe pod -l job-name=wedged",
    ] {
        assert!(message.contains(needle), "{needle:?} missing from {message:?}");
    }

    // The Job (the very one created for the Snapshot) is deleted, and its pod with it.
    wait_for("the wedged Job deleted", Duration::from_secs(120), &log, || async {
        Ok(match jobs.get_opt("wedged").await? {
            None => Some(()),
            Some(j) => {
                ensure!(j.uid().as_deref() == Some(job_uid.as_str()), "a second Job was created for a Failed Snapshot");
                None
            }
        })
    })
    .await?;
    let to_job_gone = job_seen.elapsed();
    wait_for("the wedged pod gone", Duration::from_secs(180), &log, || async {
        Ok(pods.list(&ListParams::default().labels("job-name=wedged")).await?.items.is_empty().then_some(()))
    })
    .await?;
    let to_pod_gone = job_seen.elapsed();

    // Exactly one MoverPodWedged Warning Event, no SnapshotFailed; it stays that way while the
    // Failed Snapshot is reconciled again (its Job's deletion, the repository's status).
    let (n, evs) = wait_for("the MoverPodWedged Event", Duration::from_secs(60), &log, || async {
        let (n, evs) = occurrences(&client, &ns, "wedged", "MoverPodWedged").await?;
        Ok((n > 0).then_some((n, evs)))
    })
    .await?;
    assert_eq!(n, 1, "one MoverPodWedged Event: {evs:?}");
    assert_eq!(evs[0].type_.as_deref(), Some("Warning"));
    assert_eq!(evs[0].note.as_deref(), Some(message.as_str()), "the Event carries the failure message");
    tokio::time::sleep(Duration::from_secs(15)).await;
    let (after, evs) = occurrences(&client, &ns, "wedged", "MoverPodWedged").await?;
    assert_eq!(after, 1, "still one MoverPodWedged Event: {evs:?}");
    let (failed_events, _) = occurrences(&client, &ns, "wedged", "SnapshotFailed").await?;
    assert_eq!(failed_events, 0, "a wedge is announced as MoverPodWedged only");
    let still = snaps.get("wedged").await?;
    assert_eq!(still.phase(), "Failed", "Failed is terminal");
    assert!(jobs.get_opt("wedged").await?.is_none(), "no Job is launched again for a Failed Snapshot");
    // Not the backend's fault: the repository was not asked to re-verify.
    let r = repos.get("r").await?;
    assert_eq!(
        r.annotations().get(annotation::REVERIFY_REQUESTED_AT),
        nudge_before.as_ref(),
        "a wedged pod does not nudge the repository"
    );
    assert_eq!(r.phase(), "Ready", "the repository is untouched");

    // A Restore in the same namespace never gets that far: it checks its credentials before
    // any Job (docs/design/api-contract.md §9), so the misspelt key parks it Pending with CredentialsAvailable=False
    // / MissingCredentialsSecret (Stalled: a human must fix the Secret), and no Job is made.
    let restores: Api<Restore> = Api::namespaced(client.clone(), &ns);
    apply(
        &client,
        &ns,
        json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Restore",
            "metadata": {"name": "wedged", "namespace": ns},
            "spec": {"repository": {"name": "r", "namespace": repo_ns},
                     "source": {"identity": {"username": "p", "hostname": ns}},
                     "target": {"pvc": {"name": "restored-wedged", "capacity": "1Gi"}},
                     "failurePolicy": {"podStartupDeadlineSeconds": 1}}
        }),
    )
    .await?;
    let restore_created = Instant::now();
    let parked = wait_for("the Restore parked by its credentials pre-check", Duration::from_secs(60), &log, || async {
        let r = restores.get("wedged").await?;
        let ca = r.condition("CredentialsAvailable").cloned();
        Ok(ca.filter(|c| c.status == "False" && c.reason == "MissingCredentialsSecret").map(|c| (r, c)))
    })
    .await?;
    let restore_to_parked = restore_created.elapsed();
    let (rparked, rcred) = parked;
    println!("pre-checked Restore: {} / {}", rcred.reason, rcred.message);
    assert_eq!(rparked.phase(), "Pending", "{:?}", rparked.status);
    assert!(rcred.message.contains("KOPIA_PASSWORD"), "the message names the missing key: {rcred:?}");
    assert_eq!(rparked.condition("Stalled").cloned().map(|c| c.status).as_deref(), Some("True"));
    // The operator exports the parked Restore's phase (the `kopiur_resource_phase` family covers
    // Restores), and the wedged Snapshot's Failed phase that `KopiurBackupFailed`-style rules select.
    let series = |kind: &str, name: &str, phase: &str| {
        format!("kopiur_resource_phase{{kind=\"{kind}\",namespace=\"{ns}\",name=\"{name}\",phase=\"{phase}\"}} 1")
    };
    let (restore_pending, snapshot_failed) =
        (series("Restore", "wedged", "Pending"), series("Snapshot", "wedged", "Failed"));
    let text = wait_for("the parked Restore's phase series", Duration::from_secs(30), &log, || async {
        let t = op.metrics().await?;
        Ok((t.lines().any(|l| l == restore_pending) && t.lines().any(|l| l == snapshot_failed)).then_some(t))
    })
    .await?;
    let of_wedged: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with("kopiur_resource_phase{kind=\"Restore\"")
                && l.contains(&format!("namespace=\"{ns}\",name=\"wedged\""))
        })
        .collect();
    assert_eq!(of_wedged, [restore_pending.as_str()], "one series, for the current phase only");
    assert!(jobs.get_opt("wedged-restore").await?.is_none(), "no restore Job before the Secret is fixed");
    // Deleted before the fix, so it cannot resume: the later Restore is the one that runs.
    restores.delete("wedged", &Default::default()).await?;

    // A manual run of a Maintenance in this namespace (its Jobs read the same copy) is a failed
    // run: recorded once, its Job deleted, one MoverPodWedged Event, no nudge.
    let maints: Api<Maintenance> = Api::namespaced(client.clone(), &ns);
    let requested = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    apply(
        &client,
        &ns,
        json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Maintenance",
            "metadata": {"name": "m", "namespace": ns, "annotations": {annotation::RUN_REQUESTED: requested}},
            "spec": {"repository": {"name": "r", "namespace": repo_ns}, "failurePolicy": {"podStartupDeadlineSeconds": 1}}
        }),
    )
    .await?;
    let by_maint = ListParams::default().labels(&format!("{}=m", label::MAINTENANCE));
    let maint_job = wait_for("the wedged maintenance Job", Duration::from_secs(180), &log, || async {
        Ok(jobs.list(&by_maint).await?.items.into_iter().next())
    })
    .await?;
    let maint_job_seen = Instant::now();
    let maint_job_name = maint_job.name_any();
    let mfailed = wait_for("the wedged manual maintenance run Failed", Duration::from_secs(240), &log, || async {
        let m = maints.get("m").await?;
        let run = m.status.as_ref().and_then(|s| s.manual_run.clone());
        ensure!(run.as_ref().is_none_or(|r| r.phase != ManualRunPhase::Succeeded), "it cannot have run: {run:?}");
        Ok(run.is_some_and(|r| r.phase == ManualRunPhase::Failed).then_some(m))
    })
    .await?;
    let maint_to_failed = maint_job_seen.elapsed();
    let mst = mfailed.status.clone().unwrap_or_default();
    assert_eq!(mst.manual_run.as_ref().map(|r| r.requested_at.as_str()), Some(requested.as_str()));
    assert_eq!(mst.quick.as_ref().map(|q| q.consecutive_failures), Some(1), "one failed quick run: {mst:?}");
    assert!(mst.quick.as_ref().is_some_and(|q| q.last_run_at.is_none()), "no successful run: {mst:?}");
    wait_for("the wedged maintenance Job deleted", Duration::from_secs(120), &log, || async {
        Ok(jobs.list(&by_maint).await?.items.is_empty().then_some(()))
    })
    .await?;
    let maint_to_job_gone = maint_job_seen.elapsed();
    let (mn, mevs) = wait_for("the Maintenance's MoverPodWedged Event", Duration::from_secs(60), &log, || async {
        let (n, evs) = occurrences(&client, &ns, "m", "MoverPodWedged").await?;
        Ok((n > 0).then_some((n, evs)))
    })
    .await?;
    let mnote = mevs[0].note.clone().unwrap_or_default();
    println!("wedged maintenance Event: {mnote}");
    assert!(
        mnote.contains(&format!("of Job {maint_job_name}")) && mnote.contains("CreateContainerConfigError"),
        "{mnote}"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (mn_after, mevs) = occurrences(&client, &ns, "m", "MoverPodWedged").await?;
    assert_eq!((mn, mn_after), (1, 1), "one MoverPodWedged Event for the Maintenance: {mevs:?}");
    let mstill = maints.get("m").await?.status.unwrap_or_default();
    assert_eq!(mstill.quick.as_ref().map(|q| q.consecutive_failures), Some(1), "counted once");
    assert!(jobs.list(&by_maint).await?.items.is_empty(), "nothing relaunched");
    assert_eq!(
        repos.get("r").await?.annotations().get(annotation::REVERIFY_REQUESTED_AT),
        nudge_before.as_ref(),
        "a wedged maintenance pod does not nudge the repository"
    );

    // The user fixes the copy; a new Snapshot under the same 1 s deadline succeeds.
    let fix = json!({"stringData": {"KOPIA_PASSWORD": "wedged e2e"}});
    secrets.patch("kopia", &PatchParams::default(), &Patch::Merge(&fix)).await?;
    apply(
        &client,
        &ns,
        json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": "after", "namespace": ns},
            "spec": {"policyRef": {"name": "p"}, "failurePolicy": {"podStartupDeadlineSeconds": 1}}
        }),
    )
    .await?;
    let after_created = Instant::now();
    let ok = wait_for("after Succeeded", Duration::from_secs(300), &log, || async {
        let s = snaps.get("after").await?;
        ensure!(
            s.phase() != "Failed",
            "after failed: {:?} {:?}",
            s.condition("Ready").cloned(),
            s.status.as_ref().and_then(|x| x.failure.clone())
        );
        Ok((s.phase() == "Succeeded").then_some(s))
    })
    .await?;
    let to_success = after_created.elapsed();
    let id = ok.status.as_ref().and_then(|s| s.snapshot.as_ref()).and_then(|x| x.kopia_snapshot_id.clone());
    assert!(id.as_deref().is_some_and(|i| !i.is_empty()), "a kopia snapshot id is recorded: {:?}", ok.status);
    // And a Restore of it under the same deadline completes with the data.
    apply(
        &client,
        &ns,
        json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Restore",
            "metadata": {"name": "after", "namespace": ns},
            "spec": {"source": {"fromPolicy": {"name": "p"}},
                     "target": {"pvc": {"name": "restored", "capacity": "1Gi"}},
                     "failurePolicy": {"podStartupDeadlineSeconds": 1}}
        }),
    )
    .await?;
    let restore_created = Instant::now();
    let done = wait_for("the Restore after the fix Completed", Duration::from_secs(300), &log, || async {
        let r = restores.get("after").await?;
        ensure!(
            r.phase() != "Failed",
            "restore after failed: {:?} {:?}",
            r.condition("Ready").cloned(),
            r.status.as_ref().and_then(|x| x.failure.clone())
        );
        Ok((r.phase() == "Completed").then_some(r))
    })
    .await?;
    let restore_to_done = restore_created.elapsed();
    let restored_id = done.status.as_ref().and_then(|s| s.resolved.as_ref()).and_then(|r| r.kopia_snapshot_id.clone());
    assert_eq!(restored_id, id, "the Restore restored the Snapshot taken after the fix");
    let target = pvcs.get("restored").await?;
    let out = kopiur_testenv::node::provisioner::pv_dir(&env.node_state_dir(), &target.uid().context("uid")?);
    assert_eq!(std::fs::read(out.join("state.txt"))?, b"backed up once the Secret copy is fixed\n");
    // The completed Restore's series replaces nothing of the others'; deleting the Failed one
    // removes its series (bounded cardinality), and the Maintenance has one too.
    let completed = series("Restore", "after", "Completed");
    let maintenance_prefix =
        format!("kopiur_resource_phase{{kind=\"Maintenance\",namespace=\"{ns}\",name=\"m\",phase=");
    wait_for("the deleted Restore's series gone, the Completed one there", Duration::from_secs(60), &log, || async {
        let t = op.metrics().await?;
        let gone = !t.lines().any(|l| l.contains(&format!("kind=\"Restore\",namespace=\"{ns}\",name=\"wedged\"")));
        let there = t.lines().any(|l| l == completed) && t.lines().any(|l| l.starts_with(&maintenance_prefix));
        Ok((gone && there).then_some(()))
    })
    .await?;
    let (wedged_after, _) = occurrences(&client, &ns, "after", "MoverPodWedged").await?;
    assert_eq!(wedged_after, 0, "a healthy pod is never taken for a wedged one");
    assert_eq!(
        repos.get("r").await?.annotations().get(annotation::REVERIFY_REQUESTED_AT),
        nudge_before.as_ref(),
        "no nudge over the whole test"
    );

    println!(
        "figures: Snapshot applied -> Job seen {:.1} s; pod seen waiting ({}) {}; Job seen -> Snapshot Failed {:.1} s; \
         -> Job deleted {:.1} s; -> pod gone {:.1} s; MoverPodWedged Events {after}; \
         fixed Snapshot applied -> Succeeded {:.1} s (kopia id {}); \
         Restore applied -> parked by its pre-check {:.1} s; fixed Restore -> Completed {:.1} s; \
         maintenance Job seen -> manual run Failed {:.1} s, -> Job deleted {:.1} s; \
         whole test {:.1} s",
        (job_seen - created).as_secs_f64(),
        pod_waiting.as_ref().map_or("not caught by the poll", |(_, r)| r.as_str()),
        pod_waiting.as_ref().map_or(String::new(), |(d, _)| format!("{:.1} s after the Job", d.as_secs_f64())),
        to_failed.as_secs_f64(),
        to_job_gone.as_secs_f64(),
        to_pod_gone.as_secs_f64(),
        to_success.as_secs_f64(),
        id.clone().unwrap_or_default(),
        restore_to_parked.as_secs_f64(),
        restore_to_done.as_secs_f64(),
        maint_to_failed.as_secs_f64(),
        maint_to_job_gone.as_secs_f64(),
        started.elapsed().as_secs_f64(),
    );
    // A Job whose pods cannot be created (a ResourceQuota of zero pods): no pod ever exists, the
    // Job controller says why in FailedCreate Events, and after the deadline the Snapshot fails
    // MoverPodWedged quoting that cause, not after the Job's 48 h active deadline.
    let quotas: Api<k8s_openapi::api::core::v1::ResourceQuota> = Api::namespaced(client.clone(), &ns);
    apply(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-pods", "namespace": ns},
               "spec": {"hard": {"pods": "0"}}}),
    )
    .await?;
    wait_for("the quota counted", Duration::from_secs(60), &log, || async {
        let q = quotas.get("no-pods").await?;
        Ok(q.status.and_then(|s| s.hard).is_some_and(|h| h.contains_key("pods")).then_some(()))
    })
    .await?;
    apply(
        &client,
        &ns,
        json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": "quota", "namespace": ns},
            "spec": {"policyRef": {"name": "p"}, "failurePolicy": {"podStartupDeadlineSeconds": 1}}
        }),
    )
    .await?;
    let quota_created = Instant::now();
    let refused = wait_for("the quota-refused Snapshot Failed", Duration::from_secs(180), &log, || async {
        let s = snaps.get("quota").await?;
        Ok((s.phase() == "Failed").then_some(s))
    })
    .await?;
    let ready = refused.condition("Ready").cloned().context("Ready")?;
    assert_eq!(ready.reason, "MoverPodWedged", "{ready:?}");
    assert!(
        ready.message.contains("created no mover pod") && ready.message.contains("forbidden"),
        "the cause is quoted: {}",
        ready.message
    );
    assert!(ready.message.contains("ResourceQuota"), "{}", ready.message);
    let quota_to_failed = quota_created.elapsed();
    let by_quota = ListParams::default().labels("job-name=quota");
    assert!(Api::<Pod>::namespaced(client.clone(), &ns).list(&by_quota).await?.items.is_empty(), "no pod ever ran");
    wait_for("the quota-refused Job deleted", Duration::from_secs(60), &log, || async {
        Ok(jobs.get_opt("quota").await?.is_none().then_some(()))
    })
    .await?;
    quotas.delete("no-pods", &Default::default()).await?;
    println!(
        "quota: Snapshot applied -> Failed MoverPodWedged {:.1} s, Job deleted; {}",
        quota_to_failed.as_secs_f64(),
        ready.message
    );
    drop(op);
    Ok(())
}
