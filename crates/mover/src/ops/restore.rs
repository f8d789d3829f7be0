//! `Restore`: resolve the snapshot when only an identity is given, `snapshot restore`, and
//! check which recorded owners a mover that cannot chown lost.
use chrono::Utc;
use kopiur_kopia::Output;
use kopiur_kopia::classify::ErrorClass;
use kopiur_kopia::cmd::{self, Identity};
use kopiur_kopia::model::{self, SnapshotManifest};
use serde_json::json;

use super::{Ctx, Exit, LONG_COMMAND_TIMEOUT, rfc3339};
use crate::result::{Failure, MAX_LOG_TAIL_BYTES, Report, ResultSink, failure_patch, tail_bytes};
use crate::workspec::RestoreOp;

impl<S: ResultSink> Ctx<S> {
    pub(super) async fn restore(&self, op: &RestoreOp) -> Exit {
        if let Err(e) = self.connect(true).await {
            return self.fail(&e).await;
        }
        let id = match (&op.snapshot_id, &op.resolve) {
            (Some(id), _) => id.clone(),
            (None, Some(r)) => {
                let out = match self.run(cmd::snapshot_list(Some(&r.identity.source(&r.source_path)))).await {
                    Ok(o) => o,
                    Err(e) => return self.fail(&e).await,
                };
                let list: Vec<SnapshotManifest> = match model::parse("snapshot list", &out.stdout) {
                    Ok(l) => l,
                    Err(e) => return self.fail(&e).await,
                };
                match resolve(list, r) {
                    Some(m) => m.id,
                    None => {
                        self.report(Report::Status(json!({"status": {"resolved": {"resolution": "NoSnapshot"}}})))
                            .await;
                        let f = Failure {
                            kopia_error_class: ErrorClass::NotFound.as_str().into(),
                            message: format!("no snapshot of {} matches", r.identity.source(&r.source_path)),
                            stderr_tail: String::new(),
                            exit_code: None,
                            retry_recommended: false,
                            op: "restore".into(),
                        };
                        self.report(Report::Status(failure_patch(&f))).await;
                        return Exit::Terminal;
                    }
                }
            }
            (None, None) => {
                let f = Failure::contract("restore", "the restore names neither a snapshot id nor an identity".into());
                self.report(Report::Status(failure_patch(&f))).await;
                return Exit::Contract;
            }
        };
        let start = Utc::now();
        let c = cmd::snapshot_restore(&id, &op.target_path, &op.options).with_timeout(LONG_COMMAND_TIMEOUT);
        match self.with_heartbeat(self.runner.run(&c)).await.and_then(Output::ok) {
            Ok(out) => {
                // A mover that cannot chown wrote every entry as itself: say which owners were lost.
                let ownership = if op.options.skip_owners != Some(true) && !crate::ownership::can_chown() {
                    self.ownership_check(&id, &op.target_path).await
                } else {
                    None
                };
                let mut status = json!({
                    "resolved": {"resolution": "Snapshot", "kopiaSnapshotID": id},
                    "timing": {"startTime": rfc3339(start), "endTime": rfc3339(Utc::now())},
                    "logTail": tail_bytes(&out.stderr_tail.join("\n"), MAX_LOG_TAIL_BYTES),
                });
                if !op.controller_completes {
                    status["phase"] = json!("Completed");
                }
                if let Some(o) = ownership {
                    status["ownership"] = o;
                }
                self.report(Report::Status(json!({ "status": status }))).await;
                Exit::Success
            }
            Err(e) => self.fail(&e).await,
        }
    }

    /// Walks the snapshot's directory objects (at most `MAX_DIRECTORIES`) and compares each
    /// recorded owner with the restored entry's. `None` when the walk could not start (the
    /// restore itself succeeded; a failed check is logged, never a failed restore).
    async fn ownership_check(&self, id: &str, target: &str) -> Option<serde_json::Value> {
        use crate::ownership::{MAX_DIRECTORIES, Report as OwnershipReport, compare};
        let manifest = match self.run(cmd::manifest_show(id)).await {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(error = %e, "reading the snapshot manifest for the ownership check failed");
                return None;
            }
        };
        let root =
            match model::parse::<SnapshotManifest>("manifest show", &model::strip_comment_lines(&manifest.stdout)) {
                Ok(m) => m.root_entry.map(|r| r.obj).filter(|o| !o.is_empty())?,
                Err(e) => {
                    tracing::warn!(error = %e, "the snapshot manifest has no root object; ownership not checked");
                    return None;
                }
            };
        let mut report = OwnershipReport::default();
        let mut queue = std::collections::VecDeque::from([(String::new(), root)]);
        let target = std::path::Path::new(target);
        while let Some((rel, obj)) = queue.pop_front() {
            if report.directories_checked >= MAX_DIRECTORIES {
                break;
            }
            let dir = match self
                .run(cmd::show_object(&obj))
                .await
                .and_then(|o| model::parse::<model::DirObject>("show", &o.stdout))
            {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!(error = %e, dir = %rel, "reading a directory object failed; ownership checked in part");
                    queue.clear();
                    report.directories_checked += 1;
                    report.complete = false;
                    return Some(report.status(crate::permission::current_ids().map(|i| i.0).unwrap_or(0)));
                }
            };
            report.directories_checked += 1;
            compare(target, &rel, &dir.entries, &mut report);
            for e in dir.entries.iter().filter(|e| e.kind == "d" && !e.obj.is_empty()) {
                let child = if rel.is_empty() { e.name.clone() } else { format!("{rel}/{}", e.name) };
                queue.push_back((child, e.obj.clone()));
            }
        }
        report.complete = queue.is_empty();
        let uid = crate::permission::current_ids().map(|i| i.0).unwrap_or(0);
        if report.not_preserved > 0 {
            tracing::warn!(not_preserved = report.not_preserved, "restored entries without their recorded owner");
        }
        Some(report.status(uid))
    }
}

/// The newest snapshot ending at or before `as_of`, after skipping `offset` newer ones.
pub fn resolve(mut list: Vec<SnapshotManifest>, r: &crate::workspec::ResolveIdentity) -> Option<SnapshotManifest> {
    let want = Identity::new(r.identity.username.clone(), r.identity.hostname.clone());
    list.retain(|m| {
        m.source.user_name == want.username
            && m.source.host == want.hostname
            && m.source.path == r.source_path
            && m.incomplete.is_none()
            && match (r.as_of, m.end_time) {
                (Some(asof), Some(end)) => end <= asof,
                (Some(_), None) => false,
                (None, _) => true,
            }
    });
    list.sort_by_key(|m| std::cmp::Reverse(m.end_time));
    list.into_iter().nth(r.offset as usize)
}
