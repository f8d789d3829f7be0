//! The generated CRDs: metadata, union shape, CEL hygiene and messages, and schema defaults
//! agreeing with the Rust types.

mod support;

use std::collections::BTreeSet;

use kopiur_api::names;
use serde_json::{Value, json};
use support::*;

#[test]
fn every_kind_has_category_short_name_status_and_printer_columns() {
    let expected = [
        ("Repository", "repositories", "kopiarepo", "Namespaced"),
        ("ClusterRepository", "clusterrepositories", "kopiacrepo", "Cluster"),
        ("SnapshotPolicy", "snapshotpolicies", "kopiasp", "Namespaced"),
        ("Snapshot", "snapshots", "kopiasnap", "Namespaced"),
        ("SnapshotSchedule", "snapshotschedules", "kopiasched", "Namespaced"),
        ("Restore", "restores", "kopiarestore", "Namespaced"),
        ("Maintenance", "maintenances", "kopiamaint", "Namespaced"),
        ("RepositoryReplication", "repositoryreplications", "kopiarepl", "Namespaced"),
        ("SnapshotReplication", "snapshotreplications", "kopiasrepl", "Namespaced"),
    ];
    let crds = kopiur_api::crds();
    assert_eq!(crds.len(), expected.len());
    for (crd, (kind, plural, short, scope)) in crds.iter().zip(expected) {
        assert_eq!(crd.spec.group, names::GROUP);
        assert_eq!(crd.spec.names.kind, kind);
        assert_eq!(crd.spec.names.plural, plural);
        assert_eq!(crd.spec.names.singular.as_deref(), Some(kind.to_lowercase().as_str()));
        assert_eq!(crd.spec.names.short_names.as_deref(), Some(&[short.to_owned()][..]));
        assert_eq!(crd.spec.names.categories.as_deref(), Some(&[names::CATEGORY.to_owned()][..]));
        assert_eq!(crd.spec.scope, scope);
        let v = &crd.spec.versions[0];
        assert_eq!(v.name, names::VERSION);
        assert!(v.served && v.storage);
        assert!(v.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some(), "{kind} has a status subresource");
        let cols = v.additional_printer_columns.as_ref().unwrap();
        assert_eq!(cols.last().unwrap().name, "Age", "{kind}");
    }
}

#[test]
fn unions_are_plain_objects_without_one_of() {
    for crd in kopiur_api::crds() {
        let text = serde_json::to_string(&crd).unwrap();
        assert!(
            !text.contains("\"oneOf\"") && !text.contains("\"anyOf\"") && !text.contains("\"allOf\""),
            "{}",
            crd.spec.names.kind
        );
    }
}

/// camelCase -> lower-case words without a plural `s` ("accessModes" -> "access mode").
fn words(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_uppercase() {
            out.push(' ');
        }
        out.extend(c.to_lowercase());
    }
    out.trim_end_matches('s').to_owned()
}

#[test]
fn every_cel_rule_has_a_message_that_names_a_field() {
    let mut count = 0;
    for crd in kopiur_api::crds() {
        let schema = serde_json::to_value(&crd.spec.versions[0].schema.as_ref().unwrap().open_api_v3_schema).unwrap();
        walk(&schema, &mut Vec::new(), &mut |path, node| {
            let Some(Value::Array(rules)) = node.get("x-kubernetes-validations") else { return };
            let children: Vec<String> = node
                .get("properties")
                .and_then(Value::as_object)
                .map(|p| p.keys().cloned().collect())
                .unwrap_or_default();
            for rule in rules {
                count += 1;
                let message = rule
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or_else(|| panic!("rule without message at {path:?}: {rule}"));
                let lower = message.to_lowercase();
                let mut candidates: Vec<String> = children.clone();
                candidates.extend(path.iter().filter(|p| !p.starts_with('[') && !p.starts_with('{')).cloned());
                let named = candidates.iter().any(|c| message.contains(c.as_str()) || lower.contains(&words(c)));
                assert!(named, "{} rule at {path:?} does not name a field: {message:?}", crd.spec.names.kind);
            }
        });
    }
    assert!(count >= 40, "expected the spec's CEL rules, found {count}");
}

/// Whether a rule reads `self.<name>` beyond a presence check (`has(self.<name>)` costs nothing).
fn reads_value(rule: &str, name: &str) -> bool {
    let needle = format!("self.{name}");
    rule.match_indices(&needle).any(|(i, _)| {
        let after = rule[i + needle.len()..].chars().next();
        let whole_name = !after.is_some_and(|c| c.is_ascii_alphanumeric());
        whole_name && !rule[..i].ends_with("has(")
    })
}

#[test]
fn cel_rules_stay_within_cost_bounds() {
    // Strings, lists and maps a rule reads carry maxLength / maxItems / maxProperties, or the
    // apiserver's cost estimate rejects the CRD.
    for crd in kopiur_api::crds() {
        let schema = serde_json::to_value(&crd.spec.versions[0].schema.as_ref().unwrap().open_api_v3_schema).unwrap();
        walk(&schema, &mut Vec::new(), &mut |path, node| {
            let Some(Value::Array(rules)) = node.get("x-kubernetes-validations") else { return };
            let check = |n: &serde_json::Map<String, Value>, what: &str| match n.get("type").and_then(Value::as_str) {
                Some("string") => {
                    assert!(n.contains_key("maxLength") || n.contains_key("enum"), "{what} string without maxLength")
                }
                Some("array") => assert!(n.contains_key("maxItems"), "{what} list without maxItems"),
                Some("object") if n.contains_key("additionalProperties") => {
                    assert!(n.contains_key("maxProperties"), "{what} map without maxProperties")
                }
                Some(_) | None => {}
            };
            check(node, &format!("{} {path:?}", crd.spec.names.kind));
            let props = node.get("properties").and_then(Value::as_object);
            for rule in rules {
                let text = rule["rule"].as_str().unwrap();
                for (name, child) in props.into_iter().flatten() {
                    let reads = reads_value(text, name);
                    if reads && let Value::Object(c) = child {
                        check(c, &format!("{} {path:?}.{name}", crd.spec.names.kind));
                    }
                }
            }
        });
    }
}

#[test]
fn defaults_fixtures_match_the_schema_and_the_rust_types() {
    let dir = crate_dir().join("tests/defaults");
    let mut seen = 0;
    for path in yaml_files(&dir) {
        let name = path.file_name().unwrap().to_str().unwrap();
        if name.ends_with(".expected.yaml") {
            continue;
        }
        seen += 1;
        let minimal = yaml_docs(&path).remove(0);
        let expected = yaml_docs(&path.with_file_name(name.replace(".yaml", ".expected.yaml"))).remove(0);
        let kind = minimal["kind"].as_str().unwrap();
        let schema = schema_for_kind(kind);
        let mut defaulted = minimal.clone();
        apply_defaults(&schema, &mut defaulted);
        if let Some(diff) = missing_from(&expected, &defaulted, "") {
            panic!("{name}: the schema does not materialize the expected default: {diff}");
        }
        // The Rust types fill in exactly what the schema does: typed(minimal) == defaulted.
        let typed = typed_round_trip(kind, &minimal);
        assert_eq!(typed["spec"], defaulted["spec"], "{name}: Rust serde defaults disagree with schema defaults");
    }
    assert!(seen >= 10, "{seen} default fixtures");
}

fn typed_round_trip(kind: &str, value: &Value) -> Value {
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
fn rust_default_impls_agree_with_decoding_an_empty_object() {
    use kopiur_api::maintenance::MaintenanceSchedule;
    use kopiur_api::repository::{Catalog, CreateSpec, DeletionProtection, Health, Probe, RepositoryMaintenance};
    use kopiur_api::snapshot_policy::PolicyDeletion;
    use kopiur_api::snapshot_schedule::ScheduleDeletion;
    fn check<T: Default + serde::de::DeserializeOwned + serde::Serialize + PartialEq + std::fmt::Debug>() {
        let decoded: T = serde_json::from_value(json!({})).unwrap();
        assert_eq!(decoded, T::default(), "{}", std::any::type_name::<T>());
    }
    check::<CreateSpec>();
    check::<Health>();
    check::<Probe>();
    check::<DeletionProtection>();
    check::<RepositoryMaintenance>();
    check::<MaintenanceSchedule>();
    check::<Catalog>();
    check::<PolicyDeletion>();
    check::<ScheduleDeletion>();
}

#[test]
fn parent_blocks_default_to_an_empty_object() {
    // docs/design/api-contract.md §1.10: the parent defaults to {} and its children materialize through
    // their own defaults.
    let repo = schema_for_kind("Repository");
    for field in ["create", "health", "deletionProtection", "maintenance"] {
        assert_eq!(repo["properties"]["spec"]["properties"][field]["default"], json!({}), "{field}");
    }
    assert_eq!(repo["properties"]["spec"]["properties"]["health"]["properties"]["probe"]["default"], json!({}));
    assert_eq!(schema_for_kind("SnapshotPolicy")["properties"]["spec"]["properties"]["deletion"]["default"], json!({}));
    assert_eq!(
        schema_for_kind("SnapshotSchedule")["properties"]["spec"]["properties"]["deletion"]["default"],
        json!({})
    );
    assert_eq!(schema_for_kind("Maintenance")["properties"]["spec"]["properties"]["schedule"]["default"], json!({}));
}

#[test]
fn resolved_defaults_are_not_in_the_schema() {
    let snap = schema_for_kind("Snapshot");
    assert!(snap["properties"]["spec"]["properties"]["deletionPolicy"].get("default").is_none());
    assert!(snap["properties"]["spec"]["properties"]["onScheduleDelete"].get("default").is_none());
    let restore = schema_for_kind("Restore");
    assert!(
        restore["properties"]["spec"]["properties"]["policy"]["properties"]["onMissingSnapshot"]
            .get("default")
            .is_none()
    );
    let policy = schema_for_kind("SnapshotPolicy");
    let source = &policy["properties"]["spec"]["properties"]["sources"]["items"]["properties"];
    for f in ["readOnly", "sourcePathStrategy"] {
        assert!(source[f].get("default").is_none(), "{f}");
    }
    let sched = schema_for_kind("SnapshotSchedule");
    assert!(sched["properties"]["spec"]["properties"]["schedule"]["properties"]["jitter"].get("default").is_none());
}

#[test]
fn invalid_fixtures_parse_and_name_the_field() {
    let dir = crate_dir().join("tests/invalid");
    let files = yaml_files(&dir);
    let mut expectations = BTreeSet::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let first = text.lines().next().unwrap();
        let expect = first
            .strip_prefix("# expect: ")
            .unwrap_or_else(|| panic!("{}: first line must be `# expect: …`", path.display()));
        assert!(!expect.trim().is_empty());
        let docs = yaml_docs(path);
        let update = path.to_str().unwrap().ends_with(".update.yaml");
        assert_eq!(docs.len(), if update { 2 } else { 1 }, "{}", path.display());
        let kind = docs[0]["kind"].as_str().unwrap();
        // S-layer expectations are apiserver field paths; C-layer ones must be a message that
        // the generated CRD for that kind actually carries.
        if !expect.starts_with("spec.") || expect.contains(" is immutable") {
            let crd_text = serde_json::to_string(&schema_for_kind(kind)).unwrap();
            assert!(crd_text.contains(expect), "{}: no CEL message {expect:?} in the {kind} CRD", path.display());
        }
        expectations.insert((kind.to_owned(), serde_json::to_string(&docs).unwrap()));
    }
    assert!(files.len() >= 30, "{} invalid fixtures", files.len());
    assert_eq!(expectations.len(), files.len(), "fixtures must be distinct");
}

#[test]
fn snapshot_origins_are_the_origin_vocabulary() {
    use kopiur_api::shared::phase::SnapshotOrigin;
    // `status.origin` and the `origin` label carry the same values (names.rs).
    let vocabulary = [
        names::origin::SCHEDULED,
        names::origin::MANUAL,
        names::origin::DISCOVERED,
        names::origin::ADOPTED,
        names::origin::REPLICATED,
    ];
    assert_eq!(SnapshotOrigin::KNOWN, vocabulary);
}
