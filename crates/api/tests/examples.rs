//! Every example in deploy/examples parses the cluster's way (YAML -> JSON value -> typed ->
//! JSON) without losing a field, and carries a first comment line saying what it shows.

mod support;

use serde_json::Value;
use support::*;

fn round_trip(kind: &str, value: &Value) -> Value {
    use kopiur_api::*;
    fn rt<T: serde::de::DeserializeOwned + serde::Serialize>(v: &Value) -> Value {
        let typed: T = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("decoding {v}: {e}"));
        serde_json::to_value(typed).unwrap()
    }
    match kind {
        "Repository" => rt::<Repository>(value),
        "ClusterRepository" => rt::<ClusterRepository>(value),
        "SnapshotPolicy" => rt::<SnapshotPolicy>(value),
        "Snapshot" => rt::<Snapshot>(value),
        "SnapshotSchedule" => rt::<SnapshotSchedule>(value),
        "Restore" => rt::<Restore>(value),
        "Maintenance" => rt::<Maintenance>(value),
        "RepositoryReplication" => rt::<RepositoryReplication>(value),
        other => panic!("unknown kind {other}"),
    }
}

#[test]
fn examples_round_trip_without_losing_fields() {
    let dir = repo_root().join("deploy/examples");
    let mut kinds = std::collections::BTreeSet::new();
    for path in yaml_files(&dir) {
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("# Demonstrates: "), "{}: first line must say what it demonstrates", path.display());
        for doc in yaml_docs(&path) {
            if !doc["apiVersion"].as_str().unwrap_or_default().starts_with("kopiur.home-operations.com/") {
                continue; // a PVC or Secret an example brings along
            }
            let kind = doc["kind"].as_str().unwrap().to_owned();
            let out = round_trip(&kind, &doc);
            if let Some(diff) = missing_from(&doc, &out, "") {
                panic!("{}: a field was lost or changed: {diff}", path.display());
            }
            // What the typed form adds must be exactly what the apiserver would default.
            let mut defaulted = doc.clone();
            apply_defaults(&schema_for_kind(&kind), &mut defaulted);
            assert_eq!(out["spec"], defaulted["spec"], "{}", path.display());
            kinds.insert(kind);
        }
    }
    assert_eq!(kinds.len(), 8, "one example per kind: {kinds:?}");
}

#[test]
fn unknown_phase_survives_a_round_trip_and_is_not_terminal() {
    use kopiur_api::snapshot::{SnapshotPhase, SnapshotStatus};
    let status: SnapshotStatus = serde_json::from_value(serde_json::json!({"phase": "Verifying"})).unwrap();
    let phase = status.phase.clone().unwrap();
    assert_eq!(phase, SnapshotPhase::Unknown("Verifying".into()));
    assert!(!phase.is_terminal());
    assert_eq!(serde_json::to_value(&status).unwrap()["phase"], "Verifying");
    assert!(SnapshotPhase::parse("Succeeded").is_terminal());
}

#[test]
fn a_union_with_two_keys_does_not_decode() {
    let bad = serde_json::json!({"s3": {"bucket": "bkt"}, "filesystem": {"path": "/d"}});
    assert!(serde_json::from_value::<kopiur_api::shared::Backend>(bad).is_err());
    let empty = serde_json::json!({});
    assert!(serde_json::from_value::<kopiur_api::shared::Backend>(empty).is_err());
    let all_false = serde_json::json!({"all": false});
    assert!(serde_json::from_value::<kopiur_api::cluster_repository::AllowedNamespaces>(all_false).is_err());
}
