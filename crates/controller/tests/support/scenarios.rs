//! Watch-fed recorders and seeding helpers for `tests/deletion_scenarios_e2e.rs` (the scenarios of docs/design/test-tiers.md §13.2,
//! deletion scenarios in their end-to-end form). Builds on the seeding of `super::seed` and the
//! harness of `super::harness`.
//!
//! Both recorders follow a `watcher` stream, so every transition is seen (a Snapshot that is
//! held for 300 ms, a batch Job that lives 2 s), and waits are evaluated against the recorded
//! state, woken by each event, without extra API reads.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Event;
use kopiur_api::Snapshot;
use kube::api::{ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::seed::{ABSENT_POLICY, DELETE_REPO, FINALIZER, SET};

fn ts(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp(t.0.as_second(), 0).unwrap_or_default()
}

/// Waits until `f` over the recorded state yields `Some`, re-checking on every watch event
/// (and at least every 250 ms, for conditions on the clock).
async fn wait_state<S, T>(
    what: &str,
    timeout: Duration,
    state: &Mutex<S>,
    notify: &Notify,
    mut f: impl FnMut(&S) -> Option<T>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        let woken = notify.notified();
        if let Some(v) = f(&state.lock().unwrap()) {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::select! {
            _ = woken => {}
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
    }
}

/// What a watch saw of one Snapshot over its life.
#[derive(Clone, Debug, Default)]
pub struct SnapRec {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The `deletion-e2e/set` label.
    pub set: String,
    pub deletion_timestamp: Option<DateTime<Utc>>,
    /// `DeletionHeld=True` was seen at least once.
    pub ever_held: bool,
    /// The latest `DeletionHeld` condition (status, reason, message).
    pub held: Option<(String, String, String)>,
    /// `status.deletion.decision` as last seen.
    pub decision: Option<String>,
    /// `status.deletion.decision: Delete` was seen at least once.
    pub ever_decided_delete: bool,
    pub finalizer: bool,
    /// When the watch saw the object deleted from the API.
    pub gone_at: Option<Instant>,
}

#[derive(Default)]
pub struct SnapState {
    pub by_uid: BTreeMap<String, SnapRec>,
}

impl SnapState {
    pub fn set(&self, set: &str) -> Vec<&SnapRec> {
        self.by_uid.values().filter(|r| r.set == set).collect()
    }
}

/// Every Snapshot in every namespace, from one watch.
#[derive(Clone, Default)]
pub struct SnapWatch {
    pub state: Arc<Mutex<SnapState>>,
    notify: Arc<Notify>,
}

impl SnapWatch {
    pub fn spawn(client: Client) -> (SnapWatch, tokio::task::JoinHandle<()>) {
        let w = SnapWatch::default();
        let w2 = w.clone();
        let h = tokio::spawn(async move {
            let api: Api<Snapshot> = Api::all(client);
            let mut stream = watcher(api, watcher::Config::default()).default_backoff().boxed();
            while let Some(ev) = stream.next().await {
                let Ok(ev) = ev else { continue };
                {
                    let mut st = w2.state.lock().unwrap();
                    match ev {
                        watcher::Event::Apply(s) | watcher::Event::InitApply(s) => {
                            let uid = s.uid().unwrap_or_default();
                            let r = st.by_uid.entry(uid.clone()).or_default();
                            r.uid = uid;
                            r.namespace = s.namespace().unwrap_or_default();
                            r.name = s.name_any();
                            r.set = s.labels().get(SET).cloned().unwrap_or_default();
                            if let Some(t) = s.metadata.deletion_timestamp.as_ref() {
                                r.deletion_timestamp.get_or_insert(ts(t));
                            }
                            let held = s
                                .status
                                .as_ref()
                                .and_then(|st| st.conditions.iter().find(|c| c.type_ == "DeletionHeld"))
                                .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()));
                            r.ever_held |= held.as_ref().is_some_and(|h| h.0 == "True");
                            r.held = held;
                            r.decision = s
                                .status
                                .as_ref()
                                .and_then(|st| st.deletion.as_ref())
                                .map(|d| d.decision.as_str().to_string());
                            r.ever_decided_delete |= r.decision.as_deref() == Some("Delete");
                            r.finalizer = s.finalizers().iter().any(|f| f == FINALIZER);
                        }
                        watcher::Event::Delete(s) => {
                            let uid = s.uid().unwrap_or_default();
                            let r = st.by_uid.entry(uid.clone()).or_default();
                            r.uid = uid;
                            r.namespace = s.namespace().unwrap_or_default();
                            r.name = s.name_any();
                            r.set = s.labels().get(SET).cloned().unwrap_or_default();
                            if let Some(t) = s.metadata.deletion_timestamp.as_ref() {
                                r.deletion_timestamp.get_or_insert(ts(t));
                            }
                            r.gone_at.get_or_insert(Instant::now());
                        }
                        watcher::Event::Init | watcher::Event::InitDone => {}
                    }
                }
                w2.notify.notify_waiters();
            }
        });
        (w, h)
    }

    pub fn set(&self, set: &str) -> Vec<SnapRec> {
        self.state.lock().unwrap().set(set).into_iter().cloned().collect()
    }

    pub async fn wait<T>(&self, what: &str, timeout: Duration, f: impl FnMut(&SnapState) -> Option<T>) -> Result<T> {
        wait_state(what, timeout, &self.state, &self.notify, f).await
    }

    /// Waits until the watch has seen `n` Snapshots of `set` (seeded before the watch, or
    /// after: either way they are known before anything is deleted).
    pub async fn wait_seen(&self, set: &str, n: usize) -> Result<()> {
        self.wait(&format!("{n} Snapshots of {set} on the watch"), Duration::from_secs(30), |s| {
            (s.set(set).len() >= n).then_some(())
        })
        .await
    }

    /// Waits until every one of the `n` Snapshots of `set` is gone.
    pub async fn wait_set_gone(&self, set: &str, n: usize, timeout: Duration) -> Result<Duration> {
        let t = Instant::now();
        let r = self
            .wait(&format!("all {n} Snapshots of {set} gone"), timeout, |s| {
                let v = s.set(set);
                (v.len() == n && v.iter().all(|r| r.gone_at.is_some())).then_some(())
            })
            .await;
        if r.is_err() {
            let v = self.set(set);
            let left: Vec<_> = v.iter().filter(|r| r.gone_at.is_none()).collect();
            println!(
                "[{set}] NOT DRAINED: {} of {} left, e.g. {:?}",
                left.len(),
                v.len(),
                left.first().map(|r| (&r.name, &r.decision, &r.held))
            );
        }
        r?;
        Ok(t.elapsed())
    }

    /// Waits until every one of the `n` Snapshots of `set` shows `DeletionHeld=True`.
    pub async fn wait_set_held(&self, set: &str, n: usize, timeout: Duration) -> Result<Duration> {
        let t = Instant::now();
        let r = self
            .wait(&format!("all {n} Snapshots of {set} DeletionHeld=True"), timeout, |s| {
                let v = s.set(set);
                (v.len() == n && v.iter().all(|r| r.held.as_ref().is_some_and(|h| h.0 == "True"))).then_some(())
            })
            .await;
        if r.is_err() {
            let v = self.set(set);
            let held = v.iter().filter(|r| r.held.as_ref().is_some_and(|h| h.0 == "True")).count();
            let deleting = v.iter().filter(|r| r.deletion_timestamp.is_some()).count();
            println!("[{set}] NOT HELD: {} seen, {deleting} deleting, {held} held", v.len());
        }
        r?;
        Ok(t.elapsed())
    }
}

/// A batch delete Job as the watch saw it.
#[derive(Clone, Debug, Default)]
pub struct JobRec {
    pub namespace: String,
    pub name: String,
    pub members: Vec<String>,
    pub repo_uid: String,
    pub created: Option<DateTime<Utc>>,
    pub first_seen: Option<Instant>,
    pub complete: bool,
    pub failed: bool,
    pub gone_at: Option<Instant>,
}

impl JobRec {
    pub fn terminal(&self) -> bool {
        self.complete || self.failed
    }
}

#[derive(Default)]
pub struct JobState {
    pub by_key: BTreeMap<String, JobRec>,
    /// The most batch Jobs that were at once present and neither Complete nor Failed, since
    /// the last [`JobWatch::reset_peak`].
    pub peak_in_flight: usize,
}

impl JobState {
    pub fn in_flight(&self) -> usize {
        self.by_key.values().filter(|j| j.gone_at.is_none() && !j.terminal()).count()
    }

    /// Jobs listing any of `uids`.
    pub fn touching(&self, uids: &BTreeSet<String>) -> Vec<JobRec> {
        self.by_key.values().filter(|j| j.members.iter().any(|m| uids.contains(m))).cloned().collect()
    }
}

fn is_batch(j: &Job) -> bool {
    j.name_any().starts_with("snapdel-")
        || j.labels().get("kopiur.home-operations.com/op").map(String::as_str) == Some("snapshot-delete-batch")
}

/// Every batch delete Job (`snapdel-*` / `op=snapshot-delete-batch`) in every namespace,
/// from one watch: batch Jobs are reaped, so a final listing cannot count them, and a
/// 250 ms poll could miss a short-lived one.
#[derive(Clone, Default)]
pub struct JobWatch {
    pub state: Arc<Mutex<JobState>>,
    notify: Arc<Notify>,
}

impl JobWatch {
    pub fn spawn(client: Client) -> (JobWatch, tokio::task::JoinHandle<()>) {
        let w = JobWatch::default();
        let w2 = w.clone();
        let h = tokio::spawn(async move {
            let api: Api<Job> = Api::all(client);
            let mut stream = watcher(api, watcher::Config::default()).default_backoff().boxed();
            while let Some(ev) = stream.next().await {
                let Ok(ev) = ev else { continue };
                {
                    let mut st = w2.state.lock().unwrap();
                    match ev {
                        watcher::Event::Apply(j) | watcher::Event::InitApply(j) if is_batch(&j) => {
                            let key = format!("{}/{}", j.namespace().unwrap_or_default(), j.name_any());
                            let conds = j.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
                            let has = |t: &str| conds.iter().any(|c| c.type_ == t && c.status == "True");
                            let r = st.by_key.entry(key).or_insert_with(|| JobRec {
                                namespace: j.namespace().unwrap_or_default(),
                                name: j.name_any(),
                                members: super::jobs::batch_members(&j),
                                repo_uid: j.labels().get(DELETE_REPO).cloned().unwrap_or_default(),
                                created: j.metadata.creation_timestamp.as_ref().map(ts),
                                first_seen: Some(Instant::now()),
                                ..JobRec::default()
                            });
                            r.complete |= has("Complete");
                            r.failed |= has("Failed");
                        }
                        watcher::Event::Delete(j) if is_batch(&j) => {
                            let key = format!("{}/{}", j.namespace().unwrap_or_default(), j.name_any());
                            if let Some(r) = st.by_key.get_mut(&key) {
                                r.gone_at.get_or_insert(Instant::now());
                            }
                        }
                        _ => {}
                    }
                    let n = st.in_flight();
                    st.peak_in_flight = st.peak_in_flight.max(n);
                }
                w2.notify.notify_waiters();
            }
        });
        (w, h)
    }

    pub fn touching(&self, uids: &BTreeSet<String>) -> Vec<JobRec> {
        self.state.lock().unwrap().touching(uids)
    }

    pub fn all(&self) -> Vec<JobRec> {
        self.state.lock().unwrap().by_key.values().cloned().collect()
    }

    pub fn peak_in_flight(&self) -> usize {
        self.state.lock().unwrap().peak_in_flight
    }

    /// Starts a new peak measurement from the Jobs in flight now.
    pub fn reset_peak(&self) {
        let mut st = self.state.lock().unwrap();
        st.peak_in_flight = st.in_flight();
    }

    pub async fn wait<T>(&self, what: &str, timeout: Duration, f: impl FnMut(&JobState) -> Option<T>) -> Result<T> {
        wait_state(what, timeout, &self.state, &self.notify, f).await
    }
}

/// A suspended SnapshotSchedule `name` (yearly cron, a policy that does not exist: it never
/// runs) with `spec.deletion.onScheduleDelete`; returns the controller ownerReference its
/// seeded children carry.
pub async fn schedule(client: &Client, ns: &str, name: &str, on_schedule_delete: &str) -> Result<Value> {
    let s: kopiur_api::SnapshotSchedule = serde_json::from_value(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotSchedule",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"policyRef": {"name": ABSENT_POLICY}, "schedule": {"cron": "0 0 1 1 *", "suspend": true},
                 "deletion": {"onScheduleDelete": on_schedule_delete}}
    }))?;
    let created = Api::<kopiur_api::SnapshotSchedule>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &s)
        .await
        .with_context(|| format!("creating SnapshotSchedule {ns}/{name}"))?;
    Ok(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotSchedule",
        "name": name, "uid": created.uid().context("schedule uid")?, "controller": true
    }))
}

/// Events in `ns` with `reason`: (total occurrences, counting each Event's `count`; distinct
/// involved object names).
pub async fn events(client: &Client, ns: &str, reason: &str) -> Result<(usize, usize)> {
    let l = Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default().fields(&format!("reason={reason}")))
        .await?;
    let names: BTreeSet<String> = l.items.iter().filter_map(|e| e.involved_object.name.clone()).collect();
    let total = l.items.iter().map(|e| e.count.unwrap_or(1).max(1) as usize).sum();
    Ok((total, names.len()))
}

/// The uids of `names`.
pub fn uids(names: &[String], by_name: &BTreeMap<String, String>) -> BTreeSet<String> {
    names.iter().map(|n| by_name[n].clone()).collect()
}

/// The kopia ids of `names`.
pub fn kopia_ids(names: &[String], by_name: &BTreeMap<String, String>) -> BTreeSet<String> {
    names.iter().map(|n| by_name[n].clone()).collect()
}

/// Starts the operator like `Harness::start_operator` (movers run the auditing kopia
/// wrapper), with `extra` in its environment (e.g. `KOPIUR_MAX_CONCURRENT_DELETE_JOBS`).
pub async fn start_operator_with(h: &mut super::harness::Harness, extra: &[(&str, &str)]) -> Result<()> {
    h.start_operator_with(extra).await
}
