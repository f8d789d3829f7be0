//! [next] fields on repositories (spec/api.md §1.9, `crate::features`): a gating field parks
//! the repository `Pending` and Stalled with `FeatureNotImplemented` before anything is
//! observed or launched (no Job; consumers see it not Ready); an advisory field adds
//! `FeaturesIgnored=True` to the normal status and one Warning Event per generation.
use std::any::Any;

use chrono::Utc;
use kopiur_api::repository::RepositoryPhase;
use kopiur_api::{ClusterRepository, Repository};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};

use super::{Ctx, Error, RepoObject};
use crate::features::{self, FEATURE_NOT_IMPLEMENTED, FEATURES_IGNORED, NextFields};

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

/// A gating field is set: one status write (phase Pending, Stalled `FeatureNotImplemented`,
/// nothing else touched), one Warning Event per generation, no Job. `None` when nothing gates.
pub async fn refuse<K: RepoObject>(obj: &K, ctx: &Ctx, next: &NextFields) -> Result<Option<Action>, Error> {
    let (Some(conds), Some(message)) = (next.gating_conditions(), next.gating_message()) else {
        return Ok(None);
    };
    let generation = obj.meta().generation.unwrap_or(0);
    let current = obj.status_common().cloned();
    let mut desired = current.clone().unwrap_or_default();
    let already = desired.conditions.iter().any(|c| {
        c.type_ == "Stalled"
            && c.reason == FEATURE_NOT_IMPLEMENTED
            && c.observed_generation == Some(generation)
            && c.message == message
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
        publish(obj, ctx, FEATURE_NOT_IMPLEMENTED, &message).await;
    }
    // A spec change re-triggers; the cadence is only a safety net.
    Ok(Some(Action::requeue(std::time::Duration::from_secs(300))))
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
