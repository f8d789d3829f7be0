//! Exact user-facing message templates. A human reads these to act, so they carry the command.
use super::types::{RepoIdentity, RepoKind};

/// `kubectl annotate <kind>/<name> [-n <ns>] kopiur.home-operations.com/allow-reinitialize=<id> --overwrite`
pub fn ack_command(id: &RepoIdentity, unique_id: &str) -> String {
    let kind = match id.kind {
        RepoKind::Repository => "repository",
        RepoKind::ClusterRepository => "clusterrepository",
    };
    let ns = match (&id.kind, &id.namespace) {
        (RepoKind::Repository, Some(ns)) => format!(" -n {ns}"),
        (RepoKind::Repository, None) | (RepoKind::ClusterRepository, _) => String::new(),
    };
    format!(
        "kubectl annotate {kind}/{}{ns} kopiur.home-operations.com/allow-reinitialize={unique_id} --overwrite",
        id.name
    )
}

pub fn not_initialized(id: &RepoIdentity) -> String {
    format!(
        "no kopia repository exists at {} and spec.create.enabled is false; set spec.create.enabled: true to create \
         one, or point spec.backend at an existing repository",
        id.target
    )
}

/// PinnedOnceReady: never mentions spec.create.enabled.
pub fn reinitialize_blocked(id: &RepoIdentity, unique_id: &str) -> String {
    format!(
        "repository {unique_id} is no longer present at {}; kopiur never re-creates a repository that was once Ready. \
         If the data loss is understood, run: {}",
        id.target,
        ack_command(id, unique_id)
    )
}

/// DisabledBySpec while pinned: both the spec change and the ack are needed.
pub fn reinitialize_blocked_disabled(id: &RepoIdentity, unique_id: &str) -> String {
    format!(
        "repository {unique_id} is no longer present at {}; kopiur never re-creates a repository that was once Ready. \
         If the data loss is understood, set spec.create.enabled: true and run: {}",
        id.target,
        ack_command(id, unique_id)
    )
}

pub fn unique_id_mismatch(id: &RepoIdentity, pinned: &str, found: &str) -> String {
    format!(
        "the repository at {} has uniqueId {found}, but this object is pinned to {pinned}; if the new repository is \
         intended, run: {}",
        id.target,
        ack_command(id, pinned)
    )
}
