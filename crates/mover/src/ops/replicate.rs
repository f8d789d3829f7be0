//! `Replicate`: `repository sync-to` the destination, with its credentials.
use chrono::Utc;
use kopiur_api::names::constants;
use kopiur_kopia::Output;
use kopiur_kopia::cmd;
use serde_json::json;

use super::{Ctx, Exit, LONG_COMMAND_TIMEOUT, rfc3339};
use crate::result::{MAX_LOG_TAIL_BYTES, Report, ResultSink, tail_bytes};
use crate::workspec::ReplicateOp;

impl<S: ResultSink> Ctx<S> {
    pub(super) async fn replicate(&self, op: &ReplicateOp) -> Exit {
        if let Err(e) = self.connect(true).await {
            return self.fail(&e).await;
        }
        let c = match cmd::sync_to(&op.destination, &op.sync) {
            Ok(c) => c.with_timeout(LONG_COMMAND_TIMEOUT),
            Err(e) => return self.fail(&e).await,
        };
        // The destination's credentials arrive as KOPIUR_DEST_<X>; only the sync-to child
        // sees them as <X>, overriding the source's.
        let runner = self.runner.clone().envs(dest_env(std::env::vars()));
        let start = Utc::now();
        match self.with_heartbeat(runner.run(&c)).await.and_then(Output::ok) {
            Ok(out) => {
                self.report(Report::Status(json!({"status": {
                    "phase": "Succeeded",
                    "timing": {"startTime": rfc3339(start), "endTime": rfc3339(Utc::now())},
                    "logTail": tail_bytes(&out.stderr_tail.join("\n"), MAX_LOG_TAIL_BYTES),
                }})))
                .await;
                Exit::Success
            }
            Err(e) => self.fail(&e).await,
        }
    }
}

/// `KOPIUR_DEST_X=v` -> `X=v`.
pub fn dest_env(vars: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    vars.filter_map(|(k, v)| {
        k.strip_prefix(constants::DESTINATION_ENV_PREFIX).filter(|s| !s.is_empty()).map(|s| (s.to_string(), v))
    })
    .collect()
}
