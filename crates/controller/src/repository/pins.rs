//! The pin ledger: every repository's `uniqueId`, kept where only the controller writes, so the
//! ADR-0007 invariant "never re-create a once-Ready repository" does not rest on `status` alone
//! (audit finding 4.5). A status can be lost (a CR deleted and re-created by GitOps or a
//! restore from Git) or rewritten by whoever may patch it; the ledger, a ConfigMap in the
//! operator namespace keyed by the storage location, survives both. Before each decision the
//! recorded pin replaces whatever the status says; before a status write carries a new pin, the
//! ledger records it. So a lost or changed `uniqueId` is restored (an Event says so), and a
//! location whose repository is gone keeps the create gate closed until a human acks with the
//! exact command.
use crate::error::ApiStep;
use k8s_openapi::api::core::v1::ConfigMap;
use kopiur_api::names::label;
use kopiur_api::shared::Backend;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::events::{Event as KEvent, EventType as KEventType};
use serde::{Deserialize, Serialize};

use crate::context::Context;
use crate::deletion::digest::sha256_hex;
use crate::error::Error;
use crate::repo_view::RepoObject;

/// The ConfigMap in the operator namespace.
pub const LEDGER: &str = "kopiur-repository-pins";
/// The Event when the ledger's pin replaced a missing or different `status.uniqueId`.
pub const EVENT_RESTORED: &str = "RepositoryPinRestored";

/// One entry: the pin and, for people reading the ConfigMap, where and whose.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub unique_id: String,
    pub location: String,
    pub repository: String,
}

/// Where the repository's data lives, as the key of its ledger entry. Object stores and
/// remote servers are global (an S3 location includes its endpoint); a filesystem path means
/// something only with its volume, in the repository's home namespace.
pub fn location(backend: &Backend, home_namespace: &str) -> String {
    match backend {
        Backend::S3(s) => format!(
            "s3://{}/{}@{}",
            s.bucket,
            s.prefix.as_deref().unwrap_or(""),
            s.endpoint.as_deref().unwrap_or("aws")
        ),
        Backend::Filesystem(f) => {
            format!("filesystem:{home_namespace}:{}:{}", serde_json::to_string(&f.volume).unwrap_or_default(), f.path)
        }
        other => super::observe::target(other),
    }
}

/// The ConfigMap data key of a location (keys allow only `[-._a-zA-Z0-9]`).
pub fn key(location: &str) -> String {
    format!("loc-{}", &sha256_hex(location.as_bytes())[..40])
}

/// What the decision should take as the pin, and whether that differs from the status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effective {
    /// The status agrees with the ledger, or the ledger knows nothing (the status is then the
    /// only record, as for a repository that was never Ready under this controller's ledger).
    AsStored,
    /// The ledger's pin replaces a missing or different one.
    Restored { pin: String, was: Option<String> },
}

/// Pure: the ledger wins whenever it has a pin.
pub fn effective(status_pin: Option<&str>, recorded: Option<&str>) -> Effective {
    let stored = status_pin.filter(|s| !s.is_empty());
    match recorded.filter(|r| !r.is_empty()) {
        Some(r) if stored.is_some_and(|s| s.eq_ignore_ascii_case(r)) => Effective::AsStored,
        Some(r) => Effective::Restored { pin: r.to_string(), was: stored.map(str::to_string) },
        None => Effective::AsStored,
    }
}

/// The process's view of the ledger (`Context::pins`). Only the leader writes the ledger, so a
/// value read or written in this process stays true.
fn cached(ctx: &Context, key: &str) -> Option<Option<String>> {
    ctx.pins.lock().ok().and_then(|m| m.get(key).cloned())
}

fn remember(ctx: &Context, key: &str, pin: Option<String>) {
    if let Ok(mut m) = ctx.pins.lock() {
        m.insert(key.to_string(), pin);
    }
}

fn api(ctx: &Context) -> Api<ConfigMap> {
    Api::namespaced(ctx.client.clone(), &ctx.config.namespace)
}

fn describe<K: RepoObject>(obj: &K) -> String {
    match obj.meta().namespace.as_deref() {
        Some(ns) => format!("Repository {ns}/{}", obj.meta().name.as_deref().unwrap_or_default()),
        None => format!("ClusterRepository {}", obj.meta().name.as_deref().unwrap_or_default()),
    }
}

/// The recorded pin for `obj`'s location (one GET per location per process; a read error is
/// an error: deciding without the ledger could reopen the create gate).
pub async fn recorded<K: RepoObject>(obj: &K, ctx: &Context) -> Result<Option<String>, Error> {
    let loc = location(&obj.common().backend, &obj.home_namespace(&ctx.config.namespace));
    let k = key(&loc);
    if let Some(v) = cached(ctx, &k) {
        return Ok(v);
    }
    let cm = api(ctx).get_opt(LEDGER).await.step("read repository pin ledger")?;
    let pin = cm
        .and_then(|c| c.data)
        .and_then(|d| d.get(&k).cloned())
        .and_then(|raw| serde_json::from_str::<Entry>(&raw).ok())
        .map(|e| e.unique_id);
    remember(ctx, &k, pin.clone());
    Ok(pin)
}

/// Replace the facts' pin with the ledger's when they differ, with one Normal Event per
/// restore naming both values.
pub async fn restore<K: RepoObject>(obj: &K, ctx: &Context, status_pin: &mut Option<String>) -> Result<(), Error> {
    let recorded = recorded(obj, ctx).await?;
    if let Effective::Restored { pin, was } = effective(status_pin.as_deref(), recorded.as_deref()) {
        let note = match &was {
            None => format!(
                "status.uniqueId was empty; restored the pin {pin} that kopiur recorded for this storage location \
                 (ConfigMap {}/{LEDGER}): a repository that was once Ready there is never re-created without \
                 the allow-reinitialize ack",
                ctx.config.namespace
            ),
            Some(w) => format!(
                "status.uniqueId said {w}, but kopiur recorded {pin} for this storage location (ConfigMap {}/{LEDGER}); \
                 restored {pin}",
                ctx.config.namespace
            ),
        };
        tracing::warn!(repository = %describe(obj), %pin, was = ?was, "restoring the repository pin from the ledger");
        let ev = KEvent {
            type_: KEventType::Normal,
            reason: EVENT_RESTORED.into(),
            note: Some(note),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(err) = ctx.recorder.publish(&ev, &obj.object_ref(&())).await {
            tracing::warn!(%err, "publishing the RepositoryPinRestored Event failed");
        }
        *status_pin = Some(pin);
    }
    Ok(())
}

/// Record `pin` for `obj`'s location before a status write carries it: the ledger is always
/// at least as new as any status. A failed write fails the reconcile (the status is not
/// written either, and the next attempt tries again).
pub async fn record<K: RepoObject>(obj: &K, ctx: &Context, pin: Option<&str>) -> Result<(), Error> {
    let Some(pin) = pin.filter(|p| !p.is_empty()) else { return Ok(()) };
    let loc = location(&obj.common().backend, &obj.home_namespace(&ctx.config.namespace));
    let k = key(&loc);
    if recorded(obj, ctx).await?.is_some_and(|r| r.eq_ignore_ascii_case(pin)) {
        return Ok(());
    }
    let entry = Entry { unique_id: pin.to_string(), location: loc, repository: describe(obj) };
    let raw = serde_json::to_string(&entry).unwrap_or_default();
    let cms = api(ctx);
    if cms.get_opt(LEDGER).await.step("read repository pin ledger")?.is_none() {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": LEDGER, "namespace": ctx.config.namespace,
                         "labels": {label::MANAGED_BY: label::MANAGED_BY_VALUE}},
        }))
        .map_err(|e| Error::WorkSpec(e.to_string()))?;
        match cms.create(&PostParams::default(), &cm).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(Error::api("create repository pin ledger", e)),
        }
    }
    let body = serde_json::json!({"data": {k.clone(): raw}});
    cms.patch(LEDGER, &PatchParams::default(), &Patch::Merge(&body)).await.step("record repository pin")?;
    tracing::info!(repository = %entry.repository, pin = %entry.unique_id, location = %entry.location, "repository pin recorded");
    remember(ctx, &k, Some(pin.to_string()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ledger_wins_over_a_missing_or_different_status() {
        assert_eq!(effective(Some("ab"), Some("AB")), Effective::AsStored, "same pin, any case");
        assert_eq!(effective(Some("ab"), None), Effective::AsStored, "nothing recorded: the status stands");
        assert_eq!(effective(None, None), Effective::AsStored);
        assert_eq!(effective(None, Some("ab")), Effective::Restored { pin: "ab".into(), was: None }, "a lost status");
        assert_eq!(effective(Some(""), Some("ab")), Effective::Restored { pin: "ab".into(), was: None }, "cleared");
        assert_eq!(
            effective(Some("cd"), Some("ab")),
            Effective::Restored { pin: "ab".into(), was: Some("cd".into()) },
            "a rewritten status"
        );
        assert_eq!(effective(None, Some("")), Effective::AsStored, "an empty record is no record");
    }

    #[test]
    fn locations_separate_endpoints_and_namespaced_volumes() {
        let s3 = |endpoint: Option<&str>, prefix: &str| -> Backend {
            serde_json::from_value(serde_json::json!({"s3": {"bucket": "b", "prefix": prefix, "endpoint": endpoint}}))
                .expect("an s3 backend")
        };
        let a = location(&s3(Some("https://minio.a:9000"), "x/"), "t1");
        assert_eq!(a, "s3://b/x/@https://minio.a:9000");
        assert_eq!(a, location(&s3(Some("https://minio.a:9000"), "x/"), "t2"), "an object store is global");
        assert_ne!(a, location(&s3(Some("https://minio.b:9000"), "x/"), "t1"), "another endpoint");
        assert_ne!(a, location(&s3(Some("https://minio.a:9000"), "y/"), "t1"), "another prefix");
        let fs: Backend = serde_json::from_value(serde_json::json!({"filesystem": {"path": "/repo"}})).expect("fs");
        assert_ne!(location(&fs, "t1"), location(&fs, "t2"), "a path means something only in its namespace");
        let k = key(&a);
        assert!(k.len() <= 253 && k.chars().all(|c| c.is_ascii_alphanumeric() || "-._".contains(c)), "{k}");
        assert_eq!(k, key(&a), "stable");
    }
}
