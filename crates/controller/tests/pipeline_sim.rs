//! Deterministic simulation of the backup pipeline's planners under repository outages, in
//! simulated time: the schedule planner mints children, the Snapshot planner gates and
//! launches them, a simulated backend decides how each Job ends. Counts Jobs, failures and
//! parked children the way the end-to-end scenarios do.
use std::collections::BTreeMap;

use chrono::{DateTime, Duration, TimeZone, Utc};
use kopiur_api::domain::cron::Cron;
use kopiur_api::snapshot::SnapshotPhase;
use kopiur_api::snapshot_schedule::ConcurrencyPolicy;
use kopiur_controller::gating::Gate;
use kopiur_controller::run_job::{JobFacts, JobState};
use kopiur_controller::snapshot::plan::{
    self as snap, PolicyState, PreflightState, RunFacts, SourceState, Step, WorkSpecState,
};
use kopiur_controller::snapshot_schedule::plan::{self as sched, ChildSources, Disposition, Pin, ScheduleFacts};
use kopiur_controller::wedged::Verdict;

const UID: &str = "5d1e3c52-7a8b-4c1d-9e0f-0123456789ab";

#[derive(Clone, Debug)]
struct Child {
    phase: Option<SnapshotPhase>,
    job: Option<SimJob>,
    completion_recorded: bool,
    parked_since_open: bool,
}

#[derive(Clone, Debug)]
struct SimJob {
    started: DateTime<Utc>,
    ends: DateTime<Utc>,
    outcome: Option<bool>,
}

/// The world: when the backend is down and when the breaker holds the repository Degraded.
struct World {
    down_from: DateTime<Utc>,
    down_until: DateTime<Utc>,
    degraded_from: DateTime<Utc>,
    ready_again: DateTime<Utc>,
}

impl World {
    fn backend_up(&self, t: DateTime<Utc>) -> bool {
        t < self.down_from || t >= self.down_until
    }
    fn gate(&self, t: DateTime<Utc>) -> Gate {
        if t >= self.degraded_from && t < self.ready_again {
            Gate::NotReady { repository: "t/r".into(), phase: "Degraded".into() }
        } else {
            Gate::Open
        }
    }
}

#[derive(Default, Debug)]
struct Counts {
    jobs: usize,
    failed_jobs: usize,
    failed_snapshots: usize,
    skip_active: usize,
    children_created_while_open: usize,
    max_parked: usize,
    launches_after_recovery: Vec<(String, DateTime<Utc>)>,
    children_after_recovery: Vec<String>,
}

fn run(
    policy: ConcurrencyPolicy,
    world: &World,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> (Counts, BTreeMap<String, Child>) {
    let mut children: BTreeMap<String, Child> = BTreeMap::new();
    let mut counts = Counts::default();
    let mut pin: Option<Pin> = None;
    let mut has_last = false;
    // One prior success.
    children.insert(
        "prior".into(),
        Child { phase: Some(SnapshotPhase::Succeeded), job: None, completion_recorded: true, parked_since_open: false },
    );
    let mut t = start;
    let step = Duration::seconds(1);
    while t < end {
        // Schedule reconcile (each simulated second; the planner itself decides nothing fires early).
        let active: Vec<String> = children
            .iter()
            .filter(|(_, c)| matches!(c.phase, None | Some(SnapshotPhase::Pending) | Some(SnapshotPhase::Running)))
            .map(|(n, _)| n.clone())
            .collect();
        let facts = ScheduleFacts {
            name: "s".into(),
            uid: UID.into(),
            created: start,
            cron: Cron::parse("*/2 * * * *", UID).map_err(|e| e.to_string()),
            timezone_name: "UTC".into(),
            jitter: None,
            suspend: false,
            concurrency: policy,
            starting_deadline_seconds: None,
            run_on_create: false,
            pinned: pin.clone(),
            has_last_schedule: has_last,
            spec_changed: false,
            active_children: active,
            sources: ChildSources::PolicyUnknown,
        };
        let d = sched::plan(&facts, t);
        assert!(d.requeue_after >= Duration::seconds(1), "never a sub-second requeue");
        match &d.disposition {
            Disposition::SkipActive => counts.skip_active += 1,
            Disposition::Fire | Disposition::ReplaceActive { .. } => {}
            Disposition::Wait
            | Disposition::SkipSuspended
            | Disposition::SkipExpired
            | Disposition::SkipNoSource { .. }
            | Disposition::Invalid { .. } => {}
        }
        if let Some(f) = &d.fire {
            let [c] = f.children.as_slice() else { panic!("one source, one child per slot") };
            assert!(!children.contains_key(&c.name), "one child per slot");
            if world.gate(t) != Gate::Open {
                counts.children_created_while_open += 1;
            }
            if t >= world.ready_again {
                counts.children_after_recovery.push(c.name.clone());
            }
            children.insert(
                c.name.clone(),
                Child { phase: None, job: None, completion_recorded: false, parked_since_open: false },
            );
            has_last = true;
        }
        pin = d.next;

        // Snapshot reconciles.
        let gate = world.gate(t);
        for (name, c) in children.iter_mut() {
            // The mover's terminal PATCH.
            if let Some(j) = &mut c.job
                && j.outcome.is_none()
                && t >= j.ends
            {
                let ok = world.backend_up(j.started) && world.backend_up(t);
                j.outcome = Some(ok);
                if ok {
                    c.phase = Some(SnapshotPhase::Succeeded);
                } else {
                    counts.failed_jobs += 1;
                }
            }
            let job = match &c.job {
                None => JobState::Absent,
                Some(j) => match j.outcome {
                    None => JobState::Active,
                    Some(true) => JobState::Complete { at: Some(j.ends) },
                    Some(false) => JobState::Failed { reason: "BackoffLimitExceeded".into() },
                },
            };
            let f = RunFacts {
                phase: c.phase.clone(),
                discovered: false,
                has_finalizer: true,
                policy: PolicyState::Known,
                gate: gate.clone(),
                repository_read_only: false,
                preflight: PreflightState::NotConfigured,
                preflight_timeout: Duration::minutes(10),
                preflight_since: None,
                missing_secrets: vec![],
                source: SourceState::Present,
                source_missing_since: None,
                work_spec: WorkSpecState::Fits,
                job: JobFacts::new(
                    job,
                    c.job.as_ref().map(|j| j.started),
                    Duration::seconds(300),
                    Verdict::NotWedged { recheck_at: None },
                    None,
                    &[],
                ),
                completion_recorded: c.completion_recorded,
                reverify_requested_at: None,
                inherited_from: None,
            };
            let d = snap::plan(&f, t);
            if d.step == Step::Launch {
                counts.jobs += 1;
                if t >= world.ready_again {
                    counts.launches_after_recovery.push((name.clone(), t));
                }
                c.job = Some(SimJob { started: t, ends: t + Duration::seconds(30), outcome: None });
            }
            if d.gated {
                c.parked_since_open = true;
            }
            if let Some(p) = d.phase {
                if p == SnapshotPhase::Failed && c.phase != Some(SnapshotPhase::Failed) {
                    counts.failed_snapshots += 1;
                }
                c.phase = Some(p);
            }
            if d.record_completion.is_some() {
                c.completion_recorded = true;
            }
        }
        let parked = children.values().filter(|c| c.phase == Some(SnapshotPhase::Pending)).count();
        counts.max_parked = counts.max_parked.max(parked);
        t += step;
    }
    (counts, children)
}

/// T07: `*/2`, Forbid, with one prior success; the backend goes down 5 s before a tick for
/// 20 minutes. The breaker opens after three 30 s probes (about 90 s) and closes a minute
/// after the backend returns.
#[test]
fn t07_forbid_outage_parks_one_child_and_fires_it_once_on_recovery() {
    let start = Utc.with_ymd_and_hms(2026, 3, 1, 10, 0, 30).unwrap();
    let tick = Utc.with_ymd_and_hms(2026, 3, 1, 10, 10, 0).unwrap();
    let down_from = tick - Duration::seconds(5);
    let world = World {
        down_from,
        down_until: down_from + Duration::minutes(20),
        degraded_from: down_from + Duration::seconds(90),
        ready_again: down_from + Duration::minutes(21),
    };
    let end = world.ready_again + Duration::minutes(3);
    let (c, children) = run(ConcurrencyPolicy::Forbid, &world, start, end);
    println!("T07 counts: {c:?}");
    assert!(c.failed_jobs <= 1, "at most one failed backup Job: {c:?}");
    assert!(c.failed_snapshots <= 1, "at most one Failed Snapshot: {c:?}");
    assert_eq!(c.children_created_while_open, 1, "exactly one child minted while the breaker is open");
    assert_eq!(c.max_parked, 1, "parked work is bounded at one");
    assert!(c.skip_active >= 7, "later slots are SkipActive: {}", c.skip_active);
    let parked: Vec<&String> = children.iter().filter(|(_, ch)| ch.parked_since_open).map(|(n, _)| n).collect();
    assert_eq!(parked.len(), 1);
    // Recovery: the parked child launches exactly once, immediately, and succeeds.
    let first = &c.launches_after_recovery[0];
    assert_eq!(&first.0, parked[0]);
    assert_eq!(first.1, world.ready_again, "launched in the first reconcile after Ready");
    assert_eq!(c.launches_after_recovery.iter().filter(|(n, _)| n == parked[0]).count(), 1);
    assert_eq!(children[parked[0]].phase, Some(SnapshotPhase::Succeeded));
    // No further child before the next nominal slot after recovery.
    let next_nominal = Utc.with_ymd_and_hms(2026, 3, 1, 10, 32, 0).unwrap();
    assert!(world.ready_again > Utc.with_ymd_and_hms(2026, 3, 1, 10, 30, 0).unwrap());
    for name in &c.children_after_recovery {
        let slot: i64 = name.trim_start_matches("s-").parse().unwrap();
        assert!(slot >= next_nominal.timestamp(), "child {name} before the next nominal slot");
    }
    assert_eq!(c.failed_jobs + c.failed_snapshots, 2, "the one pre-open failure is counted once each");
}

/// T09: Allow parks one child per slot while open; each launches exactly once on recovery.
#[test]
fn t09_allow_parks_one_child_per_slot() {
    let start = Utc.with_ymd_and_hms(2026, 3, 1, 10, 0, 30).unwrap();
    let down_from = Utc.with_ymd_and_hms(2026, 3, 1, 10, 9, 55).unwrap();
    let world = World {
        down_from,
        down_until: down_from + Duration::minutes(11),
        degraded_from: down_from + Duration::seconds(90),
        ready_again: down_from + Duration::minutes(12),
    };
    let end = world.ready_again + Duration::seconds(90);
    let (c, children) = run(ConcurrencyPolicy::Allow, &world, start, end);
    println!("T09 counts: {c:?}");
    // Slots at 10:12 .. 10:20 while open: 5.
    assert_eq!(c.children_created_while_open, 5);
    assert_eq!(c.max_parked, 5);
    let parked: Vec<&String> = children.iter().filter(|(_, ch)| ch.parked_since_open).map(|(n, _)| n).collect();
    for p in &parked {
        assert_eq!(c.launches_after_recovery.iter().filter(|(n, _)| n == *p).count(), 1, "{p} launched once");
    }
    assert!(c.failed_jobs <= 1);
}

/// A schedule whose pinned slot lies far in the past (the controller was down) with a
/// starting deadline skips it and re-pins; reconciles over the next minute stay few.
#[test]
fn t20_expired_slot_repins_without_a_loop() {
    let uid = UID;
    let now = Utc.with_ymd_and_hms(2026, 3, 1, 10, 5, 10).unwrap();
    let mut facts = ScheduleFacts {
        name: "s".into(),
        uid: uid.into(),
        created: now - Duration::hours(1),
        cron: Cron::parse("* * * * *", uid).map_err(|e| e.to_string()),
        timezone_name: "UTC".into(),
        jitter: None,
        suspend: false,
        concurrency: ConcurrencyPolicy::Forbid,
        starting_deadline_seconds: Some(30),
        run_on_create: false,
        pinned: Some(Pin { slot: now - Duration::minutes(5), at: now - Duration::minutes(5), timezone: "UTC".into() }),
        has_last_schedule: true,
        spec_changed: false,
        active_children: vec![],
        sources: ChildSources::PolicyUnknown,
    };
    // Drive the reconciler the way the runtime does: wake at each requeue.
    let mut t = now;
    let mut reconciles = 0;
    let mut skipped = 0;
    let mut fired = 0;
    while t < now + Duration::seconds(60) {
        reconciles += 1;
        let d = sched::plan(&facts, t);
        match d.disposition {
            Disposition::SkipExpired => skipped += 1,
            Disposition::Fire => fired += 1,
            Disposition::Wait
            | Disposition::SkipSuspended
            | Disposition::SkipActive
            | Disposition::ReplaceActive { .. }
            | Disposition::SkipNoSource { .. }
            | Disposition::Invalid { .. } => {}
        }
        facts.pinned = d.next;
        t += d.requeue_after;
    }
    assert_eq!(skipped, 1);
    assert!(fired <= 1, "the next nominal minute may fire once");
    assert!(reconciles <= 3, "reconciles in 60 s: {reconciles}");
}
