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
    pub leader_transitions: Counter,
    pub leader_renew_failures: Counter,
    pub deletion_failures: Counter,
    pub deletions: Counter,
    pub deletion_batches: Counter,
    /// ADR-0006: held external deletions per repository.
    pub deletions_held: GaugeFamily,
    /// ADR-0006: the breaker's inclusive pending-external count per repository.
    pub deletions_pending_external: GaugeFamily,
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
            durations: Mutex::new(BTreeMap::new()),
            leader: std::sync::atomic::AtomicBool::new(false),
        }
    }
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
        let mut out = String::new();
        for c in [
            &self.reconciliations,
            &self.reconcile_errors,
            &self.jobs_created,
            &self.breaker_trips,
            &self.probe_failures,
            &self.leader_transitions,
            &self.leader_renew_failures,
            &self.deletion_failures,
            &self.deletions,
            &self.deletion_batches,
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
        if let Ok(rss) = std::fs::read_to_string("/proc/self/statm") {
            if let Some(pages) = rss.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()) {
                let _ = writeln!(
                    out,
                    "# TYPE kopiur_process_resident_memory_bytes gauge\nkopiur_process_resident_memory_bytes {}",
                    pages * 4096
                );
            }
        }
        // Business gauges only from the leader (a passive replica's stores are not authoritative).
        if !leader {
            return out;
        }
        self.deletions_held.render(&mut out);
        self.deletions_pending_external.render(&mut out);
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
