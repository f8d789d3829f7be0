//! Schema plumbing shared by the CRD types: the union shape the spec prescribes (docs/design/api-contract.md §1.2), CEL
//! rule builders and the size bounds that keep CEL cost estimates under the apiserver's limit.

use schemars::{Schema, transform::Transform};
use serde_json::{Map, Value, json};

/// CEL that turns a `Duration` string (bare seconds or Go-style units) into a CEL duration.
pub fn cel_duration(expr: &str) -> String {
    format!("duration({expr}.matches('^[0-9]+$') ? {expr} + 's' : {expr})")
}

/// Rule text for "this duration is at least `min`".
pub fn duration_at_least(min: &str) -> String {
    format!("{} >= duration('{min}')", cel_duration("self"))
}

/// Rule text for "this duration is at most `max`".
pub fn duration_at_most(max: &str) -> String {
    format!("{} <= duration('{max}')", cel_duration("self"))
}

/// Rewrites the schema schemars emits for an externally tagged enum (a `oneOf` of
/// single-property objects) into the shape docs/design/api-contract.md §1.2 prescribes: one plain object
/// with an optional property per variant and a CEL rule demanding exactly one of them.
/// `oneOf` is avoided because it gives unreadable errors and fights structural schemas.
pub struct ExactlyOne {
    /// Prepended to `set exactly one of: …` (e.g. `source: `).
    pub prefix: &'static str,
}

impl Transform for ExactlyOne {
    fn transform(&mut self, schema: &mut Schema) {
        let obj = schema.ensure_object();
        let variants = match obj.remove("oneOf") {
            Some(Value::Array(variants)) => variants,
            Some(other) => {
                obj.insert("oneOf".into(), other);
                return;
            }
            None => return,
        };
        let mut properties = match obj.remove("properties") {
            Some(Value::Object(map)) => map,
            Some(_) | None => Map::new(),
        };
        let mut names = Vec::new();
        for variant in variants {
            let description = variant.get("description").cloned();
            let Some(Value::Object(props)) = variant.get("properties").cloned() else {
                continue;
            };
            for (name, mut sub) in props {
                if let (Some(desc), Value::Object(sub_obj)) = (&description, &mut sub)
                    && !sub_obj.contains_key("description")
                {
                    sub_obj.insert("description".into(), desc.clone());
                }
                names.push(name.clone());
                properties.insert(name, sub);
            }
        }
        obj.insert("type".into(), json!("object"));
        obj.insert("properties".into(), Value::Object(properties));
        let has: Vec<String> = names.iter().map(|n| format!("has(self.{n})")).collect();
        let rule = json!({
            "rule": format!("[{}].filter(x, x).size() == 1", has.join(", ")),
            "message": format!("{}set exactly one of: {}", self.prefix, names.join(", ")),
        });
        match obj.get_mut("x-kubernetes-validations") {
            Some(Value::Array(rules)) => rules.insert(0, rule),
            Some(_) | None => {
                obj.insert("x-kubernetes-validations".into(), json!([rule]));
            }
        }
    }
}

/// Adds one CEL rule to a schema (for hand-written schemas and transforms).
pub fn push_rule(schema: &mut Schema, rule: &str, message: &str) {
    let entry = json!({"rule": rule, "message": message});
    let obj = schema.ensure_object();
    match obj.get_mut("x-kubernetes-validations") {
        Some(Value::Array(rules)) => rules.push(entry),
        Some(_) | None => {
            obj.insert("x-kubernetes-validations".into(), json!([entry]));
        }
    }
}

/// Marks a list as a list-map keyed by `key` (conditions by `type`, preflight checks by `name`).
pub struct ListMap(pub &'static str);

impl Transform for ListMap {
    fn transform(&mut self, schema: &mut Schema) {
        let obj = schema.ensure_object();
        obj.insert("x-kubernetes-list-type".into(), json!("map"));
        obj.insert("x-kubernetes-list-map-keys".into(), json!([self.0]));
    }
}

/// Patterns shared by several fields.
pub mod pattern {
    /// A DNS-1123 label (namespaces).
    pub const DNS_LABEL: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
    /// An identity component: no `@`, `:`, whitespace or control characters.
    pub const IDENTITY_COMPONENT: &str = r"^[^@:\s\x00-\x1f\x7f]{1,253}$";
    /// IANA zone names (existence is checked at reconcile time).
    pub const TIMEZONE: &str = r"^[A-Za-z0-9_+\-/]{1,64}$";
    /// Shape-only cron check; the full parse happens at reconcile time.
    pub const CRON: &str = r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|\S+( +\S+){4})$";
    /// The duration grammar of docs/design/api-contract.md §1.3.
    pub const DURATION: &str = r"^([0-9]+|([0-9]+[hms])+)$";
}
