//! Catalog discovery end to end (docs/design/repository-breaker.md §3.12) on a private local control plane,
//! Garage and the real mover: kopia snapshots written straight into the repository with the
//! kopia binary, which no Snapshot CR owns, appear as `origin: discovered` Snapshot rows after a
//! `catalog-scan-requested-at` request; deleting a row never touches kopia; a kopia snapshot
//! deleted out of band expires its row at the next (complete) listing, and a row deleted by
//! hand is rediscovered; with `catalog.periodicRefresh` a later kopia snapshot is discovered
//! without any request. Then, with the listing cap lowered below the repository's snapshot
//! count (a truncated listing, which alone never expires a row), a kopia snapshot deleted out of
//! band still expires its row within `ceil(rows / window)` scans through the mover's check of a
//! rotating window of row ids against its full listing, while a present, unlisted row stays.
//!
//! The controller runs under exactly the generated RBAC, so a missing rule fails here.
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use kopiur_api::names::{annotation, label};
use kopiur_api::{Repository, Snapshot};
use kopiur_kopia::Runner;
use kopiur_kopia::backend::Backend;
use kopiur_kopia::cmd::{self, CacheSizes, Identity};
use kopiur_kopia::model::{self, SnapshotManifest};
use kopiur_testenv::garage::Garage;
use kopiur_testenv::wait::wait_for;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
mod support;
use serde_json::json;
use support::env::{Stack, start_operator};
use support::repos::{
    apply, create_secret, kopia_backend, kopia_runner, kopia_snapshot_as_app, repository, s3_backend,
};
use support::wait::repository_ready;

const PASSWORD: &str = "catalog-e2e correct horse";
const PREFIX: &str = "catalog/";
/// The lowered listing cap (`KOPIUR_CATALOG_LIMIT`).
const LIMIT: usize = 3;
/// The lowered verify window (`KOPIUR_CATALOG_VERIFY_WINDOW`).
const WINDOW: usize = 2;

/// The kopia binary, connected to the repository under its own config dir.
fn kopia(dir: &Path, g: &Garage) -> Runner {
    kopia_runner(&dir.join("kopia-seed"), g, PASSWORD).unwrap()
}

fn backend(g: &Garage) -> Backend {
    kopia_backend(g, PREFIX)
}

async fn kopia_ids(k: &Runner) -> Result<BTreeSet<String>> {
    let out = k.run_ok(&cmd::snapshot_list(None)).await?;
    let listed: Vec<SnapshotManifest> = model::parse("snapshot list", &out.stdout)?;
    Ok(listed.into_iter().map(|m| m.id).collect())
}

fn discovered_ids(rows: &[Snapshot]) -> BTreeSet<String> {
    rows.iter().filter_map(|s| s.labels().get(label::SNAPSHOT_ID).cloned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_discovers_expires_and_rediscovers() -> Result<()> {
    let started = Instant::now();
    let Stack { client, garage: g, op_ns, env, dir } = Stack::start().await?;
    let env = &env;
    let _guard = env.log_guard();

    // A short coalescing window keeps the second scan quick (the default is 60 s). The listing
    // cap (3) holds every listing of the first part whole and truncates the last part's; the
    // verify window (2 of 5 rows) makes the last part rotate.
    let (op, log) = start_operator(
        env,
        &op_ns,
        &[
            ("KOPIUR_CATALOG_SCAN_SPACING_SECONDS", "3"),
            ("KOPIUR_CATALOG_LIMIT", &LIMIT.to_string()),
            ("KOPIUR_CATALOG_VERIFY_WINDOW", &WINDOW.to_string()),
        ],
    )
    .await?;

    let ns = env.namespace("t").await?;
    create_secret(&client, &ns, &g, PASSWORD).await?;
    apply(&client, &ns, repository(&ns, "r", s3_backend(&g, PREFIX), json!({}))).await?;
    let repos: Api<Repository> = Api::namespaced(client.clone(), &ns);
    let r = repository_ready(&client, &ns, "r", Duration::from_secs(120), &log).await?;
    let repo_uid = r.uid().context("repository uid")?;
    let unique_id = r.status.as_ref().and_then(|s| s.unique_id.clone()).context("uniqueId")?;
    println!("[{:?}] r Ready", started.elapsed());

    // The first bootstrap listed an empty repository: no rows.
    let snaps: Api<Snapshot> = Api::namespaced(client.clone(), &ns);
    let discovered_lp = ListParams::default().labels(&format!("{}=discovered", label::ORIGIN));
    assert!(snaps.list(&discovered_lp).await?.items.is_empty());

    // Seed three kopia snapshots nobody owns, straight into the repository.
    let k = kopia(dir.path(), &g);
    k.run_ok(&cmd::connect(&backend(&g), &Identity::new("seed", "e2e"), false, &CacheSizes::default())?).await?;
    let src = dir.path().join("src");
    std::fs::create_dir_all(&src)?;
    let mut seeded = Vec::new();
    for i in 0..3 {
        std::fs::write(src.join(format!("f{i}.txt")), format!("catalog e2e file {i}\n"))?;
        seeded.push(kopia_snapshot_as_app(&k, &src, &ns).await?);
    }
    let all: BTreeSet<String> = seeded.iter().cloned().collect();
    assert_eq!(kopia_ids(&k).await?, all);
    println!("[{:?}] seeded {seeded:?}", started.elapsed());

    // A scan request: three discovered rows appear.
    let request = |token: &str| json!({"metadata": {"annotations": {annotation::CATALOG_SCAN_REQUESTED_AT: token}}});
    repos.patch("r", &PatchParams::default(), &Patch::Merge(&request("scan-1"))).await?;
    let rows = wait_for("3 discovered rows", Duration::from_secs(90), &log, || async {
        let rows = snaps.list(&discovered_lp).await?.items;
        let done = discovered_ids(&rows) == all
            && rows
                .iter()
                .all(|s| s.status.as_ref().and_then(|x| x.phase.as_ref()).map(|p| p.as_str()) == Some("Discovered"));
        Ok(done.then_some(rows))
    })
    .await?;
    println!("[{:?}] rows discovered", started.elapsed());
    for s in &rows {
        let id = s.labels().get(label::SNAPSHOT_ID).cloned().unwrap_or_default();
        assert_eq!(s.name_any(), format!("r-{}", &id[..12]));
        assert_eq!(s.labels().get(label::REPOSITORY_UID), Some(&repo_uid));
        assert_eq!(s.spec.deletion_policy, Some(kopiur_api::snapshot_policy::DeletionPolicy::Retain));
        assert!(s.spec.on_schedule_delete.is_none() && s.spec.policy_ref.is_none());
        assert_eq!(s.spec.repository.as_ref().map(|r| r.name.as_str()), Some("r"));
        assert!(s.finalizers().is_empty(), "a discovered row carries no finalizer");
        let st = s.status.clone().context("status")?;
        assert_eq!(st.origin.as_ref().map(|o| o.as_str()), Some("discovered"));
        assert_eq!(st.snapshot.as_ref().and_then(|x| x.kopia_snapshot_id.clone()), Some(id.clone()));
        assert_eq!(
            st.snapshot.as_ref().and_then(|x| x.identity.as_ref()).map(|i| i.to_string()),
            Some(format!("app@{ns}:/data"))
        );
        let res = st.resolved.clone().context("resolved")?;
        assert_eq!(res.repository.as_ref().and_then(|r| r.uid.clone()), Some(repo_uid.clone()));
        assert_eq!(res.repository_unique_id.as_deref(), Some(unique_id.as_str()));
        assert!(st.job.is_none(), "a discovered row never launches a Job");
    }
    // The rows are created before the repository's status records the scan: wait for it.
    let r = wait_for("scan-1 honored in status.catalog", Duration::from_secs(30), &log, || async {
        let r = repos.get("r").await?;
        let honored = r.status.as_ref().and_then(|s| s.catalog.as_ref()?.scan_request_honored.clone());
        Ok((honored.as_deref() == Some("scan-1")).then_some(r))
    })
    .await?;
    let cat = r.status.as_ref().and_then(|s| s.catalog.clone()).context("status.catalog")?;
    assert_eq!(cat.scan_request_honored.as_deref(), Some("scan-1"));
    assert_eq!(cat.discovered_backup_count, Some(3));
    assert!(cat.last_refresh_at.is_some());
    let count = |r: &kopiur_api::Repository| r.status.as_ref().and_then(|s| s.storage_stats.as_ref()?.snapshot_count);
    assert_eq!(count(&r), Some(all.len() as i64), "storageStats.snapshotCount from the listing");

    // Deleting a row by hand deletes the CR only: kopia still has the snapshot.
    let by_hand = seeded[0].clone();
    let by_hand_row = format!("r-{}", &by_hand[..12]);
    snaps.delete(&by_hand_row, &DeleteParams::default()).await?;
    wait_for("the hand-deleted row gone", Duration::from_secs(30), &log, || async {
        Ok(snaps.get_opt(&by_hand_row).await?.is_none().then_some(()))
    })
    .await?;
    assert_eq!(kopia_ids(&k).await?, all, "deleting a discovered row touched kopia");

    // Delete one kopia snapshot out of band; the next (complete) listing expires its row and
    // rediscovers the hand-deleted one.
    let gone = seeded[2].clone();
    k.run_ok(&cmd::snapshot_delete(std::slice::from_ref(&gone))).await?;
    let remaining: BTreeSet<String> = all.iter().filter(|i| **i != gone).cloned().collect();
    assert_eq!(kopia_ids(&k).await?, remaining);
    repos.patch("r", &PatchParams::default(), &Patch::Merge(&request("scan-2"))).await?;
    wait_for("row expired and row rediscovered", Duration::from_secs(90), &log, || async {
        let rows = snaps.list(&discovered_lp).await?.items;
        let live: Vec<Snapshot> = rows.into_iter().filter(|s| s.metadata.deletion_timestamp.is_none()).collect();
        let done = discovered_ids(&live) == remaining
            && live
                .iter()
                .all(|s| s.status.as_ref().and_then(|x| x.phase.as_ref()).map(|p| p.as_str()) == Some("Discovered"));
        Ok(done.then_some(()))
    })
    .await?;
    // The rows are created before the repository's status records the scan: wait for it.
    let r = wait_for("scan-2 honored in status.catalog", Duration::from_secs(30), &log, || async {
        let r = repos.get("r").await?;
        let honored = r.status.as_ref().and_then(|s| s.catalog.as_ref()?.scan_request_honored.clone());
        Ok((honored.as_deref() == Some("scan-2")).then_some(r))
    })
    .await?;
    let cat = r.status.as_ref().and_then(|s| s.catalog.clone()).context("status.catalog")?;
    assert_eq!(cat.scan_request_honored.as_deref(), Some("scan-2"));
    assert_eq!(cat.discovered_backup_count, Some(2));
    assert_eq!(count(&r), Some(remaining.len() as i64), "snapshotCount follows the listing");
    // Nothing deleted kopia data along the way: only the out-of-band delete did.
    assert_eq!(kopia_ids(&k).await?, remaining);
    println!("[{:?}] expired and rediscovered", started.elapsed());

    // The periodic refresh: a spec change (a strict reconnect, which lists), then a kopia
    // snapshot written afterwards is discovered within the interval without any request.
    let generation = repos.get("r").await?.metadata.generation.unwrap_or(0);
    repos
        .patch(
            "r",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"catalog": {"periodicRefresh": true, "refreshInterval": "30s"}}})),
        )
        .await?;
    wait_for("the spec change folded", Duration::from_secs(60), &log, || async {
        let r = repos.get("r").await?;
        Ok((r.status.as_ref().and_then(|s| s.observed_generation) > Some(generation)).then_some(()))
    })
    .await?;
    std::fs::write(src.join("late.txt"), "written after the last scan\n")?;
    let late = kopia_snapshot_as_app(&k, &src, &ns).await?;
    let mut with_late = remaining.clone();
    with_late.insert(late.clone());
    wait_for("the periodic refresh discovers the late snapshot", Duration::from_secs(75), &log, || async {
        let rows = snaps.list(&discovered_lp).await?.items;
        Ok((discovered_ids(&rows) == with_late).then_some(()))
    })
    .await?;
    let cat = repos.get("r").await?.status.and_then(|s| s.catalog).context("status.catalog")?;
    assert_eq!(cat.scan_request_honored.as_deref(), Some("scan-2"), "no request was needed");
    println!("[{:?}] periodic refresh discovered {late}", started.elapsed());

    // Truncated listings: two more kopia snapshots make five, over the cap of three. The
    // listing holds the newest three; the two oldest rows are not listed and stay.
    let mut five = with_late.clone();
    for i in 0..2 {
        std::fs::write(src.join(format!("more{i}.txt")), format!("over the cap {i}\n"))?;
        five.insert(kopia_snapshot_as_app(&k, &src, &ns).await?);
    }
    assert_eq!(kopia_ids(&k).await?, five);
    // One scan, honored: wait on the token (a periodic refresh may also fold in between).
    let scan = |token: String| {
        let repos = repos.clone();
        let log = log.clone();
        async move {
            repos.patch("r", &PatchParams::default(), &Patch::Merge(&request(&token))).await?;
            wait_for(&format!("scan {token} honored"), Duration::from_secs(60), &log, || async {
                let cat = repos.get("r").await?.status.and_then(|s| s.catalog);
                Ok((cat.and_then(|c| c.scan_request_honored).as_deref() == Some(token.as_str())).then_some(()))
            })
            .await
        }
    };
    scan("trunc-0".into()).await?;
    let rows = snaps.list(&discovered_lp).await?.items;
    assert_eq!(discovered_ids(&rows), five, "the new ones discovered, the unlisted old ones kept");
    let r = repos.get("r").await?;
    assert_eq!(count(&r), Some(five.len() as i64), "snapshotCount counts the full listing, over the cap");
    let truncated_folds = || -> Result<Vec<String>> {
        Ok(std::fs::read_to_string(&log)?
            .lines()
            .filter(|l| l.contains("catalog listing applied") && l.contains("truncated=true"))
            .map(str::to_string)
            .collect())
    };
    ensure!(!truncated_folds()?.is_empty(), "no truncated listing was folded: the cap did not apply");

    // Delete the oldest kopia snapshot out of band: its row is outside every truncated listing.
    let stale = seeded[0].clone();
    let present = seeded[1].clone();
    k.run_ok(&cmd::snapshot_delete(std::slice::from_ref(&stale))).await?;
    let four: BTreeSet<String> = five.iter().filter(|i| **i != stale).cloned().collect();
    assert_eq!(kopia_ids(&k).await?, four);
    let bound = five.len().div_ceil(WINDOW);
    let mut scans = 0;
    while scans < bound + 1 {
        scans += 1;
        scan(format!("trunc-{scans}")).await?;
        let rows = snaps.list(&discovered_lp).await?.items;
        let live =
            discovered_ids(&rows.into_iter().filter(|s| s.metadata.deletion_timestamp.is_none()).collect::<Vec<_>>());
        assert!(live.contains(&present), "a present kopia snapshot's row was expired");
        if live == four {
            break;
        }
    }
    println!("[{:?}] the stale row expired after {scans} truncated scan(s) (bound {bound})", started.elapsed());
    let rows = snaps.list(&discovered_lp).await?.items;
    assert_eq!(discovered_ids(&rows), four, "the stale row expired within ceil(rows/window) scans");
    ensure!(scans <= bound, "took {scans} scans, over ceil({}/{WINDOW}) = {bound}", five.len());
    ensure!(
        truncated_folds()?.iter().any(|l| l.contains("verified_absent=1")),
        "the row went without a truncated listing's check: {:?}",
        truncated_folds()?
    );
    let r = repos.get("r").await?;
    assert!(
        r.annotations().contains_key("kopiur.home-operations.com/catalog-verify-cursor"),
        "the rotation cursor is recorded"
    );
    assert_eq!(r.status.as_ref().and_then(|s| s.catalog.as_ref()?.discovered_backup_count), Some(4));
    // Only the out-of-band delete touched kopia.
    assert_eq!(kopia_ids(&k).await?, four);
    drop(op);
    Ok(())
}
