//! The SnapshotPolicy conditions: the repositories' gates, then each override that stalls
//! the policy (an unknown compressor, a gated source, a refused identity fork, an identity
//! collision), each lifted once its cause is gone. Pure.
use kopiur_api::names::{condition, reason};
use kopiur_api::snapshot_policy::SnapshotPolicySpec;

use crate::conditions::{Cond, CondStatus};
use crate::gating::Gate;
use kopiur_api::shared::status::Condition;

/// The causes a reconcile found; `conditions` words them.
pub(super) struct Causes<'a> {
    /// `Stalled/InvalidIdentity` when the identity does not resolve.
    pub invalid_identity: Option<String>,
    pub gates: &'a [Gate],
    /// The expansion's refusal (a gated source or [next] field).
    pub refused_source: Option<&'a str>,
    pub refused_fork: Option<&'a str>,
    pub collision: Option<String>,
    /// A hostname of another namespace on a shared repository (`policy_rules::hostname`).
    pub foreign_hostname: Option<String>,
}

pub(super) fn conditions(spec: &SnapshotPolicySpec, previous: &[Condition], c: &Causes<'_>) -> Vec<Cond> {
    let mut conds = Vec::new();
    if let Some(e) = &c.invalid_identity {
        conds.push(Cond {
            type_: condition::STALLED,
            status: CondStatus::True,
            reason: "InvalidIdentity".into(),
            message: e.clone(),
        });
    }
    // RepositoriesReady and Ready from each target's gate: NamespaceNotAllowed,
    // RepositoryNotFound and a Failed repository are Stalled, one on its way Reconciling
    // (docs/design/api-contract.md §6.4; the Repository and ClusterRepository watches re-reconcile the policy).
    conds.extend(super::kstatus::repository_conditions(c.gates));
    // R (docs/design/api-contract.md §6.1): a compressor kopia cannot write with stalls the policy (its Snapshots
    // park with the same reason, no Job) until the name is fixed.
    if let Some(m) = crate::policy_rules::compression::unknown_compressor(spec) {
        stall(&mut conds, reason::INVALID_SPEC, &m);
    }
    // A gated source (docs/design/api-contract.md §1.9 gating) overrides Ready and stalls the policy; the
    // stall is lifted once the source is no longer refused.
    match c.refused_source {
        Some(m) => {
            conds.retain(|c| c.type_ != "Ready");
            conds.push(Cond {
                type_: "Ready",
                status: CondStatus::False,
                reason: reason::FEATURE_NOT_IMPLEMENTED.into(),
                message: m.to_string(),
            });
            if conds.iter().all(|c| c.type_ != condition::STALLED) {
                conds.push(Cond {
                    type_: condition::STALLED,
                    status: CondStatus::True,
                    reason: reason::FEATURE_NOT_IMPLEMENTED.into(),
                    message: m.to_string(),
                });
            }
        }
        None => lift(&mut conds, previous, reason::FEATURE_NOT_IMPLEMENTED),
    }
    // A refused fork overrides Ready and stalls the policy until the spec is reverted or the
    // fork acknowledged; the stall is lifted then.
    match c.refused_fork {
        Some(m) => stall(&mut conds, super::reconcile::IDENTITY_WOULD_FORK, m),
        None => lift(&mut conds, previous, super::reconcile::IDENTITY_WOULD_FORK),
    }
    // The identity-collision X rule (docs/design/api-contract.md §6.5): the later of two policies with one
    // resolved identity in a shared repository is Stalled and runs nothing; lifted once the
    // other is gone or either identity changes.
    match &c.collision {
        Some(m) => stall(&mut conds, crate::policy_rules::collision::IDENTITY_COLLISION, m),
        None => lift(&mut conds, previous, crate::policy_rules::collision::IDENTITY_COLLISION),
    }
    // Another namespace's hostname on a shared repository without its grant (audit 2.8).
    let xns = reason::CROSS_NAMESPACE_REFERENCE;
    match &c.foreign_hostname {
        Some(m) => stall(&mut conds, xns, m),
        None => lift(&mut conds, previous, xns),
    }
    conds
}

/// Ready=False and Stalled=True with `reason`, replacing whatever Ready and Stalled said.
fn stall(conds: &mut Vec<Cond>, reason: &str, message: &str) {
    conds.retain(|c| c.type_ != "Ready" && c.type_ != condition::STALLED);
    for (type_, status) in [("Ready", CondStatus::False), (condition::STALLED, CondStatus::True)] {
        conds.push(Cond { type_, status, reason: reason.into(), message: message.to_string() });
    }
}

/// A stall with `reason` that the previous status carried, lifted (Stalled=False/Ready)
/// unless another cause stalls the policy now.
fn lift(conds: &mut Vec<Cond>, previous: &[Condition], reason: &str) {
    let was = previous.iter().any(|c| c.type_ == condition::STALLED && c.reason == reason);
    if was && conds.iter().all(|c| c.type_ != condition::STALLED) {
        conds.push(Cond {
            type_: condition::STALLED,
            status: CondStatus::False,
            reason: "Ready".into(),
            message: String::new(),
        });
    }
}
