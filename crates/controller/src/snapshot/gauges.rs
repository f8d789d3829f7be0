//! Snapshot-store-backed metrics (docs/design/observability.md §10.1), recomputed every few seconds from the reflector
//! store, so a deleted Snapshot's series disappear with it:
//! - `kopiur_snapshot_gated{namespace,policy}`: parked run-path Snapshots (Pending or no phase,
//!   Ready reason `RepositoryNotReady`); absent at 0;
//! - per Snapshot: `kopiur_snapshot_size_bytes`, `kopiur_snapshot_duration_seconds`,
//!   `kopiur_snapshot_last_success_timestamp_seconds`;
//! - per policy and repository: `kopiur_policy_last_backup_success_timestamp_seconds`,
//!   `kopiur_snapshotpolicy_last_backup_success`, `kopiur_snapshot_consecutive_failures`;
//! - `kopiur_snapshots_completed_total{namespace,policy,result}`: terminal transitions seen in
//!   the store, counted once per Snapshot and only for runs that ended after this task started
//!   (so a restart does not recount history);
//! - from the Repository/ClusterRepository and Restore stores of the same pipeline:
//!   `kopiur_repo_snapshot_count`, `kopiur_repo_discovered_snapshots`, `kopiur_repo_index_blobs`,
//!   `kopiur_repository_maintenance_configured` and `kopiur_restore_duration_seconds`.
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kopiur_api::names::{condition, reason};
use kopiur_api::repository::RepositoryStatus;
use kopiur_api::snapshot::SnapshotPhase;
use kopiur_api::{ClusterRepository, Repository, Restore, Snapshot};
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};

use crate::context::Context;
use crate::metrics::Metrics;
use crate::metrics::labels::{
    CompletionLabels, GatedLabels, PhaseRow, PolicyRepoLabels, RepoLabels, RestoreLabels, SnapshotLabels,
    StagingLeftLabels,
};

/// How often the gauges are recomputed.
pub const PERIOD: Duration = Duration::from_secs(5);

/// The policy label: `spec.policyRef.name`, else the policy pinned in `status.resolved`.
pub fn policy_label(s: &Snapshot) -> String {
    s.spec
        .policy_ref
        .as_ref()
        .map(|p| p.name.clone())
        .or_else(|| s.status.as_ref().and_then(|st| st.resolved.as_ref()).and_then(|r| r.policy.clone()))
        .unwrap_or_default()
}

/// The repository label: the resolved repository, else `spec.repository`.
pub fn repository_label(s: &Snapshot) -> String {
    s.status
        .as_ref()
        .and_then(|st| st.resolved.as_ref())
        .and_then(|r| r.repository.as_ref())
        .map(|r| r.name.clone())
        .or_else(|| s.spec.repository.as_ref().map(|r| r.name.clone()))
        .unwrap_or_default()
}

fn phase(s: &Snapshot) -> Option<&SnapshotPhase> {
    s.status.as_ref().and_then(|st| st.phase.as_ref())
}

/// A run-path Snapshot parked on its repository gate: Pending (or not yet phased), not being
/// deleted, with Ready reason `RepositoryNotReady`.
pub fn is_parked(s: &Snapshot) -> bool {
    if s.metadata.deletion_timestamp.is_some() {
        return false;
    }
    if !matches!(phase(s), None | Some(SnapshotPhase::Pending)) {
        return false;
    }
    s.status
        .as_ref()
        .map(|st| st.conditions.iter().any(|c| c.type_ == "Ready" && c.reason == reason::REPOSITORY_NOT_READY))
        .unwrap_or(false)
}

/// `kopiur_snapshot_gated` series: parked Snapshots per (namespace, policy); no series at 0.
pub fn gated_series(snapshots: &[Arc<Snapshot>]) -> BTreeMap<GatedLabels, i64> {
    let mut out = BTreeMap::new();
    for s in snapshots.iter().filter(|s| is_parked(s)) {
        *out.entry(GatedLabels { namespace: s.namespace().unwrap_or_default(), policy: policy_label(s) })
            .or_insert(0) += 1;
    }
    out
}

/// `kopiur_staging_left` series: Snapshots whose staged objects outlived the release bound
/// (`Staging=True / ReleaseStuck`), 1 each; no series once they are gone.
pub fn staging_left_series(snapshots: &[Arc<Snapshot>]) -> BTreeMap<StagingLeftLabels, i64> {
    snapshots
        .iter()
        .filter(|s| {
            s.status.as_ref().is_some_and(|st| {
                crate::staging::held(&st.conditions).is_some_and(|c| c.reason == crate::staging::RELEASE_STUCK)
            })
        })
        .map(|s| (StagingLeftLabels { namespace: s.namespace().unwrap_or_default(), name: s.name_any() }, 1))
        .collect()
}

/// The result label of a run that reached a terminal phase (Discovered rows are catalog
/// entries, not runs).
pub fn result_label(s: &Snapshot) -> Option<&'static str> {
    match phase(s)? {
        SnapshotPhase::Succeeded => Some("succeeded"),
        SnapshotPhase::Unchanged => Some("unchanged"),
        SnapshotPhase::Failed => Some("failed"),
        SnapshotPhase::Pending
        | SnapshotPhase::Running
        | SnapshotPhase::Discovered
        | SnapshotPhase::Deleting
        | SnapshotPhase::Unknown(_) => None,
    }
}

/// When a terminal run ended: `timing.endTime`, else when the controller recorded it, else
/// the creation time (seconds since the epoch).
fn ended_at(s: &Snapshot) -> Option<i64> {
    let st = s.status.as_ref();
    st.and_then(|st| st.timing.as_ref())
        .and_then(|t| t.end_time.as_ref())
        .or_else(|| st.and_then(|st| st.completion_recorded_at.as_ref()))
        .map(|t| t.timestamp())
        .or_else(|| s.metadata.creation_timestamp.as_ref().map(|t| t.0.as_second()))
}

/// Every Snapshot-store gauge family, as label values -> value.
#[derive(Debug, Default, PartialEq)]
pub struct SnapshotGauges {
    pub gated: BTreeMap<GatedLabels, i64>,
    pub staging_left: BTreeMap<StagingLeftLabels, i64>,
    pub size_bytes: BTreeMap<SnapshotLabels, i64>,
    pub duration_seconds: BTreeMap<SnapshotLabels, i64>,
    pub last_success: BTreeMap<SnapshotLabels, i64>,
    pub policy_last_success_timestamp: BTreeMap<PolicyRepoLabels, i64>,
    pub policy_last_backup_success: BTreeMap<PolicyRepoLabels, i64>,
    pub consecutive_failures: BTreeMap<PolicyRepoLabels, i64>,
}

pub fn compute(snapshots: &[Arc<Snapshot>]) -> SnapshotGauges {
    let mut g = SnapshotGauges {
        gated: gated_series(snapshots),
        staging_left: staging_left_series(snapshots),
        ..Default::default()
    };
    // Terminal runs per (namespace, policy, repository), for the policy-level gauges.
    let mut runs: BTreeMap<PolicyRepoLabels, Vec<(i64, String, SnapshotPhase)>> = BTreeMap::new();
    for s in snapshots {
        if s.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(result) = result_label(s) else { continue };
        let (ns, name, policy) = (s.namespace().unwrap_or_default(), s.name_any(), policy_label(s));
        let per_snapshot = SnapshotLabels { namespace: ns.clone(), name: name.clone(), policy: policy.clone() };
        let st = s.status.as_ref();
        if let Some(d) = st.and_then(|st| st.timing.as_ref()).and_then(|t| t.duration_seconds) {
            g.duration_seconds.insert(per_snapshot.clone(), d);
        }
        if result == "succeeded" {
            if let Some(size) = st.and_then(|st| st.stats.as_ref()).and_then(|x| x.size_bytes) {
                g.size_bytes.insert(per_snapshot.clone(), size);
            }
            if let Some(t) = ended_at(s) {
                g.last_success.insert(per_snapshot, t);
            }
        }
        if policy.is_empty() {
            continue;
        }
        let key = PolicyRepoLabels { namespace: ns, policy, repository: repository_label(s) };
        let phase = phase(s).cloned().unwrap_or(SnapshotPhase::Failed);
        runs.entry(key).or_default().push((ended_at(s).unwrap_or(0), name, phase));
    }
    for (key, mut v) in runs {
        // Oldest first; ties broken by name, so the order is total.
        v.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        // The age of a backup is the newest Succeeded run's (an Unchanged run writes no
        // manifest); the last-result gauge counts Unchanged as a success.
        let ok = |p: &SnapshotPhase| matches!(p, SnapshotPhase::Succeeded | SnapshotPhase::Unchanged);
        if let Some((t, _, _)) = v.iter().rev().find(|(_, _, p)| matches!(p, SnapshotPhase::Succeeded)) {
            g.policy_last_success_timestamp.insert(key.clone(), *t);
        }
        if let Some((_, _, p)) = v.last() {
            g.policy_last_backup_success.insert(key.clone(), i64::from(ok(p)));
        }
        let streak = v.iter().rev().take_while(|(_, _, p)| matches!(p, SnapshotPhase::Failed)).count();
        g.consecutive_failures.insert(key, streak as i64);
    }
    g
}

/// Terminal transitions since the last pass: `seen` holds the uids already looked at. Returns
/// the `(namespace, policy, result)` of each new one that ended at or after `since` (epoch
/// seconds; older runs are history); uids no longer in the store are forgotten.
pub fn new_completions(seen: &mut BTreeSet<String>, snapshots: &[Arc<Snapshot>], since: i64) -> Vec<[String; 3]> {
    let mut out = Vec::new();
    let mut present = BTreeSet::new();
    for s in snapshots {
        let Some(result) = result_label(s) else { continue };
        let Some(uid) = s.uid() else { continue };
        present.insert(uid.clone());
        if seen.insert(uid) && ended_at(s).is_some_and(|t| t >= since) {
            out.push([s.namespace().unwrap_or_default(), policy_label(s), result.to_string()]);
        }
    }
    seen.retain(|u| present.contains(u));
    out
}

fn publish(metrics: &Metrics, g: SnapshotGauges) {
    metrics.snapshot_gated.replace(g.gated);
    metrics.staging_left.replace(g.staging_left);
    metrics.snapshot_size_bytes.replace(g.size_bytes);
    metrics.snapshot_duration_seconds.replace(g.duration_seconds);
    metrics.snapshot_last_success.replace(g.last_success);
    metrics.policy_last_success_timestamp.replace(g.policy_last_success_timestamp);
    metrics.policy_last_backup_success.replace(g.policy_last_backup_success);
    metrics.snapshot_consecutive_failures.replace(g.consecutive_failures);
}

/// Repository-level gauges from the last listing and the conditions, keyed (kind, namespace,
/// name); a ClusterRepository has namespace "".
#[derive(Debug, Default, PartialEq)]
pub struct RepoCatalogGauges {
    pub snapshot_count: BTreeMap<RepoLabels, i64>,
    pub discovered: BTreeMap<RepoLabels, i64>,
    pub index_blobs: BTreeMap<RepoLabels, i64>,
    pub maintenance_configured: BTreeMap<RepoLabels, i64>,
}

fn add_repo(g: &mut RepoCatalogGauges, key: RepoLabels, st: Option<&RepositoryStatus>) {
    let Some(st) = st else { return };
    let stats = st.storage_stats.as_ref();
    if let Some(n) = stats.and_then(|x| x.snapshot_count) {
        g.snapshot_count.insert(key.clone(), n);
    }
    if let Some(n) = stats.and_then(|x| x.index_blob_count) {
        g.index_blobs.insert(key.clone(), n);
    }
    if let Some(n) = st.catalog.as_ref().and_then(|c| c.discovered_backup_count) {
        g.discovered.insert(key.clone(), n);
    }
    if let Some(c) = st.conditions.iter().find(|c| c.type_ == condition::MAINTENANCE_CONFIGURED) {
        g.maintenance_configured.insert(key, i64::from(c.status == "True"));
    }
}

pub fn repo_catalog(repos: &[Arc<Repository>], crepos: &[Arc<ClusterRepository>]) -> RepoCatalogGauges {
    let mut g = RepoCatalogGauges::default();
    for r in repos {
        let key = RepoLabels {
            kind: Repository::kind(&()).into_owned(),
            namespace: r.namespace().unwrap_or_default(),
            name: r.name_any(),
        };
        add_repo(&mut g, key, r.status.as_ref());
    }
    for r in crepos {
        let key = RepoLabels {
            kind: ClusterRepository::kind(&()).into_owned(),
            namespace: String::new(),
            name: r.name_any(),
        };
        add_repo(&mut g, key, r.status.as_ref().map(|s| &s.common));
    }
    g
}

/// `kopiur_restore_duration_seconds{namespace,name}` of Restores that report a duration.
pub fn restore_durations(restores: &[Arc<Restore>]) -> BTreeMap<RestoreLabels, i64> {
    restores
        .iter()
        .filter_map(|r| {
            let d = r.status.as_ref()?.timing.as_ref()?.duration_seconds?;
            Some((RestoreLabels { namespace: r.namespace().unwrap_or_default(), name: r.name_any() }, d))
        })
        .collect()
}

/// Writes kind `K`'s `kopiur_resource_phase` series from `store` at every scrape (sorted by
/// namespace and name), holding nothing per object between scrapes.
pub fn live_phase<K: crate::resource_phase::Phased>(metrics: &Metrics, store: Store<K>) {
    metrics.resource_phase_live(
        K::KIND,
        Box::new(move |emit: &mut dyn FnMut(PhaseRow<'_>)| {
            let objs = store.state();
            let mut rows: Vec<(&str, &str, String)> = objs
                .iter()
                .filter_map(|o| {
                    let m = o.meta();
                    Some((m.namespace.as_deref().unwrap_or(""), m.name.as_deref().unwrap_or(""), o.phase_label()?))
                })
                .collect();
            rows.sort_unstable();
            for (ns, name, phase) in rows {
                emit(PhaseRow { kind: K::KIND, namespace: ns, name, phase: &phase });
            }
        }),
    );
}

/// Recomputes the store-backed gauges every [`PERIOD`] for as long as the pipeline runs.
pub async fn run(ctx: Arc<Context>, restores: Store<Restore>) {
    let (store, metrics) = (ctx.stores.snapshots.clone(), ctx.metrics.clone());
    // No wait for the store's first sync (the Controller's store may not signal it): the
    // gauges are recomputed from whatever it holds, and completions are told apart from
    // history by their end time.
    let started = chrono::Utc::now().timestamp();
    let mut seen = BTreeSet::new();
    // `kopiur_resource_phase` of the kinds whose stores this pipeline holds, written at scrape
    // time.
    live_phase(&metrics, store.clone());
    live_phase(&metrics, restores.clone());
    live_phase(&metrics, ctx.stores.policies.clone());
    live_phase(&metrics, ctx.stores.schedules.clone());
    live_phase(&metrics, ctx.stores.maintenances.clone());
    let mut tick = tokio::time::interval(PERIOD);
    loop {
        tick.tick().await;
        let snapshots = store.state();
        for [ns, policy, result] in new_completions(&mut seen, &snapshots, started) {
            metrics.snapshots_completed.inc(CompletionLabels { namespace: ns, policy, result });
        }
        publish(&metrics, compute(&snapshots));
        let repos = repo_catalog(&ctx.stores.repos.state(), &ctx.stores.crepos.state());
        metrics.repo_snapshot_count.replace(repos.snapshot_count);
        metrics.repo_discovered_snapshots.replace(repos.discovered);
        metrics.repo_index_blobs.replace(repos.index_blobs);
        metrics.repository_maintenance_configured.replace(repos.maintenance_configured);
        metrics.restore_duration_seconds.replace(restore_durations(&restores.state()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn snap(name: &str, policy: &str, status: serde_json::Value) -> Arc<Snapshot> {
        let v = json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": name, "namespace": "t", "uid": format!("uid-{name}"),
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"policyRef": {"name": policy}},
            "status": status,
        });
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn ready(reason: &str) -> serde_json::Value {
        json!([{"type": "Ready", "status": "False", "reason": reason, "message": "m",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}])
    }

    fn gated(namespace: &str, policy: &str) -> GatedLabels {
        GatedLabels { namespace: namespace.into(), policy: policy.into() }
    }

    fn per_snapshot(namespace: &str, name: &str, policy: &str) -> SnapshotLabels {
        SnapshotLabels { namespace: namespace.into(), name: name.into(), policy: policy.into() }
    }

    fn per_policy(namespace: &str, policy: &str, repository: &str) -> PolicyRepoLabels {
        PolicyRepoLabels { namespace: namespace.into(), policy: policy.into(), repository: repository.into() }
    }

    fn ended(name: &str, policy: &str, phase: &str, end: &str) -> Arc<Snapshot> {
        snap(
            name,
            policy,
            json!({"phase": phase, "timing": {"endTime": end, "durationSeconds": 7}, "stats": {"sizeBytes": 42},
                   "resolved": {"repository": {"kind": "Repository", "name": "r"}}}),
        )
    }

    #[test]
    fn gated_counts_parked_snapshots_per_policy() {
        let snaps = vec![
            snap("a", "p", json!({"phase": "Pending", "conditions": ready("RepositoryNotReady")})),
            // No phase yet, already parked by the gate.
            snap("b", "p", json!({"conditions": ready("RepositoryNotReady")})),
            snap("c", "q", json!({"phase": "Pending", "conditions": ready("RepositoryNotReady")})),
            // Pending for another reason: not gated.
            snap("d", "p", json!({"phase": "Pending", "conditions": ready("PreflightFailed")})),
            // Running with a stale reason: not gated.
            snap("e", "p", json!({"phase": "Running", "conditions": ready("RepositoryNotReady")})),
            snap("f", "p", json!({"phase": "Succeeded"})),
        ];
        let g = gated_series(&snaps);
        assert_eq!(g, BTreeMap::from([(gated("t", "p"), 2), (gated("t", "q"), 1)]));
    }

    #[test]
    fn gated_is_absent_at_zero_and_ignores_deleting() {
        assert!(gated_series(&[]).is_empty());
        let mut s = (*snap("a", "p", json!({"phase": "Pending", "conditions": ready("RepositoryNotReady")}))).clone();
        s.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time("2026-01-01T00:00:00Z".parse().unwrap()));
        assert!(gated_series(&[Arc::new(s)]).is_empty());
    }

    #[test]
    fn policy_gauges_follow_the_latest_runs() {
        let snaps = vec![
            ended("s1", "p", "Succeeded", "2026-01-01T01:00:00Z"),
            ended("s2", "p", "Unchanged", "2026-01-01T02:00:00Z"),
            ended("s3", "p", "Failed", "2026-01-01T03:00:00Z"),
            ended("s4", "p", "Failed", "2026-01-01T04:00:00Z"),
            ended("q1", "q", "Succeeded", "2026-01-01T05:00:00Z"),
        ];
        let g = compute(&snaps);
        let p = per_policy("t", "p", "r");
        let q = per_policy("t", "q", "r");
        assert_eq!(g.consecutive_failures[&p], 2);
        assert_eq!(g.consecutive_failures[&q], 0, "the post-success 0 is visible");
        assert_eq!(g.policy_last_backup_success[&p], 0);
        assert_eq!(g.policy_last_backup_success[&q], 1);
        let one = chrono::DateTime::parse_from_rfc3339("2026-01-01T01:00:00Z").unwrap().timestamp();
        assert_eq!(g.policy_last_success_timestamp[&p], one, "the newest Succeeded run, not the Unchanged one");
        assert_eq!(g.size_bytes[&per_snapshot("t", "s1", "p")], 42);
        assert!(!g.size_bytes.contains_key(&per_snapshot("t", "s3", "p")), "size only for Succeeded");
        assert_eq!(g.duration_seconds[&per_snapshot("t", "s3", "p")], 7);
        assert!(g.last_success.contains_key(&per_snapshot("t", "q1", "q")));
        assert!(g.gated.is_empty());
    }

    #[test]
    fn repository_catalog_and_restore_gauges() {
        let r: Repository = serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
            "metadata": {"name": "r", "namespace": "t"},
            "spec": {"backend": {"s3": {"bucket": "b", "endpoint": "http://x"}},
                     "encryption": {"passwordSecretRef": {"name": "kopia"}}},
            "status": {"storageStats": {"snapshotCount": 5, "indexBlobCount": 12},
                       "catalog": {"discoveredBackupCount": 2},
                       "conditions": [{"type": "MaintenanceConfigured", "status": "False", "reason": "x",
                                       "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .unwrap();
        let bare: Repository = serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
            "metadata": {"name": "new", "namespace": "t"},
            "spec": {"backend": {"s3": {"bucket": "b", "endpoint": "http://x"}},
                     "encryption": {"passwordSecretRef": {"name": "kopia"}}}
        }))
        .unwrap();
        let g = repo_catalog(&[Arc::new(r), Arc::new(bare)], &[]);
        let k = RepoLabels { kind: "Repository".into(), namespace: "t".into(), name: "r".into() };
        assert_eq!(g.snapshot_count, BTreeMap::from([(k.clone(), 5)]));
        assert_eq!(g.index_blobs[&k], 12);
        assert_eq!(g.discovered[&k], 2);
        assert_eq!(g.maintenance_configured, BTreeMap::from([(k, 0)]), "no series without a status");
        let rs: Restore = serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Restore",
            "metadata": {"name": "back", "namespace": "t"},
            "spec": {"source": {"fromPolicy": {"name": "p"}}, "target": {"pvc": {"name": "x", "capacity": "1Gi"}}},
            "status": {"timing": {"durationSeconds": 9}}
        }))
        .unwrap();
        assert_eq!(
            restore_durations(&[Arc::new(rs)]),
            BTreeMap::from([(RestoreLabels { namespace: "t".into(), name: "back".into() }, 9)])
        );
    }

    #[test]
    fn resource_phase_lines_are_written_from_the_store_at_scrape_time() {
        use kube::runtime::watcher::Event;
        let metrics = Metrics::default();
        metrics.leader.set(1);
        // A slice published the old way is replaced by the live lines.
        let stale = crate::metrics::labels::PhaseLabels {
            kind: "Snapshot",
            namespace: "t".into(),
            name: "stale".into(),
            phase: "Pending".into(),
        };
        metrics.resource_phase.replace(BTreeMap::from([(stale, 1)]));
        let (store, mut writer) = kube::runtime::reflector::store::<Snapshot>();
        live_phase(&metrics, store);
        let line = |name: &str, phase: &str| {
            format!("kopiur_resource_phase{{kind=\"Snapshot\",namespace=\"t\",name=\"{name}\",phase=\"{phase}\"}} 1\n")
        };
        let (b, a) = (snap("b", "p", json!({"phase": "Running"})), snap("a", "p", json!({"phase": "Discovered"})));
        writer.apply_watcher_event(&Event::Apply((*b).clone()));
        writer.apply_watcher_event(&Event::Apply((*a).clone()));
        // No phase yet: no series.
        writer.apply_watcher_event(&Event::Apply((*snap("c", "p", json!({}))).clone()));
        let out = metrics.render(&[]);
        let both = format!("{}{}", line("a", "Discovered"), line("b", "Running"));
        assert!(out.contains(&both), "sorted by name, one line each:\n{out}");
        assert!(!out.contains("name=\"stale\"") && !out.contains("name=\"c\""), "{out}");
        // A phase change and a deletion show at the next scrape, with no pass in between.
        writer.apply_watcher_event(&Event::Apply((*snap("b", "p", json!({"phase": "Succeeded"}))).clone()));
        writer.apply_watcher_event(&Event::Delete((*a).clone()));
        let out = metrics.render(&[]);
        assert!(out.contains(&line("b", "Succeeded")) && !out.contains("name=\"a\""), "{out}");
        assert_eq!(out.matches("kopiur_resource_phase{").count(), 1, "{out}");
    }

    #[test]
    fn completions_count_transitions_once_after_the_start() {
        let mut seen = BTreeSet::new();
        let since = chrono::DateTime::parse_from_rfc3339("2026-01-01T01:30:00Z").unwrap().timestamp();
        let old = ended("old", "p", "Succeeded", "2026-01-01T01:00:00Z");
        assert!(new_completions(&mut seen, std::slice::from_ref(&old), since).is_empty(), "history is not counted");
        let running = snap("new", "p", json!({"phase": "Running"}));
        assert!(new_completions(&mut seen, &[old.clone(), running], since).is_empty());
        let done = ended("new", "p", "Failed", "2026-01-01T02:00:00Z");
        let got = new_completions(&mut seen, &[old.clone(), done.clone()], since);
        assert_eq!(got, vec![["t".to_string(), "p".to_string(), "failed".to_string()]]);
        assert!(new_completions(&mut seen, &[old, done], since).is_empty(), "counted once");
        assert!(new_completions(&mut seen, &[], since).is_empty());
        assert!(seen.is_empty(), "deleted Snapshots are forgotten");
    }
}
