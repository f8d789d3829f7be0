//! Observe: gather one repository's facts from reflector stores (and, once per finished Job,
//! its result ConfigMap) into the plain `RepoFacts` the breaker decides over.
use crate::error::ApiStep;
use chrono::{DateTime, Utc};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kopiur_api::names::annotation;
use kopiur_api::repository::RepositoryMode;
use kopiur_api::shared::Backend;
use kopiur_kopia::classify::ErrorClass;
use kopiur_mover::result::{BootstrapOutcome, BootstrapResult};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};

use crate::context::Context;
use crate::error::Error;
use crate::health::{
    ConnectKind, ConnectResult, JobFacts, JobState, ProbeSettings, ProbeTrigger, RepoFacts, RepoIdentity, SpecFacts,
};
use crate::repo_view::{RepoObject, secret_names};

/// Annotations the controller writes on its own bootstrap Jobs.
pub const ANN_CREDENTIAL_VERSION: &str = "kopiur.home-operations.com/credential-version";
pub const ANN_PROBE_KIND: &str = "kopiur.home-operations.com/probe-kind";
pub const ANN_CREATE_GATE: &str = "kopiur.home-operations.com/create-gate";
/// `"true"` on a strict connect launched early because the endpoint answered again.
pub const ANN_EARLY_STRICT: &str = "kopiur.home-operations.com/early-strict";
pub const GATE_VIA_ACK: &str = "AllowedViaReinitAck";
/// Present on a bootstrap Job that lists snapshots for the catalog; the value is the
/// `catalog-scan-requested-at` token the listing honors (empty for none).
pub const ANN_CATALOG_SCAN: &str = "kopiur.home-operations.com/catalog-scan";

/// A finished listing Job's result, read once: in the reconcile that folds the Job.
#[derive(Clone, Debug)]
pub struct CatalogListing {
    pub job_uid: String,
    pub token: String,
    pub completed_at: DateTime<Utc>,
    pub result: BootstrapResult,
}

pub fn job_name<K: RepoObject>(obj: &K) -> String {
    kopiur_mover::job_name(&obj.job_base_name())
}

pub fn result_configmap_name(job: &str) -> String {
    format!("{job}-result")
}

/// `s3://<bucket>/<prefix>` or `filesystem:<path>`, for messages.
pub fn target(backend: &Backend) -> String {
    match backend {
        Backend::S3(s) => format!("s3://{}/{}", s.bucket, s.prefix.as_deref().unwrap_or("")),
        Backend::Filesystem(f) => format!("filesystem:{}", f.path),
        Backend::Azure(b) => format!("azure://{}/{}", b.container, b.prefix.as_deref().unwrap_or("")),
        Backend::Gcs(b) => format!("gcs://{}/{}", b.bucket, b.prefix.as_deref().unwrap_or("")),
        Backend::B2(b) => format!("b2://{}/{}", b.bucket, b.prefix.as_deref().unwrap_or("")),
        Backend::Sftp(b) => format!("sftp://{}{}", b.host, b.path),
        Backend::WebDav(b) => b.url.clone(),
        Backend::Rclone(b) => format!("rclone:{}", b.remote_path),
        Backend::Gdrive(b) => format!("gdrive:{}", b.folder_id),
    }
}

fn secret_rv(
    store: &kube::runtime::reflector::Store<PartialObjectMeta<Secret>>,
    ns: &str,
    name: &str,
) -> Option<String> {
    store.get(&ObjectRef::new(name).within(ns)).map(|s| s.metadata.resource_version.clone().unwrap_or_default())
}

/// `"<pwRV>/<authRV>"`, or None while a referenced Secret is missing.
pub fn credential_version<K: RepoObject>(obj: &K, ctx: &Context) -> Option<String> {
    let ns = obj.home_namespace(&ctx.config.namespace);
    let (pw, auth) = secret_names(obj);
    let pw_rv = secret_rv(&ctx.stores.secrets, &ns, &pw)?;
    let auth_rv = match auth {
        Some(a) => secret_rv(&ctx.stores.secrets, &ns, &a)?,
        None => String::new(),
    };
    Some(format!("{pw_rv}/{auth_rv}"))
}

fn to_chrono(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> DateTime<Utc> {
    DateTime::from_timestamp(t.0.as_second(), 0).unwrap_or_default()
}

/// The Job's terminal condition: `(completed_at, failed_reason)` once Complete or Failed.
pub fn terminal(job: &Job) -> Option<(DateTime<Utc>, Option<String>)> {
    let conds = job.status.as_ref()?.conditions.as_ref()?;
    conds.iter().find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True").map(|c| {
        let at = c.last_transition_time.as_ref().map(to_chrono).unwrap_or_else(Utc::now);
        let reason = (c.type_ == "Failed").then(|| c.reason.clone().unwrap_or_default());
        (at, reason)
    })
}

pub fn connect_result(result: Option<&BootstrapResult>, job_uid: &str, failed_reason: Option<&str>) -> ConnectResult {
    match result.filter(|r| r.job_uid == job_uid) {
        Some(r) => match (&r.outcome, &r.unique_id_hex, &r.failure) {
            (BootstrapOutcome::Connected | BootstrapOutcome::Created, Some(id), _) if !id.is_empty() => {
                ConnectResult::Connected {
                    unique_id: id.clone(),
                    created: matches!(r.outcome, BootstrapOutcome::Created),
                    index_blob_count: r.index_blob_count,
                }
            }
            (_, _, Some(f)) => ConnectResult::Failed {
                class: ErrorClass::from_label(&f.class),
                not_initialized: f.not_initialized,
                timed_out: f.timed_out,
            },
            // Connected without an id (a repository server) or an empty failure: unknown.
            (BootstrapOutcome::Connected | BootstrapOutcome::Created | BootstrapOutcome::Failed, _, None) => {
                ConnectResult::Failed { class: ErrorClass::Unknown, not_initialized: false, timed_out: false }
            }
        },
        None => ConnectResult::NoResult { deadline_exceeded: failed_reason == Some("DeadlineExceeded") },
    }
}

/// The connect time the result reports for this Job, rounded up to whole seconds (a 70 ms
/// connect is 1 s); None for another Job's result, an older mover or a nonsense value.
pub fn measured_seconds(r: &BootstrapResult, job_uid: &str) -> Option<i64> {
    let s = r.connect_seconds.filter(|_| r.job_uid == job_uid)?;
    (s.is_finite() && s >= 0.0).then(|| (s.ceil() as i64).max(1))
}

async fn read_result(ctx: &Context, ns: &str, job: &str) -> Result<Option<BootstrapResult>, Error> {
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    let Some(cm) = api.get_opt(&result_configmap_name(job)).await.step("read connect result ConfigMap")? else {
        return Ok(None);
    };
    let Some(text) = cm.data.as_ref().and_then(|d| d.get("result.json")) else { return Ok(None) };
    Ok(serde_json::from_str(text).ok())
}

pub async fn job_facts<K: RepoObject>(obj: &K, ctx: &Context) -> Result<Option<JobFacts>, Error> {
    Ok(job_observation(obj, ctx).await?.0)
}

/// The Job's facts, plus its catalog listing when the Job lists and is folded now.
pub async fn job_observation<K: RepoObject>(
    obj: &K,
    ctx: &Context,
) -> Result<(Option<JobFacts>, Option<CatalogListing>), Error> {
    let ns = obj.home_namespace(&ctx.config.namespace);
    let name = job_name(obj);
    let Some(job) = ctx.stores.jobs.get(&ObjectRef::new(&name).within(&ns)) else { return Ok((None, None)) };
    let owner_uid = obj.meta().uid.clone().unwrap_or_default();
    if !job.owner_references().iter().any(|o| o.uid == owner_uid) {
        return Ok((None, None)); // someone else's Job, or one of a deleted namesake
    }
    let uid = job.uid().unwrap_or_default();
    let ann = job.annotations();
    let kind = ann.get(ANN_PROBE_KIND).and_then(|k| ConnectKind::from_probe_kind(k)).unwrap_or(
        match job.labels().get(kopiur_mover::job::LABEL_CONNECT_KIND).map(String::as_str) {
            Some("probe") => ConnectKind::Probe(ProbeTrigger::Periodic),
            Some(_) | None => ConnectKind::Strict,
        },
    );
    let mut listing = None;
    let mut connect_seconds = None;
    let state = match terminal(&job) {
        None => JobState::Running,
        Some((completed_at, failed_reason)) => {
            let folded =
                obj.status_common().and_then(|s| s.health.as_ref()).and_then(|h| h.last_folded_job_uid.as_deref())
                    == Some(uid.as_str());
            // Read the result only when it will be folded (once per Job).
            let result = if folded { None } else { read_result(ctx, &ns, &name).await? };
            connect_seconds = result.as_ref().and_then(|r| measured_seconds(r, &uid));
            let state = JobState::Finished {
                completed_at,
                result: connect_result(result.as_ref(), &uid, failed_reason.as_deref()),
            };
            if let (Some(token), Some(r)) = (ann.get(ANN_CATALOG_SCAN), result)
                && r.job_uid == uid
            {
                listing = Some(CatalogListing { job_uid: uid.clone(), token: token.clone(), completed_at, result: r });
            }
            state
        }
    };
    let facts = Some(JobFacts {
        uid,
        kind,
        generation: ann.get(annotation::BOOTSTRAP_GENERATION).and_then(|g| g.parse().ok()),
        credential_version: ann.get(ANN_CREDENTIAL_VERSION).cloned(),
        via_reinit_ack: ann.get(ANN_CREATE_GATE).map(String::as_str) == Some(GATE_VIA_ACK),
        launched_at: job.metadata.creation_timestamp.as_ref().map(to_chrono),
        early: ann.get(ANN_EARLY_STRICT).map(String::as_str) == Some("true"),
        connect_seconds,
        state,
    });
    Ok((facts, listing))
}

pub fn spec_facts<K: RepoObject>(obj: &K) -> SpecFacts {
    let c = obj.common();
    let p = &c.health.probe;
    SpecFacts {
        generation: obj.meta().generation.unwrap_or(0),
        probe: ProbeSettings {
            enabled: p.enabled,
            interval_seconds: (p.interval.as_secs() as i64).max(30),
            failure_threshold: p.failure_threshold.max(1) as u32,
            on_failure: match p.on_failure {
                kopiur_api::repository::OnFailure::Degrade => crate::health::OnFailure::Degrade,
                kopiur_api::repository::OnFailure::Alert => crate::health::OnFailure::Alert,
            },
        },
        create_enabled: c.create.enabled,
        read_only: match c.mode {
            RepositoryMode::ReadOnly => true,
            RepositoryMode::ReadWrite => false,
        },
        suspended: c.suspend,
        configured_deadline_seconds: c
            .bootstrap
            .as_ref()
            .and_then(|b| b.failure_policy.as_ref())
            .and_then(|f| f.active_deadline_seconds),
    }
}

pub async fn facts<K: RepoObject>(obj: &K, ctx: &Context) -> Result<RepoFacts, Error> {
    Ok(observe(obj, ctx).await?.0)
}

/// The breaker's facts plus the catalog listing of a Job folded in this reconcile.
pub async fn observe<K: RepoObject>(obj: &K, ctx: &Context) -> Result<(RepoFacts, Option<CatalogListing>), Error> {
    let (facts, listing, _) = observe_with_ca(obj, ctx).await?;
    Ok((facts, listing))
}

/// [`observe`], plus the CA bundle's state. A `caBundleRef` ConfigMap joins the credential
/// version (`"<pwRV>/<authRV>/ca:<cmRV>"`): a missing one withholds every Job like a missing
/// Secret, and a changed one reconnects strictly.
pub async fn observe_with_ca<K: RepoObject>(
    obj: &K,
    ctx: &Context,
) -> Result<(RepoFacts, Option<CatalogListing>, crate::mounts::CaState), Error> {
    let ns = obj.home_namespace(&ctx.config.namespace);
    let ca = crate::mounts::ca_state(&ctx.client, &ns, &obj.common().backend).await.step("read CA bundle")?;
    let (mut facts, listing) = observe_inner(obj, ctx).await?;
    match &ca {
        crate::mounts::CaState::NotConfigured => {}
        crate::mounts::CaState::Present { resource_version } => {
            facts.credential_version = facts.credential_version.map(|v| format!("{v}/ca:{resource_version}"));
        }
        crate::mounts::CaState::Missing { .. } => facts.credential_version = None,
    }
    Ok((facts, listing, ca))
}

async fn observe_inner<K: RepoObject>(obj: &K, ctx: &Context) -> Result<(RepoFacts, Option<CatalogListing>), Error> {
    let uid = obj.meta().uid.clone().unwrap_or_default();
    let ann = obj.annotations();
    let (job, listing) = job_observation(obj, ctx).await?;
    let facts = RepoFacts {
        id: RepoIdentity {
            kind: K::KIND,
            namespace: obj.namespace(),
            name: obj.name_any(),
            target: target(&obj.common().backend),
        },
        spec: spec_facts(obj),
        credential_version: credential_version(obj, ctx),
        reinit_ack: ann.get(annotation::ALLOW_REINITIALIZE).cloned(),
        reverify_requested_at: ann.get(annotation::REVERIFY_REQUESTED_AT).cloned(),
        status: super::convert::to_pure(obj.status_common()),
        job,
        warned_ack: ctx.warned_acks.lock().ok().and_then(|m| m.get(&uid).cloned()),
        tuning: ctx.config.tuning,
        // Filled by the shell's cheap endpoint check (`super::endpoint::observe`).
        endpoint: Default::default(),
    };
    Ok((facts, listing))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reported_connect_time_is_read_rounded_up_for_its_own_job_only() {
        let r: BootstrapResult = serde_json::from_value(serde_json::json!({
            "jobUid": "j1", "outcome": "connected", "uniqueIdHex": "ab", "indexBlobCount": 2000,
            "connectSeconds": 89.2
        }))
        .expect("a result document");
        assert_eq!(measured_seconds(&r, "j1"), Some(90));
        assert_eq!(measured_seconds(&r, "j2"), None, "another Job's result");
        let fast = BootstrapResult { connect_seconds: Some(0.073), ..r.clone() };
        assert_eq!(measured_seconds(&fast, "j1"), Some(1));
        let older = BootstrapResult { connect_seconds: None, ..r.clone() };
        assert_eq!(measured_seconds(&older, "j1"), None, "an older mover reports nothing");
        let bad = BootstrapResult { connect_seconds: Some(f64::NAN), ..r };
        assert_eq!(measured_seconds(&bad, "j1"), None);
    }
}
