//! Reading deletion facts off a `Snapshot` object. Pure accessors the reconciler uses to fill
//! the fact structs; facts that need other objects (the live schedule GET, the namespace, the
//! repository, the backup Job) are parameters.
use kopiur_api::Snapshot;
use kopiur_api::names::{API_VERSION, annotation, condition, finalizer, label, origin};
use kopiur_api::shared::phase::SnapshotOrigin;
use kopiur_api::snapshot::{DeletionDecision, DeletionRecord, SnapshotPhase};

use super::breaker::PendingDeletion;
use super::pruned_by::{self, PrunedBy};
use super::types::{Binding, Manifest, Time};
use kopiur_api::snapshot::OnScheduleDelete;
use kopiur_api::snapshot_policy::DeletionPolicy;

/// Convert an apimachinery timestamp.
pub fn to_time(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> Option<Time> {
    let ns = u32::try_from(t.0.subsec_nanosecond()).unwrap_or(0);
    chrono::DateTime::from_timestamp(t.0.as_second(), ns)
}

pub fn deletion_timestamp(s: &Snapshot) -> Option<Time> {
    s.metadata.deletion_timestamp.as_ref().and_then(to_time)
}

pub fn skip(s: &Snapshot) -> bool {
    s.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(annotation::SKIP_SNAPSHOT_CLEANUP))
}

pub fn pruned_by(s: &Snapshot) -> PrunedBy {
    pruned_by::from_annotations(s.metadata.annotations.as_ref())
}

pub fn finalizer_present(s: &Snapshot) -> bool {
    s.metadata.finalizers.as_ref().is_some_and(|f| f.iter().any(|x| x == finalizer::SNAPSHOT_CLEANUP))
}

/// A catalog row: by status origin or by label (the label survives a status wipe).
pub fn is_discovered(s: &Snapshot) -> bool {
    let by_label =
        s.metadata.labels.as_ref().and_then(|l| l.get(label::ORIGIN)).is_some_and(|v| v == origin::DISCOVERED);
    let by_status = s.status.as_ref().and_then(|st| st.origin.as_ref()).is_some_and(|o| match o {
        SnapshotOrigin::Discovered => true,
        SnapshotOrigin::Scheduled
        | SnapshotOrigin::Manual
        | SnapshotOrigin::Adopted
        | SnapshotOrigin::Replicated
        | SnapshotOrigin::Unknown(_) => false,
    });
    by_label || by_status
}

/// The effective deletion policy: discovered rows are forced to Retain; else `spec`, else the
/// value pinned in `status.resolved`, else the policy's `defaultDeletionPolicy` (when the
/// caller could read it), else Delete.
pub fn effective_policy(s: &Snapshot, policy_default: Option<DeletionPolicy>) -> DeletionPolicy {
    if is_discovered(s) {
        return DeletionPolicy::Retain;
    }
    s.spec
        .deletion_policy
        .or_else(|| s.status.as_ref().and_then(|st| st.resolved.as_ref()).and_then(|r| r.deletion_policy))
        .or(policy_default)
        .unwrap_or_default()
}

/// The manifest fact. `backup_job_active`: the backup Job exists and is not terminal.
pub fn manifest(s: &Snapshot, backup_job_active: bool) -> Manifest {
    let status = s.status.as_ref();
    let running = status.and_then(|st| st.phase.as_ref()).is_some_and(|p| match p {
        SnapshotPhase::Running => true,
        SnapshotPhase::Pending
        | SnapshotPhase::Succeeded
        | SnapshotPhase::Unchanged
        | SnapshotPhase::Failed
        | SnapshotPhase::Discovered
        | SnapshotPhase::Deleting
        | SnapshotPhase::Unknown(_) => false,
    });
    if running || backup_job_active {
        return Manifest::Unsettled;
    }
    match status.and_then(|st| st.snapshot.as_ref()).and_then(|r| r.kopia_snapshot_id.clone()) {
        Some(id) if !id.is_empty() => Manifest::Known(id),
        Some(_) | None => Manifest::None,
    }
}

/// `user@host:path`: the source the controller pinned for the Snapshot on its first reconcile
/// (`status.resolved.identity`), which the batch mover checks the manifest against. Empty when
/// none was recorded: the mover then refuses to delete (never a guess).
pub fn recorded_source(s: &Snapshot) -> String {
    match s.status.as_ref().and_then(|st| st.resolved.as_ref()).and_then(|r| r.identity.as_ref()) {
        Some(id) if id.source_path.is_some() => id.to_string(),
        Some(_) | None => String::new(),
    }
}

/// A batch refused to delete its manifest (`DeletionRefused=True`).
pub fn deletion_refused(s: &Snapshot) -> bool {
    s.status
        .as_ref()
        .is_some_and(|st| st.conditions.iter().any(|c| c.type_ == condition::DELETION_REFUSED && c.status == "True"))
}

/// The pinned repository uid, if the first reconcile pinned one.
pub fn pinned_repo_uid(s: &Snapshot) -> Option<String> {
    s.status.as_ref()?.resolved.as_ref()?.repository.as_ref()?.uid.clone()
}

/// The binding fact; `resolves` are the repository uids an unpinned Snapshot could resolve to
/// (its explicit `spec.repository`, else every repository of its policy).
pub fn binding(s: &Snapshot, resolves: impl FnOnce() -> Vec<String>) -> Binding {
    match pinned_repo_uid(s) {
        Some(repo_uid) => Binding::Pinned { repo_uid },
        None => Binding::Unpinned { resolves: resolves() },
    }
}

pub fn on_schedule_delete(s: &Snapshot) -> OnScheduleDelete {
    s.spec.resolved_on_schedule_delete()
}

/// The controller ownerReference to a SnapshotSchedule: (name, uid).
pub fn schedule_owner(s: &Snapshot) -> Option<(String, String)> {
    s.metadata.owner_references.as_ref()?.iter().find_map(|o| {
        (o.controller == Some(true) && o.kind == "SnapshotSchedule" && o.api_version == API_VERSION)
            .then(|| (o.name.clone(), o.uid.clone()))
    })
}

pub fn previous_record(s: &Snapshot) -> Option<DeletionRecord> {
    s.status.as_ref()?.deletion.as_deref().cloned()
}

/// The breaker's view of a deleting Snapshot; `None` when it is not being deleted.
pub fn pending_deletion(
    s: &Snapshot,
    policy_default: Option<DeletionPolicy>,
    resolves: impl FnOnce() -> Vec<String>,
) -> Option<PendingDeletion> {
    Some(PendingDeletion {
        uid: s.metadata.uid.clone()?,
        deletion_timestamp: deletion_timestamp(s)?,
        finalizer_present: finalizer_present(s),
        policy: effective_policy(s, policy_default),
        skip: skip(s),
        pruned_by: pruned_by(s),
        binding: binding(s, resolves),
        held: previous_record(s).is_some_and(|r| match r.decision {
            DeletionDecision::Held => true,
            DeletionDecision::Delete | DeletionDecision::Unknown(_) => false,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parse a Snapshot the cluster's way: YAML -> JSON value -> typed.
    fn snap(yaml: &str) -> Snapshot {
        let v: serde_json::Value = serde_norway::from_str(yaml).unwrap();
        serde_json::from_value(v).unwrap()
    }

    const DELETING: &str = r#"
apiVersion: kopiur.home-operations.com/v1alpha1
kind: Snapshot
metadata:
  name: s-1
  namespace: t
  uid: u-1
  deletionTimestamp: "2026-07-17T10:00:00Z"
  finalizers: [kopiur.home-operations.com/snapshot-cleanup]
  annotations:
    kopiur.home-operations.com/pruned-by: retention
  ownerReferences:
    - apiVersion: kopiur.home-operations.com/v1alpha1
      kind: SnapshotSchedule
      name: sched
      uid: sched-uid
      controller: true
spec:
  onScheduleDelete: Delete
status:
  phase: Succeeded
  snapshot:
    kopiaSnapshotID: 0123456789abcdef0123456789abcdef
  resolved:
    repository: {kind: Repository, namespace: t, name: r, uid: r-uid}
    deletionPolicy: Delete
  deletion: {decision: Held, heldSince: "2026-07-17T10:00:05Z"}
"#;

    #[test]
    fn reads_every_fact_off_a_deleting_snapshot() {
        let s = snap(DELETING);
        assert_eq!(deletion_timestamp(&s).unwrap().to_rfc3339(), "2026-07-17T10:00:00+00:00");
        assert!(finalizer_present(&s));
        assert!(!skip(&s));
        assert_eq!(pruned_by(&s), PrunedBy::Operator(super::super::pruned_by::PruneKind::Retention));
        assert_eq!(effective_policy(&s, None), DeletionPolicy::Delete);
        assert_eq!(manifest(&s, false), Manifest::Known("0123456789abcdef0123456789abcdef".into()));
        assert_eq!(manifest(&s, true), Manifest::Unsettled);
        assert_eq!(binding(&s, Vec::new), Binding::Pinned { repo_uid: "r-uid".into() });
        assert_eq!(on_schedule_delete(&s), OnScheduleDelete::Delete);
        assert_eq!(schedule_owner(&s), Some(("sched".into(), "sched-uid".into())));
        assert_eq!(previous_record(&s).unwrap().decision, kopiur_api::snapshot::DeletionDecision::Held);
        let p = pending_deletion(&s, None, Vec::new).unwrap();
        assert_eq!(p.uid, "u-1");
    }

    #[test]
    fn discovered_rows_are_retain_and_absent_stamp_is_retain() {
        let s = snap(
            r#"
apiVersion: kopiur.home-operations.com/v1alpha1
kind: Snapshot
metadata: {name: r-abc, namespace: t, labels: {kopiur.home-operations.com/origin: discovered}}
spec: {deletionPolicy: Delete}
"#,
        );
        assert_eq!(effective_policy(&s, Some(DeletionPolicy::Delete)), DeletionPolicy::Retain);
        assert_eq!(on_schedule_delete(&s), OnScheduleDelete::Retain);
        assert_eq!(manifest(&s, false), Manifest::None);
        assert_eq!(schedule_owner(&s), None);
        assert!(pending_deletion(&s, None, Vec::new).is_none());
    }

    #[test]
    fn policy_falls_back_through_resolved_then_policy_default() {
        let s =
            snap("apiVersion: kopiur.home-operations.com/v1alpha1\nkind: Snapshot\nmetadata: {name: a}\nspec: {}\n");
        assert_eq!(effective_policy(&s, None), DeletionPolicy::Delete);
        assert_eq!(effective_policy(&s, Some(DeletionPolicy::Orphan)), DeletionPolicy::Orphan);
        assert_eq!(binding(&s, || vec!["r1".into()]), Binding::Unpinned { resolves: vec!["r1".into()] });
    }

    #[test]
    fn running_is_unsettled_and_skip_is_presence() {
        let s = snap(
            r#"
apiVersion: kopiur.home-operations.com/v1alpha1
kind: Snapshot
metadata: {name: a, annotations: {kopiur.home-operations.com/skip-snapshot-cleanup: ""}}
spec: {}
status: {phase: Running}
"#,
        );
        assert_eq!(manifest(&s, false), Manifest::Unsettled);
        assert!(skip(&s));
    }
}
