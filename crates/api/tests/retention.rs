//! GFS retention selection (docs/design/api-contract.md §2.4, docs/design/pipeline.md §8.1).

use std::collections::BTreeSet;

use chrono::{DateTime, TimeZone, Utc};
use kopiur_api::domain::retention::{Bucket, Candidate, bucket_keeps, participates, select};
use kopiur_api::shared::Retention;
use kopiur_api::shared::phase::SnapshotOrigin;
use kopiur_api::snapshot::SnapshotPhase;
use proptest::prelude::*;

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn snap(name: &str, end: &str, pinned: bool) -> Candidate {
    Candidate { name: name.into(), end_time: at(end), kopia_snapshot_id: format!("k-{name}"), pinned }
}

fn names(set: &BTreeSet<String>) -> Vec<&str> {
    set.iter().map(String::as_str).collect()
}

#[test]
fn keep_daily_keeps_the_newest_of_each_day() {
    let c = vec![
        snap("a", "2026-03-01T01:00:00Z", false),
        snap("b", "2026-03-01T23:00:00Z", false),
        snap("c", "2026-03-02T05:00:00Z", false),
        snap("d", "2026-03-03T05:00:00Z", false),
    ];
    let r = Retention { keep_daily: Some(2), ..Default::default() };
    let s = select(&r, &c);
    assert_eq!(names(&s.keep), vec!["c", "d"]);
    assert_eq!(names(&s.prune), vec!["a", "b"]);
}

#[test]
fn buckets_union_with_latest_and_pins() {
    let c = vec![
        snap("old-pinned", "2025-01-01T00:00:00Z", true),
        snap("jan", "2026-01-15T00:00:00Z", false),
        snap("feb", "2026-02-15T00:00:00Z", false),
        snap("mar1", "2026-03-01T00:00:00Z", false),
        snap("mar2", "2026-03-02T00:00:00Z", false),
    ];
    let r = Retention { keep_latest: Some(1), keep_monthly: Some(2), ..Default::default() };
    let s = select(&r, &c);
    // latest: mar2; monthly: mar2 (March), feb; pinned: old-pinned.
    assert_eq!(names(&s.keep), vec!["feb", "mar2", "old-pinned"]);
    assert_eq!(names(&s.prune), vec!["jan", "mar1"]);
}

#[test]
fn iso_week_keys_follow_the_iso_year() {
    assert_eq!(Bucket::Weekly.key(at("2027-01-01T12:00:00Z")), "2026-W53");
    assert_eq!(Bucket::Hourly.key(at("2026-03-01T07:59:59Z")), "2026-03-01T07");
    assert_eq!(Bucket::Annual.key(at("2026-12-31T23:59:59Z")), "2026");
}

#[test]
fn ties_on_end_time_break_by_kopia_id() {
    let mut a = snap("x", "2026-03-01T00:00:00Z", false);
    a.kopia_snapshot_id = "k2".into();
    let mut b = snap("y", "2026-03-01T00:00:00Z", false);
    b.kopia_snapshot_id = "k1".into();
    let s = select(&Retention { keep_latest: Some(1), ..Default::default() }, &[a, b]);
    assert_eq!(names(&s.keep), vec!["y"]);
}

#[test]
fn only_succeeded_operator_snapshots_participate() {
    assert!(participates(Some(&SnapshotPhase::Succeeded), Some(&SnapshotOrigin::Scheduled), false));
    assert!(participates(Some(&SnapshotPhase::Succeeded), Some(&SnapshotOrigin::Manual), false));
    assert!(!participates(Some(&SnapshotPhase::Succeeded), Some(&SnapshotOrigin::Scheduled), true));
    assert!(!participates(Some(&SnapshotPhase::Unchanged), Some(&SnapshotOrigin::Scheduled), false));
    assert!(!participates(Some(&SnapshotPhase::Discovered), Some(&SnapshotOrigin::Discovered), false));
    assert!(!participates(Some(&SnapshotPhase::Succeeded), Some(&SnapshotOrigin::Replicated), false));
    assert!(!participates(Some(&SnapshotPhase::Unknown("Verified".into())), Some(&SnapshotOrigin::Scheduled), false));
}

fn candidates() -> impl Strategy<Value = Vec<Candidate>> {
    // Up to 60 snapshots over ~3 years, some sharing end times, some pinned.
    prop::collection::vec((0i64..100_000_000, 0u8..4, any::<bool>()), 0..60).prop_map(|rows| {
        rows.into_iter()
            .enumerate()
            .map(|(i, (offset, id, pin))| Candidate {
                name: format!("s{i:03}"),
                end_time: Utc.timestamp_opt(1_700_000_000 + offset - offset % 3600 * i64::from(id % 2), 0).unwrap(),
                kopia_snapshot_id: format!("k{id}{i:03}"),
                pinned: pin && i % 5 == 0,
            })
            .collect()
    })
}

fn retention() -> impl Strategy<Value = Retention> {
    let n = || prop::option::of(0i32..6);
    (n(), n(), n(), n(), n(), n()).prop_map(|(l, h, d, w, m, y)| Retention {
        keep_latest: l,
        keep_hourly: h,
        keep_daily: d,
        keep_weekly: w,
        keep_monthly: m,
        keep_annual: y,
    })
}

proptest! {
    #[test]
    fn kept_set_is_the_union_of_the_buckets_plus_pins(c in candidates(), r in retention()) {
        let s = select(&r, &c);
        let mut expected = BTreeSet::new();
        // Each rule evaluated on its own, with only that field set.
        let latest_only = Retention { keep_latest: r.keep_latest, ..Default::default() };
        let mut sorted = c.clone();
        sorted.sort_by(|a, b| b.end_time.cmp(&a.end_time).then(a.kopia_snapshot_id.cmp(&b.kopia_snapshot_id)));
        expected.extend(sorted.iter().take(latest_only.keep_latest.unwrap_or(0) as usize).map(|x| x.name.clone()));
        for (bucket, n) in [(Bucket::Hourly, r.keep_hourly), (Bucket::Daily, r.keep_daily), (Bucket::Weekly, r.keep_weekly), (Bucket::Monthly, r.keep_monthly), (Bucket::Annual, r.keep_annual)] {
            expected.extend(bucket_keeps(bucket, n.unwrap_or(0) as usize, &c));
        }
        expected.extend(c.iter().filter(|x| x.pinned).map(|x| x.name.clone()));
        prop_assert_eq!(&s.keep, &expected);
    }

    #[test]
    fn pinned_are_always_kept_and_keep_prune_partition_the_input(c in candidates(), r in retention()) {
        let s = select(&r, &c);
        for x in &c {
            if x.pinned { prop_assert!(s.keep.contains(&x.name)); }
            prop_assert!(s.keep.contains(&x.name) ^ s.prune.contains(&x.name));
        }
        prop_assert_eq!(s.keep.len() + s.prune.len(), c.len());
    }

    #[test]
    fn result_is_independent_of_input_order(c in candidates(), r in retention(), seed in any::<u64>()) {
        let mut shuffled = c.clone();
        // Deterministic Fisher-Yates from the seed.
        let mut state = seed | 1;
        for i in (1..shuffled.len()).rev() {
            state ^= state << 13; state ^= state >> 7; state ^= state << 17;
            shuffled.swap(i, (state % (i as u64 + 1)) as usize);
        }
        prop_assert_eq!(select(&r, &c), select(&r, &shuffled));
    }

    #[test]
    fn each_bucket_keeps_at_most_n_distinct_periods(c in candidates(), n in 0usize..8) {
        for bucket in Bucket::ALL {
            let kept = bucket_keeps(bucket, n, &c);
            prop_assert!(kept.len() <= n);
            let periods: BTreeSet<String> = c.iter().filter(|x| kept.contains(&x.name)).map(|x| bucket.key(x.end_time)).collect();
            prop_assert_eq!(periods.len(), kept.len());
            // Each kept one is the newest of its period.
            for x in c.iter().filter(|x| kept.contains(&x.name)) {
                let k = bucket.key(x.end_time);
                prop_assert!(c.iter().all(|y| bucket.key(y.end_time) != k || y.end_time <= x.end_time));
            }
        }
    }

    #[test]
    fn keep_latest_keeps_exactly_the_n_newest(c in candidates(), n in 0i32..10) {
        let s = select(&Retention { keep_latest: Some(n), ..Default::default() }, &c);
        let unpinned_kept = s.keep.iter().filter(|k| !c.iter().any(|x| &x.name == *k && x.pinned)).count();
        prop_assert!(unpinned_kept <= n as usize);
        prop_assert!(s.keep.len() >= (n as usize).min(c.len()));
    }
}
