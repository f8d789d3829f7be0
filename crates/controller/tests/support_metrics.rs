//! The support module's `/metrics` parser (`support/metrics.rs`), which every environment test
//! reads the operator's metrics with, on a fixed exposition and on the controller's rendering.
#[path = "support/metrics.rs"]
#[allow(dead_code)]
mod metrics;

use std::collections::BTreeMap;

use metrics::*;

const TEXT: &str = "# HELP x\n# TYPE x counter\nx 3\nfam{namespace=\"t\",name=\"r\",op=\"a,b\"} 2\nfam{namespace=\"t\",name=\"s\"} 5\nfam{namespace=\"u\",name=\"r\"} 7\n";

#[test]
fn parses_bare_and_labelled_samples() {
    assert_eq!(sample(TEXT, "x", &[]), Some(3.0));
    assert_eq!(metric(TEXT, "fam", "t", "r"), Some(2.0));
    assert_eq!(sample(TEXT, "fam", &[("op", "a,b")]), Some(2.0));
    assert_eq!(sum(TEXT, "fam", &[("namespace", "t")]), 7.0);
    assert_eq!(samples(TEXT, "fa", &[]), Vec::<f64>::new());
    assert_eq!(
        sum_by(TEXT, "fam", &[("name", "r")], "namespace"),
        BTreeMap::from([("t".into(), 2.0), ("u".into(), 7.0)])
    );
}

/// The parser reads the controller's own exposition (prometheus-client's text format 0.0.4):
/// every sample line parses, the counters keep their `_total` names, and there is no OpenMetrics
/// `# EOF` or `# UNIT` line.
#[test]
fn parses_the_controllers_rendering() {
    use kopiur_controller::metrics::labels::{JobLabels, KindLabels, NoLabels, PhaseRow, SnapshotLabels};
    use kopiur_controller::metrics::{Metrics, RepoGauge};
    let m = Metrics::default();
    m.leader.set(1);
    m.jobs_created.inc(JobLabels { op: "backup".into(), namespace: "t".into() });
    m.jobs_created.add(JobLabels { op: "backup".into(), namespace: "t".into() }, 2);
    m.leader_transitions.inc(NoLabels);
    m.observe_duration(KindLabels { kind: "Snapshot".into() }, 0.3);
    let snap = SnapshotLabels { namespace: "t".into(), name: "s1".into(), policy: "p".into() };
    m.snapshot_size_bytes.replace(BTreeMap::from([(snap, 42)]));
    m.resource_phase_live(
        "Snapshot",
        Box::new(|emit: &mut dyn FnMut(PhaseRow<'_>)| {
            emit(PhaseRow { kind: "Snapshot", namespace: "t", name: "s1", phase: "Succeeded" })
        }),
    );
    let repo = RepoGauge {
        kind: "Repository",
        namespace: "t".into(),
        name: "r".into(),
        phase: Some("Ready".into()),
        streak: Some(0),
        open_since: None,
        holdoff: None,
    };
    let text = m.render(&[repo]);
    assert!(!text.contains("# EOF") && !text.contains("# UNIT"), "{text}");
    let samples = text.lines().filter(|l| !l.starts_with('#')).count();
    assert_eq!(parse(&text).count(), samples, "every sample line parses:\n{text}");
    assert_eq!(sample(&text, "kopiur_mover_jobs_created_total", &[("op", "backup"), ("namespace", "t")]), Some(3.0));
    assert_eq!(sample(&text, "kopiur_leader_transitions_total", &[]), Some(1.0));
    assert_eq!(sample(&text, "kopiur_leader", &[]), Some(1.0));
    assert_eq!(sample(&text, "kopiur_controller_reconcile_duration_seconds_bucket", &[("le", "0.25")]), Some(0.0));
    assert_eq!(sample(&text, "kopiur_controller_reconcile_duration_seconds_bucket", &[("le", "+Inf")]), Some(1.0));
    assert_eq!(sample(&text, "kopiur_controller_reconcile_duration_seconds_sum", &[]), Some(0.3));
    assert_eq!(metric(&text, "kopiur_snapshot_size_bytes", "t", "s1"), Some(42.0));
    assert_eq!(sample(&text, "kopiur_resource_phase", &[("name", "s1"), ("phase", "Succeeded")]), Some(1.0));
    assert_eq!(sample(&text, "kopiur_resource_phase", &[("kind", "Repository"), ("phase", "Ready")]), Some(1.0));
    assert_eq!(metric(&text, "kopiur_repository_consecutive_backend_failures", "t", "r"), Some(0.0));
}
