//! Restore observation: the source (a Snapshot row, a policy's newest, or an identity), the
//! repository it resolves to, the target PVC, the Job and its pods, the mover settings and
//! the credentials a launch would read, gathered into [`RestoreFacts`]. Reads stores, and the
//! API only where a launch is possible (pods, mover identity, Secret keys, the CA bundle).
use kopiur_api::names::reason;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::batch::v1::Job;
use kopiur_api::restore::{RestorePhase, RestoreSource, RestoreTarget};
use kopiur_api::shared::RepositoryRef;
use kopiur_api::snapshot::SnapshotPhase;
use kopiur_api::{Restore, Snapshot};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};

use super::plan::{Candidate, Credentials, Referent, RestoreFacts, TargetState};
use super::reconcile::CREATED_BY;
use crate::context::Context;
use crate::error::{ApiStep, Error};
use crate::mover_settings::{MoverFacts, MoverSettings, Refusal};
use crate::repo_view::RepoView;

/// What one reconcile read: the plan's [`RestoreFacts`], and what applying its steps needs.
pub(super) struct Observed {
    pub facts: RestoreFacts,
    /// The Snapshot row the source resolved to (its identity is pinned with it).
    pub source_snapshot: Option<Arc<Snapshot>>,
    pub rref: Option<RepositoryRef>,
    pub repo: Option<RepoView>,
    pub job_name: String,
    pub job: Option<Arc<Job>>,
    /// The workload's identity and the target's node, read while a launch is possible.
    pub mover: MoverFacts,
    /// A populate (`target.populator`) before it finished: its claim, prime and state.
    pub populate: Option<super::populate::Observed>,
}

impl Observed {
    /// The PVC the restore Job writes into: the target, or a populate's prime.
    pub fn mount_claim(&self, restore: &Restore) -> Option<String> {
        match &self.populate {
            Some(p) => p.prime.clone(),
            None => target_name(restore),
        }
    }
}

pub(super) fn target_name(r: &Restore) -> Option<String> {
    match &r.spec.target {
        RestoreTarget::Pvc(p) => Some(p.name.clone()),
        RestoreTarget::PvcRef(o) => Some(o.name.clone()),
        RestoreTarget::Populator(_) | RestoreTarget::StreamExec(_) => None,
    }
}

/// Whether a launch is still possible: no Job yet, and a phase before Restoring.
fn launchable(restore: &Restore, job: Option<&Arc<Job>>) -> bool {
    let phase = restore.status.as_ref().and_then(|s| s.phase.as_ref());
    matches!(phase, None | Some(RestorePhase::Pending | RestorePhase::Resolving)) && job.is_none()
}

pub(super) async fn observe(ctx: &Context, restore: &Restore, now: DateTime<Utc>) -> Result<Observed, Error> {
    let ns = restore.namespace().unwrap_or_default();
    let status = restore.status.clone().unwrap_or_default();
    // Another namespace's data needs its grant; until then nothing there is looked up.
    let cross_ns = super::tenancy::check(ctx, restore);
    let (candidate, source_snapshot) = match cross_ns {
        Some(_) => (Candidate::Deferred, None),
        None => candidate(ctx, restore, &ns),
    };
    let rref = repository_ref(ctx, restore, &ns, source_snapshot.as_ref());
    let gate = match &rref {
        Some(r) => ctx.gate(&ns, r),
        // No repository known yet (the source is missing): the gate is open so the
        // missing-snapshot decision can be taken.
        None => crate::gating::Gate::Open,
    };
    let repo = rref.as_ref().and_then(|r| ctx.repository(&ns, r));
    let (job_name, job) = job(ctx, restore).await?;
    let running = matches!(status.phase, Some(RestorePhase::Restoring));
    let finished = matches!(status.phase, Some(RestorePhase::Completed | RestorePhase::Failed));
    let populate = populate(ctx, restore, &status).await?;
    // A finished populate's prime PVC (deleted if it is still there), from the PVC store.
    let prime_left = finished && prime_stored(ctx, &status, &ns);
    let job_facts = crate::run_job::observe(
        &ctx.client,
        job.as_ref(),
        running,
        restore.spec.failure_policy.as_ref(),
        status.failure.clone(),
        &status.conditions,
        now,
    )
    .await;
    let launch = launchable(restore, job.as_ref());
    // Parked behind a closed repository gate no Job can launch: no pod LIST (docs/design/reconcile-shape.md §1.5).
    let look = launch && matches!(gate, crate::gating::Gate::Open);
    let claim = populate.as_ref().map_or_else(|| target_name(restore), |p| p.prime.clone());
    let (mover, settings) = match &repo {
        Some(rv) => mover(ctx, restore, rv, look, claim).await,
        None => (MoverFacts::default(), None),
    };
    let credentials = match &repo {
        Some(rv) if launch => credentials(ctx, &ns, rv).await,
        Some(_) | None => Credentials::NotChecked,
    };
    let facts = RestoreFacts {
        phase: status.phase.clone(),
        gate,
        pinned: status.resolved.is_some(),
        candidate,
        on_missing: restore.spec.resolved_on_missing_snapshot(),
        wait_timeout: wait_timeout(restore),
        wait_started_at: status.wait_started_at,
        target: match &populate {
            Some(p) => TargetState::Populate(p.state.clone()),
            None => target_state(ctx, restore),
        },
        job: job_facts,
        reverify_requested_at: repo.as_ref().and_then(RepoView::reverify_requested_at),
        mover_refused: mover_refused(ctx, restore, repo.as_ref(), settings.as_ref()),
        inherited_from: settings.as_ref().and_then(|r| r.as_ref().ok()).and_then(|s| s.inherited_from.clone()),
        ownership: status.ownership.clone(),
        namespace: ns.clone(),
        credentials,
        referent: if cross_ns.is_some() { Referent::NotApplicable } else { referent(ctx, restore, &ns) },
        cross_ns,
        pinned_empty: status
            .resolved
            .as_ref()
            .is_some_and(|r| r.resolution == kopiur_api::restore::Resolution::NoSnapshot),
        prime_left,
    };
    Ok(Observed { facts, source_snapshot, rref, repo, job_name, job, mover, populate })
}

/// How long a missing snapshot is waited for (`spec.policy.waitTimeout`).
fn wait_timeout(restore: &Restore) -> Option<chrono::Duration> {
    restore
        .spec
        .policy
        .as_ref()
        .and_then(|p| p.wait_timeout.as_ref())
        .map(|d| chrono::Duration::seconds(d.as_secs() as i64))
}

/// A populate (`target.populator`) not finished yet: its claim, prime and state.
async fn populate(
    ctx: &Context,
    restore: &Restore,
    status: &kopiur_api::restore::RestoreStatus,
) -> Result<Option<super::populate::Observed>, Error> {
    let running = matches!(status.phase, Some(RestorePhase::Restoring));
    let finished = matches!(status.phase, Some(RestorePhase::Completed | RestorePhase::Failed));
    Ok(match &restore.spec.target {
        RestoreTarget::Populator(_) if !finished => {
            // Once running, the claim recorded in status is read by name (fresh), never listed.
            let t = status.target.as_ref();
            let recorded = t
                .and_then(|t| Some((t.pvc_ref.as_ref()?.name.as_str(), t.pvc_prime.as_ref()?.name.as_str())))
                .filter(|_| running);
            Some(super::populate::observe(&ctx.client, restore, recorded).await?)
        }
        RestoreTarget::Populator(_)
        | RestoreTarget::Pvc(_)
        | RestoreTarget::PvcRef(_)
        | RestoreTarget::StreamExec(_) => None,
    })
}

/// Whether the populate's prime PVC recorded in status is still in the PVC store.
fn prime_stored(ctx: &Context, status: &kopiur_api::restore::RestoreStatus, ns: &str) -> bool {
    status
        .target
        .as_ref()
        .and_then(|t| t.pvc_prime.as_ref())
        .is_some_and(|p| ctx.stores.pvcs.get(&ObjectRef::new(&p.name).within(ns)).is_some())
}

/// Why no mover may launch, first match wins: a gating [next] field
/// (docs/design/api-contract.md §1.9: Stalled FeatureNotImplemented), refused mover settings,
/// or a filesystem repository whose PVC lives in another namespace
/// (`RepositoryVolumeNotInNamespace`).
fn mover_refused(
    ctx: &Context,
    restore: &Restore,
    repo: Option<&RepoView>,
    settings: Option<&Result<MoverSettings, Refusal>>,
) -> Option<(&'static str, String)> {
    let ns = restore.namespace().unwrap_or_default();
    crate::features::restore(&restore.spec)
        .gating_message()
        .map(|m| (crate::features::FEATURE_NOT_IMPLEMENTED, m))
        .or_else(|| settings.and_then(|r| r.as_ref().err()).map(|r| (r.reason, r.message.clone())))
        .or_else(|| {
            let rv = repo?;
            let home = rv.home_namespace(&ctx.config.namespace);
            let r = crate::mounts::for_job(&rv.common().backend, &home, &ns).err()?.refusal();
            Some((r.reason, r.message))
        })
}

/// ReferentAvailable (docs/design/api-contract.md §9): the object the source names, from the stores.
fn referent(ctx: &Context, restore: &Restore, ns: &str) -> Referent {
    match &restore.spec.source {
        RestoreSource::SnapshotRef(o) => {
            let sns = o.namespace.clone().unwrap_or_else(|| ns.to_string());
            let what = format!("Snapshot {sns}/{}", o.name);
            match ctx.stores.snapshots.get(&ObjectRef::new(&o.name).within(&sns)) {
                Some(_) => Referent::Found { what },
                None => Referent::Missing { what },
            }
        }
        RestoreSource::FromPolicy(p) => {
            let pns = p.namespace.clone().unwrap_or_else(|| ns.to_string());
            let what = format!("SnapshotPolicy {pns}/{}", p.name);
            match ctx.stores.policies.get(&ObjectRef::new(&p.name).within(&pns)) {
                Some(_) => Referent::Found { what },
                None => Referent::Missing { what },
            }
        }
        RestoreSource::Identity(_) => Referent::NotApplicable,
    }
}

/// The candidate the source resolves to, with the Snapshot row it came from.
fn candidate(ctx: &Context, restore: &Restore, ns: &str) -> (Candidate, Option<Arc<Snapshot>>) {
    match &restore.spec.source {
        RestoreSource::SnapshotRef(o) => {
            let sns = o.namespace.clone().unwrap_or_else(|| ns.to_string());
            match ctx.stores.snapshots.get(&ObjectRef::new(&o.name).within(&sns)) {
                Some(s) => match s
                    .status
                    .as_ref()
                    .and_then(|st| st.snapshot.as_ref())
                    .and_then(|x| x.kopia_snapshot_id.clone())
                {
                    Some(id) => {
                        (Candidate::Found { kopia_snapshot_id: id, snapshot: Some(o.name.clone()) }, Some(s.clone()))
                    }
                    None => (Candidate::NotFound { what: format!("a manifest for Snapshot {}", o.name) }, None),
                },
                None => (Candidate::NotFound { what: format!("Snapshot {}", o.name) }, None),
            }
        }
        RestoreSource::FromPolicy(p) => {
            let pns = p.namespace.clone().unwrap_or_else(|| ns.to_string());
            match from_policy(ctx, &pns, &p.name, p.as_of, p.offset.max(0) as usize) {
                Some(s) => {
                    let id =
                        s.status.as_ref().and_then(|st| st.snapshot.as_ref()).and_then(|x| x.kopia_snapshot_id.clone());
                    let c =
                        Candidate::Found { kopia_snapshot_id: id.unwrap_or_default(), snapshot: Some(s.name_any()) };
                    (c, Some(s))
                }
                None => (Candidate::NotFound { what: format!("a snapshot of policy {}", p.name) }, None),
            }
        }
        RestoreSource::Identity(_) => (Candidate::Deferred, None),
    }
}

/// The newest Snapshot of a policy that owns a manifest, at or before `as_of`, skipping
/// `offset` newer ones.
fn from_policy(
    ctx: &Context,
    ns: &str,
    name: &str,
    as_of: Option<DateTime<Utc>>,
    offset: usize,
) -> Option<Arc<Snapshot>> {
    let mut rows: Vec<(DateTime<Utc>, Arc<Snapshot>)> = ctx
        .stores
        .snapshots
        .state()
        .into_iter()
        .filter(|s| s.namespace().as_deref() == Some(ns) && s.meta().deletion_timestamp.is_none())
        .filter(|s| s.spec.policy_ref.as_ref().is_some_and(|p| p.name == name))
        .filter(|s| {
            s.status
                .as_ref()
                .and_then(|st| st.phase.as_ref())
                .is_some_and(|p| matches!(p, SnapshotPhase::Succeeded | SnapshotPhase::Discovered))
        })
        .filter_map(|s| {
            let end = s.status.as_ref()?.timing.as_ref()?.end_time?;
            s.status.as_ref()?.snapshot.as_ref()?.kopia_snapshot_id.as_ref()?;
            Some((end, s))
        })
        .filter(|(end, _)| as_of.is_none_or(|a| *end <= a))
        .collect();
    rows.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name_any().cmp(&b.1.name_any())));
    rows.into_iter().nth(offset).map(|(_, s)| s)
}

/// The repository: the pinned one, else the spec's, else the source row's, else (no row yet)
/// the policy's, which is the one the Restore waits on.
fn repository_ref(
    ctx: &Context,
    restore: &Restore,
    ns: &str,
    source_snapshot: Option<&Arc<Snapshot>>,
) -> Option<RepositoryRef> {
    let pinned_repo = restore.status.as_ref().and_then(|s| s.resolved.as_ref()).and_then(|r| r.repository.clone());
    pinned_repo
        .as_ref()
        .map(|r| RepositoryRef { name: r.name.clone(), kind: r.kind, namespace: r.namespace.clone() })
        .or_else(|| restore.spec.repository.clone())
        .or_else(|| {
            source_snapshot
                .and_then(|s| s.status.as_ref()?.resolved.as_ref()?.repository.as_ref())
                .map(|r| RepositoryRef { name: r.name.clone(), kind: r.kind, namespace: r.namespace.clone() })
        })
        .or_else(|| match &restore.spec.source {
            RestoreSource::FromPolicy(p) => {
                let pns = p.namespace.clone().unwrap_or_else(|| ns.to_string());
                ctx.stores
                    .policies
                    .get(&ObjectRef::new(&p.name).within(&pns))
                    .and_then(|pol| pol.spec.target.repositories().first().map(|r| (*r).clone()))
            }
            RestoreSource::SnapshotRef(_) | RestoreSource::Identity(_) => None,
        })
}

/// The target PVC: to create, ours, someone else's, or missing.
fn target_state(ctx: &Context, restore: &Restore) -> TargetState {
    let ns = restore.namespace().unwrap_or_default();
    let uid = restore.uid().unwrap_or_default();
    match (&restore.spec.target, target_name(restore)) {
        // A finished populate: nothing left to do on the target (a running one is observed by
        // `populate::observe`).
        (RestoreTarget::Populator(_), _) => TargetState::Ready,
        (RestoreTarget::StreamExec(_), _) => TargetState::NotImplemented { what: "streamExec" },
        (RestoreTarget::Pvc(_), Some(t)) => match ctx.stores.pvcs.get(&ObjectRef::new(&t).within(&ns)) {
            None => TargetState::Create,
            Some(p) if p.annotations().get(CREATED_BY) == Some(&uid) => TargetState::Ready,
            Some(_) => TargetState::ExistsNotOurs { name: t },
        },
        (RestoreTarget::PvcRef(o), Some(t)) => {
            let tns = o.namespace.clone().unwrap_or_else(|| ns.clone());
            if ctx.stores.pvcs.get(&ObjectRef::new(&t).within(&tns)).is_some() {
                TargetState::Ready
            } else {
                TargetState::Missing { name: t }
            }
        }
        (RestoreTarget::Pvc(_) | RestoreTarget::PvcRef(_), None) => TargetState::NotImplemented { what: "target" },
    }
}

/// The restore Job (owned by this Restore), from the store; while Restoring and absent from
/// the store, read from the API (a lagging store must not read as a lost Job).
async fn job(ctx: &Context, restore: &Restore) -> Result<(String, Option<Arc<Job>>), Error> {
    let ns = restore.namespace().unwrap_or_default();
    let uid = restore.uid().unwrap_or_default();
    let job_name = kopiur_mover::job::job_name(&format!("{}-restore", restore.name_any()));
    let job = ctx
        .stores
        .jobs
        .get(&ObjectRef::new(&job_name).within(&ns))
        .filter(|j| j.owner_references().iter().any(|o| o.uid == uid));
    let phase = restore.status.as_ref().and_then(|s| s.phase.clone());
    let job = match (job, &phase) {
        (None, Some(RestorePhase::Restoring)) => Api::<Job>::namespaced(ctx.client.clone(), &ns)
            .get_opt(&job_name)
            .await
            .step("read restore Job")?
            .map(Arc::new),
        (j, _) => j,
    };
    Ok((job_name, job))
}

/// The mover facts (the workload's identity and the target's node, read only when `look`:
/// a launch is possible) and the settings they resolve to; privileged settings read the
/// namespace's opt-in only when they ask for it.
async fn mover(
    ctx: &Context,
    restore: &Restore,
    rv: &RepoView,
    look: bool,
    claim: Option<String>,
) -> (MoverFacts, Option<Result<MoverSettings, Refusal>>) {
    let ns = restore.namespace().unwrap_or_default();
    let mut mf = MoverFacts::default();
    if look {
        let claim = claim.unwrap_or_default();
        mf = crate::mover_settings::io::facts(
            &ctx.client,
            &ns,
            rv.common().mover_defaults.as_ref(),
            restore.spec.mover.as_ref(),
            Some(claim.as_str()).filter(|c| !c.is_empty()),
        )
        .await;
    }
    let resolve = |mf: &MoverFacts| {
        crate::mover_settings::resolve_with(
            rv.common().mover_defaults.as_ref(),
            restore.spec.mover.as_ref(),
            crate::mover_settings::MoverOp::Restore,
            mf,
        )
    };
    use crate::mover_settings::PrivilegeVerdict;
    let mut r = resolve(&mf);
    if let Err(why) = &r
        && why.reason == reason::PRIVILEGED_MOVER_NOT_PERMITTED
    {
        match crate::mover_settings::namespace_privilege(&ctx.client, &ns).await {
            PrivilegeVerdict::Permitted => {
                mf.privileged_permitted = true;
                r = resolve(&mf);
            }
            PrivilegeVerdict::PodSecurity(level) => {
                r = Err(crate::mover_settings::pod_security_refusal(&ns, &level));
            }
            PrivilegeVerdict::NotOptedIn => {}
        }
    }
    (mf, Some(r))
}

/// The credentials the Job would read (docs/design/mover.md §1.2), while a launch is possible.
async fn credentials(ctx: &Context, ns: &str, rv: &RepoView) -> Credentials {
    let pw = &rv.common().encryption.password_secret_ref;
    let (pw_name, key) = (pw.name.clone(), pw.resolved_key().to_string());
    let missing = ctx.missing_secrets(ns, &rv.secret_names());
    let has_key = if missing.is_empty() { secret_has_key(&ctx.client, ns, &pw_name, &key).await } else { None };
    match Credentials::observe(missing, (&pw_name, &key), has_key) {
        // The CA bundle the Job mounts from this namespace (docs/design/api-contract.md §7.4, MissingCaBundle);
        // an unreadable ConfigMap refuses nothing on a guess.
        Credentials::Found => match crate::mounts::ca_state(&ctx.client, ns, &rv.common().backend).await {
            Ok(crate::mounts::CaState::Missing { message }) => Credentials::MissingCaBundle { message },
            Ok(crate::mounts::CaState::NotConfigured | crate::mounts::CaState::Present { .. }) | Err(_) => {
                Credentials::Found
            }
        },
        c @ (Credentials::NotChecked
        | Credentials::MissingSecrets { .. }
        | Credentials::MissingKey { .. }
        | Credentials::MissingCaBundle { .. }) => c,
    }
}

/// Whether Secret `name` in `ns` holds `key` (in `data`). The operator may list Secrets, not
/// get them, so this is a list narrowed to the one name; only the key names are looked at and
/// the object is dropped at once (no value is kept, logged or copied anywhere). None when the
/// list fails: nothing is refused on a guess.
async fn secret_has_key(client: &kube::Client, ns: &str, name: &str, key: &str) -> Option<bool> {
    use k8s_openapi::api::core::v1::Secret;
    let lp = kube::api::ListParams::default().fields(&format!("metadata.name={name}"));
    match Api::<Secret>::namespaced(client.clone(), ns).list(&lp).await {
        Ok(list) => {
            let s = list.items.into_iter().find(|s| s.metadata.name.as_deref() == Some(name))?;
            Some(
                s.data.as_ref().is_some_and(|d| d.contains_key(key))
                    || s.string_data.as_ref().is_some_and(|d| d.contains_key(key)),
            )
        }
        Err(e) => {
            tracing::debug!(error = %e, secret = %name, "reading the password Secret's keys failed");
            None
        }
    }
}
