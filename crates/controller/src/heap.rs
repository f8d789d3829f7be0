//! Allocator hygiene for a long-running controller on glibc.
//!
//! glibc gives every thread that contends on `malloc` its own arena (up to 8 per core) and
//! keeps freed pages inside them. A start-up that deserialises thousands of objects and
//! writes their status leaves tens of MiB freed but resident. Two settings keep the resident
//! set close to the live heap:
//! - at most [`ARENA_MAX`] arenas (set before the runtime starts its threads);
//! - a periodic `malloc_trim(0)`, which hands free pages at the top of each arena and whole
//!   free pages inside them back to the kernel.
//!
//! Elsewhere (musl, other systems) both are no-ops.
use kopiur_api::names::label;
use std::time::Duration;

/// Arenas glibc may create (the default is 8 × cores).
pub const ARENA_MAX: i32 = 2;
/// How often freed memory is returned to the kernel.
pub const TRIM_PERIOD: Duration = Duration::from_secs(15);

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod imp {
    pub fn limit_arenas(n: i32) -> bool {
        // SAFETY: mallopt only adjusts allocator parameters; it is called before other
        // threads exist and reports failure as 0.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, n) == 1 }
    }
    pub fn trim() -> bool {
        // SAFETY: malloc_trim is thread-safe and only releases free memory.
        unsafe { libc::malloc_trim(0) == 1 }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod imp {
    pub fn limit_arenas(_n: i32) -> bool {
        false
    }
    pub fn trim() -> bool {
        false
    }
}

/// The client-side-apply copy `kubectl apply` keeps on every object it wrote.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what no reconciler reads before an object enters a reflector store: `managedFields`
/// (most of an object's bytes) and the `kubectl apply` copy of the whole manifest. Stores are
/// read-only views; nothing here writes an object back from them (status goes through patches),
/// so the dropped fields stay untouched on the server.
pub fn slim(meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) {
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(LAST_APPLIED);
        if a.is_empty() {
            meta.annotations = None;
        }
    }
}

/// [`slim`] for any kind's feed.
pub fn slim_object<K: kube::Resource>(o: &mut K) {
    slim(o.meta_mut());
}

/// [`slim`] for the Snapshot feed, the store that grows with a fleet. Also:
/// - drops the labels no reader of the store reads. The only label read from a stored Snapshot
///   is `origin` (`snapshot::reconcile::origin`, `deletion::observe::is_discovered`), and both
///   read `status.origin` too; the label is kept only while it says something the status does
///   not (no `status.origin` yet, or a different one). A catalog row's four labels cost about
///   900 bytes a row in the store (a B-tree leaf of 11 slots and eight strings). Readers that
///   need the others (the catalog's row matching, the CLI) list them from the API server.
/// - trims the conditions list to its length (deserialised, three conditions sit in room for
///   four: 128 bytes a row).
pub fn slim_snapshot(s: &mut kopiur_api::Snapshot) {
    slim(&mut s.metadata);
    let status_origin = s.status.as_ref().and_then(|st| st.origin.as_ref()).map(|o| o.as_str().to_string());
    if let Some(labels) = s.metadata.labels.as_mut() {
        labels.retain(|k, v| k == STORE_READ_LABEL && status_origin.as_deref() != Some(v.as_str()));
        if labels.is_empty() {
            s.metadata.labels = None;
        }
    }
    if let Some(st) = s.status.as_mut() {
        st.conditions.shrink_to_fit();
    }
    compact(s);
}

/// Replaces `o` with a fresh copy of itself. A watch page deserialises its objects together,
/// each one's kept fields interleaved with the blocks of the fields `slim` drops, so a store
/// filled from the initial list keeps the freed blocks between its rows as holes glibc cannot
/// return. The copy is made while the original is alive, from the holes earlier originals
/// left, and the original is then freed whole for the next page to reuse. Measured with
/// `pipeline-bench` over rows that need no status write at start (nothing later refills the
/// holes): see docs/controller.md, "Memory".
pub fn compact<K: Clone>(o: &mut K) {
    *o = o.clone();
}

/// The one label any reader takes from a stored Snapshot ([`slim_snapshot`] keeps no other).
pub const STORE_READ_LABEL: &str = label::ORIGIN;

/// Caps glibc's arenas at [`ARENA_MAX`]; call first thing in `main`, before any thread.
/// Returns whether the setting took effect.
pub fn limit_arenas() -> bool {
    imp::limit_arenas(ARENA_MAX)
}

/// Returns free memory to the kernel; true when some was released.
pub fn trim() -> bool {
    imp::trim()
}

/// Trims every [`TRIM_PERIOD`], forever.
pub async fn trim_periodically() {
    let mut tick = tokio::time::interval(TRIM_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        tokio::task::spawn_blocking(trim).await.ok();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slim_snapshot_trims_the_conditions_list_and_keeps_every_condition() {
        let cond = |t: &str| {
            serde_json::json!({"type": t, "status": "False", "reason": "R", "message": "",
            "lastTransitionTime": "2026-12-03T00:00:00Z"})
        };
        // From text, as a watch deserialises it (a `Value` would give serde the exact length).
        let text = serde_json::json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": "s", "namespace": "t", "managedFields": [{"manager": "x"}]},
            "spec": {"repository": {"name": "r"}},
            "status": {"conditions": [cond("Ready"), cond("Reconciling"), cond("Stalled")]}
        })
        .to_string();
        let mut s: kopiur_api::Snapshot = serde_json::from_str(&text).unwrap();
        let before = s.status.as_ref().unwrap().conditions.clone();
        assert!(s.status.as_ref().unwrap().conditions.capacity() > 3, "serde leaves room to grow");
        slim_snapshot(&mut s);
        let st = s.status.as_ref().unwrap();
        assert_eq!(st.conditions, before);
        assert_eq!(st.conditions.capacity(), 3);
        assert!(s.metadata.managed_fields.is_none());
    }

    fn row_with(labels: serde_json::Value, origin: Option<&str>) -> kopiur_api::Snapshot {
        let mut v = serde_json::json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": "s", "namespace": "t", "labels": labels},
            "spec": {"repository": {"name": "r"}},
        });
        if let Some(o) = origin {
            v["status"] = serde_json::json!({"origin": o});
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn slim_snapshot_keeps_the_origin_label_only_while_the_status_does_not_say_it() {
        use kopiur_api::names::label;
        let catalog_labels = serde_json::json!({
            label::MANAGED_BY: "kopiur", label::ORIGIN: "discovered",
            label::SNAPSHOT_ID: "k0123", label::REPOSITORY_UID: "u-1"
        });
        // The status says the same: no label is left, and both readers answer as before.
        let mut settled = row_with(catalog_labels.clone(), Some("discovered"));
        let (origin, discovered) = (crate::labels::origin(&settled), crate::deletion::observe::is_discovered(&settled));
        slim_snapshot(&mut settled);
        assert!(settled.metadata.labels.is_none(), "{:?}", settled.metadata.labels);
        assert_eq!(crate::labels::origin(&settled), origin);
        assert_eq!(crate::deletion::observe::is_discovered(&settled), discovered);
        // No status yet (a row between its create and its status write): the label is the
        // only record of the origin and stays.
        let mut fresh = row_with(catalog_labels.clone(), None);
        slim_snapshot(&mut fresh);
        let kept = fresh.metadata.labels.as_ref().unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept.get(label::ORIGIN).map(String::as_str), Some("discovered"));
        assert!(crate::deletion::observe::is_discovered(&fresh));
        assert_eq!(crate::labels::origin(&fresh), kopiur_api::shared::phase::SnapshotOrigin::Discovered);
        // A status that disagrees with the label: the label stays, so `is_discovered` (label or
        // status) answers as it did.
        let mut odd = row_with(catalog_labels, Some("manual"));
        let before = crate::deletion::observe::is_discovered(&odd);
        slim_snapshot(&mut odd);
        assert!(before);
        assert!(crate::deletion::observe::is_discovered(&odd));
        // Labels nobody reads from the store go even without an origin.
        let mut other = row_with(serde_json::json!({"team": "media"}), Some("scheduled"));
        slim_snapshot(&mut other);
        assert!(other.metadata.labels.is_none());
    }

    #[test]
    fn slim_drops_managed_fields_and_the_kubectl_copy_only() {
        let mut meta: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta = serde_json::from_value(serde_json::json!({
            "name": "s", "labels": {"a": "b"},
            "annotations": {LAST_APPLIED: "{\"big\":true}", "kopiur.home-operations.com/skip-snapshot-cleanup": "true"},
            "managedFields": [{"manager": "kubectl", "operation": "Apply"}]
        }))
        .unwrap();
        slim(&mut meta);
        assert!(meta.managed_fields.is_none());
        let a = meta.annotations.as_ref().unwrap();
        assert!(!a.contains_key(LAST_APPLIED));
        assert_eq!(a.get("kopiur.home-operations.com/skip-snapshot-cleanup").map(String::as_str), Some("true"));
        assert_eq!(meta.labels.as_ref().unwrap().get("a").map(String::as_str), Some("b"));
        let mut only_copy: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta =
            serde_json::from_value(serde_json::json!({"name": "t", "annotations": {LAST_APPLIED: "{}"}})).unwrap();
        slim(&mut only_copy);
        assert!(only_copy.annotations.is_none());
    }

    /// Resident set size of this process, from /proc (Linux only).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn rss_bytes() -> u64 {
        let s = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
        pages * 4096
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn trim_returns_freed_memory_to_the_kernel() {
        assert!(limit_arenas(), "mallopt(M_ARENA_MAX) is accepted");
        // 64 MiB in small blocks, touched, then freed except a little at the end, so the
        // freed pages sit below a live block where the top-of-heap release cannot reach them.
        let mut blocks: Vec<Vec<u8>> = (0..16384).map(|i| vec![(i % 251) as u8; 4096]).collect();
        let keep = blocks.split_off(16000);
        drop(blocks);
        let before = rss_bytes();
        trim();
        let after = rss_bytes();
        assert!(keep.iter().all(|b| b.len() == 4096));
        assert!(
            before.saturating_sub(after) >= 32 << 20,
            "malloc_trim released {} KiB of ~60 MiB freed (rss {} -> {} KiB)",
            before.saturating_sub(after) >> 10,
            before >> 10,
            after >> 10
        );
    }
}
