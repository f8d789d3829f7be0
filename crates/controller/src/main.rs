//! The kopiur controller binary: metrics and health endpoints, leader election, then one
//! controller per kind over shared reflector stores.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kopiur_api::{ClusterRepository, Repository};
use kopiur_controller::config::Config;
use kopiur_controller::metrics::{Metrics, RepoGauge};
use kopiur_controller::repository::observe::secret_names;
use kopiur_controller::repository::{Ctx, RepoObject, error_policy, reconcile};
use kube::core::PartialObjectMeta;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use tokio::sync::mpsc;
use tokio_stream_shim::ReceiverStream;

mod tokio_stream_shim {
    //! A minimal mpsc receiver stream (avoids a dependency for one adapter).
    use std::pin::Pin;
    use std::task::{Context, Poll};
    pub struct ReceiverStream<T>(pub tokio::sync::mpsc::Receiver<T>);
    impl<T> futures::Stream for ReceiverStream<T> {
        type Item = T;
        fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
            self.0.poll_recv(cx)
        }
    }
}

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

/// Repositories that reference a Secret (by name, in their home namespace).
fn referrers<K: RepoObject>(store: &Store<K>, ns: &str, name: &str, operator_ns: &str) -> Vec<ObjectRef<K>> {
    store
        .state()
        .iter()
        .filter(|r| r.home_namespace(operator_ns) == ns)
        .filter(|r| {
            let (pw, auth) = secret_names(r.as_ref());
            pw == name || auth.as_deref() == Some(name)
        })
        .map(|r| ObjectRef::from_obj(r.as_ref()))
        .collect()
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

    // Shared stores: owned Jobs (label-selected) and Secret metadata. The reflector updates the
    // store before it yields the event, so a reconcile triggered by it sees the new state.
    let (jobs, job_writer) = reflector::store::<Job>();
    let job_events = reflector::reflector(
        job_writer,
        watcher(
            Api::<Job>::all(client.clone()),
            watcher::Config::default().labels("app.kubernetes.io/managed-by=kopiur"),
        ),
    )
    .default_backoff()
    .touched_objects();
    let (secrets, secret_writer) = reflector::store();
    let secret_events = reflector::reflector(
        secret_writer,
        watcher(Api::<PartialObjectMeta<Secret>>::all(client.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .touched_objects();

    let ctx = Arc::new(Ctx {
        client: client.clone(),
        config: config.clone(),
        metrics: metrics.clone(),
        recorder: Recorder::new(
            client.clone(),
            Reporter { controller: "kopiur-controller".into(), instance: Some(config.identity.clone()) },
        ),
        jobs,
        secrets,
        warned_acks: Mutex::new(Default::default()),
        mover_rbac_ready: Mutex::new(Default::default()),
    });

    let (repo_tx, repo_rx) = mpsc::channel::<ObjectRef<Repository>>(1024);
    let (crepo_tx, crepo_rx) = mpsc::channel::<ObjectRef<ClusterRepository>>(1024);
    let wc = watcher::Config::default();
    let repo_ctl =
        Controller::new(Api::<Repository>::all(client.clone()), wc.clone()).reconcile_on(ReceiverStream(repo_rx));
    let crepo_ctl =
        Controller::new(Api::<ClusterRepository>::all(client.clone()), wc).reconcile_on(ReceiverStream(crepo_rx));
    let repo_store = repo_ctl.store();
    let crepo_store = crepo_ctl.store();
    let _ = stores.set((repo_store.clone(), crepo_store.clone()));

    // Job -> owning repository.
    {
        let (rtx, ctx_) = (repo_tx.clone(), crepo_tx.clone());
        tokio::spawn(async move {
            let mut s = std::pin::pin!(job_events);
            while let Some(ev) = s.next().await {
                let Ok(job) = ev else { continue };
                for o in job.owner_references() {
                    if o.kind == Repository::kind(&()) {
                        let _ = rtx.send(ObjectRef::new(&o.name).within(&job.namespace().unwrap_or_default())).await;
                    } else if o.kind == ClusterRepository::kind(&()) {
                        let _ = ctx_.send(ObjectRef::new(&o.name)).await;
                    }
                }
            }
        });
    }
    // Secret -> repositories that reference it (metadata only: values never reach us).
    {
        let (rs, cs) = (repo_store.clone(), crepo_store.clone());
        let op_ns = config.namespace.clone();
        tokio::spawn(async move {
            let mut s = std::pin::pin!(secret_events);
            while let Some(ev) = s.next().await {
                let Ok(sec) = ev else { continue };
                let ns = sec.namespace().unwrap_or_default();
                let name = sec.name_any();
                for r in referrers(&rs, &ns, &name, &op_ns) {
                    let _ = repo_tx.send(r).await;
                }
                for r in referrers(&cs, &ns, &name, &op_ns) {
                    let _ = crepo_tx.send(r).await;
                }
            }
        });
    }

    let ctl_config = config.controller_config();
    let a = repo_ctl
        .with_config(ctl_config.clone())
        .shutdown_on_signal()
        .run(reconcile::<Repository>, error_policy::<Repository>, ctx.clone())
        .for_each(kopiur_controller::error_events::settle);
    let b = crepo_ctl
        .with_config(ctl_config)
        .shutdown_on_signal()
        .run(reconcile::<ClusterRepository>, error_policy::<ClusterRepository>, ctx)
        .for_each(kopiur_controller::error_events::settle);
    // The backup pipeline (Snapshot, SnapshotSchedule, SnapshotPolicy) over its own stores.
    let pipeline = kopiur_controller::snapshot::runtime::run(client.clone(), config.clone(), metrics.clone());
    // Maintenance and RepositoryReplication, each over its own referent stores.
    let maintenance = kopiur_controller::maintenance::run(client.clone(), config.clone(), metrics.clone());
    let replication = kopiur_controller::replication::run(client.clone(), config.clone(), metrics.clone());
    // `kopiur_resource_phase{kind="RepositoryReplication"}` (the pipeline publishes the others).
    tokio::spawn(kopiur_controller::resource_phase::watch::<kopiur_api::RepositoryReplication>(
        client.clone(),
        metrics.clone(),
    ));
    // SnapshotReplication is [next]: every object is answered Stalled / FeatureNotImplemented.
    let snapshot_replication =
        kopiur_controller::snapshot_replication::run(client.clone(), config.clone(), metrics.clone());
    futures::join!(a, b, pipeline, maintenance, replication, snapshot_replication);
    // The controllers end only on SIGTERM/SIGINT (`shutdown_on_signal`); the signal task
    // (`leader::exit_on_signal`) releases the Lease and exits the process. Give it the time.
    tokio::time::sleep(std::time::Duration::from_secs(10)).await;
    Ok(())
}
