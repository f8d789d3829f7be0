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
use kopiur_kopia::cmd::{Identity, SyncOptions};
use kopiur_mover::workspec::{Operation, ReplicateOp, TargetRef};
use kube::api::PostParams;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};

use super::plan::{Destination, Launch, ReplFacts, plan};
use crate::maintenance::common::{self, MoverJob, RunJob, Sched, rfc3339};
use crate::maintenance::runtime::RunCtx;
use crate::repository::Error;
use crate::repository::apply::kopia_backend;
use crate::snapshot::ctx::RepoView;
use crate::snapshot::job::owner_of;

fn warned() -> &'static Mutex<HashSet<(String, String)>> {
    static W: OnceLock<Mutex<HashSet<(String, String)>>> = OnceLock::new();
    W.get_or_init(Default::default)
}

/// The Jobs this replication owns (label `…/replication=<name>`, owner uid).
pub fn jobs_of(ctx: &RunCtx, r: &RepositoryReplication) -> Vec<RunJob> {
    let ns = r.namespace();
    let uid = r.uid().unwrap_or_default();
    let name = r.name_any();
    ctx.jobs
        .state()
        .iter()
        .filter(|j| j.namespace() == ns)
        .filter(|j| j.labels().get(label::REPLICATION) == Some(&name))
        .filter(|j| j.owner_references().iter().any(|o| o.uid == uid))
        .map(|j| common::run_job(j, annotation::REPLICATION_SLOT))
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

/// Whether two backends name the same storage (the same-target key of api §11).
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
    match b {
        Backend::S3(s) => s.auth.as_ref().and_then(|a| a.secret_ref.as_ref()).map(|r| r.name.clone()),
        Backend::Filesystem(_)
        | Backend::Azure(_)
        | Backend::Gcs(_)
        | Backend::B2(_)
        | Backend::Sftp(_)
        | Backend::WebDav(_)
        | Backend::Rclone(_)
        | Backend::Gdrive(_) => None,
    }
}

/// X (spec/api.md §11): the destination's Secret lives in this CR's namespace; Some(message)
/// when `auth.secretRef.namespace` names another one.
fn destination_secret_namespace(b: &Backend, ns: &str) -> Option<String> {
    let Backend::S3(s) = b else { return None };
    let other = s.auth.as_ref()?.secret_ref.as_ref()?.namespace.as_deref().filter(|n| *n != ns)?;
    Some(format!(
        "spec.destination.s3.auth.secretRef.namespace is {other}, but the replication mover runs in {ns} and reads \
         the destination's Secret only from there; put the Secret in {ns} and remove the namespace"
    ))
}

pub async fn reconcile(r: Arc<RepositoryReplication>, ctx: Arc<RunCtx>) -> Result<Action, Error> {
    ctx.metrics.reconciliations.inc(&["RepositoryReplication"]);
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
    let repo_tz = repo.as_ref().and_then(|x| x.common().schedule_defaults.as_ref()).and_then(|s| s.timezone.clone());
    let destination = match (kopia_backend(&r.spec.destination), &repo) {
        (Err(e), _) => Destination::NotImplemented(e.to_string().replace("spec.backend", "spec.destination")),
        // Refused rather than ignored: a destination's CA bundle or volume is not mounted yet.
        (Ok(_), _) if crate::repository::mounts::destination_refusal(&r.spec.destination).is_some() => {
            Destination::NotImplemented(
                crate::repository::mounts::destination_refusal(&r.spec.destination).unwrap_or_default(),
            )
        }
        (Ok(_), _) if destination_secret_namespace(&r.spec.destination, &ns).is_some() => {
            Destination::CrossNamespace(destination_secret_namespace(&r.spec.destination, &ns).unwrap_or_default())
        }
        (Ok(_), Some(src)) if same_target(&src.common().backend, &r.spec.destination) => Destination::IsSource,
        (Ok(_), _) => Destination::Usable,
    };
    let mut secrets = repo.as_ref().map(RepoView::secret_names).unwrap_or_default();
    secrets.extend(destination_secret(&r.spec.destination));
    let mut jobs = jobs_of(&ctx, &r);
    // RepositoryReplication has no failurePolicy (api §11): the default deadline applies.
    let deadline =
        chrono::Duration::seconds(kopiur_api::shared::FailurePolicy::resolved_pod_startup_deadline_seconds(None));
    let pod_recheck = common::check_pods(&ctx.client, &ctx.jobs, &ns, &mut jobs, deadline, now).await;
    let facts = ReplFacts {
        schedule: Sched::parse(&r.spec.schedule, &uid, repo_tz.as_deref()),
        status: status.clone(),
        suspend: r.spec.suspend,
        gate,
        destination,
        jobs,
        request: common::run_request(r.annotations()),
        missing_secrets: ctx.missing_secrets(&ns, &secrets),
        reverify_requested_at: repo.as_ref().and_then(RepoView::reverify_requested_at),
        pod_recheck,
    };
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
        ctx.metrics.replication_runs.inc(&["RepositoryReplication", trigger, outcome]);
    }
    if d.nudge
        && let Some(rv) = &repo
        && let Err(e) = ctx.nudge(rv, now).await
    {
        tracing::warn!(error = %e, replication = %name, "stamping reverify-requested-at failed");
    }
    if let (Some(l), Some(rv)) = (&d.launch, &repo) {
        let job = replication_job(&r, &ctx, rv, l)?;
        ctx.ensure_mover_rbac(&ns).await?;
        match Api::<Job>::namespaced(ctx.client.clone(), &ns).create(&PostParams::default(), &job).await {
            Ok(_) => {
                ctx.metrics.jobs_created.inc(&["replication", &ns]);
                tracing::info!(replication = %name, namespace = %ns, job = %job.name_any(), "replication Job created");
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    let mut next = d.status.clone();
    next.observed_generation = r.meta().generation;
    next.destination_backend = Some(describe(&r.spec.destination));
    next.conditions =
        crate::snapshot::ctx::merge(&status.conditions, &d.conditions, r.meta().generation.unwrap_or(0), now);
    // Unchanged counts as landed; a lost conflict re-decides on the newer object.
    let written = status == next
        || common::write_status(
            &Api::<RepositoryReplication>::namespaced(ctx.client.clone(), &ns),
            r.as_ref(),
            &status,
            &next,
        )
        .await?;
    if written {
        // After the failed run is on record: deleting first would lose it if the write lost.
        common::delete_wedged(&ctx.client, &ctx.jobs, &ns, &d.delete_jobs).await;
        if let Some(message) = &d.wedged {
            ctx.event(&reference, true, event::MOVER_POD_WEDGED, message.clone()).await;
        }
    }
    Ok(Action::requeue(d.requeue))
}

fn replication_job(r: &RepositoryReplication, ctx: &RunCtx, repo: &RepoView, l: &Launch) -> Result<Job, Error> {
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
        annotations.insert(common::RUN_REQUESTED_VALUE.to_string(), raw.clone());
    }
    let sync = r.spec.sync.clone().unwrap_or_default();
    let host: String = format!("{ns}.{name}")
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '-' })
        .collect();
    common::build(MoverJob {
        name: kopiur_mover::job::job_name(&format!("{name}-repl-{}", l.slot.timestamp())),
        namespace: ns.clone(),
        target: TargetRef {
            api_version: RepositoryReplication::api_version(&()).to_string(),
            kind: "RepositoryReplication".into(),
            namespace: Some(ns),
            name: name.clone(),
            uid: r.uid().unwrap_or_default(),
        },
        owner: owner_of(r),
        repo,
        identity: Identity::new("kopiur-replication", host),
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
        config: &ctx.config,
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
