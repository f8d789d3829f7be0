//! CreateGate rows, the reinitialize ack and the terminal gate.
use super::*;
use crate::health::fold::EventType;
use crate::health::gate::{CreateGate, create_gate, gate_for};
use crate::health::plan::{Plan, plan};
use kopiur_kopia::classify::ErrorClass;

#[test]
fn create_gate_table_rows() {
    // (pinned, create.enabled, honored ack) -> gate
    assert_eq!(create_gate(false, true, false), CreateGate::Allowed { via_reinit_ack: false });
    assert_eq!(create_gate(false, false, false), CreateGate::DisabledBySpec { also_pinned: false });
    assert_eq!(create_gate(true, false, true), CreateGate::DisabledBySpec { also_pinned: true });
    assert_eq!(create_gate(true, false, false), CreateGate::DisabledBySpec { also_pinned: true });
    assert_eq!(create_gate(true, true, false), CreateGate::PinnedOnceReady);
    assert_eq!(create_gate(true, true, true), CreateGate::Allowed { via_reinit_ack: true });
}

#[test]
fn read_only_never_allows_create() {
    let mut f = fresh();
    f.spec.read_only = true;
    assert_eq!(gate_for(&f, Phase::Pending), CreateGate::DisabledBySpec { also_pinned: false });
}

fn blocked() -> RepoFacts {
    let mut f = with_phase(ready(), Phase::Failed);
    f.status.terminal = Some(Terminal { reason: TerminalReason::RepositoryReinitializeBlocked, message: "m".into() });
    f
}

#[test]
fn honored_ack_reopens_blocked_with_a_creating_gate() {
    let mut f = blocked();
    f.reinit_ack = Some(PIN.to_uppercase()); // hex, case-insensitive
    let d = plan(&f, at(10));
    assert_eq!(d.status.phase, Some(Phase::Initializing));
    match d.plan {
        Plan::Launch(l) => assert_eq!(l.gate, CreateGate::Allowed { via_reinit_ack: true }),
        other => panic!("expected launch, got {other:?}"),
    }
    assert!(d.events.is_empty(), "{:?}", d.events);
}

#[test]
fn ack_with_create_disabled_is_not_enough() {
    let mut f = blocked();
    f.spec.create_enabled = false;
    f.reinit_ack = Some(PIN.into());
    let d = plan(&f, at(10));
    assert_eq!(d.status.phase, Some(Phase::Failed));
    assert_eq!(d.plan, Plan::Idle);
}

#[test]
fn ackd_create_repins_and_the_ack_expires_by_itself() {
    let new_id = "11111111111111111111111111111111";
    let mut f = with_phase(blocked(), Phase::Initializing);
    f.status.terminal = None;
    f.reinit_ack = Some(PIN.into());
    let mut j = job(STRICT, created(new_id), at(30));
    j.via_reinit_ack = true;
    f.job = Some(j);
    let d = plan(&f, at(31));
    assert_eq!(d.status.phase, Some(Phase::Ready));
    assert_eq!(d.status.unique_id.as_deref(), Some(new_id));
    assert_eq!(reasons(&d.events), vec!["RepositoryReinitialized"]);
    assert_eq!(d.events[0].type_, EventType::Warning);

    // A second wipe: the stale annotation (old id) no longer re-opens anything.
    let mut g = f.clone();
    g.status = d.status;
    g.status.phase = Some(Phase::Degraded);
    g.job = Some(job(STRICT, not_init(), at(900)));
    let d = plan(&g, at(901));
    assert_eq!(d.status.phase, Some(Phase::Failed));
    assert_eq!(cond(&d.conditions, "Ready").reason, "RepositoryReinitializeBlocked");
    assert!(reasons(&d.events).contains(&"InvalidReinitializeAck"), "stale ack warned once: {:?}", d.events);
    g.status = d.status;
    g.job = None;
    g.warned_ack = d.warned_ack;
    let d = plan(&g, at(1000));
    assert_eq!(d.plan, Plan::Idle, "no create loop on a stale ack");
    assert!(d.events.is_empty());
}

#[test]
fn ackd_pass_that_finds_the_repository_creates_nothing_and_says_so() {
    let mut f = with_phase(blocked(), Phase::Initializing);
    f.status.terminal = None;
    f.reinit_ack = Some(PIN.into());
    let mut j = job(STRICT, ok(PIN), at(30));
    j.via_reinit_ack = true;
    f.job = Some(j);
    let d = plan(&f, at(31));
    assert_eq!(d.status.phase, Some(Phase::Ready));
    assert_eq!(d.status.unique_id.as_deref(), Some(PIN));
    assert_eq!(reasons(&d.events), vec!["ReinitializeAckIgnoredRepositoryPresent"]);
}

#[test]
fn ack_repins_after_unique_id_mismatch() {
    let other = "22222222222222222222222222222222";
    let mut f = with_phase(ready(), Phase::Failed);
    f.status.terminal = Some(Terminal {
        reason: TerminalReason::RepositoryUniqueIdMismatch { found: other.into() },
        message: "m".into(),
    });
    f.reinit_ack = Some(PIN.into());
    let d = plan(&f, at(10));
    assert!(matches!(d.plan, Plan::Launch(_)));
    let mut g = f.clone();
    g.status = d.status;
    let mut j = job(STRICT, ok(other), at(30));
    j.via_reinit_ack = true;
    g.job = Some(j);
    let d = plan(&g, at(31));
    assert_eq!(d.status.phase, Some(Phase::Ready));
    assert_eq!(d.status.unique_id.as_deref(), Some(other));
}

#[test]
fn invalid_ack_warns_once_per_value_and_changes_nothing() {
    let mut f = blocked();
    f.reinit_ack = Some("deadbeef".into());
    let d = plan(&f, at(10));
    assert_eq!(d.status.phase, Some(Phase::Failed));
    assert_eq!(d.plan, Plan::Idle);
    assert_eq!(reasons(&d.events), vec!["InvalidReinitializeAck"]);
    assert_eq!(d.warned_ack.as_deref(), Some("deadbeef"));
    f.warned_ack = d.warned_ack;
    for i in 0..10 {
        assert!(plan(&f, at(20 + i)).events.is_empty());
    }
    f.reinit_ack = Some("cafebabe".into());
    assert_eq!(reasons(&plan(&f, at(40)).events), vec!["InvalidReinitializeAck"]);
}

#[test]
fn ack_is_not_evaluated_while_ready() {
    let mut f = ready();
    f.reinit_ack = Some("deadbeef".into());
    f.status.health.last_probe_at = Some(at(0));
    let d = plan(&f, at(10));
    assert!(d.events.is_empty());
    f.reinit_ack = Some(PIN.into());
    f.spec.generation = 2;
    match plan(&f, at(10)).plan {
        Plan::Launch(l) => assert_eq!(l.gate, CreateGate::PinnedOnceReady, "a Ready repository never creates"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn ackd_attempt_failing_otherwise_does_not_loop() {
    let mut f = with_phase(blocked(), Phase::Initializing);
    f.status.terminal = None;
    f.reinit_ack = Some(PIN.into());
    let mut j = job(STRICT, class(ErrorClass::AuthFailure), at(30));
    j.via_reinit_ack = true;
    f.job = Some(j);
    let d = plan(&f, at(31));
    assert_eq!(d.status.phase, Some(Phase::Failed));
    f.status = d.status;
    f.job = None;
    assert_eq!(plan(&f, at(100)).plan, Plan::Idle, "the ack re-opens only the states it exists for");

    // Even a create that could not happen stops instead of looping.
    let mut f = with_phase(blocked(), Phase::Initializing);
    f.status.terminal = None;
    f.reinit_ack = Some(PIN.into());
    let mut j = job(STRICT, not_init(), at(30));
    j.via_reinit_ack = true;
    f.job = Some(j);
    let d = plan(&f, at(31));
    f.status = d.status;
    f.job = None;
    assert_eq!(plan(&f, at(100)).plan, Plan::Idle);
}
