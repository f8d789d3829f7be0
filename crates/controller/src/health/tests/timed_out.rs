//! Slow is not down: a connect killed by its deadline while the backend answered is its own
//! verdict (`TimedOut`), distinct from an unreachable backend; a measured connect time becomes
//! `lastConnectSeconds` and the deadline adapts to it.
use super::*;
use crate::conditions::CondStatus::False;
use crate::health::fold::Effect;
use crate::health::plan::{Plan, endpoint_watched, fold_check_due, plan, record_fold_check};
use crate::health::verdict::{Verdict, backend_answered, slow_connect_seconds};
use kopiur_kopia::classify::ErrorClass;

const KILLED: ConnectResult = ConnectResult::NoResult { deadline_exceeded: true };

fn answered(secs: i64) -> Endpoint {
    Endpoint::Checkable { last: Some(EndpointCheck { at: at(secs), answer: EndpointAnswer::Answers }), returned: None }
}

fn down(secs: i64) -> Endpoint {
    Endpoint::Checkable { last: Some(EndpointCheck { at: at(secs), answer: EndpointAnswer::Down }), returned: None }
}

/// A Ready repository whose last connect took 90 s (deadline 300 s) runs a strict connect
/// (launched at 1000) that its deadline kills at 1300.
fn killed_strict(endpoint: Endpoint) -> RepoFacts {
    let mut f = ready();
    f.status.health.last_connect_seconds = Some(90);
    f.status.health.bootstrap_deadline_seconds = Some(300);
    f.job = Some(JobFacts { launched_at: Some(at(1000)), ..job(STRICT, KILLED, at(1300)) });
    f.endpoint = endpoint;
    f
}

fn launched(p: &Plan) -> &crate::health::plan::Launch {
    match p {
        Plan::Launch(l) => l,
        Plan::Idle | Plan::AwaitJob | Plan::DeleteJob { .. } => panic!("expected a launch, got {p:?}"),
    }
}

#[test]
fn a_deadline_kill_on_an_answering_backend_opens_the_breaker_as_timed_out() {
    let d = plan(&killed_strict(answered(1301)), at(1301));
    assert_eq!(d.status.phase, Some(Phase::Degraded));
    assert_eq!(d.status.reach.as_ref().map(|r| r.reach), Some(Reach::TimedOut));
    let reach = cond(&d.conditions, "BackendReachable");
    assert_eq!((reach.status, reach.reason.as_str()), (False, "TimedOut"));
    assert!(reach.message.contains("deadline of 300s"), "{}", reach.message);
    assert!(reach.message.contains("last successful connect took 90s"), "{}", reach.message);
    let ready = cond(&d.conditions, "Ready");
    assert_eq!((ready.status, ready.reason.as_str()), (False, "TimedOut"));
    assert!(ready.message.contains("the backend answers"), "{}", ready.message);
    assert!(ready.message.contains("maintenance still runs"), "{}", ready.message);
    // The doubling after a deadline kill still applies, and the message quotes it.
    assert_eq!(d.status.health.bootstrap_deadline_seconds, Some(600));
    assert!(ready.message.contains("deadline of 600s"), "{}", ready.message);
    assert_eq!(d.effects, vec![Effect::Trip { probe_kind: "strict" }]);
    assert_eq!(reasons(&d.events), vec!["RepositoryBreakerOpened"]);
    assert!(d.events[0].note.contains("TimedOut"), "{}", d.events[0].note);
}

#[test]
fn a_deadline_kill_on_a_down_backend_stays_unreachable() {
    let d = plan(&killed_strict(down(1301)), at(1301));
    assert_eq!(d.status.phase, Some(Phase::Degraded));
    assert_eq!(d.status.reach.as_ref().map(|r| r.reach), Some(Reach::ProbeDeadlineExceeded));
    assert_eq!(cond(&d.conditions, "Ready").reason, "BreakerOpen");
    assert_eq!(cond(&d.conditions, "BackendReachable").reason, "ProbeDeadlineExceeded");
}

#[test]
fn probes_killed_on_an_answering_backend_open_at_the_threshold_as_timed_out() {
    let mut f = ready();
    f.status.health.consecutive_probe_failures = 2;
    f.job = Some(JobFacts { launched_at: Some(at(1000)), ..job(PROBE, KILLED, at(1120)) });
    f.endpoint = answered(1121);
    let d = plan(&f, at(1121));
    assert_eq!(d.status.phase, Some(Phase::Degraded));
    assert_eq!(cond(&d.conditions, "Ready").reason, "TimedOut");
    assert!(d.effects.contains(&Effect::ProbeFailure { outcome: "timed_out" }), "{:?}", d.effects);
    // Below the threshold it is recorded, not opened.
    f.status.health.consecutive_probe_failures = 0;
    let d = plan(&f, at(1121));
    assert_eq!(d.status.phase, Some(Phase::Ready));
    assert_eq!(cond(&d.conditions, "BackendReachable").reason, "TimedOut");
    assert!(cond(&d.conditions, "BackendReachable").message.contains("no successful connect was measured yet"));
}

#[test]
fn kopias_own_timeout_on_an_answering_backend_is_timed_out_too() {
    let mut f = killed_strict(answered(1301));
    let own =
        ConnectResult::Failed { class: ErrorClass::RepositoryUnavailable, not_initialized: false, timed_out: true };
    f.job = Some(JobFacts { launched_at: Some(at(1000)), ..job(STRICT, own, at(1300)) });
    let d = plan(&f, at(1301));
    assert_eq!(cond(&d.conditions, "Ready").reason, "TimedOut");
    assert_eq!(d.status.health.bootstrap_deadline_seconds, Some(300), "only a Job deadline kill doubles");
}

#[test]
fn without_a_fresh_check_a_slow_last_connect_decides() {
    let t = Tuning::default();
    assert_eq!(slow_connect_seconds(&t), 30);
    // No endpoint to ask: the last successful connect's time decides.
    let judge = |last| backend_answered(&Endpoint::NotCheckable, Some(at(0)), at(300), 300, last, &t);
    assert!(judge(Some(90)), "90 s is slow");
    assert!(judge(Some(30)), "the bound itself is slow");
    assert!(!judge(Some(29)), "below the bound: a deadline kill reads as down");
    assert!(!judge(None), "unmeasured: down, as before");
    // A check from before the connect was launched is stale: the fallback decides.
    assert!(!backend_answered(&answered(-1), Some(at(0)), at(300), 300, None, &t));
    assert!(backend_answered(&answered(0), Some(at(0)), at(300), 300, None, &t));
    // A fresh check wins over the fallback either way.
    assert!(!backend_answered(&down(10), Some(at(0)), at(300), 300, Some(90), &t));
    // With no launch time, a check within the deadline before completion is fresh.
    assert!(backend_answered(&answered(1), None, at(300), 300, None, &t));
    assert!(!backend_answered(&answered(-1), None, at(300), 300, None, &t));

    let d = plan(&killed_strict(Endpoint::NotCheckable), at(1301));
    assert_eq!(cond(&d.conditions, "Ready").reason, "TimedOut", "a filesystem-like backend, slow last connect");
    let mut fast = killed_strict(Endpoint::NotCheckable);
    fast.status.health.last_connect_seconds = Some(2);
    let d = plan(&fast, at(1301));
    assert_eq!(cond(&d.conditions, "Ready").reason, "BreakerOpen");
}

#[test]
fn the_shell_checks_the_endpoint_once_before_folding_a_deadline_kill() {
    let fresh_check = killed_strict(answered(1301));
    assert!(!fold_check_due(&fresh_check), "a check since the launch exists");
    let stale = killed_strict(down(900));
    assert!(fold_check_due(&stale), "the last check predates the launch");
    assert!(fold_check_due(&killed_strict(Endpoint::Checkable { last: None, returned: None })));
    assert!(!fold_check_due(&killed_strict(Endpoint::NotCheckable)), "nothing to ask");
    let mut refused_job = killed_strict(down(900));
    refused_job.job = Some(JobFacts { launched_at: Some(at(1000)), ..job(STRICT, refused(), at(1300)) });
    assert!(!fold_check_due(&refused_job), "a refused connect is down already");
    let mut folded = killed_strict(down(900));
    folded.status.health.last_folded_job_uid = folded.job.as_ref().map(|j| j.uid.clone());
    assert!(!fold_check_due(&folded), "folded once");
    let mut running = killed_strict(down(900));
    running.job = Some(JobFacts { state: JobState::Running, ..job(STRICT, KILLED, at(1300)) });
    assert!(!fold_check_due(&running));
    // The recorded check is never a return (no early strict connect from it).
    let e = record_fold_check(
        &Endpoint::Checkable { last: None, returned: None },
        EndpointCheck { at: at(1301), answer: EndpointAnswer::Answers },
    );
    assert_eq!(e, answered(1301));
}

#[test]
fn an_open_breaker_for_timed_out_waits_out_its_holdoff_without_endpoint_checks() {
    let d = plan(&killed_strict(answered(1301)), at(1301));
    let mut f = killed_strict(answered(1301));
    f.status = d.status;
    f.job = None;
    assert!(!endpoint_watched(&f), "the backend answers: an early connect would only be slow again");
    let d = plan(&f, at(1302));
    assert_eq!(d.plan, Plan::Idle);
    assert_eq!(d.requeue_after, Some(chrono::Duration::seconds(119)), "the 120 s holdoff");
    let l = plan(&f, at(1421));
    assert_eq!(launched(&l.plan).deadline_seconds, 600, "the retry runs with the doubled deadline");
}

#[test]
fn a_measured_connect_sets_the_adaptive_deadline_and_a_later_fast_one_shrinks_it() {
    let mut f = ready();
    f.job = Some(JobFacts { connect_seconds: Some(90), ..job(PROBE, ok(PIN), at(1800)) });
    let d = plan(&f, at(1801));
    assert_eq!(d.status.health.last_connect_seconds, Some(90));
    assert_eq!(d.status.health.bootstrap_deadline_seconds, Some(300), "3 × 90 + 30");
    f.status = d.status;
    f.job = None;
    f.status.health.last_probe_at = Some(at(0));
    assert_eq!(launched(&plan(&f, at(1802)).plan).deadline_seconds, 300);

    // The strict retry that closes a TimedOut breaker after maintenance compacted the index.
    let mut open = killed_strict(answered(1301));
    open.status = plan(&open, at(1301)).status;
    open.job = Some(JobFacts { connect_seconds: Some(4), ..job(STRICT, ok(PIN), at(1500)) });
    let d = plan(&open, at(1501));
    assert_eq!(d.status.phase, Some(Phase::Ready));
    assert_eq!(cond(&d.conditions, "BackendReachable").reason, "Reachable");
    assert_eq!(d.status.health.last_connect_seconds, Some(4));
    assert_eq!(d.status.health.bootstrap_deadline_seconds, Some(120), "back to the initial deadline");

    // A result without a measurement (an older mover) keeps the last one.
    let mut old = ready();
    old.status.health.last_connect_seconds = Some(90);
    old.job = Some(job(PROBE, ok(PIN), at(1800)));
    let d = plan(&old, at(1801));
    assert_eq!(d.status.health.last_connect_seconds, Some(90));
    assert_eq!(d.status.health.bootstrap_deadline_seconds, Some(300));
}

#[test]
fn the_timed_out_verdict_routes_like_a_deadline_kill() {
    let v = Verdict::TimedOut { job_deadline: true, deadline_seconds: 120, last_connect_seconds: None };
    assert_eq!(v.probe_outcome(), Some("timed_out"));
    assert_eq!(v.reach(), Reach::TimedOut);
    assert_eq!(crate::health::verdict::strict_route(&v), crate::health::verdict::StrictRoute::Retry);
    assert_eq!(Reach::from_reason("TimedOut"), Some(Reach::TimedOut));
}
