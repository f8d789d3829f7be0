//! Pieces the Maintenance and RepositoryReplication reconcilers share: pinned cron slots, the
//! `run-requested` annotation, owned-Job observation, the kstatus trio and the mover Job.
pub mod watch;

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kopiur_api::Duration as ApiDuration;
use kopiur_api::domain::cron::{Cron, NextSlot, effective_timezone, next_slot, parse_timezone};
use kopiur_api::names::{annotation, condition};
use kopiur_api::shared::{CronSpec, FailurePolicy};
use kopiur_kopia::cmd::{CacheSizes, Identity};
use kopiur_mover::job::{JobInput, build_job};
use kopiur_mover::workspec::{
    DEFAULT_COMMAND_TIMEOUT_SECONDS, DEFAULT_HEARTBEAT_SECONDS, Operation, RepositoryInfo, SCHEMA_VERSION, TargetRef,
    WorkSpec,
};
use kube::ResourceExt;

use crate::conditions::{Cond, CondStatus};
use crate::error::Error;
use crate::repo_view::RepoView;
use crate::run_job::JobState;

/// One cron tier, parsed for one object (its `H` fields and jitter hash on the uid).
#[derive(Clone, Debug)]
pub struct Sched {
    pub cron: Cron,
    pub timezone: String,
    pub jitter: Option<ApiDuration>,
    pub uid: String,
}

impl Sched {
    /// Parses a CronSpec; the zone falls back to `fallback_tz` (the enclosing object's or the
    /// repository's default), then UTC.
    pub fn parse(spec: &CronSpec, uid: &str, fallback_tz: Option<&str>) -> Result<Sched, String> {
        let cron = Cron::parse(&spec.cron, uid).map_err(|e| format!("cron {:?}: {e}", spec.cron))?;
        let timezone = effective_timezone(spec.timezone.as_deref(), fallback_tz).to_string();
        parse_timezone(&timezone).map_err(|e| e.to_string())?;
        Ok(Sched { cron, timezone, jitter: spec.jitter.clone(), uid: uid.to_string() })
    }

    /// The first slot strictly after `after`, with its fire time.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<NextSlot> {
        let tz = parse_timezone(&self.timezone).ok()?;
        next_slot(&self.cron, &self.uid, after, tz, self.jitter.as_ref()).ok()
    }

    /// The slot whose fire time is exactly `at`, if `at` is one of this schedule's fire times.
    /// A cron, jitter or zone edit leaves a stale pin that maps to no slot, which re-pins.
    pub fn slot_of(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let j = self.jitter.as_ref().map(|d| d.as_secs()).unwrap_or(0) as i64;
        let mut t = at - Duration::seconds(j + 60);
        for _ in 0..4096 {
            let n = self.next_after(t)?;
            if n.slot > at {
                return None;
            }
            if n.at == at {
                return Some(n.slot);
            }
            t = n.slot;
        }
        None
    }

    /// `pinned` if it is still a fire time of this schedule and no later than the next one
    /// (a due pin stays due), else the next slot after `now`: a cron, jitter or zone edit
    /// re-pins even when the old fire time happens to fit the new cron.
    pub fn pin(&self, pinned: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Option<NextSlot> {
        let next = self.next_after(now);
        if let Some(at) = pinned
            && let Some(slot) = self.slot_of(at)
            && next.is_none_or(|n| at <= n.at)
        {
            return Some(NextSlot { slot, at });
        }
        next
    }
}

/// The `run-requested` annotation, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunRequest {
    None,
    /// Not RFC 3339: ignored, with one Warning `InvalidRunRequest`.
    Malformed(String),
    /// The raw value (what `status.manualRun.requestedAt` records).
    Requested(String),
}

pub fn run_request(annotations: &BTreeMap<String, String>) -> RunRequest {
    match annotations.get(annotation::RUN_REQUESTED) {
        None => RunRequest::None,
        Some(v) if v.trim().is_empty() => RunRequest::None,
        Some(v) => match DateTime::parse_from_rfc3339(v.trim()) {
            Ok(_) => RunRequest::Requested(v.trim().to_string()),
            Err(_) => RunRequest::Malformed(v.clone()),
        },
    }
}

/// Annotation on maintenance and replication Jobs: the raw `run-requested` value a manual run
/// answers.
pub const RUN_REQUESTED_VALUE: &str = annotation::RUN_REQUESTED;

/// One of this object's Jobs as the plans see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunJob {
    pub name: String,
    pub created: DateTime<Utc>,
    /// The fire time (scheduled) or launch time (manual) in the slot annotation.
    pub slot_at: DateTime<Utc>,
    /// `Some(raw run-requested)` for a manual run.
    pub manual: Option<String>,
    /// `quick` / `full` for maintenance; empty for replication.
    pub mode: String,
    pub state: JobState,
    /// The wedged-pod check of an active Job (`crate::wedged`, filled in by [`check_pods`]);
    /// `NotWedged { recheck_at: None }` when nobody looked.
    pub pods: crate::wedged::Verdict,
}

impl RunJob {
    /// The wedged-pod message of an active Job whose pod is wedged.
    pub fn wedged(&self) -> Option<&str> {
        match (&self.state, &self.pods) {
            (JobState::Active, crate::wedged::Verdict::Wedged { message }) => Some(message),
            (JobState::Active, crate::wedged::Verdict::NotWedged { .. })
            | (JobState::Absent | JobState::Complete { .. } | JobState::Failed { .. }, _) => None,
        }
    }
}

/// The wedged-pod check (docs/design/architecture.md §1.4) of every active Job among `jobs` (at most one under single
/// flight), against the Jobs in `store`: sets each one's `pods` verdict and returns how soon a
/// Job still under watch wants to be looked at again (capped at the 300 s safety net).
pub async fn check_pods(
    client: &kube::Client,
    store: &kube::runtime::reflector::Store<Job>,
    namespace: &str,
    jobs: &mut [RunJob],
    deadline: Duration,
    now: DateTime<Utc>,
) -> Option<std::time::Duration> {
    let mut recheck: Option<Duration> = None;
    for rj in jobs.iter_mut().filter(|j| j.state == JobState::Active) {
        let Some(job) = store.get(&kube::runtime::reflector::ObjectRef::new(&rj.name).within(namespace)) else {
            continue;
        };
        rj.pods = crate::wedged::io::check(client, &job, deadline, now).await;
        if let crate::wedged::Verdict::NotWedged { recheck_at } = &rj.pods
            && let Some(after) = crate::wedged::requeue_after(
                deadline,
                crate::wedged::io::job_created(&job),
                *recheck_at,
                now,
                Duration::seconds(300),
            )
        {
            recheck = Some(recheck.map_or(after, |r| r.min(after)));
        }
    }
    recheck.and_then(|r| r.to_std().ok())
}

/// Deletes the named wedged Jobs (found in `store`; Background propagation, uid precondition).
pub async fn delete_wedged(
    client: &kube::Client,
    store: &kube::runtime::reflector::Store<Job>,
    namespace: &str,
    names: &[String],
) {
    for name in names {
        if let Some(job) = store.get(&kube::runtime::reflector::ObjectRef::new(name).within(namespace)) {
            crate::wedged::io::delete_job(client, &job).await;
        }
    }
}

/// Reads a Job's run annotations (`slot_key` holds the slot as RFC 3339, `run-mode` the
/// maintenance mode).
pub fn run_job(job: &Job, slot_key: &str) -> RunJob {
    let a = job.annotations();
    let created = job.metadata.creation_timestamp.as_ref().map(|t| t.0).map(to_chrono).unwrap_or_default();
    let slot_at = a
        .get(slot_key)
        .and_then(|v| DateTime::parse_from_rfc3339(v).ok())
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or(created);
    let manual = match a.get(annotation::RUN_TRIGGER).map(String::as_str) {
        Some(kopiur_api::names::run_trigger::MANUAL) => Some(a.get(RUN_REQUESTED_VALUE).cloned().unwrap_or_default()),
        Some(_) | None => None,
    };
    let mode = a.get(annotation::RUN_MODE).cloned().unwrap_or_default();
    RunJob {
        name: job.name_any(),
        created,
        slot_at,
        manual,
        mode,
        state: crate::run_job::job_state(Some(job)),
        pods: crate::wedged::Verdict::NotWedged { recheck_at: None },
    }
}

pub fn to_chrono(t: k8s_openapi::jiff::Timestamp) -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp(t.as_second(), 0).unwrap_or_default()
}

pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

use crate::conditions::cond;

pub fn lease_cond(owned: bool, reason: &str, message: impl Into<String>) -> Cond {
    cond(condition::LEASE_OWNED, if owned { CondStatus::True } else { CondStatus::False }, reason, message)
}

/// How soon a run waiting for its Secrets looks again (a Secret event wakes it sooner).
pub const CREDENTIALS_RECHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// The conditions of a due run whose Secrets are missing: it waits, naming them.
pub fn waiting_for_secrets(missing: &[String]) -> Vec<Cond> {
    crate::conditions::trio(
        crate::conditions::Standing::Waiting,
        kopiur_api::names::reason::MISSING_CREDENTIALS_SECRET,
        format!("Secret(s) {} missing in this namespace", missing.join(", ")),
    )
}

/// Everything one mover Job of a maintenance or replication run needs.
pub struct MoverJob<'a> {
    pub name: String,
    pub namespace: String,
    pub target: TargetRef,
    pub owner: OwnerReference,
    pub repo: &'a RepoView,
    pub identity: Identity,
    pub read_only: bool,
    pub operation: Operation,
    pub destination_secret: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub failure_policy: Option<&'a FailurePolicy>,
    /// The recipe's `mover` block, merged over the repository's `moverDefaults`.
    pub mover: Option<&'a kopiur_api::shared::MoverSpec>,
    pub config: &'a crate::config::Config,
}

pub fn build(m: MoverJob<'_>) -> Result<Job, Error> {
    let repo = m.repo;
    let mounts =
        crate::mounts::for_job(&repo.common().backend, &repo.home_namespace(&m.config.namespace), &m.namespace)?;
    let fp = m.failure_policy;
    let deadline_seconds =
        fp.and_then(|f| f.active_deadline_seconds).unwrap_or(kopiur_mover::job::DEFAULT_ACTIVE_DEADLINE_SECONDS);
    let spec = WorkSpec {
        schema_version: SCHEMA_VERSION,
        target_ref: m.target,
        repository: RepositoryInfo {
            kind: repo.kind().to_string(),
            namespace: repo.namespace(),
            name: repo.name(),
            uid: repo.uid(),
            backend: mounts.backend.clone(),
            client_identity: m.identity,
            read_only: m.read_only || repo.read_only(),
            cache: CacheSizes::default(),
        },
        command_timeout_seconds: DEFAULT_COMMAND_TIMEOUT_SECONDS,
        heartbeat_seconds: DEFAULT_HEARTBEAT_SECONDS,
        // The connect may take as long as the Job may run (for bootstrap, the adaptive
        // deadline; maintenance is what compacts a slow repository's index); the mover's own
        // bound comes after the Job deadline, whose verdict tells slow from down.
        connect_timeout_seconds: kopiur_mover::workspec::connect_backstop(deadline_seconds),
        operation: m.operation,
    };
    let names = repo.secret_names();
    let key = repo.common().encryption.password_secret_ref.resolved_key().to_string();
    let input = JobInput {
        destination_secret: m.destination_secret,
        annotations: m.annotations,
        active_deadline_seconds: deadline_seconds,
        ..crate::mover_job::input(
            m.config,
            crate::mover_job::Identity {
                name: m.name,
                namespace: m.namespace,
                owner: m.owner,
                work_spec: spec,
                password: (names[0].clone(), key),
                env_from_secrets: names,
            },
            &mounts,
            fp,
        )
    };
    let mut input = input;
    crate::mover_settings::resolve(
        repo.common().mover_defaults.as_ref(),
        m.mover,
        crate::mover_settings::MoverOp::Other,
        false,
    )
    .map_err(Error::MoverRefused)?
    .apply(&mut input, true);
    let mut job = build_job(&input).map_err(Error::from)?;
    let labels = job.metadata.labels.get_or_insert_with(Default::default);
    labels.extend(m.labels.clone());
    if let Some(t) = job.spec.as_mut().and_then(|s| s.template.metadata.as_mut()) {
        t.labels.get_or_insert_with(Default::default).extend(m.labels);
    }
    Ok(job)
}

/// The requeue for a pinned fire time: until it, at least 1 s, at most the 300 s safety net.
pub fn until(at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> std::time::Duration {
    let safety = std::time::Duration::from_secs(300);
    match at {
        Some(at) => (at - now).to_std().unwrap_or_default().clamp(std::time::Duration::from_secs(1), safety),
        None => safety,
    }
}

/// The shared mover-settings table (`crate::mover_rows`) and a repository to build against.
#[cfg(test)]
pub mod mover_rows {
    pub use crate::mover_rows::{privileged, rows, work_spec};
    use serde_json::{Value, json};

    /// A namespaced Repository `apps/r` with `moverDefaults` (unless null).
    pub fn repo(defaults: &Value) -> crate::repo_view::RepoView {
        let mut repo = json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
            "metadata": {"name": "r", "namespace": "apps", "uid": "u-r"},
            "spec": {"backend": {"s3": {"bucket": "b", "endpoint": "http://s3:3900", "region": "garage",
                                        "auth": {"secretRef": {"name": "s3"}}}},
                     "encryption": {"passwordSecretRef": {"name": "pw", "key": "password"}}}
        });
        if !defaults.is_null() {
            repo["spec"]["moverDefaults"] = defaults.clone();
        }
        crate::repo_view::RepoView::Namespaced(std::sync::Arc::new(serde_json::from_value(repo).unwrap()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(h: u32, m: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 7, 17, h, m, s).unwrap()
    }

    #[test]
    fn slot_of_inverts_the_jittered_fire_time() {
        let spec = CronSpec::new("*/5 * * * *").with_jitter(ApiDuration::from_secs(600));
        let s = Sched::parse(&spec, "uid-1", None).unwrap();
        let n = s.next_after(t(10, 0, 0)).unwrap();
        assert_eq!(n.slot, t(10, 5, 0));
        assert_eq!(s.slot_of(n.at), Some(n.slot));
        assert_eq!(s.pin(Some(n.at), t(11, 0, 0)).unwrap(), n, "a valid pin is kept, even in the past");
        // A time that is no fire time re-pins after now.
        let other = Sched::parse(&CronSpec::new("0 3 * * *"), "uid-1", None).unwrap();
        assert_eq!(other.slot_of(n.at), None);
        assert_eq!(other.pin(Some(n.at), t(11, 0, 0)).unwrap().slot, t(3, 0, 0) + Duration::days(1));
        // An edit to a denser cron re-pins even when the old (future) pin fits the new cron.
        let hourly = Sched::parse(&CronSpec::new("0 * * * *"), "uid-1", None).unwrap();
        let minutely = Sched::parse(&CronSpec::new("* * * * *"), "uid-1", None).unwrap();
        let old = hourly.next_after(t(10, 0, 30)).unwrap().at;
        assert_eq!(old, t(11, 0, 0));
        assert_eq!(minutely.pin(Some(old), t(10, 0, 30)).unwrap().at, t(10, 1, 0));
        assert_eq!(minutely.pin(Some(t(10, 1, 0)), t(10, 0, 40)).unwrap().at, t(10, 1, 0), "a current pin is kept");
    }

    #[test]
    fn run_request_parses() {
        let mut a = BTreeMap::new();
        assert_eq!(run_request(&a), RunRequest::None);
        a.insert(annotation::RUN_REQUESTED.to_string(), "tomorrow".into());
        assert_eq!(run_request(&a), RunRequest::Malformed("tomorrow".into()));
        a.insert(annotation::RUN_REQUESTED.to_string(), "2026-07-17T10:00:00Z".into());
        assert_eq!(run_request(&a), RunRequest::Requested("2026-07-17T10:00:00Z".into()));
    }

    #[test]
    fn trio_has_exactly_one_true() {
        use crate::conditions::{Standing, trio};
        for s in [Standing::Ready, Standing::Waiting, Standing::Stalled] {
            let c = trio(s, "R", "m");
            assert_eq!(c.iter().filter(|c| c.status == CondStatus::True).count(), 1);
        }
    }
}
