//! ADR-0006 mass-deletion protection end to end (issue 7 acceptance) on a private local
//! control plane, Garage and the real mover, with every mover kopia call audited:
//!
//! 1. flap replay: a schedule owning 30 Succeeded Snapshots deleted and recreated 5 times
//!    keeps every kopia snapshot and never creates a delete Job;
//! 2. a 600-Snapshot wave is held (DeletionHeld with the exact ack command, MassDeletionHeld,
//!    the held gauge), nothing deleted;
//! 3. an ack older than the wave releases nothing;
//! 4. 50 retention prunes complete while the wave is held, and drain no held member;
//! 5. a current ack drains the wave in at most 3 batch Jobs and 3 connects, Jobs reaped;
//! 6. a later wave is held again; 7. a lone delete is one batch of one;
//! 8. namespace teardown: Orphan keeps the data, Delete with 20 Snapshots is held until acked;
//! 9. the controller killed mid-batch deletes no snapshot twice and loses none.
//!
//! The flap (T22) counts exactly one `SnapshotRetainedOnScheduleDelete` per child (by uid,
//! summing an aggregated Event's count) and `deletions_total{outcome="cascade_retained"}`.
//!
//! A second test, `cluster_repository_tenancy_end_to_end`, covers ClusterRepository tenancy
//! on the same harness: batch deletes of an allowed namespace drain, a namespace outside
//! `allowedNamespaces` keeps its data until allowed, and a `selector` follows relabelling.
//! Alongside (own repositories, run concurrently): a `selector` ClusterRepository holds a
//! wave of 15 + 15 deletions across two selected namespaces, and the exact ack drains it in
//! ceil(30/200) = 1 batch Job with one connect, deleting nothing else; a batch whose kopia
//! delete fails (a one-shot fault in the audit wrapper) fails its Job, keeps every finalizer,
//! counts `deletion_batches_total{outcome="failed"}`, emits one `SnapshotDeletionBatchFailed`
//! and stamps `reverify-requested-at`, then re-batches and drains (T40); editing a schedule's
//! `onScheduleDelete` reaches its 8 children within 10 s, both ways (T43); and a tenant that
//! forges its own Snapshot's status with another tenant's kopia id and identity, then deletes it,
//! deletes nothing: the batch refuses it and says so (issue 31). Also red team (issue 31): Jobs a
//! tenant makes to look exactly like the controller's batch for another namespace's held members
//! release nothing and hold nothing; a Snapshot and a Maintenance naming another namespace's
//! Repository park `NamespaceNotAllowed` with no Job and that namespace's data intact.
//!
//! Seeding is direct (kopia CLI + API writes, see `support/seed.rs`), so the whole
//! file runs in a few minutes on 2 cores. Every count is printed.
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Event, Namespace};
use kopiur_api::{Repository, Snapshot};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

/// An acceptance check that does not stop the run: printed, collected, and failed at the end,
/// so one run reports every section.
macro_rules! check {
    ($fails:expr, $cond:expr, $($arg:tt)+) => {
        if !$cond {
            let m = format!($($arg)+);
            println!("CHECK FAILED: {m}");
            $fails.push(m);
        }
    };
}

mod support;
use support::status::StatusExt;
use support::*;

const FLAP: usize = 30;
const WAVE: usize = 600;
const PRUNE: usize = 50;
const WAVE2: usize = 15;
const NS_SNAPS: usize = 20;
/// The ClusterRepository selector wave: 15 + 15 in two selected namespaces (issue 16).
const SEL_WAVE: usize = 30;
/// T40: the batch whose delete fails once.
const FAULT_BATCH: usize = 5;
/// T43: children of the schedule whose `onScheduleDelete` is edited.
const PROP_CHILDREN: usize = 8;
const RETAINED_REASON: &str = "SnapshotRetainedOnScheduleDelete";

/// Occurrences of the Events in `ns` with `reason`, by involved object uid. An Event the
/// recorder repeats is one object whose `series.count` (or legacy `count`) says how often.
async fn event_counts_by_uid(client: &Client, ns: &str, reason: &str) -> Result<BTreeMap<String, i32>> {
    let l = Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default().fields(&format!("reason={reason}")))
        .await?;
    let mut by = BTreeMap::new();
    for e in &l.items {
        let n = e.series.as_ref().and_then(|s| s.count).unwrap_or_else(|| e.count.unwrap_or(1)).max(1);
        *by.entry(e.involved_object.uid.clone().unwrap_or_default()).or_insert(0) += n;
    }
    Ok(by)
}

/// Watches the Snapshots of `set` in `ns` (kube::runtime::watcher: every change is seen, none
/// sampled) until `done` holds for the current set; fails after `timeout` describing the set.
async fn watch_set_until<F>(client: &Client, ns: &str, set: &str, timeout: Duration, done: F) -> Result<()>
where
    F: Fn(&BTreeMap<String, Snapshot>) -> bool,
{
    use kube::runtime::watcher;
    let api: Api<Snapshot> = Api::namespaced(client.clone(), ns);
    let run = async {
        let mut stream = watcher(api, watcher::Config::default().labels(&format!("{SET}={set}"))).boxed();
        let (mut cur, mut init) = (BTreeMap::new(), BTreeMap::new());
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::Init) => init.clear(),
                Ok(watcher::Event::InitApply(s)) => {
                    init.insert(s.name_any(), s);
                    continue;
                }
                Ok(watcher::Event::InitDone) => cur = std::mem::take(&mut init),
                Ok(watcher::Event::Apply(s)) => {
                    cur.insert(s.name_any(), s);
                }
                Ok(watcher::Event::Delete(s)) => {
                    cur.remove(&s.name_any());
                }
                // The watcher re-lists by itself.
                Err(_) => continue,
            }
            if done(&cur) {
                return Ok(());
            }
        }
        anyhow::bail!("the Snapshot watch ended")
    };
    match tokio::time::timeout(timeout, run).await {
        Ok(r) => r,
        Err(_) => {
            let l = list_set(client, ns, set).await.unwrap_or_default();
            let stamps: Vec<String> =
                l.iter().map(|s| format!("{}={:?}", s.name_any(), s.spec.on_schedule_delete)).collect();
            anyhow::bail!("timed out after {timeout:?} watching {set} in {ns}: {} present, {stamps:?}", l.len())
        }
    }
}

/// `n` children owned (controller reference) by the SnapshotSchedule `schedule`/`uid`.
fn owned_children(
    names: &[String],
    ids: &BTreeMap<String, String>,
    set: &str,
    schedule: &str,
    uid: &str,
) -> Vec<SeedSnap> {
    let owner = json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotSchedule",
        "name": schedule, "uid": uid, "controller": true
    });
    children(names, ids, set, schedule, &owner)
}

/// Repository connects by the mover runs (pods) that deleted any of `ids`, and the number of
/// those runs: the batches that served these manifests.
fn connects_of_deleters(calls: &[Call], ids: &BTreeSet<String>) -> (usize, usize) {
    let hosts: BTreeSet<&str> = calls
        .iter()
        .filter(|c| c.is_delete() && c.delete_ids().iter().any(|i| ids.contains(i)))
        .map(|c| c.host.as_str())
        .collect();
    (calls.iter().filter(|c| c.is_connect() && hosts.contains(c.host.as_str())).count(), hosts.len())
}

/// Events in `ns` with `reason`: (total, distinct involved object names).
async fn events(client: &Client, ns: &str, reason: &str) -> Result<(usize, usize)> {
    let l = Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default().fields(&format!("reason={reason}")))
        .await?;
    let names: BTreeSet<String> = l.items.iter().filter_map(|e| e.involved_object.name.clone()).collect();
    Ok((l.items.len(), names.len()))
}

fn ids_of(names: &[String], ids: &BTreeMap<String, String>) -> BTreeSet<String> {
    names.iter().map(|n| ids[n].clone()).collect()
}

fn uids_of(names: &[String], uids: &BTreeMap<String, String>) -> BTreeSet<String> {
    names.iter().map(|n| uids[n].clone()).collect()
}

/// The exact release command a held Snapshot's message must carry.
fn ack_command(ns: &str, name: &str, v: &str) -> String {
    format!("kubectl annotate repository/{name} -n {ns} {ALLOW_MASS_DELETION}=\"{v}\" --overwrite")
}

/// The latest deletionTimestamp among `snaps`, as RFC3339 seconds (V of docs/design/mass-deletion.md §6.3.3).
fn latest_deletion(snaps: &[Snapshot]) -> Option<String> {
    snaps
        .iter()
        .filter_map(|s| s.metadata.deletion_timestamp.as_ref())
        .map(|t| t.0.as_second())
        .max()
        .and_then(|s| chrono::DateTime::<chrono::Utc>::from_timestamp(s, 0))
        .map(rfc3339)
}

/// Deletes every Snapshot of `set` the way `kubectl delete -l` does: list, then one DELETE
/// each (16 in flight). A single DeleteCollection of 600 finalized objects outlives the
/// apiserver's request timeout on 2 cores.
async fn delete_set(client: &Client, ns: &str, set: &str) -> Result<()> {
    let names: Vec<String> = list_set(client, ns, set).await?.iter().map(|s| s.name_any()).collect();
    delete_snapshots(client, ns, names, 48).await
}

/// Waits until every Snapshot of `set` is held; returns them.
async fn wait_held(h: &Harness, ns: &str, set: &str, n: usize, timeout: Duration) -> Result<Vec<Snapshot>> {
    let started = Instant::now();
    let out = wait_for(&format!("{n} Snapshots of {set} DeletionHeld=True"), timeout, &h.log(), || async {
        let l = list_set(&h.client, ns, set).await?;
        let held = l.iter().filter(|s| condition(s, "DeletionHeld").is_some_and(|c| c.status == "True")).count();
        Ok((l.len() == n && held == n).then_some(l))
    })
    .await;
    if out.is_err() {
        let l = list_set(&h.client, ns, set).await.unwrap_or_default();
        let held = l.iter().filter(|s| condition(s, "DeletionHeld").is_some_and(|c| c.status == "True")).count();
        let deleting = l.iter().filter(|s| s.metadata.deletion_timestamp.is_some()).count();
        let sample = l.first().map(|s| serde_json::to_string(&s.status).unwrap_or_default()).unwrap_or_default();
        println!(
            "[{set}] NOT HELD: {} present, {deleting} deleting, {held} DeletionHeld=True; sample status {sample}",
            l.len()
        );
    }
    let l = out?;
    println!("[{set}] all {n} DeletionHeld=True after {:.1}s", started.elapsed().as_secs_f64());
    Ok(l)
}

async fn wait_set_gone(h: &Harness, ns: &str, set: &str, timeout: Duration) -> Result<Duration> {
    let started = Instant::now();
    let r = wait_for(&format!("every Snapshot of {set} gone"), timeout, &h.log(), || async {
        Ok(list_set(&h.client, ns, set).await?.is_empty().then_some(()))
    })
    .await;
    if r.is_err() {
        let l = list_set(&h.client, ns, set).await.unwrap_or_default();
        let sample = l.first().map(|s| serde_json::to_string(&s.status).unwrap_or_default()).unwrap_or_default();
        println!("[{set}] NOT DRAINED: {} left; sample status {sample}", l.len());
    }
    r?;
    Ok(started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mass_deletion_protection_end_to_end() -> Result<()> {
    let mut h = Harness::start().await?;
    let res = scenarios(&mut h).await;
    if let Err(e) = &res {
        eprintln!("---- FAILED: {e:#}\n---- test environment logs ----\n{}", h.env.logs_summary(40));
        eprintln!("---- operator log tail ----\n{}", kopiur_testenv::process::log_tail(&h.log(), 80));
        h.env.keep_logs("deletion_e2e");
    }
    h.stop_operator();
    res
}

/// ClusterRepository tenancy end to end (issue 16): the batch-delete dispatcher acts for the
/// repository itself, so deleting a Snapshot of a ClusterRepository with
/// `allowedNamespaces.list: [tenant]` drains through a batch Job in the operator namespace,
/// while a Snapshot of a namespace that is not allowed keeps its kopia snapshot and parks
/// `NamespaceNotAllowed` until the namespace is allowed. With `allowedNamespaces.selector`,
/// relabelling a namespace flips its consumers (a Maintenance, a deleting Snapshot) between
/// `NamespaceNotAllowed` and running within 10 s, without restarting anything. Alongside: the
/// selector wave of 30, the failed batch (T40) and the onScheduleDelete propagation (T43).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_repository_tenancy_end_to_end() -> Result<()> {
    let mut h = Harness::start().await?;
    let res = tenancy(&mut h).await;
    if let Err(e) = &res {
        eprintln!("---- FAILED: {e:#}\n---- test environment logs ----\n{}", h.env.logs_summary(40));
        eprintln!("---- operator log tail ----\n{}", kopiur_testenv::process::log_tail(&h.log(), 80));
        h.env.keep_logs("deletion_e2e_tenancy");
    }
    h.stop_operator();
    res
}

const TENANT_LABEL: &str = "deletion-e2e/tenant";

async fn label_namespace(client: &Client, ns: &str, value: &str) -> Result<()> {
    let body = json!({"metadata": {"labels": {TENANT_LABEL: value}}});
    Api::<Namespace>::all(client.clone()).patch(ns, &PatchParams::default(), &Patch::Merge(&body)).await?;
    Ok(())
}

async fn maintenance_ready(client: &Client, ns: &str, name: &str) -> Result<Option<(String, String)>> {
    let m = Api::<kopiur_api::Maintenance>::namespaced(client.clone(), ns).get(name).await?;
    Ok(m.status.and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Ready")).map(|c| (c.status, c.reason)))
}

async fn tenancy(h: &mut Harness) -> Result<()> {
    let t0 = Instant::now();
    let client = h.client.clone();
    let tenant = h.env.namespace("tenant").await?;
    let outsider = h.env.namespace("outsider").await?;
    let labelled = h.env.namespace("labelled").await?;
    label_namespace(&client, &labelled, "in").await?;

    // Seed (operator not running): two kopia repositories, two ClusterRepositories over them,
    // Succeeded Snapshots pinned to them in three namespaces.
    let (k_list, k_sel) = futures::try_join!(h.kopia_repo("crlist/"), h.kopia_repo("crsel/"))?;
    let tenant_names = names("tl", 2);
    let out_names = names("to", 1);
    let sel_names = names("ts", 1);
    let list_all: Vec<String> = [tenant_names.clone(), out_names.clone()].concat();
    let (list_ids, sel_ids) = futures::try_join!(k_list.seed(&list_all), k_sel.seed(&sel_names))?;
    let c_list = h.cluster_repository("tenancy-list", "crlist/", json!({"list": [tenant]})).await?;
    let c_sel = h
        .cluster_repository("tenancy-sel", "crsel/", json!({"selector": {"matchLabels": {TENANT_LABEL: "in"}}}))
        .await?;
    let (pin_list, pin_sel) = (RepoPin::of_cluster(&c_list), RepoPin::of_cluster(&c_sel));
    let tenant_uids = seed_snapshots(&client, &tenant, &pin_list, items(&tenant_names, &list_ids, "tl"), 4).await?;
    let out_uids = seed_snapshots(&client, &outsider, &pin_list, items(&out_names, &list_ids, "to"), 4).await?;
    let sel_uids = seed_snapshots(&client, &labelled, &pin_sel, items(&sel_names, &sel_ids, "ts"), 4).await?;
    // The selector wave (issue 16 acceptance): a third ClusterRepository admitting namespaces
    // labelled `wave`, 15 + 15 Snapshots to delete and one to keep in each of two namespaces.
    let (wave_a, wave_b, faulty) =
        futures::try_join!(h.env.namespace("wave-a"), h.env.namespace("wave-b"), h.env.namespace("faulty"))?;
    label_namespace(&client, &wave_a, "wave").await?;
    label_namespace(&client, &wave_b, "wave").await?;
    let (k_wave, k_flaky) = futures::try_join!(h.kopia_repo("crwave/"), h.kopia_repo("flaky/"))?;
    let (wa_names, wb_names) = (names("wa", SEL_WAVE / 2), names("wb", SEL_WAVE / 2));
    let (ka_names, kb_names) = (names("ka", 1), names("kb", 1));
    let (fl_names, pr_names) = (names("fl", FAULT_BATCH), names("pr", PROP_CHILDREN));
    let wave_all: Vec<String> = [&wa_names, &wb_names, &ka_names, &kb_names].into_iter().flatten().cloned().collect();
    let flaky_all: Vec<String> = [fl_names.clone(), pr_names.clone()].concat();
    let (wave_ids, flaky_ids) = futures::try_join!(k_wave.seed(&wave_all), k_flaky.seed(&flaky_all))?;
    let c_wave = h
        .cluster_repository("tenancy-wave", "crwave/", json!({"selector": {"matchLabels": {TENANT_LABEL: "wave"}}}))
        .await?;
    let pin_wave = RepoPin::of_cluster(&c_wave);
    let r_flaky = h.repository(&faulty, "flaky", "flaky/", json!({})).await?;
    let pin_flaky = RepoPin::of(&r_flaky);
    let mut wa_items = items(&wa_names, &wave_ids, "wa");
    wa_items.extend(items(&ka_names, &wave_ids, "keep"));
    let mut wb_items = items(&wb_names, &wave_ids, "wb");
    wb_items.extend(items(&kb_names, &wave_ids, "keep"));
    // T43: a schedule whose 8 children carry no stamp yet.
    let schedules: Api<kopiur_api::SnapshotSchedule> = Api::namespaced(client.clone(), &faulty);
    let prop: kopiur_api::SnapshotSchedule = serde_json::from_value(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotSchedule",
        "metadata": {"name": "prop", "namespace": faulty},
        "spec": {"policyRef": {"name": ABSENT_POLICY}, "schedule": {"cron": "0 0 1 1 *", "suspend": true}}
    }))?;
    let prop = schedules.create(&Default::default(), &prop).await?;
    let prop_children = owned_children(&pr_names, &flaky_ids, "pr", "prop", &prop.uid().context("schedule uid")?);
    let (wa_uids, wb_uids, fl_uids, _) = futures::try_join!(
        seed_snapshots(&client, &wave_a, &pin_wave, wa_items, 8),
        seed_snapshots(&client, &wave_b, &pin_wave, wb_items, 8),
        seed_snapshots(&client, &faulty, &pin_flaky, items(&fl_names, &flaky_ids, "fl"), 4),
        seed_snapshots(&client, &faulty, &pin_flaky, prop_children, 4),
    )?;
    // Red team (issue 31): in a ClusterRepository two namespaces share, the victim's backup is
    // made as kopiur makes it (its Snapshot first, then the manifest tagged with that uid); the
    // forger copies the victim's kopia id and recorded identity into its own Snapshot's status,
    // as a Pod with the mover account can, then deletes its Snapshot.
    let (victim_ns, forger_ns) = futures::try_join!(h.env.namespace("victim"), h.env.namespace("forger"))?;
    let k_forge = h.kopia_repo("crforge/").await?;
    let c_forge = h.cluster_repository("tenancy-forge", "crforge/", json!({"list": [victim_ns, forger_ns]})).await?;
    let pin_forge = RepoPin::of_cluster(&c_forge);
    let precious = vec!["precious".to_string()];
    let placeholder = BTreeMap::from([(precious[0].clone(), "0".repeat(32))]);
    let victim_uids =
        seed_snapshots(&client, &victim_ns, &pin_forge, items(&precious, &placeholder, "precious"), 1).await?;
    let victim_id = k_forge.seed_tagged(&precious[0], &victim_uids[&precious[0]]).await?;
    let real = BTreeMap::from([(precious[0].clone(), victim_id.clone())]);
    seed_snapshots(&client, &victim_ns, &pin_forge, items(&precious, &real, "precious"), 1).await?;
    let forged_names = vec!["forged".to_string()];
    let forged_ids = BTreeMap::from([(forged_names[0].clone(), victim_id.clone())]);
    let forger_uids =
        seed_snapshots(&client, &forger_ns, &pin_forge, items(&forged_names, &forged_ids, "forged"), 1).await?;
    // Red team (issue 31, audit 2.9): the victim's own Repository holds a manifest made outside
    // kopiur (no uid tag: vouched for by its source alone); the forger points a Snapshot of its
    // namespace at that Repository with the victim's id and source, and a Maintenance at it.
    let k_vault = h.kopia_repo("nsvault/").await?;
    let vault_names = vec!["vaulted".to_string()];
    let vault_ids = k_vault.seed(&vault_names).await?;
    let r_vault = h.repository(&victim_ns, "vault", "nsvault/", json!({})).await?;
    let pin_vault = RepoPin::of(&r_vault);
    seed_snapshots(&client, &victim_ns, &pin_vault, items(&vault_names, &vault_ids, "vaulted"), 1).await?;
    let borrowed = vec!["borrowed".to_string()];
    let borrowed_ids = BTreeMap::from([(borrowed[0].clone(), vault_ids[&vault_names[0]].clone())]);
    let borrowed_uids =
        seed_snapshots(&client, &forger_ns, &pin_vault, items(&borrowed, &borrowed_ids, "borrowed"), 1).await?;
    let (jobs, recorder) = JobRecorder::spawn(client.clone());
    h.start_operator().await?;
    futures::try_join!(
        h.wait_repository_ready(&victim_ns, "vault", Duration::from_secs(120)),
        h.wait_cluster_repository_ready("tenancy-forge", Duration::from_secs(120)),
        h.wait_cluster_repository_ready("tenancy-list", Duration::from_secs(120)),
        h.wait_cluster_repository_ready("tenancy-sel", Duration::from_secs(120)),
        h.wait_cluster_repository_ready("tenancy-wave", Duration::from_secs(120)),
        h.wait_repository_ready(&faulty, "flaky", Duration::from_secs(120)),
    )?;
    println!("[tenancy] seeded; the 3 ClusterRepositories and flaky Ready after {:.1}s", t0.elapsed().as_secs_f64());
    let h: &Harness = h;
    // The selector wave then the propagation, and the failed batch (which waits 60 s for its
    // failed Job to be reaped), run alongside the list/selector checks below: each has its own
    // repository and its own Snapshots.
    let wave = async {
        let w = SelWave {
            a: &wave_a,
            b: &wave_b,
            pin: &pin_wave,
            k: &k_wave,
            ids: &wave_ids,
            a_uids: &wa_uids,
            b_uids: &wb_uids,
            keep: [ka_names[0].clone(), kb_names[0].clone()],
        };
        selector_wave(h, &jobs, w).await.context("selector wave")?;
        onscheduledelete_propagation(h, &faulty).await.context("onScheduleDelete propagation (T43)")
    };
    let fault = async {
        failed_batch(h, &jobs, &faulty, &k_flaky, &flaky_ids, &fl_names, &fl_uids).await.context("failed batch (T40)")
    };

    let list_and_selector = async {
        // ---- list: a tenant's deletion drains through a batch Job in the operator namespace; an
        // outsider's deletion keeps its data and parks NamespaceNotAllowed.
        let tenant_uid_set: BTreeSet<String> = tenant_uids.values().cloned().collect();
        let out_uid_set: BTreeSet<String> = out_uids.values().cloned().collect();
        let out_id = list_ids[&out_names[0]].clone();
        delete_set(&client, &tenant, "tl").await?;
        delete_set(&client, &outsider, "to").await?;
        let took = wait_set_gone(h, &tenant, "tl", Duration::from_secs(120)).await?;
        let tenant_jobs = jobs.touching(&tenant_uid_set);
        println!(
            "[tenancy list] tenant Snapshots drained in {:.1}s through {:?}",
            took.as_secs_f64(),
            tenant_jobs.iter().map(|j| (&j.namespace, &j.name, j.members.len())).collect::<Vec<_>>()
        );
        ensure!(!tenant_jobs.is_empty(), "no batch Job deleted the tenant's Snapshots");
        ensure!(tenant_jobs.iter().all(|j| j.namespace == h.op_ns), "batch Jobs run in the operator namespace");
        ensure!(tenant_jobs.iter().all(|j| j.repo_uid == pin_list.uid), "batch Jobs belong to the ClusterRepository");
        let left = k_list.list().await?;
        ensure!(tenant_names.iter().all(|n| !left.contains(&list_ids[n])), "the tenant's kopia snapshots deleted");
        let snaps_out: Api<Snapshot> = Api::namespaced(client.clone(), &outsider);
        let parked =
            wait_for("the outsider's Snapshot NamespaceNotAllowed", Duration::from_secs(60), &h.log(), || async {
                let s = snaps_out.get(&out_names[0]).await?;
                Ok((s.ready_reason().as_deref() == Some("NamespaceNotAllowed")).then_some(s))
            })
            .await?;
        println!(
            "[tenancy list] outsider parked: {:?}",
            condition(&parked, "Ready").map(|c| c.message.clone()).unwrap_or_default()
        );
        ensure!(parked.finalizers().iter().any(|f| f == FINALIZER), "the outsider's finalizer is kept");
        ensure!(k_list.list().await?.contains(&out_id), "the outsider's kopia snapshot is kept");
        ensure!(jobs.touching(&out_uid_set).is_empty(), "no batch Job for a namespace that is not allowed");

        // Allowing the namespace releases it: the kept member joins a batch.
        Api::<kopiur_api::ClusterRepository>::all(client.clone())
            .patch(
                "tenancy-list",
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"allowedNamespaces": {"list": [tenant, outsider]}}})),
            )
            .await?;
        let took = wait_set_gone(h, &outsider, "to", Duration::from_secs(120)).await?;
        ensure!(!k_list.list().await?.contains(&out_id), "the outsider's kopia snapshot deleted once allowed");
        ensure!(jobs.touching(&out_uid_set).iter().all(|j| j.namespace == h.op_ns), "its batch ran in the operator ns");
        println!("[tenancy list] outsider allowed: drained {:.1}s after the edit", took.as_secs_f64());

        // ---- selector: a Maintenance in the labelled namespace is admitted; relabelled out it
        // parks NamespaceNotAllowed within 10 s, and back in it is admitted again.
        kopiur_testenv::apply::apply_value(
            &client,
            &labelled,
            &json!({
                "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Maintenance",
                "metadata": {"name": "m", "namespace": labelled},
                // Yearly slots: nothing runs during the test.
                "spec": {"repository": {"kind": "ClusterRepository", "name": "tenancy-sel"},
                         "schedule": {"quick": {"cron": "0 0 1 1 *"}, "full": {"cron": "30 0 1 1 *"}}}
            }),
        )
        .await?;
        wait_for("m admitted (Ready=True)", Duration::from_secs(60), &h.log(), || async {
            Ok((maintenance_ready(&client, &labelled, "m").await?.map(|x| x.0).as_deref() == Some("True"))
                .then_some(()))
        })
        .await?;
        label_namespace(&client, &labelled, "out").await?;
        let relabelled = Instant::now();
        wait_for("m NamespaceNotAllowed after the relabel", Duration::from_secs(10), &h.log(), || async {
            let r = maintenance_ready(&client, &labelled, "m").await?;
            Ok((r == Some(("False".into(), "NamespaceNotAllowed".into()))).then_some(()))
        })
        .await?;
        println!("[tenancy selector] relabelled out: m parked after {:.1}s", relabelled.elapsed().as_secs_f64());
        // A deletion while out keeps the data and parks.
        let sel_uid_set: BTreeSet<String> = sel_uids.values().cloned().collect();
        let sel_id = sel_ids[&sel_names[0]].clone();
        delete_set(&client, &labelled, "ts").await?;
        let snaps_sel: Api<Snapshot> = Api::namespaced(client.clone(), &labelled);
        wait_for("the labelled Snapshot NamespaceNotAllowed", Duration::from_secs(60), &h.log(), || async {
            let s = snaps_sel.get(&sel_names[0]).await?;
            Ok((s.ready_reason().as_deref() == Some("NamespaceNotAllowed")).then_some(()))
        })
        .await?;
        // Past the quiet window: still nothing deleted.
        tokio::time::sleep(Duration::from_secs(15)).await;
        ensure!(snaps_sel.get_opt(&sel_names[0]).await?.is_some(), "a Snapshot outside the selector was released");
        ensure!(k_sel.list().await?.contains(&sel_id), "a Snapshot outside the selector lost its data");
        ensure!(jobs.touching(&sel_uid_set).is_empty(), "a batch Job for a namespace outside the selector");
        label_namespace(&client, &labelled, "in").await?;
        let relabelled = Instant::now();
        wait_for("m admitted again after the relabel", Duration::from_secs(10), &h.log(), || async {
            Ok((maintenance_ready(&client, &labelled, "m").await?.map(|x| x.0).as_deref() == Some("True"))
                .then_some(()))
        })
        .await?;
        println!("[tenancy selector] relabelled in: m admitted after {:.1}s", relabelled.elapsed().as_secs_f64());
        let took = wait_set_gone(h, &labelled, "ts", Duration::from_secs(90)).await?;
        ensure!(!k_sel.list().await?.contains(&sel_id), "the labelled Snapshot's kopia snapshot deleted once admitted");
        ensure!(jobs.touching(&sel_uid_set).iter().all(|j| j.namespace == h.op_ns), "its batch ran in the operator ns");
        println!("[tenancy selector] the parked deletion drained {:.1}s after the relabel", took.as_secs_f64());
        Ok::<(), anyhow::Error>(())
    };
    let forged = async {
        let f = Forged { victim_ns: &victim_ns, forger_ns: &forger_ns, k: &k_forge, victim_id: &victim_id };
        forged_status(h, &jobs, f, &forger_uids).await.context("forged status (issue 31)")
    };
    let restores = async {
        cross_namespace_restores(h, &victim_ns, &forger_ns).await.context("cross-namespace restores (issue 31)")?;
        foreign_hostname_policy(h, &victim_ns, &forger_ns).await.context("a policy under another hostname (issue 31)")
    };
    let foreign = async {
        let f =
            Foreign { victim_ns: &victim_ns, forger_ns: &forger_ns, k: &k_vault, victim_id: &borrowed_ids["borrowed"] };
        foreign_repository(h, &jobs, f, &borrowed_uids["borrowed"])
            .await
            .context("another namespace's Repository (issue 31)")
    };
    futures::try_join!(list_and_selector, wave, fault, forged, restores, foreign)?;
    // After a failed batch, refusals and forged statuses: no fixture secret anywhere a tenant or
    // an operator reads.
    let extra = vec![
        ("the controller's log".to_string(), std::fs::read_to_string(h.log())?),
        ("/metrics".to_string(), h.metrics().await?),
    ];
    let searched = sweep_for_secrets(&h.client, extra, &[PASSWORD, h.garage.secret_key()]).await?;
    println!("[secrets sweep] {searched} objects, Events, the controller's log and /metrics: no fixture secret");
    recorder.abort();
    println!("tenancy e2e total {:.1}s", t0.elapsed().as_secs_f64());
    Ok(())
}

struct Forged<'a> {
    victim_ns: &'a str,
    forger_ns: &'a str,
    k: &'a KopiaRepo,
    victim_id: &'a str,
}

/// Issue 31: a Snapshot whose status names another tenant's kopia snapshot (its id and even its
/// recorded identity) is deleted. The batch refuses it (the manifest's `kopiur-uid` tag names the
/// victim's Snapshot): the victim's data and Snapshot are intact, the forger's Snapshot keeps its
/// finalizer with `DeletionRefused=True` (Stalled) and one `SnapshotDeletionRefused` Warning, it
/// is never batched again, and `skip-snapshot-cleanup` lets it go while keeping the data.
async fn forged_status(h: &Harness, jobs: &JobRecorder, f: Forged<'_>, uids: &BTreeMap<String, String>) -> Result<()> {
    use kopiur_api::names::{annotation::SKIP_SNAPSHOT_CLEANUP, event::SNAPSHOT_DELETION_REFUSED};
    let client = &h.client;
    let forger_uid = uids["forged"].clone();
    let member: BTreeSet<String> = [forger_uid.clone()].into();
    let started = Instant::now();
    delete_set(client, f.forger_ns, "forged").await?;
    let snaps: Api<Snapshot> = Api::namespaced(client.clone(), f.forger_ns);
    let message = wait_for("the forged Snapshot DeletionRefused=True", Duration::from_secs(180), &h.log(), || async {
        let s = snaps.get("forged").await?;
        Ok(condition(&s, "DeletionRefused").filter(|c| c.status == "True").map(|c| c.message.clone()))
    })
    .await?;
    let refused_after = started.elapsed();
    ensure!(message.contains("kopiur-uid tag") && message.contains(f.victim_id), "{message}");
    ensure!(message.contains(&format!("{SKIP_SNAPSHOT_CLEANUP}=true")), "the way out is named: {message}");
    let s = snaps.get("forged").await?;
    ensure!(s.finalizers().iter().any(|x| x == FINALIZER), "the refused Snapshot kept its finalizer");
    ensure!(condition(&s, "Stalled").is_some_and(|c| c.status == "True"), "a refused member is Stalled");
    ensure!(f.k.list().await?.contains(f.victim_id), "the victim's kopia snapshot was deleted");
    let victim = Api::<Snapshot>::namespaced(client.clone(), f.victim_ns).get("precious").await?;
    ensure!(victim.metadata.deletion_timestamp.is_none(), "the victim's Snapshot is not being deleted");
    let batch = jobs.touching(&member);
    ensure!(batch.len() == 1 && batch[0].failed && batch[0].namespace == h.op_ns, "one failed batch: {batch:?}");
    // Past the failed Job's reap (60 s) and a quiet window: never batched again.
    tokio::time::sleep(Duration::from_secs(80)).await;
    let batches = jobs.touching(&member).len();
    ensure!(batches == 1, "the refused member was batched {batches} times");
    let ev = event_counts_by_uid(client, f.forger_ns, SNAPSHOT_DELETION_REFUSED).await?;
    ensure!(ev.get(&forger_uid) == Some(&1) && ev.len() == 1, "exactly one SnapshotDeletionRefused: {ev:?}");
    // The way out the message names: the Snapshot goes, the data stays.
    let body = json!({"metadata": {"annotations": {SKIP_SNAPSHOT_CLEANUP: "true"}}});
    snaps.patch("forged", &PatchParams::default(), &Patch::Merge(&body)).await?;
    let took = wait_set_gone(h, f.forger_ns, "forged", Duration::from_secs(60)).await?;
    ensure!(f.k.list().await?.contains(f.victim_id), "releasing the refused Snapshot deleted the victim's data");
    println!(
        "[forged status] refused {:.1}s after the delete ({message}); one batch, one Warning; released by {SKIP_SNAPSHOT_CLEANUP} in {:.1}s; the victim's {} intact",
        refused_after.as_secs_f64(),
        took.as_secs_f64(),
        f.victim_id
    );
    Ok(())
}

struct Foreign<'a> {
    victim_ns: &'a str,
    forger_ns: &'a str,
    k: &'a KopiaRepo,
    victim_id: &'a str,
}

/// Issue 31 (audit 2.9): the victim's namespaced Repository lists no other namespace. The
/// forger's Snapshot that names it (carrying the victim's kopia id and source) is deleted: it
/// parks `NamespaceNotAllowed` with its finalizer, no batch Job runs (a batch would run in the
/// victim's namespace with the victim's credentials), and the victim's manifest is intact. A
/// Maintenance of the forger's naming that Repository parks the same way, with no Job.
async fn foreign_repository(h: &Harness, jobs: &JobRecorder, f: Foreign<'_>, uid: &str) -> Result<()> {
    use k8s_openapi::api::batch::v1::Job;
    let client = &h.client;
    let started = Instant::now();
    kopiur_testenv::apply::apply_value(
        client,
        f.forger_ns,
        &json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Maintenance",
            "metadata": {"name": "borrowed-m", "namespace": f.forger_ns},
            "spec": {"repository": {"name": "vault", "namespace": f.victim_ns},
                     "schedule": {"quick": {"cron": "* * * * *"}, "full": {"cron": "* * * * *"}}}
        }),
    )
    .await?;
    delete_set(client, f.forger_ns, "borrowed").await?;
    let snaps: Api<Snapshot> = Api::namespaced(client.clone(), f.forger_ns);
    let parked = wait_for("the borrowing Snapshot NamespaceNotAllowed", Duration::from_secs(60), &h.log(), || async {
        let s = snaps.get("borrowed").await?;
        Ok((s.ready_reason().as_deref() == Some("NamespaceNotAllowed")).then_some(s))
    })
    .await?;
    let message = condition(&parked, "Ready").map(|c| c.message.clone()).unwrap_or_default();
    ensure!(message.contains("spec.allowedNamespaces") && message.contains(f.victim_ns), "{message}");
    wait_for("the borrowing Maintenance NamespaceNotAllowed", Duration::from_secs(60), &h.log(), || async {
        let r = maintenance_ready(client, f.forger_ns, "borrowed-m").await?;
        Ok((r == Some(("False".into(), "NamespaceNotAllowed".into()))).then_some(()))
    })
    .await?;
    // Past a quiet window and a minute slot of the Maintenance: still nothing ran.
    tokio::time::sleep(Duration::from_secs(65)).await;
    let s = snaps.get("borrowed").await?;
    ensure!(s.finalizers().iter().any(|x| x == FINALIZER), "the borrowing Snapshot lost its finalizer");
    ensure!(jobs.touching(&[uid.to_string()].into()).is_empty(), "a batch Job for the borrowing Snapshot");
    let by_maintenance = ListParams::default().labels(&format!("{}=borrowed-m", kopiur_api::names::label::MAINTENANCE));
    for ns in [f.forger_ns, f.victim_ns] {
        let js = Api::<Job>::namespaced(client.clone(), ns).list(&by_maintenance).await?.items;
        let names: Vec<String> = js.iter().map(|j| j.name_any()).collect();
        ensure!(names.is_empty(), "a maintenance Job ran in {ns} for the borrowed Repository: {names:?}");
    }
    ensure!(f.k.list().await?.contains(f.victim_id), "the victim's kopia snapshot was deleted");
    let victim = Api::<Snapshot>::namespaced(client.clone(), f.victim_ns).get("vaulted").await?;
    ensure!(victim.metadata.deletion_timestamp.is_none(), "the victim's Snapshot is being deleted");
    println!(
        "[foreign repository] the borrowing Snapshot and Maintenance parked NamespaceNotAllowed ({message}); after {:.1}s no Job, the victim's {} intact",
        started.elapsed().as_secs_f64(),
        f.victim_id
    );
    Ok(())
}

/// Issue 31: a tenant with rights only in its own namespace tries to restore another
/// namespace's data three ways (by `snapshotRef`, by `fromPolicy`, by identity) and into another
/// namespace's PVC: each is Stalled `CrossNamespaceReference` naming the grant, with no Job and
/// no PVC. Once the owner annotates its Snapshot, the `snapshotRef` Restore is no longer refused.
async fn cross_namespace_restores(h: &Harness, victim_ns: &str, forger_ns: &str) -> Result<()> {
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use kopiur_api::names::annotation::RESTORE_ALLOWED_NAMESPACES;
    let client = &h.client;
    let started = Instant::now();
    let shared = json!({"kind": "ClusterRepository", "name": "tenancy-forge"});
    let copy = json!({"pvc": {"name": "stolen", "capacity": "1Gi"}});
    let attempts = [
        ("by-ref", json!({"snapshotRef": {"name": "precious", "namespace": victim_ns}}), copy.clone()),
        ("by-policy", json!({"fromPolicy": {"name": "app", "namespace": victim_ns}}), copy.clone()),
        ("by-identity", json!({"identity": {"username": "app", "hostname": victim_ns}}), copy.clone()),
        (
            "into-theirs",
            json!({"snapshotRef": {"name": "forged"}}),
            json!({"pvcRef": {"name": "x", "namespace": victim_ns}}),
        ),
    ];
    for (name, source, target) in &attempts {
        kopiur_testenv::apply::apply_value(
            client,
            forger_ns,
            &json!({
                "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Restore",
                "metadata": {"name": name, "namespace": forger_ns},
                "spec": {"source": source, "target": target, "repository": shared}
            }),
        )
        .await?;
    }
    let restores: Api<kopiur_api::Restore> = Api::namespaced(client.clone(), forger_ns);
    let reason = |r: &kopiur_api::Restore, t: &str| {
        r.status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == t))
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    };
    for (name, _, _) in &attempts {
        let (_, _, message) =
            wait_for(&format!("Restore {name} CrossNamespaceReference"), Duration::from_secs(60), &h.log(), || async {
                let r = restores.get(name).await?;
                Ok(reason(&r, "Stalled").filter(|(s, why, _)| s == "True" && why == "CrossNamespaceReference"))
            })
            .await?;
        ensure!(
            message.contains(RESTORE_ALLOWED_NAMESPACES) || message.contains("pvcRef.namespace"),
            "{name}: the message names the grant or the field: {message}"
        );
        println!("[cross-namespace restore] {name} refused: {message}");
    }
    let jobs = Api::<Job>::namespaced(client.clone(), forger_ns).list(&ListParams::default()).await?.items;
    let pvcs =
        Api::<PersistentVolumeClaim>::namespaced(client.clone(), forger_ns).list(&ListParams::default()).await?.items;
    ensure!(jobs.is_empty() && pvcs.is_empty(), "a refused Restore made {} Jobs and {} PVCs", jobs.len(), pvcs.len());
    // The owner grants: the snapshotRef Restore moves on (to whatever it needs next).
    let body = json!({"metadata": {"annotations": {RESTORE_ALLOWED_NAMESPACES: forger_ns}}});
    Api::<Snapshot>::namespaced(client.clone(), victim_ns)
        .patch("precious", &PatchParams::default(), &Patch::Merge(&body))
        .await?;
    let granted = Instant::now();
    let next = wait_for("by-ref past the refusal once granted", Duration::from_secs(90), &h.log(), || async {
        let r = restores.get("by-ref").await?;
        Ok(reason(&r, "Ready").filter(|(_, why, _)| why != "CrossNamespaceReference").map(|x| x.1))
    })
    .await?;
    for (name, _, _) in &attempts[1..] {
        let r = restores.get(name).await?;
        ensure!(reason(&r, "Stalled").is_some_and(|x| x.1 == "CrossNamespaceReference"), "{name} still refused");
    }
    println!(
        "[cross-namespace restore] 4 refused within {:.1}s, no Job, no PVC; granted by annotating the Snapshot: by-ref now {next} after {:.1}s",
        granted.duration_since(started).as_secs_f64(),
        granted.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Issue 31 (audit 2.8): a policy of the forger's namespace that writes under the victim
/// namespace's hostname on the shared ClusterRepository is Stalled `CrossNamespaceReference`
/// naming the grant, and its manual Snapshot parks with the same reason and no Job; once the
/// victim's namespace grants it, the policy is no longer refused.
async fn foreign_hostname_policy(h: &Harness, victim_ns: &str, forger_ns: &str) -> Result<()> {
    use k8s_openapi::api::batch::v1::Job;
    use kopiur_api::names::annotation::IDENTITY_ALLOWED_NAMESPACES;
    let client = &h.client;
    let policies: Api<kopiur_api::SnapshotPolicy> = Api::namespaced(client.clone(), forger_ns);
    // Everything a run needs is there (the repository's Secret, the PVC): only the refusal stops it.
    h.secret(forger_ns).await?;
    for obj in [
        json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "namespace": forger_ns},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
        }),
        json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotPolicy",
            "metadata": {"name": "plant", "namespace": forger_ns},
            "spec": {"repository": {"kind": "ClusterRepository", "name": "tenancy-forge"}, "copyMethod": "Direct",
                     "sources": [{"pvc": {"name": "data"}}], "identity": {"hostname": victim_ns}}
        }),
        json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": "plant-1", "namespace": forger_ns},
            "spec": {"policyRef": {"name": "plant"}}
        }),
    ] {
        kopiur_testenv::apply::apply_value(client, forger_ns, &obj).await?;
    }
    let stalled = |conds: &[kopiur_api::shared::status::Condition]| {
        conds.iter().find(|c| c.type_ == "Stalled" && c.status == "True").map(|c| (c.reason.clone(), c.message.clone()))
    };
    let (why, message) = wait_for("the planting policy Stalled", Duration::from_secs(60), &h.log(), || async {
        let p = policies.get("plant").await?;
        Ok(p.status.as_ref().and_then(|s| stalled(&s.conditions)).filter(|(r, _)| r == "CrossNamespaceReference"))
    })
    .await?;
    ensure!(message.contains(&format!("{IDENTITY_ALLOWED_NAMESPACES}={forger_ns}")), "{why}: {message}");
    let snaps: Api<Snapshot> = Api::namespaced(client.clone(), forger_ns);
    let parked = wait_for("its Snapshot parked CrossNamespaceReference", Duration::from_secs(60), &h.log(), || async {
        let s = snaps.get("plant-1").await?;
        Ok(s.status
            .as_ref()
            .and_then(|st| st.conditions.iter().find(|c| c.type_ == "Ready").cloned())
            .filter(|c| c.reason == "CrossNamespaceReference"))
    })
    .await;
    let parked = match parked {
        Ok(c) => c,
        Err(e) => {
            let s = snaps.get("plant-1").await?;
            println!("[foreign hostname] plant-1 status: {}", serde_json::to_string(&s.status).unwrap_or_default());
            return Err(e);
        }
    };
    let jobs = Api::<Job>::namespaced(client.clone(), forger_ns).list(&ListParams::default()).await?.items;
    ensure!(jobs.iter().all(|j| !j.name_any().starts_with("plant")), "a backup Job ran under the victim's hostname");
    println!("[foreign hostname] policy Stalled: {message}; Snapshot parked: {}", parked.message);
    // The victim's namespace grants it: the policy is no longer refused for that.
    let body = json!({"metadata": {"annotations": {IDENTITY_ALLOWED_NAMESPACES: forger_ns}}});
    Api::<Namespace>::all(client.clone()).patch(victim_ns, &PatchParams::default(), &Patch::Merge(&body)).await?;
    wait_for("the planting policy no longer CrossNamespaceReference", Duration::from_secs(60), &h.log(), || async {
        let p = policies.get("plant").await?;
        let refused =
            p.status.as_ref().and_then(|s| stalled(&s.conditions)).is_some_and(|(r, _)| r == "CrossNamespaceReference");
        Ok((!refused).then_some(()))
    })
    .await?;
    println!("[foreign hostname] granted by namespace {victim_ns}: the policy is no longer refused");
    Ok(())
}

/// The selector wave's fixtures.
struct SelWave<'a> {
    a: &'a str,
    b: &'a str,
    pin: &'a RepoPin,
    k: &'a KopiaRepo,
    /// Seeded name -> manifest id, members and keepers.
    ids: &'a BTreeMap<String, String>,
    a_uids: &'a BTreeMap<String, String>,
    b_uids: &'a BTreeMap<String, String>,
    /// One Snapshot per namespace that is never deleted.
    keep: [String; 2],
}

/// Issue 16 acceptance: a ClusterRepository with `allowedNamespaces.selector` holds a wave of
/// 30 deletions across two selected namespaces, every member carrying the exact ack command
/// (V = the latest deletionTimestamp of either namespace); acked, it drains in
/// ceil(30 / 200) batch Jobs with one repository connect each, deleting every member's
/// manifest once and nothing else.
async fn selector_wave(h: &Harness, jobs: &JobRecorder, w: SelWave<'_>) -> Result<()> {
    let client = &h.client;
    let started = Instant::now();
    let member = |n: &String| !w.keep.contains(n);
    let member_uids: BTreeSet<String> =
        w.a_uids.iter().chain(w.b_uids.iter()).filter(|(n, _)| member(n)).map(|(_, u)| u.clone()).collect();
    let member_ids: BTreeSet<String> = w.ids.iter().filter(|(n, _)| member(n)).map(|(_, i)| i.clone()).collect();
    let keep_ids: BTreeSet<String> = w.keep.iter().map(|n| w.ids[n].clone()).collect();
    ensure!(member_uids.len() == SEL_WAVE && member_ids.len() == SEL_WAVE, "seeded {SEL_WAVE} members");
    let kopia_start = w.k.list().await?;
    ensure!(kopia_start.len() == SEL_WAVE + 2, "the wave repository holds the 30 members and 2 keepers");
    let mark = h.audit.calls().len();
    futures::try_join!(delete_set(client, w.a, "wa"), delete_set(client, w.b, "wb"))?;
    let (held_a, held_b) = futures::try_join!(
        wait_held(h, w.a, "wa", SEL_WAVE / 2, Duration::from_secs(120)),
        wait_held(h, w.b, "wb", SEL_WAVE / 2, Duration::from_secs(120))
    )?;
    let all: Vec<Snapshot> = held_a.into_iter().chain(held_b).collect();
    let v = latest_deletion(&all).context("deletionTimestamps")?;
    let cmd = format!("kubectl annotate clusterrepository/{} {ALLOW_MASS_DELETION}=\"{v}\" --overwrite", w.pin.name);
    let bad = |l: &[Snapshot]| -> Vec<String> {
        l.iter()
            .filter(|s| {
                condition(s, "DeletionHeld").is_none_or(|c| {
                    c.status != "True" || c.reason != "MassDeletionBreaker" || !c.message.contains(&cmd)
                })
            })
            .map(|s| format!("{}: {:?}", s.name_any(), condition(s, "DeletionHeld").map(|c| c.message.clone())))
            .collect()
    };
    let both = || async {
        let (la, lb) = futures::try_join!(list_set(client, w.a, "wa"), list_set(client, w.b, "wb"))?;
        Ok::<Vec<Snapshot>, anyhow::Error>(la.into_iter().chain(lb).collect())
    };
    let conv = wait_for("all 30 held messages carry the exact command", Duration::from_secs(60), &h.log(), || async {
        let l = both().await?;
        Ok((l.len() == SEL_WAVE && bad(&l).is_empty()).then_some(()))
    })
    .await;
    if conv.is_err() {
        let l = both().await?;
        let b = bad(&l);
        println!("[selector wave] expected {cmd}; {} of {} not carrying it, e.g. {:?}", b.len(), l.len(), b.first());
    }
    conv?;
    println!(
        "[selector wave] 15 + 15 held across {} and {} {:.1}s after the deletes; command: {cmd}",
        w.a,
        w.b,
        started.elapsed().as_secs_f64()
    );
    let crepos: Api<kopiur_api::ClusterRepository> = Api::all(client.clone());
    wait_for(
        "tenancy-wave MassDeletionHeld=True, deletionProtection.held 30",
        Duration::from_secs(20),
        &h.log(),
        || async {
            let c = crepos.get(&w.pin.name).await?;
            let st = c.status.map(|s| s.common).unwrap_or_default();
            let cond = st
                .conditions
                .iter()
                .any(|c| c.type_ == "MassDeletionHeld" && c.status == "True" && c.message.contains(&cmd));
            let held = st.deletion_protection.as_ref().map(|d| d.held);
            Ok((cond && held == Some(SEL_WAVE as i32)).then_some(()))
        },
    )
    .await?;
    ensure!(jobs.touching(&member_uids).is_empty(), "held: a batch Job for a held member");
    ensure!(w.k.list().await? == kopia_start, "held: a kopia snapshot was deleted");

    // Red team (issue 31, audit 4.2): a tenant of one namespace makes Jobs in its own namespace
    // that look exactly like the controller's batch for 6 of the other namespace's held members
    // (its name, labels, annotations, a controller ownerReference to the ClusterRepository).
    // One exits 0 ("6 deleted, release them"), one sleeps (6 more "in flight" for ever).
    let victims: Vec<String> = w.b_uids.iter().filter(|(n, _)| member(n)).map(|(_, u)| u.clone()).take(12).collect();
    let fakes = fake_batches(client, w.a, w.pin, [&victims[..6], &victims[6..]]).await?;
    let fake_jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), w.a);
    let done_name = fakes[0].clone();
    wait_for("the exit-0 fake batch Complete", Duration::from_secs(90), &h.log(), || async {
        let j = fake_jobs.get(&done_name).await?;
        let conds = j.status.and_then(|s| s.conditions).unwrap_or_default();
        Ok(conds.iter().any(|c| c.type_ == "Complete" && c.status == "True").then_some(()))
    })
    .await?;
    // Several dispatcher passes (every 2 s) with the fakes in the store.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let l = both().await?;
    ensure!(l.len() == SEL_WAVE, "a fake batch released held members: {} of {SEL_WAVE} left", l.len());
    ensure!(bad(&l).is_empty(), "a fake batch changed a held member's DeletionHeld: {:?}", bad(&l).first());
    ensure!(l.iter().all(|s| s.finalizers().iter().any(|f| f == FINALIZER)), "a held member lost its finalizer");
    ensure!(w.k.list().await? == kopia_start, "a fake batch: a kopia snapshot was deleted");
    let fake_keys: BTreeSet<(String, String)> = fakes.iter().map(|n| (w.a.to_string(), n.clone())).collect();
    let real = |uids: &BTreeSet<String>| -> Vec<SeenJob> {
        jobs.touching(uids)
            .into_iter()
            .filter(|j| !fake_keys.contains(&(j.namespace.clone(), j.name.clone())))
            .collect()
    };
    ensure!(real(&member_uids).is_empty(), "held: a batch Job for a held member beside the fakes");
    println!(
        "[selector wave] red team: fake batches {fakes:?} in {} naming 12 of {}'s held members (6 Complete, 6 sleeping): all 30 still held, kopia untouched",
        w.a, w.b
    );

    // The exact command's value releases the wave.
    h.ack_cluster(&w.pin.name, &v).await?;
    let acked = Instant::now();
    futures::try_join!(
        wait_set_gone(h, w.a, "wa", Duration::from_secs(120)),
        wait_set_gone(h, w.b, "wb", Duration::from_secs(120))
    )?;
    let drained = acked.elapsed();
    let wave_jobs = real(&member_uids);
    // The wave drained while the sleeping fake still "ran": it held nothing.
    let sleeper = fake_jobs.get(&fakes[1]).await?;
    ensure!(
        sleeper.status.as_ref().and_then(|s| s.active).unwrap_or(0) > 0,
        "the sleeping fake batch was not running during the drain: {:?}",
        sleeper.status
    );
    for n in &fakes {
        fake_jobs.delete(n, &DeleteParams::background()).await?;
    }
    let calls = h.audit.since(mark);
    let (connects, deleters) = connects_of_deleters(&calls, &member_ids);
    let deletes = successful_deletes(&calls);
    let left = w.k.list().await?;
    let per_job = kopiur_controller::deletion::batch::BatchTuning::default().max_members;
    let expected = SEL_WAVE.div_ceil(per_job);
    println!(
        "[selector wave] acked: drained {:.1}s after the ack through {} batch Job(s) (members {:?}, ns {:?}); {deleters} deleting mover run(s), {connects} connect(s); kopia {} -> {}",
        drained.as_secs_f64(),
        wave_jobs.len(),
        wave_jobs.iter().map(|j| j.members.len()).collect::<Vec<_>>(),
        wave_jobs.iter().map(|j| j.namespace.as_str()).collect::<Vec<_>>(),
        kopia_start.len(),
        left.len()
    );
    ensure!(
        wave_jobs.len() == expected,
        "ceil({SEL_WAVE} / {per_job}) = {expected} batch Job(s), got {}",
        wave_jobs.len()
    );
    let covered: BTreeSet<String> = wave_jobs.iter().flat_map(|j| j.members.iter().cloned()).collect();
    ensure!(covered == member_uids, "the batch Jobs list exactly the 30 members (listed {})", covered.len());
    ensure!(wave_jobs.iter().all(|j| j.namespace == h.op_ns), "batch Jobs run in the operator namespace");
    ensure!(wave_jobs.iter().all(|j| j.repo_uid == w.pin.uid), "batch Jobs belong to the ClusterRepository");
    ensure!(
        deleters == expected && connects == expected,
        "one mover run and one connect per batch: {deleters} runs, {connects} connects"
    );
    let twice: Vec<&String> = member_ids.iter().filter(|i| deletes.get(*i).copied().unwrap_or(0) != 1).collect();
    ensure!(twice.is_empty(), "members not deleted exactly once: {twice:?}");
    ensure!(left == keep_ids, "the repository keeps exactly the 2 keepers: {} left", left.len());
    for ns in [w.a, w.b] {
        let k = list_set(client, ns, "keep").await?;
        ensure!(k.len() == 1 && k[0].metadata.deletion_timestamp.is_none(), "the keeper in {ns} untouched");
    }
    Ok(())
}

/// Two Jobs in `ns` that look exactly like the controller's batches of `members[0]` and
/// `members[1]` on the ClusterRepository `pin` (the deterministic name, the labels, the members
/// annotation, a controller ownerReference to the repository): the first exits 0, the second
/// sleeps. Returns their names. Only the namespace differs from a real batch.
async fn fake_batches(client: &Client, ns: &str, pin: &RepoPin, members: [&[String]; 2]) -> Result<Vec<String>> {
    use kopiur_api::names::{annotation::DELETE_MEMBERS, label};
    let mut made = Vec::new();
    for (members, script) in members.into_iter().zip(["exit 0", "sleep 3600"]) {
        let n = kopiur_controller::deletion::batch::batch_name(&pin.uid, members.iter().map(String::as_str));
        let job = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {
                "name": n, "namespace": ns,
                "labels": {label::MANAGED_BY: label::MANAGED_BY_VALUE, label::DELETE_REPO: pin.uid,
                           label::OP: "snapshot-delete-batch"},
                "annotations": {DELETE_MEMBERS: members.join(",")},
                "ownerReferences": [{"apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "ClusterRepository",
                                     "name": pin.name, "uid": pin.uid, "controller": true}]
            },
            "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "mover", "image": "busybox", "command": ["/bin/sh", "-c", script]}
            ]}}}
        });
        kopiur_testenv::apply::apply_value(client, ns, &job).await?;
        made.push(n);
    }
    Ok(made)
}

/// T40 / docs/design/repository-breaker.md §3.7.1: a batch whose kopia delete fails fails its Job, removes no finalizer and
/// deletes nothing; the dispatcher counts `outcome="failed"`, emits one
/// `SnapshotDeletionBatchFailed` and stamps `reverify-requested-at` on the repository. After
/// the failed Job is reaped the members re-batch and drain, each manifest deleted once.
async fn failed_batch(
    h: &Harness,
    jobs: &JobRecorder,
    ns: &str,
    k: &KopiaRepo,
    ids: &BTreeMap<String, String>,
    names: &[String],
    uids: &BTreeMap<String, String>,
) -> Result<()> {
    use kopiur_api::names::{annotation::REVERIFY_REQUESTED_AT, event::SNAPSHOT_DELETION_BATCH_FAILED};
    let client = &h.client;
    let member_uids: BTreeSet<String> = uids.values().cloned().collect();
    let member_ids: BTreeSet<String> = names.iter().map(|n| ids[n].clone()).collect();
    let repos: Api<Repository> = Api::namespaced(client.clone(), ns);
    let stamp_of = |r: &Repository| {
        r.annotations()
            .get(REVERIFY_REQUESTED_AT)
            .and_then(|v| chrono::DateTime::parse_from_rfc3339(v).ok())
            .map(|t| t.with_timezone(&chrono::Utc))
    };
    let batches = |m: &str, outcome: &str| {
        sample(
            m,
            "kopiur_snapshot_deletion_batches_total",
            &[("kind", "Repository"), ("namespace", ns), ("name", "flaky"), ("outcome", outcome)],
        )
    };
    // The stamp has second precision.
    let before = chrono::Utc::now() - chrono::Duration::seconds(1);
    let stamp_before = stamp_of(&repos.get("flaky").await?);
    ensure!(stamp_before.is_none_or(|t| t < before), "a reverify stamp {stamp_before:?} before the fault");
    let faulted = &ids[&names[0]];
    h.audit.fail_next_delete_of(faulted)?;
    let started = Instant::now();
    delete_set(client, ns, "fl").await?;
    let failed = wait_for("the batch Job Failed", Duration::from_secs(90), &h.log(), || async {
        Ok(jobs.touching(&member_uids).into_iter().find(|j| j.failed))
    })
    .await?;
    let failed_after = started.elapsed();
    ensure!(!h.audit.fault_armed(faulted), "the fault was consumed by the batch");
    let l = list_set(client, ns, "fl").await?;
    ensure!(
        l.len() == FAULT_BATCH && l.iter().all(|s| s.finalizers().iter().any(|f| f == FINALIZER)),
        "a failed batch removed a finalizer ({} of {FAULT_BATCH} present)",
        l.len()
    );
    ensure!(member_ids.is_subset(&k.list().await?), "a failed batch deleted kopia data");
    let (stamp, n_failed) =
        wait_for("the reverify nudge and the failed-batch counter", Duration::from_secs(20), &h.log(), || async {
            let stamp = stamp_of(&repos.get("flaky").await?).filter(|t| *t >= before);
            let n = batches(&h.metrics().await?, "failed");
            Ok(stamp.zip(n))
        })
        .await?;
    let ev = wait_for("a SnapshotDeletionBatchFailed Event", Duration::from_secs(20), &h.log(), || async {
        let by = event_counts_by_uid(client, ns, SNAPSHOT_DELETION_BATCH_FAILED).await?;
        Ok((!by.is_empty()).then_some(by))
    })
    .await?;
    println!(
        "[failed batch] {} ({} members) Failed {:.1}s after the deletes; reverify-requested-at {stamp} (was {stamp_before:?}); batches failed {n_failed}; SnapshotDeletionBatchFailed {ev:?}",
        failed.name,
        failed.members.len(),
        failed_after.as_secs_f64()
    );
    ensure!(n_failed == 1.0, "kopiur_snapshot_deletion_batches_total{{outcome=\"failed\"}} = {n_failed}, want 1");
    // S6-27, docs/design/mass-deletion.md §6.4: `kopiur_snapshot_deletion_failures_total` counts each member of
    // the failed batch once (the batch Job runs in the repository's namespace).
    let members_failed = |m: &str| sample(m, "kopiur_snapshot_deletion_failures_total", &[("namespace", ns)]);
    let want_failures = failed.members.len() as f64;
    let per_member = wait_for("the per-member failure counter", Duration::from_secs(5), &h.log(), || async {
        Ok(members_failed(&h.metrics().await?).filter(|n| *n >= want_failures))
    })
    .await?;
    ensure!(
        failed.members.len() == FAULT_BATCH && per_member == want_failures,
        "kopiur_snapshot_deletion_failures_total{{namespace={ns}}} = {per_member}, want one per member ({} members)",
        failed.members.len()
    );
    let repo_uid = repos.get("flaky").await?.uid().unwrap_or_default();
    ensure!(
        ev.len() == 1 && ev.get(&repo_uid) == Some(&1),
        "exactly one SnapshotDeletionBatchFailed on the repository: {ev:?}"
    );

    // Recovery: the failed Job is reaped 60 s after failing and the members re-batch.
    let took = wait_set_gone(h, ns, "fl", Duration::from_secs(180)).await?;
    let all = jobs.touching(&member_uids);
    let deletes = successful_deletes(&h.audit.calls());
    let left = k.list().await?;
    let m = h.metrics().await?;
    println!(
        "[failed batch] recovered: drained {:.1}s after the deletes through {:?}; batches failed {:?} succeeded {:?}",
        took.as_secs_f64(),
        all.iter().map(|j| (&j.name, j.members.len(), j.failed, j.completed)).collect::<Vec<_>>(),
        batches(&m, "failed"),
        batches(&m, "succeeded")
    );
    ensure!(all.len() == 2 && all[0].failed && all[1].completed && !all[1].failed, "one failed Job, then one retry");
    ensure!(
        all[1].members.iter().cloned().collect::<BTreeSet<_>>() == member_uids,
        "the retry lists the same {FAULT_BATCH} members"
    );
    let not_once: Vec<&String> = member_ids.iter().filter(|i| deletes.get(*i).copied().unwrap_or(0) != 1).collect();
    ensure!(not_once.is_empty(), "manifests not deleted exactly once: {not_once:?}");
    ensure!(left.is_disjoint(&member_ids), "every member's manifest deleted after the recovery");
    // The members are released by the Snapshot reconciler as soon as the retry completes; the
    // dispatcher counts the terminal Job on its next pass (every 2 s).
    let counted = wait_for("the retry counted succeeded", Duration::from_secs(10), &h.log(), || async {
        let m = h.metrics().await?;
        Ok((batches(&m, "succeeded") == Some(1.0)).then_some(m))
    })
    .await;
    let m = match counted {
        Ok(m) => m,
        Err(_) => h.metrics().await?,
    };
    let (f, ok) = (batches(&m, "failed"), batches(&m, "succeeded"));
    ensure!(
        f == Some(1.0) && ok == Some(1.0),
        "batch counters after the retry: failed {f:?} succeeded {ok:?}, want 1 and 1"
    );
    let after = members_failed(&m);
    ensure!(
        after == Some(want_failures),
        "the retry that succeeded counted member failures: {after:?}, want {want_failures}"
    );
    Ok(())
}

/// T43: editing a schedule's `onScheduleDelete` stamps it on every live child within 10 s,
/// both ways; the initial pass stamps the default (Retain) on unstamped children.
async fn onscheduledelete_propagation(h: &Harness, ns: &str) -> Result<()> {
    use kopiur_api::snapshot::OnScheduleDelete;
    let client = &h.client;
    let stamped = |want: OnScheduleDelete| {
        move |m: &BTreeMap<String, Snapshot>| {
            m.len() == PROP_CHILDREN && m.values().all(|s| s.spec.on_schedule_delete == Some(want))
        }
    };
    watch_set_until(client, ns, "pr", Duration::from_secs(30), stamped(OnScheduleDelete::Retain))
        .await
        .context("the schedule's default stamped on its 8 children")?;
    let schedules: Api<kopiur_api::SnapshotSchedule> = Api::namespaced(client.clone(), ns);
    for (want, word) in [(OnScheduleDelete::Delete, "Delete"), (OnScheduleDelete::Retain, "Retain")] {
        let body = json!({"spec": {"deletion": {"onScheduleDelete": word}}});
        schedules.patch("prop", &PatchParams::default(), &Patch::Merge(&body)).await?;
        let edited = Instant::now();
        watch_set_until(client, ns, "pr", Duration::from_secs(10), stamped(want))
            .await
            .with_context(|| format!("onScheduleDelete: {word} on all {PROP_CHILDREN} children within 10 s"))?;
        println!(
            "[T43] onScheduleDelete: {word} on all {PROP_CHILDREN} children {:.1}s after the edit",
            edited.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

async fn scenarios(h: &mut Harness) -> Result<()> {
    let t0 = Instant::now();
    let mut fails: Vec<String> = Vec::new();
    let client = h.client.clone();
    let wns = h.env.namespace("wave").await?;
    let fns = h.env.namespace("flap").await?;
    let hns = h.env.namespace("home").await?;
    let ons = h.env.namespace("orphan").await?;
    let dns = h.env.namespace("nsdel").await?;

    // ---- Seed: kopia repositories and manifests, Repository CRs, Snapshot CRs (operator not
    // running yet, so nothing races the status writes).
    let seed_started = Instant::now();
    let (k_wave, k_flap, k_orph, k_nsdel) = futures::try_join!(
        h.kopia_repo("wave/"),
        h.kopia_repo("flap/"),
        h.kopia_repo("orph/"),
        h.kopia_repo("nsdel/")
    )?;
    let wave_names = names("wave", WAVE);
    let prune_names = names("prune", PRUNE);
    let single_names = names("single", 1);
    let wave2_names = names("second", WAVE2);
    let flap_names = names("flap", FLAP);
    let orph_names = names("orph", NS_SNAPS);
    let nsdel_names = names("nsdel", NS_SNAPS);
    let all_wave_repo: Vec<String> =
        [&wave_names, &prune_names, &single_names, &wave2_names].into_iter().flatten().cloned().collect();
    let (wave_ids, flap_ids, orph_ids, nsdel_ids) = futures::try_join!(
        k_wave.seed(&all_wave_repo),
        k_flap.seed(&flap_names),
        k_orph.seed(&orph_names),
        k_nsdel.seed(&nsdel_names)
    )?;
    let kopia_wave_start = k_wave.list().await?;
    println!(
        "seeded kopia: wave repo {} manifests, flap {}, orph {}, nsdel {} ({:.1}s, one snapshot create per repository)",
        kopia_wave_start.len(),
        k_flap.list().await?.len(),
        k_orph.list().await?.len(),
        k_nsdel.list().await?.len(),
        seed_started.elapsed().as_secs_f64()
    );
    ensure!(kopia_wave_start.len() == all_wave_repo.len(), "one manifest per seeded directory");

    let r_wave = h.repository(&wns, "wave", "wave/", json!({})).await?;
    let r_flap = h.repository(&fns, "flap", "flap/", json!({})).await?;
    // Each admits the namespace whose teardown it serves (a Repository serves another namespace
    // only when it lists it).
    let r_orph =
        h.repository(&hns, "orph", "orph/", json!({"onNamespaceDelete": "Orphan", "allowedNamespaces": [ons]})).await?;
    let r_nsdel = h
        .repository(&hns, "nsdel", "nsdel/", json!({"onNamespaceDelete": "Delete", "allowedNamespaces": [dns]}))
        .await?;
    let (p_wave, p_flap, p_orph, p_nsdel) =
        (RepoPin::of(&r_wave), RepoPin::of(&r_flap), RepoPin::of(&r_orph), RepoPin::of(&r_nsdel));

    let cr_started = Instant::now();
    let mut wave_items = items(&wave_names, &wave_ids, "wave");
    wave_items.extend(items(&prune_names, &wave_ids, "prune"));
    wave_items.extend(items(&single_names, &wave_ids, "single"));
    wave_items.extend(items(&wave2_names, &wave_ids, "wave2"));
    let (wave_uids, orph_uids, nsdel_uids) = futures::try_join!(
        seed_snapshots(&client, &wns, &p_wave, wave_items, 16),
        seed_snapshots(&client, &ons, &p_orph, items(&orph_names, &orph_ids, "orph"), 4),
        seed_snapshots(&client, &dns, &p_nsdel, items(&nsdel_names, &nsdel_ids, "nsdel"), 4),
    )?;
    println!(
        "seeded {} Snapshot CRs (finalizer + Succeeded status) in {:.1}s",
        wave_uids.len() + orph_uids.len() + nsdel_uids.len(),
        cr_started.elapsed().as_secs_f64()
    );

    h.start_operator().await?;
    let (jobs, recorder) = JobRecorder::spawn(client.clone());
    let ready_started = Instant::now();
    futures::try_join!(
        h.wait_repository_ready(&wns, "wave", Duration::from_secs(240)),
        h.wait_repository_ready(&fns, "flap", Duration::from_secs(240)),
        h.wait_repository_ready(&hns, "orph", Duration::from_secs(240)),
        h.wait_repository_ready(&hns, "nsdel", Duration::from_secs(240)),
    )?;
    println!(
        "4 repositories Ready {:.1}s after operator start ({:.1}s since test start)",
        ready_started.elapsed().as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
    // A seeded Succeeded Snapshot is left Succeeded by the controller (no backup Job).
    let probe = Api::<Snapshot>::namespaced(client.clone(), &wns).get("wave-0000").await?;
    ensure!(
        probe.status.as_ref().and_then(|s| s.phase.as_ref()).map(|p| p.as_str()) == Some("Succeeded"),
        "a seeded Snapshot left Succeeded: {:?}",
        probe.status
    );

    // ---- 1. Flap replay.
    let s1 = Instant::now();
    let schedules: Api<kopiur_api::SnapshotSchedule> = Api::namespaced(client.clone(), &fns);
    let mut flap_uids: BTreeSet<String> = BTreeSet::new();
    for cycle in 1..=5 {
        let sched: kopiur_api::SnapshotSchedule = serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotSchedule",
            "metadata": {"name": "flap", "namespace": fns},
            "spec": {"policyRef": {"name": ABSENT_POLICY}, "schedule": {"cron": "0 0 1 1 *", "suspend": true}}
        }))?;
        let created = schedules.create(&Default::default(), &sched).await?;
        let children = owned_children(&flap_names, &flap_ids, "flap", "flap", &created.uid().context("schedule uid")?);
        let uids = seed_snapshots(&client, &fns, &p_flap, children, 8).await?;
        flap_uids.extend(uids.into_values());
        // The controller has seen the children alive under their schedule once its reconciler
        // stamped its onScheduleDelete (the default, Retain) on all of them.
        watch_set_until(&client, &fns, "flap", Duration::from_secs(30), |m| {
            m.len() == FLAP
                && m.values().all(|s| s.spec.on_schedule_delete == Some(kopiur_api::snapshot::OnScheduleDelete::Retain))
        })
        .await
        .context("the flap children stamped Retain by their schedule")?;
        schedules.delete("flap", &DeleteParams::default()).await?;
        let took = wait_set_gone(h, &fns, "flap", Duration::from_secs(120)).await?;
        wait_for("schedule flap gone", Duration::from_secs(30), &h.log(), || async {
            Ok(schedules.get_opt("flap").await?.is_none().then_some(()))
        })
        .await?;
        println!("[flap] cycle {cycle}: 30 children released {:.1}s after the schedule delete", took.as_secs_f64());
    }
    // T22: exactly one SnapshotRetainedOnScheduleDelete per child. Events are published after
    // the status write, so wait for the last ones; a repeat would show as a count above 1.
    let retained = wait_for(
        "a SnapshotRetainedOnScheduleDelete on every flap child",
        Duration::from_secs(30),
        &h.log(),
        || async {
            let by = event_counts_by_uid(&client, &fns, RETAINED_REASON).await?;
            Ok(flap_uids.iter().all(|u| by.contains_key(u)).then_some(by))
        },
    )
    .await;
    let by = match retained {
        Ok(by) => by,
        Err(_) => event_counts_by_uid(&client, &fns, RETAINED_REASON).await?,
    };
    let retained_events: i32 = by.values().sum();
    let not_one: Vec<(&String, i32)> =
        flap_uids.iter().map(|u| (u, by.get(u).copied().unwrap_or(0))).filter(|(_, n)| *n != 1).collect();
    let strangers = by.keys().filter(|u| !flap_uids.contains(*u)).count();
    let released = sample(
        &h.metrics().await?,
        "kopiur_snapshot_deletions_total",
        &[("namespace", fns.as_str()), ("outcome", "cascade_retained")],
    );
    let flap_id_set: BTreeSet<String> = flap_ids.values().cloned().collect();
    let flap_deletes = successful_deletes(&h.audit.calls()).keys().filter(|i| flap_id_set.contains(*i)).count();
    let flap_after = k_flap.list().await?;
    let flap_jobs = jobs.in_namespace(&fns);
    println!(
        "[flap] 5 cycles in {:.1}s: kopia snapshots {} -> {}, kopia deletes of flap ids {flap_deletes}, delete Jobs created {}, SnapshotRetainedOnScheduleDelete {retained_events} over {} children ({} not exactly once, {strangers} on other objects), deletions_total{{outcome=cascade_retained}} {released:?}",
        s1.elapsed().as_secs_f64(),
        flap_ids.len(),
        flap_after.len(),
        flap_jobs.len(),
        flap_uids.len(),
        not_one.len()
    );
    check!(fails, flap_after == flap_id_set, "flap: a kopia snapshot was deleted");
    check!(fails, flap_deletes == 0, "flap: {flap_deletes} kopia snapshot delete(s) of flap manifests");
    check!(fails, flap_jobs.is_empty(), "flap: delete Jobs were created: {flap_jobs:?}");
    check!(
        fails,
        not_one.is_empty() && strangers == 0 && retained_events == (5 * FLAP) as i32,
        "flap: exactly one SnapshotRetainedOnScheduleDelete per child ({} children): {retained_events} in all, not once {:?}",
        flap_uids.len(),
        &not_one[..not_one.len().min(5)]
    );
    check!(
        fails,
        released == Some((5 * FLAP) as f64),
        "flap: deletions_total{{outcome=\"cascade_retained\"}} {released:?}, want {}",
        5 * FLAP
    );

    // ---- 2. The wave: 600 external deletions held.
    let s2 = Instant::now();
    let wave_uid_set = uids_of(&wave_names, &wave_uids);
    let wave_id_set = ids_of(&wave_names, &wave_ids);
    let before_wave = chrono::Utc::now();
    delete_set(&client, &wns, "wave").await?;
    println!("[wave] {WAVE} DELETEs sent in {:.1}s", s2.elapsed().as_secs_f64());
    let held = wait_held(h, &wns, "wave", WAVE, Duration::from_secs(420)).await?;
    let v = latest_deletion(&held).context("deletionTimestamps")?;
    let cmd = ack_command(&wns, "wave", &v);
    println!("[wave] expected command: {cmd}");
    // What an operator looks at first must follow the members at once: the repository's
    // condition, status.deletionProtection, the held gauge and one Warning, all from the
    // dispatcher's next pass.
    let all_held = Instant::now();
    let shown = wait_for("the repository shows the held wave", Duration::from_secs(20), &h.log(), || async {
        let r: Repository = Api::namespaced(client.clone(), &wns).get("wave").await?;
        let st = r.status.clone().unwrap_or_default();
        let cond = st.conditions.iter().any(|c| c.type_ == "MassDeletionHeld" && c.status == "True");
        let dp_held = st.deletion_protection.as_ref().map(|d| d.held);
        let m = h.metrics().await?;
        let gauge = metric(&m, "kopiur_snapshot_deletions_held", &wns, "wave");
        let (warnings, _) = events(&client, &wns, "MassDeletionHeld").await?;
        Ok((cond && dp_held == Some(WAVE as i32) && gauge == Some(WAVE as f64) && warnings == 1).then_some(()))
    })
    .await;
    match shown {
        Ok(()) => println!(
            "[wave] repository status shown {:.1}s after the last member was held (MassDeletionHeld=True, deletionProtection.held {WAVE}, held gauge {WAVE}, 1 MassDeletionHeld Warning)",
            all_held.elapsed().as_secs_f64()
        ),
        Err(e) => {
            check!(fails, false, "the held wave did not reach the repository within 20 s of the last member: {e:#}")
        }
    }
    // The message is rewritten when V (the latest held deletionTimestamp) moves: members held
    // early in the wave converge on the final value.
    let check = |held: &[Snapshot]| {
        let mut bad = Vec::new();
        for s in held {
            let c = condition(s, "DeletionHeld").unwrap();
            let decision =
                s.status.as_ref().and_then(|st| st.deletion.as_ref()).map(|d| d.decision.as_str().to_string());
            if c.reason != "MassDeletionBreaker" || !c.message.contains(&cmd) || decision.as_deref() != Some("Held") {
                bad.push(format!(
                    "{}: reason {} decision {decision:?} message {:?}",
                    s.name_any(),
                    c.reason,
                    c.message
                ));
            }
        }
        bad
    };
    let first_bad = check(&held);
    println!("[wave] when all were held, {} of {WAVE} messages did not yet carry the final command", first_bad.len());
    let conv = Instant::now();
    let converged =
        wait_for("every held message carries the final command", Duration::from_secs(180), &h.log(), || async {
            let l = list_set(&client, &wns, "wave").await?;
            Ok(check(&l).is_empty().then_some(l))
        })
        .await;
    let held = match converged {
        Ok(l) => {
            println!("[wave] messages converged {:.1}s later", conv.elapsed().as_secs_f64());
            l
        }
        Err(_) => {
            let l = list_set(&client, &wns, "wave").await?;
            let bad = check(&l);
            check!(
                fails,
                false,
                "{} held Snapshots still lack the exact command or decision Held 180s later, e.g. {:?}",
                bad.len(),
                &bad[..bad.len().min(2)]
            );
            l
        }
    };
    println!(
        "[wave] sample message: {}",
        condition(&held[0], "DeletionHeld").map(|c| c.message.clone()).unwrap_or_default()
    );
    let repo: Repository = Api::namespaced(client.clone(), &wns).get("wave").await?;
    // The repository's status is rewritten by the next dispatcher pass (every 2 s) after the
    // last member persisted Held.
    let repo = match wait_for("deletionProtection.held at the wave size", Duration::from_secs(20), &h.log(), || async {
        let r: Repository = Api::namespaced(client.clone(), &wns).get("wave").await?;
        let held = r.status.as_ref().and_then(|s| s.deletion_protection.as_ref()).map(|d| d.held);
        Ok((held == Some(WAVE as i32)).then_some(r))
    })
    .await
    {
        Ok(r) => r,
        Err(_) => repo,
    };
    let rst = repo.status.clone().unwrap_or_default();
    let mdh = rst.conditions.iter().find(|c| c.type_ == "MassDeletionHeld").cloned();
    let dp = rst.deletion_protection.clone().unwrap_or_default();
    println!(
        "[wave] Repository MassDeletionHeld {:?}/{:?}: {:?}; status.deletionProtection pendingExternal {} held {}",
        mdh.as_ref().map(|c| c.status.clone()),
        mdh.as_ref().map(|c| c.reason.clone()),
        mdh.as_ref().map(|c| c.message.clone()),
        dp.pending_external,
        dp.held
    );
    check!(fails, mdh.as_ref().is_some_and(|c| c.status == "True"), "MassDeletionHeld=True on the repository");
    check!(fails, mdh.as_ref().is_some_and(|c| c.message.contains(&cmd)), "MassDeletionHeld carries the command");
    check!(fails, dp.held == WAVE as i32 && dp.pending_external >= WAVE as i32, "deletionProtection {dp:?}");
    // The gauges are recomputed on each dispatcher pass (every 2 s): give them a few passes
    // to catch up with the last member's persisted Held.
    let mut gauges = (None, None);
    for _ in 0..20 {
        let m = h.metrics().await?;
        gauges = (
            metric(&m, "kopiur_snapshot_deletions_held", &wns, "wave"),
            metric(&m, "kopiur_snapshot_deletions_pending_external", &wns, "wave"),
        );
        if gauges.0 == Some(WAVE as f64) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (g_held, g_pending) = gauges;
    println!("[wave] gauges: held {g_held:?} pending_external {g_pending:?}");
    check!(fails, g_held == Some(WAVE as f64), "held gauge {g_held:?}");
    check!(fails, g_pending.is_some_and(|p| p >= WAVE as f64), "pending gauge {g_pending:?}");
    let (ev_held, ev_held_objs) = events(&client, &wns, "SnapshotDeletionHeld").await?;
    let (ev_mdh, _) = events(&client, &wns, "MassDeletionHeld").await?;
    println!("[wave] events: SnapshotDeletionHeld {ev_held} on {ev_held_objs} Snapshots, MassDeletionHeld {ev_mdh}");
    check!(fails, ev_held_objs == WAVE, "a SnapshotDeletionHeld Warning on each held Snapshot");
    check!(fails, ev_mdh >= 1, "a MassDeletionHeld Warning on the repository");
    let now_ids = k_wave.list().await?;
    check!(
        fails,
        now_ids == kopia_wave_start,
        "held: 0 kopia deletes ({} -> {})",
        kopia_wave_start.len(),
        now_ids.len()
    );
    check!(fails, jobs.touching(&wave_uid_set).is_empty(), "held: no batch Job for a held member");
    println!("[wave] held in {:.1}s; kopia snapshots still {}", s2.elapsed().as_secs_f64(), now_ids.len());

    // ---- 3. An ack older than the wave releases nothing.
    let old = rfc3339(before_wave - chrono::Duration::seconds(60));
    h.ack(&wns, "wave", &old).await?;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let still = list_set(&client, &wns, "wave").await?;
    let still_held = still.iter().filter(|s| condition(s, "DeletionHeld").is_some_and(|c| c.status == "True")).count();
    let k = k_wave.list().await?;
    println!(
        "[old ack {old}] after 15s: {} wave Snapshots present, {still_held} held, kopia {}, batch Jobs for the wave {}",
        still.len(),
        k.len(),
        jobs.touching(&wave_uid_set).len()
    );
    check!(fails, still.len() == WAVE && still_held == WAVE, "an older ack released a member");
    check!(fails, k == kopia_wave_start, "an older ack deleted kopia data");
    check!(fails, jobs.touching(&wave_uid_set).is_empty(), "an older ack fired a batch");

    // ---- 4. Retention prunes while the wave is held.
    let s4 = Instant::now();
    let prune_uid_set = uids_of(&prune_names, &wave_uids);
    let prune_id_set = ids_of(&prune_names, &wave_ids);
    let snaps: Api<Snapshot> = Api::namespaced(client.clone(), &wns);
    futures::stream::iter(prune_names.iter().map(|n| {
        let snaps = snaps.clone();
        async move {
            let body = json!({"metadata": {"annotations": {PRUNED_BY: "retention"}}});
            snaps.patch(n, &PatchParams::default(), &Patch::Merge(&body)).await.map(|_| ())
        }
    }))
    .buffer_unordered(16)
    .try_collect::<Vec<()>>()
    .await?;
    delete_set(&client, &wns, "prune").await?;
    let took = wait_set_gone(h, &wns, "prune", Duration::from_secs(240)).await?;
    let k = k_wave.list().await?;
    let prune_jobs = jobs.touching(&prune_uid_set);
    let still = list_set(&client, &wns, "wave").await?;
    println!(
        "[prune] 50 retention prunes drained in {:.1}s through {} batch Job(s) (sizes {:?}); kopia {} -> {}; wave still {} present",
        took.as_secs_f64(),
        prune_jobs.len(),
        prune_jobs.iter().map(|j| j.members.len()).collect::<Vec<_>>(),
        kopia_wave_start.len(),
        k.len(),
        still.len()
    );
    check!(fails, k.is_disjoint(&prune_id_set), "every pruned manifest deleted");
    check!(fails, wave_id_set.is_subset(&k), "a prune drained a held member's kopia snapshot");
    check!(fails, still.len() == WAVE, "a held member was released by the prune");
    check!(fails, jobs.touching(&wave_uid_set).is_empty(), "a prune batch carried a held member");
    let _ = s4;

    // ---- 5. A current ack drains the wave.
    let mark = h.audit.calls().len();
    let ack_at = chrono::Utc::now();
    h.ack(&wns, "wave", &rfc3339(ack_at)).await?;
    let drain_started = Instant::now();
    let drained = wait_set_gone(h, &wns, "wave", Duration::from_secs(300)).await?;
    let k = k_wave.list().await?;
    let wave_jobs = jobs.touching(&wave_uid_set);
    let calls = h.audit.since(mark);
    let (batch_connects, all_connects) = connect_counts(&calls);
    println!(
        "[ack] wave of {WAVE} drained {:.1}s after the ack: batch Jobs {} (members {:?}), batch connects {batch_connects}, all mover connects {all_connects}, kopia {} left in the repository",
        drained.as_secs_f64(),
        wave_jobs.len(),
        wave_jobs.iter().map(|j| j.members.len()).collect::<Vec<_>>(),
        k.len()
    );
    check!(
        fails,
        k.is_disjoint(&wave_id_set),
        "{} wave manifests still in kopia",
        k.intersection(&wave_id_set).count()
    );
    // T25 bounds the batches the wave is split into (by name: a name is the hash of its
    // members). A batch whose Job Failed is retried under the same name after its reap delay
    // (T40), which is one more Job object and one more connect; such a retry is reported, and
    // allowed only after a Job of that name Failed. Seen once in CI under heavy load: a wave
    // batch's mover exited 3 (a kopia error it classed terminal) and its retry drained it.
    let batches: BTreeSet<&str> = wave_jobs.iter().map(|j| j.name.as_str()).collect();
    let failed_attempts = wave_jobs.iter().filter(|j| j.failed).count();
    if failed_attempts > 0 {
        println!(
            "[ack] NOTE: {failed_attempts} wave batch attempt(s) Failed and were retried: {:?}",
            wave_jobs.iter().filter(|j| j.failed).map(|j| &j.name).collect::<Vec<_>>()
        );
    }
    for name in &batches {
        let attempts: Vec<_> = wave_jobs.iter().filter(|j| j.name == *name).collect();
        check!(
            fails,
            attempts.len() == 1 || attempts.iter().filter(|j| j.failed).count() == attempts.len() - 1,
            "batch {name} re-created {} times without a Failed attempt before each retry",
            attempts.len()
        );
    }
    check!(fails, batches.len() <= 3, "at most 3 batches, got {}", batches.len());
    check!(
        fails,
        wave_jobs.len() <= 3 + failed_attempts,
        "at most 3 batch Jobs plus one per Failed attempt, got {} ({failed_attempts} failed)",
        wave_jobs.len()
    );
    check!(
        fails,
        batch_connects <= 3 + failed_attempts,
        "at most 3 repository connects plus one per Failed attempt, got {batch_connects} ({failed_attempts} failed)"
    );
    for j in &wave_jobs {
        let hex = j.name.strip_prefix("snapdel-").unwrap_or("");
        check!(fails, hex.len() == 10 && hex.chars().all(|c| c.is_ascii_hexdigit()), "batch Job name {}", j.name);
        check!(fails, j.members.len() <= 200, "{} has {} members", j.name, j.members.len());
        check!(fails, j.namespace == wns, "batch Job in the repository's namespace");
        check!(fails, j.repo_uid == p_wave.uid, "delete-repo label {}", j.repo_uid);
        check!(fails, j.managed_by.as_deref() == Some("kopiur"), "managed-by label {:?}", j.managed_by);
        check!(fails, j.ttl.is_none(), "no ttlSecondsAfterFinished");
    }
    let covered: BTreeSet<String> = wave_jobs.iter().flat_map(|j| j.members.iter().cloned()).collect();
    check!(fails, wave_uid_set.is_subset(&covered), "every member listed by a batch Job");
    let reaped = wait_for("wave batch Jobs reaped", Duration::from_secs(120), &h.log(), || async {
        Ok(jobs.touching(&wave_uid_set).iter().all(|j| j.gone).then_some(()))
    })
    .await;
    check!(fails, reaped.is_ok(), "wave batch Jobs not reaped 120s after the drain");
    println!("[ack] batch Jobs reaped {:.1}s after the ack", drain_started.elapsed().as_secs_f64());
    let repo: Repository = Api::namespaced(client.clone(), &wns).get("wave").await?;
    let rst = repo.status.clone().unwrap_or_default();
    let mdh = rst.conditions.iter().find(|c| c.type_ == "MassDeletionHeld").cloned();
    let dp = rst.deletion_protection.clone().unwrap_or_default();
    println!(
        "[ack] Repository after drain: MassDeletionHeld {:?}/{:?}; deletionProtection pendingExternal {} held {} ack {:?}",
        mdh.as_ref().map(|c| c.status.clone()),
        mdh.as_ref().map(|c| c.reason.clone()),
        dp.pending_external,
        dp.held,
        dp.ack
    );
    check!(fails, mdh.as_ref().is_some_and(|c| c.status == "False"), "MassDeletionHeld=False once the wave drained");
    check!(fails, dp.held == 0, "deletionProtection.held 0 after the drain: {dp:?}");
    let m = h.metrics().await?;
    println!(
        "[ack] gauges after drain: held {:?} pending_external {:?}",
        metric(&m, "kopiur_snapshot_deletions_held", &wns, "wave"),
        metric(&m, "kopiur_snapshot_deletions_pending_external", &wns, "wave")
    );

    // ---- 7. A lone manual delete below the threshold: one batch of one.
    let single_uid = wave_uids["single-0000"].clone();
    let single_id = wave_ids["single-0000"].clone();
    snaps.delete("single-0000", &DeleteParams::default()).await?;
    let took = wait_set_gone(h, &wns, "single", Duration::from_secs(120)).await?;
    let single_jobs = jobs.touching(&BTreeSet::from([single_uid.clone()]));
    println!(
        "[single] manual delete drained in {:.1}s through {} Job(s) with members {:?}",
        took.as_secs_f64(),
        single_jobs.len(),
        single_jobs.iter().map(|j| j.members.len()).collect::<Vec<_>>()
    );
    check!(fails, single_jobs.len() == 1 && single_jobs[0].members == vec![single_uid.clone()], "one batch of one");
    check!(fails, !k_wave.list().await?.contains(&single_id), "the lone manifest deleted");

    // ---- 6 + 9. A new wave after the ack is held again; acked, the controller is killed
    // while its batch Job runs.
    let wave2_uid_set = uids_of(&wave2_names, &wave_uids);
    let wave2_id_set = ids_of(&wave2_names, &wave_ids);
    delete_set(&client, &wns, "wave2").await?;
    let held2 = wait_held(h, &wns, "wave2", WAVE2, Duration::from_secs(120)).await?;
    let v2 = latest_deletion(&held2).context("deletionTimestamps")?;
    check!(
        fails,
        condition(&held2[0], "DeletionHeld").unwrap().message.contains(&ack_command(&wns, "wave", &v2)),
        "the new wave's message carries its own value"
    );
    check!(fails, wave2_id_set.is_subset(&k_wave.list().await?), "the new wave deleted nothing while held");
    println!("[wave2] a new wave of {WAVE2} after the ack is held again (V = {v2})");
    let mark2 = h.audit.calls().len();
    h.ack(&wns, "wave", &rfc3339(chrono::Utc::now())).await?;
    let seen = wait_for("a batch Job for wave2", Duration::from_secs(120), &h.log(), || async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok(jobs.touching(&wave2_uid_set).into_iter().next())
    })
    .await?;
    h.kill_operator();
    let at_kill = Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), &wns).get_opt(&seen.name).await?;
    let complete_at_kill = at_kill
        .as_ref()
        .and_then(|j| j.status.as_ref())
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Complete" && c.status == "True"));
    println!(
        "[kill] operator SIGKILLed {:.2}s after its batch Job {} appeared (Job Complete at kill: {complete_at_kill}{})",
        seen.first_seen.elapsed().as_secs_f64(),
        seen.name,
        if complete_at_kill { "; the kill landed after the batch finished" } else { "; mid-batch" }
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    h.start_operator().await?;
    let took = wait_set_gone(h, &wns, "wave2", Duration::from_secs(180)).await?;
    let calls2 = h.audit.since(mark2);
    let del2 = successful_deletes(&calls2);
    let twice: Vec<_> = wave2_id_set.iter().filter(|id| del2.get(*id).copied().unwrap_or(0) > 1).collect();
    let never: Vec<_> = wave2_id_set.iter().filter(|id| del2.get(*id).copied().unwrap_or(0) == 0).collect();
    let k = k_wave.list().await?;
    let (bc2, _) = connect_counts(&calls2);
    println!(
        "[kill] after restart wave2 drained in {:.1}s; batch Jobs {}, batch connects {bc2}; ids deleted twice {}, never {}; kopia left of wave2 {}",
        took.as_secs_f64(),
        jobs.touching(&wave2_uid_set).len(),
        twice.len(),
        never.len(),
        k.intersection(&wave2_id_set).count()
    );
    check!(fails, twice.is_empty(), "deleted twice: {twice:?}");
    check!(fails, never.is_empty() && k.is_disjoint(&wave2_id_set), "lost: {never:?}");

    // ---- 8. Namespace teardown: Orphan keeps the data; Delete (20 >= threshold) is held.
    let nss: Api<Namespace> = Api::all(client.clone());
    let orph_before = k_orph.list().await?;
    let nsdel_before = k_nsdel.list().await?;
    nss.delete(&ons, &DeleteParams::default()).await?;
    nss.delete(&dns, &DeleteParams::default()).await?;
    wait_held(h, &dns, "nsdel", NS_SNAPS, Duration::from_secs(180)).await?;
    let took = Instant::now();
    wait_for("orphan namespace gone", Duration::from_secs(180), &h.log(), || async {
        Ok(nss.get_opt(&ons).await?.is_none().then_some(()))
    })
    .await?;
    let orph_after = k_orph.list().await?;
    let orph_jobs = jobs.touching(&orph_uids.values().cloned().collect());
    println!(
        "[ns Orphan] namespace gone; kopia {} -> {}; delete Jobs {}",
        orph_before.len(),
        orph_after.len(),
        orph_jobs.len()
    );
    check!(fails, orph_after == orph_before, "Orphan teardown deleted kopia data");
    check!(fails, orph_jobs.is_empty(), "Orphan teardown created a delete Job");
    let d = nss.get_opt(&dns).await?;
    let d_phase = d.as_ref().and_then(|n| n.status.as_ref()).and_then(|s| s.phase.clone());
    println!("[ns Delete] 20 held; namespace phase {d_phase:?}; kopia {}", k_nsdel.list().await?.len());
    check!(fails, d_phase.as_deref() == Some("Terminating"), "the namespace waits on the held deletions");
    check!(fails, k_nsdel.list().await? == nsdel_before, "held namespace teardown deleted nothing");
    let _ = took;
    h.ack(&hns, "nsdel", &rfc3339(chrono::Utc::now())).await?;
    let started = Instant::now();
    wait_for("nsdel namespace gone after the ack", Duration::from_secs(240), &h.log(), || async {
        Ok(nss.get_opt(&dns).await?.is_none().then_some(()))
    })
    .await?;
    let k = k_nsdel.list().await?;
    println!(
        "[ns Delete] acked: namespace gone {:.1}s later; kopia {} -> {}; batch Jobs {}",
        started.elapsed().as_secs_f64(),
        nsdel_before.len(),
        k.len(),
        jobs.touching(&nsdel_uids.values().cloned().collect()).len()
    );
    check!(fails, k.is_empty(), "every nsdel manifest deleted after the ack");

    // ---- Across the whole run: no manifest deleted twice.
    let all = successful_deletes(&h.audit.calls());
    let dup: Vec<_> = all.iter().filter(|(_, n)| **n > 1).collect();
    println!("[audit] {} manifests deleted by movers, {} more than once", all.len(), dup.len());
    check!(fails, dup.is_empty(), "deleted more than once: {dup:?}");

    // The catalog's rediscovery of the flap snapshots as origin discovered (docs/design/mass-deletion.md §6.2): the
    // cascade releases asked for a scan; every flap manifest comes back as a discovered row.
    let discovered =
        match wait_for("the 30 flap snapshots rediscovered", Duration::from_secs(120), &h.log(), || async {
            let n = Api::<Snapshot>::namespaced(client.clone(), &fns)
                .list(&ListParams::default().labels("kopiur.home-operations.com/origin=discovered"))
                .await?
                .items
                .len();
            Ok((n >= FLAP).then_some(n))
        })
        .await
        {
            Ok(n) => n,
            Err(_) => Api::<Snapshot>::namespaced(client.clone(), &fns)
                .list(&ListParams::default().labels("kopiur.home-operations.com/origin=discovered"))
                .await?
                .items
                .len(),
        };
    println!(
        "[flap] rediscovered as origin discovered: {discovered} ({:.0}s after the flap began)",
        s1.elapsed().as_secs_f64()
    );
    check!(fails, discovered == FLAP, "all 30 flap snapshots rediscovered as origin discovered, got {discovered}");
    recorder.abort();
    println!("deletion e2e total {:.1}s; {} acceptance check(s) failed", t0.elapsed().as_secs_f64(), fails.len());
    ensure!(fails.is_empty(), "{} acceptance check(s) failed:\n  {}", fails.len(), fails.join("\n  "));
    Ok(())
}
