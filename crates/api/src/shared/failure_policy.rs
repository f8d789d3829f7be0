//! Job failure handling passed through to mover Jobs (docs/design/api-contract.md §2.2).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Every field is a resolved default: absent values come from the layer below, so nothing
/// here is schema-defaulted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailurePolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub backoff_limit: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub active_deadline_seconds: Option<i64>,
    /// How long a pod may stay unstarted before the run fails with `MoverPodWedged`; bootstrap and
    /// probe Jobs ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub pod_startup_deadline_seconds: Option<i64>,
}

impl FailurePolicy {
    pub const DEFAULT_BACKOFF_LIMIT: i32 = 2;
    pub const DEFAULT_POD_STARTUP_DEADLINE_SECONDS: i64 = 300;
    pub const BOOTSTRAP_INITIAL_DEADLINE_SECONDS: i64 = 120;
    pub const SEED_DEADLINE_SECONDS: i64 = 86_400;

    pub fn resolved_backoff_limit(policy: Option<&Self>) -> i32 {
        policy.and_then(|p| p.backoff_limit).unwrap_or(Self::DEFAULT_BACKOFF_LIMIT)
    }

    pub fn resolved_pod_startup_deadline_seconds(policy: Option<&Self>) -> i64 {
        policy.and_then(|p| p.pod_startup_deadline_seconds).unwrap_or(Self::DEFAULT_POD_STARTUP_DEADLINE_SECONDS)
    }
}
