//! The Maintenance run path as a pure function of gathered facts and `now` (docs/design/pipeline.md §9.2, api
//! docs/design/api-contract.md §10): pinned quick and full slots, the manual `run-requested` run, single flight, the
//! repository gate (a due slot stays due while parked and runs once on recovery), and the
//! lease outcome the mover leaves in `status.ownership.owner`.
use chrono::{DateTime, Utc};
use kopiur_api::maintenance::{MaintenanceManualRun, MaintenanceStatus, RunMode, TakeoverPolicy, TierStatus};
use kopiur_api::names::{reason, run_mode};
use kopiur_api::repository::RepositoryPhase;
use kopiur_api::shared::phase::ManualRunPhase;

use crate::conditions::Cond;
use crate::conditions::{Standing, trio};
use crate::gating::{Gate, MaintenanceGate};
use crate::run_job::JobState;
use crate::scheduled_run::{RunJob, RunRequest, Sched, lease_cond, rfc3339};

pub struct MaintFacts {
    /// (quick, full), or why a schedule does not parse.
    pub schedules: Result<(Sched, Sched), String>,
    pub status: MaintenanceStatus,
    pub gate: Gate,
    pub read_only: bool,
    /// This Maintenance's Jobs (any age still in the store).
    pub jobs: Vec<RunJob>,
    pub request: RunRequest,
    /// The raw `run-mode` annotation.
    pub mode: Option<String>,
    /// The kopia owner kopiur expects (`kopiur@<lease host>`) and the aliases that also count.
    pub expected_owner: String,
    pub aliases: Vec<String>,
    pub takeover: TakeoverPolicy,
    /// Secrets the Job needs that do not exist in this namespace.
    pub missing_secrets: Vec<String>,
    /// How soon the active Job's wedged-pod check wants to run again (`common::check_pods`).
    pub pod_recheck: Option<std::time::Duration>,
    /// The repository's `reverify-requested-at` (a failed run nudges it, spaced 60 s).
    pub reverify_requested_at: Option<DateTime<Utc>>,
    /// `Cure` while the repository is Degraded for `TimedOut`: maintenance runs despite the
    /// gate, quick first, because it is what makes the connect fast again.
    pub repository_gate: MaintenanceGate,
    /// The repository's `status.health.quickMaintenanceRequestedAt` (`IndexBlobHealth` went
    /// False): one quick run is due unless a quick run was handled at or after it.
    pub quick_requested_at: Option<DateTime<Utc>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    pub mode: RunMode,
    /// Scheduled: the slot and its fire time; manual: `now` for both.
    pub slot: DateTime<Utc>,
    pub at: DateTime<Utc>,
    /// The raw `run-requested` value a manual run answers.
    pub manual: Option<String>,
}

/// A run whose terminal Job this reconcile records (for Events and logs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    pub job: String,
    pub mode: String,
    /// `succeeded`, `failed` or `yielded`.
    pub outcome: &'static str,
    /// A run that failed because its mover pod was wedged: the message (one `MoverPodWedged`
    /// Warning Event).
    pub wedged: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct MaintDecision {
    pub status: MaintenanceStatus,
    pub conditions: Vec<Cond>,
    pub launch: Option<Launch>,
    pub recorded: Vec<Recorded>,
    /// A malformed `run-requested` value to warn about (`InvalidRunRequest`).
    pub invalid_request: Option<String>,
    pub requeue: std::time::Duration,
    /// Jobs whose mover pod is wedged: deleted once the status write landed.
    pub delete_jobs: Vec<String>,
    /// Stamp the reverify nudge on the repository: a run failed, not because its pod was
    /// wedged (docs/design/repository-breaker.md §3.8, §3.7.1).
    pub nudge: bool,
}

fn mode_of(raw: Option<&str>) -> RunMode {
    match raw.map(str::trim) {
        Some(run_mode::FULL) => RunMode::Full,
        Some(_) | None => RunMode::Quick,
    }
}

fn mode_str(m: RunMode) -> &'static str {
    match m {
        RunMode::Quick => run_mode::QUICK,
        RunMode::Full => run_mode::FULL,
    }
}

fn tier<'a>(st: &'a mut MaintenanceStatus, mode: &str) -> &'a mut TierStatus {
    if mode == run_mode::FULL {
        st.full.get_or_insert_with(Default::default)
    } else {
        st.quick.get_or_insert_with(Default::default)
    }
}

/// Whether the lease is ours: None until a run has reported an owner.
fn lease(f: &MaintFacts, st: &MaintenanceStatus) -> Option<(bool, String)> {
    let owner = st.ownership.as_ref()?.owner.clone()?;
    Some((owner == f.expected_owner || f.aliases.contains(&owner), owner))
}

pub fn plan(f: &MaintFacts, now: DateTime<Utc>) -> MaintDecision {
    let mut d = plan_inner(f, now);
    // A wedged Job is deleted whatever else happens (again, while its delete has not landed).
    d.delete_jobs = f.jobs.iter().filter(|j| j.wedged().is_some()).map(|j| j.name.clone()).collect();
    if let Some(r) = f.pod_recheck {
        d.requeue = d.requeue.min(r.max(std::time::Duration::from_secs(1)));
    }
    d
}

fn plan_inner(f: &MaintFacts, now: DateTime<Utc>) -> MaintDecision {
    let mut st = f.status.clone();
    let mut d = MaintDecision {
        status: st.clone(),
        conditions: vec![],
        launch: None,
        recorded: vec![],
        invalid_request: None,
        requeue: std::time::Duration::from_secs(300),
        delete_jobs: vec![],
        nudge: false,
    };
    let (quick, full) = match &f.schedules {
        Ok(s) => s,
        Err(m) => {
            d.conditions = trio(Standing::Stalled, reason::INVALID_SCHEDULE, m.clone());
            return d;
        }
    };
    let tiers = Tiers::pinned(quick, full, &mut st, now);
    (d.recorded, d.nudge) = recorded_runs(f, &mut st, now);
    lease_claim(f, &mut st, now);
    d.invalid_request = manual_request(f, &mut st);
    let next_at = [tiers.q.map(|n| n.at), tiers.fl.map(|n| n.at)].into_iter().flatten().min();
    d.requeue = crate::scheduled_run::until(next_at, now);

    // Single flight: one Job per Maintenance (a wedged one is on its way out).
    if let Some(j) = f.jobs.iter().find(|j| j.state == JobState::Active && j.wedged().is_none()) {
        let msg = format!("{} maintenance run {} is in progress", j.mode, j.name);
        return finish(f, d, st, trio(Standing::Ready, reason::MAINTENANCE_SCHEDULED, msg));
    }
    let manual_pending = st.manual_run.as_ref().is_some_and(|m| m.phase == ManualRunPhase::Pending);
    let requested = quick_request(f, &st, now);
    let curing = matches!(&f.gate, Gate::NotReady { phase, .. } if phase == RepositoryPhase::Degraded.as_str())
        && f.repository_gate == MaintenanceGate::Cure;
    if let Some((conditions, requeue)) = gate_decision(f, curing) {
        d.requeue = requeue.unwrap_or(d.requeue);
        d.status = st;
        d.conditions = conditions;
        return d;
    }
    if f.read_only {
        return read_only_skip(f, d, st, &tiers);
    }
    if (manual_pending || tiers.quick_due() || tiers.full_due() || requested.is_some()) && !f.missing_secrets.is_empty()
    {
        d.status = st;
        d.conditions = crate::scheduled_run::waiting_for_secrets(&f.missing_secrets);
        d.requeue = crate::scheduled_run::CREDENTIALS_RECHECK;
        return d;
    }
    d.launch = manual_run(&mut st, now)
        .or_else(|| requested.map(|r| requested_run(&mut st, &tiers, r)))
        .or_else(|| scheduled_run(&mut st, &tiers, curing));
    if let Some(l) = &d.launch {
        let msg = launch_message(f, l, curing, requested.is_some());
        d.requeue = std::time::Duration::from_secs(300);
        return finish(f, d, st, trio(Standing::Ready, reason::MAINTENANCE_SCHEDULED, msg));
    }
    let msg = scheduled_message(&st);
    finish(f, d, st, trio(Standing::Ready, reason::MAINTENANCE_SCHEDULED, msg))
}

/// The two tiers' schedules and their pins at `now`.
struct Tiers<'a> {
    quick: &'a Sched,
    full: &'a Sched,
    q: Option<kopiur_api::domain::cron::NextSlot>,
    fl: Option<kopiur_api::domain::cron::NextSlot>,
    now: DateTime<Utc>,
}

impl<'a> Tiers<'a> {
    /// Pins both tiers in `st`: a valid pin is kept (a due slot stays due), anything else
    /// re-pins after now.
    fn pinned(quick: &'a Sched, full: &'a Sched, st: &mut MaintenanceStatus, now: DateTime<Utc>) -> Self {
        let q = quick.pin(st.quick.as_ref().and_then(|t| t.next_scheduled_at), now);
        let fl = full.pin(st.full.as_ref().and_then(|t| t.next_scheduled_at), now);
        tier(st, run_mode::QUICK).next_scheduled_at = q.map(|n| n.at);
        tier(st, run_mode::FULL).next_scheduled_at = fl.map(|n| n.at);
        Tiers { quick, full, q, fl, now }
    }

    fn quick_due(&self) -> bool {
        self.q.is_some_and(|n| self.now >= n.at)
    }

    fn full_due(&self) -> bool {
        self.fl.is_some_and(|n| self.now >= n.at)
    }

    /// Moves the quick tier's pin past its slot (a run answers it).
    fn advance_quick(&self, st: &mut MaintenanceStatus) {
        let after = self.now.max(self.q.map(|x| x.slot).unwrap_or(self.now));
        tier(st, run_mode::QUICK).next_scheduled_at = self.quick.next_after(after).map(|x| x.at);
    }

    /// Moves the full tier's pin past its slot (a run answers it).
    fn advance_full(&self, st: &mut MaintenanceStatus) {
        let after = self.now.max(self.fl.map(|x| x.slot).unwrap_or(self.now));
        tier(st, run_mode::FULL).next_scheduled_at = self.full.next_after(after).map(|x| x.at);
    }
}

/// Records terminal Jobs once: scheduled runs by the tier's lastHandledAt, manual runs by
/// the manualRun they answer. A Job whose mover pod is wedged is a failed run (its Job is
/// deleted, docs/design/architecture.md §1.4). Also returns whether a failure nudges the
/// repository's reverify.
fn recorded_runs(f: &MaintFacts, st: &mut MaintenanceStatus, now: DateTime<Utc>) -> (Vec<Recorded>, bool) {
    let owned = lease(f, st);
    let (mut recorded, mut nudge) = (vec![], false);
    for j in &f.jobs {
        let ok = match &j.state {
            JobState::Complete { .. } => true,
            JobState::Failed { .. } => false,
            JobState::Active if j.wedged().is_some() => false,
            JobState::Absent | JobState::Active => continue,
        };
        let end = match &j.state {
            JobState::Complete { at } => at.unwrap_or(now),
            JobState::Failed { .. } | JobState::Absent | JobState::Active => now,
        };
        match &j.manual {
            Some(raw) => {
                let Some(m) = st.manual_run.as_mut() else { continue };
                if m.requested_at != *raw || m.phase.is_terminal() {
                    continue;
                }
                m.phase = if ok { ManualRunPhase::Succeeded } else { ManualRunPhase::Failed };
                m.completed_at = Some(end);
            }
            None => {
                let t = tier(st, &j.mode);
                if t.last_handled_at.is_some_and(|h| h >= j.slot_at) {
                    continue;
                }
                t.last_handled_at = Some(j.slot_at);
            }
        }
        let yielded = ok && owned.as_ref().is_some_and(|(mine, _)| !mine);
        let t = tier(st, &j.mode);
        let outcome = match (ok, yielded) {
            (true, false) => {
                t.last_run_at = Some(end);
                t.consecutive_failures = 0;
                "succeeded"
            }
            (true, true) => "yielded",
            (false, _) => {
                t.consecutive_failures += 1;
                // The Maintenance status carries no failure class: only the wedged verdict
                // tells a local failure apart here.
                nudge |=
                    crate::repo_view::failure_nudge(true, j.wedged().is_some(), None, f.reverify_requested_at, now);
                "failed"
            }
        };
        recorded.push(Recorded {
            job: j.name.clone(),
            mode: j.mode.clone(),
            outcome,
            wedged: j.wedged().map(str::to_string),
        });
    }
    (recorded, nudge)
}

/// The lease became ours: stamp when (once per claim); it went to another owner: unstamp.
fn lease_claim(f: &MaintFacts, st: &mut MaintenanceStatus, now: DateTime<Utc>) {
    if let Some(o) = st.ownership.as_mut() {
        match (lease(f, &f.status).map(|(mine, _)| mine), o.claimed_at) {
            (Some(true), None) => o.claimed_at = Some(now),
            (Some(false), Some(_)) => o.claimed_at = None,
            (Some(true), Some(_)) | (Some(false), None) | (None, _) => {}
        }
    }
}

/// A new run-requested value starts exactly one run (a Pending manualRun); a malformed one is
/// returned, to warn about.
fn manual_request(f: &MaintFacts, st: &mut MaintenanceStatus) -> Option<String> {
    match &f.request {
        RunRequest::Requested(raw) if st.manual_run.as_ref().map(|m| &m.requested_at) != Some(raw) => {
            st.manual_run = Some(MaintenanceManualRun {
                requested_at: raw.clone(),
                mode: mode_of(f.mode.as_deref()),
                phase: ManualRunPhase::Pending,
                completed_at: None,
            });
            None
        }
        RunRequest::Malformed(raw) => Some(raw.clone()),
        RunRequest::Requested(_) | RunRequest::None => None,
    }
}

/// A quick run the repository asked for and no quick run has answered yet.
/// Whole seconds: the run's slot annotation carries seconds, and answers the request by it.
fn quick_request(f: &MaintFacts, st: &MaintenanceStatus, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    f.quick_requested_at
        .map(|r| chrono::Timelike::with_nanosecond(&r, 0).unwrap_or(r))
        .filter(|r| st.quick.as_ref().and_then(|t| t.last_handled_at).is_none_or(|h| h < *r))
        .filter(|r| *r <= now)
}

/// Whether the repository gate holds the run: the conditions, and the requeue when parked.
fn gate_decision(f: &MaintFacts, curing: bool) -> Option<(Vec<Cond>, Option<std::time::Duration>)> {
    match &f.gate {
        Gate::Open => None,
        // Degraded for TimedOut: slow, not down. Maintenance is the cure; it runs.
        Gate::NotReady { .. } if curing => None,
        // Parked: nothing runs, the due slot and the request stay pending; the repository
        // watch resumes it, the requeue is only the safety net.
        Gate::NotReady { .. } => Some((
            trio(Standing::Waiting, reason::REPOSITORY_NOT_READY, f.gate.message()),
            Some(std::time::Duration::from_secs(300)),
        )),
        Gate::NamespaceNotAllowed { .. } => {
            Some((trio(Standing::Stalled, reason::NAMESPACE_NOT_ALLOWED, f.gate.message()), None))
        }
    }
}

/// Read-only repositories skip maintenance: due slots re-pin, a request completes.
fn read_only_skip(f: &MaintFacts, mut d: MaintDecision, mut st: MaintenanceStatus, t: &Tiers) -> MaintDecision {
    let now = t.now;
    if t.quick_due() {
        tier(&mut st, run_mode::QUICK).next_scheduled_at = t.quick.next_after(now).map(|n| n.at);
    }
    if t.full_due() {
        tier(&mut st, run_mode::FULL).next_scheduled_at = t.full.next_after(now).map(|n| n.at);
    }
    if let Some(m) = st.manual_run.as_mut().filter(|m| m.phase == ManualRunPhase::Pending) {
        m.phase = ManualRunPhase::Succeeded;
        m.completed_at = Some(now);
    }
    let next = [st.quick.as_ref(), st.full.as_ref()].into_iter().flatten().filter_map(|t| t.next_scheduled_at).min();
    d.requeue = crate::scheduled_run::until(next, now);
    finish(
        f,
        d,
        st,
        trio(Standing::Ready, reason::MAINTENANCE_SCHEDULED, "the repository is ReadOnly; maintenance is skipped"),
    )
}

/// A pending manual run launches (and is Running).
fn manual_run(st: &mut MaintenanceStatus, now: DateTime<Utc>) -> Option<Launch> {
    let m = st.manual_run.as_mut().filter(|m| m.phase == ManualRunPhase::Pending)?;
    m.phase = ManualRunPhase::Running;
    Some(Launch { mode: m.mode, slot: now, at: now, manual: Some(m.requested_at.clone()) })
}

/// The repository asked for a quick run (too many index blobs). It answers a due quick
/// slot too; a due full run waits for the next reconcile (single flight).
fn requested_run(st: &mut MaintenanceStatus, t: &Tiers, r: DateTime<Utc>) -> Launch {
    if t.quick_due() {
        t.advance_quick(st);
    }
    Launch { mode: RunMode::Quick, slot: r, at: r, manual: None }
}

/// The due slot that runs, if any, its clock advanced.
fn scheduled_run(st: &mut MaintenanceStatus, t: &Tiers, curing: bool) -> Option<Launch> {
    let (mode, n) = if curing && t.quick_due() {
        // Curing a slow repository: quick first (it compacts the index); a due full run stays
        // due and runs after it.
        t.advance_quick(st);
        (RunMode::Quick, t.q.expect("quick pin"))
    } else if t.full_due() || t.quick_due() {
        // When both are due, full runs and both clocks advance.
        let (mode, n) = if t.full_due() {
            (RunMode::Full, t.fl.expect("full pin"))
        } else {
            (RunMode::Quick, t.q.expect("quick pin"))
        };
        if t.full_due() {
            t.advance_full(st);
        }
        if t.quick_due() {
            t.advance_quick(st);
        }
        (mode, n)
    } else {
        return None;
    };
    Some(Launch { mode, slot: n.slot, at: n.at, manual: None })
}

/// The Ready message of a launch.
fn launch_message(f: &MaintFacts, l: &Launch, curing: bool, requested: bool) -> String {
    match (curing, requested && l.manual.is_none() && l.mode == RunMode::Quick) {
        (true, _) => format!(
            "{} maintenance run launched while {}: the backend answers but connects time out, and \
             maintenance compacts the index blobs that slow them",
            mode_str(l.mode),
            f.gate.message()
        ),
        (false, true) => {
            "quick maintenance run launched: the repository asked for one (too many index blobs)".to_string()
        }
        (false, false) => format!("{} maintenance run launched", mode_str(l.mode)),
    }
}

/// The lease condition, and the standing that replaces a scheduled Ready when another owner
/// holds the lease: None until a run has reported an owner.
fn lease_decision(f: &MaintFacts, st: &MaintenanceStatus) -> (Option<Cond>, Option<Vec<Cond>>) {
    match lease(f, st) {
        None => (None, None),
        Some((true, owner)) => {
            (Some(lease_cond(true, reason::LEASE_OWNED, format!("kopia maintenance owner is {owner}"))), None)
        }
        Some((false, owner)) => {
            let msg = format!("kopia maintenance is owned by {owner}, not {}", f.expected_owner);
            match f.takeover {
                TakeoverPolicy::Never => (
                    Some(lease_cond(false, reason::LEASE_HELD_BY_OTHER, msg.clone())),
                    Some(trio(Standing::Ready, reason::MAINTENANCE_YIELDING, msg)),
                ),
                TakeoverPolicy::PromptCondition => (
                    Some(lease_cond(false, reason::LEASE_TAKEOVER_PROMPT, msg.clone())),
                    Some(trio(
                        Standing::Stalled,
                        reason::LEASE_TAKEOVER_PROMPT,
                        format!("{msg}; set spec.ownership.takeoverPolicy: Force to take it over"),
                    )),
                ),
                // The next run takes the lease.
                TakeoverPolicy::Force => (Some(lease_cond(false, reason::LEASE_HELD_BY_OTHER, msg)), None),
            }
        }
    }
}

/// The Ready message when nothing runs: the next fire times.
fn scheduled_message(st: &MaintenanceStatus) -> String {
    let at = |t: &Option<TierStatus>| {
        t.as_ref().and_then(|x| x.next_scheduled_at).map(rfc3339).unwrap_or_else(|| "never".into())
    };
    format!("next quick run at {}, next full run at {}", at(&st.quick), at(&st.full))
}

/// The decision with its status and conditions, the lease's added (and its standing in place
/// of a scheduled Ready).
fn finish(f: &MaintFacts, mut d: MaintDecision, st: MaintenanceStatus, mut conds: Vec<Cond>) -> MaintDecision {
    let (lc, override_ready) = lease_decision(f, &st);
    if let (Some(o), true) = (override_ready, conds.first().is_some_and(|c| c.reason == reason::MAINTENANCE_SCHEDULED))
    {
        conds = o;
    }
    conds.extend(lc);
    d.status = st;
    d.conditions = conds;
    d
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

    const OWNER: &str = "kopiur@kopiur.t.r";

    fn facts() -> MaintFacts {
        MaintFacts {
            schedules: Ok((
                Sched::parse(&CronSpec::new("0 */6 * * *"), "u", None).unwrap(),
                Sched::parse(&CronSpec::new("0 3 * * *"), "u", None).unwrap(),
            )),
            status: MaintenanceStatus::default(),
            gate: Gate::Open,
            read_only: false,
            jobs: vec![],
            request: RunRequest::None,
            mode: None,
            expected_owner: OWNER.into(),
            aliases: vec![],
            takeover: TakeoverPolicy::Never,
            missing_secrets: vec![],
            pod_recheck: None,
            reverify_requested_at: None,
            repository_gate: MaintenanceGate::AsGated,
            quick_requested_at: None,
        }
    }

    fn ready(d: &MaintDecision) -> (&str, CondStatus) {
        let c = d.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        (c.reason.as_str(), c.status)
    }

    fn job(name: &str, mode: &str, slot_at: DateTime<Utc>, manual: Option<&str>, state: JobState) -> RunJob {
        RunJob {
            name: name.into(),
            created: slot_at,
            slot_at,
            manual: manual.map(Into::into),
            mode: mode.into(),
            state,
            pods: crate::wedged::Verdict::NotWedged { recheck_at: None },
        }
    }

    #[test]
    fn a_wedged_run_fails_once_and_its_job_is_deleted() {
        let mut f = facts();
        f.status = plan(&f, t(4, 0)).status;
        let l = plan(&f, t(6, 0));
        assert!(l.launch.is_some());
        f.status = l.status;
        let message = "mover pod m-quick-1-x of Job m-quick-1 has been container mover waiting with ImagePullBackOff";
        f.jobs = vec![job("m-quick-1", "quick", t(6, 0), None, JobState::Active)];
        // Not wedged yet: in flight; the check's recheck bounds the requeue.
        f.pod_recheck = Some(std::time::Duration::from_secs(42));
        let d = plan(&f, t(6, 1));
        assert!(d.recorded.is_empty() && d.delete_jobs.is_empty());
        assert!(ready(&d).1 == CondStatus::True && d.conditions[0].message.contains("in progress"));
        assert_eq!(d.requeue, std::time::Duration::from_secs(42));
        // Wedged: recorded as a failed run with its message, the Job deleted, nothing launched.
        f.pod_recheck = None;
        f.jobs[0].pods = crate::wedged::Verdict::Wedged { message: message.into() };
        let d = plan(&f, t(6, 6));
        assert_eq!(
            d.recorded,
            vec![Recorded {
                job: "m-quick-1".into(),
                mode: "quick".into(),
                outcome: "failed",
                wedged: Some(message.into())
            }]
        );
        assert_eq!(d.delete_jobs, vec!["m-quick-1".to_string()]);
        assert!(!d.nudge, "a wedged pod is not the backend's fault");
        let quick = d.status.quick.as_ref().unwrap();
        assert_eq!((quick.consecutive_failures, quick.last_handled_at), (1, Some(t(6, 0))));
        assert_eq!(quick.last_run_at, None, "a wedged run is no successful run");
        assert_eq!(d.launch, None);
        assert_eq!(ready(&d).0, reason::MAINTENANCE_SCHEDULED, "the next slot retries");
        assert!(!d.conditions[0].message.contains("in progress"), "the wedged Job is not in flight");
        // Re-planned with the failure written while the delete has not landed: deleted again,
        // never counted twice.
        f.status = d.status.clone();
        let again = plan(&f, t(6, 7));
        assert!(again.recorded.is_empty());
        assert_eq!(again.delete_jobs, vec!["m-quick-1".to_string()]);
        assert_eq!(again.status.quick.as_ref().unwrap().consecutive_failures, 1);
        // A wedged manual run fails the manual run.
        let mut f = facts();
        f.status = plan(&f, t(4, 0)).status;
        f.request = RunRequest::Requested("2026-07-17T04:30:00Z".into());
        let l = plan(&f, t(4, 30));
        f.status = l.status;
        let mut j = job("m-quick-2", "quick", t(4, 30), Some("2026-07-17T04:30:00Z"), JobState::Active);
        j.pods = crate::wedged::Verdict::Wedged { message: message.into() };
        f.jobs = vec![j];
        let d = plan(&f, t(4, 40));
        let m = d.status.manual_run.as_ref().unwrap();
        assert_eq!((m.phase.clone(), m.completed_at), (ManualRunPhase::Failed, Some(t(4, 40))));
        assert_eq!(d.delete_jobs, vec!["m-quick-2".to_string()]);
        // A wedged verdict on a Job that already finished is ignored.
        f.jobs[0].state = JobState::Complete { at: Some(t(4, 41)) };
        assert!(plan(&f, t(4, 42)).delete_jobs.is_empty());
    }

    #[test]
    fn a_failed_run_nudges_the_repository_once_and_spaced() {
        const REQ: &str = "2026-07-17T04:30:00Z";
        // A manual run launched at 04:30 whose Job ended in `state`.
        let ran = |state: JobState| {
            let mut f = facts();
            f.status = plan(&f, t(4, 0)).status;
            f.request = RunRequest::Requested(REQ.into());
            let l = plan(&f, t(4, 30));
            assert!(l.launch.is_some() && !l.nudge, "a launch never nudges");
            f.status = l.status;
            f.jobs = vec![job("m-quick-3", "quick", t(4, 30), Some(REQ), state)];
            f
        };
        let failed = || JobState::Failed { reason: "BackoffLimitExceeded".into() };
        let mut f = ran(failed());
        let d = plan(&f, t(4, 35));
        assert_eq!(d.recorded.len(), 1);
        assert_eq!(d.recorded[0].outcome, "failed");
        assert!(d.nudge, "a failed maintenance run nudges its repository");
        // Recorded once: the next reconcile neither re-records nor re-nudges.
        f.status = d.status.clone();
        let again = plan(&f, t(4, 36));
        assert!(again.recorded.is_empty() && !again.nudge);
        // Spaced: a stamp under 60 s old is not rewritten.
        let mut g = ran(failed());
        g.reverify_requested_at = Some(t(4, 35) - chrono::Duration::seconds(30));
        assert!(!plan(&g, t(4, 35)).nudge);
        // A successful run never nudges.
        let d = plan(&ran(JobState::Complete { at: Some(t(4, 34)) }), t(4, 35));
        assert_eq!(d.recorded[0].outcome, "succeeded");
        assert!(!d.nudge);
    }

    #[test]
    fn first_reconcile_pins_both_tiers_and_launches_nothing() {
        let d = plan(&facts(), t(1, 0));
        assert_eq!(d.launch, None);
        assert_eq!(d.status.quick.as_ref().unwrap().next_scheduled_at, Some(t(6, 0)));
        assert_eq!(d.status.full.as_ref().unwrap().next_scheduled_at, Some(t(3, 0)));
        assert_eq!(ready(&d), (reason::MAINTENANCE_SCHEDULED, CondStatus::True));
        assert_eq!(d.requeue, std::time::Duration::from_secs(300), "the safety net caps the wait");
        // Re-planning the written status changes nothing (idle objects write nothing).
        let mut f = facts();
        f.status = d.status.clone();
        assert_eq!(plan(&f, t(1, 1)).status, d.status);
    }

    #[test]
    fn due_quick_launches_and_repins() {
        let mut f = facts();
        f.status = plan(&f, t(4, 0)).status;
        let d = plan(&f, t(6, 0));
        assert_eq!(d.launch, Some(Launch { mode: RunMode::Quick, slot: t(6, 0), at: t(6, 0), manual: None }));
        assert_eq!(d.status.quick.as_ref().unwrap().next_scheduled_at, Some(t(12, 0)));
    }

    #[test]
    fn both_due_runs_full_and_advances_both() {
        let mut f = facts();
        f.status = plan(&f, t(1, 0)).status;
        let d = plan(&f, t(7, 0));
        assert_eq!(d.launch.as_ref().unwrap().mode, RunMode::Full);
        assert_eq!(d.status.quick.as_ref().unwrap().next_scheduled_at, Some(t(12, 0)));
        assert_eq!(d.status.full.as_ref().unwrap().next_scheduled_at, Some(t(3, 0) + chrono::Duration::days(1)));
    }

    #[test]
    fn parked_keeps_the_slot_due_and_runs_once_on_recovery() {
        let mut f = facts();
        f.status = plan(&f, t(4, 0)).status;
        f.gate = Gate::NotReady { repository: "t/r".into(), phase: "Degraded".into() };
        f.request = RunRequest::Requested("2026-07-17T06:30:00Z".into());
        let d = plan(&f, t(6, 30));
        assert_eq!(d.launch, None);
        assert_eq!(ready(&d), (reason::REPOSITORY_NOT_READY, CondStatus::False));
        assert_eq!(d.status.quick.as_ref().unwrap().next_scheduled_at, Some(t(6, 0)), "the due slot stays due");
        assert_eq!(d.status.manual_run.as_ref().unwrap().phase, ManualRunPhase::Pending);
        // Recovery: the manual request runs first, then the due slot.
        f.status = d.status;
        f.gate = Gate::Open;
        let d = plan(&f, t(6, 40));
        let l = d.launch.clone().unwrap();
        assert_eq!(l.manual.as_deref(), Some("2026-07-17T06:30:00Z"));
        assert_eq!(d.status.manual_run.as_ref().unwrap().phase, ManualRunPhase::Running);
        f.status = d.status;
        f.jobs = vec![job("m-quick-1", "quick", t(6, 40), l.manual.as_deref(), JobState::Active)];
        let d = plan(&f, t(6, 41));
        assert_eq!(d.launch, None, "single flight");
        f.status = d.status;
        f.jobs[0].state = JobState::Complete { at: Some(t(6, 42)) };
        let d = plan(&f, t(6, 42));
        assert_eq!(d.status.manual_run.as_ref().unwrap().phase, ManualRunPhase::Succeeded);
        assert_eq!(d.recorded.len(), 1);
        let l = d.launch.clone().unwrap();
        assert_eq!((l.mode, l.at, l.manual), (RunMode::Quick, t(6, 0), None), "the parked slot runs once");
        // The next reconcile records nothing twice.
        f.status = d.status;
        f.jobs.push(job("m-quick-2", "quick", t(6, 0), None, JobState::Complete { at: Some(t(6, 44)) }));
        let d = plan(&f, t(6, 45));
        assert_eq!(d.recorded.len(), 1, "only the new Job is recorded");
        assert_eq!(d.status.quick.as_ref().unwrap().last_run_at, Some(t(6, 44)));
        f.status = d.status.clone();
        let d2 = plan(&f, t(6, 46));
        assert!(d2.recorded.is_empty());
        assert_eq!(d2.status, d.status);
    }

    #[test]
    fn manual_full_mode_and_same_value_is_a_noop() {
        let mut f = facts();
        f.request = RunRequest::Requested("2026-07-17T01:00:00Z".into());
        f.mode = Some("full".into());
        let d = plan(&f, t(1, 0));
        assert_eq!(d.launch.as_ref().unwrap().mode, RunMode::Full);
        f.status = d.status;
        f.status.manual_run.as_mut().unwrap().phase = ManualRunPhase::Succeeded;
        assert_eq!(plan(&f, t(1, 5)).launch, None);
    }

    #[test]
    fn malformed_request_is_reported_and_ignored() {
        let mut f = facts();
        f.request = RunRequest::Malformed("tomorrow".into());
        let d = plan(&f, t(1, 0));
        assert_eq!(d.invalid_request.as_deref(), Some("tomorrow"));
        assert!(d.launch.is_none() && d.status.manual_run.is_none());
    }

    #[test]
    fn foreign_owner_yields_under_never_and_stalls_under_prompt() {
        let mut f = facts();
        f.status.ownership =
            Some(kopiur_api::maintenance::OwnershipStatus { owner: Some("user@host".into()), claimed_at: None });
        f.jobs = vec![job("m-quick-1", "quick", t(0, 0), None, JobState::Complete { at: Some(t(0, 1)) })];
        let d = plan(&f, t(1, 0));
        assert_eq!(ready(&d), (reason::MAINTENANCE_YIELDING, CondStatus::True));
        let lease = d.conditions.iter().find(|c| c.type_ == "LeaseOwned").unwrap();
        assert_eq!((lease.reason.as_str(), lease.status), (reason::LEASE_HELD_BY_OTHER, CondStatus::False));
        assert_eq!(d.recorded[0].outcome, "yielded");
        assert_eq!(d.status.ownership.as_ref().unwrap().claimed_at, None);
        assert_eq!(d.status.quick.as_ref().unwrap().last_run_at, None);
        f.takeover = TakeoverPolicy::PromptCondition;
        let d = plan(&f, t(1, 0));
        assert!(d.conditions.iter().any(|c| c.type_ == "Stalled" && c.status == CondStatus::True));
        // An alias counts as ours, and the claim is stamped once.
        f.aliases = vec!["user@host".into()];
        let d = plan(&f, t(1, 0));
        assert_eq!(ready(&d), (reason::MAINTENANCE_SCHEDULED, CondStatus::True));
        assert_eq!(d.status.ownership.as_ref().unwrap().claimed_at, Some(t(1, 0)));
        f.status = d.status;
        assert_eq!(plan(&f, t(2, 0)).status.ownership.as_ref().unwrap().claimed_at, Some(t(1, 0)));
    }

    #[test]
    fn failed_job_counts_and_read_only_skips() {
        let mut f = facts();
        f.jobs =
            vec![job("m-full-1", "full", t(0, 0), None, JobState::Failed { reason: "BackoffLimitExceeded".into() })];
        let d = plan(&f, t(1, 0));
        assert_eq!(d.status.full.as_ref().unwrap().consecutive_failures, 1);
        let mut f = facts();
        f.status = plan(&f, t(1, 0)).status;
        f.read_only = true;
        let d = plan(&f, t(7, 0));
        assert!(d.launch.is_none());
        assert_eq!(d.status.quick.as_ref().unwrap().next_scheduled_at, Some(t(12, 0)));
    }

    /// Issue 19, "slow is not down": Degraded for `TimedOut`, maintenance runs (quick first,
    /// then the due full run); Degraded for anything else it stays parked.
    #[test]
    fn degraded_for_timed_out_runs_quick_first_and_any_other_degraded_parks() {
        let mut f = facts();
        f.schedules = Ok((
            Sched::parse(&CronSpec::new("0 */6 * * *"), "u", None).unwrap(),
            Sched::parse(&CronSpec::new("0 6 * * *"), "u", None).unwrap(),
        ));
        f.status = plan(&f, t(4, 0)).status;
        f.gate = Gate::NotReady { repository: "t/r".into(), phase: "Degraded".into() };

        // Unreachable backend: parked, no Job, both slots stay due.
        let d = plan(&f, t(6, 0));
        assert_eq!(d.launch, None);
        assert_eq!(ready(&d), (reason::REPOSITORY_NOT_READY, CondStatus::False));
        // The same gate with a Failed repository never cures, whatever the fact says.
        let mut failed = facts();
        failed.status = f.status.clone();
        failed.schedules = f.schedules.clone();
        failed.gate = Gate::NotReady { repository: "t/r".into(), phase: "Failed".into() };
        failed.repository_gate = MaintenanceGate::Cure;
        assert_eq!(plan(&failed, t(6, 0)).launch, None);

        // TimedOut: the quick run goes first, the full slot stays due.
        f.repository_gate = MaintenanceGate::Cure;
        let d = plan(&f, t(6, 0));
        let l = d.launch.clone().expect("a run while curing");
        assert_eq!((l.mode, l.at), (RunMode::Quick, t(6, 0)));
        assert!(d.conditions[0].message.contains("maintenance compacts the index blobs"), "{:?}", d.conditions);
        assert_eq!(d.status.full.as_ref().unwrap().next_scheduled_at, Some(t(6, 0)), "full still due");
        f.status = d.status;
        f.jobs = vec![job("m-quick-1", "quick", t(6, 0), None, JobState::Active)];
        assert_eq!(plan(&f, t(6, 1)).launch, None, "single flight");
        f.jobs = vec![job("m-quick-1", "quick", t(6, 0), None, JobState::Complete { at: Some(t(6, 5)) })];
        let d = plan(&f, t(6, 5));
        assert_eq!(d.launch.as_ref().map(|l| l.mode), Some(RunMode::Full), "then the full run");
        assert!(d.status.quick.as_ref().unwrap().last_run_at.is_some());

        // Gate open: today's order (full wins when both are due).
        let mut open = facts();
        open.schedules = f.schedules.clone();
        open.status = plan(&open, t(4, 0)).status;
        assert_eq!(plan(&open, t(6, 0)).launch.map(|l| l.mode), Some(RunMode::Full));
    }

    /// `IndexBlobHealth` asked for a quick run: one quick run now, answered once.
    #[test]
    fn a_repository_request_runs_one_quick_now_and_is_answered_once() {
        let mut f = facts();
        f.status = plan(&f, t(4, 0)).status;
        // Sub-second precision is dropped: the run's slot annotation carries whole seconds.
        f.quick_requested_at = Some(t(4, 10) + chrono::Duration::milliseconds(500));
        assert_eq!(plan(&f, t(4, 9)).launch, None, "a request from the future waits");
        let d = plan(&f, t(4, 11));
        let l = d.launch.clone().expect("the requested quick run");
        assert_eq!((l.mode, l.slot, l.at, l.manual), (RunMode::Quick, t(4, 10), t(4, 10), None));
        assert!(d.conditions[0].message.contains("asked for one"), "{:?}", d.conditions);
        assert_eq!(d.status.quick.as_ref().unwrap().next_scheduled_at, Some(t(6, 0)), "the schedule is untouched");
        f.status = d.status;
        f.jobs = vec![job("m-quick-r", "quick", t(4, 10), None, JobState::Complete { at: Some(t(4, 12)) })];
        let d = plan(&f, t(4, 12));
        assert_eq!(d.launch, None, "answered");
        assert_eq!(d.recorded.len(), 1);
        f.status = d.status;
        f.jobs = vec![];
        assert_eq!(plan(&f, t(5, 0)).launch, None, "answered for good once the Job is gone");
        // A newer request runs again; while parked for an unreachable backend it waits.
        f.quick_requested_at = Some(t(5, 0));
        f.gate = Gate::NotReady { repository: "t/r".into(), phase: "Degraded".into() };
        assert_eq!(plan(&f, t(5, 1)).launch, None, "parked: no Job against an unreachable backend");
        f.gate = Gate::Open;
        assert_eq!(plan(&f, t(5, 1)).launch.map(|l| l.slot), Some(t(5, 0)));
    }

    #[test]
    fn invalid_schedule_stalls() {
        let mut f = facts();
        f.schedules = Err("cron \"x\": bad".into());
        let d = plan(&f, t(1, 0));
        assert_eq!(ready(&d).0, reason::INVALID_SCHEDULE);
        assert!(d.conditions.iter().any(|c| c.type_ == "Stalled" && c.status == CondStatus::True));
    }
}
