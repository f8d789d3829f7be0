//! Seeding: Succeeded Snapshot CRs written straight through the API (finalizer in metadata,
//! status through the status subresource), pinned to a repository, grouped by a set label.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};
use kopiur_api::{Repository, Snapshot};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

pub const FINALIZER: &str = "kopiur.home-operations.com/snapshot-cleanup";
pub const PRUNED_BY: &str = "kopiur.home-operations.com/pruned-by";
pub const ALLOW_MASS_DELETION: &str = "kopiur.home-operations.com/allow-mass-deletion";
pub const DELETE_MEMBERS: &str = "kopiur.home-operations.com/delete-members";
pub const DELETE_REPO: &str = "kopiur.home-operations.com/delete-repo";
pub const OP_BATCH: &str = "kopiur.home-operations.com/op=snapshot-delete-batch";
/// Seeded Snapshots are grouped by this label (one value per scenario set).
pub const SET: &str = "deletion-e2e/set";
/// A SnapshotPolicy that never exists: a Snapshot the controller reads before its status is
/// written parks as PolicyNotFound instead of being failed, and its resourceVersion-guarded
/// status write cannot overwrite the seeded Succeeded status.
pub const ABSENT_POLICY: &str = "seeded-no-such-policy";

/// One Snapshot to write.
#[derive(Clone, Debug)]
pub struct SeedSnap {
    pub name: String,
    pub kopia_id: String,
    pub labels: BTreeMap<String, String>,
    /// A controller ownerReference (a SnapshotSchedule).
    pub owner: Option<Value>,
    pub origin: &'static str,
}

/// The pin every seeded Snapshot carries.
#[derive(Clone, Debug)]
pub struct RepoPin {
    /// `Repository` or `ClusterRepository` (whose namespace is empty).
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl RepoPin {
    pub fn of(r: &Repository) -> RepoPin {
        RepoPin {
            kind: "Repository",
            namespace: r.namespace().unwrap_or_default(),
            name: r.name_any(),
            uid: r.uid().unwrap_or_default(),
        }
    }

    pub fn of_cluster(c: &kopiur_api::ClusterRepository) -> RepoPin {
        RepoPin {
            kind: "ClusterRepository",
            namespace: String::new(),
            name: c.name_any(),
            uid: c.uid().unwrap_or_default(),
        }
    }
}

/// Creates each Snapshot with the finalizer, then writes a Succeeded status with the kopia
/// id and the pinned repository through the status subresource. `concurrency` requests in
/// flight. Returns name -> uid.
pub async fn seed_snapshots(
    client: &Client,
    ns: &str,
    pin: &RepoPin,
    items: Vec<SeedSnap>,
    concurrency: usize,
) -> Result<BTreeMap<String, String>> {
    seed_snapshots_with(client, ns, pin, items, json!({}), concurrency).await
}

/// Like [`seed_snapshots`], with `extra_spec` merged into every Snapshot's spec (e.g.
/// `{"onScheduleDelete": "Delete"}`, the stamp a schedule puts on its children).
pub async fn seed_snapshots_with(
    client: &Client,
    ns: &str,
    pin: &RepoPin,
    items: Vec<SeedSnap>,
    extra_spec: Value,
    concurrency: usize,
) -> Result<BTreeMap<String, String>> {
    let api: Api<Snapshot> = Api::namespaced(client.clone(), ns);
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let results: Vec<(String, String)> = futures::stream::iter(items.into_iter().map(|s| {
        let api = api.clone();
        let pin = pin.clone();
        let now = now.clone();
        let ns = ns.to_string();
        let extra = extra_spec.clone();
        async move {
            let mut meta = json!({
                "name": s.name, "namespace": ns,
                "finalizers": [FINALIZER],
                "labels": s.labels,
            });
            if let Some(o) = &s.owner {
                meta["ownerReferences"] = json!([o]);
            }
            let mut spec = json!({"policyRef": {"name": ABSENT_POLICY}, "deletionPolicy": "Delete"});
            if pin.kind == "ClusterRepository" {
                spec["repository"] = json!({"kind": "ClusterRepository", "name": pin.name});
            } else if pin.namespace != ns {
                spec["repository"] = json!({"name": pin.name, "namespace": pin.namespace});
            } else {
                spec["repository"] = json!({"name": pin.name});
            }
            if let (Some(sp), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
                for (k, v) in e {
                    sp.insert(k.clone(), v.clone());
                }
            }
            let obj: Snapshot = serde_json::from_value(json!({
                "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
                "metadata": meta, "spec": spec,
            }))?;
            let created = match api.create(&PostParams::default(), &obj).await {
                Ok(c) => c,
                Err(kube::Error::Api(e)) if e.code == 409 => api.get(&s.name).await?,
                Err(e) => return Err(anyhow::Error::from(e).context(format!("creating Snapshot {}", s.name))),
            };
            let status = json!({"status": {
                "phase": "Succeeded",
                "origin": s.origin,
                "observedGeneration": created.metadata.generation,
                "snapshot": {"kopiaSnapshotID": s.kopia_id},
                "resolved": {
                    "repository": if pin.kind == "ClusterRepository" {
                        json!({"kind": "ClusterRepository", "name": pin.name, "uid": pin.uid})
                    } else {
                        json!({"kind": "Repository", "namespace": pin.namespace, "name": pin.name, "uid": pin.uid})
                    },
                    "deletionPolicy": "Delete",
                    "identity": recorded_identity(&s.kopia_id),
                },
                "completionRecordedAt": now,
            }});
            api.patch_status(&s.name, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .with_context(|| format!("writing the status of Snapshot {}", s.name))?;
            Ok::<_, anyhow::Error>((s.name.clone(), created.uid().unwrap_or_default()))
        }
    }))
    .buffer_unordered(concurrency.max(1))
    .try_collect()
    .await?;
    Ok(results.into_iter().collect())
}

/// Each seeded kopia manifest's source, by id: what a real backup run records in the Snapshot's
/// `status.resolved.identity`, and what the batch mover checks the manifest against.
static SOURCES: std::sync::Mutex<BTreeMap<String, (String, String, String)>> = std::sync::Mutex::new(BTreeMap::new());

pub fn record_source(id: &str, username: &str, hostname: &str, path: &str) {
    SOURCES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(id.to_string(), (username.to_string(), hostname.to_string(), path.to_string()));
}

/// `status.resolved.identity` for a seeded id; `null` for an id no seed made (a fake id).
pub fn recorded_identity(id: &str) -> Value {
    match SOURCES.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(id) {
        Some((u, h, p)) => json!({"username": u, "hostname": h, "sourcePath": p}),
        None => Value::Null,
    }
}

/// Names `prefix-0000` … for `n` seeded Snapshots.
pub fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:04}")).collect()
}

/// Seed items for `names` with their kopia ids and the set label.
pub fn items(names: &[String], ids: &BTreeMap<String, String>, set: &str) -> Vec<SeedSnap> {
    names
        .iter()
        .map(|n| SeedSnap {
            name: n.clone(),
            kopia_id: ids[n].clone(),
            labels: BTreeMap::from([(SET.to_string(), set.to_string())]),
            owner: None,
            origin: "manual",
        })
        .collect()
}

/// Snapshots in `ns` with label `SET=set`.
pub async fn list_set(client: &Client, ns: &str, set: &str) -> Result<Vec<Snapshot>> {
    Ok(Api::<Snapshot>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{SET}={set}")))
        .await?
        .items)
}

pub fn condition<'a>(s: &'a Snapshot, type_: &str) -> Option<&'a kopiur_api::shared::status::Condition> {
    s.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)
}

pub fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Seed items for schedule children: the set label, the schedule label and the owner.
pub fn children(
    names: &[String],
    ids: &BTreeMap<String, String>,
    set: &str,
    sched: &str,
    owner: &Value,
) -> Vec<SeedSnap> {
    names
        .iter()
        .map(|n| SeedSnap {
            name: n.clone(),
            kopia_id: ids[n].clone(),
            labels: BTreeMap::from([
                (SET.to_string(), set.to_string()),
                ("kopiur.home-operations.com/schedule".to_string(), sched.to_string()),
                ("kopiur.home-operations.com/origin".to_string(), "scheduled".to_string()),
            ]),
            owner: Some(owner.clone()),
            origin: "scheduled",
        })
        .collect()
}

/// Deletes the named Snapshots one DELETE each (`concurrency` in flight), the way
/// `kubectl delete -l` does after its list; one already gone is fine.
pub async fn delete_snapshots(client: &Client, ns: &str, names: Vec<String>, concurrency: usize) -> Result<()> {
    let api: Api<Snapshot> = Api::namespaced(client.clone(), ns);
    futures::stream::iter(names.into_iter().map(|n| {
        let api = api.clone();
        async move {
            match api.delete(&n, &DeleteParams::default()).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
                Err(e) => Err(anyhow::Error::from(e).context(format!("deleting Snapshot {n}"))),
            }
        }
    }))
    .buffer_unordered(concurrency.max(1))
    .try_collect::<Vec<()>>()
    .await?;
    Ok(())
}
