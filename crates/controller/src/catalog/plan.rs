//! The pure catalog decision: given one listing, the Snapshot CRs that exist and the bounds,
//! which discovered rows to create, which to delete (CRs only, never data) and which to repair.
//!
//! The one safety rule: a row is expired for absence only by a listing that is complete, i.e.
//! the connect succeeded, the listing is not truncated and it is not empty. An empty listing is
//! indistinguishable from a failed `snapshot list`, a wrong prefix or a glitch; a failed connect
//! never reaches this code at all.
//!
//! A truncated listing (more snapshots than the catalog cap) still makes progress: each scan
//! asks the mover to check a bounded window of the discovered rows' ids against its full
//! `snapshot list` ([`verify_window`]), and the ids the mover reports absent (only ever from a
//! successful, non-empty listing) expire their rows ([`DeleteReason::VerifiedAbsent`]). The
//! window rotates through every row, so a stale row goes within `ceil(rows / window)` scans.
use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, Utc};
use kopiur_mover::result::CatalogEntry;

pub type Time = DateTime<Utc>;

/// The kopia tag a backup Job stamps with its Snapshot's uid.
pub const TAG_SNAPSHOT_UID: &str = "kopiur-uid";

/// A Snapshot CR as the catalog sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExistingSnapshot {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// Labelled `origin=discovered` and `repository-uid=<this repository's uid>`.
    pub discovered_row: bool,
    /// The `snapshot-id` label (discovered rows).
    pub label_snapshot_id: Option<String>,
    /// `status.snapshot.kopiaSnapshotID`.
    pub kopia_snapshot_id: Option<String>,
    /// Pinned (or, before the pin, referring) to this repository.
    pub bound_here: bool,
    /// `deletionTimestamp` set.
    pub deleting: bool,
    /// `status.phase == Discovered` and the id recorded: a fully written discovered row.
    pub status_complete: bool,
    /// `status.timing.endTime` (discovered rows carry the kopia end time).
    pub end_time: Option<Time>,
}

impl ExistingSnapshot {
    /// The kopia snapshot id this CR stands for.
    fn id(&self) -> Option<&str> {
        self.kopia_snapshot_id.as_deref().or(self.label_snapshot_id.as_deref()).filter(|s| !s.is_empty())
    }
}

/// `spec.catalog.retain`, resolved (None = unbounded).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bounds {
    pub per_identity: Option<u32>,
    pub max_age_days: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub snapshot_id: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteReason {
    /// Missing from a complete listing.
    Absent,
    /// Not in a truncated listing, and reported absent by the mover's check of this id against
    /// the full (successful, non-empty) listing.
    VerifiedAbsent,
    /// Outside `catalog.retain`.
    OutOfBounds,
    /// One of the operator's own Snapshots owns the id (it was listed before its owner
    /// recorded it): the kopia snapshot is never represented twice.
    OwnedElsewhere,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Delete {
    pub row: RowRef,
    pub reason: DeleteReason,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct CatalogPlan {
    /// Entries to materialize as discovered rows (placement is the caller's).
    pub creates: Vec<CatalogEntry>,
    pub deletes: Vec<Delete>,
    /// Rows whose status was never fully written (a create whose status write was lost).
    pub repairs: Vec<(RowRef, CatalogEntry)>,
    /// Whether this listing was allowed to expire rows.
    pub complete: bool,
    /// Discovered rows of this repository after the plan is applied.
    pub discovered_after: usize,
    /// Listed entries skipped only because their owner is being deleted: once it is gone (a
    /// Retain release), the kopia snapshot should be discovered by a follow-up scan.
    pub owned_by_deleting: usize,
}

/// Complete: not truncated and not empty (the caller only hands over listings of a
/// successful connect).
pub fn is_complete(entries: &[CatalogEntry], truncated: bool) -> bool {
    !truncated && !entries.is_empty()
}

fn entry_time(e: &CatalogEntry) -> Option<Time> {
    e.end_time.or(e.start_time)
}

/// Entries newest first (ties by id), the order bounds are applied in.
fn newest_first(entries: &[CatalogEntry]) -> Vec<&CatalogEntry> {
    let mut v: Vec<&CatalogEntry> = entries.iter().collect();
    v.sort_by(|a, b| entry_time(b).cmp(&entry_time(a)).then_with(|| a.id.cmp(&b.id)));
    v
}

pub fn plan(
    entries: &[CatalogEntry],
    truncated: bool,
    existing: &[ExistingSnapshot],
    bounds: Bounds,
    now: Time,
) -> CatalogPlan {
    plan_verified(entries, truncated, &BTreeSet::new(), existing, bounds, now)
}

/// [`plan`], plus the ids the mover checked against its full listing and found absent. They
/// expire discovered rows only under the absence rules: the listing is non-empty (an empty one
/// proves nothing), the id is not in the listing (a listed id is never expired), the row is
/// discovered and no owned Snapshot records the id (owned rows are never touched).
pub fn plan_verified(
    entries: &[CatalogEntry],
    truncated: bool,
    verified_absent: &BTreeSet<String>,
    existing: &[ExistingSnapshot],
    bounds: Bounds,
    now: Time,
) -> CatalogPlan {
    let complete = is_complete(entries, truncated);
    let cutoff = bounds.max_age_days.map(|d| now - Duration::days(i64::from(d)));
    let too_old = |t: Option<Time>| match (cutoff, t) {
        (Some(c), Some(t)) => t < c,
        (Some(_), None) | (None, _) => false,
    };
    let owned = Owned::of(existing);
    let wanted = wanted(entries, &owned, bounds, too_old);
    let listed: BTreeSet<&str> = entries.iter().map(|e| e.id.as_str()).collect();
    let owned_by_deleting = entries.iter().filter(|e| owned.only_by_deleting(e)).count();
    let mut out = CatalogPlan { complete, owned_by_deleting, ..CatalogPlan::default() };
    let rows: Vec<&ExistingSnapshot> = existing.iter().filter(|s| s.discovered_row).collect();
    let mut have: BTreeSet<&str> = BTreeSet::new();
    let mut kept = 0usize;
    for r in &rows {
        let Some(id) = r.id() else { continue };
        have.insert(id);
        if r.deleting {
            continue;
        }
        let row = RowRef {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            uid: r.uid.clone(),
            snapshot_id: id.to_string(),
        };
        let reason = if owned.ids.contains(id) {
            Some(DeleteReason::OwnedElsewhere)
        } else if listed.contains(id) {
            // Listed: kept unless the bounds exclude it (owned-by-tag entries are kept: the tag
            // alone is not a recorded owner).
            match wanted.get(id) {
                Some(_) => None,
                None if entries.iter().any(|e| e.id == id && owned.owns(e)) => None,
                None => Some(DeleteReason::OutOfBounds),
            }
        } else if too_old(r.end_time) {
            Some(DeleteReason::OutOfBounds)
        } else if complete {
            Some(DeleteReason::Absent)
        } else if !entries.is_empty() && verified_absent.contains(id) {
            Some(DeleteReason::VerifiedAbsent)
        } else {
            None
        };
        match reason {
            Some(reason) => out.deletes.push(Delete { row, reason }),
            None => {
                kept += 1;
                if !r.status_complete
                    && let Some(e) = entries.iter().find(|e| e.id == id)
                {
                    out.repairs.push((row, e.clone()));
                }
            }
        }
    }
    for (id, e) in &wanted {
        if !have.contains(id) {
            out.creates.push((*e).clone());
        }
    }
    out.discovered_after = kept + out.creates.len();
    out
}

/// What the operator's own (non-discovered) Snapshots bound here claim: the kopia ids they
/// record and their uids (a backup Job tags its kopia snapshot with it), of every one in any
/// phase and of the live ones (not being deleted).
struct Owned<'a> {
    ids: BTreeSet<&'a str>,
    uids: BTreeSet<&'a str>,
    live_ids: BTreeSet<&'a str>,
    live_uids: BTreeSet<&'a str>,
}

impl<'a> Owned<'a> {
    fn of(existing: &'a [ExistingSnapshot]) -> Self {
        let own =
            |live: bool| existing.iter().filter(move |s| s.bound_here && !s.discovered_row && !(live && s.deleting));
        let ids = |live| own(live).filter_map(|s| s.kopia_snapshot_id.as_deref()).collect();
        let uids = |live| own(live).map(|s| s.uid.as_str()).filter(|u| !u.is_empty()).collect();
        Owned { ids: ids(false), uids: uids(false), live_ids: ids(true), live_uids: uids(true) }
    }

    /// Owned: recorded by one of the operator's own Snapshots, in any phase, including ones
    /// being deleted; or tagged by one's backup Job.
    fn owns(&self, e: &CatalogEntry) -> bool {
        self.ids.contains(e.id.as_str()) || e.tags.get(TAG_SNAPSHOT_UID).is_some_and(|u| self.uids.contains(u.as_str()))
    }

    /// Owned, and by no live Snapshot: only by ones being deleted.
    fn only_by_deleting(&self, e: &CatalogEntry) -> bool {
        self.owns(e)
            && !self.live_ids.contains(e.id.as_str())
            && !e.tags.get(TAG_SNAPSHOT_UID).is_some_and(|u| self.live_uids.contains(u.as_str()))
    }
}

/// The entries that should be rows, by id: unowned, young enough, and the newest N per identity.
fn wanted<'a>(
    entries: &'a [CatalogEntry],
    owned: &Owned,
    bounds: Bounds,
    too_old: impl Fn(Option<Time>) -> bool,
) -> BTreeMap<&'a str, &'a CatalogEntry> {
    let mut wanted: BTreeMap<&str, &CatalogEntry> = BTreeMap::new();
    let mut per_identity: BTreeMap<(&str, &str), u32> = BTreeMap::new();
    for e in newest_first(entries) {
        if e.id.is_empty() || owned.owns(e) || too_old(entry_time(e)) {
            continue;
        }
        let n = per_identity.entry((e.username.as_str(), e.hostname.as_str())).or_insert(0);
        if bounds.per_identity.is_some_and(|max| *n >= max) {
            continue;
        }
        *n += 1;
        wanted.insert(e.id.as_str(), e);
    }
    wanted
}

/// Most ids one scan asks the mover to verify (the work spec carries them; 1000 ids of 32-64
/// characters stay well under its 102 400-byte cap).
pub const VERIFY_WINDOW: usize = kopiur_mover::workspec::MAX_VERIFY_SNAPSHOT_IDS;
/// Longest id sent for verification (kopia ids are 32-33 characters; a label holds 63).
pub const MAX_VERIFY_ID_LEN: usize = 64;
/// The most JSON bytes the ids of one window take in the work spec (under half its cap).
pub const VERIFY_BUDGET_BYTES: usize = 48 * 1024;

/// The ids one scan asks the mover to verify: the discovered rows' distinct ids in id order,
/// starting after `cursor` (the last id the previous answered scan checked) and wrapping
/// around, at most `window` of them and [`VERIFY_BUDGET_BYTES`] of JSON. Successive scans that each advance the cursor to the
/// answer's last id cover every row within `ceil(rows / window)` scans.
pub fn verify_window(ids: &[String], cursor: Option<&str>, window: usize) -> Vec<String> {
    let sorted: Vec<&str> = ids
        .iter()
        .map(String::as_str)
        .filter(|i| !i.is_empty() && i.len() <= MAX_VERIFY_ID_LEN)
        .collect::<BTreeSet<&str>>()
        .into_iter()
        .collect();
    if sorted.is_empty() || window == 0 {
        return Vec::new();
    }
    let start = cursor.map_or(0, |c| sorted.partition_point(|i| *i <= c) % sorted.len());
    let mut bytes = 2usize;
    let mut out = Vec::new();
    for id in sorted.iter().cycle().skip(start).take(window.min(sorted.len())) {
        bytes += id.len() + 3;
        if bytes > VERIFY_BUDGET_BYTES {
            break;
        }
        out.push((*id).to_string());
    }
    out
}

/// Where a discovered row goes: a Repository's rows live in its namespace; a ClusterRepository's
/// in the namespace named by the identity hostname when it exists and is allowed, else in
/// `catalog.fallbackNamespace`, else nowhere (the caller warns `DiscoveredSnapshotUnplaced`).
pub fn place(
    repository_namespace: Option<&str>,
    hostname: &str,
    hostname_namespace_usable: bool,
    fallback: Option<&str>,
) -> Option<String> {
    if let Some(ns) = repository_namespace {
        return Some(ns.to_string());
    }
    if hostname_namespace_usable {
        return Some(hostname.to_string());
    }
    fallback.map(str::to_string)
}

/// `<repository>-<first 12 characters of the kopia id>`, hashed to fit a label-safe name.
pub fn row_name(repository: &str, snapshot_id: &str) -> String {
    let short: String =
        snapshot_id.chars().map(|c| c.to_ascii_lowercase()).filter(|c| c.is_ascii_alphanumeric()).take(12).collect();
    kopiur_mover::job::job_name(&format!("{repository}-{short}"))
}

/// How long a scan request stays pending while entries it should rediscover are still held by
/// Snapshots being deleted (a schedule cascade releases its children over a few seconds).
pub const FOLLOW_UP_WINDOW_SECONDS: i64 = 300;

/// Whether a listing honors its request token. It does not while entries are held only by
/// Snapshots being deleted and the request (an RFC 3339 time by convention) is younger than
/// [`FOLLOW_UP_WINDOW_SECONDS`]: the request then stays pending and is retried after the
/// coalescing window, so a Retain release finishing after the listing is still rediscovered.
pub fn honors_request(token: &str, owned_by_deleting: usize, now: Time) -> bool {
    if owned_by_deleting == 0 {
        return true;
    }
    match DateTime::parse_from_rfc3339(token.trim()) {
        Ok(t) => now - t.with_timezone(&Utc) >= Duration::seconds(FOLLOW_UP_WINDOW_SECONDS),
        Err(_) => true,
    }
}

/// When the next catalog scan is due.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScanDue {
    /// Launch a listing now; `token` is the request it honors, if any.
    Now {
        token: Option<String>,
    },
    /// Look again at this time.
    At(Time),
    Never,
}

/// The facts the scan triggers read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScanFacts {
    /// The `catalog-scan-requested-at` annotation.
    pub requested: Option<String>,
    /// `status.catalog.scanRequestHonored`.
    pub honored: Option<String>,
    /// `status.catalog.scanRequestAttemptAt`: the last listing launched for a request or refresh.
    pub attempt_at: Option<Time>,
    /// `status.catalog.lastRefreshAt`: the last listing folded.
    pub last_refresh_at: Option<Time>,
    /// `catalog.refreshInterval` when `catalog.periodicRefresh` is on.
    pub periodic_seconds: Option<i64>,
    /// The coalescing window (60 s).
    pub spacing_seconds: i64,
}

/// The pending scan request token: set and different from the honored one.
pub fn pending_request(f: &ScanFacts) -> Option<String> {
    f.requested.as_ref().filter(|r| !r.trim().is_empty() && f.honored.as_ref() != Some(*r)).cloned()
}

pub fn scan_due(f: &ScanFacts, now: Time) -> ScanDue {
    let mut at: Option<Time> = None;
    let pending = pending_request(f);
    if pending.is_some() {
        at = Some(f.attempt_at.map_or(now, |a| a + Duration::seconds(f.spacing_seconds)));
    }
    if let Some(interval) = f.periodic_seconds {
        let base = match (f.last_refresh_at, f.attempt_at) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (Some(a), None) | (None, Some(a)) => Some(a),
            (None, None) => None,
        };
        let due = base.map_or(now, |b| b + Duration::seconds(interval.max(30)));
        at = Some(at.map_or(due, |x| x.min(due)));
    }
    match at {
        None => ScanDue::Never,
        Some(t) if t <= now => ScanDue::Now { token: pending },
        Some(t) => ScanDue::At(t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(min: i64) -> Time {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap() + Duration::minutes(min)
    }

    fn entry(id: &str, host: &str, end_min: i64) -> CatalogEntry {
        CatalogEntry {
            id: id.into(),
            username: "app".into(),
            hostname: host.into(),
            path: "/data".into(),
            start_time: Some(t(end_min - 1)),
            end_time: Some(t(end_min)),
            size: 10,
            files: 1,
            tags: BTreeMap::new(),
        }
    }

    fn row(id: &str) -> ExistingSnapshot {
        ExistingSnapshot {
            namespace: "ns".into(),
            name: format!("r-{id}"),
            uid: format!("uid-{id}"),
            discovered_row: true,
            label_snapshot_id: Some(id.into()),
            kopia_snapshot_id: Some(id.into()),
            bound_here: true,
            deleting: false,
            status_complete: true,
            end_time: Some(t(0)),
        }
    }

    fn own(id: &str) -> ExistingSnapshot {
        ExistingSnapshot {
            discovered_row: false,
            label_snapshot_id: None,
            name: format!("own-{id}"),
            uid: format!("own-uid-{id}"),
            ..row(id)
        }
    }

    fn ids(p: &CatalogPlan) -> (Vec<String>, Vec<(String, DeleteReason)>) {
        (
            p.creates.iter().map(|e| e.id.clone()).collect(),
            p.deletes.iter().map(|d| (d.row.snapshot_id.clone(), d.reason)).collect(),
        )
    }

    #[test]
    fn unowned_entries_become_rows_and_owned_ones_never_do() {
        let entries = vec![entry("a", "h", 1), entry("b", "h", 2), entry("c", "h", 3)];
        let existing = vec![own("b"), row("c")];
        let p = plan(&entries, false, &existing, Bounds::default(), t(10));
        assert_eq!(ids(&p), (vec!["a".to_string()], vec![]));
        assert!(p.complete);
        assert_eq!(p.discovered_after, 2);
    }

    #[test]
    fn an_owner_in_any_phase_counts_even_while_deleting() {
        let entries = vec![entry("a", "h", 1)];
        let existing = vec![ExistingSnapshot { deleting: true, ..own("a") }];
        let p = plan(&entries, false, &existing, Bounds::default(), t(10));
        assert!(p.creates.is_empty());
    }

    #[test]
    fn entries_held_only_by_deleting_owners_are_counted_for_a_follow_up() {
        let entries = vec![entry("a", "h", 1), entry("b", "h", 2)];
        let existing = vec![ExistingSnapshot { deleting: true, ..own("a") }, own("b")];
        let p = plan(&entries, false, &existing, Bounds::default(), t(10));
        assert_eq!(p.owned_by_deleting, 1);
        let p = plan(&entries, false, &[own("a"), own("b")], Bounds::default(), t(10));
        assert_eq!(p.owned_by_deleting, 0);
    }

    #[test]
    fn an_owner_bound_to_another_repository_does_not_count() {
        let entries = vec![entry("a", "h", 1)];
        let existing = vec![ExistingSnapshot { bound_here: false, ..own("a") }];
        let p = plan(&entries, false, &existing, Bounds::default(), t(10));
        assert_eq!(ids(&p).0, vec!["a".to_string()]);
    }

    #[test]
    fn the_backup_tag_of_a_live_snapshot_counts_as_owned() {
        let mut e = entry("a", "h", 1);
        let mut o = own("zzz");
        o.kopia_snapshot_id = None; // still Running: the id is not recorded yet
        e.tags.insert(TAG_SNAPSHOT_UID.into(), o.uid.clone());
        let p = plan(&[e], false, &[o], Bounds::default(), t(10));
        assert!(p.creates.is_empty(), "{p:?}");
    }

    #[test]
    fn a_row_whose_id_gained_an_owner_is_dropped() {
        let entries = vec![entry("a", "h", 1)];
        let p = plan(&entries, false, &[row("a"), own("a")], Bounds::default(), t(10));
        assert_eq!(ids(&p).1, vec![("a".to_string(), DeleteReason::OwnedElsewhere)]);
        assert_eq!(p.discovered_after, 0);
    }

    #[test]
    fn absence_from_a_complete_listing_expires_a_row() {
        let entries = vec![entry("b", "h", 2)];
        let p = plan(&entries, false, &[row("a"), row("b")], Bounds::default(), t(10));
        assert_eq!(ids(&p).1, vec![("a".to_string(), DeleteReason::Absent)]);
        assert_eq!(p.discovered_after, 1);
    }

    #[test]
    fn never_shrink_on_a_truncated_listing() {
        let entries = vec![entry("b", "h", 2)];
        let p = plan(&entries, true, &[row("a"), row("b")], Bounds::default(), t(10));
        assert!(!p.complete);
        assert!(p.deletes.is_empty(), "{p:?}");
        assert_eq!(p.discovered_after, 2);
    }

    fn set(ids: &[&str]) -> BTreeSet<String> {
        ids.iter().map(|i| i.to_string()).collect()
    }

    #[test]
    fn a_truncated_listing_expires_exactly_the_rows_verified_absent() {
        // The listing holds only the newest entry; "a" and "c" are older and not listed.
        let entries = vec![entry("b", "h", 2)];
        let existing = vec![row("a"), row("b"), row("c"), own("o")];
        let p = plan_verified(&entries, true, &set(&["a"]), &existing, Bounds::default(), t(10));
        assert!(!p.complete);
        assert_eq!(ids(&p).1, vec![("a".to_string(), DeleteReason::VerifiedAbsent)]);
        assert_eq!(p.discovered_after, 2, "c was not checked: it stays");
    }

    #[test]
    fn an_id_present_in_the_listing_is_never_expired_by_the_check() {
        let entries = vec![entry("b", "h", 2)];
        let p = plan_verified(&entries, true, &set(&["b"]), &[row("b")], Bounds::default(), t(10));
        assert!(p.deletes.is_empty(), "{p:?}");
    }

    #[test]
    fn the_check_never_expires_owned_snapshots_or_rows_of_an_owned_id() {
        let entries = vec![entry("b", "h", 2)];
        // An owned Snapshot is never a catalog row, whatever the check says.
        let p = plan_verified(&entries, true, &set(&["o"]), &[own("o")], Bounds::default(), t(10));
        assert!(p.deletes.is_empty(), "{p:?}");
        // A discovered row whose id an owned Snapshot records goes as OwnedElsewhere, as today.
        let p = plan_verified(&entries, true, &set(&["o"]), &[row("o"), own("o")], Bounds::default(), t(10));
        assert_eq!(ids(&p).1, vec![("o".to_string(), DeleteReason::OwnedElsewhere)]);
    }

    #[test]
    fn a_failed_or_empty_listing_expires_nothing_even_with_an_absent_set() {
        let existing: Vec<ExistingSnapshot> = (0..5).map(|i| row(&format!("id{i}"))).collect();
        let absent = set(&["id0", "id1", "id2", "id3", "id4"]);
        for truncated in [false, true] {
            let p = plan_verified(&[], truncated, &absent, &existing, Bounds::default(), t(10));
            assert!(p.deletes.is_empty(), "{p:?}");
            assert_eq!(p.discovered_after, 5);
        }
        // A truncated listing with no answer (the check failed or was not asked) keeps every row.
        let p = plan_verified(&[entry("id0", "h", 1)], true, &BTreeSet::new(), &existing, Bounds::default(), t(10));
        assert!(p.deletes.is_empty());
    }

    #[test]
    fn a_complete_listing_still_expires_by_absence_alone() {
        let p = plan_verified(
            &[entry("b", "h", 2)],
            false,
            &BTreeSet::new(),
            &[row("a"), row("b")],
            Bounds::default(),
            t(10),
        );
        assert_eq!(ids(&p).1, vec![("a".to_string(), DeleteReason::Absent)]);
    }

    #[test]
    fn the_verify_window_rotates_through_every_row_within_ceil_rows_over_window_scans() {
        for (rows, window) in [(1usize, 1usize), (5, 2), (10, 3), (10, 10), (7, 50), (2500, 1000)] {
            let ids: Vec<String> = (0..rows).rev().map(|i| format!("{i:032x}")).collect();
            let scans = rows.div_ceil(window);
            let mut cursor: Option<String> = None;
            let mut seen = BTreeSet::new();
            for _ in 0..scans {
                let w = verify_window(&ids, cursor.as_deref(), window);
                assert_eq!(w.len(), window.min(rows));
                assert_eq!(w.iter().collect::<BTreeSet<_>>().len(), w.len(), "no id twice in a window");
                seen.extend(w.iter().cloned());
                // The answer's `through`: the last id asked.
                cursor = w.last().cloned();
            }
            assert_eq!(seen.len(), rows, "rows={rows} window={window}: every row checked within {scans} scans");
        }
        // A cursor past the last id, or naming a row since removed, continues in id order.
        let ids = vec!["a".to_string(), "c".to_string(), "e".to_string()];
        assert_eq!(verify_window(&ids, Some("z"), 2), vec!["a", "c"]);
        assert_eq!(verify_window(&ids, Some("b"), 2), vec!["c", "e"]);
        assert_eq!(verify_window(&ids, Some("e"), 5), vec!["a", "c", "e"]);
        // Empty and over-long ids are never sent.
        let odd = vec![String::new(), "x".repeat(MAX_VERIFY_ID_LEN + 1), "k1".to_string()];
        assert_eq!(verify_window(&odd, None, 10), vec!["k1"]);
        assert!(verify_window(&[], None, 10).is_empty());
    }

    #[test]
    fn a_full_verify_window_fits_the_work_spec_cap() {
        let ids: Vec<String> = (0..5000).map(|i| format!("k{i:063x}")[..MAX_VERIFY_ID_LEN].to_string()).collect();
        let w = verify_window(&ids, None, VERIFY_WINDOW);
        let bytes = serde_json::to_string(&w).unwrap().len();
        assert!(bytes <= VERIFY_BUDGET_BYTES && VERIFY_BUDGET_BYTES < kopiur_mover::workspec::MAX_WORK_SPEC_BYTES / 2);
        assert!(w.len() > 500, "the budget still checks hundreds of the longest ids: {}", w.len());
        // Real kopia ids (32 hex characters): the whole window fits.
        let real: Vec<String> = (0..5000).map(|i| format!("{i:032x}")).collect();
        assert_eq!(verify_window(&real, None, VERIFY_WINDOW).len(), VERIFY_WINDOW);
    }

    #[test]
    fn never_shrink_on_an_empty_listing_failed_or_not() {
        // An empty listing: a failed `snapshot list`, a wrong prefix, or really no manifests.
        let existing: Vec<ExistingSnapshot> = (0..10).map(|i| row(&format!("id{i}"))).collect();
        let p = plan(&[], false, &existing, Bounds::default(), t(10));
        assert!(!p.complete);
        assert!(p.deletes.is_empty() && p.creates.is_empty());
        assert_eq!(p.discovered_after, 10);
        // Truncated and empty is no better.
        let p = plan(&[], true, &existing, Bounds::default(), t(10));
        assert!(p.deletes.is_empty());
    }

    #[test]
    fn t44_one_new_owned_backup_makes_the_listing_complete() {
        let existing: Vec<ExistingSnapshot> =
            (0..10).map(|i| row(&format!("id{i}"))).chain(std::iter::once(own("new"))).collect();
        let p = plan(&[entry("new", "h", 50)], false, &existing, Bounds::default(), t(60));
        assert!(p.complete);
        assert_eq!(p.deletes.len(), 10);
        assert!(p.deletes.iter().all(|d| d.reason == DeleteReason::Absent));
        assert!(p.creates.is_empty());
        assert_eq!(p.discovered_after, 0);
    }

    #[test]
    fn rows_being_deleted_are_neither_recreated_nor_deleted_again() {
        let entries = vec![entry("a", "h", 1)];
        let p = plan(&entries, false, &[ExistingSnapshot { deleting: true, ..row("a") }], Bounds::default(), t(10));
        assert!(p.creates.is_empty() && p.deletes.is_empty());
    }

    #[test]
    fn max_age_bounds_creation_and_existing_rows() {
        let now = t(0) + Duration::days(10);
        let entries = vec![entry("old", "h", 0), entry("new", "h", 60 * 24 * 9)];
        let mut stale = row("gone");
        stale.end_time = Some(t(0));
        let p = plan(
            &entries,
            true, // even a truncated listing applies bounds
            &[row("old"), stale],
            Bounds { per_identity: None, max_age_days: Some(5) },
            now,
        );
        let (c, d) = ids(&p);
        assert_eq!(c, vec!["new".to_string()]);
        assert_eq!(
            d,
            vec![("old".to_string(), DeleteReason::OutOfBounds), ("gone".to_string(), DeleteReason::OutOfBounds)]
        );
    }

    #[test]
    fn per_identity_keeps_the_newest_n_per_user_and_host() {
        let entries = vec![entry("a1", "a", 1), entry("a2", "a", 2), entry("a3", "a", 3), entry("b1", "b", 1)];
        let p = plan(&entries, false, &[row("a1")], Bounds { per_identity: Some(2), max_age_days: None }, t(10));
        let (mut c, d) = ids(&p);
        c.sort();
        assert_eq!(c, vec!["a2".to_string(), "a3".to_string(), "b1".to_string()]);
        assert_eq!(d, vec![("a1".to_string(), DeleteReason::OutOfBounds)]);
        let p = plan(&entries, false, &[], Bounds { per_identity: Some(0), max_age_days: None }, t(10));
        assert!(p.creates.is_empty());
    }

    #[test]
    fn a_row_without_its_status_is_repaired_from_the_listing() {
        let entries = vec![entry("a", "h", 1)];
        let mut r = row("a");
        r.status_complete = false;
        r.kopia_snapshot_id = None;
        let p = plan(&entries, false, &[r], Bounds::default(), t(10));
        assert!(p.creates.is_empty());
        assert_eq!(p.repairs.len(), 1);
        assert_eq!(p.repairs[0].1.id, "a");
    }

    #[test]
    fn a_young_request_stays_pending_while_owners_are_being_deleted() {
        let now = t(10);
        let young = (now - Duration::seconds(20)).to_rfc3339();
        let old = (now - Duration::seconds(FOLLOW_UP_WINDOW_SECONDS)).to_rfc3339();
        assert!(honors_request(&young, 0, now));
        assert!(!honors_request(&young, 2, now));
        assert!(honors_request(&old, 2, now));
        assert!(honors_request("not-a-time", 2, now));
    }

    #[test]
    fn placement() {
        assert_eq!(place(Some("team"), "other", true, None).as_deref(), Some("team"));
        assert_eq!(place(None, "media", true, Some("fb")).as_deref(), Some("media"));
        assert_eq!(place(None, "media", false, Some("fb")).as_deref(), Some("fb"));
        assert_eq!(place(None, "media", false, None), None);
    }

    #[test]
    fn row_names_are_short_and_deterministic() {
        assert_eq!(row_name("nas", "0123456789abcdef0123456789abcdef"), "nas-0123456789ab");
        let long = row_name(&"r".repeat(80), "0123456789abcdef");
        assert!(long.len() <= 63, "{long}");
        assert_eq!(long, row_name(&"r".repeat(80), "0123456789abcdef"));
    }

    #[test]
    fn scan_requests_are_honored_once_and_coalesced() {
        let base = ScanFacts { spacing_seconds: 60, ..ScanFacts::default() };
        assert_eq!(scan_due(&base, t(0)), ScanDue::Never);
        let req = ScanFacts { requested: Some("r1".into()), ..base.clone() };
        assert_eq!(scan_due(&req, t(0)), ScanDue::Now { token: Some("r1".into()) });
        let honored = ScanFacts { honored: Some("r1".into()), ..req.clone() };
        assert_eq!(scan_due(&honored, t(0)), ScanDue::Never);
        // A newer request within 60 s of the last attempt waits.
        let newer = ScanFacts { requested: Some("r2".into()), attempt_at: Some(t(0)), ..honored.clone() };
        assert_eq!(scan_due(&newer, t(0) + Duration::seconds(30)), ScanDue::At(t(1)));
        assert_eq!(scan_due(&newer, t(1)), ScanDue::Now { token: Some("r2".into()) });
    }

    #[test]
    fn periodic_refresh_is_spaced_by_the_interval_from_the_last_attempt_or_refresh() {
        let f = ScanFacts {
            periodic_seconds: Some(3600),
            last_refresh_at: Some(t(0)),
            attempt_at: Some(t(30)),
            spacing_seconds: 60,
            ..ScanFacts::default()
        };
        assert_eq!(scan_due(&f, t(31)), ScanDue::At(t(90)));
        assert_eq!(scan_due(&f, t(90)), ScanDue::Now { token: None });
        let never = ScanFacts { periodic_seconds: Some(3600), ..ScanFacts::default() };
        assert_eq!(scan_due(&never, t(0)), ScanDue::Now { token: None });
    }
}
