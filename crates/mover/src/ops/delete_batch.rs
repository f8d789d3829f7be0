//! `SnapshotDeleteBatch`: `snapshot delete` in chunks, one answer per member.
use std::time::Duration;

use kopiur_kopia::classify;
use kopiur_kopia::cmd;

use super::{Ctx, Exit};
use crate::result::{DeleteBatchReport, MemberResult, Report, ResultSink};
use crate::workspec::SnapshotDeleteBatchOp;

impl<S: ResultSink> Ctx<S> {
    pub(super) async fn delete_batch(&self, op: &SnapshotDeleteBatchOp) -> Exit {
        let mut report = DeleteBatchReport { members: Vec::new(), kopia_connects: 1, delete_calls: 0 };
        if let Err(e) = self.connect(false).await {
            tracing::warn!(error = %e, "connect failed; no member was deleted");
            return Exit::for_class(e.class());
        }
        let timeout = Duration::from_secs(op.chunk_timeout_seconds.max(1));
        let mut worst = Exit::Success;
        for chunk in op.members.chunks(op.chunk_size.max(1)) {
            let ids: Vec<String> = chunk.iter().map(|m| m.snapshot_id.clone()).collect();
            report.delete_calls += 1;
            match self.runner.run_ok(&cmd::snapshot_delete(&ids).with_timeout(timeout)).await {
                Ok(_) => report.members.extend(chunk.iter().map(|m| member(m, "deleted", None))),
                Err(e) if classify::is_no_snapshots_matched(&e.stderr_tail().join("\n")) => {
                    // Some ids are already gone: re-issue one by one so each member gets
                    // its own answer.
                    for m in chunk {
                        report.delete_calls += 1;
                        let single = cmd::snapshot_delete(std::slice::from_ref(&m.snapshot_id)).with_timeout(timeout);
                        match self.runner.run_ok(&single).await {
                            Ok(_) => report.members.push(member(m, "deleted", None)),
                            Err(e) if classify::is_no_snapshots_matched(&e.stderr_tail().join("\n")) => {
                                report.members.push(member(m, "alreadyDeleted", None))
                            }
                            Err(e) => {
                                worst = worse(worst, Exit::for_class(e.class()));
                                report.members.push(member(m, "failed", Some(e.summary())));
                            }
                        }
                    }
                }
                Err(e) => {
                    worst = worse(worst, Exit::for_class(e.class()));
                    report.members.extend(chunk.iter().map(|m| member(m, "failed", Some(e.summary()))));
                }
            }
        }
        self.report(Report::DeleteBatch(report)).await;
        worst
    }
}

fn member(m: &crate::workspec::DeleteMember, outcome: &str, error: Option<String>) -> MemberResult {
    MemberResult { uid: m.uid.clone(), snapshot_id: m.snapshot_id.clone(), outcome: outcome.into(), error }
}

fn worse(a: Exit, b: Exit) -> Exit {
    if (b as i32) > (a as i32) { b } else { a }
}
