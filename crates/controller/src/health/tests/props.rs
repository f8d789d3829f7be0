//! Property tests over arbitrary verdict sequences.
use chrono::Duration;
use kopiur_kopia::classify::ErrorClass;
use proptest::prelude::*;

use super::*;
use crate::health::fold::Effect;
use crate::health::gate::CreateGate;
use crate::health::plan::{Plan, plan};

fn any_result() -> impl Strategy<Value = ConnectResult> {
    prop_oneof![
        3 => Just(ok(PIN)),
        4 => Just(refused()),
        1 => Just(not_init()),
        1 => prop::sample::select(ErrorClass::ALL.to_vec()).prop_map(class),
        1 => any::<bool>().prop_map(|d| ConnectResult::NoResult { deadline_exceeded: d }),
        1 => Just(ConnectResult::Failed { class: ErrorClass::RepositoryUnavailable, not_initialized: false, timed_out: true }),
    ]
}

proptest! {
    /// Trips and BreakerOpened Events happen exactly on transitions into Degraded; the phase
    /// never leaves Degraded except for Ready or Failed; a Reachable verdict on the pinned id
    /// always ends Ready; the pin never changes without an ack.
    #[test]
    fn breaker_invariants(
        steps in prop::collection::vec((any::<bool>(), any_result(), 1i64..4000), 1..60),
        threshold in 1u32..5,
        alert in any::<bool>(),
    ) {
        let mut f = ready();
        f.spec.probe.failure_threshold = threshold;
        if alert { f.spec.probe.on_failure = OnFailure::Alert; }
        let mut now = at(0);
        let mut n = 0;
        for (strict, result, dt) in steps {
            now += Duration::seconds(dt);
            n += 1;
            let before = f.status.phase.unwrap();
            let kind = if strict { STRICT } else { PROBE };
            let mut j = job(kind, result.clone(), now);
            j.uid = format!("j{n}");
            f.job = Some(j);
            let d = plan(&f, now);
            let after = d.status.phase.unwrap();
            let trips = d.effects.iter().filter(|e| matches!(e, Effect::Trip { .. })).count();
            let opened = d.events.iter().filter(|e| e.reason == "RepositoryBreakerOpened").count();
            let entered = usize::from(before != Phase::Degraded && after == Phase::Degraded);
            prop_assert_eq!(trips, entered);
            prop_assert_eq!(opened, entered);
            let closed = d.events.iter().filter(|e| e.reason == "RepositoryBreakerClosed").count();
            prop_assert_eq!(closed, usize::from(before == Phase::Degraded && after == Phase::Ready));
            if before == Phase::Degraded {
                prop_assert!(matches!(after, Phase::Degraded | Phase::Ready | Phase::Failed));
            }
            if alert && !strict {
                prop_assert!(after != Phase::Degraded || before == Phase::Degraded);
            }
            if result == ok(PIN) && matches!(before, Phase::Ready | Phase::Degraded) {
                prop_assert_eq!(after, Phase::Ready);
                prop_assert_eq!(d.status.health.consecutive_probe_failures, 0);
            }
            prop_assert_eq!(d.status.unique_id.as_deref(), Some(PIN));
            if after == Phase::Degraded {
                let r = d.status.health.strict_retry.clone();
                prop_assert!(r.is_some());
                let r = r.unwrap();
                prop_assert!(r.holdoff_seconds >= 120 && r.holdoff_seconds <= 600);
                // Only strict verdicts and the opening fold move the schedule (probes do not
                // run while open).
                if strict || entered == 1 {
                    prop_assert_eq!(r.next_attempt_at, now + Duration::seconds(r.holdoff_seconds));
                }
            }
            f.status = d.status;
            f.job = None;
            // Between folds: in Degraded nothing launches before the stamp.
            if after == Phase::Degraded {
                let at_ = f.status.health.strict_retry.as_ref().unwrap().next_attempt_at;
                let early = plan(&f, at_ - Duration::seconds(1));
                prop_assert_eq!(early.plan, Plan::Idle);
            }
            // Failed repositories stay put until something changes.
            if after == Phase::Failed {
                prop_assert_eq!(plan(&f, now + Duration::days(3)).plan, Plan::Idle);
                // Reset for the next step so the sequence keeps exercising the breaker.
                f = { let mut g = ready(); g.spec = f.spec.clone(); g };
            }
        }
    }

    /// A pinned repository never carries a creating gate without an honored ack.
    #[test]
    fn pinned_never_creates_without_ack(
        phase in prop::sample::select(Phase::ALL.to_vec()),
        create in any::<bool>(),
        ro in any::<bool>(),
        ack in prop::option::of(prop_oneof![Just(PIN.to_string()), Just("deadbeef".to_string())]),
    ) {
        let mut f = with_phase(ready(), phase);
        f.spec.create_enabled = create;
        f.spec.read_only = ro;
        f.reinit_ack = ack.clone();
        let g = crate::health::gate::gate_for(&f, phase);
        let honored = ack.as_deref() == Some(PIN) && phase != Phase::Ready;
        prop_assert_eq!(g.allows_create(), honored && create && !ro);
        if let CreateGate::Allowed { via_reinit_ack } = g { prop_assert!(via_reinit_ack); }
    }

    /// The holdoff is non-decreasing in the attempt and stays within [base, cap].
    #[test]
    fn holdoff_monotone(n in 1u32..200) {
        let t = Tuning::default();
        let a = crate::health::holdoff::strict_retry_holdoff(&t, n);
        let b = crate::health::holdoff::strict_retry_holdoff(&t, n + 1);
        prop_assert!(a <= b && a >= 120 && b <= 600);
    }
}
