//! Catalog discovery (docs/design/repository-breaker.md §3.12): kopia snapshots in a repository that none of
//! the operator's Snapshot CRs owns appear as `origin: discovered` Snapshot rows.
//!
//! - `plan`: the pure decision (creates, deletes, repairs; placement; scan triggers);
//! - this module: the shell that reads the Snapshot CRs, applies a plan and writes the rows.
//!
//! Discovered rows are forced Retain (`deletion::observe::is_discovered`), carry no finalizer
//! and never spawn Jobs: deleting one, here or by hand, never touches kopia data.
pub mod plan;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Namespace;
use kopiur_api::Snapshot;
use kopiur_api::cluster_repository::AllowedNamespaces;
use kopiur_api::names::{label, origin};
use kopiur_api::shared::phase::SnapshotOrigin;
use kopiur_api::shared::status::{ResolvedIdentity, ResolvedRepository, Timing};
use kopiur_api::shared::{RepositoryKind, RepositoryRef};
use kopiur_api::snapshot::{
    KopiaSnapshotRef, SnapshotPhase, SnapshotResolved, SnapshotSpec, SnapshotStats, SnapshotStatus,
};
use kopiur_api::snapshot_policy::DeletionPolicy;
use kopiur_mover::result::CatalogEntry;
use kube::api::{DeleteParams, ListParams, PostParams, Preconditions};
use kube::{Api, Client, ResourceExt};

pub use plan::{Bounds, CatalogPlan, DeleteReason, ExistingSnapshot, ScanDue, ScanFacts, scan_due};

/// The default coalescing window of scan requests (one scan per 60 s).
pub const SCAN_SPACING_SECONDS: i64 = 60;
/// Test environments may shorten the coalescing window.
pub const SCAN_SPACING_ENV: &str = "KOPIUR_CATALOG_SCAN_SPACING_SECONDS";
/// Most kopia entries a listing Job reports (newest first).
pub const CATALOG_LIMIT: usize = 1000;
/// Test environments may lower the listing cap (never raise it) to exercise truncation.
pub const CATALOG_LIMIT_ENV: &str = "KOPIUR_CATALOG_LIMIT";
/// Test environments may shrink the verify window to exercise its rotation.
pub const VERIFY_WINDOW_ENV: &str = "KOPIUR_CATALOG_VERIFY_WINDOW";
/// On a Repository or ClusterRepository: the last kopia id the previous answered verify
/// window checked (the rotation cursor; bookkeeping only, safe to remove).
pub const VERIFY_CURSOR_ANNOTATION: &str = "kopiur.home-operations.com/catalog-verify-cursor";

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.trim().parse::<usize>().ok())
}

/// The listing cap a bootstrap work spec carries.
pub fn catalog_limit() -> usize {
    env_usize(CATALOG_LIMIT_ENV).map_or(CATALOG_LIMIT, |n| n.clamp(1, CATALOG_LIMIT))
}

/// How many discovered rows one scan asks the mover to verify.
pub fn verify_window_size() -> usize {
    env_usize(VERIFY_WINDOW_ENV).map_or(plan::VERIFY_WINDOW, |n| n.clamp(1, plan::VERIFY_WINDOW))
}

pub fn scan_spacing_seconds() -> i64 {
    std::env::var(SCAN_SPACING_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .unwrap_or(SCAN_SPACING_SECONDS)
        .max(1)
}

/// The repository a listing came from.
#[derive(Clone, Debug)]
pub struct RepoScope {
    pub kind: RepositoryKind,
    pub name: String,
    /// The Repository's namespace; None for a ClusterRepository.
    pub namespace: Option<String>,
    pub uid: String,
    /// `status.uniqueId`, pinned by the first bootstrap.
    pub unique_id: Option<String>,
    /// ClusterRepository only.
    pub fallback_namespace: Option<String>,
    /// ClusterRepository only.
    pub allowed: Option<AllowedNamespaces>,
    pub bounds: Bounds,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncOutcome {
    pub created: usize,
    pub deleted: usize,
    pub repaired: usize,
    /// Whether the listing could expire rows (not truncated, not empty).
    pub complete: bool,
    /// Discovered rows of this repository after the sync.
    pub discovered: usize,
    /// Identity hostnames whose entries had no namespace to go to (ClusterRepository).
    pub unplaced: BTreeSet<String>,
    /// Listed entries skipped only because their owner is being deleted.
    pub owned_by_deleting: usize,
    /// Rows expired because the mover's check found their id absent from a truncated listing.
    pub verified_absent: usize,
}

fn refers_here(scope: &RepoScope, r: &RepositoryRef, snapshot_ns: &str) -> bool {
    if r.kind != scope.kind || r.name != scope.name {
        return false;
    }
    match scope.kind {
        RepositoryKind::Repository => {
            r.namespace.as_deref().unwrap_or(snapshot_ns) == scope.namespace.as_deref().unwrap_or_default()
        }
        RepositoryKind::ClusterRepository => true,
    }
}

/// How the catalog sees one Snapshot CR.
pub fn existing(scope: &RepoScope, s: &Snapshot) -> ExistingSnapshot {
    let labels = s.labels();
    let ns = s.namespace().unwrap_or_default();
    let discovered_row = labels.get(label::ORIGIN).map(String::as_str) == Some(origin::DISCOVERED)
        && labels.get(label::REPOSITORY_UID) == Some(&scope.uid);
    let st = s.status.as_ref();
    let bound_here = discovered_row
        || match st.and_then(|x| x.resolved.as_ref()).and_then(|r| r.repository.as_ref()) {
            Some(r) => match r.uid.as_deref() {
                Some(uid) => uid == scope.uid,
                None => refers_here(
                    scope,
                    &RepositoryRef { name: r.name.clone(), kind: r.kind, namespace: r.namespace.clone() },
                    &ns,
                ),
            },
            None => s.spec.repository.as_ref().is_some_and(|r| refers_here(scope, r, &ns)),
        };
    let kopia_snapshot_id =
        st.and_then(|x| x.snapshot.as_ref()).and_then(|x| x.kopia_snapshot_id.clone()).filter(|i| !i.is_empty());
    ExistingSnapshot {
        namespace: ns,
        name: s.name_any(),
        uid: s.uid().unwrap_or_default(),
        discovered_row,
        label_snapshot_id: labels.get(label::SNAPSHOT_ID).cloned(),
        status_complete: kopia_snapshot_id.is_some()
            && matches!(st.and_then(|x| x.phase.as_ref()), Some(SnapshotPhase::Discovered)),
        kopia_snapshot_id,
        bound_here,
        deleting: s.metadata.deletion_timestamp.is_some(),
        end_time: st.and_then(|x| x.timing.as_ref()).and_then(|t| t.end_time),
    }
}

/// The `spec.repository` a discovered row pins.
pub fn repository_ref(scope: &RepoScope) -> RepositoryRef {
    RepositoryRef {
        name: scope.name.clone(),
        kind: scope.kind,
        namespace: match scope.kind {
            RepositoryKind::Repository => scope.namespace.clone(),
            RepositoryKind::ClusterRepository => None,
        },
    }
}

/// The status a discovered row carries.
pub fn row_status(scope: &RepoScope, e: &CatalogEntry) -> SnapshotStatus {
    let identity = ResolvedIdentity {
        username: e.username.clone(),
        hostname: e.hostname.clone(),
        source_path: Some(e.path.clone()),
    };
    SnapshotStatus {
        phase: Some(SnapshotPhase::Discovered),
        origin: Some(SnapshotOrigin::Discovered),
        snapshot: Some(KopiaSnapshotRef {
            kopia_snapshot_id: Some(e.id.clone()),
            identity: Some(identity.clone()),
            description: None,
        }),
        timing: Some(Timing {
            start_time: e.start_time,
            end_time: e.end_time,
            duration_seconds: match (e.start_time, e.end_time) {
                (Some(s), Some(t)) => Some((t - s).num_seconds().max(0)),
                (Some(_), None) | (None, _) => None,
            },
        }),
        stats: Some(SnapshotStats { size_bytes: Some(e.size), ..SnapshotStats::default() }),
        resolved: Some(SnapshotResolved {
            repository: Some(ResolvedRepository {
                kind: scope.kind,
                namespace: match scope.kind {
                    RepositoryKind::Repository => scope.namespace.clone(),
                    RepositoryKind::ClusterRepository => None,
                },
                name: scope.name.clone(),
                uid: Some(scope.uid.clone()),
            }),
            repository_unique_id: scope.unique_id.clone(),
            identity: Some(identity),
            deletion_policy: Some(DeletionPolicy::Retain),
            ..SnapshotResolved::default()
        }),
        ..SnapshotStatus::default()
    }
}

/// The status a discovered row is created with: [`row_status`], plus what the Snapshot
/// reconciler writes on its first pass over a discovered row (the kstatus trio of
/// `conditions::discovered_row` and `observedGeneration`). Written at creation, a
/// start over new rows has nothing left to write (at 50,000 new rows the controller otherwise
/// queued 40,000 status patches, and its resident set grew while they drained).
pub fn created_row_status(
    scope: &RepoScope,
    e: &CatalogEntry,
    generation: Option<i64>,
    now: chrono::DateTime<chrono::Utc>,
) -> SnapshotStatus {
    let mut st = row_status(scope, e);
    st.observed_generation = generation;
    st.conditions =
        crate::conditions::merge_conditions(&[], &crate::conditions::discovered_row(), generation.unwrap_or(0), now);
    st
}

/// A discovered row: origin, snapshot-id and repository-uid labels; Retain; the repository
/// pinned; no finalizer, no owner, no `onScheduleDelete`.
pub fn row(scope: &RepoScope, namespace: &str, e: &CatalogEntry) -> Snapshot {
    let labels = BTreeMap::from([
        (label::MANAGED_BY.to_string(), label::MANAGED_BY_VALUE.to_string()),
        (label::ORIGIN.to_string(), origin::DISCOVERED.to_string()),
        (label::SNAPSHOT_ID.to_string(), e.id.clone()),
        (label::REPOSITORY_UID.to_string(), scope.uid.clone()),
    ]);
    let mut s = Snapshot::new(
        &plan::row_name(&scope.name, &e.id),
        SnapshotSpec {
            repository: Some(repository_ref(scope)),
            deletion_policy: Some(DeletionPolicy::Retain),
            ..SnapshotSpec::default()
        },
    );
    s.metadata.namespace = Some(namespace.to_string());
    s.metadata.labels = Some(labels);
    s
}

async fn write_row_status(
    client: &Client,
    namespace: &str,
    name: &str,
    st: &SnapshotStatus,
) -> Result<(), kube::Error> {
    let api: Api<Snapshot> = Api::namespaced(client.clone(), namespace);
    // The whole status of a row just created (unguarded: nothing else writes it yet).
    let next = serde_json::to_value(st).unwrap_or_default();
    match crate::status::write_status_value(&api, name, None, &serde_json::Value::Null, &next).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Whether a ClusterRepository's row may go into `ns`: it exists, is not terminating and is
/// allowed.
async fn namespace_usable(client: &Client, allowed: Option<&AllowedNamespaces>, ns: &str) -> Result<bool, kube::Error> {
    if ns.is_empty() || ns.len() > 63 {
        return Ok(false);
    }
    let Some(n) = Api::<Namespace>::all(client.clone()).get_opt(ns).await? else { return Ok(false) };
    if n.metadata.deletion_timestamp.is_some() {
        return Ok(false);
    }
    Ok(match allowed {
        Some(a) => crate::gating::namespace_allowed(a, ns, n.metadata.labels.as_ref()),
        None => true,
    })
}

/// Objects per page when the catalog lists every Snapshot.
pub const LIST_PAGE: u32 = 500;

/// Every Snapshot in the cluster, reduced to what the catalog plan reads, one page of
/// [`LIST_PAGE`] at a time, so the full objects of a large cluster are never all in memory at
/// once. The pages form one consistent list (continue tokens); an expired token fails the
/// whole sync, and a failed listing never expires a row.
/// In the namespaced install mode, one such list per served namespace (`crate::scope`).
async fn list_existing(
    client: &Client,
    namespaces: &crate::scope::Namespaces,
    scope: &RepoScope,
) -> Result<Vec<ExistingSnapshot>, kube::Error> {
    let mut out = Vec::new();
    for api in crate::scope::apis::<Snapshot>(client, namespaces) {
        let mut lp = ListParams::default().limit(LIST_PAGE);
        loop {
            let page = api.list(&lp).await?;
            out.extend(page.items.iter().map(|s| existing(scope, s)));
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => lp = lp.continue_token(&token),
                None => break,
            }
        }
    }
    Ok(out)
}

/// The ids one scan asks the mover to verify: a window of this repository's discovered rows
/// (by their `repository-uid` label, in any namespace), after `cursor`.
pub async fn verify_ids(
    client: &Client,
    namespaces: &crate::scope::Namespaces,
    repository_uid: &str,
    cursor: Option<&str>,
) -> Result<Vec<String>, kube::Error> {
    if repository_uid.is_empty() {
        return Ok(Vec::new());
    }
    let selector = format!("{}={},{}={}", label::ORIGIN, origin::DISCOVERED, label::REPOSITORY_UID, repository_uid);
    let mut ids = Vec::new();
    for api in crate::scope::apis::<Snapshot>(client, namespaces) {
        let mut lp = ListParams::default().labels(&selector).limit(LIST_PAGE);
        loop {
            let page = api.list_metadata(&lp).await?;
            ids.extend(
                page.items
                    .iter()
                    .filter(|s| s.metadata.deletion_timestamp.is_none())
                    .filter_map(|s| s.metadata.labels.as_ref()?.get(label::SNAPSHOT_ID).cloned()),
            );
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => lp = lp.continue_token(&token),
                None => break,
            }
        }
    }
    Ok(plan::verify_window(&ids, cursor, verify_window_size()))
}

/// Applies one listing of a successful connect: creates, repairs and deletes discovered rows.
/// `verified_absent`: ids the mover checked against its full listing and did not find.
pub async fn sync(
    client: &Client,
    namespaces: &crate::scope::Namespaces,
    scope: &RepoScope,
    entries: &[CatalogEntry],
    truncated: bool,
    verified_absent: &BTreeSet<String>,
    now: plan::Time,
) -> Result<SyncOutcome, kube::Error> {
    let existing = list_existing(client, namespaces, scope).await?;
    let p = plan::plan_verified(entries, truncated, verified_absent, &existing, scope.bounds, now);
    let mut out = SyncOutcome {
        complete: p.complete,
        discovered: p.discovered_after,
        owned_by_deleting: p.owned_by_deleting,
        ..SyncOutcome::default()
    };

    delete_rows(client, &p.deletes, &mut out).await?;
    for (r, e) in &p.repairs {
        write_row_status(client, &r.namespace, &r.name, &row_status(scope, e)).await?;
        out.repaired += 1;
    }

    create_rows(client, scope, &p.creates, &mut out).await?;
    Ok(out)
}

/// Deletes the rows the plan drops (guarded by their uid; gone or changed already: skipped).
async fn delete_rows(client: &Client, deletes: &[plan::Delete], out: &mut SyncOutcome) -> Result<(), kube::Error> {
    for d in deletes {
        let api: Api<Snapshot> = Api::namespaced(client.clone(), &d.row.namespace);
        let dp = DeleteParams {
            preconditions: Some(Preconditions { uid: Some(d.row.uid.clone()), resource_version: None }),
            ..DeleteParams::default()
        };
        match api.delete(&d.row.name, &dp).await {
            Ok(_) => {
                out.deleted += 1;
                if d.reason == DeleteReason::VerifiedAbsent {
                    out.verified_absent += 1;
                }
                tracing::info!(snapshot = %d.row.name, namespace = %d.row.namespace, id = %d.row.snapshot_id,
                    reason = ?d.reason, "deleted a discovered Snapshot row (kopia data untouched)");
            }
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Creates the rows the plan adds, each in the namespace it is placed in, then writes its
/// status; a row no namespace takes is counted unplaced.
async fn create_rows(
    client: &Client,
    scope: &RepoScope,
    creates: &[CatalogEntry],
    out: &mut SyncOutcome,
) -> Result<(), kube::Error> {
    let mut usable: BTreeMap<String, bool> = BTreeMap::new();
    for e in creates {
        let hostname_ok = match scope.namespace {
            Some(_) => false,
            None => match usable.get(&e.hostname) {
                Some(v) => *v,
                None => {
                    let v = namespace_usable(client, scope.allowed.as_ref(), &e.hostname).await?;
                    usable.insert(e.hostname.clone(), v);
                    v
                }
            },
        };
        let Some(ns) =
            plan::place(scope.namespace.as_deref(), &e.hostname, hostname_ok, scope.fallback_namespace.as_deref())
        else {
            out.unplaced.insert(e.hostname.clone());
            out.discovered = out.discovered.saturating_sub(1);
            continue;
        };
        let obj = row(scope, &ns, e);
        let name = obj.name_any();
        let api: Api<Snapshot> = Api::namespaced(client.clone(), &ns);
        let generation = match api.create(&PostParams::default(), &obj).await {
            Ok(created) => {
                out.created += 1;
                tracing::info!(snapshot = %name, namespace = %ns, id = %e.id, "created a discovered Snapshot row");
                created.metadata.generation
            }
            // A namesake exists: ours (a lost race, repaired by the next scan) or someone else's.
            Err(kube::Error::Api(err)) if err.code == 409 => continue,
            // The fallback namespace does not exist.
            Err(kube::Error::Api(err)) if err.code == 404 => {
                out.unplaced.insert(e.hostname.clone());
                out.discovered = out.discovered.saturating_sub(1);
                continue;
            }
            Err(err) => return Err(err),
        };
        write_row_status(client, &ns, &name, &created_row_status(scope, e, generation, chrono::Utc::now())).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn scope() -> RepoScope {
        RepoScope {
            kind: RepositoryKind::Repository,
            name: "r".into(),
            namespace: Some("t".into()),
            uid: "repo-uid".into(),
            unique_id: Some("u".into()),
            fallback_namespace: None,
            allowed: None,
            bounds: Bounds::default(),
        }
    }

    fn snap(v: serde_json::Value) -> Snapshot {
        serde_json::from_value(v).unwrap()
    }

    fn entry() -> CatalogEntry {
        CatalogEntry {
            id: "0123456789abcdef0123456789abcdef".into(),
            username: "app".into(),
            hostname: "t".into(),
            path: "/data".into(),
            start_time: None,
            end_time: None,
            size: 7,
            files: 1,
            tags: Default::default(),
        }
    }

    #[test]
    fn a_written_row_reads_back_as_a_complete_discovered_row() {
        let s = scope();
        let mut obj = row(&s, "t", &entry());
        obj.metadata.uid = Some("x".into());
        obj.status = Some(row_status(&s, &entry()));
        let e = existing(&s, &obj);
        assert!(e.discovered_row && e.bound_here && e.status_complete);
        assert_eq!(e.kopia_snapshot_id.as_deref(), Some("0123456789abcdef0123456789abcdef"));
        assert_eq!(obj.metadata.name.as_deref(), Some("r-0123456789ab"));
        assert_eq!(obj.spec.deletion_policy, Some(DeletionPolicy::Retain));
        assert!(obj.spec.on_schedule_delete.is_none() && obj.metadata.finalizers.is_none());
        // Another repository's discovered row is neither ours nor an owner.
        let mut other = scope();
        other.uid = "other".into();
        let e = existing(&other, &obj);
        assert!(!e.discovered_row && !e.bound_here);
    }

    #[test]
    fn binding_by_pin_uid_then_by_reference() {
        let s = scope();
        let pinned = snap(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": "a", "namespace": "t", "uid": "a"},
            "spec": {},
            "status": {"snapshot": {"kopiaSnapshotID": "k1"},
                       "resolved": {"repository": {"kind": "Repository", "namespace": "t", "name": "r", "uid": "repo-uid"}}}
        }));
        let e = existing(&s, &pinned);
        assert!(e.bound_here && !e.discovered_row);
        assert_eq!(e.kopia_snapshot_id.as_deref(), Some("k1"));
        // A namesake repository recreated with a new uid is not this one.
        let stale = snap(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": "b", "namespace": "t"},
            "spec": {},
            "status": {"resolved": {"repository": {"kind": "Repository", "namespace": "t", "name": "r", "uid": "old"}}}
        }));
        assert!(!existing(&s, &stale).bound_here);
        // Before the pin: spec.repository, with the Snapshot's namespace as the default.
        let unpinned = snap(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": "c", "namespace": "t"},
            "spec": {"repository": {"name": "r"}}
        }));
        assert!(existing(&s, &unpinned).bound_here);
        let elsewhere = snap(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": "d", "namespace": "u"},
            "spec": {"repository": {"name": "r"}}
        }));
        assert!(!existing(&s, &elsewhere).bound_here);
    }

    #[test]
    fn a_cluster_repository_row_pins_no_namespace() {
        let s = RepoScope {
            kind: RepositoryKind::ClusterRepository,
            namespace: None,
            fallback_namespace: Some("fb".into()),
            ..scope()
        };
        let st = row_status(&s, &entry());
        let r = st.resolved.unwrap().repository.unwrap();
        assert_eq!(
            (r.kind, r.namespace, r.uid.as_deref()),
            (RepositoryKind::ClusterRepository, None, Some("repo-uid"))
        );
        assert_eq!(repository_ref(&s).namespace, None);
    }

    #[test]
    fn a_row_is_created_settled_so_the_snapshot_reconcile_has_nothing_to_write() {
        let created_at = chrono::DateTime::parse_from_rfc3339("2026-12-03T10:00:00Z").unwrap().to_utc();
        let st = created_row_status(&scope(), &entry(), Some(1), created_at);
        // What the catalog always wrote is all there.
        let plain = row_status(&scope(), &entry());
        assert_eq!(
            (&st.phase, &st.origin, &st.snapshot, &st.resolved),
            (&plain.phase, &plain.origin, &plain.snapshot, &plain.resolved)
        );
        assert_eq!(st.observed_generation, Some(1));
        let types: Vec<&str> = st.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["Ready", "Reconciling", "Stalled"]);
        assert!(st.conditions.iter().all(|c| c.observed_generation == Some(1) && c.reason == "SnapshotDiscovered"));
        // The reconcile's pass over the row an hour later (the plan's conditions merged into
        // the row's) leaves the conditions exactly as written: no status patch.
        let later = created_at + chrono::Duration::hours(1);
        let again = crate::conditions::merge_conditions(&st.conditions, &crate::conditions::discovered_row(), 1, later);
        assert_eq!(again, st.conditions);
    }
}
