//! Watch recorders for end-to-end tests: every version of one object, and every kopiur Job, as
//! a watch delivers them, with the instant each was seen. A poller that samples every second or
//! two misses a flap shorter than its period; a watch sees every write the apiserver reports.
//!
//! Part of the support module: `support::phase_watch`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;

/// One version of the watched object, as delivered.
#[derive(Clone, Debug)]
pub struct Seen<K> {
    pub at: Instant,
    pub phase: String,
    pub object: K,
}

struct Inner<K> {
    seen: Mutex<Vec<Seen<K>>>,
    notify: Notify,
}

/// Every version of one named object, recorded from a watch (deduplicated by
/// resourceVersion, so a re-list does not repeat a version).
pub struct PhaseWatch<K> {
    inner: Arc<Inner<K>>,
    task: tokio::task::JoinHandle<()>,
}

impl<K> Drop for PhaseWatch<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<K> PhaseWatch<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    /// Starts watching `name` through `api`; `phase` names each version's state. Start it
    /// before the change under test: versions written before the watch's initial list are
    /// collapsed into the one the list returns.
    pub fn start(api: Api<K>, name: &str, phase: fn(&K) -> String) -> PhaseWatch<K> {
        let inner = Arc::new(Inner::<K> { seen: Mutex::new(Vec::new()), notify: Notify::new() });
        let out = inner.clone();
        let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let task = tokio::spawn(async move {
            let mut s = watcher(api, cfg).default_backoff().applied_objects().boxed();
            while let Some(ev) = s.next().await {
                let Ok(obj) = ev else { continue };
                let rv = obj.resource_version();
                {
                    let mut v = out.seen.lock().unwrap();
                    if rv.is_some() && v.last().map(|l| l.object.resource_version()) == Some(rv) {
                        continue;
                    }
                    v.push(Seen { at: Instant::now(), phase: phase(&obj), object: obj });
                }
                out.notify.notify_waiters();
            }
        });
        PhaseWatch { inner, task }
    }

    /// A mark: the number of versions seen so far.
    pub fn mark(&self) -> usize {
        self.inner.seen.lock().unwrap().len()
    }

    /// Every version seen from `mark` on.
    pub fn since(&self, mark: usize) -> Vec<Seen<K>> {
        self.inner.seen.lock().unwrap().iter().skip(mark).cloned().collect()
    }

    /// The phase of every version seen from `mark` on.
    pub fn phases_since(&self, mark: usize) -> Vec<String> {
        self.since(mark).into_iter().map(|s| s.phase).collect()
    }

    /// The phases from `mark` on with consecutive repeats collapsed: every transition, in order.
    pub fn transitions_since(&self, mark: usize) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for p in self.phases_since(mark) {
            if out.last() != Some(&p) {
                out.push(p);
            }
        }
        out
    }

    /// The latest version seen.
    pub fn latest(&self) -> Option<Seen<K>> {
        self.inner.seen.lock().unwrap().last().cloned()
    }

    /// The first version at or after `mark` that satisfies `pred`, waiting up to `timeout`.
    pub async fn wait_since(
        &self,
        what: &str,
        mark: usize,
        timeout: Duration,
        pred: impl Fn(&K) -> bool,
    ) -> Result<Seen<K>> {
        let deadline = Instant::now() + timeout;
        loop {
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(s) = self.since(mark).into_iter().find(|s| pred(&s.object)) {
                return Ok(s);
            }
            let now = Instant::now();
            if now >= deadline {
                let phases = self.transitions_since(mark);
                bail!("timed out after {timeout:?} waiting for {what} (phases seen since the mark: {phases:?})");
            }
            let _ = tokio::time::timeout(deadline - now, notified).await;
        }
    }

    /// Like [`PhaseWatch::wait_since`] from the latest version on (that version included).
    pub async fn wait(&self, what: &str, timeout: Duration, pred: impl Fn(&K) -> bool) -> Result<Seen<K>> {
        let mark = self.mark().saturating_sub(1);
        self.wait_since(what, mark, timeout, pred).await
    }
}

/// A kopiur Job as seen on a watch: when it appeared, and when it was first seen terminal.
#[derive(Clone, Debug)]
pub struct JobSeen {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The controller ownerReference's uid (the repository, Snapshot, … that launched it).
    pub owner_uid: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// `metadata.creationTimestamp` (whole seconds, apiserver clock).
    pub created: DateTime<Utc>,
    pub first_seen: Instant,
    /// First seen with `Complete=True`.
    pub complete_seen: Option<Instant>,
    /// First seen with `Failed=True`.
    pub failed_seen: Option<Instant>,
}

impl JobSeen {
    /// The `probe-kind` annotation of a connect Job: `strict`, `probe` or `reverify`.
    pub fn probe_kind(&self) -> &str {
        self.annotations.get("kopiur.home-operations.com/probe-kind").map(String::as_str).unwrap_or("")
    }

    /// The `op` label: `backup`, `bootstrap`, `restore`, …
    pub fn op(&self) -> &str {
        self.labels.get("kopiur.home-operations.com/op").map(String::as_str).unwrap_or("")
    }
}

/// Every Job labelled `app.kubernetes.io/managed-by=kopiur`, cluster-wide, recorded from a
/// watch. Connect Jobs are deleted once folded, so a list taken later would miss them.
#[derive(Clone)]
pub struct JobWatch {
    inner: Arc<Inner<JobSeen>>,
}

impl JobWatch {
    pub fn start(client: kube::Client) -> JobWatch {
        let inner = Arc::new(Inner { seen: Mutex::new(Vec::<Seen<JobSeen>>::new()), notify: Notify::new() });
        let out = inner.clone();
        tokio::spawn(async move {
            let cfg = watcher::Config::default().labels("app.kubernetes.io/managed-by=kopiur");
            let mut s = watcher(Api::<Job>::all(client), cfg).default_backoff().applied_objects().boxed();
            while let Some(ev) = s.next().await {
                let Ok(job) = ev else { continue };
                let now = Instant::now();
                let uid = job.uid().unwrap_or_default();
                let cond = |t: &str| {
                    job.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| cs.iter().any(|c| c.type_ == t && c.status == "True"))
                };
                let (complete, failed) = (cond("Complete"), cond("Failed"));
                {
                    let mut v = out.seen.lock().unwrap();
                    if let Some(rec) = v.iter_mut().find(|r| r.object.uid == uid) {
                        if complete && rec.object.complete_seen.is_none() {
                            rec.object.complete_seen = Some(now);
                        }
                        if failed && rec.object.failed_seen.is_none() {
                            rec.object.failed_seen = Some(now);
                        }
                    } else {
                        let owner_uid = job
                            .owner_references()
                            .iter()
                            .find(|o| o.controller == Some(true))
                            .map(|o| o.uid.clone())
                            .unwrap_or_default();
                        let created = super::jobs::created_or_now(&job);
                        let rec = JobSeen {
                            namespace: job.namespace().unwrap_or_default(),
                            name: job.name_any(),
                            uid,
                            owner_uid,
                            labels: job.labels().clone(),
                            annotations: job.annotations().clone(),
                            created,
                            first_seen: now,
                            complete_seen: complete.then_some(now),
                            failed_seen: failed.then_some(now),
                        };
                        v.push(Seen { at: now, phase: String::new(), object: rec });
                    }
                }
                out.notify.notify_waiters();
            }
        });
        JobWatch { inner }
    }

    /// Every Job seen so far whose controller owner has `owner_uid`.
    pub fn owned_by(&self, owner_uid: &str) -> Vec<JobSeen> {
        self.inner.seen.lock().unwrap().iter().map(|s| s.object.clone()).filter(|j| j.owner_uid == owner_uid).collect()
    }

    /// Every Job seen so far in `namespace`.
    pub fn in_namespace(&self, namespace: &str) -> Vec<JobSeen> {
        self.inner.seen.lock().unwrap().iter().map(|s| s.object.clone()).filter(|j| j.namespace == namespace).collect()
    }

    /// The first Job satisfying `pred` (as last seen), waiting up to `timeout`.
    pub async fn wait(&self, what: &str, timeout: Duration, pred: impl Fn(&JobSeen) -> bool) -> Result<JobSeen> {
        let deadline = Instant::now() + timeout;
        loop {
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(j) = self.inner.seen.lock().unwrap().iter().map(|s| &s.object).find(|j| pred(j)) {
                return Ok(j.clone());
            }
            let now = Instant::now();
            if now >= deadline {
                bail!("timed out after {timeout:?} waiting for {what}");
            }
            let _ = tokio::time::timeout(deadline - now, notified).await;
        }
    }
}
