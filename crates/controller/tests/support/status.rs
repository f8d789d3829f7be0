//! Phase and condition accessors of kopiur objects, and Event counts, as the tests read them.

use k8s_openapi::api::events::v1::Event;
use kopiur_api::{Repository, Restore, Snapshot};
use kube::Api;
use kube::Client;
use kube::api::ListParams;

type MetaCondition = k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// The Repository's phase, `""` while it has none.
pub fn repo_phase(r: &Repository) -> String {
    r.status.as_ref().and_then(|s| s.phase.as_ref()).map(|p| p.as_str().to_string()).unwrap_or_default()
}

/// The Repository's condition `t` as `(status, reason, message)`.
pub fn repo_condition(r: &Repository, t: &str) -> Option<(String, String, String)> {
    r.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == t)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// The Snapshot's phase, `""` while it has none.
pub fn snap_phase(s: &Snapshot) -> String {
    s.status.as_ref().and_then(|st| st.phase.as_ref()).map(|p| p.as_str().to_string()).unwrap_or_default()
}

/// The Snapshot's condition `t`.
pub fn snap_condition(s: &Snapshot, t: &str) -> Option<MetaCondition> {
    s.status.as_ref()?.conditions.iter().find(|c| c.type_ == t).cloned()
}

/// The Restore's phase, `""` while it has none.
pub fn restore_phase(r: &Restore) -> String {
    r.status.as_ref().and_then(|st| st.phase.as_ref()).map(|p| p.as_str().to_string()).unwrap_or_default()
}

/// The Restore's condition `t`.
pub fn restore_condition(r: &Restore, t: &str) -> Option<MetaCondition> {
    r.status.as_ref()?.conditions.iter().find(|c| c.type_ == t).cloned()
}

/// The reason of the `Ready` condition among `conds`.
pub fn ready_reason(conds: &[MetaCondition]) -> Option<String> {
    conds.iter().find(|c| c.type_ == "Ready").map(|c| c.reason.clone())
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
