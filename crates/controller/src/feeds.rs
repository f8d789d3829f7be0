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

/// What a feed watches: the watcher of its kind, or a read of it of its own (`lean`).
pub type Source<K> = Box<
    dyn FnOnce(watcher::Config) -> futures::stream::BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>
        + Send,
>;

/// The objects one subscriber receives from a feed.
pub type Subscription<K> = fmpsc::UnboundedReceiver<Arc<K>>;

/// One watch of one kind: its store, its sync flag, and the subscribers it fans out to.
pub struct Feed<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    source: Source<K>,
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
        Self::from_source(Box::new(move |wc| watcher(api, wc).boxed()), wc, slim)
    }

    /// A feed over its own read of the kind (`lean::snapshot_watch`).
    pub(crate) fn from_source(
        source: Source<K>,
        wc: watcher::Config,
        slim: Option<fn(&mut K)>,
    ) -> (Self, Store<K>, synced::Synced) {
        let (store, writer) = reflector::store::<K>();
        let (mark, synced) = synced::flag();
        (Self { source, wc, slim, writer, mark, subscribers: Vec::new() }, store, synced)
    }

    /// Every object the watch touches from now on (applied or deleted), after the store has it.
    pub fn subscribe(&mut self) -> Subscription<K> {
        let (tx, rx) = fmpsc::unbounded();
        self.subscribers.push(tx);
        rx
    }

    /// Drives the watch in its own task, so the store keeps syncing however busy a controller is.
    pub(crate) fn start(self) {
        let Self { source, wc, slim, writer, mark, subscribers } = self;
        let events = source(wc)
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
/// applied object before the store does.
/// - An applied object is handed out as the store's own `Arc` when the store holds it at the
///   same resourceVersion, so a subscriber's backlog (40,000 status writes at a start over
///   50,000 Snapshots) holds no second copy of it; a deleted object is wrapped on its own.
/// - A list (the first, or a re-list after the watch lost its place) fills a buffer the store
///   swaps in only when the list is done. Its objects are handed out then, from the store:
///   until then a reader of the store would not find them, and each one handed out during the
///   list would be a second copy held in every backlog (at a start over 50,000 Snapshots, one
///   per row). Nothing per object is held meanwhile (a key per listed object, freed at the
///   end of the list, left 50,000 small holes between the stored rows).
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
    let send = |o: Arc<K>| {
        for s in &subscribers {
            // A subscriber gone (its controller ended) is skipped; the store keeps serving
            // the others.
            let _ = s.unbounded_send(o.clone());
        }
    };
    let events = reflector::reflector(writer, events);
    let mut events = std::pin::pin!(events);
    while let Some(ev) = events.next().await {
        let e = match ev {
            Ok(e) => e,
            Err(e) => {
                tracing::debug!(error = %e, kind, "watch error (retried with backoff)");
                continue;
            }
        };
        mark.observe(&e);
        match e {
            watcher::Event::Apply(o) => {
                let stored = reader
                    .get(&reflector::ObjectRef::from_obj(&o))
                    .filter(|s| s.meta().resource_version == o.meta().resource_version);
                send(stored.unwrap_or_else(|| Arc::new(o)));
            }
            watcher::Event::Delete(o) => send(Arc::new(o)),
            // A list's objects go to the buffer the store swaps in at `InitDone`; then the
            // store holds exactly the list.
            watcher::Event::Init | watcher::Event::InitApply(_) => {}
            watcher::Event::InitDone => {
                // Handed out a page at a time, yielding between pages, so the subscribers
                // drain as the list goes out rather than each holding all of it at once.
                for (i, o) in reader.state().into_iter().enumerate() {
                    send(o);
                    if i % HAND_OUT_PAGE == HAND_OUT_PAGE - 1 {
                        tokio::task::yield_now().await;
                    }
                }
            }
        }
    }
}

/// Objects handed out between two yields at the end of a list (the watcher's list page).
const HAND_OUT_PAGE: usize = 500;

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
        send(watcher::Event::InitApply(cm("w")));
        // A listed object reaches the subscribers once the store holds it, as the store's copy.
        assert_eq!(
            tokio::time::timeout(std::time::Duration::from_millis(300), a.next())
                .await
                .ok()
                .flatten()
                .map(|o| o.name_any()),
            None,
            "nothing is handed out before the list is done"
        );
        assert!(!synced.is_synced(), "not synced before the list is complete");
        send(watcher::Event::InitDone);
        assert!(synced.wait().await);
        for sub in [&mut a, &mut b] {
            let mut seen = Vec::new();
            for _ in 0..2 {
                let o = tokio::time::timeout(std::time::Duration::from_secs(5), sub.next()).await.unwrap().unwrap();
                let stored = store.get(&ObjectRef::new(&o.name_any()).within("t")).expect("the store has it first");
                assert!(Arc::ptr_eq(&o, &stored), "a listed object is the store's copy");
                seen.push(o.name_any());
            }
            seen.sort();
            assert_eq!(seen, ["w", "x"]);
        }
        // A re-list hands out what it listed, again after the store has swapped it in.
        send(watcher::Event::Init);
        send(watcher::Event::InitApply(cm("x")));
        send(watcher::Event::InitDone);
        assert_eq!(next(&mut a).await, Some("x".into()));
        assert_eq!(next(&mut b).await, Some("x".into()));
        assert!(store.get(&ObjectRef::new("w").within("t")).is_none(), "the re-list dropped w");

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
