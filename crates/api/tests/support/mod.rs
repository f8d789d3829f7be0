//! Helpers shared by the schema, fixture and example tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn repo_root() -> PathBuf {
    crate_dir().join("../..")
}

/// YAML files in a directory, sorted.
pub fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

/// Parses YAML the cluster's way: into a JSON value.
pub fn yaml_docs(path: &Path) -> Vec<Value> {
    use serde::Deserialize;
    let text = std::fs::read_to_string(path).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| {
            let v = serde_norway::Value::deserialize(doc).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            serde_json::to_value(v).unwrap()
        })
        .collect()
}

/// The openAPIV3Schema of the CRD serving `kind`.
pub fn schema_for_kind(kind: &str) -> Value {
    // Generating the CRDs is slow in debug builds; do it once per test binary.
    static SCHEMAS: std::sync::OnceLock<Vec<(String, Value)>> = std::sync::OnceLock::new();
    let schemas = SCHEMAS.get_or_init(|| {
        kopiur_api::crds()
            .into_iter()
            .map(|c| {
                (
                    c.spec.names.kind.clone(),
                    serde_json::to_value(&c.spec.versions[0].schema.as_ref().unwrap().open_api_v3_schema).unwrap(),
                )
            })
            .collect()
    });
    schemas.iter().find(|(k, _)| k == kind).map(|(_, s)| s.clone()).unwrap_or_else(|| panic!("no CRD for kind {kind}"))
}

/// What the apiserver does on write: fill `default` for every absent property, then recurse
/// (also into the values just defaulted and into list items).
pub fn apply_defaults(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(obj) => {
            if let Some(Value::Object(props)) = schema.get("properties") {
                for (name, prop_schema) in props {
                    if !obj.contains_key(name)
                        && let Some(default) = prop_schema.get("default")
                    {
                        obj.insert(name.clone(), default.clone());
                    }
                    if let Some(child) = obj.get_mut(name) {
                        apply_defaults(prop_schema, child);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    apply_defaults(item_schema, item);
                }
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
    }
}

/// Whether every field of `subset` is present in `full` with the same value (lists
/// element-wise, same length). Returns the first difference.
pub fn missing_from(subset: &Value, full: &Value, path: &str) -> Option<String> {
    match (subset, full) {
        (Value::Object(s), Value::Object(f)) => s.iter().find_map(|(k, v)| match f.get(k) {
            Some(fv) => missing_from(v, fv, &format!("{path}.{k}")),
            None => Some(format!("{path}.{k} is missing")),
        }),
        (Value::Array(s), Value::Array(f)) if s.len() == f.len() => {
            s.iter().zip(f).enumerate().find_map(|(i, (a, b))| missing_from(a, b, &format!("{path}[{i}]")))
        }
        (s, f) if s == f => None,
        (s, f) => Some(format!("{path}: expected {s}, got {f}")),
    }
}

/// A visitor of schema nodes: the property path and the node.
pub type Visit<'v, 'a> = dyn FnMut(&[String], &'a Map<String, Value>) + 'v;

/// Walks every schema node, with its property path.
pub fn walk<'a>(schema: &'a Value, path: &mut Vec<String>, visit: &mut Visit<'_, 'a>) {
    let Value::Object(node) = schema else { return };
    visit(path, node);
    if let Some(Value::Object(props)) = node.get("properties") {
        for (name, child) in props {
            path.push(name.clone());
            walk(child, path, visit);
            path.pop();
        }
    }
    if let Some(items) = node.get("items") {
        path.push("[]".into());
        walk(items, path, visit);
        path.pop();
    }
    if let Some(extra @ Value::Object(_)) = node.get("additionalProperties") {
        path.push("{}".into());
        walk(extra, path, visit);
        path.pop();
    }
}
