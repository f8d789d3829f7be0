//! `kopiur_resource_phase{kind,namespace,name,phase}` for every kind besides the repositories
//! (those are rendered from their own stores in `main.rs`): 1 for the current phase only.
//!
//! Recomputed from the reflector stores every [`PERIOD`]; each kind replaces its own slice of
//! the family, so a deleted object's series disappears on the next pass (bounded by the
//! number of live objects).
//!
//! Snapshot, Restore and RepositoryReplication report `status.phase`. SnapshotPolicy,
//! SnapshotSchedule and Maintenance have no phase (docs/design/api-contract.md §1); their label is the kstatus
//! state of their conditions: `Stalled`, `Reconciling`, `Ready` or `NotReady`. An object with
//! neither (not reconciled yet) has no series.
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kopiur_api::names::condition;
use kopiur_api::shared::status::Condition;
use kopiur_api::{Maintenance, RepositoryReplication, Restore, Snapshot, SnapshotPolicy, SnapshotSchedule};
use kube::ResourceExt;
use kube::runtime::reflector::Store;

use crate::metrics::Metrics;
use crate::metrics::labels::PhaseLabels;

pub const PERIOD: Duration = Duration::from_secs(5);

/// The kstatus state of a kind without `status.phase`: Stalled wins, then Reconciling, then
/// Ready True/False. None when there is no Ready condition yet.
pub fn kstatus_phase(conditions: &[Condition]) -> Option<&'static str> {
    let is_true = |t: &str| conditions.iter().any(|c| c.type_ == t && c.status == "True");
    let ready = conditions.iter().find(|c| c.type_ == "Ready")?;
    Some(if is_true(condition::STALLED) {
        condition::STALLED
    } else if is_true(condition::RECONCILING) {
        condition::RECONCILING
    } else if ready.status == "True" {
        "Ready"
    } else {
        "NotReady"
    })
}

/// A kind whose objects have a phase label.
pub trait Phased: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static {
    const KIND: &'static str;
    fn phase_label(&self) -> Option<String>;
}

impl Phased for Snapshot {
    const KIND: &'static str = "Snapshot";
    fn phase_label(&self) -> Option<String> {
        self.status.as_ref()?.phase.as_ref().map(|p| p.as_str().to_string())
    }
}

impl Phased for Restore {
    const KIND: &'static str = "Restore";
    fn phase_label(&self) -> Option<String> {
        self.status.as_ref()?.phase.as_ref().map(|p| p.as_str().to_string())
    }
}

impl Phased for RepositoryReplication {
    const KIND: &'static str = "RepositoryReplication";
    fn phase_label(&self) -> Option<String> {
        self.status.as_ref()?.phase.as_ref().map(|p| p.as_str().to_string())
    }
}

impl Phased for SnapshotPolicy {
    const KIND: &'static str = "SnapshotPolicy";
    fn phase_label(&self) -> Option<String> {
        kstatus_phase(&self.status.as_ref()?.conditions).map(str::to_string)
    }
}

impl Phased for SnapshotSchedule {
    const KIND: &'static str = "SnapshotSchedule";
    fn phase_label(&self) -> Option<String> {
        kstatus_phase(&self.status.as_ref()?.conditions).map(str::to_string)
    }
}

impl Phased for Maintenance {
    const KIND: &'static str = "Maintenance";
    fn phase_label(&self) -> Option<String> {
        kstatus_phase(&self.status.as_ref()?.conditions).map(str::to_string)
    }
}

/// The series of one kind: `(kind, namespace, name, phase) -> 1`, one per object with a phase.
pub fn series<K: Phased>(objs: &[Arc<K>]) -> BTreeMap<PhaseLabels, i64> {
    objs.iter()
        .filter_map(|o| {
            let phase = o.phase_label()?;
            Some((
                PhaseLabels { kind: K::KIND, namespace: o.namespace().unwrap_or_default(), name: o.name_any(), phase },
                1,
            ))
        })
        .collect()
}

/// Replaces kind `K`'s slice of `kopiur_resource_phase` from `objs`.
pub fn publish<K: Phased>(metrics: &Metrics, objs: &[Arc<K>]) {
    metrics.resource_phase.replace_where(|l| l.kind == K::KIND, series(objs));
}

/// Publishes kind `K` from `store` every [`PERIOD`] for as long as the process runs.
pub async fn run<K: Phased>(metrics: Arc<Metrics>, store: Store<K>) {
    let mut tick = tokio::time::interval(PERIOD);
    loop {
        tick.tick().await;
        publish(&metrics, &store.state());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A minimal valid spec per kind: a kind used in a fixture must say what its spec is (no
    /// catch-all that would hand a new kind an empty spec).
    trait Fixture: Phased + serde::de::DeserializeOwned {
        fn spec() -> serde_json::Value;
    }
    impl Fixture for Snapshot {
        fn spec() -> serde_json::Value {
            json!({"policyRef": {"name": "p"}})
        }
    }
    impl Fixture for Restore {
        fn spec() -> serde_json::Value {
            json!({"source": {"snapshotRef": {"name": "s"}}, "target": {"pvcRef": {"name": "d"}}})
        }
    }
    impl Fixture for SnapshotSchedule {
        fn spec() -> serde_json::Value {
            json!({"policyRef": {"name": "p"}, "schedule": {"cron": "0 * * * *"}})
        }
    }

    fn obj<K: Fixture>(kind: &str, name: &str, status: serde_json::Value) -> Arc<K> {
        assert_eq!(kind, K::KIND, "the fixture's kind is the type's");
        let spec = K::spec();
        let v = json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": kind,
            "metadata": {"name": name, "namespace": "t"},
            "spec": spec,
            "status": status,
        });
        Arc::new(serde_json::from_value(v).unwrap_or_else(|e| panic!("{kind} fixture: {e}")))
    }

    fn cond(t: &str, s: &str) -> serde_json::Value {
        json!({"type": t, "status": s, "reason": "R", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    fn key(kind: &'static str, namespace: &str, name: &str, phase: &str) -> PhaseLabels {
        PhaseLabels { kind, namespace: namespace.into(), name: name.into(), phase: phase.into() }
    }

    #[test]
    fn kstatus_state_prefers_stalled_then_reconciling_then_ready() {
        let c = |v: serde_json::Value| -> Vec<Condition> { serde_json::from_value(v).unwrap() };
        assert_eq!(kstatus_phase(&[]), None);
        assert_eq!(kstatus_phase(&c(json!([cond("Stalled", "True")]))), None, "no Ready: not reconciled yet");
        assert_eq!(kstatus_phase(&c(json!([cond("Ready", "True")]))), Some("Ready"));
        assert_eq!(kstatus_phase(&c(json!([cond("Ready", "False"), cond("Stalled", "False")]))), Some("NotReady"));
        assert_eq!(
            kstatus_phase(&c(json!([cond("Ready", "False"), cond("Reconciling", "True")]))),
            Some("Reconciling")
        );
        assert_eq!(
            kstatus_phase(&c(json!([cond("Ready", "False"), cond("Reconciling", "True"), cond("Stalled", "True")]))),
            Some("Stalled")
        );
    }

    #[test]
    fn one_series_per_object_with_its_current_phase_only() {
        let restores: Vec<Arc<Restore>> = vec![
            obj("Restore", "bad", json!({"phase": "Failed"})),
            obj("Restore", "ok", json!({"phase": "Completed"})),
            obj("Restore", "new", json!({})),
        ];
        assert_eq!(
            series(&restores),
            BTreeMap::from([(key("Restore", "t", "bad", "Failed"), 1), (key("Restore", "t", "ok", "Completed"), 1)])
        );
        let snaps: Vec<Arc<Snapshot>> = vec![obj("Snapshot", "s1", json!({"phase": "Succeeded"}))];
        assert_eq!(series(&snaps), BTreeMap::from([(key("Snapshot", "t", "s1", "Succeeded"), 1)]));
        let scheds: Vec<Arc<SnapshotSchedule>> = vec![obj(
            "SnapshotSchedule",
            "h",
            json!({"conditions": [cond("Ready", "True"), cond("Stalled", "False")]}),
        )];
        assert_eq!(series(&scheds), BTreeMap::from([(key("SnapshotSchedule", "t", "h", "Ready"), 1)]));
    }

    /// The label matchers of `metric{...}` in a PromQL expression (equality and `=~` with
    /// plain alternatives, which is all the shipped rules use).
    fn matchers(expr: &str, metric: &str) -> Vec<(String, bool, Vec<String>)> {
        let start = expr.find(&format!("{metric}{{")).expect("the rule selects the metric") + metric.len() + 1;
        let body = &expr[start..start + expr[start..].find('}').expect("closing brace")];
        body.split(',')
            .map(|m| {
                let (k, regex, v) = match m.split_once("=~") {
                    Some((k, v)) => (k, true, v),
                    None => {
                        let (k, v) = m.split_once('=').expect("an equality matcher");
                        (k, false, v)
                    }
                };
                let v = v.trim().trim_matches('"');
                (k.trim().to_string(), regex, v.split('|').map(str::to_string).collect())
            })
            .collect()
    }

    fn labels_of(line: &str) -> BTreeMap<String, String> {
        let inner = &line[line.find('{').unwrap() + 1..line.rfind('}').unwrap()];
        inner
            .split("\",")
            .map(|kv| {
                let (k, v) = kv.split_once("=\"").unwrap();
                (k.to_string(), v.trim_end_matches('"').to_string())
            })
            .collect()
    }

    /// docs/design/observability.md §10.3: `KopiurRestoreFailed` (both shipped copies of the rules) selects the
    /// series the controller renders for a Failed Restore, and nothing else it renders.
    #[test]
    fn the_restore_failed_alert_selects_the_exported_series() {
        let m = Metrics::default();
        m.leader.set(1);
        publish(
            &m,
            &[
                obj::<Restore>("Restore", "bad", json!({"phase": "Failed"})),
                obj::<Restore>("Restore", "ok", json!({"phase": "Completed"})),
            ],
        );
        publish(&m, &[obj::<Snapshot>("Snapshot", "s", json!({"phase": "Failed"}))]);
        let out = m.render(&[]);
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        for rules in ["deploy/prometheus/kopiur-rules.yaml", "deploy/helm/kopiur/prometheus/kopiur-rules.yaml"] {
            let text = std::fs::read_to_string(root.join(rules)).unwrap();
            let v: serde_json::Value = serde_norway::from_str(&text).unwrap();
            let expr = v["groups"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|g| g["rules"].as_array().unwrap().iter())
                .find(|r| r["alert"] == "KopiurRestoreFailed")
                .and_then(|r| r["expr"].as_str())
                .unwrap_or_else(|| panic!("{rules}: KopiurRestoreFailed"))
                .to_string();
            let ms = matchers(&expr, "kopiur_resource_phase");
            let selected: Vec<BTreeMap<String, String>> = out
                .lines()
                .filter(|l| l.starts_with("kopiur_resource_phase{"))
                .map(labels_of)
                .filter(|l| ms.iter().all(|(k, _, vs)| l.get(k).is_some_and(|x| vs.contains(x))))
                .collect();
            assert_eq!(selected.len(), 1, "{rules}: {expr} selects exactly the Failed Restore in:\n{out}");
            let l = &selected[0];
            assert_eq!((l["kind"].as_str(), l["name"].as_str(), l["phase"].as_str()), ("Restore", "bad", "Failed"));
            // The alert groups by (namespace, name): both labels are on the series.
            assert!(expr.contains("by (namespace, name)") && l.contains_key("namespace") && l.contains_key("name"));
        }
    }

    #[test]
    fn a_phase_change_replaces_the_series_and_a_deleted_object_loses_it() {
        let m = Metrics::default();
        m.leader.set(1);
        publish(&m, &[obj::<Restore>("Restore", "r", json!({"phase": "Restoring"}))]);
        publish(&m, &[obj::<Snapshot>("Snapshot", "s", json!({"phase": "Running"}))]);
        publish(&m, &[obj::<Restore>("Restore", "r", json!({"phase": "Failed"}))]);
        let out = m.render(&[]);
        assert!(out.contains("kopiur_resource_phase{kind=\"Restore\",namespace=\"t\",name=\"r\",phase=\"Failed\"} 1"));
        assert!(!out.contains("phase=\"Restoring\""), "only the current phase: {out}");
        assert!(
            out.contains("kopiur_resource_phase{kind=\"Snapshot\",namespace=\"t\",name=\"s\",phase=\"Running\"} 1")
        );
        assert_eq!(out.matches("# TYPE kopiur_resource_phase gauge").count(), 1, "one family: {out}");
        // The Restore is deleted: its kind's slice is empty; the Snapshot's series stays.
        publish::<Restore>(&m, &[]);
        let out = m.render(&[]);
        assert!(!out.contains("kind=\"Restore\""), "deleted objects lose their series: {out}");
        assert!(out.contains("kind=\"Snapshot\""));
        // A passive replica renders none of it.
        m.leader.set(0);
        assert!(!m.render(&[]).contains("kopiur_resource_phase{"));
    }
}
