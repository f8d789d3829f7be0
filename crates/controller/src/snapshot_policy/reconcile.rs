//! SnapshotPolicy reconciler: pins the identity and repositories in status, summarizes
//! repository health, and runs GFS retention over the policy's Snapshots (each prune stamped
//! `pruned-by: retention` before its DELETE). A prune pass runs on every reconcile, which the
//! Snapshot watch triggers when a participant changes, plus a 300 s cadence.
use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::Utc;
use kopiur_api::SnapshotPolicy;
use kopiur_api::domain::identity::resolve_identity;
use kopiur_api::names::{annotation, pruned_by, reason};
use kopiur_api::shared::status::{ResolvedRepository, ResolvedSource};
use kopiur_api::snapshot::SnapshotPhase;
use kopiur_api::snapshot_policy::{LastSuccessfulSnapshot, PolicyResolved, RetentionStatus};

use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};

use super::plan::{Member, RepoMembers, plan};
use crate::context::Context;
use crate::error::Error;
use crate::gating::Gate;
use crate::labels::origin;
use crate::metrics::labels::KindLabels;
use crate::policy_rules::sources::{expand, pvcs_in, uses_selector};
use crate::prune::stamp_and_delete;
use crate::snapshot_policy::fork;

/// The Ready/Stalled reason of a refused identity fork (docs/design/api-contract.md §2.5).
pub(super) const IDENTITY_WOULD_FORK: &str = reason::IDENTITY_WOULD_FORK;

pub async fn reconcile(policy: Arc<SnapshotPolicy>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.metrics.reconciliations.inc(KindLabels { kind: "SnapshotPolicy".into() });
    if policy.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let now = Utc::now();
    let ns = policy.namespace().unwrap_or_default();
    let status = policy.status.clone().unwrap_or_default();
    let mut next = status.clone();
    next.observed_generation = policy.meta().generation;
    let next_fields = crate::features::snapshot_policy(&policy.spec);

    let refs: Vec<_> = policy.spec.target.repositories().into_iter().cloned().collect();
    let (resolved_repos, summary, gates) = repositories(&ctx, &ns, &refs);
    next.repository_summary = Some(summary.join(", "));
    // The current expansion (docs/design/api-contract.md §6.4). A selector over an unsynced PVC store would publish an
    // empty list, so the previous one stays until the store has synced.
    let expansion = if uses_selector(&policy.spec.sources) && !ctx.stores.synced.pvcs.is_synced() {
        None
    } else {
        // A gating [next] field (docs/design/api-contract.md §1.9) refuses the policy like a gated source.
        Some(next_fields.refusal().and_then(|()| expand(&ns, &policy.spec.sources, &pvcs_in(&ctx.stores.pvcs, &ns))))
    };
    // The policy's Snapshots (the fork guard counts the Succeeded ones; retention groups them).
    let mine: Vec<_> = ctx
        .stores
        .snapshots
        .state()
        .into_iter()
        .filter(|s| s.namespace().as_deref() == Some(ns.as_str()))
        .filter(|s| s.spec.policy_ref.as_ref().is_some_and(|p| p.name == policy.name_any()))
        .collect();
    // client required: Events, retention prunes and the status write.
    let (refused_fork, invalid_identity) =
        match pin_identity(&ctx, &policy, expansion.as_ref(), &mine, resolved_repos, &mut next).await {
            Ok(refused) => (refused, None),
            Err(invalid) => (None, Some(invalid)),
        };
    retain(&ctx, &policy, &mine, &mut next, now).await?;
    if let Some(s) = mine
        .iter()
        .filter(|s| s.status.as_ref().and_then(|st| st.phase.as_ref()) == Some(&SnapshotPhase::Succeeded))
        .max_by_key(|s| s.status.as_ref().and_then(|st| st.timing.as_ref()).and_then(|t| t.end_time))
    {
        next.last_successful_snapshot = Some(LastSuccessfulSnapshot {
            name: s.name_any(),
            end_time: s.status.as_ref().and_then(|st| st.timing.as_ref()).and_then(|t| t.end_time),
        });
    }
    let causes = super::report::Causes {
        invalid_identity,
        gates: &gates,
        refused_source: match &expansion {
            Some(Err(m)) => Some(m.as_str()),
            Some(Ok(_)) | None => None,
        },
        refused_fork: refused_fork.as_deref(),
        collision: crate::policy_rules::collision::collision(&policy, &ctx.stores.policies.state()),
        foreign_hostname: crate::policy_rules::hostname::check(&policy, &ctx.stores.namespaces),
    };
    let mut conds = super::report::conditions(&policy.spec, &status.conditions, &causes);
    crate::preflight::apply_policy_conditions(&mut conds, &status.conditions, policy.spec.preflight.as_ref());
    // The kstatus trio (docs/design/api-contract.md §1.6): exactly one of Ready, Reconciling and Stalled is True.
    super::kstatus::complete_trio(&mut conds);
    // Advisory [next] fields: FeaturesIgnored while set, one Warning per generation.
    conds.extend(next_fields.advisory_condition());
    let generation = policy.meta().generation.unwrap_or(0);
    next.conditions = crate::conditions::merge_conditions(&status.conditions, &conds, generation, now);
    crate::features::drop_stale_features_ignored(&mut next.conditions, &conds);
    let api: Api<SnapshotPolicy> = Api::namespaced(ctx.client.clone(), &ns);
    // A lost conflict is left to the next reconcile, which the newer object's watch event brings.
    crate::status::write_status(&api, policy.as_ref(), &status, &next).await?;
    if let Some(note) = next_fields.advisory_event(&status.conditions, generation) {
        ctx.event(&policy.object_ref(&()), true, crate::features::FEATURES_IGNORED, note).await;
    }
    if expansion.is_none() {
        return Ok(Action::requeue(std::time::Duration::from_secs(2)));
    }
    Ok(Action::requeue(std::time::Duration::from_secs(300)))
}

/// Each target repository: its resolved reference (when it exists), its summary entry and
/// its gate.
fn repositories(
    ctx: &Context,
    ns: &str,
    refs: &[kopiur_api::shared::RepositoryRef],
) -> (Vec<ResolvedRepository>, Vec<String>, Vec<Gate>) {
    let mut resolved_repos = Vec::new();
    let mut summary = Vec::new();
    let mut gates = Vec::new();
    for r in refs {
        let gate = ctx.gate(ns, r);
        let phase = match &gate {
            Gate::Open => "Ready".to_string(),
            Gate::NotReady { phase, .. } => phase.clone(),
            Gate::NamespaceNotAllowed { .. } => reason::NAMESPACE_NOT_ALLOWED.to_string(),
        };
        summary.push(format!("{} ({phase})", r.name));
        gates.push(gate);
        if let Some(rv) = ctx.repository(ns, r) {
            resolved_repos.push(ResolvedRepository {
                kind: r.kind,
                namespace: rv.namespace(),
                name: rv.name(),
                uid: Some(rv.uid()),
            });
        }
    }
    (resolved_repos, summary, gates)
}

/// Pins the identity, sources and repositories in `next.resolved` through the fork guard
/// (docs/design/api-contract.md §2.5). `Ok(Some(message))` when a fork was refused;
/// `Err(message)` when the identity does not resolve.
async fn pin_identity(
    ctx: &Context,
    policy: &SnapshotPolicy,
    expansion: Option<&Result<crate::policy_rules::sources::Expansion, String>>,
    mine: &[Arc<kopiur_api::Snapshot>],
    resolved_repos: Vec<ResolvedRepository>,
    next: &mut kopiur_api::snapshot_policy::SnapshotPolicyStatus,
) -> Result<Option<String>, String> {
    let ns = policy.namespace().unwrap_or_default();
    let name = policy.name_any();
    let status = policy.status.clone().unwrap_or_default();
    let id = resolve_identity(&name, &ns, policy.spec.identity.as_ref()).map_err(|e| e.to_string())?;
    let succeeded = mine
        .iter()
        .filter(|s| s.status.as_ref().and_then(|st| st.phase.as_ref()) == Some(&SnapshotPhase::Succeeded))
        .count();
    let prev = status.resolved.clone().unwrap_or_default();
    let desired_sources: Vec<ResolvedSource> = match expansion {
        Some(Ok(e)) => e.sources.iter().map(|s| s.resolved()).collect(),
        Some(Err(_)) | None => prev.sources.clone(),
    };
    let acknowledged =
        policy.annotations().get(annotation::ALLOW_IDENTITY_CHANGE).is_some_and(|v| !v.trim().is_empty());
    let d = fork::decide(&fork::ForkFacts {
        pinned_identity: prev.identity.as_ref(),
        pinned_sources: &prev.sources,
        desired_identity: &id,
        desired_sources: &desired_sources,
        succeeded,
        acknowledged,
    });
    let reference = policy.object_ref(&());
    let mut refused_fork = None;
    match &d.verdict {
        fork::Verdict::Unchanged => {}
        fork::Verdict::Accepted { changes, acknowledged } => {
            tracing::info!(policy = %name, namespace = %ns, ?changes, acknowledged, "policy identity re-pinned");
            if *acknowledged {
                let note = format!(
                    "allow-identity-change accepted a fork ({}); new runs write to the new kopia source, the old \
                     snapshots stay in the repository; remove the annotation to guard the new identity",
                    changes.join("; ")
                );
                ctx.event(&reference, false, "IdentityChanged", note).await;
            }
        }
        fork::Verdict::Refused { changes } => {
            let message = fork::refusal_message(&name, &ns, changes, succeeded);
            let was_refused = status.conditions.iter().any(|c| c.type_ == "Ready" && c.reason == IDENTITY_WOULD_FORK);
            if !was_refused {
                ctx.event(&reference, true, IDENTITY_WOULD_FORK, message.clone()).await;
            }
            refused_fork = Some(message);
        }
    }
    next.resolved =
        Some(PolicyResolved { identity: Some(d.identity), sources: d.sources, repositories: resolved_repos });
    Ok(refused_fork)
}

/// GFS retention over the policy's Snapshots grouped by their pinned repository: each prune
/// stamped `pruned-by: retention` before its DELETE; `status.retention` counts them. A
/// suspended policy pauses retention (docs/design/api-contract.md §6.1): counted, nothing pruned.
async fn retain(
    ctx: &Context,
    policy: &SnapshotPolicy,
    mine: &[Arc<kopiur_api::Snapshot>],
    next: &mut kopiur_api::snapshot_policy::SnapshotPolicyStatus,
    now: chrono::DateTime<Utc>,
) -> Result<(), Error> {
    let ns = policy.namespace().unwrap_or_default();
    let mut groups: BTreeMap<String, RepoMembers> = BTreeMap::new();
    for s in mine {
        let st = s.status.as_ref();
        let Some(rr) = st.and_then(|st| st.resolved.as_ref()).and_then(|r| r.repository.clone()) else { continue };
        let key = format!("{}/{}", rr.namespace.clone().unwrap_or_default(), rr.name);
        let rref =
            kopiur_api::shared::RepositoryRef { name: rr.name.clone(), kind: rr.kind, namespace: rr.namespace.clone() };
        let ready = ctx.gate(&ns, &rref) == Gate::Open;
        let g = groups.entry(key.clone()).or_insert_with(|| RepoMembers { repository: key, ready, members: vec![] });
        g.members.push(Member {
            name: s.name_any(),
            phase: st.and_then(|st| st.phase.clone()),
            origin: Some(origin(s)),
            deleting: s.meta().deletion_timestamp.is_some(),
            end_time: st.and_then(|st| st.timing.as_ref()).and_then(|t| t.end_time),
            kopia_snapshot_id: st.and_then(|st| st.snapshot.as_ref()).and_then(|x| x.kopia_snapshot_id.clone()),
            // Exempt while the pin is asked for or still applied (docs/design/api-contract.md §7.1): never pruned on a guess.
            pinned: super::plan::pinned(s.spec.pin, st.and_then(|st| st.pinned)),
        });
    }
    let groups: Vec<RepoMembers> = groups.into_values().collect();
    let rp = plan(super::plan::retention_in_force(&policy.spec), &groups);
    let api = Api::namespaced(ctx.client.clone(), &ns);
    for victim in &rp.prune {
        stamp_and_delete(&api, victim, pruned_by::RETENTION).await?;
    }
    let prev_ret = policy.status.as_ref().and_then(|s| s.retention.clone()).unwrap_or_default();
    next.retention = Some(if rp.prune.is_empty() {
        RetentionStatus { active_snapshot_count: rp.active as i32, ..prev_ret }
    } else {
        tracing::info!(policy = %policy.name_any(), namespace = %ns, pruned = rp.prune.len(), "retention pruned Snapshots");
        RetentionStatus {
            active_snapshot_count: rp.active as i32,
            last_prune_at: Some(now),
            last_prune_deleted: rp.prune.len() as i32,
        }
    });
    Ok(())
}
