//! The RepositoryReplication run path as a pure function of gathered facts and `now` (spec
//! docs/design/pipeline.md §9.3, docs/design/api-contract.md §11): a pinned cron slot, the manual `run-requested` run (which re-anchors the
//! schedule), suspend, single flight, and the source gate (a due slot stays due while parked
//! and runs once on recovery).
use chrono::{DateTime, Utc};
use kopiur_api::names::reason;
use kopiur_api::repository_replication::{ReplicationManualRun, ReplicationPhase, RepositoryReplicationStatus};
use kopiur_api::shared::phase::ManualRunPhase;

use crate::conditions::Cond;
use crate::conditions::{Standing, trio};
use crate::gating::Gate;
use crate::run_job::JobState;
use crate::scheduled_run::{RunJob, RunRequest, Sched, rfc3339, until};

/// Why the destination cannot be used, if it cannot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    Usable,
    /// Same target as the source (`DestinationIsSource`, Stalled).
    IsSource,
    /// A backend key this release does not implement (`FeatureNotImplemented`, Stalled).
    NotImplemented(String),
    /// The destination's Secret is referenced in another namespace (`CrossNamespaceReference`,
    /// Stalled): the mover reads only this CR's namespace.
    CrossNamespace(String),
}

pub struct ReplFacts {
    pub schedule: Result<Sched, String>,
    pub status: RepositoryReplicationStatus,
    pub suspend: bool,
    pub gate: Gate,
    pub destination: Destination,
    /// This replication's Jobs still in the store.
    pub jobs: Vec<RunJob>,
    pub request: RunRequest,
    pub missing_secrets: Vec<String>,
    /// The source's `reverify-requested-at` (failures nudge the source, spaced).
    pub reverify_requested_at: Option<DateTime<Utc>>,
    /// How soon the active Job's wedged-pod check wants to run again (`common::check_pods`).
    pub pod_recheck: Option<std::time::Duration>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    pub slot: DateTime<Utc>,
    pub at: DateTime<Utc>,
    /// The raw `run-requested` value a manual run answers.
    pub manual: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ReplDecision {
    pub status: RepositoryReplicationStatus,
    pub conditions: Vec<Cond>,
    pub launch: Option<Launch>,
    /// `(job, outcome)` recorded by this reconcile: `succeeded` or `failed`.
    pub recorded: Vec<(String, &'static str)>,
    pub invalid_request: Option<String>,
    pub nudge: bool,
    pub requeue: std::time::Duration,
    /// Jobs whose mover pod is wedged: deleted once the status write landed.
    pub delete_jobs: Vec<String>,
    /// The run this reconcile recorded failed on a wedged mover pod: the message (one
    /// `MoverPodWedged` Warning Event).
    pub wedged: Option<String>,
}

const REPLICATING: &str = "Replicating";

pub fn plan(f: &ReplFacts, now: DateTime<Utc>) -> ReplDecision {
    let mut d = plan_inner(f, now);
    // A wedged Job is deleted whatever else happens (again, while its delete has not landed).
    d.delete_jobs = f.jobs.iter().filter(|j| j.wedged().is_some()).map(|j| j.name.clone()).collect();
    if let Some(r) = f.pod_recheck {
        d.requeue = d.requeue.min(r.max(std::time::Duration::from_secs(1)));
    }
    d
}

fn plan_inner(f: &ReplFacts, now: DateTime<Utc>) -> ReplDecision {
    let mut st = f.status.clone();
    let mut d = ReplDecision {
        status: st.clone(),
        conditions: vec![],
        launch: None,
        recorded: vec![],
        invalid_request: None,
        nudge: false,
        requeue: std::time::Duration::from_secs(300),
        delete_jobs: vec![],
        wedged: None,
    };
    let sched = match &f.schedule {
        Ok(s) => s,
        Err(m) => {
            d.conditions = trio(Standing::Stalled, reason::INVALID_SCHEDULE, m.clone());
            return d;
        }
    };
    if let Some(conditions) = destination_decision(&f.destination) {
        d.conditions = conditions;
        return d;
    }
    let pin = sched.pin(st.next_scheduled_at, now);
    st.next_scheduled_at = pin.map(|n| n.at);
    (d.recorded, d.nudge, d.wedged) = recorded_run(f, &mut st, now);
    d.invalid_request = manual_request(f, &mut st);
    d.requeue = until(st.next_scheduled_at, now);

    // Single flight (a wedged Job is on its way out).
    if let Some(j) = f.jobs.iter().find(|j| j.state == JobState::Active && j.wedged().is_none()) {
        if !matches!(st.phase, Some(ReplicationPhase::Replicating | ReplicationPhase::Succeeded)) {
            st.phase = Some(ReplicationPhase::Replicating);
        }
        d.status = st;
        d.conditions = trio(Standing::Waiting, REPLICATING, format!("replication Job {} is running", j.name));
        return d;
    }
    let manual_pending = st.manual_run.as_ref().is_some_and(|m| m.phase == ManualRunPhase::Pending);
    let due = pin.is_some_and(|n| now >= n.at);

    if f.suspend {
        return suspended(d, st, sched, due, now);
    }
    if st.phase == Some(ReplicationPhase::Suspended) {
        st.phase = None;
    }
    if let Some((conditions, requeue)) = gate_decision(&f.gate, &mut st, manual_pending || due) {
        d.status = st;
        d.conditions = conditions;
        d.requeue = requeue.unwrap_or(d.requeue);
        return d;
    }
    if (manual_pending || due) && !f.missing_secrets.is_empty() {
        d.status = st;
        d.conditions = crate::scheduled_run::waiting_for_secrets(&f.missing_secrets);
        d.requeue = crate::scheduled_run::CREDENTIALS_RECHECK;
        return d;
    }
    d.launch = manual_run(&mut st, sched, now).or_else(|| scheduled_run(&mut st, sched, pin.filter(|_| due), now));
    if d.launch.is_some() {
        st.phase = Some(ReplicationPhase::Replicating);
        d.status = st;
        d.conditions = trio(Standing::Waiting, REPLICATING, "replication Job launched");
        d.requeue = std::time::Duration::from_secs(300);
        return d;
    }
    d.conditions = idle_conditions(&st);
    d.status = st;
    d
}

/// The Stalled conditions of a destination that cannot be used.
fn destination_decision(destination: &Destination) -> Option<Vec<Cond>> {
    match destination {
        Destination::Usable => None,
        Destination::IsSource => Some(trio(
            Standing::Stalled,
            reason::DESTINATION_IS_SOURCE,
            "spec.destination points at the source repository's storage",
        )),
        Destination::NotImplemented(m) => Some(trio(Standing::Stalled, reason::FEATURE_NOT_IMPLEMENTED, m.clone())),
        Destination::CrossNamespace(m) => Some(trio(Standing::Stalled, reason::CROSS_NAMESPACE_REFERENCE, m.clone())),
    }
}

/// Records the newest Job once: success by lastReplicated, failure by the Replicating phase
/// the launch wrote. A Job whose mover pod is wedged is a failed run (its Job is deleted,
/// docs/design/architecture.md §1.4), not the source's fault: no nudge. Returns the recorded
/// `(job, outcome)`, whether to nudge the source's reverify, and the wedged message.
fn recorded_run(
    f: &ReplFacts,
    st: &mut RepositoryReplicationStatus,
    now: DateTime<Utc>,
) -> (Vec<(String, &'static str)>, bool, Option<String>) {
    let (mut recorded, mut nudge, mut wedged) = (vec![], false, None);
    let newest = f.jobs.iter().max_by(|a, b| a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name)));
    if let Some(j) = newest {
        let outcome = match &j.state {
            JobState::Active if j.wedged().is_some() && st.phase == Some(ReplicationPhase::Replicating) => {
                st.phase = Some(ReplicationPhase::Failed);
                wedged = j.wedged().map(str::to_string);
                Some((false, now))
            }
            JobState::Complete { at } if st.last_replicated.is_none_or(|l| l < j.created) => {
                st.phase = Some(ReplicationPhase::Succeeded);
                st.last_replicated = Some(at.unwrap_or(now));
                Some((true, at.unwrap_or(now)))
            }
            JobState::Failed { .. } if st.phase == Some(ReplicationPhase::Replicating) => {
                st.phase = Some(ReplicationPhase::Failed);
                Some((false, now))
            }
            JobState::Complete { .. } | JobState::Failed { .. } | JobState::Absent | JobState::Active => None,
        };
        if let Some((ok, end)) = outcome {
            if let (Some(raw), Some(m)) = (&j.manual, st.manual_run.as_mut())
                && m.requested_at == *raw
                && !m.phase.is_terminal()
            {
                m.phase = if ok { ManualRunPhase::Succeeded } else { ManualRunPhase::Failed };
                m.completed_at = Some(end);
            }
            recorded.push((j.name.clone(), if ok { "succeeded" } else { "failed" }));
            nudge = !ok && wedged.is_none() && crate::repo_view::nudge_due(f.reverify_requested_at, now);
        }
    }
    (recorded, nudge, wedged)
}

/// A new run-requested value starts exactly one run (a Pending manualRun); a malformed one is
/// returned, to warn about.
fn manual_request(f: &ReplFacts, st: &mut RepositoryReplicationStatus) -> Option<String> {
    match &f.request {
        RunRequest::Requested(raw) if st.manual_run.as_ref().map(|m| &m.requested_at) != Some(raw) => {
            st.manual_run = Some(ReplicationManualRun {
                requested_at: raw.clone(),
                phase: ManualRunPhase::Pending,
                completed_at: None,
            });
            None
        }
        RunRequest::Malformed(raw) => Some(raw.clone()),
        RunRequest::Requested(_) | RunRequest::None => None,
    }
}

/// Suspended: slots are skipped (re-pinned); a request waits.
fn suspended(
    mut d: ReplDecision,
    mut st: RepositoryReplicationStatus,
    sched: &Sched,
    due: bool,
    now: DateTime<Utc>,
) -> ReplDecision {
    if due {
        st.next_scheduled_at = sched.next_after(now).map(|n| n.at);
        d.requeue = until(st.next_scheduled_at, now);
    }
    let manual_pending = st.manual_run.as_ref().is_some_and(|m| m.phase == ManualRunPhase::Pending);
    st.phase = Some(ReplicationPhase::Suspended);
    d.status = st;
    d.conditions = if manual_pending {
        trio(Standing::Ready, reason::SUSPENDED_WITH_PENDING_RUN, "suspended; the requested run waits for resume")
    } else {
        trio(Standing::Ready, reason::SUSPENDED, "spec.suspend is true")
    };
    d
}

/// Whether the source gate holds the run: the conditions, and the requeue when parked (a run
/// that would start is Pending meanwhile).
fn gate_decision(
    gate: &Gate,
    st: &mut RepositoryReplicationStatus,
    would_run: bool,
) -> Option<(Vec<Cond>, Option<std::time::Duration>)> {
    match gate {
        Gate::Open => None,
        Gate::NotReady { .. } => {
            if would_run {
                st.phase = Some(ReplicationPhase::Pending);
            }
            Some((
                trio(Standing::Waiting, reason::REPOSITORY_NOT_READY, gate.message()),
                Some(std::time::Duration::from_secs(300)),
            ))
        }
        Gate::NamespaceNotAllowed { .. } => {
            Some((trio(Standing::Stalled, reason::NAMESPACE_NOT_ALLOWED, gate.message()), None))
        }
    }
}

/// A pending manual run launches (Running) and re-anchors the schedule.
fn manual_run(st: &mut RepositoryReplicationStatus, sched: &Sched, now: DateTime<Utc>) -> Option<Launch> {
    let m = st.manual_run.as_mut().filter(|m| m.phase == ManualRunPhase::Pending)?;
    m.phase = ManualRunPhase::Running;
    let launch = Launch { slot: now, at: now, manual: Some(m.requested_at.clone()) };
    st.next_scheduled_at = sched.next_after(now).map(|n| n.at);
    Some(launch)
}

/// The due slot launches, and the pin moves past it.
fn scheduled_run(
    st: &mut RepositoryReplicationStatus,
    sched: &Sched,
    due: Option<kopiur_api::domain::cron::NextSlot>,
    now: DateTime<Utc>,
) -> Option<Launch> {
    let n = due?;
    st.next_scheduled_at = sched.next_after(now.max(n.slot)).map(|x| x.at);
    Some(Launch { slot: n.slot, at: n.at, manual: None })
}

/// The conditions when nothing runs: the last outcome and the next slot.
fn idle_conditions(st: &RepositoryReplicationStatus) -> Vec<Cond> {
    let next = st.next_scheduled_at.map(rfc3339).unwrap_or_else(|| "never".into());
    match &st.phase {
        Some(ReplicationPhase::Failed) => trio(
            Standing::Failed,
            reason::LAST_RUN_FAILED,
            format!("the last run failed; the next slot at {next} retries"),
        ),
        Some(ReplicationPhase::Succeeded) => {
            let last = st.last_replicated.map(rfc3339).unwrap_or_default();
            trio(Standing::Ready, reason::REPLICATED, format!("last replicated at {last}; next run at {next}"))
        }
        Some(
            ReplicationPhase::Pending
            | ReplicationPhase::Replicating
            | ReplicationPhase::Suspended
            | ReplicationPhase::Unknown(_),
        )
        | None => trio(Standing::Ready, reason::SCHEDULED, format!("next run at {next}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conditions::CondStatus;
    use chrono::TimeZone;
    use kopiur_api::shared::CronSpec;

    fn t(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 7, 17, h, m, 0).unwrap()
    }

    fn facts() -> ReplFacts {
        ReplFacts {
            schedule: Ok(Sched::parse(&CronSpec::new("0 * * * *"), "u", None).unwrap()),
            status: RepositoryReplicationStatus::default(),
            suspend: false,
            gate: Gate::Open,
            destination: Destination::Usable,
            jobs: vec![],
            request: RunRequest::None,
            missing_secrets: vec![],
            reverify_requested_at: None,
            pod_recheck: None,
        }
    }

    fn ready(d: &ReplDecision) -> (&str, CondStatus) {
        let c = d.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        (c.reason.as_str(), c.status)
    }

    fn job(name: &str, created: DateTime<Utc>, manual: Option<&str>, state: JobState) -> RunJob {
        RunJob {
            name: name.into(),
            created,
            slot_at: created,
            manual: manual.map(Into::into),
            mode: String::new(),
            state,
            pods: crate::wedged::Verdict::NotWedged { recheck_at: None },
        }
    }

    #[test]
    fn a_wedged_run_fails_without_a_nudge_and_its_job_is_deleted() {
        let mut f = facts();
        f.status = plan(&f, t(1, 10)).status;
        f.request = RunRequest::Requested("2026-07-17T01:20:00Z".into());
        let l = plan(&f, t(1, 20));
        assert!(l.launch.is_some());
        f.status = l.status;
        f.jobs = vec![job("x-repl-3", t(1, 20), Some("2026-07-17T01:20:00Z"), JobState::Active)];
        // Not wedged yet: Replicating; the check's recheck bounds the requeue.
        f.pod_recheck = Some(std::time::Duration::from_secs(7));
        let d = plan(&f, t(1, 21));
        assert_eq!(ready(&d).0, REPLICATING);
        assert_eq!(d.requeue, std::time::Duration::from_secs(7));
        assert!(d.delete_jobs.is_empty() && d.wedged.is_none());
        // Wedged: a failed run, no nudge, the Job deleted, the manual run Failed.
        f.pod_recheck = None;
        let message = "mover pod x-repl-3-a of Job x-repl-3 has been unschedulable (PodScheduled=False, Unschedulable)";
        f.jobs[0].pods = crate::wedged::Verdict::Wedged { message: message.into() };
        let d = plan(&f, t(1, 26));
        assert_eq!(d.status.phase, Some(ReplicationPhase::Failed));
        assert_eq!(d.recorded, vec![("x-repl-3".to_string(), "failed")]);
        assert_eq!(d.wedged.as_deref(), Some(message));
        assert!(!d.nudge, "a wedged pod is not the source's fault");
        assert_eq!(d.delete_jobs, vec!["x-repl-3".to_string()]);
        assert_eq!(d.status.manual_run.as_ref().unwrap().phase, ManualRunPhase::Failed);
        assert_eq!(ready(&d), (reason::LAST_RUN_FAILED, CondStatus::False));
        assert!(d.launch.is_none());
        // Written, the delete not landed yet: deleted again, recorded once.
        f.status = d.status.clone();
        let again = plan(&f, t(1, 27));
        assert!(again.recorded.is_empty() && again.wedged.is_none());
        assert_eq!(again.delete_jobs, vec!["x-repl-3".to_string()]);
        // An ordinary failure still nudges.
        f.jobs[0].pods = crate::wedged::Verdict::NotWedged { recheck_at: None };
        f.jobs[0].state = JobState::Failed { reason: "BackoffLimitExceeded".into() };
        f.status.phase = Some(ReplicationPhase::Replicating);
        assert!(plan(&f, t(1, 28)).nudge);
    }

    #[test]
    fn pins_then_fires_once_per_slot() {
        let mut f = facts();
        let d = plan(&f, t(1, 10));
        assert_eq!(d.launch, None);
        assert_eq!(d.status.next_scheduled_at, Some(t(2, 0)));
        assert_eq!(ready(&d), (reason::SCHEDULED, CondStatus::True));
        f.status = d.status.clone();
        assert_eq!(plan(&f, t(1, 20)).status, d.status, "idle: nothing to write");
        let d = plan(&f, t(2, 0));
        assert_eq!(d.launch, Some(Launch { slot: t(2, 0), at: t(2, 0), manual: None }));
        assert_eq!(d.status.phase, Some(ReplicationPhase::Replicating));
        assert_eq!(d.status.next_scheduled_at, Some(t(3, 0)));
        f.status = d.status;
        f.jobs = vec![job("x-repl-1", t(2, 0), None, JobState::Active)];
        assert_eq!(plan(&f, t(2, 1)).launch, None, "single flight");
        // The mover's own Succeeded while the Job still runs is kept.
        f.status.phase = Some(ReplicationPhase::Succeeded);
        assert_eq!(plan(&f, t(2, 1)).status.phase, Some(ReplicationPhase::Succeeded));
        f.jobs[0].state = JobState::Complete { at: Some(t(2, 2)) };
        let d = plan(&f, t(2, 2));
        assert_eq!(d.recorded, vec![("x-repl-1".to_string(), "succeeded")]);
        assert_eq!(d.status.last_replicated, Some(t(2, 2)));
        assert_eq!(ready(&d), (reason::REPLICATED, CondStatus::True));
        f.status = d.status.clone();
        let d2 = plan(&f, t(2, 3));
        assert!(d2.recorded.is_empty());
        assert_eq!(d2.status, d.status);
    }

    #[test]
    fn parked_slot_and_request_run_once_on_recovery() {
        let mut f = facts();
        f.status = plan(&f, t(1, 10)).status;
        f.gate = Gate::NotReady { repository: "t/r".into(), phase: "Degraded".into() };
        f.request = RunRequest::Requested("2026-07-17T02:05:00Z".into());
        let d = plan(&f, t(2, 5));
        assert!(d.launch.is_none());
        assert_eq!(d.status.phase, Some(ReplicationPhase::Pending));
        assert_eq!(ready(&d), (reason::REPOSITORY_NOT_READY, CondStatus::False));
        assert_eq!(d.status.next_scheduled_at, Some(t(2, 0)), "the due slot stays due");
        f.status = d.status;
        f.gate = Gate::Open;
        let d = plan(&f, t(2, 30));
        let l = d.launch.clone().unwrap();
        assert_eq!(l.manual.as_deref(), Some("2026-07-17T02:05:00Z"));
        assert_eq!(d.status.next_scheduled_at, Some(t(3, 0)), "a manual run re-anchors the schedule");
        f.status = d.status;
        f.jobs = vec![job(
            "x-repl-2",
            t(2, 30),
            l.manual.as_deref(),
            JobState::Failed { reason: "BackoffLimitExceeded".into() },
        )];
        let d = plan(&f, t(2, 35));
        assert_eq!(d.status.phase, Some(ReplicationPhase::Failed));
        assert_eq!(d.status.manual_run.as_ref().unwrap().phase, ManualRunPhase::Failed);
        assert!(d.nudge, "a failure nudges the source");
        let ready_c = d.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!((ready_c.reason.as_str(), ready_c.status), (reason::LAST_RUN_FAILED, CondStatus::False));
        assert!(d.conditions.iter().all(|c| c.status != CondStatus::True), "Failed is neither Reconciling nor Stalled");
        f.status = d.status.clone();
        assert!(plan(&f, t(2, 36)).recorded.is_empty());
    }

    #[test]
    fn suspended_waits_and_skips() {
        let mut f = facts();
        f.status = plan(&f, t(1, 10)).status;
        f.suspend = true;
        f.request = RunRequest::Requested("2026-07-17T02:05:00Z".into());
        let d = plan(&f, t(2, 5));
        assert!(d.launch.is_none());
        assert_eq!(d.status.phase, Some(ReplicationPhase::Suspended));
        assert_eq!(d.status.next_scheduled_at, Some(t(3, 0)));
        assert_eq!(ready(&d), (reason::SUSPENDED_WITH_PENDING_RUN, CondStatus::True));
        f.status = d.status;
        f.suspend = false;
        assert!(plan(&f, t(2, 10)).launch.unwrap().manual.is_some(), "resume runs the waiting request");
    }

    #[test]
    fn destination_is_source_stalls() {
        let mut f = facts();
        f.destination = Destination::IsSource;
        let d = plan(&f, t(1, 0));
        assert_eq!(ready(&d).0, reason::DESTINATION_IS_SOURCE);
        assert!(d.conditions.iter().any(|c| c.type_ == "Stalled" && c.status == CondStatus::True));
        assert!(d.launch.is_none());
    }
}
