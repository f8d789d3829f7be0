//! `spec.pin` (docs/design/api-contract.md §7.1, §7.2 `status.pinned`, §7.4 `Pinned`): a Snapshot that owns a
//! kopia manifest gets one `<name>-pin` Job (op label `pin`, annotation `pin-target`) that
//! connects to its repository once and runs `kopia snapshot pin <id> --add kopiur` (or
//! `--remove kopiur` when `spec.pin` goes back to false). The pin name is
//! `kopiur_mover::ops::pin::PIN_NAME` (`kopiur`): kopiur only ever adds or removes its own pin.
//!
//! `plan` is pure: it reads the desired pin (`spec.pin`), the applied one (`status.pinned`), the
//! manifest, the repository gate and the pin Job, and decides the step and the status:
//!
//! | state | `Pinned` | step |
//! |---|---|---|
//! | no manifest yet (Pending, Running) and `pin: true` | False `PinJobRunning` (waits for the backup) | — |
//! | no manifest (Failed, Unchanged) | absent | — |
//! | desired = applied, no Job to act on | True `Pinned` when pinned; absent when not | — |
//! | desired ≠ applied, repository not Ready or credentials missing | False `PinJobRunning` (the message says what it waits for) | — (parks; the repository watch resumes it) |
//! | desired ≠ applied, gate open | False `PinJobRunning` | create the Job |
//! | Job active | False `PinJobRunning` | — |
//! | Job complete | `status.pinned` = its target; as the first rows | — |
//! | Job failed | False `PinJobFailed`, the mover's message (`status.failure` with `op: pin`), else the Job's reason | — |
//! | a finished Job whose target is no longer desired | False `PinJobRunning` | delete it (then create the new one) |
//!
//! Retries follow the Job rules every mover Job uses (docs/design/architecture.md §1.4): the Snapshot's
//! `failurePolicy.backoffLimit` (default 2) retries a retryable failure in new pods, exit 3
//! (non-retryable) fails the Job at once. A failed pin Job is kept for its TTL (3600 s, the
//! `moverDefaults.ttlSecondsAfterFinished` override included) so its pods can be read; once it is
//! gone the pin is attempted again, and a `spec.pin` edit replaces it at once. The pin never
//! launches the backup Job: a terminal Snapshot stays terminal.
use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use k8s_openapi::api::batch::v1::Job;
use kopiur_api::Snapshot;
use kopiur_api::names::{annotation, condition, reason};
use kopiur_api::shared::status::Failure;
use kopiur_api::snapshot::{SnapshotPhase, SnapshotStatus};
use kopiur_mover::job::{JobInput, build_job};
use kopiur_mover::ops::pin::{PIN_NAME, SnapshotPinOp};
use kopiur_mover::workspec::{
    DEFAULT_COMMAND_TIMEOUT_SECONDS, DEFAULT_HEARTBEAT_SECONDS, Operation, SCHEMA_VERSION, WorkSpec,
};
use kube::{Resource, ResourceExt};

use super::job::{BuildError, backend_mounts, repository_info};
use crate::conditions::{Cond, CondStatus};
use crate::mover_job::{owner_of, secrets};
use crate::repo_view::RepoView;
use crate::run_job::JobState;

/// How often a pin parked at the repository gate is looked at again (the repository watch
/// normally resumes it first).
pub const PARKED_RECHECK_SECONDS: i64 = 30;

/// `<snapshot>-pin` (hashed to 63 characters like every Job name).
pub fn job_name(snapshot: &str) -> String {
    kopiur_mover::job::job_name(&format!("{snapshot}-pin"))
}

/// The pin Job as the controller sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PinJob {
    Absent,
    /// Being deleted (a replaced Job): wait until it is gone.
    Deleting,
    Active {
        add: bool,
    },
    Complete {
        add: bool,
    },
    Failed {
        add: bool,
        reason: String,
    },
}

impl PinJob {
    /// The pin Job's state from the Job object (its `pin-target` annotation says which way).
    pub fn of(job: Option<&Job>) -> PinJob {
        let Some(j) = job else { return PinJob::Absent };
        if j.metadata.deletion_timestamp.is_some() {
            return PinJob::Deleting;
        }
        let add = j.annotations().get(annotation::PIN_TARGET).map(String::as_str) != Some("false");
        match crate::run_job::job_state(Some(j)) {
            JobState::Absent => PinJob::Absent,
            JobState::Active => PinJob::Active { add },
            JobState::Complete { .. } => PinJob::Complete { add },
            JobState::Failed { reason } => PinJob::Failed { add, reason },
        }
    }
}

/// Everything `plan` reads.
#[derive(Clone, Debug, PartialEq)]
pub struct PinFacts {
    /// `spec.pin`.
    pub desired: bool,
    /// `status.pinned` as stored.
    pub stored: Option<bool>,
    pub phase: Option<SnapshotPhase>,
    /// `status.snapshot.kopiaSnapshotID`.
    pub kopia_id: Option<String>,
    /// The repository gate: `Err(message)` while it is not Ready (or not admitted).
    pub gate: Result<(), String>,
    /// Credential Secrets missing in the Job's namespace.
    pub missing_secrets: Vec<String>,
    pub job: PinJob,
    pub job_name: String,
    /// `status.failure` when the pin wrote it (`op: pin`).
    pub failure: Option<Failure>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinStep {
    Idle,
    Launch { add: bool },
    DeleteJob,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PinDecision {
    pub step: PinStep,
    /// `status.pinned` to write (None leaves it absent: a Snapshot never pinned shows nothing).
    pub pinned: Option<bool>,
    /// The `Pinned` condition; None removes it.
    pub condition: Option<Cond>,
    /// Drop a `status.failure` the pin wrote (the pin now succeeded).
    pub clear_failure: bool,
    pub requeue_after: Option<Duration>,
}

fn running(message: String) -> Option<Cond> {
    Some(Cond { type_: condition::PINNED, status: CondStatus::False, reason: reason::PIN_JOB_RUNNING.into(), message })
}

fn verb(add: bool) -> &'static str {
    if add { "--add" } else { "--remove" }
}

pub fn plan(f: &PinFacts) -> PinDecision {
    let manifest = f
        .kopia_id
        .as_deref()
        .filter(|id| !id.is_empty())
        .filter(|_| matches!(f.phase, Some(SnapshotPhase::Succeeded) | Some(SnapshotPhase::Discovered)));
    let mut applied = f.stored.unwrap_or(false);
    let mut d =
        PinDecision { step: PinStep::Idle, pinned: None, condition: None, clear_failure: false, requeue_after: None };
    let Some(id) = manifest else {
        // Nothing to pin yet: a run in flight pins once it has succeeded; a run that wrote no
        // manifest (Failed, Unchanged) has nothing to pin.
        let in_flight = !f.phase.as_ref().is_some_and(SnapshotPhase::is_terminal);
        if f.desired && in_flight {
            d.condition = running("the kopia snapshot is pinned by a pin Job once the backup has succeeded".into());
        }
        d.pinned = f.stored;
        return d;
    };
    let command = |add: bool| format!("kopia snapshot pin {id} {} {PIN_NAME}", verb(add));
    let settled = |applied: bool| {
        applied.then(|| Cond {
            type_: condition::PINNED,
            status: CondStatus::True,
            reason: reason::PINNED.into(),
            message: format!("kopia snapshot {id} carries the pin {PIN_NAME}; retention never prunes it"),
        })
    };
    let name = &f.job_name;
    match &f.job {
        PinJob::Deleting => {
            d.condition = running(format!("replacing the finished pin Job {name} to run `{}`", command(f.desired)));
        }
        PinJob::Active { add } => {
            d.condition = running(format!("the pin Job {name} is running `{}`", command(*add)));
        }
        PinJob::Complete { add } | PinJob::Failed { add, .. } if *add != f.desired => {
            if let PinJob::Complete { add } = &f.job {
                applied = *add;
            }
            d.step = PinStep::DeleteJob;
            // A failed Job whose target is no longer wanted may leave nothing to do (a failed
            // add, then `pin: false`); it is deleted all the same, so a later edit retries afresh.
            d.condition = if applied == f.desired {
                settled(applied)
            } else {
                running(format!("replacing the finished pin Job {name} to run `{}`", command(f.desired)))
            };
        }
        PinJob::Complete { add } => {
            applied = *add;
            d.clear_failure = true;
            d.condition = settled(applied);
        }
        PinJob::Failed { add, reason: why } => d.condition = failed(f, why, &command(*add)),
        PinJob::Absent if applied == f.desired => {
            d.clear_failure = true;
            d.condition = settled(applied);
        }
        PinJob::Absent => launch_or_park(f, &mut d, &command(f.desired)),
    }
    // `status.pinned` is written once a pin was asked for or applied; never-pinned Snapshots
    // keep it absent.
    d.pinned = (f.stored.is_some() || f.desired || applied).then_some(applied);
    d
}

/// `Pinned=False PinJobFailed`: the mover's message (`status.failure` with `op: pin`), else the
/// Job's reason.
fn failed(f: &PinFacts, why: &str, command: &str) -> Option<Cond> {
    let name = &f.job_name;
    let message = match f.failure.as_ref().and_then(|x| x.message.clone()).filter(|m| !m.is_empty()) {
        Some(m) => format!("the pin Job {name} failed ({command}): {m}"),
        None => format!("the pin Job {name} failed ({command}): {why}"),
    };
    Some(Cond { type_: condition::PINNED, status: CondStatus::False, reason: reason::PIN_JOB_FAILED.into(), message })
}

/// No pin Job, and the pin is not applied: launch one, or park at the repository gate or for
/// missing Secrets.
fn launch_or_park(f: &PinFacts, d: &mut PinDecision, command: &str) {
    match (&f.gate, f.missing_secrets.is_empty()) {
        (Err(why), _) => {
            d.condition = running(format!("the pin waits for the repository before its Job runs: {why}"));
            d.requeue_after = Some(Duration::seconds(PARKED_RECHECK_SECONDS));
        }
        (Ok(()), false) => {
            d.condition = running(format!(
                "the pin waits for Secret(s) {} in the Snapshot's namespace",
                f.missing_secrets.join(", ")
            ));
            d.requeue_after = Some(Duration::seconds(PARKED_RECHECK_SECONDS));
        }
        (Ok(()), true) => {
            d.step = PinStep::Launch { add: f.desired };
            d.condition = running(format!("launched the pin Job {} to run `{command}`", f.job_name));
        }
    }
}

/// Whether the Snapshot's pin is not in its desired state yet (the repository watch re-enqueues
/// such Snapshots, like the ones parked before their backup).
pub fn outstanding(snap: &Snapshot) -> bool {
    let applied = snap.status.as_ref().and_then(|s| s.pinned).unwrap_or(false);
    snap.meta().deletion_timestamp.is_none() && snap.spec.pin != applied
}

/// Writes the decision into the desired status: `pinned`, the `Pinned` condition (added,
/// updated or removed), and a pin failure cleared once the pin succeeded.
pub fn apply_to_status(next: &mut SnapshotStatus, d: &PinDecision, generation: i64, now: DateTime<Utc>) {
    next.pinned = d.pinned;
    match &d.condition {
        Some(c) => {
            next.conditions =
                crate::conditions::merge_conditions(&next.conditions, std::slice::from_ref(c), generation, now);
        }
        None => next.conditions.retain(|c| c.type_ != condition::PINNED),
    }
    if d.clear_failure && next.failure.as_ref().and_then(|f| f.op.as_deref()) == Some("pin") {
        next.failure = None;
    }
}

/// Observes the pin Job, plans, and runs the step (create or delete the Job). The caller
/// writes the decision into the status it is about to write (`apply_to_status`).
pub async fn reconcile(
    ctx: &crate::context::Context,
    snap: &Snapshot,
    repo: Option<&RepoView>,
    gate: &crate::gating::Gate,
    missing_secrets: &[String],
) -> Result<PinDecision, crate::error::Error> {
    use kube::api::{DeleteParams, PropagationPolicy};
    use kube::runtime::reflector::ObjectRef;

    let ns = snap.namespace().unwrap_or_default();
    let name = job_name(&snap.name_any());
    let status = snap.status.clone().unwrap_or_default();
    let job = ctx
        .stores
        .jobs
        .get(&ObjectRef::new(&name).within(&ns))
        .filter(|j| j.owner_references().iter().any(|o| Some(&o.uid) == snap.meta().uid.as_ref()));
    let facts = PinFacts {
        desired: snap.spec.pin,
        stored: status.pinned,
        phase: status.phase.clone(),
        kopia_id: status.snapshot.as_ref().and_then(|s| s.kopia_snapshot_id.clone()),
        gate: match (gate, repo) {
            (crate::gating::Gate::Open, Some(_)) => Ok(()),
            (crate::gating::Gate::Open, None) => Err("the repository is not known yet".into()),
            (g, _) => Err(g.message()),
        },
        missing_secrets: missing_secrets.to_vec(),
        job: PinJob::of(job.as_deref()),
        job_name: name.clone(),
        failure: status.failure.as_deref().cloned().filter(|f| f.op.as_deref() == Some("pin")),
    };
    let mut d = plan(&facts);
    let api = kube::Api::<Job>::namespaced(ctx.client.clone(), &ns);
    match (&d.step, repo, facts.kopia_id.as_deref()) {
        (PinStep::Launch { add }, Some(rv), Some(id)) => match pin_job(snap, id, *add, rv, &ctx.config) {
            Ok(job) => {
                if ctx.create_mover_job(&ns, &job, "pin").await? {
                    tracing::info!(snapshot = %snap.name_any(), namespace = %ns, add, "launched pin Job");
                }
            }
            Err(e) => {
                // The Job cannot be built (a refused mover setting, an invalid backend): say so.
                d.step = PinStep::Idle;
                d.condition = Some(Cond {
                    type_: condition::PINNED,
                    status: CondStatus::False,
                    reason: reason::PIN_JOB_FAILED.into(),
                    message: format!("the pin Job {name} cannot be built: {e}"),
                });
            }
        },
        (PinStep::DeleteJob, _, _) => {
            let dp =
                DeleteParams { propagation_policy: Some(PropagationPolicy::Background), ..DeleteParams::default() };
            match api.delete(&name, &dp).await {
                Ok(_) => {
                    tracing::info!(snapshot = %snap.name_any(), namespace = %ns, "deleted the finished pin Job to replace it")
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(crate::error::Error::api("delete finished pin Job", e)),
            }
        }
        (PinStep::Idle, _, _) => {}
        // `plan` launches only with the gate open (a known repository) and a manifest id.
        (PinStep::Launch { .. }, None, _) | (PinStep::Launch { .. }, Some(_), None) => {
            tracing::warn!(snapshot = %snap.name_any(), namespace = %ns, "pin launch planned without a repository or a manifest id; nothing done");
            d.step = PinStep::Idle;
        }
    }
    Ok(d)
}

/// The `<name>-pin` Job: one connect as `kopiur-ops` at the lease host, one `snapshot pin`. It runs in the
/// Snapshot's namespace (where its backup ran and its credentials are), owned by the Snapshot,
/// with the Snapshot's `failurePolicy` and the repository's `moverDefaults`.
pub fn pin_job(
    snap: &Snapshot,
    kopia_id: &str,
    add: bool,
    repo: &RepoView,
    config: &crate::config::Config,
) -> Result<Job, BuildError> {
    let ns = snap.namespace().unwrap_or_default();
    let mounts = backend_mounts(repo, &ns, config)?;
    let spec = WorkSpec {
        schema_version: SCHEMA_VERSION,
        target_ref: crate::mover_job::target_of(snap),
        repository: repository_info(repo, repo.ops_identity(), &mounts).map_err(BuildError::Invalid)?,
        command_timeout_seconds: DEFAULT_COMMAND_TIMEOUT_SECONDS,
        heartbeat_seconds: DEFAULT_HEARTBEAT_SECONDS,
        connect_timeout_seconds: None,
        operation: Operation::SnapshotPin(SnapshotPinOp {
            snapshot_id: kopia_id.to_string(),
            pin: PIN_NAME.into(),
            add,
        }),
    };
    let (password, env_from) = secrets(repo);
    let mut input = JobInput {
        annotations: BTreeMap::from([(annotation::PIN_TARGET.to_string(), add.to_string())]),
        ..crate::mover_job::input(
            config,
            crate::mover_job::Identity {
                name: job_name(&snap.name_any()),
                namespace: ns,
                owner: owner_of(snap),
                work_spec: spec,
                password,
                env_from_secrets: env_from,
            },
            &mounts,
            snap.spec.failure_policy.as_deref(),
        )
    };
    crate::mover_settings::resolve(
        repo.common().mover_defaults.as_ref(),
        None,
        crate::mover_settings::MoverOp::Other,
        false,
    )
    .map_err(BuildError::Refused)?
    .apply(&mut input, true);
    build_job(&input).map_err(|e| BuildError::Invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> PinFacts {
        PinFacts {
            desired: true,
            stored: None,
            phase: Some(SnapshotPhase::Succeeded),
            kopia_id: Some("k0123".into()),
            gate: Ok(()),
            missing_secrets: Vec::new(),
            job: PinJob::Absent,
            job_name: "s-pin".into(),
            failure: None,
        }
    }

    fn reason_of(d: &PinDecision) -> Option<(&str, &str)> {
        d.condition.as_ref().map(|c| (c.status.as_str(), c.reason.as_str()))
    }

    #[test]
    fn a_succeeded_snapshot_asking_for_a_pin_launches_one_add_job() {
        let d = plan(&facts());
        assert_eq!(d.step, PinStep::Launch { add: true });
        assert_eq!(reason_of(&d), Some(("False", "PinJobRunning")));
        assert_eq!(d.pinned, Some(false), "not applied until the Job completes");
        assert!(d.condition.unwrap().message.contains("kopia snapshot pin k0123 --add kopiur"));
    }

    #[test]
    fn an_active_job_is_awaited_and_a_complete_one_records_the_pin() {
        let mut f = facts();
        f.job = PinJob::Active { add: true };
        let d = plan(&f);
        assert_eq!((d.step, reason_of(&d)), (PinStep::Idle, Some(("False", "PinJobRunning"))));
        f.job = PinJob::Complete { add: true };
        let d = plan(&f);
        assert_eq!((d.step, d.pinned, reason_of(&d)), (PinStep::Idle, Some(true), Some(("True", "Pinned"))));
        assert!(d.clear_failure);
        // Steady state once the Job is gone (TTL): nothing to do.
        f.job = PinJob::Absent;
        f.stored = Some(true);
        let d = plan(&f);
        assert_eq!((d.step, d.pinned, reason_of(&d)), (PinStep::Idle, Some(true), Some(("True", "Pinned"))));
    }

    #[test]
    fn unpinning_replaces_the_finished_add_job_with_a_remove_job() {
        let mut f = facts();
        f.desired = false;
        f.stored = Some(true);
        f.job = PinJob::Complete { add: true };
        let d = plan(&f);
        assert_eq!(d.step, PinStep::DeleteJob);
        assert_eq!(d.pinned, Some(true), "still applied until the remove Job completes");
        f.job = PinJob::Deleting;
        assert_eq!(plan(&f).step, PinStep::Idle);
        f.job = PinJob::Absent;
        let d = plan(&f);
        assert_eq!(d.step, PinStep::Launch { add: false });
        assert!(d.condition.unwrap().message.contains("--remove kopiur"));
        f.job = PinJob::Complete { add: false };
        let d = plan(&f);
        assert_eq!((d.pinned, d.condition), (Some(false), None), "unpinned: status.pinned false, no condition");
    }

    #[test]
    fn a_failed_job_reports_the_movers_message_and_is_not_relaunched_while_it_exists() {
        let mut f = facts();
        f.job = PinJob::Failed { add: true, reason: "BackoffLimitExceeded".into() };
        let d = plan(&f);
        assert_eq!((d.step, reason_of(&d)), (PinStep::Idle, Some(("False", "PinJobFailed"))));
        assert!(d.condition.unwrap().message.ends_with("BackoffLimitExceeded"));
        f.failure = Some(Failure {
            message: Some("kopia snapshot pin: no such snapshot".into()),
            op: Some("pin".into()),
            ..Failure::default()
        });
        let d = plan(&f);
        assert!(d.condition.unwrap().message.ends_with("kopia snapshot pin: no such snapshot"));
        assert!(!d.clear_failure);
        // Gone (its TTL): the pin is attempted again.
        f.job = PinJob::Absent;
        assert_eq!(plan(&f).step, PinStep::Launch { add: true });
        // A spec edit replaces a failed Job at once.
        f.job = PinJob::Failed { add: true, reason: "BackoffLimitExceeded".into() };
        f.desired = false;
        f.stored = Some(false);
        let d = plan(&f);
        assert_eq!(
            (d.step, d.pinned, d.condition),
            (PinStep::DeleteJob, Some(false), None),
            "nothing to remove: the stale Job goes, no condition"
        );
    }

    #[test]
    fn the_pin_parks_at_the_repository_gate_and_on_missing_credentials() {
        let mut f = facts();
        f.gate = Err("repository t/r is Degraded; waiting for it to become Ready".into());
        let d = plan(&f);
        assert_eq!(d.step, PinStep::Idle, "no Job while the repository is not Ready");
        assert_eq!(reason_of(&d), Some(("False", "PinJobRunning")));
        assert!(d.condition.as_ref().unwrap().message.contains("Degraded"));
        assert_eq!(d.requeue_after, Some(Duration::seconds(PARKED_RECHECK_SECONDS)));
        f.gate = Ok(());
        f.missing_secrets = vec!["kopia".into()];
        let d = plan(&f);
        assert_eq!(d.step, PinStep::Idle);
        assert!(d.condition.unwrap().message.contains("kopia"));
    }

    #[test]
    fn without_a_manifest_nothing_is_launched() {
        for phase in [None, Some(SnapshotPhase::Pending), Some(SnapshotPhase::Running)] {
            let mut f = facts();
            f.phase = phase.clone();
            f.kopia_id = None;
            let d = plan(&f);
            assert_eq!((d.step, reason_of(&d)), (PinStep::Idle, Some(("False", "PinJobRunning"))), "{phase:?}");
        }
        for phase in [SnapshotPhase::Failed, SnapshotPhase::Unchanged] {
            let mut f = facts();
            f.phase = Some(phase.clone());
            let d = plan(&f);
            assert_eq!((d.step, d.condition), (PinStep::Idle, None), "{phase:?}");
        }
        // A discovered row owns a manifest and may be pinned.
        let mut f = facts();
        f.phase = Some(SnapshotPhase::Discovered);
        assert_eq!(plan(&f).step, PinStep::Launch { add: true });
    }

    #[test]
    fn a_never_pinned_snapshot_writes_no_pinned_field_and_no_condition() {
        let mut f = facts();
        f.desired = false;
        let d = plan(&f);
        assert_eq!((d.step, d.pinned, d.condition), (PinStep::Idle, None, None));
    }

    #[test]
    fn the_job_is_a_pin_op_with_one_target_annotation_owned_by_the_snapshot() {
        let snap: Snapshot = serde_json::from_value(serde_json::json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": "s", "namespace": "apps", "uid": "u-s"},
            "spec": {"pin": true, "failurePolicy": {"backoffLimit": 1}}
        }))
        .unwrap();
        let repo: kopiur_api::Repository = serde_json::from_value(serde_json::json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
            "metadata": {"name": "r", "namespace": "apps", "uid": "u-r"},
            "spec": {"backend": {"filesystem": {"path": "/repo"}},
                     "encryption": {"passwordSecretRef": {"name": "pw"}}}
        }))
        .unwrap();
        let rv = RepoView::Namespaced(std::sync::Arc::new(repo));
        let config = crate::config::Config::from_env();
        let job = pin_job(&snap, "k0123", true, &rv, &config).unwrap();
        assert_eq!(job.metadata.name.as_deref(), Some("s-pin"));
        assert_eq!(job.metadata.namespace.as_deref(), Some("apps"));
        assert_eq!(job.labels().get("kopiur.home-operations.com/op").map(String::as_str), Some("pin"));
        assert_eq!(job.annotations().get(annotation::PIN_TARGET).map(String::as_str), Some("true"));
        let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str(), owner.controller), ("Snapshot", "u-s", Some(true)));
        let js = job.spec.as_ref().unwrap();
        assert_eq!((js.backoff_limit, js.ttl_seconds_after_finished), (Some(1), Some(3600)));
        let env = js.template.spec.as_ref().unwrap().containers[0].env.clone().unwrap();
        let ws = env.iter().find(|e| e.name == "KOPIUR_WORK_SPEC").and_then(|e| e.value.clone()).unwrap();
        let ws: serde_json::Value = serde_json::from_str(&ws).unwrap();
        assert_eq!(
            ws["operation"],
            serde_json::json!({"SnapshotPin": {"snapshotId": "k0123", "pin": "kopiur", "add": true}})
        );
        assert_eq!(ws["targetRef"]["uid"], "u-s");
        // docs/design/mover.md §2.2: kopiur-ops at the repository's lease host.
        assert_eq!(
            ws["repository"]["clientIdentity"],
            serde_json::json!({"username": "kopiur-ops", "hostname": "kopiur.apps.r"})
        );
        assert_eq!(job_name(&"x".repeat(70)).len(), 63);
    }
}
