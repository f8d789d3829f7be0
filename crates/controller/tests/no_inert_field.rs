//! No inert field (docs/design/api-contract.md §1.9, §15): every leaf of every generated CRD's `spec` schema is
//! read by code, refused at admission or reconcile, or on the documented advisory list.
//! The classification lives in `kopiur_controller::field_registry`; this test walks the schemas
//! the CRDs are generated from and checks every leaf against it, and every rule's evidence
//! against the source.
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use kopiur_controller::field_registry::{ADVISORY, Class, Rule, rules};
use serde_json::Value;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every leaf under `schema`, as `spec.a.b` (`[]` for list items, `.*` for map values). An
/// object without properties (a free-form or preserve-unknown-fields object) is a leaf.
fn leaves(schema: &Value, path: &str, out: &mut Vec<String>) {
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            leaves(v, &format!("{path}.{k}"), out);
        }
        return;
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("array") if schema.get("items").is_some() => leaves(&schema["items"], &format!("{path}[]"), out),
        Some("object") if schema.get("additionalProperties").is_some_and(Value::is_object) => {
            leaves(&schema["additionalProperties"], &format!("{path}.*"), out)
        }
        _ => out.push(path.to_string()),
    }
}

/// `rule` covers `leaf` when it is the leaf or one of its parents.
fn covers(rule: &str, leaf: &str) -> bool {
    leaf == rule || leaf.strip_prefix(rule).is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
}

/// Every CRD kind and the leaves of its `spec`.
fn crd_leaves() -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for crd in kopiur_api::crds() {
        let v = serde_json::to_value(&crd).unwrap();
        let kind = v["spec"]["names"]["kind"].as_str().unwrap().to_string();
        let versions = v["spec"]["versions"].as_array().unwrap();
        let mut all = Vec::new();
        for ver in versions {
            let spec = &ver["schema"]["openAPIV3Schema"]["properties"]["spec"];
            assert!(spec.is_object(), "{kind} has a spec schema");
            leaves(spec, "spec", &mut all);
        }
        all.sort();
        all.dedup();
        out.insert(kind, all);
    }
    out
}

fn winner<'a>(rules: &'a [Rule], kind: &str, leaf: &str) -> Option<&'a Rule> {
    rules.iter().filter(|r| r.kinds.contains(&kind) && covers(&r.path, leaf)).max_by_key(|r| r.path.len())
}

#[test]
fn every_crd_leaf_is_read_refused_or_advisory() {
    let rules = rules();
    let crds = crd_leaves();
    assert_eq!(crds.len(), 9, "every generated CRD is walked: {:?}", crds.keys());
    let mut unclassified = Vec::new();
    let mut total = 0;
    for (kind, ls) in &crds {
        for leaf in ls {
            total += 1;
            if winner(&rules, kind, leaf).is_none() {
                unclassified.push(format!("{kind} {leaf}"));
            }
        }
    }
    assert!(total > 1000, "the walk saw {total} leaves");
    assert!(
        unclassified.is_empty(),
        "{} CRD field(s) are neither read, refused nor advisory; wire each one (and add its rule to \
         crates/controller/src/field_registry.rs), refuse it, or document it as advisory:\n  {}",
        unclassified.len(),
        unclassified.join("\n  ")
    );
}

#[test]
fn every_rule_matches_a_field_and_names_real_evidence() {
    let crds = crd_leaves();
    let mut problems = Vec::new();
    let mut sources: BTreeMap<&str, String> = BTreeMap::new();
    for r in rules() {
        for kind in r.kinds {
            let ls = crds.get(*kind).unwrap_or_else(|| panic!("no CRD for kind {kind}"));
            if !ls.iter().any(|l| covers(&r.path, l)) {
                problems.push(format!("{kind} {}: matches no field (stale rule)", r.path));
            }
        }
        let text = sources.entry(r.file).or_insert_with(|| {
            let full = std::fs::read_to_string(workspace().join(r.file))
                .unwrap_or_else(|e| panic!("{} (rule {}): {e}", r.file, r.path));
            // Only the non-test part counts as evidence: everything before the tests module.
            full.split("#[cfg(test)]\nmod ").next().unwrap_or_default().to_string()
        });
        if !text.contains(r.symbol) {
            problems.push(format!("{} ({:?}): {} does not contain {:?}", r.path, r.class, r.file, r.symbol));
        }
    }
    problems.dedup();
    assert!(problems.is_empty(), "field registry problems:\n  {}", problems.join("\n  "));
}

#[test]
fn advisory_rules_are_exactly_the_documented_list() {
    let documented: BTreeSet<(String, String)> = ADVISORY.iter().map(|(k, p)| (k.to_string(), p.to_string())).collect();
    let mut registered = BTreeSet::new();
    for r in rules().into_iter().filter(|r| r.class == Class::Advisory) {
        // Repository rules apply to ClusterRepository too; the list names the Repository form.
        let kind = if r.kinds.contains(&"Repository") { "Repository" } else { r.kinds[0] };
        registered.insert((kind.to_string(), r.path.clone()));
    }
    assert_eq!(registered, documented, "advisory rules and the documented list differ");
    // The documented list is in the operations guide, each path verbatim.
    let ops = std::fs::read_to_string(workspace().join("docs/operations.md")).unwrap();
    let section = ops.split("### Fields accepted but not implemented").nth(1).expect("docs/operations.md section");
    for (_, p) in ADVISORY {
        let short = p.strip_prefix("spec.").unwrap();
        assert!(section.contains(&format!("`{short}`")), "docs/operations.md does not list `{short}` as advisory");
    }
}

#[test]
fn the_walk_itself_sees_nested_lists_maps_and_free_form_objects() {
    let crds = crd_leaves();
    let repo = &crds["Repository"];
    for expected in [
        "spec.backend.s3.bucket",
        "spec.moverDefaults.nodeSelector.*",
        "spec.moverDefaults.tolerations[].key",
        "spec.maintenance.mover.securityContext.capabilities.add[]",
    ] {
        assert!(repo.contains(&expected.to_string()), "{expected} is a leaf: {repo:?}");
    }
    assert!(crds["SnapshotPolicy"].contains(&"spec.verification".to_string()), "a free-form object is a leaf");
    assert!(covers("spec.backend.gcs", "spec.backend.gcs.auth.secretRef.name"));
    assert!(covers("spec.sources[].nfs", "spec.sources[].nfs.path"));
    assert!(!covers("spec.server", "spec.serverless"), "a prefix must end at a segment");
}
