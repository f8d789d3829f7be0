//! Maintenance projection (docs/design/repository-breaker.md §3.11): unless `spec.maintenance.enabled: false` or the
//! repository is ReadOnly, every repository has a managed Maintenance named after itself, in
//! its namespace (a ClusterRepository's: `spec.maintenance.namespace`, else the operator
//! namespace), owned by it and labelled managed-by, carrying the repository's schedule and the
//! lease owner. A user-authored Maintenance (no managed-by label) for the repository wins:
//! kopiur deletes its own. `MaintenanceConfigured` on the repository says which; a Warning
//! `MaintenanceNotConfigured` marks the transition to none. `plan` is pure; `sync` applies it
//! and writes only what changed.
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, OwnerReference};
use kopiur_api::maintenance::{MaintenanceSpec, Ownership};
use kopiur_api::names::{self, condition, event, label, reason};
use kopiur_api::repository::{RepositoryCommonSpec, RepositoryMode};
use kopiur_api::shared::{RepositoryKind, RepositoryRef};
use kopiur_api::{ClusterRepository, Maintenance, Repository};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::{Api, Client, ResourceExt};

use crate::conditions::{Cond, CondStatus};
use crate::repo_view::RepoObject;

pub const FIELD_MANAGER: &str = "kopiur-controller";

/// One repository, as the projection sees it.
#[derive(Clone, Debug)]
pub struct RepoFacts {
    pub kind: RepositoryKind,
    /// `None` for a ClusterRepository.
    pub namespace: Option<String>,
    pub name: String,
    pub owner: OwnerReference,
    pub common: RepositoryCommonSpec,
}

/// What exists for the repository: `(namespace, name, managed)` of each Maintenance that
/// refers to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Existing {
    pub namespace: String,
    pub name: String,
    pub managed: bool,
    pub spec: serde_json::Value,
    pub generation: Option<i64>,
}

/// What this process last applied: `(namespace, name)` -> (desired spec, generation after the
/// apply). A managed Maintenance whose desired spec and generation are unchanged since is not
/// re-applied, so an idle controller writes nothing even where the apiserver's defaulting makes
/// the stored spec differ textually from the desired one.
pub type Applied = std::collections::HashMap<(String, String), (serde_json::Value, Option<i64>)>;

#[derive(Clone, Debug)]
pub struct ProjectionPlan {
    /// The managed Maintenance to apply (absent = none wanted).
    pub apply: Option<Maintenance>,
    /// Managed Maintenances to delete: `(namespace, name)`.
    pub delete: Vec<(String, String)>,
    /// `MaintenanceConfigured`.
    pub condition: Cond,
}

fn target_namespace(r: &RepoFacts, operator_ns: &str) -> String {
    match r.kind {
        RepositoryKind::Repository => r.namespace.clone().unwrap_or_default(),
        RepositoryKind::ClusterRepository => {
            r.common.maintenance.namespace.clone().unwrap_or_else(|| operator_ns.to_string())
        }
    }
}

/// The managed Maintenance for `r`.
pub fn desired(r: &RepoFacts, operator_ns: &str) -> Maintenance {
    let m = &r.common.maintenance;
    let ns = target_namespace(r, operator_ns);
    let owner = match r.kind {
        RepositoryKind::Repository => kopiur_api::domain::identity::lease_owner(r.namespace.as_deref(), &r.name),
        RepositoryKind::ClusterRepository => kopiur_api::domain::identity::lease_owner(None, &r.name),
    };
    Maintenance {
        metadata: ObjectMeta {
            name: Some(r.name.clone()),
            namespace: Some(ns.clone()),
            labels: Some(std::collections::BTreeMap::from([(
                label::MANAGED_BY.into(),
                label::MANAGED_BY_VALUE.into(),
            )])),
            owner_references: Some(vec![r.owner.clone()]),
            ..ObjectMeta::default()
        },
        spec: MaintenanceSpec {
            repository: RepositoryRef {
                name: r.name.clone(),
                kind: r.kind,
                namespace: match r.kind {
                    RepositoryKind::Repository if r.namespace.as_deref() != Some(ns.as_str()) => r.namespace.clone(),
                    RepositoryKind::Repository | RepositoryKind::ClusterRepository => None,
                },
            },
            schedule: m.schedule.clone().unwrap_or_default(),
            ownership: Some(Ownership { owner: Some(owner), owner_aliases: None, takeover_policy: m.takeover_policy }),
            mover: m.mover.clone(),
            failure_policy: m.failure_policy.clone(),
            credential_projection: None,
        },
        status: None,
    }
}

pub fn plan(r: &RepoFacts, operator_ns: &str, existing: &[Existing]) -> ProjectionPlan {
    let managed: Vec<&Existing> = existing.iter().filter(|e| e.managed).collect();
    let user = existing.iter().find(|e| !e.managed);
    let wanted = r.common.maintenance.enabled && !matches!(r.common.mode, RepositoryMode::ReadOnly);
    let cond = |ok: bool, why: &str, msg: String| Cond {
        type_: condition::MAINTENANCE_CONFIGURED,
        status: if ok { CondStatus::True } else { CondStatus::False },
        reason: why.into(),
        message: msg,
    };
    if let Some(u) = user {
        return ProjectionPlan {
            apply: None,
            delete: managed.iter().map(|e| (e.namespace.clone(), e.name.clone())).collect(),
            condition: cond(
                true,
                reason::MAINTENANCE_CONFIGURED,
                format!("user-authored Maintenance {}/{} maintains this repository", u.namespace, u.name),
            ),
        };
    }
    if !wanted {
        let why = if r.common.maintenance.enabled {
            "the repository is ReadOnly"
        } else {
            "spec.maintenance.enabled is false"
        };
        return ProjectionPlan {
            apply: None,
            delete: managed.iter().map(|e| (e.namespace.clone(), e.name.clone())).collect(),
            condition: cond(
                false,
                reason::MAINTENANCE_DISABLED,
                format!(
                    "no Maintenance runs for this repository: {why}; kopia indexes and unused data are never compacted"
                ),
            ),
        };
    }
    let d = desired(r, operator_ns);
    let (ns, name) = (d.metadata.namespace.clone().unwrap_or_default(), r.name.clone());
    // docs/design/api-contract.md §5: a ClusterRepository's Maintenance goes to maintenance.namespace, else the
    // operator namespace; with neither known nothing is created (and nothing of ours kept).
    if ns.is_empty() {
        return ProjectionPlan {
            apply: None,
            delete: managed.iter().map(|e| (e.namespace.clone(), e.name.clone())).collect(),
            condition: cond(
                false,
                reason::MAINTENANCE_NAMESPACE_UNRESOLVED,
                "no namespace for the managed Maintenance: set spec.maintenance.namespace (or run the operator with KOPIUR_NAMESPACE)".into(),
            ),
        };
    }
    let current = managed.iter().find(|e| e.namespace == ns && e.name == name);
    let spec = serde_json::to_value(&d.spec).unwrap_or_default();
    let stale: Vec<(String, String)> = managed
        .iter()
        .filter(|e| !(e.namespace == ns && e.name == name))
        .map(|e| (e.namespace.clone(), e.name.clone()))
        .collect();
    ProjectionPlan {
        apply: if current.is_some_and(|c| c.spec == spec) { None } else { Some(d) },
        delete: stale,
        condition: cond(true, reason::MAINTENANCE_CONFIGURED, format!("managed Maintenance {ns}/{name}")),
    }
}

/// `MaintenanceConfigured=False / MaintenanceApplyFailed` (docs/design/api-contract.md §4.5) after the managed
/// Maintenance `ns/name` could not be applied: the apiserver's own words, and what to do when
/// the namespace is missing.
pub fn apply_failed(ns: &str, name: &str, e: &kube::Error) -> Cond {
    let why = match e {
        kube::Error::Api(s) if s.code == 404 && s.details.as_ref().is_some_and(|d| d.kind == "namespaces") => {
            format!(
                "namespace {ns} does not exist: create it, or set spec.maintenance.namespace to an existing namespace"
            )
        }
        kube::Error::Api(s) if s.code == 404 => format!(
            "{} (is the Maintenance CRD installed?)",
            if s.message.is_empty() { "not found" } else { s.message.as_str() }
        ),
        kube::Error::Api(s) => format!("{} ({} {})", s.message, s.code, s.reason),
        other => other.to_string(),
    };
    Cond {
        type_: condition::MAINTENANCE_CONFIGURED,
        status: CondStatus::False,
        reason: reason::MAINTENANCE_APPLY_FAILED.into(),
        message: format!("applying the managed Maintenance {ns}/{name} failed: {why}"),
    }
}

fn refers(m: &Maintenance, kind: RepositoryKind, ns: Option<&str>, name: &str) -> bool {
    let r = &m.spec.repository;
    r.kind == kind
        && r.name == name
        && match kind {
            RepositoryKind::Repository => r.namespace.as_deref().or(m.metadata.namespace.as_deref()) == ns,
            RepositoryKind::ClusterRepository => true,
        }
}

fn existing_for(store: &Store<Maintenance>, kind: RepositoryKind, ns: Option<&str>, name: &str) -> Vec<Existing> {
    store
        .state()
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none() && refers(m, kind, ns, name))
        .map(|m| Existing {
            namespace: m.namespace().unwrap_or_default(),
            name: m.name_any(),
            managed: m.labels().get(label::MANAGED_BY).map(String::as_str) == Some(label::MANAGED_BY_VALUE),
            spec: serde_json::to_value(&m.spec).unwrap_or_default(),
            generation: m.metadata.generation,
        })
        .collect()
}

async fn apply_one<K: RepoObject>(
    client: &Client,
    recorder: &kube::runtime::events::Recorder,
    store: &Store<Maintenance>,
    repo: &K,
    operator_ns: &str,
    applied: &mut Applied,
    now: DateTime<Utc>,
) -> Result<(), kube::Error> {
    let kind = match K::KIND {
        crate::health::RepoKind::ClusterRepository => RepositoryKind::ClusterRepository,
        crate::health::RepoKind::Repository => RepositoryKind::Repository,
    };
    if repo.common().suspend || repo.meta().deletion_timestamp.is_some() {
        return Ok(());
    }
    let facts = RepoFacts {
        kind,
        namespace: repo.namespace(),
        name: repo.name_any(),
        owner: repo.controller_owner_ref(&()).unwrap_or_default(),
        common: repo.common().clone(),
    };
    let existing = existing_for(store, kind, facts.namespace.as_deref(), &facts.name);
    let mut p = plan(&facts, operator_ns, &existing);
    if let Some(m) = &p.apply.clone() {
        let ns = m.metadata.namespace.clone().unwrap_or_default();
        let key = (ns.clone(), facts.name.clone());
        let want = serde_json::to_value(&m.spec).unwrap_or_default();
        let current = existing.iter().find(|e| e.managed && e.namespace == ns && e.name == facts.name);
        let unchanged = current
            .zip(applied.get(&key))
            .is_some_and(|(c, (spec, generation))| *spec == want && *generation == c.generation);
        if !unchanged {
            let mut body = serde_json::to_value(m).unwrap_or_default();
            body["apiVersion"] = names::API_VERSION.into();
            body["kind"] = "Maintenance".into();
            if let Some(o) = body.as_object_mut() {
                o.remove("status");
            }
            let out = match Api::<Maintenance>::namespaced(client.clone(), &ns)
                .patch(&facts.name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&body))
                .await
            {
                Ok(out) => out,
                Err(e) => {
                    // Say so on the repository (e.g. the Maintenance CRD is not installed, or
                    // the namespace does not exist), then let the caller log and retry.
                    p.condition = apply_failed(&ns, &facts.name, &e);
                    write_condition(client, recorder, repo, &p, &facts.name, now).await?;
                    return Err(e);
                }
            };
            applied.insert(key, (want, out.metadata.generation));
            tracing::info!(repository = %facts.name, namespace = %ns, "managed Maintenance applied");
        }
    }
    for (ns, name) in &p.delete {
        match Api::<Maintenance>::namespaced(client.clone(), ns).delete(name, &DeleteParams::default()).await {
            Ok(_) => tracing::info!(maintenance = %name, namespace = %ns, "managed Maintenance deleted"),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    write_condition(client, recorder, repo, &p, &facts.name, now).await
}

/// `MaintenanceConfigured` on the repository, only when it changes.
async fn write_condition<K: RepoObject>(
    client: &Client,
    recorder: &kube::runtime::events::Recorder,
    repo: &K,
    p: &ProjectionPlan,
    name: &str,
    now: DateTime<Utc>,
) -> Result<(), kube::Error> {
    let conds: Vec<Condition> = repo.status_common().map(|s| s.conditions.clone()).unwrap_or_default();
    let was = conds.iter().find(|c| c.type_ == condition::MAINTENANCE_CONFIGURED).map(|c| c.status.clone());
    let merged = crate::conditions::merge_conditions(
        &conds,
        std::slice::from_ref(&p.condition),
        repo.meta().generation.unwrap_or(0),
        now,
    );
    if merged != conds {
        // Only the conditions: the rest of the repository's status is the health loop's.
        let (old, new) = (serde_json::json!({ "conditions": conds }), serde_json::json!({ "conditions": merged }));
        let guard = repo.meta().resource_version.as_deref();
        let api = K::api(client.clone(), repo);
        if !crate::status::write_status_value(&api, name, guard, &old, &new).await?.landed() {
            return Ok(());
        }
        let now_false = p.condition.status == CondStatus::False;
        if now_false && was.as_deref() != Some("False") {
            let ev = kube::runtime::events::Event {
                type_: kube::runtime::events::EventType::Warning,
                reason: event::MAINTENANCE_NOT_CONFIGURED.into(),
                note: Some(p.condition.message.clone()),
                action: "Reconcile".into(),
                secondary: None,
            };
            let _ = recorder.publish(&ev, &repo.object_ref(&())).await;
        }
    }
    Ok(())
}

/// Keeps every repository's projection in line, every 10 s (writes only on change).
pub async fn run(
    client: Client,
    operator_ns: String,
    identity: String,
    repos: Store<Repository>,
    crepos: Store<ClusterRepository>,
    maints: Store<Maintenance>,
) {
    let recorder = kube::runtime::events::Recorder::new(
        client.clone(),
        kube::runtime::events::Reporter { controller: "kopiur-controller".into(), instance: Some(identity) },
    );
    // Short: a store that never signals must not delay the projection (an unsynced store only
    // costs an idempotent apply, never a wrong deletion of a user's object: ours are labelled).
    let wait = std::time::Duration::from_secs(5);
    let _ = tokio::time::timeout(wait, repos.wait_until_ready()).await;
    let _ = tokio::time::timeout(wait, crepos.wait_until_ready()).await;
    let _ = tokio::time::timeout(wait, maints.wait_until_ready()).await;
    let mut applied = Applied::new();
    loop {
        let now = Utc::now();
        for r in repos.state() {
            if let Err(e) = apply_one(&client, &recorder, &maints, r.as_ref(), &operator_ns, &mut applied, now).await {
                tracing::warn!(repository = %r.name_any(), error = %e, "maintenance projection failed");
            }
        }
        for r in crepos.state() {
            if let Err(e) = apply_one(&client, &recorder, &maints, r.as_ref(), &operator_ns, &mut applied, now).await {
                tracing::warn!(repository = %r.name_any(), error = %e, "maintenance projection failed");
            }
        }
        tokio::time::sleep(std::time::Duration::from_secs(10)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(enabled: bool, ro: bool) -> RepoFacts {
        let mut common: RepositoryCommonSpec = serde_json::from_value(serde_json::json!({
            "backend": {"s3": {"bucket": "b", "endpoint": "http://x", "region": "r"}},
            "encryption": {"passwordSecretRef": {"name": "kopia"}}
        }))
        .unwrap();
        common.maintenance.enabled = enabled;
        if ro {
            common.mode = RepositoryMode::ReadOnly;
        }
        RepoFacts {
            kind: RepositoryKind::Repository,
            namespace: Some("t".into()),
            name: "r".into(),
            owner: OwnerReference {
                kind: "Repository".into(),
                name: "r".into(),
                uid: "u".into(),
                ..Default::default()
            },
            common,
        }
    }

    fn managed_of(f: &RepoFacts) -> Existing {
        let d = desired(f, "kopiur-system");
        Existing {
            namespace: "t".into(),
            name: "r".into(),
            managed: true,
            spec: serde_json::to_value(&d.spec).unwrap(),
            generation: Some(1),
        }
    }

    #[test]
    fn projects_named_after_the_repository_with_the_lease_owner() {
        let f = facts(true, false);
        let p = plan(&f, "kopiur-system", &[]);
        let m = p.apply.expect("a managed Maintenance");
        assert_eq!(m.metadata.name.as_deref(), Some("r"));
        assert_eq!(m.metadata.namespace.as_deref(), Some("t"));
        assert_eq!(m.labels().get(label::MANAGED_BY).map(String::as_str), Some("kopiur"));
        assert_eq!(m.spec.ownership.unwrap().owner.as_deref(), Some("kopiur/t/r"));
        assert_eq!(m.metadata.owner_references.unwrap()[0].uid, "u");
        assert_eq!(p.condition.status, CondStatus::True);
    }

    /// docs/design/api-contract.md §5, §10: the repository's `spec.maintenance.mover` and `failurePolicy` are the
    /// managed Maintenance's own (so they reach its Job through `common::build`).
    #[test]
    fn the_managed_maintenance_carries_the_repository_maintenance_mover() {
        let mut f = facts(true, false);
        f.common.maintenance.mover = Some(
            serde_json::from_value(
                serde_json::json!({"resources": {"limits": {"memory": "2Gi"}}, "ttlSecondsAfterFinished": 5}),
            )
            .unwrap(),
        );
        f.common.maintenance.failure_policy =
            Some(serde_json::from_value(serde_json::json!({"activeDeadlineSeconds": 600})).unwrap());
        let m = plan(&f, "kopiur-system", &[]).apply.expect("a managed Maintenance");
        assert_eq!(m.spec.mover, f.common.maintenance.mover);
        assert_eq!(m.spec.failure_policy, f.common.maintenance.failure_policy);
        // A change of the mover block re-applies.
        let stale = managed_of(&facts(true, false));
        assert!(plan(&f, "kopiur-system", &[stale]).apply.is_some());
    }

    #[test]
    fn an_unchanged_projection_writes_nothing() {
        let f = facts(true, false);
        let p = plan(&f, "kopiur-system", &[managed_of(&f)]);
        assert!(p.apply.is_none() && p.delete.is_empty());
    }

    #[test]
    fn a_user_authored_maintenance_wins_and_ours_goes() {
        let f = facts(true, false);
        let user = Existing {
            namespace: "t".into(),
            name: "mine".into(),
            managed: false,
            spec: serde_json::Value::Null,
            generation: Some(1),
        };
        let p = plan(&f, "kopiur-system", &[managed_of(&f), user]);
        assert!(p.apply.is_none());
        assert_eq!(p.delete, vec![("t".to_string(), "r".to_string())]);
        assert_eq!(p.condition.status, CondStatus::True);
        assert!(p.condition.message.contains("t/mine"));
    }

    #[test]
    fn disabled_or_read_only_removes_ours_and_reports_false() {
        for f in [facts(false, false), facts(true, true)] {
            let p = plan(&f, "kopiur-system", &[managed_of(&f)]);
            assert!(p.apply.is_none());
            assert_eq!(p.delete.len(), 1);
            assert_eq!(p.condition.status, CondStatus::False);
            assert_eq!(p.condition.reason, reason::MAINTENANCE_DISABLED);
        }
    }

    #[test]
    fn a_cluster_repository_with_no_namespace_known_is_unresolved() {
        let mut f = facts(true, false);
        f.kind = RepositoryKind::ClusterRepository;
        f.namespace = None;
        let p = plan(&f, "", &[]);
        assert!(p.apply.is_none(), "nothing is created in namespace \"\"");
        assert_eq!(
            (p.condition.status, p.condition.reason.as_str()),
            (CondStatus::False, "MaintenanceNamespaceUnresolved")
        );
        assert!(p.condition.message.contains("spec.maintenance.namespace"));
        // The operator namespace resolves it.
        assert_eq!(plan(&f, "kopiur-system", &[]).condition.status, CondStatus::True);
    }

    /// docs/design/api-contract.md §4.5: a failed apply is `MaintenanceApplyFailed`, saying what the apiserver
    /// refused; a missing namespace is named with the fix (e2e `maintenance_e2e` shows the
    /// reconcile shell writing it, with its Warning, and healing once the namespace exists).
    #[test]
    fn a_failed_apply_is_maintenance_apply_failed_with_the_reason() {
        let missing_ns = kube::Error::Api(Box::new(kube::core::Status {
            code: 404,
            reason: "NotFound".into(),
            message: "namespaces \"later\" not found".into(),
            details: Some(kube::core::response::StatusDetails {
                name: "later".into(),
                group: String::new(),
                kind: "namespaces".into(),
                uid: String::new(),
                causes: vec![],
                retry_after_seconds: 0,
            }),
            ..Default::default()
        }));
        let c = apply_failed("later", "shared", &missing_ns);
        assert_eq!(
            (c.type_, c.status, c.reason.as_str()),
            ("MaintenanceConfigured", CondStatus::False, "MaintenanceApplyFailed")
        );
        assert_eq!(
            c.message,
            "applying the managed Maintenance later/shared failed: namespace later does not exist: create it, or set \
             spec.maintenance.namespace to an existing namespace"
        );
        let forbidden = kube::Error::Api(Box::new(kube::core::Status {
            code: 403,
            reason: "Forbidden".into(),
            message: "maintenances.kopiur.home-operations.com \"shared\" is forbidden".into(),
            ..Default::default()
        }));
        let c = apply_failed("ops", "shared", &forbidden);
        assert_eq!(c.reason, "MaintenanceApplyFailed");
        assert!(c.message.ends_with("is forbidden (403 Forbidden)"), "{}", c.message);
    }

    #[test]
    fn cluster_repository_goes_to_its_maintenance_namespace_or_the_operator_namespace() {
        let mut f = facts(true, false);
        f.kind = RepositoryKind::ClusterRepository;
        f.namespace = None;
        assert_eq!(desired(&f, "ops").metadata.namespace.as_deref(), Some("ops"));
        f.common.maintenance.namespace = Some("maint".into());
        let d = desired(&f, "ops");
        assert_eq!(d.metadata.namespace.as_deref(), Some("maint"));
        assert_eq!(d.spec.ownership.unwrap().owner.as_deref(), Some("kopiur/clusterrepository/r"));
        assert_eq!(d.spec.repository.kind, RepositoryKind::ClusterRepository);
    }
}
