//! NA-5: watches the pods bound to this node and gives each one a worker task.
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::Instrument;

use super::Ctx;
use super::config::NODE_NAME;
use super::pod::{self, Update};

pub async fn run(ctx: Arc<Ctx>) {
    let api: Api<Pod> = Api::all(ctx.client.clone());
    let cfg = watcher::Config::default().fields(&format!("spec.nodeName={NODE_NAME}"));
    let stream = watcher(api, cfg).default_backoff();
    futures::pin_mut!(stream);
    let mut workers: HashMap<String, watch::Sender<Update>> = HashMap::new();
    let mut tasks = JoinSet::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut shutdown = ctx.shutdown.clone();
    loop {
        let ev = tokio::select! {
            ev = stream.next() => ev,
            _ = super::stopped(&mut shutdown) => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
        };
        let Some(ev) = ev else { break };
        match ev {
            Ok(watcher::Event::Init) => seen.clear(),
            Ok(watcher::Event::InitApply(p)) => {
                if let Some(uid) = p.metadata.uid.clone() {
                    seen.insert(uid);
                }
                dispatch(&ctx, &mut workers, &mut tasks, p);
            }
            Ok(watcher::Event::InitDone) => {
                // Pods deleted while the watch was down never get a Delete event.
                let gone: Vec<String> = workers.keys().filter(|u| !seen.contains(*u)).cloned().collect();
                for uid in gone {
                    if let Some(tx) = workers.remove(&uid) {
                        let _ = tx.send(Update::Gone);
                    }
                }
            }
            Ok(watcher::Event::Apply(p)) => dispatch(&ctx, &mut workers, &mut tasks, p),
            Ok(watcher::Event::Delete(p)) => {
                if let Some(tx) = p.metadata.uid.as_ref().and_then(|u| workers.remove(u)) {
                    let _ = tx.send(Update::Gone);
                }
            }
            Err(e) => tracing::warn!("pod watch: {e}"),
        }
    }
    // Workers see the shutdown flag themselves and stop their processes.
    while tasks.join_next().await.is_some() {}
}

fn dispatch(ctx: &Arc<Ctx>, workers: &mut HashMap<String, watch::Sender<Update>>, tasks: &mut JoinSet<()>, p: Pod) {
    let Some(uid) = p.metadata.uid.clone() else {
        return;
    };
    if let Some(tx) = workers.get(&uid) {
        let _ = tx.send(Update::Pod(Box::new(p)));
        return;
    }
    let span = tracing::info_span!(
        "pod",
        ns = p.metadata.namespace.as_deref().unwrap_or(""),
        name = p.metadata.name.as_deref().unwrap_or("")
    );
    let (tx, rx) = watch::channel(Update::Pod(Box::new(p)));
    workers.insert(uid, tx);
    tasks.spawn(pod::run(ctx.clone(), rx).instrument(span));
}
