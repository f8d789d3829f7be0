//! GFS retention selection (docs/design/api-contract.md §2.4, docs/design/pipeline.md §8.1).
//!
//! Participants are sorted newest first (end time descending, kopia id ascending on ties).
//! `keepLatest` keeps the N newest; each calendar bucket (UTC hour, day, ISO week, month,
//! year) keeps the newest participant of each distinct period until it holds N periods. The
//! kept set is the union of all of them plus every pinned participant; the rest is pruned.

use std::collections::BTreeSet;

use chrono::{DateTime, Datelike, Timelike, Utc};

use crate::shared::Retention;
use crate::shared::phase::SnapshotOrigin;
use crate::snapshot::SnapshotPhase;

/// One Snapshot that takes part in retention.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The Snapshot CR's name; what the selection returns.
    pub name: String,
    pub end_time: DateTime<Utc>,
    pub kopia_snapshot_id: String,
    pub pinned: bool,
}

/// The calendar buckets, in the order the spec lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Bucket {
    Hourly,
    Daily,
    Weekly,
    Monthly,
    Annual,
}

impl Bucket {
    pub const ALL: [Bucket; 5] = [Bucket::Hourly, Bucket::Daily, Bucket::Weekly, Bucket::Monthly, Bucket::Annual];

    /// The period key of an instant in UTC (`YYYY-MM-DDTHH`, `YYYY-MM-DD`, `GGGG-Www`,
    /// `YYYY-MM`, `YYYY`).
    pub fn key(self, at: DateTime<Utc>) -> String {
        match self {
            Self::Hourly => format!("{:04}-{:02}-{:02}T{:02}", at.year(), at.month(), at.day(), at.hour()),
            Self::Daily => format!("{:04}-{:02}-{:02}", at.year(), at.month(), at.day()),
            Self::Weekly => {
                let week = at.iso_week();
                format!("{:04}-W{:02}", week.year(), week.week())
            }
            Self::Monthly => format!("{:04}-{:02}", at.year(), at.month()),
            Self::Annual => format!("{:04}", at.year()),
        }
    }

    fn limit(self, retention: &Retention) -> usize {
        let n = match self {
            Self::Hourly => retention.keep_hourly,
            Self::Daily => retention.keep_daily,
            Self::Weekly => retention.keep_weekly,
            Self::Monthly => retention.keep_monthly,
            Self::Annual => retention.keep_annual,
        };
        n.unwrap_or(0).max(0) as usize
    }
}

/// Whether a Snapshot takes part in retention: Succeeded, not being deleted, and produced by
/// this operator's schedules, a user, or adoption (never discovered or replicated rows).
pub fn participates(phase: Option<&SnapshotPhase>, origin: Option<&SnapshotOrigin>, deleting: bool) -> bool {
    let succeeded = match phase {
        Some(SnapshotPhase::Succeeded) => true,
        Some(
            SnapshotPhase::Pending
            | SnapshotPhase::Running
            | SnapshotPhase::Unchanged
            | SnapshotPhase::Failed
            | SnapshotPhase::Discovered
            | SnapshotPhase::Deleting
            | SnapshotPhase::Unknown(_),
        )
        | None => false,
    };
    let origin_ok = match origin {
        Some(SnapshotOrigin::Scheduled | SnapshotOrigin::Manual | SnapshotOrigin::Adopted) => true,
        Some(SnapshotOrigin::Discovered | SnapshotOrigin::Replicated | SnapshotOrigin::Unknown(_)) | None => false,
    };
    succeeded && origin_ok && !deleting
}

/// The outcome: names to keep and names to prune (disjoint, together every candidate).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    pub keep: BTreeSet<String>,
    pub prune: BTreeSet<String>,
}

fn sorted(candidates: &[Candidate]) -> Vec<&Candidate> {
    let mut sorted: Vec<&Candidate> = candidates.iter().collect();
    sorted.sort_by(|a, b| {
        b.end_time
            .cmp(&a.end_time)
            .then_with(|| a.kopia_snapshot_id.cmp(&b.kopia_snapshot_id))
            .then_with(|| a.name.cmp(&b.name))
    });
    sorted
}

/// What one bucket keeps on its own.
pub fn bucket_keeps(bucket: Bucket, n: usize, candidates: &[Candidate]) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut keep = BTreeSet::new();
    for c in sorted(candidates) {
        let key = bucket.key(c.end_time);
        if seen.contains(&key) {
            continue;
        }
        if seen.len() == n {
            break;
        }
        seen.insert(key);
        keep.insert(c.name.clone());
    }
    keep
}

/// Selects what `retention` keeps among `candidates` (which must already be participants).
pub fn select(retention: &Retention, candidates: &[Candidate]) -> Selection {
    let newest = sorted(candidates);
    let latest = retention.keep_latest.unwrap_or(0).max(0) as usize;
    let mut keep: BTreeSet<String> = newest.iter().take(latest).map(|c| c.name.clone()).collect();
    for bucket in Bucket::ALL {
        keep.extend(bucket_keeps(bucket, bucket.limit(retention), candidates));
    }
    keep.extend(candidates.iter().filter(|c| c.pinned).map(|c| c.name.clone()));
    let prune = candidates.iter().map(|c| c.name.clone()).filter(|n| !keep.contains(n)).collect();
    Selection { keep, prune }
}
