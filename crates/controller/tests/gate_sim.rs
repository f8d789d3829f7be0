//! T10 over the spec's whole window, in simulated time: a Maintenance on a minutely quick
//! schedule, with a manual run requested, behind a repository that stays Degraded for five
//! minutes. Every 10 s the real `maintenance::plan` decides and its status is written back, as
//! the reconcile shell does. No Job for the five minutes (the end-to-end form in
//! `maintenance_e2e` watches 15 s of it); on recovery the manual run goes first and the
//! parked slot runs once, not once per missed minute.
use chrono::{DateTime, Duration, TimeZone, Utc};
use kopiur_api::maintenance::{MaintenanceStatus, RunMode, TakeoverPolicy};
use kopiur_api::shared::CronSpec;
use kopiur_controller::gating::Gate;
use kopiur_controller::maintenance::plan::{MaintFacts, plan};
use kopiur_controller::run_job::JobState;
use kopiur_controller::scheduled_run::{RunJob, RunRequest, Sched};

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 7, 17, 6, 0, 30).unwrap()
}

fn facts() -> MaintFacts {
    MaintFacts {
        schedules: Ok((
            Sched::parse(&CronSpec::new("* * * * *"), "u", None).unwrap(),
            Sched::parse(&CronSpec::new("0 3 * * *"), "u", None).unwrap(),
        )),
        status: MaintenanceStatus::default(),
        gate: Gate::Open,
        read_only: false,
        jobs: vec![],
        request: RunRequest::None,
        mode: None,
        expected_owner: "kopiur@kopiur.t.r".into(),
        aliases: vec![],
        takeover: TakeoverPolicy::Never,
        missing_secrets: vec![],
        pod_recheck: None,
        reverify_requested_at: None,
        repository_gate: kopiur_controller::gating::MaintenanceGate::AsGated,
        quick_requested_at: None,
    }
}

#[test]
fn t10_maintenance_parked_for_five_minutes_launches_nothing_then_catches_up_once() {
    let mut f = facts();
    let mut now = t0();
    f.status = plan(&f, now).status;
    let first_due = f.status.quick.as_ref().and_then(|q| q.next_scheduled_at).expect("a pinned quick slot");
    // The repository goes Degraded; a manual run is requested while it is.
    f.gate = Gate::NotReady { repository: "t/r".into(), phase: "Degraded".into() };
    f.request = RunRequest::Requested("2026-07-17T06:00:40Z".into());
    let parked_until = now + Duration::minutes(5);
    let mut reconciles = 0;
    while now < parked_until {
        now += Duration::seconds(10);
        let d = plan(&f, now);
        assert_eq!(d.launch, None, "no Job while the repository is Degraded ({now})");
        f.status = d.status;
        reconciles += 1;
    }
    assert_eq!(
        f.status.quick.as_ref().and_then(|q| q.next_scheduled_at),
        Some(first_due),
        "the first missed slot stays due; the four after it are not queued"
    );
    println!("T10 sim: {reconciles} reconciles over 5 min parked, 0 launches; due slot {first_due}");

    // Recovery: the manual run first.
    f.gate = Gate::Open;
    now += Duration::seconds(1);
    let d = plan(&f, now);
    let manual = d.launch.clone().expect("the manual run launches on recovery");
    assert_eq!(manual.manual.as_deref(), Some("2026-07-17T06:00:40Z"));
    f.status = d.status;
    f.jobs = vec![RunJob {
        name: "m-manual".into(),
        created: now,
        slot_at: now,
        manual: manual.manual.clone(),
        mode: "quick".into(),
        state: JobState::Complete { at: Some(now + Duration::seconds(20)) },
        pods: kopiur_controller::wedged::Verdict::NotWedged { recheck_at: None },
    }];
    now += Duration::seconds(21);
    // Then exactly one scheduled run for all the missed minutes: the parked slot.
    let mut launches = Vec::new();
    for _ in 0..3 {
        let d = plan(&f, now);
        if let Some(l) = d.launch.clone() {
            assert_eq!(l.mode, RunMode::Quick);
            launches.push(l.clone());
            f.jobs.push(RunJob {
                name: format!("m-quick-{}", launches.len()),
                created: now,
                slot_at: l.slot,
                manual: None,
                mode: "quick".into(),
                state: JobState::Active,
                pods: kopiur_controller::wedged::Verdict::NotWedged { recheck_at: None },
            });
        }
        f.status = d.status;
        now += Duration::seconds(2);
    }
    assert_eq!(launches.len(), 1, "one catch-up run, single flight: {launches:?}");
    assert_eq!(launches[0].slot, first_due, "the catch-up runs the parked slot");
}
