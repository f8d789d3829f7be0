//! The `snapshot-cleanup` finalizer, applying the pure ADR-0006 plan
//! (`crate::deletion::plan`): skip / Orphan / Retain / no manifest / repository gone /
//! namespace Orphan release without contacting kopia; an operator prune or an approved external
//! deletion records `decision: Delete` and joins a batch of the dispatcher (`dispatch.rs`); an
//! external deletion while the repository's breaker is tripped is held until acknowledged;
//! the schedule-cascade guard releases a produced Snapshot whose schedule is gone, replaced or
//! terminating without deleting its data. The finalizer comes off a deleted member only when a
//! Complete batch Job lists it.
use chrono::{DateTime, Utc};
use k8s_openapi::api::batch::v1::Job;
use kopiur_api::Snapshot;
use kopiur_api::names::{annotation, condition, event, finalizer, reason};
use kopiur_api::shared::RepositoryRef;
use kopiur_api::snapshot::SnapshotPhase;
use kube::api::{DeleteParams, Patch, PatchParams, PropagationPolicy};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};

use super::dispatch;
use crate::conditions::{Cond, CondStatus};
use crate::context::Context;
use crate::deletion::batch::{self, MemberBatch};
use crate::deletion::breaker::MemberBreaker;
use crate::deletion::cascade::{self, LiveSchedule, Owner};
use crate::deletion::observe;
use crate::deletion::plan::{self, SnapshotDeletionFacts};
use crate::deletion::types::{EventType, Manifest, RepoPresence};
use crate::error::{ApiStep, Error};
use crate::metrics::labels::DeletionLabels;
use crate::repo_view::RepoView;
use kopiur_mover::batch_outcome::Refusal;

/// Removes the cleanup finalizer. The release's Events are published only once the patch has
/// landed: a reconcile of a stale copy (the store lags the release, or another write moved the
/// resourceVersion) is refused with 404/409 and must not publish them again (T22: exactly one
/// `SnapshotRetainedOnScheduleDelete` per child).
async fn release(
    snap: &Snapshot,
    ctx: &Context,
    outcome: &str,
    events: &[crate::deletion::types::PlannedEvent],
) -> Result<Action, Error> {
    let fins: Vec<String> = snap.finalizers().iter().filter(|f| *f != finalizer::SNAPSHOT_CLEANUP).cloned().collect();
    let body = serde_json::json!({"metadata": {"finalizers": fins, "resourceVersion": snap.resource_version()}});
    let ns = snap.namespace().unwrap_or_default();
    let api: Api<Snapshot> = Api::namespaced(ctx.client.clone(), &ns);
    match api.patch(&snap.name_any(), &PatchParams::default(), &Patch::Merge(&body)).await {
        Ok(_) => {
            ctx.metrics.deletions.inc(DeletionLabels { namespace: ns.clone(), outcome: outcome.into() });
            let reference = snap.object_ref(&());
            for ev in events {
                ctx.event(&reference, ev.kind == EventType::Warning, ev.reason, ev.message.clone()).await;
            }
            Ok(Action::await_change())
        }
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {
            Ok(Action::requeue(std::time::Duration::from_secs(1)))
        }
        Err(e) => Err(Error::api("remove Snapshot finalizer", e)),
    }
}

/// The schedule axis, read by a live GET (never the cache): a stale store must not turn a
/// schedule deletion into data loss.
/// A failed GET (anything but a 404) is an error of class Transient: the caller returns it
/// before anything is planned, so an unreadable schedule is never read as gone (docs/design/mass-deletion.md §5.3).
async fn owner(snap: &Snapshot, client: &kube::Client) -> Result<Owner, Error> {
    let Some((name, uid)) = observe::schedule_owner(snap) else { return Ok(Owner::NotScheduleOwned) };
    let api: Api<kopiur_api::SnapshotSchedule> = Api::namespaced(client.clone(), &snap.namespace().unwrap_or_default());
    let live = match api.get_opt(&name).await.step("read Snapshot owner")? {
        None => LiveSchedule::NotFound,
        Some(s) => {
            LiveSchedule::Found { uid: s.uid().unwrap_or_default(), terminating: s.meta().deletion_timestamp.is_some() }
        }
    };
    Ok(Owner::Schedule { name, state: cascade::schedule_state(&uid, &live) })
}

/// Asks for a catalog scan on the repository. Every cascade release re-stamps (one write per
/// second at most: the value has second precision), so the last release of a wave is always
/// covered by a scan that starts after it; the repository coalesces the scans themselves.
async fn request_catalog_scan(ctx: &Context, repo: &RepoView, now: DateTime<Utc>) {
    let value = now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let current = repo.meta().annotations.as_ref().and_then(|a| a.get(annotation::CATALOG_SCAN_REQUESTED_AT));
    if current == Some(&value) {
        return;
    }
    let body = serde_json::json!({"metadata": {"annotations": {annotation::CATALOG_SCAN_REQUESTED_AT: value}}});
    let pp = PatchParams::default();
    let res = match repo {
        RepoView::Namespaced(r) => {
            Api::<kopiur_api::Repository>::namespaced(ctx.client.clone(), &r.namespace().unwrap_or_default())
                .patch(&repo.name(), &pp, &Patch::Merge(&body))
                .await
                .map(|_| ())
        }
        RepoView::Cluster(_) => Api::<kopiur_api::ClusterRepository>::all(ctx.client.clone())
            .patch(&repo.name(), &pp, &Patch::Merge(&body))
            .await
            .map(|_| ()),
    };
    if let Err(e) = res {
        tracing::warn!(error = %e, "requesting a catalog scan failed");
    }
}

/// The kstatus trio of a Snapshot whose finalizer is still pending (docs/design/api-contract.md §7.3, phase
/// `Deleting`): `Reconciling` while the deletion proceeds by itself (waiting for a batch, for
/// the repository, or for the namespace's tenancy), `Stalled` while `DeletionHeld=True` (the
/// mass-deletion breaker needs a human's ack). Ready is always False, carrying `ready`'s reason
/// and message; exactly one of the three is True.
pub fn deleting_trio(held: bool, ready: Cond) -> [Cond; 3] {
    let (reconciling, stalled) =
        if held { (CondStatus::False, CondStatus::True) } else { (CondStatus::True, CondStatus::False) };
    let msg = |s: CondStatus| if s == CondStatus::True { ready.message.clone() } else { String::new() };
    [
        Cond {
            type_: condition::RECONCILING,
            status: reconciling,
            reason: ready.reason.clone(),
            message: msg(reconciling),
        },
        Cond { type_: condition::STALLED, status: stalled, reason: ready.reason.clone(), message: msg(stalled) },
        Cond { status: CondStatus::False, ..ready },
    ]
}

pub async fn reconcile_deletion(snap: &Snapshot, ctx: &Context, now: DateTime<Utc>) -> Result<Action, Error> {
    super::stage::release_on_delete(ctx, snap).await?;
    if !observe::finalizer_present(snap) {
        return Ok(Action::await_change());
    }
    // Every decision below counts over the Snapshot store: a store that has not finished its
    // first sync would under-count the breaker. Wait for it (never decide on a guess).
    if !ctx.stores.synced.snapshots.is_synced() {
        return Ok(Action::requeue(std::time::Duration::from_secs(2)));
    }
    let ns = snap.namespace().unwrap_or_default();
    let status = snap.status.clone().unwrap_or_default();
    let Some(deletion_timestamp) = observe::deletion_timestamp(snap) else { return Ok(Action::await_change()) };

    // The evidence that releases a deleted member: a Complete batch Job listing it.
    let jobs: Vec<batch::BatchJob> = dispatch::batch_jobs(ctx).into_iter().map(|(_, b)| b).collect();
    match batch::member_batch(&snap.uid().unwrap_or_default(), &jobs) {
        MemberBatch::Completed { job } => {
            tracing::info!(snapshot = %snap.name_any(), %job, "kopia snapshot deleted by its batch; releasing the finalizer");
            return release(snap, ctx, "deleted", &[]).await;
        }
        MemberBatch::Running { .. } => return Ok(Action::requeue(std::time::Duration::from_secs(30))),
        MemberBatch::Refused { job, reason } => return refuse(snap, ctx, &job, reason, now).await,
        MemberBatch::Failed { .. } | MemberBatch::NotListed => {}
    }
    let obs = deletion_facts(ctx, snap, deletion_timestamp, now).await?;
    let p = plan::plan_snapshot_deletion(&obs.facts, now);
    let reference = snap.object_ref(&());
    let releasing = matches!(p.action, plan::Action::Orphan(_) | plan::Action::Release(_));
    // A release publishes its Events after its finalizer patch (see `release`).
    for ev in p.events.iter().filter(|_| !releasing) {
        ctx.event(&reference, ev.kind == EventType::Warning, ev.reason, ev.message.clone()).await;
    }
    if p.request_catalog_scan
        && let Some(rv) = &obs.repo
    {
        request_catalog_scan(ctx, rv, now).await;
    }
    match &p.action {
        plan::Action::Orphan(_) | plan::Action::Release(_) => {
            return release(snap, ctx, p.action.release_outcome().unwrap_or("released"), &p.events).await;
        }
        plan::Action::Wait => {
            // The backup still runs: stop its Job first, then decide again.
            let dp =
                DeleteParams { propagation_policy: Some(PropagationPolicy::Background), ..DeleteParams::default() };
            match Api::<Job>::namespaced(ctx.client.clone(), &ns).delete(&obs.backup_job_name, &dp).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(Error::api("delete backup Job", e)),
            }
            return Ok(Action::requeue(std::time::Duration::from_secs(5)));
        }
        plan::Action::Held | plan::Action::DeleteSnapshot(_) => {}
    }
    // Held or DeleteSnapshot: persist the record and the conditions (only when they change).
    let mut next = status.clone();
    next.phase = Some(SnapshotPhase::Deleting);
    next.deletion = p.record.clone().map(Box::new);
    let conds = deleting_conditions(&p, obs.tenancy_denied, refused_message(snap));
    next.conditions =
        crate::conditions::merge_conditions(&status.conditions, &conds, snap.meta().generation.unwrap_or(0), now);
    let api: Api<Snapshot> = Api::namespaced(ctx.client.clone(), &ns);
    crate::status::write_status(&api, snap, &status, &next).await?;
    match &p.action {
        plan::Action::DeleteSnapshot(_) => {
            ctx.dispatch.notify_one();
            Ok(Action::requeue(std::time::Duration::from_secs(60)))
        }
        // Released by the repository watch (ack annotation) or the dispatcher's replan.
        plan::Action::Held | plan::Action::Orphan(_) | plan::Action::Release(_) | plan::Action::Wait => {
            Ok(Action::requeue(std::time::Duration::from_secs(300)))
        }
    }
}

/// What the deletion path read.
struct DeletionObserved {
    facts: SnapshotDeletionFacts,
    /// The pinned repository, when it still exists with the pinned uid.
    repo: Option<RepoView>,
    backup_job_name: String,
    /// Why the namespace may not delete in this ClusterRepository, when it may not.
    tenancy_denied: Option<String>,
}

/// The deletion facts: the backup Job, the pinned repository, its gate and its mass-deletion
/// breaker, the owner (a live schedule GET, only for an external deletion of a known manifest),
/// the namespace's state, and the records on the Snapshot.
async fn deletion_facts(
    ctx: &Context,
    snap: &Snapshot,
    deletion_timestamp: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<DeletionObserved, Error> {
    let ns = snap.namespace().unwrap_or_default();
    let status = snap.status.clone().unwrap_or_default();
    let backup_job_name = kopiur_mover::job::job_name(&snap.name_any());
    let backup_job = ctx.stores.jobs.get(&ObjectRef::new(&backup_job_name).within(&ns));
    let backup_active = matches!(crate::run_job::job_state(backup_job.as_deref()), crate::run_job::JobState::Active)
        || matches!(status.phase, Some(SnapshotPhase::Running));
    let pinned = status.resolved.as_ref().and_then(|r| r.repository.clone());
    let repo = pinned.as_ref().and_then(|p| {
        let r = RepositoryRef { name: p.name.clone(), kind: p.kind, namespace: p.namespace.clone() };
        ctx.repository(&ns, &r).filter(|rv| p.uid.as_deref().is_none_or(|u| u == rv.uid()))
    });
    let policy_default = snap.spec.policy_ref.as_ref().and_then(|pr| {
        let pns = pr.namespace.clone().unwrap_or_else(|| ns.clone());
        ctx.stores.policies.get(&ObjectRef::new(&pr.name).within(&pns)).map(|p| p.spec.default_deletion_policy)
    });
    // ClusterRepository tenancy (docs/design/api-contract.md §5): a Snapshot whose namespace is not (or no longer)
    // allowed never joins a batch. Its decision is recorded as usual, the kopia snapshot is
    // kept, and it parks NamespaceNotAllowed until the namespace is allowed again (or
    // `skip-snapshot-cleanup` orphans it): never a delete on a guess, never a silent release.
    let tenancy_denied = repo.as_ref().filter(|rv| !ctx.tenancy_allows(rv, &ns)).map(|rv| {
        let what = match rv {
            RepoView::Namespaced(_) => format!("spec.allowedNamespaces of Repository {}/{}", rv.namespace().unwrap_or_default(), rv.name()),
            RepoView::Cluster(_) => format!("allowedNamespaces of ClusterRepository {}", rv.name()),
        };
        format!(
            "this namespace is not in {what}; the kopia snapshot is kept and deleted once the namespace is allowed again (annotate {} to release this Snapshot and keep the data)",
            annotation::SKIP_SNAPSHOT_CLEANUP
        )
    });
    let (presence, member, on_ns_delete) = match &repo {
        None => (RepoPresence::Gone, MemberBreaker::quiet(), Default::default()),
        Some(rv) => {
            let gate = ctx.gate(
                &ns,
                &RepositoryRef {
                    name: rv.name(),
                    kind: pinned.as_ref().map(|p| p.kind).unwrap_or_default(),
                    namespace: rv.namespace(),
                },
            );
            let dels: Vec<_> =
                ctx.stores.snapshots.state().into_iter().filter(|s| s.meta().deletion_timestamp.is_some()).collect();
            let state = dispatch::breaker_for(ctx, rv, &dels, now);
            (
                RepoPresence::Present { ready: gate == crate::gating::Gate::Open },
                state.member(deletion_timestamp),
                rv.common().on_namespace_delete,
            )
        }
    };
    let manifest = observe::manifest(snap, backup_active);
    let owner = match (&manifest, observe::pruned_by(snap).is_external()) {
        (Manifest::Known(_), true) => owner(snap, &ctx.client).await?,
        (Manifest::Known(_), false) | (Manifest::None | Manifest::Unsettled, _) => Owner::NotScheduleOwned,
    };
    let ns_terminating =
        ctx.stores.namespaces.get(&ObjectRef::new(&ns)).is_some_and(|n| n.metadata.deletion_timestamp.is_some());
    let facts = SnapshotDeletionFacts {
        deletion_timestamp,
        skip: observe::skip(snap),
        policy: observe::effective_policy(snap, policy_default),
        manifest,
        pruned_by: observe::pruned_by(snap),
        repo: presence,
        ns_terminating,
        on_namespace_delete: on_ns_delete,
        owner,
        on_schedule_delete: observe::on_schedule_delete(snap),
        breaker: member,
        previous: observe::previous_record(snap),
    };
    Ok(DeletionObserved { facts, repo, backup_job_name, tenancy_denied })
}

/// The conditions of a held or pending deletion: `DeletionHeld` as the plan words it, and
/// the trio with Ready's reason (held, tenancy, parked on the repository, or pending). Pure.
fn deleting_conditions(p: &plan::DeletionPlan, tenancy_denied: Option<String>, refused: Option<String>) -> Vec<Cond> {
    if let Some(message) = refused {
        return refused_conditions(message);
    }
    let mut conds: Vec<Cond> = Vec::new();
    if let Some(hc) = &p.held_condition {
        conds.push(Cond {
            type_: hc.type_,
            status: if hc.status { CondStatus::True } else { CondStatus::False },
            reason: hc.reason.to_string(),
            message: hc.message.clone(),
        });
    }
    let (reason, message) = match (&p.action, p.parked_on_repository, tenancy_denied) {
        (plan::Action::Held, _, _) => (
            reason::DELETION_HELD.to_string(),
            "the deletion is held by the repository's mass-deletion breaker".to_string(),
        ),
        (_, _, Some(denied)) => (reason::NAMESPACE_NOT_ALLOWED.to_string(), denied),
        (_, true, None) => (
            reason::REPOSITORY_NOT_READY.to_string(),
            "the kopia snapshot is deleted once the repository is Ready again".to_string(),
        ),
        (_, false, None) => {
            ("DeletionPending".to_string(), "waiting for a batch delete Job to remove the kopia snapshot".to_string())
        }
    };
    let ready = Cond { type_: condition::READY, status: CondStatus::False, reason, message };
    conds.extend(deleting_trio(matches!(p.action, plan::Action::Held), ready));
    conds
}

/// A batch refused this member's manifest: keep the finalizer and the data, say why and what a
/// human can do. The Warning is published once, when the condition turns True.
async fn refuse(
    snap: &Snapshot,
    ctx: &Context,
    job: &str,
    reason: Refusal,
    now: DateTime<Utc>,
) -> Result<Action, Error> {
    let requeue = Ok(Action::requeue(std::time::Duration::from_secs(300)));
    if observe::deletion_refused(snap) {
        return requeue;
    }
    let ns = snap.namespace().unwrap_or_default();
    let status = snap.status.clone().unwrap_or_default();
    let id = status.snapshot.as_ref().and_then(|r| r.kopia_snapshot_id.clone()).unwrap_or_default();
    let message = refusal_message(&snap.name_any(), &ns, &id, job, reason);
    let mut next = status.clone();
    next.phase = Some(SnapshotPhase::Deleting);
    next.conditions = crate::conditions::merge_conditions(
        &status.conditions,
        &refused_conditions(message.clone()),
        snap.meta().generation.unwrap_or(0),
        now,
    );
    let api: Api<Snapshot> = Api::namespaced(ctx.client.clone(), &ns);
    crate::status::write_status(&api, snap, &status, &next).await?;
    ctx.metrics.deletions.inc(DeletionLabels { namespace: ns.clone(), outcome: "refused".into() });
    ctx.event(&snap.object_ref(&()), true, event::SNAPSHOT_DELETION_REFUSED, message).await;
    requeue
}

pub fn refusal_message(name: &str, ns: &str, id: &str, job: &str, reason: Refusal) -> String {
    format!(
        "kopiur kept kopia snapshot {id}: {} (batch Job {job}); nothing was deleted and the finalizer stays. If the record \
         is wrong, let this Snapshot go and keep the data: kubectl annotate snapshot.kopiur.home-operations.com {name} -n \
         {ns} {}=true",
        reason.explain(),
        annotation::SKIP_SNAPSHOT_CLEANUP
    )
}

/// The message of a `DeletionRefused=True` condition, if the Snapshot carries one.
fn refused_message(snap: &Snapshot) -> Option<String> {
    let st = snap.status.as_ref()?;
    st.conditions
        .iter()
        .find(|c| c.type_ == condition::DELETION_REFUSED && c.status == "True")
        .map(|c| c.message.clone())
}

/// `DeletionRefused=True` and the trio, Stalled: only a human moves a refused member.
fn refused_conditions(message: String) -> Vec<Cond> {
    let reason = reason::DELETION_REFUSED.to_string();
    let mut conds = vec![Cond {
        type_: condition::DELETION_REFUSED,
        status: CondStatus::True,
        reason: reason.clone(),
        message: message.clone(),
    }];
    conds.extend(deleting_trio(true, Cond { type_: condition::READY, status: CondStatus::False, reason, message }));
    conds
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(reason: &str) -> Cond {
        Cond { type_: condition::READY, status: CondStatus::False, reason: reason.into(), message: "why".into() }
    }

    fn trio(held: bool, reason: &str) -> Vec<(&'static str, CondStatus, String)> {
        let mut v: Vec<_> =
            deleting_trio(held, ready(reason)).into_iter().map(|c| (c.type_, c.status, c.reason)).collect();
        v.sort_by_key(|x| x.0);
        v
    }

    /// A client whose every request is answered with `code` (a Kubernetes Status body).
    fn client_answering(code: u16) -> kube::Client {
        let svc = tower::service_fn(move |_req: http::Request<kube::client::Body>| async move {
            let body = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                          "message": "injected", "code": code,
                                          "reason": if code == 404 { "NotFound" } else { "InternalError" }});
            Ok::<_, std::convert::Infallible>(
                http::Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap(),
            )
        });
        kube::Client::new(svc, "default")
    }

    /// docs/design/mass-deletion.md §5.3: the owning schedule is read by a live GET; a GET that fails (here a
    /// 500, or a 403) is a Transient error returned to the caller (which returns it before
    /// planning), never a schedule read as gone. Only a 404 means gone. A 403 is RBAC, re-checked
    /// on the structural delay, and still an error.
    #[tokio::test]
    async fn an_owner_get_error_is_transient_and_never_read_as_gone() {
        let snap: Snapshot = serde_json::from_value(serde_json::json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": "s", "namespace": "apps", "uid": "u-s",
                         "ownerReferences": [{"apiVersion": "kopiur.home-operations.com/v1alpha1",
                             "kind": "SnapshotSchedule", "name": "nightly", "uid": "u-sched", "controller": true}]},
            "spec": {}
        }))
        .unwrap();
        for (code, class) in [
            (500, crate::error::RequeueClass::Transient),
            (403, crate::error::RequeueClass::Structural),
            (503, crate::error::RequeueClass::Transient),
        ] {
            match owner(&snap, &client_answering(code)).await {
                Err(e) => {
                    assert_eq!(e.class(), class, "{code}: {e}");
                    assert_eq!(e.step(), Some("read Snapshot owner"), "{code}: {e}");
                }
                Ok(o) => panic!("{code}: a failed GET was read as {o:?}"),
            }
        }
        match owner(&snap, &client_answering(404)).await {
            Ok(Owner::Schedule { name, state }) => {
                assert_eq!((name.as_str(), state), ("nightly", cascade::ScheduleState::Gone))
            }
            other => panic!("404: {other:?}"),
        }
        // Not schedule-owned: no GET at all (a failing client is never asked).
        let mut manual = snap.clone();
        manual.metadata.owner_references = None;
        assert!(matches!(owner(&manual, &client_answering(500)).await, Ok(Owner::NotScheduleOwned)));
    }

    /// A refused member is Stalled with DeletionRefused, and the message names the id, the
    /// reason, the Job and the command that lets it go while keeping the data.
    #[test]
    fn a_refused_member_is_stalled_and_says_what_a_human_can_do() {
        let msg = refusal_message("s1", "t2", "3549d9143e3191812b7f52f0a5b6e8d6", "snapdel-x", Refusal::UidTagMismatch);
        for part in [
            "3549d9143e3191812b7f52f0a5b6e8d6",
            "kopiur-uid tag",
            "snapdel-x",
            "nothing was deleted",
            "kubectl annotate snapshot.kopiur.home-operations.com s1 -n t2 kopiur.home-operations.com/skip-snapshot-cleanup=true",
        ] {
            assert!(msg.contains(part), "{part}: {msg}");
        }
        let conds = refused_conditions(msg.clone());
        let get = |t: &str| conds.iter().find(|c| c.type_ == t).map(|c| (c.status, c.reason.clone())).unwrap();
        assert_eq!(get("DeletionRefused"), (CondStatus::True, "DeletionRefused".into()));
        assert_eq!(get("Stalled"), (CondStatus::True, "DeletionRefused".into()));
        assert_eq!(get("Reconciling").0, CondStatus::False);
        assert_eq!(get("Ready").0, CondStatus::False);
    }

    #[test]
    fn deleting_is_reconciling_and_held_is_stalled() {
        use CondStatus::{False, True};
        // docs/design/api-contract.md §7.3: Deleting -> Reconciling; Stalled while DeletionHeld=True.
        assert_eq!(
            trio(true, "DeletionHeld"),
            vec![
                ("Ready", False, "DeletionHeld".into()),
                ("Reconciling", False, "DeletionHeld".into()),
                ("Stalled", True, "DeletionHeld".into()),
            ]
        );
        for reason in ["DeletionPending", "RepositoryNotReady", "NamespaceNotAllowed"] {
            assert_eq!(
                trio(false, reason),
                vec![
                    ("Ready", False, reason.into()),
                    ("Reconciling", True, reason.into()),
                    ("Stalled", False, reason.into())
                ],
                "{reason}: the deletion proceeds by itself"
            );
        }
        // Exactly one True, and it carries the message.
        for held in [true, false] {
            let t = deleting_trio(held, ready("R"));
            let trues: Vec<_> = t.iter().filter(|c| c.status == CondStatus::True).collect();
            assert_eq!(trues.len(), 1);
            assert_eq!(trues[0].message, "why");
        }
    }
}
