//! The kopia identity override on a SnapshotPolicy (docs/design/api-contract.md §2.5).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    /// Defaults to the SnapshotPolicy's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[^@:\s\x00-\x1f\x7f]{1,253}$"))]
    pub username: Option<String>,
    /// Defaults to the namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[^@:\s\x00-\x1f\x7f]{1,253}$"))]
    pub hostname: Option<String>,
}
