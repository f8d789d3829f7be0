//! Pieces every status shares.

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// Timestamps in status are RFC 3339 in UTC.
pub type Time = chrono::DateTime<chrono::Utc>;
