//! Prometheus metrics, served in the text exposition format 0.0.4. The registry and the
//! exposition are prometheus-client's (`Registry`, `prometheus_text::encode`): it writes the
//! names, `# HELP`/`# TYPE`, the label escaping and the values. Counters live here; gauges
//! about objects are computed from the reflector stores, so a deleted object's series disappear.
//!
//! Every family is typed by its label set, a struct of [`labels`] with
//! `#[derive(EncodeLabelSet)]`: a call site passes a struct with named fields, never a
//! positional slice. A counter is registered under its exposed name less `_total` (the encoder
//! adds it back: `kopiur_mover_jobs_created_total` stays exactly that), its help less the final
//! `.` (the registry adds it back). Families, in `family.rs`: [`Counter`] and
//! [`HistogramFamily`] are prometheus-client's `Family`; a store-backed gauge is a
//! [`GaugeFamily`], a prometheus-client `EncodeMetric` over a series set its owner swaps whole
//! (`family.rs` says why not the library's `Family<L, Gauge>`). The families read at scrape
//! time are prometheus-client `Collector`s rather than held series, in `scrape.rs` (it says
//! why). Every family has a `# HELP` line (the library writes one for each).
//!
//! Adding a metric: a field of [`Metrics`] of type `Counter<L>` or `GaugeFamily<L>` (`L` a
//! label struct of [`labels`], or `NoLabels`), created with its name and help in
//! `Metrics::default` at its place in the exposition (registration order is exposition
//! order; a business gauge in the leader's registry), and its name in [`metric_names`].
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

mod family;
pub mod labels;
mod scrape;

pub use family::{Counter, GaugeFamily, HistogramFamily, Labels};
use labels::*;
pub use scrape::LiveSeries;

/// The buckets of `kopiur_controller_reconcile_duration_seconds` (and `+Inf`).
const BUCKETS: [f64; 8] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 10.0];

pub struct Metrics {
    pub reconciliations: Counter<KindLabels>,
    pub reconcile_errors: Counter<ErrorLabels>,
    pub jobs_created: Counter<JobLabels>,
    pub breaker_trips: Counter<TripLabels>,
    pub probe_failures: Counter<RepoOutcomeLabels>,
    /// The controller's cheap endpoint checks of a repository whose breaker is open.
    pub endpoint_checks: Counter<RepoOutcomeLabels>,
    pub leader_transitions: Counter<NoLabels>,
    pub leader_renew_failures: Counter<NoLabels>,
    pub deletion_failures: Counter<DeletionFailureLabels>,
    pub deletions: Counter<DeletionLabels>,
    pub deletion_batches: Counter<RepoOutcomeLabels>,
    /// Every apiserver call (`client_metrics.rs`).
    pub kube_requests: Counter<KubeRequestLabels>,
    pub schedule_snapshots_created: Counter<ScheduleLabels>,
    pub schedule_slots_skipped: Counter<ReasonLabels>,
    pub snapshot_refusals: Counter<ReasonLabels>,
    pub staging: Counter<StagingLabels>,
    pub staging_wait_seconds: Counter<StagingMethodLabels>,
    pub populates: Counter<PopulateLabels>,
    pub maintenance_runs: Counter<MaintenanceRunLabels>,
    pub replication_runs: Counter<ReplicationRunLabels>,
    /// Terminal Snapshot transitions seen in the store, by result.
    pub snapshots_completed: Counter<CompletionLabels>,
    /// 1 while this replica holds the Lease: it alone exports the business gauges.
    pub leader: Gauge,
    reconcile_duration: HistogramFamily<KindLabels>,
    /// ADR-0006: held external deletions per repository.
    pub deletions_held: GaugeFamily<RepoLabels>,
    /// ADR-0006: the breaker's inclusive pending-external count per repository.
    pub deletions_pending_external: GaugeFamily<RepoLabels>,
    /// Parked run-path Snapshots (Pending, Ready reason RepositoryNotReady) per policy; absent at 0.
    pub snapshot_gated: GaugeFamily<GatedLabels>,
    /// Snapshots whose staged objects outlived the release bound (`Staging=True /
    /// ReleaseStuck`), 1 each; absent once they are gone.
    pub staging_left: GaugeFamily<StagingLeftLabels>,
    /// Per Snapshot (`snapshot::gauges`): size, duration and end time of a Succeeded run.
    pub snapshot_size_bytes: GaugeFamily<SnapshotLabels>,
    pub snapshot_duration_seconds: GaugeFamily<SnapshotLabels>,
    pub snapshot_last_success: GaugeFamily<SnapshotLabels>,
    /// Per policy and repository (`snapshot::gauges`).
    pub policy_last_success_timestamp: GaugeFamily<PolicyRepoLabels>,
    pub policy_last_backup_success: GaugeFamily<PolicyRepoLabels>,
    pub snapshot_consecutive_failures: GaugeFamily<PolicyRepoLabels>,
    /// Repository listing and maintenance gauges (`snapshot::gauges`).
    pub repo_snapshot_count: GaugeFamily<RepoLabels>,
    pub repo_discovered_snapshots: GaugeFamily<RepoLabels>,
    pub repo_index_blobs: GaugeFamily<RepoLabels>,
    pub repository_maintenance_configured: GaugeFamily<RepoLabels>,
    pub restore_duration_seconds: GaugeFamily<RestoreLabels>,
    /// `kopiur_resource_phase` of every kind but the repositories (`resource_phase.rs`),
    /// keyed (kind, namespace, name, phase); each kind replaces its own slice. Written at scrape
    /// time with the repositories' and the live kinds' series (`scrape.rs`).
    pub resource_phase: GaugeFamily<PhaseLabels>,
    /// Kinds whose `kopiur_resource_phase` series are written at scrape time from their store
    /// ([`Metrics::resource_phase_live`]), by kind.
    resource_phase_live: scrape::LiveKinds,
    /// Every replica's families: the counters, `kopiur_leader`, the duration histogram and the
    /// process memory.
    registry: Registry,
    /// The business gauges, exported by the leader only (a passive replica's stores are not
    /// authoritative).
    leader_registry: Registry,
    /// The length of the last rendering, so the next one is allocated once.
    last_render_len: AtomicUsize,
}

/// `metric` registered in `r` under `name`, its exposed name (a counter's ends in `_total`,
/// which the encoder adds back), with `help` (the registry adds back its final `.`).
fn registered<M: Metric + Clone>(r: &mut Registry, name: &str, help: &str, metric: M) -> M {
    let name =
        if metric.metric_type() == MetricType::Counter { name.strip_suffix("_total").unwrap_or(name) } else { name };
    r.register(name, help.strip_suffix('.').unwrap_or(help), metric.clone());
    metric
}

fn counter<L: Labels>(r: &mut Registry, name: &str, help: &str) -> Counter<L> {
    registered(r, name, help, Counter::default())
}

fn gauge<L: Labels + Ord>(r: &mut Registry, name: &str, help: &str) -> GaugeFamily<L> {
    registered(r, name, help, GaugeFamily::default())
}

fn duration_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

impl Default for Metrics {
    fn default() -> Self {
        // Every replica's families (`r`) and the leader's (`l`). The fields are evaluated in the
        // order written: registration order is exposition order.
        let (mut r, mut l) = (Registry::default(), Registry::default());
        r.register_collector(Box::new(scrape::ProcessMemory));
        Metrics {
            reconciliations: counter(&mut r, "kopiur_controller_reconciliations_total", "Reconciliations."),
            reconcile_errors: counter(
                &mut r,
                "kopiur_controller_reconcile_errors_total",
                "Failed reconciliations by error class.",
            ),
            jobs_created: counter(&mut r, "kopiur_mover_jobs_created_total", "Mover Jobs created."),
            breaker_trips: counter(
                &mut r,
                "kopiur_repository_breaker_trips_total",
                "Transitions of a repository into Degraded.",
            ),
            probe_failures: counter(&mut r, "kopiur_repository_health_probe_failures_total", "Failed probe connects."),
            endpoint_checks: counter(
                &mut r,
                "kopiur_repository_endpoint_checks_total",
                "Cheap endpoint checks of a repository whose breaker is open, by outcome (answers, down).",
            ),
            leader_transitions: counter(&mut r, "kopiur_leader_transitions_total", "Leadership acquisitions."),
            leader_renew_failures: counter(&mut r, "kopiur_leader_renew_failures_total", "Failed Lease renewals."),
            deletion_failures: counter(
                &mut r,
                "kopiur_snapshot_deletion_failures_total",
                "Members of failed batch delete Jobs.",
            ),
            deletions: counter(&mut r, "kopiur_snapshot_deletions_total", "Snapshot finalizers released, by outcome."),
            deletion_batches: counter(
                &mut r,
                "kopiur_snapshot_deletion_batches_total",
                "Terminal batch delete Jobs, counted once each.",
            ),
            kube_requests: counter(
                &mut r,
                "kopiur_kube_client_requests_total",
                "Kubernetes API requests by verb, API group, resource and client.",
            ),
            schedule_snapshots_created: counter(
                &mut r,
                "kopiur_schedule_snapshots_created_total",
                "Snapshots created by a SnapshotSchedule.",
            ),
            schedule_slots_skipped: counter(
                &mut r,
                "kopiur_schedule_slots_skipped_total",
                "Schedule slots skipped, by reason (expired, active_run, suspended).",
            ),
            snapshot_refusals: counter(
                &mut r,
                "kopiur_snapshot_refusals_total",
                "Snapshots refused by the controller (terminal without a Job), by reason.",
            ),
            staging: counter(
                &mut r,
                "kopiur_staging_total",
                "CSI staging of backups (copyMethod Snapshot or Clone), by outcome: staged (the copy is ready), failed (timeout or refusal), released (its objects gone), leaked (its objects still there past the release bound; kopiur keeps releasing them, and counts released once they go). kopiur_staging_left has what is left now.",
            ),
            staging_wait_seconds: counter(
                &mut r,
                "kopiur_staging_wait_seconds_total",
                "Whole seconds backups waited for their staged copy (from the gate to the staged PVC), by copy method.",
            ),
            populates: counter(
                &mut r,
                "kopiur_restore_populates_total",
                "Populator Restores (target.populator) finished, by outcome: populated (the claim is bound to the restored volume), already_bound (the claim was bound before: nothing written), failed (the prime discarded).",
            ),
            maintenance_runs: counter(
                &mut r,
                "kopiur_maintenance_runs_total",
                "Finished maintenance runs by mode and outcome (succeeded, failed, yielded).",
            ),
            replication_runs: counter(
                &mut r,
                "kopiur_replication_runs_total",
                "Finished replication runs by kind, trigger (cron, requested) and outcome.",
            ),
            snapshots_completed: counter(
                &mut r,
                "kopiur_snapshots_completed_total",
                "Snapshot runs that reached a terminal phase.",
            ),
            leader: registered(
                &mut r,
                "kopiur_leader",
                "1 while this replica holds the leader Lease, else 0.",
                Gauge::default(),
            ),
            reconcile_duration: registered(
                &mut r,
                "kopiur_controller_reconcile_duration_seconds",
                "Reconcile duration by kind.",
                HistogramFamily::new(duration_histogram),
            ),
            deletions_held: gauge(
                &mut l,
                "kopiur_snapshot_deletions_held",
                "External Snapshot deletions held by the mass-deletion breaker.",
            ),
            deletions_pending_external: gauge(
                &mut l,
                "kopiur_snapshot_deletions_pending_external",
                "Pending external destructive Snapshot deletions counted by the mass-deletion breaker.",
            ),
            snapshot_gated: gauge(
                &mut l,
                "kopiur_snapshot_gated",
                "Snapshots parked on a repository that is not Ready.",
            ),
            staging_left: gauge(
                &mut l,
                "kopiur_staging_left",
                "Finished backups whose staged PVC, VolumeSnapshot or VolumeSnapshotContent is still there past the release bound (Staging=True, reason ReleaseStuck): 1 per Snapshot, absent once they are gone.",
            ),
            snapshot_size_bytes: gauge(&mut l, "kopiur_snapshot_size_bytes", "Size of a Succeeded Snapshot."),
            snapshot_duration_seconds: gauge(
                &mut l,
                "kopiur_snapshot_duration_seconds",
                "Duration of a terminal Snapshot run.",
            ),
            snapshot_last_success: gauge(
                &mut l,
                "kopiur_snapshot_last_success_timestamp_seconds",
                "End time of a Succeeded Snapshot.",
            ),
            policy_last_success_timestamp: gauge(
                &mut l,
                "kopiur_policy_last_backup_success_timestamp_seconds",
                "End time of the newest Succeeded run of a policy on a repository.",
            ),
            policy_last_backup_success: gauge(
                &mut l,
                "kopiur_snapshotpolicy_last_backup_success",
                "1 if the latest terminal run of a policy on a repository succeeded or was unchanged, else 0.",
            ),
            snapshot_consecutive_failures: gauge(
                &mut l,
                "kopiur_snapshot_consecutive_failures",
                "Trailing Failed runs of a policy on a repository.",
            ),
            repo_snapshot_count: gauge(
                &mut l,
                "kopiur_repo_snapshot_count",
                "Snapshots in the repository at the last listing.",
            ),
            repo_discovered_snapshots: gauge(
                &mut l,
                "kopiur_repo_discovered_snapshots",
                "Discovered (catalog) snapshots at the last listing.",
            ),
            repo_index_blobs: gauge(&mut l, "kopiur_repo_index_blobs", "Index blobs at the last listing."),
            repository_maintenance_configured: gauge(
                &mut l,
                "kopiur_repository_maintenance_configured",
                "1 if the repository's maintenance is configured, else 0.",
            ),
            restore_duration_seconds: gauge(
                &mut l,
                "kopiur_restore_duration_seconds",
                "Duration of a finished Restore.",
            ),
            resource_phase: GaugeFamily::default(),
            resource_phase_live: Arc::new(Mutex::new(BTreeMap::new())),
            registry: r,
            leader_registry: l,
            last_render_len: AtomicUsize::new(0),
        }
    }
}

/// Every metric family the controller renders on `/metrics` (the leader's full set). The
/// dashboard and the alert rules may only use these (checked by a unit test); a test also
/// checks that this list equals the families `render` emits.
pub fn metric_names() -> Vec<&'static str> {
    vec![
        "kopiur_controller_reconciliations_total",
        "kopiur_controller_reconcile_errors_total",
        "kopiur_controller_reconcile_duration_seconds",
        "kopiur_mover_jobs_created_total",
        "kopiur_repository_breaker_trips_total",
        "kopiur_repository_health_probe_failures_total",
        "kopiur_repository_endpoint_checks_total",
        "kopiur_leader",
        "kopiur_leader_transitions_total",
        "kopiur_leader_renew_failures_total",
        "kopiur_process_resident_memory_bytes",
        "kopiur_snapshot_deletion_failures_total",
        "kopiur_snapshot_deletions_total",
        "kopiur_snapshot_deletion_batches_total",
        "kopiur_kube_client_requests_total",
        "kopiur_schedule_snapshots_created_total",
        "kopiur_schedule_slots_skipped_total",
        "kopiur_snapshot_refusals_total",
        "kopiur_staging_total",
        "kopiur_staging_wait_seconds_total",
        "kopiur_restore_populates_total",
        "kopiur_maintenance_runs_total",
        "kopiur_replication_runs_total",
        "kopiur_snapshot_deletions_held",
        "kopiur_snapshot_deletions_pending_external",
        "kopiur_snapshots_completed_total",
        "kopiur_snapshot_gated",
        "kopiur_staging_left",
        "kopiur_snapshot_size_bytes",
        "kopiur_snapshot_duration_seconds",
        "kopiur_snapshot_last_success_timestamp_seconds",
        "kopiur_policy_last_backup_success_timestamp_seconds",
        "kopiur_snapshotpolicy_last_backup_success",
        "kopiur_snapshot_consecutive_failures",
        "kopiur_repo_snapshot_count",
        "kopiur_repo_discovered_snapshots",
        "kopiur_repo_index_blobs",
        "kopiur_repository_maintenance_configured",
        "kopiur_restore_duration_seconds",
        "kopiur_resource_phase",
        "kopiur_repository_consecutive_backend_failures",
        "kopiur_repository_breaker_open_since_timestamp_seconds",
        "kopiur_repository_strict_retry_holdoff_seconds",
    ]
}

/// One repository's store-backed gauge inputs.
#[derive(Clone, Debug)]
pub struct RepoGauge {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub phase: Option<String>,
    pub streak: Option<i64>,
    pub open_since: Option<i64>,
    pub holdoff: Option<i64>,
}

impl Metrics {
    /// Writes kind `kind`'s `kopiur_resource_phase` series with `rows` at every scrape from now
    /// on (it reads the kind's store then), instead of a held slice of [`Metrics::resource_phase`];
    /// the kind's held slice is dropped.
    pub fn resource_phase_live(&self, kind: &'static str, rows: LiveSeries) {
        self.resource_phase.replace_where(|l| l.kind == kind, BTreeMap::new());
        if let Ok(mut m) = self.resource_phase_live.lock() {
            m.insert(kind, rows);
        }
    }

    /// One reconcile's duration, in `kopiur_controller_reconcile_duration_seconds{kind}`.
    pub fn observe_duration(&self, labels: KindLabels, secs: f64) {
        self.reconcile_duration.observe(labels, secs);
    }

    /// The exposition: every replica's families, then, on the leader, the business gauges and
    /// the families read from the stores now (`repos`: the repositories').
    pub fn render(&self, repos: &[RepoGauge]) -> String {
        // One allocation of about the last size instead of doubling through a large text.
        let last = self.last_render_len.load(Ordering::Relaxed);
        let mut out = String::with_capacity(last + last / 16 + 4096);
        // Writing to a String cannot fail.
        let _ = prometheus_text::encode(&mut out, &self.registry);
        if self.leader.get() != 0 {
            let _ = prometheus_text::encode(&mut out, &self.leader_registry);
            let mut now = Registry::default();
            now.register_collector(Box::new(scrape::StoreFamilies {
                repos: repos.to_vec(),
                held: self.resource_phase.clone(),
                live: self.resource_phase_live.clone(),
            }));
            let _ = prometheus_text::encode(&mut out, &now);
        }
        self.last_render_len.store(out.len(), Ordering::Relaxed);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(kind: &str) -> KindLabels {
        KindLabels { kind: kind.into() }
    }

    /// The `kopiur_*` metric names in `text`, with histogram suffixes stripped when the base
    /// name is a known family.
    fn referenced(text: &str, known: &std::collections::BTreeSet<&str>) -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = text;
        while let Some(i) = rest.find("kopiur_") {
            let before_ok = i == 0 || !rest.as_bytes()[i - 1].is_ascii_alphanumeric() && rest.as_bytes()[i - 1] != b'_';
            let tail = &rest[i..];
            let end =
                tail.find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')).unwrap_or(tail.len());
            let name = &tail[..end];
            if before_ok {
                let base = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|suf| name.strip_suffix(suf).filter(|b| known.contains(b)))
                    .unwrap_or(name);
                out.push(base.to_string());
            }
            rest = &tail[end.max(1)..];
        }
        out
    }

    fn strings(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::String(s) => out.push(s.clone()),
            serde_json::Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
            serde_json::Value::Object(o) => o.values().for_each(|x| strings(x, out)),
            serde_json::Value::Null | serde_json::Value::Bool(_) | serde_json::Value::Number(_) => {}
        }
    }

    #[test]
    fn metric_names_lists_exactly_what_render_emits() {
        let m = Metrics::default();
        m.leader.set(1);
        m.observe_duration(kind("Repository"), 0.2);
        let out = m.render(&[]);
        let rendered: std::collections::BTreeSet<&str> =
            out.lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|l| l.split_whitespace().next()).collect();
        let listed: std::collections::BTreeSet<&str> = metric_names().into_iter().collect();
        assert_eq!(rendered, listed);
    }

    #[test]
    fn dashboard_and_rules_use_only_exported_metrics() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let known: std::collections::BTreeSet<&str> = metric_names().into_iter().collect();
        let mut used: Vec<(String, String)> = Vec::new();
        for dash in ["deploy/dashboards/kopiur.json", "deploy/helm/kopiur/dashboards/kopiur.json"] {
            let text = std::fs::read_to_string(root.join(dash)).unwrap();
            let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{dash} parses: {e}"));
            let mut all = Vec::new();
            strings(&v, &mut all);
            let n = all.iter().flat_map(|s| referenced(s, &known)).map(|m| used.push((dash.into(), m))).count();
            assert!(n > 20, "{dash} queries kopiur metrics ({n})");
        }
        for rules in ["deploy/prometheus/kopiur-rules.yaml", "deploy/helm/kopiur/prometheus/kopiur-rules.yaml"] {
            let text = std::fs::read_to_string(root.join(rules)).unwrap();
            let v: serde_json::Value = serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{rules} parses: {e}"));
            let mut exprs = Vec::new();
            for g in v["groups"].as_array().expect("rule groups") {
                for r in g["rules"].as_array().expect("rules") {
                    exprs.push(r["expr"].as_str().expect("expr").to_string());
                }
            }
            assert!(exprs.len() >= 10, "{rules}: every alert of docs/design/observability.md §10.3");
            for e in &exprs {
                used.extend(referenced(e, &known).into_iter().map(|m| (rules.to_string(), m)));
            }
        }
        let unknown: Vec<&(String, String)> = used.iter().filter(|(_, m)| !known.contains(m.as_str())).collect();
        assert!(unknown.is_empty(), "metrics used but not exported by the controller: {unknown:?}");
    }

    fn g(phase: &str, streak: Option<i64>, open: Option<i64>) -> RepoGauge {
        RepoGauge {
            kind: "Repository",
            namespace: "t".into(),
            name: "r".into(),
            phase: Some(phase.into()),
            streak,
            open_since: open,
            holdoff: open.map(|_| 120),
        }
    }

    #[test]
    fn open_since_only_while_open_and_streak_zero_is_visible() {
        let m = Metrics::default();
        m.leader.set(1);
        let open = m.render(&[g("Degraded", Some(3), Some(1_700_000_000))]);
        assert!(open.contains("kopiur_repository_breaker_open_since_timestamp_seconds{kind=\"Repository\",namespace=\"t\",name=\"r\"} 1700000000"));
        assert!(
            open.contains("kopiur_resource_phase{kind=\"Repository\",namespace=\"t\",name=\"r\",phase=\"Degraded\"} 1")
        );
        let closed = m.render(&[g("Ready", Some(0), None)]);
        assert!(!closed.contains("kopiur_repository_breaker_open_since_timestamp_seconds{"));
        assert!(closed.contains(
            "kopiur_repository_consecutive_backend_failures{kind=\"Repository\",namespace=\"t\",name=\"r\"} 0"
        ));
    }

    #[test]
    fn counters_render_with_labels_and_passive_replica_hides_business_gauges() {
        let m = Metrics::default();
        let trip = TripLabels {
            kind: "Repository".into(),
            namespace: "t".into(),
            name: "r".into(),
            probe_kind: "probe".into(),
        };
        m.breaker_trips.inc(trip.clone());
        m.breaker_trips.inc(trip.clone());
        assert_eq!(m.breaker_trips.get(&trip), 2);
        let out = m.render(&[g("Ready", Some(0), None)]);
        assert!(out.contains("kopiur_repository_breaker_trips_total{kind=\"Repository\",namespace=\"t\",name=\"r\",probe_kind=\"probe\"} 2"));
        assert!(!out.contains("kopiur_resource_phase{"));
        assert!(out.contains("kopiur_leader 0"));
    }

    /// Every family with a representative set of series, with the process memory lines left
    /// out (they read `/proc`). The expected text is the hand-written registry's (taken before
    /// the exposition moved to prometheus-client) plus the `# HELP` line the library writes for
    /// every family, seven of which had none: names, help, label order, escaping and values
    /// stay as they were.
    fn golden_registry() -> (Metrics, Vec<RepoGauge>) {
        let m = Metrics::default();
        m.leader.set(1);
        m.reconciliations.inc(kind("Snapshot"));
        m.reconciliations.inc(kind("Repository"));
        m.reconciliations.inc(kind("Snapshot"));
        m.reconcile_errors.inc(ErrorLabels { kind: "Repository".into(), class: "transient".into() });
        m.jobs_created.inc(JobLabels { op: "backup".into(), namespace: "ns-b".into() });
        m.jobs_created.inc(JobLabels { op: "backup".into(), namespace: "ns-a".into() });
        m.breaker_trips.inc(TripLabels {
            kind: "Repository".into(),
            namespace: "t".into(),
            name: "r\"q\\x\ny".into(),
            probe_kind: "probe".into(),
        });
        let outcome = |kind: &str, namespace: &str, name: &str, outcome: &str| RepoOutcomeLabels {
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
            outcome: outcome.into(),
        };
        m.probe_failures.inc(outcome("ClusterRepository", "", "c", "timeout"));
        m.endpoint_checks.inc(outcome("Repository", "t", "r", "down"));
        m.leader_transitions.inc(NoLabels);
        m.leader_renew_failures.inc(NoLabels);
        m.leader_renew_failures.inc(NoLabels);
        m.deletion_failures.inc(DeletionFailureLabels { namespace: "t".into() });
        m.deletions.inc(DeletionLabels { namespace: "t".into(), outcome: "released".into() });
        m.deletion_batches.inc(outcome("Repository", "t", "r", "failed"));
        let request = |verb: &str, group: &str, kind: &str, client: &str| KubeRequestLabels {
            verb: verb.into(),
            group: group.into(),
            kind: kind.into(),
            client: client.into(),
        };
        m.kube_requests.inc(request("get", "kopiur.home-operations.com", "snapshots", "main"));
        m.kube_requests.inc(request("list", "", "pods", "election"));
        m.schedule_snapshots_created.inc(ScheduleLabels { namespace: "t".into(), name: "h".into() });
        let reason =
            |name: &str, reason: &str| ReasonLabels { namespace: "t".into(), name: name.into(), reason: reason.into() };
        m.schedule_slots_skipped.inc(reason("h", "expired"));
        m.snapshot_refusals.inc(reason("s", "InvalidSpec"));
        m.staging.inc(StagingLabels { namespace: "t".into(), method: "Snapshot".into(), outcome: "staged".into() });
        m.staging_wait_seconds.add(StagingMethodLabels { namespace: "t".into(), method: "Snapshot".into() }, 3);
        m.populates.inc(PopulateLabels { namespace: "t".into(), outcome: "populated".into() });
        m.maintenance_runs.inc(MaintenanceRunLabels {
            namespace: "t".into(),
            name: "m".into(),
            mode: "full".into(),
            outcome: "succeeded".into(),
        });
        m.replication_runs.inc(ReplicationRunLabels {
            kind: "RepositoryReplication".into(),
            trigger: "cron".into(),
            outcome: "failed".into(),
        });
        let done = |namespace: &str, policy: &str, result: &str| CompletionLabels {
            namespace: namespace.into(),
            policy: policy.into(),
            result: result.into(),
        };
        m.snapshots_completed.inc(done("a b", "p", "failed"));
        m.snapshots_completed.inc(done("a", "z", "failed"));
        m.snapshots_completed.inc(done("t", "p", "succeeded"));
        m.observe_duration(kind("Repository"), 0.2);
        m.observe_duration(kind("Repository"), 20.0);
        m.observe_duration(kind("Snapshot"), 0.01);
        let repo = |kind: &str, namespace: &str, name: &str| RepoLabels {
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
        };
        let snap = |namespace: &str, name: &str, policy: &str| SnapshotLabels {
            namespace: namespace.into(),
            name: name.into(),
            policy: policy.into(),
        };
        let policy = |namespace: &str, policy: &str, repository: &str| PolicyRepoLabels {
            namespace: namespace.into(),
            policy: policy.into(),
            repository: repository.into(),
        };
        let phase = |kind: &'static str, namespace: &str, name: &str, phase: &str| PhaseLabels {
            kind,
            namespace: namespace.into(),
            name: name.into(),
            phase: phase.into(),
        };
        m.deletions_held
            .replace(BTreeMap::from([(repo("Repository", "t", "r"), 2), (repo("ClusterRepository", "", "c"), 1)]));
        m.deletions_pending_external.replace(BTreeMap::from([(repo("Repository", "t", "r"), 5)]));
        m.snapshot_gated.replace(BTreeMap::from([(GatedLabels { namespace: "t".into(), policy: "p".into() }, 3)]));
        m.staging_left.replace(BTreeMap::from([(StagingLeftLabels { namespace: "t".into(), name: "s2".into() }, 1)]));
        m.snapshot_size_bytes.replace(BTreeMap::from([(snap("t", "s1", "p"), 42)]));
        m.snapshot_duration_seconds.replace(BTreeMap::from([
            (snap("t", "s1", "p"), 7),
            (snap("a b", "s", "p"), 1),
            (snap("a", "z", "p"), 2),
        ]));
        m.snapshot_last_success.replace(BTreeMap::from([(snap("t", "s1", "p"), 1_700_000_000)]));
        m.policy_last_success_timestamp.replace(BTreeMap::from([(policy("t", "p", "r"), 1_700_000_000)]));
        m.policy_last_backup_success.replace(BTreeMap::from([(policy("t", "p", "r"), 1)]));
        m.snapshot_consecutive_failures.replace(BTreeMap::from([(policy("t", "p", "r"), 0)]));
        m.repo_snapshot_count.replace(BTreeMap::from([(repo("Repository", "t", "r"), 5)]));
        m.repo_discovered_snapshots.replace(BTreeMap::from([(repo("Repository", "t", "r"), 2)]));
        m.repo_index_blobs.replace(BTreeMap::from([(repo("ClusterRepository", "", "c"), 12)]));
        m.repository_maintenance_configured.replace(BTreeMap::from([(repo("Repository", "t", "r"), 0)]));
        m.restore_duration_seconds
            .replace(BTreeMap::from([(RestoreLabels { namespace: "t".into(), name: "back".into() }, 9)]));
        let slice = |kind: &'static str| move |l: &PhaseLabels| l.kind == kind;
        m.resource_phase.replace_where(slice("Restore"), BTreeMap::from([(phase("Restore", "t", "x", "Failed"), 1)]));
        m.resource_phase
            .replace_where(slice("SnapshotPolicy"), BTreeMap::from([(phase("SnapshotPolicy", "t", "p", "Ready"), 1)]));
        // The kind's slice is replaced, the other kinds' stay.
        m.resource_phase
            .replace_where(slice("Restore"), BTreeMap::from([(phase("Restore", "t", "y", "Completed"), 1)]));
        let row = |kind, name, phase| {
            move |emit: &mut dyn FnMut(PhaseRow<'_>)| {
                emit(PhaseRow { kind, namespace: "t", name, phase });
            }
        };
        m.resource_phase_live("Snapshot", Box::new(row("Snapshot", "s\"1", "Running")));
        m.resource_phase_live("Maintenance", Box::new(row("Maintenance", "m", "Ready")));
        let repos = vec![
            RepoGauge {
                kind: "Repository",
                namespace: "t".into(),
                name: "r\"q".into(),
                phase: Some("Degraded".into()),
                streak: Some(3),
                open_since: Some(1_700_000_000),
                holdoff: Some(120),
            },
            RepoGauge {
                kind: "ClusterRepository",
                namespace: String::new(),
                name: "c".into(),
                phase: Some("Ready".into()),
                streak: Some(0),
                open_since: None,
                holdoff: None,
            },
            RepoGauge {
                kind: "Repository",
                namespace: "t".into(),
                name: "new".into(),
                phase: None,
                streak: None,
                open_since: None,
                holdoff: None,
            },
        ];
        (m, repos)
    }

    fn without_process_memory(text: &str) -> String {
        text.lines().filter(|l| !l.contains("kopiur_process_resident_memory_bytes")).map(|l| format!("{l}\n")).collect()
    }

    /// `text` with the sample lines of each family sorted: the series of a counter family and of
    /// the histogram come in the family's (hash) order.
    fn sorted_within_families(text: &str) -> String {
        let mut out = Vec::new();
        let mut family: Vec<&str> = Vec::new();
        for l in text.lines() {
            if l.starts_with('#') {
                family.sort_unstable();
                out.append(&mut family);
                out.push(l);
            } else {
                family.push(l);
            }
        }
        family.sort_unstable();
        out.append(&mut family);
        out.iter().map(|l| format!("{l}\n")).collect()
    }

    #[test]
    fn exposition_is_the_golden_text() {
        let (m, repos) = golden_registry();
        let out = without_process_memory(&m.render(&repos));
        assert_eq!(sorted_within_families(&out), sorted_within_families(GOLDEN), "rendered:\n{out}");
        // The store-backed part is in a fixed order: each gauge family sorted by its labels,
        // `kopiur_resource_phase` by writer (repositories, held slices, live kinds).
        let leader = |t: &str| t[t.find("# HELP kopiur_snapshot_deletions_held").unwrap()..].to_string();
        assert_eq!(leader(&out), leader(GOLDEN));
        // A second rendering (sized from the first) is the same text.
        assert_eq!(sorted_within_families(&without_process_memory(&m.render(&repos))), sorted_within_families(GOLDEN));
    }

    const GOLDEN: &str = r##"# HELP kopiur_controller_reconciliations_total Reconciliations.
# TYPE kopiur_controller_reconciliations_total counter
kopiur_controller_reconciliations_total{kind="Repository"} 1
kopiur_controller_reconciliations_total{kind="Snapshot"} 2
# HELP kopiur_controller_reconcile_errors_total Failed reconciliations by error class.
# TYPE kopiur_controller_reconcile_errors_total counter
kopiur_controller_reconcile_errors_total{kind="Repository",class="transient"} 1
# HELP kopiur_mover_jobs_created_total Mover Jobs created.
# TYPE kopiur_mover_jobs_created_total counter
kopiur_mover_jobs_created_total{op="backup",namespace="ns-a"} 1
kopiur_mover_jobs_created_total{op="backup",namespace="ns-b"} 1
# HELP kopiur_repository_breaker_trips_total Transitions of a repository into Degraded.
# TYPE kopiur_repository_breaker_trips_total counter
kopiur_repository_breaker_trips_total{kind="Repository",namespace="t",name="r\"q\\x\ny",probe_kind="probe"} 1
# HELP kopiur_repository_health_probe_failures_total Failed probe connects.
# TYPE kopiur_repository_health_probe_failures_total counter
kopiur_repository_health_probe_failures_total{kind="ClusterRepository",namespace="",name="c",outcome="timeout"} 1
# HELP kopiur_repository_endpoint_checks_total Cheap endpoint checks of a repository whose breaker is open, by outcome (answers, down).
# TYPE kopiur_repository_endpoint_checks_total counter
kopiur_repository_endpoint_checks_total{kind="Repository",namespace="t",name="r",outcome="down"} 1
# HELP kopiur_leader_transitions_total Leadership acquisitions.
# TYPE kopiur_leader_transitions_total counter
kopiur_leader_transitions_total 1
# HELP kopiur_leader_renew_failures_total Failed Lease renewals.
# TYPE kopiur_leader_renew_failures_total counter
kopiur_leader_renew_failures_total 2
# HELP kopiur_snapshot_deletion_failures_total Members of failed batch delete Jobs.
# TYPE kopiur_snapshot_deletion_failures_total counter
kopiur_snapshot_deletion_failures_total{namespace="t"} 1
# HELP kopiur_snapshot_deletions_total Snapshot finalizers released, by outcome.
# TYPE kopiur_snapshot_deletions_total counter
kopiur_snapshot_deletions_total{namespace="t",outcome="released"} 1
# HELP kopiur_snapshot_deletion_batches_total Terminal batch delete Jobs, counted once each.
# TYPE kopiur_snapshot_deletion_batches_total counter
kopiur_snapshot_deletion_batches_total{kind="Repository",namespace="t",name="r",outcome="failed"} 1
# HELP kopiur_kube_client_requests_total Kubernetes API requests by verb, API group, resource and client.
# TYPE kopiur_kube_client_requests_total counter
kopiur_kube_client_requests_total{verb="get",group="kopiur.home-operations.com",kind="snapshots",client="main"} 1
kopiur_kube_client_requests_total{verb="list",group="",kind="pods",client="election"} 1
# HELP kopiur_schedule_snapshots_created_total Snapshots created by a SnapshotSchedule.
# TYPE kopiur_schedule_snapshots_created_total counter
kopiur_schedule_snapshots_created_total{namespace="t",name="h"} 1
# HELP kopiur_schedule_slots_skipped_total Schedule slots skipped, by reason (expired, active_run, suspended).
# TYPE kopiur_schedule_slots_skipped_total counter
kopiur_schedule_slots_skipped_total{namespace="t",name="h",reason="expired"} 1
# HELP kopiur_snapshot_refusals_total Snapshots refused by the controller (terminal without a Job), by reason.
# TYPE kopiur_snapshot_refusals_total counter
kopiur_snapshot_refusals_total{namespace="t",name="s",reason="InvalidSpec"} 1
# HELP kopiur_staging_total CSI staging of backups (copyMethod Snapshot or Clone), by outcome: staged (the copy is ready), failed (timeout or refusal), released (its objects gone), leaked (its objects still there past the release bound; kopiur keeps releasing them, and counts released once they go). kopiur_staging_left has what is left now.
# TYPE kopiur_staging_total counter
kopiur_staging_total{namespace="t",method="Snapshot",outcome="staged"} 1
# HELP kopiur_staging_wait_seconds_total Whole seconds backups waited for their staged copy (from the gate to the staged PVC), by copy method.
# TYPE kopiur_staging_wait_seconds_total counter
kopiur_staging_wait_seconds_total{namespace="t",method="Snapshot"} 3
# HELP kopiur_restore_populates_total Populator Restores (target.populator) finished, by outcome: populated (the claim is bound to the restored volume), already_bound (the claim was bound before: nothing written), failed (the prime discarded).
# TYPE kopiur_restore_populates_total counter
kopiur_restore_populates_total{namespace="t",outcome="populated"} 1
# HELP kopiur_maintenance_runs_total Finished maintenance runs by mode and outcome (succeeded, failed, yielded).
# TYPE kopiur_maintenance_runs_total counter
kopiur_maintenance_runs_total{namespace="t",name="m",mode="full",outcome="succeeded"} 1
# HELP kopiur_replication_runs_total Finished replication runs by kind, trigger (cron, requested) and outcome.
# TYPE kopiur_replication_runs_total counter
kopiur_replication_runs_total{kind="RepositoryReplication",trigger="cron",outcome="failed"} 1
# HELP kopiur_snapshots_completed_total Snapshot runs that reached a terminal phase.
# TYPE kopiur_snapshots_completed_total counter
kopiur_snapshots_completed_total{namespace="a",policy="z",result="failed"} 1
kopiur_snapshots_completed_total{namespace="a b",policy="p",result="failed"} 1
kopiur_snapshots_completed_total{namespace="t",policy="p",result="succeeded"} 1
# HELP kopiur_leader 1 while this replica holds the leader Lease, else 0.
# TYPE kopiur_leader gauge
kopiur_leader 1
# HELP kopiur_controller_reconcile_duration_seconds Reconcile duration by kind.
# TYPE kopiur_controller_reconcile_duration_seconds histogram
kopiur_controller_reconcile_duration_seconds_bucket{kind="Repository",le="0.01"} 0
kopiur_controller_reconcile_duration_seconds_bucket{kind="Repository",le="0.025"} 0
kopiur_controller_reconcile_duration_seconds_bucket{kind="Repository",le="0.05"} 0
kopiur_controller_reconcile_duration_seconds_bucket{kind="Repository",le="0.1"} 0
kopiur_controller_reconcile_duration_seconds_bucket{kind="Repository",le="0.25"} 1
kopiur_controller_reconcile_duration_seconds_bucket{kind="Repository",le="0.5"} 1
kopiur_controller_reconcile_duration_seconds_bucket{kind="Repository",le="1"} 1
kopiur_controller_reconcile_duration_seconds_bucket{kind="Repository",le="10"} 1
kopiur_controller_reconcile_duration_seconds_bucket{kind="Repository",le="+Inf"} 2
kopiur_controller_reconcile_duration_seconds_sum{kind="Repository"} 20.2
kopiur_controller_reconcile_duration_seconds_count{kind="Repository"} 2
kopiur_controller_reconcile_duration_seconds_bucket{kind="Snapshot",le="0.01"} 1
kopiur_controller_reconcile_duration_seconds_bucket{kind="Snapshot",le="0.025"} 1
kopiur_controller_reconcile_duration_seconds_bucket{kind="Snapshot",le="0.05"} 1
kopiur_controller_reconcile_duration_seconds_bucket{kind="Snapshot",le="0.1"} 1
kopiur_controller_reconcile_duration_seconds_bucket{kind="Snapshot",le="0.25"} 1
kopiur_controller_reconcile_duration_seconds_bucket{kind="Snapshot",le="0.5"} 1
kopiur_controller_reconcile_duration_seconds_bucket{kind="Snapshot",le="1"} 1
kopiur_controller_reconcile_duration_seconds_bucket{kind="Snapshot",le="10"} 1
kopiur_controller_reconcile_duration_seconds_bucket{kind="Snapshot",le="+Inf"} 1
kopiur_controller_reconcile_duration_seconds_sum{kind="Snapshot"} 0.01
kopiur_controller_reconcile_duration_seconds_count{kind="Snapshot"} 1
# HELP kopiur_snapshot_deletions_held External Snapshot deletions held by the mass-deletion breaker.
# TYPE kopiur_snapshot_deletions_held gauge
kopiur_snapshot_deletions_held{kind="ClusterRepository",namespace="",name="c"} 1
kopiur_snapshot_deletions_held{kind="Repository",namespace="t",name="r"} 2
# HELP kopiur_snapshot_deletions_pending_external Pending external destructive Snapshot deletions counted by the mass-deletion breaker.
# TYPE kopiur_snapshot_deletions_pending_external gauge
kopiur_snapshot_deletions_pending_external{kind="Repository",namespace="t",name="r"} 5
# HELP kopiur_snapshot_gated Snapshots parked on a repository that is not Ready.
# TYPE kopiur_snapshot_gated gauge
kopiur_snapshot_gated{namespace="t",policy="p"} 3
# HELP kopiur_staging_left Finished backups whose staged PVC, VolumeSnapshot or VolumeSnapshotContent is still there past the release bound (Staging=True, reason ReleaseStuck): 1 per Snapshot, absent once they are gone.
# TYPE kopiur_staging_left gauge
kopiur_staging_left{namespace="t",name="s2"} 1
# HELP kopiur_snapshot_size_bytes Size of a Succeeded Snapshot.
# TYPE kopiur_snapshot_size_bytes gauge
kopiur_snapshot_size_bytes{namespace="t",name="s1",policy="p"} 42
# HELP kopiur_snapshot_duration_seconds Duration of a terminal Snapshot run.
# TYPE kopiur_snapshot_duration_seconds gauge
kopiur_snapshot_duration_seconds{namespace="a",name="z",policy="p"} 2
kopiur_snapshot_duration_seconds{namespace="a b",name="s",policy="p"} 1
kopiur_snapshot_duration_seconds{namespace="t",name="s1",policy="p"} 7
# HELP kopiur_snapshot_last_success_timestamp_seconds End time of a Succeeded Snapshot.
# TYPE kopiur_snapshot_last_success_timestamp_seconds gauge
kopiur_snapshot_last_success_timestamp_seconds{namespace="t",name="s1",policy="p"} 1700000000
# HELP kopiur_policy_last_backup_success_timestamp_seconds End time of the newest Succeeded run of a policy on a repository.
# TYPE kopiur_policy_last_backup_success_timestamp_seconds gauge
kopiur_policy_last_backup_success_timestamp_seconds{namespace="t",policy="p",repository="r"} 1700000000
# HELP kopiur_snapshotpolicy_last_backup_success 1 if the latest terminal run of a policy on a repository succeeded or was unchanged, else 0.
# TYPE kopiur_snapshotpolicy_last_backup_success gauge
kopiur_snapshotpolicy_last_backup_success{namespace="t",policy="p",repository="r"} 1
# HELP kopiur_snapshot_consecutive_failures Trailing Failed runs of a policy on a repository.
# TYPE kopiur_snapshot_consecutive_failures gauge
kopiur_snapshot_consecutive_failures{namespace="t",policy="p",repository="r"} 0
# HELP kopiur_repo_snapshot_count Snapshots in the repository at the last listing.
# TYPE kopiur_repo_snapshot_count gauge
kopiur_repo_snapshot_count{kind="Repository",namespace="t",name="r"} 5
# HELP kopiur_repo_discovered_snapshots Discovered (catalog) snapshots at the last listing.
# TYPE kopiur_repo_discovered_snapshots gauge
kopiur_repo_discovered_snapshots{kind="Repository",namespace="t",name="r"} 2
# HELP kopiur_repo_index_blobs Index blobs at the last listing.
# TYPE kopiur_repo_index_blobs gauge
kopiur_repo_index_blobs{kind="ClusterRepository",namespace="",name="c"} 12
# HELP kopiur_repository_maintenance_configured 1 if the repository's maintenance is configured, else 0.
# TYPE kopiur_repository_maintenance_configured gauge
kopiur_repository_maintenance_configured{kind="Repository",namespace="t",name="r"} 0
# HELP kopiur_restore_duration_seconds Duration of a finished Restore.
# TYPE kopiur_restore_duration_seconds gauge
kopiur_restore_duration_seconds{namespace="t",name="back"} 9
# HELP kopiur_resource_phase 1 for the current phase of each object.
# TYPE kopiur_resource_phase gauge
kopiur_resource_phase{kind="Repository",namespace="t",name="r\"q",phase="Degraded"} 1
kopiur_resource_phase{kind="ClusterRepository",namespace="",name="c",phase="Ready"} 1
kopiur_resource_phase{kind="Restore",namespace="t",name="y",phase="Completed"} 1
kopiur_resource_phase{kind="SnapshotPolicy",namespace="t",name="p",phase="Ready"} 1
kopiur_resource_phase{kind="Maintenance",namespace="t",name="m",phase="Ready"} 1
kopiur_resource_phase{kind="Snapshot",namespace="t",name="s\"1",phase="Running"} 1
# HELP kopiur_repository_consecutive_backend_failures Consecutive failed backend probes of a repository; present whenever it has a health status (0 after a recovery).
# TYPE kopiur_repository_consecutive_backend_failures gauge
kopiur_repository_consecutive_backend_failures{kind="Repository",namespace="t",name="r\"q"} 3
kopiur_repository_consecutive_backend_failures{kind="ClusterRepository",namespace="",name="c"} 0
# HELP kopiur_repository_breaker_open_since_timestamp_seconds When the repository's breaker opened; present only while it is open.
# TYPE kopiur_repository_breaker_open_since_timestamp_seconds gauge
kopiur_repository_breaker_open_since_timestamp_seconds{kind="Repository",namespace="t",name="r\"q"} 1700000000
# HELP kopiur_repository_strict_retry_holdoff_seconds The strict-retry holdoff of a repository whose breaker is open; present only while it is open.
# TYPE kopiur_repository_strict_retry_holdoff_seconds gauge
kopiur_repository_strict_retry_holdoff_seconds{kind="Repository",namespace="t",name="r\"q"} 120
"##;
}
