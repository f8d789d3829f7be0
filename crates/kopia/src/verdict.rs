//! Connect verdicts: what one bootstrap-shaped `repository connect` says about the backend.
//! This is the circuit breaker's only sensor, so the mapping is exhaustive and ordered the
//! same way as the classifier: a timeout is its own verdict, an empty store is "vanished"
//! (or "not initialized" before the first pin), and only transport-shaped failures read as
//! unreachable.
use serde::{Deserialize, Serialize};

use crate::classify::{Classification, ErrorClass};
use crate::error::KopiaError;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConnectVerdict {
    /// Connected (or created) and the status was read.
    Reachable,
    /// The mover's deadline (or the Job's) fired first.
    ProbeDeadlineExceeded,
    /// Reachable storage without a repository, and a uniqueId was pinned before.
    RepositoryVanished,
    /// Reachable storage without a repository, never bootstrapped.
    NotInitialized,
    /// Transport failures, and NotFound without not-initialized (e.g. a missing path).
    BackendUnreachable,
    /// Everything that needs a human: auth, access, permissions, locks, unknown.
    ConnectFailed(ErrorClass),
}

/// Maps a connect failure (or `None` for success) to its verdict.
pub fn connect_verdict(failure: Option<&KopiaError>, pinned: bool) -> ConnectVerdict {
    let Some(err) = failure else { return ConnectVerdict::Reachable };
    if err.timed_out() {
        return ConnectVerdict::ProbeDeadlineExceeded;
    }
    verdict_of(err.classification(), pinned)
}

pub fn verdict_of(c: Classification, pinned: bool) -> ConnectVerdict {
    match (c.class, c.not_initialized) {
        (ErrorClass::NotFound, true) => {
            if pinned {
                ConnectVerdict::RepositoryVanished
            } else {
                ConnectVerdict::NotInitialized
            }
        }
        (ErrorClass::RepositoryUnavailable, _) | (ErrorClass::NotFound, false) => ConnectVerdict::BackendUnreachable,
        (ErrorClass::AuthFailure, _)
        | (ErrorClass::AccessDenied, _)
        | (ErrorClass::PermissionDenied, _)
        | (ErrorClass::Locked, _)
        | (ErrorClass::SourceError, _)
        | (ErrorClass::CertificateError, _)
        | (ErrorClass::Unknown, _) => ConnectVerdict::ConnectFailed(c.class),
    }
}
