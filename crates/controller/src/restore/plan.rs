//! The Restore run path as a pure function. One-shot: the resolution is pinned once; the gate
//! parks (never fails) the Restore while its repository is not Ready, and the wait window for
//! a missing snapshot starts only once the gate has passed.
use chrono::{DateTime, Duration, Utc};
use kopiur_api::names::{condition, reason};
use kopiur_api::restore::{OnMissingSnapshot, RestorePhase};
use kopiur_api::shared::status::Failure;

use super::plan_populate::{before_populate, populating};
use super::populate::{Populate, Prime};
use crate::conditions::{Cond, CondStatus};
use crate::gating::{Gate, Readiness};
use crate::run_job::{JobFacts, JobState};
use crate::wedged::Verdict;

/// How soon an active restore Job is looked at again by default.
pub const AWAIT_REQUEUE_SECONDS: i64 = 300;
/// How soon a wedged Job's delete is checked (and retried while the Job is still there).
pub const WEDGED_DELETE_RETRY_SECONDS: i64 = 30;

/// What the source resolves to right now (only consulted until the pin exists).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Candidate {
    /// A Known manifest (snapshotRef, or the policy's newest matching row).
    Found {
        kopia_snapshot_id: String,
        snapshot: Option<String>,
    },
    /// The mover resolves the identity in-Job.
    Deferred,
    NotFound {
        what: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetState {
    /// `pvcRef` exists, or the `pvc` target exists and was created by this Restore.
    Ready,
    /// A `pvc` target that does not exist yet.
    Create,
    /// A `pvc` target name taken by a PVC this Restore did not create.
    ExistsNotOurs { name: String },
    /// A `pvcRef` target that does not exist.
    Missing { name: String },
    /// `streamExec`.
    NotImplemented { what: &'static str },
    /// `populator`: where the populate of the claim naming this Restore stands.
    Populate(Populate),
}

/// The credentials the restore Job would read, checked in the Job's namespace (the Restore's)
/// before any Job exists (docs/design/mover.md §1.2): a mover reads Secrets only from the namespace it
/// runs in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// Every Secret is there and the password Secret holds its key.
    Found,
    /// Not looked at (no repository known yet, or no launch is possible).
    NotChecked,
    /// Secrets absent from the namespace (names only).
    MissingSecrets { names: Vec<String> },
    /// The password Secret exists but has no such key.
    MissingKey { secret: String, key: String },
    /// The backend's CA bundle ConfigMap (or its key) is absent from the namespace.
    MissingCaBundle { message: String },
}

impl Credentials {
    /// From observation: the Secrets absent from the namespace, and, when the password Secret
    /// is present, whether it holds `key` (None: its data could not be read; the mover's own
    /// error then tells, nothing is refused on a guess).
    pub fn observe(missing: Vec<String>, password: (&str, &str), has_key: Option<bool>) -> Credentials {
        if !missing.is_empty() {
            return Credentials::MissingSecrets { names: missing };
        }
        match has_key {
            Some(false) => Credentials::MissingKey { secret: password.0.to_string(), key: password.1.to_string() },
            Some(true) | None => Credentials::Found,
        }
    }

    /// The reason of a missing credential (`MissingCredentialsSecret` or `MissingCaBundle`).
    pub fn reason(&self) -> &'static str {
        match self {
            Credentials::MissingCaBundle { .. } => reason::MISSING_CA_BUNDLE,
            Credentials::Found
            | Credentials::NotChecked
            | Credentials::MissingSecrets { .. }
            | Credentials::MissingKey { .. } => reason::MISSING_CREDENTIALS_SECRET,
        }
    }

    /// The actionable message of a missing credential, None when nothing is missing.
    pub fn missing_message(&self, ns: &str) -> Option<String> {
        match self {
            Credentials::Found | Credentials::NotChecked => None,
            Credentials::MissingCaBundle { message } => Some(format!(
                "{message}; the restore mover mounts it from namespace {ns}; the Restore starts once it is there"
            )),
            Credentials::MissingSecrets { names } => Some(format!(
                "Secret {} does not exist in namespace {ns}; the restore mover reads the repository's credentials from its own namespace: create a copy there (kubectl get secret <name> -n <repository namespace> -o yaml, change the namespace, apply); the Restore starts by itself once it exists",
                names.join(", ")
            )),
            Credentials::MissingKey { secret, key } => Some(format!(
                "Secret {secret} in namespace {ns} has no key {key} (the repository's encryption.passwordSecretRef.key); add the key; the Restore starts by itself once it is there"
            )),
        }
    }
}

/// The object the source names (docs/design/api-contract.md §9 `ReferentAvailable`): the Snapshot of `snapshotRef`,
/// the SnapshotPolicy of `fromPolicy`. An `identity` source names no object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Referent {
    /// `identity`: nothing referenced, no condition.
    NotApplicable,
    /// The object exists; `what` names it (`Snapshot s1`, `SnapshotPolicy p`).
    Found { what: String },
    /// The object does not exist (yet).
    Missing { what: String },
}

impl Referent {
    /// `ReferentAvailable`: True `RestoreReferentFound`, False `RestoreReferentMissing`.
    pub fn condition(&self) -> Option<Cond> {
        use kopiur_api::names::{condition, reason};
        match self {
            Referent::NotApplicable => None,
            Referent::Found { what } => Some(cond(
                condition::REFERENT_AVAILABLE,
                CondStatus::True,
                reason::RESTORE_REFERENT_FOUND,
                format!("{what} exists"),
            )),
            Referent::Missing { what } => Some(cond(
                condition::REFERENT_AVAILABLE,
                CondStatus::False,
                reason::RESTORE_REFERENT_MISSING,
                format!("{what} does not exist"),
            )),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct RestoreFacts {
    pub phase: Option<RestorePhase>,
    pub gate: Gate,
    pub pinned: bool,
    pub candidate: Candidate,
    pub on_missing: OnMissingSnapshot,
    pub wait_timeout: Option<Duration>,
    pub wait_started_at: Option<DateTime<Utc>>,
    pub target: TargetState,
    /// The restore Job and what the status records of its run.
    pub job: JobFacts,
    pub reverify_requested_at: Option<DateTime<Utc>>,
    /// The mover settings refused (`crate::mover_settings`): reason and message; no Job.
    pub mover_refused: Option<(&'static str, String)>,
    /// What `inheritSecurityContextFrom` gave, when the recipe inherits.
    pub inherited_from: Option<String>,
    /// `status.ownership`, written by a mover that could not chown.
    pub ownership: Option<kopiur_api::restore::RestoreOwnership>,
    /// The Restore's namespace (for messages).
    pub namespace: String,
    /// The credentials Secrets in the Job's namespace, checked before a Job is created.
    pub credentials: Credentials,
    /// Whether the object the source names exists (observed until the resolution is pinned).
    pub referent: Referent,
    /// Why the source or target reaches into another namespace without its grant
    /// (`super::tenancy`): no Job, Stalled `CrossNamespaceReference`.
    pub cross_ns: Option<String>,
    /// The pin says there was no snapshot (`NoSnapshotContinue`): a populate runs no Job.
    pub pinned_empty: bool,
    /// A finished populate's prime PVC still exists (it is deleted).
    pub prime_left: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Idle,
    /// Pin `candidate` now (before anything else happens).
    Pin,
    /// Pin NoSnapshot, create the empty target if needed, and complete.
    CompleteEmpty,
    CreatePvc,
    Launch,
    AwaitJob,
    /// Pin NoSnapshot without completing: a populate still binds an empty volume.
    PinEmpty,
    /// Create the populate's prime PVC.
    CreatePrime,
    /// Point the prime's volume at the claim.
    Rebind {
        volume: String,
    },
    /// Delete the populate's prime PVC.
    DeletePrime,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RestoreDecision {
    pub phase: Option<RestorePhase>,
    pub conditions: Vec<Cond>,
    pub steps: Vec<Step>,
    pub wait_started_at: Option<DateTime<Utc>>,
    pub failure: Option<Failure>,
    pub nudge: bool,
    pub requeue_after: Option<Duration>,
    /// Delete the restore Job (a wedged mover pod); only once the status write landed.
    pub delete_job: bool,
}

use crate::conditions::cond;

pub(super) fn decision(
    phase: RestorePhase,
    ready: CondStatus,
    reason: &str,
    msg: impl Into<String>,
) -> RestoreDecision {
    let m = msg.into();
    let (reconciling, stalled) = match (&phase, ready) {
        (RestorePhase::Failed, _) => (CondStatus::False, CondStatus::True),
        (_, CondStatus::True) => (CondStatus::False, CondStatus::False),
        (_, CondStatus::False | CondStatus::Unknown) => (CondStatus::True, CondStatus::False),
    };
    RestoreDecision {
        phase: Some(phase),
        conditions: vec![
            cond("Ready", ready, reason, m.clone()),
            cond(condition::RECONCILING, reconciling, reason, ""),
            cond(condition::STALLED, stalled, reason, if stalled == CondStatus::True { m } else { String::new() }),
        ],
        steps: vec![],
        wait_started_at: None,
        failure: None,
        nudge: false,
        requeue_after: None,
        delete_job: false,
    }
}

pub(super) fn fail(
    reason: &str,
    message: String,
    nudge: bool,
    f: &RestoreFacts,
    now: DateTime<Utc>,
) -> RestoreDecision {
    let mut d = decision(RestorePhase::Failed, CondStatus::False, reason, message.clone());
    d.failure = Some(f.job.failure.clone().unwrap_or(Failure { message: Some(message), ..Failure::default() }));
    d.nudge = nudge && crate::repo_view::nudge_due(f.reverify_requested_at, now);
    d
}

pub fn plan(f: &RestoreFacts, now: DateTime<Utc>) -> RestoreDecision {
    let mut d = plan_inner(f, now);
    // MoverPermitted (docs/design/api-contract.md §2.6): False while privileged settings wait for the
    // namespace's opt-in, True while a run may start with them.
    let refused = f.mover_refused.as_ref().map(|(r, m)| (*r, m.as_str()));
    let may_start = matches!(f.phase, None | Some(RestorePhase::Pending | RestorePhase::Resolving));
    d.conditions.extend(crate::mover_settings::permitted_condition(refused, may_start));
    d.conditions.extend(crate::mover_settings::inherited_condition(refused, f.inherited_from.as_deref(), may_start));
    // OwnershipPreserved: whether the restored entries kept the owners the snapshot recorded.
    if let Some(o) = &f.ownership {
        let (status, reason) =
            if o.preserved { (CondStatus::True, "OwnersPreserved") } else { (CondStatus::False, "OwnersNotPreserved") };
        d.conditions.push(cond(condition::OWNERSHIP_PRESERVED, status, reason, o.message.clone().unwrap_or_default()));
    }
    if d.wait_started_at.is_none() {
        d.wait_started_at = f.wait_started_at;
    }
    // ReferentAvailable (docs/design/api-contract.md §9): read until the resolution is pinned; one-shot after that
    // (the recorded value stays: a referent deleted after the pin changes nothing).
    if !f.pinned && matches!(f.phase, None | Some(RestorePhase::Pending | RestorePhase::Resolving)) {
        d.conditions.extend(f.referent.condition());
    }
    d
}

fn plan_inner(f: &RestoreFacts, now: DateTime<Utc>) -> RestoreDecision {
    if let Some(d) = phase_decision(f, now) {
        return d;
    }
    if let Some(d) = gate_decision(f) {
        return d;
    }
    let started = f.wait_started_at.unwrap_or(now);
    if let Some(d) = target_decision(f, now).or_else(|| mover_refusal(f)).or_else(|| credentials_hold(f)) {
        return d;
    }
    if !f.pinned
        && let Candidate::NotFound { what } = &f.candidate
    {
        return missing_snapshot(f, what, started, now);
    }
    launch_steps(f, started)
}

/// A Pending Restore that needs a human (`reason`, Stalled), no timer started.
fn stalled(reason: &str, message: String) -> RestoreDecision {
    let mut d = decision(RestorePhase::Pending, CondStatus::False, reason, message.clone());
    d.conditions[1] = cond(condition::RECONCILING, CondStatus::False, reason, "");
    d.conditions[2] = cond(condition::STALLED, CondStatus::True, reason, message);
    d
}

/// The decision a phase past resolution makes by itself (None: Pending, Resolving or new).
fn phase_decision(f: &RestoreFacts, now: DateTime<Utc>) -> Option<RestoreDecision> {
    match &f.phase {
        Some(RestorePhase::Completed) => {
            let mut d = decision(RestorePhase::Completed, CondStatus::True, reason::RESTORE_SUCCEEDED, "restored");
            if f.prime_left {
                // Kubernetes keeps a PVC while any pod that mounted it exists, finished or
                // not: the Job goes with the prime.
                d.steps.push(Step::DeletePrime);
                d.delete_job = f.job.state != JobState::Absent;
            }
            Some(d)
        }
        Some(RestorePhase::Failed) => Some(wedged_cleanup(f)),
        Some(RestorePhase::Unknown(_)) => {
            let mut d = decision(
                RestorePhase::Pending,
                CondStatus::False,
                "UnknownPhase",
                "phase not understood by this version",
            );
            d.phase = None;
            Some(d)
        }
        Some(RestorePhase::Restoring) => Some(restoring(f, now)),
        Some(RestorePhase::Pending | RestorePhase::Resolving) | None => None,
    }
}

/// A failed Restore stays failed with its reason; what it left is cleaned up: a wedged Job
/// whose delete did not land the first time, a populate's prime (and the Job with it).
fn wedged_cleanup(f: &RestoreFacts) -> RestoreDecision {
    let msg = f.job.failure.as_ref().and_then(|x| x.message.clone()).unwrap_or_else(|| "the restore failed".into());
    // The reason recorded with the failure (MoverJobLost, MoverPodWedged, ...) stays.
    let reason = f.job.ready_reason.as_deref().filter(|r| !r.is_empty()).unwrap_or(reason::RESTORE_FAILED);
    let mut d = decision(RestorePhase::Failed, CondStatus::False, reason, msg);
    // A wedged Job whose delete did not land the first time is deleted again.
    d.delete_job = reason == reason::MOVER_POD_WEDGED && f.job.state == JobState::Active;
    if d.delete_job {
        d.requeue_after = Some(Duration::seconds(WEDGED_DELETE_RETRY_SECONDS));
    }
    if f.prime_left {
        d.steps.push(Step::DeletePrime);
        d.delete_job |= f.job.state != JobState::Absent;
    }
    d
}

/// A Restoring Restore follows its populate, then its Job: running, wedged (failed, the Job
/// deleted), failed or lost.
fn restoring(f: &RestoreFacts, now: DateTime<Utc>) -> RestoreDecision {
    if let TargetState::Populate(p) = &f.target
        && let Some(d) = populating(f, p, now)
    {
        return d;
    }
    match (&f.job.state, &f.job.pods) {
        (JobState::Active, Verdict::Wedged { message }) => {
            // Not the backend's fault: no reverify nudge.
            let reason = reason::MOVER_POD_WEDGED;
            let mut d = decision(RestorePhase::Failed, CondStatus::False, reason, message.clone());
            d.failure = Some(Failure { message: Some(message.clone()), ..Failure::default() });
            d.delete_job = true;
            d.requeue_after = Some(Duration::seconds(WEDGED_DELETE_RETRY_SECONDS));
            d
        }
        (JobState::Active | JobState::Complete { .. }, _) => {
            let mut d = decision(RestorePhase::Restoring, CondStatus::False, "Restoring", "the restore Job is running");
            d.steps.push(Step::AwaitJob);
            if matches!(f.job.state, JobState::Complete { .. }) {
                d.requeue_after = Some(Duration::seconds(10));
            } else if let Verdict::NotWedged { recheck_at } = &f.job.pods {
                d.requeue_after = crate::wedged::requeue_after(
                    f.job.pod_startup_deadline,
                    f.job.created,
                    *recheck_at,
                    now,
                    Duration::seconds(AWAIT_REQUEUE_SECONDS),
                );
            }
            d
        }
        (JobState::Failed { reason }, _) => {
            fail(reason::RESTORE_FAILED, format!("the restore Job failed: {reason}"), true, f, now)
        }
        (JobState::Absent, _) => {
            fail(reason::MOVER_JOB_LOST, "the restore Job vanished before reporting".into(), true, f, now)
        }
    }
}

/// Whether the Restore is held before anything is resolved, pinned or run.
fn gate_decision(f: &RestoreFacts) -> Option<RestoreDecision> {
    // Another namespace's data without its grant. Re-checked every minute (a grant may appear).
    if let Some(message) = &f.cross_ns {
        let mut d = stalled(reason::CROSS_NAMESPACE_REFERENCE, message.clone());
        d.requeue_after = Some(Duration::seconds(60));
        return Some(d);
    }
    // G1, the readiness gate (docs/design/repository-breaker.md §4, docs/design/api-contract.md §9): parked while the repository is not Ready and
    // no timer starts. Wait heals by itself (Reconciling); Blocked (Failed, absent, or a namespace
    // not admitted) needs a human (Stalled). Neither is terminal: the repository watch resumes it.
    let mut d = match f.gate.readiness() {
        Readiness::Go => return None,
        Readiness::Wait => {
            decision(RestorePhase::Pending, CondStatus::False, reason::REPOSITORY_NOT_READY, f.gate.message())
        }
        Readiness::Blocked { reason } => stalled(reason, f.gate.message()),
    };
    d.requeue_after = Some(Duration::seconds(300));
    Some(d)
}

/// A target that cannot be restored into (yet), or a populate that waits or is done before
/// its launch.
fn target_decision(f: &RestoreFacts, now: DateTime<Utc>) -> Option<RestoreDecision> {
    match &f.target {
        TargetState::NotImplemented { what } => Some(fail(
            reason::FEATURE_NOT_IMPLEMENTED,
            format!("target.{what} is not implemented in this release"),
            false,
            f,
            now,
        )),
        TargetState::ExistsNotOurs { name } => Some(fail(
            reason::TARGET_EXISTS,
            format!("PVC {name} already exists and was not created by this Restore"),
            false,
            f,
            now,
        )),
        TargetState::Missing { name } => {
            let msg = format!("PVC {name} does not exist");
            let mut d = decision(RestorePhase::Pending, CondStatus::False, "TargetMissing", msg);
            d.requeue_after = Some(Duration::seconds(30));
            Some(d)
        }
        TargetState::Populate(p) => before_populate(f, p, now),
        TargetState::Ready | TargetState::Create => None,
    }
}

/// Mover settings refused: Stalled, re-checked every minute (the namespace's opt-in may appear).
fn mover_refusal(f: &RestoreFacts) -> Option<RestoreDecision> {
    let (reason, message) = f.mover_refused.as_ref()?;
    let mut d = stalled(reason, message.clone());
    d.requeue_after = Some(Duration::seconds(60));
    Some(d)
}

/// The credentials the Job would read (docs/design/mover.md §1.2): a missing Secret or key parks the
/// Restore with CredentialsAvailable=False / MissingCredentialsSecret and no Job, nothing
/// pinned or provisioned; the Secret watch resumes it once the Secret is there. A structural
/// gate (docs/design/api-contract.md §7.4): a human creates the Secret, so Stalled.
fn credentials_hold(f: &RestoreFacts) -> Option<RestoreDecision> {
    if f.job.state != JobState::Absent {
        return None;
    }
    let message = f.credentials.missing_message(&f.namespace)?;
    let reason = f.credentials.reason();
    let mut d = stalled(reason, message.clone());
    d.conditions.push(cond(condition::CREDENTIALS_AVAILABLE, CondStatus::False, reason, message));
    // The Secret watch is the trigger; this is the safety net for a missed event.
    d.requeue_after = Some(Duration::seconds(60));
    Some(d)
}

/// No snapshot to pin: wait out the window, then fail or (onMissingSnapshot: Continue) go on
/// with an empty target.
fn missing_snapshot(f: &RestoreFacts, what: &str, started: DateTime<Utc>, now: DateTime<Utc>) -> RestoreDecision {
    let window_end = f.wait_timeout.map(|w| started + w);
    if let Some(end) = window_end
        && now < end
    {
        let msg = format!("waiting for {what}");
        let mut d = decision(RestorePhase::Resolving, CondStatus::False, reason::WAITING_FOR_SNAPSHOT, msg.clone());
        d.conditions.push(cond(condition::RESOLVED, CondStatus::False, reason::WAITING_FOR_SNAPSHOT, msg));
        d.wait_started_at = Some(started);
        d.requeue_after = Some((end - now).min(Duration::seconds(30)));
        return d;
    }
    let mut d = match f.on_missing {
        OnMissingSnapshot::Fail => {
            let mut d = fail(reason::SNAPSHOT_NOT_FOUND, format!("{what} does not exist"), false, f, now);
            d.conditions.push(cond(
                condition::RESOLVED,
                CondStatus::False,
                reason::SNAPSHOT_NOT_FOUND,
                what.to_string(),
            ));
            d
        }
        OnMissingSnapshot::Continue => no_snapshot_continue(f, what),
    };
    d.wait_started_at = Some(started);
    d
}

/// onMissingSnapshot: Continue. A populate still binds a volume, an empty one (no Job runs):
/// it is not over yet; any other target completes empty.
fn no_snapshot_continue(f: &RestoreFacts, what: &str) -> RestoreDecision {
    let populate = matches!(f.target, TargetState::Populate(_));
    let mut d = if populate {
        let m = "no snapshot: the PVC gets an empty volume";
        decision(RestorePhase::Restoring, CondStatus::False, reason::POPULATING, m)
    } else {
        let m = "no snapshot; target left empty";
        decision(RestorePhase::Completed, CondStatus::True, reason::RESTORE_SUCCEEDED, m)
    };
    d.conditions.push(cond(condition::RESOLVED, CondStatus::True, reason::NO_SNAPSHOT_CONTINUE, what.to_string()));
    d.steps = match &f.target {
        TargetState::Populate(Populate::Priming { prime: Prime::Absent, .. }) => {
            vec![Step::PinEmpty, Step::CreatePrime]
        }
        TargetState::Populate(_) => vec![Step::PinEmpty],
        TargetState::Ready
        | TargetState::Create
        | TargetState::ExistsNotOurs { .. }
        | TargetState::Missing { .. }
        | TargetState::NotImplemented { .. } => vec![Step::CompleteEmpty],
    };
    d.requeue_after = populate.then(|| Duration::seconds(5));
    d
}

/// The way to a running Job: pin, create the target or the prime, launch (or await the Job).
fn launch_steps(f: &RestoreFacts, started: DateTime<Utc>) -> RestoreDecision {
    let mut steps = Vec::new();
    if !f.pinned {
        steps.push(Step::Pin);
    }
    if f.target == TargetState::Create {
        steps.push(Step::CreatePvc);
    }
    if let TargetState::Populate(Populate::Priming { prime: Prime::Absent, .. }) = &f.target {
        steps.push(Step::CreatePrime);
    }
    match &f.job.state {
        JobState::Absent => steps.push(Step::Launch),
        JobState::Active | JobState::Complete { .. } | JobState::Failed { .. } => steps.push(Step::AwaitJob),
    }
    let mut d = decision(RestorePhase::Restoring, CondStatus::False, "Restoring", "the restore Job was created");
    d.conditions.push(cond(condition::RESOLVED, CondStatus::True, reason::SNAPSHOT_RESOLVED, ""));
    if f.credentials == Credentials::Found {
        d.conditions.push(cond(
            condition::CREDENTIALS_AVAILABLE,
            CondStatus::True,
            "Found",
            "the repository's Secrets are in this namespace",
        ));
    }
    d.steps = steps;
    d.wait_started_at = Some(started);
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap()
    }

    fn facts() -> RestoreFacts {
        RestoreFacts {
            phase: None,
            gate: Gate::Open,
            pinned: false,
            candidate: Candidate::Found { kopia_snapshot_id: "a".repeat(32), snapshot: Some("s".into()) },
            on_missing: OnMissingSnapshot::Fail,
            wait_timeout: None,
            wait_started_at: None,
            target: TargetState::Create,
            job: JobFacts::absent(),
            reverify_requested_at: None,
            mover_refused: None,
            inherited_from: None,
            ownership: None,
            namespace: "t".into(),
            credentials: Credentials::Found,
            referent: Referent::Found { what: "Snapshot s".into() },
            cross_ns: None,
            pinned_empty: false,
            prime_left: false,
        }
    }

    /// Issue 31: a Restore reaching into another namespace without its grant runs nothing,
    /// provisions nothing and pins nothing, whatever else is ready; it is Stalled with the
    /// message (which names the grant) and looked at again every minute.
    #[test]
    fn a_cross_namespace_read_without_a_grant_runs_nothing() {
        let mut f = facts();
        f.cross_ns = Some("source.snapshotRef names a Snapshot of namespace t1 ...".into());
        let d = plan(&f, now());
        assert!(d.steps.is_empty(), "{:?}", d.steps);
        assert_eq!(d.phase, Some(RestorePhase::Pending));
        let c = |t: &str| d.conditions.iter().find(|c| c.type_ == t).map(|c| (c.status, c.reason.as_str())).unwrap();
        assert_eq!(c("Ready"), (CondStatus::False, "CrossNamespaceReference"));
        assert_eq!(c("Stalled"), (CondStatus::True, "CrossNamespaceReference"));
        assert_eq!(d.requeue_after, Some(Duration::seconds(60)));
        // Also before the repository gate: a parked repository does not hide the refusal.
        f.gate = Gate::NamespaceNotAllowed { repository: "shared".into() };
        assert_eq!(plan(&f, now()).conditions[0].reason, "CrossNamespaceReference");
    }

    fn referent(d: &RestoreDecision) -> Option<(&str, &str)> {
        d.conditions.iter().find(|c| c.type_ == "ReferentAvailable").map(|c| (c.status.as_str(), c.reason.as_str()))
    }

    /// docs/design/api-contract.md §9: `ReferentAvailable` True `RestoreReferentFound` while the named Snapshot or
    /// policy exists, False `RestoreReferentMissing` while it does not (whatever the gate), none
    /// for an identity source, and left as recorded once the resolution is pinned.
    #[test]
    fn referent_available_follows_the_named_object_until_the_pin() {
        let d = plan(&facts(), now());
        assert_eq!(referent(&d), Some(("True", "RestoreReferentFound")));
        assert_eq!(d.conditions.iter().find(|c| c.type_ == "ReferentAvailable").unwrap().message, "Snapshot s exists");
        let mut f = facts();
        f.referent = Referent::Missing { what: "SnapshotPolicy p".into() };
        f.candidate = Candidate::NotFound { what: "a snapshot of policy p".into() };
        f.wait_timeout = Some(Duration::minutes(5));
        let d = plan(&f, now());
        assert_eq!(d.phase, Some(RestorePhase::Resolving));
        assert_eq!(referent(&d), Some(("False", "RestoreReferentMissing")));
        // Parked at the gate: the referent is still reported.
        f.gate = Gate::NotReady { repository: "t/r".into(), phase: "Degraded".into() };
        assert_eq!(referent(&plan(&f, now())), Some(("False", "RestoreReferentMissing")));
        // An identity source names no object.
        let mut f = facts();
        f.referent = Referent::NotApplicable;
        f.candidate = Candidate::Deferred;
        assert_eq!(referent(&plan(&f, now())), None);
        // Pinned and running: not re-read.
        let mut f = restoring();
        f.referent = Referent::Missing { what: "Snapshot s".into() };
        assert_eq!(referent(&plan(&f, now())), None);
    }

    fn reason(d: &RestoreDecision) -> &str {
        &d.conditions[0].reason
    }

    #[test]
    fn pins_creates_the_pvc_and_launches() {
        let d = plan(&facts(), now());
        assert_eq!(d.steps, vec![Step::Pin, Step::CreatePvc, Step::Launch]);
        assert_eq!(d.phase, Some(RestorePhase::Restoring));
        assert_eq!(d.wait_started_at, Some(now()));
    }

    #[test]
    fn parks_while_not_ready_without_starting_the_wait() {
        let mut f = facts();
        f.gate = Gate::NotReady { repository: "t/r".into(), phase: "Degraded".into() };
        f.candidate = Candidate::NotFound { what: "policy p".into() };
        f.wait_timeout = Some(Duration::minutes(1));
        let d = plan(&f, now() + Duration::hours(5));
        assert_eq!(d.phase, Some(RestorePhase::Pending));
        assert_eq!(reason(&d), "RepositoryNotReady");
        assert_eq!(d.wait_started_at, None, "waitStartedAt stays unset while parked");
        assert!(d.steps.is_empty());
    }

    #[test]
    fn missing_snapshot_waits_then_fails_or_continues() {
        let mut f = facts();
        f.candidate = Candidate::NotFound { what: "Snapshot s".into() };
        f.wait_timeout = Some(Duration::minutes(5));
        let d = plan(&f, now());
        assert_eq!(reason(&d), "WaitingForSnapshot");
        f.wait_started_at = d.wait_started_at;
        let d = plan(&f, now() + Duration::minutes(5));
        assert_eq!(d.phase, Some(RestorePhase::Failed));
        assert_eq!(reason(&d), "SnapshotNotFound");
        assert!(!d.nudge);
        f.on_missing = OnMissingSnapshot::Continue;
        let d = plan(&f, now() + Duration::minutes(5));
        assert_eq!(d.phase, Some(RestorePhase::Completed));
        assert_eq!(d.steps, vec![Step::CompleteEmpty]);
    }

    #[test]
    fn target_taken_fails_and_job_failure_nudges() {
        let mut f = facts();
        f.target = TargetState::ExistsNotOurs { name: "x".into() };
        assert_eq!(reason(&plan(&f, now())), "TargetExists");
        let mut f = facts();
        f.phase = Some(RestorePhase::Restoring);
        f.pinned = true;
        f.job.state = JobState::Failed { reason: "BackoffLimitExceeded".into() };
        let d = plan(&f, now());
        assert_eq!(d.phase, Some(RestorePhase::Failed));
        assert!(d.nudge);
    }

    fn restoring() -> RestoreFacts {
        let mut f = facts();
        f.phase = Some(RestorePhase::Restoring);
        f.pinned = true;
        f.target = TargetState::Ready;
        f.job.state = JobState::Active;
        f
    }

    #[test]
    fn young_restore_job_requeues_for_the_pod_check() {
        let mut f = restoring();
        f.job.created = Some(now());
        let d = plan(&f, now() + Duration::seconds(100));
        assert_eq!(reason(&d), "Restoring");
        assert_eq!(d.steps, vec![Step::AwaitJob]);
        assert_eq!(d.requeue_after, Some(Duration::seconds(201)), "just after creation + deadline");
        assert!(!d.delete_job);
        // An unstarted pod past the deadline: the verdict's recheck.
        f.job.pods = Verdict::NotWedged { recheck_at: Some(now() + Duration::seconds(460)) };
        assert_eq!(plan(&f, now() + Duration::seconds(400)).requeue_after, Some(Duration::seconds(60)));
        // Nothing to look at again: the default await requeue (the reconcile's 300 s).
        f.job.pods = Verdict::NotWedged { recheck_at: None };
        assert_eq!(plan(&f, now() + Duration::seconds(400)).requeue_after, None);
        // A long deadline is capped at the await requeue.
        f.job.pod_startup_deadline = Duration::seconds(3600);
        assert_eq!(plan(&f, now()).requeue_after, Some(Duration::seconds(AWAIT_REQUEUE_SECONDS)));
    }

    #[test]
    fn wedged_restore_pod_fails_deletes_the_job_and_does_not_nudge() {
        let mut f = restoring();
        let message =
            "mover pod x-restore-1 of Job x-restore has been container mover waiting with ErrImagePull for 301s";
        f.job.created = Some(now() - Duration::seconds(301));
        f.job.pods = Verdict::Wedged { message: message.into() };
        // A failure the mover left on an earlier pod is not the story of this one.
        f.job.failure = Some(Failure { message: Some("an earlier pod failed".into()), ..Failure::default() });
        let d = plan(&f, now());
        assert_eq!(d.phase, Some(RestorePhase::Failed));
        assert_eq!(reason(&d), "MoverPodWedged");
        assert_eq!(d.conditions[0].message, message);
        assert!(d.conditions.iter().any(|c| c.type_ == "Stalled" && c.status == CondStatus::True));
        assert_eq!(d.failure.as_ref().and_then(|x| x.message.as_deref()), Some(message));
        assert!(d.delete_job);
        assert!(!d.nudge, "a wedged pod is not a backend failure");
        assert_eq!(d.requeue_after, Some(Duration::seconds(WEDGED_DELETE_RETRY_SECONDS)));
        // A Complete Job is never taken for a wedged one.
        f.job.state = JobState::Complete { at: None };
        let d = plan(&f, now());
        assert_eq!(reason(&d), "Restoring");
        assert!(!d.delete_job);
    }

    #[test]
    fn lost_owners_are_a_condition_of_a_completed_restore() {
        let mut f = facts();
        f.phase = Some(RestorePhase::Completed);
        assert!(plan(&f, now()).conditions.iter().all(|c| c.type_ != "OwnershipPreserved"));
        f.ownership = Some(kopiur_api::restore::RestoreOwnership {
            preserved: false,
            not_preserved_count: 2,
            directories_checked: 2,
            complete: true,
            message: Some("2 restored entries could not be given the owner recorded in the snapshot".into()),
        });
        let d = plan(&f, now());
        assert_eq!(d.phase, Some(RestorePhase::Completed), "still completed: the bytes are there");
        let c = d.conditions.iter().find(|c| c.type_ == "OwnershipPreserved").expect("OwnershipPreserved");
        assert_eq!((c.status, c.reason.as_str()), (CondStatus::False, "OwnersNotPreserved"));
        assert!(c.message.starts_with("2 restored entries"));
    }

    #[test]
    fn a_failed_restore_keeps_its_reason_and_deletes_a_lingering_wedged_job_only() {
        let mut f = restoring();
        f.phase = Some(RestorePhase::Failed);
        f.job.failure = Some(Failure { message: Some("wedged".into()), ..Failure::default() });
        f.job.ready_reason = Some("MoverPodWedged".into());
        let d = plan(&f, now());
        assert_eq!(reason(&d), "MoverPodWedged", "the recorded reason stays");
        assert!(d.delete_job, "the delete is retried until the Job is gone");
        assert_eq!(d.requeue_after, Some(Duration::seconds(WEDGED_DELETE_RETRY_SECONDS)));
        f.job.state = JobState::Absent;
        let gone = plan(&f, now());
        assert!(!gone.delete_job);
        assert_eq!(gone.requeue_after, None);
        // Other failures keep their reason and never delete the Job.
        f.job.state = JobState::Active;
        f.job.ready_reason = Some("MoverJobLost".into());
        let d = plan(&f, now());
        assert_eq!(reason(&d), "MoverJobLost");
        assert!(!d.delete_job);
        // Written by an older version without a reason: RestoreFailed.
        f.job.ready_reason = None;
        assert_eq!(reason(&plan(&f, now())), "RestoreFailed");
    }

    #[test]
    fn missing_credentials_park_stalled_with_no_job_then_launch_once_found() {
        for (creds, needle) in [
            (
                Credentials::observe(vec!["kopia".into()], ("kopia", "KOPIA_PASSWORD"), None),
                "Secret kopia does not exist in namespace t",
            ),
            (
                Credentials::observe(vec![], ("kopia", "KOPIA_PASSWORD"), Some(false)),
                "Secret kopia in namespace t has no key KOPIA_PASSWORD",
            ),
        ] {
            let mut f = facts();
            f.credentials = creds;
            let d = plan(&f, now());
            assert_eq!(d.phase, Some(RestorePhase::Pending));
            assert!(d.steps.is_empty(), "no pin, no PVC, no Job: {:?}", d.steps);
            assert_eq!(reason(&d), "MissingCredentialsSecret");
            assert!(d.conditions[0].message.contains(needle), "{}", d.conditions[0].message);
            let st = |t: &str| d.conditions.iter().find(|c| c.type_ == t).map(|c| c.status);
            assert_eq!(st("Stalled"), Some(CondStatus::True));
            assert_eq!(st("Reconciling"), Some(CondStatus::False));
            let ca = d.conditions.iter().find(|c| c.type_ == "CredentialsAvailable").expect("CredentialsAvailable");
            assert_eq!((ca.status, ca.reason.as_str()), (CondStatus::False, "MissingCredentialsSecret"));
            assert!(d.requeue_after.is_some(), "a safety requeue besides the Secret watch");
        }
        // The Secret appears: the same Restore launches, CredentialsAvailable=True/Found.
        let f = facts();
        let d = plan(&f, now());
        assert_eq!(d.steps, vec![Step::Pin, Step::CreatePvc, Step::Launch]);
        let ca = d.conditions.iter().find(|c| c.type_ == "CredentialsAvailable").expect("CredentialsAvailable");
        assert_eq!((ca.status, ca.reason.as_str()), (CondStatus::True, "Found"));
        // Unreadable data is no reason to refuse (the mover's error tells).
        assert_eq!(Credentials::observe(vec![], ("kopia", "k"), None), Credentials::Found);
        // A missing CA bundle in the namespace: CredentialsAvailable=False / MissingCaBundle.
        let mut f = facts();
        f.credentials = Credentials::MissingCaBundle { message: "ConfigMap ca does not exist in namespace t".into() };
        let d = plan(&f, now());
        assert!(d.steps.is_empty());
        assert_eq!(reason(&d), "MissingCaBundle");
        let ca = d.conditions.iter().find(|c| c.type_ == "CredentialsAvailable").expect("CredentialsAvailable");
        assert_eq!((ca.status, ca.reason.as_str()), (CondStatus::False, "MissingCaBundle"));
        assert!(ca.message.starts_with("ConfigMap ca does not exist"), "{}", ca.message);
        // A Job already running is never second-guessed.
        let mut f = restoring();
        f.credentials = Credentials::MissingSecrets { names: vec!["kopia".into()] };
        assert_eq!(reason(&plan(&f, now())), "Restoring");
    }

    #[test]
    fn blocked_repository_is_stalled_and_wait_is_reconciling() {
        let st = |d: &RestoreDecision, t: &str| d.conditions.iter().find(|c| c.type_ == t).map(|c| c.status);
        let mut f = facts();
        f.gate = Gate::NotReady { repository: "t/gone".into(), phase: crate::gating::ABSENT.into() };
        let d = plan(&f, now());
        assert_eq!((d.phase.clone(), reason(&d)), (Some(RestorePhase::Pending), "RepositoryNotFound"));
        assert_eq!((st(&d, "Stalled"), st(&d, "Reconciling")), (Some(CondStatus::True), Some(CondStatus::False)));
        assert!(d.steps.is_empty() && d.wait_started_at.is_none());
        f.gate = Gate::NotReady { repository: "t/r".into(), phase: "Failed".into() };
        let d = plan(&f, now());
        assert_eq!(reason(&d), "RepositoryNotReady");
        assert_eq!((st(&d, "Stalled"), st(&d, "Reconciling")), (Some(CondStatus::True), Some(CondStatus::False)));
        f.gate = Gate::NotReady { repository: "t/r".into(), phase: "Degraded".into() };
        let d = plan(&f, now());
        assert_eq!(reason(&d), "RepositoryNotReady");
        assert_eq!((st(&d, "Stalled"), st(&d, "Reconciling")), (Some(CondStatus::False), Some(CondStatus::True)));
        f.gate = Gate::NamespaceNotAllowed { repository: "shared".into() };
        let d = plan(&f, now());
        assert_eq!(reason(&d), "NamespaceNotAllowed");
        assert_eq!((st(&d, "Stalled"), st(&d, "Reconciling")), (Some(CondStatus::True), Some(CondStatus::False)));
    }

    #[test]
    fn one_shot() {
        let mut f = facts();
        f.phase = Some(RestorePhase::Completed);
        let d = plan(&f, now());
        assert!(d.steps.is_empty());
        assert_eq!(reason(&d), "RestoreSucceeded");
    }

    #[test]
    fn refused_mover_settings_park_stalled_without_a_job() {
        let mut f = facts();
        f.mover_refused = Some(("PrivilegedMoverNotPermitted", "the mover would be privileged (runAsUser: 0)".into()));
        let d = plan(&f, now());
        assert_eq!(d.phase, Some(RestorePhase::Pending));
        assert!(d.steps.is_empty(), "no Job: {:?}", d.steps);
        assert_eq!(d.conditions[0].reason, "PrivilegedMoverNotPermitted");
        assert_eq!((d.conditions[2].type_, d.conditions[2].status), ("Stalled", CondStatus::True));
        assert!(d.conditions[2].message.contains("runAsUser: 0"));
        let mp = d.conditions.iter().find(|c| c.type_ == "MoverPermitted").expect("MoverPermitted");
        assert_eq!((mp.status, mp.reason.as_str()), (CondStatus::False, "PrivilegedMoverNotPermitted"));
    }

    fn priming(prime: Prime) -> TargetState {
        TargetState::Populate(Populate::Priming { claim: "data".into(), claim_uid: "c-1".into(), prime })
    }

    /// docs/controller.md "Volume populator": before its launch a populate waits for a claim
    /// and (WaitForFirstConsumer) its node, completes at once for a claim bound already
    /// (TargetAlreadyBound: nothing is written), and otherwise creates the prime and launches.
    #[test]
    fn a_populate_waits_for_its_claim_and_never_writes_to_a_bound_one() {
        let mut f = facts();
        f.target = TargetState::Populate(Populate::NoClaim);
        let d = plan(&f, now());
        assert_eq!((d.phase.clone(), reason(&d)), (Some(RestorePhase::Pending), "WaitingForClaim"));
        assert!(d.steps.is_empty());
        f.target = TargetState::Populate(Populate::AwaitingConsumer { claim: "data".into(), class: "csi".into() });
        let d = plan(&f, now());
        assert_eq!(reason(&d), "WaitingForConsumer");
        assert!(d.conditions[0].message.contains("WaitForFirstConsumer"), "{}", d.conditions[0].message);
        assert!(d.steps.is_empty());
        f.target = TargetState::Populate(Populate::AlreadyBound { claim: "data".into(), volume: "pv-1".into() });
        let d = plan(&f, now());
        assert_eq!((d.phase.clone(), reason(&d)), (Some(RestorePhase::Completed), "TargetAlreadyBound"));
        assert!(d.steps.is_empty(), "nothing written to a bound claim: {:?}", d.steps);
        assert!(d.conditions.iter().any(|c| c.type_ == "TargetAlreadyBound" && c.status == CondStatus::True));
        f.target = priming(Prime::Foreign);
        assert_eq!(reason(&plan(&f, now())), "WaitingForPrime");
        f.target = TargetState::Populate(Populate::Refused { message: "PVC data names no storageClassName".into() });
        let d = plan(&f, now());
        assert_eq!((d.phase.clone(), reason(&d)), (Some(RestorePhase::Failed), "PopulateRefused"));
        f.target = priming(Prime::Absent);
        let d = plan(&f, now());
        assert_eq!(d.steps, vec![Step::Pin, Step::CreatePrime, Step::Launch]);
        f.target = priming(Prime::Pending);
        assert_eq!(plan(&f, now()).steps, vec![Step::Pin, Step::Launch]);
        // The gate still comes first: a degraded repository parks the populate.
        f.gate = Gate::NotReady { repository: "t/r".into(), phase: "Degraded".into() };
        assert_eq!(reason(&plan(&f, now())), "RepositoryNotReady");
    }

    /// A running populate binds only once the data is in the prime, completes only once the
    /// claim is bound to the populated volume (deleting the prime then), and discards the
    /// prime when the claim went away.
    #[test]
    fn a_running_populate_binds_after_the_restore_and_discards_the_prime_when_the_claim_went_away() {
        let mut f = facts();
        f.phase = Some(RestorePhase::Restoring);
        f.pinned = true;
        f.job.state = JobState::Active;
        f.target = priming(Prime::Bound { volume: "pv-1".into() });
        let d = plan(&f, now());
        assert_eq!((reason(&d), d.steps.clone()), ("Restoring", vec![Step::AwaitJob]), "no bind while the Job runs");
        f.job.state = JobState::Complete { at: None };
        let d = plan(&f, now());
        assert_eq!((reason(&d), d.steps.clone()), ("Binding", vec![Step::Rebind { volume: "pv-1".into() }]));
        assert_eq!(d.phase, Some(RestorePhase::Restoring));
        f.target = TargetState::Populate(Populate::Populated {
            claim: "data".into(),
            volume: "pv-1".into(),
            prime_left: true,
        });
        let d = plan(&f, now());
        assert_eq!((d.phase.clone(), reason(&d)), (Some(RestorePhase::Completed), "RestoreSucceeded"));
        assert_eq!(d.steps, vec![Step::DeletePrime]);
        assert!(d.delete_job, "the Job's finished pod holds the prime");
        // The claim deleted mid-run: Failed, the Job stopped, the prime deleted.
        f.job.state = JobState::Active;
        f.target = TargetState::Populate(Populate::ClaimGone { claim: "data".into() });
        let d = plan(&f, now());
        assert_eq!((d.phase.clone(), reason(&d)), (Some(RestorePhase::Failed), "PopulateTargetGone"));
        assert_eq!(d.steps, vec![Step::DeletePrime]);
        assert!(d.delete_job);
        // The Job complete but the prime gone: the data is lost, never a bind of anything else.
        f.job.state = JobState::Complete { at: None };
        f.target = priming(Prime::Absent);
        let d = plan(&f, now());
        assert_eq!(reason(&d), "PopulatePrimeLost");
        assert!(!d.steps.iter().any(|s| matches!(s, Step::Rebind { .. })));
        // Finished phases delete a prime left behind.
        for phase in [RestorePhase::Completed, RestorePhase::Failed] {
            let mut g = facts();
            g.phase = Some(phase);
            g.prime_left = true;
            g.job.state = JobState::Complete { at: None };
            let d = plan(&g, now());
            assert_eq!(d.steps, vec![Step::DeletePrime]);
            assert!(d.delete_job, "the Job's finished pod holds the prime");
        }
    }

    /// `NoSnapshotContinue` on a populate: no Job, an empty prime that is bound to the claim.
    #[test]
    fn a_populate_with_no_snapshot_binds_an_empty_volume_without_a_job() {
        let mut f = facts();
        f.candidate = Candidate::NotFound { what: "a snapshot of policy p".into() };
        f.on_missing = OnMissingSnapshot::Continue;
        f.target = priming(Prime::Absent);
        let d = plan(&f, now());
        assert_eq!((d.phase.clone(), reason(&d)), (Some(RestorePhase::Restoring), "Populating"));
        assert_eq!(d.steps, vec![Step::PinEmpty, Step::CreatePrime]);
        f.phase = Some(RestorePhase::Restoring);
        f.pinned = true;
        f.pinned_empty = true;
        f.target = priming(Prime::Pending);
        let d = plan(&f, now());
        assert_eq!((reason(&d), d.steps.clone()), ("Binding", vec![]), "no Job, so no MoverJobLost");
        f.target = priming(Prime::Bound { volume: "pv-2".into() });
        assert_eq!(plan(&f, now()).steps, vec![Step::Rebind { volume: "pv-2".into() }]);
    }
}
