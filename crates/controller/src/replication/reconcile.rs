//! RepositoryReplication reconciler: observe (source repository, Jobs, annotations from
//! stores) -> `plan::plan` -> apply (at most one `sync-to` Job, one status write when
//! something changed, Events, a spaced nudge of the source after a failure).
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use chrono::Utc;
use k8s_openapi::api::batch::v1::Job;
use kopiur_api::RepositoryReplication;
use kopiur_api::names::{annotation, component, event, label, run_trigger};
use kopiur_api::shared::Backend;
use kopiur_kopia::cmd::SyncOptions;
use kopiur_mover::workspec::{Operation, ReplicateOp};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};

use super::plan::{Destination, Launch, ReplFacts, plan};
use crate::context::Context;
use crate::error::Error;
use crate::metrics::labels::{KindLabels, ReplicationRunLabels};
use crate::mounts::kopia_backend;
use crate::mover_job::owner_of;
use crate::repo_view::RepoView;
use crate::scheduled_run::{self, MoverJob, RunJob, Sched, rfc3339};

fn warned() -> &'static Mutex<HashSet<(String, String)>> {
    static W: OnceLock<Mutex<HashSet<(String, String)>>> = OnceLock::new();
    W.get_or_init(Default::default)
}

/// The Jobs this replication owns (label `…/replication=<name>`, owner uid).
pub fn jobs_of(ctx: &Context, r: &RepositoryReplication) -> Vec<RunJob> {
    let ns = r.namespace();
    let uid = r.uid().unwrap_or_default();
    let name = r.name_any();
    ctx.stores
        .jobs
        .state()
        .iter()
        .filter(|j| j.namespace() == ns)
        .filter(|j| j.labels().get(label::REPLICATION) == Some(&name))
        .filter(|j| j.owner_references().iter().any(|o| o.uid == uid))
        .map(|j| scheduled_run::run_job(j, annotation::REPLICATION_SLOT))
        .collect()
}

/// A short display of a backend for `status.destinationBackend`.
pub fn describe(b: &Backend) -> String {
    match b {
        Backend::S3(s) => {
            let host = s.endpoint.as_deref().map(|e| format!("{} ", e.trim_end_matches('/'))).unwrap_or_default();
            format!("s3 {host}{}/{}", s.bucket, s.prefix.as_deref().unwrap_or_default())
                .trim_end_matches('/')
                .to_string()
        }
        Backend::Filesystem(f) => format!("filesystem {}", f.path),
        Backend::Azure(_)
        | Backend::Gcs(_)
        | Backend::B2(_)
        | Backend::Sftp(_)
        | Backend::WebDav(_)
        | Backend::Rclone(_)
        | Backend::Gdrive(_) => b.key().to_string(),
    }
}

/// Whether two backends name the same storage (the same-target key of docs/design/api-contract.md §11).
pub fn same_target(a: &Backend, b: &Backend) -> bool {
    let norm = |p: Option<&str>| p.unwrap_or_default().trim_matches('/').to_string();
    match (a, b) {
        (Backend::S3(x), Backend::S3(y)) => {
            x.bucket == y.bucket
                && x.endpoint.as_deref().map(|e| e.trim_end_matches('/'))
                    == y.endpoint.as_deref().map(|e| e.trim_end_matches('/'))
                && norm(x.prefix.as_deref()) == norm(y.prefix.as_deref())
        }
        (Backend::Filesystem(x), Backend::Filesystem(y)) => {
            x.path.trim_end_matches('/') == y.path.trim_end_matches('/') && x.volume == y.volume
        }
        // An S3 or filesystem source against a backend of another kind.
        (Backend::S3(_) | Backend::Filesystem(_), _) => false,
        // Kinds without a normalised key: the same kind with an identical spec is the same
        // storage (conservative: a replication onto its own source is refused).
        (
            Backend::Azure(_)
            | Backend::Gcs(_)
            | Backend::B2(_)
            | Backend::Sftp(_)
            | Backend::WebDav(_)
            | Backend::Rclone(_)
            | Backend::Gdrive(_),
            _,
        ) => a == b,
    }
}

/// The destination's credentials Secret, if it names one.
fn destination_secret(b: &Backend) -> Option<String> {
    b.s3()?.auth.as_ref()?.secret_ref.as_ref().map(|r| r.name.clone())
}

/// X (docs/design/api-contract.md §11): the destination's Secret lives in this CR's namespace; Some(message)
/// when `auth.secretRef.namespace` names another one.
fn destination_secret_namespace(b: &Backend, ns: &str) -> Option<String> {
    let other = b.s3()?.auth.as_ref()?.secret_ref.as_ref()?.namespace.as_deref().filter(|n| *n != ns)?;
    Some(format!(
        "spec.destination.s3.auth.secretRef.namespace is {other}, but the replication mover runs in {ns} and reads \
         the destination's Secret only from there; put the Secret in {ns} and remove the namespace"
    ))
}

/// Whether the destination can be used (docs/design/api-contract.md §11, §1.8), from the destination, this
/// replication's namespace and the source repository's backend (when it is known).
pub fn destination_verdict(destination: &Backend, ns: &str, source: Option<&Backend>) -> Destination {
    if let Err(e) = kopia_backend(destination) {
        return Destination::NotImplemented(e.to_string().replace("spec.backend", "spec.destination"));
    }
    // Refused rather than ignored: a destination's CA bundle or volume is not mounted yet.
    if let Some(m) = crate::mounts::destination_refusal(destination) {
        return Destination::NotImplemented(m);
    }
    if let Some(m) = destination_secret_namespace(destination, ns) {
        return Destination::CrossNamespace(m);
    }
    match source {
        Some(src) if same_target(src, destination) => Destination::IsSource,
        Some(_) | None => Destination::Usable,
    }
}

pub async fn reconcile(r: Arc<RepositoryReplication>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.metrics.reconciliations.inc(KindLabels { kind: "RepositoryReplication".into() });
    if r.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let now = Utc::now();
    let ns = r.namespace().unwrap_or_default();
    let name = r.name_any();
    let uid = r.uid().unwrap_or_default();
    let status = r.status.clone().unwrap_or_default();
    let repo = ctx.repository(&ns, &r.spec.source_ref);
    let gate = ctx.gate(&ns, &r.spec.source_ref);
    let facts = observe(&ctx, &r, repo.as_ref(), gate, now).await;
    let d = plan(&facts, now);
    let reference = r.object_ref(&());
    if let Some(raw) = &d.invalid_request
        && warned().lock().map(|mut w| w.insert((uid.clone(), raw.clone()))).unwrap_or(false)
    {
        let note = format!("{} value {raw:?} is not RFC 3339; ignored", annotation::RUN_REQUESTED);
        ctx.event(&reference, true, event::INVALID_RUN_REQUEST, note).await;
    }
    for (job, outcome) in &d.recorded {
        tracing::info!(replication = %name, namespace = %ns, job = %job, outcome, "replication run recorded");
        let trigger =
            if facts.jobs.iter().any(|j| &j.name == job && j.manual.is_some()) { "requested" } else { "cron" };
        ctx.metrics.replication_runs.inc(ReplicationRunLabels {
            kind: "RepositoryReplication".into(),
            trigger: trigger.into(),
            outcome: outcome.to_string(),
        });
    }
    if d.nudge
        && let Some(rv) = &repo
        && let Err(e) = ctx.nudge(rv, now).await
    {
        tracing::warn!(error = %e, replication = %name, "stamping reverify-requested-at failed");
    }
    if let (Some(l), Some(rv)) = (&d.launch, &repo) {
        launch(&ctx, &r, rv, l).await?;
    }
    let mut next = d.status.clone();
    next.observed_generation = r.meta().generation;
    next.destination_backend = Some(describe(&r.spec.destination));
    next.conditions =
        crate::conditions::merge_conditions(&status.conditions, &d.conditions, r.meta().generation.unwrap_or(0), now);
    // Unchanged counts as landed; a lost conflict re-decides on the newer object.
    let api = Api::<RepositoryReplication>::namespaced(ctx.client.clone(), &ns);
    if crate::status::write_status(&api, r.as_ref(), &status, &next).await?.landed() {
        // After the failed run is on record: deleting first would lose it if the write lost.
        scheduled_run::delete_wedged(&ctx.client, &ctx.stores.jobs, &ns, &d.delete_jobs).await;
        if let Some(message) = &d.wedged {
            ctx.event(&reference, true, event::MOVER_POD_WEDGED, message.clone()).await;
        }
    }
    Ok(Action::requeue(d.requeue))
}

/// The plan's facts: the schedule (in the source repository's default zone), the
/// destination's verdict, the Secrets both sides read, the owned Jobs and their pods.
async fn observe(
    ctx: &Context,
    r: &RepositoryReplication,
    repo: Option<&RepoView>,
    gate: crate::gating::Gate,
    now: chrono::DateTime<Utc>,
) -> ReplFacts {
    let ns = r.namespace().unwrap_or_default();
    let uid = r.uid().unwrap_or_default();
    let repo_tz = repo.and_then(|x| x.common().schedule_defaults.as_ref()).and_then(|s| s.timezone.clone());
    let destination = destination_verdict(&r.spec.destination, &ns, repo.map(|src| &src.common().backend));
    let mut secrets = repo.map(RepoView::secret_names).unwrap_or_default();
    secrets.extend(destination_secret(&r.spec.destination));
    let mut jobs = jobs_of(ctx, r);
    // RepositoryReplication has no failurePolicy (docs/design/api-contract.md §11): the default deadline applies.
    let deadline =
        chrono::Duration::seconds(kopiur_api::shared::FailurePolicy::resolved_pod_startup_deadline_seconds(None));
    let pod_recheck = scheduled_run::check_pods(&ctx.client, &ctx.stores.jobs, &ns, &mut jobs, deadline, now).await;
    ReplFacts {
        schedule: Sched::parse(&r.spec.schedule, &uid, repo_tz.as_deref()),
        status: r.status.clone().unwrap_or_default(),
        suspend: r.spec.suspend,
        gate,
        destination,
        jobs,
        request: scheduled_run::run_request(r.annotations()),
        missing_secrets: ctx.missing_secrets(&ns, &secrets),
        reverify_requested_at: repo.and_then(RepoView::reverify_requested_at),
        pod_recheck,
    }
}

/// Creates the run's Job (idempotent by name).
async fn launch(ctx: &Context, r: &RepositoryReplication, rv: &RepoView, l: &Launch) -> Result<(), Error> {
    let ns = r.namespace().unwrap_or_default();
    let job = replication_job(r, &ctx.config, rv, l)?;
    if ctx.create_mover_job(&ns, &job, "replication").await? {
        tracing::info!(replication = %r.name_any(), namespace = %ns, job = %job.name_any(), "replication Job created");
    }
    Ok(())
}

fn replication_job(
    r: &RepositoryReplication,
    config: &crate::config::Config,
    repo: &RepoView,
    l: &Launch,
) -> Result<Job, Error> {
    let ns = r.namespace().unwrap_or_default();
    let name = r.name_any();
    let mut annotations = BTreeMap::from([
        (annotation::REPLICATION_SLOT.to_string(), rfc3339(l.at)),
        (
            annotation::RUN_TRIGGER.to_string(),
            if l.manual.is_some() { run_trigger::MANUAL } else { run_trigger::CRON }.to_string(),
        ),
    ]);
    if let Some(raw) = &l.manual {
        annotations.insert(scheduled_run::RUN_REQUESTED_VALUE.to_string(), raw.clone());
    }
    let sync = r.spec.sync.clone().unwrap_or_default();
    scheduled_run::build(MoverJob {
        name: kopiur_mover::job::job_name(&format!("{name}-repl-{}", l.slot.timestamp())),
        namespace: ns.clone(),
        target: crate::mover_job::target_of(r),
        owner: owner_of(r),
        repo,
        // docs/design/mover.md §2.2: a replication connects as `kopiur-ops` at the source
        // repository's lease host (never the maintenance owner `kopiur@<lease host>`).
        identity: repo.ops_identity(),
        read_only: true,
        operation: Operation::Replicate(ReplicateOp {
            destination: kopia_backend(&r.spec.destination)?,
            sync: SyncOptions {
                delete: sync.delete_extra.unwrap_or(false),
                parallel: sync.parallel.map(|p| p.max(1) as u32),
                must_exist: sync.must_exist.unwrap_or(false),
                times: sync.times.unwrap_or(false),
                update: sync.update,
                max_download_speed: sync.max_download_speed_bytes_per_second.map(|v| v.max(1) as u64),
                max_upload_speed: sync.max_upload_speed_bytes_per_second.map(|v| v.max(1) as u64),
            },
        }),
        destination_secret: destination_secret(&r.spec.destination),
        labels: BTreeMap::from([
            (label::REPLICATION.to_string(), name),
            (label::COMPONENT.to_string(), component::REPLICATION.to_string()),
        ]),
        annotations,
        failure_policy: None,
        mover: r.spec.mover.as_ref(),
        config,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s3(bucket: &str, prefix: Option<&str>) -> Backend {
        serde_json::from_value(
            serde_json::json!({"s3": {"bucket": bucket, "endpoint": "http://g:3900", "prefix": prefix}}),
        )
        .unwrap()
    }

    #[test]
    fn same_target_compares_the_storage_key() {
        assert!(same_target(&s3("b1", Some("x/")), &s3("b1", Some("x"))));
        assert!(!same_target(&s3("b1", Some("x/")), &s3("b1", Some("y/"))));
        assert!(!same_target(&s3("b1", None), &s3("b2", None)));
        let fs: Backend = serde_json::from_value(serde_json::json!({"filesystem": {"path": "/b1"}})).unwrap();
        assert!(!same_target(&s3("b1", None), &fs), "different kinds are different storage");
        let gcs = |bucket: &str| -> Backend {
            serde_json::from_value(serde_json::json!({"gcs": {"bucket": bucket}})).unwrap()
        };
        assert!(same_target(&gcs("g1"), &gcs("g1")), "an identical spec of another kind is the same storage");
        assert!(!same_target(&gcs("g1"), &gcs("g2")));
        assert!(!same_target(&gcs("g1"), &fs));
        assert_eq!(describe(&s3("b1", Some("x/"))), "s3 http://g:3900 b1/x");
    }
}

#[cfg(test)]
mod job_tests {
    use super::*;
    use crate::scheduled_run::mover_rows;
    use chrono::TimeZone;
    use serde_json::{Value, json};

    fn replication(mover: &Value, destination: Value) -> RepositoryReplication {
        let mut r = json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "RepositoryReplication",
            "metadata": {"name": "rr", "namespace": "apps", "uid": "u-rr"},
            "spec": {"sourceRef": {"name": "r"}, "destination": destination, "schedule": {"cron": "0 3 * * *"}}
        });
        if !mover.is_null() {
            r["spec"]["mover"] = mover.clone();
        }
        serde_json::from_value(r).unwrap()
    }

    fn mirror() -> Value {
        json!({"s3": {"bucket": "mirror", "endpoint": "http://s3:3900", "region": "garage",
                      "auth": {"secretRef": {"name": "mirror"}}}})
    }

    fn build(r: &RepositoryReplication, repo: &RepoView) -> Result<Job, Error> {
        let at = Utc.with_ymd_and_hms(2026, 7, 17, 3, 0, 0).unwrap();
        replication_job(r, &crate::config::Config::from_env(), repo, &Launch { slot: at, at, manual: None })
    }

    /// docs/design/mover.md §2.2: a replication connects as `kopiur-ops` at the source
    /// repository's lease host, read-only, for a Repository and a ClusterRepository alike.
    #[test]
    fn the_replication_connects_as_kopiur_ops_at_the_lease_host() {
        let ns_repo = mover_rows::repo(&Value::Null);
        let cluster: kopiur_api::ClusterRepository = serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "ClusterRepository",
            "metadata": {"name": "Shared_Repo", "uid": "u-c"},
            "spec": {"backend": {"s3": {"bucket": "b", "endpoint": "http://s3:3900", "region": "garage"}},
                     "encryption": {"passwordSecretRef": {"name": "pw"}},
                     "allowedNamespaces": {"all": true}}
        }))
        .unwrap();
        let lease_host = crate::repo_view::lease_host(&cluster);
        assert_eq!(lease_host, "kopiur.clusterrepository.shared-repo", "the lease host is sanitized");
        let cluster = RepoView::Cluster(std::sync::Arc::new(cluster));
        for (repo, host) in [(&ns_repo, "kopiur.apps.r".to_string()), (&cluster, lease_host)] {
            let job = build(&replication(&Value::Null, mirror()), repo).unwrap();
            let pod = job.spec.unwrap().template.spec.unwrap();
            let ws = mover_rows::work_spec(&pod);
            assert_eq!(
                ws["repository"]["clientIdentity"],
                json!({"username": "kopiur-ops", "hostname": host}),
                "the replication identity: {ws}"
            );
            assert_eq!(ws["repository"]["readOnly"], true, "the source is opened read-only");
            assert!(ws["operation"]["Replicate"].is_object(), "{ws}");
        }
    }

    /// docs/design/api-contract.md §11 `mover`: every mover setting of the source repository's `moverDefaults`
    /// and the replication's own `mover` reaches the replication Job's pod, in merge order.
    #[test]
    fn every_mover_setting_reaches_the_replication_pod_in_merge_order() {
        for (name, defaults, mover, check) in mover_rows::rows() {
            let job = build(&replication(&mover, mirror()), &mover_rows::repo(&defaults))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let js = job.spec.clone().unwrap();
            let pod = js.template.spec.clone().unwrap();
            check(&pod, &js);
            // The destination's Secret still arrives prefixed, key by key.
            let env = pod.containers[0].env.clone().unwrap_or_default();
            assert!(
                env.iter().any(|e| e.name.starts_with("KOPIUR_DEST_")
                    && e.value_from.as_ref().and_then(|f| f.secret_key_ref.as_ref()).map(|s| s.name.as_str())
                        == Some("mirror")),
                "{name}: {env:?}"
            );
            assert!(pod.containers[0].env_from.is_none(), "{name}: no envFrom");
        }
        for (name, defaults, mover) in mover_rows::privileged() {
            match build(&replication(&mover, mirror()), &mover_rows::repo(&defaults)) {
                Err(Error::MoverRefused(r)) => assert!(r.message.contains("privileged"), "{name}: {}", r.message),
                other => panic!("{name}: expected a refusal, got {other:?}"),
            }
        }
    }

    /// docs/design/api-contract.md §1.8, §15: a destination Secret referenced in another namespace is refused
    /// (`CrossNamespaceReference`, Stalled, no Job even when a run is requested); the same
    /// namespace, or none, is usable.
    #[test]
    fn a_cross_namespace_destination_secret_stalls_the_replication() {
        use super::super::plan::{ReplFacts, plan};
        use crate::conditions::CondStatus;
        use crate::scheduled_run::RunRequest;
        use kopiur_api::names::reason;
        let dest = |ns: Option<&str>| -> Backend {
            let mut v = mirror();
            if let Some(ns) = ns {
                v["s3"]["auth"]["secretRef"]["namespace"] = ns.into();
            }
            serde_json::from_value(v).unwrap()
        };
        let source = mover_rows::repo(&Value::Null).common().backend.clone();
        assert_eq!(destination_verdict(&dest(None), "apps", Some(&source)), Destination::Usable);
        assert_eq!(destination_verdict(&dest(Some("apps")), "apps", Some(&source)), Destination::Usable);
        let verdict = destination_verdict(&dest(Some("vault")), "apps", Some(&source));
        let Destination::CrossNamespace(message) = verdict.clone() else { panic!("{verdict:?}") };
        assert!(message.contains("vault") && message.contains("apps"), "{message}");
        // The same storage as the source is its own refusal.
        assert_eq!(destination_verdict(&source, "apps", Some(&source)), Destination::IsSource);

        let now = Utc.with_ymd_and_hms(2026, 7, 17, 3, 0, 0).unwrap();
        let facts = ReplFacts {
            schedule: Sched::parse(&kopiur_api::shared::CronSpec::new("* * * * *"), "u-rr", None),
            status: Default::default(),
            suspend: false,
            gate: crate::gating::Gate::Open,
            destination: verdict,
            jobs: vec![],
            request: RunRequest::Requested("2026-07-17T03:00:00Z".into()),
            missing_secrets: vec![],
            reverify_requested_at: None,
            pod_recheck: None,
        };
        let d = plan(&facts, now);
        assert!(d.launch.is_none(), "no Job");
        let cond = |t: &str| d.conditions.iter().find(|c| c.type_ == t).map(|c| (c.status, c.reason.as_str()));
        assert_eq!(cond("Ready"), Some((CondStatus::False, reason::CROSS_NAMESPACE_REFERENCE)));
        assert_eq!(cond("Stalled"), Some((CondStatus::True, reason::CROSS_NAMESPACE_REFERENCE)));
        let ready = d.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.message, message);
    }
}
