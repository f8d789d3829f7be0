//! A failed batch delete Job's per-member answer: read once from its Pod's termination message
//! (`kopiur_mover::batch_outcome`) and kept on the Job as the `delete-outcomes` annotation, which
//! only the controller writes, so every reconcile reads the same facts until the Job is reaped.
//!
//! Only a Pod the Job itself owns (its controller ownerReference carries the Job's uid) counts,
//! and only members the Job lists can be named: nothing else can release a finalizer.
use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kopiur_api::names::annotation;
use kopiur_mover::batch_outcome::{self, MemberOutcome};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::context::Context;
use crate::deletion::batch::JobPhase;

/// The outcomes recorded on a failed batch Job; empty for any other Job or when none was read.
pub fn recorded(job: &Job, phase: JobPhase, members: &[String]) -> BTreeMap<String, MemberOutcome> {
    match (phase, job.annotations().get(annotation::DELETE_OUTCOMES)) {
        (JobPhase::Failed { .. }, Some(text)) => batch_outcome::parse(text, members).unwrap_or_default(),
        (JobPhase::Failed { .. } | JobPhase::Running | JobPhase::Complete { .. }, _) => BTreeMap::new(),
    }
}

/// The newest termination message of the `mover` container among the Job's own Pods.
pub fn message_of(job_uid: &str, pods: &[Pod]) -> Option<String> {
    pods.iter()
        .filter(|p| p.owner_references().iter().any(|o| o.controller == Some(true) && o.uid == job_uid))
        .filter_map(|p| {
            let st = p.status.as_ref()?.container_statuses.as_ref()?.iter().find(|c| c.name == "mover")?;
            let t = st.state.as_ref()?.terminated.as_ref()?;
            Some((t.finished_at.as_ref().map(|f| f.0), t.message.clone()?))
        })
        .max_by_key(|(at, _)| *at)
        .map(|(_, m)| m)
}

/// Reads the failed Job's Pods and records what they said on the Job. `Ok(true)` when an
/// answer was recorded; `Ok(false)` when there is none (no Pod left, no batch message): its
/// members are then simply batched again.
pub async fn record(ctx: &Context, job: &Job, members: &[String]) -> Result<bool, kube::Error> {
    let (Some(ns), Some(uid)) = (job.namespace(), job.uid()) else { return Ok(false) };
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let lp = ListParams::default().labels(&format!("batch.kubernetes.io/controller-uid={uid}"));
    let listed = pods.list(&lp).await?.items;
    let Some(parsed) = message_of(&uid, &listed).and_then(|m| batch_outcome::parse(&m, members)) else {
        return Ok(false);
    };
    let ordered: Vec<(String, MemberOutcome)> = parsed.into_iter().collect();
    let text = batch_outcome::render(&ordered);
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    let patch = json!({"metadata": {"annotations": {annotation::DELETE_OUTCOMES: text}}});
    jobs.patch(&job.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use kopiur_mover::batch_outcome::{HEADER, Refusal};

    use super::*;

    fn pod(owner_uid: &str, controller: bool, finished: i64, message: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.owner_references = Some(vec![OwnerReference {
            uid: owner_uid.into(),
            controller: Some(controller),
            ..OwnerReference::default()
        }]);
        p.status = Some(PodStatus {
            container_statuses: Some(vec![ContainerStatus {
                name: "mover".into(),
                state: Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: 3,
                        message: Some(message.into()),
                        finished_at: Some(Time(k8s_openapi::jiff::Timestamp::from_second(finished).unwrap())),
                        ..ContainerStateTerminated::default()
                    }),
                    ..ContainerState::default()
                }),
                ..ContainerStatus::default()
            }]),
            ..PodStatus::default()
        });
        p
    }

    #[test]
    fn only_the_jobs_own_newest_pod_speaks() {
        let newest = format!("{HEADER}\nreleased a");
        let older = format!("{HEADER}\nrefused a other-source");
        let stranger = format!("{HEADER}\nreleased b");
        let pods = vec![
            pod("job-1", true, 10, &older),
            pod("job-1", true, 20, &newest),
            // A Pod that merely claims the Job as a non-controller owner, and another Job's Pod.
            pod("job-1", false, 30, &stranger),
            pod("job-2", true, 40, &stranger),
        ];
        assert_eq!(message_of("job-1", &pods).as_deref(), Some(newest.as_str()));
        assert_eq!(message_of("job-3", &pods), None);
    }

    #[test]
    fn outcomes_count_only_on_a_failed_job_and_only_for_its_members() {
        let members = vec!["a".to_string(), "b".to_string()];
        let mut job = Job::default();
        job.metadata.annotations = Some(BTreeMap::from([(
            annotation::DELETE_OUTCOMES.to_string(),
            format!("{HEADER}\nreleased a\nrefused b uid-tag-mismatch\nreleased z"),
        )]));
        let at = chrono::DateTime::from_timestamp(0, 0).unwrap();
        let got = recorded(&job, JobPhase::Failed { at }, &members);
        assert_eq!(got.len(), 2);
        assert_eq!(got["a"], MemberOutcome::Released);
        assert_eq!(got["b"], MemberOutcome::Refused(Refusal::UidTagMismatch));
        assert!(recorded(&job, JobPhase::Running, &members).is_empty());
        assert!(recorded(&job, JobPhase::Complete { at }, &members).is_empty());
    }
}
