//! Batched execution. Deletions for one repository pool during a quiet window and run as one
//! `snapdel-*` Job that connects once and deletes every member, instead of one Job (and one
//! connect) per Snapshot. The Job name is a hash of the member set, so CREATE is a single-flight
//! lock: a restarted or duplicate dispatcher computing the same batch gets AlreadyExists.
use std::collections::{BTreeMap, BTreeSet};

use chrono::Duration;

use kopiur_mover::batch_outcome::{MemberOutcome, Refusal};

use super::digest::sha256_hex;
use super::fire_set::{FireMember, FireSet};
use super::types::Time;

/// Batch timing and sizing. The defaults are the spec's numbers; tests may shorten them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchTuning {
    /// A batch waits until its newest member is this old, so a wave pools into one Job.
    pub quiet_window_seconds: i64,
    /// At most this many members per Job; a full batch does not wait for the quiet window.
    pub max_members: usize,
    /// Manifest ids per `kopia snapshot delete` call.
    pub ids_per_call: usize,
    /// Non-terminal batch Jobs per repository.
    pub max_in_flight_per_repo: usize,
    /// `KOPIUR_MAX_CONCURRENT_DELETE_JOBS`: non-terminal batch Jobs cluster-wide; 0 = uncapped.
    pub global_cap: usize,
    /// A failed Job is deleted this long after failing, releasing the name for a retry.
    pub failed_reap_delay_seconds: i64,
}

impl Default for BatchTuning {
    fn default() -> Self {
        BatchTuning {
            quiet_window_seconds: 10,
            max_members: 200,
            ids_per_call: 50,
            max_in_flight_per_repo: 1,
            global_cap: 0,
            failed_reap_delay_seconds: 60,
        }
    }
}

/// The environment variable of the optional cluster-wide cap.
pub const GLOBAL_CAP_ENV: &str = "KOPIUR_MAX_CONCURRENT_DELETE_JOBS";

/// Parse `KOPIUR_MAX_CONCURRENT_DELETE_JOBS`: absent or empty = 0 (uncapped); anything that is
/// not a non-negative integer is an error for the caller to report at startup.
pub fn parse_global_cap(raw: Option<&str>) -> Result<usize, String> {
    match raw.map(str::trim) {
        None | Some("") => Ok(0),
        Some(v) => v.parse::<usize>().map_err(|_| format!("{GLOBAL_CAP_ENV}={v:?} is not a non-negative integer")),
    }
}

/// The deterministic Job name: `snapdel-<10 hex of sha256(repoUid + "\n" + sorted member uids
/// joined by "\n")>`. Independent of the order the members are given in.
pub fn batch_name<'a>(repo_uid: &str, member_uids: impl IntoIterator<Item = &'a str>) -> String {
    let sorted: BTreeSet<&str> = member_uids.into_iter().collect();
    let mut text = String::from(repo_uid);
    for uid in sorted {
        text.push('\n');
        text.push_str(uid);
    }
    format!("snapdel-{}", &sha256_hex(text.as_bytes())[..10])
}

/// Whether a Job labelled as a batch is one the controller created (pure): in the home
/// namespace of the repository whose uid its `delete-repo` label names (`home`: that repository's
/// home namespace, `None` when no such repository is known), named [`batch_name`] of that uid and
/// its members, and controlled (ownerReference `controller: true`) by that repository's uid.
/// Labels and annotations are anyone's to write; the namespace is not: a tenant cannot create a
/// Job in another tenant's namespace or the operator's, so a fake batch neither releases
/// another namespace's finalizers nor holds a repository's deletions.
pub fn trusted_batch(
    job_ns: &str,
    job_name: &str,
    owners: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference],
    repo_uid: &str,
    members: &[String],
    home: Option<&str>,
) -> bool {
    home == Some(job_ns)
        && job_name == batch_name(repo_uid, members.iter().map(String::as_str))
        && owners.iter().any(|o| o.controller == Some(true) && o.uid == repo_uid)
}

/// Split manifest ids into `snapshot delete` calls of at most `per_call` ids.
pub fn chunk_ids(ids: &[String], per_call: usize) -> Vec<Vec<String>> {
    ids.chunks(per_call.max(1)).map(<[String]>::to_vec).collect()
}

/// One batch Job to CREATE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchSpec {
    pub name: String,
    pub repo_uid: String,
    /// Oldest first, by (deletionTimestamp, uid).
    pub members: Vec<FireMember>,
    /// The `snapshot delete` calls the mover will make.
    pub chunks: Vec<Vec<String>>,
}

impl BatchSpec {
    /// The `delete-members` annotation: comma-separated member uids.
    pub fn members_annotation(&self) -> String {
        self.members.iter().map(|m| m.uid.as_str()).collect::<Vec<_>>().join(",")
    }
}

/// A batch Job's lifecycle as the Job store shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JobPhase {
    Running,
    Complete { at: Time },
    Failed { at: Time },
}

impl JobPhase {
    pub fn is_terminal(self) -> bool {
        match self {
            JobPhase::Running => false,
            JobPhase::Complete { .. } | JobPhase::Failed { .. } => true,
        }
    }
}

/// An existing `snapdel-*` Job (label `delete-repo`, annotation `delete-members`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchJob {
    pub name: String,
    pub repo_uid: String,
    pub members: Vec<String>,
    pub phase: JobPhase,
    /// A failed Job's per-member answer (annotation `delete-outcomes`, written by the
    /// controller from the Job's Pod); empty when none was read.
    pub outcomes: BTreeMap<String, MemberOutcome>,
}

/// Every member uid listed by an unreaped batch Job: not eligible for another batch.
pub fn in_flight_members(jobs: &[BatchJob]) -> BTreeSet<String> {
    jobs.iter().flat_map(|j| j.members.iter().cloned()).collect()
}

/// One repository's queue for this dispatch round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepoQueue {
    pub repo_uid: String,
    pub fire_set: FireSet,
}

/// Why a repository did not get (another) batch this round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Nothing eligible.
    Empty,
    /// The newest member is younger than the quiet window: look again at `until`.
    QuietWindow { until: Time },
    /// Its in-flight budget is used; the running Job's completion re-enqueues it.
    RepositoryBusy,
    /// The cluster-wide cap is reached; any batch Job's completion re-enqueues it.
    GlobalCap,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dispatch {
    pub create: Vec<BatchSpec>,
    /// Repositories that still have members but got no (further) batch, with the reason.
    pub waits: Vec<(String, Wait)>,
}

impl Dispatch {
    /// The earliest quiet-window expiry: when the caller should requeue.
    pub fn requeue_at(&self) -> Option<Time> {
        self.waits
            .iter()
            .filter_map(|(_, w)| match w {
                Wait::QuietWindow { until } => Some(*until),
                Wait::Empty | Wait::RepositoryBusy | Wait::GlobalCap => None,
            })
            .min()
    }
}

/// Take the next batch from `pending` (sorted oldest first), if the quiet window allows.
fn take_batch(pending: &[FireMember], tuning: &BatchTuning, now: Time) -> Result<usize, Wait> {
    let Some(newest) = pending.iter().map(|m| m.deletion_timestamp).max() else {
        return Err(Wait::Empty);
    };
    let quiet = Duration::seconds(tuning.quiet_window_seconds);
    let max = tuning.max_members.max(1);
    if pending.len() >= max || newest <= now - quiet {
        Ok(pending.len().min(max))
    } else {
        Err(Wait::QuietWindow { until: newest + quiet })
    }
}

/// Decide every batch to CREATE this round, across repositories. `jobs` are the unreaped batch
/// Jobs cluster-wide. Repositories are served oldest-first (by their oldest member) so a
/// global cap cannot starve one of them forever.
pub fn next_batches(queues: &[RepoQueue], jobs: &[BatchJob], tuning: &BatchTuning, now: Time) -> Dispatch {
    let mut running_per_repo: BTreeMap<&str, usize> = BTreeMap::new();
    let mut running_total = 0usize;
    for j in jobs.iter().filter(|j| !j.phase.is_terminal()) {
        *running_per_repo.entry(j.repo_uid.as_str()).or_default() += 1;
        running_total += 1;
    }
    let listed = in_flight_members(jobs);
    let mut order: Vec<&RepoQueue> = queues.iter().collect();
    order.sort_by(|a, b| {
        let oldest = |q: &RepoQueue| q.fire_set.members.first().map(|m| (m.deletion_timestamp, m.uid.clone()));
        (oldest(a), &a.repo_uid).cmp(&(oldest(b), &b.repo_uid))
    });

    let mut out = Dispatch::default();
    for q in order {
        // Belt and braces: a member already listed by a Job never goes into another one, even
        // if the caller's fire set was computed from a staler view.
        let mut pending: Vec<FireMember> =
            q.fire_set.members.iter().filter(|m| !listed.contains(&m.uid)).cloned().collect();
        pending.sort_by(|a, b| (a.deletion_timestamp, &a.uid).cmp(&(b.deletion_timestamp, &b.uid)));
        pending.dedup_by(|a, b| a.uid == b.uid);
        let mut running = running_per_repo.get(q.repo_uid.as_str()).copied().unwrap_or(0);
        loop {
            if pending.is_empty() {
                break;
            }
            if running >= tuning.max_in_flight_per_repo {
                out.waits.push((q.repo_uid.clone(), Wait::RepositoryBusy));
                break;
            }
            if tuning.global_cap > 0 && running_total >= tuning.global_cap {
                out.waits.push((q.repo_uid.clone(), Wait::GlobalCap));
                break;
            }
            match take_batch(&pending, tuning, now) {
                Ok(n) => {
                    let members: Vec<FireMember> = pending.drain(..n).collect();
                    let ids: Vec<String> = members.iter().map(|m| m.snapshot_id.clone()).collect();
                    out.create.push(BatchSpec {
                        name: batch_name(&q.repo_uid, members.iter().map(|m| m.uid.as_str())),
                        repo_uid: q.repo_uid.clone(),
                        chunks: chunk_ids(&ids, tuning.ids_per_call),
                        members,
                    });
                    running += 1;
                    running_total += 1;
                }
                Err(wait) => {
                    out.waits.push((q.repo_uid.clone(), wait));
                    break;
                }
            }
        }
    }
    out
}

/// What a member learns from the batch Jobs that list it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberBatch {
    NotListed,
    Running {
        job: String,
    },
    /// A Complete Job lists it, or a failed one says it released it (deleted, or already gone):
    /// remove the finalizer, count `deletions_total{deleted}`.
    Completed {
        job: String,
    },
    /// A Failed Job lists it without releasing it: keep the finalizer; it re-batches after the
    /// Job is reaped.
    Failed {
        job: String,
    },
    /// A batch found that the manifest is not this Snapshot's and kept it: keep the finalizer,
    /// say so (`DeletionRefused`), never batch it again on its own.
    Refused {
        job: String,
        reason: Refusal,
    },
}

pub fn member_batch(uid: &str, jobs: &[BatchJob]) -> MemberBatch {
    // A release is the evidence that frees the member, so it wins over a Running retry, which
    // wins over a refusal, which wins over a plain Failed listing not yet reaped.
    let listing = |want: &dyn Fn(&BatchJob) -> bool| {
        jobs.iter().find(|j| want(j) && j.members.iter().any(|m| m == uid)).map(|j| j.name.clone())
    };
    let released = |j: &BatchJob| match j.phase {
        JobPhase::Complete { .. } => true,
        JobPhase::Failed { .. } => j.outcomes.get(uid) == Some(&MemberOutcome::Released),
        JobPhase::Running => false,
    };
    let running = |j: &BatchJob| match j.phase {
        JobPhase::Running => true,
        JobPhase::Complete { .. } | JobPhase::Failed { .. } => false,
    };
    let failed = |j: &BatchJob| match j.phase {
        JobPhase::Failed { .. } => true,
        JobPhase::Running | JobPhase::Complete { .. } => false,
    };
    let refusal = jobs.iter().filter(|j| failed(j)).find_map(|j| match j.outcomes.get(uid) {
        Some(MemberOutcome::Refused(r)) => Some((j.name.clone(), *r)),
        Some(MemberOutcome::Released) | None => None,
    });
    if let Some(job) = listing(&released) {
        MemberBatch::Completed { job }
    } else if let Some(job) = listing(&running) {
        MemberBatch::Running { job }
    } else if let Some((job, reason)) = refusal {
        MemberBatch::Refused { job, reason }
    } else if let Some(job) = listing(&failed) {
        MemberBatch::Failed { job }
    } else {
        MemberBatch::NotListed
    }
}

/// What to do with one batch Job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reap {
    Keep,
    /// Delete it now (propagation Background).
    Delete,
    /// A failed Job: delete it at this time.
    DeleteAt(Time),
}

/// Reaping rules: a running Job stays; a complete Job goes once every listed member is gone or
/// has lost its finalizer (otherwise a member could miss the evidence that releases it); a
/// failed Job goes 60 s after failing, releasing its name for a retry of the same member set.
pub fn reap(job: &BatchJob, still_holding_finalizer: impl Fn(&str) -> bool, tuning: &BatchTuning, now: Time) -> Reap {
    match job.phase {
        JobPhase::Running => Reap::Keep,
        JobPhase::Complete { .. } => {
            if job.members.iter().any(|m| still_holding_finalizer(m)) {
                Reap::Keep
            } else {
                Reap::Delete
            }
        }
        JobPhase::Failed { at } => {
            let when = at + Duration::seconds(tuning.failed_reap_delay_seconds);
            if now >= when { Reap::Delete } else { Reap::DeleteAt(when) }
        }
    }
}

/// How long the dispatcher remembers a batch Job it created that the Job store has not shown
/// yet. Past this the store is trusted again (a Job that never appears was never created).
pub const CREATED_MEMORY_SECONDS: i64 = 600;

/// Read-your-writes for batch Jobs. The Job store lags a CREATE (seconds under load); a pass
/// in between must still count the new Job as running and its members as in flight, or it
/// would start a second Job for the same repository over the same members. `created` maps
/// a Job name to the Job as created and when. Entries the store now shows, or older than
/// [`CREATED_MEMORY_SECONDS`], are forgotten; the rest are added to the store's view.
pub fn with_created(store: &[BatchJob], created: &mut BTreeMap<String, (BatchJob, Time)>, now: Time) -> Vec<BatchJob> {
    created.retain(|name, (_, at)| {
        !store.iter().any(|j| &j.name == name) && now - *at < Duration::seconds(CREATED_MEMORY_SECONDS)
    });
    let mut all = store.to_vec();
    all.extend(created.values().map(|(j, _)| j.clone()));
    all
}

/// How long pooling waits for released members whose decision has not landed yet, measured
/// from the last time that backlog shrank. Progress restarts the clock, so a slow API server
/// (one status write per member) still pools an acknowledged wave into full batches; a backlog
/// that stops shrinking stops holding back partial batches after this long.
pub const FLIP_STALL_SECONDS: i64 = 60;

/// Pooling memory for one repository: the backlog of members about to flip and when it last
/// shrank (or appeared).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlipBacklog {
    pub remaining: usize,
    pub progress_at: Time,
}

/// Whether partial batches must wait because more released members are still on their way.
/// `remaining` is how many members are flipping now; `prev` is this repository's memory from
/// the previous pass. Returns the verdict and the memory to keep (None when nothing flips).
pub fn pool_more_coming(prev: Option<FlipBacklog>, remaining: usize, now: Time) -> (bool, Option<FlipBacklog>) {
    if remaining == 0 {
        return (false, None);
    }
    let progress_at = match prev {
        Some(p) if remaining >= p.remaining => p.progress_at,
        Some(_) | None => now,
    };
    let wait = now - progress_at < Duration::seconds(FLIP_STALL_SECONDS);
    (wait, Some(FlipBacklog { remaining, progress_at }))
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use chrono::Utc;

    use super::*;

    fn t(secs: i64) -> Time {
        Utc.with_ymd_and_hms(2026, 7, 17, 10, 0, 0).unwrap() + Duration::seconds(secs)
    }

    fn member(i: usize, ts: i64) -> FireMember {
        FireMember {
            uid: format!("u{i:04}"),
            snapshot_id: format!("{i:032x}"),
            source: format!("app@t:/pvc/u{i:04}"),
            deletion_timestamp: t(ts),
        }
    }

    fn queue(repo: &str, members: Vec<FireMember>) -> RepoQueue {
        RepoQueue { repo_uid: repo.into(), fire_set: FireSet { members, excluded: vec![] } }
    }

    #[test]
    fn name_is_deterministic_and_order_independent() {
        let a = batch_name("r1", ["b", "a", "c"]);
        let members: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let owner = |uid: &str, controller: bool| k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "kopiur.home-operations.com/v1alpha1".into(),
            kind: "Repository".into(),
            name: "r".into(),
            uid: uid.into(),
            controller: Some(controller),
            block_owner_deletion: None,
        };
        // issue 31 (audit 4.2): only the controller's own batch counts.
        assert!(trusted_batch("home", &a, &[owner("r1", true)], "r1", &members, Some("home")));
        assert!(!trusted_batch("tenant", &a, &[owner("r1", true)], "r1", &members, Some("home")), "another namespace");
        assert!(!trusted_batch("home", &a, &[owner("r1", true)], "r1", &members, None), "an unknown repository");
        assert!(
            !trusted_batch("home", "snapdel-x", &[owner("r1", true)], "r1", &members, Some("home")),
            "a made-up name"
        );
        assert!(!trusted_batch("home", &a, &[owner("r1", false)], "r1", &members, Some("home")), "not the controller");
        assert!(!trusted_batch("home", &a, &[owner("r2", true)], "r1", &members, Some("home")), "another owner");
        assert!(!trusted_batch("home", &a, &[], "r1", &members, Some("home")), "no owner");
        assert_eq!(a, batch_name("r1", ["c", "b", "a"]));
        assert!(a.starts_with("snapdel-"));
        assert_eq!(a.len(), "snapdel-".len() + 10);
        assert!(a["snapdel-".len()..].chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_ne!(a, batch_name("r2", ["a", "b", "c"]));
        assert_ne!(a, batch_name("r1", ["a", "b"]));
        // Pinned value: sha256("r1\na\nb\nc").
        assert_eq!(a, format!("snapdel-{}", &sha256_hex(b"r1\na\nb\nc")[..10]));
    }

    #[test]
    fn ids_chunk_fifty_per_call() {
        let ids: Vec<String> = (0..120).map(|i| i.to_string()).collect();
        let chunks = chunk_ids(&ids, 50);
        assert_eq!(chunks.iter().map(Vec::len).collect::<Vec<_>>(), [50, 50, 20]);
        assert_eq!(chunks.concat(), ids);
    }

    #[test]
    fn a_lone_deletion_waits_out_the_quiet_window() {
        let q = [queue("r1", vec![member(0, 0)])];
        let d = next_batches(&q, &[], &BatchTuning::default(), t(5));
        assert!(d.create.is_empty());
        assert_eq!(d.requeue_at(), Some(t(10)));
        let d = next_batches(&q, &[], &BatchTuning::default(), t(10));
        assert_eq!(d.create.len(), 1);
        assert_eq!(d.create[0].members.len(), 1);
        assert_eq!(d.create[0].chunks, vec![vec![format!("{:032x}", 0)]]);
    }

    #[test]
    fn a_full_batch_skips_the_quiet_window_and_takes_the_oldest() {
        let members: Vec<FireMember> = (0..250).map(|i| member(i, 1000 - i as i64)).collect();
        let d = next_batches(&[queue("r1", members)], &[], &BatchTuning::default(), t(1000));
        assert_eq!(d.create.len(), 1);
        let b = &d.create[0];
        assert_eq!(b.members.len(), 200);
        assert_eq!(b.chunks.len(), 4);
        // The oldest 200 by deletionTimestamp are u0249 .. u0050.
        assert_eq!(b.members[0].uid, "u0249");
        assert!(b.members.iter().all(|m| m.deletion_timestamp <= t(950)));
        assert_eq!(d.waits, vec![("r1".to_string(), Wait::RepositoryBusy)]);
    }

    #[test]
    fn one_job_in_flight_per_repository() {
        let running = BatchJob {
            name: "snapdel-x".into(),
            repo_uid: "r1".into(),
            members: vec!["z".into()],
            phase: JobPhase::Running,
            outcomes: BTreeMap::new(),
        };
        let q = [queue("r1", vec![member(1, 0)]), queue("r2", vec![member(2, 0)])];
        let d = next_batches(&q, &[running], &BatchTuning::default(), t(100));
        assert_eq!(d.create.iter().map(|b| b.repo_uid.as_str()).collect::<Vec<_>>(), ["r2"]);
        assert_eq!(d.waits, vec![("r1".to_string(), Wait::RepositoryBusy)]);
    }

    #[test]
    fn global_cap_zero_is_uncapped_and_one_serializes() {
        let q: Vec<RepoQueue> = (0..5).map(|r| queue(&format!("r{r}"), vec![member(r, r as i64)])).collect();
        let d = next_batches(&q, &[], &BatchTuning::default(), t(100));
        assert_eq!(d.create.len(), 5);
        let capped = BatchTuning { global_cap: 1, ..BatchTuning::default() };
        let d = next_batches(&q, &[], &capped, t(100));
        assert_eq!(d.create.len(), 1);
        assert_eq!(d.create[0].repo_uid, "r0", "the repository with the oldest member goes first");
        assert_eq!(d.waits.iter().filter(|(_, w)| *w == Wait::GlobalCap).count(), 4);
    }

    #[test]
    fn members_listed_by_an_unreaped_job_are_never_rebatched() {
        let failed = BatchJob {
            name: "snapdel-old".into(),
            repo_uid: "r1".into(),
            members: vec!["u0001".into()],
            phase: JobPhase::Failed { at: t(0) },
            outcomes: BTreeMap::new(),
        };
        let d =
            next_batches(&[queue("r1", vec![member(1, 0), member(2, 0)])], &[failed], &BatchTuning::default(), t(100));
        assert_eq!(d.create.len(), 1);
        assert_eq!(d.create[0].members.iter().map(|m| m.uid.as_str()).collect::<Vec<_>>(), ["u0002"]);
    }

    #[test]
    fn env_cap_parsing() {
        assert_eq!(parse_global_cap(None), Ok(0));
        assert_eq!(parse_global_cap(Some("")), Ok(0));
        assert_eq!(parse_global_cap(Some(" 3 ")), Ok(3));
        assert!(parse_global_cap(Some("-1")).is_err());
        assert!(parse_global_cap(Some("many")).is_err());
    }

    #[test]
    fn reaping_rules() {
        let tuning = BatchTuning::default();
        let mut job = BatchJob {
            name: "j".into(),
            repo_uid: "r".into(),
            members: vec!["a".into(), "b".into()],
            phase: JobPhase::Running,
            outcomes: BTreeMap::new(),
        };
        assert_eq!(reap(&job, |_| false, &tuning, t(0)), Reap::Keep);
        job.phase = JobPhase::Complete { at: t(0) };
        assert_eq!(reap(&job, |m| m == "b", &tuning, t(1)), Reap::Keep);
        assert_eq!(reap(&job, |_| false, &tuning, t(1)), Reap::Delete);
        job.phase = JobPhase::Failed { at: t(0) };
        assert_eq!(reap(&job, |_| true, &tuning, t(30)), Reap::DeleteAt(t(60)));
        assert_eq!(reap(&job, |_| true, &tuning, t(60)), Reap::Delete);
    }

    #[test]
    fn member_learns_from_the_jobs_that_list_it() {
        let jobs = vec![
            BatchJob {
                name: "f".into(),
                repo_uid: "r".into(),
                members: vec!["a".into()],
                phase: JobPhase::Failed { at: t(0) },
                outcomes: BTreeMap::new(),
            },
            BatchJob {
                name: "c".into(),
                repo_uid: "r".into(),
                members: vec!["b".into()],
                phase: JobPhase::Complete { at: t(0) },
                outcomes: BTreeMap::new(),
            },
            BatchJob {
                name: "r".into(),
                repo_uid: "r".into(),
                members: vec!["c".into()],
                phase: JobPhase::Running,
                outcomes: BTreeMap::new(),
            },
        ];
        assert_eq!(member_batch("a", &jobs), MemberBatch::Failed { job: "f".into() });
        assert_eq!(member_batch("b", &jobs), MemberBatch::Completed { job: "c".into() });
        assert_eq!(member_batch("c", &jobs), MemberBatch::Running { job: "r".into() });
        assert_eq!(member_batch("d", &jobs), MemberBatch::NotListed);
    }

    /// A failed batch releases the members its Pod said it released and keeps the refused
    /// ones; members it did not name (a failed delete, a message cut short) stay held.
    #[test]
    fn a_failed_batch_releases_only_what_it_names() {
        let members: Vec<String> = ["a", "b", "c"].iter().map(|x| x.to_string()).collect();
        let failed = BatchJob {
            name: "f".into(),
            repo_uid: "r".into(),
            members,
            phase: JobPhase::Failed { at: t(0) },
            outcomes: BTreeMap::from([
                ("a".to_string(), MemberOutcome::Released),
                ("b".to_string(), MemberOutcome::Refused(Refusal::UidTagMismatch)),
            ]),
        };
        let jobs = vec![failed];
        assert_eq!(member_batch("a", &jobs), MemberBatch::Completed { job: "f".into() });
        assert_eq!(member_batch("b", &jobs), MemberBatch::Refused { job: "f".into(), reason: Refusal::UidTagMismatch });
        assert_eq!(member_batch("c", &jobs), MemberBatch::Failed { job: "f".into() });
        // An outcome on a Running Job (not possible from the controller, which writes it only on
        // a failed one) releases nothing.
        let mut running = jobs[0].clone();
        running.phase = JobPhase::Running;
        assert_eq!(member_batch("a", &[running]), MemberBatch::Running { job: "f".into() });
    }
    #[test]
    fn pooling_waits_while_the_flip_backlog_shrinks() {
        // A wave of 600 flipping 5 per pass, one pass every 2 s: far longer than 60 s in total,
        // yet partial batches wait throughout because every pass makes progress.
        let mut mem = None;
        let mut now = 0;
        for remaining in (5..=600).rev().step_by(5) {
            let (wait, next) = pool_more_coming(mem, remaining, t(now));
            assert!(wait, "progress at {remaining} remaining must keep pooling");
            mem = next;
            now += 2;
        }
        assert!(now > FLIP_STALL_SECONDS * 3);
        assert_eq!(pool_more_coming(mem, 0, t(now)), (false, None));
    }

    #[test]
    fn pooling_stops_waiting_on_a_stalled_backlog() {
        let (w, mem) = pool_more_coming(None, 40, t(0));
        assert!(w);
        let (w, mem) = pool_more_coming(mem, 40, t(FLIP_STALL_SECONDS - 1));
        assert!(w, "still within the stall bound");
        let (w, mem) = pool_more_coming(mem, 40, t(FLIP_STALL_SECONDS));
        assert!(!w, "no progress for the whole bound: partial batches may fire");
        assert_eq!(mem.unwrap().progress_at, t(0));
        // A growing backlog (more members released) is not progress either.
        let (w, _) = pool_more_coming(mem, 55, t(FLIP_STALL_SECONDS + 5));
        assert!(!w);
        // Progress restarts the clock.
        let (w, mem) = pool_more_coming(mem, 10, t(FLIP_STALL_SECONDS + 10));
        assert!(w);
        assert_eq!(mem.unwrap().progress_at, t(FLIP_STALL_SECONDS + 10));
    }
    #[test]
    fn a_created_job_counts_as_running_until_the_store_shows_it() {
        let tuning = BatchTuning::default();
        let members: Vec<FireMember> = (0..600).map(|i| member(i, 0)).collect();
        let q = vec![queue("r1", members)];
        let first = next_batches(&q, &[], &tuning, t(30));
        assert_eq!(first.create.len(), 1, "one Job per repository at a time");
        let spec = &first.create[0];
        let mut created = BTreeMap::new();
        created.insert(
            spec.name.clone(),
            (
                BatchJob {
                    name: spec.name.clone(),
                    repo_uid: "r1".into(),
                    members: spec.members.iter().map(|m| m.uid.clone()).collect(),
                    phase: JobPhase::Running,
                    outcomes: BTreeMap::new(),
                },
                t(30),
            ),
        );
        // Two seconds later the store still does not show it: no second Job.
        let view = with_created(&[], &mut created, t(32));
        let again = next_batches(&q, &view, &tuning, t(32));
        assert!(again.create.is_empty(), "a stale store must not start a second Job: {:?}", again.create);
        assert_eq!(again.waits, vec![("r1".to_string(), Wait::RepositoryBusy)]);
        // Once the store shows it, the memory is dropped and the store's view rules.
        let shown = BatchJob { phase: JobPhase::Complete { at: t(40) }, ..view[0].clone() };
        let view = with_created(std::slice::from_ref(&shown), &mut created, t(41));
        assert!(created.is_empty());
        assert_eq!(view, vec![shown]);
        // A creation the store never shows is forgotten after the memory bound.
        created.insert("ghost".into(), (BatchJob { name: "ghost".into(), ..view[0].clone() }, t(0)));
        assert_eq!(with_created(&[], &mut created, t(CREATED_MEMORY_SECONDS - 1)).len(), 1);
        assert!(with_created(&[], &mut created, t(CREATED_MEMORY_SECONDS)).is_empty());
    }
}
