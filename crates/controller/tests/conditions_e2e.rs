//! Conditions and pre-checks end to end (docs/design/api-contract.md §1.6, §7.3–§7.4, §8, §9, §15), on one
//! private control plane with Garage, real kopia and the operator, every state read from a
//! watch (every version the apiserver reports, not samples):
//!
//! 1. **Held, then Deleting.** An external delete against a repository with
//!    `deletionProtection.threshold: 1` is held: phase `Deleting`, `DeletionHeld=True`, and the
//!    kstatus trio `Stalled=True` (Reconciling and Ready False). After the ack it is `Deleting`
//!    with `Reconciling=True` (Stalled False) until its batch Job deletes it. Every version the
//!    deletion path writes has exactly one of the trio True.
//! 2. **NamespaceNotAllowed is Stalled** (docs/design/api-contract.md §15): a Snapshot of a policy on a ClusterRepository
//!    that does not admit the namespace is `Pending`, `Stalled=True / NamespaceNotAllowed`, no
//!    Job; admitting the namespace moves it on by itself within 10 s.
//! 3. **Refusals** (docs/design/api-contract.md §7.1, §15): a manual Snapshot of a three-PVC policy without `spec.source`
//!    ends `Failed / SourceRequired` listing sourceIndex 0–2; one naming a repository outside
//!    its policy ends `Failed / RepositoryNotInPolicy`; one whose `policyRef` points into another
//!    namespace ends `Failed / CrossNamespaceReference`; of two policies with one identity in one
//!    repository the later is `Stalled / IdentityCollision` naming the earlier, and its Snapshot
//!    parks `Stalled / IdentityCollision`; none of them gets a Job.
//! 4. **The Restore's readiness gate and credentials pre-check** (docs/design/api-contract.md §9, docs/design/mover.md §1.2): a
//!    Restore (of a Snapshot whose namespace grants it) naming an absent Repository is Blocked (`Pending`, `Stalled=True /
//!    RepositoryNotFound`); once the Repository exists and is Ready, the Restore, whose namespace
//!    has no `kopia` Secret, is `Stalled / MissingCredentialsSecret` with
//!    `CredentialsAvailable=False` and no Job; a Secret without the password key says so; adding
//!    the key launches the restore Job within 10 s (the Secret watch, not the 60 s requeue), with
//!    `CredentialsAvailable=True / Found`.
//! 5. **SnapshotSchedule kstatus** (docs/design/api-contract.md §8): a schedule of a missing policy is `Reconciling /
//!    PolicyNotFound`; a cron of minute 61 is `Stalled / InvalidSchedule`; a suspended schedule
//!    is `Ready / Suspended`; a selector over two policies whose repositories' time zones differ
//!    has `TimezoneDefaultAmbiguous=True / RepositoryDefaultsDisagree`.
mod support;
use support::phase_watch;

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::Secret;
use kopiur_api::shared::status::Condition;
use kopiur_api::{Restore, Snapshot, SnapshotSchedule};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use phase_watch::{JobWatch, PhaseWatch};
use serde_json::json;
use support::metrics;
use support::status::{StatusExt, cond, is, one_true, summary};
use support::{Harness, RepoPin, items, names, seed_snapshots};

/// `Ready=False/Reason` style summary of the trio, for failure messages.
fn trio(cs: &[Condition]) -> String {
    summary(cs, &["Ready", "Reconciling", "Stalled"])
}

fn snap_state(s: &Snapshot) -> String {
    format!("{} {}", s.phase(), trio(s.conditions()))
}

fn restore_state(r: &Restore) -> String {
    let ca = r.condition("CredentialsAvailable").map(|c| format!("{}/{}", c.status, c.reason));
    format!("{} {} CredentialsAvailable={}", r.phase(), trio(r.conditions()), ca.unwrap_or("?".into()))
}

fn sched_state(s: &SnapshotSchedule) -> String {
    trio(s.conditions())
}

/// The resources the controller watches, one watch each (`crates/controller/src/controllers.rs`).
const WATCHED: [&str; 13] = [
    "jobs",
    "secrets",
    "namespaces",
    "persistentvolumeclaims",
    "repositories",
    "clusterrepositories",
    "snapshots",
    "snapshotschedules",
    "snapshotpolicies",
    "restores",
    "maintenances",
    "repositoryreplications",
    "snapshotreplications",
];

/// One watch per kind at start-up: once every watched resource has its watch open (each opens
/// after its first LIST), the controller's WATCH requests by resource are exactly one each and
/// name no other resource. A kind watched twice (a second reflector or `Controller::new` over
/// it) shows as 2 here.
async fn one_watch_per_kind_at_start_up(h: &Harness, started: Instant) -> Result<()> {
    let watches = |text: &str| -> std::collections::BTreeMap<String, f64> {
        metrics::sum_by(text, "kopiur_kube_client_requests_total", &[("verb", "watch"), ("client", "main")], "kind")
    };
    let by = Instant::now() + Duration::from_secs(30);
    let mut seen = watches(&h.metrics().await?);
    while WATCHED.iter().any(|k| !seen.contains_key(*k)) && Instant::now() < by {
        tokio::time::sleep(Duration::from_millis(250)).await;
        seen = watches(&h.metrics().await?);
    }
    // Any second watch of a kind is opened with its first (both at start-up): give a late
    // duplicate the time to show.
    tokio::time::sleep(Duration::from_secs(2)).await;
    seen = watches(&h.metrics().await?);
    let total: f64 = seen.values().sum();
    println!(
        "[{:5.1}s] watch streams opened at start-up: {total} for {} resources: {seen:?}",
        started.elapsed().as_secs_f64(),
        seen.len()
    );
    let expected: std::collections::BTreeMap<String, f64> = WATCHED.iter().map(|k| (k.to_string(), 1.0)).collect();
    ensure!(seen == expected, "one watch per kind at start-up: watches by resource {seen:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditions_and_prechecks_on_real_objects() -> Result<()> {
    let started = Instant::now();
    let mut h = Harness::start().await?;
    h.start_operator().await?;
    let _guard = h.env.log_guard();
    let jobs = JobWatch::start(h.client.clone());
    let ns = h.env.namespace("cond").await?;
    let kopia = h.kopia_repo("cond/").await?;
    let set = names("s", 2);
    let ids = kopia.seed(&set).await?;
    let repo = h.repository(&ns, "r", "cond/", json!({"deletionProtection": {"threshold": 1}})).await?;
    h.wait_repository_ready(&ns, "r", Duration::from_secs(120)).await?;
    one_watch_per_kind_at_start_up(&h, started).await?;
    let repo = Api::<kopiur_api::Repository>::namespaced(h.client.clone(), &ns).get(&repo.name_any()).await?;
    let uids = seed_snapshots(&h.client, &ns, &RepoPin::of(&repo), items(&set, &ids, "cond"), 2).await?;
    println!("[{:5.1}s] Repository {ns}/r Ready; 2 Snapshots seeded", started.elapsed().as_secs_f64());
    let snaps: Api<Snapshot> = Api::namespaced(h.client.clone(), &ns);
    let t = Duration::from_secs(30);

    // ---- 1. Held, then Deleting (docs/design/api-contract.md §7.3).
    let held_name = set[0].clone();
    let w = PhaseWatch::start(snaps.clone(), &held_name, snap_state);
    // The run path's terminal heal first (Ready=True), so the deletion path's writes follow it.
    w.wait("seeded Snapshot healed Ready", Duration::from_secs(60), |s| is(s.conditions(), "Ready", "True")).await?;
    let mark = w.mark();
    snaps.delete(&held_name, &DeleteParams::default()).await?;
    let held = w
        .wait_since("Deleting with DeletionHeld=True", mark, t, |s| {
            s.phase() == "Deleting" && is(s.conditions(), "DeletionHeld", "True")
        })
        .await?;
    let cs = held.object.conditions();
    ensure!(
        is(&cs, "Stalled", "True") && is(&cs, "Reconciling", "False") && is(&cs, "Ready", "False"),
        "a held Snapshot is Stalled (docs/design/api-contract.md §7.3): {}",
        trio(&cs)
    );
    ensure!(
        cond(&cs, "Stalled").is_some_and(|c| c.message.contains("mass-deletion")),
        "the Stalled message says why: {:?}",
        cond(&cs, "Stalled")
    );
    println!("[{:5.1}s] held: {}", started.elapsed().as_secs_f64(), snap_state(&held.object));
    let ack_mark = w.mark();
    h.ack(&ns, "r", &support::rfc3339(chrono::Utc::now())).await?;
    let acked = w
        .wait_since("Deleting, Reconciling after the ack", ack_mark, t, |s| {
            s.phase() == "Deleting"
                && is(s.conditions(), "DeletionHeld", "False")
                && is(s.conditions(), "Reconciling", "True")
        })
        .await?;
    let cs = acked.object.conditions();
    ensure!(is(&cs, "Stalled", "False") && is(&cs, "Ready", "False"), "acked, deleting: {}", trio(&cs));
    println!("[{:5.1}s] acked: {}", started.elapsed().as_secs_f64(), snap_state(&acked.object));
    // It heals by itself: the batch Job deletes it and the finalizer comes off.
    let gone_by = Instant::now() + Duration::from_secs(60);
    while snaps.get_opt(&held_name).await?.is_some() {
        ensure!(Instant::now() < gone_by, "the acked Snapshot was not deleted within 60 s");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Every version the deletion path wrote carried exactly one True of the trio.
    for v in w.since(mark).iter().filter(|v| v.object.phase() == "Deleting") {
        let cs = v.object.conditions();
        ensure!(one_true(&cs), "a Deleting version with {} True-count != 1", trio(&cs));
    }
    println!("[{:5.1}s] held Snapshot deleted after its ack", started.elapsed().as_secs_f64());

    // ---- 2. NamespaceNotAllowed is Stalled (docs/design/api-contract.md §15) and heals when the namespace is admitted.
    h.cluster_repository("cond-shared", "cond-shared/", json!({"list": ["nobody"]})).await?;
    let policies: Api<kopiur_api::SnapshotPolicy> = Api::namespaced(h.client.clone(), &ns);
    let policy = |name: &str, spec: serde_json::Value| -> Result<kopiur_api::SnapshotPolicy> {
        Ok(serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotPolicy",
            "metadata": {"name": name, "namespace": ns, "labels": {"cond": "tz"}}, "spec": spec,
        }))?)
    };
    let manual = |name: &str, spec: serde_json::Value| -> Result<Snapshot> {
        Ok(serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": name, "namespace": ns}, "spec": spec,
        }))?)
    };
    let pp = PostParams::default();
    policies
        .create(
            &pp,
            &policy(
                "shared",
                json!({"repository": {"kind": "ClusterRepository", "name": "cond-shared"}, "copyMethod": "Direct",
                "sources": [{"pvc": {"name": "data"}}]}),
            )?,
        )
        .await?;
    let na = PhaseWatch::start(snaps.clone(), "na", snap_state);
    let na_uid = snaps.create(&pp, &manual("na", json!({"policyRef": {"name": "shared"}}))?).await?.uid();
    let parked = na
        .wait("Pending, Stalled NamespaceNotAllowed", t, |s| {
            s.phase() == "Pending"
                && s.ready_reason().as_deref() == Some("NamespaceNotAllowed")
                && is(s.conditions(), "Stalled", "True")
        })
        .await?;
    ensure!(one_true(parked.object.conditions()), "{}", snap_state(&parked.object));
    let admit = Instant::now();
    let body = json!({"spec": {"allowedNamespaces": {"list": ["nobody", ns]}}});
    Api::<kopiur_api::ClusterRepository>::all(h.client.clone())
        .patch("cond-shared", &PatchParams::default(), &Patch::Merge(&body))
        .await?;
    let moved = na
        .wait("no longer NamespaceNotAllowed once admitted", Duration::from_secs(10), |s| {
            s.ready_reason().is_some_and(|r| r != "NamespaceNotAllowed")
        })
        .await?;
    println!(
        "[{:5.1}s] NamespaceNotAllowed Stalled; admitted -> {} after {:.1}s",
        started.elapsed().as_secs_f64(),
        snap_state(&moved.object),
        admit.elapsed().as_secs_f64()
    );

    // ---- 3. Refusals: SourceRequired and RepositoryNotInPolicy (docs/design/api-contract.md §7.1, §15).
    policies
        .create(
            &pp,
            &policy(
                "three",
                json!({"repository": {"name": "r"}, "copyMethod": "Direct",
                "sources": [{"pvc": {"name": "a"}}, {"pvc": {"name": "b"}}, {"pvc": {"name": "c"}}]}),
            )?,
        )
        .await?;
    let multi = PhaseWatch::start(snaps.clone(), "multi", snap_state);
    let wrong = PhaseWatch::start(snaps.clone(), "wrongrepo", snap_state);
    let multi_uid = snaps.create(&pp, &manual("multi", json!({"policyRef": {"name": "three"}}))?).await?.uid();
    let wrong_uid = snaps
        .create(
            &pp,
            &manual(
                "wrongrepo",
                json!({"policyRef": {"name": "three"}, "repository": {"name": "elsewhere"},
                    "source": {"sourceIndex": 0, "target": {"pvc": {"name": "a"}}}}),
            )?,
        )
        .await?;
    let wrong_uid = wrong_uid.uid();
    let failed =
        |reason: &'static str| move |s: &Snapshot| s.phase() == "Failed" && s.ready_reason().as_deref() == Some(reason);
    let m = multi.wait("Failed SourceRequired", t, failed("SourceRequired")).await?;
    let msg = m.object.condition("Ready").map(|c| c.message.clone()).unwrap_or_default();
    for want in ["sourceIndex 0 (pvc a)", "sourceIndex 1 (pvc b)", "sourceIndex 2 (pvc c)"] {
        ensure!(msg.contains(want), "the SourceRequired message lists {want}: {msg}");
    }
    ensure!(is(m.object.conditions(), "Stalled", "True"), "{}", snap_state(&m.object));
    let wr = wrong.wait("Failed RepositoryNotInPolicy", t, failed("RepositoryNotInPolicy")).await?;
    let msg = wr.object.condition("Ready").map(|c| c.message.clone()).unwrap_or_default();
    ensure!(msg.contains(&format!("Repository {ns}/elsewhere")) && msg.contains("three"), "{msg}");
    println!("[{:5.1}s] SourceRequired and RepositoryNotInPolicy: Failed", started.elapsed().as_secs_f64());

    // ---- 3b. IdentityCollision (docs/design/api-contract.md §6.5, §15): the later policy is Stalled naming the earlier
    // one, and its Snapshot runs nothing (its PVC exists, so no other gate stops it).
    let pvc: k8s_openapi::api::core::v1::PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "a", "namespace": ns},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }))?;
    Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(h.client.clone(), &ns)
        .create(&pp, &pvc)
        .await?;
    let twin = |name: &str| {
        policy(
            name,
            json!({"repository": {"name": "r"}, "copyMethod": "Direct", "sources": [{"pvc": {"name": "a"}}],
                "identity": {"username": "app", "hostname": "home"}}),
        )
    };
    policies.create(&pp, &twin("twin-a")?).await?;
    // Creation timestamps have second precision: the later one is created a second later.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    policies.create(&pp, &twin("twin-b")?).await?;
    let tb = PhaseWatch::start(policies.clone(), "twin-b", |p: &kopiur_api::SnapshotPolicy| {
        trio(&p.status.as_ref().map(|x| x.conditions.clone()).unwrap_or_default())
    });
    let stalled = tb
        .wait("twin-b Stalled IdentityCollision", t, |p| {
            let cs = p.status.as_ref().map(|x| x.conditions.clone()).unwrap_or_default();
            cond(&cs, "Stalled").is_some_and(|c| {
                c.status == "True" && c.reason == "IdentityCollision" && c.message.contains(&format!("{ns}/twin-a"))
            }) && one_true(&cs)
        })
        .await?;
    let ta = policies.get("twin-a").await?;
    let ta_conds = ta.status.map(|x| x.conditions).unwrap_or_default();
    ensure!(
        cond(&ta_conds, "Stalled").is_none_or(|c| c.reason != "IdentityCollision"),
        "the earlier policy is untouched: {}",
        trio(&ta_conds)
    );
    let tw = PhaseWatch::start(snaps.clone(), "twin-run", snap_state);
    let twin_uid = snaps.create(&pp, &manual("twin-run", json!({"policyRef": {"name": "twin-b"}}))?).await?.uid();
    tw.wait("twin-run Pending, Stalled IdentityCollision", t, |s| {
        s.phase() == "Pending"
            && s.ready_reason().as_deref() == Some("IdentityCollision")
            && is(s.conditions(), "Stalled", "True")
    })
    .await?;
    // PolicySuspended (docs/design/api-contract.md §6.1): a new Snapshot of a suspended policy parks Stalled, no Job.
    policies
        .create(
            &pp,
            &policy(
                "resting",
                json!({"suspend": true, "repository": {"name": "r"}, "copyMethod": "Direct",
                    "sources": [{"pvc": {"name": "a"}}]}),
            )?,
        )
        .await?;
    let rw0 = PhaseWatch::start(snaps.clone(), "rest-run", snap_state);
    let rest_uid = snaps.create(&pp, &manual("rest-run", json!({"policyRef": {"name": "resting"}}))?).await?.uid();
    rw0.wait("rest-run Pending, Stalled PolicySuspended", t, |s| {
        s.phase() == "Pending"
            && s.ready_reason().as_deref() == Some("PolicySuspended")
            && is(s.conditions(), "Stalled", "True")
            && one_true(s.conditions())
    })
    .await?;
    println!(
        "[{:5.1}s] IdentityCollision: {} ; its Snapshot parked",
        started.elapsed().as_secs_f64(),
        trio(&stalled.object.status.clone().unwrap_or_default().conditions)
    );

    // ---- 4. The Restore: Blocked (RepositoryNotFound), then the credentials pre-check.
    let rns = h.env.namespace("cond-restore").await?;
    // X (docs/design/api-contract.md §1.8): a Snapshot's policyRef into another namespace fails CrossNamespaceReference.
    let rsnaps: Api<Snapshot> = Api::namespaced(h.client.clone(), &rns);
    let xw = PhaseWatch::start(rsnaps.clone(), "xns", snap_state);
    let xns: Snapshot = serde_json::from_value(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
        "metadata": {"name": "xns", "namespace": rns},
        "spec": {"policyRef": {"name": "three", "namespace": ns},
                 "source": {"sourceIndex": 0, "target": {"pvc": {"name": "a"}}}}
    }))?;
    let xns_uid = rsnaps.create(&pp, &xns).await?.uid();
    xw.wait("xns Failed CrossNamespaceReference", t, failed("CrossNamespaceReference")).await?;
    // The Restore reads a Snapshot of namespace `ns`, which grants it (issue 31: without the
    // grant it would be Stalled CrossNamespaceReference).
    let grant = json!({"metadata": {"annotations": {kopiur_api::names::annotation::RESTORE_ALLOWED_NAMESPACES: rns}}});
    snaps.patch(&set[1], &PatchParams::default(), &Patch::Merge(&grant)).await?;
    let restores: Api<Restore> = Api::namespaced(h.client.clone(), &rns);
    let rw = PhaseWatch::start(restores.clone(), "rs", restore_state);
    let restore: Restore = serde_json::from_value(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Restore",
        "metadata": {"name": "rs", "namespace": rns},
        "spec": {
            "source": {"snapshotRef": {"name": set[1], "namespace": ns}},
            "repository": {"name": "r2", "namespace": ns},
            "target": {"pvc": {"name": "restored", "capacity": "1Gi"}}
        }
    }))?;
    let restore_uid = restores.create(&pp, &restore).await?.uid().unwrap_or_default();
    let blocked = rw
        .wait("Blocked: Pending, Stalled RepositoryNotFound", t, |r| {
            r.phase() == "Pending"
                && r.ready_reason().as_deref() == Some("RepositoryNotFound")
                && is(r.conditions(), "Stalled", "True")
        })
        .await?;
    ensure!(one_true(blocked.object.conditions()), "{}", restore_state(&blocked.object));
    println!("[{:5.1}s] Restore blocked: {}", started.elapsed().as_secs_f64(), restore_state(&blocked.object));
    // The repository appears (in another namespace, with another time zone for step 5).
    // It admits the Restore's namespace (a Repository serves another namespace only when it
    // lists it).
    h.repository(
        &ns,
        "r2",
        "cond/",
        json!({"scheduleDefaults": {"timezone": "Europe/Paris"}, "allowedNamespaces": [rns]}),
    )
    .await?;
    let nocreds = rw
        .wait("Stalled MissingCredentialsSecret", Duration::from_secs(120), |r| {
            r.ready_reason().as_deref() == Some("MissingCredentialsSecret")
        })
        .await?;
    let cs = nocreds.object.conditions();
    ensure!(
        nocreds.object.phase() == "Pending" && is(&cs, "Stalled", "True") && one_true(&cs),
        "{}",
        restore_state(&nocreds.object)
    );
    let ca = cond(&cs, "CredentialsAvailable").cloned();
    ensure!(
        ca.as_ref().is_some_and(|c| c.status == "False"
            && c.reason == "MissingCredentialsSecret"
            && c.message.contains(&format!("Secret kopia does not exist in namespace {rns}"))),
        "CredentialsAvailable: {ca:?}"
    );
    println!("[{:5.1}s] Restore: {}", started.elapsed().as_secs_f64(), restore_state(&nocreds.object));
    // A Secret without the password key.
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), &rns);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "kopia", "namespace": rns},
        "stringData": {"AWS_ACCESS_KEY_ID": h.garage.access_key(), "AWS_SECRET_ACCESS_KEY": h.garage.secret_key()}
    }))?;
    let mark = rw.mark();
    secrets.create(&pp, &secret).await?;
    let nokey = rw
        .wait_since("the missing key named", mark, Duration::from_secs(10), |r| {
            r.condition("CredentialsAvailable").is_some_and(|c| {
                c.status == "False"
                    && c.message.contains(&format!("Secret kopia in namespace {rns} has no key KOPIA_PASSWORD"))
            })
        })
        .await?;
    ensure!(is(nokey.object.conditions(), "Stalled", "True"), "{}", restore_state(&nokey.object));
    ensure!(jobs.owned_by(&restore_uid).is_empty(), "a Job was created before the credentials were there");
    // The key arrives: the restore Job within 10 s.
    let fixed = Instant::now();
    let body = json!({"stringData": {"KOPIA_PASSWORD": support::PASSWORD}});
    secrets.patch("kopia", &PatchParams::default(), &Patch::Merge(&body)).await?;
    let job = jobs.wait("the restore Job", Duration::from_secs(10), |j| j.owner_uid == restore_uid).await?;
    let launched = fixed.elapsed();
    let running = rw
        .wait("Restoring with CredentialsAvailable=True", Duration::from_secs(10), |r| {
            r.phase() == "Restoring"
                && r.condition("CredentialsAvailable").is_some_and(|c| c.status == "True" && c.reason == "Found")
        })
        .await?;
    println!(
        "[{:5.1}s] key added -> Job {} after {:.1}s; {}",
        started.elapsed().as_secs_f64(),
        job.name,
        launched.as_secs_f64(),
        restore_state(&running.object)
    );

    // ---- 5. SnapshotSchedule kstatus (docs/design/api-contract.md §8).
    policies
        .create(
            &pp,
            &policy(
                "paris",
                json!({"repository": {"name": "r2"}, "copyMethod": "Direct", "sources": [{"pvc": {"name": "a"}}]}),
            )?,
        )
        .await?;
    let scheds: Api<SnapshotSchedule> = Api::namespaced(h.client.clone(), &ns);
    let sched = |name: &str, spec: serde_json::Value| -> Result<SnapshotSchedule> {
        Ok(serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotSchedule",
            "metadata": {"name": name, "namespace": ns}, "spec": spec,
        }))?)
    };
    let cases = [
        (
            "nopolicy",
            json!({"policyRef": {"name": "missing"}, "schedule": {"cron": "0 0 1 1 *"}}),
            "PolicyNotFound",
            "Reconciling",
        ),
        (
            "minute61",
            json!({"policyRef": {"name": "three"}, "schedule": {"cron": "61 * * * *"}}),
            "InvalidSchedule",
            "Stalled",
        ),
        (
            "paused",
            json!({"policyRef": {"name": "three"}, "schedule": {"cron": "0 0 1 1 *", "suspend": true}}),
            "Suspended",
            "Ready",
        ),
        (
            "ofresting",
            json!({"policyRef": {"name": "resting"}, "schedule": {"cron": "0 0 1 1 *"}}),
            "PolicySuspended",
            "Stalled",
        ),
    ];
    let watches: Vec<_> = cases.iter().map(|(n, ..)| PhaseWatch::start(scheds.clone(), n, sched_state)).collect();
    for (name, spec, ..) in &cases {
        scheds.create(&pp, &sched(name, spec.clone())?).await?;
    }
    scheds
        .create(
            &pp,
            &sched(
                "both",
                json!({"policySelector": {"matchLabels": {"cond": "tz"}}, "schedule": {"cron": "0 0 1 1 *"}}),
            )?,
        )
        .await?;
    for ((name, _, reason, which), w) in cases.iter().zip(&watches) {
        let seen = w
            .wait(&format!("{name}: {which} / {reason}"), t, |s| {
                let cs = s.conditions();
                s.ready_reason().as_deref() == Some(*reason)
                    && is(&cs, which, "True")
                    && one_true(&cs)
                    && cond(&cs, "ScheduleRunnable").is_some_and(|c| c.status == "True" && c.reason == "Runnable")
            })
            .await?;
        println!("[{:5.1}s] schedule {name}: {}", started.elapsed().as_secs_f64(), sched_state(&seen.object));
    }
    let bw = PhaseWatch::start(scheds.clone(), "both", sched_state);
    let both = bw
        .wait("TimezoneDefaultAmbiguous=True / RepositoryDefaultsDisagree", t, |s| {
            let cs = s.status.as_ref().map(|x| x.conditions.clone()).unwrap_or_default();
            cond(&cs, "TimezoneDefaultAmbiguous")
                .is_some_and(|c| c.status == "True" && c.reason == "RepositoryDefaultsDisagree")
        })
        .await?;
    ensure!(one_true(&both.object.status.clone().unwrap_or_default().conditions), "{}", sched_state(&both.object));

    // No Job ever for the parked or refused Snapshots.
    for (what, uid) in [
        ("na", na_uid),
        ("multi", multi_uid),
        ("wrongrepo", wrong_uid),
        ("twin-run", twin_uid),
        ("xns", xns_uid),
        ("rest-run", rest_uid),
    ] {
        let uid = uid.unwrap_or_default();
        ensure!(jobs.owned_by(&uid).is_empty(), "Snapshot {what} got a Job: {:?}", jobs.owned_by(&uid));
    }

    // ---- Referents come from the watch caches, never from a LIST per event (docs/design/reconcile-shape.md §1.5):
    // 40 events on Snapshots, schedules, the repository and a Secret, and the controller's
    // LIST count does not move.
    let lists = |text: &str| -> std::collections::BTreeMap<String, f64> {
        metrics::sum_by(text, "kopiur_kube_client_requests_total", &[("verb", "list"), ("client", "main")], "kind")
    };
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), &ns);
    let repos: Api<kopiur_api::Repository> = Api::namespaced(h.client.clone(), &ns);
    // A repository's catalog listing (its first one after bootstrap, or one a deletion asked
    // for) lists every Snapshot once, a sync and not a reaction to an event, whenever its Job
    // finishes, which on a loaded machine can be inside the window (r2 was created moments
    // ago): wait until every repository here has listed and none has a scan pending.
    let settled = support::wait_for(
        "every repository's catalog listed, none pending",
        Duration::from_secs(180),
        &h.log(),
        || async {
            let mut out = Vec::new();
            for r in repos.list(&Default::default()).await?.items {
                let asked = r.annotations().get(kopiur_api::names::annotation::CATALOG_SCAN_REQUESTED_AT).cloned();
                let c = r.status.as_ref().and_then(|s| s.catalog.clone()).unwrap_or_default();
                if c.last_refresh_at.is_none() || asked.is_some() && asked != c.scan_request_honored {
                    return Ok(None);
                }
                out.push(r.name_any());
            }
            Ok(Some(out))
        },
    )
    .await?;
    println!("[{:5.1}s] catalogs listed and settled: {settled:?}", started.elapsed().as_secs_f64());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = lists(&h.metrics().await?);
    for i in 0..10 {
        let label = json!({"metadata": {"labels": {"events-test": format!("e{i}")}}});
        for s in snaps.list(&Default::default()).await?.items.iter().take(1) {
            snaps.patch(&s.name_any(), &PatchParams::default(), &Patch::Merge(&label)).await?;
        }
        for s in scheds.list(&Default::default()).await?.items.iter().take(1) {
            scheds.patch(&s.name_any(), &PatchParams::default(), &Patch::Merge(&label)).await?;
        }
        repos.patch("r", &PatchParams::default(), &Patch::Merge(&label)).await?;
        secrets.patch("kopia", &PatchParams::default(), &Patch::Merge(&label)).await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    let after = lists(&h.metrics().await?);
    let delta: std::collections::BTreeMap<&String, f64> =
        after.iter().map(|(k, v)| (k, v - before.get(k).copied().unwrap_or(0.0))).filter(|(_, d)| *d != 0.0).collect();
    println!(
        "[{:5.1}s] 40 events on Snapshots, schedules, the repository and a Secret: controller LISTs by resource {delta:?}",
        started.elapsed().as_secs_f64(),
    );
    ensure!(delta.is_empty(), "the controller LISTed on events: {delta:?}");

    // ---- The misleading Event (issue #16's third bug): a Restore whose pin carries no kopia
    // snapshot id cannot build its Job (`Error::WorkSpec`). Its Warning Event says
    // `WorkSpecInvalid` with the cause; it used to say `WorkSpecTooLarge`. The pin is written
    // while the operator is stopped, as no live path pins a snapshot without its id.
    // (Field by field: the log guard keeps `h.env` borrowed.)
    if let Some(mut op) = h.op.take() {
        op.stop();
    }
    let restores: Api<Restore> = Api::namespaced(h.client.clone(), &ns);
    let nopin: Restore = serde_json::from_value(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Restore",
        "metadata": {"name": "nopin", "namespace": ns},
        "spec": {
            "source": {"snapshotRef": {"name": set[1]}},
            "repository": {"name": "r"},
            "target": {"pvc": {"name": "nopin-target", "capacity": "1Gi"}}
        }
    }))?;
    let nopin_uid = restores.create(&pp, &nopin).await?.uid().unwrap_or_default();
    let pinned = json!({"status": {"resolved": {
        "resolution": "Snapshot",
        "pinnedAt": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "repository": {"kind": "Repository", "namespace": ns, "name": "r", "uid": repo.uid().unwrap_or_default()}
    }}});
    restores.patch_status("nopin", &PatchParams::default(), &Patch::Merge(&pinned)).await?;
    let wrapper = h.audit.wrapper.display().to_string();
    h.op = Some(
        kopiur_testenv::operator::Operator::start(&h.env, &h.op_ns, &[("KOPIUR_MOVER_KOPIA_BINARY", wrapper.as_str())])
            .await?,
    );
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(h.client.clone(), &ns);
    let lp = kube::api::ListParams::default().fields("involvedObject.name=nopin");
    let deadline = Instant::now() + Duration::from_secs(60);
    let reasons = loop {
        let evs = events.list(&lp).await?.items;
        let reasons: Vec<(String, String)> = evs
            .iter()
            .filter(|e| e.involved_object.uid.as_deref() == Some(nopin_uid.as_str()))
            .map(|e| (e.reason.clone().unwrap_or_default(), e.message.clone().unwrap_or_default()))
            .collect();
        if reasons.iter().any(|(r, _)| r == "WorkSpecInvalid") {
            break reasons;
        }
        ensure!(Instant::now() < deadline, "no WorkSpecInvalid Event on the unpinned Restore within 60 s: {reasons:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    println!("[{:5.1}s] the Restore pinned without an id: Events {reasons:?}", started.elapsed().as_secs_f64());
    ensure!(
        reasons.iter().any(|(r, m)| r == "WorkSpecInvalid" && m.contains("no pinned snapshot id")),
        "the Event names the cause: {reasons:?}"
    );
    ensure!(!reasons.iter().any(|(r, _)| r == "WorkSpecTooLarge"), "no misleading WorkSpecTooLarge: {reasons:?}");
    ensure!(jobs.owned_by(&nopin_uid).is_empty(), "no Job for it: {:?}", jobs.owned_by(&nopin_uid));

    println!("[{:5.1}s] done ({} seeded)", started.elapsed().as_secs_f64(), uids.len());
    Ok(())
}
