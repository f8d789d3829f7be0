//! [next] fields on repositories (docs/design/api-contract.md §1.9, `crate::features`): a gating field parks
//! the repository `Pending` and Stalled with `FeatureNotImplemented` before anything is
//! observed or launched (no Job; consumers see it not Ready), and so does a Secret reference
//! into another namespace (`CrossNamespaceReference`) and a failed reconcile-time check of
//! `validate` (`InvalidSpec`, `InvalidSchedule`); an advisory field adds
//! `FeaturesIgnored=True` to the normal status and one Warning Event per generation.
use crate::error::ApiStep;
use std::any::Any;

use chrono::Utc;
use kopiur_api::names::{condition, event, reason};
use kopiur_api::repository::RepositoryPhase;
use kopiur_api::{ClusterRepository, Repository};
use kube::ResourceExt;

use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};

use crate::conditions::Cond;
use crate::context::Context;
use crate::error::Error;
use crate::features::{self, FEATURE_NOT_IMPLEMENTED, NextFields};
use crate::repo_view::RepoObject;

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

/// A namespaced reference that names another namespace (docs/design/api-contract.md §1.8, X rule
/// `CrossNamespaceReference`): movers read Secrets only from the namespace they run in, which
/// is the repository's home namespace (a ClusterRepository's: the operator namespace).
pub fn cross_namespace<K: RepoObject>(obj: &K, operator_ns: &str) -> Option<String> {
    let home = obj.home_namespace(operator_ns);
    let c = obj.common();
    let mut refs =
        vec![("spec.encryption.passwordSecretRef.namespace", c.encryption.password_secret_ref.namespace.clone())];
    if let Some(s) = c.backend.s3() {
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

/// Why the repository may not proceed, first match wins: a gating [next] field
/// (`FeatureNotImplemented`), a reference into another namespace (`CrossNamespaceReference`),
/// then the R checks of `validate` (`InvalidSpec`, `InvalidSchedule`). `None` when nothing
/// refuses.
pub fn refusal<K: RepoObject>(obj: &K, operator_ns: &str, next: &NextFields) -> Option<(&'static str, String)> {
    if let Some(m) = next.gating_message() {
        return Some((FEATURE_NOT_IMPLEMENTED, m));
    }
    if let Some(m) = cross_namespace(obj, operator_ns) {
        return Some((reason::CROSS_NAMESPACE_REFERENCE, m));
    }
    super::validate::check(obj.common()).map(|i| (i.reason, i.message))
}

/// A gating field is set, a reference crosses namespaces, or an R check fails ([`refusal`]):
/// one status write (phase Pending, Stalled with that reason, `RepositoryWritable` kept in step
/// with `spec.mode`, nothing else touched), one Warning Event per generation, no Job. `None`
/// when nothing refuses.
pub async fn refuse<K: RepoObject>(obj: &K, ctx: &Context, next: &NextFields) -> Result<Option<Action>, Error> {
    let Some((reason, message)) = refusal(obj, &ctx.config.namespace, next) else {
        return Ok(None);
    };
    let mut conds = stalled(reason, &message);
    let read_only = obj.common().mode == kopiur_api::repository::RepositoryMode::ReadOnly;
    conds.extend(crate::health::kstatus::repository_writable(read_only));
    let generation = obj.meta().generation.unwrap_or(0);
    let current = obj.status_common().cloned();
    let mut desired = current.clone().unwrap_or_default();
    let already = desired.conditions.iter().any(|c| {
        c.type_ == condition::STALLED
            && c.reason == reason
            && c.observed_generation == Some(generation)
            && c.message == message
    });
    desired.phase = Some(RepositoryPhase::Pending);
    desired.observed_generation = Some(generation);
    desired.backend = Some(obj.common().backend.key().to_string());
    desired.conditions = crate::conditions::merge_conditions(&desired.conditions, &conds, generation, Utc::now());
    features::drop_stale_features_ignored(&mut desired.conditions, &[]);
    crate::health::kstatus::drop_stale_repository_writable(&mut desired.conditions, &conds);
    if current.as_ref() != Some(&desired) {
        // Unguarded: only the controller writes a repository's status.
        let old = current.map(|c| obj.status_value(c)).unwrap_or(serde_json::Value::Null);
        let new = obj.status_value(desired);
        crate::status::write_status_value(&K::api(ctx.client.clone(), obj), &obj.name_any(), None, &old, &new)
            .await
            .step("patch repository status")?;
    }
    if !already {
        publish(obj, ctx, reason, &message).await;
    }
    // A spec change re-triggers; the cadence is only a safety net.
    Ok(Some(Action::requeue(std::time::Duration::from_secs(300))))
}

fn stalled(reason: &str, message: &str) -> Vec<Cond> {
    crate::conditions::trio(crate::conditions::Standing::Stalled, reason, message)
}

/// The Warning Event for advisory fields, once per generation (decided on the status read
/// before this reconcile's write).
pub async fn warn_ignored<K: RepoObject>(obj: &K, ctx: &Context, next: &NextFields) {
    let generation = obj.meta().generation.unwrap_or(0);
    let stored = obj.status_common().map(|s| s.conditions.as_slice()).unwrap_or_default();
    if let Some(note) = next.advisory_event(stored, generation) {
        publish(obj, ctx, event::FEATURES_IGNORED, &note).await;
    }
}

async fn publish<K: RepoObject>(obj: &K, ctx: &Context, reason: &str, note: &str) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conditions::CondStatus;
    use serde_json::{Value, json};

    fn repo(spec: Value) -> Repository {
        serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
            "metadata": {"name": "r", "namespace": "team-a", "generation": 1}, "spec": spec,
        }))
        .expect("a Repository")
    }

    fn cluster(spec: Value) -> ClusterRepository {
        let mut spec = spec;
        spec["allowedNamespaces"] = json!({"all": true});
        serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "ClusterRepository",
            "metadata": {"name": "shared", "generation": 1}, "spec": spec,
        }))
        .expect("a ClusterRepository")
    }

    fn s3_spec(password_ns: Option<&str>, auth_ns: Option<&str>) -> Value {
        let mut pw = json!({"name": "kopia"});
        if let Some(n) = password_ns {
            pw["namespace"] = json!(n);
        }
        let mut auth = json!({"name": "s3-keys"});
        if let Some(n) = auth_ns {
            auth["namespace"] = json!(n);
        }
        json!({
            "backend": {"s3": {"bucket": "bucket", "auth": {"secretRef": auth}}},
            "encryption": {"passwordSecretRef": pw},
        })
    }

    #[test]
    fn a_repository_secret_reference_into_another_namespace_is_refused() {
        assert_eq!(cross_namespace(&repo(s3_spec(None, None)), "kopiur-system"), None);
        assert_eq!(cross_namespace(&repo(s3_spec(Some("team-a"), Some("team-a"))), "kopiur-system"), None);
        assert_eq!(
            cross_namespace(&repo(s3_spec(Some("other"), None)), "kopiur-system").as_deref(),
            Some(
                "spec.encryption.passwordSecretRef.namespace is other, but this repository's Jobs run in \
                 namespace team-a and read Secrets only from there; put the Secret in team-a and drop the namespace"
            )
        );
        let both = cross_namespace(&repo(s3_spec(Some("other"), Some("kopiur-system"))), "kopiur-system").unwrap();
        assert!(
            both.starts_with(
                "spec.encryption.passwordSecretRef.namespace is other, \
                 spec.backend.s3.auth.secretRef.namespace is kopiur-system, but"
            ),
            "{both}"
        );
    }

    #[test]
    fn a_cluster_repository_references_the_operator_namespace() {
        assert_eq!(cross_namespace(&cluster(s3_spec(None, None)), "kopiur-system"), None);
        assert_eq!(cross_namespace(&cluster(s3_spec(Some("kopiur-system"), None)), "kopiur-system"), None);
        let m = cross_namespace(&cluster(s3_spec(None, Some("team-a"))), "kopiur-system").unwrap();
        assert!(m.starts_with("spec.backend.s3.auth.secretRef.namespace is team-a, but this repository's Jobs run in namespace kopiur-system"), "{m}");
    }

    #[test]
    fn refusals_come_in_order_gating_then_cross_namespace_then_r_checks() {
        let reason_of = |r: &Repository| refusal(r, "kopiur-system", &next_fields(r)).map(|(reason, _)| reason);
        let mut spec = s3_spec(None, None);
        assert_eq!(reason_of(&repo(spec.clone())), None);

        spec["scheduleDefaults"] = json!({"timezone": "Mars/Olympus"});
        assert_eq!(reason_of(&repo(spec.clone())), Some("InvalidSchedule"));
        let (_, m) = refusal(&repo(spec.clone()), "kopiur-system", &NextFields::default()).unwrap();
        assert_eq!(m, "spec.scheduleDefaults.timezone: unknown IANA time zone \"Mars/Olympus\"");

        spec["create"] = json!({"encryption": "AES-NOPE"});
        assert_eq!(reason_of(&repo(spec.clone())), Some("InvalidSpec"));
        spec["moverDefaults"] = json!({"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}});
        let (_, m) = refusal(&repo(spec.clone()), "kopiur-system", &NextFields::default()).unwrap();
        assert!(m.contains("\"AES-NOPE\"") && m.contains("requests.cpu 2 is above limits.cpu 1"), "{m}");

        spec["encryption"]["passwordSecretRef"]["namespace"] = json!("other");
        assert_eq!(reason_of(&repo(spec.clone())), Some("CrossNamespaceReference"));

        spec["backend"]["s3"]["auth"] = json!({"workloadIdentity": {"serviceAccountName": "sa"}});
        assert_eq!(reason_of(&repo(spec.clone())), Some("FeatureNotImplemented"));
    }

    #[test]
    fn the_refusal_trio_is_stalled_not_reconciling() {
        let c = stalled("InvalidSpec", "m");
        let got: Vec<(&str, CondStatus, &str)> = c.iter().map(|c| (c.type_, c.status, c.reason.as_str())).collect();
        assert_eq!(
            got,
            [
                ("Ready", CondStatus::False, "InvalidSpec"),
                ("Reconciling", CondStatus::False, "InvalidSpec"),
                ("Stalled", CondStatus::True, "InvalidSpec"),
            ]
        );
    }
}
