//! The cheap endpoint check's decision table: when it watches, when a check is due, what a
//! check records, and what the plan does with a `Down` → `Answers` transition (an early strict
//! connect that takes its slot of the holdoff schedule; never a phase change).
use chrono::Duration;

use super::*;
use crate::health::fold::EventType;
use crate::health::plan::{
    ENDPOINT_ANSWERING, Plan, endpoint_check_due, endpoint_watched, plan, record_endpoint_check, spend_return,
};

const DOWN: EndpointAnswer = EndpointAnswer::Down;
const ANSWERS: EndpointAnswer = EndpointAnswer::Answers;

fn check(secs: i64, answer: EndpointAnswer) -> EndpointCheck {
    EndpointCheck { at: at(secs), answer }
}

/// Open for an unreachable backend since 600; the first strict retry failed at 725 and the
/// second is stamped at 966 (holdoff 240).
fn open() -> RepoFacts {
    let mut f = with_phase(ready(), Phase::Degraded);
    f.status.health.consecutive_probe_failures = 4;
    f.status.health.breaker_opened_at = Some(at(600));
    f.status.health.strict_retry = Some(StrictRetry { attempt: 2, holdoff_seconds: 240, next_attempt_at: at(966) });
    f.status.reach = Some(ReachState { reach: Reach::BackendUnreachable, message: "refused".into() });
    f.endpoint = Endpoint::Checkable { last: Some(check(720, DOWN)), returned: None };
    f
}

fn returned(mut f: RepoFacts, secs: i64) -> RepoFacts {
    f.endpoint = Endpoint::Checkable { last: Some(check(secs, ANSWERS)), returned: Some(check(secs, ANSWERS)) };
    f
}

#[test]
fn the_check_watches_only_an_open_breaker_for_an_unreachable_backend_with_an_endpoint() {
    assert!(endpoint_watched(&open()));
    let mut deadline = open();
    deadline.status.reach = Some(ReachState { reach: Reach::ProbeDeadlineExceeded, message: "m".into() });
    assert!(endpoint_watched(&deadline), "a deadline kill may be a dead endpoint too");

    let mut no_endpoint = open();
    no_endpoint.endpoint = Endpoint::NotCheckable;
    assert!(!endpoint_watched(&no_endpoint), "a filesystem keeps the holdoff alone");
    assert!(!endpoint_watched(&with_phase(open(), Phase::Ready)));
    assert!(!endpoint_watched(&with_phase(open(), Phase::Failed)));
    for reach in [Reach::Reachable, Reach::RepositoryVanished, Reach::ConnectFailed] {
        let mut f = open();
        f.status.reach = Some(ReachState { reach, message: "m".into() });
        assert!(!endpoint_watched(&f), "{reach:?}: the backend answered; nothing to wait for");
    }
    let mut busy = open();
    busy.job = Some(JobFacts { state: JobState::Running, ..job(STRICT, refused(), at(730)) });
    assert!(!endpoint_watched(&busy), "a connect is in flight");
    let mut suspended = open();
    suspended.spec.suspended = true;
    assert!(!endpoint_watched(&suspended));
    let mut no_creds = open();
    no_creds.credential_version = None;
    assert!(!endpoint_watched(&no_creds));
}

#[test]
fn a_check_is_due_once_per_cadence() {
    let f = open(); // last check at 720, cadence 20 s
    assert_eq!(f.tuning.endpoint_check_seconds, 20);
    assert!(!endpoint_check_due(&f, at(739)));
    assert!(endpoint_check_due(&f, at(740)));
    let mut never = open();
    never.endpoint = Endpoint::Checkable { last: None, returned: None };
    assert!(endpoint_check_due(&never, at(721)), "the first check runs at once");
    assert!(!endpoint_check_due(&with_phase(open(), Phase::Ready), at(800)));
}

#[test]
fn a_check_records_a_return_only_on_the_down_to_answers_transition() {
    let empty = Endpoint::Checkable { last: None, returned: None };
    let after = |e: &Endpoint, c: EndpointCheck| record_endpoint_check(e, c);
    // The open breaker's own verdict is the first "down".
    assert_eq!(
        after(&empty, check(10, ANSWERS)),
        Endpoint::Checkable { last: Some(check(10, ANSWERS)), returned: Some(check(10, ANSWERS)) }
    );
    let down = after(&empty, check(10, DOWN));
    assert_eq!(down, Endpoint::Checkable { last: Some(check(10, DOWN)), returned: None });
    let back = after(&down, check(30, ANSWERS));
    assert_eq!(back, Endpoint::Checkable { last: Some(check(30, ANSWERS)), returned: Some(check(30, ANSWERS)) });
    // Still answering: the same transition, not a new one.
    let still = after(&back, check(50, ANSWERS));
    assert_eq!(still, Endpoint::Checkable { last: Some(check(50, ANSWERS)), returned: Some(check(30, ANSWERS)) });
    // Spent (the shell clears it), still answering: no new transition.
    let spent = Endpoint::Checkable { last: Some(check(50, ANSWERS)), returned: None };
    assert_eq!(
        after(&spent, check(70, ANSWERS)),
        Endpoint::Checkable { last: Some(check(70, ANSWERS)), returned: None }
    );
    // Down again forgets an unspent return.
    assert_eq!(after(&back, check(70, DOWN)), Endpoint::Checkable { last: Some(check(70, DOWN)), returned: None });
    assert_eq!(record_endpoint_check(&Endpoint::NotCheckable, check(1, ANSWERS)), Endpoint::NotCheckable);
}

#[test]
fn a_return_launches_the_strict_connect_at_once_and_says_so() {
    let f = returned(open(), 740);
    let d = plan(&f, at(741));
    match &d.plan {
        Plan::Launch(l) => assert_eq!((l.kind, l.early), (STRICT, true), "marked early for the fold"),
        p @ (Plan::Idle | Plan::AwaitJob | Plan::DeleteJob { .. }) => panic!("expected a strict launch, got {p:?}"),
    }
    assert_eq!(d.early_strict, Some(check(740, ANSWERS)), "the shell spends this transition");
    assert_eq!(d.status.phase, Some(Phase::Degraded), "a cheap answer never changes the phase");
    assert_eq!(d.status.health, f.status.health, "nor the breaker state: the stamp stays for the fold");
    assert_eq!(cond(&d.conditions, "Ready").status, CondStatus::False);
    assert_eq!(reasons(&d.events), vec![ENDPOINT_ANSWERING]);
    assert_eq!(d.events[0].type_, EventType::Normal);
    assert!(d.events[0].note.contains("s3://bucket/prefix answers again"), "{}", d.events[0].note);
    assert!(d.events[0].note.contains("instead of at 2026-08-04T12:16:06Z"), "{}", d.events[0].note);
}

#[test]
fn without_a_return_the_plan_waits_for_the_next_check_or_the_stamp() {
    let d = plan(&open(), at(725));
    assert_eq!(d.plan, Plan::Idle);
    assert_eq!(d.requeue_after, Some(Duration::seconds(15)), "back at the next check (720 + 20)");
    assert_eq!(d.early_strict, None);
    assert!(d.events.is_empty());
    // Near the stamp, the stamp comes first.
    let mut late = open();
    late.endpoint = Endpoint::Checkable { last: Some(check(960, DOWN)), returned: None };
    assert_eq!(plan(&late, at(961)).requeue_after, Some(Duration::seconds(5)));
    // No endpoint: the holdoff alone.
    let mut fs = open();
    fs.endpoint = Endpoint::NotCheckable;
    assert_eq!(plan(&fs, at(725)).requeue_after, Some(Duration::seconds(241)));
    // A return on a repository the check does not watch launches nothing early.
    let mut vanished = returned(open(), 740);
    vanished.status.reach = Some(ReachState { reach: Reach::RepositoryVanished, message: "m".into() });
    let d = plan(&vanished, at(741));
    assert_eq!((d.plan, d.early_strict), (Plan::Idle, None));
    // At the stamp the scheduled connect runs whatever the check says, and spends nothing.
    let d = plan(&open(), at(966));
    assert!(matches!(d.plan, Plan::Launch(ref l) if !l.early), "{:?}", d.plan);
    assert_eq!(d.early_strict, None);
    // A holdoff no longer than two check periods (40 s here) is not worth an early connect.
    let mut short = returned(open(), 740);
    short.status.health.strict_retry = Some(StrictRetry { attempt: 3, holdoff_seconds: 40, next_attempt_at: at(760) });
    assert_eq!(plan(&short, at(741)).early_strict, None);
    short.status.health.strict_retry.as_mut().unwrap().holdoff_seconds = 41;
    assert!(plan(&short, at(741)).early_strict.is_some(), "41 s is");
    assert!(d.events.is_empty());
}

#[test]
fn a_return_never_folds_or_launches_over_a_job_in_flight() {
    let mut f = returned(open(), 740);
    f.job = Some(JobFacts { state: JobState::Running, ..job(STRICT, refused(), at(730)) });
    let d = plan(&f, at(741));
    assert_eq!(d.plan, Plan::AwaitJob);
    assert_eq!(d.early_strict, None);
    assert_eq!(d.status.phase, Some(Phase::Degraded));
}

#[test]
fn a_failed_early_connect_takes_its_slot_and_the_holdoff_schedule_continues() {
    // Launched at 741 in place of the connect stamped at 966; it fails at 746 (5 s long).
    let mut f = open();
    f.job = Some(JobFacts { launched_at: Some(at(741)), early: true, ..job(STRICT, refused(), at(746)) });
    let d = plan(&f, at(747));
    assert_eq!(d.status.phase, Some(Phase::Degraded));
    let r = d.status.health.strict_retry.clone().unwrap();
    // The holdoff-only schedule (966, 6 s long, then 480) pushed back by the 225 s it ran early.
    assert_eq!((r.attempt, r.holdoff_seconds, r.next_attempt_at), (3, 480, at(966 + 225 + 6 + 480)));
    assert!(d.events.is_empty(), "no trip, no Event: {:?}", d.events);
    // Its window opens only then: a new return before it launches nothing.
    let mut again = returned(open(), 1000);
    again.status.health.strict_retry = d.status.health.strict_retry.clone();
    let early = plan(&again, at(1001));
    assert_eq!((early.plan.clone(), early.early_strict), (Plan::Idle, None), "the window is not open yet");
    assert_eq!(early.requeue_after, Some(Duration::seconds(19)), "the next cheap check");
    let d = plan(&returned(again.clone(), 1197), at(1197));
    assert!(matches!(d.plan, Plan::Launch(_)), "the window is open at 1197: {:?}", d.plan);
    // A scheduled connect (launched at or after its stamp) folds as before: fold + holdoff.
    let mut s = open();
    s.job = Some(JobFacts { launched_at: Some(at(966)), ..job(STRICT, refused(), at(970)) });
    let r = plan(&s, at(971)).status.health.strict_retry.unwrap();
    assert_eq!((r.attempt, r.next_attempt_at), (3, at(971 + 480)));
    // An unknown launch time folds as before too.
    let mut u = open();
    u.job = Some(JobFacts { early: true, ..job(STRICT, refused(), at(746)) });
    assert_eq!(plan(&u, at(747)).status.health.strict_retry.unwrap().next_attempt_at, at(747 + 480));
    // So does a connect a spec change launched before its stamp: only early ones pay back.
    let mut spec = open();
    spec.job = Some(JobFacts { launched_at: Some(at(741)), ..job(STRICT, refused(), at(746)) });
    assert_eq!(plan(&spec, at(747)).status.health.strict_retry.unwrap().next_attempt_at, at(747 + 480));
}

#[test]
fn a_successful_early_connect_closes_the_breaker() {
    let mut f = open();
    f.job = Some(JobFacts { launched_at: Some(at(741)), early: true, ..job(STRICT, ok(PIN), at(746)) });
    let d = plan(&f, at(747));
    assert_eq!(d.status.phase, Some(Phase::Ready));
    assert_eq!(d.status.health.strict_retry, None);
    assert_eq!(reasons(&d.events), vec!["RepositoryBreakerClosed"]);
}

#[test]
fn any_strict_launch_spends_a_pending_return_and_nothing_else_does() {
    let spent = |f: &RepoFacts, secs: i64| spend_return(&f.endpoint, &plan(f, at(secs)));
    let unspent = |f: &RepoFacts| f.endpoint.clone();
    let cleared = Endpoint::Checkable { last: Some(check(740, ANSWERS)), returned: None };
    // The early connect spends it.
    assert_eq!(spent(&returned(open(), 740), 741), cleared);
    // So does the scheduled connect at the stamp, with a return still pending (here its
    // holdoff is too short for an early connect): the return already had its connect.
    let mut short = returned(open(), 740);
    short.status.health.strict_retry = Some(StrictRetry { attempt: 3, holdoff_seconds: 40, next_attempt_at: at(760) });
    assert_eq!(plan(&short, at(741)).plan, Plan::Idle);
    assert_eq!(spent(&short, 741), unspent(&short), "waiting spends nothing");
    assert_eq!(spent(&short, 760), cleared, "the scheduled connect spends it");
    // A spec change launches at once and spends it too.
    let mut bumped = returned(open(), 740);
    bumped.spec.generation = 2;
    assert_eq!(spent(&bumped, 741), cleared);
    // Folding a Job launches nothing and spends nothing.
    let mut folding = returned(open(), 740);
    folding.job = Some(job(STRICT, refused(), at(730)));
    assert_eq!(spent(&folding, 741), unspent(&folding));
    assert_eq!(spend_return(&Endpoint::NotCheckable, &plan(&open(), at(966))), Endpoint::NotCheckable);
}
