//! The run path's gates before a launch, in order (the repository, ReadOnly, the preflight
//! checks, the source volume, Secrets, the policy and the work spec): each either parks or
//! fails the run with its reason, or lets it through to the next. Pure.
use chrono::{DateTime, Utc};
use kopiur_api::names::{condition, reason};

use super::*;

/// The preflight gate (after the repository gate and the ReadOnly refusal): `None` lets the
/// run continue to the next gate.
fn preflight(f: &RunFacts, now: DateTime<Utc>) -> Option<RunDecision> {
    match &f.preflight {
        PreflightState::NotConfigured | PreflightState::Passed => None,
        PreflightState::WaitingForData => {
            let mut d = RunDecision::new(
                Some(SnapshotPhase::Pending),
                waiting(
                    reason::WAITING_FOR_PREFLIGHT_DATA,
                    "waiting for Maintenance data to sync before evaluating the preflight checks",
                ),
                Step::Idle,
            );
            d.requeue_after = Some(Duration::seconds(PREFLIGHT_DATA_RETRY_SECONDS));
            Some(d)
        }
        PreflightState::Invalid { policy, message } => {
            // The policy is Stalled; nothing here is the Snapshot's fault, so it parks until
            // the policy is fixed rather than failing on a guess.
            let mut d = RunDecision::new(
                Some(SnapshotPhase::Pending),
                stalled(
                    reason::INVALID_PREFLIGHT,
                    format!("SnapshotPolicy {policy} has an invalid preflight check: {message}"),
                ),
                Step::Idle,
            );
            d.requeue_after = Some(Duration::seconds(PARKED_REQUEUE_SECONDS));
            Some(d)
        }
        PreflightState::Failed { check, message } => {
            let since = f.preflight_since.unwrap_or(now);
            // Zero waits forever; so does a timeout too long to represent.
            let deadline = (f.preflight_timeout > Duration::zero())
                .then(|| since.checked_add_signed(f.preflight_timeout))
                .flatten();
            if let Some(deadline) = deadline
                && now >= deadline
            {
                let failure = Failure {
                    message: Some(format!(
                        "preflight check {check} has failed since {} ({message}); the timeout is {}s",
                        since.to_rfc3339(),
                        f.preflight_timeout.num_seconds()
                    )),
                    ..Failure::default()
                };
                let mut d = failed_terminal(f, reason::PREFLIGHT_TIMEOUT, failure, false, now);
                d.preflight_since = Some(since);
                return Some(d);
            }
            let mut d =
                RunDecision::new(Some(SnapshotPhase::Pending), waiting(reason::PREFLIGHT_FAILED, message), Step::Idle);
            d.preflight_since = Some(since);
            let recheck = Duration::seconds(PREFLIGHT_RECHECK_SECONDS);
            d.requeue_after = Some(deadline.map_or(recheck, |t| (t - now).min(recheck)));
            Some(d)
        }
    }
}

pub(super) fn gates(f: &RunFacts, now: DateTime<Utc>) -> RunDecision {
    if let Some(d) = policy_gate(f, now)
        .or_else(|| repository_gate(f))
        .or_else(|| read_only(f, now))
        .or_else(|| preflight(f, now))
        .or_else(|| credentials_gate(f))
        .or_else(|| source_gate(f, now))
        .or_else(|| work_spec_gate(f))
    {
        return d;
    }
    match &f.job.state {
        // A Job already exists under our name (a stale status): adopt it instead of relaunching.
        JobState::Active | JobState::Complete { .. } | JobState::Failed { .. } => running(f, now),
        JobState::Absent => {
            let mut d = RunDecision::new(
                Some(SnapshotPhase::Running),
                waiting("BackupRunning", "the mover Job was created"),
                Step::Launch,
            );
            d.conditions.push(cond(condition::SOURCE_PVC_AVAILABLE, CondStatus::True, reason::SOURCE_PVC_FOUND, ""));
            d
        }
    }
}

/// Pending and waiting (Reconciling) with `reason`, no step.
fn pending(reason: &str, msg: String) -> RunDecision {
    RunDecision::new(Some(SnapshotPhase::Pending), waiting(reason, msg), Step::Idle)
}

/// The policy: absent parks, no `policyRef` or a refused policy fails the run.
fn policy_gate(f: &RunFacts, now: DateTime<Utc>) -> Option<RunDecision> {
    match &f.policy {
        PolicyState::Known => None,
        PolicyState::NotFound { name } => {
            let mut d = pending(reason::POLICY_NOT_FOUND, format!("SnapshotPolicy {name} does not exist"));
            d.requeue_after = Some(Duration::seconds(PARKED_REQUEUE_SECONDS));
            Some(d)
        }
        PolicyState::NoPolicyRef => {
            let failure =
                Failure { message: Some("spec.policyRef is required to run a backup".into()), ..Failure::default() };
            Some(failed_terminal(f, reason::INVALID_SPEC, failure, false, now))
        }
        PolicyState::Refused { reason, message } => {
            let failure = Failure { message: Some(message.clone()), ..Failure::default() };
            Some(failed_terminal(f, reason, failure, false, now))
        }
    }
}

/// The repository gate: a repository not Ready, or a namespace it does not admit, parks the run.
fn repository_gate(f: &RunFacts) -> Option<RunDecision> {
    match &f.gate {
        Gate::Open => None,
        Gate::NotReady { .. } => {
            // The readiness gate (ADR-0007): Wait parks Reconciling with RepositoryNotReady;
            // Blocked (Failed, or absent: RepositoryNotFound) parks Stalled. Neither is terminal.
            let mut d = match f.gate.readiness() {
                Readiness::Blocked { reason } => {
                    RunDecision::new(Some(SnapshotPhase::Pending), stalled(reason, f.gate.message()), Step::Idle)
                }
                Readiness::Wait | Readiness::Go => pending(reason::REPOSITORY_NOT_READY, f.gate.message()),
            };
            d.gated = true;
            d.requeue_after = Some(Duration::seconds(PARKED_REQUEUE_SECONDS));
            Some(d)
        }
        Gate::NamespaceNotAllowed { .. } => {
            let mut d = RunDecision::new(
                Some(SnapshotPhase::Pending),
                stalled(reason::NAMESPACE_NOT_ALLOWED, f.gate.message()),
                Step::Idle,
            );
            d.requeue_after = Some(Duration::seconds(PARKED_REQUEUE_SECONDS));
            Some(d)
        }
    }
}

/// A ReadOnly repository refuses backups: the run fails.
fn read_only(f: &RunFacts, now: DateTime<Utc>) -> Option<RunDecision> {
    if !f.repository_read_only {
        return None;
    }
    let failure =
        Failure { message: Some("the repository is mode ReadOnly; backups are refused".into()), ..Failure::default() };
    let mut d = failed_terminal(f, reason::REPOSITORY_READ_ONLY, failure, false, now);
    d.conditions.push(cond(
        condition::REPOSITORY_WRITABLE,
        CondStatus::False,
        reason::REPOSITORY_READ_ONLY,
        "the repository is mode ReadOnly; this Snapshot cannot write to it",
    ));
    Some(d)
}

/// Credentials Secrets missing in the Job's namespace park the run.
fn credentials_gate(f: &RunFacts) -> Option<RunDecision> {
    if f.missing_secrets.is_empty() {
        return None;
    }
    let msg = format!(
        "Secret {} does not exist in this namespace; the mover reads credentials from the Job's namespace",
        f.missing_secrets.join(", ")
    );
    // A structural gate (docs/design/api-contract.md §7.4): a human creates the Secret, so Stalled; the Secret
    // watch (and the requeue) resumes the run.
    let mut d = RunDecision::new(
        Some(SnapshotPhase::Pending),
        stalled(reason::MISSING_CREDENTIALS_SECRET, msg.clone()),
        Step::Idle,
    );
    d.conditions.push(cond(
        condition::CREDENTIALS_AVAILABLE,
        CondStatus::False,
        reason::MISSING_CREDENTIALS_SECRET,
        msg,
    ));
    d.requeue_after = Some(Duration::seconds(PARKED_REQUEUE_SECONDS));
    Some(d)
}

/// A missing source PVC parks the run, and fails it past its deadline.
fn source_gate(f: &RunFacts, now: DateTime<Utc>) -> Option<RunDecision> {
    let SourceState::Missing { pvc } = &f.source else { return None };
    let since = f.source_missing_since.unwrap_or(now);
    let deadline = since + Duration::seconds(SOURCE_MISSING_DEADLINE_SECONDS);
    if now >= deadline {
        let failure = Failure {
            message: Some(format!("source PVC {pvc} has been missing since {}", since.to_rfc3339())),
            ..Failure::default()
        };
        let mut d = failed_terminal(f, reason::SOURCE_PVC_MISSING, failure, false, now);
        d.source_missing_since = Some(since);
        return Some(d);
    }
    let mut d = pending(reason::SOURCE_PVC_MISSING, format!("source PVC {pvc} does not exist"));
    d.conditions.push(cond(
        condition::SOURCE_PVC_AVAILABLE,
        CondStatus::False,
        reason::SOURCE_PVC_MISSING,
        format!("PVC {pvc} not found"),
    ));
    d.source_missing_since = Some(since);
    d.requeue_after = Some((deadline - now).min(Duration::seconds(PARKED_REQUEUE_SECONDS)));
    Some(d)
}

/// A work spec that cannot be built (too large, invalid, refused mover settings) parks the run.
fn work_spec_gate(f: &RunFacts) -> Option<RunDecision> {
    match &f.work_spec {
        WorkSpecState::Fits => None,
        WorkSpecState::TooLarge { bytes } => {
            let msg = format!(
                "the work spec is {bytes} bytes, over the 102400-byte cap; reduce sources, tags or ignore rules"
            );
            let mut d = pending(reason::WORK_SPEC_TOO_LARGE, msg.clone());
            d.warning = Some((reason::WORK_SPEC_TOO_LARGE, msg));
            d.requeue_after = Some(Duration::seconds(300));
            Some(d)
        }
        WorkSpecState::Invalid { message } => {
            let mut d = pending("InvalidWorkSpec", message.clone());
            d.requeue_after = Some(Duration::seconds(300));
            Some(d)
        }
        WorkSpecState::MoverRefused { reason, message } => {
            // Waits, Stalled, with no Job, until a human changes the settings or annotates the
            // namespace (re-checked every minute).
            let mut d = RunDecision::new(Some(SnapshotPhase::Pending), stalled(reason, message.clone()), Step::Idle);
            d.warning = Some((reason, message.clone()));
            d.requeue_after = Some(Duration::seconds(60));
            Some(d)
        }
    }
}
