//! The label set of every metric family, one struct each (docs/design/observability.md §10.1).
//! A field is a label: `#[derive(EncodeLabelSet)]` (prometheus-client) writes the field name as
//! the label name and the fields in declaration order, which is also the series order of a
//! store-backed gauge (the derived `Ord`). A label set owns its values (`String` fields) so a
//! family can keep it as a series key; `PhaseLabels::kind` is a kind name of the code. The
//! derive takes no lifetime: the two borrowed rows written at scrape time ([`PhaseRow`],
//! [`RepoRow`]) and [`NoLabels`] encode themselves by hand.
use prometheus_client::encoding::{EncodeLabelSet, LabelSetEncoder};

// Counters.

/// `kind`: reconciliations (and their duration).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

/// `kind`, `class`: failed reconciliations by error class.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, EncodeLabelSet)]
pub struct ErrorLabels {
    pub kind: String,
    pub class: String,
}

/// `op`, `namespace`: mover Jobs created.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, EncodeLabelSet)]
pub struct JobLabels {
    pub op: String,
    pub namespace: String,
}

/// `kind`, `namespace`, `name`, `probe_kind`: breaker trips of a repository.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, EncodeLabelSet)]
pub struct TripLabels {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub probe_kind: String,
}

/// `kind`, `namespace`, `name`, `outcome`: a repository's probes, endpoint checks and
/// deletion batches by outcome.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, EncodeLabelSet)]
pub struct RepoOutcomeLabels {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub outcome: String,
}

/// `namespace`: members of failed batch delete Jobs.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, EncodeLabelSet)]
pub struct DeletionFailureLabels {
    pub namespace: String,
}

/// `namespace`, `outcome`: Snapshot finalizers released.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, EncodeLabelSet)]
pub struct DeletionLabels {
    pub namespace: String,
    pub outcome: String,
}

/// `namespace`, `name`: Snapshots created by a SnapshotSchedule.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, EncodeLabelSet)]
pub struct ScheduleLabels {
    pub namespace: String,
    pub name: String,
}

/// `namespace`, `method`, `outcome`: CSI staging of backups (`staged`, `failed`, `released`, `leaked`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, EncodeLabelSet)]
pub struct StagingLabels {
    pub namespace: String,
    pub method: String,
    pub outcome: String,
}

/// `namespace`, `outcome`: finished populator Restores (`populated`, `already_bound`, `failed`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, EncodeLabelSet)]
pub struct PopulateLabels {
    pub namespace: String,
    pub outcome: String,
}

/// `namespace`, `method`: CSI staging of backups.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, EncodeLabelSet)]
pub struct StagingMethodLabels {
    pub namespace: String,
    pub method: String,
}

/// `namespace`, `name`, `reason`: skipped schedule slots, refused Snapshots.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, EncodeLabelSet)]
pub struct ReasonLabels {
    pub namespace: String,
    pub name: String,
    pub reason: String,
}

/// `namespace`, `name`, `mode`, `outcome`: finished maintenance runs.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, EncodeLabelSet)]
pub struct MaintenanceRunLabels {
    pub namespace: String,
    pub name: String,
    pub mode: String,
    pub outcome: String,
}

/// `kind`, `trigger`, `outcome`: finished replication runs.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, EncodeLabelSet)]
pub struct ReplicationRunLabels {
    pub kind: String,
    pub trigger: String,
    pub outcome: String,
}

/// `verb`, `group`, `kind`, `client`: Kubernetes API requests.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, EncodeLabelSet)]
pub struct KubeRequestLabels {
    pub verb: String,
    pub group: String,
    pub kind: String,
    pub client: String,
}

/// `namespace`, `policy`, `result`: Snapshot runs that reached a terminal phase.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, EncodeLabelSet)]
pub struct CompletionLabels {
    pub namespace: String,
    pub policy: String,
    pub result: String,
}

/// No labels: the family's one series is written without braces, and is absent until its first
/// increment (as `increase()` in the leader-flapping alert expects of a new replica).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NoLabels;

impl EncodeLabelSet for NoLabels {
    fn encode(&self, _: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        Ok(())
    }
}

// Store-backed gauges.

/// `kind`, `namespace`, `name` of a Repository or ClusterRepository (namespace "").
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, EncodeLabelSet)]
pub struct RepoLabels {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

/// `namespace`, `policy`: parked Snapshots.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, EncodeLabelSet)]
pub struct GatedLabels {
    pub namespace: String,
    pub policy: String,
}

/// `namespace`, `name`: a Snapshot whose staged objects outlived the release bound.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, EncodeLabelSet)]
pub struct StagingLeftLabels {
    pub namespace: String,
    pub name: String,
}

/// `namespace`, `name`, `policy`: one Snapshot.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, EncodeLabelSet)]
pub struct SnapshotLabels {
    pub namespace: String,
    pub name: String,
    pub policy: String,
}

/// `namespace`, `policy`, `repository`: a policy's runs on one repository.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, EncodeLabelSet)]
pub struct PolicyRepoLabels {
    pub namespace: String,
    pub policy: String,
    pub repository: String,
}

/// `namespace`, `name`: one Restore.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, EncodeLabelSet)]
pub struct RestoreLabels {
    pub namespace: String,
    pub name: String,
}

/// `kind`, `namespace`, `name`, `phase`: the current phase of one object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, EncodeLabelSet)]
pub struct PhaseLabels {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub phase: String,
}

// Rows written at scrape time, borrowed from a reflector store (nothing copied per object).

/// The labels of [`PhaseLabels`], borrowed: one `kopiur_resource_phase` series read from a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhaseRow<'a> {
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub phase: &'a str,
}

impl EncodeLabelSet for PhaseRow<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        [("kind", self.kind), ("namespace", self.namespace), ("name", self.name), ("phase", self.phase)].encode(encoder)
    }
}

/// The labels of [`RepoLabels`], borrowed: a repository's health series read from its store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RepoRow<'a> {
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
}

impl EncodeLabelSet for RepoRow<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        [("kind", self.kind), ("namespace", self.namespace), ("name", self.name)].encode(encoder)
    }
}
