//! The families read from their source at each scrape, written by prometheus-client
//! `Collector`s (the library writes the headers, the labels, their escaping and the values):
//! - `kopiur_process_resident_memory_bytes`, from `/proc/self/statm`;
//! - `kopiur_resource_phase`, whose one header three writers share: the repositories' phases
//!   ([`RepoGauge`], read from their stores by `main.rs` for each rendering), the kinds whose
//!   slice is held ([`super::Metrics::resource_phase`]) and the kinds written straight from
//!   their reflector store ([`LiveSeries`]);
//! - the repositories' breaker gauges, from the same [`RepoGauge`]s.
//!
//! These are not registered families because nothing of them is held between scrapes: a held
//! per-object family over 50,000 Snapshots cost about 300 bytes a series, and as much again
//! while each pass built its replacement; and a registered family has one writer, not three
//! under one header.
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder};
use prometheus_client::metrics::MetricType;

use super::RepoGauge;
use super::family::GaugeFamily;
use super::labels::{PhaseLabels, PhaseRow, RepoRow};

/// Series written at scrape time straight from a reflector store: the function calls its
/// argument with each row, so nothing per object is held between scrapes.
pub type LiveSeries = Box<dyn Fn(&mut dyn FnMut(PhaseRow<'_>)) + Send + Sync>;

/// The live writers of `kopiur_resource_phase`, by kind.
pub(super) type LiveKinds = Arc<Mutex<BTreeMap<&'static str, LiveSeries>>>;

pub(super) const RESOURCE_PHASE: (&str, &str) = ("kopiur_resource_phase", "1 for the current phase of each object.");

/// The repositories' breaker gauges: name, help, value.
type RepoGaugeValue = fn(&RepoGauge) -> Option<i64>;
const REPO_GAUGES: [(&str, &str, RepoGaugeValue); 3] = [
    (
        "kopiur_repository_consecutive_backend_failures",
        "Consecutive failed backend probes of a repository; present whenever it has a health status (0 after a recovery).",
        |r| r.streak,
    ),
    (
        "kopiur_repository_breaker_open_since_timestamp_seconds",
        "When the repository's breaker opened; present only while it is open.",
        |r| r.open_since,
    ),
    (
        "kopiur_repository_strict_retry_holdoff_seconds",
        "The strict-retry holdoff of a repository whose breaker is open; present only while it is open.",
        |r| r.holdoff,
    ),
];

/// `kopiur_process_resident_memory_bytes`, every replica.
#[derive(Debug)]
pub(super) struct ProcessMemory;

impl Collector for ProcessMemory {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(pages) = std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()))
        else {
            return Ok(());
        };
        encoder
            .encode_descriptor(
                "kopiur_process_resident_memory_bytes",
                "Resident memory of the controller process.",
                None,
                MetricType::Gauge,
            )?
            .encode_gauge(&(pages * 4096))
    }
}

/// The store-backed families of one rendering (the leader's).
pub(super) struct StoreFamilies {
    pub repos: Vec<RepoGauge>,
    pub held: GaugeFamily<PhaseLabels>,
    pub live: LiveKinds,
}

impl std::fmt::Debug for StoreFamilies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreFamilies").field("repos", &self.repos.len()).finish_non_exhaustive()
    }
}

fn series(encoder: &mut MetricEncoder, labels: &impl prometheus_client::encoding::EncodeLabelSet, v: i64) -> Fmt {
    encoder.encode_family(labels)?.encode_gauge(&v)
}

type Fmt = Result<(), std::fmt::Error>;

impl Collector for StoreFamilies {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Fmt {
        let (name, help) = RESOURCE_PHASE;
        let mut phase = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for r in &self.repos {
            if let Some(p) = &r.phase {
                let row = PhaseRow { kind: r.kind, namespace: &r.namespace, name: &r.name, phase: p };
                series(&mut phase, &row, 1)?;
            }
        }
        self.held.encode_series(&mut phase)?;
        if let Ok(live) = self.live.lock() {
            for rows in live.values() {
                let mut res = Ok(());
                rows(&mut |row| {
                    if res.is_ok() {
                        res = series(&mut phase, &row, 1);
                    }
                });
                res?;
            }
        }
        for (name, help, value) in REPO_GAUGES {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for r in &self.repos {
                if let Some(v) = value(r) {
                    series(&mut family, &RepoRow { kind: r.kind, namespace: &r.namespace, name: &r.name }, v)?;
                }
            }
        }
        Ok(())
    }
}
