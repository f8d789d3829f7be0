//! Fixtures shared by the breaker unit tests: a builder over a minimal repository.
use chrono::{Duration, TimeZone, Utc};
use kopiur_kopia::classify::ErrorClass;

use super::types::*;
use crate::conditions::{Cond, CondStatus};

mod endpoint;
mod gates;
mod index_blobs;
mod probe;
mod props;
mod timed_out;
mod transitions;
mod writable;

pub fn t0() -> Time {
    Utc.with_ymd_and_hms(2026, 8, 4, 12, 0, 0).unwrap()
}

pub fn at(secs: i64) -> Time {
    t0() + Duration::seconds(secs)
}

pub const PIN: &str = "0123456789abcdef0123456789abcdef";
pub const CREDS: &str = "10/11";

pub fn fresh() -> RepoFacts {
    RepoFacts {
        id: RepoIdentity {
            kind: RepoKind::Repository,
            namespace: Some("t".into()),
            name: "r".into(),
            target: "s3://bucket/prefix".into(),
        },
        spec: SpecFacts {
            generation: 1,
            probe: ProbeSettings::default(),
            create_enabled: true,
            read_only: false,
            suspended: false,
            configured_deadline_seconds: None,
        },
        credential_version: Some(CREDS.into()),
        reinit_ack: None,
        reverify_requested_at: None,
        status: RepoStatus::default(),
        job: None,
        warned_ack: None,
        tuning: Tuning::default(),
        endpoint: Default::default(),
    }
}

/// A repository that bootstrapped at t0 and is Ready.
pub fn ready() -> RepoFacts {
    let mut f = fresh();
    f.status = RepoStatus {
        phase: Some(Phase::Ready),
        observed_generation: Some(1),
        unique_id: Some(PIN.into()),
        resolved_credential_version: Some(CREDS.into()),
        last_reverify_at: None,
        health: Health { last_probe_at: Some(t0()), last_healthy_at: Some(t0()), ..Health::default() },
        terminal: None,
        reach: Some(ReachState { reach: Reach::Reachable, message: "ok".into() }),
        bootstrapped: Some(Bootstrapped::Yes),
        index_blob_count: None,
    };
    f
}

pub fn with_phase(mut f: RepoFacts, phase: Phase) -> RepoFacts {
    f.status.phase = Some(phase);
    f
}

pub fn job(kind: ConnectKind, result: ConnectResult, completed_at: Time) -> JobFacts {
    JobFacts {
        uid: format!("job-{}", completed_at.timestamp()),
        kind,
        generation: Some(1),
        credential_version: Some(CREDS.into()),
        via_reinit_ack: false,
        launched_at: None,
        early: false,
        connect_seconds: None,
        state: JobState::Finished { completed_at, result },
    }
}

pub const PROBE: ConnectKind = ConnectKind::Probe(ProbeTrigger::Periodic);
pub const STRICT: ConnectKind = ConnectKind::Strict;

pub fn ok(id: &str) -> ConnectResult {
    ConnectResult::Connected { unique_id: id.into(), created: false, index_blob_count: Some(3) }
}
pub fn created(id: &str) -> ConnectResult {
    ConnectResult::Connected { unique_id: id.into(), created: true, index_blob_count: Some(1) }
}
pub fn refused() -> ConnectResult {
    ConnectResult::Failed { class: ErrorClass::RepositoryUnavailable, not_initialized: false, timed_out: false }
}
pub fn not_init() -> ConnectResult {
    ConnectResult::Failed { class: ErrorClass::NotFound, not_initialized: true, timed_out: false }
}
pub fn class(c: ErrorClass) -> ConnectResult {
    ConnectResult::Failed { class: c, not_initialized: false, timed_out: false }
}

pub fn cond<'a>(conds: &'a [Cond], t: &str) -> &'a Cond {
    conds.iter().find(|c| c.type_ == t).unwrap_or_else(|| panic!("no {t} condition in {conds:?}"))
}

pub fn assert_kstatus(conds: &[Cond], ready: CondStatus, reconciling: CondStatus, stalled: CondStatus) {
    assert_eq!(cond(conds, "Ready").status, ready, "Ready in {conds:?}");
    assert_eq!(cond(conds, "Reconciling").status, reconciling, "Reconciling in {conds:?}");
    assert_eq!(cond(conds, "Stalled").status, stalled, "Stalled in {conds:?}");
}

pub fn reasons(events: &[super::fold::Event]) -> Vec<&'static str> {
    events.iter().map(|e| e.reason).collect()
}
