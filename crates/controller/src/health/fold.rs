//! Folding one connect verdict into the breaker state: the transition table's verdict rows.
use chrono::Duration;
use kopiur_api::names::{condition, event, reason};

use super::gate::CreateGate;
use kopiur_kopia::classify::ErrorClass;

use super::holdoff::{adaptive_deadline, escalated_deadline, strict_retry_holdoff};
use super::messages;
use super::types::{
    Bootstrapped, ConnectKind, ConnectResult, JobFacts, OnFailure, Phase, ReachState, RepoFacts, RepoStatus,
    StrictRetry, Terminal, TerminalReason, Time,
};
use super::verdict::{StrictRoute, Verdict, judge, strict_route};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// One Kubernetes Event to emit (transitions only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub type_: EventType,
    pub reason: &'static str,
    pub note: String,
}

impl Event {
    fn warning(reason: &'static str, note: String) -> Event {
        Event { type_: EventType::Warning, reason, note }
    }
    fn normal(reason: &'static str, note: String) -> Event {
        Event { type_: EventType::Normal, reason, note }
    }
}

/// Counter increments the fold asks for (gauges are derived from status at scrape time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// `kopiur_repository_breaker_trips_total{probe_kind}` +1.
    Trip { probe_kind: &'static str },
    /// `kopiur_repository_health_probe_failures_total{outcome}` +1.
    ProbeFailure { outcome: &'static str },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoldOutcome {
    pub status: RepoStatus,
    pub events: Vec<Event>,
    pub effects: Vec<Effect>,
}

/// Fold a finished bootstrap Job exactly once (the caller checks `lastFoldedJobUid`).
pub fn fold(facts: &RepoFacts, job: &JobFacts, completed_at: Time, result: &ConnectResult, now: Time) -> FoldOutcome {
    let mut out = FoldOutcome { status: facts.status.clone(), events: Vec::new(), effects: Vec::new() };
    out.status.health.last_folded_job_uid = Some(job.uid.clone());
    let configured = facts.spec.configured_deadline_seconds;
    // The deadline this connect ran with (before any escalation below).
    let current = super::holdoff::bootstrap_deadline(&out.status.health, &facts.tuning, configured);
    let verdict = judge(
        result,
        &facts.endpoint,
        job.launched_at,
        completed_at,
        current,
        out.status.health.last_connect_seconds,
        &facts.tuning,
    );

    if let ConnectResult::NoResult { deadline_exceeded: true } = result {
        out.status.health.bootstrap_deadline_seconds = Some(escalated_deadline(current, &facts.tuning, configured));
    }

    match job.kind {
        ConnectKind::Strict => {
            // A strict verdict describes the generation and credentials it was launched for, so
            // S2/S3 do not fire again for the same change.
            if let Some(g) = job.generation {
                out.status.observed_generation = Some(g);
            }
            if let Some(cv) = &job.credential_version {
                out.status.resolved_credential_version = Some(cv.clone());
            }
            fold_strict(facts, job, completed_at, &verdict, now, &mut out);
        }
        ConnectKind::Probe(_) => {
            out.status.health.last_probe_at = Some(completed_at);
            fold_probe(facts, job, completed_at, &verdict, now, &mut out);
        }
    }
    record_connect_time(facts, job, result, &mut out.status);
    out
}

/// A successful connect's measured time becomes `lastConnectSeconds`, and the deadline adapts
/// to it (`holdoff::adaptive_deadline`; it replaces a doubled one: the measurement is newer).
fn record_connect_time(facts: &RepoFacts, job: &JobFacts, result: &ConnectResult, st: &mut RepoStatus) {
    match (result, job.connect_seconds) {
        (ConnectResult::Connected { .. }, Some(secs)) => {
            let secs = secs.max(0);
            st.health.last_connect_seconds = Some(secs);
            st.health.bootstrap_deadline_seconds =
                Some(adaptive_deadline(Some(secs), &facts.tuning, facts.spec.configured_deadline_seconds));
        }
        (ConnectResult::Connected { .. }, None) => {
            // An older mover: keep the last measurement and what it earned.
            st.health.bootstrap_deadline_seconds = st
                .health
                .last_connect_seconds
                .map(|l| adaptive_deadline(Some(l), &facts.tuning, facts.spec.configured_deadline_seconds));
        }
        (ConnectResult::Failed { .. } | ConnectResult::NoResult { .. }, _) => {}
    }
}

fn pinned(st: &RepoStatus) -> Option<String> {
    st.unique_id.clone().filter(|u| !u.is_empty())
}

/// Any Reachable verdict (probe or strict): pin or check the pin, then heal. The close path.
pub fn success_fold(
    facts: &RepoFacts,
    job: &JobFacts,
    completed_at: Time,
    unique_id: &str,
    created: bool,
    index_blob_count: Option<u64>,
    out: &mut FoldOutcome,
) {
    let prev_phase = out.status.phase.unwrap_or(Phase::Pending);
    if !check_pin(facts, job, unique_id, created, index_blob_count, out) {
        return;
    }
    let h = &mut out.status.health;
    h.consecutive_probe_failures = 0;
    h.first_failure_at = None;
    h.last_healthy_at = Some(completed_at);
    // Seeds the probe clock: the first probe after a strict success lands one interval later.
    h.last_probe_at = Some(completed_at);
    h.strict_retry = None;
    h.breaker_opened_at = None;
    h.bootstrap_deadline_seconds = None;
    out.status.phase = Some(Phase::Ready);
    out.status.terminal = None;
    out.status.bootstrapped = Some(Bootstrapped::Yes);
    out.status.reach = Some(ReachState {
        reach: super::types::Reach::Reachable,
        message: Verdict::Reachable { unique_id: String::new(), created, index_blob_count }.summary(),
    });
    if index_blob_count.is_some() {
        out.status.index_blob_count = index_blob_count;
    }
    match prev_phase {
        Phase::Degraded => out.events.push(Event::normal(
            event::REPOSITORY_BREAKER_CLOSED,
            format!("a {} connect to {} succeeded; consumers resume", job.kind.label(), facts.id.target),
        )),
        Phase::Pending | Phase::Initializing | Phase::Ready | Phase::Failed => {}
    }
}

/// Pins the first repository that answers, or checks the pin: an ack'd reinitialize re-pins, a
/// different repository fails the repository (R17). False: the connect does not heal it.
fn check_pin(
    facts: &RepoFacts,
    job: &JobFacts,
    unique_id: &str,
    created: bool,
    index_blob_count: Option<u64>,
    out: &mut FoldOutcome,
) -> bool {
    match pinned(&out.status) {
        None => {
            out.status.unique_id = Some(unique_id.to_string());
            out.events.push(Event::normal(
                event::REPOSITORY_BOOTSTRAPPED,
                format!(
                    "{} repository {unique_id} at {}",
                    if created { "created" } else { "connected to" },
                    facts.id.target
                ),
            ));
        }
        Some(pin) if pin.eq_ignore_ascii_case(unique_id) => {
            if job.via_reinit_ack {
                out.events.push(Event::normal(
                    event::REINITIALIZE_ACK_IGNORED_REPOSITORY_PRESENT,
                    format!("repository {pin} is present at {}; nothing was created", facts.id.target),
                ));
            }
        }
        Some(pin) => {
            if job.via_reinit_ack {
                out.status.unique_id = Some(unique_id.to_string());
                out.events.push(Event::warning(
                    event::REPOSITORY_REINITIALIZED,
                    format!(
                        "{} repository {unique_id} at {} replaces {pin}",
                        if created { "created" } else { "pinned" },
                        facts.id.target
                    ),
                ));
            } else {
                // R17: a different repository answered; never adopt it silently.
                let message = messages::unique_id_mismatch(&facts.id, &pin, unique_id);
                to_failed(out, TerminalReason::RepositoryUniqueIdMismatch { found: unique_id.to_string() }, message);
                out.status.reach = Some(ReachState {
                    reach: super::types::Reach::Reachable,
                    message: Verdict::Reachable { unique_id: String::new(), created, index_blob_count }.summary(),
                });
                return false;
            }
        }
    }
    true
}

/// Record one failed connect of a pinned repository in the streak.
fn count_failure(out: &mut FoldOutcome, verdict: &Verdict, now: Time) {
    let h = &mut out.status.health;
    if h.consecutive_probe_failures == 0 {
        h.first_failure_at = Some(now);
    }
    h.consecutive_probe_failures = h.consecutive_probe_failures.saturating_add(1);
    out.status.reach = Some(ReachState { reach: verdict.reach(), message: verdict.summary() });
}

/// Open the breaker (R9, R11, pinned R4): on the transition only, one trip and one Event.
fn open(facts: &RepoFacts, kind: ConnectKind, now: Time, out: &mut FoldOutcome) {
    let holdoff = strict_retry_holdoff(&facts.tuning, 1);
    out.status.phase = Some(Phase::Degraded);
    out.status.health.breaker_opened_at = Some(now);
    out.status.health.strict_retry =
        Some(StrictRetry { attempt: 1, holdoff_seconds: holdoff, next_attempt_at: now + Duration::seconds(holdoff) });
    out.effects.push(Effect::Trip { probe_kind: kind.probe_kind() });
    out.events.push(Event::warning(
        event::REPOSITORY_BREAKER_OPENED,
        format!(
            "{} consecutive failed connects to {} ({}); consumers park until a connect succeeds; next strict retry \
             in {holdoff}s",
            out.status.health.consecutive_probe_failures,
            facts.id.target,
            out.status.reach.as_ref().map(|r| r.reach.reason()).unwrap_or(reason::CONNECT_FAILED),
        ),
    ));
}

/// Advance the persisted half-open schedule after a failed retry (R14, unpinned R4).
///
/// A connect launched early because the endpoint answered again took the stamped slot and
/// pays back what it ran early: see [`slot_end`]. Any other connect (a scheduled one, or one a
/// spec change launched at once) stamps its holdoff from the fold, as always.
fn advance_retry(facts: &RepoFacts, job: &JobFacts, now: Time, out: &mut FoldOutcome) {
    let prev = out.status.health.strict_retry.as_ref();
    let attempt = prev.map(|r| r.attempt.saturating_add(1)).unwrap_or(1);
    let holdoff = strict_retry_holdoff(&facts.tuning, attempt);
    let from = match job.early {
        true => slot_end(prev.map(|r| r.next_attempt_at), job.launched_at, now),
        false => now,
    };
    out.status.health.strict_retry =
        Some(StrictRetry { attempt, holdoff_seconds: holdoff, next_attempt_at: from + Duration::seconds(holdoff) });
}

/// Where the holdoff of the next retry starts. For a connect launched at or after its stamped
/// time (or at an unknown time): the fold. For one launched `early` seconds before its stamp
/// and running `took` seconds: the stamp + `early` + `took`, i.e. the holdoff-only schedule
/// pushed back by as much as the connect ran early. The next early connect may only come once
/// that holdoff window opens (`plan::slot_open`), so early connects pay back the time they
/// take: over an outage they never add up to more than the holdoff-only schedule plus the one
/// in flight.
pub fn slot_end(stamped: Option<Time>, launched_at: Option<Time>, now: Time) -> Time {
    match (stamped, launched_at) {
        (Some(stamped), Some(launched)) if launched < stamped => {
            let took = (now - launched).max(Duration::zero());
            (stamped + (stamped - launched) + took).max(now)
        }
        (Some(_) | None, _) => now,
    }
}

fn to_failed(out: &mut FoldOutcome, reason: TerminalReason, message: String) {
    out.events.push(Event::warning(reason.reason(), message.clone()));
    out.status.phase = Some(Phase::Failed);
    out.status.terminal = Some(Terminal { reason, message });
    out.status.health.strict_retry = None;
    out.status.health.breaker_opened_at = None;
}

fn fold_strict(
    facts: &RepoFacts,
    job: &JobFacts,
    completed_at: Time,
    verdict: &Verdict,
    now: Time,
    out: &mut FoldOutcome,
) {
    let prev_phase = out.status.phase.unwrap_or(Phase::Pending);
    let pin = pinned(&out.status);
    match strict_route(verdict) {
        StrictRoute::Ready { unique_id, created, index_blob_count } => {
            success_fold(facts, job, completed_at, &unique_id, created, index_blob_count, out)
        }
        StrictRoute::Retry => match pin {
            Some(_) => {
                count_failure(out, verdict, now);
                match prev_phase {
                    // R14: still open; the schedule grows, no Event and no trip.
                    Phase::Degraded => advance_retry(facts, job, now, out),
                    // R11 and pinned R4: a transport failure opens the breaker at once.
                    Phase::Ready | Phase::Initializing | Phase::Pending | Phase::Failed => {
                        open(facts, ConnectKind::Strict, now, out)
                    }
                }
            }
            None => {
                // Unpinned R4: keep Initializing and retry on the same holdoff schedule.
                out.status.phase = Some(Phase::Initializing);
                out.status.reach = Some(ReachState { reach: verdict.reach(), message: verdict.summary() });
                out.status.bootstrapped = Some(Bootstrapped::No {
                    reason: FailureReasonLabel::of(verdict).to_string(),
                    message: verdict.summary(),
                });
                advance_retry(facts, job, now, out);
            }
        },
        StrictRoute::NotInitialized => not_initialized(facts, job, verdict, pin, now, out),
        StrictRoute::Terminal { reason } => {
            match pin {
                Some(_) => count_failure(out, verdict, now),
                None => {
                    out.status.reach = Some(ReachState { reach: verdict.reach(), message: verdict.summary() });
                    out.status.bootstrapped =
                        Some(Bootstrapped::No { reason: reason.reason().to_string(), message: verdict.summary() });
                }
            }
            let message =
                format!("{}; fix it and the repository retries on the next spec or Secret change", verdict.summary());
            to_failed(out, reason, message);
        }
    }
}

/// A strict connect found no repository: a pinned one is gone (failed, the reinitialize
/// blocked unless an ack allowed the create that still found nothing), an unpinned one was
/// never initialized.
fn not_initialized(
    facts: &RepoFacts,
    job: &JobFacts,
    verdict: &Verdict,
    pin: Option<String>,
    now: Time,
    out: &mut FoldOutcome,
) {
    match pin {
        Some(pin) => {
            count_failure(out, verdict, now);
            if job.via_reinit_ack {
                // The ack allowed a create and still nothing exists: stop, so the ack
                // cannot drive a launch loop.
                to_failed(
                    out,
                    TerminalReason::Class(ErrorClass::NotFound),
                    format!(
                        "the reinitialize ack allowed creating a repository at {}, but none could be created",
                        facts.id.target
                    ),
                );
            } else {
                let message = match super::gate::gate_for(facts, Phase::Failed) {
                    CreateGate::DisabledBySpec { .. } => messages::reinitialize_blocked_disabled(&facts.id, &pin),
                    CreateGate::PinnedOnceReady | CreateGate::Allowed { .. } => {
                        messages::reinitialize_blocked(&facts.id, &pin)
                    }
                };
                to_failed(out, TerminalReason::RepositoryReinitializeBlocked, message);
            }
        }
        None => {
            out.status.reach = Some(ReachState { reach: verdict.reach(), message: verdict.summary() });
            out.status.bootstrapped = Some(Bootstrapped::No {
                reason: reason::REPOSITORY_NOT_INITIALIZED.to_string(),
                message: verdict.summary(),
            });
            to_failed(out, TerminalReason::RepositoryNotInitialized, messages::not_initialized(&facts.id));
        }
    }
}

fn fold_probe(
    facts: &RepoFacts,
    job: &JobFacts,
    completed_at: Time,
    verdict: &Verdict,
    now: Time,
    out: &mut FoldOutcome,
) {
    let prev_phase = out.status.phase.unwrap_or(Phase::Pending);
    // A rejected certificate is configuration, not an outage: it never counts toward (or
    // opens) the breaker. A probe of a repository that was serving goes terminal, like a
    // strict connect would, so a human sees the CA fix instead of a half-open loop.
    if let Verdict::ConnectFailed { class: ErrorClass::CertificateError } = verdict {
        if matches!(prev_phase, Phase::Ready | Phase::Degraded) {
            let message = format!(
                "{}; fix it and the repository retries on the next spec, Secret or CA ConfigMap change",
                verdict.summary()
            );
            to_failed(out, TerminalReason::Class(ErrorClass::CertificateError), message);
        }
        out.status.reach = Some(ReachState { reach: verdict.reach(), message: verdict.summary() });
        return;
    }
    match verdict {
        Verdict::Reachable { unique_id, created, index_blob_count } => {
            match prev_phase {
                // R7 (and any Reachable closes an open breaker).
                Phase::Ready | Phase::Degraded => {
                    success_fold(facts, job, completed_at, unique_id, *created, *index_blob_count, out)
                }
                // A probe never moves these phases; only record that the backend answered.
                Phase::Pending | Phase::Initializing | Phase::Failed => {
                    out.status.reach = Some(ReachState { reach: verdict.reach(), message: verdict.summary() });
                }
            }
        }
        Verdict::ProbeDeadlineExceeded { .. }
        | Verdict::TimedOut { .. }
        | Verdict::NotInitialized
        | Verdict::BackendUnreachable { .. }
        | Verdict::BootstrapJobFailed
        | Verdict::ConnectFailed { .. } => {
            let outcome = verdict.probe_outcome().unwrap_or("error");
            out.effects.push(Effect::ProbeFailure { outcome });
            let first = out.status.health.consecutive_probe_failures == 0;
            count_failure(out, verdict, now);
            match prev_phase {
                Phase::Ready => {
                    let p = &facts.spec.probe;
                    let opens = p.enabled
                        && out.status.health.consecutive_probe_failures >= p.failure_threshold.max(1)
                        && match p.on_failure {
                            OnFailure::Degrade => true,
                            OnFailure::Alert => false,
                        };
                    if opens {
                        open(facts, job.kind, now, out); // R9
                    } else if first {
                        // R8: one Event per failure episode.
                        out.events.push(Event::warning(
                            event::REPOSITORY_PROBE_FAILED,
                            format!("probe connect to {} failed: {}", facts.id.target, verdict.summary()),
                        ));
                    }
                }
                Phase::Degraded | Phase::Pending | Phase::Initializing | Phase::Failed => {}
            }
        }
    }
}

/// The Bootstrapped=False reason of an unpinned transport failure.
struct FailureReasonLabel;
impl FailureReasonLabel {
    fn of(verdict: &Verdict) -> &'static str {
        match verdict {
            Verdict::Reachable { .. } => condition::BOOTSTRAPPED,
            Verdict::ProbeDeadlineExceeded { job_deadline: true } => reason::BOOTSTRAP_DEADLINE_EXCEEDED,
            Verdict::ProbeDeadlineExceeded { job_deadline: false } => reason::REPOSITORY_UNAVAILABLE,
            Verdict::TimedOut { .. } => reason::TIMED_OUT,
            Verdict::NotInitialized => reason::REPOSITORY_NOT_INITIALIZED,
            Verdict::BackendUnreachable { class } | Verdict::ConnectFailed { class } => class.as_str(),
            Verdict::BootstrapJobFailed => reason::BOOTSTRAP_JOB_FAILED,
        }
    }
}
