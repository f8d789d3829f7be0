//! One test per transition row R1–R17.
use chrono::Duration;
use kopiur_api::names::event;
use kopiur_kopia::classify::ErrorClass;

use super::*;
use crate::conditions::CondStatus::{False, True};
use crate::health::fold::{Effect, EventType};
use crate::health::gate::CreateGate;
use crate::health::plan::{Plan, plan};

fn launched(p: &Plan) -> &crate::health::plan::Launch {
    match p {
        Plan::Launch(l) => l,
        Plan::Idle | Plan::AwaitJob | Plan::DeleteJob { .. } => panic!("expected a launch, got {p:?}"),
    }
}

#[test]
fn r1_created_is_pending_and_reconciling() {
    let mut f = fresh();
    f.spec.suspended = true; // nothing launches, so the created phase is visible
    let d = plan(&f, t0());
    assert_eq!(d.status.phase, Some(Phase::Pending));
    assert_eq!(d.plan, Plan::Idle);
    assert_kstatus(&d.conditions, False, True, False);
}

#[test]
fn r2_pending_launches_first_strict_and_initializes() {
    let d = plan(&fresh(), t0());
    assert_eq!(d.status.phase, Some(Phase::Initializing));
    let l = launched(&d.plan);
    assert_eq!(l.kind, STRICT);
    assert_eq!(l.gate, CreateGate::Allowed { via_reinit_ack: false });
    assert_eq!(l.deadline_seconds, 120);
    assert_eq!(l.credential_version, CREDS);
}

#[test]
fn r3_first_strict_success_pins_and_seeds_probe_clock() {
    let mut f = with_phase(fresh(), Phase::Initializing);
    f.job = Some(job(STRICT, created(PIN), at(20)));
    let d = plan(&f, at(21));
    let st = &d.status;
    assert_eq!(st.phase, Some(Phase::Ready));
    assert_eq!(st.unique_id.as_deref(), Some(PIN));
    assert_eq!(st.observed_generation, Some(1));
    assert_eq!(st.resolved_credential_version.as_deref(), Some(CREDS));
    assert_eq!(st.health.last_probe_at, Some(at(20)));
    assert_eq!(st.health.last_healthy_at, Some(at(20)));
    assert_eq!(st.health.consecutive_probe_failures, 0);
    assert_eq!(st.health.last_folded_job_uid, f.job.as_ref().map(|j| j.uid.clone()));
    assert_eq!(reasons(&d.events), vec!["RepositoryBootstrapped"]);
    assert!(matches!(d.plan, Plan::DeleteJob { .. }));
    assert_kstatus(&d.conditions, True, False, False);
    assert_eq!(cond(&d.conditions, "Bootstrapped").status, True);
    assert_eq!(cond(&d.conditions, "BackendReachable").reason, "Reachable");
}

#[test]
fn r4_unpinned_transport_failure_retries_on_holdoff_in_initializing() {
    let mut f = with_phase(fresh(), Phase::Initializing);
    f.job = Some(job(STRICT, refused(), at(5)));
    let d = plan(&f, at(6));
    assert_eq!(d.status.phase, Some(Phase::Initializing));
    let r = d.status.health.strict_retry.clone().expect("retry stamped");
    assert_eq!((r.attempt, r.holdoff_seconds, r.next_attempt_at), (1, 120, at(126)));
    assert!(d.effects.is_empty(), "no trip for an unpinned repository: {:?}", d.effects);
    assert_eq!(d.status.health.consecutive_probe_failures, 0, "the streak counts pinned repositories only");
    assert_eq!(cond(&d.conditions, "Bootstrapped").reason, "RepositoryUnavailable");
    assert_kstatus(&d.conditions, False, True, False);

    // Job deleted; before the stamp nothing launches, at the stamp the retry does.
    let mut g = f.clone();
    g.status = d.status.clone();
    g.job = None;
    let early = plan(&g, at(100));
    assert_eq!(early.plan, Plan::Idle);
    assert_eq!(early.requeue_after, Some(Duration::seconds(26)));
    assert_eq!(launched(&plan(&g, at(126)).plan).kind, STRICT);

    // A second failure doubles the holdoff.
    g.job = Some(job(STRICT, refused(), at(130)));
    let d2 = plan(&g, at(130));
    let r2 = d2.status.health.strict_retry.unwrap();
    assert_eq!((r2.attempt, r2.holdoff_seconds, r2.next_attempt_at), (2, 240, at(370)));
}

#[test]
fn r4_pinned_transport_failure_opens_the_breaker() {
    let mut f = with_phase(ready(), Phase::Initializing);
    f.job = Some(job(STRICT, refused(), at(5)));
    let d = plan(&f, at(6));
    assert_eq!(d.status.phase, Some(Phase::Degraded));
    assert_eq!(d.effects, vec![Effect::Trip { probe_kind: "strict" }]);
    assert_eq!(reasons(&d.events), vec!["RepositoryBreakerOpened"]);
}

#[test]
fn r5_not_initialized_without_create_fails_with_spec_advice() {
    let mut f = with_phase(fresh(), Phase::Initializing);
    f.spec.create_enabled = false;
    f.job = Some(job(STRICT, not_init(), at(5)));
    let d = plan(&f, at(6));
    assert_eq!(d.status.phase, Some(Phase::Failed));
    let ready = cond(&d.conditions, "Ready");
    assert_eq!(ready.reason, "RepositoryNotInitialized");
    assert!(ready.message.contains("spec.create.enabled: true"), "{}", ready.message);
    assert!(!ready.message.contains("allow-reinitialize"), "{}", ready.message);
    assert_kstatus(&d.conditions, False, False, True);
}

#[test]
fn r5_pinned_not_initialized_is_reinitialize_blocked() {
    let mut f = with_phase(ready(), Phase::Initializing);
    f.job = Some(job(STRICT, not_init(), at(5)));
    let d = plan(&f, at(6));
    assert_eq!(d.status.phase, Some(Phase::Failed));
    assert_eq!(cond(&d.conditions, "Ready").reason, "RepositoryReinitializeBlocked");
}

#[test]
fn r6_other_first_bootstrap_failure_is_terminal_with_class_reason() {
    for c in [
        ErrorClass::AuthFailure,
        ErrorClass::AccessDenied,
        ErrorClass::PermissionDenied,
        ErrorClass::Locked,
        ErrorClass::SourceError,
        ErrorClass::Unknown,
        ErrorClass::NotFound,
    ] {
        let mut f = with_phase(fresh(), Phase::Initializing);
        f.job = Some(job(STRICT, class(c), at(5)));
        let d = plan(&f, at(6));
        assert_eq!(d.status.phase, Some(Phase::Failed), "{c:?}");
        assert_eq!(cond(&d.conditions, "Ready").reason, c.as_str());
        assert_eq!(cond(&d.conditions, "Bootstrapped").status, False);
        assert_kstatus(&d.conditions, False, False, True);
        assert!(d.effects.is_empty());
    }
    // A Job that died without writing a result is terminal too.
    let mut f = with_phase(fresh(), Phase::Initializing);
    f.job = Some(job(STRICT, ConnectResult::NoResult { deadline_exceeded: false }, at(5)));
    assert_eq!(cond(&plan(&f, at(6)).conditions, "Ready").reason, "BootstrapJobFailed");
}

#[test]
fn r7_probe_success_resets_the_streak() {
    let mut f = ready();
    f.status.health.consecutive_probe_failures = 2;
    f.status.health.first_failure_at = Some(t0());
    f.status.reach = Some(ReachState { reach: Reach::BackendUnreachable, message: "x".into() });
    f.job = Some(job(PROBE, ok(PIN), at(400)));
    let d = plan(&f, at(401));
    assert_eq!(d.status.phase, Some(Phase::Ready));
    assert_eq!(d.status.health.consecutive_probe_failures, 0);
    assert_eq!(d.status.health.first_failure_at, None);
    assert_eq!(d.status.health.last_healthy_at, Some(at(400)));
    assert_eq!(d.status.health.last_probe_at, Some(at(400)));
    assert_eq!(cond(&d.conditions, "BackendReachable").status, True);
    assert!(d.events.is_empty(), "no close Event outside Degraded: {:?}", d.events);
}

#[test]
fn r8_probe_failure_below_threshold_stays_ready_with_one_event_per_episode() {
    let mut f = ready();
    f.job = Some(job(PROBE, refused(), at(1800)));
    let d = plan(&f, at(1801));
    assert_eq!(d.status.phase, Some(Phase::Ready));
    assert_eq!(d.status.health.consecutive_probe_failures, 1);
    assert_eq!(d.status.health.first_failure_at, Some(at(1801)));
    assert_eq!(d.status.health.last_probe_at, Some(at(1800)));
    assert_eq!(d.effects, vec![Effect::ProbeFailure { outcome: "unreachable" }]);
    assert_eq!(reasons(&d.events), vec!["RepositoryProbeFailed"]);
    assert_eq!(d.events[0].type_, EventType::Warning);
    let br = cond(&d.conditions, "BackendReachable");
    assert_eq!((br.status, br.reason.as_str()), (False, "BackendUnreachable"));
    assert_kstatus(&d.conditions, True, False, False);

    let mut g = f.clone();
    g.status = d.status;
    g.job = Some(job(PROBE, refused(), at(1930)));
    let d2 = plan(&g, at(1931));
    assert_eq!(d2.status.health.consecutive_probe_failures, 2);
    assert!(d2.events.is_empty(), "second failure of the episode is silent: {:?}", d2.events);
    assert_eq!(d2.effects, vec![Effect::ProbeFailure { outcome: "unreachable" }]);
}

#[test]
fn r8_alert_mode_never_opens() {
    let mut f = ready();
    f.spec.probe.on_failure = OnFailure::Alert;
    f.status.health.consecutive_probe_failures = 10;
    f.job = Some(job(PROBE, refused(), at(1800)));
    let d = plan(&f, at(1801));
    assert_eq!(d.status.phase, Some(Phase::Ready));
    assert_eq!(d.status.health.consecutive_probe_failures, 11);
    assert!(d.effects.iter().all(|e| !matches!(e, Effect::Trip { .. })));
    assert_kstatus(&d.conditions, True, False, False);
    assert_eq!(cond(&d.conditions, "BackendReachable").status, False);
}

#[test]
fn r9_threshold_failure_opens_once() {
    let mut f = ready();
    f.status.health.consecutive_probe_failures = 2;
    f.job = Some(job(PROBE, refused(), at(600)));
    let d = plan(&f, at(601));
    assert_eq!(d.status.phase, Some(Phase::Degraded));
    assert_eq!(d.status.health.breaker_opened_at, Some(at(601)));
    let r = d.status.health.strict_retry.clone().unwrap();
    assert_eq!((r.attempt, r.holdoff_seconds, r.next_attempt_at), (1, 120, at(721)));
    assert_eq!(d.effects, vec![Effect::ProbeFailure { outcome: "unreachable" }, Effect::Trip { probe_kind: "probe" }]);
    assert_eq!(reasons(&d.events), vec!["RepositoryBreakerOpened"]);
    assert_eq!(cond(&d.conditions, "Ready").reason, "BreakerOpen");
    assert_kstatus(&d.conditions, False, True, False);
    assert_eq!(cond(&d.conditions, "BackendReachable").reason, "BackendUnreachable");
}

#[test]
fn r9_reverify_probe_trips_with_its_label() {
    let mut f = ready();
    f.status.health.consecutive_probe_failures = 2;
    f.job = Some(job(ConnectKind::Probe(ProbeTrigger::Reverify), refused(), at(600)));
    let d = plan(&f, at(601));
    assert!(d.effects.contains(&Effect::Trip { probe_kind: "reverify" }));
}

#[test]
fn r10_strict_on_spec_change_keeps_ready_and_advances_generation() {
    let mut f = ready();
    f.spec.generation = 2;
    let d = plan(&f, at(10));
    assert_eq!(d.status.phase, Some(Phase::Ready), "no flapping while the strict connect runs");
    assert_eq!(launched(&d.plan).generation, 2);
    assert_eq!(launched(&d.plan).gate, CreateGate::PinnedOnceReady);

    let mut j = job(STRICT, ok(PIN), at(30));
    j.generation = Some(2);
    f.job = Some(j);
    let d = plan(&f, at(31));
    assert_eq!(d.status.phase, Some(Phase::Ready));
    assert_eq!(d.status.observed_generation, Some(2));
    assert!(d.events.is_empty(), "re-pinning the same id is not a bootstrap Event: {:?}", d.events);
}

#[test]
fn r11_strict_transport_failure_on_ready_opens_with_strict_label() {
    let mut f = ready();
    f.job = Some(job(STRICT, refused(), at(30)));
    let d = plan(&f, at(31));
    assert_eq!(d.status.phase, Some(Phase::Degraded));
    assert_eq!(d.status.health.consecutive_probe_failures, 1);
    assert_eq!(d.effects, vec![Effect::Trip { probe_kind: "strict" }]);
    assert_eq!(reasons(&d.events), vec!["RepositoryBreakerOpened"]);

    // A kopia command timeout routes the same way.
    f.job = Some(job(
        STRICT,
        ConnectResult::Failed { class: ErrorClass::RepositoryUnavailable, not_initialized: false, timed_out: true },
        at(30),
    ));
    let d = plan(&f, at(31));
    assert_eq!(d.status.phase, Some(Phase::Degraded));
    assert_eq!(cond(&d.conditions, "BackendReachable").reason, "ProbeDeadlineExceeded");
}

#[test]
fn r12_pinned_not_initialized_on_strict_is_terminal_never_create() {
    for from in [Phase::Ready, Phase::Degraded] {
        let mut f = with_phase(ready(), from);
        f.job = Some(job(STRICT, not_init(), at(30)));
        let d = plan(&f, at(31));
        assert_eq!(d.status.phase, Some(Phase::Failed), "from {from:?}");
        let ready = cond(&d.conditions, "Ready");
        assert_eq!(ready.reason, "RepositoryReinitializeBlocked");
        assert!(ready.message.contains(&format!(
            "kubectl annotate repository/r -n t kopiur.home-operations.com/allow-reinitialize={PIN} --overwrite"
        )));
        assert!(!ready.message.contains("spec.create.enabled"), "{}", ready.message);
        assert!(reasons(&d.events).contains(&event::REPOSITORY_REINITIALIZE_BLOCKED));
        assert_kstatus(&d.conditions, False, False, True);
        assert_eq!(d.status.health.strict_retry, None);
    }
}

#[test]
fn r12_with_create_disabled_names_both_actions() {
    let mut f = with_phase(ready(), Phase::Degraded);
    f.spec.create_enabled = false;
    f.job = Some(job(STRICT, not_init(), at(30)));
    let d = plan(&f, at(31));
    let msg = &cond(&d.conditions, "Ready").message;
    assert!(msg.contains("set spec.create.enabled: true and run: kubectl annotate"), "{msg}");
}

#[test]
fn r13_strict_non_transport_failure_is_terminal() {
    for c in [ErrorClass::AuthFailure, ErrorClass::Locked, ErrorClass::AccessDenied, ErrorClass::SourceError] {
        for from in [Phase::Ready, Phase::Degraded] {
            let mut f = with_phase(ready(), from);
            f.job = Some(job(STRICT, class(c), at(30)));
            let d = plan(&f, at(31));
            assert_eq!(d.status.phase, Some(Phase::Failed), "{c:?} from {from:?}");
            assert_eq!(cond(&d.conditions, "Ready").reason, c.as_str());
            assert!(d.effects.iter().all(|e| !matches!(e, Effect::Trip { .. })), "never a trip");
        }
    }
}

fn degraded() -> RepoFacts {
    let mut f = with_phase(ready(), Phase::Degraded);
    f.status.health.consecutive_probe_failures = 3;
    f.status.health.breaker_opened_at = Some(at(600));
    f.status.health.strict_retry = Some(StrictRetry { attempt: 1, holdoff_seconds: 120, next_attempt_at: at(720) });
    f
}

#[test]
fn r14_degraded_retry_failure_grows_holdoff_silently() {
    let mut f = degraded();
    f.job = Some(job(STRICT, refused(), at(725)));
    let d = plan(&f, at(726));
    assert_eq!(d.status.phase, Some(Phase::Degraded));
    assert_eq!(d.status.health.consecutive_probe_failures, 4);
    let r = d.status.health.strict_retry.clone().unwrap();
    assert_eq!((r.attempt, r.holdoff_seconds, r.next_attempt_at), (2, 240, at(966)));
    assert!(d.events.is_empty(), "{:?}", d.events);
    assert!(d.effects.is_empty(), "{:?}", d.effects);
    assert_eq!(d.status.health.breaker_opened_at, Some(at(600)), "open time is kept");
}

#[test]
fn r14_degraded_waits_for_stamp_and_ignores_probe_cadence() {
    let f = degraded();
    let d = plan(&f, at(719));
    assert_eq!(d.plan, Plan::Idle);
    assert_eq!(d.requeue_after, Some(Duration::seconds(1)));
    let d = plan(&f, at(720));
    assert_eq!(launched(&d.plan).kind, STRICT);
    assert_eq!(d.status.phase, Some(Phase::Degraded), "never Initializing while open");
}

#[test]
fn r15_strict_success_closes_the_breaker() {
    let mut f = degraded();
    f.job = Some(job(STRICT, ok(PIN), at(725)));
    let d = plan(&f, at(726));
    assert_eq!(d.status.phase, Some(Phase::Ready));
    assert_eq!(d.status.health.consecutive_probe_failures, 0);
    assert_eq!(d.status.health.strict_retry, None);
    assert_eq!(d.status.health.breaker_opened_at, None);
    assert_eq!(d.status.health.last_probe_at, Some(at(725)));
    assert_eq!(reasons(&d.events), vec!["RepositoryBreakerClosed"]);
    assert_eq!(d.events[0].type_, EventType::Normal);
    assert_kstatus(&d.conditions, True, False, False);
    assert_eq!(cond(&d.conditions, "BackendReachable").status, True);
}

fn failed(reason: TerminalReason) -> RepoFacts {
    let mut f = with_phase(ready(), Phase::Failed);
    f.status.terminal = Some(Terminal { reason, message: "m".into() });
    f
}

#[test]
fn r16_terminal_gate_sticks_then_reopens_on_generation_or_credentials() {
    let f = failed(TerminalReason::Class(ErrorClass::AuthFailure));
    let d = plan(&f, at(10));
    assert_eq!(d.plan, Plan::Idle);
    assert_eq!(d.status.phase, Some(Phase::Failed));
    assert_eq!(d.requeue_after, Some(Duration::seconds(1800)));

    let mut g = f.clone();
    g.spec.generation = 2;
    let d = plan(&g, at(10));
    assert_eq!(d.status.phase, Some(Phase::Initializing));
    assert_eq!(launched(&d.plan).kind, STRICT);

    let mut g = f.clone();
    g.credential_version = Some("12/11".into());
    let d = plan(&g, at(10));
    assert_eq!(d.status.phase, Some(Phase::Initializing));
    assert_eq!(launched(&d.plan).credential_version, "12/11");
}

#[test]
fn r17_different_unique_id_fails_naming_both() {
    let other = "ffffffffffffffffffffffffffffffff";
    for kind in [PROBE, STRICT] {
        let mut f = ready();
        f.job = Some(job(kind, ok(other), at(1800)));
        let d = plan(&f, at(1801));
        assert_eq!(d.status.phase, Some(Phase::Failed));
        assert_eq!(d.status.unique_id.as_deref(), Some(PIN), "the pin never moves without an ack");
        let ready = cond(&d.conditions, "Ready");
        assert_eq!(ready.reason, "RepositoryUniqueIdMismatch");
        assert!(ready.message.contains(PIN) && ready.message.contains(other), "{}", ready.message);
        assert!(ready.message.contains("allow-reinitialize="));
    }
}

#[test]
fn folded_job_is_never_folded_twice() {
    let mut f = ready();
    f.status.health.consecutive_probe_failures = 2;
    let j = job(PROBE, refused(), at(600));
    f.status.health.last_folded_job_uid = Some(j.uid.clone());
    f.job = Some(j.clone());
    let d = plan(&f, at(601));
    assert_eq!(d.plan, Plan::DeleteJob { uid: j.uid });
    assert_eq!(d.status, f.status, "status untouched");
    assert!(d.events.is_empty() && d.effects.is_empty());
}

#[test]
fn running_job_waits_and_suspend_still_folds() {
    let mut f = ready();
    let mut j = job(PROBE, refused(), at(600));
    j.state = JobState::Running;
    f.job = Some(j);
    assert_eq!(plan(&f, at(601)).plan, Plan::AwaitJob);

    let mut f = ready();
    f.spec.suspended = true;
    f.job = Some(job(PROBE, refused(), at(600)));
    let d = plan(&f, at(601));
    assert_eq!(d.status.health.consecutive_probe_failures, 1);
    f.status = d.status;
    f.job = None;
    assert_eq!(plan(&f, at(100_000)).plan, Plan::Idle, "suspended launches nothing");
}

#[test]
fn bootstrap_deadline_doubles_on_deadline_kills_and_resets_on_success() {
    let mut f = with_phase(ready(), Phase::Degraded);
    f.status.health.strict_retry = Some(StrictRetry { attempt: 1, holdoff_seconds: 120, next_attempt_at: at(0) });
    let mut seen = Vec::new();
    for i in 0..6 {
        f.job = Some(job(STRICT, ConnectResult::NoResult { deadline_exceeded: true }, at(100 * i + 50)));
        let d = plan(&f, at(100 * i + 51));
        assert_eq!(d.status.phase, Some(Phase::Degraded), "a deadline kill is transport-shaped");
        seen.push(d.status.health.bootstrap_deadline_seconds.unwrap());
        f.status = d.status;
    }
    assert_eq!(seen, vec![240, 480, 960, 1800, 1800, 1800]);
    f.job = None;
    f.status.health.strict_retry.as_mut().unwrap().next_attempt_at = at(0);
    assert_eq!(launched(&plan(&f, at(5000)).plan).deadline_seconds, 1800);
    f.job = Some(job(STRICT, ok(PIN), at(5100)));
    let d = plan(&f, at(5101));
    assert_eq!(d.status.health.bootstrap_deadline_seconds, None);

    // A configured deadline above the floor raises the cap.
    let mut g = ready();
    g.spec.configured_deadline_seconds = Some(2000);
    g.status.health.bootstrap_deadline_seconds = Some(1600);
    g.job = Some(job(PROBE, ConnectResult::NoResult { deadline_exceeded: true }, at(10)));
    assert_eq!(plan(&g, at(11)).status.health.bootstrap_deadline_seconds, Some(2000));
}

#[test]
fn missing_credentials_stall_pending_and_launch_nothing() {
    let mut f = fresh();
    f.credential_version = None;
    let d = plan(&f, t0());
    assert_eq!(d.plan, Plan::Idle);
    assert_eq!(d.status.phase, Some(Phase::Pending));
    assert_kstatus(&d.conditions, False, False, True);
    assert_eq!(cond(&d.conditions, "Ready").reason, "MissingCredentialsSecret");
    assert_eq!(cond(&d.conditions, "CredentialsAvailable").status, False);
}

fn certificate() -> ConnectResult {
    ConnectResult::Failed { class: ErrorClass::CertificateError, not_initialized: false, timed_out: false }
}

#[test]
fn a_certificate_error_is_configuration_never_an_outage() {
    // A probe at the threshold that meets a rejected certificate: terminal, no trip, no count.
    let mut f = ready();
    f.status.health.consecutive_probe_failures = 2;
    f.job = Some(job(PROBE, certificate(), at(600)));
    let d = plan(&f, at(601));
    assert_eq!(d.status.phase, Some(Phase::Failed), "Stalled, not Degraded");
    assert_eq!(d.status.health.breaker_opened_at, None);
    assert_eq!(d.status.health.strict_retry, None, "no half-open loop");
    assert_eq!(d.status.health.consecutive_probe_failures, 2, "not counted toward the breaker");
    assert!(d.effects.is_empty(), "{:?}", d.effects);
    let ready_cond = cond(&d.conditions, "Ready");
    assert_eq!(ready_cond.reason, "CertificateError");
    assert!(ready_cond.message.contains("caBundleRef"), "{}", ready_cond.message);
    assert_kstatus(&d.conditions, False, False, True);

    // The first strict connect of a new repository: terminal too (never retried on a holdoff).
    let mut f = fresh();
    f.status.phase = Some(Phase::Initializing);
    f.job = Some(job(STRICT, certificate(), at(20)));
    let d = plan(&f, at(21));
    assert_eq!(d.status.phase, Some(Phase::Failed));
    assert_eq!(d.status.health.strict_retry, None);
    assert_eq!(cond(&d.conditions, "Ready").reason, "CertificateError");
    assert_kstatus(&d.conditions, False, False, True);

    // A pinned strict connect (a spec change on a Ready repository): terminal, no trip.
    let mut f = ready();
    f.spec.generation = 2;
    f.job = Some(job(STRICT, certificate(), at(600)));
    let d = plan(&f, at(601));
    assert_eq!(d.status.phase, Some(Phase::Failed));
    assert!(!d.effects.iter().any(|e| matches!(e, Effect::Trip { .. })), "{:?}", d.effects);
}
