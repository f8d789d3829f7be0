//! The kopiur controller binary: metrics and health endpoints, leader election, then one
//! controller per kind over shared reflector stores, one watch per kind (`controllers.rs`).
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use kopiur_api::{ClusterRepository, Repository};
use kopiur_controller::config::Config;
use kopiur_controller::metrics::{Metrics, RepoGauge};
use kopiur_controller::repo_view::RepoObject;
use kube::ResourceExt;
use kube::runtime::reflector::Store;

type Stores = (Store<Repository>, Store<ClusterRepository>);

fn gauges<K: RepoObject>(store: &Store<K>, out: &mut Vec<RepoGauge>) {
    for o in store.state() {
        let st = o.status_common();
        let phase = st.and_then(|s| s.phase.as_ref()).map(|p| p.as_str().to_string());
        let degraded = phase.as_deref() == Some("Degraded");
        let h = st.and_then(|s| s.health.as_ref());
        out.push(RepoGauge {
            kind: K::KIND.as_str(),
            namespace: o.namespace().unwrap_or_default(),
            name: o.name_any(),
            phase,
            streak: h.map(|h| i64::from(h.consecutive_probe_failures)),
            open_since: h.and_then(|h| h.breaker_opened_at).filter(|_| degraded).map(|t| t.timestamp()),
            holdoff: h.and_then(|h| h.strict_retry.as_ref()).filter(|_| degraded).map(|r| r.holdoff_seconds),
        });
    }
}

fn main() -> anyhow::Result<()> {
    // Before the runtime starts its threads (see `heap`).
    let arenas_capped = kopiur_controller::heap::limit_arenas();
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(run(arenas_capped))
}

async fn run(arenas_capped: bool) -> anyhow::Result<()> {
    // Colour only on a terminal: a container's log (`kubectl logs`) and a log file get plain text.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let config = Config::from_env();
    config.check().map_err(anyhow::Error::msg)?;
    tracing::debug!(arenas_capped, "allocator arenas capped at {}", kopiur_controller::heap::ARENA_MAX);
    tokio::spawn(kopiur_controller::heap::trim_periodically());
    let metrics = Arc::new(Metrics::default());
    // Every apiserver call is counted (`kopiur_kube_client_requests_total`); leader election
    // gets its own client label so idle-write figures can tell Lease renewals apart.
    let client = kopiur_controller::client_metrics::client(metrics.clone(), "main").await?;
    let election_client = kopiur_controller::client_metrics::client(metrics.clone(), "election").await?;
    // PID 1 in its container: SIGTERM/SIGINT are handled here, for a passive replica too.
    tokio::spawn(kopiur_controller::leader::exit_on_signal(
        election_client.clone(),
        config.namespace.clone(),
        config.lease_name.clone(),
        config.identity.clone(),
    ));
    let stores: Arc<OnceLock<Stores>> = Arc::new(OnceLock::new());
    let ready = Arc::new(AtomicBool::new(false));

    {
        let metrics = metrics.clone();
        let stores = stores.clone();
        let ready = ready.clone();
        let addr = config.metrics_addr.clone();
        tokio::spawn(async move {
            let render = Arc::new(move || {
                let mut g = Vec::new();
                if let Some((r, c)) = stores.get() {
                    gauges(r, &mut g);
                    gauges(c, &mut g);
                }
                metrics.render(&g)
            });
            let ready = Arc::new(move || ready.load(Ordering::Relaxed));
            if let Err(e) = kopiur_controller::http::serve(&addr, render, ready).await {
                tracing::error!(error = %e, "metrics server failed");
                std::process::exit(1);
            }
        });
    }

    // A passive replica is ready (it serves health and waits for the Lease).
    ready.store(true, Ordering::Relaxed);
    kopiur_controller::leader::lead(
        election_client,
        &config.namespace,
        &config.lease_name,
        &config.identity,
        metrics.clone(),
    )
    .await;

    // One watch per kind, fanned out to every controller (`controllers.rs`).
    let (ctx, feeds) = kopiur_controller::controllers::build(&client, config.clone(), metrics.clone());
    let _ = stores.set((ctx.stores.repos.clone(), ctx.stores.crepos.clone()));
    kopiur_controller::controllers::run(ctx, feeds).await;
    // The controllers end only on SIGTERM/SIGINT (`shutdown_on_signal`); the signal task
    // (`leader::exit_on_signal`) releases the Lease and exits the process. Give it the time.
    tokio::time::sleep(std::time::Duration::from_secs(10)).await;
    Ok(())
}
