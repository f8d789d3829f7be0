//! The label set of every metric family, one struct each (docs/design/observability.md §10.1).
//! A field is a label: its name is the label name, the field order is the exposition order
//! and the series order. Counters take borrowing label sets (`&str` fields, declared in the
//! registry with `'static`); the store-backed gauges hold owned ones (`String` fields).
use super::family::label_set;

// Counters.

label_set! {
    /// `kind`: reconciliations.
    pub struct KindLabels<'a> { pub kind: &'a str }
}

label_set! {
    /// `kind`, `class`: failed reconciliations by error class.
    pub struct ErrorLabels<'a> { pub kind: &'a str, pub class: &'a str }
}

label_set! {
    /// `op`, `namespace`: mover Jobs created.
    pub struct JobLabels<'a> { pub op: &'a str, pub namespace: &'a str }
}

label_set! {
    /// `kind`, `namespace`, `name`, `probe_kind`: breaker trips of a repository.
    pub struct TripLabels<'a> { pub kind: &'a str, pub namespace: &'a str, pub name: &'a str, pub probe_kind: &'a str }
}

label_set! {
    /// `kind`, `namespace`, `name`, `outcome`: a repository's probes, endpoint checks and
    /// deletion batches by outcome.
    pub struct RepoOutcomeLabels<'a> { pub kind: &'a str, pub namespace: &'a str, pub name: &'a str, pub outcome: &'a str }
}

label_set! {
    /// `namespace`: members of failed batch delete Jobs.
    pub struct DeletionFailureLabels<'a> { pub namespace: &'a str }
}

label_set! {
    /// `namespace`, `outcome`: Snapshot finalizers released.
    pub struct DeletionLabels<'a> { pub namespace: &'a str, pub outcome: &'a str }
}

label_set! {
    /// `namespace`, `name`: Snapshots created by a SnapshotSchedule.
    pub struct ScheduleLabels<'a> { pub namespace: &'a str, pub name: &'a str }
}

label_set! {
    /// `namespace`, `method`, `outcome`: CSI staging of backups (`staged`, `failed`, `released`, `leaked`).
    pub struct StagingLabels<'a> { pub namespace: &'a str, pub method: &'a str, pub outcome: &'a str }
}

label_set! {
    /// `namespace`, `outcome`: finished populator Restores (`populated`, `already_bound`, `failed`).
    pub struct PopulateLabels<'a> { pub namespace: &'a str, pub outcome: &'a str }
}

label_set! {
    /// `namespace`, `name`: a Snapshot whose staged objects outlived the release bound.
    pub struct StagingLeftLabels { pub namespace: String, pub name: String }
}

label_set! {
    /// `namespace`, `method`: CSI staging of backups.
    pub struct StagingMethodLabels<'a> { pub namespace: &'a str, pub method: &'a str }
}

label_set! {
    /// `namespace`, `name`, `reason`: skipped schedule slots, refused Snapshots.
    pub struct ReasonLabels<'a> { pub namespace: &'a str, pub name: &'a str, pub reason: &'a str }
}

label_set! {
    /// `namespace`, `name`, `mode`, `outcome`: finished maintenance runs.
    pub struct MaintenanceRunLabels<'a> { pub namespace: &'a str, pub name: &'a str, pub mode: &'a str, pub outcome: &'a str }
}

label_set! {
    /// `kind`, `trigger`, `outcome`: finished replication runs.
    pub struct ReplicationRunLabels<'a> { pub kind: &'a str, pub trigger: &'a str, pub outcome: &'a str }
}

label_set! {
    /// `verb`, `group`, `kind`, `client`: Kubernetes API requests.
    pub struct KubeRequestLabels<'a> { pub verb: &'a str, pub group: &'a str, pub kind: &'a str, pub client: &'a str }
}

label_set! {
    /// `namespace`, `policy`, `result`: Snapshot runs that reached a terminal phase.
    pub struct CompletionLabels<'a> { pub namespace: &'a str, pub policy: &'a str, pub result: &'a str }
}

// Store-backed gauges.

label_set! {
    /// `kind`, `namespace`, `name` of a Repository or ClusterRepository (namespace "").
    pub struct RepoLabels { pub kind: String, pub namespace: String, pub name: String }
}

label_set! {
    /// `namespace`, `policy`: parked Snapshots.
    pub struct GatedLabels { pub namespace: String, pub policy: String }
}

label_set! {
    /// `namespace`, `name`, `policy`: one Snapshot.
    pub struct SnapshotLabels { pub namespace: String, pub name: String, pub policy: String }
}

label_set! {
    /// `namespace`, `policy`, `repository`: a policy's runs on one repository.
    pub struct PolicyRepoLabels { pub namespace: String, pub policy: String, pub repository: String }
}

label_set! {
    /// `namespace`, `name`: one Restore.
    pub struct RestoreLabels { pub namespace: String, pub name: String }
}

label_set! {
    /// `kind`, `namespace`, `name`, `phase`: the current phase of one object.
    pub struct PhaseLabels { pub kind: &'static str, pub namespace: String, pub name: String, pub phase: String }
}
