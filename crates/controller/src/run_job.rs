//! A mover Job as the plans see it, shared by every kind that runs one (backup, restore,
//! maintenance, replication): its state from its conditions ([`job_state`]), and for a run that
//! watches its pods ([`JobFacts`], built by [`observe`]) its age against the pod start-up
//! deadline, the wedged-pod check and what the status already records of the run.
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use k8s_openapi::api::batch::v1::Job;
use kopiur_api::names::condition;
use kopiur_api::shared::FailurePolicy;
use kopiur_api::shared::status::{Condition, Failure};
use kube::Client;

use crate::wedged::Verdict;

/// A mover Job as seen in the store (or by a live GET when the store has not caught up).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState {
    Absent,
    Active,
    Complete { at: Option<DateTime<Utc>> },
    Failed { reason: String },
}

/// A Job's state from its conditions: `Failed` first, then `Complete`, else `Active`; no Job is
/// `Absent`.
pub fn job_state(job: Option<&Job>) -> JobState {
    let Some(job) = job else { return JobState::Absent };
    let conds = job.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    if let Some(c) = conds.iter().find(|c| c.type_ == "Failed" && c.status == "True") {
        return JobState::Failed { reason: c.reason.clone().unwrap_or_else(|| "Failed".into()) };
    }
    if conds.iter().any(|c| c.type_ == "Complete" && c.status == "True") {
        let at = job.status.as_ref().and_then(|s| s.completion_time.as_ref()).map(|t| t.0);
        return JobState::Complete {
            at: at.map(|t| DateTime::<Utc>::from_timestamp(t.as_second(), 0).unwrap_or_default()),
        };
    }
    JobState::Active
}

/// A run's Job as a plan sees it (a Snapshot's backup Job, a Restore's restore Job): its state,
/// its age against the pod start-up deadline, the wedged-pod check, and what the status already
/// records of the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobFacts {
    pub state: JobState,
    /// The Job's creationTimestamp (when there is one).
    pub created: Option<DateTime<Utc>>,
    /// The resolved `failurePolicy.podStartupDeadlineSeconds`.
    pub pod_startup_deadline: Duration,
    /// The wedged-pod check of an active Job (`crate::wedged`); `NotWedged { recheck_at: None }`
    /// when observe did not look (not due, or no active Job).
    pub pods: Verdict,
    /// `status.failure` as the mover left it.
    pub failure: Option<Failure>,
    /// The Ready reason already recorded (e.g. `PreflightTimeout`); a terminal Failed keeps it.
    pub ready_reason: Option<String>,
}

impl JobFacts {
    /// From what was observed: the Job's state and creationTimestamp, the deadline, the pod
    /// check, and the status's `failure` and conditions.
    pub fn new(
        state: JobState,
        created: Option<DateTime<Utc>>,
        pod_startup_deadline: Duration,
        pods: Verdict,
        failure: Option<Failure>,
        conditions: &[Condition],
    ) -> Self {
        let ready_reason = conditions.iter().find(|c| c.type_ == condition::READY).map(|c| c.reason.clone());
        Self { state, created, pod_startup_deadline, pods, failure, ready_reason }
    }

    /// No Job yet, nothing recorded (the plans' tests start from it).
    #[cfg(test)]
    pub fn absent() -> Self {
        Self {
            state: JobState::Absent,
            created: None,
            pod_startup_deadline: Duration::seconds(300),
            pods: Verdict::NotWedged { recheck_at: None },
            failure: None,
            ready_reason: None,
        }
    }
}

/// A run's Job as the plans see it, for a Snapshot's backup and a Restore's restore alike. The
/// pods are listed only for an active Job of a run in progress (`running`: a terminal phase never
/// looks).
pub async fn observe(
    client: &Client,
    job: Option<&Arc<Job>>,
    running: bool,
    failure_policy: Option<&FailurePolicy>,
    failure: Option<Failure>,
    conditions: &[Condition],
    now: DateTime<Utc>,
) -> JobFacts {
    let deadline = chrono::Duration::seconds(FailurePolicy::resolved_pod_startup_deadline_seconds(failure_policy));
    let state = job_state(job.map(Arc::as_ref));
    let mut pods = Verdict::NotWedged { recheck_at: None };
    if running
        && state == JobState::Active
        && let Some(j) = job
    {
        pods = crate::wedged::io::check(client, j, deadline, now).await;
    }
    let created = job.and_then(|j| crate::wedged::io::job_created(j));
    JobFacts::new(state, created, deadline, pods, failure, conditions)
}
