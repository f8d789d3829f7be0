//! The one status write every kind uses (crate root): a JSON merge PATCH of `.status` from what
//! the reconcile read to what it decided, skipped when nothing changed, and guarded by the
//! resourceVersion it read when the caller has one. See docs/design/reconcile-shape.md.

use kube::api::{Api, Patch, PatchParams};
use serde_json::Value;

use crate::error::{ApiStep, Error};

/// What a status write did. The outcome is explicit because callers act on it differently: a
/// Job is deleted only after a Failed status [`landed`](StatusWrite::landed); an Event is
/// published only when something was [`written`](StatusWrite::written).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusWrite {
    /// The status already read `next`: no request was sent (an idle object writes nothing).
    Unchanged,
    /// The PATCH was accepted: the stored status now reads `next`.
    Written,
    /// The resourceVersion guard lost (HTTP 409): a newer object exists (the mover PATCHes the
    /// same status) and its watch event brings the reconcile back. Not an error.
    Conflict,
}

impl StatusWrite {
    /// The stored status reads `next` (written now, or it already did).
    pub fn landed(self) -> bool {
        match self {
            StatusWrite::Unchanged | StatusWrite::Written => true,
            StatusWrite::Conflict => false,
        }
    }

    /// A request changed the stored status.
    pub fn written(self) -> bool {
        match self {
            StatusWrite::Written => true,
            StatusWrite::Unchanged | StatusWrite::Conflict => false,
        }
    }
}

/// Writes `next` over `current` on `obj`, guarded by the resourceVersion `obj` was read at.
pub async fn write_status<K, S>(api: &Api<K>, obj: &K, current: &S, next: &S) -> Result<StatusWrite, Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    S: serde::Serialize + PartialEq,
{
    if current == next {
        return Ok(StatusWrite::Unchanged);
    }
    let meta = obj.meta();
    let name = meta.name.as_deref().unwrap_or_default();
    let old = serde_json::to_value(current).unwrap_or_default();
    let new = serde_json::to_value(next).unwrap_or_default();
    Ok(write_status_value(api, name, meta.resource_version.as_deref(), &old, &new).await.step("write status")?)
}

/// The same write over status values already rendered (a kind whose status is reached through
/// a trait, like the two repository kinds). `guard: None` sends no resourceVersion: the write
/// wins over a concurrent one, for statuses only the controller writes. `current` and `next`
/// may hold only the fields a caller owns (a repository's conditions): the patch touches no other.
pub async fn write_status_value<K>(
    api: &Api<K>,
    name: &str,
    guard: Option<&str>,
    current: &Value,
    next: &Value,
) -> Result<StatusWrite, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if current == next {
        return Ok(StatusWrite::Unchanged);
    }
    let mut body = serde_json::json!({ "status": merge_patch(current, next) });
    if let Some(rv) = guard {
        body["metadata"] = serde_json::json!({ "resourceVersion": rv });
    }
    match api.patch_status(name, &PatchParams::default(), &Patch::Merge(&body)).await {
        Ok(_) => Ok(StatusWrite::Written),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(StatusWrite::Conflict),
        Err(e) => Err(e),
    }
}

/// A JSON merge patch from `old` to `new`: keys that disappeared become explicit nulls, so
/// cleared fields (a closed breaker's `strictRetry`) are really removed from stored status.
pub fn merge_patch(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut out = serde_json::Map::new();
            for k in o.keys() {
                if !n.contains_key(k) {
                    out.insert(k.clone(), Value::Null);
                }
            }
            for (k, v) in n {
                let patched = match o.get(k) {
                    Some(ov) => merge_patch(ov, v),
                    None => v.clone(),
                };
                out.insert(k.clone(), patched);
            }
            Value::Object(out)
        }
        (
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Array(_) | Value::Object(_),
            _,
        ) => new.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_say_what_landed_and_what_was_sent() {
        assert!(StatusWrite::Unchanged.landed() && !StatusWrite::Unchanged.written());
        assert!(StatusWrite::Written.landed() && StatusWrite::Written.written());
        assert!(!StatusWrite::Conflict.landed() && !StatusWrite::Conflict.written());
    }

    #[test]
    fn merge_patch_nulls_removed_keys_and_keeps_nested_changes() {
        let old = serde_json::json!({"a": 1, "b": {"c": 2, "d": 3}, "gone": true});
        let new = serde_json::json!({"a": 1, "b": {"c": 5}, "e": [1]});
        assert_eq!(
            merge_patch(&old, &new),
            serde_json::json!({"a": 1, "b": {"c": 5, "d": null}, "e": [1], "gone": null})
        );
    }

    use serde_json::json;

    #[test]
    fn removed_keys_become_null_recursively() {
        let old = json!({"phase": "Degraded", "health": {"consecutiveProbeFailures": 4, "strictRetry": {"attempt": 2}, "breakerOpenedAt": "t"}});
        let new = json!({"phase": "Ready", "health": {"consecutiveProbeFailures": 0}});
        let p = merge_patch(&old, &new);
        assert_eq!(
            p,
            json!({"phase": "Ready", "health": {"consecutiveProbeFailures": 0, "strictRetry": null, "breakerOpenedAt": null}})
        );
    }
}
