//! Plain facts shared by every deletion decision. The reconciler fills them from reflector
//! stores and the object itself; nothing here reads the clock or the cluster.
use chrono::{DateTime, Utc};
use kopiur_api::shared::RepositoryKind;

pub type Time = DateTime<Utc>;

/// The repository a deletion runs against: enough to name it in a message and to match a
/// pinned Snapshot by uid.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RepoRef {
    pub kind: RepositoryKind,
    /// `None` for a ClusterRepository.
    pub namespace: Option<String>,
    pub name: String,
    pub uid: String,
}

impl RepoRef {
    pub fn repository(namespace: impl Into<String>, name: impl Into<String>, uid: impl Into<String>) -> RepoRef {
        RepoRef {
            kind: RepositoryKind::Repository,
            namespace: Some(namespace.into()),
            name: name.into(),
            uid: uid.into(),
        }
    }

    pub fn cluster_repository(name: impl Into<String>, uid: impl Into<String>) -> RepoRef {
        RepoRef { kind: RepositoryKind::ClusterRepository, namespace: None, name: name.into(), uid: uid.into() }
    }

    /// `Repository t/r` or `ClusterRepository r`, as messages print it.
    pub fn display(&self) -> String {
        match (self.kind, &self.namespace) {
            (RepositoryKind::Repository, Some(ns)) => format!("Repository {ns}/{}", self.name),
            (RepositoryKind::Repository, None) => format!("Repository {}", self.name),
            (RepositoryKind::ClusterRepository, _) => format!("ClusterRepository {}", self.name),
        }
    }
}

/// The kopia manifest a Snapshot owns (`status.snapshot.kopiaSnapshotID`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Manifest {
    Known(String),
    /// The run ended without a manifest (Unchanged, Failed before writing one).
    None,
    /// The backup Job is still running or not yet terminal: a manifest may still appear.
    Unsettled,
}

/// How a Snapshot is tied to a repository. A pinned Snapshot names its repository by uid; an
/// unpinned one (never reconciled before its deletion) only resolves one from its spec.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Binding {
    Pinned {
        repo_uid: String,
    },
    /// `resolves` lists the repository uids the spec (or its policy) could resolve to.
    Unpinned {
        resolves: Vec<String>,
    },
}

impl Binding {
    /// Inclusive: does this Snapshot count against repository `repo_uid`?
    pub fn counts_against(&self, repo_uid: &str) -> bool {
        match self {
            Binding::Pinned { repo_uid: pinned } => pinned == repo_uid,
            Binding::Unpinned { resolves } => resolves.iter().any(|u| u == repo_uid),
        }
    }

    /// Exclusive: may this Snapshot's manifest ride repository `repo_uid`'s batch?
    pub fn fires_on(&self, repo_uid: &str) -> bool {
        match self {
            Binding::Pinned { repo_uid: pinned } => pinned == repo_uid,
            Binding::Unpinned { .. } => false,
        }
    }
}

/// Whether the Snapshot's repository still exists (matched by name and uid).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RepoPresence {
    Present { ready: bool },
    Gone,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One Kubernetes Event the reconciler should emit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedEvent {
    pub kind: EventType,
    pub reason: &'static str,
    pub message: String,
}

/// A condition to write: type, status, reason, message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedCondition {
    pub type_: &'static str,
    pub status: bool,
    pub reason: &'static str,
    pub message: String,
}

/// Format a time the way kopiur writes it: RFC3339 UTC, second precision.
pub fn rfc3339(t: Time) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
