//! Prometheus metrics in the text exposition format. Counters live here; gauges are computed
//! from the reflector stores at scrape time, so a deleted object's series disappear.
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

/// A counter family keyed by label values.
pub struct Counter {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    values: Mutex<BTreeMap<Vec<String>, u64>>,
}

impl Counter {
    pub const fn new(name: &'static str, help: &'static str, labels: &'static [&'static str]) -> Counter {
        Counter { name, help, labels, values: Mutex::new(BTreeMap::new()) }
    }
    pub fn inc(&self, values: &[&str]) {
        if let Ok(mut m) = self.values.lock() {
            *m.entry(values.iter().map(|s| s.to_string()).collect()).or_default() += 1;
        }
    }
    pub fn get(&self, values: &[&str]) -> u64 {
        let key: Vec<String> = values.iter().map(|s| s.to_string()).collect();
        self.values.lock().ok().and_then(|m| m.get(&key).copied()).unwrap_or(0)
    }
    fn render(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}\n# TYPE {} counter", self.name, self.help, self.name);
        if let Ok(m) = self.values.lock() {
            for (k, v) in m.iter() {
                let _ = writeln!(out, "{}{} {v}", self.name, labels(self.labels, k));
            }
        }
    }
}

pub fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Writes `v` escaped for a label value, without an intermediate copy.
pub fn write_escaped(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// One `kopiur_resource_phase{kind,namespace,name,phase} 1` line.
pub fn write_phase_line(out: &mut String, kind: &str, namespace: &str, name: &str, phase: &str) {
    out.push_str("kopiur_resource_phase{kind=\"");
    write_escaped(out, kind);
    out.push_str("\",namespace=\"");
    write_escaped(out, namespace);
    out.push_str("\",name=\"");
    write_escaped(out, name);
    out.push_str("\",phase=\"");
    write_escaped(out, phase);
    out.push_str("\"} 1\n");
}

/// Series written at scrape time straight from a reflector store, so nothing per object is
/// held between scrapes (a per-object family over 50,000 Snapshots held about 300 bytes per
/// series, and as much again while each pass built its replacement).
pub type LiveSeries = Box<dyn Fn(&mut String) + Send + Sync>;

pub fn labels(names: &[&str], values: &[String]) -> String {
    if names.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = names.iter().zip(values).map(|(n, v)| format!("{n}=\"{}\"", escape(v))).collect();
    format!("{{{}}}", parts.join(","))
}

/// A gauge family whose whole series set is replaced by its owner on each pass (so a series
/// disappears with its object). Rendered only by the leader.
pub struct GaugeFamily {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    values: Mutex<BTreeMap<Vec<String>, i64>>,
}

impl GaugeFamily {
    pub const fn new(name: &'static str, help: &'static str, labels: &'static [&'static str]) -> GaugeFamily {
        GaugeFamily { name, help, labels, values: Mutex::new(BTreeMap::new()) }
    }
    /// Replace every series.
    pub fn replace(&self, series: BTreeMap<Vec<String>, i64>) {
        if let Ok(mut m) = self.values.lock() {
            *m = series;
        }
    }
    /// Replace the series whose first label equals `first` (one owner's slice).
    pub fn replace_slice(&self, first: &str, series: BTreeMap<Vec<String>, i64>) {
        if let Ok(mut m) = self.values.lock() {
            m.retain(|k, _| k.first().map(String::as_str) != Some(first));
            m.extend(series);
        }
    }
    pub fn get(&self, values: &[&str]) -> Option<i64> {
        let key: Vec<String> = values.iter().map(|s| s.to_string()).collect();
        self.values.lock().ok().and_then(|m| m.get(&key).copied())
    }
    fn render(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}\n# TYPE {} gauge", self.name, self.help, self.name);
        self.render_series(out);
    }
    /// The series lines only (for a family whose header another writer emits).
    fn render_series(&self, out: &mut String) {
        if let Ok(m) = self.values.lock() {
            for (k, v) in m.iter() {
                let _ = writeln!(out, "{}{} {v}", self.name, labels(self.labels, k));
            }
        }
    }
}

const BUCKETS: [f64; 8] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 10.0];

#[derive(Default)]
struct Hist {
    counts: [u64; 8],
    sum: f64,
    count: u64,
}

pub struct Metrics {
    pub reconciliations: Counter,
    pub reconcile_errors: Counter,
    pub jobs_created: Counter,
    pub breaker_trips: Counter,
    pub probe_failures: Counter,
    /// The controller's cheap endpoint checks of a repository whose breaker is open.
    pub endpoint_checks: Counter,
    pub leader_transitions: Counter,
    pub leader_renew_failures: Counter,
    pub deletion_failures: Counter,
    pub deletions: Counter,
    pub deletion_batches: Counter,
    /// Every apiserver call (`client_metrics.rs`).
    pub kube_requests: Counter,
    pub schedule_snapshots_created: Counter,
    pub schedule_slots_skipped: Counter,
    pub snapshot_refusals: Counter,
    pub maintenance_runs: Counter,
    pub replication_runs: Counter,
    /// ADR-0006: held external deletions per repository.
    pub deletions_held: GaugeFamily,
    /// ADR-0006: the breaker's inclusive pending-external count per repository.
    pub deletions_pending_external: GaugeFamily,
    /// Parked run-path Snapshots (Pending, Ready reason RepositoryNotReady) per policy; absent at 0.
    pub snapshot_gated: GaugeFamily,
    /// Per Snapshot (`snapshot::gauges`): size, duration and end time of a Succeeded run.
    pub snapshot_size_bytes: GaugeFamily,
    pub snapshot_duration_seconds: GaugeFamily,
    pub snapshot_last_success: GaugeFamily,
    /// Per policy and repository (`snapshot::gauges`).
    pub policy_last_success_timestamp: GaugeFamily,
    pub policy_last_backup_success: GaugeFamily,
    pub snapshot_consecutive_failures: GaugeFamily,
    /// Terminal Snapshot transitions seen in the store, by result.
    pub snapshots_completed: Counter,
    /// Repository listing and maintenance gauges (`snapshot::gauges`).
    pub repo_snapshot_count: GaugeFamily,
    pub repo_discovered_snapshots: GaugeFamily,
    pub repo_index_blobs: GaugeFamily,
    pub repository_maintenance_configured: GaugeFamily,
    pub restore_duration_seconds: GaugeFamily,
    /// `kopiur_resource_phase` of every kind but the repositories (`resource_phase.rs`),
    /// keyed (kind, namespace, name, phase); each kind replaces its own slice.
    pub resource_phase: GaugeFamily,
    /// Kinds whose `kopiur_resource_phase` lines are written at scrape time from their store
    /// ([`Metrics::resource_phase_live`]), by kind.
    resource_phase_live: Mutex<BTreeMap<&'static str, LiveSeries>>,
    /// The length of the last rendering, so the next one is allocated once.
    last_render_len: std::sync::atomic::AtomicUsize,
    durations: Mutex<BTreeMap<String, Hist>>,
    pub leader: std::sync::atomic::AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            reconciliations: Counter::new("kopiur_controller_reconciliations_total", "Reconciliations.", &["kind"]),
            reconcile_errors: Counter::new(
                "kopiur_controller_reconcile_errors_total",
                "Failed reconciliations by error class.",
                &["kind", "class"],
            ),
            jobs_created: Counter::new("kopiur_mover_jobs_created_total", "Mover Jobs created.", &["op", "namespace"]),
            breaker_trips: Counter::new(
                "kopiur_repository_breaker_trips_total",
                "Transitions of a repository into Degraded.",
                &["kind", "namespace", "name", "probe_kind"],
            ),
            probe_failures: Counter::new(
                "kopiur_repository_health_probe_failures_total",
                "Failed probe connects.",
                &["kind", "namespace", "name", "outcome"],
            ),
            endpoint_checks: Counter::new(
                "kopiur_repository_endpoint_checks_total",
                "Cheap endpoint checks of a repository whose breaker is open, by outcome (answers, down).",
                &["kind", "namespace", "name", "outcome"],
            ),
            leader_transitions: Counter::new("kopiur_leader_transitions_total", "Leadership acquisitions.", &[]),
            leader_renew_failures: Counter::new("kopiur_leader_renew_failures_total", "Failed Lease renewals.", &[]),
            deletion_failures: Counter::new(
                "kopiur_snapshot_deletion_failures_total",
                "Members of failed batch delete Jobs.",
                &["namespace"],
            ),
            deletions: Counter::new(
                "kopiur_snapshot_deletions_total",
                "Snapshot finalizers released, by outcome.",
                &["namespace", "outcome"],
            ),
            schedule_snapshots_created: Counter::new(
                "kopiur_schedule_snapshots_created_total",
                "Snapshots created by a SnapshotSchedule.",
                &["namespace", "name"],
            ),
            schedule_slots_skipped: Counter::new(
                "kopiur_schedule_slots_skipped_total",
                "Schedule slots skipped, by reason (expired, active_run, suspended).",
                &["namespace", "name", "reason"],
            ),
            snapshot_refusals: Counter::new(
                "kopiur_snapshot_refusals_total",
                "Snapshots refused by the controller (terminal without a Job), by reason.",
                &["namespace", "name", "reason"],
            ),
            maintenance_runs: Counter::new(
                "kopiur_maintenance_runs_total",
                "Finished maintenance runs by mode and outcome (succeeded, failed, yielded).",
                &["namespace", "name", "mode", "outcome"],
            ),
            replication_runs: Counter::new(
                "kopiur_replication_runs_total",
                "Finished replication runs by kind, trigger (cron, requested) and outcome.",
                &["kind", "trigger", "outcome"],
            ),
            kube_requests: Counter::new(
                "kopiur_kube_client_requests_total",
                "Kubernetes API requests by verb, API group, resource and client.",
                &["verb", "group", "kind", "client"],
            ),
            deletion_batches: Counter::new(
                "kopiur_snapshot_deletion_batches_total",
                "Terminal batch delete Jobs, counted once each.",
                &["kind", "namespace", "name", "outcome"],
            ),
            deletions_held: GaugeFamily::new(
                "kopiur_snapshot_deletions_held",
                "External Snapshot deletions held by the mass-deletion breaker.",
                &["kind", "namespace", "name"],
            ),
            deletions_pending_external: GaugeFamily::new(
                "kopiur_snapshot_deletions_pending_external",
                "Pending external destructive Snapshot deletions counted by the mass-deletion breaker.",
                &["kind", "namespace", "name"],
            ),
            snapshot_gated: GaugeFamily::new(
                "kopiur_snapshot_gated",
                "Snapshots parked on a repository that is not Ready.",
                &["namespace", "policy"],
            ),
            snapshot_size_bytes: GaugeFamily::new(
                "kopiur_snapshot_size_bytes",
                "Size of a Succeeded Snapshot.",
                &["namespace", "name", "policy"],
            ),
            snapshot_duration_seconds: GaugeFamily::new(
                "kopiur_snapshot_duration_seconds",
                "Duration of a terminal Snapshot run.",
                &["namespace", "name", "policy"],
            ),
            snapshot_last_success: GaugeFamily::new(
                "kopiur_snapshot_last_success_timestamp_seconds",
                "End time of a Succeeded Snapshot.",
                &["namespace", "name", "policy"],
            ),
            policy_last_success_timestamp: GaugeFamily::new(
                "kopiur_policy_last_backup_success_timestamp_seconds",
                "End time of the newest Succeeded run of a policy on a repository.",
                &["namespace", "policy", "repository"],
            ),
            policy_last_backup_success: GaugeFamily::new(
                "kopiur_snapshotpolicy_last_backup_success",
                "1 if the latest terminal run of a policy on a repository succeeded or was unchanged, else 0.",
                &["namespace", "policy", "repository"],
            ),
            snapshot_consecutive_failures: GaugeFamily::new(
                "kopiur_snapshot_consecutive_failures",
                "Trailing Failed runs of a policy on a repository.",
                &["namespace", "policy", "repository"],
            ),
            snapshots_completed: Counter::new(
                "kopiur_snapshots_completed_total",
                "Snapshot runs that reached a terminal phase.",
                &["namespace", "policy", "result"],
            ),
            repo_snapshot_count: GaugeFamily::new(
                "kopiur_repo_snapshot_count",
                "Snapshots in the repository at the last listing.",
                &["kind", "namespace", "name"],
            ),
            repo_discovered_snapshots: GaugeFamily::new(
                "kopiur_repo_discovered_snapshots",
                "Discovered (catalog) snapshots at the last listing.",
                &["kind", "namespace", "name"],
            ),
            repo_index_blobs: GaugeFamily::new(
                "kopiur_repo_index_blobs",
                "Index blobs at the last listing.",
                &["kind", "namespace", "name"],
            ),
            repository_maintenance_configured: GaugeFamily::new(
                "kopiur_repository_maintenance_configured",
                "1 if the repository's maintenance is configured, else 0.",
                &["kind", "namespace", "name"],
            ),
            restore_duration_seconds: GaugeFamily::new(
                "kopiur_restore_duration_seconds",
                "Duration of a finished Restore.",
                &["namespace", "name"],
            ),
            resource_phase: GaugeFamily::new(
                "kopiur_resource_phase",
                "1 for the current phase of each object.",
                &["kind", "namespace", "name", "phase"],
            ),
            resource_phase_live: Mutex::new(BTreeMap::new()),
            last_render_len: std::sync::atomic::AtomicUsize::new(0),
            durations: Mutex::new(BTreeMap::new()),
            leader: std::sync::atomic::AtomicBool::new(false),
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
        "kopiur_maintenance_runs_total",
        "kopiur_replication_runs_total",
        "kopiur_snapshot_deletions_held",
        "kopiur_snapshot_deletions_pending_external",
        "kopiur_snapshots_completed_total",
        "kopiur_snapshot_gated",
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
    /// Writes kind `kind`'s `kopiur_resource_phase` lines with `lines` at every scrape from now
    /// on (it reads the kind's store then), instead of a held slice of [`Metrics::resource_phase`];
    /// the kind's held slice is dropped.
    pub fn resource_phase_live(&self, kind: &'static str, lines: LiveSeries) {
        self.resource_phase.replace_slice(kind, BTreeMap::new());
        if let Ok(mut m) = self.resource_phase_live.lock() {
            m.insert(kind, lines);
        }
    }

    pub fn observe_duration(&self, kind: &str, secs: f64) {
        if let Ok(mut m) = self.durations.lock() {
            let h = m.entry(kind.to_string()).or_default();
            for (i, b) in BUCKETS.iter().enumerate() {
                if secs <= *b {
                    h.counts[i] += 1;
                }
            }
            h.sum += secs;
            h.count += 1;
        }
    }

    pub fn render(&self, repos: &[RepoGauge]) -> String {
        let out = self.render_into(repos);
        self.last_render_len.store(out.len(), std::sync::atomic::Ordering::Relaxed);
        out
    }

    fn render_into(&self, repos: &[RepoGauge]) -> String {
        // One allocation of about the last size instead of doubling through a large text.
        let last = self.last_render_len.load(std::sync::atomic::Ordering::Relaxed);
        let mut out = String::with_capacity(last + last / 16 + 4096);
        for c in [
            &self.reconciliations,
            &self.reconcile_errors,
            &self.jobs_created,
            &self.breaker_trips,
            &self.probe_failures,
            &self.endpoint_checks,
            &self.leader_transitions,
            &self.leader_renew_failures,
            &self.deletion_failures,
            &self.deletions,
            &self.deletion_batches,
            &self.kube_requests,
            &self.schedule_snapshots_created,
            &self.schedule_slots_skipped,
            &self.snapshot_refusals,
            &self.maintenance_runs,
            &self.replication_runs,
            &self.snapshots_completed,
        ] {
            c.render(&mut out);
        }
        let leader = self.leader.load(std::sync::atomic::Ordering::Relaxed);
        let _ = writeln!(out, "# TYPE kopiur_leader gauge\nkopiur_leader {}", u8::from(leader));
        let _ = writeln!(out, "# TYPE kopiur_controller_reconcile_duration_seconds histogram");
        if let Ok(m) = self.durations.lock() {
            for (kind, h) in m.iter() {
                for (i, b) in BUCKETS.iter().enumerate() {
                    let _ = writeln!(
                        out,
                        "kopiur_controller_reconcile_duration_seconds_bucket{{kind=\"{kind}\",le=\"{b}\"}} {}",
                        h.counts[i]
                    );
                }
                let _ = writeln!(
                    out,
                    "kopiur_controller_reconcile_duration_seconds_bucket{{kind=\"{kind}\",le=\"+Inf\"}} {}",
                    h.count
                );
                let _ = writeln!(out, "kopiur_controller_reconcile_duration_seconds_sum{{kind=\"{kind}\"}} {}", h.sum);
                let _ =
                    writeln!(out, "kopiur_controller_reconcile_duration_seconds_count{{kind=\"{kind}\"}} {}", h.count);
            }
        }
        if let Ok(rss) = std::fs::read_to_string("/proc/self/statm")
            && let Some(pages) = rss.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok())
        {
            let _ = writeln!(
                out,
                "# TYPE kopiur_process_resident_memory_bytes gauge\nkopiur_process_resident_memory_bytes {}",
                pages * 4096
            );
        }
        // Business gauges only from the leader (a passive replica's stores are not authoritative).
        if !leader {
            return out;
        }
        self.deletions_held.render(&mut out);
        self.deletions_pending_external.render(&mut out);
        for g in [
            &self.snapshot_gated,
            &self.snapshot_size_bytes,
            &self.snapshot_duration_seconds,
            &self.snapshot_last_success,
            &self.policy_last_success_timestamp,
            &self.policy_last_backup_success,
            &self.snapshot_consecutive_failures,
            &self.repo_snapshot_count,
            &self.repo_discovered_snapshots,
            &self.repo_index_blobs,
            &self.repository_maintenance_configured,
            &self.restore_duration_seconds,
        ] {
            g.render(&mut out);
        }
        let _ = writeln!(out, "# TYPE kopiur_resource_phase gauge");
        for r in repos {
            if let Some(p) = &r.phase {
                let _ = writeln!(
                    out,
                    "kopiur_resource_phase{{kind=\"{}\",namespace=\"{}\",name=\"{}\",phase=\"{}\"}} 1",
                    r.kind,
                    escape(&r.namespace),
                    escape(&r.name),
                    escape(p)
                );
            }
        }
        self.resource_phase.render_series(&mut out);
        if let Ok(live) = self.resource_phase_live.lock() {
            for lines in live.values() {
                lines(&mut out);
            }
        }
        for (metric, get) in [
            (
                "kopiur_repository_consecutive_backend_failures",
                (|r: &RepoGauge| r.streak) as fn(&RepoGauge) -> Option<i64>,
            ),
            ("kopiur_repository_breaker_open_since_timestamp_seconds", |r: &RepoGauge| r.open_since),
            ("kopiur_repository_strict_retry_holdoff_seconds", |r: &RepoGauge| r.holdoff),
        ] {
            let _ = writeln!(out, "# TYPE {metric} gauge");
            for r in repos {
                if let Some(v) = get(r) {
                    let _ = writeln!(
                        out,
                        "{metric}{{kind=\"{}\",namespace=\"{}\",name=\"{}\"}} {v}",
                        r.kind,
                        escape(&r.namespace),
                        escape(&r.name)
                    );
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            _ => {}
        }
    }

    #[test]
    fn metric_names_lists_exactly_what_render_emits() {
        let m = Metrics::default();
        m.leader.store(true, std::sync::atomic::Ordering::Relaxed);
        m.observe_duration("Repository", 0.2);
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
            let v: serde_json::Value = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{rules} parses: {e}"));
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
        m.leader.store(true, std::sync::atomic::Ordering::Relaxed);
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
        m.breaker_trips.inc(&["Repository", "t", "r", "probe"]);
        m.breaker_trips.inc(&["Repository", "t", "r", "probe"]);
        let out = m.render(&[g("Ready", Some(0), None)]);
        assert!(out.contains("kopiur_repository_breaker_trips_total{kind=\"Repository\",namespace=\"t\",name=\"r\",probe_kind=\"probe\"} 2"));
        assert!(!out.contains("kopiur_resource_phase{"));
        assert!(out.contains("kopiur_leader 0"));
    }
}
