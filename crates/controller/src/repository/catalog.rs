//! The repository's side of catalog discovery (docs/design/repository-breaker.md §3.12): which bootstrap Jobs
//! list snapshots, when a scan request or the periodic refresh launches a listing probe (P3),
//! and handing a folded listing to `crate::catalog`.
//!
//! Listings ride on the existing bootstrap/probe Job: strict S1/S2 connects list, and a due
//! scan turns an idle Ready reconcile into a probe that lists. The probe's connect verdict is
//! folded by the breaker like any periodic probe; only a successful connect whose uniqueId
//! matches the pin reaches the catalog, so a failed connect never expires a row.
use chrono::{DateTime, Duration, Utc};
use kopiur_api::names::{annotation, event};
use kopiur_api::repository::CatalogStatus;
use kopiur_api::shared::RepositoryKind;
use kopiur_mover::result::BootstrapOutcome;
use kube::ResourceExt;
use kube::runtime::events::{Event as KEvent, EventType as KEventType};

use super::observe::CatalogListing;
use crate::catalog::{self, Bounds, RepoScope, ScanDue, ScanFacts};
use crate::context::Context;
use crate::health::{ConnectKind, CreateGate, Decision, Launch, Phase, Plan, ProbeTrigger, RepoFacts, RepoKind};
use crate::repo_view::RepoObject;

/// What the apply step needs from the catalog.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CatalogStep {
    /// The `status.catalog` to write (None: leave it as stored).
    pub status: Option<CatalogStatus>,
    /// When the launched Job lists snapshots: the request token it honors (may be empty).
    pub list: Option<String>,
    /// `status.storageStats.snapshotCount` from a listing folded now (None: leave it).
    pub snapshot_count: Option<i64>,
    /// With `list`: the discovered rows' kopia ids the Job checks against its full listing
    /// (a rotating window), so a truncated listing still expires stale rows.
    pub verify: Vec<String>,
}

/// Pure: the snapshot count a listing reports, taken only from a successful connect to the
/// pinned repository (like the catalog rows). A mover that predates the count reports it
/// through an untruncated listing's length; a truncated one without it is unknown.
pub fn listed_snapshot_count(r: &kopiur_mover::result::BootstrapResult, pinned: Option<&str>) -> Option<i64> {
    let connected = match r.outcome {
        BootstrapOutcome::Connected | BootstrapOutcome::Created => r.unique_id_hex.as_deref(),
        BootstrapOutcome::Failed => None,
    };
    if connected.is_none() || connected != pinned {
        return None;
    }
    match (r.snapshot_count, r.snapshots_truncated) {
        (Some(n), _) => Some(n.min(i64::MAX as u64) as i64),
        (None, false) => Some(r.snapshots.len() as i64),
        (None, true) => None,
    }
}

pub fn scan_facts<K: RepoObject>(obj: &K, st: &CatalogStatus) -> ScanFacts {
    let c = obj.common().catalog.clone().unwrap_or_default();
    ScanFacts {
        requested: obj.annotations().get(annotation::CATALOG_SCAN_REQUESTED_AT).cloned(),
        honored: st.scan_request_honored.clone(),
        attempt_at: st.scan_request_attempt_at,
        last_refresh_at: st.last_refresh_at,
        periodic_seconds: c.periodic_refresh.then(|| (c.refresh_interval.as_secs() as i64).max(30)),
        spacing_seconds: catalog::scan_spacing_seconds(),
    }
}

pub fn scope<K: RepoObject>(obj: &K, unique_id: Option<String>) -> RepoScope {
    let c = obj.common().catalog.clone().unwrap_or_default();
    let retain = c.retain.clone().unwrap_or_default();
    RepoScope {
        kind: match K::KIND {
            RepoKind::Repository => RepositoryKind::Repository,
            RepoKind::ClusterRepository => RepositoryKind::ClusterRepository,
        },
        name: obj.name_any(),
        namespace: match K::KIND {
            RepoKind::Repository => obj.namespace(),
            RepoKind::ClusterRepository => None,
        },
        uid: obj.meta().uid.clone().unwrap_or_default(),
        unique_id,
        fallback_namespace: match K::KIND {
            RepoKind::Repository => None,
            RepoKind::ClusterRepository => c.fallback_namespace.clone(),
        },
        allowed: obj.allowed_namespaces().cloned(),
        bounds: Bounds {
            per_identity: retain.per_identity.map(|n| n.max(0) as u32),
            max_age_days: retain.max_age_days.map(|n| n.max(1) as u32),
        },
    }
}

/// A strict connect lists on the first bootstrap (S1) and on a spec change (S2).
fn strict_lists(facts: &RepoFacts) -> bool {
    let st = &facts.status;
    st.unique_id.is_none()
        || matches!(st.phase, None | Some(Phase::Pending | Phase::Initializing))
        || st.observed_generation != Some(facts.spec.generation)
}

/// A probe stamped but not yet visible as a Job (the breaker's launch grace).
fn probe_attempt_pending(facts: &RepoFacts, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let h = &facts.status.health;
    let a = h.probe_attempt_at?;
    if h.last_probe_at.is_some_and(|l| l >= a) {
        return None;
    }
    let until = a + Duration::seconds(facts.tuning.launch_grace_seconds);
    (now < until).then_some(until)
}

fn requeue_by(d: &mut Decision, now: DateTime<Utc>, at: DateTime<Utc>) {
    let after = (at - now).max(Duration::seconds(1));
    d.requeue_after = Some(match d.requeue_after {
        Some(r) => r.min(after),
        None => after.min(Duration::seconds(300)),
    });
}

/// Folds a listing (when a Job is folded now) and decides whether the next Job lists.
pub async fn step<K: RepoObject>(
    obj: &K,
    ctx: &Context,
    facts: &RepoFacts,
    d: &mut Decision,
    listing: Option<CatalogListing>,
    now: DateTime<Utc>,
) -> CatalogStep {
    let before = obj.status_common().and_then(|s| s.catalog.clone()).unwrap_or_default();
    let mut st = before.clone();

    // 1. A listing folded in this reconcile (the breaker folds the same Job now).
    let mut snapshot_count = None;
    if let Some(l) = listing
        && facts.job.as_ref().is_some_and(|j| j.uid == l.job_uid)
    {
        snapshot_count = listed_snapshot_count(&l.result, d.status.unique_id.as_deref());
        fold_listing(obj, ctx, d, &l, &mut st, now).await;
    }

    // 2. The next Job: does it list, or does a due scan launch one?
    let sf = scan_facts(obj, &st);
    let next = next_listing(facts, d, &sf, now);
    if next.stamp_attempt {
        st.scan_request_attempt_at = Some(now);
    }
    let list = next.list;
    let verify = match &list {
        Some(_) => {
            let cursor = obj.annotations().get(catalog::VERIFY_CURSOR_ANNOTATION).map(String::as_str);
            let uid = obj.meta().uid.clone().unwrap_or_default();
            match catalog::verify_ids(&ctx.client, &ctx.config.watch_namespaces, &uid, cursor).await {
                Ok(ids) => ids,
                // Listing the rows failed: this scan checks nothing (and so expires nothing
                // beyond what a complete listing would).
                Err(e) => {
                    tracing::warn!(repository = %obj.name_any(), error = %e, "listing discovered rows to verify failed");
                    Vec::new()
                }
            }
        }
        None => Vec::new(),
    };
    CatalogStep { status: (st != before).then_some(st), list, snapshot_count, verify }
}

/// Pure: the ids a folded listing proves absent. Only a successful connect to the pinned
/// repository with a non-empty listing counts (the caller checks the connect); the mover
/// answers only from a `snapshot list` that succeeded and was not empty.
pub fn verified_absent(r: &kopiur_mover::result::BootstrapResult) -> std::collections::BTreeSet<String> {
    match &r.verified {
        Some(v) if r.snapshot_count.is_some_and(|n| n > 0) && !r.snapshots.is_empty() => {
            v.absent.iter().filter(|i| !i.is_empty()).cloned().collect()
        }
        Some(_) | None => Default::default(),
    }
}

/// Whether the Job this decision launches lists, and whether that listing counts as a scan
/// attempt (a request or the periodic refresh) for the coalescing window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NextListing {
    /// Some: the launched Job lists, honoring this request token (may be empty).
    pub list: Option<String>,
    pub stamp_attempt: bool,
}

/// Pure: strict S1/S2 connects list; a due scan makes any launch list, and turns an idle Ready
/// repository into a listing probe (P3), never while an earlier probe is still on its way.
pub fn next_listing(facts: &RepoFacts, d: &mut Decision, sf: &ScanFacts, now: DateTime<Utc>) -> NextListing {
    let pending = catalog::plan::pending_request(sf);
    match &mut d.plan {
        Plan::Launch(l) => {
            let strict = matches!(l.kind, ConnectKind::Strict);
            let due_now = matches!(catalog::scan_due(sf, now), ScanDue::Now { .. });
            if due_now {
                NextListing { list: Some(pending.unwrap_or_default()), stamp_attempt: true }
            } else if strict && strict_lists(facts) {
                NextListing { list: Some(String::new()), stamp_attempt: false }
            } else {
                NextListing::default()
            }
        }
        Plan::Idle => {
            let eligible = matches!(d.status.phase, Some(Phase::Ready))
                && facts.job.is_none()
                && !facts.spec.suspended
                && facts.credential_version.is_some()
                && d.status.unique_id.is_some();
            if !eligible {
                return NextListing::default();
            }
            match (probe_attempt_pending(facts, now), catalog::scan_due(sf, now)) {
                (_, ScanDue::Never) => NextListing::default(),
                (Some(until), ScanDue::Now { .. } | ScanDue::At(_)) => {
                    requeue_by(d, now, until);
                    NextListing::default()
                }
                (None, ScanDue::At(at)) => {
                    requeue_by(d, now, at);
                    NextListing::default()
                }
                (None, ScanDue::Now { token }) => {
                    // P3: a probe that lists. It stamps its attempt before the Job exists, like
                    // every probe, so a restart cannot double it.
                    d.status.health.probe_attempt_at = Some(now);
                    d.plan = Plan::Launch(Launch {
                        kind: ConnectKind::Probe(ProbeTrigger::Periodic),
                        gate: CreateGate::DisabledBySpec { also_pinned: true },
                        deadline_seconds: crate::health::holdoff::bootstrap_deadline(
                            &d.status.health,
                            &facts.tuning,
                            facts.spec.configured_deadline_seconds,
                        ),
                        generation: facts.spec.generation,
                        credential_version: facts.credential_version.clone().unwrap_or_default(),
                        early: false,
                    });
                    NextListing { list: Some(token.unwrap_or_default()), stamp_attempt: true }
                }
            }
        }
        Plan::AwaitJob | Plan::DeleteJob { .. } => NextListing::default(),
    }
}

async fn fold_listing<K: RepoObject>(
    obj: &K,
    ctx: &Context,
    d: &Decision,
    l: &CatalogListing,
    st: &mut CatalogStatus,
    now: DateTime<Utc>,
) {
    let r = &l.result;
    let connected = match r.outcome {
        BootstrapOutcome::Connected | BootstrapOutcome::Created => r.unique_id_hex.clone(),
        BootstrapOutcome::Failed => None,
    };
    // Only a successful connect to the pinned repository reaches the catalog.
    if connected.is_none() || connected != d.status.unique_id {
        tracing::info!(repository = %obj.name_any(), "catalog listing skipped: the connect did not succeed");
        return;
    }
    let scope = scope(obj, d.status.unique_id.clone());
    let absent = verified_absent(r);
    match catalog::sync(
        &ctx.client,
        &ctx.config.watch_namespaces,
        &scope,
        &r.snapshots,
        r.snapshots_truncated,
        &absent,
        now,
    )
    .await
    {
        Ok(o) => {
            tracing::info!(
                repository = %obj.name_any(), entries = r.snapshots.len(), truncated = r.snapshots_truncated,
                complete = o.complete, created = o.created, deleted = o.deleted, repaired = o.repaired,
                discovered = o.discovered, verified = r.verified.as_ref().map_or(0, |v| v.checked),
                verified_absent = o.verified_absent, "catalog listing applied"
            );
            advance_verify_cursor(obj, ctx, r).await;
            st.last_refresh_at = Some(l.completed_at);
            st.discovered_backup_count = Some(o.discovered as i64);
            if !l.token.is_empty() {
                if catalog::plan::honors_request(&l.token, o.owned_by_deleting, now) {
                    st.scan_request_honored = Some(l.token.clone());
                } else {
                    tracing::info!(
                        repository = %obj.name_any(), held = o.owned_by_deleting,
                        "snapshots being deleted still own listed entries; the scan request stays pending"
                    );
                }
            }
            if !o.unplaced.is_empty() {
                let hosts: Vec<&str> = o.unplaced.iter().map(String::as_str).collect();
                let ev = KEvent {
                    type_: KEventType::Warning,
                    reason: event::DISCOVERED_SNAPSHOT_UNPLACED.into(),
                    note: Some(crate::text::truncate(
                        &format!(
                            "kopia snapshots of hostname(s) {} have no allowed, existing namespace and no catalog.fallbackNamespace; they were not materialized",
                            hosts.join(", ")
                        ),
                        1024,
                    )),
                    action: "CatalogScan".into(),
                    secondary: None,
                };
                if let Err(err) = ctx.recorder.publish(&ev, &obj.object_ref(&())).await {
                    tracing::warn!(%err, "publishing DiscoveredSnapshotUnplaced failed");
                }
            }
        }
        // The request stays pending and is retried after the coalescing window.
        Err(e) => tracing::warn!(repository = %obj.name_any(), error = %e, "applying the catalog listing failed"),
    }
}

/// Moves the rotation cursor to the last id the folded check covered, so the next scan checks
/// the next window. A lost write only repeats a window.
async fn advance_verify_cursor<K: RepoObject>(obj: &K, ctx: &Context, r: &kopiur_mover::result::BootstrapResult) {
    let Some(through) = r.verified.as_ref().and_then(|v| v.through.clone()) else { return };
    if obj.annotations().get(catalog::VERIFY_CURSOR_ANNOTATION) == Some(&through) {
        return;
    }
    let body = serde_json::json!({"metadata": {"annotations": {catalog::VERIFY_CURSOR_ANNOTATION: through}}});
    let api = K::api(ctx.client.clone(), obj);
    if let Err(e) =
        api.patch(&obj.name_any(), &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&body)).await
    {
        tracing::warn!(repository = %obj.name_any(), error = %e, "recording the catalog verify cursor failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::*;
    use chrono::TimeZone;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap() + Duration::seconds(s)
    }

    /// A pinned, Ready repository whose periodic probe is not due.
    fn ready() -> RepoFacts {
        RepoFacts {
            id: RepoIdentity {
                kind: RepoKind::Repository,
                namespace: Some("t".into()),
                name: "r".into(),
                target: "s3://b/p".into(),
            },
            spec: SpecFacts {
                generation: 1,
                probe: ProbeSettings::default(),
                create_enabled: true,
                read_only: false,
                suspended: false,
                configured_deadline_seconds: None,
            },
            credential_version: Some("1/".into()),
            reinit_ack: None,
            reverify_requested_at: None,
            status: RepoStatus {
                phase: Some(Phase::Ready),
                observed_generation: Some(1),
                unique_id: Some("u".into()),
                resolved_credential_version: Some("1/".into()),
                health: Health { last_probe_at: Some(t(0)), last_healthy_at: Some(t(0)), ..Health::default() },
                reach: Some(ReachState { reach: Reach::Reachable, message: String::new() }),
                bootstrapped: Some(Bootstrapped::Yes),
                ..RepoStatus::default()
            },
            job: None,
            warned_ack: None,
            tuning: Tuning::default(),
            endpoint: Default::default(),
        }
    }

    fn request(token: &str) -> ScanFacts {
        ScanFacts { requested: Some(token.into()), spacing_seconds: 60, ..ScanFacts::default() }
    }

    #[test]
    fn an_idle_ready_repository_launches_a_listing_probe_for_a_request() {
        let f = ready();
        let now = t(60);
        let mut d = crate::health::plan(&f, now);
        assert_eq!(d.plan, Plan::Idle);
        let n = next_listing(&f, &mut d, &request("r1"), now);
        assert_eq!(n, NextListing { list: Some("r1".into()), stamp_attempt: true });
        match &d.plan {
            Plan::Launch(l) => assert_eq!(l.kind, ConnectKind::Probe(ProbeTrigger::Periodic)),
            other => panic!("{other:?}"),
        }
        assert_eq!(d.status.health.probe_attempt_at, Some(now));
    }

    #[test]
    fn nothing_pending_launches_nothing() {
        let f = ready();
        let mut d = crate::health::plan(&f, t(60));
        let sf = ScanFacts { honored: Some("r1".into()), ..request("r1") };
        assert_eq!(next_listing(&f, &mut d, &sf, t(60)), NextListing::default());
        assert_eq!(d.plan, Plan::Idle);
    }

    #[test]
    fn a_probe_on_its_way_is_never_doubled() {
        let mut f = ready();
        f.status.health.probe_attempt_at = Some(t(50));
        let mut d = crate::health::plan(&f, t(60));
        assert_eq!(d.plan, Plan::Idle);
        assert_eq!(next_listing(&f, &mut d, &request("r1"), t(60)), NextListing::default());
        assert_eq!(d.plan, Plan::Idle);
        assert!(d.requeue_after.is_some_and(|r| r <= Duration::seconds(30)));
    }

    #[test]
    fn coalesced_requests_wait_for_the_window() {
        let f = ready();
        let mut d = crate::health::plan(&f, t(60));
        let sf = ScanFacts { attempt_at: Some(t(30)), ..request("r2") };
        assert_eq!(next_listing(&f, &mut d, &sf, t(60)), NextListing::default());
        assert_eq!(d.plan, Plan::Idle);
        assert_eq!(d.requeue_after, Some(Duration::seconds(30)));
    }

    #[test]
    fn suspended_degraded_or_busy_repositories_start_no_scan() {
        let mut f = ready();
        f.spec.suspended = true;
        let mut d = crate::health::plan(&f, t(60));
        assert_eq!(next_listing(&f, &mut d, &request("r1"), t(60)), NextListing::default());
        let mut f = ready();
        f.job = Some(JobFacts {
            uid: "j".into(),
            kind: ConnectKind::Probe(ProbeTrigger::Periodic),
            generation: Some(1),
            credential_version: Some("1/".into()),
            via_reinit_ack: false,
            launched_at: None,
            early: false,
            connect_seconds: None,
            state: JobState::Running,
        });
        let mut d = crate::health::plan(&f, t(60));
        assert_eq!(d.plan, Plan::AwaitJob);
        assert_eq!(next_listing(&f, &mut d, &request("r1"), t(60)), NextListing::default());
    }

    #[test]
    fn snapshot_count_comes_only_from_a_connect_to_the_pinned_repository() {
        use kopiur_mover::result::BootstrapResult;
        let r = |outcome: BootstrapOutcome, id: Option<&str>, count: Option<u64>, listed: usize, truncated: bool| {
            let entry = kopiur_mover::result::CatalogEntry {
                id: "k1".into(),
                username: "u".into(),
                hostname: "h".into(),
                path: "/p".into(),
                start_time: None,
                end_time: None,
                size: 1,
                files: 1,
                tags: Default::default(),
            };
            BootstrapResult {
                job_uid: "j".into(),
                outcome,
                unique_id_hex: id.map(str::to_string),
                failure: None,
                create_blocked: None,
                index_blob_count: None,
                connect_seconds: None,
                snapshots: vec![entry; listed],
                snapshots_truncated: truncated,
                snapshot_count: count,
                maintenance_owner: None,
                verified: None,
            }
        };
        let pinned = Some("abc");
        assert_eq!(
            listed_snapshot_count(&r(BootstrapOutcome::Connected, pinned, Some(1500), 1000, true), pinned),
            Some(1500)
        );
        assert_eq!(listed_snapshot_count(&r(BootstrapOutcome::Created, pinned, Some(0), 0, false), pinned), Some(0));
        assert_eq!(listed_snapshot_count(&r(BootstrapOutcome::Connected, pinned, None, 3, false), pinned), Some(3));
        assert_eq!(listed_snapshot_count(&r(BootstrapOutcome::Connected, pinned, None, 3, true), pinned), None);
        // Another repository behind the same address, or a failed connect: nothing.
        assert_eq!(
            listed_snapshot_count(&r(BootstrapOutcome::Connected, Some("zzz"), Some(4), 4, false), pinned),
            None
        );
        assert_eq!(listed_snapshot_count(&r(BootstrapOutcome::Failed, pinned, Some(4), 4, false), pinned), None);
        assert_eq!(listed_snapshot_count(&r(BootstrapOutcome::Connected, pinned, Some(4), 4, false), None), None);
    }

    #[test]
    fn only_an_answer_from_a_non_empty_listing_proves_absence() {
        use kopiur_mover::result::{BootstrapResult, VerifyAnswer};
        let entry = kopiur_mover::result::CatalogEntry {
            id: "k1".into(),
            username: "u".into(),
            hostname: "h".into(),
            path: "/p".into(),
            start_time: None,
            end_time: None,
            size: 1,
            files: 1,
            tags: Default::default(),
        };
        let answer = VerifyAnswer { checked: 2, through: Some("k9".into()), absent: vec!["k9".into(), String::new()] };
        let r = |listed: usize, count: Option<u64>, verified: Option<VerifyAnswer>| BootstrapResult {
            job_uid: "j".into(),
            outcome: BootstrapOutcome::Connected,
            unique_id_hex: Some("u".into()),
            failure: None,
            create_blocked: None,
            index_blob_count: None,
            connect_seconds: None,
            snapshots: vec![entry.clone(); listed],
            snapshots_truncated: true,
            snapshot_count: count,
            maintenance_owner: None,
            verified,
        };
        let got = verified_absent(&r(1, Some(1500), Some(answer.clone())));
        assert_eq!(got.into_iter().collect::<Vec<_>>(), vec!["k9".to_string()]);
        // No answer (a failed `snapshot list`, an older mover), or an empty listing: nothing.
        assert!(verified_absent(&r(1, Some(1500), None)).is_empty());
        assert!(verified_absent(&r(0, Some(0), Some(answer.clone()))).is_empty());
        assert!(verified_absent(&r(0, None, Some(answer))).is_empty());
    }

    #[test]
    fn first_bootstrap_and_spec_changes_list_other_strict_connects_do_not() {
        let mut f = ready();
        f.status = RepoStatus::default();
        let mut d = crate::health::plan(&f, t(0));
        assert!(matches!(&d.plan, Plan::Launch(l) if l.kind == ConnectKind::Strict));
        let none = ScanFacts { spacing_seconds: 60, ..ScanFacts::default() };
        assert_eq!(
            next_listing(&f, &mut d, &none, t(0)),
            NextListing { list: Some(String::new()), stamp_attempt: false }
        );

        let mut f = ready();
        f.spec.generation = 2;
        let mut d = crate::health::plan(&f, t(60));
        assert!(matches!(&d.plan, Plan::Launch(l) if l.kind == ConnectKind::Strict));
        assert_eq!(next_listing(&f, &mut d, &none, t(60)).list, Some(String::new()));

        // A credential rotation (S3) reconnects strictly without listing.
        let mut f = ready();
        f.credential_version = Some("2/".into());
        let mut d = crate::health::plan(&f, t(60));
        assert!(matches!(&d.plan, Plan::Launch(l) if l.kind == ConnectKind::Strict));
        assert_eq!(next_listing(&f, &mut d, &none, t(60)), NextListing::default());
        // ... unless a scan is due, which any launch then carries.
        assert_eq!(
            next_listing(&f, &mut d, &request("r1"), t(60)),
            NextListing { list: Some("r1".into()), stamp_attempt: true }
        );
    }
}
