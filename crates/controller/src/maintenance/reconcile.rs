//! Maintenance reconciler: observe (repository, Jobs, annotations from stores) -> `plan::plan`
//! -> apply (at most one Job, one status write when something changed, Events).
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use chrono::Utc;
use k8s_openapi::api::batch::v1::Job;
use kopiur_api::Maintenance;
use kopiur_api::domain::identity::{lease_host, lease_owner, maintenance_owner};
use kopiur_api::maintenance::{RunMode, TakeoverPolicy};
use kopiur_api::names::{annotation, event, label, run_mode, run_trigger};
use kopiur_api::shared::{FailurePolicy, RepositoryKind};
use kopiur_kopia::cmd::Identity;
use kopiur_mover::workspec::{MaintenanceMode, MaintenanceOp, Operation, TakeoverPolicy as MoverTakeover};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};

use super::plan::{Launch, MaintFacts, plan};
use crate::context::Context;
use crate::error::Error;
use crate::metrics::labels::{KindLabels, MaintenanceRunLabels};
use crate::mover_job::owner_of;
use crate::repo_view::RepoView;
use crate::scheduled_run::{self, MoverJob, RunJob, Sched, rfc3339};

/// (uid, value) pairs already warned about, so a malformed annotation gives one Event.
fn warned() -> &'static Mutex<HashSet<(String, String)>> {
    static W: OnceLock<Mutex<HashSet<(String, String)>>> = OnceLock::new();
    W.get_or_init(Default::default)
}

/// The Jobs this Maintenance owns (label `…/maintenance=<name>`, owner uid).
pub fn jobs_of(ctx: &Context, m: &Maintenance) -> Vec<RunJob> {
    let ns = m.namespace();
    let uid = m.uid().unwrap_or_default();
    let name = m.name_any();
    ctx.stores
        .jobs
        .state()
        .iter()
        .filter(|j| j.namespace() == ns)
        .filter(|j| j.labels().get(label::MAINTENANCE) == Some(&name))
        .filter(|j| j.owner_references().iter().any(|o| o.uid == uid))
        .map(|j| scheduled_run::run_job(j, annotation::MAINTENANCE_SLOT))
        .collect()
}

/// The lease (`kopiur/<ns>/<repo>` unless set) for this Maintenance's repository.
fn lease(m: &Maintenance) -> String {
    let r = &m.spec.repository;
    m.spec.ownership.as_ref().and_then(|o| o.owner.clone()).unwrap_or_else(|| match r.kind {
        RepositoryKind::Repository => {
            let ns = r.namespace.clone().or_else(|| m.namespace()).unwrap_or_default();
            lease_owner(Some(&ns), &r.name)
        }
        RepositoryKind::ClusterRepository => lease_owner(None, &r.name),
    })
}

pub async fn reconcile(m: Arc<Maintenance>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.metrics.reconciliations.inc(KindLabels { kind: "Maintenance".into() });
    if m.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let now = Utc::now();
    let ns = m.namespace().unwrap_or_default();
    let name = m.name_any();
    let status = m.status.clone().unwrap_or_default();
    let obs = observe(&ctx, &m, now).await;
    let mut d = plan(&obs.facts, now);
    // A gating [next] field (docs/design/api-contract.md §1.9): Stalled FeatureNotImplemented, no Job.
    if let Some(message) = crate::features::maintenance(&m.spec).gating_message() {
        d.conditions = crate::conditions::trio(
            crate::conditions::Standing::Stalled,
            crate::features::FEATURE_NOT_IMPLEMENTED,
            message,
        );
        d.launch = None;
    }
    let reference = m.object_ref(&());
    // client required from here on.
    if let Some(raw) = &d.invalid_request
        && warned().lock().map(|mut w| w.insert((m.uid().unwrap_or_default(), raw.clone()))).unwrap_or(false)
    {
        let note = format!("{} value {raw:?} is not RFC 3339; ignored", annotation::RUN_REQUESTED);
        ctx.event(&reference, true, event::INVALID_RUN_REQUEST, note).await;
    }
    for r in &d.recorded {
        tracing::info!(maintenance = %name, namespace = %ns, job = %r.job, mode = %r.mode, outcome = r.outcome, "maintenance run recorded");
        let labels = MaintenanceRunLabels {
            namespace: ns.clone(),
            name: name.clone(),
            mode: r.mode.clone(),
            outcome: r.outcome.into(),
        };
        ctx.metrics.maintenance_runs.inc(labels);
    }
    // A failed run asks the repository to re-probe sooner (docs/design/repository-breaker.md §3.8); the probe decides.
    if d.nudge
        && let Some(rv) = &obs.repo
        && let Err(e) = ctx.nudge(rv, now).await
    {
        tracing::warn!(error = %e, maintenance = %name, "stamping reverify-requested-at failed");
    }
    let mut next = d.status.clone();
    if let (Some(l), Some(rv)) = (&d.launch, &obs.repo) {
        launch(&ctx, &m, rv, l, &obs).await?;
    }
    next.observed_generation = m.meta().generation;
    next.conditions =
        crate::conditions::merge_conditions(&status.conditions, &d.conditions, m.meta().generation.unwrap_or(0), now);
    // Unchanged counts as landed; a lost conflict re-decides on the newer object.
    let api = Api::<Maintenance>::namespaced(ctx.client.clone(), &ns);
    if crate::status::write_status(&api, m.as_ref(), &status, &next).await?.landed() {
        // After the failed run is on record: deleting first would lose it if the write lost.
        scheduled_run::delete_wedged(&ctx.client, &ctx.stores.jobs, &ns, &d.delete_jobs).await;
        for r in &d.recorded {
            if let Some(message) = &r.wedged {
                ctx.event(&reference, true, event::MOVER_POD_WEDGED, message.clone()).await;
            }
        }
    }
    Ok(Action::requeue(d.requeue))
}

/// What one reconcile read: the plan's facts, and the repository and ownership a launch needs.
struct Observed {
    facts: MaintFacts,
    repo: Option<RepoView>,
    lease: String,
    expected_owner: String,
    aliases: Vec<String>,
    takeover: TakeoverPolicy,
}

/// The repository and its gate, the schedules (in the Maintenance's zone, else the
/// repository's default), the ownership, the owned Jobs and their pods (listed only for an
/// active Job), from the stores.
async fn observe(ctx: &Context, m: &Maintenance, now: chrono::DateTime<Utc>) -> Observed {
    let ns = m.namespace().unwrap_or_default();
    let uid = m.uid().unwrap_or_default();
    let status = m.status.clone().unwrap_or_default();
    let repo = ctx.repository(&ns, &m.spec.repository);
    let gate = ctx.gate(&ns, &m.spec.repository);
    let repo_tz = repo.as_ref().and_then(|r| r.common().schedule_defaults.as_ref()).and_then(|s| s.timezone.clone());
    let fallback = m.spec.schedule.timezone.clone().or(repo_tz);
    let schedules = Sched::parse(&m.spec.schedule.quick, &uid, fallback.as_deref())
        .and_then(|q| Ok((q, Sched::parse(&m.spec.schedule.full, &uid, fallback.as_deref())?)));
    let ownership = m.spec.ownership.clone().unwrap_or_default();
    let lease = lease(m);
    let expected_owner = maintenance_owner(&lease);
    let aliases: Vec<String> =
        ownership.owner_aliases.clone().unwrap_or_default().iter().map(|a| maintenance_owner(a)).collect();
    let missing = repo.as_ref().map(|r| ctx.missing_secrets(&ns, &r.secret_names())).unwrap_or_default();
    let mut jobs = jobs_of(ctx, m);
    let deadline =
        chrono::Duration::seconds(FailurePolicy::resolved_pod_startup_deadline_seconds(m.spec.failure_policy.as_ref()));
    let pod_recheck = scheduled_run::check_pods(&ctx.client, &ctx.stores.jobs, &ns, &mut jobs, deadline, now).await;
    let facts = MaintFacts {
        schedules,
        status,
        gate,
        read_only: repo.as_ref().is_some_and(RepoView::read_only),
        jobs,
        request: scheduled_run::run_request(m.annotations()),
        mode: m.annotations().get(annotation::RUN_MODE).cloned(),
        expected_owner: expected_owner.clone(),
        aliases: aliases.clone(),
        takeover: ownership.takeover_policy,
        missing_secrets: missing,
        pod_recheck,
        reverify_requested_at: repo.as_ref().and_then(RepoView::reverify_requested_at),
        repository_gate: crate::gating::maintenance_gate(repo.as_ref().and_then(RepoView::status)),
        quick_requested_at: repo
            .as_ref()
            .and_then(RepoView::status)
            .and_then(|s| s.health.as_ref())
            .and_then(|h| h.quick_maintenance_requested_at),
    };
    Observed { facts, repo, lease, expected_owner, aliases, takeover: ownership.takeover_policy }
}

/// Creates the run's Job (idempotent by name).
async fn launch(ctx: &Context, m: &Maintenance, rv: &RepoView, l: &Launch, obs: &Observed) -> Result<(), Error> {
    let ns = m.namespace().unwrap_or_default();
    let job = maintenance_job(m, &ctx.config, rv, l, &obs.lease, &obs.expected_owner, &obs.aliases, obs.takeover)?;
    if ctx.create_mover_job(&ns, &job, "maintenance").await? {
        tracing::info!(maintenance = %m.name_any(), namespace = %ns, job = %job.name_any(), "maintenance Job created");
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn maintenance_job(
    m: &Maintenance,
    config: &crate::config::Config,
    repo: &RepoView,
    l: &Launch,
    lease: &str,
    expected_owner: &str,
    aliases: &[String],
    takeover: TakeoverPolicy,
) -> Result<Job, Error> {
    let ns = m.namespace().unwrap_or_default();
    let mode = match l.mode {
        RunMode::Quick => run_mode::QUICK,
        RunMode::Full => run_mode::FULL,
    };
    let mut annotations = BTreeMap::from([
        (annotation::MAINTENANCE_SLOT.to_string(), rfc3339(l.at)),
        (annotation::RUN_MODE.to_string(), mode.to_string()),
        (
            annotation::RUN_TRIGGER.to_string(),
            if l.manual.is_some() { run_trigger::MANUAL } else { run_trigger::CRON }.to_string(),
        ),
    ]);
    if let Some(raw) = &l.manual {
        annotations.insert(scheduled_run::RUN_REQUESTED_VALUE.to_string(), raw.clone());
    }
    scheduled_run::build(MoverJob {
        name: kopiur_mover::job::job_name(&format!("{}-{mode}-{}", m.name_any(), l.slot.timestamp())),
        namespace: ns.clone(),
        target: crate::mover_job::target_of(m),
        owner: owner_of(m),
        repo,
        identity: Identity::new("kopiur", lease_host(lease)),
        read_only: false,
        operation: Operation::Maintenance(MaintenanceOp {
            mode: match l.mode {
                RunMode::Quick => MaintenanceMode::Quick,
                RunMode::Full => MaintenanceMode::Full,
            },
            lease_owner: expected_owner.to_string(),
            owner_aliases: aliases.to_vec(),
            takeover_policy: match takeover {
                TakeoverPolicy::Never => MoverTakeover::Never,
                TakeoverPolicy::PromptCondition => MoverTakeover::PromptCondition,
                TakeoverPolicy::Force => MoverTakeover::Force,
            },
        }),
        destination_secret: None,
        labels: BTreeMap::from([
            (label::MAINTENANCE.to_string(), m.name_any()),
            (label::COMPONENT.to_string(), kopiur_api::names::component::MAINTENANCE.to_string()),
        ]),
        annotations,
        failure_policy: m.spec.failure_policy.as_ref(),
        mover: m.spec.mover.as_ref(),
        config,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduled_run::mover_rows;
    use chrono::TimeZone;
    use serde_json::{Value, json};

    fn maintenance(mover: &Value) -> Maintenance {
        let mut m = json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Maintenance",
            "metadata": {"name": "m", "namespace": "apps", "uid": "u-m"},
            "spec": {"repository": {"name": "r"}}
        });
        if !mover.is_null() {
            m["spec"]["mover"] = mover.clone();
        }
        serde_json::from_value(m).unwrap()
    }

    fn build(m: &Maintenance, repo: &RepoView) -> Result<Job, Error> {
        let at = Utc.with_ymd_and_hms(2026, 7, 17, 3, 0, 0).unwrap();
        let l = Launch { mode: RunMode::Quick, slot: at, at, manual: None };
        let lease = lease(m);
        let owner = maintenance_owner(&lease);
        maintenance_job(m, &crate::config::Config::from_env(), repo, &l, &lease, &owner, &[], TakeoverPolicy::Never)
    }

    /// docs/design/api-contract.md §10 `mover`: every mover setting of the repository's `moverDefaults` and the
    /// Maintenance's own `mover` reaches the maintenance Job's pod, in merge order.
    #[test]
    fn every_mover_setting_reaches_the_maintenance_pod_in_merge_order() {
        for (name, defaults, mover, check) in mover_rows::rows() {
            let job =
                build(&maintenance(&mover), &mover_rows::repo(&defaults)).unwrap_or_else(|e| panic!("{name}: {e}"));
            let js = job.spec.clone().unwrap();
            let pod = js.template.spec.clone().unwrap();
            check(&pod, &js);
            // The work spec is still the maintenance run under kopiur's lease.
            let ws = mover_rows::work_spec(&pod);
            assert_eq!(ws["repository"]["clientIdentity"]["username"], "kopiur", "{name}");
            assert_eq!(ws["repository"]["clientIdentity"]["hostname"], "kopiur.apps.r", "{name}");
            assert!(ws["operation"]["Maintenance"].is_object(), "{name}: {ws}");
        }
    }

    /// A maintenance mover is never privileged, and it inherits no identity in this build: both
    /// are refused with a message, and no Job is built.
    #[test]
    fn a_privileged_or_inheriting_maintenance_mover_is_refused() {
        let mut cases = mover_rows::privileged();
        cases.push((
            "inheritSecurityContextFrom",
            json!(null),
            json!({"inheritSecurityContextFrom": {"workloadSelector": {"podSelector": {"matchLabels": {"app": "db"}}}}}),
        ));
        for (name, defaults, mover) in cases {
            match build(&maintenance(&mover), &mover_rows::repo(&defaults)) {
                Err(Error::MoverRefused(r)) => assert!(!r.message.is_empty(), "{name}"),
                other => panic!("{name}: expected a refusal, got {other:?}"),
            }
        }
    }
}
