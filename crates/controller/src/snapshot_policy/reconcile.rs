//! SnapshotPolicy reconciler: pins the identity and repositories in status, summarizes
//! repository health, and runs GFS retention over the policy's Snapshots (each prune stamped
//! `pruned-by: retention` before its DELETE). A prune pass runs on every reconcile, which the
//! Snapshot watch triggers when a participant changes, plus a 300 s cadence.
use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::Utc;
use kopiur_api::SnapshotPolicy;
use kopiur_api::domain::identity::resolve_identity;
use kopiur_api::names::{annotation, pruned_by};
use kopiur_api::shared::status::{ResolvedRepository, ResolvedSource};
use kopiur_api::snapshot::SnapshotPhase;
use kopiur_api::snapshot_policy::{LastSuccessfulSnapshot, PolicyResolved, RetentionStatus};

use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};

use super::plan::{Member, RepoMembers, plan};
use crate::error::Error;
use crate::gating::Gate;
use crate::health::kstatus::{Cond, CondStatus};
use crate::prune::stamp_and_delete;
use crate::snapshot::ctx::PipelineCtx;
use crate::snapshot::reconcile::origin;
use crate::snapshot_policy::fork;
use crate::snapshot_policy::sources::{expand, pvcs_in, uses_selector};

/// The Ready/Stalled reason of a refused identity fork (docs/design/api-contract.md §2.5).
const IDENTITY_WOULD_FORK: &str = "IdentityWouldFork";

pub async fn reconcile(policy: Arc<SnapshotPolicy>, ctx: Arc<PipelineCtx>) -> Result<Action, Error> {
    ctx.metrics.reconciliations.inc(&["SnapshotPolicy"]);
    if policy.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let now = Utc::now();
    let ns = policy.namespace().unwrap_or_default();
    let name = policy.name_any();
    let status = policy.status.clone().unwrap_or_default();
    let mut next = status.clone();
    next.observed_generation = policy.meta().generation;
    let mut conds = Vec::new();
    let next_fields = crate::features::snapshot_policy(&policy.spec);

    let identity = resolve_identity(&name, &ns, policy.spec.identity.as_ref());
    let refs: Vec<_> = policy.spec.target.repositories().into_iter().cloned().collect();
    let mut resolved_repos = Vec::new();
    let mut summary = Vec::new();
    let mut gates = Vec::new();
    for r in &refs {
        let gate = ctx.gate(&ns, r);
        let rv = ctx.repository(&ns, r);
        let phase = match &gate {
            Gate::Open => "Ready".to_string(),
            Gate::NotReady { phase, .. } => phase.clone(),
            Gate::NamespaceNotAllowed { .. } => "NamespaceNotAllowed".to_string(),
        };
        summary.push(format!("{} ({phase})", r.name));
        gates.push(gate.clone());
        if let Some(rv) = rv {
            resolved_repos.push(ResolvedRepository {
                kind: r.kind,
                namespace: rv.namespace(),
                name: rv.name(),
                uid: Some(rv.uid()),
            });
        }
    }
    next.repository_summary = Some(summary.join(", "));
    // The current expansion (docs/design/api-contract.md §6.4). A selector over an unsynced PVC store would publish an
    // empty list, so the previous one stays until the store has synced.
    let selector = uses_selector(&policy.spec.sources);
    let expansion = if selector && !ctx.stores.synced.pvcs.is_synced() {
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
        .filter(|s| s.spec.policy_ref.as_ref().is_some_and(|p| p.name == name))
        .collect();
    let succeeded = mine
        .iter()
        .filter(|s| s.status.as_ref().and_then(|st| st.phase.as_ref()) == Some(&SnapshotPhase::Succeeded))
        .count();
    let mut refused_fork = None;
    match &identity {
        Ok(id) => {
            let prev = status.resolved.clone().unwrap_or_default();
            let desired_sources: Vec<ResolvedSource> = match &expansion {
                Some(Ok(e)) => e.sources.iter().map(|s| s.resolved()).collect(),
                Some(Err(_)) | None => prev.sources.clone(),
            };
            let acknowledged =
                policy.annotations().get(annotation::ALLOW_IDENTITY_CHANGE).is_some_and(|v| !v.trim().is_empty());
            let d = fork::decide(&fork::ForkFacts {
                pinned_identity: prev.identity.as_ref(),
                pinned_sources: &prev.sources,
                desired_identity: id,
                desired_sources: &desired_sources,
                succeeded,
                acknowledged,
            });
            let reference = policy.object_ref(&());
            match &d.verdict {
                fork::Verdict::Unchanged => {}
                fork::Verdict::Accepted { changes, acknowledged } => {
                    tracing::info!(policy = %name, namespace = %ns, ?changes, acknowledged, "policy identity re-pinned");
                    if *acknowledged {
                        let note = format!(
                            "allow-identity-change accepted a fork ({}); new runs write to the new kopia source, the old                              snapshots stay in the repository; remove the annotation to guard the new identity",
                            changes.join("; ")
                        );
                        ctx.event(&reference, false, "IdentityChanged", note).await;
                    }
                }
                fork::Verdict::Refused { changes } => {
                    let message = fork::refusal_message(&name, &ns, changes, succeeded);
                    let was_refused =
                        status.conditions.iter().any(|c| c.type_ == "Ready" && c.reason == IDENTITY_WOULD_FORK);
                    if !was_refused {
                        ctx.event(&reference, true, IDENTITY_WOULD_FORK, message.clone()).await;
                    }
                    refused_fork = Some(message);
                }
            }
            next.resolved =
                Some(PolicyResolved { identity: Some(d.identity), sources: d.sources, repositories: resolved_repos });
        }
        Err(e) => conds.push(Cond {
            type_: "Stalled",
            status: CondStatus::True,
            reason: "InvalidIdentity".into(),
            message: e.to_string(),
        }),
    }

    // The policy's Snapshots, grouped by their pinned repository.
    let mut groups: BTreeMap<String, RepoMembers> = BTreeMap::new();
    for s in &mine {
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
    // A suspended policy pauses retention (docs/design/api-contract.md §6.1): counted, nothing pruned.
    let retention = super::plan::retention_in_force(&policy.spec);
    let rp = plan(retention, &groups);
    let api = Api::namespaced(ctx.client.clone(), &ns);
    for victim in &rp.prune {
        stamp_and_delete(&api, victim, pruned_by::RETENTION).await?;
    }
    let prev_ret = status.retention.clone().unwrap_or_default();
    next.retention = Some(if rp.prune.is_empty() {
        RetentionStatus { active_snapshot_count: rp.active as i32, ..prev_ret }
    } else {
        tracing::info!(policy = %name, namespace = %ns, pruned = rp.prune.len(), "retention pruned Snapshots");
        RetentionStatus {
            active_snapshot_count: rp.active as i32,
            last_prune_at: Some(now),
            last_prune_deleted: rp.prune.len() as i32,
        }
    });
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

    // RepositoriesReady and Ready from each target's gate: NamespaceNotAllowed,
    // RepositoryNotFound and a Failed repository are Stalled, one on its way Reconciling
    // (docs/design/api-contract.md §6.4; the Repository and ClusterRepository watches re-reconcile the policy).
    conds.extend(super::kstatus::repository_conditions(&gates));
    // R (docs/design/api-contract.md §6.1): a compressor kopia cannot write with stalls the policy (its Snapshots
    // park with the same reason, no Job) until the name is fixed.
    if let Some(m) = super::compression::unknown_compressor(&policy.spec) {
        conds.retain(|c| c.type_ != "Ready" && c.type_ != "Stalled");
        for (type_, status) in [("Ready", CondStatus::False), ("Stalled", CondStatus::True)] {
            conds.push(Cond {
                type_,
                status,
                reason: kopiur_api::names::reason::INVALID_SPEC.into(),
                message: m.clone(),
            });
        }
    }
    // A gated source (docs/design/api-contract.md §1.9 gating) overrides Ready and stalls the policy; the
    // stall is lifted once the source is no longer refused.
    match &expansion {
        Some(Err(m)) => {
            conds.retain(|c| c.type_ != "Ready");
            conds.push(Cond {
                type_: "Ready",
                status: CondStatus::False,
                reason: "FeatureNotImplemented".into(),
                message: m.clone(),
            });
            if conds.iter().all(|c| c.type_ != "Stalled") {
                conds.push(Cond {
                    type_: "Stalled",
                    status: CondStatus::True,
                    reason: "FeatureNotImplemented".into(),
                    message: m.clone(),
                });
            }
        }
        Some(Ok(_)) | None => {
            let was_gated =
                status.conditions.iter().any(|c| c.type_ == "Stalled" && c.reason == "FeatureNotImplemented");
            if was_gated && conds.iter().all(|c| c.type_ != "Stalled") {
                conds.push(Cond {
                    type_: "Stalled",
                    status: CondStatus::False,
                    reason: "Ready".into(),
                    message: String::new(),
                });
            }
        }
    }
    // A refused fork overrides Ready and stalls the policy until the spec is reverted or the
    // fork acknowledged; the stall is lifted then.
    match &refused_fork {
        Some(m) => {
            conds.retain(|c| c.type_ != "Ready" && c.type_ != "Stalled");
            for type_ in ["Ready", "Stalled"] {
                conds.push(Cond {
                    type_,
                    status: if type_ == "Ready" { CondStatus::False } else { CondStatus::True },
                    reason: IDENTITY_WOULD_FORK.into(),
                    message: m.clone(),
                });
            }
        }
        None => {
            let was_refused = status.conditions.iter().any(|c| c.type_ == "Stalled" && c.reason == IDENTITY_WOULD_FORK);
            if was_refused && conds.iter().all(|c| c.type_ != "Stalled") {
                conds.push(Cond {
                    type_: "Stalled",
                    status: CondStatus::False,
                    reason: "Ready".into(),
                    message: String::new(),
                });
            }
        }
    }
    // The identity-collision X rule (docs/design/api-contract.md §6.5): the later of two policies with one
    // resolved identity in a shared repository is Stalled and runs nothing; lifted once the
    // other is gone or either identity changes.
    match super::collision::collision(&policy, &ctx.stores.policies.state()) {
        Some(m) => {
            conds.retain(|c| c.type_ != "Ready" && c.type_ != "Stalled");
            for (type_, status) in [("Ready", CondStatus::False), ("Stalled", CondStatus::True)] {
                conds.push(Cond {
                    type_,
                    status,
                    reason: super::collision::IDENTITY_COLLISION.into(),
                    message: m.clone(),
                });
            }
        }
        None => {
            let was = status
                .conditions
                .iter()
                .any(|c| c.type_ == "Stalled" && c.reason == super::collision::IDENTITY_COLLISION);
            if was && conds.iter().all(|c| c.type_ != "Stalled") {
                conds.push(Cond {
                    type_: "Stalled",
                    status: CondStatus::False,
                    reason: "Ready".into(),
                    message: String::new(),
                });
            }
        }
    }
    crate::preflight::apply_policy_conditions(&mut conds, &status.conditions, policy.spec.preflight.as_ref());
    // The kstatus trio (docs/design/api-contract.md §1.6): exactly one of Ready, Reconciling and Stalled is True.
    super::kstatus::complete_trio(&mut conds);
    // Advisory [next] fields: FeaturesIgnored while set, one Warning per generation.
    conds.extend(next_fields.advisory_condition());
    let generation = policy.meta().generation.unwrap_or(0);
    next.conditions = crate::conditions::merge_conditions(&status.conditions, &conds, generation, now);
    crate::features::drop_stale_features_ignored(&mut next.conditions, &conds);
    let api: Api<SnapshotPolicy> = Api::namespaced(ctx.client.clone(), &policy.namespace().unwrap_or_default());
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
