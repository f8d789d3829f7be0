//! `SnapshotDeleteBatch`: verify each member's manifest, then `snapshot delete` the verified ids in
//! chunks, one answer per member.
//!
//! A member's id comes from its Snapshot's status, which a tenant's Pod may be able to write, so
//! it is never deleted on its word: the id must be a snapshot manifest id, the manifest must be a
//! snapshot of the source the controller recorded for that Snapshot, and its `kopiur-uid` tag
//! (which every manifest kopiur makes carries) must name that Snapshot. Anything else is refused
//! and kept (`crate::batch_outcome`).
use std::time::Duration;

use kopiur_kopia::classify;
use kopiur_kopia::cmd;
use kopiur_kopia::model::{self, ManifestEntry};

use super::{Ctx, Exit};
use crate::batch_outcome::{self, MemberOutcome, Refusal};
use crate::result::{DeleteBatchReport, MemberResult, Report, ResultSink};
use crate::workspec::{DeleteMember, SnapshotDeleteBatchOp};

/// The tag every kopiur backup carries with its Snapshot's uid (a `tag:` label on the manifest).
pub const UID_TAG: &str = "kopiur-uid";

/// What the repository says about one member before anything is deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A snapshot of the recorded source, tagged with the member's uid (or, made outside kopiur,
    /// with no uid tag): may be deleted.
    Verified,
    Refused(Refusal),
    /// The repository holds no manifest with that id: already deleted.
    Gone,
}

/// Checks one member against every manifest of the repository (`manifest list`).
pub fn verify(m: &DeleteMember, manifests: &[ManifestEntry]) -> Verdict {
    if !classify::is_manifest_id(&m.snapshot_id) {
        return Verdict::Refused(Refusal::NotAManifestId);
    }
    if m.source.is_empty() {
        return Verdict::Refused(Refusal::NoRecordedIdentity);
    }
    let Some(found) = manifests.iter().find(|e| e.id == m.snapshot_id) else { return Verdict::Gone };
    // Another source's snapshot, or not a snapshot at all (a policy, say).
    if found.snapshot_source().as_deref() != Some(m.source.as_str()) {
        return Verdict::Refused(Refusal::OtherSource);
    }
    // Every manifest kopiur makes carries its Snapshot's uid, and it must be this member's. One
    // without the tag was made outside kopiur (before it, or adopted): the recorded source alone
    // vouches for it.
    match found.label(&format!("tag:{UID_TAG}")) {
        Some(uid) if uid == m.uid => Verdict::Verified,
        Some(_) => Verdict::Refused(Refusal::UidTagMismatch),
        None => Verdict::Verified,
    }
}

impl<S: ResultSink> Ctx<S> {
    pub(super) async fn delete_batch(&self, op: &SnapshotDeleteBatchOp) -> Exit {
        let mut report = DeleteBatchReport { members: Vec::new(), kopia_connects: 1, delete_calls: 0 };
        if let Err(e) = self.connect(false).await {
            tracing::warn!(error = %e, "connect failed; no member was deleted");
            return Exit::for_class(e.class());
        }
        let manifests = match self
            .run(cmd::manifest_list())
            .await
            .and_then(|o| model::parse::<Vec<ManifestEntry>>("manifest list", &o.stdout))
        {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "listing the repository's manifests failed; no member was deleted");
                return Exit::for_class(e.class());
            }
        };
        let mut worst = Exit::Success;
        let mut verified: Vec<&DeleteMember> = Vec::new();
        for m in &op.members {
            match verify(m, &manifests) {
                Verdict::Verified => verified.push(m),
                Verdict::Gone => report.members.push(member(m, "alreadyDeleted", None)),
                Verdict::Refused(r) => {
                    tracing::warn!(uid = %m.uid, id = %m.snapshot_id, reason = r.code(), "member refused; its kopia data is kept");
                    worst = worse(worst, Exit::Terminal);
                    report.members.push(refused(m, r));
                }
            }
        }
        let timeout = Duration::from_secs(op.chunk_timeout_seconds.max(1));
        for chunk in verified.chunks(op.chunk_size.max(1)) {
            let ids: Vec<String> = chunk.iter().map(|m| m.snapshot_id.clone()).collect();
            report.delete_calls += 1;
            match self.runner.run_ok(&cmd::snapshot_delete(&ids).with_timeout(timeout)).await {
                Ok(_) => report.members.extend(chunk.iter().map(|m| member(m, "deleted", None))),
                Err(e) if classify::is_no_snapshots_matched(&e.stderr_tail().join("\n")) => {
                    // Some ids went meanwhile: re-issue one by one so each member gets its
                    // own answer.
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
        self.termination_message(&report);
        self.report(Report::DeleteBatch(report)).await;
        worst
    }

    /// The per-member answer the controller reads from the Pod's status. Written only inside a
    /// Pod (where the kubelet provides the file) or where `KOPIUR_TERMINATION_LOG` names one.
    fn termination_message(&self, report: &DeleteBatchReport) {
        let path = match std::env::var("KOPIUR_TERMINATION_LOG") {
            Ok(p) if !p.is_empty() => std::path::PathBuf::from(p),
            _ => std::path::PathBuf::from("/dev/termination-log"),
        };
        if std::env::var_os("KOPIUR_TERMINATION_LOG").is_none() && !path.exists() {
            return;
        }
        if let Err(e) = std::fs::write(&path, batch_outcome::render(&outcomes(report))) {
            tracing::warn!(path = %path.display(), error = %e, "writing the termination message failed; no member is released by it");
        }
    }
}

/// The members the message names: released (deleted or already gone) and refused. Failed ones
/// are left out, so they are batched again.
pub fn outcomes(report: &DeleteBatchReport) -> Vec<(String, MemberOutcome)> {
    report
        .members
        .iter()
        .filter_map(|m| match m.outcome.as_str() {
            "deleted" | "alreadyDeleted" => Some((m.uid.clone(), MemberOutcome::Released)),
            "refused" => {
                m.refusal.as_deref().and_then(Refusal::from_code).map(|r| (m.uid.clone(), MemberOutcome::Refused(r)))
            }
            _ => None,
        })
        .collect()
}

fn refused(m: &DeleteMember, r: Refusal) -> MemberResult {
    MemberResult { refusal: Some(r.code().to_string()), ..member(m, "refused", Some(r.explain().to_string())) }
}

fn member(m: &DeleteMember, outcome: &str, error: Option<String>) -> MemberResult {
    MemberResult {
        uid: m.uid.clone(),
        snapshot_id: m.snapshot_id.clone(),
        outcome: outcome.into(),
        error,
        refusal: None,
    }
}

fn worse(a: Exit, b: Exit) -> Exit {
    if (b as i32) > (a as i32) { b } else { a }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    const ID: &str = "3549d9143e3191812b7f52f0a5b6e8d6";

    fn manifest(id: &str, path: &str, uid: Option<&str>) -> ManifestEntry {
        let mut labels = BTreeMap::from([
            ("type".to_string(), "snapshot".to_string()),
            ("username".to_string(), "app".to_string()),
            ("hostname".to_string(), "t1".to_string()),
            ("path".to_string(), path.to_string()),
        ]);
        if let Some(u) = uid {
            labels.insert(format!("tag:{UID_TAG}"), u.to_string());
        }
        ManifestEntry { id: id.into(), labels }
    }

    fn m(id: &str, source: &str) -> DeleteMember {
        DeleteMember { uid: "uid-1".into(), snapshot_id: id.into(), source: source.into() }
    }

    #[test]
    fn only_the_members_own_snapshot_is_verified() {
        let listed = vec![manifest(ID, "/pvc/data", Some("uid-1"))];
        assert_eq!(verify(&m(ID, "app@t1:/pvc/data"), &listed), Verdict::Verified);
        // A forged id naming another source's snapshot, a recorded source that differs, a
        // snapshot tagged for another Snapshot or for none.
        assert_eq!(verify(&m(ID, "app@t2:/pvc/data"), &listed), Verdict::Refused(Refusal::OtherSource));
        assert_eq!(verify(&m(ID, "app@t1:/pvc/other"), &listed), Verdict::Refused(Refusal::OtherSource));
        let other = vec![manifest(ID, "/pvc/data", Some("uid-2"))];
        assert_eq!(verify(&m(ID, "app@t1:/pvc/data"), &other), Verdict::Refused(Refusal::UidTagMismatch));
        // A manifest made outside kopiur has no uid tag: its source must match, and then it may go.
        let untagged = vec![manifest(ID, "/pvc/data", None)];
        assert_eq!(verify(&m(ID, "app@t1:/pvc/data"), &untagged), Verdict::Verified);
        assert_eq!(verify(&m(ID, "app@t2:/pvc/data"), &untagged), Verdict::Refused(Refusal::OtherSource));
    }

    #[test]
    fn ids_kopia_would_read_as_root_objects_and_members_without_identity_are_refused() {
        let listed = vec![manifest(ID, "/pvc/data", Some("uid-1"))];
        for id in ["k090a63adf22075b6d2c84bddc62809d5", "", "3549d914", "3549D9143E3191812B7F52F0A5B6E8D6"] {
            assert_eq!(verify(&m(id, "app@t1:/pvc/data"), &listed), Verdict::Refused(Refusal::NotAManifestId), "{id}");
        }
        assert_eq!(verify(&m(ID, ""), &listed), Verdict::Refused(Refusal::NoRecordedIdentity));
        assert_eq!(verify(&m("0123456789abcdef0123456789abcdef", "app@t1:/pvc/data"), &listed), Verdict::Gone);
        // A policy manifest's id is not a snapshot of any source.
        let policy =
            vec![ManifestEntry { id: ID.into(), labels: BTreeMap::from([("type".to_string(), "policy".to_string())]) }];
        assert_eq!(verify(&m(ID, "app@t1:/pvc/data"), &policy), Verdict::Refused(Refusal::OtherSource));
    }

    #[test]
    fn the_message_names_released_and_refused_members_and_leaves_failed_ones_out() {
        let dm = |uid: &str| DeleteMember { uid: uid.into(), snapshot_id: ID.into(), source: "s".into() };
        let report = DeleteBatchReport {
            members: vec![
                member(&dm("a"), "deleted", None),
                member(&dm("b"), "alreadyDeleted", None),
                refused(&dm("c"), Refusal::UidTagMismatch),
                member(&dm("d"), "failed", Some("kopia snapshot delete: timeout".into())),
            ],
            kopia_connects: 1,
            delete_calls: 1,
        };
        let got = outcomes(&report);
        assert_eq!(
            got,
            vec![
                ("a".to_string(), MemberOutcome::Released),
                ("b".to_string(), MemberOutcome::Released),
                ("c".to_string(), MemberOutcome::Refused(Refusal::UidTagMismatch)),
            ]
        );
    }
}
