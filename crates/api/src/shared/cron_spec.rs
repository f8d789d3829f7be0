//! A cron with optional jitter and time zone (docs/design/api-contract.md §2.3).

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use crate::Duration;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CronSpec {
    /// Five fields (minute hour day-of-month month day-of-week) or a macro; `H` is replaced by
    /// a value hashed from the owning object's UID.
    #[schemars(
        length(max = 128),
        regex(pattern = r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|\S+( +\S+){4})$")
    )]
    pub cron: String,
    /// Each slot is delayed by a deterministic offset in `[0, jitter)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("duration(self.matches('^[0-9]+$') ? self + 's' : self) <= duration('24h')").message("jitter must be at most 24h"))]
    pub jitter: Option<Duration>,
    /// IANA zone; falls back to the repository's `scheduleDefaults.timezone`, then UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9_+\-/]{1,64}$"))]
    pub timezone: Option<String>,
}

impl CronSpec {
    pub fn new(cron: impl Into<String>) -> Self {
        Self { cron: cron.into(), jitter: None, timezone: None }
    }

    pub fn with_jitter(mut self, jitter: Duration) -> Self {
        self.jitter = Some(jitter);
        self
    }
}
