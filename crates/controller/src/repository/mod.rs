//! Repository and ClusterRepository reconcilers: observe -> `health::plan` -> apply -> one
//! status write. Both kinds share the spec and status shape, so one generic reconciler serves
//! both through [`RepoObject`].
pub mod apply;
pub mod catalog;
pub mod convert;
pub mod endpoint;
pub mod next;
pub mod observe;
pub mod pins;
pub mod validate;

use std::fmt::Debug;
use std::sync::Arc;

use kopiur_api::names::condition;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;

use crate::error::Error;
use crate::health::RepoKind;
use crate::metrics::labels::{KindLabels, RepoOutcomeLabels};

use crate::context::Context;
use crate::repo_view::RepoObject;

pub async fn reconcile<K: RepoObject>(obj: Arc<K>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    let kind = K::KIND.as_str();
    ctx.metrics.reconciliations.inc(KindLabels { kind: kind.into() });
    let res = reconcile_inner(obj.as_ref(), &ctx).await;
    ctx.metrics.observe_duration(KindLabels { kind: kind.into() }, started.elapsed().as_secs_f64());
    res
}

async fn reconcile_inner<K: RepoObject>(obj: &K, ctx: &Context) -> Result<Action, Error> {
    if obj.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    // [next] fields (docs/design/api-contract.md §1.9): a gating one stops here (Stalled, no Job).
    let next = next::next_fields(obj);
    if let Some(action) = next::refuse(obj, ctx, &next).await? {
        return Ok(action);
    }
    let now = chrono::Utc::now();
    let (mut facts, listing, ca) = observe::observe_with_ca(obj, ctx).await?;
    pins::restore(obj, ctx, &mut facts.status.unique_id).await?;
    // The cheap endpoint check (reconcile-time only, at its cadence): a fact for the plan.
    let uid = obj.meta().uid.clone().unwrap_or_default();
    if let Some(answer) = endpoint::observe(&mut facts, &uid, &obj.common().backend, now).await {
        let ns = obj.namespace().unwrap_or_default();
        let labels = RepoOutcomeLabels {
            kind: K::KIND.as_str().into(),
            namespace: ns,
            name: obj.name_any(),
            outcome: answer.label().into(),
        };
        ctx.metrics.endpoint_checks.inc(labels);
    }
    let mut decision = crate::health::plan(&facts, now);
    let spent = crate::health::plan::spend_return(&facts.endpoint, &decision);
    decision.conditions.extend(next.advisory_condition());
    if let crate::mounts::CaState::Missing { message } = &ca {
        missing_ca_bundle(&mut decision, message);
    }
    let cat = catalog::step(obj, ctx, &facts, &mut decision, listing, now).await;
    let threshold = obj.common().health.index_blob_warn_threshold;
    let was_false = convert::index_blob_health_was_false(obj.status_common());
    crate::health::index_blobs::apply(&mut decision, &facts.id, threshold, was_false);
    let maintainers = match facts.spec.read_only {
        true => crate::health::index_blobs::Maintainers::ReadOnly,
        false => crate::health::index_blobs::Maintainers::Found(maintainers_of::<K>(&ctx.stores.maintenances, obj)),
    };
    crate::health::index_blobs::request_quick(&mut decision, was_false, &maintainers, now);
    let action = apply::apply(obj, ctx, &facts, decision, cat, now).await?;
    endpoint::remember_after(&uid, &facts, spent);
    next::warn_ignored(obj, ctx, &next).await;
    Ok(action)
}

/// The Maintenances that refer to this repository, as `namespace/name`, sorted.
fn maintainers_of<K: RepoObject>(store: &Store<kopiur_api::Maintenance>, obj: &K) -> Vec<String> {
    let kind = match K::KIND {
        RepoKind::Repository => kopiur_api::shared::RepositoryKind::Repository,
        RepoKind::ClusterRepository => kopiur_api::shared::RepositoryKind::ClusterRepository,
    };
    let (ns, name) = (obj.namespace(), obj.name_any());
    let mut out: Vec<String> = store
        .state()
        .iter()
        .filter(|m| {
            crate::repo_ref::refers_to(
                &m.spec.repository,
                &m.namespace().unwrap_or_default(),
                kind,
                ns.as_deref(),
                &name,
            )
        })
        .map(|m| format!("{}/{}", m.namespace().unwrap_or_default(), m.name_any()))
        .collect();
    out.sort();
    out
}

/// `MissingCaBundle` (docs/design/api-contract.md §3): the CA ConfigMap or its key is absent. The facts carried
/// no credential version, so the breaker launched nothing; say why, Stalled, and look again
/// soon (the ConfigMap is read on every reconcile, so creating it heals within the requeue).
fn missing_ca_bundle(d: &mut crate::health::Decision, message: &str) {
    use crate::conditions::{Cond, CondStatus};
    use kopiur_api::names::reason::MISSING_CA_BUNDLE;
    let set = |type_: &'static str, status: CondStatus, msg: &str| Cond {
        type_,
        status,
        reason: MISSING_CA_BUNDLE.to_string(),
        message: msg.to_string(),
    };
    let mut out: Vec<crate::conditions::Cond> = Vec::with_capacity(d.conditions.len());
    for c in d.conditions.drain(..) {
        out.push(match CaOverride::of(c.type_) {
            Some(CaOverride::Ready) => set("Ready", CondStatus::False, message),
            Some(CaOverride::Reconciling) => set(condition::RECONCILING, CondStatus::False, ""),
            Some(CaOverride::Stalled) => set(condition::STALLED, CondStatus::True, message),
            Some(CaOverride::CredentialsAvailable) => set(condition::CREDENTIALS_AVAILABLE, CondStatus::False, message),
            // Every other condition (Bootstrapped, BackendReachable, ...) keeps what the plan said.
            None => c,
        });
    }
    d.conditions = out;
    d.requeue_after = Some(chrono::Duration::seconds(30).min(d.requeue_after.unwrap_or(chrono::Duration::seconds(30))));
}

/// The conditions a missing CA bundle rewrites, matched exhaustively in `missing_ca_bundle`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CaOverride {
    Ready,
    Reconciling,
    Stalled,
    CredentialsAvailable,
}

impl CaOverride {
    const ALL: [CaOverride; 4] = [Self::Ready, Self::Reconciling, Self::Stalled, Self::CredentialsAvailable];

    fn type_(self) -> &'static str {
        use kopiur_api::names::condition;
        match self {
            Self::Ready => condition::READY,
            Self::Reconciling => condition::RECONCILING,
            Self::Stalled => condition::STALLED,
            Self::CredentialsAvailable => condition::CREDENTIALS_AVAILABLE,
        }
    }

    fn of(type_: &str) -> Option<CaOverride> {
        Self::ALL.into_iter().find(|o| o.type_() == type_)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conditions::{Cond, CondStatus};

    fn c(type_: &'static str, status: CondStatus, reason: &str) -> Cond {
        Cond { type_, status, reason: reason.into(), message: "m".into() }
    }

    #[test]
    fn a_missing_ca_bundle_rewrites_the_trio_and_credentials_only() {
        for o in CaOverride::ALL {
            assert_eq!(CaOverride::of(o.type_()), Some(o));
        }
        assert_eq!(CaOverride::of("BackendReachable"), None);
        let mut d = crate::health::Decision {
            plan: crate::health::Plan::Idle,
            status: Default::default(),
            conditions: vec![
                c("Ready", CondStatus::True, "Connected"),
                c("Reconciling", CondStatus::True, "Bootstrapping"),
                c("Stalled", CondStatus::False, "Connected"),
                c("CredentialsAvailable", CondStatus::True, "Found"),
                c("BackendReachable", CondStatus::True, "Reachable"),
            ],
            events: vec![],
            effects: vec![],
            requeue_after: Some(chrono::Duration::seconds(300)),
            warned_ack: None,
            early_strict: None,
        };
        missing_ca_bundle(&mut d, "ConfigMap ca has no key ca.crt");
        let got: Vec<(&str, CondStatus, &str)> =
            d.conditions.iter().map(|c| (c.type_, c.status, c.reason.as_str())).collect();
        assert_eq!(
            got,
            vec![
                ("Ready", CondStatus::False, "MissingCaBundle"),
                ("Reconciling", CondStatus::False, "MissingCaBundle"),
                ("Stalled", CondStatus::True, "MissingCaBundle"),
                ("CredentialsAvailable", CondStatus::False, "MissingCaBundle"),
                ("BackendReachable", CondStatus::True, "Reachable"),
            ]
        );
        assert_eq!(d.conditions[2].message, "ConfigMap ca has no key ca.crt");
        assert_eq!(d.requeue_after, Some(chrono::Duration::seconds(30)));
    }
}
