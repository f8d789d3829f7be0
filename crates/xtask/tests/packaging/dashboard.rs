//! deploy/dashboards/kopiur.json: parses, is templated on a Prometheus data source, and
//! queries only the metrics of docs/design/observability.md §10.1.
use std::collections::BTreeSet;

use serde_json::Value;

use super::promql::metric_names;

/// docs/design/observability.md §10.1, every exported metric name (histograms expand to their series).
const SPEC_METRICS: &[&str] = &[
    "kopiur_controller_reconciliations_total",
    "kopiur_controller_reconcile_errors_total",
    "kopiur_controller_reconcile_duration_seconds",
    "kopiur_kube_client_requests_total",
    "kopiur_mover_jobs_created_total",
    "kopiur_resource_phase",
    "kopiur_snapshots_completed_total",
    "kopiur_snapshot_last_success_timestamp_seconds",
    "kopiur_snapshot_size_bytes",
    "kopiur_snapshot_duration_seconds",
    "kopiur_policy_last_backup_success_timestamp_seconds",
    "kopiur_snapshotpolicy_last_backup_success",
    "kopiur_snapshot_consecutive_failures",
    "kopiur_snapshot_gated",
    "kopiur_staging_left",
    "kopiur_snapshot_refusals_total",
    "kopiur_schedule_snapshots_created_total",
    "kopiur_schedule_slots_skipped_total",
    "kopiur_snapshot_deletions_pending_external",
    "kopiur_snapshot_deletions_held",
    "kopiur_snapshot_deletions_total",
    "kopiur_snapshot_deletion_batches_total",
    "kopiur_snapshot_deletion_failures_total",
    "kopiur_repository_health_probe_failures_total",
    "kopiur_repository_breaker_trips_total",
    "kopiur_repository_consecutive_backend_failures",
    "kopiur_repository_breaker_open_since_timestamp_seconds",
    "kopiur_repository_strict_retry_holdoff_seconds",
    "kopiur_repository_maintenance_configured",
    "kopiur_repo_snapshot_count",
    "kopiur_repo_discovered_snapshots",
    "kopiur_repo_index_blobs",
    "kopiur_restore_duration_seconds",
    "kopiur_maintenance_runs_total",
    "kopiur_replication_runs_total",
    "kopiur_leader",
    "kopiur_leader_transitions_total",
    "kopiur_leader_renew_failures_total",
    "kopiur_process_resident_memory_bytes",
];
const SPEC_HISTOGRAMS: &[&str] = &["kopiur_controller_reconcile_duration_seconds"];
/// kopiur's own metrics beyond that list, each documented in docs/controller.md.
const OWN_METRICS: &[&str] = &["kopiur_repository_endpoint_checks_total"];

pub fn spec_series_names() -> BTreeSet<String> {
    let mut s: BTreeSet<String> = SPEC_METRICS.iter().chain(OWN_METRICS).map(|m| m.to_string()).collect();
    for h in SPEC_HISTOGRAMS {
        for suffix in ["_bucket", "_sum", "_count"] {
            s.insert(format!("{h}{suffix}"));
        }
    }
    s
}

fn dashboard() -> Value {
    serde_json::from_str(&super::read("deploy/dashboards/kopiur.json")).expect("kopiur.json is valid JSON")
}

/// Every panel, including those nested in collapsed rows.
fn panels(d: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    let mut stack: Vec<&Value> = d["panels"].as_array().expect("panels").iter().collect();
    while let Some(p) = stack.pop() {
        if let Some(inner) = p["panels"].as_array() {
            stack.extend(inner);
        }
        out.push(p);
    }
    out
}

/// (panel title, expr) of every query, plus the metric selectors of the template variables.
fn queries(d: &Value) -> Vec<(String, String)> {
    let mut q = Vec::new();
    for p in panels(d) {
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().unwrap_or_else(|| panic!("panel {:?}: a target without expr", p["title"]));
            q.push((p["title"].as_str().unwrap_or("").to_string(), expr.to_string()));
        }
    }
    for v in d["templating"]["list"].as_array().expect("templating.list") {
        if v["type"] != "query" {
            continue;
        }
        let def = v["definition"].as_str().or(v["query"]["query"].as_str()).expect("query variable definition");
        let inner = def
            .strip_prefix("label_values(")
            .and_then(|r| r.split_once(','))
            .map(|(m, _)| m.trim().to_string())
            .unwrap_or_else(|| def.to_string());
        q.push((format!("variable {}", v["name"]), inner));
    }
    q
}

#[test]
fn dashboard_is_templated_on_a_prometheus_datasource() {
    let d = dashboard();
    assert!(d["schemaVersion"].as_i64().unwrap_or(0) >= 36, "schemaVersion must be >= 36");
    let vars = d["templating"]["list"].as_array().expect("templating.list");
    let ds = vars.iter().find(|v| v["type"] == "datasource").expect("a datasource template variable");
    assert_eq!(ds["query"], "prometheus");
    let ds_ref = format!("${{{}}}", ds["name"].as_str().unwrap());
    for p in panels(&d).into_iter().filter(|p| p["type"] != "row") {
        assert_eq!(
            p["datasource"]["uid"],
            ds_ref.as_str(),
            "panel {:?} must use the templated data source",
            p["title"]
        );
        for t in p["targets"].as_array().expect("targets") {
            assert_eq!(t["datasource"]["uid"], ds_ref.as_str(), "panel {:?}: target data source", p["title"]);
        }
    }
    let ids: Vec<i64> = panels(&d).iter().map(|p| p["id"].as_i64().expect("panel id")).collect();
    let unique: BTreeSet<i64> = ids.iter().copied().collect();
    assert_eq!(ids.len(), unique.len(), "panel ids must be unique");
}

#[test]
fn dashboard_queries_use_only_spec_metrics() {
    let d = dashboard();
    let allowed = spec_series_names();
    let qs = queries(&d);
    assert!(qs.len() > 20, "expected a full dashboard, found {} queries", qs.len());
    let mut used = BTreeSet::new();
    for (title, expr) in &qs {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{title}: `{expr}` selects no metric");
        for n in names {
            assert!(
                allowed.contains(&n),
                "{title}: `{n}` is not a metric of docs/design/observability.md §10.1 (in `{expr}`)"
            );
            used.insert(n);
        }
    }
    // The panels the issue asks for: breaker state, trips, gating, held deletions, backup age
    // and success per policy, reconcile errors, Jobs per op.
    for needed in [
        "kopiur_resource_phase",
        "kopiur_repository_breaker_open_since_timestamp_seconds",
        "kopiur_repository_consecutive_backend_failures",
        "kopiur_repository_breaker_trips_total",
        "kopiur_snapshot_gated",
        "kopiur_snapshot_deletions_held",
        "kopiur_snapshot_deletions_pending_external",
        "kopiur_policy_last_backup_success_timestamp_seconds",
        "kopiur_snapshotpolicy_last_backup_success",
        "kopiur_controller_reconcile_errors_total",
        "kopiur_mover_jobs_created_total",
        "kopiur_repository_endpoint_checks_total",
    ] {
        assert!(used.contains(needed), "no dashboard panel queries {needed}");
    }
}
