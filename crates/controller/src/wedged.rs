//! Wedged mover pods (docs/design/architecture.md §1.4): a pod whose container stays waiting on an image or container
//! configuration problem, or that stays unschedulable, for longer than the operation's
//! `podStartupDeadlineSeconds`. The verdict is pure; [`io`] builds a [`PodSummary`] per pod of
//! the Job (one bounded LIST by `job-name`, no pod watch) and deletes a wedged Job. The Snapshot,
//! Restore, Maintenance and RepositoryReplication run paths act on [`Verdict::Wedged`]; bootstrap
//! and probe Jobs are never checked.
//!
//! Conservative by construction: a pod is wedged only when its wedged state has provably lasted
//! longer than the deadline. A missing timestamp, a pod being deleted or already terminal, or a
//! waiting reason outside the wedge list all read as not wedged.
use chrono::{DateTime, Duration, Utc};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::ResourceExt;

/// Container waiting reasons that mean the mover cannot start without outside help.
pub const WEDGE_REASONS: &[&str] =
    &["ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError", "CreateContainerError"];

/// Warning Event reasons that keep a container in `ContainerCreating` without outside help
/// (a ReadWriteOnce volume attached to another node, a mount that cannot succeed, a sandbox
/// the runtime cannot create). `ContainerCreating` alone is not a wedge: an image may be big.
pub const START_FAILURE_EVENTS: &[&str] = &["FailedAttachVolume", "FailedMount", "FailedCreatePodSandBox"];

/// The Job-level Warning Event reason of a Job controller that cannot create its pod
/// (a ResourceQuota, a LimitRange, an admission webhook).
pub const JOB_CREATE_FAILURE_EVENT: &str = "FailedCreate";

/// Longest container waiting message quoted in the verdict.
const MAX_DETAIL_CHARS: usize = 300;

/// Bounds of the recheck interval for a Job past its deadline whose pods are not started and
/// show no wedge yet (or that has no pod yet). Nothing announces the moment a container starts
/// waiting on its image or configuration (there is no pod watch), and a wedge that shows up
/// late already counts from the pod's creation, so such a Job is looked at again after the
/// deadline itself, clamped to these bounds.
pub const UNSTARTED_RECHECK_MIN_SECONDS: i64 = 5;
pub const UNSTARTED_RECHECK_MAX_SECONDS: i64 = 60;

/// `PodScheduled` as the pod reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scheduled {
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub since: Option<DateTime<Utc>>,
}

/// One container (init or regular) that is waiting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    pub container: String,
    pub reason: Option<String>,
    pub message: Option<String>,
}

/// What the verdict needs of one pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodSummary {
    pub name: String,
    pub created: Option<DateTime<Utc>>,
    /// `status.phase` (`Pending`, `Running`, `Succeeded`, `Failed`, `Unknown`).
    pub phase: Option<String>,
    /// The pod carries a deletionTimestamp.
    pub deleting: bool,
    pub scheduled: Option<Scheduled>,
    pub waiting: Vec<Waiting>,
    /// Warning Events of the pod that explain a container stuck in `ContainerCreating`
    /// (`FailedAttachVolume: Multi-Attach error ...`), newest last; read only when one is.
    pub warnings: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing is wedged yet; `recheck_at` is the earliest time a pod (or the Job) could cross
    /// the deadline, when that is known.
    NotWedged {
        recheck_at: Option<DateTime<Utc>>,
    },
    Wedged {
        message: String,
    },
}

/// Whether the Job is old enough for its pods to be worth listing; `Err(at)` is when it will be.
/// A Job without a creation time is never checked (uncertain means not wedged).
pub fn job_due(
    job_created: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    deadline: Duration,
) -> Result<(), Option<DateTime<Utc>>> {
    let Some(created) = job_created else { return Err(None) };
    let at = over_deadline_at(created, deadline);
    match at {
        Some(at) if now >= at => Ok(()),
        Some(at) => Err(Some(at)),
        None => Err(None),
    }
}

/// The first instant at which a state that began at `start` has lasted *longer* than `deadline`.
fn over_deadline_at(start: DateTime<Utc>, deadline: Duration) -> Option<DateTime<Utc>> {
    start.checked_add_signed(deadline)?.checked_add_signed(Duration::seconds(1))
}

/// The pod's wedged condition: what it is, and since when it provably holds.
struct Wedge {
    start: DateTime<Utc>,
    what: String,
}

fn wedge_of(pod: &PodSummary) -> Option<Wedge> {
    if pod.deleting {
        return None;
    }
    // Terminal pods are the Job's business (its Failed condition), not a startup wedge.
    if matches!(pod.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return None;
    }
    let scheduled = pod.scheduled.as_ref();
    if let Some(s) = scheduled
        && s.status == "False"
    {
        // Unschedulable since the condition last flipped to False.
        let start = s.since?;
        let why = match (&s.reason, &s.message) {
            (Some(r), Some(m)) => format!("{r}: {}", clip(m)),
            (Some(r), None) => r.clone(),
            (None, Some(m)) => clip(m),
            (None, None) => "no reason given".into(),
        };
        return Some(Wedge { start, what: format!("unschedulable (PodScheduled=False, {why})") });
    }
    let creating = pod.waiting.iter().find(|w| w.reason.as_deref() == Some("ContainerCreating"));
    let w = match pod.waiting.iter().find(|w| w.reason.as_deref().is_some_and(|r| WEDGE_REASONS.contains(&r))) {
        Some(w) => w,
        // Stuck creating the container, with a Warning that says why (Multi-Attach, a mount).
        None => {
            let c = creating.filter(|_| !pod.warnings.is_empty())?;
            let scheduled_at = scheduled.filter(|s| s.status == "True").and_then(|s| s.since);
            let start = match (pod.created, scheduled_at) {
                (Some(c), Some(s)) => c.max(s),
                (Some(c), None) => c,
                (None, Some(s)) => s,
                (None, None) => return None,
            };
            let last = pod.warnings.last().map(|m| clip(m)).unwrap_or_default();
            return Some(Wedge {
                start,
                what: format!("container {} stuck in ContainerCreating ({last})", c.container),
            });
        }
    };
    // A container can only wait on its image once the pod is on a node: the later of the pod's
    // creation and its PodScheduled=True transition is a safe (late) start. Containers of a
    // restartPolicy=Never mover pod never restart, so there is no later start to miss.
    let scheduled_at = scheduled.filter(|s| s.status == "True").and_then(|s| s.since);
    let start = match (pod.created, scheduled_at) {
        (Some(c), Some(s)) => c.max(s),
        (Some(c), None) => c,
        (None, Some(s)) => s,
        (None, None) => return None,
    };
    let reason = w.reason.clone().unwrap_or_default();
    let what = match &w.message {
        Some(m) if !m.is_empty() => format!("container {} waiting with {reason} ({})", w.container, clip(m)),
        Some(_) | None => format!("container {} waiting with {reason}", w.container),
    };
    Some(Wedge { start, what })
}

/// A pod that may still become wedged: not terminal, not being deleted, not running yet.
fn unstarted(pod: &PodSummary) -> bool {
    !pod.deleting && matches!(pod.phase.as_deref(), None | Some("Pending"))
}

/// When to look again at a Job whose unstarted pods show no wedge yet.
fn unstarted_recheck(now: DateTime<Utc>, deadline: Duration) -> Option<DateTime<Utc>> {
    let secs = deadline.num_seconds().clamp(UNSTARTED_RECHECK_MIN_SECONDS, UNSTARTED_RECHECK_MAX_SECONDS);
    now.checked_add_signed(Duration::seconds(secs))
}

fn earliest(a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn clip(s: &str) -> String {
    if s.chars().count() <= MAX_DETAIL_CHARS {
        return s.to_string();
    }
    let cut: String = s.chars().take(MAX_DETAIL_CHARS).collect();
    format!("{cut}…")
}

/// The verdict for one Job. `job` names it in the message; `deadline` is the resolved
/// `podStartupDeadlineSeconds`.
pub fn evaluate(
    job: &str,
    job_created: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    deadline: Duration,
    pods: &[PodSummary],
) -> Verdict {
    evaluate_job(job, job_created, now, deadline, pods, &[])
}

/// [`evaluate`] with the Job's own `FailedCreate` Warning Events (`job_warnings`, newest
/// last): a Job past the deadline that has no pod and says why is wedged too.
pub fn evaluate_job(
    job: &str,
    job_created: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    deadline: Duration,
    pods: &[PodSummary],
    job_warnings: &[String],
) -> Verdict {
    if let Err(recheck_at) = job_due(job_created, now, deadline) {
        return Verdict::NotWedged { recheck_at };
    }
    if pods.is_empty()
        && let (Some(created), Some(why)) = (job_created, job_warnings.last())
    {
        return Verdict::Wedged {
            message: format!(
                "Job {job} has created no mover pod in {}s, longer than the {}s pod startup deadline ({}), so it \
                 is deleted. Check the namespace's ResourceQuota and LimitRange against the mover's resources \
                 (kubectl describe job {job})",
                (now - created).num_seconds(),
                deadline.num_seconds(),
                clip(why)
            ),
        };
    }
    // No pod yet (the Job controller is behind, or pod creation is refused): one may appear.
    let mut recheck_at = if pods.is_empty() { unstarted_recheck(now, deadline) } else { None };
    let mut worst: Option<(Duration, &PodSummary, Wedge)> = None;
    for pod in pods {
        let Some(w) = wedge_of(pod) else {
            if unstarted(pod) {
                recheck_at = earliest(recheck_at, unstarted_recheck(now, deadline));
            }
            continue;
        };
        let Some(over_at) = over_deadline_at(w.start, deadline) else { continue };
        if now < over_at {
            recheck_at = earliest(recheck_at, Some(over_at));
            continue;
        }
        let lasted = now - w.start;
        // The longest-wedged pod is reported; ties go to the first name for a stable message.
        let better = match &worst {
            None => true,
            Some((l, p, _)) => lasted > *l || (lasted == *l && pod.name < p.name),
        };
        if better {
            worst = Some((lasted, pod, w));
        }
    }
    match worst {
        None => Verdict::NotWedged { recheck_at },
        Some((lasted, pod, w)) => Verdict::Wedged {
            message: format!(
                "mover pod {} of Job {job} has been {} for {}s, longer than the {}s pod startup deadline, \
                 so its Job is deleted. Check the mover image, its image pull secrets, the Secret keys and \
                 ConfigMaps it reads, and node scheduling (kubectl describe pod -l job-name={job})",
                pod.name,
                w.what,
                lasted.num_seconds(),
                deadline.num_seconds()
            ),
        },
    }
}

fn waiting_of(statuses: Option<&Vec<ContainerStatus>>) -> impl Iterator<Item = Waiting> + '_ {
    statuses.into_iter().flatten().filter_map(|c| {
        let w = c.state.as_ref()?.waiting.as_ref()?;
        Some(Waiting { container: c.name.clone(), reason: w.reason.clone(), message: w.message.clone() })
    })
}

fn time(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> Option<DateTime<Utc>> {
    DateTime::<Utc>::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond().max(0) as u32)
}

/// The summary of one pod as the API returns it (init containers first).
pub fn summarize(pod: &Pod) -> PodSummary {
    let status = pod.status.as_ref();
    let scheduled = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
        .map(|c| Scheduled {
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
            since: c.last_transition_time.as_ref().and_then(time),
        });
    let waiting = waiting_of(status.and_then(|s| s.init_container_statuses.as_ref()))
        .chain(waiting_of(status.and_then(|s| s.container_statuses.as_ref())))
        .collect();
    PodSummary {
        name: pod.name_any(),
        created: pod.metadata.creation_timestamp.as_ref().and_then(time),
        phase: status.and_then(|s| s.phase.clone()),
        deleting: pod.metadata.deletion_timestamp.is_some(),
        scheduled,
        waiting,
        warnings: Vec::new(),
    }
}

/// How long to wait before the next wedged-pod check of an active Job: just after the Job (or
/// the youngest unstarted pod) could outlast the deadline, never later than `cap` (the caller's
/// usual await requeue). `None` keeps the caller's default.
pub fn requeue_after(
    deadline: Duration,
    job_created: Option<DateTime<Utc>>,
    recheck_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    cap: Duration,
) -> Option<Duration> {
    let job_due = job_due(job_created, now, deadline).err().flatten();
    let at = [job_due, recheck_at].into_iter().flatten().filter(|t| *t > now).min()?;
    Some((at - now).min(cap))
}

/// The API side of the check, shared by every run path that watches a mover Job (Snapshot,
/// Restore, Maintenance, RepositoryReplication; bootstrap and probe Jobs ignore the deadline).
pub mod io {
    use chrono::{DateTime, Duration, Utc};
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{DeleteParams, ListParams, Preconditions};
    use kube::{Api, Client, ResourceExt};

    use super::Verdict;

    /// Most pods one check reads (a mover Job has `backoffLimit + 1` pods at most).
    const POD_LIST_LIMIT: u32 = 50;

    /// The Job's creationTimestamp.
    pub fn job_created(job: &Job) -> Option<DateTime<Utc>> {
        job.metadata.creation_timestamp.as_ref().and_then(super::time)
    }

    /// The check for an active mover Job: only once the Job is older than the deadline, one
    /// bounded LIST of its pods by `job-name` (no pod watch). A failed LIST is logged and reads
    /// as not wedged; the next requeue tries again.
    pub async fn check(client: &Client, job: &Job, deadline: Duration, now: DateTime<Utc>) -> Verdict {
        let created = job_created(job);
        if let Err(recheck_at) = super::job_due(created, now, deadline) {
            return Verdict::NotWedged { recheck_at };
        }
        let ns = job.namespace().unwrap_or_default();
        let name = job.name_any();
        let lp = ListParams::default().labels(&format!("job-name={name}")).limit(POD_LIST_LIMIT);
        let pods = match Api::<Pod>::namespaced(client.clone(), &ns).list(&lp).await {
            Ok(list) => list.items,
            Err(e) => {
                tracing::warn!(error = %e, job = %name, namespace = %ns, "listing the mover Job's pods failed");
                return Verdict::NotWedged { recheck_at: None };
            }
        };
        // Only pods this very Job owns (a same-named predecessor's pods may linger).
        let owned: Vec<&Pod> = pods
            .iter()
            .filter(|p| p.owner_references().iter().any(|o| Some(&o.uid) == job.metadata.uid.as_ref()))
            .collect();
        let mut summaries = Vec::with_capacity(owned.len());
        for p in &owned {
            let mut s = super::summarize(p);
            // Events are read only for a container stuck creating (what keeps it there).
            if s.waiting.iter().any(|w| w.reason.as_deref() == Some("ContainerCreating"))
                && let Some(uid) = p.metadata.uid.as_deref()
            {
                s.warnings = warnings(client, &ns, uid, super::START_FAILURE_EVENTS).await;
            }
            summaries.push(s);
        }
        let job_warnings = match (summaries.is_empty(), job.metadata.uid.as_deref()) {
            (true, Some(uid)) => warnings(client, &ns, uid, &[super::JOB_CREATE_FAILURE_EVENT]).await,
            // A Job with a pod is judged by its pods; a Job without a uid has no Events to read.
            (false, _) | (true, None) => Vec::new(),
        };
        let verdict = super::evaluate_job(&name, created, now, deadline, &summaries, &job_warnings);
        if let Verdict::Wedged { message } = &verdict {
            tracing::warn!(job = %name, namespace = %ns, %message, "mover pod wedged");
        }
        verdict
    }

    /// The Warning Events of one object (by uid) with one of `reasons`, oldest first, as
    /// `Reason: message`. A failed LIST reads as none (not wedged; the next check retries).
    async fn warnings(client: &Client, ns: &str, uid: &str, reasons: &[&str]) -> Vec<String> {
        use k8s_openapi::api::core::v1::Event;
        let lp = ListParams::default().fields(&format!("involvedObject.uid={uid},type=Warning")).limit(50);
        let mut events = match Api::<Event>::namespaced(client.clone(), ns).list(&lp).await {
            Ok(l) => l.items,
            Err(e) => {
                tracing::warn!(error = %e, namespace = %ns, "listing the mover's Warning Events failed");
                return Vec::new();
            }
        };
        events.retain(|e| e.reason.as_deref().is_some_and(|r| reasons.contains(&r)));
        events.sort_by_key(|e| e.last_timestamp.as_ref().map(|t| t.0).or(e.event_time.as_ref().map(|t| t.0)));
        events
            .into_iter()
            .map(|e| format!("{}: {}", e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
            .collect()
    }

    /// Deletes a wedged mover Job (Background propagation, guarded by its uid). Already gone
    /// is fine; any other failure is logged and retried by the plan's requeue.
    pub async fn delete_job(client: &Client, job: &Job) {
        let ns = job.namespace().unwrap_or_default();
        let dp = DeleteParams {
            preconditions: Some(Preconditions { uid: job.metadata.uid.clone(), resource_version: None }),
            ..DeleteParams::background()
        };
        match Api::<Job>::namespaced(client.clone(), &ns).delete(&job.name_any(), &dp).await {
            Ok(_) => tracing::info!(job = %job.name_any(), namespace = %ns, "deleted the mover Job"),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => {
                tracing::warn!(error = %e, job = %job.name_any(), namespace = %ns, "deleting the mover Job failed")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    const JOB: &str = "nightly-x";

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap()
    }

    fn deadline() -> Duration {
        Duration::seconds(300)
    }

    fn scheduled(status: &str, since: DateTime<Utc>) -> Option<Scheduled> {
        Some(Scheduled { status: status.into(), reason: None, message: None, since: Some(since) })
    }

    /// A pending pod created and scheduled at t0 with one container waiting on `reason`.
    fn waiting_pod(reason: &str) -> PodSummary {
        PodSummary {
            name: "nightly-x-abcde".into(),
            created: Some(t0()),
            phase: Some("Pending".into()),
            deleting: false,
            scheduled: scheduled("True", t0()),
            waiting: vec![Waiting {
                container: "mover".into(),
                reason: Some(reason.into()),
                message: Some(format!("{reason} for x/mover:1")),
            }],
            warnings: vec![],
        }
    }

    fn eval(now: DateTime<Utc>, pods: &[PodSummary]) -> Verdict {
        evaluate(JOB, Some(t0()), now, deadline(), pods)
    }

    fn wedged_message(v: Verdict) -> String {
        match v {
            Verdict::Wedged { message } => message,
            Verdict::NotWedged { recheck_at } => panic!("expected Wedged, got NotWedged (recheck_at {recheck_at:?})"),
        }
    }

    #[test]
    fn every_wedge_reason_wedges_after_the_deadline() {
        for reason in WEDGE_REASONS {
            let msg = wedged_message(eval(t0() + Duration::seconds(301), &[waiting_pod(reason)]));
            assert!(msg.contains("nightly-x-abcde"), "{msg}");
            assert!(msg.contains(reason), "{msg}");
            assert!(msg.contains("for 301s"), "{msg}");
            assert!(msg.contains("300s pod startup deadline"), "{msg}");
            assert!(msg.contains("mover image") && msg.contains("pull secrets") && msg.contains("scheduling"), "{msg}");
            assert!(msg.contains("kubectl describe pod -l job-name=nightly-x"), "{msg}");
        }
    }

    #[test]
    fn wedge_reasons_under_or_at_the_deadline_are_not_wedged_and_recheck_just_after() {
        for reason in WEDGE_REASONS {
            for secs in [0, 1, 299, 300] {
                assert_eq!(
                    eval(t0() + Duration::seconds(secs), &[waiting_pod(reason)]),
                    Verdict::NotWedged { recheck_at: Some(t0() + Duration::seconds(301)) },
                    "{reason} at {secs}s: only longer than the deadline wedges"
                );
            }
        }
    }

    #[test]
    fn the_wait_counts_from_scheduling_not_from_the_job() {
        // The Job is old, but its current pod was only scheduled 100 s ago (a retry pod).
        let mut p = waiting_pod("ImagePullBackOff");
        let now = t0() + Duration::seconds(1000);
        p.created = Some(now - Duration::seconds(150));
        p.scheduled = scheduled("True", now - Duration::seconds(100));
        assert_eq!(eval(now, &[p]), Verdict::NotWedged { recheck_at: Some(now + Duration::seconds(201)) });
    }

    #[test]
    fn unschedulable_pod_wedges_after_the_deadline() {
        let mut p = waiting_pod("ContainerCreating");
        p.waiting.clear();
        p.scheduled = Some(Scheduled {
            status: "False".into(),
            reason: Some("Unschedulable".into()),
            message: Some("0/3 nodes are available: 3 Insufficient memory.".into()),
            since: Some(t0() + Duration::seconds(2)),
        });
        assert_eq!(
            eval(t0() + Duration::seconds(302), std::slice::from_ref(&p)),
            Verdict::NotWedged { recheck_at: Some(t0() + Duration::seconds(303)) },
            "counted from the condition's lastTransitionTime"
        );
        let msg = wedged_message(eval(t0() + Duration::seconds(600), &[p]));
        assert!(msg.contains("unschedulable (PodScheduled=False, Unschedulable: 0/3 nodes are available"), "{msg}");
        assert!(msg.contains("for 598s"), "{msg}");
    }

    #[test]
    fn unschedulable_without_a_transition_time_is_not_wedged() {
        let mut p = waiting_pod("ImagePullBackOff");
        p.waiting.clear();
        p.scheduled = Some(Scheduled { status: "False".into(), reason: None, message: None, since: None });
        let now = t0() + Duration::days(1);
        // Still unstarted: looked at again after the (clamped) deadline.
        assert_eq!(eval(now, &[p]), Verdict::NotWedged { recheck_at: Some(now + Duration::seconds(60)) });
    }

    #[test]
    fn running_pod_is_not_wedged() {
        let p = PodSummary {
            name: "nightly-x-abcde".into(),
            created: Some(t0()),
            phase: Some("Running".into()),
            deleting: false,
            scheduled: scheduled("True", t0()),
            waiting: vec![],
            warnings: vec![],
        };
        assert_eq!(eval(t0() + Duration::hours(5), &[p]), Verdict::NotWedged { recheck_at: None });
    }

    #[test]
    fn container_creating_and_other_reasons_never_wedge() {
        let now = t0() + Duration::hours(5);
        let poll = Verdict::NotWedged { recheck_at: Some(now + Duration::seconds(UNSTARTED_RECHECK_MAX_SECONDS)) };
        for reason in ["ContainerCreating", "PodInitializing", "ImageInspectError-ish", ""] {
            let p = waiting_pod(reason);
            assert_eq!(eval(now, &[p]), poll, "{reason:?} is not a wedge reason; the pod is polled while unstarted");
        }
        let mut p = waiting_pod("ImagePullBackOff");
        p.waiting[0].reason = None;
        assert_eq!(eval(now, &[p]), poll);
    }

    #[test]
    fn init_container_wedges_like_any_container() {
        let mut p = waiting_pod("PodInitializing");
        p.waiting
            .insert(0, Waiting { container: "init-perms".into(), reason: Some("ErrImagePull".into()), message: None });
        let msg = wedged_message(eval(t0() + Duration::seconds(400), &[p]));
        assert!(msg.contains("container init-perms waiting with ErrImagePull"), "{msg}");
    }

    #[test]
    fn a_young_job_is_not_checked_and_rechecks_at_its_deadline() {
        // Even a pod that claims an old wedge cannot outlast its Job.
        let mut p = waiting_pod("ImagePullBackOff");
        p.created = Some(t0() - Duration::hours(1));
        p.scheduled = scheduled("True", t0() - Duration::hours(1));
        assert_eq!(
            eval(t0() + Duration::seconds(120), &[p]),
            Verdict::NotWedged { recheck_at: Some(t0() + Duration::seconds(301)) }
        );
        assert_eq!(
            job_due(Some(t0()), t0() + Duration::seconds(300), deadline()),
            Err(Some(t0() + Duration::seconds(301)))
        );
        assert_eq!(job_due(Some(t0()), t0() + Duration::seconds(301), deadline()), Ok(()));
    }

    #[test]
    fn uncertainty_is_not_wedged() {
        let now = t0() + Duration::days(1);
        // No Job creation time.
        assert_eq!(
            evaluate(JOB, None, now, deadline(), &[waiting_pod("ImagePullBackOff")]),
            Verdict::NotWedged { recheck_at: None }
        );
        // No pod timestamps at all.
        let mut p = waiting_pod("ImagePullBackOff");
        p.created = None;
        p.scheduled = None;
        let poll = Verdict::NotWedged { recheck_at: Some(now + Duration::seconds(60)) };
        assert_eq!(eval(now, &[p]), poll, "unstarted: looked at again");
        // A pod being deleted, or already terminal.
        let mut p = waiting_pod("ImagePullBackOff");
        p.deleting = true;
        assert_eq!(eval(now, &[p]), Verdict::NotWedged { recheck_at: None });
        for phase in ["Succeeded", "Failed"] {
            let mut p = waiting_pod("ImagePullBackOff");
            p.phase = Some(phase.into());
            assert_eq!(eval(now, &[p]), Verdict::NotWedged { recheck_at: None });
        }
        // No pods (not created yet, or quota): not a pod wedge, but one may still appear.
        assert_eq!(eval(now, &[]), poll);
        // A deadline too large to represent never fires (and does not panic).
        assert_eq!(
            evaluate(JOB, Some(t0()), now, Duration::MAX, &[waiting_pod("ImagePullBackOff")]),
            Verdict::NotWedged { recheck_at: None }
        );
    }

    #[test]
    fn an_unstarted_pod_is_rechecked_after_the_clamped_deadline() {
        let now = t0() + Duration::seconds(400);
        let creating = || waiting_pod("ContainerCreating");
        let at = |deadline: i64| evaluate(JOB, Some(t0()), now, Duration::seconds(deadline), &[creating()]);
        assert_eq!(at(1), Verdict::NotWedged { recheck_at: Some(now + Duration::seconds(5)) }, "never sooner than 5 s");
        assert_eq!(at(30), Verdict::NotWedged { recheck_at: Some(now + Duration::seconds(30)) });
        assert_eq!(
            at(300),
            Verdict::NotWedged { recheck_at: Some(now + Duration::seconds(60)) },
            "never later than 60 s"
        );
        // A pod waiting on a wedge reason but still under the deadline rechecks at its own time
        // when that is sooner than the poll.
        let mut young = waiting_pod("ErrImagePull");
        young.created = Some(now - Duration::seconds(299));
        young.scheduled = scheduled("True", now - Duration::seconds(299));
        assert_eq!(
            eval(now, &[young, creating()]),
            Verdict::NotWedged { recheck_at: Some(now + Duration::seconds(2)) }
        );
        // The poll bounds how late a wedge that shows up only now is seen: it counts from the pod.
        let msg = wedged_message(evaluate(
            JOB,
            Some(t0()),
            now + Duration::seconds(5),
            Duration::seconds(1),
            &[waiting_pod("CreateContainerConfigError")],
        ));
        assert!(msg.contains("for 405s, longer than the 1s pod startup deadline"), "{msg}");
        // A running pod is not polled.
        let mut running = creating();
        running.phase = Some("Running".into());
        running.waiting.clear();
        assert_eq!(eval(now, &[running]), Verdict::NotWedged { recheck_at: None });
    }

    #[test]
    fn the_longest_wedged_pod_is_reported_and_young_ones_set_the_recheck() {
        let now = t0() + Duration::seconds(1000);
        let mut old = waiting_pod("ErrImagePull");
        old.name = "nightly-x-old".into();
        let mut young = waiting_pod("ImagePullBackOff");
        young.name = "nightly-x-young".into();
        young.created = Some(now - Duration::seconds(10));
        young.scheduled = scheduled("True", now - Duration::seconds(10));
        let msg = wedged_message(eval(now, &[young.clone(), old]));
        assert!(msg.contains("nightly-x-old") && msg.contains("ErrImagePull"), "{msg}");
        assert_eq!(eval(now, &[young]), Verdict::NotWedged { recheck_at: Some(now + Duration::seconds(291)) });
    }

    #[test]
    fn summarize_reads_the_pod_api_shape() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "nightly-x-abcde", "creationTimestamp": "2026-03-01T12:00:00Z"},
            "status": {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-03-01T12:00:03Z"}
                ],
                "initContainerStatuses": [
                    {"name": "init", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                     "state": {"terminated": {"exitCode": 0}}}
                ],
                "containerStatuses": [
                    {"name": "mover", "image": "m", "imageID": "", "ready": false, "restartCount": 0,
                     "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}
                ]
            }
        }))
        .unwrap();
        let s = summarize(&pod);
        assert_eq!(s.name, "nightly-x-abcde");
        assert_eq!(s.created, Some(t0()));
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert!(!s.deleting);
        assert_eq!(s.scheduled, scheduled("True", t0() + Duration::seconds(3)));
        assert_eq!(
            s.waiting,
            vec![Waiting {
                container: "mover".into(),
                reason: Some("ImagePullBackOff".into()),
                message: Some("Back-off pulling image".into())
            }]
        );
        // Counted from the scheduling (the later of the two).
        assert!(matches!(eval(t0() + Duration::seconds(303), std::slice::from_ref(&s)), Verdict::NotWedged { .. }));
        let msg = wedged_message(eval(t0() + Duration::seconds(304), &[s]));
        assert!(msg.contains("for 301s"), "{msg}");
    }

    #[test]
    fn container_creating_is_a_wedge_only_with_a_warning_that_says_why() {
        let past = t0() + deadline() + Duration::seconds(2);
        let mut p = waiting_pod("ContainerCreating");
        // A big image can take long: ContainerCreating alone is not a wedge.
        assert!(matches!(evaluate(JOB, Some(t0()), past, deadline(), &[p.clone()]), Verdict::NotWedged { .. }));
        p.warnings = vec![
            "FailedAttachVolume: Multi-Attach error for volume \"pvc-1\" Volume is already used by pod(s) app-0".into(),
        ];
        assert!(matches!(
            evaluate(JOB, Some(t0()), t0() + Duration::seconds(100), deadline(), &[p.clone()]),
            Verdict::NotWedged { .. }
        ));
        let Verdict::Wedged { message } = evaluate(JOB, Some(t0()), past, deadline(), &[p]) else {
            panic!("Multi-Attach past the deadline is wedged")
        };
        assert!(message.contains("stuck in ContainerCreating"), "{message}");
        assert!(message.contains("Multi-Attach error for volume"), "{message}");
    }

    #[test]
    fn a_job_without_pods_is_wedged_when_it_says_why() {
        let past = t0() + deadline() + Duration::seconds(2);
        assert!(matches!(evaluate_job(JOB, Some(t0()), past, deadline(), &[], &[]), Verdict::NotWedged { .. }));
        let why = vec!["FailedCreate: Error creating: pods \"nightly-x-1\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1".to_string()];
        assert!(matches!(
            evaluate_job(JOB, Some(t0()), t0() + Duration::seconds(10), deadline(), &[], &why),
            Verdict::NotWedged { .. }
        ));
        let Verdict::Wedged { message } = evaluate_job(JOB, Some(t0()), past, deadline(), &[], &why) else {
            panic!("a quota-refused Job past the deadline is wedged")
        };
        assert!(message.contains("created no mover pod in 302s") && message.contains("exceeded quota"), "{message}");
        assert!(message.contains("ResourceQuota"), "{message}");
    }
}
