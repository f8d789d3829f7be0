//! `SnapshotPin`: adds or removes kopiur's pin on one kopia snapshot (docs/design/api-contract.md §7.1
//! `spec.pin`, the `<name>-pin` Job; kopia's `kopia snapshot pin <id> --add NAME |
//! --remove NAME`).
//!
//! Sequence: one connect with the work spec's identity; `manifest show <id>` (the manifest's
//! source, times and root object); `snapshot pin <id> --add|--remove=<name>`; `snapshot list
//! --json <source>`. kopia saves a changed manifest under a **new id** (and deletes the old one),
//! so the manifest is found again by source, start and end time and root object, and its new id
//! is reported: `status.snapshot.kopiaSnapshotID` keeps naming the Snapshot's manifest, which its
//! deletion needs. An id kopia does not know fails (`no snapshots matched`). kopia keeps a pinned
//! snapshot through its own retention; kopiur's retention skips a pinned Snapshot CR itself. A
//! pin never blocks an explicit `snapshot delete`, so the deletion plan is unaffected.
//!
//! Results: success merge-patches `status.pinned` (the state now applied in kopia) and
//! `status.snapshot.kopiaSnapshotID` (the manifest's id after the change); a failure
//! writes `status.failure` with `op: "pin"` (the mover's message, which the controller shows
//! in `Pinned=False / PinJobFailed`) and exits by class like every other op (1 retryable, the
//! Job's backoff retries it; 3 non-retryable, `FailJob`).
use kopiur_kopia::cmd::{self, KopiaCommand};
use kopiur_kopia::model::{self, SnapshotManifest};
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
        let before = match self
            .run(cmd::manifest_show(&op.snapshot_id))
            .await
            .and_then(|o| model::parse::<SnapshotManifest>("manifest show", &model::strip_comment_lines(&o.stdout)))
        {
            Ok(m) => m,
            Err(e) => return self.fail(&e).await,
        };
        if let Err(e) = self.run(command(op)).await {
            return self.fail(&e).await;
        }
        let s = &before.source;
        let source = format!("{}@{}:{}", s.user_name, s.host, s.path);
        let after = match self
            .run(cmd::snapshot_list(Some(&source)))
            .await
            .and_then(|o| model::parse::<Vec<SnapshotManifest>>("snapshot list", &o.stdout))
        {
            Ok(l) => l,
            Err(e) => return self.fail(&e).await,
        };
        match find_again(&after, &before, op) {
            Ok(id) => {
                tracing::info!(snapshot = %op.snapshot_id, now = %id, pin = %op.pin, add = op.add, "pin applied");
                self.report(Report::Status(json!({"status": {
                    "pinned": op.add,
                    "snapshot": {"kopiaSnapshotID": id},
                }})))
                .await;
                Exit::Success
            }
            Err(message) => {
                let f = crate::result::Failure::contract("pin", message);
                self.report(Report::Status(crate::result::failure_patch(&f))).await;
                Exit::Terminal
            }
        }
    }
}

/// The manifest `before` after the pin change: same source, start and end time and root object,
/// with the pin in the requested state. Its old id when kopia kept it (nothing changed), else the
/// one new manifest kopia wrote.
pub fn find_again(after: &[SnapshotManifest], before: &SnapshotManifest, op: &SnapshotPinOp) -> Result<String, String> {
    let root = |m: &SnapshotManifest| m.root_entry.as_ref().map(|r| r.obj.clone());
    let same: Vec<&SnapshotManifest> = after
        .iter()
        .filter(|m| {
            m.start_time == before.start_time
                && m.end_time == before.end_time
                && root(m) == root(before)
                && m.pins.contains(&op.pin) == op.add
        })
        .collect();
    if let Some(m) = same.iter().find(|m| m.id == op.snapshot_id) {
        return Ok(m.id.clone());
    }
    match same.as_slice() {
        [one] => Ok(one.id.clone()),
        many => Err(format!(
            "kopia snapshot pin: the snapshot {} could not be identified after the pin change ({} matching manifests)",
            op.snapshot_id,
            many.len()
        )),
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

    fn manifest(id: &str, start: i64, root: &str, pins: &[&str]) -> SnapshotManifest {
        serde_json::from_value(serde_json::json!({
            "id": id, "source": {"host": "h", "userName": "u", "path": "/p"},
            "startTime": chrono::DateTime::from_timestamp(1_800_000_000 + start, 0).unwrap(),
            "endTime": chrono::DateTime::from_timestamp(1_800_000_010 + start, 0).unwrap(),
            "rootEntry": {"obj": root}, "pins": pins,
        }))
        .unwrap()
    }

    #[test]
    fn the_rewritten_manifest_is_found_again_by_source_times_and_root() {
        let op = SnapshotPinOp { snapshot_id: "old".into(), pin: PIN_NAME.into(), add: true };
        let before = manifest("", 0, "k1", &[]);
        // kopia rewrote it under a new id; a sibling with another start or root is not it.
        let after = [
            manifest("new", 0, "k1", &["kopiur"]),
            manifest("other", 60, "k1", &["kopiur"]),
            manifest("x", 0, "k2", &[]),
        ];
        assert_eq!(find_again(&after, &before, &op), Ok("new".into()));
        // Nothing changed (already pinned): the old id is kept.
        let after = [manifest("old", 0, "k1", &["kopiur"])];
        assert_eq!(find_again(&after, &before, &op), Ok("old".into()));
        // The pin is not in the requested state, or two candidates: refused, never guessed.
        assert!(find_again(&[manifest("new", 0, "k1", &[])], &before, &op).is_err());
        let twins = [manifest("a", 0, "k1", &["kopiur"]), manifest("b", 0, "k1", &["kopiur"])];
        assert!(find_again(&twins, &before, &op).is_err());
        let remove = SnapshotPinOp { add: false, ..op };
        assert_eq!(find_again(&[manifest("n2", 0, "k1", &[])], &before, &remove), Ok("n2".into()));
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
