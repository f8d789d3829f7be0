//! Conditions derived from the breaker state: the kstatus trio plus Bootstrapped,
//! BackendReachable and CredentialsAvailable. Degraded is Reconciling (self-healing), Failed is
//! Stalled (needs a human).
use super::types::{Bootstrapped, Phase, Reach, RepoFacts, RepoStatus};
use kopiur_api::names::{condition, reason};

use crate::conditions::{Cond, CondStatus, cond};

/// `RepositoryWritable=False / RepositoryReadOnly` while `spec.mode` is `ReadOnly` (see
/// docs/design/api-contract.md §4.1: a ReadOnly repository refuses backups, skips maintenance and never creates); absent
/// otherwise, like `FeaturesIgnored` ([`drop_stale_repository_writable`] removes it).
pub fn repository_writable(read_only: bool) -> Option<Cond> {
    use kopiur_api::names::{condition, reason};
    read_only.then(|| {
        cond(
            condition::REPOSITORY_WRITABLE,
            CondStatus::False,
            reason::REPOSITORY_READ_ONLY,
            "spec.mode is ReadOnly: backups are refused and maintenance is skipped; restores and reads work",
        )
    })
}

/// Removes a stored `RepositoryWritable` the desired conditions no longer carry (the mode
/// went back to `ReadWrite`).
pub fn drop_stale_repository_writable(
    conditions: &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    desired: &[Cond],
) {
    use kopiur_api::names::condition::REPOSITORY_WRITABLE;
    if !desired.iter().any(|d| d.type_ == REPOSITORY_WRITABLE) {
        conditions.retain(|c| c.type_ != REPOSITORY_WRITABLE);
    }
}

/// The kstatus outcome of a phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kstatus {
    Ready,
    Reconciling,
    Stalled,
}

pub fn kstatus_for_phase(phase: Phase) -> Kstatus {
    match phase {
        Phase::Ready => Kstatus::Ready,
        Phase::Pending | Phase::Initializing | Phase::Degraded => Kstatus::Reconciling,
        Phase::Failed => Kstatus::Stalled,
    }
}

pub fn conditions(facts: &RepoFacts, st: &RepoStatus) -> Vec<Cond> {
    let phase = st.phase.unwrap_or(Phase::Pending);
    let creds_missing = facts.credential_version.is_none();
    let (ready_reason, ready_msg) = phase_reason(facts, st, phase, creds_missing);

    let mut out = Vec::with_capacity(6);
    let ks = if phase == Phase::Pending && creds_missing { Kstatus::Stalled } else { kstatus_for_phase(phase) };
    match ks {
        Kstatus::Ready => {
            out.push(cond("Ready", CondStatus::True, &ready_reason, ready_msg));
            out.push(cond(condition::RECONCILING, CondStatus::False, reason::CONNECTED, ""));
            out.push(cond(condition::STALLED, CondStatus::False, reason::CONNECTED, ""));
        }
        Kstatus::Reconciling => {
            out.push(cond("Ready", CondStatus::False, &ready_reason, ready_msg.clone()));
            out.push(cond(condition::RECONCILING, CondStatus::True, &ready_reason, ready_msg));
            out.push(cond(condition::STALLED, CondStatus::False, &ready_reason, ""));
        }
        Kstatus::Stalled => {
            out.push(cond("Ready", CondStatus::False, &ready_reason, ready_msg.clone()));
            out.push(cond(condition::RECONCILING, CondStatus::False, &ready_reason, ""));
            out.push(cond(condition::STALLED, CondStatus::True, &ready_reason, ready_msg));
        }
    }

    match &st.bootstrapped {
        Some(Bootstrapped::Yes) => {
            out.push(cond(condition::BOOTSTRAPPED, CondStatus::True, reason::BOOTSTRAPPED, "uniqueId pinned"))
        }
        Some(Bootstrapped::No { reason, message }) => {
            out.push(cond(condition::BOOTSTRAPPED, CondStatus::False, reason, message.clone()))
        }
        None => {}
    }

    let reach = match (&st.reach, facts.spec.probe.enabled) {
        (Some(r), _) if r.reach != Reach::Reachable => {
            Some(cond(condition::BACKEND_REACHABLE, CondStatus::False, r.reach.reason(), r.message.clone()))
        }
        (Some(_), false) | (None, false) => Some(cond(
            condition::BACKEND_REACHABLE,
            CondStatus::Unknown,
            reason::PROBE_DISABLED,
            "spec.health.probe.enabled is false",
        )),
        (Some(r), true) => {
            Some(cond(condition::BACKEND_REACHABLE, CondStatus::True, reason::REACHABLE, r.message.clone()))
        }
        (None, true) => None,
    };
    out.extend(reach);

    out.push(if creds_missing {
        cond(
            condition::CREDENTIALS_AVAILABLE,
            CondStatus::False,
            reason::MISSING_CREDENTIALS_SECRET,
            "a referenced Secret does not exist in the repository's home namespace",
        )
    } else {
        cond(condition::CREDENTIALS_AVAILABLE, CondStatus::True, "Found", "")
    });
    out.extend(repository_writable(facts.spec.read_only));
    out
}

/// The reason and message of Ready (and of Reconciling or Stalled) for a phase.
fn phase_reason(facts: &RepoFacts, st: &RepoStatus, phase: Phase, creds_missing: bool) -> (String, String) {
    let target = &facts.id.target;
    match phase {
        Phase::Ready => (reason::CONNECTED.into(), format!("connected to {target}")),
        Phase::Pending if creds_missing => (
            reason::MISSING_CREDENTIALS_SECRET.into(),
            "a referenced Secret does not exist in the repository's home namespace".into(),
        ),
        Phase::Pending => (reason::BOOTSTRAPPING.into(), "waiting for the first bootstrap".into()),
        Phase::Initializing => match (&st.bootstrapped, &st.health.strict_retry) {
            (Some(Bootstrapped::No { reason, message }), Some(r)) => (
                reason.clone(),
                format!(
                    "first bootstrap failed: {message}; retrying at {}",
                    r.next_attempt_at.format("%Y-%m-%dT%H:%M:%SZ")
                ),
            ),
            (Some(Bootstrapped::No { .. }), None) | (Some(Bootstrapped::Yes), _) | (None, _) => {
                (reason::BOOTSTRAPPING.into(), format!("connecting to {target}"))
            }
        },
        Phase::Degraded => degraded_reason(facts, st),
        Phase::Failed => match &st.terminal {
            Some(t) => (t.reason.reason().to_string(), t.message.clone()),
            None => ("Unknown".into(), "the repository failed".into()),
        },
    }
}

/// Why a Degraded repository's breaker is open: slow (TimedOut) or failed connects, and when
/// the next strict retry runs.
fn degraded_reason(facts: &RepoFacts, st: &RepoStatus) -> (String, String) {
    let target = &facts.id.target;
    let next = st
        .health
        .strict_retry
        .as_ref()
        .map(|r| format!("; next strict retry at {}", r.next_attempt_at.format("%Y-%m-%dT%H:%M:%SZ")))
        .unwrap_or_default();
    match st.reach.as_ref().filter(|r| r.reach == Reach::TimedOut) {
        // Slow, not down: its own reason, and the message says what runs meanwhile.
        Some(r) => (
            reason::TIMED_OUT.into(),
            format!(
                "circuit breaker open: {}; maintenance still runs (it compacts the index blobs that slow \
                     the connect), snapshots and restores wait{next} with a deadline of {}s",
                r.message,
                super::holdoff::bootstrap_deadline(&st.health, &facts.tuning, facts.spec.configured_deadline_seconds),
            ),
        ),
        None => (
            reason::BREAKER_OPEN.into(),
            format!(
                "circuit breaker open: {} consecutive failed connects to {target}{next}",
                st.health.consecutive_probe_failures
            ),
        ),
    }
}
