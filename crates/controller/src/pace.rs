//! Paces a controller's trigger by its own reconciles.
//!
//! kube's scheduler takes every request its trigger has ready and keeps each one twice (its
//! dedup map and its delay queue, about 550 bytes a request with the object reference's
//! strings). A feed hands out a whole list at once (`feeds`), so a start over 50,000 Snapshots
//! queued 50,000 requests before the first few hundred had run: about 28 MiB above the
//! settled heap for the length of the start (docs/controller.md, "Memory").
//!
//! [`paced`] passes a subscription through, counting what it hands out in windows of
//! [`WINDOW`] objects. Before it starts the next window it waits until the controller has
//! finished half a window of reconciles since the last one began, or [`STALL`] passed (a stuck
//! controller never stops its own trigger). A start over a large list then queues about a window
//! and a half, not the list. In steady state a window spans minutes or hours of watch events,
//! each of which was reconciled long before the window fills, so nothing is ever held.
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::channel::mpsc::UnboundedReceiver;
use futures::{Stream, StreamExt};
use tokio::sync::Notify;

/// Objects handed out in one window. kube's scheduler holds a request for its 250 ms debounce
/// before it runs it, so the half window the pacer waits for must outlast that at the reconcile
/// rate (about 2,000 a second on 2 cores, so 500 would already be cut close). At 4,000 the queue
/// peaks near 6,000 requests, about 3 MiB.
pub const WINDOW: usize = 4000;
/// The longest the pacer waits for reconciles before it hands out the next window anyway. While
/// it waits the queue still holds half a window, so a slow controller is never starved by it;
/// only a stuck one (no reconcile finishes) meets the bound.
pub const STALL: Duration = Duration::from_secs(10);

/// Reconciles a controller has finished (any outcome), shared with its pacer.
#[derive(Debug, Default)]
pub struct Progress {
    done: AtomicU64,
    notify: Notify,
}

impl Progress {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// One reconcile finished.
    pub fn done(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
        self.notify.notify_waiters();
    }

    fn count(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// Returns once `count()` reaches `target`, or after `stall`.
    async fn reach(&self, target: u64, stall: Duration) {
        let _ = tokio::time::timeout(stall, async {
            loop {
                // Created before the check, so a `done` between the check and the await wakes it.
                let notified = self.notify.notified();
                if self.count() >= target {
                    return;
                }
                notified.await;
            }
        })
        .await;
    }
}

struct State<T> {
    rx: UnboundedReceiver<T>,
    progress: Arc<Progress>,
    window: usize,
    stall: Duration,
    /// Objects handed out in this window.
    handed: usize,
    /// `progress` when the window began.
    mark: u64,
}

/// `rx`, paced by `progress` (see the module docs): [`WINDOW`] and [`STALL`] in the controller.
pub fn paced<T: Send + 'static>(
    rx: UnboundedReceiver<T>,
    progress: Arc<Progress>,
    window: usize,
    stall: Duration,
) -> impl Stream<Item = T> + Send + 'static {
    let state = State { rx, progress, window: window.max(2), stall, handed: 0, mark: 0 };
    futures::stream::unfold(state, |mut s| async move {
        let item = s.rx.next().await?;
        if s.handed >= s.window {
            s.progress.reach(s.mark + (s.window / 2) as u64, s.stall).await;
            s.handed = 0;
        }
        if s.handed == 0 {
            s.mark = s.progress.count();
        }
        s.handed += 1;
        Some((item, s))
    })
}

#[cfg(test)]
mod tests {
    use futures::channel::mpsc;

    use super::*;

    /// The next item, or None when none comes within `ms` (of paused tokio time).
    async fn next_within<S: Stream<Item = u32> + Unpin>(s: &mut S, ms: u64) -> Option<u32> {
        tokio::time::timeout(Duration::from_millis(ms), s.next()).await.ok().flatten()
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_waits_for_half_a_window_of_reconciles() {
        let (tx, rx) = mpsc::unbounded();
        for i in 0..10 {
            tx.unbounded_send(i).unwrap();
        }
        let progress = Progress::new();
        let mut s = Box::pin(paced(rx, progress.clone(), 4, Duration::from_secs(60)));
        for i in 0..4 {
            assert_eq!(next_within(&mut s, 10).await, Some(i), "a window goes out at once");
        }
        assert_eq!(next_within(&mut s, 1000).await, None, "the fifth waits for reconciles");
        progress.done();
        assert_eq!(next_within(&mut s, 1000).await, None, "one of the two it waits for");
        progress.done();
        assert_eq!(next_within(&mut s, 10).await, Some(4), "half a window done: the next burst goes");
        for i in 5..8 {
            assert_eq!(next_within(&mut s, 10).await, Some(i));
        }
        assert_eq!(next_within(&mut s, 1000).await, None, "the second burst waits too");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stuck_controller_holds_its_trigger_for_at_most_the_stall() {
        let (tx, rx) = mpsc::unbounded();
        for i in 0..3 {
            tx.unbounded_send(i).unwrap();
        }
        let mut s = Box::pin(paced(rx, Progress::new(), 2, Duration::from_secs(2)));
        assert_eq!(next_within(&mut s, 10).await, Some(0));
        assert_eq!(next_within(&mut s, 10).await, Some(1));
        assert_eq!(next_within(&mut s, 1900).await, None, "held while within the stall");
        assert_eq!(next_within(&mut s, 200).await, Some(2), "released once the stall passed");
    }

    #[tokio::test(start_paused = true)]
    async fn objects_reconciled_as_they_come_are_never_held() {
        let (tx, rx) = mpsc::unbounded();
        let progress = Progress::new();
        let mut s = Box::pin(paced(rx, progress.clone(), 2, Duration::from_secs(60)));
        for i in 0..10 {
            tx.unbounded_send(i).unwrap();
            assert_eq!(next_within(&mut s, 10).await, Some(i), "steady state: each event is reconciled in turn");
            progress.done();
        }
        drop(tx);
        assert_eq!(s.next().await, None, "the stream ends with its subscription");
    }
}
