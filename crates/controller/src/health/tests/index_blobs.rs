//! docs/design/repository-breaker.md §3.10 index-blob health: the condition, the transition Event, and that it decides nothing else.
use super::*;
use crate::conditions::CondStatus;
use crate::health::fold::EventType;
use crate::health::index_blobs::{apply, index_blob_health};
use crate::health::plan::plan;

fn id() -> RepoIdentity {
    fresh().id
}

fn blob_events(events: &[crate::health::fold::Event]) -> usize {
    events.iter().filter(|e| e.reason == "TooManyIndexBlobs").count()
}

#[test]
fn over_threshold_is_false_with_one_warning_naming_count_threshold_and_maintenance() {
    let v = index_blob_health(&id(), Some(1001), 1000, false).expect("a count is known");
    assert_eq!(v.condition.type_, "IndexBlobHealth");
    assert_eq!(v.condition.status, CondStatus::False);
    assert_eq!(v.condition.reason, "TooManyIndexBlobs");
    for needle in ["1001", "1000", "maintenance", "kubectl get maintenance -n t"] {
        assert!(v.condition.message.contains(needle), "{needle:?} missing from {:?}", v.condition.message);
    }
    let e = v.event.expect("transition into False emits");
    assert_eq!(e.type_, EventType::Warning);
    assert_eq!(e.reason, "TooManyIndexBlobs");
    assert_eq!(e.note, v.condition.message);
}

#[test]
fn at_threshold_is_healthy() {
    let v = index_blob_health(&id(), Some(1000), 1000, false).expect("a count is known");
    assert_eq!(v.condition.status, CondStatus::True);
    assert_eq!(v.condition.reason, "Healthy");
    assert_eq!(v.event, None);
}

#[test]
fn under_threshold_is_healthy_and_recovery_emits_nothing() {
    let v = index_blob_health(&id(), Some(3), 1000, true).expect("a count is known");
    assert_eq!(v.condition.status, CondStatus::True);
    assert_eq!(v.condition.reason, "Healthy");
    assert_eq!(v.event, None, "only the transition into False has an Event");
}

#[test]
fn zero_threshold_disables_the_check_as_healthy_and_clears_a_false() {
    let v = index_blob_health(&id(), Some(1_000_000), 0, true).expect("a count is known");
    assert_eq!(v.condition.status, CondStatus::True);
    assert_eq!(v.condition.reason, "Healthy");
    assert!(v.condition.message.contains("disabled"), "{:?}", v.condition.message);
    assert_eq!(v.event, None);
}

#[test]
fn staying_false_emits_no_second_event() {
    let v = index_blob_health(&id(), Some(5000), 1000, true).expect("a count is known");
    assert_eq!(v.condition.status, CondStatus::False);
    assert_eq!(v.event, None);
}

#[test]
fn false_then_healthy_then_false_again_emits_twice() {
    let mut was_false = false;
    let mut emitted = 0;
    for count in [2000, 2100, 10, 10, 3000, 3100] {
        let v = index_blob_health(&id(), Some(count), 1000, was_false).expect("a count is known");
        emitted += usize::from(v.event.is_some());
        was_false = v.condition.status == CondStatus::False;
    }
    assert_eq!(emitted, 2, "one Event per transition into False");
}

#[test]
fn unknown_count_renders_no_condition_and_no_event() {
    assert_eq!(index_blob_health(&id(), None, 1000, false), None);
    assert_eq!(index_blob_health(&id(), None, 1000, true), None);
    let f = ready();
    assert_eq!(f.status.index_blob_count, None);
    let mut d = plan(&f, at(10));
    apply(&mut d, &f.id, 1000, false);
    assert!(d.conditions.iter().all(|c| c.type_ != "IndexBlobHealth"), "{:?}", d.conditions);
    assert_eq!(blob_events(&d.events), 0);
}

#[test]
fn cluster_repository_hint_lists_every_namespace() {
    let id = RepoIdentity { kind: RepoKind::ClusterRepository, namespace: None, ..id() };
    let v = index_blob_health(&id, Some(2000), 1000, false).expect("a count is known");
    assert!(v.condition.message.contains("kubectl get maintenance -A"), "{:?}", v.condition.message);
}

/// The count a probe reports in this reconcile is the one judged, and the verdict changes nothing
/// but the IndexBlobHealth condition and the Event list (phase, Ready, plan untouched).
#[test]
fn a_folded_probe_count_over_threshold_sets_false_and_blocks_nothing() {
    let mut f = ready();
    let result = ConnectResult::Connected { unique_id: PIN.into(), created: false, index_blob_count: Some(1500) };
    f.job = Some(job(PROBE, result, at(600)));
    let before = plan(&f, at(605));
    assert_eq!(before.status.index_blob_count, Some(1500));
    let mut d = before.clone();
    apply(&mut d, &f.id, 1000, false);

    assert_eq!(d.plan, before.plan);
    assert_eq!(d.status, before.status);
    assert_eq!(d.requeue_after, before.requeue_after);
    assert_eq!(d.status.phase, Some(Phase::Ready));
    assert_eq!(cond(&d.conditions, "Ready").status, CondStatus::True);
    let others: Vec<_> = d.conditions.iter().filter(|c| c.type_ != "IndexBlobHealth").cloned().collect();
    assert_eq!(others, before.conditions);
    let c = cond(&d.conditions, "IndexBlobHealth");
    assert_eq!((c.status, c.reason.as_str()), (CondStatus::False, "TooManyIndexBlobs"));
    assert_eq!(blob_events(&d.events), 1);
    assert_eq!(d.events.len(), before.events.len() + 1);
}

#[test]
fn apply_replaces_rather_than_duplicates_the_condition() {
    let mut f = ready();
    f.status.index_blob_count = Some(12);
    let mut d = plan(&f, at(10));
    apply(&mut d, &f.id, 1000, false);
    apply(&mut d, &f.id, 5, false);
    assert_eq!(d.conditions.iter().filter(|c| c.type_ == "IndexBlobHealth").count(), 1);
    assert_eq!(cond(&d.conditions, "IndexBlobHealth").status, CondStatus::False);
}

mod quick_request {
    use super::*;
    use crate::health::index_blobs::{Maintainers, QUICK_REQUEST_REPEAT_SECONDS, request_quick};

    fn decided(count: u64, was_false: bool, last: Option<Time>, now: Time) -> crate::health::plan::Decision {
        let mut f = ready();
        f.status.health.quick_maintenance_requested_at = last;
        let mut d = plan(&f, now);
        d.status.index_blob_count = Some(count);
        apply(&mut d, &id(), 1000, was_false);
        d
    }

    fn found() -> Maintainers {
        Maintainers::Found(vec!["t/r-maintenance".into()])
    }

    fn requested(d: &crate::health::plan::Decision) -> usize {
        d.events.iter().filter(|e| e.reason == "QuickMaintenanceRequested").count()
    }

    #[test]
    fn crossing_the_threshold_requests_one_quick_run_and_says_so() {
        let now = at(100) + chrono::Duration::milliseconds(700);
        let mut d = decided(1500, false, None, now);
        request_quick(&mut d, false, &found(), now);
        assert_eq!(d.status.health.quick_maintenance_requested_at, Some(at(100)), "whole seconds");
        assert_eq!(requested(&d), 1);
        let e = d.events.iter().find(|e| e.reason == "QuickMaintenanceRequested").unwrap();
        assert_eq!(e.type_, EventType::Normal);
        assert!(e.note.contains("t/r-maintenance") && e.note.contains("1500"), "{}", e.note);
        let c = d.conditions.iter().find(|c| c.type_ == "IndexBlobHealth").unwrap();
        assert!(c.message.contains("a quick maintenance run was requested at"), "{}", c.message);
        assert!(c.message.contains("t/r-maintenance"), "{}", c.message);
    }

    #[test]
    fn while_false_it_repeats_only_after_the_repeat_interval() {
        let first = at(100);
        let soon = first + chrono::Duration::seconds(QUICK_REQUEST_REPEAT_SECONDS - 1);
        let mut d = decided(1500, true, Some(first), soon);
        request_quick(&mut d, true, &found(), soon);
        assert_eq!(requested(&d), 0, "once per crossing");
        assert_eq!(d.status.health.quick_maintenance_requested_at, Some(first));
        let c = d.conditions.iter().find(|c| c.type_ == "IndexBlobHealth").unwrap();
        assert!(c.message.contains("requested at 2026-08-04T12:01:40Z"), "the stored request is named: {}", c.message);

        let later = first + chrono::Duration::seconds(QUICK_REQUEST_REPEAT_SECONDS);
        let mut d = decided(1500, true, Some(first), later);
        request_quick(&mut d, true, &found(), later);
        assert_eq!(requested(&d), 1, "again after the interval while still False");
        assert_eq!(d.status.health.quick_maintenance_requested_at, Some(later));
    }

    #[test]
    fn without_a_maintenance_or_read_only_nothing_is_requested_and_the_message_says_why() {
        let mut d = decided(1500, false, None, at(100));
        request_quick(&mut d, false, &Maintainers::Found(vec![]), at(100));
        assert_eq!((requested(&d), d.status.health.quick_maintenance_requested_at), (0, None));
        let c = d.conditions.iter().find(|c| c.type_ == "IndexBlobHealth").unwrap();
        assert!(c.message.contains("no Maintenance exists for this repository"), "{}", c.message);

        let mut d = decided(1500, false, None, at(100));
        request_quick(&mut d, false, &Maintainers::ReadOnly, at(100));
        assert_eq!((requested(&d), d.status.health.quick_maintenance_requested_at), (0, None));
        let c = d.conditions.iter().find(|c| c.type_ == "IndexBlobHealth").unwrap();
        assert!(c.message.contains("ReadOnly"), "{}", c.message);
    }

    #[test]
    fn a_healthy_count_requests_nothing() {
        let mut d = decided(999, false, None, at(100));
        request_quick(&mut d, false, &found(), at(100));
        assert_eq!((requested(&d), d.status.health.quick_maintenance_requested_at), (0, None));
        let c = d.conditions.iter().find(|c| c.type_ == "IndexBlobHealth").unwrap();
        assert!(!c.message.contains("requested"), "{}", c.message);
    }
}

mod cure_request {
    use super::*;
    use crate::health::index_blobs::{Maintainers, request_quick};

    /// Degraded for `TimedOut` (count healthy or unknown): the breaker asks for the cure once
    /// per opening, not again for the same opening within the hour; an unreachable backend
    /// asks for nothing.
    #[test]
    fn a_breaker_open_for_timed_out_requests_one_quick_run_per_opening() {
        let open = |opened: i64, last: Option<i64>, reach: Reach| {
            let mut f = ready();
            f.status.phase = Some(Phase::Degraded);
            f.status.health.breaker_opened_at = Some(at(opened));
            f.status.health.quick_maintenance_requested_at = last.map(at);
            f.status.reach = Some(ReachState { reach, message: "m".into() });
            f.status.health.strict_retry =
                Some(StrictRetry { attempt: 1, holdoff_seconds: 120, next_attempt_at: at(opened + 120) });
            plan(&f, at(opened + 5))
        };
        let found = Maintainers::Found(vec!["t/r".into()]);
        let n = |d: &crate::health::plan::Decision| {
            d.events.iter().filter(|e| e.reason == "QuickMaintenanceRequested").count()
        };
        let mut d = open(100, None, Reach::TimedOut);
        request_quick(&mut d, false, &found, at(105));
        assert_eq!((n(&d), d.status.health.quick_maintenance_requested_at), (1, Some(at(105))));
        assert!(d.events[0].note.contains("slow, not down") && d.events[0].note.contains("t/r"));
        // A request older than this opening: asked again.
        let mut d = open(100, Some(50), Reach::TimedOut);
        request_quick(&mut d, false, &found, at(105));
        assert_eq!(n(&d), 1);
        // Already asked since it opened: not again within the hour.
        let mut d = open(100, Some(102), Reach::TimedOut);
        request_quick(&mut d, false, &found, at(105));
        assert_eq!((n(&d), d.status.health.quick_maintenance_requested_at), (0, Some(at(102))));
        // An unreachable backend: nothing (maintenance stays parked anyway).
        let mut d = open(100, None, Reach::BackendUnreachable);
        request_quick(&mut d, false, &found, at(105));
        assert_eq!((n(&d), d.status.health.quick_maintenance_requested_at), (0, None));
    }
}
