//! Connect verdicts: what one bootstrap-shaped connect says about the backend, and how a strict
//! connect routes (the ADR's narrowing: only transport-shaped failures retry).
use super::types::{ConnectResult, FailureClass, Reach};

/// The verdict of one connect (rows checked top to bottom).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Reachable {
        unique_id: String,
        created: bool,
        index_blob_count: Option<u64>,
    },
    /// The Job hit its deadline, or kopia's own command deadline fired.
    ProbeDeadlineExceeded {
        job_deadline: bool,
    },
    /// The storage is reachable but holds no repository.
    NotInitialized,
    /// RepositoryUnavailable, or NotFound without notInitialized (a missing bucket or path).
    BackendUnreachable {
        class: FailureClass,
    },
    /// The Job failed and the mover wrote nothing (crash, wedged pod).
    BootstrapJobFailed,
    /// Everything a human must fix: auth, access, permissions, a lock, anything unknown.
    ConnectFailed {
        class: FailureClass,
    },
}

impl Verdict {
    pub fn of(result: &ConnectResult) -> Verdict {
        match result {
            ConnectResult::Connected { unique_id, created, index_blob_count } => Verdict::Reachable {
                unique_id: unique_id.clone(),
                created: *created,
                index_blob_count: *index_blob_count,
            },
            ConnectResult::NoResult { deadline_exceeded: true } => {
                Verdict::ProbeDeadlineExceeded { job_deadline: true }
            }
            ConnectResult::NoResult { deadline_exceeded: false } => Verdict::BootstrapJobFailed,
            ConnectResult::Failed { timed_out: true, .. } => Verdict::ProbeDeadlineExceeded { job_deadline: false },
            ConnectResult::Failed { class, not_initialized, timed_out: false } => match class {
                FailureClass::NotFound if *not_initialized => Verdict::NotInitialized,
                FailureClass::NotFound | FailureClass::RepositoryUnavailable => {
                    Verdict::BackendUnreachable { class: *class }
                }
                FailureClass::AuthFailure
                | FailureClass::AccessDenied
                | FailureClass::PermissionDenied
                | FailureClass::Locked
                | FailureClass::SourceError
                | FailureClass::CertificateError
                | FailureClass::Unknown => Verdict::ConnectFailed { class: *class },
            },
        }
    }

    /// The BackendReachable reason this verdict sets.
    pub fn reach(&self) -> Reach {
        match self {
            Verdict::Reachable { .. } => Reach::Reachable,
            Verdict::ProbeDeadlineExceeded { .. } => Reach::ProbeDeadlineExceeded,
            Verdict::NotInitialized => Reach::RepositoryVanished,
            Verdict::BackendUnreachable { .. } => Reach::BackendUnreachable,
            Verdict::BootstrapJobFailed | Verdict::ConnectFailed { .. } => Reach::ConnectFailed,
        }
    }

    /// The `outcome` label of `kopiur_repository_health_probe_failures_total`; None on success.
    pub fn probe_outcome(&self) -> Option<&'static str> {
        match self {
            Verdict::Reachable { .. } => None,
            Verdict::ProbeDeadlineExceeded { .. } => Some("timed_out"),
            Verdict::NotInitialized => Some("vanished"),
            Verdict::BackendUnreachable { .. } => Some("unreachable"),
            Verdict::BootstrapJobFailed | Verdict::ConnectFailed { .. } => Some("error"),
        }
    }

    /// One fixed line per verdict for condition messages.
    pub fn summary(&self) -> String {
        match self {
            Verdict::Reachable { .. } => "the backend is reachable and the repository connected".to_string(),
            Verdict::ProbeDeadlineExceeded { job_deadline: true } => {
                "the connect Job exceeded its deadline".to_string()
            }
            Verdict::ProbeDeadlineExceeded { job_deadline: false } => {
                "kopia timed out connecting to the repository storage".to_string()
            }
            Verdict::NotInitialized => FailureClass::NotFound.summary(true).to_string(),
            Verdict::BackendUnreachable { class } => class.summary(false).to_string(),
            Verdict::BootstrapJobFailed => "the connect Job failed without reporting a result".to_string(),
            Verdict::ConnectFailed { class } => class.summary(false).to_string(),
        }
    }
}

/// How a strict connect's verdict routes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StrictRoute {
    /// Heal (pinned) or pin (unpinned).
    Ready { unique_id: String, created: bool, index_blob_count: Option<u64> },
    /// Transport-shaped: pinned opens or keeps the breaker; unpinned retries on the holdoff.
    Retry,
    /// Not initialized and no create happened.
    NotInitialized,
    /// Terminal Failed with this class reason.
    Terminal { reason: super::types::TerminalReason },
}

pub fn strict_route(verdict: &Verdict) -> StrictRoute {
    use super::types::TerminalReason;
    match verdict {
        Verdict::Reachable { unique_id, created, index_blob_count } => {
            StrictRoute::Ready { unique_id: unique_id.clone(), created: *created, index_blob_count: *index_blob_count }
        }
        Verdict::ProbeDeadlineExceeded { .. } => StrictRoute::Retry,
        Verdict::BackendUnreachable { class: FailureClass::RepositoryUnavailable } => StrictRoute::Retry,
        Verdict::NotInitialized => StrictRoute::NotInitialized,
        Verdict::BackendUnreachable { class } => StrictRoute::Terminal { reason: TerminalReason::Class(*class) },
        Verdict::BootstrapJobFailed => StrictRoute::Terminal { reason: TerminalReason::BootstrapJobFailed },
        Verdict::ConnectFailed { class } => StrictRoute::Terminal { reason: TerminalReason::Class(*class) },
    }
}
