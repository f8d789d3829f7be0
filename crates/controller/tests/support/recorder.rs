//! A watch that records every version of every object it sees, with the instant it saw it, and
//! waits that re-evaluate on each new version instead of polling. A transition shorter than a
//! poll interval (a Snapshot stamped, deleted and gone within milliseconds; a Degraded →
//! Initializing → Degraded flap) is in the record; a poll would miss it.
//!
//! Part of the support module: `support::recorder`.
use std::fmt::Debug;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use kube::runtime::watcher;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

/// One version of one object, as the watch delivered it.
#[derive(Clone, Debug)]
pub struct Seen<K> {
    /// When the test saw it (monotonic, for latencies).
    pub at: Instant,
    /// The same moment on the wall clock (to compare with creation timestamps and cron slots).
    pub wall: DateTime<Utc>,
    /// True for the DELETED event; the object is its last state.
    pub deleted: bool,
    pub obj: Arc<K>,
}

impl<K: Resource> Seen<K> {
    pub fn name(&self) -> String {
        self.obj.meta().name.clone().unwrap_or_default()
    }

    pub fn uid(&self) -> String {
        self.obj.meta().uid.clone().unwrap_or_default()
    }
}

struct Inner<K> {
    log: Vec<Seen<K>>,
    /// Watch (re)starts: 1 after the first list; more means a re-list, across which a version
    /// may have been missed.
    starts: usize,
}

/// Every version of the objects one watch matches, in arrival order.
pub struct Recorder<K> {
    inner: Arc<Mutex<Inner<K>>>,
    tick: tokio::sync::watch::Receiver<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl<K> Drop for Recorder<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<K> Recorder<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// Starts the watch; returns once its first list has been recorded, so a change made after
    /// this call is seen as a change.
    pub async fn start(api: Api<K>, cfg: watcher::Config) -> Result<Recorder<K>> {
        let inner = Arc::new(Mutex::new(Inner { log: Vec::new(), starts: 0 }));
        let (tx, tick) = tokio::sync::watch::channel(0u64);
        let out = inner.clone();
        let task = tokio::spawn(async move {
            let mut s = watcher(api, cfg).boxed();
            let mut n = 0u64;
            while let Some(ev) = s.next().await {
                let Ok(ev) = ev else {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                };
                let (obj, deleted) = match ev {
                    watcher::Event::Apply(o) | watcher::Event::InitApply(o) => (o, false),
                    watcher::Event::Delete(o) => (o, true),
                    watcher::Event::Init => continue,
                    watcher::Event::InitDone => {
                        out.lock().unwrap().starts += 1;
                        n += 1;
                        let _ = tx.send(n);
                        continue;
                    }
                };
                out.lock().unwrap().log.push(Seen {
                    at: Instant::now(),
                    wall: Utc::now(),
                    deleted,
                    obj: Arc::new(obj),
                });
                n += 1;
                let _ = tx.send(n);
            }
        });
        let r = Recorder { inner, tick, task };
        let mut t = r.tick.clone();
        tokio::time::timeout(Duration::from_secs(60), async {
            while r.inner.lock().unwrap().starts == 0 {
                if t.changed().await.is_err() {
                    break;
                }
            }
        })
        .await
        .map_err(|_| anyhow::anyhow!("the watch did not list within 60 s"))?;
        Ok(r)
    }

    /// Everything seen so far.
    pub fn all(&self) -> Vec<Seen<K>> {
        self.inner.lock().unwrap().log.clone()
    }

    /// How many times the watch listed (1 unless it had to re-list).
    pub fn starts(&self) -> usize {
        self.inner.lock().unwrap().starts
    }

    /// The latest version of each object still present (not seen deleted), by name.
    pub fn latest(&self) -> std::collections::BTreeMap<String, Arc<K>> {
        let mut m = std::collections::BTreeMap::new();
        for s in self.inner.lock().unwrap().log.iter() {
            if s.deleted {
                m.remove(&s.name());
            } else {
                m.insert(s.name(), s.obj.clone());
            }
        }
        m
    }

    /// Re-evaluates `f` over the whole record each time the watch delivers something, until it
    /// yields `Some`; fails after `timeout` with the operator log's tail. `f` may also fail the
    /// wait at once (an invariant broken on the way).
    pub async fn wait<T>(
        &self,
        what: &str,
        timeout: Duration,
        log: &Path,
        mut f: impl FnMut(&[Seen<K>]) -> Result<Option<T>>,
    ) -> Result<T> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut tick = self.tick.clone();
        loop {
            tick.borrow_and_update();
            let found = {
                let g = self.inner.lock().unwrap();
                f(&g.log)?
            };
            if let Some(v) = found {
                return Ok(v);
            }
            match tokio::time::timeout_at(deadline, tick.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => bail!("the watch for {what} ended"),
                Err(_) => {
                    let tail = kopiur_testenv::process::log_tail(log, 60);
                    bail!("timed out after {timeout:?} waiting for {what}\noperator log tail:\n{tail}");
                }
            }
        }
    }
}
