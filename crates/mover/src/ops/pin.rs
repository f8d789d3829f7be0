//! `SnapshotPin`: adds or removes kopiur's pin on one kopia snapshot (spec/api.md §7.1
//! `spec.pin`, the `<name>-pin` Job; spec/kopia.md `kopia snapshot pin <id> --add NAME |
//! --remove NAME`).
//!
//! Sequence: one connect with the work spec's identity, then one `snapshot pin`. kopia keeps a
//! pinned snapshot through its own retention; kopiur's retention skips a pinned Snapshot CR
//! itself. A pin never blocks an explicit `snapshot delete`, so the Snapshot's deletion plan
//! is unaffected.
//!
//! Results: success merge-patches `status.pinned` (the state now applied in kopia); a failure
//! writes `status.failure` with `op: "pin"` (the mover's message, which the controller shows
//! in `Pinned=False / PinJobFailed`) and exits by class like every other op (1 retryable, the
//! Job's backoff retries it; 3 non-retryable, `FailJob`).
use kopiur_kopia::cmd::KopiaCommand;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{Ctx, Exit};
use crate::result::{Report, ResultSink};

/// The pin name kopiur adds to a snapshot (`kopia snapshot list --json` shows it under
/// `pins`). One fixed name, so kopiur only ever removes its own pin, never a user's.
pub const PIN_NAME: &str = "kopiur";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotPinOp {
    /// The kopia manifest id (`status.snapshot.kopiaSnapshotID`).
    pub snapshot_id: String,
    /// The pin's name (normally [`PIN_NAME`]).
    pub pin: String,
    /// `true`: `--add`; `false`: `--remove`.
    pub add: bool,
}

/// `kopia snapshot pin <id> --add=<name>` or `--remove=<name>`.
pub fn command(op: &SnapshotPinOp) -> KopiaCommand {
    let flag = if op.add { "--add" } else { "--remove" };
    KopiaCommand {
        name: "snapshot pin",
        args: vec!["snapshot".into(), "pin".into(), op.snapshot_id.clone(), format!("{flag}={}", op.pin)],
        timeout: None,
    }
}

impl<S: ResultSink> Ctx<S> {
    pub(super) async fn pin(&self, op: &SnapshotPinOp) -> Exit {
        if op.snapshot_id.is_empty() || op.pin.is_empty() {
            let f = crate::result::Failure::contract("pin", "the pin names no snapshot id or no pin name".into());
            self.report(Report::Status(crate::result::failure_patch(&f))).await;
            return Exit::Contract;
        }
        if let Err(e) = self.connect(false).await {
            return self.fail(&e).await;
        }
        match self.run(command(op)).await {
            Ok(_) => {
                tracing::info!(snapshot = %op.snapshot_id, pin = %op.pin, add = op.add, "pin applied");
                self.report(Report::Status(json!({"status": {"pinned": op.add}}))).await;
                Exit::Success
            }
            Err(e) => self.fail(&e).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_and_remove_render_the_documented_argv() {
        let mut op = SnapshotPinOp { snapshot_id: "k0123abcd".into(), pin: PIN_NAME.into(), add: true };
        assert_eq!(command(&op).args, ["snapshot", "pin", "k0123abcd", "--add=kopiur"]);
        op.add = false;
        assert_eq!(command(&op).args, ["snapshot", "pin", "k0123abcd", "--remove=kopiur"]);
    }

    #[test]
    fn the_work_spec_variant_round_trips_with_the_pin_label() {
        let op = crate::workspec::Operation::SnapshotPin(SnapshotPinOp {
            snapshot_id: "k1".into(),
            pin: PIN_NAME.into(),
            add: true,
        });
        let v = serde_json::to_value(&op).unwrap();
        assert_eq!(v, serde_json::json!({"SnapshotPin": {"snapshotId": "k1", "pin": "kopiur", "add": true}}));
        assert_eq!(serde_json::from_value::<crate::workspec::Operation>(v).unwrap(), op);
        assert_eq!(op.label(), "pin");
    }
}
