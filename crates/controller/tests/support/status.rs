//! Phase and condition accessors of kopiur objects, and Event counts, as the tests read them.

use k8s_openapi::api::events::v1::Event;
use kopiur_api::names::condition;
use kopiur_api::{
    ClusterRepository, Maintenance, Repository, RepositoryReplication, Restore, Snapshot, SnapshotPolicy,
    SnapshotReplication, SnapshotSchedule,
};
use kube::Api;
use kube::Client;
use kube::api::ListParams;

type MetaCondition = k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// The phase and the conditions of a kopiur object, as the tests read them:
/// `snapshot.phase()`, `repo.condition("BackendReachable")`, `restore.ready_reason()`.
pub trait StatusExt {
    /// The conditions, empty while there is no status.
    fn conditions(&self) -> &[MetaCondition];

    /// The phase, `""` while there is none (always, for a kind without a phase:
    /// SnapshotPolicy, SnapshotSchedule, Maintenance).
    fn phase(&self) -> String {
        String::new()
    }

    /// The condition `t`.
    fn condition(&self, t: &str) -> Option<&MetaCondition> {
        self.conditions().iter().find(|c| c.type_ == t)
    }

    /// The reason of the `Ready` condition.
    fn ready_reason(&self) -> Option<String> {
        self.condition(condition::READY).map(|c| c.reason.clone())
    }
}

/// `StatusExt` for kinds whose status (or the status part at `$path`, a ClusterRepository's
/// `common`) has `phase` (an `Option` of a phase enum) and `conditions`.
macro_rules! status_ext {
    ($kind:ty $(, $path:ident)*) => {
        impl StatusExt for $kind {
            fn conditions(&self) -> &[MetaCondition] {
                self.status.as_ref().map_or(&[][..], |s| s$(.$path)*.conditions.as_slice())
            }

            fn phase(&self) -> String {
                let phase = self.status.as_ref().and_then(|s| s$(.$path)*.phase.as_ref());
                phase.map(|p| p.as_str().to_string()).unwrap_or_default()
            }
        }
    };
}

status_ext!(Snapshot);
status_ext!(Repository);
status_ext!(ClusterRepository, common);
status_ext!(Restore);
status_ext!(RepositoryReplication);
status_ext!(SnapshotReplication);

/// `StatusExt` for kinds with conditions and no phase.
macro_rules! conditions_only {
    ($($kind:ty),*) => {$(
        impl StatusExt for $kind {
            fn conditions(&self) -> &[MetaCondition] {
                self.status.as_ref().map_or(&[][..], |s| s.conditions.as_slice())
            }
        }
    )*};
}

conditions_only!(SnapshotPolicy, SnapshotSchedule, Maintenance);

/// The condition `t` of `o` as `(status, reason, message)`.
pub fn condition_parts<T: StatusExt>(o: &T, t: &str) -> Option<(String, String, String)> {
    o.condition(t).map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// The Events in `ns` about the object named `object` with `reason`.
pub async fn events_about(client: &Client, ns: &str, object: &str, reason: &str) -> kube::Result<Vec<Event>> {
    Ok(Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(object))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect())
}

/// How many times Events in `ns` about `object` with `reason` occurred (a series counts each
/// occurrence, so a repeat folded into one Event is still seen).
pub async fn event_count(client: &Client, ns: &str, object: &str, reason: &str) -> kube::Result<usize> {
    Ok(events_about(client, ns, object, reason).await?.iter().map(occurrences).sum())
}

/// How many times `e` occurred (an Event series counts each occurrence).
pub fn occurrences(e: &Event) -> usize {
    e.series.as_ref().map_or(1, |s| s.count.max(1) as usize)
}

/// The condition `t` among `cs`.
pub fn cond<'a>(cs: &'a [MetaCondition], t: &str) -> Option<&'a MetaCondition> {
    cs.iter().find(|c| c.type_ == t)
}

/// Whether the condition `t` among `cs` has `status`.
pub fn is(cs: &[MetaCondition], t: &str, status: &str) -> bool {
    cond(cs, t).is_some_and(|c| c.status == status)
}

/// `Ready=False/Reason,…` for the conditions `types` among `cs`, for failure messages.
pub fn summary(cs: &[MetaCondition], types: &[&str]) -> String {
    types
        .iter()
        .map(|t| cond(cs, t).map_or(format!("{t}=?"), |c| format!("{t}={}/{}", c.status, c.reason)))
        .collect::<Vec<_>>()
        .join(",")
}

/// Exactly one of Ready, Reconciling and Stalled is True (docs/design/api-contract.md §1.6).
pub fn one_true(cs: &[MetaCondition]) -> bool {
    ["Ready", "Reconciling", "Stalled"].iter().filter(|t| is(cs, t, "True")).count() == 1
}
