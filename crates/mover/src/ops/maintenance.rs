//! `Maintenance`: the maintenance lease (take over or yield) and `maintenance run`.
use chrono::Utc;
use kopiur_api::names::reason;
use kopiur_kopia::classify;
use kopiur_kopia::cmd;
use kopiur_kopia::model::{self, MaintenanceInfo};
use kopiur_kopia::{KopiaError, Output};
use serde_json::json;

use super::{Ctx, Exit, LONG_COMMAND_TIMEOUT, rfc3339};
use crate::result::{MAX_LOG_TAIL_BYTES, Report, ResultSink, tail_bytes};
use crate::workspec::{MaintenanceMode, MaintenanceOp, TakeoverPolicy};

impl<S: ResultSink> Ctx<S> {
    pub(super) async fn maintenance(&self, op: &MaintenanceOp) -> Exit {
        if let Err(e) = self.connect_slow_ok().await {
            return self.fail(&e).await;
        }
        let before = match self.maintenance_info().await {
            Ok(i) => i,
            Err(e) => return self.fail(&e).await,
        };
        let owner = before.owner.clone();
        let ours = owner == op.lease_owner;
        let alias = op.owner_aliases.contains(&owner);
        let take_over = match (ours, alias, op.takeover_policy) {
            (true, _, _) => false,
            (false, true, _) | (false, false, TakeoverPolicy::Force) => true,
            (false, false, TakeoverPolicy::Never) => return self.yielded(&owner, reason::LEASE_HELD_BY_OTHER).await,
            (false, false, TakeoverPolicy::PromptCondition) => {
                return self.yielded(&owner, reason::LEASE_TAKEOVER_PROMPT).await;
            }
        };
        if take_over && let Err(e) = self.policy(cmd::maintenance_set_owner("me")).await {
            return self.fail(&e).await;
        }
        let full = match op.mode {
            MaintenanceMode::Full => true,
            MaintenanceMode::Quick => false,
        };
        let start = Utc::now();
        let run =
            self.with_heartbeat(self.runner.run(&cmd::maintenance_run(full).with_timeout(LONG_COMMAND_TIMEOUT))).await;
        let out = match run.and_then(Output::ok) {
            Ok(o) => o,
            Err(e) => {
                if let Some(o) = classify::maintenance_owner_mismatch(&e.stderr_tail().join("\n")) {
                    return self.yielded(&o, reason::LEASE_HELD_BY_OTHER).await;
                }
                return self.fail(&e).await;
            }
        };
        let after = self.maintenance_info().await.ok();
        // A held local lock skips maintenance silently with exit 0: only a grown run
        // history proves it ran.
        let ran = after.as_ref().map(|a| a.schedule.run_count() > before.schedule.run_count());
        self.report(Report::Status(json!({"status": {
            "phase": "Succeeded",
            "outcome": if ran == Some(false) { "Skipped" } else { "Ran" },
            "mode": if full { "full" } else { "quick" },
            "owner": after.as_ref().map(|a| a.owner.clone()).unwrap_or(op.lease_owner.clone()),
            "leaseOwned": true,
            // The schema keeps only `ownership`: the controller reads the outcome from it.
            "ownership": {"owner": after.map(|a| a.owner).unwrap_or(op.lease_owner.clone())},
            "timing": {"startTime": rfc3339(start), "endTime": rfc3339(Utc::now())},
            "logTail": tail_bytes(&out.stderr_tail.join("\n"), MAX_LOG_TAIL_BYTES),
        }})))
        .await;
        Exit::Success
    }

    pub(super) async fn maintenance_info(&self) -> Result<MaintenanceInfo, KopiaError> {
        let out = self.run(cmd::maintenance_info()).await?;
        model::parse("maintenance info", &out.stdout)
    }

    async fn yielded(&self, owner: &str, reason: &str) -> Exit {
        self.report(Report::Status(json!({"status": {
            "phase": "Yielded", "outcome": "Yielded", "owner": owner, "leaseOwned": false, "reason": reason,
            "ownership": {"owner": owner},
        }})))
        .await;
        Exit::Success
    }
}
