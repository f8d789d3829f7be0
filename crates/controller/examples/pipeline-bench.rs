//! `cargo xtask bench` step: the backup pipeline's scale figures (issue: the backup pipeline).
//!
//! On a private local control plane with Garage and the real mover:
//! - controller RSS with 2,000 and with 10,000 discovered Snapshots in the store (goal: at most
//!   64 MiB at 10,000), and reconcile throughput over those rows at start-up;
//! - Snapshot-created to Job-created latency, p50 / p95 over sequential manual Snapshots
//!   (goal: p50 at most 1 s);
//! - the start-up write backlog: the reconcile count reaches the row count before every row's
//!   one status write is sent (a write's own watch event is reconciled and counted too), so
//!   the bench waits until the controller's writes stop for 20 s and prints when that was and
//!   what was written, by verb and resource;
//! - API write requests per idle minute (goal 0), from the controller's own
//!   `kopiur_kube_client_requests_total`, Lease renewals reported apart, by resource;
//! - API requests during each start-up by verb (LISTs are paged by the watcher), and LISTs per
//!   steady-state minute (goal 0: the controller reads from its watch caches).
//!
//! `KOPIUR_BENCH_ROWS` ("2000,10000"; "50000" for the 50,000-row figure) and `KOPIUR_BENCH_LATENCY_RUNS` (20) override the sizes;
//! `KOPIUR_BENCH_SEED=legacy` seeds rows without the status the catalog now writes at creation
//! (the start then writes every row once: the worst start).
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kopiur_api::Snapshot;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

#[path = "../tests/support/mod.rs"]
mod support;
use support::*;

fn sum_metric(text: &str, family: &str, filter: impl Fn(&str) -> bool) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(family) && l[family.len()..].starts_with(['{', ' ']))
        .filter(|l| filter(l))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `verb=count` for every verb of `client` in `kopiur_kube_client_requests_total`.
fn by_verb(text: &str, client_label: &str) -> String {
    ["list", "watch", "get", "create", "patch", "update", "delete"]
        .iter()
        .map(|v| {
            let n = sum_metric(text, "kopiur_kube_client_requests_total", |l| {
                l.contains(&format!("client=\"{client_label}\"")) && l.contains(&format!("verb=\"{v}\""))
            });
            format!("{v}={}", n + 0.0)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The value of label `name` in one exposition line.
fn label<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let start = line.find(&format!("{name}=\""))? + name.len() + 2;
    let len = line[start..].find('"')?;
    Some(&line[start..start + len])
}

/// Write requests of `client_label` per `(verb, resource)`.
fn writes_by_resource(text: &str, client_label: &str) -> BTreeMap<(String, String), f64> {
    let family = "kopiur_kube_client_requests_total";
    let mut out = BTreeMap::new();
    for l in text.lines().filter(|l| l.starts_with(family) && l[family.len()..].starts_with('{')) {
        if label(l, "client") != Some(client_label) {
            continue;
        }
        let (Some(verb), Some(kind)) = (label(l, "verb"), label(l, "kind")) else { continue };
        if !["create", "update", "patch", "delete"].contains(&verb) {
            continue;
        }
        let n = l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        *out.entry((verb.to_string(), kind.to_string())).or_insert(0.0) += n;
    }
    out
}

/// `verb resource=count` for every write that changed between two scrapes.
fn writes_delta(before: &str, after: &str, client_label: &str) -> String {
    let b = writes_by_resource(before, client_label);
    let parts: Vec<String> = writes_by_resource(after, client_label)
        .into_iter()
        .filter_map(|(k, n)| {
            let d = n - b.get(&k).copied().unwrap_or(0.0);
            (d > 0.0).then(|| format!("{} {}={d}", k.0, k.1))
        })
        .collect();
    if parts.is_empty() { "none".into() } else { parts.join(", ") }
}

/// All write requests of `client_label`.
fn total_writes(text: &str, client_label: &str) -> f64 {
    writes_by_resource(text, client_label).values().sum()
}

/// The high-water mark of a process's resident set (`VmHWM`), in KiB.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn snapshot_resource() -> kube::discovery::ApiResource {
    kube::discovery::ApiResource::erase::<Snapshot>(&())
}

/// Discovered rows pinned to a repository that does not exist, so no listing expires them.
/// Seeds rows exactly as the catalog writes them (`catalog::row` and
/// `catalog::created_row_status`: four labels, the kopia identity, timing, size, the resolved
/// repository and identity, the kstatus trio), only named `bench-row-N`.
async fn seed_discovered(client: &Client, ns: &str, from: usize, to: usize) -> Result<()> {
    use kopiur_controller::catalog::{RepoScope, created_row_status, row, row_status};
    // `KOPIUR_BENCH_SEED=legacy`: rows as the catalog created them before it wrote the settled
    // status at creation (no conditions, no observedGeneration), so the controller's start
    // writes every row's status once: the worst start, over rows no controller has seen.
    let legacy = std::env::var("KOPIUR_BENCH_SEED").is_ok_and(|v| v == "legacy");
    let api: Api<Snapshot> = Api::namespaced(client.clone(), ns);
    let scope = RepoScope {
        kind: kopiur_api::shared::RepositoryKind::Repository,
        name: "catalog-bench".into(),
        namespace: Some(ns.to_string()),
        uid: "00000000-0000-0000-0000-00000000b000".into(),
        unique_id: Some("0123456789abcdef0123456789abcdef".into()),
        fallback_namespace: None,
        allowed: None,
        bounds: Default::default(),
    };
    let t0 = chrono::DateTime::parse_from_rfc3339("2026-11-01T00:00:00Z")?.with_timezone(&chrono::Utc);
    futures::stream::iter((from..to).map(|i| {
        let (api, scope) = (api.clone(), &scope);
        async move {
            let entry = kopiur_mover::result::CatalogEntry {
                id: format!("{:032x}", 0xb000_0000_0000_u128 + i as u128),
                username: "app".into(),
                hostname: format!("{ns}.data"),
                path: format!("/data/{i}"),
                start_time: Some(t0 + chrono::Duration::minutes(i as i64)),
                end_time: Some(t0 + chrono::Duration::minutes(i as i64) + chrono::Duration::seconds(42)),
                size: 1_073_741_824 + i as i64,
                files: 1000,
                tags: BTreeMap::new(),
            };
            let name = format!("bench-row-{i:05}");
            let mut obj = row(scope, ns, &entry);
            obj.metadata.name = Some(name.clone());
            let generation = match api.create(&PostParams::default(), &obj).await {
                Ok(created) => created.metadata.generation,
                Err(kube::Error::Api(e)) if e.code == 409 => Some(1),
                Err(e) => return Err(anyhow::Error::from(e)),
            };
            let status = if legacy {
                json!({ "status": row_status(scope, &entry) })
            } else {
                json!({ "status": created_row_status(scope, &entry, generation, chrono::Utc::now()) })
            };
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await?;
            Ok::<_, anyhow::Error>(())
        }
    }))
    .buffer_unordered(16)
    .try_collect::<Vec<()>>()
    .await?;
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let rows: Vec<usize> = std::env::var("KOPIUR_BENCH_ROWS")
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![2000, 10000]);
    let runs: usize = std::env::var("KOPIUR_BENCH_LATENCY_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let mut h = Harness::start().await?;
    let res = bench(&mut h, &rows, runs).await;
    if res.is_err() {
        eprintln!("operator log tail:\n{}", kopiur_testenv::process::log_tail(&h.log(), 60));
    }
    h.stop_operator();
    res
}

async fn bench(h: &mut Harness, rows: &[usize], runs: usize) -> Result<()> {
    let client = h.client.clone();
    let ns = h.env.namespace("bench").await?;

    // 1. RSS and start-up reconcile throughput over N discovered rows.
    let mut seeded = 0usize;
    for (idx, &n) in rows.iter().enumerate() {
        let t = Instant::now();
        seed_discovered(&client, &ns, seeded, n).await?;
        seeded = seeded.max(n);
        println!("seeded {n} discovered Snapshots ({:.1}s)", t.elapsed().as_secs_f64());
        h.start_operator().await?;
        let started = Instant::now();
        let mut reached = None;
        let deadline = Instant::now() + Duration::from_secs(600);
        while Instant::now() < deadline {
            if let Ok(text) = h.metrics().await {
                let done =
                    sum_metric(&text, "kopiur_controller_reconciliations_total", |l| l.contains("kind=\"Snapshot\""));
                if done >= n as f64 {
                    reached = Some(started.elapsed());
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let reached = reached.context("the controller did not reconcile every row within 600 s")?;
        // Settled: 30 s after the last start-up reconcile (two allocator trim periods).
        tokio::time::sleep(Duration::from_secs(30)).await;
        let text = h.metrics().await?;
        println!("rows {n}: API requests of the controller from its start to settled: {}", by_verb(&text, "main"));
        let rss = sum_metric(&text, "kopiur_process_resident_memory_bytes", |_| true);
        let peak = h.op.as_ref().and_then(|o| o.proc_.pid()).and_then(peak_rss_kib);
        println!(
            "rows {n}: controller RSS {:.1} MiB settled (goal <= 64 MiB at 10,000), peak {} during start-up; start-up reconcile of {n} rows in {:.2}s = {:.0} reconciles/s (process start included)",
            rss / 1048576.0,
            peak.map(|k| format!("{:.1} MiB", k as f64 / 1024.0)).unwrap_or_else(|| "unknown".into()),
            reached.as_secs_f64(),
            n as f64 / reached.as_secs_f64()
        );
        if idx == 0 {
            // One stored row as the controller left it: what every store entry holds.
            let row: serde_json::Value =
                Api::<kube::core::DynamicObject>::namespaced_with(client.clone(), &ns, &snapshot_resource())
                    .get("bench-row-00000")
                    .await
                    .map(|o| serde_json::to_value(o).unwrap_or_default())?;
            println!("one stored row ({} bytes of JSON): {row}", row.to_string().len());
        }
        // The start-up's status writes can outlast the reconcile count (a write's own watch
        // event is reconciled again): wait until the controller's writes stop for 20 s.
        let drain_from = Instant::now();
        let first = h.metrics().await?;
        let (mut last, mut last_change, mut last_text) = (total_writes(&first, "main"), Instant::now(), first.clone());
        while last_change.elapsed() < Duration::from_secs(20) && drain_from.elapsed() < Duration::from_secs(900) {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let text = h.metrics().await?;
            let w = total_writes(&text, "main");
            if w != last {
                (last, last_change) = (w, Instant::now());
            }
            last_text = text;
        }
        let more = total_writes(&last_text, "main") - total_writes(&first, "main");
        println!(
            "rows {n}: start-up writes after the reconcile count was reached and settled: {more} more{} ({})",
            if more > 0.0 {
                format!(", the last {:.0}s after start", (last_change - started).as_secs_f64())
            } else {
                String::new()
            },
            writes_delta(&first, &last_text, "main"),
        );
        println!("rows {n}: every write of the controller from its start: {}", writes_delta("", &last_text, "main"));
        // Steady state: the start-up writes have stopped; 30 s more (two allocator trim periods).
        tokio::time::sleep(Duration::from_secs(30)).await;
        let text = h.metrics().await?;
        let rss = sum_metric(&text, "kopiur_process_resident_memory_bytes", |_| true);
        let peak = h.op.as_ref().and_then(|o| o.proc_.pid()).and_then(peak_rss_kib);
        println!(
            "rows {n}: controller RSS {:.1} MiB once the start-up writes stopped (30 s later), peak {} over the whole start",
            rss / 1048576.0,
            peak.map(|k| format!("{:.1} MiB", k as f64 / 1024.0)).unwrap_or_else(|| "unknown".into()),
        );
        // The last size's operator stays up: its store holds every row and it has settled, so
        // what follows is measured in steady state, not behind a second start-up pass.
        if idx + 1 < rows.len() {
            h.stop_operator();
        }
    }

    // 2. Snapshot-created -> Job-created latency, with the last size's rows in the store.
    if h.op.is_none() {
        h.start_operator().await?;
    }
    h.repository(&ns, "lat", "lat/", json!({})).await?;
    h.wait_repository_ready(&ns, "lat", Duration::from_secs(300)).await?;
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data", "namespace": ns},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}}
    }))?;
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns).create(&PostParams::default(), &pvc).await?;
    kopiur_testenv::apply::apply_value(
        &client,
        &ns,
        &json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotPolicy",
            "metadata": {"name": "p", "namespace": ns},
            "spec": {"repository": {"name": "lat"}, "copyMethod": "Direct", "sources": [{"pvc": {"name": "data"}}]}
        }),
    )
    .await?;
    let seen: Arc<Mutex<BTreeMap<String, Instant>>> = Arc::default();
    let seen2 = seen.clone();
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let watch = tokio::spawn(async move {
        let mut s = std::pin::pin!(watcher(jobs, watcher::Config::default()).applied_objects());
        while let Some(Ok(j)) = s.next().await {
            seen2.lock().unwrap().entry(j.name_any()).or_insert_with(Instant::now);
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let snaps: Api<Snapshot> = Api::namespaced(client.clone(), &ns);
    let mut lat = Vec::new();
    for i in 0..runs {
        let name = format!("lat-{i:03}");
        let obj: Snapshot = serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": name, "namespace": ns}, "spec": {"policyRef": {"name": "p"}}
        }))?;
        snaps.create(&PostParams::default(), &obj).await?;
        let created = Instant::now();
        let deadline = created + Duration::from_secs(60);
        loop {
            let at = seen.lock().unwrap().get(&kopiur_mover::job::job_name(&name)).copied();
            if let Some(at) = at {
                lat.push(at.saturating_duration_since(created).as_secs_f64());
                break;
            }
            if Instant::now() > deadline {
                anyhow::bail!("no Job for {name} within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Let the backup finish so runs do not queue behind each other.
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            let s = snaps.get(&name).await?;
            let ph = s.status.as_ref().and_then(|x| x.phase.as_ref()).map(|p| p.as_str().to_string());
            if matches!(ph.as_deref(), Some("Succeeded" | "Unchanged" | "Failed")) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    watch.abort();
    lat.sort_by(f64::total_cmp);
    println!(
        "Snapshot created -> Job created over {} runs: p50 {:.3}s, p95 {:.3}s, max {:.3}s (goal p50 <= 1 s)",
        lat.len(),
        percentile(&lat, 50.0),
        percentile(&lat, 95.0),
        lat.last().copied().unwrap_or(f64::NAN)
    );

    // 3. API writes per idle minute: everything above settled (10,000+ objects, a Ready
    //    repository, a policy and its Snapshots), nothing changing.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let writes = |text: &str, client_label: &str| {
        sum_metric(text, "kopiur_kube_client_requests_total", |l| {
            l.contains(&format!("client=\"{client_label}\""))
                && ["create", "update", "patch", "delete"].iter().any(|v| l.contains(&format!("verb=\"{v}\"")))
        })
    };
    let verb = |text: &str, v: &str| {
        sum_metric(text, "kopiur_kube_client_requests_total", |l| {
            l.contains("client=\"main\"") && l.contains(&format!("verb=\"{v}\""))
        })
    };
    let before = h.metrics().await?;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let after = h.metrics().await?;
    println!(
        "steady-state minute: {} LISTs (goal 0), {} GETs, {} watch (re)connects by the controller",
        verb(&after, "list") - verb(&before, "list"),
        verb(&after, "get") - verb(&before, "get"),
        verb(&after, "watch") - verb(&before, "watch"),
    );
    println!("idle minute writes by resource: {}", writes_delta(&before, &after, "main"));
    let objects = snaps.list(&Default::default()).await?.items.len();
    println!(
        "idle minute over {objects} Snapshots + repository + policy: {} API writes (goal 0); Lease renewals {} (leader election, expected)",
        writes(&after, "main") - writes(&before, "main"),
        writes(&after, "election") - writes(&before, "election"),
    );
    Ok(())
}
