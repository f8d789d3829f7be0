//! Connect verdicts: what one bootstrap-shaped connect says about the backend, and how a strict
//! connect routes (the ADR's narrowing: only transport-shaped failures retry).
use kopiur_kopia::classify::Classification;
use kopiur_kopia::classify::ErrorClass;
use kopiur_kopia::verdict::{ConnectVerdict, verdict_of};

use super::types::{ConnectResult, Endpoint, EndpointAnswer, Reach, Time, Tuning};

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
    /// A deadline kill (the Job's, or kopia's own) while the backend answered: the connect is
    /// slow, not down ([`backend_answered`]).
    TimedOut {
        job_deadline: bool,
        /// The deadline the killed connect ran with.
        deadline_seconds: i64,
        /// How long the last successful connect took, if measured.
        last_connect_seconds: Option<i64>,
    },
    /// The storage is reachable but holds no repository.
    NotInitialized,
    /// RepositoryUnavailable, or NotFound without notInitialized (a missing bucket or path).
    BackendUnreachable {
        class: ErrorClass,
    },
    /// The Job failed and the mover wrote nothing (crash, wedged pod).
    BootstrapJobFailed,
    /// Everything a human must fix: auth, access, permissions, a lock, anything unknown.
    ConnectFailed {
        class: ErrorClass,
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
            // The kopia crate's mapping (the one source of it); the fold tells a vanished
            // repository from the pin, so the verdict is read unpinned.
            ConnectResult::Failed { class, not_initialized, timed_out: false } => {
                let c = Classification { class: *class, not_initialized: *not_initialized };
                match verdict_of(c, false) {
                    ConnectVerdict::NotInitialized | ConnectVerdict::RepositoryVanished => Verdict::NotInitialized,
                    ConnectVerdict::BackendUnreachable => Verdict::BackendUnreachable { class: *class },
                    ConnectVerdict::ConnectFailed(class) => Verdict::ConnectFailed { class },
                    // Not a failure's verdict; should one appear, a human looks (never a retry
                    // loop on a guess).
                    ConnectVerdict::Reachable | ConnectVerdict::ProbeDeadlineExceeded => {
                        Verdict::ConnectFailed { class: *class }
                    }
                }
            }
        }
    }

    /// The BackendReachable reason this verdict sets.
    pub fn reach(&self) -> Reach {
        match self {
            Verdict::Reachable { .. } => Reach::Reachable,
            Verdict::ProbeDeadlineExceeded { .. } => Reach::ProbeDeadlineExceeded,
            Verdict::TimedOut { .. } => Reach::TimedOut,
            Verdict::NotInitialized => Reach::RepositoryVanished,
            Verdict::BackendUnreachable { .. } => Reach::BackendUnreachable,
            Verdict::BootstrapJobFailed | Verdict::ConnectFailed { .. } => Reach::ConnectFailed,
        }
    }

    /// The `outcome` label of `kopiur_repository_health_probe_failures_total`; None on success.
    pub fn probe_outcome(&self) -> Option<&'static str> {
        match self {
            Verdict::Reachable { .. } => None,
            Verdict::ProbeDeadlineExceeded { .. } | Verdict::TimedOut { .. } => Some("timed_out"),
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
            Verdict::TimedOut { deadline_seconds, last_connect_seconds, .. } => {
                let last = match last_connect_seconds {
                    Some(l) => format!("the last successful connect took {l}s"),
                    None => "no successful connect was measured yet".to_string(),
                };
                format!(
                    "the backend answers, but the connect took longer than its deadline of {deadline_seconds}s ({last}): \
                     slow, not down"
                )
            }
            Verdict::NotInitialized => super::types::connect_failure_summary(ErrorClass::NotFound, true).to_string(),
            Verdict::BackendUnreachable { class } => super::types::connect_failure_summary(*class, false).to_string(),
            Verdict::BootstrapJobFailed => "the connect Job failed without reporting a result".to_string(),
            Verdict::ConnectFailed { class } => super::types::connect_failure_summary(*class, false).to_string(),
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
        Verdict::ProbeDeadlineExceeded { .. } | Verdict::TimedOut { .. } => StrictRoute::Retry,
        Verdict::BackendUnreachable { class: ErrorClass::RepositoryUnavailable } => StrictRoute::Retry,
        Verdict::NotInitialized => StrictRoute::NotInitialized,
        Verdict::BackendUnreachable { class } => StrictRoute::Terminal { reason: TerminalReason::Class(*class) },
        Verdict::BootstrapJobFailed => StrictRoute::Terminal { reason: TerminalReason::BootstrapJobFailed },
        Verdict::ConnectFailed { class } => StrictRoute::Terminal { reason: TerminalReason::Class(*class) },
    }
}

/// A connect that took at least this long (a quarter of the initial deadline, 30 s by
/// default) was slow: a healthy connect takes well under a few seconds.
pub fn slow_connect_seconds(tuning: &Tuning) -> i64 {
    (tuning.bootstrap_deadline_seconds / 4).max(1)
}

/// Whether a connect killed by a deadline met a backend that answers (slow, not down). The
/// freshest cheap endpoint check made since the connect was launched decides (at or after
/// `launched_at`; with no launch time, within the deadline before `completed_at`): `Answers`
/// is slow, `Down` is down. With no such check (no endpoint to ask, or none made), a last
/// successful connect that was slow ([`slow_connect_seconds`]) says the backend answers.
pub fn backend_answered(
    endpoint: &Endpoint,
    launched_at: Option<Time>,
    completed_at: Time,
    deadline_seconds: i64,
    last_connect_seconds: Option<i64>,
    tuning: &Tuning,
) -> bool {
    let since = launched_at.unwrap_or(completed_at - chrono::Duration::seconds(deadline_seconds.max(0)));
    let fresh = match endpoint {
        Endpoint::Checkable { last: Some(c), .. } if c.at >= since => Some(c.answer),
        Endpoint::Checkable { .. } | Endpoint::NotCheckable => None,
    };
    match fresh {
        Some(EndpointAnswer::Answers) => true,
        Some(EndpointAnswer::Down) => false,
        None => last_connect_seconds.is_some_and(|l| l >= slow_connect_seconds(tuning)),
    }
}

/// The verdict of a finished connect, with the facts that tell slow from down: a deadline
/// kill on a backend that answered is [`Verdict::TimedOut`], else [`Verdict::of`].
pub fn judge(
    result: &ConnectResult,
    endpoint: &Endpoint,
    launched_at: Option<Time>,
    completed_at: Time,
    deadline_seconds: i64,
    last_connect_seconds: Option<i64>,
    tuning: &Tuning,
) -> Verdict {
    match Verdict::of(result) {
        Verdict::ProbeDeadlineExceeded { job_deadline }
            if backend_answered(
                endpoint,
                launched_at,
                completed_at,
                deadline_seconds,
                last_connect_seconds,
                tuning,
            ) =>
        {
            Verdict::TimedOut { job_deadline, deadline_seconds, last_connect_seconds }
        }
        v @ (Verdict::Reachable { .. }
        | Verdict::ProbeDeadlineExceeded { .. }
        | Verdict::TimedOut { .. }
        | Verdict::NotInitialized
        | Verdict::BackendUnreachable { .. }
        | Verdict::BootstrapJobFailed
        | Verdict::ConnectFailed { .. }) => v,
    }
}
