//! The plain facts and persisted state the breaker decides over. Everything a decision needs
//! is here; nothing is read from the clock or the cluster inside the decision code.
use chrono::{DateTime, Utc};
use kopiur_api::names::reason;
use kopiur_kopia::classify::ErrorClass;

pub type Time = DateTime<Utc>;

/// Repository phase (status.phase).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Pending,
    Initializing,
    Ready,
    Degraded,
    Failed,
}

impl Phase {
    pub const ALL: [Phase; 5] = [Phase::Pending, Phase::Initializing, Phase::Ready, Phase::Degraded, Phase::Failed];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Initializing => "Initializing",
            Phase::Ready => "Ready",
            Phase::Degraded => "Degraded",
            Phase::Failed => "Failed",
        }
    }
}

/// What sustained probe failure does (spec.health.probe.onFailure).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnFailure {
    Degrade,
    Alert,
}

/// spec.health.probe, already resolved (absent values read as the schema defaults).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeSettings {
    pub enabled: bool,
    pub interval_seconds: i64,
    pub failure_threshold: u32,
    pub on_failure: OnFailure,
}

impl Default for ProbeSettings {
    fn default() -> Self {
        ProbeSettings { enabled: true, interval_seconds: 1800, failure_threshold: 3, on_failure: OnFailure::Degrade }
    }
}

/// Operator timing knobs. The defaults are the ADR's numbers; tests may shorten them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// First strict-retry holdoff; doubles per retry.
    pub strict_retry_base_seconds: i64,
    /// Cap of the strict-retry holdoff (bounds Jobs per day of outage).
    pub strict_retry_cap_seconds: i64,
    /// Minimum spacing between two honored reverify nudges.
    pub reverify_spacing_seconds: i64,
    /// First bootstrap Job deadline when the spec sets none.
    pub bootstrap_deadline_seconds: i64,
    /// Floor of the bootstrap deadline cap: it doubles up to max(this, configured).
    pub bootstrap_deadline_cap_seconds: i64,
    /// After stamping probeAttemptAt, a Job not yet visible in the store is assumed to be on
    /// its way for this long (protects against a double launch after a restart).
    pub launch_grace_seconds: i64,
    /// Heartbeat of a Failed repository: re-evaluates the terminal gate, launches nothing.
    pub terminal_heartbeat_seconds: i64,
    /// Cadence of the controller's cheap endpoint check while the breaker is open for an
    /// unreachable backend (no Job, no kopia; see [`Endpoint`]).
    pub endpoint_check_seconds: i64,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            strict_retry_base_seconds: 120,
            strict_retry_cap_seconds: 600,
            reverify_spacing_seconds: 120,
            bootstrap_deadline_seconds: 120,
            bootstrap_deadline_cap_seconds: 1800,
            launch_grace_seconds: 30,
            terminal_heartbeat_seconds: 1800,
            endpoint_check_seconds: 20,
        }
    }
}

/// status.health.strictRetry: the persisted half-open schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StrictRetry {
    pub attempt: u32,
    pub holdoff_seconds: i64,
    pub next_attempt_at: Time,
}

/// status.health: the breaker state, persisted so a restart cannot reset it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Health {
    pub consecutive_probe_failures: u32,
    pub first_failure_at: Option<Time>,
    pub last_healthy_at: Option<Time>,
    pub last_probe_at: Option<Time>,
    pub probe_attempt_at: Option<Time>,
    pub breaker_opened_at: Option<Time>,
    pub strict_retry: Option<StrictRetry>,
    pub bootstrap_deadline_seconds: Option<i64>,
    pub last_folded_job_uid: Option<String>,
    /// Seconds the last successful connect took (the mover's measurement).
    pub last_connect_seconds: Option<i64>,
    /// When `IndexBlobHealth` last asked the repository's Maintenance for a quick run.
    pub quick_maintenance_requested_at: Option<Time>,
}

/// The kopia error classes as they reach the controller in a connect result: the kopia
/// crate's own type (the mover classifies, the controller only reads the label back).

/// The fixed one-line summary of a failed *connect* used in condition messages (kopia's own
/// text churns). It differs from [`kopiur_kopia::classify::Classification::summary`] only
/// where a connect reads differently from a backup: a connect names no snapshot, and a source
/// error during a connect is kopia's, not the backed-up volume's.
pub fn connect_failure_summary(class: ErrorClass, not_initialized: bool) -> &'static str {
    match (class, not_initialized) {
        (ErrorClass::NotFound, false) => "the repository storage, bucket or path was not found",
        (ErrorClass::SourceError, _) => "kopia reported a source error while connecting",
        (
            ErrorClass::NotFound
            | ErrorClass::AuthFailure
            | ErrorClass::AccessDenied
            | ErrorClass::PermissionDenied
            | ErrorClass::Locked
            | ErrorClass::RepositoryUnavailable
            | ErrorClass::CertificateError
            | ErrorClass::Unknown,
            _,
        ) => kopiur_kopia::classify::Classification { class, not_initialized }.summary(),
    }
}

/// What kind of connect a bootstrap Job ran, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConnectKind {
    Strict,
    Probe(ProbeTrigger),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeTrigger {
    Periodic,
    Reverify,
}

impl ConnectKind {
    /// The `connect-kind` label value.
    pub fn label(self) -> &'static str {
        match self {
            ConnectKind::Strict => "strict",
            ConnectKind::Probe(_) => "probe",
        }
    }

    /// The `probe_kind` metric label: which kind of connect tripped the breaker.
    pub fn probe_kind(self) -> &'static str {
        match self {
            ConnectKind::Strict => "strict",
            ConnectKind::Probe(ProbeTrigger::Periodic) => "probe",
            ConnectKind::Probe(ProbeTrigger::Reverify) => "reverify",
        }
    }

    /// Every connect kind, for parsing: `probe_kind` (an exhaustive match) is the one mapping,
    /// so a new kind cannot be written but not read back.
    pub const ALL: [ConnectKind; 3] =
        [ConnectKind::Strict, ConnectKind::Probe(ProbeTrigger::Periodic), ConnectKind::Probe(ProbeTrigger::Reverify)];

    /// The inverse of [`ConnectKind::probe_kind`]; `None` for a label this build does not know.
    pub fn from_probe_kind(s: &str) -> Option<ConnectKind> {
        ConnectKind::ALL.into_iter().find(|k| k.probe_kind() == s)
    }
}

/// What one bootstrap Job reported: the result ConfigMap, or the Job's own terminal condition
/// when the mover wrote nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnectResult {
    Connected { unique_id: String, created: bool, index_blob_count: Option<u64> },
    Failed { class: ErrorClass, not_initialized: bool, timed_out: bool },
    NoResult { deadline_exceeded: bool },
}

/// Why a repository is terminally Failed: the Ready=False reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TerminalReason {
    /// A kopia class (AuthFailure, AccessDenied, PermissionDenied, Locked, SourceError,
    /// Unknown, NotFound).
    Class(ErrorClass),
    RepositoryNotInitialized,
    RepositoryReinitializeBlocked,
    RepositoryUniqueIdMismatch {
        found: String,
    },
    BootstrapJobFailed,
}

impl TerminalReason {
    pub fn reason(&self) -> &'static str {
        match self {
            TerminalReason::Class(c) => c.as_str(),
            TerminalReason::RepositoryNotInitialized => reason::REPOSITORY_NOT_INITIALIZED,
            TerminalReason::RepositoryReinitializeBlocked => reason::REPOSITORY_REINITIALIZE_BLOCKED,
            TerminalReason::RepositoryUniqueIdMismatch { .. } => reason::REPOSITORY_UNIQUE_ID_MISMATCH,
            TerminalReason::BootstrapJobFailed => reason::BOOTSTRAP_JOB_FAILED,
        }
    }
}

/// The persisted terminal verdict (Ready condition reason and message while Failed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Terminal {
    pub reason: TerminalReason,
    pub message: String,
}

/// BackendReachable condition state, as last folded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    Reachable,
    BackendUnreachable,
    RepositoryVanished,
    ProbeDeadlineExceeded,
    /// Killed by its deadline while the backend answered: slow, not down.
    TimedOut,
    ConnectFailed,
}

impl Reach {
    pub fn reason(self) -> &'static str {
        match self {
            Reach::Reachable => reason::REACHABLE,
            Reach::BackendUnreachable => reason::BACKEND_UNREACHABLE,
            Reach::RepositoryVanished => reason::REPOSITORY_VANISHED,
            Reach::ProbeDeadlineExceeded => reason::PROBE_DEADLINE_EXCEEDED,
            Reach::TimedOut => reason::TIMED_OUT,
            Reach::ConnectFailed => reason::CONNECT_FAILED,
        }
    }

    pub fn from_reason(s: &str) -> Option<Reach> {
        [
            Reach::Reachable,
            Reach::BackendUnreachable,
            Reach::RepositoryVanished,
            Reach::ProbeDeadlineExceeded,
            Reach::TimedOut,
            Reach::ConnectFailed,
        ]
        .into_iter()
        .find(|r| r.reason() == s)
    }
}

/// The last folded reachability plus the one-line message it came with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReachState {
    pub reach: Reach,
    pub message: String,
}

/// Bootstrapped condition: True once pinned, False with the class of an unpinned failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bootstrapped {
    Yes,
    No { reason: String, message: String },
}

/// The repository status fields the breaker owns, as persisted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RepoStatus {
    pub phase: Option<Phase>,
    pub observed_generation: Option<i64>,
    pub unique_id: Option<String>,
    pub resolved_credential_version: Option<String>,
    pub last_reverify_at: Option<Time>,
    pub health: Health,
    pub terminal: Option<Terminal>,
    pub reach: Option<ReachState>,
    pub bootstrapped: Option<Bootstrapped>,
    pub index_blob_count: Option<u64>,
}

/// Which kind of object, for messages and metric labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RepoKind {
    Repository,
    ClusterRepository,
}

impl RepoKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RepoKind::Repository => "Repository",
            RepoKind::ClusterRepository => "ClusterRepository",
        }
    }
}

/// Identity of the repository object, for messages (the ack command names it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepoIdentity {
    pub kind: RepoKind,
    pub namespace: Option<String>,
    pub name: String,
    /// `s3://<bucket>/<prefix>` or `filesystem:<path>`.
    pub target: String,
}

/// Resolved spec facts the breaker reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecFacts {
    pub generation: i64,
    pub probe: ProbeSettings,
    pub create_enabled: bool,
    pub read_only: bool,
    pub suspended: bool,
    /// spec.bootstrap.failurePolicy.activeDeadlineSeconds, if set.
    pub configured_deadline_seconds: Option<i64>,
}

/// A bootstrap Job of this repository as seen in the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobFacts {
    pub uid: String,
    pub kind: ConnectKind,
    /// The generation and credential version the Job was launched for (Job annotations).
    pub generation: Option<i64>,
    pub credential_version: Option<String>,
    /// The Job carried an `Allowed { via_reinit_ack: true }` gate.
    pub via_reinit_ack: bool,
    /// When the Job was created (its creationTimestamp), if known.
    pub launched_at: Option<Time>,
    /// A strict connect launched early because the endpoint answered again (the Job's
    /// `early-strict` annotation): it took the slot of the stamped retry (`fold::slot_end`).
    pub early: bool,
    /// Seconds the connect took, as the mover measured it (rounded up); None when the mover
    /// wrote nothing (a deadline kill) or is older than the measurement.
    pub connect_seconds: Option<i64>,
    pub state: JobState,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState {
    Running,
    Finished { completed_at: Time, result: ConnectResult },
}

/// Everything one reconcile of one repository decides over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepoFacts {
    pub id: RepoIdentity,
    pub spec: SpecFacts,
    /// `"<pwRV>/<authRV>"` of the referenced Secrets; None when one is missing.
    pub credential_version: Option<String>,
    /// The raw `allow-reinitialize` annotation.
    pub reinit_ack: Option<String>,
    /// The raw `reverify-requested-at` annotation.
    pub reverify_requested_at: Option<String>,
    pub status: RepoStatus,
    pub job: Option<JobFacts>,
    /// The last `allow-reinitialize` value an InvalidReinitializeAck was emitted for (process
    /// memory: at most one repeat per value after a restart).
    pub warned_ack: Option<String>,
    pub tuning: Tuning,
    /// The controller's own cheap check of the backend endpoint.
    pub endpoint: Endpoint,
}

/// What the controller's cheap endpoint check saw: an unauthenticated request to the backend
/// endpoint, no Job and no kopia. Any protocol answer (an HTTP status line, even 403, or a TLS
/// record) is `Answers`; a refused, reset or timed-out connection is `Down`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EndpointAnswer {
    Answers,
    Down,
}

impl EndpointAnswer {
    /// The `outcome` label of `kopiur_repository_endpoint_checks_total`.
    pub fn label(self) -> &'static str {
        match self {
            EndpointAnswer::Answers => "answers",
            EndpointAnswer::Down => "down",
        }
    }
}

/// One cheap check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndpointCheck {
    pub at: Time,
    pub answer: EndpointAnswer,
}

/// The cheap-check facts (process memory of the reconcile shell; after a restart the open
/// breaker's own unreachable verdict stands for the last `Down`). A cheap answer never changes
/// the phase: it can only move the next strict connect earlier, into the slot it would have
/// taken anyway.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Endpoint {
    /// No endpoint to check (a filesystem backend, a repository server): the holdoff alone.
    #[default]
    NotCheckable,
    Checkable {
        /// The last check, if any since this process started.
        last: Option<EndpointCheck>,
        /// The check that saw the endpoint answer after a check saw it down, while no early
        /// strict connect was spent on that transition yet.
        returned: Option<EndpointCheck>,
    },
}
