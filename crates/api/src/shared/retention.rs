//! GFS retention over a policy's Snapshots (docs/design/api-contract.md §2.4). The selection itself lives in
//! `domain::retention`.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("[has(self.keepLatest) && self.keepLatest > 0, has(self.keepHourly) && self.keepHourly > 0, has(self.keepDaily) && self.keepDaily > 0, has(self.keepWeekly) && self.keepWeekly > 0, has(self.keepMonthly) && self.keepMonthly > 0, has(self.keepAnnual) && self.keepAnnual > 0].exists(x, x)")
    .message("retention keeps nothing: set at least one keep* field above 0, or omit retention to never prune"))]
pub struct Retention {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub keep_latest: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub keep_hourly: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub keep_daily: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub keep_weekly: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub keep_monthly: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub keep_annual: Option<i32>,
}
