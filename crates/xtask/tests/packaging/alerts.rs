//! deploy/prometheus: every alert of behavior.md §10.3 with its `for` (§12) and severity,
//! runbook links that resolve in docs/operations.md, and the promtool unit tests.
use std::collections::BTreeSet;

use serde_json::Value;

use super::{dashboard::spec_series_names, promql::metric_names, read, repo_root, yaml_file};

/// behavior.md §10.3 and §12: (alert, for, severity).
const SPEC_ALERTS: &[(&str, &str, &str)] = &[
    ("KopiurRepositoryBreakerOpen", "15m", "warning"),
    ("KopiurSnapshotsGated", "30m", "info"),
    ("KopiurRepositoryNotReady", "15m", "critical"),
    ("KopiurMassDeletionHeld", "5m", "warning"),
    ("KopiurBackupStale", "30m", "warning"),
    ("KopiurBackupConsecutiveFailures", "15m", "warning"),
    ("KopiurLastBackupFailed", "10m", "warning"),
    ("KopiurRestoreFailed", "10m", "warning"),
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
            assert!(allowed.contains(&m), "{name}: `{m}` is not a metric of behavior.md §10.1");
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
        let doc: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
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
    assert!(all.contains("SUCCESS: 10 rules found"), "promtool check rules:\n{all}");
    assert!(!all.contains("FAILED"), "{all}");
}
