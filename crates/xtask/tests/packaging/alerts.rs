//! deploy/prometheus: every alert of docs/design/observability.md §10.3 with its `for` (docs/design/architecture.md §12) and severity,
//! runbook links that resolve in docs/operations.md, and the promtool unit tests.
use std::collections::BTreeSet;

use serde_json::Value;

use super::{dashboard::spec_series_names, promql::metric_names, read, repo_root, yaml_file};

/// docs/design/observability.md §10.3 and docs/design/architecture.md §12: (alert, for, severity).
const SPEC_ALERTS: &[(&str, &str, &str)] = &[
    ("KopiurRepositoryBreakerOpen", "15m", "warning"),
    ("KopiurSnapshotsGated", "30m", "info"),
    ("KopiurRepositoryNotReady", "15m", "critical"),
    ("KopiurMassDeletionHeld", "5m", "warning"),
    ("KopiurBackupStale", "30m", "warning"),
    ("KopiurBackupConsecutiveFailures", "15m", "warning"),
    ("KopiurLastBackupFailed", "10m", "warning"),
    ("KopiurRestoreFailed", "10m", "warning"),
    ("KopiurStagedObjectsLeft", "5m", "warning"),
    ("KopiurReconcileErrorsHigh", "15m", "warning"),
    ("KopiurLeaderElectionFlapping", "5m", "warning"),
];

/// Condition and event reasons that stop work until something changes; each has a runbook entry.
const BLOCKED_REASONS: &[&str] = &[
    "BreakerOpen",
    "RepositoryNotReady",
    "RepositoryNotInitialized",
    "RepositoryReinitializeBlocked",
    "InvalidReinitializeAck",
    "RepositoryUniqueIdMismatch",
    "MassDeletionHeld",
    "InvalidMassDeletionAck",
    "SnapshotDeletionBatchFailed",
    "MissingCredentialsSecret",
    "SourcePvcMissing",
    "PreflightFailed",
    "RepositoryReadOnly",
    "PolicyNotFound",
    "WorkSpecTooLarge",
    "MoverPodWedged",
    "TooManyIndexBlobs",
    "MaintenanceNotConfigured",
    "SnapshotRetainedOnScheduleDelete",
    "DiscoveredSnapshotUnplaced",
];

pub fn rules() -> Vec<Value> {
    let doc = yaml_file("deploy/prometheus/kopiur-rules.yaml");
    doc["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").iter().cloned())
        .collect()
}

/// GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes.
fn anchors(markdown: &str) -> BTreeSet<String> {
    markdown
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| {
            l.trim_start_matches('#')
                .trim()
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect()
}

#[test]
fn rules_file_has_every_spec_alert_and_only_those() {
    let rules = rules();
    let names: Vec<&str> = rules.iter().map(|r| r["alert"].as_str().expect("only alerting rules")).collect();
    let expected: BTreeSet<&str> = SPEC_ALERTS.iter().map(|a| a.0).collect();
    assert_eq!(names.iter().copied().collect::<BTreeSet<_>>(), expected);
    assert_eq!(names.len(), expected.len(), "an alert is defined twice");
    let allowed = spec_series_names();
    for (name, for_, severity) in SPEC_ALERTS {
        let r = rules.iter().find(|r| r["alert"] == *name).unwrap();
        assert_eq!(r["for"], *for_, "{name}: `for`");
        assert_eq!(r["labels"]["severity"], *severity, "{name}: severity");
        let expr = r["expr"].as_str().unwrap();
        for m in metric_names(expr) {
            assert!(allowed.contains(&m), "{name}: `{m}` is not a metric of docs/design/observability.md §10.1");
        }
        for a in ["summary", "description", "runbook_url"] {
            assert!(r["annotations"][a].as_str().is_some_and(|s| !s.is_empty()), "{name}: annotation {a}");
        }
        assert!(
            r["annotations"]["description"].as_str().unwrap().contains("kubectl "),
            "{name}: the description names the first command to run"
        );
    }
    let stale = rules.iter().find(|r| r["alert"] == "KopiurBackupStale").unwrap();
    assert!(stale["expr"].as_str().unwrap().ends_with("> 172800"), "backupStaleAfterSeconds default 172800");
}

#[test]
fn runbook_urls_resolve_in_operations_md() {
    let ops = anchors(&read("docs/operations.md"));
    for r in rules() {
        let url = r["annotations"]["runbook_url"].as_str().unwrap();
        let (doc, anchor) = url.split_once('#').unwrap_or_else(|| panic!("{url}: no anchor"));
        assert!(doc.ends_with("/docs/operations.md"), "{url}: must point at docs/operations.md");
        assert_eq!(anchor, r["alert"].as_str().unwrap().to_lowercase(), "{url}: anchor named after the alert");
        assert!(ops.contains(anchor), "docs/operations.md has no heading for #{anchor}");
    }
    for reason in BLOCKED_REASONS {
        assert!(ops.contains(&reason.to_lowercase()), "docs/operations.md has no runbook entry `### {reason}`");
    }
}

#[test]
fn every_alert_has_promtool_tests() {
    let dir = repo_root().join("deploy/prometheus/tests");
    let mut tested = BTreeSet::new();
    for e in std::fs::read_dir(&dir).expect("deploy/prometheus/tests") {
        let p = e.unwrap().path();
        if p.extension().and_then(|x| x.to_str()) != Some("yaml") {
            continue;
        }
        let doc: serde_norway::Value = serde_norway::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        let doc = serde_json::to_value(doc).unwrap();
        for t in doc["tests"].as_array().into_iter().flatten() {
            for a in t["alert_rule_test"].as_array().into_iter().flatten() {
                let name = a["alertname"].as_str().unwrap().to_string();
                let fires = a["exp_alerts"].as_array().is_some_and(|x| !x.is_empty());
                tested.insert((name, fires));
            }
        }
    }
    for (name, _, _) in SPEC_ALERTS {
        assert!(tested.contains(&(name.to_string(), true)), "{name}: no promtool case where it fires");
        assert!(tested.contains(&(name.to_string(), false)), "{name}: no promtool case where it does not fire");
    }
}

/// The labels of `kopiur_resource_phase` as the controller renders them (docs/design/observability.md §10.1;
/// the controller's unit test `resource_phase::the_restore_failed_alert_selects_the_exported_series`
/// renders a Failed Restore and matches it against these same rule files).
const PHASE_LABELS: [&str; 4] = ["kind", "namespace", "name", "phase"];

/// `metric{a="b",...}` of a promtool input series as a label map (the metric name is dropped).
fn series_labels(series: &str) -> (String, std::collections::BTreeMap<String, String>) {
    let (name, rest) = series.split_once('{').unwrap_or((series, "}"));
    let labels = rest
        .trim_end_matches('}')
        .split(',')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("label=value");
            (k.trim().to_string(), v.trim().trim_matches('"').to_string())
        })
        .collect();
    (name.to_string(), labels)
}

/// `KopiurRestoreFailed` selects what the controller exports for a Failed Restore: its
/// `kopiur_resource_phase` matchers use only the family's labels, name the Restore CRD's kind and
/// a value of its `status.phase` enum, and the promtool case where it fires feeds it a series
/// with exactly the controller's label set (and not a Completed Restore's or a Repository's).
#[test]
fn restore_failed_selects_the_series_the_controller_exports() {
    let crd = yaml_file("deploy/crds/restores.kopiur.home-operations.com.yaml");
    let kind = crd["spec"]["names"]["kind"].as_str().expect("CRD kind").to_string();
    let phases: Vec<String> =
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["phase"]["enum"]
            .as_array()
            .expect("status.phase enum")
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect();
    for file in ["deploy/prometheus/kopiur-rules.yaml", "deploy/helm/kopiur/prometheus/kopiur-rules.yaml"] {
        let doc = yaml_file(file);
        let expr = doc["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .flat_map(|g| g["rules"].as_array().expect("rules").iter())
            .find(|r| r["alert"] == "KopiurRestoreFailed")
            .and_then(|r| r["expr"].as_str())
            .unwrap_or_else(|| panic!("{file}: KopiurRestoreFailed"))
            .to_string();
        let sels = super::promql::selectors(&expr, "kopiur_resource_phase");
        assert_eq!(sels.len(), 1, "{file}: one kopiur_resource_phase selector in {expr}");
        let ms = &sels[0];
        for m in ms {
            assert!(
                PHASE_LABELS.contains(&m.label.as_str()),
                "{file}: matcher on a label the controller never sets: {m:?}"
            );
        }
        let kind_m = ms.iter().find(|m| m.label == "kind").expect("the alert selects a kind");
        assert_eq!((kind_m.op.as_str(), kind_m.value.as_str()), ("=", kind.as_str()), "{file}: the Restore CRD kind");
        let phase_m = ms.iter().find(|m| m.label == "phase").expect("the alert selects a phase");
        assert!(phase_m.op == "=" && phases.contains(&phase_m.value), "{file}: {phase_m:?} not in {phases:?}");
        assert_eq!(phase_m.value, "Failed");
        // What the controller renders for a Failed and a Completed Restore, and a Failed Repository.
        let exported = |kind: &str, phase: &str| {
            let l: std::collections::BTreeMap<String, String> = PHASE_LABELS
                .iter()
                .zip([kind, "media", "restore-db", phase])
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            l
        };
        assert!(ms.iter().all(|m| m.matches(&exported(&kind, "Failed"))), "{file}: selects the Failed Restore");
        assert!(!ms.iter().all(|m| m.matches(&exported(&kind, "Completed"))), "{file}: not a Completed one");
        assert!(!ms.iter().all(|m| m.matches(&exported("Repository", "Failed"))), "{file}: not a Repository");
    }
    // The promtool case in which it fires feeds it series in the controller's label set.
    let tests = yaml_file("deploy/prometheus/tests/backups.yaml");
    let case = tests["tests"]
        .as_array()
        .expect("tests")
        .iter()
        .find(|t| {
            t["alert_rule_test"].as_array().into_iter().flatten().any(|a| {
                a["alertname"] == "KopiurRestoreFailed" && a["exp_alerts"].as_array().is_some_and(|x| !x.is_empty())
            })
        })
        .expect("a promtool case where KopiurRestoreFailed fires");
    let mut restore_series = 0;
    for s in case["input_series"].as_array().expect("input_series") {
        let (name, labels) = series_labels(s["series"].as_str().expect("series"));
        if name != "kopiur_resource_phase" {
            continue;
        }
        let keys: Vec<&str> = labels.keys().map(String::as_str).collect();
        let mut want = PHASE_LABELS.to_vec();
        want.sort();
        assert_eq!(keys, want, "promtool input {labels:?} is not in the controller's label set");
        restore_series += usize::from(labels["kind"] == kind);
    }
    assert!(restore_series >= 2, "a Failed and a Completed Restore are fed to the alert");
}

#[test]
fn promtool_checks_and_unit_tests_pass() {
    let script = repo_root().join("deploy/prometheus/test.sh");
    let out = super::run({
        let mut c = std::process::Command::new("bash");
        c.arg(&script);
        c
    });
    let all = format!("{}{}", out.stdout, out.stderr);
    if all.contains("promtool not found") {
        panic!(
            "promtool is missing: install the Debian package `prometheus` (apt-get install -y prometheus) or set PROMTOOL"
        );
    }
    assert!(out.ok, "deploy/prometheus/test.sh failed:\n{all}");
    assert!(all.contains("SUCCESS: 11 rules found"), "promtool check rules:\n{all}");
    assert!(!all.contains("FAILED"), "{all}");
}
