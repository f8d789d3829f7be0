//! Between the API status (what is stored) and the breaker's plain status (what is decided
//! over), plus the one condition merge that keeps `lastTransitionTime` when a condition's
//! status is unchanged, so a steady state re-renders byte-identical status and writes nothing.
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kopiur_api::names::{condition, reason};
use kopiur_api::repository::{
    HealthStatus, RepositoryPhase, RepositoryStatus, StorageStats, StrictRetry as ApiStrictRetry,
};
use kopiur_kopia::classify::ErrorClass;

use crate::conditions::Cond;
use crate::conditions::merge_conditions;
use crate::health::{
    Bootstrapped, Health, Phase, Reach, ReachState, RepoStatus, StrictRetry, Terminal, TerminalReason,
};

pub fn phase_from_api(p: &RepositoryPhase) -> Option<Phase> {
    match p {
        RepositoryPhase::Pending => Some(Phase::Pending),
        RepositoryPhase::Initializing => Some(Phase::Initializing),
        RepositoryPhase::Ready => Some(Phase::Ready),
        RepositoryPhase::Degraded => Some(Phase::Degraded),
        RepositoryPhase::Failed => Some(Phase::Failed),
        // A newer operator's phase: start over from Pending rather than guess.
        RepositoryPhase::Unknown(_) => None,
    }
}

pub fn phase_to_api(p: Phase) -> RepositoryPhase {
    match p {
        Phase::Pending => RepositoryPhase::Pending,
        Phase::Initializing => RepositoryPhase::Initializing,
        Phase::Ready => RepositoryPhase::Ready,
        Phase::Degraded => RepositoryPhase::Degraded,
        Phase::Failed => RepositoryPhase::Failed,
    }
}

fn cond<'a>(conds: &'a [Condition], t: &str) -> Option<&'a Condition> {
    conds.iter().find(|c| c.type_ == t)
}

pub fn terminal_reason_from(reason: &str) -> TerminalReason {
    match reason {
        reason::REPOSITORY_NOT_INITIALIZED => TerminalReason::RepositoryNotInitialized,
        reason::REPOSITORY_REINITIALIZE_BLOCKED => TerminalReason::RepositoryReinitializeBlocked,
        reason::REPOSITORY_UNIQUE_ID_MISMATCH => TerminalReason::RepositoryUniqueIdMismatch { found: String::new() },
        reason::BOOTSTRAP_JOB_FAILED => TerminalReason::BootstrapJobFailed,
        other => TerminalReason::Class(ErrorClass::from_label(other)),
    }
}

pub fn to_pure(st: Option<&RepositoryStatus>) -> RepoStatus {
    let Some(st) = st else { return RepoStatus::default() };
    let h = st.health.clone().unwrap_or_default();
    let phase = st.phase.as_ref().and_then(phase_from_api);
    // Only a Failed repository carries a terminal record; every other phase is listed so a new
    // phase must be judged here.
    let terminal = match phase {
        Some(Phase::Failed) => Some(match cond(&st.conditions, "Ready") {
            Some(c) => Terminal { reason: terminal_reason_from(c.reason.as_str()), message: c.message.clone() },
            None => Terminal { reason: TerminalReason::Class(ErrorClass::Unknown), message: String::new() },
        }),
        Some(Phase::Pending | Phase::Initializing | Phase::Ready | Phase::Degraded) | None => None,
    };
    let reach = cond(&st.conditions, condition::BACKEND_REACHABLE)
        .filter(|c| c.status != "Unknown")
        .and_then(|c| Reach::from_reason(&c.reason).map(|reach| ReachState { reach, message: c.message.clone() }));
    let bootstrapped = cond(&st.conditions, condition::BOOTSTRAPPED).map(|c| {
        if c.status == "True" {
            Bootstrapped::Yes
        } else {
            Bootstrapped::No { reason: c.reason.clone(), message: c.message.clone() }
        }
    });
    RepoStatus {
        phase,
        observed_generation: st.observed_generation,
        unique_id: st.unique_id.clone(),
        resolved_credential_version: st.resolved_credential_version.clone(),
        last_reverify_at: st.last_reverify_at,
        health: Health {
            consecutive_probe_failures: h.consecutive_probe_failures.max(0) as u32,
            first_failure_at: h.first_failure_at,
            last_healthy_at: h.last_healthy_at,
            last_probe_at: h.last_probe_at,
            probe_attempt_at: h.probe_attempt_at,
            breaker_opened_at: h.breaker_opened_at,
            strict_retry: h.strict_retry.and_then(|r| {
                r.next_attempt_at.map(|next| StrictRetry {
                    attempt: r.attempt.max(1) as u32,
                    holdoff_seconds: r.holdoff_seconds,
                    next_attempt_at: next,
                })
            }),
            bootstrap_deadline_seconds: h.bootstrap_deadline_seconds,
            last_folded_job_uid: h.last_folded_job_uid,
            last_connect_seconds: h.last_connect_seconds,
            quick_maintenance_requested_at: h.quick_maintenance_requested_at,
        },
        terminal,
        reach,
        bootstrapped,
        index_blob_count: st.storage_stats.as_ref().and_then(|s| s.index_blob_count).map(|c| c.max(0) as u64),
    }
}

/// The stored `IndexBlobHealth` condition is False (its Warning Event was already emitted).
pub fn index_blob_health_was_false(st: Option<&RepositoryStatus>) -> bool {
    st.and_then(|s| cond(&s.conditions, condition::INDEX_BLOB_HEALTH)).is_some_and(|c| c.status == "False")
}

/// Render the stored status: the fields the breaker owns replaced, everything else kept.
pub fn from_pure(
    base: Option<&RepositoryStatus>,
    pure: &RepoStatus,
    desired: &[Cond],
    backend_key: &str,
    now: DateTime<Utc>,
) -> RepositoryStatus {
    let mut st = base.cloned().unwrap_or_default();
    st.phase = pure.phase.map(phase_to_api);
    st.observed_generation = pure.observed_generation;
    st.unique_id = pure.unique_id.clone();
    st.backend = Some(backend_key.to_string());
    st.resolved_credential_version = pure.resolved_credential_version.clone();
    st.last_reverify_at = pure.last_reverify_at;
    let h = &pure.health;
    st.health = Some(HealthStatus {
        consecutive_probe_failures: h.consecutive_probe_failures.min(i32::MAX as u32) as i32,
        first_failure_at: h.first_failure_at,
        last_healthy_at: h.last_healthy_at,
        last_probe_at: h.last_probe_at,
        probe_attempt_at: h.probe_attempt_at,
        breaker_opened_at: h.breaker_opened_at,
        strict_retry: h.strict_retry.as_ref().map(|r| ApiStrictRetry {
            attempt: r.attempt.min(i32::MAX as u32) as i32,
            holdoff_seconds: r.holdoff_seconds,
            next_attempt_at: Some(r.next_attempt_at),
        }),
        bootstrap_deadline_seconds: h.bootstrap_deadline_seconds,
        last_folded_job_uid: h.last_folded_job_uid.clone(),
        last_connect_seconds: h.last_connect_seconds,
        quick_maintenance_requested_at: h.quick_maintenance_requested_at,
    });
    if let Some(count) = pure.index_blob_count {
        let prev = st.storage_stats.clone().unwrap_or_default();
        if prev.index_blob_count != Some(count as i64) {
            st.storage_stats =
                Some(StorageStats { index_blob_count: Some(count as i64), last_observed_at: Some(now), ..prev });
        }
    }
    let generation = pure.observed_generation.unwrap_or(0);
    st.conditions = merge_conditions(&st.conditions, desired, generation, now);
    st
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conditions::CondStatus;
    use crate::conditions::ktime;
    use chrono::TimeZone;

    fn c(t: &'static str, s: CondStatus, r: &str) -> Cond {
        Cond { type_: t, status: s, reason: r.into(), message: "m".into() }
    }

    #[test]
    fn transition_time_moves_only_on_status_change() {
        let t1 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let t2 = Utc.with_ymd_and_hms(2026, 1, 2, 0, 0, 0).unwrap();
        let first = merge_conditions(&[], &[c("Ready", CondStatus::True, "Connected")], 1, t1);
        let same = merge_conditions(&first, &[c("Ready", CondStatus::True, "Connected")], 1, t2);
        assert_eq!(first, same, "unchanged conditions render identically (no write)");
        let reason_only = merge_conditions(&first, &[c("Ready", CondStatus::True, "Other")], 1, t2);
        assert_eq!(reason_only[0].last_transition_time, first[0].last_transition_time);
        let flipped = merge_conditions(&first, &[c("Ready", CondStatus::False, "BreakerOpen")], 1, t2);
        assert_eq!(flipped[0].last_transition_time, ktime(t2));
    }

    #[test]
    fn order_is_kept_and_foreign_conditions_survive() {
        let t1 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let mut existing =
            merge_conditions(&[], &[c("Stalled", CondStatus::False, "x"), c("Ready", CondStatus::True, "y")], 1, t1);
        existing.push(Condition { type_: "MassDeletionHeld".into(), status: "False".into(), ..existing[0].clone() });
        let out = merge_conditions(
            &existing,
            &[c("Ready", CondStatus::True, "y"), c("Stalled", CondStatus::False, "x")],
            1,
            t1,
        );
        let types: Vec<&str> = out.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, vec!["Stalled", "Ready", "MassDeletionHeld"]);
    }

    #[test]
    fn round_trip_keeps_breaker_state() {
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let pure = RepoStatus {
            phase: Some(Phase::Failed),
            observed_generation: Some(3),
            unique_id: Some("abc".into()),
            resolved_credential_version: Some("1/".into()),
            last_reverify_at: None,
            health: Health {
                consecutive_probe_failures: 4,
                strict_retry: None,
                last_probe_at: Some(now),
                last_connect_seconds: Some(90),
                quick_maintenance_requested_at: Some(now),
                ..Health::default()
            },
            terminal: Some(Terminal { reason: TerminalReason::RepositoryReinitializeBlocked, message: "msg".into() }),
            reach: Some(ReachState { reach: Reach::RepositoryVanished, message: "gone".into() }),
            bootstrapped: Some(Bootstrapped::Yes),
            index_blob_count: Some(7),
        };
        let facts = crate::health::RepoFacts { status: pure.clone(), ..crate_facts() };
        let conds = crate::health::kstatus::conditions(&facts, &pure);
        let api = from_pure(None, &pure, &conds, "s3", now);
        let back = to_pure(Some(&api));
        assert_eq!(back, pure);
    }

    /// The stored condition is what suppresses a repeat `TooManyIndexBlobs`: a False verdict
    /// written by one reconcile reads back as "was False" in the next, which emits nothing.
    #[test]
    fn stored_index_blob_false_suppresses_the_next_event() {
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let facts = crate_facts();
        let mut d = crate::health::plan(&facts, now);
        d.status.index_blob_count = Some(1500);
        assert!(!index_blob_health_was_false(None));
        crate::health::index_blobs::apply(&mut d, &facts.id, 1000, index_blob_health_was_false(None));
        assert_eq!(d.events.iter().filter(|e| e.reason == "TooManyIndexBlobs").count(), 1);
        let stored = from_pure(None, &d.status, &d.conditions, "s3", now);
        assert!(index_blob_health_was_false(Some(&stored)));

        let facts = crate::health::RepoFacts { status: to_pure(Some(&stored)), ..crate_facts() };
        let mut d = crate::health::plan(&facts, now);
        assert_eq!(d.status.index_blob_count, Some(1500), "the count persists in storageStats");
        crate::health::index_blobs::apply(&mut d, &facts.id, 1000, index_blob_health_was_false(Some(&stored)));
        assert!(d.events.iter().all(|e| e.reason != "TooManyIndexBlobs"), "{:?}", d.events);
        let again = from_pure(Some(&stored), &d.status, &d.conditions, "s3", now);
        let c = again.conditions.iter().find(|c| c.type_ == "IndexBlobHealth").expect("condition kept");
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "TooManyIndexBlobs"));
    }

    fn crate_facts() -> crate::health::RepoFacts {
        use crate::health::*;
        RepoFacts {
            id: RepoIdentity {
                kind: RepoKind::Repository,
                namespace: Some("t".into()),
                name: "r".into(),
                target: "s3://b/p".into(),
            },
            spec: SpecFacts {
                generation: 3,
                probe: ProbeSettings::default(),
                create_enabled: true,
                read_only: false,
                suspended: false,
                configured_deadline_seconds: None,
            },
            credential_version: Some("1/".into()),
            reinit_ack: None,
            reverify_requested_at: None,
            status: RepoStatus::default(),
            job: None,
            warned_ack: None,
            tuning: Tuning::default(),
            endpoint: Default::default(),
        }
    }
}
