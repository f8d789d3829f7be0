//! The watch feeds: one watcher + reflector per kind, fanned out to every subscriber.
//!
//! A feed applies each event to its store before it hands the object to any subscriber, so a
//! reconcile triggered by it reads the new state. Subscribers get every touched object, deleted
//! ones included (kube's own `store_shared` subscribers get no deletes and hold the root stream
//! when one subscriber lags; these are unbounded and never hold it). Wired in `controllers`.

use std::sync::Arc;

use futures::StreamExt;
use futures::channel::mpsc as fmpsc;
use k8s_openapi::api::batch::v1::Job;
use kopiur_api::{ClusterRepository, Repository};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};

use crate::synced::{self, SyncMark};

/// A bounded tokio receiver as a stream (for `Controller::reconcile_on`).
pub struct ReceiverStream<T>(pub tokio::sync::mpsc::Receiver<T>);

impl<T> futures::Stream for ReceiverStream<T> {
    type Item = T;
    fn poll_next(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<T>> {
        self.0.poll_recv(cx)
    }
}

/// The objects one subscriber receives from a feed.
pub type Subscription<K> = fmpsc::UnboundedReceiver<Arc<K>>;

/// One watch of one kind: its store, its sync flag, and the subscribers it fans out to.
pub struct Feed<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    api: Api<K>,
    wc: watcher::Config,
    slim: Option<fn(&mut K)>,
    writer: reflector::store::Writer<K>,
    mark: SyncMark,
    subscribers: Vec<fmpsc::UnboundedSender<Arc<K>>>,
}

impl<K> Feed<K>
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    /// A feed over `api` (not started), with its store and sync flag. `slim` drops what no
    /// reader needs before the store (`heap::slim_object`, `heap::slim_snapshot`).
    pub(crate) fn new(api: Api<K>, wc: watcher::Config, slim: Option<fn(&mut K)>) -> (Self, Store<K>, synced::Synced) {
        let (store, writer) = reflector::store::<K>();
        let (mark, synced) = synced::flag();
        (Self { api, wc, slim, writer, mark, subscribers: Vec::new() }, store, synced)
    }

    /// Every object the watch touches from now on (applied or deleted), after the store has it.
    pub fn subscribe(&mut self) -> Subscription<K> {
        let (tx, rx) = fmpsc::unbounded();
        self.subscribers.push(tx);
        rx
    }

    /// Drives the watch in its own task, so the store keeps syncing however busy a controller is.
    pub(crate) fn start(self) {
        let Self { api, wc, slim, writer, mark, subscribers } = self;
        let events = watcher(api, wc)
            .modify(move |o| {
                if let Some(slim) = slim {
                    slim(o);
                }
            })
            .default_backoff();
        tokio::spawn(fan_out(events, writer, mark, subscribers));
    }
}

/// Applies each watch event to the store, raises `mark` on the first full list, then hands
/// every touched object (applied or deleted) to each subscriber: a subscriber never sees an
/// applied object before the store does. An object the store holds at the same
/// resourceVersion is handed out as the store's own `Arc`, so a subscriber's backlog (40,000
/// status writes at a start over 50,000 Snapshots) holds no second copy of it; a deleted
/// object, or one of the initial list before the store swaps it in, is wrapped on its own.
async fn fan_out<K, S>(
    events: S,
    writer: reflector::store::Writer<K>,
    mark: SyncMark,
    subscribers: Vec<fmpsc::UnboundedSender<Arc<K>>>,
) where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
{
    let kind = K::kind(&()).to_string();
    let reader = writer.as_reader();
    let events = reflector::reflector(writer, events)
        .inspect(move |ev| {
            if let Ok(e) = ev {
                mark.observe(e);
            }
        })
        .touched_objects();
    let mut events = std::pin::pin!(events);
    while let Some(ev) = events.next().await {
        match ev {
            Ok(o) => {
                let stored = reader
                    .get(&reflector::ObjectRef::from_obj(&o))
                    .filter(|s| s.meta().resource_version == o.meta().resource_version);
                let o = stored.unwrap_or_else(|| Arc::new(o));
                for s in &subscribers {
                    // A subscriber gone (its controller ended) is skipped; the store keeps
                    // serving the others.
                    let _ = s.unbounded_send(o.clone());
                }
            }
            Err(e) => tracing::debug!(error = %e, kind, "watch error (retried with backoff)"),
        }
    }
}

/// One feed per watched kind.
pub struct Feeds {
    pub jobs: Feed<Job>,
    pub secrets: Feed<kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Secret>>,
    pub namespaces: Feed<kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Namespace>>,
    pub pvcs: Feed<kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::PersistentVolumeClaim>>,
    pub repos: Feed<Repository>,
    pub crepos: Feed<ClusterRepository>,
    pub snapshots: Feed<kopiur_api::Snapshot>,
    pub schedules: Feed<kopiur_api::SnapshotSchedule>,
    pub policies: Feed<kopiur_api::SnapshotPolicy>,
    pub restores: Feed<kopiur_api::Restore>,
    pub maintenances: Feed<kopiur_api::Maintenance>,
    pub replications: Feed<kopiur_api::RepositoryReplication>,
    pub snapshot_replications: Feed<kopiur_api::SnapshotReplication>,
}

impl Feeds {
    /// Starts every watch (after every subscriber has subscribed).
    pub(crate) fn start(self) {
        let Self {
            jobs,
            secrets,
            namespaces,
            pvcs,
            repos,
            crepos,
            snapshots,
            schedules,
            policies,
            restores,
            maintenances,
            replications,
            snapshot_replications,
        } = self;
        jobs.start();
        secrets.start();
        namespaces.start();
        pvcs.start();
        repos.start();
        crepos.start();
        snapshots.start();
        schedules.start();
        policies.start();
        restores.start();
        maintenances.start();
        replications.start();
        snapshot_replications.start();
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::ResourceExt;
    use kube::api::ObjectMeta;
    use kube::runtime::reflector::ObjectRef;

    use super::*;

    /// The next object's name, or None when nothing comes within 5 s.
    async fn next(sub: &mut Subscription<ConfigMap>) -> Option<String> {
        let o = tokio::time::timeout(std::time::Duration::from_secs(5), sub.next()).await.ok()??;
        Some(o.name_any())
    }

    fn cm(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta { name: Some(name.into()), namespace: Some("t".into()), ..Default::default() },
            ..Default::default()
        }
    }

    /// What every controller relies on: each subscriber gets every touched object, deletes
    /// included, an applied one only once the store holds it, and the sync flag rises on the
    /// first full list.
    #[tokio::test]
    async fn every_subscriber_sees_each_object_after_the_store_deletes_included() {
        let (store, writer) = reflector::store::<ConfigMap>();
        let (mark, synced) = synced::flag();
        let (events, source) = fmpsc::unbounded();
        let (a_tx, mut a) = fmpsc::unbounded();
        let (b_tx, mut b) = fmpsc::unbounded();
        tokio::spawn(fan_out(source, writer, mark, vec![a_tx, b_tx]));
        let send = |e: watcher::Event<ConfigMap>| events.unbounded_send(Ok(e)).unwrap();

        send(watcher::Event::Init);
        send(watcher::Event::InitApply(cm("x")));
        assert_eq!(next(&mut a).await, Some("x".into()));
        assert_eq!(next(&mut b).await, Some("x".into()));
        assert!(!synced.is_synced(), "not synced before the list is complete");
        send(watcher::Event::InitDone);
        assert!(synced.wait().await);
        assert!(store.get(&ObjectRef::new("x").within("t")).is_some());

        send(watcher::Event::Apply(cm("y")));
        for sub in [&mut a, &mut b] {
            let o = tokio::time::timeout(std::time::Duration::from_secs(5), sub.next()).await.unwrap().unwrap();
            assert_eq!(o.name_any(), "y");
            let stored = store.get(&ObjectRef::new("y").within("t")).expect("the store has it first");
            assert!(Arc::ptr_eq(&o, &stored), "the subscriber shares the store's copy");
        }
        send(watcher::Event::Delete(cm("x")));
        for sub in [&mut a, &mut b] {
            assert_eq!(next(sub).await, Some("x".into()), "a delete reaches every subscriber");
        }
        assert!(store.get(&ObjectRef::new("x").within("t")).is_none());

        // A subscriber gone does not stop the others.
        drop(a);
        send(watcher::Event::Apply(cm("z")));
        assert_eq!(next(&mut b).await, Some("z".into()));
    }
}
