//! [next] fields on repositories (spec/api.md §1.9, `crate::features`): a gating field parks
//! the repository `Pending` and Stalled with `FeatureNotImplemented` before anything is
//! observed or launched (no Job; consumers see it not Ready), and so does a Secret reference
//! into another namespace (`CrossNamespaceReference`); an advisory field adds
//! `FeaturesIgnored=True` to the normal status and one Warning Event per generation.
use std::any::Any;

use chrono::Utc;
use kopiur_api::names::reason;
use kopiur_api::repository::RepositoryPhase;
use kopiur_api::{ClusterRepository, Repository};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};

use super::{Ctx, Error, RepoObject};
use crate::features::{self, FEATURE_NOT_IMPLEMENTED, FEATURES_IGNORED, NextFields};
use crate::health::kstatus::{Cond, CondStatus};

/// The [next] fields of either kind.
pub fn next_fields<K: RepoObject>(obj: &K) -> NextFields {
    let any = obj as &dyn Any;
    if let Some(c) = any.downcast_ref::<ClusterRepository>() {
        return features::cluster_repository(&c.spec);
    }
    if let Some(r) = any.downcast_ref::<Repository>() {
        return features::repository(&r.spec.common);
    }
    features::repository(obj.common())
}

/// A namespaced reference that names another namespace (spec/api.md §1.8, X rule
/// `CrossNamespaceReference`): movers read Secrets only from the namespace they run in, which
/// is the repository's home namespace (a ClusterRepository's: the operator namespace).
pub fn cross_namespace<K: RepoObject>(obj: &K, operator_ns: &str) -> Option<String> {
    let home = obj.home_namespace(operator_ns);
    let c = obj.common();
    let mut refs =
        vec![("spec.encryption.passwordSecretRef.namespace", c.encryption.password_secret_ref.namespace.clone())];
    if let kopiur_api::shared::Backend::S3(s) = &c.backend {
        let ns = s.auth.as_ref().and_then(|a| a.secret_ref.as_ref()).and_then(|r| r.namespace.clone());
        refs.push(("spec.backend.s3.auth.secretRef.namespace", ns));
    }
    let bad: Vec<String> =
        refs.into_iter().filter_map(|(path, ns)| ns.filter(|n| *n != home).map(|n| format!("{path} is {n}"))).collect();
    (!bad.is_empty()).then(|| {
        format!(
            "{}, but this repository's Jobs run in namespace {home} and read Secrets only from there; \
             put the Secret in {home} and drop the namespace",
            bad.join(", ")
        )
    })
}

/// A gating field is set, or a reference crosses namespaces: one status write (phase Pending,
/// Stalled with `FeatureNotImplemented` or `CrossNamespaceReference`, nothing else touched),
/// one Warning Event per generation, no Job. `None` when nothing refuses.
pub async fn refuse<K: RepoObject>(obj: &K, ctx: &Ctx, next: &NextFields) -> Result<Option<Action>, Error> {
    let (reason, message) = match (next.gating_message(), cross_namespace(obj, &ctx.config.namespace)) {
        (Some(m), _) => (FEATURE_NOT_IMPLEMENTED, m),
        (None, Some(m)) => (reason::CROSS_NAMESPACE_REFERENCE, m),
        (None, None) => return Ok(None),
    };
    let conds = stalled(reason, &message);
    let generation = obj.meta().generation.unwrap_or(0);
    let current = obj.status_common().cloned();
    let mut desired = current.clone().unwrap_or_default();
    let already = desired.conditions.iter().any(|c| {
        c.type_ == "Stalled" && c.reason == reason && c.observed_generation == Some(generation) && c.message == message
    });
    desired.phase = Some(RepositoryPhase::Pending);
    desired.observed_generation = Some(generation);
    desired.backend = Some(obj.common().backend.key().to_string());
    desired.conditions = super::convert::merge_conditions(&desired.conditions, &conds, generation, Utc::now());
    features::drop_stale_features_ignored(&mut desired.conditions, &[]);
    if current.as_ref() != Some(&desired) {
        let old = current.map(|c| obj.status_value(c)).unwrap_or(serde_json::Value::Null);
        let body = serde_json::json!({ "status": super::apply::merge_patch(&old, &obj.status_value(desired)) });
        K::api(ctx.client.clone(), obj)
            .patch_status(&obj.name_any(), &PatchParams::default(), &Patch::Merge(&body))
            .await?;
    }
    if !already {
        publish(obj, ctx, reason, &message).await;
    }
    // A spec change re-triggers; the cadence is only a safety net.
    Ok(Some(Action::requeue(std::time::Duration::from_secs(300))))
}

fn stalled(reason: &str, message: &str) -> Vec<Cond> {
    let c = |type_: &'static str, status, message: &str| Cond {
        type_,
        status,
        reason: reason.to_string(),
        message: message.to_string(),
    };
    vec![
        c("Ready", CondStatus::False, message),
        c("Reconciling", CondStatus::False, ""),
        c("Stalled", CondStatus::True, message),
    ]
}

/// The Warning Event for advisory fields, once per generation (decided on the status read
/// before this reconcile's write).
pub async fn warn_ignored<K: RepoObject>(obj: &K, ctx: &Ctx, next: &NextFields) {
    let generation = obj.meta().generation.unwrap_or(0);
    let stored = obj.status_common().map(|s| s.conditions.as_slice()).unwrap_or_default();
    if let Some(note) = next.advisory_event(stored, generation) {
        publish(obj, ctx, FEATURES_IGNORED, &note).await;
    }
}

async fn publish<K: RepoObject>(obj: &K, ctx: &Ctx, reason: &str, note: &str) {
    let ev = Event {
        type_: EventType::Warning,
        reason: reason.to_string(),
        note: Some(note.chars().take(1024).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(err) = ctx.recorder.publish(&ev, &obj.object_ref(&())).await {
        tracing::warn!(%err, reason, "publishing an Event failed");
    }
}
