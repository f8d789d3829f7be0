//! Whether a reflector store has finished its initial list, told by a flag that wakes every
//! waiter.
//!
//! kube's `Store::wait_until_ready` hands every caller a future over one shared oneshot
//! receiver, and that receiver remembers only the last task that polled it. With two waiters
//! (a Controller's runner and another task), or one waiter and a `now_or_never` probe (which
//! registers a no-op waker), all but the last are never woken when the store syncs: they sleep
//! until something else wakes them. The batch-delete dispatcher lost its wakeup this way and
//! started only when its 60 s guard expired, so a deletion wave held in the first minute never
//! reached the repository's status.
//!
//! A [`Synced`] flag is raised by the watch stream itself (its first `InitDone`, seen after the
//! reflector has applied it to the store) and read through a `tokio::sync::watch` channel,
//! which wakes every waiter and can be read without registering anything.
use std::sync::Arc;

use kube::runtime::watcher;
use tokio::sync::watch;

/// The read side: cheap to clone, one per consumer.
#[derive(Clone, Debug)]
pub struct Synced(watch::Receiver<bool>);

/// The write side, held by the task that drives the store's watch stream.
#[derive(Clone, Debug)]
pub struct SyncMark(Arc<watch::Sender<bool>>);

/// A new, unsynced flag.
pub fn flag() -> (SyncMark, Synced) {
    let (tx, rx) = watch::channel(false);
    (SyncMark(Arc::new(tx)), Synced(rx))
}

impl SyncMark {
    /// Raises the flag on the stream's first `InitDone` (a relist later keeps it raised: the
    /// store is then stale only by the relist, never empty).
    pub fn observe<K>(&self, event: &watcher::Event<K>) {
        match event {
            watcher::Event::InitDone => {
                self.0.send_replace(true);
            }
            watcher::Event::Apply(_)
            | watcher::Event::Delete(_)
            | watcher::Event::Init
            | watcher::Event::InitApply(_) => {}
        }
    }
}

impl Synced {
    /// Whether the store has synced, now. Registers no waker.
    pub fn is_synced(&self) -> bool {
        *self.0.borrow()
    }

    /// Waits until the store has synced; false if the stream's driver ended first.
    pub async fn wait(&self) -> bool {
        let mut rx = self.0.clone();
        rx.wait_for(|s| *s).await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::FutureExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;

    use super::*;

    /// How long a spawned waiter slept, on the paused test clock (which jumps to the next timer
    /// whenever every task is idle, so a lost wakeup shows as the full guard).
    async fn slept<F: Future + Send + 'static>(wait: F) -> tokio::task::JoinHandle<Duration>
    where
        F::Output: Send,
    {
        let h = tokio::spawn(async move {
            let t = tokio::time::Instant::now();
            let _ = tokio::time::timeout(Duration::from_secs(60), wait).await;
            t.elapsed()
        });
        tokio::task::yield_now().await;
        h
    }

    /// The defect this module exists for, shown on kube's own readiness future: of two waiters
    /// on one store, the one that polled first is not woken when the store syncs (tokio's
    /// timeout then polls it and finds it ready, so only the elapsed time tells). If kube fixes
    /// this, the assertion flips and this test says so.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn kube_readiness_loses_all_but_the_last_waiter() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let s1 = store.clone();
        let first = slept(async move { s1.wait_until_ready().await }).await;
        // A second waiter polls after the first (here a reconcile's now_or_never probe).
        assert!(store.wait_until_ready().now_or_never().is_none());
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let took = first.await.unwrap();
        assert!(
            took >= Duration::from_secs(60),
            "kube's Store::wait_until_ready woke the first waiter after {took:?}; crate::synced may be unnecessary"
        );
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn every_waiter_wakes_when_the_store_syncs() {
        let (mark, synced) = flag();
        let mut waiters = Vec::new();
        for _ in 0..3 {
            let s = synced.clone();
            waiters.push(slept(async move { assert!(s.wait().await) }).await);
        }
        assert!(!synced.is_synced());
        mark.observe::<ConfigMap>(&watcher::Event::Init);
        mark.observe::<ConfigMap>(&watcher::Event::InitApply(ConfigMap::default()));
        assert!(!synced.is_synced(), "only InitDone raises the flag");
        mark.observe::<ConfigMap>(&watcher::Event::InitDone);
        for w in waiters {
            let took = w.await.unwrap();
            assert!(took < Duration::from_secs(1), "a waiter slept through the sync ({took:?})");
        }
        assert!(synced.is_synced());
        // A relist keeps it raised.
        mark.observe::<ConfigMap>(&watcher::Event::Init);
        assert!(synced.is_synced());
    }

    #[tokio::test]
    async fn a_dropped_driver_ends_the_wait() {
        let (mark, synced) = flag();
        drop(mark);
        assert!(!synced.wait().await);
    }
}
