//! Probe due time, suspect cadence, restart-safe stamps, reverify nudges, holdoff numbers.
use chrono::Duration;
use kopiur_kopia::classify::ErrorClass;

use super::*;
use crate::conditions::CondStatus;
use crate::health::holdoff::{probe_spacing_seconds, strict_retry_holdoff};
use crate::health::plan::{Plan, plan};

fn launch_kind(p: &Plan) -> Option<ConnectKind> {
    match p {
        Plan::Launch(l) => Some(l.kind),
        Plan::Idle | Plan::AwaitJob | Plan::DeleteJob { .. } => None,
    }
}

#[test]
fn holdoff_sequence() {
    let t = Tuning::default();
    let seq: Vec<i64> = (1..=6).map(|n| strict_retry_holdoff(&t, n)).collect();
    assert_eq!(seq, vec![120, 240, 480, 600, 600, 600]);
    assert_eq!(strict_retry_holdoff(&t, 1000), 600);
    let fast = Tuning { strict_retry_base_seconds: 5, strict_retry_cap_seconds: 20, ..t };
    assert_eq!((1..=4).map(|n| strict_retry_holdoff(&fast, n)).collect::<Vec<_>>(), vec![5, 10, 20, 20]);
}

#[test]
fn probe_due_one_interval_after_seeded_clock() {
    let f = ready(); // lastProbeAt = t0 (seeded by the bootstrap)
    let d = plan(&f, at(1799));
    assert_eq!(d.plan, Plan::Idle);
    assert_eq!(d.requeue_after, Some(Duration::seconds(1)));
    let d = plan(&f, at(1800));
    assert_eq!(launch_kind(&d.plan), Some(PROBE));
    assert_eq!(d.status.health.probe_attempt_at, Some(at(1800)), "stamped before the Job exists");
    assert_eq!(d.status.phase, Some(Phase::Ready));
}

#[test]
fn unset_last_probe_is_due_now() {
    let mut f = ready();
    f.status.health.last_probe_at = None;
    assert_eq!(launch_kind(&plan(&f, at(1)).plan), Some(PROBE));
}

#[test]
fn stamped_attempt_prevents_double_launch_then_expires() {
    let mut f = ready();
    f.status.health.probe_attempt_at = Some(at(1800));
    assert_eq!(plan(&f, at(1805)).plan, Plan::Idle, "a restart right after the stamp launches nothing");
    assert_eq!(plan(&f, at(1829)).plan, Plan::Idle);
    // The Job never appeared (vanished without a result): the probe is due again.
    assert_eq!(launch_kind(&plan(&f, at(1830)).plan), Some(PROBE));
}

#[test]
fn suspect_cadence_follows_holdoff_under_degrade_only() {
    let t = Tuning::default();
    let mut p = ProbeSettings::default();
    assert_eq!(probe_spacing_seconds(&p, &t, 0), 1800);
    assert_eq!(probe_spacing_seconds(&p, &t, 1), 120);
    assert_eq!(probe_spacing_seconds(&p, &t, 2), 240);
    p.interval_seconds = 30;
    assert_eq!(probe_spacing_seconds(&p, &t, 2), 30, "never slower than the interval");
    p.interval_seconds = 1800;
    p.on_failure = OnFailure::Alert;
    assert_eq!(probe_spacing_seconds(&p, &t, 2), 1800);

    let mut f = ready();
    f.status.health.consecutive_probe_failures = 1;
    f.status.health.last_probe_at = Some(at(1800));
    assert_eq!(plan(&f, at(1919)).plan, Plan::Idle);
    assert_eq!(launch_kind(&plan(&f, at(1920)).plan), Some(PROBE));
}

#[test]
fn default_outage_opens_about_six_minutes_after_first_failed_probe() {
    // Defaults: interval 30m, threshold 3. Failures at 1800, then +120, then +240.
    let mut f = ready();
    let mut now = at(1800);
    let mut fails = Vec::new();
    for _ in 0..3 {
        let d = plan(&f, now);
        assert_eq!(launch_kind(&d.plan), Some(PROBE), "at {now}");
        f.status = d.status;
        f.job = Some(job(PROBE, refused(), now + Duration::seconds(2)));
        let d = plan(&f, now + Duration::seconds(2));
        fails.push((now + Duration::seconds(2) - at(0)).num_seconds());
        f.status = d.status;
        f.job = None;
        now = f.status.health.last_probe_at.unwrap()
            + Duration::seconds(probe_spacing_seconds(
                &f.spec.probe,
                &f.tuning,
                f.status.health.consecutive_probe_failures,
            ));
    }
    assert_eq!(f.status.phase, Some(Phase::Degraded));
    assert_eq!(fails, vec![1802, 1924, 2166]);
}

#[test]
fn reverify_honored_once_and_rate_limited() {
    let mut f = ready();
    f.reverify_requested_at = Some("2026-08-04T12:01:00+02:00".into()); // any offset accepted
    let v = parse("2026-08-04T10:01:00Z");
    let d = plan(&f, at(100));
    assert_eq!(launch_kind(&d.plan), Some(ConnectKind::Probe(ProbeTrigger::Reverify)));
    assert_eq!(d.status.last_reverify_at, Some(v));
    // After folding, the same value is not honored again.
    f.status = d.status;
    f.status.health.last_probe_at = Some(at(110));
    assert_eq!(plan(&f, at(120)).plan, Plan::Idle);
    // A newer nudge inside 120 s of the last honor waits for the spacing.
    f.reverify_requested_at = Some("2026-08-04T10:02:00Z".into());
    let d = plan(&f, at(130)); // last honor value 10:01:00 -> earliest 10:03:00 = t0 - 1h57m
    // (the value is in the past relative to t0 here, so spacing already elapsed)
    assert_eq!(launch_kind(&d.plan), Some(ConnectKind::Probe(ProbeTrigger::Reverify)));

    let mut g = ready();
    g.status.last_reverify_at = Some(at(100));
    g.status.health.last_probe_at = Some(at(150));
    g.reverify_requested_at = Some(at(160).to_rfc3339());
    let d = plan(&g, at(170));
    assert_eq!(d.plan, Plan::Idle);
    assert_eq!(d.requeue_after, Some(Duration::seconds(50)));
    assert_eq!(launch_kind(&plan(&g, at(220)).plan), Some(ConnectKind::Probe(ProbeTrigger::Reverify)));
}

fn parse(s: &str) -> Time {
    crate::health::plan::parse_time(s).unwrap()
}

#[test]
fn reverify_recorded_while_degraded_without_launch_and_ignored_elsewhere() {
    let mut f = with_phase(ready(), Phase::Degraded);
    f.status.health.strict_retry = Some(StrictRetry { attempt: 2, holdoff_seconds: 240, next_attempt_at: at(500) });
    f.reverify_requested_at = Some(at(100).to_rfc3339());
    let d = plan(&f, at(110));
    assert_eq!(d.plan, Plan::Idle, "a nudge never shortens the holdoff");
    assert_eq!(d.status.last_reverify_at, Some(at(100)));

    for phase in [Phase::Failed, Phase::Pending, Phase::Initializing] {
        let mut g = with_phase(ready(), phase);
        g.status.terminal =
            Some(Terminal { reason: TerminalReason::Class(ErrorClass::AuthFailure), message: "m".into() });
        g.reverify_requested_at = Some(at(100).to_rfc3339());
        let d = plan(&g, at(110));
        assert_eq!(d.status.last_reverify_at, None, "{phase:?}");
        assert_ne!(launch_kind(&d.plan), Some(ConnectKind::Probe(ProbeTrigger::Reverify)));
    }

    let mut h = ready();
    h.reverify_requested_at = Some("yesterday".into());
    assert_eq!(plan(&h, at(10)).plan, Plan::Idle);
}

#[test]
fn disabled_probe_never_opens_but_reverify_still_probes() {
    let mut f = ready();
    f.spec.probe.enabled = false;
    assert_eq!(plan(&f, at(100_000)).plan, Plan::Idle, "no periodic probe");
    let d = plan(&f, at(10));
    assert_eq!(cond(&d.conditions, "BackendReachable").status, CondStatus::Unknown);
    f.reverify_requested_at = Some(at(5).to_rfc3339());
    assert_eq!(launch_kind(&plan(&f, at(10)).plan), Some(ConnectKind::Probe(ProbeTrigger::Reverify)));
    for i in 0..10 {
        f.job = Some(job(ConnectKind::Probe(ProbeTrigger::Reverify), refused(), at(100 + i)));
        let d = plan(&f, at(100 + i));
        assert_eq!(d.status.phase, Some(Phase::Ready));
        f.status = d.status;
    }
    assert_eq!(f.status.health.consecutive_probe_failures, 10);
}
