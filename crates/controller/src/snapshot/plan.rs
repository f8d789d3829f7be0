//! The Snapshot run path as a pure function: facts gathered from stores and the CR go in,
//! one decision (phase, conditions, the one next step) comes out. Gating is deferral: a
//! Snapshot whose repository is not Ready stays Pending and no consumer timer runs.
use chrono::{DateTime, Duration, Utc};
use kopiur_api::names::{condition, reason};
use kopiur_api::shared::status::Failure;
use kopiur_api::snapshot::SnapshotPhase;

use crate::conditions::{Cond, CondStatus};
use crate::gating::{Gate, Readiness};
use crate::repo_view::{class_nudges, nudge_due};
use crate::run_job::{JobFacts, JobState};
use crate::wedged::Verdict;

/// How long a missing source PVC may park a Snapshot before it fails.
pub const SOURCE_MISSING_DEADLINE_SECONDS: i64 = 1800;
/// A Job that completed without the mover's terminal PATCH becoming visible is given this long
/// for the status event to arrive before it is declared lost.
pub const RESULT_GRACE_SECONDS: i64 = 120;
/// Safety requeue for parked consumers (a missed repository event).
pub const PARKED_REQUEUE_SECONDS: i64 = 300;
/// How often failing preflight checks are re-evaluated (ages move with the clock alone).
pub const PREFLIGHT_RECHECK_SECONDS: i64 = 30;
/// How soon preflight is retried while the Maintenance data it reads is not synced yet.
pub const PREFLIGHT_DATA_RETRY_SECONDS: i64 = 5;
/// How soon a wedged Job's delete is checked (and retried while the Job is still there).
pub const WEDGED_DELETE_RETRY_SECONDS: i64 = 30;

/// Whether the recipe could be resolved and the source checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceState {
    Present,
    Missing { pvc: String },
}

/// The outcome of building the work spec (done in observe, because it needs the policy).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkSpecState {
    Fits,
    TooLarge {
        bytes: usize,
    },
    Invalid {
        message: String,
    },
    /// The mover settings are refused (`crate::mover_settings`): no Job until they change.
    MoverRefused {
        reason: &'static str,
        message: String,
    },
}

/// The policy's preflight checks, evaluated in observe (`crate::preflight`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PreflightState {
    /// The policy has no checks.
    NotConfigured,
    Passed,
    /// The first failing check; `message` is its `message`, else its name.
    Failed {
        check: String,
        message: String,
    },
    /// A check reads `maintenance.*` and the Maintenance store has not synced.
    WaitingForData,
    /// A check does not compile (the policy is Stalled `InvalidPreflight`).
    Invalid {
        policy: String,
        message: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyState {
    /// The recipe is known (from the store, or pinned in status).
    Known,
    /// Not found and nothing pinned yet.
    NotFound { name: String },
    /// No `policyRef` at all: nothing to run.
    NoPolicyRef,
    /// The recipe is known but this Snapshot breaks a rule against it (`SourceRequired`,
    /// `RepositoryNotInPolicy`: `super::refusal`): Failed with the reason, no Job.
    Refused { reason: &'static str, message: String },
}

#[derive(Clone, Debug, PartialEq)]
pub struct RunFacts {
    pub phase: Option<SnapshotPhase>,
    pub discovered: bool,
    pub has_finalizer: bool,
    pub policy: PolicyState,
    pub gate: Gate,
    pub repository_read_only: bool,
    pub preflight: PreflightState,
    /// `spec.preflight.timeout`; zero waits forever.
    pub preflight_timeout: Duration,
    /// `status.preflightSince`.
    pub preflight_since: Option<DateTime<Utc>>,
    /// Secrets the mover needs that are absent from the Job namespace (names only).
    pub missing_secrets: Vec<String>,
    pub source: SourceState,
    pub source_missing_since: Option<DateTime<Utc>>,
    pub work_spec: WorkSpecState,
    /// The backup Job and what the status records of its run.
    pub job: JobFacts,
    pub completion_recorded: bool,
    /// The repository's current `reverify-requested-at`, parsed.
    pub reverify_requested_at: Option<DateTime<Utc>>,
    /// What `inheritSecurityContextFrom` gave, when the recipe inherits.
    pub inherited_from: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do until something changes.
    Idle,
    /// Create the backup Job (the gate was evaluated in this very plan).
    Launch,
    /// The Job runs; its watch brings us back.
    AwaitJob,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    Succeeded,
    Unchanged,
    Failed,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RunDecision {
    /// The phase to write; `None` leaves an unknown phase untouched.
    pub phase: Option<SnapshotPhase>,
    pub conditions: Vec<Cond>,
    pub step: Step,
    pub add_finalizer: bool,
    pub source_missing_since: Option<DateTime<Utc>>,
    /// `status.preflightSince`: set at the first preflight failure and never reset.
    pub preflight_since: Option<DateTime<Utc>>,
    /// Written when the controller itself turns the Snapshot Failed.
    pub failure: Option<Failure>,
    /// This reconcile records the terminal transition (events, counters, nudge happen once).
    pub record_completion: Option<Completion>,
    /// Stamp `reverify-requested-at=now` on the repository.
    pub nudge: bool,
    /// A Warning Event for a non-terminal problem (WorkSpecTooLarge).
    pub warning: Option<(&'static str, String)>,
    pub requeue_after: Option<Duration>,
    /// Parked on the repository gate (the gated gauge).
    pub gated: bool,
    /// Delete the backup Job (a wedged mover pod); only once the status write landed.
    pub delete_job: bool,
    /// `status.releaseStartedAt` to write: a finished run whose staged objects are not gone
    /// (set by `snapshot::stage`, never by the plan).
    pub release_started_at: Option<DateTime<Utc>>,
}

use crate::conditions::{Standing, cond, trio};

mod gates;
use gates::gates;

/// kstatus trio for a non-terminal wait: Ready=False, Reconciling=True, Stalled=False.
fn waiting(reason: &str, message: impl Into<String>) -> Vec<Cond> {
    trio(Standing::Waiting, reason, message)
}

fn stalled(reason: &str, message: impl Into<String>) -> Vec<Cond> {
    trio(Standing::Stalled, reason, message)
}

fn done(reason: &str, message: impl Into<String>) -> Vec<Cond> {
    trio(Standing::Ready, reason, message)
}

impl RunDecision {
    fn new(phase: Option<SnapshotPhase>, conditions: Vec<Cond>, step: Step) -> Self {
        RunDecision {
            phase,
            conditions,
            step,
            add_finalizer: false,
            source_missing_since: None,
            preflight_since: None,
            failure: None,
            record_completion: None,
            nudge: false,
            warning: None,
            requeue_after: None,
            gated: false,
            delete_job: false,
            release_started_at: None,
        }
    }
}

/// The run path (spec order): discovered rows, finalizer, one-shot terminal heal, the Job in
/// flight, then the gates and the launch.
pub fn plan(f: &RunFacts, now: DateTime<Utc>) -> RunDecision {
    let mut d = plan_inner(f, now);
    d.add_finalizer = !f.has_finalizer && !f.discovered;
    if d.source_missing_since.is_none() && matches!(f.source, SourceState::Missing { .. }) {
        d.source_missing_since = f.source_missing_since;
    }
    // The first failure's time is kept whatever happens next.
    d.preflight_since = f.preflight_since.or(d.preflight_since);
    // MoverPermitted (docs/design/api-contract.md §2.6): False while privileged settings wait for the
    // namespace's opt-in, True once a run may start with them.
    let refused = match &f.work_spec {
        WorkSpecState::MoverRefused { reason, message } => Some((*reason, message.as_str())),
        WorkSpecState::Fits | WorkSpecState::TooLarge { .. } | WorkSpecState::Invalid { .. } => None,
    };
    // CredentialsAvailable=True / Found once the Secrets are there (docs/design/api-contract.md §7.4), for a run not
    // started yet whose repository is known: it replaces a False left by an earlier wait.
    if !f.discovered
        && matches!(f.phase, None | Some(SnapshotPhase::Pending))
        && f.gate == Gate::Open
        && f.missing_secrets.is_empty()
        && !d.conditions.iter().any(|c| c.type_ == condition::CREDENTIALS_AVAILABLE)
    {
        d.conditions.push(cond(
            condition::CREDENTIALS_AVAILABLE,
            CondStatus::True,
            reason::FOUND,
            "the repository's credential Secrets exist in this namespace",
        ));
    }
    let may_start =
        matches!(f.work_spec, WorkSpecState::Fits) && matches!(f.phase, None | Some(SnapshotPhase::Pending));
    d.conditions.extend(crate::mover_settings::permitted_condition(refused, may_start));
    d.conditions.extend(crate::mover_settings::inherited_condition(refused, f.inherited_from.as_deref(), may_start));
    d
}

/// docs/design/api-contract.md §7.6: a discovered row has `deletionPolicy: Retain` and no `onScheduleDelete` (X: the
/// origin label is invisible to CEL). The effective value is forced to `Retain` whatever the
/// spec says (`deletion::observe::effective_policy`); this returns the `InvalidSpec` message
/// when the spec says otherwise, None when the row is valid.
pub fn discovered_row_violation(spec: &kopiur_api::snapshot::SnapshotSpec) -> Option<String> {
    use kopiur_api::snapshot_policy::DeletionPolicy;
    let mut wrong = Vec::new();
    match spec.deletion_policy {
        Some(DeletionPolicy::Retain) => {}
        Some(p @ (DeletionPolicy::Delete | DeletionPolicy::Orphan)) => {
            wrong.push(format!("spec.deletionPolicy is {p:?}"));
        }
        None => wrong.push("spec.deletionPolicy is not set".to_string()),
    }
    if let Some(o) = spec.on_schedule_delete {
        wrong.push(format!("spec.onScheduleDelete is {o:?} (forbidden on discovered rows)"));
    }
    (!wrong.is_empty()).then(|| {
        format!(
            "a discovered Snapshot must have deletionPolicy: Retain and no onScheduleDelete, but {}; \
             the effective deletion policy is forced to Retain (deleting this row never deletes the kopia snapshot)",
            wrong.join(" and ")
        )
    })
}

pub(super) fn failed_terminal(
    f: &RunFacts,
    reason: &str,
    failure: Failure,
    nudge: bool,
    now: DateTime<Utc>,
) -> RunDecision {
    let msg = failure.message.clone().unwrap_or_else(|| reason.to_string());
    let mut d = RunDecision::new(Some(SnapshotPhase::Failed), stalled(reason, msg), Step::Idle);
    d.failure = Some(failure);
    d.record_completion = Some(Completion::Failed);
    d.nudge = nudge && nudge_due(f.reverify_requested_at, now);
    d
}

fn plan_inner(f: &RunFacts, now: DateTime<Utc>) -> RunDecision {
    if f.discovered {
        // Settled like a Succeeded row: nothing to re-check on a timer. The catalog changes a
        // row through the API (its watch event brings the reconcile back), so a row waits for a
        // change and holds no entry in the controller's requeue queue (at 50,000 rows a 600 s
        // timer held one per row, about 600 bytes each, and reconciled 83 rows a second).
        return RunDecision::new(Some(SnapshotPhase::Discovered), crate::conditions::discovered_row(), Step::Idle);
    }
    match &f.phase {
        Some(SnapshotPhase::Succeeded) => {
            let mut d = RunDecision::new(
                Some(SnapshotPhase::Succeeded),
                done(reason::SNAPSHOT_CREATED, "the backup completed"),
                Step::Idle,
            );
            d.record_completion = (!f.completion_recorded).then_some(Completion::Succeeded);
            d
        }
        Some(SnapshotPhase::Unchanged) => {
            let mut d = RunDecision::new(
                Some(SnapshotPhase::Unchanged),
                done(
                    reason::SNAPSHOT_UNCHANGED,
                    "the source was identical to the previous snapshot; no manifest written",
                ),
                Step::Idle,
            );
            d.record_completion = (!f.completion_recorded).then_some(Completion::Unchanged);
            d
        }
        Some(SnapshotPhase::Failed) => {
            // Keep the reason the failure was recorded with (PreflightTimeout, SourcePvcMissing,
            // MoverJobLost, ...); a Failed phase without one reads SnapshotFailed.
            let reason = f.job.ready_reason.as_deref().filter(|r| !r.is_empty()).unwrap_or(reason::SNAPSHOT_FAILED);
            let msg =
                f.job.failure.as_ref().and_then(|x| x.message.clone()).unwrap_or_else(|| "the backup failed".into());
            // Failed is written together with completionRecordedAt by the controller; a Failed
            // phase without it (written by an older version) is recorded once, without a nudge.
            let mut d = RunDecision::new(Some(SnapshotPhase::Failed), stalled(reason, msg), Step::Idle);
            d.record_completion = (!f.completion_recorded).then_some(Completion::Failed);
            // A wedged Job whose delete did not land the first time is deleted again.
            d.delete_job = reason == reason::MOVER_POD_WEDGED && f.job.state == JobState::Active;
            if d.delete_job {
                d.requeue_after = Some(Duration::seconds(WEDGED_DELETE_RETRY_SECONDS));
            }
            d
        }
        Some(SnapshotPhase::Discovered) => {
            RunDecision::new(Some(SnapshotPhase::Discovered), crate::conditions::discovered_row(), Step::Idle)
        }
        // A newer version's phase: leave it alone and launch nothing.
        Some(SnapshotPhase::Unknown(p)) => RunDecision::new(
            None,
            waiting("UnknownPhase", format!("phase {p} is not understood by this version")),
            Step::Idle,
        ),
        Some(SnapshotPhase::Running) => running(f, now),
        // Deleting without a deletionTimestamp cannot happen through us; treat as not started.
        Some(SnapshotPhase::Pending | SnapshotPhase::Deleting) | None => gates(f, now),
    }
}

fn running(f: &RunFacts, now: DateTime<Utc>) -> RunDecision {
    match &f.job.state {
        JobState::Active => match &f.job.pods {
            Verdict::NotWedged { recheck_at } => {
                let mut d = RunDecision::new(
                    Some(SnapshotPhase::Running),
                    waiting("BackupRunning", "the mover Job is running"),
                    Step::AwaitJob,
                );
                d.requeue_after = crate::wedged::requeue_after(
                    f.job.pod_startup_deadline,
                    f.job.created,
                    *recheck_at,
                    now,
                    Duration::seconds(PARKED_REQUEUE_SECONDS),
                );
                d
            }
            Verdict::Wedged { message } => {
                // Not the backend's fault: no reverify nudge.
                let failure = Failure { message: Some(message.clone()), ..Failure::default() };
                let mut d = failed_terminal(f, reason::MOVER_POD_WEDGED, failure, false, now);
                d.delete_job = true;
                d.requeue_after = Some(Duration::seconds(WEDGED_DELETE_RETRY_SECONDS));
                d
            }
        },
        JobState::Failed { reason } => {
            let failure = f.job.failure.clone().unwrap_or_else(|| Failure {
                kopia_error_class: Some(reason::UNKNOWN.into()),
                message: Some(format!("the backup Job failed: {reason}")),
                ..Failure::default()
            });
            // A file the mover may not read is the source's business, never the backend's: its
            // own reason, and no reverify nudge (it must not move the repository breaker).
            let denied = failure.kopia_error_class.as_deref() == Some(reason::PERMISSION_DENIED);
            let reason = if denied { reason::PERMISSION_DENIED } else { reason::SNAPSHOT_FAILED };
            let nudge = class_nudges(failure.kopia_error_class.as_deref());
            failed_terminal(f, reason, failure, nudge, now)
        }
        JobState::Complete { at } => {
            let waited = at.map(|t| now - t).unwrap_or_else(Duration::zero);
            if waited < Duration::seconds(RESULT_GRACE_SECONDS) {
                let mut d = RunDecision::new(
                    Some(SnapshotPhase::Running),
                    waiting("BackupRunning", "the mover Job completed; waiting for its result"),
                    Step::AwaitJob,
                );
                d.requeue_after = Some(Duration::seconds(RESULT_GRACE_SECONDS) - waited + Duration::seconds(1));
                return d;
            }
            let failure = Failure {
                kopia_error_class: Some(reason::UNKNOWN.into()),
                message: Some("the mover Job completed without reporting a result".into()),
                ..Failure::default()
            };
            failed_terminal(f, reason::MOVER_JOB_LOST, failure, true, now)
        }
        JobState::Absent => {
            let failure = Failure {
                kopia_error_class: Some(reason::UNKNOWN.into()),
                message: Some("the backup Job vanished before the mover reported a result".into()),
                ..Failure::default()
            };
            failed_terminal(f, reason::MOVER_JOB_LOST, failure, true, now)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap()
    }

    fn facts() -> RunFacts {
        RunFacts {
            phase: None,
            discovered: false,
            has_finalizer: true,
            policy: PolicyState::Known,
            gate: Gate::Open,
            repository_read_only: false,
            preflight: PreflightState::NotConfigured,
            preflight_timeout: Duration::minutes(10),
            preflight_since: None,
            missing_secrets: vec![],
            source: SourceState::Present,
            source_missing_since: None,
            work_spec: WorkSpecState::Fits,
            job: JobFacts::absent(),
            completion_recorded: false,
            reverify_requested_at: None,
            inherited_from: None,
        }
    }

    #[test]
    fn missing_credentials_park_after_the_repository_gate() {
        let mut f = facts();
        f.missing_secrets = vec!["kopia".into()];
        let d = plan(&f, now());
        assert_eq!(d.phase, Some(SnapshotPhase::Pending));
        assert_eq!(reason(&d), "MissingCredentialsSecret");
        assert!(d.conditions.iter().any(|c| c.type_ == "CredentialsAvailable" && c.status == CondStatus::False));
        assert_eq!(d.step, Step::Idle);
        // A structural gate (docs/design/api-contract.md §7.4): Stalled, not Reconciling.
        assert_eq!(cond_of(&d, "Stalled"), Some(("True", "MissingCredentialsSecret")));
        assert_eq!(cond_of(&d, "Reconciling").map(|c| c.0), Some("False"));
        // Once the Secret exists, CredentialsAvailable=True / Found, whether the run launches or
        // waits at a later gate (a missing source PVC).
        let mut ok = f.clone();
        ok.gate = Gate::Open;
        ok.missing_secrets.clear();
        assert_eq!(cond_of(&plan(&ok, now()), "CredentialsAvailable"), Some(("True", "Found")));
        assert_eq!(plan(&ok, now()).step, Step::Launch);
        ok.source = SourceState::Missing { pvc: "data".into() };
        let d = plan(&ok, now());
        assert_eq!((reason(&d), cond_of(&d, "CredentialsAvailable")), ("SourcePvcMissing", Some(("True", "Found"))));
        // Not written while the repository gate is closed (nothing known about the Secrets yet).
        ok.gate = Gate::NotReady { repository: "t/r".into(), phase: "Degraded".into() };
        assert_eq!(cond_of(&plan(&ok, now()), "CredentialsAvailable"), None);
        f.gate = Gate::NotReady { repository: "t/r".into(), phase: "Degraded".into() };
        assert_eq!(reason(&plan(&f, now())), "RepositoryNotReady", "the repository gate is checked first");
    }

    fn reason(d: &RunDecision) -> &str {
        &d.conditions.iter().find(|c| c.type_ == "Ready").unwrap().reason
    }

    #[test]
    fn open_gate_launches() {
        let d = plan(&facts(), now());
        assert_eq!(d.step, Step::Launch);
        assert_eq!(d.phase, Some(SnapshotPhase::Running));
        assert!(!d.add_finalizer);
    }

    #[test]
    fn not_ready_parks_pending_and_never_fails() {
        let mut f = facts();
        f.gate = Gate::NotReady { repository: "t/r".into(), phase: "Degraded".into() };
        f.source = SourceState::Missing { pvc: "data".into() };
        f.source_missing_since = None;
        // However long the outage, the gate parks: no consumer timer runs while parked.
        for hours in [0, 1, 24, 240] {
            let d = plan(&f, now() + Duration::hours(hours));
            assert_eq!(d.phase, Some(SnapshotPhase::Pending));
            assert_eq!(reason(&d), "RepositoryNotReady");
            assert_eq!(d.step, Step::Idle);
            assert!(d.gated);
            assert!(d.source_missing_since.is_none(), "the PVC clock does not start while gated");
            assert!(d.conditions[0].message.contains("t/r is Degraded"));
        }
    }

    #[test]
    fn missing_pvc_parks_then_fails_after_deadline() {
        let mut f = facts();
        f.source = SourceState::Missing { pvc: "data".into() };
        let d = plan(&f, now());
        assert_eq!(reason(&d), "SourcePvcMissing");
        assert_eq!(d.source_missing_since, Some(now()));
        assert_eq!(d.phase, Some(SnapshotPhase::Pending));
        f.source_missing_since = Some(now());
        let later = plan(&f, now() + Duration::minutes(29));
        assert_eq!(later.phase, Some(SnapshotPhase::Pending));
        assert_eq!(later.source_missing_since, Some(now()), "the clock is not restarted");
        let expired = plan(&f, now() + Duration::minutes(30));
        assert_eq!(expired.phase, Some(SnapshotPhase::Failed));
        assert_eq!(reason(&expired), "SourcePvcMissing");
        assert!(!expired.nudge, "controller-side refusals never nudge");
    }

    #[test]
    fn oversize_work_spec_never_becomes_a_job() {
        let mut f = facts();
        f.work_spec = WorkSpecState::TooLarge { bytes: 200_000 };
        let d = plan(&f, now());
        assert_eq!(d.step, Step::Idle);
        assert_eq!(reason(&d), "WorkSpecTooLarge");
        assert_eq!(d.warning.as_ref().map(|w| w.0), Some("WorkSpecTooLarge"));
        assert_eq!(d.requeue_after, Some(Duration::seconds(300)));
    }

    #[test]
    fn read_only_is_a_refusal_without_nudge() {
        let mut f = facts();
        f.repository_read_only = true;
        let d = plan(&f, now());
        assert_eq!(d.phase, Some(SnapshotPhase::Failed));
        assert_eq!(reason(&d), "RepositoryReadOnly");
        assert!(!d.nudge);
        // docs/design/api-contract.md §7.4: RepositoryWritable=False / RepositoryReadOnly, and the run ends Failed.
        assert_eq!(cond_of(&d, "RepositoryWritable"), Some(("False", "RepositoryReadOnly")));
        assert_eq!(cond_of(&d, "Stalled"), Some(("True", "RepositoryReadOnly")));
        assert_eq!(d.record_completion, Some(Completion::Failed));
        // A writable repository never writes the condition.
        assert_eq!(cond_of(&plan(&facts(), now()), "RepositoryWritable"), None);
    }

    fn cond_of<'a>(d: &'a RunDecision, t: &str) -> Option<(&'static str, &'a str)> {
        d.conditions.iter().find(|c| c.type_ == t).map(|c| (c.status.as_str(), c.reason.as_str()))
    }

    /// The readiness gate on a Snapshot (docs/design/repository-breaker.md §4, docs/design/api-contract.md §7.3, §7.4): an absent repository is
    /// Blocked (Stalled `RepositoryNotFound`), a Failed one Blocked (Stalled
    /// `RepositoryNotReady`), a healing one Wait (Reconciling `RepositoryNotReady`); each parks
    /// Pending with no Job and resumes by itself.
    #[test]
    fn the_repository_gate_is_go_wait_or_blocked() {
        let rows = [
            (crate::gating::ABSENT, "RepositoryNotFound", "True", "False"),
            ("Failed", "RepositoryNotReady", "True", "False"),
            ("Degraded", "RepositoryNotReady", "False", "True"),
            ("Initializing", "RepositoryNotReady", "False", "True"),
        ];
        for (phase, want, stalled, reconciling) in rows {
            let mut f = facts();
            f.gate = Gate::NotReady { repository: "t/r".into(), phase: phase.into() };
            let d = plan(&f, now());
            assert_eq!((d.phase.clone(), d.step.clone()), (Some(SnapshotPhase::Pending), Step::Idle), "{phase}");
            assert_eq!(reason(&d), want, "{phase}");
            assert_eq!(cond_of(&d, "Stalled").map(|c| c.0), Some(stalled), "{phase}");
            assert_eq!(cond_of(&d, "Reconciling").map(|c| c.0), Some(reconciling), "{phase}");
            assert!(d.gated && d.record_completion.is_none() && d.failure.is_none(), "{phase}: never terminal");
        }
    }

    #[test]
    fn mover_success_heals_once() {
        let mut f = facts();
        f.phase = Some(SnapshotPhase::Succeeded);
        f.job.state = JobState::Complete { at: Some(now()) };
        let d = plan(&f, now());
        assert_eq!(d.record_completion, Some(Completion::Succeeded));
        assert_eq!(reason(&d), "SnapshotCreated");
        assert_eq!(d.step, Step::Idle);
        f.completion_recorded = true;
        assert_eq!(plan(&f, now()).record_completion, None, "counted once");
        // One-shot: even with the Job TTL-reaped, a terminal Snapshot never relaunches.
        f.job.state = JobState::Absent;
        assert_eq!(plan(&f, now()).step, Step::Idle);
    }

    #[test]
    fn job_failure_fails_and_nudges_rate_limited() {
        let mut f = facts();
        f.phase = Some(SnapshotPhase::Running);
        f.job.state = JobState::Failed { reason: "BackoffLimitExceeded".into() };
        let d = plan(&f, now());
        assert_eq!(d.phase, Some(SnapshotPhase::Failed));
        assert_eq!(reason(&d), "SnapshotFailed");
        assert!(d.nudge);
        assert_eq!(d.failure.as_ref().unwrap().kopia_error_class.as_deref(), Some("Unknown"));
        assert!(d.failure.as_ref().unwrap().message.as_ref().unwrap().contains("BackoffLimitExceeded"));
        f.job.failure = Some(Failure { kopia_error_class: Some("RepositoryUnavailable".into()), ..Failure::default() });
        f.reverify_requested_at = Some(now() - Duration::seconds(30));
        let d = plan(&f, now());
        assert_eq!(
            d.failure.unwrap().kopia_error_class.as_deref(),
            Some("RepositoryUnavailable"),
            "mover's failure kept"
        );
        assert!(!d.nudge, "a stamp under 60 s old is not rewritten");
        f.reverify_requested_at = Some(now() - Duration::seconds(61));
        assert!(plan(&f, now()).nudge);
    }

    #[test]
    fn refused_mover_settings_wait_stalled_without_a_job() {
        let mut f = facts();
        f.work_spec = WorkSpecState::MoverRefused {
            reason: "PrivilegedMoverNotPermitted",
            message: "the mover would be privileged (runAsUser: 0)".into(),
        };
        let d = plan(&f, now());
        assert_eq!(d.phase, Some(SnapshotPhase::Pending));
        assert_eq!(d.step, Step::Idle, "no Job");
        assert_eq!(reason(&d), "PrivilegedMoverNotPermitted");
        assert!(d.conditions.iter().any(|c| c.type_ == "Stalled" && c.status == CondStatus::True));
        assert_eq!(d.warning.as_ref().map(|w| w.0), Some("PrivilegedMoverNotPermitted"));
        assert!(!d.nudge);
        let mp = d.conditions.iter().find(|c| c.type_ == "MoverPermitted").expect("MoverPermitted");
        assert_eq!((mp.status, mp.reason.as_str()), (CondStatus::False, "PrivilegedMoverNotPermitted"));
        // Once permitted (the namespace opted in), the same Snapshot says so and launches.
        f.work_spec = WorkSpecState::Fits;
        let d = plan(&f, now());
        let mp = d.conditions.iter().find(|c| c.type_ == "MoverPermitted").expect("MoverPermitted");
        assert_eq!(mp.status, CondStatus::True);
    }

    #[test]
    fn permission_denied_is_its_own_reason_and_never_nudges() {
        let mut f = facts();
        f.phase = Some(SnapshotPhase::Running);
        f.job.state = JobState::Failed { reason: "PodFailurePolicy".into() };
        let msg = "kopia snapshot create: permission denied: the mover runs as uid 65532 ...";
        f.job.failure = Some(Failure {
            kopia_error_class: Some("PermissionDenied".into()),
            message: Some(msg.into()),
            ..Failure::default()
        });
        let d = plan(&f, now());
        assert_eq!(d.phase, Some(SnapshotPhase::Failed));
        assert_eq!(reason(&d), "PermissionDenied");
        assert!(d.conditions.iter().any(|c| c.message == msg), "the mover's message is the condition's");
        assert!(!d.nudge, "a local file permission is not a backend failure");
    }

    #[test]
    fn a_certificate_error_fails_without_a_nudge_and_a_backend_class_nudges() {
        let failed = |class: &str| {
            let mut f = facts();
            f.phase = Some(SnapshotPhase::Running);
            f.job.state = JobState::Failed { reason: "PodFailurePolicy".into() };
            f.job.failure = Some(Failure { kopia_error_class: Some(class.into()), ..Failure::default() });
            plan(&f, now())
        };
        let d = failed("CertificateError");
        assert_eq!((d.phase.clone(), reason(&d)), (Some(SnapshotPhase::Failed), "SnapshotFailed"));
        assert!(!d.nudge, "a rejected certificate is configuration, not an outage");
        for class in ["RepositoryUnavailable", "AuthFailure", "Unknown"] {
            assert!(failed(class).nudge, "{class} nudges");
        }
    }

    #[test]
    fn vanished_job_is_lost() {
        let mut f = facts();
        f.phase = Some(SnapshotPhase::Running);
        let d = plan(&f, now());
        assert_eq!(reason(&d), "MoverJobLost");
        assert!(d.nudge);
    }

    #[test]
    fn completed_job_waits_for_the_status_event() {
        let mut f = facts();
        f.phase = Some(SnapshotPhase::Running);
        f.job.state = JobState::Complete { at: Some(now()) };
        let d = plan(&f, now() + Duration::seconds(5));
        assert_eq!(d.step, Step::AwaitJob);
        assert_eq!(d.phase, Some(SnapshotPhase::Running));
        let d = plan(&f, now() + Duration::seconds(RESULT_GRACE_SECONDS));
        assert_eq!(reason(&d), "MoverJobLost");
    }

    #[test]
    fn young_active_job_requeues_for_the_pod_check() {
        let mut f = facts();
        f.phase = Some(SnapshotPhase::Running);
        f.job.state = JobState::Active;
        f.job.created = Some(now());
        let d = plan(&f, now() + Duration::seconds(100));
        assert_eq!(d.step, Step::AwaitJob);
        assert_eq!(reason(&d), "BackupRunning");
        assert_eq!(d.requeue_after, Some(Duration::seconds(201)), "just after creation + deadline");
        assert!(!d.delete_job);
        // A long deadline still keeps the usual 300 s await requeue.
        f.job.pod_startup_deadline = Duration::seconds(3600);
        assert_eq!(plan(&f, now()).requeue_after, Some(Duration::seconds(PARKED_REQUEUE_SECONDS)));
        // Past the deadline without a pending pod: the default await requeue.
        f.job.pod_startup_deadline = Duration::seconds(300);
        assert_eq!(plan(&f, now() + Duration::seconds(400)).requeue_after, None);
        // A younger pod still under its own deadline sets the recheck.
        f.job.pods = Verdict::NotWedged { recheck_at: Some(now() + Duration::seconds(450)) };
        assert_eq!(plan(&f, now() + Duration::seconds(400)).requeue_after, Some(Duration::seconds(50)));
        // A Job without a creation time is never checked.
        f.job.pods = Verdict::NotWedged { recheck_at: None };
        f.job.created = None;
        assert_eq!(plan(&f, now()).requeue_after, None);
    }

    #[test]
    fn wedged_pod_fails_deletes_the_job_and_does_not_nudge() {
        let mut f = facts();
        f.phase = Some(SnapshotPhase::Running);
        let message = "mover pod x-1 of Job x has been container mover waiting with ImagePullBackOff for 301s";
        f.job.state = JobState::Active;
        f.job.created = Some(now() - Duration::seconds(301));
        f.job.pods = Verdict::Wedged { message: message.into() };
        let d = plan(&f, now());
        assert_eq!(d.phase, Some(SnapshotPhase::Failed));
        assert_eq!(reason(&d), "MoverPodWedged");
        assert_eq!(d.conditions[0].message, message);
        assert!(d.conditions.iter().any(|c| c.type_ == "Stalled" && c.status == CondStatus::True));
        assert_eq!(d.failure.as_ref().unwrap().message.as_deref(), Some(message));
        assert_eq!(d.record_completion, Some(Completion::Failed));
        assert!(d.delete_job);
        assert_eq!(d.requeue_after, Some(Duration::seconds(WEDGED_DELETE_RETRY_SECONDS)), "the delete is checked");
        assert!(!d.nudge, "a wedged pod is not a backend failure");
        assert_eq!(d.step, Step::Idle);
        // A stale Pending status adopting a wedged Job fails the same way.
        f.phase = Some(SnapshotPhase::Pending);
        assert_eq!(reason(&plan(&f, now())), "MoverPodWedged");
    }

    #[test]
    fn a_wedged_failure_keeps_deleting_a_lingering_job_only() {
        let mut f = facts();
        f.phase = Some(SnapshotPhase::Failed);
        f.completion_recorded = true;
        f.job.ready_reason = Some("MoverPodWedged".into());
        f.job.state = JobState::Active;
        let d = plan(&f, now());
        assert_eq!(reason(&d), "MoverPodWedged");
        assert!(d.delete_job, "the delete is retried until the Job is gone");
        assert_eq!(d.requeue_after, Some(Duration::seconds(WEDGED_DELETE_RETRY_SECONDS)));
        assert_eq!(d.record_completion, None);
        f.job.state = JobState::Absent;
        let gone = plan(&f, now());
        assert!(!gone.delete_job);
        assert_eq!(gone.requeue_after, None, "nothing left to retry");
        f.job.state = JobState::Failed { reason: "DeadlineExceeded".into() };
        assert!(!plan(&f, now()).delete_job);
        // Other failures never delete the Job.
        f.job.state = JobState::Active;
        f.job.ready_reason = Some("SnapshotFailed".into());
        assert!(!plan(&f, now()).delete_job);
    }

    #[test]
    fn unknown_phase_is_left_alone() {
        let mut f = facts();
        f.phase = Some(SnapshotPhase::Unknown("Verifying".into()));
        let d = plan(&f, now());
        assert_eq!(d.phase, None);
        assert_eq!(d.step, Step::Idle);
    }

    #[test]
    fn a_discovered_row_with_delete_or_on_schedule_delete_is_invalid_spec() {
        use kopiur_api::snapshot::SnapshotSpec;
        use kopiur_api::snapshot_policy::DeletionPolicy;
        let spec = |dp: Option<DeletionPolicy>, osd: Option<&str>| -> SnapshotSpec {
            let mut v = serde_json::json!({});
            if let Some(dp) = dp {
                v["deletionPolicy"] = serde_json::to_value(dp).unwrap();
            }
            if let Some(o) = osd {
                v["onScheduleDelete"] = o.into();
            }
            serde_json::from_value(v).unwrap()
        };
        assert_eq!(discovered_row_violation(&spec(Some(DeletionPolicy::Retain), None)), None);
        let m = discovered_row_violation(&spec(Some(DeletionPolicy::Delete), None)).unwrap();
        assert!(m.contains("spec.deletionPolicy is Delete") && m.contains("forced to Retain"), "{m}");
        let m = discovered_row_violation(&spec(Some(DeletionPolicy::Orphan), None)).unwrap();
        assert!(m.contains("Orphan"), "{m}");
        let m = discovered_row_violation(&spec(Some(DeletionPolicy::Retain), Some("Delete"))).unwrap();
        assert!(m.contains("spec.onScheduleDelete is Delete"), "{m}");
        assert!(discovered_row_violation(&spec(None, None)).is_some());
    }

    #[test]
    fn finalizer_is_ensured_and_discovered_rows_are_retained() {
        let mut f = facts();
        f.has_finalizer = false;
        assert!(plan(&f, now()).add_finalizer);
        f.discovered = true;
        let d = plan(&f, now());
        assert_eq!(d.phase, Some(SnapshotPhase::Discovered));
        assert_eq!((d.step, d.requeue_after), (Step::Idle, None), "a settled row waits for a change, no timer");
    }

    fn failing() -> PreflightState {
        PreflightState::Failed { check: "reachable".into(), message: "the backend is unreachable".into() }
    }

    #[test]
    fn failing_preflight_parks_and_starts_its_clock_once() {
        let mut f = facts();
        f.preflight = failing();
        let d = plan(&f, now());
        assert_eq!(d.phase, Some(SnapshotPhase::Pending));
        assert_eq!(reason(&d), "PreflightFailed");
        assert_eq!(d.conditions[0].message, "the backend is unreachable");
        assert_eq!(d.step, Step::Idle);
        assert!(!d.gated, "preflight is not the repository gate");
        assert_eq!(d.preflight_since, Some(now()), "set at the first failure");
        assert_eq!(d.requeue_after, Some(Duration::seconds(PREFLIGHT_RECHECK_SECONDS)));
        f.preflight_since = Some(now());
        let later = plan(&f, now() + Duration::minutes(9));
        assert_eq!(reason(&later), "PreflightFailed");
        assert_eq!(later.preflight_since, Some(now()), "the clock is not restarted");
        // Near the deadline the requeue lands on it.
        let near = plan(&f, now() + Duration::minutes(10) - Duration::seconds(7));
        assert_eq!(near.requeue_after, Some(Duration::seconds(7)));
    }

    #[test]
    fn preflight_times_out_into_failed_without_nudge() {
        let mut f = facts();
        f.preflight = failing();
        f.preflight_since = Some(now());
        let d = plan(&f, now() + Duration::minutes(10));
        assert_eq!(d.phase, Some(SnapshotPhase::Failed));
        assert_eq!(reason(&d), "PreflightTimeout");
        assert_eq!(d.record_completion, Some(Completion::Failed));
        assert!(!d.nudge, "controller-side refusals never nudge");
        assert_eq!(d.preflight_since, Some(now()));
        let msg = d.failure.unwrap().message.unwrap();
        assert!(msg.contains("reachable") && msg.contains("the backend is unreachable"), "{msg}");
        // A custom timeout is honoured.
        f.preflight_timeout = Duration::minutes(1);
        assert_eq!(reason(&plan(&f, now() + Duration::seconds(59))), "PreflightFailed");
        assert_eq!(reason(&plan(&f, now() + Duration::seconds(60))), "PreflightTimeout");
    }

    #[test]
    fn zero_preflight_timeout_waits_forever() {
        let mut f = facts();
        f.preflight = failing();
        f.preflight_timeout = Duration::zero();
        f.preflight_since = Some(now());
        for days in [0, 1, 30, 365] {
            let d = plan(&f, now() + Duration::days(days));
            assert_eq!(d.phase, Some(SnapshotPhase::Pending));
            assert_eq!(reason(&d), "PreflightFailed");
            assert_eq!(d.requeue_after, Some(Duration::seconds(PREFLIGHT_RECHECK_SECONDS)));
        }
        // A timeout beyond what a timestamp can hold also waits forever (and does not panic).
        f.preflight_timeout = Duration::MAX;
        assert_eq!(reason(&plan(&f, now() + Duration::days(365))), "PreflightFailed");
    }

    #[test]
    fn passing_preflight_launches_and_keeps_preflight_since() {
        let mut f = facts();
        f.preflight = PreflightState::Passed;
        f.preflight_since = Some(now());
        let d = plan(&f, now() + Duration::minutes(3));
        assert_eq!(d.step, Step::Launch);
        assert_eq!(d.preflight_since, Some(now()), "preflightSince is never reset");
        f.preflight_since = None;
        assert_eq!(plan(&f, now()).preflight_since, None, "no failure, no clock");
    }

    #[test]
    fn repository_gate_and_read_only_come_before_preflight() {
        let mut f = facts();
        f.preflight = failing();
        f.gate = Gate::NotReady { repository: "t/r".into(), phase: "Degraded".into() };
        for hours in [0, 1, 24] {
            let d = plan(&f, now() + Duration::hours(hours));
            assert_eq!(reason(&d), "RepositoryNotReady");
            assert_eq!(d.phase, Some(SnapshotPhase::Pending));
            assert!(d.gated);
            assert_eq!(d.preflight_since, None, "the preflight clock does not start while gated");
        }
        f.gate = Gate::Open;
        f.repository_read_only = true;
        assert_eq!(reason(&plan(&f, now())), "RepositoryReadOnly");
        f.repository_read_only = false;
        // Preflight is checked before the Secrets and the source PVC.
        f.missing_secrets = vec!["kopia".into()];
        f.source = SourceState::Missing { pvc: "data".into() };
        let d = plan(&f, now());
        assert_eq!(reason(&d), "PreflightFailed");
        assert_eq!(d.source_missing_since, None, "the PVC clock does not start behind preflight");
    }

    #[test]
    fn waiting_for_preflight_data_parks_without_starting_the_clock() {
        let mut f = facts();
        f.preflight = PreflightState::WaitingForData;
        let d = plan(&f, now());
        assert_eq!(d.phase, Some(SnapshotPhase::Pending));
        assert_eq!(reason(&d), "WaitingForPreflightData");
        assert_eq!(d.step, Step::Idle);
        assert_eq!(d.preflight_since, None);
        assert_eq!(d.requeue_after, Some(Duration::seconds(PREFLIGHT_DATA_RETRY_SECONDS)));
    }

    #[test]
    fn invalid_preflight_parks_stalled_and_never_fails() {
        let mut f = facts();
        f.preflight = PreflightState::Invalid { policy: "p".into(), message: "preflight check \"x\": boom".into() };
        for hours in [0, 24, 240] {
            let d = plan(&f, now() + Duration::hours(hours));
            assert_eq!(d.phase, Some(SnapshotPhase::Pending));
            assert_eq!(reason(&d), "InvalidPreflight");
            assert_eq!(d.step, Step::Idle);
            assert!(d.failure.is_none());
            assert_eq!(d.preflight_since, None);
            assert!(d.conditions.iter().any(|c| c.type_ == "Stalled" && c.status == CondStatus::True));
            assert!(d.conditions[0].message.contains("SnapshotPolicy p has an invalid preflight check"));
            assert!(d.conditions[0].message.contains("boom"));
        }
    }

    #[test]
    fn a_refused_snapshot_fails_with_its_reason_and_never_launches() {
        for reason in ["SourceRequired", "RepositoryNotInPolicy"] {
            let mut f = facts();
            f.policy = PolicyState::Refused { reason, message: format!("{reason}: why") };
            let d = plan(&f, now());
            assert_eq!(d.phase, Some(SnapshotPhase::Failed));
            assert_eq!(d.step, Step::Idle, "no Job");
            assert_eq!(d.conditions[0].reason, reason);
            assert!(d.conditions.iter().any(|c| c.type_ == "Stalled" && c.status == CondStatus::True));
            assert_eq!(d.failure.as_ref().and_then(|x| x.message.as_deref()), Some(format!("{reason}: why").as_str()));
            assert!(!d.nudge, "a refusal is not the backend's fault");
        }
    }

    #[test]
    fn missing_policy_parks() {
        let mut f = facts();
        f.policy = PolicyState::NotFound { name: "p".into() };
        let d = plan(&f, now());
        assert_eq!(reason(&d), "PolicyNotFound");
        assert_eq!(d.phase, Some(SnapshotPhase::Pending));
    }
    #[test]
    fn a_terminal_failure_keeps_its_recorded_reason() {
        let mut f = facts();
        f.phase = Some(SnapshotPhase::Failed);
        f.completion_recorded = true;
        f.job.ready_reason = Some("PreflightTimeout".into());
        assert_eq!(reason(&plan(&f, now())), "PreflightTimeout", "a re-reconcile does not rewrite the reason");
        f.job.ready_reason = None;
        assert_eq!(reason(&plan(&f, now())), "SnapshotFailed");
    }
}
