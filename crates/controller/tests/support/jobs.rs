//! The Job recorder: every batch delete Job ever seen, from a watch.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::{Api, Client, ResourceExt};

use super::seed::{DELETE_MEMBERS, DELETE_REPO};

/// A batch delete Job as first seen (one per Job object: a retry under the same name is
/// another entry).
#[derive(Clone, Debug)]
pub struct SeenJob {
    pub namespace: String,
    pub name: String,
    pub members: Vec<String>,
    pub repo_uid: String,
    pub managed_by: Option<String>,
    pub first_seen: Instant,
    pub ttl: Option<i32>,
    pub completed: bool,
    /// The Job reached `Failed=True` at some point.
    pub failed: bool,
    pub gone: bool,
}

/// Whether `j` is a batch delete Job (label `op=snapshot-delete-batch` or name `snapdel-*`).
fn is_batch_job(j: &Job) -> bool {
    j.name_any().starts_with("snapdel-")
        || j.labels().get("kopiur.home-operations.com/op").map(String::as_str) == Some("snapshot-delete-batch")
}

/// One entry per Job object: a failed batch's retry reuses the name, never the uid.
fn job_key(j: &Job) -> String {
    j.uid().unwrap_or_else(|| format!("{}/{}", j.namespace().unwrap_or_default(), j.name_any()))
}

fn job_condition(j: &Job, type_: &str) -> bool {
    j.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

/// Records every batch delete Job in every namespace from a watch (kube::runtime::watcher):
/// every ADDED/MODIFIED/DELETED event is applied, so a Job that lives for less than any
/// polling period is still counted, and its `Complete`/`Failed` transitions are never
/// missed. A re-list after a broken watch marks Jobs absent from it as gone. Jobs are
/// reaped, so a final listing would not be enough to count them.
#[derive(Clone, Default)]
pub struct JobRecorder(pub Arc<Mutex<BTreeMap<String, SeenJob>>>);

impl JobRecorder {
    pub fn spawn(client: Client) -> (JobRecorder, tokio::task::JoinHandle<()>) {
        use kube::runtime::watcher;
        let rec = JobRecorder::default();
        let r2 = rec.clone();
        let h = tokio::spawn(async move {
            let api: Api<Job> = Api::all(client);
            let mut relisted: Option<BTreeSet<String>> = None;
            let mut stream = watcher(api, watcher::Config::default()).boxed();
            while let Some(ev) = stream.next().await {
                let ev = match ev {
                    Ok(ev) => ev,
                    // The watcher re-lists by itself after an error.
                    Err(_) => continue,
                };
                let mut m = r2.0.lock().unwrap();
                match ev {
                    watcher::Event::Init => relisted = Some(BTreeSet::new()),
                    watcher::Event::InitApply(j) | watcher::Event::Apply(j) if is_batch_job(&j) => {
                        let key = job_key(&j);
                        if let Some(r) = relisted.as_mut() {
                            r.insert(key.clone());
                        }
                        let e = m.entry(key).or_insert_with(|| SeenJob {
                            namespace: j.namespace().unwrap_or_default(),
                            name: j.name_any(),
                            members: batch_members(&j),
                            repo_uid: j.labels().get(DELETE_REPO).cloned().unwrap_or_default(),
                            managed_by: j.labels().get("app.kubernetes.io/managed-by").cloned(),
                            first_seen: Instant::now(),
                            ttl: j.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished),
                            completed: false,
                            failed: false,
                            gone: false,
                        });
                        e.completed |= job_condition(&j, "Complete");
                        e.failed |= job_condition(&j, "Failed");
                    }
                    watcher::Event::InitApply(_) | watcher::Event::Apply(_) => {}
                    watcher::Event::Delete(j) => {
                        if let Some(e) = m.get_mut(&job_key(&j)) {
                            e.gone = true;
                        }
                    }
                    watcher::Event::InitDone => {
                        if let Some(seen) = relisted.take() {
                            for (k, v) in m.iter_mut() {
                                if !seen.contains(k) {
                                    v.gone = true;
                                }
                            }
                        }
                    }
                }
            }
        });
        (rec, h)
    }

    /// Every Job seen, in the order first seen.
    pub fn all(&self) -> Vec<SeenJob> {
        let mut v: Vec<SeenJob> = self.0.lock().unwrap().values().cloned().collect();
        v.sort_by_key(|j| j.first_seen);
        v
    }

    /// Jobs any of whose members is in `uids`.
    pub fn touching(&self, uids: &BTreeSet<String>) -> Vec<SeenJob> {
        self.all().into_iter().filter(|j| j.members.iter().any(|m| uids.contains(m))).collect()
    }

    pub fn in_namespace(&self, ns: &str) -> Vec<SeenJob> {
        self.all().into_iter().filter(|j| j.namespace == ns).collect()
    }
}

/// A Job's creationTimestamp (now, for one the API server has not stamped yet).
pub fn created_or_now(job: &Job) -> chrono::DateTime<chrono::Utc> {
    job.metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| chrono::DateTime::from_timestamp(t.0.as_second(), 0))
        .unwrap_or_else(chrono::Utc::now)
}

/// The Snapshots a batch-delete Job deletes (its members annotation).
pub fn batch_members(job: &Job) -> Vec<String> {
    job.annotations()
        .get(DELETE_MEMBERS)
        .map(|v| v.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect())
        .unwrap_or_default()
}
