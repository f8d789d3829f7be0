//! `cargo xtask bench` step: time to drain an acknowledged mass-deletion wave (ADR-0006) and
//! the repository connects it costs.
//!
//! On a private local control plane with Garage and the real mover: seed N Succeeded
//! Snapshots (default 600, `KOPIUR_BENCH_WAVE` overrides) over N kopia manifests made by one
//! `kopia snapshot create`, delete them all (the breaker holds the wave), acknowledge with
//! `allow-mass-deletion=<now>`, and measure from the ack to the last finalizer drained. The
//! movers run kopia through an auditing wrapper, so connects are counted, not inferred.
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures::{StreamExt, TryStreamExt};
use kopiur_api::Snapshot;
use kube::Api;
use kube::api::DeleteParams;
use serde_json::json;

#[path = "../tests/support/mod.rs"]
mod support;
use support::*;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let n: usize = std::env::var("KOPIUR_BENCH_WAVE").ok().and_then(|v| v.parse().ok()).unwrap_or(600);
    let mut h = Harness::start().await?;
    let res = bench(&mut h, n).await;
    if res.is_err() {
        eprintln!("operator log tail:\n{}", kopiur_testenv::process::log_tail(&h.log(), 60));
    }
    h.stop_operator();
    res
}

async fn bench(h: &mut Harness, n: usize) -> Result<()> {
    let t0 = Instant::now();
    let client = h.client.clone();
    let ns = h.env.namespace("bench").await?;
    let k = h.kopia_repo("bench/").await?;
    let wave = names("wave", n);
    let ids = k.seed(&wave).await?;
    let repo = h.repository(&ns, "bench", "bench/", json!({})).await?;
    let pin = RepoPin::of(&repo);
    let uids = seed_snapshots(&client, &ns, &pin, items(&wave, &ids, "wave"), 16).await?;
    let uid_set: BTreeSet<String> = uids.values().cloned().collect();
    let id_set: BTreeSet<String> = ids.values().cloned().collect();
    println!("seeded {n} kopia manifests and Snapshots in {:.1}s", t0.elapsed().as_secs_f64());

    h.start_operator().await?;
    let (jobs, recorder) = JobRecorder::spawn(client.clone());
    h.wait_repository_ready(&ns, "bench", Duration::from_secs(300)).await?;

    // Delete the wave the way `kubectl delete -l` does, 48 requests in flight.
    let del_started = Instant::now();
    let api: Api<Snapshot> = Api::namespaced(client.clone(), &ns);
    futures::stream::iter(wave.iter().map(|name| {
        let api = api.clone();
        async move { api.delete(name, &DeleteParams::default()).await.map(|_| ()) }
    }))
    .buffer_unordered(48)
    .try_collect::<Vec<()>>()
    .await?;
    let deletes_sent = del_started.elapsed();
    wait_for("the wave held", Duration::from_secs(600), &h.log(), || async {
        let l = list_set(&client, &ns, "wave").await?;
        let held = l.iter().filter(|s| condition(s, "DeletionHeld").is_some_and(|c| c.status == "True")).count();
        Ok((held == n).then_some(()))
    })
    .await?;
    let held_after = del_started.elapsed();
    if k.list().await?.len() != n || !jobs.touching(&uid_set).is_empty() {
        bail!("the held wave was not left untouched");
    }

    // Ack and drain.
    let mark = h.audit.calls().len();
    h.ack(&ns, "bench", &rfc3339(chrono::Utc::now())).await?;
    let ack_at = Instant::now();
    wait_for("every finalizer drained", Duration::from_secs(900), &h.log(), || async {
        Ok(list_set(&client, &ns, "wave").await?.is_empty().then_some(()))
    })
    .await?;
    let drained = ack_at.elapsed();
    let left = k.list().await?.intersection(&id_set).count();
    let wave_jobs = jobs.touching(&uid_set);
    let calls = h.audit.since(mark);
    let (batch_connects, all_connects) = connect_counts(&calls);
    let deletes = calls.iter().filter(|c| c.is_delete()).count();
    let reaped = wait_for("batch Jobs reaped", Duration::from_secs(180), &h.log(), || async {
        Ok(jobs.touching(&uid_set).iter().all(|j| j.gone).then_some(()))
    })
    .await
    .is_ok();
    let reaped_after = ack_at.elapsed();
    recorder.abort();

    let sizes: Vec<usize> = wave_jobs.iter().map(|j| j.members.len()).collect();
    println!("deletion wave bench ({n} Snapshots on one Repository, threshold 10):");
    println!(
        "  {n} DELETE requests sent in {:.1} s; all {n} held {:.1} s after the first",
        deletes_sent.as_secs_f64(),
        held_after.as_secs_f64()
    );
    println!(
        "  ack -> every finalizer drained: {:.1} s ({:.1} deletions/s)",
        drained.as_secs_f64(),
        n as f64 / drained.as_secs_f64()
    );
    println!(
        "  batch Jobs: {} (members {sizes:?}); reaped: {reaped} ({:.1} s after the ack)",
        wave_jobs.len(),
        reaped_after.as_secs_f64()
    );
    println!(
        "  repository connects per wave: {batch_connects} by batch movers ({all_connects} mover connects in all while draining); kopia snapshot delete calls {deletes}"
    );
    println!("  kopia manifests of the wave left: {left}; total {:.1} s", t0.elapsed().as_secs_f64());
    if left != 0 {
        bail!("{left} manifests of the wave were not deleted");
    }
    Ok(())
}
